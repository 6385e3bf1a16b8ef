//! How a response is judged: the [`Classify`] trait, [`ServerErrors`] (a
//! 5xx status fails; `reqwest` responses too, with feature `reqwest`) and
//! [`ErrorsOnly`] (no response fails).

// For the docs' links only.
#[cfg(all(doc, feature = "reqwest"))]
use super::BreakerLayer;

/// Decides whether a response the inner service returned is a failure for
/// the breaker. An error of the inner service is always one; this judges
/// the `Ok` responses.
///
/// Implemented by [`ServerErrors`] (HTTP: 5xx), [`ErrorsOnly`] (no response
/// is a failure) and any `Fn(&Response) -> bool` returning `true` for a
/// failure.
///
/// ```
/// use tailguard::tower::Classify;
/// // A gRPC-style rule: a response carrying an error status fails.
/// let rule = |r: &Result<u32, String>| r.is_err();
/// assert!(rule.is_failure(&Err("unavailable".to_string())));
/// assert!(!rule.is_failure(&Ok(7)));
/// ```
pub trait Classify<R> {
    /// Whether `response` counts as a failed call.
    ///
    /// ```
    /// use tailguard::tower::{Classify, ServerErrors};
    /// let response = http::Response::builder().status(502).body(()).unwrap();
    /// assert!(ServerErrors.is_failure(&response));
    /// ```
    fn is_failure(&self, response: &R) -> bool;
}

/// HTTP: a response with a 5xx status is a failure, any other is a success
/// (a 4xx is the client's fault, not the server's). The default classifier.
///
/// ```
/// use tailguard::tower::{Classify, ServerErrors};
/// let r = |s: u16| http::Response::builder().status(s).body(()).unwrap();
/// assert!(ServerErrors.is_failure(&r(503)));
/// assert!(!ServerErrors.is_failure(&r(404)));
/// assert!(!ServerErrors.is_failure(&r(200)));
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct ServerErrors;

impl<B> Classify<http::Response<B>> for ServerErrors {
    #[inline]
    fn is_failure(&self, response: &http::Response<B>) -> bool {
        response.status().is_server_error()
    }
}

/// A `reqwest` response with a 5xx status is a failure (feature
/// `reqwest`), so that `reqwest::Client` goes through the layer as it is.
///
/// The layer adds no timeout of its own unless you set one: without
/// [`BreakerLayer::timeout`], a hung request is bounded only by reqwest's
/// (`ClientBuilder::timeout`), and the breaker learns of it when it ends
/// (or, with `track_in_flight`, at each window close it is still running).
///
/// ```no_run
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use std::time::Duration;
/// use tailguard::{tower::{BreakerError, BreakerLayer}, Breaker};
/// use tower::{Layer, Service, ServiceExt};
///
/// let breaker = Breaker::builder().name("pricing").build()?;
/// let mut client = BreakerLayer::new(breaker)
///     .timeout(Duration::from_millis(500))?
///     .layer(reqwest::Client::new());
/// let request = reqwest::Request::new(reqwest::Method::GET, "http://pricing.internal/quote".parse()?);
/// match client.ready().await?.call(request).await {
///     Ok(response) => println!("{}", response.status()),
///     // Not sent: the breaker is open (or its probes are all out).
///     Err(BreakerError::Rejected(r)) => println!("not sent, retry in {:?}", r.retry_after()),
///     Err(BreakerError::BulkheadFull) => println!("not sent: too many in flight"),
///     // Sent, and counted against the consumer.
///     Err(BreakerError::TimedOut(after)) => println!("no answer within {after:?}"),
///     Err(BreakerError::Inner(e)) => println!("failed: {e}"),
///     Err(BreakerError::NotReady(e)) => println!("client not ready: {e}"),
///     // Not timed: no tokio runtime here (see `tailguard::timer`).
///     Err(BreakerError::NoTimer) => println!("cut: no timer to be had"),
///     Err(other) => println!("{other}"), // a kind a later release adds
/// }
/// # Ok(())
/// # }
/// ```
#[cfg(feature = "reqwest")]
#[cfg_attr(docsrs, doc(cfg(feature = "reqwest")))]
impl Classify<reqwest::Response> for ServerErrors {
    #[inline]
    fn is_failure(&self, response: &reqwest::Response) -> bool {
        response.status().is_server_error()
    }
}

/// Every response is a success; only the inner service's errors (and
/// timeouts) are failures. For services whose responses carry no status.
///
/// ```
/// use tailguard::tower::{Classify, ErrorsOnly};
/// assert!(!ErrorsOnly.is_failure(&"anything"));
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct ErrorsOnly;

impl<R> Classify<R> for ErrorsOnly {
    #[inline]
    fn is_failure(&self, _: &R) -> bool {
        false
    }
}

impl<R, F: Fn(&R) -> bool> Classify<R> for F {
    #[inline]
    fn is_failure(&self, response: &R) -> bool {
        self(response)
    }
}
