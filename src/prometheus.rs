//! Prometheus export (placeholder; being written).
