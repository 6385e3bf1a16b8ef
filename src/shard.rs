//! Per-shard call counters and latency histograms.
//!
//! # Shared shards
//! Each thread records into the shard picked by a per-thread index masked by
//! `len - 1` (a power of two), each shard `CachePadded` so that two threads
//! never write one cache line. A successful call is ONE `fetch_add`: on the
//! latency bucket of its key. Calls, slow calls and the latency quantiles all
//! come from the buckets at window close, and the slow count is exact (see
//! `sketch::bucket_of`); a failed call adds one more `fetch_add` on `errors`.
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
//! counts go to untagged spill counters: calls and slow calls stay exact,
//! those samples leave the quantiles.
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
//! With in-flight tracking on, each shared shard keeps [`INFLIGHT_SLOTS`]
//! slots, one word each: the epoch it counts for (a tag), the generation
//! its calls were admitted in (a tag), whether window close has claimed
//! that epoch, and how many calls of the epoch are in flight. `allow` adds
//! one to the slot of its start epoch, the verdict takes it out again, and
//! window close claims (counts once) the slot's calls: as stale if they
//! were admitted in an earlier generation than the close's, as slow if
//! they were admitted in its generation and started in an epoch wholly
//! older than the threshold. Each of these is one CAS on the slot's word,
//! so a verdict and a claim never both count a call: whichever CAS lands
//! first decides. A slot is reused for a later epoch only once its own
//! epoch is claimed; if a window close is so late that a call finds its
//! slot still counting an unclaimed older epoch of its own generation,
//! those older calls have run for at least `INFLIGHT_SLOTS − 1` epochs
//! (longer than a window and a threshold) and the call claims them itself,
//! for the next close to count. A call whose slot counts a *later* epoch, or
//! its own epoch already claimed (the clock stepped back past a close), or
//! calls of another generation still in flight, or that arrives while a
//! close is claiming (the slot's closing flag), is not tracked: it is
//! counted when it returns, never as in flight.
//!
//! Slot word, high bits first: epoch tag (30 bits: the epoch mod 2^30),
//! generation tag (16 bits: the state word's generation mod 2^16), the
//! claimed flag, the closing flag, the count (16 bits). The generation tag
//! is what keeps a call admitted *after* a transition from being claimed as
//! stale with those admitted before it (both can share an epoch).

use crate::sketch::{is_slow_bucket, key_index, sketch_key, BUCKETS};
use crate::sync::{AtomicU64, Ordering};
use crossbeam_utils::CachePadded;

/// Buckets are 16-bit lanes, four to an `AtomicU64`: window close reads a
/// shard's histogram in 53 loads instead of 210.
const LANES: usize = 4;
const WORDS: usize = BUCKETS.div_ceil(LANES);
const _: () = assert!(WORDS < 64, "the touched mask has one bit per word, and one for carries");
const LANE_MASK: u64 = 0xffff;
const SPILL_AT: u64 = 1 << 15;
/// Carry counters per shard.
pub(crate) const CARRIES: usize = 17;
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
    /// Rejections by reason (open, probes busy, forced): monotonic, read
    /// by summing the shards (never drained), so that a rejection counts on
    /// its thread's shard, not on a line every thread writes.
    rejected: [AtomicU64; 3],
    spill_calls: AtomicU64,
    spill_slow: AtomicU64,
    in_flight: Option<Box<InFlight>>,
    buckets: [AtomicU64; WORDS],
    /// `(bucket + 1) << 56 | count`, or 0 when free.
    carries: [AtomicU64; CARRIES],
}

/// The `touched` bit that marks carries in use.
const CARRIED: u32 = 63;

/// Start-epoch slots per shard for in-flight tracking.
pub(crate) const INFLIGHT_SLOTS: usize = 16;

/// A shard's in-flight slots (see the module docs). Slot word: the epoch
/// tag (epoch mod 2^30) in the high 30 bits, the generation tag (16 bits),
/// the claimed flag, the closing flag (a window close is claiming: no call
/// may enter), a 16-bit count.
#[derive(Debug)]
pub(crate) struct InFlight {
    slots: [AtomicU64; INFLIGHT_SLOTS],
    /// Calls of unclaimed old epochs claimed by `enter` (a late close), of
    /// one generation: its tag in the high 16 bits, their count below
    /// ([`CARRY_COUNT_MASK`]). Counted by a later close: as slow by a judged
    /// close of that generation, as stale by one of a later generation.
    carried: AtomicU64,
    /// Carried calls of a generation older than `carried`'s: stale.
    carried_stale: AtomicU64,
}

