//! A hostile review of 6014282 (the per-core `LocalEmitter`'s blocking
//! emit finds its `LocalHandle`'s shard before the end reading, and
//! records the verdict with `LocalShard::record_guessed` and the emit time
//! with `LocalMetrics::emit_time`, each first at the bucket the thread's
//! last guessed record went to: the thread-locals `LAST_BUCKET` and
//! `LAST_KEY`, the latter shared with the shared emitter). Every emit here
//! is compared with the plain path (`LocalHandle::allow` +
//! `LocalPermit::record_latency` / `record_timeout` on a twin breaker's
//! handle, or counts worked out by hand), with the thread's guesses moved
//! between emits by other per-core emitters, by shared emitters, by
//! emitters on breakers of other thresholds, across recursion, trips,
//! ticks, probes, panics, a disabled breaker, a clock that steps back,
//! latencies from 0 to `u64::MAX`, a window close on another thread, and
//! an emitter moved from thread to thread.
//!
//! Every attack held on 6014282, and all pass on its parent too. That they
//! can fail was checked by two mutants of 6014282 (a guessed breaker add of
//! one at bucket 0 for a call of bucket 1; a time counted at the guess when
//! the real bucket is the next one): six and nine of these tests failed.
//! The emit-time buckets are checked exactly with the sketch's own rule
//! (`key_of`): a value at a power of two (2048 ns) sits in the bucket
//! above that bound's, as `EmitTimes::cumulative` allows (within 1/256).
//! The loom model of the same race is `loom-tests/hostile_local_guess.rs`.

use crate::support::emit::*;
use crate::support::hook::HookClock;
use crate::support::*;
use std::cell::Cell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tailguard::clock::{Clock, ClockSource, ManualClock};
use tailguard::dlq::{DeadLetterQueue, Priority};
use tailguard::emit::{Emitted, Emitter, EmitterStats, LocalEmitter};
use tailguard::{Breaker, LocalHandle, State};

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
    match r.next() % 9 {
        0 => r.next() % 2_000,                          // bucket 0 and its neighbours
        1 => 1_000 + r.next() % 1_000_000,              // µs
        2 => 1_000_000 + r.next() % 100_000_000,        // ms, around the 50 ms threshold
        3 => 49_000_000 + r.next() % 2_000_000,         // the threshold's bucket (straddle)
        4 => 150_000_000 + r.next() % 100_000_000,      // around the 200 ms timeout
        5 => 1_000_000_000 + r.next() % 60_000_000_000, // seconds to a minute
        6 => 80_000_000_000 + r.next() % 1_000_000_000, // past the top bucket
        7 => 50_000_000 + r.next() % 3 - 1,             // threshold - 1, threshold, + 1
        _ => 3_000,                                     // a favourite
    }
}

/// A breaker builder on `clock` with `n` local shards.
fn local_builder(clock: &ManualClock, n: usize) -> tailguard::BreakerBuilder {
    builder(clock).local_handles(n)
}

/// A per-core emitter over `b`, 200 ms timeout, queue of `capacity`.
fn local<T>(b: &Breaker, capacity: usize) -> LocalEmitter<T> {
    LocalEmitter::builder(b.clone(), DeadLetterQueue::with_capacity(capacity).unwrap())
        .timeout(200 * MS)
        .unwrap()
        .build_local()
        .unwrap()
}

/// Emitters on breakers of their own, emitted through only to move the
/// calling thread's guesses (`LAST_BUCKET` and `LAST_KEY` through the
/// per-core one, `LAST_WORD` and `LAST_KEY` through the shared one).
struct Scrambler {
    clock: ManualClock,
    local: LocalEmitter<u32>,
    shared: Emitter<u32>,
}

impl Scrambler {
    fn new() -> Self {
        let clock = ManualClock::new();
        // Another threshold (1 ms): another straddle bucket.
        let b = local_builder(&clock, 1).latency_threshold(MS).build().unwrap();
        let local = local(&b, 4);
        let shared = emitter(&b, 4);
        Self { clock, local, shared }
    }

    /// One emit of `ns` through the per-core scrambler.
    fn guess(&self, ns: u64) {
        let _ = self.local.emit_blocking(0, Priority::Routine, |_, _| {
            self.clock.advance(Duration::from_nanos(ns));
            Ok::<_, ()>(())
        });
    }

    /// One emit of `ns` through the shared scrambler (moves `LAST_KEY`
    /// only, of the per-core emitter's guesses).
    fn guess_shared(&self, ns: u64) {
        let _ = self.shared.emit_blocking(0, Priority::Routine, |_, _| {
            self.clock.advance(Duration::from_nanos(ns));
            Ok::<_, ()>(())
        });
    }
}

/// The plain path's verdict for a call the emitter times at `ns`
/// (`Host::record_call`): past the timeout a timeout, else its latency.
fn plain_record(h: &LocalHandle, ns: u64, ok: bool, timeout: Duration) {
    let permit = h.allow().expect("the plain twin admits");
    if Duration::from_nanos(ns) > timeout {
        permit.record_timeout(Duration::from_nanos(ns));
    } else {
        permit.record_latency(Duration::from_nanos(ns), ok);
    }
}

/// The emit-time bucket of `ns` (the sketch's key, `src/sketch.rs`
/// `key_index`, written again here: eight per octave from 2^10 ns, a
/// 256-entry table on the eight bits after the leading one; a value within
/// 1/256 of an edge may sit in the bucket above, as the docs allow).
fn key_of(ns: u64) -> usize {
    const TOP: usize = 8 * 26;
    if ns <= 1 << 10 {
        return 0;
    }
    let table = |m: u128| -> usize {
        let x = 513 + 2 * m;
        let x8 = x * x * x * x * x * x * x * x;
        let mut j = 0;
        while x8 > (1u128 << (72 + j)) {
            j += 1;
        }
        j
    };
    let lz = ns.leading_zeros();
    let exp = 63 - lz;
    let mantissa = ((ns << lz) << 1 >> 56) as u128;
    (8 * (exp - 10) as usize + table(mantissa)).min(TOP)
}

