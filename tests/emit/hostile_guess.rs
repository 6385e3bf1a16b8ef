//! A hostile review of 8a55deb (the blocking emit finds the breaker's
//! shard and the emitter's metrics shard before its end reading, and
//! writes first at the thread's guessed bucket word / time bucket): every
//! emit here is compared with the plain path (`Breaker::allow` +
//! `Permit::record_latency` / `record_timeout` on a twin breaker, or
//! counts worked out by hand), with the thread's guess scrambled between
//! emits, across threads, through calls that recurse, trip, tick, shut
//! down, panic, and threads that exit and give their index back.
//! Two attacks found defects in 8a55deb, fixed since (the shards are
//! looked up before the reading but never built there):
//! `an_emit_through_a_disabled_breaker_builds_no_counter_shard` and
//! `the_first_emit_on_a_thread_does_not_time_the_shard_builds`. The rest
//! held; all are kept as regressions.

use crate::support::emit::*;
use crate::support::hook::HookClock;
use crate::support::*;
use std::cell::Cell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::Duration;
use tailguard::clock::{Clock, ClockSource, ManualClock};
use tailguard::dlq::{DeadLetterQueue, Priority};
use tailguard::emit::{Emitter, EmitterStats};
use tailguard::{Breaker, State};

/// A deterministic stream of numbers.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
}

/// Latencies spread over the sketch (sub-µs to minutes), in ns.
fn spread(r: &mut Lcg) -> u64 {
    match r.next() % 8 {
        0 => r.next() % 2_000,                          // bucket 0 and its neighbours
        1 => 1_000 + r.next() % 1_000_000,              // µs
        2 => 1_000_000 + r.next() % 100_000_000,        // ms, around the 50 ms threshold
        3 => 49_000_000 + r.next() % 2_000_000,         // the threshold's bucket (straddle)
        4 => 150_000_000 + r.next() % 100_000_000,      // around the 200 ms timeout
        5 => 1_000_000_000 + r.next() % 60_000_000_000, // seconds to a minute
        6 => 80_000_000_000 + r.next() % 1_000_000_000, // past the top bucket
        _ => 3_000,                                     // a favourite
    }
}

/// An emitter on a breaker of its own, emitted through only to move the
/// calling thread's guesses (`LAST_WORD`, `LAST_KEY`) somewhere else.
struct Scrambler {
    clock: ManualClock,
    e: Emitter<u32>,
}

impl Scrambler {
    fn new() -> Self {
        let clock = ManualClock::new();
        let b = builder(&clock).build().unwrap();
        let e = emitter(&b, 4);
        Self { clock, e }
    }

    /// One emit of `ns`: the thread's guesses are now that latency's word
    /// and time bucket.
    fn guess(&self, ns: u64) {
        let _ = self.e.emit_blocking(0, Priority::Routine, |_, _| {
            self.clock.advance(Duration::from_nanos(ns));
            Ok::<_, ()>(())
        });
    }
}

/// The plain path's verdict for a call the emitter times at `ns`
/// (`Host::record_call`): past the timeout a timeout, else its latency.
fn plain_record(p: &Breaker, ns: u64, ok: bool, timeout: Duration) {
    let permit = p.allow().expect("the plain twin admits");
    if Duration::from_nanos(ns) > timeout {
        permit.record_timeout(Duration::from_nanos(ns));
    } else {
        permit.record_latency(Duration::from_nanos(ns), ok);
    }
}

/// How the emit-time histogram must read for emits of `times` ns: the
/// cumulative counts (a bound is a bucket's upper edge, exactly) and the
/// sum.
fn assert_emit_times(s: &EmitterStats, times: &[u64]) {
    let cumulative = s.emit_times.cumulative();
    let last = cumulative.len() - 1;
    for (i, &(bound, n)) in cumulative.iter().enumerate() {
        // The top bucket (68.7 s) takes everything slower too.
        let expected = times
            .iter()
            .filter(|&&ns| i == last || Duration::from_nanos(ns) <= bound)
            .count() as u64;
        assert_eq!(n, expected, "emits at or below {bound:?}");
    }
    assert_eq!(s.emit_times.count(), times.len() as u64);
    let sum = times.iter().fold(0u64, |a, &t| a.wrapping_add(t));
    assert_eq!(s.emit_times.sum(), Duration::from_nanos(sum));
}

