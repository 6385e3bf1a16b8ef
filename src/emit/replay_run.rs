//! A replay whose calls the caller makes ([`Emitter::replay_run`]), as
//! [`InFlight`](super::InFlight) is an emit whose call the caller makes:
//! the turn, the head, the breaker, the bulkhead, the attempts and the
//! counting are the replay's own (the rule of a trigger not delivered is
//! [`not_delivered`], shared with every replay); only the calls are the
//! caller's.

use super::call::Host;
use super::metrics::Count;
use super::pending::Pending;
use super::replay::{not_delivered, replay_allowed};
use super::{Deadline, Divert, Emitter, Inner, ReplayStop, Replayed};
use crate::bulkhead::OwnedBulkheadPermit;
use crate::dlq::Priority;
use crate::sync::Arc;
use crate::OwnedPermit;
use core::fmt;
use std::time::Duration;

/// A replay the caller drives: from [`Emitter::replay_run`]. It holds the
/// emitter's replay turn (no other replay runs meanwhile) until it and
/// every [`ReplayCall`] it gave are gone. Each [`next_call`](Self::next_call) takes
/// the trigger at the head and admits its call (breaker, bulkhead); the
/// caller calls the consumer and settles the call with
/// [`delivered`](Self::delivered), [`failed`](Self::failed) or
/// [`timed_out`](Self::timed_out); [`finish`](Self::finish) answers what
/// the replay did, as the emitter's own [`replay`](Emitter::replay) would
/// have: the same order, the same stops, the same attempts, the same
/// counters.
///
/// ```
/// use tailguard::{Breaker, dlq::{DeadLetterQueue, Priority}, emit::{Emitter, ReplayStop}};
///
/// let b = Breaker::builder().build()?;
/// let e = Emitter::builder(b.clone(), DeadLetterQueue::with_capacity(8)?).build()?;
/// b.trip_now();
/// for order in ["a", "b"] {
///     let _ = e.begin::<(), ()>(order, Priority::Routine); // diverted: queued
/// }
/// b.force_closed();
/// let mut run = e.replay_run::<String>(10);
/// let mut sent = Vec::new();
/// while let Some(call) = run.next_call() {
///     sent.push(*call.trigger()); // the caller's call of the consumer
///     run.delivered(call);
/// }
/// let replayed = run.finish();
/// assert_eq!(sent, ["a", "b"]);
/// assert_eq!((replayed.delivered, replayed.stopped), (2, Some(ReplayStop::Empty)));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[must_use = "a replay run holds the replay turn until it is finished or dropped"]
pub struct ReplayRun<T, E> {
    turn: Option<Arc<Turn<T>>>,
    emitter: Emitter<T>,
    max: usize,
    out: Replayed<T, E>,
}

/// The replay turn, held by a run and its calls, given back when the last
/// of them is gone: a call outliving its run keeps the head its own.
struct Turn<T>(Emitter<T>);

impl<T> Drop for Turn<T> {
    fn drop(&mut self) {
        self.0.inner.give_back_turn();
    }
}

/// A trigger a [`ReplayRun`] took from the head, its call admitted. Settle
/// it with its run. Dropped unsettled, its slot and its permit go back
/// with no verdict and the trigger is kept at the head, no attempt used (a
/// cancelled call); dropped while the thread panics, the call counts as
/// failed and uses an attempt (the trigger is kept at the head all the
/// same), as a panicking call of [`replay_blocking`](Emitter::replay_blocking).
/// Dropped after a [`shutdown`](Emitter::shutdown), it is kept at the head
/// all the same (nothing else could take it; `stats().pending` says so),
/// where [`drain`](Emitter::drain) takes it;
/// [`shutdown_async`](Emitter::shutdown_async) waits for the run and its
/// calls instead.
#[must_use = "settle a replayed call with its run (delivered, failed, timed_out), or it is cancelled"]
pub struct ReplayCall<T> {
    turn: Arc<Turn<T>>,
    // Dropped in this order: the slot, the permit, then the trigger.
    slot: Option<OwnedBulkheadPermit>,
    permit: Option<OwnedPermit>,
    item: Option<Pending<T>>,
    start: u64,
}

