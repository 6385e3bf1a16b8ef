//! Hostile review, second round: the layer and a timer whose sleep panics
//! in its destructor after the call ended.

use crate::support::{MS, SEC};
use futures_lite::future::block_on;
use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tailguard::clock::ManualClock;
use tailguard::timer::Timer;
use tailguard::tower::{BreakerLayer, ErrorsOnly};
use tailguard::{Breaker, Bulkhead};
use tower::{service_fn, Layer, Service};

/// A sleep that never fires and panics when dropped.
struct DropBomb;

impl Future for DropBomb {
    type Output = ();
    fn poll(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<()> {
        Poll::Pending
    }
}

impl Drop for DropBomb {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            panic!("a timer's sleep panicking when dropped (expected by this test)");
        }
    }
}

#[derive(Clone, Copy)]
struct BombTimer;

impl Timer for BombTimer {
    type Sleep = DropBomb;
    fn sleep(&self, _after: Duration) -> Option<DropBomb> {
        Some(DropBomb)
    }
}

/// Pending on its first poll (waking itself), then `Ok(5)`.
struct PendingOnce(bool);

impl Future for PendingOnce {
    type Output = Result<u32, ()>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if !std::mem::replace(&mut self.0, true) {
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        Poll::Ready(Ok(5))
    }
}

/// src/timer.rs (`Timer::sleep`): "the tower layer fails with `NoTimer`;
/// the panic does not go on ... A panic in the sleep's drop, after the
/// call ended, is swallowed too: the call's outcome stands." Through the
/// layer: an inner future that answers `Ok` on its second poll, its sleep
/// armed on the first and panicking as it is dropped once the call ended.
/// The response must come back `Ok(5)`, judged a success (no error in the
/// window), with no panic out.
#[test]
fn hostile_a_sleep_panicking_in_its_drop_after_the_call_ended_leaves_the_response() {
    let clock = ManualClock::new();
    let b = Breaker::builder().clock(clock.clone()).ticker(false).build().unwrap();
    let bulkhead = Bulkhead::new(1).unwrap();
    let mut svc = BreakerLayer::new(b.clone())
        .bulkhead(bulkhead.clone())
        .timeout(200 * MS)
        .unwrap()
        .classify(ErrorsOnly)
        .timer(BombTimer)
        .layer(service_fn(|()| PendingOnce(false)));
    let run = catch_unwind(AssertUnwindSafe(|| block_on(svc.call(()))));
    assert_eq!(bulkhead.in_flight(), 0);
    clock.advance(2 * SEC);
    b.tick();
    let w = b.snapshot().window;
    assert_eq!((w.calls, w.errors), (1, 0), "the call's outcome stands: a success");
    match run {
        Ok(Ok(5)) => {}
        Ok(other) => panic!("the response is lost: {other:?}"),
        Err(_) => panic!("the sleep's drop panic went on to the caller"),
    }
}
