//! Replay's one policy, which the blocking and the async replay both drive:
//! which trigger goes next, what the end of its call makes of it, when a
//! replay stops and why, and who owns a trigger when a replay races a
//! drain or a shutdown.
//!
//! [`Emitter::replay_blocking`](super::Emitter::replay_blocking) and
//! [`Emitter::replay`](super::Emitter::replay) are thin drivers of a
//! [`Replay`]; each only reads the start of a call (the async one on
//! tokio's clock too, for its timer) and makes the call (on the caller's
//! thread, told its deadline; or awaited, cut at it):
//!
//! ```text
//! let mut replay = Replay::begin(inner, max);          // NotClosed, Busy
//! while let Some((attempt, when)) = replay.next(start) { // Empty, max, refused
//!     let outcome = /* call(attempt.trigger(), ...), caught */;
//!     replay.settle(attempt, outcome);                 // delivered, or stops
//! }
//! replay.finish()
//! ```
//!
//! The policy, all of it here:
//!
//! - **One at a time**: a replay runs only if the breaker admits every
//!   call ([`Inner::replay_allowed`], else [`ReplayStop::NotClosed`]) and
//!   it holds the replay turn ([`ReplayTurn`], else [`ReplayStop::Busy`]),
//!   for its whole run, across its awaits too; `shutdown_async` takes the
//!   same turn to drain.
//! - **Order**: the trigger kept at the head goes first, whatever has been
//!   queued since, then the queue in `pop` order ([`ReplayState::next`]);
//!   at most `max` are delivered, one call at a time.
//! - **Stops** at the first trigger not delivered: the queue is empty, the
//!   breaker or the bulkhead turned it away (no attempt used), or its call
//!   failed or timed out (one attempt used).
//! - **What a trigger not delivered becomes**: handed back to the caller
//!   (counted in `replay_handed_back`) after its last attempt
//!   ([`EmitterBuilder::replay_attempts`](super::EmitterBuilder::replay_attempts)),
//!   or once the emitter is shut down; else kept at the head of the queue
//!   (`pending`). A call that panics uses an attempt and its trigger is
//!   kept at the head as the panic goes on; a replay dropped mid-call keeps
//!   its trigger there with no attempt used ([`Held`]).
//! - **Who owns it**: a trigger is taken from the head, and put back, only
//!   under the queue's lock; a replay puts it back only if the emitter is
//!   not shut down, checked under that lock, against a shutdown's drain,
//!   which sets `closed` before it takes anything under the same lock:
//!   either the drain takes it, or the replay sees `closed` and hands it
//!   back. No lock is held while a call runs (it may shut the emitter
//!   down, drain it, queue by hand).
//! - **Counts**: `replayed` for each trigger delivered, `replay_handed_back`
//!   for each handed back, and `pending` while one is kept at the head.
//!
//! The drivers take no lock of their own, so both lock alike: the turn (an
//! atomic flag) for the whole replay; the queue's lock, briefly, to take
//! each trigger and to keep one at the head; the turn's waiters' lock as
//! the turn is given back.

use super::call::{Host, NotAdmitted, Outcome, Verdict};
use super::metrics::{self, Count, Metrics};
use super::pending::{head_first, Pending};
use super::{Deadline, Divert, HandBack, Inner, ReplayStop, Replayed};
use crate::breaker::Breaker;
use crate::bulkhead::BulkheadPermit;
use crate::dlq::{DeadLetterQueue, Priority, Pushed};
use crate::sync::{AtomicBool, Mutex, Ordering};
use crate::Permit;
use core::future::Future;
use core::pin::Pin;
use core::task::{Context, Poll, Waker};
use std::panic::resume_unwind;
use std::time::Duration;

/// The queue's consumer side, and the trigger replay keeps at the head:
/// behind the emitter's one lock of its cold paths (replay, drain and
/// shutdown).
pub(super) struct ReplayState<T> {
    queue: DeadLetterQueue<T>,
    pending: Option<Pending<T>>,
}

impl<T> ReplayState<T> {
    pub(super) fn new(queue: DeadLetterQueue<T>) -> Self {
        Self { queue, pending: None }
    }

    /// The trigger at the head: the one kept from a failed attempt (it goes
    /// first whatever has been queued since), else the queue's next.
    fn next(&mut self) -> Option<Pending<T>> {
        head_first(self.pending.take(), &self.queue)
    }
}

/// Whether replay may run: the breaker CLOSED, or in a mode that
/// admits every call whatever its state (metrics-only, whose state is
/// only what it would do; forced closed; disabled); never forced open.
pub(super) fn replay_allowed(b: &Breaker) -> bool {
    use crate::report::{Mode, State};
    match b.mode() {
        Mode::ForcedOpen => false,
        Mode::Normal => b.state() == State::Closed,
        Mode::MetricsOnly | Mode::ForcedClosed | Mode::Disabled => true,
    }
}

