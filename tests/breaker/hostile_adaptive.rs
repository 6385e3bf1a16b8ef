//! A hostile review of the two adaptive features: the relative latency
//! rule (`BreakerBuilder::relative_latency`, `src/baseline.rs`, the
//! learning in `src/breaker/window.rs`) and the recovery ramp
//! (`BreakerBuilder::recovery_ramp`, `src/breaker/ramp.rs`).
//!
//! The first part holds the findings: each test is a promise a doc
//! sentence makes (quoted in its doc, with the values observed when it
//! was found and the ones expected); each failed on the code it was found
//! on and passes since its fix (the fixed behaviour, where the fix was a
//! refusal or a documented limit, is what it now holds). The second part
//! holds the attacks that did not break anything, kept as regression
//! tests.
//!
//! Manual clock (or the hook clock, to put an action at one instant), no
//! sleeps.
//!
//! Source: the hostile review of the relative rule and the ramp.

use crate::support::hook::HookClock;
use crate::support::{builder, leak, next_window, recorder, MS, NS, SEC};
use std::time::Duration;
use tailguard::clock::ManualClock;
use tailguard::{Breaker, Reason, RejectReason, RelativeLatency, State};

const US: Duration = Duration::from_micros(1);

/// `n` calls at `latency` with verdict `ok`, each admitted one recorded;
/// returns how many were admitted.
fn calls(b: &Breaker, n: u64, latency: Duration, ok: bool) -> u64 {
    (0..n)
        .filter(|_| b.allow().map(|p| p.record_latency(latency, ok)).is_ok())
        .count() as u64
}

/// `n` calls admitted (whatever the ramp turns away first) at `latency`
/// with verdict `ok`.
fn admit(b: &Breaker, n: u64, latency: Duration, ok: bool) {
    let mut done = 0;
    while done < n {
        if let Ok(p) = b.allow() {
            p.record_latency(latency, ok);
            done += 1;
        }
    }
}

/// One healthy window of 1000 calls at `latency` (one in a hundred at
/// 1.5 ×, under twice the P99), closed.
fn healthy_window(b: &Breaker, clock: &ManualClock, latency: Duration) {
    for i in 0..1000 {
        let l = if i % 100 == 99 { latency * 3 / 2 } else { latency };
        b.allow().expect("admitted").record_latency(l, true);
    }
    next_window(b, clock);
}

// ---------------------------------------------------------------------
// Findings
// ---------------------------------------------------------------------

/// Finding 1. An outage of fast failures (connection refused, an instant
/// 503: 50 µs each) poisons the baseline, and the recovered consumer then
/// never closes the breaker again.
///
/// Promises broken: `BreakerBuilder::relative_latency`, "**Learning that
/// an outage cannot poison.**", and `docs/design.md`, "so an outage, a
/// probe, a forced mode or a stale verdict teaches it nothing". (The same
/// holds of any failures fast enough, in a rule that never trips on errors,
/// `error_rate(1.0)`, or in a cold start's warmup, and of cancellations
/// under `CancelPolicy::Failure`.)
///
/// The baseline pools every call of a window that does not breach by
/// latency, failed calls included, and the error-rate rule needs its
/// rolling span (10 windows) to go over 50% before it trips: the first
/// five windows of the outage are "healthy" (no slow call) and learned,
/// and the baseline falls by half the distance at each. Then every probe
/// of the recovered consumer (at 20 ms, exactly its healthy latency) is
/// judged by the poisoned threshold and is slow.
///
/// Observed: the outage trips by `ErrorRate` after 6 windows; the
/// baseline goes from 20.045 ms to 60.9 µs, the threshold from 43.5 ms to
/// the 1 ms floor (1.048575 ms); over the next 10 minutes all 23 probes
/// (20 ms, good) are `ProbeSlow` and the breaker stays OPEN. Expected: the
/// baseline unchanged (≈ 20 ms) and the first good 20 ms probe round
/// closing the breaker.
///
/// Reproduce: `cargo test --all-features --test breaker
/// hostile_adaptive::fast_failures -- --ignored`.
///
/// Regression (issue 18's hostile review, finding 1).
#[test]
fn fast_failures_poison_the_baseline_and_the_recovered_consumer_never_closes() {
    let clock = ManualClock::new();
    let (seen, listener) = recorder();
    let b = builder(&clock)
        .relative_latency(RelativeLatency::new().initial_baseline(20 * MS))
        .on_transition(listener)
        .build()
        .unwrap();
    for _ in 0..20 {
        healthy_window(&b, &clock, 20 * MS);
    }
    let before = b.latency_baseline().unwrap();
    let mut outage = 0;
    while b.state() == State::Closed {
        assert!(outage < 20, "the outage never tripped");
        calls(&b, 1000, 50 * US, false);
        next_window(&b, &clock);
        outage += 1;
    }
    let trip = seen.lock().unwrap().last().unwrap().reason;
    assert_eq!(trip, Reason::ErrorRate);
    let after = b.latency_baseline().unwrap();
    let threshold = b.snapshot().latency_threshold;
    // The consumer is back, exactly as it was before the outage.
    for _ in 0..600 {
        clock.advance(SEC);
        if let Ok(p) = b.allow() {
            p.record_latency(20 * MS, true);
        }
        b.tick();
    }
    assert_eq!(
        b.state(),
        State::Closed,
        "after {outage} windows of fast failures the baseline went {before:?} -> {after:?} \
         (threshold {threshold:?}); 10 minutes of good 20 ms probes never closed it"
    );
    assert!(
        after.as_secs_f64() > before.as_secs_f64() * 0.9,
        "{before:?} -> {after:?}"
    );
}

