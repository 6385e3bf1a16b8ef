//! `tailguard::dlq::DeadLetterQueue` beside `crossbeam_queue::ArrayQueue`,
//! in the same run: push + pop on one thread, and two producers with one
//! consumer on real threads (`iter_custom`). Every bench first checks that
//! what it measures is correct.
//!
//! `cargo bench --bench dlq -- --interleaved [rounds]` runs no criterion
//! group: it times both queues in both scenarios in interleaved rounds
//! (each round runs every loop once, the order turning round by round, so a
//! busy spell of this shared machine hits all of them) and prints each
//! round's ratio tailguard ÷ `ArrayQueue` and the median of the ratios. On
//! a machine with fewer than three cores the two-producer figures of both
//! queues swing with how the scheduler places the three threads: read the
//! median of many rounds, or fix the layout with `--pin A,B,C` (Linux: the
//! CPUs of the two producers and of the consumer; `--pin 0,0,1` puts both
//! producers on CPU 0 and the consumer alone on CPU 1).

use std::hint::black_box;
use std::sync::Barrier;
use std::thread;
use std::time::{Duration, Instant};

use criterion::{criterion_group, Criterion};
use crossbeam_queue::ArrayQueue;
use crossbeam_utils::Backoff;
use tailguard::dlq::{DeadLetterQueue, Priority, Pushed};

#[path = "support/pin.rs"]
mod pin;

const CAPACITY: usize = 1024;

fn single_thread(c: &mut Criterion) {
    let mut g = c.benchmark_group("dlq_push_pop_1thread");

    let dlq = DeadLetterQueue::with_capacity(CAPACITY).unwrap();
    for i in 0..3 * CAPACITY as u64 {
        let class = Priority::ALL[(i % 3) as usize];
        assert!(matches!(dlq.push(i, class), Ok(Pushed::Queued)));
        assert_eq!(dlq.pop(), Some((i, class)));
    }
    assert!(dlq.is_empty());
    g.bench_function("tailguard", |b| {
        let mut i = 0u64;
        b.iter(|| {
            i += 1;
            // Both queues' results reduced to the same shapes (a flag, an
            // `Option<u64>`): moving the larger `Pushed`/`Option<(u64,
            // Priority)>` through `black_box`'s memory costs a
            // store-forwarding stall that is the bench's, not the queue's.
            black_box(matches!(dlq.push(black_box(i), Priority::Routine), Ok(Pushed::Queued)));
            black_box(dlq.pop().map(|(v, _)| v))
        })
    });
    assert!(dlq.is_empty());

    let aq = ArrayQueue::new(CAPACITY);
    for i in 0..3 * CAPACITY as u64 {
        aq.push(i).unwrap();
        assert_eq!(aq.pop(), Some(i));
    }
    g.bench_function("crossbeam_array_queue", |b| {
        let mut i = 0u64;
        b.iter(|| {
            i += 1;
            black_box(aq.push(black_box(i)).is_ok());
            black_box(aq.pop())
        })
    });
    assert!(aq.is_empty());
    g.finish();
}

/// Runs two producers and one consumer over `iters` items (the consumer on
/// the calling thread), pinned to the CPUs `pin` names (producer, producer,
/// consumer) if given; returns the consumer's time from the start barrier
/// to its last pop, and checks that every item arrived once, in each
/// producer's order.
fn two_producers_one_consumer(
    iters: u64,
    push: impl Fn(u64) -> bool + Sync,
    pop: impl Fn() -> Option<u64>,
    pin: Option<[usize; 3]>,
) -> Duration {
    let per = [iters / 2, iters - iters / 2];
    let barrier = Barrier::new(3);
    let place = |who: usize| pin.map(|cpus| pin::pin_to_cpu(cpus[who]).unwrap());
    thread::scope(|s| {
        for (p, &n) in per.iter().enumerate() {
            let (push, barrier, place) = (&push, &barrier, &place);
            s.spawn(move || {
                let _pinned = place(p);
                barrier.wait();
                for k in 0..n {
                    // Item values: producer in the low bit, sequence above.
                    let v = (k << 1) | p as u64;
                    // Same back-off for both queues: spin a little, then
                    // yield (this machine may have fewer cores than threads).
                    let backoff = Backoff::new();
                    while !push(v) {
                        backoff.snooze();
                    }
                }
            });
        }
        let _pinned = place(2);
        barrier.wait();
        let start = Instant::now();
        let mut got = 0u64;
        let mut next = [0u64; 2];
        let backoff = Backoff::new();
        while got < iters {
            let Some(v) = pop() else {
                backoff.snooze();
                continue;
            };
            backoff.reset();
            let p = (v & 1) as usize;
            // FIFO per producer: this also checks every item arrives once.
            assert_eq!(v >> 1, next[p]);
            next[p] += 1;
            got += 1;
        }
        let elapsed = start.elapsed();
        assert_eq!(next, per);
        elapsed
    })
}

