//! The emit path attacked as a hostile caller would (src/emit/,
//! src/bulkhead.rs): panics in every callback, emits dropped before their
//! first poll, calls that finish past their deadline in the same timer tick,
//! full and shut-down queues under a panic, replay order. Each test quotes
//! the promise it checks.
#![cfg(feature = "tokio")]

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::Duration;
use tailguard::clock::{ClockSource, ManualClock};
use tailguard::dlq::{DeadLetterQueue, Priority};
use tailguard::emit::{Divert, Emitted, Emitter, EmitterStats, HandBack, ReplayStop};
use tailguard::{Breaker, Bulkhead};
use tokio::time::sleep;

const MS: Duration = Duration::from_millis(1);
const SEC: Duration = Duration::from_secs(1);

fn manual_breaker(clock: &ManualClock) -> Breaker {
    Breaker::builder()
        .clock(clock.clone())
        .ticker(false)
        .half_open_probes(1)
        .success_to_close(1)
        .build()
        .unwrap()
}

fn tokio_breaker() -> Breaker {
    Breaker::builder()
        .clock(ClockSource::tokio())
        .ticker(false)
        .half_open_probes(1)
        .success_to_close(1)
        .build()
        .unwrap()
}

fn emitter<T>(b: &Breaker, capacity: usize) -> Emitter<T> {
    Emitter::builder(b.clone(), DeadLetterQueue::with_capacity(capacity).unwrap())
        .timeout(200 * MS)
        .unwrap()
        .build()
        .unwrap()
}

/// The two identities of the module docs (src/emit/mod.rs): `emitted =
/// delivered + diverted + handed_back + cancelled`, and `diverted =
/// replayed + replay_handed_back + drained + displaced + queued + pending`.
fn assert_conserved(s: &EmitterStats, emitted: u64) {
    assert_eq!(s.emitted(), emitted, "emitted identity: {s:?}");
    assert_eq!(s.into_queue(), s.out_of_queue(), "diverted identity: {s:?}");
}

// ---------------------------------------------------------------------------
// Panics and the counters
// ---------------------------------------------------------------------------

/// `delivered`: "Emits that delivered their trigger" and `emitted =
/// delivered + diverted + handed_back + cancelled` (src/emit/mod.rs). A
/// panicking call's trigger is queued as failed; the three emits before it
/// that delivered must still count as delivered.
#[test]
fn a_panicking_blocking_call_does_not_eat_a_delivered_count() {
    let clock = ManualClock::new();
    let b = manual_breaker(&clock);
    let e = emitter::<u32>(&b, 8);
    for i in 0..3 {
        assert!(e
            .emit_blocking(i, Priority::Routine, |_, _| Ok::<_, ()>(()))
            .is_delivered());
    }
    let caught = catch_unwind(AssertUnwindSafe(|| {
        let _ = e.emit_blocking(99, Priority::Critical, |_, _| -> Result<(), ()> {
            panic!("consumer bug")
        });
    }));
    assert!(caught.is_err());
    let s = e.stats();
    assert_eq!((s.diverted_failed, s.queued), (1, 1), "{s:?}");
    assert_eq!(s.delivered, 3, "three emits delivered: {s:?}");
    assert_conserved(&s, 4);
}

/// Same promise on the async path (`emit`): "If the call panics, its
/// trigger is queued first (as failed) and the panic resumes" and the
/// `emitted` identity.
#[tokio::test(start_paused = true)]
async fn a_panicking_async_call_does_not_eat_a_delivered_count() {
    let b = tokio_breaker();
    let e = emitter::<u64>(&b, 8);
    for i in 0..3 {
        assert!(e
            .emit(i, Priority::Routine, |_| async { Ok::<_, ()>(()) })
            .await
            .is_delivered());
    }
    let task = {
        let e = e.clone();
        tokio::spawn(async move {
            e.emit(99, Priority::Critical, |_| async {
                sleep(MS).await;
                if true {
                    panic!("consumer bug");
                }
                Ok::<_, ()>(())
            })
            .await
        })
    };
    assert!(task.await.unwrap_err().is_panic());
    let s = e.stats();
    assert_eq!((s.diverted_failed, s.queued), (1, 1), "{s:?}");
    assert_eq!(s.delivered, 3, "three emits delivered: {s:?}");
    assert_conserved(&s, 4);
}

