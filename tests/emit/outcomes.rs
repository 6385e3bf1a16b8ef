//! What each emit does with its trigger: delivered (timed once, for the
//! breaker, the deadline and the histogram), diverted at once by an OPEN
//! breaker or a full bulkhead, displaced or handed back by a full queue.

use crate::support::emit::*;
use crate::support::*;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tailguard::clock::ManualClock;
use tailguard::dlq::{DeadLetterQueue, Priority};
use tailguard::emit::{Divert, Emitted, Emitter, HandBack};
use tailguard::{RejectReason, State};

#[test]
fn delivered_emits_time_the_call_once_for_breaker_deadline_and_histogram() {
    let clock = ManualClock::new();
    let b = breaker(&clock);
    let e = emitter::<u32>(&b, 8);
    let out = e.emit_blocking(1, Priority::Routine, |t, deadline| {
        assert_eq!(deadline.remaining(), 200 * MS);
        clock.advance(30 * MS);
        assert_eq!(deadline.remaining(), 170 * MS);
        Ok::<_, ()>(*t + 1)
    });
    assert_eq!(out, Emitted::Delivered(2));
    clock.advance(SEC);
    b.tick();
    let w = b.snapshot().window;
    assert_eq!((w.calls, w.errors, w.slow), (1, 0, 0));
    let s = e.stats();
    assert_eq!((s.delivered, s.emit_times.count(), s.emit_times.sum()), (1, 1, 30 * MS));
    let p50 = s.emit_times.quantiles().unwrap().p50;
    assert!(p50.abs_diff(30 * MS) <= 30 * MS / 20, "{p50:?}");
    assert_conserved(&s, 1);
}

/// Emit times and the breaker's verdicts are written first at the bucket
/// the thread used last, and at the real one only if that guess missed:
/// latencies that hop between buckets, stay, and come back are each
/// counted in their own bucket, in the emit-time histogram and in the
/// breaker's window (its slow count is the calls above 50 ms).
#[test]
fn emits_whose_times_hop_between_buckets_are_each_counted_in_their_own() {
    let clock = ManualClock::new();
    let b = breaker(&clock);
    let e = emitter::<u32>(&b, 8);
    let lat_ms = [30u64, 30, 1, 120, 30, 60, 60, 1, 150, 1, 30];
    for (i, &ms) in lat_ms.iter().enumerate() {
        let out = e.emit_blocking(i as u32, Priority::Routine, |_, _| {
            clock.advance(Duration::from_millis(ms));
            Ok::<_, ()>(())
        });
        assert_eq!(out, Emitted::Delivered(()));
    }
    let s = e.stats();
    for (bound, n) in s.emit_times.cumulative() {
        let expected = lat_ms.iter().filter(|&&ms| Duration::from_millis(ms) <= bound).count() as u64;
        assert_eq!(n, expected, "emits at or below {bound:?}");
    }
    let sum: u64 = lat_ms.iter().sum();
    assert_eq!(s.emit_times.sum(), Duration::from_millis(sum));
    clock.advance(SEC);
    b.tick();
    let w = b.snapshot().window;
    let slow = lat_ms.iter().filter(|&&ms| ms > 50).count() as u64;
    assert_eq!((w.calls, w.slow), (lat_ms.len() as u64, slow));
}

