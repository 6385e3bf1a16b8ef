//! The chaos comparison (`examples/chaos`) as tests: its claims on tokio's
//! paused clock (`claims`), and its figures and the README's claims over
//! many seeds (`seeds`, release builds only).
#![cfg(feature = "tokio")]

#[path = "../support/mod.rs"]
mod support;

// A debug build runs only `claims`, which reads less of the scenario.
#[allow(dead_code)]
#[path = "../../examples/chaos/scenario.rs"]
mod scenario;

mod claims;
#[cfg(not(debug_assertions))]
mod seeds;

use scenario::{Report, Strategy};

/// The report of strategy `s`.
fn by(reports: &[Report], s: Strategy) -> &Report {
    reports.iter().find(|r| r.strategy == s).unwrap()
}
