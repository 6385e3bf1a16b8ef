//! The native half of the `tailguard` Python package: the breaker, its
//! permits and decorator, the manual clock, the emitter's admission and
//! accounting (its calls are awaited in Python: `pysrc/tailguard/_emitter.py`),
//! and the registry's Prometheus text. Everything here runs under the GIL
//! without releasing it: nothing in the crate waits for the ticker thread
//! (delivery to listeners, window closes and registration never block on
//! it), so a listener on the ticker thread (which takes the GIL to call
//! Python) never waits on a thread that waits for it; and a thread that
//! never re-takes the GIL inside Rust cannot be ended by the interpreter's
//! exit in the middle of Rust code (CPython before 3.14 ends such threads
//! with `pthread_exit`, whose unwind aborts the process in Rust frames).

use pyo3::exceptions::{PyException, PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBool, PyDict, PyInt, PyString, PyTuple, PyType};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;
use tailguard::dlq::{DeadLetterQueue, Priority, Pushed};
use tailguard::emit::{Divert, Emitted, Emitter, HandBack, InFlight, ReplayCall, ReplayRun, ReplayStop};
use tailguard::{BreakerBuilder, Rejected, State, Ticker};

type Trigger = Py<PyAny>;

// ----------------------------------------------------------------------
// Values and exceptions defined in Python (`pysrc/tailguard/_types.py`,
// `pysrc/tailguard/_errors.py`), looked up once.

macro_rules! py_type {
    ($fn:ident, $module:literal, $name:literal) => {
        fn $fn(py: Python<'_>) -> PyResult<&Bound<'_, PyType>> {
            static CELL: PyOnceLock<Py<PyType>> = PyOnceLock::new();
            CELL.import(py, $module, $name)
        }
    };
}

py_type!(breaker_open_type, "tailguard._errors", "BreakerOpen");
py_type!(permit_used_type, "tailguard._errors", "PermitUsed");
py_type!(queue_full_type, "tailguard._errors", "QueueFull");
py_type!(shut_down_type, "tailguard._errors", "EmitterShutDown");
py_type!(divert_type, "tailguard._types", "Divert");
py_type!(diverted_type, "tailguard._types", "Diverted");
py_type!(handed_back_type, "tailguard._types", "HandedBack");
py_type!(replayed_type, "tailguard._types", "Replayed");
py_type!(priority_type, "tailguard._types", "Priority");
py_type!(stats_type, "tailguard._types", "EmitterStats");
py_type!(state_type, "tailguard._types", "State");
py_type!(mode_type, "tailguard._types", "Mode");

fn py_fn<'py>(py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyAny>> {
    py.import("tailguard._types")?.getattr(name)
}

