//! Loom models of the crate's concurrent protocols: every one the crate has,
//! beside the model that checks it (the queue's are in `dlq.rs` here).
//!
//! Run: `RUSTFLAGS="--cfg tailguard_loom" LOOM_MAX_PREEMPTIONS=2 cargo test --release --test loom`
//! (`.ci/run` does). Every model runs at the bound of 2 unless it says
//! otherwise; `.ci/run` runs five again at 3, each in under a second:
//! `a_dropped_probe_returns_its_slot`,
//! `a_probe_admitted_from_a_stale_word_gets_its_own_lease`,
//! `a_probe_verdict_racing_its_lease_expiry_decides_the_round_once`,
//! `an_in_flight_call_is_counted_once_against_a_racing_claim` and
//! `a_call_starting_during_a_close_after_a_clock_step_is_never_slow`.
//!
//! | protocol (where) | models |
//! |---|---|
//! | transitions: a CAS over a pure decision, racing OPEN → HALF_OPEN (`state.rs`, `breaker/open.rs`) | `racing_allow_at_open_expiry_respects_the_probe_limit`, `two_slots_three_racers` |
//! | probe slots taken and given back; a caller that loaded an earlier round retries in the new one (`breaker/admission.rs`, `breaker/transition.rs`) | `a_dropped_probe_returns_its_slot`, `two_slots_three_racers`, `a_caller_that_loaded_an_earlier_round_retries_in_the_new_one` |
//! | probe leases stamped by the CAS that won the slot (`breaker/admission.rs`) | `a_probe_admitted_from_a_stale_word_gets_its_own_lease` |
//! | lease expiry against the probe's verdict (`breaker/window.rs`, `breaker/admission.rs`) | `a_probe_verdict_racing_its_lease_expiry_decides_the_round_once` |
//! | rounds and generations: the 64-bit generation, stale verdicts (`state.rs`, `breaker/transition.rs`, `breaker/permit.rs`) | `a_stale_generation_result_changes_nothing`, `a_probe_from_an_old_round_never_decides_the_new_one` |
//! | OPEN deadline published after the trip, withdrawn after the OPEN, and the time OPEN summed as it is withdrawn (`breaker/open.rs`) | `a_call_racing_a_trip_is_admitted_before_it_or_rejected`, `time_open_is_read_once_against_a_racing_end_and_re_open` |
//! | window close against records into shared shards; shards built by a thread's first call, published once (`shard.rs`, `sync.rs`'s `OnceBox`, `breaker/window.rs`, `breaker/flight.rs`) | `counters_are_conserved_across_a_concurrent_tick`, `a_shard_built_by_a_first_call_during_a_close_counts_it_once`, `two_first_calls_racing_to_build_one_shard_and_the_last_drop_count_once`, `a_hung_first_call_racing_a_close_and_recorded_elsewhere_is_slow_once` |
//! | owned handles: single-writer shards read by window close, shards handed out by CAS (`shard.rs`, `breaker/permit.rs`) | `local_handle_records_are_conserved_across_a_concurrent_tick`, `a_local_shard_is_handed_out_once` |
//! | in-flight slots: enter, leave and claim as CASes on one word; the floor and the closing flag; generation tags keeping calls after a transition from those before it (`flight.rs`, `breaker/flight.rs`) | `an_in_flight_call_is_counted_once_against_a_racing_claim`, `a_call_starting_during_a_close_after_a_clock_step_is_never_slow`, `a_call_admitted_after_a_transition_is_never_claimed_with_those_before` |
//! | tasks parked elsewhere, woken by a transition into OPEN (`breaker/watch.rs`) | `a_parked_task_is_woken_or_sees_the_breaker_open` |
//! | the recovery ramp: its start published after the close's CAS, its count, its end against a trip in it (`breaker/ramp.rs`) | `a_call_racing_the_close_into_a_ramp_is_refused_and_the_share_follows`, `a_ramp_s_end_racing_a_trip_in_it_backs_off_once` |
//! | events queued by every transition, delivered in order off the hot path (`events.rs`) | `events_of_racing_overrides_arrive_in_order_and_none_is_unaccounted`, `a_hot_path_transition_racing_an_override_is_delivered_in_order` |
//! | the queue: slot `seq` protocol, the occupancy word, displacement, the consumer's pop (`dlq/`) | the seventeen models of `dlq.rs` (seven with bounds of their own, as they state) |
//! | the emit path: shutdown against diversions, the bulkhead's slots, one replay at a time, a replay's trigger against a shutdown (`emit/`, `bulkhead.rs`) | the four models of `emit.rs` |
//!
//! Not modelled: the ticker thread's start and stop and the coarse clock's
//! upkeep thread use std threads, `parking_lot` and real time, which loom
//! does not run; their races are tested by stress in `tests/ticker.rs`
//! (`f03_…`, `t03_…`). Loom has no 128-bit atomics and no clock: every
//! model drives a `ManualClock` by hand and calls `tick()` itself.
#![cfg(tailguard_loom)]

