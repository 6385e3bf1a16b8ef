//! A reference model of the breaker, written for clarity: plain fields, one
//! thread, no atomics, no clock of its own (every operation is given the
//! clock's reading). It follows the rules the crate documents, one function
//! per rule, and knows nothing of the state word, the shards or the
//! protocols that make the real breaker concurrent.
//!
//! It covers everything but the latency quantiles (the sketch has its own
//! tests), in-flight tracking, local handles and jitter: the state machine,
//! the trip rules, the overrides, the relative latency rule (its baseline,
//! learning and threshold, over the sketch's buckets) and the recovery
//! ramp.

use std::sync::OnceLock;
use std::time::Duration;
use tailguard::{Mode, Reason, RejectReason, State};

/// The relative latency rule's settings, as given to
/// `BreakerBuilder::relative_latency` (durations in nanoseconds).
#[derive(Debug, Clone, Copy)]
pub struct Relative {
    /// `k`.
    pub multiplier: f64,
    pub floor_ns: u64,
    pub ceiling_ns: u64,
    pub max_rise_per_hour: f64,
    pub warmup: u32,
    pub initial_baseline_ns: Option<u64>,
}

/// The settings the model judges by (the builder's, in nanoseconds and
/// parts per billion).
#[derive(Debug, Clone, Copy)]
pub struct Config {
    /// `latency_threshold`, as given (or its default) ...
    pub threshold_ns: u64,
    /// ... and whether it was given: with the relative rule and no explicit
    /// threshold, the absolute threshold is the rule's ceiling.
    pub threshold_explicit: bool,
    pub window_ns: u64,
    pub quantile_ppb: u64,
    pub trip_windows: u8,
    pub min_calls: u64,
    pub error_ppb: u64,
    pub error_windows: usize,
    /// Failures, and the span in windows.
    pub failure_count: Option<(u64, usize)>,
    pub base_ns: u64,
    pub max_ns: u64,
    pub probes: u8,
    pub successes: u8,
    pub lease_ns: u64,
    pub cancel_is_failure: bool,
    pub flap_cycles: usize,
    pub flap_ns: u64,
    pub relative: Option<Relative>,
    /// The recovery ramp's length (0: none).
    pub ramp_ns: u64,
}

const PPB: u128 = 1_000_000_000;

fn exceeds(part: u64, whole: u64, limit_ppb: u64) -> bool {
    u128::from(part) * PPB > u128::from(whole) * u128::from(limit_ppb)
}

/// The sequential test across windows, as documented on `min_calls`:
/// with `p0 = 1 − q` (at least 10^-6, at most 1 − 10^-6) and
/// `p1 = min(10 p0, (1 + p0) / 2)`, a slow call adds `ln(p1 / p0)`, any
/// other call takes `ln((1 − p0) / (1 − p1))` off, in micro-nats rounded to
/// the nearest (at least 1), never below zero nor above the bound, cleared
/// by a dense window that does not breach; it trips at `ln 10^6` micro-nats
/// rounded down, gathered over `trip_windows` windows with calls at the
/// least. Returns (slow weight, fast weight, bound).
fn sparse_weights(quantile_ppb: u64) -> (u64, u64, u64) {
    let p0 = ((1_000_000_000 - quantile_ppb) as f64 / 1e9).clamp(1e-6, 1.0 - 1e-6);
    let p1 = (10.0 * p0).min((1.0 + p0) / 2.0);
    let micro = |nats: f64| ((nats * 1e6).round() as u64).max(1);
    (
        micro((p1 / p0).ln()),
        micro(((1.0 - p0) / (1.0 - p1)).ln()),
        (1e6f64.ln() * 1e6).floor() as u64,
    )
}

// ---- the latency sketch's buckets ----
//
// What the relative rule counts over: bucket `i` holds the latencies whose
// documented lookup gives `i` (eight buckets an octave from 1 µs = 2^10 ns,
// bucket 0 also taking everything faster, bucket `TOP` everything slower).
// The lookup, as `sketch.rs` documents it: the octave from the leading one,
// the position within it from the next eight bits `m`, the smallest `j`
// with `((513 + 2m) / 512)^8 <= 2^j` (`ceil(8 · log2(1 + (m + ½)/256))` in
// integers). Public behaviour: a call is slow by the relative rule exactly
// when it is slower than its threshold's bucket edge.

/// The last bucket (26 octaves of eight).
pub const TOP: usize = 208;

/// Where within its octave a latency whose eight bits after the leading
/// one are `m` falls (0 to 8; 8 is the next octave's first bucket).
fn octave_position(m: u64) -> usize {
    let x8 = u128::from(513 + 2 * m).pow(8);
    (0..=8).find(|&j| x8 <= 1u128 << (72 + j)).expect("(1023/512)^8 < 2^8")
}

/// The bucket a latency of `ns` nanoseconds is counted in.
pub fn bucket(ns: u64) -> usize {
    if ns <= 1 << 10 {
        return 0;
    }
    let exp = 63 - ns.leading_zeros() as usize; // 2^exp <= ns < 2^(exp + 1)
    let m = (ns >> (exp - 8)) & 0xff;
    (8 * (exp - 10) + octave_position(m)).min(TOP)
}

/// The upper edge of bucket `b`: the slowest latency counted in it or
/// below (`u64::MAX` for `TOP`, which takes everything slower).
pub fn edge(b: usize) -> u64 {
    static EDGES: OnceLock<Vec<u64>> = OnceLock::new();
    let edges = EDGES.get_or_init(|| {
        (0..=TOP)
            .map(|b| {
                if b == TOP {
                    return u64::MAX;
                }
                // The placement only rises with the latency: the last `ns`
                // placed at or below `b`.
                let (mut lo, mut hi) = (0u64, u64::MAX);
                while lo < hi {
                    let mid = lo + (hi - lo).div_ceil(2);
                    if bucket(mid) <= b {
                        lo = mid;
                    } else {
                        hi = mid - 1;
                    }
                }
                lo
            })
            .collect()
    });
    edges[b.min(TOP)]
}

