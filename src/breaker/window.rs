//! Window close: `tick`, by hand or by the ticker. Drains the shards into
//! the closed window's counts and histogram, claims in-flight calls, decides
//! whether the window may be judged, hands it to the trip rule
//! (`crate::trip`), and applies the verdict; also moves a due OPEN to
//! HALF_OPEN, re-opens on an expired probe lease, clears the flapping flag,
//! and delivers waiting events.
//!
//! Owns `TickState` (under the `tick` lock); touches the state word
//! (trips, breach counts), the shards (drains them and claims their
//! in-flight slots) and `floor`.

use super::Inner;
use crate::baseline::Learner;
use crate::config::Config;
use crate::flight::{Claim, FLIGHT_GEN_HORIZON};
use crate::histogram::Cumulative;
use crate::report::{LatencyQuantiles, Mode, State, Totals, WindowStats};
use crate::shard::Counts;
use crate::sketch::{Histogram, KEY_OFFSET};
use crate::state::Decision;
use crate::sync::Ordering;
use crate::trip;
use std::time::Duration;

/// Window-close state, owned by whoever holds the tick lock.
#[derive(Debug)]
pub(super) struct TickState {
    /// End of the current window, relative nanoseconds.
    pub(super) window_end: u64,
    /// The full generation read just before the last drain of the
    /// counters: the counts drained at the next close are judged only if the
    /// generation is still this one after that drain (nothing between two
    /// drains straddles a transition), whatever the tick cadence.
    pub(super) window_gen: u64,
    /// Per-window (calls, errors), newest at `ring_pos - 1` (at most 1024
    /// windows: `MAX_ROLLING_WINDOWS`).
    pub(super) ring: Box<[(u32, u32)]>,
    pub(super) ring_pos: u16,
    /// The highest time seen by window close (step-back detection).
    pub(super) high: u64,
    /// The trip rule's sequential test over sparse spans (micro-nats; see
    /// `crate::trip`): carried from close to close, cleared with the ring.
    pub(super) evidence: u32,
    /// The windows it was gathered over (see `crate::trip`).
    pub(super) evidence_windows: u8,
    pub(super) last: WindowStats,
    pub(super) totals: Totals,
    /// The relative rule's baseline and pool (`crate::baseline`), if the
    /// rule is on ...
    pub(super) learner: Option<Box<Learner>>,
    /// ... the bucket it judges the next span by (`None` without it), and
    /// whether its pool holds calls: kept here, so that a close with
    /// nothing to learn or forget does not touch the learner.
    /// (A bucket index in a byte: the sketch has fewer than 256.)
    pub(super) relative_index: Option<u8>,
    pub(super) pooled: bool,
    /// Spans still to judge as a recovery ramp's after it ended (its last
    /// span and the next: see `close_span`).
    pub(super) ramp_spans: u8,
    /// Every call measured since the build, by latency (boxed: it is read
    /// at scrapes, written once a close).
    pub(super) latency: Box<Cumulative>,
}

const _: () = assert!(crate::sketch::BUCKETS <= 256, "a bucket index fits a byte");

/// A bucket index as the byte `TickState` keeps it in.
pub(super) fn bucket_byte(bucket: usize) -> u8 {
    bucket.min(crate::sketch::BUCKETS - 1) as u8
}

/// The threshold a window is judged by (and probes): the absolute one, or
/// with the relative rule the lower of it and the relative threshold.
pub(super) fn effective_threshold(config: &Config, learner: Option<&Learner>) -> u64 {
    match (config.relative.as_deref(), learner) {
        (Some((rule, _)), Some(l)) => config.threshold_ns.min(l.threshold_ns(rule)),
        _ => config.threshold_ns,
    }
}

/// What a closed span teaches the relative rule's baseline.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Lesson {
    /// Healthy, dense, judged, not ramping: pooled.
    Learn,
    /// Judged healthy but sparse: neither pooled nor breaking the pool.
    Skip,
    /// Not judged, breaching, tripping, ramping: the pool is emptied.
    Forget,
}

