//! Configuration errors.

use core::fmt;

/// What is wrong with a configuration value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ConfigErrorKind {
    /// A floating-point value is NaN.
    NotANumber,
    /// A value is below, or above, the range the field accepts.
    OutOfRange,
    /// A value is zero where zero would disable or hang the mechanism.
    Zero,
    /// A value is so large that arithmetic on it later could overflow, or
    /// that the storage it asks for could not be allocated.
    TooLarge,
    /// A value contradicts another field (for example a base backoff above
    /// the maximum backoff).
    Inconsistent,
}

/// A configuration value was rejected; [`field`](ConfigError::field) names it.
///
/// Returned by [`BreakerBuilder::build`](crate::BreakerBuilder::build),
/// [`DeadLetterQueue::with_capacity`](crate::dlq::DeadLetterQueue::with_capacity),
/// [`Bulkhead::new`](crate::Bulkhead::new), [`Backoff::new`](crate::backoff::Backoff::new)
/// and the [`EmitterBuilder`](crate::emit::EmitterBuilder) setters.
/// A value that passes validation can never make the breaker or the queue
/// panic, overflow or hang later.
///
/// ```
/// use std::time::Duration;
/// use tailguard::{Breaker, ConfigErrorKind};
///
/// let err = Breaker::builder().error_rate(f64::NAN).build().unwrap_err();
/// assert_eq!(err.field(), "error_rate");
/// assert_eq!(err.kind(), ConfigErrorKind::NotANumber);
///
/// let err = Breaker::builder()
///     .base_backoff(Duration::from_secs(60))
///     .max_backoff(Duration::from_secs(30))
///     .build()
///     .unwrap_err();
/// assert_eq!(err.field(), "base_backoff");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    field: &'static str,
    kind: ConfigErrorKind,
    reason: &'static str,
}

impl ConfigError {
    pub(crate) const fn new(field: &'static str, kind: ConfigErrorKind, reason: &'static str) -> Self {
        Self { field, kind, reason }
    }

    /// The name of the rejected field, as spelled by the builder method.
    pub fn field(&self) -> &'static str {
        self.field
    }

    /// What class of problem the value has.
    pub fn kind(&self) -> ConfigErrorKind {
        self.kind
    }

    /// A human-readable explanation of the accepted range.
    pub fn reason(&self) -> &'static str {
        self.reason
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid `{}`: {}", self.field, self.reason)
    }
}

impl std::error::Error for ConfigError {}
