//! Hostile review, third round: the response future holding its permit in
//! place (`OwnedPermit::*_in_place`, `held`). Panics at each point of
//! `poll` caught by the caller, followed by another poll or a drop; HALF_OPEN
//! probes through each; the refused path polled twice; a response future
//! dropped on another thread or leaked with `mem::forget`. All on the
//! manual clock and a no-op waker, never a real sleep.
//!
//! Tests marked `FINDING` failed against the code they were written for
//! (9c3841e): an inner future that panicked was left in place and polled
//! again. Since then it is dropped at its panic.

use crate::hostile_runtimes::{half_open, HangThenPanicOnDrop};
use crate::support::MS;
use std::future::{pending, Future};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;
use tailguard::clock::ManualClock;
use tailguard::timer::{Never, Timer};
use tailguard::tower::{BreakerError, BreakerLayer, ErrorsOnly};
use tailguard::{Breaker, Bulkhead, State};
use tower::{service_fn, Layer, Service};

/// After a probe's future is gone: both its slots back, the breaker
/// re-opened (a failed probe), and one call counted, failed.
fn assert_one_failed_probe(b: &Breaker, bulkhead: &Bulkhead, clock: &ManualClock) {
    assert_eq!(
        (bulkhead.in_flight(), b.snapshot().probes_in_flight),
        (0, 0),
        "both slots back"
    );
    assert_eq!(b.state(), State::Open, "a failed probe re-opens");
    assert_eq!(totals(b, clock), (1, 1, 0), "counted once, failed");
}

/// A manual clock, a breaker on it whose next request is its one probe,
/// and a bulkhead of one slot.
fn probe_setup() -> (ManualClock, Breaker, Bulkhead) {
    let clock = ManualClock::new();
    let b = half_open(&clock);
    (clock, b, Bulkhead::new(1).unwrap())
}

fn closed(clock: &ManualClock) -> Breaker {
    Breaker::builder().clock(clock.clone()).ticker(false).build().unwrap()
}

/// (calls, errors, cancelled) since the start, after an hour's tick.
fn totals(b: &Breaker, clock: &ManualClock) -> (u64, u64, u64) {
    clock.advance(Duration::from_secs(3600));
    b.tick();
    let t = b.snapshot().totals;
    (t.calls, t.errors, t.cancelled)
}

/// A waker that does nothing (`Waker::noop` is newer than the MSRV).
struct NoWake;

impl std::task::Wake for NoWake {
    fn wake(self: Arc<Self>) {}
}

fn poll_caught<F: Future>(f: Pin<&mut F>) -> Result<Poll<F::Output>, ()> {
    let waker = Waker::from(Arc::new(NoWake));
    let mut cx = Context::from_waker(&waker);
    catch_unwind(AssertUnwindSafe(|| f.poll(&mut cx))).map_err(|_| ())
}

/// Panics on its first poll; pending on every later one. Counts its polls.
struct PanicsThenHangs(Arc<AtomicUsize>);

