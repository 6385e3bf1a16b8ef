//! The emit path (`tailguard::emit`, `tailguard::Bulkhead`), one module per
//! subject: the blocking emitter on the manual clock, the async one on
//! tokio's paused clock (behind the `tokio` feature), on async-io's timer
//! (behind `async-io`), and outside any runtime. Where a test came
//! from is the last line of its doc.

#[path = "../support/mod.rs"]
mod support;

mod accounting;
#[cfg(feature = "async-io")]
mod async_io;
#[cfg(feature = "tokio")]
mod cancellation;
#[cfg(feature = "tokio")]
mod consumers;
mod hostile_guess;
mod hostile_in_flight;
mod hostile_local_guess;
mod hostile_runtimes;
mod hostile_runtimes_2;
mod in_flight;
#[cfg(feature = "tokio")]
mod no_runtime;
mod outcomes;
mod overrides;
mod panics;
mod per_core;
mod per_core_async;
mod replay;
mod replay_run;
mod shutdown;
mod timeouts;
mod timer_panics;
#[cfg(feature = "tokio")]
mod tokio_clock;
