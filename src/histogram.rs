//! The cumulative latency histogram: every call a breaker measured since
//! it was built, in a fixed layout of bucket edges that Prometheus can sum
//! across a fleet (`breaker_call_duration_seconds`), accumulated at window
//! close from the buckets the shards already count (nothing on the hot
//! path).
//!
//! # Layout
//! Every fourth edge of the latency sketch (`crate::sketch`): sketch
//! buckets `0, 4, …, 204`, so 52 finite edges two per octave, about
//! `1.024 µs × 2^(k/2)` for `k = 0..=51` (1.024 µs to 48.6 s), then
//! everything slower (+Inf). Each edge is the largest latency the hot path
//! places at or below its sketch bucket, so a count at an edge is exact:
//! the calls that took at most that long. One more edge, per breaker: the
//! absolute latency threshold, when it is not a layout edge (and under
//! 2^36 ns, 68.7 s). Its count is exact too, because the hot path keeps
//! the slow calls of the threshold's own bucket apart (the straddle: see
//! `crate::sketch`); so `count - count_at_or_below(threshold)` is the
//! slow count of the calls it holds.

use crate::sketch::{edge_ns, values_ns, Histogram, TOP};
use std::time::Duration;

/// Sketch buckets per histogram bucket.
const STRIDE: usize = 4;
/// Finite edges: sketch buckets `0, STRIDE, …` below [`TOP`] (whose edge
/// is unbounded: it takes everything slower).
const FINITE: usize = TOP.div_ceil(STRIDE);
/// No threshold edge at or above this: the sketch's top, 2^36 ns.
const THRESHOLD_EDGE_BELOW: u64 = 1 << 36;

/// The histogram bucket of sketch bucket `bucket`: the first edge at or
/// above it, or the last (+Inf) past the finite ones.
fn coarse(bucket: usize) -> usize {
    bucket.div_ceil(STRIDE).min(FINITE)
}

/// The finite edges, in nanoseconds.
fn edges_ns() -> impl Iterator<Item = u64> {
    (0..FINITE).map(|k| edge_ns(k * STRIDE))
}

/// What window close adds to: the counts of each histogram bucket, the
/// calls at or below the absolute threshold, the estimated sum.
#[derive(Debug)]
pub(crate) struct Cumulative {
    counts: [u64; FINITE + 1],
    at_threshold: u64,
    sum_ns: u128,
}

impl Cumulative {
    pub(crate) fn new() -> Self {
        Self {
            counts: [0; FINITE + 1],
            at_threshold: 0,
            sum_ns: 0,
        }
    }

    /// Adds a drained span: its sketch histogram (the straddle in the
    /// threshold's bucket, as the sketch keys have it) and, of those calls,
    /// the `straddle` ones (slow, in the threshold's bucket
    /// `threshold_index`). One pass over the buckets in use, after the
    /// drain: cheaper than adding each bucket as the drain merges it.
    pub(crate) fn add(&mut self, hist: &Histogram, straddle: u64, threshold_index: usize) {
        let values = values_ns();
        let mut at_or_below = 0u64;
        let mut sum = 0u128;
        hist.for_each(|bucket, n| {
            let c = &mut self.counts[coarse(bucket)];
            *c = c.saturating_add(n);
            // No overflow: 2^128 ns is 10^22 years of calls.
            sum += u128::from(n) * u128::from(values[bucket]);
            if bucket <= threshold_index {
                at_or_below += n;
            }
        });
        self.sum_ns = self.sum_ns.saturating_add(sum);
        self.at_threshold = self.at_threshold.saturating_add(at_or_below.saturating_sub(straddle));
    }

    /// The public copy, with the threshold edge if `threshold_ns` needs one.
    pub(crate) fn read(&self, threshold_ns: u64) -> LatencyHistogram {
        let extra = threshold_ns < THRESHOLD_EDGE_BELOW && !edges_ns().any(|e| e == threshold_ns);
        LatencyHistogram {
            counts: self.counts,
            threshold: extra.then_some((threshold_ns, self.at_threshold)),
            sum_ns: self.sum_ns,
        }
    }
}

