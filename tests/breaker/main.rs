//! The breaker, one module per behaviour, on the manual clock (or the hook
//! clock of `support/hook.rs`, which runs a hook at one chosen read to put
//! a racing thread's action at the exact instant a race needs); threads
//! where the claim is about real concurrency. No test sleeps.
//!
//! Where a test came from (a hostile review's finding, a mutant it kills)
//! is the last line of its doc. The process ticker's tests are in
//! `tests/ticker.rs` (a running ticker ticks every breaker of its binary);
//! the allocation counts in `tests/alloc/`; the reference model's
//! properties in `tests/properties/`.

#[path = "../support/mod.rs"]
mod support;

mod backoff;
mod clock;
mod config;
mod events;
mod generation_wrap;
mod half_open;
mod handles;
mod hostile_adaptive;
mod hostile_shards;
mod in_flight;
mod leases;
mod overrides;
mod races;
mod ramp;
mod relative;
mod snapshot;
mod sparse;
mod tripping;
mod windows;
