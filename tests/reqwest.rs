//! A real `reqwest` client behind the breaker, against a real HTTP server
//! on 127.0.0.1 whose latency and status the test changes at run time: the
//! client through the tower layer as it is (feature `reqwest`), and a
//! `reqwest_middleware` client with `BreakerMiddleware` (feature
//! `reqwest-middleware`). The server spends its latency on the breaker's
//! manual clock, so no test sleeps on the wall clock.
#![cfg(all(feature = "reqwest", feature = "reqwest-middleware"))]

use bytes::Bytes;
use http_body_util::Empty;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tailguard::clock::ManualClock;
use tailguard::tower::{BreakerError, BreakerLayer, BreakerMiddleware};
use tailguard::{Breaker, RejectReason, State};
use tower::{Layer, ServiceExt};

const MS: Duration = Duration::from_millis(1);

/// The consumer on 127.0.0.1: its latency (spent on the breaker's manual
/// clock) and its status are changed at run time; it counts what it got.
#[derive(Clone)]
struct Server {
    clock: ManualClock,
    latency_ms: Arc<AtomicU64>,
    status: Arc<AtomicU64>,
    received: Arc<AtomicU64>,
}

impl Server {
    /// Starts serving on a free port; returns the server and its address.
    async fn start(clock: &ManualClock) -> (Server, String) {
        let server = Server {
            clock: clock.clone(),
            latency_ms: Arc::new(AtomicU64::new(8)),
            status: Arc::new(AtomicU64::new(200)),
            received: Arc::new(AtomicU64::new(0)),
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let s = server.clone();
        tokio::spawn(async move {
            loop {
                let (stream, _) = listener.accept().await.unwrap();
                let s = s.clone();
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(move |req| s.clone().handle(req));
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), svc)
                        .await;
                });
            }
        });
        (server, format!("http://{addr}/quote"))
    }

    async fn handle(self, _: http::Request<Incoming>) -> Result<http::Response<Empty<Bytes>>, Infallible> {
        self.received.fetch_add(1, Ordering::SeqCst);
        self.clock.advance(MS * self.latency_ms.load(Ordering::SeqCst) as u32);
        let status = self.status.load(Ordering::SeqCst) as u16;
        Ok(http::Response::builder().status(status).body(Empty::new()).unwrap())
    }

    fn set(&self, latency_ms: u64, status: u16) {
        self.latency_ms.store(latency_ms, Ordering::SeqCst);
        self.status.store(u64::from(status), Ordering::SeqCst);
    }

    fn received(&self) -> u64 {
        self.received.load(Ordering::SeqCst)
    }
}

/// What a request came to: a status, or a refusal (with its Retry-After
/// in whole seconds), or another error.
#[derive(Debug, PartialEq)]
enum Answer {
    Status(u16),
    Refused(RejectReason, Option<u64>),
    Failed(String),
}

type Send = Box<dyn Fn() -> Pin<Box<dyn Future<Output = Answer> + std::marker::Send>> + std::marker::Send + Sync>;

const PROBES: u32 = 2;

fn breaker(clock: &ManualClock) -> Breaker {
    Breaker::builder()
        .clock(clock.clone())
        .ticker(false)
        .window(Duration::from_secs(60))
        .error_window(Duration::from_secs(60))
        .latency_threshold(100 * MS)
        .trip_windows(1)
        .min_calls(5)
        .half_open_probes(PROBES)
        .success_to_close(PROBES)
        .build()
        .unwrap()
}

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
