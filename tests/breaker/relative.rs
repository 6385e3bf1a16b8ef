//! The relative latency rule (`BreakerBuilder::relative_latency`): the
//! threshold at the bucket edge, exact on both sides; the consumers the
//! absolute rule gets wrong; a cold start; learning that outages, probes,
//! forced modes and breaching windows cannot poison; the bounded rise, the
//! slow ramp it catches and the fastest one that escapes it; seeding and
//! resetting the baseline; probes judged by the relative threshold.

use crate::support::{builder, next_window, MS, NS, SEC};
use std::time::Duration;
use tailguard::clock::ManualClock;
use tailguard::{Breaker, BreakerBuilder, Reason, RelativeLatency, State};

/// A breaker on `clock` with the relative rule at its defaults (k = 2,
/// floor 1 ms, ceiling 1 s, ×1.5 an hour, warmup 5), changed by `rule`.
fn relative(clock: &ManualClock, rule: RelativeLatency) -> BreakerBuilder {
    builder(clock).relative_latency(rule)
}

/// One window of `calls` calls: all at `latency`, but one in a hundred at
/// 1.5 × `latency` (a tail, under twice the P99).
fn window(b: &Breaker, clock: &ManualClock, calls: u64, latency: Duration) {
    for i in 0..calls {
        let l = if i % 100 == 99 { latency * 3 / 2 } else { latency };
        b.allow().expect("admitted").record_latency(l, true);
    }
    next_window(b, clock);
}

/// Warms a cold breaker up: five observations of 1000 calls at `latency`.
fn warm_up(b: &Breaker, clock: &ManualClock, latency: Duration) {
    for _ in 0..5 {
        window(b, clock, 1000, latency);
    }
    assert!(b.latency_baseline().is_some());
}

fn near(got: Duration, want: Duration, within: f64) -> bool {
    (got.as_secs_f64() / want.as_secs_f64() - 1.0).abs() <= within
}

/// The threshold is a bucket edge: a call exactly at it is not slow, one
/// nanosecond over it is. At the edge two calls of a hundred are slow
/// (more than 1%: a breach), at the edge itself none are.
#[test]
fn the_relative_threshold_is_a_bucket_edge_exact_on_both_sides() {
    let seeded = RelativeLatency::new().initial_baseline(2 * MS);
    let build = |clock: &ManualClock| relative(clock, seeded).trip_windows(1).build().unwrap();
    let probe = ManualClock::new();
    let t = build(&probe).snapshot().latency_threshold;
    // Twice the baseline, at most one bucket (2^(1/8)) above it.
    assert!(
        t >= 4 * MS && t.as_secs_f64() <= 0.004 * 2f64.powf(1.0 / 8.0) * 1.001,
        "{t:?}"
    );
    for (at, slow, state) in [
        (t, 0, State::Closed),
        (t - NS, 0, State::Closed),
        (t + NS, 2, State::Open),
    ] {
        let clock = ManualClock::new();
        let b = build(&clock);
        for i in 0..100 {
            let l = if i < 2 { at } else { MS };
            b.allow().unwrap().record_latency(l, true);
        }
        next_window(&b, &clock);
        assert_eq!(
            (b.snapshot().window.slow, b.state()),
            (slow, state),
            "two calls at {at:?}"
        );
        assert_eq!(b.snapshot().window.threshold, t);
        if state == State::Open {
            assert_eq!(
                b.snapshot().limits.latency_threshold,
                SEC,
                "the ceiling is the absolute threshold"
            );
        }
    }
}

/// The 2 ms consumer degrades twentyfold to 40 ms: the relative rule (one
/// shared configuration, learned) trips it within the three windows the
/// streak needs; the absolute 50 ms rule never does.
#[test]
fn a_2ms_consumer_at_40ms_trips_the_relative_rule_and_not_a_50ms_one() {
    let clock = ManualClock::new();
    let (seen, listener) = crate::support::recorder();
    let rel = relative(&clock, RelativeLatency::new())
        .on_transition(listener)
        .build()
        .unwrap();
    let abs = builder(&clock).latency_threshold(50 * MS).build().unwrap();
    warm_up(&rel, &clock, 2 * MS);
    let baseline = rel.latency_baseline().unwrap();
    assert!(near(baseline, 2 * MS, 0.1), "{baseline:?}");
    for n in 1..=60 {
        for b in [&rel, &abs] {
            for _ in 0..100 {
                b.allow().map(|p| p.record_latency(40 * MS, true)).ok();
            }
        }
        next_window(&rel, &clock);
        abs.tick();
        if n == 3 {
            assert_eq!(rel.state(), State::Open, "tripped at the third window");
        }
    }
    assert_eq!(abs.state(), State::Closed);
    assert_eq!(abs.snapshot().totals.slow, 0, "never slow by 50 ms");
    let trip = seen.lock().unwrap()[0];
    assert_eq!((trip.to, trip.reason), (State::Open, Reason::RelativeLatency));
    assert_eq!(rel.latency_baseline(), Some(baseline), "the outage taught nothing");
}

