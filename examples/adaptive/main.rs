//! The adaptive comparison: the absolute latency rule against the relative
//! one, each as one configuration for every consumer, on the real async
//! emitter under tokio's paused clock.
//!
//! A router calls three consumers whose healthy P99s are 2 ms (quotes),
//! 40 ms (pricing) and 150 ms (settlement). Every breaker has the same
//! settings: either `latency_threshold(50 ms)` (the absolute rule) or
//! `relative_latency(RelativeLatency::new())` (the relative rule: twice the
//! consumer's own learned P99), every other setting at its default; every
//! emitter a bulkhead of 16 calls. Four scenarios (`scenario.rs` says how
//! each is staged):
//!
//! 1. quotes slows twentyfold, to a 40 ms P99, for 60 s: under 50 ms, but at
//!    1000 triggers a second more than its bulkhead can carry;
//! 2. the healthy consumers of the same run: which rule trips a consumer
//!    that is slow by nature;
//! 3. quotes slowing by 3% a minute for an hour, and by ×1.5 an hour: when
//!    each rule trips, beside the bound the docs state;
//! 4. quotes back from an outage able to carry half its traffic, its
//!    capacity growing back, without and with a recovery ramp.
//!
//! ```sh
//! cargo run --release --features tokio --example adaptive            # paused clock: seconds, deterministic
//! cargo run --release --features tokio --example adaptive -- --seed 7
//! cargo run --release --features tokio --example adaptive -- --json out.json --svg out.svg
//! ```
//!
//! The table goes to stdout; the figures as one JSON object to
//! `target/adaptive.json` and the picture (`docs/adaptive.svg` is one) to
//! `target/adaptive.svg`, unless `--json` and `--svg` say elsewhere.

mod scenario;

use plotters::prelude::*;
use scenario::{Outcome, Recovery, Report, Rule, ABSOLUTE_THRESHOLD, BULKHEAD, FAST_RAMP, K, MAX_RISE_PER_HOUR};
use std::fmt::Write as _;
use std::io::{IsTerminal, Write as _};
use tailguard::{Reason, State};

struct Args {
    seed: u64,
    json: String,
    svg: String,
}

fn args() -> Result<Args, String> {
    let mut a = Args {
        seed: 42,
        json: String::from("target/adaptive.json"),
        svg: String::from("target/adaptive.svg"),
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--seed" => {
                let v = it.next().ok_or("--seed needs a number")?;
                a.seed = v.parse().map_err(|_| format!("--seed: not a number: {v}"))?;
            }
            "--json" => a.json = it.next().ok_or("--json needs a path")?,
            "--svg" => a.svg = it.next().ok_or("--svg needs a path")?,
            "--help" | "-h" => return Err(String::from("usage: adaptive [--seed N] [--json PATH] [--svg PATH]")),
            other => return Err(format!("unknown argument {other} (try --help)")),
        }
    }
    Ok(a)
}

fn s(v: Option<f64>) -> String {
    v.map_or_else(|| String::from("never"), |v| format!("{v:.1} s"))
}

fn min(v: Option<f64>) -> String {
    v.map_or_else(|| String::from("never"), |v| format!("{v:.1}"))
}

fn ms(v: Option<f64>) -> String {
    v.map_or_else(|| String::from("-"), |v| format!("{v:.2}"))
}

fn reason(r: Option<Reason>) -> String {
    r.map_or_else(|| String::from("-"), |r| format!("{r:?}"))
}

