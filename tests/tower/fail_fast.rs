//! Failing fast: rejections are immediate and typed; a full bulkhead turns
//! away at once; `poll_ready` takes no probe; a request parked on a full
//! limit (directly or behind a `Buffer`) is woken and refused when the
//! breaker opens.

use crate::support::tower::*;
use crate::support::MS;
use std::future::{pending, Future};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;
use tailguard::clock::{ClockSource, ManualClock};
use tailguard::tower::{BreakerError, BreakerLayer, ErrorsOnly};
use tailguard::{Breaker, Bulkhead, RejectReason, State};
use tower::{service_fn, Layer, Service, ServiceExt};

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

// ---------------------------------------------------------------------------
// Rejection: "a request the breaker rejects or the bulkhead turns away fails
// at once with a BreakerError and never reaches the inner service" and "A
// rejection carries the breaker's retry_after".
// ---------------------------------------------------------------------------

/// The usual shape of a client stack: a concurrency limit under the breaker.
/// The downstream hangs, the limit fills, the breaker trips. A new request
/// (`oneshot`, i.e. `ready().await` then `call`) is rejected at once with
/// the breaker's `retry_after`, not left waiting on the inner limit.
///
/// Regression (a hostile review of the tower layer).
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
///
/// Regression (issue 15's hostile review).
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

/// A hundred services parked behind a full limit, a third of them dropped
/// while parked, the rest cloned after getting ready: one trip wakes and
/// refuses every one still waiting, three rounds over (the watch's slots
/// reused).
///
/// Regression (issue 15's hostile review).
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
///
/// Regression (issue 15's hostile review).
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

/// A recovery ramp's rejections are the layer's rejections: immediate,
/// typed (`Ramping`, with its hint), the service never called; the share
/// the ramp admits goes through.
#[tokio::test(start_paused = true)]
async fn a_recovery_ramp_s_rejections_are_rejections() {
    let b = builder().recovery_ramp(Duration::from_secs(1)).build().unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&calls);
    let mut svc = BreakerLayer::new(b.clone())
        .classify(ErrorsOnly)
        .layer(service_fn(move |()| {
            seen.fetch_add(1, Ordering::Relaxed);
            async { Ok::<_, std::io::Error>(()) }
        }));
    b.trip_now();
    tokio::time::advance(Duration::from_secs(1)).await;
    svc.ready().await.unwrap().call(()).await.unwrap(); // the probe closes it
    assert_eq!(b.snapshot().ramp.map(|r| r.admitted), Some(0.0));
    tokio::time::advance(250 * MS).await;
    let (mut ok, mut ramping) = (0usize, 0u64);
    for _ in 0..400 {
        match svc.ready().await.unwrap().call(()).await {
            Ok(()) => ok += 1,
            Err(BreakerError::Rejected(r)) => {
                assert_eq!((r.reason(), r.retry_after()), (RejectReason::Ramping, Some(100 * MS)));
                ramping += 1;
            }
            Err(other) => panic!("{other:?}"),
        }
    }
    assert!(ok.abs_diff(100) <= 3, "{ok} of 400 at 25%");
    assert_eq!(calls.load(Ordering::Relaxed), 1 + ok, "the probe and the admitted");
    assert_eq!(b.snapshot().rejections.ramping, ramping);
}
