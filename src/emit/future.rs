//! The async emit and replay, of the shared and the per-core emitter
//! alike (written once over [`Host`]): the call is a future, cancelled at
//! the deadline by a [`Timer`] (tokio's for [`Emitter::emit`], feature
//! `tokio`; any other for [`Emitter::emit_with`]); one read of the
//! breaker's clock starts an emit.

use super::call::{Host, Outcome, Verdict};
use super::metrics::Count;
use super::replay::Replay;
use super::{Divert, Emitted, Emitter, LocalEmitter, Replayed};
use crate::clock::ClockSource;
use crate::dlq::Priority;
use crate::timer::Timer;
use core::future::Future;
use core::marker::PhantomData;
use core::pin::Pin;
use core::task::{Context, Poll};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Duration;
#[cfg(feature = "tokio")]
use tokio::time::Instant;

pin_project_lite::pin_project! {
    /// Polls the call first; only a call that is not ready at once gets a
    /// timer (so a call that completes on its first poll pays none, and no
    /// read of a clock either unless the breaker runs on tokio's). The
    /// timer's sleep is kept inline (no allocation). The call's future is
    /// dropped as soon as it is done (completed, timed out, panicked, or
    /// cut for want of a timer), inside the same catch as its polls: its
    /// destructor is the consumer's code too.
    struct Timed<F, R: Timer> {
        #[pin]
        call: Option<F>,
        deadline: When,
        timer: R,
        #[pin]
        sleep: Option<R::Sleep>,
    }
}

/// When the call's time is up.
#[derive(Clone, Copy)]
enum When {
    /// At this tokio instant (the start was read on tokio's clock).
    #[cfg(feature = "tokio")]
    At(Instant),
    /// Never: the budget reaches past what an instant can hold.
    #[cfg(feature = "tokio")]
    Never,
    /// The whole budget from when the timer is armed (the breaker's clock
    /// is not tokio's, and its start reading cannot be turned into a timer
    /// instant): the deadline falls the first poll's own time late (the
    /// time it took to return `Pending`), which the verdict still counts,
    /// from the start reading.
    Budget(Duration),
}

impl When {
    /// How long the timer is to sleep, armed now: `Duration::MAX` when the
    /// deadline is too far to represent (a budget of centuries: the timer
    /// is still asked, so that where there is none the call is cut rather
    /// than left pending forever). Reads no clock but tokio's, for `At`
    /// (the breaker's then).
    fn after(self) -> Duration {
        match self {
            #[cfg(feature = "tokio")]
            When::At(at) => at.saturating_duration_since(Instant::now()),
            #[cfg(feature = "tokio")]
            When::Never => Duration::MAX,
            When::Budget(budget) => budget,
        }
    }
}

/// Starts an emit: one reading of the breaker's clock (if that is tokio's,
/// the tokio instant it was taken at too) and the call's deadline.
fn start(clock: &ClockSource, budget: Duration) -> (u64, When) {
    #[cfg(feature = "tokio")]
    if clock.is_tokio() {
        let now = Instant::now();
        let start = clock.reading_at(now).unwrap_or_else(|| clock.raw());
        return (start, now.checked_add(budget).map_or(When::Never, When::At));
    }
    (clock.raw(), When::Budget(budget))
}

