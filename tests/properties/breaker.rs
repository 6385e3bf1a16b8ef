//! Property test: the breaker against its reference model (`model/breaker.rs`).
//!
//! Random configurations (sometimes with the relative latency rule, with or
//! without an explicit absolute threshold, sometimes with a recovery ramp,
//! sometimes calm: no forced modes) and random sequences of operations
//! (allow; record ok / failed / slow / at the threshold / at the threshold
//! windows are judged by now and one nanosecond above it / at a bucket edge
//! or one nanosecond above it / `Duration::MAX` / by the clock; a burst of
//! calls admitted and recorded at once, over several buckets; windows of
//! such traffic, each closed; drop a permit; leak one; advance the clock by
//! parts of a window, to the next probe or by a year; step it back a little
//! or ten minutes; tick; every override; reset and seed the relative rule's
//! baseline) go to the real breaker on a `ManualClock` and to the model.
//! After every step the admission result (and every admission of a burst),
//! the state, mode, generation, backoff level, breach, probe and success
//! counts, trip count, next-probe time, open time, flapping flag, shadow
//! rejections, rejections by reason, the last window's counts and
//! threshold, the totals, the threshold in force, the baseline and the ramp
//! agree; after every tick and override, so do the transitions the listener
//! received. A failure shrinks to a minimal sequence.
//!
//! `PROPTEST_CASES` sets the number of sequences (default 2,000).

use crate::config;
use crate::model::breaker as model;
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tailguard::clock::ManualClock;
use tailguard::{Breaker, CancelPolicy, Permit, Reason, RelativeLatency, State};

const MS: u64 = 1_000_000;

const SEC: u64 = 1_000_000_000;

#[derive(Debug, Clone, Copy)]
enum Latency {
    /// Half the absolute threshold.
    Fast,
    /// The absolute threshold exactly.
    AtThreshold,
    /// Twice the absolute threshold.
    Slow,
    Max,
    /// The threshold windows are judged by now, exactly ...
    AtLimit,
    /// ... and one nanosecond above it.
    AboveLimit,
    /// The upper edge of the bucket this many below the absolute
    /// threshold's, or one nanosecond above that edge.
    Edge(u8, bool),
}

#[derive(Debug, Clone)]
enum Op {
    Allow,
    Record(usize, bool, Latency),
    RecordByClock(usize, bool),
    Drop(usize),
    Leak(usize),
    /// Advance by this many hundredths of a window.
    Advance(u64),
    AdvanceYear,
    Rewind(u64),
    RewindTenMinutes,
    Tick,
    ForceOpen,
    ForceClosed,
    Disable,
    MetricsOnly,
    Reset,
    TripNow,
    /// `calls` calls, each admitted and recorded at once: latencies spread
    /// over `spread + 1` buckets from `below` buckets under the absolute
    /// threshold's, alternately at a bucket's edge and one nanosecond
    /// above it; every fifth one failed if `failing`.
    Burst {
        calls: u16,
        below: u8,
        spread: u8,
        failing: bool,
    },
    /// `count` windows of traffic: in each, `calls` calls as a burst's
    /// (none failed), then the clock a window on and a tick (compared
    /// after each).
    Windows {
        count: u8,
        calls: u16,
        below: u8,
        spread: u8,
    },
    /// The clock on to the next probe's time, if OPEN.
    AdvanceToProbe,
    ResetBaseline,
    /// Seeds the baseline at the absolute threshold `>> shift`, `+ plus`
    /// nanoseconds (zero is refused).
    SeedBaseline(u8, u64),
}

