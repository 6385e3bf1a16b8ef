//! Synchronisation facade.
//!
//! Every atomic, `Arc` and lock the crate uses comes from here. Normally they
//! are the std / `portable-atomic` / `parking_lot` types; built with
//! `RUSTFLAGS="--cfg tailguard_loom"` they are loom's, so the models in
//! `loom-tests/` explore every interleaving of the real code. The cfg name is
//! the crate's own (not `loom`) so that building the models does not change
//! other crates that also look at `cfg(loom)`.

#[cfg(not(tailguard_loom))]
pub(crate) use portable_atomic::{fence, AtomicBool, AtomicU64, AtomicUsize, Ordering};
#[cfg(not(tailguard_loom))]
pub(crate) use std::sync::atomic::AtomicPtr;
#[cfg(not(tailguard_loom))]
pub(crate) use std::sync::Arc;

#[cfg(tailguard_loom)]
pub(crate) use loom::sync::atomic::AtomicPtr;
#[cfg(tailguard_loom)]
pub(crate) use loom::sync::atomic::{fence, AtomicBool, AtomicU64, AtomicUsize, Ordering};
#[cfg(tailguard_loom)]
pub(crate) use loom::sync::Arc;

/// A box set at most once, by whichever thread asks for it first, and
/// freed with its owner: what a lazily grown table keeps in each slot. One
/// pointer wide; reading a slot that is set is one acquire load (a plain
/// load on x86_64) and a test.
///
/// Two threads that set it at once each build a value; the one whose
/// compare-and-swap publishes it wins, the other's is dropped unused, and
/// both get the winner's.
pub(crate) struct OnceBox<T> {
    ptr: AtomicPtr<T>,
}

impl<T> OnceBox<T> {
    /// An empty slot.
    pub(crate) fn new() -> Self {
        Self {
            ptr: AtomicPtr::new(core::ptr::null_mut()),
        }
    }

    /// The value, if set.
    #[inline(always)]
    pub(crate) fn get(&self) -> Option<&T> {
        let p = self.ptr.load(Ordering::Acquire);
        // SAFETY: `p` is null or a pointer from `Box::into_raw` that a
        // successful compare-and-swap in `get_or_init` published (AcqRel);
        // this acquire load synchronises with it, so the value is fully
        // written. The pointer is never replaced once set, and it is freed
        // only by `drop`, which takes `&mut self`: it outlives `&self`.
        unsafe { p.as_ref() }
    }

    /// The value, built by `init` first if it is not set: the set case
    /// inline (one load and a test), the building out of line.
    #[inline(always)]
    pub(crate) fn get_or_build(&self, init: impl FnOnce() -> T) -> &T {
        match self.get() {
            Some(v) => v,
            None => self.get_or_init(init),
        }
    }

    /// The value, set first by `init` if no thread has set it yet.
    #[cold]
    #[inline(never)]
    pub(crate) fn get_or_init(&self, init: impl FnOnce() -> T) -> &T {
        if let Some(v) = self.get() {
            return v;
        }
        let new = Box::into_raw(Box::new(init()));
        match self
            .ptr
            .compare_exchange(core::ptr::null_mut(), new, Ordering::AcqRel, Ordering::Acquire)
        {
            // SAFETY: `new` came from `Box::into_raw` just above and is now
            // published; it lives until `drop` (see `get`).
            Ok(_) => unsafe { &*new },
            Err(winner) => {
                // SAFETY: `new` came from `Box::into_raw` just above and was
                // never published: this thread owns it alone.
                drop(unsafe { Box::from_raw(new) });
                // SAFETY: `winner` is non-null (the swap failed against a
                // null expectation, and a set slot is never cleared) and was
                // published by another thread's successful swap, which this
                // acquire failure load synchronises with; freed only by `drop`.
                unsafe { &*winner }
            }
        }
    }
}

