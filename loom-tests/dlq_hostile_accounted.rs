//! Hostile review of a750eef (producers account for removals in
//! `accounted`; the consumer's pop only moves the head): loom models of
//! displacers racing folds, folds racing a displacer between its claim in
//! the word and its `fetch_add` on `accounted`, `Critical` pushes racing
//! folds of `Critical` pops at capacity 1 and 2, readers, and positions
//! that wrap.
//!
//! Run one: `RUSTFLAGS="--cfg tailguard_loom"
//! CARGO_TARGET_DIR=target/loom cargo test -j1 --release --test loom --
//! --exact dlq_hostile_accounted::<name> --test-threads 1`.
//!
//! Every producer's first access is a relaxed load of a `kick` atomic the
//! consumer stores before it pops (see `dlq_hostile_pop.rs` for why).
//!
//! Each model sets its own preemption bound (1, 2 or 3), whatever
//! `LOOM_MAX_PREEMPTIONS` says.
//!
//! Result on a750eef (this protocol with `Acquire`/`AcqRel`): every model
//! passed; `ha_cap2_two_displacers_and_a_folder` took about 5 minutes and
//! `ha_cap3_two_pops_displacer_and_folder` about 2. With the `SeqCst`
//! counting protocol that landed (only stronger), all 20 take about a minute
//! on two threads. No failing model.
#![cfg(tailguard_loom)]

use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::sync::Arc;
use loom::thread;

use crate::dlq_fates::{exactly_once, push, Fate};
use tailguard::dlq::{DeadLetterQueue, Full, Priority, Pushed};
use Priority::{Critical, Idle, Routine};

fn bounded(preemptions: usize, f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(preemptions);
    b.check(f);
}

fn spawn_push(
    q: &DeadLetterQueue<u32>,
    kick: &Arc<AtomicUsize>,
    v: u32,
    class: Priority,
) -> thread::JoinHandle<(u32, Fate)> {
    let p = q.producer();
    let k = kick.clone();
    thread::spawn(move || {
        let _ = k.load(Ordering::Relaxed);
        (v, push(&p, v, class))
    })
}

/// Capacity 2 holding `Idle` 0 and 1; the consumer pops once while a
/// `Critical` push (10) and a `Routine` push (11) race. The Routine push
/// may fold the pop while the Critical one is between its claim of an Idle
/// item in the word and its `fetch_add` on `accounted`, or the Critical
/// one may use the pop. Two Idle items, one pop and one displacement at
/// most: at every instant an Idle item is queued or there is room, so
/// neither push is refused. Exactly once, stats balance.
fn critical_displacer_and_routine_folder_race_a_pop(start: usize, preemptions: usize) {
    bounded(preemptions, move || {
        let q = DeadLetterQueue::with_capacity_starting_at(2, start).unwrap();
        assert_eq!(q.push(0u32, Idle), Ok(Pushed::Queued));
        assert_eq!(q.push(1u32, Idle), Ok(Pushed::Queued));
        let kick = Arc::new(AtomicUsize::new(0));
        let a = spawn_push(&q, &kick, 10, Critical);
        let b = spawn_push(&q, &kick, 11, Routine);
        kick.store(1, Ordering::Relaxed);
        let got: Vec<_> = q.pop().into_iter().collect();
        let fa = a.join().unwrap();
        let fb = b.join().unwrap();
        assert_ne!(fa.1, Fate::Full, "Critical refused: {fa:?} {fb:?} popped {got:?}");
        assert_ne!(fb.1, Fate::Full, "Routine refused: {fa:?} {fb:?} popped {got:?}");
        exactly_once(
            &q,
            &[(0, Idle), (1, Idle), (10, Critical), (11, Routine)],
            &got,
            &[fa, fb],
        );
    });
}

#[test]
fn ha_cap2_critical_displacer_and_routine_folder_race_a_pop() {
    critical_displacer_and_routine_folder_race_a_pop(0, 2);
}

/// The same with three preemptions.
#[test]
fn ha_cap2_critical_displacer_and_routine_folder_race_a_pop_3_preemptions() {
    critical_displacer_and_routine_folder_race_a_pop(0, 3);
}

