//! The queue's logic: the occupancy word, admission, displacement, the
//! consumer's pop, the fold of the consumer's pops into the word, and the
//! counters. No `unsafe`: the rings (`ring.rs`) do all of it.
//!
//! Orderings: the counting protocol (the occupancy word, the accounted
//! removals, and the heads of `Routine` and `Idle`, which displacers also
//! move) is `SeqCst`. On x86-64 and AArch64 a `SeqCst` load or
//! read-modify-write is the same instruction as an `Acquire` load or an
//! `AcqRel` one, and it lets loom prune reads of a value a later store
//! has overwritten: one model of this protocol ran in 7.2 s instead of
//! 109 s. The slots' `seq` stay `Release`/`Acquire`, and so does the
//! consumer's plain store of the `Critical` head (a `SeqCst` store is an
//! `xchg` on x86-64).

use crossbeam_utils::CachePadded;

use super::ring::{too_large, Ring, Slot};
use super::{ClassStats, FallbackDepth, Full, Priority, Pushed, Stats};
use crate::error::{ConfigError, ConfigErrorKind};
use crate::sync::{AtomicU64, AtomicUsize, Ordering};

/// Bits per count in the occupancy word.
const CLASS_BITS: u32 = 21;
const CLASS_MASK: u64 = (1 << CLASS_BITS) - 1;
/// Where the total is kept in the occupancy word (bits 42–62: it never
/// exceeds the capacity, below 2^21).
const TOTAL_SHIFT: u32 = 2 * CLASS_BITS;
/// The occupancy word's top bit: a producer is folding the consumer's pops
/// into the word. Admissions go on; displacements, refusals and other
/// folds wait for it to clear (see `Inner::fold`).
const FOLDING: u64 = 1 << 63;
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

/// How many times `len`, `fallback_depth` and `stats` read the counts
/// before they settle for a read during which the consumer popped (see
/// `Inner::depth`).
const READ_ATTEMPTS: usize = 8;

/// What producers write, in one cache line; the consumer never writes it.
struct Hot {
    /// The occupancy word: the items of class `Critical` (bits 0–20), of
    /// class `Routine` (bits 21–41), and of all classes (bits 42–63; `Idle`
    /// is the rest), each item counted from the moment its push is admitted
    /// (even before it is written) until the moment a displacing producer
    /// claims it or the consumer's pop of it is *folded* in. The consumer
    /// never writes it: a pop moves its class's head (`End::head`), and a
    /// producer that finds the word full folds the pops not yet accounted
    /// for (`accounted`) into it. So each count is the class's items plus
    /// its pops not folded yet, at most the capacity in all:
    /// admission (total below capacity: one more of the class) needs
    /// nothing but this word, and a word read twice means the same room
    /// both times.
    occupancy: AtomicU64,
    /// The removals from each class ring that producers have accounted
    /// for: each displacer's (counted before it takes an item, as the one
    /// removal it owes, or for a pop of the consumer's it uses instead),
    /// and the consumer's pops folded into the word (claimed here by a
    /// CAS, never past the ring's removals, then taken off the word). It
    /// only grows. A ring's removals (its head's distance from the start)
    /// less this are the consumer's pops not folded yet; they are fewer,
    /// even negative, while a displacer owes its take.
    accounted: [AtomicUsize; 3],
    /// The tail of each class ring, indexed by `Priority::index`.
    tails: [AtomicUsize; 3],
}

