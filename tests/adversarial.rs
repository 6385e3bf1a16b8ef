//! The adversarial review of issue 8's fixes: each test is a documented
//! promise that a reviewer broke (all of these failed on the commit the
//! review attacked), kept as a regression test. The ticker's findings are in
//! `tests/ticker.rs`, the 2^30-transition ones in `tests/wrap.rs`.

#[path = "support/hook.rs"]
mod hook;

use hook::HookClock;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tailguard::clock::ManualClock;
use tailguard::{Breaker, BreakerBuilder, Mode, Permit, Reason, State, Transition};

const MS: Duration = Duration::from_millis(1);
const SEC: Duration = Duration::from_secs(1);

fn builder(clock: &ManualClock) -> BreakerBuilder {
    Breaker::builder().clock(clock.clone()).ticker(false)
}

fn leak(b: Breaker) -> &'static Breaker {
    Box::leak(Box::new(b))
}

type Seen = Arc<Mutex<Vec<Transition>>>;

fn recorder() -> (Seen, impl Fn(&Transition) + Send + Sync + 'static) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&seen);
    (seen, move |t: &Transition| sink.lock().unwrap().push(*t))
}

type Parked = Arc<Mutex<Option<Permit<'static>>>>;

// ---------------------------------------------------------------------------
// Probe leases and backward clock steps
// ---------------------------------------------------------------------------

/// Promise (README "Where the API differs", `BreakerBuilder::probe_lease`,
/// issue-8 fix 1): a probe is re-opened on only when it has been out longer
/// than `probe_lease`; its lease starts at its own admission. And (clock
/// docs, `Breaker::tick`): a clock that steps back is tolerated.
///
/// A tick holds the breaker's time at the highest value it has seen, but a
/// probe admitted after the step back stamps its lease with the *unraised*
/// time. The very next tick compares the raised time with that stamp and
/// declares a probe that has been out for 0 ns leaked: ProbeLeaseExpired.
#[test]
fn a01_a_backward_clock_step_never_expires_a_probe_admitted_this_instant() {
    let clock = ManualClock::new();
    let (seen, listener) = recorder();
    let b = builder(&clock)
        .probe_lease(SEC)
        .on_transition(listener)
        .build()
        .unwrap();
    b.trip_now(); // OPEN, backoff 1 s
    clock.advance(10 * SEC);
    b.tick(); // the tick moves OPEN -> HALF_OPEN; breaker time seen: 10 s
    assert_eq!(b.state(), State::HalfOpen);
    clock.rewind(5 * SEC); // the clock steps back 5 s
    let probe = b.allow().expect("a free probe slot");
    assert!(probe.is_probe());
    b.tick(); // no time has passed on the clock since the probe was admitted
    let last = seen.lock().unwrap().last().map(|t| t.reason);
    assert_eq!(
        (b.state(), last),
        (State::HalfOpen, Some(Reason::BackoffElapsed)),
        "a probe admitted 0 ns before the tick was taken for leaked after a backward clock step"
    );
    probe.record_latency(MS, true);
}

// ---------------------------------------------------------------------------
// In-flight tracking
// ---------------------------------------------------------------------------

/// Promise (README "How it behaves"; `WindowStats::stale`): "a verdict from
/// a permit admitted before a transition is counted apart as stale, never
/// judged. So nothing from before a trip or a recovery ever trips the
/// recovered consumer." (The same scenario as correctness.rs f06, with
/// `track_in_flight(true)`.)
///
/// Calls admitted before the trip and still hanging are claimed as
/// in-flight slow calls by a window of the *recovered* generation, which is
/// judged, and they trip the consumer that just recovered with a healthy
/// stream of fast calls. The stale filter only looks at verdicts; the
/// in-flight claim never checks the generation a call was admitted in.
#[test]
fn a02_in_flight_calls_from_before_a_trip_never_trip_the_recovered_consumer() {
    let clock = ManualClock::new();
    let b = builder(&clock)
        .track_in_flight(true)
        .window(10 * MS)
        .latency_threshold(50 * MS)
        .base_backoff(MS)
        .success_to_close(1)
        .trip_windows(1)
        .build()
        .unwrap();
    // 100 calls in flight when the consumer is tripped (generation 0).
    let old: Vec<_> = (0..100).map(|_| b.allow().unwrap()).collect();
    b.trip_now();
    clock.advance(MS);
    // The consumer recovers: the probe is fast, the breaker closes.
    b.allow().unwrap().record_latency(MS, true);
    assert_eq!(b.state(), State::Closed);
    // Healthy traffic in every window after the recovery.
    for i in 0..20 {
        for _ in 0..20 {
            b.allow().unwrap().record_latency(MS, true);
        }
        clock.advance(10 * MS);
        b.tick();
        let s = b.snapshot();
        assert_eq!(
            s.state,
            State::Closed,
            "window {i} after the recovery: calls admitted before the trip tripped the recovered consumer: {:?}",
            s.window
        );
    }
    drop(old);
}

