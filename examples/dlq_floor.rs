//! The floor of the dead-letter queue's push + pop on one thread, measured
//! against `crossbeam_queue::ArrayQueue` in one process, interleaved round
//! by round so that a busy machine moves all three alike:
//!
//! - `tailguard`: `DeadLetterQueue` push + pop (`Routine`), three atomic
//!   read-modify-writes (the occupancy word's CAS and the tail `fetch_add` in the
//!   push, the head CAS in the pop);
//! - `array_queue`: `ArrayQueue` push + pop, two (the tail CAS, the head CAS);
//! - `array_queue+1rmw`: the same plus one uncontended `fetch_add`, the
//!   extra read-modify-write that exact class counts cost.
//!
//! Prints each round and the median ratios to `array_queue`. Run with
//! `cargo run --release --example dlq_floor [rounds]`.

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use crossbeam_queue::ArrayQueue;
use crossbeam_utils::CachePadded;
use tailguard::dlq::{DeadLetterQueue, Priority};

const CAPACITY: usize = 1024;
const OPS: u64 = 2_000_000;

#[inline(never)]
fn tailguard(q: &DeadLetterQueue<u64>, n: u64) {
    for i in 0..n {
        let _ = black_box(q.push(black_box(i), Priority::Routine));
        black_box(q.pop());
    }
}

#[inline(never)]
fn array_queue(q: &ArrayQueue<u64>, n: u64) {
    for i in 0..n {
        let _ = black_box(q.push(black_box(i)));
        black_box(q.pop());
    }
}

#[inline(never)]
fn array_queue_1rmw(q: &ArrayQueue<u64>, extra: &AtomicU64, n: u64) {
    for i in 0..n {
        let _ = black_box(q.push(black_box(i)));
        black_box(extra.fetch_add(1, Ordering::AcqRel));
        black_box(q.pop());
    }
}

/// Nanoseconds per push + pop of `f` over `OPS` operations.
fn per_op(f: impl FnOnce()) -> f64 {
    let t = Instant::now();
    f();
    t.elapsed().as_nanos() as f64 / OPS as f64
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let rounds: usize = std::env::args()
        .nth(1)
        .map_or(15, |s| s.parse().expect("rounds: a number"));
    let dlq = DeadLetterQueue::with_capacity(CAPACITY).expect("valid capacity");
    let aq = ArrayQueue::new(CAPACITY);
    let extra = CachePadded::new(AtomicU64::new(0));
    let (mut tg_ratio, mut rmw_ratio) = (Vec::new(), Vec::new());
    for _ in 0..rounds.max(1) {
        let tg = per_op(|| tailguard(&dlq, OPS));
        let a = per_op(|| array_queue(&aq, OPS));
        let x = per_op(|| array_queue_1rmw(&aq, &extra, OPS));
        println!("tailguard {tg:.2} ns  array_queue {a:.2} ns  array_queue+1rmw {x:.2} ns");
        tg_ratio.push(tg / a);
        rmw_ratio.push(x / a);
    }
    assert!(dlq.is_empty() && aq.is_empty());
    println!(
        "median ratio to array_queue: tailguard {:.3}, array_queue+1rmw {:.3}",
        median(tg_ratio),
        median(rmw_ratio)
    );
}
