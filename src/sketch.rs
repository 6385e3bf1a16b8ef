//! The latency sketch: bucket geometry, the lookup table that places a
//! latency in its bucket without a logarithm, the rule that makes the slow
//! count exact, and the histogram a window close reads its quantiles from.
//!
//! # Buckets
//! Bucket `i` holds latencies `v` with `ceil(8 · log2 v) = 80 + i`: eight
//! buckets per octave, from 1 µs (bucket 0 also takes everything faster) to
//! 2^36 ns ≈ 68.7 s (bucket [`TOP`] also takes everything slower). These are
//! exactly the keys of a DDSketch with `γ = 2^(1/8)`: window close merges the
//! shards' buckets into what such a sketch would hold and reads the
//! quantiles off it with the sketch's own rank rule (`tests/observability/quantiles.rs`
//! checks the result against `sketches-ddsketch` fed the same samples).
//!
//! The hot path finds the key without a logarithm: the exponent from
//! `leading_zeros`, the position within the octave from a 256-entry table
//! ([`TABLE`]) on the next eight bits. The error this costs is stated once,
//! at [`QUANTILE_RELATIVE_ERROR`].
//!
//! # The exact slow count
//! The bucket holding the latency threshold `T` is split: slow calls (above
//! `T`) whose key equals `T`'s go to an extra bucket, [`STRADDLE`], so that
//! slow = (buckets above `T`'s) + straddle, exactly ([`is_slow_bucket`]).

use crate::report::LatencyQuantiles;
use std::time::Duration;

/// The relative error bound of every [`LatencyQuantiles`] value: each is
/// within 4.72% of the exact quantile of the window's latencies between
/// 1 µs and 68.7 s.
///
/// Why 4.72%: the buckets are `γ = 2^(1/8)` wide, and a DDSketch with that
/// `γ` reports every value of a bucket within `α = (γ − 1)/(γ + 1) ≈ 4.33%`;
/// the hot path's table places a latency within 1/256 (0.39%) of a bucket
/// boundary possibly in the neighbouring bucket, so 4.33% + 0.39% = 4.72%.
/// Latencies below 1 µs are reported as about 1 µs, above 68.7 s as about
/// 68.7 s.
///
/// ```
/// assert!(tailguard::QUANTILE_RELATIVE_ERROR < 0.05);
/// ```
pub const QUANTILE_RELATIVE_ERROR: f64 = 0.0472;

/// Octaves covered: 2^10 ns (1 µs) to 2^(10 + OCTAVES) ns. Under the loom
/// models one octave, so that a window close stays a few dozen operations.
#[cfg(not(tailguard_loom))]
const OCTAVES: usize = 26;
#[cfg(tailguard_loom)]
const OCTAVES: usize = 1;
const MIN_EXP: u32 = 10;
/// Sketch key of bucket 0: `ceil(8 · log2 2^10)`.
pub(crate) const KEY_OFFSET: i32 = 80;
/// The last ordinary bucket.
pub(crate) const TOP: usize = 8 * OCTAVES;
/// The slow half of the threshold's bucket.
pub(crate) const STRADDLE: usize = TOP + 1;
/// Buckets per shard.
pub(crate) const BUCKETS: usize = TOP + 2;
/// `TABLE[m]` = `ceil(8 · log2(1 + (m + ½)/256))`: the position within an
/// octave of the values whose next eight bits after the leading one are `m`.
/// Integer-only: the smallest `j` with `((513 + 2m)/512)^8 <= 2^j`.
pub(crate) static TABLE: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut m = 0;
    while m < 256 {
        let x = (513 + 2 * m) as u128;
        let x8 = x * x * x * x * x * x * x * x; // < 2^80
        let mut j = 0;
        while x8 > (1u128 << (72 + j)) {
            j += 1;
        }
        t[m] = j as u8;
        m += 1;
    }
    t
};

