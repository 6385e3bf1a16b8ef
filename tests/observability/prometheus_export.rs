//! Prometheus export: the encoded text, parsed back with a real text-format parser, matches every snapshot.

use crate::support::{MS, SEC};
use std::collections::BTreeMap;
use std::time::Duration;
use tailguard::clock::ManualClock;
use tailguard::dlq::{DeadLetterQueue, Priority};
use tailguard::prometheus::{encode_text, BreakerCollector, CONTENT_TYPE};
use tailguard::{Breaker, ConsumerSnapshot, LatencyQuantiles, Mode, Registry, State};

#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    Counter,
    Gauge,
}

/// A series: metric name and its labels, sorted.
type Key = (String, Vec<(String, String)>);

/// A sample's type and value; NaN equals NaN here (an empty window's
/// quantiles are NaN).
#[derive(Debug, Clone, Copy)]
struct Sample(Kind, f64);

impl PartialEq for Sample {
    fn eq(&self, other: &Self) -> bool {
        self.0 == other.0 && (self.1 == other.1 || (self.1.is_nan() && other.1.is_nan()))
    }
}

fn key(metric: &str, labels: &[(&str, &str)]) -> Key {
    let mut labels: Vec<(String, String)> = labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    labels.sort();
    (metric.to_string(), labels)
}

/// What the exposition should hold for these consumers, derived from the
/// snapshots alone.
fn expected(rows: &[ConsumerSnapshot]) -> BTreeMap<Key, Sample> {
    let mut out = BTreeMap::new();
    for r in rows {
        let c = &*r.name;
        let core = r.core.map(|n| n.to_string());
        let s = &r.snapshot;
        let mut put = |metric: &str, extra: &[(&str, &str)], kind: Kind, v: f64| {
            let mut labels = vec![("consumer", c)];
            if let Some(core) = &core {
                labels.push(("core", core));
            }
            labels.extend_from_slice(extra);
            assert!(
                out.insert(key(metric, &labels), Sample(kind, v)).is_none(),
                "duplicate {metric}"
            );
        };
        put("breaker_state", &[], Kind::Gauge, f64::from(s.state.as_metric()));
        for (mode, label) in [
            (Mode::Normal, "normal"),
            (Mode::ForcedOpen, "forced_open"),
            (Mode::ForcedClosed, "forced_closed"),
            (Mode::Disabled, "disabled"),
            (Mode::MetricsOnly, "metrics_only"),
        ] {
            put(
                "breaker_mode",
                &[("mode", label)],
                Kind::Gauge,
                f64::from(u8::from(s.mode == mode)),
            );
        }
        put("breaker_trips_total", &[], Kind::Counter, s.trip_count as f64);
        let open = s.open_for.map_or(0.0, |d| d.as_secs_f64());
        put("breaker_open_duration_seconds", &[], Kind::Gauge, open);
        put(
            "breaker_open_seconds_total",
            &[],
            Kind::Counter,
            s.open_time_total.as_secs_f64(),
        );
        // The cumulative histogram: a bucket per edge, +Inf, sum and count.
        let h = &r.latency_histogram;
        for (le, n) in h.buckets() {
            let le = format!("{:?}", le.as_secs_f64());
            put(
                "breaker_call_duration_seconds_bucket",
                &[("le", &le)],
                Kind::Counter,
                n as f64,
            );
        }
        let inf = format!("{:?}", f64::INFINITY);
        put(
            "breaker_call_duration_seconds_bucket",
            &[("le", &inf)],
            Kind::Counter,
            h.count() as f64,
        );
        put(
            "breaker_call_duration_seconds_sum",
            &[],
            Kind::Counter,
            h.sum().as_secs_f64(),
        );
        put(
            "breaker_call_duration_seconds_count",
            &[],
            Kind::Counter,
            h.count() as f64,
        );
        put("breaker_flapping", &[], Kind::Gauge, f64::from(u8::from(s.flapping)));
        put("breaker_calls_total", &[], Kind::Counter, s.totals.calls as f64);
        put("breaker_errors_total", &[], Kind::Counter, s.totals.errors as f64);
        put("breaker_slow_calls_total", &[], Kind::Counter, s.totals.slow as f64);
        put("breaker_cancelled_total", &[], Kind::Counter, s.totals.cancelled as f64);
        put("breaker_stale_calls_total", &[], Kind::Counter, s.totals.stale as f64);
        put("breaker_events_lost_total", &[], Kind::Counter, s.events_lost as f64);
        put(
            "breaker_listener_panics_total",
            &[],
            Kind::Counter,
            s.listener_panics as f64,
        );
        put(
            "breaker_shadow_rejections_total",
            &[],
            Kind::Counter,
            s.shadow_rejections as f64,
        );
        let j = s.rejections;
        for (reason, v) in [
            ("open", j.open),
            ("probes_busy", j.probes_busy),
            ("forced", j.forced),
            ("ramping", j.ramping),
        ] {
            put("breaker_rejected_total", &[("reason", reason)], Kind::Counter, v as f64);
        }
        let q = s.window.latency;
        for (label, pick) in [
            ("0.5", (|q| q.p50) as fn(&LatencyQuantiles) -> Duration),
            ("0.9", |q| q.p90),
            ("0.99", |q| q.p99),
            ("0.999", |q| q.p999),
        ] {
            let v = q.as_ref().map_or(f64::NAN, |q| pick(q).as_secs_f64());
            put("breaker_latency_seconds", &[("quantile", label)], Kind::Gauge, v);
        }
        let l = &s.limits;
        put("breaker_window_seconds", &[], Kind::Gauge, l.window.as_secs_f64());
        put(
            "breaker_latency_threshold_seconds",
            &[],
            Kind::Gauge,
            s.window.threshold.as_secs_f64(),
        );
        if let Some(b) = s.latency_baseline {
            put("breaker_latency_baseline_seconds", &[], Kind::Gauge, b.as_secs_f64());
        }
        if l.recovery_ramp.is_some() {
            let admitted = s.ramp.map_or(1.0, |r| r.admitted);
            put("breaker_ramp_admitted_ratio", &[], Kind::Gauge, admitted);
        }
        put("breaker_slow_ratio_limit", &[], Kind::Gauge, l.slow_fraction);
        put("breaker_trip_windows", &[], Kind::Gauge, f64::from(l.trip_windows));
        put("breaker_min_calls", &[], Kind::Gauge, l.min_calls as f64);
        put("breaker_error_ratio_limit", &[], Kind::Gauge, l.error_rate);
        put(
            "breaker_error_window_seconds",
            &[],
            Kind::Gauge,
            l.error_window.as_secs_f64(),
        );
        if let Some(depth) = r.fallback_depth {
            put("breaker_fallback_depth", &[], Kind::Gauge, depth as f64);
        }
        if let Some(cap) = r.fallback_capacity {
            put("breaker_fallback_capacity", &[], Kind::Gauge, cap as f64);
        }
        if let Some(stats) = r.fallback_stats {
            for (class, label) in [
                (Priority::Idle, "idle"),
                (Priority::Routine, "routine"),
                (Priority::Critical, "critical"),
            ] {
                let c = stats.class(class);
                let class = [("class", label)];
                put("breaker_fallback_class_depth", &class, Kind::Gauge, c.depth as f64);
                put("breaker_fallback_queued_total", &class, Kind::Counter, c.queued as f64);
                put("breaker_fallback_popped_total", &class, Kind::Counter, c.popped as f64);
                put(
                    "breaker_fallback_displaced_total",
                    &class,
                    Kind::Counter,
                    c.displaced as f64,
                );
                put(
                    "breaker_fallback_handed_back_total",
                    &class,
                    Kind::Counter,
                    c.handed_back as f64,
                );
            }
        }
    }
    out
}

