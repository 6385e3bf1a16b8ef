//! Panics in every callback (the call, its future, its destructor, the
//! replay closure): the trigger is queued as failed, every slot is given
//! back, every count stays right.

use crate::support::emit::*;
use crate::support::*;
use tailguard::clock::ManualClock;
use tailguard::dlq::{DeadLetterQueue, Priority};
use tailguard::emit::Emitter;

#[test]
fn a_panicking_call_queues_its_trigger_and_gives_everything_back() {
    let clock = ManualClock::new();
    let b = breaker(&clock);
    let e: Emitter<String> = Emitter::builder(b.clone(), DeadLetterQueue::with_capacity(8).unwrap())
        .bulkhead(1)
        .unwrap()
        .build()
        .unwrap();
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _ = e.emit_blocking("precious".to_string(), Priority::Critical, |_, _| -> Result<(), ()> {
            panic!("a consumer bug (expected by this test)")
        });
    }));
    assert!(caught.is_err(), "the panic reaches the caller");
    let s = e.stats();
    assert_eq!((s.diverted_failed, s.queued, s.bulkhead_in_flight), (1, 1, 0));
    clock.advance(SEC);
    b.tick();
    assert_eq!(b.snapshot().window.errors, 1);
    // Replay panics too: the trigger stays at the head.
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _ = e.replay_blocking(1, |_, _| -> Result<(), ()> { panic!("again (expected by this test)") });
    }));
    assert!(caught.is_err());
    let mut saved = Vec::new();
    e.shutdown(|t, _| saved.push(t));
    assert_eq!(saved, ["precious"]);
}

#[cfg(feature = "tokio")]
mod on_tokio {

    use std::sync::Arc;

    use crate::support::emit::*;
    use crate::support::*;
    use std::panic::{catch_unwind, AssertUnwindSafe};
    use tailguard::clock::{ClockSource, ManualClock};
    use tailguard::dlq::{DeadLetterQueue, Priority};
    use tailguard::emit::{Emitted, Emitter};
    use tailguard::{Breaker, Bulkhead};
    use tokio::time::sleep;

    #[tokio::test(start_paused = true)]
    async fn a_panicking_call_future_queues_its_trigger() {
        let b = tokio_breaker();
        let bulkhead = Bulkhead::new(1).unwrap();
        let e = bulkhead_emitter(&b, &bulkhead);
        let task = {
            let e = e.clone();
            tokio::spawn(async move {
                e.emit(42, Priority::Critical, |_| async {
                    sleep(MS).await;
                    if true {
                        panic!("a consumer bug (expected by this test)");
                    }
                    Ok::<_, ()>(())
                })
                .await
            })
        };
        assert!(task.await.unwrap_err().is_panic());
        let s = e.stats();
        assert_eq!(
            (s.diverted_failed, s.queued, s.bulkhead_in_flight, s.cancelled),
            (1, 1, 0, 0)
        );
    }

    /// "If `call` or its future panics, the trigger is queued first": also a
    /// future that panics in its destructor, when the emitter drops it at its
    /// completion (from a hostile review of issue 15).
    struct PanicOnDrop;

    impl std::future::Future for PanicOnDrop {
        type Output = Result<(), &'static str>;
        fn poll(self: std::pin::Pin<&mut Self>, _: &mut std::task::Context<'_>) -> std::task::Poll<Self::Output> {
            std::task::Poll::Ready(Err("consumer said no"))
        }
    }

    impl Drop for PanicOnDrop {
        fn drop(&mut self) {
            if !std::thread::panicking() {
                panic!("a consumer bug in a destructor (expected by this test)");
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_future_panicking_in_its_drop_queues_its_trigger() {
        let b = Breaker::builder()
            .clock(ClockSource::tokio())
            .ticker(false)
            .build()
            .unwrap();
        let e: Emitter<u64> = Emitter::builder(b.clone(), DeadLetterQueue::with_capacity(8).unwrap())
            .build()
            .unwrap();
        let e2 = e.clone();
        let out = tokio::spawn(async move {
            let _ = e2.emit(7, Priority::Critical, |_| PanicOnDrop).await;
        })
        .await;
        assert!(out.unwrap_err().is_panic(), "the panic goes on to the caller");
        let s = e.stats();
        assert!(
            s.queued == 1 && s.diverted_failed == 1 || s.dropped_in_panics == 1,
            "trigger 7 was neither queued nor counted as dropped in a panic: {s:?}"
        );
    }

    /// `delivered`: "Emits that delivered their trigger" and `emitted =
    /// delivered + diverted + handed_back + cancelled` (src/emit/mod.rs). A
    /// panicking call's trigger is queued as failed; the three emits before it
    /// that delivered must still count as delivered.
    ///
    /// Regression (a hostile review of the emit path).
    #[test]
    fn a_panicking_blocking_call_does_not_eat_a_delivered_count() {
        let clock = ManualClock::new();
        let b = breaker(&clock);
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
    ///
    /// Regression (a hostile review of the emit path).
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

    /// src/emit/call.rs (`Inner::panicked`): "A call that panicked: its
    /// trigger goes to the queue (counted as failed) unless the queue cannot
    /// take it, when it is dropped with the unwinding (counted as cancelled)",
    /// and the `emitted` identity of src/emit/mod.rs: one trigger, one outcome.
    ///
    /// Regression (a hostile review of the emit path).
    #[test]
    fn a_panicking_call_with_a_full_queue_is_counted_once() {
        let clock = ManualClock::new();
        let b = breaker(&clock);
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
    ///
    /// Regression (a hostile review of the emit path).
    #[test]
    fn a_panicking_call_after_shutdown_is_counted_once_and_keeps_the_delivered() {
        let clock = ManualClock::new();
        let b = breaker(&clock);
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
    ///
    /// Regression (a hostile review of the emit path).
    #[test]
    fn a_trigger_a_panicking_call_displaces_is_counted_as_dropped_in_panics() {
        let dropped = Arc::new(std::sync::Mutex::new(Vec::new()));
        let t = |id| Tracked {
            id,
            dropped: Arc::clone(&dropped),
        };
        let clock = ManualClock::new();
        let b = breaker(&clock);
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
    ///
    /// Regression (a hostile review of the emit path).
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
}
