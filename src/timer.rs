//! [`Timer`], where the async emitter and the tower layer's timeout get
//! their sleep from: tokio's ([`TokioTimer`], feature `tokio`, the default),
//! async-io's ([`AsyncIoTimer`], feature `async-io`, for smol), or one of
//! your own runtime's in a few lines.
//!
//! # Design
//!
//! A timer is armed only for a call that is not ready on its first poll
//! (a call that completes at once pays for none), and only then is
//! [`Timer::sleep`] called: with what is left of the call's budget (the
//! emitter's whole budget unless its breaker runs on tokio's clock), from
//! inside that poll, so on the runtime's thread and in its context. The
//! sleep is an associated type, not a boxed `dyn Future`: the async
//! emitter keeps it inline in its pinned future, so an emit allocates
//! nothing for its timer (the tower layer's future keeps its own boxed, as
//! it did before: a timer is as large as the rest of that future, and most
//! requests complete without one). The timer is a value handed to the
//! call ([`Emitter::emit_with`](crate::emit::Emitter::emit_with),
//! `BreakerLayer::timer` with feature `tower`), not a type parameter of the
//! emitter: one emitter serves tasks on two runtimes, and its type does
//! not change with a feature.
//!
//! # No timer to be had
//!
//! A timer that cannot arm where it is polled (tokio's outside a tokio
//! runtime, or in one built without `enable_time`) returns `None` from
//! [`sleep`](Timer::sleep), and nothing panics. The call then cannot be
//! cut at its deadline, and it is not left to hang: it is cut at once (its
//! future dropped, its bulkhead slot given back, its breaker permit
//! cancelled without a verdict, since a missing runtime says nothing of
//! the consumer: counted as the breaker's
//! [`on_cancel`](crate::BreakerBuilder::on_cancel) policy says, by default
//! neither failed nor slow). The emit diverts its trigger with
//! [`Divert::NoTimer`](crate::emit::Divert::NoTimer) (counted in
//! [`EmitterStats::diverted_no_timer`](crate::emit::EmitterStats::diverted_no_timer)),
//! a replay keeps it at the head with no attempt used and stops with that
//! reason, and the tower layer answers `BreakerError::NoTimer`. A timer
//! that panics (making its sleep, or its sleep when polled: tokio's, once
//! its runtime has been shut down under a future still being polled) is
//! taken the same way: no timer to be had, and no panic comes out.
//!
//! # Your own runtime's timer
//!
//! Implement [`Timer`] for a small `Copy` type; its `sleep` returns the
//! runtime's sleep future (glommio's `glommio::timer::Timer::new(after)`,
//! monoio's `monoio::time::sleep(after)`). Here for a made-up runtime:
//!
//! ```
//! use std::time::Duration;
//! use tailguard::timer::Timer;
//!
//! # mod myrt { // a made-up runtime, whose timer is always ready here
//! #     pub struct Sleep; // its sleep future
//! #     impl std::future::Future for Sleep {
//! #         type Output = ();
//! #         fn poll(self: std::pin::Pin<&mut Self>, _: &mut std::task::Context<'_>) -> std::task::Poll<()> {
//! #             std::task::Poll::Ready(())
//! #         }
//! #     }
//! #     pub fn in_runtime() -> bool { true }
//! #     pub fn sleep(_: std::time::Duration) -> Sleep { Sleep }
//! # }
//! /// myrt's timer, for the emitter and the tower layer.
//! #[derive(Clone, Copy, Debug, Default)]
//! struct MyRtTimer;
//!
//! impl Timer for MyRtTimer {
//!     type Sleep = myrt::Sleep;
//!
//!     fn sleep(&self, after: Duration) -> Option<myrt::Sleep> {
//!         // `None` where the runtime's timer cannot be had (not on its thread).
//!         myrt::in_runtime().then(|| myrt::sleep(after))
//!     }
//! }
//!
//! // Every call that is not ready at once is cut at the deadline: here at once.
//! use tailguard::{Breaker, dlq::{DeadLetterQueue, Priority}, emit::{Divert, Emitted, Emitter}};
//! let e = Emitter::builder(Breaker::builder().build()?, DeadLetterQueue::with_capacity(8)?).build()?;
//! let out = futures_lite::future::block_on(e.emit_with(&MyRtTimer, 1u8, Priority::Routine, |_| {
//!     std::future::pending::<Result<(), ()>>() // hangs
//! }));
//! assert!(matches!(out, Emitted::Diverted { reason: Divert::TimedOut(_), .. }));
//! # Ok::<(), tailguard::ConfigError>(())
//! ```

use core::future::Future;
use std::time::Duration;