#[test]
fn ha_cap2_critical_displacer_and_routine_folder_race_a_pop_wrapping() {
    critical_displacer_and_routine_folder_race_a_pop(usize::MAX, 2);
}

/// Capacity 1 holding `Idle` 0; the consumer pops once while a `Critical`
/// push (10) and an `Idle` push (11) race: the Idle one may fold the pop
/// while the Critical one is between its claim and its `fetch_add`, and
/// then be displaced by it, or be refused. The Critical push is never
/// refused (the only Critical item). Exactly once, stats balance.
fn cap1_fold_between_claim_and_fetch_add(start: usize, folder: Priority, preemptions: usize) {
    bounded(preemptions, move || {
        let q = DeadLetterQueue::with_capacity_starting_at(1, start).unwrap();
        assert_eq!(q.push(0u32, Idle), Ok(Pushed::Queued));
        let kick = Arc::new(AtomicUsize::new(0));
        let a = spawn_push(&q, &kick, 10, Critical);
        let b = spawn_push(&q, &kick, 11, folder);
        kick.store(1, Ordering::Relaxed);
        let got: Vec<_> = q.pop().into_iter().collect();
        let fa = a.join().unwrap();
        let fb = b.join().unwrap();
        assert_ne!(fa.1, Fate::Full, "Critical refused: {fa:?} {fb:?} popped {got:?}");
        exactly_once(&q, &[(0, Idle), (10, Critical), (11, folder)], &got, &[fa, fb]);
    });
}

#[test]
fn ha_cap1_idle_fold_between_claim_and_fetch_add() {
    cap1_fold_between_claim_and_fetch_add(0, Idle, 2);
}

#[test]
fn ha_cap1_routine_fold_between_claim_and_fetch_add_wrapping() {
    cap1_fold_between_claim_and_fetch_add(usize::MAX - 1, Routine, 2);
}

/// Capacity 2 holding `Idle` 0 and `Routine` 1; the consumer pops once
/// (Routine 1 first) while two `Critical` pushes (10, 11) race. At most
/// two Critical items ever, so at each Critical push at most one other is
/// counted and a lower item or room remains: neither is refused. Two
/// displacers, one of which may use the pop, and the pop folded by
/// neither (Critical pushes fold only when the word is full of pops).
#[test]
fn ha_cap2_two_critical_displacers_race_a_pop() {
    two_critical_displacers_race_a_pop(2);
}

/// The same with three preemptions.
#[test]
fn ha_cap2_two_critical_displacers_race_a_pop_3_preemptions() {
    two_critical_displacers_race_a_pop(3);
}

fn two_critical_displacers_race_a_pop(preemptions: usize) {
    bounded(preemptions, || {
        let q = DeadLetterQueue::with_capacity_starting_at(2, 0).unwrap();
        assert_eq!(q.push(0u32, Idle), Ok(Pushed::Queued));
        assert_eq!(q.push(1u32, Routine), Ok(Pushed::Queued));
        let kick = Arc::new(AtomicUsize::new(0));
        let a = spawn_push(&q, &kick, 10, Critical);
        let b = spawn_push(&q, &kick, 11, Critical);
        kick.store(1, Ordering::Relaxed);
        let got: Vec<_> = q.pop().into_iter().collect();
        let fa = a.join().unwrap();
        let fb = b.join().unwrap();
        assert_ne!(fa.1, Fate::Full, "Critical 10 refused: {fa:?} {fb:?} popped {got:?}");
        assert_ne!(fb.1, Fate::Full, "Critical 11 refused: {fa:?} {fb:?} popped {got:?}");
        exactly_once(
            &q,
            &[(0, Idle), (1, Routine), (10, Critical), (11, Critical)],
            &got,
            &[fa, fb],
        );
    });
}

