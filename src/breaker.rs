//! The breaker: hot path (`allow`, permits), window close (`tick`), overrides
//! and snapshots.

use crate::clock::ClockSource;
use crate::config::{BreakerBuilder, CancelPolicy, Config, Sizes};
use crate::events::{Events, Listener};
use crate::shard::{bucket_of, Counts, LocalShard, Shards};
use crate::state::{Decision, Mode, State, StateCell, Word, FAST_PATH_MASK, GEN_MASK, MAX_LEVEL, OPEN_NORMAL};
use crate::sync::{Arc, AtomicU64, Mutex, Ordering};
use core::fmt;
use core::marker::PhantomData;
use core::mem::ManuallyDrop;
use std::time::Duration;

/// Why a transition happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Reason {
    /// More than `1 − q` of the calls were slow for `trip_windows` windows.
    LatencyBreach,
    /// The rolling error rate went above the limit.
    ErrorRate,
    /// `failure_count` failures within its span.
    FailureCount,
    /// The backoff ran out; probing starts.
    BackoffElapsed,
    /// A probe failed.
    ProbeFailed,
    /// A probe was slower than the latency threshold.
    ProbeSlow,
    /// A probe was out longer than the probe lease: taken for slow.
    ProbeLeaseExpired,
    /// `success_to_close` consecutive good probes.
    ProbesSucceeded,
    /// [`Breaker::force_open`].
    ForcedOpen,
    /// [`Breaker::force_closed`].
    ForcedClosed,
    /// [`Breaker::disable`].
    Disabled,
    /// [`Breaker::metrics_only`].
    MetricsOnly,
    /// [`Breaker::reset`].
    Reset,
    /// [`Breaker::trip_now`].
    ManualTrip,
}

/// One transition, as given to the listener set with
/// [`BreakerBuilder::on_transition`].
///
/// ```
/// use std::sync::{Arc, Mutex};
/// use tailguard::{Breaker, Reason, State};
///
/// let seen = Arc::new(Mutex::new(Vec::new()));
/// let sink = Arc::clone(&seen);
/// let b = Breaker::builder()
///     .on_transition(move |t| sink.lock().unwrap().push((t.to, t.reason, t.generation)))
///     .build()?;
/// b.force_open();
/// b.reset();
/// assert_eq!(
///     *seen.lock().unwrap(),
///     vec![(State::Open, Reason::ForcedOpen, 1), (State::Closed, Reason::Reset, 2)]
/// );
/// # Ok::<(), tailguard::ConfigError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transition {
    /// The state before.
    pub from: State,
    /// The state after.
    pub to: State,
    /// The override mode before.
    pub from_mode: Mode,
    /// The override mode after.
    pub to_mode: Mode,
    /// The generation after the transition (30 bits, wrapping).
    pub generation: u32,
    /// Why.
    pub reason: Reason,
    /// When, on the breaker's clock, since the breaker was built.
    pub at: Duration,
    /// Whether the breaker is flapping after this transition (see
    /// [`BreakerBuilder::flapping`]); a re-open that crosses the limit is the
    /// event that raises the flag.
    pub flapping: bool,
}

/// Why `allow` said no.
// A whole word, like every field of a permit: in `Result<Permit, Rejected>`
// the rejection shares the permit's bytes, and a one-byte field overlapping
// part of a permit's word sends the permit through memory on the hot path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
#[repr(u64)]
pub enum RejectReason {
    /// The breaker is OPEN and its backoff has not run out.
    Open,
    /// HALF_OPEN, and every probe slot is taken.
    ProbesBusy,
    /// Forced open by the operator.
    ForcedOpen,
}

/// The breaker rejected the call; route it to the fallback.
///
/// ```
/// use std::time::Duration;
/// use tailguard::{Breaker, RejectReason};
/// use tailguard::clock::ManualClock;
///
/// let clock = ManualClock::new();
/// let b = Breaker::builder().clock(clock.clone()).build()?;
/// b.trip_now();
/// let rejected = b.allow().unwrap_err();
/// assert_eq!(rejected.reason(), RejectReason::Open);
/// assert_eq!(rejected.retry_after(), Some(Duration::from_secs(1)));
/// # Ok::<(), tailguard::ConfigError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rejected {
    reason: RejectReason,
    /// Nanoseconds until the next probe; `u64::MAX` when unknown. Turned
    /// into a `Duration` only if asked for.
    retry_after_ns: u64,
}

impl Rejected {
    /// How long until the breaker next admits a probe, when that is known
    /// (for `Retry-After`). `None` when forced open, or when HALF_OPEN waits
    /// for a probe slot.
    ///
    /// ```
    /// let b = tailguard::Breaker::builder().build().unwrap();
    /// b.force_open();
    /// assert_eq!(b.allow().unwrap_err().retry_after(), None);
    /// ```
    pub fn retry_after(&self) -> Option<Duration> {
        (self.retry_after_ns != u64::MAX).then(|| Duration::from_nanos(self.retry_after_ns))
    }

    /// Why the call was rejected.
    ///
    /// ```
    /// let b = tailguard::Breaker::builder().build().unwrap();
    /// b.force_open();
    /// assert_eq!(b.allow().unwrap_err().reason(), tailguard::RejectReason::ForcedOpen);
    /// ```
    pub fn reason(&self) -> RejectReason {
        self.reason
    }
}

impl fmt::Display for Rejected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.reason, self.retry_after()) {
            (RejectReason::Open, Some(d)) => write!(f, "circuit open; next probe in {d:?}"),
            (RejectReason::Open, None) => write!(f, "circuit open"),
            (RejectReason::ProbesBusy, _) => write!(f, "circuit half-open; every probe slot is taken"),
            (RejectReason::ForcedOpen, _) => write!(f, "circuit forced open"),
        }
    }
}

impl std::error::Error for Rejected {}

/// The counts of one closed window.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct WindowStats {
    /// Calls that returned a verdict in the window, plus in-flight slow calls.
    pub calls: u64,
    /// Calls recorded as failures.
    pub errors: u64,
    /// Calls slower than the latency threshold (in-flight slow ones included).
    pub slow: u64,
    /// Permits dropped without a verdict.
    pub cancelled: u64,
    /// Calls still in flight at window close that had already run longer
    /// than the threshold (in-flight tracking only; also in `calls`/`slow`).
    pub in_flight_slow: u64,
    /// Verdicts (and cancellations) of permits admitted in an earlier
    /// generation, before a transition: counted here, apart from `calls`,
    /// and never judged, so calls from before a trip or a recovery never
    /// decide the windows after it.
    pub stale: u64,
    /// When the window closed, since the breaker was built.
    pub closed_at: Duration,
    /// The window's latency quantiles (of calls that returned), `None` for
    /// a window without calls. See [`LatencyQuantiles`] for the accuracy.
    pub latency: Option<LatencyQuantiles>,
}

/// Latency quantiles of one window, read at window close off the merged
/// shard buckets, which hold what a DDSketch of the window would hold.
///
/// Each value is within **4.72%** (relative) of the exact quantile of the
/// window's latencies between 1 µs and 68.7 s: the sketch's buckets are
/// `2^(1/8)` wide (relative accuracy 4.33%), and the hot path places a
/// latency within 1/256 (0.39%) of a bucket boundary possibly in the
/// neighbouring bucket. Latencies below 1 µs are reported as about 1 µs,
/// above 68.7 s as about 68.7 s. The latency-trip decision never uses these
/// estimates: it counts slow calls exactly.
///
/// ```
/// use std::time::Duration;
/// use tailguard::Breaker;
/// use tailguard::clock::ManualClock;
///
/// let clock = ManualClock::new();
/// let b = Breaker::builder().clock(clock.clone()).build()?;
/// for i in 0..1000u64 {
///     let ms = if i % 100 == 0 { 900 } else { 8 };
///     b.allow()?.record_latency(Duration::from_millis(ms), true);
/// }
/// clock.advance(Duration::from_secs(1));
/// b.tick();
/// let q = b.snapshot().window.latency.unwrap();
/// let within = |got: Duration, want: f64| (got.as_secs_f64() / want - 1.0).abs() <= 0.0472;
/// assert!(within(q.p50, 0.008) && within(q.p999, 0.9));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct LatencyQuantiles {
    /// The median.
    pub p50: Duration,
    /// The 90th percentile.
    pub p90: Duration,
    /// The 99th percentile.
    pub p99: Duration,
    /// The 99.9th percentile.
    pub p999: Duration,
}