/// Parses `text` with `prometheus_parse` into the same shape.
fn parsed(text: &str) -> BTreeMap<Key, Sample> {
    let scrape = prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_string()))).unwrap();
    let mut out = BTreeMap::new();
    for s in scrape.samples {
        let labels: Vec<(&str, &str)> = s.labels.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let (kind, v) = match s.value {
            prometheus_parse::Value::Counter(v) => (Kind::Counter, v),
            prometheus_parse::Value::Gauge(v) => (Kind::Gauge, v),
            // A histogram's buckets: one series per edge, as counters.
            prometheus_parse::Value::Histogram(buckets) => {
                for b in buckets {
                    let le = format!("{:?}", b.less_than);
                    let mut labels = labels.clone();
                    labels.push(("le", &le));
                    let bucket = format!("{}_bucket", s.metric);
                    assert!(
                        out.insert(key(&bucket, &labels), Sample(Kind::Counter, b.count))
                            .is_none(),
                        "duplicate bucket {bucket} {le}"
                    );
                }
                continue;
            }
            // Its sum and count (the parser leaves them untyped).
            prometheus_parse::Value::Untyped(v)
                if s.metric.starts_with("breaker_call_duration_seconds_")
                    || s.metric.starts_with("breaker_emit_seconds_") =>
            {
                (Kind::Counter, v)
            }
            other => panic!("{}: unexpected value type {other:?}", s.metric),
        };
        assert!(
            out.insert(key(&s.metric, &labels), Sample(kind, v)).is_none(),
            "duplicate series {}",
            s.metric
        );
    }
    for name in scrape.docs.keys() {
        assert!(name.starts_with("breaker_"), "help for {name}");
    }
    out
}

