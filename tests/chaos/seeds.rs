//! Hostile checks of the chaos comparison (`examples/chaos`): its figures
//! and the claims of the README's "The demonstration" section, over many
//! seeds. Release builds only (a few hundred scenario runs; `.ci/run` runs
//! it): `cargo test --release --features tokio --test chaos seeds`.

use crate::scenario::{Config, Report, Spike, Strategy};
use crate::{by, scenario};
use tailguard::State;

/// The assertions of `tests/chaos/claims.rs`, returned as a list of failures
/// rather than panicking at the first.
fn chaos_rs_claims(seed: u64, reports: &[Report]) -> Vec<String> {
    let mut bad = Vec::new();
    let none = by(reports, Strategy::NoBreaker);
    let errors = by(reports, Strategy::ErrorOnly);
    let tg = by(reports, Strategy::Tailguard);
    let [_, p99, _] = tg.router_outage_ms;
    if p99 * 10.0 > none.router_outage_ms[1] {
        bad.push(format!(
            "seed {seed}: router P99 {p99} not 10x below {:?}",
            none.router_outage_ms
        ));
    }
    if p99 > 2.0 * tg.router_p99_ms_healthy {
        bad.push(format!(
            "seed {seed}: router P99 {p99} > 2 x healthy {}",
            tg.router_p99_ms_healthy
        ));
    }
    match tg.trip_after_s {
        None => bad.push(format!("seed {seed}: tailguard never tripped")),
        Some(trip) => {
            if trip > 3.0 {
                bad.push(format!("seed {seed}: tripped at {trip} s"));
            }
            if let Some(late) = errors.trip_after_s {
                if trip >= late {
                    bad.push(format!("seed {seed}: error-only {late} s, tailguard {trip} s"));
                }
            }
        }
    }
    let compliance = tg.consumer_p99_ms_outage[1];
    let healthy = tg.consumer_p99_ms_healthy[1];
    if compliance > 1.1 * healthy {
        bad.push(format!(
            "seed {seed}: compliance P99 {compliance} outage vs {healthy} healthy"
        ));
    }
    if tg.lost != 0 || tg.handed_back != 0 || tg.diverted == 0 || tg.still_queued != 0 {
        bad.push(format!(
            "seed {seed}: lost {} handed back {} diverted {} still queued {}",
            tg.lost, tg.handed_back, tg.diverted, tg.still_queued
        ));
    }
    if tg.replayed != tg.diverted {
        bad.push(format!(
            "seed {seed}: replayed {} != diverted {}",
            tg.replayed, tg.diverted
        ));
    }
    if tg.sent != tg.delivered + tg.diverted {
        bad.push(format!(
            "seed {seed}: sent {} != delivered {} + diverted {}",
            tg.sent, tg.delivered, tg.diverted
        ));
    }
    if tg.close_after_recovery_s.is_none() {
        bad.push(format!("seed {seed}: never closed again"));
    }
    bad
}

/// The state changes of tailguard's pricing breaker, from the timeline.
fn transitions(r: &Report) -> Vec<(f64, State)> {
    let mut out = Vec::new();
    let mut last = None;
    for (i, s) in r.timeline_state.iter().enumerate() {
        if last != Some(*s) {
            out.push((i as f64 * 0.1 - 10.0, *s));
            last = Some(*s);
        }
    }
    out
}

/// `tests/chaos/claims.rs` checks seeds 42 and 7; its claims should not depend on
/// the draw.
#[test]
fn the_chaos_test_claims_hold_for_seeds_1_to_20() {
    let mut bad = Vec::new();
    for seed in 1..=20 {
        let reports = scenario::run_all(Config::standard(seed), false, |_, _| {});
        let tg = by(&reports, Strategy::Tailguard);
        eprintln!(
            "seed {seed:>2}: tg router {:?} healthy {} trip {:?} close {:?} sent {} delivered {} diverted {} replayed {} hb {} lost {} queued {} | transitions {:?}",
            tg.router_outage_ms,
            tg.router_p99_ms_healthy,
            tg.trip_after_s,
            tg.close_after_recovery_s,
            tg.sent,
            tg.delivered,
            tg.diverted,
            tg.replayed,
            tg.handed_back,
            tg.lost,
            tg.still_queued,
            transitions(tg)
        );
        bad.extend(chaos_rs_claims(seed, &reports));
    }
    assert!(bad.is_empty(), "{} failures:\n{}", bad.len(), bad.join("\n"));
}

