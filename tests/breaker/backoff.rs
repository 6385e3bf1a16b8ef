//! Backoff: the public `tailguard::backoff` (bounds over many (attempt,
//! base, cap) combinations and their extremes, ceilings that double up to
//! the cap, determinism for a seed against SplitMix64's published sequence,
//! and the uniformity of the draw by chi-square and Kolmogorov-Smirnov
//! tests), and the breaker's OPEN backoff and deadline built on it.

use crate::support::hook::HookClock;
use crate::support::*;
use std::sync::mpsc;
use std::time::Duration;
use tailguard::backoff::{Backoff, SplitMix64};
use tailguard::clock::ManualClock;
use tailguard::{Breaker, ConfigErrorKind, Jitter, RejectReason, State};

/// Draws per distribution test.
const DRAWS: usize = 100_000;

/// Equal-width bins of the chi-square test.
const BINS: usize = 20;

/// Critical value of the chi-square test at p = 0.001 with `BINS − 1 = 19`
/// degrees of freedom: the 0.999 quantile of χ²(19), 43.820 (NIST/SEMATECH
/// e-Handbook of Statistical Methods, §1.3.6.7.4 "Critical values of the
/// chi-square distribution"; `scipy.stats.chi2.ppf(0.999, 19)` = 43.8202,
/// which we also checked by integrating the regularised gamma function).
const CHI2_CRITICAL_DF19_P001: f64 = 43.820;

/// The Kolmogorov–Smirnov critical value at α = 0.001 is `c / √n` for large
/// `n`, with `c = √(−ln(α/2) / 2) = 1.9495` (Smirnov's asymptotic
/// distribution, as tabulated in e.g. Massey 1951 and the NIST handbook,
/// §1.3.5.16).
const KS_C_ALPHA_0001: f64 = 1.95;

fn ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).expect("at most u64::MAX ns")
}

/// The bound of `attempt` computed the slow way, in 128 bits.
fn reference_ceiling(base_ns: u64, cap_ns: u64, attempt: u32) -> u64 {
    if attempt >= 64 {
        // base ≥ 1, so base × 2^attempt ≥ 2^64 > any cap.
        return cap_ns;
    }
    let bound = u128::from(base_ns) << attempt;
    u64::try_from(bound.min(u128::from(cap_ns))).unwrap()
}

/// `DRAWS` delays of `attempt`, in nanoseconds, from `seed`.
fn sample(backoff: Backoff, attempt: u32, seed: u64) -> Vec<u64> {
    let mut rng = SplitMix64::new(seed);
    (0..DRAWS).map(|_| ns(backoff.delay(attempt, &mut rng))).collect()
}

/// Pearson's χ² of `xs` (integers uniform on `[0, bound]`, `bound ≥ BINS − 1`
/// so that no bin is empty) over `BINS` bins of equal width, with the exact
/// expected count of each bin (`bound + 1` need not divide by `BINS`).
fn chi_square(xs: &[u64], bound: u64) -> f64 {
    let span = u128::from(bound) + 1;
    let bins = BINS as u128;
    let mut observed = [0u64; BINS];
    for &x in xs {
        observed[(u128::from(x) * bins / span) as usize] += 1;
    }
    // Bin i holds the integers from ⌈i·span/BINS⌉ to ⌈(i+1)·span/BINS⌉ − 1.
    let first = |i: u128| (i * span).div_ceil(bins);
    let n = xs.len() as f64;
    (0..BINS)
        .map(|i| {
            let width = first(i as u128 + 1) - first(i as u128);
            let expected = n * (width as f64) / (span as f64);
            let diff = observed[i] as f64 - expected;
            diff * diff / expected
        })
        .sum()
}

/// The Kolmogorov–Smirnov statistic of `xs` (integers on `[0, bound]`)
/// against the continuous uniform CDF `F(u) = u` of `u = x / (bound + 1)`
/// (the discreteness adds at most `1 / (bound + 1)`, nothing for the bounds
/// tested here).
fn ks_statistic(xs: &[u64], bound: u64) -> f64 {
    let span = bound as f64 + 1.0;
    let mut us: Vec<f64> = xs.iter().map(|&x| x as f64 / span).collect();
    us.sort_by(f64::total_cmp);
    let n = us.len() as f64;
    us.iter()
        .enumerate()
        .map(|(i, &u)| {
            let above = (i as f64 + 1.0) / n - u;
            let below = u - i as f64 / n;
            above.max(below)
        })
        .fold(0.0, f64::max)
}

