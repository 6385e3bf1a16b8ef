//! Real races between threads (the loom models in `loom-tests/` cover the
//! interleavings; these run the real thing).

use crate::support::*;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Barrier;
use tailguard::clock::ManualClock;
use tailguard::State;

#[test]
#[cfg_attr(miri, ignore = "hundreds of thread races; loom covers the race")]
fn racing_threads_at_open_expiry_never_exceed_the_probe_limit() {
    for probes in [1u32, 2, 3] {
        for _ in 0..200 {
            let clock = ManualClock::new();
            let (seen, listener) = recorder();
            let b = builder(&clock)
                .half_open_probes(probes)
                .on_transition(listener)
                .build()
                .unwrap();
            b.trip_now();
            clock.advance(SEC);
            let admitted = AtomicUsize::new(0);
            let barrier = Barrier::new(4);
            std::thread::scope(|s| {
                for _ in 0..4 {
                    s.spawn(|| {
                        barrier.wait();
                        let mine: Vec<_> = (0..3).filter_map(|_| b.allow().ok()).collect();
                        admitted.fetch_add(mine.len(), Ordering::Relaxed);
                        barrier.wait(); // hold the permits until everyone tried
                        std::mem::forget(mine);
                    });
                }
            });
            assert_eq!(admitted.load(Ordering::Relaxed), probes as usize);
            b.tick(); // delivers the transition the winning `allow` queued
            let half_opens = seen.lock().unwrap().iter().filter(|t| t.to == State::HalfOpen).count();
            assert_eq!(half_opens, 1, "exactly one thread wins OPEN -> HALF_OPEN");
        }
    }
}

#[test]
#[cfg_attr(
    miri,
    ignore = "threads racing for thousands of operations; loom and ThreadSanitizer cover the race"
)]
fn counters_are_conserved_across_concurrent_ticks() {
    let clock = ManualClock::new();
    let b = builder(&clock).build().unwrap();
    b.force_closed(); // measures every window, never trips
    let per_thread = 200_000u64;
    let mut total = (0u64, 0u64, 0u64);
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                for i in 0..per_thread {
                    b.allow()
                        .unwrap()
                        .record_latency(if i % 3 == 0 { SEC } else { MS }, i % 2 == 0);
                }
            });
        }
        let b = &b;
        let clock = &clock;
        let total = &mut total;
        s.spawn(move || {
            for _ in 0..2_000 {
                clock.advance(SEC);
                b.tick();
                let w = b.snapshot().window;
                assert!(w.slow <= w.calls, "a call's bucket decides both");
                *total = (total.0 + w.calls, total.1 + w.errors, total.2 + w.slow);
                // A record racing a close may have its error counted a window
                // before its call: at most one per recording thread.
                assert!(total.1 <= total.0 + 2, "errors never run far ahead of calls");
            }
        });
    });
    clock.advance(SEC);
    b.tick();
    let w = b.snapshot().window;
    let total = (total.0 + w.calls, total.1 + w.errors, total.2 + w.slow);
    let calls = 2 * per_thread;
    assert_eq!(total, (calls, calls / 2, 2 * per_thread.div_ceil(3)));
}
