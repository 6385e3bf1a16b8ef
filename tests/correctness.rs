//! The promises a hostile user broke (issue 8), one test per finding, named
//! `fNN_…` after it. Races are forced at the exact instant they need with a
//! clock whose read runs a hook (`support/hook.rs`), or provoked by threads
//! where the claim is about real concurrency. No test sleeps.
//!
//! Findings 3 and 5 (the ticker thread) are in `tests/ticker.rs`, finding 4
//! (the queue) in `tests/dlq.rs` and `loom-tests/dlq.rs`.

#[path = "support/hook.rs"]
mod hook;

use hook::HookClock;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tailguard::clock::ManualClock;
use tailguard::{Breaker, BreakerBuilder, Permit, Reason, RejectReason, State, Transition};

const MS: Duration = Duration::from_millis(1);
const SEC: Duration = Duration::from_secs(1);

fn builder(clock: &ManualClock) -> BreakerBuilder {
    Breaker::builder().clock(clock.clone()).ticker(false)
}

/// A breaker that lives for the rest of the test process, so that its
/// permits can move into a clock hook (`'static`).
fn leak(b: Breaker) -> &'static Breaker {
    Box::leak(Box::new(b))
}

/// Records `calls` calls, `slow` of them at 900 ms and the rest at 8 ms,
/// the first `errors` of them failed.
fn traffic(b: &Breaker, calls: u64, slow: u64, errors: u64) {
    for i in 0..calls {
        let latency = if i < slow { 900 * MS } else { 8 * MS };
        b.allow().expect("admitted").record_latency(latency, i >= errors);
    }
}

fn next_window(b: &Breaker, clock: &ManualClock) {
    clock.advance(SEC);
    b.tick();
}

type Seen = Arc<Mutex<Vec<Transition>>>;

fn recorder() -> (Seen, impl Fn(&Transition) + Send + Sync + 'static) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&seen);
    (seen, move |t: &Transition| sink.lock().unwrap().push(*t))
}

/// A permit parked where a clock hook can reach it.
type Parked = Arc<Mutex<Option<Permit<'static>>>>;

// 1 ------------------------------------------------------------------------

/// Probe A holds the only slot; caller C loads the state word (every slot
/// taken); at C's clock read A is dropped, and C's CAS takes the freed slot.
/// C's lease must start at C's admission, not at A's.
#[test]
fn f01_a_probe_admitted_from_a_stale_word_gets_its_own_lease() {
    let clock = HookClock::new();
    let b = leak(
        Breaker::builder()
            .clock(clock.source())
            .ticker(false)
            .probe_lease(SEC)
            .success_to_close(1)
            .build()
            .unwrap(),
    );
    b.trip_now();
    clock.advance(SEC);
    let a: Parked = Arc::new(Mutex::new(Some(b.allow().unwrap())));
    assert!(a.lock().unwrap().as_ref().unwrap().is_probe());
    clock.advance(900 * MS); // A's lease runs to 2 s
    let held = Arc::clone(&a);
    clock.at_read(1, move || drop(held.lock().unwrap().take()));
    let c = b.allow().expect("C takes the slot A gave back");
    assert!(clock.fired() && a.lock().unwrap().is_none());
    assert!(c.is_probe());
    clock.advance(200 * MS); // 2.1 s: past A's lease, 0.2 s into C's
    b.tick();
    assert_eq!(
        b.state(),
        State::HalfOpen,
        "C was declared leaked 0.2 s after admission"
    );
    c.record_latency(MS, true);
    assert_eq!(b.state(), State::Closed, "C's good verdict was discarded");
}

// 2 ------------------------------------------------------------------------

/// With in-flight tracking, quiet windows, a 200 ms step back, then 100
/// calls of 1 ms: none of them is slow, nothing trips.
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

// 5 ------------------------------------------------------------------------

