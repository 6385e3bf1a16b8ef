//! Operator overrides and `reset`: each is one transition, one already in
//! force changes nothing, a reset of a CLOSED breaker clears what it counted.

use crate::support::*;
use std::time::Duration;
use tailguard::clock::ManualClock;
use tailguard::{Breaker, Mode, RejectReason, State};

#[test]
fn overrides_behave_and_each_is_one_transition() {
    let clock = ManualClock::new();
    let (seen, listener) = recorder();
    let b = builder(&clock).trip_windows(1).on_transition(listener).build().unwrap();

    b.force_open();
    assert_eq!((b.state(), b.mode()), (State::Open, Mode::ForcedOpen));
    assert_eq!(b.allow().unwrap_err().reason(), RejectReason::ForcedOpen);
    clock.advance(3600 * SEC);
    b.tick();
    assert_eq!(b.state(), State::Open, "forced open does not expire");

    b.force_closed();
    for _ in 0..5 {
        traffic(&b, 100, 100, 100);
        next_window(&b, &clock);
    }
    assert_eq!(b.state(), State::Closed, "forced closed never trips");
    assert_eq!(b.snapshot().window.slow, 100, "but it measures");

    b.disable();
    traffic(&b, 100, 100, 100);
    next_window(&b, &clock);
    assert_eq!(b.snapshot().window.calls, 0, "disabled measures nothing");

    b.metrics_only();
    next_window(&b, &clock); // the window the mode changed in is not judged
    traffic(&b, 100, 100, 0);
    next_window(&b, &clock);
    assert_eq!(b.state(), State::Open, "metrics-only still decides");
    for _ in 0..10 {
        b.allow().expect("metrics-only never rejects").record(true);
    }
    assert_eq!(b.snapshot().shadow_rejections, 10);

    b.reset();
    assert_eq!((b.state(), b.mode()), (State::Closed, Mode::Normal));
    let gens: Vec<u32> = seen.lock().unwrap().iter().map(|t| t.generation).collect();
    assert_eq!(gens, (1..=gens.len() as u32).collect::<Vec<_>>());
    assert_eq!(b.snapshot().generation as usize, gens.len());
}

/// An override to the mode already in force is not a transition: no event,
/// no new generation, and the window in progress is still judged.
///
/// Regression (issue 8's hostile review, finding 13).
#[test]
fn f13_an_override_already_in_force_changes_nothing() {
    let clock = ManualClock::new();
    let (seen, listener) = recorder();
    let b = builder(&clock).trip_windows(1).on_transition(listener).build().unwrap();
    b.reset();
    assert_eq!(b.snapshot().generation, 0);
    for op in [
        Breaker::disable,
        Breaker::metrics_only,
        Breaker::force_open,
        Breaker::force_closed,
        Breaker::reset,
    ] {
        op(&b);
        let gen = b.snapshot().generation;
        op(&b);
        assert_eq!(b.snapshot().generation, gen);
    }
    b.tick();
    assert_eq!(seen.lock().unwrap().len(), 5, "{:?}", seen.lock().unwrap());
    // A reset() of the normal CLOSED breaker in the middle of a breaching
    // window loses what was counted before it (issue 15, finding 12: as
    // resilience4j's, failsafe-rs's and Polly's resets do): not judged.
    next_window(&b, &clock);
    traffic(&b, 100, 10, 0);
    b.reset();
    next_window(&b, &clock);
    assert_eq!(b.state(), State::Closed);
    assert_eq!(b.snapshot().window.calls, 0);
    // What comes after it is judged as usual.
    traffic(&b, 100, 10, 0);
    next_window(&b, &clock);
    assert_eq!(b.state(), State::Open);
}

/// `reset()` on a CLOSED breaker loses the statistics, as resilience4j's,
/// failsafe-rs's and Polly's do: failures before it never add to failures
/// after it; and it is still no transition.
#[test]
fn reset_on_a_closed_breaker_clears_the_counts_and_is_no_transition() {
    let clock = ManualClock::new();
    let (seen, listener) = recorder();
    let b = builder(&clock)
        .failure_count(5, Duration::from_secs(30))
        .on_transition(listener)
        .build()
        .unwrap();
    // Failures counted over past windows, and in the window in progress.
    for _ in 0..2 {
        b.allow().unwrap().record_latency(MS, false);
    }
    next_window(&b, &clock);
    for _ in 0..2 {
        b.allow().unwrap().record_latency(MS, false);
    }
    let generation = b.snapshot().generation;
    b.reset();
    b.allow().unwrap().record_latency(MS, false);
    next_window(&b, &clock);
    assert_eq!(
        b.state(),
        State::Closed,
        "4 failures before the reset and 1 after: no trip"
    );
    let s = b.snapshot();
    assert_eq!((s.generation, s.window.errors), (generation, 1), "{s:?}");
    assert!(seen.lock().unwrap().is_empty(), "no transition event");
    // Then five failures do trip it.
    for _ in 0..4 {
        b.allow().unwrap().record_latency(MS, false);
    }
    next_window(&b, &clock);
    assert_eq!(b.state(), State::Open);
}

#[test]
fn reset_on_a_closed_breaker_clears_the_error_span_and_the_breach_streak() {
    let clock = ManualClock::new();
    let b = builder(&clock).trip_windows(2).build().unwrap();
    // A breaching window: one of the two needed.
    traffic(&b, 100, 10, 0);
    next_window(&b, &clock);
    assert_eq!(b.snapshot().consecutive_breaches, 1);
    b.reset();
    assert_eq!(b.snapshot().consecutive_breaches, 0);
    traffic(&b, 100, 10, 0);
    next_window(&b, &clock);
    assert_eq!(b.state(), State::Closed, "the streak restarted at the reset");
    b.reset();
    // The rolling error span (10 windows, 50%): 14 of 30 in a closed
    // window, 10 of 10 in the window in progress, then a reset, then 9 of
    // 20. Counted across the reset that is 33 of 60 (55%): a trip; after
    // it, 9 of 20 (45%).
    traffic(&b, 30, 0, 14);
    next_window(&b, &clock);
    traffic(&b, 10, 0, 10);
    b.reset();
    traffic(&b, 20, 0, 9);
    next_window(&b, &clock);
    let s = b.snapshot();
    assert_eq!(
        (s.state, s.window.calls, s.window.errors),
        (State::Closed, 20, 9),
        "{s:?}"
    );
}