/// A consumer healthy at 150 ms, whose windows vary (×0.8 to ×1.25): the
/// absolute 50 ms rule trips it at once, the relative rule never does, over
/// ten minutes.
#[test]
fn a_healthy_150ms_consumer_never_trips_the_relative_rule() {
    let clock = ManualClock::new();
    let rel = relative(&clock, RelativeLatency::new()).build().unwrap();
    let abs = builder(&clock).latency_threshold(50 * MS).build().unwrap();
    let mut x = 0x2545_f491_4f6c_dd1du64;
    for _ in 0..600 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let scale = 0.8 + (x % 1000) as f64 / 1000.0 * 0.45;
        for b in [&rel, &abs] {
            for i in 0..200u64 {
                let ms = if i % 100 == 99 { 225.0 } else { 150.0 } * scale;
                b.allow()
                    .map(|p| p.record_latency(Duration::from_secs_f64(ms / 1e3), true))
                    .ok();
            }
        }
        next_window(&rel, &clock);
        abs.tick();
        assert_eq!(rel.state(), State::Closed);
    }
    assert_eq!(rel.snapshot().trip_count, 0);
    assert!(
        abs.snapshot().trip_count > 0,
        "the absolute rule trips a healthy consumer"
    );
    let b = rel.latency_baseline().unwrap();
    assert!(b > 120 * MS && b < 300 * MS, "{b:?}");
}

/// Before its warmup's five observations the rule judges by the ceiling
/// (1 s): 40 ms calls are not slow, 2 s calls are (and name the absolute
/// rule: the ceiling is the absolute threshold).
#[test]
fn a_cold_start_judges_by_the_ceiling() {
    let clock = ManualClock::new();
    let b = relative(&clock, RelativeLatency::new())
        .trip_windows(1)
        .build()
        .unwrap();
    assert_eq!(b.snapshot().latency_threshold, SEC);
    for _ in 0..4 {
        window(&b, &clock, 1000, 2 * MS);
        assert_eq!(b.snapshot().latency_threshold, SEC, "still warming up");
    }
    assert!(b.latency_baseline().is_some(), "shown during the warmup");
    for _ in 0..100 {
        b.allow().unwrap().record_latency(40 * MS, true);
    }
    next_window(&b, &clock);
    assert_eq!(b.state(), State::Closed, "40 ms is under the ceiling");
    let (seen, listener) = crate::support::recorder();
    let cold = relative(&clock, RelativeLatency::new())
        .trip_windows(1)
        .on_transition(listener)
        .build()
        .unwrap();
    for _ in 0..100 {
        cold.allow().unwrap().record_latency(2 * SEC, true);
    }
    next_window(&cold, &clock);
    assert_eq!(seen.lock().unwrap()[0].reason, Reason::LatencyBreach);
}

/// Nothing the breaker did not judge healthy in normal (or metrics-only)
/// CLOSED teaches the baseline: not an OPEN breaker's windows, not its
/// probes, not a forced mode's, not breaching windows.
#[test]
fn outages_probes_forced_modes_and_breaches_teach_nothing() {
    let clock = ManualClock::new();
    let b = relative(&clock, RelativeLatency::new())
        .success_to_close(1)
        .build()
        .unwrap();
    warm_up(&b, &clock, 2 * MS);
    let baseline = b.latency_baseline().unwrap();
    // Breaching windows (40 ms) two at a time, never three: no trip, and
    // each breaching window empties the pool.
    for _ in 0..20 {
        window(&b, &clock, 1000, 40 * MS);
        window(&b, &clock, 1000, 40 * MS);
        window(&b, &clock, 300, 2 * MS); // healthy, but 300 calls: no observation
    }
    assert_eq!(b.state(), State::Closed);
    assert_eq!(b.latency_baseline(), Some(baseline), "breaching windows");
    // Forced closed, and disabled: slow traffic, nothing learned.
    b.force_closed();
    for _ in 0..10 {
        window(&b, &clock, 1000, 300 * MS);
    }
    b.disable();
    for _ in 0..10 {
        window(&b, &clock, 1000, 300 * MS);
    }
    b.reset();
    assert_eq!(b.latency_baseline(), Some(baseline), "forced modes");
    // OPEN and HALF_OPEN: slow probes re-open, nothing learned.
    b.trip_now();
    for _ in 0..10 {
        clock.advance(Duration::from_secs(30));
        if let Ok(p) = b.allow() {
            p.record_latency(300 * MS, true);
        }
        b.tick();
    }
    assert_eq!(b.state(), State::Open);
    assert_eq!(b.latency_baseline(), Some(baseline), "outage and probes");
}