/// Closes a window on both breakers (same clock) and compares everything
/// they judged.
fn assert_twins(b: &Breaker, p: &Breaker, clock: &ManualClock, what: &str) {
    clock.advance(SEC);
    b.tick();
    p.tick();
    let (sb, sp) = (b.snapshot(), p.snapshot());
    assert_eq!(sb.window, sp.window, "{what}: window");
    assert_eq!(sb.totals, sp.totals, "{what}: totals");
    assert_eq!(sb.state, sp.state, "{what}: state");
    assert_eq!(sb.generation, sp.generation, "{what}: generation");
    assert_eq!(b.latency_histogram(), p.latency_histogram(), "{what}: histogram");
}

/// Claim 1: emits of latencies spread over the whole sketch, ok or not,
/// some past the timeout, with the thread's guesses scrambled to a random
/// latency's word before each (and sometimes left alone, so they hit),
/// count what the plain path counts; the emit times land in their own
/// buckets.
#[test]
fn scrambled_guesses_count_what_the_plain_path_counts() {
    let clock = ManualClock::new();
    let b = builder(&clock).build().unwrap();
    let p = builder(&clock).build().unwrap();
    let e = emitter::<u32>(&b, 1 << 14);
    let scr = Scrambler::new();
    let mut r = Lcg(7);
    let mut times = Vec::new();
    for round in 0..20 {
        for i in 0..500u32 {
            let ns = spread(&mut r);
            let ok = r.next() % 5 != 0;
            if r.next() % 3 == 0 {
                scr.guess(spread(&mut r));
            }
            let _ = e.emit_blocking(i, Priority::Routine, |_, _| {
                clock.advance(Duration::from_nanos(ns));
                if ok {
                    Ok(())
                } else {
                    Err(())
                }
            });
            plain_record(&p, ns, ok, e.timeout());
            times.push(ns);
        }
        assert_twins(&b, &p, &clock, &format!("round {round}"));
        // Stay closed: the twins are compared, not the policy.
        b.reset();
        p.reset();
    }
    let s = e.stats();
    assert_emit_times(&s, &times);
    assert_conserved(&s, times.len() as u64);
}

/// Claim 1, past a lane's spill point: 40,000 emits in one bucket in one
/// window (the lane spills at 2^15), with a hop to another word every 999
/// and a scramble every 1,000, count what the plain path counts.
#[test]
fn a_lane_filled_past_its_spill_point_through_guesses_counts_exactly() {
    let clock = ManualClock::new();
    let b = builder(&clock).build().unwrap();
    let p = builder(&clock).build().unwrap();
    let e = emitter::<u32>(&b, 8);
    let scr = Scrambler::new();
    let mut times = Vec::new();
    for i in 0..40_000u32 {
        let ns = if i % 999 == 998 { 5_000_000 } else { 3_000 };
        if i % 1_000 == 500 {
            scr.guess(70_000_000);
        }
        let _ = e.emit_blocking(i, Priority::Routine, |_, _| {
            clock.advance(Duration::from_nanos(ns));
            Ok::<_, ()>(())
        });
        plain_record(&p, ns, true, e.timeout());
        times.push(ns);
    }
    assert_twins(&b, &p, &clock, "spilled");
    assert_emit_times(&e.stats(), &times);
}

/// A clock each thread keeps for itself: a thread's emits time what that
/// thread advanced, whatever the others do.
struct ThreadClock;

thread_local! {
    static NOW: Cell<u64> = const { Cell::new(0) };
}

impl Clock for ThreadClock {
    fn now_nanos(&self) -> u64 {
        NOW.with(Cell::get)
    }
}

