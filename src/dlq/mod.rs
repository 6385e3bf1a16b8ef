//! A bounded, priority-aware dead-letter queue (DLQ).
//!
//! [`DeadLetterQueue`] is where a breaker diverts the traffic of a consumer
//! it has opened on, so that it can be replayed when the consumer recovers.
//!
//! One thing, one name each place it appears: in code and prose it is the
//! *dead-letter queue* (*the queue* for short, *DLQ* in headings); its role
//! for the breaker is the *fallback*, which is why the figures a breaker
//! reports of its queue are named `fallback_*` (`fallback_depth`, the
//! Prometheus `breaker_fallback_*` families, [`FallbackDepth`]).
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
//! One bounded ring per class (`ring.rs`, which holds all of the queue's
//! `unsafe`), and one *occupancy word* that only producers write
//! (`queue.rs`). The consumer never writes the producers' line: a pop
//! moves its class's head and nothing else, and a producer reads the
//! heads only when the word says the queue is full.
//!
//! - **The occupancy word** (one `AtomicU64`, on the producers' line): the
//!   items of class `Critical`, of class `Routine` and of every class, 21
//!   bits each (hence [`MAX_CAPACITY`]), each item counted from the moment
//!   its push is admitted, even before it is written. Admission (total
//!   below capacity: one more of the class) and displacement (one fewer of
//!   the lower class, one more of the higher) are each one CAS on it. The
//!   word never holds more than the capacity, so a CAS that succeeds on a
//!   word read earlier finds the room it read, however many operations
//!   went by in between.
//! - **The consumer's pops**: a popped item stays counted in the word
//!   until a producer *folds* its pop in. So the word is the queue's
//!   counts plus the pops not folded yet. Producers keep, per class, the
//!   removals they have *accounted* for (on their line): the pops folded
//!   in, and one per displacement. A ring's removals (its head's distance
//!   from the start) less those are its pops not folded yet.
//! - **Folding**: a producer that finds the word full reads the
//!   accounted removals, the word, then the heads; if some pops are not
//!   folded, it sets the word's top bit (a fold is under way: admissions
//!   go on, displacements and other folds wait), claims the pops (a CAS on
//!   the accounted removals of their class), and in one CAS takes them off
//!   the word, admits its own item and clears the bit. So the full path
//!   runs about once per `capacity` pushes on a queue its consumer keeps
//!   empty, and each pop is folded once. If no fold is under way and every
//!   pop is folded, the word holds the queue's exact counts: a `Critical`
//!   push sees exactly whether every item is `Critical`, an item in
//!   transit included, and a displacement sees exactly the lowest class
//!   present.
//! - **The rings**: Vyukov-style arrays of slots with a per-slot sequence
//!   number (`seq`). Positions (`head`, `tail`, and the `seq` of each slot)
//!   are `usize` counters that wrap; a position maps to slot `pos & mask`.
//!   Every ring has `capacity.next_power_of_two().max(2)` slots, so that
//!   any one class can hold the whole capacity (a ring needs two slots so
//!   that "full for `p`" and "free for `p + 1`" differ). A slot for position
//!   `p` is *free* when `seq == p`, *full* when `seq == p + 1`; whoever
//!   takes the item out stores `seq = p + slots`, which frees it for the
//!   next lap. A reader only takes an item from a slot whose `seq` says
//!   *full* (stored with `Release` after the write), so it never reads a
//!   slot that is claimed but not yet written.
//! - **Who removes**: the consumer, and producers displacing a lower class
//!   (`Idle`, `Routine`): those heads are claimed by CAS, and whoever wins
//!   a position has its item. Nobody displaces a `Critical` item, so the
//!   `Critical` head has one writer, the consumer. Tails are claimed by
//!   `fetch_add` (admission already made the room). A displacer claims one
//!   item of the lower class in the word first, accounts for one removal,
//!   then takes the oldest item of that ring; if the consumer popped it
//!   meanwhile, that pop is its room (its own item is queued, nothing
//!   handed back), and if the item is still in transit (its producer
//!   admitted but not done writing), it waits for it, a few instructions.
//!   It never waits for the consumer: a pop counts from the moment the
//!   consumer moves the head.
//! - **The consumer's pop** looks at the rings' heads, highest class
//!   first, and takes the first written one. Before it takes a lower
//!   class's item it looks again at the classes above: one whose head is
//!   written by now (an item written while the pop looked lower down, or
//!   pushed before the lower item was) comes first. An empty queue (or one
//!   whose items are all still being written) is answered from the three
//!   head slots alone, looked at twice, since the first look's later loads
//!   may make visible an item its earlier ones missed; a class whose head
//!   moves on while the pop looks at it (a displacer took the item) is
//!   looked at again at its new head.
//!
//! Per push + pop that is three read-modify-write operations for `Idle`
//! and `Routine` items (the word's CAS and the tail `fetch_add` in the
//! push, the head CAS in the pop) and two for `Critical` items;
//! crossbeam's `ArrayQueue` has two. With two producers on one core and
//! the consumer on another, the consumer's pops no longer pull the
//! producers' line to its core (`cargo bench --bench dlq -- --interleaved
//! 7 --pin 0,0,1`; figures in `docs/figures.md`). `examples/dlq_floor.rs`
//! measures one thread's push + pop against `ArrayQueue`, and against
//! `ArrayQueue` plus one uncontended `fetch_add` (the floor of this
//! design).
//!
//! # Caveats
//!
//! - An item whose `push` has not returned yet may be popped after a
//!   lower-class item (the consumer only commits to a class whose next item
//!   is written; it does not wait for a producer mid-write), and so may an
//!   item queued behind it in its class, whose push has returned. FIFO
//!   within a class is never violated.
//! - A push decides "full" from the queue's counts at one instant; if the
//!   consumer pops right after, the push may still displace an item
//!   although room was made a moment later.
//! - A remover whose item is still being written waits (spins, then
//!   yields) for its producer, and a push that finds the queue full waits
//!   for a fold under way; a producer descheduled in either window of a
//!   few instructions holds it up.
//! - A displacement racing the consumer's pop of the same class claims
//!   "one item of the class" in the occupancy word, not a position, and
//!   the two then take the oldest items in whichever order they reach the
//!   ring's head. So the displacement may hand back the second-oldest item
//!   while the pop returns the oldest (or the reverse), an outcome no order
//!   of the two operations gives. Each item still goes to exactly one of
//!   them, pops of a class stay in FIFO order, and only the lowest class
//!   present is ever displaced.
//! - [`len`](DeadLetterQueue::len), [`fallback_depth`](DeadLetterQueue::fallback_depth)
//!   and the `depth` of [`stats`](DeadLetterQueue::stats) read the word,
//!   the heads and the accounted removals, and are the counts of one instant (a
//!   displacement in progress counted or not) unless the consumer pops or
//!   a producer folds during each of eight reads in a row, a short spin
//!   apart. Then they are the last read, at least 0 and at most the
//!   capacity in all; if a producer was descheduled in the middle of a
//!   fold, that read counts the pops it was folding as items of their
//!   class.

