//! The per-core emitter, [`LocalEmitter`]: the shared emitter's emit path
//! over a breaker's `LocalHandle`, with cells and single-writer counters
//! instead of shared atomics; its outcomes and replay come from the code
//! both emitters share (`call.rs`, `replay.rs`), over [`Host`].

use super::call::{Host, NotAdmitted};
use super::metrics::{Count, LocalMetrics};
use super::pending::{head_first, Pending};
use super::{Deadline, Emitted, EmitterBuilder, EmitterStats, HandBack, QueueView, Replayed};
use crate::breaker::Breaker;
use crate::dlq::{DeadLetterQueue, Priority, Producer, Pushed};
use crate::error::{ConfigError, ConfigErrorKind};
use crate::sync::{Arc, AtomicUsize, Ordering};
use crate::{LocalHandle, LocalPermit};
use core::cell::Cell;
use core::fmt;
use std::time::Duration;

/// One consumer's emit path on one core: the emit path of [`Emitter`](super::Emitter) for a
/// thread-per-core server, where one core owns its consumers' emitters
/// (each over a breaker's [`LocalHandle`], its own queue, its own bulkhead
/// bound) and nothing on the emit path is written by another core.
///
/// What an emit touches, and who writes it:
///
/// | what | written by | how |
/// |---|---|---|
/// | breaker's state word | transitions (a tick, a trip, a probe) | one `Acquire` load per emit while CLOSED |
/// | breaker's local shard | this core only ([`LocalHandle`]) | plain loads and stores |
/// | bulkhead's in-flight count | this core only | a `Relaxed` load and store, no read-modify-write |
/// | the emitter's counters | this core only | `Relaxed` load and store each |
/// | the queue (on a diversion) | this core only | the ring's CAS on a word no other core writes |
///
/// (One exception, opt-in: a breaker built with
/// [`track_in_flight(true)`](crate::BreakerBuilder::track_in_flight) keeps
/// its table of calls in flight on its shared shards, entered and left with
/// read-modify-writes; leave it off, the default, on a per-core breaker.)
///
/// What another core may see of it, and why that is safe:
///
/// - The breaker's state word (and, while OPEN, its deadline) is shared by
///   every handle of the breaker, whichever core holds it: it is the
///   breaker's existing, loom-checked protocol (an emit only loads it while
///   CLOSED; the OPEN → HALF_OPEN race and the probe slots are CASes there,
///   as for any `allow`). A core that owns its breaker outright
///   (`local_handles(1)`, one handle) shares it with nobody but its own
///   tick. Nothing new is shared, so no new protocol: no loom model of its
///   own.
/// - The counters, the in-flight count and the has-a-trigger-at-the-head
///   flag are single-writer atomics: a [`LocalStatsReader`] on another
///   thread (a scrape) reads each with a `Relaxed` load and sees a value the
///   core stored (never a torn one), each only ever going up; like the
///   shared emitter's, the identities hold once the emitter is quiet.
///
/// Cost (callgrind, `benches/instructions.rs`): 132 instructions per
/// delivered emit with a bulkhead on the coarse clock, 262 per diverted
/// one (queue drained every 512), against 161 and 312.5 for the shared
/// [`Emitter`](super::Emitter).
///
/// Its outcomes ([`Emitted`], [`Divert`](super::Divert), [`Replayed`]), its
/// counters ([`EmitterStats`]) and their identities are the shared
/// emitter's, from the same code: what an emit's call ends in, and replay's
/// whole policy (the head kept first, attempts bounded by
/// [`replay_attempts`](super::EmitterBuilder::replay_attempts), nothing
/// reordered within a class), are written once for both.
///
/// ```
/// use std::time::Duration;
/// use tailguard::dlq::{DeadLetterQueue, Priority};
/// use tailguard::emit::{Emitted, LocalEmitter};
/// use tailguard::Breaker;
///
/// // On each core: its own breaker (or a handle of a shared one), queue and emitter.
/// let breaker = Breaker::builder().ticker(false).local_handles(1).build()?;
/// let pricing = LocalEmitter::builder(breaker.clone(), DeadLetterQueue::with_capacity(1024)?)
///     .bulkhead(64)?
///     .timeout(Duration::from_millis(200))?
///     .build_local()?;
/// let out = pricing.emit_blocking(17u64, Priority::Critical, |id, _deadline| Ok::<_, ()>(*id));
/// assert!(matches!(out, Emitted::Delivered(17)));
///
/// breaker.trip_now();
/// let out = pricing.emit_blocking(18, Priority::Critical, |_, _| Ok::<_, ()>(0));
/// assert!(matches!(out, Emitted::Diverted { .. }));
/// breaker.reset();
/// assert_eq!(pricing.replay_blocking(100, |_, _| Ok::<_, ()>(())).delivered, 1);
///
/// // A scrape on another thread reads the core's counters.
/// let reader = pricing.stats_reader();
/// let s = std::thread::spawn(move || reader.read()).join().unwrap();
/// assert_eq!((s.delivered, s.replayed), (1, 1));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// Async on the core's own executor: [`emit_with`](Self::emit_with) and
/// [`replay_with`](Self::replay_with) take the deadline's sleep from a
/// [`Timer`](crate::timer::Timer) of that runtime (glommio, monoio, a
/// current-thread tokio with [`emit`](Self::emit)); their futures borrow
/// the emitter and are not `Send`, so they stay on its core, and many may
/// be in flight at once within the core's bulkhead.
///
/// Built from the same builder as the shared emitter
/// ([`EmitterBuilder::build_local`]). It may be moved to its core once
/// built (it is `Send` when its triggers are), but it cannot be shared
/// between threads:
///
/// ```compile_fail
/// fn is_sync<T: Sync>() {}
/// is_sync::<tailguard::emit::LocalEmitter<u64>>();
/// ```
///
/// ```
/// use tailguard::{Breaker, dlq::{DeadLetterQueue, Priority}, emit::{Emitted, LocalEmitter}};
///
/// let b = Breaker::builder().local_handles(1).build()?;
/// let e = LocalEmitter::builder(b, DeadLetterQueue::with_capacity(64)?).build_local()?;
/// let core = std::thread::spawn(move || {
///     match e.emit_blocking("order-1", Priority::Critical, |_, _| Ok::<_, std::io::Error>(())) {
///         Emitted::Delivered(()) => {}
///         Emitted::Diverted { displaced, .. } => drop(displaced),
///         Emitted::HandedBack { trigger, .. } => drop(trigger),
///     }
///     e.stats().delivered
/// });
/// assert_eq!(core.join().unwrap(), 1);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct LocalEmitter<T> {
    handle: LocalHandle,
    breaker: Breaker,
    /// The bulkhead's bound (`None`: no bulkhead); its count is
    /// `metrics.in_flight`.
    max_in_flight: Option<usize>,
    timeout: Duration,
    timeout_ns: u64,
    replay_attempts: u32,
    queue: DeadLetterQueue<T>,
    /// A producer of `queue`, for [`QueueView`] and [`LocalStatsReader`]
    /// (this core pushes through `queue` itself).
    producer: Producer<T>,
    /// The trigger replay keeps at the head.
    pending: Cell<Option<Pending<T>>>,
    /// Set by shutdown: nothing is queued any more.
    closed: Cell<bool>,
    /// A replay is running (a call may replay again: that one is `Busy`).
    replaying: Cell<bool>,
    metrics: Arc<LocalMetrics>,
}

