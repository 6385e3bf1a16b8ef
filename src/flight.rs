//! In-flight tracking (`track_in_flight(true)`), the whole protocol: the
//! slots each shared shard keeps, the word a slot is, how a call enters and
//! leaves, how a window close claims, the epochs calls are dated in, and the
//! word a permit carries for its call. `breaker/flight.rs` only picks the
//! shard and the time for the breaker.
//!
//! # Slots
//! With in-flight tracking on, each shared shard keeps [`INFLIGHT_SLOTS`]
//! slots, one word each: the epoch it counts for (a tag), the generation
//! its calls were admitted in (a tag), whether window close has claimed
//! that epoch, and how many calls of the epoch are in flight. `allow` adds
//! one to the slot of its start epoch, the verdict takes it out again, and
//! window close claims (counts once) the slot's calls: as stale if they
//! were admitted in an earlier generation than the close's, as slow if
//! they were admitted in its generation and started in an epoch wholly
//! older than the threshold. Each of these is one CAS on the slot's word,
//! so a verdict and a claim never both count a call: whichever CAS lands
//! first decides. A slot is reused for a later epoch only once its own
//! epoch is claimed; if a window close is so late that a call finds its
//! slot still counting an unclaimed older epoch of its own generation,
//! those older calls have run for at least `INFLIGHT_SLOTS − 1` epochs
//! (longer than a window and a threshold) and the call claims them itself,
//! for the next close to count. A call whose slot counts a *later* epoch, or
//! its own epoch already claimed (the clock stepped back past a close), or
//! calls of another generation still in flight, or that arrives while a
//! close is claiming (the slot's closing flag), is not tracked: it is
//! counted when it returns, never as in flight.
//!
//! Slot word, high bits first: epoch tag (30 bits: the epoch mod 2^30),
//! generation tag (16 bits: the state word's generation mod 2^16), the
//! claimed flag, the closing flag, the count (16 bits). The generation tag
//! is what keeps a call admitted *after* a transition from being claimed as
//! stale with those admitted before it (both can share an epoch).
//!
//! # Dating a call
//! A call's epoch is its start time (never before the last window close's
//! time, `floor`) divided by the epoch length ([`epoch_ns`]). Two rules
//! keep a call from looking older than it is. It never takes an epoch
//! before the last close's time, so a clock that stepped back cannot date
//! it earlier. And a call that arrives while a close claims is not tracked:
//! the close marks every slot *closing* ([`InFlight::begin_close`]), then
//! reads the clock for its claim, then clears the marks
//! ([`InFlight::end_close`]). A call whose CAS on its slot lands before the
//! mark read the clock before the close did (the mark acquires the call's
//! CAS), so the claim counts it only if it has run longer than the
//! threshold; a call after the mark sees it and is not tracked. Otherwise a
//! clock that stepped back during the close could date a new call before
//! the close and have it claimed at once (the loom model
//! `a_call_starting_during_a_close_after_a_clock_step_is_never_slow`).
//!
//! # A permit's word
//! A tracked call's permit carries [`entry`]`(epoch, shard)`; 0 for a call
//! not tracked; [`CLAIMED`] for one a close counted before its permit was
//! handed out. [`entered`] reads it back.

use crate::state::Word;
use crate::sync::{AtomicU64, Ordering};

/// Start-epoch slots per shard for in-flight tracking.
pub(crate) const INFLIGHT_SLOTS: usize = 16;

/// A shard's in-flight slots: the words of the module docs' "Slots".
#[derive(Debug)]
pub(crate) struct InFlight {
    slots: [AtomicU64; INFLIGHT_SLOTS],
    /// Calls of unclaimed old epochs claimed by `enter` (a late close), of
    /// one generation: its tag in the high 16 bits, their count below
    /// ([`CARRY_COUNT_MASK`]). Counted by a later close: as slow by a judged
    /// close of that generation, as stale by one of a later generation.
    carried: AtomicU64,
    /// Carried calls of a generation older than `carried`'s: stale.
    carried_stale: AtomicU64,
}

const CARRY_GEN_SHIFT: u32 = 48;
const CARRY_COUNT_MASK: u64 = (1 << CARRY_GEN_SHIFT) - 1;

