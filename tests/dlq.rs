//! Behaviour tests of `tailguard::dlq`: ordering, displacement, wraparound,
//! drops, conservation under a multi-threaded stress run.

use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use tailguard::dlq::{DeadLetterQueue, Full, Priority, Pushed, Stats, MAX_CAPACITY};
use tailguard::ConfigErrorKind;

use Priority::{Critical, Idle, Routine};

#[path = "dlq/hostile_accounted.rs"]
mod hostile_accounted;
#[path = "dlq/hostile_consumer_line.rs"]
mod hostile_consumer_line;
#[path = "dlq/hostile_fold.rs"]
mod hostile_fold;
#[path = "dlq/hostile_pop.rs"]
mod hostile_pop;
#[path = "dlq/model.rs"]
mod model;

/// How long a timed race of the `hostile_*` modules runs: the seconds in
/// the environment variable `var`, or `default`.
fn race_budget(var: &str, default: u64) -> Duration {
    Duration::from_secs(std::env::var(var).ok().and_then(|s| s.parse().ok()).unwrap_or(default))
}

/// The next value of a xorshift64 generator whose state is `s` (not 0).
fn xorshift(s: &mut u64) -> u64 {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    *s
}

/// Scales a loop count down under Miri.
const fn scaled(n: usize) -> usize {
    if cfg!(miri) {
        let m = n / 5_000;
        if m < 50 {
            50
        } else {
            m
        }
    } else {
        n
    }
}

fn assert_conserved(s: &Stats) {
    for class in Priority::ALL {
        let c = s.class(class);
        assert_eq!(
            c.pushed,
            c.popped + c.displaced + c.handed_back + c.depth,
            "conservation for {class:?}: {c:?}"
        );
        assert_eq!(c.pushed, c.queued + c.handed_back);
    }
}

#[test]
fn capacity_errors() {
    let e = DeadLetterQueue::<u8>::with_capacity(0).unwrap_err();
    assert_eq!((e.field(), e.kind()), ("capacity", ConfigErrorKind::Zero));
    for cap in [usize::MAX, usize::MAX / 2 + 1, isize::MAX as usize] {
        let e = DeadLetterQueue::<u64>::with_capacity(cap).unwrap_err();
        assert_eq!((e.field(), e.kind()), ("capacity", ConfigErrorKind::TooLarge));
    }
    let e = DeadLetterQueue::<[u8; 4096]>::with_capacity(1 << 52).unwrap_err();
    assert_eq!(e.kind(), ConfigErrorKind::TooLarge);
    let q = DeadLetterQueue::<u8>::with_capacity(1).unwrap();
    assert_eq!((q.capacity(), q.len(), q.is_empty()), (1, 0, true));
}

#[test]
fn fifo_within_class_priority_across_classes() {
    let q = DeadLetterQueue::with_capacity(16).unwrap();
    let order = [
        (0, Idle),
        (1, Routine),
        (2, Critical),
        (3, Idle),
        (4, Routine),
        (5, Critical),
        (6, Idle),
    ];
    for (v, c) in order {
        assert_eq!(q.push(v, c), Ok(Pushed::Queued));
    }
    let d = q.fallback_depth();
    assert_eq!((d.idle, d.routine, d.critical), (3, 2, 2));
    let popped: Vec<_> = std::iter::from_fn(|| q.pop()).collect();
    assert_eq!(
        popped,
        [
            (2, Critical),
            (5, Critical),
            (1, Routine),
            (4, Routine),
            (0, Idle),
            (3, Idle),
            (6, Idle)
        ]
    );
    assert!(q.is_empty());
    assert_conserved(&q.stats());
}

