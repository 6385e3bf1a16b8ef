//! Where the layer takes its permits and what a dropped response future
//! gives back (probe slot, bulkhead slot), under its cancel policy.

use crate::support::tower::*;
use crate::support::MS;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use tailguard::clock::ManualClock;
use tailguard::tower::{BreakerError, BreakerLayer, ErrorsOnly, ResponseFuture, ServerErrors};
use tailguard::{Breaker, Bulkhead, CancelPolicy, RejectReason, State};
use tower::{service_fn, Layer, Service, ServiceExt};

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

// ---------------------------------------------------------------------------
// Drop: "Dropping the response future ... cancels the permit: a probe's slot
// is returned at once, and the call counts as cancelled, neither failed nor
// slow."
// ---------------------------------------------------------------------------

/// The drop follows the breaker's `on_cancel` policy: with
/// `CancelPolicy::Failure` a dropped request counts as failed.
///
/// Regression (a hostile review of the tower layer).
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
///
/// Regression (a hostile review of the tower layer).
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
///
/// Regression (a hostile review of the tower layer).
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

/// "ResponseFuture ... (typical use: tokio::spawn of a hyper client's
/// future)": Send + 'static for hyper-util's client future.
///
/// From a hostile review of the tower layer (it passed; kept for what it covers).
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
///
/// From a hostile review of the tower layer (it passed; kept for what it covers).
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

/// A response future polled again after it completed panics ("polled after
/// completion") instead of polling the inner future again.
///
/// From a hostile review of the tower layer (it passed; kept for what it covers).
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