/// Finding 2. Calls admitted *and* returned during a recovery ramp are
/// learned from when the ramp ends (at an admission) between a window
/// close's drain and its verdict: the ramp's `ended` flag is taken by that
/// close, whose span holds none of them, and the next close, which drains
/// them, learns.
///
/// Promise broken: `BreakerBuilder::relative_latency`, "only windows the
/// rule judged (CLOSED, normal or metrics-only mode, not in a recovery
/// ramp, no transition)", and `src/baseline.rs`, "nothing from an outage,
/// a probe, a forced mode, a ramp or a stale verdict is learned, and no
/// pool straddles one"; the test `relative::a_span_counted_in_a_recovery_ramp_teaches_nothing`
/// covers only the end outside a close.
///
/// The hook clock puts the racing thread's work at the close's second
/// clock read (the in-flight claim, after the drain): 3000 calls at 3 ms
/// in the ramp at 90% (2700 admitted), then the clock at the ramp's end
/// and one admission that ends it.
///
/// Observed: the next close (2700 calls, all counted in the ramp) moves
/// the seeded 2 ms baseline to 2.000225 ms. Expected: 2 ms (nothing
/// learned from the ramp). Without `track_in_flight` the same instant
/// exists (a racing thread between the drain and the flag's swap); the
/// claim's clock read is only where the hook can reach it.
///
/// Regression (issue 18's hostile review, finding 2).
#[test]
fn a_ramp_ending_between_a_close_s_drain_and_its_verdict_lets_its_calls_be_learned() {
    let clock = HookClock::new();
    let b = leak(
        Breaker::builder()
            .clock(clock.source())
            .ticker(false)
            .relative_latency(RelativeLatency::new().initial_baseline(2 * MS))
            .success_to_close(1)
            .recovery_ramp(10 * SEC)
            .track_in_flight(true) // the claim's clock read, after the drain
            .build()
            .unwrap(),
    );
    let seeded = b.latency_baseline().unwrap();
    b.trip_now();
    clock.advance(SEC);
    b.tick(); // t = 1 s: HALF_OPEN
    b.allow().unwrap().record_latency(MS, true); // the ramp: 1 s to 11 s
    assert!(b.snapshot().ramp.is_some());
    for _ in 0..8 {
        clock.advance(SEC);
        b.tick(); // idle windows, to t = 9 s
    }
    let c = clock.clone();
    clock.at_read(2, move || {
        // No snapshot here: the close holds the tick lock.
        let admitted = calls(b, 3000, 3 * MS, true);
        assert!(admitted > 2000 && admitted < 3000, "{admitted} admitted at 90%");
        c.advance(SEC); // t = 11 s: the ramp has run its course
        b.allow().unwrap().abandon(); // and this admission ends it
    });
    clock.advance(SEC); // t = 10 s: this close's window, the ramp at 90%
    b.tick();
    assert!(clock.fired(), "the hook ran");
    assert_eq!(b.latency_baseline(), Some(seeded), "that close drained none of them");
    b.tick(); // drains the 2700 calls of the ramp
    let w = b.snapshot().window;
    assert!(w.calls > 2000, "{w:?}");
    assert_eq!(
        b.latency_baseline(),
        Some(seeded),
        "{} calls counted in the ramp were learned",
        w.calls
    );
}