/// Probes are judged by the relative threshold: a consumer back at 20 ms
/// (under the 1 s ceiling, ten times its 2 ms baseline) is a slow probe;
/// at 2 ms it closes the breaker.
#[test]
fn probes_are_judged_by_the_relative_threshold() {
    let clock = ManualClock::new();
    let (seen, listener) = crate::support::recorder();
    let b = relative(&clock, RelativeLatency::new().initial_baseline(2 * MS))
        .success_to_close(1)
        .on_transition(listener)
        .build()
        .unwrap();
    b.trip_now();
    clock.advance(SEC);
    b.allow().unwrap().record_latency(20 * MS, true);
    assert_eq!(b.state(), State::Open);
    clock.advance(2 * SEC);
    b.allow().unwrap().record_latency(2 * MS, true);
    assert_eq!(b.state(), State::Closed);
    b.tick();
    let reasons: Vec<Reason> = seen.lock().unwrap().iter().map(|t| t.reason).collect();
    assert_eq!(
        reasons,
        [
            Reason::ManualTrip,
            Reason::BackoffElapsed,
            Reason::ProbeSlow,
            Reason::BackoffElapsed,
            Reason::ProbesSucceeded
        ]
    );
}

/// The baseline rises by at most ×1.5 an hour. A consumer that slows by
/// 3% a minute (×5.9 an hour) outgrows it and is caught at about
/// ln 2 / ln(5.9 / 1.5) ≈ 0.5 hours, long before the absolute 50 ms rule
/// (whose threshold it reaches at 109 minutes); one that slows by ×1.5 an
/// hour, the fastest ramp that escapes, is followed for three hours.
#[test]
fn the_rise_is_bounded_so_a_slow_ramp_is_caught_and_the_fastest_escaping_one_escapes() {
    let run = |per_hour: f64, hours: f64| -> (Option<f64>, Option<f64>, Duration) {
        let clock = ManualClock::new();
        let rel = relative(&clock, RelativeLatency::new().initial_baseline(2 * MS))
            .min_calls(20)
            .build()
            .unwrap();
        let abs = builder(&clock).latency_threshold(50 * MS).build().unwrap();
        let (mut rel_at, mut abs_at) = (None, None);
        let windows = (hours * 3600.0) as u64;
        for w in 0..windows {
            let hour = w as f64 / 3600.0;
            let latency = Duration::from_secs_f64(0.002 * per_hour.powf(hour));
            for (b, at) in [(&rel, &mut rel_at), (&abs, &mut abs_at)] {
                if at.is_none() {
                    for _ in 0..100 {
                        b.allow().unwrap().record_latency(latency, true);
                    }
                }
            }
            next_window(&rel, &clock);
            abs.tick();
            if rel_at.is_none() && rel.state() == State::Open {
                rel_at = Some(hour);
            }
            if abs_at.is_none() && abs.state() == State::Open {
                abs_at = Some(hour);
            }
            if rel_at.is_some() && abs_at.is_some() {
                break;
            }
        }
        (rel_at, abs_at, rel.latency_baseline().unwrap())
    };
    let per_minute_3 = 1.03f64.powi(60);
    let (rel_at, abs_at, _) = run(per_minute_3, 2.0);
    let stated = 2f64.ln() / (per_minute_3 / 1.5).ln();
    let rel_at = rel_at.expect("the relative rule catches a 3%-a-minute ramp");
    assert!(
        rel_at >= stated * 0.8 && rel_at <= stated * 1.25,
        "at {rel_at} h, stated {stated} h"
    );
    let abs_at = abs_at.expect("the absolute rule too, at 50 ms");
    assert!(abs_at > 1.7 && abs_at > rel_at + 1.0, "{abs_at} h");
    // At exactly the bound: followed, never caught (in three hours).
    let (rel_at, _, baseline) = run(1.5, 3.0);
    assert_eq!(rel_at, None);
    let want = Duration::from_secs_f64(0.002 * 1.5f64.powi(3));
    assert!(near(baseline, want, 0.15), "{baseline:?} against {want:?}");
}

