//! Flapping: flagged, announced and cleared; slow reopens spread out are not flapping.

use crate::support::{MS, SEC};
use std::sync::{Arc, Mutex};
use tailguard::clock::ManualClock;
use tailguard::{Breaker, State, Transition};

#[test]
fn flapping_is_flagged_announced_and_cleared() {
    let clock = ManualClock::new();
    let seen: Arc<Mutex<Vec<Transition>>> = Arc::default();
    let sink = Arc::clone(&seen);
    let b = Breaker::builder()
        .clock(clock.clone())
        .ticker(false)
        .base_backoff(100 * MS)
        .max_backoff(100 * MS)
        .flapping(3, 60 * SEC)
        .on_transition(move |t| sink.lock().unwrap().push(*t))
        .build()
        .unwrap();
    b.trip_now();
    for cycle in 1..=4 {
        clock.advance(100 * MS);
        b.allow().unwrap().record(false); // OPEN -> HALF_OPEN -> OPEN
        assert_eq!(b.snapshot().flapping, cycle > 3, "cycle {cycle}");
    }
    b.tick(); // delivers the transitions `allow` and `record` queued
    let raised: Vec<_> = seen
        .lock()
        .unwrap()
        .iter()
        .filter(|t| t.flapping)
        .map(|t| t.generation)
        .collect();
    assert_eq!(raised.len(), 1, "the fourth re-open raises the flag: {raised:?}");
    // A minute later, with the consumer healthy, the flag clears.
    clock.advance(100 * MS);
    for _ in 0..5 {
        b.allow().unwrap().record_latency(MS, true);
    }
    assert_eq!(b.state(), State::Closed);
    clock.advance(61 * SEC);
    b.tick();
    assert!(!b.snapshot().flapping);
}

#[test]
fn slow_reopens_spread_out_are_not_flapping() {
    let clock = ManualClock::new();
    let b = Breaker::builder()
        .clock(clock.clone())
        .ticker(false)
        .flapping(3, 60 * SEC)
        .build()
        .unwrap();
    b.trip_now();
    for _ in 0..10 {
        let wait = b.snapshot().next_probe_in.unwrap();
        clock.advance(wait.max(25 * SEC)); // three re-opens per minute at most
        b.allow().unwrap().record(false);
        assert!(!b.snapshot().flapping);
    }
}
