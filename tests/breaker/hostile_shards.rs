//! Hostile review of issue 21 item 4 (commits a8c3891, f042f54): shared
//! counter shards built on demand, by the first call of a thread that maps
//! to a slot (`sync::OnceBox`), window close merging the shards built, the
//! in-flight claim visiting the shards it marked, `memory_bytes` counting
//! slots and built shards.
//!
//! Conservation under first calls racing closes, first calls that are
//! probes or rejections, in-flight entries on shards built mid-close and
//! verdicts recorded on threads that never called the breaker, reads with
//! no shard built, and the memory claims of `BreakerBuilder::shards` and
//! docs/figures.md ("Shards grow with the threads").

use crate::support::*;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use tailguard::clock::ManualClock;
use tailguard::{Breaker, OwnedPermit, RejectReason, State};

/// One shard's bytes (`memory.rs`: "one shard: buckets, carries and
/// counters, cache-padded"), without in-flight slots.
const SHARD: usize = 640;

/// How many shards `b` built since it measured `empty` bytes (no
/// in-flight tracking: each built shard is 640 bytes and nothing else).
fn built_since(b: &Breaker, empty: usize) -> usize {
    let grown = b.memory_bytes() - empty;
    assert_eq!(grown % SHARD, 0, "{grown} bytes grown: not whole shards");
    grown / SHARD
}

/// A manual-clock breaker that cannot trip by itself within 250 windows
/// (`trip_windows(255)`, the error rate off): what it counts is decided by
/// the test's own transitions alone.
fn untrippable(clock: &ManualClock) -> tailguard::BreakerBuilder {
    builder(clock).shards(64).trip_windows(255).error_rate(1.0)
}

/// Runs `f` while another thread closes windows in a loop (250 ms on the
/// clock per tick, at most `max_ticks` that move the clock), calling
/// `between(n)` before each tick; returns `f`'s result once the ticking
/// thread has stopped.
fn while_ticking<R>(
    b: &Breaker,
    clock: &ManualClock,
    max_ticks: u64,
    between: impl Fn(u64) + Send + Sync,
    f: impl FnOnce() -> R,
) -> R {
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let ticker = s.spawn(|| {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                if n < max_ticks {
                    clock.advance(250 * MS);
                }
                between(n);
                b.tick();
                n += 1;
                std::thread::yield_now();
            }
            n
        });
        let r = f();
        stop.store(true, Ordering::Relaxed);
        let ticks = ticker.join().unwrap();
        assert!(ticks > 0);
        r
    })
}

/// Closes three more windows, so that everything recorded is in a closed one.
fn settle(b: &Breaker, clock: &ManualClock) {
    for _ in 0..3 {
        clock.advance(SEC);
        b.tick();
    }
}

/// 200 threads, more than the 64 shards, each making its first calls (a
/// success, a failure, a cancellation, five times over) while another
/// thread closes windows, trips and resets the breaker (so some first
/// calls are rejections, some probes, some verdicts stale): every permit
/// is counted once (calls + stale + cancelled), every rejection once.
#[test]
fn first_calls_of_200_threads_racing_closes_and_transitions_are_each_counted_once() {
    first_calls_racing_closes_and_transitions(false);
}

/// The same with in-flight tracking: some of the permits are in flight
/// across a close (claimed as stale after a transition, or left to their
/// verdict), entered into shards their own first call built.
#[test]
fn tracked_first_calls_of_200_threads_racing_closes_and_transitions_are_each_counted_once() {
    first_calls_racing_closes_and_transitions(true);
}

