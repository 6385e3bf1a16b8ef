//! A bounded, priority-aware dead-letter queue (DLQ).
//!
//! [`DeadLetterQueue`] is where a breaker diverts the traffic of a consumer
//! it has opened on, so that it can be replayed when the consumer recovers.
//! It is a multi-producer, single-consumer queue with three priority
//! classes ([`Priority`], lowest first: `Idle`, `Routine`, `Critical`):
//!
//! - Every slot is allocated once, by [`DeadLetterQueue::with_capacity`];
//!   [`push`](DeadLetterQueue::push) is lock-free and never allocates.
//! - When the queue is full, an item of a higher class *displaces* the oldest
//!   item of the lowest class present below its own, and the displaced item
//!   is handed back to the caller ([`Pushed::Displaced`]). When nothing may
//!   give way (a `Critical` item is never displaced, and an item never
//!   displaces its own or a higher class) the push fails and the item itself
//!   is handed back ([`Full`]).
//! - [`pop`](DeadLetterQueue::pop) returns the highest class first, and
//!   first-in first-out within a class.
//! - Nothing is silently dropped: every item is popped once, displaced (handed
//!   back) once, refused (handed back) once, or still in the queue, and the
//!   per-class counters of [`Stats`] let anyone check it from outside:
//!   `pushed == popped + displaced + handed_back + depth`. Dropping the queue
//!   drops each remaining item exactly once.
//!
//! # One consumer, enforced by the type system
//!
//! The [`DeadLetterQueue`] value itself is the consumer: it is `Send` but
//! neither `Sync` nor `Clone`, so at most one thread can call
//! [`pop`](DeadLetterQueue::pop) / [`drain`](DeadLetterQueue::drain) at a
//! time. Producers on other threads push through [`Producer`] handles
//! (`Clone + Send + Sync`) obtained from
//! [`DeadLetterQueue::producer`]; they also read the metrics. The queue's
//! storage is freed, and its remaining items dropped, when the last of the
//! queue and its producers is dropped.
//!
//! ```
//! use std::thread;
//! use tailguard::dlq::{DeadLetterQueue, Priority, Pushed};
//!
//! let dlq: DeadLetterQueue<u64> = DeadLetterQueue::with_capacity(1024)?;
//! let producers: Vec<_> = (0..4)
//!     .map(|t| {
//!         let p = dlq.producer();
//!         thread::spawn(move || {
//!             for i in 0..100 {
//!                 assert!(matches!(p.push(t * 1000 + i, Priority::Routine), Ok(Pushed::Queued)));
//!             }
//!         })
//!     })
//!     .collect();
//! for h in producers {
//!     h.join().unwrap();
//! }
//! let mut replayed = 0;
//! dlq.drain(usize::MAX, |_item, class| {
//!     assert_eq!(class, Priority::Routine);
//!     replayed += 1;
//! });
//! assert_eq!(replayed, 400);
//! # Ok::<(), tailguard::ConfigError>(())
//! ```
//!
//! # Design
//!
//! One bounded ring per class, each a Vyukov-style array of slots with a
//! per-slot sequence number (`seq`), plus one shared admission counter.
//!
//! - Positions (`head`, `tail`, and the `seq` of each slot) are plain
//!   `usize` counters that wrap; a position maps to slot `pos & mask`.
//!   Every ring has `capacity.next_power_of_two().max(2)` slots, so that
//!   any one class can hold the whole capacity: the queue allocates
//!   `3 * capacity.next_power_of_two().max(2)` slots in total (exactly
//!   `3 * capacity` when the capacity is a power of two other than 1; a
//!   ring needs two slots so that "full for `p`" and "free for `p + 1`"
//!   differ).
//! - A slot for position `p` is *free* when `seq == p`, *full* when
//!   `seq == p + 1`; whoever takes the item out stores `seq = p + slots`,
//!   which frees it for the next lap. A reader only ever takes an item from
//!   a slot whose `seq` says *full* (stored with `Release` after the write),
//!   so it never reads a slot that is claimed but not yet written.
//! - The logical length is `admitted - removed`: `admitted` is bumped (CAS,
//!   never past `capacity`) by producers that add an item, `removed` is
//!   written only by the consumer (a plain store: one consumer). A
//!   displacement takes one item out and puts one in, so it touches neither:
//!   the capacity bound is exact without a separate budget RMW on the pop
//!   side.
//! - A displacing producer competes with the consumer for the head of a
//!   lower class (`Idle`, `Routine`), so those heads are claimed by CAS.
//!   Nobody displaces a `Critical` item, so the `Critical` head has a single
//!   writer, the consumer, and is claimed by a plain store. Tails are claimed
//!   by `fetch_add` (the admission already guaranteed the room).
//!
//! - The admission counter, the three tails and a *hint* of `removed` share
//!   one cache line, so a push's two RMWs hit one line, and a push reads the
//!   consumer's `removed` line only when the hint says the queue is full.
//!
//! Per push + pop that is three read-modify-write operations for `Idle` and
//! `Routine` items (admission CAS, tail `fetch_add`, head CAS) and two for
//! `Critical` items; a plain bounded MPMC ring (crossbeam's `ArrayQueue`)
//! has two. The third is the price of displacement: the consumer and a
//! displacing producer must agree on who takes a lower-class item.
//!
//! # Caveats
//!
//! - An item whose `push` has not returned yet may be popped after a
//!   lower-class item (the consumer does not wait for a producer that is
//!   between claiming its slot and writing it; it looks at the next class).
//!   FIFO within a class is never violated.
//! - A push decides "full" from the length it observes; if the consumer pops
//!   concurrently, the push may still displace an item although room has
//!   just been made. The capacity bound and the accounting stay exact.
//! - A displacing producer that finds the oldest lower-class item claimed but
//!   not yet written waits (spins, then yields) until its producer writes it;
//!   that window is a few instructions long.

use core::cell::Cell;
use core::fmt;
use core::marker::PhantomData;
use core::mem::MaybeUninit;

use crossbeam_utils::CachePadded;

use crate::error::{ConfigError, ConfigErrorKind};
use crate::sync::{Arc, AtomicUsize, Ordering, UnsafeCell};

