//! The crate's main job, end to end: a router fans triggers out to three
//! consumers it does not control. At t = 0 the pricing engine's P99 jumps
//! from 8 ms to 900 ms; at t = 30 s it recovers. Each consumer sits behind a
//! latency-primary breaker with a dead-letter queue as its fallback.
//!
//! Time is simulated with a `ManualClock` (the run takes about a second);
//! every breaker decision is the real code path. At the end, the hot path is
//! timed on real threads with the real clock.
//!
//! Run: `cargo run --release --example demo`

use std::time::{Duration, Instant};
use tailguard::clock::ManualClock;
use tailguard::dlq::{DeadLetterQueue, Priority, Pushed};
use tailguard::{Breaker, State};

const MS: Duration = Duration::from_millis(1);
const STEP: Duration = Duration::from_millis(10);
const TIMEOUT: Duration = Duration::from_millis(200);
const TRIGGERS_PER_STEP: u64 = 2; // per consumer: 200 triggers a second

struct Consumer {
    name: &'static str,
    priority: Priority,
    breaker: Breaker,
    dlq: DeadLetterQueue<u64>,
    /// Triggers delivered, diverted, replayed, handed back (lost would be a bug).
    delivered: u64,
    diverted: u64,
    replayed: u64,
    handed_back: u64,
}

/// The consumer's latency for trigger `n` at simulated time `t` (seconds
/// since the spike): 8 ms typical with a small tail; pricing at 900 ms while
/// sick.
fn latency(name: &str, t: f64, n: u64) -> Duration {
    let sick = name == "pricing" && (0.0..30.0).contains(&t);
    if sick {
        return 900 * MS;
    }
    // A deterministic 8 ms body with 0.5% at 30 ms.
    if n % 200 == 7 {
        30 * MS
    } else {
        Duration::from_micros(6_000 + (n * 7919 % 4_000))
    }
}

