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
//! * The timeout, if set, is a timer (tokio's by default; any
//!   [`Timer`](crate::timer::Timer) with [`BreakerLayer::timer`]) armed only
//!   when the inner future is not ready on its first poll (its sleep is
//!   then boxed: one allocation, for a request already waiting on I/O).
//!   Where the timer has none to give (tokio's outside a tokio runtime),
//!   the request fails at once with [`BreakerError::NoTimer`], its permit
//!   cancelled, rather than panic or run with no deadline. A request that runs
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
//!   `call` or of its future. Either way the request is over: its bulkhead
//!   slot is back, the inner future is dropped, and a response future
//!   polled again panics ("polled after completion").
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

mod classify;
mod error;
mod future;
mod layer;
#[cfg(feature = "reqwest-middleware")]
#[cfg_attr(docsrs, doc(cfg(feature = "reqwest-middleware")))]
mod middleware;
mod service;

pub use classify::{Classify, ErrorsOnly, ServerErrors};
pub use error::BreakerError;
pub use future::ResponseFuture;
pub use layer::BreakerLayer;
#[cfg(feature = "reqwest-middleware")]
pub use middleware::BreakerMiddleware;
pub use service::BreakerService;

// For the module docs' links only.
#[cfg(doc)]
use tower_service::Service;