/// How the emit-time histogram must read for emits of `times` ns: the
/// cumulative count at each power of two is the emits whose bucket is at
/// or below that bound's (bucket 8j for 2^(10 + j)), the sum exact.
fn assert_emit_times(s: &EmitterStats, times: &[u64], what: &str) {
    let cumulative = s.emit_times.cumulative();
    for (j, &(bound, n)) in cumulative.iter().enumerate() {
        let expected = times.iter().filter(|&&ns| key_of(ns) <= 8 * j).count() as u64;
        assert_eq!(n, expected, "{what}: emits at or below {bound:?}");
        // And within 1/256 of the plain reading of the bound.
        let b = bound.as_nanos() as u64;
        let low = times.iter().filter(|&&ns| ns <= b - b / 256).count() as u64;
        let high = if j == cumulative.len() - 1 {
            times.len() as u64
        } else {
            times.iter().filter(|&&ns| ns <= b + b / 256).count() as u64
        };
        assert!(
            (low..=high).contains(&n),
            "{what}: {n} emits at or below {bound:?}, not in {low}..={high}"
        );
    }
    assert_eq!(s.emit_times.count(), times.len() as u64, "{what}: emit count");
    let sum = times.iter().fold(0u64, |a, &t| a.wrapping_add(t));
    assert_eq!(s.emit_times.sum(), Duration::from_nanos(sum), "{what}: emit time sum");
}

/// Closes a window on both breakers (same clock) and compares everything
/// they judged.
fn assert_twins(b: &Breaker, p: &Breaker, clock: &ManualClock, what: &str) {
    clock.advance(SEC);
    b.tick();
    p.tick();
    compare(b, p, what);
}

fn compare(b: &Breaker, p: &Breaker, what: &str) {
    let (sb, sp) = (b.snapshot(), p.snapshot());
    assert_eq!(sb.window, sp.window, "{what}: window");
    assert_eq!(sb.totals, sp.totals, "{what}: totals");
    assert_eq!(sb.state, sp.state, "{what}: state");
    assert_eq!(sb.generation, sp.generation, "{what}: generation");
    assert_eq!(b.latency_histogram(), p.latency_histogram(), "{what}: histogram");
}

fn result(ok: bool) -> Result<(), ()> {
    if ok {
        Ok(())
    } else {
        Err(())
    }
}

/// Spread latencies, ok or not, some past the timeout, the thread's
/// guesses scrambled before a third of the emits (by a per-core or a
/// shared emitter of another breaker, or left alone so they hit): the
/// per-core emitter counts what its twin's plain handle counts, and every
/// emit time lands in its own bucket.
#[test]
fn scrambled_local_guesses_count_what_the_plain_local_path_counts() {
    let clock = ManualClock::new();
    let b = local_builder(&clock, 1).build().unwrap();
    let p = local_builder(&clock, 1).build().unwrap();
    let ph = p.local_handle().unwrap();
    let e = local::<u32>(&b, 1 << 14);
    let scr = Scrambler::new();
    let mut r = Lcg(17);
    let mut times = Vec::new();
    let mut delivered = 0;
    for round in 0..20 {
        for i in 0..500u32 {
            let ns = spread(&mut r);
            let ok = r.next() % 5 != 0;
            match r.next() % 6 {
                0 => scr.guess(spread(&mut r)),
                1 => scr.guess_shared(spread(&mut r)),
                _ => {}
            }
            let out = e.emit_blocking(i, Priority::Routine, |_, _| {
                clock.advance(Duration::from_nanos(ns));
                result(ok)
            });
            delivered += u64::from(out.is_delivered());
            assert_eq!(out.is_delivered(), ok, "emit {i}");
            plain_record(&ph, ns, ok, e.timeout());
            times.push(ns);
        }
        assert_twins(&b, &p, &clock, &format!("round {round}"));
        b.reset();
        p.reset();
    }
    let s = e.stats();
    assert_emit_times(&s, &times, "scrambled");
    assert_eq!(s.delivered, delivered);
    assert_conserved(&s, times.len() as u64);
}

/// Many thousands of emits whose buckets hop on every emit (the guess
/// misses every time), then long runs (it hits), then period-3 hops,
/// with failures, in one window: counted as the plain path, each emit
/// time in its own bucket.
#[test]
fn thousands_of_local_emits_hopping_buckets_count_exactly() {
    let clock = ManualClock::new();
    let b = local_builder(&clock, 1).build().unwrap();
    let p = local_builder(&clock, 1).build().unwrap();
    let ph = p.local_handle().unwrap();
    let e = local::<u32>(&b, 1 << 16);
    let mut times = Vec::new();
    let pattern = |i: u32| -> u64 {
        match i / 20_000 {
            0 => [3_000u64, 70_000_000][i as usize % 2],
            1 => {
                if (i / 1_000) % 2 == 0 {
                    3_000
                } else {
                    49_999_999
                }
            }
            _ => [0u64, 50_000_001, 50_000_000][i as usize % 3],
        }
    };
    for i in 0..60_000u32 {
        let ns = pattern(i);
        let ok = i % 13 != 5;
        let _ = e.emit_blocking(i, Priority::Routine, |_, _| {
            clock.advance(Duration::from_nanos(ns));
            result(ok)
        });
        plain_record(&ph, ns, ok, e.timeout());
        times.push(ns);
    }
    assert_twins(&b, &p, &clock, "hopping");
    assert_emit_times(&e.stats(), &times, "hopping");
}

