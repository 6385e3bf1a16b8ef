//! Criterion benches for the emit path, beside the bare call and the tower
//! stack a user would pick instead, all in the same run (the machine is
//! shared and noisy: read ratios and differences, not absolute times).
//!
//! * `blocking/*`: `Emitter::emit_blocking` on the happy path (CLOSED,
//!   bulkhead free, the call succeeds at once) against the bare call it
//!   wraps, per breaker clock; `…/no_bulkhead` without the bulkhead. Goal:
//!   within 30 ns of `blocking/bare`.
//! * `blocking_open/*`: an emit diverted by an OPEN breaker into a queue
//!   that is drained as it goes (what the router pays per trigger while a
//!   consumer is down).
//! * `async/*`: one task on a current-thread runtime; the full async emit
//!   (bulkhead + breaker + timeout + fallback, happy path), with the
//!   breaker on tokio's clock (two reads of it per emit) and on the coarse
//!   clock (two loads; no tokio clock read, as the call is ready at once),
//!   against the bare async call and tower's `ConcurrencyLimit` +
//!   `Timeout` around the same call. Goal: the emit no dearer than
//!   `async/tower_limit_timeout`.
//!
//! `cargo bench --bench emit --features tokio`; `cargo test --benches
//! --features tokio` runs each once.

use criterion::{criterion_group, criterion_main, Criterion};
use std::future::{ready, Ready};
use std::hint::black_box;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tailguard::clock::ClockSource;
use tailguard::dlq::{DeadLetterQueue, Priority};
use tailguard::emit::{Emitted, Emitter};
use tailguard::Breaker;
use tower::{Service, ServiceExt};

/// The consumer call: succeeds at once.
#[inline(never)]
fn call(trigger: &u64) -> Result<u64, ()> {
    Ok(black_box(*trigger) + 1)
}

fn emitter(clock: ClockSource, bulkhead: bool) -> Emitter<u64> {
    let b = Breaker::builder().clock(clock).ticker(false).build().unwrap();
    let builder = Emitter::builder(b, DeadLetterQueue::with_capacity(1024).unwrap());
    let builder = if bulkhead {
        builder.bulkhead(64).unwrap()
    } else {
        builder
    };
    builder.timeout(Duration::from_millis(200)).unwrap().build().unwrap()
}

fn blocking(c: &mut Criterion) {
    let mut g = c.benchmark_group("blocking");
    g.bench_function("bare", |b| {
        let mut n = 0u64;
        b.iter(|| {
            n += 1;
            black_box(call(&n))
        })
    });
    for (name, clock, bulkhead) in [
        ("coarse", ClockSource::coarse(), true),
        ("precise", ClockSource::precise(), true),
        ("coarse_no_bulkhead", ClockSource::coarse(), false),
    ] {
        let e = emitter(clock, bulkhead);
        g.bench_function(name, |b| {
            let mut n = 0u64;
            b.iter(|| {
                n += 1;
                match e.emit_blocking(n, Priority::Routine, |t, _| call(t)) {
                    Emitted::Delivered(o) => black_box(o),
                    _ => unreachable!("happy path"),
                }
            })
        });
        assert_eq!(e.stats().diverted(), 0, "{name}: every emit delivered");
    }
    g.finish();

    let mut g = c.benchmark_group("blocking_open");
    let e = emitter(ClockSource::coarse(), true);
    e.breaker().trip_now();
    let drain = e.clone();
    g.bench_function("coarse", |b| {
        let mut n = 0u64;
        b.iter(|| {
            n += 1;
            let out = e.emit_blocking(n, Priority::Routine, |t, _| call(t));
            debug_assert!(matches!(out, Emitted::Diverted { .. }));
            black_box(&out);
            if n % 512 == 0 {
                drain.drain(usize::MAX, |t, _| {
                    black_box(t);
                });
            }
        })
    });
    g.finish();
}

/// The bare async call as a tower service, for the tower stack.
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
        ready(call(&req).map_err(|()| std::io::Error::other("unreachable")))
    }
}

/// Times `run` (a loop of calls) on the runtime.
fn timed(rt: &tokio::runtime::Runtime, run: impl std::future::Future<Output = ()>) -> Duration {
    rt.block_on(async {
        let t = Instant::now();
        run.await;
        t.elapsed()
    })
}

fn asynchronous(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let mut g = c.benchmark_group("async");
    g.bench_function("bare", |b| {
        b.iter_custom(|iters| {
            timed(&rt, async {
                for n in 0..iters {
                    black_box(ready(call(&n)).await.unwrap());
                }
            })
        })
    });
    for (name, clock) in [("emit_tokio_clock", "tokio"), ("emit_coarse_clock", "coarse")] {
        let e = rt.block_on(async {
            emitter(
                if clock == "tokio" {
                    ClockSource::tokio()
                } else {
                    ClockSource::coarse()
                },
                true,
            )
        });
        g.bench_function(name, |b| {
            b.iter_custom(|iters| {
                timed(&rt, async {
                    for n in 0..iters {
                        let out = e.emit(n, Priority::Routine, |t| ready(call(t))).await;
                        assert!(out.is_delivered());
                    }
                })
            })
        });
    }
    let svc = rt.block_on(async {
        tower::ServiceBuilder::new()
            .concurrency_limit(64)
            .timeout(Duration::from_millis(200))
            .service(Consumer)
    });
    g.bench_function("tower_limit_timeout", |b| {
        b.iter_custom(|iters| {
            let mut svc = svc.clone();
            timed(&rt, async move {
                for n in 0..iters {
                    black_box(svc.ready().await.unwrap().call(n).await.unwrap());
                }
            })
        })
    });
    g.finish();
}

criterion_group!(benches, blocking, asynchronous);
criterion_main!(benches);