/// Capacity 2 holding `Idle` 0 and 1, both popped before anything starts
/// but the first (so one pop is unfolded and one Idle item queued); then
/// the consumer pops again while two `Critical` displacers (10, 11) and a
/// `Routine` folder (12) race. One preemption (three producers). Critical
/// pushes are never refused (two at most); exactly once.
#[test]
fn ha_cap2_two_displacers_and_a_folder() {
    bounded(1, || {
        let q = DeadLetterQueue::with_capacity_starting_at(2, usize::MAX - 2).unwrap();
        assert_eq!(q.push(0u32, Idle), Ok(Pushed::Queued));
        assert_eq!(q.push(1u32, Idle), Ok(Pushed::Queued));
        assert_eq!(q.pop(), Some((0, Idle)));
        let kick = Arc::new(AtomicUsize::new(0));
        let a = spawn_push(&q, &kick, 10, Critical);
        let b = spawn_push(&q, &kick, 11, Critical);
        let c = spawn_push(&q, &kick, 12, Routine);
        kick.store(1, Ordering::Relaxed);
        let mut got = vec![(0, Idle)];
        got.extend(q.pop());
        let fa = a.join().unwrap();
        let fb = b.join().unwrap();
        let fc = c.join().unwrap();
        assert_ne!(
            fa.1,
            Fate::Full,
            "Critical 10 refused: {fa:?} {fb:?} {fc:?} popped {got:?}"
        );
        assert_ne!(
            fb.1,
            Fate::Full,
            "Critical 11 refused: {fa:?} {fb:?} {fc:?} popped {got:?}"
        );
        exactly_once(
            &q,
            &[(0, Idle), (1, Idle), (10, Critical), (11, Critical), (12, Routine)],
            &got,
            &[fa, fb, fc],
        );
    });
}

/// Capacity 1 holding `Critical` 0; the consumer pops it, then raises
/// `popped`. A waits for `popped`, then pushes `Critical` 10; B pushes
/// `Critical` 11 at any time (it may fold the pop, and be anywhere in that
/// fold when A looks). A may be refused only if B's item took the room.
fn critical_cap1_fold_of_critical_pop(start: usize, preemptions: usize) {
    bounded(preemptions, move || {
        let q = DeadLetterQueue::with_capacity_starting_at(1, start).unwrap();
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
        let b = spawn_push(&q, &kick, 11, Critical);
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
                "A refused with the queue empty but for B's: {fa:?} {fb:?}"
            );
        }
        assert!(
            !(fa.1 == Fate::Queued && fb.1 == Fate::Queued),
            "both queued at capacity 1 with no pop between: {fa:?} {fb:?}"
        );
        exactly_once(
            &q,
            &[(0, Critical), (10, Critical), (11, Critical)],
            &[got.unwrap()],
            &[fa, fb],
        );
    });
}

#[test]
fn ha_cap1_critical_push_races_a_fold_of_a_critical_pop() {
    critical_cap1_fold_of_critical_pop(0, 2);
}

#[test]
fn ha_cap1_critical_push_races_a_fold_of_a_critical_pop_wrapping() {
    critical_cap1_fold_of_critical_pop(usize::MAX, 2);
}

/// The same with three preemptions.
#[test]
fn ha_cap1_critical_push_races_a_fold_of_a_critical_pop_3_preemptions() {
    critical_cap1_fold_of_critical_pop(usize::MAX - 1, 3);
}

/// Capacity 2 holding `Critical` 0 and 1; the consumer pops both, then
/// raises `popped`. A waits for it and pushes `Critical` 10; B pushes
/// `Critical` 11 at any time, and may fold one or both pops. When A
/// pushes, the queue holds at most B's item: A is never refused.
#[test]
fn ha_cap2_critical_push_after_two_pops_with_a_folder() {
    bounded(2, || {
        let q = DeadLetterQueue::with_capacity_starting_at(2, usize::MAX - 1).unwrap();
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
        let b = spawn_push(&q, &kick, 11, Critical);
        kick.store(1, Ordering::Relaxed);
        let mut got = Vec::new();
        got.extend(q.pop());
        got.extend(q.pop());
        popped.store(1, Ordering::Release);
        let fa = a.join().unwrap();
        let fb = b.join().unwrap();
        assert_ne!(
            fa.1,
            Fate::Full,
            "A refused, the queue held at most B's item: {fa:?} {fb:?} {got:?}"
        );
        exactly_once(
            &q,
            &[(0, Critical), (1, Critical), (10, Critical), (11, Critical)],
            &got,
            &[fa, fb],
        );
    });
}

