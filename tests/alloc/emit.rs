//! Zero allocations per async emit on tokio's timer: the timer's sleep is
//! kept inline in the emit's future (`tailguard::timer::Timer::Sleep`, an
//! associated type, not a boxed `dyn Future`), so a call that is pending,
//! timed and cut at its deadline allocates nothing, on tokio's paused
//! clock. Issue 20 (a timer you can bring, with no hidden allocation).

use crate::counting::allocations_during;
use crate::support::MS;
use std::future::pending;
use tailguard::clock::ClockSource;
use tailguard::dlq::{DeadLetterQueue, Priority};
use tailguard::emit::{Divert, Emitted, Emitter};
use tailguard::Breaker;

#[test]
fn a_timed_out_async_emit_on_tokios_timer_allocates_nothing() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap();
    let _guard = rt.enter();
    let b = Breaker::builder()
        .clock(ClockSource::tokio())
        .ticker(false)
        .build()
        .unwrap();
    let e: Emitter<u64> = Emitter::builder(b, DeadLetterQueue::with_capacity(1024).unwrap())
        .timeout(50 * MS)
        .unwrap()
        .build()
        .unwrap();
    let emit = |i| {
        rt.block_on(async {
            let out = e.emit(i, Priority::Routine, |_| pending::<Result<(), ()>>()).await;
            assert!(matches!(
                out,
                Emitted::Diverted {
                    reason: Divert::TimedOut(_),
                    ..
                }
            ));
        })
    };
    // Warm up: the thread's shard, the runtime's first park.
    emit(0);
    // The counter works: one boxed value is one allocation.
    assert_eq!(allocations_during(|| drop(std::hint::black_box(Box::new(1u64)))), 1);
    let n = allocations_during(|| (1..=100).for_each(emit));
    assert_eq!(n, 0, "allocations in 100 emits cut at their deadline");
    assert_eq!(e.stats().diverted_timeout, 101);
}
