//! The adaptive comparison's scenarios, shared by the example (`main.rs`)
//! and its tests (`tests/chaos/adaptive.rs`, `tests/chaos/adaptive_seeds.rs`):
//! the absolute latency rule (50 ms) against the relative one (`k = 2`
//! times each consumer's own baseline), each as one configuration for every
//! consumer, on the real async emitter under tokio's paused clock.
//!
//! Three consumers, healthy P99s of 2 ms (quotes), 40 ms (pricing) and
//! 150 ms (settlement). Four scenarios:
//!
//! 1. [`Fleet`]: quotes slows twentyfold (to a 40 ms P99) for 60 s, at a
//!    rate its bulkhead cannot carry at that latency;
//! 2. the same run's healthy consumers, settlement among them: which rule
//!    trips a consumer that is merely slow by nature (false trips);
//! 3. [`Ramp`]: quotes slows by a few percent a minute for an hour (and, apart,
//!    by ×1.5 an hour, which the relative rule is documented to follow);
//! 4. [`Recovery`]: quotes comes back able to carry only half its traffic,
//!    its capacity growing back over 80 s, with and without a recovery ramp.
//!
//! Every call's latency is exact to the nanosecond: tokio's timer has a
//! 1 ms grid (a 0.6 ms sleep takes 1 ms), which would turn the 2 ms
//! consumer's latencies into whole milliseconds (its slow ramp would climb
//! in steps of 20 to 50%, and a threshold of 4.99 ms would judge like one
//! of 4). So a consumer's answer is woken by [`Timer`], which sleeps on
//! tokio's timer to within 2 ms of it and then advances the paused clock to
//! the exact instant with `tokio::time::advance`.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tailguard::clock::ClockSource;
use tailguard::dlq::{DeadLetterQueue, Priority};
use tailguard::emit::{Divert, Emitted, Emitter, EmitterStats};
use tailguard::tick_every;
use tailguard::{Breaker, Reason, RejectReason, RelativeLatency, State, Transition};
use tokio::sync::{oneshot, Notify};
use tokio::time::{sleep_until, Instant};

const MS: Duration = Duration::from_millis(1);
const HOUR: f64 = 3600.0;

/// The absolute rule's threshold.
pub const ABSOLUTE_THRESHOLD: Duration = Duration::from_millis(50);
/// The relative rule's defaults, as `RelativeLatency::new()` has them
/// (checked by the tests): `k`, the most the baseline rises in an hour.
pub const K: f64 = 2.0;
pub const MAX_RISE_PER_HOUR: f64 = 1.5;
/// One bucket of the latency sketch: `2^(1/8)`.
pub const BUCKET: f64 = 1.090_507_732_665_257_7;
/// Calls in flight per consumer (the router's bound on each).
pub const BULKHEAD: usize = 16;
/// Each consumer's dead-letter queue.
pub const QUEUE: usize = 1 << 18;
/// Replay: every 100 ms, per consumer, at most a twentieth of its arrival
/// rate (half its arrivals' worth a second).
const REPLAY_EVERY: Duration = Duration::from_millis(100);

/// The latency rule compared.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rule {
    /// `latency_threshold(50 ms)`, every other setting at its default.
    Absolute,
    /// `relative_latency(RelativeLatency::new())`, no explicit
    /// `latency_threshold` (so the absolute threshold is the 1 s ceiling).
    Relative,
}

impl Rule {
    pub const BOTH: [Rule; 2] = [Rule::Absolute, Rule::Relative];

    pub fn name(self) -> &'static str {
        match self {
            Rule::Absolute => "absolute (50 ms)",
            Rule::Relative => "relative (k = 2)",
        }
    }
}

/// The one configuration every consumer's breaker gets under `rule` (and a
/// recovery ramp where scenario 4 asks for one). The listener only records
/// the transitions.
pub fn breaker(rule: Rule, ramp: Option<Duration>, name: &str, log: Arc<Mutex<Vec<Transition>>>) -> Breaker {
    let b = Breaker::builder()
        .name(name)
        .clock(ClockSource::tokio())
        .ticker(false)
        .on_transition(move |t| log.lock().unwrap().push(*t));
    let b = match rule {
        Rule::Absolute => b.latency_threshold(ABSOLUTE_THRESHOLD),
        Rule::Relative => b.relative_latency(RelativeLatency::new()),
    };
    let b = match ramp {
        Some(d) => b.recovery_ramp(d),
        None => b,
    };
    b.build().expect("valid settings")
}

/// A consumer: its healthy P99, the triggers a second the router sends it,
/// their class.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Consumer {
    pub name: &'static str,
    pub p99: Duration,
    pub rate: u64,
    pub class: Priority,
}

pub const QUOTES: Consumer = Consumer {
    name: "quotes",
    p99: Duration::from_millis(2),
    rate: 1000,
    class: Priority::Routine,
};
pub const PRICING: Consumer = Consumer {
    name: "pricing",
    p99: Duration::from_millis(40),
    rate: 100,
    class: Priority::Routine,
};
pub const SETTLEMENT: Consumer = Consumer {
    name: "settlement",
    p99: Duration::from_millis(150),
    rate: 50,
    class: Priority::Critical,
};

/// What happens to a consumer; times are seconds from t = 0 (the event;
/// the warmup runs before it).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Condition {
    Healthy,
    /// Every call `factor` times slower during `[0, until)`.
    Degraded {
        until: f64,
        factor: f64,
    },
    /// Every call slower by the factor `per_hour` an hour from t = 0, for
    /// `length` seconds (then it stays there).
    Ramp {
        per_hour: f64,
        length: f64,
    },
    /// Down (every call takes `down_latency`) during `[0, down)`; then back,
    /// able to answer `start_share` of its arrival rate at its healthy
    /// latency, growing linearly to `end_share` over `grow` seconds; a call
    /// beyond that (a token bucket, 50 ms deep) waits `overloaded`.
    Recovering {
        down: f64,
        down_latency: Duration,
        start_share: f64,
        end_share: f64,
        grow: f64,
        overloaded: Duration,
    },
}