/// A listener that panics: no call into the breaker unwinds, and no probe
/// slot is left held by nobody. (The ticker thread's side is in
/// `tests/ticker.rs`.)
#[test]
fn f05_a_panicking_listener_never_escapes_nor_strands_a_probe_slot() {
    let clock = ManualClock::new();
    let b = builder(&clock)
        .on_transition(|_| panic!("a listener bug (expected by this test)"))
        .build()
        .unwrap();
    assert!(
        catch_unwind(AssertUnwindSafe(|| b.trip_now())).is_ok(),
        "trip_now unwound"
    );
    clock.advance(SEC);
    let admitted = catch_unwind(AssertUnwindSafe(|| {
        let p = b.allow().expect("the first call after the backoff is the probe");
        assert!(p.is_probe());
    }));
    assert!(admitted.is_ok(), "allow unwound");
    assert_eq!(b.snapshot().probes_in_flight, 0, "the probe slot is stranded");
    assert!(b.allow().unwrap().is_probe());
    assert!(catch_unwind(AssertUnwindSafe(|| b.tick())).is_ok(), "tick unwound");
    assert!(catch_unwind(AssertUnwindSafe(|| b.reset())).is_ok(), "reset unwound");
    assert_eq!(b.state(), State::Closed);
}

// 6 ------------------------------------------------------------------------

/// 100 calls in flight at the trip; the consumer recovers through its
/// probes; the 100 old calls then fail into the first clean CLOSED window.
/// They are from an earlier generation: they must not trip it.
#[test]
fn f06_calls_admitted_before_a_trip_never_judge_the_recovered_consumer() {
    let clock = ManualClock::new();
    let b = builder(&clock).build().unwrap();
    let old: Vec<_> = (0..100).map(|_| b.allow().unwrap()).collect();
    b.trip_now();
    clock.advance(SEC);
    for _ in 0..5 {
        b.allow().unwrap().record_latency(MS, true);
    }
    assert_eq!(b.state(), State::Closed);
    next_window(&b, &clock); // the window of the recovery itself is not judged
    traffic(&b, 20, 0, 0);
    for p in old {
        p.record(false);
    }
    next_window(&b, &clock);
    let s = b.snapshot();
    assert_eq!(s.state, State::Closed, "pre-trip calls tripped the recovered consumer");
    assert_eq!((s.window.calls, s.window.errors), (20, 0));
}

// 7 ------------------------------------------------------------------------

/// Threads make calls while another closes windows as fast as it can, with
/// the clock a window further at each close, so that calls in flight at a
/// close are claimed as slow while their verdicts race the claim. Every
/// call is counted exactly once: as a completed call or as an in-flight
/// slow one.
#[test]
fn f07a_in_flight_calls_are_counted_once_under_racing_window_closes() {
    let clock = ManualClock::new();
    let b = builder(&clock).track_in_flight(true).build().unwrap();
    b.force_closed(); // never trips: one generation throughout
    let stop = AtomicBool::new(false);
    let made = AtomicU64::new(0);
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                let mut n = 0;
                while !stop.load(Ordering::Relaxed) {
                    let p = b.allow().unwrap();
                    for _ in 0..(n % 7) {
                        std::hint::spin_loop();
                    }
                    p.record_latency(MS, true);
                    n += 1;
                }
                made.fetch_add(n, Ordering::Relaxed);
            });
        }
        s.spawn(|| {
            let start = std::time::Instant::now();
            while start.elapsed() < Duration::from_millis(1500) {
                next_window(&b, &clock);
            }
            stop.store(true, Ordering::Relaxed);
        });
    });
    for _ in 0..3 {
        next_window(&b, &clock);
    }
    let t = b.snapshot().totals;
    assert_eq!(t.calls, made.load(Ordering::Relaxed), "{t:?}");
    assert_eq!(b.state(), State::Closed);
}

