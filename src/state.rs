//! The breaker's state word: one `AtomicU64`, changed only by CAS over a
//! pure decision function.
//!
//! # Bit table
//!
//! | bits   | field                | values                                                        |
//! |--------|----------------------|---------------------------------------------------------------|
//! | 0–1    | state                | 0 CLOSED, 1 OPEN, 2 HALF_OPEN, 3 CLOSED in its recovery ramp  |
//! | 2–4    | override mode        | 0 none, 1 forced open, 2 forced closed, 3 disabled, 4 metrics-only (5–7 never occur) |
//! | 5–9    | backoff level        | 0–31; the OPEN duration is `base × 2^level`, capped           |
//! | 10–17  | consecutive breaches | 0–255; only non-zero in CLOSED                                |
//! | 18–25  | probes in flight     | 0–255; only non-zero in HALF_OPEN                             |
//! | 26–33  | probe successes      | 0–255; only non-zero in HALF_OPEN                             |
//! | 34–63  | generation           | 30 bits, wrapping; +1 on every transition, never otherwise    |
//!
//! The hot path of `allow` in CLOSED tests `word & (STATE | MODE) == 0`: one
//! load and one test. A CLOSED breaker in its recovery ramp (state bits 3,
//! read as CLOSED by everything but admission) fails that test and is
//! admitted on the slow path (`breaker/ramp.rs`); the end of the ramp
//! (bits 3 → 0) is not a transition: the ramp's windows are the CLOSED
//! state's and are judged as such. Every transition (a change of state or mode) goes
//! through [`Word::transition`], which bumps the generation by exactly
//! one; updates that are not transitions (a probe taken or returned, a
//! breach counted) keep it.
//!
//! # The full generation
//!
//! Thirty bits wrap after 2^30 transitions. Beside the word, the cell keeps
//! a 64-bit generation that lags the word's by at most the number of
//! transitions whose winners have not yet published it (each winner
//! publishes right after its CAS, with `fetch_max`), so the word's 30 bits
//! and that lagging value name one 64-bit generation exactly
//! ([`StateCell::full_generation`]). A probe carries its round's full
//! generation, so a probe held across any number of transitions never
//! decides a later round. An ordinary permit carries the 30 bits only
//! (they are in the word it already loaded): a verdict held across a
//! multiple of 2^30 transitions would be counted in the window instead of
//! as stale, one call among a window's.

use crate::report::{Mode, State};
use crate::sync::{AtomicU64, Ordering};
use core::fmt;

const STATE_SHIFT: u32 = 0;
const STATE_MASK: u64 = 0b11 << STATE_SHIFT;
const MODE_SHIFT: u32 = 2;
const MODE_MASK: u64 = 0b111 << MODE_SHIFT;
const LEVEL_SHIFT: u32 = 5;
const LEVEL_MASK: u64 = 0b1_1111 << LEVEL_SHIFT;
const BREACH_SHIFT: u32 = 10;
const BREACH_MASK: u64 = 0xff << BREACH_SHIFT;
const PROBES_SHIFT: u32 = 18;
const PROBES_MASK: u64 = 0xff << PROBES_SHIFT;
const SUCCESS_SHIFT: u32 = 26;
const SUCCESS_MASK: u64 = 0xff << SUCCESS_SHIFT;
const GEN_SHIFT: u32 = 34;
const GEN_BITS: u32 = 30;
pub(crate) const GEN_MASK: u64 = ((1 << GEN_BITS) - 1) << GEN_SHIFT;
const GEN_MODULUS: u64 = 1 << GEN_BITS;

/// Mask of the bits that must be zero for the CLOSED fast path.
pub(crate) const FAST_PATH_MASK: u64 = STATE_MASK | MODE_MASK;
/// `word & FAST_PATH_MASK` of an OPEN breaker with no override: the
/// rejection fast path.
pub(crate) const OPEN_NORMAL: u64 = 1 << STATE_SHIFT;
/// The state bits of a CLOSED breaker in its recovery ramp.
const RAMP_BITS: u64 = 3 << STATE_SHIFT;
/// Highest backoff level kept; `base × 2^31` exceeds any accepted maximum.
pub(crate) const MAX_LEVEL: u8 = 31;

