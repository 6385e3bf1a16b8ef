//! A tower [`Layer`](tower_layer::Layer) putting a breaker (and optionally a
//! bulkhead and a timeout) around any [`Service`] (feature `tower`).
//!
//! [`BreakerLayer`] wraps a service in a [`BreakerService`]. Each request
//! takes, in [`call`](Service::call) and never in
//! [`poll_ready`](Service::poll_ready), a permit from the breaker, then a
//! slot of the bulkhead; a request the breaker rejects or the bulkhead turns
//! away fails at once with a [`BreakerError`] and never reaches the inner
//! service. The response is judged by a [`Classify`]: for HTTP, a 5xx
//! status is a failure ([`ServerErrors`], the default); an error of the
//! inner service always is. Its latency goes to the breaker, so a slow
//! service trips it though every response is a 200.
//!
//! * `poll_ready` takes no permit and changes nothing in the breaker (no
//!   probe slot, no transition, no count), so a `poll_ready` that is never
//!   followed by `call` leaves nothing taken. It looks at the breaker first:
//!   if the breaker is OPEN with its backoff running, or forced open, it is
//!   ready at once and the next `call` fails with that rejection, however
//!   long the inner service would take to be ready (a full concurrency
//!   limit behind an open breaker still fails fast). Otherwise it asks the
//!   inner service; a task left waiting for the inner service's readiness
//!   is woken when the breaker opens, and refused then: a request that
//!   began waiting while the breaker was CLOSED (the way a slow consumer
//!   fills a limit) does not wait for a slot once the breaker trips, and
//!   neither does a `tower::buffer::Buffer`'s worker parked on it.
//! * Dropping the response future (a client that gave up, a `select!` that
//!   went the other way) gives the bulkhead slot back and cancels the
//!   permit: a probe's slot is returned at once, and the call counts as the
//!   breaker's [`on_cancel`](crate::BreakerBuilder::on_cancel) policy says
//!   (by default as cancelled, neither failed nor slow; with
//!   `track_in_flight`, a call a window close already counted as slow in
//!   flight stays counted so).
//! * The timeout, if set, is a tokio timer armed only when the inner future
//!   is not ready on its first poll (the timer is then boxed: one
//!   allocation, for a request already waiting on I/O). A request that runs
//!   past it fails with [`BreakerError::TimedOut`] and counts in the
//!   breaker as a timeout
//!   ([`OwnedPermit::record_timeout`](crate::OwnedPermit::record_timeout):
//!   failed and slow). A response that completes past the timeout in the
//!   same poll as the timer fires (a late wake-up) is returned, since it
//!   exists, but counted as a timeout too. (With `track_in_flight`, a
//!   request a window close already counted as slow in flight is counted
//!   once as a call, slow; its timeout then counts as its failure.)
//! * A rejection carries the breaker's [`retry_after`](BreakerError::retry_after),
//!   for a `Retry-After` header or a client's backoff.
//! * **reqwest**: with feature `reqwest`, [`ServerErrors`] judges
//!   `reqwest::Response` too, so `BreakerLayer::new(breaker).layer(reqwest::Client::new())`
//!   works as it is; with feature `reqwest-middleware`, [`BreakerMiddleware`]
//!   puts the breaker in a `reqwest_middleware` client with one `.with(...)`.
//! * The classifier runs in the response future, once per response, never
//!   inside the breaker; if it panics, the call counts as failed and the
//!   panic goes on to the caller. So does a panic of the inner service's
//!   `call` or of its future.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use tailguard::tower::{BreakerError, BreakerLayer};
//! use tailguard::{Breaker, Bulkhead};
//! use tower::{service_fn, Layer, Service, ServiceExt};
//!
//! let breaker = Breaker::builder().build()?;
//! let layer = BreakerLayer::new(breaker.clone())
//!     .bulkhead(Bulkhead::new(64)?)
//!     .timeout(Duration::from_millis(200))?;
//! let mut svc = layer.layer(service_fn(|req: http::Request<()>| async move {
//!     let status = if req.uri().path() == "/broken" { 503 } else { 200 };
//!     Ok::<_, std::convert::Infallible>(http::Response::builder().status(status).body(()).unwrap())
//! }));
//!
//! let ok = svc.ready().await?.call(http::Request::new(())).await?;
//! assert_eq!(ok.status(), 200);
//!
//! breaker.trip_now(); // as after a run of 5xx or slow responses
//! match svc.ready().await?.call(http::Request::new(())).await {
//!     Err(BreakerError::Rejected(r)) => assert!(r.retry_after().is_some()),
//!     other => panic!("{other:?}"),
//! }
//! # Ok(())
//! # }
//! ```

