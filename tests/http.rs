//! The tower layer around a real HTTP client (hyper) talking to a real HTTP
//! server (hyper): once over in-memory connections on tokio's paused clock,
//! so an outage of minutes runs in milliseconds and exactly; once over
//! loopback TCP through hyper-util's pooled client, in real time.
#![cfg(feature = "tower")]

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tailguard::clock::{ClockSource, ManualClock};
use tailguard::emit::tick_every;
use tailguard::tower::{BreakerError, BreakerLayer};
use tailguard::{Breaker, Bulkhead, RejectReason, State};
use tokio::time::Instant;
use tower::{service_fn, Layer, Service, ServiceExt};

const MS: Duration = Duration::from_millis(1);

const HEALTHY: usize = 0;
const SLOW: usize = 1;
const FAILING: usize = 2;

/// The consumer: answers in 8 ms, or 900 ms, or 503s at once; counts the
/// requests it received.
#[derive(Clone, Default)]
struct Consumer {
    mode: Arc<AtomicUsize>,
    received: Arc<AtomicU64>,
}

impl Consumer {
    async fn handle(self, _: http::Request<Incoming>) -> Result<http::Response<Empty<Bytes>>, hyper::Error> {
        self.received.fetch_add(1, Ordering::Relaxed);
        let (delay, status) = match self.mode.load(Ordering::Relaxed) {
            HEALTHY => (8 * MS, 200),
            SLOW => (900 * MS, 200),
            _ => (Duration::ZERO, 503),
        };
        tokio::time::sleep(delay).await;
        Ok(http::Response::builder().status(status).body(Empty::new()).unwrap())
    }

    fn set(&self, mode: usize) {
        self.mode.store(mode, Ordering::Relaxed);
    }

    fn received(&self) -> u64 {
        self.received.load(Ordering::Relaxed)
    }
}

/// One HTTP/1.1 request over a fresh in-memory connection: hyper's client
/// on one end, hyper's server with `consumer` on the other.
async fn over_memory(
    consumer: Consumer,
    req: http::Request<Empty<Bytes>>,
) -> Result<http::Response<Incoming>, hyper::Error> {
    let (client_io, server_io) = tokio::io::duplex(64 * 1024);
    tokio::spawn(async move {
        let svc = hyper::service::service_fn(move |req| consumer.clone().handle(req));
        let _ = hyper::server::conn::http1::Builder::new()
            .serve_connection(TokioIo::new(server_io), svc)
            .await;
    });
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(client_io)).await?;
    tokio::spawn(conn);
    sender.send_request(req).await
}

