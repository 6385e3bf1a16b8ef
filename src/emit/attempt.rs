//! An emit whose call the caller makes itself ([`Emitter::begin`]): for a
//! runtime the crate has no timer for, or a call made from another
//! language (the Python package drives its asyncio emits this way). The
//! admission, the verdict, the diversion and the counting are the emit's
//! own (written once, over [`Host`]); only the call, and cutting it at its
//! deadline, are the caller's.

use super::call::Host;
use super::metrics::Count;
use super::{Deadline, Divert, Emitted, Emitter, Inner};
use crate::bulkhead::OwnedBulkheadPermit;
use crate::dlq::Priority;
use crate::OwnedPermit;
use core::fmt;
use std::time::Duration;

/// An emit admitted by its breaker and its bulkhead, whose call the caller
/// is making: from [`Emitter::begin`]. It holds the breaker's permit and
/// the bulkhead's slot (both owned: it may move to another thread or
/// task), and the trigger, until one of its three ends:
///
/// * [`finish`](Self::finish) with what the call returned: delivered, or
///   diverted (queued, or handed back), exactly as an
///   [`emit_blocking`](Emitter::emit_blocking) whose call returned that;
/// * [`timed_out`](Self::timed_out): the caller cut the call at its
///   deadline; the breaker counts a timeout and the trigger is diverted
///   as [`Divert::TimedOut`];
/// * [`cancel`](Self::cancel), or a drop: the emit is cancelled, as a
///   dropped emit future is. The slot and the permit go back with no
///   verdict on the consumer, counted in `cancelled`; `cancel` hands the
///   trigger back, a drop drops it. A drop while the thread panics counts
///   the call failed instead and queues its trigger, as a panicking call
///   of `emit_blocking` does.
///
/// ```
/// use tailguard::{Breaker, dlq::{DeadLetterQueue, Priority}, emit::{Emitted, Emitter}};
///
/// let e = Emitter::builder(Breaker::builder().build()?, DeadLetterQueue::with_capacity(8)?)
///     .bulkhead(4)?
///     .build()?;
/// let out: Emitted<&str, usize, String> = match e.begin("order-1", Priority::Routine) {
///     Ok(call) => {
///         // Make the call however the caller's runtime makes calls,
///         // within call.deadline().remaining().
///         let result = Ok(call.trigger().len());
///         call.finish(result)
///     }
///     Err(not_called) => not_called, // diverted or handed back, the consumer untouched
/// };
/// assert_eq!(out, Emitted::Delivered(7));
/// assert_eq!(e.stats().delivered, 1);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[must_use = "an admitted emit holds a bulkhead slot and a breaker permit: finish it, or it is cancelled"]
pub struct InFlight<T> {
    emitter: Emitter<T>,
    /// `None` once ended (the drop then does nothing).
    call: Option<Call<T>>,
    start: u64,
}

struct Call<T> {
    permit: OwnedPermit,
    slot: Option<OwnedBulkheadPermit>,
    trigger: T,
    class: Priority,
}

impl<T> Emitter<T> {
    /// Begins an emit whose call the caller makes: the breaker, then the
    /// bulkhead, at one reading of the breaker's clock (the call's start,
    /// its deadline's origin). Admitted, the caller calls the consumer
    /// and ends the emit with the [`InFlight`] it gets; not admitted,
    /// the trigger is already diverted (queued, or handed back), counted
    /// and timed, and the answer is the emit's outcome (never
    /// [`Emitted::Delivered`]; its reason is [`Divert::Open`] or
    /// [`Divert::BulkheadFull`]).
    ///
    /// Every counter and identity of the emitter holds for these emits as
    /// for [`emit`](Emitter::emit)'s. Use it where the crate has no timer
    /// (see [`crate::timer`]) or no way to make the call: another
    /// language's event loop, a completion-based runtime.
    ///
    /// ```
    /// use tailguard::{Breaker, dlq::{DeadLetterQueue, Priority}, emit::{Divert, Emitted, Emitter}};
    ///
    /// let b = Breaker::builder().build()?;
    /// let e = Emitter::builder(b.clone(), DeadLetterQueue::with_capacity(8)?).build()?;
    /// b.trip_now();
    /// let out = e.begin::<(), ()>("order-2", Priority::Critical).err().unwrap();
    /// assert!(matches!(out, Emitted::Diverted { reason: Divert::Open(_), displaced: None }));
    /// assert_eq!(e.queue().len(), 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn begin<O, E>(&self, trigger: T, class: Priority) -> Result<InFlight<T>, Emitted<T, O, E>> {
        let inner: &Inner<T> = &self.inner;
        let clock = inner.breaker.clock();
        let start = clock.raw();
        match inner.admit_owned(start) {
            Ok((permit, slot)) => Ok(InFlight {
                emitter: self.clone(),
                call: Some(Call {
                    permit,
                    slot,
                    trigger,
                    class,
                }),
                start,
            }),
            Err(not) => {
                let out = inner.divert(trigger, class, not.reason());
                inner.emit_time(clock.delta_nanos(start, clock.raw()), false);
                Err(out)
            }
        }
    }
}

