//! Breaker time: nanoseconds since the breaker was built, on its own clock,
//! signed so that a clock that stepped back is seen, and the floor that keeps
//! it from going back past what the breaker has acted on.
//!
//! One definition, three readings of it. The breaker's time at a clock
//! reading `raw` is `nanos_of(raw) + shift` ([`signed_now`](Inner::signed_now)):
//! negative before the breaker's start, and `shift` is raised when the
//! clock is seen to step back, so that the time goes on from where the
//! breaker was. What is reported (uptime, a snapshot) and what a window
//! close measures in-flight calls against is that time, clamped at zero
//! ([`now_from_raw`](Inner::now_from_raw)); what every other decision reads (a
//! probe's lease, an in-flight epoch, a transition's time) is also never
//! before the last window close ([`now_floored`](Inner::now_floored)). A
//! window close detects a step against its own highest time; an OPEN
//! against its deadline (`open.rs`, `stepped_back`).
//!
//! Touches `shift` (raised after a backward step; by window close, and by an
//! OPEN admission that finds the clock behind its trip), reads `clock` and
//! `floor`.

use super::Inner;
use crate::sync::Ordering;

impl Inner {
    /// The breaker's time for a clock reading, but never before the last
    /// window close's (`floor`): for every decision taken outside a close.
    #[inline]
    pub(super) fn now_floored(&self, raw: u64) -> u64 {
        self.now_from_raw(raw).max(self.floor.load(Ordering::Acquire))
    }

    /// The breaker's time for a clock reading, signed: negative when the
    /// clock stepped back to before the breaker's start (or before the
    /// last correction) and nobody has noticed yet.
    #[inline]
    pub(super) fn signed_now(&self, raw: u64) -> i64 {
        self.clock
            .nanos_of(raw)
            .wrapping_add(self.shift.load(Ordering::Acquire)) as i64
    }

    /// Nanoseconds since the breaker was built (zero if the clock stepped
    /// back before that and no correction happened yet).
    #[inline]
    pub(super) fn now_from_raw(&self, raw: u64) -> u64 {
        self.signed_now(raw).max(0) as u64
    }

    #[inline]
    pub(super) fn now(&self) -> u64 {
        self.now_from_raw(self.clock.raw())
    }

    /// Raises `shift` so that the reading `raw` maps to at least `floor`;
    /// returns the corrected time. Only ever moves time forward for a given
    /// reading, so racing callers settle on the highest floor.
    #[cold]
    pub(super) fn raise_floor(&self, raw: u64, floor: u64) -> u64 {
        let nanos = self.clock.nanos_of(raw);
        let mut cur = self.shift.load(Ordering::Acquire);
        loop {
            let now = nanos.wrapping_add(cur) as i64;
            if now >= floor as i64 {
                return now as u64;
            }
            match self
                .shift
                .compare_exchange_weak(cur, floor.wrapping_sub(nanos), Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return floor,
                Err(actual) => cur = actual,
            }
        }
    }
}

/// The end of a breaker's first window, relative to its start at `origin`
/// on its clock: the first multiple of `window` on the clock more than half
/// a window after `origin`.
pub(super) fn first_window_end(origin: u64, window: u64) -> u64 {
    let half = window / 2;
    window - origin.wrapping_add(half) % window + half
}
