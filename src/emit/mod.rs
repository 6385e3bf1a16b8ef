//! The emit path: bulkhead, timeout, breaker and dead-letter fallback in one
//! call, one [`Emitter`] per consumer.
//!
//! ```text
//!  emit(trigger) ─► breaker.allow ──rejected──────────────┐
//!                     │ permit                            │
//!                     ▼                                   ▼
//!                  bulkhead ──────full─(permit abandoned)─► dead-letter queue ──full──► handed back
//!                     │ slot                              ▲      │
//!                     ▼                                   │      └─► replay (breaker closed), shutdown
//!                  call(&trigger), timed ──failed/timed out┘
//!                     │ ok
//!                     ▼
//!                  delivered
//! ```
//!
//! An emit never waits on a consumer whose breaker is open or whose
//! bulkhead is full: it diverts the trigger to the consumer's queue at
//! once. It reads the clock once to start (that reading is the breaker's
//! admission time, the call's deadline and the latency's start) and once
//! to end. A call that times out counts in the breaker as failed and slow.
//!
//! What happens to each trigger is the [`Emitted`] value the emit returns;
//! nothing is dropped silently:
//!
//! - [`Emitted::Delivered`]: the call succeeded;
//! - [`Emitted::Diverted`]: the trigger is in the queue, and why it went
//!   there ([`Divert`]); if the queue was full, the oldest trigger of a
//!   lower class gave way and is handed back with it (`displaced`);
//! - [`Emitted::HandedBack`]: the queue was full with nothing below the
//!   trigger's class to give way (or the emitter is shut down): the trigger
//!   itself comes back to the caller.
//!
//! Once the breaker closes, [`Emitter::replay_blocking`] (or, with the
//! `tokio` feature, [`Emitter::replay`]) drains the queue back through the
//! consumer, a bounded number at a time, in [`pop`](crate::dlq::DeadLetterQueue::pop)
//! order (highest class first, first in first out within a class). A
//! trigger that fails again is kept at the head of the queue, not
//! re-queued behind the others, so a class is never reordered: the next
//! replay starts with it, even before a higher class queued since (for at
//! most [`replay_attempts`](EmitterBuilder::replay_attempts) failed
//! attempts, after which it is handed back). [`Emitter::shutdown`] hands every queued trigger to a
//! sink, so a planned restart loses nothing.
//!
//! Every emit is counted ([`Emitter::stats`]): its time (what the router
//! pays per trigger, delivered or not, as a histogram), and what it ended
//! in. Once the emitter is quiet:
//!
//! - `emitted = delivered + diverted + handed_back + cancelled`
//!   (cancelled: async emits dropped before they finished, and panicking
//!   calls whose trigger the queue could not take), and
//! - `diverted + queued_by_hand = replayed + replay_handed_back +
//!   drained + displaced + queued + pending` (pending: the trigger replay
//!   keeps at the head; queued by hand: [`Emitter::enqueue`]).
//!
//! Each of those counters is counted, none derived, so each only ever
//! goes up, whatever the emits, replays, drains and reads racing it.
//!
//! A thread-per-core server gives each core a [`LocalEmitter`] per
//! consumer instead (from the same builder,
//! [`build_local`](EmitterBuilder::build_local)): the same outcomes,
//! counters, identities and replay policy, over a breaker's
//! [`LocalHandle`](crate::LocalHandle), with nothing on its emit path
//! written by another core; blocking, or async on the core's own runtime
//! ([`LocalEmitter::emit_with`] and its [`Timer`](crate::timer::Timer)).
//!
//! Where the crate cannot make the call itself (another language's event
//! loop, a completion-based runtime), [`Emitter::begin`] admits an emit
//! and hands back an [`InFlight`] the caller ends when its call does, and
//! [`Emitter::replay_run`] is a replay whose calls the caller makes
//! ([`ReplayRun`]): the same admission, verdicts, outcomes, counters and
//! replay policy. The Python package (`python/` in the repository) drives
//! its asyncio emits and replays this way.
//!
//! ```
//! use std::time::Duration;
//! use tailguard::dlq::{DeadLetterQueue, Priority};
//! use tailguard::emit::{Divert, Emitted, Emitter};
//! use tailguard::Breaker;
//!
//! let breaker = Breaker::builder().build()?;
//! let emitter = Emitter::builder(breaker.clone(), DeadLetterQueue::with_capacity(1024)?)
//!     .bulkhead(64)?
//!     .timeout(Duration::from_millis(200))?
//!     .build()?;
//!
//! // The call gets the trigger and its deadline (to set its own socket timeouts).
//! let out = emitter.emit_blocking("order-17", Priority::Critical, |trigger, deadline| {
//!     assert!(deadline.remaining() <= Duration::from_millis(200));
//!     Ok::<_, std::io::Error>(trigger.len())
//! });
//! assert!(matches!(out, Emitted::Delivered(8)));
//!
//! breaker.trip_now(); // the consumer is down: nothing waits on it
//! let out = emitter.emit_blocking("order-18", Priority::Critical, |_, _| -> Result<(), std::io::Error> {
//!     unreachable!("an open breaker never calls the consumer")
//! });
//! assert!(matches!(out, Emitted::Diverted { reason: Divert::Open(_), displaced: None }));
//!
//! breaker.reset(); // recovered: replay what was diverted
//! let replayed = emitter.replay_blocking(100, |trigger, _| {
//!     assert_eq!(*trigger, "order-18");
//!     Ok::<_, std::io::Error>(())
//! });
//! assert_eq!(replayed.delivered, 1);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod attempt;
mod blocking;
mod call;
mod future;
mod local;
mod metrics;
mod pending;
mod replay;
mod replay_run;

pub use attempt::InFlight;
pub use local::{LocalEmitter, LocalStatsReader};
pub use metrics::{EmitTimes, EmitterStats};
#[cfg(feature = "prometheus")]
pub(crate) use metrics::{Exported, EXPORTED};
pub use replay_run::{ReplayCall, ReplayRun};

use crate::breaker::Breaker;
use crate::bulkhead::Bulkhead;
use crate::clock::ClockSource;
use crate::dlq::{DeadLetterQueue, FallbackDepth, Full, Priority, Producer, Pushed, Stats};
use crate::error::{ConfigError, ConfigErrorKind};
use crate::report::Rejected;
use crate::sync::{fence, Arc, AtomicBool, AtomicUsize, Mutex, Ordering};
use core::fmt;
use core::task::Waker;
use crossbeam_utils::CachePadded;
use metrics::{Count, Metrics};
use replay::{ReplayState, TakeTurn};
use std::time::Duration;

