//! Zero allocations on the queue's hot path: a counting global allocator
//! (its own test binary, because `#[global_allocator]` is per binary).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};

use tailguard::dlq::{DeadLetterQueue, Priority, Pushed};

/// Counts the allocations made by threads that have switched counting on.
struct Counting;

static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    // `const` and `Copy`: reading it never allocates nor registers a
    // destructor.
    static COUNTING: Cell<bool> = const { Cell::new(false) };
}

fn note() {
    if COUNTING.with(Cell::get) {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
    }
}

// SAFETY: forwards every call to `System` unchanged; counting has no effect
// on the memory handed out.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note();
        // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note();
        // SAFETY: as above.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note();
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
fn no_allocation_after_construction() {
    let pairs: u64 = if cfg!(miri) { 2_000 } else { 1_000_000 };
    let dlq = DeadLetterQueue::with_capacity(1024).unwrap();
    let producer = dlq.producer();

    COUNTING.with(|c| c.set(true));
    // The counter works: one boxed value is one allocation.
    drop(std::hint::black_box(Box::new(1u64)));
    assert_eq!(ALLOCATIONS.swap(0, Ordering::Relaxed), 1);
    let mut sum = 0u64;
    for i in 0..pairs {
        let class = Priority::ALL[(i % 3) as usize];
        let pushed = producer.push(i, class);
        assert!(matches!(pushed, Ok(Pushed::Queued)));
        let (v, c) = dlq.pop().unwrap();
        assert_eq!((v, c), (i, class));
        sum = sum.wrapping_add(v);
    }
    // The slow paths too: fill up, displace, hand back, drain.
    for i in 0..1024u64 {
        assert!(matches!(dlq.push(i, Priority::Idle), Ok(Pushed::Queued)));
    }
    assert!(matches!(
        dlq.push(0, Priority::Critical),
        Ok(Pushed::Displaced(0, Priority::Idle))
    ));
    assert!(dlq.push(0, Priority::Idle).is_err());
    let _ = dlq.stats();
    let _ = dlq.fallback_depth();
    assert_eq!(dlq.drain(usize::MAX, |_, _| {}), 1024);
    COUNTING.with(|c| c.set(false));

    assert_eq!(sum, pairs * (pairs - 1) / 2);
    assert_eq!(ALLOCATIONS.load(Ordering::Relaxed), 0, "allocations on the hot path");
}