/// `reset` and the overrides keep the baseline; `reset_baseline` starts it
/// cold (the ceiling judges); `seed_baseline` sets it warm, and refuses a
/// breaker without the rule, zero and more than an hour, by name.
#[test]
fn reset_and_overrides_keep_the_baseline_seed_and_reset_set_it() {
    let clock = ManualClock::new();
    let b = relative(&clock, RelativeLatency::new()).build().unwrap();
    warm_up(&b, &clock, 10 * MS);
    let learned = b.latency_baseline().unwrap();
    b.force_open();
    b.force_closed();
    b.metrics_only();
    b.reset();
    assert_eq!(b.latency_baseline(), Some(learned));
    let t = b.snapshot().latency_threshold;
    assert!(t < 25 * MS, "{t:?}");
    b.reset_baseline();
    assert_eq!((b.latency_baseline(), b.snapshot().latency_threshold), (None, SEC));
    b.seed_baseline(3 * MS).unwrap();
    assert!(near(b.latency_baseline().unwrap(), 3 * MS, 1e-6));
    assert!(b.snapshot().latency_threshold < 7 * MS);
    for (bad, kind) in [
        (Duration::ZERO, tailguard::ConfigErrorKind::Zero),
        (Duration::from_secs(3601), tailguard::ConfigErrorKind::TooLarge),
    ] {
        let err = b.seed_baseline(bad).unwrap_err();
        assert_eq!((err.field(), err.kind()), ("seed_baseline", kind));
    }
    let plain = builder(&clock).build().unwrap();
    let err = plain.seed_baseline(MS).unwrap_err();
    assert_eq!(err.kind(), tailguard::ConfigErrorKind::Inconsistent);
    assert!(err.to_string().contains("relative_latency"), "{err}");
    plain.reset_baseline(); // nothing to do
    assert_eq!(plain.latency_baseline(), None);
}

/// Metrics-only learns as normal CLOSED does and reports what the rule
/// would have done: the shadow state opens by the relative rule, every call
/// is admitted, the refusals are counted.
#[test]
fn metrics_only_reports_what_the_relative_rule_would_do() {
    let clock = ManualClock::new();
    let (seen, listener) = crate::support::recorder();
    let b = relative(&clock, RelativeLatency::new())
        .on_transition(listener)
        .build()
        .unwrap();
    b.metrics_only();
    next_window(&b, &clock); // straddles the transition: not judged
    warm_up(&b, &clock, 2 * MS);
    for _ in 0..3 {
        window(&b, &clock, 100, 40 * MS);
    }
    assert_eq!(b.state(), State::Open, "the state it would be in");
    assert!(b.allow().is_ok(), "metrics-only admits");
    assert_eq!(b.snapshot().shadow_rejections, 1);
    let last = *seen.lock().unwrap().last().unwrap();
    assert_eq!(last.reason, Reason::RelativeLatency);
}

/// With an explicit absolute threshold the two rules judge together: a
/// window breaches if either does, by the lower threshold, and the trip
/// names the rule that breached.
#[test]
fn with_an_explicit_threshold_both_rules_judge() {
    let clock = ManualClock::new();
    let rule = RelativeLatency::new().initial_baseline(100 * MS);
    let b = relative(&clock, rule)
        .latency_threshold(50 * MS)
        .trip_windows(1)
        .build()
        .unwrap();
    // k × 100 ms = 200 ms, above 50 ms: the absolute one is lower.
    assert_eq!(b.snapshot().latency_threshold, 50 * MS);
    assert_eq!(b.snapshot().limits.latency_threshold, 50 * MS);
    let (seen, listener) = crate::support::recorder();
    let low = relative(&clock, RelativeLatency::new().initial_baseline(2 * MS))
        .latency_threshold(50 * MS)
        .trip_windows(1)
        .on_transition(listener)
        .build()
        .unwrap();
    for _ in 0..100 {
        b.allow().unwrap().record_latency(60 * MS, true);
        low.allow().unwrap().record_latency(10 * MS, true);
    }
    next_window(&b, &clock);
    low.tick();
    assert_eq!((b.state(), low.state()), (State::Open, State::Open));
    assert_eq!(seen.lock().unwrap()[0].reason, Reason::RelativeLatency);
}

