//! Clocks.
//!
//! The breaker reads time through a [`ClockSource`], chosen when it is built:
//!
//! * [`ClockSource::precise`] (the default): quanta's TSC-backed clock,
//!   nanosecond resolution, a read costing several atomic loads.
//! * [`CoarseClock`]: one relaxed atomic load per read, refreshed by a
//!   process-wide upkeep thread every millisecond; for consumers whose
//!   latencies are milliseconds, where the precise read would dominate the
//!   cost of `allow`.
//! * [`ManualClock`]: moved by hand, shared between clones, able to step back;
//!   for tests that never sleep.
//! * any other [`Clock`] implementation, behind an `Arc`.
//!
//! Every clock reports nanoseconds since an origin of its own choosing. The
//! breaker keeps its times relative to its own start, so a `u64` never holds
//! a wall-clock value. A clock that steps back never makes the breaker panic
//! or underflow: see [`Breaker::tick`](crate::Breaker::tick).

use crate::sync::{Arc, AtomicU64, Ordering};
use core::fmt;
use std::time::Duration;

/// A source of monotonic-ish time, in nanoseconds since an arbitrary origin.
///
/// Implementations must be cheap and should not panic. A value smaller than
/// a previous one (a step back) is tolerated by the breaker. A panic is
/// caught where the breaker reads the clock (the panic hook reports it as
/// usual): the read is tried once more, and if that panics too it reads as
/// the last reading the same thread took of the clock, so a read that
/// unwinds never leaves a transition or a window close half done. (A
/// thread's very first read, panicking twice, panics: there is no time to
/// give it.)
///
/// ```
/// use std::sync::Arc;
/// use tailguard::clock::{Clock, ClockSource};
///
/// struct Fixed;
/// impl Clock for Fixed {
///     fn now_nanos(&self) -> u64 { 42 }
/// }
/// let source = ClockSource::custom(Arc::new(Fixed));
/// assert_eq!(source.now_nanos(), 42);
/// ```
pub trait Clock: Send + Sync + 'static {
    /// Nanoseconds since this clock's origin.
    ///
    /// ```
    /// use tailguard::clock::{Clock, ManualClock};
    /// let clock = ManualClock::new();
    /// clock.advance(std::time::Duration::from_micros(5));
    /// assert_eq!(Clock::now_nanos(&clock), 5_000);
    /// ```
    fn now_nanos(&self) -> u64;
}

/// The clock a breaker reads; see the [module docs](self).
///
/// ```
/// use tailguard::{clock::ClockSource, Breaker};
/// // The default (precise), or the coarse clock for millisecond consumers.
/// let b = Breaker::builder().clock(ClockSource::coarse()).build()?;
/// assert!(!b.clock().is_precise());
/// # Ok::<(), tailguard::ConfigError>(())
/// ```
///
/// `From` conversions exist for [`ManualClock`] and [`CoarseClock`], so
/// `builder.clock(manual.clone())` works directly.
#[derive(Clone)]
pub struct ClockSource {
    kind: Kind,
}

#[derive(Clone)]
enum Kind {
    Precise(quanta::Clock),
    #[cfg(not(tailguard_loom))]
    Coarse(CoarseClock),
    Manual(ManualClock),
    Custom(Arc<dyn Clock>),
    #[cfg(feature = "tokio")]
    Tokio(tokio::time::Instant),
}

impl ClockSource {
    /// quanta's precise clock (the default).
    ///
    /// ```
    /// let c = tailguard::clock::ClockSource::precise();
    /// let a = c.raw();
    /// let b = c.raw();
    /// assert!(c.delta_nanos(a, b) < 1_000_000_000);
    /// ```
    pub fn precise() -> Self {
        Self {
            kind: Kind::Precise(shared_quanta()),
        }
    }

    /// A coarse clock: cheap reads, millisecond resolution. See [`CoarseClock`].
    ///
    /// ```
    /// let c = tailguard::clock::ClockSource::coarse();
    /// let _ = c.now_nanos();
    /// ```
    #[cfg(not(tailguard_loom))]
    pub fn coarse() -> Self {
        Self {
            kind: Kind::Coarse(CoarseClock::new()),
        }
    }

    /// Any clock of the caller's.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use tailguard::clock::{ClockSource, ManualClock};
    /// let source = ClockSource::custom(Arc::new(ManualClock::new()));
    /// assert_eq!(source.now_nanos(), 0);
    /// ```
    pub fn custom(clock: Arc<dyn Clock>) -> Self {
        Self {
            kind: Kind::Custom(clock),
        }
    }