/// Calls per bucket.
type Histogram = Vec<u64>;

fn empty_histogram() -> Histogram {
    vec![0; TOP + 1]
}

/// The bucket of the sample of rank `floor(q · (n − 1))`, counting from the
/// fastest (the sketch's rank rule); `None` when empty.
fn quantile_bucket(h: &Histogram, quantile_ppb: u64) -> Option<usize> {
    let total: u64 = h.iter().sum();
    let rank = (u128::from(total.checked_sub(1)?) * u128::from(quantile_ppb) / PPB) as u64;
    let mut seen = 0;
    h.iter().position(|&n| {
        seen += n;
        seen > rank
    })
}

// ---- the relative rule's baseline ----
//
// As documented (`BreakerBuilder::relative_latency`, `RelativeLatency`,
// `src/baseline.rs`): the baseline is a fractional bucket index, in units
// of 2^-32 bucket, and in nanoseconds it is measured on the buckets' own
// edges: a whole index `j` is `edge(j)`, a fraction `f` of the way to the
// next is `edge(j) × (edge(j + 1) / edge(j))^f`, at most the last ordinary
// bucket's edge. The threshold is the first bucket edge at or above
// `k × baseline` (the baseline as reported, in nanoseconds), clamped to the
// buckets of the floor and the ceiling; the ceiling's until the baseline is
// warm. An observation is the rule's quantile of a pool of at least
// `samples` healthy calls; the first `warmup` are averaged (a running mean,
// truncated), then one below the baseline halves the distance (rounded
// toward it) and one above raises it by at most `rise per window` times
// the windows the pool covered.

/// One bucket, in the baseline's units.
const UNIT: u64 = 1 << 32;

/// A span with more than this share of its calls failed (parts per
/// billion: 10%) teaches the baseline nothing.
const MAX_ERROR_PPB: u64 = 100_000_000;

/// A fractional bucket index (in units) as nanoseconds: a whole index is
/// its bucket's edge exactly, a fraction of the way to the next bucket is
/// that share of the way in the log domain (to the nearest nanosecond); at
/// most the edge of the last ordinary bucket, `TOP − 1`.
pub fn ns_of_units(units: u64) -> u64 {
    let j = ((units / UNIT) as usize).min(TOP - 1);
    let lo = edge(j) as f64;
    if j == TOP - 1 {
        return edge(j);
    }
    let f = (units % UNIT) as f64 / UNIT as f64;
    let hi = edge(j + 1) as f64;
    (lo * (hi / lo).powf(f)).round() as u64
}

/// A latency as a fractional bucket index (in units), the inverse of
/// [`ns_of_units`]: a bucket edge is its whole index (0 at or below the
/// first, at most `TOP − 1`); a latency between two edges,
/// `edge(b − 1) < ns < edge(b)`, is `b − 1` and the share of the way from
/// one to the other in the log domain, to the nearest unit (below a whole
/// bucket).
pub fn units_of_ns(ns: u64) -> u64 {
    let b = bucket(ns).min(TOP - 1);
    if b == 0 || ns >= edge(b) {
        return b as u64 * UNIT;
    }
    let (lo, hi) = (edge(b - 1) as f64, edge(b) as f64);
    let f = ((ns as f64) / lo).ln() / (hi / lo).ln();
    let frac = (f.clamp(0.0, 1.0) * UNIT as f64).round().min((UNIT - 1) as f64) as u64;
    (b as u64 - 1) * UNIT + frac
}

/// The relative rule in the units it is computed in.
#[derive(Debug, Clone, Copy)]
struct RelativeRule {
    /// `k`.
    multiplier: f64,
    /// The buckets whose edges are the first at or above the floor and the
    /// ceiling: the buckets that hold them.
    floor_bucket: usize,
    ceiling_bucket: usize,
    /// The most the baseline rises a window: `8 · log2 (r / (1 + 1/256)^2)`
    /// buckets an hour (none below zero; the slack keeps the bound in
    /// nanoseconds, the edges being within 1/256 of `2^(j/8)`), times the
    /// window's share of an hour, in units, rounded down.
    rise_per_window: u64,
    /// Calls an observation pools at the least: `10 / (1 − q)`, rounded
    /// up, within `[100, 10^6]` (10^6 at `q = 1`).
    samples: u64,
    warmup: u32,
    quantile_ppb: u64,
}

impl RelativeRule {
    fn new(r: &Relative, quantile_ppb: u64, window_ns: u64) -> Self {
        let slow_ppb = 1_000_000_000 - quantile_ppb;
        let samples = if slow_ppb == 0 {
            1_000_000
        } else {
            (10 * 1_000_000_000u64).div_ceil(slow_ppb).clamp(100, 1_000_000)
        };
        let slack = (1.0 + 1.0 / 256.0f64).powi(2);
        let buckets_an_hour = (8.0 * (r.max_rise_per_hour / slack).log2()).max(0.0);
        Self {
            multiplier: r.multiplier,
            floor_bucket: bucket(r.floor_ns),
            ceiling_bucket: bucket(r.ceiling_ns),
            rise_per_window: (buckets_an_hour * window_ns as f64 / 3.6e12 * UNIT as f64).floor() as u64,
            samples,
            warmup: r.warmup,
            quantile_ppb,
        }
    }
}