const CARRY_GEN_SHIFT: u32 = 48;
const CARRY_COUNT_MASK: u64 = (1 << CARRY_GEN_SHIFT) - 1;

const FLIGHT_COUNT_MASK: u64 = 0xffff;
const FLIGHT_CLOSING: u64 = 1 << 16;
const FLIGHT_CLAIMED: u64 = 1 << 17;
const FLIGHT_GEN_SHIFT: u32 = 18;
/// Generation tags: the state word's generation mod 2^16.
pub(crate) const FLIGHT_GEN_MASK: u64 = 0xffff;
const FLIGHT_TAG_SHIFT: u32 = 34;
const FLIGHT_TAG_MASK: u64 = (1 << (64 - FLIGHT_TAG_SHIFT)) - 1;
/// Transitions between two closes from which a close cannot order the
/// generation tags (half their range: `gen_before` orders tags at most
/// 2^15 − 1 apart): every tag but its own is then taken for an earlier
/// generation's.
pub(crate) const FLIGHT_GEN_HORIZON: u64 = 1 << 15;

fn flight_tag(epoch: u64) -> u64 {
    epoch & FLIGHT_TAG_MASK
}

/// Whether tag `a` is an earlier epoch than tag `b` (modulo the tag range,
/// within half of it: a clock step of more than 2^29 epochs, twelve hours
/// at the shortest window and a year and a half at the default one, leaves
/// a slot untracked until time has moved as far again).
fn flight_before(a: u64, b: u64) -> bool {
    let d = b.wrapping_sub(a) & FLIGHT_TAG_MASK;
    d != 0 && d < 1 << (63 - FLIGHT_TAG_SHIFT)
}

/// Whether generation tag `a` is earlier than `b` (within half the range).
fn gen_before(a: u64, b: u64) -> bool {
    let d = b.wrapping_sub(a) & FLIGHT_GEN_MASK;
    d != 0 && d <= FLIGHT_GEN_MASK / 2
}

fn flight_word(tag: u64, gen: u64, claimed: bool, count: u64) -> u64 {
    tag << FLIGHT_TAG_SHIFT | gen << FLIGHT_GEN_SHIFT | if claimed { FLIGHT_CLAIMED } else { 0 } | count
}

fn flight_gen(word: u64) -> u64 {
    (word >> FLIGHT_GEN_SHIFT) & FLIGHT_GEN_MASK
}

/// What a window close claims of the calls in flight.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Claim {
    /// The close's span is judged: calls of earlier generations are stale,
    /// calls of its own generation older than the threshold are slow.
    Judged,
    /// The span straddles a transition (it is not judged): calls of
    /// earlier generations are stale; the close's own generation's are
    /// left for the next close to judge.
    StaleOnly,
    /// As `StaleOnly`, after so many transitions since the last close
    /// ([`FLIGHT_GEN_HORIZON`] or more) that the tags cannot be ordered:
    /// every call of another tag than the close's own is claimed as stale
    /// (a call admitted in a transition racing this very close among them),
    /// and a call in flight across exactly a multiple of 2^16 transitions
    /// (with no close between) is taken for one of the close's generation.
    Unordered,
}

/// The calls a claim counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Claimed {
    pub(crate) slow: u64,
    pub(crate) stale: u64,
}

impl InFlight {
    fn new() -> Self {
        // Every slot starts as a claimed epoch before any real one.
        let free = flight_word(flight_tag(0u64.wrapping_sub(INFLIGHT_SLOTS as u64)), 0, true, 0);
        Self {
            slots: core::array::from_fn(|_| AtomicU64::new(free)),
            carried: AtomicU64::new(0),
            carried_stale: AtomicU64::new(0),
        }
    }

