//! The background ticker (its own test binary: a running ticker ticks every
//! registered breaker in the process).

use std::time::{Duration, Instant};
use tailguard::{Breaker, State, Ticker};

fn wait_until(what: &str, f: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn ticker_closes_windows_trips_half_opens_and_stops_when_dropped() {
    let ticker = Ticker::start().unwrap();
    let second = Ticker::start().unwrap(); // joins the same thread
    assert!(Ticker::is_running());
    let b = Breaker::builder()
        .window(Duration::from_millis(20))
        .trip_windows(1)
        .min_calls(1)
        .base_backoff(Duration::from_millis(30))
        .build()
        .unwrap();
    for _ in 0..10 {
        b.allow().unwrap().record_latency(Duration::from_secs(1), true);
    }
    wait_until("the ticker to trip the breaker", || b.state() == State::Open);
    // Nobody calls allow: the ticker itself moves OPEN -> HALF_OPEN.
    wait_until("HALF_OPEN", || b.state() == State::HalfOpen);

    // A dropped breaker is no longer ticked (pruning of the list itself is
    // tested in src/ticker.rs).
    let before = Ticker::pass();
    let extra = Breaker::builder().build().unwrap();
    assert_eq!(Ticker::pass(), before + 1);
    drop(extra);
    assert_eq!(Ticker::pass(), before);

    drop(second);
    assert!(Ticker::is_running());
    drop(ticker);
    assert!(!Ticker::is_running(), "the last handle stops and joins the thread");
    let names: Vec<String> = std::fs::read_dir("/proc/self/task")
        .map(|d| {
            d.filter_map(|e| std::fs::read_to_string(e.ok()?.path().join("comm")).ok())
                .map(|s| s.trim().to_string())
                .collect()
        })
        .unwrap_or_default();
    assert!(!names.iter().any(|n| n.starts_with("tailguard-tick")), "{names:?}");

    // Breakers registered while the thread starts are all scheduled: each
    // is either in its first copy of the list or handed to it afterwards.
    for round in 0..20 {
        let window = Duration::from_millis(10);
        let builder = move || Breaker::builder().window(window).build().unwrap();
        let registering = std::thread::spawn(move || (0..200).map(|_| builder()).collect::<Vec<_>>());
        let ticker = Ticker::start().unwrap();
        let breakers = registering.join().unwrap();
        for b in &breakers {
            b.allow().unwrap().record(true);
        }
        wait_until("every breaker's window to close", || {
            breakers.iter().all(|b| b.snapshot().window.closed_at > Duration::ZERO)
        });
        drop(ticker);
        assert!(!Ticker::is_running(), "round {round}");
    }
}
