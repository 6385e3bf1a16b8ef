//! Replay: class order, a failing trigger kept at the head, one replay at a
//! time, no attempt used by a breaker's refusal, reentrant calls that
//! return, and the async replay's timeouts and cancellation.

use crate::support::emit::*;
use std::sync::Mutex;
use std::time::Duration;
use tailguard::clock::ManualClock;
use tailguard::dlq::{DeadLetterQueue, Priority};
use tailguard::emit::{Divert, Emitter, ReplayStop};
use tailguard::{Breaker, State};

#[test]
fn replay_keeps_class_order_and_keeps_a_failing_trigger_at_the_head() {
    let clock = ManualClock::new();
    let b = breaker(&clock);
    let e: Emitter<u32> = Emitter::builder(b.clone(), DeadLetterQueue::with_capacity(64).unwrap())
        .replay_attempts(2)
        .unwrap()
        .build()
        .unwrap();
    b.trip_now();
    for i in 0..10u32 {
        let class = if i % 3 == 0 {
            Priority::Critical
        } else {
            Priority::Routine
        };
        let _ = e.emit_blocking(i, class, |_, _| Ok::<_, ()>(()));
    }
    assert_eq!(
        e.replay_blocking(100, |_, _| Ok::<_, ()>(())).stopped,
        Some(ReplayStop::NotClosed)
    );
    b.reset();
    let seen = Mutex::new(Vec::new());
    // Rate bound: two at a time.
    let r = e.replay_blocking(2, |t, _| {
        seen.lock().unwrap().push(*t);
        Ok::<_, ()>(())
    });
    assert_eq!((r.delivered, r.stopped), (2, None));
    // Trigger 9 fails: kept at the head, replay stops.
    let r = e.replay_blocking(100, |t, _| {
        seen.lock().unwrap().push(*t);
        if *t == 9 {
            Err("still down")
        } else {
            Ok(())
        }
    });
    assert_eq!(
        (r.delivered, r.stopped),
        (1, Some(ReplayStop::Failed(Divert::Failed("still down"))))
    );
    assert_eq!(r.handed_back, None);
    assert!(e.stats().pending);
    // Second failure of trigger 9: its last attempt; handed back.
    let r = e.replay_blocking(100, |t, _| {
        seen.lock().unwrap().push(*t);
        if *t == 9 {
            Err("still down")
        } else {
            Ok(())
        }
    });
    assert_eq!(r.handed_back, Some((9, Priority::Critical)));
    b.reset();
    let r = e.replay_blocking(100, |t, _| {
        seen.lock().unwrap().push(*t);
        Ok::<_, ()>(())
    });
    assert_eq!((r.delivered, r.stopped), (6, Some(ReplayStop::Empty)));
    // Critical first (0, 3, 6, 9), then routine, each class in order; 9
    // tried twice, never overtaken within its class.
    assert_eq!(*seen.lock().unwrap(), [0, 3, 6, 9, 9, 1, 2, 4, 5, 7, 8]);
    let s = e.stats();
    assert_eq!(
        (s.replayed, s.replay_handed_back, s.queued, s.pending),
        (9, 1, 0, false)
    );
    assert_conserved(&s, 10);
}

#[test]
fn replay_turned_away_by_the_breaker_uses_no_attempt() {
    let clock = ManualClock::new();
    let b = breaker(&clock);
    let bulkhead = tailguard::Bulkhead::new(1).unwrap();
    let e: Emitter<u32> = Emitter::builder(b.clone(), DeadLetterQueue::with_capacity(8).unwrap())
        .shared_bulkhead(bulkhead.clone())
        .replay_attempts(1)
        .unwrap()
        .build()
        .unwrap();
    b.trip_now();
    let _ = e.emit_blocking(1, Priority::Routine, |_, _| Ok::<_, ()>(()));
    b.reset();
    let held = bulkhead.try_acquire().unwrap();
    for _ in 0..3 {
        let r = e.replay_blocking(10, |_, _| -> Result<(), ()> { unreachable!("not admitted") });
        assert_eq!(r.stopped, Some(ReplayStop::Failed(Divert::BulkheadFull)));
        assert_eq!(r.handed_back, None);
    }
    drop(held);
    assert_eq!(e.replay_blocking(10, |_, _| Ok::<_, ()>(())).delivered, 1);
}

