//! Every override mode behaves through the layer exactly as through `allow()`.

use crate::support::tower::*;
use crate::support::MS;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Waker};
use std::time::Duration;
use tailguard::tower::{BreakerError, BreakerLayer, ErrorsOnly};
use tailguard::{RejectReason, State};
use tower::{service_fn, Layer, Service, ServiceExt};

/// A service answering after `d` of tokio's time.
fn answering_after(
    d: Duration,
) -> impl Service<(), Response = (), Error = (), Future = impl Future<Output = Result<(), ()>>> + Clone {
    service_fn(move |()| async move {
        tokio::time::sleep(d).await;
        Ok::<_, ()>(())
    })
}

#[tokio::test(start_paused = true)]
async fn a_disabled_breaker_passes_timed_requests_cuts_them_at_the_timeout_and_measures_nothing() {
    let b = breaker();
    b.disable();
    let layer = BreakerLayer::new(b.clone())
        .timeout(200 * MS)
        .unwrap()
        .classify(ErrorsOnly);
    let mut fast = layer.layer(answering_after(50 * MS));
    let t0 = tokio::time::Instant::now();
    let r = fast.ready().await.unwrap().call(()).await;
    assert!(r.is_ok(), "50 ms is within the 200 ms timeout: {r:?}");
    assert_eq!(t0.elapsed(), 50 * MS);
    let mut slow = layer.layer(answering_after(Duration::from_secs(5)));
    let t0 = tokio::time::Instant::now();
    let err = slow.ready().await.unwrap().call(()).await.unwrap_err();
    assert!(matches!(err, BreakerError::TimedOut(d) if d == 200 * MS), "{err:?}");
    assert_eq!(t0.elapsed(), 200 * MS, "cut at the timeout, not at once");
    let s = close(&b).await;
    assert_eq!(
        (s.window.calls, s.totals.calls, s.state),
        (0, 0, State::Closed),
        "{s:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_forced_closed_breaker_passes_and_measures_through_the_layer_and_never_trips() {
    let b = breaker();
    b.force_closed();
    let mut svc = BreakerLayer::new(b.clone())
        .timeout(200 * MS)
        .unwrap()
        .classify(ErrorsOnly)
        .layer(answering_after(60 * MS));
    for _ in 0..10 {
        svc.ready().await.unwrap().call(()).await.unwrap();
    }
    let s = close(&b).await;
    assert_eq!(
        (s.window.calls, s.window.slow, s.state),
        (10, 10, State::Closed),
        "{s:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_forced_open_breaker_refuses_through_the_layer_without_waiting_for_readiness() {
    let b = breaker();
    b.force_open();
    let calls = Arc::new(AtomicUsize::new(0));
    // The inner service is never ready: a forced-open breaker still answers at once.
    let svc = BreakerLayer::new(b.clone())
        .classify(ErrorsOnly)
        .layer(tower::limit::ConcurrencyLimitLayer::new(1).layer(hanging(&calls)));
    let mut holder = svc.clone();
    let mut cx = Context::from_waker(Waker::noop());
    let _ = holder.poll_ready(&mut cx);
    let mut svc = svc;
    let err = svc.ready().await.unwrap().call(()).await.unwrap_err();
    assert!(
        matches!(&err, BreakerError::Rejected(r) if r.reason() == RejectReason::ForcedOpen),
        "{err:?}"
    );
    assert_eq!(calls.load(Ordering::Relaxed), 0);
    assert_eq!(b.snapshot().rejections.forced, 1);
}

/// Metrics-only: one request with the shadow state OPEN is one shadow
/// rejection (the figure an operator reads before enforcing), and passes.
#[tokio::test(start_paused = true)]
async fn a_metrics_only_breaker_passes_and_counts_one_shadow_rejection_per_request() {
    let b = breaker();
    b.metrics_only();
    b.trip_now();
    assert_eq!(b.state(), State::Open);
    let mut svc = BreakerLayer::new(b.clone())
        .timeout(200 * MS)
        .unwrap()
        .classify(ErrorsOnly)
        .layer(answering_after(MS));
    for n in 1..=3 {
        svc.ready().await.unwrap().call(()).await.unwrap();
        assert_eq!(b.snapshot().shadow_rejections, n);
    }
}
