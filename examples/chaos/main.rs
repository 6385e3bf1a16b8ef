//! The chaos comparison: the crate's main job, end to end.
//!
//! A router fans triggers at a steady rate to three consumers (pricing,
//! compliance, dispatch) through a fixed number of emit tasks. Healthy, each
//! answers in about 8 ms at P99. At t = 0 pricing's tail degrades: 10% of
//! its calls take 900 ms (its P99 is 900 ms), the rest stay fast, none
//! fails. At t = 30 s it recovers. The same run under four strategies: no
//! breaker; a 200 ms timeout; an error-only breaker (with the timeout); and
//! tailguard's emitter (bulkhead, timeout, latency-primary breaker,
//! dead-letter queue, replay after recovery).
//!
//! ```sh
//! cargo run --release --features tokio --example chaos              # paused clock: seconds, deterministic
//! cargo run --release --features tokio --example chaos -- --seed 7
//! cargo run --release --features tokio --example chaos -- --json    # the figures as one JSON object
//! cargo run --release --features tokio --example chaos -- --real-time  # on the wall clock (4 minutes)
//! cargo run --release --features tokio --example chaos -- --error-spike  # pricing fails fast instead (60% errors)
//! cargo run --release --features tokio --example chaos -- --svg out.svg
//! ```
//!
//! The SVG timeline (the router's P99 per 100 ms under each strategy, and
//! the latency-primary breaker's state underneath) is written to
//! `target/chaos.svg` unless `--svg` says elsewhere.

mod scenario;

use plotters::prelude::*;
use scenario::{Config, Report, Strategy, BUCKET, CONSUMERS};
use std::fmt::Write as _;
use std::io::{IsTerminal, Write as _};
use tailguard::State;

struct Args {
    seed: u64,
    error_spike: bool,
    real_time: bool,
    json: bool,
    svg: String,
}

fn args() -> Result<Args, String> {
    let mut a = Args {
        seed: 42,
        error_spike: false,
        real_time: false,
        json: false,
        svg: String::from("target/chaos.svg"),
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--seed" => {
                let v = it.next().ok_or("--seed needs a number")?;
                a.seed = v.parse().map_err(|_| format!("--seed: not a number: {v}"))?;
            }
            "--real-time" => a.real_time = true,
            "--error-spike" => a.error_spike = true,
            "--json" => a.json = true,
            "--svg" => a.svg = it.next().ok_or("--svg needs a path")?,
            "--help" | "-h" => {
                return Err(String::from(
                    "usage: chaos [--seed N] [--error-spike] [--real-time] [--json] [--svg PATH]",
                ))
            }
            other => return Err(format!("unknown argument {other} (try --help)")),
        }
    }
    Ok(a)
}

fn opt_s(v: Option<f64>) -> String {
    v.map_or_else(|| String::from("never"), |s| format!("{s:.1} s"))
}

