//! Property test: the breaker against its reference model (`model/breaker.rs`).
//!
//! Random configurations and random sequences of operations (allow; record
//! ok / failed / slow / at the threshold / `Duration::MAX` / by the clock;
//! drop a permit; leak one; advance the clock by parts of a window or a
//! year; step it back a little or ten minutes; tick; every override) go to
//! the real breaker on a `ManualClock` and to the model. After every step the
//! admission result, the state, mode, generation, backoff level, breach,
//! probe and success counts, trip count, next-probe time, open time,
//! flapping flag, shadow rejections, the last window's counts and the
//! totals agree; after every tick and override, so do the transitions the
//! listener received. A failure shrinks to a minimal sequence.
//!
//! `PROPTEST_CASES` sets the number of sequences (default 2,000).

use crate::config;
use crate::model::breaker as model;
use proptest::prelude::*;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tailguard::clock::ManualClock;
use tailguard::{Breaker, CancelPolicy, Permit, Reason, State};

const MS: u64 = 1_000_000;

const SEC: u64 = 1_000_000_000;

#[derive(Debug, Clone, Copy)]
enum Latency {
    Fast,
    AtThreshold,
    Slow,
    Max,
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
}

fn op() -> impl Strategy<Value = Op> {
    let latency = prop_oneof![
        6 => Just(Latency::Fast),
        1 => Just(Latency::AtThreshold),
        4 => Just(Latency::Slow),
        1 => Just(Latency::Max),
    ];
    prop_oneof![
        12 => Just(Op::Allow),
        10 => (any::<usize>(), prop::bool::weighted(0.7), latency).prop_map(|(i, ok, l)| Op::Record(i, ok, l)),
        3 => (any::<usize>(), any::<bool>()).prop_map(|(i, ok)| Op::RecordByClock(i, ok)),
        2 => any::<usize>().prop_map(Op::Drop),
        1 => any::<usize>().prop_map(Op::Leak),
        8 => prop::sample::select(vec![1u64, 10, 25, 50, 100, 150, 300]).prop_map(Op::Advance),
        1 => Just(Op::AdvanceYear),
        1 => (1u64..100).prop_map(Op::Rewind),
        1 => Just(Op::RewindTenMinutes),
        6 => Just(Op::Tick),
        1 => Just(Op::ForceOpen),
        1 => Just(Op::ForceClosed),
        1 => Just(Op::Disable),
        1 => Just(Op::MetricsOnly),
        2 => Just(Op::Reset),
        2 => Just(Op::TripNow),
    ]
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
    )
        .prop_map(|(a, b)| Settings {
            window_ms: a.0,
            threshold_ms: a.1,
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
        })
}

type Seen = Arc<Mutex<Vec<(State, Reason, u32)>>>;

fn build(s: &Settings, clock: &ManualClock) -> (Breaker, model::Breaker, Seen) {
    let ms = Duration::from_millis;
    let seen: Seen = Arc::default();
    let sink = Arc::clone(&seen);
    let mut b = Breaker::builder()
        .clock(clock.clone())
        .ticker(false)
        .window(ms(s.window_ms))
        .latency_threshold(ms(s.threshold_ms))
        .quantile(s.quantile)
        .trip_windows(s.trip_windows)
        .min_calls(s.min_calls)
        .error_rate(s.error_rate)
        .error_window(ms(s.window_ms * s.error_windows))
        .base_backoff(ms(s.base_ms))
        .max_backoff(ms(s.base_ms * s.max_factor))
        .half_open_probes(s.probes)
        .success_to_close(s.successes)
        .probe_lease(ms(s.threshold_ms * s.lease_factor))
        .on_cancel(if s.cancel_is_failure {
            CancelPolicy::Failure
        } else {
            CancelPolicy::Cancelled
        })
        .flapping(s.flap_cycles, Duration::from_secs(s.flap_s))
        .on_transition(move |t| sink.lock().unwrap().push((t.to, t.reason, t.generation)));
    if let Some((n, w)) = s.failure_count {
        b = b.failure_count(n, ms(s.window_ms * w));
    }
    let breaker = b.build().unwrap();
    let config = model::Config {
        threshold_ns: s.threshold_ms * MS,
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
        lease_ns: s.threshold_ms * s.lease_factor * MS,
        cancel_is_failure: s.cancel_is_failure,
        flap_cycles: s.flap_cycles as usize,
        flap_ns: s.flap_s * SEC,
    };
    let m = model::Breaker::new(config, clock.now().as_nanos() as u64);
    (breaker, m, seen)
}

