//! Full-jitter exponential backoff for retry delays (being written).
