//! Hostile review of 6658636 (`Inner::pop` looks at the ring heads before
//! the occupancy word). Loom models of the races the change touches.
//!
//! Run with
//! `RUSTFLAGS="--cfg tailguard_loom" LOOM_MAX_PREEMPTIONS=2 CARGO_TARGET_DIR=target/loom cargo test --release --test loom -- dlq_hostile_pop::`.
//!
//! Findings: the `hp_new_*` models failed on 6658636 and passed on its
//! parent (a pop returned a lower-class item pushed after a higher-class
//! push that had returned, the higher item still queued), and
//! `hp_old_pop_returns_none_while_a_returned_item_is_always_queued` failed
//! on both (a pop answered `None` while an item whose push had returned was
//! queued throughout). Both are fixed (`Lower::Higher` and the second look
//! in `src/dlq/queue.rs`). The review found two more that are not defects
//! of the queue, and their models are not kept: a returned item queued
//! behind one still being written in its class may be popped after a
//! lower-class item (now a stated caveat of `dlq`), and the loom blind spot
//! below. The rest held.
//!
//! A note on loom here: its DPOR remembers one last access per atomic, so a
//! producer's load of a location just before its store hides the consumer's
//! earlier load of that location. A pop on an empty-looking class and a push
//! that starts with a load (every push: the occupancy word, then the slot's
//! `seq`) therefore never register as racing, and a model of "one producer,
//! the consumer pops" explores one execution: the pop first (the review's
//! model of one `Critical` push racing one pop saw only that outcome). The
//! models below give every producer a first access that races with the
//! consumer (a relaxed load of a `kick` atomic that the consumer stores
//! before each pop), which makes loom explore pushes that finish before, and
//! during, each pop; `hp_existing_scenarios_with_a_kick_*` re-run the
//! scenarios of `dlq.rs` that way.
#![cfg(tailguard_loom)]

use loom::alloc::Track;
use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::sync::Arc;
use loom::thread;

use tailguard::dlq::{DeadLetterQueue, Full, Priority, Pushed};
use Priority::{Critical, Idle, Routine};

fn bounded(preemptions: usize, f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(b.preemption_bound.map_or(preemptions, |p| p.min(preemptions)));
    b.check(f);
}

