//! The tower layer on tokio's paused clock, against in-process services:
//! where permits are taken, what a dropped response future gives back, how
//! responses are judged, timeouts, rejections, the bulkhead, and panics.
#![cfg(feature = "tower")]

use std::future::{pending, Future};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;
use tailguard::clock::{ClockSource, ManualClock};
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

// ------------------------------------------------------- override modes
// Every override behaves through the layer exactly as through `allow()`.

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

// ------------------------------------------------------ fail fast, parked
// "A full concurrency limit behind an open breaker still fails fast": also
// for a request that began waiting while the breaker was CLOSED.

fn hanging_io(
    calls: &Arc<AtomicUsize>,
) -> impl Service<(), Response = (), Error = std::io::Error, Future = impl Future<Output = Result<(), std::io::Error>>>
       + Clone
       + Send
       + 'static {
    let calls = Arc::clone(calls);
    service_fn(move |()| {
        calls.fetch_add(1, Ordering::Relaxed);
        pending::<Result<(), std::io::Error>>()
    })
}

/// Trips `b` through a window of slow calls closed by `tick` (the way a
/// slow consumer trips it), or by hand.
async fn trip_it(b: &Breaker, by_window: bool) {
    if by_window {
        for _ in 0..5 {
            b.allow().unwrap().record_latency(60 * MS, true);
        }
        tokio::time::advance(100 * MS).await;
        b.tick();
    } else {
        b.trip_now();
    }
    assert_eq!(b.state(), State::Open);
}

#[tokio::test(start_paused = true)]
async fn a_request_parked_on_a_full_limit_is_woken_and_refused_when_the_breaker_opens() {
    for by_window in [false, true] {
        let b = breaker();
        let calls = Arc::new(AtomicUsize::new(0));
        let svc = BreakerLayer::new(b.clone())
            .classify(ErrorsOnly)
            .layer(tower::limit::ConcurrencyLimitLayer::new(1).layer(hanging_io(&calls)));
        let mut first = svc.clone();
        let hung = first.ready().await.unwrap().call(());
        let mut second = svc.clone();
        let waiting = tokio::spawn(async move { second.ready().await?.call(()).await });
        tokio::time::sleep(MS).await;
        assert!(!waiting.is_finished(), "parked behind the limit while CLOSED");
        trip_it(&b, by_window).await;
        let out = tokio::time::timeout(MS, waiting)
            .await
            .expect("woken and refused when the breaker opened")
            .unwrap();
        assert!(matches!(out, Err(BreakerError::Rejected(_))), "{out:?}");
        assert_eq!(
            calls.load(Ordering::Relaxed),
            1,
            "only the first request reached the service"
        );
        drop(hung);
    }
}

#[tokio::test(start_paused = true)]
async fn behind_a_buffer_parked_and_new_requests_fail_fast_when_the_breaker_opens() {
    let b = breaker();
    let calls = Arc::new(AtomicUsize::new(0));
    let inner = BreakerLayer::new(b.clone())
        .classify(ErrorsOnly)
        .layer(tower::limit::ConcurrencyLimitLayer::new(1).layer(hanging_io(&calls)));
    let buffered = tower::buffer::Buffer::new(inner, 8);
    let send = |svc: &tower::buffer::Buffer<(), _>| {
        let mut svc = svc.clone();
        tokio::spawn(async move { svc.ready().await?.call(()).await })
    };
    let hung = send(&buffered);
    tokio::time::sleep(MS).await;
    let waiting = send(&buffered);
    tokio::time::sleep(MS).await;
    assert!(!waiting.is_finished());
    trip_it(&b, true).await;
    let rejected = |out: Result<(), tower::BoxError>| {
        let err = out.unwrap_err();
        matches!(
            err.downcast_ref::<BreakerError<std::io::Error>>(),
            Some(BreakerError::Rejected(_))
        )
    };
    let out = tokio::time::timeout(MS, waiting)
        .await
        .expect("the waiting request is refused at once");
    assert!(rejected(out.unwrap()));
    let after = send(&buffered);
    let out = tokio::time::timeout(MS, after)
        .await
        .expect("a request sent after the trip is refused at once");
    assert!(rejected(out.unwrap()));
    assert_eq!(calls.load(Ordering::Relaxed), 1);
    hung.abort();
}