#[test]
fn one_replay_at_a_time() {
    let clock = ManualClock::new();
    let b = breaker(&clock);
    let e = emitter::<u32>(&b, 8);
    b.trip_now();
    let _ = e.emit_blocking(1, Priority::Routine, |_, _| Ok::<_, ()>(()));
    b.reset();
    let r = e.replay_blocking(10, |_, _| {
        let nested = e.replay_blocking(10, |_, _| Ok::<_, ()>(()));
        assert_eq!(nested.stopped, Some(ReplayStop::Busy));
        Ok::<_, ()>(())
    });
    assert_eq!(r.delivered, 1);
}

/// A call future that completes at once with an error, and panics when it
/// is dropped (its destructor is the consumer's code too).
/// Metrics-only never rejects: replay runs too, whatever the shadow state.
///
/// Regression (issue 15's hostile review).
#[test]
fn a_metrics_only_breaker_never_stops_a_replay() {
    let b = plain_breaker();
    let e = Emitter::builder(b.clone(), DeadLetterQueue::with_capacity(8).unwrap())
        .build()
        .unwrap();
    let _ = e.emit_blocking(1u64, Priority::Routine, |_, _| Err::<(), _>(()));
    b.metrics_only();
    b.trip_now();
    assert_eq!(b.state(), State::Open, "shadow state");
    assert!(b.allow().is_ok(), "allow passes");
    assert!(e
        .emit_blocking(2u64, Priority::Routine, |_, _| Ok::<_, ()>(()))
        .is_delivered());
    let r = e.replay_blocking(10, |_, _| Ok::<_, ()>(()));
    assert_eq!(r.delivered, 1, "metrics-only never rejects, yet replay: {r:?}");
}

fn backlog_of_three() -> (Breaker, Emitter<u64>) {
    let b = Breaker::builder().ticker(false).build().unwrap();
    let e = Emitter::builder(b.clone(), DeadLetterQueue::with_capacity(8).unwrap())
        .build()
        .unwrap();
    b.trip_now();
    for i in 0..3 {
        let _ = e.emit_blocking(i, Priority::Routine, |_, _| Ok::<_, ()>(()));
    }
    b.reset();
    (b, e)
}

/// Runs `f` on a thread of its own; fails if it has not returned in 5 s.
fn returns(what: &str, f: impl FnOnce() + Send + 'static) {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        f();
        let _ = tx.send(());
    });
    assert!(
        rx.recv_timeout(Duration::from_secs(5)).is_ok(),
        "{what}: still blocked after 5 s (self-deadlock)"
    );
}

/// A consumer that, on a fatal answer during a replay, shuts the emitter
/// down to save the backlog (shutdown: "returns how many it handed over").
/// The blocking replay holds the replay lock through its calls; the
/// shutdown on the same thread waits for it forever.
/// No lock is held while user code runs: `shutdown` from inside a blocking
/// replay's call returns (the replay then hands its trigger back), and a
/// replay from inside a `drain` sink returns at once.
///
/// Regression (issue 15's hostile review).
#[test]
fn shutdown_from_inside_a_blocking_replay_call_returns() {
    let (_b, e) = backlog_of_three();
    returns("shutdown inside replay_blocking's call", move || {
        let e2 = e.clone();
        let _ = e.replay_blocking(10, move |_, _| {
            let saved = e2.shutdown(|_, _| {});
            assert_eq!(saved, 2);
            Err::<(), _>(())
        });
    });
}

