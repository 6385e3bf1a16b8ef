//! The breaker: the facade users hold ([`Breaker`]) and the state every part
//! of it shares ([`Inner`]).
//!
//! One file per phase, each opening with what it owns and which shared
//! fields it touches:
//!
//! - `time.rs`: breaker time (signed now, the clock floor);
//! - `permit.rs`: permits and the owned per-core handle;
//! - `admission.rs`: `allow` in each state, probe slots and their leases;
//! - `open.rs`: the OPEN state: its deadline, a clock stepped back since
//!   the trip, OPEN's answers, the move to HALF_OPEN;
//! - `transition.rs`: probe verdicts, re-opens, overrides, and what follows
//!   a transition (a flap, the deadline drawn, the event);
//! - `ramp.rs`: the recovery ramp: its start published after the close,
//!   the share admitted, its end;
//! - `window.rs`: window close, in named steps (and the relative rule's
//!   threshold and learning, `crate::baseline`);
//! - `flight.rs`: in-flight tracking's glue (the protocol is `crate::flight`);
//! - `watch.rs`: tasks parked elsewhere, woken when the breaker opens.
//!
//! The trip rule is `crate::trip`, the latency sketch `crate::sketch`, the
//! state word `crate::state`, the counters `crate::shard`, the in-flight
//! protocol `crate::flight`.
//!
//! # Lock order
//!
//! The hot path takes no lock except to make a transition (the OPEN lock, `open_lock`,
//! to publish an OPEN deadline or count a flap, the event queue's lock to
//! queue its event, and, into OPEN with a task parked, the open watch's
//! lock to take the wakers), each alone, briefly. Nested, the order is:
//! `tick` (window close, and `reset`) before `open_lock`, before the event
//! queue's lock and before the open watch's lock; `open_lock`, the event
//! queue's lock and the open watch's lock are never held together; no lock
//! is held while the listener runs, and no lock but `tick` (for a
//! transition a window close or a reset makes) while a parked task's waker
//! is woken (wakers only schedule their task; one that ran the task inside
//! `wake` and ticked the same breaker from it would deadlock).

mod admission;
mod flight;
mod open;
mod permit;
mod ramp;
#[cfg(all(test, not(tailguard_loom)))]
mod tests;
mod time;
mod transition;
mod watch;
mod window;

pub use permit::{LocalHandle, LocalPermit, OwnedPermit, Permit};

use admission::Lease;
use transition::{splitmix, Flaps};
use watch::OpenWatch;
#[cfg(any(feature = "tower", tailguard_loom))]
pub(crate) use watch::WatchKey;
use window::TickState;

use crate::baseline::Learner;
use crate::clock::ClockSource;
use crate::config::{Config, Sizes};
use crate::events::{Events, Listener};
use crate::histogram::LatencyHistogram;
use crate::report::{Limits, Mode, NoLocalShard, Reason, Rejected, Snapshot, State, Totals, WindowStats};
use crate::shard::Shards;
use crate::state::StateCell;
use crate::sync::{Arc, AtomicBool, AtomicU64, Mutex, Ordering};
use crate::trip::PPB;
use core::fmt;
use std::time::Duration;

/// The state every part of a breaker shares, grouped by who writes it.
///
/// | fields | written by |
/// |---|---|
/// | `config`, `clock`, `epoch_ns`, `name` | the build only |
/// | `state` | every transition (hot path, window close, overrides) and the probe counts (hot path) |
/// | `shards`, `leases`, `local_free`, `shadow_rejections` | the hot path (`allow`, verdicts); window close drains the shards |
/// | `shift` | whoever notices the clock behind what the breaker acted on (window close, an OPEN admission) |
/// | `deadline`, `opened_at`, `deadline_gen`, `trip_count`, `rng`, `open_lock`, `flapping` | whoever makes a transition into OPEN or a re-open (hot path or window close); the deadline and the re-open times under `open_lock` |
/// | `ramp` | the close that starts a recovery ramp, under `open_lock`; its admissions count in it |
/// | `tick`, `floor`, `threshold_ns` | window close, under `tick` |
/// | `events` | every transition queues; cold paths deliver |
/// | `open_watch` | waiters register (cold); a transition into OPEN wakes them |
pub(crate) struct Inner {
    // ---- set at build ----
    config: Config,
    clock: ClockSource,
    /// In-flight epoch length (see `flight.rs`).
    epoch_ns: u64,
    name: Option<Box<str>>,

    // ---- the state word ----
    state: StateCell,

    // ---- written on the hot path ----
    shards: Shards,
    /// HALF_OPEN: one lease per probe slot (see `admission::Lease`).
    leases: Box<[Lease]>,
    /// Bit i set: local shard i is free.
    local_free: AtomicU64,
    shadow_rejections: AtomicU64,
    /// Added (wrapping) to the clock's nanoseconds to give the breaker's
    /// time: starts at minus the reading at build, and is raised when the
    /// clock is seen stepping back, so that the breaker's time never goes
    /// back past what it has acted on and keeps moving after a step.
    shift: AtomicU64,

