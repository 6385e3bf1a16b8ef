//! tailguard: a lock-free, latency-primary circuit breaker with a
//! preallocated, priority-aware dead-letter queue.
#![cfg_attr(docsrs, feature(doc_cfg))]

mod error;
mod sync;

pub mod dlq;

pub use error::{ConfigError, ConfigErrorKind};
