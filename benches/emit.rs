//! Criterion benches for the emit path, beside the bare call and the tower
//! stack a user would pick instead, all in the same run (the machine is
//! shared and noisy: read ratios and differences, not absolute times).
//!
//! * `blocking/*`: `Emitter::emit_blocking` on the happy path (CLOSED,
//!   bulkhead free, the call succeeds at once) against the bare call it
//!   wraps, per breaker clock; `…/no_bulkhead` without the bulkhead. Goal:
//!   within 30 ns of `blocking/bare`. `blocking/{coarse,precise}_reads`:
//!   the bare call between the two clock readings an emit takes, and their
//!   difference (what an emit on that clock pays before any of its work).
//! * `blocking_open/*`: an emit diverted by an OPEN breaker into a queue
//!   that is drained as it goes (what the router pays per trigger while a
//!   consumer is down).
//! * `async/*`: one task on a current-thread runtime; the full async emit
//!   (bulkhead + breaker + timeout + fallback, happy path), with the
//!   breaker on tokio's clock (two reads of it per emit), on the coarse
//!   clock (two loads; no tokio clock read, as the call is ready at once)
//!   and on the precise clock (two TSC reads), against the bare async call
//!   and tower's `ConcurrencyLimit` + `Timeout` around the same call. Goal:
//!   the emit, on the coarse and on the precise clock, no dearer than
//!   `async/tower_limit_timeout`. `local_emit_coarse_clock`: the per-core
//!   emitter's async emit on the same runtime.
//!
//! * `per_core/*`: the per-core emitter (`LocalEmitter`, over a breaker's
//!   `LocalHandle`, coarse clock, bulkhead) beside the bare call and the
//!   shared emitter in the same group: `local_delivered` (goal: within
//!   15 ns of `bare`), `local_diverted` (OPEN, the queue drained every
//!   512) beside `shared_diverted`.
//! * `per_core_threads/<variant>/{1,2}`: the per-thread cost of one
//!   operation with 1 and with 2 threads running at once, each thread with
//!   its own breaker (and emitter), built on that thread: `local` a
//!   delivered `LocalEmitter` emit (goal: flat, `local/2` within 10% of
//!   `local/1`), `shared` a delivered shared-`Emitter` emit and
//!   `bare_local` a bare `allow` + `record` on a `LocalHandle` (anchors:
//!   with nothing shared between the threads they should be flat too; read
//!   `local`'s ratio 2/1 against theirs). What is measured is each thread's
//!   own CPU time (`clock_gettime(CLOCK_THREAD_CPUTIME_ID)`) around its
//!   loop of at least 2 million operations, the threads started together on
//!   a barrier, the figure the mean over threads, scaled to criterion's
//!   iterations; every emit is checked delivered (every cycle recorded).
//!   CPU time, not wall time: on a shared machine with as many cores as
//!   threads, other processes preempt the threads, and wall time then
//!   measures the scheduler (a preempted thread's wall clock runs on while
//!   it does nothing), not the code; a thread's CPU clock stops while it is
//!   off its core. What CPU time still shows is what the threads do to each
//!   other while both run: cache lines they share, memory bandwidth,
//!   frequency; but only while both are on a core at once: under load the
//!   2-thread figure tends to two 1-thread runs taking turns. After each
//!   bench a line says how much the threads' loops overlapped (wall) and
//!   the least share of its loop a thread spent on its core, the evidence
//!   of how far the threads ran together (on this 2-core machine, at load
//!   2-3, each thread was on its core for 35-100% of its loop).
//!
//! `cargo bench --bench emit --features tokio` (`-- per_core_threads` for
//! that group alone); `cargo test --benches --features tokio` runs each
//! once.