impl TickState {
    /// Adds a closed span to the totals: monotonic counters that stop at
    /// `u64::MAX` rather than wrap (or panic).
    fn add_totals(&mut self, calls: u64, slow: u64, counts: &Counts) {
        let t = &mut self.totals;
        t.calls = t.calls.saturating_add(calls);
        t.errors = t.errors.saturating_add(counts.errors);
        t.slow = t.slow.saturating_add(slow);
        t.cancelled = t.cancelled.saturating_add(counts.cancelled);
        t.stale = t.stale.saturating_add(counts.stale);
    }

    /// Forgets the rolling spans and the sparse evidence: after a trip, a
    /// span that straddles a transition, a reset.
    fn clear_ring(&mut self) {
        self.ring.iter_mut().for_each(|e| *e = (0, 0));
        self.evidence = 0;
        self.evidence_windows = 0;
    }

    fn push(&mut self, calls: u64, errors: u64) {
        let len = self.ring.len();
        let narrow = |n: u64| u32::try_from(n).unwrap_or(u32::MAX);
        self.ring[self.ring_pos as usize] = (narrow(calls), narrow(errors));
        self.ring_pos = ((self.ring_pos as usize + 1) % len) as u16;
    }

    /// Sum of the newest `n` windows.
    fn sum(&self, n: usize) -> (u64, u64) {
        // The newest `n` are the `n` before `ring_pos`, wrapping: the tail
        // of `[..ring_pos]`, then, if that is too short, the tail of the rest.
        let (recent, earlier) = self.ring.split_at(self.ring_pos as usize);
        let n = n.min(self.ring.len());
        let from_recent = n.min(recent.len());
        recent[recent.len() - from_recent..]
            .iter()
            .chain(&earlier[earlier.len() - (n - from_recent)..])
            .fold((0, 0), |(c, e), &(wc, we)| (c + u64::from(wc), e + u64::from(we)))
    }
}

/// What a window close drained: the counts since the last drain (and the
/// in-flight calls it claimed as slow), over `windows` windows, the newest
/// ending at `closed_at`; `counted_in`, the full generation they were
/// counted in; `judged`, whether the trip rule may judge them.
struct Span {
    counts: Counts,
    in_flight: u64,
    latency: Option<LatencyQuantiles>,
    windows: u64,
    closed_at: u64,
    counted_in: u64,
    judged: bool,
}

impl Inner {
    /// Closes due windows, then delivers waiting events (whatever made them:
    /// this tick, or `allow` and `record` since the last one).
    pub(super) fn tick(&self) {
        let mut ts = self.tick.lock();
        self.tick_locked(&mut ts);
        drop(ts);
        self.events.deliver();
    }

