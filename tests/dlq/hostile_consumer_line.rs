//! Long lives and races of the public API, from a hostile review of a
//! queue design whose consumer never writes the producers' line (branch
//! `consumer-line`, not on main), kept as regression tests of any design:
//! single-threaded lives of millions of operations against a model (past
//! 2^21 and 2^22 operations of each kind), readers of the counts racing
//! displacements and pops, `Critical` refusals, and exactly-once delivery
//! under two producers.
//!
//! Run: `cargo test --release --test dlq hostile_consumer_line` (each timed
//! test runs for `HOSTILE_CL_SECS`, 3 by default).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use tailguard::dlq::{DeadLetterQueue, Full, Priority, Pushed, MAX_CAPACITY};
use Priority::{Critical, Idle, Routine};

use super::assert_conserved;
use super::model::Modelled;

fn budget() -> Duration {
    super::race_budget("HOSTILE_CL_SECS", 3)
}

/// A xorshift64 generator (`super::xorshift`) as a value.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        super::xorshift(&mut self.0)
    }
}

/// More than 2^22 admissions of every class, 2^22 displacements of `Idle`
/// and of `Routine`, and 2^22 pops of every class, one thread, capacity 3:
/// every position and counter goes round many times; every decision and
/// count must stay exact.
#[test]
#[cfg_attr(miri, ignore = "millions of operations")]
fn hcl_long_life_small_capacity_every_field_overflows() {
    let mut m = Modelled::new(3);
    // Each round: fill with Idle, displace with Routine, displace with
    // Critical, refused Critical, pop everything; and a churn of mixed ops.
    for round in 0..1_500_000u64 {
        m.push(Idle);
        m.push(Idle);
        m.push(Routine);
        m.push(Routine); // displaces Idle
        m.push(Critical); // displaces Idle
        m.push(Critical); // displaces Routine
        m.push(Idle); // refused
        m.push(Routine); // refused... Routine present, no lower: refused
        m.pop();
        m.push(Critical);
        m.push(Critical); // displaces the Routine (the last)
        m.push(Critical); // refused: all Critical
        if round % 65_536 == 0 {
            m.check_counts();
        }
        m.pop();
        m.pop();
        m.pop();
        assert!(m.q.pop().is_none());
    }
    m.check_counts();
    let s = m.q.stats();
    assert!(
        s.idle.queued > 1 << 21 && s.routine.displaced > 1 << 21 && s.critical.popped > 1 << 22,
        "{s:?}"
    );
}

/// A random long life at capacity 1000, over 2^22 operations of each kind,
/// checked against the model, counts checked often.
#[test]
#[cfg_attr(miri, ignore = "millions of operations")]
fn hcl_long_life_random_mid_capacity() {
    let mut m = Modelled::new(1000);
    let mut rng = Rng(0xDEAD_BEEF_1234_5678);
    for i in 0..30_000_000u64 {
        let r = rng.next();
        // Keep the queue near full so that displacement and refusal are common.
        if r % 16 < 9 {
            m.push(Priority::ALL[(r >> 8) as usize % 3]);
        } else {
            m.pop();
        }
        if i % 1_000_003 == 0 {
            m.check_counts();
        }
    }
    m.check_counts();
}

/// Capacity `MAX_CAPACITY` filled with mixed classes, its fields at their
/// largest, then churned past the 2^21 and 2^22 laps, then emptied.
#[test]
#[cfg_attr(miri, ignore = "millions of operations")]
fn hcl_max_capacity_filled_churned_emptied() {
    let mut m = Modelled::new(MAX_CAPACITY);
    for i in 0..MAX_CAPACITY {
        m.push(Priority::ALL[i % 3]);
    }
    m.check_counts();
    // Full: Critical displaces Idle, then Routine, until all are Critical.
    for _ in 0..(2 * MAX_CAPACITY / 3 + 5) {
        m.push(Critical);
    }
    m.check_counts();
    assert_eq!(m.q.fallback_depth().critical, MAX_CAPACITY);
    m.push(Critical);
    m.push(Idle);
    // Pop half, refill with Idle and Routine, churn.
    for _ in 0..MAX_CAPACITY / 2 {
        m.pop();
    }
    let mut rng = Rng(42);
    for _ in 0..6_000_000u64 {
        let r = rng.next();
        if r % 2 == 0 {
            m.push(Priority::ALL[(r >> 8) as usize % 3]);
        } else {
            m.pop();
        }
    }
    m.check_counts();
    while m.len() > 0 {
        m.pop();
    }
    m.check_counts();
    assert!(m.q.pop().is_none());
}