/// Finding 3. Calls admitted during a recovery ramp and recorded after the
/// close that took the ramp's end are learned from.
///
/// Promise broken: as finding 2 ("not in a recovery ramp"; "nothing from
/// ... a ramp ... is learned"): the ramp's share admitted them while the
/// consumer was still recovering. The flag covers the span the ramp ended
/// in, not the calls still out then.
///
/// Observed: 1000 permits taken at 99% of the ramp, recorded at 3 ms one
/// window after its end, move the seeded 2 ms baseline to 2.000225 ms.
/// Expected: 2 ms.
///
/// Regression (issue 18's hostile review, finding 3).
#[test]
fn calls_admitted_in_the_ramp_and_recorded_after_it_are_learned() {
    let clock = ManualClock::new();
    let b = builder(&clock)
        .relative_latency(RelativeLatency::new().initial_baseline(2 * MS))
        .success_to_close(1)
        .recovery_ramp(100 * SEC)
        .build()
        .unwrap();
    let seeded = b.latency_baseline().unwrap();
    b.trip_now();
    next_window(&b, &clock); // t = 1 s: HALF_OPEN
    b.allow().unwrap().record_latency(MS, true); // the ramp: 1 s to 101 s
    clock.advance(99 * SEC); // t = 100 s: 99%
    b.tick();
    let mut held = Vec::new();
    while held.len() < 1000 {
        if let Ok(p) = b.allow() {
            held.push(p);
        }
    }
    clock.advance(SEC); // t = 101 s
    b.tick(); // the ramp ends here, and this close takes its flag
    assert_eq!(b.snapshot().ramp, None);
    for p in held {
        p.record_latency(3 * MS, true);
    }
    next_window(&b, &clock);
    assert_eq!(b.snapshot().window.calls, 1000);
    assert_eq!(b.latency_baseline(), Some(seeded), "the ramp's calls were learned");
}

/// Finding 4. An override that ends a recovery ramp (`metrics_only`) keeps
/// the backoff level the ramp was holding, so the first trip after the
/// ramp is over backs off as a trip *in* the ramp would.
///
/// Promise broken: `BreakerBuilder::recovery_ramp`, "a trip during the
/// ramp re-opens with the next backoff (the level is kept until the ramp
/// ends, then reset)".
///
/// Two failed probes leave level 2; the third closes into the ramp
/// (level 2, kept). `metrics_only()` ends the ramp (`snapshot().ramp` is
/// `None`). Observed: `backoff_level` 2 after it, and a trip then opens
/// for 4 s (level 2). Expected: level 0 once the ramp is over, and a 1 s
/// OPEN (`base_backoff`). (`reset` clears the level; `force_closed` and
/// `disable` keep it too, until a `reset`.)
///
/// Regression (issue 18's hostile review, finding 4).
#[test]
fn an_override_that_ends_the_ramp_keeps_its_backoff_level() {
    let clock = ManualClock::new();
    let b = builder(&clock)
        .success_to_close(1)
        .recovery_ramp(10 * SEC)
        .build()
        .unwrap();
    b.trip_now();
    for _ in 0..2 {
        clock.advance(b.snapshot().next_probe_in.unwrap());
        b.allow().unwrap().record(false);
    }
    clock.advance(b.snapshot().next_probe_in.unwrap());
    b.allow().unwrap().record_latency(MS, true);
    assert_eq!(b.snapshot().backoff_level, 2, "kept during the ramp");
    b.metrics_only();
    let s = b.snapshot();
    assert_eq!(s.ramp, None, "the ramp is over");
    assert_eq!(s.backoff_level, 0, "the level is reset when the ramp ends");
    b.trip_now();
    assert_eq!(b.snapshot().next_probe_in, Some(SEC), "a fresh trip");
}

/// Finding 5. The ceiling was not a bound when an explicit
/// `latency_threshold` was above it: calls up to the ceiling's bucket edge
/// (7.4% over a 1 s ceiling) were not slow. Now such a threshold is
/// refused by name, and the ceiling (the absolute threshold without an
/// explicit one) is exact: 1.05 s calls are slow, 1 s ones are not.
///
/// Promise: `RelativeLatency::ceiling`, "whatever the baseline learned, a
/// call slower than this is slow, and it is the threshold of a cold start".
///
/// Regression (issue 18's hostile review, finding 5).
#[test]
fn a_call_slower_than_the_ceiling_is_slow() {
    let clock = ManualClock::new();
    let err = builder(&clock)
        .relative_latency(RelativeLatency::new()) // ceiling 1 s
        .latency_threshold(2 * SEC)
        .build()
        .unwrap_err();
    assert_eq!(
        (err.field(), err.kind()),
        ("latency_threshold", tailguard::ConfigErrorKind::Inconsistent)
    );
    assert!(err.reason().contains("ceiling (1s)"), "{err}");
    for (latency, slow, state) in [(1050 * MS, 100, State::Open), (SEC, 0, State::Closed)] {
        let b = builder(&clock)
            .relative_latency(RelativeLatency::new())
            .trip_windows(1)
            .build()
            .unwrap();
        assert_eq!(b.snapshot().latency_threshold, SEC);
        calls(&b, 100, latency, true);
        next_window(&b, &clock);
        assert_eq!((b.snapshot().window.slow, b.state()), (slow, state), "{latency:?}");
    }
}