#[test]
fn fifo_per_producer_within_class_threads() {
    const PER: usize = scaled(20_000);
    let q = DeadLetterQueue::with_capacity(8).unwrap();
    let done = Arc::new(AtomicUsize::new(0));
    let handles: Vec<_> = (0..3usize)
        .map(|t| {
            let p = q.producer();
            let done = done.clone();
            thread::spawn(move || {
                // One class, so that nothing is displaced and a full queue
                // hands the item back (then we retry it).
                let class = Routine;
                let mut i = 0;
                while i < PER {
                    match p.push((t, i), class) {
                        Ok(Pushed::Queued) => i += 1,
                        Ok(Pushed::Displaced(..)) => unreachable!("one class: nothing gives way"),
                        Err(Full(_)) => thread::yield_now(),
                    }
                }
                done.fetch_add(1, Ordering::Release);
            })
        })
        .collect();
    let mut next = [0usize; 3];
    loop {
        match q.pop() {
            Some(((t, i), c)) => {
                assert_eq!(c, Routine);
                assert_eq!(i, next[t], "producer {t} out of order");
                next[t] += 1;
            }
            None => {
                if done.load(Ordering::Acquire) == 3 && q.is_empty() {
                    break;
                }
                thread::yield_now();
            }
        }
    }
    for h in handles {
        h.join().unwrap();
    }
    assert_eq!(next, [PER; 3]);
    assert_conserved(&q.stats());
}

#[test]
fn displacement_order() {
    let q = DeadLetterQueue::with_capacity(4).unwrap();
    for (v, c) in [("i1", Idle), ("r1", Routine), ("i2", Idle), ("r2", Routine)] {
        assert_eq!(q.push(v, c), Ok(Pushed::Queued));
    }
    // Full. A Routine item displaces the oldest Idle; an Idle item nothing.
    assert_eq!(q.push("r3", Routine), Ok(Pushed::Displaced("i1", Idle)));
    assert_eq!(q.push("i3", Idle), Err(Full("i3")));
    // Critical items: the oldest Idle first, then the oldest Routine.
    assert_eq!(q.push("c1", Critical), Ok(Pushed::Displaced("i2", Idle)));
    assert_eq!(q.push("c2", Critical), Ok(Pushed::Displaced("r1", Routine)));
    // A Routine item never displaces its own class.
    assert_eq!(q.push("r4", Routine), Err(Full("r4")));
    assert_eq!(q.push("c3", Critical), Ok(Pushed::Displaced("r2", Routine)));
    assert_eq!(q.push("c4", Critical), Ok(Pushed::Displaced("r3", Routine)));
    assert_eq!(q.push("c5", Critical), Err(Full("c5")));
    assert_eq!(q.len(), 4);
    let popped: Vec<_> = std::iter::from_fn(|| q.pop()).map(|(v, _)| v).collect();
    assert_eq!(popped, ["c1", "c2", "c3", "c4"]);
    let s = q.stats();
    assert_eq!((s.idle.pushed, s.idle.displaced, s.idle.handed_back), (3, 2, 1));
    assert_eq!(
        (s.routine.pushed, s.routine.displaced, s.routine.handed_back),
        (4, 3, 1)
    );
    assert_eq!(
        (s.critical.pushed, s.critical.popped, s.critical.handed_back),
        (5, 4, 1)
    );
    assert_eq!(s.critical.displaced, 0);
    assert_conserved(&s);
}

#[test]
fn full_of_critical_hands_back_and_evicts_nothing() {
    for cap in 1..=4 {
        let q = DeadLetterQueue::with_capacity(cap).unwrap();
        for i in 0..cap {
            assert_eq!(q.push(i, Critical), Ok(Pushed::Queued));
        }
        for class in Priority::ALL {
            let err = q.push(99, class).unwrap_err();
            assert_eq!(format!("{err:?}"), "Full(..)");
            assert!(!err.to_string().is_empty());
            assert_eq!(err.into_inner(), 99);
        }
        assert_eq!(q.fallback_depth().critical, cap);
        for i in 0..cap {
            assert_eq!(q.pop(), Some((i, Critical)));
        }
        assert_eq!(q.pop(), None);
        let s = q.stats();
        assert_eq!(s.critical.displaced, 0);
        assert_eq!(
            (s.idle.handed_back, s.routine.handed_back, s.critical.handed_back),
            (1, 1, 1)
        );
        assert_conserved(&s);
    }
}

