//! In-flight tracking (`track_in_flight(true)`): which epoch a call starts
//! in, and the window close's claim of calls that have run longer than the
//! latency threshold. The slots themselves (tagged CAS words) are in
//! `shard.rs`, with the protocol.
//!
//! Touches `flight_floor` (window close raises it; `allow` reads it) and the
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
        let epoch = (self.now_from_raw(start_raw) / self.epoch_ns).max(self.flight_floor.load(Ordering::Acquire));
        let index = self.shards.mine_index();
        match self.shards.shared()[index].in_flight() {
            Some(slots) if slots.enter(epoch) => (epoch + 1) << 10 | index as u64,
            _ => 0,
        }
    }

    /// The call entered as `aux` (see [`enter_flight`](Self::enter_flight))
    /// returns: false if window close already counted it as slow.
    #[inline]
    pub(super) fn leave_flight(&self, aux: u64) -> bool {
        let index = (aux & 0x3ff) as usize;
        match self.shards.shared()[index].in_flight() {
            Some(slots) => slots.leave((aux >> 10) - 1),
            None => true,
        }
    }

    /// Counts (and claims) the calls still in flight that started in an
    /// epoch wholly older than `now − threshold`; from here on no call takes
    /// an epoch before `now`'s.
    pub(super) fn claim_in_flight(&self, now: u64) -> u64 {
        let g = self.epoch_ns;
        self.flight_floor.fetch_max(now / g, Ordering::SeqCst);
        let target = now.saturating_sub(self.config.threshold_ns) / g;
        self.shards
            .shared()
            .iter()
            .filter_map(|s| s.in_flight())
            .map(|slots| slots.claim(target))
            .sum()
    }

    // ---- window close ----
}
