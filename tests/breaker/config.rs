//! Configuration: every field's bounds, errors that name the field and the
//! accepted range, and extreme but valid values that build and behave.

use crate::support::*;
use std::time::Duration;
use tailguard::clock::ManualClock;
use tailguard::dlq::{DeadLetterQueue, MAX_CAPACITY};
use tailguard::{Breaker, BreakerBuilder, ConfigErrorKind, ConfigErrorKind as K, Jitter, RejectReason, State};

#[test]
fn config_rejects_each_bad_field_by_name() {
    let cases: Vec<(BreakerBuilder, &str, ConfigErrorKind)> = vec![
        (
            Breaker::builder().quantile(f64::NAN),
            "quantile",
            ConfigErrorKind::NotANumber,
        ),
        (
            Breaker::builder().quantile(-0.5),
            "quantile",
            ConfigErrorKind::OutOfRange,
        ),
        (
            Breaker::builder().quantile(0.0),
            "quantile",
            ConfigErrorKind::OutOfRange,
        ),
        (
            Breaker::builder().quantile(1.01),
            "quantile",
            ConfigErrorKind::OutOfRange,
        ),
        (
            Breaker::builder().error_rate(f64::NAN),
            "error_rate",
            ConfigErrorKind::NotANumber,
        ),
        (
            Breaker::builder().error_rate(-0.1),
            "error_rate",
            ConfigErrorKind::OutOfRange,
        ),
        (
            Breaker::builder().error_rate(1.5),
            "error_rate",
            ConfigErrorKind::OutOfRange,
        ),
        (
            Breaker::builder().error_rate(f64::INFINITY),
            "error_rate",
            ConfigErrorKind::OutOfRange,
        ),
        (
            Breaker::builder().window(Duration::ZERO),
            "window",
            ConfigErrorKind::Zero,
        ),
        (
            Breaker::builder().window(Duration::from_micros(10)),
            "window",
            ConfigErrorKind::OutOfRange,
        ),
        (
            Breaker::builder().window(Duration::from_secs(1 << 40)),
            "window",
            ConfigErrorKind::TooLarge,
        ),
        (
            Breaker::builder().latency_threshold(Duration::ZERO),
            "latency_threshold",
            ConfigErrorKind::Zero,
        ),
        (
            Breaker::builder().latency_threshold(Duration::MAX),
            "latency_threshold",
            ConfigErrorKind::TooLarge,
        ),
        (
            Breaker::builder().trip_windows(0),
            "trip_windows",
            ConfigErrorKind::Zero,
        ),
        (
            Breaker::builder().trip_windows(256),
            "trip_windows",
            ConfigErrorKind::TooLarge,
        ),
        (
            Breaker::builder().half_open_probes(0),
            "half_open_probes",
            ConfigErrorKind::Zero,
        ),
        (
            Breaker::builder().half_open_probes(1000),
            "half_open_probes",
            ConfigErrorKind::TooLarge,
        ),
        (
            Breaker::builder().success_to_close(0),
            "success_to_close",
            ConfigErrorKind::Zero,
        ),
        (
            Breaker::builder().base_backoff(Duration::ZERO),
            "base_backoff",
            ConfigErrorKind::Zero,
        ),
        (
            Breaker::builder().base_backoff(60 * SEC).max_backoff(30 * SEC),
            "base_backoff",
            ConfigErrorKind::Inconsistent,
        ),
        (
            Breaker::builder().max_backoff(Duration::MAX),
            "max_backoff",
            ConfigErrorKind::TooLarge,
        ),
        (
            Breaker::builder().jitter(Jitter::Bounded(f64::NAN)),
            "jitter",
            ConfigErrorKind::NotANumber,
        ),
        (
            Breaker::builder().jitter(Jitter::Bounded(1.5)),
            "jitter",
            ConfigErrorKind::OutOfRange,
        ),
        (
            Breaker::builder().failure_count(0, SEC),
            "failure_count",
            ConfigErrorKind::Zero,
        ),
        (
            Breaker::builder().failure_count(5, Duration::ZERO),
            "failure_count",
            ConfigErrorKind::Zero,
        ),
        (
            Breaker::builder().failure_count(5, 5000 * SEC),
            "failure_count",
            ConfigErrorKind::TooLarge,
        ),
        (
            Breaker::builder().error_window(Duration::ZERO),
            "error_window",
            ConfigErrorKind::Zero,
        ),
        (
            Breaker::builder().error_window(2000 * SEC),
            "error_window",
            ConfigErrorKind::TooLarge,
        ),
        (
            Breaker::builder().probe_lease(10 * MS),
            "probe_lease",
            ConfigErrorKind::Inconsistent,
        ),
        (Breaker::builder().shards(0), "shards", ConfigErrorKind::Zero),
        (Breaker::builder().shards(1 << 20), "shards", ConfigErrorKind::TooLarge),
        (
            Breaker::builder().local_handles(65),
            "local_handles",
            ConfigErrorKind::TooLarge,
        ),
    ];
    for (builder, field, kind) in cases {
        let err = builder.ticker(false).build().expect_err(field);
        assert_eq!((err.field(), err.kind()), (field, kind), "{err}");
        assert!(err.to_string().contains(field));
    }
}

