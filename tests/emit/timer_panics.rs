//! A `Timer` is the runtime's code: when it panics (making its sleep, or
//! its sleep when polled: tokio's does once its runtime is shut down), it
//! is no timer to be had: the emit's call is cut, its bulkhead and probe
//! slots given back, its permit cancelled (no verdict on the consumer), its
//! trigger diverted with `Divert::NoTimer`; the panic does not go on. A
//! replay keeps its trigger at the head with no attempt used. A panic in
//! the sleep's drop, after the call ended, is swallowed: the call's outcome
//! stands. Issue 20.

use crate::support::emit::*;
use crate::support::*;
use futures_lite::future::block_on;
use std::future::{pending, Future};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tailguard::clock::ManualClock;
use tailguard::dlq::{DeadLetterQueue, Priority};
use tailguard::emit::{Divert, Emitted, Emitter, LocalEmitter, ReplayStop};
use tailguard::timer::Timer;
use tailguard::{Breaker, State};

/// Where the timer panics.
#[derive(Clone, Copy, PartialEq)]
enum Fault {
    /// In `Timer::sleep`.
    Arming,
    /// In the sleep's `poll`.
    Polling,
    /// In the sleep's `drop`.
    Dropping,
}

struct Faulty(Fault);

struct Sleep(Fault);

impl Future for Sleep {
    type Output = ();
    fn poll(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<()> {
        assert!(self.0 != Fault::Polling, "the timer's sleep panics when polled");
        Poll::Pending
    }
}

impl Drop for Sleep {
    fn drop(&mut self) {
        if self.0 == Fault::Dropping && !std::thread::panicking() {
            panic!("the timer's sleep panics when dropped");
        }
    }
}

impl Timer for Faulty {
    type Sleep = Sleep;
    fn sleep(&self, _after: Duration) -> Option<Sleep> {
        assert!(self.0 != Fault::Arming, "the timer panics making its sleep");
        Some(Sleep(self.0))
    }
}

/// Pending on its first poll, ready on the second.
struct Twice(bool);

impl Future for Twice {
    type Output = Result<u32, ()>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if std::mem::replace(&mut self.0, true) {
            Poll::Ready(Ok(9))
        } else {
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }
}

fn probing(clock: &ManualClock, local: bool) -> Breaker {
    let b = Breaker::builder()
        .clock(clock.clone())
        .ticker(false)
        .half_open_probes(1)
        .success_to_close(1)
        .local_handles(usize::from(local))
        .build()
        .unwrap();
    b.trip_now();
    clock.advance(60 * SEC); // the backoff is over: the next emit is the probe
    b
}

/// For both emitters and both faults that cut the call: no panic comes
/// out, the emit is diverted as no timer, the trigger is in the queue, the
/// slots back, no verdict.
#[test]
fn a_timer_that_panics_is_no_timer_the_call_cut_and_its_trigger_queued() {
    for fault in [Fault::Arming, Fault::Polling] {
        let clock = ManualClock::new();
        let b = probing(&clock, false);
        let e = Emitter::builder(b.clone(), DeadLetterQueue::with_capacity(8).unwrap())
            .bulkhead(1)
            .unwrap()
            .build()
            .unwrap();
        let run = catch_unwind(AssertUnwindSafe(|| {
            block_on(e.emit_with(Faulty(fault), 1u32, Priority::Critical, |_| pending::<Result<(), ()>>()))
        }));
        assert!(
            matches!(
                run,
                Ok(Emitted::Diverted {
                    reason: Divert::NoTimer,
                    ..
                })
            ),
            "no panic comes out"
        );
        let s = e.stats();
        assert_eq!((s.diverted_no_timer, s.queued, s.bulkhead_in_flight), (1, 1, 0));
        assert_eq!(b.snapshot().probes_in_flight, 0);
        assert_eq!(b.state(), State::HalfOpen, "no verdict on the consumer");
        assert_conserved(&s, 1);

        let clock = ManualClock::new();
        let b = probing(&clock, true);
        let e = LocalEmitter::builder(b.clone(), DeadLetterQueue::with_capacity(8).unwrap())
            .bulkhead(1)
            .unwrap()
            .build_local()
            .unwrap();
        let run = catch_unwind(AssertUnwindSafe(|| {
            block_on(e.emit_with(Faulty(fault), 1u32, Priority::Critical, |_| pending::<Result<(), ()>>()))
        }));
        assert!(
            matches!(
                run,
                Ok(Emitted::Diverted {
                    reason: Divert::NoTimer,
                    ..
                })
            ),
            "per-core: no panic comes out"
        );
        let s = e.stats();
        assert_eq!((s.diverted_no_timer, s.queued, s.bulkhead_in_flight), (1, 1, 0));
        assert_eq!(b.snapshot().probes_in_flight, 0);
        assert_eq!(b.state(), State::HalfOpen);
        assert_conserved(&s, 1);
        // The probe slot is free: a ready call closes the breaker.
        assert!(
            block_on(e.emit_with(Faulty(fault), 2, Priority::Critical, |_| async { Ok::<_, ()>(()) })).is_delivered()
        );
        assert_eq!(b.state(), State::Closed);
    }
}

/// A sleep that panics in its drop, after the call returned: the call's
/// outcome stands (delivered once, not queued to be delivered again).
#[test]
fn a_sleep_that_panics_when_dropped_after_the_call_returned_leaves_it_delivered() {
    let clock = ManualClock::new();
    let b = probing(&clock, false);
    b.reset();
    let e = emitter::<u32>(&b, 8);
    let out = block_on(e.emit_with(Faulty(Fault::Dropping), 1, Priority::Routine, |_| Twice(false)));
    assert_eq!(out, Emitted::Delivered(9));
    let s = e.stats();
    assert_eq!((s.delivered, s.queued), (1, 0));
    assert_conserved(&s, 1);
}

/// Replay: a panicking timer keeps the trigger at the head with no attempt
/// used (one attempt allowed, and a later replay still delivers it).
#[test]
fn a_replay_whose_timer_panics_keeps_its_trigger_first_with_no_attempt_used() {
    let clock = ManualClock::new();
    let b = probing(&clock, false);
    b.reset();
    let e = Emitter::builder(b.clone(), DeadLetterQueue::with_capacity(8).unwrap())
        .replay_attempts(1)
        .unwrap()
        .build()
        .unwrap();
    for i in 0..2u32 {
        assert!(e.enqueue(i, Priority::Routine).is_ok());
    }
    for _ in 0..3 {
        let run = catch_unwind(AssertUnwindSafe(|| {
            block_on(e.replay_with(Faulty(Fault::Polling), 10, |_| pending::<Result<(), ()>>()))
        }));
        let r = run.expect("no panic comes out");
        assert_eq!((r.delivered, r.stopped), (0, Some(ReplayStop::Failed(Divert::NoTimer))));
        assert!(e.stats().pending, "kept at the head");
    }
    let mut seen = Vec::new();
    let r = block_on(e.replay_with(Faulty(Fault::Polling), 10, |t| {
        seen.push(*t);
        async { Ok::<_, ()>(()) }
    }));
    assert_eq!((r.delivered, r.stopped, seen), (2, Some(ReplayStop::Empty), vec![0, 1]));
    let s = e.stats();
    assert_eq!((s.replayed, s.replay_handed_back), (2, 0));
    assert_conserved(&s, 0);
}