mod queue;
mod ring;

pub use queue::MAX_CAPACITY;

use core::cell::Cell;
use core::fmt;
use core::marker::PhantomData;

use crate::error::ConfigError;
use crate::sync::Arc;
use queue::Inner;

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
///
/// ```
/// use tailguard::dlq::{DeadLetterQueue, Priority};
/// let q = DeadLetterQueue::with_capacity(1)?;
/// let _ = q.push("ping", Priority::Idle);
/// let _ = q.push("order", Priority::Critical); // displaces the ping
/// let idle = q.stats().idle;
/// assert_eq!((idle.queued, idle.displaced, idle.depth), (1, 1, 0));
/// # Ok::<(), tailguard::ConfigError>(())
/// ```
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

// Sound after a panic anywhere: a push or a pop is a sequence of atomic
// steps and the item moves whole (written once, read once); a panic in `T`'s
// own code (its drop, in `drain`'s sink) leaves every slot either full or
// free. Unwind-safe as the items are.
impl<T: std::panic::UnwindSafe> std::panic::UnwindSafe for DeadLetterQueue<T> {}
impl<T: std::panic::UnwindSafe> std::panic::RefUnwindSafe for DeadLetterQueue<T> {}
impl<T: std::panic::UnwindSafe> std::panic::UnwindSafe for Producer<T> {}
impl<T: std::panic::UnwindSafe> std::panic::RefUnwindSafe for Producer<T> {}

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

    /// For the loom models only (built with `--cfg tailguard_loom`): a
    /// queue whose internal positions all start at `start` (say
    /// `usize::MAX - 1`), so that a model reaches their wraparound at once.
    #[cfg(tailguard_loom)]
    pub fn with_capacity_starting_at(capacity: usize, start: usize) -> Result<Self, ConfigError> {
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
    /// `push` has not returned yet, and items queued behind them in their
    /// class).
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
    fn wrap_every_capacity_from_near_max() {
        for cap in 1..=5 {
            let q = DeadLetterQueue::with_start(cap, usize::MAX - 7).unwrap();
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
        assert_eq!(e.kind(), crate::ConfigErrorKind::TooLarge);
        assert_eq!(e.field(), "capacity");
    }

    /// Scales a loop count down under Miri.
    const fn scaled(n: usize) -> usize {
        if cfg!(miri) {
            let m = n / 5_000;
            if m < 50 {
                50
            } else {
                m
            }
        } else {
            n
        }
    }

    fn assert_conserved(s: &Stats) {
        for class in Priority::ALL {
            let c = s.class(class);
            assert_eq!(
                c.pushed,
                c.popped + c.displaced + c.handed_back + c.depth,
                "{class:?}: {c:?}"
            );
            assert_eq!(c.pushed, c.queued + c.handed_back);
        }
    }

    /// A deterministic workload over every class, checked against a model.
    fn cycle_against_model(cap: usize, start: usize, ops: usize) {
        let q = DeadLetterQueue::with_start(cap, start).unwrap();
        let mut model: [std::collections::VecDeque<u64>; 3] = Default::default();
        let mut rng = 0x9E37_79B9_7F4A_7C15u64 ^ (cap as u64) ^ (start as u64);
        let mut next = 0u64;
        for _ in 0..ops {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            if rng % 8 < 5 {
                let class = Priority::ALL[(rng >> 8) as usize % 3];
                let v = next;
                next += 1;
                let len: usize = model.iter().map(|m| m.len()).sum();
                let got = q.push(v, class);
                if len < cap {
                    assert_eq!(got, Ok(Pushed::Queued));
                    model[class as usize].push_back(v);
                } else if let Some(low) = (0..class as usize).find(|&c| !model[c].is_empty()) {
                    let old = model[low].pop_front().unwrap();
                    assert_eq!(got, Ok(Pushed::Displaced(old, Priority::ALL[low])));
                    model[class as usize].push_back(v);
                } else {
                    assert_eq!(got, Err(Full(v)));
                }
            } else {
                let want = (0..3)
                    .rev()
                    .find(|&c| !model[c].is_empty())
                    .map(|c| (model[c].pop_front().unwrap(), Priority::ALL[c]));
                assert_eq!(q.pop(), want);
            }
            assert_eq!(q.len(), model.iter().map(|m| m.len()).sum::<usize>());
        }
        let d = q.fallback_depth();
        assert_eq!([d.idle, d.routine, d.critical], [0, 1, 2].map(|c| model[c].len()));
        assert_conserved(&q.stats());
    }

    #[test]
    fn small_capacities_wrap_many_times() {
        // Millions of operations in total (fewer under Miri).
        for cap in 1..=3 {
            cycle_against_model(cap, 0, scaled(1_000_000));
            // And across the wrap of the positions themselves.
            cycle_against_model(cap, usize::MAX - 1_000, scaled(200_000));
        }
    }

    #[test]
    fn positions_start_near_usize_max() {
        for cap in 1..=5 {
            for back in [0usize, 1, 2, 3, 7, 64] {
                cycle_against_model(cap, usize::MAX - back, scaled(20_000).min(20_000));
            }
        }
    }
}
