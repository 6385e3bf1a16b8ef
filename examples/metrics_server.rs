//! Serves the breakers' Prometheus metrics on `http://127.0.0.1:PORT/metrics`.
//!
//! ```text
//! cargo run --example metrics_server --features prometheus -- [PORT] [--for SECONDS]
//! ```
//!
//! `PORT` is the first argument, else the `PORT` environment variable, else
//! 9898; 0 picks a free port. The line `listening on http://127.0.0.1:PORT/metrics`
//! on stdout gives the port actually bound. `--for SECONDS` exits after that
//! long (scripts and tests never leave it running). It binds the loopback
//! address only.
//!
//! Three consumers get synthetic traffic (about 1000 calls/s each) from a
//! background thread: `pricing` turns slow for 3 s of every 8 (a quarter of
//! its calls take 120 ms against a 50 ms threshold) and trips; its rejected
//! calls go to a dead-letter queue that is replayed once the breaker closes
//! again. `compliance` stays healthy, and
//! `search` runs under `metrics_only` with slow calls, so it reports shadow
//! rejections instead of rejecting. `ledger` is reached through an
//! [`Emitter`](tailguard::emit::Emitter) (an in-process call that fails
//! one time in a hundred: those go to its queue and are replayed), so its
//! emit-time histogram, outcome and bulkhead series are exported too.
//! Windows are 100 ms long so that everything moves within a few seconds.

#[path = "common/metrics_http.rs"]
mod metrics_http;

use std::io::Write;
use std::net::{Ipv4Addr, TcpListener};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tailguard::dlq::{DeadLetterQueue, Priority, Pushed};
use tailguard::emit::{Emitted, Emitter};
use tailguard::{Breaker, Registry, State};

const USAGE: &str = "usage: metrics_server [PORT] [--for SECONDS]";

struct Args {
    port: u16,
    run_for: Option<Duration>,
}

fn parse_args() -> Result<Args, String> {
    let mut port = None;
    let mut run_for = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "-h" | "--help" => return Err(String::new()),
            "--for" => {
                let v = args.next().ok_or("--for needs a number of seconds")?;
                let secs: f64 = v.parse().map_err(|_| format!("--for: not a number: {v}"))?;
                if !(secs.is_finite() && secs > 0.0) {
                    return Err(format!("--for: not a positive duration: {v}"));
                }
                run_for = Some(Duration::from_secs_f64(secs));
            }
            p if port.is_none() => port = Some(p.parse().map_err(|_| format!("not a port: {p}"))?),
            other => return Err(format!("unexpected argument: {other}")),
        }
    }
    let port = match (port, std::env::var("PORT")) {
        (Some(p), _) => p,
        (None, Ok(p)) => p.parse().map_err(|_| format!("PORT: not a port: {p}"))?,
        (None, Err(_)) => 9898,
    };
    Ok(Args { port, run_for })
}

/// The simulated consumers: latency and outcome of call `i`, `t` into the run.
/// Pricing is slow for the first 3 s of every 8 s: a quarter of its calls
/// take 120 ms.
fn pricing_call(i: u64, t: Duration) -> (Duration, bool) {
    if t.as_secs() % 8 < 3 && i % 4 == 0 {
        (Duration::from_millis(120), true)
    } else {
        (Duration::from_millis(8 + i % 5), i % 50 != 0)
    }
}

fn compliance_call(i: u64, _: Duration) -> (Duration, bool) {
    (Duration::from_millis(3 + i % 4), i % 200 != 0)
}

fn search_call(i: u64, _: Duration) -> (Duration, bool) {
    (Duration::from_millis(if i % 10 == 0 { 90 } else { 12 }), true)
}

/// A simulated consumer: call number and time since start to (latency, ok).
type Consumer = fn(u64, Duration) -> (Duration, bool);

