//! Stress: many threads against one breaker (and one queue) for a while,
//! checking that nothing is counted twice or lost. 2 s a test by default,
//! `STRESS_SECS` for longer.

#[path = "../support/mod.rs"]
mod support;

mod conservation;
mod flapping;
