//! The blocking emitter: the call runs on the caller's thread and is told
//! its deadline; a call that returns after it counts as timed out.

use super::metrics::Count;
use super::{Deadline, Divert, Emitted, Emitter, Held, Inner, Pending, ReplayStop, Replayed};
use crate::bulkhead::BulkheadPermit;
use crate::dlq::Priority;
use crate::dlq::Pushed;
use crate::report::Rejected;
use crate::Permit;
use std::any::Any;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::time::Duration;

/// The breaker's permit and the bulkhead's slot for one call.
pub(super) type Admitted<'a> = (Permit<'a>, Option<BulkheadPermit<'a>>);

/// Why a call was not made.
pub(super) enum NotAdmitted {
    Open(Rejected),
    BulkheadFull,
}

impl NotAdmitted {
    pub(super) fn reason<E>(self) -> Divert<E> {
        match self {
            NotAdmitted::Open(r) => Divert::Open(r),
            NotAdmitted::BulkheadFull => Divert::BulkheadFull,
        }
    }
}

impl<T> Inner<T> {
    /// The breaker, then the bulkhead (a full bulkhead gives the permit
    /// back untouched: the call was never made), at the reading `start`.
    #[inline(always)]
    pub(super) fn admit(&self, start: u64) -> Result<Admitted<'_>, NotAdmitted> {
        let permit = self.breaker.allow_at(start).map_err(NotAdmitted::Open)?;
        let slot = match &self.bulkhead {
            None => None,
            Some(bulkhead) => match bulkhead.try_acquire() {
                Ok(slot) => Some(slot),
                Err(_) => {
                    permit.abandon();
                    // This emitter's own share of the bulkhead's refusals
                    // (the bulkhead may be shared).
                    self.metrics.count(Count::BulkheadRejected);
                    return Err(NotAdmitted::BulkheadFull);
                }
            },
        };
        Ok((permit, slot))
    }

    /// A call that panicked, at `start`: gives back the bulkhead slot,
    /// counts a failure in the breaker, queues the trigger (counted as
    /// failed, with an emit time) if the queue takes it, then resumes the
    /// panic. What cannot be queued is dropped with the unwinding and
    /// counted in `dropped_in_panics`: the trigger itself when the queue is
    /// full or shut down (the emit then counts as cancelled), or the
    /// lower-class trigger it displaced.
    #[cold]
    pub(super) fn panicked(
        &self,
        (permit, slot): Admitted<'_>,
        trigger: T,
        class: Priority,
        start: u64,
        panic: Box<dyn Any + Send>,
    ) -> ! {
        drop(slot);
        let clock = self.breaker.clock();
        let end = clock.raw();
        permit.record_latency(Duration::from_nanos(clock.delta_nanos(start, end)), false);
        match self.enqueue(trigger, class) {
            Ok(pushed) => {
                self.metrics.count(Count::DivertedFailed);
                if let Pushed::Displaced(..) = pushed {
                    self.metrics.count(Count::Displaced);
                    self.metrics.count(Count::PanicDropped);
                }
                self.metrics.emit_time(clock.delta_nanos(start, end), false);
            }
            Err(_) => {
                self.metrics.count(Count::Cancelled);
                self.metrics.count(Count::PanicDropped);
            }
        }
        resume_unwind(panic)
    }

    /// The breaker's verdict on a call that returned (`ok` or not)
    /// `elapsed_ns` after its start: past the timeout it counts as timed
    /// out (failed and slow), whatever it returned. Returns whether it was
    /// late.
    #[inline(always)]
    pub(super) fn record_call(&self, permit: Permit<'_>, ok: bool, elapsed_ns: u64) -> bool {
        let late = elapsed_ns > self.timeout_ns;
        if late {
            permit.record_timeout(Duration::from_nanos(elapsed_ns));
        } else {
            permit.record_latency(Duration::from_nanos(elapsed_ns), ok);
        }
        late
    }

    /// Settles a call that returned `result` `elapsed_ns` after its start:
    /// the breaker's verdict, then delivered, or diverted with its reason.
    /// A call that returned after the timeout counts in the breaker as
    /// timed out (failed and slow); if it succeeded it is still delivered
    /// (the consumer has it: queueing it would deliver it twice), counted
    /// in `overran`.
    #[inline(always)]
    pub(super) fn settle<O, E>(
        &self,
        permit: Permit<'_>,
        result: Result<O, E>,
        trigger: T,
        class: Priority,
        elapsed_ns: u64,
    ) -> Emitted<T, O, E> {
        let elapsed = Duration::from_nanos(elapsed_ns);
        let late = self.record_call(permit, result.is_ok(), elapsed_ns);
        match result {
            Ok(o) => {
                // Counted delivered with its emit time, by the caller.
                if late {
                    self.metrics.count(Count::Overran);
                }
                Emitted::Delivered(o)
            }
            Err(_) if late => self.divert(trigger, class, Divert::TimedOut(elapsed)),
            Err(e) => self.divert(trigger, class, Divert::Failed(e)),
        }
    }
}