// --------------------------------------------------- poll_ready and slots

/// Past the backoff, `poll_ready` decides nothing: it neither takes the
/// probe slot nor moves the breaker to HALF_OPEN; `call` does.
#[test]
fn poll_ready_past_the_backoff_takes_no_probe_and_makes_no_transition() {
    let clock = tailguard::clock::ManualClock::new();
    let b = Breaker::builder().clock(clock.clone()).ticker(false).build().unwrap();
    let mut svc = BreakerLayer::new(b.clone())
        .classify(ErrorsOnly)
        .layer(service_fn(|()| async { Ok::<_, ()>(()) }));
    b.trip_now();
    clock.advance(Duration::from_secs(1));
    let generation = b.snapshot().generation;
    let mut cx = Context::from_waker(Waker::noop());
    assert!(matches!(svc.poll_ready(&mut cx), Poll::Ready(Ok(()))));
    let s = b.snapshot();
    assert_eq!(
        (s.state, s.generation, s.probes_in_flight),
        (State::Open, generation, 0),
        "{s:?}"
    );
    // Another caller between poll_ready and call gets the probe.
    assert!(b.allow().unwrap().is_probe());
}

/// The race the deterministic test above rules out: `poll_ready` on one
/// thread, an `allow` on another, at the instant the backoff runs out.
/// The other caller is never refused for a probe slot nobody holds.
#[test]
fn poll_ready_never_makes_a_racing_caller_find_the_probe_slot_busy() {
    let clock = tailguard::clock::ManualClock::new();
    let b = Breaker::builder().clock(clock.clone()).ticker(false).build().unwrap();
    let svc = BreakerLayer::new(b.clone())
        .classify(ErrorsOnly)
        .layer(service_fn(|()| async { Ok::<_, ()>(()) }));
    // Spin handshakes, not a `Barrier` (whose waker always lags the thread
    // that releases it), and the allow delayed by 0..64 spins, so that the
    // two calls meet at every offset.
    use std::sync::atomic::AtomicU64;
    let rounds = 20_000u64;
    let (go, done) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let poller = {
        let (go, done, mut svc) = (Arc::clone(&go), Arc::clone(&done), svc);
        std::thread::spawn(move || {
            let mut cx = Context::from_waker(Waker::noop());
            for round in 1..=rounds {
                while go.load(Ordering::Acquire) != round {
                    std::hint::spin_loop();
                }
                let _ = svc.poll_ready(&mut cx);
                done.store(round, Ordering::Release);
            }
        })
    };
    let mut busy = 0;
    for round in 1..=rounds {
        b.reset();
        b.trip_now();
        clock.advance(Duration::from_secs(1));
        go.store(round, Ordering::Release);
        for _ in 0..round % 64 {
            std::hint::spin_loop();
        }
        match b.allow() {
            Err(r) if r.reason() == RejectReason::ProbesBusy => busy += 1,
            Ok(p) => p.abandon(),
            Err(_) => {}
        }
        while done.load(Ordering::Acquire) != round {
            std::hint::spin_loop();
        }
    }
    poller.join().unwrap();
    assert_eq!(busy, 0, "refused ProbesBusy {busy} times with no probe out");
}

/// An error of the inner service's `poll_ready` is not a call: the request
/// never reached it.
#[tokio::test(start_paused = true)]
async fn an_inner_poll_ready_error_says_the_service_was_not_called() {
    #[derive(Debug)]
    struct Gone;
    impl Service<()> for Gone {
        type Response = ();
        type Error = &'static str;
        type Future = std::future::Ready<Result<(), &'static str>>;
        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
            Poll::Ready(Err("connection pool closed"))
        }
        fn call(&mut self, (): ()) -> Self::Future {
            unreachable!("never ready")
        }
    }
    let b = breaker();
    let mut svc = BreakerLayer::new(b.clone()).classify(ErrorsOnly).layer(Gone);
    let err = svc.ready().await.unwrap_err();
    assert!(!err.called(), "{err:?}");
    assert_eq!(close(&b).await.window.errors, 0, "not a call: nothing for the breaker");
}

