//! A reference model of the breaker, written for clarity: plain fields, one
//! thread, no atomics, no clock of its own (every operation is given the
//! clock's reading). It follows the rules the crate documents, one function
//! per rule, and knows nothing of the state word, the shards or the
//! protocols that make the real breaker concurrent.
//!
//! It covers everything but the latency quantiles (the sketch has its own
//! tests), in-flight tracking, local handles and jitter.

use std::time::Duration;
use tailguard::{Mode, Reason, RejectReason, State};

/// The settings the model judges by (the builder's, in nanoseconds and
/// parts per billion).
#[derive(Debug, Clone, Copy)]
pub struct Config {
    pub threshold_ns: u64,
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
}

#[derive(Debug)]
pub struct Breaker {
    c: Config,
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
    /// Rejections by reason: open, probes busy, forced.
    pub rejected: [u64; 3],
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
    pub last: Window,
    pub totals: Window,
    pub transitions: Vec<(State, Reason, u64)>,
}

impl Breaker {
    /// A breaker built when the clock read `origin`.
    pub fn new(c: Config, origin: u64) -> Self {
        let half = c.window_ns / 2;
        let ring_len = c.error_windows.max(c.failure_count.map_or(1, |(_, w)| w)).max(1);
        Self {
            c,
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
            rejected: [0; 3],
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
            last: Window::default(),
            totals: Window::default(),
            transitions: Vec::new(),
        }
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
    /// start from zero, the backoff level is kept.
    fn transition(&mut self, state: State, mode: Mode, reason: Reason, now: u64) {
        let from = self.state;
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
                State::Closed => return Ok(normal),
                State::Open => self.admit_open(raw),
                State::HalfOpen => self.admit_half_open(raw),
            };
            match verdict {
                Admit::Probe(p) => return Ok(p),
                Admit::Retry => continue,
                Admit::Reject(r) => {
                    if self.mode == Mode::MetricsOnly {
                        self.shadow_rejections += 1;
                        return Ok(normal);
                    }
                    self.rejected[usize::from(r.0 == RejectReason::ProbesBusy)] += 1;
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
        Admit::Probe(self.probe(raw, now))
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
            return Admit::Probe(self.probe(raw, now));
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
        let hint = end.map_or(self.c.threshold_ns, |end| end.saturating_sub(now));
        Admit::Reject((RejectReason::ProbesBusy, Some(hint)))
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

    fn count(&mut self, latency: u64, ok: bool) {
        self.pending.calls += 1;
        self.pending.errors += u64::from(!ok);
        self.pending.slow += u64::from(latency > self.c.threshold_ns);
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
                let outcome = match (ok, latency > self.c.threshold_ns) {
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
            // streak and the backoff level.
            self.breaches = 0;
            self.level = 0;
            let counts = std::mem::take(&mut self.pending);
            self.totals.calls += counts.calls;
            self.totals.errors += counts.errors;
            self.totals.slow += counts.slow;
            self.totals.cancelled += counts.cancelled;
            self.totals.stale += counts.stale;
            self.ring.iter_mut().for_each(|e| *e = (0, 0));
            (self.evidence, self.gathered_over) = (0, 0);
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
            self.transition(State::Open, self.mode, Reason::ManualTrip, now);
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
        if now < self.window_end {
            return;
        }
        let w = self.c.window_ns;
        // Everything counted since the last close happened in one of the
        // windows due: a span of `due` windows, judged as if spread evenly,
        // and only if no transition happened since the last close.
        let due = (now - self.window_end) / w + 1;
        let newest_end = self.window_end.saturating_add((due - 1).saturating_mul(w));
        self.window_end = newest_end.saturating_add(w);
        let before = self.generation;
        let counts = std::mem::take(&mut self.pending);
        let judged = self.generation == self.window_generation
            && self.state == State::Closed
            && matches!(self.mode, Mode::Normal | Mode::MetricsOnly);
        self.close_span(counts, due, newest_end, now, judged);
        self.window_generation = before;
    }

    fn sum(&self, n: usize) -> (u64, u64) {
        let len = self.ring.len();
        (1..=n.min(len))
            .map(|k| self.ring[(self.ring_pos + len - k) % len])
            .fold((0, 0), |(c, e), (wc, we)| (c + wc, e + we))
    }

    fn close_span(&mut self, counts: Window, windows: u64, closed_at: u64, now: u64, judged: bool) {
        self.last = Window {
            windows: windows.min(u64::from(u32::MAX)),
            closed_at,
            ..counts
        };
        self.totals.calls += counts.calls;
        self.totals.errors += counts.errors;
        self.totals.slow += counts.slow;
        self.totals.cancelled += counts.cancelled;
        self.totals.stale += counts.stale;
        if !judged {
            self.ring.iter_mut().for_each(|e| *e = (0, 0));
            (self.evidence, self.gathered_over) = (0, 0);
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
        let dense = counts.calls > 0 && counts.calls >= c.min_calls.saturating_mul(windows);
        let breach = dense && exceeds(counts.slow, counts.calls, 1_000_000_000 - c.quantile_ppb);
        let (slow_weight, fast_weight, bound) = sparse_weights(c.quantile_ppb);
        if dense && !breach {
            (self.evidence, self.gathered_over) = (0, 0);
        } else {
            let slow = counts.slow.min(counts.calls);
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
            Some(Reason::LatencyBreach)
        } else if self.evidence >= bound && self.gathered_over >= u64::from(c.trip_windows) {
            Some(Reason::SparseLatency)
        } else if error_trip {
            Some(Reason::ErrorRate)
        } else if count_trip {
            Some(Reason::FailureCount)
        } else {
            None
        };
        match reason {
            Some(r) => {
                self.ring.iter_mut().for_each(|e| *e = (0, 0));
                (self.evidence, self.gathered_over) = (0, 0);
                self.transition(State::Open, self.mode, r, now);
            }
            None => self.breaches = breaches,
        }
    }

    // ---- readings ----

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
    Probe(Permit),
    Retry,
    Reject((RejectReason, Option<u64>)),
}