impl<T> Inner<T> {
    /// The replay turn, if no other replay (nor `shutdown_async`) holds it.
    pub(super) fn replay_turn(&self) -> Option<ReplayTurn<'_>> {
        self.take_turn().then(|| ReplayTurn {
            flag: &self.replaying,
            waiters: &self.turn_waiters,
        })
    }

    /// Takes the replay turn if no one holds it; whoever gets `true`
    /// gives it back with [`give_back_turn`](Self::give_back_turn) (a
    /// [`ReplayTurn`]'s drop, or an owned run's: `replay_run.rs`).
    pub(super) fn take_turn(&self) -> bool {
        self.replaying
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    }

    /// Gives the replay turn back, waking whoever waits for it.
    pub(super) fn give_back_turn(&self) {
        drop(ReplayTurn {
            flag: &self.replaying,
            waiters: &self.turn_waiters,
        });
    }

    /// The trigger at the head (the one a replay keeps there first), taken
    /// out under a brief lock: by a replay, a drain or a shutdown, each
    /// trigger by one of them only.
    pub(super) fn take_next(&self) -> Option<Pending<T>> {
        let mut state = self.replay.lock();
        if state.pending.is_some() {
            self.has_pending.store(false, Ordering::Release);
        }
        state.next()
    }

    /// Puts `p` back at the head (before the queue's next), under a brief
    /// lock.
    fn keep_at_head_locked(&self, p: Pending<T>) {
        let mut state = self.replay.lock();
        Self::put_at_head(&mut state, &self.has_pending, p);
    }

    /// Puts `p` back at the head unless the emitter is shut down (then it
    /// comes back): decided under the queue's lock, against a shutdown's
    /// drain (which sets `closed` before it takes anything): either the
    /// drain takes it, or we see `closed` and it is handed back. A loom
    /// model checks it (`a_replay_racing_shutdown_keeps_nothing_and_loses_nothing`).
    fn keep_unless_shut_down_locked(&self, p: Pending<T>) -> Result<(), Pending<T>> {
        let mut state = self.replay.lock();
        if self.closed.load(Ordering::Acquire) {
            return Err(p);
        }
        Self::put_at_head(&mut state, &self.has_pending, p);
        Ok(())
    }

    fn put_at_head(state: &mut ReplayState<T>, has_pending: &AtomicBool, p: Pending<T>) {
        debug_assert!(state.pending.is_none(), "one replay at a time");
        state.pending = Some(p);
        has_pending.store(true, Ordering::Release);
    }
}

impl<T> Host<T> for Inner<T> {
    type Permit<'a>
        = Permit<'a>
    where
        Self: 'a;
    type Slot<'a>
        = BulkheadPermit<'a>
    where
        Self: 'a;
    type Turn<'a>
        = ReplayTurn<'a>
    where
        Self: 'a;
    type Times<'a>
        = Option<&'a metrics::Shard>
    where
        Self: 'a;
    fn breaker(&self) -> &Breaker {
        &self.breaker
    }
    fn timeout(&self) -> Duration {
        self.timeout
    }
    fn replay_attempts(&self) -> u32 {
        self.replay_attempts
    }
    fn replay_turn(&self) -> Option<ReplayTurn<'_>> {
        Inner::replay_turn(self)
    }
    fn take_next(&self) -> Option<Pending<T>> {
        Inner::take_next(self)
    }
    fn keep_at_head(&self, p: Pending<T>) {
        self.keep_at_head_locked(p);
    }
    fn keep_unless_shut_down(&self, p: Pending<T>) -> Result<(), Pending<T>> {
        self.keep_unless_shut_down_locked(p)
    }
    fn timeout_ns(&self) -> u64 {
        self.timeout_ns
    }
    fn metrics_count(&self, what: Count) {
        self.metrics.count(what);
    }
    #[inline(always)]
    fn times(&self) -> Option<&metrics::Shard> {
        self.metrics.mine_built()
    }
    #[inline(always)]
    fn emit_time_in(&self, shard: Option<&metrics::Shard>, ns: u64, delivered: bool) {
        match shard {
            Some(shard) => Metrics::emit_time_in(shard, ns, delivered),
            None => self.metrics.emit_time(ns, delivered),
        }
    }
    #[inline]
    fn enqueue(&self, trigger: T, class: Priority) -> Result<Pushed<T>, (T, HandBack)> {
        Inner::enqueue(self, trigger, class)
    }
    #[inline(always)]
    fn admit(&self, start: u64) -> Result<(Permit<'_>, Option<BulkheadPermit<'_>>), NotAdmitted> {
        Inner::admit(self, start)
    }
}