/// A window close that is late: a call admitted while it runs (between its
/// clock read and its claim), with the clock a little further, must not be
/// taken for slow the instant it starts.
#[test]
fn f07b_a_call_admitted_during_a_late_tick_is_not_in_flight_slow_at_once() {
    let clock = HookClock::new();
    let b = leak(
        Breaker::builder()
            .clock(clock.source())
            .ticker(false)
            .track_in_flight(true)
            .build()
            .unwrap(),
    );
    // Window 1 s, threshold 50 ms: in-flight epochs of 87.5 ms. The first
    // window ended at 1 s; the tick comes at 1.4 s.
    clock.advance(1400 * MS);
    let parked: Parked = Arc::new(Mutex::new(None));
    let (p2, c2) = (Arc::clone(&parked), clock.clone());
    clock.at_read(1, move || {
        c2.advance(88 * MS);
        *p2.lock().unwrap() = Some(b.allow().unwrap());
    });
    b.tick();
    assert!(clock.fired());
    let w = b.snapshot().window;
    assert_eq!(
        w.in_flight_slow, 0,
        "a call that had just started was counted as slow: {w:?}"
    );
    let p = parked.lock().unwrap().take().unwrap();
    clock.advance(MS);
    p.record(true);
    for _ in 0..2 {
        clock.advance(SEC);
        b.tick();
    }
    let t = b.snapshot().totals;
    assert_eq!((t.calls, t.slow), (1, 0), "{t:?}");
}

// 8 ------------------------------------------------------------------------

/// The hot path never runs user code: the listener is not called by the
/// `allow` that moves OPEN to HALF_OPEN, nor by the probe's `record` that
/// closes; the next tick delivers both, in order.
#[test]
fn f08_allow_and_record_never_run_the_listener() {
    let clock = ManualClock::new();
    let calls = Arc::new(AtomicUsize::new(0));
    let (seen, listener) = recorder();
    let counter = Arc::clone(&calls);
    let b = builder(&clock)
        .success_to_close(1)
        .on_transition(move |t| {
            counter.fetch_add(1, Ordering::SeqCst);
            listener(t)
        })
        .build()
        .unwrap();
    b.trip_now();
    b.tick();
    let before = calls.load(Ordering::SeqCst);
    clock.advance(SEC);
    let p = b.allow().unwrap();
    assert!(p.is_probe());
    assert_eq!(calls.load(Ordering::SeqCst), before, "allow ran the listener");
    p.record_latency(MS, true);
    assert_eq!(b.state(), State::Closed);
    assert_eq!(calls.load(Ordering::SeqCst), before, "record ran the listener");
    b.tick();
    assert_eq!(calls.load(Ordering::SeqCst), before + 2);
    let seen = seen.lock().unwrap();
    let last: Vec<_> = seen[seen.len() - 2..].iter().map(|t| (t.to, t.reason)).collect();
    assert_eq!(
        last,
        [
            (State::HalfOpen, Reason::BackoffElapsed),
            (State::Closed, Reason::ProbesSucceeded)
        ]
    );
}

// 9 ------------------------------------------------------------------------

/// "P_q above T" is "more than (1 − q) of the calls slower than T", decided
/// exactly: at the limit no breach, one slow call more a breach.
#[test]
#[cfg_attr(
    miri,
    ignore = "tens of thousands of calls; the rule itself is tested in src/trip.rs under Miri"
)]
fn f09_the_quantile_rule_is_exact_at_every_quantile() {
    for (q, calls, at_limit) in [
        (0.9, 20, 2),
        (0.8, 20, 4),
        (0.99, 100, 1),
        (0.999, 1000, 1),
        (0.9999, 10_000, 1),
        (0.5, 20, 10),
        (0.7, 10, 3),
    ] {
        for (slow, breach) in [(at_limit, false), (at_limit + 1, true)] {
            let clock = ManualClock::new();
            let b = builder(&clock)
                .quantile(q)
                .trip_windows(1)
                .min_calls(1)
                .build()
                .unwrap();
            traffic(&b, calls, slow, 0);
            next_window(&b, &clock);
            let state = if breach { State::Open } else { State::Closed };
            assert_eq!(b.state(), state, "quantile {q}: {slow} slow of {calls}");
        }
    }
}