use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::sync::Arc;
use loom::thread;
use std::time::Duration;
use tailguard::clock::ManualClock;
use tailguard::{Breaker, RejectReason, State};

const SEC: Duration = Duration::from_secs(1);

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(2);
    }
    builder.check(f);
}

/// An OPEN breaker whose backoff has just run out, counting HALF_OPEN
/// transitions in `half_opens`.
fn expired(probes: u32, half_opens: &Arc<AtomicUsize>) -> Breaker {
    let clock = ManualClock::new();
    let counter = Arc::clone(half_opens);
    let b = Breaker::builder()
        .clock(clock.clone())
        .half_open_probes(probes)
        .success_to_close(2)
        .on_transition(move |t| {
            if t.to == State::HalfOpen {
                counter.fetch_add(1, Ordering::Relaxed);
            }
        })
        .build()
        .unwrap();
    b.trip_now();
    clock.advance(SEC);
    b
}

/// Three callers (two spawned threads and the model's own) race `allow()`
/// once each at OPEN expiry with `probes` slots; returns how many were
/// admitted and how many OPEN -> HALF_OPEN transitions happened.
fn race(probes: u32) -> (usize, usize, Breaker) {
    let half_opens = Arc::new(AtomicUsize::new(0));
    let b = expired(probes, &half_opens);
    let admitted = Arc::new(AtomicUsize::new(0));
    let try_once = |b: &Breaker, admitted: &AtomicUsize| {
        if let Ok(p) = b.allow() {
            admitted.fetch_add(1, Ordering::Relaxed);
            std::mem::forget(p); // held for the rest of the model
        }
    };
    let threads: Vec<_> = (0..2)
        .map(|_| {
            let b = b.clone();
            let admitted = Arc::clone(&admitted);
            thread::spawn(move || try_once(&b, &admitted))
        })
        .collect();
    try_once(&b, &admitted);
    threads.into_iter().for_each(|t| t.join().unwrap());
    b.tick(); // delivers the transition the winning `allow` queued
    (admitted.load(Ordering::Relaxed), half_opens.load(Ordering::Relaxed), b)
}

/// Threads racing `allow()` at OPEN expiry never exceed the probe limit,
/// and exactly one of them wins OPEN -> HALF_OPEN.
#[test]
fn racing_allow_at_open_expiry_respects_the_probe_limit() {
    model(|| {
        let (admitted, half_opens, b) = race(1);
        assert_eq!(admitted, 1);
        assert_eq!(half_opens, 1);
        assert_eq!(b.snapshot().probes_in_flight, 1);
    });
}

/// With two probe slots and three racers, exactly two are admitted.
#[test]
fn two_slots_three_racers() {
    model(|| {
        let (admitted, half_opens, b) = race(2);
        assert_eq!(admitted, 2);
        assert_eq!(half_opens, 1);
        assert_eq!(b.snapshot().probes_in_flight, 2);
    });
}

/// A probe permit dropped without a verdict gives its slot back, whatever
/// a racing `allow()` saw meanwhile.
#[test]
fn a_dropped_probe_returns_its_slot() {
    model(|| {
        let half_opens = Arc::new(AtomicUsize::new(0));
        let b = expired(1, &half_opens);
        let probe = b.allow().unwrap();
        let b2 = b.clone();
        let racer = thread::spawn(move || {
            // Either rejected (slot held) or admitted after the drop.
            if let Ok(p) = b2.allow() {
                assert!(p.is_probe());
                drop(p);
            }
        });
        drop(probe);
        racer.join().unwrap();
        assert_eq!(b.state(), State::HalfOpen);
        assert_eq!(b.snapshot().probes_in_flight, 0);
        assert!(b.allow().unwrap().is_probe());
    });
}

