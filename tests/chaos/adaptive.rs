//! The adaptive comparison (`examples/adaptive`) as tests: its claims, on
//! shortened runs cheap enough for a debug build, each scenario's as a list
//! of failures (which `adaptive_seeds` checks on whole reports over many
//! seeds).

use crate::adaptive_scenario::{
    self as adaptive, Condition, Fleet, Outcome, Ramp, Recovery, Report, Rule, Run, Setup, FAST_RAMP, K,
    MAX_RISE_PER_HOUR, QUOTES,
};
use std::time::Duration;
use tailguard::{Reason, RelativeLatency};

/// Runs `setups` on two threads.
fn run(setups: Vec<Setup>) -> Vec<Run> {
    adaptive::run_many(setups, 2, |_| {})
}

/// Every trigger of `run` accounted for: each emit ended once (delivered,
/// diverted, handed back), the emitter counted as many, what went into
/// the queue is replayed or still there, no call failed, and the
/// listeners saw every transition.
pub(crate) fn accounting(run: &Run) -> Vec<String> {
    let mut bad = Vec::new();
    for c in &run.consumers {
        let name = format!("{} {} {:?}", run.rule.name(), c.consumer.name, run.ramp);
        let p = c.phase(f64::NEG_INFINITY, f64::INFINITY);
        let s = &c.stats;
        if p.sent != c.emits.len() as u64 || s.emitted() != p.sent {
            bad.push(format!("{name}: {} emits, the emitter counted {}", p.sent, s.emitted()));
        }
        if p.sent != p.delivered + p.diverted() + p.handed_back {
            bad.push(format!("{name}: {p:?} does not add up"));
        }
        if c.emits.iter().any(|e| e.outcome == Outcome::Failed) || s.diverted_failed + s.diverted_timeout > 0 {
            bad.push(format!("{name}: a call failed or timed out"));
        }
        if s.into_queue() != s.out_of_queue() || s.into_queue() != s.replayed + s.queued as u64 + u64::from(s.pending) {
            bad.push(format!(
                "{name}: queue in {} out {} ({s:?})",
                s.into_queue(),
                s.out_of_queue()
            ));
        }
        if c.events_lost != 0 {
            bad.push(format!("{name}: the listener missed {} transitions", c.events_lost));
        }
    }
    bad
}

/// Scenario 1's and 2's claims on the fleet's two runs (absolute first).
pub(crate) fn fleet_claims(cfg: &Fleet, fleet: &[Run]) -> Vec<String> {
    let mut bad = Vec::new();
    let until = cfg.degraded.as_secs_f64();
    let [abs, rel] = fleet else {
        return vec![format!("{} fleet runs", fleet.len())];
    };
    let report = Report {
        seed: cfg.seed,
        fleet_cfg: *cfg,
        ramp_cfg: Ramp::standard(cfg.seed),
        recovery_cfg: Recovery::standard(cfg.seed),
        fleet: vec![abs.clone(), rel.clone()],
        ramps: Vec::new(),
        recovery: Vec::new(),
    };
    let rows = report.degraded_rows();
    let (a, r) = (&rows[0], &rows[1]);
    // 1: the 50 ms rule never sees quotes at 40 ms; its bulkhead does.
    if a.trip.is_some() || abs.consumers[0].trips().count() > 0 {
        bad.push(format!("absolute tripped quotes: {:?}", abs.consumers[0].changes));
    }
    if a.during.bulkhead * 5 < a.during.sent {
        bad.push(format!(
            "absolute: the bulkhead turned away only {} of {}",
            a.during.bulkhead, a.during.sent
        ));
    }
    if a.mean_in_flight < 12.0 || a.peak_in_flight < adaptive::BULKHEAD {
        bad.push(format!(
            "absolute: {:.1} calls in flight on average, {} at the most",
            a.mean_in_flight, a.peak_in_flight
        ));
    }
    if !(35.0..50.0).contains(&a.delivered_p99_ms) {
        bad.push(format!("absolute: delivered P99 {} ms", a.delivered_p99_ms));
    }
    // 1: the relative rule trips within three windows and holds it off:
    // from a second after its trip, nearly all diverted at once.
    match (r.trip, r.reason) {
        (Some(t), Some(Reason::RelativeLatency)) if t <= 4.0 => {
            let after = rel.consumers[0].phase(t + 1.0, until);
            let in_flight = after.busy_s / (until - t - 1.0);
            if in_flight > 1.0 || after.open * 10 < after.sent * 9 {
                bad.push(format!("relative after its trip: {in_flight:.2} in flight, {after:?}"));
            }
        }
        other => bad.push(format!("relative: quotes' trip {other:?}")),
    }
    if r.closed_again.map_or(true, |t| t < until) {
        bad.push(format!("relative: quotes closed again at {:?}", r.closed_again));
    }
    // 2: false trips.
    for h in report.healthy_rows() {
        let name = format!("{} {}", h.rule.name(), h.consumer.name);
        match (h.rule, h.consumer.name) {
            (Rule::Absolute, "settlement") => {
                if h.false_trips == 0 || h.diverted * 10 < h.sent * 9 {
                    bad.push(format!(
                        "{name}: {} false trips, {} of {} diverted",
                        h.false_trips, h.diverted, h.sent
                    ));
                }
            }
            // (Quotes under the 50 ms rule: its degradation's calls still
            // fill the bulkhead for a moment after it.)
            _ => {
                if h.false_trips > 0 || h.open_s > 0.0 || h.diverted * 1000 > h.sent {
                    bad.push(format!(
                        "{name}: {} false trips, open {} s, {} diverted",
                        h.false_trips, h.open_s, h.diverted
                    ));
                }
            }
        }
    }
    // Replay: everything diverted is back, except settlement's under the
    // absolute rule, which never closes.
    for run in fleet {
        for c in &run.consumers {
            let stuck = run.rule == Rule::Absolute && c.consumer.name == "settlement";
            if (c.stats.queued > 0) != stuck {
                bad.push(format!(
                    "{} {}: {} still queued",
                    run.rule.name(),
                    c.consumer.name,
                    c.stats.queued
                ));
            }
        }
        bad.extend(accounting(run));
    }
    bad
}

