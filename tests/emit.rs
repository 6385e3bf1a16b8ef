//! The blocking emitter, on the manual clock: what each emit does with its
//! trigger, replay, shutdown, panics, and the conservation of triggers.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::time::Duration;
use tailguard::clock::ManualClock;
use tailguard::dlq::{DeadLetterQueue, Priority};
use tailguard::emit::{Divert, Emitted, Emitter, EmitterStats, HandBack, ReplayStop};
use tailguard::{Breaker, RejectReason, State};

const MS: Duration = Duration::from_millis(1);
const SEC: Duration = Duration::from_secs(1);

fn breaker(clock: &ManualClock) -> Breaker {
    Breaker::builder()
        .clock(clock.clone())
        .ticker(false)
        .half_open_probes(1)
        .success_to_close(1)
        .build()
        .unwrap()
}

fn emitter<T>(b: &Breaker, capacity: usize) -> Emitter<T> {
    Emitter::builder(b.clone(), DeadLetterQueue::with_capacity(capacity).unwrap())
        .timeout(200 * MS)
        .unwrap()
        .build()
        .unwrap()
}

/// `emitted = delivered + diverted + handed back + cancelled`, and every
/// diverted trigger is replayed, handed back, drained, displaced, queued or
/// pending.
fn assert_conserved(s: &EmitterStats, emitted: u64) {
    assert_eq!(s.emitted(), emitted, "{s:?}");
    assert_eq!(s.into_queue(), s.out_of_queue(), "{s:?}");
}

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
fn calls_past_the_deadline_count_as_timed_out_and_slow_whatever_they_return() {
    let clock = ManualClock::new();
    let b = breaker(&clock);
    let e = emitter::<u32>(&b, 8);
    // Ok, but late: delivered (the consumer has it), counted as a timeout.
    let out = e.emit_blocking(1, Priority::Routine, |_, d| {
        clock.advance(250 * MS);
        assert!(d.expired());
        Ok::<_, ()>("late")
    });
    assert_eq!(out, Emitted::Delivered("late"));
    // Err after the deadline: diverted as timed out.
    let out = e.emit_blocking(2, Priority::Routine, |_, _| {
        clock.advance(300 * MS);
        Err::<(), _>("gave up")
    });
    assert_eq!(
        out,
        Emitted::Diverted {
            reason: Divert::TimedOut(300 * MS),
            displaced: None
        }
    );
    clock.advance(SEC);
    b.tick();
    let w = b.snapshot().window;
    assert_eq!((w.calls, w.errors, w.slow), (2, 2, 2));
    let s = e.stats();
    assert_eq!((s.delivered, s.overran, s.diverted_timeout), (1, 1, 1));
    assert_conserved(&s, 2);
}