/// A bulkhead slot of a [`LocalEmitter`], given back when dropped.
pub(super) struct LocalSlot<'a>(&'a AtomicUsize);

impl Drop for LocalSlot<'_> {
    #[inline]
    fn drop(&mut self) {
        // Single writer: this core.
        let n = self.0.load(Ordering::Relaxed);
        self.0.store(n - 1, Ordering::Relaxed);
    }
}

/// The replay turn of a [`LocalEmitter`], given back when dropped.
pub(super) struct LocalTurn<'a>(&'a Cell<bool>);

impl Drop for LocalTurn<'_> {
    fn drop(&mut self) {
        self.0.set(false);
    }
}

impl<T> EmitterBuilder<T> {
    /// Builds a [`LocalEmitter`] instead of an [`Emitter`](super::Emitter):
    /// the same settings, over a [`LocalHandle`] it takes from the breaker
    /// (reserve them with [`local_handles`](crate::BreakerBuilder::local_handles)),
    /// with a bulkhead of its own (a count only this core writes).
    ///
    /// # Errors
    /// A [`ConfigError`] for `"local_handles"` when every local shard of
    /// the breaker is taken (or none was reserved), and for `"bulkhead"`
    /// when the bulkhead is [shared](Self::shared_bulkhead): a bound other
    /// cores also take is a line they write.
    ///
    /// ```
    /// use tailguard::{Breaker, Bulkhead, dlq::DeadLetterQueue, emit::LocalEmitter};
    ///
    /// let b = Breaker::builder().local_handles(1).build()?;
    /// let core0 = LocalEmitter::<u64>::builder(b.clone(), DeadLetterQueue::with_capacity(8)?).build_local()?;
    /// // The breaker's one local shard is core 0's now.
    /// let err = LocalEmitter::<u64>::builder(b.clone(), DeadLetterQueue::with_capacity(8)?)
    ///     .build_local()
    ///     .unwrap_err();
    /// assert_eq!(err.field(), "local_handles");
    /// drop(core0);
    /// let err = LocalEmitter::<u64>::builder(b, DeadLetterQueue::with_capacity(8)?)
    ///     .shared_bulkhead(Bulkhead::new(4)?)
    ///     .build_local()
    ///     .unwrap_err();
    /// assert_eq!(err.field(), "bulkhead");
    /// # Ok::<(), tailguard::ConfigError>(())
    /// ```
    pub fn build_local(self) -> Result<LocalEmitter<T>, ConfigError> {
        if self.shared_bulkhead {
            return Err(ConfigError::new(
                "bulkhead",
                ConfigErrorKind::Inconsistent,
                "a per-core emitter's bulkhead is its own: set it with bulkhead(n), not shared_bulkhead",
            ));
        }
        let handle = self.breaker.local_handle().map_err(|_| {
            ConfigError::new(
                "local_handles",
                ConfigErrorKind::Inconsistent,
                "the breaker has no free local shard for a per-core emitter: reserve one per core with local_handles(n)",
            )
        })?;
        let metrics = LocalMetrics::new();
        // Triggers already in the queue came in by hand, as for `build`.
        metrics.add(Count::QueuedByHand, self.queue.len() as u64);
        Ok(LocalEmitter {
            handle,
            max_in_flight: self.bulkhead.as_ref().map(crate::Bulkhead::max_in_flight),
            timeout_ns: crate::clock::duration_nanos_saturating(self.timeout),
            timeout: self.timeout,
            replay_attempts: self.replay_attempts,
            producer: self.queue.producer(),
            queue: self.queue,
            pending: Cell::new(None),
            closed: Cell::new(false),
            replaying: Cell::new(false),
            metrics: Arc::new(metrics),
            breaker: self.breaker,
        })
    }
}