/// `LatencyBreach` → `latency_breach`: the snake-case name of a variant,
/// from its `Debug` form (so a variant added in the crate gets a name too).
fn snake(debug: impl std::fmt::Debug) -> String {
    let camel = format!("{debug:?}");
    let mut out = String::with_capacity(camel.len() + 4);
    for (i, c) in camel.chars().enumerate() {
        if c.is_ascii_uppercase() {
            if i > 0 {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

/// A non-negative, finite number of seconds, for the setting `name`.
fn duration(name: &str, seconds: f64) -> PyResult<Duration> {
    if !seconds.is_finite() || seconds < 0.0 {
        return Err(PyValueError::new_err(format!(
            "{name}: expected a finite, non-negative number of seconds, got {seconds}"
        )));
    }
    Duration::try_from_secs_f64(seconds)
        .map_err(|e| PyValueError::new_err(format!("{name}: {seconds} seconds is out of range ({e})")))
}

fn rejected_err(py: Python<'_>, r: Rejected) -> PyErr {
    let retry_after = r.retry_after().map(secs);
    let reason = snake(r.reason());
    let msg = match retry_after {
        Some(s) => format!("breaker rejected the call ({reason}); retry after {s:.3} s"),
        None => format!("breaker rejected the call ({reason})"),
    };
    match breaker_open_type(py).and_then(|t| t.call1((msg, retry_after, reason))) {
        Ok(e) => PyErr::from_value(e),
        Err(e) => e,
    }
}

fn permit_used(py: Python<'_>) -> PyErr {
    let msg = "this permit's verdict is already recorded (a permit is one call: take a new one with allow())";
    match permit_used_type(py).and_then(|t| t.call1((msg,))) {
        Ok(e) => PyErr::from_value(e),
        Err(e) => e,
    }
}

fn priority_from(p: &Bound<'_, PyAny>) -> PyResult<Priority> {
    let i: i64 = p
        .extract()
        .map_err(|_| PyTypeError::new_err("priority: expected a tailguard.Priority (IDLE, ROUTINE, CRITICAL)"))?;
    match i {
        0 => Ok(Priority::Idle),
        1 => Ok(Priority::Routine),
        2 => Ok(Priority::Critical),
        _ => Err(PyValueError::new_err(format!(
            "priority: {i} is not a tailguard.Priority (0 IDLE, 1 ROUTINE, 2 CRITICAL)"
        ))),
    }
}

fn priority_py(py: Python<'_>, p: Priority) -> PyResult<Bound<'_, PyAny>> {
    priority_type(py)?.call1((p as u8,))
}

fn state_py(py: Python<'_>, s: State) -> PyResult<Bound<'_, PyAny>> {
    state_type(py)?.call1((snake(s),))
}

// ----------------------------------------------------------------------
// The process ticker: held for the life of the process, so that dropping
// the last breaker never joins the ticker thread from a thread that holds
// the GIL (a listener on the ticker thread may be waiting for it).

static TICKER: std::sync::Mutex<Option<Ticker>> = std::sync::Mutex::new(None);

fn start_ticker() -> PyResult<Ticker> {
    Ticker::start().map_err(|e| PyRuntimeError::new_err(format!("could not start the ticker thread: {e}")))
}

fn keep_ticker() -> PyResult<()> {
    let mut held = TICKER.lock().unwrap_or_else(|e| e.into_inner());
    if held.is_none() {
        *held = Some(start_ticker()?);
    }
    Ok(())
}

/// In a child of `os.fork()` (registered with `os.register_at_fork`): the
/// parent's ticker thread does not exist here; if the parent held one,
/// start the child's own, which ticks every breaker the child inherited.
#[pyfunction]
fn _after_fork_in_child() -> PyResult<()> {
    let mut held = TICKER.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(inherited) = held.take() {
        drop(inherited);
        *held = Some(start_ticker()?);
    }
    Ok(())
}

// ----------------------------------------------------------------------
// The manual clock.

/// A clock that moves only when told (`tailguard.ManualClock` wraps it).
#[pyclass(module = "tailguard._native", name = "_ManualClock", frozen)]
struct PyManualClock {
    clock: tailguard::clock::ManualClock,
}

#[pymethods]
impl PyManualClock {
    #[new]
    fn new() -> Self {
        Self {
            clock: tailguard::clock::ManualClock::new(),
        }
    }
    fn advance(&self, seconds: f64) -> PyResult<()> {
        let by = duration("seconds", seconds)?;
        let now = self.clock.now();
        let past_range = match now.checked_add(by) {
            Some(t) => t.as_nanos() > u128::from(u64::MAX),
            None => true,
        };
        if past_range {
            return Err(PyValueError::new_err(format!(
                "advance({seconds}): the clock would pass its range (2^64 ns, about 584 years)"
            )));
        }
        self.clock.advance(by);
        Ok(())
    }
    /// Now, in whole nanoseconds (the clock's own unit).
    fn now_ns(&self) -> u64 {
        u64::try_from(self.clock.now().as_nanos()).unwrap_or(u64::MAX)
    }
    /// `seconds` in whole nanoseconds, as `advance` counts them.
    #[staticmethod]
    fn to_ns(seconds: f64) -> PyResult<u64> {
        let d = duration("seconds", seconds)?;
        u64::try_from(d.as_nanos())
            .map_err(|_| PyValueError::new_err(format!("{seconds} s is out of the clock's range")))
    }
    fn rewind(&self, seconds: f64) -> PyResult<()> {
        self.clock.rewind(duration("seconds", seconds)?);
        Ok(())
    }
    fn set(&self, seconds: f64) -> PyResult<()> {
        let at = duration("seconds", seconds)?;
        if at.as_nanos() > u128::from(u64::MAX) {
            return Err(PyValueError::new_err(format!(
                "set({seconds}): past the clock's range (2^64 ns, about 584 years)"
            )));
        }
        self.clock.set(at);
        Ok(())
    }
    fn now(&self) -> f64 {
        secs(self.clock.now())
    }
}

// ----------------------------------------------------------------------
// The breaker.

/// The settings `Breaker(...)` takes, applied to a builder; every one is
/// checked here (a `ValueError` naming it) or by the crate's `build`.
fn builder_from(py: Python<'_>, kw: Option<&Bound<'_, PyDict>>) -> PyResult<BreakerBuilder> {
    let mut b = tailguard::Breaker::builder();
    let mut ticker: Option<bool> = None;
    let mut manual = false;
    if let Some(kw) = kw {
        for (k, v) in kw.iter() {
            let key: String = k.extract()?;
            let d = |v: &Bound<'_, PyAny>| -> PyResult<Duration> {
                let s: f64 = v
                    .extract()
                    .map_err(|_| PyTypeError::new_err(format!("{key}: expected seconds (a number)")))?;
                duration(&key, s)
            };
            let int = |v: &Bound<'_, PyAny>| -> PyResult<u64> {
                if v.is_instance_of::<PyBool>() || !v.is_instance_of::<PyInt>() {
                    return Err(PyTypeError::new_err(format!("{key}: expected an integer, got {v}")));
                }
                v.extract::<u64>()
                    .map_err(|_| PyValueError::new_err(format!("{key}: expected a non-negative integer, got {v}")))
            };
            let small = |v: &Bound<'_, PyAny>| -> PyResult<u32> {
                let n = int(v)?;
                u32::try_from(n).map_err(|_| PyValueError::new_err(format!("{key}: {n} is too large")))
            };
            let float = |v: &Bound<'_, PyAny>| -> PyResult<f64> {
                v.extract::<f64>()
                    .map_err(|_| PyTypeError::new_err(format!("{key}: expected a number, got {v}")))
            };
            b = match key.as_str() {
                "latency_threshold" => b.latency_threshold(d(&v)?),
                "quantile" => b.quantile(float(&v)?),
                "trip_windows" => b.trip_windows(small(&v)?),
                "window" => b.window(d(&v)?),
                "error_rate" => b.error_rate(float(&v)?),
                "error_window" => b.error_window(d(&v)?),
                "min_calls" => b.min_calls(int(&v)?),
                "failure_count" => {
                    let (n, within): (Bound<'_, PyAny>, Bound<'_, PyAny>) = v
                        .extract()
                        .map_err(|_| PyTypeError::new_err("failure_count: expected (failures, within_seconds)"))?;
                    b.failure_count(small(&n)?, d(&within)?)
                }
                "base_backoff" => b.base_backoff(d(&v)?),
                "max_backoff" => b.max_backoff(d(&v)?),
                "half_open_probes" => b.half_open_probes(small(&v)?),
                "success_to_close" => b.success_to_close(small(&v)?),
                "probe_lease" => b.probe_lease(d(&v)?),
                "track_in_flight" => b.track_in_flight(v.extract()?),
                "recovery_ramp" => b.recovery_ramp(d(&v)?),
                "flapping" => {
                    let (n, within): (Bound<'_, PyAny>, Bound<'_, PyAny>) = v
                        .extract()
                        .map_err(|_| PyTypeError::new_err("flapping: expected (cycles, within_seconds)"))?;
                    b.flapping(small(&n)?, d(&within)?)
                }
                "shards" => {
                    let n = int(&v)?;
                    b.shards(
                        usize::try_from(n).map_err(|_| PyValueError::new_err(format!("shards: {n} is too large")))?,
                    )
                }
                "jitter" => b.jitter(jitter_from(&v)?),
                "on_cancel" => b.on_cancel(match v.extract::<String>().ok().as_deref() {
                    Some("cancelled") => tailguard::CancelPolicy::Cancelled,
                    Some("failure") => tailguard::CancelPolicy::Failure,
                    _ => {
                        return Err(PyValueError::new_err(format!(
                            "on_cancel: expected \"cancelled\" or \"failure\", got {v}"
                        )))
                    }
                }),
                "relative_latency" => match relative_from(&v, &d, &float, &small)? {
                    Some(rule) => b.relative_latency(rule),
                    None => b,
                },
                "name" => b.name(
                    &v.extract::<String>()
                        .map_err(|_| PyTypeError::new_err(format!("name: expected a str, got {v}")))?,
                ),
                "ticker" => {
                    ticker = Some(v.extract()?);
                    b
                }
                "clock" => {
                    if v.is_none() {
                        b
                    } else {
                        let native = v.getattr("_native").unwrap_or_else(|_| v.clone());
                        let c = native.cast::<PyManualClock>().map_err(|_| {
                            PyTypeError::new_err(
                                "clock: expected a tailguard.ManualClock (or None for the system clock)",
                            )
                        })?;
                        manual = true;
                        b.clock(c.get().clock.clone())
                    }
                }
                "on_transition" => {
                    let listeners: Vec<Py<PyAny>> = if v.is_callable() {
                        vec![v.clone().unbind()]
                    } else {
                        v.try_iter()
                            .map_err(|_| PyTypeError::new_err("on_transition: expected a callable or a list of them"))?
                            .map(|l| {
                                let l = l?;
                                if !l.is_callable() {
                                    return Err(PyTypeError::new_err(format!("on_transition: {l} is not callable")));
                                }
                                Ok(l.unbind())
                            })
                            .collect::<PyResult<_>>()?
                    };
                    listeners.into_iter().fold(b, |b, l| b.on_transition(listener(l)))
                }
                other => {
                    return Err(PyTypeError::new_err(format!(
                        "Breaker() got an unexpected setting '{other}' (see help(tailguard.Breaker))"
                    )))
                }
            };
        }
    }
    // The crate's default: on the ticker thread unless the clock is manual.
    let on_ticker = ticker.unwrap_or(!manual);
    if on_ticker {
        keep_ticker()?;
    }
    let _ = py;
    Ok(b.ticker(on_ticker))
}

/// Listener calls in progress, and whether the interpreter is exiting
/// (then no listener is called any more): `_stop_listeners`, registered
/// with `atexit`, sets the flag and waits for the calls in progress, so
/// that no thread of ours is inside Python when the interpreter ends the
/// threads that re-take the GIL.
static LISTENER_CALLS: AtomicUsize = AtomicUsize::new(0);
static EXITING: AtomicBool = AtomicBool::new(false);

struct ListenerCall;

impl ListenerCall {
    fn enter() -> Option<ListenerCall> {
        LISTENER_CALLS.fetch_add(1, Ordering::SeqCst);
        if EXITING.load(Ordering::SeqCst) {
            LISTENER_CALLS.fetch_sub(1, Ordering::SeqCst);
            return None;
        }
        Some(ListenerCall)
    }
}

impl Drop for ListenerCall {
    fn drop(&mut self) {
        LISTENER_CALLS.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Stops calling listeners and waits (up to `timeout` seconds, the GIL
/// released) for the calls in progress: run at interpreter exit. Returns
/// whether none was left running.
#[pyfunction]
#[pyo3(signature = (timeout = 2.0))]
fn _stop_listeners(py: Python<'_>, timeout: f64) -> PyResult<bool> {
    let timeout = duration("timeout", timeout)?;
    EXITING.store(true, Ordering::SeqCst);
    let start = std::time::Instant::now();
    Ok(py.detach(|| loop {
        if LISTENER_CALLS.load(Ordering::SeqCst) == 0 {
            return true;
        }
        if start.elapsed() >= timeout {
            return false;
        }
        std::thread::sleep(Duration::from_millis(1));
    }))
}

/// The `jitter=` setting: `None` or `"none"`, `"full"`, or a fraction in
/// (0, 1] (each OPEN lasts between `1 - f` and 1 of its backoff).
fn jitter_from(v: &Bound<'_, PyAny>) -> PyResult<tailguard::Jitter> {
    if v.is_none() {
        return Ok(tailguard::Jitter::None);
    }
    if let Ok(s) = v.extract::<String>() {
        return match s.as_str() {
            "none" => Ok(tailguard::Jitter::None),
            "full" => Ok(tailguard::Jitter::Full),
            _ => Err(PyValueError::new_err(format!(
                "jitter: expected \"none\", \"full\" or a fraction in (0, 1], got {s:?}"
            ))),
        };
    }
    let f: f64 = v
        .extract()
        .map_err(|_| PyTypeError::new_err(format!("jitter: expected \"none\", \"full\" or a fraction, got {v}")))?;
    Ok(tailguard::Jitter::Bounded(f))
}

/// The `relative_latency=` setting: `False`/`None` (off), `True` (the
/// crate's defaults), or a dict of `multiplier`, `floor`, `ceiling`,
/// `max_rise_per_hour`, `warmup`, `initial_baseline` (seconds for times).
fn relative_from(
    v: &Bound<'_, PyAny>,
    d: &dyn Fn(&Bound<'_, PyAny>) -> PyResult<Duration>,
    float: &dyn Fn(&Bound<'_, PyAny>) -> PyResult<f64>,
    small: &dyn Fn(&Bound<'_, PyAny>) -> PyResult<u32>,
) -> PyResult<Option<tailguard::RelativeLatency>> {
    if v.is_none() {
        return Ok(None);
    }
    if let Ok(on) = v.cast::<PyBool>() {
        return Ok(on.is_true().then(tailguard::RelativeLatency::new));
    }
    let dict = v.cast::<PyDict>().map_err(|_| {
        PyTypeError::new_err("relative_latency: expected True, or a dict of multiplier, floor, ceiling, max_rise_per_hour, warmup, initial_baseline")
    })?;
    let mut rule = tailguard::RelativeLatency::new();
    for (k, x) in dict.iter() {
        let key: String = k.extract()?;
        rule = match key.as_str() {
            "multiplier" => rule.multiplier(float(&x)?),
            "floor" => rule.floor(d(&x)?),
            "ceiling" => rule.ceiling(d(&x)?),
            "max_rise_per_hour" => rule.max_rise_per_hour(float(&x)?),
            "warmup" => rule.warmup(small(&x)?),
            "initial_baseline" => rule.initial_baseline(d(&x)?),
            other => {
                return Err(PyTypeError::new_err(format!(
                    "relative_latency: unknown key {other:?} (multiplier, floor, ceiling, max_rise_per_hour, warmup, initial_baseline)"
                )))
            }
        };
    }
    Ok(Some(rule))
}

/// The `clock=` setting, if one was given.
fn clock_of(settings: Option<&Bound<'_, PyDict>>) -> Option<Py<PyAny>> {
    let c = settings?.get_item("clock").ok()??;
    (!c.is_none()).then(|| c.unbind())
}

/// A Python callable as a transition listener. It runs on the thread that
/// delivers (the ticker's, or an override's caller), with the GIL. An
/// exception is reported to `sys.unraisablehook` and then counted by the
/// breaker in `listener_panics` (as a panic, resumed without the panic
/// hook: nothing is printed twice); the next listener and the next event
/// go on.
fn listener(callable: Py<PyAny>) -> impl Fn(&tailguard::Transition) + Send + Sync + 'static {
    move |t| {
        let Some(_running) = ListenerCall::enter() else {
            return; // the interpreter is exiting: no Python is called any more
        };
        let raised = Python::try_attach(|py| {
            let call = || -> PyResult<()> {
                let tr = py_fn(py, "_transition")?.call1((
                    snake(t.from),
                    snake(t.to),
                    snake(t.from_mode),
                    snake(t.to_mode),
                    t.generation,
                    snake(t.reason),
                    secs(t.at),
                    t.flapping,
                ))?;
                callable.call1(py, (tr,))?;
                Ok(())
            };
            match call() {
                Ok(()) => false,
                Err(e) => {
                    e.write_unraisable(py, Some(callable.bind(py)));
                    true
                }
            }
        });
        if raised == Some(true) {
            std::panic::resume_unwind(Box::new("a Python listener raised"));
        }
    }
}

/// A circuit breaker for one downstream consumer.
///
/// It measures every call's latency and outcome in windows, and trips
/// (OPEN: calls are rejected at once with `BreakerOpen`) when the
/// consumer's tail latency stays above `latency_threshold`, or its errors
/// above `error_rate`; after a backoff it lets a bounded trickle of probes
/// through (HALF_OPEN) and closes again when they succeed.
///
///     >>> from tailguard import Breaker, BreakerOpen
///     >>> pricing = Breaker(name="pricing", latency_threshold=0.05)
///     >>> with pricing.allow():      # raises BreakerOpen when open
///     ...     pass                   # the call; an exception records a failure
///     >>> pricing.state
///     <State.CLOSED: 'closed'>
///
/// Settings (keywords; times in seconds; the Rust crate's `BreakerBuilder`
/// settings, with its defaults and limits; a bad value raises `ValueError`
/// naming the setting, an unknown setting `TypeError`):
///
/// - latency_threshold: calls slower than this are slow (0.05).
/// - quantile: the latency quantile judged against it (0.99).
/// - trip_windows: consecutive breaching windows that trip (3).
/// - window: one measurement window (1.0).
/// - error_rate: the failed share that trips (0.5), over error_window (10
///   windows), once min_calls calls (20) are seen.
/// - failure_count: (n, within): trip on more than n failures within
///   `within` seconds (off).
/// - base_backoff, max_backoff: the first and the longest OPEN (1.0, 30.0).
/// - half_open_probes: probes at once (1); success_to_close: good probes
///   that close (5); probe_lease: how long a probe may hold its slot.
/// - relative_latency: trip on the consumer's own tail instead, `multiplier`
///   times the P99 it learned from its healthy windows: `True` (the
///   crate's defaults) or a dict of multiplier (2.0), floor (0.001),
///   ceiling (1.0), max_rise_per_hour (1.5), warmup (5 windows),
///   initial_baseline (off). See `latency_baseline`, `seed_baseline()`.
/// - recovery_ramp: hand traffic back gradually over this long (off).
/// - jitter: randomise each OPEN: "none" (default), "full", or a fraction.
/// - on_cancel: what a permit dropped without a verdict counts as:
///   "cancelled" (default) or "failure".
/// - shards: counter shards (default: the cores; grown as threads use it).
/// - flapping: (cycles, within) that flag a flapping consumer.
/// - track_in_flight: count calls still running at a window's close (off).
/// - name: the consumer's name (metrics).
/// - clock: a `ManualClock` for tests (default: the system clock).
/// - ticker: whether the background thread closes its windows (default:
///   yes, unless the clock is manual: then call `tick()`).
/// - on_transition: a callable, or a list of them, called with each
///   `Transition` off the hot path; see the package README.
#[pyclass(module = "tailguard._native", name = "Breaker", frozen, weakref)]
struct PyBreaker {
    breaker: tailguard::Breaker,
    /// The `ManualClock` it was built on, if any (the emitter's deadlines
    /// follow it).
    clock: Option<Py<PyAny>>,
}

#[pymethods]
impl PyBreaker {
    #[new]
    #[pyo3(signature = (**settings))]
    fn new(py: Python<'_>, settings: Option<&Bound<'_, PyDict>>) -> PyResult<Self> {
        let builder = builder_from(py, settings)?;
        let breaker = builder.build().map_err(|e| PyValueError::new_err(e.to_string()))?;
        Ok(Self {
            breaker,
            clock: clock_of(settings),
        })
    }

    /// A `Permit` for one call, or `BreakerOpen` (the call must not be
    /// made). Record the call's outcome on the permit, or use it as a
    /// context manager.
    fn allow(&self, py: Python<'_>) -> PyResult<PyPermit> {
        match self.breaker.allow_owned() {
            Ok(p) => Ok(PyPermit { permit: Some(p) }),
            Err(r) => Err(rejected_err(py, r)),
        }
    }

    /// The state now.
    #[getter]
    fn state<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        state_py(py, self.breaker.state())
    }

    /// The operator's override now.
    #[getter]
    fn mode<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        mode_type(py)?.call1((snake(self.breaker.mode()),))
    }

    /// The consumer's name (`None` if it was given none).
    #[getter]
    fn name(&self) -> Option<String> {
        self.breaker.name().map(str::to_owned)
    }

    /// Seconds until the breaker's next window closes.
    fn next_due(&self) -> f64 {
        secs(self.breaker.next_due())
    }

    /// The breaker's state and counters now, as a `Snapshot` (plain
    /// values). Window counts are those of the last closed window; totals
    /// count every call judged so far (a call is judged when its window
    /// closes).
    fn snapshot<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let s = self.breaker.snapshot();
        let d = PyDict::new(py);
        d.set_item("state", snake(s.state))?;
        d.set_item("mode", snake(s.mode))?;
        d.set_item("generation", s.generation)?;
        d.set_item("trip_count", s.trip_count)?;
        d.set_item("backoff_level", s.backoff_level)?;
        d.set_item("consecutive_breaches", s.consecutive_breaches)?;
        d.set_item("probes_in_flight", s.probes_in_flight)?;
        d.set_item("probe_successes", s.probe_successes)?;
        d.set_item("shadow_rejections", s.shadow_rejections)?;
        d.set_item("next_probe_in", s.next_probe_in.map(secs))?;
        d.set_item("open_for", s.open_for.map(secs))?;
        let w = PyDict::new(py);
        w.set_item("calls", s.window.calls)?;
        w.set_item("errors", s.window.errors)?;
        w.set_item("slow", s.window.slow)?;
        w.set_item("cancelled", s.window.cancelled)?;
        w.set_item("windows", s.window.windows)?;
        w.set_item("closed_at", secs(s.window.closed_at))?;
        w.set_item(
            "latency",
            s.window
                .latency
                .map(|q| (secs(q.p50), secs(q.p90), secs(q.p99), secs(q.p999))),
        )?;
        d.set_item("window", w)?;
        let t = PyDict::new(py);
        t.set_item("calls", s.totals.calls)?;
        t.set_item("errors", s.totals.errors)?;
        t.set_item("slow", s.totals.slow)?;
        t.set_item("cancelled", s.totals.cancelled)?;
        d.set_item("totals", t)?;
        let r = PyDict::new(py);
        r.set_item("open", s.rejections.open)?;
        r.set_item("probes_busy", s.rejections.probes_busy)?;
        r.set_item("forced", s.rejections.forced)?;
        r.set_item("ramping", s.rejections.ramping)?;
        d.set_item("rejections", r)?;
        d.set_item("events_lost", s.events_lost)?;
        d.set_item("listener_panics", s.listener_panics)?;
        d.set_item("uptime", secs(s.uptime))?;
        d.set_item("flapping", s.flapping)?;
        d.set_item("latency_threshold", secs(s.latency_threshold))?;
        d.set_item("latency_baseline", s.latency_baseline.map(secs))?;
        let l = PyDict::new(py);
        l.set_item("window", secs(s.limits.window))?;
        l.set_item("latency_threshold", secs(s.limits.latency_threshold))?;
        l.set_item("slow_fraction", s.limits.slow_fraction)?;
        l.set_item("trip_windows", s.limits.trip_windows)?;
        l.set_item("min_calls", s.limits.min_calls)?;
        l.set_item("error_rate", s.limits.error_rate)?;
        l.set_item("error_window", secs(s.limits.error_window))?;
        l.set_item(
            "failure_count",
            s.limits.failure_count.map(|(n, within)| (n, secs(within))),
        )?;
        l.set_item(
            "relative_latency",
            s.limits.relative.map(|r| {
                (
                    r.multiplier,
                    secs(r.floor),
                    secs(r.ceiling),
                    r.max_rise_per_hour,
                    r.warmup,
                    r.initial_baseline.map(secs),
                )
            }),
        )?;
        l.set_item("recovery_ramp", s.limits.recovery_ramp.map(secs))?;
        d.set_item("limits", l)?;
        d.set_item("ramp", s.ramp.map(|r| (r.admitted, secs(r.remaining))))?;
        py_fn(py, "_snapshot")?.call1((d,))
    }

    /// Closes the window if it is due, and delivers waiting transitions to
    /// the listeners (what the ticker thread does; by hand on a manual
    /// clock).
    fn tick(&self) {
        self.breaker.tick();
    }
    /// Trips a CLOSED breaker now (as if it had breached): OPEN, with its
    /// backoff. Listeners get the transition before this returns.
    fn trip_now(&self) {
        self.breaker.trip_now();
    }
    /// Rejects every call until `reset()` (mode `forced_open`).
    fn force_open(&self) {
        self.breaker.force_open();
    }
    /// Lets every call through and never trips, still measuring, until
    /// `reset()` (mode `forced_closed`).
    fn force_closed(&self) {
        self.breaker.force_closed();
    }
    /// Lets every call through and measures nothing, until `reset()`
    /// (mode `disabled`).
    fn disable(&self) {
        self.breaker.disable();
    }
    /// Lets every call through, measures, and counts what it would have
    /// rejected (`Snapshot.shadow_rejections`), until `reset()`.
    fn metrics_only(&self) {
        self.breaker.metrics_only();
    }
    /// Back to CLOSED, mode `normal`, backoff cleared.
    fn reset(&self) {
        self.breaker.reset();
    }

    /// `@breaker` on a function: each call takes a permit (or raises
    /// `BreakerOpen` without calling it) and records success, or failure
    /// if it raises, with its latency. On a coroutine function the permit
    /// is taken when the call is awaited (`PyGuardedCall`); a function that
    /// returns a coroutine without being one is asked when it is called
    /// and again when its coroutine is awaited, which is what is judged.
    fn __call__<'py>(slf: &Bound<'py, Self>, func: Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        let builtins = py.import("builtins")?;
        if func.is_instance(&builtins.getattr("staticmethod")?)?
            || func.is_instance(&builtins.getattr("classmethod")?)?
        {
            return Err(PyTypeError::new_err(
                "@breaker goes under @staticmethod and @classmethod, not over them: \
                 write @staticmethod (or @classmethod) on top, then @breaker, then the function",
            ));
        }
        if !func.is_callable() {
            return Err(PyTypeError::new_err(
                "@breaker decorates a function (got a non-callable)",
            ));
        }
        let inspect = py.import("inspect")?;
        let is = |what: &str| -> PyResult<bool> { inspect.getattr(what)?.call1((&func,))?.extract() };
        if is("isgeneratorfunction")? || is("isasyncgenfunction")? {
            return Err(PyTypeError::new_err(
                "@breaker cannot guard a generator function: its body runs after the call returns, \
                 out of the breaker's sight (guard the function that consumes it, or take a permit by hand)",
            ));
        }
        let attrs = guarded_attrs(&func)?;
        let guarded = if is("iscoroutinefunction")? {
            let guarded = PyGuardedAsync {
                breaker: slf.get().breaker.clone(),
                func: func.unbind(),
                attrs: attrs.clone().unbind(),
            };
            Bound::new(py, guarded)?.into_any()
        } else {
            let guarded = PyGuarded {
                breaker: slf.get().breaker.clone(),
                func: func.unbind(),
                attrs: attrs.clone().unbind(),
            };
            Bound::new(py, guarded)?.into_any()
        };
        Ok(guarded)
    }

    /// The healthy latency the relative rule learned, in seconds (`None`
    /// without the rule, or before its warm-up).
    #[getter]
    fn latency_baseline(&self) -> Option<f64> {
        self.breaker.latency_baseline().map(secs)
    }

    /// Forgets the learned baseline: the relative rule warms up again.
    fn reset_baseline(&self) {
        self.breaker.reset_baseline();
    }

    /// Sets the relative rule's baseline to `seconds` (a known healthy
    /// latency), ending its warm-up.
    fn seed_baseline(&self, seconds: f64) -> PyResult<()> {
        self.breaker
            .seed_baseline(duration("seconds", seconds)?)
            .map_err(|e| PyValueError::new_err(e.to_string()))
    }

    /// The `ManualClock` the breaker runs on, or `None` (the system clock).
    #[getter]
    fn clock(&self, py: Python<'_>) -> Option<Py<PyAny>> {
        self.clock.as_ref().map(|c| c.clone_ref(py))
    }

    fn __repr__(&self) -> String {
        let name = self.breaker.name().map(|n| format!(" {n:?}")).unwrap_or_default();
        format!("<tailguard.Breaker{name} {}>", snake(self.breaker.state()))
    }
}

/// One call's permit, from `Breaker.allow()`.
///
/// Record the call's verdict once: `record(ok)` (the latency measured since
/// `allow()`), `record_latency(seconds, ok)`, `record_timeout(seconds)`, or
/// `abandon()` (not called). A second verdict raises `PermitUsed`. A permit
/// dropped without one counts as cancelled (no verdict; a probe's slot is
/// free again). As a context manager it records success, or failure if the
/// block raises (the exception goes on).
#[pyclass(module = "tailguard._native", name = "Permit")]
struct PyPermit {
    permit: Option<tailguard::OwnedPermit>,
}

impl PyPermit {
    fn take(&mut self, py: Python<'_>) -> PyResult<tailguard::OwnedPermit> {
        self.permit.take().ok_or_else(|| permit_used(py))
    }
}

#[pymethods]
impl PyPermit {
    /// Records the call's outcome, its latency measured on the breaker's
    /// clock since `allow()`.
    #[pyo3(signature = (ok = true))]
    fn record(&mut self, py: Python<'_>, ok: bool) -> PyResult<()> {
        self.take(py)?.record(ok);
        Ok(())
    }
    /// Records the call's outcome with a latency measured by the caller.
    #[pyo3(signature = (seconds, ok = true))]
    fn record_latency(&mut self, py: Python<'_>, seconds: f64, ok: bool) -> PyResult<()> {
        let latency = duration("seconds", seconds)?;
        self.take(py)?.record_latency(latency, ok);
        Ok(())
    }
    /// Records a call cut at its timeout: failed, and slow.
    fn record_timeout(&mut self, py: Python<'_>, seconds: f64) -> PyResult<()> {
        let elapsed = duration("seconds", seconds)?;
        self.take(py)?.record_timeout(elapsed);
        Ok(())
    }
    /// Gives the permit back with no verdict (the call was not made).
    fn abandon(&mut self, py: Python<'_>) -> PyResult<()> {
        self.take(py)?.abandon();
        Ok(())
    }
    /// Whether this permit is a HALF_OPEN probe.
    #[getter]
    fn is_probe(&self) -> bool {
        self.permit.as_ref().is_some_and(|p| p.is_probe())
    }
    /// Whether its verdict is in (or it was abandoned).
    #[getter]
    fn recorded(&self) -> bool {
        self.permit.is_none()
    }
    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }
    /// Ends the `with` block: a success if it raised nothing, a failure if
    /// it raised an `Exception`, no verdict if it was interrupted (a
    /// `BaseException` that is not an `Exception`: `CancelledError`,
    /// `KeyboardInterrupt`, ...). The exception goes on. A verdict
    /// recorded inside the block stands.
    fn __exit__(&mut self, exc_type: &Bound<'_, PyAny>, exc: &Bound<'_, PyAny>, _tb: &Bound<'_, PyAny>) -> bool {
        if let Some(p) = self.permit.take() {
            if exc_type.is_none() {
                p.record(true);
            } else if exc.is_instance_of::<PyException>() {
                p.record(false);
            } else {
                p.abandon();
            }
        }
        false
    }
    fn __repr__(&self) -> String {
        match &self.permit {
            Some(p) if p.is_probe() => "<tailguard.Permit probe>".into(),
            Some(_) => "<tailguard.Permit>".into(),
            None => "<tailguard.Permit recorded>".into(),
        }
    }
}

/// The `#[pymethods]` of a guarded function (`Guarded`, `GuardedAsync`):
/// the methods given, then those both have (what makes it read as its
/// function: the names, the docstring, the attributes, binding as a
/// method, the cycle collector's view). The `#[pymethods]` tokens are
/// passed in from the call site: written inside the macro, PyO3's
/// generated argument names fall foul of hygiene.
macro_rules! guarded_methods {
    ($pound:tt $attr:tt impl $ty:ident { $($own:tt)* }) => {
        $pound $attr
        impl $ty {
            $($own)*

            fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
                guarded_repr(&self.breaker, self.func.bind(py))
            }
            fn __traverse__(&self, visit: pyo3::PyVisit<'_>) -> Result<(), pyo3::PyTraverseError> {
                visit.call(&self.func)?;
                visit.call(&self.attrs)
            }
            fn __getattribute__<'py>(slf: &Bound<'py, Self>, name: &Bound<'py, PyString>) -> PyResult<Bound<'py, PyAny>> {
                attr_get(slf.as_any(), slf.get().attrs.bind(slf.py()), name)
            }
            fn __setattr__(slf: &Bound<'_, Self>, name: &Bound<'_, PyString>, value: &Bound<'_, PyAny>) -> PyResult<()> {
                attr_set(slf.as_any(), slf.get().attrs.bind(slf.py()), name, value)
            }
            fn __delattr__(slf: &Bound<'_, Self>, name: &Bound<'_, PyString>) -> PyResult<()> {
                attr_del(slf.get().attrs.bind(slf.py()), name)
            }
            #[getter]
            fn __wrapped__(&self, py: Python<'_>) -> Py<PyAny> {
                self.func.clone_ref(py)
            }
            #[getter]
            fn __name__(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
                func_attr(self.func.bind(py), "__name__")
            }
            #[getter]
            fn __qualname__(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
                func_attr(self.func.bind(py), "__qualname__")
            }
            #[getter]
            fn __doc__(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
                Ok(self.func.bind(py).getattr("__doc__")?.unbind())
            }
            /// Bound as a method when it decorates one.
            fn __get__(
                slf: Py<Self>,
                py: Python<'_>,
                obj: &Bound<'_, PyAny>,
                _owner: &Bound<'_, PyAny>,
            ) -> PyResult<Py<PyAny>> {
                bind_method(py, slf.into_any(), obj)
            }
        }
    };
}

// A function guarded by a breaker (`@breaker`): each call takes a permit
// (or raises `BreakerOpen` without calling it) and records success, or
// failure if it raises an `Exception`, with its latency. No class
// docstring: `__doc__` is the function's (the getter below).
#[allow(missing_docs)]
#[pyclass(module = "tailguard._native", name = "Guarded", frozen, weakref)]
struct PyGuarded {
    breaker: tailguard::Breaker,
    func: Py<PyAny>,
    /// Its `__dict__` (see [`guarded_attrs`]).
    attrs: Py<PyDict>,
}

guarded_methods! {
#[pymethods]
impl PyGuarded {
    #[pyo3(signature = (*args, **kwargs))]
    fn __call__(
        &self,
        py: Python<'_>,
        args: &Bound<'_, PyTuple>,
        kwargs: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Py<PyAny>> {
        let permit = self.breaker.allow().map_err(|r| rejected_err(py, r))?;
        match self.func.call(py, args, kwargs) {
            Ok(v) if v.bind(py).get_type().is(coroutine_type(py)?) => {
                // A function that returns a coroutine without being a
                // coroutine function (an `async def __call__`, a
                // `functools.wraps` wrapper): its outcome is the
                // coroutine's, so it is judged where it is awaited, as
                // `@breaker` on a coroutine function judges it. This
                // permit saw only the coroutine made: no verdict.
                permit.abandon();
                self.guard_coroutine(py, v)
            }
            Ok(v) => {
                permit.record(true);
                Ok(v)
            }
            Err(e) => {
                if e.is_instance_of::<PyException>(py) {
                    permit.record(false);
                } else {
                    permit.abandon(); // interrupted (KeyboardInterrupt, SystemExit, ...): no verdict
                }
                Err(e)
            }
        }
    }
}
}

impl PyGuarded {
    /// A guarded call around `coroutine`, made by this guard's function:
    /// the permit is taken at its first step, as for a coroutine function.
    #[cold]
    fn guard_coroutine(&self, py: Python<'_>, coroutine: Py<PyAny>) -> PyResult<Py<PyAny>> {
        let guard = PyGuardedAsync {
            breaker: self.breaker.clone(),
            func: self.func.clone_ref(py),
            attrs: self.attrs.clone_ref(py),
        };
        let call = PyGuardedCall::new(Py::new(py, guard)?, coroutine);
        Ok(Py::new(py, call)?.into_any())
    }
}

fn guarded_repr(breaker: &tailguard::Breaker, func: &Bound<'_, PyAny>) -> PyResult<String> {
    let name = breaker.name().map(|n| format!(" by {n:?}")).unwrap_or_default();
    Ok(format!("<guarded{name} {}>", func.repr()?))
}

py_type!(partial_type, "functools", "partial");
py_type!(method_type, "types", "MethodType");

/// The function whose code `func` runs, through `functools.partial` and
/// bound methods (as `inspect` unwraps them to find a coroutine's code).
fn code_owner<'py>(func: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    let py = func.py();
    let mut f = func.clone();
    for _ in 0..64 {
        if f.is_instance(partial_type(py)?)? {
            f = f.getattr(pyo3::intern!(py, "func"))?;
        } else if f.is_instance(method_type(py)?)? {
            f = f.getattr(pyo3::intern!(py, "__func__"))?;
        } else {
            break;
        }
    }
    Ok(f)
}

/// `func`'s own attribute `name`, or else that of the function it runs (a
/// `functools.partial` has no `__name__`).
fn func_attr(func: &Bound<'_, PyAny>, name: &str) -> PyResult<Py<PyAny>> {
    match func.getattr(name) {
        Ok(v) => Ok(v.unbind()),
        Err(e) => match code_owner(func)?.getattr(name) {
            Ok(v) => Ok(v.unbind()),
            Err(_) => Err(e),
        },
    }
}

/// A guarded function's attributes, its `__dict__`: what `functools.wraps`
/// copies besides the getters, the function's `__module__` and its
/// attributes (frameworks mark functions so, `abc` marks abstract ones),
/// and whatever is set on it later. A field, read and written through
/// [`attr_get`], [`attr_set`] and [`attr_del`], rather than PyO3's `dict`
/// option: `__traverse__` shows the field to the cycle collector (PyO3
/// does not show the `dict` slot), so a cycle through an attribute is
/// collected.
fn guarded_attrs<'py>(func: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyDict>> {
    let py = func.py();
    let d = PyDict::new(py);
    if let Ok(fd) = func.getattr(pyo3::intern!(py, "__dict__")) {
        d.call_method1(pyo3::intern!(py, "update"), (fd,))?;
    }
    if let Ok(m) = func.getattr(pyo3::intern!(py, "__module__")) {
        d.set_item(pyo3::intern!(py, "__module__"), m)?;
    }
    Ok(d)
}

