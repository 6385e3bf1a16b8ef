//! Serves `/metrics` on 127.0.0.1 (placeholder; being written).
fn main() {}