/// Every call a breaker measured since it was built, by latency: a
/// cumulative histogram in a fixed layout, the same for every breaker (and
/// every process), so that histograms from many router instances add up.
/// Read with [`Breaker::latency_histogram`](crate::Breaker::latency_histogram);
/// exported as `breaker_call_duration_seconds` (feature `prometheus`).
///
/// **Edges**: [`LatencyHistogram::edges`], two per octave from 1.024 µs
/// to 48.6 s (every fourth edge of the breaker's latency sketch), then
/// +Inf; and the breaker's absolute latency threshold
/// ([`Limits::latency_threshold`](crate::Limits::latency_threshold)) when
/// it is not one of them (and under 68.7 s). A count at an edge is exact:
/// the calls whose measured latency was at most that long.
///
/// **What it counts**: each call with a verdict counted in a window
/// (ordinary calls and probes), when its window closes (the
/// [`Ticker`](crate::Ticker) or [`Breaker::tick`](crate::Breaker::tick)).
/// Not the calls a close counted slow while still in flight (hung calls:
/// they have no latency yet, and none is taken when they end), nor
/// verdicts of stale permits; so [`count`](Self::count) is
/// [`Totals::calls`](crate::Totals::calls) less
/// [`WindowStats::in_flight_slow`](crate::WindowStats::in_flight_slow)
/// summed over the windows. [`sum`](Self::sum) is an estimate: each call
/// counted at its sketch bucket's representative value, within
/// [`QUANTILE_RELATIVE_ERROR`](crate::QUANTILE_RELATIVE_ERROR) of the true
/// sum.
///
/// ```
/// use std::time::Duration;
/// use tailguard::Breaker;
/// use tailguard::clock::ManualClock;
///
/// let clock = ManualClock::new();
/// let b = Breaker::builder()
///     .clock(clock.clone())
///     .latency_threshold(Duration::from_millis(100))
///     .build()?;
/// for ms in [2, 40, 100, 150] {
///     b.allow()?.record_latency(Duration::from_millis(ms), true);
/// }
/// clock.advance(Duration::from_secs(1));
/// b.tick(); // counted when the window closes
///
/// let h = b.latency_histogram();
/// assert_eq!(h.count(), 4);
/// // The threshold is an edge: the calls at or below it, exactly.
/// assert_eq!(h.count_at_or_below(Duration::from_millis(100)), Some(3));
/// let slow = h.count() - h.count_at_or_below(Duration::from_millis(100)).unwrap();
/// assert_eq!(slow, b.snapshot().totals.slow);
/// // Cumulative counts, edge by edge.
/// let (le, n) = h.buckets().find(|&(le, _)| le >= Duration::from_millis(2)).unwrap();
/// assert!(le < Duration::from_millis(3) && n == 1);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LatencyHistogram {
    counts: [u64; FINITE + 1],
    /// The threshold edge (ns) and the calls at or below it.
    threshold: Option<(u64, u64)>,
    sum_ns: u128,
}

impl LatencyHistogram {
    /// The fixed edges, in increasing order: the same for every breaker.
    /// Each is the largest latency the breaker places at or below a bucket
    /// of its sketch, every fourth one: 52 edges, about
    /// `1.024 µs × 2^(k/2)`, `k = 0..=51`.
    ///
    /// ```
    /// use std::time::Duration;
    /// let edges: Vec<Duration> = tailguard::LatencyHistogram::edges().collect();
    /// assert_eq!(edges.len(), 52);
    /// assert_eq!(edges[0], Duration::from_nanos(1024));
    /// assert!(edges.windows(2).all(|w| {
    ///     let r = w[1].as_secs_f64() / w[0].as_secs_f64();
    ///     (1.40..1.43).contains(&r) // two per octave
    /// }));
    /// ```
    pub fn edges() -> impl Iterator<Item = Duration> {
        edges_ns().map(Duration::from_nanos)
    }

    /// Calls counted.
    ///
    /// ```
    /// let b = tailguard::Breaker::builder().ticker(false).build()?;
    /// assert_eq!(b.latency_histogram().count(), 0);
    /// # Ok::<(), tailguard::ConfigError>(())
    /// ```
    pub fn count(&self) -> u64 {
        self.counts.iter().fold(0, |a, &n| a.saturating_add(n))
    }