/// One consumer's emit path: its breaker, an optional bulkhead, a timeout
/// and its dead-letter queue. Cheap to clone (an `Arc`); every clone is the
/// same emitter. See the [module documentation](self).
///
/// ```
/// use tailguard::{Breaker, dlq::{DeadLetterQueue, Priority}, emit::{Emitted, Emitter}};
///
/// let pricing = Emitter::builder(Breaker::builder().build()?, DeadLetterQueue::with_capacity(1024)?)
///     .bulkhead(64)?
///     .build()?;
/// match pricing.emit_blocking("order-1", Priority::Critical, |_, _| Ok::<_, std::io::Error>(())) {
///     Emitted::Delivered(()) => {}
///     Emitted::Diverted { displaced, .. } => drop(displaced), // queued; a displaced one came back
///     Emitted::HandedBack { trigger, .. } => drop(trigger),   // the router keeps it
/// }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Emitter<T> {
    inner: Arc<Inner<T>>,
}

// Sound after a panic anywhere: no lock of it is held while user code runs
// (calls, sinks), a panicking call's trigger is queued (or counted dropped)
// before the panic goes on, and its counters only ever add. Unwind-safe as
// its triggers are.
impl<T: std::panic::UnwindSafe> std::panic::UnwindSafe for Emitter<T> {}
impl<T: std::panic::UnwindSafe> std::panic::RefUnwindSafe for Emitter<T> {}

impl<T> Clone for Emitter<T> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
        }
    }
}

struct Inner<T> {
    breaker: Breaker,
    bulkhead: Option<Bulkhead>,
    timeout: Duration,
    timeout_ns: u64,
    replay_attempts: u32,
    producer: Producer<T>,
    /// The queue's consumer side, and the trigger replay keeps at the head;
    /// taken by replay, drain and shutdown only (cold paths), each time
    /// briefly: never while a call or a sink runs.
    replay: Mutex<ReplayState<T>>,
    /// Set by shutdown: nothing is queued any more.
    closed: AtomicBool,
    /// Held by the replay running (one at a time, across its awaits too),
    /// or by `shutdown_async` while it drains.
    replaying: AtomicBool,
    /// Tasks waiting for the replay turn (`shutdown_async`).
    turn_waiters: Mutex<Vec<Waker>>,
    /// Whether replay keeps a trigger at the head (`ReplayState::pending`),
    /// for readers that take no lock ([`Emitter::stats`]); written with it,
    /// under the lock.
    has_pending: AtomicBool,
    /// Diversions between their check of `closed` and the end of their push:
    /// shutdown waits for them before it drains, so none lands after it.
    diverting: CachePadded<AtomicUsize>,
    metrics: Metrics,
}

/// Why a trigger was not delivered.
///
/// ```
/// use tailguard::{Breaker, dlq::{DeadLetterQueue, Priority}, emit::{Divert, Emitted, Emitter}};
/// let e = Emitter::builder(Breaker::builder().build()?, DeadLetterQueue::with_capacity(8)?).build()?;
/// let out = e.emit_blocking(1u8, Priority::Routine, |_, _| Err::<(), _>("503"));
/// assert!(matches!(out, Emitted::Diverted { reason: Divert::Failed("503"), .. }));
/// # Ok::<(), tailguard::ConfigError>(())
/// ```
///
/// New reasons may come in a minor release (as `NoTimer` did with the
/// timers): a `match` on it needs a `_` arm.
#[derive(Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Divert<E> {
    /// The breaker rejected the call (open, every probe slot taken, or
    /// forced open); the consumer was not called.
    Open(Rejected),
    /// The bulkhead was full; the consumer was not called.
    BulkheadFull,
    /// The call ran past the timeout (it took at least this long).
    TimedOut(Duration),
    /// The call failed.
    Failed(E),
    /// An async call was pending on its first poll and its timer had no
    /// timer to give (no runtime there: see [`crate::timer`]), so it was
    /// cut at once, with no verdict to the breaker.
    NoTimer,
}

impl<E> Divert<E> {
    /// Whether the consumer was called (timed out or failed) or not. A
    /// call cut for want of a timer ([`Divert::NoTimer`]) counts as not
    /// called: nothing of the consumer was judged, and a replay uses no
    /// attempt on it.
    ///
    /// ```
    /// use tailguard::emit::Divert;
    /// assert!(!Divert::<()>::BulkheadFull.called());
    /// assert!(Divert::Failed(()).called());
    /// ```
    pub fn called(&self) -> bool {
        matches!(self, Divert::TimedOut(_) | Divert::Failed(_))
    }
}

impl<E: fmt::Display> fmt::Display for Divert<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Divert::Open(r) => write!(f, "breaker rejected the call: {r}"),
            Divert::BulkheadFull => f.write_str("bulkhead full"),
            Divert::TimedOut(d) => write!(f, "timed out after {d:?}"),
            Divert::Failed(e) => write!(f, "call failed: {e}"),
            Divert::NoTimer => f.write_str("no timer to cut the call at its deadline (no runtime)"),
        }
    }
}

/// Why a trigger was handed back to the caller instead of queued.
///
/// ```
/// use tailguard::{Breaker, dlq::{DeadLetterQueue, Priority}, emit::{Emitted, Emitter, HandBack}};
/// let b = Breaker::builder().build()?;
/// let e = Emitter::builder(b.clone(), DeadLetterQueue::with_capacity(1)?).build()?;
/// b.trip_now();
/// let _ = e.emit_blocking("a", Priority::Critical, |_, _| Ok::<_, ()>(()));
/// // Full of a class at least as high: the trigger comes back.
/// let out = e.emit_blocking("b", Priority::Critical, |_, _| Ok::<_, ()>(()));
/// assert!(matches!(out, Emitted::HandedBack { trigger: "b", not_queued: HandBack::QueueFull, .. }));
/// # Ok::<(), tailguard::ConfigError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HandBack {
    /// The queue was full, with nothing of a lower class to give way.
    QueueFull,
    /// The emitter is shut down: nothing is queued any more.
    ShutDown,
}

/// What an emit did with its trigger.
///
/// ```
/// use tailguard::{Breaker, dlq::{DeadLetterQueue, Priority}, emit::{Emitted, Emitter}};
/// let e = Emitter::builder(Breaker::builder().build()?, DeadLetterQueue::with_capacity(8)?).build()?;
/// let out: Emitted<&str, usize, ()> = e.emit_blocking("abc", Priority::Routine, |t, _| Ok(t.len()));
/// assert_eq!(out, Emitted::Delivered(3));
/// # Ok::<(), tailguard::ConfigError>(())
/// ```
#[must_use = "a trigger handed back (or displaced) must be handled by the caller"]
#[derive(Debug, PartialEq, Eq)]
pub enum Emitted<T, O, E> {
    /// The call succeeded, with this output.
    Delivered(O),
    /// The trigger is in the dead-letter queue, for replay.
    Diverted {
        /// Why it was not delivered.
        reason: Divert<E>,
        /// The queue was full and this older, lower-class trigger gave way:
        /// it is handed back to the caller.
        displaced: Option<(T, Priority)>,
    },
    /// The trigger could not be delivered nor queued: it is handed back.
    HandedBack {
        /// The trigger.
        trigger: T,
        /// Its class.
        class: Priority,
        /// Why it was not delivered (as in [`Emitted::Diverted`]).
        reason: Divert<E>,
        /// Why it was not queued either.
        not_queued: HandBack,
    },
}

