//! The tower layer's fixtures: a breaker on tokio's (paused) clock with
//! 100 ms windows judged alone, and services that answer or hang.

use super::MS;
use std::future::{pending, Future};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use tailguard::clock::ClockSource;
use tailguard::{Breaker, BreakerBuilder};
use tower::{service_fn, Service};

/// A builder on tokio's clock, ticked by hand; windows of 100 ms judged
/// alone, five calls at least, one probe that closes it.
pub fn builder() -> BreakerBuilder {
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

/// [`builder`], built.
pub fn breaker() -> Breaker {
    builder().build().unwrap()
}

/// Closes the window: what the snapshot's `window` and `totals` then count.
pub async fn close(b: &Breaker) -> tailguard::Snapshot {
    tokio::time::advance(100 * MS).await;
    b.tick();
    b.snapshot()
}

/// A response with `status` and no body.
pub fn response(status: u16) -> http::Response<()> {
    http::Response::builder().status(status).body(()).unwrap()
}

/// Trips `b` and lets its backoff run out: the next call is its only probe.
pub async fn half_open(b: &Breaker) {
    b.trip_now();
    tokio::time::advance(b.snapshot().next_probe_in.unwrap()).await;
}

/// A service whose calls never complete, counting its calls.
pub fn hanging(
    calls: &Arc<AtomicUsize>,
) -> impl Service<(), Response = (), Error = (), Future = impl Future<Output = Result<(), ()>>> + Clone {
    let calls = Arc::clone(calls);
    service_fn(move |()| {
        calls.fetch_add(1, Ordering::Relaxed);
        pending::<Result<(), ()>>()
    })
}