/// Finding 6. A relative threshold above the sketch's top (2^36 ns,
/// 68.7 s) could not be represented and became infinite, under a 1 h
/// ceiling. Now the ceiling is at most 60 s (refused above, by name), and
/// a baseline whose `k ×` is above the ceiling is judged by the ceiling.
///
/// Promise: `clamp(k × baseline, floor, ceiling)`.
///
/// Regression (issue 18's hostile review, finding 6).
#[test]
fn a_relative_threshold_above_the_sketch_s_top_is_the_ceiling() {
    let clock = ManualClock::new();
    let too_high = RelativeLatency::new().ceiling(Duration::from_secs(3600));
    let err = builder(&clock).relative_latency(too_high).build().unwrap_err();
    assert_eq!(
        (err.field(), err.kind()),
        ("relative_latency", tailguard::ConfigErrorKind::TooLarge)
    );
    let rule = RelativeLatency::new().ceiling(60 * SEC).initial_baseline(40 * SEC);
    let b = builder(&clock).relative_latency(rule).trip_windows(1).build().unwrap();
    let t = b.snapshot().latency_threshold;
    assert_eq!(t, 60 * SEC, "k × 40 s is over the ceiling");
    calls(&b, 100, 600 * SEC, true);
    next_window(&b, &clock);
    assert_eq!((b.snapshot().window.slow, b.state()), (100, State::Open));
}

/// Finding 7. With no floor, a sub-microsecond baseline gives a threshold
/// of about 2 µs: the sketch's bucket 0 takes everything up to 1.024 µs.
/// Now documented (`RelativeLatency::floor`: "a baseline below 1 µs counts
/// as 1 µs (a threshold of about `k` µs)"); this holds the documented
/// behaviour: 900 ns calls are not slow, 3 µs calls are.
///
/// Regression (issue 18's hostile review, finding 7).
#[test]
fn no_floor_judges_a_sub_microsecond_baseline_as_one_microsecond() {
    let clock = ManualClock::new();
    let rule = RelativeLatency::new().floor(Duration::ZERO).initial_baseline(100 * NS);
    for (latency, slow) in [(900 * NS, 0), (3000 * NS, 100)] {
        let b = builder(&clock).relative_latency(rule).trip_windows(1).build().unwrap();
        let t = b.snapshot().latency_threshold;
        assert!(t >= 2000 * NS && t < 2300 * NS, "{t:?}");
        calls(&b, 100, latency, true);
        next_window(&b, &clock);
        assert_eq!(b.snapshot().window.slow, slow, "{latency:?} against {t:?}");
    }
}

/// Finding 8. The threshold is below `k ×` the baseline the breaker
/// reports: `latency_baseline()` is the bucket's nominal edge
/// `2^(i/8)` (`ns_of_units`), the threshold the table's edge of the bucket
/// `8 log2 k` above, which can be below its nominal value (0.14% here).
///
/// Promise broken: `BreakerBuilder::relative_latency`, "The relative
/// threshold is a bucket edge of the latency sketch: the first edge at or
/// above `k × baseline`" (and `RelativeLatency::multiplier`, "how many
/// times its baseline a call may take before it is slow").
///
/// Observed, a consumer at 150 ms (P99): `latency_baseline()` 159.612677
/// ms, `2 ×` = 319.225354 ms, `latency_threshold` 318.767103 ms; a window
/// with 2 calls of 100 at 319 ms (under twice the reported baseline)
/// breaches and trips (`trip_windows(1)`). Expected: threshold ≥
/// 319.225354 ms, CLOSED.
///
/// Regression (issue 18's hostile review, finding 8).
#[test]
fn the_threshold_is_below_k_times_the_reported_baseline() {
    let clock = ManualClock::new();
    let b = builder(&clock)
        .relative_latency(RelativeLatency::new())
        .trip_windows(1)
        .build()
        .unwrap();
    for _ in 0..5 {
        healthy_window(&b, &clock, 150 * MS);
    }
    let baseline = b.latency_baseline().unwrap();
    let t = b.snapshot().latency_threshold;
    let under = baseline * 2 - NS;
    for i in 0..100 {
        let l = if i < 2 { under } else { 150 * MS };
        b.allow().unwrap().record_latency(l, true);
    }
    next_window(&b, &clock);
    assert_eq!(
        b.state(),
        State::Closed,
        "{under:?} calls, under 2 x {baseline:?}, were slow (threshold {t:?})"
    );
    assert!(t >= baseline * 2, "{t:?} < 2 x {baseline:?}");
}

