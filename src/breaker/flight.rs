//! In-flight tracking for the breaker: the shard a call enters, the time
//! it is dated at (never before the last close: `floor`), the generation it
//! is tagged with, and the close's claim over every shard. The protocol
//! (slots, epochs, the closing flag, a permit's word) is `crate::flight`'s.
//!
//! Reads `floor` (window close writes it) and touches the shards' in-flight
//! slots.

use super::Inner;
use crate::flight::{entered, entry, gen_tag, Claim, Claimed, CLAIMED};
use crate::state::Word;

impl Inner {
    /// Enters a call admitted under `word`, starting at `start_raw`, into
    /// its thread's shard's in-flight slots, tagged with `word`'s
    /// generation: returns its permit's word ([`entry`]), 0 if the call is
    /// not tracked (see `crate::flight`), or [`CLAIMED`] if a close counted it
    /// already. A call that finds the generation moved on once it is in
    /// leaves again at once, untracked: it is stale whatever happens (its
    /// verdict says so), and a slot of its old generation would keep the
    /// current one's calls out of it. If a close claimed it in that instant
    /// (as stale, or as slow), the close counted it: its verdict must not.
    #[inline]
    pub(super) fn enter_flight(&self, start_raw: u64, word: Word) -> u64 {
        let epoch = self.now_floored(start_raw) / self.epoch_ns;
        let (index, shard) = self.shards.mine_indexed();
        let gen = gen_tag(word);
        match shard.in_flight() {
            Some(slots) if slots.enter(epoch, gen) => {
                if self.state.load().generation() != word.generation() {
                    return if slots.leave(epoch, gen) { 0 } else { CLAIMED };
                }
                entry(epoch, index)
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
        let (epoch, index) = entered(aux);
        match self.shards.shard(index).and_then(|s| s.in_flight()) {
            Some(slots) => slots.leave(epoch, gen_tag(word)),
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
        // The shards built by the time the close marks them, remembered: a
        // shard built later (a thread's first call, during the close) is
        // one whose calls enter after the close, as if it had come after
        // `end_close`, and the claim and the unmarking visit exactly the
        // marked slots.
        let mut marked = [0u64; crate::shard::MAX_SHARDS / 64];
        for (i, s) in self.shards.built() {
            if let Some(f) = s.in_flight() {
                f.begin_close();
                marked[i / 64] |= 1 << (i % 64);
            }
        }
        let slots = || {
            self.shards
                .built()
                .filter(|&(i, _)| marked[i / 64] & (1 << (i % 64)) != 0)
                .filter_map(|(_, s)| s.in_flight())
        };
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