#[derive(Debug)]
struct Learner {
    rule: RelativeRule,
    /// In units; meaningful once `observations > 0`.
    baseline: u64,
    /// Observations made, at most the warmup's (then it judges).
    observations: u32,
    /// The healthy calls pooled since the last observation, and the
    /// windows they cover.
    pool: Histogram,
    pool_windows: u64,
}

impl Learner {
    fn new(rule: RelativeRule, initial_ns: Option<u64>) -> Self {
        let mut l = Self {
            rule,
            baseline: 0,
            observations: 0,
            pool: empty_histogram(),
            pool_windows: 0,
        };
        if let Some(ns) = initial_ns {
            l.seed(units_of_ns(ns));
        }
        l
    }

    fn warm(&self) -> bool {
        self.observations >= self.rule.warmup
    }

    /// The baseline shown: none before the first observation.
    fn shown(&self) -> Option<u64> {
        (self.observations > 0).then_some(self.baseline)
    }

    /// The bucket a span is judged by: calls in buckets above it are slow.
    fn threshold_bucket(&self) -> usize {
        let r = &self.rule;
        if !self.warm() {
            return r.ceiling_bucket;
        }
        // The first edge at or above k × the baseline as reported (none
        // beyond the last ordinary bucket's).
        let target = r.multiplier * ns_of_units(self.baseline) as f64;
        let at_or_above = (0..TOP).find(|&j| edge(j) as f64 >= target).unwrap_or(TOP - 1);
        at_or_above.clamp(r.floor_bucket, r.ceiling_bucket)
    }

    /// A healthy dense span over `windows` windows: pooled; observed, and
    /// the pool emptied, once it holds enough calls.
    fn healthy(&mut self, span: &Histogram, windows: u64) {
        for (p, n) in self.pool.iter_mut().zip(span) {
            *p += n;
        }
        self.pool_windows = self.pool_windows.saturating_add(windows);
        if self.pool.iter().sum::<u64>() < self.rule.samples {
            return;
        }
        let b = quantile_bucket(&self.pool, self.rule.quantile_ppb).expect("a full pool");
        self.observe((b as u64) * UNIT, self.pool_windows);
        self.forget();
    }

    fn observe(&mut self, obs: u64, windows: u64) {
        if !self.warm() {
            // The running mean of the warmup's observations.
            let n = i128::from(self.observations) + 1;
            let b = i128::from(self.baseline);
            self.baseline = (b + (i128::from(obs) - b) / n) as u64;
            self.observations += 1;
        } else if obs < self.baseline {
            self.baseline -= (self.baseline - obs).div_ceil(2);
        } else {
            let most = self
                .baseline
                .saturating_add(self.rule.rise_per_window.saturating_mul(windows));
            self.baseline = obs.min(most);
        }
    }

    /// A span that may not be learned from: nothing pooled straddles it.
    fn forget(&mut self) {
        self.pool.iter_mut().for_each(|n| *n = 0);
        self.pool_windows = 0;
    }

    fn cold(&mut self) {
        self.baseline = 0;
        self.observations = 0;
        self.forget();
    }

    /// Warm at once, from `units` (at most the last ordinary bucket).
    fn seed(&mut self, units: u64) {
        self.baseline = units.min((TOP as u64 - 1) * UNIT);
        self.observations = self.rule.warmup.max(1);
        self.forget();
    }
}

/// What a closed span teaches the baseline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lesson {
    /// Judged, dense, healthy (at most 10% failed), not a ramp's: pooled.
    Learn,
    /// Judged healthy but sparse: neither pooled nor breaking the pool.
    Skip,
    /// Not judged, breaching, tripping, more than 10% failed, or a ramp's:
    /// the pool is emptied.
    Forget,
}

/// The golden ratio's fractional part in 64-bit fixed point: the ramp's
/// `n`-th admission decision admits iff `frac(n φ)` is under the share.
const PHI: u64 = 0x9E37_79B9_7F4A_7C15;

/// A recovery ramp under way: its start, and its admission decisions so far.
#[derive(Debug, Clone, Copy)]
struct RampRun {
    since: u64,
    decisions: u64,
}

/// What a permit of the model is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Permit {
    Normal {
        generation: u64,
        start: u64,
    },
    Probe {
        round: u64,
        lease: Option<usize>,
        start: u64,
    },
    Disabled,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Good,
    Failed,
    Slow,
    Cancelled,
}

/// One closed window as the model counts it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Window {
    pub calls: u64,
    pub errors: u64,
    pub slow: u64,
    pub cancelled: u64,
    pub stale: u64,
    /// How many windows the counts span (a late close spans several).
    pub windows: u64,
    pub closed_at: u64,
    /// The threshold the window was judged by (of a closed window).
    pub threshold: u64,
}

