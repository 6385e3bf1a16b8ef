//! The per-core emitter's async emit and replay
//! (`LocalEmitter::{emit, emit_with, replay, replay_with}`): on tokio's
//! paused clock (a current-thread runtime per core), the core cases again
//! on async-io's timer, and outside any runtime. Many emits of one core in
//! flight at once share its local bulkhead; a dropped emit gives back its
//! slots; replay keeps a failed trigger first. Issue 20.

use crate::support::emit::*;
use crate::support::*;
use std::future::pending;
#[cfg(feature = "async-io")]
use std::pin::pin;
#[cfg(feature = "tokio")]
use std::time::Duration;
use tailguard::clock::{ClockSource, ManualClock};
use tailguard::dlq::{DeadLetterQueue, Priority};
use tailguard::emit::{Divert, Emitted, LocalEmitter, ReplayStop};
use tailguard::timer::Never;
use tailguard::{Breaker, State};

/// A one-core breaker on `clock` (no ticker, one probe that closes it).
fn core_breaker(clock: impl Into<ClockSource>) -> Breaker {
    Breaker::builder()
        .clock(clock)
        .ticker(false)
        .half_open_probes(1)
        .success_to_close(1)
        .local_handles(1)
        .build()
        .unwrap()
}

/// A per-core emitter over `b`: bulkhead `slots`, 50 ms timeout, two
/// replay attempts.
fn local(b: &Breaker, slots: usize) -> LocalEmitter<u32> {
    LocalEmitter::builder(b.clone(), DeadLetterQueue::with_capacity(16).unwrap())
        .bulkhead(slots)
        .unwrap()
        .timeout(50 * MS)
        .unwrap()
        .replay_attempts(2)
        .unwrap()
        .build_local()
        .unwrap()
}

/// The shared emitter's future is `Send` (a multi-thread runtime may move
/// it); the per-core one borrows a `!Sync` emitter and stays on its core.
/// Compile-time: this test fails to build if the shared future loses `Send`.
#[test]
fn the_shared_emit_future_is_send() {
    fn is_send<F: Send>(_: &F) {}
    let b = plain_breaker();
    let e = emitter::<u32>(&b, 4);
    let f = e.emit_with(Never, 1, Priority::Routine, |_| async { Ok::<_, ()>(()) });
    is_send(&f);
    drop(f);
    assert_eq!(e.stats().cancelled, 1, "dropped unpolled: cancelled");
}

#[cfg(feature = "tokio")]
mod on_tokio {
    use super::*;
    use tokio::time::sleep;