/// The stated relative error of [`LatencyQuantiles`].
pub const QUANTILE_RELATIVE_ERROR: f64 = 0.0472;

/// Everything the breaker knows, read at once.
///
/// ```
/// use std::time::Duration;
/// use tailguard::{Breaker, State};
/// use tailguard::clock::ManualClock;
///
/// let clock = ManualClock::new();
/// let b = Breaker::builder().clock(clock.clone()).build()?;
/// b.allow()?.record_latency(Duration::from_millis(80), true);
/// b.allow()?.record_latency(Duration::from_millis(2), false);
/// clock.advance(Duration::from_secs(1));
/// b.tick();
/// let s = b.snapshot();
/// assert_eq!(s.state, State::Closed);
/// assert_eq!((s.window.calls, s.window.errors, s.window.slow), (2, 1, 1));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct Snapshot {
    /// The state (under metrics-only: the state the breaker would be in).
    pub state: State,
    /// The override mode.
    pub mode: Mode,
    /// The generation: +1 per transition.
    pub generation: u32,
    /// Transitions into OPEN so far (trips and re-opens; forcing does not count).
    pub trip_count: u64,
    /// The backoff level: the current or next OPEN lasts `base × 2^level`, capped.
    pub backoff_level: u8,
    /// Consecutive breaching windows so far (CLOSED only).
    pub consecutive_breaches: u8,
    /// Probes in flight (HALF_OPEN only).
    pub probes_in_flight: u8,
    /// Consecutive good probes so far (HALF_OPEN only).
    pub probe_successes: u8,
    /// When OPEN: how long until the next probe is admitted.
    pub next_probe_in: Option<Duration>,
    /// When OPEN: how long it has been open.
    pub open_for: Option<Duration>,
    /// The last closed window.
    pub window: WindowStats,
    /// Calls a metrics-only breaker admitted that it would have rejected.
    pub shadow_rejections: u64,
    /// Transition events the listener never got: its queue of 64 was full
    /// (see [`BreakerBuilder::on_transition`]).
    pub events_lost: u64,
    /// Panics of the listener, caught (the listener's own work for that
    /// event is lost; delivery goes on with the next event).
    pub listener_panics: u64,
    /// Time since the breaker was built, on its clock.
    pub uptime: Duration,
    /// Totals over every closed window since the breaker was built.
    pub totals: Totals,
    /// Whether the breaker is flapping (see [`BreakerBuilder::flapping`]).
    pub flapping: bool,
    /// The settings windows are judged by, to read the counts against.
    pub limits: Limits,
}

/// The settings a breaker judges its windows by, as built (spans rounded to
/// whole windows, as the breaker uses them): part of every [`Snapshot`], so
/// that whoever reads the counts (a dashboard, an alert) can tell whether a
/// window breached without knowing the configuration.
///
/// ```
/// use std::time::Duration;
///
/// let b = tailguard::Breaker::builder().min_calls(50).build()?;
/// let limits = b.snapshot().limits;
/// assert_eq!(limits.latency_threshold, Duration::from_millis(50));
/// assert_eq!(limits.min_calls, 50);
/// assert!((limits.slow_fraction - 0.01).abs() < 1e-12); // the P99 rule
/// # Ok::<(), tailguard::ConfigError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct Limits {
    /// Length of a window ([`BreakerBuilder::window`]).
    pub window: Duration,
    /// A call slower than this is slow ([`BreakerBuilder::latency_threshold`]).
    pub latency_threshold: Duration,
    /// A window breaches when more than this fraction of its calls is slow:
    /// `1 − quantile` ([`BreakerBuilder::quantile`]).
    pub slow_fraction: f64,
    /// Consecutive breaching windows that trip ([`BreakerBuilder::trip_windows`]).
    pub trip_windows: u8,
    /// Windows (or error spans) with fewer calls are not judged
    /// ([`BreakerBuilder::min_calls`]).
    pub min_calls: u64,
    /// Error rate above which the breaker trips ([`BreakerBuilder::error_rate`]).
    pub error_rate: f64,
    /// The span the error rate is taken over ([`BreakerBuilder::error_window`]).
    pub error_window: Duration,
    /// Failures within a span that trip ([`BreakerBuilder::failure_count`]).
    pub failure_count: Option<(u64, Duration)>,
}

/// Cumulative counts over every closed window (Prometheus counters).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Totals {
    /// Calls (in-flight slow calls included once).
    pub calls: u64,
    /// Failed calls.
    pub errors: u64,
    /// Slow calls.
    pub slow: u64,
    /// Cancelled permits.
    pub cancelled: u64,
    /// Verdicts of permits from an earlier generation (see
    /// [`WindowStats::stale`]).
    pub stale: u64,
}

/// Error from [`Breaker::local_handle`]: every reserved local shard is taken.
///
/// ```
/// let b = tailguard::Breaker::builder().local_handles(1).build().unwrap();
/// let first = b.local_handle().unwrap();
/// assert!(b.local_handle().is_err());
/// drop(first);
/// assert!(b.local_handle().is_ok());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NoLocalShard;

impl fmt::Display for NoLocalShard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("every local shard reserved with `local_handles` is taken")
    }
}

impl std::error::Error for NoLocalShard {}

/// Window-close state, owned by whoever holds the tick lock.
#[derive(Debug)]
struct TickState {
    /// End of the current window, relative nanoseconds.
    window_end: u64,
    /// The generation read just before the last drain of the counters: the
    /// counts drained at the next close are judged only if the generation is
    /// still this one after that drain (nothing between two drains straddles
    /// a transition), whatever the tick cadence.
    window_gen: u32,
    /// Per-window (calls, errors), newest at `ring_pos - 1`.
    ring: Box<[(u32, u32)]>,
    ring_pos: u32,
    /// The highest time seen by window close (step-back detection).
    high: u64,
    last: WindowStats,
    totals: Totals,
}

impl TickState {
    fn clear_ring(&mut self) {
        self.ring.iter_mut().for_each(|e| *e = (0, 0));
    }

    fn push(&mut self, calls: u64, errors: u64) {
        let len = self.ring.len();
        let narrow = |n: u64| u32::try_from(n).unwrap_or(u32::MAX);
        self.ring[self.ring_pos as usize] = (narrow(calls), narrow(errors));
        self.ring_pos = ((self.ring_pos as usize + 1) % len) as u32;
    }

    /// Sum of the newest `n` windows.
    fn sum(&self, n: usize) -> (u64, u64) {
        // The newest `n` are the `n` before `ring_pos`, wrapping: the tail
        // of `[..ring_pos]`, then, if that is too short, the tail of the rest.
        let (recent, earlier) = self.ring.split_at(self.ring_pos as usize);
        let n = n.min(self.ring.len());
        let from_recent = n.min(recent.len());
        recent[recent.len() - from_recent..]
            .iter()
            .chain(&earlier[earlier.len() - (n - from_recent)..])
            .fold((0, 0), |(c, e), &(wc, we)| (c + u64::from(wc), e + u64::from(we)))
    }
}

pub(crate) struct Inner {
    state: StateCell,
    config: Config,
    clock: ClockSource,
    /// Added (wrapping) to the clock's nanoseconds to give the breaker's
    /// time: starts at minus the reading at build, and is raised when the
    /// clock is seen stepping back, so that the breaker's time never goes
    /// back past what it has acted on and keeps moving after a step.
    shift: AtomicU64,
    shards: Shards,
    /// OPEN: when the next probe may start, when it opened, and the
    /// generation these two belong to (published after the CAS, under the
    /// `flaps` lock).
    deadline: AtomicU64,
    opened_at: AtomicU64,
    deadline_gen: AtomicU64,
    /// HALF_OPEN: one lease per probe slot (see [`Lease`]).
    leases: Box<[Lease]>,
    /// In-flight tracking: the epoch of the last window close. A call never
    /// takes an earlier epoch (after a backward clock step it would look
    /// older than it is).
    flight_floor: AtomicU64,
    trip_count: AtomicU64,
    shadow_rejections: AtomicU64,
    rng: AtomicU64,
    /// Bit i set: local shard i is free.
    local_free: AtomicU64,
    tick: Mutex<TickState>,
    events: Events,
    name: Option<Box<str>>,
    /// Times of recent re-opens (a ring of `flap_cycles + 1`), and the flag.
    /// Its lock also serialises the publication of OPEN deadlines.
    flaps: Mutex<Flaps>,
    flapping: crate::sync::AtomicBool,
}