fn advance_mine(ns: u64) {
    NOW.with(|n| n.set(n.get() + ns));
}

/// Claims 1 and 3 across threads: four threads (more than the breaker's
/// one or two shards, so they share shards and each other's words) emit
/// spread latencies at once, each on its own clock, each scrambling its
/// guesses; the twin breaker gets the same verdicts through the plain
/// path from the same threads. Everything judged matches, and the emit
/// times are each in their own bucket.
#[test]
fn threads_sharing_shards_count_what_the_plain_path_counts() {
    for shards in [1usize, 2, 8] {
        let src = ClockSource::custom(Arc::new(ThreadClock));
        let mk = || {
            Breaker::builder()
                .clock(src.clone())
                .ticker(false)
                .shards(shards)
                .build()
                .unwrap()
        };
        let (b, p) = (mk(), mk());
        let e = Arc::new(emitter::<u32>(&b, 1 << 16));
        let all: Vec<u64> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..4u64)
                .map(|t| {
                    let (e, p) = (Arc::clone(&e), p.clone());
                    s.spawn(move || {
                        let scr = Scrambler::new();
                        let mut r = Lcg(100 + t);
                        let mut times = Vec::new();
                        for i in 0..6_000u32 {
                            let ns = if t == 0 { 3_000 } else { spread(&mut r) };
                            let ok = r.next() % 4 != 0;
                            if r.next() % 4 == 0 {
                                scr.guess(spread(&mut r));
                            }
                            let _ = e.emit_blocking(i, Priority::Routine, |_, _| {
                                advance_mine(ns);
                                if ok {
                                    Ok(())
                                } else {
                                    Err(())
                                }
                            });
                            plain_record(&p, ns, ok, e.timeout());
                            times.push(ns);
                        }
                        times
                    })
                })
                .collect();
            hs.into_iter().flat_map(|h| h.join().unwrap()).collect()
        });
        advance_mine(1_000_000_000);
        b.tick();
        p.tick();
        let (sb, sp) = (b.snapshot(), p.snapshot());
        assert_eq!(sb.window, sp.window, "{shards} shards: window");
        assert_eq!(sb.totals, sp.totals, "{shards} shards: totals");
        assert_eq!(b.latency_histogram(), p.latency_histogram(), "{shards} shards");
        let s = e.stats();
        assert_emit_times(&s, &all);
        assert_conserved(&s, all.len() as u64);
    }
}

/// Claim 3: the call emits through the same emitter (and through another
/// emitter on another breaker) recursively, two deep, each inner emit of
/// its own latency in another word: every verdict counts where the plain
/// path counts it, and each emit time in its own bucket.
#[test]
fn recursive_emits_on_the_same_and_another_emitter_count_as_the_plain_path() {
    let clock = ManualClock::new();
    let b = builder(&clock).build().unwrap();
    let p = builder(&clock).build().unwrap();
    let b2 = builder(&clock).build().unwrap();
    let p2 = builder(&clock).build().unwrap();
    let e = emitter::<u32>(&b, 64);
    let e2 = emitter::<u32>(&b2, 64);
    // Outer 3 µs before, 70 ms inner on e, 2 s inner on e2 (timed out),
    // 40 ms after: outer = 3 µs + 70 ms + 2 s + 40 ms (timed out too).
    let out = e.emit_blocking(1, Priority::Routine, |_, _| {
        clock.advance(Duration::from_micros(3));
        let inner = e.emit_blocking(2, Priority::Routine, |_, _| {
            clock.advance(70 * MS);
            let inner2 = e2.emit_blocking(3, Priority::Routine, |_, _| {
                clock.advance(2 * SEC);
                Err::<(), _>("late")
            });
            assert!(!inner2.is_delivered());
            Ok::<_, &str>(())
        });
        assert!(inner.is_delivered());
        clock.advance(40 * MS);
        Ok::<_, &str>(())
    });
    assert!(out.is_delivered());
    let to = e.timeout();
    plain_record(&p2, 2_000_000_000, false, to);
    plain_record(&p, 2_070_000_000, true, to);
    plain_record(&p, 2_070_000_000 + 3_000 + 40_000_000, true, to);
    assert_twins(&b, &p, &clock, "outer emitter");
    assert_twins(&b2, &p2, &clock, "inner emitter");
    let s = e.stats();
    assert_emit_times(&s, &[2_070_000_000, 2_110_003_000]);
    assert_eq!((s.delivered, s.overran), (2, 2));
    assert_emit_times(&e2.stats(), &[2_000_000_000]);
}