    /// The work of a tick, under the tick lock. Its steps, in this order,
    /// which carries the correctness argument:
    ///
    /// 1. [`advance_time`](Self::advance_time): one clock reading, raised
    ///    to the highest time a close has seen if the clock stepped back,
    ///    and published as `floor`. Every later step, and every decision
    ///    outside a close until the next one, reads time at least this
    ///    late, so nothing can be dated before what this close acts on.
    /// 2. [`expire`](Self::expire): an OPEN whose backoff ended moves to
    ///    HALF_OPEN, a probe out past its lease re-opens, an aged-out
    ///    flapping flag clears. Before the windows: the span judged below
    ///    must see the state these leave (a span that straddles one of
    ///    these transitions is not judged).
    /// 3. [`due_windows`](Self::due_windows): nothing more until the
    ///    current window has ended; then how many windows this close ends
    ///    (one tick may end several: their counts are one span, judged as
    ///    if spread evenly over them).
    /// 4. [`drain_span`](Self::drain_span): the generation read before the
    ///    drain (kept for the next close), the shards drained, the state
    ///    read after it. The span is judged only if the generation after
    ///    this drain is the one read before the last drain: no transition
    ///    between two drains, whatever the tick cadence. In-flight calls
    ///    are claimed after the drain, against the state read after it
    ///    (stale if from before a transition, slow if hung in a judged span).
    /// 5. [`close_span`](Self::close_span): the span recorded (last window,
    ///    totals, rolling ring) and, if judged, the trip rule applied by a
    ///    CAS that holds only if the state is still CLOSED in the generation
    ///    the span was counted in; then the relative rule's baseline learns
    ///    from it if it was judged healthy (`crate::baseline`) and the next
    ///    window's threshold is set.
    ///
    /// Then a recovery ramp that has run its course ends (not a
    /// transition): after the span it counted was judged as a ramp's.
    fn tick_locked(&self, ts: &mut TickState) {
        let now = self.advance_time(ts);
        self.expire(now);
        if let Some((windows, closed_at)) = self.due_windows(ts, now) {
            self.close_windows(ts, windows, closed_at, now);
        }
        // A ramp that ran its course ends after the span is judged: the
        // span was counted in it (a trip re-opens with the next backoff,
        // the baseline learns nothing), and so, in part, is the next one.
        if self.end_ramp_if_due(now) {
            ts.ramp_spans = 1;
        }
    }

    /// Steps 4 and 5, for `windows` windows, the newest ending at
    /// `closed_at`.
    fn close_windows(&self, ts: &mut TickState, windows: u64, closed_at: u64, now: u64) {
        // The span's histogram: DDSketch keys (γ = 2^(1/8)) and counts, on
        // the stack (filled only if the span has calls), read by
        // `drain_span` for the quantiles and by `close_span` for the
        // relative rule.
        let mut hist: Option<Histogram> = None;
        let span = self.drain_span(ts, windows, closed_at, &mut hist);
        let straddle = span.counts.straddle;
        self.close_span(ts, span, hist.as_ref(), now);
        if let Some(h) = &hist {
            ts.latency.add(h, straddle, self.shards.threshold_index);
        }
    }

    /// Step 1: the close's time, published as `floor`.
    fn advance_time(&self, ts: &mut TickState) -> u64 {
        let raw = self.clock.raw();
        let signed = self.signed_now(raw);
        let now = if signed < ts.high as i64 {
            self.raise_floor(raw, ts.high)
        } else {
            signed as u64
        };
        ts.high = now;
        self.floor.store(now, Ordering::Release);
        now
    }

    /// Step 2: the transitions time alone makes, and the flapping flag.
    fn expire(&self, now: u64) {
        // OPEN whose backoff ran out: HALF_OPEN now, even with no caller.
        self.half_open_if_due(now);
        // HALF_OPEN with a probe out past its lease.
        self.lease_expired(self.state.load(), now);
        if self.flapping.load(Ordering::Relaxed)
            && self.open_lock.lock().count(now, self.config.flap_ns) <= self.config.flap_cycles as usize
        {
            self.flapping.store(false, Ordering::Release);
        }
    }

    /// Step 3: `None` until the current window ends; then the windows due
    /// and the end of the newest, and the next window's end set.
    fn due_windows(&self, ts: &mut TickState, now: u64) -> Option<(u64, u64)> {
        if now < ts.window_end {
            return None;
        }
        let w = self.config.window_ns;
        // What was counted since the last drain happened somewhere in these
        // windows; which one, this tick cannot tell.
        let due = (now - ts.window_end) / w + 1;
        let newest_end = ts.window_end.saturating_add((due - 1).saturating_mul(w));
        ts.window_end = newest_end.saturating_add(w);
        Some((due, newest_end))
    }