fn raw(clock: &ManualClock) -> u64 {
    clock.now().as_nanos() as u64
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn the_breaker_behaves_as_its_model(s in settings(), ops in prop::collection::vec(op(), 1..150)) {
        let clock = ManualClock::new();
        clock.advance(Duration::from_millis(s.origin_ms));
        let (b, mut m, seen) = build(&s, &clock);
        let threshold = Duration::from_millis(s.threshold_ms);
        let window = s.window_ms * MS;
        let mut permits: Vec<(Permit<'_>, model::Permit)> = Vec::new();
        for (step, op) in ops.iter().enumerate() {
            let r = raw(&clock);
            let mut pick = |i: usize| (!permits.is_empty()).then(|| permits.swap_remove(i % permits.len()));
            match op {
                Op::Allow => {
                    let got = b.allow();
                    let want = m.allow(r);
                    match (got, want) {
                        (Ok(p), Ok(mp)) => {
                            prop_assert_eq!(p.is_probe(), matches!(mp, model::Permit::Probe { .. }), "step {}", step);
                            permits.push((p, mp));
                        }
                        (Err(e), Err((reason, retry))) => {
                            prop_assert_eq!(e.reason(), reason, "step {}", step);
                            prop_assert_eq!(e.retry_after(), retry.map(Duration::from_nanos), "step {}", step);
                        }
                        (got, want) => prop_assert!(false, "step {}: allow gave {:?}, the model {:?}", step, got.map(|p| p.is_probe()), want),
                    }
                }
                Op::Record(i, ok, latency) => {
                    if let Some((p, mp)) = pick(*i) {
                        let d = match latency {
                            Latency::Fast => threshold / 2,
                            Latency::AtThreshold => threshold,
                            Latency::Slow => threshold * 2,
                            Latency::Max => Duration::MAX,
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
            }
            let r = raw(&clock);
            let snap = b.snapshot();
            let gen30 = (m.generation % (1 << 30)) as u32;
            prop_assert_eq!(
                (snap.state, snap.mode, snap.generation, snap.backoff_level),
                (m.state, m.mode, gen30, m.level),
                "step {}: {:?}", step, op
            );
            prop_assert_eq!(
                (snap.consecutive_breaches, snap.probes_in_flight, snap.probe_successes),
                (m.breaches, m.probes, m.successes),
                "step {}: {:?}", step, op
            );
            prop_assert_eq!(
                (snap.trip_count, snap.shadow_rejections, snap.flapping),
                (m.trip_count, m.shadow_rejections, m.flapping),
                "step {}: {:?}", step, op
            );
            let j = snap.rejections;
            prop_assert_eq!([j.open, j.probes_busy, j.forced], m.rejected, "step {}: rejections", step);
            let open = m.open_times(r);
            prop_assert_eq!((snap.next_probe_in, snap.open_for), (open.map(|o| o.0), open.map(|o| o.1)), "step {}", step);
            prop_assert_eq!(snap.uptime, Duration::from_nanos(m.now(r)), "step {}", step);
            let w = snap.window;
            prop_assert_eq!(
                (w.calls, w.errors, w.slow, w.cancelled, w.stale, u64::from(w.windows), w.closed_at),
                (m.last.calls, m.last.errors, m.last.slow, m.last.cancelled, m.last.stale, m.last.windows, Duration::from_nanos(m.last.closed_at)),
                "step {}: last window", step
            );
            let t = snap.totals;
            prop_assert_eq!(
                (t.calls, t.errors, t.slow, t.cancelled, t.stale),
                (m.totals.calls, m.totals.errors, m.totals.slow, m.totals.cancelled, m.totals.stale),
                "step {}: totals", step
            );
            let delivers = matches!(op, Op::Tick | Op::ForceOpen | Op::ForceClosed | Op::Disable | Op::MetricsOnly | Op::Reset | Op::TripNow);
            if delivers && snap.events_lost == 0 {
                let want: Vec<_> = m.transitions.iter().map(|&(s, r, g)| (s, r, (g % (1 << 30)) as u32)).collect();
                prop_assert_eq!(&*seen.lock().unwrap(), &want, "step {}: events", step);
            }
        }
        for (p, _) in permits {
            std::mem::forget(p);
        }
    }
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