fn p99(mut v: Vec<Duration>) -> Duration {
    if v.is_empty() {
        return Duration::ZERO;
    }
    v.sort_unstable();
    v[(v.len() * 99 / 100).min(v.len() - 1)]
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let clock = ManualClock::new();
    let transitions = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut consumers: Vec<Consumer> = [
        ("pricing", Priority::Routine),
        ("compliance", Priority::Critical),
        ("dispatch", Priority::Routine),
    ]
    .into_iter()
    .map(|(name, priority)| {
        let log = std::sync::Arc::clone(&transitions);
        let breaker = Breaker::builder()
            .clock(clock.clone())
            .ticker(false)
            .on_transition(move |t| log.lock().unwrap().push((name, *t)))
            .build()?;
        Ok(Consumer {
            name,
            priority,
            breaker,
            dlq: DeadLetterQueue::with_capacity(16_384)?,
            delivered: 0,
            diverted: 0,
            replayed: 0,
            handed_back: 0,
        })
    })
    .collect::<Result<_, Box<dyn std::error::Error>>>()?;

    println!("t(s)  pricing     diverted  dlq depth  router P99  compliance P99");
    let mut router_with = Vec::new(); // what the router waited per emit, with breakers
    let mut router_without = Vec::new(); // the same traffic with no breaker
    let mut window_router = Vec::new();
    let mut window_compliance = Vec::new();
    let mut n = 0u64;
    let start = -5.0f64;
    let steps = (95.0 / STEP.as_secs_f64()) as u64;
    for step in 0..steps {
        let t = start + step as f64 * STEP.as_secs_f64();
        for c in consumers.iter_mut() {
            // Replay what was diverted once the consumer is healthy again:
            // the breaker closed and its last window without slow calls.
            let healthy = {
                let s = c.breaker.snapshot();
                s.state == State::Closed && s.window.calls > 0 && s.window.slow == 0
            };
            if healthy && !c.dlq.is_empty() {
                let mut replayed = 0;
                let mut requeued = Vec::new();
                c.dlq.drain(64, |trigger, prio| {
                    // Replays go through the breaker like any other call.
                    match c.breaker.allow() {
                        Ok(permit) => {
                            let l = latency(c.name, t, trigger);
                            permit.record_latency(l.min(TIMEOUT), l <= TIMEOUT);
                            if l <= TIMEOUT {
                                replayed += 1;
                                return;
                            }
                            requeued.push((trigger, prio));
                        }
                        Err(_) => requeued.push((trigger, prio)),
                    }
                });
                c.replayed += replayed;
                for (trigger, prio) in requeued {
                    match c.dlq.push(trigger, prio) {
                        Ok(Pushed::Queued) => {}
                        Ok(Pushed::Displaced(..)) | Err(_) => c.handed_back += 1,
                    }
                }
            }
            for _ in 0..TRIGGERS_PER_STEP {
                n += 1;
                let l = latency(c.name, t, n);
                router_without.push(l.min(TIMEOUT));
                // Some(ok) when the call was made, None when diverted at once.
                let outcome = match c.breaker.allow() {
                    Ok(permit) => {
                        // The call, bounded by its timeout.
                        let waited = l.min(TIMEOUT);
                        let ok = l <= TIMEOUT;
                        permit.record_latency(waited, ok);
                        router_with.push(waited);
                        window_router.push(waited);
                        if c.name == "compliance" {
                            window_compliance.push(waited);
                        }
                        Some(ok)
                    }
                    Err(_) => {
                        router_with.push(Duration::ZERO);
                        window_router.push(Duration::ZERO);
                        None
                    }
                };
                match outcome {
                    Some(true) => c.delivered += 1,
                    // A failed call goes to the fallback too, as does an OPEN divert.
                    Some(false) | None => divert(c, n),
                }
            }
        }
        clock.advance(STEP);
        for c in &consumers {
            c.breaker.tick();
        }
        if (step + 1) % 500 == 0 {
            let p = &consumers[0];
            println!(
                "{:>4.0}  {:<10}  {:>8}  {:>9}  {:>10.1?}  {:>13.1?}",
                t + STEP.as_secs_f64(),
                format!("{:?}", p.breaker.state()),
                p.diverted,
                p.dlq.len(),
                p99(std::mem::take(&mut window_router)),
                p99(std::mem::take(&mut window_compliance)),
            );
        }
    }

    println!("\ntransitions:");
    for (name, t) in transitions.lock().unwrap().iter() {
        println!(
            "  {:>7.2}s  {:<10} {:?} -> {:?}  ({:?}, generation {})",
            t.at.as_secs_f64() + start,
            name,
            t.from,
            t.to,
            t.reason,
            t.generation
        );
    }
    println!("\nper consumer (nothing silently dropped: emitted = delivered + replayed + queued + handed back):");
    for c in &consumers {
        let s = c.breaker.snapshot();
        let emitted = c.delivered + c.diverted;
        println!(
            "  {:<10} emitted {:>6}  delivered {:>6}  diverted {:>5}  replayed {:>5}  queued {:>3}  handed back {}  trips {}",
            c.name,
            emitted,
            c.delivered,
            c.diverted,
            c.replayed,
            c.dlq.len(),
            c.handed_back,
            s.trip_count
        );
        assert_eq!(c.diverted, c.replayed + c.dlq.len() as u64 + c.handed_back);
    }
    let stalled = |v: &[Duration]| v.iter().filter(|&&d| d >= TIMEOUT).count();
    println!(
        "\nemits that stalled the router for the full {:?} timeout: {} with breakers, {} without",
        TIMEOUT,
        stalled(&router_with),
        stalled(&router_without)
    );
    let p999 = |mut v: Vec<Duration>| {
        v.sort_unstable();
        v[v.len() * 999 / 1000]
    };
    println!(
        "router P99 over the run: {:?} with breakers, {:?} without; P99.9: {:?} vs {:?}",
        p99(router_with.clone()),
        p99(router_without.clone()),
        p999(router_with),
        p999(router_without)
    );
    assert_eq!(
        consumers[1].breaker.snapshot().trip_count,
        0,
        "compliance never tripped"
    );
    assert!(consumers.iter().all(|c| c.breaker.state() == State::Closed));

    hot_path();
    Ok(())
}

fn divert(c: &mut Consumer, trigger: u64) {
    c.diverted += 1;
    match c.dlq.push(trigger, c.priority) {
        Ok(Pushed::Queued) => {}
        Ok(Pushed::Displaced(_old, _prio)) => c.handed_back += 1,
        Err(_full) => c.handed_back += 1,
    }
}

/// The hot path on real threads with the real clock.
fn hot_path() {
    let breaker = Breaker::builder().build().expect("defaults are valid");
    let per_thread = 5_000_000u64;
    let threads = 2;
    let start = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                for _ in 0..per_thread {
                    breaker.allow().expect("closed").record_latency(MS, true);
                }
            });
        }
    });
    let elapsed = start.elapsed();
    let total = per_thread * threads;
    println!(
        "\nhot path: {} allow + record_latency cycles on {} threads in {:?}: {:.1} ns per cycle per thread",
        total,
        threads,
        elapsed,
        elapsed.as_nanos() as f64 / per_thread as f64
    );
}
