//! The emit path's cost over the bare call, per breaker clock, in one run.
//!
//! `cargo bench --bench emit_overhead --features tokio` times, in
//! interleaved rounds (every round runs every loop once, each starting at a
//! different place in the order, so a busy spell of the machine hits all of
//! them), loops of:
//!
//! * `bare`: the consumer call alone;
//! * `coarse_reads`, `precise_reads`: the call between the two readings an
//!   emit takes of that clock, and their difference (what an emit pays
//!   before any of its own work);
//! * `coarse`, `precise`: `Emitter::emit_blocking` on the happy path
//!   (bulkhead, breaker, timeout, CLOSED, the call succeeds at once);
//! * `async_bare`, `async_coarse`, `async_precise`, `async_tower`: on a
//!   current-thread tokio runtime, the bare async call, `Emitter::emit` on
//!   each clock and tower's `ConcurrencyLimit` + `Timeout` around the same
//!   call.
//!
//! It prints, per loop, the fastest round and the 10th percentile of the
//! rounds (ns per operation) and both as differences over the bare call of
//! its kind: on a shared machine the low rounds are what repeats (the
//! medians of `benches/emit.rs` drift by tens of percent between runs).
//! Goals (issue 21): `coarse` and `precise` within 30 ns of `bare`;
//! `async_coarse` and `async_precise` below `async_tower`.
//!
//! Without `--bench` (as `cargo test --benches` runs it, unoptimised) it
//! runs each loop a few times and checks every emit delivered.

use std::future::{ready, Ready};
use std::hint::black_box;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tailguard::clock::ClockSource;
use tailguard::dlq::{DeadLetterQueue, Priority};
use tailguard::emit::{Emitted, Emitter};
use tailguard::Breaker;
use tower::{Service, ServiceExt};

/// Operations per timed loop, and rounds (each loop timed once a round).
const N: u64 = 20_000;
const ROUNDS: usize = 100;

/// The consumer call: succeeds at once.
#[inline(never)]
fn call(trigger: &u64) -> Result<u64, ()> {
    Ok(black_box(*trigger) + 1)
}

/// An emitter on `clock` with a bulkhead and a timeout, as `benches/emit.rs`.
fn emitter(clock: ClockSource) -> Emitter<u64> {
    let b = Breaker::builder().clock(clock).ticker(false).build().unwrap();
    Emitter::builder(b, DeadLetterQueue::with_capacity(1024).unwrap())
        .bulkhead(64)
        .unwrap()
        .timeout(Duration::from_millis(200))
        .unwrap()
        .build()
        .unwrap()
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

/// `n` bare calls between two readings of `clock`.
#[inline(never)]
fn reads(clock: &ClockSource, n: u64) {
    for i in 0..n {
        let start = clock.raw();
        let out = call(&i);
        black_box(clock.delta_nanos(start, clock.raw()));
        black_box(out).ok();
    }
}

/// `n` delivered blocking emits.
#[inline(never)]
fn blocking(e: &Emitter<u64>, n: u64) {
    for i in 0..n {
        match e.emit_blocking(i, Priority::Routine, |t, _| call(t)) {
            Emitted::Delivered(o) => {
                black_box(o);
            }
            _ => unreachable!("happy path"),
        }
    }
}

const NAMES: [&str; 9] = [
    "bare",
    "coarse_reads",
    "precise_reads",
    "coarse",
    "precise",
    "async_bare",
    "async_coarse",
    "async_precise",
    "async_tower",
];

fn main() {
    let timed = std::env::args().any(|a| a == "--bench");
    let (n, rounds) = if timed { (N, ROUNDS) } else { (100, 2) };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let (coarse, precise) = (ClockSource::coarse(), ClockSource::precise());
    let (ec, ep) = (emitter(coarse.clone()), emitter(precise.clone()));
    let (ac, ap, svc) = rt.block_on(async {
        let svc = tower::ServiceBuilder::new()
            .concurrency_limit(64)
            .timeout(Duration::from_millis(200))
            .service(Consumer);
        (emitter(coarse.clone()), emitter(precise.clone()), svc)
    });
    let mut rounds_ns: Vec<Vec<f64>> = vec![Vec::with_capacity(rounds); NAMES.len()];
    for r in 0..rounds {
        for j in 0..NAMES.len() {
            let which = (j + r) % NAMES.len();
            let t = Instant::now();
            match which {
                0 => {
                    for i in 0..n {
                        black_box(call(&i)).ok();
                    }
                }
                1 => reads(&coarse, n),
                2 => reads(&precise, n),
                3 => blocking(&ec, n),
                4 => blocking(&ep, n),
                5 => rt.block_on(async {
                    for i in 0..n {
                        black_box(ready(call(&i)).await.ok());
                    }
                }),
                6 | 7 => {
                    let e = if which == 6 { &ac } else { &ap };
                    rt.block_on(async {
                        for i in 0..n {
                            let out = e.emit(i, Priority::Routine, |t| ready(call(t))).await;
                            assert!(out.is_delivered());
                        }
                    })
                }
                _ => {
                    let mut svc = svc.clone();
                    rt.block_on(async move {
                        for i in 0..n {
                            black_box(svc.ready().await.unwrap().call(i).await.unwrap());
                        }
                    })
                }
            }
            rounds_ns[which].push(t.elapsed().as_nanos() as f64 / n as f64);
        }
    }
    for e in [&ec, &ep, &ac, &ap] {
        let s = e.stats();
        assert_eq!((s.delivered, s.diverted()), (s.emitted(), 0), "every emit delivered");
    }
    let low = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        (v[0], v[(v.len() - 1) / 10])
    };
    let lows: Vec<(f64, f64)> = rounds_ns.iter_mut().map(low).collect();
    println!("emit_overhead: {rounds} rounds of {n} operations, ns per operation (fastest round, 10th percentile)");
    for (i, name) in NAMES.iter().enumerate() {
        let bare = lows[if i < 5 { 0 } else { 5 }];
        println!(
            "{name:<14} {:7.2} {:7.2}   over bare: {:6.2} {:6.2}",
            lows[i].0,
            lows[i].1,
            lows[i].0 - bare.0,
            lows[i].1 - bare.1
        );
    }
}