impl<T> InFlight<T> {
    fn call(&self) -> &Call<T> {
        self.call.as_ref().expect("an emit in flight until it ends")
    }

    /// Takes the call out (the emit ends) and reads the end on the
    /// breaker's clock: the call's latency and the emit's time.
    fn end(&mut self) -> (Call<T>, u64) {
        let call = self.call.take().expect("an emit in flight until it ends");
        let clock = self.emitter.inner.breaker.clock();
        (call, clock.delta_nanos(self.start, clock.raw()))
    }

    /// The trigger, to call the consumer with.
    ///
    /// ```
    /// # use tailguard::{Breaker, dlq::{DeadLetterQueue, Priority}, emit::Emitter};
    /// let e = Emitter::builder(Breaker::builder().build()?, DeadLetterQueue::with_capacity(8)?).build()?;
    /// let call = e.begin::<(), ()>(7u8, Priority::Idle).ok().unwrap();
    /// assert_eq!(*call.trigger(), 7);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn trigger(&self) -> &T {
        &self.call().trigger
    }

    /// The trigger's class.
    ///
    /// ```
    /// # use tailguard::{Breaker, dlq::{DeadLetterQueue, Priority}, emit::Emitter};
    /// let e = Emitter::builder(Breaker::builder().build()?, DeadLetterQueue::with_capacity(8)?).build()?;
    /// let call = e.begin::<(), ()>((), Priority::Critical).ok().unwrap();
    /// assert_eq!(call.class(), Priority::Critical);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn class(&self) -> Priority {
        self.call().class
    }

    /// Whether the call is a HALF_OPEN probe (see
    /// [`Permit::is_probe`](crate::Permit::is_probe)).
    ///
    /// ```
    /// # use tailguard::{Breaker, dlq::{DeadLetterQueue, Priority}, emit::Emitter};
    /// let e = Emitter::builder(Breaker::builder().build()?, DeadLetterQueue::with_capacity(8)?).build()?;
    /// assert!(!e.begin::<(), ()>((), Priority::Routine).ok().unwrap().is_probe());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn is_probe(&self) -> bool {
        self.call().permit.is_probe()
    }

    /// The call's time budget: the emitter's timeout from the emit's
    /// start. The caller cuts the call when it runs out, and says so with
    /// [`timed_out`](Self::timed_out).
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use tailguard::{Breaker, clock::ManualClock, dlq::{DeadLetterQueue, Priority}, emit::Emitter};
    /// let clock = ManualClock::new();
    /// let b = Breaker::builder().clock(clock.clone()).build()?;
    /// let e = Emitter::builder(b, DeadLetterQueue::with_capacity(8)?)
    ///     .timeout(Duration::from_millis(50))?
    ///     .build()?;
    /// let call = e.begin::<(), ()>((), Priority::Routine).ok().unwrap();
    /// clock.advance(Duration::from_millis(20));
    /// assert_eq!(call.deadline().remaining(), Duration::from_millis(30));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn deadline(&self) -> Deadline<'_> {
        let inner = &self.emitter.inner;
        Deadline {
            clock: inner.breaker.clock(),
            start: self.start,
            budget: inner.timeout,
        }
    }

    /// Ends the emit with what the call returned, read now as its end:
    /// the slot goes back, the breaker records the verdict, and the
    /// trigger is delivered or diverted, as by
    /// [`emit_blocking`](Emitter::emit_blocking). A call that returned
    /// after the timeout counts in the breaker as timed out; an `Ok` is
    /// still delivered (counted in `overran`), an `Err` is diverted as
    /// [`Divert::TimedOut`].
    ///
    /// ```
    /// # use tailguard::{Breaker, dlq::{DeadLetterQueue, Priority}, emit::{Divert, Emitted, Emitter}};
    /// let e = Emitter::builder(Breaker::builder().build()?, DeadLetterQueue::with_capacity(8)?).build()?;
    /// let call = e.begin::<(), &str>("a", Priority::Routine).ok().unwrap();
    /// let out = call.finish::<(), _>(Err("503"));
    /// assert!(matches!(out, Emitted::Diverted { reason: Divert::Failed("503"), .. }));
    /// assert_eq!(e.queue().len(), 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn finish<O, E>(mut self, result: Result<O, E>) -> Emitted<T, O, E> {
        let (call, elapsed_ns) = self.end();
        drop(call.slot);
        let inner: &Inner<T> = &self.emitter.inner;
        let out = inner.settle(call.permit, result, call.trigger, call.class, elapsed_ns);
        inner.emit_time(elapsed_ns, out.is_delivered());
        out
    }

    /// Ends the emit whose call the caller cut at its deadline: the breaker
    /// counts a timeout (a failure, and slow) and the trigger is diverted
    /// as [`Divert::TimedOut`] with the time it ran.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use tailguard::{Breaker, clock::ManualClock, dlq::{DeadLetterQueue, Priority}, emit::{Divert, Emitted, Emitter}};
    /// let clock = ManualClock::new();
    /// let b = Breaker::builder().clock(clock.clone()).build()?;
    /// let e = Emitter::builder(b, DeadLetterQueue::with_capacity(8)?)
    ///     .timeout(Duration::from_millis(50))?
    ///     .build()?;
    /// let call = e.begin::<(), ()>("a", Priority::Routine).ok().unwrap();
    /// clock.advance(Duration::from_millis(50));
    /// let out: Emitted<_, (), ()> = call.timed_out();
    /// let ran = Duration::from_millis(50);
    /// assert!(matches!(out, Emitted::Diverted { reason: Divert::TimedOut(t), .. } if t == ran));
    /// assert_eq!(e.stats().diverted_timeout, 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn timed_out<O, E>(mut self) -> Emitted<T, O, E> {
        let (call, elapsed_ns) = self.end();
        drop(call.slot);
        call.permit.record_timeout_ns(elapsed_ns);
        let inner: &Inner<T> = &self.emitter.inner;
        let out = inner.divert(
            call.trigger,
            call.class,
            Divert::TimedOut(Duration::from_nanos(elapsed_ns)),
        );
        inner.emit_time(elapsed_ns, false);
        out
    }

    /// Cancels the emit and hands its trigger back: the slot and the
    /// permit go back with no verdict on the consumer (a probe's slot is
    /// free for another probe), counted in `cancelled`, as a dropped emit
    /// future is.
    ///
    /// ```
    /// # use tailguard::{Breaker, dlq::{DeadLetterQueue, Priority}, emit::Emitter};
    /// let e = Emitter::builder(Breaker::builder().build()?, DeadLetterQueue::with_capacity(8)?)
    ///     .bulkhead(1)?
    ///     .build()?;
    /// let call = e.begin::<(), ()>("a", Priority::Routine).ok().unwrap();
    /// assert_eq!(e.bulkhead().unwrap().in_flight(), 1);
    /// assert_eq!(call.cancel(), "a");
    /// assert_eq!(e.bulkhead().unwrap().in_flight(), 0);
    /// assert_eq!(e.stats().cancelled, 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn cancel(mut self) -> T {
        let call = self.call.take().expect("an emit in flight until it ends");
        self.cancelled(call)
    }

    fn cancelled(&self, call: Call<T>) -> T {
        let Call {
            permit, slot, trigger, ..
        } = call;
        drop(slot);
        drop(permit); // no verdict on the consumer
        self.emitter.inner.metrics.count(Count::Cancelled);
        trigger
    }
}

impl<T> Drop for InFlight<T> {
    fn drop(&mut self) {
        if self.call.is_none() {
            return;
        }
        if !std::thread::panicking() {
            let call = self.call.take().expect("checked");
            drop(self.cancelled(call));
            return;
        }
        // The caller's code panicked while the call was in flight: as a
        // panicking call of `emit_blocking`, a failure in the breaker, and
        // the trigger queued (counted as failed) if the queue takes it,
        // else dropped with the unwinding and counted.
        let call = self.call.take().expect("checked");
        drop(call.slot);
        let inner: &Inner<T> = &self.emitter.inner;
        inner.failed_in_panic(call.permit, call.trigger, call.class, self.start);
    }
}

impl<T: fmt::Debug> fmt::Debug for InFlight<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("InFlight");
        if let Some(call) = &self.call {
            d.field("trigger", &call.trigger).field("class", &call.class);
        }
        d.field("deadline", &self.deadline()).finish()
    }
}
