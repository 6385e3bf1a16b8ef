//! The emitter's own counters and its emit-time histogram, sharded per
//! thread like the breaker's counters: an emit writes its thread's shard
//! (three `fetch_add`s on the happy path: its outcome, its time bucket and
//! the time sum; a fourth when the time's bucket is not the one the thread
//! used last, see `Metrics::emit_time_in`), never a line every thread
//! writes. Read by summing the
//! shards, at [`Emitter::stats`](super::Emitter::stats) and at scrape time.
//!
//! Every figure exported is a counter of its own, each only ever added to,
//! so every one of them is monotonic however reads and emits interleave
//! (none is derived as a difference of two reads, which would not be).

use crate::report::LatencyQuantiles;
use crate::shard::thread_index;
use crate::sketch::{key_index, Histogram, TOP};
use crate::sync::{AtomicBool, AtomicU64, AtomicUsize, OnceBox, Ordering};
use crossbeam_utils::CachePadded;
use std::time::Duration;

/// The emitter's counters, each defined once, in [`counters!`]'s table
/// below: from each line come the variant the emit path counts it by
/// ([`Count`]), the field of [`EmitterStats`] it is read into (with its
/// doc), their number ([`COUNTS`], the length of each shard's array), and
/// the Prometheus series it is exported as, if any ([`EXPORTED`]; the
/// module docs of `crate::prometheus` list every one, which a test checks).
/// A new counter is one line of the table, with its doc, plus the place
/// that counts it; nothing else can forget it. The fields the table does
/// not count (the queue's length, the emit times, ...) follow the first
/// group of counters; a `then` group's counters come after them, so that
/// the struct, its `Debug` and the exposition keep their order.
macro_rules! counters {
    (
        $(#[$sattr:meta])*
        pub struct $stats:ident {
            counters {
                $(
                    $(#[doc = $doc:literal])*
                    $variant:ident => $field:ident
                        $(: $family:literal $({ $lname:ident = $lvalue:literal })? $(help $help:literal)?)?,
                )*
            }
            $(
                $(#[$xattr:meta])*
                pub $xfield:ident: $xty:ty,
            )*
            // Counters whose fields come after the others (their order in
            // the struct, its `Debug`, and the exposition).
            then {
                $(
                    $(#[doc = $doc2:literal])*
                    $variant2:ident => $field2:ident
                        $(: $family2:literal $({ $lname2:ident = $lvalue2:literal })? $(help $help2:literal)?)?,
                )*
            }
        }
    ) => {
        /// What an emit ended in, besides the time it took: one counter each.
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub(crate) enum Count {
            $($(#[doc = $doc])* $variant,)*
            $($(#[doc = $doc2])* $variant2,)*
        }

        /// How many counters each shard keeps.
        const COUNTS: usize = [$(Count::$variant,)* $(Count::$variant2,)*].len();

        $(#[$sattr])*
        pub struct $stats {
            $($(#[doc = $doc])* pub $field: u64,)*
            $($(#[$xattr])* pub $xfield: $xty,)*
            $($(#[doc = $doc2])* pub $field2: u64,)*
        }

        impl $stats {
            /// Every counter summed over `metrics`' shards, then the rest
            /// (read by `rest`, after the counters).
            pub(crate) fn read(sum: impl Fn(Count) -> u64, rest: impl FnOnce() -> ($($xty,)*)) -> Self {
                $(let $field = sum(Count::$variant);)*
                $(let $field2 = sum(Count::$variant2);)*
                let ($($xfield,)*) = rest();
                Self {
                    $($field,)*
                    $($xfield,)*
                    $($field2,)*
                }
            }
        }

        /// Every exported counter, in table order: the series of a family
        /// with a label stand together, the first with the family's help.
        #[cfg(feature = "prometheus")]
        pub(crate) const EXPORTED: &[Exported] = &[
            $($(Exported {
                family: $family,
                label: counters!(@label $($lname $lvalue)?),
                help: counters!(@help $($help)?),
                value: {
                    fn value(s: &$stats) -> u64 {
                        s.$field
                    }
                    value
                },
            },)?)*
            $($(Exported {
                family: $family2,
                label: counters!(@label $($lname2 $lvalue2)?),
                help: counters!(@help $($help2)?),
                value: {
                    fn value(s: &$stats) -> u64 {
                        s.$field2
                    }
                    value
                },
            },)?)*
        ];
    };
    (@label) => { None };
    (@label $lname:ident $lvalue:literal) => { Some((stringify!($lname), $lvalue)) };
    (@help) => { "" };
    (@help $help:literal) => { $help };
}

/// One exported counter: its Prometheus family (without `_total`), its
/// label (name and value) within the family, the family's help (on the
/// family's first series; empty on the others), and how to read it.
#[cfg(feature = "prometheus")]
pub(crate) struct Exported {
    pub(crate) family: &'static str,
    pub(crate) label: Option<(&'static str, &'static str)>,
    pub(crate) help: &'static str,
    pub(crate) value: fn(&EmitterStats) -> u64,
}

counters! {
    /// Counters of an [`Emitter`](super::Emitter) (see the [module
    /// documentation](super) for the identities they satisfy once the
    /// emitter is quiet).
    ///
    /// ```
    /// use tailguard::{Breaker, dlq::{DeadLetterQueue, Priority}, emit::Emitter};
    /// let e = Emitter::builder(Breaker::builder().build()?, DeadLetterQueue::with_capacity(8)?).build()?;
    /// let _ = e.emit_blocking(1u8, Priority::Routine, |_, _| Ok::<_, ()>(()));
    /// let _ = e.emit_blocking(2u8, Priority::Routine, |_, _| Err::<(), _>(()));
    /// let s = e.stats();
    /// assert_eq!((s.delivered, s.diverted_failed, s.queued), (1, 1, 1));
    /// assert_eq!(s.emitted(), 2);
    /// assert_eq!(s.into_queue(), s.out_of_queue());
    /// # Ok::<(), tailguard::ConfigError>(())
    /// ```
    #[derive(Debug, Clone, PartialEq, Eq)]
    #[non_exhaustive]
    pub struct EmitterStats {
        counters {
            /// Emits that delivered their trigger (late ones included).
            Delivered => delivered: "breaker_emits_delivered"
                help "Emits that delivered their trigger (late ones included).",
            /// Of those, calls that returned successfully but after the timeout
            /// (counted by the breaker as failed and slow).
            Overran => overran: "breaker_emits_overran"
                help "Delivered emits whose call returned after the timeout.",
            /// Triggers queued because the breaker rejected the call.
            DivertedOpen => diverted_open: "breaker_emits_diverted" { reason = "open" }
                help "Emits whose trigger went to the dead-letter queue, by reason.",
            /// Triggers queued because the bulkhead was full.
            DivertedBulkhead => diverted_bulkhead: "breaker_emits_diverted" { reason = "bulkhead_full" },
            /// Triggers queued because the call timed out.
            DivertedTimeout => diverted_timeout: "breaker_emits_diverted" { reason = "timed_out" },
            /// Triggers queued because the call failed.
            DivertedFailed => diverted_failed: "breaker_emits_diverted" { reason = "failed" },
            /// Triggers queued because an async call was pending and its timer had
            /// none to give (no runtime: see [`crate::timer`]).
            DivertedNoTimer => diverted_no_timer: "breaker_emits_diverted" { reason = "no_timer" },
            /// Triggers handed back because the queue was full.
            HandedBackFull => handed_back_full: "breaker_emits_handed_back" { reason = "queue_full" }
                help "Emits whose trigger was handed back to the router, by reason.",
            /// Triggers handed back because the emitter is shut down.
            HandedBackShutDown => handed_back_shut_down: "breaker_emits_handed_back" { reason = "shut_down" },
            /// Queued triggers that gave way to a higher class (handed back).
            Displaced => displaced,
            /// Emits dropped before they finished, their trigger with them: async
            /// emits whose future was dropped, and calls that panicked when the
            /// queue could not take their trigger.
            Cancelled => cancelled: "breaker_emits_cancelled"
                help "Emits dropped before they finished: async emits dropped, panicking calls whose trigger the queue could not take.",
            /// Triggers dropped as a panicking call unwound, because nothing could
            /// take them: the call's own when the queue was full or shut down (also
            /// in `cancelled`), or the lower-class one its trigger displaced from a
            /// full queue (also in `displaced`). Zero unless a call panics: the
            /// only triggers the emitter ever drops.
            PanicDropped => dropped_in_panics: "breaker_emit_panic_drops"
                help "Triggers dropped as a panicking call unwound (its own, or one it displaced): the only triggers an emitter drops.",
            /// Queued triggers delivered by replay.
            Replayed => replayed: "breaker_replayed"
                help "Queued triggers delivered by replay.",
            /// Queued triggers replay handed back after their last attempt.
            ReplayHandedBack => replay_handed_back: "breaker_replay_handed_back"
                help "Queued triggers replay handed back after their last attempt.",
            /// Queued triggers handed to a [`shutdown`](super::Emitter::shutdown) or
            /// [`drain`](super::Emitter::drain) sink.
            Drained => drained,
            /// Triggers queued by hand ([`Emitter::enqueue`](super::Emitter::enqueue)), not by an emit.
            QueuedByHand => queued_by_hand,
        }
        /// Triggers in the queue now.
        pub queued: usize,
        /// Whether replay keeps a trigger at the head (taken out, not yet
        /// delivered).
        pub pending: bool,
        /// How long each emit took, delivered or not: the router's own cost.
        pub emit_times: EmitTimes,
        /// Calls in flight in the bulkhead (0 without one): every call it
        /// holds, this emitter's and those of any other sharing it.
        pub bulkhead_in_flight: usize,
        then {
            /// Calls of this emitter (emits and replays) the bulkhead refused: its
            /// own share, so that a sum over emitters sharing one bulkhead counts
            /// each refusal once.
            BulkheadRejected => bulkhead_rejections: "breaker_bulkhead_rejected"
                help "Calls of this consumer's emitter its bulkhead refused (its own share of a shared bulkhead).",
        }
    }
}

std::thread_local! {
    /// The time bucket this thread's last emit went to.
    static LAST_KEY: core::cell::Cell<u8> = const { core::cell::Cell::new(0) };
}

/// An emit time whose bucket was not the guessed one: counted where it
/// belongs, and that bucket is the thread's next guess.
#[cold]
#[inline(never)]
fn missed(shard: &Shard, key: usize) {
    LAST_KEY.with(|k| k.set(key as u8));
    shard.times[key].fetch_add(1, Ordering::Relaxed);
}

/// As [`missed`], on a per-core emitter's shard (single writer).
#[cold]
#[inline(never)]
fn local_missed(shard: &Shard, key: usize) {
    LAST_KEY.with(|k| k.set(key as u8));
    bump(&shard.times[key], 1);
}

/// Emit-time buckets: the breaker sketch's keys (eight per octave, 1 µs to
/// 68.7 s), so the same quantile rule and error bound apply.
const TIME_BUCKETS: usize = TOP + 1;

/// One shard of a shared emitter's counters (the calling thread's is
/// [`Metrics::mine`]).
pub(crate) struct Shard {
    counts: [AtomicU64; COUNTS],
    times: [AtomicU64; TIME_BUCKETS],
    /// Nanoseconds, summed (wrapping: 584 years of emit time).
    time_sum: AtomicU64,
}

impl Shard {
    fn new() -> Self {
        Self {
            counts: core::array::from_fn(|_| AtomicU64::new(0)),
            times: core::array::from_fn(|_| AtomicU64::new(0)),
            time_sum: AtomicU64::new(0),
        }
    }
}

/// A shared emitter's counters, sharded as its breaker's are: one slot per
/// shard the breaker may grow, each shard (about 1.8 KB) built by the first
/// emit of a thread that maps to it, so an emitter called from two threads
/// holds two whatever the machine's cores.
pub(crate) struct Metrics {
    shards: Box<[OnceBox<CachePadded<Shard>>]>,
    mask: usize,
}

impl Metrics {
    /// `shards` must be a power of two.
    pub(crate) fn new(shards: usize) -> Self {
        debug_assert!(shards.is_power_of_two());
        Self {
            shards: (0..shards).map(|_| OnceBox::new()).collect(),
            mask: shards - 1,
        }
    }

    /// The calling thread's shard if it is built already (never builds it:
    /// see `Host::times`).
    #[inline(always)]
    pub(crate) fn mine_built(&self) -> Option<&Shard> {
        self.shards[thread_index() & self.mask].get().map(|s| &**s)
    }

    /// The calling thread's shard (built by its first use).
    #[inline(always)]
    fn mine(&self) -> &Shard {
        self.shards[thread_index() & self.mask].get_or_build(|| CachePadded::new(Shard::new()))
    }

    /// The shards built so far.
    fn built(&self) -> impl Iterator<Item = &Shard> {
        self.shards.iter().filter_map(|slot| slot.get().map(|s| &**s))
    }

    /// One emit that took `ns` nanoseconds, whatever it ended in; counted
    /// delivered too if it was (on the same shard, found once).
    #[inline(always)]
    pub(crate) fn emit_time(&self, ns: u64, delivered: bool) {
        Self::emit_time_in(self.mine(), ns, delivered);
    }

    /// As [`emit_time`](Self::emit_time), counted in `shard`, the calling
    /// thread's [`mine`](Self::mine) found before the emit's end reading of
    /// the clock (found after it, it costs the precise emit about 10 ns;
    /// see `benches/emit_overhead.rs`).
    #[inline(always)]
    pub(crate) fn emit_time_in(shard: &Shard, ns: u64, delivered: bool) {
        if delivered {
            shard.counts[Count::Delivered as usize].fetch_add(1, Ordering::Relaxed);
        }
        // The time bucket as the breaker's (`Shard::record_guessed`): one
        // added first at this thread's last bucket if it is the one, and at
        // the real one only if not, so no store's address waits for `ns`.
        let key = key_index(ns);
        let guess = crate::sketch::guessed(&LAST_KEY, TIME_BUCKETS);
        let hit = guess == key;
        shard.times[guess].fetch_add(u64::from(hit), Ordering::Relaxed);
        if !hit {
            missed(shard, key);
        }
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

    pub(crate) fn sum(&self, what: Count) -> u64 {
        self.built()
            .map(|s| s.counts[what as usize].load(Ordering::Relaxed))
            .fold(0, u64::wrapping_add)
    }

    /// The emit-time histogram, summed over the shards.
    pub(crate) fn times(&self) -> EmitTimes {
        times_of(self.built())
    }

    pub(crate) fn heap_bytes(&self) -> usize {
        self.shards.len() * core::mem::size_of::<OnceBox<CachePadded<Shard>>>()
            + self.built().count() * core::mem::size_of::<CachePadded<Shard>>()
    }
}

/// The emit-time histogram of `shards`, summed.
fn times_of<'a>(shards: impl Iterator<Item = &'a Shard>) -> EmitTimes {
    let mut counts = [0u64; TIME_BUCKETS];
    let mut sum = 0u64;
    for s in shards {
        for (c, t) in counts.iter_mut().zip(s.times.iter()) {
            *c = c.wrapping_add(t.load(Ordering::Relaxed));
        }
        sum = sum.wrapping_add(s.time_sum.load(Ordering::Relaxed));
    }
    EmitTimes { counts, sum_ns: sum }
}

/// The counters of a [`LocalEmitter`](super::LocalEmitter): one block,
/// written by its core only, each update a plain `Relaxed` load and store
/// (no read-modify-write: nothing else writes the line), read by any
/// thread with `Relaxed` loads (a scrape). Beside the counters, the two
/// gauges a reading needs from the core: the calls in its bulkhead, and
/// whether replay keeps a trigger at the head.
pub(crate) struct LocalMetrics {
    shard: Shard,
    /// Calls in flight in the core's bulkhead.
    pub(crate) in_flight: AtomicUsize,
    /// Whether replay keeps a trigger at the head.
    pub(crate) pending: AtomicBool,
}

/// Adds `n` to a counter only this core writes: a load and a store.
#[inline(always)]
fn bump(c: &AtomicU64, n: u64) {
    c.store(c.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
}

impl LocalMetrics {
    pub(crate) fn new() -> Self {
        Self {
            shard: Shard::new(),
            in_flight: AtomicUsize::new(0),
            pending: AtomicBool::new(false),
        }
    }

    /// As [`Metrics::emit_time`], on the owning core only.
    #[inline(always)]
    pub(crate) fn emit_time(&self, ns: u64, delivered: bool) {
        let shard = &self.shard;
        if delivered {
            bump(&shard.counts[Count::Delivered as usize], 1);
        }
        // Guessed as the shared emitter's (`Metrics::emit_time_in`): one
        // added first at this thread's last bucket if it is the one, and at
        // the real one only if not, so no store's address waits for `ns`.
        let key = key_index(ns);
        let guess = crate::sketch::guessed(&LAST_KEY, TIME_BUCKETS);
        let hit = guess == key;
        bump(&shard.times[guess], u64::from(hit));
        if !hit {
            local_missed(shard, key);
        }
        bump(&shard.time_sum, ns);
    }

    /// Adds `n` to a counter, on the owning core only.
    #[inline]
    pub(crate) fn add(&self, what: Count, n: u64) {
        bump(&self.shard.counts[what as usize], n);
    }

    /// Adds one to a counter, on the owning core only.
    #[inline]
    pub(crate) fn count(&self, what: Count) {
        self.add(what, 1);
    }

    /// A counter, from any thread.
    pub(crate) fn sum(&self, what: Count) -> u64 {
        self.shard.counts[what as usize].load(Ordering::Relaxed)
    }

    /// The emit-time histogram, from any thread.
    pub(crate) fn times(&self) -> EmitTimes {
        times_of(core::iter::once(&self.shard))
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