// 10 -----------------------------------------------------------------------

/// Two probe slots, one probe leaked: its lease runs out like any other
/// (a probe out longer than its lease is slow), by tick or by `allow`.
#[test]
fn f10_a_leaked_probe_is_reclaimed_after_its_lease_with_several_slots() {
    for by_tick in [true, false] {
        let clock = ManualClock::new();
        let (seen, listener) = recorder();
        let b = builder(&clock)
            .half_open_probes(2)
            .probe_lease(SEC)
            .on_transition(listener)
            .build()
            .unwrap();
        b.trip_now();
        clock.advance(SEC);
        std::mem::forget(b.allow().unwrap());
        clock.advance(10 * SEC);
        if by_tick {
            b.tick();
        } else {
            assert_eq!(b.allow().unwrap_err().reason(), RejectReason::Open);
            b.tick();
        }
        assert_eq!(b.state(), State::Open, "by tick: {by_tick}");
        assert_eq!(seen.lock().unwrap().last().unwrap().reason, Reason::ProbeLeaseExpired);
    }
}

// 11 -----------------------------------------------------------------------

/// A probe held while the 30-bit generation goes all the way round: when
/// the word is HALF_OPEN at the same 30-bit generation again, the old probe
/// still decides nothing. 2^30 real transitions: run in release
/// (`cargo test --release --test correctness -- --ignored`; `.ci/run` does).
#[test]
#[ignore = "2^30 transitions; run in release"]
fn f11_a_probe_held_across_a_generation_wrap_decides_nothing() {
    let clock = ManualClock::new();
    let b = builder(&clock).success_to_close(1).half_open_probes(2).build().unwrap();
    b.trip_now();
    clock.advance(SEC);
    let stale = b.allow().unwrap();
    let gen = b.snapshot().generation;
    // From HALF_OPEN: (2^29 − 1) pairs force_open + reset, a trip and a new
    // HALF_OPEN are 2^30 transitions.
    for _ in 0..(1u32 << 29) - 1 {
        b.force_open();
        b.reset();
    }
    b.trip_now();
    clock.advance(SEC);
    let fresh = b.allow().unwrap();
    assert!(fresh.is_probe());
    assert_eq!(b.snapshot().generation, gen, "the 30-bit generation came round");
    stale.record_latency(MS, true);
    assert_eq!(
        b.state(),
        State::HalfOpen,
        "a probe 2^30 transitions old closed the round"
    );
    fresh.record_latency(MS, true);
    assert_eq!(b.state(), State::Closed);
}

// 12 -----------------------------------------------------------------------

/// Four threads alternate force_open and reset as fast as they can. Events
/// may be dropped only as documented (more waiting than the queue holds),
/// each dropped one is counted, the listener sees generations in strictly
/// increasing order, and the latest transition always reaches it.
#[test]
#[cfg_attr(miri, ignore = "80,000 racing overrides; loom and ThreadSanitizer cover the race")]
fn f12_bursts_lose_only_counted_events_and_never_the_latest() {
    let clock = ManualClock::new();
    let (seen, listener) = recorder();
    let b = builder(&clock).on_transition(listener).build().unwrap();
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                for i in 0..20_000 {
                    if i % 2 == 0 {
                        b.force_open();
                    } else {
                        b.reset();
                    }
                }
            });
        }
    });
    b.tick();
    let snap = b.snapshot();
    let seen = seen.lock().unwrap();
    assert!(seen.windows(2).all(|w| w[0].generation < w[1].generation));
    assert_eq!(seen.len() as u64 + snap.events_lost, u64::from(snap.generation));
    assert_eq!(
        seen.last().map(|t| t.generation),
        Some(snap.generation),
        "the latest transition never reached the listener ({} delivered, {} lost)",
        seen.len(),
        snap.events_lost
    );
}