/// Claim 3: a call that trips, resets, forces or disables the breaker
/// makes its own permit stale (or not, for a mode change that keeps the
/// generation): what it counts is what the plain path counts for a
/// permit held across the same change.
#[test]
fn a_call_that_changes_the_breaker_counts_its_verdict_as_the_plain_path() {
    type Act = fn(&Breaker);
    let acts: [(&str, Act); 7] = [
        ("trip_now", |b| b.trip_now()),
        ("reset", |b| {
            b.trip_now();
            b.reset()
        }),
        ("force_open", |b| b.force_open()),
        ("force_closed", |b| b.force_closed()),
        ("disable", |b| b.disable()),
        ("metrics_only", |b| b.metrics_only()),
        ("trip then force_closed", |b| {
            b.trip_now();
            b.force_closed()
        }),
    ];
    for (name, act) in acts {
        for ok in [true, false] {
            for ns in [3_000u64, 70_000_000, 300_000_000] {
                let clock = ManualClock::new();
                let b = builder(&clock).build().unwrap();
                let p = builder(&clock).build().unwrap();
                let e = emitter::<u32>(&b, 8);
                let scr = Scrambler::new();
                scr.guess(ns);
                let _ = e.emit_blocking(1, Priority::Routine, |_, _| {
                    act(&b);
                    clock.advance(Duration::from_nanos(ns));
                    if ok {
                        Ok(())
                    } else {
                        Err(())
                    }
                });
                let permit = p.allow().unwrap();
                act(&p);
                if Duration::from_nanos(ns) > e.timeout() {
                    permit.record_timeout(Duration::from_nanos(ns));
                } else {
                    permit.record_latency(Duration::from_nanos(ns), ok);
                }
                assert_twins(&b, &p, &clock, &format!("{name}, ok {ok}, {ns} ns"));
                assert_emit_times(&e.stats(), &[ns]);
            }
        }
    }
}

/// Claims 3 and 4: with in-flight tracking, a call that advances the
/// clock past the threshold and the window and closes it (`tick`) from
/// inside is counted slow in flight by that close; its verdict then is
/// not counted again (only its error, if it failed). As the plain path.
#[test]
fn a_call_that_closes_its_own_window_in_flight_is_counted_once() {
    for ok in [true, false] {
        for inside_ns in [60_000_000u64, 1_500_000_000] {
            let clock = ManualClock::new();
            let mk = || builder(&clock).track_in_flight(true).trip_windows(100).build().unwrap();
            let (b, p) = (mk(), mk());
            let e = emitter::<u32>(&b, 8);
            let scr = Scrambler::new();
            scr.guess(inside_ns + 30_000_000);
            let _ = e.emit_blocking(1, Priority::Routine, |_, _| {
                clock.advance(Duration::from_nanos(inside_ns));
                b.tick();
                clock.advance(30 * MS);
                if ok {
                    Ok(())
                } else {
                    Err(())
                }
            });
            let bw = b.snapshot().window;
            // The plain twin: the permit taken at the same start.
            clock.rewind(Duration::from_nanos(inside_ns) + 30 * MS);
            let permit = p.allow().unwrap();
            clock.advance(Duration::from_nanos(inside_ns));
            p.tick();
            clock.advance(30 * MS);
            let total = Duration::from_nanos(inside_ns) + 30 * MS;
            if total > e.timeout() {
                permit.record_timeout(total);
            } else {
                permit.record_latency(total, ok);
            }
            assert_eq!(
                bw,
                p.snapshot().window,
                "the close inside the call, ok {ok}, {inside_ns} ns"
            );
            assert_twins(&b, &p, &clock, &format!("after, ok {ok}, {inside_ns} ns"));
            let t = b.snapshot().totals;
            assert_eq!(t.calls, 1, "counted once, ok {ok}, {inside_ns} ns: {t:?}");
        }
    }
}