    // ---- written by transitions into OPEN and re-opens (see `open.rs`) ----
    /// OPEN: when the next probe may start, when it opened, and the
    /// generation these two belong to (published after the CAS).
    deadline: AtomicU64,
    opened_at: AtomicU64,
    deadline_gen: AtomicU64,
    trip_count: AtomicU64,
    rng: AtomicU64,
    /// The OPEN lock: serialises the publication and withdrawal of OPEN
    /// deadlines (`open.rs`), and holds the times of recent re-opens.
    open_lock: Mutex<Flaps>,
    flapping: AtomicBool,

    // ---- written by the close that starts a recovery ramp (`ramp.rs`) ----
    /// With a recovery ramp: its start, published after the CAS, and its
    /// admissions (boxed: most breakers have none).
    ramp: Option<Box<ramp::RampCell>>,

    // ---- written by window close, under `tick` ----
    tick: Mutex<TickState>,
    /// Where `TickState::latency` is (an address only: the ticker
    /// prefetches it before the close that adds to it; no ticker under
    /// the loom models).
    #[cfg_attr(tailguard_loom, allow(dead_code))]
    latency_at: usize,
    /// The breaker time of the last window close: every decision outside a
    /// close (a probe's lease, an in-flight epoch, a transition's time)
    /// reads time at least this late, so a clock that stepped back since
    /// cannot date anything before what a close already acted on.
    floor: AtomicU64,
    /// The threshold the window in progress is judged by, and probes now:
    /// `config.threshold_ns`, or with the relative rule the lower of it
    /// and the relative threshold the last close set.
    threshold_ns: AtomicU64,

    // ---- queued by every transition, delivered on cold paths ----
    events: Events,
    /// Tasks parked elsewhere, woken by a transition into OPEN.
    open_watch: OpenWatch,
    /// This breaker's hold on the process's ticker thread (see
    /// `BreakerBuilder::ticker`): the thread runs while a breaker it ticks
    /// (or a `Ticker` handle) lives, and stops with the last one.
    #[cfg(not(tailguard_loom))]
    _ticker: Option<crate::Ticker>,
    /// For a breaker on tokio's clock: the runtime it was built in (set
    /// once, just after construction), whose context the ticker thread
    /// enters to read the clock as that runtime reads it (paused or not).
    #[cfg(all(feature = "tokio", not(tailguard_loom)))]
    pub(super) runtime: std::sync::OnceLock<tokio::runtime::Handle>,
}

impl fmt::Debug for Inner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Breaker")
            .field("word", &self.state.load())
            .field("config", &self.config)
            .field("clock", &self.clock)
            .finish_non_exhaustive()
    }
}

/// A latency-primary circuit breaker for one downstream consumer.
///
/// Cheap to clone (an `Arc`); every clone is the same breaker. See the crate
/// docs for the behaviour.
///
/// ```
/// use std::time::Duration;
/// use tailguard::{Breaker, State};
/// use tailguard::clock::ManualClock;
///
/// let clock = ManualClock::new();
/// let breaker = Breaker::builder().clock(clock.clone()).trip_windows(1).build()?;
/// // A window in which 10% of the calls take 900 ms: its P99 is above 50 ms.
/// for i in 0..100 {
///     let ms = if i % 10 == 0 { 900 } else { 8 };
///     breaker.allow()?.record_latency(Duration::from_millis(ms), true);
/// }
/// clock.advance(Duration::from_secs(1));
/// breaker.tick();
/// assert_eq!(breaker.state(), State::Open);
/// assert!(breaker.allow().is_err());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct Breaker {
    pub(crate) inner: Arc<Inner>,
}

// A breaker stays sound and usable after a panic anywhere: the user code it
// runs (listeners) runs outside its locks under `catch_unwind`, its panics
// contained and counted; every other step is an atomic operation or a short
// critical section of the crate's own, which no panic can leave half done.
// A caller may use one across `catch_unwind` (its internal locks and
// `dyn` callbacks would otherwise opt it out).
impl std::panic::UnwindSafe for Breaker {}
impl std::panic::RefUnwindSafe for Breaker {}

impl fmt::Debug for Breaker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.fmt(f)
    }
}