#[inline]
fn state_from_bits(bits: u64) -> State {
    match bits {
        1 => State::Open,
        2 => State::HalfOpen,
        _ => State::Closed,
    }
}

#[inline]
fn state_bits(state: State) -> u64 {
    u64::from(state.as_metric())
}

#[inline]
fn mode_from_bits(bits: u64) -> Mode {
    match bits {
        1 => Mode::ForcedOpen,
        2 => Mode::ForcedClosed,
        3 => Mode::Disabled,
        4 => Mode::MetricsOnly,
        _ => Mode::Normal,
    }
}

#[inline]
fn mode_bits(mode: Mode) -> u64 {
    match mode {
        Mode::Normal => 0,
        Mode::ForcedOpen => 1,
        Mode::ForcedClosed => 2,
        Mode::Disabled => 3,
        Mode::MetricsOnly => 4,
    }
}

/// A decoded copy of the state word.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct Word(pub(crate) u64);

impl Word {
    pub(crate) const INITIAL: Word = Word(0);

    #[inline]
    pub(crate) fn state(self) -> State {
        state_from_bits((self.0 & STATE_MASK) >> STATE_SHIFT)
    }
    #[inline]
    pub(crate) fn mode(self) -> Mode {
        mode_from_bits((self.0 & MODE_MASK) >> MODE_SHIFT)
    }
    #[inline]
    pub(crate) fn level(self) -> u8 {
        ((self.0 & LEVEL_MASK) >> LEVEL_SHIFT) as u8
    }
    #[inline]
    pub(crate) fn breaches(self) -> u8 {
        ((self.0 & BREACH_MASK) >> BREACH_SHIFT) as u8
    }
    #[inline]
    pub(crate) fn probes(self) -> u8 {
        ((self.0 & PROBES_MASK) >> PROBES_SHIFT) as u8
    }
    #[inline]
    pub(crate) fn successes(self) -> u8 {
        ((self.0 & SUCCESS_MASK) >> SUCCESS_SHIFT) as u8
    }
    #[inline]
    pub(crate) fn generation(self) -> u32 {
        ((self.0 & GEN_MASK) >> GEN_SHIFT) as u32
    }

    /// CLOSED, in its recovery ramp (read as [`State::Closed`] by
    /// [`state`](Self::state)).
    #[inline]
    pub(crate) fn ramping(self) -> bool {
        self.0 & STATE_MASK == RAMP_BITS
    }

    /// This CLOSED word in its recovery ramp (a word in another state is
    /// returned as it is).
    pub(crate) fn with_ramp(self) -> Word {
        if self.state() == State::Closed {
            Word(self.0 | RAMP_BITS)
        } else {
            self
        }
    }

    /// This word with its recovery ramp over: plain CLOSED, same generation.
    pub(crate) fn without_ramp(self) -> Word {
        if self.ramping() {
            Word(self.0 & !STATE_MASK)
        } else {
            self
        }
    }

    fn with(self, mask: u64, shift: u32, value: u64) -> Word {
        Word((self.0 & !mask) | ((value << shift) & mask))
    }
    pub(crate) fn with_level(self, level: u8) -> Word {
        self.with(LEVEL_MASK, LEVEL_SHIFT, u64::from(level.min(MAX_LEVEL)))
    }
    pub(crate) fn with_breaches(self, n: u8) -> Word {
        self.with(BREACH_MASK, BREACH_SHIFT, u64::from(n))
    }
    pub(crate) fn with_probes(self, n: u8) -> Word {
        self.with(PROBES_MASK, PROBES_SHIFT, u64::from(n))
    }
    pub(crate) fn with_successes(self, n: u8) -> Word {
        self.with(SUCCESS_MASK, SUCCESS_SHIFT, u64::from(n))
    }

    /// The word after a transition to `state` / `mode`: the generation goes
    /// up by one (wrapping in its 30 bits) and the per-state counters
    /// (breaches, probes, successes) start from zero.
    pub(crate) fn transition(self, state: State, mode: Mode) -> Word {
        let gen = (u64::from(self.generation()) + 1) & ((1 << GEN_BITS) - 1);
        let kept = self.0 & LEVEL_MASK;
        Word(kept | (state_bits(state) << STATE_SHIFT) | (mode_bits(mode) << MODE_SHIFT) | (gen << GEN_SHIFT))
    }
}