/// The bucket of a latency of `ns` nanoseconds.
#[inline(always)]
pub(crate) fn key_index(ns: u64) -> usize {
    if ns <= 1 << MIN_EXP {
        return 0;
    }
    let lz = ns.leading_zeros();
    let exp = 63 - lz;
    let mantissa = ((ns << lz) << 1 >> 56) as usize;
    let index = 8 * (exp - MIN_EXP) as usize + TABLE[mantissa] as usize;
    if index > TOP {
        TOP
    } else {
        index
    }
}

/// The thread's guess in `hint`, below `len`.
#[inline(always)]
pub(crate) fn guessed(hint: &'static std::thread::LocalKey<core::cell::Cell<u8>>, len: usize) -> usize {
    (hint.with(core::cell::Cell::get) as usize).min(len - 1)
}

/// The bucket a call is counted in: its key's, except that a slow call in
/// the threshold's own bucket goes to [`STRADDLE`].
#[inline(always)]
pub(crate) fn bucket_of(ns: u64, slow: bool, threshold_index: usize) -> usize {
    let index = key_index(ns);
    if slow && index == threshold_index {
        STRADDLE
    } else {
        index
    }
}

/// Whether calls in `bucket` are slow.
#[inline]
pub(crate) fn is_slow_bucket(bucket: usize, threshold_index: usize) -> bool {
    bucket == STRADDLE || (bucket > threshold_index && bucket <= TOP)
}

/// The sketch key of a bucket (the straddle bucket shares the threshold's).
pub(crate) fn sketch_key(bucket: usize, threshold_index: usize) -> i32 {
    let b = if bucket == STRADDLE { threshold_index } else { bucket };
    KEY_OFFSET + b as i32
}

/// The upper edge of bucket `bucket`: the largest latency, in nanoseconds,
/// that the hot path places in it or below ([`key_index`]), so that "slower
/// than `edge_ns(b)`" is "in a bucket above `b`" exactly. About
/// `2^((KEY_OFFSET + b) / 8)` ns (the table places values within 1/256 of
/// a boundary on either side); `u64::MAX` for [`TOP`], which takes
/// everything slower.
pub(crate) fn edge_ns(bucket: usize) -> u64 {
    static EDGES: std::sync::OnceLock<[u64; TOP + 1]> = std::sync::OnceLock::new();
    let edges = EDGES.get_or_init(|| {
        core::array::from_fn(|b| {
            if b >= TOP {
                return u64::MAX;
            }
            // `key_index` is monotonic: the last `ns` with index <= b.
            let (mut lo, mut hi) = (0u64, u64::MAX);
            while lo < hi {
                let mid = lo + (hi - lo).div_ceil(2);
                if key_index(mid) <= b {
                    lo = mid;
                } else {
                    hi = mid - 1;
                }
            }
            lo
        })
    });
    edges[bucket.min(TOP)]
}

/// The value DDSketch reports for bucket `bucket`: its representative
/// `2γ^K / (1 + γ)` nanoseconds (`K` its key), within `α = 4.33%` of every
/// latency in it. Computed once per process.
pub(crate) fn value_ns(bucket: usize) -> u64 {
    values_ns()[bucket.min(BUCKETS - 1)]
}

/// [`value_ns`] of every bucket (for a caller reading many).
pub(crate) fn values_ns() -> &'static [u64; BUCKETS] {
    static VALUES: std::sync::OnceLock<[u64; BUCKETS]> = std::sync::OnceLock::new();
    VALUES.get_or_init(|| {
        let gamma = 2f64.powf(1.0 / 8.0);
        core::array::from_fn(|bucket| {
            let key = KEY_OFFSET + bucket as i32;
            (2.0 * gamma.powi(key) / (1.0 + gamma)) as u64
        })
    })
}

/// One window's latencies, merged from the shards at window close: the
/// count in each bucket (bucket `i` holds latencies with DDSketch key
/// `ceil(8 · log2 ns) = KEY_OFFSET + i`), and a bit per bucket in use, so
/// that reading it costs the buckets in use, not all of them.
pub(crate) struct Histogram {
    counts: [u64; BUCKETS],
    present: [u64; BUCKETS.div_ceil(64)],
}