    /// A call starting in `epoch`, admitted in generation `gen` (its tag,
    /// [`FLIGHT_GEN_MASK`]), enters its slot; whether it is tracked. Not
    /// while a window close claims (the slot's closing flag): the close's
    /// clock reading may be older than this call's, and the call would
    /// look older than it is. Whether this CAS lands before the close marks
    /// the slot or after (then it sees the mark) is one order on one word;
    /// before means the close reads the clock after this call did.
    #[inline]
    pub(crate) fn enter(&self, epoch: u64, gen: u64) -> bool {
        let cell = &self.slots[(epoch % INFLIGHT_SLOTS as u64) as usize];
        let tag = flight_tag(epoch);
        let mut cur = cell.load(Ordering::Relaxed);
        loop {
            if cur & FLIGHT_CLOSING != 0 {
                return false;
            }
            let (t, claimed, n) = (
                cur >> FLIGHT_TAG_SHIFT,
                cur & FLIGHT_CLAIMED != 0,
                cur & FLIGHT_COUNT_MASK,
            );
            // Calls of another generation still in flight here: leave them
            // to the close, which can tell which generation is the older.
            let foreign = !claimed && n != 0 && flight_gen(cur) != gen;
            let (next, carried) = if foreign {
                return false;
            } else if t == tag && !claimed && n < FLIGHT_COUNT_MASK {
                // This epoch (of this generation, or with none left in it).
                (flight_word(tag, gen, false, n + 1), 0)
            } else if flight_before(t, tag) {
                // An older epoch: free once claimed; unclaimed, its calls (of
                // this generation) are old enough to count as slow now (a
                // late window close).
                (flight_word(tag, gen, false, 1), if claimed { 0 } else { n })
            } else {
                // A later epoch, this epoch already claimed, or a full count.
                return false;
            };
            match cell.compare_exchange_weak(cur, next, Ordering::AcqRel, Ordering::Relaxed) {
                Ok(_) => {
                    if carried != 0 {
                        self.carry(gen, carried);
                    }
                    return true;
                }
                Err(actual) => cur = actual,
            }
        }
    }

    /// A tracked call of `epoch` and generation tag `gen` returns: false
    /// if a claim already counted it (then it must not be counted again).
    #[inline]
    pub(crate) fn leave(&self, epoch: u64, gen: u64) -> bool {
        let cell = &self.slots[(epoch % INFLIGHT_SLOTS as u64) as usize];
        let tag = flight_tag(epoch);
        let mut cur = cell.load(Ordering::Relaxed);
        loop {
            if cur >> FLIGHT_TAG_SHIFT != tag || flight_gen(cur) != gen || cur & FLIGHT_CLAIMED != 0 {
                return false;
            }
            match cell.compare_exchange_weak(cur, cur - 1, Ordering::AcqRel, Ordering::Relaxed) {
                Ok(_) => return true,
                Err(actual) => cur = actual,
            }
        }
    }

    /// Marks every slot closing, before a window close reads the clock for
    /// its claim; calls stop entering until [`end_close`](Self::end_close).
    pub(crate) fn begin_close(&self) {
        for cell in &self.slots {
            cell.fetch_or(FLIGHT_CLOSING, Ordering::AcqRel);
        }
    }

    /// Clears the closing marks after the claim.
    pub(crate) fn end_close(&self) {
        for cell in &self.slots {
            cell.fetch_and(!FLIGHT_CLOSING, Ordering::AcqRel);
        }
    }

    /// `n` calls of generation tag `gen`, carried out of a slot by a late
    /// close's `enter`: kept with their generation (an older one than the
    /// generation kept already goes to the stale carry; a newer one sends
    /// the kept ones there).
    #[cold]
    fn carry(&self, gen: u64, n: u64) {
        let mut cur = self.carried.load(Ordering::Acquire);
        loop {
            let (g, count) = (cur >> CARRY_GEN_SHIFT, cur & CARRY_COUNT_MASK);
            let (next, stale) = if count == 0 || g == gen {
                (gen << CARRY_GEN_SHIFT | (count + n).min(CARRY_COUNT_MASK), 0)
            } else if gen_before(gen, g) {
                (cur, n)
            } else {
                (gen << CARRY_GEN_SHIFT | n, count)
            };
            match self
                .carried
                .compare_exchange_weak(cur, next, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => {
                    if stale != 0 {
                        self.carried_stale.fetch_add(stale, Ordering::Relaxed);
                    }
                    return;
                }
                Err(actual) => cur = actual,
            }
        }
    }

