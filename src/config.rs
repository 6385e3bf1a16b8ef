//! The validated configuration, in the units the breaker computes with
//! (nanoseconds, parts per billion), and the two public policy enums it
//! carries. Plain data and arithmetic: [`BreakerBuilder`](crate::BreakerBuilder)
//! makes a `Config`, the breaker reads it.

use crate::backoff::{uniform_inclusive, Backoff};
use crate::trip::Rule;

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