/// `replay_blocking`: "One replay runs at a time per emitter; another one
/// meanwhile returns at once with ReplayStop::Busy" (or NotClosed). Called
/// from a `drain` sink (move one trigger elsewhere, then replay the rest),
/// it takes the replay turn and blocks on the lock the drain holds.
///
/// Regression (issue 15's hostile review).
#[test]
fn replay_from_inside_a_drain_sink_returns() {
    let (_b, e) = backlog_of_three();
    returns("replay_blocking inside drain's sink", move || {
        let e2 = e.clone();
        e.drain(1, move |_, _| {
            let _ = e2.replay_blocking(10, |_, _| Ok::<_, ()>(()));
        });
    });
}

/// A blocking replay gives its call's bulkhead slot back before it reads
/// the call's end (what it did before replay had one policy for both
/// drivers): a thread reading the bulkhead at that instant (put there by a
/// hook on the end's clock read) finds it free.
///
/// Regression (issue 17's hostile review: replay's one policy).
#[test]
fn a_blocking_replay_gives_its_bulkhead_slot_back_before_it_reads_the_end() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use tailguard::Bulkhead;
    let clock = crate::support::hook::HookClock::new();
    let b = Breaker::builder().clock(clock.source()).ticker(false).build().unwrap();
    let bulkhead = Bulkhead::new(1).unwrap();
    let e: Emitter<u64> = Emitter::builder(b.clone(), DeadLetterQueue::with_capacity(8).unwrap())
        .shared_bulkhead(bulkhead.clone())
        .build()
        .unwrap();
    let _ = e.enqueue(7, Priority::Routine);
    let at_end = Arc::new(AtomicUsize::new(usize::MAX));
    let r = e.replay_blocking(1, |_, _| {
        assert_eq!(bulkhead.in_flight(), 1, "the call holds the slot");
        // The next read of the breaker's clock is the replay's end of this call.
        let (bulkhead, at_end) = (bulkhead.clone(), Arc::clone(&at_end));
        clock.at_read(1, move || at_end.store(bulkhead.in_flight(), Ordering::SeqCst));
        Ok::<_, ()>(())
    });
    assert_eq!(r.delivered, 1, "{r:?}");
    assert!(clock.fired());
    assert_eq!(
        at_end.load(Ordering::SeqCst),
        0,
        "the bulkhead slot was still held when the replay read the call's end"
    );
}

#[cfg(feature = "tokio")]
mod on_tokio {

    use std::sync::Arc;
    use std::time::Duration;
    use tailguard::clock::ManualClock;
    use tailguard::dlq::{DeadLetterQueue, Priority};
    use tailguard::emit::{Divert, Emitter, ReplayStop};
    use tailguard::Bulkhead;
    use tokio::time::sleep;

    use crate::support::emit::*;
    use crate::support::*;

