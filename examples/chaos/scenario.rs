//! The chaos comparison's scenario, shared by the example (`main.rs`) and
//! its test (`tests/chaos/`): one router, three consumers, one outage,
//! four strategies, run on tokio's clock (paused by default).
//!
//! The router receives a steady stream of triggers for each consumer and
//! handles each in one of a fixed number of emit tasks (its own capacity, as
//! an event loop has): a trigger that finds every task busy waits for one.
//! What the router pays per trigger (its emit time) runs from the trigger's
//! arrival to the end of its emit, the wait for a task included.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tailguard::clock::ClockSource;
use tailguard::dlq::{DeadLetterQueue, Priority};
use tailguard::emit::{Emitted, Emitter};
use tailguard::tick_every;
use tailguard::{Breaker, State};
use tokio::sync::Semaphore;
use tokio::time::{sleep_until, Instant};

const MS: Duration = Duration::from_millis(1);

/// What goes wrong with pricing during the outage.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Spike {
    /// Its tail degrades: `slow_percent` of its calls take 900 ms (so its
    /// P99 is 900 ms), the rest stay fast, none fails.
    Latency { slow_percent: u64 },
    /// It fails fast: `error_percent` of its calls return an error at once.
    Errors { error_percent: u64 },
}

/// The scenario's settings.
#[derive(Clone, Copy, Debug)]
pub struct Config {
    pub seed: u64,
    pub spike: Spike,
    /// Healthy time before the outage (its figures are the baseline).
    pub baseline: Duration,
    /// The outage: pricing is sick for this long from t = 0.
    pub outage: Duration,
    /// Time after the outage (recovery, replay).
    pub after: Duration,
    /// Triggers per second per consumer.
    pub rate: u64,
    /// The router's concurrent emit tasks.
    pub router_tasks: usize,
}

impl Config {
    /// The scenario of the write-up: a 30 s tail-latency outage of pricing.
    pub fn standard(seed: u64) -> Self {
        Self {
            seed,
            spike: Spike::Latency { slow_percent: 10 },
            baseline: Duration::from_secs(10),
            outage: Duration::from_secs(30),
            after: Duration::from_secs(20),
            rate: 100,
            router_tasks: 8,
        }
    }
}

/// The four ways of calling a consumer that are compared.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Strategy {
    /// Call and wait, however long it takes.
    NoBreaker,
    /// Call with a 200 ms timeout; a timed-out trigger is lost.
    TimeoutOnly,
    /// A 200 ms timeout and a breaker on the error rate alone (50% over
    /// its span; a timeout is an error); rejected and timed-out triggers
    /// are lost (no fallback).
    ErrorOnly,
    /// tailguard: the emitter (bulkhead, 200 ms timeout, latency-primary
    /// breaker, dead-letter queue), replaying the queue once closed.
    Tailguard,
}

impl Strategy {
    pub const ALL: [Strategy; 4] = [
        Strategy::NoBreaker,
        Strategy::TimeoutOnly,
        Strategy::ErrorOnly,
        Strategy::Tailguard,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Strategy::NoBreaker => "no breaker",
            Strategy::TimeoutOnly => "timeout only (200 ms)",
            Strategy::ErrorOnly => "error-only breaker (50%)",
            Strategy::Tailguard => "tailguard (latency-primary + DLQ)",
        }
    }
}

pub const CONSUMERS: [&str; 3] = ["pricing", "compliance", "dispatch"];
const PRICING: usize = 0;
const COMPLIANCE: usize = 1;
const TIMEOUT: Duration = Duration::from_millis(200);
/// Resolution of the timeline.
pub const BUCKET: Duration = Duration::from_millis(100);

