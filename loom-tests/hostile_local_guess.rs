//! A loom model for 6014282 (the per-core emitter records its verdict
//! with `LocalShard::record_guessed`: a plain load and store at the
//! thread's guessed bucket, adding one or none, then at the real bucket on
//! a miss): the core emits (a miss to the straddle bucket, then a miss
//! back to bucket 0, then a hit there) while a window close on another
//! thread takes the shard's differences; every verdict is counted once,
//! in its bucket.
//!
//! Run: `RUSTFLAGS="--cfg tailguard_loom" LOOM_MAX_PREEMPTIONS=2 cargo test --release --test loom -- hostile_local_guess`.
#![cfg(tailguard_loom)]

use loom::thread;
use std::time::Duration;
use tailguard::clock::ManualClock;
use tailguard::dlq::{DeadLetterQueue, Priority};
use tailguard::emit::LocalEmitter;
use tailguard::Breaker;

const SEC: Duration = Duration::from_secs(1);

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(2);
    }
    builder.check(f);
}

#[test]
fn guessed_local_records_are_conserved_across_a_concurrent_tick() {
    model(|| {
        let clock = ManualClock::new();
        let b = Breaker::builder()
            .clock(clock.clone())
            .local_handles(1)
            .build()
            .unwrap();
        b.force_closed();
        let e = LocalEmitter::<u32>::builder(b.clone(), DeadLetterQueue::with_capacity(4).unwrap())
            .timeout(10 * SEC)
            .unwrap()
            .build_local()
            .unwrap();
        let reader = e.stats_reader();
        // A window is due: the close below races the emits (the clock
        // moves on only in the first emit's call, so the others take 0).
        clock.advance(SEC);
        let c = clock.clone();
        let t = thread::spawn(move || {
            // Slow (1 s, past the 50 ms threshold): the straddle bucket.
            let _ = e.emit_blocking(1, Priority::Routine, |_, _| {
                c.advance(SEC);
                Ok::<_, ()>(())
            });
            // Fast and failed: bucket 0, twice (a miss, then a hit).
            for i in 2..4 {
                let _ = e.emit_blocking(i, Priority::Routine, |_, _| Err::<(), _>(()));
            }
        });
        b.tick();
        t.join().unwrap();
        clock.advance(10 * SEC);
        b.tick();
        let totals = b.snapshot().totals;
        assert_eq!((totals.calls, totals.errors, totals.slow), (3, 2, 1), "{totals:?}");
        let s = reader.read();
        assert_eq!((s.emit_times.count(), s.delivered), (3, 1), "{s:?}");
    });
}
