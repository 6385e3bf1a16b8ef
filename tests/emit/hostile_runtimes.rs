//! A hostile review of issue 20 ("runtimes"): the [`Timer`] the async
//! emitter and replay take (timers that panic, sleeps that panic when
//! polled or dropped, sleeps ready at once or never, a timer that has none
//! to give only now and then, budgets at the extremes, futures dropped at
//! every await point), the per-core [`LocalEmitter`] (re-entrancy, panics
//! in calls and sinks, the breaker moved under a call, the clock stepped a
//! year either way, conservation by trigger id, a reader on another thread)
//! and [`Breaker::next_due`]. Every test names the promise it attacks; the
//! accounting identities of src/emit/mod.rs are checked after each.
//!
//! Tests that fail are findings, kept failing on purpose (see the commit).

use crate::support::emit::*;
use crate::support::*;
use futures_lite::future::block_on;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::future::{pending, Future};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;
use tailguard::clock::ManualClock;
use tailguard::dlq::{DeadLetterQueue, Priority};
use tailguard::emit::{Divert, Emitted, Emitter, HandBack, LocalEmitter, ReplayStop};
use tailguard::timer::{Never, Timer};
use tailguard::{Breaker, Bulkhead, State};

// ---------------------------------------------------------------------------
// Deterministic futures and hostile timers.
// ---------------------------------------------------------------------------

/// A call future that is pending on its first poll (waking itself at once)
/// and ready with `value` on the second: a call that needs a timer, and
/// completes before it fires.
struct PendingOnce<V> {
    value: Option<V>,
    polled: bool,
}

fn pending_once<V>(value: V) -> PendingOnce<V> {
    PendingOnce {
        value: Some(value),
        polled: false,
    }
}

impl<V: Unpin> Future for PendingOnce<V> {
    type Output = V;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<V> {
        if !self.polled {
            self.polled = true;
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        Poll::Ready(self.value.take().expect("polled after completion"))
    }
}

/// A call future that never completes and panics when it is dropped.
struct HangThenPanicOnDrop;

impl Future for HangThenPanicOnDrop {
    type Output = Result<(), ()>;
    fn poll(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Self::Output> {
        Poll::Pending
    }
}

impl Drop for HangThenPanicOnDrop {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            panic!("a call future panicking in its destructor (expected by this test)");
        }
    }
}

/// What a hostile timer's sleep does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SleepKind {
    /// Ready at once (a zero deadline).
    Ready,
    /// Never ready.
    Forever,
    /// Panics when polled.
    PanicOnPoll,
    /// Never ready, and panics when dropped.
    PanicOnDrop,
}

struct HostileSleep(SleepKind);

