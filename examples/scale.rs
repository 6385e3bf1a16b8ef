//! The scale figure: 10,000 registered breakers served by one ticker.
//!
//! 1. The time one window-close pass takes over all of them (manual clock):
//!    when nothing is due, when every window is due with traffic to drain
//!    and judge, and the same with the caches cold (idle windows, then busy
//!    ones), as the live ticker finds them a second after its last pass.
//! 2. The ticker thread's CPU share at the default tick over 10 s of real
//!    time (default 1 s windows), first with no traffic, then with traffic
//!    flowing into every breaker; and how often it woke.
//!
//! Run: `cargo run --release --example scale`. `SCALE_N` sets the count,
//! `SCALE_PASS_ONLY` skips part 2 (for profiling a pass under callgrind),
//! and `SCALE_RELATIVE` gives every breaker the relative latency rule
//! (whose work is all at window close: pooling a window's buckets, and an
//! observation per thousand calls).

use std::time::{Duration, Instant};
use tailguard::clock::ManualClock;
use tailguard::{Breaker, Registry, Ticker};

/// The CPU time (ns) and voluntary context switches (its wakes from sleep)
/// of this process's thread whose name starts with `prefix`, from /proc.
fn thread_stats(prefix: &str) -> Option<(u64, u64)> {
    for task in std::fs::read_dir("/proc/self/task").ok()? {
        let path = task.ok()?.path();
        let name = std::fs::read_to_string(path.join("comm")).ok()?;
        if name.trim().starts_with(prefix) {
            let stat = std::fs::read_to_string(path.join("schedstat")).ok()?;
            let cpu = stat.split_whitespace().next()?.parse().ok()?;
            let status = std::fs::read_to_string(path.join("status")).ok()?;
            let wakes = status
                .lines()
                .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))?
                .trim()
                .parse()
                .ok()?;
            return Some((cpu, wakes));
        }
    }
    None
}

/// Twenty calls into every breaker, 0.5 ms to 19.4 ms.
fn traffic(registry: &Registry) {
    registry.for_each(|_, b| {
        for k in 0..20u64 {
            b.allow()
                .expect("closed")
                .record_latency(Duration::from_micros(500 + 997 * k), true);
        }
    });
}

#[inline(never)]
fn timed_pass() -> Duration {
    let start = Instant::now();
    Ticker::pass();
    start.elapsed()
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let n: usize = std::env::var("SCALE_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    let per = |d: Duration| d.as_nanos() as f64 / n as f64;

    // 1. Pass time, manual clock.
    let clock = ManualClock::new();
    let registry = Registry::new();
    let relative = std::env::var_os("SCALE_RELATIVE").is_some();
    for i in 0..n {
        registry.get_or_create(&format!("consumer-{i}"), || {
            let b = Breaker::builder().clock(clock.clone()).ticker(true);
            if relative {
                b.relative_latency(tailguard::RelativeLatency::new())
            } else {
                b
            }
        })?;
    }
    traffic(&registry);
    let not_due = timed_pass();
    let mut warm = Duration::ZERO;
    for _ in 0..3 {
        traffic(&registry);
        clock.advance(Duration::from_secs(1));
        warm = timed_pass();
    }
    let sample = registry.get("consumer-0").expect("registered").snapshot().window;
    assert_eq!(sample.calls, 20, "the pass closed the window");
    // Cold: 64 MiB written between passes evicts every breaker, as a second
    // of other work does between two passes of the live ticker.
    let mut evict = vec![0u8; 64 << 20];
    let (mut cold_idle, mut cold_busy) = (Duration::MAX, Duration::MAX);
    for round in 0..6 {
        let busy = round % 2 == 1;
        if busy {
            traffic(&registry);
        }
        clock.advance(Duration::from_secs(1));
        for (i, byte) in evict.iter_mut().enumerate().step_by(64) {
            *byte = byte.wrapping_add(i as u8);
        }
        std::hint::black_box(&evict);
        let took = timed_pass();
        let best = if busy { &mut cold_busy } else { &mut cold_idle };
        *best = (*best).min(took);
    }
    drop(evict);
    let rule = if relative { ", relative rule" } else { "" };
    println!("{n} registered breakers{rule}, one pass over all of them (best of 3 where repeated):");
    for (what, took) in [
        ("nothing due", not_due),
        ("every window due, with calls", warm),
        ("cold caches, idle windows due", cold_idle),
        ("cold caches, windows with calls due", cold_busy),
    ] {
        println!("  {what:<36} {took:>10.3?} ({:4.0} ns per breaker)", per(took));
    }
    drop(registry);
    if std::env::var_os("SCALE_PASS_ONLY").is_some() {
        return Ok(());
    }

    // 2. Ticker CPU share, real clock, default windows (1 s) and tick.
    let registry = Registry::new();
    let breakers: Vec<Breaker> = (0..n)
        .map(|i| registry.get_or_create(&format!("live-{i}"), Breaker::builder))
        .collect::<Result<_, _>>()?;
    let ticker = Ticker::start()?;
    std::thread::sleep(Duration::from_millis(1500)); // named, and past a first close
    let run = Duration::from_secs(10);
    let report = |what: &str, before: Option<(u64, u64)>, wall: Duration| match (before, thread_stats("tailguard-tick"))
    {
        (Some((cpu0, wakes0)), Some((cpu1, wakes1))) => println!(
            "ticker thread, {n} breakers, {what}: {:.1} ms CPU in {wall:.2?}, {:.3}% of one core, {:.1} wakes/s",
            (cpu1 - cpu0) as f64 / 1e6,
            (cpu1 - cpu0) as f64 / wall.as_nanos() as f64 * 100.0,
            (wakes1 - wakes0) as f64 / wall.as_secs_f64()
        ),
        _ => println!("ticker CPU share: /proc/self/task/*/{{schedstat,status}} not readable here"),
    };
    // (a) Registered, no traffic: a window close each per second regardless.
    let before = thread_stats("tailguard-tick");
    let start = Instant::now();
    std::thread::sleep(run);
    report("no calls", before, start.elapsed());
    // (b) A call into every breaker every 50 ms.
    let before = thread_stats("tailguard-tick");
    let start = Instant::now();
    let mut calls = 0u64;
    while start.elapsed() < run {
        for b in &breakers {
            b.allow()?.record_latency(Duration::from_millis(3), true);
            calls += 1;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    report(&format!("{calls} calls"), before, start.elapsed());
    drop(ticker);
    let last = breakers[0].snapshot().window;
    assert!(
        last.closed_at >= Duration::from_secs(20) && last.calls > 0,
        "the ticker kept closing windows: {last:?}"
    );
    Ok(())
}