#[derive(Debug)]
pub struct Breaker {
    c: Config,
    /// The absolute latency threshold: `latency_threshold`, or with the
    /// relative rule and none given, the rule's ceiling.
    absolute_ns: u64,
    // Time: the breaker's time is the clock plus `shift` (wrapping),
    // raised when the clock is seen behind what was acted on.
    shift: u64,
    high: u64,
    // The state.
    pub state: State,
    pub mode: Mode,
    pub generation: u64,
    pub level: u8,
    pub breaches: u8,
    pub probes: u8,
    pub successes: u8,
    // OPEN.
    deadline: u64,
    opened_at: u64,
    published: Option<u64>,
    /// (round, since) per probe slot.
    leases: Vec<Option<(u64, u64)>>,
    pub trip_count: u64,
    pub shadow_rejections: u64,
    /// Rejections by reason: open, probes busy, forced, ramping.
    pub rejected: [u64; 4],
    flaps: Vec<Option<u64>>,
    flap_pos: usize,
    pub flapping: bool,
    // Windows.
    window_end: u64,
    window_generation: u64,
    ring: Vec<(u64, u64)>,
    ring_pos: usize,
    /// The sequential test's evidence, micro-nats.
    evidence: u64,
    /// How many windows with calls it was gathered over since it was last
    /// zero (a span of several windows counts them all).
    gathered_over: u64,
    pending: Window,
    /// The buckets of the calls counted in `pending`.
    pending_hist: Histogram,
    pub last: Window,
    pub totals: Window,
    pub transitions: Vec<(State, Reason, u64)>,
    /// The relative rule's baseline, if the rule is on.
    learner: Option<Learner>,
    /// CLOSED in its recovery ramp ...
    ramp: Option<RampRun>,
    /// ... whether one ended at an admission since the last window close
    /// (that close's span and the next are then the ramp's) ...
    ramp_ended: bool,
    /// ... and how many spans still to close are judged as an ended ramp's
    /// (not learned from; a trip in them re-opens with the next backoff).
    ramp_spans: u8,
}

impl Breaker {
    /// A breaker built when the clock read `origin`.
    pub fn new(c: Config, origin: u64) -> Self {
        let half = c.window_ns / 2;
        let ring_len = c.error_windows.max(c.failure_count.map_or(1, |(_, w)| w)).max(1);
        let absolute_ns = match c.relative {
            Some(r) if !c.threshold_explicit => r.ceiling_ns,
            _ => c.threshold_ns,
        };
        let learner = c.relative.map(|r| {
            Learner::new(
                RelativeRule::new(&r, c.quantile_ppb, c.window_ns),
                r.initial_baseline_ns,
            )
        });
        let mut m = Self {
            c,
            absolute_ns,
            shift: origin.wrapping_neg(),
            high: 0,
            state: State::Closed,
            mode: Mode::Normal,
            generation: 0,
            level: 0,
            breaches: 0,
            probes: 0,
            successes: 0,
            deadline: 0,
            opened_at: 0,
            published: None,
            leases: vec![None; c.probes as usize],
            trip_count: 0,
            shadow_rejections: 0,
            rejected: [0; 4],
            flaps: vec![None; c.flap_cycles + 1],
            flap_pos: 0,
            flapping: false,
            // The first window ends on the clock's grid of whole windows,
            // more than half a window after the build.
            window_end: c.window_ns - origin.wrapping_add(half) % c.window_ns + half,
            window_generation: 0,
            ring: vec![(0, 0); ring_len],
            ring_pos: 0,
            evidence: 0,
            gathered_over: 0,
            pending: Window::default(),
            pending_hist: empty_histogram(),
            last: Window::default(),
            totals: Window::default(),
            transitions: Vec::new(),
            learner,
            ramp: None,
            ramp_ended: false,
            ramp_spans: 0,
        };
        // Before the first close, the threshold the first window will be
        // judged by.
        m.last.threshold = m.latency_threshold();
        m
    }

    // ---- time ----

    fn signed(&self, raw: u64) -> i64 {
        raw.wrapping_add(self.shift) as i64
    }

    pub fn now(&self, raw: u64) -> u64 {
        self.signed(raw).max(0) as u64
    }

    /// Time for a decision outside a window close: never before the last
    /// close's time.
    fn floored(&self, raw: u64) -> u64 {
        self.now(raw).max(self.high)
    }

    /// Moves the breaker's time so that `raw` reads at least `floor`.
    fn raise_floor(&mut self, raw: u64, floor: u64) -> u64 {
        if self.signed(raw) >= floor as i64 {
            return self.signed(raw) as u64;
        }
        self.shift = floor.wrapping_sub(raw);
        floor
    }

    fn backoff(&self, level: u8) -> u64 {
        let factor = 1u64.checked_shl(u32::from(level)).unwrap_or(u64::MAX);
        self.c.base_ns.saturating_mul(factor).min(self.c.max_ns)
    }

    // ---- transitions ----

    /// A transition: the generation goes up by one, the per-state counts
    /// start from zero, the backoff level is kept, a recovery ramp ends.
    fn transition(&mut self, state: State, mode: Mode, reason: Reason, now: u64) {
        let from = self.state;
        self.ramp = None;
        self.generation += 1;
        self.state = state;
        self.mode = mode;
        self.breaches = 0;
        self.probes = 0;
        self.successes = 0;
        if from == State::HalfOpen && state == State::Open {
            self.flaps[self.flap_pos] = Some(now);
            self.flap_pos = (self.flap_pos + 1) % self.flaps.len();
            if self.flap_count(now) > self.c.flap_cycles {
                self.flapping = true;
            }
        }
        if state == State::Open && mode != Mode::ForcedOpen {
            self.trip_count += 1;
            self.deadline = now.saturating_add(self.backoff(self.level));
            self.opened_at = now;
            self.published = Some(self.generation);
        }
        self.transitions.push((state, reason, self.generation));
    }

    fn flap_count(&self, now: u64) -> usize {
        self.flaps
            .iter()
            .flatten()
            .filter(|&&t| t <= now && now - t <= self.c.flap_ns)
            .count()
    }

    fn published_now(&self) -> bool {
        self.published == Some(self.generation)
    }

    // ---- admission ----

