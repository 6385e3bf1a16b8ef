//! Admission: `allow` in each state. CLOSED passes (one load of the state
//! word, one clock read); OPEN rejects until its deadline, and the first
//! caller past it moves the breaker to HALF_OPEN as its first probe;
//! HALF_OPEN admits probes into a bounded number of slots, each with a lease
//! of its own, and re-opens when a probe outlives its lease.
//!
//! Touches the state word (probe slots), the probe leases and
//! `shadow_rejections`; OPEN's answers are in `open.rs`.

use super::permit::{Core, Tag};
use super::Inner;
use crate::report::Mode;
use crate::report::{Reason, RejectReason, Rejected, State};
use crate::state::{Decision, Word, FAST_PATH_MASK, OPEN_NORMAL};
use crate::sync::{AtomicU64, Ordering};

/// The lease of one probe slot: which round holds it and since when.
///
/// `tag` is 0 when free, [`Lease::CLAIMING`] while a probe stamps it, else
/// the full generation (see `StateCell::full_generation`) of the HALF_OPEN
/// round whose probe holds it. A probe takes an entry after the CAS that gave
/// it a slot, with its own admission time, and frees it before the CAS that
/// returns the slot; an entry of an earlier round is free for the taking
/// (its probe is stale). So an entry tagged with the current round always
/// carries the admission time of the probe that holds it.
#[derive(Debug)]
pub(super) struct Lease {
    pub(super) tag: AtomicU64,
    pub(super) since: AtomicU64,
}

impl Lease {
    pub(super) const FREE: u64 = 0;
    const CLAIMING: u64 = u64::MAX;
}

