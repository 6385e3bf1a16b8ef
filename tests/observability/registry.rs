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

/// Per-core breakers (`("pricing", core)`): one breaker per core beside
/// the consumer's shared one, each created once, looked up, attached to
/// and removed on its own; `len` counts breakers, `for_each` and
/// `consumers` list them in name order, the shared one first, then by
/// core; a key that is not registered names the nearest one, core
/// included. Issue 20.
#[test]
fn per_core_breakers_are_keyed_by_name_and_core() {
    use tailguard::ConsumerKey;
    let registry = Registry::new();
    let shared = registry.get_or_create("pricing", Breaker::builder).unwrap();
    let on: Vec<Breaker> = (0..3u32)
        .map(|core| registry.get_or_create(("pricing", core), Breaker::builder).unwrap())
        .collect();
    let name = String::from("pricing");
    assert!(registry
        .get_or_create((&name, 2), || panic!("exists"))
        .unwrap()
        .ptr_eq(&on[2]));
    assert!(registry.get(ConsumerKey::on_core("pricing", 1)).unwrap().ptr_eq(&on[1]));
    assert!(registry.get(&name).unwrap().ptr_eq(&shared));
    assert!(!shared.ptr_eq(&on[0]) && !on[0].ptr_eq(&on[1]));
    assert!(on.iter().all(|b| b.name() == Some("pricing")));
    registry.get_or_create("audit", Breaker::builder).unwrap();
    assert_eq!(registry.len(), 5);
    let rows: Vec<(String, Option<u32>)> = registry
        .consumers()
        .iter()
        .map(|r| (r.name.to_string(), r.core))
        .collect();
    let want: Vec<(String, Option<u32>)> = [("audit", None), ("pricing", None), ("pricing", Some(0))]
        .into_iter()
        .chain([("pricing", Some(1)), ("pricing", Some(2))])
        .map(|(n, c)| (n.to_string(), c))
        .collect();
    assert_eq!(rows, want);
    let mut seen = Vec::new();
    registry.for_each(|n, b| seen.push((n.to_string(), b.clone())));
    assert_eq!(seen.len(), 5);
    assert!(seen[2].1.ptr_eq(&on[0]));

    // Attaching to a core's breaker reports it on that row only.
    let q: DeadLetterQueue<u8> = DeadLetterQueue::with_capacity(4).unwrap();
    registry.attach_fallback(("pricing", 1), q.producer()).unwrap();
    let depth: Vec<Option<usize>> = registry.consumers().iter().map(|r| r.fallback_depth).collect();
    assert_eq!(depth, [None, None, None, Some(0), None]);

    // Unknown keys: the core asked for, and the nearest breaker.
    let err = registry.attach_fallback(("pricing", 7), q.producer()).unwrap_err();
    assert_eq!(
        (err.name(), err.core(), err.nearest()),
        ("pricing", Some(7), Some("pricing"))
    );
    assert_eq!(err.nearest_core(), None, "the consumer's shared breaker comes first");
    assert_eq!(
        err.to_string(),
        "no consumer named \"pricing\" on core 7 in this registry (did you mean \"pricing\"?); \
         create it with Registry::get_or_create first"
    );
    let err = registry.attach_fallback(("prcing", 2), q.producer()).unwrap_err();
    assert_eq!(
        (err.nearest(), err.nearest_core()),
        (Some("pricing"), Some(2)),
        "the same core"
    );

    // Removing one core's breaker keeps the others; the last one removes the name.
    assert!(registry.remove(("pricing", 1)).unwrap().ptr_eq(&on[1]));
    assert!(registry.get(("pricing", 1)).is_none());
    assert!(registry.remove(("pricing", 1)).is_none());
    assert_eq!(registry.len(), 4);
    for key in [
        ConsumerKey::new("pricing"),
        ConsumerKey::on_core("pricing", 0),
        ("pricing", 2).into(),
    ] {
        assert!(registry.remove(key).is_some(), "{key}");
    }
    let err = registry.attach_fallback("pricing", q.producer()).unwrap_err();
    assert_eq!(err.nearest(), None, "no pricing left at all");
    assert_eq!(registry.len(), 1);
}
