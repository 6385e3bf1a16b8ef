//! Transition events: queued in generation order by the thread that made
//! the transition, delivered to the listener later, off the hot path.
//!
//! # Who delivers, and when
//!
//! A transition is queued (under a short lock, never allocating, never
//! calling the listener) by the thread that won its CAS. The listener is
//! called only by [`Events::deliver`], which runs at every window close
//! (`tick`, by the ticker or by hand) and at the end of every operator call
//! (`force_open`, `reset`, ...), never in `allow` or a permit's verdict: a
//! transition made on the hot path (OPEN → HALF_OPEN in `allow`, a probe's
//! verdict in `record`) reaches the listener at the breaker's next tick, with
//! the ticker within one window of it.
//!
//! # Order and loss
//!
//! Delivery is in generation order, strictly increasing. An event whose
//! predecessor has not been queued yet (its thread stopped between its CAS
//! and queueing it) waits for it. The queue holds [`CAPACITY`] events; an
//! event is dropped only when it is full: then the *oldest* waiting event
//! gives way, together with any earlier one not yet queued (which is dropped
//! when it turns up), so the newest transition always reaches the listener.
//! Every dropped event is counted ([`Events::lost`]).
//!
//! # Several listeners
//!
//! Each gets every event, in the order they were added, one after the
//! other for each event.
//!
//! # A listener that panics
//!
//! Its panic is caught and counted ([`Events::panics`]); the next listener
//! gets the event all the same, and delivery goes on with the next event. The panic's payload is dropped inside a catch of its
//! own (a payload whose `Drop` panics is itself user code), so user code
//! never unwinds through the breaker or the ticker thread.

use crate::report::Transition;
use crate::sync::Mutex;
use std::collections::VecDeque;

/// Events a breaker's queue holds.
pub(crate) const CAPACITY: usize = 64;
const GEN_MODULUS: u32 = 1 << 30;

pub(crate) type Listener = Box<dyn Fn(&Transition) + Send + Sync + 'static>;

struct Queue {
    /// Waiting events, in generation order.
    pending: VecDeque<Transition>,
    /// The generation delivery expects next.
    next: u32,
    delivering: bool,
    lost: u64,
    panics: u64,
}

/// Transition events; nothing at all (one null pointer) when there is no
/// listener and no `tracing`.
pub(crate) struct Events(Option<Box<Active>>);