py_type!(object_type, "builtins", "object");

/// Attribute lookup on a guarded function: `__module__` from its
/// attributes (the function's, as `functools.wraps` would set it: the
/// class's own stays `tailguard._native`), then the object's own (the
/// getters, methods), then its attributes.
fn attr_get<'py>(
    slf: &Bound<'py, PyAny>,
    attrs: &Bound<'py, PyDict>,
    name: &Bound<'py, PyString>,
) -> PyResult<Bound<'py, PyAny>> {
    let py = slf.py();
    if name.to_cow()? == "__module__" {
        if let Some(m) = attrs.get_item(name)? {
            return Ok(m);
        }
    }
    match object_type(py)?
        .getattr(pyo3::intern!(py, "__getattribute__"))?
        .call1((slf, name))
    {
        Ok(v) => Ok(v),
        Err(e) if e.is_instance_of::<pyo3::exceptions::PyAttributeError>(py) => match attrs.get_item(name)? {
            Some(v) => Ok(v),
            None if name.to_cow()? == "__dict__" => Ok(attrs.clone().into_any()),
            None => Err(e),
        },
        Err(e) => Err(e),
    }
}

/// Sets an attribute on a guarded function, as on a function, except the
/// names its type defines (the function's own, read through the getters)
/// and `__dict__`; `__module__` may be set.
fn attr_set(
    slf: &Bound<'_, PyAny>,
    attrs: &Bound<'_, PyDict>,
    name: &Bound<'_, PyString>,
    value: &Bound<'_, PyAny>,
) -> PyResult<()> {
    let n = name.to_cow()?;
    if n != "__module__" && (n == "__dict__" || slf.get_type().getattr_opt(name)?.is_some()) {
        return Err(pyo3::exceptions::PyAttributeError::new_err(format!(
            "{} is read-only on a guarded function (it is its function's)",
            name.repr()?
        )));
    }
    attrs.set_item(name, value)
}