// ------------------------------------------------ a hostile review's tests
// (issue 15: each failed on the code it attacked)

/// An OPEN breaker whose clock stepped back (60 s, a year) still refuses:
/// `allow` says so, and `poll_ready` must too, rather than park on the
/// inner service with nothing to wake it.
#[derive(Clone)]
struct NeverReady;
impl Service<()> for NeverReady {
    type Response = ();
    type Error = ();
    type Future = std::future::Ready<Result<(), ()>>;
    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), ()>> {
        Poll::Pending
    }
    fn call(&mut self, (): ()) -> Self::Future {
        unreachable!("never ready")
    }
}

/// Module docs: "if the breaker is OPEN with its backoff running, or forced
/// open, it is ready at once and the next `call` fails with that rejection,
/// however long the inner service would take to be ready". After the clock
/// steps back (an NTP step of a minute, or a year), the breaker is OPEN,
/// its backoff running, `allow` rejects it as Open, yet `poll_ready` parks
/// on the inner service, and no transition will ever wake it.
#[test]
fn an_open_breaker_after_a_clock_step_back_still_fails_fast_in_poll_ready() {
    for step in [Duration::from_secs(60), Duration::from_secs(365 * 24 * 3600)] {
        let clock = ManualClock::new();
        clock.set(Duration::from_secs(2 * 365 * 24 * 3600));
        let b = Breaker::builder().clock(clock.clone()).ticker(false).build().unwrap();
        let probe = b.clone(); // to ask allow() afterwards
        let mut svc = BreakerLayer::new(b.clone()).classify(ErrorsOnly).layer(NeverReady);
        b.trip_now();
        assert_eq!(b.state(), State::Open);
        clock.rewind(step);
        let mut cx = Context::from_waker(Waker::noop());
        let ready = svc.poll_ready(&mut cx);
        // What allow() says at this very moment: rejected, OPEN, backoff running.
        let verdict = probe.allow().map(|p| p.abandon());
        assert!(
            matches!(&verdict, Err(r) if r.reason() == RejectReason::Open),
            "step {step:?}: allow() rejects: {verdict:?}"
        );
        assert!(
            matches!(ready, Poll::Ready(Ok(()))),
            "step {step:?}: OPEN with its backoff running, but poll_ready returned {ready:?} \
             (parked on the inner service, never to be woken)"
        );
    }
}

/// A response future that completes at once with a 200 and panics when it
/// is dropped.
struct PanicOnDrop;
impl std::future::Future for PanicOnDrop {
    type Output = Result<http::Response<()>, ()>;
    fn poll(self: std::pin::Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Self::Output> {
        Poll::Ready(Ok(http::Response::new(())))
    }
}
impl Drop for PanicOnDrop {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            panic!("a service bug in a destructor (expected by this test)");
        }
    }
}

/// Module docs: "if it [the classifier] panics, the call counts as failed
/// and the panic goes on to the caller. So does a panic of the inner
/// service's `call` or of its future." A future whose destructor panics
/// (the layer drops it as soon as it is ready) is counted as cancelled,
/// neither failed nor a call.
/// "So does a panic of the inner service's `call` or of its future": also
/// one that panics in its destructor, when the layer drops it at its
/// completion.
#[test]
fn an_inner_future_panicking_in_its_drop_counts_as_failed() {
    let clock = ManualClock::new();
    let b = Breaker::builder().clock(clock.clone()).ticker(false).build().unwrap();
    let mut svc = BreakerLayer::new(b.clone()).layer(tower::service_fn(|()| PanicOnDrop));
    let mut cx = Context::from_waker(Waker::noop());
    assert!(matches!(svc.poll_ready(&mut cx), Poll::Ready(Ok(()))));
    let mut fut = Box::pin(svc.call(()));
    let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| fut.as_mut().poll(&mut cx)));
    assert!(out.is_err(), "the panic goes on to the caller");
    drop(fut);
    clock.advance(Duration::from_secs(1));
    b.tick();
    let w = b.snapshot().window;
    assert_eq!(
        (w.calls, w.errors, w.cancelled),
        (1, 1, 0),
        "a panic of the inner future counts as a failed call: {w:?}"
    );
}

