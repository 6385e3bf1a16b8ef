//! Hostile review of the per-core registry keys and the `core` label of the
//! Prometheus export: names that collide, names that need escaping, the
//! nearest-name suggestion, removal racing a scrape.

use std::collections::{BTreeMap, BTreeSet};
use tailguard::dlq::DeadLetterQueue;
use tailguard::emit::Emitter;
use tailguard::prometheus::BreakerCollector;
use tailguard::{Breaker, Registry};

/// A sample line of the text exposition: its metric name and its labels,
/// unescaped, in the order written.
type Line = (String, Vec<(String, String)>);

/// Parses every sample line of `text` (escape-aware, unlike
/// `prometheus_parse`'s `[^}]+`, so that a name with `}` or `"` parses).
fn samples(text: &str) -> Vec<Line> {
    let mut out = Vec::new();
    for line in text.lines() {
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        let Some(brace) = line.find('{') else {
            let name = line.split_whitespace().next().unwrap().to_string();
            out.push((name, Vec::new()));
            continue;
        };
        let name = line[..brace].to_string();
        let mut labels = Vec::new();
        let mut chars = line[brace + 1..].chars().peekable();
        loop {
            let mut key = String::new();
            for c in chars.by_ref() {
                if c == '=' {
                    break;
                }
                key.push(c);
            }
            assert_eq!(chars.next(), Some('"'), "{line}");
            let mut value = String::new();
            while let Some(c) = chars.next() {
                match c {
                    '\\' => match chars.next() {
                        Some('n') => value.push('\n'),
                        Some(other) => value.push(other),
                        None => panic!("{line}"),
                    },
                    '"' => break,
                    c => value.push(c),
                }
            }
            labels.push((key, value));
            match chars.next() {
                Some(',') => continue,
                Some('}') => break,
                other => panic!("{line}: {other:?}"),
            }
        }
        out.push((name, labels));
    }
    out
}

/// No two samples are the same series, and no sample names a label twice.
fn assert_well_formed(lines: &[Line]) {
    let mut seen = BTreeSet::new();
    for (name, labels) in lines {
        let keys: BTreeSet<&str> = labels.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys.len(), labels.len(), "a label twice in {name} {labels:?}");
        let mut sorted = labels.clone();
        sorted.sort();
        assert!(
            seen.insert((name.clone(), sorted)),
            "duplicate series {name} {labels:?}"
        );
    }
}

fn label<'a>(labels: &'a [(String, String)], key: &str) -> Option<&'a str> {
    labels.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
}

/// The text exposition of `c`, as a scrape sees it.
fn encode_text(c: BreakerCollector) -> Result<String, std::fmt::Error> {
    let mut metrics = prometheus_client::registry::Registry::default();
    metrics.register_collector(Box::new(c));
    let mut text = String::new();
    prometheus_client::encoding::prometheus_text::encode(&mut text, &metrics)?;
    Ok(text)
}

fn quiet() -> tailguard::BreakerBuilder {
    Breaker::builder().ticker(false)
}

/// "the `bulkhead` label (and no `consumer` label) names the consumers
/// whose emitters share it, joined by `+` (...) so that no two bulkheads
/// share a label" (src/registry.rs, `bulkheads`: "A per-core breaker's
/// name in the label: `name@core`"). A shared consumer literally named
/// `a@1` and consumer `a` on core 1, each with a bulkhead of its own, are
/// two bulkheads: they must be two series.
#[test]
fn hostile_bulkhead_label_of_shared_at_name_differs_from_per_core() {
    let r = Registry::new();
    let shared = r.get_or_create("a@1", quiet).unwrap();
    let on_1 = r.get_or_create(("a", 1), quiet).unwrap();
    let e1 = Emitter::builder(shared, DeadLetterQueue::<u32>::with_capacity(4).unwrap())
        .bulkhead(2)
        .unwrap()
        .build()
        .unwrap();
    let e2 = Emitter::builder(on_1, DeadLetterQueue::<u32>::with_capacity(4).unwrap())
        .bulkhead(3)
        .unwrap()
        .build()
        .unwrap();
    r.attach_emitter("a@1", &e1).unwrap();
    r.attach_emitter(("a", 1), &e2).unwrap();
    let text = encode_text(BreakerCollector::new(r)).unwrap();
    let lines = samples(&text);
    let bounds: Vec<&str> = lines
        .iter()
        .filter(|(n, _)| n == "breaker_bulkhead_max_in_flight")
        .map(|(_, l)| label(l, "bulkhead").unwrap())
        .collect();
    assert_eq!(bounds.len(), 2, "{text}");
    assert_ne!(bounds[0], bounds[1], "two bulkheads, one label:\n{text}");
    assert_well_formed(&lines);
}

