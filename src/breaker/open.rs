//! The OPEN state: its deadline (published after the trip's CAS, withdrawn
//! when the OPEN ends), the one reading of time against it, the answers an
//! OPEN breaker gives, and the one move from OPEN to HALF_OPEN.
//!
//! A clock that stepped back since the trip is seen here by one rule
//! ([`stepped_back`]): a correct clock is never more than the longest
//! backoff before a published deadline, so a reading further back is a
//! clock that went back since the trip, and reads as the trip's time. (A
//! window close sees a step against its own highest time: `window.rs`.)
//!
//! Touches `deadline`, `opened_at`, `deadline_gen` (under the OPEN lock,
//! `open_lock`), the state word (OPEN → HALF_OPEN) and, when `allow` finds
//! the clock stepped back, `shift` (through `raise_floor`).

use super::admission::Admit;
use super::Inner;
use crate::report::{Mode, Reason, RejectReason, Rejected, State};
use crate::state::{Decision, Word};
use crate::sync::Ordering;

/// Whether the breaker time `signed` is further before the OPEN deadline
/// `deadline` than the longest backoff `max_ns` (so the clock stepped back
/// since the trip): `signed < deadline − max_ns`, exactly, for every input
/// (a time before the breaker's start is negative; `deadline − max_ns` is
/// negative when the trip came early in the breaker's life). The one
/// definition of that boundary, for the slow paths; the fast path uses its
/// non-negative half, [`before_any_backoff`].
#[inline(always)]
pub(super) fn stepped_back(signed: i64, deadline: u64, max_ns: u64) -> bool {
    match u64::try_from(signed) {
        Ok(time) => before_any_backoff(time, deadline, max_ns),
        Err(_) => deadline >= max_ns || signed.unsigned_abs() > max_ns - deadline,
    }
}

/// [`stepped_back`] for a time that is not negative: `u64` arithmetic, one
/// subtraction and a compare on the fast path.
#[inline(always)]
fn before_any_backoff(time: u64, deadline: u64, max_ns: u64) -> bool {
    time < deadline.saturating_sub(max_ns)
}

impl Inner {
    /// The deadline of the OPEN of `word`, if published (it is not between
    /// the trip's CAS and its publication, nor once that OPEN is over).
    #[inline(always)]
    pub(super) fn published_deadline(&self, word: Word) -> Option<u64> {
        (self.deadline_gen.load(Ordering::Acquire) == u64::from(word.generation()))
            .then(|| self.deadline.load(Ordering::Acquire))
    }

    /// OPEN `word` whose deadline is not published: its trip is publishing
    /// it right now, and the caller is refused with the backoff of its
    /// level (`Ok`); or that OPEN is over and `word` is stale (`Err`, with
    /// the current word).
    fn while_publishing(&self, word: Word) -> Result<Rejected, Word> {
        let current = self.state.load();
        if current != word {
            return Err(current);
        }
        Ok(Rejected::new(RejectReason::Open, self.config.backoff_ns(word.level())))
    }

    /// The breaker's time at the reading `raw`, against the OPEN deadline
    /// `deadline`: a clock that stepped back since the trip reads as the
    /// trip's time, and the breaker's time is corrected for good (`shift`
    /// raised) if `correct`; never before the last window close.
    fn open_time(&self, deadline: u64, raw: u64, correct: bool) -> u64 {
        let signed = self.signed_now(raw);
        let now = if stepped_back(signed, deadline, self.config.max_ns) {
            let opened = self.opened_at.load(Ordering::Acquire);
            if correct {
                self.raise_floor(raw, opened)
            } else {
                opened
            }
        } else {
            signed.max(0) as u64
        };
        now.max(self.floor.load(Ordering::Acquire))
    }

    /// OPEN, no override, backoff running and the clock sane: the rejection
    /// in a few loads and one clock read. Anything else (the deadline not
    /// yet published, the backoff over, a clock that stepped back or reads
    /// before the breaker's start) takes the slow path, which corrects the
    /// time.
    #[inline(always)]
    pub(super) fn reject_open_fast(&self, word: Word, raw: u64) -> Option<Rejected> {
        let deadline = self.published_deadline(word)?;
        // A time before the breaker's start (negative) reads here as 2^63
        // or more: never stepped back by this test, and past any deadline
        // below, so the slow path takes it.
        let time = self.signed_now(raw) as u64;
        let now = time.max(self.floor.load(Ordering::Relaxed));
        (!before_any_backoff(time, deadline, self.config.max_ns) && now < deadline)
            .then(|| Rejected::new(RejectReason::Open, deadline - now))
    }

