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
//! * `per_core/*`: the per-core emitter (`LocalEmitter`, over a breaker's
//!   `LocalHandle`, coarse clock, bulkhead) beside the bare call and the
//!   shared emitter in the same group: `local_delivered` (goal: within
//!   15 ns of `bare`), `local_diverted` (OPEN, the queue drained every
//!   512) beside `shared_diverted`.
//! * `per_core_threads/{1,2}`: per-thread time of a delivered emit with 1
//!   and 2 threads at once, each with its own breaker and emitter (goal:
//!   flat, 2 within 10% of 1; on a machine with fewer free cores than
//!   threads it measures the scheduler instead).
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
use tailguard::emit::{Emitted, Emitter, LocalEmitter};
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

/// A per-core emitter on the coarse clock with a bulkhead, as `emitter`.
fn local_emitter() -> LocalEmitter<u64> {
    let b = Breaker::builder()
        .clock(ClockSource::coarse())
        .ticker(false)
        .local_handles(1)
        .build()
        .unwrap();
    Emitter::builder(b, DeadLetterQueue::with_capacity(1024).unwrap())
        .bulkhead(64)
        .unwrap()
        .timeout(Duration::from_millis(200))
        .unwrap()
        .build_local()
        .unwrap()
}

/// `n` delivered emits through `e`.
#[inline(never)]
fn local_delivered(e: &LocalEmitter<u64>, n: u64) {
    for i in 0..n {
        match e.emit_blocking(i, Priority::Routine, |t, _| call(t)) {
            Emitted::Delivered(o) => {
                black_box(o);
            }
            _ => unreachable!("happy path"),
        }
    }
}

fn per_core(c: &mut Criterion) {
    let mut g = c.benchmark_group("per_core");
    g.bench_function("bare", |b| {
        let mut n = 0u64;
        b.iter(|| {
            n += 1;
            black_box(call(&n))
        })
    });
    let shared = emitter(ClockSource::coarse(), true);
    g.bench_function("shared_delivered", |b| {
        let mut n = 0u64;
        b.iter(|| {
            n += 1;
            match shared.emit_blocking(n, Priority::Routine, |t, _| call(t)) {
                Emitted::Delivered(o) => black_box(o),
                _ => unreachable!("happy path"),
            }
        })
    });
    let local = local_emitter();
    g.bench_function("local_delivered", |b| {
        let mut n = 0u64;
        b.iter(|| {
            n += 1;
            match local.emit_blocking(n, Priority::Routine, |t, _| call(t)) {
                Emitted::Delivered(o) => black_box(o),
                _ => unreachable!("happy path"),
            }
        })
    });
    let s = local.stats();
    assert_eq!((s.diverted(), s.delivered), (0, s.emitted()), "every emit delivered");
    shared.breaker().trip_now();
    g.bench_function("shared_diverted", |b| {
        let mut n = 0u64;
        b.iter(|| {
            n += 1;
            let out = shared.emit_blocking(n, Priority::Routine, |t, _| call(t));
            debug_assert!(matches!(out, Emitted::Diverted { .. }));
            black_box(&out);
            if n % 512 == 0 {
                shared.drain(usize::MAX, |t, _| {
                    black_box(t);
                });
            }
        })
    });
    local.breaker().trip_now();
    g.bench_function("local_diverted", |b| {
        let mut n = 0u64;
        b.iter(|| {
            n += 1;
            let out = local.emit_blocking(n, Priority::Routine, |t, _| call(t));
            debug_assert!(matches!(out, Emitted::Diverted { .. }));
            black_box(&out);
            if n % 512 == 0 {
                local.drain(usize::MAX, |t, _| {
                    black_box(t);
                });
            }
        })
    });
    let s = local.stats();
    assert_eq!(s.into_queue(), s.out_of_queue(), "nothing lost");
    assert_eq!(s.handed_back(), 0, "the queue never filled");
    g.finish();

    // Each thread its own breaker and emitter, started together: the mean
    // of the threads' own times per emit.
    let mut g = c.benchmark_group("per_core_threads");
    for threads in [1u32, 2] {
        g.bench_function(threads.to_string(), |b| {
            b.iter_custom(|iters| {
                let start = std::sync::Barrier::new(threads as usize);
                let total: Duration = std::thread::scope(|s| {
                    let handles: Vec<_> = (0..threads)
                        .map(|_| {
                            s.spawn(|| {
                                let e = local_emitter();
                                start.wait();
                                let t = Instant::now();
                                local_delivered(&e, iters);
                                let took = t.elapsed();
                                assert_eq!(e.stats().delivered, iters);
                                took
                            })
                        })
                        .collect();
                    handles.into_iter().map(|h| h.join().unwrap()).sum()
                });
                total / threads
            })
        });
    }
    g.finish();
}

criterion_group!(benches, blocking, asynchronous, per_core);
criterion_main!(benches);
