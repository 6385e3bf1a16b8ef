//! Hostile review of 9213eeb (the consumer's pops are folded into the
//! occupancy word by producers): loom models of folds racing displacers,
//! other folders, the consumer and readers.
//!
//! Run: `RUSTFLAGS="--cfg tailguard_loom" LOOM_MAX_PREEMPTIONS=2 cargo test --release --test loom dlq_hostile_fold`
//!
//! Every producer's first access is a relaxed load of a `kick` atomic the
//! consumer stores before it pops (see `dlq_hostile_pop.rs`), so that loom
//! explores pushes that finish before, and during, each pop.
#![cfg(tailguard_loom)]

use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::sync::Arc;
use loom::thread;

use crate::dlq_fates::{exactly_once, push, Fate};
use tailguard::dlq::{DeadLetterQueue, Priority, Pushed};
use Priority::{Critical, Idle, Routine};

fn bounded(preemptions: usize, f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(b.preemption_bound.map_or(preemptions, |p| p.min(preemptions)));
    b.check(f);
}

/// Capacity 1 holding `Idle` item 0; the consumer pops once while two
/// `Routine` producers push 1 and 2. The pop may make the room each push
/// folds in, or meet a displacer's claim (which then consumes the pop:
/// `Pushed::Queued`). Each item goes exactly one way; the first of the two
/// Routine pushes to decide sees item 0 or its pop, so they are not both
/// refused; stats balance.
#[test]
fn hf_cap1_fold_races_displacer_take_claimed() {
    bounded(2, || {
        let q = DeadLetterQueue::with_capacity_starting_at(1, 0).unwrap();
        assert_eq!(q.push(0u32, Idle), Ok(Pushed::Queued));
        let kick = Arc::new(AtomicUsize::new(0));
        let spawn = |v: u32| {
            let p = q.producer();
            let k = kick.clone();
            thread::spawn(move || {
                let _ = k.load(Ordering::Relaxed);
                (v, push(&p, v, Routine))
            })
        };
        let (a, b) = (spawn(1), spawn(2));
        kick.store(1, Ordering::Relaxed);
        let got: Vec<_> = q.pop().into_iter().collect();
        let fa = a.join().unwrap();
        let fb = b.join().unwrap();
        assert!(
            !(fa.1 == Fate::Full && fb.1 == Fate::Full),
            "both Routine pushes refused: {fa:?} {fb:?}, popped {got:?}"
        );
        exactly_once(&q, &[(0, Idle), (1, Routine), (2, Routine)], &got, &[fa, fb]);
    });
}

/// Capacity 2 full of `Critical` items 0 and 1; the consumer pops one
/// (item 0) and then raises `popped`. Producer A waits for `popped` and
/// pushes `Critical` 10; producer B pushes `Critical` 11 at any time (it
/// may fold the pop, and be halfway through that fold when A looks). A
/// may be refused only if B's item took the room (B queued): at A's push
/// the queue counts at most item 1 and B's item as Critical.
#[test]
fn hf_critical_push_during_a_fold_of_critical_pops() {
    bounded(2, || {
        let q = DeadLetterQueue::with_capacity_starting_at(2, 0).unwrap();
        assert_eq!(q.push(0u32, Critical), Ok(Pushed::Queued));
        assert_eq!(q.push(1u32, Critical), Ok(Pushed::Queued));
        let kick = Arc::new(AtomicUsize::new(0));
        let popped = Arc::new(AtomicUsize::new(0));
        let a = {
            let p = q.producer();
            let popped = popped.clone();
            thread::spawn(move || {
                while popped.load(Ordering::Acquire) == 0 {
                    thread::yield_now();
                }
                (10, push(&p, 10, Critical))
            })
        };
        let b = {
            let p = q.producer();
            let k = kick.clone();
            thread::spawn(move || {
                let _ = k.load(Ordering::Relaxed);
                (11, push(&p, 11, Critical))
            })
        };
        kick.store(1, Ordering::Relaxed);
        let got = q.pop();
        assert_eq!(got, Some((0, Critical)));
        popped.store(1, Ordering::Release);
        let fa = a.join().unwrap();
        let fb = b.join().unwrap();
        if fa.1 == Fate::Full {
            assert_eq!(
                fb.1,
                Fate::Queued,
                "A refused while the queue counted one Critical item and room: {fa:?} {fb:?}"
            );
        }
        exactly_once(
            &q,
            &[(0, Critical), (1, Critical), (10, Critical), (11, Critical)],
            &[got.unwrap()],
            &[fa, fb],
        );
    });
}