/// The same through a per-core emitter, whose breaker handle and time
/// histogram are also counted at a guessed bucket first (the bucket the
/// thread's last emit went to), with failures among the hops: every emit
/// is counted in its own time bucket, and the breaker's window has every
/// call, the slow ones and the failures.
#[test]
fn local_emits_whose_times_hop_between_buckets_are_each_counted_in_their_own() {
    let clock = ManualClock::new();
    let b = tailguard::Breaker::builder()
        .clock(clock.clone())
        .ticker(false)
        .latency_threshold(Duration::from_millis(50))
        .local_handles(1)
        .build()
        .unwrap();
    let e = tailguard::emit::LocalEmitter::<u32>::builder(b.clone(), DeadLetterQueue::with_capacity(8).unwrap())
        .build_local()
        .unwrap();
    let lat_ms = [30u64, 30, 1, 120, 30, 60, 60, 1, 150, 1, 30, 2, 2, 90];
    let fails = |i: usize| i % 5 == 4;
    for (i, &ms) in lat_ms.iter().enumerate() {
        let out = e.emit_blocking(i as u32, Priority::Routine, |_, _| {
            clock.advance(Duration::from_millis(ms));
            if fails(i) {
                Err(())
            } else {
                Ok(())
            }
        });
        assert_eq!(out.is_delivered(), !fails(i), "emit {i}: {out:?}");
    }
    let s = e.stats();
    for (bound, n) in s.emit_times.cumulative() {
        let expected = lat_ms.iter().filter(|&&ms| Duration::from_millis(ms) <= bound).count() as u64;
        assert_eq!(n, expected, "emits at or below {bound:?}");
    }
    let sum: u64 = lat_ms.iter().sum();
    assert_eq!(s.emit_times.sum(), Duration::from_millis(sum));
    clock.advance(SEC);
    b.tick();
    let w = b.snapshot().window;
    let slow = lat_ms.iter().filter(|&&ms| ms > 50).count() as u64;
    let failed = (0..lat_ms.len()).filter(|&i| fails(i)).count() as u64;
    assert_eq!((w.calls, w.slow, w.errors), (lat_ms.len() as u64, slow, failed));
}

