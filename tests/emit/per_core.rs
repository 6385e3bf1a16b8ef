//! The per-core emitter (`tailguard::emit::LocalEmitter`): conservation by
//! trigger id across cores each with its own emitters, replay's order and
//! head-keeping, shutdown into a sink, the local bulkhead, the timeout, a
//! panicking call, and the accounting identities at every step, all on the
//! manual clock.

use crate::support::emit::*;
use crate::support::*;
use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use tailguard::clock::ManualClock;
use tailguard::dlq::{DeadLetterQueue, Priority};
use tailguard::emit::{Divert, Emitted, HandBack, LocalEmitter, ReplayStop};
use tailguard::Breaker;

/// A breaker on `clock` (no ticker, one probe that closes it) with one
/// local shard, for one core.
fn core_breaker(clock: &ManualClock) -> Breaker {
    Breaker::builder()
        .clock(clock.clone())
        .ticker(false)
        .half_open_probes(1)
        .success_to_close(1)
        .local_handles(1)
        .build()
        .unwrap()
}

fn local<T>(b: &Breaker, capacity: usize) -> LocalEmitter<T> {
    LocalEmitter::builder(b.clone(), DeadLetterQueue::with_capacity(capacity).unwrap())
        .timeout(200 * MS)
        .unwrap()
        .replay_attempts(2)
        .unwrap()
        .build_local()
        .unwrap()
}

/// Where a trigger ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    Delivered,
    HandedBack,
    Drained,
}

struct Rng(u64);