impl<T> LocalEmitter<T> {
    /// A builder for the per-core emitter of the consumer behind `breaker`,
    /// diverting into `queue` (this core's): the shared emitter's builder
    /// ([`Emitter::builder`](super::Emitter::builder)), finished with
    /// [`build_local`](EmitterBuilder::build_local).
    ///
    /// ```
    /// # use tailguard::{Breaker, dlq::DeadLetterQueue, emit::LocalEmitter};
    /// let b = Breaker::builder().local_handles(1).build()?;
    /// let e: LocalEmitter<String> = LocalEmitter::builder(b, DeadLetterQueue::with_capacity(64)?).build_local()?;
    /// # drop(e);
    /// # Ok::<(), tailguard::ConfigError>(())
    /// ```
    pub fn builder(breaker: Breaker, queue: DeadLetterQueue<T>) -> EmitterBuilder<T> {
        super::Emitter::builder(breaker, queue)
    }

    /// As [`Emitter::emit_blocking`](super::Emitter::emit_blocking), on
    /// this core: breaker (through the local handle), bulkhead, then
    /// `call(&trigger, &deadline)`; a trigger not delivered is queued or
    /// handed back. A call returning after its deadline counts as timed out
    /// (an `Ok` is still delivered, counted in `overran`); a call that
    /// panics has its trigger queued (as failed) before the panic goes on,
    /// or, if the queue cannot take it, dropped and counted in
    /// `cancelled` and `dropped_in_panics`.
    ///
    /// ```
    /// use tailguard::{Breaker, dlq::{DeadLetterQueue, Priority}, emit::{Divert, Emitted, LocalEmitter}};
    ///
    /// let b = Breaker::builder().local_handles(1).build()?;
    /// let e = LocalEmitter::builder(b, DeadLetterQueue::with_capacity(8)?).build_local()?;
    /// let out = e.emit_blocking(5u32, Priority::Routine, |n, _| if *n > 3 { Err("too big") } else { Ok(*n) });
    /// assert!(matches!(out, Emitted::Diverted { reason: Divert::Failed("too big"), displaced: None }));
    /// # Ok::<(), tailguard::ConfigError>(())
    /// ```
    #[inline]
    pub fn emit_blocking<O, E>(
        &self,
        trigger: T,
        class: Priority,
        call: impl FnOnce(&T, &Deadline<'_>) -> Result<O, E>,
    ) -> Emitted<T, O, E> {
        super::blocking::emit_blocking_on(self, trigger, class, call)
    }

    /// As [`Emitter::replay_blocking`](super::Emitter::replay_blocking), on
    /// this core, with the same policy (the same code): if the breaker is
    /// CLOSED, up to `max` queued triggers, the one kept at the head first,
    /// then in [`pop`](DeadLetterQueue::pop) order; it stops at the first
    /// not delivered, which stays at the head (so nothing of its class
    /// overtakes it) until its
    /// [`replay_attempts`](EmitterBuilder::replay_attempts)-th failed call
    /// hands it back. A replay started from within a replay's call returns
    /// [`ReplayStop::Busy`](super::ReplayStop::Busy).
    ///
    /// ```
    /// use tailguard::{Breaker, dlq::{DeadLetterQueue, Priority}, emit::{LocalEmitter, ReplayStop}};
    ///
    /// let b = Breaker::builder().local_handles(1).build()?;
    /// let e = LocalEmitter::builder(b.clone(), DeadLetterQueue::with_capacity(8)?).build_local()?;
    /// b.trip_now();
    /// for i in 0..3 {
    ///     let _ = e.emit_blocking(i, Priority::Routine, |_, _| Ok::<_, ()>(()));
    /// }
    /// b.reset();
    /// let mut seen = Vec::new();
    /// let r = e.replay_blocking(10, |i, _| if *i == 1 && seen.len() == 1 { Err(()) } else { seen.push(*i); Ok(()) });
    /// assert!(matches!(r.stopped, Some(ReplayStop::Failed(_)))); // 1 failed: kept first
    /// let r = e.replay_blocking(10, |i, _| { seen.push(*i); Ok::<_, ()>(()) });
    /// assert_eq!((r.delivered, seen), (2, vec![0, 1, 2]));
    /// # Ok::<(), tailguard::ConfigError>(())
    /// ```
    pub fn replay_blocking<O, E>(
        &self,
        max: usize,
        call: impl FnMut(&T, &Deadline<'_>) -> Result<O, E>,
    ) -> Replayed<T, E> {
        super::blocking::replay_blocking_on(self, max, call)
    }

    /// As [`Emitter::enqueue`](super::Emitter::enqueue): queues `trigger`
    /// by hand, counted in `queued_by_hand`.
    ///
    /// # Errors
    /// The trigger itself, and why ([`HandBack`]); nothing is counted.
    ///
    /// ```
    /// # use tailguard::{Breaker, dlq::{DeadLetterQueue, Priority, Pushed}, emit::{HandBack, LocalEmitter}};
    /// let b = Breaker::builder().local_handles(1).build()?;
    /// let e = LocalEmitter::builder(b, DeadLetterQueue::with_capacity(1)?).build_local()?;
    /// assert!(matches!(e.enqueue("a", Priority::Routine), Ok(Pushed::Queued)));
    /// assert_eq!(e.enqueue("b", Priority::Routine).unwrap_err(), ("b", HandBack::QueueFull));
    /// # Ok::<(), tailguard::ConfigError>(())
    /// ```
    pub fn enqueue(&self, trigger: T, class: Priority) -> Result<Pushed<T>, (T, HandBack)> {
        let pushed = Host::enqueue(self, trigger, class)?;
        self.metrics.count(Count::QueuedByHand);
        if let Pushed::Displaced(..) = pushed {
            self.metrics.count(Count::Displaced);
        }
        Ok(pushed)
    }

    /// As [`Emitter::drain`](super::Emitter::drain): hands up to `max`
    /// queued triggers (the one kept at the head first) to `sink`, without
    /// shutting down; returns how many.
    ///
    /// ```
    /// # use tailguard::{Breaker, dlq::{DeadLetterQueue, Priority}, emit::LocalEmitter};
    /// let b = Breaker::builder().local_handles(1).build()?;
    /// let e = LocalEmitter::builder(b, DeadLetterQueue::with_capacity(8)?).build_local()?;
    /// let _ = e.enqueue(1, Priority::Routine);
    /// let mut moved = Vec::new();
    /// assert_eq!(e.drain(10, |t, _| moved.push(t)), 1);
    /// assert_eq!((moved, e.stats().drained), (vec![1], 1));
    /// # Ok::<(), tailguard::ConfigError>(())
    /// ```
    pub fn drain(&self, max: usize, mut sink: impl FnMut(T, Priority)) -> usize {
        let mut n = 0;
        while n < max {
            let Some(p) = self.take_next() else { break };
            n += 1;
            self.metrics.count(Count::Drained);
            sink(p.trigger, p.class);
        }
        n
    }

    /// As [`Emitter::shutdown`](super::Emitter::shutdown): stops queueing
    /// and hands every queued trigger (the one kept at the head first) to
    /// `sink`; returns how many. From then on a trigger not delivered is
    /// handed back ([`HandBack::ShutDown`]), and a replay running (this
    /// was called from its call) hands back the trigger it holds instead of
    /// keeping it. Nothing to wait for: only this core queues.
    ///
    /// ```
    /// # use tailguard::{Breaker, dlq::{DeadLetterQueue, Priority}, emit::{Emitted, HandBack, LocalEmitter}};
    /// let b = Breaker::builder().local_handles(1).build()?;
    /// let e = LocalEmitter::builder(b.clone(), DeadLetterQueue::with_capacity(8)?).build_local()?;
    /// b.trip_now();
    /// let _ = e.emit_blocking("a", Priority::Routine, |_, _| Ok::<_, ()>(()));
    /// let mut saved = Vec::new();
    /// assert_eq!(e.shutdown(|t, _| saved.push(t)), 1);
    /// let out = e.emit_blocking("b", Priority::Routine, |_, _| Ok::<_, ()>(()));
    /// assert!(matches!(out, Emitted::HandedBack { not_queued: HandBack::ShutDown, .. }));
    /// assert_eq!(saved, ["a"]);
    /// # Ok::<(), tailguard::ConfigError>(())
    /// ```
    pub fn shutdown(&self, sink: impl FnMut(T, Priority)) -> usize {
        self.closed.set(true);
        self.drain(usize::MAX, sink)
    }

    /// Whether [`shutdown`](Self::shutdown) was called.
    ///
    /// ```
    /// # use tailguard::{Breaker, dlq::DeadLetterQueue, emit::LocalEmitter};
    /// let b = Breaker::builder().local_handles(1).build()?;
    /// let e = LocalEmitter::<u8>::builder(b, DeadLetterQueue::with_capacity(8)?).build_local()?;
    /// e.shutdown(|_, _| {});
    /// assert!(e.is_shut_down());
    /// # Ok::<(), tailguard::ConfigError>(())
    /// ```
    pub fn is_shut_down(&self) -> bool {
        self.closed.get()
    }

    /// The emitter's counters now (see [`EmitterStats`]), read on its core;
    /// from another thread, through a [`stats_reader`](Self::stats_reader).
    ///
    /// ```
    /// # use tailguard::{Breaker, dlq::{DeadLetterQueue, Priority}, emit::LocalEmitter};
    /// let b = Breaker::builder().local_handles(1).build()?;
    /// let e = LocalEmitter::builder(b, DeadLetterQueue::with_capacity(8)?).build_local()?;
    /// let _ = e.emit_blocking(7u64, Priority::Routine, |_, _| Ok::<_, ()>(()));
    /// let s = e.stats();
    /// assert_eq!((s.delivered, s.emit_times.count(), s.emitted()), (1, 1, 1));
    /// # Ok::<(), tailguard::ConfigError>(())
    /// ```
    pub fn stats(&self) -> EmitterStats {
        read_stats(&self.metrics, &self.producer)
    }

    /// A reader of this emitter's counters for another thread (a scrape):
    /// `Send` and `Sync`, it only loads what this core stores.
    ///
    /// ```
    /// # use tailguard::{Breaker, dlq::{DeadLetterQueue, Priority}, emit::LocalEmitter};
    /// let b = Breaker::builder().local_handles(1).build()?;
    /// let e = LocalEmitter::builder(b, DeadLetterQueue::with_capacity(8)?).build_local()?;
    /// let reader = e.stats_reader();
    /// let _ = e.emit_blocking(7u64, Priority::Routine, |_, _| Ok::<_, ()>(()));
    /// assert_eq!(std::thread::spawn(move || reader.read().delivered).join().unwrap(), 1);
    /// # Ok::<(), tailguard::ConfigError>(())
    /// ```
    pub fn stats_reader(&self) -> LocalStatsReader<T> {
        LocalStatsReader {
            metrics: Arc::clone(&self.metrics),
            producer: self.producer.clone(),
        }
    }

    /// The consumer's breaker.
    ///
    /// ```
    /// # use tailguard::{Breaker, dlq::DeadLetterQueue, emit::LocalEmitter};
    /// let b = Breaker::builder().local_handles(1).build()?;
    /// let e = LocalEmitter::<u8>::builder(b.clone(), DeadLetterQueue::with_capacity(8)?).build_local()?;
    /// assert!(e.breaker().ptr_eq(&b));
    /// # Ok::<(), tailguard::ConfigError>(())
    /// ```
    pub fn breaker(&self) -> &Breaker {
        &self.breaker
    }

    /// The bulkhead's bound, if there is one.
    ///
    /// ```
    /// # use tailguard::{Breaker, dlq::DeadLetterQueue, emit::LocalEmitter};
    /// let b = Breaker::builder().local_handles(1).build()?;
    /// let e = LocalEmitter::<u8>::builder(b, DeadLetterQueue::with_capacity(8)?).bulkhead(4)?.build_local()?;
    /// assert_eq!(e.max_in_flight(), Some(4));
    /// # Ok::<(), tailguard::ConfigError>(())
    /// ```
    pub fn max_in_flight(&self) -> Option<usize> {
        self.max_in_flight
    }

    /// The call timeout.
    ///
    /// ```
    /// # use tailguard::{Breaker, dlq::DeadLetterQueue, emit::{LocalEmitter, DEFAULT_TIMEOUT}};
    /// let b = Breaker::builder().local_handles(1).build()?;
    /// let e = LocalEmitter::<u8>::builder(b, DeadLetterQueue::with_capacity(8)?).build_local()?;
    /// assert_eq!(e.timeout(), DEFAULT_TIMEOUT);
    /// # Ok::<(), tailguard::ConfigError>(())
    /// ```
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The queue's producer handle (for the registry's depth readings).
    #[cfg(not(tailguard_loom))]
    pub(crate) fn producer(&self) -> &Producer<T> {
        &self.producer
    }

    /// The emitter's queue, to read (depth, capacity, per-class counters).
    ///
    /// ```
    /// # use tailguard::{Breaker, dlq::{DeadLetterQueue, Priority}, emit::LocalEmitter};
    /// let b = Breaker::builder().local_handles(1).build()?;
    /// let e = LocalEmitter::builder(b, DeadLetterQueue::with_capacity(8)?).build_local()?;
    /// let _ = e.enqueue(1u8, Priority::Critical);
    /// assert_eq!((e.queue().len(), e.queue().capacity()), (1, 8));
    /// # Ok::<(), tailguard::ConfigError>(())
    /// ```
    pub fn queue(&self) -> QueueView<'_, T> {
        QueueView {
            producer: &self.producer,
        }
    }
}