impl<T, O, E> Emitted<T, O, E> {
    /// Whether the trigger was delivered.
    ///
    /// ```
    /// use tailguard::emit::Emitted;
    /// assert!(Emitted::<(), u8, ()>::Delivered(1).is_delivered());
    /// ```
    pub fn is_delivered(&self) -> bool {
        matches!(self, Emitted::Delivered(_))
    }
}

/// The time budget of one call: when it started and how long it may take.
/// A blocking call reads it to set its own socket timeouts; a call that
/// returns after it counts as timed out.
///
/// ```
/// use std::time::Duration;
/// use tailguard::{Breaker, dlq::{DeadLetterQueue, Priority}, emit::Emitter};
/// let e = Emitter::builder(Breaker::builder().build()?, DeadLetterQueue::with_capacity(8)?)
///     .timeout(Duration::from_millis(200))?
///     .build()?;
/// let _ = e.emit_blocking((), Priority::Routine, |_, deadline| {
///     let socket_timeout = deadline.remaining(); // at most 200 ms
///     assert!(socket_timeout <= Duration::from_millis(200));
///     Ok::<_, ()>(())
/// });
/// # Ok::<(), tailguard::ConfigError>(())
/// ```
#[derive(Clone, Copy)]
pub struct Deadline<'a> {
    clock: &'a ClockSource,
    start: u64,
    budget: Duration,
}

impl Deadline<'_> {
    /// The whole budget (the emitter's timeout).
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use tailguard::{Breaker, dlq::{DeadLetterQueue, Priority}, emit::Emitter};
    /// let e = Emitter::builder(Breaker::builder().build()?, DeadLetterQueue::with_capacity(8)?)
    ///     .timeout(Duration::from_millis(50))?
    ///     .build()?;
    /// let _ = e.emit_blocking((), Priority::Routine, |_, d| {
    ///     assert_eq!(d.budget(), Duration::from_millis(50));
    ///     Ok::<_, ()>(())
    /// });
    /// # Ok::<(), tailguard::ConfigError>(())
    /// ```
    pub fn budget(&self) -> Duration {
        self.budget
    }

    /// What is left of the budget now (zero once it has run out); reads the
    /// breaker's clock.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use tailguard::{Breaker, clock::ManualClock, dlq::{DeadLetterQueue, Priority}, emit::Emitter};
    /// let clock = ManualClock::new();
    /// let b = Breaker::builder().clock(clock.clone()).build()?;
    /// let e = Emitter::builder(b, DeadLetterQueue::with_capacity(8)?)
    ///     .timeout(Duration::from_millis(50))?
    ///     .build()?;
    /// let _ = e.emit_blocking((), Priority::Routine, |_, d| {
    ///     clock.advance(Duration::from_millis(20));
    ///     assert_eq!(d.remaining(), Duration::from_millis(30));
    ///     Ok::<_, ()>(())
    /// });
    /// # Ok::<(), tailguard::ConfigError>(())
    /// ```
    pub fn remaining(&self) -> Duration {
        let spent = Duration::from_nanos(self.clock.delta_nanos(self.start, self.clock.raw()));
        self.budget.saturating_sub(spent)
    }

    /// Whether the budget has run out.
    ///
    /// ```
    /// # use tailguard::{Breaker, dlq::{DeadLetterQueue, Priority}, emit::Emitter};
    /// let e = Emitter::builder(Breaker::builder().build()?, DeadLetterQueue::with_capacity(8)?).build()?;
    /// let _ = e.emit_blocking((), Priority::Routine, |_, d| {
    ///     assert!(!d.expired());
    ///     Ok::<_, ()>(())
    /// });
    /// # Ok::<(), tailguard::ConfigError>(())
    /// ```
    pub fn expired(&self) -> bool {
        self.remaining().is_zero()
    }
}

impl fmt::Debug for Deadline<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Deadline")
            .field("budget", &self.budget)
            .field("remaining", &self.remaining())
            .finish()
    }
}

/// What a replay did. A trigger it hands back ([`handed_back`](Self::handed_back))
/// is the caller's to keep: the emitter no longer holds it.
///
/// ```
/// use tailguard::{Breaker, dlq::{DeadLetterQueue, Priority}, emit::Emitter};
///
/// let b = Breaker::builder().build()?;
/// let e = Emitter::builder(b.clone(), DeadLetterQueue::with_capacity(8)?)
///     .replay_attempts(1)?
///     .build()?;
/// b.trip_now();
/// let _ = e.emit_blocking("order-9", Priority::Critical, |_, _| Ok::<_, ()>(()));
/// b.reset();
/// let r = e.replay_blocking(10, |_, _| Err::<(), _>("still down"));
/// if let Some((trigger, class)) = r.handed_back {
///     // Its last attempt failed: persist it, page someone, ...
///     assert_eq!((trigger, class), ("order-9", Priority::Critical));
/// }
/// # Ok::<(), tailguard::ConfigError>(())
/// ```
#[must_use = "a replay may hand a trigger back (`handed_back`): the caller must keep it"]
#[derive(Debug, PartialEq, Eq)]
pub struct Replayed<T, E> {
    /// Triggers delivered from the queue.
    pub delivered: usize,
    /// Why it stopped before `max` (or `None` when it replayed `max`).
    pub stopped: Option<ReplayStop<E>>,
    /// A trigger that failed its last allowed attempt
    /// ([`replay_attempts`](EmitterBuilder::replay_attempts)), handed back
    /// to the caller, with its class.
    pub handed_back: Option<(T, Priority)>,
}