impl Breaker {
    pub(crate) fn from_config(
        config: Config,
        sizes: Sizes,
        clock: ClockSource,
        listeners: Vec<Listener>,
        name: Option<Box<str>>,
        #[cfg(not(tailguard_loom))] ticker: Option<crate::Ticker>,
    ) -> Self {
        static SEEDS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let origin = clock.nanos_of(clock.raw());
        let ring = vec![(0, 0); sizes.ring_len].into_boxed_slice();
        let flap_times = vec![u64::MAX; config.flap_cycles as usize + 1].into_boxed_slice();
        let local_free = if sizes.local_handles == 64 {
            u64::MAX
        } else {
            (1u64 << sizes.local_handles) - 1
        };
        let leases = (0..config.probes)
            .map(|_| Lease {
                tag: AtomicU64::new(Lease::FREE),
                since: AtomicU64::new(0),
            })
            .collect();
        let ramp = (config.ramp_ns > 0).then(|| Box::new(ramp::RampCell::new(config.ramp_ns)));
        let learner = config.relative.as_deref().map(|(r, _)| Box::new(Learner::new(r)));
        let threshold_ns = window::effective_threshold(&config, learner.as_deref());
        let latency = Box::new(crate::histogram::Cumulative::new());
        // Its heap address, for the ticker's prefetch (a Box moved keeps it).
        let latency_at = core::ptr::from_ref(&*latency) as usize;
        let seed = splitmix(origin ^ SEEDS.fetch_add(0x9E37_79B9_7F4A_7C15, std::sync::atomic::Ordering::Relaxed));
        let inner = Arc::new(Inner {
            state: StateCell::new(),
            shards: Shards::new(
                sizes.shards,
                sizes.local_handles,
                config.track_in_flight,
                config.threshold_ns,
            ),
            tick: Mutex::new(TickState {
                // Windows end on the clock's grid of whole windows, so that
                // breakers sharing a clock and a window length close theirs
                // together (one wake of the ticker for all of them). The
                // first one ends at the first grid point more than half a
                // window away: it lasts from half a window to one and a half.
                window_end: time::first_window_end(origin, config.window_ns),
                window_gen: 0,
                ring,
                ring_pos: 0,
                high: 0,
                evidence: 0,
                evidence_windows: 0,
                last: WindowStats {
                    threshold: Duration::from_nanos(threshold_ns),
                    ..WindowStats::default()
                },
                totals: Totals::default(),
                relative_index: config
                    .relative
                    .as_deref()
                    .zip(learner.as_deref())
                    .map(|((r, _), l)| window::bucket_byte(l.threshold_index(r))),
                pooled: false,
                ramp_spans: 0,
                learner,
                latency,
            }),
            latency_at,
            epoch_ns: crate::flight::epoch_ns(config.window_ns, config.threshold_ns),
            config,
            clock,
            shift: AtomicU64::new(origin.wrapping_neg()),
            deadline: AtomicU64::new(0),
            opened_at: AtomicU64::new(0),
            deadline_gen: AtomicU64::new(u64::MAX),
            leases,
            floor: AtomicU64::new(0),
            threshold_ns: AtomicU64::new(threshold_ns),
            ramp,
            trip_count: AtomicU64::new(0),
            shadow_rejections: AtomicU64::new(0),
            rng: AtomicU64::new(seed),
            local_free: AtomicU64::new(local_free),
            events: Events::new(listeners, name.clone()),
            open_watch: OpenWatch::new(),
            #[cfg(not(tailguard_loom))]
            _ticker: ticker,
            #[cfg(all(feature = "tokio", not(tailguard_loom)))]
            runtime: std::sync::OnceLock::new(),
            open_lock: Mutex::new(Flaps {
                times: flap_times,
                pos: 0,
                open_ns: 0,
                reported_ns: 0,
            }),
            flapping: AtomicBool::new(false),
            name,
        });
        Self { inner }
    }

