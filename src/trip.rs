//! The trip rule: given one closed window's counts, the rolling sums and the
//! breach streak, the verdict and its reason.
//!
//! A pure function over plain numbers: no atomics, no clock, no locks. The
//! window close (`breaker/window.rs`) gathers the inputs and applies the
//! verdict to the state word; this file is the whole of the decision.
//!
//! A close that comes late (one tick for several windows) cannot tell which
//! of its windows its counts came from: it hands the rule a *span* of
//! `windows` windows, judged as if the counts were spread evenly over them.
//! So the span breaches when its slow fraction breaches and it has at least
//! `min_calls` calls per window, and then counts as `windows` breaching
//! windows; any tick cadence gives the same verdict on evenly spread
//! traffic.
//!
//! # Sparse traffic: a sequential test
//!
//! `min_calls` is a minimum of evidence, not of rate. A span with at least
//! `min_calls` calls per window is judged alone, as above. A sparser span
//! is not judged alone (one slow call in a quiet second is not an outage),
//! but every span's calls feed a sequential test on the slow fraction,
//! across windows: a CUSUM of Wald's log-likelihood ratio between "a
//! fraction `p0 = 1 − q` of the calls is slow" (the quantile rule's own
//! limit) and "a fraction `p1` is" (ten times as many, at most halfway to
//! all: `p1 = min(10 p0, (1 + p0) / 2)`). Each slow call adds
//! `ln(p1 / p0)` to the evidence, each other call takes
//! `ln((1 − p0) / (1 − p1))` off it; the evidence never goes below zero
//! nor above the bound, and it trips ([`Reason::SparseLatency`]) when it
//! reaches `ln(10^6)` (Wald's bound for a false-trip rate of one in a
//! million tests at the limit fraction itself) gathered over
//! `trip_windows` windows with calls at the least (counted since it was
//! last zero; a span of several windows closed at once counts them all),
//! so that, like the streak, a burst within one window trips neither rule.
//! With the defaults (P99: 2.30 nats a slow call, 0.095 a fast one, a
//! bound of 13.82) that is 6 slow calls with no fast one among them, 7
//! with up to 24, 8 with up to 48, over 3 windows at the least; a healthy
//! consumer (slow fraction well under 1%) drifts back to zero. A
//! dense span that does not breach (healthy by the rule's own judgement)
//! starts the evidence afresh, as does every transition; a breaching one
//! adds to it, so a consumer whose every call is slow trips whatever its
//! rate does from window to window (dense, sparse, idle).
//!
//! So an all-slow consumer trips at the first window close after its
//! sixth slow call and its `trip_windows`-th window with calls: at `r`
//! calls a second spread over the windows, within `max(6 / r,
//! trip_windows)` windows of 1 s and one more (3 s at 3 calls a second,
//! 60 s at one call every 10 s; a consumer called in bursts, at its
//! `trip_windows`-th burst at the latest); at 100 calls a second and above
//! nothing changes (every window is dense: the streak and the test reach
//! their bounds at the same close). The weights and the bound
//! are fixed integers (micro-nats) computed once at build, so every
//! decision is exact and the same on every platform.
//!
//! Every fraction is compared exactly, in integers: a fraction is kept in
//! parts per billion and `part / whole > limit` is decided as
//! `part × 10^9 > whole × limit` in 128 bits (in floating point
//! `1.0 − 0.9` is not `0.1`, and 2 slow calls of 20 would breach a P90).

use crate::report::Reason;
use core::num::NonZeroU32;

/// Parts per billion: the unit of the rule's fractions.
pub(crate) const PPB: u64 = 1_000_000_000;

/// A fraction in `[0, 1]` as parts per billion, to the nearest.
pub(crate) fn ppb(fraction: f64) -> u64 {
    (fraction * PPB as f64).round() as u64
}