impl<F: Future, R: Timer> Future for Timed<F, R> {
    type Output = Outcome<F::Output>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        let polled = {
            let call = this.call.as_mut().as_pin_mut().expect("polled after completion");
            catch_unwind(AssertUnwindSafe(|| call.poll(cx)))
        };
        match polled {
            Ok(Poll::Ready(r)) => return end(this.call, this.sleep, Outcome::Done(r)),
            Ok(Poll::Pending) => {}
            Err(panic) => return end(this.call, this.sleep, Outcome::Panicked(panic)),
        }
        // The timer is the runtime's code: a panic of it (making its sleep,
        // or the sleep polled: tokio's, once its runtime is shut down) is
        // no timer to be had, as a `None` is (the panic hook has reported
        // it; the payload is dropped).
        if this.sleep.is_none() {
            let after = this.deadline.after();
            match catch_unwind(AssertUnwindSafe(|| this.timer.sleep(after))) {
                Ok(Some(sleep)) => this.sleep.set(Some(sleep)),
                // No timer here (no runtime): cut now rather than hang.
                Ok(None) => return end(this.call, this.sleep, Outcome::NoTimer),
                Err(panic) => {
                    crate::events::swallow(panic);
                    return end(this.call, this.sleep, Outcome::NoTimer);
                }
            }
        }
        let fired = match this.sleep.as_mut().as_pin_mut() {
            Some(sleep) => catch_unwind(AssertUnwindSafe(|| sleep.poll(cx).is_ready())),
            None => Ok(false),
        };
        match fired {
            Ok(true) => end(this.call, this.sleep, Outcome::TimedOut),
            Ok(false) => Poll::Pending,
            Err(panic) => {
                crate::events::swallow(panic);
                end(this.call, this.sleep, Outcome::NoTimer)
            }
        }
    }
}

/// Drops the call's future, then the timer's sleep, each inside a catch,
/// then answers `outcome`, or the panic of the call's drop (a panic while
/// polling wins over one in the drop, whose payload is dropped). A panic
/// in the sleep's drop is swallowed (the panic hook has reported it): the
/// call has ended by then, and its outcome stands (a delivered trigger
/// must not be queued again).
fn end<F: Future, S>(
    mut call: Pin<&mut Option<F>>,
    mut sleep: Pin<&mut Option<S>>,
    outcome: Outcome<F::Output>,
) -> Poll<Outcome<F::Output>> {
    let call_dropped = catch_unwind(AssertUnwindSafe(|| call.set(None)));
    // A call ready on its first poll never armed a sleep: nothing to catch.
    if sleep.is_some() {
        if let Err(panic) = catch_unwind(AssertUnwindSafe(|| sleep.set(None))) {
            crate::events::swallow(panic);
        }
    }
    Poll::Ready(match (outcome, call_dropped) {
        (outcome, Ok(())) => outcome,
        (Outcome::Panicked(first), Err(later)) => {
            crate::events::swallow(later);
            Outcome::Panicked(first)
        }
        (_, Err(panic)) => Outcome::Panicked(panic),
    })
}

/// Counts an emit whose future was dropped before it finished.
struct CancelGuard<'a, T, H: Host<T>> {
    host: &'a H,
    armed: bool,
    _trigger: PhantomData<fn(T)>,
}

impl<T, H: Host<T>> Drop for CancelGuard<'_, T, H> {
    fn drop(&mut self) {
        if self.armed {
            self.host.metrics_count(Count::Cancelled);
        }
    }
}

