//! Transitions and overrides: a probe's verdict deciding its round, the
//! re-open of a HALF_OPEN breaker, the operator's overrides, and what every
//! transition is followed by: an OPEN deadline published, a flap counted,
//! the event queued.
//!
//! Touches the state word (transitions), `trip_count`, `rng`, the re-open
//! times (under the OPEN lock, `open_lock`) and `flapping`, and the event
//! queue; the OPEN deadline is published and withdrawn by `open.rs`. Overrides are
//! cold paths and deliver events; nothing here called from the hot path
//! does.

use super::Inner;
use crate::backoff::{SplitMix64, GOLDEN_GAMMA};
use crate::report::{Mode, Reason, State, Transition};
use crate::state::{Decision, Word, MAX_LEVEL};
use crate::sync::Ordering;
use std::time::Duration;

/// What a probe's verdict says.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum ProbeOutcome {
    Good,
    Failed,
    Slow,
    Cancelled,
}

/// Times of recent re-opens (a ring of `flap_cycles + 1`), held by the
/// OPEN lock (`Inner::open_lock`), which also serialises the publication
/// and withdrawal of OPEN deadlines (`open.rs`), and with them the time
/// spent OPEN.
#[derive(Debug)]
pub(super) struct Flaps {
    pub(super) times: Box<[u64]>,
    pub(super) pos: usize,
    /// Nanoseconds OPEN, over the OPENs withdrawn so far (`retire_deadline`).
    pub(super) open_ns: u64,
    /// The most `open_time_total` has reported: it never reports less.
    pub(super) reported_ns: u64,
}

impl Flaps {
    /// Re-opens within `span` before `now`.
    pub(super) fn count(&self, now: u64, span: u64) -> usize {
        self.times
            .iter()
            .filter(|&&t| t != u64::MAX && t <= now && now - t <= span)
            .count()
    }
}

impl Inner {
    /// HALF_OPEN → OPEN with the next backoff, if still in round `round`;
    /// queues the event.
    pub(super) fn reopen(&self, round: u64, reason: Reason, now: u64) -> bool {
        let (seen, stored, ()) = self.state.update(|w| {
            if w.state() != State::HalfOpen || self.state.full_generation(w) != round {
                return Decision::Keep(());
            }
            let level = w.level().saturating_add(1).min(MAX_LEVEL);
            Decision::Set(w.transition(State::Open, w.mode()).with_level(level), ())
        });
        match stored {
            Some(next) => {
                self.note(seen, next, reason, now);
                true
            }
            None => false,
        }
    }

    /// A probe of `round` (lease entry `lease − 1`) has its verdict. Its lease
    /// is freed first, then its slot returned (or the round decided): so an
    /// entry of the current round always belongs to a probe still out.
    #[inline]
    pub(super) fn probe_verdict(&self, round: u64, lease: usize, outcome: ProbeOutcome) {
        self.release_lease(lease, round);
        let successes = self.config.successes;
        let (seen, stored, reason) = self.state.update(|w| {
            if w.state() != State::HalfOpen || self.state.full_generation(w) != round {
                // A verdict from an earlier round decides nothing.
                return Decision::Keep(None);
            }
            let probes = w.probes().saturating_sub(1);
            match outcome {
                ProbeOutcome::Cancelled => Decision::Set(w.with_probes(probes), None),
                ProbeOutcome::Good if w.successes().saturating_add(1) >= successes => {
                    let closed = w.transition(State::Closed, w.mode());
                    // With a recovery ramp, CLOSED in its ramp, the level
                    // kept until the ramp ends (a trip in it backs off
                    // further).
                    let next = if self.ramp.is_some() {
                        closed.with_ramp()
                    } else {
                        closed.with_level(0)
                    };
                    Decision::Set(next, Some(Reason::ProbesSucceeded))
                }
                ProbeOutcome::Good => Decision::Set(
                    w.with_probes(probes).with_successes(w.successes().saturating_add(1)),
                    None,
                ),
                ProbeOutcome::Failed | ProbeOutcome::Slow => {
                    let level = w.level().saturating_add(1).min(MAX_LEVEL);
                    let reason = if outcome == ProbeOutcome::Slow {
                        Reason::ProbeSlow
                    } else {
                        Reason::ProbeFailed
                    };
                    Decision::Set(w.transition(State::Open, w.mode()).with_level(level), Some(reason))
                }
            }
        });
        if let (Some(next), Some(reason)) = (stored, reason) {
            self.note(seen, next, reason, self.now_floored(self.clock.raw()));
        }
    }

