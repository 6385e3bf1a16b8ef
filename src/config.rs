//! The validated configuration, in the units the breaker computes with
//! (nanoseconds, parts per billion), and the two public policy enums it
//! carries. Plain data and arithmetic: [`BreakerBuilder`](crate::BreakerBuilder)
//! makes a `Config`, the breaker reads it.

use crate::backoff::{uniform_inclusive, Backoff};
use crate::baseline::Relative;
use crate::trip::Rule;
use std::time::Duration;

/// Randomisation of the OPEN duration, so that a fleet of routers does not
/// probe a recovering consumer in lockstep.
///
/// ```
/// use tailguard::{Breaker, Jitter};
/// let b = Breaker::builder().jitter(Jitter::Bounded(0.2)).build().unwrap();
/// # drop(b);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum Jitter {
    /// The backoff `d` exactly.
    #[default]
    None,
    /// Full jitter: uniform in `[0, d]`, both ends included: the OPEN
    /// duration of backoff level `l` is exactly a
    /// [`Backoff::delay`](crate::backoff::Backoff::delay) of attempt `l`
    /// (with `base_backoff` and `max_backoff`), drawn the same unbiased way.
    Full,
    /// Uniform in `[d − ⌊d × f⌋, d]` for `f` in `[0, 1]`: never shorter than
    /// `(1 − f)` of the backoff (drawn the same unbiased way as
    /// [`Full`](Jitter::Full)).
    Bounded(f64),
}

/// What a permit dropped without a verdict (a cancelled future, a panic, an
/// early return) counts as.
///
/// ```
/// use tailguard::{Breaker, CancelPolicy};
/// let b = Breaker::builder().on_cancel(CancelPolicy::Failure).build().unwrap();
/// # drop(b);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CancelPolicy {
    /// Counted as a cancellation, apart from errors (the default). A
    /// cancelled probe gives its slot back and decides nothing.
    #[default]
    Cancelled,
    /// Counted as a failed call (and a cancelled probe as a failed probe).
    Failure,
}

/// The relative latency rule's settings: a window breaches when more than
/// `1 − q` of its calls were slower than `clamp(k × baseline, floor,
/// ceiling)`, where `baseline` is the consumer's own latency at the
/// quantile `q` ([`BreakerBuilder::quantile`](crate::BreakerBuilder::quantile))
/// learned from its healthy windows. Given to
/// [`BreakerBuilder::relative_latency`](crate::BreakerBuilder::relative_latency),
/// which documents the rule whole; read back from
/// [`Limits::relative`](crate::Limits::relative).
///
/// Each setter has the name of the field it sets; the fields are public to
/// read, and the type is built from [`new`](Self::new) (or `default`) and
/// the setters.
///
/// ```
/// use std::time::Duration;
/// use tailguard::{Breaker, RelativeLatency};
///
/// let rule = RelativeLatency::new()
///     .multiplier(3.0)
///     .floor(Duration::from_millis(2))
///     .ceiling(Duration::from_millis(500));
/// assert_eq!(rule.multiplier, 3.0);
/// let b = Breaker::builder().relative_latency(rule).build()?;
/// assert_eq!(b.snapshot().limits.relative, Some(rule));
/// # Ok::<(), tailguard::ConfigError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct RelativeLatency {
    /// `k`: how many times its baseline a call may take before it is slow
    /// (default 2; accepted: above 1, at most 1000).
    pub multiplier: f64,
    /// The threshold never goes below this (default 1 ms; accepted: zero,
    /// for no floor, up to the ceiling): a consumer at 50 µs is not shed
    /// at 100 µs. The sketch resolves latencies from 1 µs: with no floor, a
    /// baseline below 1 µs counts as 1 µs (a threshold of about `k` µs).
    pub floor: Duration,
    /// The threshold never goes above this (default 1 s; accepted: 1 µs to
    /// 60 s, within the latency sketch's range): whatever the baseline
    /// learned, a call slower than this is slow, and it is the threshold of
    /// a cold start. Without an explicit
    /// [`latency_threshold`](crate::BreakerBuilder::latency_threshold) it is
    /// the absolute threshold too (exact, to the nanosecond); an explicit
    /// one may be lower, not higher.
    pub ceiling: Duration,
    /// The most the baseline rises in an hour of healthy windows, as a
    /// factor (default 1.5; accepted: 1, for never, to 1000). It falls
    /// without such a bound. (Kept 0.8% under the factor in the sketch's
    /// buckets, so that it holds in nanoseconds wherever the baseline is.)
    pub max_rise_per_hour: f64,
    /// Observations averaged into the first baseline, during which the rule
    /// judges by the ceiling (default 5; accepted: 1 to 1000).
    pub warmup: u32,
    /// A baseline to start from, warm (for a restart: the last
    /// [`Snapshot::latency_baseline`](crate::Snapshot::latency_baseline));
    /// default none (a cold start).
    pub initial_baseline: Option<Duration>,
}

