//! The breaker as a `reqwest_middleware` middleware (feature
//! `reqwest-middleware`): one `.with(...)` on a `ClientBuilder`.

use super::{BreakerError, Classify, ServerErrors};
use crate::breaker::Breaker;
use crate::bulkhead::Bulkhead;
use core::convert::Infallible;
use core::fmt;
use core::task::Poll;
use reqwest_middleware::reqwest::{Request, Response};
use reqwest_middleware::{Middleware, Next};
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::time::Duration;

/// A breaker (and optionally a bulkhead) around every request of a
/// `reqwest_middleware` client, as [`BreakerLayer`](super::BreakerLayer)
/// puts one around a tower service: a request the breaker rejects (or the
/// bulkhead turns away) fails at once, without reaching the server, with a
/// [`BreakerError`] (downcast it from the middleware error with
/// [`refusal`](Self::refusal)); every other request's latency and outcome go
/// to the breaker, judged by a [`Classify`] (5xx responses and transport
/// errors fail, by default). A request future dropped before it completes
/// gives its permit back (a probe's slot included) and its bulkhead slot.
/// A panic of the rest of the chain counts as a failed call, and goes on
/// to the caller. An error that a middleware after this one makes of its
/// own (`reqwest_middleware::Error::Middleware`: a local rate limit, a
/// request it refused) is not judged, since the request may never have
/// been sent: the permit is cancelled, as
/// [`on_cancel`](crate::BreakerBuilder::on_cancel) says. So put a retry
/// middleware before this one (`.with(retry).with(breaker)`): each attempt
/// is then judged on its own, and a retry middleware's own error (some wrap
/// the last transport error as `Error::Middleware`) never hides a failure
/// from the breaker.
/// The latency is measured on the breaker's clock, from the permit to the
/// response's headers; put the middleware first for it to time the whole
/// chain after it.
///
/// It sets no timeout: a hung request is bounded by reqwest's own
/// (`reqwest::ClientBuilder::timeout`, a transport error, so a failure
/// here), or by a `tokio::time::timeout` around `send()` (dropping the
/// future cancels the permit, which counts as
/// [`on_cancel`](crate::BreakerBuilder::on_cancel) says). Set one: a
/// request that never ends is judged only if the breaker
/// [tracks calls in flight](crate::BreakerBuilder::track_in_flight).
///
/// ```no_run
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use tailguard::{tower::BreakerMiddleware, Breaker};
///
/// let breaker = Breaker::builder().name("pricing").build()?;
/// let http = reqwest::Client::builder().timeout(std::time::Duration::from_millis(500)).build()?;
/// let client = reqwest_middleware::ClientBuilder::new(http)
///     .with(BreakerMiddleware::new(breaker))
///     .build();
/// match client.get("http://pricing.internal/quote").send().await {
///     Ok(response) => println!("{}", response.status()),
///     Err(e) => match BreakerMiddleware::refusal(&e) {
///         Some(refused) => println!("not sent: {refused}; Retry-After: {:?}", refused.retry_after_secs()),
///         None => println!("failed: {e}"),
///     },
/// }
/// # Ok(())
/// # }
/// ```
pub struct BreakerMiddleware<C = ServerErrors> {
    breaker: Breaker,
    bulkhead: Option<Bulkhead>,
    classify: C,
}

impl BreakerMiddleware<ServerErrors> {
    /// The breaker's refusal inside an error of a client with this
    /// middleware (`None` for any other error: the request was sent).
    ///
    /// ```
    /// let err = reqwest_middleware::Error::middleware(std::io::Error::other("elsewhere"));
    /// assert!(tailguard::tower::BreakerMiddleware::refusal(&err).is_none());
    /// ```
    pub fn refusal(error: &reqwest_middleware::Error) -> Option<&BreakerError<Infallible>> {
        match error {
            reqwest_middleware::Error::Middleware(e) => e.downcast_ref::<BreakerError<Infallible>>(),
            _ => None,
        }
    }

    /// The middleware for `breaker`, with no bulkhead, 5xx responses
    /// counted as failures.
    ///
    /// ```
    /// let m = tailguard::tower::BreakerMiddleware::new(tailguard::Breaker::builder().build()?);
    /// assert!(m.breaker().name().is_none());
    /// # Ok::<(), tailguard::ConfigError>(())
    /// ```
    pub fn new(breaker: Breaker) -> Self {
        Self {
            breaker,
            bulkhead: None,
            classify: ServerErrors,
        }
    }
}