    /// A current-thread runtime with a paused clock and a `LocalSet`: one
    /// core's executor.
    fn core(run: impl std::future::Future<Output = ()>) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap();
        tokio::task::LocalSet::new().block_on(&rt, run);
    }

    /// src/emit/future.rs (`LocalEmitter::emit`): the call is cut at the
    /// emitter's timeout; the breaker counts it failed and slow; the
    /// trigger is queued.
    #[test]
    fn a_hung_call_is_cut_at_the_deadline_and_counts_failed_and_slow() {
        core(async {
            let b = core_breaker(ClockSource::tokio());
            let e = local(&b, 4);
            let started = tokio::time::Instant::now();
            let out = e
                .emit(1, Priority::Routine, |_| async {
                    sleep(Duration::from_secs(10)).await;
                    Ok::<_, ()>(())
                })
                .await;
            assert_eq!(started.elapsed(), 50 * MS, "cut exactly at the deadline");
            assert_eq!(
                out,
                Emitted::Diverted {
                    reason: Divert::TimedOut(50 * MS),
                    displaced: None
                }
            );
            sleep(SEC).await;
            b.tick();
            let w = b.snapshot().window;
            assert_eq!((w.calls, w.errors, w.slow), (1, 1, 1));
            let s = e.stats();
            assert_eq!((s.diverted_timeout, s.bulkhead_in_flight), (1, 0));
            assert_conserved(&s, 1);
        });
    }

    /// A call that returns exactly at its deadline is delivered, not
    /// timed out (the deadline is inclusive, as for the shared emitter).
    #[test]
    fn a_call_that_just_meets_the_deadline_is_delivered() {
        core(async {
            let b = core_breaker(ClockSource::tokio());
            let e = local(&b, 4);
            let out = e
                .emit(1, Priority::Routine, |_| async {
                    sleep(50 * MS - NS).await;
                    Ok::<_, ()>(7)
                })
                .await;
            assert_eq!(out, Emitted::Delivered(7));
            sleep(SEC).await;
            b.tick();
            let w = b.snapshot().window;
            assert_eq!((w.calls, w.errors), (1, 0));
            assert_conserved(&e.stats(), 1);
        });
    }

    /// Many emits of one core in flight at once: the local bulkhead admits
    /// exactly its bound, the next is diverted `BulkheadFull` without a
    /// call, and every slot comes back when the calls end.
    #[test]
    fn concurrent_emits_on_one_core_share_its_bulkhead_exactly() {
        core(async {
            let b = core_breaker(ClockSource::tokio());
            let e = std::rc::Rc::new(local(&b, 3));
            let mut tasks = Vec::new();
            for i in 0..3 {
                let e = e.clone();
                tasks.push(tokio::task::spawn_local(async move {
                    e.emit(i, Priority::Routine, |_| async {
                        sleep(10 * MS).await;
                        Ok::<_, ()>(())
                    })
                    .await
                    .is_delivered()
                }));
            }
            tokio::task::yield_now().await; // the three are in their calls
            assert_eq!(e.stats().bulkhead_in_flight, 3);
            let mut called = false;
            let out = e
                .emit(9, Priority::Routine, |_| {
                    called = true;
                    async { Ok::<_, ()>(()) }
                })
                .await;
            assert!(!called, "a full bulkhead makes no call");
            assert!(matches!(
                out,
                Emitted::Diverted {
                    reason: Divert::BulkheadFull,
                    ..
                }
            ));
            for t in tasks {
                assert!(t.await.unwrap());
            }
            let s = e.stats();
            assert_eq!((s.bulkhead_in_flight, s.delivered, s.diverted_bulkhead), (0, 3, 1));
            assert_conserved(&s, 4);
        });
    }

    /// src/emit/future.rs (`LocalEmitter::emit_with`, as `Emitter::emit`):
    /// a dropped emit gives back its local bulkhead slot and the breaker's
    /// probe slot, and is counted cancelled; dropped before its first poll
    /// too.
    #[test]
    fn a_dropped_emit_gives_back_its_bulkhead_slot_and_its_probe_slot() {
        core(async {
            let b = core_breaker(ClockSource::tokio());
            let e = local(&b, 1);
            b.trip_now();
            sleep(Duration::from_secs(60)).await; // backoff over: the next emit is the probe
            tokio::select! {
                _ = e.emit(1, Priority::Routine, |_| pending::<Result<(), ()>>()) => {
                    panic!("the other branch is first")
                }
                _ = sleep(10 * MS) => {}
            }
            assert_eq!((e.stats().bulkhead_in_flight, b.snapshot().probes_in_flight), (0, 0));
            assert_eq!(b.state(), State::HalfOpen);
            drop(e.emit(2, Priority::Routine, |_| async { Ok::<_, ()>(()) })); // never polled
            let out = e.emit(3, Priority::Routine, |_| async { Ok::<_, ()>(()) }).await;
            assert!(out.is_delivered(), "the probe slot was free");
            assert_eq!(b.state(), State::Closed);
            let s = e.stats();
            assert_eq!((s.cancelled, s.delivered, s.bulkhead_in_flight), (2, 1, 0));
            assert_conserved(&s, 3);
        });
    }

    /// Replay on tokio: the first trigger's call fails, it stays first (its
    /// class not reordered), the second replay delivers all in order; a
    /// replay dropped mid-call keeps its trigger at the head, no attempt
    /// used.
    #[test]
    fn replay_keeps_a_failed_trigger_first_and_a_dropped_one_at_the_head() {
        core(async {
            let b = core_breaker(ClockSource::tokio());
            let e = local(&b, 4);
            b.trip_now();
            for i in 0..3 {
                let out = e.emit(i, Priority::Routine, |_| async { Ok::<_, ()>(()) }).await;
                assert!(matches!(
                    out,
                    Emitted::Diverted {
                        reason: Divert::Open(_),
                        ..
                    }
                ));
            }
            b.reset();
            let r = e.replay(10, |i| {
                let fail = *i == 0;
                async move {
                    if fail {
                        Err("down")
                    } else {
                        Ok(())
                    }
                }
            });
            let r = r.await;
            assert_eq!(
                (r.delivered, r.stopped),
                (0, Some(ReplayStop::Failed(Divert::Failed("down"))))
            );
            assert!(e.stats().pending, "kept at the head");
            // Dropped mid-call: kept at the head, no attempt used (the
            // next failure is its second attempt, not its third).
            tokio::select! {
                _ = e.replay(10, |_| pending::<Result<(), ()>>()) => panic!("the other branch is first"),
                _ = sleep(MS) => {}
            }
            assert!(e.stats().pending);
            let mut seen = Vec::new();
            let r = e
                .replay(10, |i| {
                    seen.push(*i);
                    async { Ok::<_, ()>(()) }
                })
                .await;
            assert_eq!((r.delivered, seen), (3, vec![0, 1, 2]));
            let s = e.stats();
            assert_eq!((s.replayed, s.pending, s.queued), (3, false, 0));
            assert_conserved(&s, 3);
        });
    }
}