/// Finding 9. A restart from the reported baseline does not restore the
/// threshold: seeded with `latency_baseline()`, the new breaker's
/// threshold is one bucket (9%) higher for some latencies (the nominal
/// edge, rounded to whole nanoseconds, reads back a hair above the whole
/// bucket, and the ceiling of `baseline + 8` goes one bucket up): of 1.5,
/// 2, 2.5, 3, 5, 7, 10 and 150 ms, at 2.5, 3 and 10 ms.
///
/// Promise broken: `RelativeLatency::initial_baseline`, "A baseline to
/// start from, warm (for a restart: the last
/// `Snapshot::latency_baseline`)", and `Breaker::seed_baseline`, "for a
/// restart, from the last `latency_baseline`".
///
/// Observed, a consumer at 2.5 ms (also 3 ms and 10 ms; not 2 ms, 5 ms
/// or 150 ms): learned threshold 5.439487 ms; restarted from its
/// `latency_baseline()` (2.71967 ms) 5.931007 ms, with `initial_baseline`
/// and with `seed_baseline` alike. Expected: 5.439487 ms.
///
/// Regression (issue 18's hostile review, finding 9).
#[test]
fn a_restart_from_the_reported_baseline_restores_its_threshold() {
    let clock = ManualClock::new();
    let b = builder(&clock)
        .relative_latency(RelativeLatency::new())
        .build()
        .unwrap();
    for _ in 0..5 {
        healthy_window(&b, &clock, 2500 * US);
    }
    let baseline = b.latency_baseline().unwrap();
    let t = b.snapshot().latency_threshold;
    let restarted = builder(&clock)
        .relative_latency(RelativeLatency::new().initial_baseline(baseline))
        .build()
        .unwrap();
    assert_eq!(restarted.latency_baseline(), Some(baseline));
    let seeded = builder(&clock)
        .relative_latency(RelativeLatency::new())
        .build()
        .unwrap();
    seeded.seed_baseline(baseline).unwrap();
    assert_eq!(
        (
            restarted.snapshot().latency_threshold,
            seeded.snapshot().latency_threshold
        ),
        (t, t),
        "restarted from {baseline:?}"
    );
}

/// Finding 10. The ramp's last window trips as a fresh trip: a window
/// counted wholly in the ramp whose close is at or after the ramp's end
/// ends the ramp first (step 2 of the close, `expire`: level to 0), then
/// judges the span, so the ramp's own calls re-open the breaker with the
/// base backoff.
///
/// Promise broken: `BreakerBuilder::recovery_ramp`, "The state is CLOSED
/// throughout and the trip rules stay armed: a trip during the ramp
/// re-opens with the next backoff (the level is kept until the ramp ends,
/// then reset)"; `docs/design.md`, "a trip in the ramp re-opens with the
/// next backoff".
///
/// A probe at 1.5 s (after a manual trip, level 0) starts a 10 s ramp;
/// windows of 100 ms, closed on time; 200 calls admitted by the ramp, all
/// slow, then the window's close. Calls at 11.2 s, closed at 11.3 s: OPEN
/// at level 1 for 2 s (as promised). Calls at 11.45 s (the ramp at
/// 99.5%), closed at 11.5 s (the ramp's end): observed OPEN at level 0
/// for 1 s; expected level 1 for 2 s.
///
/// Regression (issue 18's hostile review, finding 10).
#[test]
fn the_ramp_s_last_window_trips_as_a_fresh_trip() {
    let run = |calls_at: Duration| {
        let clock = ManualClock::new();
        let b = builder(&clock)
            .success_to_close(1)
            .recovery_ramp(10 * SEC)
            .trip_windows(1)
            .window(100 * MS)
            .build()
            .unwrap();
        b.trip_now(); // level 0
        clock.set(1500 * MS);
        b.allow().unwrap().record_latency(MS, true); // the ramp: 1.5 s to 11.5 s
        let window_start = calls_at - calls_at.subsec_nanos() % 100_000_000 * NS;
        clock.set(window_start);
        b.tick(); // every window before it (the recovery's is not judged)
        clock.set(calls_at);
        assert!(b.snapshot().ramp.is_some());
        admit(&b, 200, 900 * MS, true);
        clock.set(window_start + 100 * MS);
        b.tick(); // on time
        let s = b.snapshot();
        assert_eq!((s.state, s.window.calls), (State::Open, 200), "calls at {calls_at:?}");
        (s.backoff_level, s.next_probe_in.unwrap() + s.open_for.unwrap())
    };
    assert_eq!(run(11_200 * MS), (1, 2 * SEC), "a window within the ramp");
    assert_eq!(
        run(11_450 * MS),
        (1, 2 * SEC),
        "the ramp's last window, all its calls in the ramp"
    );
}

