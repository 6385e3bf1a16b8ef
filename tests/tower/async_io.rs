//! The layer's timeout on a second runtime: async-io's timer
//! (`BreakerLayer::timer(AsyncIoTimer)`) under `futures_lite`'s
//! `block_on`, no tokio anywhere. The core cases of the tokio tests: a
//! request cut at its timeout, one that just meets it, and a dropped
//! request giving back its bulkhead and probe slots. The breaker runs on
//! the manual clock, moved by the requests, so every verdict is exact.
//! Issue 20.

use crate::support::tower::hanging;
use crate::support::{MS, NS, SEC};
use futures_lite::future::{block_on, poll_once};
use std::pin::pin;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;
use tailguard::clock::ManualClock;
use tailguard::timer::AsyncIoTimer;
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
fn a_request_past_the_timeout_is_cut_and_counts_failed_and_slow() {
    let clock = ManualClock::new();
    let b = breaker(&clock);
    let c = clock.clone();
    let mut svc = BreakerLayer::new(b.clone())
        .timeout(50 * MS)
        .unwrap()
        .classify(ErrorsOnly)
        .timer(AsyncIoTimer)
        .layer(service_fn(move |()| {
            c.advance(30 * MS); // on the breaker's clock: 20 ms of the budget left
            std::future::pending::<Result<(), ()>>()
        }));
    let started = std::time::Instant::now();
    let err = block_on(svc.call(())).unwrap_err();
    assert!(matches!(err, BreakerError::TimedOut(d) if d == 50 * MS), "{err:?}");
    assert!(
        started.elapsed() >= 20 * MS,
        "the timer armed for what was left, not less"
    );
    clock.advance(SEC);
    b.tick();
    let w = b.snapshot().window;
    assert_eq!((w.calls, w.errors, w.slow), (1, 1, 1));
}

#[test]
fn a_request_that_just_meets_the_timeout_succeeds_and_one_past_it_counts_timed_out() {
    let clock = ManualClock::new();
    let b = breaker(&clock);
    let c = clock.clone();
    let mut svc = BreakerLayer::new(b.clone())
        .timeout(200 * MS)
        .unwrap()
        .classify(ErrorsOnly)
        .timer(AsyncIoTimer)
        .layer(service_fn(move |spent| {
            let c = c.clone();
            async move {
                // Pending once (the timer is armed), woken 1 ms later.
                async_io::Timer::after(MS).await;
                c.advance(spent);
                Ok::<_, ()>(())
            }
        }));
    assert!(block_on(svc.call(200 * MS)).is_ok());
    assert!(
        block_on(svc.call(200 * MS + NS)).is_ok(),
        "late: returned, since it exists"
    );
    clock.advance(SEC);
    b.tick();
    let w = b.snapshot().window;
    assert_eq!(
        (w.calls, w.errors),
        (2, 1),
        "only the one past the timeout is a timeout"
    );
}

#[test]
fn a_dropped_request_gives_back_its_bulkhead_slot_and_its_probe_slot() {
    let clock = ManualClock::new();
    let b = breaker(&clock);
    let bulkhead = Bulkhead::new(1).unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let layer = BreakerLayer::new(b.clone())
        .bulkhead(bulkhead.clone())
        .timeout(200 * MS)
        .unwrap()
        .classify(ErrorsOnly)
        .timer(AsyncIoTimer);
    b.trip_now();
    clock.advance(60 * SEC); // the backoff is over: the next request is the probe
    let mut svc = layer.layer(hanging(&calls));
    {
        let mut call = pin!(svc.call(()));
        assert!(block_on(poll_once(call.as_mut())).is_none(), "pending, its timer armed");
        assert_eq!(
            (bulkhead.in_flight(), b.snapshot().probes_in_flight),
            (1, 1),
            "in flight"
        );
    } // dropped mid-request
    assert_eq!((bulkhead.in_flight(), b.snapshot().probes_in_flight), (0, 0));
    assert_eq!(b.state(), State::HalfOpen);
    let mut ok = layer.layer(service_fn(|()| async { Ok::<_, ()>(()) }));
    assert!(block_on(ok.call(())).is_ok());
    assert_eq!(b.state(), State::Closed);
}
