//! [`BreakerBuilder`]: every setting with its default, and the validation
//! that turns the settings into a [`Config`] or a [`ConfigError`] naming the
//! field. `build` also registers the new breaker with the ticker.

use crate::baseline::{self, Relative};
use crate::breaker::Breaker;
use crate::clock::{duration_nanos_saturating, ClockSource};
use crate::config::{CancelPolicy, Config, Jitter, RelativeLatency, Sizes};
use crate::error::{ConfigError, ConfigErrorKind as K};
use crate::events::Listener;
use crate::report::Transition;
use crate::shard::MAX_SHARDS;
use crate::trip::{ppb, Rule, PPB};
use core::fmt;
use std::time::Duration;

/// Builds a [`Breaker`]; every setter has a documented default and
/// [`build`](Self::build) validates them all.
///
/// ```
/// use std::time::Duration;
/// use tailguard::Breaker;
///
/// let breaker = Breaker::builder()
///     .latency_threshold(Duration::from_millis(50))
///     .quantile(0.99)
///     .trip_windows(3)
///     .window(Duration::from_secs(1))
///     .error_rate(0.5)
///     .min_calls(20)
///     .base_backoff(Duration::from_secs(1))
///     .max_backoff(Duration::from_secs(30))
///     .half_open_probes(1)
///     .success_to_close(5)
///     .build()?;
/// # drop(breaker);
/// # Ok::<(), tailguard::ConfigError>(())
/// ```
#[must_use = "a builder does nothing until `build` is called"]
pub struct BreakerBuilder {
    latency_threshold: Duration,
    quantile: f64,
    trip_windows: u32,
    window: Duration,
    error_rate: f64,
    error_window: Option<Duration>,
    min_calls: u64,
    failure_count: Option<(u32, Duration)>,
    base_backoff: Duration,
    max_backoff: Duration,
    jitter: Jitter,
    half_open_probes: u32,
    success_to_close: u32,
    probe_lease: Option<Duration>,
    cancel: CancelPolicy,
    track_in_flight: bool,
    shards: Option<usize>,
    local_handles: usize,
    clock: Option<ClockSource>,
    listeners: Vec<Listener>,
    /// `None`: as the clock says ([`ClockSource::ticked_by_default`]).
    register_with_ticker: Option<bool>,
    name: Option<Box<str>>,
    flapping: (u32, Duration),
    relative: Option<RelativeLatency>,
    recovery_ramp: Option<Duration>,
    /// Which settings the caller gave (the others are defaults): for the
    /// messages of conflicts between two settings.
    explicit: Explicit,
}

#[derive(Debug, Default, Clone, Copy)]
struct Explicit {
    latency_threshold: bool,
    window: bool,
    base_backoff: bool,
    max_backoff: bool,
}

impl Default for BreakerBuilder {
    fn default() -> Self {
        Self {
            latency_threshold: Duration::from_millis(50),
            quantile: 0.99,
            trip_windows: 3,
            window: Duration::from_secs(1),
            error_rate: 0.5,
            error_window: None,
            min_calls: 20,
            failure_count: None,
            base_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(30),
            jitter: Jitter::None,
            half_open_probes: 1,
            success_to_close: 5,
            probe_lease: None,
            cancel: CancelPolicy::Cancelled,
            track_in_flight: false,
            shards: None,
            local_handles: 0,
            clock: None,
            listeners: Vec::new(),
            register_with_ticker: None,
            name: None,
            flapping: (5, Duration::from_secs(60)),
            relative: None,
            recovery_ramp: None,
            explicit: Explicit::default(),
        }
    }
}

impl fmt::Debug for BreakerBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BreakerBuilder")
            .field("latency_threshold", &self.latency_threshold)
            .field("quantile", &self.quantile)
            .field("trip_windows", &self.trip_windows)
            .field("window", &self.window)
            .field("error_rate", &self.error_rate)
            .field("error_window", &self.error_window)
            .field("min_calls", &self.min_calls)
            .field("failure_count", &self.failure_count)
            .field("base_backoff", &self.base_backoff)
            .field("max_backoff", &self.max_backoff)
            .field("jitter", &self.jitter)
            .field("half_open_probes", &self.half_open_probes)
            .field("success_to_close", &self.success_to_close)
            .field("probe_lease", &self.probe_lease)
            .field("cancel", &self.cancel)
            .field("track_in_flight", &self.track_in_flight)
            .field("shards", &self.shards)
            .field("local_handles", &self.local_handles)
            .field("clock", &self.clock)
            .field("listeners", &self.listeners.len())
            .field("register_with_ticker", &self.register_with_ticker)
            .field("name", &self.name)
            .field("flapping", &self.flapping)
            .field("relative", &self.relative)
            .field("recovery_ramp", &self.recovery_ramp)
            .finish()
    }
}

/// Longest window, latency threshold or rolling span accepted (one hour):
/// far beyond any sensible setting, and small enough that sums of these
/// values never approach `u64` nanoseconds.
const MAX_SPAN: Duration = Duration::from_secs(3600);
/// Highest ceiling of the relative rule accepted: within the latency
/// sketch's range (its last ordinary bucket ends at 68.7 s).
const MAX_CEILING: Duration = Duration::from_secs(60);
/// Longest backoff or probe lease accepted (one day).
const MAX_BACKOFF: Duration = Duration::from_secs(86_400);
/// Shortest window accepted.
const MIN_WINDOW: Duration = Duration::from_millis(1);
/// Most windows a rolling error or failure span may cover.
const MAX_ROLLING_WINDOWS: u64 = 1024;
// The window ring's position is a u16 (`TickState::ring_pos`).
const _: () = assert!(MAX_ROLLING_WINDOWS <= u16::MAX as u64);
/// Most owned per-core handles (one bit each in a `u64`).
const MAX_LOCAL_HANDLES: usize = 64;

impl Breaker {
    /// A builder with the defaults (see [`BreakerBuilder`]).
    ///
    /// ```
    /// let b = tailguard::Breaker::builder().build().unwrap();
    /// # drop(b);
    /// ```
    pub fn builder() -> BreakerBuilder {
        BreakerBuilder::default()
    }
}

impl BreakerBuilder {
    /// Calls slower than this are slow (default 50 ms). Accepted: 1 ns to 1 h.
    ///
    /// ```
    /// # use std::time::Duration;
    /// let err = tailguard::Breaker::builder().latency_threshold(Duration::ZERO).build().unwrap_err();
    /// assert_eq!(err.field(), "latency_threshold");
    /// ```
    pub fn latency_threshold(mut self, threshold: Duration) -> Self {
        self.latency_threshold = threshold;
        self.explicit.latency_threshold = true;
        self
    }