    /// An opaque reading, cheap to take; only differences between two
    /// readings of the same source mean anything (see [`delta_nanos`](Self::delta_nanos)).
    ///
    /// ```
    /// let c = tailguard::clock::ClockSource::from(tailguard::clock::ManualClock::new());
    /// assert_eq!(c.raw(), 0);
    /// ```
    #[inline(always)]
    pub fn raw(&self) -> u64 {
        match &self.kind {
            Kind::Precise(c) => c.raw(),
            #[cfg(not(tailguard_loom))]
            Kind::Coarse(c) => c.now_nanos(),
            Kind::Manual(c) => c.now_nanos(),
            Kind::Custom(c) => read_custom(&**c),
            #[cfg(feature = "tokio")]
            Kind::Tokio(origin) => tokio_nanos(*origin, tokio::time::Instant::now()),
        }
    }

    /// Nanoseconds from `start` to `end`, two [`raw`](Self::raw) readings;
    /// zero when `end` is not after `start` (a clock that stepped back).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tailguard::clock::{ClockSource, ManualClock};
    /// let m = ManualClock::new();
    /// let c = ClockSource::from(m.clone());
    /// let a = c.raw();
    /// m.advance(Duration::from_millis(3));
    /// assert_eq!(c.delta_nanos(a, c.raw()), 3_000_000);
    /// assert_eq!(c.delta_nanos(c.raw(), a), 0);
    /// ```
    #[inline(always)]
    pub fn delta_nanos(&self, start: u64, end: u64) -> u64 {
        match &self.kind {
            Kind::Precise(c) => c.delta_as_nanos(start, end),
            _ => end.saturating_sub(start),
        }
    }

    /// Nanoseconds from the reading `start` to now: `delta_nanos(start,
    /// raw())` with one match over the clock's kind instead of two (the
    /// tower layer's response future, once per request).
    #[cfg(feature = "tower")]
    #[inline(always)]
    pub(crate) fn elapsed_nanos(&self, start: u64) -> u64 {
        match &self.kind {
            Kind::Precise(c) => c.delta_as_nanos(start, c.raw()),
            #[cfg(not(tailguard_loom))]
            Kind::Coarse(c) => c.now_nanos().saturating_sub(start),
            Kind::Manual(c) => c.now_nanos().saturating_sub(start),
            Kind::Custom(c) => read_custom(&**c).saturating_sub(start),
            #[cfg(feature = "tokio")]
            Kind::Tokio(origin) => tokio_nanos(*origin, tokio::time::Instant::now()).saturating_sub(start),
        }
    }

    /// Nanoseconds since this source's origin.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tailguard::clock::{ClockSource, ManualClock};
    /// let m = ManualClock::new();
    /// m.advance(Duration::from_secs(1));
    /// assert_eq!(ClockSource::from(m).now_nanos(), 1_000_000_000);
    /// ```
    #[inline(always)]
    pub fn now_nanos(&self) -> u64 {
        match &self.kind {
            // The raw origin of quanta's counter is arbitrary; scale it from 0.
            Kind::Precise(c) => c.delta_as_nanos(0, c.raw()),
            _ => self.raw(),
        }
    }

    /// A [`raw`](Self::raw) reading in nanoseconds since this source's origin.
    #[inline(always)]
    pub(crate) fn nanos_of(&self, raw: u64) -> u64 {
        match &self.kind {
            Kind::Precise(c) => c.delta_as_nanos(0, raw),
            _ => raw,
        }
    }

    /// tokio's clock ([`tokio::time::Instant`]): under a paused runtime
    /// (`#[tokio::test(start_paused = true)]`, `tokio::time::pause`) the
    /// breaker's windows, backoffs and leases move with `tokio::time::advance`
    /// and auto-advance, together with tokio's timers. Feature `tokio`.
    ///
    /// A breaker on this clock is ticked by the ticker thread like any
    /// other, which reads the clock in the context of the runtime the
    /// breaker was built in (see [`BreakerBuilder::ticker`](crate::BreakerBuilder::ticker)
    /// for a paused clock).
    ///
    /// A reading costs what `tokio::time::Instant::now()` costs (a system
    /// clock read, or a runtime lookup when the `test-util` clock is on).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// use std::time::Duration;
    /// let clock = tailguard::clock::ClockSource::tokio();
    /// let before = clock.now_nanos();
    /// tokio::time::advance(Duration::from_secs(3)).await;
    /// assert_eq!(clock.now_nanos() - before, 3_000_000_000);
    /// # }
    /// ```
    #[cfg(feature = "tokio")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
    pub fn tokio() -> Self {
        Self {
            kind: Kind::Tokio(tokio::time::Instant::now()),
        }
    }

