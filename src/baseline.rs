//! The relative latency rule: each consumer's own baseline, learned from
//! its healthy windows, and the threshold a window is judged by,
//! `clamp(k × baseline, floor, ceiling)`, as a bucket edge.
//!
//! Plain numbers, no atomics, no clock: window close (`breaker/window.rs`)
//! hands each judged span's histogram and verdict here, under the tick lock.
//!
//! # Units
//! Latencies are in the sketch's buckets (`sketch.rs`: eight to an octave,
//! a factor `2^(1/8)`, 9.05%, apart). The baseline is a fractional bucket
//! index in fixed point (`2^32` to a bucket), so that its slow rise, a few
//! millionths of a bucket a window, is not lost to rounding. The threshold
//! is the first bucket edge at or above `k × baseline` (at most one bucket
//! above it), clamped to the edges at or above `floor` and `ceiling`; a
//! call is slow by the relative rule when it lies in a bucket above the
//! threshold's, which is exactly "slower than [`edge_ns`] of that bucket".
//! A baseline in nanoseconds is measured on the same edges
//! ([`ns_of_units`]): a whole bucket index is its bucket's edge, so a
//! baseline read and seeded back (a restart) gives the same threshold.
//! The sketch resolves 1 µs to 68.7 s: a baseline below 1 µs counts as
//! 1 µs, and no relative threshold is above 68.7 s.
//!
//! # Learning
//! An *observation* is the `q`-quantile (the rule's own quantile) of at
//! least [`samples`] calls pooled from consecutive healthy windows: dense
//! (at least `min_calls` calls a window), judged (CLOSED in its own
//! generation, normal or metrics-only mode, not in a recovery ramp nor the
//! window after one), not breaching, and with at most 10% of its calls
//! failed ([`MAX_ERROR_PPB`]). A window the rule may not judge, or one that breaches, empties
//! the pool: nothing from an outage, a probe, a forced mode, a ramp or a
//! stale verdict is learned, and no pool straddles one. A sparse window
//! (under `min_calls`) neither adds to the pool nor empties it.
//!
//! The first [`RelativeLatency::warmup`](crate::RelativeLatency::warmup)
//! observations are averaged (in the log domain); until then the rule
//! judges by the ceiling alone (a cold start). After that, an observation
//! below the baseline halves the distance (the baseline falls quickly); one
//! above it raises the baseline by at most `rise` per window the pool
//! covered, so that the baseline rises by at most a factor
//! [`max_rise_per_hour`](crate::RelativeLatency::max_rise_per_hour) per hour
//! of healthy windows (and so per hour of any time).
//!
//! A consumer whose latency grows by a factor `g` an hour, `g` above that
//! bound `r`, outgrows its baseline by `g / r` an hour and breaches once
//! that reaches `k`: after about `ln k / ln(g / r)` hours (with the
//! defaults, `k = 2` and `r = 1.5`: 3% a minute, ×5.9 an hour, is caught
//! after about 30 minutes). A ramp at `r` or slower is followed, not caught,
//! until it reaches the ceiling.

use crate::sketch::{edge_ns, key_index, Histogram, TOP};
use crate::trip::PPB;

/// A span with more than this fraction of its calls failed (parts per
/// billion: 10%) teaches nothing: fast failures would teach a baseline the
/// consumer's good calls never meet.
pub(crate) const MAX_ERROR_PPB: u64 = PPB / 10;

/// Fixed-point bits of a baseline: `1 << FRAC` is one bucket.
pub(crate) const FRAC: u32 = 32;
const ONE: u64 = 1 << FRAC;

/// Calls an observation pools at the least for the quantile `q`: ten
/// expected above it (`10 / (1 − q)`), at least 100, at most 10^6.
pub(crate) fn samples(slow_ppb: u64) -> u64 {
    if slow_ppb == 0 {
        return 1_000_000;
    }
    (10 * PPB).div_ceil(slow_ppb).clamp(100, 1_000_000)
}