/// Items of every class in an occupancy word.
#[inline]
fn total(occupancy: u64) -> usize {
    ((occupancy >> TOTAL_SHIFT) & CLASS_MASK) as usize
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

/// What producers have accounted for of each class's removals (indexed by
/// `Priority::index`).
type Accounted = [usize; 3];

/// The queue's count of each class (indexed by `Priority::index`): the
/// occupancy word's less the pops not folded yet. Signed: a displacer's
/// claim on an item that the consumer popped before the displacer
/// accounted for its removal shows as one below the class's items until
/// it does.
#[derive(Clone, Copy)]
struct Counts([i64; 3]);

impl Counts {
    /// As a `FallbackDepth`: each count at least 0, and the sum cut to
    /// `capacity` from the lowest class up (a read while the consumer
    /// popped or a producer folded may count an item twice).
    fn depth(self, capacity: usize) -> FallbackDepth {
        let mut counts = self.0.map(|c| c.clamp(0, MAX_CAPACITY as i64) as usize);
        let mut excess = counts.iter().sum::<usize>().saturating_sub(capacity);
        for count in counts.iter_mut() {
            let cut = excess.min(*count);
            *count -= cut;
            excess -= cut;
        }
        let [idle, routine, critical] = counts;
        FallbackDepth {
            idle,
            routine,
            critical,
        }
    }
}

/// What a claim of one item of a lower class (a displacement) came to.
enum Claimed<T> {
    /// The class's oldest item, taken out of its ring.
    Item(T),
    /// One of the class's pops not yet folded: the consumer took the item
    /// meanwhile, which made the room.
    Pop,
}

/// What `pop_lower` found.
enum Lower<T> {
    /// It took the class's next item.
    Took(T),
    /// The class has nothing to take now: its next item is still being
    /// written, or there is none.
    Absent,
    /// Look again from the top: a higher class has a written item to take
    /// first, or a displacing producer took the class's next item first.
    Again,
}

/// What the full path of a push did: decided, or handed the item back to
/// `push_from` with the occupancy word it found (room was made, or another
/// thread moved first).
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
                accounted: [AtomicUsize::new(0), AtomicUsize::new(0), AtomicUsize::new(0)],
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
        self.push_from(self.hot.occupancy.load(Ordering::SeqCst), item, class)
    }

    /// `push`, given `cur`, a read of the occupancy word (perhaps stale: the
    /// CAS hands back the current one). Admission is this loop; a word that
    /// says full goes to `full`, out of line, which folds the consumer's
    /// pops in, or decides, or sends the item back here with a newer word.
    #[inline]
    fn push_from(&self, mut cur: u64, mut item: T, class: Priority) -> Result<Pushed<T>, Full<T>> {
        let c = class.index();
        let occupancy = &self.hot.occupancy;
        let mut backoff = 0;
        loop {
            if total(cur) < self.capacity {
                match occupancy.compare_exchange_weak(cur, cur + one(c), Ordering::SeqCst, Ordering::SeqCst) {
                    Ok(_) => {
                        self.rings[c].insert(&self.hot.tails[c], item);
                        return Ok(Pushed::Queued);
                    }
                    Err(actual) => cur = actual,
                }
                continue;
            }
            match self.full(cur, item, class, &mut backoff) {
                FullStep::Done(result) => return result,
                FullStep::Again(back, actual) => (item, cur) = (back, actual),
            }
        }
    }

    /// The slow path of `push`: the occupancy word says full.
    ///
    /// First, room the consumer made: if it has popped items whose pops
    /// are not folded into the word, fold them in, with this item in the
    /// same CAS. Otherwise the word, read with no fold under way and with
    /// every pop folded that is not owed to a displacer, holds the queue's
    /// exact counts: displace the oldest item of the lowest class present
    /// below `class` (claimed in the word first, then taken), or hand the
    /// item back if every item counted is of `class` or above.
    ///
    /// The accounted removals are read before the word and the heads after
    /// it. Both only grow, so for each class the removals read less the
    /// accounted read are at least its pops not folded at the word's read:
    /// none read means none there.
    /// (One collect, not two equal ones: fewer loads on this path, which
    /// is what loom's models explore.)
    #[cold]
    #[inline(never)]
    fn full(&self, seen: u64, item: T, class: Priority, backoff: &mut u32) -> FullStep<T> {
        let c = class.index();
        // Only of the classes that `seen`, the word that said full, counts.
        let accounted: Accounted = core::array::from_fn(|h| {
            if count(seen, h) > 0 {
                self.hot.accounted[h].load(Ordering::SeqCst)
            } else {
                0
            }
        });
        let cur = self.hot.occupancy.load(Ordering::SeqCst);
        if total(cur) < self.capacity {
            return FullStep::Again(item, cur); // room was made
        }
        if cur & FOLDING != 0 {
            // Another producer is folding: its pops may be the room.
            crate::sync::spin(backoff);
            return FullStep::Again(item, self.hot.occupancy.load(Ordering::SeqCst));
        }
        if (0..3).any(|h| count(cur, h) > 0 && count(seen, h) == 0) {
            // A class came in since `seen` (a fold made room): its
            // accounted removals were not read.
            return FullStep::Again(item, cur);
        }
        // Only the classes the word counts: pops of a class beyond those
        // the word still counts of it are owed to displacers waiting in
        // `take_claimed` (their claims took the count below the pops not
        // folded), not room.
        if let Some(claim) = self.pops_to_fold(cur, |h| accounted[h]) {
            return self.fold(cur, item, c, claim, backoff);
        }
        let Some(lower) = (0..c).find(|&j| count(cur, j) > 0) else {
            // Full, and at that instant every item counted is of this class
            // or a higher one.
            self.rings[c].slow.handed_back.fetch_add(1, Ordering::Relaxed);
            return FullStep::Done(Err(Full(item)));
        };
        // One item of class `lower` gives way to this one: claimed in the
        // word first, then taken out of its ring (the oldest) or, if the
        // consumer popped it meanwhile, that pop is the room.
        let displaced = cur - one(lower) + one(c);
        if let Err(actual) = self
            .hot
            .occupancy
            .compare_exchange(cur, displaced, Ordering::SeqCst, Ordering::SeqCst)
        {
            crate::sync::spin(backoff);
            return FullStep::Again(item, actual);
        }
        let result = match self.take_claimed(lower) {
            Claimed::Item(old) => {
                self.rings[lower].slow.displaced.fetch_add(1, Ordering::Relaxed);
                Pushed::Displaced(old, Priority::from_index(lower))
            }
            Claimed::Pop => Pushed::Queued,
        };
        self.rings[c].insert(&self.hot.tails[c], item);
        FullStep::Done(Ok(result))
    }

    /// Folds the consumer's pops of one class into the occupancy word `cur`
    /// (full, not folding), with the item of class `c` admitted in the same
    /// CAS.
    ///
    /// Sets `FOLDING` first: while it is set no displacer claims an item
    /// in the word and no other producer folds, so no count of the word
    /// falls. Then claims the pops of a class not yet folded, as many as
    /// the word counts of that class (the rest are owed to displacers that
    /// claimed before the flag), by a CAS on `accounted` (displacers move
    /// it too), and takes them off the word, admits the
    /// item and clears the flag in one CAS. Each pop is folded once, and a
    /// word read without the flag holds no pop claimed but not taken off.
    ///
    /// `first` is the claim `full` found: a class, its accounted removals
    /// read before `cur` and the pops to fold, tried first (its CAS fails
    /// if the count moved since).
    fn fold(&self, cur: u64, item: T, c: usize, first: (usize, usize, usize), backoff: &mut u32) -> FullStep<T> {
        let occupancy = &self.hot.occupancy;
        if let Err(actual) = occupancy.compare_exchange(cur, cur | FOLDING, Ordering::SeqCst, Ordering::SeqCst) {
            return FullStep::Again(item, actual);
        }
        let mut cur = cur | FOLDING;
        let mut claim = Some(first);
        let (h, k) = loop {
            let Some((h, a, k)) = claim else {
                break (0, 0); // displacers used every pop since: nothing to fold
            };
            if self.hot.accounted[h]
                .compare_exchange(a, a.wrapping_add(k), Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
            {
                break (h, k as u64);
            }
            // A displacer accounted for a removal meanwhile: read again.
            cur = occupancy.load(Ordering::SeqCst);
            claim = self.pops_to_fold(cur, |h| self.hot.accounted[h].load(Ordering::SeqCst));
        };
        // No count fell since `cur` (admissions only raise them), so the
        // class still counts the `k` pops; the total falls by `k - 1`, or
        // rises by one if there was nothing to fold and there is room now.
        loop {
            let room = k > 0 || total(cur) < self.capacity;
            let new = if room {
                (cur & !FOLDING) - k * one(h) + one(c)
            } else {
                cur & !FOLDING
            };
            match occupancy.compare_exchange_weak(cur, new, Ordering::SeqCst, Ordering::SeqCst) {
                Ok(_) if room => {
                    self.rings[c].insert(&self.hot.tails[c], item);
                    return FullStep::Done(Ok(Pushed::Queued));
                }
                Ok(_) => {
                    crate::sync::spin(backoff);
                    return FullStep::Again(item, new);
                }
                Err(actual) => cur = actual,
            }
        }
    }

    /// For a displacer that has claimed one item of class `lower` in the
    /// occupancy word: the class's oldest item, or, if the consumer's pops
    /// have made the room, none.
    ///
    /// It first accounts for the one removal from the ring it owes. Then
    /// it takes the item at the head if it is written, or returns
    /// `Claimed::Pop` once the ring's removals cover every removal
    /// accounted for, its own included: then a pop of the consumer's not
    /// folded nor used by another displacer is its room. One of the two
    /// comes: each count of the word is the class's items plus its pops
    /// not folded, less the claims not yet met. It waits only while an
    /// item is in transit (its producer between admission and writing it)
    /// or another displacer is between its account and its take, never
    /// for the consumer: a pop is a removal from the moment the consumer
    /// moves the head.
    #[cold]
    #[inline(never)]
    fn take_claimed(&self, lower: usize) -> Claimed<T> {
        let ring = &self.rings[lower];
        let accounted = &self.hot.accounted[lower];
        accounted.fetch_add(1, Ordering::SeqCst);
        let mut backoff = 0;
        loop {
            let head = ring.end.head.load(Ordering::SeqCst);
            if ring.slot(head).seq.load(Ordering::Acquire) == head.wrapping_add(1) {
                if let Some(item) = ring.take_at(head) {
                    return Claimed::Item(item);
                }
                continue;
            }
            // The head read first: the removals then less the accounted
            // ones now can only be fewer than at any instant in between.
            let a = accounted.load(Ordering::SeqCst);
            if head.wrapping_sub(self.start).wrapping_sub(a) as isize >= 0 {
                return Claimed::Pop;
            }
            crate::sync::spin(&mut backoff);
        }
    }

    /// The first class of the word `cur` with pops not folded yet, as a
    /// claim to fold: the class, its accounted removals (`accounted`,
    /// called only for the classes `cur` counts, before their heads are
    /// read) and how many pops to fold, at most what `cur` counts of the
    /// class (the rest are owed to displacers).
    #[inline]
    fn pops_to_fold(&self, cur: u64, accounted: impl Fn(usize) -> usize) -> Option<(usize, usize, usize)> {
        (0..3).filter(|&h| count(cur, h) > 0).find_map(|h| {
            let a = accounted(h);
            let k = self.unfolded(h, a).min(count(cur, h));
            (k > 0).then_some((h, a, k))
        })
    }

    /// The removals from each class ring that producers have accounted for.
    #[inline]
    fn accounted(&self) -> Accounted {
        core::array::from_fn(|c| self.hot.accounted[c].load(Ordering::SeqCst))
    }

    /// The head of each class ring.
    #[inline]
    fn heads(&self) -> [usize; 3] {
        core::array::from_fn(|c| self.rings[c].end.head.load(Ordering::SeqCst))
    }

    /// The pops of class `h` not folded yet, from `accounted` (a read of
    /// its accounted removals) and a read of its head now; 0 while
    /// displacers owe more takes than that.
    #[inline]
    fn unfolded(&self, h: usize, accounted: usize) -> usize {
        let head = self.rings[h].end.head.load(Ordering::SeqCst);
        self.pops_unfolded(head, accounted)
    }

    /// The pops not folded yet of a class whose head is `head` and whose
    /// accounted removals are `accounted`: 0 if negative.
    #[inline]
    fn pops_unfolded(&self, head: usize, accounted: usize) -> usize {
        let n = head.wrapping_sub(self.start).wrapping_sub(accounted) as isize;
        n.max(0) as usize
    }

    /// One read of the counts: each class's count in the occupancy word
    /// less its pops not yet folded. `Ok` if the accounted removals and
    /// the heads read before the word are those read after it (so the
    /// counts are those of the instant the word was read, an operation in
    /// progress counted or not), `Err` with the counts otherwise.
    fn read_once(&self) -> Result<Counts, Counts> {
        let (accounted, heads) = (self.accounted(), self.heads());
        let occupancy = self.hot.occupancy.load(Ordering::SeqCst);
        let counts = Counts(core::array::from_fn(|c| {
            count(occupancy, c) as i64 - self.pops_unfolded(heads[c], accounted[c]) as i64
        }));
        if occupancy & FOLDING == 0 && self.heads() == heads && self.accounted() == accounted {
            Ok(counts)
        } else {
            Err(counts)
        }
    }

    /// Consumer only (the caller is the single consumer). Takes the highest
    /// class whose next item is written; moving that class's head is all
    /// it writes besides the slot, never the line producers write.
    ///
    /// It looks at the rings' heads, highest class first, and takes the
    /// first written one (a CAS on the head for `Routine` and `Idle`, which
    /// displacing producers also remove from). An item whose head is not
    /// written yet is treated as if its push came after this pop, unless
    /// the pop finds it written later on: after a lower class's head
    /// (`Lower::Again`), or on the second look that comes before an answer
    /// of `None` (`look_again`).
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

    /// One look at the heads, highest class first: the first written item,
    /// or `None`.
    #[inline(always)]
    fn look(&self) -> Option<(T, Priority)> {
        loop {
            // `Critical`: only this thread removes from its ring, so a
            // written head is this thread's to take.
            let c = Priority::Critical.index();
            if let Some(item) = self.rings[c].pop_unshared() {
                return Some((item, Priority::Critical));
            }
            match self.pop_lower(Priority::Routine) {
                Lower::Took(item) => return Some((item, Priority::Routine)),
                Lower::Again => continue,
                Lower::Absent => {}
            }
            return match self.pop_lower(Priority::Idle) {
                Lower::Took(item) => Some((item, Priority::Idle)),
                Lower::Again => continue,
                Lower::Absent => None,
            };
        }
    }

    /// `pop` for a class that displacing producers also remove from
    /// (`Routine`, `Idle`): if its next item is written and no higher class
    /// has one written by now, takes it (a CAS on the head: a displacing
    /// producer may take it first). Kept apart so that each call is
    /// compiled for its constant class.
    #[inline(always)]
    fn pop_lower(&self, class: Priority) -> Lower<T> {
        let c = class.index();
        let ring = &self.rings[c];
        let mut head = ring.end.head.load(Ordering::SeqCst);
        while ring.slot(head).seq.load(Ordering::Acquire) != head.wrapping_add(1) {
            // Not written: the class is empty or its next item in transit,
            // unless a displacer took the item at `head` meanwhile (then
            // the head has moved on, and the next item may be written).
            let now = ring.end.head.load(Ordering::SeqCst);
            if now == head {
                return Lower::Absent;
            }
            head = now;
        }
        if self.higher_ready(c) {
            return Lower::Again;
        }
        match ring.take_at(head) {
            Some(item) => Lower::Took(item),
            None => Lower::Again,
        }
    }

    /// Whether a class above `c` has an item written at its head. `pop`
    /// looked at those heads before `c`'s, and may have found one still
    /// being written; the acquire load since (`c`'s head written) may have
    /// made that item's write visible, or that of an item pushed before
    /// `c`'s (a push that returned before `c`'s began): then the pop must
    /// take it, not `c`'s.
    #[inline(always)]
    fn higher_ready(&self, c: usize) -> bool {
        self.rings[Priority::Critical.index()].head_ready()
            || (c < Priority::Routine.index() && self.rings[Priority::Routine.index()].head_ready())
    }

    /// The queue's count of each class, for the metrics: exact unless the
    /// consumer popped, or a producer folded or was folding, during each
    /// of `READ_ATTEMPTS` reads (each retry after a short spin, which lets
    /// a folding producer finish), then the last read, cut to 0 and the
    /// capacity. A fold's claimed pops are still in the word until its
    /// CAS, so that read may count them as items of their class.
    fn depth(&self) -> FallbackDepth {
        let mut last = Counts([0; 3]);
        let mut backoff = 0;
        for _ in 0..READ_ATTEMPTS {
            match self.read_once() {
                Ok(counts) => return counts.depth(self.capacity),
                Err(counts) => last = counts,
            }
            crate::sync::spin(&mut backoff);
        }
        last.depth(self.capacity)
    }

    pub(super) fn len(&self) -> usize {
        self.depth().total()
    }

    pub(super) fn fallback_depth(&self) -> FallbackDepth {
        self.depth()
    }

    fn class_stats(&self, class: Priority, depth: usize) -> ClassStats {
        let ring = &self.rings[class.index()];
        // Read `displaced` before `head` and `head` before `tail`, so that
        // `removed >= displaced` and `queued >= removed`.
        let displaced = ring.slow.displaced.load(Ordering::Acquire) as u64;
        let handed_back = ring.slow.handed_back.load(Ordering::Acquire) as u64;
        let removed = ring.end.head.load(Ordering::Acquire).wrapping_sub(self.start) as u64;
        let queued = self.hot.tails[class.index()]
            .load(Ordering::Acquire)
            .wrapping_sub(self.start) as u64;
        ClassStats {
            pushed: queued + handed_back,
            queued,
            popped: removed.saturating_sub(displaced),
            displaced,
            handed_back,
            depth: depth as u64,
        }
    }

    pub(super) fn stats(&self) -> Stats {
        let depth = self.depth();
        Stats {
            idle: self.class_stats(Priority::Idle, depth.idle),
            routine: self.class_stats(Priority::Routine, depth.routine),
            critical: self.class_stats(Priority::Critical, depth.critical),
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

    /// A push that finds the word full because of pops not folded yet
    /// folds them in and queues its item: nothing displaced, nothing
    /// handed back, the counts exact before and after.
    #[test]
    fn a_push_that_finds_the_word_full_of_popped_items_folds_the_pops() {
        let inner = Inner::<u32>::new(2, 0).unwrap();
        assert!(inner.push(1, Priority::Idle).is_ok());
        assert!(inner.push(2, Priority::Idle).is_ok());
        assert_eq!(inner.pop(), Some((1, Priority::Idle)));
        assert_eq!(
            total(inner.hot.occupancy.load(Ordering::Relaxed)),
            2,
            "the pop is not folded yet"
        );
        assert_eq!(inner.len(), 1, "but the counts are exact");
        assert!(matches!(inner.push(3, Priority::Routine), Ok(Pushed::Queued)));
        assert_eq!(inner.accounted(), [1, 0, 0]);
        let d = inner.fallback_depth();
        assert_eq!(
            (inner.len(), d.class(Priority::Idle), d.class(Priority::Routine)),
            (2, 1, 1)
        );
        assert_eq!(inner.pop(), Some((3, Priority::Routine)));
        assert_eq!(inner.pop(), Some((2, Priority::Idle)));
        assert_eq!(inner.pop(), None);
    }

    /// A pop never writes the producers' line: a consumer that pops leaves
    /// the occupancy word and the folded counts as they were.
    #[test]
    fn a_pop_writes_only_the_consumers_lines() {
        let inner = Inner::<u32>::new(4, 0).unwrap();
        for (i, class) in Priority::ALL.into_iter().enumerate() {
            assert!(inner.push(i as u32, class).is_ok());
        }
        let word = inner.hot.occupancy.load(Ordering::Relaxed);
        while inner.pop().is_some() {}
        assert_eq!(inner.hot.occupancy.load(Ordering::Relaxed), word);
        assert_eq!(inner.accounted(), [0, 0, 0]);
        assert_eq!(inner.heads(), [1, 1, 1]);
        assert_eq!(inner.len(), 0);
    }

    /// Pushes and pops in turn, many laps of the capacity: the word fills
    /// with pops not folded, then a push folds all of them at once, so the
    /// full path runs once per `capacity` pushes, not at every push; every
    /// push queues.
    #[test]
    fn pops_are_folded_in_bulk_once_per_lap() {
        let cap = 64;
        let inner = Inner::<u32>::new(cap, 0).unwrap();
        let mut folds = 0;
        let mut last = [0usize; 3];
        for i in 0..(100 * cap as u32) {
            assert!(matches!(inner.push(i, Priority::Routine), Ok(Pushed::Queued)));
            assert_eq!(inner.pop(), Some((i, Priority::Routine)));
            let now = inner.accounted();
            if now != last {
                folds += 1;
                // Everything popped so far but the last item was folded.
                assert_eq!(now[1], i as usize, "after push {i}");
                last = now;
            }
        }
        assert!((99..=100).contains(&folds), "{folds} folds in 100 laps");
        assert_eq!(inner.len(), 0);
    }

    /// Counts below 0 (a displacer's claim met by a pop it has not folded
    /// yet) read as 0; counts over the capacity (a read while the consumer
    /// popped) are cut from the lowest class up; counts within it are
    /// left alone.
    #[test]
    fn counts_are_read_as_0_to_the_capacity() {
        let depth = |c: [i64; 3], cap| {
            let d = Counts(c).depth(cap);
            [d.idle, d.routine, d.critical]
        };
        assert_eq!(depth([1, 2, 3], 6), [1, 2, 3]);
        assert_eq!(depth([1, 2, 3], 5), [0, 2, 3]);
        assert_eq!(depth([1, 2, 3], 4), [0, 1, 3]);
        assert_eq!(depth([4, 0, 7], 5), [0, 0, 5]);
        assert_eq!(depth([-1, 1, 1], 3), [0, 1, 1]);
        assert_eq!(depth([i64::MIN, i64::MAX, 0], 3), [0, 3, 0]);
    }
}