impl RelativeLatency {
    /// The defaults: `k = 2`, floor 1 ms, ceiling 1 s, at most ×1.5 an
    /// hour, a warmup of 5 observations, no initial baseline.
    ///
    /// Why these (`examples/adaptive` shows each, on the real emitter):
    /// `k = 2` is twice the consumer's own P99, far above the
    /// window-to-window jitter of a healthy P99 (a 150 ms consumer varying
    /// ±25% never trips) and far below the degradations that hurt a router
    /// (a 2 ms consumer at 40 ms trips in three windows; the absolute 50 ms
    /// rule never sees it). ×1.5 an hour catches a consumer slowing by 3%
    /// a minute within about 30 minutes (`ln 2 / ln(5.9 / 1.5)` hours),
    /// where a fixed 50 ms needs 109, and lets a consumer's healthy P99
    /// drift by half in an hour without a trip. The 1 ms floor keeps
    /// sub-millisecond consumers from being shed for microseconds; the 1 s
    /// ceiling bounds what any learning can accept and judges a cold
    /// start. Five observations (of 1000 calls each at P99) average out
    /// one unlucky pool.
    ///
    /// ```
    /// let r = tailguard::RelativeLatency::new();
    /// assert_eq!((r.multiplier, r.max_rise_per_hour, r.warmup), (2.0, 1.5, 5));
    /// ```
    pub const fn new() -> Self {
        Self {
            multiplier: 2.0,
            floor: Duration::from_millis(1),
            ceiling: Duration::from_secs(1),
            max_rise_per_hour: 1.5,
            warmup: 5,
            initial_baseline: None,
        }
    }

    /// Sets [`multiplier`](Self::multiplier), `k`.
    ///
    /// ```
    /// assert_eq!(tailguard::RelativeLatency::new().multiplier(4.0).multiplier, 4.0);
    /// ```
    #[must_use]
    pub const fn multiplier(mut self, k: f64) -> Self {
        self.multiplier = k;
        self
    }

    /// Sets [`floor`](Self::floor).
    ///
    /// ```
    /// use std::time::Duration;
    /// let r = tailguard::RelativeLatency::new().floor(Duration::ZERO);
    /// assert_eq!(r.floor, Duration::ZERO);
    /// ```
    #[must_use]
    pub const fn floor(mut self, floor: Duration) -> Self {
        self.floor = floor;
        self
    }

    /// Sets [`ceiling`](Self::ceiling).
    ///
    /// ```
    /// use std::time::Duration;
    /// let r = tailguard::RelativeLatency::new().ceiling(Duration::from_millis(300));
    /// assert_eq!(r.ceiling, Duration::from_millis(300));
    /// ```
    #[must_use]
    pub const fn ceiling(mut self, ceiling: Duration) -> Self {
        self.ceiling = ceiling;
        self
    }

    /// Sets [`max_rise_per_hour`](Self::max_rise_per_hour).
    ///
    /// ```
    /// assert_eq!(tailguard::RelativeLatency::new().max_rise_per_hour(1.2).max_rise_per_hour, 1.2);
    /// ```
    #[must_use]
    pub const fn max_rise_per_hour(mut self, factor: f64) -> Self {
        self.max_rise_per_hour = factor;
        self
    }