impl<T> Emitter<T> {
    /// Emits `trigger` (of class `class`) through `call` on this thread:
    /// breaker, bulkhead, then `call(&trigger, &deadline)`; a trigger that
    /// is not delivered is queued or handed back (see [`Emitted`]). Never
    /// calls the consumer, nor waits, when the breaker rejects or the
    /// bulkhead is full.
    ///
    /// `call` gets the [`Deadline`] to set its own I/O timeouts. If it
    /// returns after the deadline, the breaker counts a timeout (a failure,
    /// and slow); an `Ok` is still delivered (the consumer has it: queueing
    /// it would deliver it twice; counted in `overran`), an `Err` is
    /// diverted as [`Divert::TimedOut`].
    ///
    /// If `call` panics, its trigger is queued first (as failed), then the
    /// panic resumes; the bulkhead slot and the breaker permit are given
    /// back on the way.
    ///
    /// Reads the breaker's clock twice (start, end): the start is the
    /// breaker's admission time, the deadline's origin and the latency's
    /// start.
    ///
    /// ```
    /// use tailguard::{Breaker, dlq::{DeadLetterQueue, Priority}, emit::{Divert, Emitted, Emitter}};
    ///
    /// let e = Emitter::builder(Breaker::builder().build()?, DeadLetterQueue::with_capacity(8)?).build()?;
    /// let out = e.emit_blocking(5u32, Priority::Routine, |n, _| if *n > 3 { Err("too big") } else { Ok(*n) });
    /// assert!(matches!(out, Emitted::Diverted { reason: Divert::Failed("too big"), displaced: None }));
    /// assert_eq!(e.stats().diverted_failed, 1);
    /// # Ok::<(), tailguard::ConfigError>(())
    /// ```
    pub fn emit_blocking<O, E>(
        &self,
        trigger: T,
        class: Priority,
        call: impl FnOnce(&T, &Deadline<'_>) -> Result<O, E>,
    ) -> Emitted<T, O, E> {
        let inner = &*self.inner;
        let clock = inner.breaker.clock();
        let start = clock.raw();
        let (out, end) = match inner.admit(start) {
            Err(not) => {
                let out = inner.divert(trigger, class, not.reason());
                (out, clock.raw())
            }
            Ok((permit, slot)) => {
                let deadline = Deadline {
                    clock,
                    start,
                    budget: inner.timeout,
                };
                let result = match catch_unwind(AssertUnwindSafe(|| call(&trigger, &deadline))) {
                    Ok(result) => result,
                    Err(panic) => inner.panicked((permit, slot), trigger, class, start, panic),
                };
                let end = clock.raw();
                drop(slot);
                let out = inner.settle(permit, result, trigger, class, clock.delta_nanos(start, end));
                (out, end)
            }
        };
        inner
            .metrics
            .emit_time(clock.delta_nanos(start, end), out.is_delivered());
        out
    }

    /// Replays up to `max` queued triggers through `call` on this thread,
    /// if the breaker is CLOSED (and not forced open): in
    /// [`pop`](crate::dlq::DeadLetterQueue::pop) order, each through the
    /// breaker, the bulkhead and the timeout as an emit. The caller bounds
    /// the rate: `max` per call, calls as often as it likes.
    ///
    /// Stops at the first trigger that is not delivered, which stays at the
    /// head of the queue (so nothing behind it in its class overtakes it),
    /// unless that was its [`replay_attempts`](super::EmitterBuilder::replay_attempts)-th
    /// failed call: then it is handed back in [`Replayed::handed_back`]. A
    /// trigger the breaker or the bulkhead turned away was not called and
    /// does not use up an attempt. If `call` panics, the trigger is kept
    /// (one attempt used) and the panic resumes.
    ///
    /// One replay runs at a time per emitter, and it makes one call at a
    /// time, in order: a replay of `max` triggers through a consumer taking
    /// `d` per call takes `max × d`. Another replay meanwhile returns at once
    /// with [`ReplayStop::Busy`]. To drain a deep queue faster, call it
    /// again as each returns, or [`drain`](Self::drain) into your own
    /// concurrent sender.
    ///
    /// ```
    /// use tailguard::{Breaker, dlq::{DeadLetterQueue, Priority}, emit::{Emitter, ReplayStop}};
    ///
    /// let b = Breaker::builder().build()?;
    /// let e = Emitter::builder(b.clone(), DeadLetterQueue::with_capacity(8)?).build()?;
    /// b.trip_now();
    /// for i in 0..3 {
    ///     let _ = e.emit_blocking(i, Priority::Routine, |_, _| Ok::<_, ()>(()));
    /// }
    /// assert_eq!(e.replay_blocking(10, |_, _| Ok::<_, ()>(())).stopped, Some(ReplayStop::NotClosed));
    /// b.reset();
    /// let mut seen = Vec::new();
    /// let r = e.replay_blocking(2, |i, _| {
    ///     seen.push(*i);
    ///     Ok::<_, ()>(())
    /// });
    /// assert_eq!((r.delivered, r.stopped), (2, None));
    /// let r = e.replay_blocking(10, |i, _| {
    ///     seen.push(*i);
    ///     Ok::<_, ()>(())
    /// });
    /// assert_eq!((r.delivered, r.stopped), (1, Some(ReplayStop::Empty)));
    /// assert_eq!(seen, [0, 1, 2]);
    /// # Ok::<(), tailguard::ConfigError>(())
    /// ```
    pub fn replay_blocking<O, E>(
        &self,
        max: usize,
        mut call: impl FnMut(&T, &Deadline<'_>) -> Result<O, E>,
    ) -> Replayed<T, E> {
        let inner = &*self.inner;
        let _turn = match inner.begin_replay() {
            Ok(turn) => turn,
            Err(stopped) => return stopped,
        };
        let mut out = Replayed {
            delivered: 0,
            stopped: None,
            handed_back: None,
        };
        let clock = inner.breaker.clock();
        while out.delivered < max {
            // Taken out under a brief lock; no lock is held while `call`
            // runs (it may shut the emitter down, drain it, queue by hand).
            let Some(p) = inner.take_next() else {
                out.stopped = Some(ReplayStop::Empty);
                break;
            };
            let mut held = Held { inner, item: Some(p) };
            let start = clock.raw();
            let (permit, slot) = match inner.admit(start) {
                Ok(admitted) => admitted,
                Err(not) => {
                    out.handed_back = held.refused();
                    out.stopped = Some(ReplayStop::Failed(not.reason()));
                    break;
                }
            };
            let deadline = Deadline {
                clock,
                start,
                budget: inner.timeout,
            };
            let trigger = &held.item.as_ref().expect("held until settled").trigger;
            let result = match catch_unwind(AssertUnwindSafe(|| call(trigger, &deadline))) {
                Ok(result) => result,
                Err(panic) => {
                    drop(slot);
                    permit.record(false);
                    held.panicked();
                    resume_unwind(panic);
                }
            };
            drop(slot);
            let elapsed = clock.delta_nanos(start, clock.raw());
            let timed_out = inner.record_call(permit, result.is_ok(), elapsed);
            let reason = match result {
                Ok(_) => {
                    held.delivered();
                    out.delivered += 1;
                    continue;
                }
                Err(_) if timed_out => Divert::TimedOut(Duration::from_nanos(elapsed)),
                Err(e) => Divert::Failed(e),
            };
            out.handed_back = held.failed();
            out.stopped = Some(ReplayStop::Failed(reason));
            break;
        }
        out
    }
}

impl<T> super::ReplayState<T> {
    /// The trigger at the head: the one kept from a failed attempt (it goes
    /// first whatever has been queued since), else the queue's next.
    pub(super) fn next(&mut self) -> Option<Pending<T>> {
        self.pending.take().or_else(|| {
            self.queue.pop().map(|(trigger, class)| Pending {
                trigger,
                class,
                attempts: 0,
            })
        })
    }
}
