//! The hot-path operations, one at a time, for counting their instructions
//! under callgrind (`.ci/instructions` runs this binary and compares the
//! counts with `benches/instructions.baseline`).
//!
//! `instructions <op> <n>` runs `<op>` `n` times inside a function named
//! `measure_<op>` (never inlined), so that
//! `valgrind --tool=callgrind --toggle-collect='*measure_<op>*'` counts
//! exactly those `n` operations and the loop around them. Without arguments
//! (as `cargo test --benches` runs it) it runs every operation a few
//! thousand times and checks that each does what its name says.

use std::hint::black_box;
use std::time::Duration;
use tailguard::clock::{ClockSource, ManualClock};
use tailguard::dlq::{DeadLetterQueue, Priority, Pushed};
use tailguard::emit::{Emitted, Emitter, LocalEmitter};
use tailguard::{Breaker, RejectReason, State};

const LATENCY: Duration = Duration::from_micros(200);
const HOUR: Duration = Duration::from_secs(3600);

/// Every operation, by name (and `tower_call` with feature `tower`, which
/// `.ci/instructions` builds with).
const OPS: [&str; 17] = [
    "closed_allow_record_latency",
    "relative_allow_record_latency",
    "manual_allow_record_latency",
    "ramp_allow_record_latency",
    "closed_cycle",
    "local_allow_record_latency",
    "open_reject",
    "half_open_probe_cancel",
    "half_open_probe_round",
    "dlq_push_pop",
    "emit_delivered",
    "emit_diverted",
    "tick_nothing_due",
    "tick_idle_window",
    "next_due",
    "local_emit_delivered",
    "local_emit_diverted",
];

/// A CLOSED breaker with no ticker; tripped by hand (the diverted
/// operations), it stays OPEN for an hour: however slow valgrind runs, its
/// backoff never runs out under a measurement.
fn closed(clock: ClockSource, local: usize) -> Breaker {
    Breaker::builder()
        .clock(clock)
        .ticker(false)
        .base_backoff(HOUR)
        .max_backoff(HOUR)
        .local_handles(local)
        .build()
        .expect("valid config")
}

#[inline(never)]
fn measure_closed_allow_record_latency(b: &Breaker, n: u64) {
    for _ in 0..n {
        b.allow().expect("closed").record_latency(black_box(LATENCY), true);
    }
}

/// The same on a breaker with the relative latency rule (its work is at
/// window close: the hot path is the same).
#[inline(never)]
fn measure_relative_allow_record_latency(b: &Breaker, n: u64) {
    for _ in 0..n {
        b.allow().expect("closed").record_latency(black_box(LATENCY), true);
    }
}

/// CLOSED on the manual clock: what the ramp's figure compares with.
#[inline(never)]
fn measure_manual_allow_record_latency(b: &Breaker, n: u64) {
    for _ in 0..n {
        b.allow().expect("closed").record_latency(black_box(LATENCY), true);
    }
}

/// Half way through a recovery ramp (manual clock): each call's admission
/// decided by the ramp's count, half admitted and recorded, half rejected.
#[inline(never)]
fn measure_ramp_allow_record_latency(b: &Breaker, n: u64) {
    for _ in 0..n {
        if let Ok(p) = b.allow() {
            p.record_latency(black_box(LATENCY), true);
        }
    }
}

#[inline(never)]
fn measure_closed_cycle(b: &Breaker, n: u64) {
    for _ in 0..n {
        b.allow().expect("closed").record(true);
    }
}

#[inline(never)]
fn measure_local_allow_record_latency(h: &tailguard::LocalHandle, n: u64) {
    for _ in 0..n {
        h.allow().expect("closed").record_latency(black_box(LATENCY), true);
    }
}

#[inline(never)]
fn measure_open_reject(b: &Breaker, n: u64) {
    for _ in 0..n {
        black_box(b.allow().is_err());
    }
}

/// HALF_OPEN: take the probe slot, then give it back by dropping the permit.
#[inline(never)]
fn measure_half_open_probe_cancel(b: &Breaker, n: u64) {
    for _ in 0..n {
        let p = b.allow().expect("a free probe slot");
        black_box(p.is_probe());
        drop(p);
    }
}

/// HALF_OPEN: take the probe slot and record a good verdict (the breaker
/// needs more successes than `n` to close).
#[inline(never)]
fn measure_half_open_probe_round(b: &Breaker, n: u64) {
    for _ in 0..n {
        b.allow()
            .expect("a free probe slot")
            .record_latency(black_box(LATENCY), true);
    }
}

