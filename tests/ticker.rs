//! The background ticker (its own test binary: a running ticker ticks every
//! registered breaker in the process).

use std::sync::{Arc, Barrier, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tailguard::{Breaker, State, Ticker};

/// The ticker is one per process: the tests here take turns.
fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

fn wait_until(what: &str, f: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn ticker_closes_windows_trips_half_opens_and_stops_when_dropped() {
    let _serial = serial();
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

/// Issue 8, finding 3: the last handle dropped on one thread while another
/// thread starts the ticker. The new thread must pick up every breaker
/// built afterwards (before the fix, the stopping handle cleared the shared
/// "thread up" flag and the pending list after the new thread had started,
/// and breakers built later were never ticked).
#[test]
fn f03_a_ticker_started_while_the_last_one_stops_ticks_every_later_breaker() {
    let _serial = serial();
    for round in 0..60u32 {
        let old = Ticker::start().unwrap();
        let barrier = Arc::new(Barrier::new(2));
        let theirs = Arc::clone(&barrier);
        let stopper = std::thread::spawn(move || {
            theirs.wait();
            drop(old);
        });
        barrier.wait();
        for _ in 0..(round % 12) * 2_000 {
            std::hint::spin_loop();
        }
        let new = Ticker::start().unwrap();
        stopper.join().unwrap();
        assert!(Ticker::is_running());
        let b = Breaker::builder().window(Duration::from_millis(10)).build().unwrap();
        b.allow().unwrap().record(true);
        wait_until(
            &format!("round {round}: a breaker built after the restart to be ticked"),
            || b.snapshot().window.closed_at > Duration::ZERO,
        );
        drop(new);
    }
    assert!(!Ticker::is_running());
}

/// Issue 8, finding 5: a listener that panics on the ticker thread neither
/// kills it nor stops it closing the other breakers' windows; the panic is
/// contained and counted.
#[test]
fn f05_a_panicking_listener_never_stops_the_ticker() {
    let _serial = serial();
    let ticker = Ticker::start().unwrap();
    let window = Duration::from_millis(10);
    let bad = Breaker::builder()
        .window(window)
        .trip_windows(1)
        .min_calls(1)
        .base_backoff(Duration::from_millis(10))
        .max_backoff(Duration::from_millis(10))
        .on_transition(|_| panic!("a listener bug (expected by this test)"))
        .build()
        .unwrap();
    let good = Breaker::builder().window(window).build().unwrap();
    for _ in 0..10 {
        bad.allow().unwrap().record_latency(Duration::from_secs(1), true);
    }
    wait_until("the ticker to trip the breaker whose listener panics", || {
        bad.snapshot().trip_count > 0
    });
    let then = good.snapshot().window.closed_at;
    wait_until("the other breaker's windows to keep closing", || {
        good.snapshot().window.closed_at >= then + 5 * window
    });
    assert!(Ticker::is_running());
    drop(ticker);
    assert!(!Ticker::is_running());
}
