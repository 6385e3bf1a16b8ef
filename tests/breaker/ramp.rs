//! The recovery ramp (`BreakerBuilder::recovery_ramp`): the share admitted
//! rising linearly, the rejections and their hint, its end, a trip in it
//! (the next backoff), what resets and overrides do to it, metrics-only,
//! the same admissions on every run, permits held across its end, a clock
//! stepped a year either way, and threads racing its admissions.

use crate::support::{builder, recorder, MS, SEC};
use std::time::Duration;
use tailguard::clock::ManualClock;
use tailguard::{Breaker, Mode, Reason, RejectReason, State};

const RAMP: Duration = Duration::from_secs(10);

/// A breaker on `clock` with a 10 s ramp, closed by one good probe.
fn ramped(clock: &ManualClock) -> Breaker {
    builder(clock).success_to_close(1).recovery_ramp(RAMP).build().unwrap()
}

/// Trips `b` by hand and closes it with one good probe a backoff later:
/// its ramp starts now.
fn recover(b: &Breaker, clock: &ManualClock) {
    b.trip_now();
    clock.advance(b.snapshot().next_probe_in.unwrap());
    b.allow().unwrap().record_latency(MS, true);
    assert_eq!(b.state(), State::Closed);
    assert!(b.snapshot().ramp.is_some(), "ramping");
}

/// Of `n` calls now, how many `b` admits (each recorded as good).
fn admitted(b: &Breaker, n: usize) -> usize {
    (0..n)
        .filter(|_| b.allow().map(|p| p.record_latency(MS, true)).is_ok())
        .count()
}

/// The share admitted is the ramp's, to within a few calls, at every
/// tenth of it; nothing at its first instant; everything at its end.
#[test]
fn the_share_admitted_rises_linearly() {
    let clock = ManualClock::new();
    let b = ramped(&clock);
    recover(&b, &clock);
    assert_eq!(admitted(&b, 1000), 0, "a share of 0 at the close");
    for tenth in 1..10 {
        clock.advance(SEC);
        let got = admitted(&b, 1000);
        let want = 100 * tenth;
        assert!(got.abs_diff(want) <= 3, "{tenth}/10: {got} of 1000");
        let ramp = b.snapshot().ramp.unwrap();
        assert!((ramp.admitted - tenth as f64 / 10.0).abs() < 1e-9);
        assert_eq!(ramp.remaining, RAMP - SEC * tenth as u32);
    }
    clock.advance(SEC);
    assert_eq!(admitted(&b, 1000), 1000);
    assert_eq!(b.snapshot().ramp, None);
}

/// A ramp rejection says why, and when to try again: one window, or the
/// rest of the ramp if that is sooner; it is counted by reason.
#[test]
fn a_ramp_rejection_names_itself_with_a_hint() {
    let clock = ManualClock::new();
    let b = ramped(&clock);
    recover(&b, &clock);
    clock.advance(3 * SEC);
    let r = (0..100)
        .find_map(|_| b.allow().map(|p| p.record(true)).err())
        .expect("most rejected at 30%");
    assert_eq!((r.reason(), r.retry_after()), (RejectReason::Ramping, Some(SEC)));
    assert!(r.to_string().contains("recovering"), "{r}");
    clock.advance(6500 * MS);
    let r = (0..100).find_map(|_| b.allow().err()).expect("some rejected at 95%");
    assert_eq!(r.retry_after(), Some(500 * MS), "the rest of the ramp");
    let rejections = b.snapshot().rejections;
    assert!(rejections.ramping >= 2 && rejections.open == 0, "{rejections:?}");
}

/// The trip rules stay armed: a breaching window during the ramp re-opens
/// with the next backoff (the level the probes left, plus one), and the
/// level goes back to 0 only when a ramp ends. A manual trip in it too.
#[test]
fn a_trip_during_the_ramp_reopens_with_the_next_backoff() {
    let clock = ManualClock::new();
    let b = builder(&clock)
        .success_to_close(1)
        .recovery_ramp(RAMP)
        .trip_windows(1)
        .min_calls(5)
        .build()
        .unwrap();
    recover(&b, &clock);
    assert_eq!(b.snapshot().backoff_level, 0);
    clock.advance(5 * SEC);
    b.tick(); // the span since the build straddles the recovery: not judged
    for _ in 0..200 {
        if let Ok(p) = b.allow() {
            p.record_latency(900 * MS, true);
        }
    }
    clock.advance(SEC);
    b.tick();
    assert_eq!(b.state(), State::Open);
    let s = b.snapshot();
    assert_eq!((s.backoff_level, s.next_probe_in), (1, Some(2 * SEC)));
    // Recover again, then trip by hand mid-ramp: level 2.
    clock.advance(2 * SEC);
    b.allow().unwrap().record_latency(MS, true);
    assert!(b.snapshot().ramp.is_some());
    b.trip_now();
    assert_eq!(b.snapshot().backoff_level, 2);
    // A ramp that runs its course resets the level.
    clock.advance(4 * SEC);
    b.allow().unwrap().record_latency(MS, true);
    clock.advance(RAMP);
    b.tick();
    let s = b.snapshot();
    assert_eq!((s.ramp, s.backoff_level), (None, 0));
}

