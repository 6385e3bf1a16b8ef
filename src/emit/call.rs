//! One call of the consumer, shared by the blocking and the async emit and
//! replay, and by the shared and the per-core emitter: what an emitter
//! must provide ([`Host`]: its breaker, bulkhead, queue and counters), and,
//! written once over it, the breaker's verdict on a call that returned,
//! what an emit's trigger becomes after it, and how a call ended.

use super::metrics::Count;
use super::pending::Pending;
use super::{Divert, Emitted, HandBack, Inner};
use crate::breaker::Breaker;
use crate::bulkhead::{Bulkhead, BulkheadFull, BulkheadPermit, OwnedBulkheadPermit};
use crate::dlq::{Priority, Pushed};
use crate::report::Rejected;
use crate::shard::Shard;
use crate::{LocalPermit, OwnedPermit, Permit};
use std::any::Any;
use std::panic::resume_unwind;
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

/// How a call that was made ended: what it returned, cut at its deadline
/// (an async call only: a blocking one cannot be cut, it is late instead),
/// cut at once for want of a timer (async only: see `crate::timer`), or
/// its panic.
pub(super) enum Outcome<R> {
    Done(R),
    TimedOut,
    NoTimer,
    Panicked(Box<dyn Any + Send>),
}

/// A breaker permit's verdicts, for [`Host::Permit`], in nanoseconds on
/// the breaker's clock (as the emit measured them: no round trip through a
/// `Duration`).
pub(super) trait Verdict: Sized {
    /// Where the verdict is counted, found before the clock's end reading
    /// ([`target`](Self::target)): a shared permit's thread shard if it is
    /// built (found after the reading, it costs the precise emit about
    /// 10 ns, see `benches/emit_overhead.rs`), a per-core permit's handle
    /// shard; nothing for an owned permit.
    type Target: Copy;
    fn target(&self) -> Self::Target;
    /// The verdict, counted in `target`, which this permit's
    /// [`target`](Self::target) gave on this thread.
    fn record_latency_in(self, target: Self::Target, latency_ns: u64, ok: bool);
    /// A call that timed out, counted in `target`.
    fn record_timeout_in(self, target: Self::Target, elapsed_ns: u64);

    /// The verdict, its target found now.
    #[inline(always)]
    fn record_latency_ns(self, latency_ns: u64, ok: bool) {
        let target = self.target();
        self.record_latency_in(target, latency_ns, ok);
    }
    /// A call that timed out, its target found now.
    #[inline]
    fn record_timeout_ns(self, elapsed_ns: u64) {
        let target = self.target();
        self.record_timeout_in(target, elapsed_ns);
    }
}

impl<'a> Verdict for Permit<'a> {
    type Target = Option<&'a Shard>;
    #[inline(always)]
    fn target(&self) -> Option<&'a Shard> {
        self.shard()
    }
    #[inline(always)]
    fn record_latency_in(self, shard: Option<&'a Shard>, latency_ns: u64, ok: bool) {
        self.record_latency_ns_in(shard, latency_ns, ok);
    }
    #[inline]
    fn record_timeout_in(self, shard: Option<&'a Shard>, elapsed_ns: u64) {
        self.record_timeout_ns_in(shard, elapsed_ns);
    }
}

impl Verdict for crate::OwnedPermit {
    type Target = ();
    #[inline(always)]
    fn target(&self) {}
    #[inline(always)]
    fn record_latency_in(self, (): (), latency_ns: u64, ok: bool) {
        crate::OwnedPermit::record_latency_ns(self, latency_ns, ok);
    }
    #[inline]
    fn record_timeout_in(self, (): (), elapsed_ns: u64) {
        crate::OwnedPermit::record_timeout_ns(self, elapsed_ns);
    }
}

impl<'a> Verdict for LocalPermit<'a> {
    type Target = &'a crate::shard::LocalShard;
    #[inline(always)]
    fn target(&self) -> &'a crate::shard::LocalShard {
        self.shard()
    }
    #[inline(always)]
    fn record_latency_in(self, shard: &'a crate::shard::LocalShard, latency_ns: u64, ok: bool) {
        self.record_latency_ns_in(shard, latency_ns, ok);
    }
    #[inline]
    fn record_timeout_in(self, _: &'a crate::shard::LocalShard, elapsed_ns: u64) {
        LocalPermit::record_timeout_ns(self, elapsed_ns);
    }
}

/// What an emitter provides for its calls, its emits' outcomes and its
/// replay: the shared [`Emitter`](super::Emitter)'s `Inner` (atomics, a
/// lock around the queue's head, an atomic replay turn) or a
/// [`LocalEmitter`](super::LocalEmitter) (its core's handle, cells and
/// single-writer counters). The rest (an emit's outcome here, replay's
/// policy in [`Replay`](super::replay::Replay)) is written once, over it.
pub(super) trait Host<T> {
    /// The breaker's permit for one call.
    type Permit<'a>: Verdict
    where
        Self: 'a;
    /// The bulkhead's slot for one call (given back when dropped).
    type Slot<'a>
    where
        Self: 'a;
    /// The right to replay, given back when dropped.
    type Turn<'a>
    where
        Self: 'a;