/// Every record lands in exactly one window across a concurrent tick: its
/// call and slowness together (one bucket); its error in a window of its
/// own choosing (a record racing the close may have its error in one window
/// and its call in the next), but nothing is lost or counted twice.
#[test]
fn counters_are_conserved_across_a_concurrent_tick() {
    model(|| {
        let clock = ManualClock::new();
        let b = Breaker::builder().clock(clock.clone()).shards(1).build().unwrap();
        let threads: Vec<_> = (0..2)
            .map(|_| {
                let b = b.clone();
                thread::spawn(move || {
                    b.allow().unwrap().record_latency(SEC, false);
                })
            })
            .collect();
        clock.advance(SEC);
        b.tick();
        let first = b.snapshot().window;
        assert_eq!(first.calls, first.slow);
        threads.into_iter().for_each(|t| t.join().unwrap());
        clock.advance(SEC);
        b.tick();
        let second = b.snapshot().window;
        assert_eq!(second.calls, second.slow);
        assert_eq!(first.calls + second.calls, 2);
        assert_eq!(first.errors + second.errors, 2);
    });
}

/// A shard is built by the first call of a thread that maps to it (the
/// two threads here race to build the same one): a first call racing a
/// close, with in-flight tracking on, is counted exactly once, as slow,
/// whether the close finds its shard built, finds it mid-call and claims
/// it in flight, or misses it and leaves it to the next close.
#[test]
fn a_shard_built_by_a_first_call_during_a_close_counts_it_once() {
    model(|| {
        let clock = ManualClock::new();
        let b = Breaker::builder()
            .clock(clock.clone())
            .shards(1)
            .track_in_flight(true)
            .latency_threshold(SEC)
            .build()
            .unwrap();
        let threads: Vec<_> = (0..2)
            .map(|_| {
                let b = b.clone();
                thread::spawn(move || {
                    b.allow().unwrap().record_latency(2 * SEC, false);
                })
            })
            .collect();
        clock.advance(3 * SEC);
        b.tick();
        threads.into_iter().for_each(|t| t.join().unwrap());
        clock.advance(SEC);
        b.tick();
        let totals = b.snapshot().totals;
        assert_eq!((totals.calls, totals.slow, totals.errors), (2, 2, 2));
    });
}

/// Two first calls race to build the same shard slot (loom runs every
/// model thread on one OS thread: they share a thread index), one a
/// verdict, one a dropped permit (cancelled, or claimed slow in flight),
/// while a close runs; then the last handle is dropped on another thread
/// while the model's own drops (the shard, built by one thread, freed by
/// another). Each call counts once. From the hostile review of issue 21
/// item 4 (a8c3891).
#[test]
fn two_first_calls_racing_to_build_one_shard_and_the_last_drop_count_once() {
    model(|| {
        let clock = ManualClock::new();
        let b = Breaker::builder()
            .clock(clock.clone())
            .shards(2)
            .track_in_flight(true)
            .build()
            .unwrap();
        let b1 = b.clone();
        let t1 = thread::spawn(move || b1.allow().unwrap().record(true));
        let b2 = b.clone();
        let t2 = thread::spawn(move || drop(b2.allow().unwrap()));
        clock.advance(SEC);
        b.tick();
        t1.join().unwrap();
        t2.join().unwrap();
        clock.advance(SEC);
        b.tick();
        // The dropped permit is a cancellation, or a call (slow) if the
        // close claimed it in flight first (it has run 1 s by then).
        let t = b.snapshot().totals;
        assert_eq!((t.calls + t.cancelled, t.stale), (2, 0), "{t:?}");
        assert!(t.slow <= t.calls, "{t:?}");
        let w = Arc::new(b);
        let last = Arc::clone(&w);
        let t3 = thread::spawn(move || drop(last));
        drop(w);
        t3.join().unwrap();
    });
}

