//! A bulkhead: a lock-free bound on the calls in flight to one consumer, so
//! that a slow consumer cannot take every connection (or task) of the router.
//!
//! [`Bulkhead::try_acquire`] never waits: it takes a slot with one CAS on
//! the in-flight count, or refuses at once ([`BulkheadFull`]); the guard it
//! returns gives the slot back when dropped, whatever happens to the call
//! (its future is cancelled, it panics). Nothing allocates. The refusals are
//! counted on a cache line of their own, so a full bulkhead does not slow
//! the admissions.

use crate::error::{ConfigError, ConfigErrorKind};
use crate::sync::{Arc, AtomicU64, AtomicUsize, Ordering};
use core::fmt;
use crossbeam_utils::CachePadded;

/// A bound on the calls in flight to one consumer. Cheap to clone (an
/// `Arc`); every clone is the same bulkhead.
///
/// ```
/// use tailguard::Bulkhead;
///
/// let bulkhead = Bulkhead::new(2)?;
/// let a = bulkhead.try_acquire().unwrap();
/// let b = bulkhead.try_acquire().unwrap();
/// assert!(bulkhead.try_acquire().is_err()); // full: refused at once
/// drop(a);
/// assert!(bulkhead.try_acquire().is_ok()); // the slot came back
/// assert_eq!((bulkhead.in_flight(), bulkhead.rejections()), (1, 1));
/// # drop(b);
/// # Ok::<(), tailguard::ConfigError>(())
/// ```
#[derive(Clone)]
pub struct Bulkhead {
    inner: Arc<Inner>,
}

struct Inner {
    in_flight: CachePadded<AtomicUsize>,
    rejections: CachePadded<AtomicU64>,
    max: usize,
}

/// The bulkhead was full; the call was not made.
///
/// ```
/// let bulkhead = tailguard::Bulkhead::new(1).unwrap();
/// let _held = bulkhead.try_acquire().unwrap();
/// let full = bulkhead.try_acquire().unwrap_err();
/// assert_eq!(full.to_string(), "bulkhead full: 1 calls in flight");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BulkheadFull {
    max: usize,
}

impl fmt::Display for BulkheadFull {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "bulkhead full: {} calls in flight", self.max)
    }
}

impl std::error::Error for BulkheadFull {}

/// A slot of a [`Bulkhead`], held for one call; dropping it gives the slot
/// back.
#[must_use = "the slot is given back as soon as the guard is dropped"]
pub struct BulkheadPermit<'a> {
    bulkhead: &'a Bulkhead,
}

/// A slot of a [`Bulkhead`] that owns a handle on it, for futures and
/// threads that outlive the borrow; dropping it gives the slot back.
#[must_use = "the slot is given back as soon as the guard is dropped"]
pub struct OwnedBulkheadPermit {
    bulkhead: Bulkhead,
}

impl Bulkhead {
    /// A bulkhead admitting at most `max_in_flight` calls at once.
    ///
    /// # Errors
    /// A [`ConfigError`] for the field `"max_in_flight"` when it is 0.
    ///
    /// ```
    /// assert_eq!(tailguard::Bulkhead::new(0).unwrap_err().field(), "max_in_flight");
    /// ```
    pub fn new(max_in_flight: usize) -> Result<Self, ConfigError> {
        if max_in_flight == 0 {
            return Err(ConfigError::new(
                "max_in_flight",
                ConfigErrorKind::Zero,
                "Bulkhead::new(0): a bulkhead must admit at least one call",
            ));
        }
        Ok(Self {
            inner: Arc::new(Inner {
                in_flight: CachePadded::new(AtomicUsize::new(0)),
                rejections: CachePadded::new(AtomicU64::new(0)),
                max: max_in_flight,
            }),
        })
    }

