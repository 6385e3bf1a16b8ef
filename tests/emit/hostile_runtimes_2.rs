//! Hostile review, second round: timers that panic late (after the call
//! made progress), next to a call that panics or finishes in the same
//! poll; and `Breaker::next_due` (probe leases, recovery ramps, a clock
//! stepped back), ticked by hand on the manual clock, as a runtime that
//! owns its timers does.

use crate::support::emit::*;
use crate::support::*;
use futures_lite::future::block_on;
use std::cell::Cell;
use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};
use std::time::Duration;
use tailguard::clock::ManualClock;
use tailguard::dlq::{DeadLetterQueue, Priority};
use tailguard::emit::{Divert, Emitted, Emitter, ReplayStop};
use tailguard::timer::Timer;
use tailguard::{Breaker, State};

/// A timer whose sleep is pending on its first poll and panics on the
/// second.
struct LatePanic;

struct LateSleep(u32);

impl Future for LateSleep {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<()> {
        self.0 += 1;
        assert!(self.0 < 2, "the sleep panics on its second poll");
        Poll::Pending
    }
}

impl Timer for LatePanic {
    type Sleep = LateSleep;
    fn sleep(&self, _after: Duration) -> Option<LateSleep> {
        Some(LateSleep(0))
    }
}

/// A call future: pending `pending` times (waking itself), then `Ready`
/// with `Ok(7)`, or a panic if `panics`; counts its polls.
struct Call {
    pending: u32,
    panics: bool,
    polls: Rc<Cell<u32>>,
}

impl Future for Call {
    type Output = Result<u32, ()>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.polls.set(self.polls.get() + 1);
        if self.pending > 0 {
            self.pending -= 1;
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        assert!(!self.panics, "the call panics");
        Poll::Ready(Ok(7))
    }
}

fn plain(clock: &ManualClock) -> Breaker {
    Breaker::builder().clock(clock.clone()).ticker(false).build().unwrap()
}

/// timer_panics.rs: "a panicking Timer (... its sleep polled) cuts the
/// emit's call as no timer would, queues the trigger (diverted_no_timer)".
/// A sleep that panics only on its second poll, after the call was polled
/// once (progress made, still pending): no panic out, the trigger queued
/// as no timer, the call polled exactly twice, nothing held.
#[test]
fn hostile_a_sleep_panicking_on_its_second_poll_cuts_the_call_as_no_timer() {
    let clock = ManualClock::new();
    let b = plain(&clock);
    let e = emitter::<u32>(&b, 8);
    let polls = Rc::new(Cell::new(0));
    let call = Call {
        pending: 5,
        panics: false,
        polls: polls.clone(),
    };
    let run = catch_unwind(AssertUnwindSafe(|| {
        block_on(e.emit_with(LatePanic, 1, Priority::Routine, move |_| call))
    }));
    assert!(
        matches!(
            run,
            Ok(Emitted::Diverted {
                reason: Divert::NoTimer,
                ..
            })
        ),
        "no panic out, no timer"
    );
    assert_eq!(polls.get(), 2, "the call polled before each poll of the sleep");
    let s = e.stats();
    assert_eq!(
        (s.diverted_no_timer, s.queued, s.delivered, s.bulkhead_in_flight),
        (1, 1, 0, 0)
    );
    assert_conserved(&s, 1);
    assert_eq!(b.snapshot().probes_in_flight, 0);
}

/// `Timed::poll` polls the call first: "a delivered trigger must not be
/// queued again". A call that finishes on the very poll in which the sleep
/// would panic is delivered (the sleep is not polled then).
#[test]
fn hostile_a_call_ready_in_the_poll_the_sleep_would_panic_is_delivered() {
    let clock = ManualClock::new();
    let b = plain(&clock);
    let e = emitter::<u32>(&b, 8);
    let polls = Rc::new(Cell::new(0));
    let call = Call {
        pending: 1,
        panics: false,
        polls: polls.clone(),
    };
    let out = block_on(e.emit_with(LatePanic, 1, Priority::Routine, move |_| call));
    assert_eq!(out, Emitted::Delivered(7));
    let s = e.stats();
    assert_eq!((s.delivered, s.queued, s.diverted_no_timer), (1, 0, 0));
    assert_conserved(&s, 1);
}

/// "a panic while polling wins": a call that panics in the poll where the
/// sleep would panic is a failed call (its panic is the user's), not a
/// missing timer: never counted as `diverted_no_timer`, everything given
/// back, the counts conserved.
#[test]
fn hostile_a_call_panicking_in_the_poll_the_sleep_would_panic_is_not_no_timer() {
    let clock = ManualClock::new();
    let b = plain(&clock);
    let e = emitter::<u32>(&b, 8);
    let polls = Rc::new(Cell::new(0));
    let call = Call {
        pending: 1,
        panics: true,
        polls: polls.clone(),
    };
    let run = catch_unwind(AssertUnwindSafe(|| {
        block_on(e.emit_with(LatePanic, 1, Priority::Routine, move |_| call))
    }));
    if let Ok(out) = &run {
        assert!(
            !matches!(
                out,
                Emitted::Diverted {
                    reason: Divert::NoTimer,
                    ..
                }
            ),
            "{out:?}"
        );
    }
    let s = e.stats();
    assert_eq!(
        (s.diverted_no_timer, s.delivered, s.queued, s.bulkhead_in_flight),
        (0, 0, 1, 0)
    );
    assert_conserved(&s, 1);
    assert_eq!(b.snapshot().probes_in_flight, 0);
}