/// A hung call that is its thread's first (it builds the shard it enters)
/// racing a close, its permit recorded later by the model's own thread:
/// slow exactly once, whether the close claimed it or the verdict counts
/// it. From the hostile review of issue 21 item 4 (a8c3891).
#[test]
fn a_hung_first_call_racing_a_close_and_recorded_elsewhere_is_slow_once() {
    model(|| {
        let clock = ManualClock::new();
        let b = Breaker::builder()
            .clock(clock.clone())
            .shards(1)
            .track_in_flight(true)
            .latency_threshold(SEC)
            .build()
            .unwrap();
        let b1 = b.clone();
        let t = thread::spawn(move || b1.allow_owned().unwrap());
        clock.advance(3 * SEC);
        b.tick();
        let p = t.join().unwrap();
        clock.advance(3 * SEC);
        b.tick();
        p.record_latency(6 * SEC, true);
        clock.advance(SEC);
        b.tick();
        let t = b.snapshot().totals;
        assert_eq!((t.calls, t.slow, t.stale, t.cancelled), (1, 1, 0, 0), "{t:?}");
    });
}

/// A verdict from an earlier generation changes nothing, whether it lands
/// before or after the transition that makes it stale.
#[test]
fn a_stale_generation_result_changes_nothing() {
    model(|| {
        let half_opens = Arc::new(AtomicUsize::new(0));
        let b = expired(2, &half_opens);
        let early = b.allow().unwrap();
        let gen = b.snapshot().generation;
        let b2 = b.clone();
        // A second probe fails: re-opens, generation + 1.
        let t = thread::spawn(move || b2.allow().unwrap().record(false));
        // Races the failure: either counted as one good probe of this
        // generation (success_to_close is 2: no close) or stale.
        early.record_latency(Duration::from_millis(1), true);
        t.join().unwrap();
        assert_eq!(b.state(), State::Open);
        assert_eq!(b.snapshot().generation, gen + 1);
        assert_eq!(b.snapshot().trip_count, 2);
    });
}

/// A probe held across a re-open and a new HALF_OPEN never decides the new
/// round, even racing the new round's own probe.
#[test]
fn a_probe_from_an_old_round_never_decides_the_new_one() {
    model(|| {
        let clock = ManualClock::new();
        let b = Breaker::builder()
            .clock(clock.clone())
            .half_open_probes(2)
            .success_to_close(1)
            .build()
            .unwrap();
        b.trip_now();
        clock.advance(SEC);
        let stale = b.allow().unwrap();
        b.allow().unwrap().record(false); // re-open
        clock.advance(2 * SEC);
        let b2 = b.clone();
        let t = thread::spawn(move || {
            let p = b2.allow().unwrap();
            assert!(p.is_probe());
            drop(p); // cancelled: decides nothing either
        });
        stale.record_latency(Duration::from_millis(1), true);
        t.join().unwrap();
        assert_eq!(b.state(), State::HalfOpen);
        assert_eq!(b.snapshot().probes_in_flight, 0);
    });
}

/// Issue 8, finding 1: probe A holds the only slot while caller C races
/// A's drop. Whether C's CAS lands before the drop (rejected) or after it
/// (admitted, from a word it loaded while every slot was taken), C's lease
/// starts at C's own admission: a tick after A's lease would have run out,
/// but within C's, leaves the breaker HALF_OPEN.
#[test]
fn a_probe_admitted_from_a_stale_word_gets_its_own_lease() {
    model(|| {
        let clock = ManualClock::new();
        let b = Breaker::builder()
            .clock(clock.clone())
            .probe_lease(SEC)
            .build()
            .unwrap();
        b.trip_now();
        clock.advance(SEC);
        let a = b.allow().unwrap();
        clock.advance(Duration::from_millis(900));
        let b2 = b.clone();
        let c = thread::spawn(move || {
            if let Ok(p) = b2.allow() {
                assert!(p.is_probe());
                std::mem::forget(p); // held past the tick below
                true
            } else {
                false
            }
        });
        drop(a);
        let admitted = c.join().unwrap();
        clock.advance(Duration::from_millis(200)); // past A's lease, not C's
        b.tick();
        assert_eq!(b.state(), State::HalfOpen);
        assert_eq!(b.snapshot().probes_in_flight, u8::from(admitted));
    });
}

