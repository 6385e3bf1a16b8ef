//! A panicking service, future, destructor or classifier counts a failure,
//! frees its slots, and goes on to the caller.

use crate::hostile_round3::PanicsThenAnswers;
use crate::support::tower::*;
use crate::support::MS;
use std::future::Future;
use std::task::{Context, Poll, Waker};
use std::time::Duration;
use tailguard::clock::ManualClock;
use tailguard::tower::{BreakerLayer, ErrorsOnly};
use tailguard::{Breaker, Bulkhead};
use tower::{service_fn, Layer, Service, ServiceExt};

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

/// "So does a panic of the inner service's `call`": a `call` that panics
/// counts as failed (not cancelled) and gives its bulkhead slot back.
///
/// From a hostile review of the tower layer (it passed; kept for what it covers).
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
///
/// Regression (issue 15's hostile review).
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

/// A hostile caller catches the panic of the inner future's poll and polls
/// the response future again: the request was counted once, as failed, at
/// the panic; the second poll neither counts it again nor hands back a
/// response the breaker never judged (it panics), and the bulkhead slot is
/// back after the future is dropped.
#[test]
fn a_response_future_polled_again_after_its_inner_future_panicked_counts_once() {
    let clock = ManualClock::new();
    let b = Breaker::builder().clock(clock.clone()).ticker(false).build().unwrap();
    let bulkhead = Bulkhead::new(1).unwrap();
    let mut svc = BreakerLayer::new(b.clone())
        .bulkhead(bulkhead.clone())
        .classify(ErrorsOnly)
        .layer(service_fn(|()| PanicsThenAnswers(Default::default())));
    let mut cx = Context::from_waker(Waker::noop());
    assert!(svc.poll_ready(&mut cx).is_ready());
    let mut fut = Box::pin(svc.call(()));
    for poll in 0..3 {
        let polled = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| fut.as_mut().poll(&mut cx)));
        assert!(
            polled.is_err(),
            "poll {poll} after the panic returned {:?}",
            polled.ok()
        );
    }
    drop(fut);
    assert_eq!(bulkhead.in_flight(), 0);
    clock.advance(Duration::from_secs(3600));
    b.tick();
    let t = b.snapshot().totals;
    assert_eq!((t.calls, t.errors, t.cancelled), (1, 1, 0), "{t:?}");
}