    fn breaker(&self) -> &Breaker;
    fn timeout(&self) -> Duration;
    fn timeout_ns(&self) -> u64;
    fn replay_attempts(&self) -> u32;
    /// Where this thread's emit times are counted, found before an emit's
    /// end reading of the clock (as [`Verdict::target`]; never built
    /// there: a thread's first emit builds its shard after the reading, so
    /// the build is not timed).
    type Times<'a>: Copy
    where
        Self: 'a;

    fn metrics_count(&self, what: Count);
    /// This thread's [`Times`](Self::Times).
    fn times(&self) -> Self::Times<'_>;
    /// One emit's time (and whether it delivered), counted in `times`
    /// (this thread's, from [`times`](Self::times)).
    fn emit_time_in(&self, times: Self::Times<'_>, ns: u64, delivered: bool);
    /// As `emit_time_in`, this thread's `times` found now.
    #[inline(always)]
    fn emit_time(&self, ns: u64, delivered: bool) {
        self.emit_time_in(self.times(), ns, delivered);
    }
    /// Queues `trigger` unless the emitter is shut down; counts nothing.
    fn enqueue(&self, trigger: T, class: Priority) -> Result<Pushed<T>, (T, HandBack)>;
    /// The breaker, then the bulkhead (a full bulkhead gives the permit
    /// back untouched: the call was never made, counted in
    /// `bulkhead_rejections`), at the reading `start`.
    #[allow(clippy::type_complexity)]
    fn admit(&self, start: u64) -> Result<(Self::Permit<'_>, Option<Self::Slot<'_>>), NotAdmitted>;
    /// The replay turn, if no other replay holds it.
    fn replay_turn(&self) -> Option<Self::Turn<'_>>;
    /// The trigger at the head, taken out
    /// ([`head_first`](super::pending::head_first)).
    fn take_next(&self) -> Option<Pending<T>>;
    /// Puts `p` back at the head.
    fn keep_at_head(&self, p: Pending<T>);
    /// Puts `p` back at the head unless the emitter is shut down (then it
    /// comes back).
    fn keep_unless_shut_down(&self, p: Pending<T>) -> Result<(), Pending<T>>;

    /// The breaker's verdict on a call that returned (`ok` or not)
    /// `elapsed_ns` after its start: past the timeout it counts as timed
    /// out (failed and slow), whatever it returned. Returns whether it was
    /// late.
    #[inline(always)]
    fn record_call(&self, permit: impl Verdict, ok: bool, elapsed_ns: u64) -> bool {
        let target = permit.target();
        self.record_call_in(permit, target, ok, elapsed_ns)
    }

    /// As [`record_call`](Self::record_call), counted in `target`
    /// ([`Verdict::target`] of `permit`, found before the end reading).
    #[inline(always)]
    fn record_call_in<P: Verdict>(&self, permit: P, target: P::Target, ok: bool, elapsed_ns: u64) -> bool {
        let late = elapsed_ns > self.timeout_ns();
        if late {
            permit.record_timeout_in(target, elapsed_ns);
        } else {
            permit.record_latency_in(target, elapsed_ns, ok);
        }
        late
    }

    /// Queues a trigger that was not delivered, or hands it back; counts it.
    #[inline(never)]
    fn divert<O, E>(&self, trigger: T, class: Priority, reason: Divert<E>) -> Emitted<T, O, E> {
        match self.enqueue(trigger, class) {
            Ok(pushed) => {
                self.metrics_count(match reason {
                    Divert::Open(_) => Count::DivertedOpen,
                    Divert::BulkheadFull => Count::DivertedBulkhead,
                    Divert::TimedOut(_) => Count::DivertedTimeout,
                    Divert::Failed(_) => Count::DivertedFailed,
                    Divert::NoTimer => Count::DivertedNoTimer,
                });
                let displaced = match pushed {
                    Pushed::Queued => None,
                    Pushed::Displaced(old, old_class) => {
                        self.metrics_count(Count::Displaced);
                        Some((old, old_class))
                    }
                };
                Emitted::Diverted { reason, displaced }
            }
            Err((trigger, not_queued)) => {
                self.metrics_count(match not_queued {
                    HandBack::QueueFull => Count::HandedBackFull,
                    HandBack::ShutDown => Count::HandedBackShutDown,
                });
                Emitted::HandedBack {
                    trigger,
                    class,
                    reason,
                    not_queued,
                }
            }
        }
    }

    /// An emit's call that panicked, at `start`: gives back the bulkhead
    /// slot, counts a failure in the breaker, queues the trigger (counted
    /// as failed, with an emit time) if the queue takes it, then resumes
    /// the panic. What cannot be queued is dropped with the unwinding and
    /// counted in `dropped_in_panics`: the trigger itself when the queue is
    /// full or shut down (the emit then counts as cancelled), or the
    /// lower-class trigger it displaced.
    #[cold]
    fn panicked(
        &self,
        (permit, slot): (Self::Permit<'_>, Option<Self::Slot<'_>>),
        trigger: T,
        class: Priority,
        start: u64,
        panic: Box<dyn Any + Send>,
    ) -> ! {
        drop(slot);
        self.failed_in_panic(permit, trigger, class, start);
        resume_unwind(panic)
    }

    /// What [`panicked`](Self::panicked) does before the panic resumes
    /// (the slot already given back): the breaker counts a failure, and
    /// the trigger is queued (counted as failed, with an emit time) if
    /// the queue takes it; what cannot be queued is counted in
    /// `dropped_in_panics` (and the emit, if it is the trigger itself, as
    /// cancelled).
    #[cold]
    fn failed_in_panic(&self, permit: impl Verdict, trigger: T, class: Priority, start: u64) {
        let clock = self.breaker().clock();
        let end = clock.raw();
        permit.record_latency_ns(clock.delta_nanos(start, end), false);
        match self.enqueue(trigger, class) {
            Ok(pushed) => {
                self.metrics_count(Count::DivertedFailed);
                if let Pushed::Displaced(..) = pushed {
                    self.metrics_count(Count::Displaced);
                    self.metrics_count(Count::PanicDropped);
                }
                self.emit_time(clock.delta_nanos(start, end), false);
            }
            Err(_) => {
                self.metrics_count(Count::Cancelled);
                self.metrics_count(Count::PanicDropped);
            }
        }
    }

    /// Settles an emit's call that returned `result` `elapsed_ns` after its
    /// start: the breaker's verdict, then delivered, or diverted with its
    /// reason. A call that returned after the timeout counts in the breaker
    /// as timed out (failed and slow); if it succeeded it is still
    /// delivered (the consumer has it: queueing it would deliver it twice),
    /// counted in `overran`.
    #[inline(always)]
    fn settle<O, E>(
        &self,
        permit: impl Verdict,
        result: Result<O, E>,
        trigger: T,
        class: Priority,
        elapsed_ns: u64,
    ) -> Emitted<T, O, E> {
        let target = permit.target();
        self.settle_in(permit, target, result, trigger, class, elapsed_ns)
    }

    /// As [`settle`](Self::settle), the verdict counted in `target`
    /// ([`Verdict::target`] of `permit`, found before the end reading).
    #[inline(always)]
    fn settle_in<P: Verdict, O, E>(
        &self,
        permit: P,
        target: P::Target,
        result: Result<O, E>,
        trigger: T,
        class: Priority,
        elapsed_ns: u64,
    ) -> Emitted<T, O, E> {
        let late = self.record_call_in(permit, target, result.is_ok(), elapsed_ns);
        match result {
            Ok(o) => {
                // Counted delivered with its emit time, by the caller.
                if late {
                    self.metrics_count(Count::Overran);
                }
                Emitted::Delivered(o)
            }
            Err(_) if late => self.divert(trigger, class, Divert::TimedOut(Duration::from_nanos(elapsed_ns))),
            Err(e) => self.divert(trigger, class, Divert::Failed(e)),
        }
    }
}

impl<T> Inner<T> {
    /// The breaker, then the bulkhead (a full bulkhead gives the permit
    /// back untouched: the call was never made), at the reading `start`.
    #[inline(always)]
    pub(super) fn admit(&self, start: u64) -> Result<Admitted<'_>, NotAdmitted> {
        self.admit_by(self.breaker.allow_at(start), Bulkhead::try_acquire, Permit::abandon)
    }

