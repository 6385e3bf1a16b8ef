//! One model of the queue for the single-threaded lives of the hostile
//! modules (`hostile_accounted`, `hostile_consumer_line`).

use std::collections::VecDeque;

use tailguard::dlq::{DeadLetterQueue, Full, Priority, Pushed};

use super::assert_conserved;

/// The queue against a model, one thread: every push decision (queued,
/// displaced which item, refused), every pop, `len`, `fallback_depth` and
/// the stats' depths.
pub(crate) struct Modelled {
    pub(crate) q: DeadLetterQueue<u64>,
    pub(crate) model: [VecDeque<u64>; 3],
    cap: usize,
    next: u64,
}

impl Modelled {
    pub(crate) fn new(cap: usize) -> Self {
        Modelled {
            q: DeadLetterQueue::with_capacity(cap).unwrap(),
            model: Default::default(),
            cap,
            next: 0,
        }
    }
    pub(crate) fn len(&self) -> usize {
        self.model.iter().map(VecDeque::len).sum()
    }
    pub(crate) fn push(&mut self, class: Priority) {
        let v = self.next;
        self.next += 1;
        let got = self.q.push(v, class);
        if self.len() < self.cap {
            assert_eq!(got, Ok(Pushed::Queued), "push {v} {class:?}, model {:?}", self.model);
            self.model[class as usize].push_back(v);
        } else if let Some(low) = (0..class as usize).find(|&c| !self.model[c].is_empty()) {
            let old = self.model[low].pop_front().unwrap();
            assert_eq!(
                got,
                Ok(Pushed::Displaced(old, Priority::ALL[low])),
                "push {v} {class:?}, model {:?}",
                self.model
            );
            self.model[class as usize].push_back(v);
        } else {
            assert_eq!(got, Err(Full(v)), "push {v} {class:?}, model {:?}", self.model);
        }
    }
    pub(crate) fn pop(&mut self) {
        let want = (0..3)
            .rev()
            .find(|&c| !self.model[c].is_empty())
            .map(|c| (self.model[c].pop_front().unwrap(), Priority::ALL[c]));
        assert_eq!(self.q.pop(), want);
    }
    pub(crate) fn check_counts(&self) {
        let d = self.q.fallback_depth();
        assert_eq!(
            [d.idle, d.routine, d.critical],
            [0, 1, 2].map(|c| self.model[c].len()),
            "model {:?}",
            self.model
        );
        assert_eq!(self.q.len(), self.len());
        let s = self.q.stats();
        assert_conserved(&s);
        for c in Priority::ALL {
            assert_eq!(s.class(c).depth as usize, self.model[c as usize].len());
        }
    }
}