/// Claim 3: a call that shuts its emitter down (and fails, so its trigger
/// is handed back) still counts its verdict and its emit time once.
#[test]
fn a_call_that_shuts_its_emitter_down_counts_once() {
    for ok in [true, false] {
        let clock = ManualClock::new();
        let b = builder(&clock).build().unwrap();
        let p = builder(&clock).build().unwrap();
        let e = emitter::<u32>(&b, 8);
        let out = e.emit_blocking(1, Priority::Routine, |_, _| {
            e.shutdown(|_, _| {});
            clock.advance(80 * MS);
            if ok {
                Ok(())
            } else {
                Err(())
            }
        });
        assert_eq!(out.is_delivered(), ok);
        plain_record(&p, 80_000_000, ok, e.timeout());
        assert_twins(&b, &p, &clock, &format!("shut down, ok {ok}"));
        let s = e.stats();
        assert_emit_times(&s, &[80_000_000]);
        assert_eq!((s.delivered, s.handed_back_shut_down), (u64::from(ok), u64::from(!ok)));
        assert_conserved(&s, 1);
    }
}

/// Claim 3: a panicking call (the panic path, `Host::panicked`) between
/// guessed emits: a failure of the time it ran, its trigger queued with
/// its emit time; the emits around it count as the plain path.
#[test]
fn a_panicking_call_between_guessed_emits_counts_as_the_plain_path() {
    let clock = ManualClock::new();
    let b = builder(&clock).build().unwrap();
    let p = builder(&clock).build().unwrap();
    let e = emitter::<u32>(&b, 8);
    let mut times = Vec::new();
    for (i, ns) in [3_000u64, 90_000_000, 3_000, 3_000_000_000, 70_000_000]
        .into_iter()
        .enumerate()
    {
        let _ = e.emit_blocking(i as u32, Priority::Routine, |_, _| {
            clock.advance(Duration::from_nanos(ns));
            Ok::<_, ()>(())
        });
        plain_record(&p, ns, true, e.timeout());
        times.push(ns);
        let caught = catch_unwind(AssertUnwindSafe(|| {
            e.emit_blocking(9, Priority::Routine, |_, _| -> Result<(), ()> {
                clock.advance(40 * MS);
                panic!("a consumer bug (expected by this test)")
            })
        }));
        assert!(caught.is_err());
        // The panic path records the plain way (a failure at 40 ms).
        p.allow().unwrap().record_latency(40 * MS, false);
        times.push(40_000_000);
    }
    assert_twins(&b, &p, &clock, "panics between");
    let s = e.stats();
    assert_emit_times(&s, &times);
    assert_eq!(s.diverted_failed, 5);
}

/// Claim 3: a HALF_OPEN probe through the guessed path decides its round
/// as the plain path's probe does: a good one closes, a slow one and a
/// failed one re-open; the windows and totals match.
#[test]
fn a_probe_through_the_guessed_path_decides_as_the_plain_path() {
    for (ns, ok) in [
        (3_000u64, true),
        (90_000_000, true),
        (3_000, false),
        (5_000_000_000, true),
    ] {
        let clock = ManualClock::new();
        let b = breaker(&clock);
        let p = breaker(&clock);
        let e = emitter::<u32>(&b, 8);
        b.trip_now();
        p.trip_now();
        clock.advance(2 * SEC);
        let scr = Scrambler::new();
        scr.guess(ns);
        let _ = e.emit_blocking(1, Priority::Routine, |_, _| {
            clock.advance(Duration::from_nanos(ns));
            if ok {
                Ok(())
            } else {
                Err(())
            }
        });
        let permit = p.allow().unwrap();
        assert!(permit.is_probe());
        if Duration::from_nanos(ns) > e.timeout() {
            permit.record_timeout(Duration::from_nanos(ns));
        } else {
            permit.record_latency(Duration::from_nanos(ns), ok);
        }
        assert_eq!(b.state(), p.state(), "probe {ns} ns ok {ok}");
        assert_eq!(b.snapshot().generation, p.snapshot().generation);
        assert_twins(&b, &p, &clock, &format!("probe {ns} ns ok {ok}"));
        assert_emit_times(&e.stats(), &[ns]);
    }
}