/// Deletes an attribute set on (or copied to) a guarded function.
fn attr_del(attrs: &Bound<'_, PyDict>, name: &Bound<'_, PyString>) -> PyResult<()> {
    if attrs.get_item(name)?.is_none() {
        return Err(pyo3::exceptions::PyAttributeError::new_err(format!(
            "the guarded function has no attribute {}",
            name.repr()?
        )));
    }
    attrs.del_item(name)
}

// `@breaker` on a coroutine function. Each call returns a `GuardedCall`,
// an awaitable that takes its permit when it is first awaited (or raises
// `BreakerOpen` there, closing the unstarted coroutine), drives the
// function's coroutine step by step, and records the verdict when it ends:
// success if it returns, failure if it raises an `Exception`, none if it is
// cancelled, closed, collected or interrupted. Native rather than an
// `async def` wrapper: no second frame per call, and a coroutine that
// returns `None` ends without a `StopIteration` object. It reads as a
// coroutine function to `inspect` and `asyncio` (it is function-like:
// `__code__` and the rest are the function's), but it is not a Python
// function (`inspect.isfunction` is false). No class docstring: `__doc__`
// is the function's.
#[allow(missing_docs)]
#[pyclass(module = "tailguard._native", name = "GuardedAsync", frozen, weakref)]
struct PyGuardedAsync {
    breaker: tailguard::Breaker,
    func: Py<PyAny>,
    /// Its `__dict__` (see [`guarded_attrs`]).
    attrs: Py<PyDict>,
}