    pub fn allow(&mut self, raw: u64) -> Result<Permit, (RejectReason, Option<u64>)> {
        loop {
            let normal = Permit::Normal {
                generation: self.generation,
                start: raw,
            };
            match self.mode {
                Mode::Disabled => return Ok(Permit::Disabled),
                Mode::ForcedOpen => {
                    self.rejected[2] += 1;
                    return Err((RejectReason::ForcedOpen, None));
                }
                Mode::ForcedClosed => return Ok(normal),
                Mode::Normal | Mode::MetricsOnly => {}
            }
            let verdict = match self.state {
                State::Closed if self.ramp.is_some() => self.admit_ramp(raw),
                State::Closed => return Ok(normal),
                State::Open => self.admit_open(raw),
                State::HalfOpen => self.admit_half_open(raw),
            };
            match verdict {
                Admit::Permit(p) => return Ok(p),
                Admit::Retry => continue,
                Admit::Reject(r) => {
                    if self.mode == Mode::MetricsOnly {
                        self.shadow_rejections += 1;
                        return Ok(normal);
                    }
                    let by_reason = match r.0 {
                        RejectReason::Open => 0,
                        RejectReason::ProbesBusy => 1,
                        RejectReason::ForcedOpen => 2,
                        _ => 3, // Ramping
                    };
                    self.rejected[by_reason] += 1;
                    return Err(r);
                }
            }
        }
    }

    /// OPEN: reject until the deadline (after a clock that stepped back more
    /// than the longest backoff, time resumes from the trip); the first
    /// caller past it opens the HALF_OPEN round as its first probe.
    fn admit_open(&mut self, raw: u64) -> Admit {
        let signed = self.signed(raw);
        let now = if i128::from(signed) < i128::from(self.deadline) - i128::from(self.c.max_ns) {
            self.raise_floor(raw, self.opened_at)
        } else {
            signed.max(0) as u64
        };
        let now = now.max(self.high);
        if now < self.deadline {
            return Admit::Reject((RejectReason::Open, Some(self.deadline - now)));
        }
        self.transition(State::HalfOpen, self.mode, Reason::BackoffElapsed, now);
        self.probes = 1;
        Admit::Permit(self.probe(raw, now))
    }

    /// HALF_OPEN: a probe out past its lease re-opens first; otherwise a
    /// free slot admits a probe, none rejects.
    fn admit_half_open(&mut self, raw: u64) -> Admit {
        let now = self.floored(raw);
        if self.lease_expired(now) {
            return Admit::Retry;
        }
        if self.probes < self.c.probes {
            self.probes += 1;
            return Admit::Permit(self.probe(raw, now));
        }
        // Decided at the latest when the earliest lease of the round ends;
        // the latency threshold if none is stamped.
        let round = self.generation;
        let end = self
            .leases
            .iter()
            .flatten()
            .filter(|(r, _)| *r == round)
            .map(|(_, since)| since.saturating_add(self.c.lease_ns))
            .min();
        let hint = end.map_or(self.absolute_ns, |end| end.saturating_sub(now));
        Admit::Reject((RejectReason::ProbesBusy, Some(hint)))
    }

    /// CLOSED in a recovery ramp: the share admitted rises linearly from
    /// none at its start to all at its end; the `n`-th decision of the ramp
    /// admits iff `frac(n φ) < elapsed / length` (both in 64-bit fixed
    /// point: `n × φ` wrapping, `elapsed × floor((2^64 − 1) / length)`). A
    /// ramp that has run its course ends first (the admission is then an
    /// ordinary CLOSED one). A rejection's retry hint: the rest of the ramp,
    /// at most a window.
    fn admit_ramp(&mut self, raw: u64) -> Admit {
        let now = self.floored(raw);
        let length = self.c.ramp_ns;
        let run = self.ramp.as_mut().expect("ramping");
        let elapsed = now.saturating_sub(run.since);
        if elapsed >= length {
            self.end_ramp();
            // The next close's span was counted in part in the ramp, and
            // the one after may hold calls it admitted.
            self.ramp_ended = true;
            return Admit::Retry;
        }
        let n = run.decisions;
        run.decisions += 1;
        let share = elapsed * (u64::MAX / length);
        if n.wrapping_mul(PHI) < share {
            return Admit::Permit(Permit::Normal {
                generation: self.generation,
                start: raw,
            });
        }
        let retry = (length - elapsed).min(self.c.window_ns);
        Admit::Reject((RejectReason::Ramping, Some(retry)))
    }

    /// The ramp is over: plain CLOSED, backoff level 0; not a transition.
    fn end_ramp(&mut self) {
        self.ramp = None;
        self.level = 0;
    }

    fn probe(&mut self, raw: u64, now: u64) -> Permit {
        let round = self.generation;
        let lease = self.leases.iter().position(|l| l.map_or(true, |(r, _)| r < round));
        if let Some(i) = lease {
            self.leases[i] = Some((round, now));
        }
        Permit::Probe {
            round,
            lease,
            start: raw,
        }
    }

    fn lease_expired(&mut self, now: u64) -> bool {
        if self.state != State::HalfOpen || self.probes == 0 {
            return false;
        }
        let round = self.generation;
        let lease = self.c.lease_ns;
        let expired = self
            .leases
            .iter()
            .flatten()
            .any(|&(r, since)| r == round && now >= since.saturating_add(lease));
        if expired {
            self.reopen(Reason::ProbeLeaseExpired, now);
        }
        expired
    }

    fn reopen(&mut self, reason: Reason, now: u64) {
        self.level = (self.level + 1).min(31);
        self.transition(State::Open, self.mode, reason, now);
    }

    // ---- verdicts ----

    /// A call counted in the window in progress: slow by the absolute
    /// threshold now; by the relative rule at the close, from its bucket.
    fn count(&mut self, latency: u64, ok: bool) {
        self.pending.calls += 1;
        self.pending.errors += u64::from(!ok);
        self.pending.slow += u64::from(latency > self.absolute_ns);
        self.pending_hist[bucket(latency)] += 1;
    }