/// The async emit over either emitter ([`Host`]): what
/// [`Emitter::emit_with`] and [`LocalEmitter::emit_with`] document, written
/// once.
pub(super) fn emit_on<'a, T, H, R, F, Fut, O, E>(
    host: &'a H,
    timer: R,
    trigger: T,
    class: Priority,
    call: F,
) -> impl Future<Output = Emitted<T, O, E>> + 'a
where
    T: 'a,
    H: Host<T>,
    R: Timer + 'a,
    F: FnOnce(&T) -> Fut + 'a,
    Fut: Future<Output = Result<O, E>> + 'a,
{
    // Armed before the first poll: an emit dropped unpolled (a `select!`
    // that took another branch at once) counts as cancelled.
    let guard = CancelGuard {
        host,
        armed: true,
        _trigger: PhantomData,
    };
    async move {
        let mut guard = guard; // the whole guard moves in, not its fields
        let clock = host.breaker().clock();
        let (start, deadline) = start(clock, host.timeout());
        // One reading ends the emit: the call's latency and the emit's
        // time are the same interval, scaled once.
        let (out, elapsed_ns) = match host.admit(start) {
            Err(not) => {
                let out = host.divert(trigger, class, not.reason());
                (out, clock.delta_nanos(start, clock.raw()))
            }
            Ok(admitted) => {
                let call = match catch_unwind(AssertUnwindSafe(|| call(&trigger))) {
                    Ok(call) => call,
                    Err(panic) => {
                        guard.armed = false;
                        host.panicked(admitted, trigger, class, start, panic)
                    }
                };
                let outcome = Timed {
                    call: Some(call),
                    deadline,
                    timer,
                    sleep: None,
                }
                .await;
                let elapsed_ns = clock.delta_nanos(start, clock.raw());
                let (permit, slot) = admitted;
                let out = match outcome {
                    Outcome::Done(result) => {
                        drop(slot);
                        host.settle(permit, result, trigger, class, elapsed_ns)
                    }
                    Outcome::TimedOut => {
                        drop(slot);
                        permit.record_timeout_ns(elapsed_ns);
                        host.divert(trigger, class, Divert::TimedOut(Duration::from_nanos(elapsed_ns)))
                    }
                    Outcome::NoTimer => {
                        drop(slot);
                        drop(permit); // cancelled: no verdict on the consumer
                        host.divert(trigger, class, Divert::NoTimer)
                    }
                    Outcome::Panicked(panic) => {
                        guard.armed = false;
                        host.panicked((permit, slot), trigger, class, start, panic)
                    }
                };
                (out, elapsed_ns)
            }
        };
        guard.armed = false;
        host.emit_time(elapsed_ns, out.is_delivered());
        out
    }
}

/// The async replay over either emitter ([`Host`]): what
/// [`Emitter::replay_with`] and [`LocalEmitter::replay_with`] document,
/// written once.
pub(super) async fn replay_on<T, H, R, F, Fut, O, E>(host: &H, timer: R, max: usize, mut call: F) -> Replayed<T, E>
where
    H: Host<T>,
    R: Timer,
    F: FnMut(&T) -> Fut,
    Fut: Future<Output = Result<O, E>>,
{
    let clock = host.breaker().clock();
    let mut replay = Replay::begin(host, max);
    while let Some((attempt, deadline)) = replay.next(|| start(clock, host.timeout())) {
        // No lock is held across the await; dropped there, `attempt` keeps
        // its trigger at the head.
        let outcome = match catch_unwind(AssertUnwindSafe(|| call(attempt.trigger()))) {
            Ok(call) => {
                Timed {
                    call: Some(call),
                    deadline,
                    timer: &timer,
                    sleep: None,
                }
                .await
            }
            Err(panic) => Outcome::Panicked(panic),
        };
        replay.settle(attempt, outcome);
    }
    replay.finish()
}

