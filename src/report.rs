//! What a breaker reports: its state and override mode, its transitions and
//! their reasons, its rejections, the counts of its windows, its snapshot,
//! the limits it judges by and its totals.
//!
//! Plain data, for callers, listeners, dashboards and alerts. This module
//! imports nothing of the breaker's machinery; every other module may use
//! it.

use core::fmt;
use std::time::Duration;

/// The breaker's state.
///
/// ```
/// use tailguard::{Breaker, State};
/// let b = Breaker::builder().build().unwrap();
/// assert_eq!(b.state(), State::Closed);
/// b.force_open();
/// assert_eq!(b.state(), State::Open);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum State {
    /// Calls pass and are measured.
    Closed,
    /// Calls are rejected at once.
    Open,
    /// A bounded number of probe calls pass.
    HalfOpen,
}

impl State {
    /// The Prometheus encoding: 0 closed, 1 open, 2 half-open.
    ///
    /// ```
    /// assert_eq!(tailguard::State::HalfOpen.as_metric(), 2);
    /// ```
    pub fn as_metric(self) -> u8 {
        match self {
            State::Closed => 0,
            State::Open => 1,
            State::HalfOpen => 2,
        }
    }
}

/// An operator override, reported apart from the [`State`].
///
/// ```
/// use tailguard::{Breaker, Mode};
/// let b = Breaker::builder().build().unwrap();
/// b.metrics_only();
/// assert_eq!(b.mode(), Mode::MetricsOnly);
/// b.reset();
/// assert_eq!(b.mode(), Mode::Normal);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mode {
    /// No override: the breaker decides.
    Normal,
    /// Every call is rejected ([`Breaker::force_open`](crate::Breaker::force_open)).
    ForcedOpen,
    /// Every call passes and is measured; the breaker never trips
    /// ([`Breaker::force_closed`](crate::Breaker::force_closed)).
    ForcedClosed,
    /// Every call passes; nothing is measured ([`Breaker::disable`](crate::Breaker::disable)).
    Disabled,
    /// The breaker measures and decides as in `Normal`, reports what it
    /// would do, and never rejects ([`Breaker::metrics_only`](crate::Breaker::metrics_only)).
    MetricsOnly,
}

/// Why a transition happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Reason {
    /// More than `1 − q` of the calls were slow for `trip_windows` windows
    /// (the last of them above the absolute threshold: the relative rule's
    /// ceiling, without an explicit one).
    LatencyBreach,
    /// As [`LatencyBreach`](Self::LatencyBreach), the last window judged
    /// slow by the relative rule alone: more than `1 − q` of its calls
    /// slower than `k ×` the consumer's own baseline, under the absolute
    /// threshold (see [`BreakerBuilder::relative_latency`](crate::BreakerBuilder::relative_latency)).
    RelativeLatency,
    /// Calls too sparse for `min_calls` per window (in some windows at
    /// least), but the slow ones among them left no doubt: the sequential
    /// test on the slow fraction across windows reached its bound (see
    /// [`BreakerBuilder::min_calls`](crate::BreakerBuilder::min_calls)).
    ///
    /// The test is a CUSUM of Wald's log-likelihood ratio between "a
    /// fraction `p0 = 1 − q` of the calls is slow" and "a fraction
    /// `p1 = min(10 p0, (1 + p0) / 2)` is": each slow call adds
    /// `ln(p1 / p0)` (2.30 at P99), each other call takes
    /// `ln((1 − p0) / (1 − p1))` off (0.095 at P99), the evidence never
    /// goes below zero nor above the bound, a dense window that does not
    /// breach and every transition clear it, and it trips at
    /// `ln(10^6)` = 13.82 (a false-trip rate of one in a million tests at
    /// the limit fraction itself) gathered over `trip_windows` windows with
    /// calls at the least.
    SparseLatency,
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
    /// [`Breaker::force_open`](crate::Breaker::force_open).
    ForcedOpen,
    /// [`Breaker::force_closed`](crate::Breaker::force_closed).
    ForcedClosed,
    /// [`Breaker::disable`](crate::Breaker::disable).
    Disabled,
    /// [`Breaker::metrics_only`](crate::Breaker::metrics_only).
    MetricsOnly,
    /// [`Breaker::reset`](crate::Breaker::reset).
    Reset,
    /// [`Breaker::trip_now`](crate::Breaker::trip_now).
    ManualTrip,
}