    /// A verdict with a latency (measured by the caller or by the clock).
    pub fn finish(&mut self, p: Permit, latency: u64, ok: bool, raw: u64) {
        match p {
            Permit::Disabled => {}
            Permit::Normal { generation, .. } => {
                if generation == self.generation {
                    self.count(latency, ok);
                } else {
                    self.pending.stale += 1;
                }
            }
            Permit::Probe { round, lease, .. } => {
                if round == self.generation {
                    self.count(latency, ok);
                } else {
                    self.pending.stale += 1;
                }
                // Judged by the threshold windows are judged by now.
                let outcome = match (ok, latency > self.latency_threshold()) {
                    (false, _) => Outcome::Failed,
                    (true, true) => Outcome::Slow,
                    (true, false) => Outcome::Good,
                };
                self.probe_verdict(round, lease, outcome, raw);
            }
        }
    }

    /// A permit dropped without a verdict.
    pub fn cancel(&mut self, p: Permit, raw: u64) {
        if p == Permit::Disabled {
            return;
        }
        if self.c.cancel_is_failure {
            let start = match p {
                Permit::Normal { start, .. } | Permit::Probe { start, .. } => start,
                Permit::Disabled => unreachable!(),
            };
            return self.finish(p, raw.saturating_sub(start), false, raw);
        }
        match p {
            Permit::Normal { generation, .. } => {
                if generation == self.generation {
                    self.pending.cancelled += 1;
                } else {
                    self.pending.stale += 1;
                }
            }
            Permit::Probe { round, lease, .. } => {
                if round == self.generation {
                    self.pending.cancelled += 1;
                } else {
                    self.pending.stale += 1;
                }
                self.probe_verdict(round, lease, Outcome::Cancelled, raw);
            }
            Permit::Disabled => unreachable!(),
        }
    }

    fn probe_verdict(&mut self, round: u64, lease: Option<usize>, outcome: Outcome, raw: u64) {
        if let Some(i) = lease {
            if self.leases[i].is_some_and(|(r, _)| r == round) {
                self.leases[i] = None;
            }
        }
        if self.state != State::HalfOpen || self.generation != round {
            return; // an earlier round's verdict decides nothing
        }
        let now = self.floored(raw);
        match outcome {
            Outcome::Cancelled => self.probes -= 1,
            Outcome::Good if self.successes + 1 >= self.c.successes && self.c.ramp_ns > 0 => {
                // CLOSED in a recovery ramp, the backoff level kept until
                // it ends.
                self.transition(State::Closed, self.mode, Reason::ProbesSucceeded, now);
                self.ramp = Some(RampRun {
                    since: now,
                    decisions: 0,
                });
            }
            Outcome::Good if self.successes + 1 >= self.c.successes => {
                self.level = 0;
                self.transition(State::Closed, self.mode, Reason::ProbesSucceeded, now);
            }
            Outcome::Good => {
                self.probes -= 1;
                self.successes += 1;
            }
            Outcome::Failed => self.reopen(Reason::ProbeFailed, now),
            Outcome::Slow => self.reopen(Reason::ProbeSlow, now),
        }
    }

    // ---- overrides ----

    fn set_mode(&mut self, state: State, mode: Mode, reason: Reason, raw: u64) {
        if self.mode != mode {
            // An override ends a recovery ramp, and the backoff level the
            // ramp kept with it.
            if self.ramp.is_some() {
                self.level = 0;
            }
            let now = self.floored(raw);
            self.transition(state, mode, reason, now);
        }
    }

    pub fn force_open(&mut self, raw: u64) {
        self.set_mode(State::Open, Mode::ForcedOpen, Reason::ForcedOpen, raw);
    }

    pub fn force_closed(&mut self, raw: u64) {
        self.set_mode(State::Closed, Mode::ForcedClosed, Reason::ForcedClosed, raw);
    }

    pub fn disable(&mut self, raw: u64) {
        self.set_mode(State::Closed, Mode::Disabled, Reason::Disabled, raw);
    }

    pub fn metrics_only(&mut self, raw: u64) {
        self.set_mode(State::Closed, Mode::MetricsOnly, Reason::MetricsOnly, raw);
    }

    pub fn reset(&mut self, raw: u64) {
        if self.state == State::Closed && self.mode == Mode::Normal {
            // Not a transition, but the statistics are lost: the window in
            // progress (into the totals, unjudged), the rolling spans, the
            // streak, the baseline's pool, the backoff level and a recovery
            // ramp.
            self.breaches = 0;
            self.level = 0;
            self.ramp = None;
            // The span in progress is forgotten: the next one begins here,
            // after any ramp (what a ramp that ended since the last close
            // admitted was in the forgotten span).
            self.ramp_ended = false;
            self.ramp_spans = 0;
            let counts = std::mem::take(&mut self.pending);
            let hist = std::mem::replace(&mut self.pending_hist, empty_histogram());
            let (slow, _, _) = self.judged_slow(&counts, &hist);
            // Into the totals as a close counts them: slower than the
            // window's threshold (with the relative rule, the lower one).
            self.totals.calls += counts.calls;
            self.totals.errors += counts.errors;
            self.totals.slow += slow;
            self.totals.cancelled += counts.cancelled;
            self.totals.stale += counts.stale;
            self.ring.iter_mut().for_each(|e| *e = (0, 0));
            (self.evidence, self.gathered_over) = (0, 0);
            if let Some(l) = self.learner.as_mut() {
                l.forget();
            }
            self.window_generation = self.generation;
            return;
        }
        self.level = 0;
        let now = self.floored(raw);
        self.transition(State::Closed, Mode::Normal, Reason::Reset, now);
    }