impl Rng {
    fn next(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

fn class(n: u64) -> Priority {
    [Priority::Idle, Priority::Routine, Priority::Critical][n as usize]
}

/// One core's run: emits (succeeding, failing, late), trips and resets,
/// ticks, replays (some calls failing) and drains, at random, with the
/// identities checked after every step; then a shutdown into a sink.
/// Returns each trigger's fate, recorded once.
fn core_run(core: u64, steps: u64) -> HashMap<u64, Fate> {
    let clock = ManualClock::new();
    let b = core_breaker(&clock);
    let e: LocalEmitter<u64> = local(&b, 16);
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ (core + 1));
    let mut fate: HashMap<u64, Fate> = HashMap::new();
    let record = |fate: &mut HashMap<u64, Fate>, id: u64, f: Fate| {
        assert_eq!(fate.insert(id, f), None, "trigger {id} ended twice");
    };
    let mut emitted = 0;
    for i in 0..steps {
        match rng.next(12) {
            0..=6 => {
                let id = core * 1_000_000 + i;
                let (how, cls) = (rng.next(4), class(rng.next(3)));
                emitted += 1;
                let out = e.emit_blocking(id, cls, |_, _| match how {
                    0 | 1 => Ok(()),
                    2 => Err("503"),
                    _ => {
                        clock.advance(201 * MS);
                        if id % 2 == 0 {
                            Ok(())
                        } else {
                            Err("late")
                        }
                    }
                });
                match out {
                    Emitted::Delivered(()) => record(&mut fate, id, Fate::Delivered),
                    Emitted::Diverted { displaced, .. } => {
                        if let Some((old, _)) = displaced {
                            record(&mut fate, old, Fate::HandedBack);
                        }
                    }
                    Emitted::HandedBack { trigger, .. } => record(&mut fate, trigger, Fate::HandedBack),
                }
            }
            7 => b.trip_now(),
            8 => b.reset(),
            9 => {
                clock.advance(SEC);
                b.tick();
            }
            10 => {
                let fail = rng.next(3) == 0;
                let mut ok = Vec::new();
                let r = e.replay_blocking(3, |id, _| {
                    if fail {
                        Err(())
                    } else {
                        ok.push(*id);
                        Ok(())
                    }
                });
                assert_eq!(r.delivered, ok.len());
                for id in ok {
                    record(&mut fate, id, Fate::Delivered);
                }
                if let Some((id, _)) = r.handed_back {
                    record(&mut fate, id, Fate::HandedBack);
                }
            }
            _ => {
                let mut out = Vec::new();
                e.drain(2, |id, _| out.push(id));
                for id in out {
                    record(&mut fate, id, Fate::Drained);
                }
            }
        }
        let s = e.stats();
        assert_conserved(&s, emitted);
        // Every trigger emitted so far is in exactly one place.
        assert_eq!(
            fate.len() as u64 + s.queued as u64 + u64::from(s.pending),
            emitted,
            "core {core} step {i}: {s:?}"
        );
    }
    let mut out = Vec::new();
    e.shutdown(|id, _| out.push(id));
    for id in out {
        record(&mut fate, id, Fate::Drained);
    }
    let s = e.stats();
    assert_conserved(&s, emitted);
    assert_eq!((s.queued, s.pending, fate.len() as u64), (0, false, emitted));
    fate
}

/// Three cores, each with its own breaker and emitter, unique trigger ids:
/// every trigger is delivered, handed back or drained exactly once, and
/// the two identities hold at every step.
#[test]
fn every_trigger_ends_once_across_cores() {
    let cores: Vec<_> = (0..3u64)
        .map(|core| std::thread::spawn(move || core_run(core, 3_000)))
        .collect();
    let mut all: HashMap<u64, Fate> = HashMap::new();
    for h in cores {
        for (id, f) in h.join().unwrap() {
            assert_eq!(all.insert(id, f), None, "trigger {id} on two cores");
        }
    }
    for f in [Fate::Delivered, Fate::HandedBack, Fate::Drained] {
        assert!(all.values().any(|&g| g == f), "the run exercised {f:?}");
    }
}

/// A replayed trigger that fails stays first, even before a higher class
/// queued since; the rest keep pop order; after `replay_attempts` failed
/// calls it is handed back; a breaker refusal uses no attempt.
#[test]
fn replay_keeps_a_failed_trigger_first_and_bounds_its_attempts() {
    let clock = ManualClock::new();
    let b = core_breaker(&clock);
    let e: LocalEmitter<u32> = local(&b, 16);
    b.trip_now();
    for (id, cls) in [
        (0, Priority::Routine),
        (1, Priority::Routine),
        (2, Priority::Critical),
        (3, Priority::Routine),
    ] {
        let _ = e.emit_blocking(id, cls, |_, _| Ok::<_, ()>(()));
    }
    assert_eq!(
        e.replay_blocking(10, |_, _| Ok::<_, ()>(())).stopped,
        Some(ReplayStop::NotClosed)
    );
    b.reset();
    let mut calls = Vec::new();
    // 2 (Critical) goes first, then 0, which fails: kept at the head.
    let r = e.replay_blocking(10, |id, _| {
        calls.push(*id);
        if *id == 0 {
            Err("down")
        } else {
            Ok(())
        }
    });
    assert_eq!((r.delivered, r.handed_back), (1, None));
    assert_eq!(r.stopped, Some(ReplayStop::Failed(Divert::Failed("down"))));
    assert!(e.stats().pending);
    // A Critical queued since does not overtake the kept trigger.
    let _ = e.enqueue(9, Priority::Critical);
    // The breaker refuses: no attempt used, still kept.
    b.trip_now();
    let r = e.replay_blocking(10, |_, _| Ok::<_, &str>(()));
    assert_eq!(r.stopped, Some(ReplayStop::NotClosed));
    b.reset();
    // Its second (last) failed call hands it back.
    let r = e.replay_blocking(10, |id, _| {
        calls.push(*id);
        if *id == 0 {
            Err("down")
        } else {
            Ok(())
        }
    });
    assert_eq!((r.delivered, r.handed_back), (0, Some((0, Priority::Routine))));
    let r = e.replay_blocking(10, |id, _| {
        calls.push(*id);
        Ok::<_, ()>(())
    });
    assert_eq!((r.delivered, r.stopped), (3, Some(ReplayStop::Empty)));
    assert_eq!(calls, [2, 0, 0, 9, 1, 3]);
    let s = e.stats();
    assert_eq!((s.replayed, s.replay_handed_back, s.pending), (4, 1, false));
    assert_conserved(&s, 4);
}

/// A replay started from its own call is `Busy`; the outer one goes on.
#[test]
fn a_replay_inside_a_replay_is_busy() {
    let clock = ManualClock::new();
    let b = core_breaker(&clock);
    let e: LocalEmitter<u32> = local(&b, 8);
    let _ = e.enqueue(1, Priority::Routine);
    let r = e.replay_blocking(10, |_, _| {
        assert_eq!(
            e.replay_blocking(10, |_, _| Ok::<_, ()>(())).stopped,
            Some(ReplayStop::Busy)
        );
        Ok::<_, ()>(())
    });
    assert_eq!(r.delivered, 1);
}

/// Shutdown hands the kept trigger first, then the queue in pop order, to
/// the sink; later emits are handed back; a replay whose call shuts the
/// emitter down hands its trigger back instead of keeping it.
#[test]
fn shutdown_hands_the_head_then_the_queue_to_the_sink() {
    let clock = ManualClock::new();
    let b = core_breaker(&clock);
    let e: LocalEmitter<u32> = local(&b, 8);
    b.trip_now();
    for id in 0..3 {
        let _ = e.emit_blocking(id, Priority::Routine, |_, _| Ok::<_, ()>(()));
    }
    let _ = e.emit_blocking(7, Priority::Critical, |_, _| Ok::<_, ()>(()));
    b.reset();
    let r = e.replay_blocking(10, |_, _| Err::<(), _>("down"));
    assert!(r.handed_back.is_none() && e.stats().pending); // 7 kept first
    let _ = e.enqueue(8, Priority::Critical);
    let mut sunk = Vec::new();
    assert_eq!(e.shutdown(|id, _| sunk.push(id)), 5);
    assert_eq!(sunk, [7, 8, 0, 1, 2]);
    assert!(e.is_shut_down());
    let out = e.emit_blocking(10, Priority::Critical, |_, _| Err::<(), _>("down"));
    assert!(matches!(
        out,
        Emitted::HandedBack {
            trigger: 10,
            not_queued: HandBack::ShutDown,
            ..
        }
    ));
    assert_eq!(e.enqueue(11, Priority::Critical), Err((11, HandBack::ShutDown)));
    let s = e.stats();
    assert_eq!((s.drained, s.handed_back_shut_down, s.queued), (5, 1, 0));
    assert_conserved(&s, 5);

    // A replay whose call shuts down: its trigger comes back, nothing kept.
    drop(e); // frees the breaker's local shard
    let e: LocalEmitter<u32> = local(&b, 8);
    let _ = e.enqueue(1, Priority::Routine);
    let _ = e.enqueue(2, Priority::Routine);
    let mut sunk = Vec::new();
    let r = e.replay_blocking(10, |_, _| {
        e.shutdown(|id, _| sunk.push(id));
        Err::<(), _>("down")
    });
    assert_eq!((r.delivered, r.handed_back), (0, Some((1, Priority::Routine))));
    assert_eq!(sunk, [2]);
    let s = e.stats();
    assert_eq!((s.pending, s.queued, s.replay_handed_back, s.drained), (false, 0, 1, 1));
    assert_conserved(&s, 0);
}

/// The core's bulkhead bounds its calls in flight: a call made from within
/// a call (the only way one core has two in flight) is diverted; the slot
/// comes back after the call, and after a panic.
#[test]
fn the_local_bulkhead_bounds_the_calls_in_flight() {
    let clock = ManualClock::new();
    let b = core_breaker(&clock);
    let e: LocalEmitter<u32> = LocalEmitter::builder(b.clone(), DeadLetterQueue::with_capacity(8).unwrap())
        .bulkhead(1)
        .unwrap()
        .build_local()
        .unwrap();
    assert_eq!(e.max_in_flight(), Some(1));
    let out = e.emit_blocking(1, Priority::Routine, |_, _| {
        assert_eq!(e.stats().bulkhead_in_flight, 1);
        let inner = e.emit_blocking(2, Priority::Routine, |_, _| -> Result<(), ()> {
            unreachable!("bulkhead full")
        });
        assert!(matches!(
            inner,
            Emitted::Diverted {
                reason: Divert::BulkheadFull,
                displaced: None
            }
        ));
        Ok::<_, ()>(())
    });
    assert!(out.is_delivered());
    let s = e.stats();
    assert_eq!(
        (s.bulkhead_in_flight, s.bulkhead_rejections, s.diverted_bulkhead),
        (0, 1, 1)
    );
    assert_conserved(&s, 2);
    let _ = catch_unwind(AssertUnwindSafe(|| {
        let _ = e.emit_blocking(3, Priority::Routine, |_, _| -> Result<(), ()> {
            panic!("consumer bug (expected)")
        });
    }));
    assert_eq!(e.stats().bulkhead_in_flight, 0);
    assert!(e
        .emit_blocking(4, Priority::Routine, |_, _| Ok::<_, ()>(()))
        .is_delivered());
}

/// The timeout, as for `emit_blocking`: a call returning exactly at its
/// deadline is in time; one nanosecond later it timed out (an `Err` is
/// diverted as timed out, an `Ok` still delivered and counted overran).
#[test]
fn a_call_past_its_deadline_times_out_and_one_at_it_does_not() {
    let clock = ManualClock::new();
    let b = core_breaker(&clock);
    let e: LocalEmitter<u32> = local(&b, 8);
    let at = |late: u64, ok: bool| {
        e.emit_blocking(1, Priority::Routine, |_, d| {
            assert_eq!(d.budget(), 200 * MS);
            clock.advance(200 * MS + std::time::Duration::from_nanos(late));
            if ok {
                Ok(())
            } else {
                Err("503")
            }
        })
    };
    assert!(matches!(
        at(0, false),
        Emitted::Diverted {
            reason: Divert::Failed("503"),
            ..
        }
    ));
    assert!(matches!(
        at(1, false),
        Emitted::Diverted {
            reason: Divert::TimedOut(d),
            ..
        } if d == 200 * MS + std::time::Duration::from_nanos(1)
    ));
    assert!(at(0, true).is_delivered());
    assert!(at(1, true).is_delivered());
    let s = e.stats();
    assert_eq!(
        (s.diverted_failed, s.diverted_timeout, s.delivered, s.overran),
        (1, 1, 2, 1)
    );
    assert_conserved(&s, 4);
}

/// A panicking call, as in the shared emitter (src/emit/call.rs): its
/// trigger is queued as failed if the queue takes it; else it is dropped,
/// counted cancelled and in `dropped_in_panics`; the panic goes on.
#[test]
fn a_panicking_call_queues_its_trigger_or_counts_it_dropped() {
    let clock = ManualClock::new();
    let b = core_breaker(&clock);
    let e: LocalEmitter<String> = local(&b, 1);
    let panics = |id: &str, class| {
        catch_unwind(AssertUnwindSafe(|| {
            let _ = e.emit_blocking(id.to_string(), class, |_, _| -> Result<(), ()> {
                panic!("consumer bug (expected by this test)")
            });
        }))
        .is_err()
    };
    assert!(panics("precious", Priority::Critical));
    let s = e.stats();
    assert_eq!(
        (s.diverted_failed, s.queued, s.cancelled, s.dropped_in_panics),
        (1, 1, 0, 0)
    );
    assert_conserved(&s, 1);
    // The queue (capacity 1) holds a Critical: the next one's trigger is dropped.
    assert!(panics("lost", Priority::Critical));
    let s = e.stats();
    assert_eq!((s.diverted_failed, s.cancelled, s.dropped_in_panics), (1, 1, 1));
    assert_conserved(&s, 2);
    clock.advance(SEC);
    b.tick();
    assert_eq!(
        b.snapshot().window.errors,
        2,
        "each panic counted failed in the breaker"
    );
    let mut saved = Vec::new();
    e.shutdown(|t, _| saved.push(t));
    assert_eq!(saved, ["precious"]);
}

/// A scrape on another thread reads what the core stored.
#[test]
fn another_thread_reads_the_cores_counters() {
    let clock = ManualClock::new();
    let b = core_breaker(&clock);
    let e: LocalEmitter<u32> = local(&b, 8);
    let reader = e.stats_reader();
    let _ = e.emit_blocking(1, Priority::Routine, |_, _| Ok::<_, ()>(()));
    b.trip_now();
    let _ = e.emit_blocking(2, Priority::Routine, |_, _| Ok::<_, ()>(()));
    let s = std::thread::spawn(move || reader.read()).join().unwrap();
    assert_eq!((s.delivered, s.diverted_open, s.queued), (1, 1, 1));
    assert_eq!(s, e.stats());
    assert_conserved(&s, 2);
}

/// Bad settings are typed errors naming the field, never panics.
#[test]
fn bad_settings_are_typed_errors() {
    let clock = ManualClock::new();
    let no_local = breaker(&clock);
    let err = LocalEmitter::<u8>::builder(no_local, DeadLetterQueue::with_capacity(8).unwrap())
        .build_local()
        .unwrap_err();
    assert_eq!(err.field(), "local_handles");
    let b = core_breaker(&clock);
    let err = LocalEmitter::<u8>::builder(b.clone(), DeadLetterQueue::with_capacity(8).unwrap())
        .shared_bulkhead(tailguard::Bulkhead::new(2).unwrap())
        .build_local()
        .unwrap_err();
    assert_eq!(err.field(), "bulkhead");
    let builder = LocalEmitter::<u8>::builder(b, DeadLetterQueue::with_capacity(8).unwrap());
    assert_eq!(builder.bulkhead(0).unwrap_err().field(), "bulkhead");
}

/// A replay call that panics keeps its trigger at the head with one attempt
/// used (the shared emitter's rule): one more failure hands it back.
#[test]
fn a_panicking_replay_call_keeps_its_trigger_with_one_attempt_used() {
    let clock = ManualClock::new();
    let b = core_breaker(&clock);
    let e: LocalEmitter<u32> = local(&b, 8);
    let _ = e.enqueue(1, Priority::Routine);
    let _ = e.enqueue(2, Priority::Routine);
    let caught = catch_unwind(AssertUnwindSafe(|| {
        let _ = e.replay_blocking(10, |_, _| -> Result<(), ()> {
            panic!("consumer bug (expected by this test)")
        });
    }));
    assert!(caught.is_err());
    let s = e.stats();
    assert_eq!((s.pending, s.queued, s.replayed), (true, 1, 0));
    assert_conserved(&s, 0);
    // replay_attempts(2): the second failed call is its last.
    let r = e.replay_blocking(10, |_, _| Err::<(), _>("down"));
    assert_eq!(r.handed_back, Some((1, Priority::Routine)));
    let r = e.replay_blocking(10, |_, _| Ok::<_, ()>(()));
    assert_eq!((r.delivered, r.stopped), (1, Some(ReplayStop::Empty)));
    let s = e.stats();
    assert_eq!(
        (s.pending, s.queued, s.replayed, s.replay_handed_back),
        (false, 0, 1, 1)
    );
    assert_conserved(&s, 0);
}