impl fmt::Debug for Word {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Word")
            .field("state", &self.state())
            .field("ramping", &self.ramping())
            .field("mode", &self.mode())
            .field("level", &self.level())
            .field("breaches", &self.breaches())
            .field("probes", &self.probes())
            .field("successes", &self.successes())
            .field("generation", &self.generation())
            .finish()
    }
}

/// What a decision function returns for the current word.
pub(crate) enum Decision<T> {
    /// Store this word (CAS), then return `T`.
    Set(Word, T),
    /// Leave the word alone and return `T`.
    Keep(T),
}

/// The 64-bit generation whose low 30 bits are `gen`, nearest to `base`
/// (within half the 30-bit range either way).
fn nearest(base: u64, gen: u32) -> u64 {
    let candidate = (base & !(GEN_MODULUS - 1)) | u64::from(gen);
    if candidate.wrapping_add(GEN_MODULUS / 2) < base {
        candidate + GEN_MODULUS
    } else if candidate > base.saturating_add(GEN_MODULUS / 2) {
        // (Never below zero: generations start at 0.)
        candidate.checked_sub(GEN_MODULUS).unwrap_or(candidate)
    } else {
        candidate
    }
}

/// The atomic state word, and its full generation (see the module docs).
#[derive(Debug)]
pub(crate) struct StateCell {
    word: AtomicU64,
    /// A 64-bit generation at most a few transitions behind the word's.
    base: AtomicU64,
}

impl StateCell {
    pub(crate) fn new() -> Self {
        Self {
            word: AtomicU64::new(Word::INITIAL.0),
            base: AtomicU64::new(0),
        }
    }

    #[inline(always)]
    pub(crate) fn load(&self) -> Word {
        Word(self.word.load(Ordering::Acquire))
    }

    /// The 64-bit generation of `word`, a word loaded from this cell.
    pub(crate) fn full_generation(&self, word: Word) -> u64 {
        nearest(self.base.load(Ordering::Acquire), word.generation())
    }

    /// After a transition to `word`: raise the full generation to it.
    fn publish(&self, word: Word) {
        let full = self.full_generation(word);
        self.base.fetch_max(full, Ordering::AcqRel);
    }

    /// Runs `decide` over the current word inside a CAS loop until it keeps
    /// the word or its chosen word is stored. Returns the word that was
    /// current when `decide` ran for the last time, the word stored (if
    /// any), and the decision's value.
    #[inline]
    pub(crate) fn update<T>(&self, mut decide: impl FnMut(Word) -> Decision<T>) -> (Word, Option<Word>, T) {
        let mut cur = self.load();
        loop {
            match decide(cur) {
                Decision::Keep(t) => return (cur, None, t),
                Decision::Set(next, t) => {
                    match self
                        .word
                        .compare_exchange_weak(cur.0, next.0, Ordering::AcqRel, Ordering::Acquire)
                    {
                        Ok(_) => {
                            if next.generation() != cur.generation() {
                                self.publish(next);
                            }
                            return (cur, Some(next), t);
                        }
                        Err(actual) => cur = Word(actual),
                    }
                }
            }
        }
    }
}

#[cfg(all(test, not(tailguard_loom)))]
mod tests {
    use super::*;

    #[test]
    fn fields_round_trip_and_do_not_overlap() {
        let w = Word::INITIAL
            .transition(State::HalfOpen, Mode::MetricsOnly)
            .with_level(31)
            .with_breaches(255)
            .with_probes(255)
            .with_successes(255);
        assert_eq!(w.state(), State::HalfOpen);
        assert_eq!(w.mode(), Mode::MetricsOnly);
        assert_eq!(w.level(), 31);
        assert_eq!(w.breaches(), 255);
        assert_eq!(w.probes(), 255);
        assert_eq!(w.successes(), 255);
        assert_eq!(w.generation(), 1);
        assert_eq!(w.with_level(200).level(), MAX_LEVEL);
    }