py_type!(coroutine_type, "types", "CoroutineType");

guarded_methods! {
#[pymethods]
impl PyGuardedAsync {
    #[pyo3(signature = (*args, **kwargs))]
    fn __call__(
        slf: &Bound<'_, Self>,
        args: &Bound<'_, PyTuple>,
        kwargs: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<PyGuardedCall> {
        let py = slf.py();
        let func = slf.get().func.bind(py);
        let awaitable = func.call(args, kwargs)?;
        // A native coroutine is sent to directly (what `await` does);
        // another awaitable through its `__await__()` iterator.
        let iter = if awaitable.get_type().is(coroutine_type(py)?) {
            awaitable
        } else {
            match awaitable.getattr(pyo3::intern!(py, "__await__")) {
                Ok(m) => m.call0()?,
                Err(_) => {
                    return Err(PyTypeError::new_err(format!(
                        "@breaker on a coroutine function: {} returned {}, not an awaitable \
                         (no verdict recorded)",
                        func.repr()?,
                        awaitable.get_type().name()?
                    )))
                }
            }
        };
        Ok(PyGuardedCall::new(slf.clone().unbind(), iter.unbind()))
    }
    // The code's own (through a `functools.partial`), so that
    // `inspect.iscoroutinefunction` (and so `asyncio`'s, and frameworks
    // that ask) sees a coroutine function.
    #[getter]
    fn __code__(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        func_attr(self.func.bind(py), "__code__")
    }
    #[getter]
    fn __defaults__(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        func_attr(self.func.bind(py), "__defaults__")
    }
    #[getter]
    fn __kwdefaults__(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        func_attr(self.func.bind(py), "__kwdefaults__")
    }
    #[getter]
    fn __annotations__(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        func_attr(self.func.bind(py), "__annotations__")
    }
}
}

/// One call of a coroutine function guarded by `@breaker`: await it (once).
/// It takes its permit when first awaited, and is a coroutine to
/// `asyncio` (`create_task`, `gather`): `send`, `throw` and `close`
/// forward to the function's coroutine.
//
// Frozen, its state in `GilCell`s: PyO3's borrow flag on a mutable class
// is an atomic compare-and-swap per method call, two per await; a `Cell`
// under the GIL is a plain load and store. No reference into a cell is
// ever held: values are taken out and put back, so a step that calls
// back into the call (or the cycle collector visiting it mid-step) finds
// consistent state, and the `running` flag refuses re-entry.
#[pyclass(module = "tailguard._native", name = "GuardedCall", frozen, weakref)]
struct PyGuardedCall {
    /// The permit, once taken. It borrows the breaker inside `guard`,
    /// which this call keeps alive and never replaces (see `admit`).
    permit: GilCell<Option<tailguard::Permit<'static>>>,
    /// The function's coroutine (or its awaitable's iterator); `None` once
    /// it has ended, and taken out while a step runs.
    iter: GilCell<Option<Py<PyAny>>>,
    started: GilCell<bool>,
    /// A step (or `close`) is running: the call refuses another.
    running: GilCell<bool>,
    guard: Py<PyGuardedAsync>,
}

/// A `Cell` that a frozen pyclass may hold: state touched only by
/// methods of its object, which run with the GIL held.
struct GilCell<T>(std::cell::Cell<T>);

// The package is built for CPython with the GIL (the limited API, which
// the free-threaded build does not have): `GilCell`'s soundness rests on it.
#[cfg(Py_GIL_DISABLED)]
compile_error!("tailguard's Python package needs a CPython build with the GIL (GilCell)");

// SAFETY: a `GilCell` is only reached through the object that holds it,
// from its methods, slots and `Drop`, which CPython calls with the GIL
// held (the build has a GIL: checked above); so no two threads touch one
// at the same time, and on one thread a `Cell` is sound under re-entry
// (it hands out no references). `T: Send`: the value may be taken out on
// one thread and dropped on another.
unsafe impl<T: Send> Sync for GilCell<T> {}

impl<T> GilCell<T> {
    fn new(value: T) -> Self {
        Self(std::cell::Cell::new(value))
    }
}

impl<T> std::ops::Deref for GilCell<T> {
    type Target = std::cell::Cell<T>;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

/// Collected mid-flight (its coroutine is closed by its own finalizer
/// next): no verdict, as when it is closed or cancelled. (The permit goes
/// here, before `guard`, whose breaker it borrows.)
impl Drop for PyGuardedCall {
    fn drop(&mut self) {
        if let Some(p) = self.permit.take() {
            p.abandon();
        }
    }
}

/// How a step of the guarded coroutine ended. (`Bound`, not `Py`: a
/// `Bound` is dropped with a plain decref, a `Py` first asks whether the
/// thread is attached.)
enum Step<'py> {
    Yielded(Bound<'py, PyAny>),
    Returned(Bound<'py, PyAny>),
}

/// The call marked running for as long as this lives (a step, a close).
struct Running<'a>(&'a GilCell<bool>);

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0.set(false);
    }
}

impl PyGuardedCall {
    /// A call of `guard`'s function stepping `iter` (the coroutine, or an
    /// awaitable's `__await__()` iterator), not started.
    fn new(guard: Py<PyGuardedAsync>, iter: Py<PyAny>) -> Self {
        PyGuardedCall {
            permit: GilCell::new(None),
            iter: GilCell::new(Some(iter)),
            started: GilCell::new(false),
            running: GilCell::new(false),
            guard,
        }
    }

    /// Whether a step of `iter` that failed with `e` was refused because
    /// `iter` is executing already, reached from inside itself by a path
    /// that is not this call's (the collector finalizing the coroutine,
    /// whose cleanup then sends into, throws into or closes this call):
    /// nothing ran and nothing ended, so `iter` goes back and there is no
    /// verdict. Asked only when a step fails.
    #[cold]
    fn refused_reentry(&self, py: Python<'_>, iter: &Bound<'_, PyAny>, e: &PyErr) -> bool {
        if e.is_instance_of::<PyValueError>(py) && executing(iter) {
            self.iter.set(Some(iter.clone().unbind()));
            return true;
        }
        false
    }

    /// Marks the call running: a call that is running (it awaits, sends
    /// into or closes itself) refuses, as a running coroutine does.
    fn enter(&self) -> PyResult<Running<'_>> {
        if self.running.replace(true) {
            return Err(already_executing());
        }
        Ok(Running(&self.running))
    }

    /// Whether the guarded coroutine has not ended (and is not running).
    fn pending(&self) -> bool {
        let it = self.iter.take();
        let pending = it.is_some();
        self.iter.set(it);
        pending
    }

    /// The guarded coroutine, with a reference of its own (`None` once it
    /// has ended, or while it runs).
    fn iter_ref(&self, py: Python<'_>) -> Option<Py<PyAny>> {
        let it = self.iter.take();
        let cloned = it.as_ref().map(|i| i.clone_ref(py));
        self.iter.set(it);
        cloned
    }

    /// Takes the permit on the first step; a rejection closes the unstarted
    /// coroutine (no "never awaited" warning: it was refused, not lost).
    fn admit(&self, py: Python<'_>) -> PyResult<()> {
        if self.started.replace(true) {
            return Ok(());
        }
        let allowed = self.guard.get().breaker.allow().map(|p| {
            // SAFETY: only the lifetime changes. The permit borrows the
            // breaker (an `Arc`'s contents) held by the frozen
            // `PyGuardedAsync` that `self.guard` keeps alive: `guard` is
            // never replaced, a frozen class's fields never change, and
            // the permit leaves `self` only to be consumed (recorded or
            // abandoned) within a method of `self`, or in `Drop`, before
            // the fields (so `guard`) are dropped.
            unsafe { std::mem::transmute::<tailguard::Permit<'_>, tailguard::Permit<'static>>(p) }
        });
        match allowed {
            Ok(p) => {
                self.permit.set(Some(p));
                Ok(())
            }
            Err(r) => {
                self.close_unstarted(py);
                Err(rejected_err(py, r))
            }
        }
    }

    /// Closes a coroutine that never ran (refused, or thrown into before
    /// its first step): no "never awaited" warning, for it was not lost.
    /// What its closing raises goes to `sys.unraisablehook`: the caller
    /// gets the reason it was not run instead.
    fn close_unstarted(&self, py: Python<'_>) {
        if let Some(it) = self.iter.take() {
            if let Err(e) = close_iter(it.bind(py)) {
                e.write_unraisable(py, Some(it.bind(py)));
            }
        }
    }

    /// The verdict of a step of `iter` (taken out of the call for it):
    /// nothing while it runs (`iter` goes back), success when it returns,
    /// failure when it raises an `Exception`, none when it is interrupted
    /// (`CancelledError`, `KeyboardInterrupt`, ...).
    fn settle<'py>(&self, py: Python<'py>, iter: Bound<'py, PyAny>, step: PyResult<Step<'py>>) -> PyResult<Step<'py>> {
        match &step {
            Ok(Step::Yielded(_)) => self.iter.set(Some(iter.unbind())),
            Ok(Step::Returned(_)) => {
                drop(iter);
                if let Some(p) = self.permit.take() {
                    p.record(true);
                }
            }
            Err(e) => {
                if !self.refused_reentry(py, &iter, e) {
                    drop(iter);
                    self.judge(py, e);
                }
            }
        }
        step
    }

    /// The verdict of a call ended by `e`: a failure if it is an
    /// `Exception`, none otherwise.
    fn judge(&self, py: Python<'_>, e: &PyErr) {
        if let Some(p) = self.permit.take() {
            if e.is_instance_of::<PyException>(py) {
                p.record(false);
            } else {
                p.abandon();
            }
        }
    }

    fn send_value<'py>(&self, py: Python<'py>, value: &Bound<'py, PyAny>) -> PyResult<Step<'py>> {
        let _running = self.enter()?;
        if !self.started.get() && !value.is_none() {
            // The caller's mistake, refused before the breaker is asked
            // (as a coroutine refuses it): no permit, no verdict.
            return Err(PyTypeError::new_err(
                "can't send non-None value to a just-started coroutine",
            ));
        }
        self.admit(py)?;
        let Some(iter) = self.iter.take() else {
            return Err(PyRuntimeError::new_err("cannot reuse an already awaited guarded call"));
        };
        let iter = iter.into_bound(py);
        let step = send(&iter, value);
        self.settle(py, iter, step)
    }
}

