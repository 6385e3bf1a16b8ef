//! What the queue's hostile loom models check at the end of a run: the
//! fate of each push, and that every item went exactly one way with the
//! stats balanced (`dlq_hostile_fold`, `dlq_hostile_accounted`).
#![cfg(tailguard_loom)]

use tailguard::dlq::{DeadLetterQueue, Full, Priority, Producer, Pushed, Stats};
use Priority::Critical;

/// What became of one push.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fate {
    Queued,
    Displaced(u32, Priority),
    Full,
}

pub(crate) fn push(p: &Producer<u32>, v: u32, class: Priority) -> Fate {
    match p.push(v, class) {
        Ok(Pushed::Queued) => Fate::Queued,
        Ok(Pushed::Displaced(old, oc)) => {
            assert!(oc < class, "{v} {class:?} displaced {old} of {oc:?}");
            assert_ne!(oc, Critical);
            Fate::Displaced(old, oc)
        }
        Err(Full(back)) => {
            assert_eq!(back, v);
            Fate::Full
        }
    }
}

pub(crate) fn conserved(s: &Stats) {
    for class in Priority::ALL {
        let c = s.class(class);
        assert_eq!(
            c.pushed,
            c.popped + c.displaced + c.handed_back + c.depth,
            "conservation for {class:?}: {c:?}"
        );
        assert_eq!(c.pushed, c.queued + c.handed_back, "{class:?}: {c:?}");
    }
}

/// Every item in `all` went exactly one way (popped: `popped` then the
/// final drain; displaced; refused); FIFO per class in the drain; stats
/// balance before and after the drain; `len` and the drain agree.
pub(crate) fn exactly_once(
    q: &DeadLetterQueue<u32>,
    all: &[(u32, Priority)],
    popped: &[(u32, Priority)],
    fates: &[(u32, Fate)],
) {
    let s = q.stats();
    conserved(&s);
    let len = q.len();
    assert!(len <= q.capacity());
    let depth: u64 = Priority::ALL.iter().map(|&c| s.class(c).depth).sum();
    let mut seen: Vec<(u32, Priority)> = popped.to_vec();
    let mut drained = Vec::new();
    while let Some(x) = q.pop() {
        drained.push(x);
    }
    assert!(
        drained.len() <= q.capacity(),
        "more than the capacity held: {drained:?}"
    );
    assert_eq!(len, drained.len(), "len at quiet vs drained {drained:?}");
    assert_eq!(
        depth as usize,
        drained.len(),
        "stats depth at quiet vs drained {drained:?}"
    );
    for w in drained.windows(2) {
        assert!(w[0].1 >= w[1].1, "drain out of class order: {drained:?}");
    }
    seen.extend(drained);
    for &(v, f) in fates {
        match f {
            Fate::Displaced(old, oc) => seen.push((old, oc)),
            Fate::Full => seen.push((v, all.iter().find(|x| x.0 == v).unwrap().1)),
            Fate::Queued => {}
        }
    }
    seen.sort();
    let mut want = all.to_vec();
    want.sort();
    assert_eq!(seen, want, "fates {fates:?}, popped {popped:?}");
    let s = q.stats();
    conserved(&s);
    for class in Priority::ALL {
        assert_eq!(s.class(class).depth, 0, "{s:?}");
    }
}