const FLIGHT_COUNT_MASK: u64 = 0xffff;
const FLIGHT_CLOSING: u64 = 1 << 16;
const FLIGHT_CLAIMED: u64 = 1 << 17;
const FLIGHT_GEN_SHIFT: u32 = 18;
/// Generation tags: the state word's generation mod 2^16.
pub(crate) const FLIGHT_GEN_MASK: u64 = 0xffff;
const FLIGHT_TAG_SHIFT: u32 = 34;
const FLIGHT_TAG_MASK: u64 = (1 << (64 - FLIGHT_TAG_SHIFT)) - 1;
/// Transitions between two closes from which a close cannot order the
/// generation tags (half their range: `gen_before` orders tags at most
/// 2^15 − 1 apart): every tag but its own is then taken for an earlier
/// generation's.
pub(crate) const FLIGHT_GEN_HORIZON: u64 = 1 << 15;

fn flight_tag(epoch: u64) -> u64 {
    epoch & FLIGHT_TAG_MASK
}

/// Whether tag `a` is an earlier epoch than tag `b` (modulo the tag range,
/// within half of it: a clock step of more than 2^29 epochs, twelve hours
/// at the shortest window and a year and a half at the default one, leaves
/// a slot untracked until time has moved as far again).
fn flight_before(a: u64, b: u64) -> bool {
    let d = b.wrapping_sub(a) & FLIGHT_TAG_MASK;
    d != 0 && d < 1 << (63 - FLIGHT_TAG_SHIFT)
}

/// Whether generation tag `a` is earlier than `b` (within half the range).
fn gen_before(a: u64, b: u64) -> bool {
    let d = b.wrapping_sub(a) & FLIGHT_GEN_MASK;
    d != 0 && d <= FLIGHT_GEN_MASK / 2
}

fn flight_word(tag: u64, gen: u64, claimed: bool, count: u64) -> u64 {
    tag << FLIGHT_TAG_SHIFT | gen << FLIGHT_GEN_SHIFT | if claimed { FLIGHT_CLAIMED } else { 0 } | count
}

fn flight_gen(word: u64) -> u64 {
    (word >> FLIGHT_GEN_SHIFT) & FLIGHT_GEN_MASK
}

/// What a window close claims of the calls in flight.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Claim {
    /// The close's span is judged: calls of earlier generations are stale,
    /// calls of its own generation older than the threshold are slow.
    Judged,
    /// The span straddles a transition (it is not judged): calls of
    /// earlier generations are stale; the close's own generation's are
    /// left for the next close to judge.
    StaleOnly,
    /// As `StaleOnly`, after so many transitions since the last close
    /// ([`FLIGHT_GEN_HORIZON`] or more) that the tags cannot be ordered:
    /// every call of another tag than the close's own is claimed as stale
    /// (a call admitted in a transition racing this very close among them),
    /// and a call in flight across exactly a multiple of 2^16 transitions
    /// (with no close between) is taken for one of the close's generation.
    Unordered,
}

/// The calls a claim counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Claimed {
    pub(crate) slow: u64,
    pub(crate) stale: u64,
}

impl InFlight {
    pub(crate) fn new() -> Self {
        // Every slot starts as a claimed epoch before any real one.
        let free = flight_word(flight_tag(0u64.wrapping_sub(INFLIGHT_SLOTS as u64)), 0, true, 0);
        Self {
            slots: core::array::from_fn(|_| AtomicU64::new(free)),
            carried: AtomicU64::new(0),
            carried_stale: AtomicU64::new(0),
        }
    }

    /// A call starting in `epoch`, admitted in generation `gen` (its tag,
    /// [`FLIGHT_GEN_MASK`]), enters its slot; whether it is tracked. Not
    /// while a window close claims: see the module docs' "Dating a call"
    /// for why, and why one CAS against the closing mark is enough.
    #[inline]
    pub(crate) fn enter(&self, epoch: u64, gen: u64) -> bool {
        let cell = &self.slots[(epoch % INFLIGHT_SLOTS as u64) as usize];
        let tag = flight_tag(epoch);
        let mut cur = cell.load(Ordering::Relaxed);
        loop {
            if cur & FLIGHT_CLOSING != 0 {
                return false;
            }
            let (t, claimed, n) = (
                cur >> FLIGHT_TAG_SHIFT,
                cur & FLIGHT_CLAIMED != 0,
                cur & FLIGHT_COUNT_MASK,
            );
            // Calls of another generation still in flight here: leave them
            // to the close, which can tell which generation is the older.
            let foreign = !claimed && n != 0 && flight_gen(cur) != gen;
            let (next, carried) = if foreign {
                return false;
            } else if t == tag && !claimed && n < FLIGHT_COUNT_MASK {
                // This epoch (of this generation, or with none left in it).
                (flight_word(tag, gen, false, n + 1), 0)
            } else if flight_before(t, tag) {
                // An older epoch: free once claimed; unclaimed, its calls (of
                // this generation) are old enough to count as slow now (a
                // late window close).
                (flight_word(tag, gen, false, 1), if claimed { 0 } else { n })
            } else {
                // A later epoch, this epoch already claimed, or a full count.
                return false;
            };
            match cell.compare_exchange_weak(cur, next, Ordering::AcqRel, Ordering::Relaxed) {
                Ok(_) => {
                    if carried != 0 {
                        self.carry(gen, carried);
                    }
                    return true;
                }
                Err(actual) => cur = actual,
            }
        }
    }