/// A hundred services parked behind a full limit, a third of them dropped
/// while parked, the rest cloned after getting ready: one trip wakes and
/// refuses every one still waiting, three rounds over (the watch's slots
/// reused).
#[tokio::test(start_paused = true)]
async fn many_parked_some_dropped_some_cloned_all_woken_by_one_trip() {
    let b = Breaker::builder()
        .clock(ClockSource::tokio())
        .ticker(false)
        .build()
        .unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let c = calls.clone();
    let svc =
        BreakerLayer::new(b.clone())
            .classify(ErrorsOnly)
            .layer(tower::limit::ConcurrencyLimitLayer::new(1).layer(service_fn(move |()| {
                c.fetch_add(1, Ordering::Relaxed);
                pending::<Result<(), std::io::Error>>()
            })));
    for round in 0..3 {
        b.reset();
        let mut first = svc.clone();
        let hung = first.ready().await.unwrap().call(());
        let mut waiting = Vec::new();
        let mut doomed = Vec::new();
        for i in 0..100 {
            let mut s = svc.clone();
            let t = tokio::spawn(async move {
                let mut s2 = s.clone();
                s.ready().await?;
                // cloned after being ready: the clone parks on its own
                s2.ready().await?.call(()).await
            });
            if i % 3 == 0 {
                doomed.push(t);
            } else {
                waiting.push(t);
            }
        }
        tokio::time::sleep(MS).await;
        for t in &doomed {
            t.abort(); // dropped while parked
        }
        tokio::time::sleep(MS).await;
        b.trip_now();
        for t in waiting {
            let out = tokio::time::timeout(MS, t).await.expect("woken at once").unwrap();
            assert!(matches!(out, Err(BreakerError::Rejected(_))), "round {round}: {out:?}");
        }
        drop(hung);
    }
    assert_eq!(calls.load(Ordering::Relaxed), 3);
}

/// A waker that counts its wakes.
struct CountingWaker(AtomicUsize);

impl std::task::Wake for CountingWaker {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// A task parked on the inner service is woken by a transition into OPEN
/// (one that refuses: not metrics-only), and by nothing else: transitions
/// that leave the breaker admitting (forced closed, disabled, a reset, a
/// metrics-only OPEN) leave it parked, as they must, since it is waiting
/// for the inner service, not for the breaker.
#[test]
fn a_parked_task_is_woken_by_a_refusing_open_and_by_nothing_else() {
    let clock = ManualClock::new();
    let b = Breaker::builder().clock(clock.clone()).ticker(false).build().unwrap();
    let mut svc = BreakerLayer::new(b.clone()).classify(ErrorsOnly).layer(NeverReady);
    let counter = Arc::new(CountingWaker(AtomicUsize::new(0)));
    let waker = Waker::from(Arc::clone(&counter));
    let mut cx = Context::from_waker(&waker);
    let wakes = || counter.0.load(Ordering::SeqCst);
    assert!(svc.poll_ready(&mut cx).is_pending());
    b.force_closed();
    b.disable();
    b.reset();
    b.metrics_only();
    b.trip_now(); // OPEN under metrics-only: admits all the same
    assert_eq!(wakes(), 0, "woken by a transition that still admits");
    b.reset();
    assert!(svc.poll_ready(&mut cx).is_pending());
    assert_eq!(wakes(), 0);
    b.trip_now();
    assert_eq!(wakes(), 1, "woken by the trip");
    assert!(svc.poll_ready(&mut cx).is_ready());
    // Forced open refuses too (a fresh service: the first is ready now,
    // and stays so until its call).
    b.reset();
    let mut svc = BreakerLayer::new(b.clone()).classify(ErrorsOnly).layer(NeverReady);
    assert!(svc.poll_ready(&mut cx).is_pending());
    b.force_open();
    assert_eq!(wakes(), 2, "woken when forced open");
}