#[test]
#[cfg_attr(
    miri,
    ignore = "minutes under Miri; no unsafe or atomic protocol beyond the other tests"
)]
fn extreme_but_valid_values_never_panic() {
    let clock = ManualClock::new();
    let b = builder(&clock)
        .latency_threshold(Duration::from_nanos(1))
        .window(MS)
        .trip_windows(1)
        .min_calls(0)
        .error_rate(0.0)
        .quantile(1.0)
        .base_backoff(Duration::from_nanos(1))
        .max_backoff(Duration::from_secs(86_400))
        .half_open_probes(255)
        .success_to_close(255)
        .jitter(Jitter::Full)
        .track_in_flight(true)
        .build()
        .unwrap();
    for _ in 0..1000 {
        if let Ok(p) = b.allow() {
            p.record(false);
        }
        clock.advance(Duration::from_micros(700));
        b.tick();
    }
    // A clock that runs to the end of time and back.
    clock.set(Duration::from_nanos(u64::MAX));
    b.tick();
    let _ = b.allow();
    clock.set(Duration::ZERO);
    b.tick();
    let _ = b.allow();
    let _ = b.snapshot();
}

/// A breaker at an extreme setting still does its job: it admits and
/// measures, closes windows, trips, rejects, probes and closes again, with
/// the clock moved in steps scaled to its own settings.
fn behaves(name: &str, clock: &ManualClock, b: &Breaker) {
    let limits = b.snapshot().limits;
    let window = limits.window;
    for _ in 0..3 {
        if let Ok(p) = b.allow() {
            p.record_latency(MS, true);
        }
    }
    clock.advance(window * 2);
    b.tick();
    assert!(
        b.snapshot().window.closed_at > Duration::ZERO,
        "{name}: no window closed"
    );
    b.reset();
    b.trip_now();
    assert_eq!(b.state(), State::Open, "{name}");
    let r = b.allow().unwrap_err();
    assert_eq!(r.reason(), RejectReason::Open, "{name}");
    let wait = r.retry_after().expect("a deadline");
    clock.advance(wait);
    let probe = b
        .allow()
        .unwrap_or_else(|e| panic!("{name}: no probe after the backoff: {e}"));
    assert!(probe.is_probe(), "{name}");
    probe.record_latency(Duration::ZERO, true);
    b.tick();
    b.reset();
    assert_eq!(b.state(), State::Closed, "{name}");
}