/// README: "The error-only breaker never trips: pricing is slow, not
/// failing"; "A timeout ... loses those triggers"; no breaker: "compliance
/// and dispatch inherit pricing's outage".
#[test]
fn the_readme_claims_on_the_other_strategies_hold_for_seeds_1_to_20() {
    let mut bad = Vec::new();
    for seed in 1..=20 {
        let reports = scenario::run_all(Config::standard(seed), false, |_, _| {});
        let errors = by(&reports, Strategy::ErrorOnly);
        let timeout = by(&reports, Strategy::TimeoutOnly);
        let none = by(&reports, Strategy::NoBreaker);
        if errors.trip_after_s.is_some() {
            bad.push(format!("seed {seed}: error-only tripped at {:?}", errors.trip_after_s));
        }
        if timeout.lost == 0 {
            bad.push(format!("seed {seed}: timeout lost nothing"));
        }
        if none.consumer_p99_ms_outage[1] < 1000.0 {
            bad.push(format!(
                "seed {seed}: no breaker compliance P99 {}",
                none.consumer_p99_ms_outage[1]
            ));
        }
    }
    assert!(bad.is_empty(), "{} failures:\n{}", bad.len(), bad.join("\n"));
}

/// Every trigger sent ends in exactly one of delivered, diverted, lost
/// (or handed back straight from an emit) under every strategy.
#[test]
fn every_strategy_accounts_for_every_trigger() {
    for spike in [Spike::Latency { slow_percent: 10 }, Spike::Errors { error_percent: 60 }] {
        let cfg = Config {
            spike,
            ..Config::standard(42)
        };
        for r in scenario::run_all(cfg, false, |_, _| {}) {
            assert_eq!(r.sent, 18_000, "{spike:?} {}", r.strategy.name());
            assert!(
                r.sent == r.delivered + r.diverted + r.lost
                    || r.sent == r.delivered + r.diverted + r.lost + r.handed_back,
                "{spike:?} {}: sent {} delivered {} diverted {} lost {} handed back {}",
                r.strategy.name(),
                r.sent,
                r.delivered,
                r.diverted,
                r.lost,
                r.handed_back
            );
            if r.strategy != Strategy::Tailguard {
                assert_eq!((r.diverted, r.replayed, r.still_queued), (0, 0, 0));
            }
        }
    }
}

/// The same seed gives the same figures, to the last field.
#[test]
fn a_seed_gives_the_same_report_twice() {
    let a = scenario::run_all(Config::standard(42), false, |_, _| {});
    let b = scenario::run_all(Config::standard(42), false, |_, _| {});
    assert_eq!(format!("{a:?}"), format!("{b:?}"));
}

fn tailguard_only(cfg: Config) -> Report {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap()
        .block_on(scenario::run_strategy(Strategy::Tailguard, cfg, |_, _| {}))
}