/// src/emit/blocking.rs (`divert_panicked`): "A call that panicked: its
/// trigger goes to the queue (counted as failed) unless the queue cannot
/// take it, when it is dropped with the unwinding (counted as cancelled)",
/// and the `emitted` identity of src/emit/mod.rs: one trigger, one outcome.
#[test]
fn a_panicking_call_with_a_full_queue_is_counted_once() {
    let clock = ManualClock::new();
    let b = manual_breaker(&clock);
    let e = emitter::<u32>(&b, 1);
    b.trip_now();
    // Fills the queue (capacity 1) with a Critical: nothing can give way.
    assert!(matches!(
        e.emit_blocking(1, Priority::Critical, |_, _| Ok::<_, ()>(())),
        Emitted::Diverted { displaced: None, .. }
    ));
    b.reset();
    let caught = catch_unwind(AssertUnwindSafe(|| {
        let _ = e.emit_blocking(2, Priority::Critical, |_, _| -> Result<(), ()> {
            panic!("consumer bug")
        });
    }));
    assert!(caught.is_err());
    let s = e.stats();
    assert_conserved(&s, 2);
    assert_eq!(
        (s.handed_back_full, s.cancelled),
        (0, 1),
        "the dropped trigger is cancelled, not also handed back: {s:?}"
    );
}

/// Same, after shutdown: `handed_back_shut_down` is "Triggers handed back
/// because the emitter is shut down", but a panicking call's trigger is
/// dropped with the unwinding (cancelled); and the delivered emits before
/// it stay delivered.
#[test]
fn a_panicking_call_after_shutdown_is_counted_once_and_keeps_the_delivered() {
    let clock = ManualClock::new();
    let b = manual_breaker(&clock);
    let e = emitter::<u32>(&b, 8);
    for i in 0..3 {
        assert!(e
            .emit_blocking(i, Priority::Routine, |_, _| Ok::<_, ()>(()))
            .is_delivered());
    }
    assert_eq!(e.shutdown(|_, _| {}), 0);
    let caught = catch_unwind(AssertUnwindSafe(|| {
        let _ = e.emit_blocking(9, Priority::Critical, |_, _| -> Result<(), ()> {
            panic!("consumer bug")
        });
    }));
    assert!(caught.is_err());
    let s = e.stats();
    assert_eq!((s.delivered, s.handed_back_shut_down, s.cancelled), (3, 0, 1), "{s:?}");
    assert_conserved(&s, 4);
}

/// A trigger type that reports its own drop.
#[derive(Debug)]
struct Tracked {
    id: u32,
    dropped: Arc<std::sync::Mutex<Vec<u32>>>,
}

impl Drop for Tracked {
    fn drop(&mut self) {
        self.dropped.lock().unwrap_or_else(|p| p.into_inner()).push(self.id);
    }
}

/// src/emit/mod.rs, `dropped_in_panics`: the only triggers the emitter
/// drops are those a panicking call's unwinding cannot give to anyone, and
/// each is counted. A panicking Critical call displaces the queued Idle
/// trigger from a full queue: the Critical trigger is queued, the Idle one
/// is dropped with the unwinding, counted in `displaced` and in
/// `dropped_in_panics`, never silently.
#[test]
fn a_trigger_a_panicking_call_displaces_is_counted_as_dropped_in_panics() {
    let dropped = Arc::new(std::sync::Mutex::new(Vec::new()));
    let t = |id| Tracked {
        id,
        dropped: Arc::clone(&dropped),
    };
    let clock = ManualClock::new();
    let b = manual_breaker(&clock);
    let e = emitter::<Tracked>(&b, 1);
    b.trip_now();
    // The Idle trigger 1 is queued (the queue is now full).
    assert!(matches!(
        e.emit_blocking(t(1), Priority::Idle, |_, _| Ok::<_, ()>(())),
        Emitted::Diverted { displaced: None, .. }
    ));
    b.reset();
    let caught = catch_unwind(AssertUnwindSafe(|| {
        let _ = e.emit_blocking(t(2), Priority::Critical, |_, _| -> Result<(), ()> {
            panic!("consumer bug")
        });
    }));
    assert!(caught.is_err());
    assert_eq!(
        *dropped.lock().unwrap(),
        [1],
        "the displaced Idle trigger went with the unwinding"
    );
    let s = e.stats();
    assert_eq!(
        (s.displaced, s.dropped_in_panics, s.diverted_failed, s.queued),
        (1, 1, 1, 1),
        "{s:?}"
    );
    assert_eq!(s.emitted(), 2, "{s:?}");
    let mut left = Vec::new();
    e.shutdown(|t, class| left.push((t.id, class)));
    assert_eq!(left, [(2, Priority::Critical)]);
}