#[inline(never)]
fn measure_dlq_push_pop(q: &DeadLetterQueue<u64>, n: u64) {
    for i in 0..n {
        let _ = black_box(q.push(i, Priority::Routine));
        black_box(q.pop());
    }
}

/// `emit_blocking` on the happy path: breaker, bulkhead, the call (which
/// returns at once), two clock reads, the emit-time histogram.
#[inline(never)]
fn measure_emit_delivered(e: &Emitter<u64>, n: u64) {
    for i in 0..n {
        match e.emit_blocking(i, Priority::Routine, |t, _| Ok::<_, ()>(black_box(*t))) {
            Emitted::Delivered(o) => {
                black_box(o);
            }
            _ => unreachable!("happy path"),
        }
    }
}

/// `emit_blocking` on an OPEN breaker: rejected, queued (the queue is
/// drained every 512, inside the count: a pop per emit).
#[inline(never)]
fn measure_emit_diverted(e: &Emitter<u64>, n: u64) {
    for i in 0..n {
        let out = e.emit_blocking(i, Priority::Routine, |t, _| Ok::<_, ()>(*t));
        black_box(matches!(out, Emitted::Diverted { displaced: None, .. }));
        if i % 512 == 511 {
            e.drain(usize::MAX, |t, _| {
                black_box(t);
            });
        }
    }
}

/// A tick with nothing due (the window in progress has not ended): what a
/// core that ticks more often than its windows end pays for each tick.
#[inline(never)]
fn measure_tick_nothing_due(b: &Breaker, n: u64) {
    for _ in 0..n {
        b.tick();
    }
}

/// A tick closing one window without calls (the clock moved a window on
/// first: one atomic add of the manual clock's).
#[inline(never)]
fn measure_tick_idle_window(b: &Breaker, clock: &ManualClock, n: u64) {
    for _ in 0..n {
        clock.advance(Duration::from_millis(100));
        b.tick();
    }
}

/// How long until the next tick has work.
#[inline(never)]
fn measure_next_due(b: &Breaker, n: u64) {
    for _ in 0..n {
        black_box(b.next_due());
    }
}

/// As `measure_emit_delivered`, through a per-core emitter.
#[inline(never)]
fn measure_local_emit_delivered(e: &LocalEmitter<u64>, n: u64) {
    for i in 0..n {
        match e.emit_blocking(i, Priority::Routine, |t, _| Ok::<_, ()>(black_box(*t))) {
            Emitted::Delivered(o) => {
                black_box(o);
            }
            _ => unreachable!("happy path"),
        }
    }
}

/// As `measure_emit_diverted`, through a per-core emitter.
#[inline(never)]
fn measure_local_emit_diverted(e: &LocalEmitter<u64>, n: u64) {
    for i in 0..n {
        let out = e.emit_blocking(i, Priority::Routine, |t, _| Ok::<_, ()>(*t));
        black_box(matches!(out, Emitted::Diverted { displaced: None, .. }));
        if i % 512 == 511 {
            e.drain(usize::MAX, |t, _| {
                black_box(t);
            });
        }
    }
}

/// A per-core emitter over a breaker with one local shard, as `emitter`.
fn local_emitter() -> LocalEmitter<u64> {
    Emitter::builder(
        closed(ClockSource::coarse(), 1),
        DeadLetterQueue::with_capacity(1024).expect("capacity"),
    )
    .bulkhead(64)
    .expect("bound")
    .build_local()
    .expect("valid emitter")
}

fn emitter() -> Emitter<u64> {
    Emitter::builder(
        closed(ClockSource::coarse(), 0),
        DeadLetterQueue::with_capacity(1024).expect("capacity"),
    )
    .bulkhead(64)
    .expect("bound")
    .build()
    .expect("valid emitter")
}

/// A breaker in HALF_OPEN with `probes` slots, needing `successes` good
/// probes to close.
fn half_open(successes: u32) -> Breaker {
    let clock = ManualClock::new();
    let b = Breaker::builder()
        .clock(clock.clone())
        .ticker(false)
        .success_to_close(successes)
        .probe_lease(HOUR)
        .build()
        .expect("valid config");
    b.trip_now();
    clock.advance(Duration::from_secs(1));
    b.tick();
    assert_eq!(b.state(), State::HalfOpen);
    b
}

