//! An HTTP server on 127.0.0.1 for the client tests (hyper's and
//! reqwest's): its latency and status are changed at run time, its latency
//! is spent on the breaker's manual clock (the handler advances it), so no
//! test sleeps on the wall clock; it counts the requests it got.

use super::MS;
use bytes::Bytes;
use http_body_util::Empty;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tailguard::clock::ManualClock;
use tailguard::Breaker;

/// The consumer on 127.0.0.1: its latency (spent on the breaker's manual
/// clock) and its status are changed at run time; it counts what it got.
#[derive(Clone)]
pub struct Server {
    pub clock: ManualClock,
    pub latency_ms: Arc<AtomicU64>,
    pub status: Arc<AtomicU64>,
    pub received: Arc<AtomicU64>,
}

impl Server {
    /// Starts serving on a free port; returns the server and the URL of
    /// its one path.
    pub async fn start(clock: &ManualClock) -> (Server, String) {
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

    /// Sets the latency (in milliseconds of the manual clock) and the
    /// status of every answer from now on.
    pub fn set(&self, latency_ms: u64, status: u16) {
        self.latency_ms.store(latency_ms, Ordering::SeqCst);
        self.status.store(u64::from(status), Ordering::SeqCst);
    }

    /// The requests it has received.
    pub fn received(&self) -> u64 {
        self.received.load(Ordering::SeqCst)
    }
}

/// The probes (and the successes that close it) of [`breaker`].
pub const PROBES: u32 = 2;

/// A breaker on `clock` for the client tests: one-minute windows judged
/// alone (five calls at least, 100 ms threshold), [`PROBES`] probes.
pub fn breaker(clock: &ManualClock) -> Breaker {
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