use criterion::{criterion_group, criterion_main, Criterion, SamplingMode};
use std::future::{ready, Ready};
use std::hint::black_box;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Barrier;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tailguard::clock::ClockSource;
use tailguard::dlq::{DeadLetterQueue, Priority};
use tailguard::emit::{Emitted, Emitter, LocalEmitter};
use tailguard::{Breaker, LocalHandle, State};
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
    // Anchors: the bare call between the two readings an emit takes (start,
    // end) and their difference, scaled once; what is left of an emit's
    // cost over this is its bulkhead, breaker and counters.
    for (name, clock) in [
        ("coarse_reads", ClockSource::coarse()),
        ("precise_reads", ClockSource::precise()),
    ] {
        g.bench_function(name, |b| {
            let mut n = 0u64;
            b.iter(|| {
                n += 1;
                let start = clock.raw();
                let out = call(&n);
                black_box(clock.delta_nanos(start, clock.raw()));
                black_box(out)
            })
        });
    }
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
    for (name, clock) in [
        ("emit_tokio_clock", "tokio"),
        ("emit_coarse_clock", "coarse"),
        ("emit_precise_clock", "precise"),
    ] {
        let e = rt.block_on(async {
            emitter(
                match clock {
                    "tokio" => ClockSource::tokio(),
                    "coarse" => ClockSource::coarse(),
                    _ => ClockSource::precise(),
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
    // The per-core emitter's async emit, on the same current-thread
    // runtime (its future is not `Send`: it stays on the core).
    let local = rt.block_on(async { local_emitter() });
    g.bench_function("local_emit_coarse_clock", |b| {
        b.iter_custom(|iters| {
            timed(&rt, async {
                for n in 0..iters {
                    let out = local.emit(n, Priority::Routine, |t| ready(call(t))).await;
                    assert!(out.is_delivered());
                }
            })
        })
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
}

/// Emits (or bare permit cycles) each thread runs per sample, at the least:
/// enough that the thread CPU clock's granularity and the loop's start and
/// end are lost in it (2 million delivered emits is some 30 ms of CPU). A
/// debug build (`cargo test --benches`, one sample, a check rather than a
/// figure) runs fewer.
const THREAD_OPS: u64 = if cfg!(debug_assertions) { 10_000 } else { 2_000_000 };

#[path = "support/cpu.rs"]
mod cpu;
use cpu::thread_cpu_time;

/// One sample of [`per_thread_cpu`].
struct Sample {
    /// The mean of the threads' CPU times over their loops.
    cpu: Duration,
    /// The share of the shortest thread's loop (wall time) during which
    /// every thread was in its loop (though not necessarily on a core: see
    /// `on_core`).
    overlap: f64,
    /// The smallest share, over threads, of its loop's wall time that the
    /// thread spent on its core: below 1 when it was preempted.
    on_core: f64,
}

/// `threads` threads at once, each building its own state with `setup`
/// (on its own thread, so from its own allocator arena, outside the timed
/// part), then waiting on a `Barrier` and a spin rendezvous (so they start
/// within a few hundred nanoseconds of each other), then running `run(&state,
/// n)` between two reads of its own CPU clock (and of the wall clock, for
/// [`Sample::overlap`] and [`Sample::on_core`]); `check(&state, n)` after.
fn per_thread_cpu<S>(
    threads: usize,
    n: u64,
    setup: impl Fn() -> S + Sync,
    run: impl Fn(&S, u64) + Sync,
    check: impl Fn(&S, u64) + Sync,
) -> Sample {
    let barrier = Barrier::new(threads);
    let ready = AtomicUsize::new(0);
    let (barrier, ready, setup, run, check) = (&barrier, &ready, &setup, &run, &check);
    let spans: Vec<(Duration, Instant, Instant)> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(move || {
                    let state = setup();
                    barrier.wait();
                    ready.fetch_add(1, Ordering::AcqRel);
                    while ready.load(Ordering::Acquire) < threads {
                        std::hint::spin_loop();
                    }
                    let (cpu, wall) = (thread_cpu_time(), Instant::now());
                    run(&state, n);
                    let (cpu, wall) = (thread_cpu_time() - cpu, (wall, Instant::now()));
                    check(&state, n);
                    (cpu, wall.0, wall.1)
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().expect("a bench thread panicked"))
            .collect()
    });
    let cpu = spans.iter().map(|s| s.0).sum::<Duration>() / threads as u32;
    let first_end = spans.iter().map(|s| s.2).min().expect("at least one thread");
    let last_start = spans.iter().map(|s| s.1).max().expect("at least one thread");
    let shortest = spans.iter().map(|s| s.2 - s.1).min().expect("at least one thread");
    let overlap = first_end.saturating_duration_since(last_start).as_secs_f64() / shortest.as_secs_f64();
    let on_core = spans
        .iter()
        .map(|s| s.0.as_secs_f64() / (s.2 - s.1).as_secs_f64())
        .fold(f64::INFINITY, f64::min);
    Sample { cpu, overlap, on_core }
}

/// The worst [`Sample::overlap`] and [`Sample::on_core`] of a bench's
/// samples, printed after it: the evidence that its threads ran together,
/// each on its own core.
struct Worst {
    overlap: f64,
    on_core: f64,
    samples: usize,
}

impl Worst {
    fn new() -> Self {
        Worst {
            overlap: f64::INFINITY,
            on_core: f64::INFINITY,
            samples: 0,
        }
    }

    /// Criterion asks for `iters`; each thread runs `n`, at least
    /// [`THREAD_OPS`], and the sample is scaled back to `iters` (criterion's
    /// per-iteration estimate is then the per-thread CPU time per
    /// operation).
    fn scaled(&mut self, iters: u64, measure: impl FnOnce(u64) -> Sample) -> Duration {
        let n = iters.max(THREAD_OPS);
        let s = measure(n);
        self.overlap = self.overlap.min(s.overlap);
        self.on_core = self.on_core.min(s.on_core);
        self.samples += 1;
        s.cpu.mul_f64(iters as f64 / n as f64)
    }

    fn report(&self, id: &str, threads: usize) {
        if self.samples == 0 {
            return; // filtered out
        }
        let overlap = if threads > 1 {
            format!(
                "the threads overlapped >= {:.1}% of the shortest loop, ",
                100.0 * self.overlap.min(1.0)
            )
        } else {
            String::new()
        };
        println!(
            "per_core_threads/{id}: over {} samples (warm-up included), {overlap}\
             each thread on its core >= {:.1}% of its loop (wall)",
            self.samples,
            100.0 * self.on_core.min(1.0),
        );
    }
}

/// `n` delivered emits through a shared `Emitter`.
#[inline(never)]
fn shared_delivered(e: &Emitter<u64>, n: u64) {
    for i in 0..n {
        match e.emit_blocking(i, Priority::Routine, |t, _| call(t)) {
            Emitted::Delivered(o) => {
                black_box(o);
            }
            _ => unreachable!("happy path"),
        }
    }
}

/// `n` bare permit cycles (`allow` + `record`) on a `LocalHandle`.
#[inline(never)]
fn local_allow_record(h: &LocalHandle, n: u64) {
    for _ in 0..n {
        h.allow().expect("closed").record(black_box(true));
    }
}

/// Per-thread CPU time per operation with 1 and 2 threads at once, each
/// thread with its own breaker (and emitter); see the module docs.
fn per_core_threads(c: &mut Criterion) {
    // Keeps the coarse clock's upkeep thread running across the group (the
    // threads' own clocks come and go with each sample).
    let _upkeep = ClockSource::coarse();
    let mut g = c.benchmark_group("per_core_threads");
    g.sampling_mode(SamplingMode::Flat)
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    for threads in [1usize, 2] {
        let id = format!("local/{threads}");
        let mut worst = Worst::new();
        g.bench_function(&id, |b| {
            b.iter_custom(|iters| {
                worst.scaled(iters, |n| {
                    per_thread_cpu(threads, n, local_emitter, local_delivered, |e, n| {
                        let s = e.stats();
                        assert_eq!(
                            (s.delivered, s.emitted(), s.diverted()),
                            (n, n, 0),
                            "every emit delivered"
                        );
                    })
                })
            })
        });
        worst.report(&id, threads);
    }
    for threads in [1usize, 2] {
        let id = format!("shared/{threads}");
        let mut worst = Worst::new();
        g.bench_function(&id, |b| {
            b.iter_custom(|iters| {
                worst.scaled(iters, |n| {
                    per_thread_cpu(
                        threads,
                        n,
                        || emitter(ClockSource::coarse(), true),
                        shared_delivered,
                        |e, n| {
                            let s = e.stats();
                            assert_eq!(
                                (s.delivered, s.emitted(), s.diverted()),
                                (n, n, 0),
                                "every emit delivered"
                            );
                        },
                    )
                })
            })
        });
        worst.report(&id, threads);
    }
    for threads in [1usize, 2] {
        let id = format!("bare_local/{threads}");
        let mut worst = Worst::new();
        g.bench_function(&id, |b| {
            b.iter_custom(|iters| {
                worst.scaled(iters, |n| {
                    per_thread_cpu(
                        threads,
                        n,
                        || {
                            let b = Breaker::builder()
                                .clock(ClockSource::coarse())
                                .ticker(false)
                                .local_handles(1)
                                .build()
                                .unwrap();
                            b.local_handle().expect("one local shard reserved")
                        },
                        local_allow_record,
                        |h, n| {
                            let b = h.breaker();
                            assert_eq!(b.state(), State::Closed);
                            // The window in progress into the totals.
                            b.reset();
                            assert_eq!(b.snapshot().totals.calls, n, "every cycle recorded");
                        },
                    )
                })
            })
        });
        worst.report(&id, threads);
    }
    g.finish();
}

criterion_group!(benches, blocking, asynchronous, per_core, per_core_threads);
criterion_main!(benches);