/// One transition, as given to the listener set with
/// [`BreakerBuilder::on_transition`](crate::BreakerBuilder::on_transition).
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
    /// [`BreakerBuilder::flapping`](crate::BreakerBuilder::flapping)); a re-open that crosses the limit is the
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
    /// CLOSED in its recovery ramp, and this call is not in the share the
    /// ramp admits yet (see [`BreakerBuilder::recovery_ramp`](crate::BreakerBuilder::recovery_ramp)).
    Ramping,
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
    /// A rejection for `reason`, the next probe `retry_after_ns` away
    /// (`u64::MAX`: unknown).
    #[inline(always)]
    pub(crate) const fn new(reason: RejectReason, retry_after_ns: u64) -> Self {
        Self { reason, retry_after_ns }
    }

    /// When to try again, for `Retry-After` or a client's backoff: while
    /// OPEN, the time until the breaker next admits a probe; while
    /// HALF_OPEN with every probe slot taken, the time until the current
    /// probes' round is decided at the latest (the end of the earliest
    /// probe's lease: by then it has answered, or been taken for slow); in
    /// a recovery ramp, one window or the rest of the ramp if sooner (by
    /// then the share admitted has grown). `None` when forced open (an
    /// operator decides when it ends).
    ///
    /// ```
    /// use std::time::Duration;
    /// let clock = tailguard::clock::ManualClock::new();
    /// let b = tailguard::Breaker::builder().clock(clock.clone()).build().unwrap();
    /// b.trip_now();
    /// assert_eq!(b.allow().unwrap_err().retry_after(), Some(Duration::from_secs(1)));
    /// clock.advance(Duration::from_secs(1));
    /// let probe = b.allow().unwrap(); // the one probe slot
    /// clock.advance(Duration::from_millis(300));
    /// // The probe's lease (1 s by default) ends 700 ms from now.
    /// assert_eq!(b.allow().unwrap_err().retry_after(), Some(Duration::from_millis(700)));
    /// b.force_open();
    /// assert_eq!(b.allow().unwrap_err().retry_after(), None);
    /// # drop(probe);
    /// ```
    pub fn retry_after(&self) -> Option<Duration> {
        (self.retry_after_ns != u64::MAX).then(|| Duration::from_nanos(self.retry_after_ns))
    }

    /// [`retry_after`](Self::retry_after) in whole seconds, rounded up: the
    /// value of an HTTP `Retry-After` header (`None`: send none).
    ///
    /// ```
    /// use std::time::Duration;
    /// let clock = tailguard::clock::ManualClock::new();
    /// let b = tailguard::Breaker::builder().clock(clock.clone()).build().unwrap();
    /// b.trip_now();
    /// clock.advance(Duration::from_millis(300));
    /// let r = b.allow().unwrap_err();
    /// assert_eq!(r.retry_after(), Some(Duration::from_millis(700)));
    /// assert_eq!(r.retry_after_secs(), Some(1));
    /// ```
    pub fn retry_after_secs(&self) -> Option<u64> {
        (self.retry_after_ns != u64::MAX).then(|| self.retry_after_ns.div_ceil(1_000_000_000))
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
            (RejectReason::ProbesBusy, Some(d)) => {
                write!(f, "circuit half-open; every probe slot is taken; decided within {d:?}")
            }
            (RejectReason::ProbesBusy, None) => write!(f, "circuit half-open; every probe slot is taken"),
            (RejectReason::ForcedOpen, _) => write!(f, "circuit forced open"),
            (RejectReason::Ramping, Some(d)) => {
                write!(
                    f,
                    "circuit recovering; this call is beyond the share admitted; retry in {d:?}"
                )
            }
            (RejectReason::Ramping, None) => write!(f, "circuit recovering; this call is beyond the share admitted"),
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
    /// Calls slower than [`threshold`](Self::threshold) (in-flight slow
    /// ones included).
    pub slow: u64,
    /// Permits dropped without a verdict.
    pub cancelled: u64,
    /// Calls still in flight at window close that had already run longer
    /// than the threshold (in-flight tracking only; also in `calls`/`slow`).
    pub in_flight_slow: u64,
    /// Verdicts (and cancellations) of permits admitted in an earlier
    /// generation, before a transition, and calls of an earlier generation
    /// still in flight at the first close after the transition: counted
    /// here, apart from `calls`, and never judged, so calls from before a
    /// trip or a recovery never decide the windows after it.
    ///
    /// One race is left open: a verdict whose thread is suspended between
    /// the permit's generation check and its count (one `fetch_add`) for as
    /// long as two transitions and a window close take counts in the window
    /// it lands in (one call per suspended thread). Closing it would cost
    /// every verdict a second atomic.
    pub stale: u64,
    /// How many windows these counts span: 1 when windows close on time,
    /// more when one tick closed several at once (a late tick cannot tell
    /// which of them a call belonged to, so they are judged as if spread
    /// evenly: `min_calls` per window, and each counts as a breaching
    /// window if the span breaches). `closed_at` is the end of the newest.
    pub windows: u32,
    /// When the window closed, since the breaker was built.
    pub closed_at: Duration,
    /// The window's latency quantiles (of calls that returned), `None` for
    /// a window without calls. See [`LatencyQuantiles`] for the accuracy.
    pub latency: Option<LatencyQuantiles>,
    /// The threshold the window was judged by: the latency threshold, or
    /// with the relative rule the lower of it and the relative threshold
    /// (a bucket edge, see
    /// [`BreakerBuilder::relative_latency`](crate::BreakerBuilder::relative_latency)).
    /// Before the first close, the one the first window will be judged by.
    pub threshold: Duration,
}

