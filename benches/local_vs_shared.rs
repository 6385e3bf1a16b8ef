//! The owned per-core handle against the shared path, in one run.
//!
//! `cargo bench --bench local_vs_shared -- --check` times `allow` +
//! `record_latency` and the full cycle `allow` + `record` on a
//! [`LocalHandle`] and on the shared path, for each clock, in interleaved
//! rounds (every round runs all eight loops once, so a busy spell of the
//! machine hits all of them), and keeps each loop's fastest round: on a
//! shared machine the minimum is what repeats (the medians of
//! `benches/breaker.rs` drift by tens of percent between runs). It prints
//! the two figures and their ratio per pair, and with `--check` fails if a
//! local figure is more than [`TOLERANCE`] above its shared one.
//!
//! Without `--check` and without `--bench` (as `cargo test --benches` runs
//! it, unoptimised) it runs each loop a few times and checks nothing about
//! times.

use std::hint::black_box;
use std::time::{Duration, Instant};
use tailguard::clock::ClockSource;
use tailguard::{Breaker, LocalHandle, State};

/// The latency handed to `record_latency`: a fast success.
const LATENCY: Duration = Duration::from_micros(200);

/// How far above the shared figure a local one may be before `--check`
/// fails. The local path does less (plain loads and stores instead of a
/// `lock xadd`), so it is below the shared one where the record is visible
/// at all; with the precise clock the full cycle is two clock reads and the
/// two figures are equal within a fraction of a nanosecond: the margin is
/// for that and for the timer, not for a slower local path.
const TOLERANCE: f64 = 1.05;

/// Operations per timed loop, and rounds (each loop timed once a round).
const N: u64 = 50_000;
const ROUNDS: usize = 60;

#[inline(never)]
fn shared_allow_record_latency(b: &Breaker, n: u64) {
    for _ in 0..n {
        b.allow().expect("closed").record_latency(black_box(LATENCY), true);
    }
}

#[inline(never)]
fn local_allow_record_latency(h: &LocalHandle, n: u64) {
    for _ in 0..n {
        h.allow().expect("closed").record_latency(black_box(LATENCY), true);
    }
}

#[inline(never)]
fn shared_cycle(b: &Breaker, n: u64) {
    for _ in 0..n {
        b.allow().expect("closed").record(true);
    }
}

#[inline(never)]
fn local_cycle(h: &LocalHandle, n: u64) {
    for _ in 0..n {
        h.allow().expect("closed").record(true);
    }
}

/// Nanoseconds per operation of one timed loop.
fn time(n: u64, f: impl FnOnce()) -> f64 {
    let t = Instant::now();
    f();
    t.elapsed().as_nanos() as f64 / n as f64
}

fn main() {
    let check = std::env::args().any(|a| a == "--check");
    let timed = check || std::env::args().any(|a| a == "--bench");
    let (n, rounds) = if timed { (N, ROUNDS) } else { (100, 3) };
    let clocks = [("precise", ClockSource::precise()), ("coarse", ClockSource::coarse())];
    // One breaker per clock, no ticker (no window closes), one local shard.
    let breakers: Vec<(&str, Breaker)> = clocks
        .into_iter()
        .map(|(name, clock)| {
            let b = Breaker::builder()
                .clock(clock)
                .ticker(false)
                .local_handles(1)
                .build()
                .expect("valid config");
            (name, b)
        })
        .collect();
    let handles: Vec<LocalHandle> = breakers
        .iter()
        .map(|(_, b)| b.local_handle().expect("one local shard reserved"))
        .collect();
    // Per clock: [shared arl, local arl, shared cycle, local cycle].
    let mut best = vec![[f64::MAX; 4]; breakers.len()];
    for _ in 0..rounds {
        for (((_, b), h), best) in breakers.iter().zip(&handles).zip(&mut best) {
            let got = [
                time(n, || shared_allow_record_latency(b, n)),
                time(n, || local_allow_record_latency(h, n)),
                time(n, || shared_cycle(b, n)),
                time(n, || local_cycle(h, n)),
            ];
            for (best, got) in best.iter_mut().zip(got) {
                *best = best.min(got);
            }
        }
    }
    for (_, b) in &breakers {
        assert_eq!(b.state(), State::Closed, "fast successes never trip");
    }
    if !timed {
        return;
    }
    let mut failed = false;
    println!("fastest of {rounds} interleaved rounds of {n} operations, ns per operation");
    for ((clock, _), best) in breakers.iter().zip(&best) {
        for (op, shared, local) in [("allow_record_latency", best[0], best[1]), ("cycle", best[2], best[3])] {
            let ratio = local / shared;
            let verdict = if ratio > TOLERANCE {
                failed = true;
                "  LOCAL SLOWER"
            } else {
                ""
            };
            println!("{op:>20}/{clock:<7}  shared {shared:6.2}  local {local:6.2}  local/shared {ratio:.2}{verdict}");
        }
    }
    if check && failed {
        eprintln!("the local handle costs more than {TOLERANCE}x the shared path");
        std::process::exit(1);
    }
}