    /// OPEN: reject until the deadline; the first caller past it moves the
    /// breaker to HALF_OPEN and is its first probe.
    pub(super) fn admit_open(&self, word: Word, raw: u64) -> Admit<'_> {
        let Some(deadline) = self.published_deadline(word) else {
            return match self.while_publishing(word) {
                Ok(rejected) => Admit::Reject(rejected),
                Err(current) => Admit::Retry(current),
            };
        };
        let now = self.open_time(deadline, raw, true);
        if now < deadline {
            return Admit::Reject(Rejected::new(RejectReason::Open, deadline - now));
        }
        match self.end_backoff(word, now, 1) {
            Some(next) => Admit::Probe(self.probe_permit(next, raw, now)),
            None => Admit::Retry(self.state.load()),
        }
    }

    /// OPEN, without a verdict (for a caller that must answer before it
    /// asks for a permit): the rejection `admit_open` would give at the
    /// reading `raw`, or `None` if the backoff is over (or `word` is stale)
    /// and `allow` must decide. Changes nothing: a clock that stepped back
    /// reads as `admit_open` reads it, without the correction.
    #[cfg(any(feature = "tower", tailguard_loom))]
    pub(super) fn open_refusal(&self, word: Word, raw: u64) -> Option<Rejected> {
        let Some(deadline) = self.published_deadline(word) else {
            return self.while_publishing(word).ok();
        };
        let now = self.open_time(deadline, raw, false);
        (now < deadline).then(|| Rejected::new(RejectReason::Open, deadline - now))
    }

    /// OPEN whose backoff ran out at `now` (a window close's time): HALF_OPEN,
    /// even with no caller. A caller of `allow` may be first (`admit_open`).
    pub(super) fn half_open_if_due(&self, now: u64) {
        let word = self.state.load();
        if word.state() != State::Open || word.mode() == Mode::ForcedOpen {
            return;
        }
        if self.published_deadline(word).is_some_and(|deadline| now >= deadline) {
            self.end_backoff(word, now, 0);
        }
    }

    /// OPEN → HALF_OPEN at `now`, from `word` exactly (a caller that loaded
    /// an earlier word changes nothing), with `probes` probe slots taken:
    /// 1 when the caller is the round's first probe (`allow`), 0 for a
    /// window close. The one place this transition is made; returns the
    /// word stored, the event queued.
    fn end_backoff(&self, word: Word, now: u64, probes: u8) -> Option<Word> {
        let (_, stored, ()) = self.state.update(|w| {
            if w != word {
                return Decision::Keep(());
            }
            Decision::Set(w.transition(State::HalfOpen, w.mode()).with_probes(probes), ())
        });
        if let Some(next) = stored {
            self.note(word, next, Reason::BackoffElapsed, now);
        }
        stored
    }

    /// OPEN (not forced) since `now` at `to`, with a duration of `open_ns`
    /// drawn: publishes when the next probe may start, unless a later
    /// transition happened meanwhile. Under the OPEN lock, so a slow
    /// publisher cannot overwrite a later one.
    pub(super) fn publish_deadline(&self, to: Word, now: u64, open_ns: u64) {
        let _guard = self.open_lock.lock();
        if self.state.load().generation() == to.generation() {
            self.deadline.store(now.saturating_add(open_ns), Ordering::Relaxed);
            self.opened_at.store(now, Ordering::Relaxed);
            self.deadline_gen.store(u64::from(to.generation()), Ordering::Release);
        }
    }

    /// The OPEN of `from` is over at `now`: its deadline is withdrawn, so
    /// that no later OPEN whose 30-bit generation is the same (2^30
    /// transitions on) can be taken for it between its CAS and its own
    /// publication; and its time is added to the time spent OPEN, or what
    /// snapshots already reported of it if that is more (a clock stepped
    /// back since, or a snapshot between its CAS and this): a later OPEN
    /// then adds all of its own time on top. (An OPEN that ended before its
    /// publication was never published: it lasted no time anyone could
    /// see, and adds none.)
    pub(super) fn retire_deadline(&self, from: Word, now: u64) {
        let mut flaps = self.open_lock.lock();
        if self.deadline_gen.load(Ordering::Acquire) == u64::from(from.generation()) {
            self.deadline_gen.store(u64::MAX, Ordering::Release);
            let lasted = now.saturating_sub(self.opened_at.load(Ordering::Relaxed));
            flaps.open_ns = flaps.open_ns.saturating_add(lasted).max(flaps.reported_ns);
        }
    }

    /// Nanoseconds spent OPEN up to `now`: the OPENs withdrawn, and the one
    /// published now (not forced: forcing publishes none). Never less than
    /// it reported before (a snapshot that reads an OPEN just over, before
    /// its withdrawal adds the time up to its transition, reports the
    /// larger figure, and the withdrawal keeps it), so a counter of it
    /// never goes back, and never hides a later OPEN's time.
    pub(super) fn open_time_total(&self, now: u64) -> u64 {
        let mut flaps = self.open_lock.lock();
        let current = if self.deadline_gen.load(Ordering::Acquire) == u64::MAX {
            0
        } else {
            now.saturating_sub(self.opened_at.load(Ordering::Relaxed))
        };
        flaps.reported_ns = flaps.reported_ns.max(flaps.open_ns.saturating_add(current));
        flaps.reported_ns
    }
}

#[cfg(test)]
mod tests {
    use super::stepped_back;

    /// The `u64` form is `signed < deadline − max_ns` in exact arithmetic,
    /// at and around every boundary and over a spread of values.
    #[test]
    #[cfg_attr(
        miri,
        ignore = "160,000 comparisons of plain integers: minutes under Miri, nothing for it to find"
    )]
    fn stepped_back_is_the_exact_comparison() {
        let exact = |s: i64, d: u64, m: u64| i128::from(s) < i128::from(d) - i128::from(m);
        let mut values: Vec<i64> = vec![i64::MIN, i64::MIN + 1, -2, -1, 0, 1, 2, i64::MAX - 1, i64::MAX];
        let unsigned: Vec<u64> = vec![0, 1, 2, 1 << 32, u64::MAX / 2, u64::MAX / 2 + 1, u64::MAX - 1, u64::MAX];
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            values.push(x as i64);
            values.push((x >> 20) as i64 - (1 << 43));
        }
        for &d in unsigned
            .iter()
            .chain(values.iter().map(|v| v.unsigned_abs()).collect::<Vec<_>>().iter())
        {
            for &m in &unsigned {
                let mut ss = values.clone();
                // Around the boundary itself.
                for delta in -2i128..=2 {
                    let b = i128::from(d) - i128::from(m) + delta;
                    if let Ok(b) = i64::try_from(b) {
                        ss.push(b);
                    }
                }
                for s in ss {
                    assert_eq!(
                        stepped_back(s, d, m),
                        exact(s, d, m),
                        "signed {s}, deadline {d}, max {m}"
                    );
                }
            }
        }
    }
}
