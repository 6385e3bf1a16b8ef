//! A reference model of the dead-letter queue, written for clarity: three
//! `VecDeque`s and the displacement rule, single-threaded, no atomics.

use std::collections::VecDeque;
use tailguard::dlq::{ClassStats, FallbackDepth, Priority, Stats};

/// What the model says a push did (mirrors `Result<Pushed<T>, Full<T>>`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Push {
    Queued,
    Displaced(u64, Priority),
    Full(u64),
}

#[derive(Debug, Default)]
pub struct Queue {
    capacity: usize,
    /// Lowest class first.
    items: [VecDeque<u64>; 3],
    stats: [ClassStats; 3],
}

impl Queue {
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity,
            ..Self::default()
        }
    }

    pub fn len(&self) -> usize {
        self.items.iter().map(VecDeque::len).sum()
    }

    /// When full, the oldest item of the lowest class below `class` gives
    /// way; if there is none, the item is handed back.
    pub fn push(&mut self, item: u64, class: Priority) -> Push {
        let c = class as usize;
        self.stats[c].pushed += 1;
        if self.len() < self.capacity {
            self.items[c].push_back(item);
            self.stats[c].queued += 1;
            return Push::Queued;
        }
        match (0..c).find(|&j| !self.items[j].is_empty()) {
            Some(j) => {
                let old = self.items[j].pop_front().expect("non-empty");
                self.stats[j].displaced += 1;
                self.items[c].push_back(item);
                self.stats[c].queued += 1;
                Push::Displaced(old, Priority::ALL[j])
            }
            None => {
                self.stats[c].handed_back += 1;
                Push::Full(item)
            }
        }
    }

    /// The oldest item of the highest class present.
    pub fn pop(&mut self) -> Option<(u64, Priority)> {
        let c = (0..3).rev().find(|&c| !self.items[c].is_empty())?;
        self.stats[c].popped += 1;
        Some((self.items[c].pop_front().expect("non-empty"), Priority::ALL[c]))
    }

    pub fn depth(&self) -> FallbackDepth {
        FallbackDepth {
            idle: self.items[0].len(),
            routine: self.items[1].len(),
            critical: self.items[2].len(),
        }
    }

    pub fn stats(&self) -> Stats {
        let class = |c: usize| ClassStats {
            depth: self.items[c].len() as u64,
            ..self.stats[c]
        };
        Stats {
            idle: class(0),
            routine: class(1),
            critical: class(2),
        }
    }
}