    /// Asks to make a call. `Ok` carries the permit that records the call's
    /// verdict; `Err` says the breaker is open (and when it will next
    /// probe): route the call to the fallback.
    ///
    /// In CLOSED this is one atomic load and one read of the clock; it never
    /// blocks, allocates, makes a system call or runs user code (a
    /// transition it makes is delivered to the listener later, see
    /// [`BreakerBuilder::on_transition`](crate::BreakerBuilder::on_transition)) in any state,
    /// with one exception: a thread's first call into a breaker (its first
    /// verdict, rejection or in-flight entry) builds the shard it counts in,
    /// one allocation (see [`BreakerBuilder::shards`](crate::BreakerBuilder::shards)),
    /// and a thread's first call into any breaker takes its thread index
    /// under a lock.
    ///
    /// ```
    /// let b = tailguard::Breaker::builder().build().unwrap();
    /// match b.allow() {
    ///     Ok(permit) => permit.record(true),
    ///     Err(rejected) => panic!("closed breaker rejected: {rejected}"),
    /// };
    /// ```
    #[inline(always)]
    pub fn allow(&self) -> Result<Permit<'_>, Rejected> {
        self.allow_at(self.inner.clock.raw())
    }

    /// As [`allow`](Self::allow), at a reading of this breaker's clock the
    /// caller already took ([`clock`](Self::clock)`().raw()`): the breaker
    /// reads no clock of its own. For a caller that reads the clock once per
    /// call for its own timeout and latency too (the emitters do), and then
    /// records with [`Permit::record_latency`]. The permit's start is the
    /// reading given: [`Permit::record`] measures from it.
    ///
    /// A reading much older than now (or of another clock) misjudges when an
    /// OPEN breaker's backoff ends; it never breaks the breaker.
    ///
    /// ```
    /// use std::time::Duration;
    /// let b = tailguard::Breaker::builder().build().unwrap();
    /// let start = b.clock().raw();
    /// let permit = b.allow_at(start).unwrap();
    /// // ... the call, timed by the caller from the same reading ...
    /// let end = b.clock().raw();
    /// permit.record_latency(Duration::from_nanos(b.clock().delta_nanos(start, end)), true);
    /// ```
    #[inline(always)]
    pub fn allow_at(&self, reading: u64) -> Result<Permit<'_>, Rejected> {
        match self.inner.admit(reading) {
            Ok(core) => Ok(Permit { core }),
            Err(rejected) => Err(self.inner.count_rejection(rejected)),
        }
    }

    /// As [`allow`](Self::allow), with a permit that owns a handle on the
    /// breaker (see [`OwnedPermit`]): for a call in a spawned task or a
    /// `'static` future. Costs a reference-count increment and decrement
    /// more than `allow`.
    ///
    /// ```
    /// let b = tailguard::Breaker::builder().build().unwrap();
    /// let permit = b.allow_owned().unwrap();
    /// drop(b); // the permit keeps the breaker alive
    /// permit.record(true);
    /// ```
    #[inline]
    pub fn allow_owned(&self) -> Result<OwnedPermit, Rejected> {
        self.allow_owned_at(self.inner.clock.raw())
    }

    /// As [`allow_at`](Self::allow_at), with an [`OwnedPermit`].
    ///
    /// ```
    /// let b = tailguard::Breaker::builder().build().unwrap();
    /// let permit = b.allow_owned_at(b.clock().raw()).unwrap();
    /// permit.record(true);
    /// ```
    #[inline]
    pub fn allow_owned_at(&self, reading: u64) -> Result<OwnedPermit, Rejected> {
        match self.inner.admit(reading) {
            Ok(core) => Ok(OwnedPermit::from_core(self, core)),
            Err(rejected) => Err(self.inner.count_rejection(rejected)),
        }
    }

    /// The clock this breaker reads (see [`allow_at`](Self::allow_at)).
    ///
    /// ```
    /// let clock = tailguard::clock::ManualClock::new();
    /// let b = tailguard::Breaker::builder().clock(clock.clone()).build().unwrap();
    /// clock.advance(std::time::Duration::from_millis(5));
    /// assert_eq!(b.clock().now_nanos(), 5_000_000);
    /// ```
    pub fn clock(&self) -> &ClockSource {
        &self.inner.clock
    }

    /// Closes every window that is due at the clock's now, moves an OPEN
    /// breaker whose backoff ran out to HALF_OPEN, re-opens a HALF_OPEN
    /// breaker with a probe out past its lease, and then delivers the
    /// transition events waiting for the listener (see
    /// [`BreakerBuilder::on_transition`](crate::BreakerBuilder::on_transition)).
    ///
    /// A running [`Ticker`](crate::Ticker) calls this for every live
    /// breaker; call it yourself when your runtime owns the timers, or in
    /// tests with a [`ManualClock`](crate::clock::ManualClock).
    ///
    /// If the clock stepped back since the last tick, the breaker's notion
    /// of time is held at the highest value seen, so a backward step never
    /// prolongs OPEN by more than one tick.
    ///
    /// ```
    /// # use std::time::Duration;
    /// let clock = tailguard::clock::ManualClock::new();
    /// let b = tailguard::Breaker::builder().clock(clock.clone()).build().unwrap();
    /// clock.advance(Duration::from_secs(1));
    /// b.tick();
    /// assert_eq!(b.snapshot().window.closed_at, Duration::from_secs(1));
    /// ```
    pub fn tick(&self) {
        self.inner.tick();
    }

    /// How long from now until [`tick`](Self::tick) next has work to do:
    /// the end of the window in progress, or sooner, when OPEN, the end of
    /// its backoff (then the next tick moves it to HALF_OPEN without
    /// waiting for a caller), in HALF_OPEN the end of the first probe's
    /// lease (the tick re-opens if that probe has not answered), or the end
    /// of a recovery ramp (the tick ends it). [`Duration::ZERO`] when it is
    /// due already, and also when the clock stepped back since the last
    /// tick: that tick absorbs the step (the breaker's time resumes from
    /// the last close's), and `next_due` after it says when the window
    /// ends; asking changes nothing. (The flapping flag is cleared by the first tick after its
    /// cycles age out, not on a timer of its own.) Ticking earlier does
    /// nothing but the check (see
    /// `guide::design`, "Runtimes that own their timers", for its cost);
    /// ticking later closes the windows that ended meanwhile as one span.
    ///
    /// For a runtime that owns its timers: after ticking its breakers, a
    /// core arms one timer for the soonest of their `next_due`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tailguard::clock::ManualClock;
    ///
    /// let clock = ManualClock::new();
    /// let b = tailguard::Breaker::builder()
    ///     .clock(clock.clone())
    ///     .window(Duration::from_millis(100))
    ///     .base_backoff(Duration::from_millis(30))
    ///     .ticker(false)
    ///     .build()?;
    /// clock.advance(Duration::from_millis(120));
    /// assert_eq!(b.next_due(), Duration::ZERO, "the first window has ended");
    /// b.tick();
    /// assert_eq!(b.next_due(), Duration::from_millis(80), "the next ends at 200 ms");
    /// b.trip_now();
    /// assert_eq!(b.next_due(), Duration::from_millis(30), "the backoff ends first");
    ///
    /// // A core's timer: tick what it owns, sleep until the soonest is due.
    /// let owned = [b];
    /// let sleep = owned.iter().map(|b| { b.tick(); b.next_due() }).min();
    /// assert_eq!(sleep, Some(Duration::from_millis(30)));
    /// # Ok::<(), tailguard::ConfigError>(())
    /// ```
    pub fn next_due(&self) -> Duration {
        Duration::from_nanos(self.inner.next_due())
    }

    /// The state (under metrics-only: the state the breaker would be in;
    /// forced open reads `Open`; forced closed and disabled read `Closed`).
    ///
    /// ```
    /// let b = tailguard::Breaker::builder().build().unwrap();
    /// assert_eq!(b.state(), tailguard::State::Closed);
    /// ```
    pub fn state(&self) -> State {
        self.inner.state.load().state()
    }

    /// The override mode.
    ///
    /// ```
    /// let b = tailguard::Breaker::builder().build().unwrap();
    /// b.disable();
    /// assert_eq!(b.mode(), tailguard::Mode::Disabled);
    /// ```
    pub fn mode(&self) -> Mode {
        self.inner.state.load().mode()
    }

    /// Rejects every call until [`reset`](Self::reset) (or another override).
    /// Like every override, it changes nothing (no transition, no event)
    /// when its mode is already in force.
    ///
    /// ```
    /// let b = tailguard::Breaker::builder().build().unwrap();
    /// b.force_open();
    /// assert!(b.allow().is_err());
    /// ```
    pub fn force_open(&self) {
        self.inner.set_mode(State::Open, Mode::ForcedOpen, Reason::ForcedOpen);
    }

    /// Admits and measures every call, and never trips, until
    /// [`reset`](Self::reset).
    ///
    /// ```
    /// let b = tailguard::Breaker::builder().build().unwrap();
    /// b.force_closed();
    /// assert!(b.allow().is_ok());
    /// ```
    pub fn force_closed(&self) {
        self.inner
            .set_mode(State::Closed, Mode::ForcedClosed, Reason::ForcedClosed);
    }

    /// Admits every call and measures nothing, until [`reset`](Self::reset).
    ///
    /// ```
    /// let b = tailguard::Breaker::builder().build().unwrap();
    /// b.disable();
    /// b.allow().unwrap().record(false);
    /// ```
    pub fn disable(&self) {
        self.inner.set_mode(State::Closed, Mode::Disabled, Reason::Disabled);
    }

    /// Shadow mode: measures and decides as usual, reports what it would do
    /// ([`state`](Self::state), [`Snapshot::shadow_rejections`]) and never
    /// rejects. Starts from CLOSED; does nothing if already in shadow mode
    /// (the shadow state goes on).
    ///
    /// ```
    /// let b = tailguard::Breaker::builder().build().unwrap();
    /// b.metrics_only();
    /// b.trip_now();
    /// assert_eq!(b.state(), tailguard::State::Open);
    /// assert!(b.allow().is_ok());
    /// assert_eq!(b.snapshot().shadow_rejections, 1);
    /// ```
    pub fn metrics_only(&self) {
        self.inner
            .set_mode(State::Closed, Mode::MetricsOnly, Reason::MetricsOnly);
    }

    /// Back to normal operation, losing the statistics (as resilience4j's,
    /// failsafe-rs's and Polly's resets do): CLOSED, no override, backoff
    /// level 0, no breach windows counted, the rolling error and failure
    /// spans and the sparse-traffic evidence cleared, and what the window
    /// in progress counted so far dropped from judgement (it stays in the
    /// totals). On a breaker already CLOSED with no override it is not a
    /// transition (no event, no new generation). Calls still in flight
    /// when it runs are judged when they return (or claimed in flight, with
    /// `track_in_flight`), as calls of the windows after it.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tailguard::{clock::ManualClock, Breaker, State};
    ///
    /// let clock = ManualClock::new();
    /// let b = Breaker::builder().clock(clock.clone()).trip_windows(1).build()?;
    /// b.force_open();
    /// b.reset();
    /// assert!(b.allow().is_ok());
    /// // A breaching window in progress, then a reset: not judged.
    /// for _ in 0..100 {
    ///     b.allow()?.record_latency(Duration::from_millis(900), true);
    /// }
    /// b.reset();
    /// clock.advance(Duration::from_secs(1));
    /// b.tick();
    /// assert_eq!((b.state(), b.snapshot().window.calls), (State::Closed, 0));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn reset(&self) {
        self.inner.reset();
    }

    /// The relative rule's baseline (see
    /// [`Snapshot::latency_baseline`](crate::Snapshot::latency_baseline)):
    /// `None` without the relative rule, or before its first observation.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tailguard::{Breaker, RelativeLatency};
    ///
    /// let seeded = RelativeLatency::new().initial_baseline(Duration::from_millis(3));
    /// let b = Breaker::builder().relative_latency(seeded).build()?;
    /// let baseline = b.latency_baseline().unwrap();
    /// assert!((baseline.as_secs_f64() / 0.003 - 1.0).abs() < 1e-6);
    /// assert_eq!(Breaker::builder().build()?.latency_baseline(), None);
    /// # Ok::<(), tailguard::ConfigError>(())
    /// ```
    pub fn latency_baseline(&self) -> Option<Duration> {
        self.inner
            .baseline_units()
            .map(|u| Duration::from_nanos(crate::baseline::ns_of_units(u)))
    }

    /// Forgets the relative rule's baseline: a cold start, judged by the
    /// ceiling until the warmup's observations are made again. For an
    /// operator who knows the consumer changed for good (a new version, a
    /// new machine). Mid-outage it learns nothing (an OPEN breaker's
    /// windows are not judged), but the warmup after it learns whatever
    /// the consumer is then: [`seed_baseline`](Self::seed_baseline) with a
    /// known healthy value is the safer way back. Nothing without the
    /// relative rule.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tailguard::{Breaker, RelativeLatency};
    ///
    /// let seeded = RelativeLatency::new().initial_baseline(Duration::from_millis(3));
    /// let b = Breaker::builder().relative_latency(seeded).build()?;
    /// b.reset_baseline();
    /// assert_eq!(b.latency_baseline(), None);
    /// assert_eq!(b.snapshot().latency_threshold, Duration::from_secs(1)); // the ceiling
    /// # Ok::<(), tailguard::ConfigError>(())
    /// ```
    pub fn reset_baseline(&self) {
        self.inner.set_baseline(None);
    }

    /// Sets the relative rule's baseline, warm (the window in progress is
    /// judged by it at its close, with the calls it counted before the
    /// seed): for a restart, from the last
    /// [`latency_baseline`](Self::latency_baseline), or an operator's
    /// known healthy value. Taken to the sketch's resolution.
    ///
    /// # Errors
    /// A [`ConfigError`](crate::ConfigError) for `seed_baseline` if the
    /// breaker has no relative rule, or the baseline is zero or above an
    /// hour.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tailguard::{Breaker, RelativeLatency};
    ///
    /// let b = Breaker::builder().relative_latency(RelativeLatency::new()).build()?;
    /// b.seed_baseline(Duration::from_millis(20))?;
    /// let t = b.snapshot().latency_threshold; // 2 × 20 ms, to the bucket above
    /// assert!(t >= Duration::from_millis(40) && t < Duration::from_millis(44));
    /// let err = Breaker::builder().build()?.seed_baseline(Duration::from_millis(20)).unwrap_err();
    /// assert_eq!(err.field(), "seed_baseline");
    /// # Ok::<(), tailguard::ConfigError>(())
    /// ```
    pub fn seed_baseline(&self, baseline: Duration) -> Result<(), crate::ConfigError> {
        use crate::ConfigErrorKind as K;
        let fail = |kind, why: String| Err(crate::ConfigError::new("seed_baseline", kind, why));
        if self.inner.config.relative.is_none() {
            return fail(
                K::Inconsistent,
                format!("seed_baseline({baseline:?}) needs the relative rule (BreakerBuilder::relative_latency)"),
            );
        }
        if baseline.is_zero() {
            return fail(
                K::Zero,
                "seed_baseline(0ns) must be above zero (accepted: 1ns to 3600s)".into(),
            );
        }
        if baseline > Duration::from_secs(3600) {
            return fail(
                K::TooLarge,
                format!("seed_baseline({baseline:?}) must be at most 3600s (accepted: 1ns to 3600s)"),
            );
        }
        let ns = crate::clock::duration_nanos_saturating(baseline);
        self.inner.set_baseline(Some(crate::baseline::units_of_ns(ns)));
        Ok(())
    }

    /// Trips the breaker now, as a breach would (trip count, backoff and
    /// probing as usual); does nothing unless CLOSED. For tests and for an
    /// operator who knows the consumer is down.
    ///
    /// ```
    /// let b = tailguard::Breaker::builder().build().unwrap();
    /// b.trip_now();
    /// assert_eq!(b.state(), tailguard::State::Open);
    /// assert_eq!(b.snapshot().trip_count, 1);
    /// ```
    pub fn trip_now(&self) {
        self.inner.trip_now();
    }

    /// An owned handle for one core, recording into a shard of its own
    /// with no read-modify-write (see [`LocalHandle`]).
    ///
    /// # Errors
    /// [`NoLocalShard`] if every shard reserved with
    /// [`BreakerBuilder::local_handles`](crate::BreakerBuilder::local_handles) is taken.
    ///
    /// ```
    /// let b = tailguard::Breaker::builder().local_handles(1).build().unwrap();
    /// let h = b.local_handle().unwrap();
    /// h.allow().unwrap().record(true);
    /// ```
    pub fn local_handle(&self) -> Result<LocalHandle, NoLocalShard> {
        LocalHandle::claim(&self.inner)
    }

    /// Every call measured since the breaker was built, by latency, in the
    /// fixed layout every breaker shares (see [`LatencyHistogram`]);
    /// counted when their window closes. Cold path: takes the window-close
    /// lock.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tailguard::clock::ManualClock;
    ///
    /// let clock = ManualClock::new();
    /// let b = tailguard::Breaker::builder().clock(clock.clone()).build()?;
    /// b.allow()?.record_latency(Duration::from_millis(3), true);
    /// assert_eq!(b.latency_histogram().count(), 0, "not before the window closes");
    /// clock.advance(Duration::from_secs(1));
    /// b.tick();
    /// assert_eq!(b.latency_histogram().count(), 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn latency_histogram(&self) -> LatencyHistogram {
        self.inner.latency_histogram()
    }

    /// Reads everything at once (cold path: takes the window-close lock).
    ///
    /// ```
    /// let b = tailguard::Breaker::builder().build().unwrap();
    /// assert_eq!(b.snapshot().generation, 0);
    /// ```
    pub fn snapshot(&self) -> Snapshot {
        self.inner.snapshot()
    }

    /// Time since the breaker was built, on its clock.
    ///
    /// ```
    /// # use std::time::Duration;
    /// let clock = tailguard::clock::ManualClock::new();
    /// let b = tailguard::Breaker::builder().clock(clock.clone()).build().unwrap();
    /// clock.advance(Duration::from_millis(3));
    /// assert_eq!(b.uptime(), Duration::from_millis(3));
    /// ```
    pub fn uptime(&self) -> Duration {
        Duration::from_nanos(self.inner.now())
    }

    /// The consumer's name, if one was given ([`BreakerBuilder::name`](crate::BreakerBuilder::name)).
    ///
    /// ```
    /// assert_eq!(tailguard::Breaker::builder().build().unwrap().name(), None);
    /// ```
    pub fn name(&self) -> Option<&str> {
        self.inner.name.as_deref()
    }

    /// Bytes this breaker holds: its own struct, its counter shards (with
    /// their latency buckets; one per shared shard built so far, a slot per
    /// shard it may grow, and one per reserved local handle), its in-flight
    /// slots if tracking is on, its probe leases, its
    /// rolling-window ring, its flapping ring, its event queue (with a
    /// listener or the `tracing` feature) and its name. A listener's own
    /// captures are not counted. The figures measured at the defaults are
    /// in [`guide::figures`](crate::guide::figures) (2,640 bytes with two
    /// shards in use).
    ///
    /// ```
    /// let small = tailguard::Breaker::builder().shards(1).build().unwrap();
    /// let wider = tailguard::Breaker::builder().shards(2).build().unwrap();
    /// assert!(small.memory_bytes() < wider.memory_bytes());
    /// ```
    pub fn memory_bytes(&self) -> usize {
        self.inner.memory_bytes()
    }

    /// Whether two handles are the same breaker.
    ///
    /// ```
    /// let a = tailguard::Breaker::builder().build().unwrap();
    /// assert!(a.ptr_eq(&a.clone()));
    /// ```
    pub fn ptr_eq(&self, other: &Breaker) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }
}

