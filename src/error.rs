//! Configuration errors.

use core::fmt;
use std::borrow::Cow;

/// What is wrong with a configuration value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ConfigErrorKind {
    /// A floating-point value is NaN.
    NotANumber,
    /// A value is outside the range the field accepts: below its minimum,
    /// or outside the unit interval for a fraction or a quantile. (Above a
    /// maximum is [`TooLarge`](Self::TooLarge).)
    OutOfRange,
    /// A value is zero where zero would disable or hang the mechanism.
    Zero,
    /// A value is above the field's maximum: so large that arithmetic on it
    /// later could overflow, that the storage it asks for could not be
    /// allocated, or past a bound the mechanism is built for (a rolling
    /// span of more than 1024 windows, more than 64 local handles).
    TooLarge,
    /// A value contradicts another field (for example a base backoff above
    /// the maximum backoff).
    Inconsistent,
    /// The operating system refused to start the ticker thread (see
    /// [`BreakerBuilder::ticker`](crate::BreakerBuilder::ticker)).
    TickerThread,
}

/// A configuration value was rejected; [`field`](ConfigError::field) names
/// the builder method that set it, and the message says the value given,
/// the range accepted and, when it conflicts with another setting, which
/// one (and whether that one is a default the caller never set).
///
/// Returned by [`BreakerBuilder::build`](crate::BreakerBuilder::build),
/// [`DeadLetterQueue::with_capacity`](crate::dlq::DeadLetterQueue::with_capacity),
/// [`Bulkhead::new`](crate::Bulkhead::new), [`Backoff::new`](crate::backoff::Backoff::new),
/// the [`EmitterBuilder`](crate::emit::EmitterBuilder) setters and
/// [`Registry::get_or_create`](crate::Registry::get_or_create) (which names
/// the consumer too). A value that passes validation can never make the
/// breaker or the queue panic, overflow or hang later.
///
/// ```
/// use std::time::Duration;
/// use tailguard::{Breaker, ConfigErrorKind};
///
/// let err = Breaker::builder().error_rate(f64::NAN).build().unwrap_err();
/// assert_eq!(err.field(), "error_rate");
/// assert_eq!(err.kind(), ConfigErrorKind::NotANumber);
///
/// // A maximum below the default base: the message says which is which.
/// let err = Breaker::builder().max_backoff(Duration::from_millis(500)).build().unwrap_err();
/// assert_eq!(err.field(), "max_backoff");
/// assert_eq!(
///     err.to_string(),
///     "invalid `max_backoff`: max_backoff(500ms) is below base_backoff (1s, its default); \
///      raise max_backoff to at least 1s or lower base_backoff"
/// );
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    field: &'static str,
    kind: ConfigErrorKind,
    reason: Cow<'static, str>,
    consumer: Option<Box<str>>,
}

impl ConfigError {
    pub(crate) fn new(field: &'static str, kind: ConfigErrorKind, reason: impl Into<Cow<'static, str>>) -> Self {
        Self {
            field,
            kind,
            reason: reason.into(),
            consumer: None,
        }
    }

    /// A fixed message, for `const` constructors.
    pub(crate) const fn fixed(field: &'static str, kind: ConfigErrorKind, reason: &'static str) -> Self {
        Self {
            field,
            kind,
            reason: Cow::Borrowed(reason),
            consumer: None,
        }
    }

    /// The same error, for the consumer `name` (a registry's breaker).
    #[cfg(not(tailguard_loom))]
    pub(crate) fn for_consumer(mut self, name: &str) -> Self {
        self.consumer = Some(name.into());
        self
    }

    /// The builder method that set the rejected value; for a constructor
    /// (`Bulkhead::new`, `DeadLetterQueue::with_capacity`, `Backoff::new`),
    /// the name of the parameter (`max_in_flight`, `capacity`, ...). The
    /// message ([`reason`](Self::reason)) quotes the call either way.
    ///
    /// ```
    /// let err = tailguard::Breaker::builder().trip_windows(0).build().unwrap_err();
    /// assert_eq!(err.field(), "trip_windows");
    /// ```
    pub fn field(&self) -> &'static str {
        self.field
    }

    /// What class of problem the value has.
    ///
    /// ```
    /// let err = tailguard::Breaker::builder().trip_windows(0).build().unwrap_err();
    /// assert_eq!(err.kind(), tailguard::ConfigErrorKind::Zero);
    /// ```
    pub fn kind(&self) -> ConfigErrorKind {
        self.kind
    }

    /// What was given, what is accepted, and what it conflicts with.
    ///
    /// ```
    /// let err = tailguard::Breaker::builder().quantile(1.5).build().unwrap_err();
    /// assert_eq!(err.reason(), "quantile(1.5) must lie in (0, 1]: above 0 (at least 1e-9) and at most 1");
    /// ```
    pub fn reason(&self) -> &str {
        &self.reason
    }

    /// The consumer whose breaker was being built, for an error from
    /// [`Registry::get_or_create`](crate::Registry::get_or_create).
    ///
    /// ```
    /// let r = tailguard::Registry::new();
    /// let err = r.get_or_create("pricing", || tailguard::Breaker::builder().trip_windows(0)).unwrap_err();
    /// assert_eq!(err.consumer(), Some("pricing"));
    /// assert!(err.to_string().starts_with("consumer `pricing`: invalid `trip_windows`"));
    /// ```
    pub fn consumer(&self) -> Option<&str> {
        self.consumer.as_deref()
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(consumer) = &self.consumer {
            write!(f, "consumer `{consumer}`: ")?;
        }
        write!(f, "invalid `{}`: {}", self.field, self.reason)
    }
}

impl std::error::Error for ConfigError {}