fn ks_critical(n: usize) -> f64 {
    KS_C_ALPHA_0001 / (n as f64).sqrt()
}

/// The ceilings the distribution tests draw under: a named backoff and an
/// attempt, the bound, and a seed of its own.
fn distribution_cases() -> Vec<(&'static str, Backoff, u32, u64)> {
    let d = Duration::from_nanos;
    vec![
        // 20 values, one per bin: the ends 0 and 19 are each a whole bin.
        ("19 ns", Backoff::new(d(5), d(19)).unwrap(), 2, 0xB0B0_0001),
        // A retry loop's typical bound: 100 ms × 2^5.
        (
            "3.2 s",
            Backoff::new(Duration::from_millis(100), Duration::from_secs(10)).unwrap(),
            5,
            0xB0B0_0002,
        ),
        // 10^9 + 1 values: not a multiple of 20, so bins differ by one value.
        (
            "1 s",
            Backoff::new(Duration::from_secs(1), Duration::from_secs(30)).unwrap(),
            0,
            0xB0B0_0003,
        ),
        // span = 3 × 2^62: `r % span` would make the lowest third of the
        // range twice as likely; the draw must not.
        (
            "3·2^62 − 1 ns",
            Backoff::new(d((3 << 62) - 1), d((3 << 62) - 1)).unwrap(),
            0,
            0xB0B0_0004,
        ),
        // Every u64: the path with no multiply.
        (
            "u64::MAX ns",
            Backoff::new(d(1), Duration::MAX).unwrap(),
            64,
            0xB0B0_0005,
        ),
    ]
}

#[test]
fn constructor_accepts_exactly_a_nonzero_base_at_most_the_cap() {
    let values = [
        Duration::ZERO,
        Duration::from_nanos(1),
        Duration::from_nanos(3),
        Duration::from_nanos(1_007),
        Duration::from_secs(1),
        Duration::from_secs(86_400),
        Duration::from_nanos(u64::MAX - 1),
        Duration::from_nanos(u64::MAX),
        Duration::from_secs(u64::MAX / 1_000),
        Duration::MAX,
    ];
    let saturated = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
    for &base in &values {
        for &cap in &values {
            let result = Backoff::new(base, cap);
            let (b, c) = (saturated(base), saturated(cap));
            match result {
                Ok(backoff) => {
                    assert!(b >= 1 && c >= b, "{base:?} {cap:?} accepted");
                    assert_eq!(ns(backoff.base()), b);
                    assert_eq!(ns(backoff.cap()), c);
                }
                Err(err) if b == 0 => {
                    assert_eq!((err.field(), err.kind()), ("base", ConfigErrorKind::Zero));
                }
                Err(err) => {
                    assert!(c < b, "{base:?} {cap:?} refused: {err}");
                    assert_eq!((err.field(), err.kind()), ("cap", ConfigErrorKind::Inconsistent));
                }
            }
        }
    }
    // The combination the brief singles out: refused, not a panic.
    assert!(Backoff::new(Duration::MAX, Duration::ZERO).is_err());
}

#[test]
fn every_delay_lies_within_zero_and_its_ceiling() {
    let values = [
        1,
        2,
        3,
        1_000,
        999_999_937,
        86_400_000_000_000,
        1 << 62,
        u64::MAX - 1,
        u64::MAX,
    ];
    let attempts = [
        0,
        1,
        2,
        3,
        10,
        31,
        32,
        47,
        62,
        63,
        64,
        65,
        1_000,
        u32::MAX - 1,
        u32::MAX,
    ];
    let mut rng = SplitMix64::new(0x5EED);
    for &base_ns in &values {
        for &cap_ns in values.iter().filter(|&&c| c >= base_ns) {
            let backoff = Backoff::new(Duration::from_nanos(base_ns), Duration::from_nanos(cap_ns)).unwrap();
            for &attempt in &attempts {
                let ceiling = ns(backoff.ceiling(attempt));
                assert_eq!(
                    ceiling,
                    reference_ceiling(base_ns, cap_ns, attempt),
                    "{backoff:?} attempt {attempt}"
                );
                for _ in 0..50 {
                    assert!(ns(backoff.delay(attempt, &mut rng)) <= ceiling);
                }
                // Sources that are not random at all still give a delay in range.
                for source in [0, 1, 1 << 63, u64::MAX] {
                    assert!(ns(backoff.delay_with(attempt, || source)) <= ceiling);
                }
                let mut flip = 0u64;
                let alternating = || {
                    flip = !flip;
                    flip
                };
                assert!(ns(backoff.delay_with(attempt, alternating)) <= ceiling);
            }
        }
    }
}