/// The lease of one probe slot: which round holds it and since when.
///
/// `tag` is 0 when free, [`Lease::CLAIMING`] while a probe stamps it, else
/// the full generation (see [`StateCell::full_generation`]) of the HALF_OPEN
/// round whose probe holds it. A probe takes an entry after the CAS that gave
/// it a slot, with its own admission time, and frees it before the CAS that
/// returns the slot; an entry of an earlier round is free for the taking
/// (its probe is stale). So an entry tagged with the current round always
/// carries the admission time of the probe that holds it.
#[derive(Debug)]
struct Lease {
    tag: AtomicU64,
    since: AtomicU64,
}

impl Lease {
    const FREE: u64 = 0;
    const CLAIMING: u64 = u64::MAX;
}

#[derive(Debug)]
struct Flaps {
    times: Box<[u64]>,
    pos: usize,
}

impl Flaps {
    /// Re-opens within `span` before `now`.
    fn count(&self, now: u64, span: u64) -> usize {
        self.times
            .iter()
            .filter(|&&t| t != u64::MAX && t <= now && now - t <= span)
            .count()
    }
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

impl fmt::Debug for Breaker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.fmt(f)
    }
}

/// What a permit is, in one word (a plain `u64` keeps the permit free of
/// enum niches, so it moves in whole registers): the generation bits of the
/// state word it was admitted under (in place, [`GEN_MASK`]), its kind in
/// bits 0–1, and for a probe its lease entry + 1 (0: none) in bits 2–10.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct Tag(u64);

impl Tag {
    const KIND: u64 = 0b11;
    const NORMAL: u64 = 0;
    const PROBE: u64 = 1;
    /// Measures nothing (disabled).
    const DISABLED: Tag = Tag(2);

    /// An ordinary call admitted under `word`.
    #[inline(always)]
    fn normal(word: Word) -> Tag {
        Tag(word.0 & GEN_MASK)
    }

    /// A HALF_OPEN probe admitted under `word`, holding lease entry
    /// `lease − 1` (0: none).
    fn probe(word: Word, lease: usize) -> Tag {
        Tag(word.0 & GEN_MASK | Self::PROBE | (lease as u64) << 2)
    }

    #[inline(always)]
    fn kind(self) -> u64 {
        self.0 & Self::KIND
    }

    fn lease(self) -> usize {
        ((self.0 >> 2) & 0x1ff) as usize
    }

    /// Whether `word` is still in the generation this permit was admitted in.
    #[inline(always)]
    fn is_current(self, word: Word) -> bool {
        (word.0 ^ self.0) & GEN_MASK == 0
    }
}

/// What a probe's verdict says.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum ProbeOutcome {
    Good,
    Failed,
    Slow,
    Cancelled,
}

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

    pub(crate) fn from_config(
        config: Config,
        sizes: Sizes,
        clock: ClockSource,
        listener: Option<Listener>,
        register: bool,
        name: Option<Box<str>>,
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
                window_end: first_window_end(origin, config.window_ns),
                window_gen: 0,
                ring,
                ring_pos: 0,
                high: 0,
                last: WindowStats::default(),
                totals: Totals::default(),
            }),
            config,
            clock,
            shift: AtomicU64::new(origin.wrapping_neg()),
            deadline: AtomicU64::new(0),
            opened_at: AtomicU64::new(0),
            deadline_gen: AtomicU64::new(u64::MAX),
            leases,
            flight_floor: AtomicU64::new(0),
            trip_count: AtomicU64::new(0),
            shadow_rejections: AtomicU64::new(0),
            rng: AtomicU64::new(seed),
            local_free: AtomicU64::new(local_free),
            events: Events::new(listener, name.clone()),
            flaps: Mutex::new(Flaps {
                times: flap_times,
                pos: 0,
            }),
            flapping: crate::sync::AtomicBool::new(false),
            name,
        });
        #[cfg(not(tailguard_loom))]
        if register {
            crate::ticker::register(&inner);
        }
        #[cfg(tailguard_loom)]
        let _ = register;
        Self { inner }
    }

    /// Asks to make a call. `Ok` carries the permit that records the call's
    /// verdict; `Err` says the breaker is open (and when it will next
    /// probe): route the call to the fallback.
    ///
    /// In CLOSED this is one atomic load and one read of the clock; it never
    /// blocks, allocates, makes a system call or runs user code (a
    /// transition it makes is delivered to the listener later, see
    /// [`BreakerBuilder::on_transition`]) in any state.
    ///
    /// ```
    /// let b = tailguard::Breaker::builder().build().unwrap();
    /// match b.allow() {
    ///     Ok(permit) => permit.record(true),
    ///     Err(rejected) => panic!("closed breaker rejected: {rejected}"),
    /// };
    /// ```
    #[inline]
    pub fn allow(&self) -> Result<Permit<'_>, Rejected> {
        self.inner.admit().map(|core| Permit { core })
    }

    /// Closes every window that is due at the clock's now, moves an OPEN
    /// breaker whose backoff ran out to HALF_OPEN, re-opens a HALF_OPEN
    /// breaker with a probe out past its lease, and then delivers the
    /// transition events waiting for the listener (see
    /// [`BreakerBuilder::on_transition`]).
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

    /// Back to normal operation: CLOSED, no override, backoff level 0, no
    /// breach windows counted. On a breaker already CLOSED with no override
    /// it is not a transition (no event, no new generation: the window in
    /// progress is judged as usual); it only clears the breach count.
    ///
    /// ```
    /// let b = tailguard::Breaker::builder().build().unwrap();
    /// b.force_open();
    /// b.reset();
    /// assert!(b.allow().is_ok());
    /// ```
    pub fn reset(&self) {
        self.inner.reset();
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
    /// [`BreakerBuilder::local_handles`] is taken.
    ///
    /// ```
    /// let b = tailguard::Breaker::builder().local_handles(1).build().unwrap();
    /// let h = b.local_handle().unwrap();
    /// h.allow().unwrap().record(true);
    /// ```
    pub fn local_handle(&self) -> Result<LocalHandle, NoLocalShard> {
        let free = &self.inner.local_free;
        let mut cur = free.load(Ordering::Acquire);
        loop {
            if cur == 0 {
                return Err(NoLocalShard);
            }
            let index = cur.trailing_zeros() as usize;
            match free.compare_exchange_weak(cur, cur & !(1 << index), Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => {
                    return Ok(LocalHandle {
                        inner: Arc::clone(&self.inner),
                        index,
                        _not_sync: PhantomData,
                    })
                }
                Err(actual) => cur = actual,
            }
        }
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

    /// The consumer's name, if one was given ([`BreakerBuilder::name`]).
    ///
    /// ```
    /// assert_eq!(tailguard::Breaker::builder().build().unwrap().name(), None);
    /// ```
    pub fn name(&self) -> Option<&str> {
        self.inner.name.as_deref()
    }

    /// Bytes this breaker holds: its own struct, its counter shards (with
    /// their latency buckets), its rolling-window ring, its flapping ring,
    /// its event queue and its name. On x86-64 at the default settings that
    /// is 752 bytes plus 640 bytes per shared shard (2,032 bytes with the 2
    /// shards of a 2-core machine, so 50 consumers take 100 KB); each
    /// reserved local handle adds about 3.4 KB, in-flight tracking 136 bytes
    /// per shard, a listener (or the `tracing` feature) a 64-event queue of
    /// about 2 KB. A listener's own captures are not counted.
    ///
    /// ```
    /// let b = tailguard::Breaker::builder().shards(2).build().unwrap();
    /// // 2,032 bytes on x86-64; about 2 KB more with the `tracing` feature.
    /// assert!(b.memory_bytes() < 8 * 1024);
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

/// The permit's data, shared by [`Permit`] and [`LocalPermit`].
struct Core<'a> {
    inner: &'a Inner,
    start: u64,
    tag: Tag,
    /// An ordinary call: `(in-flight epoch + 1) << 10 | shard`, or 0 when
    /// not tracked. A probe: its round's full generation.
    aux: u64,
}

/// Where a verdict is counted.
#[derive(Clone, Copy)]
enum Sink<'a> {
    Shared,
    Local(&'a LocalShard),
}

impl Sink<'_> {
    #[inline(always)]
    fn record(self, inner: &Inner, latency_ns: u64, error: bool, slow: bool) {
        let t = inner.shards.threshold_index;
        let bucket = bucket_of(latency_ns, slow, t);
        match self {
            Sink::Shared => inner.shards.mine().record(bucket, error, t),
            Sink::Local(shard) => shard.record(bucket, error),
        }
    }

    fn cancel(self, inner: &Inner) {
        match self {
            Sink::Shared => inner.shards.mine().cancel(),
            Sink::Local(shard) => shard.cancel(),
        }
    }

    fn stale(self, inner: &Inner) {
        match self {
            Sink::Shared => inner.shards.mine().stale(),
            Sink::Local(shard) => shard.stale(),
        }
    }
}