impl Breaker {
    /// Number of shared counter shards (a power of two): what other
    /// per-thread counters of the same consumer size themselves by.
    pub(crate) fn shard_count(&self) -> usize {
        self.inner.shards.capacity()
    }

    /// Whether a call now would be refused for certain, and how: OPEN with
    /// its backoff running (and the clock sane), or forced open. Takes
    /// nothing, changes nothing, counts nothing: for a caller that must
    /// answer before it may ask for a permit (a tower service's
    /// `poll_ready`). Anything else, `allow` decides. Reads the clock only
    /// when the breaker is OPEN: in CLOSED it is one load of the state word.
    #[cfg(any(feature = "tower", tailguard_loom))]
    #[inline]
    pub(crate) fn refusal(&self) -> Option<Rejected> {
        use crate::report::RejectReason;
        use crate::state::{FAST_PATH_MASK, OPEN_NORMAL};
        let word = self.inner.state.load();
        match word.0 & FAST_PATH_MASK {
            0 => None,
            OPEN_NORMAL => self.inner.open_refusal(word, self.inner.clock.raw()),
            _ if word.mode() == Mode::ForcedOpen => Some(Rejected::new(RejectReason::ForcedOpen, u64::MAX)),
            _ => None,
        }
    }

    /// Counts a refusal found by [`refusal`](Self::refusal) when it
    /// is handed to the call it refuses (once per call, as `allow` would).
    #[cfg(feature = "tower")]
    pub(crate) fn count_refusal(&self, rejected: Rejected) -> Rejected {
        self.inner.count_rejection(rejected)
    }

