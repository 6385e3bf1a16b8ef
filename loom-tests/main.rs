//! The loom models, one binary: the breaker's protocols (`breaker`, whose
//! header is the table of every protocol and its models), the queue's
//! (`dlq`) and the emit path's (`emit`). Built only with
//! `--cfg tailguard_loom`, which swaps the crate's atomics for loom's.
//!
//! Run: `RUSTFLAGS="--cfg tailguard_loom" LOOM_MAX_PREEMPTIONS=2 cargo test --release --test loom`.
#![cfg(tailguard_loom)]

mod breaker;
mod dlq;
mod dlq_fates;
mod dlq_hostile_accounted;
mod dlq_hostile_consumer_line;
mod dlq_hostile_fold;
mod dlq_hostile_pop;
mod emit;
mod hostile_local_guess;