    /// The carried calls a close in generation tag `gen` counts (see
    /// [`Claim`]): those of its generation as slow if judged (left for a
    /// later close otherwise), those of an earlier one as stale.
    fn claim_carried(&self, gen: u64, how: Claim, out: &mut Claimed) {
        if self.carried_stale.load(Ordering::Relaxed) != 0 {
            out.stale += self.carried_stale.swap(0, Ordering::AcqRel);
        }
        let mut cur = self.carried.load(Ordering::Acquire);
        loop {
            let (g, count) = (cur >> CARRY_GEN_SHIFT, cur & CARRY_COUNT_MASK);
            let stale = if how == Claim::Unordered {
                g != gen
            } else {
                gen_before(g, gen)
            };
            let slow = !stale && how == Claim::Judged && g == gen;
            if count == 0 || !(stale || slow) {
                return;
            }
            match self
                .carried
                .compare_exchange_weak(cur, 0, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => {
                    if stale {
                        out.stale += count;
                    } else {
                        out.slow += count;
                    }
                    return;
                }
                Err(actual) => cur = actual,
            }
        }
    }

    /// A window close's claim (see [`Claim`]) by a close in generation tag
    /// `gen`, of the calls of its generation that started before epoch
    /// `target`: how many calls it counted as slow and as stale (with those
    /// carried by late `enter`s).
    pub(crate) fn claim(&self, target: u64, gen: u64, how: Claim) -> Claimed {
        let target = flight_tag(target);
        let mut out = Claimed::default();
        self.claim_carried(gen, how, &mut out);
        for cell in &self.slots {
            let mut cur = cell.load(Ordering::Acquire);
            loop {
                let (t, g) = (cur >> FLIGHT_TAG_SHIFT, flight_gen(cur));
                if cur & FLIGHT_CLAIMED != 0 {
                    break;
                }
                let stale = if how == Claim::Unordered {
                    g != gen
                } else {
                    gen_before(g, gen)
                };
                let slow = !stale && how == Claim::Judged && g == gen && flight_before(t, target);
                if !stale && !slow {
                    // A later generation's (admitted after the close read
                    // its own), or not old enough: left for a later close.
                    break;
                }
                let claimed = flight_word(t, g, true, 0) | (cur & FLIGHT_CLOSING);
                match cell.compare_exchange_weak(cur, claimed, Ordering::AcqRel, Ordering::Acquire) {
                    Ok(_) => {
                        let n = cur & FLIGHT_COUNT_MASK;
                        if stale {
                            out.stale += n;
                        } else {
                            out.slow += n;
                        }
                        break;
                    }
                    Err(actual) => cur = actual,
                }
            }
        }
        out
    }
}

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
            spill_calls: AtomicU64::new(0),
            spill_slow: AtomicU64::new(0),
            in_flight: track_in_flight.then(|| Box::new(InFlight::new())),
        }
    }

    /// Records one call in `bucket` (see [`bucket_of`]).
    #[inline(always)]
    pub(crate) fn record(&self, bucket: usize, error: bool, threshold_index: usize) {
        let shift = 16 * (bucket % LANES) as u32;
        let prev = self.buckets[bucket / LANES].fetch_add(1 << shift, Ordering::Relaxed);
        if prev == 0 {
            self.touched.fetch_or(1 << (bucket / LANES), Ordering::Release);
        }
        // A lane never carries into its neighbour: it is emptied at 2^15,
        // long before 2^16, unless 32,768 records race one spill.
        if (prev >> shift) & LANE_MASK >= SPILL_AT {
            self.spill(bucket, threshold_index);
        }
        if error {
            // Release: window close takes `errors` before the buckets, so
            // an error it sees has its call counted in that window or before.
            self.errors.fetch_add(1, Ordering::Release);
        }
    }

    #[cold]
    #[inline(never)]
    fn spill(&self, bucket: usize, threshold_index: usize) {
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
        self.spill_calls.fetch_add(n, Ordering::Relaxed);
        if is_slow_bucket(bucket, threshold_index) {
            self.spill_slow.fetch_add(n, Ordering::Relaxed);
        }
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
    rejected: [AtomicU64; 3],
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
#[derive(Debug)]
pub(crate) struct Shards {
    shared: Box<[CachePadded<Shard>]>,
    mask: usize,
    pub(crate) local: Box<[CachePadded<LocalShard>]>,
    /// The bucket of the latency threshold.
    pub(crate) threshold_index: usize,
}

impl Shards {
    pub(crate) fn new(shared: usize, local: usize, track_in_flight: bool, threshold_ns: u64) -> Self {
        debug_assert!(shared.is_power_of_two());
        Self {
            shared: (0..shared)
                .map(|_| CachePadded::new(Shard::new(track_in_flight)))
                .collect(),
            mask: shared - 1,
            local: (0..local).map(|_| CachePadded::new(LocalShard::new())).collect(),
            threshold_index: key_index(threshold_ns),
        }
    }

    /// The shard of the calling thread.
    #[inline(always)]
    pub(crate) fn mine(&self) -> &Shard {
        &self.shared[self.mine_index()]
    }

    /// The index of the calling thread's shard.
    #[inline(always)]
    pub(crate) fn mine_index(&self) -> usize {
        thread_index() & self.mask
    }

    pub(crate) fn shared(&self) -> &[CachePadded<Shard>] {
        &self.shared
    }

    /// Starts loading the lines a drain reads first: each shared shard's
    /// counters and marks.
    #[cfg(not(tailguard_loom))]
    pub(crate) fn prefetch(&self) {
        for s in self.shared.iter() {
            crate::sync::prefetch((&s.touched as *const AtomicU64).cast(), 1);
            crate::sync::prefetch((&s.errors as *const AtomicU64).cast(), 1);
        }
    }

    /// Starts loading the bucket words the shared shards mark as in use.
    #[cfg(not(tailguard_loom))]
    pub(crate) fn prefetch_marked(&self) {
        for s in self.shared.iter() {
            let mut words = s.touched.load(Ordering::Relaxed) & ((1 << WORDS) - 1);
            while words != 0 {
                let w = words.trailing_zeros() as usize;
                words &= words - 1;
                crate::sync::prefetch((&s.buckets[w] as *const AtomicU64).cast(), 1);
            }
        }
    }

    /// Takes everything recorded since the last drain; `sketch` gets each
    /// non-empty bucket's sketch key and count, in no set order, and a
    /// bucket more than once when some of it overflowed into a carry.
    pub(crate) fn drain(&self, into: &mut Counts, mut sketch: impl FnMut(i32, u64)) {
        let t = self.threshold_index;
        // Errors first: a record adds to its bucket before its error, so an
        // error taken here usually has its call taken below or earlier. Not
        // always: a record whose bucket word was marked by another record
        // that has not set the mark yet is read at the next close. Nothing
        // is lost or counted twice; window judgement caps errors at calls.
        // Loads before swaps: most counters are zero most windows.
        let take = |cell: &AtomicU64| {
            if cell.load(Ordering::Relaxed) == 0 {
                0
            } else {
                cell.swap(0, Ordering::AcqRel)
            }
        };
        for s in self.shared.iter() {
            into.errors += take(&s.errors);
            into.cancelled += take(&s.cancelled);
            into.stale += take(&s.stale);
        }
        for s in self.local.iter() {
            into.errors += delta(&s.errors, &s.seen[BUCKETS]);
            into.cancelled += delta(&s.cancelled, &s.seen[BUCKETS + 1]);
            into.stale += delta(&s.stale, &s.seen[BUCKETS + 2]);
        }
        let mut add = |bucket: usize, n: u64, into: &mut Counts| {
            if n != 0 {
                into.calls += n;
                if is_slow_bucket(bucket, t) {
                    into.slow += n;
                }
                sketch(sketch_key(bucket, t), n);
            }
        };
        // Which words to visit: those touched in any shared shard (the
        // marks are taken before the words, so a word marked after this is
        // visited next time), and every word if there are local shards. A
        // shard's carries are read only when it marked them in use.
        let mut visit = 0u64;
        for s in self.shared.iter() {
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
        }
        if !self.local.is_empty() {
            visit = u64::MAX;
        }
        let mut words = visit & ((1 << WORDS) - 1);
        while words != 0 {
            let w = words.trailing_zeros() as usize;
            words &= words - 1;
            let mut merged = [0u64; LANES];
            for s in self.shared.iter() {
                let v = take(&s.buckets[w]);
                for (lane, m) in merged.iter_mut().enumerate() {
                    *m += (v >> (16 * lane)) & LANE_MASK;
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
        for s in self.shared.iter() {
            into.calls += take(&s.spill_calls);
            into.slow += take(&s.spill_slow);
        }
    }

    /// Rejections so far, summed over the shards.
    pub(crate) fn rejections(&self) -> crate::report::Rejections {
        let sum = |i: usize| -> u64 {
            let shared = self.shared.iter().map(|s| s.rejected[i].load(Ordering::Relaxed));
            let local = self.local.iter().map(|s| s.rejected[i].load(Ordering::Relaxed));
            shared.chain(local).fold(0, u64::wrapping_add)
        };
        crate::report::Rejections {
            open: sum(0),
            probes_busy: sum(1),
            forced: sum(2),
        }
    }

    /// Bytes held by the shards (for the memory figure).
    pub(crate) fn heap_bytes(&self) -> usize {
        let shared = self.shared.len() * core::mem::size_of::<CachePadded<Shard>>()
            + self.shared.iter().filter(|s| s.in_flight.is_some()).count() * core::mem::size_of::<InFlight>();
        let local = self.local.len()
            * (core::mem::size_of::<CachePadded<LocalShard>>() + (BUCKETS + 3) * core::mem::size_of::<AtomicU64>());
        shared + local
    }
}

/// A small per-thread index, handed out round-robin on first use.
#[inline(always)]
pub(crate) fn thread_index() -> usize {
    use core::cell::Cell;
    use std::sync::atomic::{AtomicUsize, Ordering};
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static INDEX: Cell<usize> = const { Cell::new(usize::MAX) };
    }
    INDEX.with(|i| {
        let v = i.get();
        if v != usize::MAX {
            return v;
        }
        let v = NEXT.fetch_add(1, Ordering::Relaxed);
        i.set(v);
        v
    })
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
                shards.mine().record(bucket_of(ns, is_slow, t), false, t);
            }
            let mut c = Counts::default();
            shards.drain(&mut c, |_, _| {});
            assert_eq!((c.calls, c.slow), (6, slow), "threshold {threshold}");
        }
    }

    #[test]
    #[cfg_attr(miri, ignore = "millions of records")]
    fn spill_keeps_calls_and_slow_exact_past_u16() {
        let shards = Shards::new(1, 0, false, 1_000);
        let t = shards.threshold_index;
        // More calls in one window than a u16 holds, in more buckets than
        // there are carries: calls and slow stay exact, and the sketch
        // keeps every sample of the first CARRIES buckets.
        let per_bucket = 3 * SPILL_AT + 5;
        let buckets: Vec<usize> = (0..CARRIES + 2).map(|i| key_index(5_000_000) + i).collect();
        for &b in &buckets {
            for _ in 0..per_bucket {
                shards.mine().record(b, false, t);
            }
        }
        shards.mine().record(buckets[0], true, t);
        let mut c = Counts::default();
        let mut sketched = 0;
        shards.drain(&mut c, |_, n| sketched += n);
        let total = per_bucket * buckets.len() as u64 + 1;
        assert_eq!((c.calls, c.slow, c.errors), (total, total, 1));
        assert!(sketched >= per_bucket * CARRIES as u64, "{sketched}");
    }

    /// A judged claim (generation 0): what it counted as slow.
    fn slow(f: &InFlight, target: u64) -> u64 {
        let c = f.claim(target, 0, Claim::Judged);
        assert_eq!(c.stale, 0);
        c.slow
    }

    #[test]
    fn in_flight_counts_each_call_once_as_returned_or_claimed() {
        let f = InFlight::new();
        assert!(f.enter(0, 0) && f.enter(0, 0) && f.enter(1, 0));
        assert!(f.leave(0, 0));
        assert_eq!(slow(&f, 1), 1, "epoch 0 has one call left");
        assert!(!f.leave(0, 0), "claimed: not counted again");
        assert!(!f.enter(0, 0), "an epoch already claimed takes no new calls");
        assert!(f.leave(1, 0));
        assert_eq!(slow(&f, 5), 0);
    }

    #[test]
    fn no_call_enters_while_a_close_claims() {
        let f = InFlight::new();
        assert!(f.enter(5, 0));
        f.begin_close();
        assert!(!f.enter(5, 0) && !f.enter(6, 0), "closing: not tracked");
        assert!(f.leave(5, 0), "a call already in leaves as usual");
        assert!(!f.enter(7, 0));
        assert_eq!(slow(&f, 10), 0);
        f.end_close();
        assert!(f.enter(11, 0));
        assert_eq!(slow(&f, 12), 1);
    }

    #[test]
    fn a_late_close_never_counts_a_new_call_with_an_old_one() {
        let f = InFlight::new();
        let slots = INFLIGHT_SLOTS as u64;
        assert!(f.enter(3, 0));
        // The close is late: epoch 3 + slots shares the slot of epoch 3.
        assert!(f.enter(3 + slots, 0));
        assert!(!f.leave(3, 0), "the old call was claimed by the new one");
        assert_eq!(slow(&f, 3 + slots), 1, "the old call, carried; not the new one");
        assert!(f.leave(3 + slots, 0));
        // A call whose slot counts a later epoch is not tracked.
        assert!(!f.enter(3, 0));
    }

    /// Calls carried out of a slot by a late close keep their generation: a
    /// close of that generation counts them slow when it is judged (and
    /// leaves them otherwise), a close of a later one stale; carries of two
    /// generations keep apart.
    #[test]
    fn carried_calls_keep_their_generation() {
        let f = InFlight::new();
        let slots = INFLIGHT_SLOTS as u64;
        assert!(f.enter(3, 1));
        assert!(f.enter(3 + slots, 1), "a late close: carries the generation-1 call");
        let c = f.claim(0, 1, Claim::StaleOnly);
        assert_eq!((c.slow, c.stale), (0, 0), "its own generation's, not judged: left");
        let c = f.claim(0, 1, Claim::Judged);
        assert_eq!((c.slow, c.stale), (1, 0), "judged: slow");
        assert!(f.enter(5, 1) && f.enter(5 + slots, 1), "another carry, of generation 1");
        assert!(f.enter(6, 2) && f.enter(6 + slots, 2), "and one of generation 2");
        // At a generation-2 close: the generation-1 carry and slots are stale.
        let c = f.claim(0, 2, Claim::Judged);
        assert_eq!(
            (c.slow, c.stale),
            (1, 3),
            "gen 2's carry slow; gen 1's carry and two slots stale"
        );
    }

    #[test]
    fn in_flight_tags_compare_across_their_wrap() {
        let top = FLIGHT_TAG_MASK;
        assert!(flight_before(top, 0) && flight_before(top - 5, 3) && !flight_before(3, top - 5));
        let f = InFlight::new();
        assert!(f.enter(top, 0));
        assert!(f.enter(top + 1, 0)); // tag 0, the next epoch
        assert_eq!(slow(&f, top + 1), 1);
        assert!(f.leave(top + 1, 0));
        let g = FLIGHT_GEN_MASK;
        assert!(gen_before(g, 0) && gen_before(g - 5, 3) && !gen_before(3, g - 5) && !gen_before(7, 7));
    }

    /// Calls of an earlier generation are claimed as stale (whatever their
    /// age); the close's own generation's only as slow, and only when old
    /// enough and judged; a later generation's not at all.
    #[test]
    fn a_claim_tells_the_generations_apart() {
        let f = InFlight::new();
        assert!(f.enter(1, 4)); // admitted before the transition to 5
        assert!(f.enter(2, 5) && f.enter(9, 5)); // after it
        assert!(f.enter(3, 6)); // after a transition the close has not seen
                                // A call of generation 5 cannot share a slot with 4's in flight.
        assert!(!f.enter(1, 5));
        let c = f.claim(5, 5, Claim::StaleOnly);
        assert_eq!((c.slow, c.stale), (0, 1), "only generation 4's, as stale");
        assert!(
            !f.leave(1, 4) && f.enter(1 + INFLIGHT_SLOTS as u64, 5),
            "its slot is free again"
        );
        let c = f.claim(5, 5, Claim::Judged);
        assert_eq!(
            (c.slow, c.stale),
            (1, 0),
            "epoch 2's, old enough; not epoch 9's, nor 6's"
        );
        assert!(f.leave(9, 5) && f.leave(3, 6));
        assert!(f.enter(4, 7));
        let c = f.claim(0, 7, Claim::Unordered);
        assert_eq!(
            (c.slow, c.stale),
            (0, 1),
            "every other generation's, as stale; not 7's own"
        );
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
        // An in-flight slot holds at most 0xffff calls: the next is not
        // tracked (it is still counted when it returns).
        let f = InFlight::new();
        f.slots[0].store(flight_word(0, 0, false, FLIGHT_COUNT_MASK), Ordering::Relaxed);
        assert!(!f.enter(0, 0));
        assert_eq!(slow(&f, 1), FLIGHT_COUNT_MASK);
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
                stale: 0
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
                stale: 1
            }
        );
    }
}