/// Capacity 1 holding `Idle` 0; the consumer pops once while a `Critical`
/// displacer (10) pushes and a reader reads `fallback_depth` and `len`.
/// The queue never holds more than one item, never more than one Idle,
/// one Critical: the reads stay within that.
#[test]
fn ha_cap1_reader_during_displacement_and_pop() {
    bounded(2, || {
        let q = DeadLetterQueue::with_capacity_starting_at(1, usize::MAX).unwrap();
        assert_eq!(q.push(0u32, Idle), Ok(Pushed::Queued));
        let kick = Arc::new(AtomicUsize::new(0));
        let a = spawn_push(&q, &kick, 10, Critical);
        let r = {
            let p = q.producer();
            let k = kick.clone();
            thread::spawn(move || {
                let _ = k.load(Ordering::Relaxed);
                let d = p.fallback_depth();
                assert!(d.total() <= 1 && d.routine == 0, "{d:?}");
                let s = p.stats();
                for class in Priority::ALL {
                    assert!(s.class(class).depth <= 1, "{s:?}");
                }
                assert!(p.len() <= 1);
            })
        };
        kick.store(1, Ordering::Relaxed);
        let got: Vec<_> = q.pop().into_iter().collect();
        let fa = a.join().unwrap();
        r.join().unwrap();
        assert_ne!(fa.1, Fate::Full, "Critical refused: {fa:?} popped {got:?}");
        exactly_once(&q, &[(0, Idle), (10, Critical)], &got, &[fa]);
    });
}

/// Capacity 1 holding `Idle` 0. A `Critical` push (10) races the
/// consumer's first pop; after the first pop the consumer pops again. If
/// the Critical push returned before the second pop began and 10 was not
/// popped by the first, the second pop returns it (it is queued: nothing
/// displaces Critical, nothing else pops).
#[test]
fn ha_cap1_displacer_use_of_a_pop_then_second_pop_sees_it() {
    bounded(2, || {
        let q = DeadLetterQueue::with_capacity_starting_at(1, usize::MAX - 1).unwrap();
        assert_eq!(q.push(0u32, Idle), Ok(Pushed::Queued));
        let kick = Arc::new(AtomicUsize::new(0));
        let done = Arc::new(AtomicUsize::new(0));
        let a = {
            let p = q.producer();
            let k = kick.clone();
            let done = done.clone();
            thread::spawn(move || {
                let _ = k.load(Ordering::Relaxed);
                let f = push(&p, 10, Critical);
                done.store(1, Ordering::Release);
                (10, f)
            })
        };
        kick.store(1, Ordering::Relaxed);
        let mut got: Vec<_> = q.pop().into_iter().collect();
        let returned = done.load(Ordering::Acquire) == 1;
        let first_had = got.iter().any(|x| x.0 == 10);
        let second = q.pop();
        if returned && !first_had {
            assert_eq!(second, Some((10, Critical)), "first pop {got:?}");
        }
        got.extend(second);
        let fa = a.join().unwrap();
        assert_ne!(fa.1, Fate::Full);
        exactly_once(&q, &[(0, Idle), (10, Critical)], &got, &[fa]);
    });
}

/// Capacity 2 holding `Routine` 0 and 1; the consumer pops once while a
/// `Critical` push (10) and an `Idle` push (11) race. The Idle push may
/// fold the Routine pop while the Critical one is between its claim of a
/// Routine item and its `fetch_add` (the fold takes `k = 1`, bounded by the
/// word's Routine count that the claim lowered), and the Critical one then
/// takes Routine 1 or, if the consumer popped it meanwhile, nothing.
/// The Critical push is never refused; exactly once, stats balance.
fn critical_displacer_and_idle_folder_race_a_routine_pop(start: usize, preemptions: usize) {
    bounded(preemptions, move || {
        let q = DeadLetterQueue::with_capacity_starting_at(2, start).unwrap();
        assert_eq!(q.push(0u32, Routine), Ok(Pushed::Queued));
        assert_eq!(q.push(1u32, Routine), Ok(Pushed::Queued));
        let kick = Arc::new(AtomicUsize::new(0));
        let a = spawn_push(&q, &kick, 10, Critical);
        let b = spawn_push(&q, &kick, 11, Idle);
        kick.store(1, Ordering::Relaxed);
        let got: Vec<_> = q.pop().into_iter().collect();
        let fa = a.join().unwrap();
        let fb = b.join().unwrap();
        assert_ne!(fa.1, Fate::Full, "Critical refused: {fa:?} {fb:?} popped {got:?}");
        exactly_once(
            &q,
            &[(0, Routine), (1, Routine), (10, Critical), (11, Idle)],
            &got,
            &[fa, fb],
        );
    });
}

