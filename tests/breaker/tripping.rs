//! Tripping on dense traffic: the latency quantile rule, the error-rate
//! rule over its rolling span, and the reference scenario end to end.

use crate::support::*;
use std::time::Duration;
use tailguard::clock::ManualClock;
use tailguard::{Reason, State};

#[test]
fn latency_trips_after_three_consecutive_breach_windows() {
    let clock = ManualClock::new();
    let b = builder(&clock).build().unwrap();
    for n in 1..=2 {
        traffic(&b, 100, 2, 0); // 2% slow: P99 = 900 ms
        next_window(&b, &clock);
        assert_eq!(b.state(), State::Closed);
        assert_eq!(b.snapshot().consecutive_breaches, n);
    }
    traffic(&b, 100, 2, 0);
    next_window(&b, &clock);
    assert_eq!(b.state(), State::Open);
    assert_eq!(b.snapshot().trip_count, 1);
}

#[test]
fn exactly_one_percent_slow_is_not_a_breach() {
    // P99 > T  <=>  more than 1% slower than T: exactly 1% is not.
    let clock = ManualClock::new();
    let b = builder(&clock).trip_windows(1).build().unwrap();
    traffic(&b, 100, 1, 0);
    next_window(&b, &clock);
    assert_eq!(b.state(), State::Closed);
    traffic(&b, 100, 2, 0);
    next_window(&b, &clock);
    assert_eq!(b.state(), State::Open);
}

/// "P_q above T" is "more than (1 − q) of the calls slower than T", decided
/// exactly: at the limit no breach, one slow call more a breach.
///
/// Regression (issue 8's hostile review, finding 9).
#[test]
#[cfg_attr(
    miri,
    ignore = "tens of thousands of calls; the rule itself is tested in src/trip.rs under Miri"
)]
fn f09_the_quantile_rule_is_exact_at_every_quantile() {
    for (q, calls, at_limit) in [
        (0.9, 20, 2),
        (0.8, 20, 4),
        (0.99, 100, 1),
        (0.999, 1000, 1),
        (0.9999, 10_000, 1),
        (0.5, 20, 10),
        (0.7, 10, 3),
    ] {
        for (slow, breach) in [(at_limit, false), (at_limit + 1, true)] {
            let clock = ManualClock::new();
            let b = builder(&clock)
                .quantile(q)
                .trip_windows(1)
                .min_calls(1)
                .build()
                .unwrap();
            traffic(&b, calls, slow, 0);
            next_window(&b, &clock);
            let state = if breach { State::Open } else { State::Closed };
            assert_eq!(b.state(), state, "quantile {q}: {slow} slow of {calls}");
        }
    }
}

/// `record_latency(Duration::MAX)`: a slow call, counted once, no overflow;
/// and a probe recorded that way re-opens as slow.
///
/// From issue 10's adversarial inputs.
#[test]
fn a_latency_of_duration_max_is_a_slow_call() {
    let (clock, builder) = manual();
    let b = builder.trip_windows(1).min_calls(1).build().unwrap();
    b.allow().unwrap().record_latency(Duration::MAX, true);
    clock.advance(SEC);
    b.tick();
    let w = b.snapshot().window;
    assert_eq!((w.calls, w.slow), (1, 1));
    assert_eq!(b.state(), State::Open);
    clock.advance(SEC);
    b.allow().unwrap().record_latency(Duration::MAX, true);
    assert_eq!(b.state(), State::Open, "a probe of Duration::MAX is slow");
    let q = w.latency.expect("quantiles of one call");
    assert!(q.p999 >= Duration::from_secs(60), "{q:?}");
}

#[test]
fn error_rate_trips_over_the_rolling_window() {
    let clock = ManualClock::new();
    let b = builder(&clock)
        .error_rate(0.5)
        .error_window(3 * SEC)
        .min_calls(20)
        .build()
        .unwrap();
    // 10 calls a window, 60% failed: no single window reaches min_calls, the rolling span does.
    traffic(&b, 10, 0, 6);
    next_window(&b, &clock);
    assert_eq!(b.state(), State::Closed);
    traffic(&b, 10, 0, 6);
    next_window(&b, &clock);
    assert_eq!(b.state(), State::Open);
}