/// Several per-core emitters on one thread: two on one breaker (its two
/// local shards), and three on breakers of thresholds 1 µs, 50 ms and
/// 10 s (so a bucket index means another straddle and another slow
/// side), a shared emitter on the first breaker, and the first breaker's
/// third local handle used by hand (`allow` + `record_latency`,
/// `record`, `record_timeout`, drops, `abandon`), interleaved at random.
/// Each breaker is compared with a twin driven through plain handles,
/// and each emitter's emit times with the latencies it was given.
#[test]
fn local_emitters_sharing_a_thread_and_a_breaker_count_as_the_plain_path() {
    let clock = ManualClock::new();
    let thresholds = [50 * MS, Duration::from_micros(1), 10 * SEC];
    let mk = |t: Duration| local_builder(&clock, 3).latency_threshold(t).build().unwrap();
    let bs: Vec<Breaker> = thresholds.iter().map(|&t| mk(t)).collect();
    let ps: Vec<Breaker> = thresholds.iter().map(|&t| mk(t)).collect();
    // Emitters: 0 and 1 on breaker 0, 2 on breaker 1, 3 on breaker 2.
    let es: Vec<LocalEmitter<u32>> = vec![
        local(&bs[0], 1 << 12),
        local(&bs[0], 1 << 12),
        local(&bs[1], 1 << 12),
        local(&bs[2], 1 << 12),
    ];
    let on = [0usize, 0, 1, 2];
    let phs: Vec<LocalHandle> = vec![
        ps[0].local_handle().unwrap(),
        ps[0].local_handle().unwrap(),
        ps[1].local_handle().unwrap(),
        ps[2].local_handle().unwrap(),
    ];
    let shared = emitter::<u32>(&bs[0], 1 << 12);
    let hand = bs[0].local_handle().unwrap();
    let hand_twin = ps[0].local_handle().unwrap();
    let mut times: Vec<Vec<u64>> = vec![Vec::new(); 4];
    let mut shared_times = Vec::new();
    let mut r = Lcg(23);
    for round in 0..6 {
        for i in 0..2_000u32 {
            let ns = spread(&mut r);
            let ok = r.next() % 4 != 0;
            match r.next() % 7 {
                k @ 0..=3 => {
                    let k = k as usize;
                    let _ = es[k].emit_blocking(i, Priority::Routine, |_, _| {
                        clock.advance(Duration::from_nanos(ns));
                        result(ok)
                    });
                    plain_record(&phs[k], ns, ok, es[k].timeout());
                    times[k].push(ns);
                }
                4 => {
                    let _ = shared.emit_blocking(i, Priority::Routine, |_, _| {
                        clock.advance(Duration::from_nanos(ns));
                        result(ok)
                    });
                    // The shared emitter's verdict goes to a shared shard;
                    // the twin's plain shared path.
                    let permit = ps[0].allow().unwrap();
                    if Duration::from_nanos(ns) > shared.timeout() {
                        permit.record_timeout(Duration::from_nanos(ns));
                    } else {
                        permit.record_latency(Duration::from_nanos(ns), ok);
                    }
                    shared_times.push(ns);
                }
                5 => {
                    let lat = Duration::from_nanos(ns);
                    match r.next() % 5 {
                        0 => {
                            hand.allow().unwrap().record_latency(lat, ok);
                            hand_twin.allow().unwrap().record_latency(lat, ok);
                        }
                        1 => {
                            hand.allow().unwrap().record_timeout(lat);
                            hand_twin.allow().unwrap().record_timeout(lat);
                        }
                        2 => {
                            drop(hand.allow().unwrap());
                            drop(hand_twin.allow().unwrap());
                        }
                        3 => {
                            hand.allow().unwrap().abandon();
                            hand_twin.allow().unwrap().abandon();
                        }
                        _ => {
                            // Measured by the breaker's clock: both
                            // permits see the same advance.
                            let (x, y) = (hand.allow().unwrap(), hand_twin.allow().unwrap());
                            clock.advance(lat);
                            x.record(ok);
                            y.record(ok);
                        }
                    }
                }
                _ => {
                    // A hand-made record on a breaker's own `allow` too.
                    let k = (r.next() % 3) as usize;
                    let lat = Duration::from_nanos(ns);
                    bs[k].allow().unwrap().record_latency(lat, ok);
                    ps[k].allow().unwrap().record_latency(lat, ok);
                }
            }
        }
        clock.advance(SEC);
        for k in 0..3 {
            bs[k].tick();
            ps[k].tick();
            compare(&bs[k], &ps[k], &format!("round {round}, breaker {k}"));
            bs[k].reset();
            ps[k].reset();
        }
    }
    for k in 0..4 {
        assert_emit_times(&es[k].stats(), &times[k], &format!("emitter {k} (breaker {})", on[k]));
    }
    assert_emit_times(&shared.stats(), &shared_times, "shared emitter");
}

/// The call emits recursively: on the same per-core emitter, on another
/// per-core emitter of another breaker, and on a shared emitter, three
/// deep, each of its own latency in another bucket: every verdict counts
/// where the plain path counts it, each emit time in its own bucket.
#[test]
fn recursive_local_emits_count_as_the_plain_path() {
    let clock = ManualClock::new();
    let b = local_builder(&clock, 1).build().unwrap();
    let p = local_builder(&clock, 1).build().unwrap();
    let b2 = local_builder(&clock, 1).latency_threshold(MS).build().unwrap();
    let p2 = local_builder(&clock, 1).latency_threshold(MS).build().unwrap();
    let b3 = builder(&clock).build().unwrap();
    let p3 = builder(&clock).build().unwrap();
    let (ph, ph2) = (p.local_handle().unwrap(), p2.local_handle().unwrap());
    let e = local::<u32>(&b, 64);
    let e2 = local::<u32>(&b2, 64);
    let e3 = emitter::<u32>(&b3, 64);
    // outer: 3 µs, [inner e: 70 ms, [inner e2: 900 µs, [inner e3: 2 s fail]
    // + 5 µs] ok], 40 ms.
    let out = e.emit_blocking(1, Priority::Routine, |_, _| {
        clock.advance(Duration::from_micros(3));
        let inner = e.emit_blocking(2, Priority::Routine, |_, _| {
            clock.advance(70 * MS);
            let inner2 = e2.emit_blocking(3, Priority::Routine, |_, _| {
                clock.advance(Duration::from_micros(900));
                let inner3 = e3.emit_blocking(4, Priority::Routine, |_, _| {
                    clock.advance(2 * SEC);
                    Err::<(), _>("late")
                });
                assert!(!inner3.is_delivered());
                clock.advance(Duration::from_micros(5));
                Ok::<_, &str>(())
            });
            assert!(inner2.is_delivered());
            Ok::<_, &str>(())
        });
        assert!(inner.is_delivered());
        clock.advance(40 * MS);
        Err::<(), _>("outer fails")
    });
    assert!(!out.is_delivered());
    let to = e.timeout();
    let t3 = 2_000_000_000u64;
    let t2 = 900_000 + t3 + 5_000;
    let t1 = 70_000_000 + t2;
    let t0 = 3_000 + t1 + 40_000_000;
    p3.allow().unwrap().record_timeout(Duration::from_nanos(t3));
    plain_record(&ph2, t2, true, to);
    plain_record(&ph, t1, true, to);
    plain_record(&ph, t0, false, to);
    assert_twins(&b, &p, &clock, "outer");
    assert_twins(&b2, &p2, &clock, "second");
    assert_twins(&b3, &p3, &clock, "shared");
    assert_emit_times(&e.stats(), &[t1, t0], "outer emitter");
    assert_emit_times(&e2.stats(), &[t2], "second emitter");
    assert_emit_times(&e3.stats(), &[t3], "shared emitter");
}