impl Future for HostileSleep {
    type Output = ();
    fn poll(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<()> {
        match self.0 {
            SleepKind::Ready => Poll::Ready(()),
            SleepKind::Forever | SleepKind::PanicOnDrop => Poll::Pending,
            SleepKind::PanicOnPoll => panic!("a timer's sleep panicking when polled (expected by this test)"),
        }
    }
}

impl Drop for HostileSleep {
    fn drop(&mut self) {
        if self.0 == SleepKind::PanicOnDrop && !std::thread::panicking() {
            panic!("a timer's sleep panicking when dropped (expected by this test)");
        }
    }
}

/// A timer whose every sleep is of one kind.
#[derive(Clone, Copy, Debug)]
struct Hostile(SleepKind);

impl Timer for Hostile {
    type Sleep = HostileSleep;
    fn sleep(&self, _after: Duration) -> Option<HostileSleep> {
        Some(HostileSleep(self.0))
    }
}

/// A timer whose `sleep` itself panics.
#[derive(Clone, Copy, Debug)]
struct PanickingTimer;

impl Timer for PanickingTimer {
    type Sleep = HostileSleep;
    fn sleep(&self, _after: Duration) -> Option<HostileSleep> {
        panic!("a timer panicking as it arms (expected by this test)")
    }
}

/// A timer that has none to give on the arms listed in `none_on` (counted
/// from 1), and a sleep ready at once otherwise; it records every `after`.
#[derive(Default)]
struct Flaky {
    none_on: Vec<usize>,
    armed: Cell<usize>,
    afters: RefCell<Vec<Duration>>,
}

impl Timer for Flaky {
    type Sleep = HostileSleep;
    fn sleep(&self, after: Duration) -> Option<HostileSleep> {
        let n = self.armed.get() + 1;
        self.armed.set(n);
        self.afters.borrow_mut().push(after);
        (!self.none_on.contains(&n)).then_some(HostileSleep(SleepKind::Ready))
    }
}

/// Runs `f`, which must panic; swallows the panic (the hook still prints).
fn must_panic<R>(f: impl FnOnce() -> R) {
    assert!(catch_unwind(AssertUnwindSafe(f)).is_err(), "expected a panic");
}

/// Runs `f`, whether it panics or not (what is asserted is what it left).
fn panic_or_not<R>(f: impl FnOnce() -> R) {
    let _ = catch_unwind(AssertUnwindSafe(f));
}

/// A breaker on `clock` whose backoff is over: its next call is the one probe.
fn half_open(clock: &ManualClock) -> Breaker {
    let b = breaker(clock);
    b.trip_now();
    clock.advance(60 * SEC);
    b
}

fn one_slot_emitter(b: &Breaker) -> (Bulkhead, Emitter<u64>) {
    let bulkhead = Bulkhead::new(1).unwrap();
    let e = bulkhead_emitter(b, &bulkhead);
    (bulkhead, e)
}

/// The probe slot and the bulkhead slot are both free.
fn assert_slots_free(b: &Breaker, bulkhead: &Bulkhead) {
    assert_eq!(
        (bulkhead.in_flight(), b.snapshot().probes_in_flight),
        (0, 0),
        "bulkhead and probe slots given back"
    );
}

// ---------------------------------------------------------------------------
// The shared emitter's async emit and replay over hostile timers.
// ---------------------------------------------------------------------------

/// src/timer.rs (`Timer::sleep`): "If it panics anyway (or its sleep
/// does when polled), it is no timer to be had: an emit's call is cut as
/// for `None` (slots given back, permit cancelled, the trigger queued,
/// counted in `diverted_no_timer`)". A timer whose
/// `sleep` panics, in HALF_OPEN behind a one-slot bulkhead: both slots
/// back, no verdict, the trigger queued, the identities kept.
#[test]
fn a_timer_that_panics_as_it_arms_gives_back_both_slots_and_keeps_the_identities() {
    let clock = ManualClock::new();
    let b = half_open(&clock);
    let (bulkhead, e) = one_slot_emitter(&b);
    let out = block_on(e.emit_with(PanickingTimer, 1, Priority::Routine, |_| pending::<Result<(), ()>>()));
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
    assert_slots_free(&b, &bulkhead);
    assert_eq!(b.state(), State::HalfOpen, "no verdict on the consumer");
    let s = e.stats();
    assert_eq!(
        (s.diverted_no_timer, s.queued, s.cancelled),
        (1, 1, 0),
        "(diverted_no_timer, queued, cancelled)"
    );
    assert_conserved(&s, 1);
    // Nothing stuck: the next probe closes the breaker.
    assert!(block_on(e.emit_with(Never, 2, Priority::Routine, |_| async { Ok::<_, ()>(()) })).is_delivered());
    assert_eq!(b.state(), State::Closed);
    assert_conserved(&e.stats(), 2);
}

/// As above, for a sleep that panics when polled: both slots back, the
/// trigger queued (`diverted_no_timer`), the identities kept; and in
/// replay ("a replay keeps its trigger at the head, no attempt used") the
/// trigger kept first, the turn given back.
#[test]
fn a_sleep_that_panics_when_polled_gives_back_both_slots_and_loses_no_queued_trigger() {
    let clock = ManualClock::new();
    let b = half_open(&clock);
    let (bulkhead, e) = one_slot_emitter(&b);
    let out = block_on(e.emit_with(Hostile(SleepKind::PanicOnPoll), 1, Priority::Routine, |_| {
        pending::<Result<(), ()>>()
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
    assert_slots_free(&b, &bulkhead);
    assert_eq!((e.stats().diverted_no_timer, e.stats().queued), (1, 1));
    assert_conserved(&e.stats(), 1);

    b.reset();
    let _ = e.enqueue(10, Priority::Routine);
    let _ = e.enqueue(11, Priority::Routine);
    let r = block_on(e.replay_with(Hostile(SleepKind::PanicOnPoll), 10, |_| pending::<Result<(), ()>>()));
    assert_eq!(r.stopped, Some(ReplayStop::Failed(Divert::NoTimer)));
    assert_eq!(bulkhead.in_flight(), 0);
    let s = e.stats();
    assert!(s.pending, "the trigger in flight is kept at the head: {s:?}");
    assert_conserved(&s, 1);
    // Not Busy, and the kept one first.
    let mut seen = Vec::new();
    let r = block_on(e.replay_with(Never, 10, |t| {
        seen.push(*t);
        async { Ok::<_, ()>(()) }
    }));
    assert_eq!((r.delivered, seen), (3, vec![1, 10, 11]));
    assert_conserved(&e.stats(), 1);
}

/// src/emit/mod.rs: "nothing is dropped silently", and the counters'
/// docs: `delivered` is "Emits that delivered their trigger"; src/timer.rs
/// (since main's f1c45bb): "A panic in the sleep's drop, after the call
/// ended, is swallowed: the call's outcome stands". A call that completes
/// `Ok` under a timer whose sleep panics when dropped: delivered, judged
/// by the breaker, not cancelled. (A finding before f1c45bb: counted
/// cancelled, no verdict.)
#[test]
fn a_sleep_panicking_in_its_drop_after_a_delivered_call_still_counts_it_delivered() {
    let clock = ManualClock::new();
    let b = breaker(&clock);
    let e = emitter::<u64>(&b, 8);
    panic_or_not(|| {
        block_on(e.emit_with(Hostile(SleepKind::PanicOnDrop), 1, Priority::Routine, |_| {
            pending_once(Ok::<_, ()>(()))
        }))
    });
    let s = e.stats();
    assert_conserved(&s, 1);
    clock.advance(SEC);
    b.tick();
    let w = b.snapshot().window;
    assert_eq!(
        (s.delivered, s.cancelled, w.calls, w.cancelled),
        (1, 0, 1, 0),
        "the consumer has the trigger: delivered, and judged by the breaker (delivered, cancelled, calls, cancelled calls)"
    );
}

/// src/emit/call.rs (`settle`): a call that succeeded is delivered, not
/// queued: "the consumer has it: queueing it would deliver it twice". A
/// replay whose call completes `Ok` under a timer whose sleep panics when
/// dropped: the trigger was delivered once, and must not be kept at the
/// head to be delivered again by the next replay. (A finding before main's
/// f1c45bb: delivered twice.)
#[test]
fn a_sleep_panicking_in_its_drop_after_a_delivered_replay_call_does_not_deliver_it_twice() {
    let clock = ManualClock::new();
    let b = breaker(&clock);
    let e = emitter::<u64>(&b, 8);
    let _ = e.enqueue(7, Priority::Routine);
    let deliveries = Cell::new(0);
    panic_or_not(|| {
        block_on(e.replay_with(Hostile(SleepKind::PanicOnDrop), 10, |_| {
            deliveries.set(deliveries.get() + 1);
            pending_once(Ok::<_, ()>(()))
        }))
    });
    let r = block_on(e.replay_with(Never, 10, |_| {
        deliveries.set(deliveries.get() + 1);
        async { Ok::<_, ()>(()) }
    }));
    let s = e.stats();
    assert_conserved(&s, 0);
    assert_eq!(
        (deliveries.get(), r.delivered, s.replayed),
        (1, 0, 1),
        "trigger 7 reached the consumer once and is counted replayed (deliveries, delivered, replayed)"
    );
}

/// src/emit/mod.rs (`Divert::TimedOut`): "The call ran past the timeout".
/// A sleep ready at once (a zero deadline) cuts a pending call at its
/// first poll: diverted as timed out, counted failed and slow by the
/// breaker, both slots given back; in replay it uses one attempt (3 by
/// default, then handed back).
#[test]
fn a_sleep_ready_at_once_cuts_the_call_as_timed_out_and_uses_one_replay_attempt() {
    let clock = ManualClock::new();
    let b = half_open(&clock);
    let (bulkhead, e) = one_slot_emitter(&b);
    let out = block_on(e.emit_with(Hostile(SleepKind::Ready), 1, Priority::Routine, |_| {
        pending::<Result<(), ()>>()
    }));
    assert!(
        matches!(
            out,
            Emitted::Diverted {
                reason: Divert::TimedOut(_),
                ..
            }
        ),
        "{out:?}"
    );
    assert_slots_free(&b, &bulkhead);
    assert_eq!(b.state(), State::Open, "a timed-out probe re-opens");
    assert_conserved(&e.stats(), 1);

    b.reset();
    for attempt in 1..=3 {
        let r = block_on(e.replay_with(Hostile(SleepKind::Ready), 10, |_| pending::<Result<(), ()>>()));
        assert!(
            matches!(r.stopped, Some(ReplayStop::Failed(Divert::TimedOut(_)))),
            "{r:?}"
        );
        assert_eq!(r.handed_back.is_some(), attempt == 3, "attempt {attempt}: {r:?}");
        b.reset();
    }
    let s = e.stats();
    assert_eq!((s.replay_handed_back, s.queued, s.pending), (1, 0, false));
    assert_conserved(&s, 1);
}

/// src/emit/future.rs (`replay_with`): "Where `timer` has none to give,
/// the call in flight is cut at once, its permit cancelled, its trigger
/// kept at the head with no attempt used". A timer that has none only on
/// its second arm, inside one replay (the first trigger is delivered, the
/// second cut), and across replays (a timeout, a NoTimer, a timeout: with
/// `replay_attempts(2)` handed back at the third replay, not the second).
#[test]
fn a_timer_with_none_only_on_its_second_arm_uses_no_attempt_for_that_one() {
    let clock = ManualClock::new();
    let b = breaker(&clock);
    let e: Emitter<u64> = Emitter::builder(b.clone(), DeadLetterQueue::with_capacity(8).unwrap())
        .timeout(200 * MS)
        .unwrap()
        .replay_attempts(2)
        .unwrap()
        .build()
        .unwrap();
    let _ = e.enqueue(1, Priority::Routine);
    let _ = e.enqueue(2, Priority::Routine);
    // Arm 1: ready at once (a timeout), arm 2: none, arm 3: ready at once.
    let timer = Flaky {
        none_on: vec![2],
        ..Flaky::default()
    };
    let r = block_on(e.replay_with(&timer, 10, |t| {
        let t = *t;
        async move {
            if t == 1 {
                pending_once(Ok::<_, ()>(())).await
            } else {
                pending::<Result<(), ()>>().await
            }
        }
    }));
    // Trigger 1 completes on its second poll only: the sleep, ready at
    // once, wins; a timeout, one attempt, and the replay stops.
    assert_eq!(timer.armed.get(), 1, "a timeout stops the replay: {r:?}");
    assert!(
        matches!(r.stopped, Some(ReplayStop::Failed(Divert::TimedOut(_)))),
        "{r:?}"
    );
    // Replay 2: the timer has none: NoTimer, no attempt used.
    let r = block_on(e.replay_with(&timer, 10, |_| pending::<Result<(), ()>>()));
    assert_eq!(r.stopped, Some(ReplayStop::Failed(Divert::NoTimer)));
    assert!(r.handed_back.is_none(), "a NoTimer uses no attempt: {r:?}");
    // Replay 3: timed out again: the second attempt, handed back.
    let r = block_on(e.replay_with(&timer, 10, |_| pending::<Result<(), ()>>()));
    assert_eq!(r.handed_back, Some((1, Priority::Routine)), "{r:?}");
    // Trigger 2 is next, its attempts untouched.
    let r = block_on(e.replay_with(&timer, 10, |_| async { Ok::<_, ()>(()) }));
    assert_eq!(r.delivered, 1);
    let s = e.stats();
    assert_eq!(
        (s.replayed, s.replay_handed_back, s.pending, s.queued),
        (1, 1, false, 0)
    );
    assert_conserved(&s, 0);
    // Budgets handed to the timer: the whole 200 ms each time (manual clock).
    assert!(
        timer.afters.borrow().iter().all(|a| *a == 200 * MS),
        "{:?}",
        timer.afters
    );
}

/// src/timer.rs (`Timer::sleep`): "a duration too long for the runtime to
/// represent: one that never completes". A budget of `Duration::MAX` on
/// the manual clock is handed to the timer as it is, and a timer with none
/// to give still cuts the call at once (NoTimer), slots back.
#[test]
fn a_budget_of_duration_max_reaches_the_timer_whole_and_no_timer_still_cuts() {
    let clock = ManualClock::new();
    let b = half_open(&clock);
    let bulkhead = Bulkhead::new(1).unwrap();
    let e: Emitter<u64> = Emitter::builder(b.clone(), DeadLetterQueue::with_capacity(8).unwrap())
        .shared_bulkhead(bulkhead.clone())
        .timeout(Duration::MAX)
        .unwrap()
        .build()
        .unwrap();
    let timer = Flaky {
        none_on: vec![1],
        ..Flaky::default()
    };
    let out = block_on(e.emit_with(&timer, 1, Priority::Routine, |_| pending::<Result<(), ()>>()));
    assert_eq!(
        out,
        Emitted::Diverted {
            reason: Divert::NoTimer,
            displaced: None
        }
    );
    assert_eq!(*timer.afters.borrow(), vec![Duration::MAX]);
    assert_slots_free(&b, &bulkhead);
    // A call that completes a year later is in time under that budget.
    let out = block_on(e.emit_with(Hostile(SleepKind::Forever), 2, Priority::Routine, |_| {
        clock.advance(365 * DAY);
        pending_once(Ok::<_, ()>(()))
    }));
    assert!(out.is_delivered(), "{out:?}");
    assert_eq!(e.stats().overran, 0);
    assert_conserved(&e.stats(), 2);
}

/// src/emit/future.rs (`emit_with`): "Where `timer` has none to give
/// ([`Timer::sleep`] returns `None`: no runtime there), the call is cut at
/// once ... Nothing panics and nothing hangs." and (`emit`): "Outside a
/// tokio runtime ... a call that is not ready on its first poll is cut at
/// once and its trigger diverted with `Divert::NoTimer`". On a breaker
/// running on tokio's clock with a budget too long for a tokio instant
/// (`Duration::MAX`), outside any runtime: the first poll must answer.
#[cfg(feature = "tokio")]
#[test]
fn a_huge_budget_on_tokios_clock_with_no_timer_is_cut_at_once_not_left_hanging() {
    let b = tokio_breaker();
    let e: Emitter<u64> = Emitter::builder(b.clone(), DeadLetterQueue::with_capacity(8).unwrap())
        .timeout(Duration::MAX)
        .unwrap()
        .build()
        .unwrap();
    let mut cx = Context::from_waker(Waker::noop());
    let mut with_never = Box::pin(e.emit_with(Never, 1, Priority::Routine, |_| pending::<Result<(), ()>>()));
    let first = with_never.as_mut().poll(&mut cx);
    let mut with_tokio = Box::pin(e.emit(2, Priority::Routine, |_| pending::<Result<(), ()>>()));
    let second = with_tokio.as_mut().poll(&mut cx);
    assert!(
        matches!(
            (&first, &second),
            (
                Poll::Ready(Emitted::Diverted {
                    reason: Divert::NoTimer,
                    ..
                }),
                Poll::Ready(Emitted::Diverted {
                    reason: Divert::NoTimer,
                    ..
                })
            )
        ),
        "no timer to be had, so both are cut at once; got {first:?} and {second:?}"
    );
}

/// As above, for `replay_with`: "Where `timer` has none to give, the call
/// in flight is cut at once ... and the replay stops with
/// `ReplayStop::Failed(Divert::NoTimer)`".
#[cfg(feature = "tokio")]
#[test]
fn a_huge_budget_on_tokios_clock_with_no_timer_does_not_leave_a_replay_hanging() {
    let b = tokio_breaker();
    let e: Emitter<u64> = Emitter::builder(b.clone(), DeadLetterQueue::with_capacity(8).unwrap())
        .timeout(Duration::MAX)
        .unwrap()
        .build()
        .unwrap();
    let _ = e.enqueue(1, Priority::Routine);
    let mut cx = Context::from_waker(Waker::noop());
    let mut replay = Box::pin(e.replay_with(Never, 10, |_| pending::<Result<(), ()>>()));
    let polled = replay.as_mut().poll(&mut cx);
    assert!(
        matches!(
            &polled,
            Poll::Ready(r) if r.stopped == Some(ReplayStop::Failed(Divert::NoTimer))
        ),
        "no timer to be had: the replay stops at once; got {polled:?}"
    );
}

/// src/emit/future.rs (`emit`): dropping the emit's future "gives the
/// bulkhead slot and the breaker permit back (a probe's slot included)",
/// counted cancelled; here at its one await point (the call pending, its
/// sleep armed), on a runtime-less executor, and with a call future that
/// panics in its destructor as the emit is dropped: the panic goes on,
/// and the slots still come back.
#[test]
fn an_emit_dropped_at_its_await_gives_back_both_slots_even_if_its_call_panics_in_drop() {
    let clock = ManualClock::new();
    let b = half_open(&clock);
    let (bulkhead, e) = one_slot_emitter(&b);
    let mut cx = Context::from_waker(Waker::noop());
    {
        let mut f = Box::pin(e.emit_with(Hostile(SleepKind::Forever), 1, Priority::Routine, |_| {
            pending::<Result<(), ()>>()
        }));
        assert!(f.as_mut().poll(&mut cx).is_pending());
        assert_eq!(
            (bulkhead.in_flight(), b.snapshot().probes_in_flight),
            (1, 1),
            "in flight"
        );
    }
    assert_slots_free(&b, &bulkhead);
    let mut f = Box::pin(e.emit_with(Hostile(SleepKind::Forever), 2, Priority::Routine, |_| {
        HangThenPanicOnDrop
    }));
    assert!(f.as_mut().poll(&mut cx).is_pending());
    must_panic(move || drop(f));
    assert_slots_free(&b, &bulkhead);
    assert_eq!(b.state(), State::HalfOpen, "cancelled: no verdict");
    let s = e.stats();
    assert_eq!(s.cancelled, 2, "{s:?}");
    assert_conserved(&s, 2);
}

/// src/emit/future.rs (`Timed`): "The call's future is dropped as soon as
/// it is done (completed, timed out, panicked, or cut for want of a timer),
/// inside the same catch as its polls"; and "If `call` or its future
/// panics, the trigger is queued first (as failed) and the panic resumes".
/// A call future that panics in its destructor after a timeout, and after
/// a NoTimer cut: queued as failed (a failure for the breaker, not a
/// cancel), the panic goes on; in replay, one attempt used, kept at the
/// head.
#[test]
fn a_call_future_panicking_in_drop_after_a_timeout_or_a_no_timer_cut_is_a_failed_call() {
    for kind in ["timed out", "no timer"] {
        let clock = ManualClock::new();
        let b = half_open(&clock);
        let (bulkhead, e) = one_slot_emitter(&b);
        let timer = Flaky {
            none_on: if kind == "no timer" { vec![1, 2] } else { vec![] },
            ..Flaky::default()
        };
        must_panic(|| block_on(e.emit_with(&timer, 1, Priority::Routine, |_| HangThenPanicOnDrop)));
        assert_slots_free(&b, &bulkhead);
        assert_eq!(b.state(), State::Open, "{kind}: a failed probe re-opens");
        let s = e.stats();
        assert_eq!((s.diverted_failed, s.queued), (1, 1), "{kind}: {s:?}");
        assert_conserved(&s, 1);

        b.reset();
        must_panic(|| block_on(e.replay_with(&timer, 10, |_| HangThenPanicOnDrop)));
        let s = e.stats();
        assert!(s.pending, "{kind}: kept at the head: {s:?}");
        assert_eq!(bulkhead.in_flight(), 0);
        assert_conserved(&s, 1);
        // Two more failed calls hand it back (three attempts, default).
        b.reset();
        let r = block_on(e.replay_with(Never, 10, |_| async { Err::<(), _>(()) }));
        assert!(r.handed_back.is_none(), "{kind}: {r:?}");
        let r = block_on(e.replay_with(Never, 10, |_| async { Err::<(), _>(()) }));
        assert_eq!(
            r.handed_back,
            Some((1, Priority::Routine)),
            "{kind}: the panic used an attempt"
        );
        assert_conserved(&e.stats(), 1);
    }
}

/// src/emit/future.rs (`replay`): "Dropping the returned future mid-call
/// puts the trigger in flight back at the head of the queue (no attempt
/// used)": and gives the probe and bulkhead slots and the replay turn back
/// (the next replay is not `Busy`), on a runtime-less executor.
#[test]
fn a_replay_dropped_at_its_await_keeps_the_trigger_first_and_frees_its_turn_and_slots() {
    let clock = ManualClock::new();
    let b = breaker(&clock);
    let bulkhead = Bulkhead::new(1).unwrap();
    let e: Emitter<u64> = Emitter::builder(b.clone(), DeadLetterQueue::with_capacity(8).unwrap())
        .shared_bulkhead(bulkhead.clone())
        .replay_attempts(2)
        .unwrap()
        .build()
        .unwrap();
    let _ = e.enqueue(1, Priority::Routine);
    let _ = e.enqueue(2, Priority::Critical);
    let mut cx = Context::from_waker(Waker::noop());
    for _ in 0..3 {
        let mut f = Box::pin(e.replay_with(Hostile(SleepKind::Forever), 10, |_| pending::<Result<(), ()>>()));
        assert!(f.as_mut().poll(&mut cx).is_pending());
        assert_eq!(bulkhead.in_flight(), 1);
        drop(f);
        assert_eq!(bulkhead.in_flight(), 0);
        let s = e.stats();
        assert!(s.pending, "{s:?}");
        assert_conserved(&s, 0);
    }
    // replay_attempts(2): had the drops used attempts, this one failing
    // call would hand trigger 2 back.
    let r = block_on(e.replay_with(Never, 10, |t| {
        assert_eq!(*t, 2, "the kept trigger first");
        async { Err::<(), _>(()) }
    }));
    assert!(r.handed_back.is_none(), "the drops used no attempt: {r:?}");
    let mut seen = Vec::new();
    let r = block_on(e.replay_with(Never, 10, |t| {
        seen.push(*t);
        async { Ok::<_, ()>(()) }
    }));
    assert_eq!((r.delivered, r.stopped, seen), (2, Some(ReplayStop::Empty), vec![2, 1]));
    assert_conserved(&e.stats(), 0);
}

// ---------------------------------------------------------------------------
// The per-core emitter.
// ---------------------------------------------------------------------------

fn core_breaker(clock: &ManualClock) -> Breaker {
    Breaker::builder()
        .clock(clock.clone())
        .ticker(false)
        .half_open_probes(1)
        .success_to_close(1)
        .local_handles(1)
        .build()
        .unwrap()
}

fn local<T>(b: &Breaker, capacity: usize) -> LocalEmitter<T> {
    LocalEmitter::builder(b.clone(), DeadLetterQueue::with_capacity(capacity).unwrap())
        .bulkhead(2)
        .unwrap()
        .timeout(200 * MS)
        .unwrap()
        .replay_attempts(2)
        .unwrap()
        .build_local()
        .unwrap()
}

/// Records that trigger `id` ended, `how`; it must end once.
fn end_once(ended: &mut HashMap<u64, &'static str>, id: u64, how: &'static str) {
    if let Some(before) = ended.insert(id, how) {
        panic!("trigger {id} ended twice ({before}, then {how})");
    }
}

/// src/emit/local.rs (`shutdown`): "From then on a trigger not delivered is
/// handed back (`HandBack::ShutDown`), and a replay running (this was
/// called from its call) hands back the trigger it holds instead of
/// keeping it". Re-entrancy from every side: a shutdown from inside an
/// emit's call, emits and drains from inside a shutdown's sink, a replay
/// from inside a drain's sink; every trigger ends once, the identities hold.
#[test]
fn a_local_emitter_called_back_from_its_own_calls_and_sinks_loses_nothing() {
    let clock = ManualClock::new();
    let b = core_breaker(&clock);
    let e = local::<u64>(&b, 16);
    let mut ended: HashMap<u64, &'static str> = HashMap::new();
    let end = end_once;
    b.trip_now();
    for id in 0..4 {
        let _ = e.emit_blocking(id, Priority::Routine, |_, _| Ok::<_, ()>(()));
    }
    b.reset();
    // A replay from inside a drain's sink: the drain took 0, the replay
    // delivers 1..3 then the drain goes on with an empty queue.
    let replayed = RefCell::new(Vec::new());
    let drained = e.drain(2, |t, _| {
        end(&mut ended, t, "drained");
        let r = e.replay_blocking(10, |t, _| {
            replayed.borrow_mut().push(*t);
            Ok::<_, ()>(())
        });
        assert_eq!(r.stopped, Some(ReplayStop::Empty));
    });
    assert_eq!(drained, 1);
    for t in replayed.take() {
        end(&mut ended, t, "replayed");
    }
    // An emit whose call shuts the emitter down and then fails: handed back.
    let _ = e.enqueue(10, Priority::Critical);
    let out = e.emit_blocking(11, Priority::Routine, |_, _| {
        let n = e.shutdown(|t, _| {
            end(&mut ended, t, "shutdown sink");
            // An emit from inside the sink: handed back, shut down.
            let inner = e.emit_blocking(12, Priority::Routine, |_, _| Err::<(), _>("down"));
            assert!(matches!(
                inner,
                Emitted::HandedBack {
                    trigger: 12,
                    not_queued: HandBack::ShutDown,
                    ..
                }
            ));
            // A drain from inside the sink: nothing left.
            assert_eq!(e.drain(10, |_, _| unreachable!("drained twice")), 0);
        });
        assert_eq!(n, 1);
        Err::<(), _>("failed after the shutdown")
    });
    assert!(
        matches!(
            out,
            Emitted::HandedBack {
                trigger: 11,
                not_queued: HandBack::ShutDown,
                ..
            }
        ),
        "{out:?}"
    );
    end(&mut ended, 11, "handed back");
    end(&mut ended, 12, "handed back");
    let mut ids: Vec<_> = ended.keys().copied().collect();
    ids.sort_unstable();
    assert_eq!(ids, vec![0, 1, 2, 3, 10, 11, 12]);
    let s = e.stats();
    assert_eq!(s.bulkhead_in_flight, 0);
    assert_conserved(&s, 6); // 0..4, 11, 12 emitted; 10 by hand
}

/// src/emit/local.rs (`emit_blocking`): "a call that panics has its
/// trigger queued (as failed) before the panic goes on"; and `drain`
/// hands triggers to a sink "the one kept at the head first": a panicking
/// sink loses only the trigger it was handed (counted drained), the rest
/// stay queued, and a shutdown whose sink panics has still shut down and
/// leaves the rest for the next drain.
#[test]
fn a_local_sink_that_panics_loses_only_its_own_trigger_and_keeps_the_identities() {
    let clock = ManualClock::new();
    let b = core_breaker(&clock);
    let e = local::<u64>(&b, 16);
    for id in 0..5 {
        let _ = e.enqueue(id, Priority::Routine);
    }
    must_panic(|| e.drain(10, |t, _| assert_ne!(t, 1, "a sink bug (expected by this test)")));
    let s = e.stats();
    assert_eq!((s.drained, s.queued), (2, 3), "{s:?}");
    assert_conserved(&s, 0);
    must_panic(|| e.shutdown(|t, _| assert_ne!(t, 2, "a sink bug (expected by this test)")));
    assert!(e.is_shut_down());
    let mut rest = Vec::new();
    assert_eq!(e.drain(10, |t, _| rest.push(t)), 2);
    assert_eq!(rest, vec![3, 4]);
    // A panicking call after that: the queue is shut, the trigger dropped
    // and counted cancelled and dropped_in_panics.
    must_panic(|| {
        e.emit_blocking(9, Priority::Routine, |_, _| -> Result<(), ()> {
            panic!("call bug (expected)")
        })
    });
    let s = e.stats();
    assert_eq!((s.cancelled, s.dropped_in_panics, s.bulkhead_in_flight), (1, 1, 0));
    assert_conserved(&s, 1);
}

/// src/emit/local.rs (`build_local`): "A `ConfigError` for
/// `"local_handles"` when every local shard of the breaker is taken";
/// the shard is the emitter's for its life: while it lives no other
/// emitter gets one, and the breaker's plain handles keep working beside it.
#[test]
fn exhausted_local_handles_are_a_typed_error_and_the_breaker_still_works() {
    let clock = ManualClock::new();
    let b = Breaker::builder()
        .clock(clock.clone())
        .ticker(false)
        .local_handles(2)
        .build()
        .unwrap();
    let a = local::<u64>(&b, 8);
    let c = local::<u64>(&b, 8);
    for _ in 0..3 {
        let err = LocalEmitter::<u64>::builder(b.clone(), DeadLetterQueue::with_capacity(8).unwrap())
            .build_local()
            .unwrap_err();
        assert_eq!(err.field(), "local_handles");
    }
    assert!(a
        .emit_blocking(1, Priority::Routine, |_, _| Ok::<_, ()>(()))
        .is_delivered());
    assert!(c
        .emit_blocking(2, Priority::Routine, |_, _| Ok::<_, ()>(()))
        .is_delivered());
    b.allow().unwrap().record(true);
    clock.advance(2 * SEC);
    b.tick();
    assert_eq!(
        b.snapshot().window.calls,
        3,
        "both cores' calls and the shared one counted"
    );
    assert_conserved(&a.stats(), 1);
    assert_conserved(&c.stats(), 1);
}

/// src/emit/local.rs: "Its outcomes ..., its counters and their identities
/// are the shared emitter's". The breaker tripped, reset, forced open and
/// forced closed from inside a call: the call's verdict lands (or is
/// dropped as stale) without panicking, the bulkhead slot comes back, the
/// replay obeys the mode it finds, and the identities hold after each.
#[test]
fn the_breaker_moved_under_a_local_call_keeps_the_local_accounting() {
    let clock = ManualClock::new();
    let b = core_breaker(&clock);
    let e = local::<u64>(&b, 16);
    let mut emitted = 0;
    type Move = (&'static str, fn(&Breaker));
    let moves: [Move; 5] = [
        ("trip", |b| b.trip_now()),
        ("reset", |b| b.reset()),
        ("force open", |b| b.force_open()),
        ("force closed", |b| b.force_closed()),
        ("trip and reset", |b| {
            b.trip_now();
            b.reset();
        }),
    ];
    for (name, mv) in moves {
        for ok in [true, false] {
            b.reset();
            emitted += 1;
            let out = e.emit_blocking(emitted, Priority::Routine, |_, _| {
                mv(&b);
                if ok {
                    Ok(())
                } else {
                    Err(name)
                }
            });
            assert_eq!(out.is_delivered(), ok, "{name}: {out:?}");
            let s = e.stats();
            assert_eq!(s.bulkhead_in_flight, 0, "{name}");
            assert_conserved(&s, emitted);
            // A replay from inside a call that moved the breaker.
            let r = e.replay_blocking(10, |_, _| {
                mv(&b);
                Ok::<_, ()>(())
            });
            assert!(r.handed_back.is_none(), "{name}: {r:?}");
            assert_conserved(&e.stats(), emitted);
            clock.advance(SEC);
            b.tick();
        }
    }
    b.reset();
    let r = e.replay_blocking(100, |_, _| Ok::<_, ()>(()));
    assert_eq!(r.stopped, Some(ReplayStop::Empty), "{r:?}");
    let s = e.stats();
    assert_eq!(s.queued, 0);
    assert_conserved(&s, emitted);
}

/// src/emit/local.rs (`emit_blocking`): "A call returning after its
/// deadline counts as timed out (an `Ok` is still delivered, counted in
/// `overran`)"; src/emit/mod.rs (`Deadline::remaining`): "zero once it has
/// run out". The manual clock stepped forward a year inside a call (timed
/// out, overran) and back a year inside one (never negative: in time), with
/// a tick after each; the deadline stays within its budget.
#[test]
fn a_local_call_across_a_clock_step_of_a_year_either_way() {
    let clock = ManualClock::new();
    clock.advance(2 * 365 * DAY);
    let b = core_breaker(&clock);
    let e = local::<u64>(&b, 16);
    let year = 365 * DAY;
    let out = e.emit_blocking(1, Priority::Routine, |_, d| {
        clock.advance(year);
        assert_eq!(d.remaining(), Duration::ZERO);
        assert!(d.expired());
        Ok::<_, ()>(())
    });
    assert!(out.is_delivered());
    assert_eq!(e.stats().overran, 1);
    b.tick();
    let out = e.emit_blocking(2, Priority::Routine, |_, d| {
        clock.rewind(year);
        assert!(d.remaining() <= 200 * MS, "{d:?}");
        Err::<(), _>("failed, in no time")
    });
    assert!(
        matches!(
            out,
            Emitted::Diverted {
                reason: Divert::Failed(_),
                ..
            }
        ),
        "{out:?}"
    );
    b.tick();
    let out = e.emit_blocking(3, Priority::Routine, |_, _| {
        clock.advance(2 * year);
        Err::<(), _>("late")
    });
    assert!(
        matches!(
            out,
            Emitted::Diverted {
                reason: Divert::TimedOut(_),
                ..
            }
        ),
        "{out:?}"
    );
    let r = e.replay_blocking(10, |_, _| {
        clock.rewind(year);
        Ok::<_, ()>(())
    });
    assert_eq!(r.delivered, 2, "{r:?}");
    let s = e.stats();
    assert_eq!((s.delivered, s.replayed, s.overran, s.bulkhead_in_flight), (1, 2, 1, 0));
    assert_conserved(&s, 3);
}

/// A small deterministic generator (xorshift), for the random runs.
struct Rng(u64);

impl Rng {
    fn next(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// src/emit/local.rs: "the same outcomes, counters, identities and replay
/// policy": conservation by trigger id under random operations, with
/// re-entrant ones (an emit, an enqueue, a drain or a replay from inside a
/// call; panicking calls and sinks), the breaker tripped and reset, the
/// clock stepped either way; each trigger ends exactly once (delivered,
/// handed back, displaced, drained, or dropped in a panic) and the
/// identities hold after every step.
#[test]
fn every_local_trigger_ends_once_under_random_reentrant_operations() {
    for seed in 1..=6u64 {
        let clock = ManualClock::new();
        clock.advance(DAY);
        let b = core_breaker(&clock);
        let e = local::<u64>(&b, 8);
        let rng = RefCell::new(Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1));
        let ended: RefCell<HashMap<u64, &'static str>> = RefCell::new(HashMap::new());
        // Recorded, not panicked on: a panic here could be caught as a call's.
        let twice: RefCell<Vec<(u64, &'static str, &'static str)>> = RefCell::new(Vec::new());
        let end = |id: u64, how: &'static str| {
            let before = ended.borrow_mut().insert(id, how);
            if let Some(before) = before {
                twice.borrow_mut().push((id, before, how));
            }
        };
        let next_id = Cell::new(0u64);
        let fresh = || {
            let id = next_id.get();
            next_id.set(id + 1);
            id
        };
        let class = |n: u64| [Priority::Idle, Priority::Routine, Priority::Critical][n as usize % 3];
        let emitted = Cell::new(0u64);
        // Settles an emit's outcome into `ended`.
        let settle = |id: u64, out: Emitted<u64, (), &'static str>| match out {
            Emitted::Delivered(()) => end(id, "delivered"),
            Emitted::Diverted { displaced, .. } => {
                if let Some((old, _)) = displaced {
                    end(old, "displaced");
                }
            }
            Emitted::HandedBack { trigger, .. } => end(trigger, "handed back"),
        };
        let one_emit = |depth: u32| {
            let id = fresh();
            emitted.set(emitted.get() + 1);
            let how = rng.borrow_mut().next(6);
            let cls = class(rng.borrow_mut().next(3));
            let out = catch_unwind(AssertUnwindSafe(|| {
                e.emit_blocking(id, cls, |_, _| match how {
                    0 => Err("failed"),
                    1 => {
                        clock.advance(300 * MS);
                        Ok(())
                    }
                    2 if depth == 0 => {
                        // Re-entrant: an enqueue and a drain from inside the call.
                        let extra = fresh();
                        match e.enqueue(extra, class(extra)) {
                            Ok(tailguard::dlq::Pushed::Queued) => {}
                            Ok(tailguard::dlq::Pushed::Displaced(old, _)) => end(old, "displaced"),
                            Err((t, _)) => end(t, "handed back"),
                        }
                        e.drain(1, |t, _| end(t, "drained"));
                        Ok(())
                    }
                    3 => panic!("call bug (expected by this test)"),
                    _ => Ok(()),
                })
            }));
            // Err: queued as failed, or dropped (counted) if the queue could not take it.
            if let Ok(out) = out {
                settle(id, out);
            }
        };
        for step in 0..400 {
            let op = rng.borrow_mut().next(10);
            match op {
                0..=4 => one_emit(0),
                5 => b.trip_now(),
                6 => b.reset(),
                7 => {
                    let fail_on = rng.borrow_mut().next(4);
                    let r = catch_unwind(AssertUnwindSafe(|| {
                        let mut n = 0;
                        e.replay_blocking(3, |t, _| {
                            n += 1;
                            let result = match (n, fail_on) {
                                (1, 0) => Err("failed again"),
                                (1, 1) => panic!("replay call bug (expected by this test)"),
                                (2, 2) => {
                                    // An emit from inside a replay's call.
                                    one_emit(1);
                                    Ok(())
                                }
                                _ => Ok(()),
                            };
                            if result.is_ok() {
                                end(*t, "replayed"); // an Ok is delivered, late or not
                            }
                            result
                        })
                    }));
                    if let Ok(Some((t, _))) = r.map(|r| r.handed_back) {
                        end(t, "replay handed back");
                    }
                }
                8 => {
                    if rng.borrow_mut().next(2) == 0 {
                        clock.advance(365 * DAY);
                    } else {
                        clock.rewind(365 * DAY);
                    }
                    b.tick();
                }
                _ => {
                    let _ = catch_unwind(AssertUnwindSafe(|| {
                        e.drain(2, |t, _| {
                            end(t, "drained");
                            if t % 7 == 0 {
                                panic!("sink bug (expected by this test)");
                            }
                        })
                    }));
                }
            }
            let s = e.stats();
            assert_eq!(s.bulkhead_in_flight, 0, "seed {seed} step {step}");
            assert_conserved(&s, emitted.get());
        }
        // A last replay, then a shutdown: whatever is left goes to the sink.
        b.reset();
        let r = e.replay_blocking(usize::MAX, |t, _| {
            end(*t, "replayed");
            Ok::<_, ()>(())
        });
        assert!(r.handed_back.is_none());
        e.shutdown(|t, _| end(t, "shutdown"));
        let s = e.stats();
        assert_conserved(&s, emitted.get());
        assert_eq!((s.queued, s.pending), (0, false));
        assert!(
            twice.borrow().is_empty(),
            "seed {seed}: ended twice: {:?}",
            twice.borrow()
        );
        // Every id ended exactly once, but those dropped in panics (counted).
        let seen = ended.borrow().len() as u64;
        assert_eq!(
            next_id.get() - seen,
            s.dropped_in_panics,
            "seed {seed}: every trigger accounted for: {s:?}"
        );
    }
}

/// src/emit/local.rs (`LocalStatsReader`): "reads each with a `Relaxed`
/// load and sees a value the core stored (never a torn one), each only
/// ever going up"; src/emit/mod.rs (`stats`): "a reading never times more
/// emits than it counts ended". A reader on another thread while the core
/// emits, diverts, replays and drains.
#[test]
fn a_reader_on_another_thread_sees_counters_only_go_up() {
    let clock = ManualClock::new();
    let b = core_breaker(&clock);
    let e = local::<u64>(&b, 64);
    let reader = e.stats_reader();
    let done = Arc::new(AtomicUsize::new(0));
    let seen = Arc::new(Mutex::new(0usize));
    std::thread::scope(|s| {
        let (done2, seen2) = (Arc::clone(&done), Arc::clone(&seen));
        s.spawn(move || {
            let mut last = reader.read();
            let mut reads = 0;
            while done2.load(Ordering::Acquire) == 0 || reads < 10 {
                let now = reader.read();
                for (a, b, what) in [
                    (last.emitted(), now.emitted(), "emitted"),
                    (last.delivered, now.delivered, "delivered"),
                    (last.replayed, now.replayed, "replayed"),
                    (last.drained, now.drained, "drained"),
                    (last.emit_times.count(), now.emit_times.count(), "emit times"),
                ] {
                    assert!(a <= b, "{what} went down: {a} then {b}");
                }
                assert!(
                    now.emit_times.count() <= now.emitted(),
                    "more emits timed than ended: {now:?}"
                );
                last = now;
                reads += 1;
            }
            *seen2.lock().unwrap() = reads;
        });
        for i in 0..20_000u64 {
            match i % 50 {
                0 => b.trip_now(),
                10 => {
                    b.reset();
                    let _ = e.replay_blocking(8, |_, _| Ok::<_, ()>(()));
                }
                20 => {
                    e.drain(4, |_, _| {});
                }
                _ => {}
            }
            let _ = e.emit_blocking(i, Priority::Routine, |_, _| if i % 3 == 0 { Err(()) } else { Ok(()) });
        }
        done.store(1, Ordering::Release);
    });
    assert!(*seen.lock().unwrap() >= 10);
    assert_conserved(&e.stats(), 20_000);
}

// ---------------------------------------------------------------------------
// Breaker::next_due.
// ---------------------------------------------------------------------------

/// src/breaker/mod.rs (`next_due`): "How long from now until `tick` next
/// has work to do: the end of the window in progress ... Ticking earlier
/// does nothing but the check". For windows of 1 ms, 1 s and 1 h, and
/// after the clock jumped a year forward: a tick one nanosecond before
/// `next_due` closes nothing, a tick at it closes the window, and the next
/// `next_due` is at most one window.
#[test]
fn a_tick_at_next_due_closes_the_window_and_one_nanosecond_earlier_does_not() {
    for window in [MS, SEC, HOUR] {
        let clock = ManualClock::new();
        clock.advance(3 * window + 7 * NS);
        let b = builder(&clock).window(window).build().unwrap();
        for round in 0..6 {
            if round == 3 {
                clock.advance(365 * DAY);
                assert_eq!(b.next_due(), Duration::ZERO, "{window:?}: due after a jump");
                b.tick();
            }
            let due = b.next_due();
            // The first window lasts up to one and a half.
            assert!(
                due > Duration::ZERO && due <= window + window / 2,
                "{window:?} round {round}: {due:?}"
            );
            let closed = b.snapshot().window.closed_at;
            clock.advance(due - NS);
            b.tick();
            assert_eq!(b.snapshot().window.closed_at, closed, "{window:?}: closed early");
            assert_eq!(b.next_due(), NS);
            clock.advance(NS);
            b.tick();
            assert!(
                b.snapshot().window.closed_at > closed,
                "{window:?} round {round}: not closed at next_due"
            );
        }
    }
}

/// `next_due` when OPEN: "or, when OPEN, the end of its backoff if that is
/// sooner (then the next tick moves it to HALF_OPEN without waiting for a
/// caller)"; after a reset, the window's end again.
#[test]
fn next_due_when_open_is_the_backoffs_end_and_after_a_reset_the_windows() {
    let clock = ManualClock::new();
    let b = builder(&clock)
        .window(HOUR)
        .base_backoff(5 * SEC)
        .jitter(tailguard::Jitter::None)
        .build()
        .unwrap();
    b.trip_now();
    let due = b.next_due();
    assert_eq!(due, 5 * SEC);
    clock.advance(due - NS);
    b.tick();
    assert_eq!(b.state(), State::Open);
    clock.advance(NS);
    b.tick();
    assert_eq!(b.state(), State::HalfOpen);
    b.reset();
    let due = b.next_due();
    assert!(due > 5 * SEC && due <= HOUR, "{due:?}");
}

/// src/breaker/mod.rs (`next_due`): "How long from now until `tick` next
/// has work to do: the end of the window in progress"; ZERO "also when the
/// clock stepped back since the last tick: that tick absorbs the step ...
/// and `next_due` after it says when the window ends". After the clock
/// steps back a year (with no tick in between), a runtime that follows
/// `next_due` (tick, ask, sleep that long, tick) must see the window close:
/// that is the promise a runtime arms its one timer on. (A finding of the
/// review: `next_due` said 1 s, and a tick then closed nothing.)
#[test]
fn a_tick_at_next_due_closes_the_window_after_the_clock_stepped_back() {
    let clock = ManualClock::new();
    clock.advance(2 * 365 * DAY);
    let b = builder(&clock).window(SEC).build().unwrap();
    clock.advance(3 * SEC);
    b.tick();
    let closed = b.snapshot().window.closed_at;
    clock.rewind(365 * DAY);
    assert_eq!(b.next_due(), Duration::ZERO, "the step back is the next tick's work");
    assert_eq!(b.next_due(), Duration::ZERO, "asking changes nothing");
    b.tick(); // absorbs the step
    assert_eq!(b.snapshot().window.closed_at, closed, "nothing closed yet");
    let due = b.next_due();
    assert!(due > Duration::ZERO && due <= SEC, "{due:?}");
    clock.advance(due);
    b.tick();
    assert!(
        b.snapshot().window.closed_at > closed,
        "ticked at next_due ({due:?}) after a backward step: the window did not close (next_due now {:?})",
        b.next_due()
    );
}

/// src/breaker/mod.rs (`next_due`): "Ticking earlier does nothing but the
/// check"; and `tick` "re-opens a HALF_OPEN breaker with a probe out past
/// its lease". A runtime that only ticks at `next_due` must not miss that
/// work: with a probe out and its lease ending before the window does,
/// either `next_due` is no later than the lease's end, or a tick before
/// `next_due` changes nothing.
#[test]
fn next_due_is_no_later_than_a_probes_lease_running_out() {
    let clock = ManualClock::new();
    let b = builder(&clock)
        .window(HOUR)
        .latency_threshold(50 * MS)
        .probe_lease(SEC)
        .base_backoff(SEC)
        .jitter(tailguard::Jitter::None)
        .half_open_probes(1)
        .build()
        .unwrap();
    b.trip_now();
    clock.advance(SEC);
    b.tick();
    assert_eq!(b.state(), State::HalfOpen);
    let probe = b.allow().expect("the probe");
    let due = b.next_due();
    let lease_left = SEC;
    clock.advance(lease_left);
    b.tick();
    let state = b.state();
    drop(probe);
    assert!(
        due <= lease_left || state == State::HalfOpen,
        "next_due said {due:?}, but a tick {lease_left:?} later (before it) re-opened the breaker ({state:?})"
    );
}

// ---------------------------------------------------------------------------
// The per-core emitter's async emit and replay (merged from main).
// ---------------------------------------------------------------------------

/// A waker that does nothing (`Waker::noop` is newer than the crate's MSRV).
struct NoopWake;

impl std::task::Wake for NoopWake {
    fn wake(self: Arc<Self>) {}
}

/// Polls `f` once with a waker that does nothing.
fn poll_once<F: Future + ?Sized>(f: Pin<&mut F>) -> Poll<F::Output> {
    f.poll(&mut Context::from_waker(&Waker::from(Arc::new(NoopWake))))
}

/// src/emit/future.rs (`LocalEmitter::emit_with`): "Many emits of one core
/// may be in flight at once (each holds one of the core's bulkhead
/// slots)"; and, as `Emitter::emit`, a dropped emit gives back its bulkhead
/// slot and its probe slot and is counted cancelled. Three emits in flight
/// on one core, dropped out of the order they started (the middle one's
/// call panicking in its destructor), in HALF_OPEN with one probe: every
/// local slot and the probe slot come back, each drop is counted once.
#[test]
fn local_async_emits_dropped_out_of_order_give_back_every_slot() {
    let clock = ManualClock::new();
    let b = core_breaker(&clock);
    let e = LocalEmitter::builder(b.clone(), DeadLetterQueue::with_capacity(16).unwrap())
        .bulkhead(3)
        .unwrap()
        .build_local()
        .unwrap();
    let hang = |_: &u64| pending::<Result<(), ()>>();
    // CLOSED: three in flight, a fourth diverted BulkheadFull.
    let mut a = Box::pin(e.emit_with(Hostile(SleepKind::Forever), 1, Priority::Routine, hang));
    let mut m = Box::pin(e.emit_with(Hostile(SleepKind::Forever), 2, Priority::Routine, |_| {
        HangThenPanicOnDrop
    }));
    let mut z = Box::pin(e.emit_with(Hostile(SleepKind::Forever), 3, Priority::Routine, hang));
    assert!(poll_once(a.as_mut()).is_pending());
    assert!(poll_once(m.as_mut()).is_pending());
    assert!(poll_once(z.as_mut()).is_pending());
    assert_eq!(e.stats().bulkhead_in_flight, 3);
    let full = block_on(e.emit_with(Never, 4, Priority::Routine, hang));
    assert!(
        matches!(
            full,
            Emitted::Diverted {
                reason: Divert::BulkheadFull,
                ..
            }
        ),
        "{full:?}"
    );
    must_panic(move || drop(m));
    assert_eq!(e.stats().bulkhead_in_flight, 2);
    drop(a);
    drop(z);
    let s = e.stats();
    assert_eq!(
        (s.bulkhead_in_flight, s.cancelled),
        (0, 3),
        "{:?}",
        (s.bulkhead_in_flight, s.cancelled)
    );
    assert_conserved(&s, 4);
    // HALF_OPEN, one probe: the probe in flight, the next rejected; the
    // probe dropped gives its slot back.
    b.trip_now();
    clock.advance(60 * SEC);
    let mut probe = Box::pin(e.emit_with(Hostile(SleepKind::Forever), 5, Priority::Routine, hang));
    assert!(poll_once(probe.as_mut()).is_pending());
    assert_eq!(b.snapshot().probes_in_flight, 1);
    let turned = block_on(e.emit_with(Never, 6, Priority::Routine, hang));
    assert!(
        matches!(
            turned,
            Emitted::Diverted {
                reason: Divert::Open(_),
                ..
            }
        ),
        "{turned:?}"
    );
    drop(probe);
    assert_eq!((b.snapshot().probes_in_flight, e.stats().bulkhead_in_flight), (0, 0));
    assert_eq!(b.state(), State::HalfOpen);
    assert!(block_on(e.emit_with(Never, 7, Priority::Routine, |_| async { Ok::<_, ()>(()) })).is_delivered());
    assert_eq!(b.state(), State::Closed);
    assert_conserved(&e.stats(), 7);
}

/// src/emit/local.rs (`shutdown`): "a replay running ... hands back the
/// trigger it holds instead of keeping it"; src/emit/replay.rs: "either the
/// drain takes it, or the replay sees `closed` and hands it back". On one
/// core, interleaved at the await points of an async replay: while its
/// call is pending, another task emits (diverted), drains, and a blocking
/// replay is `Busy`; then a shutdown; the replay's call then fails: its
/// trigger comes back in `handed_back`, never lost nor kept, every trigger
/// ends once and the identities hold.
#[test]
fn a_local_async_replay_interleaved_with_emits_drains_and_a_shutdown_loses_nothing() {
    let clock = ManualClock::new();
    let b = core_breaker(&clock);
    let e = local::<u64>(&b, 16);
    let mut ended: HashMap<u64, &'static str> = HashMap::new();
    for id in [1, 2, 3] {
        let _ = e.enqueue(id, Priority::Routine);
    }
    let fail = Cell::new(false);
    let calls = Cell::new(0);
    let mut r = Box::pin(e.replay_with(Hostile(SleepKind::Forever), 10, |t| {
        calls.set(calls.get() + 1);
        let t = *t;
        let fail = &fail;
        std::future::poll_fn(move |_| {
            if fail.get() {
                Poll::Ready(Err::<(), _>(t))
            } else {
                Poll::Pending
            }
        })
    }));
    assert!(poll_once(r.as_mut()).is_pending(), "trigger 1 in flight");
    // Another task on the core, between two polls of the replay.
    b.trip_now();
    let out = block_on(e.emit_with(Never, 4, Priority::Critical, |_| async { Ok::<_, ()>(()) }));
    assert!(matches!(out, Emitted::Diverted { .. }), "{out:?}");
    b.reset();
    assert_eq!(
        e.replay_blocking(10, |_, _| Ok::<_, ()>(())).stopped,
        Some(ReplayStop::Busy)
    );
    assert_eq!(e.drain(1, |t, _| end_once(&mut ended, t, "drained")), 1);
    assert!(poll_once(r.as_mut()).is_pending(), "still in flight");
    let n = e.shutdown(|t, _| end_once(&mut ended, t, "shutdown"));
    assert_eq!(n, 2);
    fail.set(true);
    let Poll::Ready(out) = poll_once(r.as_mut()) else {
        panic!("the call failed: the replay ends")
    };
    assert_eq!(out.handed_back, Some((1, Priority::Routine)), "{out:?}");
    end_once(&mut ended, 1, "replay handed back");
    drop(r);
    let mut ids: Vec<_> = ended.keys().copied().collect();
    ids.sort_unstable();
    assert_eq!(ids, vec![1, 2, 3, 4]);
    let s = e.stats();
    assert_eq!((s.pending, s.queued, s.replay_handed_back), (false, 0, 1));
    assert_conserved(&s, 1);
}

/// src/emit/future.rs (`LocalEmitter::emit_with`, as `Emitter::emit_with`):
/// "Where `timer` has none to give, the pending call is cut at once".
/// The same huge budget on tokio's clock as the shared emitter's finding
/// above: the per-core emit and replay share its code.
#[cfg(feature = "tokio")]
#[test]
fn a_local_async_emit_with_a_huge_budget_on_tokios_clock_and_no_timer_is_cut_at_once() {
    let b = Breaker::builder()
        .clock(tailguard::clock::ClockSource::tokio())
        .ticker(false)
        .local_handles(1)
        .build()
        .unwrap();
    let e: LocalEmitter<u64> = LocalEmitter::builder(b, DeadLetterQueue::with_capacity(8).unwrap())
        .bulkhead(1)
        .unwrap()
        .timeout(Duration::MAX)
        .unwrap()
        .build_local()
        .unwrap();
    let mut f = Box::pin(e.emit_with(Never, 1, Priority::Routine, |_| pending::<Result<(), ()>>()));
    let polled = poll_once(f.as_mut());
    assert!(
        matches!(
            polled,
            Poll::Ready(Emitted::Diverted {
                reason: Divert::NoTimer,
                ..
            })
        ),
        "no timer to be had: cut at once; got {polled:?} with {} slot(s) held",
        e.stats().bulkhead_in_flight
    );
}

/// As above, on the per-core emitter: a call delivered (`Ok`) under a
/// sleep that panics in its drop counts delivered, and in replay is not
/// kept at the head to be delivered again. (A finding before main's
/// f1c45bb: counted cancelled, and delivered twice.)
#[test]
fn a_local_sleep_panicking_in_its_drop_after_a_delivered_call_counts_it_delivered_once() {
    let clock = ManualClock::new();
    let b = core_breaker(&clock);
    let e = local::<u64>(&b, 8);
    panic_or_not(|| {
        block_on(e.emit_with(Hostile(SleepKind::PanicOnDrop), 1, Priority::Routine, |_| {
            pending_once(Ok::<_, ()>(()))
        }))
    });
    let _ = e.enqueue(2, Priority::Routine);
    let deliveries = Cell::new(0);
    panic_or_not(|| {
        block_on(e.replay_with(Hostile(SleepKind::PanicOnDrop), 10, |_| {
            deliveries.set(deliveries.get() + 1);
            pending_once(Ok::<_, ()>(()))
        }))
    });
    let _ = block_on(e.replay_with(Never, 10, |_| {
        deliveries.set(deliveries.get() + 1);
        async { Ok::<_, ()>(()) }
    }));
    let s = e.stats();
    assert_conserved(&s, 1);
    assert_eq!(
        (s.delivered, s.cancelled, deliveries.get(), s.replayed),
        (1, 0, 1, 1),
        "(delivered, cancelled, deliveries of trigger 2, replayed)"
    );
}

/// The breaker moved under a per-core async call, between its polls:
/// tripped, then reset, then forced open; the call then completes (`Ok`,
/// then `Err`): no panic, the local slot back, the identities kept, and a
/// replay obeys the mode it then finds.
#[test]
fn the_breaker_moved_between_the_polls_of_a_local_async_call() {
    let clock = ManualClock::new();
    let b = core_breaker(&clock);
    let e = local::<u64>(&b, 8);
    for (id, ok) in [(1, true), (2, false)] {
        let done = Cell::new(false);
        let mut f = Box::pin(e.emit_with(Hostile(SleepKind::Forever), id, Priority::Routine, |_| {
            let done = &done;
            std::future::poll_fn(move |_| {
                if done.get() {
                    Poll::Ready(if ok { Ok(()) } else { Err("failed") })
                } else {
                    Poll::Pending
                }
            })
        }));
        assert!(poll_once(f.as_mut()).is_pending());
        b.trip_now();
        assert!(poll_once(f.as_mut()).is_pending());
        b.reset();
        b.force_open();
        done.set(true);
        let Poll::Ready(out) = poll_once(f.as_mut()) else {
            panic!("completed")
        };
        assert_eq!(out.is_delivered(), ok, "{out:?}");
        drop(f);
        assert_eq!(e.stats().bulkhead_in_flight, 0);
        let r = block_on(e.replay_with(Never, 10, |_| async { Ok::<_, ()>(()) }));
        assert_eq!(r.stopped, Some(ReplayStop::NotClosed), "forced open: {r:?}");
        b.reset();
        assert_conserved(&e.stats(), id);
    }
    let r = block_on(e.replay_with(Never, 10, |_| async { Ok::<_, ()>(()) }));
    assert_eq!((r.delivered, r.stopped), (1, Some(ReplayStop::Empty)));
    assert_conserved(&e.stats(), 2);
}

/// src/breaker/mod.rs (`next_due`): "Ticking earlier does nothing but the
/// check"; `tick` ends a recovery ramp that has run its course. With a
/// ramp shorter than the window in progress, a runtime that ticks only at
/// `next_due` must not miss that: either `next_due` is no later than the
/// ramp's end, or a tick before `next_due` leaves the breaker as it was.
#[test]
fn next_due_is_no_later_than_a_recovery_ramps_end() {
    let clock = ManualClock::new();
    let b = builder(&clock)
        .window(HOUR)
        .latency_threshold(50 * MS)
        .base_backoff(SEC)
        .half_open_probes(1)
        .success_to_close(1)
        .recovery_ramp(SEC)
        .build()
        .unwrap();
    b.trip_now();
    clock.advance(SEC);
    b.allow().expect("the probe").record_latency(MS, true);
    assert_eq!(b.state(), State::Closed);
    let before = b.snapshot();
    assert!(before.ramp.is_some(), "ramping");
    let due = b.next_due();
    let ramp_left = SEC;
    clock.advance(ramp_left);
    b.tick();
    let after = b.snapshot();
    let unchanged = (after.generation, after.backoff_level, after.ramp.is_some())
        == (before.generation, before.backoff_level, before.ramp.is_some());
    assert!(
        due <= ramp_left || unchanged,
        "next_due said {due:?}, but a tick {ramp_left:?} later (before it) ended the ramp: \
         (generation, backoff level, ramping) {:?} -> {:?}",
        (before.generation, before.backoff_level, before.ramp.is_some()),
        (after.generation, after.backoff_level, after.ramp.is_some())
    );
}

/// Issue 20, as tests/emit/no_runtime.rs quotes it: "nothing in the crate
/// panics for a missing runtime"; src/timer.rs: a timer "that cannot arm
/// where it is polled ... returns `None` ..., and nothing panics". An emit
/// whose call was pending on a tokio runtime (its `TokioTimer` sleep armed
/// there), polled again once that runtime is gone (dropped: a shut-down
/// service, a future kept past its runtime): no panic, the call cut (as
/// for no timer) or left pending, the slots intact. (Since main's f1c45bb
/// the sleep's panic is caught, the trigger queued as `diverted_no_timer`,
/// and the panic then goes on: tokio's own timer still panics for a
/// missing runtime, which `Timer::sleep` says it "Must not".)
#[cfg(feature = "tokio")]
#[test]
fn an_emit_polled_after_its_tokio_runtime_is_gone_does_not_panic() {
    let clock = ManualClock::new();
    let b = breaker(&clock);
    let bulkhead = Bulkhead::new(1).unwrap();
    let e = bulkhead_emitter(&b, &bulkhead);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let mut f = Box::pin(e.emit(1, Priority::Routine, |_| pending::<Result<(), ()>>()));
    rt.block_on(async { assert!(poll_once(f.as_mut()).is_pending()) });
    drop(rt);
    let polled = catch_unwind(AssertUnwindSafe(|| poll_once(f.as_mut()).is_ready()));
    drop(f);
    assert_eq!(bulkhead.in_flight(), 0);
    assert_conserved(&e.stats(), 1);
    assert!(polled.is_ok(), "polling the emit after its runtime is gone panicked");
}

/// src/registry.rs (`attach_local_emitter`): "its counters and emit times
/// (read through a `LocalStatsReader` ...) and its queue's depth appear
/// under `name`. Its bulkhead is its core's own count, read in the
/// emitter's stats (`bulkhead_in_flight`)". After async emits cut for want
/// of a timer, one in flight, and a dropped one, the registry's row (read
/// on another thread) is the core's own reading.
#[test]
fn the_registrys_row_of_a_local_emitter_is_the_cores_reading() {
    let r = tailguard::Registry::new();
    let clock = ManualClock::new();
    let b = r
        .get_or_create("pricing@0", || {
            Breaker::builder().clock(clock.clone()).ticker(false).local_handles(1)
        })
        .unwrap();
    let e = local::<u64>(&b, 8);
    r.attach_local_emitter("pricing@0", &e).unwrap();
    let cut = block_on(e.emit_with(Never, 1, Priority::Routine, |_| pending::<Result<(), ()>>()));
    assert!(
        matches!(
            cut,
            Emitted::Diverted {
                reason: Divert::NoTimer,
                ..
            }
        ),
        "{cut:?}"
    );
    drop(e.emit_with(Never, 2, Priority::Routine, |_| pending::<Result<(), ()>>()));
    let mut held = Box::pin(e.emit_with(Hostile(SleepKind::Forever), 3, Priority::Routine, |_| {
        pending::<Result<(), ()>>()
    }));
    assert!(poll_once(held.as_mut()).is_pending());
    let row = std::thread::scope(|s| s.spawn(|| r.consumers()).join().unwrap())
        .into_iter()
        .find(|c| &*c.name == "pricing@0")
        .unwrap();
    let mine = e.stats();
    let theirs = row.emitter.expect("attached");
    assert_eq!(theirs, mine);
    assert_eq!(
        (theirs.diverted_no_timer, theirs.cancelled, theirs.bulkhead_in_flight),
        (1, 1, 1)
    );
    assert_eq!((row.fallback_depth, row.fallback_capacity), (Some(1), Some(8)));
    drop(held);
    assert_conserved(&e.stats(), 3);
}

/// src/timer.rs (`AsyncIoTimer`): "there is always a timer to be had,
/// whatever polls the call"; (`Timer::sleep`) "a duration too long for the
/// runtime to represent: one that never completes". A budget of
/// `Duration::MAX` on async-io's timer, outside any runtime: never a
/// NoTimer, and a call that completes later is delivered, not timed out.
#[cfg(feature = "async-io")]
#[test]
fn async_ios_timer_with_a_budget_of_duration_max_never_fires_and_never_has_none() {
    let clock = ManualClock::new();
    let b = core_breaker(&clock);
    let e: LocalEmitter<u64> = LocalEmitter::builder(b.clone(), DeadLetterQueue::with_capacity(8).unwrap())
        .timeout(Duration::MAX)
        .unwrap()
        .build_local()
        .unwrap();
    let out = block_on(e.emit_with(tailguard::timer::AsyncIoTimer, 1, Priority::Routine, |_| {
        pending_once(Ok::<_, ()>(()))
    }));
    assert!(out.is_delivered(), "{out:?}");
    let shared: Emitter<u64> = Emitter::builder(breaker(&clock), DeadLetterQueue::with_capacity(8).unwrap())
        .timeout(Duration::MAX)
        .unwrap()
        .build()
        .unwrap();
    let _ = shared.enqueue(2, Priority::Routine);
    let r = block_on(shared.replay_with(tailguard::timer::AsyncIoTimer, 10, |_| pending_once(Ok::<_, ()>(()))));
    assert_eq!(r.delivered, 1, "{r:?}");
    assert_eq!((e.stats().diverted_no_timer, shared.stats().diverted_no_timer), (0, 0));
}

/// src/emit/mod.rs (`shutdown`): "From the shutdown on, a replay queues
/// nothing: it ends after the call in flight, whose trigger is delivered
/// or handed back in its `Replayed::handed_back` (a failure, a timeout, a
/// refusal by the breaker or the bulkhead alike)"; src/emit/local.rs
/// likewise. A call that shuts its emitter down and is then cut for want
/// of a timer (NoTimer, which uses no attempt): handed back, not kept at
/// the head of a queue nobody drains any more; an emit likewise is handed
/// back `ShutDown` with the reason `NoTimer`. Both emitters.
#[test]
fn a_no_timer_cut_after_a_shutdown_from_the_call_hands_the_trigger_back() {
    let clock = ManualClock::new();
    // Shared.
    let b = breaker(&clock);
    let e = emitter::<u64>(&b, 8);
    let _ = e.enqueue(1, Priority::Routine);
    let _ = e.enqueue(2, Priority::Routine);
    let sunk = RefCell::new(Vec::new());
    let r = block_on(e.replay_with(Never, 10, |_| {
        e.shutdown(|t, _| sunk.borrow_mut().push(t));
        pending::<Result<(), ()>>()
    }));
    assert_eq!(
        (r.stopped, r.handed_back, sunk.take()),
        (
            Some(ReplayStop::Failed(Divert::NoTimer)),
            Some((1, Priority::Routine)),
            vec![2]
        )
    );
    let out = block_on(e.emit_with(Never, 3, Priority::Routine, |_| pending::<Result<(), ()>>()));
    assert!(
        matches!(
            out,
            Emitted::HandedBack {
                trigger: 3,
                reason: Divert::NoTimer,
                not_queued: HandBack::ShutDown,
                ..
            }
        ),
        "{out:?}"
    );
    let s = e.stats();
    assert_eq!((s.pending, s.queued, s.replay_handed_back), (false, 0, 1));
    assert_conserved(&s, 1);
    // Per-core.
    let b = core_breaker(&clock);
    let e = local::<u64>(&b, 8);
    let _ = e.enqueue(1, Priority::Routine);
    let _ = e.enqueue(2, Priority::Routine);
    let r = block_on(e.replay_with(Never, 10, |_| {
        e.shutdown(|t, _| sunk.borrow_mut().push(t));
        pending::<Result<(), ()>>()
    }));
    assert_eq!(
        (r.stopped, r.handed_back, sunk.take()),
        (
            Some(ReplayStop::Failed(Divert::NoTimer)),
            Some((1, Priority::Routine)),
            vec![2]
        )
    );
    let s = e.stats();
    assert_eq!(
        (s.pending, s.queued, s.replay_handed_back, s.bulkhead_in_flight),
        (false, 0, 1, 0)
    );
    assert_conserved(&s, 0);
}

/// A call future pending on its first `n` polls (waking itself), then `Ok`.
struct PendingFor(u32);

impl Future for PendingFor {
    type Output = Result<(), ()>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if self.0 == 0 {
            return Poll::Ready(Ok(()));
        }
        self.0 -= 1;
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

/// A timer counting its arms, whose sleeps never fire.
#[derive(Default)]
struct Counting(Cell<usize>);

impl Timer for Counting {
    type Sleep = HostileSleep;
    fn sleep(&self, _after: Duration) -> Option<HostileSleep> {
        self.0.set(self.0.get() + 1);
        Some(HostileSleep(SleepKind::Forever))
    }
}

/// src/timer.rs: "A timer is armed only for a call that is not ready on
/// its first poll (a call that completes at once pays for none), and only
/// then is `Timer::sleep` called"; (`Timer`) "`sleep` is called ... once
/// per call that is pending on its first poll". A timer that panics if
/// touched never is for ready calls; a call pending for five polls arms
/// once; on both emitters, emit and replay.
#[test]
fn the_timer_is_armed_once_per_pending_call_and_never_for_a_ready_one() {
    let clock = ManualClock::new();
    let shared = emitter::<u64>(&breaker(&clock), 8);
    let b = core_breaker(&clock);
    let per_core = local::<u64>(&b, 8);
    let ready = |_: &u64| async { Ok::<_, ()>(()) };
    assert!(block_on(shared.emit_with(PanickingTimer, 1, Priority::Routine, ready)).is_delivered());
    assert!(block_on(per_core.emit_with(PanickingTimer, 2, Priority::Routine, ready)).is_delivered());
    let _ = shared.enqueue(3, Priority::Routine);
    let _ = per_core.enqueue(4, Priority::Routine);
    assert_eq!(block_on(shared.replay_with(PanickingTimer, 10, ready)).delivered, 1);
    assert_eq!(block_on(per_core.replay_with(PanickingTimer, 10, ready)).delivered, 1);
    let timer = Counting::default();
    assert!(block_on(shared.emit_with(&timer, 5, Priority::Routine, |_| PendingFor(5))).is_delivered());
    assert!(block_on(per_core.emit_with(&timer, 6, Priority::Routine, |_| PendingFor(5))).is_delivered());
    for t in [7, 8] {
        let _ = shared.enqueue(t, Priority::Routine);
        let _ = per_core.enqueue(t, Priority::Routine);
    }
    assert_eq!(block_on(shared.replay_with(&timer, 10, |_| PendingFor(5))).delivered, 2);
    assert_eq!(
        block_on(per_core.replay_with(&timer, 10, |_| PendingFor(5))).delivered,
        2
    );
    assert_eq!(timer.0.get(), 6, "one arm per pending call");
    assert_conserved(&shared.stats(), 2);
    assert_conserved(&per_core.stats(), 2);
}

/// src/emit/future.rs (`replay`): "Dropping the returned future mid-call
/// puts the trigger in flight back at the head of the queue (no attempt
/// used)"; with a call future that panics in its destructor as the replay
/// is dropped: the panic goes on, and still the trigger is kept at the
/// head, the slot and the replay turn given back. Both emitters.
#[test]
fn a_replay_dropped_mid_call_whose_call_panics_in_drop_still_keeps_its_trigger() {
    let clock = ManualClock::new();
    let bulkhead = Bulkhead::new(1).unwrap();
    let shared = bulkhead_emitter(&breaker(&clock), &bulkhead);
    let b = core_breaker(&clock);
    let per_core = local::<u64>(&b, 8);
    let _ = shared.enqueue(1, Priority::Routine);
    let _ = per_core.enqueue(1, Priority::Routine);
    let mut f = Box::pin(shared.replay_with(Hostile(SleepKind::Forever), 10, |_| HangThenPanicOnDrop));
    assert!(poll_once(f.as_mut()).is_pending());
    must_panic(move || drop(f));
    let mut g = Box::pin(per_core.replay_with(Hostile(SleepKind::Forever), 10, |_| HangThenPanicOnDrop));
    assert!(poll_once(g.as_mut()).is_pending());
    must_panic(move || drop(g));
    for (name, s) in [("shared", shared.stats()), ("per-core", per_core.stats())] {
        assert!(s.pending, "{name}: kept at the head");
        assert_eq!(s.bulkhead_in_flight, 0, "{name}");
        assert_conserved(&s, 0);
    }
    let r = block_on(shared.replay_with(Never, 10, |_| async { Ok::<_, ()>(()) }));
    assert_eq!(r.delivered, 1, "shared: not Busy: {r:?}");
    let r = block_on(per_core.replay_with(Never, 10, |_| async { Ok::<_, ()>(()) }));
    assert_eq!(r.delivered, 1, "per-core: not Busy: {r:?}");
}
