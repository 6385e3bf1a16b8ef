//! Loom models of the emit path's own protocols (`src/emit/`,
//! `src/bulkhead.rs`); the breaker's and the queue's are in `breaker.rs`
//! and `dlq.rs` here.
//!
//! Run: `RUSTFLAGS="--cfg tailguard_loom" LOOM_MAX_PREEMPTIONS=2 cargo test --release --test loom -- emit::`.
//!
//! | protocol (where) | models |
//! |---|---|
//! | shutdown against diversions: `closed` and the `diverting` count, both SeqCst, so no trigger lands in the queue after the drain (`emit/mod.rs`) | `a_diversion_racing_shutdown_is_drained_or_handed_back` |
//! | the bulkhead's slots: a CAS on the in-flight count, given back on drop (`bulkhead.rs`) | `the_bulkhead_never_admits_more_than_its_bound` |
//! | one replay at a time: the replay turn (`emit/replay.rs`) | `two_replays_never_run_at_once` |
//! | a replay's trigger against a shutdown's drain: kept under the queue's lock only if not shut down (`emit/replay.rs`) | `a_replay_racing_shutdown_keeps_nothing_and_loses_nothing`, `a_replay_run_racing_shutdown_keeps_nothing_and_loses_nothing` |
//! | the turn of a replay the caller drives, held by the run and its call until both are gone (`emit/replay_run.rs`) | `a_replay_call_outliving_its_run_holds_the_turn_until_its_trigger_is_back` |
#![cfg(tailguard_loom)]

use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::sync::Arc;
use loom::thread;
use tailguard::clock::ManualClock;
use tailguard::dlq::{DeadLetterQueue, Priority};
use tailguard::emit::{Emitted, Emitter, HandBack, ReplayStop};
use tailguard::{Breaker, Bulkhead};

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(2);
    }
    builder.check(f);
}

fn open_emitter(capacity: usize) -> (Breaker, Emitter<u32>) {
    let b = Breaker::builder().clock(ManualClock::new()).build().unwrap();
    b.trip_now();
    let e = Emitter::builder(b.clone(), DeadLetterQueue::with_capacity(capacity).unwrap())
        .build()
        .unwrap();
    (b, e)
}

#[test]
fn a_diversion_racing_shutdown_is_drained_or_handed_back() {
    model(|| {
        let (_b, e) = open_emitter(2);
        let emitter = e.clone();
        let t = thread::spawn(
            move || match emitter.emit_blocking(7, Priority::Routine, |_, _| Ok::<_, ()>(())) {
                Emitted::Diverted { displaced: None, .. } => false,
                Emitted::HandedBack {
                    trigger: 7,
                    not_queued: HandBack::ShutDown,
                    ..
                } => true,
                _ => panic!("unexpected outcome"),
            },
        );
        let mut drained = 0;
        e.shutdown(|t, _| {
            assert_eq!(t, 7);
            drained += 1;
        });
        let handed_back = t.join().unwrap();
        assert_eq!(drained + usize::from(handed_back), 1, "exactly once, never stranded");
        assert_eq!(e.queue().len(), 0, "nothing landed after the drain");
    });
}

#[test]
fn the_bulkhead_never_admits_more_than_its_bound() {
    model(|| {
        let bulkhead = Bulkhead::new(1).unwrap();
        let inside = Arc::new(AtomicUsize::new(0));
        let handles: Vec<_> = (0..2)
            .map(|_| {
                let (bulkhead, inside) = (bulkhead.clone(), Arc::clone(&inside));
                thread::spawn(move || {
                    if let Ok(slot) = bulkhead.try_acquire() {
                        assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "two calls inside");
                        inside.fetch_sub(1, Ordering::SeqCst);
                        drop(slot);
                        true
                    } else {
                        false
                    }
                })
            })
            .collect();
        let admitted = handles.into_iter().map(|h| h.join().unwrap()).filter(|&a| a).count();
        assert!(admitted >= 1, "a free slot is never refused to everyone");
        assert_eq!(bulkhead.in_flight(), 0, "every slot given back");
        assert_eq!(bulkhead.rejections(), 2 - admitted as u64);
    });
}