    /// Step 4: the span since the last drain, its in-flight calls claimed,
    /// and whether it may be judged.
    fn drain_span(&self, ts: &mut TickState, windows: u64, closed_at: u64, hist: &mut Option<Histogram>) -> Span {
        let before = self.state.full_generation(self.state.load());
        let mut counts = Counts::default();
        self.drain_into(&mut counts, hist);
        let latency = hist.as_ref().and_then(Histogram::quantiles);
        let after = self.state.load();
        let transitions = self.state.full_generation(after).wrapping_sub(ts.window_gen);
        let mut in_flight = 0;
        if self.config.track_in_flight {
            // Calls still in flight from before a transition are stale:
            // claimed now, never judged in a later generation's window.
            // Calls admitted since, in this generation, are judged: as slow
            // now if the span is, else at the next close.
            let how = match transitions {
                0 => Claim::Judged,
                n if n < FLIGHT_GEN_HORIZON => Claim::StaleOnly,
                _ => Claim::Unordered,
            };
            let claimed = self.claim_in_flight(after, how);
            counts.stale += claimed.stale;
            in_flight = claimed.slow;
        }
        let judged = transitions == 0
            && after.state() == State::Closed
            && matches!(after.mode(), Mode::Normal | Mode::MetricsOnly);
        // The generation the span was counted in, for `close_span`'s CAS;
        // the one read before this drain, for the next close.
        let counted_in = ts.window_gen;
        ts.window_gen = before;
        Span {
            counts,
            in_flight,
            latency,
            windows,
            closed_at,
            counted_in,
            judged,
        }
    }

    /// Drains the shards into `counts`, and their buckets into `hist`
    /// (DDSketch keys, γ = 2^(1/8); made only if there are calls).
    fn drain_into(&self, counts: &mut Counts, hist: &mut Option<Histogram>) {
        self.shards.drain(counts, |key, n| {
            hist.get_or_insert_with(Histogram::new)
                .add((key - KEY_OFFSET) as usize, n)
        });
    }

    /// Loses what was counted since the last close and in the rolling
    /// spans (for a `reset` that is not a transition): the counts go to
    /// the totals, unjudged, and the next close judges only what comes
    /// after this.
    pub(super) fn forget_counts(&self, ts: &mut TickState) {
        let before = self.state.full_generation(self.state.load());
        let mut counts = Counts::default();
        // The calls go to the cumulative histogram; with the relative rule
        // the slow ones are counted as a close counts them: slower than the
        // lower threshold.
        let mut hist: Option<Histogram> = None;
        self.drain_into(&mut counts, &mut hist);
        let relative_slow = match (ts.relative_index, &hist) {
            (Some(j), Some(h)) => h.count_above(usize::from(j)),
            _ => 0,
        };
        ts.add_totals(counts.calls, counts.slow.max(relative_slow), &counts);
        if let Some(h) = &hist {
            ts.latency.add(h, counts.straddle, self.shards.threshold_index);
        }
        ts.clear_ring();
        // Whatever ramp ended before the reset, nothing after it was
        // counted in that ramp.
        self.ramp_ended_since_last_close();
        ts.ramp_spans = 0;
        if let Some(l) = ts.learner.as_deref_mut() {
            l.forget_pool();
            ts.pooled = false;
        }
        ts.window_gen = before;
    }

    /// Every call measured since the build, by latency.
    pub(super) fn latency_histogram(&self) -> crate::LatencyHistogram {
        self.tick.lock().latency.read(self.config.threshold_ns)
    }

    /// The relative rule's baseline (fixed point), if it has one.
    pub(super) fn baseline_units(&self) -> Option<u64> {
        self.tick.lock().learner.as_deref().and_then(Learner::baseline)
    }

    /// Seeds the relative rule's baseline (`Some`, fixed point) or starts
    /// it cold (`None`); the threshold follows at once.
    pub(super) fn set_baseline(&self, units: Option<u64>) {
        let mut guard = self.tick.lock();
        let ts = &mut *guard;
        if let (Some((rule, _)), Some(l)) = (self.config.relative.as_deref(), ts.learner.as_deref_mut()) {
            match units {
                Some(u) => l.seed(rule, u),
                None => l.reset(),
            }
            ts.pooled = false;
            ts.relative_index = Some(bucket_byte(l.threshold_index(rule)));
            self.threshold_ns
                .store(effective_threshold(&self.config, Some(l)), Ordering::Relaxed);
        }
    }

