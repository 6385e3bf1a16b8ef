//! Zero allocations on the hot path (allow, record, rejections, probing and
//! transitions), counted by a global allocator.

use crate::counting::allocations_during;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tailguard::clock::ManualClock;
use tailguard::{Breaker, State};

#[test]
fn the_counter_counts_this_threads_allocations_only() {
    let n = allocations_during(|| {
        std::hint::black_box(vec![1u8; 100]);
        std::hint::black_box(Box::new(7u64));
    });
    assert_eq!(n, 2);
    let n = allocations_during(|| {
        std::thread::spawn(|| std::hint::black_box(vec![1u8; 100]).len())
            .join()
            .unwrap();
    });
    assert!(n >= 1, "spawning allocates (the thread's handle), on this thread");
    let elsewhere = std::thread::spawn(|| allocations_during(|| drop(std::hint::black_box(vec![0u64; 8]))));
    assert_eq!(elsewhere.join().unwrap(), 1);
}

#[test]
fn hot_paths_and_transitions_never_allocate() {
    let clock = ManualClock::new();
    let events = std::sync::Arc::new(AtomicU64::new(0));
    let seen = std::sync::Arc::clone(&events);
    let b = Breaker::builder()
        .clock(clock.clone())
        .ticker(false)
        .track_in_flight(true)
        .local_handles(1)
        .on_transition(move |_| {
            seen.fetch_add(1, Ordering::Relaxed);
        })
        .build()
        .unwrap();
    let local = b.local_handle().unwrap();
    // Warm up the thread-local shard index.
    b.allow().unwrap().record(true);

    let n = allocations_during(|| {
        for i in 0..1_000_000u64 {
            let p = b.allow().unwrap();
            if i % 2 == 0 {
                p.record_latency(Duration::from_millis(8), true);
            } else {
                p.record(true);
            }
            local.allow().unwrap().record_latency(Duration::from_millis(1), true);
        }
    });
    assert_eq!(n, 0, "CLOSED allow/record");
    // Window close (drain, histogram, quantiles, judgement) allocates
    // nothing either: the histogram is on the stack.
    let n = allocations_during(|| {
        for _ in 0..100 {
            clock.advance(Duration::from_secs(1));
            b.tick();
            b.allow().unwrap().record_latency(Duration::from_millis(3), true);
        }
    });
    assert_eq!(n, 0, "window close");
    assert_eq!(b.state(), State::Closed);
    assert!(b.snapshot().window.latency.is_some());

    let n = allocations_during(|| {
        b.trip_now();
        for _ in 0..1_000_000 {
            assert!(b.allow().is_err());
        }
    });
    assert_eq!(n, 0, "OPEN rejections");

    let n = allocations_during(|| {
        clock.advance(Duration::from_secs(1));
        for _ in 0..5 {
            let p = b.allow().unwrap();
            assert!(p.is_probe());
            assert!(b.allow().is_err());
            p.record_latency(Duration::from_millis(1), true);
        }
        assert_eq!(b.state(), State::Closed);
        // A failed round too: re-open, probe, close.
        b.trip_now();
        clock.advance(Duration::from_secs(1));
        b.allow().unwrap().record(false);
        clock.advance(Duration::from_secs(2));
        drop(b.allow().unwrap());
        for _ in 0..5 {
            b.allow().unwrap().record_latency(Duration::from_millis(1), true);
        }
        // The hot path only queued its transitions; the tick delivers them.
        b.tick();
        let _ = b.snapshot();
    });
    assert_eq!(n, 0, "HALF_OPEN probing rounds, transitions and events");
    assert_eq!(b.state(), State::Closed);
    assert!(events.load(Ordering::Relaxed) >= 6);
}

/// A thread's first call into a breaker builds its shard (one allocation,
/// and one more for its in-flight slots when tracking is on; a first
/// rejection builds it too, where it counts rejections); every later call
/// and rejection on that thread allocates nothing. This is the hot path's
/// contract since shards are grown on demand (issue 21): allocation-free
/// after a thread's first call (a hostile review asked for (0, 0) on the
/// first call, which held before).
#[test]
fn a_threads_first_call_builds_its_shard_and_later_calls_allocate_nothing() {
    let warm = Breaker::builder().ticker(false).shards(1).build().unwrap();
    let b = Breaker::builder()
        .ticker(false)
        .shards(64)
        .track_in_flight(true)
        .build()
        .unwrap();
    let open = Breaker::builder().ticker(false).shards(64).build().unwrap();
    open.trip_now();
    let counts = std::thread::scope(|s| {
        s.spawn(|| {
            // This thread's index, and the shard of a breaker it called
            // before: what a thread's very first call may still set up.
            warm.allow().unwrap().record(true);
            let first_call = allocations_during(|| b.allow().unwrap().record(true));
            let first_rejection = allocations_during(|| assert!(open.allow().is_err()));
            let later = allocations_during(|| {
                for _ in 0..1000 {
                    b.allow().unwrap().record(true);
                    drop(b.allow().unwrap());
                    b.allow()
                        .unwrap()
                        .record_latency(std::time::Duration::from_millis(1), false);
                    assert!(open.allow().is_err());
                }
            });
            (first_call, first_rejection, later)
        })
        .join()
        .unwrap()
    });
    assert_eq!(
        counts,
        (2, 1, 0),
        "allocations: (first call: its shard and in-flight slots, first rejection: its shard, the 4,000 after)"
    );
}
