//! Outside any runtime (and in a tokio runtime without its timer), an async
//! emit whose call is pending is cut at once and diverted with
//! `Divert::NoTimer`: no panic, no hang, no verdict on the consumer, its
//! slots given back and the accounting identities kept. Issue 20 ("nothing
//! in the crate panics for a missing runtime").

use crate::support::emit::*;
use crate::support::*;
use futures_lite::future::block_on;
use std::future::pending;
use tailguard::clock::ManualClock;
use tailguard::dlq::Priority;
use tailguard::emit::{Divert, Emitted, ReplayStop};
use tailguard::{Bulkhead, State};

#[test]
fn a_pending_emit_outside_any_runtime_is_diverted_as_no_timer_and_gives_its_slots_back() {
    let clock = ManualClock::new();
    let b = breaker(&clock);
    let bulkhead = Bulkhead::new(1).unwrap();
    let e = bulkhead_emitter(&b, &bulkhead);
    // Ready on its first poll: no timer needed, delivered as before.
    let out = block_on(e.emit(1, Priority::Routine, |_| async { Ok::<_, ()>(7) }));
    assert_eq!(out, Emitted::Delivered(7));
    // Pending, and no tokio runtime for its timer: cut at once.
    b.trip_now();
    clock.advance(60 * SEC); // the backoff is over: the next emit is the probe
    let out = block_on(e.emit(2, Priority::Routine, |_| pending::<Result<(), ()>>()));
    assert_eq!(
        out,
        Emitted::Diverted {
            reason: Divert::NoTimer,
            displaced: None
        }
    );
    assert!(!Divert::<()>::NoTimer.called());
    assert_eq!((bulkhead.in_flight(), b.snapshot().probes_in_flight), (0, 0));
    assert_eq!(b.state(), State::HalfOpen, "no verdict: the probe was cancelled");
    let s = e.stats();
    assert_eq!((s.delivered, s.diverted_no_timer, s.queued), (1, 1, 1));
    assert_conserved(&s, 2);
}

#[test]
fn a_pending_replay_outside_any_runtime_keeps_its_trigger_at_the_head_and_stops() {
    let clock = ManualClock::new();
    let b = breaker(&clock);
    let e = emitter::<u32>(&b, 8);
    let _ = e.enqueue(1, Priority::Routine);
    let _ = e.enqueue(2, Priority::Routine);
    let r = block_on(e.replay(10, |_| pending::<Result<(), ()>>()));
    assert_eq!((r.delivered, r.stopped), (0, Some(ReplayStop::Failed(Divert::NoTimer))));
    assert!(r.handed_back.is_none());
    let s = e.stats();
    assert!(s.pending, "kept at the head, no attempt used");
    assert_conserved(&s, 0);
    // A runtime later: replayed in order, the kept one first.
    let mut seen = Vec::new();
    let r = block_on(e.replay(10, |t| {
        seen.push(*t);
        async { Ok::<_, ()>(()) }
    }));
    assert_eq!((r.delivered, seen), (2, vec![1, 2]));
    assert_conserved(&e.stats(), 0);
}

#[test]
fn a_pending_emit_in_a_tokio_runtime_without_its_timer_is_diverted_as_no_timer() {
    let clock = ManualClock::new();
    let b = breaker(&clock);
    let e = emitter::<u32>(&b, 8);
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap(); // no enable_time
    let out = rt.block_on(e.emit(1, Priority::Routine, |_| async {
        tokio::task::yield_now().await;
        Ok::<_, ()>(())
    }));
    assert!(
        matches!(
            out,
            Emitted::Diverted {
                reason: Divert::NoTimer,
                ..
            }
        ),
        "{out:?}"
    );
    assert_conserved(&e.stats(), 1);
}