/// Finding 11. A snapshot is not read at once: the baseline and the last
/// window are read under the tick lock, the threshold after it (beside the
/// clock's read), so a close or a seed in between shows a baseline with
/// another baseline's threshold.
///
/// Promise broken: `Breaker::snapshot`, "Reads everything at once (cold
/// path: takes the window-close lock)"; `Snapshot::latency_threshold`,
/// "the threshold the window in progress is judged by".
///
/// The hook clock runs `seed_baseline(20 ms)` at the snapshot's clock
/// read. Observed: `latency_baseline` 2 ms, `latency_threshold`
/// 43.515903 ms (20 ms's). Expected: a pair that belongs together (2 ms
/// and 4.194303 ms, or 20 ms and 43.515903 ms).
///
/// Regression (issue 18's hostile review, finding 11).
#[test]
fn a_snapshot_shows_a_baseline_with_its_own_threshold() {
    let clock = HookClock::new();
    let b = leak(
        Breaker::builder()
            .clock(clock.source())
            .ticker(false)
            .relative_latency(RelativeLatency::new().initial_baseline(2 * MS))
            .build()
            .unwrap(),
    );
    let low = b.snapshot();
    b.seed_baseline(20 * MS).unwrap();
    let high = b.snapshot();
    b.seed_baseline(2 * MS).unwrap();
    clock.at_read(1, move || b.seed_baseline(20 * MS).unwrap());
    let s = b.snapshot();
    assert!(clock.fired());
    let pair = (s.latency_baseline, s.latency_threshold);
    assert!(
        pair == (low.latency_baseline, low.latency_threshold)
            || pair == (high.latency_baseline, high.latency_threshold),
        "{pair:?}: neither {:?} nor {:?}",
        (low.latency_baseline, low.latency_threshold),
        (high.latency_baseline, high.latency_threshold)
    );
}

// ---------------------------------------------------------------------
// Attacks that held (regression tests; they pass)
// ---------------------------------------------------------------------

/// Every kind of trip in a ramp re-opens with the next backoff: the
/// latency streak, the error rate, the failure count, the sparse test,
/// `trip_now`; the ramp's own end resets the level.
#[test]
#[cfg_attr(miri, ignore = "thousands of calls in five breakers")]
fn every_kind_of_trip_in_a_ramp_backs_off_further() {
    type Drive = fn(&Breaker, &ManualClock);
    let kinds: [(&str, Drive, Reason); 5] = [
        ("latency", |b, _| admit(b, 1000, 900 * MS, true), Reason::LatencyBreach),
        ("error rate", |b, _| admit(b, 1000, MS, false), Reason::ErrorRate),
        ("failure count", |b, _| admit(b, 5, MS, false), Reason::FailureCount),
        (
            "sparse",
            |b, c| {
                for _ in 0..4 {
                    calls(b, 10, 900 * MS, true);
                    next_window(b, c);
                }
            },
            Reason::SparseLatency,
        ),
        ("manual", |b, _| b.trip_now(), Reason::ManualTrip),
    ];
    for (name, drive, reason) in kinds {
        let clock = ManualClock::new();
        let (seen, listener) = recorder();
        let b = builder(&clock)
            .success_to_close(1)
            .recovery_ramp(100 * SEC)
            .trip_windows(1)
            .failure_count(5, 10 * SEC)
            .error_rate(0.9)
            .on_transition(listener)
            .build()
            .unwrap();
        b.trip_now();
        clock.advance(SEC);
        b.allow().unwrap().record(false); // level 1
        clock.advance(2 * SEC);
        b.allow().unwrap().record_latency(MS, true); // the ramp, level 1 kept
        next_window(&b, &clock); // the span straddling the recovery
        clock.advance(50 * SEC);
        b.tick();
        drive(&b, &clock);
        next_window(&b, &clock);
        let s = b.snapshot();
        assert_eq!(s.state, State::Open, "{name}: {s:?}");
        let open = s.next_probe_in.unwrap() + s.open_for.unwrap();
        assert_eq!((s.backoff_level, open), (2, 4 * SEC), "{name}");
        assert_eq!(seen.lock().unwrap().last().unwrap().reason, reason, "{name}");
    }
}

/// The rejections counted are the calls rejected, on shared and local
/// handles alike; every ramp hint is above zero and at most one window
/// and the rest of the ramp.
#[test]
#[cfg_attr(miri, ignore = "10,000 calls with a snapshot each hundred")]
fn ramp_rejections_are_counted_exactly_and_their_hints_are_sane() {
    let clock = ManualClock::new();
    let b = builder(&clock)
        .success_to_close(1)
        .recovery_ramp(10 * SEC)
        .local_handles(1)
        .build()
        .unwrap();
    let h = b.local_handle().unwrap();
    b.trip_now();
    clock.advance(SEC);
    b.allow().unwrap().record_latency(MS, true);
    let mut rejected = 0u64;
    for step in 0..100u32 {
        let remaining = b.snapshot().ramp.map(|r| r.remaining);
        for i in 0..100 {
            let r = if i % 2 == 0 {
                b.allow().map(|p| p.record(true)).err()
            } else {
                h.allow().map(|p| p.record(true)).err()
            };
            if let Some(r) = r {
                rejected += 1;
                assert_eq!(r.reason(), RejectReason::Ramping);
                let hint = r.retry_after().unwrap();
                assert!(hint > Duration::ZERO && hint <= SEC, "{step}: {hint:?}");
                assert!(hint <= remaining.unwrap(), "{step}: {hint:?} {remaining:?}");
            }
        }
        clock.advance(101 * MS);
    }
    assert_eq!(b.snapshot().rejections.ramping, rejected);
    assert!(rejected.abs_diff(5000) <= 60, "{rejected}");
}