/// The class of an item; lower classes give way first when the queue is full.
///
/// Ordered lowest first: `Idle < Routine < Critical`.
///
/// ```
/// use tailguard::dlq::Priority;
///
/// assert!(Priority::Idle < Priority::Routine);
/// assert!(Priority::Routine < Priority::Critical);
/// assert_eq!(Priority::ALL, [Priority::Idle, Priority::Routine, Priority::Critical]);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
pub enum Priority {
    /// Idle-ping-like traffic: shed first.
    Idle = 0,
    /// Ordinary traffic: shed only to make room for `Critical` items.
    Routine = 1,
    /// Traffic that must never be shed (compliance): never displaced.
    Critical = 2,
}

impl Priority {
    /// Every class, lowest first.
    pub const ALL: [Priority; 3] = [Priority::Idle, Priority::Routine, Priority::Critical];

    #[inline]
    const fn index(self) -> usize {
        self as usize
    }

    #[inline]
    const fn from_index(i: usize) -> Priority {
        match i {
            0 => Priority::Idle,
            1 => Priority::Routine,
            _ => Priority::Critical,
        }
    }
}

/// What a successful [`push`](DeadLetterQueue::push) did.
///
/// ```
/// use tailguard::dlq::{DeadLetterQueue, Priority, Pushed};
///
/// let dlq = DeadLetterQueue::with_capacity(1)?;
/// assert!(matches!(dlq.push("ping", Priority::Idle), Ok(Pushed::Queued)));
/// match dlq.push("order", Priority::Routine) {
///     Ok(Pushed::Displaced(old, class)) => {
///         assert_eq!((old, class), ("ping", Priority::Idle));
///     }
///     other => panic!("unexpected {other:?}"),
/// }
/// # Ok::<(), tailguard::ConfigError>(())
/// ```
#[must_use = "a displaced item is handed back and must be handled"]
#[derive(Debug, PartialEq, Eq)]
pub enum Pushed<T> {
    /// The item was queued and nothing gave way.
    Queued,
    /// The queue was full: the item was queued, and the oldest item of the
    /// lowest class present (given with its class) gave way and is handed
    /// back.
    Displaced(T, Priority),
}

/// The queue was full and nothing could give way; the item is handed back.
///
/// `Debug` does not need `T: Debug`.
///
/// ```
/// use tailguard::dlq::{DeadLetterQueue, Full, Priority};
///
/// let dlq = DeadLetterQueue::with_capacity(1)?;
/// dlq.push(1, Priority::Critical).unwrap();
/// let err: Full<i32> = dlq.push(2, Priority::Critical).unwrap_err();
/// assert_eq!(format!("{err:?}"), "Full(..)");
/// assert_eq!(err.into_inner(), 2);
/// # Ok::<(), tailguard::ConfigError>(())
/// ```
#[derive(PartialEq, Eq)]
pub struct Full<T>(pub T);

impl<T> Full<T> {
    /// Returns the item that could not be queued.
    ///
    /// ```
    /// use tailguard::dlq::Full;
    ///
    /// assert_eq!(Full(String::from("x")).into_inner(), "x");
    /// ```
    pub fn into_inner(self) -> T {
        self.0
    }
}

impl<T> fmt::Debug for Full<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Full(..)")
    }
}

impl<T> fmt::Display for Full<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("dead-letter queue is full and no lower-class item may give way")
    }
}

impl<T> std::error::Error for Full<T> {}

/// Counters of one class, see [`Stats`].
///
/// Each counter is read separately, so while the queue is in use a snapshot
/// may be a few operations out of step; once the producers and the consumer
/// are quiet, `pushed == popped + displaced + handed_back + depth` holds
/// exactly. Counters wrap at `usize::MAX` operations.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClassStats {
    /// Push attempts of this class: `queued + handed_back`.
    pub pushed: u64,
    /// Items of this class accepted into the queue.
    pub queued: u64,
    /// Items of this class returned by `pop`/`drain`.
    pub popped: u64,
    /// Items of this class that gave way to a higher class (handed back to
    /// the pusher in [`Pushed::Displaced`]).
    pub displaced: u64,
    /// Items of this class refused with [`Full`] (handed back).
    pub handed_back: u64,
    /// Items of this class in the queue now.
    pub depth: u64,
}

/// Per-class counters, from [`DeadLetterQueue::stats`] or
/// [`Producer::stats`].
///
/// ```
/// use tailguard::dlq::{DeadLetterQueue, Priority};
///
/// let dlq = DeadLetterQueue::with_capacity(2)?;
/// let _ = dlq.push(1, Priority::Idle);
/// let _ = dlq.push(2, Priority::Idle);
/// let _ = dlq.push(3, Priority::Routine); // displaces 1
/// let _ = dlq.push(4, Priority::Idle); // full, handed back
/// let _ = dlq.pop(); // 3
/// let s = dlq.stats();
/// let idle = s.class(Priority::Idle);
/// assert_eq!((idle.pushed, idle.displaced, idle.handed_back, idle.depth), (3, 1, 1, 1));
/// for c in Priority::ALL {
///     let c = s.class(c);
///     assert_eq!(c.pushed, c.popped + c.displaced + c.handed_back + c.depth);
/// }
/// # Ok::<(), tailguard::ConfigError>(())
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// `Priority::Idle`.
    pub idle: ClassStats,
    /// `Priority::Routine`.
    pub routine: ClassStats,
    /// `Priority::Critical`.
    pub critical: ClassStats,
}

impl Stats {
    /// The counters of one class.
    ///
    /// ```
    /// use tailguard::dlq::{Priority, Stats};
    ///
    /// assert_eq!(Stats::default().class(Priority::Critical).pushed, 0);
    /// ```
    pub fn class(&self, class: Priority) -> &ClassStats {
        match class {
            Priority::Idle => &self.idle,
            Priority::Routine => &self.routine,
            Priority::Critical => &self.critical,
        }
    }
}