/// Why a replay stopped early. Unless the replay handed it back, a trigger
/// that was not delivered stays at the head of the queue.
///
/// ```
/// use tailguard::{Breaker, dlq::{DeadLetterQueue, Priority}, emit::{Emitter, ReplayStop}};
/// let b = Breaker::builder().build()?;
/// let e = Emitter::<u8>::builder(b.clone(), DeadLetterQueue::with_capacity(8)?).build()?;
/// assert_eq!(e.replay_blocking(10, |_, _| Ok::<_, ()>(())).stopped, Some(ReplayStop::Empty));
/// b.trip_now();
/// assert_eq!(e.replay_blocking(10, |_, _| Ok::<_, ()>(())).stopped, Some(ReplayStop::NotClosed));
/// # Ok::<(), tailguard::ConfigError>(())
/// ```
#[derive(Debug, PartialEq, Eq)]
pub enum ReplayStop<E> {
    /// The queue is empty.
    Empty,
    /// The breaker is not CLOSED (or is forced open); nothing was tried.
    /// (Under metrics-only, which never rejects, and under forced closed
    /// or disabled, replay runs whatever the state.)
    NotClosed,
    /// Another replay (or a `shutdown_async`) is running on this emitter.
    Busy,
    /// A replayed trigger was not delivered.
    Failed(Divert<E>),
}

impl EmitterStats {
    /// Triggers queued, for whatever reason.
    ///
    /// ```
    /// # use tailguard::{Breaker, dlq::{DeadLetterQueue, Priority}, emit::Emitter};
    /// let b = Breaker::builder().build()?;
    /// let e = Emitter::builder(b.clone(), DeadLetterQueue::with_capacity(8)?).build()?;
    /// b.trip_now();
    /// let _ = e.emit_blocking(1, Priority::Routine, |_, _| Ok::<_, ()>(()));
    /// assert_eq!(e.stats().diverted(), 1);
    /// # Ok::<(), tailguard::ConfigError>(())
    /// ```
    pub fn diverted(&self) -> u64 {
        self.diverted_open
            + self.diverted_bulkhead
            + self.diverted_timeout
            + self.diverted_failed
            + self.diverted_no_timer
    }

    /// Triggers emitted and finished (delivered, diverted or handed back),
    /// plus those cancelled.
    ///
    /// ```
    /// # use tailguard::{Breaker, dlq::{DeadLetterQueue, Priority}, emit::Emitter};
    /// let e = Emitter::builder(Breaker::builder().build()?, DeadLetterQueue::with_capacity(8)?).build()?;
    /// let _ = e.emit_blocking(1, Priority::Routine, |_, _| Ok::<_, ()>(()));
    /// let _ = e.emit_blocking(2, Priority::Routine, |_, _| Err::<(), _>(()));
    /// let s = e.stats();
    /// assert_eq!((s.emitted(), s.delivered, s.diverted()), (2, 1, 1));
    /// # Ok::<(), tailguard::ConfigError>(())
    /// ```
    pub fn emitted(&self) -> u64 {
        self.delivered + self.diverted() + self.handed_back_full + self.handed_back_shut_down + self.cancelled
    }

    /// Triggers that went into the queue: diverted by emits, or queued by
    /// hand. Once the emitter is quiet this is [`out_of_queue`](Self::out_of_queue).
    ///
    /// ```
    /// # use tailguard::{Breaker, dlq::{DeadLetterQueue, Priority}, emit::Emitter};
    /// let b = Breaker::builder().build()?;
    /// let e = Emitter::builder(b.clone(), DeadLetterQueue::with_capacity(8)?).build()?;
    /// b.trip_now();
    /// let _ = e.emit_blocking(1, Priority::Routine, |_, _| Ok::<_, ()>(()));
    /// let _ = e.enqueue(2, Priority::Routine);
    /// let s = e.stats();
    /// assert_eq!((s.into_queue(), s.out_of_queue()), (2, 2));
    /// # Ok::<(), tailguard::ConfigError>(())
    /// ```
    pub fn into_queue(&self) -> u64 {
        self.diverted() + self.queued_by_hand
    }

    /// Where the triggers that went into the queue are now: replayed,
    /// handed back by replay, drained, displaced, still queued, or kept at
    /// the head by replay.
    ///
    /// ```
    /// # use tailguard::{Breaker, dlq::{DeadLetterQueue, Priority}, emit::Emitter};
    /// let e = Emitter::<u8>::builder(Breaker::builder().build()?, DeadLetterQueue::with_capacity(8)?).build()?;
    /// let _ = e.enqueue(7, Priority::Critical);
    /// e.drain(1, |_, _| {});
    /// assert_eq!(e.stats().out_of_queue(), 1);
    /// # Ok::<(), tailguard::ConfigError>(())
    /// ```
    pub fn out_of_queue(&self) -> u64 {
        self.replayed
            + self.replay_handed_back
            + self.drained
            + self.displaced
            + self.queued as u64
            + u64::from(self.pending)
    }

    /// Triggers handed back to your code to keep (persist, re-send): by
    /// emits the queue could not take (full, or shut down), by pushes that
    /// displaced them, and by replay after their last attempt. Those a
    /// [`drain`](Emitter::drain) or [`shutdown`](Emitter::shutdown) sink
    /// took are in [`drained`](Self::drained) instead. A trigger displaced
    /// while a panicking call unwound was dropped, not handed back (see
    /// [`dropped_in_panics`](Self::dropped_in_panics)).
    ///
    /// ```
    /// # use tailguard::{Breaker, dlq::{DeadLetterQueue, Priority}, emit::{Emitter, Emitted}};
    /// let b = Breaker::builder().build()?;
    /// let e = Emitter::builder(b.clone(), DeadLetterQueue::with_capacity(1)?).build()?;
    /// b.trip_now();
    /// let _ = e.emit_blocking(1, Priority::Routine, |_, _| Ok::<_, ()>(())); // queued
    /// let full = e.emit_blocking(2, Priority::Routine, |_, _| Ok::<_, ()>(()));
    /// assert!(matches!(full, Emitted::HandedBack { trigger: 2, .. }));
    /// assert_eq!(e.stats().handed_back(), 1);
    /// # Ok::<(), tailguard::ConfigError>(())
    /// ```
    pub fn handed_back(&self) -> u64 {
        self.handed_back_full + self.handed_back_shut_down + self.displaced + self.replay_handed_back
    }
}

/// Builds an [`Emitter`]; from [`Emitter::builder`].
///
/// ```
/// use std::time::Duration;
/// use tailguard::{Breaker, dlq::DeadLetterQueue, emit::Emitter};
/// let e = Emitter::<String>::builder(Breaker::builder().build()?, DeadLetterQueue::with_capacity(4096)?)
///     .bulkhead(64)?
///     .timeout(Duration::from_millis(250))?
///     .replay_attempts(5)?
///     .build()?;
/// assert_eq!(e.timeout(), Duration::from_millis(250));
/// # Ok::<(), tailguard::ConfigError>(())
/// ```
#[must_use = "a builder does nothing until built"]
pub struct EmitterBuilder<T> {
    breaker: Breaker,
    queue: DeadLetterQueue<T>,
    bulkhead: Option<Bulkhead>,
    /// Whether `bulkhead` came from [`EmitterBuilder::shared_bulkhead`]
    /// (a per-core emitter cannot take it: see [`EmitterBuilder::build_local`]).
    shared_bulkhead: bool,
    timeout: Duration,
    replay_attempts: u32,
}