/// A runtime's timer: a sleep of a given length, armed where it is called
/// (see the [module documentation](self)).
///
/// `sleep` is called from inside the poll of the future it times, once per
/// call that is pending on its first poll. The future it returns is polled
/// in that same task until it completes (the call's time is up) or the
/// call ends; its output is ignored.
///
/// ```
/// use std::time::Duration;
/// use tailguard::timer::Timer;
///
/// fn arm<R: Timer>(timer: &R) -> Option<R::Sleep> {
///     timer.sleep(Duration::from_millis(50))
/// }
/// assert!(arm(&tailguard::timer::Never).is_none());
/// ```
pub trait Timer {
    /// The runtime's sleep future, completing `after` from when it was made.
    type Sleep: Future;

    /// A sleep that completes `after` from now on the runtime's clock (a
    /// duration too long for the runtime to represent: one that never
    /// completes), or `None` where no timer can be had (no runtime here):
    /// the call is then cut at once, and the outcome says so (see
    /// [No timer to be had](crate::timer#no-timer-to-be-had)). Must not panic for
    /// a missing runtime. If it panics anyway (or its sleep does when
    /// polled, as tokio's does once its runtime is shut down), it is no
    /// timer to be had, as `None` is: an emit's call is cut (slots given
    /// back, permit cancelled, the trigger diverted with `NoTimer`), a
    /// replay keeps its trigger at the head with no attempt used, the tower
    /// layer fails with `NoTimer`; the panic does not go on (the panic hook
    /// has reported it). A panic in the sleep's drop, after the call ended,
    /// is swallowed too: the call's outcome stands.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tailguard::timer::{Never, Timer};
    /// // A timer that has none to give: every pending call is cut at once.
    /// assert!(Never.sleep(Duration::from_millis(5)).is_none());
    /// ```
    fn sleep(&self, after: Duration) -> Option<Self::Sleep>;
}

impl<R: Timer + ?Sized> Timer for &R {
    type Sleep = R::Sleep;

    fn sleep(&self, after: Duration) -> Option<Self::Sleep> {
        (**self).sleep(after)
    }
}

/// No timer at all: every call that is not ready on its first poll is cut
/// at once, as where a runtime's timer cannot be had. For code that must
/// not wait (a test, a router that only takes calls ready at once).
///
/// ```
/// use tailguard::timer::{Never, Timer};
/// assert!(Never.sleep(std::time::Duration::from_secs(1)).is_none());
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Never;

impl Timer for Never {
    type Sleep = core::future::Ready<()>;

    fn sleep(&self, _after: Duration) -> Option<Self::Sleep> {
        None
    }
}

/// tokio's timer (`tokio::time::sleep`), the default of
/// [`Emitter::emit`](crate::emit::Emitter::emit) and of the tower layer:
/// it follows tokio's clock, paused in tests. Outside a tokio runtime, or
/// in one built without its timer (`enable_time`), it has none to give
/// (`None`), rather than panic as `tokio::time::sleep` does.
///
/// ```
/// use std::time::Duration;
/// use tailguard::timer::{Timer, TokioTimer};
/// assert!(TokioTimer.sleep(Duration::from_millis(1)).is_none()); // no runtime here
/// let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
/// rt.block_on(async { TokioTimer.sleep(Duration::from_millis(1)).unwrap().await });
/// ```
#[cfg(feature = "tokio")]
#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TokioTimer;

#[cfg(feature = "tokio")]
impl Timer for TokioTimer {
    type Sleep = tokio::time::Sleep;

    fn sleep(&self, after: Duration) -> Option<Self::Sleep> {
        tokio::runtime::Handle::try_current().ok()?;
        // A runtime without its timer: tokio panics as the sleep is made
        // (the panic hook still prints its message). Caught, it is no timer.
        std::panic::catch_unwind(|| tokio::time::sleep(after)).ok()
    }
}

/// async-io's timer (`async_io::Timer::after`), for smol and any executor:
/// async-io runs its own reactor thread, so there is always a timer to be
/// had, whatever polls the call.
///
/// ```
/// use std::time::Duration;
/// use tailguard::timer::{AsyncIoTimer, Timer};
/// futures_lite::future::block_on(async {
///     AsyncIoTimer.sleep(Duration::from_millis(1)).unwrap().await;
/// });
/// ```
#[cfg(feature = "async-io")]
#[cfg_attr(docsrs, doc(cfg(feature = "async-io")))]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AsyncIoTimer;

#[cfg(feature = "async-io")]
impl Timer for AsyncIoTimer {
    type Sleep = async_io::Timer;

    fn sleep(&self, after: Duration) -> Option<Self::Sleep> {
        Some(async_io::Timer::after(after))
    }
}