    #[test]
    fn transition_bumps_generation_by_one_and_wraps() {
        let mut w = Word::INITIAL.with_breaches(3);
        let next = w.transition(State::Open, Mode::Normal);
        assert_eq!(next.generation(), 1);
        assert_eq!(next.breaches(), 0);
        w = Word(GEN_MASK); // generation at its maximum
        assert_eq!(w.transition(State::Closed, Mode::Normal).generation(), 0);
    }

    #[test]
    fn the_full_generation_follows_the_word_across_the_wrap() {
        for base in [0, 5, GEN_MODULUS - 3, 7 * GEN_MODULUS + 11, u64::MAX / 4] {
            // Behind or ahead of `base` by up to a quarter of the range.
            for delta in [
                0i64,
                1,
                2,
                1000,
                -1,
                -2,
                -1000,
                (GEN_MODULUS / 4) as i64,
                -((GEN_MODULUS / 4) as i64),
            ] {
                let full = (base as i64 + delta).max(0) as u64;
                let gen = (full % GEN_MODULUS) as u32;
                assert_eq!(nearest(base, gen), full, "base {base}, delta {delta}");
            }
        }
    }

    /// Kills `StateCell::publish` → `()` and, in `StateCell::update`,
    /// `next.generation() != cur.generation()` with `!=` → `==` (publish on
    /// the updates that are not transitions instead of those that are).
    ///
    /// `base` lags the word's full generation by at most the transitions
    /// whose winners have not published yet: with one thread, by none.
    /// Without publication it would fall further behind with every
    /// transition, and past half the 30-bit range `nearest` would resolve
    /// the word to the wrong 64-bit generation (what `tests/breaker/generation_wrap.rs` shows
    /// with 2^30 real transitions, in release only). Checked across the wrap.
    #[test]
    fn every_transition_publishes_its_full_generation() {
        let cell = StateCell {
            word: AtomicU64::new(Word(GEN_MASK).0), // generation 2^30 - 1
            base: AtomicU64::new(GEN_MODULUS - 1),
        };
        for full in GEN_MODULUS..GEN_MODULUS + 3 {
            let (_, stored, ()) = cell.update(|w| Decision::Set(w.transition(State::Open, Mode::Normal), ()));
            assert_eq!(stored, Some(cell.load()));
            assert_eq!(cell.base.load(Ordering::Relaxed), full, "published at once");
            assert_eq!(cell.full_generation(cell.load()), full);
            // Not a transition: same generation, nothing new to publish.
            cell.update(|w| Decision::Set(w.with_level(w.level() + 1), ()));
            assert_eq!(cell.base.load(Ordering::Relaxed), full);
        }
    }

    #[test]
    fn fast_path_mask_is_zero_only_in_closed_normal() {
        let closed = Word::INITIAL.with_breaches(7).with_level(3);
        assert_eq!(closed.0 & FAST_PATH_MASK, 0);
        for (s, m) in [
            (State::Open, Mode::Normal),
            (State::HalfOpen, Mode::Normal),
            (State::Closed, Mode::ForcedClosed),
            (State::Closed, Mode::MetricsOnly),
        ] {
            assert_ne!(Word::INITIAL.transition(s, m).0 & FAST_PATH_MASK, 0);
        }
        // The ramp: CLOSED to every reader but admission, which it sends to
        // the slow path, and never the OPEN fast path's value.
        let ramp = Word::INITIAL
            .transition(State::Closed, Mode::Normal)
            .with_level(4)
            .with_ramp();
        assert!(ramp.ramping());
        assert_eq!(
            (ramp.state(), ramp.mode(), ramp.level()),
            (State::Closed, Mode::Normal, 4)
        );
        assert_ne!(ramp.0 & FAST_PATH_MASK, 0);
        assert_ne!(ramp.0 & FAST_PATH_MASK, OPEN_NORMAL);
        let over = ramp.without_ramp();
        assert!(!over.ramping());
        assert_eq!(over.0 & FAST_PATH_MASK, 0);
        assert_eq!(
            over.generation(),
            ramp.generation(),
            "the end of a ramp is no transition"
        );
        // A transition ends it; only a CLOSED word takes one.
        assert!(!ramp.transition(State::Open, Mode::Normal).ramping());
        assert!(!Word::INITIAL
            .transition(State::Open, Mode::Normal)
            .with_ramp()
            .ramping());
    }
}