#[test]
fn ha_cap2_critical_displacer_and_idle_folder_race_a_routine_pop() {
    critical_displacer_and_idle_folder_race_a_routine_pop(usize::MAX - 1, 2);
}

/// `ha_cap1_idle_fold_between_claim_and_fetch_add` with three preemptions.
#[test]
fn ha_cap1_idle_fold_between_claim_and_fetch_add_3_preemptions() {
    cap1_fold_between_claim_and_fetch_add(usize::MAX, Idle, 3);
}

/// Items that loom tracks (a leak fails the model; each is dropped once):
/// capacity 1 holding `Idle` 0; the consumer pops once while a `Critical`
/// displacer and an `Idle` folder push; the pusher drops what it is handed
/// back, the consumer what it pops, and the queue the rest when the last
/// handle goes (here a producer, on its thread, after the queue).
#[test]
fn ha_cap1_tracked_items_dropped_once_with_displacer_folder_and_pop() {
    use loom::alloc::Track;
    bounded(2, || {
        let q = DeadLetterQueue::with_capacity_starting_at(1, usize::MAX).unwrap();
        assert!(q.push(Track::new(0u32), Idle).is_ok());
        let kick = Arc::new(AtomicUsize::new(0));
        let spawn = |v: u32, class: Priority| {
            let p = q.producer();
            let k = kick.clone();
            thread::spawn(move || {
                let _ = k.load(Ordering::Relaxed);
                match p.push(Track::new(v), class) {
                    Ok(Pushed::Queued) => {}
                    Ok(Pushed::Displaced(old, oc)) => {
                        assert!(oc < class);
                        drop(old);
                    }
                    Err(Full(back)) => drop(back),
                }
                p
            })
        };
        let a = spawn(10, Critical);
        let b = spawn(11, Idle);
        kick.store(1, Ordering::Relaxed);
        drop(q.pop());
        let pa = a.join().unwrap();
        let pb = b.join().unwrap();
        drop(pa);
        drop(q);
        let t = thread::spawn(move || drop(pb));
        t.join().unwrap();
    });
}

/// Capacity 1, `Idle` 0 pushed and popped before anything starts (its pop
/// unfolded: the word is full of it). A `Routine` push (10, which must fold
/// the pop) and a `Critical` push (11, which folds it, or displaces 10, or
/// uses a pop) race the consumer, which reads how both pushes ended before
/// it pops: if both returned and one queued its item, the queue holds an
/// item throughout the pop (cap 1: whichever queued last is there; only
/// the consumer removes a Critical item), so the pop must not answer
/// `None`.
#[test]
fn ha_cap1_pop_after_a_fold_and_a_displacement_returned_is_not_none() {
    bounded(2, || {
        let q = DeadLetterQueue::with_capacity_starting_at(1, usize::MAX).unwrap();
        assert_eq!(q.push(0u32, Idle), Ok(Pushed::Queued));
        assert_eq!(q.pop(), Some((0, Idle)));
        let kick = Arc::new(AtomicUsize::new(0));
        let ends = Arc::new([AtomicUsize::new(0), AtomicUsize::new(0)]);
        let spawn = |i: usize, v: u32, class: Priority| {
            let p = q.producer();
            let k = kick.clone();
            let ends = ends.clone();
            thread::spawn(move || {
                let _ = k.load(Ordering::Relaxed);
                let f = push(&p, v, class);
                ends[i].store(if f == Fate::Full { 1 } else { 2 }, Ordering::Release);
                (v, f)
            })
        };
        let a = spawn(0, 10, Routine);
        let b = spawn(1, 11, Critical);
        kick.store(1, Ordering::Relaxed);
        let (ea, eb) = (ends[0].load(Ordering::Acquire), ends[1].load(Ordering::Acquire));
        let got = q.pop();
        if ea > 0 && eb > 0 && (ea == 2 || eb == 2) {
            assert!(
                got.is_some(),
                "pop answered None after both pushes returned ({ea}, {eb})"
            );
        }
        let fa = a.join().unwrap();
        let fb = b.join().unwrap();
        assert_ne!(fb.1, Fate::Full, "Critical refused: {fa:?} {fb:?} {got:?}");
        exactly_once(
            &q,
            &[(0, Idle), (10, Routine), (11, Critical)],
            &[(0, Idle)].into_iter().chain(got).collect::<Vec<_>>(),
            &[fa, fb],
        );
    });
}