    /// The sum of their latencies, estimated (each call at its sketch
    /// bucket's representative value): within
    /// [`QUANTILE_RELATIVE_ERROR`](crate::QUANTILE_RELATIVE_ERROR) of the
    /// true sum for latencies between 1 µs and 68.7 s.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tailguard::clock::ManualClock;
    ///
    /// let clock = ManualClock::new();
    /// let b = tailguard::Breaker::builder().clock(clock.clone()).build()?;
    /// b.allow()?.record_latency(Duration::from_millis(10), true);
    /// b.allow()?.record_latency(Duration::from_millis(30), true);
    /// clock.advance(Duration::from_secs(1));
    /// b.tick();
    /// let sum = b.latency_histogram().sum().as_secs_f64();
    /// assert!((sum - 0.040).abs() <= 0.040 * tailguard::QUANTILE_RELATIVE_ERROR);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn sum(&self) -> Duration {
        let secs = self.sum_ns / 1_000_000_000;
        let nanos = (self.sum_ns % 1_000_000_000) as u32;
        u64::try_from(secs).map_or(Duration::MAX, |s| Duration::new(s, nanos))
    }

    /// The edges and the calls at or below each, in increasing order of
    /// edge: the fixed ones ([`edges`](Self::edges)) and the threshold's,
    /// if this histogram has one. The calls above the last edge are the
    /// rest of [`count`](Self::count) (the +Inf bucket).
    ///
    /// ```
    /// let b = tailguard::Breaker::builder().ticker(false).build()?;
    /// let h = b.latency_histogram();
    /// // The default threshold, 50 ms, is not a fixed edge: it is one more.
    /// assert_eq!(h.buckets().count(), 53);
    /// assert!(h.buckets().any(|(le, _)| le == std::time::Duration::from_millis(50)));
    /// # Ok::<(), tailguard::ConfigError>(())
    /// ```
    pub fn buckets(&self) -> impl Iterator<Item = (Duration, u64)> + '_ {
        let mut fixed = edges_ns().zip(self.counts.iter().copied()).peekable();
        let mut extra = self.threshold;
        let mut below = 0u64;
        core::iter::from_fn(move || {
            if let Some((t, at)) = extra {
                // The threshold's edge, in its place among the fixed ones.
                if fixed.peek().map_or(true, |&(edge, _)| t < edge) {
                    extra = None;
                    return Some((Duration::from_nanos(t), at));
                }
            }
            let (edge, n) = fixed.next()?;
            below = below.saturating_add(n);
            Some((Duration::from_nanos(edge), below))
        })
    }

    /// The calls at or below `le`, exactly, if `le` is one of this
    /// histogram's edges ([`buckets`](Self::buckets)); `None` otherwise.
    ///
    /// ```
    /// use std::time::Duration;
    /// let b = tailguard::Breaker::builder().ticker(false).build()?;
    /// let h = b.latency_histogram();
    /// assert_eq!(h.count_at_or_below(Duration::from_nanos(1024)), Some(0));
    /// assert_eq!(h.count_at_or_below(Duration::from_nanos(1025)), None);
    /// # Ok::<(), tailguard::ConfigError>(())
    /// ```
    pub fn count_at_or_below(&self, le: Duration) -> Option<u64> {
        self.buckets().find(|&(edge, _)| edge == le).map(|(_, n)| n)
    }

    /// The threshold's own edge, if it has one: the breaker's absolute
    /// latency threshold when that is not a fixed edge.
    ///
    /// ```
    /// use std::time::Duration;
    /// let edge = tailguard::LatencyHistogram::edges().nth(40).unwrap();
    /// let on_edge = tailguard::Breaker::builder().latency_threshold(edge).ticker(false).build()?;
    /// assert_eq!(on_edge.latency_histogram().threshold_edge(), None);
    /// let off = tailguard::Breaker::builder()
    ///     .latency_threshold(Duration::from_millis(50))
    ///     .ticker(false)
    ///     .build()?;
    /// assert_eq!(off.latency_histogram().threshold_edge(), Some(Duration::from_millis(50)));
    /// # Ok::<(), tailguard::ConfigError>(())
    /// ```
    pub fn threshold_edge(&self) -> Option<Duration> {
        self.threshold.map(|(t, _)| Duration::from_nanos(t))
    }
}

#[cfg(all(test, not(tailguard_loom)))]
mod tests {
    use super::*;
    use crate::sketch::{bucket_of, key_index, sketch_key, KEY_OFFSET, STRADDLE};