/// The number of items of each class in the queue (the `fallback_depth`
/// metric), from [`DeadLetterQueue::fallback_depth`].
///
/// ```
/// use tailguard::dlq::{DeadLetterQueue, Priority};
///
/// let dlq = DeadLetterQueue::with_capacity(8)?;
/// let _ = dlq.push((), Priority::Critical);
/// let _ = dlq.push((), Priority::Idle);
/// let d = dlq.fallback_depth();
/// assert_eq!((d.idle, d.routine, d.critical, d.total()), (1, 0, 1, 2));
/// assert_eq!(d.class(Priority::Idle), 1);
/// # Ok::<(), tailguard::ConfigError>(())
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FallbackDepth {
    /// Items of class `Idle`.
    pub idle: usize,
    /// Items of class `Routine`.
    pub routine: usize,
    /// Items of class `Critical`.
    pub critical: usize,
}

impl FallbackDepth {
    /// The depth of one class.
    ///
    /// ```
    /// use tailguard::dlq::{FallbackDepth, Priority};
    ///
    /// assert_eq!(FallbackDepth::default().class(Priority::Routine), 0);
    /// ```
    pub fn class(&self, class: Priority) -> usize {
        match class {
            Priority::Idle => self.idle,
            Priority::Routine => self.routine,
            Priority::Critical => self.critical,
        }
    }

    /// The sum over the classes.
    ///
    /// ```
    /// use tailguard::dlq::FallbackDepth;
    ///
    /// assert_eq!(FallbackDepth { idle: 1, routine: 2, critical: 3 }.total(), 6);
    /// ```
    pub fn total(&self) -> usize {
        self.idle + self.routine + self.critical
    }
}

// ---------------------------------------------------------------------------
// Internals
// ---------------------------------------------------------------------------

/// One slot of a class ring.
struct Slot<T> {
    /// `p` when free for the producer of position `p`; `p + 1` when it holds
    /// the item of position `p`.
    seq: AtomicUsize,
    /// Initialised exactly when `seq == p + 1` for the slot's current `p`
    /// (and while the remover that claimed `p` has not yet taken it out).
    value: UnsafeCell<MaybeUninit<T>>,
}

/// A bounded FIFO of one class: producers add at the class's tail (kept in
/// [`Hot`], `fetch_add`; the admission guarantees room), the consumer and
/// displacing producers remove at `head` (CAS).
struct Ring<T> {
    head: CachePadded<AtomicUsize>,
    /// Slow-path counters of this class.
    slow: CachePadded<SlowCounters>,
    /// `slots.len() - 1`; `slots.len()` is a power of two.
    mask: usize,
    slots: Box<[Slot<T>]>,
}

/// Counters touched only on the slow paths (full queue).
struct SlowCounters {
    /// Removals of this class by displacement (the rest were pops).
    displaced: AtomicUsize,
    /// Pushes of this class refused with `Full`.
    handed_back: AtomicUsize,
}

/// What a remover found at the head of a ring.
enum Take<T> {
    /// The item at the head, now owned by the caller.
    Item(T),
    /// The ring is empty.
    Empty,
    /// The head item is claimed by its producer but not yet written.
    Pending,
}

impl<T> Ring<T> {
    fn new(slot_count: usize, start: usize) -> Result<Self, ConfigError> {
        let mut slots = Vec::new();
        slots.try_reserve_exact(slot_count).map_err(|_| too_large())?;
        let mask = slot_count - 1;
        // Slot `i` is free for the first position `p >= start` with
        // `p & mask == i`.
        let first = start & mask;
        for i in 0..slot_count {
            let offset = i.wrapping_sub(first) & mask;
            slots.push(Slot {
                seq: AtomicUsize::new(start.wrapping_add(offset)),
                value: UnsafeCell::new(MaybeUninit::uninit()),
            });
        }
        Ok(Ring {
            head: CachePadded::new(AtomicUsize::new(start)),
            slow: CachePadded::new(SlowCounters {
                displaced: AtomicUsize::new(0),
                handed_back: AtomicUsize::new(0),
            }),
            mask,
            slots: slots.into_boxed_slice(),
        })
    }

    #[inline]
    fn slot(&self, pos: usize) -> &Slot<T> {
        // `pos & mask < slots.len()`; the compiler keeps the bounds check
        // cheap and it guards the invariant.
        &self.slots[pos & self.mask]
    }

    /// Adds `item` at the tail.
    ///
    /// The caller must hold room for one item: either an admission (the
    /// logical length was raised by one) or a displacement (it removed one
    /// item from a ring first). Then fewer than `slots.len()` items of this
    /// ring are claimed-but-not-removed, so the previous occupant of the slot
    /// has been claimed by a remover and at most has to finish reading.
    #[inline]
    fn insert(&self, tail: &AtomicUsize, item: T) {
        let pos = tail.fetch_add(1, Ordering::AcqRel);
        let slot = self.slot(pos);
        let mut backoff = 0;
        // Acquire: pairs with the remover's Release store of `seq`, so its
        // read of the previous value happens-before our write.
        while slot.seq.load(Ordering::Acquire) != pos {
            spin(&mut backoff);
        }
        slot.value.with_mut(|p| {
            // SAFETY: `fetch_add` gave this thread position `pos` alone, and
            // `seq == pos` says the slot is free for `pos` (the previous item
            // has been moved out), so no other thread reads or writes it until
            // we publish with the store below.
            unsafe { p.write(MaybeUninit::new(item)) }
        });
        // Release: publishes the write to whoever sees `seq == pos + 1`.
        slot.seq.store(pos.wrapping_add(1), Ordering::Release);
    }

