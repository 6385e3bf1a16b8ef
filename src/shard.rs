//! Per-shard call counters and latency histograms.
//!
//! # Shared shards
//! Each thread records into the shard picked by a per-thread index masked by
//! `len - 1` (a power of two), each shard `CachePadded` so that two threads
//! never write one cache line. A successful call is ONE `fetch_add`: on the
//! latency bucket of its key. Calls, slow calls and the latency quantiles all
//! come from the buckets at window close, and the slow count is exact (see
//! `sketch::bucket_of`); a failed call adds one more `fetch_add` on `errors`.
//! The blocking emit records with `Shard::record_guessed`: the add goes
//! first to the word the thread's last record went to (adding nothing if
//! that is not the call's), so that no store's address waits for the clock
//! reading just taken, and a second `fetch_add` goes to the right word only
//! when the guess missed.
//!
//! A shared shard is built by the first call of a thread that maps to it
//! (each slot a set-once pointer, `sync::OnceBox`): the shard count a
//! breaker is configured with (the machine's cores by default) bounds its
//! shards, and the threads that call it decide how many it holds and how
//! many window close merges.
//!
//! # Buckets
//! The latency buckets are the sketch's (see `sketch.rs`): a record adds one
//! to the bucket of its latency (`sketch::bucket_of`), which counts the call and,
//! exactly, whether it was slow.
//!
//! Buckets are 16-bit lanes, four to an `AtomicU64` (a record adds
//! `1 << (16 × lane)`), so that a shard (buckets, carries, counters) fits in
//! 640 bytes and window close reads it in few loads: a record
//! that sees its lane at 2^15 moves the lane's count (one CAS) into
//! one of the shard's [`CARRIES`] wide carry counters, tagged with the bucket,
//! at a cost of one more atomic per 32,768 records. Only if more than
//! `CARRIES` buckets of one shard overflow within one window do the excess
//! counts go to the shard's overflow table, a wide counter per bucket,
//! allocated (1.7 KB) the first time this happens to the shard and kept:
//! every count stays in its bucket, so calls, slow calls, the quantiles
//! and the cumulative histogram stay exact.
//!
//! # Local shards
//! An owned per-core handle has a shard with a single writer: plain loads and
//! stores, no read-modify-write. Its counters are monotonic; window close
//! keeps the previous readings and takes differences.
//!
//! # Stale verdicts
//! A verdict from a permit of an earlier generation (admitted before a
//! transition) is not a call of the current windows: it is counted apart,
//! in `stale`, and never judged.
//!
//! # In-flight slots
//! With in-flight tracking on, each shared shard keeps its in-flight slots
//! ([`InFlight`]); the protocol is `crate::flight`'s.

use crate::flight::InFlight;
use crate::sketch::{is_slow_bucket, key_index, sketch_key, BUCKETS, STRADDLE};
use crate::sync::{AtomicU64, OnceBox, Ordering};
use crossbeam_utils::CachePadded;

/// Buckets are 16-bit lanes, four to an `AtomicU64`: window close reads a
/// shard's histogram in 53 loads instead of 210.
const LANES: usize = 4;
const WORDS: usize = BUCKETS.div_ceil(LANES);
const _: () = assert!(WORDS < 64, "the touched mask has one bit per word, and one for carries");
const LANE_MASK: u64 = 0xffff;
const SPILL_AT: u64 = 1 << 15;
std::thread_local! {
    /// The bucket word this thread's last record went to.
    static LAST_WORD: core::cell::Cell<u8> = const { core::cell::Cell::new(0) };
    /// The bucket this thread's last guessed record to a per-core shard
    /// went to ([`LocalShard::record_guessed`]).
    static LAST_BUCKET: core::cell::Cell<u8> = const { core::cell::Cell::new(0) };
}
const _: () = assert!(BUCKETS <= 256, "a bucket index fits the thread's u8 guess");
/// Most shared counter shards a breaker may be configured with.
pub(crate) const MAX_SHARDS: usize = 1024;

/// Carry counters per shard.
/// Sixteen: with the four rejection counters, the shard fills 640 bytes
/// (five 128-byte pairs of lines) exactly.
pub(crate) const CARRIES: usize = 16;
const TAG_SHIFT: u32 = 56;
const COUNT_MASK: u64 = (1 << TAG_SHIFT) - 1;

