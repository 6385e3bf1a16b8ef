//! Loom models of the dead-letter queue (see the DLQ branch).