/// A call that trips, resets, forces, disables, or puts the breaker in
/// shadow mode, or closes the window (with and without in-flight
/// tracking): what it counts is what a plain handle's permit held across
/// the same change counts (stale, or not, or counted in flight).
#[test]
fn a_local_call_that_changes_the_breaker_counts_as_the_plain_path() {
    type Act = fn(&Breaker, &ManualClock);
    let acts: [(&str, Act); 9] = [
        ("trip_now", |b, _| b.trip_now()),
        ("reset", |b, _| {
            b.trip_now();
            b.reset()
        }),
        ("force_open", |b, _| b.force_open()),
        ("force_closed", |b, _| b.force_closed()),
        ("disable", |b, _| b.disable()),
        ("metrics_only", |b, _| b.metrics_only()),
        ("trip then force_closed", |b, _| {
            b.trip_now();
            b.force_closed()
        }),
        ("disable then reset", |b, _| {
            b.disable();
            b.reset()
        }),
        ("tick", |b, c| {
            c.advance(SEC);
            b.tick()
        }),
    ];
    for (name, act) in acts {
        for track in [false, true] {
            for ok in [true, false] {
                for ns in [0u64, 3_000, 50_000_000, 50_000_001, 70_000_000, 300_000_000] {
                    let clock = ManualClock::new();
                    let mk = || {
                        local_builder(&clock, 1)
                            .track_in_flight(track)
                            .trip_windows(100)
                            .build()
                            .unwrap()
                    };
                    let (b, p) = (mk(), mk());
                    let ph = p.local_handle().unwrap();
                    let e = local::<u32>(&b, 8);
                    let scr = Scrambler::new();
                    scr.guess(ns);
                    let _ = e.emit_blocking(1, Priority::Routine, |_, _| {
                        act(&b, &clock);
                        clock.advance(Duration::from_nanos(ns));
                        result(ok)
                    });
                    let bw = b.snapshot();
                    // The twin's permit is taken at the same reading.
                    let elapsed_act = if name == "tick" { SEC } else { Duration::ZERO };
                    clock.rewind(elapsed_act + Duration::from_nanos(ns));
                    let permit = ph.allow().unwrap();
                    act(&p, &clock);
                    clock.advance(Duration::from_nanos(ns));
                    let total = elapsed_act + Duration::from_nanos(ns);
                    if total > e.timeout() {
                        permit.record_timeout(total);
                    } else {
                        permit.record_latency(total, ok);
                    }
                    let pw = p.snapshot();
                    let what = format!("{name}, track {track}, ok {ok}, {ns} ns");
                    assert_eq!(bw.window, pw.window, "{what}: the window right after");
                    assert_eq!(bw.totals, pw.totals, "{what}: the totals right after");
                    assert_twins(&b, &p, &clock, &what);
                    let total_ns = total.as_nanos() as u64;
                    assert_emit_times(&e.stats(), &[total_ns], &what);
                }
            }
        }
    }
}

/// A `Send` pointer to a per-core emitter, for a clock hook that runs on
/// the emitter's own thread (the hook clock wants `Send`).
#[derive(Clone, Copy)]
struct OnCore(*const LocalEmitter<u32>);
// SAFETY: the hook runs during a clock read of the emitting thread.
unsafe impl Send for OnCore {}

impl OnCore {
    fn get(self) -> &'static LocalEmitter<u32> {
        // SAFETY: the emitter is leaked.
        unsafe { &*self.0 }
    }
}

/// At the instant the change opened (the shard found, then the end
/// reading, then the verdict): a hook run by the end reading trips the
/// breaker, emits recursively on the same per-core emitter (moving both
/// guesses), closes the window, disables the breaker, or uses the
/// emitter's breaker's other local handle by hand: counted as the plain
/// path counts a permit across the same.
#[test]
fn a_hook_at_the_local_end_reading_counts_as_the_plain_path() {
    for name in ["trip", "emit", "tick", "disable", "hand", "emit_fail_late"] {
        for track in [false, true] {
            let clock = HookClock::new();
            let mk = || {
                Breaker::builder()
                    .clock(clock.source())
                    .ticker(false)
                    .track_in_flight(track)
                    .trip_windows(100)
                    .local_handles(2)
                    .build()
                    .unwrap()
            };
            let b = leak(mk());
            let e: &'static LocalEmitter<u32> = Box::leak(Box::new(local::<u32>(b, 8)));
            let hand: &'static LocalHandle = Box::leak(Box::new(b.local_handle().unwrap()));
            let ptr = OnCore(e);
            let hand_ptr = HandPtr(hand);
            let out = e.emit_blocking(1, Priority::Routine, |_, _| {
                clock.advance(70 * MS);
                let c = clock.clone();
                clock.at_read(1, move || {
                    let e = ptr.get();
                    match name {
                        "trip" => b.trip_now(),
                        "emit" => {
                            let _ = e.emit_blocking(7, Priority::Routine, |_, _| {
                                c.advance(Duration::from_micros(3));
                                Ok::<_, ()>(())
                            });
                        }
                        "emit_fail_late" => {
                            let _ = e.emit_blocking(7, Priority::Routine, |_, _| {
                                c.advance(Duration::from_secs(3));
                                Err::<(), _>(())
                            });
                        }
                        "tick" => {
                            c.advance(SEC);
                            b.tick()
                        }
                        "disable" => b.disable(),
                        _ => {
                            let h = hand_ptr.get();
                            h.allow().unwrap().record_latency(Duration::from_micros(3), true);
                            h.allow().unwrap().record_latency(Duration::from_secs(30), false);
                        }
                    }
                });
                Ok::<_, ()>(())
            });
            assert!(out.is_delivered());
            assert!(clock.fired(), "{name}");
            clock.advance(SEC);
            b.tick();
            let t = b.snapshot().totals;
            let w = b.snapshot().window;
            let s = e.stats();
            let what = format!("{name} track {track}: {t:?} {w:?}");
            match name {
                "trip" => assert_eq!((t.calls, t.stale), (0, 1), "{what}"),
                // Inner 3 µs (fast, ok), outer 70 ms (slow, ok).
                "emit" => {
                    assert_eq!((t.calls, t.slow, t.errors), (2, 1, 0), "{what}");
                    assert_eq!(s.emit_times.sum(), Duration::from_micros(3) + 70 * MS, "{what}");
                }
                // Inner 3 s late failure; outer 70 ms (its end read before
                // the hook ran), ok, slow.
                "emit_fail_late" => {
                    assert_eq!((t.calls, t.slow, t.errors), (2, 2, 1), "{what}");
                    assert_eq!((s.delivered, s.overran, s.diverted_timeout), (1, 0, 1), "{what}");
                }
                "tick" => assert_eq!((t.calls, t.slow, w.calls), (1, 1, u64::from(!track)), "{what}"),
                // As a plain handle's permit held across `disable`.
                "disable" => {
                    let c = ManualClock::new();
                    let p = local_builder(&c, 1)
                        .track_in_flight(track)
                        .trip_windows(100)
                        .build()
                        .unwrap();
                    let ph = p.local_handle().unwrap();
                    let permit = ph.allow().unwrap();
                    c.advance(70 * MS);
                    p.disable();
                    permit.record_latency(70 * MS, true);
                    c.advance(SEC);
                    p.tick();
                    assert_eq!(t, p.snapshot().totals, "{what}");
                }
                _ => assert_eq!((t.calls, t.slow, t.errors), (3, 2, 1), "{what}"),
            }
            if name != "emit" {
                assert_eq!(
                    s.emit_times.count(),
                    if name.starts_with("emit") { 2 } else { 1 },
                    "{what}"
                );
            }
        }
    }
}