#[test]
fn a_timeout_shorter_than_the_latency_threshold_still_counts_slow() {
    let clock = ManualClock::new();
    let b = Breaker::builder()
        .clock(clock.clone())
        .ticker(false)
        .latency_threshold(SEC)
        .build()
        .unwrap();
    let e: Emitter<u8> = Emitter::builder(b.clone(), DeadLetterQueue::with_capacity(4).unwrap())
        .timeout(10 * MS)
        .unwrap()
        .build()
        .unwrap();
    let _ = e.emit_blocking(0, Priority::Idle, |_, _| {
        clock.advance(20 * MS);
        Err::<(), ()>(())
    });
    clock.advance(SEC);
    b.tick();
    assert_eq!(b.snapshot().window.slow, 1);
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
            because: HandBack::QueueFull,
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

#[test]
fn replay_keeps_class_order_and_keeps_a_failing_trigger_at_the_head() {
    let clock = ManualClock::new();
    let b = breaker(&clock);
    let e: Emitter<u32> = Emitter::builder(b.clone(), DeadLetterQueue::with_capacity(64).unwrap())
        .replay_attempts(2)
        .unwrap()
        .build()
        .unwrap();
    b.trip_now();
    for i in 0..10u32 {
        let class = if i % 3 == 0 {
            Priority::Critical
        } else {
            Priority::Routine
        };
        let _ = e.emit_blocking(i, class, |_, _| Ok::<_, ()>(()));
    }
    assert_eq!(
        e.replay_blocking(100, |_, _| Ok::<_, ()>(())).stopped,
        Some(ReplayStop::NotClosed)
    );
    b.reset();
    let seen = Mutex::new(Vec::new());
    // Rate bound: two at a time.
    let r = e.replay_blocking(2, |t, _| {
        seen.lock().unwrap().push(*t);
        Ok::<_, ()>(())
    });
    assert_eq!((r.delivered, r.stopped), (2, None));
    // Trigger 9 fails: kept at the head, replay stops.
    let r = e.replay_blocking(100, |t, _| {
        seen.lock().unwrap().push(*t);
        if *t == 9 {
            Err("still down")
        } else {
            Ok(())
        }
    });
    assert_eq!(
        (r.delivered, r.stopped),
        (1, Some(ReplayStop::Failed(Divert::Failed("still down"))))
    );
    assert_eq!(r.handed_back, None);
    assert!(e.stats().pending);
    // Second failure of trigger 9: its last attempt; handed back.
    let r = e.replay_blocking(100, |t, _| {
        seen.lock().unwrap().push(*t);
        if *t == 9 {
            Err("still down")
        } else {
            Ok(())
        }
    });
    assert_eq!(r.handed_back, Some((9, Priority::Critical)));
    b.reset();
    let r = e.replay_blocking(100, |t, _| {
        seen.lock().unwrap().push(*t);
        Ok::<_, ()>(())
    });
    assert_eq!((r.delivered, r.stopped), (6, Some(ReplayStop::Empty)));
    // Critical first (0, 3, 6, 9), then routine, each class in order; 9
    // tried twice, never overtaken within its class.
    assert_eq!(*seen.lock().unwrap(), [0, 3, 6, 9, 9, 1, 2, 4, 5, 7, 8]);
    let s = e.stats();
    assert_eq!(
        (s.replayed, s.replay_handed_back, s.queued, s.pending),
        (9, 1, 0, false)
    );
    assert_conserved(&s, 10);
}

#[test]
fn replay_turned_away_by_the_breaker_uses_no_attempt() {
    let clock = ManualClock::new();
    let b = breaker(&clock);
    let bulkhead = tailguard::Bulkhead::new(1).unwrap();
    let e: Emitter<u32> = Emitter::builder(b.clone(), DeadLetterQueue::with_capacity(8).unwrap())
        .shared_bulkhead(bulkhead.clone())
        .replay_attempts(1)
        .unwrap()
        .build()
        .unwrap();
    b.trip_now();
    let _ = e.emit_blocking(1, Priority::Routine, |_, _| Ok::<_, ()>(()));
    b.reset();
    let held = bulkhead.try_acquire().unwrap();
    for _ in 0..3 {
        let r = e.replay_blocking(10, |_, _| -> Result<(), ()> { unreachable!("not admitted") });
        assert_eq!(r.stopped, Some(ReplayStop::Failed(Divert::BulkheadFull)));
        assert_eq!(r.handed_back, None);
    }
    drop(held);
    assert_eq!(e.replay_blocking(10, |_, _| Ok::<_, ()>(())).delivered, 1);
}

#[test]
fn one_replay_at_a_time() {
    let clock = ManualClock::new();
    let b = breaker(&clock);
    let e = emitter::<u32>(&b, 8);
    b.trip_now();
    let _ = e.emit_blocking(1, Priority::Routine, |_, _| Ok::<_, ()>(()));
    b.reset();
    let r = e.replay_blocking(10, |_, _| {
        let nested = e.replay_blocking(10, |_, _| Ok::<_, ()>(()));
        assert_eq!(nested.stopped, Some(ReplayStop::Busy));
        Ok::<_, ()>(())
    });
    assert_eq!(r.delivered, 1);
}

#[test]
fn shutdown_drains_the_head_then_the_queue_and_queues_nothing_after() {
    let clock = ManualClock::new();
    let b = breaker(&clock);
    let e = emitter::<u32>(&b, 8);
    b.trip_now();
    for i in 0..4 {
        let _ = e.emit_blocking(i, Priority::Routine, |_, _| Ok::<_, ()>(()));
    }
    b.reset();
    let _ = e.replay_blocking(10, |_, _| Err::<(), _>(())); // 0 kept at the head
    let mut drained = Vec::new();
    assert_eq!(e.shutdown(|t, c| drained.push((t, c))), 4);
    assert_eq!(drained.iter().map(|d| d.0).collect::<Vec<_>>(), [0, 1, 2, 3]);
    b.trip_now();
    match e.emit_blocking(9, Priority::Critical, |_, _| Ok::<_, ()>(())) {
        Emitted::HandedBack {
            trigger: 9,
            because: HandBack::ShutDown,
            reason: Divert::Open(_),
            ..
        } => {}
        other => panic!("{other:?}"),
    }
    b.reset();
    assert!(
        e.emit_blocking(10, Priority::Critical, |_, _| Ok::<_, ()>(()))
            .is_delivered(),
        "still delivers"
    );
    let s = e.stats();
    assert_eq!((s.drained, s.handed_back_shut_down, s.queued), (4, 1, 0));
    assert_conserved(&s, 6);
}

#[test]
fn shutdown_racing_with_diverting_threads_loses_nothing() {
    for round in 0..20 {
        let clock = ManualClock::new();
        let b = breaker(&clock);
        let e = emitter::<u64>(&b, 1 << 16);
        b.trip_now();
        let threads = 3;
        let per = 2_000u64;
        let start = Barrier::new(threads + 1);
        let handed_back = AtomicUsize::new(0);
        let drained = Mutex::new(Vec::new());
        std::thread::scope(|s| {
            for t in 0..threads as u64 {
                let (e, start, handed_back) = (&e, &start, &handed_back);
                s.spawn(move || {
                    start.wait();
                    for i in 0..per {
                        match e.emit_blocking(t * per + i, Priority::Routine, |_, _| Ok::<_, ()>(())) {
                            Emitted::Diverted { displaced: None, .. } => {}
                            Emitted::HandedBack {
                                because: HandBack::ShutDown,
                                ..
                            } => {
                                handed_back.fetch_add(1, Ordering::Relaxed);
                            }
                            other => panic!("{other:?}"),
                        }
                    }
                });
            }
            start.wait();
            for _ in 0..round * 50 {
                std::hint::spin_loop();
            }
            e.shutdown(|t, _| drained.lock().unwrap().push(t));
        });
        let drained = drained.into_inner().unwrap();
        let total = drained.len() + handed_back.load(Ordering::Relaxed);
        assert_eq!(total as u64, threads as u64 * per, "round {round}");
        assert_eq!(e.stats().queued, 0, "nothing landed after the drain");
        let mut sorted = drained.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), drained.len(), "each trigger once");
        assert_conserved(&e.stats(), threads as u64 * per);
    }
}

