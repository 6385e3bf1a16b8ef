//! Unit tests of rules a caller of the public API cannot reach one at a
//! time: conditions that only a race produces (an OPEN whose deadline is
//! not published yet, a verdict of a round that is over, a deadline of a
//! later OPEN), set up here directly on the shared state. Each pins one
//! condition a mutation test found unguarded (issue 15).

use super::{Breaker, Inner};
use crate::clock::ManualClock;
use crate::report::{Mode, Reason, State};
use crate::state::{Decision, Word};
use crate::sync::Ordering;
use std::time::Duration;

const SEC: Duration = Duration::from_secs(1);

fn breaker() -> (Breaker, ManualClock) {
    let clock = ManualClock::new();
    let b = Breaker::builder().clock(clock.clone()).ticker(false).build().unwrap();
    (b, clock)
}

/// Stores `state` / `mode` as a transition, without anything that follows
/// one (no deadline published, no event): the instant between a
/// transition's CAS and its `note`.
fn bare_transition(inner: &Inner, state: State, mode: Mode) -> Word {
    let (_, stored, ()) = inner.state.update(|w| Decision::Set(w.transition(state, mode), ()));
    stored.unwrap()
}

#[test]
fn a_reopen_of_a_round_that_is_over_or_not_half_open_changes_nothing() {
    let (b, clock) = breaker();
    let inner = &*b.inner;
    b.trip_now();
    // OPEN: not a HALF_OPEN round, even with the current generation.
    let open = inner.state.load();
    assert!(!inner.reopen(inner.state.full_generation(open), Reason::ProbeLeaseExpired, 0));
    assert_eq!(inner.state.load(), open);
    // HALF_OPEN: a reopen of the round before it is not this round's.
    clock.advance(SEC);
    let probe = b.allow().unwrap();
    let half_open = inner.state.load();
    let round = inner.state.full_generation(half_open);
    assert!(!inner.reopen(round - 1, Reason::ProbeLeaseExpired, 0));
    assert_eq!(inner.state.load(), half_open);
    assert!(
        inner.reopen(round, Reason::ProbeLeaseExpired, 0),
        "its own round re-opens"
    );
    assert_eq!(b.state(), State::Open);
    drop(probe);
}

#[test]
fn leaving_open_withdraws_its_deadline_and_only_its_own() {
    let (b, clock) = breaker();
    let inner = &*b.inner;
    b.trip_now();
    let open = inner.state.load();
    assert_eq!(inner.deadline_gen.load(Ordering::Acquire), u64::from(open.generation()));
    // A `note` for another OPEN (say a stale one, 2^30 transitions back)
    // leaves this OPEN's deadline alone.
    let other = Word(open.0 ^ (1 << 40));
    inner.note(
        other,
        other.transition(State::HalfOpen, Mode::Normal),
        Reason::BackoffElapsed,
        0,
    );
    assert_eq!(inner.deadline_gen.load(Ordering::Acquire), u64::from(open.generation()));
    // Its own end withdraws it.
    clock.advance(SEC);
    b.tick();
    assert_eq!(b.state(), State::HalfOpen);
    assert_eq!(inner.deadline_gen.load(Ordering::Acquire), u64::MAX);
}

#[test]
fn half_open_if_due_moves_only_a_normal_open_whose_published_deadline_is_due() {
    // An OPEN whose deadline is not published yet (between the trip's CAS
    // and its note): not due, whatever the time.
    let (b, _) = breaker();
    let inner = &*b.inner;
    bare_transition(inner, State::Open, Mode::Normal);
    inner.half_open_if_due(u64::MAX / 2);
    assert_eq!(b.state(), State::Open);
    // Forced open, even with a deadline published for its generation.
    let (b, _) = breaker();
    let inner = &*b.inner;
    let forced = bare_transition(inner, State::Open, Mode::ForcedOpen);
    inner.deadline.store(0, Ordering::Relaxed);
    inner
        .deadline_gen
        .store(u64::from(forced.generation()), Ordering::Release);
    inner.half_open_if_due(u64::MAX / 2);
    assert_eq!((b.state(), b.mode()), (State::Open, Mode::ForcedOpen));
    // Not OPEN at all, with a deadline that would be due.
    let (b, _) = breaker();
    let inner = &*b.inner;
    let closed = bare_transition(inner, State::Closed, Mode::Normal);
    inner.deadline.store(0, Ordering::Relaxed);
    inner
        .deadline_gen
        .store(u64::from(closed.generation()), Ordering::Release);
    inner.half_open_if_due(u64::MAX / 2);
    assert_eq!(b.state(), State::Closed);
    // A normal OPEN: due at its deadline exactly, not a nanosecond before.
    let (b, _) = breaker();
    let inner = &*b.inner;
    b.trip_now();
    let deadline = inner.deadline.load(Ordering::Acquire);
    inner.half_open_if_due(deadline - 1);
    assert_eq!(b.state(), State::Open);
    inner.half_open_if_due(deadline);
    assert_eq!(b.state(), State::HalfOpen);
}

#[test]
fn the_ticker_wakes_at_the_backoff_end_of_a_published_open_only() {
    let clock = ManualClock::new();
    let b = Breaker::builder()
        .clock(clock.clone())
        .ticker(false)
        .base_backoff(Duration::from_millis(100))
        .build()
        .unwrap();
    let inner = &*b.inner;
    let window_end = inner.tick_for_ticker();
    assert!(window_end > 400_000_000, "CLOSED: the window end, {window_end} ns away");
    b.trip_now();
    assert_eq!(inner.tick_for_ticker(), 100_000_000, "OPEN: its backoff ends first");
    // An OPEN whose deadline is not published (yet) is waited for at the
    // window end, never at a stale deadline.
    let (b, _) = breaker();
    let inner = &*b.inner;
    bare_transition(inner, State::Open, Mode::Normal);
    assert_eq!(inner.tick_for_ticker(), window_end);
}