    /// For a task about to park on something else (a tower service on its
    /// inner service's readiness): registers `waker` to be woken at the
    /// next transition into OPEN, then looks at the breaker again (see
    /// `watch.rs`). `Some` if the breaker refuses calls now: then the task
    /// must not park (nothing stays registered), and the refusal is for its
    /// next call. `None`: parked, woken when the breaker opens.
    #[cfg(any(feature = "tower", tailguard_loom))]
    pub(crate) fn park_until_open(&self, key: &mut WatchKey, waker: &core::task::Waker) -> Option<Rejected> {
        self.inner.open_watch.register(key, waker);
        let refusal = self.refusal();
        if refusal.is_some() {
            self.inner.open_watch.clear(*key);
        }
        refusal
    }

    /// The waiter `key` is not parked any more.
    #[cfg(feature = "tower")]
    pub(crate) fn unpark(&self, key: WatchKey) {
        self.inner.open_watch.clear(key);
    }

    /// The waiter `key` is gone.
    #[cfg(any(feature = "tower", tailguard_loom))]
    pub(crate) fn forget_park(&self, key: &mut WatchKey) {
        self.inner.open_watch.remove(key);
    }

    /// For the loom models only (built with `--cfg tailguard_loom`): the
    /// park protocol of [`park_until_open`](Self::park_until_open); true if
    /// the breaker refused (the task does not park).
    #[cfg(tailguard_loom)]
    #[doc(hidden)]
    pub fn loom_park(&self, key: &mut Option<usize>, waker: &core::task::Waker) -> bool {
        self.park_until_open(key, waker).is_some()
    }

