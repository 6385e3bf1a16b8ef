//! Per-shard call counters.
//!
//! # Shared shards
//! Each thread records into the shard picked by a per-thread index masked by
//! `len - 1` (a power of two), each shard `CachePadded` so that two threads
//! never write one cache line. A record is ONE `fetch_add` on a packed word:
//!
//! | bits  | field |
//! |-------|-------|
//! | 0–20  | calls |
//! | 21–41 | errors |
//! | 42–62 | slow calls (latency above the threshold) |
//! | 63    | unused |
//!
//! Every record adds 1 to `calls` and at most 1 to each other field, so
//! `errors <= calls` and `slow <= calls` inside the word and only `calls` can
//! approach its limit. When a record sees `calls >= 2^20` (the spill bit) it
//! moves the word into three wide spill counters (`swap(0)` then adds), so a
//! field never carries into its neighbour as long as fewer than 2^20 records
//! race one spill. Window close swaps the word and the spill counters to zero:
//! each record lands in exactly one window, and a record's three fields
//! always land in the same one.
//!
//! # Local shards
//! An owned per-core handle has a shard with a single writer. Its counters
//! are monotonic `u64`s updated by load + store (no read-modify-write);
//! window close keeps the previous readings and takes differences.
//!
//! # In-flight slots
//! With in-flight tracking on, `allow` adds one to the slot of its start
//! epoch and the verdict subtracts it again, unless window close already
//! claimed the epoch (see `breaker.rs`, `claim_in_flight`).

use crate::sync::{AtomicU64, Ordering};
use crossbeam_utils::CachePadded;

const FIELD_BITS: u32 = 21;
const FIELD_MASK: u64 = (1 << FIELD_BITS) - 1;
pub(crate) const CALL: u64 = 1;
pub(crate) const ERROR: u64 = 1 << FIELD_BITS;
pub(crate) const SLOW: u64 = 1 << (2 * FIELD_BITS);
const SPILL_BIT: u64 = 1 << (FIELD_BITS - 1);

/// Start-epoch slots per shard for in-flight tracking.
pub(crate) const INFLIGHT_SLOTS: usize = 16;

/// The counts of one window (or a part of one).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Counts {
    pub(crate) calls: u64,
    pub(crate) errors: u64,
    pub(crate) slow: u64,
    pub(crate) cancelled: u64,
}

impl Counts {
    fn add_packed(&mut self, word: u64) {
        self.calls += word & FIELD_MASK;
        self.errors += (word >> FIELD_BITS) & FIELD_MASK;
        self.slow += (word >> (2 * FIELD_BITS)) & FIELD_MASK;
    }
}

/// A shard written by any thread.
#[derive(Debug)]
pub(crate) struct Shard {
    packed: AtomicU64,
    spill_calls: AtomicU64,
    spill_errors: AtomicU64,
    spill_slow: AtomicU64,
    cancelled: AtomicU64,
    pub(crate) in_flight: [AtomicU64; INFLIGHT_SLOTS],
}

impl Shard {
    pub(crate) fn new() -> Self {
        Self {
            packed: AtomicU64::new(0),
            spill_calls: AtomicU64::new(0),
            spill_errors: AtomicU64::new(0),
            spill_slow: AtomicU64::new(0),
            cancelled: AtomicU64::new(0),
            in_flight: core::array::from_fn(|_| AtomicU64::new(0)),
        }
    }

    /// Records one call; `inc` is `CALL` plus `ERROR` and/or `SLOW`.
    #[inline(always)]
    pub(crate) fn record(&self, inc: u64) {
        let prev = self.packed.fetch_add(inc, Ordering::Relaxed);
        if prev & SPILL_BIT != 0 {
            self.spill();
        }
    }

    #[cold]
    #[inline(never)]
    fn spill(&self) {
        let word = self.packed.swap(0, Ordering::AcqRel);
        let mut c = Counts::default();
        c.add_packed(word);
        self.spill_calls.fetch_add(c.calls, Ordering::Relaxed);
        self.spill_errors.fetch_add(c.errors, Ordering::Relaxed);
        self.spill_slow.fetch_add(c.slow, Ordering::Relaxed);
    }

    pub(crate) fn cancel(&self) {
        self.cancelled.fetch_add(1, Ordering::Relaxed);
    }

    /// Takes everything recorded since the last drain.
    pub(crate) fn drain(&self, into: &mut Counts) {
        into.add_packed(self.packed.swap(0, Ordering::AcqRel));
        into.calls += self.spill_calls.swap(0, Ordering::AcqRel);
        into.errors += self.spill_errors.swap(0, Ordering::AcqRel);
        into.slow += self.spill_slow.swap(0, Ordering::AcqRel);
        into.cancelled += self.cancelled.swap(0, Ordering::AcqRel);
    }

    #[cfg(test)]
    pub(crate) fn preload(&self, word: u64) {
        self.packed.store(word, Ordering::Relaxed);
    }
}