/// The shortest and the longest ramps: 1 ns (over at the next
/// nanosecond), 1 h (a share of 1/3600 after a second); nothing panics.
#[test]
#[cfg_attr(miri, ignore = "36,000 calls")]
fn the_shortest_and_longest_ramps() {
    let clock = ManualClock::new();
    let b = builder(&clock).success_to_close(1).recovery_ramp(NS).build().unwrap();
    b.trip_now();
    clock.advance(SEC);
    b.allow().unwrap().record_latency(MS, true);
    let r = b.allow().expect_err("a share of 0 at its first instant");
    assert_eq!(r.retry_after(), Some(NS));
    clock.advance(NS);
    assert_eq!(calls(&b, 100, MS, true), 100);
    assert_eq!(b.snapshot().ramp, None);

    let b = builder(&clock)
        .success_to_close(1)
        .recovery_ramp(Duration::from_secs(3600))
        .build()
        .unwrap();
    b.trip_now();
    clock.advance(SEC);
    b.allow().unwrap().record_latency(MS, true);
    clock.advance(SEC);
    let admitted = calls(&b, 36_000, MS, true);
    assert!(admitted.abs_diff(10) <= 3, "{admitted} of 36,000 at 1/3600");
    clock.advance(Duration::from_secs(365 * 86_400));
    assert_eq!(calls(&b, 10, MS, true), 10);
}

/// A ramp racing `trip_now`, `reset` and `force_open` at the worst
/// instant: between the closing probe's CAS and the publication of the
/// ramp's start (the verdict's clock read). Each ends the ramp for good:
/// no caller is then turned away as `Ramping`, and the level is the one
/// each promises.
#[test]
fn a_ramp_racing_its_own_publication() {
    type Act = fn(&Breaker);
    let acts: [(&str, Act, State, u8); 3] = [
        ("trip_now", Breaker::trip_now, State::Open, 2),
        ("reset", Breaker::reset, State::Closed, 0),
        // An override ends the ramp, and with it the level it kept.
        ("force_open", Breaker::force_open, State::Open, 0),
    ];
    for (name, act, state, level) in acts {
        let clock = HookClock::new();
        let b = leak(
            Breaker::builder()
                .clock(clock.source())
                .ticker(false)
                .success_to_close(1)
                .recovery_ramp(10 * SEC)
                .build()
                .unwrap(),
        );
        b.trip_now();
        clock.advance(SEC);
        b.allow().unwrap().record(false); // level 1
        clock.advance(2 * SEC);
        let probe = b.allow().unwrap();
        clock.at_read(1, move || act(b));
        probe.record_latency(MS, true);
        assert!(clock.fired(), "{name}");
        let s = b.snapshot();
        assert_eq!((s.state, s.ramp, s.backoff_level), (state, None, level), "{name}");
        clock.advance(5 * SEC);
        if state == State::Closed {
            assert_eq!(calls(b, 100, MS, true), 100, "{name}");
        }
        b.reset();
        assert_eq!(calls(b, 100, MS, true), 100, "{name}");
    }
}

/// A probe of an earlier round, and a permit held across a thousand
/// transitions and two ramps, decide nothing and count as stale.
#[test]
fn old_permits_across_ramps_are_stale() {
    let clock = ManualClock::new();
    let b = builder(&clock)
        .success_to_close(1)
        .half_open_probes(2)
        .recovery_ramp(5 * SEC)
        .build()
        .unwrap();
    let old = b.allow().unwrap();
    b.trip_now();
    clock.advance(SEC);
    let old_probe = b.allow().unwrap();
    assert!(old_probe.is_probe());
    b.allow().unwrap().record(false); // that round re-opens
    for _ in 0..500 {
        b.force_open();
        b.reset();
    }
    b.trip_now();
    clock.advance(10 * SEC);
    b.allow().unwrap().record_latency(MS, true); // a ramp
    assert!(b.snapshot().ramp.is_some());
    let generation = b.snapshot().generation;
    old_probe.record_latency(900 * MS, false);
    assert_eq!((b.state(), b.snapshot().generation), (State::Closed, generation));
    clock.advance(6 * SEC);
    next_window(&b, &clock);
    old.record_latency(900 * MS, false);
    next_window(&b, &clock);
    let w = b.snapshot().window;
    assert_eq!((w.calls, w.stale), (0, 1), "{w:?}");
    assert_eq!(b.state(), State::Closed);
}