    /// Takes a slot if one is free, at once; never waits.
    ///
    /// # Errors
    /// [`BulkheadFull`] when every slot is taken (counted in
    /// [`rejections`](Self::rejections)).
    ///
    /// ```
    /// let bulkhead = tailguard::Bulkhead::new(1).unwrap();
    /// let slot = bulkhead.try_acquire().unwrap();
    /// assert_eq!(bulkhead.in_flight(), 1);
    /// drop(slot);
    /// assert_eq!(bulkhead.in_flight(), 0);
    /// ```
    #[inline]
    pub fn try_acquire(&self) -> Result<BulkheadPermit<'_>, BulkheadFull> {
        self.take().map(|()| BulkheadPermit { bulkhead: self })
    }

    /// As [`try_acquire`](Self::try_acquire), for a guard that owns a handle
    /// on the bulkhead (one reference count more).
    ///
    /// # Errors
    /// [`BulkheadFull`] when every slot is taken.
    ///
    /// ```
    /// let bulkhead = tailguard::Bulkhead::new(1).unwrap();
    /// let slot = bulkhead.try_acquire_owned().unwrap();
    /// std::thread::spawn(move || drop(slot)).join().unwrap();
    /// assert_eq!(bulkhead.in_flight(), 0);
    /// ```
    #[inline]
    pub fn try_acquire_owned(&self) -> Result<OwnedBulkheadPermit, BulkheadFull> {
        self.take().map(|()| OwnedBulkheadPermit { bulkhead: self.clone() })
    }

    #[inline]
    fn take(&self) -> Result<(), BulkheadFull> {
        let count = &self.inner.in_flight;
        let mut cur = count.load(Ordering::Relaxed);
        loop {
            if cur >= self.inner.max {
                self.inner.rejections.fetch_add(1, Ordering::Relaxed);
                return Err(BulkheadFull { max: self.inner.max });
            }
            match count.compare_exchange_weak(cur, cur + 1, Ordering::Acquire, Ordering::Relaxed) {
                Ok(_) => return Ok(()),
                Err(actual) => cur = actual,
            }
        }
    }

    #[inline]
    fn give_back(&self) {
        self.inner.in_flight.fetch_sub(1, Ordering::Release);
    }

    /// Calls in flight now.
    ///
    /// ```
    /// assert_eq!(tailguard::Bulkhead::new(3).unwrap().in_flight(), 0);
    /// ```
    pub fn in_flight(&self) -> usize {
        self.inner.in_flight.load(Ordering::Relaxed)
    }

    /// Calls refused so far because the bulkhead was full.
    ///
    /// ```
    /// assert_eq!(tailguard::Bulkhead::new(3).unwrap().rejections(), 0);
    /// ```
    pub fn rejections(&self) -> u64 {
        self.inner.rejections.load(Ordering::Relaxed)
    }

    /// Whether two handles are the same bulkhead.
    ///
    /// ```
    /// let a = tailguard::Bulkhead::new(2).unwrap();
    /// assert!(a.ptr_eq(&a.clone()));
    /// assert!(!a.ptr_eq(&tailguard::Bulkhead::new(2).unwrap()));
    /// ```
    pub fn ptr_eq(&self, other: &Bulkhead) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// The most calls in flight at once.
    ///
    /// ```
    /// assert_eq!(tailguard::Bulkhead::new(3).unwrap().max_in_flight(), 3);
    /// ```
    pub fn max_in_flight(&self) -> usize {
        self.inner.max
    }
}

impl fmt::Debug for Bulkhead {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Bulkhead")
            .field("in_flight", &self.in_flight())
            .field("max_in_flight", &self.inner.max)
            .field("rejections", &self.rejections())
            .finish()
    }
}

impl Drop for BulkheadPermit<'_> {
    #[inline]
    fn drop(&mut self) {
        self.bulkhead.give_back();
    }
}

impl Drop for OwnedBulkheadPermit {
    #[inline]
    fn drop(&mut self) {
        self.bulkhead.give_back();
    }
}

impl fmt::Debug for BulkheadPermit<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("BulkheadPermit")
    }
}

impl fmt::Debug for OwnedBulkheadPermit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("OwnedBulkheadPermit")
    }
}

#[cfg(all(test, not(tailguard_loom)))]
mod tests {
    use super::*;

    #[test]
    fn never_more_than_the_limit_in_flight_whatever_the_race() {
        let bulkhead = Bulkhead::new(3).unwrap();
        let peak = AtomicUsize::new(0);
        let admitted = AtomicUsize::new(0);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..20_000 {
                        if let Ok(slot) = bulkhead.try_acquire() {
                            peak.fetch_max(bulkhead.in_flight(), Ordering::Relaxed);
                            admitted.fetch_add(1, Ordering::Relaxed);
                            drop(slot);
                        }
                    }
                });
            }
        });
        assert!(peak.load(Ordering::Relaxed) <= 3);
        assert_eq!(bulkhead.in_flight(), 0);
        assert_eq!(
            admitted.load(Ordering::Relaxed) as u64 + bulkhead.rejections(),
            4 * 20_000
        );
    }

    #[test]
    fn a_panicking_call_gives_its_slot_back() {
        let bulkhead = Bulkhead::new(1).unwrap();
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _slot = bulkhead.try_acquire().unwrap();
            panic!("the call panicked (expected by this test)");
        }));
        assert!(r.is_err());
        assert!(bulkhead.try_acquire().is_ok());
    }
}
