//! Probe leases: a leaked probe is reclaimed after its lease, which starts at
//! its own admission; an answered probe gives its lease back.

use crate::support::hook::HookClock;
use crate::support::*;
use std::sync::{Arc, Mutex};
use tailguard::clock::ManualClock;
use tailguard::{Breaker, Reason, RejectReason, State};

#[test]
fn a_leaked_probe_is_reclaimed_after_the_lease() {
    let clock = ManualClock::new();
    let (seen, listener) = recorder();
    let b = builder(&clock)
        .probe_lease(2 * SEC)
        .on_transition(listener)
        .build()
        .unwrap();
    b.trip_now();
    clock.advance(SEC);
    std::mem::forget(b.allow().unwrap());
    clock.advance(2 * SEC - MS);
    assert_eq!(b.allow().unwrap_err().reason(), RejectReason::ProbesBusy);
    clock.advance(MS);
    // The slot is reclaimed: the unanswered probe counts as slow and the
    // breaker re-opens with the next backoff, then probes again.
    assert_eq!(b.allow().unwrap_err().retry_after(), Some(2 * SEC));
    b.tick(); // delivers the transition `allow` queued
    assert_eq!(seen.lock().unwrap().last().unwrap().reason, Reason::ProbeLeaseExpired);
    clock.advance(2 * SEC);
    assert!(b.allow().unwrap().is_probe());
}

#[test]
fn the_ticker_path_reclaims_a_leaked_probe_too() {
    let clock = ManualClock::new();
    let b = builder(&clock).probe_lease(2 * SEC).build().unwrap();
    b.trip_now();
    clock.advance(SEC);
    std::mem::forget(b.allow().unwrap());
    clock.advance(2 * SEC);
    b.tick();
    assert_eq!(b.state(), State::Open);
}

/// Probe A holds the only slot; caller C loads the state word (every slot
/// taken); at C's clock read A is dropped, and C's CAS takes the freed slot.
/// C's lease must start at C's admission, not at A's.
///
/// Regression (issue 8's hostile review, finding 1).
#[test]
fn f01_a_probe_admitted_from_a_stale_word_gets_its_own_lease() {
    let clock = HookClock::new();
    let b = leak(
        Breaker::builder()
            .clock(clock.source())
            .ticker(false)
            .probe_lease(SEC)
            .success_to_close(1)
            .build()
            .unwrap(),
    );
    b.trip_now();
    clock.advance(SEC);
    let a: Parked = Arc::new(Mutex::new(Some(b.allow().unwrap())));
    assert!(a.lock().unwrap().as_ref().unwrap().is_probe());
    clock.advance(900 * MS); // A's lease runs to 2 s
    let held = Arc::clone(&a);
    clock.at_read(1, move || drop(held.lock().unwrap().take()));
    let c = b.allow().expect("C takes the slot A gave back");
    assert!(clock.fired() && a.lock().unwrap().is_none());
    assert!(c.is_probe());
    clock.advance(200 * MS); // 2.1 s: past A's lease, 0.2 s into C's
    b.tick();
    assert_eq!(
        b.state(),
        State::HalfOpen,
        "C was declared leaked 0.2 s after admission"
    );
    c.record_latency(MS, true);
    assert_eq!(b.state(), State::Closed, "C's good verdict was discarded");
}

/// Two probe slots, one probe leaked: its lease runs out like any other
/// (a probe out longer than its lease is slow), by tick or by `allow`.
///
/// Regression (issue 8's hostile review, finding 10).
#[test]
fn f10_a_leaked_probe_is_reclaimed_after_its_lease_with_several_slots() {
    for by_tick in [true, false] {
        let clock = ManualClock::new();
        let (seen, listener) = recorder();
        let b = builder(&clock)
            .half_open_probes(2)
            .probe_lease(SEC)
            .on_transition(listener)
            .build()
            .unwrap();
        b.trip_now();
        clock.advance(SEC);
        std::mem::forget(b.allow().unwrap());
        clock.advance(10 * SEC);
        if by_tick {
            b.tick();
        } else {
            assert_eq!(b.allow().unwrap_err().reason(), RejectReason::Open);
            b.tick();
        }
        assert_eq!(b.state(), State::Open, "by tick: {by_tick}");
        assert_eq!(seen.lock().unwrap().last().unwrap().reason, Reason::ProbeLeaseExpired);
    }
}

/// Promise (README "Where the API differs", `BreakerBuilder::probe_lease`,
/// issue-8 fix 1): a probe is re-opened on only when it has been out longer
/// than `probe_lease`; its lease starts at its own admission. And (clock
/// docs, `Breaker::tick`): a clock that steps back is tolerated.
///
/// A tick holds the breaker's time at the highest value it has seen, but a
/// probe admitted after the step back stamps its lease with the *unraised*
/// time. The very next tick compares the raised time with that stamp and
/// declares a probe that has been out for 0 ns leaked: ProbeLeaseExpired.
///
/// Regression (the adversarial review of issue 8's fixes, a01).
#[test]
fn a01_a_backward_clock_step_never_expires_a_probe_admitted_this_instant() {
    let clock = ManualClock::new();
    let (seen, listener) = recorder();
    let b = builder(&clock)
        .probe_lease(SEC)
        .on_transition(listener)
        .build()
        .unwrap();
    b.trip_now(); // OPEN, backoff 1 s
    clock.advance(10 * SEC);
    b.tick(); // the tick moves OPEN -> HALF_OPEN; breaker time seen: 10 s
    assert_eq!(b.state(), State::HalfOpen);
    clock.rewind(5 * SEC); // the clock steps back 5 s
    let probe = b.allow().expect("a free probe slot");
    assert!(probe.is_probe());
    b.tick(); // no time has passed on the clock since the probe was admitted
    let last = seen.lock().unwrap().last().map(|t| t.reason);
    assert_eq!(
        (b.state(), last),
        (State::HalfOpen, Some(Reason::BackoffElapsed)),
        "a probe admitted 0 ns before the tick was taken for leaked after a backward clock step"
    );
    probe.record_latency(MS, true);
}

/// Kills, in `src/breaker/admission.rs`, `Inner::release_lease` → `()`.
///
/// A probe that answered gives its lease entry back at once: the round
/// goes on (more good probes needed to close), and a quiet spell longer
/// than the lease before the next probe is no sign of a leaked probe.
/// The mutant leaves the answered probe's lease stamped, and the next
/// caller finds it "out" past its lease: the breaker re-opens
/// (`ProbeLeaseExpired`) though no probe is in flight.
///
/// Kills the mutants named above (the `cargo mutants` run on d617b3f).
#[test]
fn an_answered_probe_s_lease_is_given_back_so_a_quiet_spell_reopens_nothing() {
    let clock = ManualClock::new();
    let b = Breaker::builder()
        .clock(clock.clone())
        .ticker(false)
        .base_backoff(SEC)
        .half_open_probes(1)
        .success_to_close(2)
        .probe_lease(SEC)
        .build()
        .unwrap();
    b.trip_now();
    clock.advance(SEC);
    b.allow().unwrap().record_latency(MS, true); // probe 1 of 2: good
    clock.advance(10 * SEC); // nobody calls for ten leases
    let s = b.snapshot();
    assert_eq!(
        (s.state, s.probes_in_flight, s.probe_successes),
        (State::HalfOpen, 0, 1)
    );
    let probe = b.allow().expect("the second probe is admitted; nothing re-opened");
    probe.record_latency(MS, true);
    let s = b.snapshot();
    assert_eq!((s.state, s.trip_count), (State::Closed, 1), "{s:?}");
}