/// Issue 8, finding 7: with in-flight tracking, a call's verdict races the
/// window close that claims its epoch. The call is counted exactly once:
/// as a completed call, or as an in-flight slow one.
#[test]
fn an_in_flight_call_is_counted_once_against_a_racing_claim() {
    model(|| {
        let clock = ManualClock::new();
        let b = Breaker::builder()
            .clock(clock.clone())
            .track_in_flight(true)
            .build()
            .unwrap();
        let p = b.allow().unwrap(); // epoch 0
        let b2 = b.clone();
        let t = thread::spawn(move || {
            let p = b2.allow().unwrap(); // epoch 0, or 13 after the advance
            p.record_latency(Duration::from_millis(1), true);
        });
        clock.advance(Duration::from_millis(1200));
        // Claims epochs before (1.2 s − 50 ms) / 87.5 ms = 13, racing the
        // thread's call and this call's verdict below.
        b.tick();
        p.record_latency(Duration::from_millis(1), true);
        t.join().unwrap();
        clock.advance(SEC);
        b.tick();
        let totals = b.snapshot().totals;
        assert_eq!(totals.calls, 2, "{totals:?}");
        assert!(
            totals.slow >= 1,
            "the first call was in flight at the claim: {totals:?}"
        );
    });
}

/// Events of transitions made on two threads reach the listener in
/// strictly increasing generations, and each is delivered or counted lost.
#[test]
fn events_of_racing_overrides_arrive_in_order_and_none_is_unaccounted() {
    model(|| {
        let clock = ManualClock::new();
        let seen = Arc::new(loom::sync::Mutex::new(Vec::new()));
        let sink = Arc::clone(&seen);
        let b = Breaker::builder()
            .clock(clock.clone())
            .on_transition(move |t| sink.lock().unwrap().push(t.generation))
            .build()
            .unwrap();
        let b2 = b.clone();
        let t = thread::spawn(move || b2.force_open());
        b.force_closed();
        t.join().unwrap();
        b.tick();
        let snap = b.snapshot();
        let seen = seen.lock().unwrap();
        assert!(seen.windows(2).all(|w| w[0] < w[1]), "{seen:?}");
        assert_eq!(seen.len() as u64 + snap.events_lost, u64::from(snap.generation));
        assert_eq!(snap.generation, 2);
    });
}

/// Lease expiry (a tick re-opening on a probe out past its lease) racing
/// that probe's own verdict: exactly one of them decides the round.
#[test]
fn a_probe_verdict_racing_its_lease_expiry_decides_the_round_once() {
    model(|| {
        let clock = ManualClock::new();
        let b = Breaker::builder()
            .clock(clock.clone())
            .probe_lease(SEC)
            .success_to_close(1)
            .build()
            .unwrap();
        b.trip_now();
        clock.advance(SEC);
        let probe = b.allow().unwrap();
        let round = b.snapshot().generation;
        clock.advance(SEC); // the probe is now out as long as its lease
        let b2 = b.clone();
        let t = thread::spawn(move || b2.tick());
        probe.record_latency(Duration::from_millis(1), true);
        t.join().unwrap();
        let s = b.snapshot();
        assert_eq!(s.generation, round + 1, "one transition out of the round: {s:?}");
        match s.state {
            State::Closed => assert_eq!(s.trip_count, 1),
            State::Open => assert_eq!(s.trip_count, 2),
            other => panic!("{other:?}"),
        }
    });
}

/// An owned handle records on its own thread (single-writer counters)
/// while a window close reads them: every record is counted once.
#[test]
fn local_handle_records_are_conserved_across_a_concurrent_tick() {
    model(|| {
        let clock = ManualClock::new();
        let b = Breaker::builder()
            .clock(clock.clone())
            .local_handles(1)
            .build()
            .unwrap();
        let h = b.local_handle().unwrap();
        let t = thread::spawn(move || {
            h.allow().unwrap().record_latency(SEC, false);
            h.allow().unwrap().record_latency(Duration::from_millis(1), true);
        });
        clock.advance(SEC);
        b.tick();
        t.join().unwrap();
        clock.advance(SEC);
        b.tick();
        let totals = b.snapshot().totals;
        assert_eq!((totals.calls, totals.errors, totals.slow), (2, 1, 1), "{totals:?}");
    });
}

