//! Hostile review of a750eef (producers account for removals in
//! `accounted`; the consumer's pop only moves the head): a long
//! single-threaded life against a model with the consumer popping in
//! bursts (pops of several classes left unfolded at once), and real-thread
//! races with a bursty consumer (the word fills with unfolded pops of
//! several classes while displacers and folders race).
//!
//! Run: `cargo test --release --test dlq -- hostile_accounted:: --test-threads 1`
//! (each timed test runs for `HOSTILE_ACCOUNTED_SECS`, 3 by default).
//!
//! Result on a750eef: all passed; none failed.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use tailguard::dlq::{DeadLetterQueue, Full, Priority, Pushed};
use Priority::{Critical, Idle};

use super::assert_conserved;
use super::model::Modelled;

fn budget() -> Duration {
    super::race_budget("HOSTILE_ACCOUNTED_SECS", 3)
}

/// A xorshift64 generator (`super::xorshift`) as a value.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        super::xorshift(&mut self.0)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// One thread, capacities 1 to 5 and 8: bursts of pushes of random classes
/// (filling, folding, displacing, refused) and bursts of pops (leaving
/// pops of several classes unfolded in the word at once), every decision
/// and every count checked after every operation against a model.
#[test]
#[cfg_attr(miri, ignore = "hundreds of thousands of operations")]
fn ha_model_life_with_bursts_of_pops_and_pushes() {
    for cap in [1usize, 2, 3, 4, 5, 8] {
        let mut m = Modelled::new(cap);
        let mut rng = Rng(0x1234_5678 ^ cap as u64);
        for _ in 0..20_000 {
            let pushes = rng.below(2 * cap as u64 + 2);
            for _ in 0..pushes {
                let class = Priority::ALL[rng.below(3) as usize];
                m.push(class);
                m.check_counts();
            }
            let pops = rng.below(cap as u64 + 2);
            for _ in 0..pops {
                m.pop();
                m.check_counts();
            }
        }
    }
}

/// An item: producer, class, sequence number.
fn id(t: usize, class: Priority, seq: u64) -> u64 {
    ((t as u64) << 56) | ((class as u64) << 48) | seq
}
fn parts(v: u64) -> (usize, usize, u64) {
    ((v >> 56) as usize, ((v >> 48) & 0xff) as usize, v & ((1 << 48) - 1))
}

