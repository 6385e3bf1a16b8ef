//! A replay whose calls the caller makes (`Emitter::replay_run`): the same
//! order, stops, attempts and counters as `replay_blocking` driven through
//! the same script; a call dropped unsettled (kept at the head, no attempt
//! used) or in a panic (one attempt used); the turn held until the run and
//! its calls are gone; a shutdown while a call is out. Written with the
//! Python package, whose async replay drives it.

use crate::support::emit::*;
use crate::support::*;
use std::time::Duration;
use tailguard::clock::ManualClock;
use tailguard::dlq::Priority;
use tailguard::emit::{Divert, Emitter, ReplayStop, Replayed};
use tailguard::Breaker;

/// `n` triggers queued (classes in turn), two replay attempts each.
fn backlog(b: &Breaker, n: u32) -> Emitter<u32> {
    let e = driven_emitter(b, 1, 64, 2);
    divert_backlog(b, &e, n, |i| Priority::ALL[(i % 3) as usize]);
    e
}

/// Drives a run as `replay_blocking` drives its calls: `call` says what
/// each trigger's call does (`Ok`, `Err`, or `None`: cut at its deadline).
/// What a call does: `Ok`, `Err`, or `None`: cut at its deadline.
type Script = fn(u32) -> Option<Result<(), &'static str>>;

fn drive(
    e: &Emitter<u32>,
    max: usize,
    seen: &mut Vec<u32>,
    call: impl Fn(u32) -> Option<Result<(), &'static str>>,
) -> Replayed<u32, &'static str> {
    let mut run = e.replay_run(max);
    while let Some(c) = run.next_call() {
        seen.push(*c.trigger());
        match call(*c.trigger()) {
            Some(Ok(())) => run.delivered(c),
            Some(Err(err)) => run.failed(c, err),
            None => run.timed_out(c),
        }
    }
    run.finish()
}

#[test]
fn a_run_replays_exactly_as_replay_blocking_through_the_same_script() {
    let script: [(usize, Script); 5] = [
        (2, |_| Some(Ok(()))),
        (100, |t| Some(if t == 3 { Err("down") } else { Ok(()) })),
        (100, |t| if t == 3 { None } else { Some(Ok(())) }),
        (100, |t| Some(if t == 4 { Err("down") } else { Ok(()) })),
        (100, |_| Some(Ok(()))),
    ];
    let (clock_a, clock_b) = (ManualClock::new(), ManualClock::new());
    let (ba, bb) = (breaker(&clock_a), breaker(&clock_b));
    let (ea, eb) = (backlog(&ba, 12), backlog(&bb, 12));
    let (mut seen_a, mut seen_b) = (Vec::new(), Vec::new());
    for (max, call) in script {
        let a = ea.replay_blocking(max, |t, _| {
            seen_a.push(*t);
            match call(*t) {
                Some(r) => r,
                None => {
                    clock_a.advance(250 * MS); // returns late: timed out
                    Err("late")
                }
            }
        });
        let b = drive(&eb, max, &mut seen_b, |t| {
            if call(t).is_none() {
                clock_b.advance(250 * MS);
            }
            call(t)
        });
        // The same answer, but a timeout's reason: the blocking call that
        // returned late, the run's call cut at its deadline.
        let same_stop = match (&a.stopped, &b.stopped) {
            (Some(ReplayStop::Failed(Divert::TimedOut(x))), Some(ReplayStop::Failed(Divert::TimedOut(y)))) => x == y,
            (x, y) => x == y,
        };
        assert!(same_stop, "{:?} vs {:?}", a.stopped, b.stopped);
        assert_eq!((a.delivered, a.handed_back), (b.delivered, b.handed_back));
        ba.reset();
        bb.reset();
    }
    assert_eq!(seen_a, seen_b);
    assert_eq!(ea.stats(), eb.stats());
    assert_conserved(&eb.stats(), 12);
    assert_eq!(eb.stats().replayed + eb.stats().replay_handed_back, 12);
}