#[test]
fn an_open_breaker_diverts_at_once_without_calling_the_consumer() {
    let clock = ManualClock::new();
    let b = breaker(&clock);
    let e = emitter::<u32>(&b, 8);
    b.trip_now();
    let calls = AtomicUsize::new(0);
    for i in 0..5 {
        let out = e.emit_blocking(i, Priority::Routine, |_, _| {
            calls.fetch_add(1, Ordering::Relaxed);
            Ok::<_, ()>(())
        });
        match out {
            Emitted::Diverted {
                reason: Divert::Open(r),
                displaced: None,
            } => assert_eq!(r.reason(), RejectReason::Open),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(calls.load(Ordering::Relaxed), 0);
    let s = e.stats();
    assert_eq!((s.diverted_open, s.queued), (5, 5));
    assert_eq!(s.emit_times.sum(), Duration::ZERO, "no time passed: nothing waited");
    assert_eq!(b.snapshot().rejections.open, 5);
    assert_conserved(&s, 5);
}

#[test]
fn a_full_bulkhead_diverts_without_calling() {
    let clock = ManualClock::new();
    let b = breaker(&clock);
    let e: Emitter<u32> = Emitter::builder(b.clone(), DeadLetterQueue::with_capacity(8).unwrap())
        .bulkhead(1)
        .unwrap()
        .build()
        .unwrap();
    let out = e.emit_blocking(1, Priority::Routine, |_, _| {
        // The only bulkhead slot is taken by this call: a nested emit finds
        // it full.
        let nested = e.emit_blocking(2, Priority::Routine, |_, _| Ok::<_, ()>(()));
        assert!(matches!(
            nested,
            Emitted::Diverted {
                reason: Divert::BulkheadFull,
                ..
            }
        ));
        Ok::<_, ()>(())
    });
    assert!(out.is_delivered());
    clock.advance(SEC);
    b.tick();
    assert_eq!(b.snapshot().window.calls, 1, "the refused call is not counted");
    let s = e.stats();
    assert_eq!(
        (s.diverted_bulkhead, s.bulkhead_rejections, s.bulkhead_in_flight),
        (1, 1, 0)
    );
    assert_conserved(&s, 2);
}

#[test]
fn a_bulkhead_refusal_in_half_open_leaves_the_probe_for_the_next_caller() {
    let clock = ManualClock::new();
    let b = breaker(&clock);
    let bulkhead = tailguard::Bulkhead::new(1).unwrap();
    let e: Emitter<u32> = Emitter::builder(b.clone(), DeadLetterQueue::with_capacity(8).unwrap())
        .shared_bulkhead(bulkhead.clone())
        .build()
        .unwrap();
    b.trip_now();
    clock.advance(60 * SEC);
    let held = bulkhead.try_acquire().unwrap(); // someone else holds the only slot
    let out = e.emit_blocking(1, Priority::Routine, |_, _| Ok::<_, ()>(()));
    assert!(matches!(
        out,
        Emitted::Diverted {
            reason: Divert::BulkheadFull,
            ..
        }
    ));
    assert_eq!(b.snapshot().probes_in_flight, 0, "abandoned, not held");
    drop(held);
    assert!(e
        .emit_blocking(2, Priority::Routine, |_, _| Ok::<_, ()>(()))
        .is_delivered());
    assert_eq!(b.state(), State::Closed);
}

#[test]
fn a_full_queue_displaces_lower_classes_then_hands_back() {
    let clock = ManualClock::new();
    let b = breaker(&clock);
    let e = emitter::<&str>(&b, 2);
    b.trip_now();
    let fail = |_: &&str, _: &tailguard::emit::Deadline<'_>| Ok::<(), ()>(());
    assert!(matches!(
        e.emit_blocking("i1", Priority::Idle, fail),
        Emitted::Diverted { displaced: None, .. }
    ));
    assert!(matches!(
        e.emit_blocking("r1", Priority::Routine, fail),
        Emitted::Diverted { displaced: None, .. }
    ));
    match e.emit_blocking("c1", Priority::Critical, fail) {
        Emitted::Diverted {
            displaced: Some(("i1", Priority::Idle)),
            ..
        } => {}
        other => panic!("{other:?}"),
    }
    match e.emit_blocking("r2", Priority::Routine, fail) {
        Emitted::HandedBack {
            trigger: "r2",
            class: Priority::Routine,
            not_queued: HandBack::QueueFull,
            reason: Divert::Open(_),
        } => {}
        other => panic!("{other:?}"),
    }
    let s = e.stats();
    assert_eq!(
        (s.diverted_open, s.displaced, s.handed_back_full, s.queued),
        (3, 1, 1, 2)
    );
    assert_conserved(&s, 4);
}

/// A recovery ramp's rejections are diverted as an OPEN breaker's are,
/// at once, the consumer never called; the queued triggers are replayed
/// once the ramp ends, and nothing is lost on the way.
#[test]
fn a_recovery_ramp_s_rejections_are_diverted_and_replayed_after_it() {
    let clock = ManualClock::new();
    let b = tailguard::Breaker::builder()
        .clock(clock.clone())
        .ticker(false)
        .success_to_close(1)
        .recovery_ramp(10 * SEC)
        .build()
        .unwrap();
    let e = emitter::<u32>(&b, 1024);
    b.trip_now();
    clock.advance(SEC);
    b.allow().unwrap().record_latency(MS, true); // the probe closes it
    clock.advance(5 * SEC); // half way
    let calls = AtomicUsize::new(0);
    let (mut delivered, mut ramping) = (0usize, 0usize);
    for i in 0..200 {
        match e.emit_blocking(i, Priority::Routine, |_, _| {
            calls.fetch_add(1, Ordering::Relaxed);
            Ok::<_, ()>(())
        }) {
            Emitted::Delivered(()) => delivered += 1,
            Emitted::Diverted {
                reason: Divert::Open(r),
                displaced: None,
            } if r.reason() == RejectReason::Ramping => ramping += 1,
            other => panic!("{other:?}"),
        }
    }
    assert!(
        delivered.abs_diff(100) <= 3 && delivered + ramping == 200,
        "{delivered}"
    );
    assert_eq!(
        calls.load(Ordering::Relaxed),
        delivered,
        "a diverted trigger never reaches the consumer"
    );
    let s = e.stats();
    assert_eq!((s.diverted_open, s.queued), (ramping as u64, ramping));
    assert_eq!(b.snapshot().rejections.ramping, ramping as u64);
    // A replay in the ramp is refused as the ramp refuses: it stops, the
    // trigger kept at the head, no attempt used.
    let during = e.replay_blocking(1000, |_, _| Ok::<_, ()>(()));
    assert!(during.stopped.is_some() && during.delivered < ramping, "{during:?}");
    assert_eq!(e.stats().replay_handed_back, 0);
    clock.advance(5 * SEC); // the ramp is over
    let after = e.replay_blocking(1000, |_, _| Ok::<_, ()>(()));
    assert_eq!(during.delivered + after.delivered, ramping, "{after:?}");
    let s = e.stats();
    assert_eq!((s.replayed, s.queued), (ramping as u64, 0));
    assert_conserved(&s, 200);
}