/// Local shards are handed out once: two threads asking for the only one
/// never both get it, and a dropped handle frees it.
#[test]
fn a_local_shard_is_handed_out_once() {
    model(|| {
        let b = Breaker::builder().local_handles(1).build().unwrap();
        let b2 = b.clone();
        let t = thread::spawn(move || b2.local_handle().map(drop).is_ok());
        let mine = b.local_handle();
        let theirs = t.join().unwrap();
        // If both got it, theirs was dropped before mine was taken.
        if mine.is_ok() && theirs {
            assert!(b.local_handle().is_err(), "mine is still held");
        }
        assert!(mine.is_ok() || theirs);
        drop(mine);
        assert!(b.local_handle().is_ok());
    });
}

/// A call racing a trip is admitted as an ordinary call (before the trip)
/// or rejected; once the trip is done, calls are rejected for the backoff,
/// whatever the deadline's publication raced.
#[test]
fn a_call_racing_a_trip_is_admitted_before_it_or_rejected() {
    model(|| {
        let clock = ManualClock::new();
        let b = Breaker::builder().clock(clock.clone()).build().unwrap();
        let b2 = b.clone();
        let t = thread::spawn(move || b2.trip_now());
        match b.allow() {
            Ok(p) => assert!(!p.is_probe()),
            Err(r) => assert_eq!(r.retry_after(), Some(SEC)),
        }
        t.join().unwrap();
        let r = b.allow().unwrap_err();
        assert_eq!(r.retry_after(), Some(SEC));
    });
}

/// The time spent OPEN against snapshots: a breaker OPEN since 0 s, the
/// clock at 5 s; one thread's probe ends the OPEN (OPEN → HALF_OPEN, the
/// deadline withdrawn and its 5 s added) and fails (a re-open at 5 s, a
/// deadline published) while another thread snapshots. Whatever the
/// interleaving (between a CAS and its withdrawal or publication too),
/// every snapshot reads exactly 5 s: the OPEN counted once, never lost,
/// never doubled.
#[test]
fn time_open_is_read_once_against_a_racing_end_and_re_open() {
    model(|| {
        let clock = ManualClock::new();
        let b = Breaker::builder().clock(clock.clone()).build().unwrap();
        b.trip_now();
        clock.advance(5 * SEC);
        let b2 = b.clone();
        let t = thread::spawn(move || {
            let p = b2.allow().unwrap();
            assert!(p.is_probe());
            p.record(false);
        });
        for _ in 0..2 {
            assert_eq!(b.snapshot().open_time_total, 5 * SEC);
        }
        t.join().unwrap();
        assert_eq!(b.state(), State::Open);
        assert_eq!(b.snapshot().open_time_total, 5 * SEC);
    });
}

/// With in-flight tracking, the clock steps back while a window close runs
/// and a call starts: whatever the interleaving, the call (1 ms long) is
/// never counted as slow.
#[test]
fn a_call_starting_during_a_close_after_a_clock_step_is_never_slow() {
    model(|| {
        let clock = ManualClock::new();
        let b = Breaker::builder()
            .clock(clock.clone())
            .track_in_flight(true)
            .build()
            .unwrap();
        clock.advance(3 * SEC);
        let (b2, c2) = (b.clone(), clock.clone());
        let t = thread::spawn(move || {
            c2.rewind(SEC);
            let p = b2.allow().unwrap();
            c2.advance(Duration::from_millis(1));
            p.record(true);
        });
        b.tick();
        t.join().unwrap();
        for _ in 0..2 {
            clock.advance(SEC);
            b.tick();
        }
        let totals = b.snapshot().totals;
        assert_eq!((totals.calls, totals.slow), (1, 0), "{totals:?}");
    });
}

