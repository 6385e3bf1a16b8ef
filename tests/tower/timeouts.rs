//! The layer's timeout: a request past it fails, counts failed and slow and
//! is dropped; a fast one arms no timer; late responses count as timeouts.

use crate::support::tower::*;
use crate::support::MS;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tailguard::tower::{BreakerError, BreakerLayer, ErrorsOnly};
use tower::{service_fn, Layer, Service, ServiceExt};

#[tokio::test(start_paused = true)]
async fn a_request_past_the_timeout_fails_counts_failed_and_slow_and_is_dropped() {
    let b = breaker();
    let dropped = Arc::new(AtomicUsize::new(0));
    struct OnDrop(Arc<AtomicUsize>);
    impl Drop for OnDrop {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }
    let d = Arc::clone(&dropped);
    let mut svc = BreakerLayer::new(b.clone())
        .timeout(200 * MS)
        .unwrap()
        .classify(ErrorsOnly)
        .layer(service_fn(move |()| {
            let guard = OnDrop(Arc::clone(&d));
            async move {
                tokio::time::sleep(Duration::from_secs(5)).await;
                drop(guard);
                Ok::<_, ()>(())
            }
        }));
    let t0 = tokio::time::Instant::now();
    let err = svc.ready().await.unwrap().call(()).await.unwrap_err();
    assert_eq!(t0.elapsed(), 200 * MS, "cut at the timeout exactly");
    assert!(matches!(err, BreakerError::TimedOut(d) if d == 200 * MS), "{err:?}");
    assert!(err.called());
    assert_eq!(
        dropped.load(Ordering::Relaxed),
        1,
        "the inner future is dropped at once"
    );
    let w = close(&b).await.window;
    assert_eq!((w.calls, w.errors, w.slow), (1, 1, 1));
}

#[tokio::test(start_paused = true)]
async fn a_fast_request_under_a_timeout_arms_no_timer_and_a_huge_timeout_never_fires() {
    let b = breaker();
    let mut svc = BreakerLayer::new(b.clone())
        .timeout(Duration::MAX)
        .unwrap()
        .classify(ErrorsOnly)
        .layer(service_fn(|ms: u64| async move {
            tokio::time::sleep(MS * ms as u32).await;
            Ok::<_, ()>(ms)
        }));
    assert_eq!(svc.ready().await.unwrap().call(0).await.unwrap(), 0);
    assert_eq!(svc.ready().await.unwrap().call(3_600_000).await.unwrap(), 3_600_000);
    let w = close(&b).await.window;
    assert_eq!((w.calls, w.errors), (2, 0));
}

// ---------------------------------------------------------------------------
// Timeout: "A request that runs past it fails with BreakerError::TimedOut and
// counts in the breaker as failed and slow."
// ---------------------------------------------------------------------------

/// A timeout that is not a whole number of milliseconds: tokio's timer
/// rounds its deadline up to the next millisecond, where the response also
/// lands, in the same poll. The response exists: it is returned, and counted
/// in the breaker as a timeout (failed and slow), as documented.
///
/// Regression (a hostile review of the tower layer).
#[tokio::test(start_paused = true)]
async fn a_response_past_a_sub_millisecond_timeout_is_returned_and_counted_as_a_timeout() {
    let b = breaker();
    let timeout = 200 * MS + Duration::from_micros(500);
    let mut svc = BreakerLayer::new(b.clone())
        .timeout(timeout)
        .unwrap()
        .classify(ErrorsOnly)
        .layer(service_fn(|()| async {
            tokio::time::sleep(200 * MS + Duration::from_micros(900)).await;
            Ok::<_, ()>(())
        }));
    let t0 = tokio::time::Instant::now();
    let r = svc.ready().await.unwrap().call(()).await;
    let took = t0.elapsed();
    assert!(took > timeout, "the request ran {took:?}, past the {timeout:?} timeout");
    assert!(r.is_ok(), "{r:?}");
    tokio::time::advance(100 * MS).await;
    b.tick();
    let t = b.snapshot().totals;
    assert_eq!((t.calls, t.errors, t.slow), (1, 1, 1), "counted as a timeout: {t:?}");
}

/// The runtime is late by 100 ms (a blocking task elsewhere; here a jump of
/// the paused clock): the timer (200 ms) and the response (250 ms) are both
/// due when the future is next polled, 300 ms in. The response is returned
/// and counted as a timeout (failed and slow).
///
/// Regression (a hostile review of the tower layer).
#[tokio::test(start_paused = true)]
async fn a_response_that_lands_late_with_the_timer_is_returned_and_counted_as_a_timeout() {
    let b = breaker();
    let svc = BreakerLayer::new(b.clone())
        .timeout(200 * MS)
        .unwrap()
        .classify(ErrorsOnly)
        .layer(service_fn(|()| async {
            tokio::time::sleep(250 * MS).await;
            Ok::<_, ()>(())
        }));
    let t0 = tokio::time::Instant::now();
    let joined = tokio::spawn(svc.oneshot(()));
    tokio::task::yield_now().await; // first poll: the timer is armed for t0 + 200 ms
    tokio::time::advance(300 * MS).await; // one late wake-up
    let r = joined.await.unwrap();
    let took = t0.elapsed();
    assert_eq!(took, 300 * MS);
    tokio::time::advance(100 * MS).await;
    b.tick();
    let t = b.snapshot().totals;
    assert!(r.is_ok(), "{r:?}");
    assert_eq!((t.calls, t.errors, t.slow), (1, 1, 1), "counted as a timeout: {t:?}");
}

/// With in-flight tracking on, a request that hangs is claimed as slow by
/// the window close it outlives; its later timeout is not counted as a
/// second call, but as its failure (once as a call, slow; then failed, as
/// the module docs say).
///
/// Regression (a hostile review of the tower layer).
#[tokio::test(start_paused = true)]
async fn a_timed_out_request_in_flight_tracking_claimed_is_counted_once_as_slow() {
    let b = builder().track_in_flight(true).min_calls(50).build().unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let svc = BreakerLayer::new(b.clone())
        .timeout(350 * MS)
        .unwrap()
        .classify(ErrorsOnly)
        .layer(hanging(&calls));
    let joined = tokio::spawn(svc.oneshot(()));
    tokio::task::yield_now().await;
    for _ in 0..3 {
        tokio::time::advance(100 * MS).await;
        b.tick(); // a window close while the request hangs
    }
    tokio::time::advance(100 * MS).await; // past 350 ms
    let err = joined.await.unwrap().unwrap_err();
    assert!(matches!(err, BreakerError::TimedOut(_)), "{err:?}");
    tokio::time::advance(100 * MS).await;
    b.tick();
    let t = b.snapshot().totals;
    assert_eq!((t.calls, t.errors, t.slow), (1, 1, 1), "one call, slow, failed: {t:?}");
}
