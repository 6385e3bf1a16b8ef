//! A dropped async emit (mid-call, or before its first poll) gives back its
//! bulkhead and probe slots and is counted cancelled.

use crate::support::emit::*;
use crate::support::*;
use std::time::Duration;
use tailguard::dlq::Priority;
use tailguard::{Bulkhead, State};
use tokio::time::sleep;

#[tokio::test(start_paused = true)]
async fn a_dropped_emit_gives_back_its_bulkhead_slot_and_its_probe_slot() {
    let b = tokio_breaker();
    let bulkhead = Bulkhead::new(1).unwrap();
    let e = bulkhead_emitter(&b, &bulkhead);
    b.trip_now();
    sleep(Duration::from_secs(60)).await; // backoff over: the next emit is the probe
                                          // select!: the other branch wins while the probe's call hangs.
    tokio::select! {
        _ = e.emit(1, Priority::Routine, |_| async {
            sleep(Duration::from_secs(10)).await;
            Ok::<_, ()>(())
        }) => panic!("the timer branch is first"),
        _ = sleep(50 * MS) => {}
    }
    assert_eq!((bulkhead.in_flight(), b.snapshot().probes_in_flight), (0, 0));
    assert_eq!(b.state(), State::HalfOpen);
    // abort: the same, from a spawned task.
    let task = {
        let e = e.clone();
        tokio::spawn(async move {
            e.emit(2, Priority::Routine, |_| async {
                sleep(Duration::from_secs(10)).await;
                Ok::<_, ()>(())
            })
            .await
        })
    };
    sleep(10 * MS).await;
    assert_eq!(
        (bulkhead.in_flight(), b.snapshot().probes_in_flight),
        (1, 1),
        "in flight"
    );
    task.abort();
    assert!(task.await.unwrap_err().is_cancelled());
    assert_eq!((bulkhead.in_flight(), b.snapshot().probes_in_flight), (0, 0));
    // The slot is free: the next emit is a probe, and closes the breaker.
    assert!(e
        .emit(3, Priority::Routine, |_| async { Ok::<_, ()>(()) })
        .await
        .is_delivered());
    assert_eq!(b.state(), State::Closed);
    let s = e.stats();
    assert_eq!((s.cancelled, s.delivered), (2, 1));
    assert_conserved(&s, 3);
}

/// src/emit/future.rs (`emit`): "Dropping the returned future (a `select!`
/// that went the other way, an aborted task) ... drops the trigger, counted
/// in cancelled." Here the select! goes the other way before the emit was
/// ever polled.
///
/// Regression (a hostile review of the emit path).
#[tokio::test(start_paused = true)]
async fn an_emit_dropped_before_its_first_poll_is_counted_cancelled() {
    let b = tokio_breaker();
    let e = emitter::<u64>(&b, 8);
    tokio::select! {
        biased;
        _ = std::future::ready(()) => {}
        _ = e.emit(1, Priority::Routine, |_| async { Ok::<_, ()>(()) }) => panic!("the ready branch is first"),
    }
    // The same with a plain drop.
    drop(e.emit(2, Priority::Routine, |_| async { Ok::<_, ()>(()) }));
    let s = e.stats();
    assert_eq!(s.cancelled, 2, "two emits dropped, their triggers with them: {s:?}");
    assert_conserved(&s, 2);
}