/// From issue 10's adversarial inputs.
#[test]
fn every_field_at_its_smallest_and_largest_accepted_value_builds_and_behaves() {
    type Set = fn(BreakerBuilder) -> BreakerBuilder;
    let extremes: Vec<(&str, Set)> = vec![
        ("latency_threshold 1 ns", |b| b.latency_threshold(NS)),
        ("latency_threshold 1 h", |b| b.latency_threshold(HOUR).probe_lease(HOUR)),
        ("quantile 1e-9", |b| b.quantile(1e-9)),
        ("quantile 1", |b| b.quantile(1.0)),
        ("trip_windows 1", |b| b.trip_windows(1)),
        ("trip_windows 255", |b| b.trip_windows(255)),
        ("window 1 ms", |b| b.window(MS)),
        ("window 1 h", |b| b.window(HOUR)),
        ("error_rate 0", |b| b.error_rate(0.0)),
        ("error_rate 1", |b| b.error_rate(1.0)),
        ("error_window 1 ns (one window)", |b| b.error_window(NS)),
        ("error_window 1024 windows", |b| b.error_window(1024 * SEC)),
        ("min_calls 0", |b| b.min_calls(0)),
        ("min_calls u64::MAX", |b| b.min_calls(u64::MAX)),
        ("failure_count 1 in 1 ns", |b| b.failure_count(1, NS)),
        ("failure_count u32::MAX in 1024 windows", |b| {
            b.failure_count(u32::MAX, 1024 * SEC)
        }),
        ("base_backoff 1 ns", |b| b.base_backoff(NS).max_backoff(NS)),
        ("max_backoff 1 day", |b| b.base_backoff(DAY).max_backoff(DAY)),
        ("jitter full", |b| b.jitter(Jitter::Full)),
        ("jitter bounded 0", |b| b.jitter(Jitter::Bounded(0.0))),
        ("jitter bounded 1", |b| b.jitter(Jitter::Bounded(1.0))),
        ("half_open_probes 1", |b| b.half_open_probes(1)),
        ("half_open_probes 255", |b| b.half_open_probes(255)),
        ("success_to_close 1", |b| b.success_to_close(1)),
        ("success_to_close 255", |b| b.success_to_close(255)),
        ("probe_lease = threshold", |b| b.probe_lease(Duration::from_millis(50))),
        ("probe_lease 1 day", |b| b.probe_lease(DAY)),
        ("shards 1", |b| b.shards(1)),
        ("shards 1024", |b| b.shards(1024)),
        ("local_handles 0", |b| b.local_handles(0)),
        ("local_handles 64", |b| b.local_handles(64)),
        ("flapping 1 in 1 ns", |b| b.flapping(1, NS)),
        ("flapping 64 in 1 day", |b| b.flapping(64, DAY)),
        ("track_in_flight", |b| b.track_in_flight(true)),
    ];
    for (name, set) in extremes {
        let (clock, builder) = manual();
        let b = set(builder).build().unwrap_or_else(|e| panic!("{name}: {e}"));
        behaves(name, &clock, &b);
    }
}

/// From issue 10's adversarial inputs.
#[test]
fn one_step_past_either_end_is_an_error_naming_the_field() {
    type Set = fn(BreakerBuilder) -> BreakerBuilder;
    let past: Vec<(Set, &str, K)> = vec![
        (|b| b.latency_threshold(Duration::ZERO), "latency_threshold", K::Zero),
        (|b| b.latency_threshold(HOUR + NS), "latency_threshold", K::TooLarge),
        (|b| b.quantile(0.0), "quantile", K::OutOfRange),
        (|b| b.quantile(4e-10), "quantile", K::OutOfRange),
        (|b| b.quantile(1.0 + f64::EPSILON), "quantile", K::OutOfRange),
        (|b| b.quantile(f64::NAN), "quantile", K::NotANumber),
        (|b| b.trip_windows(0), "trip_windows", K::Zero),
        (|b| b.trip_windows(256), "trip_windows", K::TooLarge),
        (|b| b.window(MS - NS), "window", K::OutOfRange),
        (|b| b.window(HOUR + NS), "window", K::TooLarge),
        (|b| b.error_rate(-f64::EPSILON), "error_rate", K::OutOfRange),
        (|b| b.error_rate(1.0 + f64::EPSILON), "error_rate", K::OutOfRange),
        (|b| b.error_window(Duration::ZERO), "error_window", K::Zero),
        (|b| b.error_window(1024 * SEC + NS), "error_window", K::TooLarge),
        (|b| b.failure_count(0, SEC), "failure_count", K::Zero),
        (|b| b.failure_count(1, Duration::ZERO), "failure_count", K::Zero),
        (|b| b.failure_count(1, 1024 * SEC + NS), "failure_count", K::TooLarge),
        (|b| b.base_backoff(Duration::ZERO), "base_backoff", K::Zero),
        (|b| b.base_backoff(31 * SEC), "base_backoff", K::Inconsistent),
        (|b| b.max_backoff(DAY + NS), "max_backoff", K::TooLarge),
        (|b| b.jitter(Jitter::Bounded(-f64::EPSILON)), "jitter", K::OutOfRange),
        (
            |b| b.jitter(Jitter::Bounded(1.0 + f64::EPSILON)),
            "jitter",
            K::OutOfRange,
        ),
        (|b| b.jitter(Jitter::Bounded(f64::NAN)), "jitter", K::NotANumber),
        (|b| b.half_open_probes(0), "half_open_probes", K::Zero),
        (|b| b.half_open_probes(256), "half_open_probes", K::TooLarge),
        (|b| b.success_to_close(0), "success_to_close", K::Zero),
        (|b| b.success_to_close(256), "success_to_close", K::TooLarge),
        (
            |b| b.probe_lease(Duration::from_millis(50) - NS),
            "probe_lease",
            K::Inconsistent,
        ),
        (|b| b.probe_lease(DAY + NS), "probe_lease", K::TooLarge),
        (|b| b.shards(0), "shards", K::Zero),
        (|b| b.shards(1025), "shards", K::TooLarge),
        (|b| b.local_handles(65), "local_handles", K::TooLarge),
        (|b| b.flapping(0, SEC), "flapping", K::Zero),
        (|b| b.flapping(65, SEC), "flapping", K::TooLarge),
        (|b| b.flapping(1, DAY + NS), "flapping", K::TooLarge),
    ];
    for (set, field, kind) in past {
        let err = set(Breaker::builder().ticker(false)).build().unwrap_err();
        assert_eq!((err.field(), err.kind()), (field, kind), "{err}");
        assert!(err.to_string().contains(field), "{err}");
    }
    assert_eq!(DeadLetterQueue::<u8>::with_capacity(0).unwrap_err().kind(), K::Zero);
    assert_eq!(
        DeadLetterQueue::<u8>::with_capacity(MAX_CAPACITY + 1)
            .unwrap_err()
            .kind(),
        K::TooLarge
    );
}

