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
use crate::sync::{Arc, AtomicU64, AtomicUsize, Ordering, UnsafeCell};

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
            crate::sync::spin(&mut backoff);
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

    /// Removes the item at the head for a remover that has already claimed
    /// one item of this class in the occupancy word: the item exists (its
    /// producer was admitted), so wait while it is in transit (its producer
    /// between admission and writing it).
    fn take_claimed(&self, tail: &AtomicUsize) -> T {
        let mut backoff = 0;
        loop {
            match self.take(tail) {
                Take::Item(item) => return item,
                Take::Empty | Take::Pending => crate::sync::spin(&mut backoff),
            }
        }
    }

    /// Takes the item at position `head`, which the caller saw written, if
    /// `head` is still the head (no other remover took it meanwhile).
    #[inline]
    fn take_at(&self, head: usize) -> Option<T> {
        self.head
            .compare_exchange(head, head.wrapping_add(1), Ordering::AcqRel, Ordering::Relaxed)
            .ok()?;
        let slot = self.slot(head);
        let item = slot.value.with(|p| {
            // SAFETY: the caller saw `seq == head + 1` (Acquire, pairing with
            // the producer's Release): the slot holds the initialised item of
            // `head`; winning the CAS on `head` made this thread its only
            // remover, and no producer writes it before the `seq` store below.
            unsafe { p.read().assume_init() }
        });
        slot.seq.store(head.wrapping_add(self.slots.len()), Ordering::Release);
        Some(item)
    }

    /// Whether the head slot holds a written item (for the consumer, which
    /// only commits to a class whose next item is already written).
    #[inline]
    fn head_ready(&self) -> bool {
        let head = self.head.load(Ordering::Acquire);
        self.slot(head).seq.load(Ordering::Acquire) == head.wrapping_add(1)
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
            // never displaced from (a push only displaces classes below its
            // own, never `Critical`), so this thread is the only remover;
            // `seq == head + 1` (Acquire, pairing with the producer's Release)
            // says the slot holds the initialised item of `head`, and no
            // producer writes it before the `seq` store below.
            unsafe { p.read().assume_init() }
        });
        slot.seq.store(head.wrapping_add(self.slots.len()), Ordering::Release);
        self.head.store(head.wrapping_add(1), Ordering::Release);
        Some(item)
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

/// Bits per count in the occupancy word.
const CLASS_BITS: u32 = 21;
const CLASS_MASK: u64 = (1 << CLASS_BITS) - 1;
/// Where the total is kept in the occupancy word.
const TOTAL_SHIFT: u32 = 2 * CLASS_BITS;
/// The largest capacity a queue accepts (2^21 − 1 items): each count of
/// the occupancy word must fit in its 21 bits.
///
/// ```
/// use tailguard::dlq::{DeadLetterQueue, MAX_CAPACITY};
///
/// assert_eq!(MAX_CAPACITY, 2_097_151);
/// assert!(DeadLetterQueue::<u8>::with_capacity(MAX_CAPACITY + 1).is_err());
/// ```
pub const MAX_CAPACITY: usize = CLASS_MASK as usize;

/// What every push and pop touches, in one cache line.
struct Hot {
    /// The occupancy word: the items of class `Idle` (bits 0–20), of class
    /// `Routine` (bits 21–41), and of all classes (bits 42–63; `Critical`
    /// is the rest), each item counted from the moment its push is admitted
    /// (even before it is written) until the moment a remover claims it
    /// (even before it is taken out). Every admission, displacement and
    /// removal is one CAS on it, so the counts are always exact and an item
    /// is never in transit between two counters.
    occupancy: AtomicU64,
    /// The tail of each class ring, indexed by `Priority::index`.
    tails: [AtomicUsize; 3],
}

/// Items of every class in an occupancy word.
#[inline]
fn total(occupancy: u64) -> usize {
    (occupancy >> TOTAL_SHIFT) as usize
}

/// Items of class `class` (an index) in an occupancy word.
#[inline]
fn count(occupancy: u64, class: usize) -> usize {
    let field = |c: usize| ((occupancy >> (CLASS_BITS * c as u32)) & CLASS_MASK) as usize;
    if class < 2 {
        field(class)
    } else {
        total(occupancy) - field(0) - field(1)
    }
}

/// What one item of class `class` (an index) adds to an occupancy word.
#[inline]
fn one(class: usize) -> u64 {
    let own = if class < 2 { 1 << (CLASS_BITS * class as u32) } else { 0 };
    (1 << TOTAL_SHIFT) | own
}