    /// A tracked call of `epoch` and generation tag `gen` returns: false
    /// if a claim already counted it (then it must not be counted again).
    #[inline]
    pub(crate) fn leave(&self, epoch: u64, gen: u64) -> bool {
        let cell = &self.slots[(epoch % INFLIGHT_SLOTS as u64) as usize];
        let tag = flight_tag(epoch);
        let mut cur = cell.load(Ordering::Relaxed);
        loop {
            if cur >> FLIGHT_TAG_SHIFT != tag || flight_gen(cur) != gen || cur & FLIGHT_CLAIMED != 0 {
                return false;
            }
            match cell.compare_exchange_weak(cur, cur - 1, Ordering::AcqRel, Ordering::Relaxed) {
                Ok(_) => return true,
                Err(actual) => cur = actual,
            }
        }
    }

    /// Marks every slot closing, before a window close reads the clock for
    /// its claim; calls stop entering until [`end_close`](Self::end_close).
    pub(crate) fn begin_close(&self) {
        for cell in &self.slots {
            cell.fetch_or(FLIGHT_CLOSING, Ordering::AcqRel);
        }
    }

    /// Clears the closing marks after the claim.
    pub(crate) fn end_close(&self) {
        for cell in &self.slots {
            cell.fetch_and(!FLIGHT_CLOSING, Ordering::AcqRel);
        }
    }

    /// `n` calls of generation tag `gen`, carried out of a slot by a late
    /// close's `enter`: kept with their generation (an older one than the
    /// generation kept already goes to the stale carry; a newer one sends
    /// the kept ones there).
    #[cold]
    fn carry(&self, gen: u64, n: u64) {
        let mut cur = self.carried.load(Ordering::Acquire);
        loop {
            let (g, count) = (cur >> CARRY_GEN_SHIFT, cur & CARRY_COUNT_MASK);
            let (next, stale) = if count == 0 || g == gen {
                (gen << CARRY_GEN_SHIFT | (count + n).min(CARRY_COUNT_MASK), 0)
            } else if gen_before(gen, g) {
                (cur, n)
            } else {
                (gen << CARRY_GEN_SHIFT | n, count)
            };
            match self
                .carried
                .compare_exchange_weak(cur, next, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => {
                    if stale != 0 {
                        self.carried_stale.fetch_add(stale, Ordering::Relaxed);
                    }
                    return;
                }
                Err(actual) => cur = actual,
            }
        }
    }

    /// The carried calls a close in generation tag `gen` counts (see
    /// [`Claim`]): those of its generation as slow if judged (left for a
    /// later close otherwise), those of an earlier one as stale.
    fn claim_carried(&self, gen: u64, how: Claim, out: &mut Claimed) {
        if self.carried_stale.load(Ordering::Relaxed) != 0 {
            out.stale += self.carried_stale.swap(0, Ordering::AcqRel);
        }
        let mut cur = self.carried.load(Ordering::Acquire);
        loop {
            let (g, count) = (cur >> CARRY_GEN_SHIFT, cur & CARRY_COUNT_MASK);
            let stale = if how == Claim::Unordered {
                g != gen
            } else {
                gen_before(g, gen)
            };
            let slow = !stale && how == Claim::Judged && g == gen;
            if count == 0 || !(stale || slow) {
                return;
            }
            match self
                .carried
                .compare_exchange_weak(cur, 0, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => {
                    if stale {
                        out.stale += count;
                    } else {
                        out.slow += count;
                    }
                    return;
                }
                Err(actual) => cur = actual,
            }
        }
    }