/// Capacity 2 holding `Idle` 0 and 1, 0 popped before anything starts (one
/// pop unfolded); the consumer pops again (Idle 1) while a `Critical` push
/// (10) and a `Routine` push (11) race: both find the word full, either
/// may fold (one or two pops) or displace, the fold's CAS on `accounted`
/// may fail on the displacer's `fetch_add` and read again. Neither push
/// is refused (never fewer than one Idle item or pop free for each).
#[test]
fn ha_cap2_prepopped_displacer_and_folder_race_a_pop() {
    bounded(2, || {
        let q = DeadLetterQueue::with_capacity_starting_at(2, usize::MAX - 1).unwrap();
        assert_eq!(q.push(0u32, Idle), Ok(Pushed::Queued));
        assert_eq!(q.push(1u32, Idle), Ok(Pushed::Queued));
        assert_eq!(q.pop(), Some((0, Idle)));
        let kick = Arc::new(AtomicUsize::new(0));
        let a = spawn_push(&q, &kick, 10, Critical);
        let b = spawn_push(&q, &kick, 11, Routine);
        kick.store(1, Ordering::Relaxed);
        let mut got = vec![(0, Idle)];
        got.extend(q.pop());
        let fa = a.join().unwrap();
        let fb = b.join().unwrap();
        assert_ne!(fa.1, Fate::Full, "Critical refused: {fa:?} {fb:?} popped {got:?}");
        assert_ne!(fb.1, Fate::Full, "Routine refused: {fa:?} {fb:?} popped {got:?}");
        exactly_once(
            &q,
            &[(0, Idle), (1, Idle), (10, Critical), (11, Routine)],
            &got,
            &[fa, fb],
        );
    });
}

/// Capacity 3 holding `Idle` 0, 1, 2; the consumer pops twice while a
/// `Critical` push (10) and a `Routine` push (11) race: a fold of two pops
/// (`k = 2`) bounded by the word's Idle count while the displacer is
/// between its claim and its `fetch_add`. Neither is refused; exactly once.
#[test]
fn ha_cap3_two_pops_displacer_and_folder() {
    bounded(2, || {
        let q = DeadLetterQueue::with_capacity_starting_at(3, 0).unwrap();
        for v in 0..3u32 {
            assert_eq!(q.push(v, Idle), Ok(Pushed::Queued));
        }
        let kick = Arc::new(AtomicUsize::new(0));
        let a = spawn_push(&q, &kick, 10, Critical);
        let b = spawn_push(&q, &kick, 11, Routine);
        kick.store(1, Ordering::Relaxed);
        let mut got: Vec<_> = q.pop().into_iter().collect();
        got.extend(q.pop());
        let fa = a.join().unwrap();
        let fb = b.join().unwrap();
        assert_ne!(fa.1, Fate::Full, "Critical refused: {fa:?} {fb:?} popped {got:?}");
        assert_ne!(fb.1, Fate::Full, "Routine refused: {fa:?} {fb:?} popped {got:?}");
        exactly_once(
            &q,
            &[(0, Idle), (1, Idle), (2, Idle), (10, Critical), (11, Routine)],
            &got,
            &[fa, fb],
        );
    });
}
