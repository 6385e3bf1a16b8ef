//! Hostile review of 6658636 (`Inner::pop` looks at the ring heads before
//! the occupancy word): real threads. `hp_new_*` failed on 6658636 (within
//! 0.15–1.1 s) and passed on its parent; fixed since (`Lower::Higher` in
//! `src/dlq/queue.rs`). The rest held.
//!
//! Run: `cargo test --release --test dlq -- hostile_pop::` (each `hp_new_*`
//! runs for `HOSTILE_POP_SECS`, 5 by default).

use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use tailguard::dlq::{DeadLetterQueue, Full, Priority, Pushed};
use Priority::{Critical, Idle, Routine};

use super::assert_conserved;

/// How many times each item (producer, class, sequence) was dropped.
type Drops = Arc<Mutex<HashMap<(usize, usize, u64), u32>>>;

/// One producer pushes, round `k`, a `high` item `k` and then a `low` item
/// `k`; the consumer pops in a tight loop. Capacity 1024 and the producer
/// keeps the queue under half full, so nothing is displaced or refused.
/// The consumer is the only remover of either class, so when it pops low
/// item `k`, high item `k` (pushed, and returned, before low item `k` was
/// pushed) must have been popped already. Returns the first violation
/// (`(low k, high items popped by then)`) within `budget`, and how many low
/// items were popped.
fn lower_item_overtakes_an_earlier_higher_one(
    high: Priority,
    low: Priority,
    budget: Duration,
) -> (Option<(u64, u64)>, u64) {
    let q: DeadLetterQueue<(Priority, u64)> = DeadLetterQueue::with_capacity(1024).unwrap();
    let p = q.producer();
    let stop = AtomicBool::new(false);
    let deadline = Instant::now() + budget;
    thread::scope(|s| {
        let stop = &stop;
        s.spawn(move || {
            let mut k = 0u64;
            while !stop.load(Ordering::Relaxed) {
                if p.len() > 512 {
                    std::hint::spin_loop();
                    continue;
                }
                assert_eq!(p.push((high, k), high), Ok(Pushed::Queued));
                assert_eq!(p.push((low, k), low), Ok(Pushed::Queued));
                k += 1;
            }
        });
        let mut high_popped = 0u64;
        let mut low_popped = 0u64;
        let mut found = None;
        let mut i = 0u32;
        loop {
            i = i.wrapping_add(1);
            if i % 4096 == 0 && Instant::now() > deadline {
                break;
            }
            match q.pop() {
                Some(((c, k), class)) => {
                    assert_eq!(c, class);
                    if class == high {
                        assert_eq!(k, high_popped, "FIFO of the high class");
                        high_popped += 1;
                    } else {
                        assert_eq!(k, low_popped, "FIFO of the low class");
                        low_popped += 1;
                        if high_popped <= k {
                            found = Some((k, high_popped));
                            break;
                        }
                    }
                }
                None => std::hint::spin_loop(),
            }
        }
        stop.store(true, Ordering::Relaxed);
        (found, low_popped)
    })
}

fn budget() -> Duration {
    super::race_budget("HOSTILE_POP_SECS", 5)
}

/// NEW in 6658636 (loom: `hp_new_pop_returns_an_idle_item_pushed_after_a_returned_critical_push`).
/// The pop passes over the `Critical` head before the producer writes it,
/// the producer then pushes the `Critical` item and the `Idle` item, and
/// the pop takes the `Idle` item while the `Critical` item pushed before it
/// is queued. Not seen on the parent in the same budget.
#[test]
#[cfg_attr(miri, ignore = "seconds of racing threads; loom covers it")]
fn hp_new_idle_popped_while_an_earlier_critical_push_is_queued() {
    let (found, lows) = lower_item_overtakes_an_earlier_higher_one(Critical, Idle, budget());
    assert!(
        found.is_none(),
        "Idle item {} popped when {} Critical items had been popped: Critical item {} (pushed \
         and returned before it) was still queued ({lows} Idle pops)",
        found.unwrap().0,
        found.unwrap().1,
        found.unwrap().0
    );
}

