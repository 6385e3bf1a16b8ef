//! The async emitter on tokio's paused clock: timeouts, cancellation, async
//! replay, and one router's three consumers kept apart.
#![cfg(feature = "tokio")]

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tailguard::clock::ClockSource;
use tailguard::dlq::{DeadLetterQueue, Priority};
use tailguard::emit::{tick_every, Divert, Emitted, Emitter, EmitterStats, ReplayStop};
use tailguard::{Breaker, Bulkhead, State};
use tokio::time::{sleep, Instant};

#[path = "support/hook.rs"]
mod hook;

const MS: Duration = Duration::from_millis(1);

fn breaker() -> Breaker {
    Breaker::builder()
        .clock(ClockSource::tokio())
        .ticker(false)
        .half_open_probes(1)
        .success_to_close(1)
        .build()
        .unwrap()
}

fn emitter(b: &Breaker, bulkhead: &Bulkhead) -> Emitter<u64> {
    Emitter::builder(b.clone(), DeadLetterQueue::with_capacity(1024).unwrap())
        .shared_bulkhead(bulkhead.clone())
        .timeout(200 * MS)
        .unwrap()
        .build()
        .unwrap()
}

fn assert_conserved(s: &EmitterStats, emitted: u64) {
    assert_eq!(s.emitted(), emitted, "{s:?}");
    assert_eq!(s.into_queue(), s.out_of_queue(), "{s:?}");
}

#[tokio::test(start_paused = true)]
async fn a_hanging_call_is_cut_at_the_timeout_and_counts_failed_and_slow() {
    let b = breaker();
    let e = emitter(&b, &Bulkhead::new(4).unwrap());
    let t0 = Instant::now();
    let out = e
        .emit(1, Priority::Routine, |_| async {
            sleep(Duration::from_secs(3600)).await;
            Ok::<_, ()>(())
        })
        .await;
    assert_eq!(Instant::now() - t0, 200 * MS, "cut exactly at the deadline");
    assert_eq!(
        out,
        Emitted::Diverted {
            reason: Divert::TimedOut(200 * MS),
            displaced: None
        }
    );
    sleep(Duration::from_secs(1)).await;
    b.tick();
    let w = b.snapshot().window;
    assert_eq!((w.calls, w.errors, w.slow), (1, 1, 1));
    let s = e.stats();
    assert_eq!(
        (s.diverted_timeout, s.bulkhead_in_flight, s.emit_times.sum()),
        (1, 0, 200 * MS)
    );
}

#[tokio::test(start_paused = true)]
async fn the_breaker_sees_the_latency_the_emitter_measured() {
    let b = breaker();
    let e = emitter(&b, &Bulkhead::new(4).unwrap());
    for _ in 0..100 {
        let out = e
            .emit(0, Priority::Routine, |_| async {
                sleep(8 * MS).await;
                Ok::<_, ()>(())
            })
            .await;
        assert!(out.is_delivered());
    }
    sleep(Duration::from_secs(1)).await;
    b.tick();
    let w = b.snapshot().window;
    assert_eq!((w.calls, w.slow), (100, 0));
    let p99 = w.latency.unwrap().p99;
    assert!(p99.abs_diff(8 * MS) < 8 * MS / 20, "{p99:?}");
    assert_eq!(e.stats().emit_times.sum(), 800 * MS);
}

