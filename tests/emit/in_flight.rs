//! An emit whose call the caller makes (`Emitter::begin`, `InFlight`): its
//! four ends (finished, cut at the deadline, cancelled, dropped in a
//! panic), its slots given back whatever the end, probes, and the two
//! identities after a mixed run on racing threads. Written with the Python
//! package, which drives its asyncio emits through it.

use crate::support::emit::*;
use crate::support::*;
use std::time::Duration;
use tailguard::clock::ManualClock;
use tailguard::dlq::Priority;
use tailguard::emit::{Divert, Emitted, Emitter, HandBack, InFlight};
use tailguard::State;

fn begun(e: &Emitter<u32>, trigger: u32) -> InFlight<u32> {
    match e.begin::<(), ()>(trigger, Priority::Routine) {
        Ok(call) => call,
        Err(out) => panic!("not admitted: {out:?}"),
    }
}

#[test]
fn a_finished_call_is_judged_on_the_time_it_took() {
    let clock = ManualClock::new();
    let b = breaker(&clock);
    let e = driven_emitter(&b, 1, 8, 3);
    let call = begun(&e, 1);
    clock.advance(30 * MS);
    assert_eq!(call.deadline().remaining(), 170 * MS);
    assert_eq!(call.finish::<u8, ()>(Ok(9)), Emitted::Delivered(9));
    let s = e.stats();
    assert_eq!((s.delivered, s.overran), (1, 0));
    assert_eq!(s.emit_times.sum(), 30 * MS);
    assert_eq!(e.bulkhead().unwrap().in_flight(), 0);
    assert_conserved(&s, 1);
    let t = judged(&b, &clock);
    assert_eq!((t.calls, t.errors, t.slow), (1, 0, 0));
}

#[test]
fn an_ok_after_the_deadline_is_delivered_and_counted_overran_and_slow() {
    let clock = ManualClock::new();
    let b = breaker(&clock);
    let e = driven_emitter(&b, 1, 8, 3);
    let late = begun(&e, 1);
    clock.advance(250 * MS);
    assert_eq!(late.finish::<(), ()>(Ok(())), Emitted::Delivered(()));
    let failed_late = begun(&e, 2);
    clock.advance(250 * MS);
    let out = failed_late.finish::<(), _>(Err("503"));
    assert!(
        matches!(out, Emitted::Diverted { reason: Divert::TimedOut(t), displaced: None } if t == 250 * MS),
        "{out:?}"
    );
    let s = e.stats();
    assert_eq!((s.delivered, s.overran, s.diverted_timeout), (1, 1, 1));
    assert_conserved(&s, 2);
    let t = judged(&b, &clock);
    assert_eq!((t.calls, t.errors, t.slow), (2, 2, 2));
}

#[test]
fn cut_at_the_deadline_the_trigger_is_queued_and_the_breaker_counts_a_timeout() {
    let clock = ManualClock::new();
    let b = breaker(&clock);
    let e = driven_emitter(&b, 1, 8, 3);
    let call = begun(&e, 7);
    clock.advance(200 * MS);
    let out = call.timed_out::<(), ()>();
    assert!(matches!(out, Emitted::Diverted { reason: Divert::TimedOut(t), .. } if t == 200 * MS));
    assert_eq!(e.queue().len(), 1);
    assert_eq!(e.bulkhead().unwrap().in_flight(), 0);
    assert_conserved(&e.stats(), 1);
    let t = judged(&b, &clock);
    assert_eq!((t.calls, t.errors, t.slow), (1, 1, 1));
}

#[test]
fn cancelled_or_dropped_it_gives_back_its_slot_and_its_probe_with_no_verdict() {
    let clock = ManualClock::new();
    let b = breaker(&clock);
    let e = driven_emitter(&b, 1, 8, 3);
    b.trip_now();
    clock.advance(Duration::from_secs(2));
    // The one probe, cancelled a thousand times over: each time the
    // probe slot and the bulkhead slot come back, and the breaker judges
    // nothing.
    for i in 0..1_000 {
        let call = begun(&e, i);
        assert!(call.is_probe());
        assert_eq!(e.bulkhead().unwrap().in_flight(), 1);
        if i % 2 == 0 {
            assert_eq!(call.cancel(), i);
        } else {
            drop(call);
        }
        assert_eq!(e.bulkhead().unwrap().in_flight(), 0);
        assert_eq!(b.state(), State::HalfOpen);
    }
    let s = e.stats();
    assert_eq!(s.cancelled, 1_000);
    assert_eq!(e.queue().len(), 0);
    assert_conserved(&s, 1_000);
    // The probe is still there to take, and closes the breaker.
    assert_eq!(begun(&e, 0).finish::<(), ()>(Ok(())), Emitted::Delivered(()));
    assert_eq!(b.state(), State::Closed);
}