impl Inner {
    /// `allow` for both handle kinds, at the clock reading `raw`. The caller
    /// counts a rejection, on its own shard.
    #[inline(always)]
    pub(super) fn admit(&self, raw: u64) -> Result<Core<'_>, Rejected> {
        let word = self.state.load();
        if word.0 & FAST_PATH_MASK == 0 {
            return Ok(self.normal_permit(word, raw));
        }
        if word.0 & FAST_PATH_MASK == OPEN_NORMAL {
            if let Some(rejected) = self.reject_open_fast(word, raw) {
                return Err(rejected);
            }
        }
        self.admit_slow(word, raw)
    }

    /// An ordinary permit, admitted under `word` at the reading `start`.
    #[inline(always)]
    pub(super) fn normal_permit(&self, word: Word, start: u64) -> Core<'_> {
        let aux = if self.config.track_in_flight {
            self.enter_flight(start, word)
        } else {
            0
        };
        Core {
            inner: self,
            start,
            tag: Tag::normal(word),
            aux,
        }
    }

    #[cold]
    #[inline(never)]
    pub(super) fn admit_slow(&self, mut word: Word, raw: u64) -> Result<Core<'_>, Rejected> {
        loop {
            match word.mode() {
                Mode::Disabled => {
                    // Measures nothing, but keeps the reading it was given:
                    // a caller timing the call from the permit's start (the
                    // tower layer's timeout) must see the call's own age.
                    return Ok(Core {
                        inner: self,
                        start: raw,
                        tag: Tag::DISABLED,
                        aux: 0,
                    });
                }
                Mode::ForcedOpen => return Err(Rejected::new(RejectReason::ForcedOpen, u64::MAX)),
                Mode::ForcedClosed => return Ok(self.normal_permit(word, raw)),
                Mode::Normal | Mode::MetricsOnly => {}
            }
            let verdict = match word.state() {
                State::Closed if word.ramping() => self.admit_ramp(word, raw),
                State::Closed => return Ok(self.normal_permit(word, raw)),
                State::Open => self.admit_open(word, raw),
                State::HalfOpen => self.admit_half_open(word, raw),
            };
            match verdict {
                Admit::Probe(core) => return Ok(core),
                Admit::Retry(w) => word = w,
                Admit::Reject(rejected) => {
                    if word.mode() == Mode::MetricsOnly {
                        self.shadow_rejections.fetch_add(1, Ordering::Relaxed);
                        return Ok(self.normal_permit(word, raw));
                    }
                    return Err(rejected);
                }
                Admit::Busy(seen) => {
                    if word.mode() == Mode::MetricsOnly {
                        self.shadow_rejections.fetch_add(1, Ordering::Relaxed);
                        return Ok(self.normal_permit(word, raw));
                    }
                    return Err(self.probes_busy(seen, raw));
                }
            }
        }
    }

    /// HALF_OPEN: re-open if a probe of this round has outlived its lease;
    /// otherwise take a probe slot if one is free (atomically: a caller that
    /// loses the race for the last slot is rejected, never admitted without
    /// one).
    pub(super) fn admit_half_open(&self, word: Word, raw: u64) -> Admit<'_> {
        let limit = self.config.probes;
        let now = self.now_floored(raw);
        if self.lease_expired(word, now) {
            return Admit::Retry(self.state.load());
        }
        let (seen, stored, ()) = self.state.update(|w| {
            if w.state() != State::HalfOpen || w.generation() != word.generation() || w.probes() >= limit {
                return Decision::Keep(());
            }
            Decision::Set(w.with_probes(w.probes() + 1), ())
        });
        if let Some(next) = stored {
            return Admit::Probe(self.probe_permit(next, raw, now));
        }
        if seen.state() != State::HalfOpen || seen.generation() != word.generation() {
            return Admit::Retry(seen);
        }
        Admit::Busy(seen)
    }

    /// The rejection of a caller turned away by the full HALF_OPEN round of
    /// `seen`, at the reading `raw`, with its retry hint: made by
    /// `admit_slow`, out of line, so that admitting a probe pays nothing
    /// for it.
    #[cold]
    #[inline(never)]
    fn probes_busy(&self, seen: Word, raw: u64) -> Rejected {
        let now = self.now_floored(raw);
        Rejected::new(RejectReason::ProbesBusy, self.probes_decided_in(seen, now))
    }

    /// For a caller turned away by a HALF_OPEN round whose probe slots are
    /// all taken: how long until the round is decided at the latest, which
    /// is when the earliest lease of its probes ends (by then that probe has
    /// answered, or been taken for slow and re-opened the breaker); the
    /// latency threshold if no lease is stamped yet (a probe just admitted).
    #[cold]
    fn probes_decided_in(&self, word: Word, now: u64) -> u64 {
        self.first_lease_end(word)
            .map_or(self.config.threshold_ns, |end| end.saturating_sub(now))
    }

    /// When the earliest stamped lease of `word`'s round ends (a tick then
    /// re-opens the breaker if its probe has not answered); `None` if no
    /// probe of the round holds a stamped lease.
    pub(super) fn first_lease_end(&self, word: Word) -> Option<u64> {
        let round = self.state.full_generation(word);
        self.leases
            .iter()
            .filter(|l| l.tag.load(Ordering::Acquire) == round)
            .map(|l| l.since.load(Ordering::Acquire).saturating_add(self.config.lease_ns))
            .min()
    }

    /// The permit of a probe whose slot the CAS to `word` took: its lease
    /// starts now, at its own admission (`raw`, `now`), whatever the word
    /// the caller loaded before said.
    #[inline]
    pub(super) fn probe_permit(&self, word: Word, raw: u64, now: u64) -> Core<'_> {
        let round = self.state.full_generation(word);
        let lease = self.take_lease(round, now);
        Core {
            inner: self,
            start: raw,
            tag: Tag::probe(word, lease),
            aux: round,
        }
    }

    /// Takes a free lease entry (or one of an earlier round) for a probe of
    /// `round` admitted at `now`; returns its index + 1, or 0 if the round is
    /// already over (the probe is stale and needs none).
    #[inline]
    pub(super) fn take_lease(&self, round: u64, now: u64) -> usize {
        let mut backoff = 0;
        loop {
            for (i, lease) in self.leases.iter().enumerate() {
                let tag = lease.tag.load(Ordering::Acquire);
                if tag == Lease::CLAIMING || (tag != Lease::FREE && tag >= round) {
                    continue;
                }
                if lease
                    .tag
                    .compare_exchange(tag, Lease::CLAIMING, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
                {
                    lease.since.store(now, Ordering::Release);
                    lease.tag.store(round, Ordering::Release);
                    return i + 1;
                }
            }
            // Every entry is this round's or being stamped: a probe of an
            // earlier round is stamping the one this round will find free
            // (its slot count guarantees one), unless the round is over.
            let w = self.state.load();
            if w.state() != State::HalfOpen || self.state.full_generation(w) != round {
                return 0;
            }
            crate::sync::spin(&mut backoff);
        }
    }

    /// Frees lease entry `lease − 1` if round `round` still holds it.
    #[inline]
    pub(super) fn release_lease(&self, lease: usize, round: u64) {
        if let Some(entry) = lease.checked_sub(1).and_then(|i| self.leases.get(i)) {
            let _ = entry
                .tag
                .compare_exchange(round, Lease::FREE, Ordering::AcqRel, Ordering::Relaxed);
        }
    }

    /// If a probe of `word`'s round has been out longer than the lease,
    /// re-open (a probe that has not answered within the lease is slower
    /// than the threshold). Returns whether it did; the event is queued.
    #[inline]
    pub(super) fn lease_expired(&self, word: Word, now: u64) -> bool {
        if word.state() != State::HalfOpen || word.probes() == 0 {
            return false;
        }
        let round = self.state.full_generation(word);
        let lease_ns = self.config.lease_ns;
        let expired = self.leases.iter().any(|l| {
            l.tag.load(Ordering::Acquire) == round && now >= l.since.load(Ordering::Acquire).saturating_add(lease_ns)
        });
        expired && self.reopen(round, Reason::ProbeLeaseExpired, now)
    }
}

/// What admission in OPEN or HALF_OPEN decided.
pub(super) enum Admit<'a> {
    /// A probe's permit (or, from a recovery ramp, an ordinary one).
    Probe(Core<'a>),
    Retry(Word),
    Reject(Rejected),
    /// HALF_OPEN with every probe slot of the round of this word taken.
    Busy(Word),
}
