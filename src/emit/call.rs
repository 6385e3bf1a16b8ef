//! One call of the consumer, shared by the blocking and the async emit and
//! replay: its admission (the breaker, then the bulkhead), the breaker's
//! verdict on a call that returned, what an emit's trigger becomes after
//! it, and how a call ended.

use super::metrics::Count;
use super::{Divert, Emitted, Inner};
use crate::bulkhead::BulkheadPermit;
use crate::dlq::{Priority, Pushed};
use crate::report::Rejected;
use crate::Permit;
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

    /// An emit's call that panicked, at `start`: gives back the bulkhead
    /// slot, counts a failure in the breaker, queues the trigger (counted
    /// as failed, with an emit time) if the queue takes it, then resumes
    /// the panic. What cannot be queued is dropped with the unwinding and
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

    /// Settles an emit's call that returned `result` `elapsed_ns` after its
    /// start: the breaker's verdict, then delivered, or diverted with its
    /// reason. A call that returned after the timeout counts in the breaker
    /// as timed out (failed and slow); if it succeeded it is still
    /// delivered (the consumer has it: queueing it would deliver it twice),
    /// counted in `overran`.
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