fn multi_thread(c: &mut Criterion) {
    let mut g = c.benchmark_group("dlq_2producers_1consumer");

    let dlq = DeadLetterQueue::with_capacity(CAPACITY).unwrap();
    let producer = dlq.producer();
    let tg_push = |v| match producer.push(v, Priority::Routine) {
        Ok(Pushed::Queued) => true,
        Ok(Pushed::Displaced(..)) => unreachable!("one class: nothing gives way"),
        Err(_) => false,
    };
    let tg_pop = || {
        dlq.pop().map(|(v, class)| {
            debug_assert_eq!(class, Priority::Routine);
            v
        })
    };
    // Correctness first.
    two_producers_one_consumer(10_000, tg_push, tg_pop, None);
    g.bench_function("tailguard", |b| {
        b.iter_custom(|iters| two_producers_one_consumer(iters, tg_push, tg_pop, None))
    });

    let aq = ArrayQueue::new(CAPACITY);
    let aq_push = |v| aq.push(v).is_ok();
    let aq_pop = || aq.pop();
    two_producers_one_consumer(10_000, aq_push, aq_pop, None);
    g.bench_function("crossbeam_array_queue", |b| {
        b.iter_custom(|iters| two_producers_one_consumer(iters, aq_push, aq_pop, None))
    });
    g.finish();
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

const ONE: u64 = 2_000_000;
const TWO: u64 = 400_000;

/// Nanoseconds per push + pop on one thread, out of line so that each
/// queue's loop is compiled alone.
#[inline(never)]
fn one_thread_tailguard(q: &DeadLetterQueue<u64>) -> f64 {
    let t = Instant::now();
    for i in 0..ONE {
        // Both queues' results reduced to the same shapes (a flag, an
        // `Option<u64>`), so that neither loop pays for moving a larger
        // result through memory.
        black_box(matches!(q.push(black_box(i), Priority::Routine), Ok(Pushed::Queued)));
        black_box(q.pop().map(|(v, _)| v));
    }
    t.elapsed().as_nanos() as f64 / ONE as f64
}

/// As [`one_thread_tailguard`], for `ArrayQueue`.
#[inline(never)]
fn one_thread_array_queue(q: &ArrayQueue<u64>) -> f64 {
    let t = Instant::now();
    for i in 0..ONE {
        black_box(q.push(black_box(i)).is_ok());
        black_box(q.pop());
    }
    t.elapsed().as_nanos() as f64 / ONE as f64
}

/// `--interleaved`: both scenarios, both queues, interleaved rounds; the
/// median of the per-round ratios. Each round builds both queues afresh, so
/// that where the allocator puts them (which moves a one-thread loop by a
/// nanosecond or two, either queue) is drawn anew each round rather than
/// once per run.
fn interleaved(rounds: usize, pin: Option<[usize; 3]>) {
    let per = |d: Duration| d.as_nanos() as f64 / TWO as f64;
    let (mut r1, mut r2) = (Vec::new(), Vec::new());
    for round in 0..rounds.max(1) {
        let dlq = DeadLetterQueue::with_capacity(CAPACITY).unwrap();
        let producer = dlq.producer();
        let aq = ArrayQueue::new(CAPACITY);
        let tg_push = |v| matches!(producer.push(v, Priority::Routine), Ok(Pushed::Queued));
        let tg_pop = || dlq.pop().map(|(v, _)| v);
        let aq_push = |v| aq.push(v).is_ok();
        let aq_pop = || aq.pop();
        let mut t = [0.0; 4];
        for k in 0..4 {
            let which = (k + round) % 4;
            t[which] = match which {
                0 => one_thread_tailguard(&dlq),
                1 => one_thread_array_queue(&aq),
                2 => per(two_producers_one_consumer(TWO, tg_push, tg_pop, pin)),
                _ => per(two_producers_one_consumer(TWO, aq_push, aq_pop, pin)),
            };
        }
        println!(
            "round {round}: 1 thread {:.2} / {:.2} ns = {:.3}; 2 producers + consumer {:.1} / {:.1} ns = {:.3}",
            t[0],
            t[1],
            t[0] / t[1],
            t[2],
            t[3],
            t[2] / t[3]
        );
        r1.push(t[0] / t[1]);
        r2.push(t[2] / t[3]);
        assert!(dlq.is_empty() && aq.is_empty());
    }
    println!(
        "median ratio tailguard / ArrayQueue over {rounds} rounds: 1 thread {:.3}, \
         2 producers + consumer {:.3}{}",
        median(r1),
        median(r2),
        match pin {
            Some([a, b, c]) => format!(" (producers on CPUs {a} and {b}, consumer on {c})"),
            None => String::new(),
        }
    );
}

/// `--pin A,B,C`: the CPUs of the two producers and the consumer.
fn parse_pin(arg: &str) -> [usize; 3] {
    let cpus: Vec<usize> = arg
        .split(',')
        .map(|c| {
            c.trim()
                .parse()
                .unwrap_or_else(|_| panic!("--pin {arg}: not a CPU number list"))
        })
        .collect();
    cpus.try_into()
        .unwrap_or_else(|_| panic!("--pin {arg}: three CPUs (producer, producer, consumer)"))
}

criterion_group!(benches, single_thread, multi_thread);

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--interleaved") {
        let rounds = args.get(i + 1).and_then(|s| s.parse().ok()).unwrap_or(15);
        let pin = args
            .iter()
            .position(|a| a == "--pin")
            .map(|j| parse_pin(args.get(j + 1).expect("--pin needs A,B,C")));
        interleaved(rounds, pin);
        return;
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}