    /// The [`raw`](Self::raw) reading this clock would have given at the
    /// tokio instant `at`, if it is [`tokio`](Self::tokio)'s clock; `None`
    /// for any other clock. Lets a caller that already read tokio's clock
    /// (for a timer) hand the breaker the same reading
    /// ([`Breaker::allow_at`](crate::Breaker::allow_at)) instead of
    /// reading twice.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// use tailguard::clock::ClockSource;
    /// let clock = ClockSource::tokio();
    /// let now = tokio::time::Instant::now();
    /// assert_eq!(clock.reading_at(now), Some(clock.raw()));
    /// assert_eq!(ClockSource::precise().reading_at(now), None);
    /// # }
    /// ```
    #[cfg(feature = "tokio")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
    #[inline]
    pub fn reading_at(&self, at: tokio::time::Instant) -> Option<u64> {
        match &self.kind {
            Kind::Tokio(origin) => Some(tokio_nanos(*origin, at)),
            _ => None,
        }
    }

    /// Whether this is [`tokio`](Self::tokio)'s clock.
    #[cfg(feature = "tokio")]
    pub(crate) fn is_tokio(&self) -> bool {
        matches!(self.kind, Kind::Tokio(_))
    }

    /// Whether the process's ticker thread closes the windows of a breaker
    /// on this clock unless told otherwise: yes for the clocks of the
    /// system (precise, coarse) and a clock of the caller's; no for a
    /// [`ManualClock`] (tests drive it, and `tick`, by hand). Tokio's is
    /// read by the thread in the context of the runtime the breaker was
    /// built in.
    pub(crate) fn ticked_by_default(&self) -> bool {
        !matches!(self.kind, Kind::Manual(_))
    }

    /// Whether a read costs a precise clock access (as opposed to one load).
    ///
    /// ```
    /// use tailguard::clock::ClockSource;
    /// assert!(ClockSource::precise().is_precise());
    /// assert!(!ClockSource::coarse().is_precise());
    /// ```
    pub fn is_precise(&self) -> bool {
        matches!(self.kind, Kind::Precise(_))
    }
}

impl Default for ClockSource {
    fn default() -> Self {
        Self::precise()
    }
}

impl fmt::Debug for ClockSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match &self.kind {
            Kind::Precise(_) => "precise",
            #[cfg(not(tailguard_loom))]
            Kind::Coarse(_) => "coarse",
            Kind::Manual(_) => "manual",
            Kind::Custom(_) => "custom",
            #[cfg(feature = "tokio")]
            Kind::Tokio(_) => "tokio",
        };
        f.debug_tuple("ClockSource").field(&name).finish()
    }
}

impl From<ManualClock> for ClockSource {
    fn from(clock: ManualClock) -> Self {
        Self {
            kind: Kind::Manual(clock),
        }
    }
}

#[cfg(not(tailguard_loom))]
impl From<CoarseClock> for ClockSource {
    fn from(clock: CoarseClock) -> Self {
        Self {
            kind: Kind::Coarse(clock),
        }
    }
}

impl From<Arc<dyn Clock>> for ClockSource {
    fn from(clock: Arc<dyn Clock>) -> Self {
        Self::custom(clock)
    }
}

/// Nanoseconds from `origin` to `at`; zero before `origin`, saturating
/// after 584 years.
#[cfg(feature = "tokio")]
#[inline(always)]
fn tokio_nanos(origin: tokio::time::Instant, at: tokio::time::Instant) -> u64 {
    duration_nanos_saturating(at.saturating_duration_since(origin))
}

/// quanta calibrates its clock on creation (up to a few hundred ms); do it
/// once per process and clone the calibrated clock.
fn shared_quanta() -> quanta::Clock {
    static CLOCK: std::sync::OnceLock<quanta::Clock> = std::sync::OnceLock::new();
    CLOCK.get_or_init(quanta::Clock::new).clone()
}