fn get() -> http::Request<Empty<Bytes>> {
    http::Request::get("http://pricing.internal/quote")
        .body(Empty::new())
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn an_http_consumer_that_turns_slow_then_fails_is_cut_off_and_recovered() {
    let consumer = Consumer::default();
    let breaker = Breaker::builder()
        .clock(ClockSource::tokio())
        .ticker(false)
        .window(100 * MS)
        .latency_threshold(100 * MS)
        .trip_windows(2)
        .min_calls(5)
        .base_backoff(Duration::from_secs(1))
        .max_backoff(Duration::from_secs(8))
        .half_open_probes(1)
        .success_to_close(1)
        .build()
        .unwrap();
    let ticker = tick_every(&breaker, 100 * MS);
    let c = consumer.clone();
    let client = service_fn(move |req| over_memory(c.clone(), req));
    let svc = BreakerLayer::new(breaker.clone())
        .bulkhead(Bulkhead::new(64).unwrap())
        .timeout(200 * MS)
        .unwrap()
        .layer(client);

    // Healthy: ten requests at once every 20 ms, all delivered in 8 ms.
    async fn burst<S>(svc: &S, n: usize) -> Vec<(Result<u16, String>, Duration)>
    where
        S: Service<http::Request<Empty<Bytes>>, Response = http::Response<Incoming>> + Clone + Send + 'static,
        S::Error: std::fmt::Debug + Send,
        S::Future: Send,
    {
        let calls: Vec<_> = (0..n)
            .map(|_| {
                let svc = svc.clone();
                tokio::spawn(async move {
                    let t0 = Instant::now();
                    let r = svc.oneshot(get()).await;
                    (
                        r.map(|r| r.status().as_u16()).map_err(|e| format!("{e:?}")),
                        t0.elapsed(),
                    )
                })
            })
            .collect();
        let mut out = Vec::new();
        for c in calls {
            out.push(c.await.unwrap());
        }
        out
    }
    for _ in 0..20 {
        for (r, took) in burst(&svc, 10).await {
            assert_eq!(r, Ok(200));
            assert_eq!(took, 8 * MS, "HTTP over memory costs no time on the paused clock");
        }
        tokio::time::sleep(12 * MS).await;
    }
    assert_eq!((breaker.state(), consumer.received()), (State::Closed, 200));

    // Slow: the router keeps sending, one request every 10 ms; each is cut
    // at 200 ms; two breaching windows trip it.
    consumer.set(SLOW);
    let spike = Instant::now();
    let mut in_flight = Vec::new();
    while breaker.state() == State::Closed {
        let svc = svc.clone();
        in_flight.push(tokio::spawn(async move {
            let t0 = Instant::now();
            let r = svc.oneshot(get()).await;
            (
                r.map(|r| r.status().as_u16()).map_err(|e| format!("{e:?}")),
                t0.elapsed(),
            )
        }));
        tokio::time::sleep(10 * MS).await;
        assert!(spike.elapsed() < Duration::from_secs(2), "never tripped");
    }
    let tripped_after = spike.elapsed();
    // The first timeouts land at 200 ms; two windows of them trip it.
    assert!(tripped_after <= 450 * MS, "tripped {tripped_after:?} after the spike");
    let mut timed_out = 0;
    for call in in_flight {
        match call.await.unwrap() {
            (Err(e), took) if e.starts_with("TimedOut(200ms)") => {
                assert_eq!(took, 200 * MS);
                timed_out += 1;
            }
            // Sent in the instant of the trip: turned away at once.
            (Err(e), took) if e.starts_with("Rejected") => assert_eq!(took, Duration::ZERO),
            other => panic!("{other:?}"),
        }
    }
    let s = breaker.snapshot();
    assert!(
        s.totals.slow >= 10 && s.totals.errors >= 10,
        "timeouts count failed and slow: {s:?}"
    );

    // Open: rejected at once with the time to the next probe; the consumer
    // receives nothing.
    let before = consumer.received();
    for (r, took) in burst(&svc, 50).await {
        let e = r.unwrap_err();
        assert!(e.starts_with("Rejected"), "{e}");
        assert_eq!(took, Duration::ZERO);
    }
    assert_eq!(consumer.received(), before);
    let mut svc1 = svc.clone();
    match svc1.ready().await.unwrap().call(get()).await {
        Err(BreakerError::Rejected(r)) => {
            assert_eq!(r.reason(), RejectReason::Open);
            assert_eq!(r.retry_after(), breaker.snapshot().next_probe_in);
            assert!(r.retry_after().unwrap() <= Duration::from_secs(1));
        }
        other => panic!("{other:?}"),
    }

    // Still slow when the first probe goes: it times out and re-opens.
    tokio::time::sleep(breaker.snapshot().next_probe_in.unwrap()).await;
    let (r, _) = burst(&svc, 1).await.pop().unwrap();
    assert!(r.unwrap_err().starts_with("TimedOut"));
    assert_eq!(breaker.state(), State::Open);
    assert_eq!(breaker.snapshot().backoff_level, 1, "the backoff doubled");

    // Failing fast now, then recovered: the probe after the next backoff
    // closes it, and traffic flows again.
    consumer.set(FAILING);
    tokio::time::sleep(breaker.snapshot().next_probe_in.unwrap()).await;
    let (r, _) = burst(&svc, 1).await.pop().unwrap();
    assert_eq!(
        r,
        Ok(503),
        "a 503 is passed through to the caller, and counted as a failure"
    );
    assert_eq!(breaker.state(), State::Open);
    consumer.set(HEALTHY);
    tokio::time::sleep(breaker.snapshot().next_probe_in.unwrap()).await;
    let (r, took) = burst(&svc, 1).await.pop().unwrap();
    assert_eq!((r, took), (Ok(200), 8 * MS));
    assert_eq!(breaker.state(), State::Closed);
    for (r, _) in burst(&svc, 10).await {
        assert_eq!(r, Ok(200));
    }
    assert!(timed_out >= 20, "{timed_out}");
    ticker.abort();
}

#[tokio::test]
async fn over_tcp_hyper_util_s_client_behind_the_layer_trips_on_503s() {
    let consumer = Consumer::default();
    consumer.set(FAILING);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let c = consumer.clone();
    let server = tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            let c = c.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req| c.clone().handle(req));
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    // Breaker time is driven by hand; the network runs in real time.
    let clock = ManualClock::new();
    let breaker = Breaker::builder()
        .clock(clock.clone())
        .ticker(false)
        .window(100 * MS)
        .trip_windows(1)
        .min_calls(5)
        .build()
        .unwrap();
    let client =
        hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new()).build_http::<Empty<Bytes>>();
    let mut svc = BreakerLayer::new(breaker.clone())
        .timeout(Duration::from_secs(30))
        .unwrap()
        .layer(client);
    let uri = format!("http://{addr}/quote");
    let request = || http::Request::get(&uri).body(Empty::new()).unwrap();
    for _ in 0..10 {
        let r = svc.ready().await.unwrap().call(request()).await.unwrap();
        assert_eq!(r.status(), 503);
        r.into_body().collect().await.unwrap();
    }
    clock.advance(100 * MS);
    breaker.tick();
    let s = breaker.snapshot();
    assert_eq!(
        (s.state, s.totals.calls, s.totals.errors),
        (State::Open, 10, 10),
        "{s:?}"
    );
    for _ in 0..10 {
        let e = svc.ready().await.unwrap().call(request()).await.unwrap_err();
        assert!(matches!(e, BreakerError::Rejected(_)), "{e:?}");
        assert!(e.retry_after().is_some());
    }
    assert_eq!(consumer.received(), 10, "nothing reached the server while open");
    consumer.set(HEALTHY);
    clock.advance(breaker.snapshot().next_probe_in.unwrap());
    let r = svc.ready().await.unwrap().call(request()).await.unwrap();
    assert_eq!(r.status(), 200);
    server.abort();
}
