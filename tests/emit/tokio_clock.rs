//! A breaker on tokio's clock judges by itself: the ticker thread reads the
//! runtime's clock (paused or not, running or gone) and adds no timer.

use crate::support::*;
use std::time::Duration;
use tailguard::clock::ClockSource;
use tailguard::{Breaker, State};
use tokio::time::Instant;

// ---- a breaker on tokio's clock, on the ticker thread ----
// (The thread reads tokio's clock in the context of the runtime the breaker
// was built in. Real time here, bounded to a second or so each.)

/// Slow calls (by the breaker's clock: 5 ms against 1 ms) until it trips or
/// `limit` of real time passes; how long it took.
fn slow_until_open(b: &Breaker, limit: Duration) -> Option<Duration> {
    let t0 = std::time::Instant::now();
    while t0.elapsed() < limit {
        for _ in 0..20 {
            if let Ok(p) = b.allow() {
                p.record_latency(5 * MS, true);
            }
        }
        if b.state() == State::Open {
            return Some(t0.elapsed());
        }
        std::thread::sleep(MS);
    }
    None
}

fn tokio_breaker() -> Breaker {
    Breaker::builder()
        .clock(ClockSource::tokio())
        .window(10 * MS)
        .latency_threshold(MS)
        .build()
        .unwrap()
}

/// Built with the defaults inside a runtime, with nobody calling `tick`:
/// the ticker thread judges its windows.
#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn a_breaker_on_tokios_clock_built_with_the_defaults_trips_by_itself() {
    let b = tokio_breaker();
    assert!(tailguard::Ticker::is_running());
    let took = tokio::task::spawn_blocking(move || slow_until_open(&b, Duration::from_secs(5)))
        .await
        .unwrap();
    assert!(took.is_some_and(|t| t < Duration::from_secs(2)), "{took:?}");
}

/// Built in a runtime that is gone by the time it is used, or outside any
/// runtime, or in a current-thread runtime driven only now and then: it
/// trips all the same (from a hostile review: a tick task on the runtime
/// never ran in these).
#[test]
fn a_breaker_on_tokios_clock_trips_whatever_became_of_its_runtime() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let gone = rt.block_on(async { tokio_breaker() });
    drop(rt);
    assert!(
        slow_until_open(&gone, Duration::from_secs(5)).is_some(),
        "{:?}",
        gone.snapshot()
    );

    let outside = tokio_breaker();
    assert!(
        slow_until_open(&outside, Duration::from_secs(5)).is_some(),
        "{:?}",
        outside.snapshot()
    );

    let idle = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let b = idle.block_on(async { tokio_breaker() });
    assert!(
        slow_until_open(&b, Duration::from_secs(5)).is_some(),
        "{:?}",
        b.snapshot()
    );
}

/// Under a paused clock the thread reads the runtime's virtual time, not
/// the real one (from a hostile review of issue 16: with `ticker(true)` it
/// read the system clock, and the breaker ran on two clocks), and it adds
/// no timer: a paused runtime waiting on something outside tokio's timers
/// stands still, as it would without the breaker.
#[tokio::test(start_paused = true)]
async fn under_a_paused_clock_the_thread_reads_virtual_time_and_adds_no_timer() {
    let b = Breaker::builder()
        .clock(ClockSource::tokio())
        .window(100 * MS)
        .build()
        .unwrap();
    b.allow().unwrap().record(true);
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        std::thread::sleep(500 * MS); // real time: several ticker wakes
        let _ = tx.send(());
    });
    let t0 = Instant::now();
    rx.await.unwrap();
    assert_eq!(Instant::now() - t0, Duration::ZERO, "virtual time stood still");
    let s = b.snapshot();
    assert!(
        s.window.closed_at < 100 * MS && s.totals.calls == 0,
        "no window closed: {s:?}"
    );
    // Virtual time moves: the thread's next wake closes what it ran through.
    tokio::time::advance(Duration::from_secs(3)).await;
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while b.snapshot().totals.calls == 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(10 * MS);
    }
    let s = b.snapshot();
    assert_eq!(s.totals.calls, 1, "{s:?}");
    assert!(s.window.closed_at >= Duration::from_secs(3) - 100 * MS, "{s:?}");
}
