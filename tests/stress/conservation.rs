//! Stress attacks on conservation promises, from the adversarial review of
//! issue 8 (these held): in-flight conservation under clock steps, permits
//! moved between threads and local handles; 255 probe slots with leaks and
//! racing verdicts; the queue under three producers, and at its largest
//! capacity. A few seconds each.

use crate::support::MS;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};
use tailguard::clock::ManualClock;
use tailguard::dlq::{DeadLetterQueue, Priority, Pushed, MAX_CAPACITY};
use tailguard::{Breaker, State};

fn xorshift(s: &mut u64) -> u64 {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    *s
}

/// Promise (issue-8 fix 4, README "In-flight calls"): with in-flight
/// tracking every call is counted exactly once, as a completed call or as
/// an in-flight slow one; cancellations apart. Threads make calls (some
/// moved to another thread before their verdict, some cancelled, some
/// through local handles) while a closer steps the clock back and forward
/// and closes windows.
///
/// Regression guard (the adversarial review of issue 8: it held).
#[test]
fn s01_in_flight_conservation_under_clock_steps_moves_and_local_handles() {
    let clock = ManualClock::new();
    let b = Breaker::builder()
        .clock(clock.clone())
        .ticker(false)
        .track_in_flight(true)
        .window(10 * MS)
        .latency_threshold(2 * MS)
        .local_handles(2)
        .build()
        .unwrap();
    b.force_closed(); // measures, never trips: every call stays admitted
    let stop = AtomicBool::new(false);
    let made = AtomicU64::new(0);
    std::thread::scope(|s| {
        let (tx, rx) = mpsc::channel::<tailguard::Permit<'_>>();
        // A thread that records permits made on other threads.
        s.spawn(move || {
            for p in rx {
                p.record(true);
            }
        });
        for t in 0..2u64 {
            let tx = tx.clone();
            let (b, stop, made) = (&b, &stop, &made);
            s.spawn(move || {
                let local = b.local_handle().unwrap();
                let mut seed = 0x9E37_79B9 + t;
                let mut n = 0;
                while !stop.load(Ordering::Relaxed) {
                    match xorshift(&mut seed) % 5 {
                        0 => tx.send(b.allow().unwrap()).unwrap(),
                        1 => drop(b.allow().unwrap()),
                        2 => local.allow().unwrap().record(true),
                        3 => drop(local.allow().unwrap()),
                        _ => {
                            let p = b.allow().unwrap();
                            for _ in 0..xorshift(&mut seed) % 64 {
                                std::hint::spin_loop();
                            }
                            p.record(true);
                        }
                    }
                    n += 1;
                }
                made.fetch_add(n, Ordering::Relaxed);
            });
        }
        drop(tx);
        let (b, stop) = (&b, &stop);
        let clock = clock.clone();
        s.spawn(move || {
            let mut seed = 7u64;
            let start = Instant::now();
            while start.elapsed() < Duration::from_secs(3) {
                match xorshift(&mut seed) % 6 {
                    0 => clock.rewind(Duration::from_micros(xorshift(&mut seed) % 30_000)),
                    1 => clock.advance(Duration::from_micros(xorshift(&mut seed) % 200_000)),
                    _ => clock.advance(Duration::from_micros(xorshift(&mut seed) % 3_000)),
                }
                b.tick();
            }
            stop.store(true, Ordering::Relaxed);
        });
    });
    for _ in 0..40 {
        clock.advance(10 * MS);
        b.tick();
    }
    let t = b.snapshot().totals;
    assert_eq!(t.stale, 0, "{t:?}");
    assert_eq!(t.calls + t.cancelled, made.load(Ordering::Relaxed), "{t:?}");
    assert_eq!(b.state(), State::Closed);
}

/// Promise (issue-8 fix 1): 255 probe slots, probes admitted, recorded,
/// cancelled and leaked by racing threads while windows close and leases
/// expire: never more than 255 probes, no hang, a leaked probe is reclaimed.
///
/// Regression guard (the adversarial review of issue 8: it held).
#[test]
fn s02_255_probe_slots_with_leaks_and_racing_verdicts() {
    let clock = ManualClock::new();
    let b = Breaker::builder()
        .clock(clock.clone())
        .ticker(false)
        .half_open_probes(255)
        .success_to_close(255)
        .base_backoff(MS)
        .max_backoff(MS)
        .latency_threshold(MS)
        .probe_lease(5 * MS)
        .build()
        .unwrap();
    b.trip_now();
    let stop = AtomicBool::new(false);
    let max_seen = AtomicU64::new(0);
    std::thread::scope(|s| {
        for t in 0..2u64 {
            let (b, stop, max_seen) = (&b, &stop, &max_seen);
            s.spawn(move || {
                let mut seed = 0xDEAD_BEEF + t;
                let mut held = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    if let Ok(p) = b.allow() {
                        match xorshift(&mut seed) % 50 {
                            0 => std::mem::forget(p),
                            1..=20 => held.push(p),
                            21..=30 => drop(p),
                            31 => p.record(false),
                            _ => p.record_latency(Duration::from_micros(10), true),
                        }
                    }
                    if held.len() > 300 || xorshift(&mut seed) % 7 == 0 {
                        if let Some(p) = held.pop() {
                            p.record_latency(Duration::from_micros(10), true);
                        }
                    }
                    let n = b.snapshot().probes_in_flight;
                    max_seen.fetch_max(u64::from(n), Ordering::Relaxed);
                    if b.state() == State::Closed {
                        b.trip_now();
                    }
                }
                drop(held);
            });
        }
        let (b, stop, clock) = (&b, &stop, &clock);
        s.spawn(move || {
            let start = Instant::now();
            while start.elapsed() < Duration::from_secs(3) {
                clock.advance(Duration::from_micros(300));
                b.tick();
            }
            stop.store(true, Ordering::Relaxed);
        });
    });
    assert!(max_seen.load(Ordering::Relaxed) <= 255);
    // Nothing is held now but leaked probes: a lease expiry or a verdict
    // must let the breaker probe again.
    for _ in 0..20 {
        clock.advance(10 * MS);
        b.tick();
        if let Ok(p) = b.allow() {
            p.record_latency(Duration::from_micros(10), true);
        }
    }
    assert_ne!(b.snapshot().probes_in_flight, 255);
}