/// Promise (issue-8 fix 4 / `BreakerBuilder::track_in_flight`; f02): a
/// backward clock step never makes fast calls slow, and a call that starts
/// while the clock is behind a close is not counted in flight.
///
/// A window close reads the clock (3 s); at that instant the clock steps
/// back 1 s and a call starts (its epoch taken from 2 s: the in-flight
/// floor is raised only later in the same close). The close then claims
/// every epoch before 3 s − 50 ms: the call that has just started is counted
/// as an in-flight slow call, and its 1 ms verdict is then discarded.
#[test]
fn a03_a_call_started_during_a_close_after_a_step_back_is_not_counted_slow() {
    let clock = HookClock::new();
    let b = leak(
        Breaker::builder()
            .clock(clock.source())
            .ticker(false)
            .track_in_flight(true)
            .build()
            .unwrap(),
    );
    clock.advance(3 * SEC);
    let parked: Parked = Arc::new(Mutex::new(None));
    let (p2, c2) = (Arc::clone(&parked), clock.clone());
    clock.at_read(1, move || {
        c2.rewind(SEC);
        *p2.lock().unwrap() = Some(b.allow().unwrap());
    });
    b.tick();
    assert!(clock.fired());
    let p = parked.lock().unwrap().take().unwrap();
    clock.advance(MS);
    p.record(true); // a 1 ms call
    for _ in 0..2 {
        clock.advance(SEC);
        b.tick();
    }
    let t = b.snapshot().totals;
    assert_eq!(
        (t.calls, t.slow),
        (1, 0),
        "a 1 ms call that started during a close (clock stepped back) was counted as slow: {t:?}"
    );
}

// ---------------------------------------------------------------------------
// Window judgement when one tick closes several windows
// ---------------------------------------------------------------------------

/// Promise (DESIGN "Trip conditions", README, `BreakerBuilder::min_calls`):
/// "A window with fewer than `min_calls` calls never trips". `tick` "closes
/// every window that is due at the clock's now".
///
/// Every window here has 15 calls (min_calls is 20), one of them slow.
/// When one tick closes two windows, everything recorded since the last
/// drain was once attributed to the newest window: 30 calls, 2 slow (over
/// the P99's 1%), judged, and the breaker tripped. (Since issue 16 sparse
/// windows feed a sequential test instead: two slow calls of thirty are far
/// from its bound.)
#[test]
fn a04_windows_below_min_calls_never_trip_when_one_tick_closes_two() {
    for round in 0..3 {
        // A fresh breaker each round: the sequential test is not carried.
        let clock = ManualClock::new();
        let b = builder(&clock)
            .window(10 * MS)
            .trip_windows(1)
            .min_calls(20)
            .build()
            .unwrap();
        clock.advance(10 * MS * round);
        for _ in 0..2 {
            // One window: 15 calls, one slow (2 of 30: over 1% if judged
            // as one window).
            for i in 0..15 {
                let latency = if i == 0 { 900 * MS } else { MS };
                b.allow().unwrap().record_latency(latency, true);
            }
            clock.advance(10 * MS);
        }
        b.tick(); // closes the windows just ended
        let s = b.snapshot();
        assert_eq!(
            s.state,
            State::Closed,
            "round {round}: windows of 15 calls each (min_calls 20) tripped the breaker: {:?}",
            s.window
        );
    }
}

