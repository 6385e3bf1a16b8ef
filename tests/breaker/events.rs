//! Transition events and listeners: delivered in generation order, off the
//! hot path, to every listener; bursts lose only counted events; a panicking
//! listener (or its panic's payload) never reaches a caller.

use crate::support::hook::HookClock;
use crate::support::*;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use tailguard::clock::ManualClock;
use tailguard::{Breaker, Mode, Reason, State, Transition};

#[test]
fn listener_may_call_back_into_the_breaker_without_deadlock() {
    let clock = ManualClock::new();
    let slot: Arc<Mutex<Option<Breaker>>> = Arc::new(Mutex::new(None));
    let their_slot = Arc::clone(&slot);
    let events = Arc::new(Mutex::new(Vec::new()));
    let their_events = Arc::clone(&events);
    let b = builder(&clock)
        .on_transition(move |t| {
            their_events.lock().unwrap().push((t.generation, t.to));
            let b = their_slot.lock().unwrap().clone().unwrap();
            let _ = b.snapshot();
            b.tick();
            // A listener that reacts to an OPEN by forcing the breaker closed.
            if t.to == State::Open && t.reason != Reason::ForcedOpen {
                b.force_closed();
            }
        })
        .build()
        .unwrap();
    *slot.lock().unwrap() = Some(b.clone());
    b.trip_now();
    assert_eq!(b.mode(), Mode::ForcedClosed);
    assert_eq!(*events.lock().unwrap(), vec![(1, State::Open), (2, State::Closed)]);
    slot.lock().unwrap().take();
}

#[test]
#[cfg_attr(
    miri,
    ignore = "thousands of racing overrides; loom and ThreadSanitizer cover the race"
)]
fn events_from_racing_threads_arrive_in_generation_order() {
    let clock = ManualClock::new();
    let (seen, listener) = recorder();
    let b = builder(&clock).on_transition(listener).build().unwrap();
    std::thread::scope(|s| {
        for t in 0..2 {
            let b = &b;
            s.spawn(move || {
                for i in 0..2_000 {
                    match (t + i) % 3 {
                        0 => b.force_open(),
                        1 => b.metrics_only(),
                        _ => b.reset(),
                    }
                }
            });
        }
    });
    let seen = seen.lock().unwrap();
    // An override to the mode already in force is no transition: every
    // transition is the generation's count, delivered or counted as lost.
    let snap = b.snapshot();
    assert_eq!(seen.len() as u64 + snap.events_lost, u64::from(snap.generation));
    for pair in seen.windows(2) {
        assert!(pair[0].generation < pair[1].generation, "{pair:?}");
        if pair[0].generation + 1 == pair[1].generation {
            assert_eq!(
                pair[0].to_mode, pair[1].from_mode,
                "consecutive events chain up: {pair:?}"
            );
        }
    }
}

/// Listeners add up: each gets every event, in order; one that panics does
/// not keep the others from theirs.
#[test]
fn every_listener_gets_every_transition_in_order() {
    let clock = ManualClock::new();
    let (first, log) = recorder();
    let (second, metrics) = recorder();
    let b = builder(&clock)
        .on_transition(log)
        .on_transition(|_| panic!("a listener bug (expected by this test)"))
        .on_transition(metrics)
        .build()
        .unwrap();
    b.trip_now();
    b.force_closed();
    b.reset();
    let states = |seen: &Arc<Mutex<Vec<Transition>>>| seen.lock().unwrap().iter().map(|t| t.to).collect::<Vec<_>>();
    assert_eq!(states(&first), [State::Open, State::Closed, State::Closed]);
    assert_eq!(states(&second), states(&first));
    assert_eq!(b.snapshot().listener_panics, 3);
}

/// A listener that panics: no call into the breaker unwinds, and no probe
/// slot is left held by nobody. (The ticker thread's side is in
/// `tests/ticker.rs`.)
///
/// Regression (issue 8's hostile review, finding 5).
#[test]
fn f05_a_panicking_listener_never_escapes_nor_strands_a_probe_slot() {
    let clock = ManualClock::new();
    let b = builder(&clock)
        .on_transition(|_| panic!("a listener bug (expected by this test)"))
        .build()
        .unwrap();
    assert!(
        catch_unwind(AssertUnwindSafe(|| b.trip_now())).is_ok(),
        "trip_now unwound"
    );
    clock.advance(SEC);
    let admitted = catch_unwind(AssertUnwindSafe(|| {
        let p = b.allow().expect("the first call after the backoff is the probe");
        assert!(p.is_probe());
    }));
    assert!(admitted.is_ok(), "allow unwound");
    assert_eq!(b.snapshot().probes_in_flight, 0, "the probe slot is stranded");
    assert!(b.allow().unwrap().is_probe());
    assert!(catch_unwind(AssertUnwindSafe(|| b.tick())).is_ok(), "tick unwound");
    assert!(catch_unwind(AssertUnwindSafe(|| b.reset())).is_ok(), "reset unwound");
    assert_eq!(b.state(), State::Closed);
}

