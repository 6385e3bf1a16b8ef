//! Loom models of `tailguard::dlq`.
//!
//! Run with
//! `RUSTFLAGS="--cfg tailguard_loom" LOOM_MAX_PREEMPTIONS=2 cargo test --release --test loom -- dlq::`.
//!
//! Each model runs two or three producers and the consumer (the model's main
//! thread) on a queue of capacity 1 to 3 and checks that:
//! - every item is popped, displaced (handed back), refused (handed back) or
//!   left in the queue, exactly once, and the counters agree;
//! - items of one producer and class are popped in order;
//! - a `Critical` item is never displaced, and an item never displaces its
//!   own or a higher class;
//! - nothing leaks (`loom::alloc::Track` on every item, loom's `Arc`).
//!
//! This harness gives loom no access of the producers' that races the
//! consumer's first look, so loom explores pops before the pushes they race
//! and not pushes that finish first; `dlq_hostile_pop.rs` explains why and
//! re-runs these scenarios with a `kick` that makes it explore both.
//!
//! Loom's `UnsafeCell` tracking fails a model if the consumer (or a
//! displacing producer) ever reads a slot that a producer has claimed but not
//! yet written, or if two threads touch a slot at once.
#![cfg(tailguard_loom)]

use loom::alloc::Track;
use loom::thread;

use tailguard::dlq::{DeadLetterQueue, Full, Priority, Pushed};
use Priority::{Critical, Idle, Routine};

/// An item id: producer `p` (0 for the prefill), sequence `s`.
type Id = (usize, usize);

struct Scenario {
    capacity: usize,
    start: usize,
    prefill: Vec<Priority>,
    producers: Vec<Vec<Priority>>,
    pops: usize,
}

fn check(s: &Scenario) {
    let q = DeadLetterQueue::with_capacity_starting_at(s.capacity, s.start).unwrap();
    let mut all: Vec<Id> = Vec::new();
    for (k, &class) in s.prefill.iter().enumerate() {
        let id = (0, k);
        all.push(id);
        assert!(matches!(q.push(Track::new((id, class)), class), Ok(Pushed::Queued)));
    }
    let handles: Vec<_> = s
        .producers
        .iter()
        .enumerate()
        .map(|(p, classes)| {
            let producer = q.producer();
            let classes = classes.clone();
            for k in 0..classes.len() {
                all.push((p + 1, k));
            }
            thread::spawn(move || {
                let mut back: Vec<Id> = Vec::new();
                for (k, class) in classes.into_iter().enumerate() {
                    let id = (p + 1, k);
                    match producer.push(Track::new((id, class)), class) {
                        Ok(Pushed::Queued) => {}
                        Ok(Pushed::Displaced(old, old_class)) => {
                            let (old_id, c) = *old.get_ref();
                            assert_eq!(c, old_class);
                            assert!(old_class < class, "{class:?} displaced {old_class:?}");
                            assert_ne!(old_class, Critical, "a Critical item was displaced");
                            back.push(old_id);
                        }
                        Err(Full(item)) => {
                            let (item_id, _) = *item.get_ref();
                            assert_eq!(item_id, id);
                            back.push(item_id);
                        }
                    }
                }
                back
            })
        })
        .collect();

    let mut popped: Vec<(Id, Priority)> = Vec::new();
    for _ in 0..s.pops {
        if let Some((item, class)) = q.pop() {
            let (id, c) = *item.get_ref();
            assert_eq!(c, class);
            popped.push((id, class));
        }
    }
    let mut back: Vec<Id> = Vec::new();
    for h in handles {
        back.extend(h.join().unwrap());
    }
    let stats = q.stats();
    let len = q.len();
    assert!(len <= s.capacity);
    let mut left = 0;
    while let Some((item, class)) = q.pop() {
        let (id, c) = *item.get_ref();
        assert_eq!(c, class);
        popped.push((id, class));
        left += 1;
    }
    assert_eq!(left, len);

    // Exactly once.
    let mut seen: Vec<Id> = popped.iter().map(|&(id, _)| id).chain(back.iter().copied()).collect();
    seen.sort_unstable();
    all.sort_unstable();
    assert_eq!(seen, all, "every item delivered or handed back exactly once");

    // FIFO per producer within a class.
    for (i, &(a, ca)) in popped.iter().enumerate() {
        for &(b, cb) in &popped[i + 1..] {
            if a.0 == b.0 && ca == cb {
                assert!(a.1 < b.1, "{a:?} popped before {b:?}, class {ca:?}");
            }
        }
    }

    // The counters agree with what the threads saw.
    assert_eq!(stats.critical.displaced, 0);
    let mut total_pushed = 0;
    for class in Priority::ALL {
        let c = stats.class(class);
        assert_eq!(
            c.pushed,
            c.popped + c.displaced + c.handed_back + c.depth,
            "{class:?}: {c:?}"
        );
        total_pushed += c.pushed;
    }
    assert_eq!(total_pushed as usize, all.len());
    let depth: u64 = Priority::ALL.iter().map(|&c| stats.class(c).depth).sum();
    assert_eq!(depth as usize, len);
}

