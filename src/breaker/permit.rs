//! Permits and the owned per-core handle: what `allow` hands out, how a
//! verdict (or a drop without one) is counted, and where.
//!
//! A permit reads the state word once more at its verdict (is its
//! generation still the current one? otherwise its verdict is stale) and
//! writes only its thread's shard (or its handle's single-writer shard);
//! a probe's verdict goes to `transition.rs`. Touches `local_free` (the
//! handles' shards) and nothing else of the shared state.

use super::transition::ProbeOutcome;
use super::{Breaker, Inner};
use crate::config::CancelPolicy;
use crate::report::{NoLocalShard, Rejected};
use crate::shard::{LocalShard, Shard};
use crate::sketch::bucket_of;
use crate::state::{Word, GEN_MASK};
use crate::sync::{Arc, Ordering};
use core::fmt;
use core::marker::PhantomData;
use core::mem::ManuallyDrop;
use std::time::Duration;

/// What a permit is, in one word (a plain `u64` keeps the permit free of
/// enum niches, so it moves in whole registers): the generation bits of the
/// state word it was admitted under (in place, [`GEN_MASK`]), its kind in
/// bits 0–1, and for a probe its lease entry + 1 (0: none) in bits 2–10.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) struct Tag(u64);

impl Tag {
    const KIND: u64 = 0b11;
    pub(super) const NORMAL: u64 = 0;
    pub(super) const PROBE: u64 = 1;
    /// Measures nothing (disabled).
    pub(super) const DISABLED: Tag = Tag(2);

    /// An ordinary call admitted under `word`.
    #[inline(always)]
    pub(super) fn normal(word: Word) -> Tag {
        Tag(word.0 & GEN_MASK)
    }

    /// A HALF_OPEN probe admitted under `word`, holding lease entry
    /// `lease − 1` (0: none).
    pub(super) fn probe(word: Word, lease: usize) -> Tag {
        Tag(word.0 & GEN_MASK | Self::PROBE | (lease as u64) << 2)
    }

    #[inline(always)]
    pub(super) fn kind(self) -> u64 {
        self.0 & Self::KIND
    }

    pub(super) fn lease(self) -> usize {
        ((self.0 >> 2) & 0x1ff) as usize
    }

    /// A state word of the generation this permit was admitted in (its
    /// generation bits only).
    #[inline(always)]
    pub(super) fn word(self) -> Word {
        Word(self.0 & GEN_MASK)
    }

    /// Whether `word` is still in the generation this permit was admitted in.
    #[inline(always)]
    pub(super) fn is_current(self, word: Word) -> bool {
        (word.0 ^ self.0) & GEN_MASK == 0
    }
}

/// The permit's data, shared by [`Permit`] and [`LocalPermit`].
pub(super) struct Core<'a> {
    pub(super) inner: &'a Inner,
    pub(super) start: u64,
    pub(super) tag: Tag,
    /// An ordinary call: its in-flight word (`crate::flight`'s "A permit's
    /// word": 0 when not tracked). A probe: its round's full generation.
    pub(super) aux: u64,
}