/// One step of `iter` with `value` sent in, the way `await` steps it
/// (`PyIter_Send`: a coroutine that returns hands back its value with no
/// `StopIteration` object made). Counted as a level of recursion, as the
/// interpreter counts a frame: a guarded step takes more C stack than a
/// plain `await`, and a guarded coroutine recursing without end must end
/// in `RecursionError` before the thread's stack does.
fn send<'py>(iter: &Bound<'py, PyAny>, value: &Bound<'py, PyAny>) -> PyResult<Step<'py>> {
    let py = iter.py();
    let mut out: *mut pyo3::ffi::PyObject = std::ptr::null_mut();
    // SAFETY: the GIL is held (`py`). `Py_EnterRecursiveCall` returns
    // nonzero with `RecursionError` set (then nothing else is called), and
    // each successful enter is matched by one `Py_LeaveRecursiveCall`.
    // `iter` and `value` are live objects borrowed for the whole call.
    // `PyIter_Send` leaves a new (owned) reference in `out` when it
    // returns PYGEN_RETURN or PYGEN_NEXT, and NULL with an exception set
    // when it returns PYGEN_ERROR; each owned reference is moved into a
    // `Bound` exactly once below.
    unsafe {
        if pyo3::ffi::Py_EnterRecursiveCall(c" in a guarded call".as_ptr()) != 0 {
            return Err(PyErr::fetch(py));
        }
        let sent = pyo3::ffi::PyIter_Send(iter.as_ptr(), value.as_ptr(), &mut out);
        pyo3::ffi::Py_LeaveRecursiveCall();
        match sent {
            pyo3::ffi::PySendResult::PYGEN_RETURN => Ok(Step::Returned(Bound::from_owned_ptr(py, out))),
            pyo3::ffi::PySendResult::PYGEN_NEXT => Ok(Step::Yielded(Bound::from_owned_ptr(py, out))),
            _ => Err(PyErr::fetch(py)),
        }
    }
}

fn close_iter(iter: &Bound<'_, PyAny>) -> PyResult<()> {
    match iter.getattr(pyo3::intern!(iter.py(), "close")) {
        Ok(close) => close.call0().map(drop),
        Err(_) => Ok(()),
    }
}

/// Whether `iter` (a coroutine or generator) is executing now: its frame
/// is on the stack, reached by a path other than its call's (see
/// `refused_reentry`). A throw into or a close of such a coroutine is not
/// made at all (CPython 3.11's own can crash on it); a send is refused by
/// the coroutine itself.
fn executing(iter: &Bound<'_, PyAny>) -> bool {
    let py = iter.py();
    let running = |attr: &Bound<'_, PyString>| iter.getattr(attr).and_then(|v| v.is_truthy()).unwrap_or(false);
    running(pyo3::intern!(py, "cr_running")) || running(pyo3::intern!(py, "gi_running"))
}

/// The error a call executing already gives: what a coroutine gives.
fn already_executing() -> PyErr {
    PyValueError::new_err("coroutine already executing")
}

/// `StopIteration(value)`: how a step that returned ends a `send` or
/// `throw`.
fn stop_iteration(value: Bound<'_, PyAny>) -> PyErr {
    pyo3::exceptions::PyStopIteration::new_err((value.unbind(),))
}

/// Whether `StopIteration` may be set with `value` itself rather than an
/// exception object: CPython reads a bare value as the return value,
/// except a tuple (read as the exception's arguments) or an exception
/// (read as the exception itself).
fn bare_stop_value(value: &Bound<'_, PyAny>) -> bool {
    !(value.is_instance_of::<PyTuple>() || value.is_instance_of::<pyo3::exceptions::PyBaseException>())
}

#[pymethods]
impl PyGuardedCall {
    // Visible to the cycle collector: a coroutine that never ends can
    // refer back to its own call (through its task, say). (The coroutine
    // is not visited while a step runs, when it is out of the call: it is
    // then referred to from the stack, so the collector keeps it.)
    fn __traverse__(&self, visit: pyo3::PyVisit<'_>) -> Result<(), pyo3::PyTraverseError> {
        visit.call(&self.guard)?;
        let it = self.iter.take();
        let visited = match &it {
            Some(it) => visit.call(it),
            None => Ok(()),
        };
        self.iter.set(it);
        visited
    }
    fn __clear__(&self) {
        drop(self.iter.take());
    }
    /// Itself, to be awaited once: a call another awaiter is stepping
    /// (started, not ended) refuses a second, as a coroutine does.
    fn __await__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, Self>> {
        let this = slf.get();
        if this.running.get() {
            return Err(already_executing());
        }
        if this.started.get() && this.pending() {
            return Err(PyRuntimeError::new_err(format!(
                "coroutine is being awaited already (a guarded call of {})",
                this.guard.get().func.bind(slf.py()).repr()?
            )));
        }
        Ok(slf.clone())
    }
    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }
    fn __next__<'py>(slf: &Bound<'py, Self>) -> PyResult<Option<Bound<'py, PyAny>>> {
        let py = slf.py();
        match slf.get().send_value(py, &py.None().into_bound(py))? {
            Step::Yielded(v) => Ok(Some(v)),
            // `None` ends the iteration with no exception at all.
            Step::Returned(v) if v.is_none() => Ok(None),
            Step::Returned(v) if bare_stop_value(&v) => {
                // SAFETY: the GIL is held (`v` is bound to it) and `v` and
                // the `StopIteration` type are live objects;
                // `PyErr_SetObject` takes its own references to both. The
                // `None` returned next is NULL to the interpreter: with
                // this exception set, the iterator protocol's return of
                // `v` (read by `await` without making the exception
                // object, as a `StopIteration` built by PyO3 would be).
                unsafe { pyo3::ffi::PyErr_SetObject(pyo3::ffi::PyExc_StopIteration, v.as_ptr()) };
                Ok(None)
            }
            Step::Returned(v) => Err(stop_iteration(v)),
        }
    }
    /// Sends `value` into the guarded coroutine (the coroutine protocol).
    fn send<'py>(slf: &Bound<'py, Self>, value: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        match slf.get().send_value(slf.py(), value)? {
            Step::Yielded(v) => Ok(v),
            Step::Returned(v) => Err(stop_iteration(v)),
        }
    }
    /// Raises an exception inside the guarded coroutine (the coroutine
    /// protocol: how a task is cancelled). Before the first step the call
    /// never starts: the exception is raised here, the awaitable closed
    /// unstarted, no permit taken (as a coroutine thrown into before it
    /// starts raises at once; an awaitable's iterator that swallowed it
    /// would otherwise run unguarded).
    #[pyo3(signature = (typ, val = None, tb = None))]
    fn throw<'py>(
        slf: &Bound<'py, Self>,
        typ: &Bound<'py, PyAny>,
        val: Option<&Bound<'py, PyAny>>,
        tb: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        let this = slf.get();
        let _running = this.enter()?;
        if !this.started.replace(true) {
            this.close_unstarted(py);
            return Err(thrown(typ, val));
        }
        let Some(iter) = this.iter.take() else {
            return Err(thrown(typ, val));
        };
        let iter = iter.into_bound(py);
        if executing(&iter) {
            this.iter.set(Some(iter.unbind()));
            return Err(already_executing());
        }
        let step = match iter.getattr(pyo3::intern!(py, "throw")) {
            Ok(throw) => {
                let args = match (val, tb) {
                    (None, None) => PyTuple::new(py, [typ])?,
                    (Some(v), None) => PyTuple::new(py, [typ, v])?,
                    (v, Some(tb)) => PyTuple::new(py, [typ, v.unwrap_or(&py.None().into_bound(py)), tb])?,
                };
                match throw.call1(args) {
                    Ok(v) => Ok(Step::Yielded(v)),
                    // Its value read here, so that a value that cannot be
                    // read still ends the call through `settle` (judged).
                    Err(e) if e.is_instance_of::<pyo3::exceptions::PyStopIteration>(py) => {
                        e.value(py).getattr(pyo3::intern!(py, "value")).map(Step::Returned)
                    }
                    Err(e) => Err(e),
                }
            }
            // An iterator with no `throw`: the exception is raised here,
            // where the call is awaited (as `yield from` does).
            Err(_) => Err(thrown(typ, val)),
        };
        match this.settle(py, iter, step)? {
            Step::Yielded(v) => Ok(v),
            Step::Returned(v) => Err(stop_iteration(v)),
        }
    }
    /// Closes the guarded coroutine: no verdict (the call was cut short
    /// by its caller), unless the coroutine raises an `Exception` as it
    /// closes (a failure, as when it raises one as it is cancelled).
    fn close(slf: &Bound<'_, Self>) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        let _running = this.enter()?;
        this.started.set(true);
        let Some(it) = this.iter.take() else {
            return Ok(());
        };
        if executing(it.bind(py)) {
            this.iter.set(Some(it));
            return Err(already_executing());
        }
        // Not executing before the close, it is not after it either (a
        // re-entry during the close meets `running`): an error is the
        // coroutine's own.
        let closed = close_iter(it.bind(py));
        match &closed {
            Err(e) => this.judge(py, e),
            Ok(()) => {
                if let Some(p) = this.permit.take() {
                    p.abandon();
                }
            }
        }
        closed
    }
    /// The guarded function's name (what a task's repr shows).
    #[getter]
    fn __name__(slf: &Bound<'_, Self>) -> PyResult<Py<PyAny>> {
        func_attr(slf.get().guard.get().func.bind(slf.py()), "__name__")
    }
    /// The guarded function's qualified name.
    #[getter]
    fn __qualname__(slf: &Bound<'_, Self>) -> PyResult<Py<PyAny>> {
        func_attr(slf.get().guard.get().func.bind(slf.py()), "__qualname__")
    }
    /// The guarded coroutine's code, frame and what it awaits (`None` once
    /// it has ended, or while it runs).
    #[getter]
    fn cr_code(slf: &Bound<'_, Self>) -> Option<Py<PyAny>> {
        inner_attr(slf, "cr_code")
    }
    #[getter]
    fn cr_frame(slf: &Bound<'_, Self>) -> Option<Py<PyAny>> {
        inner_attr(slf, "cr_frame")
    }
    #[getter]
    fn cr_await(slf: &Bound<'_, Self>) -> Option<Py<PyAny>> {
        inner_attr(slf, "cr_await")
    }
    /// Whether the guarded coroutine is running now.
    #[getter]
    fn cr_running(slf: &Bound<'_, Self>) -> bool {
        slf.get().running.get()
    }
    fn __repr__(slf: &Bound<'_, Self>) -> PyResult<String> {
        Ok(format!(
            "<guarded call of {}>",
            slf.get().guard.get().func.bind(slf.py()).repr()?
        ))
    }
}