/// Three producers of mixed classes (weights differ per producer), a
/// reader, and a consumer that pops in bursts and then pauses (the word
/// fills with unfolded pops of several classes, and folders race
/// displacers that may use the same pops). Exactly once, FIFO per
/// producer and class among pops, displaced items below the pusher's
/// class and never `Critical`, counters match what the callers saw,
/// reads within the capacity, the final drain within the capacity.
fn bursty_exactly_once(cap: usize, run: Duration) {
    const P: usize = 3;
    let q: DeadLetterQueue<u64> = DeadLetterQueue::with_capacity(cap).unwrap();
    let stop = AtomicBool::new(false);
    let deadline = Instant::now() + run;
    let (outs, popped) = thread::scope(|s| {
        let hs: Vec<_> = (0..P)
            .map(|t| {
                let p = q.producer();
                let stop = &stop;
                s.spawn(move || {
                    let mut rng = Rng(0xDEAD_BEEF ^ (t as u64 + 7));
                    let mut seqs = [0u64; 3];
                    let mut out = Vec::new(); // handed back: displaced or refused
                    let mut displaced = [0u64; 3];
                    let mut refused = [0u64; 3];
                    while !stop.load(Ordering::Relaxed) {
                        let r = rng.below(10);
                        let c = match t {
                            0 => [0, 0, 0, 0, 1, 1, 1, 2, 2, 2][r as usize],
                            1 => [0, 1, 1, 1, 1, 2, 2, 2, 2, 2][r as usize],
                            _ => [0, 0, 0, 0, 0, 0, 1, 1, 2, 2][r as usize],
                        };
                        let class = Priority::ALL[c];
                        let v = id(t, class, seqs[c]);
                        seqs[c] += 1;
                        match p.push(v, class) {
                            Ok(Pushed::Queued) => {}
                            Ok(Pushed::Displaced(old, oc)) => {
                                assert!(oc < class && oc != Critical, "{class:?} displaced {oc:?}");
                                assert_eq!(parts(old).1, oc as usize);
                                displaced[oc as usize] += 1;
                                out.push(old);
                            }
                            Err(Full(back)) => {
                                assert_eq!(back, v);
                                refused[c] += 1;
                                out.push(back);
                            }
                        }
                    }
                    (out, seqs, displaced, refused)
                })
            })
            .collect();
        let reader = {
            let p = q.producer();
            let stop = &stop;
            s.spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let d = p.fallback_depth();
                    assert!(d.total() <= cap, "{d:?} at capacity {cap}");
                    assert!(p.len() <= cap);
                    let st = p.stats();
                    let depth: u64 = Priority::ALL.iter().map(|&c| st.class(c).depth).sum();
                    assert!(depth as usize <= cap, "{st:?}");
                }
            })
        };
        let mut rng = Rng(0xC0FFEE ^ cap as u64);
        let mut popped: Vec<u64> = Vec::new();
        let mut last = [[None::<u64>; 3]; P];
        let mut on_pop = |(v, class): (u64, Priority), popped: &mut Vec<u64>| {
            let (t, c, k) = parts(v);
            assert_eq!(c, class as usize);
            let l = &mut last[t][c];
            assert!(l.map_or(true, |x| x < k), "FIFO: ({t}, {c}) {k} after {l:?}");
            *l = Some(k);
            popped.push(v);
        };
        while Instant::now() < deadline {
            let burst = rng.below(2 * cap as u64 + 1);
            let mut prev = Critical;
            for _ in 0..burst {
                match q.pop() {
                    Some(x) => {
                        // Pops of one burst: a class above the last one's
                        // may show up (pushed meanwhile), nothing else to
                        // check here.
                        prev = x.1;
                        on_pop(x, &mut popped);
                    }
                    None => break,
                }
            }
            let _ = prev;
            for _ in 0..rng.below(2000) {
                std::hint::spin_loop();
            }
        }
        stop.store(true, Ordering::Relaxed);
        let outs: Vec<_> = hs.into_iter().map(|h| h.join().unwrap()).collect();
        reader.join().unwrap();
        let s = q.stats();
        assert_conserved(&s);
        let len = q.len();
        let mut drained = 0;
        while let Some(x) = q.pop() {
            on_pop(x, &mut popped);
            drained += 1;
        }
        assert!(drained <= cap, "drained {drained} at capacity {cap}");
        assert_eq!(len, drained);
        (outs, popped)
    });
    // Exactly once.
    let mut all: Vec<u64> = popped.clone();
    for (out, _, _, _) in &outs {
        all.extend(out);
    }
    all.sort_unstable();
    let total: u64 = outs.iter().map(|o| o.1.iter().sum::<u64>()).sum();
    assert_eq!(all.len() as u64, total, "items out vs pushed");
    for w in all.windows(2) {
        assert_ne!(w[0], w[1], "item {:?} came out twice", parts(w[0]));
    }
    for (t, (_, seqs, _, _)) in outs.iter().enumerate() {
        for (c, &n) in seqs.iter().enumerate() {
            for k in [0, n / 2, n.saturating_sub(1)] {
                if n > 0 {
                    assert!(
                        all.binary_search(&id(t, Priority::ALL[c], k)).is_ok(),
                        "item ({t}, {c}, {k}) lost"
                    );
                }
            }
        }
    }
    // Stats match the callers.
    let s = q.stats();
    assert_conserved(&s);
    for class in Priority::ALL {
        let c = class as usize;
        let st = s.class(class);
        let pushed: u64 = outs.iter().map(|o| o.1[c]).sum();
        let displaced: u64 = outs.iter().map(|o| o.2[c]).sum();
        let refused: u64 = outs.iter().map(|o| o.3[c]).sum();
        let pops = popped.iter().filter(|&&v| parts(v).1 == c).count() as u64;
        assert_eq!(
            (st.pushed, st.displaced, st.handed_back, st.popped, st.depth),
            (pushed, displaced, refused, pops, 0),
            "{class:?} at capacity {cap}"
        );
    }
}