#[test]
fn both_ends_are_reached() {
    let backoff = Backoff::new(Duration::from_nanos(1), Duration::from_nanos(1)).unwrap();
    let mut rng = SplitMix64::new(11);
    let draws: Vec<u64> = (0..1_000).map(|_| ns(backoff.delay(0, &mut rng))).collect();
    assert!(draws.contains(&0) && draws.contains(&1));
    // The full range hands the source's value through.
    let full = Backoff::new(Duration::from_nanos(1), Duration::MAX).unwrap();
    assert_eq!(ns(full.delay_with(64, || u64::MAX)), u64::MAX);
    assert_eq!(ns(full.delay_with(64, || 0)), 0);
}

#[test]
fn ceiling_doubles_from_the_base_until_the_cap() {
    for (base_ns, cap_ns) in [
        (1, 1 << 40),
        (3, 1_000_000_007),
        (1_000_000, 30_000_000_000),
        (7, u64::MAX),
    ] {
        let backoff = Backoff::new(Duration::from_nanos(base_ns), Duration::from_nanos(cap_ns)).unwrap();
        assert_eq!(ns(backoff.ceiling(0)), base_ns);
        let mut capped = false;
        for attempt in 0..200u32 {
            let (this, next) = (ns(backoff.ceiling(attempt)), ns(backoff.ceiling(attempt + 1)));
            if capped {
                assert_eq!(this, cap_ns);
            } else if this.checked_mul(2).is_some_and(|d| d <= cap_ns) {
                assert_eq!(next, 2 * this, "{backoff:?} attempt {attempt}");
            } else {
                assert_eq!(next, cap_ns, "{backoff:?} attempt {attempt}");
                capped = true;
            }
        }
        assert!(capped);
        assert_eq!(ns(backoff.ceiling(u32::MAX)), cap_ns);
    }
}

#[test]
fn splitmix_matches_the_published_sequence() {
    // The reference output of SplitMix64 seeded with 1234567 (Vigna's
    // splitmix64.c, as used to seed xoshiro).
    let mut rng = SplitMix64::new(1_234_567);
    let expected = [
        6_457_827_717_110_365_317,
        3_203_168_211_198_807_973,
        9_817_491_932_198_370_423,
        4_593_380_528_125_082_431,
        16_408_922_859_458_223_821,
    ];
    for value in expected {
        assert_eq!(rng.next_u64(), value);
    }
}

#[test]
fn the_same_seed_gives_the_same_delays() {
    let backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(10)).unwrap();
    // Computed by an independent Python model of SplitMix64 and of Lemire's
    // multiply-and-reject draw (`(x · (bound + 1)) >> 64`), seed 42.
    let expected = [
        74_156_488,
        31_982_078,
        111_440_452,
        275_352_573,
        60_848_269,
        2_778_329_845,
        1_397_793_239,
        8_006_318_767,
    ];
    let mut rng = SplitMix64::new(42);
    let drawn: Vec<u64> = (0..8).map(|attempt| ns(backoff.delay(attempt, &mut rng))).collect();
    assert_eq!(drawn, expected);
    // The iterator is the same draws, attempt after attempt.
    let iterated: Vec<u64> = backoff.delays(SplitMix64::new(42)).take(8).map(ns).collect();
    assert_eq!(iterated, expected);
    // A clone continues the same sequence; another seed does not.
    let mut a = SplitMix64::new(9);
    let mut b = a.clone();
    let mut c = SplitMix64::new(10);
    let (mut same, mut differ) = (true, false);
    for attempt in 0..100 {
        let x = backoff.delay(attempt % 8, &mut a);
        same &= x == backoff.delay(attempt % 8, &mut b);
        differ |= x != backoff.delay(attempt % 8, &mut c);
    }
    assert!(same && differ);
}