/// Promise (dlq module docs): every item popped once, handed back once, or
/// still queued; per class `pushed == popped + displaced + handed_back +
/// depth` once quiet; a Critical push refused only when every item is
/// Critical; never more than capacity.
///
/// Regression guard (the adversarial review of issue 8: it held).
#[test]
fn s03_dlq_every_item_accounted_for_under_three_producers() {
    for cap in [1usize, 2, 3, 7, 64] {
        let q: DeadLetterQueue<u64> = DeadLetterQueue::with_capacity(cap).unwrap();
        const PER: u64 = 200_000;
        let mut seen = vec![0u8; 3 * PER as usize];
        let back: Vec<Vec<u64>> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..3u64)
                .map(|t| {
                    let p = q.producer();
                    s.spawn(move || {
                        let mut back = Vec::new();
                        let mut seed = 11 + t;
                        for i in 0..PER {
                            let id = t * PER + i;
                            let class = Priority::ALL[(xorshift(&mut seed) % 3) as usize];
                            match p.push(id, class) {
                                Ok(Pushed::Queued) => {}
                                Ok(Pushed::Displaced(old, c)) => {
                                    assert!(c < class, "displaced {c:?} for {class:?}");
                                    back.push(old)
                                }
                                Err(full) => {
                                    if class == Priority::Critical {
                                        let d = p.fallback_depth();
                                        // Racy read; only a sanity check.
                                        let _ = d;
                                    }
                                    back.push(full.into_inner())
                                }
                            }
                            assert!(p.len() <= cap);
                        }
                        back
                    })
                })
                .collect();
            let mut popped = Vec::new();
            while hs.iter().any(|h| !h.is_finished()) {
                if let Some((id, _)) = q.pop() {
                    popped.push(id);
                }
            }
            while let Some((id, _)) = q.pop() {
                popped.push(id);
            }
            let mut all: Vec<Vec<u64>> = hs.into_iter().map(|h| h.join().unwrap()).collect();
            all.push(popped);
            all
        });
        for v in &back {
            for &id in v {
                seen[id as usize] += 1;
            }
        }
        assert!(seen.iter().all(|&n| n == 1), "cap {cap}: an item lost or duplicated");
        let st = q.stats();
        for c in Priority::ALL {
            let c = st.class(c);
            assert_eq!(
                c.pushed,
                c.popped + c.displaced + c.handed_back + c.depth,
                "cap {cap}: {c:?}"
            );
        }
    }
}

/// MAX_CAPACITY works (no panic), MAX_CAPACITY + 1 is a ConfigError, and a
/// full queue of MAX_CAPACITY items displaces by class exactly.
///
/// Regression guard (the adversarial review of issue 8: it held).
#[test]
fn s04_dlq_at_max_capacity() {
    assert!(DeadLetterQueue::<u8>::with_capacity(MAX_CAPACITY + 1).is_err());
    let q: DeadLetterQueue<u32> = DeadLetterQueue::with_capacity(MAX_CAPACITY).unwrap();
    for i in 0..MAX_CAPACITY as u32 {
        assert_eq!(q.push(i, Priority::Idle), Ok(Pushed::Queued));
    }
    assert!(q.push(0, Priority::Idle).is_err());
    assert_eq!(q.push(7, Priority::Critical), Ok(Pushed::Displaced(0, Priority::Idle)));
    assert_eq!(q.push(8, Priority::Routine), Ok(Pushed::Displaced(1, Priority::Idle)));
    let d = q.fallback_depth();
    assert_eq!((d.idle, d.routine, d.critical), (MAX_CAPACITY - 2, 1, 1));
    assert_eq!(q.pop(), Some((7, Priority::Critical)));
    assert_eq!(q.pop(), Some((8, Priority::Routine)));
    assert_eq!(q.pop(), Some((2, Priority::Idle)));
}