/// Promise (DESIGN "Trip conditions"; README "It trips on latency when, in
/// `trip_windows` consecutive windows ... more than 1 − quantile of the
/// calls were slower than `latency_threshold`").
///
/// Every call in every window is slow, for 20 consecutive windows, with
/// `trip_windows(2)`. Ticks come every two windows (each tick closes every
/// window due, as documented): the older of the two windows gets no calls
/// ("empty"), is judged, and resets the breach streak to 0; the newer gets
/// both windows' calls and brings it to 1. The breaker never trips.
#[test]
fn a05_consecutive_breaching_windows_trip_when_one_tick_closes_two() {
    let clock = ManualClock::new();
    let b = builder(&clock)
        .window(10 * MS)
        .trip_windows(2)
        .min_calls(1)
        .build()
        .unwrap();
    let mut tripped_at = None;
    for tick in 0..10 {
        for _ in 0..2 {
            for _ in 0..50 {
                if let Ok(p) = b.allow() {
                    p.record_latency(900 * MS, true);
                }
            }
            clock.advance(10 * MS);
        }
        b.tick();
        if b.state() == State::Open && tripped_at.is_none() {
            tripped_at = Some(tick);
        }
    }
    // The first tick closes two breaching windows: trip_windows(2) is met.
    assert_eq!(tripped_at, Some(0));
    let s = b.snapshot();
    assert_eq!(
        s.state,
        State::Open,
        "20 consecutive windows of 100% slow calls with trip_windows(2) did not trip: totals {:?}, breaches {}",
        s.totals,
        s.consecutive_breaches
    );
}

// ---------------------------------------------------------------------------
// Events
// ---------------------------------------------------------------------------

/// Promise (`BreakerBuilder::on_transition`, "When."): an override's
/// transition is delivered before the call returns, unless another thread
/// is delivering or an earlier transition's event has not been queued yet;
/// then the next delivery brings both, in order.
///
/// A probe's failed verdict re-opens the breaker (CAS done, its event not
/// queued yet: it reads the clock in between). At that instant an operator
/// calls `force_closed()`: its event waits behind the probe's; the next tick
/// delivers both, in generation order, and nothing is lost. (The review
/// found the docs promised delivery before `force_closed` returns.)
#[test]
fn a06_an_override_event_behind_an_unqueued_one_arrives_in_order_at_the_next_delivery() {
    let clock = HookClock::new();
    let (seen, listener) = recorder();
    let b = leak(
        Breaker::builder()
            .clock(clock.source())
            .ticker(false)
            .on_transition(listener)
            .build()
            .unwrap(),
    );
    b.trip_now();
    clock.advance(SEC);
    let probe = b.allow().unwrap();
    assert!(probe.is_probe());
    b.tick(); // delivers OPEN -> HALF_OPEN: nothing is waiting now
    clock.at_read(1, move || b.force_closed());
    probe.record_latency(MS, false); // the failed probe re-opens; its note reads the clock
    assert!(clock.fired());
    assert_eq!(b.mode(), Mode::ForcedClosed);
    b.tick();
    let tail: Vec<_> = seen
        .lock()
        .unwrap()
        .iter()
        .rev()
        .take(2)
        .map(|t| (t.generation, t.reason))
        .collect();
    assert_eq!(tail, [(4, Reason::ForcedClosed), (3, Reason::ProbeFailed)]);
    assert_eq!(b.snapshot().events_lost, 0);
}

/// A panic payload whose own `Drop` panics (once).
struct Bomb(u32);
impl Drop for Bomb {
    fn drop(&mut self) {
        if self.0 > 0 {
            std::panic::panic_any(Bomb(self.0 - 1));
        }
    }
}

/// Promise (`BreakerBuilder::on_transition`, "Panics."): "A panic in the
/// listener is caught and counted ...; it never unwinds into the breaker,
/// the caller of an override or the ticker thread".
///
/// The listener panics with a payload whose `Drop` panics. `deliver`
/// catches the panic and drops the payload in the breaker's own frame
/// (`catch_unwind(call).is_err()`): the second panic unwinds out of
/// `force_open()` into its caller.
#[test]
fn a07a_a_listener_panic_whose_payload_panics_never_reaches_the_caller() {
    let clock = ManualClock::new();
    let b = builder(&clock)
        .on_transition(|_| std::panic::panic_any(Bomb(1)))
        .build()
        .unwrap();
    let r = catch_unwind(AssertUnwindSafe(|| b.force_open()));
    assert!(
        r.is_ok(),
        "a panic raised by the listener's panic unwound out of force_open()"
    );
}

/// Promise (same, and events.rs): "... delivery goes on with the next
/// event." After the listener's panic escaped as in a07a, the queue's
/// `delivering` flag is left set: no event is ever delivered again, by any
/// override or tick, and none is counted lost.
#[test]
fn a07b_after_such_a_panic_events_are_still_delivered() {
    let clock = ManualClock::new();
    let calls = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&calls);
    let b = builder(&clock)
        .on_transition(move |_| {
            if counter.fetch_add(1, Ordering::SeqCst) == 0 {
                std::panic::panic_any(Bomb(1));
            }
        })
        .build()
        .unwrap();
    let _ = catch_unwind(AssertUnwindSafe(|| b.force_open()));
    b.reset();
    b.force_closed();
    b.tick();
    let s = b.snapshot();
    assert_eq!(
        calls.load(Ordering::SeqCst) as u64 + s.events_lost,
        u64::from(s.generation),
        "events after the listener's panic were neither delivered nor counted lost (generation {}, listener calls {}, lost {}, panics {})",
        s.generation,
        calls.load(Ordering::SeqCst),
        s.events_lost,
        s.listener_panics
    );
}