/// Where a verdict is counted.
#[derive(Clone, Copy)]
enum Sink<'a> {
    /// The calling thread's shard, found now.
    Shared,
    /// The calling thread's shard, found before the clock's end reading
    /// (see [`Permit::shard`]).
    Resolved(&'a Shard),
    Local(&'a LocalShard),
    /// A per-core shard found before the clock's end reading (see
    /// [`LocalPermit::shard`]): recorded at a guessed bucket first.
    LocalResolved(&'a LocalShard),
}

impl<'a> Sink<'a> {
    /// The shard found before the end reading, or the thread's own found
    /// now if it was not built then.
    #[inline(always)]
    fn of(shard: Option<&'a Shard>) -> Self {
        match shard {
            Some(shard) => Sink::Resolved(shard),
            None => Sink::Shared,
        }
    }

    #[inline(always)]
    fn record(self, inner: &Inner, latency_ns: u64, error: bool, slow: bool) {
        let t = inner.shards.threshold_index;
        let bucket = bucket_of(latency_ns, slow, t);
        match self {
            Sink::Shared => inner.shards.mine().record(bucket, error),
            Sink::Resolved(shard) => shard.record_guessed(bucket, error),
            Sink::Local(shard) => shard.record(bucket, error),
            Sink::LocalResolved(shard) => shard.record_guessed(bucket, error),
        }
    }

    fn cancel(self, inner: &Inner) {
        match self {
            Sink::Shared => inner.shards.mine().cancel(),
            Sink::Resolved(shard) => shard.cancel(),
            Sink::Local(shard) | Sink::LocalResolved(shard) => shard.cancel(),
        }
    }

    fn stale(self, inner: &Inner) {
        match self {
            Sink::Shared => inner.shards.mine().stale(),
            Sink::Resolved(shard) => shard.stale(),
            Sink::Local(shard) | Sink::LocalResolved(shard) => shard.stale(),
        }
    }

    /// The failure of a call window close counted already (in flight, as
    /// a slow call of an earlier window): its error, without the call.
    #[cold]
    fn error_of_counted(self, inner: &Inner) {
        match self {
            Sink::Shared => inner.shards.mine().error_of_counted(),
            Sink::Resolved(shard) => shard.error_of_counted(),
            Sink::Local(shard) | Sink::LocalResolved(shard) => shard.error_of_counted(),
        }
    }
}

impl Core<'_> {
    #[inline(always)]
    fn measured(&self) -> u64 {
        self.inner.clock.delta_nanos(self.start, self.inner.clock.raw())
    }

    /// Leaves the in-flight set; false if window close already counted this
    /// call as slow (then it must not be counted again).
    #[inline(always)]
    fn leave_flight(&self) -> bool {
        if self.aux == 0 {
            return true;
        }
        self.inner.leave_flight(self.aux, self.tag.word())
    }

    /// Whether this probe's round is still the current one.
    fn probe_is_current(&self) -> bool {
        let state = &self.inner.state;
        state.full_generation(state.load()) == self.aux
    }

    /// The verdict, with the latency measured on the breaker's clock now
    /// (a disabled permit reads no clock).
    #[inline(always)]
    fn finish_measured(&self, ok: bool, sink: Sink<'_>) {
        if self.tag.kind() != Tag::NORMAL {
            if self.tag != Tag::DISABLED {
                self.finish_other(self.measured(), ok, sink);
            }
            return;
        }
        self.finish_normal(self.measured(), ok, sink);
    }

    #[inline(always)]
    fn finish(&self, latency_ns: u64, ok: bool, sink: Sink<'_>) {
        if self.tag.kind() != Tag::NORMAL {
            return self.finish_other(latency_ns, ok, sink);
        }
        self.finish_normal(latency_ns, ok, sink);
    }

    /// A call that ran out of its time after `elapsed_ns`: a failure, and
    /// slow (at least one nanosecond over the latency threshold) whatever
    /// the timeout was.
    #[inline(always)]
    fn finish_timed_out(&self, elapsed_ns: u64, sink: Sink<'_>) {
        let latency = elapsed_ns.max(self.inner.config.threshold_ns.saturating_add(1));
        self.finish(latency, false, sink);
    }

    /// An ordinary call's verdict: counted in the window, unless window
    /// close already counted it in flight, or it is from an earlier
    /// generation (stale).
    #[inline(always)]
    fn finish_normal(&self, latency_ns: u64, ok: bool, sink: Sink<'_>) {
        if self.leave_flight() {
            if self.tag.is_current(self.inner.state.load()) {
                let slow = latency_ns > self.inner.config.threshold_ns;
                sink.record(self.inner, latency_ns, !ok, slow);
            } else {
                sink.stale(self.inner);
            }
        } else if !ok && self.tag.is_current(self.inner.state.load()) {
            // Counted in flight as slow: its failure counts too (in the
            // errors, the error rate's span and the failure count).
            sink.error_of_counted(self.inner);
        }
    }

    /// `finish` for a probe (which decides its round) or a disabled permit
    /// (which measures nothing).
    #[inline(never)]
    fn finish_other(&self, latency_ns: u64, ok: bool, sink: Sink<'_>) {
        if self.tag.kind() != Tag::PROBE {
            return;
        }
        let slow = latency_ns > self.inner.config.threshold_ns;
        if self.probe_is_current() {
            sink.record(self.inner, latency_ns, !ok, slow);
        } else {
            sink.stale(self.inner);
        }
        // Judged by the threshold windows are judged by now (with the
        // relative rule, its threshold if lower than the absolute one).
        let slow = latency_ns > self.inner.threshold_ns.load(Ordering::Relaxed);
        let outcome = match (ok, slow) {
            (false, _) => ProbeOutcome::Failed,
            (true, true) => ProbeOutcome::Slow,
            (true, false) => ProbeOutcome::Good,
        };
        self.inner.probe_verdict(self.aux, self.tag.lease(), outcome);
    }

    /// The call was never made: give a probe slot back, leave the in-flight
    /// set, count nothing.
    #[cold]
    fn abandon(&self) {
        match self.tag.kind() {
            Tag::NORMAL => {
                let _ = self.leave_flight();
            }
            Tag::PROBE => self
                .inner
                .probe_verdict(self.aux, self.tag.lease(), ProbeOutcome::Cancelled),
            _ => {}
        }
    }

    #[cold]
    fn cancel(&self, sink: Sink<'_>) {
        if self.tag == Tag::DISABLED {
            return;
        }
        match self.inner.config.cancel {
            CancelPolicy::Failure => self.finish(self.measured(), false, sink),
            CancelPolicy::Cancelled if self.tag.kind() == Tag::PROBE => {
                if self.probe_is_current() {
                    sink.cancel(self.inner);
                } else {
                    sink.stale(self.inner);
                }
                self.inner
                    .probe_verdict(self.aux, self.tag.lease(), ProbeOutcome::Cancelled);
            }
            CancelPolicy::Cancelled => {
                if self.leave_flight() {
                    if self.tag.is_current(self.inner.state.load()) {
                        sink.cancel(self.inner);
                    } else {
                        sink.stale(self.inner);
                    }
                }
            }
        }
    }
}

/// Permission to make one call; record its verdict with [`record`](Self::record)
/// or [`record_latency`](Self::record_latency), which consume it.
///
/// Dropped without a verdict (a cancelled future, a panic, an early return)
/// it counts as cancelled (or as a failure, per [`CancelPolicy`]), and a
/// probe permit gives its slot back.
///
/// Recording twice does not compile:
/// ```compile_fail
/// let b = tailguard::Breaker::builder().build().unwrap();
/// let p = b.allow().unwrap();
/// p.record(true);
/// p.record(true); // use of moved value
/// ```
#[must_use = "a permit is a call in flight: record its verdict, or drop it to cancel"]
pub struct Permit<'a> {
    pub(super) core: Core<'a>,
}

