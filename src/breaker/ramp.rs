//! The recovery ramp (`BreakerBuilder::recovery_ramp`): after the probes
//! close the breaker, a share of the calls rising linearly from none to all
//! over the ramp is admitted; the rest are rejected (`Ramping`).
//!
//! The ramp is CLOSED in the state word with state bits 3 (`state.rs`):
//! everything but admission reads it as CLOSED, so windows are judged and
//! the trip rules stay armed; the CLOSED fast path's test fails for it, so
//! the hot path is unchanged and ramp admission is on the slow path. Its
//! start is published after the close's CAS, under the OPEN lock, tagged
//! with the generation (as an OPEN deadline is, `open.rs`); a caller that
//! finds the ramp before its start is published is rejected as at its
//! first instant (nothing is admitted at a share of 0).
//!
//! Which calls are admitted: the `n`-th admission decision of the ramp
//! admits iff `frac(n φ) < share` (φ the golden ratio, in 64-bit fixed
//! point), a low-discrepancy sequence: among any run of consecutive
//! decisions the share admitted is within a few calls of the ramp's share,
//! lock-free (one `fetch_add` on the ramp's count), and the same on every run for
//! the same sequence of calls and clock readings.
//!
//! The ramp ends (state bits 3 → 0, backoff level to 0, no new generation)
//! at the first admission or window close after its length: not a
//! transition, so no window straddles it.
//!
//! Touches `ramp` (its start and count) and the state word.

use super::admission::Admit;
use super::Inner;
use crate::report::{Ramp, RejectReason, Rejected};
use crate::state::{Decision, Word};
use crate::sync::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// A recovery ramp's length and the state of the current one.
#[derive(Debug)]
pub(super) struct RampCell {
    ramp_ns: u64,
    /// `floor(2^64 / ramp_ns)`: turns elapsed time into the share admitted.
    inv: u64,
    /// When the ramp started, and the generation it belongs to (published
    /// after the CAS, under the OPEN lock, as an OPEN deadline is).
    since: AtomicU64,
    gen: AtomicU64,
    /// The ramp's admission decisions so far.
    seq: AtomicU64,
    /// A ramp ended at an admission since the last window close took this
    /// flag: the span that close judges was counted (in part) in a ramp,
    /// and so may the next be (`window.rs`).
    ended: AtomicBool,
}

impl RampCell {
    pub(super) fn new(ramp_ns: u64) -> Self {
        Self {
            ramp_ns,
            inv: (u128::from(u64::MAX) / u128::from(ramp_ns.max(1))) as u64,
            since: AtomicU64::new(0),
            gen: AtomicU64::new(u64::MAX),
            seq: AtomicU64::new(0),
            ended: AtomicBool::new(false),
        }
    }

    /// The start of the ramp of `word`, if published.
    #[inline]
    fn published(&self, word: Word) -> Option<u64> {
        (self.gen.load(Ordering::Acquire) == u64::from(word.generation())).then(|| self.since.load(Ordering::Acquire))
    }

    /// The share of `2^64` admitted `elapsed` nanoseconds into the ramp
    /// (`elapsed < ramp_ns`; `inv = floor(2^64 / ramp_ns)`: no overflow).
    #[inline]
    fn share(&self, elapsed: u64) -> u64 {
        elapsed.wrapping_mul(self.inv)
    }
}

/// The golden ratio's fractional part in 64-bit fixed point.
const PHI: u64 = 0x9E37_79B9_7F4A_7C15;

/// Whether the `n`-th decision of a ramp admits at the share `share` (of
/// `2^64`): `frac(n φ) < share`.
#[inline]
pub(super) fn admits(n: u64, share: u64) -> bool {
    n.wrapping_mul(PHI) < share
}

