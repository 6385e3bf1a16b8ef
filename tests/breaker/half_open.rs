//! OPEN to HALF_OPEN and back: the first call after the backoff is the
//! probe, the probe limit, what good, slow, dropped and stale probes decide.

use crate::support::*;
use tailguard::clock::ManualClock;
use tailguard::{CancelPolicy, Reason, RejectReason, State};

#[test]
fn open_rejects_then_first_allow_after_backoff_is_the_probe() {
    let clock = ManualClock::new();
    let b = builder(&clock).build().unwrap();
    trip(&b, &clock);
    let r = b.allow().unwrap_err();
    assert_eq!(r.reason(), RejectReason::Open);
    assert_eq!(r.retry_after(), Some(SEC));
    clock.advance(999 * MS);
    assert_eq!(b.allow().unwrap_err().retry_after(), Some(MS));
    clock.advance(MS);
    // No tick needed: the caller is let through.
    let probe = b.allow().unwrap();
    assert!(probe.is_probe());
    assert_eq!(b.state(), State::HalfOpen);
    assert_eq!(b.allow().unwrap_err().reason(), RejectReason::ProbesBusy);
    drop(probe);
}

#[test]
fn tick_moves_open_to_half_open_without_callers() {
    let clock = ManualClock::new();
    let b = builder(&clock).build().unwrap();
    b.trip_now();
    clock.advance(SEC);
    b.tick();
    assert_eq!(b.state(), State::HalfOpen);
    assert_eq!(b.snapshot().probes_in_flight, 0);
    assert!(b.allow().unwrap().is_probe());
}

#[test]
fn five_good_probes_close_and_a_bad_one_reopens_with_the_next_backoff() {
    let clock = ManualClock::new();
    let b = builder(&clock).build().unwrap();
    trip(&b, &clock);
    clock.advance(SEC);
    for i in 0..4 {
        b.allow().unwrap().record_latency(8 * MS, true);
        assert_eq!(b.state(), State::HalfOpen);
        assert_eq!(b.snapshot().probe_successes, i + 1);
    }
    b.allow().unwrap().record_latency(8 * MS, false);
    assert_eq!(b.state(), State::Open);
    assert_eq!(b.allow().unwrap_err().retry_after(), Some(2 * SEC));
    clock.advance(2 * SEC);
    for _ in 0..5 {
        b.allow().unwrap().record_latency(8 * MS, true);
    }
    assert_eq!(b.state(), State::Closed);
}

#[test]
fn a_slow_probe_reopens() {
    let clock = ManualClock::new();
    let (seen, listener) = recorder();
    let b = builder(&clock).on_transition(listener).build().unwrap();
    b.trip_now();
    clock.advance(SEC);
    b.allow().unwrap().record_latency(51 * MS, true);
    assert_eq!(b.state(), State::Open);
    b.tick(); // the hot path queues its transitions; a tick delivers them
    assert_eq!(seen.lock().unwrap().last().unwrap().reason, Reason::ProbeSlow);
}

#[test]
fn half_open_admits_at_most_the_probe_limit() {
    let clock = ManualClock::new();
    let b = builder(&clock).half_open_probes(3).build().unwrap();
    b.trip_now();
    clock.advance(SEC);
    let probes: Vec<_> = (0..3).map(|_| b.allow().unwrap()).collect();
    for _ in 0..100 {
        assert_eq!(b.allow().unwrap_err().reason(), RejectReason::ProbesBusy);
    }
    assert_eq!(b.snapshot().probes_in_flight, 3);
    drop(probes);
}

#[test]
fn dropped_or_panicking_probes_return_their_slot() {
    let clock = ManualClock::new();
    let b = builder(&clock).build().unwrap();
    b.trip_now();
    clock.advance(SEC);
    for _ in 0..10 {
        let p = b.allow().unwrap();
        assert!(b.allow().is_err());
        drop(p); // cancelled future / early return
    }
    let b2 = b.clone();
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _p = b2.allow().unwrap();
        panic!("the call panicked");
    }));
    assert!(r.is_err());
    assert_eq!(b.state(), State::HalfOpen);
    assert_eq!(b.snapshot().probes_in_flight, 0);
    assert!(b.allow().unwrap().is_probe());
    clock.advance(SEC);
    b.tick();
    assert_eq!(b.snapshot().window.cancelled, 12);
}

#[test]
fn cancel_policy_failure_makes_a_dropped_probe_reopen() {
    let clock = ManualClock::new();
    let b = builder(&clock).on_cancel(CancelPolicy::Failure).build().unwrap();
    b.trip_now();
    clock.advance(SEC);
    drop(b.allow().unwrap());
    assert_eq!(b.state(), State::Open);
    // And a dropped ordinary permit counts as an error.
    b.reset();
    drop(b.allow().unwrap());
    next_window(&b, &clock);
    let w = b.snapshot().window;
    // The failed probe and the dropped permit: both counted as failed calls.
    assert_eq!((w.calls, w.errors, w.cancelled), (2, 2, 0));
}

#[test]
fn a_call_admitted_while_closed_never_decides_half_open() {
    let clock = ManualClock::new();
    let b = builder(&clock).success_to_close(1).build().unwrap();
    let old_ok = b.allow().unwrap();
    let old_bad = b.allow().unwrap();
    b.trip_now();
    clock.advance(SEC);
    let probe = b.allow().unwrap();
    old_bad.record(false); // a failure from CLOSED: must not re-open
    assert_eq!(b.state(), State::HalfOpen);
    old_ok.record(true); // a success from CLOSED: must not close
    assert_eq!(b.state(), State::HalfOpen);
    assert_eq!(b.snapshot().probes_in_flight, 1);
    probe.record_latency(MS, true);
    assert_eq!(b.state(), State::Closed);
}

#[test]
fn a_probe_from_an_earlier_generation_decides_nothing() {
    let clock = ManualClock::new();
    let b = builder(&clock).half_open_probes(2).success_to_close(1).build().unwrap();
    b.trip_now();
    clock.advance(SEC);
    let stale = b.allow().unwrap();
    b.allow().unwrap().record(false); // re-open: generation moves on
    clock.advance(2 * SEC);
    let current = b.allow().unwrap();
    let gen = b.snapshot().generation;
    stale.record(true);
    assert_eq!(b.state(), State::HalfOpen);
    assert_eq!(b.snapshot().generation, gen);
    assert_eq!(b.snapshot().probes_in_flight, 1);
    current.record_latency(MS, true);
    assert_eq!(b.state(), State::Closed);
}

/// 100 calls in flight at the trip; the consumer recovers through its
/// probes; the 100 old calls then fail into the first clean CLOSED window.
/// They are from an earlier generation: they must not trip it.
///
/// Regression (issue 8's hostile review, finding 6).
#[test]
fn f06_calls_admitted_before_a_trip_never_judge_the_recovered_consumer() {
    let clock = ManualClock::new();
    let b = builder(&clock).build().unwrap();
    let old: Vec<_> = (0..100).map(|_| b.allow().unwrap()).collect();
    b.trip_now();
    clock.advance(SEC);
    for _ in 0..5 {
        b.allow().unwrap().record_latency(MS, true);
    }
    assert_eq!(b.state(), State::Closed);
    next_window(&b, &clock); // the window of the recovery itself is not judged
    traffic(&b, 20, 0, 0);
    for p in old {
        p.record(false);
    }
    next_window(&b, &clock);
    let s = b.snapshot();
    assert_eq!(s.state, State::Closed, "pre-trip calls tripped the recovered consumer");
    assert_eq!((s.window.calls, s.window.errors), (20, 0));
}
