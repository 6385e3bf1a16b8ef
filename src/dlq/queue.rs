//! The queue's logic: the occupancy word, admission, displacement, the
//! consumer's pop, and the counters. No `unsafe`: the rings (`ring.rs`) do
//! all of it.

use crossbeam_utils::CachePadded;

use super::ring::{too_large, Ring, Slot};
use super::{ClassStats, FallbackDepth, Full, Priority, Pushed, Stats};
use crate::error::{ConfigError, ConfigErrorKind};
use crate::sync::{AtomicU64, AtomicUsize, Ordering};

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
    /// The occupancy word: the items of class `Critical` (bits 0–20), of
    /// class `Routine` (bits 21–41), and of all classes (bits 42–63; `Idle`
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

/// Where the count of class `class` (an index, `Routine` or `Critical`) is
/// kept in an occupancy word: `Critical` in the lowest bits.
#[inline]
const fn shift(class: usize) -> u32 {
    CLASS_BITS * (2 - class) as u32
}

/// Items of class `class` (an index) in an occupancy word.
#[inline]
fn count(occupancy: u64, class: usize) -> usize {
    let field = |c: usize| ((occupancy >> shift(c)) & CLASS_MASK) as usize;
    if class > 0 {
        field(class)
    } else {
        total(occupancy) - field(1) - field(2)
    }
}

/// What one item of class `class` (an index) adds to an occupancy word.
#[inline]
fn one(class: usize) -> u64 {
    let own = if class > 0 { 1 << shift(class) } else { 0 };
    (1 << TOTAL_SHIFT) | own
}

/// What `pop_lower` found.
enum Lower<T> {
    /// It claimed and took the class's next item.
    Took(T),
    /// The class has nothing to take now: its next item is still being
    /// written, or displacing producers claimed every item counted.
    Absent,
    /// A higher class has a written item to take first: look again from
    /// the top.
    Higher,
}

/// What the full path of a push did: decided, or handed the item back with
/// the occupancy word it found instead of the one it was given.
enum FullStep<T> {
    Done(Result<Pushed<T>, Full<T>>),
    Again(T, u64),
}

/// The shared state of a queue.
pub(super) struct Inner<T> {
    hot: CachePadded<Hot>,
    /// Logical capacity: the counts of the occupancy word sum to at most
    /// this, always.
    pub(super) capacity: usize,
    /// The starting position of every counter (non-zero only in tests of
    /// wraparound).
    start: usize,
    /// One ring per class, indexed by `Priority::index`.
    rings: [Ring<T>; 3],
}