    /// For the loom models only: the waiter `key` is gone.
    #[cfg(tailguard_loom)]
    #[doc(hidden)]
    pub fn loom_forget_park(&self, key: &mut Option<usize>) {
        self.forget_park(key);
    }

    /// A handle that does not keep the breaker alive.
    #[cfg(feature = "tokio")]
    pub(crate) fn downgrade(&self) -> std::sync::Weak<Inner> {
        Arc::downgrade(&self.inner)
    }

    /// Reads this breaker's clock (tokio's) in the context of `runtime`
    /// wherever it is ticked from (see `BreakerBuilder::ticker`).
    #[cfg(all(feature = "tokio", not(tailguard_loom)))]
    pub(crate) fn read_in(&self, runtime: tokio::runtime::Handle) {
        let _ = self.inner.runtime.set(runtime);
    }

    /// The breaker behind `weak`, if it is still alive.
    #[cfg(feature = "tokio")]
    pub(crate) fn upgrade(weak: &std::sync::Weak<Inner>) -> Option<Breaker> {
        weak.upgrade().map(|inner| Breaker { inner })
    }
}

impl Inner {
    /// Counts a rejection on the calling thread's shard.
    #[inline(always)]
    fn count_rejection(&self, rejected: Rejected) -> Rejected {
        self.shards.mine().rejected(rejected.reason());
        rejected
    }