/// The rise bound against a drift just under the threshold at every
/// observation, closed late (ten windows a tick): an hour of it raises the
/// baseline by at most ×1.5.
#[test]
#[cfg_attr(miri, ignore = "an hour of traffic, 360,000 calls")]
fn a_drift_just_under_the_threshold_rises_at_most_the_bound() {
    let clock = ManualClock::new();
    let b = builder(&clock)
        .relative_latency(RelativeLatency::new().initial_baseline(2 * MS))
        .build()
        .unwrap();
    let start = b.latency_baseline().unwrap();
    for _ in 0..360 {
        let edge = b.snapshot().latency_threshold; // not slow: at the edge
        calls(&b, 1000, edge, true);
        clock.advance(10 * SEC);
        b.tick();
        assert_eq!(b.state(), State::Closed);
    }
    let ratio = b.latency_baseline().unwrap().as_secs_f64() / start.as_secs_f64();
    assert!(ratio <= 1.5 + 1e-6 && ratio > 1.45, "{ratio}");
}

/// `reset_baseline` and `seed_baseline` while OPEN, HALF_OPEN and in a
/// ramp: the threshold follows at once, nothing is learned from the
/// outage, and the breaker recovers by the threshold it was given.
#[test]
fn resetting_and_seeding_the_baseline_mid_outage() {
    let clock = ManualClock::new();
    let b = builder(&clock)
        .relative_latency(RelativeLatency::new().initial_baseline(2 * MS))
        .success_to_close(1)
        .recovery_ramp(5 * SEC)
        .build()
        .unwrap();
    b.trip_now();
    b.reset_baseline();
    assert_eq!((b.latency_baseline(), b.snapshot().latency_threshold), (None, SEC));
    b.seed_baseline(100 * MS).unwrap();
    clock.advance(SEC);
    let probe = b.allow().unwrap();
    b.seed_baseline(2 * MS).unwrap(); // while the probe is out
    probe.record_latency(100 * MS, true);
    assert_eq!(b.state(), State::Open, "judged by the threshold now");
    clock.advance(2 * SEC);
    b.allow().unwrap().record_latency(MS, true);
    assert!(b.snapshot().ramp.is_some());
    b.seed_baseline(3 * MS).unwrap(); // in the ramp, until t = 8 s
    for _ in 0..4 {
        calls(&b, 1000, 5 * MS, true); // healthy by 2 x 3 ms, and above it
        next_window(&b, &clock);
        assert!(b.snapshot().ramp.is_some());
        let base = b.latency_baseline().unwrap();
        assert!((base.as_secs_f64() / 0.003 - 1.0).abs() < 1e-6, "{base:?}");
    }
}

/// Extreme settings build, judge and learn without a panic: q = 1 and
/// q = 1e-9, P50, k = 1000, floor = ceiling, a 1 µs ceiling, an explicit
/// threshold under the ceiling, and calls at `Duration::MAX` and zero.
#[test]
#[cfg_attr(miri, ignore = "24,000 calls in six breakers")]
fn extreme_settings_judge_and_learn_without_panicking() {
    let r = RelativeLatency::new();
    let cases: [(f64, RelativeLatency); 6] = [
        (1.0, r),
        (1e-9, r),
        (0.5, r.multiplier(1000.0)),
        (0.99, r.floor(10 * MS).ceiling(10 * MS)),
        (0.99, r.floor(Duration::ZERO).ceiling(US)),
        (0.99, r.max_rise_per_hour(1000.0).warmup(1)),
    ];
    for (q, rule) in cases {
        let clock = ManualClock::new();
        let b = builder(&clock)
            .quantile(q)
            .relative_latency(rule)
            .latency_threshold(rule.ceiling.min(500 * MS))
            .build()
            .unwrap();
        for w in 0..20u64 {
            for i in 0..200u64 {
                let l = match i {
                    0 if w % 7 == 0 => Duration::MAX,
                    1 => Duration::ZERO,
                    _ => MS * (1 + (i % 5) as u32),
                };
                if let Ok(p) = b.allow() {
                    p.record_latency(l, true);
                }
            }
            next_window(&b, &clock);
            let s = b.snapshot();
            assert!(s.latency_threshold <= 500 * MS, "{q} {rule:?}: {s:?}");
            assert!(s.window.threshold <= 500 * MS, "{q} {rule:?}: {s:?}");
        }
    }
}