/// A fractional bucket index (fixed point) as nanoseconds: a whole index
/// `j` is its bucket's upper edge, [`edge_ns`]`(j)` exactly (the largest
/// latency the hot path places in it), and a fraction `f` of the way to
/// the next is `edge(j) × (edge(j + 1) / edge(j))^f`. At most the last
/// ordinary bucket's edge (68.7 s).
pub(crate) fn ns_of_units(units: u64) -> u64 {
    let j = ((units >> FRAC) as usize).min(TOP - 1);
    let lo = edge_ns(j) as f64;
    if j + 1 >= TOP {
        return lo as u64;
    }
    let f = (units & (ONE - 1)) as f64 / ONE as f64;
    let hi = edge_ns(j + 1) as f64;
    (lo * (hi / lo).powf(f)).round() as u64
}

/// A latency in nanoseconds as a fractional bucket index (fixed point):
/// the inverse of [`ns_of_units`] (to its rounding), 0 at or below the
/// first bucket's edge, at most the last ordinary bucket's.
pub(crate) fn units_of_ns(ns: u64) -> u64 {
    let b = key_index(ns).min(TOP - 1);
    let e = edge_ns(b);
    if b == 0 || ns >= e {
        return (b as u64) << FRAC;
    }
    // edge(b − 1) < ns < edge(b).
    let lo = edge_ns(b - 1) as f64;
    let f = ((ns as f64) / lo).ln() / ((e as f64) / lo).ln();
    (((b - 1) as u64) << FRAC) + (f.clamp(0.0, 1.0) * ONE as f64).round().min((ONE - 1) as f64) as u64
}

/// The most a baseline rises per window of `window_ns`, fixed point, for a
/// bound of `per_hour` (at least 1), rounded down. A baseline in
/// nanoseconds is measured on the table's edges, each within 1/256 of its
/// nominal `2^(k/8)`: the bound is taken `(1 + 1/256)^2` lower in buckets,
/// so that it holds in nanoseconds wherever the baseline sits.
pub(crate) fn rise_per_window(per_hour: f64, window_ns: u64) -> u64 {
    let slack = (1.0 + 1.0 / 256.0f64).powi(2);
    let buckets_per_hour = (8.0 * (per_hour / slack).log2()).max(0.0);
    let per_window = buckets_per_hour * window_ns as f64 / 3.6e12;
    (per_window * ONE as f64).floor() as u64
}

/// The relative rule's settings, in the units it computes with.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Relative {
    /// `k`.
    pub(crate) multiplier: f64,
    /// The bucket whose edge is the first at or above the floor.
    pub(crate) floor_index: usize,
    /// The bucket whose edge is the first at or above the ceiling.
    pub(crate) ceiling_index: usize,
    /// The most a baseline rises per window, fixed point.
    pub(crate) rise_per_window: u64,
    /// Calls an observation pools at the least.
    pub(crate) samples: u64,
    /// Observations averaged before the baseline judges.
    pub(crate) warmup: u32,
    /// A baseline to start from (fixed point), skipping the warmup.
    pub(crate) initial: Option<u64>,
    /// The quantile the baseline is taken at (the rule's own).
    pub(crate) quantile_ppb: u64,
}

/// What a window close keeps of the relative rule.
pub(crate) struct Learner {
    /// Fixed point; meaningful once `observations > 0`.
    baseline: u64,
    /// Observations made, at most `warmup` (then the baseline judges).
    observations: u32,
    pool: Histogram,
    /// Calls in the pool, and the windows they came from.
    pool_calls: u64,
    pool_windows: u64,
}

impl core::fmt::Debug for Learner {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Learner")
            .field("baseline", &self.baseline)
            .field("observations", &self.observations)
            .field("pool_calls", &self.pool_calls)
            .field("pool_windows", &self.pool_windows)
            .finish()
    }
}