    /// Removes the item at the head, if one is written.
    #[inline]
    fn take(&self, tail: &AtomicUsize) -> Take<T> {
        loop {
            let head = self.head.load(Ordering::Acquire);
            let slot = self.slot(head);
            let seq = slot.seq.load(Ordering::Acquire);
            let diff = seq.wrapping_sub(head.wrapping_add(1)) as isize;
            if diff == 0 {
                if self
                    .head
                    .compare_exchange_weak(head, head.wrapping_add(1), Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok()
                {
                    let item = slot.value.with(|p| {
                        // SAFETY: `seq == head + 1` (loaded with Acquire,
                        // pairing with the producer's Release) says the slot
                        // holds the initialised item of position `head`, and
                        // winning the CAS on `head` made this thread its only
                        // remover; the producer of `head + slots` does not
                        // write until we store `seq` below.
                        unsafe { p.read().assume_init() }
                    });
                    // Release: our read happens-before the next writer's
                    // write.
                    slot.seq.store(head.wrapping_add(self.slots.len()), Ordering::Release);
                    return Take::Item(item);
                }
            } else if diff < 0 {
                // Not written for `head` yet: the ring is empty, or the
                // producer of `head` has claimed it and not written yet (or
                // waits for the previous lap's remover to finish reading).
                let tail = tail.load(Ordering::Acquire);
                // Re-check `head`: if it moved, our view was stale.
                if self.head.load(Ordering::Acquire) == head {
                    return if tail == head { Take::Empty } else { Take::Pending };
                }
            }
            // Otherwise `head` was stale (another remover took it); retry.
            core::hint::spin_loop();
        }
    }

    /// The consumer's removal from a ring that displacing producers may also
    /// remove from: like [`take`](Self::take), but an empty ring and a
    /// pending head are both `None` (the consumer moves on either way), which
    /// saves two loads per empty class.
    #[inline]
    fn pop_shared(&self) -> Option<T> {
        loop {
            let head = self.head.load(Ordering::Acquire);
            let slot = self.slot(head);
            let seq = slot.seq.load(Ordering::Acquire);
            let diff = seq.wrapping_sub(head.wrapping_add(1)) as isize;
            if diff < 0 {
                return None;
            }
            if diff == 0
                && self
                    .head
                    .compare_exchange_weak(head, head.wrapping_add(1), Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok()
            {
                let item = slot.value.with(|p| {
                    // SAFETY: as in `take`: `seq == head + 1` (Acquire) says
                    // the slot holds the initialised item of `head`, and the
                    // won CAS on `head` makes this thread its only remover.
                    unsafe { p.read().assume_init() }
                });
                slot.seq.store(head.wrapping_add(self.slots.len()), Ordering::Release);
                return Some(item);
            }
            // `head` was stale or the CAS failed: another remover (a
            // displacing producer) took the head; retry.
            core::hint::spin_loop();
        }
    }

    /// The consumer's removal from a ring that nobody else removes from
    /// (the `Critical` ring: it is never a displacement target): `head` has a
    /// single writer, so it is claimed by a plain store, not an RMW.
    #[inline]
    fn pop_unshared(&self) -> Option<T> {
        let head = self.head.load(Ordering::Relaxed);
        let slot = self.slot(head);
        if slot.seq.load(Ordering::Acquire) != head.wrapping_add(1) {
            return None;
        }
        let item = slot.value.with(|p| {
            // SAFETY: the caller is the single consumer and this ring is
            // never displaced from (`displace_below` only visits classes
            // below the pusher's, never `Critical`), so this thread is the
            // only remover; `seq == head + 1` (Acquire, pairing with the
            // producer's Release) says the slot holds the initialised item of
            // `head`, and no producer writes it before the `seq` store below.
            unsafe { p.read().assume_init() }
        });
        slot.seq.store(head.wrapping_add(self.slots.len()), Ordering::Release);
        self.head.store(head.wrapping_add(1), Ordering::Release);
        Some(item)
    }

    /// Items claimed in this ring and not yet removed (`tail - head`),
    /// clamped to `cap`.
    fn depth(&self, tail: &AtomicUsize, cap: usize) -> usize {
        let head = self.head.load(Ordering::Acquire);
        let tail = tail.load(Ordering::Acquire);
        tail.wrapping_sub(head).min(cap)
    }

    /// With exclusive access: takes the next remaining item out.
    fn take_exclusive(&mut self) -> Option<T> {
        let head = self.head.load(Ordering::Relaxed);
        let slot = self.slot(head);
        if slot.seq.load(Ordering::Relaxed) != head.wrapping_add(1) {
            return None;
        }
        let item = slot.value.with(|p| {
            // SAFETY: `&mut self` excludes every other access, and
            // `seq == head + 1` says the slot holds the initialised item of
            // position `head`; advancing `head` and `seq` below makes sure it
            // is never read again.
            unsafe { p.read().assume_init() }
        });
        slot.seq.store(head.wrapping_add(self.slots.len()), Ordering::Relaxed);
        self.head.store(head.wrapping_add(1), Ordering::Relaxed);
        Some(item)
    }

    /// Drops every remaining item once, even if one of their `Drop`s panics.
    fn drop_remaining(&mut self) {
        /// Keeps dropping the rest if an item's `Drop` unwinds.
        struct Rest<'a, T>(&'a mut Ring<T>);
        impl<T> Drop for Rest<'_, T> {
            fn drop(&mut self) {
                self.0.drop_remaining();
            }
        }
        while let Some(item) = self.take_exclusive() {
            let rest = Rest(self);
            drop(item);
            core::mem::forget(rest);
        }
    }
}

impl<T> Drop for Ring<T> {
    fn drop(&mut self) {
        self.drop_remaining();
    }
}

fn too_large() -> ConfigError {
    ConfigError::new(
        "capacity",
        ConfigErrorKind::TooLarge,
        "the queue's slots (3 rings of capacity.next_power_of_two().max(2) slots) could not be allocated",
    )
}

/// Waits a little for another thread's short critical window to end.
#[inline]
fn spin(backoff: &mut u32) {
    #[cfg(tailguard_loom)]
    {
        let _ = backoff;
        loom::thread::yield_now();
    }
    #[cfg(not(tailguard_loom))]
    {
        if *backoff < 6 {
            for _ in 0..(1u32 << *backoff) {
                core::hint::spin_loop();
            }
            *backoff += 1;
        } else {
            std::thread::yield_now();
        }
    }
}

/// The producers' side, kept in one cache line so that a push's two RMWs
/// (admission, then tail) hit the same line.
struct Hot {
    /// Items ever admitted (pushes that raised the length), wrapping.
    admitted: AtomicUsize,
    /// A past value of `removed` (so `removed_hint <= removed`, up to
    /// wrapping), refreshed by producers that find the queue looks full:
    /// admission checks against it first and reads the consumer's `removed`
    /// line only when the hint says full.
    removed_hint: AtomicUsize,
    /// The tail of each class ring, indexed by `Priority::index`.
    tails: [AtomicUsize; 3],
}

