//! What the breaker tells an operator: latency quantiles, flapping, the
//! registry, what a fleet adds up (the cumulative histogram, the time
//! OPEN), its memory, the Prometheus export and the `tracing` events.

#[path = "../support/mod.rs"]
mod support;

mod flapping;
mod fleet;
#[cfg(feature = "prometheus")]
mod hostile_core_labels;
mod hostile_fleet;
// Its figures are for a build without `tracing`, whose event queue every
// breaker then keeps.
#[cfg(not(feature = "tracing"))]
mod memory;
#[cfg(feature = "prometheus")]
mod prometheus_export;
mod quantiles;
mod registry;
#[cfg(feature = "tracing")]
mod tracing_events;