impl<T> Emitter<T> {
    /// Emits `trigger` (of class `class`) through the future `call(&trigger)`
    /// returns: breaker, bulkhead, then the call, cancelled at the emitter's
    /// timeout; a trigger that is not delivered is queued or handed back
    /// (see [`Emitted`]). Never calls the consumer, nor waits, when the
    /// breaker rejects or the bulkhead is full. The deadline is a tokio
    /// timer ([`TokioTimer`](crate::timer::TokioTimer)): this is
    /// [`emit_with`](Self::emit_with)`(TokioTimer, ..)`. Outside a tokio
    /// runtime (or in one without its timer) a call that is not ready on
    /// its first poll is cut at once and its trigger diverted with
    /// [`Divert::NoTimer`] (nothing panics); on another runtime, use
    /// `emit_with` and that runtime's [`Timer`].
    ///
    /// The future `call` returns may not borrow the trigger (take from it
    /// what the request needs: a serialized body, an id); the emitter keeps
    /// the trigger to queue it if the call fails.
    ///
    /// One read of the breaker's clock starts the emit: it is the breaker's
    /// admission time, the latency's start and the deadline's origin; one
    /// more ends it, and no other is made but one to arm the timer of a
    /// call pending on tokio's clock (below). A call that completes on its
    /// first poll gets no timer at all; one that does not gets a tokio
    /// timer. On [`ClockSource::tokio`](crate::clock::ClockSource::tokio)
    /// the start reading is tokio's instant and the timer is set for what
    /// is left of the budget from it (one more read of tokio's clock, as the
    /// timer is armed): the deadline is the start's tokio instant plus the
    /// budget, exactly so on a paused clock; on another clock the timer is
    /// set for the whole budget from the end of the first poll, so the call
    /// is cut that first poll's time late, while the verdict (timed out or
    /// not) counts from the start reading. Under a paused tokio clock (tests), run the
    /// breaker on `ClockSource::tokio` so that latencies and timeouts
    /// follow the same time.
    ///
    /// Dropping the returned future (a `select!` that went the other way,
    /// an aborted task) gives the bulkhead slot and the breaker permit back
    /// (a probe's slot included) and drops the trigger, counted in
    /// [`cancelled`](super::EmitterStats::cancelled), even if it was never
    /// polled. If `call` or its future panics, the trigger is queued first
    /// (as failed) and the panic resumes. A call that completes past the
    /// deadline in the same poll as the timer fires (a late wake-up) is
    /// delivered, as with [`emit_blocking`](Emitter::emit_blocking), and
    /// counted by the breaker as timed out and in `overran`.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), tailguard::ConfigError> {
    /// use std::time::Duration;
    /// use tailguard::{Breaker, clock::ClockSource, dlq::{DeadLetterQueue, Priority}};
    /// use tailguard::emit::{Divert, Emitted, Emitter};
    ///
    /// let breaker = Breaker::builder().clock(ClockSource::tokio()).build()?;
    /// let e = Emitter::builder(breaker, DeadLetterQueue::with_capacity(64)?)
    ///     .timeout(Duration::from_millis(50))?
    ///     .build()?;
    /// let out = e.emit(String::from("order-1"), Priority::Critical, |t| {
    ///     let body = t.clone().into_bytes();
    ///     async move { Ok::<_, std::io::Error>(body.len()) }
    /// }).await;
    /// assert!(matches!(out, Emitted::Delivered(7)));
    ///
    /// let out = e.emit(String::from("order-2"), Priority::Critical, |_| async {
    ///     tokio::time::sleep(Duration::from_secs(5)).await; // hangs: cut at 50 ms
    ///     Ok::<_, std::io::Error>(0)
    /// }).await;
    /// assert!(matches!(out, Emitted::Diverted { reason: Divert::TimedOut(_), .. }));
    /// # Ok(())
    /// # }
    /// ```
    #[cfg(feature = "tokio")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
    pub fn emit<'a, F, Fut, O, E>(
        &'a self,
        trigger: T,
        class: Priority,
        call: F,
    ) -> impl Future<Output = Emitted<T, O, E>> + 'a
    where
        T: 'a,
        F: FnOnce(&T) -> Fut + 'a,
        Fut: Future<Output = Result<O, E>> + 'a,
    {
        self.emit_with(crate::timer::TokioTimer, trigger, class, call)
    }

    /// As [`emit`](Self::emit), with the deadline on `timer`: the async
    /// emit on any runtime (see [`crate::timer`]; needs no feature). The
    /// timer is armed only for a call that is not ready on its first poll,
    /// from inside that poll, for what is left of the budget (the whole
    /// budget unless the breaker runs on tokio's clock); its sleep is kept
    /// inline in the returned future (nothing is allocated for it). Where
    /// `timer` has none to give ([`Timer::sleep`] returns `None`: no
    /// runtime there), the call is cut at once: its future dropped, its
    /// bulkhead slot given back, its breaker permit cancelled (no verdict:
    /// a missing runtime says nothing of the consumer), and its trigger
    /// diverted with [`Divert::NoTimer`]. Nothing panics and nothing hangs.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tailguard::{Breaker, dlq::{DeadLetterQueue, Priority}, emit::{Divert, Emitted, Emitter}};
    /// use tailguard::timer::Never;
    ///
    /// let e = Emitter::builder(Breaker::builder().build()?, DeadLetterQueue::with_capacity(8)?).build()?;
    /// let ready = e.emit_with(Never, 1u8, Priority::Routine, |_| async { Ok::<_, ()>(()) });
    /// assert!(matches!(futures_lite::future::block_on(ready), Emitted::Delivered(())));
    /// // A call that is pending with no timer to cut it: cut at once, diverted.
    /// let hung = e.emit_with(Never, 2u8, Priority::Routine, |_| std::future::pending::<Result<(), ()>>());
    /// assert!(matches!(futures_lite::future::block_on(hung), Emitted::Diverted { reason: Divert::NoTimer, .. }));
    /// assert_eq!(e.stats().diverted_no_timer, 1);
    /// # Ok::<(), tailguard::ConfigError>(())
    /// ```
    pub fn emit_with<'a, R, F, Fut, O, E>(
        &'a self,
        timer: R,
        trigger: T,
        class: Priority,
        call: F,
    ) -> impl Future<Output = Emitted<T, O, E>> + 'a
    where
        T: 'a,
        R: Timer + 'a,
        F: FnOnce(&T) -> Fut + 'a,
        Fut: Future<Output = Result<O, E>> + 'a,
    {
        emit_on(&*self.inner, timer, trigger, class, call)
    }

    /// As [`replay_blocking`](Self::replay_blocking), with async calls cut
    /// at the emitter's timeout: one call at a time, each awaited before
    /// the next is popped. Dropping the returned future mid-call puts
    /// the trigger in flight back at the head of the queue (no attempt
    /// used). A trigger that fails after [`shutdown`](Self::shutdown) is
    /// handed back in [`Replayed::handed_back`] (the queue no longer takes
    /// anything). The deadline is a tokio timer: this is
    /// [`replay_with`](Self::replay_with)`(TokioTimer, ..)`.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), tailguard::ConfigError> {
    /// use tailguard::{Breaker, dlq::{DeadLetterQueue, Priority}, emit::Emitter};
    ///
    /// let b = Breaker::builder().build()?;
    /// let e = Emitter::builder(b.clone(), DeadLetterQueue::with_capacity(8)?).build()?;
    /// b.trip_now();
    /// let _ = e.emit(1u32, Priority::Routine, |_| async { Ok::<_, ()>(()) }).await;
    /// b.reset();
    /// let r = e.replay(10, |n| {
    ///     let n = *n;
    ///     async move { Ok::<_, ()>(n) }
    /// }).await;
    /// assert_eq!(r.delivered, 1);
    /// # Ok(())
    /// # }
    /// ```
    #[cfg(feature = "tokio")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
    pub async fn replay<F, Fut, O, E>(&self, max: usize, call: F) -> Replayed<T, E>
    where
        F: FnMut(&T) -> Fut,
        Fut: Future<Output = Result<O, E>>,
    {
        self.replay_with(crate::timer::TokioTimer, max, call).await
    }

    /// As [`replay`](Self::replay), with the deadlines on `timer` (see
    /// [`emit_with`](Self::emit_with)). Where `timer` has none to give, the
    /// call in flight is cut at once, its permit cancelled, its trigger
    /// kept at the head with no attempt used, and the replay stops with
    /// [`ReplayStop::Failed`](super::ReplayStop::Failed)`(`[`Divert::NoTimer`]`)`.
    ///
    /// ```
    /// use tailguard::{Breaker, dlq::{DeadLetterQueue, Priority}, emit::{Divert, Emitter, ReplayStop}};
    /// use tailguard::timer::Never;
    ///
    /// let e = Emitter::builder(Breaker::builder().build()?, DeadLetterQueue::with_capacity(8)?).build()?;
    /// let _ = e.enqueue(1u8, Priority::Routine);
    /// let r = futures_lite::future::block_on(e.replay_with(Never, 10, |_| std::future::pending::<Result<(), ()>>()));
    /// assert_eq!((r.delivered, r.stopped), (0, Some(ReplayStop::Failed(Divert::NoTimer))));
    /// assert!(e.stats().pending); // kept at the head
    /// # Ok::<(), tailguard::ConfigError>(())
    /// ```
    pub async fn replay_with<R, F, Fut, O, E>(&self, timer: R, max: usize, call: F) -> Replayed<T, E>
    where
        R: Timer,
        F: FnMut(&T) -> Fut,
        Fut: Future<Output = Result<O, E>>,
    {
        replay_on(&*self.inner, timer, max, call).await
    }
}

