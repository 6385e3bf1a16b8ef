//! The queue's logic: the admission and removal words, admission,
//! displacement, the consumer's pop, and the counters. No `unsafe`: the rings
//! (`ring.rs`) do all of it.

use crossbeam_utils::CachePadded;

use super::ring::{too_large, Ring, Slot};
use super::{ClassStats, FallbackDepth, Full, Priority, Pushed, Stats};
use crate::error::{ConfigError, ConfigErrorKind};
use crate::sync::{AtomicU64, AtomicUsize, Ordering};

/// Bits per field of a count word.
#[cfg(not(tailguard_loom))]
const FIELD_BITS: u32 = 21;
/// Under the loom models, 3 bits: a queue of capacity up to 7, small enough
/// for a model, has a capacity near the fields' modulus, where a room or a
/// count computed from words read at different instants could be taken
/// for a real one; and the fields wrap within a model.
#[cfg(tailguard_loom)]
const FIELD_BITS: u32 = 3;
/// One field, and the modulus every field counts in.
const MASK: u64 = (1 << FIELD_BITS) - 1;
/// The largest capacity a queue accepts (2^21 − 1 items): a count word's
/// fields count modulo 2^21, so the items of a class must stay below that.
///
/// ```
/// use tailguard::dlq::{DeadLetterQueue, MAX_CAPACITY};
///
/// assert_eq!(MAX_CAPACITY, 2_097_151);
/// assert!(DeadLetterQueue::<u8>::with_capacity(MAX_CAPACITY + 1).is_err());
/// ```
pub const MAX_CAPACITY: usize = MASK as usize;

/// Where field `k` of a count word is kept. Field 0 counts every class (so
/// that an `Idle` item, counted there only, costs one field), field 1
/// `Routine`, field 2 `Critical`; `Critical` is in the lowest bits.
#[inline]
const fn shift(k: usize) -> u32 {
    FIELD_BITS * (2 - k) as u32
}

/// Field `k` of a count word.
#[inline]
fn field(w: u64, k: usize) -> u64 {
    (w >> shift(k)) & MASK
}

/// `w` with `delta` added to field `k`, modulo 2^21 (no carry into the next
/// field).
#[inline]
fn add(w: u64, k: usize, delta: u64) -> u64 {
    let s = shift(k);
    let v = (field(w, k).wrapping_add(delta)) & MASK;
    (w & !(MASK << s)) | (v << s)
}

/// One item of class `class` (an index) counted in a count word: the total
/// and, for `Routine` and `Critical`, the class's own field. One addition:
/// the total is the top field, whose carry goes to the spare top bit and
/// out of the word; a class field is added to with its carry masked only
/// when it is at its largest value (once in 2^21 of its items).
#[inline]
fn plus_one(w: u64, class: usize) -> u64 {
    let mut one = 1 << shift(0);
    if class > 0 {
        if field(w, class) == MASK {
            return add(add(w, 0, 1), class, 1);
        }
        one |= 1 << shift(class);
    }
    w.wrapping_add(one)
}

/// A displacement, in the removal word: one item of class `lower` removed
/// and one of class `class` added back (the total is unchanged).
#[inline]
fn displaced(r: u64, lower: usize, class: usize) -> u64 {
    // `lower < class`, so `class` has its own field; `Idle` has none (it is
    // the total less the others, which the change below already moves).
    let r = add(r, class, MASK); // minus one, modulo 2^21
    if lower > 0 {
        add(r, lower, 1)
    } else {
        r
    }
}

/// Items in the queue, given an admission word `a` and a removal word `r`.
#[inline]
fn total(a: u64, r: u64) -> u64 {
    field(a, 0).wrapping_sub(field(r, 0)) & MASK
}

/// Items of class `class` (an index), given `a` and `r`.
#[inline]
fn count(a: u64, r: u64, class: usize) -> u64 {
    let own = |k: usize| field(a, k).wrapping_sub(field(r, k)) & MASK;
    if class > 0 {
        own(class)
    } else {
        total(a, r).wrapping_sub(own(1)).wrapping_sub(own(2)) & MASK
    }
}

