//! Outside any runtime, a request through the layer's timeout that is
//! pending on its first poll fails at once with `BreakerError::NoTimer`:
//! no panic, no hang, no verdict, its slots given back. Issue 20
//! ("nothing in the crate panics for a missing runtime").

use crate::support::tower::hanging;
use crate::support::{MS, SEC};
use futures_lite::future::block_on;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use tailguard::clock::ManualClock;
use tailguard::tower::{BreakerError, BreakerLayer, ErrorsOnly};
use tailguard::{Breaker, Bulkhead, State};
use tower::{service_fn, Layer, Service};

fn breaker(clock: &ManualClock) -> Breaker {
    Breaker::builder()
        .clock(clock.clone())
        .ticker(false)
        .half_open_probes(1)
        .success_to_close(1)
        .build()
        .unwrap()
}

#[test]
fn a_pending_request_outside_any_runtime_fails_as_no_timer_and_gives_its_slots_back() {
    let clock = ManualClock::new();
    let b = breaker(&clock);
    let bulkhead = Bulkhead::new(1).unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let layer = BreakerLayer::new(b.clone())
        .bulkhead(bulkhead.clone())
        .timeout(200 * MS)
        .unwrap()
        .classify(ErrorsOnly);
    // Ready on its first poll: no timer needed, answered as before.
    let mut ready = layer.layer(service_fn(|n: u32| async move { Ok::<_, ()>(n) }));
    assert!(matches!(block_on(ready.call(7)), Ok(7)));
    // Pending, and no tokio runtime for its timer: cut at once.
    b.trip_now();
    clock.advance(60 * SEC); // the backoff is over: the next request is the probe
    let mut svc = layer.layer(hanging(&calls));
    let err = block_on(svc.call(())).unwrap_err();
    assert!(matches!(err, BreakerError::NoTimer), "{err:?}");
    assert!(!err.called());
    assert_eq!(calls.load(Ordering::Relaxed), 1);
    assert_eq!((bulkhead.in_flight(), b.snapshot().probes_in_flight), (0, 0));
    assert_eq!(b.state(), State::HalfOpen, "no verdict: the probe was cancelled");
}

/// A timer that panics making its sleep is no timer to be had
/// (src/timer.rs, `Timer::sleep`): the request fails with `NoTimer`, no
/// panic comes out, no verdict on the consumer, the bulkhead and the probe
/// slot back. Issue 20.
#[test]
fn a_timer_that_panics_is_no_timer_and_the_request_gives_its_slots_back() {
    #[derive(Clone)]
    struct Panicking;
    impl tailguard::timer::Timer for Panicking {
        type Sleep = std::future::Pending<()>;
        fn sleep(&self, _after: std::time::Duration) -> Option<Self::Sleep> {
            panic!("this runtime's timer panics")
        }
    }
    let clock = ManualClock::new();
    let b = breaker(&clock);
    let bulkhead = Bulkhead::new(1).unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let layer = BreakerLayer::new(b.clone())
        .bulkhead(bulkhead.clone())
        .timeout(200 * MS)
        .unwrap()
        .timer(Panicking)
        .classify(ErrorsOnly);
    b.trip_now();
    clock.advance(60 * SEC); // the next request is the probe
    let mut svc = layer.layer(hanging(&calls));
    let err = block_on(svc.call(())).unwrap_err();
    assert!(matches!(err, BreakerError::NoTimer), "{err:?}");
    assert_eq!(calls.load(Ordering::Relaxed), 1);
    assert_eq!((bulkhead.in_flight(), b.snapshot().probes_in_flight), (0, 0));
    assert_eq!(b.state(), State::HalfOpen, "no verdict: the probe was cancelled");
    // The slots are free: a ready request is the probe, and closes it.
    let mut ready = layer.layer(service_fn(|n: u32| async move { Ok::<_, ()>(n) }));
    assert!(matches!(block_on(ready.call(7)), Ok(7)));
    assert_eq!(b.state(), State::Closed);
}