/// Thousands separated by commas.
fn n(v: u64) -> String {
    let digits = v.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn ramp_label(r: Option<std::time::Duration>) -> String {
    r.map_or_else(|| String::from("no ramp"), |d| format!("ramp {} s", d.as_secs()))
}

fn table(r: &Report) -> String {
    let mut out = String::new();
    let f = &r.fleet_cfg;
    let _ = writeln!(
        out,
        "one configuration for every consumer: absolute = latency_threshold(50 ms); relative = relative_latency(RelativeLatency::new()) \
         (k = {K}, at most x{MAX_RISE_PER_HOUR}/h, no explicit latency_threshold); every other setting at its default; \
         bulkhead {BULKHEAD} per consumer; seed {}",
        r.seed
    );
    let _ = writeln!(
        out,
        "consumers (healthy P99, triggers/s): quotes 2 ms 1000/s, pricing 40 ms 100/s, settlement 150 ms 50/s; {} s healthy before t = 0",
        f.warmup.as_secs()
    );

    let _ = writeln!(
        out,
        "\n1. quotes x{} (P99 2 -> 40 ms) during [0, {}) s: at 1000/s it needs about 20 calls in flight, its bulkhead holds {BULKHEAD}",
        f.factor,
        f.degraded.as_secs()
    );
    let _ = writeln!(
        out,
        "{:<18} {:>7} {:>16} | {:>9} {:>8} {:>9} {:>9} {:>10} {:>9} {:>5} | {:>9} {:>9} {:>6}",
        "rule",
        "trip",
        "reason",
        "delivered",
        "P99 ms",
        "bulkhead",
        "open",
        "busy task-s",
        "in flight",
        "peak",
        "closed at",
        "replayed",
        "queued"
    );
    for d in r.degraded_rows() {
        let _ = writeln!(
            out,
            "{:<18} {:>7} {:>16} | {:>9} {:>8.1} {:>9} {:>9} {:>10.1} {:>9.1} {:>5} | {:>9} {:>9} {:>6}",
            d.rule.name(),
            s(d.trip),
            reason(d.reason),
            n(d.during.delivered),
            d.delivered_p99_ms,
            n(d.during.bulkhead),
            n(d.during.open),
            d.during.busy_s,
            d.mean_in_flight,
            d.peak_in_flight,
            d.closed_again
                .map_or_else(|| String::from("-"), |t| format!("{t:.1} s")),
            n(d.replayed),
            n(d.queued)
        );
    }
    let _ = writeln!(
        out,
        "(during the degradation, by arrival: delivered and their P99; diverted because the bulkhead was full or the breaker open; \
         the router's time in quotes' emits, and the calls in flight it means; the peak sampled each second)"
    );

    let _ = writeln!(
        out,
        "\n2. the consumers while healthy, over the run ([-{}, {}) s; quotes: before 0 and from its breaker's close after the degradation); \
         a trip of a healthy consumer is a false trip",
        f.warmup.as_secs(),
        f.length.as_secs()
    );
    let _ = writeln!(
        out,
        "{:<12} {:<18} {:>11} {:>8} {:>9} {:>8} {:>9} {:>9} {:>8} | {:>13} {:>12}",
        "consumer",
        "rule",
        "false trips",
        "re-opens",
        "open (s)",
        "sent",
        "diverted",
        "replayed",
        "queued",
        "threshold ms",
        "baseline ms"
    );
    for h in r.healthy_rows() {
        let _ = writeln!(
            out,
            "{:<12} {:<18} {:>11} {:>8} {:>9.1} {:>8} {:>9} {:>9} {:>8} | {:>13.2} {:>12}",
            h.consumer.name,
            h.rule.name(),
            h.false_trips,
            h.reopens,
            h.open_s,
            n(h.sent),
            n(h.diverted),
            n(h.replayed),
            n(h.queued),
            h.threshold_ms,
            ms(h.baseline_ms)
        );
    }
    let _ = writeln!(
        out,
        "(replayed, queued: over the whole run; threshold: what the window in progress is judged by at the end; \
         baseline: the relative rule's learned P99, to its bucket)"
    );

    let rc = &r.ramp_cfg;
    let _ = writeln!(
        out,
        "\n3. quotes alone at {}/s, slowing from t = 0 for {} min; the docs: a ramp by g an hour is caught after about ln k / ln(g / {MAX_RISE_PER_HOUR}) hours",
        rc.rate,
        rc.length.as_secs() / 60
    );
    let _ = writeln!(
        out,
        "{:<38} {:<18} {:>9} {:>15} {:>8} {:>12} {:>11} {:>6} {:>7} | {:>9} {:>10}",
        "ramp (P99 first -> last minute)",
        "rule",
        "trip min",
        "reason",
        "stated",
        "buckets",
        "P99/thr ms",
        "trips",
        "open %",
        "baseline",
        "threshold"
    );
    for row in r.ramp_rows() {
        let (first, last) = r.ramp_p99(row.per_hour);
        let _ = writeln!(
            out,
            "{:<38} {:<18} {:>9} {:>15} {:>8} {:>12} {:>11} {:>6} {:>7} | {:>9} {:>10.2}",
            format!("{}, {first:.2} -> {last:.2} ms", scenario::ramp_name(row.per_hour)),
            row.rule.name(),
            min(row.trip_min),
            reason(row.reason),
            min(row.stated_min),
            match (row.rule, row.early_min, row.rounded_min) {
                (Rule::Relative, Some(a), Some(b)) => format!("{a:.1} - {b:.1}"),
                (Rule::Relative, _, _) => String::from("never"),
                (Rule::Absolute, _, _) => String::from("-"),
            },
            match (row.p99_at_trip_ms, row.threshold_at_trip_ms) {
                (Some(p), Some(t)) => format!("{p:.2}/{t:.2}"),
                _ => String::from("-"),
            },
            row.trips,
            row.open_share_after
                .map_or_else(|| String::from("-"), |v| format!("{:.0}", v * 100.0)),
            ms(row.baseline_end_ms),
            row.threshold_end_ms
        );
    }
    let _ = writeln!(
        out,
        "(stated: for the relative rule ln k / ln(g / {MAX_RISE_PER_HOUR}), for the absolute one when the P99 reaches 50 ms (25 x 2 ms: \
         {:.1} min at 3%/min, as the docs say); buckets: the earliest and latest the sketch's buckets (x{:.4}) allow for the relative rule: \
         its baseline a bucket low (it follows the lower envelope of its observations) and the threshold at k x it, or both a bucket high; \
         P99/thr: quotes' P99 in the minute before the trip and the threshold then; \
         open %: of the time after the first trip; baseline, threshold: at the end; the P99s beside each ramp are of every call in the absolute run)",
        scenario::absolute_crossing_min(FAST_RAMP),
        scenario::BUCKET
    );

    let v = &r.recovery_cfg;
    let _ = writeln!(
        out,
        "\n4. quotes alone at {}/s: down (every call {} ms) during [0, {}) s, then back able to carry {:.0}% of its traffic, growing to {:.0}% over {} s; \
         a call beyond that waits {} ms",
        v.rate,
        scenario::SLOW.as_millis(),
        v.down.as_secs(),
        v.start_share * 100.0,
        v.end_share * 100.0,
        v.grow.as_secs(),
        scenario::SLOW.as_millis()
    );
    let _ = writeln!(
        out,
        "{:<30} {:>7} {:>11} {:>9} {:>13} {:>9} {:>15} {:>10} | {:>7} {:>9} {:>9} {:>9} {:>6}",
        "rule, recovery ramp",
        "trip",
        "first close",
        "re-trips",
        "over capacity",
        "ramping",
        "closed for good",
        "all from",
        "sent",
        "delivered",
        "diverted",
        "replayed",
        "queued"
    );
    for row in r.recovery_rows() {
        let _ = writeln!(
            out,
            "{:<30} {:>7} {:>11} {:>9} {:>13} {:>9} {:>15} {:>10} | {:>7} {:>9} {:>9} {:>9} {:>6}",
            format!("{}, {}", row.rule.name(), ramp_label(row.ramp)),
            s(row.trip),
            s(row.first_close),
            row.retrips,
            n(row.overloaded),
            n(row.ramping),
            s(row.closed_for_good),
            s(row.full_from),
            n(row.sent),
            n(row.delivered),
            n(row.diverted),
            n(row.replayed),
            n(row.queued)
        );
    }
    let _ = writeln!(
        out,
        "(over capacity: calls quotes answered beyond its capacity, 250 ms each; ramping: triggers the ramp turned away, queued and replayed; \
         all from: the breaker admits every call again; 250 ms is slow to both rules, which see the same calls here)"
    );

    let _ = writeln!(out, "\nwhat each rule caught and missed (from the figures above)");
    for line in verdicts(r) {
        let _ = writeln!(out, "* {line}");
    }
    out
}

/// What each rule caught and missed, in words, from the figures.
fn verdicts(r: &Report) -> Vec<String> {
    let degraded = r.degraded_rows();
    let healthy = r.healthy_rows();
    let ramps = r.ramp_rows();
    let recovery = r.recovery_rows();
    let mut out = Vec::new();
    for rule in Rule::BOTH {
        let d = degraded.iter().find(|d| d.rule == rule).unwrap();
        let mut caught = Vec::new();
        let mut missed = Vec::new();
        match d.trip {
            Some(t) => caught.push(format!("quotes x{} in {t:.1} s", r.fleet_cfg.factor)),
            None => missed.push(format!(
                "quotes x{} (its P99, {:.0} ms, is under 50 ms; the bulkhead turned {} triggers away, the router kept {:.1} calls in flight on it for {} s)",
                r.fleet_cfg.factor,
                d.delivered_p99_ms,
                n(d.during.bulkhead),
                d.mean_in_flight,
                r.fleet_cfg.degraded.as_secs()
            )),
        }
        for row in ramps.iter().filter(|x| x.rule == rule) {
            let name = scenario::ramp_name(row.per_hour);
            match row.trip_min {
                Some(t) => caught.push(format!(
                    "the {name} ramp at {t:.1} min (stated: about {}; {} trips after it, open {:.0}% of the rest: a probe is one call, most of them still under the threshold)",
                    min(row.stated_min),
                    row.trips,
                    row.open_share_after.unwrap_or(0.0) * 100.0
                )),
                None => missed.push(format!(
                    "the {name} ramp within the hour (P99 {:.1} ms at the end{})",
                    r.ramp_p99(row.per_hour).1,
                    match (rule, row.baseline_end_ms) {
                        (Rule::Relative, Some(b)) => format!(", followed by its baseline, {b:.2} ms"),
                        _ => String::new(),
                    }
                )),
            }
        }
        let false_trips: Vec<String> = healthy
            .iter()
            .filter(|h| h.rule == rule && h.false_trips > 0)
            .map(|h| {
                format!(
                    "{} ({} false trip{}, {} re-opens, {} of {} triggers diverted, {} never replayed)",
                    h.consumer.name,
                    h.false_trips,
                    if h.false_trips == 1 { "" } else { "s" },
                    h.reopens,
                    n(h.diverted),
                    n(h.sent),
                    n(h.queued)
                )
            })
            .collect();
        out.push(format!(
            "{}: caught {}; missed {}; false trips: {}",
            rule.name(),
            if caught.is_empty() {
                String::from("nothing")
            } else {
                caught.join(", ")
            },
            if missed.is_empty() {
                String::from("nothing")
            } else {
                missed.join(", ")
            },
            if false_trips.is_empty() {
                String::from("none")
            } else {
                false_trips.join(", ")
            }
        ));
    }
    for rule in Rule::BOTH {
        let rows: Vec<_> = recovery.iter().filter(|x| x.rule == rule).collect();
        if let [without, with] = rows[..] {
            out.push(format!(
                "recovery under the {} rule: without a ramp quotes was knocked over again {} times ({} calls beyond its capacity), \
                 every call admitted from {}; with a {} s ramp {} re-trips and {} calls beyond capacity, {} triggers held back by the ramp \
                 (queued, then replayed), every call admitted from {}",
                rule.name(),
                without.retrips,
                n(without.overloaded),
                s(without.full_from),
                with.ramp.map_or(0, |d| d.as_secs()),
                with.retrips,
                n(with.overloaded),
                n(with.ramping),
                s(with.full_from)
            ));
        }
    }
    out
}

fn num(v: f64) -> String {
    if v.is_finite() {
        format!("{v:.4}")
    } else {
        String::from("null")
    }
}

fn opt(v: Option<f64>) -> String {
    v.map_or_else(|| String::from("null"), num)
}

fn opt_reason(r: Option<Reason>) -> String {
    r.map_or_else(|| String::from("null"), |r| format!("\"{r:?}\""))
}

fn json(r: &Report) -> String {
    let degraded: Vec<String> = r
        .degraded_rows()
        .iter()
        .map(|d| {
            format!(
                concat!(
                    "{{\"rule\":\"{}\",\"trip_s\":{},\"reason\":{},\"sent\":{},\"delivered\":{},\"delivered_p99_ms\":{},",
                    "\"diverted_bulkhead\":{},\"diverted_open\":{},\"busy_task_s\":{},\"mean_in_flight\":{},\"peak_in_flight\":{},",
                    "\"closed_again_s\":{},\"replayed\":{},\"queued_at_end\":{}}}"
                ),
                d.rule.name(),
                opt(d.trip),
                opt_reason(d.reason),
                d.during.sent,
                d.during.delivered,
                num(d.delivered_p99_ms),
                d.during.bulkhead,
                d.during.open,
                num(d.during.busy_s),
                num(d.mean_in_flight),
                d.peak_in_flight,
                opt(d.closed_again),
                d.replayed,
                d.queued
            )
        })
        .collect();
    let healthy: Vec<String> = r
        .healthy_rows()
        .iter()
        .map(|h| {
            format!(
                concat!(
                    "{{\"consumer\":\"{}\",\"healthy_p99_ms\":{},\"rule\":\"{}\",\"false_trips\":{},\"reopens\":{},\"open_s\":{},",
                    "\"sent\":{},\"diverted\":{},\"opens\":{},\"replayed\":{},\"queued_at_end\":{},\"threshold_ms\":{},",
                    "\"baseline_ms\":{}}}"
                ),
                h.consumer.name,
                num(h.consumer.p99.as_secs_f64() * 1e3),
                h.rule.name(),
                h.false_trips,
                h.reopens,
                num(h.open_s),
                h.sent,
                h.diverted,
                h.opens,
                h.replayed,
                h.queued,
                num(h.threshold_ms),
                opt(h.baseline_ms)
            )
        })
        .collect();
    let ramps: Vec<String> = r
        .ramp_rows()
        .iter()
        .map(|x| {
            format!(
                concat!(
                    "{{\"ramp_per_hour\":{},\"rule\":\"{}\",\"trip_min\":{},\"reason\":{},\"stated_bound_min\":{},",
                    "\"early_bound_min\":{},\"rounded_bound_min\":{},\"p99_at_trip_ms\":{},\"threshold_at_trip_ms\":{},\"trips\":{},",
                    "\"open_share_after_trip\":{},\"p99_first_minute_ms\":{},\"p99_last_minute_ms\":{},\"baseline_end_ms\":{},\"threshold_end_ms\":{},",
                    "\"sent\":{},\"diverted\":{},\"handed_back\":{}}}"
                ),
                num(x.per_hour),
                x.rule.name(),
                opt(x.trip_min),
                opt_reason(x.reason),
                opt(x.stated_min),
                opt(x.early_min),
                opt(x.rounded_min),
                opt(x.p99_at_trip_ms),
                opt(x.threshold_at_trip_ms),
                x.trips,
                opt(x.open_share_after),
                num(r.ramp_p99(x.per_hour).0),
                num(r.ramp_p99(x.per_hour).1),
                opt(x.baseline_end_ms),
                num(x.threshold_end_ms),
                x.sent,
                x.diverted,
                x.handed_back
            )
        })
        .collect();
    let recovery: Vec<String> = r
        .recovery_rows()
        .iter()
        .map(|x| {
            format!(
                concat!(
                    "{{\"rule\":\"{}\",\"recovery_ramp_s\":{},\"trip_s\":{},\"first_close_s\":{},\"retrips\":{},",
                    "\"over_capacity\":{},\"ramping_rejections\":{},\"closed_for_good_s\":{},\"all_admitted_from_s\":{},",
                    "\"sent\":{},\"delivered\":{},\"diverted\":{},\"replayed\":{},\"queued_at_end\":{}}}"
                ),
                x.rule.name(),
                x.ramp.map_or_else(|| String::from("null"), |d| d.as_secs().to_string()),
                opt(x.trip),
                opt(x.first_close),
                x.retrips,
                x.overloaded,
                x.ramping,
                opt(x.closed_for_good),
                opt(x.full_from),
                x.sent,
                x.delivered,
                x.diverted,
                x.replayed,
                x.queued
            )
        })
        .collect();
    format!(
        concat!(
            "{{\"seed\":{},\"absolute_threshold_ms\":{},\"k\":{},\"max_rise_per_hour\":{},\"bulkhead\":{},\"events_lost\":{},",
            "\"degraded\":[{}],\"healthy\":[{}],\"ramps\":[{}],\"recovery\":[{}]}}\n"
        ),
        r.seed,
        ABSOLUTE_THRESHOLD.as_millis(),
        K,
        MAX_RISE_PER_HOUR,
        BULKHEAD,
        r.events_lost(),
        degraded.join(","),
        healthy.join(","),
        ramps.join(","),
        recovery.join(",")
    )
}

/// A breaker's state as the bands show it: CLOSED in a recovery ramp apart.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Band {
    Closed,
    Ramping,
    HalfOpen,
    Open,
}

