//! The chaos comparison (`examples/chaos`) as a test: the same scenario on
//! tokio's paused clock, its claims asserted, for twenty seeds (five in a
//! debug build). A few seconds of wall time in release.

use crate::scenario::{Config, Spike, Strategy};
use crate::{by, scenario};

#[test]
fn a_slow_not_failing_consumer_is_cut_off_by_latency_and_the_router_keeps_its_p99() {
    // Twenty seeds in release (`.ci/run`), five in a debug build.
    let seeds = if cfg!(debug_assertions) { 1..=5 } else { 1..=20 };
    for seed in seeds {
        let reports = scenario::run_all(Config::standard(seed), false, |_, _| {});
        let none = by(&reports, Strategy::NoBreaker);
        let errors = by(&reports, Strategy::ErrorOnly);
        let tg = by(&reports, Strategy::Tailguard);
        let [_, p99, _] = tg.router_outage_ms;
        assert!(
            p99 * 10.0 <= none.router_outage_ms[1],
            "seed {seed}: tailguard's router P99 {p99} ms not 10x below no breaker's {:?}",
            none.router_outage_ms
        );
        assert!(
            p99 <= 2.0 * tg.router_p99_ms_healthy,
            "seed {seed}: router P99 {p99} ms in the outage, {} ms healthy",
            tg.router_p99_ms_healthy
        );
        let trip = tg.trip_after_s.expect("the latency-primary breaker tripped");
        assert!(
            trip <= 3.0,
            "seed {seed}: tripped {trip} s into the outage: not within three windows"
        );
        if let Some(late) = errors.trip_after_s {
            assert!(
                trip < late,
                "seed {seed}: error-only tripped at {late} s, tailguard at {trip} s"
            );
        }
        let [_, compliance, _] = tg.consumer_p99_ms_outage;
        let healthy = tg.consumer_p99_ms_healthy[1];
        assert!(
            compliance <= 1.1 * healthy,
            "seed {seed}: compliance P99 {compliance} ms in the outage, {healthy} ms healthy"
        );
        assert_eq!(tg.lost, 0, "seed {seed}");
        assert_eq!(tg.handed_back, 0, "seed {seed}");
        assert!(tg.diverted > 0, "seed {seed}");
        assert_eq!(tg.replayed, tg.diverted, "seed {seed}: every diverted trigger replayed");
        assert_eq!(tg.still_queued, 0, "seed {seed}");
        assert_eq!(tg.sent, tg.delivered + tg.diverted, "seed {seed}");
        assert!(
            tg.close_after_recovery_s.is_some(),
            "seed {seed}: closed again after the recovery"
        );
    }
}

#[test]
fn an_error_spike_trips_the_latency_primary_breaker_on_errors_as_early_and_loses_nothing() {
    let cfg = Config {
        spike: Spike::Errors { error_percent: 60 },
        ..Config::standard(42)
    };
    let reports = scenario::run_all(cfg, false, |_, _| {});
    let errors = by(&reports, Strategy::ErrorOnly);
    let tg = by(&reports, Strategy::Tailguard);
    let late = errors
        .trip_after_s
        .expect("the error-only breaker tripped on 60% errors");
    let trip = tg.trip_after_s.expect("tailguard tripped on 60% errors");
    assert!(trip <= late, "tailguard at {trip} s, error-only at {late} s");
    assert!(
        errors.lost > 0,
        "the error-only breaker (no fallback) loses what it rejects"
    );
    assert_eq!((tg.lost, tg.handed_back, tg.still_queued), (0, 0, 0));
    assert_eq!(tg.replayed, tg.diverted);
    assert_eq!(tg.sent, tg.delivered + tg.diverted);
}
