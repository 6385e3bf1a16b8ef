//! Criterion benches for the breaker's hot path, beside the hardware floor
//! and two peers, all measured in the same run.
//!
//! The machine these run on is shared and noisy: absolute times drift from
//! run to run, ratios hold. So every figure that matters is read against a
//! floor measured in the same run (`floor/*`), and the peers (`failsafe`,
//! `recloser`) are measured in the same run too.
//!
//! Groups (read the medians):
//!
//! * `floor/*`: an empty iteration, an atomic load, an uncontended
//!   `fetch_add`, `Instant::now`, a precise and a coarse clock read.
//! * `allow_closed/*`: `allow` alone in CLOSED, per clock. How it is
//!   isolated from the permit's drop (and why the obvious ways mislead) is
//!   explained at `allow_closed`.
//! * `allow_record_latency/*`: `allow` + `record_latency`, on the shared
//!   path and on an owned `LocalHandle`; `…/shared_allow_at` with the
//!   caller's own clock reading (`allow_at`: the breaker reads no clock). The cost of `record_latency` is this
//!   minus `allow_closed/<clock>`; `record_latency/*` also measures it
//!   directly.
//! * `record_latency/*`: `record_latency` alone (permits taken outside the
//!   timed part), with the harness baseline to subtract.
//! * `cycle/*`: a full permit cycle with the breaker's own clock,
//!   `allow()?.record(true)` (two clock reads).
//! * `reject_open/*`: `allow` on a breaker tripped with a one-hour backoff.
//! * `threads/*`: N threads (1 or 2) on one breaker, each doing the same
//!   operation; the figure is the time one operation takes as seen by each
//!   thread, so `…/2 ÷ …/1` is the contention ratio. The group carries its
//!   own floor (threads that share nothing) to separate the machine's share
//!   of that ratio from the breaker's.
//! * `peers/*`: `failsafe` and `recloser` doing the equivalent of a permit
//!   cycle in CLOSED and of a rejection when open.
//!
//! `cargo bench --bench breaker` (46 benches) takes about three minutes;
//! `cargo test --benches` runs every bench once as a smoke test.

use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use std::hint::black_box;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};
use tailguard::clock::{Clock, ClockSource, CoarseClock, ManualClock};
use tailguard::{Breaker, LocalHandle, Permit, RejectReason, State};

/// The latency handed to `record_latency`: well under the default 50 ms
/// threshold, so every record is a fast success.
const LATENCY: Duration = Duration::from_micros(200);

/// Backoff of the OPEN benches: the breaker stays OPEN for the whole run.
const HOUR: Duration = Duration::from_secs(3600);

/// Batch size of the `iter_batched` benches: small enough that a batch's
/// inputs or outputs (32 bytes each) stay in L1, large enough that the two
/// timer reads per batch cost well under 0.1 ns per iteration.
const BATCH: BatchSize = BatchSize::NumIterations(512);

/// Words in a `Permit`, for a harness baseline that moves values of the
/// same size as the benches that move permits.
const PERMIT_WORDS: usize = core::mem::size_of::<Permit<'static>>() / 8;