#[test]
fn error_counts_are_windowed_so_old_failures_expire() {
    let clock = ManualClock::new();
    let make = || {
        builder(&clock)
            .error_rate(0.5)
            .error_window(3 * SEC)
            .min_calls(20)
            .build()
            .unwrap()
    };
    // 15 failures in a quiet window (below min_calls), then a window of 20
    // calls with 6 failures: 21 of 35 in the rolling span, 60%: trips.
    let b = make();
    traffic(&b, 15, 0, 15);
    next_window(&b, &clock);
    traffic(&b, 20, 0, 6);
    next_window(&b, &clock);
    assert_eq!(b.state(), State::Open);
    // The same, with three quiet windows between: the old failures have
    // left the span (a never-windowed count, 21 of 41, would trip).
    let b = make();
    traffic(&b, 15, 0, 15);
    next_window(&b, &clock);
    for _ in 0..3 {
        traffic(&b, 2, 0, 0);
        next_window(&b, &clock);
    }
    traffic(&b, 20, 0, 6);
    next_window(&b, &clock);
    assert_eq!(b.state(), State::Closed);
}

#[test]
fn classic_count_configuration_five_failures_in_30s_with_15s_recovery() {
    let clock = ManualClock::new();
    let (seen, listener) = recorder();
    let b = builder(&clock)
        .failure_count(5, 30 * SEC)
        .error_rate(1.0)
        .base_backoff(15 * SEC)
        .max_backoff(15 * SEC)
        .success_to_close(1)
        .on_transition(listener)
        .build()
        .unwrap();
    // Four failures spread over 20 s among successes: stays closed.
    for _ in 0..4 {
        traffic(&b, 3, 0, 1);
        for _ in 0..5 {
            next_window(&b, &clock);
        }
    }
    assert_eq!(b.state(), State::Closed);
    // A fifth within the same 30 s: open at the close of that window.
    traffic(&b, 1, 0, 1);
    next_window(&b, &clock);
    assert_eq!(b.state(), State::Open);
    assert_eq!(seen.lock().unwrap().last().unwrap().reason, Reason::FailureCount);
    // 15 s recovery, then one good probe closes.
    assert_eq!(b.allow().unwrap_err().retry_after(), Some(15 * SEC));
    clock.advance(15 * SEC - MS);
    assert!(b.allow().is_err());
    clock.advance(MS);
    let probe = b.allow().unwrap();
    assert!(probe.is_probe());
    probe.record_latency(MS, true);
    assert_eq!(b.state(), State::Closed);

    // Five failures spread over more than 30 s never trip.
    let b = builder(&clock)
        .failure_count(5, 30 * SEC)
        .error_rate(1.0)
        .build()
        .unwrap();
    for _ in 0..10 {
        traffic(&b, 1, 0, 1);
        for _ in 0..8 {
            next_window(&b, &clock);
        }
    }
    assert_eq!(b.state(), State::Closed);
}

/// The write-up's scenario: a consumer at 8 ms P99 spikes to 900 ms at t=0
/// and recovers at t=30 s; 200 calls a second.
#[test]
#[cfg_attr(miri, ignore = "tens of thousands of calls; minutes under Miri")]
fn reference_scenario_trips_in_three_windows_and_recovers_without_flapping() {
    let clock = ManualClock::new();
    let (seen, listener) = recorder();
    let b = builder(&clock).on_transition(listener).build().unwrap();
    let mut open_at = None;
    let mut closed_at = None;
    let mut diverted = 0u64;
    // 10 ms steps for 90 s; one call every 5 ms.
    for step in 0..9_000u64 {
        let t = Duration::from_millis(step * 10);
        let sick = t < 30 * SEC;
        for _ in 0..2 {
            match b.allow() {
                Ok(p) => {
                    let latency = if sick { 900 * MS } else { 8 * MS };
                    p.record_latency(latency, true);
                }
                Err(_) => diverted += 1,
            }
        }
        clock.advance(10 * MS);
        b.tick();
        if open_at.is_none() && b.state() == State::Open {
            open_at = Some(clock.now());
        }
        if !sick && closed_at.is_none() && b.state() == State::Closed {
            closed_at = Some(clock.now());
        }
    }
    assert!(
        open_at.unwrap() <= 3 * SEC,
        "open by the end of the third window: {open_at:?}"
    );
    let closed_at = closed_at.expect("recovered");
    // One max backoff (30 s) plus five probes after recovery at 30 s.
    assert!(
        closed_at <= 30 * SEC + 30 * SEC + 5 * 10 * MS,
        "closed at {closed_at:?}"
    );
    assert_eq!(b.state(), State::Closed);
    let seen = seen.lock().unwrap();
    let after_close: Vec<_> = seen.iter().filter(|t| t.at > closed_at).collect();
    assert!(after_close.is_empty(), "no flapping after recovery: {after_close:?}");
    let trips = seen.iter().filter(|t| t.to == State::Open).count();
    assert_eq!(trips as u64, b.snapshot().trip_count);
    assert!(diverted > 0);
}
