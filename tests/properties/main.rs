//! Property tests: the breaker and the dead-letter queue against their
//! reference models (`support/model/`), over random operation sequences.
//! 2,000 sequences per property by default; `PROPTEST_CASES` for more.

#[path = "../support/mod.rs"]
mod support;

#[path = "../support/model/mod.rs"]
mod model;

mod breaker;
mod dlq;