    /// Step 5: records the closed span and, if it may be judged, applies
    /// the trip rule to it, as if its counts were spread evenly over its
    /// windows.
    fn close_span(&self, ts: &mut TickState, span: Span, hist: Option<&Histogram>, now: u64) {
        let Span {
            counts,
            in_flight,
            latency,
            windows,
            closed_at,
            counted_in,
            judged,
        } = span;
        let c = &self.config;
        let calls = counts.calls + in_flight;
        let absolute_slow = counts.slow + in_flight;
        // The relative rule: the calls above its threshold's bucket, read off
        // the span's histogram (exact: see `crate::baseline`). A call slower
        // than either threshold is slow; the two sets nest (both are cuts of
        // the same buckets), so their union is the larger count.
        let relative = ts.relative_index.map(usize::from);
        let relative_slow = relative.map(|j| hist.map_or(0, |h| h.count_above(j)));
        let slow = relative_slow.map_or(absolute_slow, |r| r.max(counts.slow) + in_flight);
        // The threshold this span is judged by: set with `relative_index`
        // (at the last learning, a seed, or the build).
        let threshold = self.threshold_ns.load(Ordering::Relaxed);
        ts.last = WindowStats {
            calls,
            errors: counts.errors,
            slow,
            cancelled: counts.cancelled,
            in_flight_slow: in_flight,
            stale: counts.stale,
            windows: u32::try_from(windows).unwrap_or(u32::MAX),
            closed_at: Duration::from_nanos(closed_at),
            latency,
            threshold: Duration::from_nanos(threshold),
        };
        ts.add_totals(calls, slow, &counts);
        // A ramp that ended (at an admission) since the last close: this
        // span was counted in part in it, and the next one may hold calls
        // it admitted. Both are judged as the ramp's.
        if self.ramp_ended_since_last_close() {
            ts.ramp_spans = 2;
        }
        let after_ramp = ts.ramp_spans > 0;
        ts.ramp_spans = ts.ramp_spans.saturating_sub(1);
        if !judged {
            // A span not judged straddles a transition (or is in a state or
            // mode only a transition makes): a ramp's permits are stale
            // after it, and the next span holds none of its calls.
            ts.ramp_spans = 0;
            ts.clear_ring();
            self.learn(ts, Lesson::Forget, hist, windows);
            return;
        }
        // Each window's share into the rolling ring, oldest first (windows
        // older than the ring would hold are left out); the remainders go to
        // the newest.
        let pushes = windows.min(ts.ring.len() as u64);
        for i in (0..pushes).rev() {
            let share = |n: u64| n / windows + u64::from(i < n % windows);
            ts.push(share(calls), share(counts.errors));
        }
        let (span_calls, span_errors) = ts.sum(c.error_windows as usize);
        let span_failures = if c.failure_windows == 0 {
            0
        } else {
            ts.sum(c.failure_windows as usize).1
        };
        let gen = counted_in;
        let mut evidence = (ts.evidence, ts.evidence_windows);
        let mut lesson = Lesson::Forget;
        // What the relative rule may learn from (worked out only with it).
        let learnable =
            c.relative.is_some() && !trip::exceeds(counts.errors.min(calls), calls, crate::baseline::MAX_ERROR_PPB);
        let dense = calls > 0 && calls >= c.rule.min_calls.saturating_mul(windows);
        let (seen, stored, reason) = self.state.update(|w| {
            lesson = Lesson::Forget;
            let in_ramp = w.ramping() || after_ramp;
            if w.state() != State::Closed || self.state.full_generation(w) != gen {
                return Decision::Keep(None);
            }
            let input = trip::Input {
                calls,
                slow,
                absolute_slow: relative.map(|_| absolute_slow),
                windows,
                span_calls,
                span_errors,
                span_failures,
                breaches: w.breaches(),
                evidence: ts.evidence,
                evidence_windows: ts.evidence_windows,
            };
            let verdict = trip::judge(&c.rule, &input);
            evidence = (verdict.evidence, verdict.evidence_windows);
            if learnable && verdict.trip.is_none() && verdict.breaches == 0 && !in_ramp {
                lesson = if dense { Lesson::Learn } else { Lesson::Skip };
            }
            match verdict.trip {
                // A trip during a recovery ramp (or in the span after it)
                // re-opens with the next backoff.
                Some(r) if in_ramp => Decision::Set(
                    w.transition(State::Open, w.mode())
                        .with_level(w.level().saturating_add(1)),
                    Some(r),
                ),
                Some(r) => Decision::Set(w.transition(State::Open, w.mode()), Some(r)),
                None => Decision::Set(w.with_breaches(verdict.breaches), None),
            }
        });
        (ts.evidence, ts.evidence_windows) = evidence;
        self.learn(ts, lesson, hist, windows);
        if let (Some(next), Some(reason)) = (stored, reason) {
            ts.clear_ring();
            self.note(seen, next, reason, now);
        }
    }