/// What the producers touch on every push, in one cache line.
struct Admission {
    /// The admission word: items admitted since the queue was made, modulo
    /// 2^21: of every class (field 0), `Routine` (field 1), `Critical`
    /// (field 2). Only producers write it, one CAS per admission.
    adm: AtomicU64,
    /// The admission limit: a push is admitted while the total of `adm` is
    /// below it. It is `removed + capacity` for a number of removals seen
    /// some time ago (a wide, never-decreasing count, compared modulo 2^21),
    /// so it never lets the queue hold more than `capacity` items; a
    /// producer that reaches it reads the removal word and raises it.
    limit: AtomicU64,
    /// The tail of each class ring, indexed by `Priority::index`.
    tails: [AtomicUsize; 3],
}

/// What the consumer touches on every pop, in another cache line.
struct Removal {
    /// The removal word: items claimed by a remover since the queue was
    /// made, modulo 2^21, less the items displacements added (a
    /// displacement removes one item of a lower class and adds one of its
    /// own, in one CAS here): of every class (field 0), `Routine` (field
    /// 1), `Critical` (field 2). The items of a class are its admissions
    /// less this, so every removal and displacement is exact against every
    /// other. The consumer writes it on every pop; producers only when the
    /// queue is full.
    rem: AtomicU64,
    /// Displacing producers between their claim and taking the item out.
    /// While it is zero, a written head of the `Routine` or `Idle` ring is
    /// one no displacement has claimed, so the consumer claims it without
    /// reading the admission word.
    displacing: AtomicUsize,
}