/// Fills `registry` with four consumers that exercise every series:
/// `pricing` tripped on latency and open for 2.5 s with a dead-letter queue
/// holding 5 items, `compliance` healthy with one stale verdict, `ledger`
/// flapping with more transitions queued than its listener's queue holds,
/// `search` idle under metrics-only with a listener that panics. Returns what
/// keeps them alive.
fn scenario(registry: &Registry) -> (Vec<ManualClock>, DeadLetterQueue<u32>) {
    // pricing: 10% of calls over the 50 ms threshold (the P99 rule allows
    // 1%), two breaching windows trip it.
    let pricing_clock = ManualClock::new();
    let pricing = registry
        .get_or_create("pricing", || {
            Breaker::builder()
                .clock(pricing_clock.clone())
                .ticker(false)
                .window(SEC)
                .latency_threshold(50 * MS)
                .trip_windows(2)
                .min_calls(10)
                .base_backoff(30 * SEC)
                .max_backoff(60 * SEC)
        })
        .unwrap();
    for window in 0..2 {
        for i in 0..200u32 {
            let latency = if i % 10 == 0 { 80 * MS } else { (2 + i % 7) * MS };
            pricing.allow().unwrap().record_latency(latency, i % 13 != 0);
        }
        for _ in 0..3 {
            drop(pricing.allow().unwrap()); // cancelled
        }
        pricing_clock.advance(SEC);
        pricing.tick();
        let expect = if window == 0 { State::Closed } else { State::Open };
        assert_eq!(pricing.state(), expect, "after window {window}");
    }
    pricing_clock.advance(2500 * MS);
    // Its queue: 5 Routine and 11 Idle fill it; one more Idle is refused;
    // a Critical displaces the oldest Idle; three are taken out.
    let dlq = DeadLetterQueue::with_capacity(16).unwrap();
    for i in 0..5 {
        assert!(dlq.push(i, Priority::Routine).is_ok());
    }
    for i in 0..11 {
        assert!(dlq.push(100 + i, Priority::Idle).is_ok());
    }
    assert!(dlq.push(999, Priority::Idle).is_err());
    assert!(dlq.push(7, Priority::Critical).is_ok());
    for _ in 0..3 {
        assert!(dlq.pop().is_some());
    }
    registry.attach_fallback("pricing", dlq.producer()).unwrap();

    // compliance: fast and healthy.
    let compliance_clock = ManualClock::new();
    let compliance = registry
        .get_or_create("compliance", || {
            Breaker::builder().clock(compliance_clock.clone()).ticker(false)
        })
        .unwrap();
    let before_reset = compliance.allow().unwrap();
    compliance.force_open();
    assert!(compliance.allow().is_err(), "forced open: rejected");
    compliance.reset();
    before_reset.record_latency(MS, true); // admitted two transitions ago: stale
    for i in 0..50u32 {
        compliance.allow().unwrap().record_latency((1 + i % 4) * MS, true);
    }
    compliance_clock.advance(SEC);
    compliance.tick();
    assert_eq!(compliance.snapshot().totals.stale, 1);

    // ledger: re-opens after each failed probe, more often than the limit.
    let ledger_clock = ManualClock::new();
    let ledger = registry
        .get_or_create("ledger", || {
            Breaker::builder()
                .clock(ledger_clock.clone())
                .ticker(false)
                .base_backoff(100 * MS)
                .max_backoff(100 * MS)
                .flapping(1, 60 * SEC)
                .on_transition(|_| {})
        })
        .unwrap();
    ledger.trip_now();
    // 40 cycles, 80 transitions on the hot path, queued for the next tick:
    // 16 more than the queue holds.
    for _ in 0..40 {
        ledger_clock.advance(100 * MS);
        ledger.allow().unwrap().record(false); // OPEN -> HALF_OPEN -> OPEN
    }
    ledger_clock.advance(40 * MS);
    assert_eq!(ledger.snapshot().events_lost, 16);
    for _ in 0..3 {
        assert!(ledger.allow().is_err(), "OPEN: rejected");
    }

    // search: idle, metrics-only, no window closed with calls.
    let search_clock = ManualClock::new();
    let search = registry
        .get_or_create("search", || {
            Breaker::builder()
                .clock(search_clock.clone())
                .ticker(false)
                .on_transition(|_| panic!("a listener bug (expected by this test)"))
        })
        .unwrap();
    search.metrics_only();
    assert_eq!(search.snapshot().listener_panics, 1);
    search_clock.advance(SEC);
    search.tick();

    // checkout: the relative rule (seeded at 2 ms: judged at about 4 ms,
    // under its 1 s ceiling) and a recovery ramp, a quarter through it,
    // turning calls away.
    let checkout_clock = ManualClock::new();
    let checkout = registry
        .get_or_create("checkout", || {
            Breaker::builder()
                .clock(checkout_clock.clone())
                .ticker(false)
                .relative_latency(tailguard::RelativeLatency::new().initial_baseline(2 * MS))
                .success_to_close(1)
                .recovery_ramp(4 * SEC)
        })
        .unwrap();
    checkout.trip_now();
    checkout_clock.advance(SEC);
    checkout.allow().unwrap().record_latency(MS, true); // the probe closes it
    checkout_clock.advance(SEC);
    let rejected = (0..100).filter(|_| checkout.allow().is_err()).count();
    assert!((70..=80).contains(&rejected), "{rejected}");
    assert_eq!(checkout.snapshot().rejections.ramping, rejected as u64);
    assert!(checkout.snapshot().latency_baseline.is_some());

    (
        vec![
            pricing_clock,
            compliance_clock,
            ledger_clock,
            search_clock,
            checkout_clock,
        ],
        dlq,
    )
}

