//! Hostile checks of the adaptive comparison (`examples/adaptive`): every
//! claim of its report, over many seeds, and its determinism. Release
//! builds only (`.ci/run` runs them):
//! `cargo test --release --features tokio --test chaos adaptive_seeds`.

use crate::adaptive::{fleet_claims, ramp_claims, recovery_claims};
use crate::adaptive_scenario::{self as adaptive, Fleet, Recovery, Report, Rule, Run};

/// Every claim of a report (`tests/chaos/adaptive.rs`), as a list of
/// failures.
pub(crate) fn report_claims(r: &Report) -> Vec<String> {
    let mut bad = fleet_claims(&r.fleet_cfg, &r.fleet);
    for (per_hour, run) in &r.ramps {
        bad.extend(ramp_claims(*per_hour, run));
    }
    for rule in Rule::BOTH {
        let runs: Vec<Run> = r.recovery.iter().filter(|x| x.rule == rule).cloned().collect();
        bad.extend(recovery_claims(&r.recovery_cfg, &runs));
    }
    bad.into_iter().map(|b| format!("seed {}: {b}", r.seed)).collect()
}

/// Seeds of the whole comparison (ten runs each, about 4 s of one core).
const SEEDS: std::ops::RangeInclusive<u64> = 1..=8;

/// The example's claims (`report_claims`) for seeds 1 to 8: every
/// scenario, both rules, the ramps' trips against the stated bound. Prints
/// each seed's figures.
#[test]
fn the_adaptive_claims_hold_for_seeds_1_to_8() {
    let mut bad = Vec::new();
    for seed in SEEDS {
        let r = adaptive::run_all(seed, |_| {});
        let degraded = r.degraded_rows();
        let ramps = r.ramp_rows();
        let recovery = r.recovery_rows();
        eprintln!(
            "seed {seed}: quotes x20: absolute bulkhead {} in flight {:.1}, relative trip {:?}; settlement absolute false trips {:?}; \
             ramp trips (min) {:?}; recovery re-trips {:?}",
            degraded[0].during.bulkhead,
            degraded[0].mean_in_flight,
            degraded[1].trip,
            r.healthy_rows()
                .iter()
                .find(|h| h.rule == Rule::Absolute && h.consumer.name == "settlement")
                .map(|h| h.false_trips),
            ramps.iter().map(|x| x.trip_min).collect::<Vec<_>>(),
            recovery.iter().map(|x| x.retrips).collect::<Vec<_>>()
        );
        bad.extend(report_claims(&r));
    }
    assert!(bad.is_empty(), "{} failures:\n{}", bad.len(), bad.join("\n"));
}

/// The same seed gives the same figures, to the last field (the fleet's
/// and the recovery's runs: every consumer, both rules, the ramp).
#[test]
fn a_seed_gives_the_same_figures_twice() {
    let once = || {
        let (fleet, recovery) = (Fleet::standard(42), Recovery::standard(42));
        let mut setups: Vec<_> = Rule::BOTH.iter().map(|&r| fleet.setup(r)).collect();
        setups.extend(
            Rule::BOTH
                .iter()
                .flat_map(|&r| [recovery.setup(r, false), recovery.setup(r, true)]),
        );
        let runs = adaptive::run_many(setups, 2, |_| {});
        runs.iter()
            .map(|run| {
                run.consumers
                    .iter()
                    .map(|c| format!("{:?} {:?} {:?} {:?}", c.emits, c.changes, c.served, c.stats))
                    .collect::<String>()
            })
            .collect::<Vec<_>>()
    };
    let (a, b) = (once(), once());
    assert_eq!(a.len(), b.len());
    for (i, (a, b)) in a.iter().zip(&b).enumerate() {
        assert!(a == b, "run {i} differs");
    }
}
