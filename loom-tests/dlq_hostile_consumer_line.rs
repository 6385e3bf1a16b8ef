//! Two displacers racing both of a pop's looks: loom models from a hostile
//! review of a queue design whose consumer never writes the producers'
//! line (branch `consumer-line`); the defect they found is on main too.
//!
//! Run: `RUSTFLAGS="--cfg tailguard_loom" LOOM_MAX_PREEMPTIONS=2 cargo test --release --test loom dlq_hostile_consumer_line`
//! (the models set their own bound, 3; about 40 s each in release).
//!
//! Finding (fixed): `hcl_pop_none_while_a_returned_idle_item_is_queued_*`
//! failed: a pop answered `None` while an `Idle` item pushed (and
//! returned) before the pop began was queued throughout, when two
//! displacers each took the `Idle` head between a look's load of the head
//! and its load of that slot's `seq` (one displacer per look; the second
//! look only covered one). A pop now looks again at a class whose head
//! moved on while it looked.
#![cfg(tailguard_loom)]

use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::sync::Arc;
use loom::thread;

use tailguard::dlq::{DeadLetterQueue, Priority, Pushed};
use Priority::{Critical, Idle, Routine};

fn bounded(preemptions: usize, f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(preemptions);
    b.check(f);
}

/// Capacity 3 holding three `Idle` items, all pushed (and returned) by the
/// consumer's thread before anything else starts. Two producers each push
/// one item of class `high`, which displaces one `Idle` item each (the two
/// oldest: 0 and 1); the consumer pops once, concurrently. Item 2 is queued
/// from before the pop began until the pop answers (only the pop could take
/// it: two displacements take 0 and 1), so the pop must not answer `None`.
///
/// Each look of the pop loads the `Idle` head, then that head's `seq`: a
/// displacer that takes the head item in between makes the look see the
/// class empty. The second look (`look_again`) is there for one such race;
/// two displacers, one per look, make both looks miss, while the first
/// displacer's own item is not written yet (the second may finish: the
/// second look has passed the higher classes by then). Three preemptions:
/// consumer -> D1 (after the first look's head load), D1 -> consumer
/// (after D1's take), consumer -> D2 (after the second look's head load);
/// D2 then runs to its end.
fn two_displacers_race_both_looks(high: Priority) {
    let q = DeadLetterQueue::with_capacity_starting_at(3, 0).unwrap();
    for i in 0..3u32 {
        assert_eq!(q.push(i, Idle), Ok(Pushed::Queued));
    }
    let kick = Arc::new(AtomicUsize::new(0));
    let spawn = |v: u32| {
        let p = q.producer();
        let k = kick.clone();
        thread::spawn(move || {
            let _ = k.load(Ordering::Relaxed);
            match p.push(v, high) {
                Ok(Pushed::Displaced(old, Idle)) => Some(old),
                Ok(Pushed::Queued) => None,
                other => panic!("push of {high:?}: {other:?}"),
            }
        })
    };
    let (a, b) = (spawn(10), spawn(11));
    kick.store(1, Ordering::Relaxed);
    let got = q.pop();
    let da = a.join().unwrap();
    let db = b.join().unwrap();
    assert!(
        got.is_some(),
        "pop answered None while Idle item 2, pushed before the pop began, was queued (displaced: {da:?}, {db:?})"
    );
}

#[test]
fn hcl_pop_none_while_a_returned_idle_item_is_queued_routine_displacers() {
    bounded(3, || two_displacers_race_both_looks(Routine));
}

#[test]
fn hcl_pop_none_while_a_returned_idle_item_is_queued_critical_displacers() {
    bounded(3, || two_displacers_race_both_looks(Critical));
}