/// The shared state of a queue.
struct Inner<T> {
    /// What every push touches, in one cache line.
    hot: CachePadded<Hot>,
    /// Items ever popped, wrapping. Written only by the single consumer.
    removed: CachePadded<AtomicUsize>,
    /// Logical capacity: `admitted - removed <= capacity` always.
    capacity: usize,
    /// The starting position of every counter (non-zero only in tests of
    /// wraparound).
    start: usize,
    /// One ring per class, indexed by `Priority::index`.
    rings: [Ring<T>; 3],
}

// SAFETY: items move between threads (pushed on one, popped or dropped on
// another), so `T: Send` is required and sufficient: the slots are only
// accessed under the `seq` protocol, which gives each item one owner at a
// time, and no `&T` is ever shared between threads.
unsafe impl<T: Send> Send for Inner<T> {}
// SAFETY: as above: a shared `&Inner<T>` only lets threads move `T`s in and
// out through the `seq` protocol; it never hands out `&T`.
unsafe impl<T: Send> Sync for Inner<T> {}

impl<T> Inner<T> {
    fn new(capacity: usize, start: usize) -> Result<Self, ConfigError> {
        if capacity == 0 {
            return Err(ConfigError::new(
                "capacity",
                ConfigErrorKind::Zero,
                "a dead-letter queue needs room for at least one item",
            ));
        }
        // Each ring gets a power-of-two number of slots >= capacity, and at
        // least 2: with a single slot, `seq == p + 1` would mean both "full
        // for `p`" and "free for `p + 1`", and a producer could write the
        // slot while its previous item is still being read (loom found this
        // for capacity 1). The three rings together must fit in an
        // allocation (`isize::MAX` bytes).
        let slots = capacity.checked_next_power_of_two().ok_or_else(too_large)?.max(2);
        let bytes = slots
            .checked_mul(core::mem::size_of::<Slot<T>>())
            .filter(|&b| b <= isize::MAX as usize)
            .ok_or_else(too_large)?;
        // Leave room for the positions: `capacity` must stay far below the
        // wrapping range of the counters.
        if bytes.checked_mul(3).is_none() || capacity > usize::MAX / 4 {
            return Err(too_large());
        }
        Ok(Inner {
            hot: CachePadded::new(Hot {
                admitted: AtomicUsize::new(start),
                removed_hint: AtomicUsize::new(start),
                tails: [
                    AtomicUsize::new(start),
                    AtomicUsize::new(start),
                    AtomicUsize::new(start),
                ],
            }),
            removed: CachePadded::new(AtomicUsize::new(start)),
            capacity,
            start,
            rings: [
                Ring::new(slots, start)?,
                Ring::new(slots, start)?,
                Ring::new(slots, start)?,
            ],
        })
    }