/// README: tailguard "keeps the router's P99 at its healthy 8 ms" and
/// "replays every diverted trigger once pricing is back"; the breaker
/// stays open through the outage. A survey over seeds 1..=200.
#[test]
fn survey_tailguard_over_200_seeds() {
    let (mut above_healthy, mut at_timeout, mut closed_in_outage, mut close_zero) = (vec![], vec![], vec![], vec![]);
    for seed in 1..=200 {
        let tg = tailguard_only(Config::standard(seed));
        let p99 = tg.router_outage_ms[1];
        if p99 > tg.router_p99_ms_healthy {
            above_healthy.push((seed, p99));
        }
        if p99 >= 200.0 {
            at_timeout.push(seed);
        }
        // timeline_state[i] is the state at t = i * 0.1 - 10 s; the outage
        // after the trip: t in [3, 30) s -> i in [130, 400).
        if tg.timeline_state[130..400].contains(&State::Closed) {
            closed_in_outage.push(seed);
        }
        if tg.close_after_recovery_s == Some(0.0) {
            close_zero.push(seed);
        }
    }
    eprintln!(
        "router P99 above healthy: {} seeds {above_healthy:?}",
        above_healthy.len()
    );
    eprintln!(
        "router P99 at the 200 ms timeout: {} seeds {at_timeout:?}",
        at_timeout.len()
    );
    eprintln!(
        "breaker CLOSED during the outage (after 3 s): {} seeds {closed_in_outage:?}",
        closed_in_outage.len()
    );
    eprintln!("close_after_recovery_s == 0.0: {close_zero:?}");
    assert!(at_timeout.is_empty() && closed_in_outage.is_empty());
}

/// `tests/chaos/claims.rs` checks the error spike for seed 42 only.
#[test]
fn the_error_spike_claims_hold_for_seeds_1_to_20() {
    let mut bad = Vec::new();
    for seed in 1..=20 {
        let cfg = Config {
            spike: Spike::Errors { error_percent: 60 },
            ..Config::standard(seed)
        };
        let reports = scenario::run_all(cfg, false, |_, _| {});
        let errors = by(&reports, Strategy::ErrorOnly);
        let tg = by(&reports, Strategy::Tailguard);
        match (errors.trip_after_s, tg.trip_after_s) {
            (Some(late), Some(trip)) if trip <= late => {}
            other => bad.push(format!("seed {seed}: (error-only, tailguard) trips {other:?}")),
        }
        if errors.lost == 0 {
            bad.push(format!("seed {seed}: error-only lost nothing"));
        }
        if (tg.lost, tg.handed_back, tg.still_queued) != (0, 0, 0)
            || tg.replayed != tg.diverted
            || tg.sent != tg.delivered + tg.diverted
        {
            bad.push(format!(
                "seed {seed}: lost {} hb {} queued {} replayed {} diverted {} sent {} delivered {}",
                tg.lost, tg.handed_back, tg.still_queued, tg.replayed, tg.diverted, tg.sent, tg.delivered
            ));
        }
    }
    assert!(bad.is_empty(), "{} failures:\n{}", bad.len(), bad.join("\n"));
}

/// An outage of 240 s overflows pricing's queue (16,384 places): the
/// emitter hands triggers back to the router, and every trigger is
/// accounted for: delivered, diverted or handed back, none dropped.
#[test]
fn a_long_outage_hands_triggers_back_and_accounts_for_every_one() {
    let cfg = Config {
        outage: std::time::Duration::from_secs(240),
        ..Config::standard(42)
    };
    let tg = tailguard_only(cfg);
    assert!(tg.handed_back > 0, "the queue overflowed: {tg:?}");
    assert_eq!(tg.lost, 0);
    assert_eq!(tg.sent, tg.delivered + tg.diverted + tg.handed_back, "{tg:?}");
    assert_eq!(tg.diverted, tg.replayed + tg.still_queued, "{tg:?}");
}

/// README: "close" is "Seconds from the outage's end to pricing's breaker
/// closed for good". Seed 33: the breaker closed for good *during* the
/// outage (pricing still sick), and the figure reads "0.0 s" after the
/// recovery.
#[test]
fn close_after_recovery_is_not_clamped_when_the_breaker_closed_during_the_outage() {
    let tg = tailguard_only(Config::standard(33));
    let t = transitions(&tg);
    eprintln!(
        "seed 33 transitions {t:?}, close_after_recovery_s {:?}",
        tg.close_after_recovery_s
    );
    let (last_change, last_state) = *t.last().unwrap();
    assert_eq!(last_state, State::Closed);
    assert!(
        last_change >= 30.0,
        "the breaker closed for good at t = {last_change:.1} s, inside the 30 s outage, \
         yet close_after_recovery_s = {:?}",
        tg.close_after_recovery_s
    );
}
