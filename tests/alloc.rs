//! Zero allocations on the hot path (allow, record, rejections, probing and
//! transitions), counted by a global allocator.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tailguard::clock::ManualClock;
use tailguard::{Breaker, State};

struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

// SAFETY: forwards every call to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller upholds `GlobalAlloc::dealloc`'s contract.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller upholds `GlobalAlloc::realloc`'s contract.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocations_during(f: impl FnOnce()) -> u64 {
    let before = ALLOCATIONS.load(Ordering::SeqCst);
    f();
    ALLOCATIONS.load(Ordering::SeqCst) - before
}

/// One test only, so no other test thread allocates while this one counts.
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
    // Window close builds the window's latency sketch: a cold path that
    // allocates (and frees) once per window, never per call.
    clock.advance(Duration::from_secs(1));
    b.tick();
    assert_eq!(b.state(), State::Closed);

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
        let _ = b.snapshot();
    });
    assert_eq!(n, 0, "HALF_OPEN probing rounds, transitions and events");
    assert_eq!(b.state(), State::Closed);
    assert!(events.load(Ordering::Relaxed) >= 6);
}