impl Future for PanicsThenHangs {
    type Output = Result<u32, ()>;
    fn poll(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Self::Output> {
        if self.0.fetch_add(1, Ordering::SeqCst) == 0 {
            panic!("a service bug on the first poll (expected by this test)");
        }
        Poll::Pending
    }
}

/// Panics on its first poll; ready with `Ok(7)` on every later one. Counts
/// its polls.
pub(crate) struct PanicsThenAnswers(pub(crate) Arc<AtomicUsize>);

impl Future for PanicsThenAnswers {
    type Output = Result<u32, ()>;
    fn poll(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Self::Output> {
        if self.0.fetch_add(1, Ordering::SeqCst) == 0 {
            panic!("a service bug on the first poll (expected by this test)");
        }
        Poll::Ready(Ok(7))
    }
}

/// A timer whose sleep is ready at once.
#[derive(Clone, Copy)]
struct AtOnce;

impl Timer for AtOnce {
    type Sleep = std::future::Ready<()>;
    fn sleep(&self, _after: Duration) -> Option<Self::Sleep> {
        Some(std::future::ready(()))
    }
}

// FINDING: "polling after completion panics" (tests/tower/permits.rs,
// `a_response_future_polled_after_completion_panics`: it "panics ...
// instead of polling the inner future again"; the commit's own test in
// panics.rs: polled again after the inner future panicked, "the second
// poll neither counts it again nor hands back a response ... (it
// panics)"). The request was settled at the inner future's panic (counted
// failed), yet the response future stays `Called`: a second poll polls the
// panicked inner future again and, with no timeout, answers `Pending`
// instead of panicking. Observed: poll 2 returns Pending, inner polled 3
// times over three polls. Expected: every poll after the panic panics and
// the inner future is polled once.
#[test]
fn hostile3_a_response_future_polled_again_after_its_inner_future_panicked_does_not_poll_it_again() {
    let clock = ManualClock::new();
    let b = closed(&clock);
    let bulkhead = Bulkhead::new(1).unwrap();
    let polls = Arc::new(AtomicUsize::new(0));
    let p = Arc::clone(&polls);
    let mut svc = BreakerLayer::new(b.clone())
        .bulkhead(bulkhead.clone())
        .classify(ErrorsOnly)
        .layer(service_fn(move |()| PanicsThenHangs(Arc::clone(&p))));
    let mut fut = Box::pin(svc.call(()));
    assert!(poll_caught(fut.as_mut()).is_err(), "the inner future's panic goes on");
    let mut later = Vec::new();
    for _ in 0..2 {
        later.push(match poll_caught(fut.as_mut()) {
            Err(()) => "panicked",
            Ok(Poll::Pending) => "pending",
            Ok(Poll::Ready(_)) => "ready",
        });
    }
    let inner_polls = polls.load(Ordering::SeqCst);
    drop(fut);
    assert_eq!(bulkhead.in_flight(), 0);
    assert_eq!(totals(&b, &clock), (1, 1, 0), "counted once, failed");
    assert_eq!(
        (later, inner_polls),
        (vec!["panicked", "panicked"], 1),
        "polls after the inner future's panic, and how often the inner future was polled"
    );
}

// FINDING: the same root cause through a HALF_OPEN probe. Module docs: "a
// request the breaker rejects ... never reaches the inner service"; the
// probe's panic re-opened the breaker (the probe judged failed), yet a
// caller that catches the panic and polls again drives the dead probe's
// inner future on while the breaker is OPEN, and its `Ok(7)` is then
// thrown away by `held`'s assertion. Observed: the inner future polled a
// second time with the breaker OPEN. Expected: polled once (the response
// future finished at the panic).
#[test]
fn hostile3_a_probe_whose_inner_future_panicked_is_not_driven_on_while_the_breaker_is_open() {
    let (clock, b, bulkhead) = probe_setup();
    let polls = Arc::new(AtomicUsize::new(0));
    let p = Arc::clone(&polls);
    let mut svc = BreakerLayer::new(b.clone())
        .bulkhead(bulkhead.clone())
        .classify(ErrorsOnly)
        .layer(service_fn(move |()| PanicsThenAnswers(Arc::clone(&p))));
    let mut fut = Box::pin(svc.call(()));
    assert!(poll_caught(fut.as_mut()).is_err());
    assert_eq!(b.state(), State::Open, "the failed probe re-opened the breaker");
    assert_eq!(b.snapshot().probes_in_flight, 0);
    assert!(poll_caught(fut.as_mut()).is_err(), "polled again: it panics");
    let inner_polls = polls.load(Ordering::SeqCst);
    drop(fut);
    assert_eq!(bulkhead.in_flight(), 0);
    assert_eq!(b.state(), State::Open);
    assert_eq!(totals(&b, &clock).1, 1, "one failure");
    assert_eq!(
        inner_polls, 1,
        "the inner future of a probe the breaker already judged failed was polled again with the breaker OPEN"
    );
}

/// A probe with a 200 ms timeout on `timer` whose inner future hangs and
/// panics in its destructor; the response future polled twice (each poll
/// panics: the destructor's panic goes on, then "polled after completion"),
/// then dropped: counted once as failed, both slots back, re-opened.
fn probe_cut_with_a_panicking_destructor<R>(timer: R)
where
    R: Timer + Clone + Send + Sync + 'static,
{
    let (clock, b, bulkhead) = probe_setup();
    let mut svc = BreakerLayer::new(b.clone())
        .bulkhead(bulkhead.clone())
        .timeout(200 * MS)
        .unwrap()
        .classify(ErrorsOnly)
        .timer(timer)
        .layer(service_fn(|()| HangThenPanicOnDrop));
    let mut fut = Box::pin(svc.call(()));
    assert!(poll_caught(fut.as_mut()).is_err(), "the destructor's panic goes on");
    assert!(poll_caught(fut.as_mut()).is_err(), "polled after completion");
    assert_eq!(bulkhead.in_flight(), 0);
    drop(fut);
    assert_one_failed_probe(&b, &bulkhead, &clock);
}

/// Not a finding (passed): a probe cut at its deadline (a timer that fires
/// at once) or for no timer (`Never`), its inner future panicking in its
/// destructor, polled again.
#[test]
fn hostile3_a_probe_cut_with_a_panicking_destructor_polled_again_counts_once() {
    probe_cut_with_a_panicking_destructor(AtOnce);
    probe_cut_with_a_panicking_destructor(Never);
}

/// Not a finding (passed): a probe's classifier panics, the panic is
/// caught, the future polled again (it panics) and dropped: one failure,
/// both slots back, re-opened.
#[test]
fn hostile3_a_probe_whose_classifier_panicked_polled_again_counts_once() {
    let (clock, b, bulkhead) = probe_setup();
    let mut svc = BreakerLayer::new(b.clone())
        .bulkhead(bulkhead.clone())
        .classify(|_: &u32| -> bool { panic!("a classifier bug (expected by this test)") })
        .layer(service_fn(|()| async { Ok::<u32, ()>(1) }));
    let mut fut = Box::pin(svc.call(()));
    assert!(poll_caught(fut.as_mut()).is_err());
    assert!(poll_caught(fut.as_mut()).is_err());
    drop(fut);
    assert_eq!((bulkhead.in_flight(), b.snapshot().probes_in_flight), (0, 0));
    assert_eq!(b.state(), State::Open);
    assert_eq!(totals(&b, &clock), (1, 1, 0));
}

/// Not a finding (passed): in HALF_OPEN with the bulkhead full, the probe
/// is refused `BulkheadFull` (its slot given back at once); that refused
/// future polled twice panics the second time and counts nothing; the next
/// request, with a free bulkhead, is the probe and closes the breaker.
#[test]
fn hostile3_a_probe_refused_by_a_full_bulkhead_polled_twice_keeps_the_probe_slot_free() {
    let (clock, b, bulkhead) = probe_setup();
    let held = bulkhead.try_acquire_owned().unwrap();
    let mut svc = BreakerLayer::new(b.clone())
        .bulkhead(bulkhead.clone())
        .classify(ErrorsOnly)
        .layer(service_fn(|()| async { Ok::<u32, ()>(1) }));
    let mut fut = Box::pin(svc.call(()));
    assert!(matches!(
        poll_caught(fut.as_mut()),
        Ok(Poll::Ready(Err(BreakerError::BulkheadFull)))
    ));
    assert!(poll_caught(fut.as_mut()).is_err(), "polled after completion");
    assert_eq!(b.snapshot().probes_in_flight, 0);
    drop(fut);
    drop(held);
    let mut ok = Box::pin(svc.call(()));
    assert!(matches!(poll_caught(ok.as_mut()), Ok(Poll::Ready(Ok(1)))));
    assert_eq!(b.state(), State::Closed);
    assert_eq!(totals(&b, &clock), (1, 0, 0));
}

/// Not a finding (passed): a pending probe's response future moved to
/// another thread and dropped there: cancelled once (counted on that
/// thread's shard), both slots back, the next request is a probe.
#[test]
fn hostile3_a_probe_future_dropped_on_another_thread_gives_back_both_slots() {
    let (clock, b, bulkhead) = probe_setup();
    let mut svc = BreakerLayer::new(b.clone())
        .bulkhead(bulkhead.clone())
        .classify(ErrorsOnly)
        .layer(service_fn(|()| pending::<Result<u32, ()>>()));
    let mut fut = Box::pin(svc.call(()));
    assert!(matches!(poll_caught(fut.as_mut()), Ok(Poll::Pending)));
    assert_eq!(b.snapshot().probes_in_flight, 1);
    std::thread::spawn(move || drop(fut)).join().unwrap();
    assert_eq!((bulkhead.in_flight(), b.snapshot().probes_in_flight), (0, 0));
    let mut ok = BreakerLayer::new(b.clone())
        .classify(ErrorsOnly)
        .layer(service_fn(|()| async { Ok::<u32, ()>(1) }));
    let mut f = Box::pin(ok.call(()));
    assert!(matches!(poll_caught(f.as_mut()), Ok(Poll::Ready(Ok(1)))));
    assert_eq!(b.state(), State::Closed);
    assert_eq!(totals(&b, &clock), (1, 0, 1));
}

/// Not a finding (passed): a probe's response future leaked with
/// `mem::forget` (builder.rs, `probe_lease`: "a permit leaked with
/// `mem::forget` ... the breaker re-opens with the next backoff and the
/// slots are free again at the next HALF_OPEN"): the breaker is not stuck.
#[test]
fn hostile3_a_forgotten_probe_future_is_reclaimed_by_the_probe_lease() {
    let clock = ManualClock::new();
    let b = half_open(&clock);
    let mut svc = BreakerLayer::new(b.clone())
        .classify(ErrorsOnly)
        .layer(service_fn(|()| pending::<Result<u32, ()>>()));
    let mut fut = Box::pin(svc.call(()));
    assert!(matches!(poll_caught(fut.as_mut()), Ok(Poll::Pending)));
    std::mem::forget(fut);
    assert_eq!(b.snapshot().probes_in_flight, 1);
    for _ in 0..8 {
        clock.advance(Duration::from_secs(600));
        b.tick();
        if b.state() == State::Open {
            break;
        }
    }
    assert_eq!(b.state(), State::Open, "the lease re-opened the breaker");
    clock.advance(Duration::from_secs(3600 * 24));
    b.tick();
    let mut ok = BreakerLayer::new(b.clone())
        .classify(ErrorsOnly)
        .layer(service_fn(|()| async { Ok::<u32, ()>(1) }));
    let mut f = Box::pin(ok.call(()));
    assert!(matches!(poll_caught(f.as_mut()), Ok(Poll::Ready(Ok(1)))));
    assert_eq!(b.state(), State::Closed, "a new probe closed it");
}
