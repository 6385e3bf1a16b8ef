//! [`BreakerService`], the service a [`BreakerLayer`] makes: `poll_ready`
//! looks at the breaker (and waits on the inner service, woken if the
//! breaker opens), `call` takes the permit and the bulkhead slot.

use super::classify::{Classify, ServerErrors};
use super::error::BreakerError;
use super::future::{elapsed_ns, Refusal, ResponseFuture};
use crate::breaker::{Breaker, WatchKey};
use crate::bulkhead::Bulkhead;
use crate::report::Rejected;
use crate::timer::{Timer, TokioTimer};
use core::fmt;
use core::task::{Context, Poll};
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::time::Duration;
use tower_service::Service;

// For the docs' links only.
#[cfg(doc)]
use super::BreakerLayer;

/// What a layer gives each service it makes.
#[derive(Clone)]
pub(super) struct Config<C, R> {
    pub(super) breaker: Breaker,
    pub(super) bulkhead: Option<Bulkhead>,
    /// The timeout in nanoseconds; `None` for none.
    pub(super) timeout_ns: Option<u64>,
    pub(super) classify: C,
    /// Where the timeout's sleep comes from.
    pub(super) timer: R,
}

impl<C, R> Config<C, R> {
    pub(super) fn fmt_fields(&self, d: &mut fmt::DebugStruct<'_, '_>) -> fmt::Result {
        d.field("breaker", &self.breaker)
            .field("bulkhead", &self.bulkhead)
            .field("timeout", &self.timeout_ns.map(Duration::from_nanos))
            .finish_non_exhaustive()
    }
}

/// A service behind a breaker (and optionally a bulkhead and a timeout);
/// made by [`BreakerLayer`], described in the [module docs](super).
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
pub struct BreakerService<S, C = ServerErrors, R = TokioTimer> {
    inner: S,
    config: Config<C, R>,
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

impl<S: Clone, C: Clone, R: Clone> Clone for BreakerService<S, C, R> {
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

impl<S, C, R> BreakerService<S, C, R> {
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

impl<S: fmt::Debug, C, R> fmt::Debug for BreakerService<S, C, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.config
            .fmt_fields(f.debug_struct("BreakerService").field("inner", &self.inner))
    }
}

impl<S, C, R, Req> Service<Req> for BreakerService<S, C, R>
where
    S: Service<Req>,
    C: Classify<S::Response> + Clone,
    R: Timer + Clone,
{
    type Response = S::Response;
    type Error = BreakerError<S::Error>;
    type Future = ResponseFuture<S::Future, C, R>;

    /// Looks at the breaker (taking nothing), then asks the inner service;
    /// a task left waiting for the inner service is woken when the breaker
    /// opens (see the [module docs](super)).
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
    #[inline]
    fn call(&mut self, req: Req) -> Self::Future {
        let config = &self.config;
        if let Some(rejected) = self.refusal.take() {
            let rejected = config.breaker.count_refusal(rejected);
            return ResponseFuture::refused(Refusal::Rejected(rejected), config.classify.clone());
        }
        let mut permit = match config.breaker.allow_owned() {
            Ok(permit) => permit,
            Err(rejected) => return ResponseFuture::refused(Refusal::Rejected(rejected), config.classify.clone()),
        };
        let slot = match config.bulkhead.as_ref().map(Bulkhead::try_acquire_owned) {
            None => None,
            Some(Ok(slot)) => Some(slot),
            Some(Err(_)) => {
                permit.abandon(); // never called: a probe's slot goes back
                return ResponseFuture::refused(Refusal::BulkheadFull, config.classify.clone());
            }
        };
        let call = match catch_unwind(AssertUnwindSafe(|| self.inner.call(req))) {
            Ok(call) => call,
            Err(panic) => {
                let latency_ns = elapsed_ns(&permit);
                drop(slot);
                permit.record_nanos_in_place(latency_ns, false);
                resume_unwind(panic)
            }
        };
        ResponseFuture::called(
            call,
            permit,
            slot,
            config.timeout_ns,
            config.classify.clone(),
            config.timer.clone(),
        )
    }
}

impl<S, C, R> BreakerService<S, C, R> {
    /// The service a layer with `config` makes around `inner`.
    pub(super) fn new(inner: S, config: Config<C, R>) -> Self {
        BreakerService {
            inner,
            config,
            refusal: None,
            watch: Watch::default(),
        }
    }

    /// Whether the breaker refuses calls now (a refusal kept for `call`).
    #[inline]
    fn refused(&mut self) -> bool {
        if self.refusal.is_none() {
            self.refusal = self.config.breaker.refusal();
        }
        self.refusal.is_some()
    }
}