impl Learner {
    pub(crate) fn new(r: &Relative) -> Self {
        let mut l = Learner {
            baseline: 0,
            observations: 0,
            pool: Histogram::new(),
            pool_calls: 0,
            pool_windows: 0,
        };
        if let Some(units) = r.initial {
            l.seed(r, units);
        }
        l
    }

    /// The baseline (fixed point), once there is one (after the first
    /// observation, or seeded).
    pub(crate) fn baseline(&self) -> Option<u64> {
        (self.observations > 0).then_some(self.baseline)
    }

    /// Whether the baseline judges (warmed up, or seeded).
    pub(crate) fn warm(&self, r: &Relative) -> bool {
        self.observations >= r.warmup
    }

    /// The bucket a span is judged by now: calls in buckets above it are
    /// slow. The ceiling's until the baseline is warm.
    pub(crate) fn threshold_index(&self, r: &Relative) -> usize {
        if !self.warm(r) {
            return r.ceiling_index;
        }
        // The first edge at or above k × the baseline as reported.
        let target = (r.multiplier * ns_of_units(self.baseline) as f64).ceil();
        let j = if target >= edge_ns(TOP - 1) as f64 {
            TOP - 1
        } else {
            key_index(target as u64)
        };
        j.clamp(r.floor_index, r.ceiling_index)
    }

    /// The threshold a span is judged by now, in nanoseconds (a bucket
    /// edge).
    pub(crate) fn threshold_ns(&self, r: &Relative) -> u64 {
        edge_ns(self.threshold_index(r))
    }

    /// A span the rule judged healthy (dense, not breaching, CLOSED in
    /// normal or metrics-only mode, not ramping), over `windows` windows:
    /// pooled, and observed once the pool holds enough calls. Returns
    /// whether the pool holds calls after it.
    pub(crate) fn healthy(&mut self, r: &Relative, hist: &Histogram, windows: u64) -> bool {
        self.pool_calls = self.pool_calls.saturating_add(self.pool.merge(hist));
        self.pool_windows = self.pool_windows.saturating_add(windows);
        if self.pool_calls < r.samples {
            return self.pool_calls > 0;
        }
        if let Some(bucket) = self.pool.quantile_bucket(r.quantile_ppb) {
            self.observe(r, (bucket as u64) << FRAC, self.pool_windows);
        }
        self.forget_pool();
        false
    }

    /// One observation `obs` (fixed point) over `windows` windows.
    fn observe(&mut self, r: &Relative, obs: u64, windows: u64) {
        if !self.warm(r) {
            // The mean of the warmup's observations.
            let n = i128::from(self.observations) + 1;
            let b = i128::from(self.baseline);
            self.baseline = (b + (i128::from(obs) - b) / n) as u64;
            self.observations += 1;
        } else if obs < self.baseline {
            self.baseline -= (self.baseline - obs).div_ceil(2);
        } else {
            let most = self.baseline.saturating_add(r.rise_per_window.saturating_mul(windows));
            self.baseline = obs.min(most);
        }
    }

    /// A span that must not be learned from (not judged, or breaching):
    /// the pool is emptied, so that no observation straddles it.
    pub(crate) fn forget_pool(&mut self) {
        if self.pool_calls > 0 || self.pool_windows > 0 {
            self.pool.clear();
        }
        self.pool_calls = 0;
        self.pool_windows = 0;
    }

    /// Back to a cold start.
    pub(crate) fn reset(&mut self) {
        self.baseline = 0;
        self.observations = 0;
        self.forget_pool();
    }

    /// Starts from the baseline `units` (fixed point), warm.
    pub(crate) fn seed(&mut self, r: &Relative, units: u64) {
        self.baseline = units.min(((TOP - 1) as u64) << FRAC);
        self.observations = r.warmup.max(1);
        self.forget_pool();
    }
}

#[cfg(all(test, not(tailguard_loom)))]
mod tests {
    use super::*;
    use crate::sketch::key_index;