/// Scenario 3's claims on one ramp's run.
pub(crate) fn ramp_claims(per_hour: f64, run: &Run) -> Vec<String> {
    let mut bad = Vec::new();
    let c = &run.consumers[0];
    let trip = c.first_trip_from(0.0);
    let name = format!("{} {}", run.rule.name(), adaptive::ramp_name(per_hour));
    match (run.rule, adaptive::stated_bound_min(per_hour)) {
        (Rule::Absolute, _) | (Rule::Relative, None) => {
            if let Some(t) = trip {
                bad.push(format!("{name}: tripped at {:.1} min", t.t / 60.0));
            }
        }
        (Rule::Relative, Some(stated)) => {
            // About the stated bound: within what the sketch's buckets
            // allow either way, plus a minute (three windows, the pool's
            // ten).
            let (early, late) = (
                adaptive::early_bound_min(per_hour).unwrap(),
                adaptive::rounded_bound_min(per_hour).unwrap(),
            );
            match trip {
                Some(t)
                    if t.reason == Reason::RelativeLatency && (early - 1.0..=late + 1.0).contains(&(t.t / 60.0)) => {}
                other => bad.push(format!(
                    "{name}: trip {other:?}, stated {stated:.1} min, buckets {early:.1} - {late:.1}"
                )),
            }
        }
    }
    if run.rule == Rule::Relative && per_hour <= MAX_RISE_PER_HOUR {
        // Followed: the baseline rose with it.
        let start = c.samples.iter().find(|s| s.t >= 0.0).and_then(|s| s.baseline_ms);
        let end = c.samples.last().and_then(|s| s.baseline_ms);
        match (start, end) {
            (Some(a), Some(b)) if b >= a * per_hour * 0.9 => {}
            other => bad.push(format!("{name}: baseline from {other:?}")),
        }
    }
    bad.extend(accounting(run));
    bad
}

/// Scenario 4's claims on one rule's two runs (without, with the ramp).
pub(crate) fn recovery_claims(cfg: &Recovery, runs: &[Run]) -> Vec<String> {
    let mut bad = Vec::new();
    let report = Report {
        seed: cfg.seed,
        fleet_cfg: Fleet::standard(cfg.seed),
        ramp_cfg: Ramp::standard(cfg.seed),
        recovery_cfg: *cfg,
        fleet: Vec::new(),
        ramps: Vec::new(),
        recovery: runs.to_vec(),
    };
    let back = cfg.down.as_secs_f64();
    for row in report.recovery_rows() {
        let name = format!("{} {:?}", row.rule.name(), row.ramp);
        if row.trip.map_or(true, |t| t > 4.0) || row.first_close.map_or(true, |t| t < back) {
            bad.push(format!(
                "{name}: trip {:?}, first close {:?}",
                row.trip, row.first_close
            ));
        }
        match row.ramp {
            None => {
                if row.retrips < 3 || row.overloaded == 0 {
                    bad.push(format!(
                        "{name}: {} re-trips, {} calls beyond capacity",
                        row.retrips, row.overloaded
                    ));
                }
            }
            Some(ramp) => {
                if row.retrips > 0 || row.overloaded > 0 || row.ramping == 0 {
                    bad.push(format!(
                        "{name}: {} re-trips, {} beyond capacity, {} held back",
                        row.retrips, row.overloaded, row.ramping
                    ));
                }
                if row.closed_for_good != row.first_close
                    || row
                        .full_from
                        .zip(row.first_close)
                        .map_or(true, |(f, c)| (f - c - ramp.as_secs_f64()).abs() > 1e-9)
                {
                    bad.push(format!(
                        "{name}: closed {:?}, all from {:?}",
                        row.closed_for_good, row.full_from
                    ));
                }
            }
        }
        if row.queued != 0 || row.replayed != row.diverted || row.sent != row.delivered + row.diverted {
            bad.push(format!("{name}: {row:?}"));
        }
    }
    for run in runs {
        bad.extend(accounting(run));
    }
    bad
}