/// An item that counts its drops in a shared table.
struct Counted {
    id: usize,
    drops: Arc<Vec<AtomicUsize>>,
    panic_on_drop: bool,
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.drops[self.id].fetch_add(1, Ordering::SeqCst);
        if self.panic_on_drop {
            panic!("item {} panics in drop", self.id);
        }
    }
}

#[test]
fn every_item_dropped_exactly_once() {
    const N: usize = 64;
    let drops: Arc<Vec<AtomicUsize>> = Arc::new((0..N).map(|_| AtomicUsize::new(0)).collect());
    let item = |id| Counted {
        id,
        drops: drops.clone(),
        panic_on_drop: false,
    };
    let q = DeadLetterQueue::with_capacity(4).unwrap();
    let mut id = 0;
    let mut kept = Vec::new();
    for round in 0..10 {
        for k in 0..5 {
            let class = Priority::ALL[(round + k) % 3];
            match q.push(item(id), class) {
                Ok(Pushed::Queued) => {}
                Ok(Pushed::Displaced(old, _)) => drop(old),
                Err(full) => drop(full.into_inner()),
            }
            id += 1;
        }
        if round % 2 == 0 {
            let _ = q.pop();
        }
        if round == 5 {
            // Popped items may be kept by the caller for a while.
            kept.extend(q.pop());
        }
    }
    assert!(!q.is_empty(), "some items must be left in the queue at drop");
    let producer = q.producer();
    drop(q);
    // The producer keeps the storage alive; nothing dropped twice yet.
    assert!(drops.iter().all(|d| d.load(Ordering::SeqCst) <= 1));
    drop(producer);
    drop(kept);
    for (i, d) in drops.iter().enumerate().take(id) {
        assert_eq!(d.load(Ordering::SeqCst), 1, "item {i}");
    }
}

#[test]
fn panicking_drop_neither_leaks_nor_double_drops() {
    for panicker_class in Priority::ALL {
        let drops: Arc<Vec<AtomicUsize>> = Arc::new((0..9).map(|_| AtomicUsize::new(0)).collect());
        let q = DeadLetterQueue::with_capacity(9).unwrap();
        for id in 0..9 {
            let class = Priority::ALL[id % 3];
            let it = Counted {
                id,
                drops: drops.clone(),
                panic_on_drop: class == panicker_class && id / 3 == 1,
            };
            assert!(matches!(q.push(it, class), Ok(Pushed::Queued)));
        }
        let r = catch_unwind(AssertUnwindSafe(|| drop(q)));
        assert!(r.is_err(), "the item's panic propagates");
        for (i, d) in drops.iter().enumerate() {
            assert_eq!(
                d.load(Ordering::SeqCst),
                1,
                "item {i} (panicker class {panicker_class:?})"
            );
        }
    }
}

#[test]
fn drain_and_reentrant_push() {
    let q = DeadLetterQueue::with_capacity(4).unwrap();
    for i in 0..4 {
        let _ = q.push(i, Routine);
    }
    let mut seen = Vec::new();
    // Re-queue the even items as Idle while draining: they come back after
    // the Routine items.
    let n = q.drain(usize::MAX, |v, c| {
        seen.push((v, c));
        if c == Routine && v % 2 == 0 {
            assert_eq!(q.push(v, Idle), Ok(Pushed::Queued));
        }
    });
    assert_eq!(n, 6);
    assert_eq!(
        seen,
        [
            (0, Routine),
            (1, Routine),
            (2, Routine),
            (3, Routine),
            (0, Idle),
            (2, Idle)
        ]
    );
    assert_eq!(q.drain(10, |_, _| unreachable!()), 0);
}