    pub fn trip_now(&mut self, raw: u64) {
        if self.state == State::Closed && matches!(self.mode, Mode::Normal | Mode::MetricsOnly) {
            let now = self.floored(raw);
            self.trip(Reason::ManualTrip, self.ramp.is_some(), now);
        }
    }

    // ---- window close ----

    pub fn tick(&mut self, raw: u64) {
        let signed = self.signed(raw);
        let now = if signed < self.high as i64 {
            self.raise_floor(raw, self.high)
        } else {
            signed as u64
        };
        self.high = now;
        if self.state == State::Open && self.mode != Mode::ForcedOpen && self.published_now() && now >= self.deadline {
            self.transition(State::HalfOpen, self.mode, Reason::BackoffElapsed, now);
        }
        self.lease_expired(now);
        if self.flapping && self.flap_count(now) <= self.c.flap_cycles {
            self.flapping = false;
        }
        if now >= self.window_end {
            self.close_due(now);
        }
        // A recovery ramp that has run its course ends after the windows:
        // a span closed now was counted in it and is judged as the ramp's,
        // and so is the next one (it may hold calls the ramp admitted).
        if self
            .ramp
            .is_some_and(|run| now.saturating_sub(run.since) >= self.c.ramp_ns)
        {
            self.end_ramp();
            self.ramp_spans = 1;
        }
    }

    /// The windows due at `now` (the current one has ended), closed as one
    /// span.
    fn close_due(&mut self, now: u64) {
        let w = self.c.window_ns;
        // Everything counted since the last close happened in one of the
        // windows due: a span of `due` windows, judged as if spread evenly,
        // and only if no transition happened since the last close.
        let due = (now - self.window_end) / w + 1;
        let newest_end = self.window_end.saturating_add((due - 1).saturating_mul(w));
        self.window_end = newest_end.saturating_add(w);
        let before = self.generation;
        let counts = std::mem::take(&mut self.pending);
        let hist = std::mem::replace(&mut self.pending_hist, empty_histogram());
        let judged = self.generation == self.window_generation
            && self.state == State::Closed
            && matches!(self.mode, Mode::Normal | Mode::MetricsOnly);
        self.close_span(counts, &hist, due, newest_end, now, judged);
        self.window_generation = before;
    }

    fn sum(&self, n: usize) -> (u64, u64) {
        let len = self.ring.len();
        (1..=n.min(len))
            .map(|k| self.ring[(self.ring_pos + len - k) % len])
            .fold((0, 0), |(c, e), (wc, we)| (c + wc, e + we))
    }

    /// The slow calls of a span by the threshold it is judged by (with the
    /// relative rule, the lower of the absolute one and the relative one's
    /// bucket edge: a call slower than either is slow, and as both are cuts
    /// of the same latencies, that is the larger of the two counts), that
    /// threshold, and the calls slower than the absolute one.
    fn judged_slow(&self, counts: &Window, hist: &Histogram) -> (u64, u64, u64) {
        let absolute = counts.slow;
        match self.learner.as_ref() {
            None => (absolute, self.absolute_ns, absolute),
            Some(l) => {
                let j = l.threshold_bucket();
                let relative: u64 = hist[j + 1..].iter().sum();
                (relative.max(absolute), self.absolute_ns.min(edge(j)), absolute)
            }
        }
    }

    /// Trips to OPEN; from a recovery ramp (`in_ramp`) with the next
    /// backoff.
    fn trip(&mut self, reason: Reason, in_ramp: bool, now: u64) {
        if in_ramp {
            self.level = (self.level + 1).min(31);
        }
        self.transition(State::Open, self.mode, reason, now);
    }