impl<'a> Permit<'a> {
    /// Records the verdict, measuring the latency since `allow` with the
    /// breaker's clock.
    ///
    /// ```
    /// let b = tailguard::Breaker::builder().build().unwrap();
    /// b.allow().unwrap().record(true);
    /// ```
    #[inline(always)]
    pub fn record(self, ok: bool) {
        let this = ManuallyDrop::new(self);
        this.core.finish_measured(ok, Sink::Shared);
    }

    /// Records the verdict with a latency the caller measured.
    ///
    /// ```
    /// # use std::time::Duration;
    /// let b = tailguard::Breaker::builder().build().unwrap();
    /// b.allow().unwrap().record_latency(Duration::from_millis(8), true);
    /// ```
    #[inline(always)]
    pub fn record_latency(self, latency: Duration, ok: bool) {
        let this = ManuallyDrop::new(self);
        this.core
            .finish(crate::clock::duration_nanos_saturating(latency), ok, Sink::Shared);
    }

    /// Records a call that timed out after `elapsed`: a failure, and a slow
    /// call whatever the timeout (its latency counts as at least one
    /// nanosecond over the latency threshold).
    ///
    /// ```
    /// use std::time::Duration;
    /// let clock = tailguard::clock::ManualClock::new();
    /// let b = tailguard::Breaker::builder().clock(clock.clone()).ticker(false).build().unwrap();
    /// b.allow().unwrap().record_timeout(Duration::from_millis(10)); // shorter than the threshold
    /// clock.advance(Duration::from_secs(1));
    /// b.tick();
    /// let w = b.snapshot().window;
    /// assert_eq!((w.calls, w.errors, w.slow), (1, 1, 1));
    /// ```
    #[inline]
    pub fn record_timeout(self, elapsed: Duration) {
        self.record_timeout_ns(crate::clock::duration_nanos_saturating(elapsed));
    }