    #[inline]
    fn push(&self, mut item: T, class: Priority) -> Result<Pushed<T>, Full<T>> {
        let hot = &*self.hot;
        loop {
            // Read the hint before `admitted`: `hint <= removed <= admitted`
            // at all times, so the difference never underflows; a stale hint
            // only makes the length look longer.
            let hint = hot.removed_hint.load(Ordering::Relaxed);
            let admitted = hot.admitted.load(Ordering::Acquire);
            if admitted.wrapping_sub(hint) < self.capacity {
                if hot
                    .admitted
                    .compare_exchange_weak(admitted, admitted.wrapping_add(1), Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok()
                {
                    self.rings[class.index()].insert(&hot.tails[class.index()], item);
                    return Ok(Pushed::Queued);
                }
                continue;
            }
            // The hint says full: refresh it from the consumer's counter
            // (a value of `removed`, so it stays `<= removed`).
            let removed = self.removed.load(Ordering::Acquire);
            if removed != hint {
                hot.removed_hint.store(removed, Ordering::Relaxed);
                continue;
            }
            match self.push_full(item, class) {
                Ok(done) => return done,
                // Room was made meanwhile: take the ordinary path again.
                Err(back) => item = back,
            }
        }
    }

    /// The slow path of `push`, when the queue looked full. `Err(item)` asks
    /// the caller to retry the ordinary path (room was made).
    #[cold]
    #[inline(never)]
    fn push_full(&self, item: T, class: Priority) -> Result<Result<Pushed<T>, Full<T>>, T> {
        // A consistent snapshot of the length: `removed` unchanged on both
        // sides of the read of `admitted`.
        let removed = self.removed.load(Ordering::Acquire);
        let admitted = self.hot.admitted.load(Ordering::Acquire);
        if self.removed.load(Ordering::Acquire) != removed || admitted.wrapping_sub(removed) < self.capacity {
            return Err(item);
        }
        // Full. Take the oldest item of the lowest class below ours.
        if let Some((old, old_class)) = self.displace_below(class) {
            self.rings[class.index()].insert(&self.hot.tails[class.index()], item);
            return Ok(Ok(Pushed::Displaced(old, old_class)));
        }
        // Nothing below us; unless room was made meanwhile, the item is
        // handed back.
        if self.removed.load(Ordering::Acquire) != removed {
            return Err(item);
        }
        self.rings[class.index()]
            .slow
            .handed_back
            .fetch_add(1, Ordering::Relaxed);
        Ok(Err(Full(item)))
    }

    /// Removes the oldest item of the lowest non-empty class below `class`.
    fn displace_below(&self, class: Priority) -> Option<(T, Priority)> {
        for i in 0..class.index() {
            let ring = &self.rings[i];
            let mut backoff = 0;
            loop {
                match ring.take(&self.hot.tails[i]) {
                    Take::Item(old) => {
                        ring.slow.displaced.fetch_add(1, Ordering::Relaxed);
                        return Some((old, Priority::from_index(i)));
                    }
                    Take::Empty => break,
                    // Its producer is between claiming and writing: wait for
                    // it, so that the oldest item of the lowest class gives
                    // way (not a later one, nor one of a higher class).
                    Take::Pending => spin(&mut backoff),
                }
            }
        }
        None
    }

    /// Consumer only (the caller is the single consumer).
    #[inline]
    fn pop(&self) -> Option<(T, Priority)> {
        let found = if let Some(item) = self.rings[Priority::Critical.index()].pop_unshared() {
            (item, Priority::Critical)
        } else if let Some(item) = self.rings[Priority::Routine.index()].pop_shared() {
            (item, Priority::Routine)
        } else if let Some(item) = self.rings[Priority::Idle.index()].pop_shared() {
            (item, Priority::Idle)
        } else {
            return None;
        };
        // Single writer: a load and a store, not an RMW. Release: a producer
        // that sees the new length also sees the slot freed (the `seq` store
        // precedes this store).
        let removed = self.removed.load(Ordering::Relaxed);
        self.removed.store(removed.wrapping_add(1), Ordering::Release);
        Some(found)
    }

    fn len(&self) -> usize {
        let removed = self.removed.load(Ordering::Acquire);
        let admitted = self.hot.admitted.load(Ordering::Acquire);
        admitted.wrapping_sub(removed).min(self.capacity)
    }

    fn fallback_depth(&self) -> FallbackDepth {
        FallbackDepth {
            idle: self.rings[0].depth(&self.hot.tails[0], self.capacity),
            routine: self.rings[1].depth(&self.hot.tails[1], self.capacity),
            critical: self.rings[2].depth(&self.hot.tails[2], self.capacity),
        }
    }

    fn class_stats(&self, class: Priority) -> ClassStats {
        let ring = &self.rings[class.index()];
        // Read `displaced` before `head` and `head` before `tail`, so that
        // `removed >= displaced` and `queued >= removed`.
        let displaced = ring.slow.displaced.load(Ordering::Acquire) as u64;
        let handed_back = ring.slow.handed_back.load(Ordering::Acquire) as u64;
        let removed = ring.head.load(Ordering::Acquire).wrapping_sub(self.start) as u64;
        let queued = self.hot.tails[class.index()]
            .load(Ordering::Acquire)
            .wrapping_sub(self.start) as u64;
        ClassStats {
            pushed: queued + handed_back,
            queued,
            popped: removed.saturating_sub(displaced),
            displaced,
            handed_back,
            depth: queued.saturating_sub(removed).min(self.capacity as u64),
        }
    }

    fn stats(&self) -> Stats {
        Stats {
            idle: self.class_stats(Priority::Idle),
            routine: self.class_stats(Priority::Routine),
            critical: self.class_stats(Priority::Critical),
        }
    }
}

// ---------------------------------------------------------------------------
// Public handles
// ---------------------------------------------------------------------------

/// A bounded, priority-aware MPSC dead-letter queue; this value is also its
/// single consumer.
///
/// See the [module documentation](self) for the behaviour and the design.
/// `DeadLetterQueue<T>` is `Send` but not `Sync` and not `Clone`, so only one
/// thread at a time can [`pop`](Self::pop); other threads push (and read the
/// metrics) through [`Producer`]s from [`producer`](Self::producer).
///
/// ```
/// use tailguard::dlq::{DeadLetterQueue, Priority};
///
/// let dlq: DeadLetterQueue<u64> = DeadLetterQueue::with_capacity(1024)?;
/// match dlq.push(7, Priority::Critical) {
///     Ok(_) => {}
///     Err(full) => { let _item = full.into_inner(); }
/// }
/// let next: Option<(u64, Priority)> = dlq.pop(); // one consumer at a time
/// assert_eq!(next, Some((7, Priority::Critical)));
/// # Ok::<(), tailguard::ConfigError>(())
/// ```
///
/// The consumer cannot be shared between threads:
///
/// ```compile_fail
/// use tailguard::dlq::DeadLetterQueue;
///
/// fn is_sync<T: Sync>(_: &T) {}
/// let dlq = DeadLetterQueue::<u64>::with_capacity(4).unwrap();
/// is_sync(&dlq);
/// ```
///
/// nor cloned:
///
/// ```compile_fail
/// use tailguard::dlq::DeadLetterQueue;
///
/// let dlq = DeadLetterQueue::<u64>::with_capacity(4).unwrap();
/// let second = dlq.clone();
/// ```
pub struct DeadLetterQueue<T> {
    inner: Arc<Inner<T>>,
    /// Makes the consumer `!Sync` (it stays `Send`).
    _not_sync: PhantomData<Cell<()>>,
}

/// A handle that pushes into a [`DeadLetterQueue`] from any thread and reads
/// its metrics; `Clone + Send + Sync`.
///
/// ```
/// use std::thread;
/// use tailguard::dlq::{DeadLetterQueue, Priority};
///
/// let dlq = DeadLetterQueue::with_capacity(16)?;
/// let producer = dlq.producer();
/// thread::spawn(move || producer.push("late", Priority::Routine).map(|_| ()))
///     .join()
///     .unwrap()
///     .unwrap();
/// assert_eq!(dlq.pop(), Some(("late", Priority::Routine)));
/// # Ok::<(), tailguard::ConfigError>(())
/// ```
pub struct Producer<T> {
    inner: Arc<Inner<T>>,
}

impl<T> Clone for Producer<T> {
    fn clone(&self) -> Self {
        Producer {
            inner: self.inner.clone(),
        }
    }
}

impl<T> fmt::Debug for Producer<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Producer")
            .field("capacity", &self.inner.capacity)
            .field("len", &self.inner.len())
            .finish_non_exhaustive()
    }
}

impl<T> fmt::Debug for DeadLetterQueue<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeadLetterQueue")
            .field("capacity", &self.inner.capacity)
            .field("len", &self.inner.len())
            .finish_non_exhaustive()
    }
}