struct Active {
    /// Every listener, in the order they were added; each gets every event.
    listeners: Box<[Listener]>,
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
    pub(crate) fn new(listeners: Vec<Listener>, name: Option<Box<str>>) -> Self {
        if listeners.is_empty() && !cfg!(feature = "tracing") {
            return Self(None);
        }
        Self(Some(Box::new(Active {
            listeners: listeners.into_boxed_slice(),
            name,
            queue: Mutex::new(Queue {
                pending: VecDeque::with_capacity(CAPACITY),
                next: 1,
                delivering: false,
                lost: 0,
                panics: 0,
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

    /// Hands waiting events to the listener in order, unless another thread
    /// is already doing so (it delivers these too). Cold paths only.
    pub(crate) fn deliver(&self) {
        if let Some(a) = &self.0 {
            a.deliver();
        }
    }

    /// Events dropped so far.
    pub(crate) fn lost(&self) -> u64 {
        self.0.as_ref().map_or(0, |a| a.queue.lock().lost)
    }

    /// Listener panics caught so far.
    pub(crate) fn panics(&self) -> u64 {
        self.0.as_ref().map_or(0, |a| a.queue.lock().panics)
    }
}

impl Active {
    fn push(&self, event: Transition) {
        let mut q = self.queue.lock();
        let mut d = distance(q.next, event.generation);
        if d >= GEN_MODULUS / 2 {
            // Delivery has passed this generation (it gave way to a later
            // one while this event was not queued yet): never deliver out of
            // order.
            q.lost += 1;
            return;
        }
        if q.pending.len() == CAPACITY {
            // Full: the oldest waiting event gives way, unless this one is
            // older still. Delivery then starts after the one dropped.
            let front = q.pending.front().map_or(0, |e| distance(q.next, e.generation));
            q.lost += 1;
            if d < front {
                q.next = (event.generation + 1) % GEN_MODULUS;
                return;
            }
            let dropped = q.pending.pop_front().expect("the queue is full");
            q.next = (dropped.generation + 1) % GEN_MODULUS;
            d = distance(q.next, event.generation);
        }
        let at = q
            .pending
            .iter()
            .position(|e| distance(q.next, e.generation) > d)
            .unwrap_or(q.pending.len());
        q.pending.insert(at, event);
    }

    fn deliver(&self) {
        {
            let mut q = self.queue.lock();
            if q.delivering {
                return;
            }
            q.delivering = true;
        }
        // Clears `delivering` if anything below unwinds after all (nothing
        // should: the listener's panics are caught).
        struct Reset<'a>(&'a Mutex<Queue>);
        impl Drop for Reset<'_> {
            fn drop(&mut self) {
                self.0.lock().delivering = false;
            }
        }
        let reset = Reset(&self.queue);
        loop {
            let event = {
                let mut q = self.queue.lock();
                match q.pending.front() {
                    Some(e) if e.generation == q.next => {
                        let e = q.pending.pop_front().expect("front was checked");
                        q.next = (e.generation + 1) % GEN_MODULUS;
                        e
                    }
                    _ => {
                        // Nothing ready (or a gap): checked and cleared under
                        // one lock, so a push after this sees `delivering`
                        // clear and its thread's next delivery takes it.
                        q.delivering = false;
                        drop(q);
                        core::mem::forget(reset);
                        return;
                    }
                }
            };
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
            for listener in self.listeners.iter() {
                // Each caught on its own: one listener's panic neither
                // keeps the next from this event nor stops delivery.
                let call = std::panic::AssertUnwindSafe(|| listener(&event));
                if let Err(payload) = std::panic::catch_unwind(call) {
                    self.queue.lock().panics += 1;
                    swallow(payload);
                }
            }
        }
    }
}

/// Drops a caught panic's payload without letting a panic in its `Drop`
/// escape (such a second payload is leaked rather than dropped).
pub(crate) fn swallow(payload: Box<dyn std::any::Any + Send>) {
    if let Err(again) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(payload))) {
        core::mem::forget(again);
    }
}

#[cfg(all(test, not(tailguard_loom)))]
mod tests {
    use super::*;
    use crate::{Mode, Reason, State};
    use std::sync::{Arc, Mutex as StdMutex};
    use std::time::Duration;

    fn event(generation: u32) -> Transition {
        Transition {
            from: State::Closed,
            to: State::Open,
            from_mode: Mode::Normal,
            to_mode: Mode::Normal,
            generation,
            reason: Reason::ManualTrip,
            at: Duration::ZERO,
            flapping: false,
        }
    }

    fn recording() -> (Events, Arc<StdMutex<Vec<u32>>>) {
        let seen = Arc::new(StdMutex::new(Vec::new()));
        let sink = Arc::clone(&seen);
        let events = Events::new(
            vec![Box::new(move |t: &Transition| sink.lock().unwrap().push(t.generation))],
            None,
        );
        (events, seen)
    }

    #[test]
    fn a_gap_waits_then_delivery_is_in_order() {
        let (events, seen) = recording();
        events.push(event(2));
        events.push(event(3));
        events.deliver();
        assert!(seen.lock().unwrap().is_empty(), "2 and 3 wait for 1");
        events.push(event(1));
        events.deliver();
        assert_eq!(*seen.lock().unwrap(), [1, 2, 3]);
        assert_eq!(events.lost(), 0);
    }

    #[test]
    fn an_overflow_drops_the_oldest_and_the_gap_before_it_never_the_newest() {
        let (events, seen) = recording();
        // Generation 1 is held up; 2..=101 arrive: 100 events for 64 places.
        for g in 2..=101 {
            events.push(event(g));
        }
        events.deliver();
        // The late one is older than everything delivered: dropped.
        events.push(event(1));
        events.deliver();
        let seen = seen.lock().unwrap();
        assert_eq!(seen.len(), CAPACITY);
        assert_eq!(*seen.last().unwrap(), 101);
        assert!(seen.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(seen.len() as u64 + events.lost(), 101);
    }

    #[test]
    fn an_event_older_than_a_full_queue_is_the_one_dropped() {
        let (events, seen) = recording();
        for g in 3..3 + CAPACITY as u32 {
            events.push(event(g));
        }
        events.push(event(2)); // older than every waiting one: it gives way
        events.push(event(1));
        events.deliver();
        let seen = seen.lock().unwrap();
        assert_eq!(seen.first(), Some(&3));
        assert_eq!(seen.len(), CAPACITY);
        assert_eq!(events.lost(), 2);
    }

    #[test]
    fn a_panicking_listener_is_counted_and_delivery_goes_on() {
        let seen = Arc::new(StdMutex::new(Vec::new()));
        let sink = Arc::clone(&seen);
        let events = Events::new(
            vec![Box::new(move |t: &Transition| {
                sink.lock().unwrap().push(t.generation);
                if t.generation == 2 {
                    panic!("a listener bug (expected by this test)");
                }
            })],
            None,
        );
        for g in 1..=3 {
            events.push(event(g));
        }
        events.deliver();
        assert_eq!(*seen.lock().unwrap(), [1, 2, 3]);
        assert_eq!(events.panics(), 1);
    }
}