impl Core<'_> {
    #[inline(always)]
    fn measured(&self) -> u64 {
        self.inner.clock.delta_nanos(self.start, self.inner.clock.raw())
    }

    /// Leaves the in-flight set; false if window close already counted this
    /// call as slow (then it must not be counted again).
    #[inline(always)]
    fn leave_flight(&self) -> bool {
        if self.aux == 0 {
            return true;
        }
        self.inner.leave_flight(self.aux)
    }

    /// Whether this probe's round is still the current one.
    fn probe_is_current(&self) -> bool {
        let state = &self.inner.state;
        state.full_generation(state.load()) == self.aux
    }

    #[inline(always)]
    fn finish(&self, latency_ns: u64, ok: bool, sink: Sink<'_>) {
        if self.tag.kind() != Tag::NORMAL {
            return self.finish_other(latency_ns, ok, sink);
        }
        if self.leave_flight() {
            if self.tag.is_current(self.inner.state.load()) {
                let slow = latency_ns > self.inner.config.threshold_ns;
                sink.record(self.inner, latency_ns, !ok, slow);
            } else {
                sink.stale(self.inner);
            }
        }
    }

    /// `finish` for a probe (which decides its round) or a disabled permit
    /// (which measures nothing).
    #[inline(never)]
    fn finish_other(&self, latency_ns: u64, ok: bool, sink: Sink<'_>) {
        if self.tag.kind() != Tag::PROBE {
            return;
        }
        let slow = latency_ns > self.inner.config.threshold_ns;
        if self.probe_is_current() {
            sink.record(self.inner, latency_ns, !ok, slow);
        } else {
            sink.stale(self.inner);
        }
        let outcome = match (ok, slow) {
            (false, _) => ProbeOutcome::Failed,
            (true, true) => ProbeOutcome::Slow,
            (true, false) => ProbeOutcome::Good,
        };
        self.inner.probe_verdict(self.aux, self.tag.lease(), outcome);
    }

    #[cold]
    fn cancel(&self, sink: Sink<'_>) {
        if self.tag == Tag::DISABLED {
            return;
        }
        match self.inner.config.cancel {
            CancelPolicy::Failure => self.finish(self.measured(), false, sink),
            CancelPolicy::Cancelled if self.tag.kind() == Tag::PROBE => {
                if self.probe_is_current() {
                    sink.cancel(self.inner);
                } else {
                    sink.stale(self.inner);
                }
                self.inner
                    .probe_verdict(self.aux, self.tag.lease(), ProbeOutcome::Cancelled);
            }
            CancelPolicy::Cancelled => {
                if self.leave_flight() {
                    if self.tag.is_current(self.inner.state.load()) {
                        sink.cancel(self.inner);
                    } else {
                        sink.stale(self.inner);
                    }
                }
            }
        }
    }
}

/// Permission to make one call; record its verdict with [`record`](Self::record)
/// or [`record_latency`](Self::record_latency), which consume it.
///
/// Dropped without a verdict (a cancelled future, a panic, an early return)
/// it counts as cancelled (or as a failure, per [`CancelPolicy`]), and a
/// probe permit gives its slot back.
///
/// Recording twice does not compile:
/// ```compile_fail
/// let b = tailguard::Breaker::builder().build().unwrap();
/// let p = b.allow().unwrap();
/// p.record(true);
/// p.record(true); // use of moved value
/// ```
#[must_use = "a permit is a call in flight: record its verdict, or drop it to cancel"]
pub struct Permit<'a> {
    core: Core<'a>,
}

impl Permit<'_> {
    /// Records the verdict, measuring the latency since `allow` with the
    /// breaker's clock.
    ///
    /// ```
    /// let b = tailguard::Breaker::builder().build().unwrap();
    /// b.allow().unwrap().record(true);
    /// ```
    #[inline(always)]
    pub fn record(self, ok: bool) {
        let this = ManuallyDrop::new(self);
        if this.core.tag != Tag::DISABLED {
            this.core.finish(this.core.measured(), ok, Sink::Shared);
        }
    }

    /// Records the verdict with a latency the caller measured.
    ///
    /// ```
    /// # use std::time::Duration;
    /// let b = tailguard::Breaker::builder().build().unwrap();
    /// b.allow().unwrap().record_latency(Duration::from_millis(8), true);
    /// ```
    #[inline(always)]
    pub fn record_latency(self, latency: Duration, ok: bool) {
        let this = ManuallyDrop::new(self);
        this.core
            .finish(crate::clock::duration_nanos_saturating(latency), ok, Sink::Shared);
    }

    /// Whether this permit is a HALF_OPEN probe.
    ///
    /// ```
    /// let b = tailguard::Breaker::builder().build().unwrap();
    /// assert!(!b.allow().unwrap().is_probe());
    /// ```
    pub fn is_probe(&self) -> bool {
        self.core.tag.kind() == Tag::PROBE
    }
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        self.core.cancel(Sink::Shared);
    }
}

impl fmt::Debug for Permit<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Permit")
            .field("tag", &self.core.tag)
            .finish_non_exhaustive()
    }
}

/// An owned per-core handle on a breaker: its counters live in a shard with
/// a single writer, so recording is plain loads and stores (no
/// read-modify-write). `Send` (move it to its core) but neither `Sync` nor
/// `Clone`; its permits are not `Send`. Dropping it frees the shard for
/// another handle.
///
/// ```
/// use std::time::Duration;
/// let b = tailguard::Breaker::builder().local_handles(2).build().unwrap();
/// let handles: Vec<_> = (0..2).map(|_| b.local_handle().unwrap()).collect();
/// std::thread::scope(|s| {
///     for h in handles {
///         s.spawn(move || h.allow().unwrap().record_latency(Duration::from_millis(1), true));
///     }
/// });
/// ```
///
/// A handle cannot be shared between threads:
/// ```compile_fail
/// fn is_sync<T: Sync>() {}
/// is_sync::<tailguard::LocalHandle>();
/// ```
pub struct LocalHandle {
    inner: Arc<Inner>,
    index: usize,
    _not_sync: PhantomData<core::cell::Cell<()>>,
}

impl LocalHandle {
    /// As [`Breaker::allow`], recording into this handle's shard.
    ///
    /// ```
    /// let b = tailguard::Breaker::builder().local_handles(1).build().unwrap();
    /// let h = b.local_handle().unwrap();
    /// assert!(h.allow().is_ok());
    /// ```
    #[inline]
    pub fn allow(&self) -> Result<LocalPermit<'_>, Rejected> {
        self.inner.admit().map(|core| LocalPermit { core, handle: self })
    }

    /// The breaker this handle records for.
    ///
    /// ```
    /// let b = tailguard::Breaker::builder().local_handles(1).build().unwrap();
    /// let h = b.local_handle().unwrap();
    /// assert!(h.breaker().ptr_eq(&b));
    /// ```
    pub fn breaker(&self) -> Breaker {
        Breaker {
            inner: Arc::clone(&self.inner),
        }
    }

    fn shard(&self) -> &LocalShard {
        &self.inner.shards.local[self.index]
    }
}

impl Drop for LocalHandle {
    fn drop(&mut self) {
        self.inner.local_free.fetch_or(1 << self.index, Ordering::AcqRel);
    }
}

impl fmt::Debug for LocalHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LocalHandle")
            .field("index", &self.index)
            .finish_non_exhaustive()
    }
}

/// A permit from a [`LocalHandle`]; as [`Permit`], but stays on the
/// handle's thread.
///
/// ```compile_fail
/// fn is_send<T: Send>() {}
/// is_send::<tailguard::LocalPermit<'static>>();
/// ```
#[must_use = "a permit is a call in flight: record its verdict, or drop it to cancel"]
pub struct LocalPermit<'a> {
    core: Core<'a>,
    handle: &'a LocalHandle,
}