/// A seeded random source (SplitMix64).
pub struct Rng(pub u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`.
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// A healthy call's latency as a multiple of the consumer's P99: 97%
/// uniform in `[0.25, 0.75]`, 3% uniform in `[0.85, 1.075]` (so the top 1%
/// is the tail's upper third: the P99 is 1).
fn draw(rng: &mut Rng) -> f64 {
    if rng.next() % 100 < 3 {
        0.85 + 0.225 * rng.unit()
    } else {
        0.25 + 0.5 * rng.unit()
    }
}

/// Wake-ups at exact instants on tokio's paused clock (see the module
/// docs): one task holds every pending wake-up, sleeps on tokio's timer to
/// within [`LEAD`] of the earliest, advances the clock to it exactly and
/// wakes it, then yields, so that what it woke runs at that instant before
/// the clock moves on. (A tokio timer due in between, an arrival or a
/// tick, fires when the clock has passed it: at most `LEAD` late. Only the
/// consumers' answers need to be exact.)
#[derive(Clone)]
pub struct Timer(Arc<TimerInner>);

struct TimerInner {
    due: Mutex<BTreeMap<(Instant, u64), oneshot::Sender<()>>>,
    seq: AtomicU64,
    changed: Notify,
}

/// Tokio's timer wakes a sleep with deadline `d` in `[d, d + 2 ms)` (its
/// 1 ms grid, plus the sub-millisecond phase the clock has from earlier
/// exact advances): asked for `at - LEAD`, it wakes before `at`.
const LEAD: Duration = Duration::from_millis(2);

impl Timer {
    /// Starts the timer's task on the current runtime.
    pub fn start() -> (Timer, tokio::task::JoinHandle<()>) {
        let t = Timer(Arc::new(TimerInner {
            due: Mutex::new(BTreeMap::new()),
            seq: AtomicU64::new(0),
            changed: Notify::new(),
        }));
        let serving = t.clone();
        (t, tokio::spawn(async move { serving.serve().await }))
    }

    /// Ready exactly `d` after now (registered now, not at the first poll).
    pub fn sleep(&self, d: Duration) -> impl std::future::Future<Output = ()> {
        let at = Instant::now() + d;
        let (tx, rx) = oneshot::channel();
        let seq = self.0.seq.fetch_add(1, Ordering::Relaxed);
        let earliest = {
            let mut due = self.0.due.lock().unwrap();
            let earliest = due.first_key_value().map_or(true, |(k, _)| at < k.0);
            due.insert((at, seq), tx);
            earliest
        };
        if earliest {
            self.0.changed.notify_one();
        }
        async move {
            let _ = rx.await;
        }
    }

    fn first(&self) -> Option<Instant> {
        self.0.due.lock().unwrap().first_key_value().map(|(k, _)| k.0)
    }

    async fn serve(self) {
        // Woken tasks must run at the instant they were woken for: before
        // the clock moves on, the timer yields once to let them.
        let mut woke = false;
        loop {
            let Some(at) = self.first() else {
                self.0.changed.notified().await;
                continue;
            };
            let now = Instant::now();
            if at > now + LEAD {
                // Tokio's timer, to within LEAD of it (or an earlier one came).
                let _ = tokio::time::timeout_at(at - LEAD, self.0.changed.notified()).await;
                continue;
            }
            if at > now {
                if woke {
                    woke = false;
                    tokio::task::yield_now().await;
                    continue;
                }
                // Nothing can ask for a wake-up before `at` now (each is at
                // least its call's latency away): the clock moves to it.
                tokio::time::advance(at - now).await;
                continue;
            }
            let mut due = self.0.due.lock().unwrap();
            while let Some(e) = due.first_entry() {
                if e.key().0 > now {
                    break;
                }
                let _ = e.remove().send(());
                woke = true;
            }
        }
    }
}

/// A consumer as it runs: what it is going through, and what it served.
struct Live {
    spec: Consumer,
    condition: Condition,
    /// The run's start and t = 0.
    start: Instant,
    origin: Instant,
    /// Recovering: tokens, and when they were last topped up.
    bucket: Mutex<(f64, Option<Instant>)>,
    /// Per second from the run's start: calls served, of them beyond its
    /// capacity.
    served: Mutex<Vec<[u32; 2]>>,
    /// Every call it answered: when it started (seconds from t = 0) and
    /// its latency (ms).
    answers: Mutex<Vec<(f32, f32)>>,
}

impl Live {
    fn seconds(&self, at: Instant) -> f64 {
        if at >= self.origin {
            (at - self.origin).as_secs_f64()
        } else {
            -(self.origin - at).as_secs_f64()
        }
    }

    /// The latency of a call starting now with the draw `unit`, and whether
    /// it is beyond the consumer's capacity.
    fn latency(&self, unit: f64, now: Instant) -> (Duration, bool) {
        let t = self.seconds(now);
        let healthy = self.spec.p99.mul_f64(unit);
        match self.condition {
            Condition::Healthy => (healthy, false),
            Condition::Degraded { until, factor } => {
                if (0.0..until).contains(&t) {
                    (healthy.mul_f64(factor), false)
                } else {
                    (healthy, false)
                }
            }
            Condition::Ramp { per_hour, length } => {
                (healthy.mul_f64(per_hour.powf(t.clamp(0.0, length) / HOUR)), false)
            }
            Condition::Recovering {
                down,
                down_latency,
                start_share,
                end_share,
                grow,
                overloaded,
            } => {
                if t < 0.0 {
                    return (healthy, false);
                }
                if t < down {
                    return (down_latency, false);
                }
                let share = start_share + (end_share - start_share) * ((t - down) / grow).min(1.0);
                let rate = self.spec.rate as f64 * share;
                let depth = (rate * 0.05).max(1.0);
                let mut b = self.bucket.lock().unwrap();
                let (tokens, last) = *b;
                let tokens = match last {
                    None => depth,
                    Some(l) => (tokens + rate * (now - l).as_secs_f64()).min(depth),
                };
                if tokens >= 1.0 {
                    *b = (tokens - 1.0, Some(now));
                    (healthy, false)
                } else {
                    *b = (tokens, Some(now));
                    (overloaded, true)
                }
            }
        }
    }

    /// The call to the consumer: its latency, exactly, then `Ok`.
    fn call(&self, timer: &Timer, unit: f64) -> impl std::future::Future<Output = Result<(), &'static str>> {
        let now = Instant::now();
        let (latency, beyond) = self.latency(unit, now);
        let second = (now - self.start).as_secs() as usize;
        if let Some(s) = self.served.lock().unwrap().get_mut(second) {
            s[0] += 1;
            s[1] += u32::from(beyond);
        }
        self.answers
            .lock()
            .unwrap()
            .push((self.seconds(now) as f32, (latency.as_secs_f64() * 1e3) as f32));
        let answer = timer.sleep(latency);
        async move {
            answer.await;
            Ok(())
        }
    }
}

/// A trigger: the draw its calls take (a replay calls the consumer as it
/// is then, with the same draw).
#[derive(Clone, Copy)]
struct Trigger {
    unit: f64,
}

/// What an emit ended in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Delivered,
    /// Diverted: the breaker was open (or its probe slots taken).
    Open,
    /// Diverted: CLOSED in its recovery ramp, beyond the share admitted.
    Ramping,
    /// Diverted: the bulkhead was full.
    Bulkhead,
    /// Diverted: failed or timed out (never here: no call fails, none
    /// takes the 1 s timeout).
    Failed,
    /// Handed back: the queue was full.
    HandedBack,
}

/// One emit: when it arrived (seconds from t = 0), how long the router
/// spent in it (ms), and what it ended in.
#[derive(Clone, Copy, Debug)]
pub struct Emit {
    pub t: f64,
    pub ms: f64,
    pub outcome: Outcome,
}

/// One transition, at `t` seconds from t = 0.
#[derive(Clone, Copy, Debug)]
pub struct Change {
    pub t: f64,
    pub from: State,
    pub to: State,
    pub reason: Reason,
}

/// The breaker sampled at `t` seconds from t = 0.
#[derive(Clone, Copy, Debug)]
pub struct Sample {
    pub t: f64,
    pub state: State,
    /// The threshold the window in progress is judged by (ms).
    pub threshold_ms: f64,
    /// The relative rule's baseline (ms), once it has one.
    pub baseline_ms: Option<f64>,
    /// CLOSED in its recovery ramp.
    pub ramping: bool,
    pub in_flight: usize,
}

/// One consumer's run.
#[derive(Clone, Debug)]
pub struct ConsumerRun {
    pub consumer: Consumer,
    pub condition: Condition,
    pub emits: Vec<Emit>,
    pub changes: Vec<Change>,
    pub samples: Vec<Sample>,
    /// Per second from the run's start (t = -warmup): calls the consumer
    /// served (emits and replays), and of them beyond its capacity.
    pub served: Vec<[u32; 2]>,
    /// Every call the consumer answered (emits and replays): its start
    /// (seconds from t = 0) and latency (ms).
    pub answers: Vec<(f32, f32)>,
    pub stats: EmitterStats,
    pub trip_count: u64,
    pub ramping_rejections: u64,
    pub events_lost: u64,
    pub threshold_ms: f64,
    pub baseline_ms: Option<f64>,
}

/// What happened during `[from, to)` (seconds from t = 0), by arrival.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Phase {
    pub sent: u64,
    pub delivered: u64,
    pub open: u64,
    pub ramping: u64,
    pub bulkhead: u64,
    pub handed_back: u64,
    /// The router's emit time: P99 (ms), and the sum (task-seconds).
    pub p99_ms: f64,
    pub busy_s: f64,
}

impl Phase {
    pub fn diverted(&self) -> u64 {
        self.open + self.ramping + self.bulkhead
    }
}

impl ConsumerRun {
    /// Trips: CLOSED → OPEN.
    pub fn trips(&self) -> impl Iterator<Item = &Change> {
        self.changes
            .iter()
            .filter(|c| c.from == State::Closed && c.to == State::Open)
    }

    /// Trips during `[from, to)`.
    pub fn trips_in(&self, from: f64, to: f64) -> usize {
        self.trips().filter(|c| (from..to).contains(&c.t)).count()
    }

    /// The first trip at or after `from`.
    pub fn first_trip_from(&self, from: f64) -> Option<Change> {
        self.trips().find(|c| c.t >= from).copied()
    }

    /// Probes that re-opened (HALF_OPEN → OPEN) during `[from, to)`.
    pub fn reopens_in(&self, from: f64, to: f64) -> usize {
        self.changes
            .iter()
            .filter(|c| c.from == State::HalfOpen && c.to == State::Open && (from..to).contains(&c.t))
            .count()
    }

    /// The first close (HALF_OPEN → CLOSED) at or after `from`.
    pub fn first_close_from(&self, from: f64) -> Option<f64> {
        self.changes
            .iter()
            .find(|c| c.t >= from && c.to == State::Closed)
            .map(|c| c.t)
    }

    /// When it closed for good: the last transition, if it is into CLOSED.
    pub fn closed_for_good(&self) -> Option<f64> {
        self.changes.last().filter(|c| c.to == State::Closed).map(|c| c.t)
    }

    /// Seconds not CLOSED during `[from, to)`.
    pub fn open_seconds(&self, from: f64, to: f64) -> f64 {
        let mut state = State::Closed;
        let mut since = f64::NEG_INFINITY;
        let mut total = 0.0;
        for c in &self.changes {
            if state != State::Closed {
                total += (c.t.min(to) - since.max(from)).max(0.0);
            }
            state = c.to;
            since = c.t;
        }
        if state != State::Closed {
            total += (to - since.max(from)).max(0.0);
        }
        total
    }

    pub fn phase(&self, from: f64, to: f64) -> Phase {
        let mut p = Phase::default();
        let mut times = Vec::new();
        for e in self.emits.iter().filter(|e| (from..to).contains(&e.t)) {
            p.sent += 1;
            match e.outcome {
                Outcome::Delivered => p.delivered += 1,
                Outcome::Open => p.open += 1,
                Outcome::Ramping => p.ramping += 1,
                Outcome::Bulkhead => p.bulkhead += 1,
                Outcome::Failed => {}
                Outcome::HandedBack => p.handed_back += 1,
            }
            p.busy_s += e.ms / 1000.0;
            times.push(e.ms);
        }
        p.p99_ms = quantile(&mut times, 0.99);
        p
    }

    /// Calls the consumer served beyond its capacity.
    pub fn overloaded(&self) -> u64 {
        self.served.iter().map(|s| u64::from(s[1])).sum()
    }

    /// The P99 of the consumer's answers (ms), by their start, during
    /// `[from, to)`; 0 without any.
    pub fn answered_p99(&self, from: f64, to: f64) -> f64 {
        let mut v: Vec<f64> = self
            .answers
            .iter()
            .filter(|a| (from..to).contains(&f64::from(a.0)))
            .map(|a| f64::from(a.1))
            .collect();
        quantile(&mut v, 0.99)
    }

    /// The P99 of the consumer's answers per `bucket` seconds from `from`
    /// to `to` (buckets without any left out).
    pub fn p99_per(&self, bucket: f64, from: f64, to: f64) -> Vec<(f64, f64)> {
        let n = ((to - from) / bucket).ceil() as usize;
        let mut per: Vec<Vec<f64>> = vec![Vec::new(); n];
        for a in &self.answers {
            let t = f64::from(a.0);
            if t >= from && t < to {
                per[(((t - from) / bucket) as usize).min(n - 1)].push(f64::from(a.1));
            }
        }
        per.into_iter()
            .enumerate()
            .filter(|(_, v)| !v.is_empty())
            .map(|(i, mut v)| (from + i as f64 * bucket, quantile(&mut v, 0.99)))
            .collect()
    }
}

/// Quantile `q` of `v` (sorted here); 0 when empty.
pub fn quantile(v: &mut [f64], q: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_unstable_by(f64::total_cmp);
    let i = ((v.len() as f64 * q).ceil() as usize).clamp(1, v.len()) - 1;
    v[i]
}

/// One run's settings.
#[derive(Clone, Debug)]
pub struct Setup {
    pub seed: u64,
    pub rule: Rule,
    pub ramp: Option<Duration>,
    pub consumers: Vec<(Consumer, Condition)>,
    /// Healthy time before t = 0 (the relative rule's warmup).
    pub warmup: Duration,
    /// From t = 0 to the end.
    pub length: Duration,
    pub sample_every: Duration,
    /// Replay the queues while closed.
    pub replay: bool,
}

/// One run.
#[derive(Clone, Debug)]
pub struct Run {
    pub rule: Rule,
    pub ramp: Option<Duration>,
    pub warmup: f64,
    pub length: f64,
    pub consumers: Vec<ConsumerRun>,
}

/// Runs `setup` on the current tokio runtime (paused).
pub async fn run(setup: Setup) -> Run {
    let (timer, timer_task) = Timer::start();
    let start = Instant::now();
    let origin = start + setup.warmup;
    let end = origin + setup.length;
    let seconds = (setup.warmup + setup.length).as_secs() as usize + 2;
    let mut lives = Vec::new();
    let mut emitters: Vec<Emitter<Trigger>> = Vec::new();
    let mut logs = Vec::new();
    let mut tickers = Vec::new();
    for &(spec, condition) in &setup.consumers {
        let log = Arc::new(Mutex::new(Vec::new()));
        let b = breaker(setup.rule, setup.ramp, spec.name, Arc::clone(&log));
        tickers.push(tick_every(&b, 100 * MS));
        emitters.push(
            Emitter::builder(b, DeadLetterQueue::with_capacity(QUEUE).expect("capacity"))
                .bulkhead(BULKHEAD)
                .expect("bulkhead")
                .build()
                .expect("emitter"),
        );
        logs.push(log);
        lives.push(Arc::new(Live {
            spec,
            condition,
            start,
            origin,
            bucket: Mutex::new((0.0, None)),
            served: Mutex::new(vec![[0; 2]; seconds]),
            answers: Mutex::new(Vec::new()),
        }));
    }
    let seconds_of = move |at: Instant| -> f64 {
        if at >= origin {
            (at - origin).as_secs_f64()
        } else {
            -(origin - at).as_secs_f64()
        }
    };

    // The breakers sampled.
    let samples: Arc<Mutex<Vec<Vec<Sample>>>> = Arc::new(Mutex::new(vec![Vec::new(); lives.len()]));
    let sampler = {
        let (samples, emitters) = (Arc::clone(&samples), emitters.clone());
        let every = setup.sample_every;
        tokio::spawn(async move {
            let mut at = start;
            while at <= end {
                sleep_until(at).await;
                let mut s = samples.lock().unwrap();
                for (i, e) in emitters.iter().enumerate() {
                    let snap = e.breaker().snapshot();
                    s[i].push(Sample {
                        t: seconds_of(Instant::now()),
                        state: snap.state,
                        threshold_ms: snap.latency_threshold.as_secs_f64() * 1e3,
                        baseline_ms: snap.latency_baseline.map(|d| d.as_secs_f64() * 1e3),
                        ramping: snap.ramp.is_some(),
                        in_flight: e.stats().bulkhead_in_flight,
                    });
                }
                at += every;
            }
        })
    };

    // Replay: every 100 ms, per consumer, up to half its arrival rate.
    let stop = Arc::new(AtomicBool::new(false));
    let replayer = setup.replay.then(|| {
        let (emitters, lives, timer, stop) = (emitters.clone(), lives.clone(), timer.clone(), Arc::clone(&stop));
        tokio::spawn(async move {
            let mut at = Instant::now();
            while !stop.load(Ordering::Relaxed) {
                at += REPLAY_EVERY;
                sleep_until(at).await;
                for (e, live) in emitters.iter().zip(&lives) {
                    let max = (live.spec.rate / 20).max(1) as usize;
                    let r = e.replay(max, |t| live.call(&timer, t.unit)).await;
                    assert!(r.handed_back.is_none(), "no call fails: replay hands nothing back");
                }
            }
        })
    });

    // The arrivals: `rate` a second per consumer, evenly spaced.
    let outstanding = Arc::new(AtomicUsize::new(0));
    let tallies: Vec<Arc<Mutex<Vec<Emit>>>> = lives.iter().map(|_| Arc::new(Mutex::new(Vec::new()))).collect();
    let mut arrivals = Vec::new();
    for (i, live) in lives.iter().enumerate() {
        let (live, e, tally, timer, outstanding) = (
            Arc::clone(live),
            emitters[i].clone(),
            Arc::clone(&tallies[i]),
            timer.clone(),
            Arc::clone(&outstanding),
        );
        let mut rng = Rng(setup.seed ^ (0x5eed_0000 + i as u64));
        arrivals.push(tokio::spawn(async move {
            let rate = live.spec.rate;
            for k in 0u64.. {
                let at = start + Duration::from_nanos(k * 1_000_000_000 / rate);
                if at >= end {
                    break;
                }
                sleep_until(at).await;
                let trigger = Trigger { unit: draw(&mut rng) };
                let (live, e, tally, timer, outstanding) = (
                    Arc::clone(&live),
                    e.clone(),
                    Arc::clone(&tally),
                    timer.clone(),
                    Arc::clone(&outstanding),
                );
                outstanding.fetch_add(1, Ordering::Relaxed);
                tokio::spawn(async move {
                    let arrived = Instant::now();
                    let out = e.emit(trigger, live.spec.class, |t| live.call(&timer, t.unit)).await;
                    let outcome = match out {
                        Emitted::Delivered(()) => Outcome::Delivered,
                        Emitted::Diverted { reason, displaced } => {
                            assert!(displaced.is_none(), "one class per queue: nothing displaced");
                            match reason {
                                Divert::Open(r) if r.reason() == RejectReason::Ramping => Outcome::Ramping,
                                Divert::Open(_) => Outcome::Open,
                                Divert::BulkheadFull => Outcome::Bulkhead,
                                // TimedOut, Failed, NoTimer, and any reason a later release adds.
                                _ => Outcome::Failed,
                            }
                        }
                        Emitted::HandedBack { .. } => Outcome::HandedBack,
                    };
                    tally.lock().unwrap().push(Emit {
                        t: seconds_of(arrived),
                        ms: arrived.elapsed().as_secs_f64() * 1e3,
                        outcome,
                    });
                    outstanding.fetch_sub(1, Ordering::Relaxed);
                });
            }
        }));
    }
    for a in arrivals {
        a.await.expect("arrivals");
    }
    while outstanding.load(Ordering::Relaxed) > 0 {
        tokio::time::sleep(10 * MS).await;
    }
    stop.store(true, Ordering::Relaxed);
    if let Some(r) = replayer {
        r.await.expect("replayer");
    }
    sampler.abort();
    for t in tickers {
        t.abort();
    }
    timer_task.abort();

    let warmup = setup.warmup.as_secs_f64();
    let samples = samples.lock().unwrap().clone();
    let consumers = lives
        .iter()
        .enumerate()
        .map(|(i, live)| {
            let b = emitters[i].breaker();
            b.tick(); // the listener's last events
            let snap = b.snapshot();
            let changes = logs[i]
                .lock()
                .unwrap()
                .iter()
                .map(|t| Change {
                    t: t.at.as_secs_f64() - warmup,
                    from: t.from,
                    to: t.to,
                    reason: t.reason,
                })
                .collect();
            ConsumerRun {
                consumer: live.spec,
                condition: live.condition,
                emits: std::mem::take(&mut *tallies[i].lock().unwrap()),
                changes,
                samples: samples[i].clone(),
                served: live.served.lock().unwrap().clone(),
                answers: std::mem::take(&mut *live.answers.lock().unwrap()),
                stats: emitters[i].stats(),
                trip_count: snap.trip_count,
                ramping_rejections: snap.rejections.ramping,
                events_lost: snap.events_lost,
                threshold_ms: snap.latency_threshold.as_secs_f64() * 1e3,
                baseline_ms: snap.latency_baseline.map(|d| d.as_secs_f64() * 1e3),
            }
        })
        .collect();
    Run {
        rule: setup.rule,
        ramp: setup.ramp,
        warmup,
        length: setup.length.as_secs_f64(),
        consumers,
    }
}

/// Runs `setup` on a new current-thread runtime with a paused clock.
pub fn run_paused(setup: Setup) -> Run {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("runtime")
        .block_on(run(setup))
}

/// Scenarios 1 and 2: the three consumers under one rule; quotes degrades.
#[derive(Clone, Copy, Debug)]
pub struct Fleet {
    pub seed: u64,
    pub warmup: Duration,
    /// Quotes is `factor` times slower during `[0, degraded)`.
    pub degraded: Duration,
    pub factor: f64,
    /// The run goes on this long after t = 0 (recovery, replay).
    pub length: Duration,
}

impl Fleet {
    pub fn standard(seed: u64) -> Self {
        Self {
            seed,
            warmup: Duration::from_secs(120),
            degraded: Duration::from_secs(60),
            factor: 20.0,
            length: Duration::from_secs(240),
        }
    }

    pub fn setup(&self, rule: Rule) -> Setup {
        Setup {
            seed: self.seed,
            rule,
            ramp: None,
            consumers: vec![
                (
                    QUOTES,
                    Condition::Degraded {
                        until: self.degraded.as_secs_f64(),
                        factor: self.factor,
                    },
                ),
                (PRICING, Condition::Healthy),
                (SETTLEMENT, Condition::Healthy),
            ],
            warmup: self.warmup,
            length: self.length,
            sample_every: Duration::from_secs(1),
            replay: true,
        }
    }
}

/// Scenario 3: quotes alone, slowing by `per_hour` an hour for an hour.
#[derive(Clone, Copy, Debug)]
pub struct Ramp {
    pub seed: u64,
    pub warmup: Duration,
    pub length: Duration,
    /// Quotes' triggers a second (100: an hour stays cheap).
    pub rate: u64,
}

/// The ramps of scenario 3: 3% a minute (×5.89 an hour), and ×1.5 an hour
/// (the relative rule's bound on its baseline's rise).
pub const RAMPS: [f64; 2] = [FAST_RAMP, MAX_RISE_PER_HOUR];
/// 3% a minute, as a factor an hour: `1.03^60`.
pub const FAST_RAMP: f64 = 5.891_603_104_567_919;

/// A ramp's name.
pub fn ramp_name(per_hour: f64) -> String {
    let per_min = (per_hour.powf(1.0 / 60.0) - 1.0) * 100.0;
    format!("{per_min:.2}%/min (x{per_hour:.2}/h)")
}

/// The docs' bound: a ramp by `g` an hour is caught after about
/// `ln k / ln(g / r)` hours (`r` the baseline's most rise an hour); `None`
/// if `g <= r` (followed, never caught below the ceiling).
pub fn stated_bound_min(per_hour: f64) -> Option<f64> {
    (per_hour > MAX_RISE_PER_HOUR).then(|| 60.0 * K.ln() / (per_hour / MAX_RISE_PER_HOUR).ln())
}

/// The same bound with the sketch's bucket rounding at its worst: the
/// baseline (a bucket's upper edge) and the threshold (the first edge at or
/// above `k × baseline`) each up to one bucket high: `ln(k b²) / ln(g / r)`.
pub fn rounded_bound_min(per_hour: f64) -> Option<f64> {
    (per_hour > MAX_RISE_PER_HOUR).then(|| 60.0 * (K * BUCKET * BUCKET).ln() / (per_hour / MAX_RISE_PER_HOUR).ln())
}

/// The earliest the relative rule can catch that ramp for the sketch's
/// buckets: the baseline follows the lower envelope of its observations
/// (it falls half-way to each lower one), so it may sit up to a bucket
/// below the P99, and the threshold at `k ×` it: `ln(k / b) / ln(g / r)`.
pub fn early_bound_min(per_hour: f64) -> Option<f64> {
    (per_hour > MAX_RISE_PER_HOUR).then(|| 60.0 * (K / BUCKET).ln() / (per_hour / MAX_RISE_PER_HOUR).ln())
}

/// When the model's P99 (2 ms × g^t) reaches the absolute threshold, in
/// minutes.
pub fn absolute_crossing_min(per_hour: f64) -> f64 {
    60.0 * (ABSOLUTE_THRESHOLD.as_secs_f64() / QUOTES.p99.as_secs_f64()).ln() / per_hour.ln()
}

impl Ramp {
    pub fn standard(seed: u64) -> Self {
        Self {
            seed,
            warmup: Duration::from_secs(120),
            length: Duration::from_secs(3600),
            rate: 100,
        }
    }

    pub fn setup(&self, rule: Rule, per_hour: f64) -> Setup {
        Setup {
            seed: self.seed,
            rule,
            ramp: None,
            consumers: vec![(
                Consumer {
                    rate: self.rate,
                    ..QUOTES
                },
                Condition::Ramp {
                    per_hour,
                    length: self.length.as_secs_f64(),
                },
            )],
            warmup: self.warmup,
            length: self.length,
            sample_every: Duration::from_secs(10),
            replay: false,
        }
    }
}

/// Scenario 4: quotes alone, down, then back at half its traffic's worth,
/// growing back; with and without a recovery ramp.
#[derive(Clone, Copy, Debug)]
pub struct Recovery {
    pub seed: u64,
    pub warmup: Duration,
    pub rate: u64,
    /// Down (every call 250 ms) during `[0, down)`.
    pub down: Duration,
    /// Then its capacity grows from `start_share` to `end_share` of its
    /// arrival rate over `grow`.
    pub start_share: f64,
    pub end_share: f64,
    pub grow: Duration,
    pub recovery_ramp: Duration,
    pub length: Duration,
}

/// What a call takes while quotes is down, or beyond its capacity.
pub const SLOW: Duration = Duration::from_millis(250);

impl Recovery {
    pub fn standard(seed: u64) -> Self {
        Self {
            seed,
            warmup: Duration::from_secs(60),
            rate: 200,
            down: Duration::from_secs(20),
            start_share: 0.5,
            end_share: 2.0,
            grow: Duration::from_secs(80),
            recovery_ramp: Duration::from_secs(60),
            length: Duration::from_secs(240),
        }
    }

    pub fn condition(&self) -> Condition {
        Condition::Recovering {
            down: self.down.as_secs_f64(),
            down_latency: SLOW,
            start_share: self.start_share,
            end_share: self.end_share,
            grow: self.grow.as_secs_f64(),
            overloaded: SLOW,
        }
    }

    /// The consumer's capacity (calls a second) at `t` seconds from 0.
    pub fn capacity(&self, t: f64) -> Option<f64> {
        let down = self.down.as_secs_f64();
        (t >= down).then(|| {
            self.rate as f64
                * (self.start_share
                    + (self.end_share - self.start_share) * ((t - down) / self.grow.as_secs_f64()).min(1.0))
        })
    }

    pub fn setup(&self, rule: Rule, ramp: bool) -> Setup {
        Setup {
            seed: self.seed,
            rule,
            ramp: ramp.then_some(self.recovery_ramp),
            consumers: vec![(
                Consumer {
                    rate: self.rate,
                    ..QUOTES
                },
                self.condition(),
            )],
            warmup: self.warmup,
            length: self.length,
            sample_every: Duration::from_secs(1),
            replay: true,
        }
    }
}

/// Every run of the comparison for one seed.
#[derive(Clone, Debug)]
pub struct Report {
    pub seed: u64,
    pub fleet_cfg: Fleet,
    pub ramp_cfg: Ramp,
    pub recovery_cfg: Recovery,
    /// Absolute, relative.
    pub fleet: Vec<Run>,
    /// Per rule (absolute, relative), per ramp (`RAMPS`).
    pub ramps: Vec<(f64, Run)>,
    /// (absolute, no ramp), (absolute, ramp), (relative, no ramp), (relative, ramp).
    pub recovery: Vec<Run>,
}

/// The runs of one seed's report, in its order.
pub fn setups(fleet: &Fleet, ramp: &Ramp, recovery: &Recovery) -> Vec<Setup> {
    let mut s = Vec::new();
    for rule in Rule::BOTH {
        s.push(fleet.setup(rule));
    }
    for rule in Rule::BOTH {
        for per_hour in RAMPS {
            s.push(ramp.setup(rule, per_hour));
        }
    }
    for rule in Rule::BOTH {
        for r in [false, true] {
            s.push(recovery.setup(rule, r));
        }
    }
    s
}

/// Runs `setups` on up to `threads` threads (each run on its own paused
/// runtime: the same figures whatever the threads), in order.
pub fn run_many(setups: Vec<Setup>, threads: usize, progress: impl Fn(&Setup) + Sync) -> Vec<Run> {
    let next = AtomicUsize::new(0);
    let slots: Vec<Mutex<Option<Run>>> = setups.iter().map(|_| Mutex::new(None)).collect();
    std::thread::scope(|scope| {
        for _ in 0..threads.clamp(1, setups.len().max(1)) {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(setup) = setups.get(i) else { break };
                progress(setup);
                *slots[i].lock().unwrap() = Some(run_paused(setup.clone()));
            });
        }
    });
    slots
        .into_iter()
        .map(|s| s.into_inner().unwrap().expect("run"))
        .collect()
}

/// The whole comparison for `seed`, on every available core.
pub fn run_all(seed: u64, progress: impl Fn(&Setup) + Sync) -> Report {
    let (fleet_cfg, ramp_cfg, recovery_cfg) = (Fleet::standard(seed), Ramp::standard(seed), Recovery::standard(seed));
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut runs = run_many(setups(&fleet_cfg, &ramp_cfg, &recovery_cfg), threads, progress).into_iter();
    let fleet = runs.by_ref().take(2).collect();
    let ramps = Rule::BOTH
        .iter()
        .flat_map(|_| RAMPS)
        .zip(runs.by_ref().take(4))
        .collect();
    let recovery = runs.collect();
    Report {
        seed,
        fleet_cfg,
        ramp_cfg,
        recovery_cfg,
        fleet,
        ramps,
        recovery,
    }
}

/// Scenario 1's figures under one rule: quotes during its degradation
/// (`[0, degraded)` by arrival) and after.
#[derive(Clone, Debug)]
pub struct DegradedRow {
    pub rule: Rule,
    /// Its first trip after t = 0 (seconds), and why.
    pub trip: Option<f64>,
    pub reason: Option<Reason>,
    pub during: Phase,
    /// The P99 of the calls delivered during it (ms).
    pub delivered_p99_ms: f64,
    /// Calls in quotes' bulkhead, on average (the router's time in its
    /// calls over the degradation's length) and at the most (sampled).
    pub mean_in_flight: f64,
    pub peak_in_flight: usize,
    /// Its first close after the degradation.
    pub closed_again: Option<f64>,
    pub replayed: u64,
    pub queued: u64,
}

/// Scenario 2's figures: one consumer while it is healthy (quotes: before
/// t = 0, and from the end of its degradation, or from its breaker's close
/// after it, on), under one rule.
#[derive(Clone, Debug)]
pub struct HealthyRow {
    pub rule: Rule,
    pub consumer: Consumer,
    /// Trips and re-opens while healthy, seconds not CLOSED, triggers sent
    /// and diverted.
    pub false_trips: usize,
    pub reopens: usize,
    pub open_s: f64,
    pub sent: u64,
    pub diverted: u64,
    /// Over the whole run: transitions into OPEN (trips and re-opens, the
    /// breaker's own count), replayed, and still queued at the end.
    pub opens: u64,
    pub replayed: u64,
    pub queued: u64,
    pub threshold_ms: f64,
    pub baseline_ms: Option<f64>,
}

/// Scenario 3's figures: one ramp under one rule.
#[derive(Clone, Debug)]
pub struct RampRow {
    pub rule: Rule,
    pub per_hour: f64,
    /// Its first trip (minutes from the ramp's start), and why.
    pub trip_min: Option<f64>,
    pub reason: Option<Reason>,
    /// What the docs state for the rule: the relative rule's
    /// `ln k / ln(g / r)`, the absolute rule's crossing of 50 ms (both in
    /// minutes); for the relative rule, the earliest and the latest the
    /// sketch's buckets allow (`early_bound_min`, `rounded_bound_min`).
    pub stated_min: Option<f64>,
    pub early_min: Option<f64>,
    pub rounded_min: Option<f64>,
    /// The P99 of the consumer's answers in the minute before the trip,
    /// and the threshold then (the last sample before it), in ms.
    pub p99_at_trip_ms: Option<f64>,
    pub threshold_at_trip_ms: Option<f64>,
    pub trips: usize,
    /// The share of the time from the first trip to the end not CLOSED.
    pub open_share_after: Option<f64>,
    /// At the end: the baseline and the threshold.
    pub baseline_end_ms: Option<f64>,
    pub threshold_end_ms: f64,
    pub sent: u64,
    pub diverted: u64,
    pub handed_back: u64,
}

/// Scenario 4's figures: one rule, with or without a recovery ramp.
#[derive(Clone, Debug)]
pub struct RecoveryRow {
    pub rule: Rule,
    pub ramp: Option<Duration>,
    /// The trip in the outage (seconds from t = 0).
    pub trip: Option<f64>,
    /// The first close once quotes is back, and the trips after it.
    pub first_close: Option<f64>,
    pub retrips: usize,
    /// Calls quotes served beyond its capacity (each took 250 ms).
    pub overloaded: u64,
    /// Triggers the ramp rejected (diverted, replayed later).
    pub ramping: u64,
    /// The last close, and when every call was admitted again (after the
    /// ramp, if any).
    pub closed_for_good: Option<f64>,
    pub full_from: Option<f64>,
    pub sent: u64,
    pub delivered: u64,
    pub diverted: u64,
    pub replayed: u64,
    pub queued: u64,
}

impl Report {
    /// Every run, in order.
    pub fn runs(&self) -> impl Iterator<Item = &Run> {
        self.fleet
            .iter()
            .chain(self.ramps.iter().map(|(_, r)| r))
            .chain(&self.recovery)
    }

    /// Transition events the listeners never got, over every run (0: every
    /// trip and close above was seen).
    pub fn events_lost(&self) -> u64 {
        self.runs().flat_map(|r| &r.consumers).map(|c| c.events_lost).sum()
    }

    pub fn degraded_rows(&self) -> Vec<DegradedRow> {
        let until = self.fleet_cfg.degraded.as_secs_f64();
        self.fleet
            .iter()
            .map(|run| {
                let q = &run.consumers[0];
                let during = q.phase(0.0, until);
                let trip = q.first_trip_from(0.0).filter(|c| c.t < until);
                let mut delivered: Vec<f64> = q
                    .emits
                    .iter()
                    .filter(|e| e.outcome == Outcome::Delivered && (0.0..until).contains(&e.t))
                    .map(|e| e.ms)
                    .collect();
                DegradedRow {
                    rule: run.rule,
                    trip: trip.map(|c| c.t),
                    reason: trip.map(|c| c.reason),
                    during,
                    delivered_p99_ms: quantile(&mut delivered, 0.99),
                    mean_in_flight: during.busy_s / until,
                    peak_in_flight: q
                        .samples
                        .iter()
                        .filter(|s| (0.0..until).contains(&s.t))
                        .map(|s| s.in_flight)
                        .max()
                        .unwrap_or(0),
                    closed_again: trip.and_then(|_| q.first_close_from(until)),
                    replayed: q.stats.replayed,
                    queued: q.stats.queued as u64 + u64::from(q.stats.pending),
                }
            })
            .collect()
    }

    pub fn healthy_rows(&self) -> Vec<HealthyRow> {
        let until = self.fleet_cfg.degraded.as_secs_f64();
        let mut rows = Vec::new();
        for i in 0..3 {
            for run in &self.fleet {
                let c = &run.consumers[i];
                let (from, to) = (-run.warmup, run.length);
                // Quotes is healthy before t = 0, and again from the end of
                // its degradation, or once its breaker closed after it.
                let spans: Vec<(f64, f64)> = if matches!(c.condition, Condition::Degraded { .. }) {
                    let back = c
                        .first_trip_from(0.0)
                        .and_then(|_| c.first_close_from(until))
                        .unwrap_or(until);
                    vec![(from, 0.0), (back, to)]
                } else {
                    vec![(from, to)]
                };
                let (mut sent, mut diverted, mut open_s) = (0, 0, 0.0);
                for &(a, b) in &spans {
                    let p = c.phase(a, b);
                    sent += p.sent;
                    diverted += p.diverted();
                    open_s += c.open_seconds(a, b);
                }
                rows.push(HealthyRow {
                    rule: run.rule,
                    consumer: c.consumer,
                    false_trips: spans.iter().map(|&(a, b)| c.trips_in(a, b)).sum(),
                    reopens: spans.iter().map(|&(a, b)| c.reopens_in(a, b)).sum(),
                    open_s,
                    sent,
                    diverted,
                    opens: c.trip_count,
                    replayed: c.stats.replayed,
                    queued: c.stats.queued as u64 + u64::from(c.stats.pending),
                    threshold_ms: c.threshold_ms,
                    baseline_ms: c.baseline_ms,
                });
            }
        }
        rows
    }

    /// Quotes' P99 in the first and the last minute of the ramp `per_hour`,
    /// of every call: read in the absolute rule's run, which never trips on
    /// it (the relative one's, open, answers a few probes).
    pub fn ramp_p99(&self, per_hour: f64) -> (f64, f64) {
        let c = self
            .ramps
            .iter()
            .find(|(g, run)| *g == per_hour && run.rule == Rule::Absolute)
            .map(|(_, run)| &run.consumers[0])
            .expect("the absolute run of each ramp");
        let end = self.ramp_cfg.length.as_secs_f64();
        (c.answered_p99(0.0, 60.0), c.answered_p99(end - 60.0, end))
    }

    pub fn ramp_rows(&self) -> Vec<RampRow> {
        self.ramps
            .iter()
            .map(|(per_hour, run)| {
                let c = &run.consumers[0];
                let end = run.length;
                let trip = c.first_trip_from(0.0);
                let last = c.samples.last();
                RampRow {
                    rule: run.rule,
                    per_hour: *per_hour,
                    trip_min: trip.map(|t| t.t / 60.0),
                    reason: trip.map(|t| t.reason),
                    stated_min: match run.rule {
                        Rule::Relative => stated_bound_min(*per_hour),
                        Rule::Absolute => Some(absolute_crossing_min(*per_hour)),
                    },
                    early_min: match run.rule {
                        Rule::Relative => early_bound_min(*per_hour),
                        Rule::Absolute => None,
                    },
                    rounded_min: match run.rule {
                        Rule::Relative => rounded_bound_min(*per_hour),
                        Rule::Absolute => None,
                    },
                    p99_at_trip_ms: trip.map(|t| c.answered_p99(t.t - 60.0, t.t)),
                    threshold_at_trip_ms: trip
                        .and_then(|t| c.samples.iter().rev().find(|s| s.t <= t.t))
                        .map(|s| s.threshold_ms),
                    trips: c.trips().count(),
                    open_share_after: trip.map(|t| c.open_seconds(t.t, end) / (end - t.t)),
                    baseline_end_ms: last.and_then(|s| s.baseline_ms),
                    threshold_end_ms: last.map_or(0.0, |s| s.threshold_ms),
                    sent: c.emits.len() as u64,
                    diverted: c.stats.diverted(),
                    handed_back: c.stats.handed_back_full,
                }
            })
            .collect()
    }

    pub fn recovery_rows(&self) -> Vec<RecoveryRow> {
        let back = self.recovery_cfg.down.as_secs_f64();
        self.recovery
            .iter()
            .map(|run| {
                let c = &run.consumers[0];
                let first_close = c.first_close_from(back);
                let closed_for_good = c.closed_for_good();
                let all = c.phase(-run.warmup, run.length);
                RecoveryRow {
                    rule: run.rule,
                    ramp: run.ramp,
                    trip: c.first_trip_from(0.0).map(|t| t.t),
                    first_close,
                    retrips: first_close.map_or(0, |t| c.trips_in(t, run.length)),
                    overloaded: c.overloaded(),
                    ramping: c.ramping_rejections,
                    closed_for_good,
                    full_from: closed_for_good.map(|t| t + run.ramp.map_or(0.0, |r| r.as_secs_f64())),
                    sent: all.sent,
                    delivered: all.delivered,
                    diverted: all.diverted(),
                    replayed: c.stats.replayed,
                    queued: c.stats.queued as u64 + u64::from(c.stats.pending),
                }
            })
            .collect()
    }
}
