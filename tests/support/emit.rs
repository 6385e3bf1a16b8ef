//! The emitter's fixtures: breakers that close after one good probe, on the
//! manual clock or tokio's, and emitters with a 200 ms timeout.

use super::MS;
use tailguard::clock::ManualClock;
use tailguard::dlq::{DeadLetterQueue, Priority};
use tailguard::emit::{Emitter, EmitterStats};
use tailguard::{Breaker, Bulkhead, Totals};

/// A breaker on `clock` (no ticker) with one probe that closes it.
pub fn breaker(clock: &ManualClock) -> Breaker {
    Breaker::builder()
        .clock(clock.clone())
        .ticker(false)
        .half_open_probes(1)
        .success_to_close(1)
        .build()
        .unwrap()
}

/// The same on tokio's clock (paused in the tests that use it).
#[cfg(feature = "tokio")]
pub fn tokio_breaker() -> Breaker {
    Breaker::builder()
        .clock(tailguard::clock::ClockSource::tokio())
        .ticker(false)
        .half_open_probes(1)
        .success_to_close(1)
        .build()
        .unwrap()
}

/// An emitter over `b` with a queue of `capacity` and a 200 ms timeout.
pub fn emitter<T>(b: &Breaker, capacity: usize) -> Emitter<T> {
    Emitter::builder(b.clone(), DeadLetterQueue::with_capacity(capacity).unwrap())
        .timeout(200 * MS)
        .unwrap()
        .build()
        .unwrap()
}

/// An emitter over `b` behind a shared `bulkhead`, with a queue of 1024
/// and a 200 ms timeout.
pub fn bulkhead_emitter(b: &Breaker, bulkhead: &Bulkhead) -> Emitter<u64> {
    Emitter::builder(b.clone(), DeadLetterQueue::with_capacity(1024).unwrap())
        .shared_bulkhead(bulkhead.clone())
        .timeout(200 * MS)
        .unwrap()
        .build()
        .unwrap()
}

/// The two identities of the module docs (src/emit/mod.rs): `emitted =
/// delivered + diverted + handed_back + cancelled`, and `diverted =
/// replayed + replay_handed_back + drained + displaced + queued + pending`.
pub fn assert_conserved(s: &EmitterStats, emitted: u64) {
    assert_eq!(s.emitted(), emitted, "emitted identity: {s:?}");
    assert_eq!(s.into_queue(), s.out_of_queue(), "diverted identity: {s:?}");
}

/// A default breaker on the system clock, ticked by hand.
pub fn plain_breaker() -> Breaker {
    Breaker::builder().ticker(false).build().unwrap()
}

/// An emitter over `b` for calls the caller makes (`Emitter::begin`,
/// `Emitter::replay_run`): `slots` in its bulkhead, a queue of `capacity`,
/// a 200 ms timeout and `attempts` replay attempts (3 is the default).
pub fn driven_emitter(b: &Breaker, slots: usize, capacity: usize, attempts: u32) -> Emitter<u32> {
    Emitter::builder(b.clone(), DeadLetterQueue::with_capacity(capacity).unwrap())
        .bulkhead(slots)
        .unwrap()
        .timeout(200 * MS)
        .unwrap()
        .replay_attempts(attempts)
        .unwrap()
        .build()
        .unwrap()
}

/// A backlog for replay: triggers `0..n` (trigger `i` of class
/// `class(i)`) diverted through `e` while `b` is tripped, then `b` reset.
pub fn divert_backlog(b: &Breaker, e: &Emitter<u32>, n: u32, class: impl Fn(u32) -> Priority) {
    b.trip_now();
    for i in 0..n {
        assert!(!e.emit_blocking(i, class(i), |_, _| Ok::<_, ()>(())).is_delivered());
    }
    b.reset();
}

/// What the breaker judged once its window has closed (the clock moved
/// on a minute, then a tick).
pub fn judged(b: &Breaker, clock: &ManualClock) -> Totals {
    clock.advance(std::time::Duration::from_secs(60));
    b.tick();
    b.snapshot().totals
}
