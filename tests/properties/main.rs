//! Property tests: the breaker and the dead-letter queue against their
//! reference models (`support/model/`), over random operation sequences.
//! 2,000 sequences per property by default; `PROPTEST_CASES` for more.

#[path = "../support/mod.rs"]
mod support;

#[path = "../support/model/mod.rs"]
mod model;

mod breaker;
mod dlq;

use proptest::test_runner::{Config as ProptestConfig, FileFailurePersistence};

/// Cases per property: `PROPTEST_CASES`, or 2,000.
fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2_000)
}

/// Every property's configuration: [`cases`] cases, and its saved failure
/// cases in `<file>.proptest-regressions` beside its source file
/// (proptest's default would look in `../proptest-regressions/`, this
/// binary's root being `main.rs`).
fn config() -> ProptestConfig {
    ProptestConfig {
        cases: cases(),
        failure_persistence: Some(Box::new(FileFailurePersistence::WithSource("proptest-regressions"))),
        ..ProptestConfig::default()
    }
}