/// A shard with a single writer (an owned per-core handle).
#[derive(Debug)]
pub(crate) struct LocalShard {
    calls: AtomicU64,
    errors: AtomicU64,
    slow: AtomicU64,
    cancelled: AtomicU64,
    /// Readings at the last drain; only window close touches these.
    seen: [AtomicU64; 4],
}

#[inline(always)]
fn bump(cell: &AtomicU64) {
    // Single writer: a load and a store cannot lose an update.
    cell.store(cell.load(Ordering::Relaxed).wrapping_add(1), Ordering::Release);
}

impl LocalShard {
    pub(crate) fn new() -> Self {
        Self {
            calls: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            slow: AtomicU64::new(0),
            cancelled: AtomicU64::new(0),
            seen: core::array::from_fn(|_| AtomicU64::new(0)),
        }
    }

    /// Records one call. Only the shard's owner may call this.
    #[inline(always)]
    pub(crate) fn record(&self, error: bool, slow: bool) {
        // Errors and slow calls first, calls last: a concurrent drain that
        // reads `calls` first therefore never sees more errors than calls in
        // total.
        if error {
            bump(&self.errors);
        }
        if slow {
            bump(&self.slow);
        }
        bump(&self.calls);
    }

    pub(crate) fn cancel(&self) {
        bump(&self.cancelled);
    }

    /// Adds the counts since the last drain. Only window close calls this
    /// (under the tick lock), so `seen` has one writer too.
    pub(crate) fn drain(&self, into: &mut Counts) {
        let now = [
            self.calls.load(Ordering::Acquire),
            self.errors.load(Ordering::Acquire),
            self.slow.load(Ordering::Acquire),
            self.cancelled.load(Ordering::Acquire),
        ];
        let mut delta = [0u64; 4];
        for i in 0..4 {
            delta[i] = now[i].wrapping_sub(self.seen[i].load(Ordering::Relaxed));
            self.seen[i].store(now[i], Ordering::Relaxed);
        }
        into.calls += delta[0];
        into.errors += delta[1];
        into.slow += delta[2];
        into.cancelled += delta[3];
    }
}

/// All of a breaker's shards.
#[derive(Debug)]
pub(crate) struct Shards {
    shared: Box<[CachePadded<Shard>]>,
    mask: usize,
    pub(crate) local: Box<[CachePadded<LocalShard>]>,
}

impl Shards {
    pub(crate) fn new(shared: usize, local: usize) -> Self {
        debug_assert!(shared.is_power_of_two());
        Self {
            shared: (0..shared).map(|_| CachePadded::new(Shard::new())).collect(),
            mask: shared - 1,
            local: (0..local).map(|_| CachePadded::new(LocalShard::new())).collect(),
        }
    }

    /// The shard of the calling thread.
    #[inline(always)]
    pub(crate) fn mine(&self) -> &Shard {
        &self.shared[thread_index() & self.mask]
    }

    pub(crate) fn shared(&self) -> &[CachePadded<Shard>] {
        &self.shared
    }

    pub(crate) fn drain(&self, into: &mut Counts) {
        for s in self.shared.iter() {
            s.drain(into);
        }
        for s in self.local.iter() {
            s.drain(into);
        }
    }
}

/// A small per-thread index, handed out round-robin on first use.
#[inline(always)]
fn thread_index() -> usize {
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

    #[test]
    fn packed_fields_are_independent() {
        let s = Shard::new();
        s.record(CALL);
        s.record(CALL | ERROR);
        s.record(CALL | SLOW);
        s.record(CALL | ERROR | SLOW);
        s.cancel();
        let mut c = Counts::default();
        s.drain(&mut c);
        assert_eq!(
            c,
            Counts {
                calls: 4,
                errors: 2,
                slow: 2,
                cancelled: 1
            }
        );
        let mut again = Counts::default();
        s.drain(&mut again);
        assert_eq!(again, Counts::default());
    }

    #[test]
    fn spill_keeps_counts_exact_past_the_field_width() {
        let s = Shard::new();
        // Start just under the spill bit so that the test is fast.
        s.preload((SPILL_BIT - 3) * (CALL + ERROR + SLOW));
        let n = 3 * (1u64 << FIELD_BITS);
        for i in 0..n {
            s.record(CALL | if i % 2 == 0 { ERROR } else { 0 } | SLOW);
        }
        let mut c = Counts::default();
        s.drain(&mut c);
        let pre = SPILL_BIT - 3;
        assert_eq!(c.calls, pre + n);
        assert_eq!(c.errors, pre + n / 2);
        assert_eq!(c.slow, pre + n);
    }

    #[test]
    fn local_shard_drains_differences() {
        let s = LocalShard::new();
        s.record(true, false);
        s.record(false, true);
        let mut c = Counts::default();
        s.drain(&mut c);
        assert_eq!(
            c,
            Counts {
                calls: 2,
                errors: 1,
                slow: 1,
                cancelled: 0
            }
        );
        s.record(false, false);
        s.cancel();
        let mut c = Counts::default();
        s.drain(&mut c);
        assert_eq!(
            c,
            Counts {
                calls: 1,
                errors: 0,
                slow: 0,
                cancelled: 1
            }
        );
    }
}