impl<T> DeadLetterQueue<T> {
    /// Creates a queue that holds at most `capacity` items, allocating every
    /// slot now (three rings of `capacity.next_power_of_two().max(2)` slots).
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] for the field `"capacity"`: kind `Zero` for 0, kind
    /// `TooLarge` when the slots would not fit in an allocation or cannot be
    /// allocated.
    ///
    /// ```
    /// use tailguard::ConfigErrorKind;
    /// use tailguard::dlq::DeadLetterQueue;
    ///
    /// assert_eq!(DeadLetterQueue::<u8>::with_capacity(3)?.capacity(), 3);
    /// let err = DeadLetterQueue::<u8>::with_capacity(0).unwrap_err();
    /// assert_eq!((err.field(), err.kind()), ("capacity", ConfigErrorKind::Zero));
    /// let err = DeadLetterQueue::<u8>::with_capacity(usize::MAX).unwrap_err();
    /// assert_eq!(err.kind(), ConfigErrorKind::TooLarge);
    /// # Ok::<(), tailguard::ConfigError>(())
    /// ```
    pub fn with_capacity(capacity: usize) -> Result<Self, ConfigError> {
        Self::with_start(capacity, 0)
    }

    /// Test support: a queue whose internal positions all start at `start`
    /// (for example `usize::MAX - 10`), so that wraparound is reached at once.
    /// Behaves exactly like [`with_capacity`](Self::with_capacity) otherwise.
    ///
    /// ```
    /// use tailguard::dlq::{DeadLetterQueue, Priority};
    ///
    /// let dlq = DeadLetterQueue::__with_capacity_starting_at(2, usize::MAX - 1)?;
    /// for i in 0..10 {
    ///     dlq.push(i, Priority::Idle).unwrap();
    ///     assert_eq!(dlq.pop(), Some((i, Priority::Idle)));
    /// }
    /// # Ok::<(), tailguard::ConfigError>(())
    /// ```
    #[doc(hidden)]
    pub fn __with_capacity_starting_at(capacity: usize, start: usize) -> Result<Self, ConfigError> {
        Self::with_start(capacity, start)
    }

    fn with_start(capacity: usize, start: usize) -> Result<Self, ConfigError> {
        Ok(DeadLetterQueue {
            inner: Arc::new(Inner::new(capacity, start)?),
            _not_sync: PhantomData,
        })
    }

    /// A new handle that pushes from other threads.
    ///
    /// ```
    /// use tailguard::dlq::{DeadLetterQueue, Priority};
    ///
    /// let dlq = DeadLetterQueue::with_capacity(4)?;
    /// let p = dlq.producer();
    /// let _ = p.push(1u8, Priority::Idle);
    /// assert_eq!(dlq.len(), 1);
    /// # Ok::<(), tailguard::ConfigError>(())
    /// ```
    pub fn producer(&self) -> Producer<T> {
        Producer {
            inner: self.inner.clone(),
        }
    }

    /// Pushes `item` with class `class`; lock-free, never allocates.
    ///
    /// Returns `Ok(Pushed::Queued)`, or `Ok(Pushed::Displaced(old, class))`
    /// when the queue was full and the oldest item of the lowest class
    /// present below `class` gave way, or `Err(Full(item))` when nothing
    /// may give way.
    ///
    /// ```
    /// use tailguard::dlq::{DeadLetterQueue, Full, Priority, Pushed};
    ///
    /// let dlq = DeadLetterQueue::with_capacity(1)?;
    /// assert_eq!(dlq.push('a', Priority::Routine), Ok(Pushed::Queued));
    /// assert_eq!(dlq.push('b', Priority::Routine), Err(Full('b')));
    /// assert_eq!(dlq.push('c', Priority::Critical), Ok(Pushed::Displaced('a', Priority::Routine)));
    /// # Ok::<(), tailguard::ConfigError>(())
    /// ```
    #[inline]
    pub fn push(&self, item: T, class: Priority) -> Result<Pushed<T>, Full<T>> {
        self.inner.push(item, class)
    }

    /// Removes the next item: the oldest of the highest class present.
    ///
    /// Returns `None` when the queue is empty (or holds only items whose
    /// `push` has not returned yet).
    ///
    /// ```
    /// use tailguard::dlq::{DeadLetterQueue, Priority};
    ///
    /// let dlq = DeadLetterQueue::with_capacity(4)?;
    /// let _ = dlq.push(1, Priority::Idle);
    /// let _ = dlq.push(2, Priority::Critical);
    /// let _ = dlq.push(3, Priority::Idle);
    /// assert_eq!(dlq.pop(), Some((2, Priority::Critical)));
    /// assert_eq!(dlq.pop(), Some((1, Priority::Idle)));
    /// assert_eq!(dlq.pop(), Some((3, Priority::Idle)));
    /// assert_eq!(dlq.pop(), None);
    /// # Ok::<(), tailguard::ConfigError>(())
    /// ```
    #[inline]
    pub fn pop(&self) -> Option<(T, Priority)> {
        self.inner.pop()
    }

    /// Pops up to `max` items, in [`pop`](Self::pop) order, passing each to
    /// `f`; returns how many were passed. For batch replay.
    ///
    /// `f` may push into the queue (even the item back); each item is popped
    /// before `f` sees it.
    ///
    /// ```
    /// use tailguard::dlq::{DeadLetterQueue, Priority};
    ///
    /// let dlq = DeadLetterQueue::with_capacity(8)?;
    /// for i in 0..5 {
    ///     let _ = dlq.push(i, Priority::Routine);
    /// }
    /// let mut replayed = Vec::new();
    /// assert_eq!(dlq.drain(3, |item, _class| replayed.push(item)), 3);
    /// assert_eq!(replayed, [0, 1, 2]);
    /// assert_eq!(dlq.len(), 2);
    /// # Ok::<(), tailguard::ConfigError>(())
    /// ```
    pub fn drain(&self, max: usize, mut f: impl FnMut(T, Priority)) -> usize {
        let mut n = 0;
        while n < max {
            match self.inner.pop() {
                Some((item, class)) => {
                    n += 1;
                    f(item, class);
                }
                None => break,
            }
        }
        n
    }

    /// The number of items in the queue.
    ///
    /// ```
    /// use tailguard::dlq::{DeadLetterQueue, Priority};
    ///
    /// let dlq = DeadLetterQueue::with_capacity(4)?;
    /// let _ = dlq.push((), Priority::Idle);
    /// assert_eq!(dlq.len(), 1);
    /// # Ok::<(), tailguard::ConfigError>(())
    /// ```
    pub fn len(&self) -> usize {
        self.inner.len()
    }

    /// Whether the queue holds no item.
    ///
    /// ```
    /// use tailguard::dlq::DeadLetterQueue;
    ///
    /// assert!(DeadLetterQueue::<()>::with_capacity(4)?.is_empty());
    /// # Ok::<(), tailguard::ConfigError>(())
    /// ```
    pub fn is_empty(&self) -> bool {
        self.inner.len() == 0
    }

    /// The most items the queue holds.
    ///
    /// ```
    /// use tailguard::dlq::DeadLetterQueue;
    ///
    /// assert_eq!(DeadLetterQueue::<()>::with_capacity(5)?.capacity(), 5);
    /// # Ok::<(), tailguard::ConfigError>(())
    /// ```
    pub fn capacity(&self) -> usize {
        self.inner.capacity
    }

    /// The number of items of each class in the queue.
    ///
    /// ```
    /// use tailguard::dlq::{DeadLetterQueue, Priority};
    ///
    /// let dlq = DeadLetterQueue::with_capacity(4)?;
    /// let _ = dlq.push((), Priority::Routine);
    /// assert_eq!(dlq.fallback_depth().routine, 1);
    /// # Ok::<(), tailguard::ConfigError>(())
    /// ```
    pub fn fallback_depth(&self) -> FallbackDepth {
        self.inner.fallback_depth()
    }

    /// The per-class counters (see [`Stats`]).
    ///
    /// ```
    /// use tailguard::dlq::{DeadLetterQueue, Priority};
    ///
    /// let dlq = DeadLetterQueue::with_capacity(4)?;
    /// let _ = dlq.push((), Priority::Routine);
    /// assert_eq!(dlq.stats().routine.queued, 1);
    /// # Ok::<(), tailguard::ConfigError>(())
    /// ```
    pub fn stats(&self) -> Stats {
        self.inner.stats()
    }
}