impl Inner {
    /// CLOSED in its recovery ramp: admit this call if it is in the share
    /// the ramp admits now; end the ramp if it has run its course.
    pub(super) fn admit_ramp(&self, word: Word, raw: u64) -> Admit<'_> {
        let Some(ramp) = self.ramp.as_deref() else {
            // (Never: only a breaker with a ramp closes into one.)
            return Admit::Probe(self.normal_permit(word, raw));
        };
        let now = self.now_floored(raw);
        let ramp_ns = ramp.ramp_ns;
        let elapsed = match ramp.published(word) {
            Some(since) => now.saturating_sub(since),
            None if self.state.load() != word => return Admit::Retry(self.state.load()),
            // Its close is publishing the start right now.
            None => 0,
        };
        if elapsed >= ramp_ns {
            if self.end_ramp(word) {
                // For the next window close: its span was the ramp's.
                ramp.ended.store(true, Ordering::Release);
            }
            return Admit::Retry(self.state.load());
        }
        let n = ramp.seq.fetch_add(1, Ordering::Relaxed);
        if admits(n, ramp.share(elapsed)) {
            return Admit::Probe(self.normal_permit(word, raw));
        }
        let retry = (ramp_ns - elapsed).min(self.config.window_ns);
        Admit::Reject(Rejected::new(RejectReason::Ramping, retry))
    }

    /// The ramp of `word` is over: plain CLOSED, backoff level 0, the same
    /// generation. Nothing if the word moved on.
    fn end_ramp(&self, word: Word) -> bool {
        let (_, stored, ()) = self.state.update(|w| {
            if w != word {
                return Decision::Keep(());
            }
            Decision::Set(w.without_ramp().with_level(0), ())
        });
        stored.is_some()
    }

    /// For window close, after its verdict: whether a ramp ended since the
    /// last close asked (so the span just judged was counted, in part, in
    /// a ramp). Clears the flag.
    pub(super) fn ramp_ended_since_last_close(&self) -> bool {
        self.ramp
            .as_deref()
            .is_some_and(|ramp| ramp.ended.swap(false, Ordering::AcqRel))
    }

    /// When the ramp of `word` runs its course (a tick then ends it), if
    /// `word` is ramping.
    pub(super) fn ramp_end(&self, word: Word) -> Option<u64> {
        let ramp = self.ramp.as_deref()?;
        if !word.ramping() {
            return None;
        }
        ramp.published(word).map(|since| since.saturating_add(ramp.ramp_ns))
    }

    /// For window close: ends a ramp that ran its course by `now`; returns
    /// whether it did.
    pub(super) fn end_ramp_if_due(&self, now: u64) -> bool {
        let Some(ramp) = self.ramp.as_deref() else {
            return false;
        };
        let word = self.state.load();
        if !word.ramping() {
            return false;
        }
        ramp.published(word)
            .is_some_and(|since| now.saturating_sub(since) >= ramp.ramp_ns)
            && self.end_ramp(word)
    }

    /// After the CAS into the ramp `to` at `now`: publishes its start,
    /// unless a later transition happened meanwhile. Under the OPEN lock,
    /// so that a slow publisher cannot overwrite a later one.
    pub(super) fn publish_ramp(&self, to: Word, now: u64) {
        let Some(ramp) = self.ramp.as_deref() else {
            return;
        };
        let _guard = self.open_lock.lock();
        if self.state.load().generation() == to.generation() {
            ramp.since.store(now, Ordering::Relaxed);
            ramp.seq.store(0, Ordering::Relaxed);
            ramp.gen.store(u64::from(to.generation()), Ordering::Release);
        }
    }

    /// The ramp of `from` is over by a transition (or a reset): its start
    /// is withdrawn, so that no later ramp whose 30-bit generation is the
    /// same can be taken for it.
    pub(super) fn retire_ramp(&self, from: Word) {
        let Some(ramp) = self.ramp.as_deref() else {
            return;
        };
        let _guard = self.open_lock.lock();
        if ramp.gen.load(Ordering::Acquire) == u64::from(from.generation()) {
            ramp.gen.store(u64::MAX, Ordering::Release);
        }
    }

    /// How far the ramp of `word` is at `now`, for the snapshot.
    pub(super) fn ramp_status(&self, word: Word, now: u64) -> Option<Ramp> {
        let ramp = self.ramp.as_deref().filter(|_| word.ramping())?;
        let ramp_ns = ramp.ramp_ns;
        let elapsed = ramp
            .published(word)
            .map_or(0, |since| now.saturating_sub(since))
            .min(ramp_ns);
        Some(Ramp {
            admitted: elapsed as f64 / ramp_ns as f64,
            remaining: Duration::from_nanos(ramp_ns - elapsed),
        })
    }
}

#[cfg(all(test, not(tailguard_loom)))]
mod tests {
    use super::admits;

    /// Of any run of consecutive decisions at a fixed share, the share
    /// admitted is within a few calls of it: at 1%, 10%, 50%, 90%, 99%,
    /// over runs of 10 to 10,000 from many starts.
    #[test]
    fn the_share_admitted_is_the_ramp_s_to_within_a_few_calls() {
        for share in [0.01f64, 0.1, 0.333, 0.5, 0.9, 0.99] {
            let s = (share * 2f64.powi(64)) as u64;
            for start in [0u64, 1, 17, 1000, 123_456, u64::MAX - 50_000] {
                for len in [10u64, 100, 1000, 10_000] {
                    let admitted = (0..len).filter(|&i| admits(start.wrapping_add(i), s)).count() as f64;
                    let off = (admitted - share * len as f64).abs();
                    assert!(off <= 3.0, "share {share}, start {start}, {len} calls: {admitted}");
                }
            }
        }
        assert!(!(0..1000).any(|n| admits(n, 0)), "nothing at a share of 0");
        assert!(
            (1..1000).all(|n| admits(n, u64::MAX)),
            "all but frac = max at the last instant"
        );
    }
}
