//! Thread-per-core: one std thread per core, each owning its consumers'
//! breakers through `LocalHandle`s, its own dead-letter queues and its own
//! in-flight bounds, and ticking its own breakers between triggers. No
//! ticker thread, no lock, and no atomic another core writes on the emit
//! path: a `LocalHandle` records with plain loads and stores into its own
//! shard, the queue is this core's, and the state word it reads is written
//! only on transitions.
//!
//! The consumers are simulated (each call returns at once with the latency
//! a real one would have had), so the run takes about a second: pricing's
//! calls take 900 ms from 0.3 s to 0.9 s on every core, and each core's
//! pricing breaker trips, diverts, probes and closes on its own, then
//! replays what it diverted.
//!
//! Run: `cargo run --release --example thread_per_core`

use std::cell::Cell;
use std::time::{Duration, Instant};
use tailguard::clock::ClockSource;
use tailguard::dlq::{DeadLetterQueue, Priority};
use tailguard::{Breaker, LocalHandle, State};

const CONSUMERS: [&str; 3] = ["pricing", "compliance", "dispatch"];
const RUN: Duration = Duration::from_millis(1_200);

/// One consumer as one core sees it.
struct Lane {
    breaker: Breaker,
    handle: LocalHandle,
    queue: DeadLetterQueue<u64>,
    /// A trigger replay took out and could not deliver: it stays first.
    head: Cell<Option<(u64, Priority)>>,
    /// Calls in flight on this core (a bulkhead needs no atomic when only
    /// one thread takes and gives back its slots).
    in_flight: Cell<usize>,
    max_in_flight: usize,
    delivered: Cell<u64>,
    diverted: Cell<u64>,
    replayed: Cell<u64>,
    trips: Cell<u64>,
}

/// The simulated consumer: its latency at `t` since the start, and whether
/// the call succeeds.
fn call(consumer: usize, t: Duration, trigger: u64) -> (Duration, bool) {
    let slow = consumer == 0 && t >= Duration::from_millis(300) && t < Duration::from_millis(900);
    if slow && trigger % 10 < 9 {
        (Duration::from_millis(900), true)
    } else {
        (Duration::from_millis(8), true)
    }
}