impl Band {
    fn of(s: &scenario::Sample) -> Band {
        match s.state {
            State::Closed if s.ramping => Band::Ramping,
            State::Closed => Band::Closed,
            State::HalfOpen => Band::HalfOpen,
            State::Open => Band::Open,
        }
    }

    fn colour(self) -> RGBAColor {
        match self {
            Band::Closed => GREEN.mix(0.6),
            Band::Ramping => RGBColor(0, 170, 220).mix(0.6),
            Band::HalfOpen => RGBColor(255, 165, 0).mix(0.9),
            Band::Open => RED.mix(0.8),
        }
    }
}

/// Draws each row's states (sampled every `step` seconds) as a band, one
/// rectangle per run of the same state, its label inside at the left.
fn bands<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    caption: &str,
    (t0, t1): (f64, f64),
    rows: &[(String, Vec<(f64, Band)>)],
    step: f64,
) -> Result<(), Box<dyn std::error::Error>>
where
    DB::ErrorType: 'static,
{
    let mut chart = ChartBuilder::on(area)
        .margin_left(10)
        .margin_right(10)
        .y_label_area_size(50)
        .x_label_area_size(5)
        .caption(caption, ("sans-serif", 14))
        .build_cartesian_2d(t0..t1, 0.0..rows.len() as f64)?;
    for (i, (label, states)) in rows.iter().enumerate() {
        let y = (rows.len() - 1 - i) as f64;
        let mut runs: Vec<(f64, f64, Band)> = Vec::new();
        for &(t, s) in states.iter().filter(|(t, _)| (t0..t1).contains(t)) {
            match runs.last_mut() {
                Some(last) if last.2 == s => last.1 = (t + step).min(t1),
                _ => runs.push((t, (t + step).min(t1), s)),
            }
        }
        chart.draw_series(
            runs.into_iter()
                .map(|(a, b, s)| Rectangle::new([(a, y + 0.1), (b, y + 0.9)], s.colour().filled())),
        )?;
        chart.draw_series(std::iter::once(Text::new(
            label.clone(),
            (t0 + (t1 - t0) * 0.005, y + 0.65),
            ("sans-serif", 12),
        )))?;
    }
    Ok(())
}