/// The operations, weighted. Grouped, the frequent ones first: proptest
/// forks its random number generator (ChaCha, most of this test's time in
/// a debug build) for every arm of a union before the one it picks, so a
/// flat list of twenty arms would cost half as much again.
fn op() -> impl Strategy<Value = Op> {
    let latency = prop_oneof![
        6 => Just(Latency::Fast),
        4 => Just(Latency::Slow),
        3 => (0u8..40, any::<bool>()).prop_map(|(b, above)| Latency::Edge(b, above)),
        1 => Just(Latency::AtThreshold),
        1 => Just(Latency::Max),
        1 => Just(Latency::AtLimit),
        1 => Just(Latency::AboveLimit),
    ];
    let permits_and_clock = prop_oneof![
        3 => (any::<usize>(), any::<bool>()).prop_map(|(i, ok)| Op::RecordByClock(i, ok)),
        2 => any::<usize>().prop_map(Op::Drop),
        1 => any::<usize>().prop_map(Op::Leak),
        1 => Just(Op::AdvanceYear),
        1 => (1u64..100).prop_map(Op::Rewind),
        1 => Just(Op::RewindTenMinutes),
    ];
    let traffic = prop_oneof![
        2 => (1u16..200, 0u8..48, 0u8..4, prop::bool::weighted(0.2))
            .prop_map(|(calls, below, spread, failing)| Op::Burst { calls, below, spread, failing }),
        2 => (1u8..5, 1u16..400, 0u8..48, 0u8..4)
            .prop_map(|(count, calls, below, spread)| Op::Windows { count, calls, below, spread }),
        2 => Just(Op::AdvanceToProbe),
    ];
    let overrides = prop_oneof![
        1 => Just(Op::ForceOpen),
        1 => Just(Op::ForceClosed),
        1 => Just(Op::Disable),
        1 => Just(Op::MetricsOnly),
        2 => Just(Op::Reset),
        2 => Just(Op::TripNow),
        1 => Just(Op::ResetBaseline),
        1 => (0u8..40, prop::sample::select(vec![0u64, 1, 7])).prop_map(|(shift, plus)| Op::SeedBaseline(shift, plus)),
    ];
    prop_oneof![
        12 => Just(Op::Allow),
        10 => (any::<usize>(), prop::bool::weighted(0.7), latency).prop_map(|(i, ok, l)| Op::Record(i, ok, l)),
        8 => prop::sample::select(vec![1u64, 10, 25, 50, 100, 150, 300]).prop_map(Op::Advance),
        6 => Just(Op::Tick),
        6 => traffic,
        9 => permits_and_clock,
        10 => overrides,
    ]
}

/// The relative rule's settings: the ceiling in milliseconds (at most the
/// builder's 60 s), the floor as a divisor of it (0: no floor), the initial
/// baseline as one (none: a cold start).
#[derive(Debug, Clone)]
struct RelativeSettings {
    multiplier: f64,
    ceiling_ms: u64,
    floor_div: u64,
    max_rise_per_hour: f64,
    warmup: u32,
    initial_div: Option<u64>,
    /// Whether `latency_threshold` is given too (else it is the ceiling);
    /// given, it is at most the ceiling (the builder refuses one above it:
    /// `the_builder_refuses_what_the_model_leaves_out`).
    explicit_threshold: bool,
}

fn relative_settings() -> impl Strategy<Value = RelativeSettings> {
    (
        prop::sample::select(vec![1.1, 1.5, 2.0, 3.0, 10.0]),
        prop::sample::select(vec![1u64, 5, 50, 1000, 60_000]),
        prop::sample::select(vec![0u64, 1, 4, 64]),
        prop::sample::select(vec![1.0, 1.5, 1000.0]),
        1u32..4,
        prop::option::of(prop::sample::select(vec![2u64, 16, 256, 4096])),
        any::<bool>(),
    )
        .prop_map(|r| RelativeSettings {
            multiplier: r.0,
            ceiling_ms: r.1,
            floor_div: r.2,
            max_rise_per_hour: r.3,
            warmup: r.4,
            initial_div: r.5,
            explicit_threshold: r.6,
        })
}

