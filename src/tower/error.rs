//! [`BreakerError`]: why a request through the layer got no response
//! (rejected, bulkhead full, timed out, or the inner service's error).

use crate::report::Rejected;
use core::fmt;
use std::time::Duration;

// For the docs' links only.
#[cfg(doc)]
use super::BreakerService;

/// Why a request through a [`BreakerService`] did not get a response.
///
/// ```
/// use tailguard::{clock::ManualClock, tower::BreakerError, RejectReason};
/// let b = tailguard::Breaker::builder().clock(ManualClock::new()).build()?;
/// b.trip_now();
/// let err: BreakerError<std::io::Error> = BreakerError::Rejected(b.allow().unwrap_err());
/// assert!(!err.called());
/// assert!(matches!(&err, BreakerError::Rejected(r) if r.reason() == RejectReason::Open));
/// assert_eq!(err.to_string(), "breaker rejected the request: circuit open; next probe in 1s");
/// # Ok::<(), tailguard::ConfigError>(())
/// ```
///
/// New kinds may come in a minor release (as `NoTimer` did with the
/// timers): a `match` on it needs a `_` arm.
#[derive(Debug)]
#[non_exhaustive]
pub enum BreakerError<E> {
    /// The breaker rejected the request (open, every probe slot taken, or
    /// forced open); the inner service was not called.
    Rejected(Rejected),
    /// Every slot of the bulkhead was taken; the inner service was not
    /// called.
    BulkheadFull,
    /// The request ran past the timeout (after at least this long); its
    /// future was dropped.
    TimedOut(Duration),
    /// The inner service's response future failed. Its error is this
    /// error's [`source`](std::error::Error::source), not repeated in its
    /// `Display`.
    Inner(E),
    /// The inner service's `poll_ready` failed: the request never reached
    /// it, and the breaker counts nothing. Its error is the
    /// [`source`](std::error::Error::source).
    NotReady(E),
    /// The request was pending on its first poll and the layer's timer had
    /// no timer to give (tokio's outside a tokio runtime: see
    /// [`crate::timer`]): it was cut at once, its future dropped and its
    /// permit cancelled (no verdict on the consumer), rather than run
    /// with no deadline.
    NoTimer,
}

impl<E> BreakerError<E> {
    /// When to try again, if the breaker knows: the time to its next probe
    /// for a [`Rejected`](BreakerError::Rejected) request, `None` otherwise.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tailguard::{clock::ManualClock, tower::BreakerError};
    /// let clock = ManualClock::new();
    /// let b = tailguard::Breaker::builder().clock(clock.clone()).build().unwrap();
    /// b.trip_now(); // OPEN for 1 s
    /// clock.advance(Duration::from_millis(300));
    /// let e = BreakerError::<()>::Rejected(b.allow().unwrap_err());
    /// assert_eq!(e.retry_after(), Some(Duration::from_millis(700)));
    /// assert_eq!(BreakerError::<()>::BulkheadFull.retry_after(), None);
    /// ```
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            BreakerError::Rejected(r) => r.retry_after(),
            _ => None,
        }
    }

    /// [`retry_after`](Self::retry_after) in whole seconds, rounded up: the
    /// value of an HTTP `Retry-After` header (`None`: send none).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tailguard::{clock::ManualClock, tower::BreakerError};
    /// let clock = ManualClock::new();
    /// let b = tailguard::Breaker::builder().clock(clock.clone()).build().unwrap();
    /// b.trip_now();
    /// clock.advance(Duration::from_millis(300));
    /// let e = BreakerError::<()>::Rejected(b.allow().unwrap_err());
    /// assert_eq!(e.retry_after_secs(), Some(1));
    /// ```
    pub fn retry_after_secs(&self) -> Option<u64> {
        match self {
            BreakerError::Rejected(r) => r.retry_after_secs(),
            _ => None,
        }
    }

    /// Whether the inner service was called (timed out or failed) or not
    /// (refused, or never ready; a request cut for want of a timer,
    /// [`NoTimer`](BreakerError::NoTimer), counts as not called: nothing
    /// of the consumer was judged).
    ///
    /// ```
    /// use tailguard::tower::BreakerError;
    /// assert!(!BreakerError::<()>::BulkheadFull.called());
    /// assert!(!BreakerError::NotReady(()).called());
    /// assert!(BreakerError::Inner(()).called());
    /// ```
    pub fn called(&self) -> bool {
        matches!(self, BreakerError::TimedOut(_) | BreakerError::Inner(_))
    }

    /// The inner service's error (from its response or its `poll_ready`),
    /// if that is what this is.
    ///
    /// ```
    /// use tailguard::tower::BreakerError;
    /// assert_eq!(BreakerError::Inner(7).into_inner(), Some(7));
    /// assert_eq!(BreakerError::NotReady(8).into_inner(), Some(8));
    /// assert_eq!(BreakerError::<u8>::BulkheadFull.into_inner(), None);
    /// ```
    pub fn into_inner(self) -> Option<E> {
        match self {
            BreakerError::Inner(e) | BreakerError::NotReady(e) => Some(e),
            _ => None,
        }
    }
}

impl<E: fmt::Display> fmt::Display for BreakerError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BreakerError::Rejected(r) => write!(f, "breaker rejected the request: {r}"),
            BreakerError::BulkheadFull => f.write_str("bulkhead full"),
            BreakerError::TimedOut(d) => write!(f, "timed out after {d:?}"),
            BreakerError::Inner(_) => f.write_str("the inner service failed"),
            BreakerError::NotReady(_) => f.write_str("the inner service could not get ready"),
            BreakerError::NoTimer => f.write_str("no timer to cut the request at its timeout (no runtime)"),
        }
    }
}

impl<E: std::error::Error + 'static> std::error::Error for BreakerError<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            BreakerError::Inner(e) | BreakerError::NotReady(e) => Some(e),
            _ => None,
        }
    }
}