/// The shared state of a queue.
struct Inner<T> {
    hot: CachePadded<Hot>,
    /// Logical capacity: the counts of the occupancy word sum to at most
    /// this, always.
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
        if capacity > MAX_CAPACITY {
            return Err(ConfigError::new(
                "capacity",
                ConfigErrorKind::TooLarge,
                "must be at most 2,097,151 items (dlq::MAX_CAPACITY)",
            ));
        }
        // Each ring gets a power-of-two number of slots >= capacity, and at
        // least 2: with a single slot, `seq == p + 1` would mean both "full
        // for `p`" and "free for `p + 1`", and a producer could write the
        // slot while its previous item is still being read (loom found this
        // for capacity 1). The three rings together must fit in an
        // allocation (`isize::MAX` bytes).
        let slots = capacity.next_power_of_two().max(2);
        let bytes = slots
            .checked_mul(core::mem::size_of::<Slot<T>>())
            .filter(|&b| b <= isize::MAX as usize)
            .ok_or_else(too_large)?;
        if bytes.checked_mul(3).is_none() {
            return Err(too_large());
        }
        Ok(Inner {
            hot: CachePadded::new(Hot {
                occupancy: AtomicU64::new(0),
                tails: [
                    AtomicUsize::new(start),
                    AtomicUsize::new(start),
                    AtomicUsize::new(start),
                ],
            }),
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
    fn push(&self, item: T, class: Priority) -> Result<Pushed<T>, Full<T>> {
        let c = class.index();
        let occupancy = &self.hot.occupancy;
        let mut cur = occupancy.load(Ordering::Acquire);
        loop {
            if total(cur) < self.capacity {
                match occupancy.compare_exchange_weak(cur, cur + one(c), Ordering::AcqRel, Ordering::Acquire) {
                    Ok(_) => {
                        self.rings[c].insert(&self.hot.tails[c], item);
                        return Ok(Pushed::Queued);
                    }
                    Err(actual) => cur = actual,
                }
                continue;
            }
            return self.push_full(cur, item, class);
        }
    }

    /// The slow path of `push`: the occupancy word `cur` says full. Displace
    /// the oldest item of the lowest class present below `class`, or hand
    /// the item back if every item in the queue is of `class` or above.
    #[cold]
    #[inline(never)]
    fn push_full(&self, mut cur: u64, item: T, class: Priority) -> Result<Pushed<T>, Full<T>> {
        let c = class.index();
        let occupancy = &self.hot.occupancy;
        loop {
            if total(cur) < self.capacity {
                // Room was made meanwhile.
                match occupancy.compare_exchange_weak(cur, cur + one(c), Ordering::AcqRel, Ordering::Acquire) {
                    Ok(_) => {
                        self.rings[c].insert(&self.hot.tails[c], item);
                        return Ok(Pushed::Queued);
                    }
                    Err(actual) => cur = actual,
                }
                continue;
            }
            let Some(lower) = (0..c).find(|&j| count(cur, j) > 0) else {
                // Full, and at this instant every item counted is of this
                // class or a higher one.
                self.rings[c].slow.handed_back.fetch_add(1, Ordering::Relaxed);
                return Err(Full(item));
            };
            // One item of class `lower` gives way to this one: claimed in the
            // word first, then taken out of its ring (the oldest), so no
            // other remover can count on it.
            match occupancy.compare_exchange_weak(cur, cur - one(lower) + one(c), Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => {
                    let ring = &self.rings[lower];
                    let old = ring.take_claimed(&self.hot.tails[lower]);
                    ring.slow.displaced.fetch_add(1, Ordering::Relaxed);
                    self.rings[c].insert(&self.hot.tails[c], item);
                    return Ok(Pushed::Displaced(old, Priority::from_index(lower)));
                }
                Err(actual) => cur = actual,
            }
        }
    }

    /// Consumer only (the caller is the single consumer). Takes the highest
    /// class whose next item is written and still counted (a displacing
    /// producer may have claimed it): claims one item of the class in the
    /// occupancy word, then takes it out.
    #[inline]
    fn pop(&self) -> Option<(T, Priority)> {
        // `Critical`: only this thread removes from its ring, so a written
        // head is this thread's to take once it is claimed in the word.
        let c = Priority::Critical.index();
        if self.rings[c].head_ready() {
            self.claim_one(c);
            let item = self.rings[c]
                .pop_unshared()
                .expect("the Critical head was written and only the consumer takes it");
            return Some((item, Priority::Critical));
        }
        for class in [Priority::Routine, Priority::Idle] {
            let c = class.index();
            let ring = &self.rings[c];
            let head = ring.head.load(Ordering::Acquire);
            if ring.slot(head).seq.load(Ordering::Acquire) != head.wrapping_add(1) {
                continue;
            }
            let occupancy = &self.hot.occupancy;
            let mut cur = occupancy.load(Ordering::Acquire);
            loop {
                if count(cur, c) == 0 {
                    break; // displacing producers claimed every item of it
                }
                match occupancy.compare_exchange_weak(cur, cur - one(c), Ordering::AcqRel, Ordering::Acquire) {
                    Ok(_) => {
                        let item = match ring.take_at(head) {
                            Some(item) => item,
                            // A displacing producer took that one first:
                            // the next item of the class is ours.
                            None => ring.take_claimed(&self.hot.tails[c]),
                        };
                        return Some((item, class));
                    }
                    Err(actual) => cur = actual,
                }
            }
        }
        None
    }

    /// Claims one item of class `c` in the occupancy word; the caller knows
    /// one is counted that nobody else can claim (a written `Critical` head:
    /// only the consumer removes `Critical` items).
    fn claim_one(&self, c: usize) {
        self.hot.occupancy.fetch_sub(one(c), Ordering::AcqRel);
    }

    fn len(&self) -> usize {
        total(self.hot.occupancy.load(Ordering::Acquire))
    }

    fn fallback_depth(&self) -> FallbackDepth {
        let o = self.hot.occupancy.load(Ordering::Acquire);
        FallbackDepth {
            idle: count(o, 0),
            routine: count(o, 1),
            critical: count(o, 2),
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
            depth: count(self.hot.occupancy.load(Ordering::Acquire), class.index()) as u64,
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