    /// A window close's claim (see [`Claim`]) by a close in generation tag
    /// `gen`, of the calls of its generation that started before epoch
    /// `target`: how many calls it counted as slow and as stale (with those
    /// carried by late `enter`s).
    pub(crate) fn claim(&self, target: u64, gen: u64, how: Claim) -> Claimed {
        let target = flight_tag(target);
        let mut out = Claimed::default();
        self.claim_carried(gen, how, &mut out);
        for cell in &self.slots {
            let mut cur = cell.load(Ordering::Acquire);
            loop {
                let (t, g) = (cur >> FLIGHT_TAG_SHIFT, flight_gen(cur));
                if cur & FLIGHT_CLAIMED != 0 {
                    break;
                }
                let stale = if how == Claim::Unordered {
                    g != gen
                } else {
                    gen_before(g, gen)
                };
                let slow = !stale && how == Claim::Judged && g == gen && flight_before(t, target);
                if !stale && !slow {
                    // A later generation's (admitted after the close read
                    // its own), or not old enough: left for a later close.
                    break;
                }
                let claimed = flight_word(t, g, true, 0) | (cur & FLIGHT_CLOSING);
                match cell.compare_exchange_weak(cur, claimed, Ordering::AcqRel, Ordering::Acquire) {
                    Ok(_) => {
                        let n = cur & FLIGHT_COUNT_MASK;
                        if stale {
                            out.stale += n;
                        } else {
                            out.slow += n;
                        }
                        break;
                    }
                    Err(actual) => cur = actual,
                }
            }
        }
        out
    }
}

/// The length of an in-flight epoch: [`INFLIGHT_SLOTS`] slots must cover one
/// window and one threshold, with four epochs to spare for a late close.
pub(crate) fn epoch_ns(window_ns: u64, threshold_ns: u64) -> u64 {
    (window_ns + threshold_ns).div_ceil(INFLIGHT_SLOTS as u64 - 4).max(1)
}

/// A permit's in-flight word for a call that a close counted before the
/// permit was handed out (no epoch + 1 reaches it: 2^54 epochs).
pub(crate) const CLAIMED: u64 = u64::MAX;

/// The in-flight generation tag of a state word.
#[inline(always)]
pub(crate) fn gen_tag(word: Word) -> u64 {
    u64::from(word.generation()) & FLIGHT_GEN_MASK
}

/// A permit's in-flight word for a call entered in `epoch` into the slots
/// of shared shard `shard` (below 1024): never 0 nor [`CLAIMED`].
#[inline(always)]
pub(crate) fn entry(epoch: u64, shard: usize) -> u64 {
    (epoch + 1) << 10 | shard as u64
}