/// The rejection step, by hand. With `span = 3 · 2^62` (ceiling
/// `3 · 2^62 − 1`), a draw `x` gives the product `x · span`, whose low word
/// is `(3x mod 4) · 2^62` and whose high word is `⌊3x / 4⌋`. Lemire's
/// threshold is `2^64 mod span = 2^62`, so exactly the draws with
/// `x ≡ 0 (mod 4)` are drawn again, and what is kept maps one draw to each
/// result: `4j + 1 → 3j`, `4j + 2 → 3j + 1`, `4j + 3 → 3j + 2`. (The
/// distribution tests cannot see a missing rejection: its excess is spread
/// evenly over every bin.)
#[test]
fn rejection_redraws_exactly_the_excess_draws() {
    let span: u64 = 3 << 62;
    let backoff = Backoff::new(Duration::from_nanos(span - 1), Duration::from_nanos(span - 1)).unwrap();
    let firsts = (0..64u64)
        .chain((0..64).map(|i| u64::MAX - i))
        .chain([1 << 63, (1 << 62) + 7]);
    for x in firsts {
        let mut calls = 0;
        let source = || {
            calls += 1;
            // The redraw, if any: 1 is kept and gives 0.
            if calls == 1 {
                x
            } else {
                1
            }
        };
        let delay = ns(backoff.delay_with(0, source));
        if x % 4 == 0 {
            assert_eq!((calls, delay), (2, 0), "x = {x:#x} must be drawn again");
        } else {
            let expected = u64::try_from(u128::from(x) * 3 / 4).unwrap();
            assert_eq!((calls, delay), (1, expected), "x = {x:#x}");
        }
    }
}

#[test]
#[cfg_attr(miri, ignore = "500,000 draws; minutes under Miri")]
fn chi_square_accepts_the_draw_as_uniform() {
    for (name, backoff, attempt, seed) in distribution_cases() {
        let bound = ns(backoff.ceiling(attempt));
        let chi2 = chi_square(&sample(backoff, attempt, seed), bound);
        println!("chi-square {name}: {chi2:.2} (critical {CHI2_CRITICAL_DF19_P001})");
        assert!(
            chi2 < CHI2_CRITICAL_DF19_P001,
            "{name}: χ² = {chi2:.2} ≥ {CHI2_CRITICAL_DF19_P001}"
        );
    }
}

#[test]
#[cfg_attr(miri, ignore = "500,000 draws; minutes under Miri")]
fn kolmogorov_smirnov_accepts_the_draw_as_uniform() {
    let critical = ks_critical(DRAWS);
    // The 19 ns case is too coarse for a test against a continuous CDF.
    for (name, backoff, attempt, seed) in distribution_cases().into_iter().skip(1) {
        let bound = ns(backoff.ceiling(attempt));
        let d = ks_statistic(&sample(backoff, attempt, seed ^ 0x4B53), bound);
        println!("KS {name}: D = {d:.5} (critical {critical:.5})");
        assert!(d < critical, "{name}: D = {d:.5} ≥ {critical:.5}");
    }
}

/// The breaker's OPEN duration under `Jitter::Full` is the same draw:
/// trip, read when the next probe may start, reset, again.
#[test]
#[cfg_attr(miri, ignore = "tens of thousands of trips; minutes under Miri")]
fn breaker_full_jitter_is_the_uniform_draw() {
    const TRIPS: usize = 20_000;
    let clock = ManualClock::new();
    let base = Duration::from_secs(1);
    let check = |jitter: Jitter, low: u64| {
        let b = Breaker::builder()
            .clock(clock.clone())
            .ticker(false)
            .base_backoff(base)
            .jitter(jitter)
            .build()
            .unwrap();
        let ceiling = ns(Backoff::new(base, Duration::from_secs(30)).unwrap().ceiling(0));
        let waits: Vec<u64> = (0..TRIPS)
            .map(|_| {
                b.trip_now();
                let wait = ns(b.snapshot().next_probe_in.expect("open"));
                b.reset();
                assert!((low..=ceiling).contains(&wait), "{jitter:?}: {wait}");
                wait - low
            })
            .collect();
        let bound = ceiling - low;
        let d = ks_statistic(&waits, bound);
        let chi2 = chi_square(&waits, bound);
        println!(
            "breaker {jitter:?}: KS D = {d:.5} (critical {:.5}), χ² = {chi2:.2}",
            ks_critical(TRIPS)
        );
        assert!(d < ks_critical(TRIPS), "{jitter:?}: D = {d:.5}");
        assert!(chi2 < CHI2_CRITICAL_DF19_P001, "{jitter:?}: χ² = {chi2:.2}");
    };
    check(Jitter::Full, 0);
    check(Jitter::Bounded(0.25), 750_000_000);
}