/// Readers hammer `len`, `fallback_depth` and `stats` while two producers
/// push every class at capacity `cap` (so they displace and are refused)
/// and the consumer pops: no read over the capacity, no class over the
/// capacity or over the items of it ever queued (read after), and once
/// quiet the stats conserve.
fn readers_see_possible_counts(cap: usize, budget: Duration) {
    let q: DeadLetterQueue<u64> = DeadLetterQueue::with_capacity(cap).unwrap();
    let stop = AtomicBool::new(false);
    let deadline = Instant::now() + budget;
    let reads = AtomicU64::new(0);
    thread::scope(|s| {
        for t in 0..2u64 {
            let p = q.producer();
            let stop = &stop;
            s.spawn(move || {
                let mut rng = Rng(0x1234_5678 + t);
                let mut k = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let class = Priority::ALL[(rng.next() % 3) as usize];
                    let _ = p.push(k, class);
                    k += 1;
                }
            });
        }
        let reader = q.producer();
        let (stop_r, reads) = (&stop, &reads);
        s.spawn(move || {
            while !stop_r.load(Ordering::Relaxed) {
                let d = reader.fallback_depth();
                let len = reader.len();
                let st = reader.stats();
                assert!(d.total() <= cap, "fallback_depth {d:?} over capacity {cap}");
                assert!(len <= cap, "len {len} over capacity {cap}");
                let sd = [st.idle.depth, st.routine.depth, st.critical.depth];
                assert!(sd.iter().sum::<u64>() <= cap as u64, "stats depth {sd:?} over {cap}");
                // An item is counted from its admission, before its push
                // takes a position in the ring (`queued`): each of the two
                // producers may be between the two.
                const IN_TRANSIT: u64 = 2;
                for (c, &depth) in sd.iter().enumerate() {
                    let cs = st.class(Priority::ALL[c]);
                    assert!(
                        depth <= cs.queued + IN_TRANSIT,
                        "{:?}: depth {depth} > queued {} + {IN_TRANSIT} in transit",
                        Priority::ALL[c],
                        cs.queued
                    );
                }
                let after = reader.stats();
                for c in Priority::ALL {
                    assert!(
                        d.class(c) as u64 <= after.class(c).queued + IN_TRANSIT,
                        "{c:?} {d:?} {after:?}"
                    );
                }
                reads.fetch_add(1, Ordering::Relaxed);
            }
        });
        let mut popped = 0u64;
        while Instant::now() < deadline {
            for _ in 0..64 {
                if q.pop().is_some() {
                    popped += 1;
                }
            }
        }
        stop.store(true, Ordering::Relaxed);
        assert!(popped > 0);
    });
    assert_conserved(&q.stats());
    let depth = q.len();
    let mut left = 0;
    while q.pop().is_some() {
        left += 1;
    }
    assert_eq!(left, depth);
    assert_eq!(q.len(), 0);
    assert!(reads.load(Ordering::Relaxed) > 0);
}

#[test]
#[cfg_attr(miri, ignore = "seconds of racing threads; loom covers it")]
fn hcl_readers_see_possible_counts_cap_1_2_3() {
    for cap in 1..=3 {
        readers_see_possible_counts(cap, budget() / 3);
    }
}

/// One producer pushes `Critical` items only, another pushes `Idle` items
/// only, the consumer pops, capacity `cap`. A `Critical` push may be
/// refused only if every item counted at one instant during it is
/// `Critical`: so, if every `Critical` item queued before it has been
/// popped before it began (the consumer says so through an atomic it bumps
/// after each `Critical` pop) and no other thread pushes `Critical`, there
/// is no `Critical` item in the queue during the push and a refusal breaks
/// the promise.
fn critical_refused_only_when_all_critical(cap: usize, budget: Duration) -> Option<String> {
    let q: DeadLetterQueue<u64> = DeadLetterQueue::with_capacity(cap).unwrap();
    let stop = AtomicBool::new(false);
    let crit_popped = AtomicU64::new(0);
    let deadline = Instant::now() + budget;
    thread::scope(|s| {
        let pi = q.producer();
        let stop_i = &stop;
        s.spawn(move || {
            let mut k = 0;
            while !stop_i.load(Ordering::Relaxed) {
                let _ = pi.push(k, Idle);
                k += 1;
            }
        });
        let pc = q.producer();
        let (stop_c, crit_popped_c) = (&stop, &crit_popped);
        let crit = s.spawn(move || {
            let mut queued = 0u64;
            let mut k = 0;
            while !stop_c.load(Ordering::Relaxed) {
                let before = crit_popped_c.load(Ordering::Acquire);
                match pc.push(k, Critical) {
                    Ok(_) => queued += 1,
                    Err(Full(_)) => {
                        if before == queued {
                            stop_c.store(true, Ordering::Relaxed);
                            return Some(format!(
                                "Critical push refused with no Critical item queued (all {queued} popped before it began), capacity {cap}"
                            ));
                        }
                    }
                }
                k += 1;
            }
            None
        });
        while Instant::now() < deadline && !stop.load(Ordering::Relaxed) {
            if let Some((_, c)) = q.pop() {
                if c == Critical {
                    crit_popped.fetch_add(1, Ordering::Release);
                }
            }
        }
        stop.store(true, Ordering::Relaxed);
        crit.join().unwrap()
    })
}