impl<T> LocalEmitter<T> {
    /// As [`Emitter::emit`], on this core: the async emit through the
    /// core's local handle and bulkhead, the call cut at the emitter's
    /// timeout by a tokio timer (this is
    /// [`emit_with`](Self::emit_with)`(TokioTimer, ..)`), for a core that
    /// runs a current-thread tokio runtime of its own. The future borrows
    /// the emitter, which is not `Sync`: it is not `Send` either, so it runs
    /// on the core that owns the emitter (`spawn_local`, a `LocalSet`, or
    /// awaited in place), which is the point. Outcomes, counters, the
    /// cancellation of a dropped future and the handling of a panic are
    /// [`Emitter::emit`]'s.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), tailguard::ConfigError> {
    /// use std::time::Duration;
    /// use tailguard::{Breaker, clock::ClockSource, dlq::{DeadLetterQueue, Priority}};
    /// use tailguard::emit::{Divert, Emitted, LocalEmitter};
    ///
    /// let breaker = Breaker::builder().clock(ClockSource::tokio()).local_handles(1).build()?;
    /// let e = LocalEmitter::builder(breaker, DeadLetterQueue::with_capacity(64)?)
    ///     .bulkhead(8)?
    ///     .timeout(Duration::from_millis(50))?
    ///     .build_local()?;
    /// let out = e.emit(7u64, Priority::Critical, |id| {
    ///     let id = *id;
    ///     async move { Ok::<_, std::io::Error>(id * 2) }
    /// }).await;
    /// assert!(matches!(out, Emitted::Delivered(14)));
    ///
    /// let out = e.emit(8, Priority::Critical, |_| async {
    ///     tokio::time::sleep(Duration::from_secs(5)).await; // hangs: cut at 50 ms
    ///     Ok::<_, std::io::Error>(0)
    /// }).await;
    /// assert!(matches!(out, Emitted::Diverted { reason: Divert::TimedOut(_), .. }));
    /// assert_eq!(e.queue().len(), 1);
    /// # Ok(())
    /// # }
    /// ```
    #[cfg(feature = "tokio")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
    pub fn emit<'a, F, Fut, O, E>(
        &'a self,
        trigger: T,
        class: Priority,
        call: F,
    ) -> impl Future<Output = Emitted<T, O, E>> + 'a
    where
        T: 'a,
        F: FnOnce(&T) -> Fut + 'a,
        Fut: Future<Output = Result<O, E>> + 'a,
    {
        self.emit_with(crate::timer::TokioTimer, trigger, class, call)
    }

    /// As [`Emitter::emit_with`], on this core: the async emit with its
    /// deadline on `timer`, for a thread-per-core runtime of any make
    /// (glommio, monoio, a hand-rolled executor: implement [`Timer`] for
    /// its sleep, see [`crate::timer`]). Where `timer` has none to give,
    /// the pending call is cut at once, its local bulkhead slot given back,
    /// its permit cancelled, its trigger diverted with [`Divert::NoTimer`].
    /// Many emits of one core may be in flight at once (each holds one of
    /// the core's bulkhead slots); they share nothing with other cores.
    ///
    /// ```
    /// use tailguard::{Breaker, dlq::{DeadLetterQueue, Priority}, emit::{Divert, Emitted, LocalEmitter}};
    /// use tailguard::timer::Never;
    ///
    /// let b = Breaker::builder().local_handles(1).build()?;
    /// let e = LocalEmitter::builder(b, DeadLetterQueue::with_capacity(8)?).bulkhead(1)?.build_local()?;
    /// let ready = e.emit_with(Never, 1u8, Priority::Routine, |_| async { Ok::<_, ()>(()) });
    /// assert!(matches!(futures_lite::future::block_on(ready), Emitted::Delivered(())));
    /// // Pending, and no timer to cut it: cut at once, its slot given back.
    /// let hung = e.emit_with(Never, 2u8, Priority::Routine, |_| std::future::pending::<Result<(), ()>>());
    /// assert!(matches!(futures_lite::future::block_on(hung), Emitted::Diverted { reason: Divert::NoTimer, .. }));
    /// assert_eq!(e.stats().bulkhead_in_flight, 0);
    /// # Ok::<(), tailguard::ConfigError>(())
    /// ```
    pub fn emit_with<'a, R, F, Fut, O, E>(
        &'a self,
        timer: R,
        trigger: T,
        class: Priority,
        call: F,
    ) -> impl Future<Output = Emitted<T, O, E>> + 'a
    where
        T: 'a,
        R: Timer + 'a,
        F: FnOnce(&T) -> Fut + 'a,
        Fut: Future<Output = Result<O, E>> + 'a,
    {
        emit_on(self, timer, trigger, class, call)
    }

    /// As [`Emitter::replay`], on this core: the async replay with a tokio
    /// timer (this is [`replay_with`](Self::replay_with)`(TokioTimer, ..)`),
    /// the policy of [`replay_blocking`](Self::replay_blocking) (the same
    /// code): the trigger kept at the head first, a failed one kept there
    /// until its attempts are used, nothing of a class reordered. Dropping
    /// the future mid-call puts the trigger in flight back at the head, no
    /// attempt used.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), tailguard::ConfigError> {
    /// use tailguard::{Breaker, dlq::{DeadLetterQueue, Priority}, emit::LocalEmitter};
    ///
    /// let b = Breaker::builder().local_handles(1).build()?;
    /// let e = LocalEmitter::builder(b.clone(), DeadLetterQueue::with_capacity(8)?).build_local()?;
    /// b.trip_now();
    /// let _ = e.emit(1u32, Priority::Routine, |_| async { Ok::<_, ()>(()) }).await;
    /// b.reset();
    /// let r = e.replay(10, |n| {
    ///     let n = *n;
    ///     async move { Ok::<_, ()>(n) }
    /// }).await;
    /// assert_eq!(r.delivered, 1);
    /// # Ok(())
    /// # }
    /// ```
    #[cfg(feature = "tokio")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
    pub async fn replay<F, Fut, O, E>(&self, max: usize, call: F) -> Replayed<T, E>
    where
        F: FnMut(&T) -> Fut,
        Fut: Future<Output = Result<O, E>>,
    {
        self.replay_with(crate::timer::TokioTimer, max, call).await
    }

    /// As [`Emitter::replay_with`], on this core: the async replay with its
    /// deadlines on `timer`. Where `timer` has none to give, the call in
    /// flight is cut at once, its permit cancelled, its trigger kept at the
    /// head with no attempt used, and the replay stops with
    /// [`ReplayStop::Failed`](super::ReplayStop::Failed)`(`[`Divert::NoTimer`]`)`.
    ///
    /// ```
    /// use tailguard::{Breaker, dlq::{DeadLetterQueue, Priority}, emit::{Divert, LocalEmitter, ReplayStop}};
    /// use tailguard::timer::Never;
    ///
    /// let b = Breaker::builder().local_handles(1).build()?;
    /// let e = LocalEmitter::builder(b, DeadLetterQueue::with_capacity(8)?).build_local()?;
    /// let _ = e.enqueue(1u8, Priority::Routine);
    /// let r = futures_lite::future::block_on(e.replay_with(Never, 10, |_| std::future::pending::<Result<(), ()>>()));
    /// assert_eq!((r.delivered, r.stopped), (0, Some(ReplayStop::Failed(Divert::NoTimer))));
    /// assert!(e.stats().pending); // kept at the head
    /// # Ok::<(), tailguard::ConfigError>(())
    /// ```
    pub async fn replay_with<R, F, Fut, O, E>(&self, timer: R, max: usize, call: F) -> Replayed<T, E>
    where
        R: Timer,
        F: FnMut(&T) -> Fut,
        Fut: Future<Output = Result<O, E>>,
    {
        replay_on(self, timer, max, call).await
    }
}