// ---------------------------------------------------------------------------
// Extreme (but accepted) clock values
// ---------------------------------------------------------------------------

/// Promise (`ConfigError`: "A value that passes validation can never make
/// the breaker ... panic, overflow or hang later"; `clock` module: any
/// `Clock` reporting nanoseconds since an origin of its own choosing, a
/// `ManualClock` that can be `set` anywhere and saturates at `u64::MAX`).
///
/// With the breaker's time within a backoff of `i64::MAX` ns, a trip
/// publishes a deadline above `i64::MAX`; `allow()`'s OPEN fast path then
/// computes `deadline as i64 - max_ns as i64` and overflows (a panic in
/// debug builds: "attempt to subtract with overflow", src/breaker.rs
/// `reject_open_fast`; the same expression is in `admit_open`).
#[test]
fn a08_allow_rejects_without_overflow_when_the_deadline_passes_i64_max() {
    let clock = ManualClock::new();
    let b = builder(&clock).build().unwrap();
    clock.set(Duration::from_nanos(i64::MAX as u64 - 500_000_000));
    b.trip_now(); // backoff 1 s: deadline above i64::MAX
    let r = catch_unwind(AssertUnwindSafe(|| b.allow().is_err()));
    assert!(
        matches!(r, Ok(true)),
        "allow() on an OPEN breaker panicked (arithmetic overflow) instead of rejecting"
    );
}

// ---------------------------------------------- a custom clock that panics
// (from hostile reviews of issue 16). `Clock` says it should not; a panic is
// caught at the read, which is tried again and, if that panics too, reads
// as the thread's last reading of the clock, so that no step of the breaker
// is left half done by it and its time does not jump.

/// A clock at `CLOCK_MONOTONIC`-like readings (12 days of uptime), whose
/// reads from the `nth` on panic, `times` in a row.
#[derive(Clone)]
struct PanickyClock {
    nanos: Arc<std::sync::atomic::AtomicU64>,
    countdown: Arc<AtomicUsize>,
    times: Arc<AtomicUsize>,
}

impl PanickyClock {
    fn new() -> Self {
        PanickyClock {
            nanos: Arc::new(std::sync::atomic::AtomicU64::new(1_000_000_000_000_000)),
            countdown: Arc::new(AtomicUsize::new(0)),
            times: Arc::new(AtomicUsize::new(0)),
        }
    }
    fn source(&self) -> tailguard::clock::ClockSource {
        tailguard::clock::ClockSource::custom(Arc::new(self.clone()))
    }
    fn advance(&self, by: Duration) {
        self.nanos.fetch_add(by.as_nanos() as u64, Ordering::SeqCst);
    }
    fn panic_at_read(&self, nth: usize, times: usize) {
        self.times.store(times, Ordering::SeqCst);
        self.countdown.store(nth, Ordering::SeqCst);
    }
    fn panicked(&self) -> bool {
        self.countdown.load(Ordering::SeqCst) == 0 && self.times.load(Ordering::SeqCst) == 0
    }
}

impl tailguard::clock::Clock for PanickyClock {
    fn now_nanos(&self) -> u64 {
        let n = self.countdown.load(Ordering::SeqCst);
        if n > 1 {
            self.countdown.store(n - 1, Ordering::SeqCst);
        } else if n == 1 {
            let left = self.times.fetch_sub(1, Ordering::SeqCst);
            if left <= 1 {
                self.countdown.store(0, Ordering::SeqCst);
            }
            panic!("a clock fault (expected by this test)");
        }
        self.nanos.load(Ordering::SeqCst)
    }
}

fn panicky_breaker(clock: &PanickyClock) -> BreakerBuilder {
    Breaker::builder().clock(clock.source()).ticker(false)
}