/// "every family for a per-core breaker carries `core`" (the `Who` label
/// set: "`consumer`, and `core` for a per-core breaker"). A consumer with
/// a shared and a per-core breaker (core `u32::MAX`), an emitter and a
/// queue on both, under a prefix, and a name that needs escaping: every
/// sample of the per-core one has `core="4294967295"` exactly once, none of
/// the shared one has a `core`, and no series comes twice.
#[test]
fn hostile_core_label_once_per_sample_escaped_name_and_prefix() {
    let name = "we\"ird\\na}me,core=\"1\"";
    let r = Registry::new();
    let shared = r.get_or_create(name, quiet).unwrap();
    let per_core = r.get_or_create((name, u32::MAX), quiet).unwrap();
    for (b, key) in [(shared, None), (per_core, Some(u32::MAX))] {
        let e = Emitter::builder(b, DeadLetterQueue::<u32>::with_capacity(4).unwrap())
            .bulkhead(2)
            .unwrap()
            .build()
            .unwrap();
        let _ = e.emit_blocking(1, tailguard::dlq::Priority::Routine, |_, _| Ok::<_, ()>(()));
        match key {
            None => r.attach_emitter(name, &e).unwrap(),
            Some(core) => r.attach_emitter((name, core), &e).unwrap(),
        }
    }
    let c = BreakerCollector::new(r).with_prefix("svc_").unwrap();
    let text = encode_text(c).unwrap();
    let lines = samples(&text);
    assert_well_formed(&lines);
    let mut families: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    for (metric, labels) in &lines {
        assert!(metric.starts_with("svc_"), "{metric}");
        if metric.contains("bulkhead_in_flight") || metric.contains("bulkhead_max_in_flight") {
            continue;
        }
        assert_eq!(label(labels, "consumer"), Some(name), "{metric} {labels:?}");
        let cores: Vec<&str> = labels
            .iter()
            .filter(|(k, _)| k == "core")
            .map(|(_, v)| v.as_str())
            .collect();
        let entry = families.entry(metric).or_default();
        match cores.as_slice() {
            [] => entry.0 += 1,
            ["4294967295"] => entry.1 += 1,
            other => panic!("{metric}: core labels {other:?}"),
        }
    }
    for (metric, (shared, per_core)) in families {
        assert_eq!(shared, per_core, "{metric}: as many samples for each breaker");
    }
}

/// `UnknownConsumer`: "if one is close (a letter or two off, another case,
/// or the same name on another core), the registered one it may have
/// meant". Asked for `("pricing", 3)` where `pricing` is registered on
/// cores 0 and 1: the exact name on another core is the one meant, not
/// another consumer whose name differs in case.
#[test]
fn hostile_nearest_prefers_the_exact_name_on_another_core() {
    let r = Registry::new();
    r.get_or_create(("pricing", 0), quiet).unwrap();
    r.get_or_create(("pricing", 1), quiet).unwrap();
    r.get_or_create("Pricing", quiet).unwrap();
    let q = DeadLetterQueue::<u8>::with_capacity(1).unwrap();
    let err = r.attach_fallback(("pricing", 3), q.producer()).unwrap_err();
    assert_eq!((err.name(), err.core()), ("pricing", Some(3)));
    assert_eq!((err.nearest(), err.nearest_core()), (Some("pricing"), Some(0)), "{err}");
}