#[test]
#[cfg_attr(miri, ignore = "seconds of racing threads; loom covers it")]
fn hcl_critical_refused_only_when_every_item_is_critical() {
    for cap in 1..=3 {
        if let Some(e) = critical_refused_only_when_all_critical(cap, budget() / 3) {
            panic!("{e}");
        }
    }
}

/// Exactly-once and class order across a long concurrent life: two
/// producers (each tagging its items with class and sequence), the
/// consumer pops; over 2^22 operations at a small capacity, so the net
/// word's fields overflow while threads race. Each item is popped,
/// displaced, refused or left, once; per producer and class, pops are in
/// push order; a displaced item is never `Critical` and never of the
/// pusher's class or above.
#[test]
#[cfg_attr(miri, ignore = "seconds of racing threads; loom covers it")]
fn hcl_concurrent_long_life_exactly_once_and_fifo() {
    const PER: u64 = 3_000_000;
    let q: DeadLetterQueue<(u64, u8, u64)> = DeadLetterQueue::with_capacity(3).unwrap();
    let done = AtomicU64::new(0);
    thread::scope(|s| {
        let hs: Vec<_> = (0..2u64)
            .map(|t| {
                let p = q.producer();
                let done = &done;
                s.spawn(move || {
                    let mut rng = Rng(0xABCD + t);
                    let mut out = Vec::new(); // (producer, class, seq) handed back
                    let mut seqs = [0u64; 3];
                    for _ in 0..PER {
                        let c = (rng.next() % 3) as usize;
                        let item = (t, c as u8, seqs[c]);
                        seqs[c] += 1;
                        match p.push(item, Priority::ALL[c]) {
                            Ok(Pushed::Queued) => {}
                            Ok(Pushed::Displaced(old, oc)) => {
                                assert!((oc as usize) < c, "displaced {oc:?} by {c}");
                                assert_eq!(old.1 as usize, oc as usize);
                                out.push(old);
                            }
                            Err(Full(back)) => out.push(back),
                        }
                    }
                    done.fetch_add(1, Ordering::Release);
                    (out, seqs)
                })
            })
            .collect();
        // Per (producer, class): how many times each sequence number came
        // out (popped or handed back), and the last popped (FIFO).
        let mut times: Vec<Vec<u8>> = (0..6).map(|_| vec![0u8; PER as usize]).collect();
        let mut last = [[None::<u64>; 3]; 2];
        loop {
            let finished = done.load(Ordering::Acquire) == 2;
            match q.pop() {
                Some(((t, c, k), class)) => {
                    assert_eq!(c as usize, class as usize);
                    let l = &mut last[t as usize][c as usize];
                    assert!(l.map_or(true, |x| x < k), "FIFO broken: {t} {c} {k} after {l:?}");
                    *l = Some(k);
                    times[t as usize * 3 + c as usize][k as usize] += 1;
                }
                None if finished => break,
                None => {}
            }
        }
        let outs: Vec<_> = hs.into_iter().map(|h| h.join().unwrap()).collect();
        for (out, _) in &outs {
            for &(t, c, k) in out {
                times[t as usize * 3 + c as usize][k as usize] += 1;
            }
        }
        for (t, (_, seqs)) in outs.iter().enumerate() {
            for c in 0..3 {
                let v = &times[t * 3 + c];
                for (k, &n) in v.iter().enumerate().take(seqs[c] as usize) {
                    assert_eq!(n, 1, "item ({t}, {c}, {k}) came out {n} times");
                }
            }
        }
    });
    assert_eq!(q.len(), 0);
    assert_conserved(&q.stats());
}