/// The hot path never runs user code: the listener is not called by the
/// `allow` that moves OPEN to HALF_OPEN, nor by the probe's `record` that
/// closes; the next tick delivers both, in order.
///
/// Regression (issue 8's hostile review, finding 8).
#[test]
fn f08_allow_and_record_never_run_the_listener() {
    let clock = ManualClock::new();
    let calls = Arc::new(AtomicUsize::new(0));
    let (seen, listener) = recorder();
    let counter = Arc::clone(&calls);
    let b = builder(&clock)
        .success_to_close(1)
        .on_transition(move |t| {
            counter.fetch_add(1, Ordering::SeqCst);
            listener(t)
        })
        .build()
        .unwrap();
    b.trip_now();
    b.tick();
    let before = calls.load(Ordering::SeqCst);
    clock.advance(SEC);
    let p = b.allow().unwrap();
    assert!(p.is_probe());
    assert_eq!(calls.load(Ordering::SeqCst), before, "allow ran the listener");
    p.record_latency(MS, true);
    assert_eq!(b.state(), State::Closed);
    assert_eq!(calls.load(Ordering::SeqCst), before, "record ran the listener");
    b.tick();
    assert_eq!(calls.load(Ordering::SeqCst), before + 2);
    let seen = seen.lock().unwrap();
    let last: Vec<_> = seen[seen.len() - 2..].iter().map(|t| (t.to, t.reason)).collect();
    assert_eq!(
        last,
        [
            (State::HalfOpen, Reason::BackoffElapsed),
            (State::Closed, Reason::ProbesSucceeded)
        ]
    );
}

/// Four threads alternate force_open and reset as fast as they can. Events
/// may be dropped only as documented (more waiting than the queue holds),
/// each dropped one is counted, the listener sees generations in strictly
/// increasing order, and the latest transition always reaches it.
///
/// Regression (issue 8's hostile review, finding 12).
#[test]
#[cfg_attr(miri, ignore = "80,000 racing overrides; loom and ThreadSanitizer cover the race")]
fn f12_bursts_lose_only_counted_events_and_never_the_latest() {
    let clock = ManualClock::new();
    let (seen, listener) = recorder();
    let b = builder(&clock).on_transition(listener).build().unwrap();
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                for i in 0..20_000 {
                    if i % 2 == 0 {
                        b.force_open();
                    } else {
                        b.reset();
                    }
                }
            });
        }
    });
    b.tick();
    let snap = b.snapshot();
    let seen = seen.lock().unwrap();
    assert!(seen.windows(2).all(|w| w[0].generation < w[1].generation));
    assert_eq!(seen.len() as u64 + snap.events_lost, u64::from(snap.generation));
    assert_eq!(
        seen.last().map(|t| t.generation),
        Some(snap.generation),
        "the latest transition never reached the listener ({} delivered, {} lost)",
        seen.len(),
        snap.events_lost
    );
}

/// The event of one transition held up (its thread stopped between its CAS
/// and queueing its event) while 101 more transitions happen: more than the
/// queue holds. The oldest waiting events give way, counted; the latest
/// transition still reaches the listener, and the late event is never
/// delivered out of order.
///
/// Regression (issue 8's hostile review, finding 12).
#[test]
fn f12b_an_overflow_drops_the_oldest_waiting_events_never_the_latest() {
    let clock = HookClock::new();
    let (seen, listener) = recorder();
    let b = leak(
        Breaker::builder()
            .clock(clock.source())
            .ticker(false)
            .on_transition(listener)
            .build()
            .unwrap(),
    );
    clock.at_read(1, move || {
        for i in 0..101 {
            if i % 2 == 0 {
                b.reset();
            } else {
                b.force_open();
            }
        }
    });
    b.force_open();
    assert!(clock.fired());
    b.tick();
    let snap = b.snapshot();
    let seen = seen.lock().unwrap();
    assert_eq!(snap.generation, 102);
    assert!(seen.windows(2).all(|w| w[0].generation < w[1].generation));
    assert_eq!(seen.len() as u64 + snap.events_lost, 102);
    assert_eq!(
        seen.last().map(|t| t.generation),
        Some(102),
        "the latest transition was dropped"
    );
}

