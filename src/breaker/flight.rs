//! In-flight tracking (`track_in_flight(true)`): which epoch a call starts
//! in, and the window close's claim of calls that have run longer than the
//! latency threshold. The slots themselves (tagged CAS words) are in
//! `shard.rs`, with the protocol.
//!
//! Two rules keep a call from looking older than it is. A call never takes
//! an epoch before the last close's time (`floor`), so a clock that stepped
//! back cannot date it earlier. And a call that arrives while a close claims
//! is not tracked: the close marks every slot closing, then reads the clock
//! for its claim, then clears the marks. A call whose CAS on its slot lands
//! before the mark read the clock before the close did (the mark acquires
//! the call's CAS), so the claim counts it only if it has run longer than
//! the threshold; a call after the mark sees it. Otherwise a clock that
//! stepped back during the close could date a new call before the close and
//! have it claimed at once (the loom model
//! `a_call_starting_during_a_close_after_a_clock_step_is_never_slow`).
//!
//! Reads `floor` (window close writes it) and touches the shards' in-flight
//! slots.

use super::Inner;
use crate::shard::{Claim, Claimed, FLIGHT_GEN_MASK, INFLIGHT_SLOTS};
use crate::state::Word;

/// The length of an in-flight epoch: [`INFLIGHT_SLOTS`] slots must cover one
/// window and one threshold, with four epochs to spare for a late close.
pub(super) fn epoch_ns(window_ns: u64, threshold_ns: u64) -> u64 {
    (window_ns + threshold_ns).div_ceil(INFLIGHT_SLOTS as u64 - 4).max(1)
}

impl Inner {
    /// Enters a call admitted under `word`, starting at `start_raw`, into
    /// its thread's shard's in-flight slots, tagged with `word`'s
    /// generation: returns `(epoch + 1) << 10 | shard`, 0 if the call is not
    /// tracked (see the shard module), or [`CLAIMED`] if a close counted it
    /// already. A call that finds the generation moved on once it is in
    /// leaves again at once, untracked: it is stale whatever happens (its
    /// verdict says so), and a slot of its old generation would keep the
    /// current one's calls out of it. If a close claimed it in that instant
    /// (as stale, or as slow), the close counted it: its verdict must not.
    #[inline]
    pub(super) fn enter_flight(&self, start_raw: u64, word: Word) -> u64 {
        let epoch = self.now_floored(start_raw) / self.epoch_ns;
        let index = self.shards.mine_index();
        let gen = gen_tag(word);
        match self.shards.shared()[index].in_flight() {
            Some(slots) if slots.enter(epoch, gen) => {
                if self.state.load().generation() != word.generation() {
                    return if slots.leave(epoch, gen) { 0 } else { CLAIMED };
                }
                (epoch + 1) << 10 | index as u64
            }
            _ => 0,
        }
    }

    /// The call entered as `aux` (see [`enter_flight`](Self::enter_flight))
    /// under `word` returns: false if window close already counted it (as
    /// slow or stale).
    #[inline]
    pub(super) fn leave_flight(&self, aux: u64, word: Word) -> bool {
        if aux == CLAIMED {
            return false;
        }
        let index = (aux & 0x3ff) as usize;
        match self.shards.shared()[index].in_flight() {
            Some(slots) => slots.leave((aux >> 10) - 1, gen_tag(word)),
            None => true,
        }
    }

    /// Claims the calls still in flight (see [`Claim`]) for a close whose
    /// state word is `word`: those admitted in an earlier generation as
    /// stale, those admitted in `word`'s that started in an epoch wholly
    /// older than the threshold as slow. Reads the clock itself, after
    /// marking the slots closing, and uses that reading alone: the close's
    /// own earlier reading may be older than the clock a marked-in call read
    /// (a step back in between), which would date that call before the
    /// claim's time.
    pub(super) fn claim_in_flight(&self, word: Word, how: Claim) -> Claimed {
        let slots = || self.shards.shared().iter().filter_map(|s| s.in_flight());
        slots().for_each(|s| s.begin_close());
        let now = self.now_from_raw(self.clock.raw());
        let target = now.saturating_sub(self.config.threshold_ns) / self.epoch_ns;
        let gen = gen_tag(word);
        let claimed = slots().fold(Claimed::default(), |sum, s| {
            let c = s.claim(target, gen, how);
            Claimed {
                slow: sum.slow + c.slow,
                stale: sum.stale + c.stale,
            }
        });
        slots().for_each(|s| s.end_close());
        claimed
    }
}

/// A permit's in-flight word for a call that a close counted before the
/// permit was handed out (no epoch + 1 reaches it: 2^54 epochs).
pub(super) const CLAIMED: u64 = u64::MAX;

/// The in-flight generation tag of a state word.
#[inline(always)]
fn gen_tag(word: Word) -> u64 {
    u64::from(word.generation()) & FLIGHT_GEN_MASK
}