/// One replay, from its turn to its answer: every decision the blocking
/// and the async replay make (see the [module documentation](self)).
pub(super) struct Replay<'a, T, E, H: Host<T> + 'a = Inner<T>> {
    inner: &'a H,
    max: usize,
    out: Replayed<T, E>,
    /// Held until the replay ends (`None` if it could not start: then
    /// `out.stopped` says why).
    _turn: Option<H::Turn<'a>>,
}

/// A trigger being replayed: taken from the head and admitted (the
/// breaker's permit and the bulkhead's slot), its call about to run or
/// running. Dropped unsettled (a replay dropped mid-call), it gives the
/// slot and the permit back and keeps the trigger at the head, no attempt
/// used.
pub(super) struct Attempt<'a, T, H: Host<T> + 'a = Inner<T>> {
    // Dropped in this order: the slot, the permit (a call never settled:
    // cancelled), then the trigger, kept at the head.
    slot: Option<H::Slot<'a>>,
    permit: H::Permit<'a>,
    held: Held<'a, T, H>,
    start: u64,
}

impl<'a, T, H: Host<T> + 'a> Attempt<'a, T, H> {
    /// The trigger to call the consumer with.
    pub(super) fn trigger(&self) -> &T {
        &self.held.item.as_ref().expect("held until settled").trigger
    }

    /// Gives the call's bulkhead slot back now, before `settle` reads the
    /// call's end: for a blocking call, over when it returns (as the
    /// blocking replay always did). An async call's slot goes back in
    /// `settle`, after the end is read, as the async emit's does.
    pub(super) fn release_slot(&mut self) {
        self.slot = None;
    }

    /// The call's deadline (for a blocking call, which is told it).
    pub(super) fn deadline(&self) -> Deadline<'a> {
        let inner = self.held.inner;
        Deadline {
            clock: inner.breaker().clock(),
            start: self.start,
            budget: inner.timeout(),
        }
    }
}

impl<'a, T, E, H: Host<T> + 'a> Replay<'a, T, E, H> {
    /// Starts a replay of up to `max` triggers: with the turn, or already
    /// stopped (the breaker not CLOSED, or another replay running).
    pub(super) fn begin(inner: &'a H, max: usize) -> Self {
        let turn = if replay_allowed(inner.breaker()) {
            inner.replay_turn().ok_or(ReplayStop::Busy)
        } else {
            Err(ReplayStop::NotClosed)
        };
        let (turn, stopped) = match turn {
            Ok(turn) => (Some(turn), None),
            Err(why) => (None, Some(why)),
        };
        Replay {
            inner,
            max,
            out: Replayed {
                delivered: 0,
                stopped,
                handed_back: None,
            },
            _turn: turn,
        }
    }

    /// The next trigger to call, admitted at the reading `start` gives
    /// (read after the trigger is taken, before the breaker's verdict;
    /// with whatever else the driver reads with it), or `None` once the
    /// replay is over: stopped, `max` delivered, the queue empty, or the
    /// trigger turned away by the breaker or the bulkhead (kept at the
    /// head with no attempt used, or handed back after a shutdown).
    pub(super) fn next<S>(&mut self, start: impl FnOnce() -> (u64, S)) -> Option<(Attempt<'a, T, H>, S)> {
        if self.out.stopped.is_some() || self.out.delivered >= self.max {
            return None;
        }
        let inner = self.inner;
        let Some(p) = inner.take_next() else {
            self.out.stopped = Some(ReplayStop::Empty);
            return None;
        };
        let held = Held { inner, item: Some(p) };
        let (start, with) = start();
        match inner.admit(start) {
            Ok((permit, slot)) => Some((
                Attempt {
                    slot,
                    permit,
                    held,
                    start,
                },
                with,
            )),
            Err(not) => {
                self.not_delivered(held, not.reason());
                None
            }
        }
    }

    /// Settles the call of `attempt`, which ended in `outcome`: the end is
    /// read (the latency's), the slot given back, the breaker's verdict
    /// recorded (past the timeout a call counts as timed out, whatever it
    /// returned), then the trigger delivered, or not (the replay stops).
    /// A panic resumes: one attempt used, the trigger kept at the head.
    pub(super) fn settle<O>(&mut self, attempt: Attempt<'a, T, H>, outcome: Outcome<Result<O, E>>) {
        let Attempt {
            slot,
            permit,
            mut held,
            start,
        } = attempt;
        let clock = self.inner.breaker().clock();
        let elapsed_ns = clock.delta_nanos(start, clock.raw());
        drop(slot);
        let elapsed = Duration::from_nanos(elapsed_ns);
        let reason = match outcome {
            Outcome::Done(Ok(_)) => {
                self.inner.record_call(permit, true, elapsed_ns); // late: delivered, counted timed out
                held.item = None;
                self.inner.metrics_count(Count::Replayed);
                self.out.delivered += 1;
                return;
            }
            Outcome::Done(Err(e)) => {
                if self.inner.record_call(permit, false, elapsed_ns) {
                    Divert::TimedOut(elapsed)
                } else {
                    Divert::Failed(e)
                }
            }
            Outcome::TimedOut => {
                permit.record_timeout_ns(elapsed_ns);
                Divert::TimedOut(elapsed)
            }
            Outcome::NoTimer => {
                drop(permit); // cancelled: no verdict on the consumer
                Divert::NoTimer // not `called`: no attempt used, kept at the head
            }
            Outcome::Panicked(panic) => {
                permit.record_latency_ns(elapsed_ns, false);
                if let Some(p) = held.item.as_mut() {
                    p.attempts = p.attempts.saturating_add(1);
                }
                resume_unwind(panic) // `held` keeps the trigger at the head
            }
        };
        self.not_delivered(held, reason);
    }

    /// The answer; gives the turn back.
    pub(super) fn finish(self) -> Replayed<T, E> {
        self.out
    }

    /// The trigger `held` was not delivered, for `reason`: the replay
    /// stops ([`not_delivered`]).
    fn not_delivered(&mut self, mut held: Held<'a, T, H>, reason: Divert<E>) {
        let p = held.item.take().expect("held until settled");
        not_delivered(self.inner, p, reason, &mut self.out);
    }
}