    #[tokio::test(start_paused = true)]
    async fn async_replay_dropped_mid_call_puts_the_trigger_back_at_the_head() {
        let b = tokio_breaker();
        let e = bulkhead_emitter(&b, &Bulkhead::new(4).unwrap());
        b.trip_now();
        for i in 0..3 {
            let _ = e.emit(i, Priority::Routine, |_| async { Ok::<_, ()>(()) }).await;
        }
        b.reset();
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        tokio::select! {
            _ = e.replay(10, |t| {
                seen.lock().unwrap().push(*t);
                async { sleep(Duration::from_secs(10)).await; Ok::<_, ()>(()) }
            }) => panic!("the timer branch is first"),
            _ = sleep(50 * MS) => {}
        }
        let s = e.stats();
        assert!(s.pending, "trigger 0 held at the head");
        let seen2 = Arc::clone(&seen);
        let r = e
            .replay(10, move |t| {
                seen2.lock().unwrap().push(*t);
                async { Ok::<_, ()>(()) }
            })
            .await;
        assert_eq!((r.delivered, r.stopped), (3, Some(ReplayStop::Empty)));
        assert_eq!(*seen.lock().unwrap(), [0, 0, 1, 2]);
        assert_conserved(&e.stats(), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn async_replay_failures_time_out_and_stay_at_the_head() {
        let b = tokio_breaker();
        let e = bulkhead_emitter(&b, &Bulkhead::new(4).unwrap());
        b.trip_now();
        let _ = e.emit(7, Priority::Critical, |_| async { Ok::<_, ()>(()) }).await;
        b.reset();
        let r = e
            .replay(10, |_| async {
                sleep(Duration::from_secs(1)).await;
                Ok::<_, ()>(())
            })
            .await;
        assert_eq!(r.stopped, Some(ReplayStop::Failed(Divert::TimedOut(200 * MS))));
        assert_eq!(r.handed_back, None);
        assert!(e.stats().pending);
        let mut drained = Vec::new();
        e.shutdown(|t, c| drained.push((t, c)));
        assert_eq!(drained, [(7, Priority::Critical)]);
    }

    /// src/emit/future.rs (`replay`): "As replay_blocking", whose doc
    /// (src/emit/blocking.rs) says "If call panics, the trigger is kept (one
    /// attempt used) and the panic resumes." With `replay_attempts(2)`, a
    /// panic then a failure use both attempts: the trigger is handed back.
    ///
    /// Regression (a hostile review of the emit path).
    #[tokio::test(start_paused = true)]
    async fn an_async_replay_closure_that_panics_uses_an_attempt() {
        let b = tokio_breaker();
        let e: Emitter<u64> = Emitter::builder(b.clone(), DeadLetterQueue::with_capacity(8).unwrap())
            .replay_attempts(2)
            .unwrap()
            .build()
            .unwrap();
        b.trip_now();
        let _ = e.emit(7, Priority::Routine, |_| async { Ok::<_, ()>(()) }).await;
        b.reset();
        let task = {
            let e = e.clone();
            tokio::spawn(async move {
                e.replay(10, |_| -> std::future::Ready<Result<(), ()>> {
                    panic!("the request could not be built")
                })
                .await
            })
        };
        assert!(task.await.unwrap_err().is_panic());
        assert!(e.stats().pending, "kept at the head");
        let r = e.replay(10, |_| async { Err::<(), _>("still down") }).await;
        assert_eq!(
            r.handed_back,
            Some((7, Priority::Routine)),
            "second failed attempt of 2: handed back; got {r:?}"
        );
    }

    /// src/emit/mod.rs: "A trigger that fails again is kept at the head of the
    /// queue [...]: the next replay starts with it, even before a higher class
    /// queued since". A Routine trigger kept after a failure is replayed before
    /// a Critical one diverted since; the Critical one follows in the same
    /// replay.
    ///
    /// Regression (a hostile review of the emit path).
    #[test]
    fn a_kept_trigger_is_replayed_first_even_before_a_higher_class_queued_since() {
        let clock = ManualClock::new();
        let b = breaker(&clock);
        let e = emitter::<&str>(&b, 8);
        b.trip_now();
        let _ = e.emit_blocking("routine", Priority::Routine, |_, _| Ok::<_, ()>(()));
        b.reset();
        let r = e.replay_blocking(10, |_, _| Err::<(), _>("down"));
        assert_eq!(r.stopped, Some(ReplayStop::Failed(Divert::Failed("down"))));
        b.trip_now();
        let _ = e.emit_blocking("critical", Priority::Critical, |_, _| Ok::<_, ()>(()));
        b.reset();
        let mut seen = Vec::new();
        let r = e.replay_blocking(10, |t, _| {
            seen.push(*t);
            Ok::<_, ()>(())
        });
        assert_eq!(r.delivered, 2);
        assert_eq!(seen, ["routine", "critical"], "the kept trigger first");
    }
}