impl<T> fmt::Debug for EmitterBuilder<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EmitterBuilder")
            .field("bulkhead", &self.bulkhead)
            .field("timeout", &self.timeout)
            .field("replay_attempts", &self.replay_attempts)
            .finish_non_exhaustive()
    }
}

/// The default [`timeout`](EmitterBuilder::timeout).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(1);

impl<T> Emitter<T> {
    /// A builder for the emitter of the consumer behind `breaker`, diverting
    /// into `queue` (its only consumer from then on: replay, drain and
    /// shutdown pop it). Triggers already in `queue` count as queued by
    /// hand ([`EmitterStats::queued_by_hand`]). Anything pushed later
    /// through a [`Producer`] of that queue kept from before bypasses the
    /// emitter's counts: queue by hand with [`Emitter::enqueue`].
    ///
    /// ```
    /// # use tailguard::{Breaker, dlq::DeadLetterQueue, emit::Emitter};
    /// let emitter: Emitter<String> =
    ///     Emitter::builder(Breaker::builder().build()?, DeadLetterQueue::with_capacity(64)?).build()?;
    /// # drop(emitter);
    /// # Ok::<(), tailguard::ConfigError>(())
    /// ```
    pub fn builder(breaker: Breaker, queue: DeadLetterQueue<T>) -> EmitterBuilder<T> {
        EmitterBuilder {
            breaker,
            queue,
            bulkhead: None,
            shared_bulkhead: false,
            timeout: DEFAULT_TIMEOUT,
            replay_attempts: 3,
        }
    }
}

impl<T> EmitterBuilder<T> {
    /// Bounds the calls in flight to the consumer (default: no bulkhead).
    ///
    /// # Errors
    /// A [`ConfigError`] for `"bulkhead"` when it is 0.
    ///
    /// ```
    /// # use tailguard::{Breaker, dlq::DeadLetterQueue, emit::Emitter};
    /// let b = Emitter::<u8>::builder(Breaker::builder().build()?, DeadLetterQueue::with_capacity(8)?);
    /// let err = b.bulkhead(0).unwrap_err();
    /// assert_eq!(err.field(), "bulkhead");
    /// assert_eq!(err.to_string(), "invalid `bulkhead`: bulkhead(0) must admit at least one call");
    /// # Ok::<(), tailguard::ConfigError>(())
    /// ```
    pub fn bulkhead(self, max_in_flight: usize) -> Result<Self, ConfigError> {
        let bulkhead = Bulkhead::new(max_in_flight).map_err(|_| {
            ConfigError::new(
                "bulkhead",
                ConfigErrorKind::Zero,
                format!("bulkhead({max_in_flight}) must admit at least one call"),
            )
        })?;
        let mut this = self.shared_bulkhead(bulkhead);
        this.shared_bulkhead = false;
        Ok(this)
    }

    /// Uses `bulkhead` (which others may share: say one bound over several
    /// emitters of the same host).
    ///
    /// ```
    /// # use tailguard::{Breaker, Bulkhead, dlq::DeadLetterQueue, emit::Emitter};
    /// let shared = Bulkhead::new(32)?;
    /// let e = Emitter::<u8>::builder(Breaker::builder().build()?, DeadLetterQueue::with_capacity(8)?)
    ///     .shared_bulkhead(shared.clone())
    ///     .build()?;
    /// # drop(e);
    /// # Ok::<(), tailguard::ConfigError>(())
    /// ```
    pub fn shared_bulkhead(mut self, bulkhead: Bulkhead) -> Self {
        self.bulkhead = Some(bulkhead);
        self.shared_bulkhead = true;
        self
    }

    /// How long a call may take (default [`DEFAULT_TIMEOUT`], 1 s). An
    /// async call is cancelled at the deadline; a blocking call is told its
    /// deadline and counts as timed out if it returns after it.
    ///
    /// # Errors
    /// A [`ConfigError`] for `"timeout"` when it is zero.
    ///
    /// ```
    /// # use tailguard::{Breaker, dlq::DeadLetterQueue, emit::Emitter};
    /// let b = Emitter::<u8>::builder(Breaker::builder().build()?, DeadLetterQueue::with_capacity(8)?);
    /// assert_eq!(b.timeout(std::time::Duration::ZERO).unwrap_err().field(), "timeout");
    /// # Ok::<(), tailguard::ConfigError>(())
    /// ```
    pub fn timeout(mut self, timeout: Duration) -> Result<Self, ConfigError> {
        if timeout.is_zero() {
            return Err(ConfigError::new(
                "timeout",
                ConfigErrorKind::Zero,
                "timeout(0s) would time every call out: it must be above zero",
            ));
        }
        self.timeout = timeout;
        Ok(self)
    }

    /// Failed replay attempts after which a queued trigger is handed back
    /// instead of kept at the head of the queue (default 3).
    ///
    /// # Errors
    /// A [`ConfigError`] for `"replay_attempts"` when it is 0.
    ///
    /// ```
    /// # use tailguard::{Breaker, dlq::DeadLetterQueue, emit::Emitter};
    /// let b = Emitter::<u8>::builder(Breaker::builder().build()?, DeadLetterQueue::with_capacity(8)?);
    /// assert_eq!(b.replay_attempts(0).unwrap_err().field(), "replay_attempts");
    /// # Ok::<(), tailguard::ConfigError>(())
    /// ```
    pub fn replay_attempts(mut self, attempts: u32) -> Result<Self, ConfigError> {
        if attempts == 0 {
            return Err(ConfigError::new(
                "replay_attempts",
                ConfigErrorKind::Zero,
                "replay_attempts(0): a queued trigger needs at least one replay attempt",
            ));
        }
        self.replay_attempts = attempts;
        Ok(self)
    }