/// The shared state of a queue.
pub(super) struct Inner<T> {
    admission: CachePadded<Admission>,
    removal: CachePadded<Removal>,
    /// Logical capacity: the queue never holds more items than this.
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
        // The count words start with every field at `start` (modulo 2^21),
        // so that the models that start positions near `usize::MAX` wrap
        // the fields too.
        let origin = start as u64 & MASK;
        let word = (origin << shift(0)) | (origin << shift(1)) | (origin << shift(2));
        Ok(Inner {
            admission: CachePadded::new(Admission {
                adm: AtomicU64::new(word),
                limit: AtomicU64::new(origin + capacity as u64),
                tails: [
                    AtomicUsize::new(start),
                    AtomicUsize::new(start),
                    AtomicUsize::new(start),
                ],
            }),
            removal: CachePadded::new(Removal {
                rem: AtomicU64::new(word),
                displacing: AtomicUsize::new(0),
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

    /// Room left under the admission limit `limit` for the admission word
    /// `a`: `Some(0)` when the limit is reached, `None` when the two
    /// disagree (a difference above the capacity: `a` older than raises of
    /// the limit, whose CAS on `a` would fail anyway).
    #[inline]
    fn room(&self, limit: u64, a: u64) -> Option<u64> {
        let room = limit.wrapping_sub(field(a, 0)) & MASK;
        (room <= self.capacity as u64).then_some(room)
    }

    #[inline]
    pub(super) fn push(&self, item: T, class: Priority) -> Result<Pushed<T>, Full<T>> {
        let c = class.index();
        let adm = &self.admission.adm;
        // Acquire: the limit read next is at least the one that let the
        // producer of this admission word in.
        let mut a = adm.load(Ordering::Acquire);
        loop {
            let limit = self.admission.limit.load(Ordering::Acquire);
            // Room under the limit, 1..=capacity (0: the limit is reached;
            // above the capacity: `limit` older than `a`).
            let room = limit.wrapping_sub(field(a, 0)) & MASK;
            if room.wrapping_sub(1) >= self.capacity as u64 {
                return self.push_slow(item, class);
            }
            match adm.compare_exchange_weak(a, plus_one(a, c), Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => {
                    self.rings[c].insert(&self.admission.tails[c], item);
                    return Ok(Pushed::Queued);
                }
                Err(actual) => a = actual,
            }
        }
    }

    /// The slow path of `push`: the admission limit is reached. Read the
    /// removal word; if removals made room, raise the limit and admit the
    /// item. Otherwise the queue is full: displace the oldest item of the
    /// lowest class present below `class`, or hand the item back if every
    /// item in the queue is of `class` or above.
    #[cold]
    #[inline(never)]
    fn push_slow(&self, item: T, class: Priority) -> Result<Pushed<T>, Full<T>> {
        let c = class.index();
        let cap = self.capacity as u64;
        let Admission { adm, limit, .. } = &*self.admission;
        let Removal { rem, displacing } = &*self.removal;
        let mut backoff = 0;
        loop {
            // In this order: the limit, then the removals (so `r` is at
            // least the removals the limit was raised from), then the
            // admissions (so `a` and `r` describe the queue at the instant
            // `a` is read, if `rem` still holds `r` afterwards).
            let lim: u64 = limit.load(Ordering::Acquire);
            let r = rem.load(Ordering::Acquire);
            let a = adm.load(Ordering::Acquire);
            // Raise the limit to `r`'s removals + capacity. While the limit
            // is `lim`, admissions are at most `lim` and removals at most
            // admissions, so the step is 0..=capacity; if `lim` moved
            // meanwhile the step may be anything, and the CAS fails.
            let step = (field(r, 0) + cap).wrapping_sub(lim) & MASK;
            if step > 0
                && step <= cap
                && limit
                    .compare_exchange(lim, lim.wrapping_add(step), Ordering::AcqRel, Ordering::Acquire)
                    .is_err()
            {
                crate::sync::spin(&mut backoff);
                continue;
            }
            // The limit again, read after `a`: at least the limit that let
            // the last admission of `a` in, so the room below is never
            // computed from a limit older than `a` (with a capacity near
            // 2^21, such a room could not be told from a real one).
            let lim: u64 = limit.load(Ordering::Acquire);
            match self.room(lim, a) {
                Some(room) if room > 0 => {
                    if adm
                        .compare_exchange(a, plus_one(a, c), Ordering::AcqRel, Ordering::Acquire)
                        .is_ok()
                    {
                        self.rings[c].insert(&self.admission.tails[c], item);
                        return Ok(Pushed::Queued);
                    }
                    continue; // another admission came first
                }
                Some(_) if total(a, r) == cap => {
                    // Full, by an (`a`, `r`) that agree: if `rem` still holds
                    // `r`, they were the queue at the instant `a` was read.
                }
                _ => {
                    // `r` older than `a`, or `a` much older than the limit:
                    // read them again.
                    crate::sync::spin(&mut backoff);
                    continue;
                }
            }
            let Some(lower) = (0..c).find(|&j| count(a, r, j) > 0) else {
                if rem.load(Ordering::Acquire) != r {
                    continue; // a removal made room
                }
                // Full, and at the instant `a` was read every item counted
                // was of this class or a higher one.
                self.rings[c].slow.handed_back.fetch_add(1, Ordering::Relaxed);
                return Err(Full(item));
            };
            // One item of class `lower` gives way to this one: claimed in the
            // removal word first, then taken out of its ring (the oldest),
            // so no other remover can count on it. `displacing` is raised
            // before the claim is visible and lowered once the item is out,
            // so the consumer's claim without counting never meets it.
            displacing.fetch_add(1, Ordering::AcqRel);
            match rem.compare_exchange(r, displaced(r, lower, c), Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => {
                    let ring = &self.rings[lower];
                    let old = ring.take_claimed();
                    displacing.fetch_sub(1, Ordering::AcqRel);
                    ring.slow.displaced.fetch_add(1, Ordering::Relaxed);
                    self.rings[c].insert(&self.admission.tails[c], item);
                    return Ok(Pushed::Displaced(old, Priority::from_index(lower)));
                }
                Err(_) => {
                    displacing.fetch_sub(1, Ordering::AcqRel);
                }
            }
        }
    }

    /// Consumer only (the caller is the single consumer). Takes the highest
    /// class whose next item is written and not claimed by a displacing
    /// producer: claims one item of the class in the removal word, then
    /// takes it out.
    ///
    /// A class whose next item is still being written is passed over, as if
    /// that item's push came after this pop.
    #[inline(always)]
    pub(super) fn pop(&self) -> Option<(T, Priority)> {
        // `Critical`: only this thread removes from its ring, so a written
        // head is counted and this thread's to take once it is claimed.
        let c = Priority::Critical.index();
        if self.rings[c].head_ready() {
            let rem = &self.removal.rem;
            let mut r = rem.load(Ordering::Acquire);
            while let Err(actual) = rem.compare_exchange_weak(r, plus_one(r, c), Ordering::AcqRel, Ordering::Acquire) {
                r = actual;
            }
            let item = self.rings[c]
                .pop_unshared()
                .expect("the Critical head was written and only the consumer takes it");
            return Some((item, Priority::Critical));
        }
        if let Some(item) = self.pop_lower(Priority::Routine) {
            return Some((item, Priority::Routine));
        }
        self.pop_lower(Priority::Idle).map(|item| (item, Priority::Idle))
    }

    /// `pop` for a class that displacing producers also remove from
    /// (`Routine`, `Idle`). Kept apart so that each call is compiled for its
    /// constant class.
    #[inline(always)]
    fn pop_lower(&self, class: Priority) -> Option<T> {
        let c = class.index();
        let ring = &self.rings[c];
        let Removal { rem, displacing } = &*self.removal;
        let mut r = rem.load(Ordering::Acquire);
        loop {
            // In this order: `r`, then `displacing`, then the head. A
            // displacement whose claim `r` holds raised `displacing` before
            // it; if `displacing` reads zero, each such displacement has
            // also taken its item out, and the head read after is past it.
            let quiet = displacing.load(Ordering::Acquire) == 0;
            let head = ring.head.load(Ordering::Acquire);
            if !ring.written(head) {
                return None;
            }
            if !quiet {
                // A displacement may have claimed this head: count.
                let a = self.admission.adm.load(Ordering::Acquire);
                let n = count(a, r, c);
                if n == 0 || n > self.capacity as u64 {
                    // Claimed by displacements (or `r` older than `a`): as
                    // if the class were empty at this pop.
                    return None;
                }
            }
            match rem.compare_exchange_weak(r, plus_one(r, c), Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => {
                    return Some(match ring.take_at(head) {
                        Some(item) => item,
                        // A displacing producer took that one first: the
                        // next item of the class is ours.
                        None => ring.take_claimed(),
                    });
                }
                Err(actual) => r = actual,
            }
        }
    }

    /// The admission and removal words as they were at one instant, for
    /// the metrics: the removals, the admissions, the removals again; if
    /// the removal word did not change meanwhile, the two describe the
    /// queue at the instant the admissions were read. After a few tries
    /// against a consumer that keeps popping, the last pair (whose counts
    /// may be a few operations out of step) and `false`.
    fn words(&self) -> (u64, u64, bool) {
        let Removal { rem, .. } = &*self.removal;
        let mut r = rem.load(Ordering::Acquire);
        for _ in 0..8 {
            let a = self.admission.adm.load(Ordering::Acquire);
            let again = rem.load(Ordering::Acquire);
            if again == r {
                return (a, r, true);
            }
            r = again;
        }
        (self.admission.adm.load(Ordering::Acquire), r, false)
    }

    pub(super) fn len(&self) -> usize {
        let (a, r, _) = self.words();
        (total(a, r) as usize).min(self.capacity)
    }

    pub(super) fn fallback_depth(&self) -> FallbackDepth {
        let (a, r, exact) = self.words();
        let n = |class: usize| count(a, r, class) as usize;
        let (mut idle, mut routine, mut critical) = (n(0), n(1), n(2));
        if !exact {
            // Never more than the capacity in all, even out of step: the
            // lower classes give way first, as in the queue.
            let cap = self.capacity;
            critical = critical.min(cap);
            routine = routine.min(cap - critical);
            idle = idle.min(cap - critical - routine);
        }
        FallbackDepth {
            idle,
            routine,
            critical,
        }
    }

    fn class_stats(&self, class: Priority) -> ClassStats {
        let ring = &self.rings[class.index()];
        // Read `displaced` before `head` and `head` before `tail`, so that
        // `removed >= displaced` and `queued >= removed`.
        let displaced = ring.slow.displaced.load(Ordering::Acquire) as u64;
        let handed_back = ring.slow.handed_back.load(Ordering::Acquire) as u64;
        let removed = ring.head.load(Ordering::Acquire).wrapping_sub(self.start) as u64;
        let queued = self.admission.tails[class.index()]
            .load(Ordering::Acquire)
            .wrapping_sub(self.start) as u64;
        ClassStats {
            pushed: queued + handed_back,
            queued,
            popped: removed.saturating_sub(displaced),
            displaced,
            handed_back,
            depth: self.fallback_depth().class(class) as u64,
        }
    }

    pub(super) fn stats(&self) -> Stats {
        Stats {
            idle: self.class_stats(Priority::Idle),
            routine: self.class_stats(Priority::Routine),
            critical: self.class_stats(Priority::Critical),
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
    fn the_count_words_keep_exact_counts_per_class_across_their_wrap() {
        // Both words start just below the fields' wrap (as `new` makes them
        // for a `start` near `usize::MAX`), so every field wraps below.
        let origin = MASK - 4;
        let zero = (origin << shift(0)) | (origin << shift(1)) | (origin << shift(2));
        let (mut a, mut r) = (zero, zero);
        for (class, n) in [(0usize, 3), (1, 5), (2, 7)] {
            for _ in 0..n {
                a = plus_one(a, class);
            }
        }
        let counts = |a, r| (count(a, r, 0), count(a, r, 1), count(a, r, 2), total(a, r));
        assert_eq!(counts(a, r), (3, 5, 7, 15));
        // A displacement: one Idle gives way to one Critical.
        r = displaced(r, 0, 2);
        assert_eq!(counts(a, r), (2, 5, 8, 15));
        // And one Routine to one Critical.
        r = displaced(r, 1, 2);
        assert_eq!(counts(a, r), (2, 4, 9, 15));
        // Removals of each class.
        for class in [0, 1, 2] {
            r = plus_one(r, class);
        }
        assert_eq!(counts(a, r), (1, 3, 8, 12));
        // Fields never carry into each other: a field at its largest value
        // wraps to zero alone.
        let top = add(0, 2, MASK);
        assert_eq!((field(add(top, 2, 1), 2), field(add(top, 2, 1), 1)), (0, 0));
        // Every count at its largest.
        let mut full = 0;
        for _ in 0..3 {
            full = add(full, 0, MAX_CAPACITY as u64 / 3);
        }
        assert_eq!(count(full, 0, 0), (MAX_CAPACITY as u64 / 3) * 3);
    }

    /// The admission limit: a queue of capacity 2 filled, popped once and
    /// pushed again takes the push through the slow path (the limit is
    /// reached), which reads the removal, raises the limit and admits.
    /// Positions and both words start near their wrap.
    #[test]
    fn a_push_at_the_limit_raises_it_from_the_removals() {
        let inner = Inner::<u32>::new(2, usize::MAX - 2).unwrap();
        for round in 0..40u32 {
            assert!(matches!(inner.push(round, Priority::Idle), Ok(Pushed::Queued)));
            assert!(matches!(inner.push(round + 100, Priority::Routine), Ok(Pushed::Queued)));
            assert!(inner.push(round + 200, Priority::Idle).is_err(), "full");
            assert_eq!(inner.pop(), Some((round + 100, Priority::Routine)));
            // Room made by the pop: queued, not displacing the Idle item.
            assert!(matches!(
                inner.push(round + 300, Priority::Critical),
                Ok(Pushed::Queued)
            ));
            assert_eq!(inner.len(), 2);
            let d = inner.fallback_depth();
            assert_eq!((d.idle, d.routine, d.critical), (1, 0, 1));
            assert_eq!(inner.pop(), Some((round + 300, Priority::Critical)));
            assert_eq!(inner.pop(), Some((round, Priority::Idle)));
            assert_eq!(inner.pop(), None);
        }
        let lim = inner.admission.limit.load(Ordering::Relaxed);
        let r = inner.removal.rem.load(Ordering::Relaxed);
        // Raised at the last push that reached it, never above the removals
        // + capacity.
        let behind = (field(r, 0) + 2).wrapping_sub(lim) & MASK;
        assert!(behind <= 2, "limit {lim}, removals {}", field(r, 0));
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

    /// A displacement while the consumer has nothing outstanding, then a
    /// pop of the class it took from: the pop counts (a displacement was
    /// under way only during the push) and takes the right item.
    #[test]
    fn displacement_then_pop_keeps_counts_and_order() {
        let inner = Inner::<u32>::new(2, 0).unwrap();
        assert!(inner.push(1, Priority::Idle).is_ok());
        assert!(inner.push(2, Priority::Idle).is_ok());
        assert!(matches!(
            inner.push(3, Priority::Routine),
            Ok(Pushed::Displaced(1, Priority::Idle))
        ));
        assert_eq!(inner.removal.displacing.load(Ordering::Relaxed), 0);
        let d = inner.fallback_depth();
        assert_eq!((inner.len(), d.idle, d.routine), (2, 1, 1));
        assert_eq!(inner.pop(), Some((3, Priority::Routine)));
        assert_eq!(inner.pop(), Some((2, Priority::Idle)));
        assert_eq!(inner.pop(), None);
        assert_eq!(inner.len(), 0);
    }
}