/// Promise (`BreakerBuilder::on_transition`, "When."): an override's
/// transition is delivered before the call returns, unless another thread
/// is delivering or an earlier transition's event has not been queued yet;
/// then the next delivery brings both, in order.
///
/// A probe's failed verdict re-opens the breaker (CAS done, its event not
/// queued yet: it reads the clock in between). At that instant an operator
/// calls `force_closed()`: its event waits behind the probe's; the next tick
/// delivers both, in generation order, and nothing is lost. (The review
/// found the docs promised delivery before `force_closed` returns.)
///
/// Regression (the adversarial review of issue 8's fixes, a06).
#[test]
fn a06_an_override_event_behind_an_unqueued_one_arrives_in_order_at_the_next_delivery() {
    let clock = HookClock::new();
    let (seen, listener) = recorder();
    let b = leak(
        Breaker::builder()
            .clock(clock.source())
            .ticker(false)
            .on_transition(listener)
            .build()
            .unwrap(),
    );
    b.trip_now();
    clock.advance(SEC);
    let probe = b.allow().unwrap();
    assert!(probe.is_probe());
    b.tick(); // delivers OPEN -> HALF_OPEN: nothing is waiting now
    clock.at_read(1, move || b.force_closed());
    probe.record_latency(MS, false); // the failed probe re-opens; its note reads the clock
    assert!(clock.fired());
    assert_eq!(b.mode(), Mode::ForcedClosed);
    b.tick();
    let tail: Vec<_> = seen
        .lock()
        .unwrap()
        .iter()
        .rev()
        .take(2)
        .map(|t| (t.generation, t.reason))
        .collect();
    assert_eq!(tail, [(4, Reason::ForcedClosed), (3, Reason::ProbeFailed)]);
    assert_eq!(b.snapshot().events_lost, 0);
}

/// Promise (`BreakerBuilder::on_transition`, "Panics."): "A panic in the
/// listener is caught and counted ...; it never unwinds into the breaker,
/// the caller of an override or the ticker thread".
///
/// The listener panics with a payload whose `Drop` panics. `deliver`
/// catches the panic and drops the payload in the breaker's own frame
/// (`catch_unwind(call).is_err()`): the second panic unwinds out of
/// `force_open()` into its caller.
///
/// Regression (the adversarial review of issue 8's fixes, a07).
#[test]
fn a07a_a_listener_panic_whose_payload_panics_never_reaches_the_caller() {
    let clock = ManualClock::new();
    let b = builder(&clock)
        .on_transition(|_| std::panic::panic_any(Bomb(1)))
        .build()
        .unwrap();
    let r = catch_unwind(AssertUnwindSafe(|| b.force_open()));
    assert!(
        r.is_ok(),
        "a panic raised by the listener's panic unwound out of force_open()"
    );
}

/// Promise (same, and events.rs): "... delivery goes on with the next
/// event." After the listener's panic escaped as in a07a, the queue's
/// `delivering` flag is left set: no event is ever delivered again, by any
/// override or tick, and none is counted lost.
///
/// Regression (the adversarial review of issue 8's fixes, a07).
#[test]
fn a07b_after_such_a_panic_events_are_still_delivered() {
    let clock = ManualClock::new();
    let calls = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&calls);
    let b = builder(&clock)
        .on_transition(move |_| {
            if counter.fetch_add(1, Ordering::SeqCst) == 0 {
                std::panic::panic_any(Bomb(1));
            }
        })
        .build()
        .unwrap();
    let _ = catch_unwind(AssertUnwindSafe(|| b.force_open()));
    b.reset();
    b.force_closed();
    b.tick();
    let s = b.snapshot();
    assert_eq!(
        calls.load(Ordering::SeqCst) as u64 + s.events_lost,
        u64::from(s.generation),
        "events after the listener's panic were neither delivered nor counted lost (generation {}, listener calls {}, lost {}, panics {})",
        s.generation,
        calls.load(Ordering::SeqCst),
        s.events_lost,
        s.listener_panics
    );
}