/// What one strategy's run measured. Times are milliseconds; `t` is
/// seconds from the start of the outage.
#[derive(Clone, Debug)]
pub struct Report {
    pub strategy: Strategy,
    /// The router's emit time, all consumers: P50, P99, P999 during the
    /// outage.
    pub router_outage_ms: [f64; 3],
    /// The router's P99 during the healthy baseline.
    pub router_p99_ms_healthy: f64,
    /// Each consumer's P99 as the router sees it (emit time), during the
    /// outage and during the baseline, in `CONSUMERS` order.
    pub consumer_p99_ms_outage: [f64; 3],
    pub consumer_p99_ms_healthy: [f64; 3],
    /// Triggers that arrived to find every router task busy.
    pub pool_exhausted: u64,
    /// Seconds from the outage's start to pricing's breaker opening; `None`
    /// if it never opened (or the strategy has no breaker).
    pub trip_after_s: Option<f64>,
    /// Seconds from the outage's end to pricing's breaker closed for good
    /// (negative if it closed for good before the outage ended).
    pub close_after_recovery_s: Option<f64>,
    pub sent: u64,
    pub delivered: u64,
    pub diverted: u64,
    pub replayed: u64,
    /// Handed back to the router (the queue full, nothing below to give
    /// way): not lost, but the router's to keep (this scenario counts them
    /// and sets them aside; a real router retries or persists them).
    pub handed_back: u64,
    /// Dropped: timed out or rejected with no fallback to take them.
    pub lost: u64,
    /// Triggers still queued at the end (0 once replay has drained).
    pub still_queued: u64,
    /// The router's P99 per `BUCKET` of arrivals, from the baseline's start.
    pub timeline_p99_ms: Vec<f64>,
    /// Pricing's breaker state per `BUCKET` (CLOSED without a breaker).
    pub timeline_state: Vec<State>,
}

/// A seeded random source (SplitMix64).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// One call's behaviour, drawn when the trigger arrives.
#[derive(Clone, Copy)]
struct Behaviour {
    latency: Duration,
    fails: bool,
}

/// A consumer's answer for a trigger arriving at `t_ms` (ms from the
/// outage's start): healthy 2–7 ms with 1.5% at 8 ms (P99 8 ms).
fn behaviour(rng: &mut Rng, consumer: usize, t_ms: i64, cfg: &Config) -> Behaviour {
    let sick = consumer == PRICING && t_ms >= 0 && t_ms < cfg.outage.as_millis() as i64;
    let healthy = if rng.below(1000) < 15 {
        8 * MS
    } else {
        Duration::from_micros(2_000 + rng.below(5_000))
    };
    match (sick, cfg.spike) {
        (true, Spike::Latency { slow_percent }) if rng.below(100) < slow_percent => Behaviour {
            latency: 900 * MS,
            fails: false,
        },
        (true, Spike::Errors { error_percent }) if rng.below(100) < error_percent => Behaviour {
            latency: MS / 2,
            fails: true,
        },
        _ => Behaviour {
            latency: healthy,
            fails: false,
        },
    }
}

/// The call to the consumer: `b.latency` of work, then its answer.
async fn call(b: Behaviour) -> Result<(), &'static str> {
    tokio::time::sleep(b.latency).await;
    if b.fails {
        Err("consumer error")
    } else {
        Ok(())
    }
}

/// A trigger: its sequence number and how its call will behave (the
/// behaviour of a replayed trigger is drawn again when replayed).
#[derive(Clone, Copy)]
struct Trigger {
    behaviour: Behaviour,
}

/// How each consumer is reached under a strategy.
enum Path {
    Plain,
    Timeout,
    ErrorOnly(Breaker),
    Emitter(Emitter<Trigger>),
}

fn latency_breaker() -> Breaker {
    Breaker::builder()
        .clock(ClockSource::tokio())
        .ticker(false)
        .window(Duration::from_secs(1))
        .latency_threshold(100 * MS)
        .quantile(0.99)
        .trip_windows(2)
        // The same error rule as the error-only breaker's.
        .error_rate(0.5)
        .error_window(Duration::from_secs(5))
        .min_calls(20)
        .base_backoff(Duration::from_secs(1))
        .max_backoff(Duration::from_secs(8))
        .half_open_probes(2)
        // A sick tail shows in few probes (10% here): it takes a hundred
        // good probes in a row to close (0.9^100: a sick pricing passes
        // them once in 38,000 rounds). The probes are live traffic, two at a
        // time: at 100 triggers a second a healthy pricing passes them in
        // about a second.
        .success_to_close(100)
        .build()
        .expect("valid settings")
}

fn error_only_breaker() -> Breaker {
    Breaker::builder()
        .clock(ClockSource::tokio())
        .ticker(false)
        .window(Duration::from_secs(1))
        // Latency never trips it: a call is slow only past an hour, or when it
        // timed out, and a window breaches only if every call in it was slow.
        .latency_threshold(Duration::from_secs(3600))
        .quantile(1e-9)
        .error_rate(0.5)
        .error_window(Duration::from_secs(5))
        .min_calls(20)
        .base_backoff(Duration::from_secs(1))
        .max_backoff(Duration::from_secs(8))
        .half_open_probes(2)
        .success_to_close(10)
        .build()
        .expect("valid settings")
}