impl<T> Inner<T> {
    pub(super) fn new(capacity: usize, start: usize) -> Result<Self, ConfigError> {
        if capacity == 0 {
            return Err(ConfigError::new(
                "capacity",
                ConfigErrorKind::Zero,
                "with_capacity(0): a dead-letter queue needs room for at least one item (accepted: 1 to 2,097,151)",
            ));
        }
        if capacity > MAX_CAPACITY {
            return Err(ConfigError::new(
                "capacity",
                ConfigErrorKind::TooLarge,
                format!("with_capacity({capacity}) is above the maximum, 2,097,151 items (dlq::MAX_CAPACITY)"),
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
    pub(super) fn push(&self, item: T, class: Priority) -> Result<Pushed<T>, Full<T>> {
        self.push_from(self.hot.occupancy.load(Ordering::Acquire), item, class)
    }

    /// `push`, given `cur`, a read of the occupancy word (perhaps stale: the
    /// CAS hands back the current one). Admission is this loop; a full
    /// queue goes to `full`, out of line, which decides or sends the item
    /// back here with a newer word.
    #[inline]
    fn push_from(&self, mut cur: u64, mut item: T, class: Priority) -> Result<Pushed<T>, Full<T>> {
        let c = class.index();
        let occupancy = &self.hot.occupancy;
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
            match self.full(cur, item, class) {
                FullStep::Done(result) => return result,
                FullStep::Again(back, actual) => (item, cur) = (back, actual),
            }
        }
    }

    /// The slow path of `push`: the occupancy word `cur` says full. Displace
    /// the oldest item of the lowest class present below `class`, or hand
    /// the item back if every item in the queue is of `class` or above; if
    /// the word changed meanwhile, give the item back to `push_from` with
    /// the current word (room may have been made).
    #[cold]
    #[inline(never)]
    fn full(&self, cur: u64, item: T, class: Priority) -> FullStep<T> {
        let c = class.index();
        let Some(lower) = (0..c).find(|&j| count(cur, j) > 0) else {
            // Full, and at this instant every item counted is of this class
            // or a higher one.
            self.rings[c].slow.handed_back.fetch_add(1, Ordering::Relaxed);
            return FullStep::Done(Err(Full(item)));
        };
        // One item of class `lower` gives way to this one: claimed in the
        // word first, then taken out of its ring (the oldest), so no other
        // remover can count on it.
        let displaced = cur - one(lower) + one(c);
        match self
            .hot
            .occupancy
            .compare_exchange_weak(cur, displaced, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => {
                let ring = &self.rings[lower];
                let old = ring.take_claimed();
                ring.slow.displaced.fetch_add(1, Ordering::Relaxed);
                self.rings[c].insert(&self.hot.tails[c], item);
                FullStep::Done(Ok(Pushed::Displaced(old, Priority::from_index(lower))))
            }
            Err(actual) => FullStep::Again(item, actual),
        }
    }

    /// Consumer only (the caller is the single consumer). Takes the highest
    /// class whose next item is written and still counted (a displacing
    /// producer may have claimed it): claims one item of the class in the
    /// occupancy word, then takes it out.
    ///
    /// It looks at the rings' heads first, highest class first, and reads
    /// the occupancy word only for a class whose next item is written: an
    /// empty queue, or one whose items are all still being written, is
    /// answered from the head slots alone, lines that only the consumer and
    /// the producers of that class write. So a consumer waiting on a queue
    /// that its producers keep nearly empty does not pull the occupancy
    /// word (the line every push writes) to its core at each look, only at
    /// each claim. An item whose head is not written yet is treated as if
    /// its push came after this pop, unless the pop finds it written later
    /// on: after a lower class's head (`Lower::Higher`), or on the second
    /// look that comes before an answer of `None` (`look_again`).
    #[inline]
    pub(super) fn pop(&self) -> Option<(T, Priority)> {
        match self.look() {
            Some(popped) => Some(popped),
            None => self.look_again(),
        }
    }

    /// A second look before `pop` answers `None`: the first may have missed
    /// an item that was written while it looked at a lower class, and that
    /// its loads of the lower classes' heads have made visible since (a
    /// displacement it saw there came after that item's push returned).
    #[cold]
    #[inline(never)]
    fn look_again(&self) -> Option<(T, Priority)> {
        self.look()
    }

    /// One look at the heads, highest class first: the first written item
    /// that is still counted, or `None`.
    #[inline(always)]
    fn look(&self) -> Option<(T, Priority)> {
        loop {
            // `Critical`: only this thread removes from its ring, so a
            // written head is counted in the word (admitted, and claimed by
            // nobody), and this thread's to take once it is claimed there.
            let c = Priority::Critical.index();
            if self.rings[c].head_ready() {
                self.claim_one(c);
                let item = self.rings[c]
                    .pop_unshared()
                    .expect("the Critical head was written and only the consumer takes it");
                return Some((item, Priority::Critical));
            }
            match self.pop_lower(Priority::Routine) {
                Lower::Took(item) => return Some((item, Priority::Routine)),
                Lower::Higher => continue,
                Lower::Absent => {}
            }
            return match self.pop_lower(Priority::Idle) {
                Lower::Took(item) => Some((item, Priority::Idle)),
                Lower::Higher => continue,
                Lower::Absent => None,
            };
        }
    }

    /// `pop` for a class that displacing producers also remove from
    /// (`Routine`, `Idle`): if its next item is written, claims one item of
    /// the class in the occupancy word (a CAS: displacing producers may have
    /// claimed every item counted, that one included) and takes the oldest.
    /// Kept apart so that each call is compiled for its constant class.
    #[inline(always)]
    fn pop_lower(&self, class: Priority) -> Lower<T> {
        let c = class.index();
        let ring = &self.rings[c];
        let mut head = ring.head.load(Ordering::Acquire);
        while ring.slot(head).seq.load(Ordering::Acquire) != head.wrapping_add(1) {
            // Not written: the class is empty or its next item in transit,
            // unless a displacer took the item at `head` meanwhile. Then
            // the head has moved on and the next item may be written: two
            // displacers taking the head under each of a pop's two looks
            // would otherwise have it answer `None` while an item pushed
            // before it began is queued.
            let now = ring.head.load(Ordering::Acquire);
            if now == head {
                return Lower::Absent;
            }
            head = now;
        }
        let occupancy = &self.hot.occupancy;
        let mut cur = occupancy.load(Ordering::Acquire);
        loop {
            if self.higher_ready(c, cur) {
                return Lower::Higher;
            }
            if count(cur, c) == 0 {
                return Lower::Absent; // displacing producers claimed every item of it
            }
            match occupancy.compare_exchange_weak(cur, cur - one(c), Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => {
                    return Lower::Took(match ring.take_at(head) {
                        Some(item) => item,
                        // A displacing producer took that one first: the
                        // next item of the class is ours.
                        None => ring.take_claimed(),
                    });
                }
                Err(actual) => cur = actual,
            }
        }
    }

    /// Whether a class above `c` has an item counted in `cur` and written
    /// at its head. `pop` looked at those heads before `c`'s, and may have
    /// found one still being written; the acquire loads since (`c`'s head
    /// written, the word `cur`) may have made that item's write visible,
    /// or that of an item pushed before `c`'s (a push that returned before
    /// `c`'s began): then the pop must take it, not `c`'s.
    #[inline(always)]
    fn higher_ready(&self, c: usize, cur: u64) -> bool {
        let ready = |h: usize| count(cur, h) > 0 && self.rings[h].head_ready();
        ready(Priority::Critical.index()) || (c < Priority::Routine.index() && ready(Priority::Routine.index()))
    }

    /// Claims one item of class `c` in the occupancy word; the caller knows
    /// one is counted that nobody else can claim (a written `Critical` head:
    /// only the consumer removes `Critical` items).
    fn claim_one(&self, c: usize) {
        self.hot.occupancy.fetch_sub(one(c), Ordering::AcqRel);
    }

    pub(super) fn len(&self) -> usize {
        total(self.hot.occupancy.load(Ordering::Acquire))
    }

    pub(super) fn fallback_depth(&self) -> FallbackDepth {
        let o = self.hot.occupancy.load(Ordering::Acquire);
        FallbackDepth {
            idle: count(o, 0),
            routine: count(o, 1),
            critical: count(o, 2),
        }
    }

    /// The counters of one class; `occupancy` is the word read once for all
    /// three classes, so that their depths are those of one instant.
    fn class_stats(&self, class: Priority, occupancy: u64) -> ClassStats {
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
            depth: count(occupancy, class.index()) as u64,
        }
    }

    pub(super) fn stats(&self) -> Stats {
        let occupancy = self.hot.occupancy.load(Ordering::Acquire);
        Stats {
            idle: self.class_stats(Priority::Idle, occupancy),
            routine: self.class_stats(Priority::Routine, occupancy),
            critical: self.class_stats(Priority::Critical, occupancy),
        }
    }
}

#[cfg(all(test, not(tailguard_loom)))]
mod tests {
    use super::*;

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
    fn the_occupancy_word_keeps_exact_counts_per_class() {
        let mut o = 0u64;
        for (class, n) in [(0usize, 3u64), (1, 5), (2, 7)] {
            for _ in 0..n {
                o += one(class);
            }
        }
        assert_eq!((count(o, 0), count(o, 1), count(o, 2), total(o)), (3, 5, 7, 15));
        // A displacement: one Idle gives way to one Critical.
        o = o - one(0) + one(2);
        assert_eq!((count(o, 0), count(o, 1), count(o, 2), total(o)), (2, 5, 8, 15));
        // Every count at its largest.
        let full = MAX_CAPACITY as u64;
        let o = full * one(0);
        assert_eq!((count(o, 0), total(o)), (MAX_CAPACITY, MAX_CAPACITY));
        let o = full * one(2);
        assert_eq!((count(o, 2), count(o, 0), total(o)), (MAX_CAPACITY, 0, MAX_CAPACITY));
    }

    /// Each class fills the whole capacity on its own, `Idle` too (its
    /// count is the total less the others: one item adds one to the total).
    #[test]
    fn every_class_fills_the_capacity_alone() {
        for class in Priority::ALL {
            let inner = Inner::<u32>::new(3, 0).unwrap();
            for i in 0..3 {
                assert!(matches!(inner.push(i, class), Ok(Pushed::Queued)), "{class:?} {i}");
            }
            assert_eq!(inner.len(), 3);
            assert!(inner.push(9, class).is_err(), "{class:?}: full");
            assert_eq!(inner.fallback_depth().class(class), 3);
        }
    }

    /// The full path of a push given a stale word (the queue looked full
    /// to its caller, and room was made since): the CAS on the stale word
    /// fails, the fresh word has room, and the item is queued, not
    /// displacing anything nor handed back; the counts stay exact.
    #[test]
    fn a_push_that_found_the_queue_full_takes_room_made_since() {
        let inner = Inner::<u32>::new(2, 0).unwrap();
        assert!(inner.push(1, Priority::Idle).is_ok());
        assert!(inner.push(2, Priority::Idle).is_ok());
        let full = inner.hot.occupancy.load(Ordering::Acquire);
        assert_eq!(inner.pop(), Some((1, Priority::Idle)));
        assert!(matches!(
            inner.push_from(full, 3, Priority::Routine),
            Ok(Pushed::Queued)
        ));
        let d = inner.fallback_depth();
        assert_eq!(
            (inner.len(), d.class(Priority::Idle), d.class(Priority::Routine)),
            (2, 1, 1)
        );
        assert_eq!(inner.pop(), Some((3, Priority::Routine)));
        assert_eq!(inner.pop(), Some((2, Priority::Idle)));
        assert_eq!(inner.pop(), None);
    }
}
