//! [`ResponseFuture`], the future of each call: a refused request's error
//! at once, or the inner future polled under the timeout (its sleep from
//! the layer's [`Timer`]), its response judged and its latency and verdict
//! given to the breaker.

use super::classify::Classify;
use super::error::BreakerError;
use crate::breaker::OwnedPermit;
use crate::bulkhead::OwnedBulkheadPermit;
use crate::report::Rejected;
use crate::timer::{Timer, TokioTimer};
use core::fmt;
use core::future::Future;
use core::pin::Pin;
use core::task::{Context, Poll};
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::time::Duration;

// For the docs' links only.
#[cfg(doc)]
use super::BreakerService;

/// A request turned away before the inner service saw it.
#[derive(Debug, Clone, Copy)]
pub(super) enum Refusal {
    Rejected(Rejected),
    BulkheadFull,
}

pin_project_lite::pin_project! {
    #[project = KindProj]
    enum Kind<F, R: Timer> {
        /// Turned away; `None` once that is reported.
        Refused { refusal: Option<Refusal> },
        /// The inner service's future, and the timer.
        Called {
            #[pin]
            call: F,
            timer: R,
        },
        /// Timed out: the inner future is dropped.
        Done,
    }
}

pin_project_lite::pin_project! {
    /// The response future of a [`BreakerService`]. Dropping it before it
    /// completes gives the bulkhead slot back and cancels the breaker
    /// permit (a probe's slot included).
    pub struct ResponseFuture<F, C, R: Timer = TokioTimer> {
        #[pin]
        kind: Kind<F, R>,
        // The timeout's sleep once armed (boxed: tokio's is as large as the
        // rest of the future together, and most requests complete without
        // one; see `poll`). Out of `kind`, so that setting `kind` to `Done`
        // (the inner future's drop) has no sleep to look at; after `kind`,
        // so that a dropped future still drops its inner future first.
        sleep: Armed<R::Sleep>,
        // The verdict goes in when the response is judged; settled after
        // (and from the start for a refused request). Held in place, never
        // moved out: see `OwnedPermit::settle_in_place`.
        permit: OwnedPermit,
        // Held until the future completes or is dropped.
        _slot: Option<OwnedBulkheadPermit>,
        timeout_ns: Option<u64>,
        classify: C,
    }
}

impl<F, C, R: Timer> ResponseFuture<F, C, R> {
    pub(super) fn refused(refusal: Refusal, classify: C) -> Self {
        Self {
            kind: Kind::Refused { refusal: Some(refusal) },
            sleep: Armed(None),
            permit: OwnedPermit::settled(),
            _slot: None,
            timeout_ns: None,
            classify,
        }
    }

    /// A request the inner service was called with: `call` is its future.
    pub(super) fn called(
        call: F,
        permit: OwnedPermit,
        slot: Option<OwnedBulkheadPermit>,
        timeout_ns: Option<u64>,
        classify: C,
        timer: R,
    ) -> Self {
        Self {
            kind: Kind::Called { call, timer },
            sleep: Armed(None),
            permit,
            _slot: slot,
            timeout_ns,
            classify,
        }
    }
}

impl<F, C, R: Timer> fmt::Debug for ResponseFuture<F, C, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture")
            .field("permit", &self.permit)
            .field("timeout", &self.timeout_ns.map(Duration::from_nanos))
            .finish_non_exhaustive()
    }
}

/// Nanoseconds since the permit's start, on the breaker's clock.
#[inline(always)]
pub(super) fn elapsed_ns(permit: &OwnedPermit) -> u64 {
    permit.elapsed_ns()
}

/// A called request's permit, its verdict not in yet. It is settled only
/// where the future completes or its inner future panics, and each of those
/// sets `kind` to `Done` (whose poll panics first): the check is the
/// invariant's, as `expect` on the `Option` it replaced was.
#[inline(always)]
fn held(permit: &mut OwnedPermit) -> &mut OwnedPermit {
    assert!(!permit.is_settled(), "a called request holds its permit");
    permit
}