/// Bad settings are refused by name, with the value and the range.
#[test]
fn bad_relative_settings_are_refused_by_name() {
    use tailguard::ConfigErrorKind as K;
    let r = RelativeLatency::new();
    for (rule, kind, says) in [
        (r.multiplier(1.0), K::OutOfRange, "multiplier(1.0)"),
        (r.multiplier(f64::NAN), K::NotANumber, "multiplier(NaN)"),
        (r.multiplier(1e4), K::TooLarge, "multiplier(10000.0)"),
        (r.max_rise_per_hour(0.9), K::OutOfRange, "max_rise_per_hour(0.9)"),
        (
            r.max_rise_per_hour(f64::INFINITY),
            K::TooLarge,
            "max_rise_per_hour(inf)",
        ),
        (r.ceiling(Duration::ZERO), K::Zero, "ceiling(0ns)"),
        (r.ceiling(Duration::from_secs(7200)), K::TooLarge, "ceiling(7200s)"),
        (r.floor(2 * SEC), K::Inconsistent, "floor(2s) is above ceiling(1s)"),
        (r.warmup(0), K::Zero, "warmup(0)"),
        (r.initial_baseline(Duration::ZERO), K::Zero, "initial_baseline(0ns)"),
    ] {
        let err = Breaker::builder()
            .ticker(false)
            .relative_latency(rule)
            .build()
            .unwrap_err();
        assert_eq!((err.field(), err.kind()), ("relative_latency", kind), "{err}");
        assert!(err.reason().contains(says), "{err}");
    }
    let err = Breaker::builder()
        .ticker(false)
        .recovery_ramp(Duration::ZERO)
        .build()
        .unwrap_err();
    assert_eq!((err.field(), err.kind()), ("recovery_ramp", K::Zero));
}

/// A span counted during a recovery ramp teaches nothing, even when the
/// ramp ended (at an admission) before the close that judges it: the ramp
/// admits a consumer still recovering.
#[test]
fn a_span_counted_in_a_recovery_ramp_teaches_nothing() {
    let clock = ManualClock::new();
    let b = relative(&clock, RelativeLatency::new().initial_baseline(2 * MS))
        .success_to_close(1)
        .recovery_ramp(5 * SEC)
        .build()
        .unwrap();
    let seeded = b.latency_baseline().unwrap();
    b.trip_now();
    next_window(&b, &clock); // t = 1 s: HALF_OPEN
    b.allow().unwrap().record_latency(MS, true); // into the ramp, until t = 6 s
    next_window(&b, &clock); // the span straddling the recovery: not judged
                             // 3 ms calls: healthy (under 4 ms) and above the baseline: learned,
                             // they would raise it. Three windows in the ramp, then one that ends
                             // with the ramp's end, at an admission.
    let calls = |b: &Breaker| {
        for _ in 0..1000 {
            if let Ok(p) = b.allow() {
                p.record_latency(3 * MS, true);
            }
        }
    };
    for _ in 0..3 {
        calls(&b);
        next_window(&b, &clock);
    }
    calls(&b);
    clock.advance(SEC); // t = 6 s
    calls(&b); // the first of these ends the ramp
    assert_eq!(b.snapshot().ramp, None);
    b.tick();
    assert_eq!(b.latency_baseline(), Some(seeded), "a ramp's spans are not learned");
    // Nor the next (it may hold verdicts of permits the ramp admitted);
    // the one after it is.
    calls(&b);
    next_window(&b, &clock);
    assert_eq!(b.latency_baseline(), Some(seeded), "the span after the ramp's end");
    calls(&b);
    next_window(&b, &clock);
    assert!(b.latency_baseline().unwrap() > seeded);
}

/// A reset drains the window in progress into the totals as a close would
/// count it: its slow calls are those slower than the window's (relative)
/// threshold. And a ramp that ended before a reset does not keep the span
/// after the reset from being learned.
///
/// Regression (issue 18's reference model: both found by the property test).
#[test]
fn a_reset_counts_and_forgets_as_a_close_would() {
    let clock = ManualClock::new();
    let b = relative(&clock, RelativeLatency::new().initial_baseline(2 * MS))
        .build()
        .unwrap();
    for _ in 0..10 {
        b.allow().unwrap().record_latency(10 * MS, true); // over 4 ms
    }
    b.reset();
    assert_eq!(b.snapshot().totals.slow, 10);

    let r = relative(&clock, RelativeLatency::new().warmup(1))
        .success_to_close(1)
        .recovery_ramp(SEC / 2)
        .build()
        .unwrap();
    r.trip_now();
    next_window(&r, &clock);
    r.allow().unwrap().record_latency(MS, true); // into the ramp
    next_window(&r, &clock);
    r.allow().ok(); // past the ramp's end: this ends it
    assert_eq!(r.snapshot().ramp, None);
    r.reset();
    for _ in 0..1000 {
        r.allow().unwrap().record_latency(3 * MS, true);
    }
    next_window(&r, &clock);
    assert!(r.latency_baseline().is_some(), "the span after the reset is learned");
}