    /// The calling thread's shard of this permit's breaker, where its
    /// verdict is counted, if that shard is built already (`None` for a
    /// disabled breaker's permit, which counts nothing). The blocking emit
    /// finds it before its end reading of the clock and records with
    /// [`record_latency_ns_in`](Self::record_latency_ns_in): found after
    /// the reading, it costs the precise emit about 10 ns (see
    /// `benches/emit_overhead.rs`). It never builds the shard, so that a
    /// thread's first call does not time the build (the record builds it,
    /// after the reading) and a disabled breaker builds none.
    #[inline(always)]
    pub(crate) fn shard(&self) -> Option<&'a Shard> {
        if self.core.tag == Tag::DISABLED {
            return None;
        }
        self.core.inner.shards.mine_built()
    }

    /// As [`record_latency`](Self::record_latency), with the latency in
    /// nanoseconds (the emitter's: no round trip through a `Duration`),
    /// counted in `shard` if it is `Some` ([`shard`](Self::shard) of this
    /// permit, found on this thread), else in the thread's shard found now.
    #[inline(always)]
    pub(crate) fn record_latency_ns_in(self, shard: Option<&Shard>, latency_ns: u64, ok: bool) {
        let this = ManuallyDrop::new(self);
        this.core.finish(latency_ns, ok, Sink::of(shard));
    }

    /// As [`record_timeout_ns`](Self::record_timeout_ns), counted in
    /// `shard` (as [`record_latency_ns_in`](Self::record_latency_ns_in)).
    #[inline]
    pub(crate) fn record_timeout_ns_in(self, shard: Option<&Shard>, elapsed_ns: u64) {
        let this = ManuallyDrop::new(self);
        this.core.finish_timed_out(elapsed_ns, Sink::of(shard));
    }

    /// As [`record_timeout`](Self::record_timeout), in nanoseconds.
    #[inline]
    pub(crate) fn record_timeout_ns(self, elapsed_ns: u64) {
        let this = ManuallyDrop::new(self);
        this.core.finish_timed_out(elapsed_ns, Sink::Shared);
    }

    /// Whether this permit is a HALF_OPEN probe.
    ///
    /// ```
    /// let b = tailguard::Breaker::builder().build().unwrap();
    /// assert!(!b.allow().unwrap().is_probe());
    /// ```
    pub fn is_probe(&self) -> bool {
        self.core.tag.kind() == Tag::PROBE
    }

    /// The call was never made (say a bulkhead behind the breaker refused
    /// it): a probe gives its slot back, and nothing is counted, neither a
    /// call nor a cancellation.
    ///
    /// ```
    /// use std::time::Duration;
    /// let clock = tailguard::clock::ManualClock::new();
    /// let b = tailguard::Breaker::builder().clock(clock.clone()).build().unwrap();
    /// b.trip_now();
    /// clock.advance(Duration::from_secs(1));
    /// b.allow().unwrap().abandon(); // the probe's slot is free again
    /// assert!(b.allow().unwrap().is_probe());
    /// clock.advance(Duration::from_secs(1));
    /// b.tick();
    /// assert_eq!(b.snapshot().window.cancelled, 1, "only the dropped probe");
    /// ```
    pub fn abandon(self) {
        ManuallyDrop::new(self).core.abandon();
    }
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        self.core.cancel(Sink::Shared);
    }
}

impl fmt::Debug for Permit<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Permit")
            .field("tag", &self.core.tag)
            .finish_non_exhaustive()
    }
}