#[test]
#[cfg_attr(miri, ignore = "real threads, timed")]
fn ha_bursty_consumer_exactly_once_fifo_and_counts() {
    for cap in [1usize, 2, 3, 4] {
        bursty_exactly_once(cap, budget() / 4);
    }
}

/// A `Critical` producer with at most `limit` items outstanding (it waits
/// until the consumer has popped all but `limit - 1` of them), two noise
/// producers of `Idle` and `Routine`, and a consumer that pops in bursts.
/// With `limit < cap`, at each `Critical` push fewer than `cap` items are
/// `Critical`: a refusal breaks the promise. Returns (refusals, pushes).
fn critical_gated_bursty(cap: usize, limit: u64, run: Duration) -> (u64, u64) {
    assert!(limit < cap as u64);
    let q: DeadLetterQueue<u64> = DeadLetterQueue::with_capacity(cap).unwrap();
    let stop = AtomicBool::new(false);
    let crit_popped = AtomicU64::new(0);
    let refused = AtomicU64::new(0);
    let pushes = AtomicU64::new(0);
    let deadline = Instant::now() + run;
    thread::scope(|s| {
        for t in 0..2usize {
            let p = q.producer();
            let stop = &stop;
            s.spawn(move || {
                let mut rng = Rng(0x5EED ^ (t as u64 + 1));
                let mut i = 0;
                while !stop.load(Ordering::Relaxed) {
                    let class = Priority::ALL[rng.below(2) as usize];
                    let _ = p.push(id(t + 1, class, i), class);
                    i += 1;
                }
            });
        }
        {
            let p = q.producer();
            let (stop, crit_popped, refused, pushes) = (&stop, &crit_popped, &refused, &pushes);
            s.spawn(move || {
                let mut queued = 0u64;
                let mut n = 0;
                while Instant::now() < deadline {
                    while crit_popped.load(Ordering::Acquire) + limit <= queued {
                        if stop.load(Ordering::Relaxed) {
                            return;
                        }
                        std::hint::spin_loop();
                    }
                    n += 1;
                    match p.push(id(0, Critical, queued), Critical) {
                        Ok(_) => queued += 1,
                        Err(Full(_)) => {
                            refused.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
                pushes.store(n, Ordering::Relaxed);
                stop.store(true, Ordering::Relaxed);
            });
        }
        let mut rng = Rng(0xB0B ^ cap as u64);
        let mut next = 0u64;
        let mut on_pop = |(v, c): (u64, Priority)| {
            if c == Critical {
                let (t, _, k) = parts(v);
                assert_eq!((t, k), (0, next), "Critical FIFO");
                next += 1;
                crit_popped.fetch_add(1, Ordering::Release);
            }
        };
        while !stop.load(Ordering::Relaxed) {
            for _ in 0..rng.below(cap as u64 + 2) {
                if let Some(x) = q.pop() {
                    on_pop(x);
                }
            }
            for _ in 0..rng.below(500) {
                std::hint::spin_loop();
            }
        }
        while let Some(x) = q.pop() {
            on_pop(x);
        }
    });
    assert_conserved(&q.stats());
    (refused.load(Ordering::Relaxed), pushes.load(Ordering::Relaxed))
}

#[test]
#[cfg_attr(miri, ignore = "real threads, timed")]
fn ha_critical_never_refused_below_capacity_with_a_bursty_consumer() {
    let mut bad = Vec::new();
    for (cap, limit) in [(2usize, 1u64), (3, 2), (3, 1), (5, 4)] {
        let (refused, pushes) = critical_gated_bursty(cap, limit, budget() / 4);
        if refused > 0 {
            bad.push(format!(
                "cap {cap} limit {limit}: {refused} of {pushes} Critical pushes refused"
            ));
        }
    }
    assert!(bad.is_empty(), "{bad:#?}");
}

/// The consumer pushes too, from inside `drain` (a replay that re-queues
/// some items one class down, and pushes fresh `Critical` ones): its own
/// pushes find the word full of its own unfolded pops and fold them, or
/// displace, racing two producers that displace and fold. The consumer
/// must never wait on itself (the test would hang), and every item goes
/// exactly one way: each fresh item is popped, displaced or refused once,
/// and each re-queued item is popped, displaced or refused again once.
#[test]
#[cfg_attr(miri, ignore = "real threads, timed")]
fn ha_consumer_pushes_from_drain_while_producers_race() {
    for cap in [1usize, 2, 3] {
        let q: DeadLetterQueue<u64> = DeadLetterQueue::with_capacity(cap).unwrap();
        let stop = AtomicBool::new(false);
        let deadline = Instant::now() + budget() / 3;
        // Every item id gets +1 when it enters the queue (queued or
        // displacing) and -1 when it leaves (popped and not re-queued,
        // displaced, refused).
        let outs = thread::scope(|s| {
            let hs: Vec<_> = (0..2usize)
                .map(|t| {
                    let p = q.producer();
                    let stop = &stop;
                    s.spawn(move || {
                        let mut rng = Rng(0xFACE ^ (t as u64 + 3));
                        let mut seq = 0u64;
                        let mut out = Vec::new();
                        let mut ins = Vec::new();
                        while !stop.load(Ordering::Relaxed) {
                            let class = Priority::ALL[rng.below(3) as usize];
                            let v = id(t, class, seq);
                            seq += 1;
                            ins.push(v);
                            match p.push(v, class) {
                                Ok(Pushed::Queued) => {}
                                Ok(Pushed::Displaced(old, oc)) => {
                                    assert!(oc < class);
                                    out.push(old);
                                }
                                Err(Full(back)) => out.push(back),
                            }
                        }
                        (ins, out)
                    })
                })
                .collect();
            let mut rng = Rng(0xABBA ^ cap as u64);
            let mut ins = Vec::new();
            let mut out = Vec::new();
            let mut popped = Vec::new();
            let mut seq = 0u64;
            while Instant::now() < deadline {
                let max = rng.below(cap as u64 + 2) as usize;
                q.drain(max, |v, class| {
                    let r = rng.below(4);
                    if r == 0 && class > Idle {
                        // Re-queue one class down.
                        let down = Priority::ALL[class as usize - 1];
                        match q.push(v, down) {
                            Ok(Pushed::Queued) => {}
                            Ok(Pushed::Displaced(old, oc)) => {
                                assert!(oc < down);
                                out.push(old);
                            }
                            Err(Full(back)) => out.push(back),
                        }
                    } else {
                        popped.push(v);
                    }
                    if r == 1 {
                        let w = id(7, Critical, seq);
                        seq += 1;
                        ins.push(w);
                        match q.push(w, Critical) {
                            Ok(Pushed::Queued) => {}
                            Ok(Pushed::Displaced(old, oc)) => {
                                assert!(oc < Critical);
                                out.push(old);
                            }
                            Err(Full(back)) => out.push(back),
                        }
                    }
                });
            }
            stop.store(true, Ordering::Relaxed);
            let mut outs: Vec<_> = hs.into_iter().map(|h| h.join().unwrap()).collect();
            let len = q.len();
            let mut drained = 0;
            while let Some((v, _)) = q.pop() {
                popped.push(v);
                drained += 1;
            }
            assert!(
                drained <= cap && drained == len,
                "drained {drained}, len {len}, cap {cap}"
            );
            out.extend(popped);
            outs.push((ins, out));
            outs
        });
        let mut ins: Vec<u64> = outs.iter().flat_map(|o| o.0.iter().copied()).collect();
        let mut out: Vec<u64> = outs.iter().flat_map(|o| o.1.iter().copied()).collect();
        ins.sort_unstable();
        out.sort_unstable();
        assert_eq!(ins.len(), out.len(), "cap {cap}: items in vs out");
        assert!(ins == out, "cap {cap}: some item lost or duplicated");
        assert_conserved(&q.stats());
    }
}