fn core_loop(core: usize, start: Instant) -> Vec<(u64, u64, u64, u64, usize)> {
    let lanes: Vec<Lane> = CONSUMERS
        .iter()
        .map(|name| {
            let breaker = Breaker::builder()
                .name(name)
                .clock(ClockSource::precise())
                .ticker(false) // this core ticks it
                .local_handles(1)
                .shards(1)
                .window(Duration::from_millis(20))
                .min_calls(20)
                .latency_threshold(Duration::from_millis(100))
                .base_backoff(Duration::from_millis(50))
                .max_backoff(Duration::from_millis(200))
                .build()
                .expect("valid configuration");
            let handle = breaker.local_handle().expect("one local shard reserved");
            Lane {
                breaker,
                handle,
                queue: DeadLetterQueue::with_capacity(1 << 16).expect("valid capacity"),
                head: Cell::new(None),
                in_flight: Cell::new(0),
                max_in_flight: 64,
                delivered: Cell::new(0),
                diverted: Cell::new(0),
                replayed: Cell::new(0),
                trips: Cell::new(0),
            }
        })
        .collect();
    let mut trigger = core as u64;
    let mut last_tick = Instant::now();
    loop {
        let now = Instant::now();
        let t = now - start;
        if t >= RUN {
            break;
        }
        for (c, lane) in lanes.iter().enumerate() {
            trigger += 1;
            let reading = lane.breaker.clock().raw();
            match lane.handle.allow_at(reading) {
                Ok(permit) if lane.in_flight.get() < lane.max_in_flight => {
                    lane.in_flight.set(lane.in_flight.get() + 1);
                    let (latency, ok) = call(c, t, trigger);
                    lane.in_flight.set(lane.in_flight.get() - 1);
                    permit.record_latency(latency, ok);
                    lane.delivered.set(lane.delivered.get() + 1);
                }
                Ok(permit) => {
                    permit.abandon();
                    divert(lane, trigger);
                }
                Err(_) => divert(lane, trigger),
            }
        }
        // This core's timer: close windows, and replay while closed.
        if now - last_tick >= Duration::from_millis(5) {
            last_tick = now;
            for (c, lane) in lanes.iter().enumerate() {
                let before = lane.breaker.snapshot().trip_count;
                lane.breaker.tick();
                lane.trips
                    .set(lane.trips.get() + lane.breaker.snapshot().trip_count - before);
                replay(c, lane, t);
            }
        }
        std::thread::sleep(Duration::from_micros(50)); // a trigger every 50 µs per consumer
    }
    // Wind down: the consumers are healthy again; drain every queue.
    let end = Instant::now() + Duration::from_secs(5);
    let queued = |l: &Lane| l.queue.len() + usize::from(l.head.get().is_some());
    while lanes.iter().any(|l| queued(l) > 0) && Instant::now() < end {
        for (c, lane) in lanes.iter().enumerate() {
            lane.breaker.tick();
            replay(c, lane, RUN);
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    lanes
        .iter()
        .map(|l| {
            (
                l.delivered.get(),
                l.diverted.get(),
                l.replayed.get(),
                l.trips.get(),
                queued(l),
            )
        })
        .collect()
}

fn divert(lane: &Lane, trigger: u64) {
    lane.diverted.set(lane.diverted.get() + 1);
    lane.queue
        .push(trigger, Priority::Routine)
        .map(|_| ())
        .expect("sized for the whole run: nothing handed back");
}

/// Replays up to 256 queued triggers while the breaker is closed, keeping
/// a trigger that fails at the head (pushing it back would reorder it).
fn replay(consumer: usize, lane: &Lane, t: Duration) {
    if lane.breaker.state() != State::Closed {
        return;
    }
    for _ in 0..256 {
        let Some((trigger, class)) = lane.head.take().or_else(|| lane.queue.pop()) else {
            return;
        };
        if let Ok(permit) = lane.handle.allow() {
            let (latency, ok) = call(consumer, t, trigger);
            permit.record_latency(latency, ok);
            if ok {
                lane.replayed.set(lane.replayed.get() + 1);
                continue;
            }
        }
        // Not delivered: it stays first, and replay waits for the next tick.
        lane.head.set(Some((trigger, class)));
        return;
    }
}

fn main() {
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    println!(
        "{cores} cores, one thread each, {} consumers per thread",
        CONSUMERS.len()
    );
    let start = Instant::now();
    let results: Vec<_> = (0..cores)
        .map(|core| std::thread::spawn(move || core_loop(core, start)))
        .collect::<Vec<_>>()
        .into_iter()
        .map(|h| h.join().expect("a core thread panicked"))
        .collect();
    println!(
        "{:<6} {:<11} {:>9} {:>9} {:>9} {:>6} {:>6}",
        "core", "consumer", "delivered", "diverted", "replayed", "trips", "left"
    );
    let mut lost = 0;
    for (core, lanes) in results.iter().enumerate() {
        for (c, &(delivered, diverted, replayed, trips, left)) in lanes.iter().enumerate() {
            println!(
                "{core:<6} {:<11} {delivered:>9} {diverted:>9} {replayed:>9} {trips:>6} {left:>6}",
                CONSUMERS[c]
            );
            lost += diverted - replayed - left as u64;
        }
    }
    assert_eq!(lost, 0, "every diverted trigger was replayed or is still queued");
    let pricing_trips: u64 = results.iter().map(|l| l[0].3).sum();
    assert!(
        pricing_trips >= cores as u64,
        "each core's pricing breaker tripped on its own"
    );
    let others: u64 = results.iter().map(|l| l[1].1 + l[2].1).sum();
    assert_eq!(others, 0, "compliance and dispatch were never diverted");
    println!("nothing lost; pricing tripped {pricing_trips} times across the cores; the others never");
}