#[test]
fn backoff_doubles_per_reopen_caps_and_resets_on_clean_close() {
    let clock = ManualClock::new();
    let b = builder(&clock).success_to_close(1).build().unwrap();
    b.trip_now();
    let mut expected = SEC;
    for _ in 0..8 {
        assert_eq!(b.allow().unwrap_err().retry_after(), Some(expected));
        clock.advance(expected);
        b.allow().unwrap().record(false); // the probe fails: re-open
        expected = (expected * 2).min(30 * SEC);
    }
    assert_eq!(b.snapshot().backoff_level, 8);
    assert_eq!(b.allow().unwrap_err().retry_after(), Some(30 * SEC));
    clock.advance(30 * SEC);
    b.allow().unwrap().record_latency(MS, true); // clean close
    assert_eq!(b.state(), State::Closed);
    assert_eq!(b.snapshot().backoff_level, 0);
    b.trip_now();
    assert_eq!(b.allow().unwrap_err().retry_after(), Some(SEC));
}

#[test]
#[cfg_attr(miri, ignore = "ten thousand trips; minutes under Miri")]
fn sub_second_base_is_honoured_and_ten_thousand_trips_do_not_overflow() {
    let clock = ManualClock::new();
    let base = Duration::from_micros(100);
    let b = builder(&clock)
        .base_backoff(base)
        .max_backoff(30 * SEC)
        .build()
        .unwrap();
    b.trip_now();
    assert_eq!(b.allow().unwrap_err().retry_after(), Some(base));
    clock.advance(base);
    for _ in 0..10_000 {
        let p = b.allow().expect("probe after the backoff");
        assert!(p.is_probe());
        p.record(false);
        let wait = b.allow().unwrap_err().retry_after().unwrap();
        assert!(wait > Duration::ZERO && wait <= 30 * SEC, "{wait:?}");
        clock.advance(wait);
    }
    let s = b.snapshot();
    assert_eq!(s.trip_count, 10_001);
    assert_eq!(s.backoff_level, 31);
    assert_eq!(s.next_probe_in, Some(Duration::ZERO));
}

#[test]
#[cfg_attr(miri, ignore = "thousands of trips; minutes under Miri")]
fn full_jitter_stays_within_zero_and_the_backoff() {
    let clock = ManualClock::new();
    let mut seen = std::collections::HashSet::new();
    for _ in 0..200 {
        let b = builder(&clock).jitter(Jitter::Full).base_backoff(SEC).build().unwrap();
        b.trip_now();
        let wait = b.snapshot().next_probe_in.unwrap();
        assert!(wait <= SEC);
        seen.insert(wait.as_millis() / 100);
        let b = builder(&clock).jitter(Jitter::Bounded(0.25)).build().unwrap();
        b.trip_now();
        let wait = b.snapshot().next_probe_in.unwrap();
        assert!(wait >= 750 * MS && wait <= SEC, "{wait:?}");
    }
    assert!(seen.len() >= 5, "full jitter should spread: {seen:?}");
}