impl<F, C, R, O, E> Future for ResponseFuture<F, C, R>
where
    F: Future<Output = Result<O, E>>,
    C: Classify<O>,
    R: Timer,
{
    type Output = Result<O, BreakerError<E>>;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        let sleep = &mut this.sleep.0;
        let (mut call, timer) = match this.kind.as_mut().project() {
            KindProj::Refused { refusal } => {
                return Poll::Ready(Err(match refusal.take().expect("polled after completion") {
                    Refusal::Rejected(r) => BreakerError::Rejected(r),
                    Refusal::BulkheadFull => BreakerError::BulkheadFull,
                }))
            }
            KindProj::Called { call, timer } => (call, timer),
            KindProj::Done => panic!("polled after completion"),
        };
        let polled = match catch_unwind(AssertUnwindSafe(|| call.as_mut().poll(cx))) {
            Ok(polled) => polled,
            Err(panic) => inner_panicked(this.kind, this.permit, this._slot, sleep, panic),
        };
        if let Poll::Ready(result) = polled {
            let permit = held(this.permit);
            let latency_ns = elapsed_ns(permit);
            // The inner future is dropped now, and its destructor is its
            // code too: a panic there is a failed call, like one in `poll`.
            // The sleep goes first, on its own (its panic is the timer's).
            drop_sleep(sleep);
            if let Err(panic) = catch_unwind(AssertUnwindSafe(|| this.kind.set(Kind::Done))) {
                this._slot.take();
                permit.record_nanos_in_place(latency_ns, false);
                resume_unwind(panic)
            }
            if this.timeout_ns.is_some_and(|budget| latency_ns > budget) {
                // Past the timeout (the timer fired in this same poll, or
                // the wake-up came late): returned, counted as a timeout.
                permit.record_timeout_nanos_in_place(latency_ns);
                this._slot.take();
                return Poll::Ready(result.map_err(BreakerError::Inner));
            }
            let ok = match &result {
                Err(_) => false,
                Ok(response) => match catch_unwind(AssertUnwindSafe(|| this.classify.is_failure(response))) {
                    Ok(failure) => !failure,
                    Err(panic) => {
                        permit.record_nanos_in_place(latency_ns, false);
                        this._slot.take();
                        resume_unwind(panic)
                    }
                },
            };
            permit.record_nanos_in_place(latency_ns, ok);
            this._slot.take();
            return Poll::Ready(result.map_err(BreakerError::Inner));
        }
        let Some(budget_ns) = *this.timeout_ns else {
            return Poll::Pending;
        };
        // The timer is the runtime's code: a panic of it (making its sleep,
        // or the sleep polled: tokio's, once its runtime is shut down) is
        // no timer to be had, as a `None` is (the panic hook has reported
        // it; the payload is dropped).
        let mut no_timer = false;
        if sleep.is_none() {
            let left = budget_ns.saturating_sub(elapsed_ns(held(this.permit)));
            match catch_unwind(AssertUnwindSafe(|| timer.sleep(Duration::from_nanos(left)))) {
                Ok(Some(armed)) => *sleep = Some(Box::pin(armed)),
                Ok(None) => no_timer = true,
                Err(panic) => {
                    crate::events::swallow(panic);
                    no_timer = true;
                }
            }
        }
        let fired = match sleep.as_mut().filter(|_| !no_timer) {
            Some(armed) => match catch_unwind(AssertUnwindSafe(|| armed.as_mut().poll(cx).is_ready())) {
                Ok(fired) => fired,
                Err(panic) => {
                    crate::events::swallow(panic);
                    no_timer = true;
                    false
                }
            },
            None => false,
        };
        if no_timer {
            // No timer here (no runtime): cut now, no verdict, rather than
            // run with no deadline. The inner future's destructor is its
            // code: a panic there is a failed call, as in `poll`.
            let permit = held(this.permit);
            this._slot.take();
            drop_sleep(sleep);
            if let Err(panic) = catch_unwind(AssertUnwindSafe(|| this.kind.set(Kind::Done))) {
                let latency_ns = elapsed_ns(permit);
                permit.record_nanos_in_place(latency_ns, false);
                resume_unwind(panic)
            }
            permit.cancel_in_place(); // cancelled: a probe's slot goes back
            return Poll::Ready(Err(BreakerError::NoTimer));
        }
        if !fired {
            return Poll::Pending;
        }
        let permit = held(this.permit);
        let elapsed = elapsed_ns(permit).max(budget_ns);
        permit.record_timeout_nanos_in_place(elapsed);
        let elapsed = Duration::from_nanos(elapsed);
        this._slot.take();
        drop_sleep(sleep);
        this.kind.set(Kind::Done);
        Poll::Ready(Err(BreakerError::TimedOut(elapsed)))
    }
}

/// The inner future panicked in `poll`: a failed call, and its inner
/// future done with, dropped now (a poll after this panics, "polled after
/// completion", rather than poll it again), its slot back; then the panic
/// goes on. Out of line: the hot path keeps none of this live.
#[cold]
#[inline(never)]
fn inner_panicked<F, R: Timer>(
    kind: Pin<&mut Kind<F, R>>,
    permit: &mut OwnedPermit,
    slot: &mut Option<OwnedBulkheadPermit>,
    sleep: &mut Option<Pin<Box<R::Sleep>>>,
    panic: Box<dyn std::any::Any + Send>,
) -> ! {
    let latency_ns = elapsed_ns(permit);
    permit.record_nanos_in_place(latency_ns, false);
    slot.take();
    drop_sleep(sleep);
    // Its destructor is its code too: a second panic there is swallowed
    // (the panic hook has reported it), the first goes on.
    let mut kind = kind;
    if let Err(second) = catch_unwind(AssertUnwindSafe(|| kind.set(Kind::Done))) {
        crate::events::swallow(second);
    }
    resume_unwind(panic)
}

/// The timeout's sleep, once armed. Its drop only looks unless one is
/// armed (most requests never arm one), so that dropping a response future
/// calls nothing out of line for it.
struct Armed<S>(Option<Pin<Box<S>>>);

impl<S> Drop for Armed<S> {
    #[inline]
    fn drop(&mut self) {
        if let Some(sleep) = self.0.take() {
            drop_boxed(sleep);
        }
    }
}

#[cold]
#[inline(never)]
fn drop_boxed<S>(sleep: Pin<Box<S>>) {
    drop(sleep);
}

/// Drops an armed sleep inside a catch: a panic in its drop is the
/// timer's, swallowed (the panic hook has reported it), so that the
/// request's outcome stands (src/timer.rs, `Timer::sleep`).
/// Most requests never arm one: then there is nothing to catch.
#[inline]
fn drop_sleep<S>(sleep: &mut Option<Pin<Box<S>>>) {
    if sleep.is_some() {
        drop_armed_sleep(sleep);
    }
}

#[cold]
fn drop_armed_sleep<S>(sleep: &mut Option<Pin<Box<S>>>) {
    if let Err(panic) = catch_unwind(AssertUnwindSafe(|| *sleep = None)) {
        crate::events::swallow(panic);
    }
}