#[tokio::test(start_paused = true)]
async fn a_dropped_emit_gives_back_its_bulkhead_slot_and_its_probe_slot() {
    let b = breaker();
    let bulkhead = Bulkhead::new(1).unwrap();
    let e = emitter(&b, &bulkhead);
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

#[tokio::test(start_paused = true)]
async fn an_immediately_ready_call_completes_without_the_clock_moving() {
    let b = breaker();
    let e = emitter(&b, &Bulkhead::new(4).unwrap());
    // On a current-thread runtime with no timers armed, a ready call
    // completes without the clock moving, and without registering a timer
    // that auto-advance would then jump to.
    let t0 = Instant::now();
    for i in 0..1000 {
        assert!(e
            .emit(i, Priority::Routine, |_| async { Ok::<_, ()>(()) })
            .await
            .is_delivered());
    }
    assert_eq!(Instant::now(), t0);
}

#[tokio::test(start_paused = true)]
async fn async_replay_dropped_mid_call_puts_the_trigger_back_at_the_head() {
    let b = breaker();
    let e = emitter(&b, &Bulkhead::new(4).unwrap());
    b.trip_now();
    for i in 0..3 {
        let _ = e.emit(i, Priority::Routine, |_| async { Ok::<_, ()>(()) }).await;
    }
    b.reset();
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    tokio::select! {
        _ = e.replay(10, |t| {
            seen.lock().unwrap().push(*t);
            async { sleep(Duration::from_secs(10)).await; Ok::<_, ()>(()) }
        }) => panic!("the timer branch is first"),
        _ = sleep(50 * MS) => {}
    }
    let s = e.stats();
    assert!(s.pending, "trigger 0 held at the head");
    let seen2 = Arc::clone(&seen);
    let r = e
        .replay(10, move |t| {
            seen2.lock().unwrap().push(*t);
            async { Ok::<_, ()>(()) }
        })
        .await;
    assert_eq!((r.delivered, r.stopped), (3, Some(ReplayStop::Empty)));
    assert_eq!(*seen.lock().unwrap(), [0, 0, 1, 2]);
    assert_conserved(&e.stats(), 3);
}

#[tokio::test(start_paused = true)]
async fn async_replay_failures_time_out_and_stay_at_the_head() {
    let b = breaker();
    let e = emitter(&b, &Bulkhead::new(4).unwrap());
    b.trip_now();
    let _ = e.emit(7, Priority::Critical, |_| async { Ok::<_, ()>(()) }).await;
    b.reset();
    let r = e
        .replay(10, |_| async {
            sleep(Duration::from_secs(1)).await;
            Ok::<_, ()>(())
        })
        .await;
    assert_eq!(r.stopped, Some(ReplayStop::Failed(Divert::TimedOut(200 * MS))));
    assert_eq!(r.handed_back, None);
    assert!(e.stats().pending);
    let mut drained = Vec::new();
    e.shutdown(|t, c| drained.push((t, c)));
    assert_eq!(drained, [(7, Priority::Critical)]);
}

#[tokio::test(start_paused = true)]
async fn a_panicking_call_future_queues_its_trigger() {
    let b = breaker();
    let bulkhead = Bulkhead::new(1).unwrap();
    let e = emitter(&b, &bulkhead);
    let task = {
        let e = e.clone();
        tokio::spawn(async move {
            e.emit(42, Priority::Critical, |_| async {
                sleep(MS).await;
                if true {
                    panic!("a consumer bug (expected by this test)");
                }
                Ok::<_, ()>(())
            })
            .await
        })
    };
    assert!(task.await.unwrap_err().is_panic());
    let s = e.stats();
    assert_eq!(
        (s.diverted_failed, s.queued, s.bulkhead_in_flight, s.cancelled),
        (1, 1, 0, 0)
    );
}

/// Three consumers behind one router; one slows from 8 ms to 900 ms. The
/// others keep their emit times, the slow one's traffic is diverted, and
/// every trigger is accounted for.
#[tokio::test(start_paused = true)]
async fn one_slow_consumer_leaves_the_others_alone() {
    let names = ["pricing", "compliance", "dispatch"];
    let delay: Vec<Arc<AtomicU64>> = names.iter().map(|_| Arc::new(AtomicU64::new(8))).collect();
    let received: Vec<Arc<AtomicUsize>> = names.iter().map(|_| Arc::new(AtomicUsize::new(0))).collect();
    let breakers: Vec<Breaker> = names
        .iter()
        .map(|n| {
            Breaker::builder()
                .name(n)
                .clock(ClockSource::tokio())
                .ticker(false)
                .latency_threshold(100 * MS)
                .window(Duration::from_secs(1))
                .min_calls(20)
                .build()
                .unwrap()
        })
        .collect();
    let _ticks: Vec<_> = breakers.iter().map(|b| tick_every(b, 100 * MS)).collect();
    let emitters: Vec<Emitter<u64>> = breakers
        .iter()
        .map(|b| {
            Emitter::builder(b.clone(), DeadLetterQueue::with_capacity(1 << 14).unwrap())
                .bulkhead(16)
                .unwrap()
                .timeout(200 * MS)
                .unwrap()
                .build()
                .unwrap()
        })
        .collect();
    let handed_back = Arc::new(AtomicUsize::new(0));
    // The router: a trigger per consumer every 10 ms, each emitted by its
    // own task, for `secs` seconds.
    let run = |secs: u64| {
        let (emitters, delay, received, handed_back) = (
            emitters.clone(),
            delay.clone(),
            received.clone(),
            Arc::clone(&handed_back),
        );
        async move {
            let mut tasks = tokio::task::JoinSet::new();
            let mut tick = tokio::time::interval(10 * MS);
            for n in 0..secs * 100 {
                tick.tick().await;
                for c in 0..3 {
                    let (e, d, r, h) = (
                        emitters[c].clone(),
                        Arc::clone(&delay[c]),
                        Arc::clone(&received[c]),
                        Arc::clone(&handed_back),
                    );
                    tasks.spawn(async move {
                        let out = e
                            .emit(n, Priority::Routine, |_| {
                                let ms = d.load(Ordering::Relaxed);
                                async move {
                                    r.fetch_add(1, Ordering::Relaxed);
                                    sleep(Duration::from_millis(ms)).await;
                                    Ok::<_, ()>(())
                                }
                            })
                            .await;
                        if matches!(
                            out,
                            Emitted::HandedBack { .. } | Emitted::Diverted { displaced: Some(_), .. }
                        ) {
                            h.fetch_add(1, Ordering::Relaxed);
                        }
                    });
                }
            }
            while tasks.join_next().await.is_some() {}
        }
    };
    run(10).await;
    let healthy: Vec<_> = emitters
        .iter()
        .map(|e| e.stats().emit_times.quantiles().unwrap())
        .collect();
    delay[0].store(900, Ordering::Relaxed);
    let before: Vec<_> = emitters.iter().map(|e| e.stats()).collect();
    run(20).await;
    let after: Vec<_> = emitters.iter().map(|e| e.stats()).collect();
    // Pricing tripped, and was diverted from then on without being called.
    assert_eq!(breakers[0].state(), State::Open);
    let diverted = after[0].diverted_open - before[0].diverted_open;
    assert!(diverted > 1500, "{diverted} of 2000 diverted without a call");
    assert!(received[0].load(Ordering::Relaxed) < 1000 + 500, "{:?}", received[0]);
    // Compliance and dispatch: every trigger delivered, emit times as healthy.
    for c in 1..3 {
        assert_eq!(after[c].delivered, 3000, "{}: {:?}", names[c], after[c]);
        assert_eq!(after[c].diverted(), 0);
        let q = after[c].emit_times.quantiles().unwrap();
        assert_eq!(
            (q.p50, q.p99, q.p999),
            (healthy[c].p50, healthy[c].p99, healthy[c].p999),
            "{}",
            names[c]
        );
        assert_eq!(breakers[c].state(), State::Closed);
    }
    // The router's pricing emits: a 200 ms cap at worst, then instant.
    let q = after[0].emit_times.quantiles().unwrap();
    assert!(q.p999 <= 210 * MS, "{q:?}");
    for (c, s) in after.iter().enumerate() {
        assert_eq!(s.bulkhead_in_flight, 0, "{}", names[c]);
        assert_conserved(s, 3000);
    }
    assert_eq!(handed_back.load(Ordering::Relaxed), 0);
    // Recovery: the consumer is fast again; probes close the breaker and
    // replay delivers every diverted trigger.
    delay[0].store(8, Ordering::Relaxed);
    sleep(Duration::from_secs(120)).await;
    run(1).await;
    assert_eq!(breakers[0].state(), State::Closed, "{:?}", breakers[0].snapshot());
    loop {
        let r = emitters[0]
            .replay(100, |_| async {
                sleep(8 * MS).await;
                Ok::<_, ()>(())
            })
            .await;
        if r.stopped == Some(ReplayStop::Empty) {
            break;
        }
        assert!(r.stopped.is_none(), "{:?}", r.stopped);
    }
    let s = emitters[0].stats();
    assert_eq!(s.replayed, s.diverted(), "{s:?}");
    assert_conserved(&s, 3100);
}

// ------------------------------------------------------- override modes

#[tokio::test(start_paused = true)]
async fn every_override_mode_behaves_through_the_async_emitter_as_through_allow() {
    let b = breaker();
    let e = emitter(&b, &Bulkhead::new(4).unwrap());
    let slow = |d: Duration| {
        move |_: &u64| async move {
            sleep(d).await;
            Ok::<_, ()>(())
        }
    };
    let close = || async {
        sleep(Duration::from_secs(1)).await;
        b.tick();
        b.snapshot().window
    };
    // Disabled: passes; the timeout still cuts at 200 ms, not at once; measures nothing.
    b.disable();
    assert!(e.emit(1, Priority::Routine, slow(50 * MS)).await.is_delivered());
    let t0 = Instant::now();
    let out = e.emit(2, Priority::Routine, slow(Duration::from_secs(5))).await;
    assert_eq!(Instant::now() - t0, 200 * MS);
    assert!(
        matches!(out, Emitted::Diverted { reason: Divert::TimedOut(d), .. } if d == 200 * MS),
        "{out:?}"
    );
    let w = close().await;
    assert_eq!((w.calls, e.stats().overran), (0, 0), "{w:?}");
    // Forced closed: measured, never trips.
    b.force_closed();
    for i in 0..30 {
        assert!(e.emit(i, Priority::Routine, slow(60 * MS)).await.is_delivered());
    }
    let w = close().await;
    assert_eq!((w.calls, w.slow, b.state()), (30, 30, State::Closed));
    // Forced open: diverted without a call.
    b.force_open();
    let out = e
        .emit(3, Priority::Routine, |_| async { unreachable!() as Result<(), ()> })
        .await;
    assert!(
        matches!(
            out,
            Emitted::Diverted {
                reason: Divert::Open(_),
                ..
            }
        ),
        "{out:?}"
    );
    // Metrics-only with the shadow state OPEN: passes, one shadow rejection each.
    b.metrics_only();
    b.trip_now();
    for n in 1..=3 {
        assert!(e.emit(4, Priority::Routine, slow(MS)).await.is_delivered());
        assert_eq!(b.snapshot().shadow_rejections, n);
    }
}

// -------------------------------------------- shutdown and an async replay

/// `shutdown` cannot block on an async replay (it may be suspended on this
/// very thread): from the shutdown on, that replay queues nothing. Its
/// trigger in flight is delivered or handed back to the replay's caller,
/// whatever ends the call: a failure, a timeout, a refusal.
#[tokio::test(start_paused = true)]
async fn after_shutdown_an_async_replay_in_flight_hands_back_instead_of_keeping() {
    for ending in ["fails", "times out"] {
        let b = breaker();
        let e = emitter(&b, &Bulkhead::new(4).unwrap());
        b.trip_now();
        for i in 0..3 {
            let _ = e.emit(i, Priority::Routine, |_| async { Ok::<_, ()>(()) }).await;
        }
        b.reset();
        let replay = {
            let e = e.clone();
            tokio::spawn(async move {
                e.replay(10, move |t| {
                    let t = *t;
                    async move {
                        match (t, ending) {
                            (0, _) => Ok(()),
                            (_, "fails") => {
                                sleep(100 * MS).await;
                                Err(())
                            }
                            _ => {
                                sleep(Duration::from_secs(1)).await;
                                Ok(())
                            }
                        }
                    }
                })
                .await
            })
        };
        sleep(MS).await; // trigger 1 in flight
        let mut drained = Vec::new();
        assert_eq!(e.shutdown(|t, _| drained.push(t)), 1, "trigger 2 from the queue");
        let r = replay.await.unwrap();
        assert_eq!(r.delivered, 1, "{ending}: {r:?}");
        assert_eq!(r.handed_back, Some((1, Priority::Routine)), "{ending}: {r:?}");
        let s = e.stats();
        assert!(
            !s.pending && s.queued == 0,
            "{ending}: nothing kept after the shutdown: {s:?}"
        );
        assert_eq!(drained, [2]);
        assert_conserved(&s, 3);
    }
}

/// An async replay whose admission is refused after a shutdown (between
/// taking the trigger from the queue and the breaker's verdict, forced
/// with a clock hook) hands the trigger back rather than putting it back
/// at the head of a shut-down emitter.
#[tokio::test(start_paused = true)]
async fn after_shutdown_a_replayed_trigger_refused_by_the_breaker_is_handed_back() {
    let clock = hook::HookClock::new();
    let b = Breaker::builder().clock(clock.source()).ticker(false).build().unwrap();
    let e: Emitter<u64> = Emitter::builder(b.clone(), DeadLetterQueue::with_capacity(8).unwrap())
        .build()
        .unwrap();
    b.trip_now();
    let _ = e.emit(7, Priority::Routine, |_| async { Ok::<_, ()>(()) }).await;
    b.reset();
    // The replay's first clock read is its emit's start, after it took 7.
    let (b2, e2) = (b.clone(), e.clone());
    clock.at_read(1, move || {
        assert_eq!(
            e2.shutdown(|_, _| {}),
            0,
            "7 is out of the queue, in the replay's hands"
        );
        b2.force_open();
    });
    let r = e.replay(10, |_| async { Ok::<_, ()>(()) }).await;
    assert!(clock.fired());
    assert_eq!(r.handed_back, Some((7, Priority::Routine)), "{r:?}");
    let s = e.stats();
    assert!(!s.pending, "{s:?}");
    assert_conserved(&s, 1);
}

/// `shutdown_async` waits for a running replay (blocking or async), so that
/// nothing is kept after its drain, even when the replay's call panics.
#[tokio::test(start_paused = true)]
async fn shutdown_async_waits_for_a_running_replay_and_drains_what_it_kept() {
    let b = breaker();
    let e = emitter(&b, &Bulkhead::new(4).unwrap());
    b.trip_now();
    for i in 0..2 {
        let _ = e.emit(i, Priority::Routine, |_| async { Ok::<_, ()>(()) }).await;
    }
    b.reset();
    let replay = {
        let e = e.clone();
        tokio::spawn(async move {
            e.replay(10, |_| async {
                sleep(100 * MS).await;
                if true {
                    panic!("a consumer bug (expected by this test)");
                }
                Ok::<_, ()>(())
            })
            .await
        })
    };
    sleep(MS).await;
    let shutdown = {
        let e = e.clone();
        tokio::spawn(async move {
            let mut drained = Vec::new();
            e.shutdown_async(|t, _| drained.push(t)).await;
            drained
        })
    };
    sleep(10 * MS).await;
    assert!(!shutdown.is_finished(), "waits for the replay");
    assert!(replay.await.unwrap_err().is_panic());
    let drained = shutdown.await.unwrap();
    assert_eq!(drained, [0, 1], "the trigger the panicking call kept, first");
    let s = e.stats();
    assert!(!s.pending && s.queued == 0, "{s:?}");
    assert_conserved(&s, 2);
}

// ------------------------------------------------------------ clock reads

/// "One read of the breaker's clock starts the emit ...; one more ends it",
/// also for a call that is not ready on its first poll (its timer is armed
/// from the start reading, not from a third read).
#[tokio::test(start_paused = true)]
async fn an_async_emit_reads_the_breaker_clock_twice_even_when_it_arms_a_timer() {
    #[derive(Default)]
    struct Counting(AtomicU64);
    impl tailguard::clock::Clock for Counting {
        fn now_nanos(&self) -> u64 {
            self.0.fetch_add(1, Ordering::SeqCst) * 1_000
        }
    }
    let clock = Arc::new(Counting::default());
    let b = Breaker::builder()
        .clock(ClockSource::custom(
            Arc::clone(&clock) as Arc<dyn tailguard::clock::Clock>
        ))
        .ticker(false)
        .build()
        .unwrap();
    let e: Emitter<u64> = Emitter::builder(b, DeadLetterQueue::with_capacity(8).unwrap())
        .timeout(200 * MS)
        .unwrap()
        .build()
        .unwrap();
    for pending_first in [false, true] {
        let before = clock.0.load(Ordering::SeqCst);
        let out = e
            .emit(1, Priority::Routine, move |_| async move {
                if pending_first {
                    sleep(10 * MS).await;
                }
                Ok::<_, ()>(())
            })
            .await;
        assert!(out.is_delivered());
        let reads = clock.0.load(Ordering::SeqCst) - before;
        assert_eq!(reads, 2, "pending first: {pending_first}");
    }
}

/// "If `call` or its future panics, the trigger is queued first": also a
/// future that panics in its destructor, when the emitter drops it at its
/// completion (from a hostile review of issue 15).
struct PanicOnDrop;
impl std::future::Future for PanicOnDrop {
    type Output = Result<(), &'static str>;
    fn poll(self: std::pin::Pin<&mut Self>, _: &mut std::task::Context<'_>) -> std::task::Poll<Self::Output> {
        std::task::Poll::Ready(Err("consumer said no"))
    }
}
impl Drop for PanicOnDrop {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            panic!("a consumer bug in a destructor (expected by this test)");
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_call_future_panicking_in_its_drop_queues_its_trigger() {
    let b = Breaker::builder()
        .clock(ClockSource::tokio())
        .ticker(false)
        .build()
        .unwrap();
    let e: Emitter<u64> = Emitter::builder(b.clone(), DeadLetterQueue::with_capacity(8).unwrap())
        .build()
        .unwrap();
    let e2 = e.clone();
    let out = tokio::spawn(async move {
        let _ = e2.emit(7, Priority::Critical, |_| PanicOnDrop).await;
    })
    .await;
    assert!(out.unwrap_err().is_panic(), "the panic goes on to the caller");
    let s = e.stats();
    assert!(
        s.queued == 1 && s.diverted_failed == 1 || s.dropped_in_panics == 1,
        "trigger 7 was neither queued nor counted as dropped in a panic: {s:?}"
    );
}

// ---- a breaker on tokio's clock, on the ticker thread ----
// (The thread reads tokio's clock in the context of the runtime the breaker
// was built in. Real time here, bounded to a second or so each.)

/// Slow calls (by the breaker's clock: 5 ms against 1 ms) until it trips or
/// `limit` of real time passes; how long it took.
fn slow_until_open(b: &Breaker, limit: Duration) -> Option<Duration> {
    let t0 = std::time::Instant::now();
    while t0.elapsed() < limit {
        for _ in 0..20 {
            if let Ok(p) = b.allow() {
                p.record_latency(5 * MS, true);
            }
        }
        if b.state() == State::Open {
            return Some(t0.elapsed());
        }
        std::thread::sleep(MS);
    }
    None
}

fn tokio_breaker() -> Breaker {
    Breaker::builder()
        .clock(ClockSource::tokio())
        .window(10 * MS)
        .latency_threshold(MS)
        .build()
        .unwrap()
}

/// Built with the defaults inside a runtime, with nobody calling `tick`:
/// the ticker thread judges its windows.
#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn a_breaker_on_tokios_clock_built_with_the_defaults_trips_by_itself() {
    let b = tokio_breaker();
    assert!(tailguard::Ticker::is_running());
    let took = tokio::task::spawn_blocking(move || slow_until_open(&b, Duration::from_secs(5)))
        .await
        .unwrap();
    assert!(took.is_some_and(|t| t < Duration::from_secs(2)), "{took:?}");
}

/// Built in a runtime that is gone by the time it is used, or outside any
/// runtime, or in a current-thread runtime driven only now and then: it
/// trips all the same (from a hostile review: a tick task on the runtime
/// never ran in these).
#[test]
fn a_breaker_on_tokios_clock_trips_whatever_became_of_its_runtime() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let gone = rt.block_on(async { tokio_breaker() });
    drop(rt);
    assert!(
        slow_until_open(&gone, Duration::from_secs(5)).is_some(),
        "{:?}",
        gone.snapshot()
    );

    let outside = tokio_breaker();
    assert!(
        slow_until_open(&outside, Duration::from_secs(5)).is_some(),
        "{:?}",
        outside.snapshot()
    );

    let idle = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let b = idle.block_on(async { tokio_breaker() });
    assert!(
        slow_until_open(&b, Duration::from_secs(5)).is_some(),
        "{:?}",
        b.snapshot()
    );
}