/// Four producers (one per class plus a mixed one) and the consumer race
/// through a small queue; conservation holds exactly and each producer's
/// items of a class arrive in order.
///
/// Under Miri it is cut down to a few dozen operations per thread.
#[test]
fn stress_four_producers_one_consumer() {
    let run_for = if cfg!(debug_assertions) {
        Duration::from_millis(700)
    } else {
        Duration::from_millis(2500)
    };
    const PRODUCERS: usize = 4;
    let q = DeadLetterQueue::with_capacity(3).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    // Per producer: (pushed, displaced-by-class, handed back) by class, as
    // seen by the producer.
    let tallies = Arc::new(Mutex::new(Vec::new()));
    let handles: Vec<_> = (0..PRODUCERS)
        .map(|t| {
            let p = q.producer();
            let stop = stop.clone();
            let tallies = tallies.clone();
            thread::spawn(move || {
                let mut seq = [0u64; 3];
                let mut pushed = [0u64; 3];
                let mut displaced = [0u64; 3];
                let mut handed_back = [0u64; 3];
                let mut k = 0usize;
                // Under Miri, a few dozen pushes per producer.
                let limit = if cfg!(miri) { 40 } else { usize::MAX };
                while !stop.load(Ordering::Relaxed) && k < limit {
                    k += 1;
                    let class = if t < 3 { Priority::ALL[t] } else { Priority::ALL[k % 3] };
                    let c = class as usize;
                    pushed[c] += 1;
                    match p.push((t, c, seq[c]), class) {
                        Ok(Pushed::Queued) => {}
                        Ok(Pushed::Displaced((_, oc, _), old_class)) => {
                            assert_eq!(oc, old_class as usize);
                            assert!(old_class < class, "displaced its own or a higher class");
                            assert_ne!(old_class, Critical);
                            displaced[oc] += 1;
                        }
                        Err(Full((_, fc, _))) => {
                            assert_eq!(fc, c);
                            handed_back[c] += 1;
                        }
                    }
                    seq[c] += 1;
                }
                tallies.lock().unwrap().push((pushed, displaced, handed_back));
            })
        })
        .collect();

    let deadline = Instant::now() + run_for;
    let mut last: HashMap<(usize, usize), u64> = HashMap::new();
    let mut popped = [0u64; 3];
    let mut check = |((t, c, s), class): ((usize, usize, u64), Priority)| {
        assert_eq!(c, class as usize);
        if let Some(prev) = last.insert((t, c), s) {
            assert!(s > prev, "producer {t} class {c}: {s} after {prev}");
        }
        popped[c] += 1;
    };
    // Past the deadline, on until every path was taken (a loaded machine
    // can keep the consumer off its core while the queue stays full of
    // `Critical` items, so that no lower item is ever displaced), for at
    // most four more deadlines.
    let hard_deadline = deadline + 4 * run_for;
    let covered = |q: &DeadLetterQueue<(usize, usize, u64)>| {
        let s = q.stats();
        s.idle.displaced > 0 && s.routine.displaced > 0
    };
    let mut i = 0u64;
    while if cfg!(miri) {
        i < 400
    } else {
        let now = Instant::now();
        now < deadline || (now < hard_deadline && (i % 1024 != 0 || !covered(&q)))
    } {
        i += 1;
        if let Some(x) = q.pop() {
            check(x);
        }
        if i % 1024 == 0 {
            assert!(q.len() <= 3);
            let d = q.fallback_depth();
            assert!(d.total() <= 3 + PRODUCERS, "{d:?}");
        }
    }
    stop.store(true, Ordering::Relaxed);
    for h in handles {
        h.join().unwrap();
    }
    let s = q.stats();
    assert_conserved(&s);
    let len_at_stop = q.len() as u64;
    assert_eq!(
        len_at_stop,
        [s.idle.depth, s.routine.depth, s.critical.depth].iter().sum::<u64>()
    );
    while let Some(x) = q.pop() {
        check(x);
    }
    let s2 = q.stats();
    assert_conserved(&s2);
    let tallies = tallies.lock().unwrap();
    for class in Priority::ALL {
        let c = class as usize;
        let st = s2.class(class);
        let pushed: u64 = tallies.iter().map(|x| x.0[c]).sum();
        let displaced: u64 = tallies.iter().map(|x| x.1[c]).sum();
        let handed_back: u64 = tallies.iter().map(|x| x.2[c]).sum();
        assert_eq!(st.pushed, pushed, "{class:?}");
        assert_eq!(st.displaced, displaced, "{class:?}");
        assert_eq!(st.handed_back, handed_back, "{class:?}");
        assert_eq!(st.popped, popped[c], "{class:?}");
        assert_eq!(st.depth, 0);
        // Exactly: pushed = popped + displaced + handed_back (+ len 0).
        assert_eq!(pushed, popped[c] + displaced + handed_back, "{class:?}");
    }
    assert_eq!(s2.critical.displaced, 0);
    // The run must actually have exercised every path.
    if cfg!(miri) {
        return;
    }
    assert!(s2.idle.displaced > 0 && s2.routine.displaced > 0, "{s2:?}");
    assert!(s2.critical.handed_back > 0 || s2.routine.handed_back > 0, "{s2:?}");
}