fn model(s: Scenario) {
    loom::model(move || check(&s));
}

fn model_bounded(preemptions: usize, s: Scenario) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(b.preemption_bound.map_or(preemptions, |p| p.min(preemptions)));
    b.check(move || check(&s));
}

/// Capacity 1: an Idle and a Critical producer race the consumer; the
/// Critical item may displace the Idle one, never the reverse.
#[test]
fn cap1_idle_vs_critical() {
    model(Scenario {
        capacity: 1,
        start: 0,
        prefill: vec![],
        producers: vec![vec![Idle], vec![Critical]],
        pops: 1,
    });
}

/// Capacity 1, full of an Idle item: a Routine producer displaces it while
/// the consumer pops; exactly one of them gets it.
#[test]
fn cap1_displace_races_pop() {
    model(Scenario {
        capacity: 1,
        start: 0,
        prefill: vec![Idle],
        producers: vec![vec![Routine], vec![Critical]],
        pops: 1,
    });
}

/// Capacity 1 full of a Critical item: both producers are handed back or
/// wait for the consumer's pop; the Critical item is never displaced.
#[test]
fn cap1_critical_never_displaced() {
    model(Scenario {
        capacity: 1,
        start: 0,
        prefill: vec![Critical],
        producers: vec![vec![Critical], vec![Routine]],
        pops: 1,
    });
}

/// Capacity 2, positions starting just below `usize::MAX`: the rings and
/// the admission counter wrap during the model.
#[test]
fn cap2_wraparound() {
    model(Scenario {
        capacity: 2,
        start: usize::MAX - 1,
        prefill: vec![Routine],
        producers: vec![vec![Routine, Idle], vec![Critical]],
        pops: 2,
    });
}

/// Capacity 2: one producer pushes two items of one class while another
/// displaces; FIFO per producer and class holds.
#[test]
fn cap2_fifo_and_displacement() {
    model(Scenario {
        capacity: 2,
        start: 0,
        prefill: vec![Idle],
        producers: vec![vec![Idle, Idle], vec![Routine]],
        pops: 1,
    });
}

/// Capacity 3, three producers (one per class) and the consumer.
#[test]
fn cap3_three_producers() {
    model_bounded(
        2,
        Scenario {
            capacity: 3,
            start: usize::MAX,
            prefill: vec![Idle, Routine],
            producers: vec![vec![Idle], vec![Routine], vec![Critical]],
            pops: 1,
        },
    );
}

/// Capacity 2, two producers with two items each (a Critical one among
/// them) and two pops racing them; the heaviest model, so at most one
/// preemption.
#[test]
fn cap2_two_items_each() {
    model_bounded(
        1,
        Scenario {
            capacity: 2,
            start: 0,
            prefill: vec![Idle],
            producers: vec![vec![Idle, Critical], vec![Routine, Routine]],
            pops: 2,
        },
    );
}

/// Issue 8, finding 4: capacity 1 holding an `Idle` item that the consumer
/// is popping while a `Critical` push races it. The item in transit (taken
/// from its ring, not yet counted out) must not make the push fail: it
/// either displaces the `Idle` item or finds the room the pop made.
#[test]
fn critical_push_racing_the_pop_of_the_last_lower_item_is_never_refused() {
    loom::model(|| {
        let q = DeadLetterQueue::with_capacity_starting_at(1, 0).unwrap();
        assert!(matches!(q.push(1u8, Idle), Ok(Pushed::Queued)));
        let p = q.producer();
        let t = thread::spawn(move || p.push(2u8, Critical).map(|pushed| matches!(pushed, Pushed::Queued)));
        let popped = q.pop();
        let pushed = t.join().unwrap();
        assert!(
            pushed.is_ok(),
            "a Critical push was refused; the queue held no Critical item"
        );
        // Exactly one of the pop and the push got the Idle item.
        match (popped, pushed) {
            (Some((1, Idle)), Ok(true)) | (None, Ok(false)) | (Some((2, Critical)), Ok(false)) => {}
            other => panic!("{other:?}"),
        }
    });
}