/// The counts of one window (or a part of one).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Counts {
    pub(crate) calls: u64,
    pub(crate) errors: u64,
    pub(crate) slow: u64,
    pub(crate) cancelled: u64,
    pub(crate) stale: u64,
    /// Of `calls`, the slow ones in the threshold's own bucket (the
    /// straddle, [`STRADDLE`]): what the cumulative histogram subtracts
    /// from that bucket to count the calls at or below the threshold.
    pub(crate) straddle: u64,
}

/// A shard written by any thread. `repr(C)`: the counters window close
/// always reads share the first cache line; the buckets follow, and the
/// carries, read only when [`CARRIED`] is marked, come last.
#[derive(Debug)]
#[repr(C)]
pub(crate) struct Shard {
    /// Bit `w` set: bucket word `w` may be non-zero. Set by the record that
    /// finds the word empty (once per word per window, not per call), so
    /// window close visits only the words in use; bit [`CARRIED`]: a carry
    /// may be in use.
    touched: AtomicU64,
    errors: AtomicU64,
    cancelled: AtomicU64,
    /// Verdicts of permits from an earlier generation.
    stale: AtomicU64,
    /// Rejections by reason (open, probes busy, forced, ramping): monotonic, read
    /// by summing the shards (never drained), so that a rejection counts on
    /// its thread's shard, not on a line every thread writes.
    rejected: [AtomicU64; 4],
    /// A wide counter per bucket, for counts no carry could take (set up
    /// the first time, read at window close when [`CARRIED`] is marked).
    overflow: std::sync::OnceLock<Box<[AtomicU64; BUCKETS]>>,
    in_flight: Option<Box<InFlight>>,
    buckets: [AtomicU64; WORDS],
    /// `(bucket + 1) << 56 | count`, or 0 when free.
    carries: [AtomicU64; CARRIES],
}

/// The `touched` bit that marks carries in use.
const CARRIED: u32 = 63;

impl Shard {
    fn new(track_in_flight: bool) -> Self {
        Self {
            buckets: core::array::from_fn(|_| AtomicU64::new(0)),
            touched: AtomicU64::new(0),
            carries: core::array::from_fn(|_| AtomicU64::new(0)),
            errors: AtomicU64::new(0),
            cancelled: AtomicU64::new(0),
            stale: AtomicU64::new(0),
            rejected: core::array::from_fn(|_| AtomicU64::new(0)),
            overflow: std::sync::OnceLock::new(),
            in_flight: track_in_flight.then(|| Box::new(InFlight::new())),
        }
    }

    /// Records one call in `bucket` (see [`bucket_of`]).
    #[inline(always)]
    pub(crate) fn record(&self, bucket: usize, error: bool) {
        let shift = 16 * (bucket % LANES) as u32;
        let prev = self.buckets[bucket / LANES].fetch_add(1 << shift, Ordering::Relaxed);
        self.recorded(bucket, shift, prev, error);
    }

    /// As [`record`](Self::record), for a latency read from the clock just
    /// before: the add goes first to the bucket word this thread's last
    /// record went to (`hit as u64` there, so nothing when it is not the
    /// one), and to the real word only if that guess missed. A store whose
    /// address depends on a TSC reading holds the next reading back (about
    /// 10 ns a call on this project's machine, `benches/emit_overhead.rs`);
    /// the guessed word's address does not depend on it, only the value
    /// added does. The counts are those of `record`: one added to
    /// `bucket`'s lane before this returns.
    #[inline(always)]
    pub(crate) fn record_guessed(&self, bucket: usize, error: bool) {
        let shift = 16 * (bucket % LANES) as u32;
        let word = bucket / LANES;
        let guess = crate::sketch::guessed(&LAST_WORD, WORDS);
        let hit = guess == word;
        let prev = self.buckets[guess].fetch_add(u64::from(hit) << shift, Ordering::Relaxed);
        let prev = if hit { prev } else { self.record_missed(word, shift) };
        self.recorded(bucket, shift, prev, error);
    }

    /// What follows the add of a record to `bucket`'s lane (at `shift` in
    /// its word), which found `prev` there.
    #[inline(always)]
    fn recorded(&self, bucket: usize, shift: u32, prev: u64, error: bool) {
        if prev == 0 {
            self.touched.fetch_or(1 << (bucket / LANES), Ordering::Release);
        }
        // A lane never carries into its neighbour: it is emptied at 2^15,
        // long before 2^16, unless 32,768 records race one spill.
        if (prev >> shift) & LANE_MASK >= SPILL_AT {
            self.spill(bucket);
        }
        if error {
            // Release: window close takes `errors` before the buckets, so
            // an error it sees has its call counted in that window or before.
            self.errors.fetch_add(1, Ordering::Release);
        }
    }