/// Claim 3 (a disabled breaker behaves as before): a disabled breaker
/// measures nothing, and an emit through it, like a plain permit of it,
/// never builds a counter shard: the breaker's memory stays where it was.
/// Emits from four threads at once (four thread indices) through a
/// disabled breaker of eight shards, against the plain path on a twin.
#[test]
fn an_emit_through_a_disabled_breaker_builds_no_counter_shard() {
    for track in [false, true] {
        let clock = ManualClock::new();
        let mk = || builder(&clock).shards(8).track_in_flight(track).build().unwrap();
        let (b, p) = (mk(), mk());
        b.disable();
        p.disable();
        let e = emitter::<u32>(&b, 8);
        let (mb, mp) = (b.memory_bytes(), p.memory_bytes());
        let all_in = std::sync::Barrier::new(4);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    // Four threads alive at once: four thread indices.
                    all_in.wait();
                    let out = e.emit_blocking(1, Priority::Routine, |_, _| Ok::<_, ()>(()));
                    assert!(out.is_delivered());
                    p.allow().unwrap().record_latency(MS, true);
                    all_in.wait();
                });
            }
        });
        assert_eq!(p.memory_bytes(), mp, "the plain path builds nothing (track {track})");
        assert_eq!(
            b.memory_bytes(),
            mb,
            "emits through a disabled breaker built counter shards (track {track})"
        );
        assert_twins(&b, &p, &clock, "disabled");
    }
}

/// A clock that reads the bytes a breaker and its emitter hold: what an
/// emit's interval contains of their allocations, as time.
struct BytesClock(Arc<std::sync::OnceLock<(&'static Breaker, &'static Emitter<u32>)>>);

impl Clock for BytesClock {
    fn now_nanos(&self) -> u64 {
        self.0
            .get()
            .map_or(0, |(b, e)| (b.memory_bytes() + e.memory_bytes()) as u64)
    }
}

/// Claim 1 (an emit's verdict and time counted exactly as before): the
/// emit's interval is the call's, from the start reading to the end
/// reading; before 8a55deb the thread's first emit built the breaker's
/// counter shard and the emitter's metrics shard after its end reading
/// (at the verdict and at the emit time). On a clock that reads the bytes
/// the two hold, a call that allocates nothing of theirs takes 0.
#[test]
fn the_first_emit_on_a_thread_does_not_time_the_shard_builds() {
    let cell = Arc::new(std::sync::OnceLock::new());
    let src = ClockSource::custom(Arc::new(BytesClock(Arc::clone(&cell))));
    let b = leak(Breaker::builder().clock(src).ticker(false).shards(4).build().unwrap());
    let e: &'static Emitter<u32> = Box::leak(Box::new(emitter::<u32>(b, 8)));
    let _ = cell.set((b, e));
    let out = std::thread::spawn(move || e.emit_blocking(1, Priority::Routine, |_, _| Ok::<_, ()>(())))
        .join()
        .unwrap();
    assert!(out.is_delivered());
    let s = e.stats();
    assert_eq!(
        s.emit_times.sum(),
        Duration::ZERO,
        "the first emit's time includes the shard builds"
    );
}