    fn close_span(&mut self, counts: Window, hist: &Histogram, windows: u64, closed_at: u64, now: u64, judged: bool) {
        let (slow, threshold, absolute_slow) = self.judged_slow(&counts, hist);
        self.last = Window {
            windows: windows.min(u64::from(u32::MAX)),
            closed_at,
            slow,
            threshold,
            ..counts
        };
        self.totals.calls += counts.calls;
        self.totals.errors += counts.errors;
        self.totals.slow += slow;
        self.totals.cancelled += counts.cancelled;
        self.totals.stale += counts.stale;
        // A ramp that ended at an admission since the last close: this span
        // was counted in part in it, and the next may hold calls it
        // admitted. Both are judged as the ramp's, as is the span after a
        // ramp that a close ended (`tick`).
        if std::mem::take(&mut self.ramp_ended) {
            self.ramp_spans = 2;
        }
        let in_ramp = self.ramp.is_some() || self.ramp_spans > 0;
        self.ramp_spans = self.ramp_spans.saturating_sub(1);
        if !judged {
            // After a transition a ramp's permits are stale: the next span
            // holds none of its calls.
            self.ramp_spans = 0;
            self.ring.iter_mut().for_each(|e| *e = (0, 0));
            (self.evidence, self.gathered_over) = (0, 0);
            self.learn(Lesson::Forget, hist, windows);
            return;
        }
        // Each window's even share, oldest first, the remainder to the
        // newest; windows older than the ring are left out.
        let narrow = |n: u64| n.min(u64::from(u32::MAX));
        for i in (0..windows.min(self.ring.len() as u64)).rev() {
            let share = |n: u64| n / windows + u64::from(i < n % windows);
            self.ring[self.ring_pos] = (narrow(share(counts.calls)), narrow(share(counts.errors)));
            self.ring_pos = (self.ring_pos + 1) % self.ring.len();
        }
        let c = self.c;
        let slow_ppb = 1_000_000_000 - c.quantile_ppb;
        let dense = counts.calls > 0 && counts.calls >= c.min_calls.saturating_mul(windows);
        let breach = dense && exceeds(slow, counts.calls, slow_ppb);
        let (slow_weight, fast_weight, bound) = sparse_weights(c.quantile_ppb);
        if dense && !breach {
            (self.evidence, self.gathered_over) = (0, 0);
        } else {
            let slow = slow.min(counts.calls);
            let llr = i128::from(slow.saturating_mul(slow_weight))
                - i128::from((counts.calls - slow).saturating_mul(fast_weight));
            let was_zero = self.evidence == 0;
            self.evidence = (i128::from(self.evidence) + llr).clamp(0, i128::from(bound)) as u64;
            if self.evidence == 0 {
                self.gathered_over = 0;
            } else if counts.calls > 0 {
                self.gathered_over = if was_zero { 0 } else { self.gathered_over } + windows;
            }
        }
        let breaches = if breach {
            self.breaches.saturating_add(windows.min(255) as u8)
        } else {
            0
        };
        let (span_calls, span_errors) = self.sum(c.error_windows);
        let span_errors = span_errors.min(span_calls);
        let error_trip = span_calls > 0 && span_calls >= c.min_calls && exceeds(span_errors, span_calls, c.error_ppb);
        let count_trip = c.failure_count.is_some_and(|(n, span)| self.sum(span).1 >= n);
        let reason = if breaches >= c.trip_windows {
            // Named by the rule the last window breached by: the absolute
            // threshold's, unless only the relative one's count is over.
            if exceeds(absolute_slow.min(slow), counts.calls, slow_ppb) {
                Some(Reason::LatencyBreach)
            } else {
                Some(Reason::RelativeLatency)
            }
        } else if self.evidence >= bound && self.gathered_over >= u64::from(c.trip_windows) {
            Some(Reason::SparseLatency)
        } else if error_trip {
            Some(Reason::ErrorRate)
        } else if count_trip {
            Some(Reason::FailureCount)
        } else {
            None
        };
        // Learned from only if judged healthy (no breach, no trip, at most
        // 10% of its calls failed) and not a ramp's; dense, or else skipped.
        let failing = exceeds(counts.errors.min(counts.calls), counts.calls, MAX_ERROR_PPB);
        let lesson = match (reason, breach, in_ramp || failing) {
            (None, false, false) if dense => Lesson::Learn,
            (None, false, false) => Lesson::Skip,
            _ => Lesson::Forget,
        };
        match reason {
            Some(r) => {
                self.ring.iter_mut().for_each(|e| *e = (0, 0));
                (self.evidence, self.gathered_over) = (0, 0);
                self.trip(r, in_ramp, now);
            }
            None => self.breaches = breaches,
        }
        self.learn(lesson, hist, windows);
    }

    /// Hands a closed span to the baseline (nothing without the rule).
    fn learn(&mut self, lesson: Lesson, hist: &Histogram, windows: u64) {
        let Some(l) = self.learner.as_mut() else {
            return;
        };
        match lesson {
            Lesson::Learn => l.healthy(hist, windows),
            Lesson::Skip => {}
            Lesson::Forget => l.forget(),
        }
    }

    // ---- the relative rule's operations ----

    /// `Breaker::reset_baseline`: a cold start.
    pub fn reset_baseline(&mut self) {
        if let Some(l) = self.learner.as_mut() {
            l.cold();
        }
    }

    /// `Breaker::seed_baseline`: warm at once from `ns`; refused without the
    /// rule, for zero, and above an hour.
    pub fn seed_baseline(&mut self, ns: u64) -> Result<(), ()> {
        let l = self.learner.as_mut().ok_or(())?;
        if ns == 0 || ns > 3_600_000_000_000 {
            return Err(());
        }
        l.seed(units_of_ns(ns));
        Ok(())
    }

    // ---- readings ----

    /// The threshold the window in progress is judged by, and probes now.
    pub fn latency_threshold(&self) -> u64 {
        match self.learner.as_ref() {
            Some(l) => self.absolute_ns.min(edge(l.threshold_bucket())),
            None => self.absolute_ns,
        }
    }

    /// The absolute threshold (`Limits::latency_threshold`).
    pub fn absolute_threshold(&self) -> u64 {
        self.absolute_ns
    }

    /// The relative rule's baseline, in nanoseconds, once there is one.
    pub fn latency_baseline(&self) -> Option<u64> {
        self.learner.as_ref().and_then(Learner::shown).map(ns_of_units)
    }

    /// CLOSED in a recovery ramp: the share admitted now and the time left,
    /// at the clock reading `raw` (a ramp past its length that nothing has
    /// ended yet shows as complete).
    pub fn ramp(&self, raw: u64) -> Option<(f64, Duration)> {
        let run = self.ramp?;
        let length = self.c.ramp_ns;
        let elapsed = self.now(raw).saturating_sub(run.since).min(length);
        Some((elapsed as f64 / length as f64, Duration::from_nanos(length - elapsed)))
    }

    /// When OPEN (not forced): how long until the next probe, and how long
    /// it has been open, at the clock reading `raw`.
    pub fn open_times(&self, raw: u64) -> Option<(Duration, Duration)> {
        let now = self.now(raw);
        (self.state == State::Open && self.mode != Mode::ForcedOpen && self.published_now()).then(|| {
            (
                Duration::from_nanos(self.deadline.saturating_sub(now)),
                Duration::from_nanos(now.saturating_sub(self.opened_at)),
            )
        })
    }
}

enum Admit {
    /// A probe's permit, or a ramp's ordinary one.
    Permit(Permit),
    Retry,
    Reject((RejectReason, Option<u64>)),
}