#[test]
fn every_series_matches_the_snapshots() {
    let registry = Registry::new();
    let _keep = scenario(&registry);
    let text = encode_text(&registry);
    // Manual clocks and no traffic: the snapshots read after encoding are
    // the ones the encoder read.
    let rows = registry.consumers();

    // The scenario is not trivial.
    let by_name = |n: &str| rows.iter().find(|r| &*r.name == n).unwrap();
    let pricing = by_name("pricing");
    let p = &pricing.snapshot;
    assert_eq!(p.state, State::Open);
    assert_eq!(p.trip_count, 1);
    assert_eq!(p.open_for, Some(2500 * MS));
    assert_eq!((p.totals.calls, p.totals.slow, p.totals.cancelled), (400, 40, 6));
    assert_eq!(p.totals.errors, 2 * 16);
    let q = p.window.latency.expect("pricing's last window had calls");
    assert!(q.p50 < 50 * MS && q.p99 > 50 * MS, "{q:?}");
    assert_eq!(
        (pricing.fallback_depth, pricing.fallback_capacity),
        (Some(13), Some(16))
    );
    let stats = pricing.fallback_stats.expect("attached");
    assert_eq!((stats.idle.handed_back, stats.idle.displaced), (1, 1));
    assert_eq!(stats.idle.popped + stats.routine.popped + stats.critical.popped, 3);
    assert_eq!(p.limits.trip_windows, 2);
    assert_eq!(p.limits.min_calls, 10);
    let ledger = &by_name("ledger").snapshot;
    assert!(
        ledger.flapping && ledger.state == State::Open && ledger.trip_count >= 3,
        "{ledger:?}"
    );
    assert_eq!(by_name("search").snapshot.mode, Mode::MetricsOnly);
    assert_eq!(by_name("search").snapshot.window.latency, None);
    assert_eq!(by_name("compliance").snapshot.totals.calls, 50);

    let want = expected(&rows);
    let got = parsed(&text);
    for (k, v) in &want {
        assert_eq!(got.get(k), Some(v), "series {k:?} in\n{text}");
    }
    for k in got.keys() {
        assert!(want.contains_key(k), "unexpected series {k:?} in\n{text}");
    }
    let rejected =
        |consumer, reason| got[&key("breaker_rejected_total", &[("consumer", consumer), ("reason", reason)])].1;
    assert_eq!(
        (rejected("ledger", "open"), rejected("compliance", "forced")),
        (3.0, 1.0)
    );
    // 5 consumers × (22 series + 4 quantiles + 7 limits and threshold + 56
    // of the histogram: 52 fixed edges, the 50 ms threshold's, +Inf, sum,
    // count), + checkout's baseline and ramp, + 2 + 5 × 3 for the queue.
    // Ledger and search closed no window with calls: NaN.
    assert_eq!(by_name("ledger").snapshot.window.latency, None);
    assert_eq!(got.len(), 5 * (22 + 4 + 7 + 56) + 2 + 2 + 5 * 3);
    let nan = key(
        "breaker_latency_seconds",
        &[("consumer", "search"), ("quantile", "0.99")],
    );
    assert!(got[&nan].1.is_nan());
}

#[test]
fn names_and_types_are_exactly_the_documented_ones() {
    let registry = Registry::new();
    let _keep = scenario(&registry);
    let text = encode_text(&registry);
    let types: BTreeMap<&str, &str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .map(|l| l.split_once(' ').unwrap())
        .collect();
    let want: BTreeMap<&str, &str> = [
        ("breaker_state", "gauge"),
        ("breaker_mode", "gauge"),
        ("breaker_trips_total", "counter"),
        ("breaker_open_duration_seconds", "gauge"),
        ("breaker_open_seconds_total", "counter"),
        ("breaker_flapping", "gauge"),
        ("breaker_calls_total", "counter"),
        ("breaker_errors_total", "counter"),
        ("breaker_slow_calls_total", "counter"),
        ("breaker_cancelled_total", "counter"),
        ("breaker_stale_calls_total", "counter"),
        ("breaker_events_lost_total", "counter"),
        ("breaker_listener_panics_total", "counter"),
        ("breaker_shadow_rejections_total", "counter"),
        ("breaker_rejected_total", "counter"),
        ("breaker_latency_seconds", "gauge"),
        ("breaker_call_duration_seconds", "histogram"),
        ("breaker_window_seconds", "gauge"),
        ("breaker_latency_threshold_seconds", "gauge"),
        ("breaker_latency_baseline_seconds", "gauge"),
        ("breaker_ramp_admitted_ratio", "gauge"),
        ("breaker_slow_ratio_limit", "gauge"),
        ("breaker_trip_windows", "gauge"),
        ("breaker_min_calls", "gauge"),
        ("breaker_error_ratio_limit", "gauge"),
        ("breaker_error_window_seconds", "gauge"),
        ("breaker_fallback_depth", "gauge"),
        ("breaker_fallback_capacity", "gauge"),
        ("breaker_fallback_class_depth", "gauge"),
        ("breaker_fallback_queued_total", "counter"),
        ("breaker_fallback_popped_total", "counter"),
        ("breaker_fallback_displaced_total", "counter"),
        ("breaker_fallback_handed_back_total", "counter"),
    ]
    .into_iter()
    .collect();
    assert_eq!(types, want);
    assert!(!text.contains("_total_total"));
    assert!(!text.contains("# EOF"), "Prometheus text format 0.0.4, not OpenMetrics");
    assert!(CONTENT_TYPE.starts_with("text/plain; version=0.0.4"));
    // Every sample line's metric has its TYPE line.
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let name = line.split(['{', ' ']).next().unwrap();
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|suffix| name.strip_suffix(suffix))
            .filter(|base| types.get(base) == Some(&"histogram"))
            .unwrap_or(name);
        assert!(types.contains_key(family), "{line}");
    }
}