fn table(cfg: &Config, reports: &[Report]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "pricing: {:?} for {} s from t = 0; {} triggers/s per consumer; {} router tasks; seed {}",
        cfg.spike,
        cfg.outage.as_secs(),
        cfg.rate,
        cfg.router_tasks,
        cfg.seed
    );
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "{:<34} {:>24} {:>9} | {:>8} {:>10} {:>8} | {:>9} {:>7} {:>10}",
        "router emit time (ms)",
        "outage P50 / P99 / P999",
        "healthy",
        "pricing",
        "compliance",
        "dispatch",
        "pool full",
        "trip",
        "close"
    );
    for r in reports {
        let [p50, p99, p999] = r.router_outage_ms;
        let [pricing, compliance, dispatch] = r.consumer_p99_ms_outage;
        let _ = writeln!(
            out,
            "{:<34} {:>24} {:>9.1} | {:>8.1} {:>10.1} {:>8.1} | {:>9} {:>7} {:>10}",
            r.strategy.name(),
            format!("{p50:.1} / {p99:.1} / {p999:.1}"),
            r.router_p99_ms_healthy,
            pricing,
            compliance,
            dispatch,
            r.pool_exhausted,
            opt_s(r.trip_after_s),
            opt_s(r.close_after_recovery_s),
        );
    }
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "{:<34} {:>8} {:>10} {:>9} {:>9} {:>12} {:>7} {:>7}",
        "triggers", "sent", "delivered", "diverted", "replayed", "handed back", "lost", "queued"
    );
    for r in reports {
        let _ = writeln!(
            out,
            "{:<34} {:>8} {:>10} {:>9} {:>9} {:>12} {:>7} {:>7}",
            r.strategy.name(),
            r.sent,
            r.delivered,
            r.diverted,
            r.replayed,
            r.handed_back,
            r.lost,
            r.still_queued
        );
    }
    let _ = writeln!(
        out,
        "\n(P99 per consumer: the emit time the router pays for it during the outage; healthy baseline: {})",
        CONSUMERS
            .iter()
            .zip(reports[0].consumer_p99_ms_healthy)
            .map(|(c, v)| format!("{c} {v:.1} ms"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    out
}

fn json(cfg: &Config, reports: &[Report]) -> String {
    let num = |v: f64| format!("{v:.3}");
    let opt = |v: Option<f64>| v.map_or_else(|| String::from("null"), |v| format!("{v:.3}"));
    let strategies: Vec<String> = reports
        .iter()
        .map(|r| {
            format!(
                concat!(
                    "{{\"name\":\"{}\",\"router_p50_ms_outage\":{},\"router_p99_ms_outage\":{},",
                    "\"router_p999_ms_outage\":{},\"router_p99_ms_healthy\":{},",
                    "\"pricing_p99_ms_outage\":{},\"compliance_p99_ms_outage\":{},",
                    "\"dispatch_p99_ms_outage\":{},\"compliance_p99_ms_healthy\":{},",
                    "\"pool_exhausted\":{},\"trip_after_s\":{},\"close_after_recovery_s\":{},",
                    "\"sent\":{},\"delivered\":{},\"diverted\":{},\"replayed\":{},",
                    "\"handed_back\":{},\"lost\":{},\"still_queued\":{}}}"
                ),
                r.strategy.name(),
                num(r.router_outage_ms[0]),
                num(r.router_outage_ms[1]),
                num(r.router_outage_ms[2]),
                num(r.router_p99_ms_healthy),
                num(r.consumer_p99_ms_outage[0]),
                num(r.consumer_p99_ms_outage[1]),
                num(r.consumer_p99_ms_outage[2]),
                num(r.consumer_p99_ms_healthy[1]),
                r.pool_exhausted,
                opt(r.trip_after_s),
                opt(r.close_after_recovery_s),
                r.sent,
                r.delivered,
                r.diverted,
                r.replayed,
                r.handed_back,
                r.lost,
                r.still_queued,
            )
        })
        .collect();
    format!(
        "{{\"seed\":{},\"outage_s\":{},\"strategies\":[{}]}}",
        cfg.seed,
        cfg.outage.as_secs(),
        strategies.join(",")
    )
}

fn svg(path: &str, cfg: &Config, reports: &[Report]) -> Result<(), Box<dyn std::error::Error>> {
    if let Some(dir) = std::path::Path::new(path).parent() {
        if !dir.as_os_str().is_empty() {
            std::fs::create_dir_all(dir)?;
        }
    }
    let root = SVGBackend::new(path, (1000, 560)).into_drawing_area();
    root.fill(&WHITE)?;
    let (top, bottom) = root.split_vertically(470);
    let t0 = -(cfg.baseline.as_secs_f64());
    let t1 = (cfg.outage + cfg.after).as_secs_f64();
    let bucket = BUCKET.as_secs_f64();
    let mut chart = ChartBuilder::on(&top)
        .caption(
            "the router's own P99 emit time per 100 ms (pricing sick from 0 to 30 s; timeout-only lies under error-only)",
            ("sans-serif", 18),
        )
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(60)
        .build_cartesian_2d(t0..t1, (1.0f64..20_000.0).log_scale())?;
    chart
        .configure_mesh()
        .x_desc("seconds from the start of the outage")
        .y_desc("ms (log)")
        .draw()?;
    let colours = [RED, MAGENTA, BLUE, RGBColor(0, 150, 0)];
    for (r, colour) in reports.iter().zip(colours) {
        let series = r
            .timeline_p99_ms
            .iter()
            .enumerate()
            .map(|(i, v)| (t0 + i as f64 * bucket, v.max(1.0)));
        chart
            .draw_series(LineSeries::new(series, colour.stroke_width(2)))?
            .label(r.strategy.name())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], colour.stroke_width(2)));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperRight)
        .draw()?;
    let tailguard = reports.iter().find(|r| r.strategy == Strategy::Tailguard);
    let mut band = ChartBuilder::on(&bottom)
        .margin_left(10)
        .margin_right(10)
        .y_label_area_size(60)
        .x_label_area_size(20)
        .caption(
            "tailguard's pricing breaker: closed (green), half-open (orange), open (red)",
            ("sans-serif", 14),
        )
        .build_cartesian_2d(t0..t1, 0.0f64..1.0)?;
    if let Some(r) = tailguard {
        band.draw_series(r.timeline_state.iter().enumerate().map(|(i, s)| {
            let x = t0 + i as f64 * bucket;
            let colour = match s {
                State::Closed => GREEN.mix(0.6),
                State::HalfOpen => RGBColor(255, 165, 0).mix(0.9),
                State::Open => RED.mix(0.8),
            };
            Rectangle::new([(x, 0.0), (x + bucket, 1.0)], colour.filled())
        }))?;
    }
    root.present()?;
    Ok(())
}

fn main() {
    let a = match args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(2);
        }
    };
    let mut cfg = Config::standard(a.seed);
    if a.error_spike {
        cfg.spike = scenario::Spike::Errors { error_percent: 60 };
    }
    let started = std::time::Instant::now();
    let terminal = std::io::stderr().is_terminal();
    let reports = scenario::run_all(cfg, a.real_time, |s, t| {
        if terminal || t.rem_euclid(10.0) == 0.0 {
            eprint!("\r{:<36} t = {:>6.1} s   ", s.name(), t);
            if !terminal {
                eprintln!();
            }
            let _ = std::io::stderr().flush();
        }
    });
    eprintln!(
        "\r{:<60}\rran {} strategies over {} s of scenario time each in {:.1} s",
        "",
        reports.len(),
        (cfg.baseline + cfg.outage + cfg.after).as_secs(),
        started.elapsed().as_secs_f64()
    );
    if a.json {
        println!("{}", json(&cfg, &reports));
    } else {
        print!("{}", table(&cfg, &reports));
    }
    match svg(&a.svg, &cfg, &reports) {
        Ok(()) => eprintln!("timeline written to {}", a.svg),
        Err(e) => {
            eprintln!("could not write the timeline to {}: {e}", a.svg);
            std::process::exit(1);
        }
    }
}
