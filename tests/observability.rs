//! Latency quantiles, flapping, the registry and the memory figure.

use std::sync::{Arc, Mutex};
use std::time::Duration;
use tailguard::clock::ManualClock;
use tailguard::dlq::{DeadLetterQueue, Priority, Pushed};
use tailguard::{Breaker, Registry, State, Transition, QUANTILE_RELATIVE_ERROR};

const MS: Duration = Duration::from_millis(1);
const SEC: Duration = Duration::from_secs(1);

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

#[test]
fn flapping_is_flagged_announced_and_cleared() {
    let clock = ManualClock::new();
    let seen: Arc<Mutex<Vec<Transition>>> = Arc::default();
    let sink = Arc::clone(&seen);
    let b = Breaker::builder()
        .clock(clock.clone())
        .ticker(false)
        .base_backoff(100 * MS)
        .max_backoff(100 * MS)
        .flapping(3, 60 * SEC)
        .on_transition(move |t| sink.lock().unwrap().push(*t))
        .build()
        .unwrap();
    b.trip_now();
    for cycle in 1..=4 {
        clock.advance(100 * MS);
        b.allow().unwrap().record(false); // OPEN -> HALF_OPEN -> OPEN
        assert_eq!(b.snapshot().flapping, cycle > 3, "cycle {cycle}");
    }
    b.tick(); // delivers the transitions `allow` and `record` queued
    let raised: Vec<_> = seen
        .lock()
        .unwrap()
        .iter()
        .filter(|t| t.flapping)
        .map(|t| t.generation)
        .collect();
    assert_eq!(raised.len(), 1, "the fourth re-open raises the flag: {raised:?}");
    // A minute later, with the consumer healthy, the flag clears.
    clock.advance(100 * MS);
    for _ in 0..5 {
        b.allow().unwrap().record_latency(MS, true);
    }
    assert_eq!(b.state(), State::Closed);
    clock.advance(61 * SEC);
    b.tick();
    assert!(!b.snapshot().flapping);
}

#[test]
fn slow_reopens_spread_out_are_not_flapping() {
    let clock = ManualClock::new();
    let b = Breaker::builder()
        .clock(clock.clone())
        .ticker(false)
        .flapping(3, 60 * SEC)
        .build()
        .unwrap();
    b.trip_now();
    for _ in 0..10 {
        let wait = b.snapshot().next_probe_in.unwrap();
        clock.advance(wait.max(25 * SEC)); // three re-opens per minute at most
        b.allow().unwrap().record(false);
        assert!(!b.snapshot().flapping);
    }
}

#[test]
fn registry_creates_once_looks_up_removes_and_iterates() {
    let registry = Registry::new();
    let a = registry.get_or_create("pricing", Breaker::builder).unwrap();
    let made = std::sync::atomic::AtomicUsize::new(0);
    let again = registry
        .get_or_create("pricing", || {
            made.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            Breaker::builder()
        })
        .unwrap();
    assert!(a.ptr_eq(&again));
    assert_eq!(made.into_inner(), 0, "the builder runs only on creation");
    let bad = registry.get_or_create("broken", || Breaker::builder().quantile(2.0));
    assert_eq!(bad.unwrap_err().field(), "quantile");
    assert!(registry.get("broken").is_none(), "a bad config registers nothing");
    registry.get_or_create("compliance", Breaker::builder).unwrap();
    let dlq: DeadLetterQueue<u32> = DeadLetterQueue::with_capacity(8).unwrap();
    assert!(registry.attach_fallback("pricing", dlq.producer()));
    assert!(matches!(dlq.push(1, Priority::Routine), Ok(Pushed::Queued)));
    assert!(matches!(dlq.push(2, Priority::Critical), Ok(Pushed::Queued)));
    let rows = registry.consumers();
    let names: Vec<&str> = rows.iter().map(|r| &*r.name).collect();
    assert_eq!(names, ["compliance", "pricing"]);
    assert_eq!((rows[1].fallback_depth, rows[1].fallback_capacity), (Some(2), Some(8)));
    assert_eq!(rows[0].fallback_depth, None);
    assert_eq!(registry.remove("pricing").map(|b| b.ptr_eq(&a)), Some(true));
    assert_eq!(registry.len(), 1);
    a.allow().unwrap().record(true); // a removed breaker still works
}

#[test]
fn registry_is_safe_to_share_across_threads() {
    let registry = Registry::new();
    let created: Vec<Breaker> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..4)
            .map(|_| s.spawn(|| registry.get_or_create("shared", Breaker::builder).unwrap()))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(
        created.windows(2).all(|w| w[0].ptr_eq(&w[1])),
        "one breaker per name under races"
    );
}

/// Default settings: with the `tracing` feature every breaker also keeps a
/// 64-event queue (about 3 KB), so the figure is for a build without it.
/// (The exact figures are checked against the README below.)
#[test]
#[cfg(all(target_pointer_width = "64", not(feature = "tracing")))]
fn one_breaker_is_about_two_kilobytes_at_default_settings_on_two_shards() {
    let bytes = |shards| {
        Breaker::builder()
            .ticker(false)
            .shards(shards)
            .build()
            .unwrap()
            .memory_bytes()
    };
    let (one, two, four) = (bytes(1), bytes(2), bytes(4));
    assert!(two <= 2048 + 64, "{two} bytes");
    assert_eq!(two - one, four - two - (two - one), "linear in the shard count");
    assert_eq!(two - one, 640, "one shard: buckets, carries and counters, cache-padded");
    assert!(50 * two <= 102 * 1024, "50 consumers in about 100 KB");
}

/// The memory figures `docs/figures.md` states are the code's, exactly, on the
/// target they are stated for (x86-64, without `tracing`, whose event
/// queue every breaker then keeps).
#[test]
#[cfg(all(target_arch = "x86_64", not(feature = "tracing")))]
fn the_stated_memory_figures_are_the_code_s() {
    let bytes = |b: tailguard::BreakerBuilder| b.ticker(false).build().unwrap().memory_bytes();
    let one = bytes(Breaker::builder().shards(1));
    let two = bytes(Breaker::builder().shards(2));
    let per_shard = two - one;
    let base = one - per_shard;
    let local = bytes(Breaker::builder().shards(2).local_handles(1)) - two;
    let in_flight = (bytes(Breaker::builder().shards(2).track_in_flight(true)) - two) / 2;
    let listener = bytes(Breaker::builder().shards(2).on_transition(|_| {})) - two;
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/figures.md")).unwrap();
    let thousands = |n: usize| {
        let s = n.to_string();
        if n < 1000 {
            s
        } else {
            format!("{},{}", &s[..s.len() - 3], &s[s.len() - 3..])
        }
    };
    let kb = |n: usize| format!("{:.1} KB", n as f64 / 1024.0);
    let stated = [
        format!("x86-64: {base} bytes"),
        format!("plus {per_shard} per shard"),
        format!("**{} bytes**", thousands(two)),
        format!("local handle adds about {}", kb(local)),
        format!("in-flight tracking {in_flight} bytes per shard"),
        format!("64-event queue of about {}", kb(listener)),
    ];
    let flat = readme.split_whitespace().collect::<Vec<_>>().join(" ");
    for s in stated {
        assert!(flat.contains(&s), "docs/figures.md should state {s:?}");
    }
}