/// What the router records per trigger.
#[derive(Default)]
struct Tally {
    /// (arrival ms from the outage's start, emit time in µs, consumer).
    emits: Vec<(i64, u64, usize)>,
    delivered: u64,
    diverted: u64,
    handed_back: u64,
    lost: u64,
}

/// Quantile `q` of `v` (sorted here), in milliseconds; 0 when empty.
fn quantile_ms(v: &mut [u64], q: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_unstable();
    let i = ((v.len() as f64 * q).ceil() as usize).clamp(1, v.len()) - 1;
    v[i] as f64 / 1000.0
}

/// Runs one strategy through the whole timeline on the current tokio
/// runtime (whose clock, paused or not, is the scenario's time).
pub async fn run_strategy(strategy: Strategy, cfg: Config, progress: impl Fn(Strategy, f64)) -> Report {
    let mut paths = Vec::new();
    let mut tickers = Vec::new();
    for _ in CONSUMERS {
        paths.push(Arc::new(match strategy {
            Strategy::NoBreaker => Path::Plain,
            Strategy::TimeoutOnly => Path::Timeout,
            Strategy::ErrorOnly => {
                let b = error_only_breaker();
                tickers.push(tick_every(&b, 100 * MS));
                Path::ErrorOnly(b)
            }
            Strategy::Tailguard => {
                let b = latency_breaker();
                tickers.push(tick_every(&b, 100 * MS));
                Path::Emitter(
                    Emitter::builder(b, DeadLetterQueue::with_capacity(16_384).expect("capacity"))
                        .bulkhead(16)
                        .expect("bulkhead")
                        .timeout(TIMEOUT)
                        .expect("timeout")
                        // Replay keeps a trigger that fails again at the head
                        // and tries it again next time, rather than handing
                        // it back to the router.
                        .replay_attempts(1_000)
                        .expect("replay attempts")
                        .build()
                        .expect("emitter"),
                )
            }
        }));
    }
    let tally = Arc::new(Mutex::new(Tally::default()));
    let pool = Arc::new(Semaphore::new(cfg.router_tasks));
    let exhausted = Arc::new(AtomicU64::new(0));
    let origin = Instant::now() + cfg.baseline; // t = 0: the outage starts
    let end = origin + cfg.outage + cfg.after;
    let ms_since = move |at: Instant| -> i64 {
        if at >= origin {
            (at - origin).as_millis() as i64
        } else {
            -((origin - at).as_millis() as i64)
        }
    };

    // Pricing's breaker state, sampled every 10 ms.
    let pricing_breaker = match &*paths[PRICING] {
        Path::ErrorOnly(b) => Some(b.clone()),
        Path::Emitter(e) => Some(e.breaker().clone()),
        _ => None,
    };
    let states = Arc::new(Mutex::new(Vec::<(i64, State)>::new()));
    let sampler = pricing_breaker.clone().map(|b| {
        let states = Arc::clone(&states);
        tokio::spawn(async move {
            let mut at = Instant::now();
            while at < end {
                states.lock().unwrap().push((ms_since(at), b.state()));
                at += 10 * MS;
                sleep_until(at).await;
            }
        })
    });

    // Replay: every 200 ms, up to 50 queued triggers per consumer, once its
    // breaker is closed; the behaviour of each is drawn anew when it is
    // called (the consumer as it is then).
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let replayer = if strategy == Strategy::Tailguard {
        let paths = paths.clone();
        let seed = cfg.seed ^ 0x5eed;
        let stop = Arc::clone(&stop);
        let tally = Arc::clone(&tally);
        Some(tokio::spawn(async move {
            let mut rng = Rng(seed);
            let mut at = Instant::now();
            while !stop.load(Ordering::Relaxed) {
                at += 200 * MS;
                sleep_until(at).await;
                for (i, path) in paths.iter().enumerate() {
                    if let Path::Emitter(e) = &**path {
                        let r = e
                            .replay(50, |_| call(behaviour(&mut rng, i, ms_since(Instant::now()), &cfg)))
                            .await;
                        if r.handed_back.is_some() {
                            // Its last replay attempt failed: the router keeps it.
                            tally.lock().unwrap().handed_back += 1;
                        }
                    }
                }
            }
        }))
    } else {
        None
    };

    // The arrivals: one trigger per consumer every 1/rate s (the three at
    // the same instant).
    let mut rng = Rng(cfg.seed);
    let step = Duration::from_nanos(1_000_000_000 / cfg.rate.max(1));
    let mut tasks = Vec::new();
    let mut at = Instant::now();
    let mut next_progress = at;
    while at < end {
        for (i, _) in CONSUMERS.iter().enumerate() {
            let t_ms = ms_since(at);
            let trigger = Trigger {
                behaviour: behaviour(&mut rng, i, t_ms, &cfg),
            };
            let (path, tally, pool, exhausted) = (
                Arc::clone(&paths[i]),
                Arc::clone(&tally),
                Arc::clone(&pool),
                Arc::clone(&exhausted),
            );
            tasks.push(tokio::spawn(async move {
                let arrived = Instant::now();
                let _task = match Arc::clone(&pool).try_acquire_owned() {
                    Ok(p) => p,
                    Err(_) => {
                        exhausted.fetch_add(1, Ordering::Relaxed);
                        pool.acquire_owned().await.expect("pool open")
                    }
                };
                let class = if i == COMPLIANCE {
                    Priority::Critical
                } else {
                    Priority::Routine
                };
                enum Outcome {
                    Delivered,
                    Diverted,
                    HandedBack,
                    Lost,
                }
                let outcome = match &*path {
                    Path::Plain => match call(trigger.behaviour).await {
                        Ok(()) => Outcome::Delivered,
                        Err(_) => Outcome::Lost,
                    },
                    Path::Timeout => match tokio::time::timeout(TIMEOUT, call(trigger.behaviour)).await {
                        Ok(Ok(())) => Outcome::Delivered,
                        _ => Outcome::Lost,
                    },
                    Path::ErrorOnly(b) => match b.allow() {
                        Err(_) => Outcome::Lost,
                        Ok(permit) => {
                            let start = Instant::now();
                            match tokio::time::timeout(TIMEOUT, call(trigger.behaviour)).await {
                                Ok(Ok(())) => {
                                    permit.record_latency(start.elapsed(), true);
                                    Outcome::Delivered
                                }
                                Ok(Err(_)) => {
                                    permit.record_latency(start.elapsed(), false);
                                    Outcome::Lost
                                }
                                Err(_) => {
                                    permit.record_timeout(start.elapsed());
                                    Outcome::Lost
                                }
                            }
                        }
                    },
                    Path::Emitter(e) => match e.emit(trigger, class, |t| call(t.behaviour)).await {
                        Emitted::Delivered(()) => Outcome::Delivered,
                        Emitted::Diverted { displaced, .. } => {
                            if displaced.is_some() {
                                // A lower class gave way: back to the router.
                                tally.lock().unwrap().handed_back += 1;
                            }
                            Outcome::Diverted
                        }
                        Emitted::HandedBack { .. } => Outcome::HandedBack,
                    },
                };
                let took = arrived.elapsed().as_micros() as u64;
                let mut t = tally.lock().unwrap();
                t.emits.push((ms_since(arrived), took, i));
                match outcome {
                    Outcome::Delivered => t.delivered += 1,
                    Outcome::Diverted => t.diverted += 1,
                    Outcome::HandedBack => t.handed_back += 1,
                    Outcome::Lost => t.lost += 1,
                }
            }));
        }
        if at >= next_progress {
            progress(strategy, ms_since(at) as f64 / 1000.0);
            next_progress = at + Duration::from_secs(1);
        }
        at += step;
        sleep_until(at).await;
    }
    for t in tasks {
        t.await.expect("emit task");
    }
    // Let replay finish what is left, then stop the helpers.
    if let Some(r) = replayer {
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            let left: usize = paths
                .iter()
                .map(|p| match &**p {
                    Path::Emitter(e) => {
                        let s = e.stats();
                        s.queued + usize::from(s.pending)
                    }
                    _ => 0,
                })
                .sum();
            if left == 0 {
                break;
            }
            tokio::time::sleep(200 * MS).await;
        }
        // Stop after the pass under way (aborting it mid-call would put
        // its trigger back at the head only when the task is dropped).
        stop.store(true, Ordering::Relaxed);
        r.await.expect("replayer");
    }
    if let Some(s) = sampler {
        s.abort();
    }
    for t in tickers {
        t.abort();
    }

    let tally = Arc::try_unwrap(tally)
        .ok()
        .expect("every task done")
        .into_inner()
        .unwrap();
    let outage_ms = cfg.outage.as_millis() as i64;
    let mut router_outage: Vec<u64> = Vec::new();
    let mut router_healthy: Vec<u64> = Vec::new();
    let mut per_outage: [Vec<u64>; 3] = Default::default();
    let mut per_healthy: [Vec<u64>; 3] = Default::default();
    let buckets = ((cfg.baseline + cfg.outage + cfg.after).as_millis() / BUCKET.as_millis()) as usize;
    let mut per_bucket: Vec<Vec<u64>> = vec![Vec::new(); buckets];
    let base_ms = cfg.baseline.as_millis() as i64;
    for &(t, us, i) in &tally.emits {
        if (0..outage_ms).contains(&t) {
            router_outage.push(us);
            per_outage[i].push(us);
        } else if t < 0 {
            router_healthy.push(us);
            per_healthy[i].push(us);
        }
        let b = ((t + base_ms) / BUCKET.as_millis() as i64) as usize;
        if let Some(v) = per_bucket.get_mut(b) {
            v.push(us);
        }
    }
    let states = states.lock().unwrap().clone();
    let trip_after_s = states
        .iter()
        .find(|(t, s)| *t >= 0 && *s == State::Open)
        .map(|(t, _)| *t as f64 / 1000.0);
    // Closed for good: the first sample after the recovery from which on
    // every sample is CLOSED (if it ever opened).
    let close_after_recovery_s = trip_after_s.and_then(|_| {
        let last_not_closed = states.iter().rposition(|(_, s)| *s != State::Closed)?;
        let (t, _) = states.get(last_not_closed + 1)?;
        Some((*t - outage_ms) as f64 / 1000.0)
    });
    let timeline_state = (0..buckets)
        .map(|b| {
            let t = b as i64 * BUCKET.as_millis() as i64 - base_ms;
            states
                .iter()
                .rev()
                .find(|(st, _)| *st <= t)
                .map_or(State::Closed, |(_, s)| *s)
        })
        .collect();
    let (mut replayed, mut still_queued) = (0, 0);
    let handed_back = tally.handed_back;
    let mut replay_handed_back = 0;
    for p in &paths {
        if let Path::Emitter(e) = &**p {
            let s = e.stats();
            replayed += s.replayed;
            replay_handed_back += s.replay_handed_back;
            still_queued += s.queued as u64 + u64::from(s.pending);
        }
    }
    debug_assert!(
        handed_back >= replay_handed_back,
        "each one replay handed back is in the tally"
    );
    let sent = tally.emits.len() as u64;
    Report {
        strategy,
        router_outage_ms: [
            quantile_ms(&mut router_outage, 0.5),
            quantile_ms(&mut router_outage, 0.99),
            quantile_ms(&mut router_outage, 0.999),
        ],
        router_p99_ms_healthy: quantile_ms(&mut router_healthy, 0.99),
        consumer_p99_ms_outage: per_outage.map(|mut v| quantile_ms(&mut v, 0.99)),
        consumer_p99_ms_healthy: per_healthy.map(|mut v| quantile_ms(&mut v, 0.99)),
        pool_exhausted: exhausted.load(Ordering::Relaxed),
        trip_after_s,
        close_after_recovery_s,
        sent,
        delivered: tally.delivered,
        diverted: tally.diverted,
        replayed,
        handed_back,
        lost: tally.lost,
        still_queued,
        timeline_p99_ms: per_bucket.into_iter().map(|mut v| quantile_ms(&mut v, 0.99)).collect(),
        timeline_state,
    }
}

/// Runs every strategy in turn on a new current-thread runtime, paused
/// unless `real_time`.
pub fn run_all(cfg: Config, real_time: bool, progress: impl Fn(Strategy, f64) + Copy) -> Vec<Report> {
    Strategy::ALL
        .iter()
        .map(|&strategy| {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .start_paused(!real_time)
                .build()
                .expect("runtime");
            rt.block_on(run_strategy(strategy, cfg, progress))
        })
        .collect()
}