/// Latency quantiles of one window, read at window close off the merged
/// shard buckets, which hold what a DDSketch of the window would hold.
///
/// Each value is within [`QUANTILE_RELATIVE_ERROR`](crate::QUANTILE_RELATIVE_ERROR)
/// (4.72%, relative) of the exact quantile of the window's latencies between
/// 1 µs and 68.7 s; see there for why. The latency-trip decision never uses
/// these estimates: it counts slow calls exactly.
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
    /// Calls rejected so far, by reason.
    pub rejections: Rejections,
    /// Transition events the listener never got: its queue of 64 was full
    /// (see [`BreakerBuilder::on_transition`](crate::BreakerBuilder::on_transition)).
    pub events_lost: u64,
    /// Panics of the listener, caught (the listener's own work for that
    /// event is lost; delivery goes on with the next event).
    pub listener_panics: u64,
    /// Time since the breaker was built, on its clock.
    pub uptime: Duration,
    /// Totals over every closed window since the breaker was built.
    pub totals: Totals,
    /// Whether the breaker is flapping (see [`BreakerBuilder::flapping`](crate::BreakerBuilder::flapping)).
    pub flapping: bool,
    /// The settings windows are judged by, to read the counts against.
    pub limits: Limits,
    /// The threshold the window in progress is judged by, and probes now:
    /// [`Limits::latency_threshold`], or with the relative rule the lower of
    /// it and the relative threshold (see [`WindowStats::threshold`] for the
    /// last window's).
    pub latency_threshold: Duration,
    /// The relative rule's baseline: the consumer's latency at the rule's
    /// quantile, learned from its healthy windows (to the sketch's bucket,
    /// 9.05%). `None` without the relative rule or before its first
    /// observation; a baseline still in its warmup is shown, but the rule
    /// judges by the ceiling until it is warm.
    pub latency_baseline: Option<Duration>,
    /// CLOSED in its recovery ramp: how far it is.
    pub ramp: Option<Ramp>,
    /// Time spent OPEN since the breaker was built, the OPEN in progress
    /// included: by its own rules (under metrics-only, the time it would
    /// have been OPEN; time forced open is not counted, [`mode`](Self::mode)
    /// says when it is). HALF_OPEN and a recovery ramp are not OPEN.
    /// Never decreases from one snapshot to the next; on the breaker's
    /// clock, so a clock stepped forward counts the step.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tailguard::clock::ManualClock;
    ///
    /// let clock = ManualClock::new();
    /// let b = tailguard::Breaker::builder()
    ///     .clock(clock.clone())
    ///     .base_backoff(Duration::from_secs(5))
    ///     .build()?;
    /// b.trip_now();
    /// clock.advance(Duration::from_secs(2));
    /// assert_eq!(b.snapshot().open_time_total, Duration::from_secs(2));
    /// b.reset(); // OPEN for 2 s in all
    /// clock.advance(Duration::from_secs(10));
    /// assert_eq!(b.snapshot().open_time_total, Duration::from_secs(2));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub open_time_total: Duration,
}

