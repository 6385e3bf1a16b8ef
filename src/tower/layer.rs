//! [`BreakerLayer`], the tower `Layer`, and its builder methods: the
//! bulkhead, the timeout and the classifier it gives every service it wraps.

use super::classify::ServerErrors;
use super::service::{BreakerService, Config};
use crate::breaker::Breaker;
use crate::bulkhead::Bulkhead;
use crate::clock::duration_nanos_saturating;
use crate::error::{ConfigError, ConfigErrorKind};
use crate::timer::{Timer, TokioTimer};
use core::fmt;
use std::time::Duration;

// For the docs' links only.
#[cfg(doc)]
use super::{BreakerError, Classify};

/// A tower `Layer` wrapping services in a [`BreakerService`]: one breaker
/// (and, if set, one bulkhead) shared by every service it wraps.
///
/// ```
/// use tailguard::tower::{BreakerLayer, ErrorsOnly};
/// let layer = BreakerLayer::new(tailguard::Breaker::builder().build()?)
///     .classify(ErrorsOnly); // a service whose responses have no status
/// # Ok::<(), tailguard::ConfigError>(())
/// ```
#[derive(Clone)]
pub struct BreakerLayer<C = ServerErrors, R = TokioTimer> {
    config: Config<C, R>,
}

impl BreakerLayer<ServerErrors> {
    /// A layer putting `breaker` around services, with no bulkhead, no
    /// timeout, and 5xx responses counted as failures.
    ///
    /// ```
    /// let layer = tailguard::tower::BreakerLayer::new(tailguard::Breaker::builder().build()?);
    /// # Ok::<(), tailguard::ConfigError>(())
    /// ```
    pub fn new(breaker: Breaker) -> Self {
        Self {
            config: Config {
                breaker,
                bulkhead: None,
                timeout_ns: None,
                classify: ServerErrors,
                timer: TokioTimer,
            },
        }
    }
}

impl<C, R> BreakerLayer<C, R> {
    /// Bounds the requests in flight through the wrapped services with
    /// `bulkhead` (shared with whatever else holds a clone of it); a request
    /// over the bound fails at once with [`BreakerError::BulkheadFull`].
    ///
    /// ```
    /// use tailguard::{Breaker, Bulkhead, tower::BreakerLayer};
    /// let layer = BreakerLayer::new(Breaker::builder().build()?).bulkhead(Bulkhead::new(32)?);
    /// # Ok::<(), tailguard::ConfigError>(())
    /// ```
    pub fn bulkhead(mut self, bulkhead: Bulkhead) -> Self {
        self.config.bulkhead = Some(bulkhead);
        self
    }

    /// Cuts each request at `timeout` ([`BreakerError::TimedOut`]), counted
    /// in the breaker as failed and slow. The timer is tokio's unless
    /// [`timer`](Self::timer) says otherwise; where it has none to give (a
    /// request pending on its first poll outside a tokio runtime) the
    /// request is cut at once with [`BreakerError::NoTimer`], its permit
    /// cancelled (no verdict), rather than panic or hang.
    ///
    /// # Errors
    /// A [`ConfigError`] for `"timeout"` when it is zero.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tailguard::{Breaker, tower::BreakerLayer};
    /// let layer = BreakerLayer::new(Breaker::builder().build()?);
    /// assert_eq!(layer.clone().timeout(Duration::ZERO).unwrap_err().field(), "timeout");
    /// let layer = layer.timeout(Duration::from_millis(250))?;
    /// # Ok::<(), tailguard::ConfigError>(())
    /// ```
    pub fn timeout(mut self, timeout: Duration) -> Result<Self, ConfigError> {
        if timeout.is_zero() {
            return Err(ConfigError::new(
                "timeout",
                ConfigErrorKind::Zero,
                "timeout(0s) would time every request out: it must be above zero",
            ));
        }
        self.config.timeout_ns = Some(duration_nanos_saturating(timeout));
        Ok(self)
    }

    /// Judges responses with `classify` instead (see [`Classify`]).
    ///
    /// ```
    /// use tailguard::{Breaker, tower::BreakerLayer};
    /// // Count a 429 as a failure too: the consumer is shedding load.
    /// let layer = BreakerLayer::new(Breaker::builder().build()?).classify(
    ///     |r: &http::Response<()>| r.status().is_server_error() || r.status() == 429,
    /// );
    /// # Ok::<(), tailguard::ConfigError>(())
    /// ```
    pub fn classify<D>(self, classify: D) -> BreakerLayer<D, R> {
        let Config {
            breaker,
            bulkhead,
            timeout_ns,
            timer,
            ..
        } = self.config;
        BreakerLayer {
            config: Config {
                breaker,
                bulkhead,
                timeout_ns,
                classify,
                timer,
            },
        }
    }

    /// Takes the timeout's sleep from `timer` instead of tokio's (see
    /// [`crate::timer`]): the layer on another runtime. The timer is armed
    /// only for a request not ready on its first poll, from inside that
    /// poll; where it has none to give, the request fails at once with
    /// [`BreakerError::NoTimer`].
    ///
    /// ```
    /// use std::time::Duration;
    /// use tailguard::{Breaker, timer::Never, tower::{BreakerError, BreakerLayer, ErrorsOnly}};
    /// use tower::{service_fn, Layer, Service};
    ///
    /// let mut svc = BreakerLayer::new(Breaker::builder().build()?)
    ///     .classify(ErrorsOnly)
    ///     .timeout(Duration::from_millis(100))?
    ///     .timer(Never) // no timer: a request that is not ready at once is cut
    ///     .layer(service_fn(|_: ()| std::future::pending::<Result<(), std::io::Error>>()));
    /// let out = futures_lite::future::block_on(svc.call(()));
    /// assert!(matches!(out, Err(BreakerError::NoTimer)));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn timer<Q: Timer>(self, timer: Q) -> BreakerLayer<C, Q> {
        let Config {
            breaker,
            bulkhead,
            timeout_ns,
            classify,
            ..
        } = self.config;
        BreakerLayer {
            config: Config {
                breaker,
                bulkhead,
                timeout_ns,
                classify,
                timer,
            },
        }
    }

    /// The breaker the layer puts around services.
    ///
    /// ```
    /// let b = tailguard::Breaker::builder().build()?;
    /// assert!(tailguard::tower::BreakerLayer::new(b.clone()).breaker().ptr_eq(&b));
    /// # Ok::<(), tailguard::ConfigError>(())
    /// ```
    pub fn breaker(&self) -> &Breaker {
        &self.config.breaker
    }
}

impl<C, R> fmt::Debug for BreakerLayer<C, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.config.fmt_fields(&mut f.debug_struct("BreakerLayer"))
    }
}

impl<S, C: Clone, R: Clone> tower_layer::Layer<S> for BreakerLayer<C, R> {
    type Service = BreakerService<S, C, R>;

    fn layer(&self, inner: S) -> Self::Service {
        BreakerService::new(inner, self.config.clone())
    }
}