/// A [`Permit`] that owns a handle on its breaker (one reference-count
/// increment), for a call that outlives the borrow: a spawned task, a
/// `'static` response future. From [`Breaker::allow_owned`] or
/// [`Breaker::allow_owned_at`]; otherwise exactly a [`Permit`], dropped
/// without a verdict included.
///
/// ```
/// use std::time::Duration;
/// let b = tailguard::Breaker::builder().build().unwrap();
/// let permit = b.allow_owned().unwrap();
/// std::thread::spawn(move || permit.record_latency(Duration::from_millis(3), true))
///     .join()
///     .unwrap();
/// ```
#[must_use = "a permit is a call in flight: record its verdict, or drop it to cancel"]
pub struct OwnedPermit {
    /// `None` once the verdict is in (the drop then counts nothing).
    breaker: Option<Breaker>,
    start: u64,
    tag: Tag,
    aux: u64,
}

impl OwnedPermit {
    /// Takes over a borrowed permit's call, with a handle on its breaker.
    pub(super) fn from_core(breaker: &Breaker, core: Core<'_>) -> Self {
        Self {
            breaker: Some(breaker.clone()),
            start: core.start,
            tag: core.tag,
            aux: core.aux,
        }
    }

    /// The permit's data, over `breaker` (its own handle, taken out or
    /// borrowed).
    #[inline(always)]
    fn core<'a>(&self, breaker: &'a Breaker) -> Core<'a> {
        Core {
            inner: &breaker.inner,
            start: self.start,
            tag: self.tag,
            aux: self.aux,
        }
    }

    /// The permit's data, and the breaker handle taken out of it (dropped
    /// when the verdict is in).
    #[inline(always)]
    fn settle(mut self, f: impl FnOnce(Core<'_>)) {
        self.settle_in_place(f);
    }

    /// As [`Permit::record`].
    ///
    /// ```
    /// let b = tailguard::Breaker::builder().build().unwrap();
    /// b.allow_owned().unwrap().record(true);
    /// ```
    #[inline]
    pub fn record(self, ok: bool) {
        self.settle(|core| core.finish_measured(ok, Sink::Shared));
    }

    /// As [`Permit::record_latency`].
    ///
    /// ```
    /// # use std::time::Duration;
    /// let b = tailguard::Breaker::builder().build().unwrap();
    /// b.allow_owned().unwrap().record_latency(Duration::from_millis(2), false);
    /// ```
    #[inline]
    pub fn record_latency(self, latency: Duration, ok: bool) {
        let ns = crate::clock::duration_nanos_saturating(latency);
        self.settle(|core| core.finish(ns, ok, Sink::Shared));
    }

    /// As [`Permit::record_timeout`].
    ///
    /// ```
    /// # use std::time::Duration;
    /// let b = tailguard::Breaker::builder().build().unwrap();
    /// b.allow_owned().unwrap().record_timeout(Duration::from_secs(1));
    /// ```
    #[inline]
    pub fn record_timeout(self, elapsed: Duration) {
        let ns = crate::clock::duration_nanos_saturating(elapsed);
        self.settle(|core| core.finish_timed_out(ns, Sink::Shared));
    }

    /// As [`record_latency`](Self::record_latency), in nanoseconds (the
    /// emitter's [`Attempt`](crate::emit::Attempt)).
    #[inline]
    pub(crate) fn record_latency_ns(self, latency_ns: u64, ok: bool) {
        self.settle(|core| core.finish(latency_ns, ok, Sink::Shared));
    }

    /// As [`record_timeout`](Self::record_timeout), in nanoseconds.
    #[inline]
    pub(crate) fn record_timeout_ns(self, elapsed_ns: u64) {
        self.settle(|core| core.finish_timed_out(elapsed_ns, Sink::Shared));
    }

    /// As [`Permit::is_probe`].
    ///
    /// ```
    /// let b = tailguard::Breaker::builder().build().unwrap();
    /// assert!(!b.allow_owned().unwrap().is_probe());
    /// ```
    pub fn is_probe(&self) -> bool {
        self.tag.kind() == Tag::PROBE
    }

    /// As [`Permit::abandon`].
    ///
    /// ```
    /// let b = tailguard::Breaker::builder().build().unwrap();
    /// b.allow_owned().unwrap().abandon();
    /// ```
    pub fn abandon(self) {
        self.settle(|core| core.abandon());
    }

    /// The clock reading the call started at (the one given to
    /// [`Breaker::allow_owned_at`], or the breaker's own read by
    /// [`Breaker::allow_owned`]), whatever the breaker's mode: a disabled
    /// breaker measures nothing but its permits still carry their start.
    ///
    /// ```
    /// let clock = tailguard::clock::ManualClock::new();
    /// let b = tailguard::Breaker::builder().clock(clock.clone()).build().unwrap();
    /// assert_eq!(b.allow_owned_at(7).unwrap().start(), 7);
    /// b.disable();
    /// assert_eq!(b.allow_owned_at(9).unwrap().start(), 9);
    /// ```
    pub fn start(&self) -> u64 {
        self.start
    }

    /// Nanoseconds since the start on the breaker's clock (one read, one
    /// match over the clock's kind); 0 once the verdict is in.
    #[cfg(feature = "tower")]
    #[inline(always)]
    pub(crate) fn elapsed_ns(&self) -> u64 {
        match &self.breaker {
            Some(breaker) => breaker.inner.clock.elapsed_nanos(self.start),
            None => 0,
        }
    }

    /// A permit whose verdict is in: its drop counts nothing, and every
    /// `*_in_place` method on it does nothing (the tower layer's response
    /// future of a refused request).
    #[cfg(feature = "tower")]
    pub(crate) fn settled() -> Self {
        Self {
            breaker: None,
            start: 0,
            tag: Tag::DISABLED,
            aux: 0,
        }
    }

    /// Whether the verdict is in (or the permit was made
    /// [`settled`](Self::settled)).
    #[cfg(feature = "tower")]
    #[inline(always)]
    pub(crate) fn is_settled(&self) -> bool {
        self.breaker.is_none()
    }

    /// As [`settle`](Self::settle), where the permit lies: its fields are
    /// read one by one and only the breaker handle is taken out, so the
    /// permit is never copied whole. A permit moved through memory right
    /// after it was written is read back with wide loads that straddle the
    /// narrow stores that wrote it, which store-to-load forwarding cannot
    /// serve (see `benches/breaker.rs`, `allow_closed`): the tower layer's
    /// response future holds its permit in place and settles it so. Nothing
    /// once settled.
    #[inline(always)]
    fn settle_in_place(&mut self, f: impl FnOnce(Core<'_>)) {
        if let Some(breaker) = self.breaker.take() {
            f(self.core(&breaker));
        }
    }

    /// As [`record_latency`](Self::record_latency), the latency in
    /// nanoseconds (no round trip through a `Duration`), in place (see
    /// [`settle_in_place`](Self::settle_in_place)).
    #[cfg(feature = "tower")]
    #[inline(always)]
    pub(crate) fn record_nanos_in_place(&mut self, latency_ns: u64, ok: bool) {
        // Not through `settle_in_place`'s closure, which the compiler keeps
        // out of line here: this is the layer's every request.
        if let Some(breaker) = self.breaker.take() {
            self.core(&breaker).finish(latency_ns, ok, Sink::Shared);
        }
    }

    /// As [`record_timeout`](Self::record_timeout), in nanoseconds, in place.
    #[cfg(feature = "tower")]
    pub(crate) fn record_timeout_nanos_in_place(&mut self, elapsed_ns: u64) {
        self.settle_in_place(|core| core.finish_timed_out(elapsed_ns, Sink::Shared));
    }

    /// As dropping the permit (a cancelled call: no verdict, a probe's
    /// slot given back), in place.
    #[cfg(feature = "tower")]
    pub(crate) fn cancel_in_place(&mut self) {
        self.settle_in_place(|core| core.cancel(Sink::Shared));
    }
}

impl Drop for OwnedPermit {
    #[inline]
    fn drop(&mut self) {
        if let Some(breaker) = &self.breaker {
            self.core(breaker).cancel(Sink::Shared);
        }
    }
}

impl fmt::Debug for OwnedPermit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OwnedPermit")
            .field("tag", &self.tag)
            .finish_non_exhaustive()
    }
}

