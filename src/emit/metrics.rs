//! The emitter's own counters and its emit-time histogram, sharded per
//! thread like the breaker's counters: an emit writes its thread's shard
//! (three `fetch_add`s on the happy path: its outcome, its time bucket and
//! the time sum), never a line every thread writes. Read by summing the
//! shards, at [`Emitter::stats`](super::Emitter::stats) and at scrape time.
//!
//! Every figure exported is a counter of its own, each only ever added to,
//! so every one of them is monotonic however reads and emits interleave
//! (none is derived as a difference of two reads, which would not be).

use crate::report::LatencyQuantiles;
use crate::shard::thread_index;
use crate::sketch::{key_index, Histogram, TOP};
use crate::sync::{AtomicU64, Ordering};
use crossbeam_utils::CachePadded;
use std::time::Duration;

/// Defines every counter once: the variant that names it on the emit path
/// ([`Count`]), the field it is read into ([`Read`]), and their number
/// ([`COUNTS`], the length of each shard's array), so that a new counter is
/// one line here (plus where it is counted, and its `EmitterStats` field
/// and Prometheus family, which read it by name: a missing one is a
/// compile error, never an index out of range).
macro_rules! counters {
    ($($(#[$doc:meta])* $variant:ident => $field:ident,)*) => {
        /// What an emit ended in, besides the time it took.
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub(crate) enum Count {
            $($(#[$doc])* $variant,)*
        }

        /// How many counters each shard keeps.
        const COUNTS: usize = [$(Count::$variant),*].len();

        /// Every counter, summed over the shards, with the emit times.
        pub(crate) struct Read {
            pub(crate) times: EmitTimes,
            $(pub(crate) $field: u64,)*
        }

        impl Metrics {
            /// Every counter, summed over the shards.
            pub(crate) fn read(&self) -> Read {
                Read {
                    times: self.times(),
                    $($field: self.sum(Count::$variant),)*
                }
            }
        }
    };
}

counters! {
    /// Emits that delivered their trigger.
    Delivered => delivered,
    /// Triggers queued: the breaker refused the call.
    DivertedOpen => diverted_open,
    /// Triggers queued: the bulkhead was full.
    DivertedBulkhead => diverted_bulkhead,
    /// Triggers queued: the call timed out.
    DivertedTimeout => diverted_timeout,
    /// Triggers queued: the call failed.
    DivertedFailed => diverted_failed,
    /// Triggers handed back: the queue was full.
    HandedBackFull => handed_back_full,
    /// Triggers handed back: the emitter is shut down.
    HandedBackShutDown => handed_back_shut_down,
    /// Queued triggers that gave way to a higher class.
    Displaced => displaced,
    /// Delivered calls that returned after the timeout.
    Overran => overran,
    /// Emits dropped unfinished.
    Cancelled => cancelled,
    /// Queued triggers delivered by replay.
    Replayed => replayed,
    /// Queued triggers replay handed back after their last attempt.
    ReplayHandedBack => replay_handed_back,
    /// Queued triggers handed to a drain's sink.
    Drained => drained,
    /// Triggers dropped as a panicking call unwound.
    PanicDropped => dropped_in_panics,
    /// Triggers queued by hand.
    QueuedByHand => queued_by_hand,
    /// Calls the bulkhead refused (this emitter's share).
    BulkheadRejected => bulkhead_rejected,
}

/// Emit-time buckets: the breaker sketch's keys (eight per octave, 1 µs to
/// 68.7 s), so the same quantile rule and error bound apply.
const TIME_BUCKETS: usize = TOP + 1;

struct Shard {
    counts: [AtomicU64; COUNTS],
    times: [AtomicU64; TIME_BUCKETS],
    /// Nanoseconds, summed (wrapping: 584 years of emit time).
    time_sum: AtomicU64,
}

pub(crate) struct Metrics {
    shards: Box<[CachePadded<Shard>]>,
    mask: usize,
}

impl Metrics {
    /// `shards` must be a power of two.
    pub(crate) fn new(shards: usize) -> Self {
        debug_assert!(shards.is_power_of_two());
        Self {
            shards: (0..shards)
                .map(|_| {
                    CachePadded::new(Shard {
                        counts: core::array::from_fn(|_| AtomicU64::new(0)),
                        times: core::array::from_fn(|_| AtomicU64::new(0)),
                        time_sum: AtomicU64::new(0),
                    })
                })
                .collect(),
            mask: shards - 1,
        }
    }

    #[inline(always)]
    fn mine(&self) -> &Shard {
        &self.shards[thread_index() & self.mask]
    }

    /// One emit that took `ns` nanoseconds, whatever it ended in; counted
    /// delivered too if it was (on the same shard, found once).
    #[inline(always)]
    pub(crate) fn emit_time(&self, ns: u64, delivered: bool) {
        let shard = self.mine();
        if delivered {
            shard.counts[Count::Delivered as usize].fetch_add(1, Ordering::Relaxed);
        }
        shard.times[key_index(ns)].fetch_add(1, Ordering::Relaxed);
        shard.time_sum.fetch_add(ns, Ordering::Relaxed);
    }

    /// Adds `n` to a counter (cold: the emitter's build).
    pub(crate) fn add(&self, what: Count, n: u64) {
        self.mine().counts[what as usize].fetch_add(n, Ordering::Relaxed);
    }

    #[inline]
    pub(crate) fn count(&self, what: Count) {
        self.mine().counts[what as usize].fetch_add(1, Ordering::Relaxed);
    }

    fn sum(&self, what: Count) -> u64 {
        self.shards
            .iter()
            .map(|s| s.counts[what as usize].load(Ordering::Relaxed))
            .fold(0, u64::wrapping_add)
    }

    /// The emit-time histogram, summed over the shards.
    pub(crate) fn times(&self) -> EmitTimes {
        let mut counts = [0u64; TIME_BUCKETS];
        let mut sum = 0u64;
        for s in self.shards.iter() {
            for (c, t) in counts.iter_mut().zip(s.times.iter()) {
                *c = c.wrapping_add(t.load(Ordering::Relaxed));
            }
            sum = sum.wrapping_add(s.time_sum.load(Ordering::Relaxed));
        }
        EmitTimes { counts, sum_ns: sum }
    }

    pub(crate) fn heap_bytes(&self) -> usize {
        self.shards.len() * core::mem::size_of::<CachePadded<Shard>>()
    }
}

/// The emit-time histogram of an emitter: how long the router spent per
/// trigger, delivered or not (feeds `breaker_emit_seconds`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EmitTimes {
    counts: [u64; TIME_BUCKETS],
    sum_ns: u64,
}

impl EmitTimes {
    /// Emits measured.
    ///
    /// ```
    /// # use tailguard::{Breaker, dlq::{DeadLetterQueue, Priority}, emit::Emitter};
    /// let e = Emitter::builder(Breaker::builder().build()?, DeadLetterQueue::with_capacity(8)?).build()?;
    /// let _ = e.emit_blocking(1u32, Priority::Routine, |_, _| Ok::<_, ()>(()));
    /// assert_eq!(e.stats().emit_times.count(), 1);
    /// # Ok::<(), tailguard::ConfigError>(())
    /// ```
    pub fn count(&self) -> u64 {
        self.counts.iter().fold(0, |a, &b| a.wrapping_add(b))
    }

    /// The emit times, summed.
    ///
    /// ```
    /// # use tailguard::{Breaker, dlq::{DeadLetterQueue, Priority}, emit::Emitter};
    /// let e = Emitter::<u8>::builder(Breaker::builder().build()?, DeadLetterQueue::with_capacity(8)?).build()?;
    /// assert_eq!(e.stats().emit_times.sum(), std::time::Duration::ZERO);
    /// # Ok::<(), tailguard::ConfigError>(())
    /// ```
    pub fn sum(&self) -> Duration {
        Duration::from_nanos(self.sum_ns)
    }

    /// P50/P90/P99/P99.9 of every emit so far, within
    /// [`QUANTILE_RELATIVE_ERROR`](crate::QUANTILE_RELATIVE_ERROR) between
    /// 1 µs and 68.7 s (faster emits read as about 1 µs); `None` before the
    /// first emit.
    ///
    /// ```
    /// # use tailguard::{Breaker, dlq::{DeadLetterQueue, Priority}, emit::Emitter};
    /// let e = Emitter::<u8>::builder(Breaker::builder().build()?, DeadLetterQueue::with_capacity(8)?).build()?;
    /// assert!(e.stats().emit_times.quantiles().is_none());
    /// # Ok::<(), tailguard::ConfigError>(())
    /// ```
    pub fn quantiles(&self) -> Option<LatencyQuantiles> {
        let mut h = Histogram::new();
        for (bucket, &n) in self.counts.iter().enumerate() {
            if n > 0 {
                h.add(bucket, n);
            }
        }
        h.quantiles()
    }

    /// Cumulative counts at powers of two: `(upper bound, emits at or
    /// below it)` for 2^10 ns (1.024 µs) to 2^36 ns (68.7 s), in increasing
    /// order; the last bound also counts every slower emit. A bound is
    /// exact within 1/256 of itself (the bucket table's resolution).
    ///
    /// ```
    /// # use tailguard::{Breaker, dlq::{DeadLetterQueue, Priority}, emit::Emitter};
    /// let e = Emitter::<u8>::builder(Breaker::builder().build()?, DeadLetterQueue::with_capacity(8)?).build()?;
    /// let buckets = e.stats().emit_times.cumulative();
    /// assert_eq!(buckets.first().unwrap().0, std::time::Duration::from_nanos(1 << 10));
    /// assert!(buckets.iter().all(|&(_, n)| n == 0));
    /// # Ok::<(), tailguard::ConfigError>(())
    /// ```
    pub fn cumulative(&self) -> Vec<(Duration, u64)> {
        // Bucket 8j holds the values up to 2^(10 + j) ns (bucket 0 also
        // everything faster), so the buckets up to it count those.
        let mut out = Vec::with_capacity(TOP / 8 + 1);
        let mut running = 0u64;
        for (bucket, &n) in self.counts.iter().enumerate() {
            running = running.wrapping_add(n);
            if bucket % 8 == 0 {
                out.push((Duration::from_nanos(1u64 << (10 + bucket / 8)), running));
            }
        }
        out
    }
}