/// The `(epoch, shard)` of a permit's in-flight word made by [`entry`].
#[inline(always)]
pub(crate) fn entered(aux: u64) -> (u64, usize) {
    ((aux >> 10) - 1, (aux & 0x3ff) as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A judged claim (generation 0): what it counted as slow.
    fn slow(f: &InFlight, target: u64) -> u64 {
        let c = f.claim(target, 0, Claim::Judged);
        assert_eq!(c.stale, 0);
        c.slow
    }

    #[test]
    fn in_flight_counts_each_call_once_as_returned_or_claimed() {
        let f = InFlight::new();
        assert!(f.enter(0, 0) && f.enter(0, 0) && f.enter(1, 0));
        assert!(f.leave(0, 0));
        assert_eq!(slow(&f, 1), 1, "epoch 0 has one call left");
        assert!(!f.leave(0, 0), "claimed: not counted again");
        assert!(!f.enter(0, 0), "an epoch already claimed takes no new calls");
        assert!(f.leave(1, 0));
        assert_eq!(slow(&f, 5), 0);
    }

    #[test]
    fn no_call_enters_while_a_close_claims() {
        let f = InFlight::new();
        assert!(f.enter(5, 0));
        f.begin_close();
        assert!(!f.enter(5, 0) && !f.enter(6, 0), "closing: not tracked");
        assert!(f.leave(5, 0), "a call already in leaves as usual");
        assert!(!f.enter(7, 0));
        assert_eq!(slow(&f, 10), 0);
        f.end_close();
        assert!(f.enter(11, 0));
        assert_eq!(slow(&f, 12), 1);
    }

    #[test]
    fn a_late_close_never_counts_a_new_call_with_an_old_one() {
        let f = InFlight::new();
        let slots = INFLIGHT_SLOTS as u64;
        assert!(f.enter(3, 0));
        // The close is late: epoch 3 + slots shares the slot of epoch 3.
        assert!(f.enter(3 + slots, 0));
        assert!(!f.leave(3, 0), "the old call was claimed by the new one");
        assert_eq!(slow(&f, 3 + slots), 1, "the old call, carried; not the new one");
        assert!(f.leave(3 + slots, 0));
        // A call whose slot counts a later epoch is not tracked.
        assert!(!f.enter(3, 0));
    }

    /// Calls carried out of a slot by a late close keep their generation: a
    /// close of that generation counts them slow when it is judged (and
    /// leaves them otherwise), a close of a later one stale; carries of two
    /// generations keep apart.
    #[test]
    fn carried_calls_keep_their_generation() {
        let f = InFlight::new();
        let slots = INFLIGHT_SLOTS as u64;
        assert!(f.enter(3, 1));
        assert!(f.enter(3 + slots, 1), "a late close: carries the generation-1 call");
        let c = f.claim(0, 1, Claim::StaleOnly);
        assert_eq!((c.slow, c.stale), (0, 0), "its own generation's, not judged: left");
        let c = f.claim(0, 1, Claim::Judged);
        assert_eq!((c.slow, c.stale), (1, 0), "judged: slow");
        assert!(f.enter(5, 1) && f.enter(5 + slots, 1), "another carry, of generation 1");
        assert!(f.enter(6, 2) && f.enter(6 + slots, 2), "and one of generation 2");
        // At a generation-2 close: the generation-1 carry and slots are stale.
        let c = f.claim(0, 2, Claim::Judged);
        assert_eq!(
            (c.slow, c.stale),
            (1, 3),
            "gen 2's carry slow; gen 1's carry and two slots stale"
        );
    }

    #[test]
    fn in_flight_tags_compare_across_their_wrap() {
        let top = FLIGHT_TAG_MASK;
        assert!(flight_before(top, 0) && flight_before(top - 5, 3) && !flight_before(3, top - 5));
        let f = InFlight::new();
        assert!(f.enter(top, 0));
        assert!(f.enter(top + 1, 0)); // tag 0, the next epoch
        assert_eq!(slow(&f, top + 1), 1);
        assert!(f.leave(top + 1, 0));
        let g = FLIGHT_GEN_MASK;
        assert!(gen_before(g, 0) && gen_before(g - 5, 3) && !gen_before(3, g - 5) && !gen_before(7, 7));
    }

    /// Calls of an earlier generation are claimed as stale (whatever their
    /// age); the close's own generation's only as slow, and only when old
    /// enough and judged; a later generation's not at all.
    #[test]
    fn a_claim_tells_the_generations_apart() {
        let f = InFlight::new();
        assert!(f.enter(1, 4)); // admitted before the transition to 5
        assert!(f.enter(2, 5) && f.enter(9, 5)); // after it
        assert!(f.enter(3, 6)); // after a transition the close has not seen
                                // A call of generation 5 cannot share a slot with 4's in flight.
        assert!(!f.enter(1, 5));
        let c = f.claim(5, 5, Claim::StaleOnly);
        assert_eq!((c.slow, c.stale), (0, 1), "only generation 4's, as stale");
        assert!(
            !f.leave(1, 4) && f.enter(1 + INFLIGHT_SLOTS as u64, 5),
            "its slot is free again"
        );
        let c = f.claim(5, 5, Claim::Judged);
        assert_eq!(
            (c.slow, c.stale),
            (1, 0),
            "epoch 2's, old enough; not epoch 9's, nor 6's"
        );
        assert!(f.leave(9, 5) && f.leave(3, 6));
        assert!(f.enter(4, 7));
        let c = f.claim(0, 7, Claim::Unordered);
        assert_eq!(
            (c.slow, c.stale),
            (0, 1),
            "every other generation's, as stale; not 7's own"
        );
    }

    #[test]
    fn an_in_flight_slot_holds_at_most_0xffff_calls() {
        // The next is not tracked (it is still counted when it returns).
        let f = InFlight::new();
        f.slots[0].store(flight_word(0, 0, false, FLIGHT_COUNT_MASK), Ordering::Relaxed);
        assert!(!f.enter(0, 0));
        assert_eq!(slow(&f, 1), FLIGHT_COUNT_MASK);
    }

    #[test]
    fn a_permit_s_word_gives_back_its_epoch_and_shard() {
        for (epoch, shard) in [(0, 0), (1, 1023), (1 << 50, 7)] {
            let aux = entry(epoch, shard);
            assert!(aux != 0 && aux != CLAIMED);
            assert_eq!(entered(aux), (epoch, shard));
        }
    }
}