/// An owned per-core handle on a breaker: its counters live in a shard with
/// a single writer, so recording is plain loads and stores (no
/// read-modify-write). `Send` (move it to its core) but neither `Sync` nor
/// `Clone`; its permits are not `Send`. Dropping it frees the shard for
/// another handle.
///
/// ```
/// use std::time::Duration;
/// let b = tailguard::Breaker::builder().local_handles(2).build().unwrap();
/// let handles: Vec<_> = (0..2).map(|_| b.local_handle().unwrap()).collect();
/// std::thread::scope(|s| {
///     for h in handles {
///         s.spawn(move || h.allow().unwrap().record_latency(Duration::from_millis(1), true));
///     }
/// });
/// ```
///
/// A handle cannot be shared between threads:
/// ```compile_fail
/// fn is_sync<T: Sync>() {}
/// is_sync::<tailguard::LocalHandle>();
/// ```
pub struct LocalHandle {
    inner: Arc<Inner>,
    index: usize,
    _not_sync: PhantomData<core::cell::Cell<()>>,
}

impl LocalHandle {
    /// Takes a free local shard of `inner` for a new handle.
    pub(super) fn claim(inner: &Arc<Inner>) -> Result<LocalHandle, NoLocalShard> {
        let free = &inner.local_free;
        let mut cur = free.load(Ordering::Acquire);
        loop {
            if cur == 0 {
                return Err(NoLocalShard);
            }
            let index = cur.trailing_zeros() as usize;
            match free.compare_exchange_weak(cur, cur & !(1 << index), Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => {
                    return Ok(LocalHandle {
                        inner: Arc::clone(inner),
                        index,
                        _not_sync: PhantomData,
                    })
                }
                Err(actual) => cur = actual,
            }
        }
    }