    /// Builds the emitter.
    ///
    /// # Errors
    /// None today (every field is checked when set); kept fallible so that
    /// checks across fields can be added without breaking callers.
    ///
    /// ```
    /// # use tailguard::{Breaker, dlq::DeadLetterQueue, emit::Emitter};
    /// let e = Emitter::<u8>::builder(Breaker::builder().build()?, DeadLetterQueue::with_capacity(8)?).build()?;
    /// assert_eq!(e.stats().queued, 0);
    /// # Ok::<(), tailguard::ConfigError>(())
    /// ```
    pub fn build(self) -> Result<Emitter<T>, ConfigError> {
        let shards = self.breaker.shard_count();
        let metrics = Metrics::new(shards);
        // Triggers already in the queue came in by hand, before the emitter:
        // counted so, and the identities hold from the start.
        metrics.add(Count::QueuedByHand, self.queue.len() as u64);
        Ok(Emitter {
            inner: Arc::new(Inner {
                timeout_ns: crate::clock::duration_nanos_saturating(self.timeout),
                timeout: self.timeout,
                replay_attempts: self.replay_attempts,
                bulkhead: self.bulkhead,
                producer: self.queue.producer(),
                replay: Mutex::new(ReplayState::new(self.queue)),
                closed: AtomicBool::new(false),
                replaying: AtomicBool::new(false),
                turn_waiters: Mutex::new(Vec::new()),
                has_pending: AtomicBool::new(false),
                diverting: CachePadded::new(AtomicUsize::new(0)),
                metrics,
                breaker: self.breaker,
            }),
        })
    }
}

impl<T> Emitter<T> {
    /// The consumer's breaker.
    ///
    /// ```
    /// # use tailguard::{Breaker, dlq::DeadLetterQueue, emit::Emitter};
    /// let b = Breaker::builder().build()?;
    /// let e = Emitter::<u8>::builder(b.clone(), DeadLetterQueue::with_capacity(8)?).build()?;
    /// assert!(e.breaker().ptr_eq(&b));
    /// # Ok::<(), tailguard::ConfigError>(())
    /// ```
    pub fn breaker(&self) -> &Breaker {
        &self.inner.breaker
    }

    /// The bulkhead, if there is one.
    ///
    /// ```
    /// # use tailguard::{Breaker, dlq::DeadLetterQueue, emit::Emitter};
    /// let e = Emitter::<u8>::builder(Breaker::builder().build()?, DeadLetterQueue::with_capacity(8)?)
    ///     .bulkhead(4)?
    ///     .build()?;
    /// assert_eq!(e.bulkhead().unwrap().max_in_flight(), 4);
    /// # Ok::<(), tailguard::ConfigError>(())
    /// ```
    pub fn bulkhead(&self) -> Option<&Bulkhead> {
        self.inner.bulkhead.as_ref()
    }

    /// The call timeout.
    ///
    /// ```
    /// # use tailguard::{Breaker, dlq::DeadLetterQueue, emit::{Emitter, DEFAULT_TIMEOUT}};
    /// let e = Emitter::<u8>::builder(Breaker::builder().build()?, DeadLetterQueue::with_capacity(8)?).build()?;
    /// assert_eq!(e.timeout(), DEFAULT_TIMEOUT);
    /// # Ok::<(), tailguard::ConfigError>(())
    /// ```
    pub fn timeout(&self) -> Duration {
        self.inner.timeout
    }

