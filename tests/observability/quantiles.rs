//! Latency quantiles: within the stated relative error for every shape of
//! distribution, merged over every shard and local handle.

use crate::support::{MS, SEC};
use std::time::Duration;
use tailguard::clock::ManualClock;
use tailguard::{Breaker, QUANTILE_RELATIVE_ERROR};

/// xorshift64*: a small deterministic generator for the sample sets.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn uniform(&mut self) -> f64 {
        ((self.next() >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }
    fn normal(&mut self) -> f64 {
        let (u, v) = (self.uniform(), self.uniform());
        (-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos()
    }
    /// Lognormal with the given median (ns) and sigma.
    fn lognormal(&mut self, median_ns: f64, sigma: f64) -> u64 {
        (median_ns * (sigma * self.normal()).exp()) as u64
    }
}

/// Feeds `samples` into one window and checks every reported quantile
/// against the exact one (the sorted sample at the sketch's rank).
fn check_accuracy(name: &str, mut samples: Vec<u64>) {
    let clock = ManualClock::new();
    let b = Breaker::builder().clock(clock.clone()).ticker(false).build().unwrap();
    for &ns in &samples {
        b.allow().unwrap().record_latency(Duration::from_nanos(ns), true);
    }
    clock.advance(SEC);
    b.tick();
    let q = b.snapshot().window.latency.expect("a window with calls has quantiles");
    // The same samples in sketches-ddsketch with the same γ = 2^(1/8): the
    // breaker's quantiles are that sketch's, give or take the one bucket a
    // value within 1/256 of a boundary may move to.
    let gamma = 2f64.powf(1.0 / 8.0);
    let mut dd =
        sketches_ddsketch::DDSketch::new(sketches_ddsketch::Config::new((gamma - 1.0) / (gamma + 1.0), 4096, 1.0));
    samples.iter().for_each(|&ns| dd.add(ns as f64));
    for (quantile, got) in [(0.5, q.p50), (0.9, q.p90), (0.99, q.p99), (0.999, q.p999)] {
        let theirs = dd.quantile(quantile).unwrap().unwrap();
        let ratio = got.as_nanos() as f64 / theirs;
        assert!(
            ratio > 1.0 / gamma - 1e-9 && ratio < gamma + 1e-9,
            "{name} P{}: {got:?} vs DDSketch {theirs}",
            quantile * 100.0
        );
    }
    samples.sort_unstable();
    let n = samples.len();
    for (quantile, got) in [(0.5, q.p50), (0.9, q.p90), (0.99, q.p99), (0.999, q.p999)] {
        let exact = samples[(quantile * (n - 1) as f64) as usize] as f64;
        let err = (got.as_nanos() as f64 / exact - 1.0).abs();
        assert!(
            err <= QUANTILE_RELATIVE_ERROR,
            "{name} P{}: got {got:?}, exact {exact} ns, relative error {err:.4}",
            quantile * 100.0
        );
    }
    assert_eq!(b.snapshot().window.calls, n as u64);
}

#[test]
fn quantiles_are_within_the_stated_error_for_a_lognormal() {
    let mut rng = Rng(0x1234_5678);
    check_accuracy("lognormal", (0..1_000_000).map(|_| rng.lognormal(8e6, 0.6)).collect());
}

#[test]
fn quantiles_are_within_the_stated_error_for_a_bimodal_8ms_900ms_mix() {
    let mut rng = Rng(0x9E37_79B9);
    let samples = (0..1_000_000)
        .map(|_| {
            if rng.uniform() < 0.95 {
                rng.lognormal(8e6, 0.15)
            } else {
                rng.lognormal(9e8, 0.1)
            }
        })
        .collect();
    check_accuracy("bimodal", samples);
}

#[test]
fn quantiles_are_within_the_stated_error_for_a_constant() {
    for ns in [8_000_000u64, 1_500, 3_000_000_000, 1 << 20] {
        check_accuracy("constant", vec![ns; 1_000_000]);
    }
}

#[test]
fn quantiles_merge_every_shard_and_local_handle() {
    let clock = ManualClock::new();
    let b = Breaker::builder()
        .clock(clock.clone())
        .ticker(false)
        .shards(4)
        .local_handles(1)
        .build()
        .unwrap();
    let local = b.local_handle().unwrap();
    std::thread::scope(|s| {
        for _ in 0..3 {
            s.spawn(|| {
                for _ in 0..990 {
                    b.allow().unwrap().record_latency(8 * MS, true);
                }
            });
        }
    });
    for _ in 0..30 {
        local.allow().unwrap().record_latency(900 * MS, true);
    }
    clock.advance(SEC);
    b.tick();
    let w = b.snapshot().window;
    assert_eq!((w.calls, w.slow), (3_000, 30));
    let q = w.latency.unwrap();
    assert!((q.p50.as_secs_f64() / 0.008 - 1.0).abs() <= QUANTILE_RELATIVE_ERROR);
    assert!((q.p999.as_secs_f64() / 0.9 - 1.0).abs() <= QUANTILE_RELATIVE_ERROR);
    assert!(
        q.p99 < 50 * MS,
        "exactly 1% slow: P99 is still fast, as the trip rule says"
    );
}

#[test]
fn a_window_without_calls_has_no_quantiles() {
    let clock = ManualClock::new();
    let b = Breaker::builder().clock(clock.clone()).ticker(false).build().unwrap();
    clock.advance(SEC);
    b.tick();
    assert_eq!(b.snapshot().window.latency, None);
}
