#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod breaker;
pub mod clock;
mod config;
pub mod dlq;
mod error;
mod events;
#[cfg(all(feature = "prometheus", not(tailguard_loom)))]
#[cfg_attr(docsrs, doc(cfg(feature = "prometheus")))]
pub mod prometheus;
#[cfg(not(tailguard_loom))]
mod registry;
mod shard;
mod state;
mod sync;
#[cfg(not(tailguard_loom))]
mod ticker;

pub use breaker::{
    Breaker, LatencyQuantiles, Limits, LocalHandle, LocalPermit, NoLocalShard, Permit, Reason, RejectReason, Rejected,
    Snapshot, Transition, WindowStats, QUANTILE_RELATIVE_ERROR,
};
pub use config::{BreakerBuilder, CancelPolicy, Jitter};
pub use error::{ConfigError, ConfigErrorKind};
#[cfg(not(tailguard_loom))]
pub use registry::{ConsumerSnapshot, Registry};
pub use state::{Mode, State};
#[cfg(not(tailguard_loom))]
pub use ticker::Ticker;
