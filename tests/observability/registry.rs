//! The registry: created once, looked up, removed, iterated, shared across threads.

use tailguard::dlq::{DeadLetterQueue, Priority, Pushed};
use tailguard::{Breaker, Registry};

#[test]
fn registry_creates_once_looks_up_removes_and_iterates() {
    let registry = Registry::new();
    let a = registry.get_or_create("pricing", Breaker::builder).unwrap();
    let made = std::sync::atomic::AtomicUsize::new(0);
    let again = registry
        .get_or_create("pricing", || {
            made.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            Breaker::builder()
        })
        .unwrap();
    assert!(a.ptr_eq(&again));
    assert_eq!(made.into_inner(), 0, "the builder runs only on creation");
    let bad = registry.get_or_create("broken", || Breaker::builder().quantile(2.0));
    assert_eq!(bad.unwrap_err().field(), "quantile");
    assert!(registry.get("broken").is_none(), "a bad config registers nothing");
    registry.get_or_create("compliance", Breaker::builder).unwrap();
    let dlq: DeadLetterQueue<u32> = DeadLetterQueue::with_capacity(8).unwrap();
    registry.attach_fallback("pricing", dlq.producer()).unwrap();
    assert!(matches!(dlq.push(1, Priority::Routine), Ok(Pushed::Queued)));
    assert!(matches!(dlq.push(2, Priority::Critical), Ok(Pushed::Queued)));
    let rows = registry.consumers();
    let names: Vec<&str> = rows.iter().map(|r| &*r.name).collect();
    assert_eq!(names, ["compliance", "pricing"]);
    assert_eq!((rows[1].fallback_depth, rows[1].fallback_capacity), (Some(2), Some(8)));
    assert_eq!(rows[0].fallback_depth, None);
    assert_eq!(registry.remove("pricing").map(|b| b.ptr_eq(&a)), Some(true));
    assert_eq!(registry.len(), 1);
    a.allow().unwrap().record(true); // a removed breaker still works
}

#[test]
fn registry_is_safe_to_share_across_threads() {
    let registry = Registry::new();
    let created: Vec<Breaker> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..4)
            .map(|_| s.spawn(|| registry.get_or_create("shared", Breaker::builder).unwrap()))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(
        created.windows(2).all(|w| w[0].ptr_eq(&w[1])),
        "one breaker per name under races"
    );
}