#[test]
fn two_replays_never_run_at_once() {
    model(|| {
        let (b, e) = open_emitter(2);
        let _ = e.emit_blocking(1, Priority::Routine, |_, _| Ok::<_, ()>(()));
        b.reset();
        let inside = Arc::new(AtomicUsize::new(0));
        let (emitter, flag) = (e.clone(), Arc::clone(&inside));
        let replay = move || {
            emitter.replay_blocking(1, |_, _| {
                assert_eq!(flag.fetch_add(1, Ordering::SeqCst), 0, "two replays inside");
                flag.fetch_sub(1, Ordering::SeqCst);
                Ok::<_, ()>(())
            })
        };
        let t = thread::spawn(replay.clone());
        let mine = replay();
        let theirs = t.join().unwrap();
        let delivered = mine.delivered + theirs.delivered;
        assert_eq!(delivered, 1, "the one trigger, once");
        for r in [&mine, &theirs] {
            assert!(matches!(
                r.stopped,
                None | Some(ReplayStop::Busy) | Some(ReplayStop::Empty)
            ));
        }
    });
}

/// A blocking replay whose call fails, racing a shutdown: no lock is held
/// while the call runs, so the shutdown never waits for it; the replay then
/// keeps its trigger at the head only if the shutdown's drain can still
/// take it, and hands it back otherwise. Every trigger is drained, handed
/// back or delivered exactly once, and nothing is kept after the shutdown.
#[test]
fn a_replay_racing_shutdown_keeps_nothing_and_loses_nothing() {
    model(|| {
        let (b, e) = open_emitter(2);
        let _ = e.emit_blocking(1, Priority::Routine, |_, _| Ok::<_, ()>(()));
        b.reset();
        let emitter = e.clone();
        let t = thread::spawn(move || emitter.replay_blocking(1, |_, _| Err::<(), _>(())));
        let mut drained = 0;
        e.shutdown(|t, _| {
            assert_eq!(t, 1);
            drained += 1;
        });
        let r = t.join().unwrap();
        let handed_back = usize::from(r.handed_back.is_some());
        // The replay may also have found the queue already drained (Empty).
        assert_eq!(drained + handed_back, 1, "exactly once: {r:?}");
        let s = e.stats();
        assert!(!s.pending && s.queued == 0, "nothing kept after the shutdown: {s:?}");
        assert_eq!(s.into_queue(), s.out_of_queue(), "{s:?}");
    });
}

#[test]
fn a_replay_run_racing_shutdown_keeps_nothing_and_loses_nothing() {
    model(|| {
        let (b, e) = open_emitter(2);
        let _ = e.emit_blocking(1, Priority::Routine, |_, _| Ok::<_, ()>(()));
        b.reset();
        let emitter = e.clone();
        let t = thread::spawn(move || {
            let mut run = emitter.replay_run::<()>(1);
            if let Some(call) = run.next_call() {
                run.failed(call, ());
            }
            run.finish()
        });
        let mut drained = 0;
        e.shutdown(|t, _| {
            assert_eq!(t, 1);
            drained += 1;
        });
        let r = t.join().unwrap();
        assert_eq!(drained + usize::from(r.handed_back.is_some()), 1, "exactly once: {r:?}");
        let s = e.stats();
        assert!(!s.pending && s.queued == 0, "nothing kept after the shutdown: {s:?}");
        assert_eq!(s.into_queue(), s.out_of_queue(), "{s:?}");
    });
}

#[test]
fn a_replay_call_outliving_its_run_holds_the_turn_until_its_trigger_is_back() {
    model(|| {
        let (b, e) = open_emitter(2);
        let _ = e.emit_blocking(1, Priority::Routine, |_, _| Ok::<_, ()>(()));
        b.reset();
        let mut run = e.replay_run::<()>(1);
        let call = run.next_call().expect("the trigger");
        let t = thread::spawn(move || drop(call)); // cancelled: kept at the head
        let _ = run.finish(); // the call may still be out
                              // Another replay gets the turn only once the trigger is back at
                              // the head: it never finds the queue empty.
        let mut other = e.replay_run::<()>(1);
        let got = other.next_call().map(|c| {
            let t = *c.trigger();
            other.delivered(c);
            t
        });
        let r = other.finish();
        match got {
            Some(t) => assert_eq!(t, 1),
            None => assert_eq!(r.stopped, Some(ReplayStop::Busy), "{r:?}"),
        }
        t.join().unwrap();
        let s = e.stats();
        assert_eq!(s.replayed + u64::from(s.pending), 1, "delivered or kept: {s:?}");
        assert_eq!(s.into_queue(), s.out_of_queue(), "{s:?}");
    });
}