/// The read after `trip_now`'s CAS (dating the OPEN, publishing its
/// deadline) panics, once or twice in a row: the breaker is OPEN with its
/// deadline all the same, and probes when it ends (it once stayed OPEN for
/// ever), not before (a reading of 0 once moved its time on by the clock's
/// origin and ended the backoff at once).
#[test]
fn a_clock_panic_right_after_a_trip_leaves_an_open_that_ends_on_time() {
    for times in [1, 2] {
        let clock = PanickyClock::new();
        let b = panicky_breaker(&clock)
            .base_backoff(30 * SEC)
            .max_backoff(60 * SEC)
            .build()
            .unwrap();
        clock.advance(5 * SEC);
        b.tick();
        clock.panic_at_read(1, times);
        b.trip_now();
        assert!(clock.panicked(), "the read panicked");
        assert_eq!(b.state(), State::Open);
        assert!(b.snapshot().next_probe_in.is_some(), "{:?}", b.snapshot());
        clock.advance(SEC);
        clock.panic_at_read(1, times);
        b.tick();
        clock.advance(SEC);
        assert!(
            b.allow().is_err(),
            "{times}: 2 s into a 30 s backoff: {:?}",
            b.snapshot()
        );
        assert!(b.snapshot().uptime < 60 * SEC, "{:?}", b.snapshot().uptime);
        clock.advance(30 * SEC);
        b.tick();
        assert!(b.allow().is_ok(), "{:?}", b.snapshot());
    }
}

/// The same after a failed probe's re-open.
#[test]
fn a_clock_panic_in_a_failed_probes_verdict_leaves_an_open_that_ends() {
    let clock = PanickyClock::new();
    let b = panicky_breaker(&clock).build().unwrap();
    b.trip_now();
    clock.advance(SEC);
    let probe = b.allow().expect("the probe");
    assert!(probe.is_probe());
    clock.panic_at_read(1, 2);
    probe.record_latency(5 * MS, false);
    assert!(clock.panicked());
    assert_eq!(b.state(), State::Open);
    for _ in 0..10 {
        clock.advance(SEC);
        b.tick();
    }
    assert!(b.allow().is_ok(), "{:?}", b.snapshot());
}

/// A permit whose admission read panicked starts at the true time (read
/// again) or the thread's last reading: a 1 ms call is not slow.
#[test]
fn a_clock_panic_at_admission_does_not_make_a_fast_call_slow() {
    let clock = PanickyClock::new();
    let b = panicky_breaker(&clock).build().unwrap();
    for times in [1, 2] {
        clock.panic_at_read(1, times);
        let p = b.allow().unwrap();
        clock.advance(MS);
        p.record(true);
    }
    clock.advance(2 * SEC);
    b.tick();
    let t = b.snapshot().totals;
    assert_eq!((t.calls, t.slow), (2, 0), "{t:?}");
}

/// The in-flight claim's read (between marking the slots closing and
/// clearing the marks) panics: the drained counts are kept, and calls
/// admitted after it are tracked (they once were not, for ever).
#[test]
fn a_clock_panic_during_the_in_flight_claim_loses_nothing() {
    let clock = PanickyClock::new();
    let b = panicky_breaker(&clock)
        .track_in_flight(true)
        .trip_windows(1)
        .build()
        .unwrap();
    for _ in 0..10 {
        b.allow().unwrap().record_latency(5 * MS, true);
    }
    clock.advance(2 * SEC);
    clock.panic_at_read(2, 2); // read 1: the close's own; reads 2 and 3: the claim's
    b.tick();
    assert!(clock.panicked());
    clock.advance(SEC);
    b.tick();
    assert_eq!(b.snapshot().totals.calls, 10, "{:?}", b.snapshot().totals);
    // The consumer now hangs: the calls are claimed in flight and trip it.
    let hung: Vec<_> = (0..100).map(|_| b.allow().unwrap()).collect();
    for _ in 0..3 {
        clock.advance(SEC);
        b.tick();
    }
    assert_eq!(b.snapshot().trip_count, 1, "{:?}", b.snapshot());
    drop(hung);
}

/// A thread's first read of the clock panicking twice has no time to fall
/// back on: the panic goes to the caller (and the breaker is still sound).
#[test]
fn a_threads_first_read_panicking_twice_panics() {
    let clock = PanickyClock::new();
    let b = panicky_breaker(&clock).build().unwrap();
    let (c, b2) = (clock.clone(), b.clone());
    let r = std::thread::spawn(move || {
        c.panic_at_read(1, 2);
        catch_unwind(AssertUnwindSafe(|| b2.allow().map(Permit::abandon)))
    })
    .join()
    .unwrap();
    assert!(r.is_err());
    b.allow().unwrap().record(true);
    clock.advance(2 * SEC);
    b.tick();
    assert_eq!(b.snapshot().totals.calls, 1);
}