impl<C> BreakerMiddleware<C> {
    /// Bounds the requests in flight with `bulkhead` (shared with whatever
    /// else holds a clone of it); a request over the bound fails at once
    /// with [`BreakerError::BulkheadFull`].
    ///
    /// ```
    /// use tailguard::{tower::BreakerMiddleware, Breaker, Bulkhead};
    /// let m = BreakerMiddleware::new(Breaker::builder().build()?).bulkhead(Bulkhead::new(32)?);
    /// # drop(m);
    /// # Ok::<(), tailguard::ConfigError>(())
    /// ```
    pub fn bulkhead(mut self, bulkhead: Bulkhead) -> Self {
        self.bulkhead = Some(bulkhead);
        self
    }

    /// Judges responses with `classify` instead (see [`Classify`]).
    ///
    /// ```
    /// use tailguard::{tower::BreakerMiddleware, Breaker};
    /// // A 429 says the server is shedding load: count it too.
    /// let m = BreakerMiddleware::new(Breaker::builder().build()?).classify(|r: &reqwest_middleware::reqwest::Response| {
    ///     r.status().is_server_error() || r.status() == 429
    /// });
    /// # drop(m);
    /// # Ok::<(), tailguard::ConfigError>(())
    /// ```
    pub fn classify<D>(self, classify: D) -> BreakerMiddleware<D> {
        BreakerMiddleware {
            breaker: self.breaker,
            bulkhead: self.bulkhead,
            classify,
        }
    }

    /// The breaker around the requests.
    ///
    /// ```
    /// let b = tailguard::Breaker::builder().build()?;
    /// assert!(tailguard::tower::BreakerMiddleware::new(b.clone()).breaker().ptr_eq(&b));
    /// # Ok::<(), tailguard::ConfigError>(())
    /// ```
    pub fn breaker(&self) -> &Breaker {
        &self.breaker
    }
}

impl<C> fmt::Debug for BreakerMiddleware<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BreakerMiddleware")
            .field("breaker", &self.breaker)
            .field("bulkhead", &self.bulkhead)
            .finish_non_exhaustive()
    }
}

fn refused(e: BreakerError<Infallible>) -> reqwest_middleware::Error {
    reqwest_middleware::Error::middleware(e)
}

#[async_trait::async_trait]
impl<C> Middleware for BreakerMiddleware<C>
where
    C: Classify<Response> + Send + Sync + 'static,
{
    async fn handle(
        &self,
        req: Request,
        extensions: &mut http::Extensions,
        next: Next<'_>,
    ) -> reqwest_middleware::Result<Response> {
        let permit = self
            .breaker
            .allow_owned()
            .map_err(|r| refused(BreakerError::Rejected(r)))?;
        let slot = match self.bulkhead.as_ref().map(Bulkhead::try_acquire_owned) {
            None => None,
            Some(Ok(slot)) => Some(slot),
            Some(Err(_)) => {
                permit.abandon(); // never sent: a probe's slot goes back
                return Err(refused(BreakerError::BulkheadFull));
            }
        };
        let start = permit.start();
        // Dropped here (the caller gave up): the permit cancels, the slot
        // goes back. A panic of the rest of the chain is caught as the tower
        // layer catches its inner service's: a failed call, and the panic
        // goes on.
        let mut run = next.run(req, extensions);
        let result = core::future::poll_fn(|cx| match catch_unwind(AssertUnwindSafe(|| run.as_mut().poll(cx))) {
            Ok(Poll::Ready(result)) => Poll::Ready(Ok(result)),
            Ok(Poll::Pending) => Poll::Pending,
            Err(panic) => Poll::Ready(Err(panic)),
        })
        .await;
        let clock = self.breaker.clock();
        let latency = Duration::from_nanos(clock.delta_nanos(start, clock.raw()));
        drop(slot);
        let result = match result {
            Ok(result) => result,
            Err(panic) => {
                permit.record_latency(latency, false);
                resume_unwind(panic)
            }
        };
        let ok = match &result {
            Ok(response) => match catch_unwind(AssertUnwindSafe(|| self.classify.is_failure(response))) {
                Ok(failure) => !failure,
                Err(panic) => {
                    // The classifier's bug: a failed call, and the panic goes on.
                    permit.record_latency(latency, false);
                    resume_unwind(panic)
                }
            },
            Err(reqwest_middleware::Error::Reqwest(_)) => false,
            // A later middleware's own error: the request may never have
            // been sent, so it is not judged (cancelled, as `on_cancel` says).
            Err(_) => {
                drop(permit);
                return result;
            }
        };
        permit.record_latency(latency, ok);
        result
    }
}