/// "its breakers, the one on the core asked for, else the first" and the
/// suggestion is "the registered one it may have meant": never the key
/// asked for itself (it is not registered), and always a registered one.
#[test]
fn hostile_nearest_is_registered_and_never_the_key_asked() {
    let r = Registry::new();
    for key in [("ab", 0), ("ab", 2), ("ac", 1), ("é", 0), ("", 4)] {
        r.get_or_create(key, quiet).unwrap();
    }
    r.get_or_create("ab", quiet).unwrap();
    r.get_or_create("É", quiet).unwrap();
    let q = DeadLetterQueue::<u8>::with_capacity(1).unwrap();
    let asks: [(&str, Option<u32>); 9] = [
        ("ab", Some(1)),
        ("ac", None),
        ("ac", Some(0)),
        ("é", None),
        ("É", Some(0)),
        ("", None),
        ("", Some(3)),
        ("aB", Some(0)),
        ("x", Some(9)),
    ];
    for (name, core) in asks {
        let err = match core {
            None => r.attach_fallback(name, q.producer()),
            Some(c) => r.attach_fallback((name, c), q.producer()),
        }
        .unwrap_err();
        assert_eq!((err.name(), err.core()), (name, core));
        if let Some(n) = err.nearest() {
            assert_ne!((n, err.nearest_core()), (name, core), "suggests itself: {err}");
            let exists = match err.nearest_core() {
                None => r.get(n).is_some(),
                Some(c) => r.get((n, c)).is_some(),
            };
            assert!(exists, "suggests an unregistered breaker: {err}");
        }
        let text = err.to_string();
        assert!(text.starts_with("no consumer named "), "{text}");
        if let Some(c) = core {
            assert!(text.contains(&format!(" on core {c} in this registry")), "{text}");
        }
    }
}

/// `len`: "Number of breakers: one per consumer, or per consumer per
/// core"; `is_empty`: "Whether there are no consumers"; `for_each`: "a
/// consumer with per-core breakers comes once per breaker (its shared one
/// first, then by core)"; `consumers` in the same order.
#[test]
fn hostile_len_is_empty_and_order_after_removals() {
    let r = Registry::new();
    for core in [7, 0, u32::MAX] {
        r.get_or_create(("p", core), quiet).unwrap();
    }
    r.get_or_create("p", quiet).unwrap();
    r.get_or_create("o", quiet).unwrap();
    assert_eq!(r.len(), 5);
    let rows: Vec<(String, Option<u32>)> = r.consumers().iter().map(|c| (c.name.to_string(), c.core)).collect();
    assert_eq!(
        rows,
        [
            ("o".into(), None),
            ("p".into(), None),
            ("p".into(), Some(0)),
            ("p".into(), Some(7)),
            ("p".into(), Some(u32::MAX))
        ]
    );
    let mut seen = Vec::new();
    r.for_each(|n, b| seen.push((n.to_string(), b.clone())));
    assert_eq!(seen.len(), 5);
    assert!(seen[1].1.ptr_eq(&r.get("p").unwrap()));
    assert!(seen[2].1.ptr_eq(&r.get(("p", 0)).unwrap()));
    assert!(r.remove(("p", 1)).is_none());
    assert!(r.remove("p").is_some());
    assert!(r.remove("o").is_some());
    assert_eq!(r.len(), 3);
    for core in [7, 0, u32::MAX] {
        assert!(r.remove(("p", core)).is_some());
    }
    assert_eq!(r.len(), 0);
    assert!(r.is_empty());
    // The name is free again, shared or per core.
    r.get_or_create("p", quiet).unwrap();
    assert_eq!(r.len(), 1);
}

/// `remove`: "The consumer's other breakers (its other cores', its shared
/// one) stay", with a scrape on another thread (`consumers` takes its
/// snapshots "outside the registry lock"): each scrape is a consistent
/// set, every series once, and the untouched breakers in every one.
#[test]
fn hostile_remove_while_scraping_from_another_thread() {
    let r = Registry::new();
    r.get_or_create("keep", quiet).unwrap();
    r.get_or_create(("keep", 1), quiet).unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let scraper = {
        let r = r.clone();
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut scrapes = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) || scrapes < 10 {
                let text = encode_text(BreakerCollector::new(r.clone())).unwrap();
                let lines = samples(&text);
                assert_well_formed(&lines);
                let keeps: BTreeSet<Option<&str>> = lines
                    .iter()
                    .filter(|(n, l)| n == "breaker_state" && label(l, "consumer") == Some("keep"))
                    .map(|(_, l)| label(l, "core"))
                    .collect();
                assert_eq!(keeps, BTreeSet::from([None, Some("1")]));
                scrapes += 1;
            }
        })
    };
    for i in 0..300u32 {
        r.get_or_create(("churn", i % 4), quiet).unwrap();
        r.get_or_create("churn", quiet).unwrap();
        assert!(r.remove(("churn", i % 4)).is_some());
        if i % 3 == 0 {
            assert!(r.remove("churn").is_some());
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    scraper.join().unwrap();
    assert!(r.get("keep").is_some() && r.get(("keep", 1)).is_some());
}
