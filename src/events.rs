//! Transition events: queued in generation order, delivered outside any
//! lock, by whichever thread finds no delivery in progress.
//!
//! Each transition is pushed (under a short lock) by the thread that won its
//! CAS, and that thread then calls [`Events::deliver`] once it holds no other
//! lock. Delivery hands events to the listener strictly in generation order:
//! an event whose predecessor has not been pushed yet waits for it (its
//! pusher will deliver both). The queue is preallocated; if a listener is so
//! slow that `CAPACITY` events pile up, further events are counted as lost
//! (`Snapshot::events_lost`) and delivery skips the gap they leave, never
//! reordering: an event that turns up after its gap was skipped is counted
//! as lost too.

use crate::breaker::Transition;
use crate::sync::Mutex;
use std::collections::VecDeque;

const CAPACITY: usize = 64;
const GEN_MODULUS: u32 = 1 << 30;

pub(crate) type Listener = Box<dyn Fn(&Transition) + Send + Sync + 'static>;

struct Queue {
    pending: VecDeque<Transition>,
    next: u32,
    delivering: bool,
    /// The newest generation dropped for lack of room, until delivery has
    /// passed it: a gap up to it may be skipped.
    lost_upto: Option<u32>,
    lost: u64,
}

/// Transition events; nothing at all (one null pointer) when there is no
/// listener and no `tracing`.
pub(crate) struct Events(Option<Box<Active>>);

struct Active {
    listener: Option<Listener>,
    queue: Mutex<Queue>,
    #[cfg_attr(not(feature = "tracing"), allow(dead_code))]
    name: Option<Box<str>>,
}

impl core::fmt::Debug for Events {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Events").field("active", &self.0.is_some()).finish()
    }
}

/// Distance from `from` forward to `to` in the 30-bit generation space.
fn distance(from: u32, to: u32) -> u32 {
    to.wrapping_sub(from) % GEN_MODULUS
}

impl Events {
    pub(crate) fn new(listener: Option<Listener>, name: Option<Box<str>>) -> Self {
        if listener.is_none() && !cfg!(feature = "tracing") {
            return Self(None);
        }
        Self(Some(Box::new(Active {
            listener,
            name,
            queue: Mutex::new(Queue {
                pending: VecDeque::with_capacity(CAPACITY),
                next: 1,
                delivering: false,
                lost_upto: None,
                lost: 0,
            }),
        })))
    }

    /// Whether transitions are queued at all: for a listener, or for
    /// `tracing` when that feature is on.
    pub(crate) fn wanted(&self) -> bool {
        self.0.is_some()
    }

    pub(crate) fn heap_bytes(&self) -> usize {
        self.0.as_ref().map_or(0, |a| {
            core::mem::size_of::<Active>() + a.queue.lock().pending.capacity() * core::mem::size_of::<Transition>()
        })
    }

    /// Queues one transition. Never allocates, never calls the listener.
    pub(crate) fn push(&self, event: Transition) {
        if let Some(a) = &self.0 {
            a.push(event);
        }
    }

    /// Hands queued events to the listener in order, unless another thread
    /// is already doing so (it will deliver these too).
    pub(crate) fn deliver(&self) {
        if let Some(a) = &self.0 {
            a.deliver();
        }
    }

    pub(crate) fn lost(&self) -> u64 {
        self.0.as_ref().map_or(0, |a| a.queue.lock().lost)
    }
}

impl Active {
    /// Queues one transition. Never allocates, never calls the listener.
    fn push(&self, event: Transition) {
        let mut q = self.queue.lock();
        let d = distance(q.next, event.generation);
        if d >= GEN_MODULUS / 2 {
            // Older than what was already delivered (delivery skipped the
            // gap it belonged to): never deliver out of order.
            q.lost += 1;
            return;
        }
        if q.pending.len() == CAPACITY {
            // No room: count it, and let delivery skip the hole it leaves.
            q.lost += 1;
            let newer = match q.lost_upto {
                Some(l) => distance(q.next, l) < d,
                None => true,
            };
            if newer {
                q.lost_upto = Some(event.generation);
            }
            return;
        }
        let at = q
            .pending
            .iter()
            .position(|e| distance(q.next, e.generation) > d)
            .unwrap_or(q.pending.len());
        q.pending.insert(at, event);
    }

    /// Hands queued events to the listener in order, unless another thread
    /// is already doing so (it will deliver these too).
    fn deliver(&self) {
        let mut q = self.queue.lock();
        if q.delivering {
            return;
        }
        q.delivering = true;
        // Clears `delivering` even if the listener panics.
        struct Reset<'a>(&'a Mutex<Queue>);
        impl Drop for Reset<'_> {
            fn drop(&mut self) {
                self.0.lock().delivering = false;
            }
        }
        drop(q);
        let _reset = Reset(&self.queue);
        loop {
            let mut q = self.queue.lock();
            let ready = match (q.pending.front(), q.lost_upto) {
                (Some(e), _) if e.generation == q.next => true,
                // Every generation missing before this one is at or below
                // the newest lost one: skip the hole.
                (Some(e), Some(l)) => distance(q.next, e.generation) <= distance(q.next, l).wrapping_add(1),
                _ => false,
            };
            if !ready {
                // Check and clear under one lock: a push after this sees
                // `delivering` clear and delivers itself. (`_reset` is only
                // for a panicking listener, so it is forgotten here.)
                q.delivering = false;
                drop(q);
                core::mem::forget(_reset);
                return;
            }
            let event = q.pending.pop_front().expect("front was checked");
            q.next = (event.generation + 1) % GEN_MODULUS;
            if let Some(l) = q.lost_upto {
                if distance(q.next, l) >= GEN_MODULUS / 2 {
                    q.lost_upto = None; // delivery has passed every lost one
                }
            }
            drop(q);
            #[cfg(feature = "tracing")]
            tracing::info!(
                target: "tailguard",
                consumer = self.name.as_deref().unwrap_or(""),
                from = ?event.from,
                to = ?event.to,
                from_mode = ?event.from_mode,
                to_mode = ?event.to_mode,
                generation = event.generation,
                reason = ?event.reason,
                flapping = event.flapping,
                "breaker transition"
            );
            if let Some(listener) = &self.listener {
                listener(&event);
            }
        }
    }
}