#[test]
fn the_scenario_s_constants_are_relative_latency_s_defaults() {
    let d = RelativeLatency::new();
    assert_eq!((d.multiplier, d.max_rise_per_hour), (K, MAX_RISE_PER_HOUR));
    assert_eq!(
        (d.floor, d.ceiling, d.warmup),
        (Duration::from_millis(1), Duration::from_secs(1), 5)
    );
    assert_eq!(d.initial_baseline, None);
    assert!((adaptive::BUCKET - 2f64.powf(1.0 / 8.0)).abs() < 1e-12);
    assert!((FAST_RAMP - 1.03f64.powi(60)).abs() < 1e-9);
    // The docs' figures: about 30 minutes at 3% a minute; the absolute rule
    // sees a 2 ms consumer reach 50 ms after 109.
    let stated = adaptive::stated_bound_min(FAST_RAMP).unwrap();
    assert!((30.0..31.0).contains(&stated), "{stated}");
    assert_eq!(adaptive::stated_bound_min(MAX_RISE_PER_HOUR), None);
    assert!((adaptive::absolute_crossing_min(FAST_RAMP) - 108.9).abs() < 0.05);
}

/// The consumers' latencies are exact (the `Timer`), not whole
/// milliseconds of tokio's timer: a healthy quotes answers in 0.5 to
/// 2.15 ms, its P99 is 2 ms, and the router's emit time is that latency.
#[test]
fn a_consumer_s_latency_is_exact_to_below_a_millisecond() {
    let setup = Setup {
        seed: 3,
        rule: Rule::Relative,
        ramp: None,
        consumers: vec![(QUOTES, Condition::Healthy)],
        warmup: Duration::from_secs(2),
        length: Duration::from_secs(8),
        sample_every: Duration::from_secs(1),
        replay: false,
    };
    let run = adaptive::run_paused(setup);
    let c = &run.consumers[0];
    assert_eq!(c.emits.len(), 10_000);
    assert!(c.emits.iter().all(|e| e.outcome == Outcome::Delivered));
    let whole = c.emits.iter().filter(|e| (e.ms - e.ms.round()).abs() < 1e-6).count();
    assert!(whole < 100, "{whole} of 10,000 emits took whole milliseconds");
    assert!(c.emits.iter().all(|e| (0.5 - 1e-6..=2.15 + 1e-6).contains(&e.ms)));
    let p99 = c.phase(-10.0, 10.0).p99_ms;
    assert!((1.95..=2.05).contains(&p99), "P99 {p99} ms");
    assert!((c.answered_p99(-10.0, 10.0) - p99).abs() < 1e-3);
    assert!(accounting(&run).is_empty(), "{:?}", accounting(&run));
}

/// Scenarios 1 and 2 on a shortened run (20 s of warmup: pricing and
/// settlement are still in the relative rule's warmup, judged by its 1 s
/// ceiling; a 10 s degradation; `adaptive_seeds` runs the whole one):
/// quotes x20 fills its bulkhead under the 50 ms rule and trips the
/// relative one in 3 s; the 50 ms rule trips the healthy 150 ms settlement.
#[test]
fn the_relative_rule_trips_a_fast_consumer_at_40_ms_the_absolute_one_trips_a_healthy_slow_one() {
    let cfg = Fleet {
        warmup: Duration::from_secs(20),
        degraded: Duration::from_secs(10),
        length: Duration::from_secs(40),
        ..Fleet::standard(42)
    };
    let runs = run(Rule::BOTH.iter().map(|&r| cfg.setup(r)).collect());
    let bad = fleet_claims(&cfg, &runs);
    assert!(bad.is_empty(), "{} failures:\n{}", bad.len(), bad.join("\n"));
}

/// Scenario 4 under the relative rule: without a recovery ramp quotes is
/// knocked over again, with one it is not.
#[test]
fn a_recovery_ramp_keeps_a_consumer_at_half_capacity_from_being_knocked_over() {
    let cfg = Recovery::standard(42);
    let runs = run(vec![cfg.setup(Rule::Relative, false), cfg.setup(Rule::Relative, true)]);
    let bad = recovery_claims(&cfg, &runs);
    assert!(bad.is_empty(), "{} failures:\n{}", bad.len(), bad.join("\n"));
}

/// Scenario 3's caught ramp under the relative rule, at 50 triggers a
/// second and for 40 minutes (the hour at 100 a second, both rules and both
/// ramps, is `adaptive_seeds`'): it trips about the docs' bound.
#[test]
fn a_3_percent_a_minute_ramp_is_caught_about_the_stated_bound() {
    let cfg = Ramp {
        rate: 50,
        length: Duration::from_secs(40 * 60),
        ..Ramp::standard(42)
    };
    let run = adaptive::run_paused(cfg.setup(Rule::Relative, FAST_RAMP));
    let bad = ramp_claims(FAST_RAMP, &run);
    assert!(bad.is_empty(), "{} failures:\n{}", bad.len(), bad.join("\n"));
}