/// Two folders: capacity 2 held two `Idle` items, both popped (and
/// counted) before the two `Routine` pushes begin. Both pushes find the
/// word full of pops and race to fold them: both must queue (the queue was
/// empty when they began), nothing displaced, nothing refused; a reader
/// thread meanwhile never reads more than the capacity.
#[test]
fn hf_two_folders_and_a_reader() {
    bounded(2, || {
        let q = DeadLetterQueue::with_capacity_starting_at(2, 0).unwrap();
        assert_eq!(q.push(0u32, Idle), Ok(Pushed::Queued));
        assert_eq!(q.push(1u32, Idle), Ok(Pushed::Queued));
        assert_eq!(q.pop(), Some((0, Idle)));
        assert_eq!(q.pop(), Some((1, Idle)));
        let spawn = |v: u32| {
            let p = q.producer();
            thread::spawn(move || (v, push(&p, v, Routine)))
        };
        let (a, b) = (spawn(10), spawn(11));
        let r = {
            let p = q.producer();
            thread::spawn(move || {
                let d = p.fallback_depth();
                assert!(d.total() <= 2, "{d:?}");
                assert_eq!(d.critical, 0, "{d:?}");
            })
        };
        let fa = a.join().unwrap();
        let fb = b.join().unwrap();
        r.join().unwrap();
        assert_eq!((fa.1, fb.1), (Fate::Queued, Fate::Queued));
        exactly_once(
            &q,
            &[(0, Idle), (1, Idle), (10, Routine), (11, Routine)],
            &[(0, Idle), (1, Idle)],
            &[fa, fb],
        );
    });
}

/// Capacity 2 holding `Idle` 0 and `Routine` 1; the consumer pops once
/// (it takes 1) while a `Critical` producer pushes 10 and a `Routine`
/// producer pushes 11. Only 10 is `Critical`, so 10 is never refused.
/// Exactly once, stats balance.
#[test]
fn hf_cap2_critical_and_routine_displacers_race_a_pop() {
    bounded(2, || {
        let q = DeadLetterQueue::with_capacity_starting_at(2, 0).unwrap();
        assert_eq!(q.push(0u32, Idle), Ok(Pushed::Queued));
        assert_eq!(q.push(1u32, Routine), Ok(Pushed::Queued));
        let kick = Arc::new(AtomicUsize::new(0));
        let spawn = |v: u32, class: Priority| {
            let p = q.producer();
            let k = kick.clone();
            thread::spawn(move || {
                let _ = k.load(Ordering::Relaxed);
                (v, push(&p, v, class))
            })
        };
        let (a, b) = (spawn(10, Critical), spawn(11, Routine));
        kick.store(1, Ordering::Relaxed);
        let got: Vec<_> = q.pop().into_iter().collect();
        let fa = a.join().unwrap();
        let fb = b.join().unwrap();
        assert_ne!(fa.1, Fate::Full, "Critical refused: {fa:?} {fb:?} popped {got:?}");
        exactly_once(
            &q,
            &[(0, Idle), (1, Routine), (10, Critical), (11, Routine)],
            &got,
            &[fa, fb],
        );
    });
}

/// Capacity 1 holding `Critical` 0; the consumer pops it, then raises
/// `popped`. Producer A waits for it and pushes `Critical` 10: the queue
/// then holds no `Critical` item (0 is popped, 10 is the only other), so A
/// must not be refused. Producer B pushes `Idle` 11 at any time (it may
/// fold the pop and be displaced by A, or be refused).
#[test]
fn hf_cap1_critical_after_its_pop_with_an_idle_folder() {
    bounded(2, || {
        let q = DeadLetterQueue::with_capacity_starting_at(1, 0).unwrap();
        assert_eq!(q.push(0u32, Critical), Ok(Pushed::Queued));
        let kick = Arc::new(AtomicUsize::new(0));
        let popped = Arc::new(AtomicUsize::new(0));
        let a = {
            let p = q.producer();
            let popped = popped.clone();
            thread::spawn(move || {
                while popped.load(Ordering::Acquire) == 0 {
                    thread::yield_now();
                }
                (10, push(&p, 10, Critical))
            })
        };
        let b = {
            let p = q.producer();
            let k = kick.clone();
            thread::spawn(move || {
                let _ = k.load(Ordering::Relaxed);
                (11, push(&p, 11, Idle))
            })
        };
        kick.store(1, Ordering::Relaxed);
        let got = q.pop();
        assert_eq!(got, Some((0, Critical)));
        popped.store(1, Ordering::Release);
        let fa = a.join().unwrap();
        let fb = b.join().unwrap();
        assert_ne!(
            fa.1,
            Fate::Full,
            "Critical refused with no Critical item queued: {fa:?} {fb:?}"
        );
        exactly_once(
            &q,
            &[(0, Critical), (10, Critical), (11, Idle)],
            &[got.unwrap()],
            &[fa, fb],
        );
    });
}