/// Drives the consumers until `stop` is set.
fn traffic(registry: &Registry, dlq: &DeadLetterQueue<u64>, ledger: &Emitter<u64>, stop: &AtomicBool) {
    let consumers: Vec<(Breaker, Consumer)> = vec![
        (registry.get("pricing").expect("registered"), pricing_call),
        (registry.get("compliance").expect("registered"), compliance_call),
        (registry.get("search").expect("registered"), search_call),
    ];
    let pricing = &consumers[0].0;
    // What nothing could take (a full queue's refusals, what gave way in
    // it, a replay's last failed attempt): a real router would persist
    // these; this one counts them.
    let mut kept = 0u64;
    let mut keep = |_trigger: u64| kept += 1;
    let start = Instant::now();
    let mut i = 0u64;
    while !stop.load(Ordering::Relaxed) {
        i += 1;
        let t = start.elapsed();
        for (breaker, call) in &consumers {
            match breaker.allow() {
                Ok(permit) => {
                    let (latency, ok) = call(i, t);
                    permit.record_latency(latency, ok);
                }
                // The consumer is open: keep the request for later; what a
                // full queue hands back (the request itself, or an older one
                // that gave way) is the router's to keep.
                Err(_) => match dlq.push(i, Priority::Routine) {
                    Ok(Pushed::Queued) => {}
                    Ok(Pushed::Displaced(older, _)) => keep(older),
                    Err(full) => keep(full.into_inner()),
                },
            }
        }
        // The ledger, through its emitter: what fails is queued, and
        // replayed a few at a time.
        match ledger.emit_blocking(
            i,
            Priority::Critical,
            |n, _| if n % 100 == 0 { Err(()) } else { Ok(()) },
        ) {
            Emitted::Delivered(()) => {}
            Emitted::Diverted { displaced, .. } => displaced.into_iter().for_each(|(t, _)| keep(t)),
            Emitted::HandedBack { trigger, .. } => keep(trigger),
        }
        let replayed = ledger.replay_blocking(2, |_, _| Ok::<_, ()>(()));
        replayed.handed_back.into_iter().for_each(|(t, _)| keep(t));
        // Replay the backlog once pricing is closed again.
        if pricing.state() == State::Closed {
            dlq.drain(5, |_, _| {});
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    println!("traffic stopped: {kept} triggers kept by the router (nothing could take them)");
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = match parse_args() {
        Ok(args) => args,
        Err(msg) => {
            if !msg.is_empty() {
                eprintln!("metrics_server: {msg}");
            }
            eprintln!("{USAGE}");
            std::process::exit(if msg.is_empty() { 0 } else { 2 });
        }
    };
    let deadline = args.run_for.map(|d| Instant::now() + d);

    let registry = Registry::new();
    let window = Duration::from_millis(100);
    let threshold = Duration::from_millis(50);
    registry.get_or_create("pricing", || {
        Breaker::builder()
            .window(window)
            .latency_threshold(threshold)
            .base_backoff(Duration::from_millis(500))
            .max_backoff(Duration::from_secs(5))
    })?;
    registry.get_or_create("compliance", || {
        Breaker::builder().window(window).latency_threshold(threshold)
    })?;
    registry
        .get_or_create("search", || {
            Breaker::builder().window(window).latency_threshold(threshold)
        })?
        .metrics_only();
    let dlq: DeadLetterQueue<u64> = DeadLetterQueue::with_capacity(4096)?;
    registry.attach_fallback("pricing", dlq.producer())?;
    let ledger_breaker = registry.get_or_create("ledger", || Breaker::builder().window(window))?;
    let ledger = Emitter::builder(ledger_breaker, DeadLetterQueue::with_capacity(1024)?)
        .bulkhead(8)?
        .timeout(Duration::from_millis(100))?
        .build()?;
    registry.attach_emitter("ledger", &ledger)?;

    let stop = Arc::new(AtomicBool::new(false));
    let worker = {
        let (registry, stop) = (registry.clone(), Arc::clone(&stop));
        std::thread::Builder::new()
            .name("traffic".into())
            .spawn(move || traffic(&registry, &dlq, &ledger, &stop))?
    };

    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, args.port))?;
    let addr = listener.local_addr()?;
    println!("listening on http://{addr}/metrics");
    std::io::stdout().flush()?;
    // Non-blocking accept, so that `--for` ends the loop even when nobody connects.
    listener.set_nonblocking(true)?;
    while !matches!(deadline, Some(d) if Instant::now() >= d) {
        match listener.accept() {
            Ok((stream, _)) => {
                stream.set_nonblocking(false)?;
                if let Err(e) = metrics_http::respond(stream, &registry) {
                    eprintln!("metrics_server: {e}");
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::thread::sleep(Duration::from_millis(5)),
            Err(e) => eprintln!("metrics_server: accept: {e}"),
        }
    }
    stop.store(true, Ordering::Relaxed);
    worker.join().expect("the traffic thread does not panic");
    Ok(())
}