/// A configuration small enough that trips, re-opens and closes happen
/// within a few dozen operations.
#[derive(Debug, Clone)]
struct Settings {
    window_ms: u64,
    threshold_ms: u64,
    quantile: f64,
    trip_windows: u32,
    min_calls: u64,
    error_rate: f64,
    error_windows: u64,
    failure_count: Option<(u32, u64)>,
    base_ms: u64,
    max_factor: u64,
    probes: u32,
    successes: u32,
    lease_factor: u64,
    cancel_is_failure: bool,
    flap_cycles: u32,
    flap_s: u64,
    origin_ms: u64,
    relative: Option<RelativeSettings>,
    /// The recovery ramp's length in hundredths of a window.
    ramp_hundredths: Option<u64>,
    /// A calm case: the overrides that force a mode (`force_open`,
    /// `force_closed`, `disable`) are left out, so that long runs of judged
    /// windows happen (the relative rule learns from a few hundred healthy
    /// calls in a row, a ramp needs a trip and a recovery).
    calm: bool,
}

fn settings() -> impl Strategy<Value = Settings> {
    (
        (
            prop::sample::select(vec![1u64, 10, 100, 1000]),
            prop::sample::select(vec![1u64, 5, 50]),
            prop::sample::select(vec![0.5, 0.9, 0.99]),
            1u32..4,
            0u64..6,
            prop::sample::select(vec![0.0, 0.3, 0.5, 1.0]),
            1u64..4,
            prop::option::of((1u32..4, 1u64..4)),
        ),
        (
            prop::sample::select(vec![1u64, 10, 1000]),
            prop::sample::select(vec![1u64, 4, 30]),
            1u32..4,
            1u32..4,
            prop::sample::select(vec![1u64, 2, 20]),
            any::<bool>(),
            1u32..3,
            prop::sample::select(vec![1u64, 60]),
            prop::sample::select(vec![0u64, 7, 1500]),
        ),
        prop::option::weighted(0.5, relative_settings()),
        prop::option::weighted(0.4, prop::sample::select(vec![1u64, 50, 100, 300, 1000])),
        prop::bool::weighted(0.3),
    )
        .prop_map(|(a, b, relative, ramp_hundredths, calm)| Settings {
            window_ms: a.0,
            // An explicit threshold is at most the relative rule's ceiling.
            threshold_ms: match &relative {
                Some(r) if r.explicit_threshold => a.1.min(r.ceiling_ms),
                _ => a.1,
            },
            quantile: a.2,
            trip_windows: a.3,
            min_calls: a.4,
            error_rate: a.5,
            error_windows: a.6,
            failure_count: a.7,
            base_ms: b.0,
            max_factor: b.1,
            probes: b.2,
            successes: b.3,
            lease_factor: b.4,
            cancel_is_failure: b.5,
            flap_cycles: b.6,
            flap_s: b.7,
            origin_ms: b.8,
            relative,
            ramp_hundredths,
            calm,
        })
}

type Seen = Arc<Mutex<Vec<(State, Reason, u32)>>>;

/// The builder's default `latency_threshold`.
const DEFAULT_THRESHOLD_NS: u64 = 50 * MS;