/// What an error says is accepted is accepted, and a two-argument setter is
/// quoted with both arguments (from a hostile review of issue 16: the
/// rolling spans' messages gave a maximum a thousand times the real one,
/// which depends on the window, and `flapping(5, 0s)` was quoted as
/// `flapping(0s)`).
///
/// From issue 10's adversarial inputs.
#[test]
fn an_errors_accepted_range_is_accepted_and_its_call_is_quoted_whole() {
    let err = Breaker::builder().error_window(1025 * SEC).build().unwrap_err();
    assert!(
        err.reason().starts_with("error_window(1025s) covers 1025 windows"),
        "{err}"
    );
    assert!(
        err.reason()
            .contains("accepted: 1ns to 1024s, 1024 windows of 1s, its default"),
        "{err}"
    );
    Breaker::builder().error_window(1024 * SEC).build().unwrap();
    let err = Breaker::builder()
        .window(10 * MS)
        .failure_count(5, 20 * SEC)
        .build()
        .unwrap_err();
    assert!(
        err.reason().starts_with("failure_count(5, 20s) covers 2000 windows"),
        "{err}"
    );
    assert!(
        err.reason().contains("accepted: 1ns to 10.24s, 1024 windows of 10ms)"),
        "{err}"
    );
    Breaker::builder()
        .window(10 * MS)
        .failure_count(5, 10240 * MS)
        .build()
        .unwrap();
    for (q, hint) in [
        (99.0, "P99 is quantile(0.99)"),
        (99.9, "P99.9 is quantile(0.999)"),
        (100.0, "P100 is quantile(1)"),
        (90.0, "P90 is quantile(0.9)"),
    ] {
        let err = Breaker::builder().quantile(q).build().unwrap_err();
        assert!(err.reason().ends_with(&format!("(a percentile? {hint})")), "{err}");
    }
    // The range given is the range accepted, named where it is another setting.
    let err = Breaker::builder().probe_lease(Duration::ZERO).build().unwrap_err();
    assert!(
        err.reason()
            .contains("accepted: latency_threshold (50ms, its default) to 86400s"),
        "{err}"
    );
    Breaker::builder().probe_lease(50 * MS).build().unwrap();
    let err = Breaker::builder().jitter(Jitter::Bounded(2.0)).build().unwrap_err();
    assert!(
        err.reason()
            .starts_with("jitter(Jitter::Bounded(2.0)) must lie in [0, 1]"),
        "{err}"
    );
    for (err, call) in [
        (
            Breaker::builder().flapping(5, Duration::ZERO).build().unwrap_err(),
            "flapping(5, 0ns)",
        ),
        (
            Breaker::builder().flapping(5, DAY + NS).build().unwrap_err(),
            "flapping(5, 86400.000000001s)",
        ),
        (
            Breaker::builder().failure_count(5, Duration::ZERO).build().unwrap_err(),
            "failure_count(5, 0ns)",
        ),
    ] {
        assert!(err.reason().starts_with(call), "{call}: {err}");
    }
}