/// Claim 3: threads that exit give their index back and new threads
/// take it (so a shard, and a shard's words, see threads come and go);
/// one emits from a thread-local destructor as its thread exits. Every
/// verdict counts as the plain path's.
#[test]
fn threads_exiting_and_reusing_indices_count_as_the_plain_path() {
    struct AtExit(Option<Box<dyn FnOnce()>>);
    impl Drop for AtExit {
        fn drop(&mut self) {
            if let Some(f) = self.0.take() {
                f();
            }
        }
    }
    thread_local! {
        static AT_EXIT: std::cell::RefCell<AtExit> = const { std::cell::RefCell::new(AtExit(None)) };
    }
    let clock = ManualClock::new();
    let mk = || builder(&clock).shards(2).build().unwrap();
    let (b, p) = (mk(), mk());
    let e = Arc::new(emitter::<u32>(&b, 1 << 12));
    let mut times = Vec::new();
    let mut r = Lcg(3);
    for gen in 0..12u64 {
        let ns: Vec<u64> = (0..40).map(|_| spread(&mut r)).collect();
        let exit_ns = spread(&mut r);
        times.extend(&ns);
        times.push(exit_ns);
        {
            let (e, p, clock, ns) = (Arc::clone(&e), p.clone(), clock.clone(), ns.clone());
            // A joined thread (not a scoped one): `join` waits for its
            // thread-local destructors, the exit emit among them.
            std::thread::spawn(move || {
                for (i, &ns) in ns.iter().enumerate() {
                    let _ = e.emit_blocking(i as u32, Priority::Routine, |_, _| {
                        clock.advance(Duration::from_nanos(ns));
                        Ok::<_, ()>(())
                    });
                    plain_record(&p, ns, true, e.timeout());
                }
                // As this thread exits: one more emit and its plain twin.
                let (e2, p2, c2) = (Arc::clone(&e), p.clone(), clock.clone());
                let f: Box<dyn FnOnce()> = Box::new(move || {
                    let _ = e2.emit_blocking(99, Priority::Routine, |_, _| {
                        c2.advance(Duration::from_nanos(exit_ns));
                        Ok::<_, ()>(())
                    });
                    plain_record(&p2, exit_ns, true, e2.timeout());
                });
                AT_EXIT.with(|a| a.borrow_mut().0 = Some(f));
            })
            .join()
            .unwrap();
        }
        assert_twins(&b, &p, &clock, &format!("thread generation {gen}"));
        b.reset();
        p.reset();
    }
    assert_emit_times(&e.stats(), &times);
}

/// Claim 3, at the instant the commit opened: the shard is found, then
/// the end reading is taken, then the verdict recorded. A clock hook that
/// runs at the end reading (between the two) trips the breaker, emits
/// recursively on the same emitter (moving the guesses), or closes the
/// window: counted as the plain path counts a permit across the same.
#[test]
fn a_hook_at_the_end_reading_counts_as_the_plain_path() {
    type Act = fn(&Breaker, &Emitter<u32>, &HookClock);
    let acts: [(&str, Act); 3] = [
        ("trip", |b, _, _| b.trip_now()),
        ("emit", |_, e, c| {
            let _ = e.emit_blocking(7, Priority::Routine, |_, _| {
                c.advance(Duration::from_secs(3));
                Ok::<_, ()>(())
            });
        }),
        ("tick", |b, _, c| {
            c.advance(SEC);
            b.tick()
        }),
    ];
    for (name, act) in acts {
        for track in [false, true] {
            let clock = HookClock::new();
            let b = leak(
                Breaker::builder()
                    .clock(clock.source())
                    .ticker(false)
                    .track_in_flight(track)
                    .trip_windows(100)
                    .build()
                    .unwrap(),
            );
            let e: &'static Emitter<u32> = Box::leak(Box::new(emitter::<u32>(b, 8)));
            let out = e.emit_blocking(1, Priority::Routine, |_, _| {
                clock.advance(70 * MS);
                let c = clock.clone();
                // The next read is the emit's end reading.
                clock.at_read(1, move || act(b, e, &c));
                Ok::<_, ()>(())
            });
            assert!(out.is_delivered());
            assert!(clock.fired());
            clock.advance(SEC);
            b.tick();
            let t = b.snapshot().totals;
            let w = b.snapshot().window;
            match name {
                // The permit of the generation before the trip: stale.
                "trip" => assert_eq!((t.calls, t.stale), (0, 1), "{name} track {track}: {t:?}"),
                // Inner 3 s (timed out, slow), outer 70 ms: both slow.
                "emit" => assert_eq!((t.calls, t.slow, t.errors), (2, 2, 1), "{name} track {track}: {t:?}"),
                // Counted in the window after the close: once.
                // (with tracking, by the close in the hook, in flight).
                _ => assert_eq!(
                    (t.calls, t.slow, w.calls),
                    (1, 1, u64::from(!track)),
                    "{name} track {track}: {t:?} {w:?}"
                ),
            }
        }
    }
}

