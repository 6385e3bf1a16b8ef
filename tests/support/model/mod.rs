//! Reference models: the breaker and the queue as plain single-threaded
//! code (no atomics, no clock of their own), which the property tests in
//! `tests/properties/` drive in step with the real thing.

pub mod breaker;
pub mod dlq;
