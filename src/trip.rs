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
    /// ... and how many of them were slow.
    pub(crate) slow: u64,
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
}

/// What the rule decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Verdict {
    /// Consecutive breaching windows, this span's included (0 if it did
    /// not breach).
    pub(crate) breaches: u8,
    /// Why to trip, if it trips. When several conditions hold, the latency
    /// streak wins, then the error rate, then the failure count.
    pub(crate) trip: Option<Reason>,
}

/// Judges one closed span (one window, or several closed at once).
pub(crate) fn judge(rule: &Rule, w: &Input) -> Verdict {
    let windows = w.windows.max(1);
    let breach =
        w.calls > 0 && w.calls >= rule.min_calls.saturating_mul(windows) && exceeds(w.slow, w.calls, rule.slow_ppb);
    let breaches = if breach {
        w.breaches.saturating_add(u8::try_from(windows).unwrap_or(u8::MAX))
    } else {
        0
    };
    let span_errors = w.span_errors.min(w.span_calls);
    let error_trip =
        w.span_calls > 0 && w.span_calls >= rule.min_calls && exceeds(span_errors, w.span_calls, rule.error_ppb);
    let count_trip = rule.failures.is_some_and(|n| w.span_failures >= u64::from(n.get()));
    let trip = if breaches >= rule.trip_windows {
        Some(Reason::LatencyBreach)
    } else if error_trip {
        Some(Reason::ErrorRate)
    } else if count_trip {
        Some(Reason::FailureCount)
    } else {
        None
    };
    Verdict { breaches, trip }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The defaults: P99 over 3 windows, 50% errors, 20 calls, no count trip.
    const DEFAULT: Rule = Rule {
        slow_ppb: 10_000_000,
        trip_windows: 3,
        min_calls: 20,
        error_ppb: 500_000_000,
        failures: None,
    };

    fn window(calls: u64, slow: u64, errors: u64, breaches: u8) -> Input {
        Input {
            calls,
            slow,
            windows: 1,
            span_calls: calls,
            span_errors: errors,
            span_failures: errors,
            breaches,
        }
    }

    #[test]
    fn the_rule_table() {
        let five_failures = Rule {
            failures: NonZeroU32::new(5),
            ..DEFAULT
        };
        let one_window = Rule {
            trip_windows: 1,
            ..DEFAULT
        };
        let p90 = Rule {
            slow_ppb: ppb(1.0 - 0.9),
            trip_windows: 1,
            ..DEFAULT
        };
        #[rustfmt::skip]
        let cases: [(&str, Rule, Input, u8, Option<Reason>); 16] = [
            ("exactly 1% slow at P99 is no breach", DEFAULT, window(100, 1, 0, 0), 0, None),
            ("one slow call over 1% breaches", DEFAULT, window(100, 2, 0, 0), 1, None),
            ("1% of 1000 is no breach", DEFAULT, window(1000, 10, 0, 2), 0, None),
            ("one over at 1000", DEFAULT, window(1000, 11, 0, 2), 3, Some(Reason::LatencyBreach)),
            ("the third breaching window trips", DEFAULT, window(100, 50, 0, 2), 3, Some(Reason::LatencyBreach)),
            ("a clean window resets the streak", DEFAULT, window(100, 0, 0, 2), 0, None),
            ("one call under min_calls is not judged", DEFAULT, window(19, 19, 19, 2), 0, None),
            ("min_calls exactly is judged", one_window, window(20, 20, 0, 0), 1, Some(Reason::LatencyBreach)),
            ("a window without calls never breaches", Rule { min_calls: 0, ..one_window }, window(0, 0, 0, 0), 0, None),
            ("exactly half the errors is no trip", DEFAULT, window(20, 0, 10, 0), 0, None),
            ("one error over half trips", DEFAULT, window(20, 0, 11, 0), 0, Some(Reason::ErrorRate)),
            ("error span under min_calls is not judged", DEFAULT, window(19, 0, 19, 0), 0, None),
            ("latency wins over errors", one_window, window(20, 20, 20, 0), 1, Some(Reason::LatencyBreach)),
            ("errors win over the count", five_failures, window(20, 0, 20, 0), 0, Some(Reason::ErrorRate)),
            ("the count trip ignores min_calls", five_failures, window(5, 0, 5, 0), 0, Some(Reason::FailureCount)),
            ("two of twenty slow is no P90 breach", p90, window(20, 2, 0, 0), 0, None),
        ];
        for (name, rule, input, breaches, trip) in cases {
            assert_eq!(judge(&rule, &input), Verdict { breaches, trip }, "{name}");
        }
    }

    /// Kills, in `judge`, `w.calls > 0` with `>` → `>=`.
    ///
    /// A span's slow count can exceed its calls: a spill moves a lane's
    /// count into `spill_calls` and then `spill_slow`, and a drain racing it
    /// takes `spill_calls` before and `spill_slow` after (`shard.rs`), so
    /// the span gets slow calls without their calls (the next one gets the
    /// calls). A span of no calls never breaches, even with `min_calls` 0
    /// (accepted by the builder), whatever its slow count says.
    #[test]
    fn a_span_without_calls_never_breaches_whatever_its_slow_count() {
        let rule = Rule {
            min_calls: 0,
            trip_windows: 1,
            ..DEFAULT
        };
        for windows in [1, 3] {
            let span = Input {
                calls: 0,
                slow: 5,
                windows,
                ..Input::default()
            };
            assert_eq!(
                judge(&rule, &span),
                Verdict {
                    breaches: 0,
                    trip: None
                },
                "{windows} windows"
            );
        }
    }

    #[test]
    fn the_error_span_and_the_failure_span_are_read_apart() {
        let rule = Rule {
            failures: NonZeroU32::new(5),
            ..DEFAULT
        };
        // A quiet window in a span that holds earlier errors.
        let span = Input {
            calls: 2,
            slow: 0,
            windows: 1,
            span_calls: 40,
            span_errors: 21,
            span_failures: 4,
            breaches: 0,
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
            breaches: 0,
        };
        assert_eq!(judge(&DEFAULT, &w).trip, Some(Reason::ErrorRate));
        let all = Rule {
            error_ppb: PPB,
            ..DEFAULT
        };
        assert_eq!(judge(&all, &w).trip, None, "an error rate of 1 never trips");
    }

    #[test]
    fn a_span_of_several_windows_is_judged_as_if_spread_evenly() {
        let rule = Rule {
            trip_windows: 2,
            ..DEFAULT
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
        assert_eq!(
            judge(&rule, &span(40, 40, 2)),
            Verdict {
                breaches: 2,
                trip: Some(Reason::LatencyBreach)
            }
        );
        // Spread evenly, 1% of each window slow is no breach.
        assert_eq!(judge(&rule, &span(400, 4, 4)).breaches, 0);
        // A long gap: the streak saturates, nothing overflows.
        let gap = judge(&rule, &span(1_000_000, 1_000_000, u64::MAX));
        assert_eq!(gap.breaches, 0, "fewer than min_calls per window over the gap");
        let long = judge(&Rule { min_calls: 0, ..rule }, &span(1000, 1000, 300));
        assert_eq!(long.breaches, 255);
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