/// NEW in 6658636, `Critical` then `Routine`.
#[test]
#[cfg_attr(miri, ignore = "seconds of racing threads; loom covers it")]
fn hp_new_routine_popped_while_an_earlier_critical_push_is_queued() {
    let (found, lows) = lower_item_overtakes_an_earlier_higher_one(Critical, Routine, budget());
    assert!(found.is_none(), "{found:?} ({lows} Routine pops)");
}

/// NEW in 6658636, `Routine` then `Idle`.
#[test]
#[cfg_attr(miri, ignore = "seconds of racing threads; loom covers it")]
fn hp_new_idle_popped_while_an_earlier_routine_push_is_queued() {
    let (found, lows) = lower_item_overtakes_an_earlier_higher_one(Routine, Idle, budget());
    assert!(found.is_none(), "{found:?} ({lows} Idle pops)");
}

// ---------------------------------------------------------------------
// Attacks that held.
// ---------------------------------------------------------------------

/// An item: producer, class, per-(producer, class) sequence; counts its
/// drops, and panics in `drop` if asked.
struct Item {
    who: usize,
    class: Priority,
    seq: u64,
    drops: Drops,
    panic_on_drop: bool,
}

impl Drop for Item {
    fn drop(&mut self) {
        *self
            .drops
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry((self.who, self.class as usize, self.seq))
            .or_insert(0) += 1;
        if self.panic_on_drop && !thread::panicking() {
            panic!("item panics in drop");
        }
    }
}