    /// As [`admit`](Self::admit), with an owned permit and slot (an emit
    /// the caller drives: [`InFlight`](super::InFlight),
    /// [`ReplayCall`](super::ReplayCall)).
    pub(super) fn admit_owned(&self, start: u64) -> Result<(OwnedPermit, Option<OwnedBulkheadPermit>), NotAdmitted> {
        self.admit_by(
            self.breaker.allow_owned_at(start),
            Bulkhead::try_acquire_owned,
            OwnedPermit::abandon,
        )
    }

    /// The admission both of those are: the breaker's answer `permit`,
    /// then a slot of the bulkhead (if any) by `acquire`; a full bulkhead
    /// gives the permit back by `abandon`.
    #[inline(always)]
    fn admit_by<'a, P, S>(
        &'a self,
        permit: Result<P, Rejected>,
        acquire: impl FnOnce(&'a Bulkhead) -> Result<S, BulkheadFull>,
        abandon: impl FnOnce(P),
    ) -> Result<(P, Option<S>), NotAdmitted> {
        let permit = permit.map_err(NotAdmitted::Open)?;
        let slot = match &self.bulkhead {
            None => None,
            Some(bulkhead) => match acquire(bulkhead) {
                Ok(slot) => Some(slot),
                Err(_) => {
                    abandon(permit);
                    // This emitter's own share of the bulkhead's refusals
                    // (the bulkhead may be shared).
                    self.metrics.count(Count::BulkheadRejected);
                    return Err(NotAdmitted::BulkheadFull);
                }
            },
        };
        Ok((permit, slot))
    }
}