/// One producer pushes `first` then, after that push returned, `second`;
/// the consumer pops once, concurrently. Returns what the pop got.
fn push_two_then_pop(
    first: (&'static str, Priority),
    second: (&'static str, Priority),
) -> Option<(&'static str, Priority)> {
    let q = DeadLetterQueue::with_capacity_starting_at(4, 0).unwrap();
    let p = q.producer();
    let kick = Arc::new(AtomicUsize::new(0));
    let k = kick.clone();
    let t = thread::spawn(move || {
        let _ = k.load(Ordering::Relaxed);
        assert_eq!(p.push(first.0, first.1), Ok(Pushed::Queued));
        assert_eq!(p.push(second.0, second.1), Ok(Pushed::Queued));
    });
    kick.store(1, Ordering::Relaxed);
    let got = q.pop();
    t.join().unwrap();
    got
}

// ---------------------------------------------------------------------
// Findings.
// ---------------------------------------------------------------------

/// NEW in 6658636. One producer pushes a `Critical` item and, after that
/// push has returned, an `Idle` item; the consumer pops once,
/// concurrently. Nothing removes a `Critical` item but the consumer, so in
/// every order of the three operations that respects real time a pop that
/// sees the `Idle` item also sees the `Critical` one, and must return it.
/// The new pop reads the `Critical` head before that item is written (or
/// reads it stale: nothing orders that load after the producer's store),
/// passes, then sees the `Idle` head written and the word counting it, and
/// returns the `Idle` item with the `Critical` item, pushed (and returned)
/// before the `Idle` push began, still queued. The new doc's own model
/// ("an item whose head is not written yet is treated as if its push came
/// after this pop") is contradicted: the `Idle` push came after that one.
///
/// The parent's pop read the word first: a word that counts the `Idle`
/// item was written by its admission CAS, which the `Critical` item's
/// `seq` store happens-before, so the parent then saw that head written
/// and took the `Critical` item (this model passes on the parent).
#[test]
fn hp_new_pop_returns_an_idle_item_pushed_after_a_returned_critical_push() {
    bounded(2, || {
        let got = push_two_then_pop(("critical", Critical), ("idle", Idle));
        assert_ne!(
            got,
            Some(("idle", Idle)),
            "popped the Idle item while the Critical item pushed before it was queued"
        );
    });
}

/// NEW in 6658636, `Routine` then `Idle`.
#[test]
fn hp_new_pop_returns_an_idle_item_pushed_after_a_returned_routine_push() {
    bounded(2, || {
        let got = push_two_then_pop(("routine", Routine), ("idle", Idle));
        assert_ne!(got, Some(("idle", Idle)));
    });
}

/// NEW in 6658636, `Critical` then `Routine`.
#[test]
fn hp_new_pop_returns_a_routine_item_pushed_after_a_returned_critical_push() {
    bounded(2, || {
        let got = push_two_then_pop(("critical", Critical), ("routine", Routine));
        assert_ne!(got, Some(("routine", Routine)));
    });
}

/// NEW in 6658636, the same through two producers: the `Idle` producer
/// starts only once it has seen (Acquire) that the `Critical` push
/// returned (a message passed between them), so the `Critical` push
/// happens-before the `Idle` one. The pop still returns the `Idle` item
/// with the `Critical` item queued.
#[test]
fn hp_new_pop_returns_idle_after_a_critical_push_that_happens_before_it() {
    bounded(2, || {
        let q = DeadLetterQueue::with_capacity_starting_at(4, 0).unwrap();
        let (pc, pi) = (q.producer(), q.producer());
        let kick = Arc::new(AtomicUsize::new(0));
        let done = Arc::new(AtomicUsize::new(0));
        let (k, d1, d2) = (kick.clone(), done.clone(), done.clone());
        let tc = thread::spawn(move || {
            let _ = k.load(Ordering::Relaxed);
            assert_eq!(pc.push("critical", Critical), Ok(Pushed::Queued));
            d1.store(1, Ordering::Release);
        });
        let ti = thread::spawn(move || {
            if d2.load(Ordering::Acquire) == 1 {
                assert_eq!(pi.push("idle", Idle), Ok(Pushed::Queued));
            }
        });
        kick.store(1, Ordering::Relaxed);
        let got = q.pop();
        tc.join().unwrap();
        ti.join().unwrap();
        assert_ne!(got, Some(("idle", Idle)));
    });
}

/// Pre-existing (fails on the parent too). Capacity 2 holding a `Routine`
/// item; one producer pushes a `Critical` item, then (after it returned) a
/// second `Critical` item, which displaces the `Routine` item. The consumer
/// pops once, concurrently. At every instant of the pop the queue holds an
/// item whose push has returned (the `Routine` item until it is displaced,
/// and by then the first `Critical` item), yet the pop returns `None`
/// ("Returns None when the queue is empty (or holds only items whose push
/// has not returned yet)").
#[test]
fn hp_old_pop_returns_none_while_a_returned_item_is_always_queued() {
    bounded(2, || {
        let q = DeadLetterQueue::with_capacity_starting_at(2, 0).unwrap();
        assert_eq!(q.push(0u8, Routine), Ok(Pushed::Queued));
        let p = q.producer();
        let t = thread::spawn(move || {
            assert_eq!(p.push(1u8, Critical), Ok(Pushed::Queued));
            assert!(
                p.push(2u8, Critical).is_ok(),
                "a Critical push refused with a Routine item queued"
            );
        });
        let got = q.pop();
        t.join().unwrap();
        assert!(got.is_some(), "pop returned None");
    });
}

// ---------------------------------------------------------------------
// Attacks that held (generic exactly-once / FIFO / counters checker,
// with a `kick` so that loom explores pushes before and during pops).
// ---------------------------------------------------------------------

type Id = (usize, usize);

struct Scenario {
    capacity: usize,
    start: usize,
    prefill: Vec<Priority>,
    producers: Vec<Vec<Priority>>,
    pops: usize,
    /// Also run a thread that reads `fallback_depth`/`len` while the
    /// others run.
    observer: bool,
}

fn check(s: &Scenario) {
    let q = DeadLetterQueue::with_capacity_starting_at(s.capacity, s.start).unwrap();
    let kick = Arc::new(AtomicUsize::new(0));
    let mut all: Vec<Id> = Vec::new();
    for (k, &class) in s.prefill.iter().enumerate() {
        let id = (0, k);
        all.push(id);
        assert!(matches!(q.push(Track::new((id, class)), class), Ok(Pushed::Queued)));
    }
    let observer = s.observer.then(|| {
        let p = q.producer();
        let cap = s.capacity;
        thread::spawn(move || {
            let d = p.fallback_depth();
            assert!(d.idle <= cap && d.routine <= cap && d.critical <= cap, "{d:?}");
            assert!(d.total() <= cap, "{d:?}");
            assert!(p.len() <= cap);
        })
    });
    let handles: Vec<_> = s
        .producers
        .iter()
        .enumerate()
        .map(|(p, classes)| {
            let producer = q.producer();
            let classes = classes.clone();
            let kick = kick.clone();
            for k in 0..classes.len() {
                all.push((p + 1, k));
            }
            thread::spawn(move || {
                let mut back: Vec<Id> = Vec::new();
                for (k, class) in classes.into_iter().enumerate() {
                    let _ = kick.load(Ordering::Relaxed);
                    let id = (p + 1, k);
                    match producer.push(Track::new((id, class)), class) {
                        Ok(Pushed::Queued) => {}
                        Ok(Pushed::Displaced(old, old_class)) => {
                            let (old_id, c) = *old.get_ref();
                            assert_eq!(c, old_class);
                            assert!(old_class < class);
                            assert_ne!(old_class, Critical);
                            back.push(old_id);
                        }
                        Err(Full(item)) => {
                            let (item_id, c) = *item.get_ref();
                            assert_eq!(item_id, id);
                            assert_eq!(c, class);
                            back.push(item_id);
                        }
                    }
                }
                back
            })
        })
        .collect();

    let mut popped: Vec<(Id, Priority)> = Vec::new();
    for i in 0..s.pops {
        kick.store(i + 1, Ordering::Relaxed);
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
    if let Some(o) = observer {
        o.join().unwrap();
    }
    let len = q.len();
    assert!(len <= s.capacity);
    let stats = q.stats();
    let mut left = 0;
    let mut last_class = Critical;
    while let Some((item, class)) = q.pop() {
        let (id, c) = *item.get_ref();
        assert_eq!(c, class);
        // A quiet queue: highest class first.
        assert!(class <= last_class, "{class:?} after {last_class:?} on a quiet queue");
        last_class = class;
        popped.push((id, class));
        left += 1;
    }
    assert_eq!(left, len);
    assert!(q.pop().is_none());
    let mut seen: Vec<Id> = popped.iter().map(|&(id, _)| id).chain(back.iter().copied()).collect();
    seen.sort_unstable();
    all.sort_unstable();
    assert_eq!(seen, all, "every item delivered or handed back exactly once");
    for (i, &(a, ca)) in popped.iter().enumerate() {
        for &(b, cb) in &popped[i + 1..] {
            if a.0 == b.0 && ca == cb {
                assert!(a.1 < b.1, "{a:?} popped before {b:?}, class {ca:?}");
            }
        }
    }
    assert_eq!(stats.critical.displaced, 0);
    for class in Priority::ALL {
        let c = stats.class(class);
        assert_eq!(
            c.pushed,
            c.popped + c.displaced + c.handed_back + c.depth,
            "{class:?}: {c:?}"
        );
    }
    let depth: u64 = Priority::ALL.iter().map(|&c| stats.class(c).depth).sum();
    assert_eq!(depth as usize, len);
}

fn run(preemptions: usize, s: Scenario) {
    let s = std::sync::Arc::new(s);
    bounded(preemptions, move || check(&s));
}

/// Two `Critical` displacers claim both counted `Routine` items while the
/// consumer's pops see the `Routine` head written.
#[test]
fn hp_two_critical_displacers_take_every_counted_routine_under_two_pops() {
    run(
        2,
        Scenario {
            capacity: 2,
            start: 0,
            prefill: vec![Routine, Routine],
            producers: vec![vec![Critical], vec![Critical]],
            pops: 2,
            observer: false,
        },
    );
}

/// Capacity 1: the last counted `Routine` item is displaced while its head
/// is written, and a `Routine` push races for the room.
#[test]
fn hp_last_counted_routine_displaced_while_its_head_is_written() {
    run(
        2,
        Scenario {
            capacity: 1,
            start: 0,
            prefill: vec![Routine],
            producers: vec![vec![Critical], vec![Routine]],
            pops: 2,
            observer: false,
        },
    );
}

/// Capacity 1, the last counted `Idle` item displaced by a `Routine` push
/// while a second `Idle` push waits for room.
#[test]
fn hp_last_counted_idle_displaced_while_its_head_is_written() {
    run(
        2,
        Scenario {
            capacity: 1,
            start: usize::MAX,
            prefill: vec![Idle],
            producers: vec![vec![Routine], vec![Idle]],
            pops: 2,
            observer: false,
        },
    );
}

/// One producer displaces `Idle` then `Routine` while another pushes `Idle`.
#[test]
fn hp_one_producer_displaces_idle_then_routine() {
    run(
        2,
        Scenario {
            capacity: 2,
            start: 0,
            prefill: vec![Idle, Routine],
            producers: vec![vec![Critical, Critical], vec![Idle]],
            pops: 2,
            observer: false,
        },
    );
}

/// Positions wrap at the first item; displacements and pops of every class.
#[test]
fn hp_wrap_at_usize_max_cap1() {
    run(
        2,
        Scenario {
            capacity: 1,
            start: usize::MAX,
            prefill: vec![Idle],
            producers: vec![vec![Critical, Routine], vec![Routine]],
            pops: 2,
            observer: false,
        },
    );
}

/// Positions wrap; two `Critical` pushes displace both `Routine` items.
#[test]
fn hp_wrap_cap2_critical_displaces_routine() {
    run(
        2,
        Scenario {
            capacity: 2,
            start: usize::MAX - 1,
            prefill: vec![Routine, Routine],
            producers: vec![vec![Critical, Critical]],
            pops: 2,
            observer: false,
        },
    );
}

/// A consumer popping in a loop on an empty queue while producers push
/// every class.
#[test]
fn hp_tight_consumer_on_an_empty_queue_every_class() {
    run(
        1,
        Scenario {
            capacity: 2,
            start: usize::MAX,
            prefill: vec![],
            producers: vec![vec![Idle, Critical], vec![Routine, Critical]],
            pops: 4,
            observer: false,
        },
    );
}

/// The unconditional `fetch_sub` of the `Critical` claim never drives a
/// count below zero (an observer would see a huge count) nor the total
/// above the capacity.
#[test]
fn hp_critical_claim_never_underflows_seen_by_an_observer() {
    run(
        2,
        Scenario {
            capacity: 1,
            start: 0,
            prefill: vec![],
            producers: vec![vec![Critical, Critical]],
            pops: 2,
            observer: true,
        },
    );
}

/// Observer while a `Critical` item displaces an `Idle` one under a pop.
#[test]
fn hp_observer_under_displacement_and_pop() {
    run(
        2,
        Scenario {
            capacity: 1,
            start: usize::MAX,
            prefill: vec![Idle],
            producers: vec![vec![Critical]],
            pops: 1,
            observer: true,
        },
    );
}

/// A returned `Routine` push at the head of its ring is popped before an
/// `Idle` item queued earlier, even while a `Critical` push races (which
/// displaces the `Idle` item, or gets in first and makes the `Routine`
/// push displace it).
#[test]
fn hp_a_returned_routine_at_its_head_beats_idle() {
    bounded(2, || {
        let q = DeadLetterQueue::with_capacity_starting_at(2, 0).unwrap();
        assert_eq!(q.push(0u8, Idle), Ok(Pushed::Queued));
        let (pr, pc) = (q.producer(), q.producer());
        let r = thread::spawn(move || assert!(pr.push(1u8, Routine).is_ok()));
        let c = thread::spawn(move || pc.push(2u8, Critical).is_ok());
        r.join().unwrap();
        let got = q.pop();
        assert!(c.join().unwrap());
        assert!(matches!(got, Some((1, Routine)) | Some((2, Critical))), "{got:?}");
    });
}

/// A `Critical` item queued before the pop began is taken first, even with
/// a `Critical` push racing (which displaces the `Routine` item).
#[test]
fn hp_a_queued_critical_is_taken_first() {
    bounded(2, || {
        let q = DeadLetterQueue::with_capacity_starting_at(2, 0).unwrap();
        assert_eq!(q.push(0u8, Routine), Ok(Pushed::Queued));
        assert_eq!(q.push(1u8, Critical), Ok(Pushed::Queued));
        let pc = q.producer();
        let c = thread::spawn(move || pc.push(2u8, Critical));
        let got = q.pop();
        let pushed = c.join().unwrap();
        assert_eq!(got, Some((1, Critical)));
        assert!(pushed.is_ok());
    });
}

/// Once the consumer has seen (Acquire) that a `Critical` push returned,
/// its pop takes that item before an `Idle` one.
#[test]
fn hp_pop_after_seeing_a_returned_critical_flag_takes_it() {
    bounded(2, || {
        let q = DeadLetterQueue::with_capacity_starting_at(4, 0).unwrap();
        assert_eq!(q.push(0u8, Idle), Ok(Pushed::Queued));
        let flag = Arc::new(AtomicUsize::new(0));
        let (p, f) = (q.producer(), flag.clone());
        let t = thread::spawn(move || {
            assert_eq!(p.push(1u8, Critical), Ok(Pushed::Queued));
            f.store(1, Ordering::Release);
        });
        if flag.load(Ordering::Acquire) == 1 {
            assert_eq!(q.pop(), Some((1, Critical)));
        }
        t.join().unwrap();
    });
}

/// The scenarios of `loom-tests/dlq.rs`, through this file's checker (a
/// `kick` before each pop, an observer, highest-class-first once quiet).
#[test]
fn hp_existing_scenarios_with_a_kick_light() {
    for (capacity, start, prefill, producers, pops) in [
        (1, 0, vec![], vec![vec![Idle], vec![Critical]], 1),
        (1, 0, vec![Idle], vec![vec![Routine], vec![Critical]], 1),
        (1, 0, vec![Critical], vec![vec![Critical], vec![Routine]], 1),
        (
            2,
            usize::MAX - 1,
            vec![Routine],
            vec![vec![Routine, Idle], vec![Critical]],
            2,
        ),
        (2, 0, vec![Idle], vec![vec![Idle, Idle], vec![Routine]], 1),
        (1, 0, vec![Idle], vec![vec![Idle], vec![Idle]], 1),
        (1, usize::MAX, vec![Routine], vec![vec![Critical], vec![Idle]], 1),
        (2, 0, vec![Idle, Idle], vec![vec![Routine], vec![Critical]], 1),
    ] {
        run(
            2,
            Scenario {
                capacity,
                start,
                prefill,
                producers,
                pops,
                observer: false,
            },
        );
    }
}

#[test]
fn hp_existing_scenarios_with_a_kick_heavy() {
    for (capacity, start, prefill, producers, pops, bound) in [
        (
            3,
            usize::MAX,
            vec![Idle, Routine],
            vec![vec![Idle], vec![Routine], vec![Critical]],
            1,
            2,
        ),
        (
            2,
            0,
            vec![Idle],
            vec![vec![Idle, Critical], vec![Routine, Routine]],
            2,
            1,
        ),
        (2, 0, vec![Idle], vec![vec![Critical], vec![Routine]], 2, 2),
        (2, 0, vec![Idle, Idle], vec![vec![Routine, Routine]], 2, 2),
        (
            7,
            usize::MAX - 2,
            vec![Idle, Routine, Idle, Critical, Routine, Idle],
            vec![vec![Idle, Critical], vec![Routine]],
            2,
            2,
        ),
        (
            6,
            usize::MAX - 4,
            vec![Critical, Idle, Routine, Idle, Routine],
            vec![vec![Idle, Critical], vec![Routine, Critical]],
            2,
            1,
        ),
    ] {
        run(
            bound,
            Scenario {
                capacity,
                start,
                prefill,
                producers,
                pops,
                observer: false,
            },
        );
    }
}

/// A `Critical` push is never refused while a lower-class item is in the
/// queue, even in transit: capacity 1 holding an `Idle` item, the consumer
/// pops (kicked, so the push may run before, during or after the pop) while
/// an `Idle` push races for the room the pop makes.
#[test]
fn hp_critical_never_refused_while_a_lower_item_is_queued_kicked() {
    bounded(2, || {
        let q = DeadLetterQueue::with_capacity_starting_at(1, usize::MAX).unwrap();
        assert_eq!(q.push(0u8, Idle), Ok(Pushed::Queued));
        let kick = Arc::new(AtomicUsize::new(0));
        let (pc, pi, k1, k2) = (q.producer(), q.producer(), kick.clone(), kick.clone());
        let c = thread::spawn(move || {
            let _ = k1.load(Ordering::Relaxed);
            pc.push(2u8, Critical)
        });
        let i = thread::spawn(move || {
            let _ = k2.load(Ordering::Relaxed);
            pi.push(1u8, Idle)
        });
        kick.store(1, Ordering::Relaxed);
        let got = q.pop();
        let c = c.join().unwrap();
        let i = i.join().unwrap();
        assert!(c.is_ok(), "a Critical push refused ({got:?}, {i:?})");
        let mut all: Vec<u8> = got.into_iter().map(|x| x.0).collect();
        if let Ok(Pushed::Displaced(x, _)) = c {
            all.push(x);
        }
        match i {
            Ok(Pushed::Displaced(..)) => panic!("an Idle push displaced something"),
            Err(Full(x)) => all.push(x),
            Ok(Pushed::Queued) => {}
        }
        while let Some((x, _)) = q.pop() {
            all.push(x);
        }
        all.sort_unstable();
        assert_eq!(all, [0, 1, 2]);
    });
}

/// The same race, with the producer's first access racing the consumer's
/// (the `kick`), so that loom also explores the displacement finishing
/// between the pop's look at the `Critical` head (the first item still
/// being written) and its look at the `Routine` head (already taken by the
/// displacement): no lower head is written, and only a second look at the
/// `Critical` head, after those acquire loads, sees the first item. A pop
/// that answered `None` after one look failed this model.
#[test]
fn a_pop_that_finds_every_head_unwritten_looks_again_before_answering_none() {
    bounded(2, || {
        let q = DeadLetterQueue::with_capacity_starting_at(2, 0).unwrap();
        assert_eq!(q.push(0u8, Routine), Ok(Pushed::Queued));
        let p = q.producer();
        let kick = Arc::new(AtomicUsize::new(0));
        let k = kick.clone();
        let t = thread::spawn(move || {
            let _ = k.load(Ordering::Relaxed);
            assert_eq!(p.push(1u8, Critical), Ok(Pushed::Queued));
            // Displaces the `Routine` item, or finds the room its pop made.
            let second = p.push(2u8, Critical);
            assert!(
                matches!(second, Ok(Pushed::Displaced(0, Routine) | Pushed::Queued)),
                "{second:?}"
            );
        });
        kick.store(1, Ordering::Relaxed);
        let got = q.pop();
        t.join().unwrap();
        assert!(
            got.is_some(),
            "pop returned None with an item whose push returned queued throughout"
        );
    });
}