    fn snapshot(&self) -> Snapshot {
        // The baseline and the threshold it gives are both set under the
        // tick lock: read together.
        let (last, totals, latency_baseline, threshold_ns) = {
            let ts = self.tick.lock();
            (
                ts.last,
                ts.totals,
                ts.learner.as_deref().and_then(Learner::baseline),
                self.threshold_ns.load(Ordering::Relaxed),
            )
        };
        let word = self.state.load();
        let now = self.now();
        let deadline = if word.state() == State::Open && word.mode() != Mode::ForcedOpen {
            self.published_deadline(word)
        } else {
            None
        };
        let (next_probe_in, open_for) = if let Some(deadline) = deadline {
            let opened = self.opened_at.load(Ordering::Acquire);
            (
                Some(Duration::from_nanos(deadline.saturating_sub(now))),
                Some(Duration::from_nanos(now.saturating_sub(opened))),
            )
        } else {
            (None, None)
        };
        Snapshot {
            state: word.state(),
            mode: word.mode(),
            generation: word.generation(),
            trip_count: self.trip_count.load(Ordering::Relaxed),
            backoff_level: word.level(),
            consecutive_breaches: word.breaches(),
            probes_in_flight: word.probes(),
            probe_successes: word.successes(),
            next_probe_in,
            open_for,
            window: last,
            shadow_rejections: self.shadow_rejections.load(Ordering::Relaxed),
            rejections: self.shards.rejections(),
            events_lost: self.events.lost(),
            listener_panics: self.events.panics(),
            uptime: Duration::from_nanos(now),
            totals,
            flapping: self.flapping.load(Ordering::Acquire),
            limits: self.limits(),
            latency_threshold: Duration::from_nanos(threshold_ns),
            latency_baseline: latency_baseline.map(|u| Duration::from_nanos(crate::baseline::ns_of_units(u))),
            ramp: self.ramp_status(word, now),
            open_time_total: Duration::from_nanos(self.open_time_total(now)),
        }
    }

    fn limits(&self) -> Limits {
        let c = &self.config;
        let windows = |n: u32| Duration::from_nanos(c.window_ns.saturating_mul(u64::from(n)));
        Limits {
            window: Duration::from_nanos(c.window_ns),
            latency_threshold: Duration::from_nanos(c.threshold_ns),
            slow_fraction: c.rule.slow_ppb as f64 / PPB as f64,
            trip_windows: c.rule.trip_windows,
            min_calls: c.rule.min_calls,
            error_rate: c.rule.error_ppb as f64 / PPB as f64,
            error_window: windows(c.error_windows),
            failure_count: c
                .rule
                .failures
                .map(|n| (u64::from(n.get()), windows(c.failure_windows))),
            relative: c.relative.as_deref().map(|(_, given)| *given),
            recovery_ramp: (c.ramp_ns > 0).then(|| Duration::from_nanos(c.ramp_ns)),
        }
    }

    fn memory_bytes(&self) -> usize {
        let ts = self.tick.lock();
        core::mem::size_of::<Inner>()
            + 2 * core::mem::size_of::<usize>() // the Arc's counts
            + self.shards.heap_bytes()
            + ts.ring.len() * core::mem::size_of::<(u32, u32)>()
            + core::mem::size_of_val(&*ts.latency)
            + self.open_lock.lock().times.len() * core::mem::size_of::<u64>()
            + self.leases.len() * core::mem::size_of::<Lease>()
            + self.events.heap_bytes()
            + self.open_watch.heap_bytes()
            + self.name.as_ref().map_or(0, |n| n.len())
            + ts.learner.as_deref().map_or(0, |_| core::mem::size_of::<Learner>())
            + self.config.relative.as_deref().map_or(0, core::mem::size_of_val)
            + self.ramp.as_deref().map_or(0, core::mem::size_of_val)
    }
}