    /// A histogram fed latencies the way the hot path and the drain place
    /// them, with threshold `t_ns`.
    fn fed(latencies: &[u64], t_ns: u64) -> LatencyHistogram {
        let t = key_index(t_ns);
        let mut hist = Histogram::new();
        let mut straddle = 0;
        for &ns in latencies {
            let b = bucket_of(ns, ns > t_ns, t);
            if b == STRADDLE {
                straddle += 1;
            }
            hist.add((sketch_key(b, t) - KEY_OFFSET) as usize, 1);
        }
        let mut c = Cumulative::new();
        c.add(&hist, straddle, t);
        c.read(t_ns)
    }

    /// Every count at every edge (the threshold's too) is the exact number
    /// of latencies at or below it, for latencies at, around and between
    /// the edges, and thresholds on and off them.
    #[test]
    #[cfg_attr(
        miri,
        ignore = "26,000 latencies against every edge: plain integer arithmetic, nothing for Miri to find"
    )]
    fn counts_at_every_edge_are_exact() {
        let mut latencies: Vec<u64> = Vec::new();
        for e in edges_ns().chain([50_000_000, 1_000_000_000, 3_000_000]) {
            latencies.extend([e.saturating_sub(1), e, e + 1]);
        }
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..5000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            latencies.push(x % 80_000_000_000);
        }
        for t_ns in [50_000_000, 1_000_000_000, edge_ns(120), 3_000_000, 60_000_000_000] {
            let h = fed(&latencies, t_ns);
            assert_eq!(h.count(), latencies.len() as u64);
            let mut last = 0;
            for (le, n) in h.buckets() {
                let exact = latencies.iter().filter(|&&ns| ns <= le.as_nanos() as u64).count() as u64;
                assert_eq!(n, exact, "edge {le:?}, threshold {t_ns}");
                assert!(n >= last, "cumulative");
                last = n;
            }
            let on_edge = edges_ns().any(|e| e == t_ns);
            assert_eq!(h.threshold_edge().is_some(), !on_edge);
            let slow = latencies.iter().filter(|&&ns| ns > t_ns).count() as u64;
            let at = h
                .count_at_or_below(Duration::from_nanos(t_ns))
                .expect("the threshold is an edge");
            assert_eq!(h.count() - at, slow);
        }
    }

    #[test]
    fn the_layout_is_two_edges_an_octave_exact_where_placement_changes() {
        let edges: Vec<u64> = edges_ns().collect();
        assert_eq!(edges.len(), 52);
        for (k, &e) in edges.iter().enumerate() {
            assert_eq!(key_index(e), 4 * k);
            assert_eq!(key_index(e + 1), 4 * k + 1);
        }
        assert!(*edges.last().unwrap() < THRESHOLD_EDGE_BELOW);
    }

    /// The estimated sum is within the sketch's relative error of the true
    /// sum; a sum past `u64` seconds saturates instead of wrapping.
    #[test]
    #[cfg_attr(miri, ignore = "plain arithmetic over 2,000 latencies: nothing for Miri to find")]
    fn the_sum_is_within_the_sketch_error() {
        let latencies: Vec<u64> = (1..2000u64).map(|i| i * i * 977).collect();
        let h = fed(&latencies, 100_000_000);
        let exact: u128 = latencies.iter().map(|&n| u128::from(n)).sum();
        let got = h.sum().as_nanos();
        let err = (got as f64 - exact as f64).abs() / exact as f64;
        assert!(err <= crate::QUANTILE_RELATIVE_ERROR, "{err}");
        let huge = LatencyHistogram {
            counts: [0; FINITE + 1],
            threshold: None,
            sum_ns: u128::MAX,
        };
        assert_eq!(huge.sum(), Duration::MAX);
    }

    /// A threshold above the last fixed edge comes last among the edges.
    #[test]
    fn a_threshold_above_every_fixed_edge_is_the_last_edge() {
        let h = fed(&[1, 60_000_000_000, 61_000_000_000, 70_000_000_000], 60_000_000_000);
        let buckets: Vec<(Duration, u64)> = h.buckets().collect();
        assert_eq!(buckets.len(), 53);
        assert_eq!(buckets[52], (Duration::from_secs(60), 2));
        assert_eq!(buckets[51].1, 1);
        assert_eq!(h.count(), 4);
    }
}