/// A probe's verdict (a transition made on the hot path, its event queued
/// for later) racing an operator's override (delivered at once): the
/// listener sees strictly increasing generations, and every transition is
/// delivered by the next tick or counted as lost.
#[test]
fn a_hot_path_transition_racing_an_override_is_delivered_in_order() {
    model(|| {
        let clock = ManualClock::new();
        let seen = Arc::new(loom::sync::Mutex::new(Vec::new()));
        let sink = Arc::clone(&seen);
        let b = Breaker::builder()
            .clock(clock.clone())
            .on_transition(move |t| sink.lock().unwrap().push(t.generation))
            .build()
            .unwrap();
        b.trip_now();
        clock.advance(SEC);
        let b2 = b.clone();
        // OPEN -> HALF_OPEN and a failed probe re-opening, on the hot path
        // (or, after the override, an ordinary failed call).
        let t = thread::spawn(move || b2.allow().unwrap().record(false));
        b.force_closed();
        t.join().unwrap();
        b.tick();
        let snap = b.snapshot();
        let seen = seen.lock().unwrap();
        assert!(seen.windows(2).all(|w| w[0] < w[1]), "{seen:?}");
        assert_eq!(seen.len() as u64 + snap.events_lost, u64::from(snap.generation));
    });
}

/// Kills, in `src/breaker/admission.rs`, `Inner::admit_half_open`:
/// `if seen.state() != State::HalfOpen || seen.generation() != word.generation()`,
/// `||` → `&&`.
///
/// With two probe slots, a caller that loaded the word of one HALF_OPEN
/// round and finds the next round at its CAS (the first re-opened, the
/// second began with one probe) retries in the new round, where a slot is
/// free: it is admitted, or, if it comes late to the re-open, rejected as
/// OPEN; never told that the probes are busy. The mutant rejects it with
/// `ProbesBusy` when the round it finds is HALF_OPEN.
#[test]
fn a_caller_that_loaded_an_earlier_round_retries_in_the_new_one() {
    model(|| {
        let clock = ManualClock::new();
        let b = Breaker::builder()
            .clock(clock.clone())
            .half_open_probes(2)
            .success_to_close(5)
            .build()
            .unwrap();
        b.trip_now();
        clock.advance(SEC);
        let first = b.allow().unwrap(); // round 1: one slot of two
        let b2 = b.clone();
        let caller = thread::spawn(move || match b2.allow() {
            Ok(p) => {
                std::mem::forget(p); // held for the rest of the model
                None
            }
            Err(r) => Some(r.reason()),
        });
        first.record(false); // round 1 re-opens: 2 s
        clock.advance(2 * SEC);
        let second = b.allow().unwrap(); // round 2: one slot of two
        let rejected = caller.join().unwrap();
        assert_ne!(rejected, Some(RejectReason::ProbesBusy));
        std::mem::forget(second);
    });
}

/// A call admitted after a transition (here a reset out of OPEN) racing
/// that transition and a window close's claim: it is never claimed as
/// stale with the call admitted before the transition that is still in
/// flight; each is counted exactly once, the old one as stale.
#[test]
fn a_call_admitted_after_a_transition_is_never_claimed_with_those_before() {
    model(|| {
        let clock = ManualClock::new();
        let b = Breaker::builder()
            .clock(clock.clone())
            .ticker(false)
            .track_in_flight(true)
            .build()
            .unwrap();
        let before = b.allow().unwrap(); // generation 0, epoch 0, in flight throughout
        clock.advance(Duration::from_millis(600)); // past the first window's end
        b.trip_now(); // generation 1: OPEN for 1 s
        let (b1, b2) = (b.clone(), b.clone());
        let reset = thread::spawn(move || b1.reset()); // generation 2: CLOSED
                                                       // Epoch 6 (87.5 ms epochs): a slot of its own.
        let admitted = thread::spawn(move || b2.allow_owned().ok());
        b.tick(); // closes the first window and claims, racing both
        reset.join().unwrap();
        let after = admitted.join().unwrap();
        clock.advance(2 * SEC);
        b.tick();
        clock.advance(SEC);
        b.tick();
        let got_in = after.is_some();
        if let Some(p) = after {
            p.record(true);
        }
        before.record(true);
        clock.advance(SEC);
        b.tick();
        let t = b.snapshot().totals;
        assert_eq!(t.stale, 1, "only the call from before the transitions: {t:?}");
        assert_eq!(
            (t.calls, t.slow),
            (u64::from(got_in), u64::from(got_in)),
            "the call after them counted once, slow: {t:?}"
        );
    });
}