impl<T> Emitter<T> {
    /// Starts a replay of up to `max` queued triggers whose calls the
    /// caller makes (see [`ReplayRun`]), if the breaker is CLOSED (or
    /// overridden to let calls through) and no other replay runs;
    /// otherwise the run is already stopped ([`ReplayStop::NotClosed`],
    /// [`ReplayStop::Busy`]) and gives no call.
    ///
    /// ```
    /// use tailguard::{Breaker, dlq::{DeadLetterQueue, Priority}, emit::{Emitter, ReplayStop}};
    /// let b = Breaker::builder().build()?;
    /// let e = Emitter::<u8>::builder(b.clone(), DeadLetterQueue::with_capacity(8)?).build()?;
    /// b.trip_now();
    /// let mut run = e.replay_run::<()>(10);
    /// assert!(run.next_call().is_none());
    /// assert_eq!(run.finish().stopped, Some(ReplayStop::NotClosed));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn replay_run<E>(&self, max: usize) -> ReplayRun<T, E> {
        let inner: &Inner<T> = &self.inner;
        let stopped = if !replay_allowed(&inner.breaker) {
            Some(ReplayStop::NotClosed)
        } else if !inner.take_turn() {
            Some(ReplayStop::Busy)
        } else {
            None
        };
        ReplayRun {
            turn: stopped.is_none().then(|| Arc::new(Turn(self.clone()))),
            emitter: self.clone(),
            max,
            out: Replayed {
                delivered: 0,
                stopped,
                handed_back: None,
            },
        }
    }
}

impl<T, E> ReplayRun<T, E> {
    /// The next trigger to call, its call admitted; `None` once the
    /// replay is over: stopped, `max` delivered, the queue empty, or the
    /// trigger turned away by the breaker or the bulkhead (kept at the
    /// head, no attempt used; or handed back after a shutdown).
    ///
    /// # Panics
    ///
    /// If a call it gave before is still unsettled: one trigger is taken
    /// from the head at a time.
    pub fn next_call(&mut self) -> Option<ReplayCall<T>> {
        if self.out.stopped.is_some() || self.out.delivered >= self.max {
            return None;
        }
        let turn = self.turn.as_ref().expect("a run that is not stopped holds the turn");
        assert_eq!(
            Arc::strong_count(turn),
            1,
            "ReplayRun::next_call: settle (or drop) the call it gave before taking another"
        );
        let inner: &Inner<T> = &self.emitter.inner;
        let Some(p) = inner.take_next() else {
            self.out.stopped = Some(ReplayStop::Empty);
            return None;
        };
        let start = inner.breaker.clock().raw();
        match inner.admit_owned(start) {
            Ok((permit, slot)) => Some(ReplayCall {
                turn: Arc::clone(turn),
                slot,
                permit: Some(permit),
                item: Some(p),
                start,
            }),
            Err(not) => {
                not_delivered(inner, p, not.reason(), &mut self.out);
                None
            }
        }
    }

    /// Whether `call` is one of this run's.
    fn owns(&self, call: &ReplayCall<T>) -> bool {
        self.turn.as_ref().is_some_and(|t| Arc::ptr_eq(t, &call.turn))
    }

    /// A call of another run, settled with this one: a misuse. The call
    /// is cancelled first (kept at the head of its own emitter, no
    /// verdict, no attempt used), so that the panic charges its consumer
    /// nothing and loses nothing.
    #[cold]
    fn not_ours(call: ReplayCall<T>) -> ! {
        drop(call);
        panic!("a ReplayCall is settled by the run that gave it");
    }

    /// The call succeeded: the trigger is delivered (counted in
    /// `replayed`). Past the timeout the breaker counts it as timed out,
    /// and it is delivered all the same.
    ///
    /// # Panics
    ///
    /// If `call` came from another run: it is delivered all the same (its
    /// consumer has it), on its own emitter, then the panic.
    pub fn delivered(&mut self, call: ReplayCall<T>) {
        let ours = self.owns(&call);
        call.deliver();
        assert!(ours, "a ReplayCall is settled by the run that gave it");
        self.out.delivered += 1;
    }

    /// The call failed with `error`: the replay stops
    /// ([`ReplayStop::Failed`]), one attempt used; the trigger is kept at
    /// the head, or handed back after its last attempt (in
    /// [`Replayed::handed_back`]). Past the timeout it counts as timed out.
    ///
    /// # Panics
    ///
    /// If `call` came from another run (it is cancelled first: kept at
    /// the head of its emitter, no verdict, no attempt used).
    pub fn failed(&mut self, call: ReplayCall<T>, error: E) {
        if !self.owns(&call) {
            Self::not_ours(call);
        }
        let (permit, item, elapsed_ns) = call.end();
        let inner: &Inner<T> = &self.emitter.inner;
        let reason = if inner.record_call(permit, false, elapsed_ns) {
            Divert::TimedOut(Duration::from_nanos(elapsed_ns))
        } else {
            Divert::Failed(error)
        };
        not_delivered(inner, item, reason, &mut self.out);
    }

    /// The caller cut the call at its deadline: as [`failed`](Self::failed),
    /// counted in the breaker as a timeout.
    ///
    /// # Panics
    ///
    /// If `call` came from another run (it is cancelled first, as by
    /// [`failed`](Self::failed)).
    pub fn timed_out(&mut self, call: ReplayCall<T>) {
        if !self.owns(&call) {
            Self::not_ours(call);
        }
        let (permit, item, elapsed_ns) = call.end();
        permit.record_timeout_ns(elapsed_ns);
        let reason = Divert::TimedOut(Duration::from_nanos(elapsed_ns));
        not_delivered(&*self.emitter.inner, item, reason, &mut self.out);
    }

