//! The tower layer on tokio's paused clock, against in-process services:
//! where permits are taken, what a dropped response future gives back, how
//! responses are judged, timeouts, rejections, the bulkhead, and panics.
#![cfg(feature = "tower")]

use std::future::{pending, Future};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;
use tailguard::clock::ClockSource;
use tailguard::tower::{BreakerError, BreakerLayer, ErrorsOnly};
use tailguard::{Breaker, Bulkhead, RejectReason, State};
use tower::{service_fn, Layer, Service, ServiceExt};

const MS: Duration = Duration::from_millis(1);

/// A breaker on tokio's clock, ticked by hand; windows of 100 ms judged
/// alone, five calls at least, one probe that closes it.
fn breaker() -> Breaker {
    Breaker::builder()
        .clock(ClockSource::tokio())
        .ticker(false)
        .window(100 * MS)
        .latency_threshold(50 * MS)
        .trip_windows(1)
        .min_calls(5)
        .half_open_probes(1)
        .success_to_close(1)
        .base_backoff(MS * 1000)
        .build()
        .unwrap()
}

/// Closes the window: what the snapshot's `window` and `totals` then count.
async fn close(b: &Breaker) -> tailguard::Snapshot {
    tokio::time::advance(100 * MS).await;
    b.tick();
    b.snapshot()
}

fn response(status: u16) -> http::Response<()> {
    http::Response::builder().status(status).body(()).unwrap()
}

/// Trips `b` and lets its backoff run out: the next call is its only probe.
async fn half_open(b: &Breaker) {
    b.trip_now();
    tokio::time::advance(b.snapshot().next_probe_in.unwrap()).await;
}

/// A service whose calls never complete, counting its calls.
fn hanging(
    calls: &Arc<AtomicUsize>,
) -> impl Service<(), Response = (), Error = (), Future = impl Future<Output = Result<(), ()>>> + Clone {
    let calls = Arc::clone(calls);
    service_fn(move |()| {
        calls.fetch_add(1, Ordering::Relaxed);
        pending::<Result<(), ()>>()
    })
}

#[tokio::test(start_paused = true)]
async fn poll_ready_without_call_holds_no_permit() {
    let b = breaker();
    half_open(&b).await;
    let calls = Arc::new(AtomicUsize::new(0));
    let mut svc = BreakerLayer::new(b.clone()).classify(ErrorsOnly).layer(hanging(&calls));
    let mut cx = Context::from_waker(Waker::noop());
    for _ in 0..1000 {
        assert!(matches!(svc.poll_ready(&mut cx), Poll::Ready(Ok(()))));
    }
    assert_eq!(b.snapshot().probes_in_flight, 0, "poll_ready took no probe slot");
    let probe = svc.call(());
    assert_eq!(b.snapshot().probes_in_flight, 1, "call took the probe slot");
    drop(probe);
}

#[tokio::test(start_paused = true)]
async fn a_dropped_response_future_gives_back_the_probe_and_the_bulkhead_slot() {
    let b = breaker();
    let bulkhead = Bulkhead::new(1).unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let mut svc = BreakerLayer::new(b.clone())
        .bulkhead(bulkhead.clone())
        .classify(ErrorsOnly)
        .layer(hanging(&calls));
    half_open(&b).await;
    for round in 0..1000 {
        let fut = svc.ready().await.unwrap().call(());
        let s = b.snapshot();
        assert_eq!(
            (s.state, s.probes_in_flight, bulkhead.in_flight()),
            (State::HalfOpen, 1, 1),
            "round {round}"
        );
        // A second request finds the probe slot taken: nothing called.
        let busy = svc.ready().await.unwrap().call(()).await.unwrap_err();
        assert!(matches!(busy, BreakerError::Rejected(r) if r.reason() == RejectReason::ProbesBusy));
        drop(fut); // the client gave up
        let s = b.snapshot();
        assert_eq!((s.probes_in_flight, bulkhead.in_flight()), (0, 0), "round {round}");
    }
    assert_eq!(
        calls.load(Ordering::Relaxed),
        1000,
        "only the probes reached the service"
    );
    let s = b.snapshot();
    assert_eq!(
        (s.state, s.trip_count, s.totals.errors),
        (State::HalfOpen, 1, 0),
        "no probe counted as failed"
    );
}