fn build(s: &Settings, clock: &ManualClock) -> (Breaker, model::Breaker, Seen) {
    let ms = Duration::from_millis;
    let seen: Seen = Arc::default();
    let sink = Arc::clone(&seen);
    let explicit = s.relative.as_ref().map_or(true, |r| r.explicit_threshold);
    // The absolute threshold, which the lease must not be under: the one
    // given, or the relative rule's ceiling.
    let absolute_ns = match &s.relative {
        Some(r) if !r.explicit_threshold => r.ceiling_ms * MS,
        _ => s.threshold_ms * MS,
    };
    let relative = s.relative.as_ref().map(|r| {
        let ceiling_ns = r.ceiling_ms * MS;
        model::Relative {
            multiplier: r.multiplier,
            floor_ns: ceiling_ns.checked_div(r.floor_div).unwrap_or(0), // 0: no floor
            ceiling_ns,
            max_rise_per_hour: r.max_rise_per_hour,
            warmup: r.warmup,
            initial_baseline_ns: r.initial_div.map(|d| ceiling_ns / d),
        }
    });
    let ramp_ns = s.ramp_hundredths.map_or(0, |h| s.window_ms * MS * h / 100);
    let mut b = Breaker::builder()
        .clock(clock.clone())
        .ticker(false)
        .window(ms(s.window_ms))
        .quantile(s.quantile)
        .trip_windows(s.trip_windows)
        .min_calls(s.min_calls)
        .error_rate(s.error_rate)
        .error_window(ms(s.window_ms * s.error_windows))
        .base_backoff(ms(s.base_ms))
        .max_backoff(ms(s.base_ms * s.max_factor))
        .half_open_probes(s.probes)
        .success_to_close(s.successes)
        .probe_lease(Duration::from_nanos(absolute_ns * s.lease_factor))
        .on_cancel(if s.cancel_is_failure {
            CancelPolicy::Failure
        } else {
            CancelPolicy::Cancelled
        })
        .flapping(s.flap_cycles, Duration::from_secs(s.flap_s))
        .on_transition(move |t| sink.lock().unwrap().push((t.to, t.reason, t.generation)));
    if explicit {
        b = b.latency_threshold(ms(s.threshold_ms));
    }
    if let Some((n, w)) = s.failure_count {
        b = b.failure_count(n, ms(s.window_ms * w));
    }
    if let Some(r) = relative {
        let mut rule = RelativeLatency::new()
            .multiplier(r.multiplier)
            .floor(Duration::from_nanos(r.floor_ns))
            .ceiling(Duration::from_nanos(r.ceiling_ns))
            .max_rise_per_hour(r.max_rise_per_hour)
            .warmup(r.warmup);
        if let Some(ns) = r.initial_baseline_ns {
            rule = rule.initial_baseline(Duration::from_nanos(ns));
        }
        b = b.relative_latency(rule);
    }
    if ramp_ns > 0 {
        b = b.recovery_ramp(Duration::from_nanos(ramp_ns));
    }
    let breaker = b.build().unwrap();
    let config = model::Config {
        threshold_ns: if explicit {
            s.threshold_ms * MS
        } else {
            DEFAULT_THRESHOLD_NS
        },
        threshold_explicit: explicit,
        window_ns: s.window_ms * MS,
        quantile_ppb: (s.quantile * 1e9).round() as u64,
        trip_windows: s.trip_windows as u8,
        min_calls: s.min_calls,
        error_ppb: (s.error_rate * 1e9).round() as u64,
        error_windows: s.error_windows as usize,
        failure_count: s.failure_count.map(|(n, w)| (u64::from(n), w as usize)),
        base_ns: s.base_ms * MS,
        max_ns: s.base_ms * s.max_factor * MS,
        probes: s.probes as u8,
        successes: s.successes as u8,
        lease_ns: absolute_ns * s.lease_factor,
        cancel_is_failure: s.cancel_is_failure,
        flap_cycles: s.flap_cycles as usize,
        flap_ns: s.flap_s * SEC,
        relative,
        ramp_ns,
    };
    let m = model::Breaker::new(config, clock.now().as_nanos() as u64);
    (breaker, m, seen)
}

fn raw(clock: &ManualClock) -> u64 {
    clock.now().as_nanos() as u64
}

/// One admission by both, compared: the permits if both admitted.
fn admit<'a>(
    b: &'a Breaker,
    m: &mut model::Breaker,
    r: u64,
    step: usize,
) -> Result<Option<(Permit<'a>, model::Permit)>, TestCaseError> {
    match (b.allow(), m.allow(r)) {
        (Ok(p), Ok(mp)) => {
            prop_assert_eq!(p.is_probe(), matches!(mp, model::Permit::Probe { .. }), "step {}", step);
            Ok(Some((p, mp)))
        }
        (Err(e), Err((reason, retry))) => {
            prop_assert_eq!(e.reason(), reason, "step {}", step);
            prop_assert_eq!(e.retry_after(), retry.map(Duration::from_nanos), "step {}", step);
            Ok(None)
        }
        (got, want) => Err(TestCaseError::fail(format!(
            "step {step}: allow gave {:?}, the model {want:?}",
            got.map(|p| p.is_probe())
        ))),
    }
}

