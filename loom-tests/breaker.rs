//! Loom models of the breaker's concurrent protocols.
//!
//! Run: `RUSTFLAGS="--cfg tailguard_loom" LOOM_MAX_PREEMPTIONS=2 cargo test --release --test loom_breaker`
#![cfg(tailguard_loom)]

use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::sync::Arc;
use loom::thread;
use std::time::Duration;
use tailguard::clock::ManualClock;
use tailguard::{Breaker, State};

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