/// Replay: "a panicking timer keeps the trigger at the head with no
/// attempt used", also when the sleep panics late (the call polled
/// once): one attempt allowed, three such replays, and the trigger is
/// still there, and delivered by the next replay.
#[test]
fn hostile_a_replay_whose_sleep_panics_late_uses_no_attempt() {
    let clock = ManualClock::new();
    let b = plain(&clock);
    let e = Emitter::builder(b.clone(), DeadLetterQueue::with_capacity(8).unwrap())
        .replay_attempts(1)
        .unwrap()
        .timeout(200 * MS)
        .unwrap()
        .build()
        .unwrap();
    assert!(e.enqueue(3u32, Priority::Routine).is_ok());
    for _ in 0..3 {
        let polls = Rc::new(Cell::new(0));
        let r = block_on(e.replay_with(LatePanic, 10, |_| Call {
            pending: 5,
            panics: false,
            polls: polls.clone(),
        }));
        assert_eq!((r.delivered, r.stopped), (0, Some(ReplayStop::Failed(Divert::NoTimer))));
        assert!(e.stats().pending, "kept at the head");
    }
    let r = block_on(e.replay_with(LatePanic, 10, |_| Call {
        pending: 1,
        panics: false,
        polls: Rc::new(Cell::new(0)),
    }));
    assert_eq!((r.delivered, r.stopped), (1, Some(ReplayStop::Empty)));
    let s = e.stats();
    assert_eq!((s.replayed, s.replay_handed_back), (1, 0));
}

/// `Breaker::next_due`: "How long from now until `tick` next has work to
/// do ... `Duration::ZERO` when it is due already. Ticking earlier does
/// nothing but the check". Forced OPEN after a trip, past the trip's
/// backoff: a tick has nothing to do (a forced OPEN never half-opens), so
/// right after that tick `next_due` must not be zero, or a runtime (and
/// the ticker, which reads the same forecast) ticks it back to back until
/// the window ends.
#[test]
fn hostile_next_due_is_not_zero_right_after_a_tick_when_forced_open() {
    let clock = ManualClock::new();
    let b = Breaker::builder()
        .clock(clock.clone())
        .ticker(false)
        .window(10 * SEC)
        .base_backoff(SEC)
        .build()
        .unwrap();
    b.tick();
    b.trip_now();
    b.force_open();
    clock.advance(2 * SEC);
    b.tick();
    assert_eq!(b.state(), State::Open);
    let due = b.next_due();
    b.tick();
    assert!(due > Duration::ZERO, "due now, yet the tick did nothing: {due:?}");
}

/// `next_due` "in HALF_OPEN the end of the first probe's lease (the tick
/// re-opens if that probe has not answered), or the end of a recovery
/// ramp (the tick ends it)": each forecast that reads zero is cleared by
/// the tick it calls for; none stays zero after its tick.
#[test]
fn hostile_next_due_lease_and_ramp_ends_are_cleared_by_their_tick() {
    let clock = ManualClock::new();
    let b = Breaker::builder()
        .clock(clock.clone())
        .ticker(false)
        .window(10 * SEC)
        .base_backoff(SEC)
        .half_open_probes(2)
        .success_to_close(1)
        .probe_lease(100 * MS)
        .recovery_ramp(500 * MS)
        .build()
        .unwrap();
    b.tick();
    b.trip_now();
    clock.advance(2 * SEC);
    let probe = b.allow().expect("the probe");
    assert_eq!(b.state(), State::HalfOpen);
    let due = b.next_due();
    assert!(due > Duration::ZERO && due <= 100 * MS, "the lease's end: {due:?}");
    clock.advance(150 * MS);
    assert_eq!(b.next_due(), Duration::ZERO);
    b.tick();
    assert_eq!(b.state(), State::Open, "the lease ended: re-opened");
    assert!(b.next_due() > Duration::ZERO);
    // The late probe answers after its round moved on.
    probe.record(true);
    assert!(b.next_due() > Duration::ZERO, "an old round's lease is no work");
    // A second round: the probe closes, into the ramp.
    clock.advance(10 * SEC);
    b.tick();
    b.allow().expect("the second probe").record(true);
    assert_eq!(b.state(), State::Closed);
    let due = b.next_due();
    assert!(due > Duration::ZERO && due <= 500 * MS, "the ramp's end: {due:?}");
    clock.advance(600 * MS);
    assert_eq!(b.next_due(), Duration::ZERO);
    b.tick();
    assert!(b.next_due() > Duration::ZERO, "the ramp ended by the tick");
}

/// "A clock stepped back since the last tick is rebased here as that tick
/// would rebase it, so the forecast holds across the step": two breakers
/// on two clocks doing the same, one asked `next_due` after the step, the
/// other not: after the next tick both are in the same state with the
/// same forecast (asking changes nothing).
#[test]
fn hostile_next_due_after_a_step_back_is_a_forecast_not_a_side_effect() {
    let make = || {
        let clock = ManualClock::new();
        let b = Breaker::builder()
            .clock(clock.clone())
            .ticker(false)
            .window(SEC)
            .base_backoff(3 * SEC)
            .build()
            .unwrap();
        (clock, b)
    };
    let (ca, a) = make();
    let (cb, bb) = make();
    for (c, b) in [(&ca, &a), (&cb, &bb)] {
        c.advance(5 * SEC);
        b.tick();
        b.trip_now();
        c.rewind(2 * SEC);
    }
    let forecast = a.next_due();
    for c in [&ca, &cb] {
        c.advance(SEC);
    }
    assert_eq!(a.state(), bb.state());
    a.tick();
    bb.tick();
    assert_eq!(a.state(), bb.state());
    assert_eq!(a.next_due(), bb.next_due(), "asking next_due moved the breaker's time");
    assert_eq!(a.snapshot().open_for, bb.snapshot().open_for);
    assert!(forecast <= 3 * SEC);
}