/// A burst of `calls` calls at the reading `r`, each admitted and recorded
/// at once by both (every admission compared): latencies spread over
/// `spread + 1` buckets from `below` buckets under the absolute
/// threshold's, alternately at a bucket's edge and one nanosecond above it;
/// every fifth one failed if `failing`.
fn burst(
    b: &Breaker,
    m: &mut model::Breaker,
    r: u64,
    step: usize,
    (calls, below, spread, failing): (u16, u8, u8, bool),
) -> Result<(), TestCaseError> {
    let from = model::bucket(m.absolute_threshold()).saturating_sub(usize::from(below));
    let width = u64::from(spread) + 1;
    for i in 0..u64::from(calls) {
        let Some((p, mp)) = admit(b, m, r, step)? else {
            continue;
        };
        let edge = model::edge(from + (i % width) as usize);
        let ns = edge.saturating_add(i / width % 2);
        let ok = !(failing && i % 5 == 4);
        p.record_latency(Duration::from_nanos(ns), ok);
        m.finish(mp, ns, ok, r);
    }
    Ok(())
}

/// After a step (`op`, the `step`-th), at the clock reading `r`: the
/// breaker's snapshot agrees with the model; if the step delivers events,
/// so do the transitions the listener received.
fn agree(
    b: &Breaker,
    m: &model::Breaker,
    seen: &Seen,
    r: u64,
    step: usize,
    op: &Op,
    delivers: bool,
) -> Result<(), TestCaseError> {
    let snap = b.snapshot();
    let gen30 = (m.generation % (1 << 30)) as u32;
    prop_assert_eq!(
        (snap.state, snap.mode, snap.generation, snap.backoff_level),
        (m.state, m.mode, gen30, m.level),
        "step {}: {:?}",
        step,
        op
    );
    prop_assert_eq!(
        (snap.consecutive_breaches, snap.probes_in_flight, snap.probe_successes),
        (m.breaches, m.probes, m.successes),
        "step {}: {:?}",
        step,
        op
    );
    prop_assert_eq!(
        (snap.trip_count, snap.shadow_rejections, snap.flapping),
        (m.trip_count, m.shadow_rejections, m.flapping),
        "step {}: {:?}",
        step,
        op
    );
    let j = snap.rejections;
    prop_assert_eq!(
        [j.open, j.probes_busy, j.forced, j.ramping],
        m.rejected,
        "step {}: rejections",
        step
    );
    prop_assert_eq!(
        (snap.latency_threshold, snap.latency_baseline, snap.window.threshold),
        (
            Duration::from_nanos(m.latency_threshold()),
            m.latency_baseline().map(Duration::from_nanos),
            Duration::from_nanos(m.last.threshold)
        ),
        "step {}: thresholds and baseline",
        step
    );
    prop_assert_eq!(b.latency_baseline(), snap.latency_baseline, "step {}", step);
    prop_assert_eq!(
        snap.ramp.map(|p| (p.admitted, p.remaining)),
        m.ramp(r),
        "step {}: ramp",
        step
    );
    let open = m.open_times(r);
    prop_assert_eq!(
        (snap.next_probe_in, snap.open_for),
        (open.map(|o| o.0), open.map(|o| o.1)),
        "step {}",
        step
    );
    prop_assert_eq!(snap.uptime, Duration::from_nanos(m.now(r)), "step {}", step);
    let w = snap.window;
    prop_assert_eq!(
        (
            w.calls,
            w.errors,
            w.slow,
            w.cancelled,
            w.stale,
            u64::from(w.windows),
            w.closed_at
        ),
        (
            m.last.calls,
            m.last.errors,
            m.last.slow,
            m.last.cancelled,
            m.last.stale,
            m.last.windows,
            Duration::from_nanos(m.last.closed_at)
        ),
        "step {}: last window",
        step
    );
    let t = snap.totals;
    prop_assert_eq!(
        (t.calls, t.errors, t.slow, t.cancelled, t.stale),
        (
            m.totals.calls,
            m.totals.errors,
            m.totals.slow,
            m.totals.cancelled,
            m.totals.stale
        ),
        "step {}: totals",
        step
    );
    if delivers && snap.events_lost == 0 {
        let want: Vec<_> = m
            .transitions
            .iter()
            .map(|&(s, r, g)| (s, r, (g % (1 << 30)) as u32))
            .collect();
        prop_assert_eq!(&*seen.lock().unwrap(), &want, "step {}: events", step);
    }
    Ok(())
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn the_breaker_behaves_as_its_model(s in settings(), ops in prop::collection::vec(op(), 1..150)) {
        let clock = ManualClock::new();
        clock.advance(Duration::from_millis(s.origin_ms));
        let (b, mut m, seen) = build(&s, &clock);
        let absolute = m.absolute_threshold();
        prop_assert_eq!(b.snapshot().limits.latency_threshold, Duration::from_nanos(absolute));
        let threshold = Duration::from_nanos(absolute);
        let window = s.window_ms * MS;
        let mut permits: Vec<(Permit<'_>, model::Permit)> = Vec::new();
        for (step, op) in ops.iter().enumerate() {
            if s.calm && matches!(op, Op::ForceOpen | Op::ForceClosed | Op::Disable) {
                continue;
            }
            let r = raw(&clock);
            let mut pick = |i: usize| (!permits.is_empty()).then(|| permits.swap_remove(i % permits.len()));
            match op {
                Op::Allow => {
                    if let Some(both) = admit(&b, &mut m, r, step)? {
                        permits.push(both);
                    }
                }
                Op::Record(i, ok, latency) => {
                    if let Some((p, mp)) = pick(*i) {
                        let d = match latency {
                            Latency::Fast => threshold / 2,
                            Latency::AtThreshold => threshold,
                            Latency::Slow => threshold * 2,
                            Latency::Max => Duration::MAX,
                            Latency::AtLimit => Duration::from_nanos(m.latency_threshold()),
                            Latency::AboveLimit => Duration::from_nanos(m.latency_threshold() + 1),
                            Latency::Edge(below, above) => {
                                let edge = model::edge(model::bucket(absolute).saturating_sub(usize::from(*below)));
                                Duration::from_nanos(edge.saturating_add(u64::from(*above)))
                            }
                        };
                        p.record_latency(d, *ok);
                        m.finish(mp, u64::try_from(d.as_nanos()).unwrap_or(u64::MAX), *ok, r);
                    }
                }
                Op::RecordByClock(i, ok) => {
                    if let Some((p, mp)) = pick(*i) {
                        p.record(*ok);
                        let start = match mp {
                            model::Permit::Normal { start, .. } | model::Permit::Probe { start, .. } => start,
                            model::Permit::Disabled => r,
                        };
                        m.finish(mp, r.saturating_sub(start), *ok, r);
                    }
                }
                Op::Drop(i) => {
                    if let Some((p, mp)) = pick(*i) {
                        drop(p);
                        m.cancel(mp, r);
                    }
                }
                Op::Leak(i) => {
                    if let Some((p, _)) = pick(*i) {
                        std::mem::forget(p);
                    }
                }
                Op::Advance(hundredths) => clock.advance(Duration::from_nanos(window * hundredths / 100)),
                Op::AdvanceYear => clock.advance(Duration::from_secs(365 * 86_400)),
                Op::Rewind(hundredths) => clock.rewind(Duration::from_nanos(window * hundredths / 100)),
                Op::RewindTenMinutes => clock.rewind(Duration::from_secs(600)),
                Op::Tick => {
                    b.tick();
                    m.tick(r);
                }
                Op::ForceOpen => {
                    b.force_open();
                    m.force_open(r);
                }
                Op::ForceClosed => {
                    b.force_closed();
                    m.force_closed(r);
                }
                Op::Disable => {
                    b.disable();
                    m.disable(r);
                }
                Op::MetricsOnly => {
                    b.metrics_only();
                    m.metrics_only(r);
                }
                Op::Reset => {
                    b.reset();
                    m.reset(r);
                }
                Op::TripNow => {
                    b.trip_now();
                    m.trip_now(r);
                }
                Op::Burst { calls, below, spread, failing } => {
                    burst(&b, &mut m, r, step, (*calls, *below, *spread, *failing))?;
                }
                Op::Windows { count, calls, below, spread } => {
                    for _ in 0..*count {
                        burst(&b, &mut m, raw(&clock), step, (*calls, *below, *spread, false))?;
                        clock.advance(Duration::from_nanos(window));
                        b.tick();
                        m.tick(raw(&clock));
                        agree(&b, &m, &seen, raw(&clock), step, op, true)?;
                    }
                }
                Op::AdvanceToProbe => {
                    if let Some(d) = b.snapshot().next_probe_in {
                        clock.advance(d);
                    }
                }
                Op::ResetBaseline => {
                    b.reset_baseline();
                    m.reset_baseline();
                }
                Op::SeedBaseline(shift, plus) => {
                    let ns = absolute.checked_shr(u32::from(*shift)).unwrap_or(0) + plus;
                    let got = b.seed_baseline(Duration::from_nanos(ns));
                    let want = m.seed_baseline(ns);
                    prop_assert_eq!(got.is_ok(), want.is_ok(), "step {}: seed_baseline({}ns): {:?}", step, ns, got);
                }
            }
            let delivers = matches!(
                op,
                Op::Tick | Op::Windows { .. } | Op::ForceOpen | Op::ForceClosed | Op::Disable | Op::MetricsOnly | Op::Reset | Op::TripNow
            );
            agree(&b, &m, &seen, raw(&clock), step, op, delivers)?;
        }
        for (p, _) in permits {
            std::mem::forget(p);
        }
    }
}

/// The settings the generator keeps clear of, because the builder refuses
/// them: a relative rule's ceiling above 60 s, and an explicit
/// `latency_threshold` above the ceiling (one at the ceiling, or a 60 s
/// ceiling, is accepted).
#[test]
fn the_builder_refuses_what_the_model_leaves_out() {
    let rule = |ceiling: Duration| RelativeLatency::new().ceiling(ceiling);
    let ceiling = Duration::from_secs(60);
    let build = |b: tailguard::BreakerBuilder| b.ticker(false).build();
    assert!(build(Breaker::builder().relative_latency(rule(ceiling))).is_ok());
    let err = build(Breaker::builder().relative_latency(rule(ceiling + Duration::from_nanos(1)))).unwrap_err();
    assert_eq!(
        (err.field(), err.kind()),
        ("relative_latency", tailguard::ConfigErrorKind::TooLarge)
    );
    let ceiling = Duration::from_millis(5);
    assert!(build(
        Breaker::builder()
            .latency_threshold(ceiling)
            .relative_latency(rule(ceiling))
    )
    .is_ok());
    let err = build(
        Breaker::builder()
            .latency_threshold(ceiling + Duration::from_nanos(1))
            .relative_latency(rule(ceiling)),
    )
    .unwrap_err();
    assert_eq!(
        (err.field(), err.kind()),
        ("latency_threshold", tailguard::ConfigErrorKind::Inconsistent)
    );
}

/// The failure cases proptest saved for this property (the `cc` lines of
/// `breaker.proptest-regressions`, beside this file) are the ones it loads
/// and re-runs before any new case, with the configuration the property
/// runs with. Proptest finds that file from the property's source file; a
/// `main.rs` next to it sends proptest to `../proptest-regressions/` instead,
/// and the saved cases are never run again.
///
/// Regression (issue 17's hostile review: the tests filed by subject).
#[test]
fn the_saved_failure_cases_are_the_ones_proptest_replays() {
    let saved = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/properties/breaker.proptest-regressions"
    ))
    .unwrap();
    let saved = saved.lines().filter(|l| l.starts_with("cc ")).count();
    assert!(saved > 0);
    let persistence = config().failure_persistence.expect("file persistence");
    let loaded = persistence.load_persisted_failures2(Some(file!()));
    assert_eq!(
        loaded.len(),
        saved,
        "the property would replay {} of the {saved} saved failure cases",
        loaded.len()
    );
}
