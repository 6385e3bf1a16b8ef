//! The async emitter on a second runtime: async-io's timer
//! (`tailguard::timer::AsyncIoTimer`) under `futures_lite`'s `block_on`,
//! no tokio anywhere. The core cases of the tokio tests: a call cut at its
//! deadline, a call that just meets it, and a dropped emit giving back its
//! bulkhead and probe slots. The breaker runs on the manual clock, moved by
//! the calls, so every verdict is exact while the timer runs on real time.
//! Issue 20.

use crate::support::emit::*;
use crate::support::*;
use futures_lite::future::{block_on, poll_once};
use std::future::pending;
use std::pin::pin;
use tailguard::clock::ManualClock;
use tailguard::dlq::{DeadLetterQueue, Priority};
use tailguard::emit::{Divert, Emitted, Emitter};
use tailguard::timer::AsyncIoTimer;
use tailguard::{Bulkhead, State};

/// An emitter over `b` with a 50 ms timeout.
fn short(b: &tailguard::Breaker) -> Emitter<u32> {
    Emitter::builder(b.clone(), DeadLetterQueue::with_capacity(8).unwrap())
        .timeout(50 * MS)
        .unwrap()
        .build()
        .unwrap()
}

#[test]
fn a_hung_call_is_cut_at_the_deadline_and_counts_failed_and_slow() {
    let clock = ManualClock::new();
    let b = breaker(&clock);
    let e = short(&b);
    let started = std::time::Instant::now();
    let out = block_on(e.emit_with(AsyncIoTimer, 1, Priority::Routine, |_| {
        clock.advance(50 * MS); // the breaker's clock: the budget, spent
        pending::<Result<(), ()>>()
    }));
    assert!(started.elapsed() >= 50 * MS, "cut by the real timer, not before");
    assert_eq!(
        out,
        Emitted::Diverted {
            reason: Divert::TimedOut(50 * MS),
            displaced: None
        }
    );
    clock.advance(SEC);
    b.tick();
    let w = b.snapshot().window;
    assert_eq!((w.calls, w.errors, w.slow), (1, 1, 1));
    let s = e.stats();
    assert_eq!(s.diverted_timeout, 1);
    assert_conserved(&s, 1);
}

#[test]
fn a_call_that_just_meets_the_deadline_is_delivered_and_one_past_it_overran() {
    let clock = ManualClock::new();
    let b = breaker(&clock);
    let e = emitter::<u32>(&b, 8); // 200 ms: the real timer never fires first
    for (i, spent) in [(1, 200 * MS), (2, 200 * MS + NS)] {
        let out = block_on(e.emit_with(AsyncIoTimer, i, Priority::Routine, |_| {
            let clock = clock.clone();
            async move {
                // Pending once (the timer is armed), woken 1 ms later.
                async_io::Timer::after(MS).await;
                clock.advance(spent);
                Ok::<_, ()>(i)
            }
        }));
        assert_eq!(out, Emitted::Delivered(i));
    }
    clock.advance(SEC);
    b.tick();
    let w = b.snapshot().window;
    assert_eq!(
        (w.calls, w.errors),
        (2, 1),
        "only the one past the deadline is a timeout"
    );
    let s = e.stats();
    assert_eq!((s.delivered, s.overran), (2, 1));
    assert_conserved(&s, 2);
}

#[test]
fn a_dropped_emit_gives_back_its_bulkhead_slot_and_its_probe_slot() {
    let clock = ManualClock::new();
    let b = breaker(&clock);
    let bulkhead = Bulkhead::new(1).unwrap();
    let e = bulkhead_emitter(&b, &bulkhead);
    b.trip_now();
    clock.advance(60 * SEC); // the backoff is over: the next emit is the probe
    {
        let mut emit = pin!(e.emit_with(AsyncIoTimer, 1, Priority::Routine, |_| pending::<Result<(), ()>>()));
        assert!(block_on(poll_once(emit.as_mut())).is_none(), "pending, its timer armed");
        assert_eq!(
            (bulkhead.in_flight(), b.snapshot().probes_in_flight),
            (1, 1),
            "in flight"
        );
    } // dropped mid-call
    assert_eq!((bulkhead.in_flight(), b.snapshot().probes_in_flight), (0, 0));
    assert_eq!(b.state(), State::HalfOpen);
    // The slots are free: the next emit is the probe, and closes the breaker.
    let out = block_on(e.emit_with(AsyncIoTimer, 2, Priority::Routine, |_| async { Ok::<_, ()>(()) }));
    assert!(out.is_delivered());
    assert_eq!(b.state(), State::Closed);
    let s = e.stats();
    assert_eq!((s.cancelled, s.delivered), (1, 1));
    assert_conserved(&s, 2);
}

#[test]
fn replay_on_async_io_cuts_a_hung_call_and_keeps_its_trigger_first() {
    let clock = ManualClock::new();
    let b = breaker(&clock);
    let e = short(&b);
    let _ = e.enqueue(1, Priority::Routine);
    let _ = e.enqueue(2, Priority::Routine);
    let r = block_on(e.replay_with(AsyncIoTimer, 10, |_| pending::<Result<(), ()>>()));
    assert!(matches!(
        r.stopped,
        Some(tailguard::emit::ReplayStop::Failed(Divert::TimedOut(_)))
    ));
    let mut seen = Vec::new();
    let r = block_on(e.replay_with(AsyncIoTimer, 10, |t| {
        seen.push(*t);
        async { Ok::<_, ()>(()) }
    }));
    assert_eq!((r.delivered, seen), (2, vec![1, 2]));
    assert_conserved(&e.stats(), 0);
}
