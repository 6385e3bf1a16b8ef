//! The blocking emit and replay, of the shared and the per-core emitter
//! alike (written once over [`Host`]): the call runs on the caller's
//! thread and is told its deadline; a call that returns after it counts as
//! timed out.

use super::call::{Host, Outcome, Verdict};
use super::replay::Replay;
use super::{Deadline, Emitted, Emitter, Replayed};
use crate::dlq::Priority;
use std::panic::{catch_unwind, AssertUnwindSafe};

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
    /// diverted as [`Divert::TimedOut`](super::Divert::TimedOut).
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
        emit_blocking_on(&*self.inner, trigger, class, call)
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
    /// with [`ReplayStop::Busy`](super::ReplayStop::Busy). To drain a deep queue faster, call it
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
        call: impl FnMut(&T, &Deadline<'_>) -> Result<O, E>,
    ) -> Replayed<T, E> {
        replay_blocking_on(&*self.inner, max, call)
    }
}

/// The blocking emit over either emitter ([`Host`]): what
/// [`Emitter::emit_blocking`] and
/// [`LocalEmitter::emit_blocking`](super::LocalEmitter::emit_blocking)
/// document, written once (inlined into each: the hot path's instruction
/// counts are each emitter's own).
#[inline(always)]
pub(super) fn emit_blocking_on<T, H: Host<T>, O, E>(
    host: &H,
    trigger: T,
    class: Priority,
    call: impl FnOnce(&T, &Deadline<'_>) -> Result<O, E>,
) -> Emitted<T, O, E> {
    let clock = host.breaker().clock();
    let start = clock.raw();
    // One reading ends the emit: the call's latency (the breaker's
    // verdict) and the emit's time are the same interval, scaled once.
    let (out, elapsed_ns) = match host.admit(start) {
        Err(not) => {
            let out = host.divert(trigger, class, not.reason());
            (out, clock.delta_nanos(start, clock.raw()))
        }
        Ok((permit, slot)) => {
            let deadline = Deadline {
                clock,
                start,
                budget: host.timeout(),
            };
            let result = match catch_unwind(AssertUnwindSafe(|| call(&trigger, &deadline))) {
                Ok(result) => result,
                Err(panic) => host.panicked((permit, slot), trigger, class, start, panic),
            };
            // Where the verdict and the emit time are counted, found
            // before the end reading: found after it, they cost the precise
            // emit about 10 ns (`benches/emit_overhead.rs`).
            let target = permit.target();
            let times = host.times();
            let elapsed_ns = clock.delta_nanos(start, clock.raw());
            drop(slot);
            let out = host.settle_in(permit, target, result, trigger, class, elapsed_ns);
            host.emit_time_in(times, elapsed_ns, out.is_delivered());
            return out;
        }
    };
    host.emit_time(elapsed_ns, out.is_delivered());
    out
}

/// The blocking replay over either emitter ([`Host`]): what
/// [`Emitter::replay_blocking`] and
/// [`LocalEmitter::replay_blocking`](super::LocalEmitter::replay_blocking)
/// document, written once.
pub(super) fn replay_blocking_on<T, H: Host<T>, O, E>(
    host: &H,
    max: usize,
    mut call: impl FnMut(&T, &Deadline<'_>) -> Result<O, E>,
) -> Replayed<T, E> {
    let clock = host.breaker().clock();
    let mut replay = Replay::begin(host, max);
    // Each trigger is taken out of the queue (the shared emitter: under a
    // brief lock); none is held while `call` runs (it may shut the emitter
    // down, drain it, queue by hand).
    while let Some((mut attempt, ())) = replay.next(|| (clock.raw(), ())) {
        let deadline = attempt.deadline();
        let outcome = match catch_unwind(AssertUnwindSafe(|| call(attempt.trigger(), &deadline))) {
            Ok(result) => Outcome::Done(result),
            Err(panic) => Outcome::Panicked(panic),
        };
        attempt.release_slot();
        replay.settle(attempt, outcome);
    }
    replay.finish()
}