/// Issue 8, finding 4: capacity 1, an `Idle` producer, the consumer and a
/// `Critical` producer that pushes only when none of its items is left in
/// the queue. Every such push must succeed: a `Critical` push is refused only
/// when every slot holds a `Critical` item. (Before the fix, an item in
/// transit, popped but not yet counted out, or admitted but not yet in its
/// ring, made the queue look full with nothing to displace.)
#[test]
#[cfg_attr(miri, ignore = "threads spinning for a second of real time")]
fn f04_a_critical_push_is_refused_only_when_every_slot_holds_a_critical_item() {
    let dlq: DeadLetterQueue<u64> = DeadLetterQueue::with_capacity(1).unwrap();
    let idle = dlq.producer();
    let critical = dlq.producer();
    let stop = AtomicBool::new(false);
    let critical_popped = AtomicUsize::new(0);
    let refused = AtomicUsize::new(0);
    let deadline = Instant::now() + Duration::from_millis(scaled(1500) as u64);
    let (stop, critical_popped, refused) = (&stop, &critical_popped, &refused);
    thread::scope(|s| {
        s.spawn(move || {
            let mut i = 0;
            while !stop.load(Ordering::Relaxed) {
                let _ = idle.push(i, Idle);
                i += 1;
            }
        });
        s.spawn(move || {
            let mut queued = 0;
            while Instant::now() < deadline {
                while critical_popped.load(Ordering::Acquire) < queued {
                    std::hint::spin_loop();
                }
                match critical.push(queued as u64, Critical) {
                    Ok(_) => queued += 1,
                    Err(Full(_)) => {
                        refused.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            stop.store(true, Ordering::Relaxed);
        });
        s.spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                if let Some((_, Critical)) = dlq.pop() {
                    critical_popped.fetch_add(1, Ordering::Release);
                }
            }
            while let Some((_, class)) = dlq.pop() {
                if class == Critical {
                    critical_popped.fetch_add(1, Ordering::Release);
                }
            }
        });
    });
    assert_eq!(
        refused.load(Ordering::Relaxed),
        0,
        "Critical pushes refused while no Critical item was queued"
    );
}

/// From issue 10's adversarial inputs.
#[test]
#[cfg_attr(miri, ignore = "2^21 items: hours under Miri (it never ran there)")]
fn a_queue_at_its_largest_capacity_fills_and_empties() {
    let q = DeadLetterQueue::with_capacity(MAX_CAPACITY).unwrap();
    for i in 0..MAX_CAPACITY as u32 {
        assert!(matches!(q.push(i, Priority::Routine), Ok(Pushed::Queued)));
    }
    assert_eq!(q.len(), MAX_CAPACITY);
    assert!(q.push(0, Priority::Routine).is_err());
    assert!(
        q.push(0, Priority::Critical).is_ok(),
        "a Critical item displaces a Routine one"
    );
    assert_eq!(q.fallback_depth().critical, 1);
    assert_eq!(q.pop(), Some((0, Priority::Critical)));
    assert_eq!(q.pop(), Some((1, Priority::Routine)), "item 0 gave way");
}