    /// The latency quantile judged against the threshold (default 0.99).
    /// Accepted: `0 < q <= 1`, taken to nine decimal places (0.000000001 is
    /// the smallest). The breach test is exact, in integers: the window's
    /// `q` quantile is above the threshold when more than `(1 − q)` of its
    /// calls were slow, so with `q = 0.9` two slow calls of twenty are not a
    /// breach and three are.
    ///
    /// ```
    /// let err = tailguard::Breaker::builder().quantile(1.5).build().unwrap_err();
    /// assert_eq!(err.field(), "quantile");
    /// ```
    pub fn quantile(mut self, q: f64) -> Self {
        self.quantile = q;
        self
    }

    /// Consecutive breaching windows that trip the breaker (default 3).
    /// Accepted: 1 to 255.
    ///
    /// ```
    /// let err = tailguard::Breaker::builder().trip_windows(0).build().unwrap_err();
    /// assert_eq!(err.field(), "trip_windows");
    /// ```
    pub fn trip_windows(mut self, windows: u32) -> Self {
        self.trip_windows = windows;
        self
    }

    /// Length of one measurement window (default 1 s). Accepted: 1 ms to 1 h.
    ///
    /// Windows end at whole multiples of the length on the breaker's clock,
    /// so that the breakers that share a clock and a window length close
    /// their windows at the same instants (the [`Ticker`](crate::Ticker)
    /// then wakes once per window for all of them). The first window ends
    /// at the first multiple more than half a window after the breaker is
    /// built, so it lasts between half a window and one and a half. If the
    /// clock steps back, the breaker's time does not (see
    /// [`Breaker::tick`](crate::Breaker::tick)), and its windows keep their
    /// length but leave the grid by the size of the step.
    ///
    /// ```
    /// # use std::time::Duration;
    /// use tailguard::{clock::ManualClock, Breaker};
    ///
    /// let clock = ManualClock::new();
    /// clock.advance(Duration::from_millis(300)); // the first window: 300 ms to 1 s
    /// let b = Breaker::builder().clock(clock.clone()).window(Duration::from_secs(1)).build()?;
    /// b.allow()?.record(true);
    /// clock.advance(Duration::from_millis(700)); // 1 s on the clock
    /// b.tick();
    /// assert_eq!(b.snapshot().window.closed_at, Duration::from_millis(700));
    ///
    /// let err = Breaker::builder().window(Duration::ZERO).build().unwrap_err();
    /// assert_eq!(err.field(), "window");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn window(mut self, window: Duration) -> Self {
        self.window = window;
        self.explicit.window = true;
        self
    }

    /// Trip when more than this fraction of the calls in the rolling error
    /// window failed (default 0.5). Accepted: `0 <= r <= 1`, taken to nine
    /// decimal places and compared exactly; 1 never trips.
    ///
    /// A call counts in the window it ends in, and its failure with it;
    /// with [`track_in_flight`](Self::track_in_flight), a call still running
    /// at a close is counted as a call (slow) in that window, and its
    /// failure, if it fails, in the window it ends in: a span whose hung
    /// calls fail in it can count more failures than its own calls (at most
    /// as many: the rule never takes more errors than calls), so it errs
    /// toward tripping on a consumer whose calls hang and then fail.
    ///
    /// ```
    /// let err = tailguard::Breaker::builder().error_rate(-0.1).build().unwrap_err();
    /// assert_eq!(err.field(), "error_rate");
    /// ```
    pub fn error_rate(mut self, rate: f64) -> Self {
        self.error_rate = rate;
        self
    }

    /// The rolling span the error rate is measured over (default 10
    /// windows), rounded up to whole windows. Accepted: one window to 1024
    /// windows.
    ///
    /// ```
    /// # use std::time::Duration;
    /// let b = tailguard::Breaker::builder().error_window(Duration::from_secs(30)).build();
    /// assert!(b.is_ok());
    /// ```
    pub fn error_window(mut self, span: Duration) -> Self {
        self.error_window = Some(span);
        self
    }

    /// The evidence a window needs to be judged alone (default 20 calls): a
    /// minimum of evidence, not of rate. Any value is accepted.
    ///
    /// * A window with at least `min_calls` calls is judged by the quantile
    ///   rule on its own (more than `1 − q` of its calls slow: a breaching
    ///   window; [`trip_windows`](Self::trip_windows) of them in a row trip).
    ///   When one late tick closes `k` windows at once, their calls are
    ///   judged together and must number at least `k × min_calls`.
    /// * A sparser window is not judged alone (one slow call in a quiet
    ///   second is not an outage), but the calls of every window feed a
    ///   sequential test on the slow fraction that runs across windows (a
    ///   CUSUM of the likelihood ratio of `10 × (1 − q)` slow calls against
    ///   `1 − q`; see [`Reason::SparseLatency`](crate::Reason::SparseLatency)
    ///   for the arithmetic). With the defaults it trips after 6 slow calls
    ///   with no fast one among them, 7 with up to 24 fast ones, 8 with up
    ///   to 48, and never over fewer than [`trip_windows`](Self::trip_windows)
    ///   windows with calls (a burst within one window trips neither rule);
    ///   a consumer whose slow fraction is well under `1 − q` drifts back to
    ///   no evidence at all, and a dense window that does not breach clears
    ///   it. So a consumer called `r` times a second, every call slow, trips
    ///   within `max(6 / r, trip_windows)` windows (of 1 s) and one more (3 s
    ///   at 3 calls a second, 60 s at one call every 10 s; called in bursts,
    ///   at its `trip_windows`-th burst), whether its windows are dense,
    ///   sparse or both; a healthy one at 0.1% slow calls and a few calls a
    ///   second does not trip in days (24 hours of it at 3 calls a second
    ///   are a test of this crate; dense windows are judged alone, see
    ///   above).
    /// * The rolling error rate needs `min_calls` calls over its span
    ///   ([`error_window`](Self::error_window), 10 windows by default).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tailguard::{clock::ManualClock, Breaker, Reason, State};
    ///
    /// let clock = ManualClock::new();
    /// let b = Breaker::builder()
    ///     .clock(clock.clone())
    ///     .latency_threshold(Duration::from_millis(100))
    ///     .build()?;
    /// // Three calls a second, each 300 ms: never 20 calls in a window.
    /// let mut seconds = 0;
    /// while b.state() == State::Closed {
    ///     for _ in 0..3 {
    ///         b.allow()?.record_latency(Duration::from_millis(300), true);
    ///     }
    ///     clock.advance(Duration::from_secs(1));
    ///     b.tick();
    ///     seconds += 1;
    /// }
    /// assert!(seconds <= 3, "tripped after {seconds} s");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn min_calls(mut self, calls: u64) -> Self {
        self.min_calls = calls;
        self
    }

    /// The classic count trip: open when at least `failures` calls failed
    /// within the rolling span `within` (rounded up to whole windows, and
    /// judged at window close). Off by default. `min_calls` does not apply:
    /// the count is its own minimum. Accepted: `failures >= 1`, `within` one
    /// window to 1024 windows.
    ///
    /// ```
    /// # use std::time::Duration;
    /// // "5 failures within 30 s, 15 s recovery"
    /// let b = tailguard::Breaker::builder()
    ///     .failure_count(5, Duration::from_secs(30))
    ///     .base_backoff(Duration::from_secs(15))
    ///     .max_backoff(Duration::from_secs(15))
    ///     .build();
    /// assert!(b.is_ok());
    /// ```
    pub fn failure_count(mut self, failures: u32, within: Duration) -> Self {
        self.failure_count = Some((failures, within));
        self
    }

    /// The first OPEN lasts this long (default 1 s); each re-trip without a
    /// clean recovery doubles it up to [`max_backoff`](Self::max_backoff).
    /// Accepted: 1 ns to `max_backoff`.
    ///
    /// ```
    /// # use std::time::Duration;
    /// let b = tailguard::Breaker::builder().base_backoff(Duration::from_micros(100)).build();
    /// assert!(b.is_ok());
    /// ```
    pub fn base_backoff(mut self, backoff: Duration) -> Self {
        self.base_backoff = backoff;
        self.explicit.base_backoff = true;
        self
    }

    /// The longest OPEN (default 30 s). Accepted: up to one day.
    ///
    /// ```
    /// # use std::time::Duration;
    /// let err = tailguard::Breaker::builder().max_backoff(Duration::from_secs(86_401)).build().unwrap_err();
    /// assert_eq!(err.field(), "max_backoff");
    /// ```
    pub fn max_backoff(mut self, backoff: Duration) -> Self {
        self.max_backoff = backoff;
        self.explicit.max_backoff = true;
        self
    }

    /// Randomise each OPEN duration (default [`Jitter::None`]).
    ///
    /// ```
    /// let err = tailguard::Breaker::builder().jitter(tailguard::Jitter::Bounded(2.0)).build().unwrap_err();
    /// assert_eq!(err.field(), "jitter");
    /// ```
    pub fn jitter(mut self, jitter: Jitter) -> Self {
        self.jitter = jitter;
        self
    }

    /// Probes admitted at once in HALF_OPEN (default 1). Accepted: 1 to 255.
    ///
    /// ```
    /// let err = tailguard::Breaker::builder().half_open_probes(0).build().unwrap_err();
    /// assert_eq!(err.field(), "half_open_probes");
    /// ```
    pub fn half_open_probes(mut self, probes: u32) -> Self {
        self.half_open_probes = probes;
        self
    }

    /// Consecutive good probes that close the breaker (default 5).
    /// Accepted: 1 to 255.
    ///
    /// ```
    /// let err = tailguard::Breaker::builder().success_to_close(256).build().unwrap_err();
    /// assert_eq!(err.field(), "success_to_close");
    /// ```
    pub fn success_to_close(mut self, successes: u32) -> Self {
        self.success_to_close = successes;
        self
    }

    /// How long a probe may stay out before it is taken for slow: when every
    /// probe slot has been held this long without a verdict (a permit leaked
    /// with `mem::forget`, a call that hangs), the breaker re-opens with the
    /// next backoff and the slots are free again at the next HALF_OPEN.
    /// Default: ten latency thresholds, at least 1 s. Accepted: from the
    /// latency threshold to one day.
    ///
    /// ```
    /// # use std::time::Duration;
    /// let err = tailguard::Breaker::builder()
    ///     .latency_threshold(Duration::from_millis(50))
    ///     .probe_lease(Duration::from_millis(10))
    ///     .build()
    ///     .unwrap_err();
    /// assert_eq!(err.field(), "probe_lease");
    /// ```
    pub fn probe_lease(mut self, lease: Duration) -> Self {
        self.probe_lease = Some(lease);
        self
    }

    /// What a permit dropped without a verdict counts as (default
    /// [`CancelPolicy::Cancelled`]).
    ///
    /// ```
    /// let b = tailguard::Breaker::builder().on_cancel(tailguard::CancelPolicy::Failure).build();
    /// assert!(b.is_ok());
    /// ```
    pub fn on_cancel(mut self, policy: CancelPolicy) -> Self {
        self.cancel = policy;
        self
    }

    /// Count calls still in flight at window close that have already run
    /// longer than the threshold as slow calls of that window, each exactly
    /// once (default off; costs `allow` and `record` one more CAS each). A
    /// consumer that hangs outright then trips the breaker even when no call
    /// ever returns, as calls keep arriving: each hung call counts once, so
    /// it takes as many of them as of slow calls that return (`min_calls`
    /// a window for `trip_windows` windows, or, sparser, the sequential
    /// test's 6 over 3 windows at the defaults; see
    /// [`min_calls`](Self::min_calls)). A client whose few calls all hung
    /// and that sends no more is not tripped by them: give its calls a
    /// timeout. A counted call that then fails counts as failed too (its
    /// error, in the window it ends). A call that starts while window closes are late by more
    /// than a window, or while the clock is behind the last close, is not
    /// tracked in flight (it is still counted when it returns).
    ///
    /// ```
    /// let b = tailguard::Breaker::builder().track_in_flight(true).build();
    /// assert!(b.is_ok());
    /// ```
    pub fn track_in_flight(mut self, on: bool) -> Self {
        self.track_in_flight = on;
        self
    }

    /// Number of shared counter shards, rounded up to a power of two
    /// (default: the available parallelism, rounded up). Accepted: 1 to 1024.
    ///
    /// This is how many shards the breaker *may* grow: each thread records
    /// into the shard its index maps to, and a shard is built (640 bytes,
    /// one allocation) by the first call of a thread that maps to it. A
    /// breaker configured for 64 shards and called from two threads holds
    /// at most two shards (one, when the two threads' indices map to the
    /// same shard) and 64 eight-byte slots, and its window close merges
    /// those. A thread that exits gives its index back to the next thread
    /// that starts calling breakers, so a pool whose threads come and go
    /// reuses the shards its earlier threads built.
    ///
    /// ```
    /// let wide = tailguard::Breaker::builder().shards(64).build().unwrap();
    /// let before = wide.memory_bytes();
    /// wide.allow().unwrap().record(true); // this thread's first call
    /// let one = wide.memory_bytes();
    /// assert!(one > before); // builds this thread's shard
    /// wide.allow().unwrap().record(true);
    /// assert_eq!(wide.memory_bytes(), one); // and later calls use it
    ///
    /// let err = tailguard::Breaker::builder().shards(0).build().unwrap_err();
    /// assert_eq!(err.field(), "shards");
    /// ```
    pub fn shards(mut self, shards: usize) -> Self {
        self.shards = Some(shards);
        self
    }

    /// Reserve this many single-writer shards for owned per-core handles
    /// ([`Breaker::local_handle`]) (default 0). Accepted: 0 to 64.
    ///
    /// ```
    /// let b = tailguard::Breaker::builder().local_handles(2).build().unwrap();
    /// let h = b.local_handle().unwrap();
    /// # drop(h);
    /// ```
    pub fn local_handles(mut self, handles: usize) -> Self {
        self.local_handles = handles;
        self
    }

    /// The clock (default: [`ClockSource::precise`]).
    ///
    /// ```
    /// let clock = tailguard::clock::ManualClock::new();
    /// let b = tailguard::Breaker::builder().clock(clock.clone()).build();
    /// assert!(b.is_ok());
    /// ```
    pub fn clock(mut self, clock: impl Into<ClockSource>) -> Self {
        self.clock = Some(clock.into());
        self
    }

    /// Called with every transition, in generation order (strictly
    /// increasing generations), outside any lock; it may call back into the
    /// breaker.
    ///
    /// **Several.** Listeners add up: each one added gets every event, in
    /// the order they were added (a logging listener and a metrics listener
    /// both see everything).
    ///
    /// **When.** The listener never runs on the hot path. A transition made
    /// inside [`Breaker::allow`] or a permit's verdict (OPEN → HALF_OPEN, a
    /// probe deciding its round) is queued and delivered by the breaker's
    /// next [`Breaker::tick`], which a running [`Ticker`](crate::Ticker)
    /// makes at its next window end or backoff end (so within one window of
    /// the transition), or by the next override call. Transitions made by
    /// `tick` itself and by the overrides ([`Breaker::force_open`],
    /// [`Breaker::reset`], ...) are delivered before those calls return,
    /// on the calling thread, unless another thread is delivering already
    /// (then it delivers them) or an earlier transition's event has not been
    /// queued yet (a thread that made it is between its CAS and queueing its
    /// event: the next delivery brings both, in order).
    ///
    /// **Loss.** Up to 64 events wait per breaker. Only when 64 are waiting
    /// is one dropped: the oldest waiting event gives way, together with any
    /// earlier transition whose event has not been queued yet (its thread
    /// stopped between the transition and queueing it; that event is dropped
    /// when it turns up), so the latest transition always reaches the
    /// listener. That takes 64 transitions between two deliveries: overrides
    /// called in a tight loop from several threads, or hot-path transitions
    /// with no tick for a long time. Every dropped event is counted in
    /// [`Snapshot::events_lost`](crate::Snapshot::events_lost) (Prometheus:
    /// `breaker_events_lost_total`).
    ///
    /// **Panics.** A panic in a listener is caught and counted in
    /// [`Snapshot::listener_panics`](crate::Snapshot::listener_panics); it
    /// never unwinds into the breaker, the caller of an override or the
    /// ticker thread; the other listeners get the event all the same, and
    /// delivery goes on with the next event.
    ///
    /// ```
    /// use std::sync::{Arc, Mutex};
    /// use std::time::Duration;
    /// use tailguard::{clock::ManualClock, Breaker, State};
    ///
    /// let clock = ManualClock::new();
    /// let seen = Arc::new(Mutex::new(Vec::new()));
    /// let sink = Arc::clone(&seen);
    /// let b = Breaker::builder()
    ///     .clock(clock.clone())
    ///     .success_to_close(1)
    ///     .on_transition(move |t| sink.lock().unwrap().push(t.to))
    ///     .build()?;
    /// b.trip_now(); // an override: delivered before it returns
    /// assert_eq!(*seen.lock().unwrap(), [State::Open]);
    /// clock.advance(Duration::from_secs(1));
    /// b.allow()?.record(true); // OPEN -> HALF_OPEN -> CLOSED on the hot path
    /// assert_eq!(seen.lock().unwrap().len(), 1); // queued, not yet delivered
    /// b.tick();
    /// assert_eq!(*seen.lock().unwrap(), [State::Open, State::HalfOpen, State::Closed]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn on_transition(mut self, listener: impl Fn(&Transition) + Send + Sync + 'static) -> Self {
        self.listeners.push(Box::new(listener));
        self
    }

    /// Whether the process's ticker thread closes this breaker's windows
    /// (see [`Ticker`](crate::Ticker)). By default it does, with nothing
    /// else to set up or keep: the breaker keeps the thread running (the
    /// first such breaker starts it, the last one dropped stops it), so a
    /// breaker built with the defaults judges its windows on time, on any
    /// clock but one:
    ///
    /// * a [`ManualClock`](crate::clock::ManualClock) is driven by hand,
    ///   and so is the breaker on it: the test calls [`Breaker::tick`]
    ///   (`ticker(true)` puts it on the thread).
    ///
    /// A breaker on [`ClockSource::tokio`] is on the thread too, which
    /// reads tokio's clock in the context of the runtime the breaker was
    /// built in (if any), so it reads the time the runtime's timers and the
    /// breaker's calls read, whether that runtime is running, idle or gone.
    /// Under a paused clock (`start_paused`), the thread still wakes on the
    /// real clock: windows that virtual time runs through in an instant are
    /// closed together at its next wake (judged as one span), and it adds
    /// no timer to the runtime (so auto-advance is not disturbed). To close
    /// windows on virtual time, one by one, build with `ticker(false)` and
    /// tick by hand or with [`tick_every`](crate::tick_every).
    ///
    /// `ticker(false)`: only [`Breaker::tick`] closes the windows (a
    /// runtime that owns its timers, a thread-per-core server ticking its
    /// own breakers, a deterministic test).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tailguard::{Breaker, Ticker};
    ///
    /// // Nothing else to start or keep: the ticker runs for this breaker.
    /// let b = Breaker::builder().window(Duration::from_millis(10)).build()?;
    /// assert!(Ticker::is_running());
    /// b.allow()?.record(true);
    /// std::thread::sleep(Duration::from_millis(50));
    /// assert!(b.snapshot().window.closed_at >= Duration::from_millis(10));
    ///
    /// // Driven by hand instead.
    /// let by_hand = Breaker::builder().ticker(false).build()?;
    /// by_hand.tick();
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn ticker(mut self, on: bool) -> Self {
        self.register_with_ticker = Some(on);
        self
    }

    /// The consumer's name, for metrics and tracing (default none; a
    /// [`Registry`](crate::Registry) sets it).
    ///
    /// ```
    /// let b = tailguard::Breaker::builder().name("pricing").build().unwrap();
    /// assert_eq!(b.name(), Some("pricing"));
    /// ```
    pub fn name(mut self, name: &str) -> Self {
        self.name = Some(name.into());
        self
    }

    /// Flag the breaker as flapping when more than `cycles` OPEN →
    /// HALF_OPEN → OPEN cycles (re-opens after a probe) happen within
    /// `within` (default: more than 5 within 60 s). The flag shows in
    /// [`Snapshot::flapping`](crate::Snapshot::flapping) and on the
    /// transition that raised it; it clears once the rate drops. Accepted:
    /// 1 to 64 cycles, `within` up to one day.
    ///
    /// ```
    /// # use std::time::Duration;
    /// let err = tailguard::Breaker::builder().flapping(0, Duration::from_secs(60)).build().unwrap_err();
    /// assert_eq!(err.field(), "flapping");
    /// ```
    pub fn flapping(mut self, cycles: u32, within: Duration) -> Self {
        self.flapping = (cycles, within);
        self
    }

    /// Judges windows by latency relative to the consumer's own baseline
    /// too (default: off). Opt-in; the settings and their defaults are
    /// [`RelativeLatency`]'s.
    ///
    /// A window breaches when more than `1 − q` of its calls (`q` is
    /// [`quantile`](Self::quantile)) were slower than
    /// `clamp(k × baseline, floor, ceiling)`, where `baseline` is the
    /// consumer's own latency at `q`, learned from its healthy windows; it
    /// breaches too if the absolute rule
    /// ([`latency_threshold`](Self::latency_threshold)) says so, when that
    /// was set explicitly (otherwise the absolute threshold is the
    /// ceiling). A window is judged by one threshold either way: the lower
    /// of the two, shown in [`WindowStats::threshold`](crate::WindowStats::threshold),
    /// and its slow calls are those slower than it. A probe is judged by
    /// the same threshold, so a consumer that recovered to half its
    /// outage's latency but not to its baseline does not close the breaker.
    ///
    /// **Exact, at window close.** The relative threshold is a bucket edge
    /// of the latency sketch: the first edge at or above `k × baseline`,
    /// at most one bucket (a factor `2^(1/8)`, 9.05%) above it, clamped to
    /// the edges at or above `floor` and `ceiling`. The slow count for it
    /// is read off the buckets the shards already count, so the hot path
    /// is unchanged; a call exactly at the edge is not slow, one
    /// nanosecond above it is.
    ///
    /// **Learning that an outage cannot poison.** The baseline is the
    /// `q`-quantile of pools of healthy calls (at least `10 / (1 − q)`
    /// calls: 1000 at P99, from one window or several): only windows the
    /// rule judged (CLOSED, normal or metrics-only mode, not in a recovery
    /// ramp nor the window after one, no transition), dense (`min_calls`
    /// or more), not breaching, and with at most 10% of their calls failed
    /// (fast failures would teach a baseline the good calls never meet).
    /// A window that breaches or may not be judged (OPEN, HALF_OPEN, forced
    /// modes, a ramp, a span straddling a transition) empties the pool; a
    /// sparse one is skipped. It falls quickly (half the distance to each
    /// lower observation) and rises by at most
    /// [`max_rise_per_hour`](RelativeLatency::max_rise_per_hour) per hour
    /// of healthy windows: so a consumer that degrades by more than that
    /// is caught (at the defaults, `k = 2` and ×1.5 an hour, one that
    /// slows by 3% a minute breaches after about 30 minutes; see
    /// `docs/design.md`, "Relative latency"), and one that degrades by
    /// ×1.5 an hour or less is followed, until it reaches the ceiling. Its
    /// first [`warmup`](RelativeLatency::warmup) observations are averaged,
    /// and until then the rule judges by the ceiling alone (a cold start;
    /// [`initial_baseline`](RelativeLatency::initial_baseline) skips it).
    ///
    /// **Operable.** [`Snapshot::latency_baseline`](crate::Snapshot::latency_baseline)
    /// and [`Breaker::latency_baseline`](crate::Breaker::latency_baseline)
    /// read it, [`Breaker::reset_baseline`](crate::Breaker::reset_baseline)
    /// starts it cold again, [`Breaker::seed_baseline`](crate::Breaker::seed_baseline)
    /// sets it. [`Breaker::reset`](crate::Breaker::reset) and the overrides
    /// keep it (a forced mode learns nothing).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tailguard::{clock::ManualClock, Breaker, RelativeLatency, State};
    ///
    /// let clock = ManualClock::new();
    /// let b = Breaker::builder()
    ///     .clock(clock.clone())
    ///     .relative_latency(RelativeLatency::new().initial_baseline(Duration::from_millis(2)))
    ///     .trip_windows(1)
    ///     .build()?;
    /// // Twice the baseline (4 ms), to the bucket: 10 ms calls are slow,
    /// // although the 1 s ceiling is far away.
    /// assert!(b.snapshot().window.threshold < Duration::from_millis(5));
    /// for _ in 0..100 {
    ///     b.allow()?.record_latency(Duration::from_millis(10), true);
    /// }
    /// clock.advance(Duration::from_secs(1));
    /// b.tick();
    /// assert_eq!(b.state(), State::Open);
    ///
    /// let err = Breaker::builder().relative_latency(RelativeLatency::new().multiplier(1.0)).build().unwrap_err();
    /// assert_eq!(err.field(), "relative_latency");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn relative_latency(mut self, rule: RelativeLatency) -> Self {
        self.relative = Some(rule);
        self
    }

    /// Hands traffic back gradually after a recovery (default: off). When
    /// the probes close the breaker, it admits a share of the calls that
    /// rises linearly from none to all over `ramp`, and rejects the rest
    /// with [`RejectReason::Ramping`](crate::RejectReason::Ramping)
    /// (counted in [`Rejections::ramping`](crate::Rejections::ramping)),
    /// with a retry hint of one window or the rest of the ramp if shorter.
    /// The state is CLOSED throughout and the trip rules stay armed: a
    /// trip during the ramp, or in the window after it (which may hold
    /// calls the ramp admitted), re-opens with the next backoff (the level
    /// is kept until the ramp ends or an override ends it, then reset). Which calls are admitted is
    /// decided lock-free by a counter, not by chance: of any `n`
    /// consecutive calls, the share admitted is the ramp's to within a few
    /// calls, the same on every run under a manual clock. A metrics-only
    /// breaker admits them all and counts the ones it would have rejected
    /// as shadow rejections. Accepted: 1 ns to 1 h.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tailguard::{clock::ManualClock, Breaker, RejectReason};
    ///
    /// let clock = ManualClock::new();
    /// let b = Breaker::builder()
    ///     .clock(clock.clone())
    ///     .success_to_close(1)
    ///     .recovery_ramp(Duration::from_secs(10))
    ///     .build()?;
    /// b.trip_now();
    /// clock.advance(Duration::from_secs(1));
    /// b.allow()?.record_latency(Duration::from_millis(1), true); // the probe closes it
    /// clock.advance(Duration::from_secs(5)); // half way
    /// let admitted = (0..1000).filter(|_| b.allow().map(|p| p.record(true)).is_ok()).count();
    /// assert!((495..=505).contains(&admitted), "{admitted}");
    /// assert_eq!(b.allow().err().map(|r| r.reason()).unwrap_or(RejectReason::Ramping), RejectReason::Ramping);
    /// clock.advance(Duration::from_secs(5));
    /// assert!((0..1000).all(|_| b.allow().is_ok()));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn recovery_ramp(mut self, ramp: Duration) -> Self {
        self.recovery_ramp = Some(ramp);
        self
    }

    /// Validates every field and builds the breaker; unless it is off the
    /// ticker (see [`ticker`](Self::ticker)), registers it with the
    /// process's ticker thread, started if it is not running.
    ///
    /// # Errors
    /// A [`ConfigError`] naming the first bad field, or one for `"ticker"`
    /// ([`ConfigErrorKind::TickerThread`](crate::ConfigErrorKind::TickerThread))
    /// if the operating system refused to start the ticker thread.
    ///
    /// ```
    /// let b = tailguard::Breaker::builder().build()?;
    /// assert_eq!(b.state(), tailguard::State::Closed);
    /// # Ok::<(), tailguard::ConfigError>(())
    /// ```
    pub fn build(self) -> Result<Breaker, ConfigError> {
        let name = self.name.clone();
        let (config, sizes, clock, listener, ticking) = self.validate()?;
        #[cfg(all(feature = "tokio", not(tailguard_loom)))]
        let runtime = if clock.is_tokio() {
            tokio::runtime::Handle::try_current().ok()
        } else {
            None
        };
        let register = ticking == Ticking::Thread;
        #[cfg(not(tailguard_loom))]
        let lease = if register {
            let lease = crate::Ticker::start().map_err(|e| {
                ConfigError::new(
                    "ticker",
                    K::TickerThread,
                    format!(
                        "the ticker thread could not start ({e}); retry, or build with .ticker(false) and call tick()"
                    ),
                )
            })?;
            Some(lease)
        } else {
            None
        };
        #[cfg(tailguard_loom)]
        let _ = register;
        let breaker = Breaker::from_config(
            config,
            sizes,
            clock,
            listener,
            name,
            #[cfg(not(tailguard_loom))]
            lease,
        );
        #[cfg(not(tailguard_loom))]
        if register {
            crate::ticker::register(&breaker.inner);
        }
        #[cfg(all(feature = "tokio", not(tailguard_loom)))]
        if let Some(runtime) = runtime {
            breaker.read_in(runtime);
        }
        Ok(breaker)
    }

    #[allow(clippy::type_complexity)]
    fn validate(self) -> Result<(Config, Sizes, ClockSource, Vec<Listener>, Ticking), ConfigError> {
        // Each message names the method and the value given, then the range
        // accepted (and, for a conflict, the other setting, and whether it
        // is a default the caller never set).
        // `call` is the setter as the caller wrote it, with its arguments.
        let span_of = |field: &'static str, call: &str, d: Duration, min: Duration, max: Duration| {
            let accepted = format!("accepted: {min:?} to {max:?}");
            if d.is_zero() {
                Err(ConfigError::new(
                    field,
                    K::Zero,
                    format!("{call} must be above zero ({accepted})"),
                ))
            } else if d < min {
                Err(ConfigError::new(
                    field,
                    K::OutOfRange,
                    format!("{call} is below the minimum, {min:?} ({accepted})"),
                ))
            } else if d > max {
                Err(ConfigError::new(
                    field,
                    K::TooLarge,
                    format!("{call} is above the maximum, {max:?} ({accepted})"),
                ))
            } else {
                Ok(duration_nanos_saturating(d))
            }
        };
        let span = |field: &'static str, d: Duration, min: Duration, max: Duration| {
            span_of(field, &format!("{field}({d:?})"), d, min, max)
        };
        // `call` shows the argument as the caller wrote it, given its Debug.
        let fraction_of = |field: &'static str, call: &dyn Fn(&str) -> String, v: f64| {
            if v.is_nan() {
                Err(ConfigError::new(
                    field,
                    K::NotANumber,
                    format!("{} must be a number in [0, 1]", call("NaN")),
                ))
            } else if !(0.0..=1.0).contains(&v) {
                Err(ConfigError::new(
                    field,
                    K::OutOfRange,
                    format!("{} must lie in [0, 1]", call(&format!("{v:?}"))),
                ))
            } else {
                Ok(v)
            }
        };
        let fraction = |field: &'static str, v: f64| fraction_of(field, &|v| format!("{field}({v})"), v);
        // A count kept in 8 bits of the state word.
        let small = |field: &'static str, v: u32| {
            if v == 0 {
                Err(ConfigError::new(
                    field,
                    K::Zero,
                    format!("{field}(0) must be at least 1 (accepted: 1 to 255)"),
                ))
            } else if v > 255 {
                Err(ConfigError::new(
                    field,
                    K::TooLarge,
                    format!("{field}({v}) must be at most 255 (accepted: 1 to 255)"),
                ))
            } else {
                Ok(v)
            }
        };
        let default_note = |set: bool| if set { "" } else { ", its default" };

        let threshold_ns = span(
            "latency_threshold",
            self.latency_threshold,
            Duration::from_nanos(1),
            MAX_SPAN,
        )?;
        let relative = match self.relative {
            Some(r) => Some((self.relative_rule(&r, quantile_or_default(self.quantile))?, r)),
            None => None,
        };
        // With the relative rule and no explicit absolute threshold, the
        // ceiling is the absolute threshold: the lower of the two judges a
        // window, and the relative one never exceeds the ceiling.
        let threshold_ns = match relative {
            Some((_, r)) if !self.explicit.latency_threshold => duration_nanos_saturating(r.ceiling),
            _ => threshold_ns,
        };
        let ramp_ns = match self.recovery_ramp {
            Some(d) => span("recovery_ramp", d, Duration::from_nanos(1), MAX_SPAN)?,
            None => 0,
        };
        let quantile = self.quantile;
        let quantile_ppb = if quantile.is_nan() {
            0
        } else {
            ppb(quantile.clamp(0.0, 1.0))
        };
        if quantile.is_nan() {
            return Err(ConfigError::new(
                "quantile",
                K::NotANumber,
                "quantile(NaN) must be a number in (0, 1]",
            ));
        }
        if !(0.0..=1.0).contains(&quantile) || quantile_ppb == 0 {
            return Err(ConfigError::new(
                "quantile",
                K::OutOfRange,
                format!(
                    "quantile({quantile}) must lie in (0, 1]: above 0 (at least 1e-9) and at most 1{}",
                    if (50.0..=100.0).contains(&quantile) {
                        // To the digits given: 99.9 / 100 is 0.9990000000000001.
                        let digits = format!("{quantile}").split('.').nth(1).map_or(0, str::len) + 2;
                        let q = format!("{:.*}", digits, quantile / 100.0);
                        format!(
                            " (a percentile? P{quantile} is quantile({}))",
                            q.trim_end_matches('0').trim_end_matches('.')
                        )
                    } else {
                        String::new()
                    }
                ),
            ));
        }
        let trip_windows = small("trip_windows", self.trip_windows)?;
        let window_ns = span("window", self.window, MIN_WINDOW, MAX_SPAN)?;
        let error_rate = fraction("error_rate", self.error_rate)?;
        // A rolling span: at most `MAX_ROLLING_WINDOWS` windows of the
        // window length, which the message names (and whether it is the
        // default).
        let windows_in = |field: &'static str, call: &str, d: Duration| -> Result<u64, ConfigError> {
            let max = self.window.saturating_mul(MAX_ROLLING_WINDOWS as u32);
            let accepted = format!(
                "accepted: 1ns to {max:?}, {MAX_ROLLING_WINDOWS} windows of {:?}{}",
                self.window,
                default_note(self.explicit.window)
            );
            let n = d.as_nanos().div_ceil(u128::from(window_ns));
            if d.is_zero() {
                Err(ConfigError::new(
                    field,
                    K::Zero,
                    format!("{call} must be above zero ({accepted})"),
                ))
            } else if n > u128::from(MAX_ROLLING_WINDOWS) {
                Err(ConfigError::new(
                    field,
                    K::TooLarge,
                    format!("{call} covers {n} windows, more than {MAX_ROLLING_WINDOWS} ({accepted})"),
                ))
            } else {
                Ok(n as u64)
            }
        };
        let error_windows = match self.error_window {
            Some(d) => windows_in("error_window", &format!("error_window({d:?})"), d)?,
            None => 10,
        };
        let failure_count = match self.failure_count {
            Some((0, within)) => {
                return Err(ConfigError::new(
                    "failure_count",
                    K::Zero,
                    format!("failure_count(0, {within:?}) needs at least one failure"),
                ))
            }
            Some((n, within)) => Some((
                core::num::NonZeroU32::new(n).expect("zero was refused above"),
                windows_in("failure_count", &format!("failure_count({n}, {within:?})"), within)?,
            )),
            None => None,
        };
        let base_ns = span("base_backoff", self.base_backoff, Duration::from_nanos(1), MAX_BACKOFF)?;
        let max_ns = span("max_backoff", self.max_backoff, Duration::from_nanos(1), MAX_BACKOFF)?;
        if base_ns > max_ns {
            // Blame the one the caller set (the base, if both were).
            let (base, max) = (self.base_backoff, self.max_backoff);
            return Err(if self.explicit.base_backoff || !self.explicit.max_backoff {
                ConfigError::new(
                    "base_backoff",
                    K::Inconsistent,
                    format!(
                        "base_backoff({base:?}) is above max_backoff ({max:?}{}); \
                         lower base_backoff to at most {max:?} or raise max_backoff",
                        default_note(self.explicit.max_backoff)
                    ),
                )
            } else {
                ConfigError::new(
                    "max_backoff",
                    K::Inconsistent,
                    format!(
                        "max_backoff({max:?}) is below base_backoff ({base:?}{}); \
                         raise max_backoff to at least {base:?} or lower base_backoff",
                        default_note(self.explicit.base_backoff)
                    ),
                )
            });
        }
        let jitter = match self.jitter {
            Jitter::Bounded(f) => {
                Jitter::Bounded(fraction_of("jitter", &|v| format!("jitter(Jitter::Bounded({v}))"), f)?)
            }
            other => other,
        };
        let probes = small("half_open_probes", self.half_open_probes)?;
        let successes = small("success_to_close", self.success_to_close)?;
        let lease_ns = match self.probe_lease {
            Some(d) => {
                let accepted = format!(
                    "accepted: latency_threshold ({:?}{}) to {MAX_BACKOFF:?}",
                    self.latency_threshold,
                    default_note(self.explicit.latency_threshold)
                );
                let ns = duration_nanos_saturating(d);
                if d.is_zero() {
                    return Err(ConfigError::new(
                        "probe_lease",
                        K::Zero,
                        format!("probe_lease(0ns) must be above zero ({accepted})"),
                    ));
                } else if ns < threshold_ns {
                    return Err(ConfigError::new(
                        "probe_lease",
                        K::Inconsistent,
                        format!(
                            "probe_lease({d:?}) is below latency_threshold: a probe is slow before its lease ends ({accepted})"
                        ),
                    ));
                } else if d > MAX_BACKOFF {
                    return Err(ConfigError::new(
                        "probe_lease",
                        K::TooLarge,
                        format!("probe_lease({d:?}) is above the maximum, {MAX_BACKOFF:?} ({accepted})"),
                    ));
                }
                ns
            }
            None => threshold_ns.saturating_mul(10).max(1_000_000_000),
        };
        let shards = match self.shards {
            Some(0) => {
                return Err(ConfigError::new(
                    "shards",
                    K::Zero,
                    "shards(0) must be at least 1 (accepted: 1 to 1024)",
                ))
            }
            Some(n) if n > MAX_SHARDS => {
                return Err(ConfigError::new(
                    "shards",
                    K::TooLarge,
                    format!("shards({n}) must be at most {MAX_SHARDS} (accepted: 1 to {MAX_SHARDS})"),
                ))
            }
            Some(n) => n.next_power_of_two(),
            None => default_shards(),
        };
        if self.local_handles > MAX_LOCAL_HANDLES {
            return Err(ConfigError::new(
                "local_handles",
                K::TooLarge,
                format!(
                    "local_handles({}) must be at most {MAX_LOCAL_HANDLES} (accepted: 0 to {MAX_LOCAL_HANDLES})",
                    self.local_handles
                ),
            ));
        }
        let flap_cycles = match self.flapping.0 {
            0 => {
                return Err(ConfigError::new(
                    "flapping",
                    K::Zero,
                    format!(
                        "flapping(0, {:?}) needs at least one cycle (accepted: 1 to 64)",
                        self.flapping.1
                    ),
                ))
            }
            n if n > 64 => {
                return Err(ConfigError::new(
                    "flapping",
                    K::TooLarge,
                    format!(
                        "flapping({n}, {:?}) must count at most 64 cycles (accepted: 1 to 64)",
                        self.flapping.1
                    ),
                ))
            }
            n => n,
        };
        let flap_ns = span_of(
            "flapping",
            &format!("flapping({}, {:?})", self.flapping.0, self.flapping.1),
            self.flapping.1,
            Duration::from_nanos(1),
            MAX_BACKOFF,
        )?;
        let ring_len = error_windows.max(failure_count.map_or(1, |(_, w)| w)).max(1) as usize;

        let config = Config {
            threshold_ns,
            window_ns,
            rule: Rule {
                slow_ppb: PPB - quantile_ppb,
                trip_windows: trip_windows as u8,
                min_calls: self.min_calls,
                error_ppb: ppb(error_rate),
                failures: failure_count.map(|(n, _)| n),
            },
            error_windows: error_windows as u32,
            failure_windows: failure_count.map_or(0, |(_, w)| w as u32),
            base_ns,
            max_ns,
            jitter,
            probes: probes as u8,
            successes: successes as u8,
            lease_ns,
            cancel: self.cancel,
            track_in_flight: self.track_in_flight,
            flap_cycles,
            flap_ns,
            relative: relative.map(|(rule, given)| {
                Box::new((
                    Relative {
                        rise_per_window: baseline::rise_per_window(given.max_rise_per_hour, window_ns),
                        ..rule
                    },
                    given,
                ))
            }),
            ramp_ns,
        };
        let sizes = Sizes {
            shards,
            local_handles: self.local_handles,
            ring_len,
        };
        let clock = self.clock.unwrap_or_default();
        let ticking = match self.register_with_ticker {
            Some(true) => Ticking::Thread,
            Some(false) => Ticking::ByHand,
            None if clock.ticked_by_default() => Ticking::Thread,
            None => Ticking::ByHand,
        };
        Ok((config, sizes, clock, self.listeners, ticking))
    }
}