    /// What the replay did; gives the turn back (once no call of it is
    /// left unsettled).
    pub fn finish(self) -> Replayed<T, E> {
        self.out
    }
}

impl<T> ReplayCall<T> {
    /// Takes the call apart for its verdict: the end is read on its
    /// emitter's clock, and the slot given back.
    fn end(mut self) -> (OwnedPermit, Pending<T>, u64) {
        let clock = self.turn.0.inner.breaker.clock();
        let elapsed_ns = clock.delta_nanos(self.start, clock.raw());
        self.slot = None;
        let permit = self.permit.take().expect("unsettled");
        let item = self.item.take().expect("unsettled");
        (permit, item, elapsed_ns)
    }

    /// Delivered, on its own emitter: the breaker's verdict, and counted
    /// in `replayed`.
    fn deliver(self) {
        let turn = Arc::clone(&self.turn);
        let inner: &Inner<T> = &turn.0.inner;
        let (permit, item, elapsed_ns) = self.end();
        inner.record_call(permit, true, elapsed_ns);
        drop(item);
        inner.metrics_count(Count::Replayed);
    }

    /// The trigger, to call the consumer with.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use tailguard::{Breaker, dlq::{DeadLetterQueue, Priority}, emit::Emitter};
    /// let e = Emitter::builder(Breaker::builder().build()?, DeadLetterQueue::with_capacity(8)?)
    ///     .timeout(Duration::from_secs(1))?
    ///     .build()?;
    /// e.enqueue("order-7", Priority::Critical).unwrap();
    /// let mut run = e.replay_run::<()>(1);
    /// let call = run.next_call().unwrap();
    /// assert_eq!(*call.trigger(), "order-7");
    /// run.delivered(call);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn trigger(&self) -> &T {
        &self.item.as_ref().expect("unsettled").trigger
    }

    /// The trigger's class.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use tailguard::{Breaker, dlq::{DeadLetterQueue, Priority}, emit::Emitter};
    /// let e = Emitter::builder(Breaker::builder().build()?, DeadLetterQueue::with_capacity(8)?)
    ///     .timeout(Duration::from_secs(1))?
    ///     .build()?;
    /// e.enqueue("order-7", Priority::Critical).unwrap();
    /// let mut run = e.replay_run::<()>(1);
    /// let call = run.next_call().unwrap();
    /// assert_eq!(call.class(), Priority::Critical);
    /// run.delivered(call);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn class(&self) -> Priority {
        self.item.as_ref().expect("unsettled").class
    }

    /// The call's time budget: the emitter's timeout from the call's start.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use tailguard::{Breaker, dlq::{DeadLetterQueue, Priority}, emit::Emitter};
    /// let e = Emitter::builder(Breaker::builder().build()?, DeadLetterQueue::with_capacity(8)?)
    ///     .timeout(Duration::from_secs(1))?
    ///     .build()?;
    /// e.enqueue("order-7", Priority::Critical).unwrap();
    /// let mut run = e.replay_run::<()>(1);
    /// let call = run.next_call().unwrap();
    /// assert!(call.deadline().remaining() <= Duration::from_secs(1));
    /// run.delivered(call);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn deadline(&self) -> Deadline<'_> {
        let inner = &self.turn.0.inner;
        Deadline {
            clock: inner.breaker.clock(),
            start: self.start,
            budget: inner.timeout,
        }
    }
}

impl<T> Drop for ReplayCall<T> {
    fn drop(&mut self) {
        let Some(mut p) = self.item.take() else { return };
        let inner: &Inner<T> = &self.turn.0.inner;
        self.slot = None;
        if let Some(permit) = self.permit.take() {
            if std::thread::panicking() {
                let clock = inner.breaker.clock();
                permit.record_latency_ns(clock.delta_nanos(self.start, clock.raw()), false);
                p.attempts = p.attempts.saturating_add(1);
            } else {
                drop(permit); // cancelled: no verdict on the consumer
            }
        }
        inner.keep_at_head(p);
    }
}

impl<T, E> fmt::Debug for ReplayRun<T, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReplayRun")
            .field("max", &self.max)
            .field("delivered", &self.out.delivered)
            .field("stopped", &self.out.stopped.is_some())
            .finish()
    }
}

impl<T: fmt::Debug> fmt::Debug for ReplayCall<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReplayCall")
            .field("trigger", &self.item.as_ref().map(|p| &p.trigger))
            .field("deadline", &self.deadline())
            .finish()
    }
}
