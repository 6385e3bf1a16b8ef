//! Every override mode (disabled, forced closed, forced open, metrics-only)
//! behaves through the emitter exactly as through `allow()`.

use crate::support::emit::*;
use crate::support::*;
use tailguard::clock::ManualClock;
use tailguard::dlq::Priority;
use tailguard::emit::{Divert, Emitted};
use tailguard::{RejectReason, State};

#[test]
fn every_override_mode_behaves_through_the_emitter_as_through_allow() {
    let clock = ManualClock::new();
    let call = |clock: &ManualClock| {
        let clock = clock.clone();
        move |_: &u32, d: &tailguard::emit::Deadline<'_>| {
            clock.advance(60 * MS);
            assert_eq!(d.remaining(), 140 * MS, "the deadline counts from the emit's start");
            Ok::<_, ()>(())
        }
    };
    // Disabled: passes, measures nothing.
    let b = breaker(&clock);
    let e = emitter::<u32>(&b, 8);
    b.disable();
    assert_eq!(
        e.emit_blocking(1, Priority::Routine, call(&clock)),
        Emitted::Delivered(())
    );
    clock.advance(SEC);
    b.tick();
    let (s, w) = (e.stats(), b.snapshot().window);
    assert_eq!((s.delivered, s.overran, w.calls), (1, 0, 0), "{s:?} {w:?}");
    // Forced closed: passes and measures (60 ms: slow), never trips.
    b.force_closed();
    for _ in 0..30 {
        assert_eq!(
            e.emit_blocking(1, Priority::Routine, call(&clock)),
            Emitted::Delivered(())
        );
    }
    clock.advance(SEC);
    b.tick();
    let w = b.snapshot().window;
    assert_eq!((w.calls, w.slow, b.state()), (30, 30, State::Closed));
    // Forced open: diverted, the consumer never called.
    b.force_open();
    let out = e.emit_blocking(2, Priority::Routine, |_, _| -> Result<(), ()> { unreachable!() });
    assert!(
        matches!(out, Emitted::Diverted { reason: Divert::Open(r), .. } if r.reason() == RejectReason::ForcedOpen),
        "{out:?}"
    );
    // Metrics-only, shadow state OPEN: passes, one shadow rejection per emit.
    b.metrics_only();
    b.trip_now();
    assert_eq!(b.state(), State::Open);
    for n in 1..=3 {
        assert_eq!(
            e.emit_blocking(3, Priority::Routine, call(&clock)),
            Emitted::Delivered(())
        );
        assert_eq!(b.snapshot().shadow_rejections, n);
    }
}

#[cfg(feature = "tokio")]
mod on_tokio {

    use std::time::Duration;

    use crate::support::emit::*;
    use crate::support::*;
    use tailguard::dlq::Priority;
    use tailguard::emit::{Divert, Emitted};
    use tailguard::{Bulkhead, State};
    use tokio::time::{sleep, Instant};

    #[tokio::test(start_paused = true)]
    async fn every_override_mode_behaves_through_the_async_emitter_as_through_allow() {
        let b = tokio_breaker();
        let e = bulkhead_emitter(&b, &Bulkhead::new(4).unwrap());
        let slow = |d: Duration| {
            move |_: &u64| async move {
                sleep(d).await;
                Ok::<_, ()>(())
            }
        };
        let close = || async {
            sleep(Duration::from_secs(1)).await;
            b.tick();
            b.snapshot().window
        };
        // Disabled: passes; the timeout still cuts at 200 ms, not at once; measures nothing.
        b.disable();
        assert!(e.emit(1, Priority::Routine, slow(50 * MS)).await.is_delivered());
        let t0 = Instant::now();
        let out = e.emit(2, Priority::Routine, slow(Duration::from_secs(5))).await;
        assert_eq!(Instant::now() - t0, 200 * MS);
        assert!(
            matches!(out, Emitted::Diverted { reason: Divert::TimedOut(d), .. } if d == 200 * MS),
            "{out:?}"
        );
        let w = close().await;
        assert_eq!((w.calls, e.stats().overran), (0, 0), "{w:?}");
        // Forced closed: measured, never trips.
        b.force_closed();
        for i in 0..30 {
            assert!(e.emit(i, Priority::Routine, slow(60 * MS)).await.is_delivered());
        }
        let w = close().await;
        assert_eq!((w.calls, w.slow, b.state()), (30, 30, State::Closed));
        // Forced open: diverted without a call.
        b.force_open();
        let out = e
            .emit(3, Priority::Routine, |_| async { unreachable!() as Result<(), ()> })
            .await;
        assert!(
            matches!(
                out,
                Emitted::Diverted {
                    reason: Divert::Open(_),
                    ..
                }
            ),
            "{out:?}"
        );
        // Metrics-only with the shadow state OPEN: passes, one shadow rejection each.
        b.metrics_only();
        b.trip_now();
        for n in 1..=3 {
            assert!(e.emit(4, Priority::Routine, slow(MS)).await.is_delivered());
            assert_eq!(b.snapshot().shadow_rejections, n);
        }
    }
}
