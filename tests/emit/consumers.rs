//! One router, three consumers: a slow one leaves the others alone.

use crate::support::emit::*;
use crate::support::*;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tailguard::clock::ClockSource;
use tailguard::dlq::{DeadLetterQueue, Priority};
use tailguard::emit::{Emitted, Emitter, ReplayStop};
use tailguard::tick_every;
use tailguard::{Breaker, State};
use tokio::time::sleep;

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