#[test]
fn not_admitted_the_trigger_is_already_diverted_and_counted() {
    let clock = ManualClock::new();
    let b = breaker(&clock);
    let e = driven_emitter(&b, 1, 1, 3);
    let held = begun(&e, 1);
    let full = e.begin::<(), ()>(2, Priority::Routine).unwrap_err();
    assert!(matches!(
        full,
        Emitted::Diverted {
            reason: Divert::BulkheadFull,
            displaced: None
        }
    ));
    drop(held);
    b.trip_now();
    let out = e.begin::<(), ()>(3, Priority::Routine).unwrap_err();
    assert!(
        matches!(
            out,
            Emitted::HandedBack {
                trigger: 3,
                not_queued: HandBack::QueueFull,
                reason: Divert::Open(_),
                ..
            }
        ),
        "{out:?}"
    );
    let s = e.stats();
    assert_eq!((s.diverted_bulkhead, s.handed_back_full, s.cancelled), (1, 1, 1));
    assert_conserved(&s, 3);
}

#[test]
fn dropped_in_a_panic_the_call_counts_failed_and_its_trigger_is_queued() {
    let clock = ManualClock::new();
    let b = breaker(&clock);
    let e = driven_emitter(&b, 1, 8, 3);
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _call = begun(&e, 42);
        clock.advance(5 * MS);
        panic!("the caller's code");
    }));
    assert!(panicked.is_err());
    let s = e.stats();
    assert_eq!((s.diverted_failed, s.cancelled, s.dropped_in_panics), (1, 0, 0));
    assert_eq!(e.bulkhead().unwrap().in_flight(), 0);
    assert_eq!(e.queue().len(), 1);
    assert_conserved(&s, 1);
    let t = judged(&b, &clock);
    assert_eq!((t.calls, t.errors), (1, 1));
}

#[test]
fn after_shutdown_a_call_that_fails_hands_its_trigger_back() {
    let clock = ManualClock::new();
    let b = breaker(&clock);
    let e = driven_emitter(&b, 2, 8, 3);
    let call = begun(&e, 5);
    assert_eq!(e.shutdown(|_, _| {}), 0);
    let out = call.finish::<(), _>(Err("503"));
    assert!(
        matches!(
            out,
            Emitted::HandedBack {
                trigger: 5,
                not_queued: HandBack::ShutDown,
                ..
            }
        ),
        "{out:?}"
    );
    assert_conserved(&e.stats(), 1);
}

#[test]
fn racing_threads_of_mixed_ends_conserve_every_trigger() {
    let clock = ManualClock::new();
    let b = breaker(&clock);
    let e = driven_emitter(&b, 2, 64, 3);
    let per = 4_000u32;
    std::thread::scope(|s| {
        for t in 0..2u32 {
            let e = &e;
            s.spawn(move || {
                for i in 0..per {
                    let n = t * per + i;
                    let Ok(call) = e.begin::<(), &str>(n, Priority::ALL[(i % 3) as usize]) else {
                        continue;
                    };
                    let out = match i % 5 {
                        0 => call.finish(Err("503")),
                        1 => call.timed_out(),
                        2 => {
                            call.cancel();
                            continue;
                        }
                        3 => {
                            drop(call);
                            continue;
                        }
                        _ => call.finish(Ok(())),
                    };
                    drop(out);
                }
            });
        }
        s.spawn(|| {
            for _ in 0..200 {
                clock.advance(5 * MS);
                b.tick();
                std::thread::yield_now();
            }
        });
    });
    let s = e.stats();
    assert_eq!(e.bulkhead().unwrap().in_flight(), 0);
    assert_conserved(&s, 2 * u64::from(per));
    assert!(s.cancelled > 0 && s.delivered > 0, "{s:?}");
}
