//! The scale figure: 10,000 registered breakers served by one ticker.
//!
//! 1. The time one window-close pass takes over all of them, when every
//!    window is due (each with traffic to drain and judge) and when none is.
//! 2. The ticker thread's CPU share at the default tick over 10 s of real
//!    time, with traffic flowing into every breaker.
//!
//! Run: `cargo run --release --example scale`

use std::time::{Duration, Instant};
use tailguard::clock::ManualClock;
use tailguard::{Breaker, Registry, Ticker};

/// CPU time of the calling process's thread whose name starts with `prefix`,
/// from /proc (Linux), in nanoseconds.
fn thread_cpu_ns(prefix: &str) -> Option<u64> {
    for task in std::fs::read_dir("/proc/self/task").ok()? {
        let path = task.ok()?.path();
        let name = std::fs::read_to_string(path.join("comm")).ok()?;
        if name.trim().starts_with(prefix) {
            let stat = std::fs::read_to_string(path.join("schedstat")).ok()?;
            return stat.split_whitespace().next()?.parse().ok();
        }
    }
    None
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // SCALE_N overrides the count (for profiling); SCALE_PASS_ONLY skips part 2.
    let n_env = std::env::var("SCALE_N").ok().and_then(|v| v.parse().ok());
    #[allow(non_snake_case)]
    let N: usize = n_env.unwrap_or(10_000);
    // 1. Pass time, manual clock.
    let clock = ManualClock::new();
    let registry = Registry::new();
    for i in 0..N {
        let b = registry.get_or_create(&format!("consumer-{i}"), || Breaker::builder().clock(clock.clone()))?;
        for k in 0..20u64 {
            b.allow()?.record_latency(Duration::from_micros(500 + 997 * k), true);
        }
    }
    let idle = {
        let start = Instant::now();
        let ticked = Ticker::pass();
        (start.elapsed(), ticked)
    };
    // Steady state: several windows, each with traffic in every breaker.
    let mut due = (Duration::ZERO, 0);
    for _ in 0..5 {
        registry.for_each(|_, b| {
            for k in 0..20u64 {
                b.allow()
                    .expect("closed")
                    .record_latency(Duration::from_micros(500 + 997 * k), true);
            }
        });
        clock.advance(Duration::from_secs(1));
        let start = Instant::now();
        let ticked = Ticker::pass();
        due = (start.elapsed(), ticked);
    }
    let sample = registry.get("consumer-0").expect("registered").snapshot().window;
    assert_eq!(sample.calls, 20, "the pass closed the window");
    println!("{N} registered breakers, one pass over all of them:");
    println!(
        "  every window due (drain, sketch, judge): {:?} ({} breakers)",
        due.0, due.1
    );
    println!(
        "  nothing due:                             {:?} ({} breakers)",
        idle.0, idle.1
    );
    println!(
        "  per breaker: {:.0} ns due, {:.0} ns idle",
        due.0.as_nanos() as f64 / N as f64,
        idle.0.as_nanos() as f64 / N as f64
    );
    drop(registry);
    if std::env::var_os("SCALE_PASS_ONLY").is_some() {
        return Ok(());
    }

    // 2. Ticker CPU share, real clock, default windows (1 s) and tick.
    let registry = Registry::new();
    let breakers: Vec<Breaker> = (0..N)
        .map(|i| registry.get_or_create(&format!("live-{i}"), Breaker::builder))
        .collect::<Result<_, _>>()?;
    let ticker = Ticker::start()?;
    std::thread::sleep(Duration::from_millis(100)); // the thread names itself
    let run = Duration::from_secs(10);
    // (a) Registered, no traffic: a window close each per second regardless.
    let cpu_before = thread_cpu_ns("tailguard-tick");
    let start = Instant::now();
    std::thread::sleep(run);
    if let (Some(a), Some(b)) = (cpu_before, thread_cpu_ns("tailguard-tick")) {
        println!(
            "ticker thread over {:?} with {N} idle breakers: {:.1} ms CPU, {:.3}% of one core",
            start.elapsed(),
            (b - a) as f64 / 1e6,
            (b - a) as f64 / start.elapsed().as_nanos() as f64 * 100.0
        );
    }
    // (b) Traffic into every breaker, every 50 ms.
    let cpu_before = thread_cpu_ns("tailguard-tick");
    let start = Instant::now();
    let mut calls = 0u64;
    while start.elapsed() < run {
        for b in &breakers {
            b.allow()?.record_latency(Duration::from_millis(3), true);
            calls += 1;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let wall = start.elapsed();
    let cpu_after = thread_cpu_ns("tailguard-tick");
    drop(ticker);
    match (cpu_before, cpu_after) {
        (Some(a), Some(b)) => {
            let share = (b - a) as f64 / wall.as_nanos() as f64;
            println!(
                "ticker thread over {:?} with {N} busy breakers ({calls} calls recorded): {:.1} ms CPU, {:.3}% of one core",
                wall,
                (b - a) as f64 / 1e6,
                share * 100.0
            );
        }
        _ => println!("ticker CPU share: /proc/self/task/*/schedstat not readable here"),
    }
    let closed = breakers[0].snapshot().window.closed_at;
    assert!(
        closed >= Duration::from_secs(8),
        "the ticker kept closing windows: {closed:?}"
    );
    Ok(())
}