/// A task parking on something else (a tower service on its inner
/// service) racing a trip: either it sees the breaker refusing when it
/// looks again after registering, or the trip wakes it. Never parked
/// behind an open breaker with nobody to wake it.
#[test]
fn a_parked_task_is_woken_or_sees_the_breaker_open() {
    use loom::sync::atomic::AtomicBool;
    struct Flag(AtomicBool);
    impl std::task::Wake for Flag {
        fn wake(self: std::sync::Arc<Self>) {
            self.0.store(true, Ordering::SeqCst);
        }
    }
    model(|| {
        let clock = ManualClock::new();
        let b = Breaker::builder().clock(clock.clone()).ticker(false).build().unwrap();
        let b2 = b.clone();
        let trip = thread::spawn(move || b2.trip_now());
        let flag = std::sync::Arc::new(Flag(AtomicBool::new(false)));
        let waker = std::task::Waker::from(std::sync::Arc::clone(&flag));
        let mut key = None;
        let refused = b.loom_park(&mut key, &waker);
        trip.join().unwrap();
        assert!(
            refused || flag.0.load(Ordering::SeqCst),
            "parked behind an open breaker, never woken"
        );
        b.loom_forget_park(&mut key);
    });
}

/// A breaker with a 10 s recovery ramp, tripped by hand, whose backoff has
/// run out: its probe is out, and the good verdict closes it into a ramp.
fn ramp_probe_out(clock: &ManualClock) -> (Breaker, tailguard::OwnedPermit) {
    let b = Breaker::builder()
        .clock(clock.clone())
        .ticker(false)
        .success_to_close(1)
        .recovery_ramp(10 * SEC)
        .build()
        .unwrap();
    b.trip_now();
    clock.advance(SEC);
    let probe = b.allow_owned().unwrap();
    assert!(probe.is_probe());
    (b, probe)
}

/// A call racing the probe whose verdict closes the breaker into its
/// recovery ramp (the CAS, then the ramp's start published): before the
/// CAS it finds the probe slot taken, after it the ramp at its first
/// instant, published or not: rejected either way, never admitted on a
/// start that is not this ramp's. Once the verdict is in, the ramp admits
/// its share, counted from the publication.
#[test]
fn a_call_racing_the_close_into_a_ramp_is_refused_and_the_share_follows() {
    model(|| {
        let clock = ManualClock::new();
        let (b, probe) = ramp_probe_out(&clock);
        let t = thread::spawn(move || probe.record(true));
        let r = b.allow().map(|p| p.is_probe()).unwrap_err();
        assert!(
            matches!(r.reason(), RejectReason::ProbesBusy | RejectReason::Ramping),
            "{r:?}"
        );
        t.join().unwrap();
        assert_eq!(b.state(), State::Closed);
        clock.advance(5 * SEC);
        let admitted = (0..4).filter(|_| b.allow().is_ok()).count();
        assert!((1..=3).contains(&admitted), "{admitted} of 4 at half way");
    });
}

/// The end of a ramp (a window close after its length) racing a trip in
/// it: the ramp ends and the trip backs off from level 0, or the trip
/// backs off from the ramp's level plus one and the end finds the word
/// moved on. Never a ramp left behind an OPEN, nor an end that resets a
/// later OPEN's level.
#[test]
fn a_ramp_s_end_racing_a_trip_in_it_backs_off_once() {
    model(|| {
        let clock = ManualClock::new();
        let (b, probe) = ramp_probe_out(&clock);
        probe.record(false); // a failed probe: level 1
        clock.advance(2 * SEC);
        b.allow().unwrap().record(true); // into the ramp, at level 1
        assert_eq!(b.snapshot().backoff_level, 1);
        clock.advance(10 * SEC);
        let b2 = b.clone();
        let t = thread::spawn(move || b2.trip_now());
        b.tick();
        t.join().unwrap();
        let s = b.snapshot();
        assert_eq!((s.state, s.ramp), (State::Open, None));
        let want = match s.backoff_level {
            0 => SEC,
            2 => 4 * SEC,
            other => panic!("level {other}"),
        };
        assert_eq!(s.next_probe_in, Some(want));
    });
}