fn first_calls_racing_closes_and_transitions(track: bool) {
    let clock = ManualClock::new();
    let b = untrippable(&clock)
        .half_open_probes(4)
        .track_in_flight(track)
        .build()
        .unwrap();
    let granted = AtomicU64::new(0);
    let rejected = AtomicU64::new(0);
    let transitions = |n: u64| match n % 12 {
        3 => b.trip_now(),
        9 => b.reset(),
        _ => {}
    };
    while_ticking(&b, &clock, 800, transitions, || {
        std::thread::scope(|s| {
            for _ in 0..200 {
                s.spawn(|| {
                    for i in 0..15 {
                        match b.allow() {
                            Ok(p) => {
                                granted.fetch_add(1, Ordering::Relaxed);
                                match i % 3 {
                                    0 => p.record_latency(MS, true),
                                    1 => p.record_latency(MS, false),
                                    _ => drop(p),
                                }
                            }
                            Err(_) => {
                                rejected.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    }
                });
            }
        });
    });
    settle(&b, &clock);
    let s = b.snapshot();
    let t = s.totals;
    assert_eq!(
        t.calls + t.stale + t.cancelled,
        granted.load(Ordering::Relaxed),
        "every permit counted once: {t:?}"
    );
    let r = s.rejections;
    assert_eq!(
        r.open + r.probes_busy + r.forced + r.ramping,
        rejected.load(Ordering::Relaxed),
        "every rejection counted once: {r:?}"
    );
    assert_eq!(
        granted.load(Ordering::Relaxed) + rejected.load(Ordering::Relaxed),
        200 * 15
    );
    if !track {
        // Every call's latency, merged from the shards that held it.
        assert_eq!(b.latency_histogram().count(), t.calls, "{t:?}");
    }
}

/// With in-flight tracking, 200 threads (half of them making a hung call
/// their very first call, so that it builds the shard it enters) while
/// another thread closes windows: the hung permits then move to four
/// fresh threads that never called the breaker (their own shards are built
/// at record time; the entries' shards were built by the callers). Each
/// hung call is slow exactly once (claimed in flight or by its verdict,
/// never both), every fast call once.
///
/// (A first run asserted exactly 200 slow calls and saw 201 once in 40: a
/// "fast" call in flight while the clock moved 250 ms is claimed slow, as
/// it should be.)
#[test]
fn hung_first_calls_entered_on_new_shards_are_slow_exactly_once_when_recorded_elsewhere() {
    let clock = ManualClock::new();
    let b = untrippable(&clock)
        .track_in_flight(true)
        .latency_threshold(100 * MS)
        .build()
        .unwrap();
    let (tx, rx) = mpsc::channel::<OwnedPermit>();
    while_ticking(
        &b,
        &clock,
        400,
        |_| {},
        || {
            std::thread::scope(|s| {
                for i in 0..200 {
                    let tx = tx.clone();
                    let b = &b;
                    s.spawn(move || {
                        if i % 2 == 0 {
                            tx.send(b.allow_owned().unwrap()).unwrap();
                            b.allow().unwrap().record_latency(MS, true);
                        } else {
                            b.allow().unwrap().record_latency(MS, true);
                            tx.send(b.allow_owned().unwrap()).unwrap();
                        }
                    });
                }
            });
        },
    );
    drop(tx);
    let hung: Vec<OwnedPermit> = rx.into_iter().collect();
    assert_eq!(hung.len(), 200);
    // Two closes with every hung call older than the threshold: those
    // tracked are claimed slow.
    for _ in 0..2 {
        clock.advance(SEC);
        b.tick();
    }
    let mut hung = hung.into_iter();
    std::thread::scope(|s| {
        for _ in 0..4 {
            let batch: Vec<_> = hung.by_ref().take(50).collect();
            s.spawn(move || batch.into_iter().for_each(|p| p.record_latency(5 * SEC, true)));
        }
    });
    settle(&b, &clock);
    let s = b.snapshot();
    assert_eq!(s.generation, 0, "no transition: {s:?}");
    let t = s.totals;
    // A hung call counted twice would make 401 calls. A fast call may be
    // slow too: in flight while the ticking thread moved the clock past
    // the threshold, a close claims it (its verdict's 1 ms then counts
    // nothing).
    assert_eq!((t.calls, t.stale, t.cancelled), (400, 0, 0), "{t:?}");
    assert!(t.slow >= 200, "a hung call (5 s) not slow: {t:?}");
}

/// The same with the hung calls cancelled (dropped) on fresh threads
/// instead: a claimed call's drop counts nothing more, an unclaimed one's
/// is a cancellation.
#[test]
fn hung_first_calls_dropped_on_fresh_threads_are_counted_once() {
    let clock = ManualClock::new();
    let b = untrippable(&clock)
        .track_in_flight(true)
        .latency_threshold(100 * MS)
        .build()
        .unwrap();
    let hung: Vec<OwnedPermit> = while_ticking(
        &b,
        &clock,
        400,
        |_| {},
        || {
            std::thread::scope(|s| {
                let handles: Vec<_> = (0..100).map(|_| s.spawn(|| b.allow_owned().unwrap())).collect();
                handles.into_iter().map(|h| h.join().unwrap()).collect()
            })
        },
    );
    std::thread::scope(|s| {
        let mut hung = hung.into_iter();
        for _ in 0..4 {
            let batch: Vec<_> = hung.by_ref().take(25).collect();
            s.spawn(move || drop(batch));
        }
    });
    settle(&b, &clock);
    let t = b.snapshot().totals;
    assert_eq!(t.calls + t.cancelled + t.stale, 100, "{t:?}");
    assert_eq!(t.calls, t.slow, "only claimed (slow) calls are calls: {t:?}");
}

/// A thread whose first call into a breaker is a rejection (OPEN, then
/// forced open) builds its shard to count it: every rejection is counted,
/// by reason, whichever thread made it.
#[test]
fn rejections_as_first_calls_of_fresh_threads_are_each_counted() {
    let clock = ManualClock::new();
    let b = builder(&clock).shards(64).build().unwrap();
    b.trip_now();
    let fresh = |n| {
        std::thread::scope(|s| {
            for _ in 0..n {
                s.spawn(|| {
                    assert!(b.allow().is_err());
                    assert!(b.allow().is_err());
                });
            }
        })
    };
    fresh(80);
    assert_eq!(b.snapshot().rejections.open, 160);
    b.force_open();
    fresh(80);
    let r = b.snapshot().rejections;
    assert_eq!((r.open, r.forced, r.probes_busy, r.ramping), (160, 160, 0, 0), "{r:?}");
}

/// The first call of a thread is the probe of a HALF_OPEN round (on a
/// shard no thread built), another fresh thread's first call is refused
/// as probes busy, and the probe's verdict closes the breaker: the probe
/// counts once, the refusal once.
#[test]
fn a_probe_that_is_a_thread_s_first_call_decides_its_round_and_counts_once() {
    let clock = ManualClock::new();
    let b = builder(&clock)
        .shards(64)
        .half_open_probes(1)
        .success_to_close(1)
        .build()
        .unwrap();
    let empty = b.memory_bytes();
    b.trip_now();
    clock.advance(SEC);
    let (probe_tx, probe_rx) = mpsc::channel();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    std::thread::scope(|s| {
        let b = &b;
        s.spawn(move || {
            let p = b.allow().unwrap();
            assert!(p.is_probe());
            probe_tx.send(()).unwrap();
            go_rx.recv().unwrap();
            p.record_latency(MS, true);
        });
        probe_rx.recv().unwrap();
        s.spawn(move || {
            let e = b.allow().unwrap_err();
            assert_eq!(e.reason(), RejectReason::ProbesBusy);
        })
        .join()
        .unwrap();
        go_tx.send(()).unwrap();
    });
    assert_eq!(b.state(), State::Closed);
    settle(&b, &clock);
    let s = b.snapshot();
    assert_eq!((s.totals.calls, s.totals.stale, s.totals.cancelled), (1, 0, 0), "{s:?}");
    assert_eq!(s.rejections.probes_busy, 1);
    assert!(built_since(&b, empty) <= 2);
}

/// No call at all: windows close, snapshots, rejections and the histogram
/// read zero, and none of these reads builds a shard.
#[test]
fn a_breaker_no_thread_called_reads_zero_and_builds_nothing() {
    let clock = ManualClock::new();
    let b = builder(&clock).shards(64).track_in_flight(true).build().unwrap();
    let empty = b.memory_bytes();
    for _ in 0..5 {
        next_window(&b, &clock);
    }
    let s = b.snapshot();
    assert_eq!(s.totals, Default::default());
    assert_eq!(s.rejections, Default::default());
    assert_eq!(s.window.calls, 0);
    assert_eq!(b.latency_histogram().count(), 0);
    assert_eq!(b.memory_bytes(), empty, "reads built a shard");
}

/// The Prometheus export of a breaker with no shard built: the same series
/// as a breaker that was called, and its counters zero.
#[cfg(feature = "prometheus")]
#[test]
fn prometheus_export_of_a_breaker_with_no_shard_built_has_every_series_at_zero() {
    let series = |called: bool| {
        let r = tailguard::Registry::new();
        let b = r
            .get_or_create("c", || Breaker::builder().ticker(false).shards(64))
            .unwrap();
        if called {
            b.allow().unwrap().record(true);
        }
        b.tick();
        tailguard::prometheus::encode_text(&r)
    };
    let (idle, called) = (series(false), series(true));
    let names = |text: &str| -> Vec<String> {
        text.lines()
            .filter(|l| !l.starts_with('#'))
            .map(|l| l.rsplit_once(' ').unwrap().0.to_string())
            .collect()
    };
    assert_eq!(names(&idle), names(&called), "{idle}\n---\n{called}");
    for line in idle.lines().filter(|l| l.contains("_total{")) {
        let value: f64 = line.rsplit_once(' ').unwrap().1.parse().unwrap();
        assert_eq!(value, 0.0, "{line}");
    }
}

/// `BreakerBuilder::shards`: a breaker called from two threads holds at
/// most two shards, one per calling thread, and one when the two threads'
/// indices map to the same slot (indices are the process's, handed out to
/// every thread, equal modulo the shard count for some pairs: with two
/// shards, often). The hostile review found the docs claiming exactly two;
/// they now say at most. Eight breakers of two shards, each called by this
/// thread and one new thread.
#[test]
fn two_threads_calling_a_breaker_hold_at_most_two_shards() {
    for _ in 0..8 {
        let b = Breaker::builder().ticker(false).shards(2).build().unwrap();
        let empty = b.memory_bytes();
        b.allow().unwrap().record(true);
        std::thread::scope(|s| {
            s.spawn(|| b.allow().unwrap().record(true));
        });
        let held = built_since(&b, empty);
        assert!(
            (1..=2).contains(&held),
            "{held} shards held by a breaker called from two threads"
        );
    }
}

/// docs/figures.md, "Shards grow with the threads": memory and close cost
/// follow the threads that use the breaker. A breaker of 64 shards used by
/// two threads at a time, whose threads are replaced 64 times (a worker
/// restarts, a blocking pool retires idle threads), holds the shards of two
/// threads: an exiting thread gives its index back, the next one takes it
/// (the hostile review found all 64 built before indices were reused).
///
/// Ignored in the parallel run: the indices are the process's, and the
/// threads other tests hold at the same moment take indices too. `.ci/run`
/// runs it alone (`--ignored --test-threads=1`). The threads are joined
/// one by one: a thread gives its index back in a thread-local destructor,
/// which a scope's implicit join does not wait for.
#[test]
#[ignore = "needs the process to itself: .ci/run runs it with --test-threads=1"]
fn a_breaker_used_by_two_threads_at_a_time_holds_at_most_a_few_shards() {
    let b = Breaker::builder().ticker(false).shards(64).build().unwrap();
    let empty = b.memory_bytes();
    for _ in 0..64 {
        let pair: Vec<_> = (0..2)
            .map(|_| {
                let b = b.clone();
                std::thread::spawn(move || b.allow().unwrap().record(true))
            })
            .collect();
        pair.into_iter().for_each(|t| t.join().unwrap());
    }
    let held = built_since(&b, empty);
    assert!(
        held <= 3,
        "two threads at a time, replaced 64 times: {held} shards held"
    );
}

/// `shards(1024)`: 1024 eight-byte slots more than `shards(1)`, and never
/// more than 1024 shards however many threads call (1,100 here, one after
/// another), each built one counted once.
#[test]
fn a_1024_shard_breaker_holds_at_most_1024_shards_and_counts_each_once() {
    let slots = |n| {
        Breaker::builder()
            .ticker(false)
            .shards(n)
            .build()
            .unwrap()
            .memory_bytes()
    };
    assert_eq!(slots(1024) - slots(1), 1023 * 8);
    let clock = ManualClock::new();
    let b = builder(&clock).shards(1024).build().unwrap();
    let empty = b.memory_bytes();
    for _ in 0..1100 {
        std::thread::scope(|s| {
            s.spawn(|| b.allow().unwrap().record(true));
        });
    }
    let held = built_since(&b, empty);
    assert!((1..=1024).contains(&held), "{held}");
    settle(&b, &clock);
    assert_eq!(b.snapshot().totals.calls, 1100);
    assert_eq!(b.latency_histogram().count(), 1100);
}

/// A breaker whose shards were built by several threads, dropped on a
/// thread that neither built it nor called it (its last handle there):
/// run under Miri (`-Zmiri-strict-provenance`) for the frees.
#[test]
fn a_breaker_with_shards_built_elsewhere_drops_on_another_thread() {
    let clock = ManualClock::new();
    let b = builder(&clock).shards(4).track_in_flight(true).build().unwrap();
    let hung = std::thread::scope(|s| {
        let h: Vec<_> = (0..3).map(|_| s.spawn(|| b.allow_owned().unwrap())).collect();
        h.into_iter().map(|h| h.join().unwrap()).collect::<Vec<_>>()
    });
    clock.advance(2 * SEC);
    b.tick();
    let t = std::thread::spawn(move || {
        drop(b);
        drop(hung);
    });
    t.join().unwrap();
}

/// docs/figures.md's memory paragraph sends the reader to "Shards grow with
/// the threads" below, for the 64-vs-2-shard claim (a8c3891's
/// `benches/shard_growth.rs` measures it): the section must be there.
#[test]
fn docs_figures_has_the_shards_grow_section_it_refers_to() {
    // Included at build time: Miri's isolation has no file system.
    let figures = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/figures.md"));
    assert!(
        figures.contains("see \"Shards grow with the threads\" below"),
        "the reference this test is about"
    );
    assert!(
        figures
            .lines()
            .any(|l| l.starts_with('#') && l.contains("Shards grow with the threads")),
        "docs/figures.md refers to a section \"Shards grow with the threads\" it does not have"
    );
}

/// docs/figures.md: "in-flight tracking 144 bytes per shard", and a shard
/// "in use" is one a thread built: a 64-shard breaker with tracking grows
/// by one shard and its slots at a thread's first call, and by nothing at
/// later calls, verdicts, drops or closes.
#[test]
fn in_flight_slots_are_built_with_their_shard_and_only_then() {
    let clock = ManualClock::new();
    let b = builder(&clock).shards(64).track_in_flight(true).build().unwrap();
    let empty = b.memory_bytes();
    let hung = b.allow().unwrap();
    let one = b.memory_bytes();
    assert_eq!(one - empty, SHARD + 144, "a shard and its in-flight slots");
    b.allow().unwrap().record(true);
    drop(b.allow().unwrap());
    next_window(&b, &clock);
    drop(hung);
    next_window(&b, &clock);
    assert_eq!(b.memory_bytes(), one);
}
