//! The class rings: bounded Vyukov-style arrays of slots, each with a
//! sequence number, and all of the queue's `unsafe` (reading and writing a
//! slot's item under the `seq` protocol). See the module docs of `dlq` for
//! the protocol; every `unsafe` block here states the invariant it relies on.

use core::mem::MaybeUninit;

use crossbeam_utils::CachePadded;

use crate::error::{ConfigError, ConfigErrorKind};
use crate::sync::{AtomicUsize, Ordering, UnsafeCell};

/// One slot of a class ring.
pub(super) struct Slot<T> {
    /// `p` when free for the producer of position `p`; `p + 1` when it holds
    /// the item of position `p`.
    pub(super) seq: AtomicUsize,
    /// Initialised exactly when `seq == p + 1` for the slot's current `p`
    /// (and while the remover that claimed `p` has not yet taken it out).
    pub(super) value: UnsafeCell<MaybeUninit<T>>,
}

/// The removing end of a ring, on a line of its own: written by the
/// consumer at each pop of the class, and by no producer except a
/// displacing one.
pub(super) struct End {
    /// The position of the ring's oldest item: advanced by whoever removes
    /// it (the consumer, or a displacing producer). Its distance from the
    /// start is the class's removals, ever: producers that find the queue
    /// full read it to learn of the consumer's pops (`queue.rs`).
    pub(super) head: AtomicUsize,
}

/// A bounded FIFO of one class: producers add at the class's tail (kept in
/// the queue's producer line, `fetch_add`; the admission guarantees room),
/// the consumer and displacing producers remove at `end.head` (CAS).
pub(super) struct Ring<T> {
    pub(super) end: CachePadded<End>,
    /// Slow-path counters of this class.
    pub(super) slow: CachePadded<SlowCounters>,
    /// `slots.len() - 1`; `slots.len()` is a power of two.
    pub(super) mask: usize,
    pub(super) slots: Box<[Slot<T>]>,
}

/// Counters touched only on the slow paths (full queue).
pub(super) struct SlowCounters {
    /// Removals of this class by displacement (the rest were pops).
    pub(super) displaced: AtomicUsize,
    /// Pushes of this class refused with `Full`.
    pub(super) handed_back: AtomicUsize,
}

impl<T> Ring<T> {
    pub(super) fn new(slot_count: usize, start: usize) -> Result<Self, ConfigError> {
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
            end: CachePadded::new(End {
                head: AtomicUsize::new(start),
            }),
            slow: CachePadded::new(SlowCounters {
                displaced: AtomicUsize::new(0),
                handed_back: AtomicUsize::new(0),
            }),
            mask,
            slots: slots.into_boxed_slice(),
        })
    }

    #[inline]
    pub(super) fn slot(&self, pos: usize) -> &Slot<T> {
        // `pos & mask < slots.len()`; the compiler keeps the bounds check
        // cheap and it guards the invariant.
        &self.slots[pos & self.mask]
    }

    /// Adds `item` at the tail.
    ///
    /// The caller's item must be counted in the queue's occupancy word (an
    /// admission, or a displacement claimed there). Every item at a
    /// position from the head up to this one is then counted in the word,
    /// or claimed there by a displacer whose own item is counted: at most
    /// the capacity in all, which is at most `slots.len()`. So the slot's
    /// previous occupant, `slots.len()` positions back, is behind the
    /// head: taken by a remover, which at most has to finish reading it.
    #[inline]
    pub(super) fn insert(&self, tail: &AtomicUsize, item: T) {
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

    /// Takes the item at position `head`, which the caller saw written, if
    /// `head` is still the head (no other remover took it meanwhile).
    #[inline]
    pub(super) fn take_at(&self, head: usize) -> Option<T> {
        self.end
            .head
            .compare_exchange(head, head.wrapping_add(1), Ordering::SeqCst, Ordering::Relaxed)
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
    pub(super) fn head_ready(&self) -> bool {
        let head = self.end.head.load(Ordering::SeqCst);
        self.slot(head).seq.load(Ordering::Acquire) == head.wrapping_add(1)
    }

    /// The consumer's removal from a ring that nobody else removes from
    /// (the `Critical` ring: it is never a displacement target): `head` has a
    /// single writer, so it is claimed by a plain store, not an RMW.
    #[inline]
    pub(super) fn pop_unshared(&self) -> Option<T> {
        let head = self.end.head.load(Ordering::Relaxed);
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
        self.end.head.store(head.wrapping_add(1), Ordering::Release);
        Some(item)
    }

    /// With exclusive access: takes the next remaining item out.
    pub(super) fn take_exclusive(&mut self) -> Option<T> {
        let head = self.end.head.load(Ordering::Relaxed);
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
        self.end.head.store(head.wrapping_add(1), Ordering::Relaxed);
        Some(item)
    }

    /// Drops every remaining item once, even if one of their `Drop`s panics.
    pub(super) fn drop_remaining(&mut self) {
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

// SAFETY: items move between threads (pushed on one, popped or dropped on
// another), so `T: Send` is required and sufficient: the slots are only
// accessed under the `seq` protocol, which gives each item one owner at a
// time, and no `&T` is ever shared between threads.
unsafe impl<T: Send> Send for Ring<T> {}
// SAFETY: as above: a shared `&Ring<T>` only lets threads move `T`s in and
// out through the `seq` protocol; it never hands out `&T`.
unsafe impl<T: Send> Sync for Ring<T> {}

pub(super) fn too_large() -> ConfigError {
    ConfigError::new(
        "capacity",
        ConfigErrorKind::TooLarge,
        "with_capacity: the queue's slots (3 rings of capacity.next_power_of_two().max(2) slots) could not be allocated",
    )
}
