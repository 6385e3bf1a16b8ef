#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod breaker;
pub mod clock;
mod config;
pub mod dlq;
mod error;
mod events;
mod shard;
mod state;
mod sync;
#[cfg(not(tailguard_loom))]
mod ticker;

pub use breaker::{
    Breaker, LatencyQuantiles, LocalHandle, LocalPermit, NoLocalShard, Permit, Reason, RejectReason, Rejected,
    Snapshot, Transition, WindowStats, QUANTILE_RELATIVE_ERROR,
};
pub use config::{BreakerBuilder, CancelPolicy, Jitter};
pub use error::{ConfigError, ConfigErrorKind};
pub use state::{Mode, State};
#[cfg(not(tailguard_loom))]
pub use ticker::Ticker;