/// The quantile the relative rule learns at: the rule's own, or the
/// default while `quantile` is invalid (its own error comes first).
fn quantile_or_default(q: f64) -> u64 {
    if q.is_nan() || !(0.0..=1.0).contains(&q) || ppb(q) == 0 {
        ppb(0.99)
    } else {
        ppb(q)
    }
}

impl BreakerBuilder {
    /// Validates the relative rule's settings (`quantile_ppb`: the rule's
    /// quantile); the rise per window is set once the window is known.
    fn relative_rule(&self, r: &RelativeLatency, quantile_ppb: u64) -> Result<Relative, ConfigError> {
        let field = "relative_latency";
        let bad = |kind, what: String| Err(ConfigError::new(field, kind, what));
        let k = r.multiplier;
        if k.is_nan() {
            return bad(
                K::NotANumber,
                "multiplier(NaN) must be a number above 1, at most 1000".into(),
            );
        }
        if k <= 1.0 {
            return bad(
                K::OutOfRange,
                format!("multiplier({k:?}) must be above 1 (a call at its own baseline is not slow); accepted: above 1, at most 1000"),
            );
        }
        if k > 1000.0 {
            return bad(
                K::TooLarge,
                format!("multiplier({k:?}) must be at most 1000 (accepted: above 1, at most 1000)"),
            );
        }
        let rise = r.max_rise_per_hour;
        if rise.is_nan() {
            return bad(
                K::NotANumber,
                "max_rise_per_hour(NaN) must be a number from 1 to 1000".into(),
            );
        }
        if rise < 1.0 {
            return bad(
                K::OutOfRange,
                format!(
                    "max_rise_per_hour({rise:?}) must be at least 1 (1: the baseline never rises); accepted: 1 to 1000"
                ),
            );
        }
        if rise > 1000.0 {
            return bad(
                K::TooLarge,
                format!("max_rise_per_hour({rise:?}) must be at most 1000 (accepted: 1 to 1000)"),
            );
        }
        let ceiling = r.ceiling;
        if ceiling < Duration::from_micros(1) {
            return bad(
                if ceiling.is_zero() { K::Zero } else { K::OutOfRange },
                format!("ceiling({ceiling:?}) must be at least 1µs (accepted: 1µs to {MAX_CEILING:?})"),
            );
        }
        if ceiling > MAX_CEILING {
            return bad(
                K::TooLarge,
                format!(
                    "ceiling({ceiling:?}) must be at most {MAX_CEILING:?}, within the latency sketch's 68.7 s \
                     (accepted: 1µs to {MAX_CEILING:?})"
                ),
            );
        }
        if self.explicit.latency_threshold && self.latency_threshold > ceiling {
            return Err(ConfigError::new(
                "latency_threshold",
                K::Inconsistent,
                format!(
                    "latency_threshold({:?}) is above the relative rule's ceiling ({ceiling:?}): a call slower \
                     than the ceiling is slow already; lower latency_threshold or raise the ceiling",
                    self.latency_threshold
                ),
            ));
        }
        if r.floor > ceiling {
            return bad(
                K::Inconsistent,
                format!(
                    "floor({:?}) is above ceiling({ceiling:?}); lower the floor or raise the ceiling",
                    r.floor
                ),
            );
        }
        if r.warmup == 0 {
            return bad(
                K::Zero,
                "warmup(0) must be at least 1 observation (accepted: 1 to 1000)".into(),
            );
        }
        if r.warmup > 1000 {
            return bad(
                K::TooLarge,
                format!(
                    "warmup({}) must be at most 1000 observations (accepted: 1 to 1000)",
                    r.warmup
                ),
            );
        }
        let initial = match r.initial_baseline {
            Some(d) if d.is_zero() => {
                return bad(
                    K::Zero,
                    format!("initial_baseline(0ns) must be above zero (accepted: 1ns to {MAX_SPAN:?})"),
                )
            }
            Some(d) if d > MAX_SPAN => {
                return bad(
                    K::TooLarge,
                    format!("initial_baseline({d:?}) must be at most {MAX_SPAN:?} (accepted: 1ns to {MAX_SPAN:?})"),
                )
            }
            Some(d) => Some(baseline::units_of_ns(duration_nanos_saturating(d))),
            None => None,
        };
        let edge_at_or_above = |d: Duration| crate::sketch::key_index(duration_nanos_saturating(d));
        Ok(Relative {
            multiplier: k,
            floor_index: edge_at_or_above(r.floor),
            ceiling_index: edge_at_or_above(ceiling),
            rise_per_window: 0,
            samples: baseline::samples(PPB - quantile_ppb),
            warmup: r.warmup,
            initial,
            quantile_ppb,
        })
    }
}

/// Who closes a breaker's windows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ticking {
    /// The process's ticker thread.
    Thread,
    /// Only `Breaker::tick`.
    ByHand,
}

fn default_shards() -> usize {
    #[cfg(tailguard_loom)]
    {
        1
    }
    #[cfg(not(tailguard_loom))]
    {
        std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .min(MAX_SHARDS)
            .next_power_of_two()
    }
}