use crate::breaker::WatchKey;
#[cfg(feature = "reqwest-middleware")]
#[cfg_attr(docsrs, doc(cfg(feature = "reqwest-middleware")))]
mod middleware;
#[cfg(feature = "reqwest-middleware")]
pub use middleware::BreakerMiddleware;

use crate::breaker::{Breaker, OwnedPermit};
use crate::bulkhead::{Bulkhead, OwnedBulkheadPermit};
use crate::clock::duration_nanos_saturating;
use crate::error::{ConfigError, ConfigErrorKind};
use crate::report::Rejected;
use core::fmt;
use core::future::Future;
use core::pin::Pin;
use core::task::{Context, Poll};
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::time::Duration;
use tokio::time::{Instant, Sleep};
use tower_service::Service;

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
#[derive(Debug)]
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
    /// (refused, or never ready).
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
pub struct BreakerLayer<C = ServerErrors> {
    config: Config<C>,
}

/// What a layer gives each service it makes.
#[derive(Clone)]
struct Config<C> {
    breaker: Breaker,
    bulkhead: Option<Bulkhead>,
    /// The timeout in nanoseconds; `None` for none.
    timeout_ns: Option<u64>,
    classify: C,
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
            },
        }
    }
}

impl<C> BreakerLayer<C> {
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
    /// in the breaker as failed and slow. Needs a tokio runtime with its
    /// timer enabled when a request outlives its first poll.
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
    pub fn classify<D>(self, classify: D) -> BreakerLayer<D> {
        let Config {
            breaker,
            bulkhead,
            timeout_ns,
            ..
        } = self.config;
        BreakerLayer {
            config: Config {
                breaker,
                bulkhead,
                timeout_ns,
                classify,
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

impl<C> fmt::Debug for BreakerLayer<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.config.fmt_fields(&mut f.debug_struct("BreakerLayer"))
    }
}

impl<C> Config<C> {
    fn fmt_fields(&self, d: &mut fmt::DebugStruct<'_, '_>) -> fmt::Result {
        d.field("breaker", &self.breaker)
            .field("bulkhead", &self.bulkhead)
            .field("timeout", &self.timeout_ns.map(Duration::from_nanos))
            .finish_non_exhaustive()
    }
}

impl<S, C: Clone> tower_layer::Layer<S> for BreakerLayer<C> {
    type Service = BreakerService<S, C>;

    fn layer(&self, inner: S) -> Self::Service {
        BreakerService {
            inner,
            config: self.config.clone(),
            refusal: None,
            watch: Watch::default(),
        }
    }
}

/// A service behind a breaker (and optionally a bulkhead and a timeout);
/// made by [`BreakerLayer`], described in the [module docs](self).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use tailguard::tower::{BreakerLayer, ErrorsOnly};
/// use tower::{service_fn, Layer, Service, ServiceExt};
///
/// let mut svc = BreakerLayer::new(tailguard::Breaker::builder().build()?)
///     .classify(ErrorsOnly)
///     .layer(service_fn(|n: u32| async move { Ok::<_, std::io::Error>(n * 2) }));
/// assert_eq!(svc.ready().await?.call(21).await?, 42);
/// # Ok(())
/// # }
/// ```
pub struct BreakerService<S, C = ServerErrors> {
    inner: S,
    config: Config<C>,
    /// A refusal `poll_ready` found in the breaker, for the next `call`.
    refusal: Option<Rejected>,
    /// This service's place among the tasks the breaker wakes when it
    /// opens (taken the first time it waits for the inner service).
    watch: Watch,
}

/// A service's place among the tasks its breaker wakes when it opens,
/// given back when the service is dropped.
#[derive(Default)]
struct Watch {
    /// The breaker, once the service has waited on its inner service.
    breaker: Option<Breaker>,
    key: WatchKey,
    /// A waker is registered (or was, until the breaker took it to wake).
    parked: bool,
}

impl Watch {
    /// Parks `waker` until the breaker opens, unless it refuses calls now
    /// (then nothing stays parked, and the refusal comes back).
    fn park(&mut self, breaker: &Breaker, waker: &core::task::Waker) -> Option<Rejected> {
        let breaker = self.breaker.get_or_insert_with(|| breaker.clone());
        let refusal = breaker.park_until_open(&mut self.key, waker);
        self.parked = refusal.is_none();
        refusal
    }

    /// Not parked any more (nothing to do unless it was).
    #[inline]
    fn unpark(&mut self) {
        if self.parked {
            self.parked = false;
            if let Some(breaker) = &self.breaker {
                breaker.unpark(self.key);
            }
        }
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        if let Some(breaker) = &self.breaker {
            breaker.forget_park(&mut self.key);
        }
    }
}

impl<S: Clone, C: Clone> Clone for BreakerService<S, C> {
    /// A clone is not ready: it does not inherit a pending refusal.
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            config: self.config.clone(),
            refusal: None,
            watch: Watch::default(),
        }
    }
}