impl LocalPermit<'_> {
    /// As [`Permit::record`].
    ///
    /// ```
    /// let b = tailguard::Breaker::builder().local_handles(1).build().unwrap();
    /// b.local_handle().unwrap().allow().unwrap().record(true);
    /// ```
    #[inline(always)]
    pub fn record(self, ok: bool) {
        let this = ManuallyDrop::new(self);
        if this.core.tag != Tag::DISABLED {
            this.core
                .finish(this.core.measured(), ok, Sink::Local(this.handle.shard()));
        }
    }

    /// As [`Permit::record_latency`].
    ///
    /// ```
    /// # use std::time::Duration;
    /// let b = tailguard::Breaker::builder().local_handles(1).build().unwrap();
    /// b.local_handle().unwrap().allow().unwrap().record_latency(Duration::from_millis(2), true);
    /// ```
    #[inline(always)]
    pub fn record_latency(self, latency: Duration, ok: bool) {
        let this = ManuallyDrop::new(self);
        this.core.finish(
            crate::clock::duration_nanos_saturating(latency),
            ok,
            Sink::Local(this.handle.shard()),
        );
    }

    /// Whether this permit is a HALF_OPEN probe.
    ///
    /// ```
    /// let b = tailguard::Breaker::builder().local_handles(1).build().unwrap();
    /// assert!(!b.local_handle().unwrap().allow().unwrap().is_probe());
    /// ```
    pub fn is_probe(&self) -> bool {
        self.core.tag.kind() == Tag::PROBE
    }
}

impl Drop for LocalPermit<'_> {
    fn drop(&mut self) {
        self.core.cancel(Sink::Local(self.handle.shard()));
    }
}

impl fmt::Debug for LocalPermit<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LocalPermit")
            .field("tag", &self.core.tag)
            .finish_non_exhaustive()
    }
}

impl Inner {
    /// The breaker's time for a clock reading, signed: negative when the
    /// clock stepped back to before the breaker's start (or before the
    /// last correction) and nobody has noticed yet.
    #[inline]
    fn signed_now(&self, raw: u64) -> i64 {
        self.clock
            .nanos_of(raw)
            .wrapping_add(self.shift.load(Ordering::Acquire)) as i64
    }

    /// Nanoseconds since the breaker was built (zero if the clock stepped
    /// back before that and no correction happened yet).
    #[inline]
    fn now_from_raw(&self, raw: u64) -> u64 {
        self.signed_now(raw).max(0) as u64
    }

    #[inline]
    fn now(&self) -> u64 {
        self.now_from_raw(self.clock.raw())
    }

