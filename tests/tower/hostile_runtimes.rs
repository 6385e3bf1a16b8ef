//! A hostile review of issue 20 ("runtimes") for the tower layer: the
//! timeout's [`Timer`] (`BreakerLayer::timer`) when it panics as it arms,
//! when its sleep panics when polled or dropped, is ready at once or never,
//! or has none to give only now and then; budgets at the extremes; response
//! futures dropped at each point; and inner futures that panic in their
//! destructors when the layer cuts them. All on the manual clock or a
//! runtime-less executor, never a real sleep.
//!
//! Tests that fail are findings, kept failing on purpose (see the commit).

use crate::support::{MS, SEC};
use futures_lite::future::block_on;
use std::future::{pending, Future};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;
use tailguard::clock::ManualClock;
use tailguard::timer::{Never, Timer};
use tailguard::tower::{BreakerError, BreakerLayer, ErrorsOnly};
use tailguard::{Breaker, Bulkhead, State};
use tower::{service_fn, Layer, Service};

/// What a hostile timer's sleep does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SleepKind {
    Ready,
    Forever,
    PanicOnPoll,
    PanicOnDrop,
}

struct HostileSleep(SleepKind);

impl Future for HostileSleep {
    type Output = ();
    fn poll(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<()> {
        match self.0 {
            SleepKind::Ready => Poll::Ready(()),
            SleepKind::Forever | SleepKind::PanicOnDrop => Poll::Pending,
            SleepKind::PanicOnPoll => panic!("a timer's sleep panicking when polled (expected by this test)"),
        }
    }
}

impl Drop for HostileSleep {
    fn drop(&mut self) {
        if self.0 == SleepKind::PanicOnDrop && !std::thread::panicking() {
            panic!("a timer's sleep panicking when dropped (expected by this test)");
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct Hostile(SleepKind);

impl Timer for Hostile {
    type Sleep = HostileSleep;
    fn sleep(&self, _after: Duration) -> Option<HostileSleep> {
        Some(HostileSleep(self.0))
    }
}

#[derive(Clone, Copy, Debug)]
struct PanickingTimer;

impl Timer for PanickingTimer {
    type Sleep = HostileSleep;
    fn sleep(&self, _after: Duration) -> Option<HostileSleep> {
        panic!("a timer panicking as it arms (expected by this test)")
    }
}

/// A timer with none to give on the arms in `none_on` (from 1), a sleep
/// ready at once otherwise; it records each `after`.
#[derive(Clone, Default)]
struct Flaky {
    none_on: Vec<usize>,
    afters: Arc<Mutex<Vec<Duration>>>,
}

impl Timer for Flaky {
    type Sleep = HostileSleep;
    fn sleep(&self, after: Duration) -> Option<HostileSleep> {
        let mut afters = self.afters.lock().unwrap();
        afters.push(after);
        (!self.none_on.contains(&afters.len())).then_some(HostileSleep(SleepKind::Ready))
    }
}

/// An inner response future that never completes and panics when dropped.
pub(crate) struct HangThenPanicOnDrop;

impl Future for HangThenPanicOnDrop {
    type Output = Result<(), ()>;
    fn poll(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Self::Output> {
        Poll::Pending
    }
}

impl Drop for HangThenPanicOnDrop {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            panic!("an inner future panicking in its destructor (expected by this test)");
        }
    }
}

/// Pending on its first poll (waking itself), then `Ok(())`.
struct PendingOnce(bool);

impl Future for PendingOnce {
    type Output = Result<(), ()>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if !self.0 {
            self.0 = true;
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        Poll::Ready(Ok(()))
    }
}

fn must_panic<R>(f: impl FnOnce() -> R) {
    assert!(catch_unwind(AssertUnwindSafe(f)).is_err(), "expected a panic");
}

/// A breaker on `clock` whose backoff is over: the next request is its one probe.
pub(crate) fn half_open(clock: &ManualClock) -> Breaker {
    let b = Breaker::builder()
        .clock(clock.clone())
        .ticker(false)
        .half_open_probes(1)
        .success_to_close(1)
        .build()
        .unwrap();
    b.trip_now();
    clock.advance(60 * SEC);
    b
}

fn layer(b: &Breaker, bulkhead: &Bulkhead, timeout: Duration) -> BreakerLayer<ErrorsOnly> {
    BreakerLayer::new(b.clone())
        .bulkhead(bulkhead.clone())
        .timeout(timeout)
        .unwrap()
        .classify(ErrorsOnly)
}

fn assert_slots_free(b: &Breaker, bulkhead: &Bulkhead) {
    assert_eq!(
        (bulkhead.in_flight(), b.snapshot().probes_in_flight),
        (0, 0),
        "bulkhead and probe slots given back"
    );
}

/// The window's (calls, errors, slow, cancelled), after closing it.
fn window(b: &Breaker, clock: &ManualClock) -> (u64, u64, u64, u64) {
    clock.advance(2 * SEC);
    b.tick();
    let w = b.snapshot().window;
    (w.calls, w.errors, w.slow, w.cancelled)
}

/// src/tower/mod.rs: "if it [the classifier] panics, the call counts as
/// failed and the panic goes on to the caller. So does a panic of the
/// inner service's `call` or of its future"; src/tower/future.rs: "The
/// inner future is dropped now, and its destructor is its code too: a
/// panic there is a failed call, like one in `poll`". The same destructor
/// panic when the layer drops the inner future because its timer had none
/// to give (`BreakerError::NoTimer`) must count as a failed call too, not
/// as a cancel.
#[test]
fn an_inner_future_panicking_in_its_drop_when_cut_for_no_timer_counts_as_failed() {
    let clock = ManualClock::new();
    let b = Breaker::builder().clock(clock.clone()).ticker(false).build().unwrap();
    let bulkhead = Bulkhead::new(1).unwrap();
    let mut svc = layer(&b, &bulkhead, 200 * MS)
        .timer(Never)
        .layer(service_fn(|()| HangThenPanicOnDrop));
    must_panic(|| block_on(svc.call(())));
    assert_eq!(bulkhead.in_flight(), 0);
    assert_eq!(
        window(&b, &clock),
        (1, 1, 0, 0),
        "a panic of the inner future's destructor is a failed call, whatever cut it (calls, errors, slow, cancelled)"
    );
}

/// The same destructor panic when the layer cuts the inner future at its
/// deadline: the timeout is counted (failed and slow), the panic goes on,
/// the slots come back.
#[test]
fn an_inner_future_panicking_in_its_drop_at_its_timeout_counts_the_timeout() {
    let clock = ManualClock::new();
    let b = half_open(&clock);
    let bulkhead = Bulkhead::new(1).unwrap();
    let mut svc = layer(&b, &bulkhead, 200 * MS)
        .timer(Hostile(SleepKind::Ready))
        .layer(service_fn(|()| HangThenPanicOnDrop));
    must_panic(|| block_on(svc.call(())));
    assert_slots_free(&b, &bulkhead);
    assert_eq!(b.state(), State::Open, "a timed-out probe re-opens");
}

/// src/timer.rs (`Timer::sleep`): a timer that panics "(or its sleep
/// does when polled) ... is no timer to be had"; the layer then fails with
/// `BreakerError::NoTimer`. A timer whose `sleep` panics, or whose sleep
/// panics when polled: the request fails as no timer, no panic comes out,
/// both slots come back, no verdict, and the next request is the probe.
#[test]
fn a_timer_or_sleep_that_panics_gives_back_both_slots_with_no_verdict() {
    for which in ["sleep() panics", "poll panics"] {
        let clock = ManualClock::new();
        let b = half_open(&clock);
        let bulkhead = Bulkhead::new(1).unwrap();
        let l = layer(&b, &bulkhead, 200 * MS);
        let err = if which == "sleep() panics" {
            let mut svc = l
                .clone()
                .timer(PanickingTimer)
                .layer(service_fn(|()| pending::<Result<(), ()>>()));
            block_on(svc.call(())).unwrap_err()
        } else {
            let mut svc = l
                .clone()
                .timer(Hostile(SleepKind::PanicOnPoll))
                .layer(service_fn(|()| pending::<Result<(), ()>>()));
            block_on(svc.call(())).unwrap_err()
        };
        assert!(matches!(err, BreakerError::NoTimer), "{which}: {err:?}");
        assert_slots_free(&b, &bulkhead);
        assert_eq!(b.state(), State::HalfOpen, "{which}: no verdict");
        let mut ok = l.timer(Never).layer(service_fn(|()| async { Ok::<_, ()>(()) }));
        assert!(block_on(ok.call(())).is_ok(), "{which}: the probe slot is free");
        assert_eq!(b.state(), State::Closed, "{which}");
    }
}

/// src/tower/error.rs (`TimedOut`): "The request ran past the timeout
/// (after at least this long); its future was dropped", counted "as a
/// timeout (failed and slow)". A sleep ready at once (a zero deadline)
/// cuts a pending request at its first poll: the duration reported is at
/// least the budget, the breaker counts it failed and slow.
#[test]
fn a_sleep_ready_at_once_is_a_timeout_of_at_least_the_budget() {
    let clock = ManualClock::new();
    let b = Breaker::builder().clock(clock.clone()).ticker(false).build().unwrap();
    let bulkhead = Bulkhead::new(1).unwrap();
    let mut svc = layer(&b, &bulkhead, 200 * MS)
        .timer(Hostile(SleepKind::Ready))
        .layer(service_fn(|()| pending::<Result<(), ()>>()));
    let err = block_on(svc.call(())).unwrap_err();
    assert!(matches!(err, BreakerError::TimedOut(d) if d >= 200 * MS), "{err:?}");
    assert!(err.called());
    assert_eq!(bulkhead.in_flight(), 0);
    assert_eq!(window(&b, &clock), (1, 1, 1, 0));
}

/// src/tower/layer.rs (`timer`): "The timer is armed only for a request
/// not ready on its first poll, from inside that poll; where it has none
/// to give, the request fails at once with `BreakerError::NoTimer`". A
/// timer with none only on its second arm: the first and third requests
/// time out (failed and slow), the second is `NoTimer` (cancelled, no
/// verdict); the timer is told what is left of the budget (the service's
/// `call` took 150 ms of it, then 300 ms: none left).
#[test]
fn a_timer_with_none_only_on_its_second_arm_cuts_only_that_request_as_no_timer() {
    let clock = ManualClock::new();
    let b = Breaker::builder().clock(clock.clone()).ticker(false).build().unwrap();
    let bulkhead = Bulkhead::new(1).unwrap();
    let timer = Flaky {
        none_on: vec![2],
        ..Flaky::default()
    };
    let spend = Arc::new(Mutex::new(vec![150 * MS, Duration::ZERO, 300 * MS]));
    let c = clock.clone();
    let mut svc = layer(&b, &bulkhead, 200 * MS)
        .timer(timer.clone())
        .layer(service_fn(move |()| {
            c.advance(spend.lock().unwrap().remove(0));
            pending::<Result<(), ()>>()
        }));
    let outs: Vec<_> = (0..3).map(|_| block_on(svc.call(()))).collect();
    assert!(matches!(outs[0], Err(BreakerError::TimedOut(_))), "{outs:?}");
    assert!(matches!(outs[1], Err(BreakerError::NoTimer)), "{outs:?}");
    assert!(matches!(outs[2], Err(BreakerError::TimedOut(_))), "{outs:?}");
    assert_eq!(*timer.afters.lock().unwrap(), vec![50 * MS, 200 * MS, Duration::ZERO]);
    assert_eq!(bulkhead.in_flight(), 0);
    assert_eq!(window(&b, &clock), (2, 2, 2, 1));
}

/// src/timer.rs: a pending call with no timer to give "is cut at once ...
/// and it is not left to hang". With the largest budget there is
/// (`Duration::MAX`), on the manual clock and on tokio's clock outside any
/// runtime, the first poll answers `NoTimer`.
#[test]
fn a_budget_of_duration_max_with_no_timer_is_cut_at_once() {
    let clocks: [(&str, Breaker); 2] = [
        (
            "manual",
            Breaker::builder()
                .clock(ManualClock::new())
                .ticker(false)
                .build()
                .unwrap(),
        ),
        (
            "tokio",
            Breaker::builder()
                .clock(tailguard::clock::ClockSource::tokio())
                .ticker(false)
                .build()
                .unwrap(),
        ),
    ];
    for (name, b) in clocks {
        let bulkhead = Bulkhead::new(1).unwrap();
        let mut never = layer(&b, &bulkhead, Duration::MAX)
            .timer(Never)
            .layer(service_fn(|()| pending::<Result<(), ()>>()));
        let mut tokio = layer(&b, &bulkhead, Duration::MAX).layer(service_fn(|()| pending::<Result<(), ()>>()));
        let mut cx = Context::from_waker(Waker::noop());
        let first = Box::pin(never.call(())).as_mut().poll(&mut cx);
        assert!(
            matches!(first, Poll::Ready(Err(BreakerError::NoTimer))),
            "{name}: {first:?}"
        );
        let second = Box::pin(tokio.call(())).as_mut().poll(&mut cx);
        assert!(
            matches!(second, Poll::Ready(Err(BreakerError::NoTimer))),
            "{name}: {second:?}"
        );
        assert_eq!(bulkhead.in_flight(), 0, "{name}");
    }
}

/// src/tower/mod.rs: "Dropping the response future ... gives the bulkhead
/// slot back and cancels the permit: a probe's slot is returned at once".
/// At every point: before its first poll, after it (its sleep armed, on a
/// runtime-less executor), and with an inner future, or a sleep, that
/// panics in its destructor as the response future is dropped (the panic
/// goes on; the slots still come back).
#[test]
fn a_response_future_dropped_at_any_point_gives_back_both_slots() {
    let clock = ManualClock::new();
    let b = half_open(&clock);
    let bulkhead = Bulkhead::new(1).unwrap();
    let l = layer(&b, &bulkhead, 200 * MS);
    let mut cx = Context::from_waker(Waker::noop());
    // Never polled.
    let mut svc = l
        .clone()
        .timer(Hostile(SleepKind::Forever))
        .layer(service_fn(|()| pending::<Result<(), ()>>()));
    drop(svc.call(()));
    assert_slots_free(&b, &bulkhead);
    // Polled once, its sleep armed.
    let mut f = Box::pin(svc.call(()));
    assert!(f.as_mut().poll(&mut cx).is_pending());
    assert_eq!((bulkhead.in_flight(), b.snapshot().probes_in_flight), (1, 1));
    drop(f);
    assert_slots_free(&b, &bulkhead);
    // The inner future panics as it is dropped.
    let mut bomb = l
        .clone()
        .timer(Hostile(SleepKind::Forever))
        .layer(service_fn(|()| HangThenPanicOnDrop));
    let mut f = Box::pin(bomb.call(()));
    assert!(f.as_mut().poll(&mut cx).is_pending());
    must_panic(move || drop(f));
    assert_slots_free(&b, &bulkhead);
    // The sleep panics as it is dropped.
    let mut sleeper = l
        .clone()
        .timer(Hostile(SleepKind::PanicOnDrop))
        .layer(service_fn(|()| pending::<Result<(), ()>>()));
    let mut f = Box::pin(sleeper.call(()));
    assert!(f.as_mut().poll(&mut cx).is_pending());
    must_panic(move || drop(f));
    assert_slots_free(&b, &bulkhead);
    assert_eq!(b.state(), State::HalfOpen, "four cancels, no verdict");
    // A response that comes before a never-firing sleep: answered, judged.
    let mut late = l
        .timer(Hostile(SleepKind::Forever))
        .layer(service_fn(|()| PendingOnce(false)));
    assert!(block_on(late.call(())).is_ok());
    assert_eq!(b.state(), State::Closed);
}

/// Issue 20: "nothing in the crate panics for a missing runtime";
/// src/tower/layer.rs (`timeout`): where the timer has none to give the
/// request fails "with `BreakerError::NoTimer` ... rather than panic or
/// hang". A request pending on a tokio runtime (its sleep armed there),
/// polled again once that runtime is gone: no panic.
#[test]
fn a_response_future_polled_after_its_tokio_runtime_is_gone_does_not_panic() {
    let clock = ManualClock::new();
    let b = Breaker::builder().clock(clock.clone()).ticker(false).build().unwrap();
    let bulkhead = Bulkhead::new(1).unwrap();
    let mut svc = layer(&b, &bulkhead, 200 * MS).layer(service_fn(|()| pending::<Result<(), ()>>()));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let mut f = Box::pin(svc.call(()));
    let mut cx = Context::from_waker(Waker::noop());
    rt.block_on(async { assert!(f.as_mut().poll(&mut cx).is_pending()) });
    drop(rt);
    let polled = catch_unwind(AssertUnwindSafe(|| f.as_mut().poll(&mut cx).is_ready()));
    drop(f);
    assert_eq!(bulkhead.in_flight(), 0);
    assert!(polled.is_ok(), "polling the request after its runtime is gone panicked");
}

/// src/tower/layer.rs (`timer`): "The timer is armed only for a request
/// not ready on its first poll, from inside that poll". A timer that
/// panics if touched serves ready requests; a pending request is answered
/// before a never-firing sleep, and one cut at its deadline armed it once.
#[test]
fn the_layers_timer_is_armed_once_per_pending_request_and_never_for_a_ready_one() {
    let clock = ManualClock::new();
    let b = Breaker::builder().clock(clock.clone()).ticker(false).build().unwrap();
    let bulkhead = Bulkhead::new(1).unwrap();
    let mut ready = layer(&b, &bulkhead, 200 * MS)
        .timer(PanickingTimer)
        .layer(service_fn(|()| async { Ok::<_, ()>(()) }));
    for _ in 0..3 {
        assert!(block_on(ready.call(())).is_ok());
    }
    let timer = Flaky::default();
    let mut slow = layer(&b, &bulkhead, 200 * MS)
        .timer(Hostile(SleepKind::Forever))
        .layer(service_fn(|()| PendingOnce(false)));
    assert!(block_on(slow.call(())).is_ok());
    // Flaky's sleeps fire at once: armed once, then the request is cut.
    let mut cut = layer(&b, &bulkhead, 200 * MS)
        .timer(timer.clone())
        .layer(service_fn(|()| PendingOnce(false)));
    assert!(matches!(block_on(cut.call(())), Err(BreakerError::TimedOut(_))));
    assert_eq!(timer.afters.lock().unwrap().len(), 1);
    assert_eq!(bulkhead.in_flight(), 0);
}