/// Issue 8, finding 4: capacity 2 with a `Routine` item; an `Idle` and a
/// `Critical` producer race for the last slot. If the `Idle` item got in,
/// it is the lowest class present and the `Critical` push displaces it, not
/// the `Routine` one, even while the `Idle` item is still in transit.
#[test]
fn displacement_takes_the_lowest_class_present_even_in_transit() {
    loom::model(|| {
        let q = DeadLetterQueue::with_capacity_starting_at(2, 0).unwrap();
        assert!(matches!(q.push(0u8, Routine), Ok(Pushed::Queued)));
        let (pi, pc) = (q.producer(), q.producer());
        let idle = thread::spawn(move || pi.push(1u8, Idle));
        let critical = thread::spawn(move || pc.push(2u8, Critical));
        let idle = idle.join().unwrap();
        let critical = critical.join().unwrap();
        match (&idle, &critical) {
            (Ok(Pushed::Queued), Ok(Pushed::Displaced(1, Idle))) | (Err(Full(1)), Ok(Pushed::Queued)) => {}
            other => panic!("{other:?}"),
        }
    });
}

/// The consumer looks at each ring's head, highest class first, and passes
/// over a class whose next item is still being written: capacity 2 holding
/// an `Idle` item, a `Critical` and a `Routine` producer race two pops.
/// Still every item is popped, displaced or refused once, FIFO per class,
/// and the `Critical` item is never displaced.
#[test]
fn pop_passes_over_items_in_transit() {
    model_bounded(
        2,
        Scenario {
            capacity: 2,
            start: 0,
            prefill: vec![Idle],
            producers: vec![vec![Critical], vec![Routine]],
            pops: 2,
        },
    );
}

/// Capacity 1 holding an `Idle` item, two `Idle` pushes race the pop that
/// makes room: one of them gets in, never both (the queue never holds more
/// than its capacity).
#[test]
fn two_pushes_racing_the_pop_that_makes_room() {
    model(Scenario {
        capacity: 1,
        start: 0,
        prefill: vec![Idle],
        producers: vec![vec![Idle], vec![Idle]],
        pops: 1,
    });
}

/// A displacing producer and the consumer remove from one ring: capacity 2
/// full of `Idle` items, a `Routine` producer displaces them one after the
/// other while the consumer pops twice. Each `Idle` item goes to exactly
/// one of them.
#[test]
fn a_displacer_and_the_consumer_remove_from_one_ring() {
    model_bounded(
        2,
        Scenario {
            capacity: 2,
            start: 0,
            prefill: vec![Idle, Idle],
            producers: vec![vec![Routine, Routine]],
            pops: 2,
        },
    );
}

/// Positions start at `usize::MAX` (every ring wraps at its first item)
/// while a `Critical` and an `Idle` push race a pop on a full queue.
#[test]
fn positions_wrap_under_a_race() {
    model(Scenario {
        capacity: 1,
        start: usize::MAX,
        prefill: vec![Routine],
        producers: vec![vec![Critical], vec![Idle]],
        pops: 1,
    });
}

/// Capacity 7 nearly full of every class, positions about to wrap, three
/// pushes race two pops: the queue never holds more than 7 items, and every
/// item is accounted for once.
#[test]
fn a_capacity_of_seven_nearly_full() {
    model_bounded(
        2,
        Scenario {
            capacity: 7,
            start: usize::MAX - 2,
            prefill: vec![Idle, Routine, Idle, Critical, Routine, Idle],
            producers: vec![vec![Idle, Critical], vec![Routine]],
            pops: 2,
        },
    );
}

/// Never more than `capacity` items, against a producer preempted between
/// its read of the word and its CAS while the others go round the queue:
/// 8 `Routine` admissions and a pop on a queue of capacity 7. Found by a
/// hostile review of a design that counted admissions modulo a field's
/// size (the word came back to the value the preempted producer had read,
/// and its CAS admitted an eighth item); the occupancy word holds the items
/// present, so the CAS succeeds only on a word whose room is real. The
/// queue is moved into a second thread so that one preemption (the first
/// producer's, between its load and its CAS) is enough.
#[test]
fn a_producer_preempted_while_the_others_go_round_never_overfills() {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(1);
    b.check(|| {
        let q = DeadLetterQueue::with_capacity_starting_at(7, 0).unwrap();
        let p = q.producer();
        let t = thread::spawn(move || matches!(p.push(100u32, Routine), Ok(Pushed::Queued)));
        let owner = thread::spawn(move || {
            // 7 pushes fill it, one pop, one push: 8 Routine admissions, and
            // the queue is full.
            for k in 0..7u32 {
                let _ = q.push(k, Routine);
            }
            let _ = q.pop();
            let _ = q.push(7, Routine);
            q
        });
        let _ = t.join().unwrap();
        let q = owner.join().unwrap();
        let depth = q.fallback_depth();
        let mut left = 0;
        while q.pop().is_some() {
            left += 1;
        }
        assert!(left <= 7, "capacity 7 held {left} items (fallback_depth {depth:?})");
        assert!(depth.total() <= 7, "fallback_depth {depth:?} above the capacity");
    });
}