/// Capacity 1, `Idle` 0 queued. A `Routine` displacer (1) races the
/// consumer's pop of 0 and, after it, a second pop; between the two pops
/// an `Idle` producer (2) pushes. Whatever the order: exactly once, and the
/// consumer's second pop never answers `None` once the Routine push has
/// returned Queued or Displaced (its item is queued, or popped by the first
/// pop).
#[test]
fn hf_cap1_displacer_pop_claim_then_idle_push() {
    bounded(2, || {
        let q = DeadLetterQueue::with_capacity_starting_at(1, 0).unwrap();
        assert_eq!(q.push(0u32, Idle), Ok(Pushed::Queued));
        let kick = Arc::new(AtomicUsize::new(0));
        let done = Arc::new(AtomicUsize::new(0));
        let a = {
            let p = q.producer();
            let k = kick.clone();
            let done = done.clone();
            thread::spawn(move || {
                let _ = k.load(Ordering::Relaxed);
                let f = push(&p, 1, Routine);
                done.store(1, Ordering::Release);
                (1, f)
            })
        };
        let b = {
            let p = q.producer();
            let k = kick.clone();
            thread::spawn(move || {
                let _ = k.load(Ordering::Relaxed);
                (2, push(&p, 2, Idle))
            })
        };
        kick.store(1, Ordering::Relaxed);
        let mut got: Vec<_> = q.pop().into_iter().collect();
        let routine_done = done.load(Ordering::Acquire) == 1;
        let first_had_routine = got.iter().any(|x| x.0 == 1);
        let second = q.pop();
        if routine_done && !first_had_routine {
            assert_eq!(
                second,
                Some((1, Routine)),
                "Routine 1 queued (its push returned) but the pop gave another answer; first pop {got:?}"
            );
        }
        got.extend(second);
        let fa = a.join().unwrap();
        let fb = b.join().unwrap();
        assert_ne!(
            fa.1,
            Fate::Full,
            "Routine refused at capacity 1 with only Idle items: {fa:?} {fb:?}"
        );
        exactly_once(&q, &[(0, Idle), (1, Routine), (2, Idle)], &got, &[fa, fb]);
    });
}

/// FINDING (reads). Capacity 2 held two `Idle` items, both popped (and
/// counted) before anything below starts: no `Idle` item exists from then
/// on. One `Routine` push folds the two pops; one reader reads
/// `fallback_depth` meanwhile. A folder holding `FOLDING` (it has claimed
/// the pops in `folded` but not yet taken them off the word) makes each of
/// the reader's eight reads fail, and the fallback is the last read: the
/// word's 2 `Idle` less 0 unfolded pops (already claimed) = 2 `Idle` items,
/// on a queue that held no `Idle` item at any instant of the read (it was
/// empty, then held the one `Routine` item). One preemption suffices.
#[test]
fn hf_reader_during_a_fold_reports_items_popped_before_it_began() {
    bounded(1, || {
        let q = DeadLetterQueue::with_capacity_starting_at(2, 0).unwrap();
        assert_eq!(q.push(0u32, Idle), Ok(Pushed::Queued));
        assert_eq!(q.push(1u32, Idle), Ok(Pushed::Queued));
        assert_eq!(q.pop(), Some((0, Idle)));
        assert_eq!(q.pop(), Some((1, Idle)));
        let a = {
            let p = q.producer();
            thread::spawn(move || push(&p, 10, Routine))
        };
        let r = {
            let p = q.producer();
            thread::spawn(move || p.fallback_depth())
        };
        let fa = a.join().unwrap();
        let d = r.join().unwrap();
        assert_eq!(fa, Fate::Queued);
        assert!(
            d.idle == 0 && d.total() <= 1,
            "read {d:?}: the queue held no Idle item (both popped before the read began) and at most one item"
        );
    });
}