#[test]
fn a_call_dropped_unsettled_is_kept_at_the_head_with_no_attempt_used() {
    let clock = ManualClock::new();
    let b = breaker(&clock);
    let e = backlog(&b, 3); // replay_attempts(2)
    for _ in 0..10 {
        let mut run = e.replay_run::<()>(10);
        let call = run.next_call().expect("a trigger");
        assert_eq!(*call.trigger(), 2); // the critical one first
        assert_eq!(e.bulkhead().unwrap().in_flight(), 1);
        drop(call);
        assert_eq!(e.bulkhead().unwrap().in_flight(), 0);
        assert!(e.stats().pending);
        let r = run.finish();
        assert_eq!((r.delivered, r.stopped, r.handed_back), (0, None, None));
    }
    // Still two attempts left: two failures hand it back, not one.
    let mut seen = Vec::new();
    assert_eq!(drive(&e, 10, &mut seen, |_| Some(Err("down"))).handed_back, None);
    assert_eq!(
        drive(&e, 10, &mut seen, |_| Some(Err("down"))).handed_back,
        Some((2, Priority::Critical))
    );
    assert_eq!(seen, [2, 2]);
    assert_conserved(&e.stats(), 3);
}

#[test]
fn a_call_dropped_in_a_panic_uses_an_attempt_and_keeps_its_trigger() {
    let clock = ManualClock::new();
    let b = breaker(&clock);
    let e = backlog(&b, 1);
    let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut run = e.replay_run::<()>(10);
        let _call = run.next_call().unwrap();
        panic!("the caller's code");
    }));
    assert!(unwound.is_err());
    assert!(e.stats().pending);
    assert_eq!(e.bulkhead().unwrap().in_flight(), 0);
    // One attempt left of two.
    let r = drive(&e, 10, &mut Vec::new(), |_| Some(Err("down")));
    assert_eq!(r.handed_back, Some((0, Priority::Idle)));
    assert_conserved(&e.stats(), 1);
}

#[test]
fn the_turn_is_held_until_the_run_and_its_calls_are_gone() {
    let clock = ManualClock::new();
    let b = breaker(&clock);
    let e = backlog(&b, 2);
    let mut run = e.replay_run::<()>(10);
    let call = run.next_call().unwrap();
    let _ = run.finish(); // the call is still out
    assert_eq!(e.replay_run::<()>(10).finish().stopped, Some(ReplayStop::Busy));
    assert_eq!(
        e.replay_blocking(10, |_, _| Ok::<_, ()>(())).stopped,
        Some(ReplayStop::Busy)
    );
    drop(call); // kept at the head; the turn comes back
    let r = e.replay_blocking(10, |_, _| Ok::<_, ()>(()));
    assert_eq!((r.delivered, r.stopped), (2, Some(ReplayStop::Empty)));
    assert_conserved(&e.stats(), 2);
}

#[test]
#[should_panic(expected = "settle (or drop) the call it gave before taking another")]
fn a_second_call_while_the_first_is_out_is_refused() {
    let clock = ManualClock::new();
    let b = breaker(&clock);
    let e = backlog(&b, 2);
    let mut run = e.replay_run::<()>(10);
    let _first = run.next_call().unwrap();
    let _second = run.next_call();
}

#[test]
fn a_shutdown_while_a_call_is_out_hands_its_trigger_back_when_it_fails() {
    let clock = ManualClock::new();
    let b = breaker(&clock);
    let e = backlog(&b, 3);
    let mut run = e.replay_run::<&str>(10);
    let call = run.next_call().unwrap();
    let drained = e.shutdown(|_, _| {});
    assert_eq!(drained, 2);
    run.failed(call, "down");
    let r = run.finish();
    assert_eq!(r.handed_back, Some((2, Priority::Critical)));
    assert_eq!(r.stopped, Some(ReplayStop::Failed(Divert::Failed("down"))));
    let s = e.stats();
    assert_eq!((s.queued, s.pending, s.drained, s.replay_handed_back), (0, false, 2, 1));
    assert_conserved(&s, 3);
}

#[test]
fn turned_away_by_the_bulkhead_the_trigger_stays_at_the_head() {
    let clock = ManualClock::new();
    let b = breaker(&clock);
    let e = backlog(&b, 1);
    let held = e.begin::<(), ()>(99, Priority::Idle).ok().unwrap(); // the one slot
    let mut run = e.replay_run::<()>(10);
    assert!(run.next_call().is_none());
    assert_eq!(run.finish().stopped, Some(ReplayStop::Failed(Divert::BulkheadFull)));
    assert!(e.stats().pending);
    drop(held);
    clock.advance(Duration::from_millis(1));
    let r = drive(&e, 10, &mut Vec::new(), |_| Some(Ok(())));
    assert_eq!(r.delivered, 1);
    assert_conserved(&e.stats(), 2);
}
