//! The tower layer around a real HTTP client (hyper) talking to a real HTTP
//! server (hyper): once over in-memory connections on tokio's paused clock,
//! so an outage of minutes runs in milliseconds and exactly; once over
//! loopback TCP (a server on 127.0.0.1, hyper-util's pooled client), whose
//! latency the server spends on the breaker's manual clock, so neither test
//! sleeps on the wall clock.

use crate::support::http::{breaker as http_breaker, Server, PROBES};
use crate::support::MS;
use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tailguard::clock::{ClockSource, ManualClock};
use tailguard::tick_every;
use tailguard::tower::{BreakerError, BreakerLayer, BreakerService};
use tailguard::{Breaker, Bulkhead, RejectReason, State};
use tokio::time::Instant;
use tower::{service_fn, Layer, Service, ServiceExt};

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
async fn over_tcp_hyper_util_s_client_behind_the_layer_trips_on_latency_and_on_503s() {
    let clock = ManualClock::new();
    let (server, uri) = Server::start(&clock).await;
    let breaker = http_breaker(&clock);
    let client =
        hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new()).build_http::<Empty<Bytes>>();
    let svc = BreakerLayer::new(breaker.clone()).layer(client);
    type Client = hyper_util::client::legacy::Client<hyper_util::client::legacy::connect::HttpConnector, Empty<Bytes>>;
    let send = |svc: &BreakerService<Client>| {
        let svc = svc.clone();
        let req = http::Request::get(&uri).body(Empty::new()).unwrap();
        async move {
            let r = svc.oneshot(req).await;
            match r {
                Ok(r) => {
                    let status = r.status().as_u16();
                    r.into_body().collect().await.unwrap();
                    Ok(status)
                }
                Err(e) => Err(e),
            }
        }
    };
    let close_window = || {
        clock.advance(Duration::from_secs(60));
        breaker.tick();
        breaker.snapshot()
    };

    // Healthy: 8 ms answers.
    for _ in 0..10 {
        assert_eq!(send(&svc).await.unwrap(), 200);
    }
    assert_eq!(close_window().state, State::Closed);

    // The server slows to 900 ms (all 200s): the window's calls are slow,
    // and its close trips the breaker on latency.
    server.latency_ms.store(900, Ordering::SeqCst);
    for _ in 0..10 {
        assert_eq!(send(&svc).await.unwrap(), 200);
    }
    let s = close_window();
    assert_eq!((s.state, s.window.slow, s.window.errors), (State::Open, 10, 0), "{s:?}");

    // Open: rejected without reaching the server, with when to retry.
    let before = server.received();
    for _ in 0..20 {
        let e = send(&svc).await.unwrap_err();
        assert!(
            matches!(e, BreakerError::Rejected(r) if r.reason() == RejectReason::Open),
            "{e:?}"
        );
        assert!(e.retry_after().is_some());
    }
    assert_eq!(server.received(), before, "nothing reached the server while open");

    // Recovered: twenty requests at once when the backoff runs out; only the
    // probes reach the server, and their successes close the breaker.
    server.latency_ms.store(8, Ordering::SeqCst);
    clock.advance(breaker.snapshot().next_probe_in.unwrap());
    let burst: Vec<_> = (0..20).map(|_| tokio::spawn(send(&svc))).collect();
    let mut delivered = 0;
    for r in burst {
        match r.await.unwrap() {
            Ok(200) => delivered += 1,
            Err(BreakerError::Rejected(r)) => {
                assert!(matches!(r.reason(), RejectReason::ProbesBusy | RejectReason::Open));
            }
            other => panic!("{other:?}"),
        }
    }
    let probes_seen = server.received() - before;
    assert_eq!(
        probes_seen,
        u64::from(PROBES),
        "the server saw only the probes while half-open"
    );
    assert_eq!(delivered, u64::from(PROBES));
    assert_eq!(breaker.state(), State::Closed, "the probes' successes closed it");

    // Now the server fails fast with 503s: it trips on the error rate (in
    // the first window begun after the recovery: one that began before it
    // never trips the recovered consumer).
    assert_eq!(close_window().state, State::Closed);
    server.status.store(503, Ordering::SeqCst);
    for _ in 0..10 {
        assert_eq!(send(&svc).await.unwrap(), 503, "a 503 is passed through");
    }
    let s = close_window();
    assert_eq!((s.state, s.window.errors), (State::Open, 10), "{s:?}");
}
