//! Zero allocations on the queue's hot path: a counting global allocator
//! (its own test binary, because `#[global_allocator]` is per binary).

use crate::counting::allocations_during;
use tailguard::dlq::{DeadLetterQueue, Priority, Pushed};

#[test]
fn no_allocation_after_construction() {
    let pairs: u64 = if cfg!(miri) { 2_000 } else { 1_000_000 };
    let dlq = DeadLetterQueue::with_capacity(1024).unwrap();
    let producer = dlq.producer();

    // The counter works: one boxed value is one allocation.
    assert_eq!(allocations_during(|| drop(std::hint::black_box(Box::new(1u64)))), 1);
    let mut sum = 0u64;
    let n = allocations_during(|| {
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
    });
    assert_eq!(sum, pairs * (pairs - 1) / 2);
    assert_eq!(n, 0, "allocations on the hot path");
}