/// Under a paused clock the thread reads the runtime's virtual time, not
/// the real one (from a hostile review of issue 16: with `ticker(true)` it
/// read the system clock, and the breaker ran on two clocks), and it adds
/// no timer: a paused runtime waiting on something outside tokio's timers
/// stands still, as it would without the breaker.
#[tokio::test(start_paused = true)]
async fn under_a_paused_clock_the_thread_reads_virtual_time_and_adds_no_timer() {
    let b = Breaker::builder()
        .clock(ClockSource::tokio())
        .window(100 * MS)
        .build()
        .unwrap();
    b.allow().unwrap().record(true);
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        std::thread::sleep(500 * MS); // real time: several ticker wakes
        let _ = tx.send(());
    });
    let t0 = Instant::now();
    rx.await.unwrap();
    assert_eq!(Instant::now() - t0, Duration::ZERO, "virtual time stood still");
    let s = b.snapshot();
    assert!(
        s.window.closed_at < 100 * MS && s.totals.calls == 0,
        "no window closed: {s:?}"
    );
    // Virtual time moves: the thread's next wake closes what it ran through.
    tokio::time::advance(Duration::from_secs(3)).await;
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while b.snapshot().totals.calls == 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(10 * MS);
    }
    let s = b.snapshot();
    assert_eq!(s.totals.calls, 1, "{s:?}");
    assert!(s.window.closed_at >= Duration::from_secs(3) - 100 * MS, "{s:?}");
}