    /// The emitter's queue, to read (its depth, capacity and per-class
    /// counters). Triggers go in through emits, or by hand through
    /// [`enqueue`](Self::enqueue), so that the emitter counts each one.
    ///
    /// ```
    /// # use tailguard::{Breaker, dlq::DeadLetterQueue, emit::Emitter};
    /// let e = Emitter::<u8>::builder(Breaker::builder().build()?, DeadLetterQueue::with_capacity(8)?).build()?;
    /// assert_eq!((e.queue().capacity(), e.queue().len()), (8, 0));
    /// # Ok::<(), tailguard::ConfigError>(())
    /// ```
    pub fn queue(&self) -> QueueView<'_, T> {
        QueueView {
            producer: &self.inner.producer,
        }
    }

    /// Queues `trigger` by hand, without calling the consumer (say the
    /// router knows the consumer is down for maintenance): counted in
    /// [`EmitterStats::queued_by_hand`], replayed and drained like a
    /// diverted trigger. A full queue makes room as an emit's diversion
    /// does: the oldest trigger of a lower class gives way and comes back
    /// in [`Pushed::Displaced`] (counted in `displaced`).
    ///
    /// # Errors
    /// The trigger itself, and why: [`HandBack::QueueFull`] (nothing below
    /// its class to give way) or [`HandBack::ShutDown`]. Nothing is counted
    /// then: the trigger never went in.
    ///
    /// ```
    /// # use tailguard::{Breaker, dlq::{DeadLetterQueue, Priority, Pushed}, emit::{Emitter, HandBack}};
    /// let e = Emitter::builder(Breaker::builder().build()?, DeadLetterQueue::with_capacity(1)?).build()?;
    /// assert!(matches!(e.enqueue("a", Priority::Routine), Ok(Pushed::Queued)));
    /// assert!(matches!(e.enqueue("b", Priority::Critical), Ok(Pushed::Displaced("a", Priority::Routine))));
    /// assert_eq!(e.enqueue("c", Priority::Critical).unwrap_err(), ("c", HandBack::QueueFull));
    /// let s = e.stats();
    /// assert_eq!((s.queued_by_hand, s.displaced, s.queued), (2, 1, 1));
    /// # Ok::<(), tailguard::ConfigError>(())
    /// ```
    pub fn enqueue(&self, trigger: T, class: Priority) -> Result<Pushed<T>, (T, HandBack)> {
        let inner = &*self.inner;
        let pushed = inner.enqueue(trigger, class)?;
        inner.metrics.count(Count::QueuedByHand);
        if let Pushed::Displaced(..) = pushed {
            inner.metrics.count(Count::Displaced);
        }
        Ok(pushed)
    }

    /// The queue's producer handle (for the registry's depth readings).
    #[cfg(not(tailguard_loom))]
    pub(crate) fn producer(&self) -> &Producer<T> {
        &self.inner.producer
    }

    /// Whether [`shutdown`](Self::shutdown) was called.
    ///
    /// ```
    /// # use tailguard::{Breaker, dlq::DeadLetterQueue, emit::Emitter};
    /// let e = Emitter::<u8>::builder(Breaker::builder().build()?, DeadLetterQueue::with_capacity(8)?).build()?;
    /// e.shutdown(|_, _| {});
    /// assert!(e.is_shut_down());
    /// # Ok::<(), tailguard::ConfigError>(())
    /// ```
    pub fn is_shut_down(&self) -> bool {
        self.inner.closed.load(Ordering::Acquire)
    }

    /// The emitter's counters now (see [`EmitterStats`]).
    ///
    /// ```
    /// # use tailguard::{Breaker, dlq::{DeadLetterQueue, Priority}, emit::Emitter};
    /// let e = Emitter::builder(Breaker::builder().build()?, DeadLetterQueue::with_capacity(8)?).build()?;
    /// let _ = e.emit_blocking(7u64, Priority::Routine, |_, _| Ok::<_, ()>(()));
    /// let s = e.stats();
    /// assert_eq!((s.delivered, s.emit_times.count()), (1, 1));
    /// # Ok::<(), tailguard::ConfigError>(())
    /// ```
    pub fn stats(&self) -> EmitterStats {
        let inner = &*self.inner;
        // The emit times before the outcomes (an emit counts its outcome
        // before its time, and each only goes up): a reading never times
        // more emits than it counts ended.
        let emit_times = inner.metrics.times();
        EmitterStats::read(
            |c| inner.metrics.sum(c),
            || {
                let pending = inner.has_pending.load(Ordering::Acquire);
                let queued = inner.producer.len();
                let bulkhead_in_flight = inner.bulkhead.as_ref().map_or(0, Bulkhead::in_flight);
                (queued, pending, emit_times, bulkhead_in_flight)
            },
        )
    }

    /// Stops queueing and hands every queued trigger (the one replay keeps
    /// at the head first, then the queue in [`pop`](DeadLetterQueue::pop)
    /// order) to `sink`; returns how many it handed over. From then on a
    /// trigger that is not delivered is handed back to its emitter
    /// ([`HandBack::ShutDown`]) instead of queued.
    ///
    /// Waits for diversions already past their check to finish their push
    /// (a few instructions each), so that no emit lands in the queue after
    /// the drain. The sink runs with no lock held (it may use this emitter).
    ///
    /// It does not wait for a running replay, blocking or async: that
    /// replay may be running on this very thread (`shutdown` called from
    /// its call), or suspended on it, and waiting would never let it
    /// finish. From the shutdown on, a replay queues nothing: it ends after
    /// the call in flight, whose trigger is delivered or handed back in its
    /// [`Replayed::handed_back`] (a failure, a timeout, a refusal by the
    /// breaker or the bulkhead alike). Only if that replay is dropped
    /// mid-call, or its call panics, is its trigger kept at the head again
    /// ([`EmitterStats::pending`]), for the next `drain` or `shutdown`.
    /// [`shutdown_async`](Self::shutdown_async) waits for any replay, and
    /// so leaves nothing behind.
    ///
    /// ```
    /// # use tailguard::{Breaker, dlq::{DeadLetterQueue, Priority}, emit::{Emitted, Emitter, HandBack}};
    /// let b = Breaker::builder().build()?;
    /// let e = Emitter::builder(b.clone(), DeadLetterQueue::with_capacity(8)?).build()?;
    /// b.trip_now();
    /// let _ = e.emit_blocking("a", Priority::Routine, |_, _| Ok::<_, ()>(()));
    /// let mut saved = Vec::new();
    /// assert_eq!(e.shutdown(|t, _| saved.push(t)), 1);
    /// assert_eq!(saved, ["a"]);
    /// let out = e.emit_blocking("b", Priority::Routine, |_, _| Ok::<_, ()>(()));
    /// assert!(matches!(out, Emitted::HandedBack { trigger: "b", not_queued: HandBack::ShutDown, .. }));
    /// # Ok::<(), tailguard::ConfigError>(())
    /// ```
    pub fn shutdown(&self, mut sink: impl FnMut(T, Priority)) -> usize {
        let inner = &*self.inner;
        inner.close();
        inner.drain_each(usize::MAX, &mut sink)
    }

    /// As [`shutdown`](Self::shutdown), and first waits (without blocking
    /// the thread) for a running replay, blocking or async, to end: then
    /// whatever that replay kept at the head (a call that panicked, a
    /// replay dropped mid-call) is drained too, and nothing is left behind.
    /// No replay starts while it drains ([`ReplayStop::Busy`]). Needs no
    /// particular runtime.
    ///
    /// ```
    /// # use tailguard::{Breaker, dlq::{DeadLetterQueue, Priority}, emit::Emitter};
    /// # let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    /// # rt.block_on(async {
    /// let b = Breaker::builder().build()?;
    /// let e = Emitter::builder(b.clone(), DeadLetterQueue::with_capacity(8)?).build()?;
    /// b.trip_now();
    /// let _ = e.emit_blocking("a", Priority::Routine, |_, _| Ok::<_, ()>(()));
    /// let mut saved = Vec::new();
    /// assert_eq!(e.shutdown_async(|t, _| saved.push(t)).await, 1);
    /// assert_eq!(saved, ["a"]);
    /// # Ok::<(), tailguard::ConfigError>(())
    /// # }).unwrap();
    /// ```
    pub async fn shutdown_async(&self, mut sink: impl FnMut(T, Priority)) -> usize {
        let inner = &*self.inner;
        inner.close();
        let _turn = TakeTurn { inner }.await;
        inner.drain_each(usize::MAX, &mut sink)
    }

    /// Hands up to `max` queued triggers to `sink` (the one replay keeps at
    /// the head first, then the queue in [`pop`](DeadLetterQueue::pop)
    /// order) without shutting down: to move a backlog elsewhere (a
    /// persistent store, another region) instead of replaying it. Returns
    /// how many it handed over. The sink runs with no lock held; a replay
    /// running meanwhile takes its triggers from the same head, so each
    /// goes one way only. While it runs, [`EmitterStats::drained`] moves in
    /// steps of up to 64 (exact once it returns, or unwinds from a
    /// panicking sink).
    ///
    /// ```
    /// # use tailguard::{Breaker, dlq::{DeadLetterQueue, Priority}, emit::Emitter};
    /// let b = Breaker::builder().build()?;
    /// let e = Emitter::builder(b.clone(), DeadLetterQueue::with_capacity(8)?).build()?;
    /// b.trip_now();
    /// for i in 0..3 {
    ///     let _ = e.emit_blocking(i, Priority::Routine, |_, _| Ok::<_, ()>(()));
    /// }
    /// let mut moved = Vec::new();
    /// assert_eq!(e.drain(2, |t, _| moved.push(t)), 2);
    /// assert_eq!((moved, e.stats().queued, e.stats().drained), (vec![0, 1], 1, 2));
    /// # Ok::<(), tailguard::ConfigError>(())
    /// ```
    pub fn drain(&self, max: usize, mut sink: impl FnMut(T, Priority)) -> usize {
        let inner = &*self.inner;
        inner.drain_each(max, &mut sink)
    }

    /// Bytes of heap this emitter holds besides its breaker and queue (its
    /// per-thread counters).
    ///
    /// ```
    /// # use tailguard::{Breaker, dlq::DeadLetterQueue, emit::Emitter};
    /// let e = Emitter::<u8>::builder(Breaker::builder().build()?, DeadLetterQueue::with_capacity(8)?).build()?;
    /// assert!(e.memory_bytes() > 0);
    /// # Ok::<(), tailguard::ConfigError>(())
    /// ```
    pub fn memory_bytes(&self) -> usize {
        core::mem::size_of::<Inner<T>>() + self.inner.metrics.heap_bytes()
    }
}

