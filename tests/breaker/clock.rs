//! The clock: steps back and forward (ten minutes, a year, past `i64::MAX`),
//! and a custom clock whose read panics.

use crate::support::*;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tailguard::clock::ManualClock;
use tailguard::{Breaker, BreakerBuilder, Permit, State};

#[test]
fn a_backward_clock_step_never_panics_nor_prolongs_open_past_one_tick() {
    let clock = ManualClock::new();
    clock.set(100 * SEC);
    let b = builder(&clock).build().unwrap();
    b.trip_now();
    clock.advance(500 * MS);
    clock.rewind(60 * SEC); // NTP-style step back, far before the trip
                            // Open path notices at once that the clock is before the trip.
    assert!(b.allow().unwrap_err().retry_after().unwrap() <= SEC);
    b.tick();
    clock.advance(SEC);
    assert!(b.allow().unwrap().is_probe(), "backoff plus at most one tick");

    // Step back while closed: latencies and windows are not disturbed.
    let b = builder(&clock).build().unwrap();
    b.allow().unwrap().record_latency(MS, true);
    clock.rewind(10 * SEC);
    let p = b.allow().unwrap();
    p.record(true); // end before start: zero latency, no panic
    clock.advance(SEC);
    b.tick();
    clock.rewind(Duration::from_secs(1_000_000));
    b.tick();
    clock.advance(2 * SEC); // past the first window (at most 1.5 windows)
    b.tick();
    assert_eq!(b.snapshot().window.calls, 2);
}

/// With in-flight tracking, quiet windows, a 200 ms step back, then 100
/// calls of 1 ms: none of them is slow, nothing trips.
///
/// Regression (issue 8's hostile review, finding 2).
#[test]
fn f02_a_backward_clock_step_never_makes_fast_calls_slow_in_flight() {
    let clock = ManualClock::new();
    let b = builder(&clock).track_in_flight(true).trip_windows(1).build().unwrap();
    for _ in 0..3 {
        next_window(&b, &clock);
    }
    clock.rewind(200 * MS);
    for _ in 0..100 {
        let p = b.allow().unwrap();
        clock.advance(MS);
        p.record(true);
    }
    for _ in 0..3 {
        next_window(&b, &clock);
    }
    let s = b.snapshot();
    assert_eq!((s.totals.calls, s.totals.slow), (100, 0), "{s:?}");
    assert_eq!(s.state, State::Closed);
}

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
///
/// Regression (the adversarial review of issue 8's fixes, a08).
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

/// The clock steps back ten minutes, then forward a year: nothing panics,
/// OPEN never lasts past its backoff plus one tick, windows keep closing and
/// judging, and a recovered consumer closes.
///
/// From issue 10's adversarial inputs.
#[test]
fn a_clock_stepping_back_ten_minutes_and_forward_a_year_is_survived() {
    let (clock, builder) = manual();
    let b = builder.trip_windows(1).build().unwrap();
    let slow_window = |b: &Breaker| {
        for i in 0..100 {
            if let Ok(p) = b.allow() {
                p.record_latency(if i % 10 == 0 { 900 * MS } else { MS }, true);
            }
        }
    };
    clock.advance(3600 * SEC);
    b.tick();
    slow_window(&b);
    clock.advance(SEC);
    b.tick();
    assert_eq!(b.state(), State::Open);
    // Back ten minutes: the backoff (1 s) still ends one tick later at most.
    clock.rewind(600 * SEC);
    b.tick();
    clock.advance(SEC);
    b.tick();
    assert_eq!(
        b.state(),
        State::HalfOpen,
        "OPEN outlived its backoff after a step back"
    );
    for _ in 0..5 {
        b.allow().unwrap().record_latency(MS, true);
    }
    assert_eq!(b.state(), State::Closed);
    // Forward a year: a long gap of windows, nothing judged twice, and the
    // windows after it are judged as usual.
    clock.advance(365 * 86_400 * SEC);
    b.tick();
    let gap = b.snapshot().window;
    assert!(gap.windows > 1_000_000, "{gap:?}");
    clock.advance(SEC);
    b.tick();
    slow_window(&b);
    clock.advance(SEC);
    b.tick();
    assert_eq!(b.state(), State::Open, "windows after the jump are judged");
    assert_eq!(
        b.snapshot().next_probe_in,
        Some(SEC),
        "the clean close reset the backoff"
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
///
/// Regression (a hostile review of issue 16).
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
///
/// Regression (a hostile review of issue 16).
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
///
/// Regression (a hostile review of issue 16).
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
///
/// Regression (a hostile review of issue 16).
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
///
/// Regression (a hostile review of issue 16).
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
