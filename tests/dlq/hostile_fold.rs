//! Races of the fold of the consumer's pops into the occupancy word, from
//! a hostile review of its first version. Real threads, release build.
//!
//! Run: `cargo test --release --test dlq hostile_fold` (each timed test
//! runs for `HOSTILE_FOLD_SECS`, 3 by default, per configuration).

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use tailguard::dlq::{DeadLetterQueue, Full, Priority, Pushed};
use Priority::{Critical, Idle, Routine};

use super::assert_conserved;

fn budget() -> Duration {
    super::race_budget("HOSTILE_FOLD_SECS", 3)
}

/// A xorshift64 generator (`super::xorshift`) as a value.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        super::xorshift(&mut self.0)
    }
}

/// An item: producer, class, sequence number.
fn id(t: usize, class: Priority, seq: u64) -> u64 {
    ((t as u64) << 56) | ((class as u64) << 48) | seq
}
fn parts(v: u64) -> (usize, usize, u64) {
    ((v >> 56) as usize, ((v >> 48) & 0xff) as usize, v & ((1 << 48) - 1))
}

/// `gated` producers push class `gated_class` only, each at most `limit`
/// items outstanding (it pushes only once the consumer has popped all but
/// `limit - 1` of its items of the class that were queued); `noise`
/// producers push every class below `gated_class` at random; the consumer
/// pops. `gated_class` items are displaced by nothing (no higher class is
/// pushed), so at a gated push at most `gated * limit - 1` items of
/// `gated_class` are counted; with that below the capacity a refusal
/// breaks "refused only if every counted item is of its class or above".
/// Returns (refusals, gated pushes).
fn gated_never_refused(
    cap: usize,
    gated_class: Priority,
    gated: usize,
    limit: u64,
    noise: usize,
    run: Duration,
) -> (u64, u64) {
    assert!(gated as u64 * limit - 1 < cap as u64);
    let q: DeadLetterQueue<u64> = DeadLetterQueue::with_capacity(cap).unwrap();
    let stop = AtomicBool::new(false);
    let popped_of: Vec<AtomicU64> = (0..gated).map(|_| AtomicU64::new(0)).collect();
    let refused = AtomicU64::new(0);
    let pushes = AtomicU64::new(0);
    let deadline = Instant::now() + run;
    thread::scope(|s| {
        for t in 0..gated {
            let p = q.producer();
            let (stop, popped_of, refused, pushes) = (&stop, &popped_of, &refused, &pushes);
            s.spawn(move || {
                let mut queued = 0u64;
                let mut n = 0u64;
                while Instant::now() < deadline {
                    while popped_of[t].load(Ordering::Acquire) + limit <= queued {
                        if stop.load(Ordering::Relaxed) {
                            return;
                        }
                        std::hint::spin_loop();
                    }
                    n += 1;
                    match p.push(id(t, gated_class, queued), gated_class) {
                        Ok(Pushed::Queued) => queued += 1,
                        Ok(Pushed::Displaced(old, oc)) => {
                            assert!(oc < gated_class, "{gated_class:?} displaced {oc:?} {:?}", parts(old));
                            queued += 1;
                        }
                        Err(Full(_)) => {
                            refused.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
                pushes.fetch_add(n, Ordering::Relaxed);
                stop.store(true, Ordering::Relaxed);
            });
        }
        for t in 0..noise {
            let p = q.producer();
            let stop = &stop;
            s.spawn(move || {
                let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ (t as u64 + 1));
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let class = Priority::ALL[(rng.next() % gated_class as u64) as usize];
                    let _ = p.push(id(gated + t, class, i), class);
                    i += 1;
                }
            });
        }
        let (stop, popped_of) = (&stop, &popped_of);
        let q = &q;
        {
            let mut next = vec![0u64; gated];
            let mut on_pop = |(v, c): (u64, Priority)| {
                let (t, vc, seq) = parts(v);
                assert_eq!(vc, c as usize);
                if c == gated_class && t < gated {
                    assert_eq!(seq, next[t], "FIFO of gated producer {t}");
                    next[t] += 1;
                    popped_of[t].fetch_add(1, Ordering::Release);
                }
            };
            while !stop.load(Ordering::Relaxed) {
                if let Some(x) = q.pop() {
                    on_pop(x);
                }
            }
            while let Some(x) = q.pop() {
                on_pop(x);
            }
        }
    });
    assert_conserved(&q.stats());
    (refused.load(Ordering::Relaxed), pushes.load(Ordering::Relaxed))
}

/// Two `Critical` producers, each with at most one item outstanding, and
/// `Idle`/`Routine` noise, at capacity 2 and 3: at most one `Critical`
/// item is counted at a `Critical` push, so none is ever refused. The two
/// race to fold the consumer's `Critical` pops (and displace the noise).
#[test]
#[cfg_attr(miri, ignore = "seconds of racing threads; loom covers it")]
fn hf_two_critical_folders_never_refused() {
    let mut bad = Vec::new();
    for cap in [2, 3] {
        for noise in [0, 1] {
            let (refused, pushes) = gated_never_refused(cap, Critical, 2, 1, noise, budget() / 4);
            if refused > 0 {
                bad.push(format!(
                    "cap {cap} noise {noise}: {refused} of {pushes} Critical pushes refused"
                ));
            }
        }
    }
    assert!(bad.is_empty(), "{bad:#?}");
}

/// One `Critical` producer with up to `cap - 1` items outstanding, no
/// noise: the queue only ever holds `Critical` items, the word fills with
/// the consumer's `Critical` pops and the producer folds them; it must
/// never be refused.
#[test]
#[cfg_attr(miri, ignore = "seconds of racing threads; loom covers it")]
fn hf_critical_alone_below_capacity_never_refused() {
    let mut bad = Vec::new();
    for cap in [2usize, 3, 8] {
        let (refused, pushes) = gated_never_refused(cap, Critical, 1, cap as u64 - 1, 0, budget() / 6);
        if refused > 0 {
            bad.push(format!("cap {cap}: {refused} of {pushes} Critical pushes refused"));
        }
        let (refused, pushes) = gated_never_refused(cap, Critical, 1, cap as u64 - 1, 2, budget() / 6);
        if refused > 0 {
            bad.push(format!(
                "cap {cap} with noise: {refused} of {pushes} Critical pushes refused"
            ));
        }
    }
    assert!(bad.is_empty(), "{bad:#?}");
}

/// A `Routine` producer with one item outstanding and two `Idle`
/// producers, capacity 1 and 2: a `Routine` push is refused only if every
/// counted item is `Routine` (or `Critical`: none here); with none of its
/// own counted it must queue or displace an `Idle` item, which races the
/// consumer's pops of `Idle` (the displacer's `Claimed::Pop`).
#[test]
#[cfg_attr(miri, ignore = "seconds of racing threads; loom covers it")]
fn hf_routine_displacer_vs_idle_pops_never_refused() {
    let mut bad = Vec::new();
    for cap in [1usize, 2] {
        let (refused, pushes) = gated_never_refused(cap, Routine, 1, 1, 2, budget() / 2);
        if refused > 0 {
            bad.push(format!("cap {cap}: {refused} of {pushes} Routine pushes refused"));
        }
    }
    assert!(bad.is_empty(), "{bad:#?}");
}

/// Three producers of mixed classes, the consumer, and a reader, at
/// capacity 1, 2 and 3: every item goes exactly one way (popped, displaced,
/// refused, or left and drained), pops of each producer's class in order,
/// a displaced item is of a class below its displacer's and never
/// `Critical`; the counters of `Stats` match the results the callers saw
/// (in particular a displacement that met a pop, `Pushed::Queued`, counts
/// no displacement); reads never exceed the capacity.
#[test]
#[cfg_attr(miri, ignore = "seconds of racing threads; loom covers it")]
fn hf_exactly_once_and_stats_match_what_callers_saw() {
    for cap in [1usize, 2, 3] {
        exactly_once_run(cap, budget() / 3);
    }
}

/// What one producer of `exactly_once_run` saw: its pushed items, and the
/// counts and items of each fate.
type ProducerSaw = (Vec<u64>, [u64; 3], [u64; 3], [u64; 3], Vec<u64>);

fn exactly_once_run(cap: usize, run: Duration) {
    const P: usize = 3;
    let q: DeadLetterQueue<u64> = DeadLetterQueue::with_capacity(cap).unwrap();
    let stop = AtomicBool::new(false);
    let over = AtomicUsize::new(0);
    let deadline = Instant::now() + run;
    // Per producer: (sequence numbers pushed per class, fates).
    let results: Vec<ProducerSaw> = thread::scope(|s| {
        let hs: Vec<_> = (0..P)
            .map(|t| {
                let p = q.producer();
                let stop = &stop;
                s.spawn(move || {
                    let mut rng = Rng(0xD1B5_4A32_D192_ED03 ^ (t as u64 * 7919 + 3));
                    let mut seq = [0u64; 3];
                    let mut ok = [0u64; 3];
                    let mut displaced = [0u64; 3];
                    let mut refused = [0u64; 3];
                    let mut gone = Vec::new(); // items handed back (displaced or refused)
                    while !stop.load(Ordering::Relaxed) {
                        let class = Priority::ALL[(rng.next() % 3) as usize];
                        let c = class as usize;
                        let v = id(t, class, seq[c]);
                        seq[c] += 1;
                        match p.push(v, class) {
                            Ok(Pushed::Queued) => ok[c] += 1,
                            Ok(Pushed::Displaced(old, oc)) => {
                                ok[c] += 1;
                                assert!(oc < class && oc != Critical, "{class:?} displaced {oc:?}");
                                assert_eq!(parts(old).1, oc as usize);
                                displaced[oc as usize] += 1;
                                gone.push(old);
                            }
                            Err(Full(back)) => {
                                assert_eq!(back, v);
                                refused[c] += 1;
                                gone.push(back);
                            }
                        }
                    }
                    (seq.to_vec(), ok, displaced, refused, gone)
                })
            })
            .collect();
        {
            let r = q.producer();
            let (stop, over) = (&stop, &over);
            s.spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let d = r.fallback_depth();
                    if d.total() > cap || r.len() > cap {
                        over.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
        let mut popped = Vec::new();
        while Instant::now() < deadline {
            if let Some((v, c)) = q.pop() {
                assert_eq!(parts(v).1, c as usize);
                popped.push(v);
            }
        }
        stop.store(true, Ordering::Relaxed);
        let mut res: Vec<_> = hs.into_iter().map(|h| h.join().unwrap()).collect();
        while let Some((v, _)) = q.pop() {
            popped.push(v);
        }
        res.push((Vec::new(), [0; 3], [0; 3], [0; 3], popped));
        res
    });
    assert_eq!(over.load(Ordering::Relaxed), 0, "cap {cap}: reads over the capacity");
    let popped = &results[P].4;
    // FIFO per producer and class among pops.
    let mut last = std::collections::HashMap::new();
    let mut popped_per_class = [0u64; 3];
    for &v in popped {
        let (t, c, s) = parts(v);
        popped_per_class[c] += 1;
        if let Some(prev) = last.insert((t, c), s) {
            assert!(s > prev, "cap {cap}: producer {t} class {c}: {s} after {prev}");
        }
    }
    // Exactly once.
    let mut all: Vec<u64> = popped.clone();
    for r in &results[..P] {
        all.extend(&r.4);
    }
    all.sort_unstable();
    let n_all = all.len();
    all.dedup();
    assert_eq!(all.len(), n_all, "cap {cap}: an item came out twice");
    let pushed_total: u64 = results[..P].iter().map(|r| r.0.iter().sum::<u64>()).sum();
    assert_eq!(n_all as u64, pushed_total, "cap {cap}: items lost");
    // Stats against what callers saw.
    let s = q.stats();
    assert_conserved(&s);
    for class in Priority::ALL {
        let c = class as usize;
        let st = s.class(class);
        let ok: u64 = results[..P].iter().map(|r| r.1[c]).sum();
        let displaced: u64 = results[..P].iter().map(|r| r.2[c]).sum();
        let refused: u64 = results[..P].iter().map(|r| r.3[c]).sum();
        assert_eq!(
            (st.queued, st.displaced, st.handed_back, st.popped, st.depth),
            (ok, displaced, refused, popped_per_class[c], 0),
            "cap {cap} {class:?}: {st:?}"
        );
    }
    assert_eq!(q.len(), 0);
}

/// One thread, capacity 1 and 2: a displacer that finds the word full of an
/// item the consumer popped but whose pop is not folded folds it (Queued);
/// then with every pop folded it displaces. Checked against the exact
/// expected results, and `len`/`fallback_depth` after each step.
#[test]
fn hf_single_thread_folds_then_displaces_capacity_1_and_2() {
    let q = DeadLetterQueue::with_capacity(1).unwrap();
    assert_eq!(q.push(0u32, Idle), Ok(Pushed::Queued));
    assert_eq!(q.pop(), Some((0, Idle)));
    assert_eq!(q.len(), 0);
    assert_eq!(q.push(1, Critical), Ok(Pushed::Queued), "fold of the Idle pop");
    assert_eq!(q.len(), 1);
    assert_eq!(q.push(2, Critical), Err(Full(2)));
    assert_eq!(q.pop(), Some((1, Critical)));
    assert_eq!(q.push(3, Idle), Ok(Pushed::Queued), "fold of the Critical pop");
    assert_eq!(q.push(4, Routine), Ok(Pushed::Displaced(3, Idle)));
    assert_eq!(q.push(5, Critical), Ok(Pushed::Displaced(4, Routine)));
    assert_eq!(q.fallback_depth().critical, 1);
    assert_eq!(q.pop(), Some((5, Critical)));
    assert_eq!(q.pop(), None);
    assert_conserved(&q.stats());

    let q = DeadLetterQueue::with_capacity(2).unwrap();
    assert_eq!(q.push(0u32, Idle), Ok(Pushed::Queued));
    assert_eq!(q.push(1, Routine), Ok(Pushed::Queued));
    assert_eq!(q.pop(), Some((1, Routine)));
    // Word: Idle 1, Routine 1 (popped, unfolded). A Critical push folds.
    assert_eq!(q.push(2, Critical), Ok(Pushed::Queued));
    let d = q.fallback_depth();
    assert_eq!((d.idle, d.routine, d.critical), (1, 0, 1));
    assert_eq!(q.push(3, Critical), Ok(Pushed::Displaced(0, Idle)));
    assert_eq!(q.push(4, Critical), Err(Full(4)));
    assert_eq!(q.pop(), Some((2, Critical)));
    assert_eq!(q.pop(), Some((3, Critical)));
    assert_eq!(q.pop(), None);
    assert_eq!(q.len(), 0);
    let s = q.stats();
    assert_conserved(&s);
    assert_eq!((s.idle.displaced, s.routine.popped, s.critical.handed_back), (1, 1, 1));
}