#[test]
fn an_empty_registry_exports_nothing() {
    assert_eq!(encode_text(&Registry::new()), "");
}

#[test]
fn families_without_series_are_left_out() {
    let registry = Registry::new();
    let clock = ManualClock::new();
    registry
        .get_or_create("quiet", || Breaker::builder().clock(clock.clone()).ticker(false))
        .unwrap();
    let text = encode_text(&registry);
    assert!(text.contains("breaker_state{consumer=\"quiet\"} 0\n"));
    assert!(
        text.contains("breaker_latency_seconds{consumer=\"quiet\",quantile=\"0.99\"} NaN\n"),
        "no window with calls yet: {text}"
    );
    assert!(!text.contains("breaker_fallback_"), "no queue attached");
    assert!(text.contains("breaker_open_duration_seconds{consumer=\"quiet\"} 0"));
}

#[test]
fn the_collector_follows_the_registry_after_registration() {
    let breakers = Registry::new();
    let mut metrics = prometheus_client::registry::Registry::default();
    metrics.register_collector(Box::new(BreakerCollector::new(breakers.clone())));
    let encode = || {
        let mut text = String::new();
        prometheus_client::encoding::prometheus_text::encode(&mut text, &metrics).unwrap();
        text
    };
    assert_eq!(encode(), "");
    let clock = ManualClock::new();
    let b = breakers
        .get_or_create("late", || Breaker::builder().clock(clock.clone()).ticker(false))
        .unwrap();
    assert!(encode().contains("breaker_state{consumer=\"late\"} 0\n"));
    b.force_open();
    assert!(encode().contains("breaker_state{consumer=\"late\"} 1\n"));
    assert!(encode().contains("breaker_mode{consumer=\"late\",mode=\"forced_open\"} 1\n"));
    breakers.remove("late");
    assert_eq!(encode(), "");
}

#[test]
fn open_duration_and_depth_are_read_at_scrape_time() {
    let registry = Registry::new();
    let clock = ManualClock::new();
    let b = registry
        .get_or_create("pricing", || {
            Breaker::builder()
                .clock(clock.clone())
                .ticker(false)
                .base_backoff(60 * SEC)
                .max_backoff(60 * SEC)
        })
        .unwrap();
    let dlq = DeadLetterQueue::with_capacity(4).unwrap();
    registry.attach_fallback("pricing", dlq.producer()).unwrap();
    b.trip_now();
    clock.advance(1500 * MS);
    let _ = dlq.push(1u8, Priority::Idle);
    let text = encode_text(&registry);
    assert!(
        text.contains("breaker_open_duration_seconds{consumer=\"pricing\"} 1.5\n"),
        "{text}"
    );
    assert!(
        text.contains("breaker_fallback_depth{consumer=\"pricing\"} 1\n"),
        "{text}"
    );
    clock.advance(SEC);
    let _ = dlq.pop();
    let text = encode_text(&registry);
    assert!(
        text.contains("breaker_open_duration_seconds{consumer=\"pricing\"} 2.5\n"),
        "{text}"
    );
    assert!(
        text.contains("breaker_fallback_depth{consumer=\"pricing\"} 0\n"),
        "{text}"
    );
    assert!(
        text.contains("breaker_fallback_capacity{consumer=\"pricing\"} 4\n"),
        "{text}"
    );
}