    /// The defaults at P99: k = 2, floor 1 ms, ceiling 1 s, ×1.5 an hour,
    /// 1 s windows, 5 warmup observations.
    fn rule() -> Relative {
        Relative {
            multiplier: 2.0,
            floor_index: key_index(1_000_000),
            ceiling_index: key_index(1_000_000_000),
            rise_per_window: rise_per_window(1.5, 1_000_000_000),
            samples: samples(10_000_000),
            warmup: 5,
            initial: None,
            quantile_ppb: 990_000_000,
        }
    }

    /// A healthy window of 1000 calls: 990 at `fast` ns, 10 at `tail` ns.
    fn window(fast: u64, tail: u64) -> Histogram {
        let mut h = Histogram::new();
        h.add(key_index(fast), 990);
        h.add(key_index(tail), 10);
        h
    }

    #[test]
    fn samples_for_a_quantile() {
        assert_eq!(samples(10_000_000), 1000, "P99");
        assert_eq!(samples(1_000_000), 10_000, "P99.9");
        assert_eq!(samples(500_000_000), 100, "P50: at least 100");
        assert_eq!(samples(1), 1_000_000, "P99.9999999: at most 10^6");
        assert_eq!(samples(0), 1_000_000, "P100");
    }

    #[test]
    fn cold_start_judges_by_the_ceiling_until_warm() {
        let r = rule();
        let mut l = Learner::new(&r);
        assert_eq!(l.baseline(), None);
        for i in 0..5 {
            assert_eq!(l.threshold_index(&r), r.ceiling_index, "observation {i}");
            l.healthy(&r, &window(1_000_000, 2_000_000), 1);
        }
        // Warm: the P99 bucket is 990 calls' (rank 989), 1 ms's bucket.
        assert_eq!(l.baseline(), Some((key_index(1_000_000) as u64) << FRAC));
        // k = 2: eight buckets above, twice the edge of 1 ms's bucket
        // (2^20 ns: the baseline is its bucket's upper edge, 2^20 ns).
        assert_eq!(l.threshold_index(&r), key_index(1_000_000) + 8);
        assert_eq!(edge_ns(key_index(1_000_000)), (1 << 20) - 1);
        assert_eq!(l.threshold_ns(&r), (1 << 21) - 1);
    }

    #[test]
    fn the_threshold_is_clamped_to_the_floor_and_the_ceiling() {
        let r = rule();
        let mut l = Learner::new(&r);
        l.seed(&r, units_of_ns(10_000)); // 10 µs: 2k is under the 1 ms floor
        assert_eq!(l.threshold_index(&r), r.floor_index);
        assert!(l.threshold_ns(&r) >= 1_000_000);
        l.seed(&r, units_of_ns(800_000_000)); // 800 ms: 2k is over the 1 s ceiling
        assert_eq!(l.threshold_index(&r), r.ceiling_index);
        assert!(l.threshold_ns(&r) >= 1_000_000_000 && l.threshold_ns(&r) < 1_100_000_000);
    }

    #[test]
    fn an_observation_pools_enough_calls_and_a_sparse_pool_waits() {
        let r = rule();
        let mut l = Learner::new(&r);
        // 100 calls a window: ten windows make one observation.
        let mut h = Histogram::new();
        h.add(key_index(3_000_000), 100);
        for _ in 0..9 {
            l.healthy(&r, &h, 1);
        }
        assert_eq!(l.baseline(), None, "900 calls are not enough at P99");
        l.healthy(&r, &h, 1);
        assert_eq!(l.baseline(), Some((key_index(3_000_000) as u64) << FRAC));
        // An unjudged or breaching span empties the pool.
        for _ in 0..9 {
            l.healthy(&r, &h, 1);
        }
        l.forget_pool();
        l.healthy(&r, &h, 1);
        assert_eq!(l.observations, 1, "the pool started afresh: 100 calls");
        for _ in 0..9 {
            l.healthy(&r, &h, 1);
        }
        assert_eq!(l.observations, 2);
    }

