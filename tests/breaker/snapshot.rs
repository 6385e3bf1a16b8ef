//! Snapshots: state, generation, trips, the last window, and rejections by
//! reason from every kind of handle and thread.

use crate::support::*;
use std::time::Duration;
use tailguard::clock::ManualClock;
use tailguard::{Mode, RejectReason, State};

#[test]
fn snapshot_reports_state_generation_trips_and_the_last_window() {
    let clock = ManualClock::new();
    let b = builder(&clock).build().unwrap();
    traffic(&b, 30, 3, 7);
    drop(b.allow().unwrap());
    next_window(&b, &clock);
    let s = b.snapshot();
    assert_eq!(
        (s.state, s.mode, s.generation, s.trip_count),
        (State::Closed, Mode::Normal, 0, 0)
    );
    assert_eq!(
        (s.window.calls, s.window.errors, s.window.slow, s.window.cancelled),
        (30, 7, 3, 1)
    );
    assert_eq!(s.consecutive_breaches, 1);
    assert_eq!(s.uptime, SEC);
    b.trip_now();
    clock.advance(300 * MS);
    let s = b.snapshot();
    assert_eq!(
        (s.state, s.generation, s.trip_count, s.backoff_level),
        (State::Open, 1, 1, 0)
    );
    assert_eq!(s.next_probe_in, Some(700 * MS));
    assert_eq!(s.open_for, Some(300 * MS));
}

#[test]
fn rejections_are_counted_by_reason_on_every_handle_kind_and_thread() {
    let clock = ManualClock::new();
    let b = builder(&clock)
        .half_open_probes(1)
        .success_to_close(1)
        .local_handles(1)
        .build()
        .unwrap();
    let local = b.local_handle().unwrap();
    trip(&b, &clock);
    // OPEN: four threads reject 1,000 times each, the local handle 10 times.
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                for _ in 0..1_000 {
                    assert_eq!(b.allow().unwrap_err().reason(), RejectReason::Open);
                }
            });
        }
    });
    for _ in 0..10 {
        assert!(local.allow().is_err());
    }
    let j = b.snapshot().rejections;
    assert_eq!((j.open, j.probes_busy, j.forced), (4_010, 0, 0));
    // HALF_OPEN with its one probe out: probes busy.
    clock.advance(Duration::from_secs(60));
    let probe = b.allow().unwrap();
    assert!(probe.is_probe());
    assert_eq!(b.allow().unwrap_err().reason(), RejectReason::ProbesBusy);
    assert_eq!(local.allow().unwrap_err().reason(), RejectReason::ProbesBusy);
    drop(probe);
    b.force_open();
    let _ = b.allow();
    let _ = local.allow_at(b.clock().raw());
    let j = b.snapshot().rejections;
    assert_eq!((j.open, j.probes_busy, j.forced), (4_010, 2, 2));
    // A metrics-only breaker rejects nothing: its would-be rejections are
    // shadow rejections.
    b.metrics_only();
    next_window(&b, &clock); // close the minute of windows the test skipped
    for _ in 0..3 {
        traffic(&b, 100, 10, 0);
        next_window(&b, &clock);
    }
    assert!(b.allow().is_ok());
    assert_eq!(b.snapshot().shadow_rejections, 1);
    assert_eq!(b.snapshot().rejections, j);
}