fn svg(path: &str, r: &Report) -> Result<(), Box<dyn std::error::Error>> {
    if let Some(dir) = std::path::Path::new(path).parent() {
        if !dir.as_os_str().is_empty() {
            std::fs::create_dir_all(dir)?;
        }
    }
    let root = SVGBackend::new(path, (1000, 1180)).into_drawing_area();
    root.fill(&WHITE)?;
    let (fleet_area, rest) = root.split_vertically(400);
    let (ramp_area, recovery_area) = rest.split_vertically(380);
    let colours = [RED, BLUE];

    // 1 and 2: quotes' bulkhead, and every consumer's state, under each rule.
    let (top, bottom) = fleet_area.split_vertically(250);
    let f = &r.fleet_cfg;
    let (t0, t1) = (-(f.warmup.as_secs_f64()), f.length.as_secs_f64());
    let mut chart = ChartBuilder::on(&top)
        .caption(
            format!(
                "1. quotes x{} during [0, {}) s: its calls in flight (bulkhead {BULKHEAD}), sampled each second",
                f.factor,
                f.degraded.as_secs()
            ),
            ("sans-serif", 16),
        )
        .margin(10)
        .x_label_area_size(25)
        .y_label_area_size(50)
        .build_cartesian_2d(t0..t1, 0.0..(BULKHEAD as f64 + 2.0))?;
    chart
        .configure_mesh()
        .x_desc("seconds from t = 0")
        .y_desc("calls in flight")
        .draw()?;
    chart.draw_series(DashedLineSeries::new(
        vec![(t0, BULKHEAD as f64), (t1, BULKHEAD as f64)],
        6,
        4,
        BLACK.stroke_width(1),
    ))?;
    for (run, colour) in r.fleet.iter().zip(colours) {
        let q = &run.consumers[0];
        chart
            .draw_series(LineSeries::new(
                q.samples.iter().map(|s| (s.t, s.in_flight as f64)),
                colour.stroke_width(2),
            ))?
            .label(run.rule.name())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], colour.stroke_width(2)));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperRight)
        .draw()?;
    let mut rows: Vec<(String, Vec<(f64, Band)>)> = Vec::new();
    for i in 0..3 {
        for run in &r.fleet {
            let c = &run.consumers[i];
            rows.push((
                format!("{} {}", c.consumer.name, run.rule.name()),
                c.samples.iter().map(|s| (s.t, Band::of(s))).collect(),
            ));
        }
    }
    bands(
        &bottom,
        "2. each consumer's breaker, sampled each second: closed (green), half-open (orange), open (red)",
        (t0, t1),
        &rows,
        1.0,
    )?;

    // 3: the ramps: the delivered P99 per minute and each rule's threshold.
    let mut chart = ChartBuilder::on(&ramp_area)
        .caption(
            "3. quotes slowing for an hour: its P99 per minute (solid), the relative threshold (dashed; the same for both ramps until the trip), 50 ms",
            ("sans-serif", 16),
        )
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(50)
        .build_cartesian_2d(0.0f64..60.0, (1.0f64..80.0).log_scale())?;
    chart
        .configure_mesh()
        .light_line_style(WHITE)
        .x_desc("minutes from the ramp's start")
        .y_desc("ms (log)")
        .draw()?;
    chart.draw_series(LineSeries::new(
        vec![
            (0.0, ABSOLUTE_THRESHOLD.as_secs_f64() * 1e3),
            (60.0, ABSOLUTE_THRESHOLD.as_secs_f64() * 1e3),
        ],
        BLACK.stroke_width(1),
    ))?;
    let ramp_colours = [RGBColor(200, 0, 0), RGBColor(0, 120, 200)];
    for (k, per_hour) in scenario::RAMPS.iter().enumerate().rev() {
        let colour = ramp_colours[k];
        let relative = r
            .ramps
            .iter()
            .find(|(g, run)| g == per_hour && run.rule == Rule::Relative)
            .map(|(_, run)| &run.consumers[0]);
        let absolute = r
            .ramps
            .iter()
            .find(|(g, run)| g == per_hour && run.rule == Rule::Absolute)
            .map(|(_, run)| &run.consumers[0]);
        if let Some(c) = absolute {
            chart
                .draw_series(LineSeries::new(
                    c.p99_per(60.0, 0.0, r.ramp_cfg.length.as_secs_f64())
                        .into_iter()
                        .map(|(t, v)| (t / 60.0 + 0.5, v.max(1.0))),
                    colour.stroke_width(2),
                ))?
                .label(format!("{} P99", scenario::ramp_name(*per_hour)))
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], colour.stroke_width(2)));
        }
        if let Some(c) = relative {
            chart
                .draw_series(DashedLineSeries::new(
                    c.samples
                        .iter()
                        .filter(|s| s.t >= 0.0)
                        .map(|s| (s.t / 60.0, s.threshold_ms)),
                    5 + 3 * k as u32,
                    5 + 3 * k as u32,
                    colour.stroke_width(2),
                ))?
                .label(format!("{} relative threshold", scenario::ramp_name(*per_hour)))
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], colour.stroke_width(1)));
            if let Some(trip) = c.first_trip_from(0.0) {
                let x = trip.t / 60.0;
                chart
                    .draw_series(std::iter::once(PathElement::new(
                        vec![(x, 1.0), (x, 80.0)],
                        colour.stroke_width(2),
                    )))?
                    .label(format!("relative trips ({x:.1} min)"))
                    .legend(move |(x, y)| {
                        PathElement::new(vec![(x + 10, y - 6), (x + 10, y + 6)], colour.stroke_width(2))
                    });
            }
        }
        if let Some(b) = scenario::stated_bound_min(*per_hour) {
            chart
                .draw_series(DashedLineSeries::new(
                    vec![(b, 1.0), (b, 80.0)],
                    3,
                    3,
                    BLACK.stroke_width(1),
                ))?
                .label(format!("stated bound ({b:.1} min)"))
                .legend(move |(x, y)| PathElement::new(vec![(x + 10, y - 6), (x + 10, y + 6)], BLACK.stroke_width(1)));
        }
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperLeft)
        .draw()?;

    // 4: recovery: capacity, and the calls quotes served each second.
    let v: &Recovery = &r.recovery_cfg;
    let (top, bottom) = recovery_area.split_vertically(290);
    let (a, b) = (-5.0, 140.0);
    let mut chart = ChartBuilder::on(&top)
        .caption(
            "4. quotes back from an outage: its capacity (black) and the calls it served a second (relative rule)",
            ("sans-serif", 16),
        )
        .margin(10)
        .x_label_area_size(25)
        .y_label_area_size(50)
        .build_cartesian_2d(a..b, 0.0..(v.rate as f64 * 2.2))?;
    chart
        .configure_mesh()
        .x_desc("seconds from the outage's start")
        .y_desc("calls / s")
        .draw()?;
    chart.draw_series(LineSeries::new(
        (0..=((b - a) as usize))
            .map(|i| a + i as f64)
            .filter_map(|t| v.capacity(t).map(|c| (t, c))),
        BLACK.stroke_width(2),
    ))?;
    let warmup = v.warmup.as_secs_f64();
    let rec: Vec<_> = r.recovery.iter().filter(|run| run.rule == Rule::Relative).collect();
    for (run, colour) in rec.iter().zip([RED, RGBColor(0, 150, 0)]) {
        let c = &run.consumers[0];
        let served = c
            .served
            .iter()
            .enumerate()
            .map(|(i, s)| (i as f64 - warmup, f64::from(s[0])))
            .filter(|(t, _)| (a..b).contains(t));
        chart
            .draw_series(LineSeries::new(served, colour.stroke_width(2)))?
            .label(format!("served, {}", ramp_label(run.ramp)))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], colour.stroke_width(2)));
        let over = c
            .served
            .iter()
            .enumerate()
            .map(|(i, s)| (i as f64 - warmup, f64::from(s[1])))
            .filter(|(t, _)| (a..b).contains(t));
        chart
            .draw_series(DashedLineSeries::new(over, 4, 3, colour.stroke_width(1)))?
            .label(format!("of them beyond capacity, {}", ramp_label(run.ramp)))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], colour.stroke_width(1)));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperLeft)
        .draw()?;
    let rows: Vec<(String, Vec<(f64, Band)>)> = rec
        .iter()
        .map(|run| {
            (
                format!("relative, {}", ramp_label(run.ramp)),
                run.consumers[0].samples.iter().map(|s| (s.t, Band::of(s))).collect(),
            )
        })
        .collect();
    bands(
        &bottom,
        "quotes' breaker (relative rule): closed (green), in its recovery ramp (blue), half-open (orange), open (red)",
        (a, b),
        &rows,
        1.0,
    )?;
    root.present()?;
    Ok(())
}