impl<T> Drop for OnceBox<T> {
    fn drop(&mut self) {
        let p = self.ptr.load(Ordering::Acquire);
        if !p.is_null() {
            // SAFETY: a non-null pointer came from `Box::into_raw` in
            // `get_or_init` and is owned by this slot alone; `&mut self`
            // means no reference from `get` is alive.
            drop(unsafe { Box::from_raw(p) });
        }
    }
}

impl<T: core::fmt::Debug> core::fmt::Debug for OnceBox<T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_tuple("OnceBox").field(&self.get()).finish()
    }
}

// SAFETY: the slot owns a `T` (it drops it) and hands out `&T` to any
// thread: `Send` needs `T: Send`, `Sync` needs `T: Send + Sync` (a value
// built on one thread may be dropped on another, and shared by all).
unsafe impl<T: Send> Send for OnceBox<T> {}
// SAFETY: as above.
unsafe impl<T: Send + Sync> Sync for OnceBox<T> {}

/// A mutex for cold paths: `parking_lot` normally, loom's under the model.
#[derive(Debug, Default)]
pub(crate) struct Mutex<T> {
    #[cfg(not(tailguard_loom))]
    inner: parking_lot::Mutex<T>,
    #[cfg(tailguard_loom)]
    inner: loom::sync::Mutex<T>,
}

impl<T> Mutex<T> {
    pub(crate) fn new(value: T) -> Self {
        Self {
            #[cfg(not(tailguard_loom))]
            inner: parking_lot::Mutex::new(value),
            #[cfg(tailguard_loom)]
            inner: loom::sync::Mutex::new(value),
        }
    }

    #[cfg(not(tailguard_loom))]
    pub(crate) fn lock(&self) -> parking_lot::MutexGuard<'_, T> {
        self.inner.lock()
    }

    #[cfg(tailguard_loom)]
    pub(crate) fn lock(&self) -> loom::sync::MutexGuard<'_, T> {
        // A poisoned lock under a model means a panic already failed it.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// `UnsafeCell` with loom's access tracking under the model.
#[cfg(not(tailguard_loom))]
#[derive(Debug)]
pub(crate) struct UnsafeCell<T>(core::cell::UnsafeCell<T>);

#[cfg(not(tailguard_loom))]
impl<T> UnsafeCell<T> {
    pub(crate) const fn new(value: T) -> Self {
        Self(core::cell::UnsafeCell::new(value))
    }

    /// Runs `f` with a shared pointer to the contents.
    #[inline(always)]
    pub(crate) fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
        f(self.0.get())
    }

    /// Runs `f` with a mutable pointer to the contents.
    #[inline(always)]
    pub(crate) fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        f(self.0.get())
    }
}

#[cfg(tailguard_loom)]
pub(crate) use loom::cell::UnsafeCell;

/// Hints the processor to start loading the `len` bytes from `p` into the
/// cache, one line at a time, and returns at once. A no-op where there is
/// no prefetch instruction to use (and under Miri).
///
/// This, [`OnceBox`] and the dead-letter queue's ring are the crate's only
/// `unsafe`.
#[cfg(not(tailguard_loom))]
#[inline(always)]
#[cfg_attr(not(all(target_arch = "x86_64", not(miri))), allow(unused_variables))]
pub(crate) fn prefetch(p: *const u8, len: usize) {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    {
        use core::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        const LINE: usize = 64;
        // Every line the range touches, from the one `p` is in.
        let first = p.wrapping_sub(p as usize % LINE);
        let mut offset = 0;
        while offset < len + p as usize % LINE {
            // SAFETY: `_mm_prefetch` is unsafe to call because it takes a
            // raw pointer and because it is a `target_feature(enable =
            // "sse")` function. SSE is part of every x86_64 target, and the
            // instruction is a hint: it never faults and reads nothing into
            // the program, so any address, even a dangling or unmapped one,
            // is allowed.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(first.wrapping_add(offset).cast()) };
            offset += LINE;
        }
    }
}

/// Waits a little for another thread's short critical window to end: spins
/// with a growing count, then yields (under loom, yields at once).
#[inline]
pub(crate) fn spin(backoff: &mut u32) {
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