/// The event of one transition held up (its thread stopped between its CAS
/// and queueing its event) while 101 more transitions happen: more than the
/// queue holds. The oldest waiting events give way, counted; the latest
/// transition still reaches the listener, and the late event is never
/// delivered out of order.
#[test]
fn f12b_an_overflow_drops_the_oldest_waiting_events_never_the_latest() {
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
    clock.at_read(1, move || {
        for i in 0..101 {
            if i % 2 == 0 {
                b.reset();
            } else {
                b.force_open();
            }
        }
    });
    b.force_open();
    assert!(clock.fired());
    b.tick();
    let snap = b.snapshot();
    let seen = seen.lock().unwrap();
    assert_eq!(snap.generation, 102);
    assert!(seen.windows(2).all(|w| w[0].generation < w[1].generation));
    assert_eq!(seen.len() as u64 + snap.events_lost, 102);
    assert_eq!(
        seen.last().map(|t| t.generation),
        Some(102),
        "the latest transition was dropped"
    );
}

// 13 -----------------------------------------------------------------------

/// An override to the mode already in force is not a transition: no event,
/// no new generation, and the window in progress is still judged.
#[test]
fn f13_an_override_already_in_force_changes_nothing() {
    let clock = ManualClock::new();
    let (seen, listener) = recorder();
    let b = builder(&clock).trip_windows(1).on_transition(listener).build().unwrap();
    b.reset();
    assert_eq!(b.snapshot().generation, 0);
    for op in [
        Breaker::disable,
        Breaker::metrics_only,
        Breaker::force_open,
        Breaker::force_closed,
        Breaker::reset,
    ] {
        op(&b);
        let gen = b.snapshot().generation;
        op(&b);
        assert_eq!(b.snapshot().generation, gen);
    }
    b.tick();
    assert_eq!(seen.lock().unwrap().len(), 5, "{:?}", seen.lock().unwrap());
    // A reset() of the normal CLOSED breaker in the middle of a breaching
    // window loses what was counted before it (issue 15, finding 12: as
    // resilience4j's, failsafe-rs's and Polly's resets do): not judged.
    next_window(&b, &clock);
    traffic(&b, 100, 10, 0);
    b.reset();
    next_window(&b, &clock);
    assert_eq!(b.state(), State::Closed);
    assert_eq!(b.snapshot().window.calls, 0);
    // What comes after it is judged as usual.
    traffic(&b, 100, 10, 0);
    next_window(&b, &clock);
    assert_eq!(b.state(), State::Open);
}

// 14 -----------------------------------------------------------------------

/// Failures right after a recovery, in the window the recovery happened in:
/// the same verdict whether windows are closed one by one or by one late
/// tick (that window straddles the transition: it is not judged).
#[test]
fn f14_the_verdict_on_a_straddling_window_does_not_depend_on_tick_cadence() {
    let mut verdicts = Vec::new();
    for late in [false, true] {
        let clock = ManualClock::new();
        let b = builder(&clock).success_to_close(1).build().unwrap();
        b.trip_now();
        next_window(&b, &clock); // 1 s: the window closes; OPEN -> HALF_OPEN
        assert_eq!(b.state(), State::HalfOpen);
        clock.advance(200 * MS);
        b.allow().unwrap().record_latency(MS, true);
        assert_eq!(b.state(), State::Closed);
        clock.advance(100 * MS);
        traffic(&b, 40, 0, 40);
        if late {
            clock.advance(1700 * MS);
            b.tick(); // closes the windows ending at 2 s and 3 s at once
        } else {
            clock.advance(700 * MS);
            b.tick();
            next_window(&b, &clock);
        }
        assert_eq!(b.snapshot().uptime, 3 * SEC);
        verdicts.push(b.state());
    }
    assert_eq!(verdicts, [State::Closed, State::Closed]);
}