/// Whether `part` is more than `limit_ppb` parts per billion of `whole`,
/// exactly.
pub(crate) fn exceeds(part: u64, whole: u64, limit_ppb: u64) -> bool {
    u128::from(part) * u128::from(PPB) > u128::from(whole) * u128::from(limit_ppb)
}

/// The sequential test's weights and bound, in micro-nats (see the module
/// docs), derived from the rule's slow limit where they are used (window
/// close), so that a breaker stores nothing for them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Sparse {
    /// What a slow call adds: `ln(p1 / p0)`.
    pub(crate) slow_weight: u64,
    /// What any other call takes off: `ln((1 − p0) / (1 − p1))`.
    pub(crate) fast_weight: u64,
    /// The evidence that trips: `ln(10^6)`, rounded down.
    pub(crate) bound: u64,
}

/// The slow fraction the test treats as healthy at the least: a quantile of
/// 1 (P100) would otherwise make a single slow call conclusive.
const MIN_P0: f64 = 1e-6;

impl Sparse {
    /// The test for a rule whose windows breach above `slow_ppb`.
    pub(crate) fn for_limit(slow_ppb: u64) -> Sparse {
        let p0 = (slow_ppb as f64 / PPB as f64).clamp(MIN_P0, 1.0 - MIN_P0);
        let p1 = (10.0 * p0).min((1.0 + p0) / 2.0);
        let micro = |nats: f64| (nats * 1e6).round() as u64;
        Sparse {
            slow_weight: micro((p1 / p0).ln()).max(1),
            fast_weight: micro(((1.0 - p0) / (1.0 - p1)).ln()).max(1),
            bound: (1e6f64.ln() * 1e6).floor() as u64,
        }
    }

    /// The evidence after a sparse span of `calls` calls, `slow` of them
    /// slow, from `evidence`: the span's log-likelihood ratio added as one
    /// step (the order of the calls within a window is not known), never
    /// below zero, and at most the bound.
    fn update(&self, evidence: u32, calls: u64, slow: u64) -> u32 {
        let slow = slow.min(calls);
        let up = slow.saturating_mul(self.slow_weight);
        let down = (calls - slow).saturating_mul(self.fast_weight);
        let e = u64::from(evidence).saturating_add(up).saturating_sub(down);
        e.min(self.bound) as u32
    }
}

/// The settings the rule judges by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Rule {
    /// A window breaches when more than this many parts per billion of its
    /// calls were slow: `1 − quantile` ("P_q above T" is exactly "more than
    /// `1 − q` of the calls slower than T").
    pub(crate) slow_ppb: u64,
    /// Consecutive breaching windows that trip.
    pub(crate) trip_windows: u8,
    /// A window (or error span) with fewer calls is not judged by latency or
    /// error rate.
    pub(crate) min_calls: u64,
    /// The error span trips when more than this many parts per billion of
    /// its calls failed.
    pub(crate) error_ppb: u64,
    /// The classic count trip: this many failures within the failure span
    /// (its own minimum: `min_calls` does not apply).
    pub(crate) failures: Option<NonZeroU32>,
}

/// What the rule reads.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Input {
    /// The closed span's calls (in-flight slow ones included) ...
    pub(crate) calls: u64,
    /// ... and how many of them were slow: slower than the window's
    /// threshold (with the relative rule, the lower of the two).
    pub(crate) slow: u64,
    /// With the relative rule, how many were slower than the absolute
    /// threshold (at most `slow`): the reason a latency trip gives.
    /// `None`: no relative rule, `slow` is that count.
    pub(crate) absolute_slow: Option<u64>,
    /// How many windows the span covers (1 when windows close on time).
    pub(crate) windows: u64,
    /// Calls and errors over the error span (this window and the ones
    /// before it). A window's errors can include calls counted in the
    /// window before (a record straddling a close): the rule never takes
    /// more errors than calls.
    pub(crate) span_calls: u64,
    /// See `span_calls`.
    pub(crate) span_errors: u64,
    /// Errors over the failure span.
    pub(crate) span_failures: u64,
    /// Consecutive breaching windows before this span.
    pub(crate) breaches: u8,
    /// The sequential test's evidence before this span (micro-nats).
    pub(crate) evidence: u32,
    /// Windows with calls since the evidence was last zero.
    pub(crate) evidence_windows: u8,
}