    /// `allow` for both handle kinds.
    #[inline(always)]
    fn admit(&self) -> Result<Core<'_>, Rejected> {
        let word = self.state.load();
        if word.0 & FAST_PATH_MASK == 0 {
            return Ok(self.normal_permit(word));
        }
        if word.0 & FAST_PATH_MASK == OPEN_NORMAL {
            if let Some(rejected) = self.reject_open_fast(word) {
                return Err(rejected);
            }
        }
        self.admit_slow(word)
    }

    /// OPEN, no override, backoff running and the clock sane: the rejection
    /// in a few loads and one clock read. Anything else (the deadline not yet
    /// published, the backoff over, a clock that stepped back) takes the
    /// slow path.
    #[inline(always)]
    fn reject_open_fast(&self, word: Word) -> Option<Rejected> {
        if self.deadline_gen.load(Ordering::Acquire) != u64::from(word.generation()) {
            return None;
        }
        let deadline = self.deadline.load(Ordering::Acquire);
        let now = self.signed_now(self.clock.raw());
        let earliest = (deadline as i64 - self.config.max_ns as i64).max(0);
        (now >= earliest && now < deadline as i64).then(|| Rejected {
            reason: RejectReason::Open,
            retry_after_ns: deadline - now as u64,
        })
    }

    /// An ordinary permit, admitted under `word`.
    #[inline(always)]
    fn normal_permit(&self, word: Word) -> Core<'_> {
        let start = self.clock.raw();
        let aux = if self.config.track_in_flight {
            self.enter_flight(start)
        } else {
            0
        };
        Core {
            inner: self,
            start,
            tag: Tag::normal(word),
            aux,
        }
    }

    #[cold]
    #[inline(never)]
    fn admit_slow(&self, mut word: Word) -> Result<Core<'_>, Rejected> {
        loop {
            match word.mode() {
                Mode::Disabled => {
                    return Ok(Core {
                        inner: self,
                        start: 0,
                        tag: Tag::DISABLED,
                        aux: 0,
                    })
                }
                Mode::ForcedOpen => {
                    return Err(Rejected {
                        reason: RejectReason::ForcedOpen,
                        retry_after_ns: u64::MAX,
                    })
                }
                Mode::ForcedClosed => return Ok(self.normal_permit(word)),
                Mode::Normal | Mode::MetricsOnly => {}
            }
            let verdict = match word.state() {
                State::Closed => return Ok(self.normal_permit(word)),
                State::Open => self.admit_open(word),
                State::HalfOpen => self.admit_half_open(word),
            };
            match verdict {
                Admit::Probe(core) => return Ok(core),
                Admit::Retry(w) => word = w,
                Admit::Reject(rejected) => {
                    if word.mode() == Mode::MetricsOnly {
                        self.shadow_rejections.fetch_add(1, Ordering::Relaxed);
                        return Ok(self.normal_permit(word));
                    }
                    return Err(rejected);
                }
            }
        }
    }

    /// OPEN: reject until the deadline; the first caller past it moves the
    /// breaker to HALF_OPEN and is its first probe.
    fn admit_open(&self, word: Word) -> Admit<'_> {
        let gen = u64::from(word.generation());
        if self.deadline_gen.load(Ordering::Acquire) != gen {
            // The transition into OPEN is being published right now.
            let d = self.config.backoff_ns(word.level());
            return Admit::Reject(Rejected {
                reason: RejectReason::Open,
                retry_after_ns: d,
            });
        }
        let deadline = self.deadline.load(Ordering::Acquire);
        let raw = self.clock.raw();
        let signed = self.signed_now(raw);
        // A correct clock is never more than the longest backoff before the
        // deadline; further back, it stepped back: resume from the trip.
        let now = if signed < deadline as i64 - self.config.max_ns as i64 {
            self.raise_floor(raw, self.opened_at.load(Ordering::Acquire))
        } else {
            signed.max(0) as u64
        };
        if now < deadline {
            return Admit::Reject(Rejected {
                reason: RejectReason::Open,
                retry_after_ns: deadline - now,
            });
        }
        let (_, stored, ()) = self.state.update(|w| {
            if w != word {
                return Decision::Keep(());
            }
            Decision::Set(w.transition(State::HalfOpen, w.mode()).with_probes(1), ())
        });
        match stored {
            Some(next) => {
                self.note(word, next, Reason::BackoffElapsed, now);
                Admit::Probe(self.probe_permit(next, raw, now))
            }
            None => Admit::Retry(self.state.load()),
        }
    }

    /// HALF_OPEN: re-open if a probe of this round has outlived its lease;
    /// otherwise take a probe slot if one is free (atomically: a caller that
    /// loses the race for the last slot is rejected, never admitted without
    /// one).
    fn admit_half_open(&self, word: Word) -> Admit<'_> {
        let limit = self.config.probes;
        let raw = self.clock.raw();
        let now = self.now_from_raw(raw);
        if self.lease_expired(word, now) {
            return Admit::Retry(self.state.load());
        }
        let (seen, stored, ()) = self.state.update(|w| {
            if w.state() != State::HalfOpen || w.generation() != word.generation() || w.probes() >= limit {
                return Decision::Keep(());
            }
            Decision::Set(w.with_probes(w.probes() + 1), ())
        });
        if let Some(next) = stored {
            return Admit::Probe(self.probe_permit(next, raw, now));
        }
        if seen.state() != State::HalfOpen || seen.generation() != word.generation() {
            return Admit::Retry(seen);
        }
        Admit::Reject(Rejected {
            reason: RejectReason::ProbesBusy,
            retry_after_ns: u64::MAX,
        })
    }

    /// The permit of a probe whose slot the CAS to `word` took: its lease
    /// starts now, at its own admission (`raw`, `now`), whatever the word
    /// the caller loaded before said.
    fn probe_permit(&self, word: Word, raw: u64, now: u64) -> Core<'_> {
        let round = self.state.full_generation(word);
        let lease = self.take_lease(round, now);
        Core {
            inner: self,
            start: raw,
            tag: Tag::probe(word, lease),
            aux: round,
        }
    }

    /// Takes a free lease entry (or one of an earlier round) for a probe of
    /// `round` admitted at `now`; returns its index + 1, or 0 if the round is
    /// already over (the probe is stale and needs none).
    fn take_lease(&self, round: u64, now: u64) -> usize {
        let mut backoff = 0;
        loop {
            for (i, lease) in self.leases.iter().enumerate() {
                let tag = lease.tag.load(Ordering::Acquire);
                if tag == Lease::CLAIMING || (tag != Lease::FREE && tag >= round) {
                    continue;
                }
                if lease
                    .tag
                    .compare_exchange(tag, Lease::CLAIMING, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
                {
                    lease.since.store(now, Ordering::Release);
                    lease.tag.store(round, Ordering::Release);
                    return i + 1;
                }
            }
            // Every entry is this round's or being stamped: a probe of an
            // earlier round is stamping the one this round will find free
            // (its slot count guarantees one), unless the round is over.
            let w = self.state.load();
            if w.state() != State::HalfOpen || self.state.full_generation(w) != round {
                return 0;
            }
            crate::sync::spin(&mut backoff);
        }
    }

    /// Frees lease entry `lease − 1` if round `round` still holds it.
    fn release_lease(&self, lease: usize, round: u64) {
        if let Some(entry) = lease.checked_sub(1).and_then(|i| self.leases.get(i)) {
            let _ = entry
                .tag
                .compare_exchange(round, Lease::FREE, Ordering::AcqRel, Ordering::Relaxed);
        }
    }

    /// If a probe of `word`'s round has been out longer than the lease,
    /// re-open (a probe that has not answered within the lease is slower
    /// than the threshold). Returns whether it did; the event is queued.
    fn lease_expired(&self, word: Word, now: u64) -> bool {
        if word.state() != State::HalfOpen || word.probes() == 0 {
            return false;
        }
        let round = self.state.full_generation(word);
        let lease_ns = self.config.lease_ns;
        let expired = self.leases.iter().any(|l| {
            l.tag.load(Ordering::Acquire) == round && now >= l.since.load(Ordering::Acquire).saturating_add(lease_ns)
        });
        expired && self.reopen(round, Reason::ProbeLeaseExpired, now)
    }

    /// HALF_OPEN → OPEN with the next backoff, if still in round `round`;
    /// queues the event.
    fn reopen(&self, round: u64, reason: Reason, now: u64) -> bool {
        let (seen, stored, ()) = self.state.update(|w| {
            if w.state() != State::HalfOpen || self.state.full_generation(w) != round {
                return Decision::Keep(());
            }
            let level = w.level().saturating_add(1).min(MAX_LEVEL);
            Decision::Set(w.transition(State::Open, w.mode()).with_level(level), ())
        });
        match stored {
            Some(next) => {
                self.note(seen, next, reason, now);
                true
            }
            None => false,
        }
    }

    /// A probe of `round` (lease entry `lease − 1`) has its verdict. Its lease
    /// is freed first, then its slot returned (or the round decided): so an
    /// entry of the current round always belongs to a probe still out.
    fn probe_verdict(&self, round: u64, lease: usize, outcome: ProbeOutcome) {
        self.release_lease(lease, round);
        let successes = self.config.successes;
        let (seen, stored, reason) = self.state.update(|w| {
            if w.state() != State::HalfOpen || self.state.full_generation(w) != round {
                // A verdict from an earlier round decides nothing.
                return Decision::Keep(None);
            }
            let probes = w.probes().saturating_sub(1);
            match outcome {
                ProbeOutcome::Cancelled => Decision::Set(w.with_probes(probes), None),
                ProbeOutcome::Good if w.successes().saturating_add(1) >= successes => Decision::Set(
                    w.transition(State::Closed, w.mode()).with_level(0),
                    Some(Reason::ProbesSucceeded),
                ),
                ProbeOutcome::Good => Decision::Set(
                    w.with_probes(probes).with_successes(w.successes().saturating_add(1)),
                    None,
                ),
                ProbeOutcome::Failed | ProbeOutcome::Slow => {
                    let level = w.level().saturating_add(1).min(MAX_LEVEL);
                    let reason = if outcome == ProbeOutcome::Slow {
                        Reason::ProbeSlow
                    } else {
                        Reason::ProbeFailed
                    };
                    Decision::Set(w.transition(State::Open, w.mode()).with_level(level), Some(reason))
                }
            }
        });
        if let (Some(next), Some(reason)) = (stored, reason) {
            self.note(seen, next, reason, self.now());
        }
    }

    /// After a transition `from` → `to` (already stored): publish an OPEN
    /// deadline, count a trip or a flap, and queue the event. Never calls
    /// the listener: delivery is for the cold paths (`tick`, overrides).
    fn note(&self, from: Word, to: Word, reason: Reason, now: u64) {
        if from.state() == State::HalfOpen && to.state() == State::Open {
            // One OPEN -> HALF_OPEN -> OPEN cycle.
            let mut flaps = self.flaps.lock();
            let pos = flaps.pos;
            flaps.times[pos] = now;
            flaps.pos = (pos + 1) % flaps.times.len();
            if flaps.count(now, self.config.flap_ns) > self.config.flap_cycles as usize {
                self.flapping.store(true, Ordering::Release);
            }
        }
        if to.state() == State::Open && to.mode() != Mode::ForcedOpen {
            self.trip_count.fetch_add(1, Ordering::Relaxed);
            let backoff = self.config.backoff_ns(to.level());
            let r = splitmix(self.rng.fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed));
            let d = self.config.jittered(backoff, r);
            let _guard = self.flaps.lock();
            // Publish only if no later transition happened meanwhile; under
            // the lock, so a slow publisher cannot overwrite a later one.
            if self.state.load().generation() == to.generation() {
                self.deadline.store(now.saturating_add(d), Ordering::Relaxed);
                self.opened_at.store(now, Ordering::Relaxed);
                self.deadline_gen.store(u64::from(to.generation()), Ordering::Release);
            }
        }
        if self.events.wanted() {
            self.events.push(Transition {
                from: from.state(),
                to: to.state(),
                from_mode: from.mode(),
                to_mode: to.mode(),
                generation: to.generation(),
                reason,
                at: Duration::from_nanos(now),
                flapping: self.flapping.load(Ordering::Acquire),
            });
        }
    }

    /// An override: a transition to `state` / `mode` unless that mode is
    /// already in force (then nothing changes). Cold path: delivers events.
    fn set_mode(&self, state: State, mode: Mode, reason: Reason) {
        let (seen, stored, ()) = self.state.update(|w| {
            if w.mode() == mode {
                return Decision::Keep(());
            }
            Decision::Set(w.transition(state, mode), ())
        });
        if let Some(next) = stored {
            self.note(seen, next, reason, self.now());
        }
        self.events.deliver();
    }

    /// CLOSED with no override, backoff level 0, no breach counted. On a
    /// breaker already CLOSED with no override that only clears the counts
    /// (not a transition: the window in progress is still judged).
    fn reset(&self) {
        let (seen, stored, transition) = self.state.update(|w| {
            if w.state() == State::Closed && w.mode() == Mode::Normal {
                if w.breaches() == 0 && w.level() == 0 {
                    return Decision::Keep(false);
                }
                return Decision::Set(w.with_breaches(0).with_level(0), false);
            }
            Decision::Set(w.transition(State::Closed, Mode::Normal).with_level(0), true)
        });
        if let (Some(next), true) = (stored, transition) {
            self.note(seen, next, Reason::Reset, self.now());
        }
        self.events.deliver();
    }

    fn trip_now(&self) {
        let (seen, stored, ()) = self.state.update(|w| {
            if w.state() != State::Closed || !matches!(w.mode(), Mode::Normal | Mode::MetricsOnly) {
                return Decision::Keep(());
            }
            Decision::Set(w.transition(State::Open, w.mode()), ())
        });
        if let Some(next) = stored {
            self.note(seen, next, Reason::ManualTrip, self.now());
        }
        self.events.deliver();
    }

    /// Raises `shift` so that the reading `raw` maps to at least `floor`;
    /// returns the corrected time. Only ever moves time forward for a given
    /// reading, so racing callers settle on the highest floor.
    #[cold]
    fn raise_floor(&self, raw: u64, floor: u64) -> u64 {
        let nanos = self.clock.nanos_of(raw);
        let mut cur = self.shift.load(Ordering::Acquire);
        loop {
            let now = nanos.wrapping_add(cur) as i64;
            if now >= floor as i64 {
                return now as u64;
            }
            match self
                .shift
                .compare_exchange_weak(cur, floor.wrapping_sub(nanos), Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return floor,
                Err(actual) => cur = actual,
            }
        }
    }

    // ---- in-flight tracking ----

    /// Enters a call starting at `start_raw` into its thread's shard's
    /// in-flight slots: returns `(epoch + 1) << 10 | shard`, or 0 if the
    /// call is not tracked (see the shard module).
    #[inline]
    fn enter_flight(&self, start_raw: u64) -> u64 {
        let epoch =
            (self.now_from_raw(start_raw) / self.config.epoch_ns).max(self.flight_floor.load(Ordering::Acquire));
        let index = self.shards.mine_index();
        match self.shards.shared()[index].in_flight() {
            Some(slots) if slots.enter(epoch) => (epoch + 1) << 10 | index as u64,
            _ => 0,
        }
    }

    /// The call entered as `aux` (see [`enter_flight`](Self::enter_flight))
    /// returns: false if window close already counted it as slow.
    #[inline]
    fn leave_flight(&self, aux: u64) -> bool {
        let index = (aux & 0x3ff) as usize;
        match self.shards.shared()[index].in_flight() {
            Some(slots) => slots.leave((aux >> 10) - 1),
            None => true,
        }
    }

    /// Counts (and claims) the calls still in flight that started in an
    /// epoch wholly older than `now − threshold`; from here on no call takes
    /// an epoch before `now`'s.
    fn claim_in_flight(&self, now: u64) -> u64 {
        let g = self.config.epoch_ns;
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

    /// Closes due windows, then delivers waiting events (whatever made them:
    /// this tick, or `allow` and `record` since the last one).
    fn tick(&self) {
        let mut ts = self.tick.lock();
        self.tick_locked(&mut ts);
        drop(ts);
        self.events.deliver();
    }

    /// The work of a tick, under the tick lock.
    fn tick_locked(&self, ts: &mut TickState) {
        let raw = self.clock.raw();
        let signed = self.signed_now(raw);
        let now = if signed < ts.high as i64 {
            self.raise_floor(raw, ts.high)
        } else {
            signed as u64
        };
        ts.high = now;

        // OPEN whose backoff ran out: HALF_OPEN now, even with no caller.
        let word = self.state.load();
        if word.state() == State::Open
            && word.mode() != Mode::ForcedOpen
            && self.deadline_gen.load(Ordering::Acquire) == u64::from(word.generation())
            && now >= self.deadline.load(Ordering::Acquire)
        {
            let (_, stored, ()) = self.state.update(|w| {
                if w != word {
                    return Decision::Keep(());
                }
                Decision::Set(w.transition(State::HalfOpen, w.mode()), ())
            });
            if let Some(next) = stored {
                self.note(word, next, Reason::BackoffElapsed, now);
            }
        }
        // HALF_OPEN with a probe out past its lease.
        self.lease_expired(self.state.load(), now);

        if self.flapping.load(Ordering::Relaxed)
            && self.flaps.lock().count(now, self.config.flap_ns) <= self.config.flap_cycles as usize
        {
            self.flapping.store(false, Ordering::Release);
        }

        // Windows.
        if now < ts.window_end {
            return;
        }
        let w = self.config.window_ns;
        let due = (now - ts.window_end) / w + 1;
        // After `ring_len + 1` empty windows nothing of the past is left;
        // the rest of a long gap is skipped in one step.
        let run = due.min(ts.ring.len() as u64 + 2);
        ts.window_end = ts.window_end.saturating_add((due - run).saturating_mul(w));

        // What was recorded since the last drain is attributed to the newest
        // window due; any earlier due windows were empty. It is judged only
        // if no transition happened between the last drain and this one:
        // the generation read after this drain must be the one read before
        // the last (`window_gen`), and the one read before this drain is kept
        // for the next. So a span that straddles a transition is never
        // judged, however many windows one tick closes.
        let before = self.state.load().generation();
        let mut counts = Counts::default();
        // The window's histogram: DDSketch keys (γ = 2^(1/8)) and counts, on
        // the stack, and only if the window has calls.
        let mut hist: Option<Histogram> = None;
        self.shards.drain(&mut counts, |key, n| {
            hist.get_or_insert_with(Histogram::new)
                .add((key - crate::shard::KEY_OFFSET) as usize, n)
        });
        let latency = hist.as_ref().and_then(Histogram::quantiles);
        let in_flight = if self.config.track_in_flight {
            self.claim_in_flight(now)
        } else {
            0
        };
        let after = self.state.load();
        let mut judged = after.state() == State::Closed
            && matches!(after.mode(), Mode::Normal | Mode::MetricsOnly)
            && after.generation() == ts.window_gen;
        for i in 0..run {
            let newest = i + 1 == run;
            let closed_at = ts.window_end;
            let tripped = if newest {
                self.close_window(ts, counts, in_flight, latency, closed_at, now, judged)
            } else {
                self.close_window(ts, Counts::default(), 0, None, closed_at, now, judged)
            };
            judged &= !tripped;
            ts.window_end = ts.window_end.saturating_add(w);
        }
        ts.window_gen = before;
    }

    /// Records one closed window and, if `judged`, applies the trip rule to
    /// it. Returns whether it tripped the breaker.
    #[allow(clippy::too_many_arguments)]
    fn close_window(
        &self,
        ts: &mut TickState,
        counts: Counts,
        in_flight: u64,
        latency: Option<LatencyQuantiles>,
        closed_at: u64,
        now: u64,
        judged: bool,
    ) -> bool {
        let calls = counts.calls + in_flight;
        let slow = counts.slow + in_flight;
        ts.last = WindowStats {
            calls,
            errors: counts.errors,
            slow,
            cancelled: counts.cancelled,
            in_flight_slow: in_flight,
            stale: counts.stale,
            closed_at: Duration::from_nanos(closed_at),
            latency,
        };
        ts.totals.calls += calls;
        ts.totals.errors += counts.errors;
        ts.totals.slow += slow;
        ts.totals.cancelled += counts.cancelled;
        ts.totals.stale += counts.stale;
        if !judged {
            ts.clear_ring();
            return false;
        }
        ts.push(calls, counts.errors);
        let c = &self.config;
        let latency_breach = calls > 0 && calls >= c.min_calls && exceeds(slow, calls, c.slow_ppb);
        let (roll_calls, roll_errors) = ts.sum(c.error_windows as usize);
        // A window's errors can include calls counted in the window before
        // (a record straddling window close): never more than its calls.
        let roll_errors = roll_errors.min(roll_calls);
        let error_trip = roll_calls > 0 && roll_calls >= c.min_calls && exceeds(roll_errors, roll_calls, c.error_ppb);
        let count_trip = c
            .failure_count
            .is_some_and(|(n, span)| ts.sum(span as usize).1 >= u64::from(n.get()));

        let gen = ts.window_gen;
        let (seen, stored, reason) = self.state.update(|w| {
            if w.state() != State::Closed || w.generation() != gen {
                return Decision::Keep(None);
            }
            let breaches = if latency_breach {
                w.breaches().saturating_add(1)
            } else {
                0
            };
            let reason = if breaches >= c.trip_windows {
                Some(Reason::LatencyBreach)
            } else if error_trip {
                Some(Reason::ErrorRate)
            } else if count_trip {
                Some(Reason::FailureCount)
            } else {
                None
            };
            match reason {
                Some(r) => Decision::Set(w.transition(State::Open, w.mode()), Some(r)),
                None if breaches != w.breaches() => Decision::Set(w.with_breaches(breaches), None),
                None => Decision::Keep(None),
            }
        });
        match (stored, reason) {
            (Some(next), Some(reason)) => {
                ts.clear_ring();
                self.note(seen, next, reason, now);
                true
            }
            _ => false,
        }
    }

    fn snapshot(&self) -> Snapshot {
        let (last, totals) = {
            let ts = self.tick.lock();
            (ts.last, ts.totals)
        };
        let word = self.state.load();
        let now = self.now();
        let open = word.state() == State::Open
            && word.mode() != Mode::ForcedOpen
            && self.deadline_gen.load(Ordering::Acquire) == u64::from(word.generation());
        let (next_probe_in, open_for) = if open {
            let deadline = self.deadline.load(Ordering::Acquire);
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
            events_lost: self.events.lost(),
            listener_panics: self.events.panics(),
            uptime: Duration::from_nanos(now),
            totals,
            flapping: self.flapping.load(Ordering::Acquire),
            limits: self.limits(),
        }
    }

    fn limits(&self) -> Limits {
        let c = &self.config;
        let windows = |n: u32| Duration::from_nanos(c.window_ns.saturating_mul(u64::from(n)));
        Limits {
            window: Duration::from_nanos(c.window_ns),
            latency_threshold: Duration::from_nanos(c.threshold_ns),
            slow_fraction: c.slow_ppb as f64 / PPB as f64,
            trip_windows: c.trip_windows,
            min_calls: c.min_calls,
            error_rate: c.error_ppb as f64 / PPB as f64,
            error_window: windows(c.error_windows),
            failure_count: c.failure_count.map(|(n, span)| (u64::from(n.get()), windows(span))),
        }
    }

    fn memory_bytes(&self) -> usize {
        let ts = self.tick.lock();
        core::mem::size_of::<Inner>()
            + 2 * core::mem::size_of::<usize>() // the Arc's counts
            + self.shards.heap_bytes()
            + ts.ring.len() * core::mem::size_of::<(u32, u32)>()
            + self.flaps.lock().times.len() * core::mem::size_of::<u64>()
            + self.leases.len() * core::mem::size_of::<Lease>()
            + self.events.heap_bytes()
            + self.name.as_ref().map_or(0, |n| n.len())
    }

    /// For the ticker, shortly before it ticks this breaker: starts loading
    /// the lines behind its pointers (its own are prefetched by the ticker).
    #[cfg(not(tailguard_loom))]
    pub(crate) fn prefetch_for_tick(&self) {
        self.shards.prefetch();
    }

    /// For the ticker, shortly before it ticks this breaker, once the lines
    /// of `prefetch_for_tick` are in: starts loading the bucket words in use.
    #[cfg(not(tailguard_loom))]
    pub(crate) fn prefetch_marked(&self) {
        self.shards.prefetch_marked();
    }

    /// For the ticker: tick, and say how long until the next window end
    /// (or the end of the backoff, if sooner).
    #[cfg(not(tailguard_loom))]
    pub(crate) fn tick_for_ticker(&self) -> u64 {
        let mut ts = self.tick.lock();
        self.tick_locked(&mut ts);
        let now = ts.high;
        let mut until = ts.window_end.saturating_sub(now);
        drop(ts);
        let word = self.state.load();
        if word.state() == State::Open && self.deadline_gen.load(Ordering::Acquire) == u64::from(word.generation()) {
            until = until.min(self.deadline.load(Ordering::Acquire).saturating_sub(now));
        }
        self.events.deliver();
        until
    }
}