#[tokio::test(start_paused = true)]
async fn server_errors_trip_it_client_errors_do_not() {
    for (status, trips) in [(404, false), (429, false), (500, true), (503, true)] {
        let b = breaker();
        let mut svc =
            BreakerLayer::new(b.clone()).layer(service_fn(move |()| async move { Ok::<_, ()>(response(status)) }));
        for _ in 0..20 {
            let r = svc.ready().await.unwrap().call(()).await.unwrap();
            assert_eq!(r.status(), status, "the response is passed through whatever it says");
        }
        tokio::time::advance(100 * MS).await;
        b.tick();
        let s = b.snapshot();
        assert_eq!(s.totals.errors, if trips { 20 } else { 0 }, "{status}");
        assert_eq!(s.state == State::Open, trips, "{status}: {s:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn the_caller_s_classifier_decides() {
    let b = breaker();
    let rule = |r: &http::Response<()>| r.status() == 429;
    let mut svc = BreakerLayer::new(b.clone())
        .classify(rule)
        .layer(service_fn(|s: u16| async move { Ok::<_, ()>(response(s)) }));
    for s in [429, 429, 500, 200, 429] {
        svc.ready().await.unwrap().call(s).await.unwrap();
    }
    assert_eq!(
        close(&b).await.window.errors,
        3,
        "429 fails, 500 does not, by the caller's rule"
    );
}

#[tokio::test(start_paused = true)]
async fn slow_successes_trip_it_on_latency() {
    let b = breaker();
    let svc = BreakerLayer::new(b.clone()).layer(service_fn(|()| async {
        tokio::time::sleep(80 * MS).await; // over the 50 ms threshold; a 200
        Ok::<_, ()>(response(200))
    }));
    // Five at once, all within one window (in sequence they would span
    // four windows, judged as one span needing four times the calls).
    let calls: Vec<_> = (0..5).map(|_| tokio::spawn(svc.clone().oneshot(()))).collect();
    for call in calls {
        assert_eq!(call.await.unwrap().unwrap().status(), 200);
    }
    tokio::time::advance(20 * MS).await;
    b.tick();
    let s = b.snapshot();
    assert_eq!((s.state, s.totals.errors, s.totals.slow), (State::Open, 0, 5), "{s:?}");
    assert_eq!((s.window.calls, s.window.slow), (5, 5), "the window that tripped it");
}

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

#[tokio::test(start_paused = true)]
async fn a_rejection_is_immediate_typed_and_says_when_to_retry() {
    let b = breaker();
    let calls = Arc::new(AtomicUsize::new(0));
    let mut svc = BreakerLayer::new(b.clone()).classify(ErrorsOnly).layer(hanging(&calls));
    b.trip_now();
    tokio::time::advance(300 * MS).await;
    let err = svc.ready().await.unwrap().call(()).await.unwrap_err();
    assert_eq!(err.retry_after(), Some(700 * MS), "{err:?}");
    assert_eq!(err.retry_after(), b.snapshot().next_probe_in);
    assert!(matches!(&err, BreakerError::Rejected(r) if r.reason() == RejectReason::Open));
    assert!(!err.called());
    assert_eq!(calls.load(Ordering::Relaxed), 0, "the service never saw it");
    assert_eq!(b.snapshot().rejections.open, 1);
}

#[tokio::test(start_paused = true)]
async fn a_full_bulkhead_turns_away_at_once_and_returns_the_probe_slot() {
    let b = breaker();
    let bulkhead = Bulkhead::new(1).unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let layer = BreakerLayer::new(b.clone())
        .bulkhead(bulkhead.clone())
        .classify(ErrorsOnly);
    let mut svc = layer.layer(hanging(&calls));
    let held = bulkhead.try_acquire().unwrap(); // someone else holds the only slot
    half_open(&b).await;
    for _ in 0..3 {
        let err = svc.ready().await.unwrap().call(()).await.unwrap_err();
        assert!(matches!(err, BreakerError::BulkheadFull), "{err:?}");
        assert_eq!(err.retry_after(), None);
        assert_eq!(b.snapshot().probes_in_flight, 0, "the probe's slot went back");
    }
    assert_eq!(calls.load(Ordering::Relaxed), 0);
    assert_eq!(bulkhead.rejections(), 3);
    drop(held);
    let probe = svc.ready().await.unwrap().call(());
    assert_eq!((b.snapshot().probes_in_flight, calls.load(Ordering::Relaxed)), (1, 1));
    drop(probe);
}

#[tokio::test(start_paused = true)]
async fn an_inner_error_is_a_failure_and_is_passed_through() {
    let b = breaker();
    let mut svc = BreakerLayer::new(b.clone())
        .classify(ErrorsOnly)
        .layer(service_fn(|()| async { Err::<(), _>("connection reset") }));
    let err = svc.ready().await.unwrap().call(()).await.unwrap_err();
    assert_eq!(err.into_inner(), Some("connection reset"));
    assert_eq!(close(&b).await.window.errors, 1);
}

#[tokio::test(start_paused = true)]
async fn a_panicking_service_or_classifier_counts_a_failure_and_frees_the_slot() {
    let b = breaker();
    let bulkhead = Bulkhead::new(4).unwrap();
    let mut svc = BreakerLayer::new(b.clone())
        .bulkhead(bulkhead.clone())
        .classify(|_: &u32| panic!("classifier bug"))
        .layer(service_fn(|panics: bool| async move {
            tokio::task::yield_now().await;
            assert!(!panics, "service bug");
            Ok::<u32, ()>(1)
        }));
    for panics in [true, false] {
        let fut = svc.ready().await.unwrap().call(panics);
        let joined = tokio::spawn(fut).await;
        assert!(joined.unwrap_err().is_panic());
        assert_eq!(bulkhead.in_flight(), 0);
    }
    let s = close(&b).await;
    assert_eq!(
        (s.window.calls, s.window.errors, s.window.cancelled),
        (2, 2, 0),
        "{s:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_good_probe_through_the_layer_closes_it() {
    let b = breaker();
    let healthy = Arc::new(AtomicUsize::new(0));
    let h = Arc::clone(&healthy);
    let mut svc = BreakerLayer::new(b.clone()).layer(service_fn(move |()| {
        let status = if h.load(Ordering::Relaxed) == 1 { 200 } else { 503 };
        async move { Ok::<_, ()>(response(status)) }
    }));
    for _ in 0..10 {
        svc.ready().await.unwrap().call(()).await.unwrap();
    }
    tokio::time::advance(100 * MS).await;
    b.tick();
    assert_eq!(b.state(), State::Open);
    healthy.store(1, Ordering::Relaxed);
    tokio::time::advance(b.snapshot().next_probe_in.unwrap()).await;
    let r = svc.ready().await.unwrap().call(()).await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(b.state(), State::Closed, "one good probe closes it");
}