/// Every operation this build has.
fn ops() -> Vec<&'static str> {
    let mut ops = OPS.to_vec();
    if cfg!(feature = "tower") {
        ops.push("tower_call");
    }
    ops
}

/// The tower layer's inner service: ready at once, answers at once.
#[cfg(feature = "tower")]
#[derive(Clone)]
struct Ready;

#[cfg(feature = "tower")]
impl tower::Service<u64> for Ready {
    type Response = u64;
    type Error = std::io::Error;
    type Future = std::future::Ready<Result<u64, std::io::Error>>;

    fn poll_ready(&mut self, _: &mut std::task::Context<'_>) -> std::task::Poll<Result<(), std::io::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: u64) -> Self::Future {
        std::future::ready(Ok(black_box(req) + 1))
    }
}

#[cfg(feature = "tower")]
type TowerService = tailguard::tower::BreakerService<Ready, tailguard::tower::ErrorsOnly>;

/// One request through the tower layer (breaker alone, coarse clock, as
/// `benches/tower.rs`'s `tailguard`): `poll_ready`, `call`, the response
/// future polled once (ready: judged and recorded) and dropped, on a
/// no-op waker (no runtime: the layer's own work and the inner service's).
#[cfg(feature = "tower")]
#[inline(never)]
fn measure_tower_call(svc: &mut TowerService, n: u64) {
    use std::future::Future;
    use std::task::{Context, Poll, Wake, Waker};
    use tower::Service;
    struct Noop;
    impl Wake for Noop {
        fn wake(self: std::sync::Arc<Self>) {}
    }
    let waker = Waker::from(std::sync::Arc::new(Noop));
    let mut cx = Context::from_waker(&waker);
    for i in 0..n {
        assert!(matches!(svc.poll_ready(&mut cx), Poll::Ready(Ok(()))), "ready");
        let mut call = std::pin::pin!(svc.call(black_box(i)));
        match call.as_mut().poll(&mut cx) {
            Poll::Ready(Ok(r)) => {
                black_box(r);
            }
            _ => unreachable!("answers at once"),
        }
    }
}