impl Histogram {
    pub(crate) fn new() -> Self {
        Self {
            counts: [0; BUCKETS],
            present: [0; BUCKETS.div_ceil(64)],
        }
    }

    pub(crate) fn add(&mut self, bucket: usize, n: u64) {
        self.counts[bucket] += n;
        self.present[bucket / 64] |= 1 << (bucket % 64);
    }

    /// Adds every count of `other`; returns how many it added.
    pub(crate) fn merge(&mut self, other: &Histogram) -> u64 {
        let mut added = 0u64;
        for (bucket, n) in other.iter() {
            self.add(bucket, n);
            added = added.saturating_add(n);
        }
        added
    }

    /// Empties it.
    pub(crate) fn clear(&mut self) {
        for (i, word) in self.present.iter_mut().enumerate() {
            let mut bits = core::mem::take(word);
            while bits != 0 {
                self.counts[i * 64 + bits.trailing_zeros() as usize] = 0;
                bits &= bits - 1;
            }
        }
    }

    /// Samples held.
    pub(crate) fn total(&self) -> u64 {
        let mut total = 0;
        self.for_each(|_, n| total += n);
        total
    }

    /// Samples in buckets above `bucket`: the calls whose key is above its
    /// key, slower than [`edge_ns`]`(bucket)` exactly.
    pub(crate) fn count_above(&self, bucket: usize) -> u64 {
        self.iter().filter(|&(b, _)| b > bucket).map(|(_, n)| n).sum()
    }

    /// The bucket holding the quantile `quantile_ppb` (parts per billion) by
    /// DDSketch's rank rule, the sample of rank `floor(q · (n − 1))`, in
    /// integers; `None` when empty.
    pub(crate) fn quantile_bucket(&self, quantile_ppb: u64) -> Option<usize> {
        let total = self.total();
        let rank = (u128::from(total.checked_sub(1)?) * u128::from(quantile_ppb) / 1_000_000_000) as u64;
        let mut seen = 0;
        self.iter().find_map(|(bucket, n)| {
            seen += n;
            (seen > rank).then_some(bucket)
        })
    }

    /// Calls `f` with each bucket in use and its count, in increasing
    /// order (plain loops: what a window close runs for every breaker).
    #[inline]
    pub(crate) fn for_each(&self, mut f: impl FnMut(usize, u64)) {
        for (i, &word) in self.present.iter().enumerate() {
            let mut bits = word;
            while bits != 0 {
                let bucket = i * 64 + bits.trailing_zeros() as usize;
                bits &= bits - 1;
                f(bucket, self.counts[bucket]);
            }
        }
    }

    /// The buckets in use and their counts, in increasing order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (usize, u64)> + '_ {
        self.present.iter().enumerate().flat_map(move |(i, &word)| {
            let mut bits = word;
            core::iter::from_fn(move || {
                (bits != 0).then(|| {
                    let bucket = i * 64 + bits.trailing_zeros() as usize;
                    bits &= bits - 1;
                    (bucket, self.counts[bucket])
                })
            })
        })
    }

    /// The quantiles, by DDSketch's rule: the bucket holding the sample of
    /// rank `floor(q · (n − 1))`, reported at the bucket's representative
    /// `2γ^K / (1 + γ)`, within `α = 4.33%` of every value in it.
    pub(crate) fn quantiles(&self) -> Option<LatencyQuantiles> {
        let total = self.total();
        if total == 0 {
            return None;
        }
        // One pass for the four ranks, which are in increasing order.
        let ranks = [0.5, 0.9, 0.99, 0.999].map(|q: f64| (q * (total - 1) as f64) as u64);
        let mut out = [Duration::ZERO; 4];
        let mut next = 0;
        let mut seen = 0;
        for (bucket, n) in self.iter() {
            seen += n;
            while next < 4 && seen > ranks[next] {
                out[next] = Duration::from_nanos(value_ns(bucket));
                next += 1;
            }
            if next == 4 {
                break;
            }
        }
        Some(LatencyQuantiles {
            p50: out[0],
            p90: out[1],
            p99: out[2],
            p999: out[3],
        })
    }
}