#[test]
fn label_values_are_escaped() {
    let registry = Registry::new();
    registry
        .get_or_create("we\"ird\\name", || Breaker::builder().ticker(false))
        .unwrap();
    let text = encode_text(&registry);
    assert!(text.contains(r#"breaker_state{consumer="we\"ird\\name"} 0"#), "{text}");
}

#[test]
fn an_attached_emitter_exports_its_emit_times_outcomes_and_bulkhead() {
    use tailguard::emit::Emitter;
    let clock = ManualClock::new();
    let registry = Registry::new();
    let b = registry
        .get_or_create("pricing", || Breaker::builder().clock(clock.clone()).ticker(false))
        .unwrap();
    registry
        .get_or_create("search", || Breaker::builder().ticker(false))
        .unwrap();
    let e = Emitter::builder(b.clone(), DeadLetterQueue::with_capacity(1).unwrap())
        .bulkhead(2)
        .unwrap()
        .timeout(200 * MS)
        .unwrap()
        .build()
        .unwrap();
    registry.attach_emitter("pricing", &e).unwrap();
    // 3 µs, 3 ms and 300 ms (timed out) calls; then two rejected emits, the
    // second of which finds the queue full.
    for (ms_x1000, ok) in [(3u64, true), (3_000, true), (300_000, false)] {
        let _ = e.emit_blocking(1u8, Priority::Routine, |_, _| {
            clock.advance(Duration::from_micros(ms_x1000));
            if ok {
                Ok(())
            } else {
                Err(())
            }
        });
    }
    b.trip_now();
    let _ = e.emit_blocking(2u8, Priority::Routine, |_, _| Ok::<_, ()>(()));
    let _ = e.emit_blocking(3u8, Priority::Routine, |_, _| Ok::<_, ()>(()));
    // A call that panics while the queue is full: its trigger goes with the
    // unwinding, counted (no emit time: the emit never finished).
    b.reset();
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        e.emit_blocking(4u8, Priority::Routine, |_, _| -> Result<(), ()> {
            panic!("consumer bug")
        })
    }));
    assert!(panicked.is_err());
    b.trip_now();
    let text = encode_text(&registry);
    let line = |prefix: &str| -> f64 {
        let l = text
            .lines()
            .find(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("no {prefix} in\n{text}"));
        l.rsplit(' ').next().unwrap().parse().unwrap()
    };
    assert!(text.contains("# TYPE breaker_emit_seconds histogram\n"), "{text}");
    assert_eq!(line("breaker_emit_seconds_count{consumer=\"pricing\"}"), 5.0);
    assert!((line("breaker_emit_seconds_sum{consumer=\"pricing\"}") - 0.303_003).abs() < 1e-9);
    // Cumulative buckets: 3 µs under 2^12 ns, 3 ms under 2^22 ns, 300 ms
    // under 2^29 ns; the two rejections took no time (under 2^10 ns).
    let bucket = |le: &str| {
        line(&format!(
            "breaker_emit_seconds_bucket{{consumer=\"pricing\",le=\"{le}\"}}"
        ))
    };
    assert_eq!(bucket("1.024e-06"), 2.0);
    assert_eq!(bucket("2.048e-06"), 2.0);
    assert_eq!(bucket("4.096e-06"), 3.0);
    assert_eq!(bucket("0.004194304"), 4.0);
    assert_eq!(bucket("0.268435456"), 4.0);
    assert_eq!(bucket("0.536870912"), 5.0);
    assert_eq!(bucket("+Inf"), 5.0);
    assert_eq!(line("breaker_emits_delivered_total{consumer=\"pricing\"}"), 2.0);
    assert_eq!(
        line("breaker_emits_diverted_total{consumer=\"pricing\",reason=\"timed_out\"}"),
        1.0
    );
    assert_eq!(
        line("breaker_emits_diverted_total{consumer=\"pricing\",reason=\"open\"}"),
        0.0
    );
    assert_eq!(
        line("breaker_emits_handed_back_total{consumer=\"pricing\",reason=\"queue_full\"}"),
        2.0
    );
    assert_eq!(
        line("breaker_rejected_total{consumer=\"pricing\",reason=\"open\"}"),
        2.0
    );
    assert_eq!(line("breaker_emits_cancelled_total{consumer=\"pricing\"}"), 1.0);
    assert_eq!(line("breaker_emit_panic_drops_total{consumer=\"pricing\"}"), 1.0);
    assert_eq!(line("breaker_bulkhead_in_flight{bulkhead=\"pricing\"}"), 0.0);
    assert_eq!(line("breaker_bulkhead_max_in_flight{bulkhead=\"pricing\"}"), 2.0);
    assert_eq!(line("breaker_fallback_depth{consumer=\"pricing\"}"), 1.0);
    assert!(
        !text.contains("breaker_emit_seconds_count{consumer=\"search\"}"),
        "no emitter, no series"
    );
}

/// One bulkhead shared by two emitters is exported once: its in-flight
/// gauge under a `bulkhead` label naming the consumers that share it, and
/// each consumer's rejections its own share, so a sum over consumers
/// counts each refusal once.
#[test]
fn a_shared_bulkhead_is_exported_once_and_rejections_are_each_emitter_s_share() {
    use tailguard::emit::Emitter;
    use tailguard::Bulkhead;
    let registry = Registry::new();
    let shared = Bulkhead::new(1).unwrap();
    let emitter = |name: &str| {
        let b = registry
            .get_or_create(name, || Breaker::builder().ticker(false))
            .unwrap();
        let e = Emitter::builder(b, DeadLetterQueue::with_capacity(8).unwrap())
            .shared_bulkhead(shared.clone())
            .build()
            .unwrap();
        registry.attach_emitter(name, &e).unwrap();
        e
    };
    let (pricing, dispatch) = (emitter("pricing"), emitter("dispatch"));
    // pricing holds the one slot while each emitter is refused once more.
    let _ = pricing.emit_blocking(1u8, Priority::Routine, |_, _| {
        let _ = pricing.emit_blocking(2u8, Priority::Routine, |_, _| Ok::<_, ()>(()));
        let _ = dispatch.emit_blocking(3u8, Priority::Routine, |_, _| Ok::<_, ()>(()));
        let _ = dispatch.emit_blocking(4u8, Priority::Routine, |_, _| Ok::<_, ()>(()));
        let text = encode_text(&registry);
        let in_flight: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("breaker_bulkhead_in_flight"))
            .collect();
        assert_eq!(
            in_flight,
            ["breaker_bulkhead_in_flight{bulkhead=\"dispatch+pricing\"} 1"],
            "{text}"
        );
        Ok::<_, ()>(())
    });
    assert_eq!(shared.rejections(), 3);
    let text = encode_text(&registry);
    let rejected: Vec<(String, f64)> = text
        .lines()
        .filter(|l| l.starts_with("breaker_bulkhead_rejected_total"))
        .map(|l| {
            let (series, v) = l.rsplit_once(' ').unwrap();
            (series.to_string(), v.parse().unwrap())
        })
        .collect();
    assert_eq!(
        rejected,
        [
            (
                "breaker_bulkhead_rejected_total{consumer=\"dispatch\"}".to_string(),
                2.0
            ),
            ("breaker_bulkhead_rejected_total{consumer=\"pricing\"}".to_string(), 1.0)
        ],
        "{text}"
    );
    assert_eq!(rejected.iter().map(|(_, v)| v).sum::<f64>(), shared.rejections() as f64);
}