/// A clock moved by hand, for deterministic tests.
///
/// Clones share one time. It starts at zero, moves forward with
/// [`advance`](Self::advance), and can step back with
/// [`rewind`](Self::rewind) or [`set`](Self::set) to test what a
/// misbehaving clock does to the breaker (nothing bad).
///
/// ```
/// use std::time::Duration;
/// use tailguard::clock::{Clock, ManualClock};
///
/// let clock = ManualClock::new();
/// let other = clock.clone();
/// clock.advance(Duration::from_millis(5));
/// assert_eq!(other.now(), Duration::from_millis(5));
/// other.rewind(Duration::from_secs(10)); // saturates at zero
/// assert_eq!(clock.now_nanos(), 0);
/// ```
#[derive(Clone, Default)]
pub struct ManualClock {
    nanos: Arc<AtomicU64>,
}

impl ManualClock {
    /// A clock at time zero.
    ///
    /// ```
    /// assert_eq!(tailguard::clock::ManualClock::new().now(), std::time::Duration::ZERO);
    /// ```
    pub fn new() -> Self {
        Self {
            nanos: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Moves time forward by `by` (saturating at `u64::MAX` nanoseconds).
    ///
    /// ```
    /// use std::time::Duration;
    /// let c = tailguard::clock::ManualClock::new();
    /// c.advance(Duration::from_micros(100));
    /// assert_eq!(c.now(), Duration::from_micros(100));
    /// ```
    pub fn advance(&self, by: Duration) {
        let by = duration_nanos_saturating(by);
        let mut cur = self.nanos.load(Ordering::Relaxed);
        loop {
            match self
                .nanos
                .compare_exchange_weak(cur, cur.saturating_add(by), Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(_) => return,
                Err(actual) => cur = actual,
            }
        }
    }

    /// Moves time back by `by` (saturating at zero): a misbehaving clock.
    ///
    /// ```
    /// use std::time::Duration;
    /// let c = tailguard::clock::ManualClock::new();
    /// c.advance(Duration::from_secs(2));
    /// c.rewind(Duration::from_secs(1));
    /// assert_eq!(c.now(), Duration::from_secs(1));
    /// ```
    pub fn rewind(&self, by: Duration) {
        let by = duration_nanos_saturating(by);
        let mut cur = self.nanos.load(Ordering::Relaxed);
        loop {
            match self
                .nanos
                .compare_exchange_weak(cur, cur.saturating_sub(by), Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(_) => return,
                Err(actual) => cur = actual,
            }
        }
    }

    /// Sets the time to `at` since the origin, forward or back.
    ///
    /// ```
    /// use std::time::Duration;
    /// let c = tailguard::clock::ManualClock::new();
    /// c.set(Duration::from_secs(7));
    /// assert_eq!(c.now(), Duration::from_secs(7));
    /// ```
    pub fn set(&self, at: Duration) {
        self.nanos.store(duration_nanos_saturating(at), Ordering::Release);
    }

    /// The current time since the origin.
    ///
    /// ```
    /// assert_eq!(tailguard::clock::ManualClock::new().now().as_nanos(), 0);
    /// ```
    pub fn now(&self) -> Duration {
        Duration::from_nanos(self.now_nanos())
    }
}

impl Clock for ManualClock {
    #[inline]
    fn now_nanos(&self) -> u64 {
        self.nanos.load(Ordering::Acquire)
    }
}

impl fmt::Debug for ManualClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ManualClock").field("now", &self.now()).finish()
    }
}

pub(crate) fn duration_nanos_saturating(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(not(tailguard_loom))]
pub use coarse::CoarseClock;

#[cfg(not(tailguard_loom))]
mod coarse {
    use super::{shared_quanta, Clock};
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::{Arc, Mutex, Weak};
    use std::thread::JoinHandle;
    use std::time::Duration;

    /// How often the upkeep thread refreshes the coarse time.
    const RESOLUTION: Duration = Duration::from_millis(1);

    /// Nanoseconds since the quanta origin, refreshed by the upkeep thread.
    static NOW: AtomicU64 = AtomicU64::new(0);

    /// The running upkeep thread, shared by every live [`CoarseClock`].
    static UPKEEP: Mutex<Weak<Upkeep>> = Mutex::new(Weak::new());

    struct Upkeep {
        stop: Arc<AtomicBool>,
        thread: Option<JoinHandle<()>>,
    }

    impl Drop for Upkeep {
        fn drop(&mut self) {
            self.stop.store(true, Ordering::Release);
            if let Some(thread) = self.thread.take() {
                thread.thread().unpark();
                let _ = thread.join();
            }
        }
    }