enum Admit<'a> {
    Probe(Core<'a>),
    Retry(Word),
    Reject(Rejected),
}

/// One window's latencies, merged from the shards at window close: the
/// count in each bucket (bucket `i` holds latencies with DDSketch key
/// `ceil(8 · log2 ns) = KEY_OFFSET + i`), and a bit per bucket in use, so
/// that reading it costs the buckets in use, not all of them.
struct Histogram {
    counts: [u64; crate::shard::BUCKETS],
    present: [u64; crate::shard::BUCKETS.div_ceil(64)],
}

impl Histogram {
    fn new() -> Self {
        Self {
            counts: [0; crate::shard::BUCKETS],
            present: [0; crate::shard::BUCKETS.div_ceil(64)],
        }
    }

    fn add(&mut self, bucket: usize, n: u64) {
        self.counts[bucket] += n;
        self.present[bucket / 64] |= 1 << (bucket % 64);
    }

    /// The buckets in use and their counts, in increasing order.
    fn iter(&self) -> impl Iterator<Item = (usize, u64)> + '_ {
        self.present.iter().enumerate().flat_map(move |(i, &word)| {
            let mut bits = word;
            core::iter::from_fn(move || {
                (bits != 0).then(|| {
                    let bucket = i * 64 + bits.trailing_zeros() as usize;
                    bits &= bits - 1;
                    (bucket, self.counts[bucket])
                })
            })
        })
    }

    /// The quantiles, by DDSketch's rule: the bucket holding the sample of
    /// rank `floor(q · (n − 1))`, reported at the bucket's representative
    /// `2γ^K / (1 + γ)`, within `α = 4.33%` of every value in it.
    fn quantiles(&self) -> Option<LatencyQuantiles> {
        let total: u64 = self.iter().map(|(_, n)| n).sum();
        if total == 0 {
            return None;
        }
        // Each bucket's representative, computed once per process.
        static VALUES: std::sync::OnceLock<[u64; crate::shard::BUCKETS]> = std::sync::OnceLock::new();
        let values = VALUES.get_or_init(|| {
            let gamma = 2f64.powf(1.0 / 8.0);
            core::array::from_fn(|bucket| {
                let key = crate::shard::KEY_OFFSET + bucket as i32;
                (2.0 * gamma.powi(key) / (1.0 + gamma)) as u64
            })
        });
        // One pass for the four ranks, which are in increasing order.
        let ranks = [0.5, 0.9, 0.99, 0.999].map(|q: f64| (q * (total - 1) as f64) as u64);
        let mut out = [Duration::ZERO; 4];
        let mut next = 0;
        let mut seen = 0;
        for (bucket, n) in self.iter() {
            seen += n;
            while next < 4 && seen > ranks[next] {
                out[next] = Duration::from_nanos(values[bucket]);
                next += 1;
            }
            if next == 4 {
                break;
            }
        }
        Some(LatencyQuantiles {
            p50: out[0],
            p90: out[1],
            p99: out[2],
            p999: out[3],
        })
    }
}

