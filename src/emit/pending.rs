//! The trigger replay keeps at the head of a queue, and the rule of the
//! head: plain data, shared by the replay policy (`replay.rs`), what an
//! emitter provides for it (`call.rs`) and both emitters.

use crate::dlq::{DeadLetterQueue, Priority};

/// A trigger taken out of the queue for replay that has not been
/// delivered yet; it stays at the head of the queue.
pub(super) struct Pending<T> {
    pub(super) trigger: T,
    pub(super) class: Priority,
    /// Failed attempts so far.
    pub(super) attempts: u32,
}

/// The rule of the head, for both emitters: the trigger kept from a failed
/// attempt goes first whatever has been queued since, else the queue's next.
pub(super) fn head_first<T>(kept: Option<Pending<T>>, queue: &DeadLetterQueue<T>) -> Option<Pending<T>> {
    kept.or_else(|| {
        queue.pop().map(|(trigger, class)| Pending {
            trigger,
            class,
            attempts: 0,
        })
    })
}