impl<T> Producer<T> {
    /// Pushes `item`; see [`DeadLetterQueue::push`].
    ///
    /// ```
    /// use tailguard::dlq::{DeadLetterQueue, Priority, Pushed};
    ///
    /// let dlq = DeadLetterQueue::with_capacity(4)?;
    /// assert_eq!(dlq.producer().push(9, Priority::Critical), Ok(Pushed::Queued));
    /// # Ok::<(), tailguard::ConfigError>(())
    /// ```
    #[inline]
    pub fn push(&self, item: T, class: Priority) -> Result<Pushed<T>, Full<T>> {
        self.inner.push(item, class)
    }

    /// The number of items in the queue; see [`DeadLetterQueue::len`].
    ///
    /// ```
    /// use tailguard::dlq::DeadLetterQueue;
    ///
    /// assert_eq!(DeadLetterQueue::<()>::with_capacity(4)?.producer().len(), 0);
    /// # Ok::<(), tailguard::ConfigError>(())
    /// ```
    pub fn len(&self) -> usize {
        self.inner.len()
    }

    /// Whether the queue holds no item.
    ///
    /// ```
    /// use tailguard::dlq::DeadLetterQueue;
    ///
    /// assert!(DeadLetterQueue::<()>::with_capacity(4)?.producer().is_empty());
    /// # Ok::<(), tailguard::ConfigError>(())
    /// ```
    pub fn is_empty(&self) -> bool {
        self.inner.len() == 0
    }

    /// The most items the queue holds.
    ///
    /// ```
    /// use tailguard::dlq::DeadLetterQueue;
    ///
    /// assert_eq!(DeadLetterQueue::<()>::with_capacity(4)?.producer().capacity(), 4);
    /// # Ok::<(), tailguard::ConfigError>(())
    /// ```
    pub fn capacity(&self) -> usize {
        self.inner.capacity
    }

    /// The number of items of each class; see
    /// [`DeadLetterQueue::fallback_depth`].
    ///
    /// ```
    /// use tailguard::dlq::DeadLetterQueue;
    ///
    /// assert_eq!(DeadLetterQueue::<()>::with_capacity(4)?.producer().fallback_depth().total(), 0);
    /// # Ok::<(), tailguard::ConfigError>(())
    /// ```
    pub fn fallback_depth(&self) -> FallbackDepth {
        self.inner.fallback_depth()
    }

    /// The per-class counters; see [`Stats`].
    ///
    /// ```
    /// use tailguard::dlq::DeadLetterQueue;
    ///
    /// assert_eq!(DeadLetterQueue::<()>::with_capacity(4)?.producer().stats().idle.pushed, 0);
    /// # Ok::<(), tailguard::ConfigError>(())
    /// ```
    pub fn stats(&self) -> Stats {
        self.inner.stats()
    }
}

#[cfg(all(test, not(tailguard_loom)))]
mod tests {
    use super::*;

    #[test]
    fn send_sync_shape() {
        fn send<X: Send>() {}
        fn sync<X: Sync>() {}
        send::<DeadLetterQueue<String>>();
        send::<Producer<String>>();
        sync::<Producer<String>>();
    }

    #[test]
    fn initial_seq_layout_wraps() {
        let inner = Inner::<u8>::new(3, usize::MAX - 1).unwrap();
        let ring = &inner.rings[0];
        assert_eq!(ring.slots.len(), 4);
        for k in 0..4usize {
            let pos = (usize::MAX - 1).wrapping_add(k);
            assert_eq!(ring.slot(pos).seq.load(Ordering::Relaxed), pos);
        }
    }

    #[test]
    fn a_ring_has_at_least_two_slots() {
        let inner = Inner::<u8>::new(1, 0).unwrap();
        assert!(inner.rings.iter().all(|r| r.slots.len() == 2));
    }

    #[test]
    fn wrap_every_capacity_from_near_max() {
        for cap in 1..=5 {
            let q = DeadLetterQueue::__with_capacity_starting_at(cap, usize::MAX - 7).unwrap();
            let mut next = 0u32;
            let mut expect = 0u32;
            for round in 0..40 {
                let burst = round % (cap + 1);
                for _ in 0..burst {
                    assert_eq!(q.push(next, Priority::Routine), Ok(Pushed::Queued));
                    next += 1;
                }
                while let Some((v, c)) = q.pop() {
                    assert_eq!((v, c), (expect, Priority::Routine));
                    expect += 1;
                }
            }
            assert_eq!(next, expect);
            let s = q.stats().routine;
            assert_eq!((s.pushed, s.popped, s.depth), (next as u64, next as u64, 0));
        }
    }

    #[test]
    fn too_large_is_an_error() {
        let e = DeadLetterQueue::<[u8; 1024]>::with_capacity(usize::MAX / 2).unwrap_err();
        assert_eq!(e.kind(), ConfigErrorKind::TooLarge);
        assert_eq!(e.field(), "capacity");
    }
}