/// Windows in the ramp are judged as CLOSED windows: calls admitted are
/// counted, not stale, and a permit held across the ramp's end (no new
/// generation) is counted too.
#[test]
fn the_ramp_s_windows_are_judged_and_its_permits_counted() {
    let clock = ManualClock::new();
    let b = ramped(&clock);
    recover(&b, &clock);
    let generation = b.snapshot().generation;
    clock.advance(9 * SEC);
    b.tick();
    let held = loop {
        if let Ok(p) = b.allow() {
            break p;
        }
    };
    clock.advance(2 * SEC);
    assert_eq!(admitted(&b, 10), 10, "the ramp is over");
    assert_eq!(b.snapshot().generation, generation, "its end is no transition");
    held.record_latency(MS, true);
    b.tick();
    let w = b.snapshot().window;
    assert_eq!((w.calls, w.stale), (11, 0));
}

/// `reset` ends a ramp (CLOSED, level 0, no ramp), as every override does;
/// metrics-only admits every call and counts the ramp's refusals as shadow
/// rejections.
#[test]
fn resets_and_overrides_end_the_ramp_and_metrics_only_shadows_it() {
    let clock = ManualClock::new();
    for end in [Breaker::reset as fn(&Breaker), Breaker::force_closed, Breaker::disable] {
        let b = ramped(&clock);
        recover(&b, &clock);
        clock.advance(SEC);
        end(&b);
        assert_eq!(b.snapshot().ramp, None);
        assert_eq!(admitted(&b, 100), 100);
    }
    let b = ramped(&clock);
    b.metrics_only();
    recover(&b, &clock);
    assert_eq!(b.snapshot().mode, Mode::MetricsOnly);
    clock.advance(5 * SEC);
    let before = b.snapshot().shadow_rejections;
    assert_eq!(admitted(&b, 1000), 1000);
    let shadow = b.snapshot().shadow_rejections - before;
    assert!(shadow.abs_diff(500) <= 3, "{shadow}");
    assert_eq!(b.snapshot().rejections.ramping, 0);
}

/// The same calls at the same readings are admitted the same way, run
/// after run: the admissions are a function of the count, not of chance.
#[test]
fn the_admissions_are_the_same_on_every_run() {
    let pattern = || {
        let clock = ManualClock::new();
        let b = ramped(&clock);
        recover(&b, &clock);
        let mut out = Vec::new();
        for _ in 0..50 {
            clock.advance(150 * MS);
            out.extend((0..20).map(|_| b.allow().map(|p| p.record(true)).is_ok()));
        }
        out
    };
    let first = pattern();
    assert_eq!(first, pattern());
    assert!(first.iter().any(|&a| a) && first.iter().any(|&a| !a));
}

/// A clock stepped back a year in the ramp reads as the last close's time
/// (the ramp does not go backwards, nothing panics); forward a year, the
/// ramp is over.
#[test]
fn a_clock_stepped_a_year_either_way() {
    let clock = ManualClock::new();
    let b = ramped(&clock);
    recover(&b, &clock);
    clock.advance(5 * SEC);
    b.tick();
    clock.rewind(Duration::from_secs(365 * 86_400));
    let got = admitted(&b, 1000);
    assert!(got.abs_diff(500) <= 3, "at the close's time: {got}");
    clock.advance(Duration::from_secs(2 * 365 * 86_400));
    assert_eq!(admitted(&b, 100), 100);
    b.tick();
    assert_eq!(b.snapshot().ramp, None);
}

/// Threads racing the ramp's admissions take distinct counts: the share
/// admitted over all of them is the ramp's (each thread's own calls are
/// one part of the sequence).
#[test]
fn threads_racing_the_ramp_admit_its_share_together() {
    let clock = ManualClock::new();
    let b = ramped(&clock);
    recover(&b, &clock);
    clock.advance(3 * SEC);
    let total: usize = std::thread::scope(|s| {
        let handles: Vec<_> = (0..4).map(|_| s.spawn(|| admitted(&b, 25_000))).collect();
        handles.into_iter().map(|h| h.join().unwrap()).sum()
    });
    assert!(total.abs_diff(30_000) <= 8, "{total} of 100,000 at 30%");
}

/// The listener sees the recovery once (probes succeeded), and nothing for
/// the ramp's end, which is not a transition.
#[test]
fn the_ramp_s_end_is_no_transition() {
    let clock = ManualClock::new();
    let (seen, listener) = recorder();
    let b = builder(&clock)
        .success_to_close(1)
        .recovery_ramp(RAMP)
        .on_transition(listener)
        .build()
        .unwrap();
    recover(&b, &clock);
    clock.advance(RAMP);
    b.tick();
    assert_eq!(b.snapshot().ramp, None);
    let reasons: Vec<Reason> = seen.lock().unwrap().iter().map(|t| t.reason).collect();
    assert_eq!(
        reasons,
        [Reason::ManualTrip, Reason::BackoffElapsed, Reason::ProbesSucceeded]
    );
}

/// A transition after a ramp's end leaves none of the ramp's calls for
/// the windows after it: a trip there backs off from level 0, as after
/// any reset.
///
/// Regression (issue 18's reference model, the second pass).
#[test]
fn a_transition_after_a_ramp_s_end_leaves_no_ramp_span() {
    let clock = ManualClock::new();
    let b = builder(&clock)
        .success_to_close(1)
        .recovery_ramp(SEC / 2)
        .trip_windows(1)
        .min_calls(5)
        .build()
        .unwrap();
    recover(&b, &clock);
    clock.advance(SEC);
    b.allow().unwrap().record(true); // ends the ramp
    b.force_closed();
    b.reset(); // a transition: CLOSED, level 0
    crate::support::next_window(&b, &clock); // the span straddling them: not judged
    for _ in 0..50 {
        b.allow().unwrap().record_latency(900 * MS, true);
    }
    crate::support::next_window(&b, &clock);
    let s = b.snapshot();
    assert_eq!((s.state, s.backoff_level, s.next_probe_in), (State::Open, 0, Some(SEC)));
}