/// Producers of every class (one per class and `mixed` more of random
/// classes) race a consumer that pops in a tight loop (also on an empty
/// queue) on a small queue: every item is popped, displaced or refused
/// once, or left and dropped once at the end; per producer and class in
/// order; a `Critical` item is never displaced; an item displaces only a
/// lower class; the queue never reports more than its capacity; the
/// counters agree with what the threads saw. The remaining items at the
/// end are dropped with the queue, some of them panicking in `drop`.
fn stress(capacity: usize, mixed: usize, run_for: Duration, seed: u64) {
    let q: DeadLetterQueue<Item> = DeadLetterQueue::with_capacity(capacity).unwrap();
    let drops: Drops = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let producers = 3 + mixed;
    let made: Vec<Arc<[AtomicU64; 3]>> = (0..producers).map(|_| Arc::new(Default::default())).collect();
    // Per producer and class: (displaced seqs handed back, refused).
    let handles: Vec<_> = (0..producers)
        .map(|who| {
            let p = q.producer();
            let stop = stop.clone();
            let made = made[who].clone();
            let drops = drops.clone();
            thread::spawn(move || {
                let mut rng = seed ^ (who as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
                let mut seq = [0u64; 3];
                let mut back: Vec<(usize, usize, u64)> = Vec::new();
                let mut refused = [0u64; 3];
                let mut displaced = [0u64; 3];
                while !stop.load(Ordering::Relaxed) {
                    let class = if who < 3 {
                        Priority::ALL[who]
                    } else {
                        Priority::ALL[(super::xorshift(&mut rng) % 3) as usize]
                    };
                    let c = class as usize;
                    let item = Item {
                        who,
                        class,
                        seq: seq[c],
                        drops: drops.clone(),
                        panic_on_drop: false,
                    };
                    seq[c] += 1;
                    made[c].store(seq[c], Ordering::Relaxed);
                    match p.push(item, class) {
                        Ok(Pushed::Queued) => {}
                        Ok(Pushed::Displaced(old, old_class)) => {
                            assert_eq!(old.class, old_class);
                            assert!(old_class < class, "{class:?} displaced {old_class:?}");
                            assert_ne!(old_class, Critical);
                            displaced[old_class as usize] += 1;
                            back.push((old.who, old_class as usize, old.seq));
                        }
                        Err(Full(item)) => {
                            assert_eq!((item.who, item.class), (who, class));
                            refused[c] += 1;
                            back.push((who, c, item.seq));
                        }
                    }
                    if super::xorshift(&mut rng) % 8 == 0 {
                        thread::yield_now();
                    }
                }
                (back, refused, displaced)
            })
        })
        .collect();

    let deadline = Instant::now() + run_for;
    let mut popped: Vec<(usize, usize, u64)> = Vec::new();
    let mut last: HashMap<(usize, usize), u64> = HashMap::new();
    let mut take = |item: Item, class: Priority, popped: &mut Vec<_>| {
        assert_eq!(item.class, class);
        let key = (item.who, class as usize);
        if let Some(&prev) = last.get(&key) {
            assert!(
                item.seq > prev,
                "producer {} {class:?}: {} after {prev}",
                item.who,
                item.seq
            );
        }
        last.insert(key, item.seq);
        popped.push((item.who, class as usize, item.seq));
    };
    while Instant::now() < deadline {
        for _ in 0..256 {
            if let Some((item, class)) = q.pop() {
                take(item, class, &mut popped);
            }
        }
        assert!(q.len() <= capacity, "len {} above capacity {capacity}", q.len());
        let d = q.fallback_depth();
        assert!(d.total() <= capacity, "{d:?}");
    }
    stop.store(true, Ordering::Relaxed);
    let mut back = Vec::new();
    let mut refused = [0u64; 3];
    let mut displaced = [0u64; 3];
    for h in handles {
        let (b, r, d) = h.join().unwrap();
        back.extend(b);
        for c in 0..3 {
            refused[c] += r[c];
            displaced[c] += d[c];
        }
    }
    let s = q.stats();
    assert_conserved(&s);
    assert_eq!(s.critical.displaced, 0);
    // The run took the paths under attack.
    assert!(s.idle.displaced > 0 && s.routine.displaced > 0, "{s:?}");
    assert!(s.critical.popped > 0, "{s:?}");
    for class in Priority::ALL {
        let c = class as usize;
        let st = s.class(class);
        let pushed: u64 = made.iter().map(|m| m[c].load(Ordering::Relaxed)).sum();
        assert_eq!(st.pushed, pushed, "{class:?}");
        assert_eq!(st.handed_back, refused[c], "{class:?}");
        assert_eq!(st.displaced, displaced[c], "{class:?}");
        let popped_c = popped.iter().filter(|x| x.1 == c).count() as u64;
        assert_eq!(st.popped, popped_c, "{class:?}");
    }
    // Pop half of what is left; leave the rest to the queue's drop, one of
    // them panicking.
    let left = q.len();
    for _ in 0..left / 2 {
        let (item, class) = q.pop().expect("a quiet queue pops what it counts");
        take(item, class, &mut popped);
    }
    let remaining = q.len();
    let producer = q.producer();
    // Swap a remaining item for a panicking one: pop it, push it back marked.
    let mut panicker = None;
    if let Some((mut item, class)) = q.pop() {
        item.panic_on_drop = true;
        let key = (item.who, class as usize, item.seq);
        assert!(matches!(q.push(item, class), Ok(Pushed::Queued)));
        panicker = Some(key);
    }
    // What is left now.
    let s2 = q.stats();
    assert_eq!(remaining as u64, s2.idle.depth + s2.routine.depth + s2.critical.depth);
    drop(q);
    let r = catch_unwind(AssertUnwindSafe(|| drop(producer)));
    assert_eq!(
        r.is_err(),
        panicker.is_some(),
        "the item's panic propagates from the last drop"
    );
    {
        // Every item made was dropped once: popped (dropped after `take`),
        // handed back (dropped by its producer), or left (by the queue).
        let drops = drops.lock().unwrap_or_else(|e| e.into_inner());
        let mut n = 0u64;
        for (who, m) in made.iter().enumerate() {
            for c in 0..3 {
                for seq in 0..m[c].load(Ordering::Relaxed) {
                    let d = drops.get(&(who, c, seq)).copied().unwrap_or(0);
                    assert_eq!(d, 1, "item {:?} dropped {d} times", (who, c, seq));
                    n += 1;
                }
            }
        }
        assert!(n > 0);
    }
    // Exactly once, by id.
    let mut seen: Vec<_> = popped.iter().copied().chain(back.iter().copied()).collect();
    let total_seen = seen.len();
    seen.sort_unstable();
    seen.dedup();
    assert_eq!(seen.len(), total_seen, "an item popped or handed back twice");
}

#[test]
#[cfg_attr(miri, ignore = "seconds of racing threads; loom covers it")]
fn hp_stress_capacity_1() {
    stress(1, 2, Duration::from_millis(1500), 1);
}

#[test]
#[cfg_attr(miri, ignore = "seconds of racing threads; loom covers it")]
fn hp_stress_capacity_2() {
    stress(2, 2, Duration::from_millis(1500), 2);
}

#[test]
#[cfg_attr(miri, ignore = "seconds of racing threads; loom covers it")]
fn hp_stress_capacity_3() {
    stress(3, 3, Duration::from_millis(1500), 3);
}

#[test]
#[cfg_attr(miri, ignore = "seconds of racing threads; loom covers it")]
fn hp_stress_capacity_5() {
    stress(5, 1, Duration::from_millis(1500), 5);
}

/// Capacity 1, a `Routine` producer and a `Critical` producer that
/// displaces it (the last counted `Routine` item, its head written), and
/// the consumer popping in a tight loop: the pop that sees a written
/// `Routine` head whose count a displacer has claimed must move on, never
/// take an item twice nor hang.
#[test]
#[cfg_attr(miri, ignore = "seconds of racing threads; loom covers it")]
fn hp_pop_racing_the_displacement_of_the_last_routine_item() {
    let q: DeadLetterQueue<(Priority, u64)> = DeadLetterQueue::with_capacity(1).unwrap();
    let stop = AtomicBool::new(false);
    let critical_popped = AtomicUsize::new(0);
    let deadline = Instant::now() + Duration::from_millis(1500);
    let (pr, pc) = (q.producer(), q.producer());
    let (mut routine_back, mut critical_refused) = (Vec::new(), 0u64);
    let mut popped = Vec::new();
    thread::scope(|s| {
        let (stop, critical_popped) = (&stop, &critical_popped);
        let r = s.spawn(move || {
            let mut k = 0;
            let mut back = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                if let Err(Full(x)) = pr.push((Routine, k), Routine) {
                    back.push(x.1);
                }
                k += 1;
            }
            (k, back)
        });
        let c = s.spawn(move || {
            let mut k = 0;
            let mut displaced = Vec::new();
            let mut refused = 0;
            while Instant::now() < deadline {
                // Only when none of its items is left: then a Critical push
                // is never refused.
                while critical_popped.load(Ordering::Acquire) < k as usize {
                    std::hint::spin_loop();
                }
                match pc.push((Critical, k), Critical) {
                    Ok(Pushed::Displaced(old, Routine)) => displaced.push(old.1),
                    Ok(Pushed::Displaced(_, other)) => panic!("displaced {other:?}"),
                    Ok(Pushed::Queued) => {}
                    Err(Full(_)) => {
                        refused += 1;
                        continue;
                    }
                }
                k += 1;
            }
            stop.store(true, Ordering::Relaxed);
            (k, displaced, refused)
        });
        while !stop.load(Ordering::Relaxed) {
            if let Some(x) = q.pop() {
                if x.1 == Critical {
                    critical_popped.fetch_add(1, Ordering::Release);
                }
                popped.push(x.0);
            }
        }
        let (rk, rback) = r.join().unwrap();
        let (ck, displaced, refused) = c.join().unwrap();
        routine_back = rback;
        critical_refused = refused;
        while let Some(x) = q.pop() {
            popped.push(x.0);
        }
        let mut routine: Vec<u64> = popped.iter().filter(|x| x.0 == Routine).map(|x| x.1).collect();
        let critical: Vec<u64> = popped.iter().filter(|x| x.0 == Critical).map(|x| x.1).collect();
        assert_eq!(
            critical,
            (0..ck).collect::<Vec<_>>(),
            "every Critical item popped once, in order"
        );
        assert!(routine.windows(2).all(|w| w[0] < w[1]), "Routine FIFO");
        routine.extend(displaced);
        routine.extend(routine_back.iter().copied());
        routine.sort_unstable();
        assert_eq!(routine, (0..rk).collect::<Vec<_>>(), "every Routine item once");
    });
    assert_eq!(
        critical_refused, 0,
        "a Critical push refused with no Critical item queued"
    );
    assert_conserved(&q.stats());
}