fn read_stats<T>(metrics: &LocalMetrics, producer: &Producer<T>) -> EmitterStats {
    // The emit times before the outcomes, as the shared emitter reads them.
    let emit_times = metrics.times();
    EmitterStats::read(
        |c| metrics.sum(c),
        || {
            (
                producer.len(),
                metrics.pending.load(Ordering::Relaxed),
                emit_times,
                metrics.in_flight.load(Ordering::Relaxed),
            )
        },
    )
}

/// Reads a [`LocalEmitter`]'s counters from any thread: from
/// [`LocalEmitter::stats_reader`]. Cheap to clone.
///
/// ```
/// # use tailguard::{Breaker, dlq::{DeadLetterQueue, Priority}, emit::LocalEmitter};
/// let b = Breaker::builder().local_handles(1).build()?;
/// let e = LocalEmitter::builder(b.clone(), DeadLetterQueue::with_capacity(8)?).build_local()?;
/// let reader = e.stats_reader();
/// b.trip_now();
/// let _ = e.emit_blocking(1u8, Priority::Routine, |_, _| Ok::<_, ()>(()));
/// let s = reader.read();
/// assert_eq!((s.diverted_open, s.queued), (1, 1));
/// # Ok::<(), tailguard::ConfigError>(())
/// ```
pub struct LocalStatsReader<T> {
    metrics: Arc<LocalMetrics>,
    producer: Producer<T>,
}

