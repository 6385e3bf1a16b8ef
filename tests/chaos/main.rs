//! The chaos comparison (`examples/chaos`) as tests: its claims on tokio's
//! paused clock (`claims`), and its figures and the README's claims over
//! many seeds (`seeds`, release builds only); and the adaptive comparison
//! (`examples/adaptive`, the absolute latency rule against the relative
//! one): its claims on shortened runs (`adaptive`), and its figures over
//! many seeds (`adaptive_seeds`, release builds only).
#![cfg(feature = "tokio")]

#[path = "../support/mod.rs"]
mod support;

// A debug build runs only `claims`, which reads less of the scenario.
#[allow(dead_code)]
#[path = "../../examples/chaos/scenario.rs"]
mod scenario;

// The tests read part of what the example prints.
#[allow(dead_code)]
#[path = "../../examples/adaptive/scenario.rs"]
mod adaptive_scenario;

mod adaptive;
#[cfg(not(debug_assertions))]
mod adaptive_seeds;
mod claims;
#[cfg(not(debug_assertions))]
mod seeds;

use scenario::{Report, Strategy};

/// The report of strategy `s`.
fn by(reports: &[Report], s: Strategy) -> &Report {
    reports.iter().find(|r| r.strategy == s).unwrap()
}