#[derive(Clone, Copy)]
struct HandPtr(*const LocalHandle);
// SAFETY: the hook runs during a clock read of the handle's thread.
unsafe impl Send for HandPtr {}

impl HandPtr {
    fn get(self) -> &'static LocalHandle {
        // SAFETY: the handle is leaked.
        unsafe { &*self.0 }
    }
}

/// Panicking calls between guessed emits (the panic path records through
/// `Verdict::record_latency_ns`, now `record_guessed` too), with the
/// queue full for some (the trigger dropped, the emit cancelled): the
/// emits around them, and the panics, count as the plain path.
#[test]
fn panicking_local_calls_between_guessed_emits_count_as_the_plain_path() {
    let clock = ManualClock::new();
    let b = local_builder(&clock, 1).build().unwrap();
    let p = local_builder(&clock, 1).build().unwrap();
    let ph = p.local_handle().unwrap();
    let e = local::<u32>(&b, 3);
    let scr = Scrambler::new();
    let mut times = Vec::new();
    let mut panics = 0;
    for (i, ns) in [3_000u64, 90_000_000, 3_000, 3_000_000_000, 70_000_000, 0, 50_000_000]
        .into_iter()
        .enumerate()
    {
        let _ = e.emit_blocking(i as u32, Priority::Routine, |_, _| {
            clock.advance(Duration::from_nanos(ns));
            Ok::<_, ()>(())
        });
        plain_record(&ph, ns, true, e.timeout());
        times.push(ns);
        for panic_ns in [40_000_000u64, 900_000_000] {
            scr.guess(panic_ns);
            let caught = catch_unwind(AssertUnwindSafe(|| {
                e.emit_blocking(9, Priority::Routine, |_, _| -> Result<(), ()> {
                    clock.advance(Duration::from_nanos(panic_ns));
                    panic!("a consumer bug (expected by this test)")
                })
            }));
            assert!(caught.is_err());
            panics += 1;
            // The panic path records a failure of the time it ran.
            ph.allow()
                .unwrap()
                .record_latency(Duration::from_nanos(panic_ns), false);
            // An emit time only when the queue took the trigger.
            if panics <= 3 {
                times.push(panic_ns);
            }
        }
    }
    assert_twins(&b, &p, &clock, "panics between");
    let s = e.stats();
    assert_emit_times(&s, &times, "panics between");
    assert_eq!(s.diverted_failed, 3);
    assert_eq!(s.cancelled, panics - 3);
}

/// A HALF_OPEN probe through the per-core guessed path decides its round
/// as the plain handle's probe does (good closes; slow, failed, late
/// re-open), with the guesses scrambled to the probe's bucket first (so
/// the guessed add hits) or elsewhere (misses).
#[test]
fn a_local_probe_through_the_guessed_path_decides_as_the_plain_path() {
    for (ns, ok) in [
        (3_000u64, true),
        (90_000_000, true),
        (3_000, false),
        (5_000_000_000, true),
        (50_000_000, true),
        (50_000_001, true),
    ] {
        for hit in [true, false] {
            let clock = ManualClock::new();
            let mk = || {
                Breaker::builder()
                    .clock(clock.clone())
                    .ticker(false)
                    .half_open_probes(1)
                    .success_to_close(1)
                    .local_handles(1)
                    .build()
                    .unwrap()
            };
            let (b, p) = (mk(), mk());
            let ph = p.local_handle().unwrap();
            let e = local::<u32>(&b, 8);
            b.trip_now();
            p.trip_now();
            clock.advance(2 * SEC);
            let scr = Scrambler::new();
            scr.guess(if hit { ns } else { ns / 7 + 123_456_789 });
            let _ = e.emit_blocking(1, Priority::Routine, |_, _| {
                clock.advance(Duration::from_nanos(ns));
                result(ok)
            });
            let permit = ph.allow().unwrap();
            assert!(permit.is_probe());
            if Duration::from_nanos(ns) > e.timeout() {
                permit.record_timeout(Duration::from_nanos(ns));
            } else {
                permit.record_latency(Duration::from_nanos(ns), ok);
            }
            let what = format!("probe {ns} ns ok {ok} hit {hit}");
            assert_eq!(b.state(), p.state(), "{what}");
            assert_eq!(b.snapshot().generation, p.snapshot().generation, "{what}");
            assert_twins(&b, &p, &clock, &what);
            assert_emit_times(&e.stats(), &[ns], &what);
        }
    }
}

/// A disabled breaker measures nothing: per-core emits through it count
/// no call (as its plain handle's permits), but each has its emit time;
/// then `reset` and the same emits count again, as the plain path.
#[test]
fn local_emits_through_a_disabled_breaker_count_as_the_plain_path() {
    let clock = ManualClock::new();
    let b = local_builder(&clock, 1).build().unwrap();
    let p = local_builder(&clock, 1).build().unwrap();
    let ph = p.local_handle().unwrap();
    let e = local::<u32>(&b, 1 << 10);
    let mut r = Lcg(31);
    let mut times = Vec::new();
    for phase in 0..4 {
        if phase % 2 == 0 {
            b.disable();
            p.disable();
        } else {
            b.reset();
            p.reset();
        }
        for i in 0..300u32 {
            let ns = spread(&mut r);
            let ok = r.next() % 3 != 0;
            if i % 7 == 0 {
                Scrambler::new().guess(spread(&mut r));
            }
            let out = e.emit_blocking(i, Priority::Routine, |_, _| {
                clock.advance(Duration::from_nanos(ns));
                result(ok)
            });
            assert_eq!(out.is_delivered(), ok);
            plain_record(&ph, ns, ok, e.timeout());
            times.push(ns);
        }
        assert_twins(&b, &p, &clock, &format!("phase {phase}"));
    }
    let s = e.stats();
    assert_emit_times(&s, &times, "disabled");
    assert_conserved(&s, times.len() as u64);
}

