//! Criterion benches for the tower layer, beside the bare service and
//! tower-resilience's circuit breaker around the same service, in the same
//! run (the machine is shared and noisy: read ratios, not absolute times).
//!
//! * `tower_1_task/*`: one task on a current-thread runtime, each request
//!   `ready().await` then `call(..).await` on a service that answers at
//!   once: `bare`; `tailguard` (the breaker alone, coarse clock);
//!   `tailguard_bulkhead_timeout` (breaker, bulkhead and a 200 ms timeout,
//!   whose timer is never armed for a ready call); `tower_resilience`
//!   (its `CircuitBreakerLayer` with default settings).
//! * `tower_2_tasks/*`: the same on a two-worker runtime, two tasks sharing
//!   one breaker (clones of one service), each making half the requests;
//!   the time is per request.
//!
//! Goal: tailguard's layer at least 10x cheaper than tower-resilience's, in
//! both groups (cost above `bare`).
//!
//! `cargo bench --bench tower --features tower`; `cargo test --benches
//! --all-features` runs each once.

use criterion::{criterion_group, criterion_main, Criterion};
use std::future::{ready, Ready};
use std::hint::black_box;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tailguard::clock::ClockSource;
use tailguard::tower::{BreakerLayer, ErrorsOnly};
use tailguard::{Breaker, Bulkhead};
use tower::{Layer, Service, ServiceExt};
use tower_resilience_circuitbreaker::CircuitBreakerLayer;

/// The downstream: answers at once.
#[derive(Clone)]
struct Consumer;

impl Service<u64> for Consumer {
    type Response = u64;
    type Error = std::io::Error;
    type Future = Ready<Result<u64, std::io::Error>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), std::io::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: u64) -> Self::Future {
        ready(Ok(black_box(req) + 1))
    }
}

/// `iters` requests through `svc`, split over `tasks` tasks on `rt`; the
/// wall time of the whole.
fn run<S>(rt: &tokio::runtime::Runtime, svc: &S, tasks: u64, iters: u64) -> Duration
where
    S: Service<u64, Response = u64> + Clone + Send + 'static,
    S::Error: std::fmt::Debug,
    S::Future: Send,
{
    rt.block_on(async {
        let t = Instant::now();
        let handles: Vec<_> = (0..tasks)
            .map(|k| {
                let mut svc = svc.clone();
                let n = iters / tasks + u64::from(k < iters % tasks);
                tokio::spawn(async move {
                    for i in 0..n {
                        let r = svc.ready().await.unwrap().call(i).await.unwrap();
                        assert_eq!(r, i + 1);
                    }
                })
            })
            .collect();
        for h in handles {
            h.await.unwrap();
        }
        t.elapsed()
    })
}

fn breaker() -> Breaker {
    Breaker::builder()
        .clock(ClockSource::coarse())
        .ticker(false)
        .build()
        .unwrap()
}

fn group(c: &mut Criterion, name: &str, rt: &tokio::runtime::Runtime, tasks: u64) {
    let mut g = c.benchmark_group(name);
    g.bench_function("bare", |b| b.iter_custom(|iters| run(rt, &Consumer, tasks, iters)));
    let plain = BreakerLayer::new(breaker()).classify(ErrorsOnly).layer(Consumer);
    g.bench_function("tailguard", |b| b.iter_custom(|iters| run(rt, &plain, tasks, iters)));
    let full = BreakerLayer::new(breaker())
        .bulkhead(Bulkhead::new(64).unwrap())
        .timeout(Duration::from_millis(200))
        .unwrap()
        .classify(ErrorsOnly)
        .layer(Consumer);
    g.bench_function("tailguard_bulkhead_timeout", |b| {
        b.iter_custom(|iters| run(rt, &full, tasks, iters))
    });
    let peer = rt.block_on(async { CircuitBreakerLayer::builder().build().unwrap().layer(Consumer) });
    g.bench_function("tower_resilience", |b| {
        b.iter_custom(|iters| run(rt, &peer, tasks, iters))
    });
    g.finish();
}

fn benches(c: &mut Criterion) {
    let one = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    group(c, "tower_1_task", &one, 1);
    let two = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .unwrap();
    group(c, "tower_2_tasks", &two, 2);
}

criterion_group!(tower_benches, benches);
criterion_main!(tower_benches);
