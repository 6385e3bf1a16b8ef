//! Property test: the dead-letter queue against its reference model
//! (`model/dlq.rs`), over random sequences of pushes of every class, pops
//! and drains, at small capacities where displacement and refusal happen
//! all the time. After every operation the result, the length, the depth
//! of each class and every conservation counter agree.
//!
//! `PROPTEST_CASES` sets the number of sequences (default 2,000).

use crate::config;
use crate::model::dlq as model;
use proptest::prelude::*;
use tailguard::dlq::{DeadLetterQueue, Full, Priority, Pushed};

#[derive(Debug, Clone)]
enum Op {
    Push(Priority),
    Pop,
    Drain(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => prop::sample::select(Priority::ALL.to_vec()).prop_map(Op::Push),
        3 => Just(Op::Pop),
        1 => (0usize..4).prop_map(Op::Drain),
    ]
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn the_queue_behaves_as_its_model(capacity in 1usize..6, ops in prop::collection::vec(op(), 1..200)) {
        let q = DeadLetterQueue::with_capacity(capacity).unwrap();
        let mut m = model::Queue::new(capacity);
        let mut next = 0u64;
        for (step, op) in ops.iter().enumerate() {
            match op {
                Op::Push(class) => {
                    next += 1;
                    let got = match q.push(next, *class) {
                        Ok(Pushed::Queued) => model::Push::Queued,
                        Ok(Pushed::Displaced(old, c)) => model::Push::Displaced(old, c),
                        Err(Full(item)) => model::Push::Full(item),
                    };
                    prop_assert_eq!(got, m.push(next, *class), "step {}: {:?}", step, op);
                }
                Op::Pop => prop_assert_eq!(q.pop(), m.pop(), "step {}", step),
                Op::Drain(max) => {
                    let mut got = Vec::new();
                    let n = q.drain(*max, |item, class| got.push((item, class)));
                    let want: Vec<_> = (0..*max).map_while(|_| m.pop()).collect();
                    prop_assert_eq!(n, want.len());
                    prop_assert_eq!(got, want, "step {}", step);
                }
            }
            prop_assert_eq!(q.len(), m.len(), "step {}", step);
            prop_assert_eq!(q.fallback_depth(), m.depth(), "step {}", step);
            prop_assert_eq!(q.stats(), m.stats(), "step {}", step);
        }
    }
}