    /// The record whose bucket word was not the guessed one: adds where it
    /// belongs and makes it the thread's next guess.
    #[cold]
    #[inline(never)]
    fn record_missed(&self, word: usize, shift: u32) -> u64 {
        LAST_WORD.with(|w| w.set(word as u8));
        self.buckets[word].fetch_add(1 << shift, Ordering::Relaxed)
    }

    #[cold]
    #[inline(never)]
    fn spill(&self, bucket: usize) {
        let word = &self.buckets[bucket / LANES];
        let shift = 16 * (bucket % LANES) as u32;
        let mut cur = word.load(Ordering::Acquire);
        let n = loop {
            let n = (cur >> shift) & LANE_MASK;
            if n < SPILL_AT {
                return; // another record spilled it first
            }
            match word.compare_exchange_weak(cur, cur - (n << shift), Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => break n,
                Err(actual) => cur = actual,
            }
        };
        let tag = (bucket as u64 + 1) << TAG_SHIFT;
        for carry in &self.carries {
            let mut cur = carry.load(Ordering::Acquire);
            loop {
                let next = if cur == 0 {
                    tag | n
                } else if cur & !COUNT_MASK == tag {
                    cur + n
                } else {
                    break; // another bucket's carry
                };
                // CAS, not fetch_add: window close may free the slot meanwhile.
                match carry.compare_exchange_weak(cur, next, Ordering::AcqRel, Ordering::Acquire) {
                    Ok(_) => {
                        self.touched.fetch_or(1 << CARRIED, Ordering::Release);
                        return;
                    }
                    Err(actual) => cur = actual,
                }
            }
        }
        // Every carry holds another bucket's count: the overflow table,
        // marked as the carries are (after the count, so that a close that
        // takes the mark finds it).
        let table = self
            .overflow
            .get_or_init(|| Box::new(core::array::from_fn(|_| AtomicU64::new(0))));
        table[bucket].fetch_add(n, Ordering::Relaxed);
        self.touched.fetch_or(1 << CARRIED, Ordering::Release);
    }

    pub(crate) fn cancel(&self) {
        self.cancelled.fetch_add(1, Ordering::Relaxed);
    }