/// Kills, in `src/breaker/admission.rs`:
/// * `Inner::reject_open_fast`: `self.deadline_gen.load(..) != u64::from(word.generation())`,
///   `!=` → `==` (the fast path would answer from the previous OPEN's
///   deadline: 600 ms here instead of the new OPEN's 1 s);
/// * `Inner::admit_open`: `if current != word`, `!=` → `==` (a caller
///   that finds this OPEN's deadline not yet published would retry until
///   it is: here, forever, since the publisher waits for the caller).
///
/// A trip's CAS and the publication of its deadline are two steps; a
/// caller between them is rejected with the new OPEN's backoff (the loom
/// model `a_call_racing_a_trip_is_admitted_before_it_or_rejected` says
/// the same of a racing trip), never with what is left of an earlier
/// OPEN's deadline, still stored but withdrawn. The hook clock puts the
/// caller there: `trip_now` reads the clock after its CAS, before it
/// publishes. The caller runs on a thread of its own, so that a caller
/// that never answers fails the test instead of hanging it.
///
/// Kills the mutants named above (the `cargo mutants` run on d617b3f).
#[test]
fn a_call_between_a_trip_and_its_deadline_is_told_the_new_backoff() {
    let clock = HookClock::new();
    let b = Breaker::builder()
        .clock(clock.source())
        .ticker(false)
        .base_backoff(SEC)
        .max_backoff(30 * SEC)
        .build()
        .unwrap();
    b.trip_now(); // OPEN at 0: deadline 1 s
    clock.advance(400 * MS);
    b.reset(); // that OPEN is over; its deadline (1 s) stays stored, withdrawn
    let caller = b.clone();
    let (tx, rx) = mpsc::channel();
    let (seen_tx, seen_rx) = mpsc::channel();
    clock.at_read(1, move || {
        // Between the new OPEN's CAS and the publication of its deadline.
        std::thread::spawn(move || {
            let answer = caller.allow().err().map(|r| (r.reason(), r.retry_after()));
            let _ = tx.send(answer);
        });
        let answer = rx.recv_timeout(Duration::from_secs(60));
        seen_tx.send(answer).unwrap();
    });
    b.trip_now(); // OPEN again at 400 ms, level 0 (reset): deadline 1.4 s
    let answer = seen_rx
        .try_recv()
        .expect("the hook ran")
        .expect("a caller between the trip and its deadline is answered at once");
    assert_eq!(answer, Some((RejectReason::Open, Some(SEC))));
    // Published: the same answer from the deadline itself.
    let r = b.allow().unwrap_err();
    assert_eq!((r.reason(), r.retry_after()), (RejectReason::Open, Some(SEC)));
}

/// "A correct clock is never more than the longest backoff before the
/// deadline": a reading exactly `max_backoff` before it is taken as it
/// is, and one nanosecond earlier as a step back (time resumes from the
/// trip), on the rejection fast path and on the slow path, which an OPEN
/// breaker in metrics-only mode always takes. Both read the boundary from
/// one definition now (`stepped_back` in `src/breaker/open.rs`); taking
/// the boundary reading for a step back would move the breaker's time
/// forward to the trip (29 s), and the next probe would look 1 s away
/// instead of 30 s.
///
/// Written to kill a mutant of the slow path's copy of the boundary
/// (`<` → `<=`, the `cargo mutants` run on d617b3f), when the two paths
/// had one each.
#[test]
fn a_reading_exactly_max_backoff_before_the_deadline_is_not_a_step_back_on_either_path() {
    let build = |clock: &ManualClock| {
        Breaker::builder()
            .clock(clock.clone())
            .ticker(false)
            .base_backoff(SEC)
            .max_backoff(30 * SEC)
            .build()
            .unwrap()
    };
    for (back, next_probe_in) in [(29 * SEC, 30 * SEC), (29 * SEC + Duration::from_nanos(1), SEC)] {
        // The fast path (no override).
        let clock = ManualClock::new();
        let normal = build(&clock);
        clock.set(40 * SEC);
        normal.trip_now(); // deadline 41 s
        clock.rewind(back);
        let r = normal.allow().unwrap_err();
        assert_eq!(r.retry_after(), Some(next_probe_in), "fast path, {back:?} back");
        assert_eq!(
            normal.snapshot().next_probe_in,
            Some(next_probe_in),
            "fast path, {back:?} back"
        );

        // The slow path (metrics-only: the shadow rejection admits).
        let clock = ManualClock::new();
        let shadow = build(&clock);
        shadow.metrics_only();
        clock.set(40 * SEC);
        shadow.trip_now(); // deadline 41 s
        clock.rewind(back);
        assert!(shadow.allow().is_ok());
        let s = shadow.snapshot();
        assert_eq!((s.state, s.shadow_rejections), (State::Open, 1));
        assert_eq!(s.next_probe_in, Some(next_probe_in), "slow path, {back:?} back");
    }
}