    /// Hands a closed span to the relative rule's baseline (nothing without
    /// the rule), and sets the threshold the next window is judged by.
    fn learn(&self, ts: &mut TickState, lesson: Lesson, hist: Option<&Histogram>, windows: u64) {
        // Nothing to pool, nothing pooled to forget: the learner (a line or
        // two of its own) is not touched, as for most idle windows.
        match (lesson, hist) {
            (Lesson::Learn, Some(_)) => {}
            (Lesson::Forget, _) if ts.pooled => {}
            _ => return,
        }
        let (Some((rule, _)), Some(l)) = (self.config.relative.as_deref(), ts.learner.as_deref_mut()) else {
            return;
        };
        match (lesson, hist) {
            (Lesson::Learn, Some(h)) => ts.pooled = l.healthy(rule, h, windows),
            _ => {
                l.forget_pool();
                ts.pooled = false;
            }
        }
        ts.relative_index = Some(bucket_byte(l.threshold_index(rule)));
        self.threshold_ns
            .store(effective_threshold(&self.config, Some(l)), Ordering::Relaxed);
    }

    /// For the ticker, shortly before it ticks this breaker: starts loading
    /// the lines behind its pointers (its own are prefetched by the ticker).
    #[cfg(not(tailguard_loom))]
    pub(crate) fn prefetch_for_tick(&self) {
        self.shards.prefetch();
        // The cumulative histogram the close adds the span to.
        crate::sync::prefetch(self.latency_at as *const u8, core::mem::size_of::<Cumulative>());
    }

    /// For the ticker, shortly before it ticks this breaker, once the lines
    /// of `prefetch_for_tick` are in: starts loading the shards it built.
    #[cfg(not(tailguard_loom))]
    pub(crate) fn prefetch_marked(&self) {
        self.shards.prefetch_marked();
    }

    /// For the ticker: tick, and say how long until the next window end
    /// (or the end of the backoff, if sooner).
    #[cfg(not(tailguard_loom))]
    pub(crate) fn tick_for_ticker(&self) -> u64 {
        // Tokio's clock, read as its runtime reads it (a paused one too).
        #[cfg(feature = "tokio")]
        let _context = self.runtime.get().map(tokio::runtime::Handle::enter);
        let mut ts = self.tick.lock();
        self.tick_locked(&mut ts);
        let now = ts.high;
        let due = ts.window_end;
        drop(ts);
        let until = self.due_after(due, now);
        self.events.deliver();
        until
    }