impl<T> Inner<T> {
    /// Queues `trigger` unless the emitter is shut down; counts nothing.
    #[inline]
    pub(super) fn enqueue(&self, trigger: T, class: Priority) -> Result<Pushed<T>, (T, HandBack)> {
        if !self.closed.load(Ordering::Acquire) {
            self.diverting.fetch_add(1, Ordering::Relaxed);
            fence(Ordering::SeqCst); // see `shutdown`
            if !self.closed.load(Ordering::Relaxed) {
                let pushed = self.producer.push(trigger, class);
                self.diverting.fetch_sub(1, Ordering::Release);
                return pushed.map_err(|Full(trigger)| (trigger, HandBack::QueueFull));
            }
            self.diverting.fetch_sub(1, Ordering::Release);
        }
        Err((trigger, HandBack::ShutDown))
    }

    /// Stops queueing: sets `closed`, then waits for the diversions
    /// already past their check of it to finish their push.
    fn close(&self) {
        self.closed.store(true, Ordering::Relaxed);
        // Store-load on both sides, each side's pair split by a SeqCst fence
        // (Dekker): a diversion raises `diverting` before it reads `closed`,
        // we set `closed` before we read `diverting`; so either it sees
        // `closed` and hands its trigger back, or we see it here and wait
        // (Acquire, against its Release decrement) until its push landed.
        fence(Ordering::SeqCst);
        let mut backoff = 0;
        while self.diverting.load(Ordering::Acquire) != 0 {
            crate::sync::spin(&mut backoff);
        }
    }

    /// Hands up to `max` triggers, head first, to `sink`: each taken out
    /// under a brief lock, and handed over with no lock held (the sink may
    /// queue, replay or drain this emitter).
    fn drain_each(&self, max: usize, sink: &mut impl FnMut(T, Priority)) -> usize {
        /// The drained count, added in batches (and whatever is left when
        /// the drain ends, a panicking sink's unwinding included): one
        /// counter update per 64 items instead of one each.
        struct Drained<'a> {
            metrics: &'a Metrics,
            batch: u64,
        }
        impl Drop for Drained<'_> {
            fn drop(&mut self) {
                if self.batch != 0 {
                    self.metrics.add(Count::Drained, self.batch);
                }
            }
        }
        let mut counted = Drained {
            metrics: &self.metrics,
            batch: 0,
        };
        let mut n = 0;
        while n < max {
            let Some(p) = self.take_next() else { break };
            n += 1;
            counted.batch += 1;
            if counted.batch == 64 {
                self.metrics.add(Count::Drained, 64);
                counted.batch = 0;
            }
            sink(p.trigger, p.class);
        }
        n
    }
}

/// A read-only view of an emitter's queue, from [`Emitter::queue`].
///
/// ```
/// use tailguard::{Breaker, dlq::{DeadLetterQueue, Priority}, emit::Emitter};
/// let e = Emitter::builder(Breaker::builder().build()?, DeadLetterQueue::with_capacity(8)?).build()?;
/// let _ = e.enqueue(1u8, Priority::Critical);
/// let q = e.queue();
/// assert_eq!((q.len(), q.capacity()), (1, 8));
/// # Ok::<(), tailguard::ConfigError>(())
/// ```
pub struct QueueView<'a, T> {
    producer: &'a Producer<T>,
}

impl<T> QueueView<'_, T> {
    /// Triggers in the queue now.
    ///
    /// ```
    /// # use tailguard::{Breaker, dlq::{DeadLetterQueue, Priority}, emit::Emitter};
    /// let e = Emitter::builder(Breaker::builder().build()?, DeadLetterQueue::with_capacity(8)?).build()?;
    /// let _ = e.enqueue(1u8, Priority::Idle);
    /// assert_eq!(e.queue().len(), 1);
    /// # Ok::<(), tailguard::ConfigError>(())
    /// ```
    pub fn len(&self) -> usize {
        self.producer.len()
    }

    /// Whether the queue is empty now.
    ///
    /// ```
    /// # use tailguard::{Breaker, dlq::DeadLetterQueue, emit::Emitter};
    /// let e = Emitter::<u8>::builder(Breaker::builder().build()?, DeadLetterQueue::with_capacity(8)?).build()?;
    /// assert!(e.queue().is_empty());
    /// # Ok::<(), tailguard::ConfigError>(())
    /// ```
    pub fn is_empty(&self) -> bool {
        self.producer.is_empty()
    }

    /// The queue's capacity.
    ///
    /// ```
    /// # use tailguard::{Breaker, dlq::DeadLetterQueue, emit::Emitter};
    /// let e = Emitter::<u8>::builder(Breaker::builder().build()?, DeadLetterQueue::with_capacity(8)?).build()?;
    /// assert_eq!(e.queue().capacity(), 8);
    /// # Ok::<(), tailguard::ConfigError>(())
    /// ```
    pub fn capacity(&self) -> usize {
        self.producer.capacity()
    }

    /// Triggers of each class in the queue now.
    ///
    /// ```
    /// # use tailguard::{Breaker, dlq::{DeadLetterQueue, Priority}, emit::Emitter};
    /// let e = Emitter::builder(Breaker::builder().build()?, DeadLetterQueue::with_capacity(8)?).build()?;
    /// let _ = e.enqueue(1u8, Priority::Critical);
    /// assert_eq!(e.queue().fallback_depth().class(Priority::Critical), 1);
    /// # Ok::<(), tailguard::ConfigError>(())
    /// ```
    pub fn fallback_depth(&self) -> FallbackDepth {
        self.producer.fallback_depth()
    }

    /// The queue's per-class counters (see [`Stats`]).
    ///
    /// ```
    /// # use tailguard::{Breaker, dlq::{DeadLetterQueue, Priority}, emit::Emitter};
    /// let e = Emitter::builder(Breaker::builder().build()?, DeadLetterQueue::with_capacity(8)?).build()?;
    /// let _ = e.enqueue(1u8, Priority::Routine);
    /// assert_eq!(e.queue().stats().class(Priority::Routine).queued, 1);
    /// # Ok::<(), tailguard::ConfigError>(())
    /// ```
    pub fn stats(&self) -> Stats {
        self.producer.stats()
    }
}

impl<T> fmt::Debug for QueueView<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QueueView")
            .field("len", &self.len())
            .field("capacity", &self.capacity())
            .finish()
    }
}

impl<T> fmt::Debug for Emitter<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Emitter")
            .field("breaker", &self.inner.breaker)
            .field("bulkhead", &self.inner.bulkhead)
            .field("timeout", &self.inner.timeout)
            .field("queued", &self.inner.producer.len())
            .field("shut_down", &self.is_shut_down())
            .finish_non_exhaustive()
    }
}
