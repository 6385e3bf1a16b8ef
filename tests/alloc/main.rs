//! Zero allocations on the hot paths, counted by a global allocator (its
//! own test binary: `#[global_allocator]` is per binary, and counting must
//! not take over the others).

#[path = "../support/mod.rs"]
mod support;

mod breaker;
mod counting;
mod dlq;
#[cfg(feature = "tokio")]
mod emit;