    /// How long after `now` a tick next has work: the end of the window in
    /// progress, `window_end`, or sooner the end of an OPEN's backoff (the
    /// tick moves it to HALF_OPEN), of a probe's lease (the tick re-opens
    /// if it has not answered), or of a recovery ramp (the tick ends it).
    fn due_after(&self, window_end: u64, now: u64) -> u64 {
        let word = self.state.load();
        let sooner = match word.state() {
            State::Open => self.published_deadline(word),
            State::HalfOpen if word.probes() > 0 => self.first_lease_end(word),
            _ => None,
        };
        [Some(window_end), sooner, self.ramp_end(word)]
            .into_iter()
            .flatten()
            .map(|at| at.saturating_sub(now))
            .min()
            .unwrap_or(0)
    }

    /// `Breaker::next_due`: from the breaker's time now. A clock stepped
    /// back since the last close: due now, since the next tick has work
    /// (it absorbs the step, `advance_time`: the breaker's time resumes
    /// from the last close's at that tick's reading, which this cannot
    /// know); this changes nothing itself.
    pub(super) fn next_due(&self) -> u64 {
        let window_end = self.tick.lock().window_end;
        let floor = self.floor.load(Ordering::Acquire);
        let signed = self.signed_now(self.clock.raw());
        if signed < floor as i64 {
            return 0;
        }
        self.due_after(window_end, signed as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::TickState;
    use crate::report::{Totals, WindowStats};

    fn state(len: usize) -> TickState {
        TickState {
            window_end: 0,
            window_gen: 0,
            ring: vec![(0, 0); len].into_boxed_slice(),
            ring_pos: 0,
            high: 0,
            evidence: 0,
            evidence_windows: 0,
            last: WindowStats::default(),
            totals: Totals::default(),
            learner: None,
            relative_index: None,
            pooled: false,
            ramp_spans: 0,
            latency: Box::new(super::Cumulative::new()),
        }
    }

    #[test]
    fn counters_near_their_maximum_stop_there() {
        let mut ts = state(2);
        // A window's calls beyond u32 are kept at u32::MAX in the ring.
        ts.push(u64::from(u32::MAX) + 5, u64::MAX);
        ts.push(7, 1);
        assert_eq!(ts.sum(2), (u64::from(u32::MAX) + 7, u64::from(u32::MAX) + 1));
        // Totals near u64::MAX saturate across a close.
        ts.totals = Totals {
            calls: u64::MAX - 1,
            errors: u64::MAX,
            slow: u64::MAX - 3,
            cancelled: 0,
            stale: u64::MAX,
        };
        let counts = crate::shard::Counts {
            calls: 10,
            errors: 2,
            slow: 2,
            cancelled: 1,
            stale: 1,
            straddle: 0,
        };
        ts.add_totals(10, 2, &counts);
        let t = ts.totals;
        assert_eq!(
            (t.calls, t.errors, t.slow, t.cancelled, t.stale),
            (u64::MAX, u64::MAX, u64::MAX - 1, 1, u64::MAX)
        );
    }

    #[test]
    fn ring_sum_takes_the_newest_windows_across_the_wrap() {
        for len in 1..=5usize {
            let mut ts = TickState {
                window_end: 0,
                window_gen: 0,
                ring: vec![(0, 0); len].into_boxed_slice(),
                ring_pos: 0,
                high: 0,
                evidence: 0,
                evidence_windows: 0,
                last: WindowStats::default(),
                totals: Totals::default(),
                learner: None,
                relative_index: None,
                pooled: false,
                ramp_spans: 0,
                latency: Box::new(super::Cumulative::new()),
            };
            let mut pushed: Vec<(u64, u64)> = Vec::new();
            for i in 1..=12u64 {
                ts.push(i, i * 100);
                pushed.push((i, i * 100));
                for n in 0..=len + 1 {
                    let newest = &pushed[pushed.len().saturating_sub(n.min(len))..];
                    let expected = newest.iter().fold((0, 0), |(c, e), &(wc, we)| (c + wc, e + we));
                    assert_eq!(ts.sum(n), expected, "len {len}, after {i} pushes, newest {n}");
                }
            }
        }
    }
}