/// src/emit/future.rs (`emit`): "If the call panics, its trigger is queued
/// first (as failed) and the panic resumes." Here `call` itself (the
/// closure that builds the request future) panics.
#[tokio::test(start_paused = true)]
async fn an_async_call_closure_that_panics_still_queues_its_trigger() {
    let b = tokio_breaker();
    let e = emitter::<u64>(&b, 8);
    let task = {
        let e = e.clone();
        tokio::spawn(async move {
            e.emit(42, Priority::Critical, |_| -> std::future::Ready<Result<(), ()>> {
                panic!("the request could not be built")
            })
            .await
        })
    };
    assert!(task.await.unwrap_err().is_panic());
    let s = e.stats();
    assert_eq!(
        (s.diverted_failed, s.queued, s.cancelled),
        (1, 1, 0),
        "trigger 42 must be queued as failed: {s:?}"
    );
    assert_conserved(&s, 1);
}

/// src/emit/future.rs (`replay`): "As replay_blocking", whose doc
/// (src/emit/blocking.rs) says "If call panics, the trigger is kept (one
/// attempt used) and the panic resumes." With `replay_attempts(2)`, a
/// panic then a failure use both attempts: the trigger is handed back.
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

// ---------------------------------------------------------------------------
// Cancellation
// ---------------------------------------------------------------------------

/// src/emit/future.rs (`emit`): "Dropping the returned future (a `select!`
/// that went the other way, an aborted task) ... drops the trigger, counted
/// in cancelled." Here the select! goes the other way before the emit was
/// ever polled.
#[tokio::test(start_paused = true)]
async fn an_emit_dropped_before_its_first_poll_is_counted_cancelled() {
    let b = tokio_breaker();
    let e = emitter::<u64>(&b, 8);
    tokio::select! {
        biased;
        _ = std::future::ready(()) => {}
        _ = e.emit(1, Priority::Routine, |_| async { Ok::<_, ()>(()) }) => panic!("the ready branch is first"),
    }
    // The same with a plain drop.
    drop(e.emit(2, Priority::Routine, |_| async { Ok::<_, ()>(()) }));
    let s = e.stats();
    assert_eq!(s.cancelled, 2, "two emits dropped, their triggers with them: {s:?}");
    assert_conserved(&s, 2);
}

// ---------------------------------------------------------------------------
// Timeouts
// ---------------------------------------------------------------------------

/// README "The emit path": "a timed-out call counts in the breaker as
/// failed and slow"; EmitterStats::overran: "calls that returned
/// successfully but after the timeout (counted by the breaker as failed and
/// slow)"; `emit`: "cancelled at the emitter's timeout". On tokio's paused
/// clock with `ClockSource::tokio` (the documented test setup), a call that
/// takes 200.5 ms against a 200 ms timeout is delivered as a plain success.
#[tokio::test(start_paused = true)]
async fn an_async_call_finishing_past_its_deadline_counts_as_timed_out() {
    let b = Breaker::builder()
        .clock(ClockSource::tokio())
        .ticker(false)
        .latency_threshold(SEC)
        .build()
        .unwrap();
    let e = emitter::<u64>(&b, 8);
    // Start off a millisecond boundary of tokio's timer wheel.
    tokio::time::advance(Duration::from_micros(300)).await;
    let out = e
        .emit(1, Priority::Routine, |_| async {
            sleep(Duration::from_micros(200_500)).await;
            Ok::<_, ()>(())
        })
        .await;
    let s = e.stats();
    let timed_out = matches!(
        out,
        Emitted::Diverted {
            reason: Divert::TimedOut(_),
            ..
        }
    );
    assert!(
        timed_out || s.overran == 1,
        "a call that ran 200.5 ms past a 200 ms timeout: {out:?}, {s:?}"
    );
    sleep(SEC).await;
    b.tick();
    let w = b.snapshot().window;
    assert_eq!((w.calls, w.errors, w.slow), (1, 1, 1), "{w:?}");
}

/// Same promise, with a future that does its work without yielding (on a
/// manual clock): the async emit has no check of the elapsed time when the
/// call is ready, so an `Ok` 300 ms into a 200 ms budget is not counted in
/// `overran`, and the breaker counts a success.
#[tokio::test(start_paused = true)]
async fn an_async_call_ready_past_its_deadline_counts_overran() {
    let clock = ManualClock::new();
    let b = manual_breaker(&clock);
    let e = emitter::<u64>(&b, 8);
    let c = clock.clone();
    let out = e
        .emit(1, Priority::Routine, move |_| {
            let c = c.clone();
            async move {
                c.advance(300 * MS); // blocking work inside the future
                Ok::<_, ()>(())
            }
        })
        .await;
    assert!(out.is_delivered());
    clock.advance(SEC);
    b.tick();
    let w = b.snapshot().window;
    let s = e.stats();
    assert_eq!(s.overran, 1, "{s:?}");
    assert_eq!((w.calls, w.errors, w.slow), (1, 1, 1), "{w:?}");
}