/// Latencies from 0 to `u64::MAX` ns, on and either side of every edge
/// that matters (bucket 0, 1 µs, the threshold and its straddle, the
/// timeout, the top bucket, the clock's end), each from the same start,
/// with the guess left at the previous one: counted as the plain path,
/// the emit times (summed with wrapping, as the emitter does) and their
/// buckets by hand.
#[test]
fn local_latencies_from_zero_to_u64_max_count_as_the_plain_path() {
    let clock = ManualClock::new();
    let b = local_builder(&clock, 1).build().unwrap();
    let p = local_builder(&clock, 1).build().unwrap();
    let ph = p.local_handle().unwrap();
    let e = local::<u32>(&b, 1 << 10);
    let mut lat = vec![
        0u64,
        1,
        1_023,
        1_024,
        1_025,
        2_047,
        2_048,
        49_999_999,
        50_000_000,
        50_000_001,
        50_200_000,
        199_999_999,
        200_000_000,
        200_000_001,
        (1 << 36) - 1,
        1 << 36,
        (1 << 36) + 1,
        u64::MAX / 2,
        u64::MAX - 1,
        u64::MAX,
    ];
    // Then each again, twice in a row (the guess hits), and reversed.
    let again: Vec<u64> = lat.iter().flat_map(|&x| [x, x]).collect();
    lat.extend(again);
    lat.extend(lat.clone().into_iter().rev());
    for (i, &ns) in lat.iter().enumerate() {
        clock.set(Duration::ZERO);
        let ok = i % 3 != 1;
        let _ = e.emit_blocking(i as u32, Priority::Routine, |_, _| {
            clock.advance(Duration::from_nanos(ns));
            result(ok)
        });
        // The twin admits at the same reading.
        clock.set(Duration::ZERO);
        plain_record(&ph, ns, ok, e.timeout());
    }
    clock.set(Duration::ZERO);
    assert_twins(&b, &p, &clock, "0 to u64::MAX");
    assert_emit_times(&e.stats(), &lat, "0 to u64::MAX");
}

/// A clock that steps back inside the call: the emit measures 0 (the
/// end reading is not after the start), counted as a 0 ns call by both
/// the breaker and the emit-time histogram, whatever the guess was.
#[test]
fn a_local_clock_stepped_back_inside_the_call_counts_zero() {
    let clock = ManualClock::new();
    clock.set(100 * SEC);
    let b = local_builder(&clock, 1).build().unwrap();
    let p = local_builder(&clock, 1).build().unwrap();
    let ph = p.local_handle().unwrap();
    let e = local::<u32>(&b, 64);
    let scr = Scrambler::new();
    let mut times = Vec::new();
    for (i, back) in [MS, 90 * MS, 5 * SEC, Duration::from_nanos(1)].into_iter().enumerate() {
        for guess in [0u64, 3_000, 70_000_000, 10_000_000_000] {
            scr.guess(guess);
            let _ = e.emit_blocking(i as u32, Priority::Routine, |_, _| {
                clock.rewind(back);
                result(i % 2 == 0)
            });
            plain_record(&ph, 0, i % 2 == 0, e.timeout());
            times.push(0);
            // Forward again past where it was, and one normal emit.
            clock.advance(back + 2 * MS);
            let _ = e.emit_blocking(i as u32, Priority::Routine, |_, _| {
                clock.advance(60 * MS);
                Ok::<_, ()>(())
            });
            plain_record(&ph, 60_000_000, true, e.timeout());
            times.push(60_000_000);
        }
    }
    assert_twins(&b, &p, &clock, "stepped back");
    assert_emit_times(&e.stats(), &times, "stepped back");
}

/// Replay through the per-core emitter (`Host::record_call`, which finds
/// the target itself and records guessed): spread latencies, some
/// failures, the guesses scrambled; counted as the plain path.
#[test]
fn local_replay_counts_as_the_plain_path() {
    let clock = ManualClock::new();
    let b = local_builder(&clock, 1).build().unwrap();
    let p = local_builder(&clock, 1).build().unwrap();
    let ph = p.local_handle().unwrap();
    let e: LocalEmitter<u32> = LocalEmitter::builder(b.clone(), DeadLetterQueue::with_capacity(1 << 12).unwrap())
        .timeout(200 * MS)
        .unwrap()
        .replay_attempts(1_000)
        .unwrap()
        .build_local()
        .unwrap();
    b.trip_now();
    for i in 0..2_000u32 {
        assert!(!e
            .emit_blocking(i, Priority::Routine, |_, _| Ok::<_, ()>(()))
            .is_delivered());
    }
    b.reset();
    // Both breakers closed again; the twin never saw the diversions
    // (rejections are not calls), only the emit times did (0 each).
    p.trip_now();
    p.reset();
    let mut times: Vec<u64> = vec![0; 2_000];
    let mut r = Lcg(41);
    let scr = Scrambler::new();
    let mut left = 2_000;
    while left > 0 {
        let ns = spread(&mut r);
        let ok = r.next() % 5 != 0;
        if r.next() % 3 == 0 {
            scr.guess(spread(&mut r));
        }
        let rep = e.replay_blocking(1, |_, _| {
            clock.advance(Duration::from_nanos(ns));
            result(ok)
        });
        plain_record(&ph, ns, ok, e.timeout());
        left -= rep.delivered;
        // Replay stops on a failure and leaves the trigger at the head.
        if b.state() != State::Closed || p.state() != State::Closed {
            panic!("a twin tripped: {:?} {:?}", b.state(), p.state());
        }
    }
    assert_twins(&b, &p, &clock, "replay");
    // Replays count no emit time (only emits do).
    assert_emit_times(&e.stats(), &times[..], "replay");
    times.clear();
}

/// A clock each thread keeps for itself: a thread's readings are what
/// that thread advanced, whatever the others do.
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

/// Window close drains the per-core shard on another thread while the
/// core's guessed adds (and their no-op stores at missed guesses) land:
/// a ticker thread closes a window every few microseconds, and a scrape
/// thread reads the emitter's counters (each must only ever go up), as
/// the core emits 200,000 hopping latencies. Forced closed, so nothing is
/// stale: the totals summed over every window equal the twin's, ticked
/// once at the end, and the emit times are exact.
#[test]
fn a_window_closing_while_local_guessed_adds_land_loses_nothing() {
    let src = ClockSource::custom(Arc::new(ThreadClock));
    let mk = || {
        Breaker::builder()
            .clock(src.clone())
            .ticker(false)
            .local_handles(1)
            .build()
            .unwrap()
    };
    let (b, p) = (mk(), mk());
    b.force_closed();
    p.force_closed();
    let e = local::<u32>(&b, 1 << 4);
    let reader = e.stats_reader();
    let ph = p.local_handle().unwrap();
    let stop = AtomicBool::new(false);
    let n = 200_000u32;
    let mut times = Vec::with_capacity(n as usize);
    let ticker_now = std::thread::scope(|s| {
        let ticker = s.spawn(|| {
            let mut windows = 0u64;
            while !stop.load(Ordering::Relaxed) {
                advance_mine(1_000_000_000);
                b.tick();
                windows += 1;
            }
            assert!(windows > 10, "the ticker closed {windows} windows");
            NOW.with(Cell::get)
        });
        s.spawn(|| {
            let mut last = reader.read();
            while !stop.load(Ordering::Relaxed) {
                let now = reader.read();
                assert!(now.delivered >= last.delivered);
                for ((bound, a), (_, z)) in last.emit_times.cumulative().iter().zip(now.emit_times.cumulative()) {
                    assert!(z >= *a, "the emits at or below {bound:?} went down: {a} -> {z}");
                }
                last = now;
            }
        });
        let mut r = Lcg(5);
        for i in 0..n {
            let ns = match i % 4 {
                0 => 3_000,
                1 => 70_000_000,
                2 => spread(&mut r) % 190_000_000,
                _ => 1 + (i as u64 % 50_000),
            };
            let ok = i % 11 != 0;
            let out = e.emit_blocking(i, Priority::Routine, |_, _| {
                advance_mine(ns);
                result(ok)
            });
            if let Emitted::Diverted { .. } = out {
                // Keep the queue from filling: its content is not the subject.
                e.drain(usize::MAX, |_, _| {});
            }
            plain_record(&ph, ns, ok, e.timeout());
            times.push(ns);
        }
        stop.store(true, Ordering::Relaxed);
        ticker.join().unwrap()
    });
    // Past the ticker's last close, on this thread's clock.
    let mine = NOW.with(Cell::get);
    advance_mine(ticker_now.saturating_sub(mine) + 10_000_000_000);
    b.tick();
    p.tick();
    let (tb, tp) = (b.snapshot().totals, p.snapshot().totals);
    assert_eq!(tb, tp, "totals over every window");
    assert_eq!(b.latency_histogram(), p.latency_histogram(), "histogram");
    assert_eq!(tb.calls, n as u64);
    assert_emit_times(&e.stats(), &times, "drained meanwhile");
}