/// What the rule decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Verdict {
    /// Consecutive breaching windows, this span's included (0 if it did
    /// not breach).
    pub(crate) breaches: u8,
    /// Why to trip, if it trips. When several conditions hold, the latency
    /// streak (or the sequential test) wins, then the error rate, then the
    /// failure count.
    pub(crate) trip: Option<Reason>,
    /// The sequential test's evidence after this span: zero after a dense
    /// span (judged alone) or a trip; at most the bound (it trips there).
    pub(crate) evidence: u32,
    /// Windows with calls since the evidence was last zero (zero with it).
    pub(crate) evidence_windows: u8,
}

/// Judges one closed span (one window, or several closed at once).
pub(crate) fn judge(rule: &Rule, w: &Input) -> Verdict {
    let windows = w.windows.max(1);
    let sparse = Sparse::for_limit(rule.slow_ppb);
    let dense = w.calls > 0 && w.calls >= rule.min_calls.saturating_mul(windows);
    let breach = dense && exceeds(w.slow, w.calls, rule.slow_ppb);
    let breaches = if breach {
        w.breaches.saturating_add(u8::try_from(windows).unwrap_or(u8::MAX))
    } else {
        0
    };
    // The evidence (a healthy dense span clears it), and the windows with
    // calls it was gathered over since it was last zero: like the streak,
    // the test trips only over `trip_windows` windows at the least (a burst
    // within one window trips neither).
    let (evidence, evidence_windows) = if dense && !breach {
        (0, 0)
    } else {
        let e = sparse.update(w.evidence, w.calls, w.slow);
        let n = match (e, w.calls) {
            (0, _) => 0,
            (_, 0) => w.evidence_windows,
            _ => {
                let before = if w.evidence == 0 { 0 } else { w.evidence_windows };
                before.saturating_add(u8::try_from(windows).unwrap_or(u8::MAX))
            }
        };
        (e, n)
    };
    let span_errors = w.span_errors.min(w.span_calls);
    let error_trip =
        w.span_calls > 0 && w.span_calls >= rule.min_calls && exceeds(span_errors, w.span_calls, rule.error_ppb);
    let count_trip = rule.failures.is_some_and(|n| w.span_failures >= u64::from(n.get()));
    let trip = if breaches >= rule.trip_windows {
        // Which rule the last window breached by: the absolute one, unless
        // only the relative one's count is over the limit.
        let absolute = w.absolute_slow.map_or(w.slow, |a| a.min(w.slow));
        Some(if exceeds(absolute, w.calls, rule.slow_ppb) {
            Reason::LatencyBreach
        } else {
            Reason::RelativeLatency
        })
    } else if u64::from(evidence) >= sparse.bound && evidence_windows >= rule.trip_windows {
        Some(Reason::SparseLatency)
    } else if error_trip {
        Some(Reason::ErrorRate)
    } else if count_trip {
        Some(Reason::FailureCount)
    } else {
        None
    };
    Verdict {
        breaches,
        trip,
        evidence: if trip.is_some() { 0 } else { evidence },
        evidence_windows: if trip.is_some() { 0 } else { evidence_windows },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The defaults: P99 over 3 windows, 50% errors, 20 calls, no count trip.
    fn default_rule() -> Rule {
        Rule {
            slow_ppb: 10_000_000,
            trip_windows: 3,
            min_calls: 20,
            error_ppb: 500_000_000,
            failures: None,
        }
    }

    fn window(calls: u64, slow: u64, errors: u64, breaches: u8) -> Input {
        Input {
            calls,
            slow,
            absolute_slow: None,
            windows: 1,
            span_calls: calls,
            span_errors: errors,
            span_failures: errors,
            breaches,
            evidence: 0,
            evidence_windows: 0,
        }
    }

    #[test]
    fn the_rule_table() {
        let five_failures = Rule {
            failures: NonZeroU32::new(5),
            ..default_rule()
        };
        let one_window = Rule {
            trip_windows: 1,
            ..default_rule()
        };
        let p90 = Rule {
            slow_ppb: ppb(1.0 - 0.9),
            trip_windows: 1,
            ..default_rule()
        };
        let default = default_rule();
        #[rustfmt::skip]
        let cases: [(&str, Rule, Input, u8, Option<Reason>); 18] = [
            ("exactly 1% slow at P99 is no breach", default, window(100, 1, 0, 0), 0, None),
            ("one slow call over 1% breaches", default, window(100, 2, 0, 0), 1, None),
            ("1% of 1000 is no breach", default, window(1000, 10, 0, 2), 0, None),
            ("one over at 1000", default, window(1000, 11, 0, 2), 3, Some(Reason::LatencyBreach)),
            ("the third breaching window trips", default, window(100, 50, 0, 2), 3, Some(Reason::LatencyBreach)),
            ("a clean window resets the streak", default, window(100, 0, 0, 2), 0, None),
            ("a window under min_calls is not judged alone", default, window(19, 0, 0, 2), 0, None),
            ("19 slow calls under min_calls: not in one window of three", default, window(19, 19, 19, 2), 0, None),
            ("19 slow calls under min_calls: the sequential test trips", one_window, window(19, 19, 19, 0), 0, Some(Reason::SparseLatency)),
            ("min_calls exactly is judged", one_window, window(20, 20, 0, 0), 1, Some(Reason::LatencyBreach)),
            ("a window without calls never breaches", Rule { min_calls: 0, ..one_window }, window(0, 0, 0, 0), 0, None),
            ("exactly half the errors is no trip", default, window(20, 0, 10, 0), 0, None),
            ("one error over half trips", default, window(20, 0, 11, 0), 0, Some(Reason::ErrorRate)),
            ("error span under min_calls is not judged", default, window(19, 0, 19, 0), 0, None),
            ("latency wins over errors", one_window, window(20, 20, 20, 0), 1, Some(Reason::LatencyBreach)),
            ("errors win over the count", five_failures, window(20, 0, 20, 0), 0, Some(Reason::ErrorRate)),
            ("the count trip ignores min_calls", five_failures, window(5, 0, 5, 0), 0, Some(Reason::FailureCount)),
            ("two of twenty slow is no P90 breach", p90, window(20, 2, 0, 0), 0, None),
        ];
        for (name, rule, input, breaches, trip) in cases {
            let v = judge(&rule, &input);
            assert_eq!((v.breaches, v.trip), (breaches, trip), "{name}");
        }
    }

    /// Kills, in `judge`, `w.calls > 0` with `>` → `>=`.
    ///
    /// The shards count a span's calls and slow calls from the same
    /// buckets (`shard.rs`), so a drained span never has more slow calls
    /// than calls; the rule does not rely on it. A span of no calls never
    /// breaches, even with `min_calls` 0 (accepted by the builder), whatever
    /// its slow count says.
    #[test]
    fn a_span_without_calls_never_breaches_whatever_its_slow_count() {
        let rule = Rule {
            min_calls: 0,
            trip_windows: 1,
            ..default_rule()
        };
        for windows in [1, 3] {
            let span = Input {
                calls: 0,
                slow: 5,
                windows,
                ..Input::default()
            };
            let v = judge(&rule, &span);
            assert_eq!((v.breaches, v.trip), (0, None), "{windows} windows");
        }
    }

    #[test]
    fn the_error_span_and_the_failure_span_are_read_apart() {
        let rule = Rule {
            failures: NonZeroU32::new(5),
            ..default_rule()
        };
        // A quiet window in a span that holds earlier errors.
        let span = Input {
            calls: 2,
            slow: 0,
            windows: 1,
            span_calls: 40,
            span_errors: 21,
            span_failures: 4,
            absolute_slow: None,
            breaches: 0,
            evidence: 0,
            evidence_windows: 0,
        };
        assert_eq!(judge(&rule, &span).trip, Some(Reason::ErrorRate));
        let not_yet = Input {
            span_errors: 20,
            ..span
        };
        assert_eq!(judge(&rule, &not_yet).trip, None);
        let count = Input {
            span_failures: 5,
            ..not_yet
        };
        assert_eq!(judge(&rule, &count).trip, Some(Reason::FailureCount));
    }

    #[test]
    fn errors_are_never_taken_above_calls() {
        // Errors counted in the window after their calls.
        let w = Input {
            calls: 20,
            slow: 0,
            windows: 1,
            span_calls: 20,
            span_errors: 25,
            span_failures: 0,
            absolute_slow: None,
            breaches: 0,
            evidence: 0,
            evidence_windows: 0,
        };
        assert_eq!(judge(&default_rule(), &w).trip, Some(Reason::ErrorRate));
        let all = Rule {
            error_ppb: PPB,
            ..default_rule()
        };
        assert_eq!(judge(&all, &w).trip, None, "an error rate of 1 never trips");
    }

    #[test]
    fn a_span_of_several_windows_is_judged_as_if_spread_evenly() {
        let rule = Rule {
            trip_windows: 2,
            ..default_rule()
        };
        let span = |calls, slow, windows| Input {
            calls,
            slow,
            windows,
            ..Input::default()
        };
        // Two windows of 15 calls (min_calls 20): neither is judged.
        assert_eq!(judge(&rule, &span(30, 30, 2)).breaches, 0);
        // Two windows of 20 slow calls: two breaching windows, a trip.
        let v = judge(&rule, &span(40, 40, 2));
        assert_eq!((v.breaches, v.trip), (2, Some(Reason::LatencyBreach)));
        // Spread evenly, 1% of each window slow is no breach.
        assert_eq!(judge(&rule, &span(400, 4, 4)).breaches, 0);
        // A long gap: the streak saturates, nothing overflows.
        let gap = judge(&rule, &span(1_000_000, 1_000_000, u64::MAX));
        assert_eq!(gap.breaches, 0, "fewer than min_calls per window over the gap");
        let long = judge(&Rule { min_calls: 0, ..rule }, &span(1000, 1000, 300));
        assert_eq!(long.breaches, 255);
    }

    /// The sequential test's fixed weights at the defaults (P99: p0 = 1%,
    /// p1 = 10%), in micro-nats.
    #[test]
    fn the_sparse_weights_at_the_defaults() {
        assert_eq!(
            Sparse::for_limit(10_000_000),
            Sparse {
                slow_weight: 2_302_585, // ln 10
                fast_weight: 95_310,    // ln(0.99 / 0.9)
                bound: 13_815_510,      // ln 10^6
            }
        );
        // P100 (no slow call allowed): p0 is floored at 10^-6, so one slow
        // call is still not conclusive.
        let p100 = Sparse::for_limit(0);
        assert!(p100.slow_weight < p100.bound, "{p100:?}");
        // P50: p1 halfway from p0 to all calls.
        let p50 = Sparse::for_limit(500_000_000);
        assert_eq!(p50.slow_weight, 405_465); // ln(0.75 / 0.5)
        assert_eq!(p50.fast_weight, 693_147); // ln(0.5 / 0.25)
    }

    /// Evidence is carried across windows: six slow calls trip, five do
    /// not, however they are spread, but never in fewer windows (with
    /// calls) than `trip_windows`; fast calls wear it down; it never goes
    /// below zero nor above the bound; a healthy dense window or a trip
    /// starts it afresh, a breaching dense window adds to it.
    #[test]
    fn the_sequential_test_across_windows() {
        let rule = default_rule();
        let one_window = Rule {
            trip_windows: 1,
            ..rule
        };
        let w = |calls, slow, (evidence, evidence_windows)| Input {
            calls,
            slow,
            windows: 1,
            span_calls: calls,
            evidence,
            evidence_windows,
            ..Input::default()
        };
        let run = |rule: &Rule, spans: &[(u64, u64)]| {
            let mut at = (0, 0);
            for (i, &(calls, slow)) in spans.iter().enumerate() {
                let v = judge(rule, &w(calls, slow, at));
                if v.trip.is_some() {
                    assert_eq!((v.evidence, v.evidence_windows), (0, 0), "a trip starts it afresh");
                    return Some(i + 1);
                }
                at = (v.evidence, v.evidence_windows);
            }
            None
        };
        // Six slow calls trip: in one window with trip_windows 1; one a
        // window; or however spread over three windows (a window's surplus
        // is not lost); never in fewer than three.
        assert_eq!(run(&one_window, &[(6, 6)]), Some(1));
        assert_eq!(run(&rule, &[(1, 1); 6]), Some(6));
        assert_eq!(run(&rule, &[(4, 4), (1, 1), (1, 1)]), Some(3));
        assert_eq!(run(&rule, &[(19, 19), (19, 19), (19, 19)]), Some(3));
        assert_eq!(run(&rule, &[(19, 19), (19, 19)]), None);
        // Windows without calls do not count toward the three.
        assert_eq!(run(&rule, &[(6, 6), (0, 0), (0, 0), (1, 1)]), None);
        assert_eq!(run(&rule, &[(6, 6), (0, 0), (1, 1), (1, 1)]), Some(4));
        // A span of three windows closed at once counts three (spread evenly).
        let late = Input {
            windows: 3,
            ..w(6, 6, (0, 0))
        };
        assert_eq!(judge(&rule, &late).trip, Some(Reason::SparseLatency));
        // Five slow calls do not; one fast call among six slow stops the
        // sixth (6 × 2.30 − 0.095 is short of 13.82); seven slow trip with up
        // to 24 fast, not 25 (below min_calls: a sparse rule).
        let five = judge(&one_window, &w(5, 5, (0, 0)));
        assert_eq!(
            (five.trip, five.evidence, five.evidence_windows),
            (None, 5 * 2_302_585, 1)
        );
        assert_eq!(run(&one_window, &[(7, 6)]), None, "six slow, one fast: 13.72 < 13.82");
        let sparse_one = Rule {
            min_calls: 100,
            ..one_window
        };
        assert_eq!(run(&sparse_one, &[(31, 7)]), Some(1), "seven slow, 24 fast");
        assert_eq!(run(&sparse_one, &[(32, 7)]), None, "seven slow, 25 fast");
        // Never above the bound: a burst is not banked for later windows
        // whose calls are fast.
        assert_eq!(judge(&rule, &w(19, 19, (0, 0))).evidence, 13_815_510);
        assert_eq!(run(&rule, &[(19, 19), (1, 0), (1, 0)]), None);
        // Never below zero: a long healthy stretch does not bank credit.
        assert_eq!(judge(&rule, &w(19, 0, (100, 1))).evidence, 0);
        assert_eq!(judge(&rule, &w(19, 0, (100, 1))).evidence_windows, 0);
        // A healthy dense window starts it afresh (and is judged alone)...
        let dense = judge(&rule, &w(20, 0, (5 * 2_302_585, 2)));
        assert_eq!((dense.trip, dense.evidence, dense.evidence_windows), (None, 0, 0));
        // ... a breaching one adds to it (all slow, whatever their rate).
        let breaching = judge(&rule, &w(20, 20, (0, 0)));
        assert_eq!((breaching.breaches, breaching.evidence_windows), (1, 1));
        // A window without calls leaves it as it was.
        let idle = judge(&rule, &w(0, 0, (1234, 2)));
        assert_eq!((idle.evidence, idle.evidence_windows), (1234, 2));
    }

    /// An all-slow consumer whose traffic changes between dense and sparse
    /// windows (or pauses) trips all the same: the streak breaks at each
    /// sparse window, but the sequential test goes on.
    #[test]
    fn an_all_slow_consumer_trips_whatever_its_rate_does() {
        let rule = default_rule();
        for pattern in [[20u64, 5, 20, 5], [20, 20, 0, 20], [5, 20, 0, 5], [100, 1, 100, 1]] {
            let (mut breaches, mut evidence, mut evidence_windows, mut tripped) = (0, 0, 0, None);
            for (i, &calls) in pattern.iter().cycle().take(8).enumerate() {
                let v = judge(
                    &rule,
                    &Input {
                        calls,
                        slow: calls,
                        windows: 1,
                        span_calls: calls,
                        breaches,
                        evidence,
                        evidence_windows,
                        ..Input::default()
                    },
                );
                (breaches, evidence, evidence_windows) = (v.breaches, v.evidence, v.evidence_windows);
                if v.trip.is_some() {
                    tripped = Some(i + 1);
                    break;
                }
            }
            let by = tripped.unwrap_or_else(|| panic!("{pattern:?} never tripped"));
            assert!((3..=4).contains(&by), "{pattern:?}: window {by}");
        }
    }

    /// With the relative rule the window's slow count is the calls slower
    /// than the lower threshold; the trip names the rule the last window
    /// breached by: the absolute one if its own count is over the limit,
    /// else the relative one. Either breaching window counts in one streak.
    #[test]
    fn the_relative_rule_breaches_in_the_same_streak_and_names_itself() {
        let rule = default_rule();
        let one_window = Rule {
            trip_windows: 1,
            ..rule
        };
        let w = |slow, absolute, breaches| Input {
            calls: 100,
            slow,
            absolute_slow: Some(absolute),
            windows: 1,
            span_calls: 100,
            breaches,
            ..Input::default()
        };
        #[rustfmt::skip]
        let cases: [(&str, Rule, Input, u8, Option<Reason>); 8] = [
            ("relative over, absolute under: the relative rule trips", one_window, w(2, 0, 0), 1, Some(Reason::RelativeLatency)),
            ("both over: the absolute rule names it", one_window, w(5, 2, 0), 1, Some(Reason::LatencyBreach)),
            ("exactly the limit by the relative rule is no breach", one_window, w(1, 0, 0), 0, None),
            ("one over the limit by the relative rule breaches", rule, w(2, 1, 0), 1, None),
            ("a relative window ends an absolute streak's third", rule, w(3, 0, 2), 3, Some(Reason::RelativeLatency)),
            ("an absolute window ends a relative streak's third", rule, w(3, 3, 2), 3, Some(Reason::LatencyBreach)),
            ("a count above `slow` is taken at `slow`", one_window, w(2, 9, 0), 1, Some(Reason::LatencyBreach)),
            ("without the relative rule's count, `slow` is the absolute one", one_window, Input { absolute_slow: None, ..w(2, 0, 0) }, 1, Some(Reason::LatencyBreach)),
        ];
        for (name, rule, input, breaches, trip) in cases {
            let v = judge(&rule, &input);
            assert_eq!((v.breaches, v.trip), (breaches, trip), "{name}");
        }
    }

    #[test]
    fn fractions_are_exact_at_every_quantile() {
        for (q, calls, at_limit) in [
            (0.9, 20u64, 2u64),
            (0.8, 20, 4),
            (0.99, 100, 1),
            (0.9999, 10_000, 1),
            (0.7, 10, 3),
        ] {
            let limit = PPB - ppb(q);
            assert!(!exceeds(at_limit, calls, limit), "{q}");
            assert!(exceeds(at_limit + 1, calls, limit), "{q}");
        }
        assert!(!exceeds(u64::MAX, u64::MAX, PPB));
        assert!(exceeds(u64::MAX, u64::MAX, PPB - 1));
        assert!(!exceeds(0, 0, 0));
    }
}
