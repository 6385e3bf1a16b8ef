//! Dead-letter queue (in progress).