    /// As [`Breaker::allow`], recording into this handle's shard.
    ///
    /// ```
    /// let b = tailguard::Breaker::builder().local_handles(1).build().unwrap();
    /// let h = b.local_handle().unwrap();
    /// assert!(h.allow().is_ok());
    /// ```
    #[inline(always)]
    pub fn allow(&self) -> Result<LocalPermit<'_>, Rejected> {
        self.allow_at(self.inner.clock.raw())
    }

    /// As [`Breaker::allow_at`], recording into this handle's shard.
    ///
    /// ```
    /// let b = tailguard::Breaker::builder().local_handles(1).build().unwrap();
    /// let h = b.local_handle().unwrap();
    /// assert!(h.allow_at(b.clock().raw()).is_ok());
    /// ```
    #[inline(always)]
    pub fn allow_at(&self, reading: u64) -> Result<LocalPermit<'_>, Rejected> {
        match self.inner.admit(reading) {
            Ok(core) => Ok(LocalPermit { core, handle: self }),
            Err(rejected) => {
                self.shard().rejected(rejected.reason());
                Err(rejected)
            }
        }
    }

    /// The breaker this handle records for.
    ///
    /// ```
    /// let b = tailguard::Breaker::builder().local_handles(1).build().unwrap();
    /// let h = b.local_handle().unwrap();
    /// assert!(h.breaker().ptr_eq(&b));
    /// ```
    pub fn breaker(&self) -> Breaker {
        Breaker {
            inner: Arc::clone(&self.inner),
        }
    }

    fn shard(&self) -> &LocalShard {
        &self.inner.shards.local[self.index]
    }
}

impl Drop for LocalHandle {
    fn drop(&mut self) {
        self.inner.local_free.fetch_or(1 << self.index, Ordering::AcqRel);
    }
}

impl fmt::Debug for LocalHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LocalHandle")
            .field("index", &self.index)
            .finish_non_exhaustive()
    }
}

