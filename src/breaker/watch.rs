//! Tasks to wake when the breaker opens: a task parked on something other
//! than the breaker (a tower service waiting for its inner service's
//! readiness behind a full concurrency limit) registers its waker here, so
//! that an OPEN breaker fails it fast instead of leaving it parked until a
//! slot frees.
//!
//! # Protocol (no lost wake-up)
//!
//! A waiter stores its waker and raises `waiting` (under the lock), then a
//! SeqCst fence, then reads the state word. A transition into OPEN stores
//! the word (its CAS), then a SeqCst fence, then reads `waiting`. Of two
//! store-fence-load sequences split by SeqCst fences, at least one load sees
//! the other's store: either the waiter sees OPEN when it checks again and
//! fails at once, or the transition sees it waiting and wakes it (taking
//! the lock after the waiter released it, so with its waker stored). The
//! loom model `a_parked_task_is_woken_or_sees_the_breaker_open` checks it.
//!
//! # Cost
//!
//! Nothing on `allow` or a verdict. A transition into OPEN pays a fence and
//! a load, and the lock only when a task waits. The wakers are taken out in
//! batches of [`BATCH`] on the stack and woken with the lock released (an
//! executor may poll the task inside `wake`), so waking allocates nothing.
//! Registering is for a task about to park (a cold path): it may grow the
//! slot table, once, to the largest number of tasks parked at once.
//!
//! Touches only its own fields; reads the state word through the caller.

use crate::sync::{fence, AtomicUsize, Mutex, Ordering};
use core::task::Waker;

/// Wakers taken out per turn of the lock.
const BATCH: usize = 16;

#[derive(Debug)]
pub(crate) struct OpenWatch {
    /// Wakers stored (not slots allocated): zero means nobody to wake.
    waiting: AtomicUsize,
    /// Allocated when a task first parks: a breaker nobody waits on keeps
    /// one null pointer.
    table: Mutex<Option<Box<Table>>>,
}

#[derive(Debug, Default)]
struct Table {
    slots: Vec<Option<Waker>>,
    /// Slots no waiter holds.
    free: Vec<usize>,
}

/// A waiter's place in an [`OpenWatch`]: `None` until it first parks.
#[cfg(any(feature = "tower", tailguard_loom))]
pub(crate) type WatchKey = Option<usize>;

impl OpenWatch {
    pub(crate) fn new() -> Self {
        Self {
            waiting: AtomicUsize::new(0),
            table: Mutex::new(None),
        }
    }

    /// Stores `waker` for the waiter `key` (taking a slot on first use),
    /// then fences: the caller reads the state word next, and, if it is
    /// not refused, may park.
    #[cfg(any(feature = "tower", tailguard_loom))]
    pub(crate) fn register(&self, key: &mut WatchKey, waker: &Waker) {
        {
            let mut guard = self.table.lock();
            let table = guard.get_or_insert_with(Box::default);
            let slot = match *key {
                Some(slot) => slot,
                None => {
                    let slot = match table.free.pop() {
                        Some(slot) => slot,
                        None => {
                            table.slots.push(None);
                            table.slots.len() - 1
                        }
                    };
                    *key = Some(slot);
                    slot
                }
            };
            match &mut table.slots[slot] {
                Some(stored) if stored.will_wake(waker) => {}
                Some(stored) => stored.clone_from(waker),
                entry @ None => {
                    *entry = Some(waker.clone());
                    self.waiting.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        fence(Ordering::SeqCst);
    }

    /// The waiter `key` is not parked any more (its waker is dropped, its
    /// slot kept for its next park).
    #[cfg(any(feature = "tower", tailguard_loom))]
    pub(crate) fn clear(&self, key: WatchKey) {
        if let Some(slot) = key {
            let old = self.table.lock().as_mut().and_then(|t| t.slots[slot].take());
            if old.is_some() {
                self.waiting.fetch_sub(1, Ordering::Relaxed);
            }
            drop(old);
        }
    }

    /// The waiter `key` is gone: its slot is free for another.
    #[cfg(any(feature = "tower", tailguard_loom))]
    pub(crate) fn remove(&self, key: &mut WatchKey) {
        if let Some(slot) = key.take() {
            let old = self.table.lock().as_mut().and_then(|table| {
                table.free.push(slot);
                table.slots[slot].take()
            });
            if old.is_some() {
                self.waiting.fetch_sub(1, Ordering::Relaxed);
            }
        }
    }

    /// After a transition into OPEN (its CAS already stored): wakes every
    /// waiter parked now. Each woken waiter checks the breaker again and
    /// registers again if it parks again.
    pub(crate) fn wake_all(&self) {
        fence(Ordering::SeqCst);
        if self.waiting.load(Ordering::Relaxed) == 0 {
            return;
        }
        let mut from = 0;
        loop {
            let mut batch: [Option<Waker>; BATCH] = Default::default();
            let mut taken = 0;
            let more = {
                let mut guard = self.table.lock();
                let Some(table) = guard.as_mut() else { return };
                let len = table.slots.len();
                while from < len && taken < BATCH {
                    if let Some(waker) = table.slots[from].take() {
                        batch[taken] = Some(waker);
                        taken += 1;
                    }
                    from += 1;
                }
                from < len
            };
            self.waiting.fetch_sub(taken, Ordering::Relaxed);
            for waker in batch.iter_mut().filter_map(Option::take) {
                waker.wake();
            }
            if !more {
                return;
            }
        }
    }

    /// Heap bytes held by the slot table.
    pub(crate) fn heap_bytes(&self) -> usize {
        self.table.lock().as_ref().map_or(0, |table| {
            core::mem::size_of::<Table>()
                + table.slots.capacity() * core::mem::size_of::<Option<Waker>>()
                + table.free.capacity() * core::mem::size_of::<usize>()
        })
    }
}