    /// Sets [`warmup`](Self::warmup).
    ///
    /// ```
    /// assert_eq!(tailguard::RelativeLatency::new().warmup(20).warmup, 20);
    /// ```
    #[must_use]
    pub const fn warmup(mut self, observations: u32) -> Self {
        self.warmup = observations;
        self
    }

    /// Sets [`initial_baseline`](Self::initial_baseline).
    ///
    /// ```
    /// use std::time::Duration;
    /// let r = tailguard::RelativeLatency::new().initial_baseline(Duration::from_millis(3));
    /// assert_eq!(r.initial_baseline, Some(Duration::from_millis(3)));
    /// ```
    #[must_use]
    pub const fn initial_baseline(mut self, baseline: Duration) -> Self {
        self.initial_baseline = Some(baseline);
        self
    }
}

impl Default for RelativeLatency {
    /// [`RelativeLatency::new`].
    fn default() -> Self {
        Self::new()
    }
}

/// A validated configuration, in the units the breaker computes with.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    pub(crate) threshold_ns: u64,
    pub(crate) window_ns: u64,
    /// What the trip rule judges a closed window by.
    pub(crate) rule: Rule,
    /// The error span, in windows.
    pub(crate) error_windows: u32,
    /// The failure-count span, in windows (0 without a count trip).
    pub(crate) failure_windows: u32,
    pub(crate) base_ns: u64,
    pub(crate) max_ns: u64,
    pub(crate) jitter: Jitter,
    pub(crate) probes: u8,
    pub(crate) successes: u8,
    pub(crate) lease_ns: u64,
    pub(crate) cancel: CancelPolicy,
    pub(crate) track_in_flight: bool,
    pub(crate) flap_cycles: u32,
    pub(crate) flap_ns: u64,
    /// The relative latency rule, in its units, and as given (for
    /// `Limits`).
    /// Boxed: most breakers have none, and pay a pointer for it.
    #[allow(clippy::type_complexity)]
    pub(crate) relative: Option<Box<(Relative, RelativeLatency)>>,
    /// The recovery ramp's length (0: none).
    pub(crate) ramp_ns: u64,
}

/// The sizes of what a breaker allocates at build, validated with the
/// configuration (kept apart from it: nothing reads them after the build).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sizes {
    /// Shared counter shards, a power of two.
    pub(crate) shards: usize,
    /// Single-writer shards for owned handles.
    pub(crate) local_handles: usize,
    /// Windows the rolling ring keeps.
    pub(crate) ring_len: usize,
}

impl Config {
    /// The backoff the OPEN duration follows: level `l` is its attempt `l`.
    pub(crate) const fn backoff(&self) -> Backoff {
        Backoff::from_ns(self.base_ns, self.max_ns)
    }

    /// The OPEN duration at backoff `level`, before jitter: `base × 2^level`
    /// capped at `max`, in saturating nanosecond arithmetic (a sub-second
    /// base is never truncated and no level overflows); the backoff's
    /// [`ceiling`](Backoff::ceiling).
    pub(crate) const fn backoff_ns(&self, level: u8) -> u64 {
        self.backoff().ceiling_ns(level as u32)
    }

    /// The OPEN duration at backoff `level`, jittered by the policy, with
    /// `next` the source of uniform `u64`s (called only if the policy draws:
    /// once, rarely more; see [`crate::backoff`]).
    pub(crate) fn open_ns(&self, level: u8, next: impl FnMut() -> u64) -> u64 {
        let backoff = self.backoff();
        let level = u32::from(level);
        match self.jitter {
            Jitter::None => backoff.ceiling_ns(level),
            Jitter::Full => backoff.delay_ns(level, next),
            Jitter::Bounded(f) => {
                let d = backoff.ceiling_ns(level);
                // `f` is in [0, 1] (validated), but `d as f64` may round up
                // past `d` (from 2^53 on): clamp, so that `d − spread` holds.
                let spread = (((d as f64) * f) as u64).min(d);
                d - uniform_inclusive(spread, next)
            }
        }
    }
}