/// A permit from a [`LocalHandle`]; as [`Permit`], but stays on the
/// handle's thread.
///
/// ```compile_fail
/// fn is_send<T: Send>() {}
/// is_send::<tailguard::LocalPermit<'static>>();
/// ```
#[must_use = "a permit is a call in flight: record its verdict, or drop it to cancel"]
pub struct LocalPermit<'a> {
    pub(super) core: Core<'a>,
    handle: &'a LocalHandle,
}

impl<'a> LocalPermit<'a> {
    /// As [`Permit::record`].
    ///
    /// ```
    /// let b = tailguard::Breaker::builder().local_handles(1).build().unwrap();
    /// b.local_handle().unwrap().allow().unwrap().record(true);
    /// ```
    #[inline(always)]
    pub fn record(self, ok: bool) {
        let this = ManuallyDrop::new(self);
        this.core.finish_measured(ok, Sink::Local(this.handle.shard()));
    }

    /// As [`Permit::record_latency`].
    ///
    /// ```
    /// # use std::time::Duration;
    /// let b = tailguard::Breaker::builder().local_handles(1).build().unwrap();
    /// b.local_handle().unwrap().allow().unwrap().record_latency(Duration::from_millis(2), true);
    /// ```
    #[inline(always)]
    pub fn record_latency(self, latency: Duration, ok: bool) {
        let this = ManuallyDrop::new(self);
        this.core.finish(
            crate::clock::duration_nanos_saturating(latency),
            ok,
            Sink::Local(this.handle.shard()),
        );
    }

    /// As [`Permit::record_timeout`].
    ///
    /// ```
    /// # use std::time::Duration;
    /// let b = tailguard::Breaker::builder().local_handles(1).build().unwrap();
    /// b.local_handle().unwrap().allow().unwrap().record_timeout(Duration::from_secs(1));
    /// ```
    #[inline]
    pub fn record_timeout(self, elapsed: Duration) {
        self.record_timeout_ns(crate::clock::duration_nanos_saturating(elapsed));
    }

    /// The per-core shard this permit's verdict is counted in, for a caller
    /// that finds it before it reads the clock to end the call (the
    /// per-core emitter): looked up after the reading, it costs the precise
    /// emit time (`benches/emit_overhead.rs`).
    #[inline(always)]
    pub(crate) fn shard(&self) -> &'a LocalShard {
        self.handle.shard()
    }

    /// As [`record_latency`](Self::record_latency), with the latency in
    /// nanoseconds (the emitter's: no round trip through a `Duration`),
    /// counted in `shard` ([`shard`](Self::shard) of this permit) at a
    /// guessed bucket first ([`LocalShard::record_guessed`]).
    #[inline(always)]
    pub(crate) fn record_latency_ns_in(self, shard: &LocalShard, latency_ns: u64, ok: bool) {
        let this = ManuallyDrop::new(self);
        this.core.finish(latency_ns, ok, Sink::LocalResolved(shard));
    }

    /// As [`record_timeout`](Self::record_timeout), in nanoseconds.
    #[inline]
    pub(crate) fn record_timeout_ns(self, elapsed_ns: u64) {
        let this = ManuallyDrop::new(self);
        this.core.finish_timed_out(elapsed_ns, Sink::Local(this.handle.shard()));
    }

    /// Whether this permit is a HALF_OPEN probe.
    ///
    /// ```
    /// let b = tailguard::Breaker::builder().local_handles(1).build().unwrap();
    /// assert!(!b.local_handle().unwrap().allow().unwrap().is_probe());
    /// ```
    pub fn is_probe(&self) -> bool {
        self.core.tag.kind() == Tag::PROBE
    }

    /// As [`Permit::abandon`].
    ///
    /// ```
    /// let b = tailguard::Breaker::builder().local_handles(1).build().unwrap();
    /// b.local_handle().unwrap().allow().unwrap().abandon();
    /// ```
    pub fn abandon(self) {
        ManuallyDrop::new(self).core.abandon();
    }
}

impl Drop for LocalPermit<'_> {
    fn drop(&mut self) {
        self.core.cancel(Sink::Local(self.handle.shard()));
    }
}

impl fmt::Debug for LocalPermit<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LocalPermit")
            .field("tag", &self.core.tag)
            .finish_non_exhaustive()
    }
}