/// An attribute of the guarded coroutine, if it has one and the call is
/// not running.
fn inner_attr(slf: &Bound<'_, PyGuardedCall>, name: &str) -> Option<Py<PyAny>> {
    let it = slf.get().iter_ref(slf.py())?;
    it.bind(slf.py()).getattr(name).ok().map(Bound::unbind)
}

/// The exception `throw(typ, val)` names, to raise where the call is
/// awaited.
fn thrown(typ: &Bound<'_, PyAny>, val: Option<&Bound<'_, PyAny>>) -> PyErr {
    if typ.is_instance_of::<pyo3::exceptions::PyBaseException>() {
        return PyErr::from_value(typ.clone());
    }
    let made = match val {
        Some(v) if v.is_instance_of::<pyo3::exceptions::PyBaseException>() => Ok(v.clone()),
        Some(v) if !v.is_none() => typ.call1((v,)),
        _ => typ.call0(),
    };
    match made {
        Ok(e) => PyErr::from_value(e),
        Err(e) => e,
    }
}

/// `types.MethodType(f, obj)`, or `f` itself when looked up on the class.
fn bind_method(py: Python<'_>, f: Py<PyAny>, obj: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
    if obj.is_none() {
        return Ok(f);
    }
    Ok(method_type(py)?.call1((f, obj))?.unbind())
}

// ----------------------------------------------------------------------
// The emitter: admission and accounting here, the awaited call in Python.

fn divert_py<'py>(py: Python<'py>, reason: Divert<Py<PyAny>>) -> PyResult<Bound<'py, PyAny>> {
    let t = divert_type(py)?;
    let kw = PyDict::new(py);
    let kind = match reason {
        Divert::Open(r) => {
            kw.set_item("retry_after", r.retry_after().map(secs))?;
            "open"
        }
        Divert::BulkheadFull => "bulkhead_full",
        Divert::TimedOut(d) => {
            kw.set_item("elapsed", secs(d))?;
            "timed_out"
        }
        Divert::Failed(e) => {
            kw.set_item("error", e)?;
            "failed"
        }
        Divert::NoTimer => "no_timer",
        _ => "other",
    };
    t.call((kind,), Some(&kw))
}

fn outcome_py<'py>(py: Python<'py>, out: Emitted<Trigger, Py<PyAny>, Py<PyAny>>) -> PyResult<Bound<'py, PyAny>> {
    match out {
        Emitted::Delivered(value) => Ok(Bound::new(py, PyDelivered { value })?.into_any()),
        Emitted::Diverted { reason, displaced } => {
            let displaced = match displaced {
                Some((t, p)) => Some(PyTuple::new(py, [t.into_bound(py), priority_py(py, p)?])?),
                None => None,
            };
            diverted_type(py)?.call1((divert_py(py, reason)?, displaced))
        }
        Emitted::HandedBack {
            trigger,
            class,
            reason,
            not_queued,
        } => handed_back_type(py)?.call1((
            trigger,
            priority_py(py, class)?,
            divert_py(py, reason)?,
            match not_queued {
                HandBack::QueueFull => "queue_full",
                HandBack::ShutDown => "shut_down",
            },
        )),
    }
}

/// The call succeeded: ``value`` is what it returned. (An emit's most
/// common outcome, so it is built natively: a tenth of a frozen
/// dataclass's cost.)
#[pyclass(module = "tailguard", name = "Delivered", frozen)]
struct PyDelivered {
    value: Py<PyAny>,
}

#[pymethods]
impl PyDelivered {
    #[new]
    fn new(value: Py<PyAny>) -> Self {
        Self { value }
    }
    /// What the call returned.
    #[getter]
    fn value(&self, py: Python<'_>) -> Py<PyAny> {
        self.value.clone_ref(py)
    }
    /// Always ``True`` (``False`` on ``Diverted`` and ``HandedBack``).
    #[classattr]
    fn delivered() -> bool {
        true
    }
    #[classattr]
    fn __match_args__() -> (&'static str,) {
        ("value",)
    }
    fn __eq__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<bool> {
        match other.cast::<PyDelivered>() {
            Ok(o) => self.value.bind(py).eq(o.get().value.bind(py)),
            Err(_) => Ok(false),
        }
    }
    fn __hash__(&self, py: Python<'_>) -> PyResult<isize> {
        let key = ["Delivered".into_pyobject(py)?.into_any(), self.value.bind(py).clone()];
        PyTuple::new(py, key)?.hash()
    }
    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        Ok(format!("Delivered(value={})", self.value.bind(py).repr()?))
    }
    fn __reduce__(&self, py: Python<'_>) -> PyResult<(Py<PyAny>, (Py<PyAny>,))> {
        Ok((
            py.get_type::<PyDelivered>().into_any().unbind(),
            (self.value.clone_ref(py),),
        ))
    }
}

/// The native half of `tailguard.Emitter`.
#[pyclass(module = "tailguard._native", name = "_Emitter", frozen)]
struct PyEmitter {
    emitter: Emitter<Trigger>,
}

#[pymethods]
impl PyEmitter {
    #[new]
    #[pyo3(signature = (breaker, capacity, bulkhead = None, timeout = 1.0, replay_attempts = None))]
    fn new(
        breaker: &Bound<'_, PyBreaker>,
        capacity: usize,
        bulkhead: Option<usize>,
        timeout: f64,
        replay_attempts: Option<u32>,
    ) -> PyResult<Self> {
        let v = |e: tailguard::ConfigError| PyValueError::new_err(e.to_string());
        let queue = DeadLetterQueue::with_capacity(capacity).map_err(v)?;
        let mut b = Emitter::builder(breaker.get().breaker.clone(), queue);
        if let Some(n) = bulkhead {
            b = b.bulkhead(n).map_err(v)?;
        }
        b = b.timeout(duration("timeout", timeout)?).map_err(v)?;
        if let Some(n) = replay_attempts {
            b = b.replay_attempts(n).map_err(v)?;
        }
        Ok(Self {
            emitter: b.build().map_err(v)?,
        })
    }

    /// Admits a call (an `_InFlight`) or returns the outcome of one that
    /// was not admitted (its trigger already diverted or handed back).
    fn begin<'py>(
        &self,
        py: Python<'py>,
        trigger: Trigger,
        priority: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let class = priority_from(priority)?;
        match self.emitter.begin::<Py<PyAny>, Py<PyAny>>(trigger, class) {
            Ok(call) => Ok(Bound::new(py, PyInFlight { call: Some(call) })?.into_any()),
            Err(out) => outcome_py(py, out),
        }
    }

    /// Queues a trigger by hand: `None`, or the `(trigger, priority)` that
    /// gave way; `QueueFull` or `EmitterShutDown` (carrying the trigger)
    /// if it cannot be queued.
    fn enqueue<'py>(
        &self,
        py: Python<'py>,
        trigger: Trigger,
        priority: &Bound<'py, PyAny>,
    ) -> PyResult<Option<Bound<'py, PyTuple>>> {
        let class = priority_from(priority)?;
        match self.emitter.enqueue(trigger, class) {
            Ok(Pushed::Queued) => Ok(None),
            Ok(Pushed::Displaced(t, p)) => Ok(Some(PyTuple::new(py, [t.into_bound(py), priority_py(py, p)?])?)),
            Err((t, why)) => {
                let (ty, msg) = match why {
                    HandBack::QueueFull => (
                        queue_full_type(py)?,
                        "the dead-letter queue is full of triggers of this class or higher",
                    ),
                    HandBack::ShutDown => (shut_down_type(py)?, "the emitter is shut down"),
                };
                Err(PyErr::from_value(ty.call1((msg, t, priority_py(py, class)?))?))
            }
        }
    }

    /// Takes up to `max` queued triggers out, highest class first, as
    /// `(trigger, priority)` pairs.
    fn drain<'py>(&self, py: Python<'py>, max: usize) -> PyResult<Vec<Bound<'py, PyTuple>>> {
        let mut out = Vec::new();
        self.emitter.drain(max, |t, p| out.push((t, p)));
        out.into_iter()
            .map(|(t, p)| PyTuple::new(py, [t.into_bound(py), priority_py(py, p)?]))
            .collect()
    }

    /// Shuts the emitter down: nothing is queued any more; every queued
    /// trigger comes back, as `(trigger, priority)` pairs.
    fn shutdown<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyTuple>>> {
        let mut out = Vec::new();
        self.emitter.shutdown(|t, p| out.push((t, p)));
        out.into_iter()
            .map(|(t, p)| PyTuple::new(py, [t.into_bound(py), priority_py(py, p)?]))
            .collect()
    }

    /// Starts a replay of up to `max` queued triggers, driven from Python.
    fn replay_run(&self, max: usize) -> PyReplayRun {
        PyReplayRun {
            run: Some(self.emitter.replay_run(max)),
        }
    }

    #[getter]
    fn is_shut_down(&self) -> bool {
        self.emitter.is_shut_down()
    }

    #[getter]
    fn timeout(&self) -> f64 {
        secs(self.emitter.timeout())
    }

    #[getter]
    fn queue_len(&self) -> usize {
        self.emitter.queue().len()
    }

    #[getter]
    fn queue_capacity(&self) -> usize {
        self.emitter.queue().capacity()
    }

    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let s = self.emitter.stats();
        let kw = PyDict::new(py);
        kw.set_item("delivered", s.delivered)?;
        kw.set_item("overran", s.overran)?;
        kw.set_item("diverted_open", s.diverted_open)?;
        kw.set_item("diverted_bulkhead", s.diverted_bulkhead)?;
        kw.set_item("diverted_timeout", s.diverted_timeout)?;
        kw.set_item("diverted_failed", s.diverted_failed + s.diverted_no_timer)?;
        kw.set_item("handed_back_full", s.handed_back_full)?;
        kw.set_item("handed_back_shut_down", s.handed_back_shut_down)?;
        kw.set_item("displaced", s.displaced)?;
        kw.set_item("cancelled", s.cancelled)?;
        kw.set_item("dropped_in_panics", s.dropped_in_panics)?;
        kw.set_item("replayed", s.replayed)?;
        kw.set_item("replay_handed_back", s.replay_handed_back)?;
        kw.set_item("drained", s.drained)?;
        kw.set_item("queued_by_hand", s.queued_by_hand)?;
        kw.set_item("queued", s.queued)?;
        kw.set_item("pending", s.pending)?;
        kw.set_item("bulkhead_in_flight", s.bulkhead_in_flight)?;
        kw.set_item("emit_count", s.emit_times.count())?;
        kw.set_item("emit_time_sum", secs(s.emit_times.sum()))?;
        stats_type(py)?.call((), Some(&kw))
    }
}

