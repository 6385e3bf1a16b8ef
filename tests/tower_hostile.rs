#![cfg(feature = "tower")]
#[test]
fn smoke() {}