/// The emitter is `Send`: moved to a new thread every 250 emits (a new
/// thread's guesses start at bucket 0), emits on each, and one emit from
/// a thread-local destructor as the thread exits; counted as the plain
/// path on the twin's handle (moved along).
#[test]
fn a_local_emitter_moved_from_thread_to_thread_counts_as_the_plain_path() {
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
    let b = local_builder(&clock, 1).build().unwrap();
    let p = local_builder(&clock, 1).build().unwrap();
    let mut e = local::<u32>(&b, 1 << 14);
    let mut ph = p.local_handle().unwrap();
    let mut times = Vec::new();
    let mut r = Lcg(77);
    for gen in 0..16 {
        let ns: Vec<u64> = (0..250).map(|_| spread(&mut r)).collect();
        let exit_ns = spread(&mut r);
        times.extend(&ns);
        times.push(exit_ns);
        let c = clock.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for (i, &ns) in ns.iter().enumerate() {
                let ok = i % 6 != 2;
                let _ = e.emit_blocking(i as u32, Priority::Routine, |_, _| {
                    c.advance(Duration::from_nanos(ns));
                    result(ok)
                });
                plain_record(&ph, ns, ok, e.timeout());
            }
            let f: Box<dyn FnOnce()> = Box::new(move || {
                let _ = e.emit_blocking(99, Priority::Routine, |_, _| {
                    c.advance(Duration::from_nanos(exit_ns));
                    Ok::<_, ()>(())
                });
                plain_record(&ph, exit_ns, true, e.timeout());
                tx.send((e, ph)).unwrap();
            });
            AT_EXIT.with(|a| a.borrow_mut().0 = Some(f));
        })
        .join()
        .unwrap();
        (e, ph) = rx.recv().unwrap();
        assert_twins(&b, &p, &clock, &format!("thread {gen}"));
        b.reset();
        p.reset();
    }
    assert_emit_times(&e.stats(), &times, "moved");
}

/// Diverted emits (open breaker, full bulkhead, full queue handed back,
/// shut down) take the path without a permit; mixed with guessed ones
/// their emit times still land each in its own bucket, and the counters
/// conserve.
#[test]
fn diverted_and_guessed_local_emits_mixed_keep_every_emit_time() {
    let clock = ManualClock::new();
    let b = local_builder(&clock, 1).build().unwrap();
    let e: LocalEmitter<u32> = LocalEmitter::builder(b.clone(), DeadLetterQueue::with_capacity(2).unwrap())
        .bulkhead(1)
        .unwrap()
        .timeout(200 * MS)
        .unwrap()
        .build_local()
        .unwrap();
    let mut times = Vec::new();
    let mut r = Lcg(55);
    for i in 0..600u32 {
        let ns = spread(&mut r);
        if i % 50 == 10 {
            b.trip_now();
        }
        if i % 50 == 20 {
            b.reset();
        }
        let called = Cell::new(false);
        let nested = i % 9 == 4;
        let out = e.emit_blocking(i, Priority::Routine, |_, _| {
            called.set(true);
            if nested {
                // The bulkhead of one is full: diverted inside.
                let inner = e.emit_blocking(10_000 + i, Priority::Routine, |_, _| Ok::<_, ()>(()));
                assert!(!inner.is_delivered());
                times.push(0);
            }
            clock.advance(Duration::from_nanos(ns));
            result(i % 3 != 0)
        });
        times.push(if called.get() { ns } else { 0 });
        let _ = out;
    }
    let s = e.stats();
    assert_emit_times(&s, &times, "diverted mixed");
    assert_conserved(&s, times.len() as u64);
}

/// The breaker's verdict and the emit time are the same interval (one
/// end reading): on the precise clock (the one the change is for), every
/// delivered emit below the timeout lands in the same bucket of both
/// histograms, with the guesses scrambled by emits on the same thread.
#[test]
fn on_the_precise_clock_breaker_and_emit_time_buckets_agree() {
    let b = Breaker::builder().ticker(false).local_handles(1).build().unwrap();
    b.force_closed();
    let e = LocalEmitter::<u32>::builder(b.clone(), DeadLetterQueue::with_capacity(8).unwrap())
        .timeout(60 * SEC)
        .unwrap()
        .build_local()
        .unwrap();
    let other = Breaker::builder().ticker(false).local_handles(1).build().unwrap();
    let o = LocalEmitter::<u32>::builder(other, DeadLetterQueue::with_capacity(8).unwrap())
        .build_local()
        .unwrap();
    let mut r = Lcg(3);
    for i in 0..20_000u32 {
        let spin = r.next() % 4;
        let _ = e.emit_blocking(i, Priority::Routine, |_, _| {
            let mut x = 0u64;
            for k in 0..spin * 300 {
                x = std::hint::black_box(x.wrapping_add(k));
            }
            Ok::<_, ()>(())
        });
        if i % 3 == 0 {
            let _ = o.emit_blocking(i, Priority::Routine, |_, _| {
                std::thread::sleep(Duration::from_micros(r.next() % 50));
                Ok::<_, ()>(())
            });
        }
    }
    std::thread::sleep(Duration::from_millis(1_100));
    b.tick();
    let h = b.latency_histogram();
    let s = e.stats();
    assert_eq!(h.count(), s.emit_times.count(), "every emit judged once");
    assert_eq!(b.snapshot().totals.calls, 20_000);
    // Same buckets (the emit-time keys are the sketch's): the histogram's
    // layout edge 2j is the largest latency at or below sketch bucket 8j,
    // the emit times' cumulative count j is the emits at or below bucket
    // 8j: they agree.
    let layout: Vec<Duration> = tailguard::LatencyHistogram::edges().collect();
    let fixed: Vec<u64> = h
        .buckets()
        .filter(|(le, _)| layout.contains(le))
        .map(|(_, n)| n)
        .collect();
    let from_emits = s.emit_times.cumulative();
    assert_eq!(fixed.len(), 52);
    for (j, &(bound, n)) in from_emits.iter().enumerate().take(26) {
        assert_eq!(fixed[2 * j], n, "calls at or below sketch bucket {} ({bound:?})", 8 * j);
    }
}