fn write(path: &str, text: &str) -> std::io::Result<()> {
    if let Some(dir) = std::path::Path::new(path).parent() {
        if !dir.as_os_str().is_empty() {
            std::fs::create_dir_all(dir)?;
        }
    }
    std::fs::write(path, text)
}

fn main() {
    let a = match args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(2);
        }
    };
    let started = std::time::Instant::now();
    let terminal = std::io::stderr().is_terminal();
    let done = std::sync::atomic::AtomicUsize::new(0);
    let report = scenario::run_all(a.seed, |setup| {
        let i = done.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        if terminal {
            eprint!(
                "\rrun {i:>2}: {} {} {:<30}",
                setup.consumers[0].0.name,
                setup.rule.name(),
                ramp_label(setup.ramp)
            );
            let _ = std::io::stderr().flush();
        }
    });
    let runs = report.runs().count();
    let emits: usize = report.runs().flat_map(|r| &r.consumers).map(|c| c.emits.len()).sum();
    eprintln!(
        "\r{:<70}\rran {runs} runs ({} emits, {:.1} h of scenario time) in {:.1} s",
        "",
        n(emits as u64),
        report.runs().map(|r| r.warmup + r.length).sum::<f64>() / 3600.0,
        started.elapsed().as_secs_f64()
    );
    if report.events_lost() > 0 {
        eprintln!(
            "warning: the listeners missed {} transitions: the trips and closes below are not all of them",
            report.events_lost()
        );
    }
    debug_assert!(report
        .runs()
        .flat_map(|r| &r.consumers)
        .all(|c| c.emits.iter().all(|e| e.outcome != Outcome::Failed)));
    print!("{}", table(&report));
    if let Err(e) = write(&a.json, &json(&report)) {
        eprintln!("could not write the figures to {}: {e}", a.json);
        std::process::exit(1);
    }
    eprintln!("figures written to {}", a.json);
    match svg(&a.svg, &report) {
        Ok(()) => eprintln!("picture written to {}", a.svg),
        Err(e) => {
            eprintln!("could not write the picture to {}: {e}", a.svg);
            std::process::exit(1);
        }
    }
}
