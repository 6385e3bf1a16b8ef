//! Thread-per-core: one std thread per core, each owning one
//! `LocalEmitter` per consumer (its own breaker through a `LocalHandle`,
//! its own queue and bulkhead bound), ticking its own breakers between
//! triggers. No ticker thread, no lock, and no atomic another core writes
//! on the emit path.
//!
//! The consumers are simulated on each core's own manual clock (a call
//! moves the core's time on by its latency), so the run is deterministic
//! and instant: from 0.3 s to 0.9 s pricing's calls run into their 50 ms
//! deadline (and give up there, as a blocking call told its deadline
//! does), blocking the core meanwhile, as a slow consumer does; each core's pricing
//! breaker trips, diverts, probes and closes on its own, then replays what
//! it diverted. The emitters' counters prove nothing is lost.
//!
//! Every core registers its breakers in one `Registry` under the
//! consumer's name and its core (`("pricing", 3)`), so a scrape exports
//! them as `consumer="pricing", core="3"`; the run ends by reading them
//! back from it, as a scrape would.
//!
//! Run: `cargo run --release --example thread_per_core`

use std::time::Duration;
use tailguard::clock::ManualClock;
use tailguard::dlq::{DeadLetterQueue, Priority};
use tailguard::emit::{EmitterStats, LocalEmitter};
use tailguard::{Breaker, Registry};

const CONSUMERS: [&str; 3] = ["pricing", "compliance", "dispatch"];
const RUN: Duration = Duration::from_millis(1_200);
const MS: Duration = Duration::from_millis(1);

/// One core's run: a trigger per consumer every 50 µs of its time.
fn core_loop(core: u32, registry: &Registry) -> Vec<(EmitterStats, u64, u64)> {
    let clock = ManualClock::new();
    let lanes: Vec<(Breaker, LocalEmitter<u64>)> = CONSUMERS
        .iter()
        .map(|&name| {
            // This core's breaker of the consumer, registered as (name, core).
            let breaker = registry
                .get_or_create((name, core), || {
                    Breaker::builder()
                        .clock(clock.clone())
                        .ticker(false) // this core ticks it
                        .local_handles(1)
                        .window(100 * MS)
                        .min_calls(2)
                        .trip_windows(1)
                        .latency_threshold(20 * MS)
                        .base_backoff(50 * MS)
                        .max_backoff(200 * MS)
                })
                .expect("valid configuration");
            let queue = DeadLetterQueue::with_capacity(1 << 16).expect("valid capacity");
            let emitter = LocalEmitter::builder(breaker.clone(), queue)
                .bulkhead(64)
                .and_then(|b| b.timeout(50 * MS))
                .and_then(|b| b.build_local())
                .expect("valid configuration");
            registry
                .attach_local_emitter((name, core), &emitter)
                .expect("registered just above");
            (breaker, emitter)
        })
        .collect();
    // The simulated consumer: pricing is slow from 0.3 s to 0.9 s, and gives
    // up at its deadline; the others answer in 20 µs.
    let call = |c: usize, d: &tailguard::emit::Deadline<'_>| {
        let slow = c == 0 && (300 * MS..900 * MS).contains(&clock.now());
        clock.advance(if slow { d.remaining() } else { Duration::from_micros(20) });
        if slow {
            Err("timed out")
        } else {
            Ok(())
        }
    };
    // Nothing is handed back here (the queues are sized for the run): main
    // checks it from the counters, which count every trigger handed back.
    let (mut emitted, mut last_tick) = (0, Duration::ZERO);
    let mut step = |emit: bool| {
        if clock.now() - last_tick >= 5 * MS {
            last_tick = clock.now();
            for (c, (breaker, emitter)) in lanes.iter().enumerate() {
                breaker.tick();
                let _ = emitter.replay_blocking(256, |_, d| call(c, d));
            }
        }
        for (c, (_, emitter)) in lanes.iter().enumerate().filter(|_| emit) {
            emitted += 1;
            let _ = emitter.emit_blocking(u64::from(core) << 40 | emitted, Priority::Routine, |_, d| call(c, d));
        }
        clock.advance(Duration::from_micros(50));
    };
    while clock.now() < RUN {
        step(true);
    }
    // Wind down: the consumers are healthy again; replay every queue.
    let end = clock.now() + 5 * RUN;
    while lanes.iter().any(|(_, e)| !e.queue().is_empty() || e.stats().pending) && clock.now() < end {
        step(false);
    }
    lanes
        .iter()
        .map(|(b, e)| (e.stats(), b.snapshot().trip_count, emitted / CONSUMERS.len() as u64))
        .collect()
}

fn main() {
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get()) as u32;
    let registry = Registry::new();
    println!(
        "{cores} cores, one thread each, {} consumers per thread",
        CONSUMERS.len()
    );
    let results: Vec<_> = (0..cores)
        .map(|core| {
            let registry = registry.clone();
            std::thread::spawn(move || core_loop(core, &registry))
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|h| h.join().expect("a core thread panicked"))
        .collect();
    println!(
        "{:<6} {:<11} {:>9} {:>9} {:>9} {:>6} {:>6}",
        "core", "consumer", "delivered", "diverted", "replayed", "trips", "left"
    );
    for (core, lanes) in results.iter().enumerate() {
        for (c, (s, trips, emitted)) in lanes.iter().enumerate() {
            let (name, left) = (CONSUMERS[c], s.queued + usize::from(s.pending));
            println!(
                "{core:<6} {name:<11} {:>9} {:>9} {:>9} {trips:>6} {left:>6}",
                s.delivered,
                s.diverted(),
                s.replayed
            );
            // Every trigger: delivered, or diverted and replayed (or still queued).
            assert_eq!(s.emitted(), *emitted, "{name}: every emit counted once");
            assert_eq!(s.into_queue(), s.out_of_queue(), "{name}: the queue's identity");
            assert_eq!(
                s.handed_back() + s.drained + s.cancelled,
                0,
                "{name}: nothing handed back"
            );
            assert_eq!(
                s.replayed + left as u64,
                s.diverted(),
                "{name}: every diverted trigger replayed"
            );
        }
    }
    let pricing_trips: u64 = results.iter().map(|l| l[0].1).sum();
    assert!(
        pricing_trips >= u64::from(cores),
        "each core's pricing breaker tripped on its own"
    );
    // What a scrape reads: one row per consumer per core, with its core.
    let rows = registry.consumers();
    assert_eq!(rows.len(), CONSUMERS.len() * cores as usize);
    for r in &rows {
        let core = r.core.expect("every breaker here is a core's") as usize;
        let c = CONSUMERS.iter().position(|n| **n == *r.name).expect("a known consumer");
        let stats = r.emitter.as_ref().expect("its emitter is attached");
        assert_eq!(
            stats.delivered, results[core][c].0.delivered,
            "{} on core {core}",
            r.name
        );
    }
    println!(
        "registry: {} breakers, exported as consumer=\"pricing\", core=\"0\" .. core=\"{}\" and so on",
        rows.len(),
        cores - 1
    );
    let others: u64 = results.iter().map(|l| l[1].0.diverted() + l[2].0.diverted()).sum();
    assert_eq!(others, 0, "compliance and dispatch were never diverted");
    println!("nothing lost; pricing tripped {pricing_trips} times across the cores; the others never");
}