/// Every counter in the exposition (every `_total`, every histogram
/// bucket and count) is monotonic between scrapes while emits, replays,
/// drains, window closes and scrapes race on other threads.
#[test]
fn every_exported_counter_is_monotonic_while_everything_races() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use tailguard::emit::Emitter;
    let registry = Registry::new();
    let b = registry
        .get_or_create("pricing", || {
            Breaker::builder()
                .ticker(false)
                .window(Duration::from_millis(1))
                .min_calls(5)
                .trip_windows(1)
                .base_backoff(Duration::from_micros(200))
                .max_backoff(Duration::from_millis(1))
        })
        .unwrap();
    let e: Emitter<u64> = Emitter::builder(b.clone(), DeadLetterQueue::with_capacity(32).unwrap())
        .bulkhead(1)
        .unwrap()
        .build()
        .unwrap();
    registry.attach_emitter("pricing", &e).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let mut workers = Vec::new();
    for t in 0..2u64 {
        let (e, stop) = (e.clone(), Arc::clone(&stop));
        workers.push(std::thread::spawn(move || {
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                i += 1;
                let _ = e.emit_blocking(
                    i,
                    Priority::Routine,
                    |n, _| if (n + t) % 5 == 0 { Err(()) } else { Ok(()) },
                );
                match i % 97 {
                    0 => drop(e.drain(8, |_, _| {})),
                    13 => drop(e.replay_blocking(4, |n, _| if n % 3 == 0 { Err(()) } else { Ok(()) })),
                    _ => {}
                }
            }
        }));
    }
    {
        let (b, stop) = (b.clone(), Arc::clone(&stop));
        workers.push(std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                b.tick();
                std::thread::yield_now();
            }
        }));
    }
    let counters = |text: &str| -> BTreeMap<String, f64> {
        text.lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| l.rsplit_once(' '))
            .filter(|(series, _)| {
                let name = series.split('{').next().unwrap();
                name.ends_with("_total") || name.ends_with("_bucket") || name.ends_with("_count")
            })
            .map(|(series, v)| (series.to_string(), v.parse().unwrap()))
            .collect()
    };
    let mut last = counters(&encode_text(&registry));
    let mut backwards = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(3);
    let mut scrapes = 0;
    while std::time::Instant::now() < deadline {
        let now = counters(&encode_text(&registry));
        for (series, v) in &now {
            if last.get(series).is_some_and(|l| v < l) {
                backwards.push(format!("{series}: {} -> {v}", last[series]));
            }
        }
        last = now;
        scrapes += 1;
    }
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.join().unwrap();
    }
    assert!(scrapes > 50, "{scrapes} scrapes");
    assert!(
        backwards.is_empty(),
        "{} went backwards: {:?}",
        backwards.len(),
        &backwards[..backwards.len().min(10)]
    );
    let s = e.stats();
    assert!(
        s.delivered > 0 && s.diverted() > 0 && s.replayed > 0,
        "everything raced: {s:?}"
    );
}

/// The `bulkhead` label tells bulkheads apart whatever the consumers are
/// named: `a` and `b` sharing one, and a consumer named `a+b` with its own
/// (from a hostile review of issue 15).
#[test]
fn distinct_bulkheads_get_distinct_label_sets() {
    use tailguard::emit::Emitter;
    use tailguard::Bulkhead;
    let r = Registry::new();
    let shared = Bulkhead::new(4).unwrap();
    for name in ["a", "b", "a+b"] {
        let b = r.get_or_create(name, || Breaker::builder().ticker(false)).unwrap();
        let builder = Emitter::<u8>::builder(b, DeadLetterQueue::with_capacity(8).unwrap());
        let builder = if name == "a+b" {
            builder.bulkhead(2).unwrap()
        } else {
            builder.shared_bulkhead(shared.clone())
        };
        r.attach_emitter(name, &builder.build().unwrap()).unwrap();
    }
    let text = tailguard::prometheus::encode_text(&r);
    let series: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("breaker_bulkhead_max_in_flight{"))
        .collect();
    assert_eq!(series.len(), 2, "two bulkheads: {series:?}");
    let labels: std::collections::BTreeSet<&str> = series.iter().map(|l| l.rsplit_once(' ').unwrap().0).collect();
    assert_eq!(
        labels.len(),
        2,
        "each bulkhead under a label set of its own: {series:?}"
    );
}