/// Claim 2: the breaker's own allow/record path beside guessed emits on
/// the same thread and breaker: records through `Permit::record`,
/// `record_latency`, `record_timeout`, drops (cancelled), all mixed with
/// emits, count as the same sequence on a twin without the emitter.
#[test]
fn the_plain_path_mixed_with_guessed_emits_on_one_breaker_counts_the_same() {
    let clock = ManualClock::new();
    let b = builder(&clock).build().unwrap();
    let p = builder(&clock).build().unwrap();
    let e = emitter::<u32>(&b, 1 << 12);
    let mut r = Lcg(11);
    for i in 0..3_000u32 {
        let ns = spread(&mut r);
        match r.next() % 4 {
            0 => {
                let _ = e.emit_blocking(i, Priority::Routine, |_, _| {
                    clock.advance(Duration::from_nanos(ns));
                    Ok::<_, ()>(())
                });
                plain_record(&p, ns, true, e.timeout());
            }
            1 => {
                for x in [&b, &p] {
                    x.allow().unwrap().record_latency(Duration::from_nanos(ns), i % 3 == 0);
                }
            }
            2 => {
                for x in [&b, &p] {
                    x.allow().unwrap().record_timeout(Duration::from_nanos(ns));
                }
            }
            _ => {
                for x in [&b, &p] {
                    drop(x.allow().unwrap());
                }
            }
        }
        if i % 500 == 499 {
            assert_twins(&b, &p, &clock, &format!("at {i}"));
            b.reset();
            p.reset();
        }
    }
    assert_eq!(b.state(), State::Closed);
}

/// Claim 1 with a bulkhead and a shared DLQ: diverted emits (open
/// breaker, full queue handed back) take the path before 8a55deb; mixed
/// with guessed ones their emit times still land each in its own bucket.
#[test]
fn diverted_and_guessed_emits_mixed_keep_every_emit_time() {
    let clock = ManualClock::new();
    let b = builder(&clock).build().unwrap();
    let e: Emitter<u32> = Emitter::builder(b.clone(), DeadLetterQueue::with_capacity(2).unwrap())
        .bulkhead(4)
        .unwrap()
        .timeout(200 * MS)
        .unwrap()
        .build()
        .unwrap();
    let mut times = Vec::new();
    let mut r = Lcg(5);
    for i in 0..400u32 {
        let ns = spread(&mut r);
        if i % 50 == 10 {
            b.trip_now();
        }
        if i % 50 == 20 {
            b.reset();
        }
        let called = Cell::new(false);
        let out = e.emit_blocking(i, Priority::Routine, |_, _| {
            called.set(true);
            clock.advance(Duration::from_nanos(ns));
            if i % 3 == 0 {
                Err(())
            } else {
                Ok(())
            }
        });
        times.push(if called.get() { ns } else { 0 });
        let _ = out;
    }
    let s = e.stats();
    assert_emit_times(&s, &times);
    assert_conserved(&s, 400);
}