impl<S, C> BreakerService<S, C> {
    /// The wrapped service.
    ///
    /// ```
    /// use tower::Layer;
    /// let layer = tailguard::tower::BreakerLayer::new(tailguard::Breaker::builder().build()?);
    /// assert_eq!(*layer.layer(7u8).get_ref(), 7);
    /// # Ok::<(), tailguard::ConfigError>(())
    /// ```
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The wrapped service, mutably.
    ///
    /// ```
    /// use tower::Layer;
    /// let layer = tailguard::tower::BreakerLayer::new(tailguard::Breaker::builder().build()?);
    /// let mut svc = layer.layer(7u8);
    /// *svc.get_mut() = 8;
    /// assert_eq!(svc.into_inner(), 8);
    /// # Ok::<(), tailguard::ConfigError>(())
    /// ```
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// The wrapped service, unwrapped.
    ///
    /// ```
    /// use tower::Layer;
    /// let layer = tailguard::tower::BreakerLayer::new(tailguard::Breaker::builder().build()?);
    /// assert_eq!(layer.layer(7u8).into_inner(), 7);
    /// # Ok::<(), tailguard::ConfigError>(())
    /// ```
    pub fn into_inner(self) -> S {
        self.inner
    }

    /// The breaker around the service.
    ///
    /// ```
    /// use tower::Layer;
    /// let b = tailguard::Breaker::builder().build()?;
    /// let svc = tailguard::tower::BreakerLayer::new(b.clone()).layer(());
    /// assert!(svc.breaker().ptr_eq(&b));
    /// # Ok::<(), tailguard::ConfigError>(())
    /// ```
    pub fn breaker(&self) -> &Breaker {
        &self.config.breaker
    }
}

impl<S: fmt::Debug, C> fmt::Debug for BreakerService<S, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.config
            .fmt_fields(f.debug_struct("BreakerService").field("inner", &self.inner))
    }
}

