//! A real `reqwest` client behind the breaker, against a real HTTP server
//! on 127.0.0.1 whose latency and status the test changes at run time: the
//! client through the tower layer as it is (feature `reqwest`), and a
//! `reqwest_middleware` client with `BreakerMiddleware` (feature
//! `reqwest-middleware`). The server spends its latency on the breaker's
//! manual clock, so no test sleeps on the wall clock.

use crate::support::http::{breaker, Server, PROBES};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tailguard::clock::ManualClock;
use tailguard::tower::{BreakerError, BreakerLayer, BreakerMiddleware};
use tailguard::{Breaker, RejectReason, State};
use tower::{Layer, ServiceExt};

/// What a request came to: a status, or a refusal (with its Retry-After
/// in whole seconds), or another error.
#[derive(Debug, PartialEq)]
enum Answer {
    Status(u16),
    Refused(RejectReason, Option<u64>),
    Failed(String),
}

type Send = Box<dyn Fn() -> Pin<Box<dyn Future<Output = Answer> + std::marker::Send>> + std::marker::Send + Sync>;

/// The scenario, whatever the client: healthy, slow (trips on latency),
/// refused while open (never reaching the server, with a Retry-After),
/// recovered through the probes alone, then failing with 503s (trips on
/// the error rate).
async fn scenario(clock: &ManualClock, b: &Breaker, server: &Server, send: Send) {
    let close_window = || {
        clock.advance(Duration::from_secs(60));
        b.tick();
        b.snapshot()
    };
    for _ in 0..10 {
        assert_eq!(send().await, Answer::Status(200));
    }
    assert_eq!(close_window().state, State::Closed);

    server.set(900, 200);
    for _ in 0..10 {
        assert_eq!(send().await, Answer::Status(200), "slow, but a 200");
    }
    let s = close_window();
    assert_eq!((s.state, s.window.slow, s.window.errors), (State::Open, 10, 0), "{s:?}");

    let before = server.received();
    for _ in 0..20 {
        // One second of backoff, all of it left: a Retry-After of 1.
        assert_eq!(send().await, Answer::Refused(RejectReason::Open, Some(1)));
    }
    assert_eq!(server.received(), before, "nothing reached the server while open");

    server.set(8, 200);
    clock.advance(b.snapshot().next_probe_in.unwrap());
    let send = Arc::new(send);
    let burst: Vec<_> = (0..20)
        .map(|_| {
            let send = Arc::clone(&send);
            tokio::spawn(async move { send().await })
        })
        .collect();
    let mut delivered = 0;
    for r in burst {
        match r.await.unwrap() {
            Answer::Status(200) => delivered += 1,
            Answer::Refused(RejectReason::ProbesBusy | RejectReason::Open, retry) => {
                assert!(retry.is_some(), "a Retry-After while half-open too");
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(
        server.received() - before,
        u64::from(PROBES),
        "only the probes reached the server"
    );
    assert_eq!(delivered, PROBES);
    assert_eq!(b.state(), State::Closed, "the probes' successes closed it");

    assert_eq!(close_window().state, State::Closed);
    server.set(8, 503);
    for _ in 0..10 {
        assert_eq!(send().await, Answer::Status(503), "a 503 is passed through");
    }
    let s = close_window();
    assert_eq!((s.state, s.window.errors), (State::Open, 10), "{s:?}");
}

#[tokio::test]
async fn a_reqwest_client_through_the_tower_layer_as_it_is() {
    let clock = ManualClock::new();
    let (server, url) = Server::start(&clock).await;
    let b = breaker(&clock);
    // reqwest::Client goes in as it is: the default classifier takes its
    // responses (5xx fail).
    let svc = BreakerLayer::new(b.clone()).layer(reqwest::Client::new());
    let send: Send = Box::new(move || {
        let (svc, url) = (svc.clone(), url.clone());
        Box::pin(async move {
            let req = reqwest::Request::new(reqwest::Method::GET, url.parse().unwrap());
            match svc.oneshot(req).await {
                Ok(r) => Answer::Status(r.status().as_u16()),
                Err(BreakerError::Rejected(r)) => Answer::Refused(r.reason(), r.retry_after_secs()),
                Err(e) => Answer::Failed(e.to_string()),
            }
        })
    });
    scenario(&clock, &b, &server, send).await;
}

#[tokio::test]
async fn a_reqwest_middleware_client_with_the_breaker_middleware() {
    let clock = ManualClock::new();
    let (server, url) = Server::start(&clock).await;
    let b = breaker(&clock);
    let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
        .with(BreakerMiddleware::new(b.clone()))
        .build();
    let send: Send = Box::new(move || {
        let (client, url) = (client.clone(), url.clone());
        Box::pin(async move {
            match client.get(&url).send().await {
                Ok(r) => Answer::Status(r.status().as_u16()),
                Err(e) => match BreakerMiddleware::refusal(&e) {
                    Some(BreakerError::Rejected(r)) => Answer::Refused(r.reason(), r.retry_after_secs()),
                    _ => Answer::Failed(e.to_string()),
                },
            }
        })
    });
    scenario(&clock, &b, &server, send).await;
}

/// A breaker that judges 5 calls in a minute's window (no server needed:
/// the chain after the breaker's middleware answers).
fn chain_breaker(clock: &ManualClock) -> Breaker {
    Breaker::builder()
        .clock(clock.clone())
        .ticker(false)
        .window(Duration::from_secs(60))
        .error_window(Duration::from_secs(60))
        .trip_windows(1)
        .min_calls(5)
        .build()
        .unwrap()
}

/// A middleware that panics.
struct Panics;

#[async_trait::async_trait]
impl reqwest_middleware::Middleware for Panics {
    async fn handle(
        &self,
        _: reqwest::Request,
        _: &mut http::Extensions,
        _: reqwest_middleware::Next<'_>,
    ) -> reqwest_middleware::Result<reqwest::Response> {
        panic!("a middleware bug (expected by this test)")
    }
}

/// A middleware that refuses every request itself (a client-side rate
/// limit): nothing is sent.
struct RefusesLocally(Arc<AtomicU64>);

#[async_trait::async_trait]
impl reqwest_middleware::Middleware for RefusesLocally {
    async fn handle(
        &self,
        _: reqwest::Request,
        _: &mut http::Extensions,
        _: reqwest_middleware::Next<'_>,
    ) -> reqwest_middleware::Result<reqwest::Response> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Err(reqwest_middleware::Error::middleware(std::io::Error::other(
            "client-side rate limit: not sent",
        )))
    }
}

/// A panic after the breaker's middleware is a failed call (as a panic of
/// a tower layer's inner service is), and goes on to the caller.
///
/// Regression (a hostile review of issue 16).
#[tokio::test]
async fn a_panic_after_the_middleware_counts_as_a_failed_call() {
    let clock = ManualClock::new();
    let b = chain_breaker(&clock);
    let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
        .with(BreakerMiddleware::new(b.clone()))
        .with(Panics)
        .build();
    for _ in 0..20 {
        let c = client.clone();
        let r = tokio::spawn(async move { c.get("http://127.0.0.1:9/").send().await }).await;
        assert!(r.unwrap_err().is_panic());
    }
    clock.advance(Duration::from_secs(60));
    b.tick();
    let s = b.snapshot();
    assert_eq!(
        (s.window.calls, s.window.errors, s.state),
        (20, 20, State::Open),
        "{:?}",
        s.window
    );
}

/// A later middleware's own error (the request never sent) is not a
/// failure of the consumer: not judged, counted as cancelled.
///
/// Regression (a hostile review of issue 16).
#[tokio::test]
async fn a_later_middlewares_own_error_is_not_judged() {
    let clock = ManualClock::new();
    let b = chain_breaker(&clock);
    let refused = Arc::new(AtomicU64::new(0));
    let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
        .with(BreakerMiddleware::new(b.clone()))
        .with(RefusesLocally(Arc::clone(&refused)))
        .build();
    for _ in 0..20 {
        let e = client.get("http://127.0.0.1:9/").send().await.unwrap_err();
        assert!(BreakerMiddleware::refusal(&e).is_none());
    }
    assert_eq!(refused.load(Ordering::SeqCst), 20);
    clock.advance(Duration::from_secs(60));
    b.tick();
    let s = b.snapshot();
    assert_eq!(
        (s.window.calls, s.window.cancelled, s.state),
        (0, 20, State::Closed),
        "{:?}",
        s.window
    );
}