fn run(op: &str, n: u64) {
    match op {
        #[cfg(feature = "tower")]
        "tower_call" => {
            use tower::Layer;
            let b = closed(ClockSource::coarse(), 0);
            let mut svc = tailguard::tower::BreakerLayer::new(b.clone())
                .classify(tailguard::tower::ErrorsOnly)
                .layer(Ready);
            measure_tower_call(&mut svc, n);
            assert_eq!(b.state(), State::Closed);
            // That each request was recorded, on a manual clock (the same
            // few requests in both runs `.ci/instructions` subtracts).
            let clock = ManualClock::new();
            let b = closed(clock.clone().into(), 0);
            let mut svc = tailguard::tower::BreakerLayer::new(b.clone())
                .classify(tailguard::tower::ErrorsOnly)
                .layer(Ready);
            measure_tower_call(&mut svc, 100);
            clock.advance(HOUR);
            b.tick();
            assert_eq!(b.snapshot().window.calls, 100);
        }
        "closed_allow_record_latency" => {
            let b = closed(ClockSource::coarse(), 0);
            measure_closed_allow_record_latency(&b, n);
            assert_eq!(b.state(), State::Closed);
        }
        "relative_allow_record_latency" => {
            let b = Breaker::builder()
                .clock(ClockSource::coarse())
                .ticker(false)
                .relative_latency(tailguard::RelativeLatency::new())
                .build()
                .expect("valid config");
            measure_relative_allow_record_latency(&b, n);
            assert_eq!(b.state(), State::Closed);
        }
        "manual_allow_record_latency" => {
            let b = closed(ManualClock::new().into(), 0);
            measure_manual_allow_record_latency(&b, n);
            assert_eq!(b.state(), State::Closed);
        }
        "ramp_allow_record_latency" => {
            let clock = ManualClock::new();
            let b = Breaker::builder()
                .clock(clock.clone())
                .ticker(false)
                .success_to_close(1)
                .recovery_ramp(HOUR)
                .build()
                .expect("valid config");
            b.trip_now();
            clock.advance(Duration::from_secs(1));
            b.allow().expect("the probe").record_latency(LATENCY, true);
            clock.advance(HOUR / 2);
            measure_ramp_allow_record_latency(&b, n);
            let s = b.snapshot();
            assert_eq!((s.state, s.ramp.map(|r| r.admitted)), (State::Closed, Some(0.5)));
            assert!(s.rejections.ramping.abs_diff(n / 2) <= 3, "{:?}", s.rejections);
        }
        "closed_cycle" => {
            let b = closed(ClockSource::coarse(), 0);
            measure_closed_cycle(&b, n);
            assert_eq!(b.state(), State::Closed);
        }
        "local_allow_record_latency" => {
            let b = closed(ClockSource::coarse(), 1);
            let h = b.local_handle().expect("one local shard");
            measure_local_allow_record_latency(&h, n);
            assert_eq!(b.state(), State::Closed);
        }
        "open_reject" => {
            let b = Breaker::builder()
                .clock(ClockSource::coarse())
                .ticker(false)
                .base_backoff(HOUR)
                .max_backoff(HOUR)
                .build()
                .expect("valid config");
            b.trip_now();
            assert_eq!(b.allow().map(|_| ()).unwrap_err().reason(), RejectReason::Open);
            measure_open_reject(&b, n);
            assert_eq!(b.state(), State::Open);
        }
        "half_open_probe_cancel" => {
            let b = half_open(1);
            measure_half_open_probe_cancel(&b, n);
            assert_eq!(b.state(), State::HalfOpen);
            assert_eq!(b.snapshot().probes_in_flight, 0);
        }
        "half_open_probe_round" => {
            // Rounds of 200 good probes (255 close), each round from a fresh
            // HALF_OPEN breaker: the count is per probe.
            let mut left = n;
            while left > 0 {
                let b = half_open(255);
                let k = left.min(200);
                measure_half_open_probe_round(&b, k);
                assert_eq!(b.state(), State::HalfOpen);
                assert_eq!(b.snapshot().probe_successes as u64, k);
                left -= k;
            }
        }
        "dlq_push_pop" => {
            let q = DeadLetterQueue::with_capacity(1024).expect("capacity");
            assert!(matches!(q.push(0, Priority::Routine), Ok(Pushed::Queued)));
            assert_eq!(q.pop(), Some((0, Priority::Routine)));
            measure_dlq_push_pop(&q, n);
            assert!(q.is_empty());
        }
        "emit_delivered" => {
            let e = emitter();
            measure_emit_delivered(&e, n);
            assert_eq!(e.stats().delivered, n);
        }
        "emit_diverted" => {
            let e = emitter();
            e.breaker().trip_now();
            measure_emit_diverted(&e, n);
            assert_eq!(e.stats().diverted_open, n);
        }
        "tick_nothing_due" => {
            let b = Breaker::builder()
                .clock(ClockSource::coarse())
                .ticker(false)
                .window(HOUR)
                .build()
                .expect("valid config");
            measure_tick_nothing_due(&b, n);
            assert_eq!(b.snapshot().window.closed_at, Duration::ZERO, "nothing closed");
        }
        "tick_idle_window" => {
            let clock = ManualClock::new();
            let b = Breaker::builder()
                .clock(clock.clone())
                .ticker(false)
                .window(Duration::from_millis(100))
                .build()
                .expect("valid config");
            measure_tick_idle_window(&b, &clock, n);
            let closed = b.snapshot().window.closed_at;
            assert_eq!(closed, clock.now(), "every window closed");
        }
        "next_due" => {
            let b = Breaker::builder()
                .clock(ClockSource::coarse())
                .ticker(false)
                .window(HOUR)
                .build()
                .expect("valid config");
            measure_next_due(&b, n);
            assert!(
                b.next_due() <= HOUR + HOUR / 2,
                "the first window: half a window to one and a half"
            );
        }
        "local_emit_delivered" => {
            let e = local_emitter();
            measure_local_emit_delivered(&e, n);
            assert_eq!(e.stats().delivered, n);
        }
        "local_emit_diverted" => {
            let e = local_emitter();
            e.breaker().trip_now();
            measure_local_emit_diverted(&e, n);
            assert_eq!(e.stats().diverted_open, n);
        }
        other => panic!("unknown operation {other:?}; one of {:?}", ops()),
    }
}

fn main() {
    if std::env::args().any(|a| a == "--list-ops") {
        println!("{}", ops().join(" "));
        return;
    }
    let args: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with('-')).collect();
    match args.as_slice() {
        [op, n] => run(op, n.parse().expect("a count")),
        [op] => run(op, 100_000),
        _ => {
            for op in ops() {
                run(op, 5_000);
            }
        }
    }
}