/// The end of a breaker's first window, relative to its start at `origin`
/// on its clock: the first multiple of `window` on the clock more than half
/// a window after `origin`.
fn first_window_end(origin: u64, window: u64) -> u64 {
    let half = window / 2;
    window - origin.wrapping_add(half) % window + half
}

/// Parts per billion: the unit of the trip rule's fractions.
pub(crate) const PPB: u64 = 1_000_000_000;

/// Whether `part` is more than `limit_ppb` parts per billion of `whole`,
/// exactly (in integers: `1.0 - 0.9` is not `0.1` in floating point).
fn exceeds(part: u64, whole: u64, limit_ppb: u64) -> bool {
    u128::from(part) * u128::from(PPB) > u128::from(whole) * u128::from(limit_ppb)
}

/// One step of SplitMix64: a cheap, well-mixed random number for jitter.
fn splitmix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::{TickState, Totals, WindowStats};

    #[test]
    fn ring_sum_takes_the_newest_windows_across_the_wrap() {
        for len in 1..=5usize {
            let mut ts = TickState {
                window_end: 0,
                window_gen: 0,
                ring: vec![(0, 0); len].into_boxed_slice(),
                ring_pos: 0,
                high: 0,
                last: WindowStats::default(),
                totals: Totals::default(),
            };
            let mut pushed: Vec<(u64, u64)> = Vec::new();
            for i in 1..=12u64 {
                ts.push(i, i * 100);
                pushed.push((i, i * 100));
                for n in 0..=len + 1 {
                    let newest = &pushed[pushed.len().saturating_sub(n.min(len))..];
                    let expected = newest.iter().fold((0, 0), |(c, e), &(wc, we)| (c + wc, e + we));
                    assert_eq!(ts.sum(n), expected, "len {len}, after {i} pushes, newest {n}");
                }
            }
        }
    }
}
#[cfg(test)]
mod size_probe {
    #[test]
    fn sizes() {
        use core::mem::size_of;
        eprintln!("Inner {} Config {} TickState {} WindowStats {} Totals {} ClockSource {} Shards {} Events {} Flaps {} StateCell {}",
            size_of::<super::Inner>(), size_of::<crate::config::Config>(), size_of::<super::TickState>(), size_of::<super::WindowStats>(),
            size_of::<super::Totals>(), size_of::<crate::clock::ClockSource>(), size_of::<crate::shard::Shards>(), size_of::<crate::events::Events>(),
            size_of::<super::Flaps>(), size_of::<crate::state::StateCell>());
    }
}