    #[cold]
    pub(crate) fn stale(&self) {
        self.stale.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts the failure of a call a window close already counted (claimed
    /// in flight): an error whose call is in an earlier window.
    #[cold]
    pub(crate) fn error_of_counted(&self) {
        self.errors.fetch_add(1, Ordering::Release);
    }

    /// Counts one rejection.
    #[inline]
    pub(crate) fn rejected(&self, reason: crate::report::RejectReason) {
        self.rejected[reject_index(reason)].fetch_add(1, Ordering::Relaxed);
    }

    /// The in-flight slots, if tracking is on.
    #[inline]
    pub(crate) fn in_flight(&self) -> Option<&InFlight> {
        self.in_flight.as_deref()
    }
}

/// A shard with a single writer (an owned per-core handle).
#[derive(Debug)]
pub(crate) struct LocalShard {
    buckets: [AtomicU64; BUCKETS],
    errors: AtomicU64,
    cancelled: AtomicU64,
    stale: AtomicU64,
    /// Rejections by reason (as [`Shard::rejected`]'s), never drained.
    rejected: [AtomicU64; 4],
    /// Readings at the last drain (buckets, then errors, cancelled and
    /// stale); only window close touches these.
    seen: Box<[AtomicU64]>,
}

/// The index of `reason` in the shards' `rejected` counters.
#[inline(always)]
fn reject_index(reason: crate::report::RejectReason) -> usize {
    match reason {
        crate::report::RejectReason::Open => 0,
        crate::report::RejectReason::ProbesBusy => 1,
        crate::report::RejectReason::ForcedOpen => 2,
        crate::report::RejectReason::Ramping => 3,
    }
}

#[inline(always)]
fn bump(cell: &AtomicU64) {
    // Single writer: a load and a store cannot lose an update.
    cell.store(cell.load(Ordering::Relaxed).wrapping_add(1), Ordering::Release);
}

/// Takes the difference from the last reading and remembers the new one.
fn delta(cell: &AtomicU64, seen: &AtomicU64) -> u64 {
    let now = cell.load(Ordering::Acquire);
    now.wrapping_sub(seen.swap(now, Ordering::Relaxed))
}

impl LocalShard {
    fn new() -> Self {
        Self {
            buckets: core::array::from_fn(|_| AtomicU64::new(0)),
            errors: AtomicU64::new(0),
            cancelled: AtomicU64::new(0),
            stale: AtomicU64::new(0),
            rejected: core::array::from_fn(|_| AtomicU64::new(0)),
            seen: (0..BUCKETS + 3).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// Records one call. Only the shard's owner may call this.
    #[inline(always)]
    pub(crate) fn record(&self, bucket: usize, error: bool) {
        if error {
            bump(&self.errors);
        }
        bump(&self.buckets[bucket]);
    }

    /// As [`record`](Self::record), for a call whose latency was read off
    /// the TSC just before (the per-core emitter's): one is added first at
    /// the bucket this thread's last guessed record went to (a store whose
    /// address waits for nothing), as many as that bucket gained (one or
    /// none), and at `bucket` only if the guess missed. As for the shared
    /// shard's [`Shard::record_guessed`], a store whose address depends on
    /// a TSC reading holds the next reading back. The counts are those of
    /// `record`. Only the shard's owner may call this.
    #[inline(always)]
    pub(crate) fn record_guessed(&self, bucket: usize, error: bool) {
        if error {
            bump(&self.errors);
        }
        let guess = crate::sketch::guessed(&LAST_BUCKET, BUCKETS);
        let hit = guess == bucket;
        let cell = &self.buckets[guess];
        cell.store(
            cell.load(Ordering::Relaxed).wrapping_add(u64::from(hit)),
            Ordering::Release,
        );
        if !hit {
            self.record_local_missed(bucket);
        }
    }

    /// The guessed record whose bucket was not the guess: counted where it
    /// belongs, and that bucket is the thread's next guess.
    #[cold]
    #[inline(never)]
    fn record_local_missed(&self, bucket: usize) {
        LAST_BUCKET.with(|b| b.set(bucket as u8));
        bump(&self.buckets[bucket]);
    }

    pub(crate) fn cancel(&self) {
        bump(&self.cancelled);
    }

    #[cold]
    pub(crate) fn stale(&self) {
        bump(&self.stale);
    }

    /// As the shared shard's `error_of_counted`.
    #[cold]
    pub(crate) fn error_of_counted(&self) {
        bump(&self.errors);
    }

    /// Counts one rejection. Only the shard's owner may call this.
    #[inline]
    pub(crate) fn rejected(&self, reason: crate::report::RejectReason) {
        bump(&self.rejected[reject_index(reason)]);
    }
}

/// All of a breaker's shards.
///
/// The shared shards are grown on demand: a slot holds its shard only once
/// a thread whose index maps to it records, rejects or enters a call (its
/// first call builds the shard, off the hot path; every later one finds it
/// with one load). A breaker configured for 64 shards but called from two
/// threads holds two, and window close merges two: memory and close cost
/// follow the threads that use the breaker, not the machine's cores. A
/// shard, once built, is kept until the breaker is dropped.
#[derive(Debug)]
pub(crate) struct Shards {
    shared: Box<[OnceBox<CachePadded<Shard>>]>,
    mask: usize,
    /// Whether each shard keeps in-flight slots (read when building one).
    track_in_flight: bool,
    pub(crate) local: Box<[CachePadded<LocalShard>]>,
    /// The bucket of the latency threshold.
    pub(crate) threshold_index: usize,
}

impl Shards {
    pub(crate) fn new(shared: usize, local: usize, track_in_flight: bool, threshold_ns: u64) -> Self {
        debug_assert!(shared.is_power_of_two());
        Self {
            shared: (0..shared).map(|_| OnceBox::new()).collect(),
            mask: shared - 1,
            track_in_flight,
            local: (0..local).map(|_| CachePadded::new(LocalShard::new())).collect(),
            threshold_index: key_index(threshold_ns),
        }
    }

    /// The shard of the calling thread, built by its first call.
    #[inline(always)]
    pub(crate) fn mine(&self) -> &Shard {
        self.mine_indexed().1
    }

    /// The calling thread's shard if it is built already (never builds it).
    #[inline(always)]
    pub(crate) fn mine_built(&self) -> Option<&Shard> {
        self.shared[thread_index() & self.mask].get().map(|s| &**s)
    }

    /// The index of the calling thread's shard, and the shard (built by
    /// its first call).
    #[inline(always)]
    pub(crate) fn mine_indexed(&self) -> (usize, &Shard) {
        let index = thread_index() & self.mask;
        let shard = self.shared[index].get_or_build(|| CachePadded::new(Shard::new(self.track_in_flight)));
        (index, shard)
    }

    /// The shard at `index`, if one was built there.
    #[inline]
    pub(crate) fn shard(&self, index: usize) -> Option<&Shard> {
        self.shared.get(index)?.get().map(|s| &**s)
    }

    /// The shared shards built so far, with their indices.
    pub(crate) fn built(&self) -> impl Iterator<Item = (usize, &Shard)> {
        self.shared
            .iter()
            .enumerate()
            .filter_map(|(i, slot)| slot.get().map(|s| (i, &**s)))
    }

    /// How many shared shards the breaker may grow (a power of two).
    pub(crate) fn capacity(&self) -> usize {
        self.shared.len()
    }

    /// Starts loading the slots a drain reads first (the pointers to the
    /// shards built so far).
    #[cfg(not(tailguard_loom))]
    pub(crate) fn prefetch(&self) {
        crate::sync::prefetch(
            self.shared.as_ptr().cast(),
            core::mem::size_of_val::<[OnceBox<CachePadded<Shard>>]>(&self.shared),
        );
    }

    /// Once the slots are in: starts loading each built shard's counters,
    /// marks and bucket words (its carries are read only when marked, and
    /// rarely). Reads the slots, not the shards.
    #[cfg(not(tailguard_loom))]
    pub(crate) fn prefetch_marked(&self) {
        for (_, s) in self.built() {
            let first = core::ptr::from_ref(s).cast::<u8>();
            let carries = core::ptr::from_ref(&s.carries).cast::<u8>();
            crate::sync::prefetch(first, carries as usize - first as usize);
        }
    }

    /// Takes everything recorded since the last drain; `sketch` gets each
    /// non-empty bucket's sketch key and count, in no set order, and a
    /// bucket more than once when some of it overflowed into a carry.
    pub(crate) fn drain(&self, into: &mut Counts, mut sketch: impl FnMut(i32, u64)) {
        let t = self.threshold_index;
        // Loads before swaps: most counters are zero most windows.
        let take = |cell: &AtomicU64| {
            if cell.load(Ordering::Relaxed) == 0 {
                0
            } else {
                cell.swap(0, Ordering::AcqRel)
            }
        };
        let mut add = |bucket: usize, n: u64, into: &mut Counts| {
            if n != 0 {
                into.calls += n;
                if is_slow_bucket(bucket, t) {
                    into.slow += n;
                }
                if bucket == STRADDLE {
                    into.straddle += n;
                }
                sketch(sketch_key(bucket, t), n);
            }
        };
        // One pass over the slots: the shards built so far, remembered in
        // `built` (a shard built after the pass passed its slot is read at
        // the next close), their counters, marks and carries taken.
        //
        // Errors first: a record adds to its bucket before its error, so an
        // error taken here usually has its call taken below or earlier. Not
        // always: a record whose bucket word was marked by another record
        // that has not set the mark yet is read at the next close. Nothing
        // is lost or counted twice; window judgement caps errors at calls.
        // The marks are taken before the words, so a word marked after this
        // is visited next time; a shard's carries are read only when it
        // marked them in use.
        let mut built = [0u64; MAX_SHARDS / 64];
        let mut visit = 0u64;
        for (i, s) in self.built() {
            built[i / 64] |= 1 << (i % 64);
            into.errors += take(&s.errors);
            into.cancelled += take(&s.cancelled);
            into.stale += take(&s.stale);
            let m = take(&s.touched);
            visit |= m;
            if m & (1 << CARRIED) == 0 {
                continue;
            }
            for carry in &s.carries {
                let v = take(carry);
                if v != 0 {
                    add((v >> TAG_SHIFT) as usize - 1, v & COUNT_MASK, into);
                }
            }
            if let Some(table) = s.overflow.get() {
                for (bucket, cell) in table.iter().enumerate() {
                    add(bucket, take(cell), into);
                }
            }
        }
        for s in self.local.iter() {
            into.errors += delta(&s.errors, &s.seen[BUCKETS]);
            into.cancelled += delta(&s.cancelled, &s.seen[BUCKETS + 1]);
            into.stale += delta(&s.stale, &s.seen[BUCKETS + 2]);
        }
        // Which words to visit: those touched in any shared shard, and
        // every word if there are local shards; each visited in every
        // shard remembered above.
        if !self.local.is_empty() {
            visit = u64::MAX;
        }
        let used = &built[..self.shared.len().div_ceil(64)];
        let mut words = visit & ((1 << WORDS) - 1);
        while words != 0 {
            let w = words.trailing_zeros() as usize;
            words &= words - 1;
            let mut merged = [0u64; LANES];
            for (k, &bits) in used.iter().enumerate() {
                let mut bits = bits;
                while bits != 0 {
                    let i = k * 64 + bits.trailing_zeros() as usize;
                    bits &= bits - 1;
                    let Some(s) = self.shard(i) else { continue };
                    let v = take(&s.buckets[w]);
                    for (lane, m) in merged.iter_mut().enumerate() {
                        *m += (v >> (16 * lane)) & LANE_MASK;
                    }
                }
            }
            for (lane, m) in merged.iter_mut().enumerate() {
                let bucket = w * LANES + lane;
                if bucket >= BUCKETS {
                    break;
                }
                for s in self.local.iter() {
                    *m += delta(&s.buckets[bucket], &s.seen[bucket]);
                }
                add(bucket, *m, into);
            }
        }
    }

    /// Rejections so far, summed over the shards.
    pub(crate) fn rejections(&self) -> crate::report::Rejections {
        let sum = |i: usize| -> u64 {
            let shared = self.built().map(|(_, s)| s.rejected[i].load(Ordering::Relaxed));
            let local = self.local.iter().map(|s| s.rejected[i].load(Ordering::Relaxed));
            shared.chain(local).fold(0, u64::wrapping_add)
        };
        crate::report::Rejections {
            open: sum(0),
            probes_busy: sum(1),
            forced: sum(2),
            ramping: sum(3),
        }
    }

    /// Bytes held by the shards (for the memory figure).
    pub(crate) fn heap_bytes(&self) -> usize {
        let shared = self.shared.len() * core::mem::size_of::<OnceBox<CachePadded<Shard>>>()
            + self.built().count() * core::mem::size_of::<CachePadded<Shard>>()
            + self.built().filter(|(_, s)| s.in_flight.is_some()).count() * core::mem::size_of::<InFlight>()
            + self.built().filter(|(_, s)| s.overflow.get().is_some()).count()
                * core::mem::size_of::<[AtomicU64; BUCKETS]>();
        let local = self.local.len()
            * (core::mem::size_of::<CachePadded<LocalShard>>() + (BUCKETS + 3) * core::mem::size_of::<AtomicU64>());
        shared + local
    }
}

/// A small per-thread index, handed out on a thread's first use: the
/// lowest-numbered free one first (an index a thread that exited gave back),
/// else the next never used. So the indices in use at any time are about as
/// many as the threads alive that have called a breaker, and a breaker whose
/// threads come and go (a pool that retires idle threads) keeps reusing the
/// shards it built instead of building one for each new thread.
#[inline(always)]
pub(crate) fn thread_index() -> usize {
    use core::cell::Cell;
    thread_local! {
        static INDEX: Cell<usize> = const { Cell::new(usize::MAX) };
    }
    INDEX.with(|i| {
        let v = i.get();
        if v != usize::MAX {
            return v;
        }
        assign_thread_index(i)
    })
}

/// Indices given back by threads that exited, and the next never used.
static INDICES: std::sync::Mutex<(Vec<usize>, usize)> = std::sync::Mutex::new((Vec::new(), 0));

/// Gives the calling thread an index (see [`thread_index`]) and arranges for
/// it to be given back when the thread exits. A thread whose exit has begun
/// (a thread-local destructor calling a breaker) keeps the index it had, or
/// gets a fresh one it never gives back: either way only a shard is shared.
#[cold]
#[inline(never)]
fn assign_thread_index(cell: &core::cell::Cell<usize>) -> usize {
    struct GiveBack(core::cell::Cell<Option<usize>>);
    impl Drop for GiveBack {
        fn drop(&mut self) {
            if let Some(v) = self.0.take() {
                let mut free = INDICES.lock().unwrap_or_else(|e| e.into_inner());
                free.0.push(v);
                // Lowest first: the shards of low indices are the ones most
                // breakers have built already.
                free.0.sort_unstable_by(|a, b| b.cmp(a));
            }
        }
    }
    thread_local! {
        static GIVE_BACK: GiveBack = const { GiveBack(core::cell::Cell::new(None)) };
    }
    let v = {
        let mut free = INDICES.lock().unwrap_or_else(|e| e.into_inner());
        match free.0.pop() {
            Some(v) => v,
            None => {
                free.1 += 1;
                free.1 - 1
            }
        }
    };
    cell.set(v);
    // Registering the give-back fails only once the thread's exit has begun.
    let _ = GIVE_BACK.try_with(|g| g.0.set(Some(v)));
    v
}

#[cfg(all(test, not(tailguard_loom)))]
mod tests {
    use super::*;
    use crate::sketch::bucket_of;

    #[test]
    fn slow_count_is_exact_around_the_threshold() {
        for threshold in [1u64, 999, 50_000_000, 50_000_001, 1 << 30, 1 << 40] {
            let shards = Shards::new(1, 0, false, threshold);
            let t = shards.threshold_index;
            let mut slow = 0;
            for ns in [
                threshold.saturating_sub(1),
                threshold,
                threshold + 1,
                threshold * 2,
                0,
                u64::MAX,
            ] {
                let is_slow = ns > threshold;
                slow += u64::from(is_slow);
                shards.mine().record(bucket_of(ns, is_slow, t), false);
            }
            let mut c = Counts::default();
            shards.drain(&mut c, |_, _| {});
            assert_eq!((c.calls, c.slow), (6, slow), "threshold {threshold}");
        }
    }

    /// `record_guessed` counts what `record` counts, whatever the thread
    /// guessed: latencies that stay in one word, hop between words, come
    /// back, straddle the threshold, carry errors, and fill a lane past its
    /// spill point, fed to two breakers' shards the two ways, drain to the
    /// same counts and the same sketch.
    #[test]
    #[cfg_attr(miri, ignore = "tens of thousands of records")]
    fn a_guessed_record_counts_what_a_record_counts() {
        let threshold = 1_000_000;
        let (plain, guessed) = (Shards::new(1, 0, false, threshold), Shards::new(1, 0, false, threshold));
        let t = plain.threshold_index;
        let mut latencies = vec![0u64, 1, 10, 500, 2_000, 2_000, 50_000, 10, 10, u64::MAX];
        latencies.extend([threshold - 1, threshold, threshold + 1, threshold * 3, 700]);
        // One lane past its spill point, with hops to other words between.
        latencies.extend((0..SPILL_AT + 7).map(|i| if i % 1_000 == 999 { 5_000_000 } else { 3_000 }));
        for (i, &ns) in latencies.iter().enumerate() {
            let slow = ns > threshold;
            let error = i % 7 == 3;
            plain.mine().record(bucket_of(ns, slow, t), error);
            guessed.mine().record_guessed(bucket_of(ns, slow, t), error);
        }
        let drained = |shards: &Shards| {
            let mut c = Counts::default();
            let mut sketch = std::collections::BTreeMap::new();
            shards.drain(&mut c, |key, n| *sketch.entry(key).or_insert(0u64) += n);
            (c, sketch)
        };
        let (pc, ps) = drained(&plain);
        let (gc, gs) = drained(&guessed);
        assert_eq!(pc.calls, latencies.len() as u64);
        assert_eq!((gc, gs), (pc, ps));
    }

    /// The per-core shard's guessed record (the per-core emitter's) against
    /// its plain one: the same latencies, hopping between buckets, on and
    /// either side of the threshold, with errors, into two breakers' local
    /// shards; both drain to the same counts and sketch.
    #[test]
    fn a_guessed_local_record_counts_what_a_record_counts() {
        let threshold = 1_000_000;
        let (plain, guessed) = (Shards::new(1, 1, false, threshold), Shards::new(1, 1, false, threshold));
        let t = plain.threshold_index;
        let mut latencies = vec![0u64, 1, 10, 500, 2_000, 2_000, 50_000, 10, 10, u64::MAX];
        latencies.extend([threshold - 1, threshold, threshold + 1, threshold * 3, 700]);
        latencies.extend((0..5_000u64).map(|i| {
            if i % 100 == 99 {
                5_000_000
            } else {
                3_000 + i % 3 * 40_000
            }
        }));
        for (i, &ns) in latencies.iter().enumerate() {
            let slow = ns > threshold;
            let error = i % 7 == 3;
            plain.local[0].record(bucket_of(ns, slow, t), error);
            guessed.local[0].record_guessed(bucket_of(ns, slow, t), error);
        }
        let drained = |shards: &Shards| {
            let mut c = Counts::default();
            let mut sketch = std::collections::BTreeMap::new();
            shards.drain(&mut c, |key, n| *sketch.entry(key).or_insert(0u64) += n);
            (c, sketch)
        };
        let (pc, ps) = drained(&plain);
        let (gc, gs) = drained(&guessed);
        assert_eq!(pc.calls, latencies.len() as u64);
        assert_eq!((gc, gs), (pc, ps));
    }

    #[test]
    #[cfg_attr(miri, ignore = "millions of records")]
    fn spill_keeps_calls_and_slow_exact_past_u16() {
        let shards = Shards::new(1, 0, false, 1_000);
        let t = shards.threshold_index;
        // More calls in one window than a u16 holds, in more buckets than
        // there are carries: calls and slow stay exact, and the sketch
        // keeps every sample, in its bucket (the overflow table's too).
        let per_bucket = 3 * SPILL_AT + 5;
        let buckets: Vec<usize> = (0..CARRIES + 2).map(|i| key_index(5_000_000) + i).collect();
        for &b in &buckets {
            for _ in 0..per_bucket {
                shards.mine().record(b, false);
            }
        }
        shards.mine().record(buckets[0], true);
        let mut c = Counts::default();
        let mut sketched = std::collections::BTreeMap::new();
        shards.drain(&mut c, |key, n| *sketched.entry(key).or_insert(0) += n);
        let total = per_bucket * buckets.len() as u64 + 1;
        assert_eq!((c.calls, c.slow, c.errors), (total, total, 1));
        for (i, &b) in buckets.iter().enumerate() {
            let key = crate::sketch::sketch_key(b, t);
            assert_eq!(sketched[&key], per_bucket + u64::from(i == 0), "bucket {b}");
        }
        assert!(
            shards.heap_bytes() > core::mem::size_of::<CachePadded<Shard>>() + 1024,
            "the table"
        );
        // The next window: nothing left over, and the table is reused.
        let mut c = Counts::default();
        shards.drain(&mut c, |_, _| {});
        assert_eq!(c, Counts::default());
    }

    #[test]
    fn counters_near_their_maximum_are_counted_across_a_close() {
        // A local shard's monotonic counters wrap: the drain takes wrapping
        // differences.
        let shards = Shards::new(1, 1, false, 1_000);
        let s = &shards.local[0];
        let b = key_index(10);
        for cell in [&s.buckets[b], &s.seen[b], &s.errors, &s.seen[BUCKETS]] {
            cell.store(u64::MAX - 1, Ordering::Relaxed);
        }
        for _ in 0..3 {
            s.record(b, true);
        }
        let mut c = Counts::default();
        shards.drain(&mut c, |_, _| {});
        assert_eq!((c.calls, c.errors), (3, 3));
        // (An in-flight slot's count near its maximum: `crate::flight`'s
        // `an_in_flight_slot_holds_at_most_0xffff_calls`.)
    }

    #[test]
    fn local_shard_drains_differences() {
        let shards = Shards::new(1, 1, false, 1_000);
        let s = &shards.local[0];
        s.record(key_index(10), true);
        s.record(key_index(10_000), false);
        let mut c = Counts::default();
        shards.drain(&mut c, |_, _| {});
        assert_eq!(
            c,
            Counts {
                calls: 2,
                errors: 1,
                slow: 1,
                cancelled: 0,
                stale: 0,
                straddle: 0,
            }
        );
        s.record(key_index(10), false);
        s.cancel();
        s.stale();
        let mut c = Counts::default();
        shards.drain(&mut c, |_, _| {});
        assert_eq!(
            c,
            Counts {
                calls: 1,
                errors: 0,
                slow: 0,
                cancelled: 1,
                stale: 1,
                straddle: 0,
            }
        );
    }
}