impl<T> LocalStatsReader<T> {
    /// The emitter's counters now (see [`EmitterStats`]); as for the
    /// shared emitter, the identities hold once the emitter is quiet.
    ///
    /// ```
    /// # use tailguard::{Breaker, dlq::DeadLetterQueue, emit::LocalEmitter};
    /// let b = Breaker::builder().local_handles(1).build()?;
    /// let e = LocalEmitter::<u8>::builder(b, DeadLetterQueue::with_capacity(8)?).build_local()?;
    /// assert_eq!(e.stats_reader().read(), e.stats());
    /// # Ok::<(), tailguard::ConfigError>(())
    /// ```
    pub fn read(&self) -> EmitterStats {
        read_stats(&self.metrics, &self.producer)
    }
}

impl<T> Clone for LocalStatsReader<T> {
    fn clone(&self) -> Self {
        Self {
            metrics: Arc::clone(&self.metrics),
            producer: self.producer.clone(),
        }
    }
}

impl<T> fmt::Debug for LocalStatsReader<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LocalStatsReader").finish_non_exhaustive()
    }
}

impl<T> fmt::Debug for LocalEmitter<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LocalEmitter")
            .field("breaker", &self.breaker)
            .field("max_in_flight", &self.max_in_flight)
            .field("timeout", &self.timeout)
            .field("queued", &self.producer.len())
            .field("shut_down", &self.closed.get())
            .finish_non_exhaustive()
    }
}

