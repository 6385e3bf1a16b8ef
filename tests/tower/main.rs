//! The tower layer (`tailguard::tower`), one module per subject, on tokio's
//! paused clock against in-process services, then around real HTTP clients
//! (hyper; reqwest and reqwest-middleware behind their features); the
//! timeout on async-io's timer, and outside any runtime. Where a
//! test came from is the last line of its doc.
#![cfg(feature = "tower")]

#[path = "../support/mod.rs"]
mod support;

#[cfg(feature = "async-io")]
mod async_io;
mod fail_fast;
mod hostile_round3;
mod hostile_runtimes;
mod hostile_runtimes_2;
mod hyper_client;
mod judging;
mod no_runtime;
mod overrides;
mod panics;
mod permits;
#[cfg(all(feature = "reqwest", feature = "reqwest-middleware"))]
mod reqwest_client;
mod timeouts;