impl<S, C, Req> Service<Req> for BreakerService<S, C>
where
    S: Service<Req>,
    C: Classify<S::Response> + Clone,
{
    type Response = S::Response;
    type Error = BreakerError<S::Error>;
    type Future = ResponseFuture<S::Future, C>;

    /// Looks at the breaker (taking nothing), then asks the inner service;
    /// a task left waiting for the inner service is woken when the breaker
    /// opens (see the [module docs](self)).
    #[inline]
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        if self.refused() {
            return Poll::Ready(Ok(()));
        }
        match self.inner.poll_ready(cx) {
            Poll::Ready(ready) => {
                self.watch.unpark();
                Poll::Ready(ready.map_err(BreakerError::NotReady))
            }
            Poll::Pending => {
                // Parked on the inner service: be woken if the breaker
                // opens (and refused if it opened meanwhile).
                match self.watch.park(&self.config.breaker, cx.waker()) {
                    Some(refusal) => {
                        self.refusal = Some(refusal);
                        Poll::Ready(Ok(()))
                    }
                    None => Poll::Pending,
                }
            }
        }
    }

    /// Takes a permit from the breaker, then a bulkhead slot, then calls
    /// the inner service; fails at once if either is refused (or if
    /// `poll_ready` found the breaker rejecting).
    fn call(&mut self, req: Req) -> Self::Future {
        let config = &self.config;
        if let Some(rejected) = self.refusal.take() {
            let rejected = config.breaker.count_refusal(rejected);
            return ResponseFuture::refused(Refusal::Rejected(rejected), config);
        }
        let permit = match config.breaker.allow_owned() {
            Ok(permit) => permit,
            Err(rejected) => return ResponseFuture::refused(Refusal::Rejected(rejected), config),
        };
        let slot = match config.bulkhead.as_ref().map(Bulkhead::try_acquire_owned) {
            None => None,
            Some(Ok(slot)) => Some(slot),
            Some(Err(_)) => {
                permit.abandon(); // never called: a probe's slot goes back
                return ResponseFuture::refused(Refusal::BulkheadFull, config);
            }
        };
        let call = match catch_unwind(AssertUnwindSafe(|| self.inner.call(req))) {
            Ok(call) => call,
            Err(panic) => {
                let latency = Duration::from_nanos(elapsed_ns(&permit));
                drop(slot);
                permit.record_latency(latency, false);
                resume_unwind(panic)
            }
        };
        ResponseFuture {
            kind: Kind::Called { call, sleep: None },
            permit: Some(permit),
            _slot: slot,
            timeout_ns: config.timeout_ns,
            classify: config.classify.clone(),
        }
    }
}

impl<S, C> BreakerService<S, C> {
    /// Whether the breaker refuses calls now (a refusal kept for `call`).
    #[inline]
    fn refused(&mut self) -> bool {
        if self.refusal.is_none() {
            self.refusal = self.config.breaker.refusal();
        }
        self.refusal.is_some()
    }
}

/// A request turned away before the inner service saw it.
#[derive(Debug, Clone, Copy)]
enum Refusal {
    Rejected(Rejected),
    BulkheadFull,
}

pin_project_lite::pin_project! {
    #[project = KindProj]
    enum Kind<F> {
        /// Turned away; `None` once that is reported.
        Refused { refusal: Option<Refusal> },
        /// The inner service's future, and the timer once armed (boxed: a
        /// timer is as large as the rest of the future together, and most
        /// requests complete without one; see `poll`).
        Called {
            #[pin]
            call: F,
            sleep: Option<Pin<Box<Sleep>>>,
        },
        /// Timed out: the inner future is dropped.
        Done,
    }
}

pin_project_lite::pin_project! {
    /// The response future of a [`BreakerService`]. Dropping it before it
    /// completes gives the bulkhead slot back and cancels the breaker
    /// permit (a probe's slot included).
    pub struct ResponseFuture<F, C> {
        #[pin]
        kind: Kind<F>,
        // The verdict goes in when the response is judged; `None` after.
        permit: Option<OwnedPermit>,
        // Held until the future completes or is dropped.
        _slot: Option<OwnedBulkheadPermit>,
        timeout_ns: Option<u64>,
        classify: C,
    }
}

impl<F, C: Clone> ResponseFuture<F, C> {
    fn refused(refusal: Refusal, config: &Config<C>) -> Self {
        Self {
            kind: Kind::Refused { refusal: Some(refusal) },
            permit: None,
            _slot: None,
            timeout_ns: None,
            classify: config.classify.clone(),
        }
    }
}