#[cfg(feature = "tokio")]
mod on_tokio {
    use super::*;

    /// Async per-core emits (their verdicts now recorded guessed too, via
    /// `Verdict::record_latency_ns` / `Host::settle`), several in flight at
    /// once on one core, interleaved with blocking emits of the same
    /// emitter and of a scrambler: counted as the plain path.
    #[test]
    fn async_and_blocking_local_emits_interleaved_count_as_the_plain_path() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap();
        tokio::task::LocalSet::new().block_on(&rt, async {
            let mk = || {
                Breaker::builder()
                    .clock(ClockSource::tokio())
                    .ticker(false)
                    .local_handles(1)
                    .build()
                    .unwrap()
            };
            let (b, p) = (mk(), mk());
            b.force_closed();
            p.force_closed();
            let ph = p.local_handle().unwrap();
            let e = local::<u32>(&b, 1 << 12);
            let scr = Scrambler::new();
            let mut r = Lcg(91);
            let mut times = Vec::new();
            for round in 0..40u32 {
                // Four async emits in flight at once, of different sleeps.
                let sleeps: Vec<u64> = (0..4).map(|_| 1 + r.next() % 150).collect();
                let futs: Vec<_> = sleeps
                    .iter()
                    .enumerate()
                    .map(|(k, &ms)| {
                        let ok = (round as usize + k) % 3 != 0;
                        e.emit(round * 10 + k as u32, Priority::Routine, move |_| async move {
                            tokio::time::sleep(Duration::from_millis(ms)).await;
                            result(ok)
                        })
                    })
                    .collect();
                let _ = futures_lite_join_all(futs).await;
                for (k, &ms) in sleeps.iter().enumerate() {
                    let ok = (round as usize + k) % 3 != 0;
                    plain_record(&ph, ms * 1_000_000, ok, e.timeout());
                    times.push(ms * 1_000_000);
                }
                // A blocking emit (no time passes on tokio's paused clock).
                scr.guess(spread(&mut r));
                let _ = e.emit_blocking(9_999, Priority::Routine, |_, _| Ok::<_, ()>(()));
                plain_record(&ph, 0, true, e.timeout());
                times.push(0);
            }
            tokio::time::advance(SEC).await;
            b.tick();
            p.tick();
            compare(&b, &p, "async");
            assert_emit_times(&e.stats(), &times, "async");
        });
    }

    /// Polls every future to completion, concurrently, on this task.
    async fn futures_lite_join_all<F: std::future::Future>(futs: Vec<F>) -> Vec<F::Output> {
        let mut futs: Vec<_> = futs.into_iter().map(|f| Some(Box::pin(f))).collect();
        let mut outs: Vec<Option<F::Output>> = futs.iter().map(|_| None).collect();
        std::future::poll_fn(|cx| {
            let mut all = true;
            for (f, o) in futs.iter_mut().zip(outs.iter_mut()) {
                if let Some(fut) = f {
                    match fut.as_mut().poll(cx) {
                        std::task::Poll::Ready(v) => {
                            *o = Some(v);
                            *f = None;
                        }
                        std::task::Poll::Pending => all = false,
                    }
                }
            }
            if all {
                std::task::Poll::Ready(())
            } else {
                std::task::Poll::Pending
            }
        })
        .await;
        outs.into_iter().map(Option::unwrap).collect()
    }
}

/// A HALF_OPEN probe whose round ends inside its call (its lease runs out
/// and a tick re-opens the breaker, or it is forced open, or reset): its verdict
/// is stale for the breaker and decides nothing, through the per-core
/// guessed path as through a plain handle's probe held across the same.
#[test]
fn a_local_probe_whose_round_ends_inside_its_call_counts_as_the_plain_path() {
    type Act = fn(&Breaker, &ManualClock);
    let acts: [(&str, Act); 3] = [
        ("lease out, tick", |b, c| {
            c.advance(3 * SEC);
            b.tick()
        }),
        ("force_open", |b, _| b.force_open()),
        ("reset", |b, _| b.reset()),
    ];
    for (name, act) in acts {
        for (ns, ok) in [
            (3_000u64, true),
            (90_000_000, true),
            (3_000, false),
            (5_000_000_000, true),
        ] {
            let clock = ManualClock::new();
            let mk = || {
                Breaker::builder()
                    .clock(clock.clone())
                    .ticker(false)
                    .half_open_probes(1)
                    .success_to_close(1)
                    .probe_lease(SEC)
                    .local_handles(1)
                    .build()
                    .unwrap()
            };
            let (b, p) = (mk(), mk());
            let ph = p.local_handle().unwrap();
            let e = local::<u32>(&b, 8);
            b.trip_now();
            p.trip_now();
            clock.advance(2 * SEC);
            Scrambler::new().guess(ns);
            let out = e.emit_blocking(1, Priority::Routine, |_, _| {
                act(&b, &clock);
                clock.advance(Duration::from_nanos(ns));
                result(ok)
            });
            let moved = if name.starts_with("lease") {
                3 * SEC
            } else {
                Duration::ZERO
            } + Duration::from_nanos(ns);
            clock.rewind(moved);
            let permit = ph.allow().unwrap();
            assert!(permit.is_probe());
            act(&p, &clock);
            clock.advance(Duration::from_nanos(ns));
            if moved > e.timeout() {
                permit.record_timeout(moved);
            } else {
                permit.record_latency(moved, ok);
            }
            let what = format!("{name}: probe {ns} ns ok {ok} ({out:?})");
            assert_eq!(b.state(), p.state(), "{what}");
            compare(&b, &p, &what);
            assert_twins(&b, &p, &clock, &what);
            assert_eq!(
                b.snapshot().totals.stale,
                1,
                "{what}: the probe's verdict is stale: {:?}",
                b.snapshot().totals
            );
            assert_emit_times(&e.stats(), &[moved.as_nanos() as u64], &what);
        }
    }
}
