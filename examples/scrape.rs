//! The scrape figure: what one Prometheus scrape of a registry costs, in
//! encode time and bytes, for 50 and for 10,000 consumers, each with calls
//! in its last window (so every family, the histogram's buckets too, has
//! values to write).
//!
//! Run: `cargo run --release --features prometheus --example scrape`.
//! `SCRAPE_N` (a comma-separated list) sets the consumer counts, `SCRAPE_RUNS`
//! the scrapes timed per count (default 20; the median and the fastest are
//! printed), `SCRAPE_HISTOGRAM` (`half_octaves`, the default, `octaves` or
//! `off`) what the collector exports of the latency histograms.

use std::time::{Duration, Instant};
use tailguard::clock::ManualClock;
use tailguard::prometheus::{BreakerCollector, HistogramExport};
use tailguard::{Breaker, Registry};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let counts: Vec<usize> = std::env::var("SCRAPE_N")
        .unwrap_or_else(|_| "50,10000".into())
        .split(',')
        .map(|n| n.trim().parse())
        .collect::<Result<_, _>>()?;
    let runs: usize = std::env::var("SCRAPE_RUNS").map_or(Ok(20), |r| r.parse())?;
    let histogram = match std::env::var("SCRAPE_HISTOGRAM").as_deref() {
        Err(_) | Ok("half_octaves") => HistogramExport::HalfOctaves,
        Ok("octaves") => HistogramExport::Octaves,
        Ok("off") => HistogramExport::Off,
        Ok(other) => return Err(format!("SCRAPE_HISTOGRAM: half_octaves, octaves or off, not {other:?}").into()),
    };
    for n in counts {
        let clock = ManualClock::new();
        let registry = Registry::new();
        for i in 0..n {
            let b = registry.get_or_create(&format!("consumer-{i:05}"), || {
                Breaker::builder().clock(clock.clone()).ticker(false)
            })?;
            for k in 0..20u64 {
                b.allow()?.record_latency(Duration::from_micros(500 + 997 * k), true);
            }
        }
        clock.advance(Duration::from_secs(1));
        registry.for_each(|_, b| b.tick());
        let collector = BreakerCollector::new(registry.clone()).with_histogram(histogram);
        let mut times = Vec::with_capacity(runs);
        let mut bytes = 0;
        for _ in 0..runs.max(1) {
            let start = Instant::now();
            let text = collector.encode_text();
            times.push(start.elapsed());
            bytes = text.len();
        }
        times.sort();
        let median = times[times.len() / 2];
        println!(
            "{n:>6} consumers: {bytes:>11} bytes ({:.0} per consumer); encode median {:.2} ms, fastest {:.2} ms ({:.1} µs per consumer)",
            bytes as f64 / n as f64,
            median.as_secs_f64() * 1e3,
            times[0].as_secs_f64() * 1e3,
            median.as_secs_f64() * 1e6 / n as f64,
        );
    }
    Ok(())
}