/// How far a recovery ramp is (see
/// [`BreakerBuilder::recovery_ramp`](crate::BreakerBuilder::recovery_ramp)).
///
/// ```
/// use std::time::Duration;
/// use tailguard::clock::ManualClock;
///
/// let clock = ManualClock::new();
/// let b = tailguard::Breaker::builder()
///     .clock(clock.clone())
///     .success_to_close(1)
///     .recovery_ramp(Duration::from_secs(10))
///     .build()?;
/// b.trip_now();
/// clock.advance(Duration::from_secs(1));
/// b.allow()?.record(true);
/// clock.advance(Duration::from_secs(4));
/// let ramp = b.snapshot().ramp.unwrap();
/// assert_eq!((ramp.admitted, ramp.remaining), (0.4, Duration::from_secs(6)));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct Ramp {
    /// The share of calls admitted now, from 0 at the close to 1 at the end.
    pub admitted: f64,
    /// Until the ramp ends.
    pub remaining: Duration,
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
    /// Length of a window ([`BreakerBuilder::window`](crate::BreakerBuilder::window)).
    pub window: Duration,
    /// A call slower than this is slow ([`BreakerBuilder::latency_threshold`](crate::BreakerBuilder::latency_threshold)).
    pub latency_threshold: Duration,
    /// A window breaches when more than this fraction of its calls is slow:
    /// `1 − quantile` ([`BreakerBuilder::quantile`](crate::BreakerBuilder::quantile)).
    pub slow_fraction: f64,
    /// Consecutive breaching windows that trip ([`BreakerBuilder::trip_windows`](crate::BreakerBuilder::trip_windows)).
    pub trip_windows: u8,
    /// Windows (or error spans) with fewer calls are not judged
    /// ([`BreakerBuilder::min_calls`](crate::BreakerBuilder::min_calls)).
    pub min_calls: u64,
    /// Error rate above which the breaker trips ([`BreakerBuilder::error_rate`](crate::BreakerBuilder::error_rate)).
    pub error_rate: f64,
    /// The span the error rate is taken over ([`BreakerBuilder::error_window`](crate::BreakerBuilder::error_window)).
    pub error_window: Duration,
    /// Failures within a span that trip ([`BreakerBuilder::failure_count`](crate::BreakerBuilder::failure_count)).
    pub failure_count: Option<(u64, Duration)>,
    /// The relative latency rule, as given ([`BreakerBuilder::relative_latency`](crate::BreakerBuilder::relative_latency)).
    pub relative: Option<crate::RelativeLatency>,
    /// The recovery ramp's length ([`BreakerBuilder::recovery_ramp`](crate::BreakerBuilder::recovery_ramp)).
    pub recovery_ramp: Option<Duration>,
}

/// Calls [`Breaker::allow`](crate::Breaker::allow) rejected so far, by
/// reason (Prometheus: `breaker_rejected_total{reason}`). Each rejection is
/// counted on its thread's counter shard, so the OPEN path writes no line
/// other threads write.
///
/// ```
/// let b = tailguard::Breaker::builder().build().unwrap();
/// b.force_open();
/// let _ = b.allow();
/// assert_eq!(b.snapshot().rejections.forced, 1);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Rejections {
    /// OPEN, backoff running.
    pub open: u64,
    /// HALF_OPEN, every probe slot taken.
    pub probes_busy: u64,
    /// Forced open.
    pub forced: u64,
    /// CLOSED in its recovery ramp, beyond the share admitted.
    pub ramping: u64,
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

/// Error from [`Breaker::local_handle`](crate::Breaker::local_handle): every reserved local shard is taken.
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