#[test]
fn a_panicking_call_queues_its_trigger_and_gives_everything_back() {
    let clock = ManualClock::new();
    let b = breaker(&clock);
    let e: Emitter<String> = Emitter::builder(b.clone(), DeadLetterQueue::with_capacity(8).unwrap())
        .bulkhead(1)
        .unwrap()
        .build()
        .unwrap();
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _ = e.emit_blocking("precious".to_string(), Priority::Critical, |_, _| -> Result<(), ()> {
            panic!("a consumer bug (expected by this test)")
        });
    }));
    assert!(caught.is_err(), "the panic reaches the caller");
    let s = e.stats();
    assert_eq!((s.diverted_failed, s.queued, s.bulkhead_in_flight), (1, 1, 0));
    clock.advance(SEC);
    b.tick();
    assert_eq!(b.snapshot().window.errors, 1);
    // Replay panics too: the trigger stays at the head.
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _ = e.replay_blocking(1, |_, _| -> Result<(), ()> { panic!("again (expected by this test)") });
    }));
    assert!(caught.is_err());
    let mut saved = Vec::new();
    e.shutdown(|t, _| saved.push(t));
    assert_eq!(saved, ["precious"]);
}

#[test]
fn many_threads_through_a_flapping_consumer_conserve_every_trigger() {
    let clock = ManualClock::new();
    let b = Breaker::builder()
        .clock(clock.clone())
        .ticker(false)
        .min_calls(10)
        .base_backoff(10 * MS)
        .max_backoff(10 * MS)
        .build()
        .unwrap();
    let e: Emitter<u64> = Emitter::builder(b.clone(), DeadLetterQueue::with_capacity(256).unwrap())
        .bulkhead(2)
        .unwrap()
        .build()
        .unwrap();
    let per = 5_000u64;
    let handed = Arc::new(AtomicUsize::new(0));
    std::thread::scope(|s| {
        for t in 0..3u64 {
            let (e, handed) = (&e, Arc::clone(&handed));
            s.spawn(move || {
                for i in 0..per {
                    let out = e.emit_blocking(t * per + i, Priority::ALL[(i % 3) as usize], |n, _| {
                        if n % 7 < 3 {
                            Err("flaky")
                        } else {
                            Ok(())
                        }
                    });
                    match out {
                        Emitted::Delivered(()) | Emitted::Diverted { displaced: None, .. } => {}
                        Emitted::Diverted { displaced: Some(_), .. } => {
                            handed.fetch_add(1, Ordering::Relaxed);
                        }
                        Emitted::HandedBack { .. } => {
                            handed.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            });
        }
        // The ticker's role, moving time so the breaker trips and recovers.
        s.spawn(|| {
            for _ in 0..200 {
                clock.advance(5 * MS);
                b.tick();
                let _ = e.replay_blocking(16, |_, _| Ok::<_, ()>(()));
                std::thread::yield_now();
            }
        });
    });
    let s = e.stats();
    assert_conserved(&s, 3 * per);
    assert_eq!(s.handed_back_full + s.displaced, handed.load(Ordering::Relaxed) as u64);
    assert_eq!(s.bulkhead_in_flight, 0);
    assert!(s.diverted() > 0 && s.delivered > 0, "{s:?}");
}

// ------------------------------------------------------- override modes
// Every override behaves through the emitter exactly as through `allow()`.

#[test]
fn every_override_mode_behaves_through_the_emitter_as_through_allow() {
    let clock = ManualClock::new();
    let call = |clock: &ManualClock| {
        let clock = clock.clone();
        move |_: &u32, d: &tailguard::emit::Deadline<'_>| {
            clock.advance(60 * MS);
            assert_eq!(d.remaining(), 140 * MS, "the deadline counts from the emit's start");
            Ok::<_, ()>(())
        }
    };
    // Disabled: passes, measures nothing.
    let b = breaker(&clock);
    let e = emitter::<u32>(&b, 8);
    b.disable();
    assert_eq!(
        e.emit_blocking(1, Priority::Routine, call(&clock)),
        Emitted::Delivered(())
    );
    clock.advance(SEC);
    b.tick();
    let (s, w) = (e.stats(), b.snapshot().window);
    assert_eq!((s.delivered, s.overran, w.calls), (1, 0, 0), "{s:?} {w:?}");
    // Forced closed: passes and measures (60 ms: slow), never trips.
    b.force_closed();
    for _ in 0..30 {
        assert_eq!(
            e.emit_blocking(1, Priority::Routine, call(&clock)),
            Emitted::Delivered(())
        );
    }
    clock.advance(SEC);
    b.tick();
    let w = b.snapshot().window;
    assert_eq!((w.calls, w.slow, b.state()), (30, 30, State::Closed));
    // Forced open: diverted, the consumer never called.
    b.force_open();
    let out = e.emit_blocking(2, Priority::Routine, |_, _| -> Result<(), ()> { unreachable!() });
    assert!(
        matches!(out, Emitted::Diverted { reason: Divert::Open(r), .. } if r.reason() == RejectReason::ForcedOpen),
        "{out:?}"
    );
    // Metrics-only, shadow state OPEN: passes, one shadow rejection per emit.
    b.metrics_only();
    b.trip_now();
    assert_eq!(b.state(), State::Open);
    for n in 1..=3 {
        assert_eq!(
            e.emit_blocking(3, Priority::Routine, call(&clock)),
            Emitted::Delivered(())
        );
        assert_eq!(b.snapshot().shadow_rejections, n);
    }
}

// ----------------------------------------------------- counted, monotonic

/// Every counter the emitter exports only goes up, whatever races it: a
/// reader sees `delivered` (and every other counter) never go back while
/// emits deliver, divert and hand back on other threads.
#[test]
fn every_emitter_counter_is_monotonic_while_emits_race() {
    let clock = ManualClock::new();
    let b = breaker(&clock);
    let e: Emitter<u64> = Emitter::builder(b.clone(), DeadLetterQueue::with_capacity(64).unwrap())
        .bulkhead(1)
        .unwrap()
        .build()
        .unwrap();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let workers: Vec<_> = (0..2)
        .map(|t| {
            let e = e.clone();
            std::thread::spawn(move || {
                for i in 0..40_000u64 {
                    let _ = e.emit_blocking(
                        i,
                        Priority::Routine,
                        |n, _| if (n + t) % 7 == 0 { Err(()) } else { Ok(()) },
                    );
                    if i % 64 == 0 {
                        e.drain(64, |_, _| {});
                    }
                }
            })
        })
        .collect();
    let reader = {
        let (e, stop) = (e.clone(), Arc::clone(&stop));
        std::thread::spawn(move || {
            let fields = |s: &EmitterStats| {
                [
                    s.delivered,
                    s.overran,
                    s.diverted_open,
                    s.diverted_bulkhead,
                    s.diverted_timeout,
                    s.diverted_failed,
                    s.handed_back_full,
                    s.handed_back_shut_down,
                    s.displaced,
                    s.cancelled,
                    s.dropped_in_panics,
                    s.replayed,
                    s.replay_handed_back,
                    s.drained,
                    s.bulkhead_rejections,
                    s.emit_times.count(),
                ]
            };
            let mut last = fields(&e.stats());
            let mut backwards = 0;
            while !stop.load(Ordering::Relaxed) {
                let now = fields(&e.stats());
                backwards += now.iter().zip(&last).filter(|(n, l)| n < l).count();
                last = now;
            }
            backwards
        })
    };
    for w in workers {
        w.join().unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    assert_eq!(reader.join().unwrap(), 0, "a counter went backwards");
    let s = e.stats();
    assert!(
        s.diverted() > 0 && s.delivered > 0 && s.drained > 0,
        "the outcomes raced: {s:?}"
    );
    assert_conserved(&s, 80_000);
}

// ---------------------------------------------------- triggers queued by hand

/// A trigger queued by hand is counted: the identities hold, and a
/// `Critical` queued by hand that displaces a diverted trigger counts it
/// as displaced.
#[test]
fn triggers_queued_by_hand_are_counted_and_the_identities_hold() {
    let clock = ManualClock::new();
    let b = breaker(&clock);
    let e = emitter::<&str>(&b, 2);
    b.trip_now();
    let _ = e.emit_blocking("diverted", Priority::Idle, |_, _| Ok::<_, ()>(()));
    assert!(matches!(
        e.enqueue("by hand", Priority::Routine),
        Ok(tailguard::dlq::Pushed::Queued)
    ));
    // Full: a Critical by hand displaces the Idle one, handed back here.
    match e.enqueue("critical by hand", Priority::Critical) {
        Ok(tailguard::dlq::Pushed::Displaced(t, class)) => assert_eq!((t, class), ("diverted", Priority::Idle)),
        other => panic!("{other:?}"),
    }
    let s = e.stats();
    assert_eq!((s.queued_by_hand, s.displaced, s.queued), (2, 1, 2), "{s:?}");
    assert_conserved(&s, 1);
    b.reset();
    let r = e.replay_blocking(10, |_, _| Ok::<_, ()>(()));
    assert_eq!(r.delivered, 2);
    let s = e.stats();
    assert_eq!(s.replayed, 2);
    assert_conserved(&s, 1);
    // Refused by a full queue with nothing to give way: handed back, not counted in.
    let _ = e.enqueue("a", Priority::Critical);
    let _ = e.enqueue("b", Priority::Critical);
    match e.enqueue("c", Priority::Critical) {
        Err((t, HandBack::QueueFull)) => assert_eq!(t, "c"),
        other => panic!("{other:?}"),
    }
    assert_conserved(&e.stats(), 1);
}

// ------------------------------------------------ a hostile review's tests
// (issue 15: each failed on the code it attacked)

fn plain_breaker() -> Breaker {
    Breaker::builder().ticker(false).build().unwrap()
}

/// An emitter with one trigger kept at the head by replay and one queued,
/// then left alone.
fn quiet_with_pending() -> Emitter<u64> {
    let b = plain_breaker();
    let e = Emitter::builder(b.clone(), DeadLetterQueue::with_capacity(8).unwrap())
        .build()
        .unwrap();
    b.trip_now();
    for i in 0..2 {
        let _ = e.emit_blocking(i, Priority::Routine, |_, _| Ok::<_, ()>(()));
    }
    b.reset();
    let r = e.replay_blocking(10, |_, _| Err::<(), _>(()));
    assert!(matches!(r.stopped, Some(ReplayStop::Failed(_))), "{r:?}");
    let s = e.stats();
    assert!(s.pending && s.queued == 1, "{s:?}");
    assert_eq!(s.into_queue(), s.out_of_queue(), "{s:?}");
    e
}

/// "Once the emitter is quiet" the identities hold for every reader, also
/// when two read at once (a scrape and a health check).
#[test]
fn concurrent_stats_reads_of_a_quiet_emitter_keep_the_identity() {
    use std::sync::atomic::{AtomicBool, AtomicU64};
    use std::time::Instant;
    let e = quiet_with_pending();
    let stop = Arc::new(AtomicBool::new(false));
    let broken = Arc::new(AtomicU64::new(0));
    let reads = Arc::new(AtomicU64::new(0));
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let (e, stop, broken, reads) = (e.clone(), stop.clone(), broken.clone(), reads.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let s = e.stats();
                    reads.fetch_add(1, Ordering::Relaxed);
                    if s.into_queue() != s.out_of_queue() || !s.pending {
                        if broken.fetch_add(1, Ordering::Relaxed) == 0 {
                            eprintln!(
                                "quiet emitter read: into_queue {} out_of_queue {} (queued {}, pending {})",
                                s.into_queue(),
                                s.out_of_queue(),
                                s.queued,
                                s.pending
                            );
                        }
                        stop.store(true, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    let t0 = Instant::now();
    while !stop.load(Ordering::Relaxed) && t0.elapsed() < Duration::from_secs(2) {
        std::thread::sleep(Duration::from_millis(10));
    }
    stop.store(true, Ordering::Relaxed);
    readers.into_iter().for_each(|r| r.join().unwrap());
    assert_eq!(
        broken.load(Ordering::Relaxed),
        0,
        "a quiet emitter's stats broke into_queue() == out_of_queue() (pending read as false) \
         after {} reads",
        reads.load(Ordering::Relaxed)
    );
}

/// A queue handed to the builder with triggers in it: they count as queued
/// by hand, and the identities hold from the start.
#[test]
fn an_emitter_built_on_a_non_empty_queue_keeps_the_identity() {
    let q = DeadLetterQueue::with_capacity(8).unwrap();
    let _ = q.push(1u64, Priority::Routine);
    let e = Emitter::builder(plain_breaker(), q).build().unwrap();
    let s = e.stats();
    assert_eq!(s.into_queue(), s.out_of_queue(), "{s:?}");
}

/// A call future that completes at once with an error, and panics when it
/// is dropped (its destructor is the consumer's code too).
/// Metrics-only never rejects: replay runs too, whatever the shadow state.
#[test]
fn a_metrics_only_breaker_never_stops_a_replay() {
    let b = plain_breaker();
    let e = Emitter::builder(b.clone(), DeadLetterQueue::with_capacity(8).unwrap())
        .build()
        .unwrap();
    let _ = e.emit_blocking(1u64, Priority::Routine, |_, _| Err::<(), _>(()));
    b.metrics_only();
    b.trip_now();
    assert_eq!(b.state(), State::Open, "shadow state");
    assert!(b.allow().is_ok(), "allow passes");
    assert!(e
        .emit_blocking(2u64, Priority::Routine, |_, _| Ok::<_, ()>(()))
        .is_delivered());
    let r = e.replay_blocking(10, |_, _| Ok::<_, ()>(()));
    assert_eq!(r.delivered, 1, "metrics-only never rejects, yet replay: {r:?}");
}

fn backlog_of_three() -> (Breaker, Emitter<u64>) {
    let b = Breaker::builder().ticker(false).build().unwrap();
    let e = Emitter::builder(b.clone(), DeadLetterQueue::with_capacity(8).unwrap())
        .build()
        .unwrap();
    b.trip_now();
    for i in 0..3 {
        let _ = e.emit_blocking(i, Priority::Routine, |_, _| Ok::<_, ()>(()));
    }
    b.reset();
    (b, e)
}

/// Runs `f` on a thread of its own; fails if it has not returned in 5 s.
fn returns(what: &str, f: impl FnOnce() + Send + 'static) {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        f();
        let _ = tx.send(());
    });
    assert!(
        rx.recv_timeout(Duration::from_secs(5)).is_ok(),
        "{what}: still blocked after 5 s (self-deadlock)"
    );
}

/// A consumer that, on a fatal answer during a replay, shuts the emitter
/// down to save the backlog (shutdown: "returns how many it handed over").
/// The blocking replay holds the replay lock through its calls; the
/// shutdown on the same thread waits for it forever.
/// No lock is held while user code runs: `shutdown` from inside a blocking
/// replay's call returns (the replay then hands its trigger back), and a
/// replay from inside a `drain` sink returns at once.
#[test]
fn shutdown_from_inside_a_blocking_replay_call_returns() {
    let (_b, e) = backlog_of_three();
    returns("shutdown inside replay_blocking's call", move || {
        let e2 = e.clone();
        let _ = e.replay_blocking(10, move |_, _| {
            let saved = e2.shutdown(|_, _| {});
            assert_eq!(saved, 2);
            Err::<(), _>(())
        });
    });
}

/// `replay_blocking`: "One replay runs at a time per emitter; another one
/// meanwhile returns at once with ReplayStop::Busy" (or NotClosed). Called
/// from a `drain` sink (move one trigger elsewhere, then replay the rest),
/// it takes the replay turn and blocks on the lock the drain holds.
#[test]
fn replay_from_inside_a_drain_sink_returns() {
    let (_b, e) = backlog_of_three();
    returns("replay_blocking inside drain's sink", move || {
        let e2 = e.clone();
        e.drain(1, move |_, _| {
            let _ = e2.replay_blocking(10, |_, _| Ok::<_, ()>(()));
        });
    });
}