    /// After a transition `from` → `to` (already stored): count a flap (a
    /// re-open after a probe), publish the deadline of an OPEN, wake the
    /// tasks parked elsewhere that an OPEN now refuses, queue the event.
    /// Never calls the listener: delivery is for the cold paths (`tick`,
    /// overrides).
    pub(super) fn note(&self, from: Word, to: Word, reason: Reason, now: u64) {
        if from.state() == State::Open {
            self.retire_deadline(from, now);
        }
        if from.ramping() {
            self.retire_ramp(from);
        }
        if to.ramping() {
            self.publish_ramp(to, now);
        }
        if from.state() == State::HalfOpen && to.state() == State::Open {
            self.count_flap(now);
        }
        if to.state() == State::Open && to.mode() != Mode::ForcedOpen {
            self.trip_count.fetch_add(1, Ordering::Relaxed);
            self.open_since(to, now);
        }
        if to.state() == State::Open && to.mode() != Mode::MetricsOnly {
            // After the deadline is published: a woken task finds it.
            self.open_watch.wake_all();
        }
        self.emit(from, to, reason, now);
    }

    /// One OPEN → HALF_OPEN → OPEN cycle at `now`: remembered, and the
    /// flapping flag raised if there are more than the limit in its span.
    fn count_flap(&self, now: u64) {
        let mut flaps = self.open_lock.lock();
        let pos = flaps.pos;
        flaps.times[pos] = now;
        flaps.pos = (pos + 1) % flaps.times.len();
        if flaps.count(now, self.config.flap_ns) > self.config.flap_cycles as usize {
            self.flapping.store(true, Ordering::Release);
        }
    }

    /// OPEN (not forced) since `now` at `to`: draws this OPEN's duration
    /// (the backoff of its level, jittered) and publishes its deadline.
    fn open_since(&self, to: Word, now: u64) {
        // Each value the draw takes (one, rarely more) is the next output of
        // the breaker's SplitMix64 sequence, stepped atomically.
        let d = self.config.open_ns(to.level(), || {
            splitmix(self.rng.fetch_add(GOLDEN_GAMMA, Ordering::Relaxed))
        });
        self.publish_deadline(to, now, d);
    }

    /// Queues the event of the transition `from` → `to` for the listener.
    fn emit(&self, from: Word, to: Word, reason: Reason, now: u64) {
        if self.events.wanted() {
            self.events.push(Transition {
                from: from.state(),
                to: to.state(),
                from_mode: from.mode(),
                to_mode: to.mode(),
                generation: to.generation(),
                reason,
                at: Duration::from_nanos(now),
                flapping: self.flapping.load(Ordering::Acquire),
            });
        }
    }

    /// An override: a transition to `state` / `mode` unless that mode is
    /// already in force (then nothing changes). Cold path: delivers events.
    pub(super) fn set_mode(&self, state: State, mode: Mode, reason: Reason) {
        let (seen, stored, ()) = self.state.update(|w| {
            if w.mode() == mode {
                return Decision::Keep(());
            }
            // An override ends a recovery ramp, and with it the level the
            // ramp kept (as a ramp that runs its course does).
            let next = w.transition(state, mode);
            Decision::Set(if w.ramping() { next.with_level(0) } else { next }, ())
        });
        if let Some(next) = stored {
            self.note(seen, next, reason, self.now_floored(self.clock.raw()));
        }
        self.events.deliver();
    }

    /// CLOSED with no override, backoff level 0, no breach counted. On a
    /// breaker already CLOSED with no override that is not a transition
    /// (no event, no new generation), but it loses the statistics all the
    /// same: the counts of the window in progress (drained into the totals,
    /// never judged), the rolling error and failure spans, the breach
    /// streak and the backoff level. Under the tick lock, so that no window
    /// close judges a span from before the reset after it.
    pub(super) fn reset(&self) {
        let mut ts = self.tick.lock();
        let (seen, stored, transition) = self.state.update(|w| {
            if w.state() == State::Closed && w.mode() == Mode::Normal {
                return Decision::Set(w.with_breaches(0).with_level(0).without_ramp(), false);
            }
            Decision::Set(w.transition(State::Closed, Mode::Normal).with_level(0), true)
        });
        match (stored, transition) {
            (Some(next), true) => {
                self.note(seen, next, Reason::Reset, self.now_floored(self.clock.raw()));
            }
            _ => {
                if seen.ramping() {
                    self.retire_ramp(seen);
                }
                self.forget_counts(&mut ts);
            }
        }
        drop(ts);
        self.events.deliver();
    }

    pub(super) fn trip_now(&self) {
        let (seen, stored, ()) = self.state.update(|w| {
            if w.state() != State::Closed || !matches!(w.mode(), Mode::Normal | Mode::MetricsOnly) {
                return Decision::Keep(());
            }
            // From a recovery ramp, with the next backoff (as a trip there).
            let level = if w.ramping() {
                w.level().saturating_add(1)
            } else {
                w.level()
            };
            Decision::Set(w.transition(State::Open, w.mode()).with_level(level), ())
        });
        if let Some(next) = stored {
            self.note(seen, next, Reason::ManualTrip, self.now_floored(self.clock.raw()));
        }
        self.events.deliver();
    }
}

/// One step of SplitMix64 from state `x`: a cheap, well-mixed random number
/// for jitter, the first output of [`SplitMix64::new(x)`](SplitMix64::new).
pub(super) fn splitmix(x: u64) -> u64 {
    SplitMix64::new(x).next_u64()
}