#[cfg(feature = "async-io")]
mod on_async_io {
    use super::*;
    use futures_lite::future::{block_on, poll_once};
    use tailguard::timer::AsyncIoTimer;

    /// The core cases on a second runtime: a hung call is cut by
    /// async-io's timer at the deadline and counts failed and slow.
    #[test]
    fn a_hung_call_is_cut_at_the_deadline() {
        let clock = ManualClock::new();
        let b = core_breaker(clock.clone());
        let e = local(&b, 2);
        let started = std::time::Instant::now();
        let out = block_on(e.emit_with(AsyncIoTimer, 1, Priority::Routine, |_| {
            clock.advance(50 * MS); // the breaker's clock: the budget, spent
            pending::<Result<(), ()>>()
        }));
        assert!(started.elapsed() >= 50 * MS, "cut by the real timer, not before");
        assert_eq!(
            out,
            Emitted::Diverted {
                reason: Divert::TimedOut(50 * MS),
                displaced: None
            }
        );
        clock.advance(SEC);
        b.tick();
        let w = b.snapshot().window;
        assert_eq!((w.calls, w.errors, w.slow), (1, 1, 1));
        assert_conserved(&e.stats(), 1);
    }

    /// A call that spends exactly its budget is delivered; one past it is
    /// delivered too (the consumer has it) but counted overran and timed
    /// out by the breaker.
    #[test]
    fn a_call_that_just_meets_the_deadline_is_delivered_and_one_past_it_overran() {
        let clock = ManualClock::new();
        let b = core_breaker(clock.clone());
        let e = LocalEmitter::builder(b.clone(), DeadLetterQueue::with_capacity(8).unwrap())
            .timeout(200 * MS)
            .unwrap()
            .build_local()
            .unwrap();
        for (i, spent) in [(1u32, 200 * MS), (2, 200 * MS + NS)] {
            let out = block_on(e.emit_with(AsyncIoTimer, i, Priority::Routine, |_| {
                let clock = clock.clone();
                async move {
                    async_io::Timer::after(MS).await; // pending once: the timer is armed
                    clock.advance(spent);
                    Ok::<_, ()>(i)
                }
            }));
            assert_eq!(out, Emitted::Delivered(i));
        }
        clock.advance(SEC);
        b.tick();
        let w = b.snapshot().window;
        assert_eq!(
            (w.calls, w.errors),
            (2, 1),
            "only the one past the deadline is a timeout"
        );
        let s = e.stats();
        assert_eq!((s.delivered, s.overran), (2, 1));
        assert_conserved(&s, 2);
    }