impl<T> Host<T> for LocalEmitter<T> {
    type Permit<'a>
        = LocalPermit<'a>
    where
        Self: 'a;
    type Slot<'a>
        = LocalSlot<'a>
    where
        Self: 'a;
    type Turn<'a>
        = LocalTurn<'a>
    where
        Self: 'a;
    type Times<'a>
        = ()
    where
        Self: 'a;

    fn breaker(&self) -> &Breaker {
        &self.breaker
    }
    fn timeout(&self) -> Duration {
        self.timeout
    }
    #[inline(always)]
    fn timeout_ns(&self) -> u64 {
        self.timeout_ns
    }
    fn replay_attempts(&self) -> u32 {
        self.replay_attempts
    }
    #[inline]
    fn metrics_count(&self, what: Count) {
        self.metrics.count(what);
    }
    #[inline(always)]
    fn times(&self) {}
    #[inline(always)]
    fn emit_time_in(&self, (): (), ns: u64, delivered: bool) {
        self.metrics.emit_time(ns, delivered);
    }
    #[inline]
    fn enqueue(&self, trigger: T, class: Priority) -> Result<Pushed<T>, (T, HandBack)> {
        if self.closed.get() {
            return Err((trigger, HandBack::ShutDown));
        }
        self.queue
            .push(trigger, class)
            .map_err(|full| (full.into_inner(), HandBack::QueueFull))
    }
    #[inline(always)]
    fn admit(&self, start: u64) -> Result<(LocalPermit<'_>, Option<LocalSlot<'_>>), NotAdmitted> {
        let permit = self.handle.allow_at(start).map_err(NotAdmitted::Open)?;
        let slot = match self.max_in_flight {
            None => None,
            Some(max) => {
                let count = &self.metrics.in_flight;
                let n = count.load(Ordering::Relaxed);
                if n >= max {
                    permit.abandon();
                    self.metrics.count(Count::BulkheadRejected);
                    return Err(NotAdmitted::BulkheadFull);
                }
                count.store(n + 1, Ordering::Relaxed);
                Some(LocalSlot(count))
            }
        };
        Ok((permit, slot))
    }
    fn replay_turn(&self) -> Option<LocalTurn<'_>> {
        if self.replaying.replace(true) {
            None
        } else {
            Some(LocalTurn(&self.replaying))
        }
    }
    fn take_next(&self) -> Option<Pending<T>> {
        let kept = self.pending.take();
        if kept.is_some() {
            self.metrics.pending.store(false, Ordering::Relaxed);
        }
        head_first(kept, &self.queue)
    }
    fn keep_at_head(&self, p: Pending<T>) {
        debug_assert!(self.pending.take().is_none(), "one replay at a time");
        self.pending.set(Some(p));
        self.metrics.pending.store(true, Ordering::Relaxed);
    }
    fn keep_unless_shut_down(&self, p: Pending<T>) -> Result<(), Pending<T>> {
        if self.closed.get() {
            return Err(p);
        }
        self.keep_at_head(p);
        Ok(())
    }
}
