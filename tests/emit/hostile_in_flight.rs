//! A hostile caller of `Emitter::begin` / `InFlight` and
//! `Emitter::replay_run` / `ReplayRun` / `ReplayCall`: calls settled by
//! the wrong run, runs finished with their call out, calls dropped on
//! other threads, shutdowns mid-call, clocks stepped a year either way,
//! a probe held across a thousand transitions. Findings are `#[ignore]`d
//! with the finding in the reason (the suite stays green); the attacks
//! that held are kept as regressions. From the hostile review of
//! ff96e80..9a3b327 (helper session).

use crate::support::emit::*;
use crate::support::*;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Duration;
use tailguard::clock::ManualClock;
use tailguard::dlq::Priority;
use tailguard::emit::{Emitted, Emitter, ReplayStop};
use tailguard::{Breaker, State};

const YEAR: Duration = Duration::from_secs(365 * 86_400);

/// `n` routine triggers queued, `attempts` replay attempts each.
fn backlog(b: &Breaker, n: u32, attempts: u32) -> Emitter<u32> {
    let e = driven_emitter(b, 1, 64, attempts);
    divert_backlog(b, &e, n, |_| Priority::Routine);
    e
}

/// Finding: a call settled by a run that did not give it (here a run that
/// was refused as `Busy` because the call's own run still holds the turn
/// through the call) panics, as documented; but the call is then dropped
/// while the thread panics, which reads as "the consumer's call panicked":
/// the consumer is charged a failure it never had and an attempt is used.
/// The caller said `delivered`: the consumer has the trigger, and the
/// trigger is back at the head, to be delivered a second time.
#[test]
fn a_call_settled_by_another_run_charges_no_failure_and_is_not_replayed_again() {
    let clock = ManualClock::new();
    let b = breaker(&clock);
    let e = backlog(&b, 1, 2);
    let mut first = e.replay_run::<()>(10);
    let call = first.next_call().expect("the trigger");
    let _ = first.finish(); // the call still holds the turn
    let mut other = e.replay_run::<()>(10);
    let unwound = catch_unwind(AssertUnwindSafe(|| other.delivered(call)));
    assert!(unwound.is_err(), "settled by the wrong run: a panic, as documented");
    let _ = other.finish();
    // The consumer was never reported as failing...
    assert_eq!(judged(&b, &clock).errors, 0, "the consumer was charged a failure");
    // ...and a trigger the caller said was delivered is not sent again.
    let again = e.replay_blocking(10, |_, _| Ok::<_, ()>(()));
    assert_eq!(again.delivered, 0, "the delivered trigger was replayed a second time");
}

/// The same across two emitters: emitter B's call settled by emitter A's
/// run charges B's consumer.
#[test]
fn a_call_of_another_emitter_settled_by_a_run_charges_neither_consumer() {
    let (ca, cb) = (ManualClock::new(), ManualClock::new());
    let (ba, bb) = (breaker(&ca), breaker(&cb));
    let (ea, eb) = (backlog(&ba, 1, 2), backlog(&bb, 1, 2));
    let mut run_a = ea.replay_run::<()>(10);
    let mut run_b = eb.replay_run::<()>(10);
    let call_b = run_b.next_call().expect("b's trigger");
    let unwound = catch_unwind(AssertUnwindSafe(|| run_a.failed(call_b, ())));
    assert!(unwound.is_err());
    drop((run_a, run_b));
    assert_eq!(judged(&ba, &ca).errors, 0);
    assert_eq!(judged(&bb, &cb).errors, 0, "B's consumer was charged for A's misuse");
}

/// Held: a probe `InFlight` kept across a thousand trip_now/reset
/// transitions, then finished, is stale: it neither frees the probe slot
/// of the round that holds it now nor closes the breaker.
#[test]
fn a_probe_held_across_a_thousand_transitions_is_stale_when_finished() {
    let clock = ManualClock::new();
    let b = breaker(&clock); // one probe, one success closes
    let e = driven_emitter(&b, 8, 64, 3);
    b.trip_now();
    clock.advance(Duration::from_secs(2));
    let old = e.begin::<(), ()>(1, Priority::Routine).expect("the probe");
    assert!(old.is_probe());
    for _ in 0..1_000 {
        b.reset();
        b.trip_now();
    }
    clock.advance(Duration::from_secs(60));
    let new = e.begin::<(), ()>(2, Priority::Routine).expect("this round's probe");
    assert!(new.is_probe());
    assert_eq!(b.snapshot().probes_in_flight, 1);
    assert!(matches!(old.finish::<(), ()>(Ok(())), Emitted::Delivered(())));
    assert_eq!(b.state(), State::HalfOpen, "a stale probe closed the breaker");
    assert_eq!(
        b.snapshot().probes_in_flight,
        1,
        "a stale probe freed this round's slot"
    );
    assert!(e.begin::<(), ()>(3, Priority::Routine).is_err(), "two probes at once");
    assert!(matches!(new.finish::<(), ()>(Ok(())), Emitted::Delivered(())));
    assert_eq!(b.state(), State::Closed);
    assert_eq!(e.bulkhead().unwrap().in_flight(), 0);
    assert_conserved(&e.stats(), 3);
}

