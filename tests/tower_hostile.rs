//! Hostile tests of the tower layer (`src/tower.rs`): each test quotes the
//! doc sentence it holds the layer to. Run with
//! `cargo test --features tower --test tower_hostile`.
#![cfg(feature = "tower")]

use std::future::{pending, Future};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tailguard::clock::{ClockSource, ManualClock};
use tailguard::tower::{BreakerError, BreakerLayer, ErrorsOnly, ResponseFuture, ServerErrors};
use tailguard::{Breaker, Bulkhead, CancelPolicy, RejectReason, State};
use tower::{service_fn, Layer, Service, ServiceExt};

const MS: Duration = Duration::from_millis(1);

/// As in tests/tower.rs: tokio's clock, ticked by hand, windows of 100 ms
/// judged alone, five calls at least, one probe that closes it.
fn builder() -> tailguard::BreakerBuilder {
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
}

fn breaker() -> Breaker {
    builder().build().unwrap()
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

// ---------------------------------------------------------------------------
// Timeout: "A request that runs past it fails with BreakerError::TimedOut and
// counts in the breaker as failed and slow."
// ---------------------------------------------------------------------------

/// A timeout that is not a whole number of milliseconds: tokio's timer
/// rounds its deadline up to the next millisecond, where the response also
/// lands, in the same poll. The response exists: it is returned, and counted
/// in the breaker as a timeout (failed and slow), as documented.
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

// ---------------------------------------------------------------------------
// Drop: "Dropping the response future ... cancels the permit: a probe's slot
// is returned at once, and the call counts as cancelled, neither failed nor
// slow."
// ---------------------------------------------------------------------------

/// The drop follows the breaker's `on_cancel` policy: with
/// `CancelPolicy::Failure` a dropped request counts as failed.
#[tokio::test(start_paused = true)]
async fn a_dropped_response_future_follows_the_cancel_policy() {
    let b = builder().on_cancel(CancelPolicy::Failure).build().unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let mut svc = BreakerLayer::new(b.clone()).classify(ErrorsOnly).layer(hanging(&calls));
    drop(svc.ready().await.unwrap().call(())); // the client gave up
    tokio::time::advance(100 * MS).await;
    b.tick();
    let t = b.snapshot().totals;
    assert_eq!(
        (t.calls, t.cancelled, t.errors),
        (1, 0, 1),
        "failed, by the policy: {t:?}"
    );
}

/// With `CancelPolicy::Failure`, a dropped probe is a failed probe: the
/// breaker re-opens (and the slot is free).
#[tokio::test(start_paused = true)]
async fn a_dropped_probe_future_follows_the_cancel_policy() {
    let b = builder().on_cancel(CancelPolicy::Failure).build().unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let mut svc = BreakerLayer::new(b.clone()).classify(ErrorsOnly).layer(hanging(&calls));
    half_open(&b).await;
    let probe = svc.ready().await.unwrap().call(());
    assert_eq!(b.snapshot().probes_in_flight, 1);
    drop(probe); // the client gave up on the probe
    let s = b.snapshot();
    assert_eq!(
        (s.state, s.probes_in_flight, s.trip_count),
        (State::Open, 0, 2),
        "{s:?}"
    );
}

/// With in-flight tracking, a hung request a window close counted as slow
/// stays counted so when its future is dropped (once, not as cancelled).
#[tokio::test(start_paused = true)]
async fn a_dropped_response_future_in_flight_tracking_claimed_stays_counted_as_slow() {
    let b = builder().track_in_flight(true).min_calls(50).build().unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let mut svc = BreakerLayer::new(b.clone()).classify(ErrorsOnly).layer(hanging(&calls));
    let fut = svc.ready().await.unwrap().call(());
    for _ in 0..3 {
        tokio::time::advance(100 * MS).await;
        b.tick();
    }
    drop(fut); // the client gave up
    tokio::time::advance(100 * MS).await;
    b.tick();
    let t = b.snapshot().totals;
    assert_eq!((t.cancelled, t.errors, t.slow), (0, 0, 1), "{t:?}");
}

// ---------------------------------------------------------------------------
// Rejection: "a request the breaker rejects or the bulkhead turns away fails
// at once with a BreakerError and never reaches the inner service" and "A
// rejection carries the breaker's retry_after".
// ---------------------------------------------------------------------------

/// The usual shape of a client stack: a concurrency limit under the breaker.
/// The downstream hangs, the limit fills, the breaker trips. A new request
/// (`oneshot`, i.e. `ready().await` then `call`) is rejected at once with
/// the breaker's `retry_after`, not left waiting on the inner limit.
#[tokio::test(start_paused = true)]
async fn an_open_breaker_fails_fast_when_the_inner_service_is_not_ready() {
    let b = breaker();
    let calls = Arc::new(AtomicUsize::new(0));
    let svc = BreakerLayer::new(b.clone())
        .classify(ErrorsOnly)
        .layer(tower::limit::ConcurrencyLimit::new(hanging(&calls), 1));
    let _hung = tokio::spawn(svc.clone().oneshot(())); // holds the only slot of the limit
    tokio::task::yield_now().await;
    assert_eq!(calls.load(Ordering::Relaxed), 1);
    b.trip_now(); // as after the run of slow calls
    assert_eq!(b.state(), State::Open);
    let r = tokio::time::timeout(Duration::from_secs(1), svc.clone().oneshot(())).await;
    match r {
        Ok(Err(BreakerError::Rejected(rej))) => assert!(rej.retry_after().is_some()),
        Ok(other) => panic!("expected a rejection, got {other:?}"),
        Err(_) => panic!("an OPEN breaker's request waited 1 s on the inner service instead of failing at once"),
    }
}

// ---------------------------------------------------------------------------
// Passing tests kept: paths tests/tower.rs does not cover.
// ---------------------------------------------------------------------------

/// "ResponseFuture ... (typical use: tokio::spawn of a hyper client's
/// future)": Send + 'static for hyper-util's client future.
#[test]
fn the_response_future_of_a_hyper_client_is_send_and_static() {
    fn spawnable<T: Send + 'static>() {}
    spawnable::<ResponseFuture<hyper_util::client::legacy::ResponseFuture, ServerErrors>>();
    fn sync<T: Sync>() {}
    sync::<ResponseFuture<std::future::Ready<Result<(), ()>>, ErrorsOnly>>();
}

/// Many clones on a multi-thread runtime racing (behind a barrier) through
/// HALF_OPEN: no more requests reach the service than there are probe
/// slots; the rest are rejected as ProbesBusy; dropping the hanging probes
/// frees every slot.
#[test]
#[allow(clippy::async_yields_async)] // each task hands back its (unpolled) response future
fn concurrent_clones_never_exceed_the_probe_slots() {
    use std::task::{Context, Poll, Waker};
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .unwrap();
    const N: usize = 32;
    for round in 0..200 {
        let clock = ManualClock::new();
        let b = Breaker::builder()
            .clock(clock.clone())
            .ticker(false)
            .half_open_probes(3)
            .build()
            .unwrap();
        b.trip_now();
        clock.advance(b.snapshot().next_probe_in.unwrap());
        let calls = Arc::new(AtomicUsize::new(0));
        let svc = BreakerLayer::new(b.clone()).classify(ErrorsOnly).layer(hanging(&calls));
        let barrier = Arc::new(tokio::sync::Barrier::new(N));
        let futs = rt.block_on(async {
            let tasks: Vec<_> = (0..N)
                .map(|_| {
                    let mut svc = svc.clone();
                    let barrier = Arc::clone(&barrier);
                    tokio::spawn(async move {
                        let svc = svc.ready().await.unwrap();
                        barrier.wait().await;
                        svc.call(())
                    })
                })
                .collect();
            let mut futs = Vec::new();
            for t in tasks {
                futs.push(t.await.unwrap());
            }
            futs
        });
        let mut cx = Context::from_waker(Waker::noop());
        let (mut busy, mut hanging_probes) = (0, 0);
        let mut futs: Vec<_> = futs.into_iter().map(Box::pin).collect();
        for f in &mut futs {
            match f.as_mut().poll(&mut cx) {
                Poll::Ready(Err(BreakerError::Rejected(r))) => {
                    assert_eq!(r.reason(), RejectReason::ProbesBusy);
                    busy += 1;
                }
                Poll::Pending => hanging_probes += 1,
                other => panic!("round {round}: {other:?}"),
            }
        }
        assert_eq!(
            (calls.load(Ordering::Relaxed), hanging_probes, busy),
            (3, 3, N - 3),
            "round {round}"
        );
        assert_eq!(b.snapshot().probes_in_flight, 3, "round {round}");
        drop(futs);
        assert_eq!(
            b.snapshot().probes_in_flight,
            0,
            "round {round}: every probe was dropped"
        );
    }
}

/// A probe whose classifier panics fails the probe (re-opens), gives the
/// probe slot back, and, once dropped, the bulkhead slot.
#[tokio::test(start_paused = true)]
async fn a_probe_whose_classifier_panics_reopens_and_frees_its_slots() {
    let b = breaker();
    let bulkhead = Bulkhead::new(1).unwrap();
    let mut svc = BreakerLayer::new(b.clone())
        .bulkhead(bulkhead.clone())
        .classify(|_: &u8| -> bool { panic!("classifier bug") })
        .layer(service_fn(|()| async {
            tokio::task::yield_now().await;
            Ok::<u8, ()>(1)
        }));
    half_open(&b).await;
    let probe = svc.ready().await.unwrap().call(());
    assert_eq!(b.snapshot().probes_in_flight, 1);
    assert!(tokio::spawn(probe).await.unwrap_err().is_panic());
    let s = b.snapshot();
    assert_eq!(
        (s.state, s.probes_in_flight, s.trip_count, bulkhead.in_flight()),
        (State::Open, 0, 2, 0),
        "{s:?}"
    );
}

/// Requests admitted before a trip that fail after the recovery are stale:
/// they do not re-trip the recovered breaker.
#[tokio::test(start_paused = true)]
async fn requests_from_before_a_trip_failing_after_recovery_do_not_retrip() {
    let b = breaker();
    let release = Arc::new(tokio::sync::Notify::new());
    let r = Arc::clone(&release);
    let svc = BreakerLayer::new(b.clone()).layer(service_fn(move |old: bool| {
        let r = Arc::clone(&r);
        async move {
            if old {
                r.notified().await;
                return Ok::<_, ()>(http::Response::builder().status(503).body(()).unwrap());
            }
            Ok(http::Response::builder().status(200).body(()).unwrap())
        }
    }));
    let old: Vec<_> = (0..10).map(|_| tokio::spawn(svc.clone().oneshot(true))).collect();
    tokio::task::yield_now().await;
    half_open(&b).await;
    svc.clone().oneshot(false).await.unwrap(); // the probe closes it
    assert_eq!(b.state(), State::Closed);
    tokio::time::advance(100 * MS).await;
    b.tick(); // the window begun before the recovery is closed
    release.notify_waiters();
    for o in old {
        assert_eq!(o.await.unwrap().unwrap().status(), 503);
    }
    tokio::time::advance(100 * MS).await;
    b.tick();
    let s = b.snapshot();
    assert_eq!((s.state, s.trip_count), (State::Closed, 1), "{s:?}");
    assert_eq!((s.window.calls, s.window.errors, s.window.stale), (0, 0, 10), "{s:?}");
}

/// "So does a panic of the inner service's `call`": a `call` that panics
/// counts as failed (not cancelled) and gives its bulkhead slot back.
#[tokio::test(start_paused = true)]
async fn a_panicking_inner_call_counts_failed_and_frees_the_slot() {
    let b = breaker();
    let bulkhead = Bulkhead::new(1).unwrap();
    let mut svc = BreakerLayer::new(b.clone())
        .bulkhead(bulkhead.clone())
        .classify(ErrorsOnly)
        .layer(service_fn(|()| -> std::future::Ready<Result<(), ()>> {
            panic!("bug in call")
        }));
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        assert!(svc.poll_ready(&mut cx).is_ready());
        drop(svc.call(()));
    }));
    assert!(caught.is_err());
    assert_eq!(bulkhead.in_flight(), 0);
    tokio::time::advance(100 * MS).await;
    b.tick();
    let t = b.snapshot().totals;
    assert_eq!((t.calls, t.errors, t.cancelled), (1, 1, 0), "{t:?}");
}

/// A response future polled again after it completed panics ("polled after
/// completion") instead of polling the inner future again.
#[tokio::test(start_paused = true)]
async fn a_response_future_polled_after_completion_panics() {
    let b = breaker();
    let polls = Arc::new(AtomicUsize::new(0));
    let p = Arc::clone(&polls);
    let mut svc = BreakerLayer::new(b).classify(ErrorsOnly).layer(service_fn(move |()| {
        let p = Arc::clone(&p);
        std::future::poll_fn(move |_| {
            p.fetch_add(1, Ordering::Relaxed);
            std::task::Poll::Ready(Ok::<_, ()>(()))
        })
    }));
    let mut fut = Box::pin(svc.ready().await.unwrap().call(()));
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    assert!(fut.as_mut().poll(&mut cx).is_ready());
    let again = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| fut.as_mut().poll(&mut cx)));
    assert!(again.is_err());
    assert_eq!(
        polls.load(Ordering::Relaxed),
        1,
        "the inner future was not polled again"
    );
}