/// The emitter's families come in the exposition in the order they always
/// did, which is the module docs' table's: the emit times, the outcomes,
/// replay's, then the bulkhead's gauges and last its refusals, before the
/// queue's classes. (The text is otherwise unchanged by where the counters
/// are defined; a diff of two expositions, or a golden file, sees a moved
/// family.)
///
/// Regression (issue 17's hostile review: the emitter's counter table).
#[test]
fn the_emitter_families_are_written_in_their_order() {
    use tailguard::emit::Emitter;
    let registry = Registry::new();
    let b = registry
        .get_or_create("pricing", || Breaker::builder().ticker(false))
        .unwrap();
    let e = Emitter::builder(b, DeadLetterQueue::with_capacity(8).unwrap())
        .bulkhead(1)
        .unwrap()
        .build()
        .unwrap();
    registry.attach_emitter("pricing", &e).unwrap();
    let _ = e.emit_blocking(1u8, Priority::Routine, |_, _| Ok::<_, ()>(()));
    let text = encode_text(&registry);
    let families: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split(' ').next())
        .skip_while(|f| *f != "breaker_emit_seconds")
        .take_while(|f| !f.starts_with("breaker_fallback_class"))
        .collect();
    assert_eq!(
        families,
        [
            "breaker_emit_seconds",
            "breaker_emits_delivered_total",
            "breaker_emits_overran_total",
            "breaker_emits_diverted_total",
            "breaker_emits_handed_back_total",
            "breaker_emits_cancelled_total",
            "breaker_emit_panic_drops_total",
            "breaker_replayed_total",
            "breaker_replay_handed_back_total",
            "breaker_bulkhead_in_flight",
            "breaker_bulkhead_max_in_flight",
            "breaker_bulkhead_rejected_total",
        ],
        "{text}"
    );
}

/// A per-core breaker (`Registry::get_or_create(("pricing", 3), ..)`) is
/// exported under its consumer's name with a `core` label on every one of
/// its series (histogram buckets, labelled families, queue classes and an
/// attached per-core emitter's counters included), beside a shared breaker
/// of another consumer without one; `sum by (consumer)` over the cores is
/// the consumer whole. Issue 20.
#[test]
fn per_core_breakers_carry_a_core_label_on_every_series() {
    use tailguard::emit::LocalEmitter;
    let registry = Registry::new();
    let clock = ManualClock::new();
    let mut queues = Vec::new();
    for core in [0u32, 1] {
        let b = registry
            .get_or_create(("pricing", core), || {
                Breaker::builder()
                    .clock(clock.clone())
                    .ticker(false)
                    .local_handles(1)
                    .latency_threshold(50 * MS)
            })
            .unwrap();
        let h = b.local_handle().unwrap();
        for i in 0..(10 + core) {
            h.allow().unwrap().record_latency((1 + i) * MS, true);
        }
        let q = DeadLetterQueue::<u32>::with_capacity(4).unwrap();
        assert!(q.push(core, Priority::Routine).is_ok());
        registry.attach_fallback(("pricing", core), q.producer()).unwrap();
        queues.push(q);
    }
    let ledger = registry
        .get_or_create("ledger", || Breaker::builder().clock(clock.clone()).ticker(false))
        .unwrap();
    ledger.allow().unwrap().record_latency(MS, true);
    clock.advance(SEC);
    registry.for_each(|_, b| {
        b.tick();
    });
    let text = encode_text(&registry);
    let rows = registry.consumers();
    assert_eq!(
        rows.iter().map(|r| (&*r.name, r.core)).collect::<Vec<_>>(),
        [("ledger", None), ("pricing", Some(0)), ("pricing", Some(1))]
    );
    let want = expected(&rows);
    let got = parsed(&text);
    for (k, v) in &want {
        assert_eq!(got.get(k), Some(v), "series {k:?} in\n{text}");
    }
    for k in got.keys() {
        assert!(want.contains_key(k), "unexpected series {k:?} in\n{text}");
    }
    // Every pricing series has a core; no ledger series has one.
    for (name, labels) in got.keys() {
        let consumer = labels.iter().find(|(k, _)| k == "consumer").map(|(_, v)| v.as_str());
        let core = labels.iter().any(|(k, _)| k == "core");
        assert_eq!(core, consumer == Some("pricing"), "{name} {labels:?}");
    }
    let calls = |core: &str| got[&key("breaker_calls_total", &[("consumer", "pricing"), ("core", core)])].1;
    assert_eq!((calls("0"), calls("1")), (10.0, 11.0));
    assert!(
        text.contains("breaker_state{consumer=\"pricing\",core=\"1\"} 0\n"),
        "{text}"
    );
    assert!(text.contains("breaker_mode{consumer=\"pricing\",core=\"0\",mode=\"normal\"} 1\n"));

    // An attached per-core emitter's series carry the core too.
    let b = registry.get(("pricing", 1)).unwrap();
    let e = LocalEmitter::builder(b, DeadLetterQueue::with_capacity(4).unwrap())
        .build_local()
        .unwrap();
    registry.attach_local_emitter(("pricing", 1), &e).unwrap();
    let _ = e.emit_blocking(5u32, Priority::Routine, |_, _| Ok::<_, ()>(()));
    let text = encode_text(&registry);
    assert!(
        text.contains("breaker_emits_delivered_total{consumer=\"pricing\",core=\"1\"} 1\n"),
        "{text}"
    );
    assert!(text.contains("breaker_emit_seconds_count{consumer=\"pricing\",core=\"1\"} 1\n"));
    drop(queues);
}