/// Held: a clock stepped back a year between begin and finish reads as a
/// zero-length call; stepped forward a year, as a timeout (delivered,
/// overran). Both conserve, both give the slot back.
#[test]
fn a_clock_stepped_a_year_either_way_mid_call_conserves() {
    let clock = ManualClock::new();
    clock.advance(2 * YEAR);
    let b = breaker(&clock);
    let e = driven_emitter(&b, 1, 64, 3);
    let back = e.begin::<(), ()>(1, Priority::Routine).ok().unwrap();
    clock.rewind(YEAR);
    assert_eq!(back.deadline().remaining(), 200 * MS);
    assert_eq!(back.finish::<u8, ()>(Ok(1)), Emitted::Delivered(1));
    let fwd = e.begin::<(), ()>(2, Priority::Routine).ok().unwrap();
    clock.advance(2 * YEAR);
    assert_eq!(fwd.deadline().remaining(), Duration::ZERO);
    assert_eq!(fwd.finish::<u8, ()>(Ok(2)), Emitted::Delivered(2));
    let cut = e.begin::<(), ()>(3, Priority::Routine).ok().unwrap();
    clock.rewind(YEAR);
    assert!(!cut.timed_out::<(), ()>().is_delivered());
    let s = e.stats();
    assert_eq!((s.delivered, s.overran, s.diverted_timeout), (2, 1, 1));
    assert_eq!(e.bulkhead().unwrap().in_flight(), 0);
    assert_conserved(&s, 3);
}

/// Held: InFlights begun on one thread and dropped, cancelled or finished
/// on others, while another thread shuts the emitter down: every slot
/// back, nothing lost.
#[test]
fn in_flights_ended_on_other_threads_across_a_shutdown_conserve() {
    let clock = ManualClock::new();
    let b = breaker(&clock);
    let e = driven_emitter(&b, 64, 64, 3);
    let calls: Vec<_> = (0..48)
        .map(|i| e.begin::<(), ()>(i, Priority::Routine).ok().unwrap())
        .collect();
    let mut drained = 0;
    std::thread::scope(|s| {
        let mut it = calls.into_iter();
        for k in 0..3u32 {
            let mine: Vec<_> = it.by_ref().take(16).collect();
            s.spawn(move || {
                for (j, c) in mine.into_iter().enumerate() {
                    match (j as u32 + k) % 4 {
                        0 => drop(c),
                        1 => drop(c.cancel()),
                        2 => drop(c.finish::<(), ()>(Err(()))),
                        _ => drop(c.timed_out::<(), ()>()),
                    }
                }
            });
        }
        drained = e.shutdown(|_, _| {});
    });
    drained += e.shutdown(|_, _| {});
    let s = e.stats();
    assert_eq!(e.bulkhead().unwrap().in_flight(), 0);
    assert_eq!(s.drained as usize, drained);
    assert_conserved(&s, 48);
}

/// Held: begin on a shut-down emitter still admits (the call is made);
/// not delivered, the trigger comes back, never queued.
#[test]
fn begin_on_a_shut_down_emitter_hands_back_what_is_not_delivered() {
    let clock = ManualClock::new();
    let b = breaker(&clock);
    let e = driven_emitter(&b, 1, 64, 3);
    let _ = e.shutdown(|_, _| {});
    let c = e.begin::<(), &str>(5, Priority::Critical).ok().unwrap();
    assert!(matches!(
        c.finish::<(), _>(Err("x")),
        Emitted::HandedBack { trigger: 5, .. }
    ));
    b.trip_now();
    assert!(matches!(
        e.begin::<(), ()>(6, Priority::Critical),
        Err(Emitted::HandedBack { trigger: 6, .. })
    ));
    assert_eq!(e.queue().len(), 0);
    assert_conserved(&e.stats(), 2);
}

/// Held: a replay call dropped unsettled on another thread gives the turn
/// and the slot back and keeps the trigger at the head.
#[test]
fn a_replay_call_dropped_on_another_thread_gives_the_turn_back() {
    let clock = ManualClock::new();
    let b = breaker(&clock);
    let e = backlog(&b, 2, 2);
    let mut run = e.replay_run::<()>(10);
    let call = run.next_call().unwrap();
    let _ = run.finish();
    std::thread::spawn(move || drop(call)).join().unwrap();
    assert_eq!(e.bulkhead().unwrap().in_flight(), 0);
    let r = e.replay_blocking(10, |_, _| Ok::<_, ()>(()));
    assert_eq!((r.delivered, r.stopped), (2, Some(ReplayStop::Empty)));
    assert_conserved(&e.stats(), 2);
}

/// Finding: after `shutdown` returned, a replay call dropped unsettled
/// (a cancelled replay) puts its trigger back at the head of the shut-down
/// emitter: a trigger queued after the shutdown that drained everything,
/// found only by a second shutdown or a drain. (`shutdown_async` waits
/// for the turn; `shutdown` and the Python package's `Emitter.shutdown`
/// do not.) A drop cannot hand the trigger back, but the run could: the
/// settle paths use `keep_unless_shut_down`, the drop `keep_at_head`.
#[test]
fn a_call_dropped_after_shutdown_keeps_its_trigger_where_drain_takes_it() {
    let clock = ManualClock::new();
    let b = breaker(&clock);
    let e = backlog(&b, 3, 2);
    let mut run = e.replay_run::<()>(10);
    let call = run.next_call().unwrap();
    let held = (*call.trigger(), call.class());
    assert_eq!(e.shutdown(|_, _| {}), 2);
    drop(call); // the replay was cancelled: nothing else can take its trigger
    let _ = run.finish();
    let s = e.stats();
    assert!(
        s.pending,
        "kept at the head (the documented end of a call dropped after shutdown): {s:?}"
    );
    let mut drained = Vec::new();
    assert_eq!(e.drain(10, |t, p| drained.push((t, p))), 1);
    assert_eq!(drained, [held]);
    let s = e.stats();
    assert!(!s.pending && s.queued == 0, "{s:?}");
    assert_conserved(&s, 3);
}