impl<F, C> fmt::Debug for ResponseFuture<F, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture")
            .field("permit", &self.permit)
            .field("timeout", &self.timeout_ns.map(Duration::from_nanos))
            .finish_non_exhaustive()
    }
}

/// Nanoseconds since the permit's start, on the breaker's clock.
fn elapsed_ns(permit: &OwnedPermit) -> u64 {
    permit
        .clock()
        .map_or(0, |clock| clock.delta_nanos(permit.start(), clock.raw()))
}

impl<F, C, R, E> Future for ResponseFuture<F, C>
where
    F: Future<Output = Result<R, E>>,
    C: Classify<R>,
{
    type Output = Result<R, BreakerError<E>>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        let (mut call, sleep) = match this.kind.as_mut().project() {
            KindProj::Refused { refusal } => {
                return Poll::Ready(Err(match refusal.take().expect("polled after completion") {
                    Refusal::Rejected(r) => BreakerError::Rejected(r),
                    Refusal::BulkheadFull => BreakerError::BulkheadFull,
                }))
            }
            KindProj::Called { call, sleep } => (call, sleep),
            KindProj::Done => panic!("polled after completion"),
        };
        let polled = match catch_unwind(AssertUnwindSafe(|| call.as_mut().poll(cx))) {
            Ok(polled) => polled,
            Err(panic) => {
                if let Some(permit) = this.permit.take() {
                    let latency = elapsed_ns(&permit);
                    permit.record_latency(Duration::from_nanos(latency), false);
                }
                resume_unwind(panic)
            }
        };
        if let Poll::Ready(result) = polled {
            let permit = this.permit.take().expect("a called request holds its permit");
            let latency_ns = elapsed_ns(&permit);
            let latency = Duration::from_nanos(latency_ns);
            // The inner future is dropped now, and its destructor is its
            // code too: a panic there is a failed call, like one in `poll`.
            if let Err(panic) = catch_unwind(AssertUnwindSafe(|| this.kind.set(Kind::Done))) {
                this._slot.take();
                permit.record_latency(latency, false);
                resume_unwind(panic)
            }
            if this.timeout_ns.is_some_and(|budget| latency_ns > budget) {
                // Past the timeout (the timer fired in this same poll, or
                // the wake-up came late): returned, counted as a timeout.
                permit.record_timeout(latency);
                this._slot.take();
                return Poll::Ready(result.map_err(BreakerError::Inner));
            }
            let ok = match &result {
                Err(_) => false,
                Ok(response) => match catch_unwind(AssertUnwindSafe(|| this.classify.is_failure(response))) {
                    Ok(failure) => !failure,
                    Err(panic) => {
                        permit.record_latency(latency, false);
                        resume_unwind(panic)
                    }
                },
            };
            permit.record_latency(latency, ok);
            this._slot.take();
            return Poll::Ready(result.map_err(BreakerError::Inner));
        }
        let Some(budget_ns) = *this.timeout_ns else {
            return Poll::Pending;
        };
        if sleep.is_none() {
            let permit = this.permit.as_ref().expect("a called request holds its permit");
            let left = budget_ns.saturating_sub(elapsed_ns(permit));
            match Instant::now().checked_add(Duration::from_nanos(left)) {
                Some(at) => *sleep = Some(Box::pin(tokio::time::sleep_until(at))),
                None => return Poll::Pending, // centuries away: no timer
            }
        }
        match sleep.as_mut().map(|sleep| sleep.as_mut().poll(cx)) {
            Some(Poll::Ready(())) => {
                let permit = this.permit.take().expect("a called request holds its permit");
                let elapsed = Duration::from_nanos(elapsed_ns(&permit).max(budget_ns));
                permit.record_timeout(elapsed);
                this._slot.take();
                this.kind.set(Kind::Done);
                Poll::Ready(Err(BreakerError::TimedOut(elapsed)))
            }
            _ => Poll::Pending,
        }
    }
}