#[cfg(all(test, not(tailguard_loom)))]
mod tests {
    use super::*;

    /// A bucket's edge is exactly where the hot path's placement changes:
    /// the edge itself is in the bucket, one nanosecond more is above it;
    /// edges are about a factor 2^(1/8) apart.
    #[test]
    fn bucket_edges_are_where_the_placement_changes() {
        let gamma = 2f64.powf(1.0 / 8.0);
        for b in 0..TOP {
            let e = edge_ns(b);
            assert!(key_index(e) <= b, "{b}");
            assert_eq!(key_index(e + 1), b + 1, "{b}: one more is in the next bucket");
            if b > 0 {
                let ratio = e as f64 / edge_ns(b - 1) as f64;
                assert!((ratio / gamma - 1.0).abs() < 0.01, "{b}: {ratio}");
            }
        }
        assert_eq!(edge_ns(TOP), u64::MAX);
        assert_eq!(edge_ns(TOP + 5), u64::MAX);
    }

    #[test]
    fn histogram_counts_above_a_bucket_and_finds_a_quantile() {
        let mut h = Histogram::new();
        assert_eq!(h.quantile_bucket(990_000_000), None);
        // 990 calls in bucket 10, 10 in bucket 30.
        h.add(10, 990);
        h.add(30, 10);
        assert_eq!(h.total(), 1000);
        assert_eq!(h.count_above(10), 10);
        assert_eq!(h.count_above(29), 10);
        assert_eq!(h.count_above(30), 0);
        assert_eq!(h.count_above(9), 1000);
        // Rank floor(0.99 × 999) = 989: the last of bucket 10.
        assert_eq!(h.quantile_bucket(990_000_000), Some(10));
        // Rank floor(0.991 × 999) = 990: the first of bucket 30.
        assert_eq!(h.quantile_bucket(991_000_000), Some(30));
        assert_eq!(h.quantile_bucket(1_000_000_000), Some(30));
        let mut g = Histogram::new();
        g.merge(&h);
        g.merge(&h);
        assert_eq!((g.total(), g.count_above(10)), (2000, 20));
        g.clear();
        assert_eq!((g.total(), g.quantile_bucket(500_000_000)), (0, None));
    }

    /// The exact key, with a logarithm: what the table approximates.
    fn exact(ns: u64) -> i64 {
        (8.0 * (ns as f64).log2()).ceil() as i64 - i64::from(KEY_OFFSET)
    }

    #[test]
    #[cfg_attr(miri, ignore = "a sweep of tens of thousands of keys with floating point")]
    fn table_keys_match_the_logarithm_except_within_a_bin_of_a_boundary() {
        let mut mismatches = 0;
        let mut ns = 1025u64;
        while ns < 1 << 36 {
            let got = key_index(ns) as i64;
            let want = exact(ns);
            if got != want {
                mismatches += 1;
                assert_eq!((got - want).abs(), 1, "{ns}");
                // The value sits within 1/256 of the boundary between the two.
                let boundary = 2f64.powf((want.max(got) + i64::from(KEY_OFFSET) - 1) as f64 / 8.0);
                assert!(((ns as f64) / boundary - 1.0).abs() < 1.0 / 256.0, "{ns}");
            }
            ns += ns / 997 + 1;
        }
        assert!(mismatches > 0 && mismatches < 2_000, "{mismatches}");
        // Monotonic, which `edge_ns` relies on.
        let mut last = 0;
        let mut ns = 1u64;
        while ns < 1 << 37 {
            let k = key_index(ns);
            assert!(k >= last, "{ns}");
            last = k;
            ns += ns / 251 + 1;
        }
        assert_eq!(key_index(0), 0);
        assert_eq!(key_index(u64::MAX), TOP);
    }
}