    /// Falls by half the distance an observation; rises by at most the
    /// bound per window the pool covered.
    #[test]
    fn falls_quickly_and_rises_at_the_bounded_rate() {
        let r = rule();
        let mut l = Learner::new(&r);
        let start = (key_index(10_000_000) as u64) << FRAC;
        l.seed(&r, start);
        // Ten times slower at once: one observation rises one window's worth.
        l.healthy(&r, &window(100_000_000, 100_000_000), 1);
        assert_eq!(l.baseline(), Some(start + r.rise_per_window));
        // An hour of such windows: at most ×1.5.
        for _ in 0..3599 {
            l.healthy(&r, &window(100_000_000, 100_000_000), 1);
        }
        let b = l.baseline().unwrap();
        let ratio = ns_of_units(b) as f64 / ns_of_units(start) as f64;
        assert!(ratio <= 1.5 && ratio > 1.48, "{ratio}");
        // A pool over several windows rises by that many windows' worth.
        let mut m = Learner::new(&r);
        m.seed(&r, start);
        let mut slow = Histogram::new();
        slow.add(key_index(100_000_000), 200);
        for _ in 0..5 {
            m.healthy(&r, &slow, 2);
        }
        assert_eq!(m.baseline(), Some(start + 10 * r.rise_per_window));
        // Falling: half the distance each observation (rounded toward it).
        let low = (key_index(1_000_000) as u64) << FRAC;
        let before = l.baseline().unwrap();
        l.healthy(&r, &window(1_000_000, 1_000_000), 1);
        assert_eq!(l.baseline(), Some(before - (before - low).div_ceil(2)));
        for _ in 0..40 {
            l.healthy(&r, &window(1_000_000, 1_000_000), 1);
        }
        assert_eq!(l.baseline(), Some(low));
    }

    #[test]
    fn units_and_nanoseconds_round_trip() {
        for ns in [2_000u64, 1_000_000, 1_048_575, 1_048_576, 50_000_000, 3_000_000_000] {
            let back = ns_of_units(units_of_ns(ns));
            assert!(back.abs_diff(ns) <= 1, "{ns}: {back}");
        }
        // A whole index is its bucket's edge, exactly.
        for b in [0usize, 8, 80, 150, TOP - 1] {
            assert_eq!(ns_of_units((b as u64) << FRAC), edge_ns(b), "{b}");
            assert_eq!(units_of_ns(edge_ns(b)), (b as u64) << FRAC, "{b}");
        }
        assert_eq!(units_of_ns(0), 0);
        assert_eq!(units_of_ns(1), 0);
        assert_eq!(units_of_ns(u64::MAX), ((TOP - 1) as u64) << FRAC);
        let r = rule();
        let mut l = Learner::new(&r);
        l.seed(&r, u64::MAX);
        assert_eq!(l.baseline(), Some(((TOP - 1) as u64) << FRAC));
        l.reset();
        assert_eq!((l.baseline(), l.threshold_index(&r)), (None, r.ceiling_index));
    }

    /// The threshold is the first edge at or above k × the baseline as
    /// reported, and a baseline read and seeded back gives the same one.
    #[test]
    fn the_threshold_is_at_or_above_k_times_the_reported_baseline_and_survives_a_restart() {
        let r = rule();
        let mut ns = 1_000_000u64;
        while ns < 500_000_000 {
            let mut l = Learner::new(&r);
            l.seed(&r, units_of_ns(ns));
            let reported = ns_of_units(l.baseline().unwrap());
            let j = l.threshold_index(&r);
            if j > r.floor_index && j < r.ceiling_index {
                assert!(edge_ns(j) as f64 >= 2.0 * reported as f64, "{ns}");
                assert!(
                    (edge_ns(j - 1) as f64) < 2.0 * reported as f64,
                    "{ns}: the first such edge"
                );
            }
            let mut again = Learner::new(&r);
            again.seed(&r, units_of_ns(reported));
            assert_eq!(again.threshold_index(&r), j, "{ns}: restarted from {reported}");
            ns += ns / 37 + 1;
        }
    }
}
