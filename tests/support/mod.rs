//! What the test binaries share: the manual-clock fixtures of the breaker
//! tests, the hook clock, panic payloads, and (behind their features) the
//! emitter's and the tower layer's fixtures. Every binary declares it with
//! `#[path = "../support/mod.rs"] mod support;` (or `"support/mod.rs"` from
//! a single-file binary) and uses what it needs: a fixture is defined here
//! once, never copied into a test file.
//!
//! The reference models (`model/`) and the counting allocator
//! (`tests/alloc/counting.rs`) are not here: the models are the property
//! tests' alone, and a `#[global_allocator]` would take over every binary.

#![allow(dead_code)]

pub mod hook;

pub mod emit;
#[cfg(feature = "tower")]
pub mod http;
#[cfg(feature = "tower")]
pub mod tower;

use std::sync::{Arc, Mutex};
use std::time::Duration;
use tailguard::clock::ManualClock;
use tailguard::{Breaker, BreakerBuilder, Permit, State, Transition};

pub const NS: Duration = Duration::from_nanos(1);
pub const MS: Duration = Duration::from_millis(1);
pub const SEC: Duration = Duration::from_secs(1);
pub const HOUR: Duration = Duration::from_secs(3600);
pub const DAY: Duration = Duration::from_secs(86_400);

/// A breaker builder on `clock`, with no ticker: windows close at `tick()`.
pub fn builder(clock: &ManualClock) -> BreakerBuilder {
    Breaker::builder().clock(clock.clone()).ticker(false)
}

/// A breaker that lives for the rest of the test process, so that its
/// permits can move into a clock hook (`'static`).
pub fn leak(b: Breaker) -> &'static Breaker {
    Box::leak(Box::new(b))
}

/// A permit parked where a clock hook can reach it.
pub type Parked = Arc<Mutex<Option<Permit<'static>>>>;

/// Records `calls` calls, `slow` of them at 900 ms and the rest at 8 ms,
/// the first `errors` of them failed.
pub fn traffic(b: &Breaker, calls: u64, slow: u64, errors: u64) {
    for i in 0..calls {
        let latency = if i < slow { 900 * MS } else { 8 * MS };
        b.allow().expect("admitted").record_latency(latency, i >= errors);
    }
}

/// Advances one window (the default, 1 s) and closes it.
pub fn next_window(b: &Breaker, clock: &ManualClock) {
    clock.advance(SEC);
    b.tick();
}

/// Drives a default breaker to OPEN through three breaching windows.
pub fn trip(b: &Breaker, clock: &ManualClock) {
    for _ in 0..3 {
        traffic(b, 100, 10, 0);
        next_window(b, clock);
    }
    assert_eq!(b.state(), State::Open);
}

/// The transitions a listener saw, in order.
pub type Seen = Arc<Mutex<Vec<Transition>>>;

/// A listener that records every transition, and what it records into.
pub fn recorder() -> (Seen, impl Fn(&Transition) + Send + Sync + 'static) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&seen);
    (seen, move |t: &Transition| sink.lock().unwrap().push(*t))
}

/// A panic payload whose own `Drop` panics, `self.0` times in a chain.
pub struct Bomb(pub u32);

impl Drop for Bomb {
    fn drop(&mut self) {
        if self.0 > 0 {
            std::panic::panic_any(Bomb(self.0 - 1));
        }
    }
}

/// A manual clock and a builder on it (no ticker).
pub fn manual() -> (ManualClock, BreakerBuilder) {
    let clock = ManualClock::new();
    let b = builder(&clock);
    (clock, b)
}
