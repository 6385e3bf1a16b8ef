//! In-flight tracking (`track_in_flight(true)`): which epoch a call starts
//! in, and the window close's claim of calls that have run longer than the
//! latency threshold. The slots themselves (tagged CAS words) are in
//! `shard.rs`, with the protocol.
//!
//! Two rules keep a call from looking older than it is. A call never takes
//! an epoch before the last close's time (`floor`), so a clock that stepped
//! back cannot date it earlier. And a call that starts while a close runs
//! (`closing` is set before the close reads the clock, cleared after its
//! claim) is not tracked: otherwise a clock that stepped back during the
//! close could date it before the close and have it claimed at once.
//!
//! Reads `floor` and `closing` (window close writes them) and touches the
//! shards' in-flight slots.

use super::Inner;
use crate::shard::INFLIGHT_SLOTS;
use crate::sync::Ordering;

/// The length of an in-flight epoch: [`INFLIGHT_SLOTS`] slots must cover one
/// window and one threshold, with four epochs to spare for a late close.
pub(super) fn epoch_ns(window_ns: u64, threshold_ns: u64) -> u64 {
    (window_ns + threshold_ns).div_ceil(INFLIGHT_SLOTS as u64 - 4).max(1)
}

impl Inner {
    /// Enters a call starting at `start_raw` into its thread's shard's
    /// in-flight slots: returns `(epoch + 1) << 10 | shard`, or 0 if the
    /// call is not tracked (see the shard module).
    #[inline]
    pub(super) fn enter_flight(&self, start_raw: u64) -> u64 {
        // After the clock read (in `normal_permit`): a close that set the
        // flag before reading the clock either sees this call's reading as
        // earlier than its own, or this call sees the flag.
        if self.closing.load(Ordering::SeqCst) {
            return 0;
        }
        let epoch = self.now_floored(start_raw) / self.epoch_ns;
        let index = self.shards.mine_index();
        match self.shards.shared()[index].in_flight() {
            Some(slots) if slots.enter(epoch) => (epoch + 1) << 10 | index as u64,
            _ => 0,
        }
    }

    /// The call entered as `aux` (see [`enter_flight`](Self::enter_flight))
    /// returns: false if window close already counted it (as slow or stale).
    #[inline]
    pub(super) fn leave_flight(&self, aux: u64) -> bool {
        let index = (aux & 0x3ff) as usize;
        match self.shards.shared()[index].in_flight() {
            Some(slots) => slots.leave((aux >> 10) - 1),
            None => true,
        }
    }

    /// Counts (and claims) the calls still in flight that started in an
    /// epoch wholly older than `now − threshold`.
    pub(super) fn claim_in_flight(&self, now: u64) -> u64 {
        let g = self.epoch_ns;
        self.claim_before(now.saturating_sub(self.config.threshold_ns) / g)
    }

    /// Counts (and claims) every call in flight, whatever its age: at the
    /// first close after a transition, they are all from an earlier
    /// generation.
    pub(super) fn claim_all_in_flight(&self, now: u64) -> u64 {
        self.claim_before((now / self.epoch_ns).saturating_add(1))
    }

    fn claim_before(&self, target: u64) -> u64 {
        self.shards
            .shared()
            .iter()
            .filter_map(|s| s.in_flight())
            .map(|slots| slots.claim(target))
            .sum()
    }
}
