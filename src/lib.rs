#![doc = include_str!("../docs/crate-intro.md")]
#![doc = include_str!("../docs/chaos.svg")]
#![doc = include_str!("../docs/crate.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![cfg_attr(docsrs, doc(auto_cfg(hide(tailguard_loom))))]
#![cfg_attr(docsrs, feature(rustdoc_missing_doc_code_examples))]
#![cfg_attr(docsrs, warn(rustdoc::missing_doc_code_examples))]

// Leaves: plain data and pure rules. They import one another (the
// configuration holds a `Backoff` and a trip `Rule`; every error is an
// `error` type), never the machinery below.
pub mod backoff;
mod baseline;
mod config;
mod error;
mod histogram;
mod report;
mod sketch;
mod sync;
mod trip;

// The machinery.
mod breaker;
mod builder;
mod bulkhead;
pub mod clock;
pub mod dlq;
pub mod emit;
mod events;
mod flight;
mod shard;
mod state;
#[cfg(not(tailguard_loom))]
mod ticker;

// What is built on the breaker.
#[cfg(all(feature = "prometheus", not(tailguard_loom)))]
#[cfg_attr(docsrs, doc(cfg(feature = "prometheus")))]
pub mod prometheus;
#[cfg(not(tailguard_loom))]
mod registry;
#[cfg(all(feature = "tower", not(tailguard_loom)))]
#[cfg_attr(docsrs, doc(cfg(feature = "tower")))]
pub mod tower;

pub mod guide;
pub mod timer;

/// The README's examples, compiled and run as doc tests (the README itself
/// is plain Markdown, for the repository's front page).
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

pub use breaker::{Breaker, LocalHandle, LocalPermit, OwnedPermit, Permit};
pub use builder::BreakerBuilder;
pub use bulkhead::{Bulkhead, BulkheadFull, BulkheadPermit, OwnedBulkheadPermit};
pub use config::{CancelPolicy, Jitter, RelativeLatency};
pub use error::{ConfigError, ConfigErrorKind};
pub use histogram::LatencyHistogram;
#[cfg(not(tailguard_loom))]
pub use registry::{ConsumerKey, ConsumerSnapshot, Registry, UnknownConsumer};
pub use report::{
    LatencyQuantiles, Limits, Mode, NoLocalShard, Ramp, Reason, RejectReason, Rejected, Rejections, Snapshot, State,
    Totals, Transition, WindowStats,
};
pub use sketch::QUANTILE_RELATIVE_ERROR;
#[cfg(all(feature = "tokio", not(tailguard_loom)))]
pub use ticker::tick_every;
#[cfg(not(tailguard_loom))]
pub use ticker::Ticker;