/// A replayed trigger `p` was not delivered, for `reason`: the replay
/// stops (`out.stopped`). A call made (failed, timed out) uses one
/// attempt, and after the last the trigger is handed back (in `out`);
/// else it is kept at the head, unless the emitter is shut down (then
/// handed back too: nothing is kept after a shutdown's drain). The rule of
/// every replay: the async and blocking ones (`Replay`) and the one the
/// caller drives (`ReplayRun`).
pub(super) fn not_delivered<T, E, H: Host<T> + ?Sized>(
    host: &H,
    mut p: Pending<T>,
    reason: Divert<E>,
    out: &mut Replayed<T, E>,
) {
    let called = reason.called();
    if called {
        p.attempts = p.attempts.saturating_add(1);
    }
    let last = called && p.attempts >= host.replay_attempts();
    let back = if last { Err(p) } else { host.keep_unless_shut_down(p) };
    if let Err(p) = back {
        host.metrics_count(Count::ReplayHandedBack);
        out.handed_back = Some((p.trigger, p.class));
    }
    out.stopped = Some(ReplayStop::Failed(reason));
}

/// A trigger a replay took out of the queue and has not settled (its call
/// runs with no lock held): kept at the head if the replay unwinds or is
/// dropped while it holds it.
struct Held<'a, T, H: Host<T> + ?Sized = Inner<T>> {
    inner: &'a H,
    item: Option<Pending<T>>,
}

impl<T, H: Host<T> + ?Sized> Drop for Held<'_, T, H> {
    fn drop(&mut self) {
        if let Some(p) = self.item.take() {
            self.inner.keep_at_head(p);
        }
    }
}

/// The right to replay (or to drain in `shutdown_async`), given back when
/// dropped, waking whoever waits for it.
pub(super) struct ReplayTurn<'a> {
    flag: &'a AtomicBool,
    waiters: &'a Mutex<Vec<Waker>>,
}

impl Drop for ReplayTurn<'_> {
    fn drop(&mut self) {
        self.flag.store(false, Ordering::Release);
        // A waiter stores its waker before it tries the turn: either its
        // try sees the flag clear, or this lock sees its waker.
        let waiters = core::mem::take(&mut *self.waiters.lock());
        waiters.into_iter().for_each(Waker::wake);
    }
}

/// Waits for the replay turn (for `shutdown_async`).
pub(super) struct TakeTurn<'a, T> {
    pub(super) inner: &'a Inner<T>,
}

impl<'a, T> Future for TakeTurn<'a, T> {
    type Output = ReplayTurn<'a>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<ReplayTurn<'a>> {
        let inner = self.inner;
        if let Some(turn) = inner.replay_turn() {
            return Poll::Ready(turn);
        }
        {
            let mut waiters = inner.turn_waiters.lock();
            if !waiters.iter().any(|w| w.will_wake(cx.waker())) {
                waiters.push(cx.waker().clone());
            }
        }
        match inner.replay_turn() {
            Some(turn) => Poll::Ready(turn),
            None => Poll::Pending,
        }
    }
}
