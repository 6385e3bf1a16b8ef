//! Stress (issue 10): four threads against one breaker with the ticker
//! running, a consumer that flips between healthy, slow and failing every
//! 50 ms, and what the breaker rejects diverted into a dead-letter queue
//! that a fifth thread drains. Checked throughout: probes in flight never
//! above the limit, generations strictly increasing in the listener. Checked
//! at the end: every permit resolved and counted exactly once (calls counted
//! over the closed windows + stale + cancelled = permits handed out), every
//! transition delivered or counted lost, and no trigger lost from the queue
//! (pushed = popped + handed back + still queued).
//!
//! A few seconds by default; `STRESS_SECS` runs it longer.

use crate::support::MS;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tailguard::dlq::{DeadLetterQueue, Full, Priority, Pushed};
use tailguard::{Breaker, Mode, Ticker};

const PROBES: u8 = 3;

#[test]
fn many_threads_one_breaker_the_ticker_and_a_flapping_consumer() {
    let secs: f64 = std::env::var("STRESS_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2.0);
    let _ticker = Ticker::start().unwrap();
    let last_gen = Arc::new(AtomicU32::new(0));
    let disorder = Arc::new(AtomicUsize::new(0));
    let delivered = Arc::new(AtomicU64::new(0));
    let (lg, dis, del) = (Arc::clone(&last_gen), Arc::clone(&disorder), Arc::clone(&delivered));
    let b = Breaker::builder()
        .window(10 * MS)
        .latency_threshold(5 * MS)
        .trip_windows(2)
        .min_calls(5)
        .base_backoff(20 * MS)
        .max_backoff(100 * MS)
        .half_open_probes(u32::from(PROBES))
        .success_to_close(3)
        .probe_lease(50 * MS)
        .track_in_flight(true)
        .on_transition(move |t| {
            if t.generation <= lg.swap(t.generation, Ordering::SeqCst) {
                dis.fetch_add(1, Ordering::SeqCst);
            }
            del.fetch_add(1, Ordering::SeqCst);
        })
        .build()
        .unwrap();
    let dlq: DeadLetterQueue<u64> = DeadLetterQueue::with_capacity(64).unwrap();
    let stop = AtomicBool::new(false);
    let phase = AtomicUsize::new(0); // 0 healthy, 1 slow, 2 failing
    let permits = AtomicU64::new(0);
    let pushed = AtomicU64::new(0);
    let handed_back = AtomicU64::new(0);
    let popped = AtomicU64::new(0);
    let too_many_probes = AtomicUsize::new(0);
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    let dlq = std::thread::scope(|s| {
        let mut producers = Vec::new();
        for t in 0..4u64 {
            let (b, stop, phase, permits) = (&b, &stop, &phase, &permits);
            let (pushed, handed_back, producer) = (&pushed, &handed_back, dlq.producer());
            producers.push(s.spawn(move || {
                let mut n = t;
                while !stop.load(Ordering::Relaxed) {
                    n = n.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                    match b.allow() {
                        Ok(p) => {
                            permits.fetch_add(1, Ordering::Relaxed);
                            let (latency, ok) = match phase.load(Ordering::Relaxed) {
                                0 => (MS / 2, true),
                                1 => (if n % 3 == 0 { 20 * MS } else { MS }, true),
                                _ => (MS / 2, n % 4 == 0),
                            };
                            match n % 16 {
                                0 => drop(p),
                                1 => {
                                    std::thread::sleep(MS);
                                    p.record(ok);
                                }
                                _ => p.record_latency(latency, ok),
                            }
                        }
                        Err(_) => {
                            pushed.fetch_add(1, Ordering::Relaxed);
                            let class = Priority::ALL[(n >> 8) as usize % 3];
                            match producer.push(n, class) {
                                Ok(Pushed::Queued) => {}
                                Ok(Pushed::Displaced(..)) | Err(Full(_)) => {
                                    handed_back.fetch_add(1, Ordering::Relaxed);
                                }
                            }
                        }
                    }
                }
            }));
        }
        // The consumer of the queue, draining in bursts.
        let (stop2, popped2) = (&stop, &popped);
        let consumer = s.spawn(move || {
            while !stop2.load(Ordering::Relaxed) {
                popped2.fetch_add(dlq.drain(16, |_, _| {}) as u64, Ordering::Relaxed);
                std::thread::sleep(MS);
            }
            dlq // handed back for the last drain, once every producer is joined
        });
        // The flapping consumer, and the watcher of the probe limit.
        let start = Instant::now();
        while Instant::now() < deadline {
            phase.store((start.elapsed().as_millis() / 50 % 3) as usize, Ordering::Relaxed);
            let snap = b.snapshot();
            if snap.probes_in_flight > PROBES {
                too_many_probes.fetch_add(1, Ordering::Relaxed);
            }
            assert_eq!(snap.mode, Mode::Normal);
            std::thread::sleep(MS / 4);
        }
        stop.store(true, Ordering::Relaxed);
        for p in producers {
            p.join().unwrap();
        }
        consumer.join().unwrap()
    });
    // Every producer has stopped (joined above): what is still
    // queued is drained here, not by the consumer thread, which may have
    // drained for the last time while a producer was mid-push.
    popped.fetch_add(dlq.drain(usize::MAX, |_, _| {}) as u64, Ordering::Relaxed);
    assert!(dlq.is_empty());
    let stats = dlq.stats();
    for class in Priority::ALL {
        let c = stats.class(class);
        assert_eq!(c.depth, 0, "{class:?}: {c:?}");
        assert_eq!(c.pushed, c.popped + c.displaced + c.handed_back, "{class:?}: {c:?}");
    }
    assert_eq!(
        too_many_probes.load(Ordering::Relaxed),
        0,
        "more probes in flight than the limit"
    );
    // Close what is left: every call still counted is in a closed window.
    std::thread::sleep(30 * MS);
    b.tick();
    std::thread::sleep(30 * MS);
    b.tick();
    let snap = b.snapshot();
    let t = snap.totals;
    assert_eq!(
        t.calls + t.stale + t.cancelled,
        permits.load(Ordering::Relaxed),
        "every permit resolved and counted once: {t:?}"
    );
    assert!(
        snap.trip_count > 0,
        "the consumer's slow and failing phases never tripped it: {snap:?}"
    );
    assert_eq!(
        disorder.load(Ordering::SeqCst),
        0,
        "the listener saw a generation out of order"
    );
    assert_eq!(
        delivered.load(Ordering::SeqCst) + snap.events_lost,
        u64::from(snap.generation),
        "a transition neither delivered nor counted as lost"
    );
    assert_eq!(
        pushed.load(Ordering::Relaxed),
        popped.load(Ordering::Relaxed) + handed_back.load(Ordering::Relaxed),
        "a trigger lost from the queue"
    );
}

/// Transitions (an override and a reset) and window closes on one thread,
/// admissions with in-flight tracking on another, for a few seconds: every
/// admitted call is counted exactly once, as a call, as stale or as
/// cancelled (from a hostile review of issue 15: a call that entered its
/// slot, found the generation moved and left it again was counted twice
/// when a close had claimed the slot in between).
#[test]
fn every_tracked_call_is_counted_exactly_once_under_racing_transitions() {
    let clock = tailguard::clock::ManualClock::new();
    let b = Breaker::builder()
        .clock(clock.clone())
        .ticker(false)
        .track_in_flight(true)
        .shards(1)
        .build()
        .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let granted = Arc::new(AtomicU64::new(0));
    let caller = {
        let (b, stop, granted) = (b.clone(), stop.clone(), granted.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                if let Ok(p) = b.allow() {
                    granted.fetch_add(1, Ordering::Relaxed);
                    p.record_latency(MS, true);
                }
            }
        })
    };
    let t0 = std::time::Instant::now();
    let mut rounds = 0u64;
    let secs: f64 = std::env::var("STRESS_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2.0);
    while t0.elapsed() < Duration::from_secs_f64(secs) {
        b.force_open();
        b.reset();
        clock.advance(Duration::from_millis(300));
        b.tick();
        rounds += 1;
    }
    stop.store(true, Ordering::Relaxed);
    caller.join().unwrap();
    for _ in 0..3 {
        clock.advance(Duration::from_secs(1));
        b.tick();
    }
    let s = b.snapshot();
    assert_eq!(
        s.totals.calls + s.totals.stale + s.totals.cancelled,
        granted.load(Ordering::Relaxed),
        "after {rounds} rounds: {:?}",
        s.totals
    );
}