/// Two displacers (`Routine`, `Critical`) and a pop on a queue of capacity 2
/// full of `Idle` items: each `Idle` item goes to exactly one of them.
#[test]
fn two_displacers_and_a_pop() {
    model(Scenario {
        capacity: 2,
        start: 0,
        prefill: vec![Idle, Idle],
        producers: vec![vec![Routine], vec![Critical]],
        pops: 1,
    });
}

/// Capacity 6, positions about to wrap, every class, pushes of a full queue
/// racing two pops.
#[test]
fn cap6_every_class_near_the_positions_wrap() {
    model_bounded(
        1,
        Scenario {
            capacity: 6,
            start: usize::MAX - 4,
            prefill: vec![Critical, Idle, Routine, Idle, Routine],
            producers: vec![vec![Idle, Critical], vec![Routine, Critical]],
            pops: 2,
        },
    );
}

/// The consumer never writes the producers' line: the counts are the
/// occupancy word less the consumer's pops not folded into it yet, read
/// before and after the word. A reader (`fallback_depth`, `len`) racing a
/// displacement and two pops must see counts the queue had: never over
/// the capacity, never more of a class than was ever queued.
#[test]
fn counts_read_while_the_consumer_pops_are_counts_the_queue_had() {
    loom::model(|| {
        let q = DeadLetterQueue::with_capacity(2).unwrap();
        assert!(matches!(q.push(1u32, Idle), Ok(Pushed::Queued)));
        assert!(matches!(q.push(2, Routine), Ok(Pushed::Queued)));
        let pusher = q.producer();
        let displacer = thread::spawn(move || match pusher.push(3, Critical) {
            Ok(Pushed::Queued) => None,
            Ok(Pushed::Displaced(old, class)) => Some((old, class)),
            Err(_) => panic!("a Critical push refused while lower items were queued or popped"),
        });
        let reader = q.producer();
        let reading = thread::spawn(move || {
            let d = reader.fallback_depth();
            let len = reader.len();
            (d, len)
        });
        let first = q.pop();
        let second = q.pop();
        let displaced = displacer.join().unwrap();
        let (d, len) = reading.join().unwrap();
        assert!(d.total() <= 2 && len <= 2, "{d:?} len {len}");
        assert!(d.idle <= 1 && d.routine <= 1 && d.critical <= 1, "{d:?}");
        assert!(!(d.idle == 1 && d.routine == 1 && d.critical == 1), "{d:?}");
        // The items are accounted for, once each.
        let mut got: Vec<u32> = [first, second].into_iter().flatten().map(|(v, _)| v).collect();
        got.extend(displaced.map(|(v, _)| v));
        while let Some((v, _)) = q.pop() {
            got.push(v);
        }
        got.sort_unstable();
        assert_eq!(got, [1, 2, 3]);
        assert_eq!(q.len(), 0);
    });
}

/// A push that finds the occupancy word full of an item the consumer has
/// popped folds that pop in and is admitted; a second push racing it must
/// not also be admitted into the same room (the queue would hold two items
/// at capacity 1).
#[test]
fn two_pushes_that_find_one_pop_not_folded_share_its_room() {
    loom::model(|| {
        let q = DeadLetterQueue::with_capacity(1).unwrap();
        assert!(matches!(q.push(0u32, Routine), Ok(Pushed::Queued)));
        let spawn = |v: u32| {
            let p = q.producer();
            thread::spawn(move || p.push(v, Idle).is_ok())
        };
        let (a, b) = (spawn(1), spawn(2));
        let popped = q.pop();
        let admitted = usize::from(a.join().unwrap()) + usize::from(b.join().unwrap());
        let len = q.len();
        assert!(len <= 1, "len {len}");
        let mut left = 0;
        while q.pop().is_some() {
            left += 1;
        }
        assert_eq!(left, len);
        match popped {
            // The pop came before both pushes were decided, or between them.
            Some((0, Routine)) => assert_eq!(admitted, len),
            // Neither push could be admitted before the pop of item 0.
            other => panic!("popped {other:?}"),
        }
    });
}