/// The two clocks a breaker is benched with.
fn clocks() -> [(&'static str, ClockSource); 2] {
    [("precise", ClockSource::precise()), ("coarse", ClockSource::coarse())]
}

/// A CLOSED breaker that nothing can trip during the bench: no ticker, so
/// no window ever closes.
fn closed_breaker(clock: ClockSource, local_handles: usize) -> Breaker {
    let b = Breaker::builder()
        .clock(clock)
        .ticker(false)
        .local_handles(local_handles)
        .build()
        .expect("valid config");
    assert_eq!(b.state(), State::Closed);
    let p = b.allow().expect("a new breaker admits");
    assert!(!p.is_probe(), "a CLOSED permit is an ordinary call");
    p.record_latency(LATENCY, true);
    b
}

/// An OPEN breaker whose backoff (one hour) outlasts the bench.
fn open_breaker(clock: ClockSource) -> Breaker {
    let b = Breaker::builder()
        .clock(clock)
        .ticker(false)
        .base_backoff(HOUR)
        .max_backoff(HOUR)
        .build()
        .expect("valid config");
    b.trip_now();
    assert_eq!(b.state(), State::Open);
    let r = b.allow().expect_err("an OPEN breaker rejects");
    assert_eq!(r.reason(), RejectReason::Open);
    assert!(r.retry_after().is_some_and(|d| d > HOUR - Duration::from_secs(60)));
    b
}

/// After a bench that recorded only fast successes: nothing tripped.
fn assert_still_closed(b: &Breaker) {
    assert_eq!(b.state(), State::Closed);
    assert!(b.allow().is_ok());
}

// ---------------------------------------------------------------------------

/// The hardware floor, measured in the same run as everything else.
fn floor(c: &mut Criterion) {
    let mut g = c.benchmark_group("floor");
    // The harness itself: one iteration that does nothing but produce a value.
    g.bench_function("empty", |b| b.iter(|| black_box(0u64)));

    // (A check after a bench must hold even when a filter skipped the bench.)
    let a = AtomicU64::new(1);
    assert_eq!(a.load(Ordering::Acquire), 1);
    g.bench_function("atomic_load", |b| b.iter(|| black_box(&a).load(Ordering::Acquire)));
    assert_eq!(a.fetch_add(1, Ordering::Relaxed), 1);
    g.bench_function("fetch_add", |b| {
        b.iter(|| black_box(&a).fetch_add(1, Ordering::Relaxed))
    });

    let start = Instant::now();
    g.bench_function("instant_now", |b| b.iter(Instant::now));
    assert!(start.elapsed() > Duration::ZERO);

    let precise = ClockSource::precise();
    assert!(precise.is_precise());
    let t0 = precise.raw();
    g.bench_function("precise_read", |b| b.iter(|| black_box(&precise).raw()));
    assert!(precise.raw() > t0, "the precise clock moves");

    let coarse = ClockSource::coarse();
    assert!(!coarse.is_precise());
    let t0 = coarse.raw();
    g.bench_function("coarse_read", |b| b.iter(|| black_box(&coarse).raw()));
    assert!(coarse.raw() >= t0);

    let coarse_clock = CoarseClock::new();
    g.bench_function("coarse_now_nanos", |b| b.iter(|| black_box(&coarse_clock).now_nanos()));
    g.finish();
}

/// `allow` alone, in CLOSED.
///
/// A permit dropped without a verdict counts a cancellation (a cold
/// `fetch_add`), so `b.iter(|| br.allow())` would time that drop too. The
/// figure the goals are read against, `allow_closed/<clock>`, takes the
/// permit, hands `black_box` only its `is_probe()` and `mem::forget`s it:
/// `Permit` owns no heap memory, so nothing leaks, and its `Drop` never
/// runs. The permit is still really made: the state load and the clock read
/// stay (the clock read is an out-of-line call with side effects; `perf`
/// samples it in this bench).
///
/// Two more obvious ways are kept, because what they show matters:
///
/// * `coarse/forget`: the whole permit handed to `black_box` by reference,
///   then forgotten;
/// * `coarse/batched`: `iter_batched`, the permits returned from the timed
///   routine and dropped (cancelled) by criterion after the clock stops;
///   the harness cost is `batched_baseline` (a 32-byte array instead).
///
/// Both force the permit through memory, and here that costs far more than
/// `allow` itself: the `Result<Permit, _>` is written with 8-byte stores and
/// then copied with 16-byte loads that straddle them, which store-to-load
/// forwarding cannot serve (`perf annotate` puts the cycles on those
/// `movups`). They measure that copy, not `allow`; a caller that moves a
/// permit into memory right away may pay it too.
fn allow_closed(c: &mut Criterion) {
    let mut g = c.benchmark_group("allow_closed");
    for (name, clock) in clocks() {
        let br = closed_breaker(clock, 0);
        g.bench_function(name, |b| {
            b.iter(|| {
                let p = br.allow().expect("closed");
                let probe = black_box(p.is_probe());
                std::mem::forget(p);
                probe
            })
        });
        if name == "coarse" {
            // The permit through memory: one clock is enough to show it.
            g.bench_function(format!("{name}/forget"), |b| {
                b.iter(|| {
                    let p = br.allow().expect("closed");
                    black_box(&p);
                    std::mem::forget(p);
                })
            });
            g.bench_function(format!("{name}/batched"), |b| {
                b.iter_batched(|| (), |()| br.allow().expect("closed"), BATCH)
            });
        }
        assert_still_closed(&br);
    }
    g.bench_function("batched_baseline", |b| {
        b.iter_batched(|| (), |()| black_box([0u64; PERMIT_WORDS]), BATCH)
    });
    g.finish();
}

/// `allow` + `record_latency`, on the shared path and on an owned handle.
/// `record_latency` reads no clock, so the clock only changes the `allow`
/// half; the record cost is this minus `allow_closed/<clock>`.
fn allow_record_latency(c: &mut Criterion) {
    let mut g = c.benchmark_group("allow_record_latency");
    for (name, clock) in clocks() {
        let br = closed_breaker(clock, 1);
        g.bench_function(format!("{name}/shared"), |b| {
            b.iter(|| br.allow().expect("closed").record_latency(black_box(LATENCY), true))
        });
        // The caller already read the clock (for its own timeout and
        // latency, as the emitters do) and hands the breaker that reading:
        // the breaker reads no clock at all.
        let reading = br.clock().raw();
        g.bench_function(format!("{name}/shared_allow_at"), |b| {
            b.iter(|| {
                br.allow_at(black_box(reading))
                    .expect("closed")
                    .record_latency(black_box(LATENCY), true)
            })
        });
        let h = br.local_handle().expect("one local shard reserved");
        assert!(!h.allow().expect("closed").is_probe());
        g.bench_function(format!("{name}/local"), |b| {
            b.iter(|| h.allow().expect("closed").record_latency(black_box(LATENCY), true))
        });
        drop(h);
        assert_still_closed(&br);
    }
    g.finish();
}

/// `record_latency` alone: the permits are taken in the untimed setup of
/// `iter_batched` (with the coarse clock, so that setup is cheap; the record
/// reads no clock, so the clock does not matter to what is timed).
/// `input_baseline` is the harness moving a 32-byte input into a routine
/// that only hands it to `black_box`; subtract it.
fn record_latency(c: &mut Criterion) {
    let mut g = c.benchmark_group("record_latency");
    let br = closed_breaker(ClockSource::coarse(), 1);
    g.bench_function("shared", |b| {
        b.iter_batched(
            || br.allow().expect("closed"),
            |p| p.record_latency(black_box(LATENCY), true),
            BATCH,
        )
    });
    let h = br.local_handle().expect("one local shard reserved");
    g.bench_function("local", |b| {
        b.iter_batched(
            || h.allow().expect("closed"),
            |p| p.record_latency(black_box(LATENCY), true),
            BATCH,
        )
    });
    drop(h);
    assert_still_closed(&br);
    g.bench_function("input_baseline", |b| {
        b.iter_batched(
            || [0u64; PERMIT_WORDS],
            |p| {
                black_box(p);
            },
            BATCH,
        )
    });
    g.finish();
}

/// A full permit cycle measured with the breaker's own clock:
/// `allow()?.record(true)`, i.e. two clock reads, one atomic load and one
/// `fetch_add` (shared) or plain stores (local).
fn cycle(c: &mut Criterion) {
    let mut g = c.benchmark_group("cycle");
    for (name, clock) in clocks() {
        let br = closed_breaker(clock, 1);
        g.bench_function(format!("{name}/shared"), |b| {
            b.iter(|| br.allow().expect("closed").record(true))
        });
        let h = br.local_handle().expect("one local shard reserved");
        g.bench_function(format!("{name}/local"), |b| {
            b.iter(|| h.allow().expect("closed").record(true))
        });
        drop(h);
        assert_still_closed(&br);
    }
    g.finish();
}

/// Rejection in OPEN (the backoff has not run out). `reject_open/<clock>`
/// is a caller that only checks for `Err`; `…/retry_after` one that reads
/// the delay (for a `Retry-After` header).
fn reject_open(c: &mut Criterion) {
    let mut g = c.benchmark_group("reject_open");
    for (name, clock) in clocks() {
        let br = open_breaker(clock);
        g.bench_function(name, |b| b.iter(|| br.allow().is_err()));
        g.bench_function(format!("{name}/retry_after"), |b| {
            b.iter(|| match br.allow() {
                Ok(_) => panic!("open"),
                Err(r) => r.retry_after(),
            })
        });
        assert_eq!(br.state(), State::Open);
        assert!(br.allow().is_err());
    }
    g.finish();
}

// ---------------------------------------------------------------------------

/// Runs `op` `iters` times on each of `states.len()` threads at once (one
/// state per thread) and returns the wall time from the first thread's start
/// to the last thread's end.
///
/// Given to `iter_custom`, criterion divides that by `iters`: the time one
/// operation takes as seen by each thread. With two threads on two free
/// cores and no contention it equals the one-thread figure; the ratio of the
/// two is the contention cost per operation.
///
/// On this shared two-vCPU machine the cores are seldom both free: other
/// processes (and the host) take one now and then, and the two threads then
/// take turns, which raises the two-thread figure with no contention at all
/// (two threads that each loop on `rdtsc` and share nothing measured 13 ns
/// per read in thread CPU time but 25 ns in wall time). Hence the group's
/// own floor, measured the same way (`floor_*`): read the breaker's ratio
/// against the ratio of threads that share nothing. Thread CPU time and
/// timing only the stretches where both threads ran were tried instead, and
/// rejected: the first hides contention when the threads take turns, and
/// the second found the threads running at once for under a quarter of the
/// time, at speeds that depended on the host more than on the code.
///
/// Each thread does one untimed operation first (so that its shard index is
/// assigned outside the timed part), waits on a `Barrier`, then on a spin
/// rendezvous (so both start within a few hundred nanoseconds, not a futex
/// wake-up apart), then runs its loop.
fn timed_threads<T: Send>(states: Vec<T>, iters: u64, op: impl Fn(&T) + Sync) -> Duration {
    let n = states.len();
    let barrier = Barrier::new(n);
    let ready = AtomicUsize::new(0);
    let (barrier, ready, op) = (&barrier, &ready, &op);
    std::thread::scope(|s| {
        let workers: Vec<_> = states
            .into_iter()
            .map(|state| {
                s.spawn(move || {
                    op(&state);
                    barrier.wait();
                    ready.fetch_add(1, Ordering::AcqRel);
                    while ready.load(Ordering::Acquire) < n {
                        std::hint::spin_loop();
                    }
                    let start = Instant::now();
                    for _ in 0..iters {
                        op(&state);
                    }
                    (start, Instant::now())
                })
            })
            .collect();
        let spans: Vec<(Instant, Instant)> = workers
            .into_iter()
            .map(|w| w.join().expect("a bench thread panicked"))
            .collect();
        let first = spans.iter().map(|s| s.0).min().expect("at least one thread");
        let last = spans.iter().map(|s| s.1).max().expect("at least one thread");
        last - first
    })
}

/// A counter alone on its cache line(s), so that two never share one.
#[repr(align(128))]
struct Padded(AtomicU64);

/// One and two threads on one breaker (and on each peer), each thread doing
/// permit cycles in CLOSED (`allow` + `record_latency`).
///
/// On a shared two-core machine the two-thread figures also pay for whatever
/// else runs, so the group carries its own floor, measured the same way:
/// `floor_precise_read` and `floor_private_fetch_add` share nothing between
/// the threads, so their `2 ÷ 1` ratio is what the machine itself adds;
/// `floor_shared_fetch_add/2` is two threads on one counter, what a breaker
/// with one shared counter would pay.
fn threads(c: &mut Criterion) {
    let mut g = c.benchmark_group("threads");
    let precise = ClockSource::precise();
    for n in [1usize, 2] {
        let id = format!("floor_precise_read/{n}");
        g.bench_function(&id, |b| {
            b.iter_custom(|iters| {
                timed_threads(vec![&precise; n], iters, |c| {
                    black_box(c.raw());
                })
            })
        });
    }
    for n in [1usize, 2] {
        let id = format!("floor_private_fetch_add/{n}");
        g.bench_function(&id, |b| {
            b.iter_custom(|iters| {
                let counters: Vec<Padded> = (0..n).map(|_| Padded(AtomicU64::new(0))).collect();
                timed_threads(counters, iters, |c| {
                    black_box(&c.0).fetch_add(1, Ordering::Relaxed);
                })
            })
        });
    }
    let shared = Padded(AtomicU64::new(0));
    g.bench_function("floor_shared_fetch_add/2", |b| {
        b.iter_custom(|iters| {
            timed_threads(vec![&shared; 2], iters, |c| {
                black_box(&c.0).fetch_add(1, Ordering::Relaxed);
            })
        })
    });

    for (name, clock) in clocks() {
        let br = closed_breaker(clock, 2);
        for n in [1usize, 2] {
            let id = format!("{name}/shared/{n}");
            g.bench_function(&id, |b| {
                b.iter_custom(|iters| {
                    timed_threads(vec![&br; n], iters, |br| {
                        br.allow().expect("closed").record_latency(black_box(LATENCY), true)
                    })
                })
            });
        }
        if name == "coarse" {
            // Shards grow with the threads that call: a breaker configured
            // for 64 shards, called from one thread and from two.
            let wide = Breaker::builder()
                .clock(ClockSource::coarse())
                .ticker(false)
                .shards(64)
                .build()
                .expect("valid config");
            for n in [1usize, 2] {
                let id = format!("{name}/shared_64_shards/{n}");
                g.bench_function(&id, |b| {
                    b.iter_custom(|iters| {
                        timed_threads(vec![&wide; n], iters, |br| {
                            br.allow().expect("closed").record_latency(black_box(LATENCY), true)
                        })
                    })
                });
            }
            assert_still_closed(&wide);
            // The owned handles record without read-modify-write whatever
            // the clock; one clock is enough.
            for n in [1usize, 2] {
                let id = format!("{name}/local/{n}");
                g.bench_function(&id, |b| {
                    b.iter_custom(|iters| {
                        let handles: Vec<LocalHandle> = (0..n)
                            .map(|_| br.local_handle().expect("two local shards reserved"))
                            .collect();
                        timed_threads(handles, iters, |h| {
                            h.allow().expect("closed").record_latency(black_box(LATENCY), true)
                        })
                    })
                });
            }
        }
        assert_still_closed(&br);
    }

    let fs = failsafe_closed();
    for n in [1usize, 2] {
        let id = format!("failsafe/{n}");
        g.bench_function(&id, |b| {
            b.iter_custom(|iters| {
                timed_threads(vec![&fs; n], iters, |fs| {
                    failsafe::CircuitBreaker::call(*fs, || Ok::<(), ()>(())).expect("closed")
                })
            })
        });
    }
    let rc = recloser_closed();
    for n in [1usize, 2] {
        let id = format!("recloser/{n}");
        g.bench_function(&id, |b| {
            b.iter_custom(|iters| {
                timed_threads(vec![&rc; n], iters, |rc| rc.call(|| Ok::<(), ()>(())).expect("closed"))
            })
        });
    }
    g.finish();
}

// ---------------------------------------------------------------------------

/// failsafe's default breaker (`Config::new().build()`), CLOSED.
fn failsafe_closed() -> impl failsafe::CircuitBreaker + Sync {
    use failsafe::CircuitBreaker;
    let cb = failsafe::Config::new().build();
    assert!(cb.is_call_permitted());
    assert!(cb.call(|| Ok::<(), ()>(())).is_ok());
    cb
}

/// recloser's default breaker, CLOSED.
fn recloser_closed() -> recloser::Recloser {
    let rc = recloser::Recloser::default();
    assert!(rc.call(|| Ok::<(), ()>(())).is_ok());
    rc
}

/// The peers doing the equivalent of a permit cycle in CLOSED (a call of a
/// closure that succeeds) and of a rejection when open.
///
/// Both can be forced open cheaply: failsafe with a policy of one failure
/// and a constant one-hour backoff, then one failing call; recloser with a
/// one-call ring and a one-hour wait, then failing calls until the ring is
/// full. Neither has a permit API; their `call` is the whole cycle.
fn peers(c: &mut Criterion) {
    use failsafe::CircuitBreaker;
    let mut g = c.benchmark_group("peers");

    let fs = failsafe_closed();
    g.bench_function("failsafe/cycle_closed", |b| {
        b.iter(|| fs.call(|| Ok::<(), ()>(())).expect("closed"))
    });
    let fs_open = failsafe::Config::new()
        .failure_policy(failsafe::failure_policy::consecutive_failures(
            1,
            failsafe::backoff::constant(HOUR),
        ))
        .build();
    assert!(matches!(
        fs_open.call(|| Err::<(), ()>(())),
        Err(failsafe::Error::Inner(()))
    ));
    assert!(!fs_open.is_call_permitted());
    assert!(matches!(
        fs_open.call(|| Ok::<(), ()>(())),
        Err(failsafe::Error::Rejected)
    ));
    g.bench_function("failsafe/reject_open", |b| {
        b.iter(|| fs_open.call(|| Ok::<(), ()>(())).expect_err("open"))
    });
    assert!(!fs_open.is_call_permitted());

    let rc = recloser_closed();
    g.bench_function("recloser/cycle_closed", |b| {
        b.iter(|| rc.call(|| Ok::<(), ()>(())).expect("closed"))
    });
    let rc_open = recloser::Recloser::custom().closed_len(1).open_wait(HOUR).build();
    let mut failures = 0;
    while !matches!(rc_open.call(|| Err::<(), ()>(())), Err(recloser::Error::Rejected)) {
        failures += 1;
        assert!(failures < 10, "recloser did not open");
    }
    assert!(matches!(
        rc_open.call(|| Ok::<(), ()>(())),
        Err(recloser::Error::Rejected)
    ));
    g.bench_function("recloser/reject_open", |b| {
        b.iter(|| rc_open.call(|| Ok::<(), ()>(())).expect_err("open"))
    });
    assert!(matches!(
        rc_open.call(|| Ok::<(), ()>(())),
        Err(recloser::Error::Rejected)
    ));
    g.finish();
}

/// What a core that owns its timers pays per tick: nothing due (the window
/// in progress has not ended), one idle window closed (the manual clock
/// moved a window on first), and `next_due`. Beside a bare allow + record.
fn tick(c: &mut Criterion) {
    let mut g = c.benchmark_group("tick");
    let waiting = Breaker::builder()
        .clock(ClockSource::coarse())
        .ticker(false)
        .window(Duration::from_secs(3600))
        .build()
        .unwrap();
    g.bench_function("nothing_due", |b| b.iter(|| black_box(&waiting).tick()));
    assert_eq!(waiting.snapshot().window.closed_at, Duration::ZERO, "nothing closed");
    g.bench_function("next_due", |b| b.iter(|| black_box(&waiting).next_due()));

    let clock = ManualClock::new();
    let idle = Breaker::builder()
        .clock(clock.clone())
        .ticker(false)
        .window(Duration::from_millis(100))
        .build()
        .unwrap();
    g.bench_function("idle_window", |b| {
        b.iter(|| {
            clock.advance(Duration::from_millis(100));
            black_box(&idle).tick()
        })
    });
    assert_eq!(idle.snapshot().window.closed_at, clock.now(), "every window closed");

    let bare = closed_breaker(ClockSource::coarse(), 0);
    g.bench_function("allow_record_latency", |b| {
        b.iter(|| {
            bare.allow()
                .unwrap()
                .record_latency(black_box(Duration::from_micros(200)), true)
        })
    });
    assert_still_closed(&bare);
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(2))
        .nresamples(20_000);
    targets = floor, allow_closed, allow_record_latency, record_latency, cycle, reject_open, threads, peers, tick
}
criterion_main!(benches);