    /// A cheap clock with millisecond resolution.
    ///
    /// A read is one relaxed atomic load. The value is refreshed every
    /// millisecond by one process-wide thread (`tailguard-coarse-clock`)
    /// that runs while at least one `CoarseClock` is alive and is stopped and
    /// joined when the last one drops. Use it when the consumer's latencies
    /// are milliseconds: a latency threshold of 50 ms is judged within ±1 ms.
    ///
    /// ```
    /// use tailguard::clock::{Clock, CoarseClock};
    /// let clock = CoarseClock::new();
    /// let a = clock.now_nanos();
    /// std::thread::sleep(std::time::Duration::from_millis(5));
    /// assert!(clock.now_nanos() > a);
    /// ```
    #[derive(Clone)]
    pub struct CoarseClock {
        _upkeep: Arc<Upkeep>,
        /// Whether the upkeep thread runs (read without going through the
        /// `Arc`: a read is one load of `NOW`).
        live: bool,
    }

    impl CoarseClock {
        /// A handle on the coarse clock; starts the upkeep thread if needed.
        ///
        /// If the thread cannot be spawned the clock still works: every read
        /// then falls back to a precise read.
        ///
        /// ```
        /// let _c = tailguard::clock::CoarseClock::new();
        /// ```
        pub fn new() -> Self {
            let mut slot = UPKEEP.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(upkeep) = slot.upgrade() {
                let live = upkeep.thread.is_some();
                return Self { _upkeep: upkeep, live };
            }
            let clock = shared_quanta();
            NOW.store(clock.delta_as_nanos(0, clock.raw()), Ordering::Release);
            let stop = Arc::new(AtomicBool::new(false));
            let their_stop = Arc::clone(&stop);
            let thread = std::thread::Builder::new()
                .name("tailguard-coarse-clock".into())
                .spawn(move || {
                    while !their_stop.load(Ordering::Acquire) {
                        NOW.store(clock.delta_as_nanos(0, clock.raw()), Ordering::Release);
                        std::thread::park_timeout(RESOLUTION);
                    }
                })
                .ok();
            let live = thread.is_some();
            let upkeep = Arc::new(Upkeep { stop, thread });
            *slot = Arc::downgrade(&upkeep);
            Self { _upkeep: upkeep, live }
        }
    }

    impl Default for CoarseClock {
        fn default() -> Self {
            Self::new()
        }
    }

    impl Clock for CoarseClock {
        #[inline(always)]
        fn now_nanos(&self) -> u64 {
            if self.live {
                NOW.load(Ordering::Relaxed)
            } else {
                let clock = shared_quanta();
                clock.delta_as_nanos(0, clock.raw())
            }
        }
    }

    impl core::fmt::Debug for CoarseClock {
        fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
            f.debug_struct("CoarseClock")
                .field("now_nanos", &self.now_nanos())
                .finish()
        }
    }
}

/// A custom clock's reading. A panic in it is caught here, where it
/// happens: the read is tried once more (a transient fault), and if that
/// panics too, the reading is the last this thread took of this clock (time
/// stands still for the read). Otherwise a read after a transition's CAS
/// (to date the OPEN and publish its deadline) or in the middle of a window
/// close (the in-flight claim, between marking the slots and clearing them)
/// would leave that step half done: an OPEN with no deadline, slots marked
/// closing for ever, drained counts lost. Only a thread that never read
/// this clock, whose first two reads panic, gets the panic (there is no
/// time to give it).
#[inline]
fn read_custom(clock: &dyn Clock) -> u64 {
    thread_local! {
        /// The last reading this thread took of a custom clock, and which.
        static LAST: core::cell::Cell<(usize, u64)> = const { core::cell::Cell::new((0, 0)) };
    }
    let key = (clock as *const dyn Clock).cast::<()>() as usize;
    let read = || std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| clock.now_nanos()));
    let nanos = match read() {
        Ok(nanos) => nanos,
        Err(payload) => recover(key, payload, read, &LAST),
    };
    LAST.with(|last| last.set((key, nanos)));
    nanos
}

/// The slow half of `read_custom`, after a panic: once more, else the last
/// reading, else the panic.
#[cold]
#[inline(never)]
fn recover(
    key: usize,
    payload: Box<dyn std::any::Any + Send>,
    read: impl Fn() -> std::thread::Result<u64>,
    last: &'static std::thread::LocalKey<core::cell::Cell<(usize, u64)>>,
) -> u64 {
    crate::events::swallow(payload);
    match read() {
        Ok(nanos) => nanos,
        Err(again) => match last.with(core::cell::Cell::get) {
            (k, nanos) if k == key => {
                crate::events::swallow(again);
                nanos
            }
            _ => std::panic::resume_unwind(again),
        },
    }
}