    /// A dropped emit, pending with its async-io timer armed, gives back
    /// its local bulkhead slot and its probe slot.
    #[test]
    fn a_dropped_emit_gives_back_its_bulkhead_slot_and_its_probe_slot() {
        let clock = ManualClock::new();
        let b = core_breaker(clock.clone());
        let e = local(&b, 1);
        b.trip_now();
        clock.advance(60 * SEC); // the next emit is the probe
        {
            let mut emit = pin!(e.emit_with(AsyncIoTimer, 1, Priority::Routine, |_| pending::<Result<(), ()>>()));
            assert!(block_on(poll_once(emit.as_mut())).is_none(), "pending, its timer armed");
            assert_eq!((e.stats().bulkhead_in_flight, b.snapshot().probes_in_flight), (1, 1));
        }
        assert_eq!((e.stats().bulkhead_in_flight, b.snapshot().probes_in_flight), (0, 0));
        let out = block_on(e.emit_with(AsyncIoTimer, 2, Priority::Routine, |_| async { Ok::<_, ()>(()) }));
        assert!(out.is_delivered());
        assert_eq!(b.state(), State::Closed);
        let s = e.stats();
        assert_eq!((s.cancelled, s.delivered), (1, 1));
        assert_conserved(&s, 2);
    }
}

/// Outside any runtime (a `Timer` with nothing to give): a pending call is
/// cut at once, not a panic, not a hang; its local slot and probe slot come
/// back, its permit is cancelled (no verdict), its trigger is diverted
/// `NoTimer`; a pending replay keeps its trigger at the head, no attempt
/// used.
#[test]
fn a_pending_emit_with_no_timer_is_diverted_and_gives_its_slots_back() {
    use futures_lite::future::block_on;
    let clock = ManualClock::new();
    let b = core_breaker(clock.clone());
    let e = local(&b, 1);
    b.trip_now();
    clock.advance(60 * SEC);
    let out = block_on(e.emit_with(Never, 1, Priority::Critical, |_| pending::<Result<(), ()>>()));
    assert_eq!(
        out,
        Emitted::Diverted {
            reason: Divert::NoTimer,
            displaced: None
        }
    );
    assert_eq!((e.stats().bulkhead_in_flight, b.snapshot().probes_in_flight), (0, 0));
    assert_eq!(b.state(), State::HalfOpen, "no verdict on the consumer");
    // The probe slot is free: a ready call closes the breaker.
    assert!(block_on(e.emit_with(Never, 2, Priority::Critical, |_| async { Ok::<_, ()>(()) })).is_delivered());
    assert_eq!(b.state(), State::Closed);
    for _ in 0..3 {
        let r = block_on(e.replay_with(Never, 10, |_| pending::<Result<(), ()>>()));
        assert_eq!((r.delivered, r.stopped), (0, Some(ReplayStop::Failed(Divert::NoTimer))));
    }
    let s = e.stats();
    assert!(
        s.pending,
        "kept at the head through three cut replays: no attempts used"
    );
    assert_eq!((s.diverted_no_timer, s.replay_handed_back), (1, 0));
    let r = block_on(e.replay_with(Never, 10, |t| {
        let t = *t;
        async move { Ok::<_, ()>(t) }
    }));
    assert_eq!(r.delivered, 1);
    assert_conserved(&e.stats(), 2);
}
