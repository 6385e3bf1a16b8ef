//! The accounting identities and monotonic counters, under racing threads,
//! concurrent stats reads, hand-queued triggers and a non-empty queue at build.

use crate::support::emit::*;
use crate::support::*;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tailguard::clock::ManualClock;
use tailguard::dlq::{DeadLetterQueue, Priority};
use tailguard::emit::{Emitted, Emitter, EmitterStats, HandBack, ReplayStop};
use tailguard::Breaker;

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
///
/// Regression (issue 15's hostile review).
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
///
/// Regression (issue 15's hostile review).
#[test]
fn an_emitter_built_on_a_non_empty_queue_keeps_the_identity() {
    let q = DeadLetterQueue::with_capacity(8).unwrap();
    let _ = q.push(1u64, Priority::Routine);
    let e = Emitter::builder(plain_breaker(), q).build().unwrap();
    let s = e.stats();
    assert_eq!(s.into_queue(), s.out_of_queue(), "{s:?}");
}

/// A reading taken while emits run never has more emit times than emits
/// that ended: an emit counts what it ended in before its time, and a
/// reading takes the times before the outcomes (each only ever goes up),
/// so every reading has `emit_times.count() <= emitted()`, and a scrape's
/// `breaker_emit_seconds_count` is never above the emits its outcome
/// counters say ended.
///
/// Regression (issue 17's hostile review: the emitter's counter table).
#[test]
fn a_reading_while_emits_run_never_times_more_emits_than_ended() {
    use std::sync::atomic::AtomicBool;
    use std::time::Instant;
    let clock = ManualClock::new();
    let b = breaker(&clock);
    let e = emitter::<u64>(&b, 64);
    let stop = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (0..2)
        .map(|_| {
            let (e, clock, stop) = (e.clone(), clock.clone(), Arc::clone(&stop));
            std::thread::spawn(move || {
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    // 20 ms: a time bucket the reading reaches late.
                    let _ = e.emit_blocking(i, Priority::Routine, |_, _| {
                        clock.advance(20 * MS);
                        Ok::<_, ()>(())
                    });
                    i += 1;
                }
            })
        })
        .collect();
    let (mut reads, mut ahead) = (0u64, None);
    let t0 = Instant::now();
    while ahead.is_none() && t0.elapsed() < 2 * SEC {
        let s = e.stats();
        reads += 1;
        if s.emit_times.count() > s.emitted() {
            ahead = Some((s.emit_times.count(), s.emitted()));
        }
    }
    stop.store(true, Ordering::Relaxed);
    workers.into_iter().for_each(|w| w.join().unwrap());
    assert!(e.stats().delivered > 0);
    assert_eq!(
        ahead, None,
        "reading {reads} counted (emit times, emits ended) = {ahead:?}: an emit timed that had not ended"
    );
}

/// `EmitterStats`' `Debug` (what a log line of `{stats:?}` shows) lists its
/// fields in the order it always did: the counters, the queue, the replay's
/// pending trigger, the emit times, the bulkhead's load, then the bulkhead's
/// refusals.
///
/// Regression (issue 17's hostile review: the emitter's counter table).
#[test]
fn emitter_stats_debug_lists_its_fields_in_their_order() {
    let e = emitter::<u64>(&plain_breaker(), 8);
    let text = format!("{:?}", e.stats());
    let fields = [
        "delivered",
        "overran",
        "diverted_open",
        "diverted_bulkhead",
        "diverted_timeout",
        "diverted_failed",
        "handed_back_full",
        "handed_back_shut_down",
        "displaced",
        "cancelled",
        "dropped_in_panics",
        "replayed",
        "replay_handed_back",
        "drained",
        "queued_by_hand",
        "queued",
        "pending",
        "emit_times",
        "bulkhead_in_flight",
        "bulkhead_rejections",
    ];
    let at: Vec<usize> = fields
        .iter()
        .map(|f| {
            text.find(&format!(" {f}: "))
                .unwrap_or_else(|| panic!("no field {f} in {text}"))
        })
        .collect();
    let order: Vec<&str> = {
        let mut by_place: Vec<(usize, &str)> = at.iter().copied().zip(fields.iter().copied()).collect();
        by_place.sort();
        by_place.into_iter().map(|(_, f)| f).collect()
    };
    assert_eq!(order, fields, "{text}");
}