// ---------------------------------------------------------------------------
// Replay order
// ---------------------------------------------------------------------------

/// src/emit/mod.rs: "A trigger that fails again is kept at the head of the
/// queue [...]: the next replay starts with it, even before a higher class
/// queued since". A Routine trigger kept after a failure is replayed before
/// a Critical one diverted since; the Critical one follows in the same
/// replay.
#[test]
fn a_kept_trigger_is_replayed_first_even_before_a_higher_class_queued_since() {
    let clock = ManualClock::new();
    let b = manual_breaker(&clock);
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

// ---------------------------------------------------------------------------
// Passing checks of things the existing tests do not cover
// ---------------------------------------------------------------------------

/// Timeouts at the extremes: 1 ns and Duration::MAX, blocking and async,
/// on tokio's paused clock; the bulkhead slot always comes back.
#[tokio::test(start_paused = true)]
async fn extreme_timeouts_neither_panic_nor_leak() {
    for timeout in [Duration::from_nanos(1), Duration::MAX] {
        let b = tokio_breaker();
        let bulkhead = Bulkhead::new(1).unwrap();
        let e: Emitter<u64> = Emitter::builder(b.clone(), DeadLetterQueue::with_capacity(8).unwrap())
            .shared_bulkhead(bulkhead.clone())
            .timeout(timeout)
            .unwrap()
            .build()
            .unwrap();
        assert!(e
            .emit_blocking(1, Priority::Routine, |_, d| {
                assert_eq!(d.budget(), timeout);
                Ok::<_, ()>(())
            })
            .is_delivered());
        let out = e
            .emit(2, Priority::Routine, |_| async {
                sleep(5 * MS).await;
                Ok::<_, ()>(())
            })
            .await;
        if timeout == Duration::MAX {
            assert!(out.is_delivered(), "{out:?}");
        } else {
            assert!(
                matches!(
                    out,
                    Emitted::Diverted {
                        reason: Divert::TimedOut(_),
                        ..
                    }
                ),
                "{out:?}"
            );
        }
        assert_eq!(bulkhead.in_flight(), 0);
        assert_conserved(&e.stats(), 2);
    }
}

/// A bulkhead of 1 shared by many threads racing emits (some failing),
/// with shutdown in the middle: never two calls at once, nothing lost, and
/// both identities hold exactly once quiet.
#[test]
fn a_bulkhead_of_one_under_contention_with_shutdown_conserves_everything() {
    use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
    for round in 0..10u64 {
        let clock = ManualClock::new();
        let b = Breaker::builder().clock(clock.clone()).ticker(false).build().unwrap();
        let e: Emitter<u64> = Emitter::builder(b.clone(), DeadLetterQueue::with_capacity(1 << 12).unwrap())
            .bulkhead(1)
            .unwrap()
            .build()
            .unwrap();
        let in_call = AtomicUsize::new(0);
        let handed_back = AtomicU64::new(0);
        let drained = AtomicU64::new(0);
        let threads = 4u64;
        let per = 1_000u64;
        std::thread::scope(|s| {
            for t in 0..threads {
                let (e, in_call, handed_back) = (&e, &in_call, &handed_back);
                s.spawn(move || {
                    for i in 0..per {
                        let n = t * per + i;
                        let out = e.emit_blocking(n, Priority::Routine, |n, _| {
                            assert_eq!(
                                in_call.fetch_add(1, Ordering::SeqCst),
                                0,
                                "two calls in a bulkhead of 1"
                            );
                            std::hint::spin_loop();
                            in_call.fetch_sub(1, Ordering::SeqCst);
                            if n % 3 == 0 {
                                Err(())
                            } else {
                                Ok(())
                            }
                        });
                        match out {
                            Emitted::Delivered(()) | Emitted::Diverted { displaced: None, .. } => {}
                            Emitted::HandedBack {
                                because: HandBack::ShutDown,
                                ..
                            } => {
                                handed_back.fetch_add(1, Ordering::Relaxed);
                            }
                            other => panic!("{other:?}"),
                        }
                    }
                });
            }
            for _ in 0..round * 200 {
                std::hint::spin_loop();
            }
            drained.fetch_add(e.shutdown(|_, _| {}) as u64, Ordering::Relaxed);
        });
        let s = e.stats();
        assert_eq!(s.queued, 0, "{s:?}");
        assert_eq!(s.drained, drained.load(Ordering::Relaxed));
        assert_eq!(s.handed_back_shut_down, handed_back.load(Ordering::Relaxed));
        assert_eq!(s.bulkhead_in_flight, 0);
        assert_conserved(&s, threads * per);
    }
}