/// An emit admitted, its call being awaited in Python.
#[pyclass(module = "tailguard._native", name = "_InFlight")]
struct PyInFlight {
    call: Option<InFlight<Trigger>>,
}

impl PyInFlight {
    fn take(&mut self) -> PyResult<InFlight<Trigger>> {
        self.call
            .take()
            .ok_or_else(|| PyRuntimeError::new_err("this emit has already ended"))
    }
}

#[pymethods]
impl PyInFlight {
    /// Seconds left of the call's budget.
    fn remaining(&self) -> PyResult<f64> {
        match &self.call {
            Some(c) => Ok(secs(c.deadline().remaining())),
            None => Err(PyRuntimeError::new_err("this emit has already ended")),
        }
    }
    /// Nanoseconds left of the call's budget.
    fn remaining_ns(&self) -> PyResult<u64> {
        match &self.call {
            Some(c) => Ok(u64::try_from(c.deadline().remaining().as_nanos()).unwrap_or(u64::MAX)),
            None => Err(PyRuntimeError::new_err("this emit has already ended")),
        }
    }
    #[getter]
    fn is_probe(&self) -> bool {
        self.call.as_ref().is_some_and(|c| c.is_probe())
    }
    fn delivered<'py>(&mut self, py: Python<'py>, value: Py<PyAny>) -> PyResult<Bound<'py, PyAny>> {
        let out = self.take()?.finish::<Py<PyAny>, Py<PyAny>>(Ok(value));
        outcome_py(py, out)
    }
    fn failed<'py>(&mut self, py: Python<'py>, error: Py<PyAny>) -> PyResult<Bound<'py, PyAny>> {
        let out = self.take()?.finish::<Py<PyAny>, Py<PyAny>>(Err(error));
        outcome_py(py, out)
    }
    fn timed_out<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let out = self.take()?.timed_out::<Py<PyAny>, Py<PyAny>>();
        outcome_py(py, out)
    }
    /// Cancelled: the bulkhead slot and the breaker permit go back with no
    /// verdict; the trigger is returned. Idempotent.
    fn cancel(&mut self) -> Option<Trigger> {
        self.call.take().map(InFlight::cancel)
    }
}

/// A replay driven from Python (`tailguard.Emitter.replay`).
#[pyclass(module = "tailguard._native", name = "_ReplayRun")]
struct PyReplayRun {
    run: Option<ReplayRun<Trigger, Py<PyAny>>>,
}

/// One replayed trigger, its call admitted.
#[pyclass(module = "tailguard._native", name = "_ReplayCall")]
struct PyReplayCall {
    call: Option<ReplayCall<Trigger>>,
}

fn ended() -> PyErr {
    PyRuntimeError::new_err("this replay (or replayed call) has already ended")
}

impl PyReplayRun {
    fn run(&mut self) -> PyResult<&mut ReplayRun<Trigger, Py<PyAny>>> {
        self.run.as_mut().ok_or_else(ended)
    }
}

#[pymethods]
impl PyReplayRun {
    fn next(&mut self) -> PyResult<Option<PyReplayCall>> {
        Ok(self.run()?.next_call().map(|c| PyReplayCall { call: Some(c) }))
    }
    fn delivered(&mut self, call: &mut PyReplayCall) -> PyResult<()> {
        let c = call.call.take().ok_or_else(ended)?;
        self.run()?.delivered(c);
        Ok(())
    }
    fn failed(&mut self, call: &mut PyReplayCall, error: Py<PyAny>) -> PyResult<()> {
        let c = call.call.take().ok_or_else(ended)?;
        self.run()?.failed(c, error);
        Ok(())
    }
    fn timed_out(&mut self, call: &mut PyReplayCall) -> PyResult<()> {
        let c = call.call.take().ok_or_else(ended)?;
        self.run()?.timed_out(c);
        Ok(())
    }
    fn finish<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let r = self.run.take().ok_or_else(ended)?.finish();
        let stopped = match r.stopped {
            None => "max".into_pyobject(py)?.into_any(),
            Some(ReplayStop::Empty) => "empty".into_pyobject(py)?.into_any(),
            Some(ReplayStop::NotClosed) => "not_closed".into_pyobject(py)?.into_any(),
            Some(ReplayStop::Busy) => "busy".into_pyobject(py)?.into_any(),
            Some(ReplayStop::Failed(d)) => divert_py(py, d)?,
        };
        let handed_back = match r.handed_back {
            Some((t, p)) => Some(PyTuple::new(py, [t.into_bound(py), priority_py(py, p)?])?),
            None => None,
        };
        replayed_type(py)?.call1((r.delivered, stopped, handed_back))
    }
}

#[pymethods]
impl PyReplayCall {
    #[getter]
    fn trigger(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        Ok(self.call.as_ref().ok_or_else(ended)?.trigger().clone_ref(py))
    }
    fn remaining_ns(&self) -> PyResult<u64> {
        let left = self.call.as_ref().ok_or_else(ended)?.deadline().remaining();
        Ok(u64::try_from(left.as_nanos()).unwrap_or(u64::MAX))
    }
    /// Cancelled: kept at the head, no attempt used; slots back.
    fn cancel(&mut self) {
        self.call = None;
    }
}

// ----------------------------------------------------------------------
// The registry and its Prometheus text.

/// Breakers by consumer name, and their Prometheus text exposition.
///
///     >>> from tailguard import Registry, Emitter
///     >>> registry = Registry()
///     >>> pricing = registry.breaker("pricing", latency_threshold=0.05)
///     >>> registry.attach_emitter("pricing", Emitter(pricing))
///     >>> "breaker_state" in registry.prometheus_text()
///     True
#[pyclass(module = "tailguard._native", name = "Registry", frozen)]
struct PyRegistry {
    registry: tailguard::Registry,
    /// Each consumer's `Breaker` object (a lookup returns the same one,
    /// with the `ManualClock` it was built on).
    breakers: std::sync::Mutex<std::collections::HashMap<String, Py<PyBreaker>>>,
}

#[pymethods]
impl PyRegistry {
    #[new]
    fn new() -> Self {
        Self {
            registry: tailguard::Registry::new(),
            breakers: Default::default(),
        }
    }

    /// The breaker of consumer `name`, built with `settings` the first
    /// time; later calls return the same `Breaker` and ignore the other
    /// settings, but refuse `on_transition` (a listener that would never be
    /// called): a `ValueError`.
    #[pyo3(signature = (name, **settings))]
    fn breaker(&self, py: Python<'_>, name: &str, settings: Option<&Bound<'_, PyDict>>) -> PyResult<Py<PyBreaker>> {
        let existing = {
            let known = self.breakers.lock().unwrap_or_else(|e| e.into_inner());
            known.get(name).map(|b| b.clone_ref(py))
        };
        if let Some(b) = existing {
            if settings.is_some_and(|s| s.contains("on_transition").unwrap_or(false)) {
                return Err(PyValueError::new_err(format!(
                    "consumer {name:?} already exists: its listeners were set when it was built \
                     (on_transition here would never be called)"
                )));
            }
            return Ok(b);
        }
        // Built with no lock held (reading the settings runs Python code).
        let builder = builder_from(py, settings)?;
        let mut builder = Some(builder);
        let breaker = self
            .registry
            .get_or_create(name, || builder.take().expect("called once"))
            .map_err(|e| PyValueError::new_err(e.to_string()))?;
        let fresh = Py::new(
            py,
            PyBreaker {
                breaker,
                clock: clock_of(settings),
            },
        )?;
        let mut known = self.breakers.lock().unwrap_or_else(|e| e.into_inner());
        Ok(known.entry(name.to_owned()).or_insert(fresh).clone_ref(py))
    }

    /// Exports an emitter's counters and queue with its consumer's breaker.
    fn attach_emitter(&self, name: &str, emitter: &Bound<'_, PyAny>) -> PyResult<()> {
        let native = emitter.getattr("_native").unwrap_or_else(|_| emitter.clone());
        let e = native
            .cast::<PyEmitter>()
            .map_err(|_| PyTypeError::new_err("attach_emitter: expected a tailguard.Emitter"))?;
        let Some(consumer) = self.registry.get(name) else {
            return Err(PyValueError::new_err(format!(
                "no consumer named {name:?} in this registry: build its breaker with registry.breaker({name:?}, ...) \
                 and the emitter over that breaker"
            )));
        };
        if !consumer.ptr_eq(e.get().emitter.breaker()) {
            return Err(PyValueError::new_err(format!(
                "attach_emitter({name:?}): the emitter's breaker is not {name:?}'s (build the emitter over \
                 registry.breaker({name:?}))"
            )));
        }
        self.registry
            .attach_emitter(name, &e.get().emitter)
            .map_err(|e| PyValueError::new_err(e.to_string()))
    }

    /// Removes consumer `name`: its breaker and what is attached to it are
    /// no longer exported, and the registry no longer keeps them (nor the
    /// triggers an attached emitter's queue holds) alive. Returns whether
    /// it was there.
    fn remove(&self, name: &str) -> bool {
        self.breakers.lock().unwrap_or_else(|e| e.into_inner()).remove(name);
        self.registry.remove(name).is_some()
    }

    /// The consumers' names.
    fn names(&self) -> Vec<String> {
        let mut v = Vec::new();
        self.registry.for_each(|n, _| v.push(n.to_owned()));
        v
    }

    fn __len__(&self) -> usize {
        self.registry.len()
    }

    /// The Prometheus text exposition of every breaker, emitter and queue.
    /// `prefix` replaces the series' `breaker_` prefix whole: give it with
    /// its separator (`prefix="myapp_"` names `myapp_state`).
    #[pyo3(signature = (prefix = None))]
    fn prometheus_text(&self, prefix: Option<&str>) -> PyResult<String> {
        let mut c = tailguard::prometheus::BreakerCollector::new(self.registry.clone());
        if let Some(p) = prefix {
            c = c.with_prefix(p).map_err(|e| PyValueError::new_err(e.to_string()))?;
        }
        Ok(c.encode_text())
    }
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyManualClock>()?;
    m.add_class::<PyBreaker>()?;
    m.add_class::<PyPermit>()?;
    m.add_class::<PyGuarded>()?;
    m.add_class::<PyGuardedAsync>()?;
    m.add_class::<PyGuardedCall>()?;
    m.add_class::<PyDelivered>()?;
    m.add_class::<PyEmitter>()?;
    m.add_class::<PyInFlight>()?;
    m.add_class::<PyReplayRun>()?;
    m.add_class::<PyReplayCall>()?;
    m.add_class::<PyRegistry>()?;
    m.add_function(wrap_pyfunction!(_stop_listeners, m)?)?;
    m.add_function(wrap_pyfunction!(_after_fork_in_child, m)?)?;
    Ok(())
}
