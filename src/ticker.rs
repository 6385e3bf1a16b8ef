//! The ticker: one named background thread per process that closes the
//! windows of every live breaker.

use crate::breaker::Inner;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

/// Every breaker built with the ticker on (the default), by weak reference:
/// the ticker thread reads it when it starts. A dropped breaker costs an
/// entry until `register` prunes the list (each time it doubles) or
/// [`Ticker::pass`] does; the running thread drops it from its schedule at
/// its next due time.
static BREAKERS: parking_lot::Mutex<Vec<Weak<Inner>>> = parking_lot::Mutex::new(Vec::new());

/// Breakers registered while the ticker thread runs, for it to schedule.
/// Written only under the `BREAKERS` lock, and emptied under it when the
/// thread takes its first copy of `BREAKERS`, so that every breaker is
/// scheduled exactly once: from the copy or from here.
static PENDING: parking_lot::Mutex<Vec<Weak<Inner>>> = parking_lot::Mutex::new(Vec::new());
/// Whether the ticker thread is running (it reads `BREAKERS` when it starts
/// and `PENDING` after that).
static THREAD_UP: AtomicBool = AtomicBool::new(false);

/// The running ticker thread, if any, and how many handles keep it.
static RUNNING: parking_lot::Mutex<Option<Running>> = parking_lot::Mutex::new(None);

struct Running {
    handles: usize,
    stop: Arc<AtomicBool>,
    thread: JoinHandle<()>,
}

pub(crate) fn register(inner: &Arc<Inner>) {
    let weak = Arc::downgrade(inner);
    let pending = {
        let mut list = BREAKERS.lock();
        // Prune dropped breakers now and then: amortised O(1) per breaker.
        if list.len() >= 64 && list.len().is_power_of_two() {
            list.retain(|w| w.strong_count() > 0);
        }
        list.push(weak.clone());
        // Under the same lock as the push above: the thread's first copy of
        // the list either has this breaker or finds it here.
        let up = THREAD_UP.load(Ordering::Acquire);
        if up {
            PENDING.lock().push(weak);
        }
        up
    };
    if pending {
        if let Some(running) = RUNNING.lock().as_ref() {
            // Let the new breaker's first window be closed on time.
            running.thread.thread().unpark();
        }
    }
}

/// The ticker's time grain, in nanoseconds: its schedule's slots. A breaker
/// due at `t` is ticked at the first slot boundary at or after `t`, so no
/// later than one slot after it is due (plus the time the batch takes), and
/// breakers due within one slot are ticked as one batch, in one wake.
const SLOT_NS: u64 = 5_000_000;

/// Starts (or joins) the process's ticker thread.
///
/// The thread, named `tailguard-ticker`, keeps each live breaker's next due
/// time (its next window end, or the end of its backoff) in 5 ms slots and
/// wakes when the earliest slot is due (at most `max_sleep` apart, 1 s by
/// default), calling [`Breaker::tick`](crate::Breaker::tick) only on the
/// breakers that are due: a breaker costs the thread one window close per
/// window, and nothing in between. (A backoff or probe lease that starts
/// between two of its passes is acted on by the first caller of `allow` at
/// once, and by the ticker at the breaker's next window end at the latest.)
///
/// Windows end on a grid of whole windows of the breaker's clock (see
/// [`BreakerBuilder::window`](crate::BreakerBuilder::window)), so the
/// breakers that share a clock and a window length (the default ones, say)
/// are all due at once, and the thread wakes once per window for all of
/// them: a wake costs far more than a window close, tens of microseconds on
/// a virtual machine. (Breakers with many different window lengths cost it
/// up to one wake per 5 ms slot.) It ticks each batch with the memory of
/// the breakers ahead already loading. On the machine the crate is measured
/// on, it takes under 1% of one core for 10,000 breakers with 1 s windows
/// (see `examples/scale.rs`).
///
/// It runs while at least one [`Ticker`] handle lives; the last handle to
/// drop stops and joins it. Breakers hold no reference to it and it holds
/// only weak references to them.
///
/// ```
/// use std::time::Duration;
/// use tailguard::{Breaker, Ticker};
///
/// let ticker = Ticker::start()?;
/// let breaker = Breaker::builder().window(Duration::from_millis(10)).build()?;
/// breaker.allow()?.record(true);
/// std::thread::sleep(Duration::from_millis(50));
/// assert!(breaker.snapshot().window.closed_at >= Duration::from_millis(10));
/// drop(ticker); // stops and joins the thread
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct Ticker {
    _private: (),
}

impl Ticker {
    /// Starts the ticker with the default maximum sleep (1 s).
    ///
    /// # Errors
    /// The operating system refused to spawn the thread.
    ///
    /// ```
    /// let t = tailguard::Ticker::start()?;
    /// # drop(t);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn start() -> std::io::Result<Ticker> {
        Self::with_max_sleep(Duration::from_secs(1))
    }

    /// Starts the ticker, sleeping at most `max_sleep` between wakes (taken
    /// as at least 5 ms, the schedule's grain). A wake with nothing due does
    /// nothing, so a shorter sleep only costs wakes. If the thread already
    /// runs, this joins it and `max_sleep` is ignored.
    ///
    /// # Errors
    /// The operating system refused to spawn the thread.
    ///
    /// ```
    /// # use std::time::Duration;
    /// let t = tailguard::Ticker::with_max_sleep(Duration::from_millis(10))?;
    /// # drop(t);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn with_max_sleep(max_sleep: Duration) -> std::io::Result<Ticker> {
        let mut running = RUNNING.lock();
        if let Some(r) = running.as_mut() {
            r.handles += 1;
            return Ok(Ticker { _private: () });
        }
        let max_sleep = max_sleep.max(Duration::from_nanos(SLOT_NS));
        let stop = Arc::new(AtomicBool::new(false));
        let their_stop = Arc::clone(&stop);
        THREAD_UP.store(true, Ordering::Release);
        let thread = match std::thread::Builder::new()
            .name("tailguard-ticker".into())
            .spawn(move || run(&their_stop, max_sleep))
        {
            Ok(thread) => thread,
            Err(e) => {
                THREAD_UP.store(false, Ordering::Release);
                return Err(e);
            }
        };
        *running = Some(Running {
            handles: 1,
            stop,
            thread,
        });
        Ok(Ticker { _private: () })
    }

    /// Whether the ticker thread is running in this process.
    ///
    /// ```
    /// let t = tailguard::Ticker::start().unwrap();
    /// assert!(tailguard::Ticker::is_running());
    /// # drop(t);
    /// ```
    pub fn is_running() -> bool {
        RUNNING.lock().is_some()
    }

    /// Ticks every live breaker now, due or not, on the calling thread, and
    /// returns how many it ticked (the thread ticks only those due). For
    /// tests and to measure a pass; it also prunes dropped breakers from
    /// the registration list.
    ///
    /// ```
    /// let b = tailguard::Breaker::builder().build().unwrap();
    /// assert!(tailguard::Ticker::pass() >= 1);
    /// # drop(b);
    /// ```
    pub fn pass() -> usize {
        pass()
    }
}

impl Drop for Ticker {
    fn drop(&mut self) {
        let mut running = RUNNING.lock();
        let last = match running.as_mut() {
            Some(r) => {
                r.handles -= 1;
                r.handles == 0
            }
            None => false,
        };
        if last {
            if let Some(r) = running.take() {
                drop(running);
                r.stop.store(true, Ordering::Release);
                r.thread.thread().unpark();
                let _ = r.thread.join();
                THREAD_UP.store(false, Ordering::Release);
                PENDING.lock().clear();
            }
        }
    }
}

/// One pass: tick every live breaker (outside the registry lock, so a
/// listener may build breakers). Returns the number of breakers ticked.
fn pass() -> usize {
    let mut batch: Vec<Weak<Inner>> = BREAKERS.lock().clone();
    let mut ticked = 0;
    tick_batch(&mut batch, |_, _| ticked += 1);
    BREAKERS.lock().retain(|w| w.strong_count() > 0);
    ticked
}

/// How far ahead of the breaker being ticked [`tick_batch`] prefetches a
/// breaker's own lines.
const AHEAD: usize = 12;
/// How far ahead it upgrades a breaker and prefetches its shards' first
/// lines (their address is in the breaker's own lines, loaded by then).
const MID: usize = 8;
/// How far ahead it prefetches the bucket words a breaker's shards mark as
/// in use (the marks are in the shards' first lines, loaded by then).
const NEAR: usize = 4;

/// Ticks every live breaker in `batch`, emptying it, and hands each one
/// ticked (its weak reference back) to `done` with the nanoseconds until it
/// is next due. A dropped breaker is left out.
///
/// A window close is a few hundred nanoseconds of work on a dozen cache
/// lines that a second of other work has evicted; taken one breaker after
/// the other, each miss would stall the thread in turn. So the loads are
/// started ahead, in three steps, each needing what the one before loaded:
/// the breaker `AHEAD` places on has its own lines prefetched; the one
/// `MID` places on is upgraded and has its shards' first lines prefetched;
/// the one `NEAR` places on has the bucket words its shards mark as used
/// prefetched. The misses of several breakers overlap.
fn tick_batch(batch: &mut Vec<Weak<Inner>>, mut done: impl FnMut(Weak<Inner>, u64)) {
    for w in batch.iter().take(AHEAD - MID) {
        prefetch_weak(w);
    }
    // Step `s` upgrades breaker `s` into `ready[s % MID]` and ticks breaker
    // `s - MID`, which it takes out of that same slot first.
    let mut ready: [Option<Arc<Inner>>; MID] = Default::default();
    for step in 0..batch.len() + MID {
        let slot = step % MID;
        let current = ready[slot].take();
        if let Some(w) = batch.get(step + AHEAD - MID) {
            prefetch_weak(w);
        }
        if let Some(w) = batch.get(step) {
            ready[slot] = w.upgrade();
            if let Some(inner) = &ready[slot] {
                inner.prefetch_for_tick();
            }
        }
        // Breaker `step - (MID - NEAR)`.
        if let Some(inner) = &ready[(step + NEAR) % MID] {
            inner.prefetch_marked();
        }
        if let Some(inner) = current {
            let until = inner.tick_for_ticker();
            drop(inner);
            done(core::mem::replace(&mut batch[step - MID], Weak::new()), until);
        }
    }
    batch.clear();
}

/// Starts loading a breaker's own cache lines. Its allocation outlives the
/// breaker while a weak reference exists, and a prefetch reads nothing into
/// the program, so a dropped breaker is harmless here.
#[inline]
fn prefetch_weak(w: &Weak<Inner>) {
    crate::sync::prefetch(w.as_ptr().cast(), core::mem::size_of::<Inner>());
}

/// The ticker's schedule: the breakers due in each slot (a calendar queue).
/// Rescheduling a breaker is a push onto its slot's vector; a wake takes the
/// due slots whole. Emptied vectors are kept for reuse (up to 64), so a steady
/// schedule allocates nothing.
struct Schedule {
    slots: std::collections::BTreeMap<u64, Vec<Weak<Inner>>>,
    spare: Vec<Vec<Weak<Inner>>>,
}

impl Schedule {
    fn insert(&mut self, breaker: Weak<Inner>, due_ns: u64) {
        let slot = due_ns.div_ceil(SLOT_NS);
        let spare = &mut self.spare;
        self.slots
            .entry(slot)
            .or_insert_with(|| spare.pop().unwrap_or_default())
            .push(breaker);
    }

    /// The breakers of the earliest slot if it is due at `now_ns`.
    fn take_due(&mut self, now_ns: u64) -> Option<Vec<Weak<Inner>>> {
        let entry = self.slots.first_entry()?;
        (entry.key().saturating_mul(SLOT_NS) <= now_ns).then(|| entry.remove())
    }

    /// When the earliest slot is due, if any.
    fn next_ns(&self) -> Option<u64> {
        self.slots.keys().next().map(|slot| slot.saturating_mul(SLOT_NS))
    }
}

fn run(stop: &AtomicBool, max_sleep: Duration) {
    use std::time::Instant;
    let origin = Instant::now();
    let now_ns = || u64::try_from(origin.elapsed().as_nanos()).unwrap_or(u64::MAX);
    let mut schedule = Schedule {
        slots: std::collections::BTreeMap::new(),
        spare: Vec::new(),
    };
    {
        let list = BREAKERS.lock();
        for w in list.iter() {
            schedule.insert(w.clone(), 0);
        }
        // Registered before this copy, so in it (see `PENDING`).
        PENDING.lock().clear();
    }
    while !stop.load(Ordering::Acquire) {
        let now = now_ns();
        for w in PENDING.lock().drain(..) {
            schedule.insert(w, now);
        }
        while let Some(mut batch) = schedule.take_due(now) {
            // Each breaker's next due time counts from when it was ticked,
            // as its `until` does: counted from the start of the batch, a
            // breaker ticked late in a long batch would come back early (and
            // be ticked twice); counted from the end, the first ones would
            // come back late, and breakers whose windows end together would
            // spread over two slots. A dropped breaker is not handed back,
            // and leaves the schedule here.
            tick_batch(&mut batch, |w, until| {
                schedule.insert(w, now_ns().saturating_add(until.max(SLOT_NS)));
            });
            if schedule.spare.len() < 64 {
                schedule.spare.push(batch);
            }
        }
        let sleep = schedule.next_ns().map_or(max_sleep, |at| {
            Duration::from_nanos(at.saturating_sub(now_ns())).clamp(Duration::from_millis(1), max_sleep)
        });
        std::thread::park_timeout(sleep);
    }
}

#[cfg(test)]
mod tests {
    use super::{tick_batch, Schedule, BREAKERS, SLOT_NS};
    use crate::clock::ManualClock;
    use crate::Breaker;
    use std::sync::{Arc, Weak};
    use std::time::Duration;

    #[test]
    fn a_batch_ticks_each_live_breaker_once_and_leaves_out_dropped_ones() {
        // Lengths around the prefetch distances (4, 8, 12).
        for len in [0usize, 1, 3, 4, 5, 7, 8, 9, 11, 12, 13, 40] {
            let clock = ManualClock::new();
            let mut breakers: Vec<Option<Breaker>> = (0..len)
                .map(|_| Some(Breaker::builder().clock(clock.clone()).ticker(false).build().unwrap()))
                .collect();
            let mut batch: Vec<_> = breakers
                .iter()
                .map(|b| Arc::downgrade(&b.as_ref().unwrap().inner))
                .collect();
            for (i, b) in breakers.iter_mut().enumerate() {
                if i % 3 == 1 {
                    *b = None;
                } else {
                    b.as_ref().unwrap().allow().unwrap().record(true);
                }
            }
            clock.advance(Duration::from_millis(1500));
            let mut handed_back = Vec::new();
            tick_batch(&mut batch, |w, until| handed_back.push((w, until)));
            assert!(batch.is_empty());
            let live: Vec<&Breaker> = breakers.iter().flatten().collect();
            assert_eq!(handed_back.len(), live.len(), "batch of {len}");
            for (b, (w, until)) in live.iter().zip(&handed_back) {
                assert!(Weak::ptr_eq(w, &Arc::downgrade(&b.inner)), "in order, batch of {len}");
                assert_eq!(*until, 500_000_000, "due at the next window end");
                let window = b.snapshot().window;
                assert_eq!((window.calls, window.closed_at), (1, Duration::from_secs(1)));
            }
        }
    }

    #[test]
    fn the_schedule_hands_out_slots_in_order_and_never_early() {
        let mut schedule = Schedule {
            slots: Default::default(),
            spare: Vec::new(),
        };
        let b: Vec<Breaker> = (0..4)
            .map(|_| Breaker::builder().ticker(false).build().unwrap())
            .collect();
        let w = |i: usize| Arc::downgrade(&b[i].inner);
        schedule.insert(w(0), 3 * SLOT_NS + 1); // slot 4
        schedule.insert(w(1), SLOT_NS); // slot 1
        schedule.insert(w(2), 4 * SLOT_NS); // slot 4
        schedule.insert(w(3), SLOT_NS - 1); // slot 1
        assert_eq!(schedule.next_ns(), Some(SLOT_NS));
        assert!(schedule.take_due(SLOT_NS - 1).is_none(), "not before its slot");
        let first = schedule.take_due(SLOT_NS).unwrap();
        assert_eq!(first.len(), 2);
        assert!(Weak::ptr_eq(&first[0], &w(1)) && Weak::ptr_eq(&first[1], &w(3)));
        assert!(schedule.take_due(4 * SLOT_NS - 1).is_none());
        let second = schedule.take_due(10 * SLOT_NS).unwrap();
        assert!(Weak::ptr_eq(&second[0], &w(0)) && Weak::ptr_eq(&second[1], &w(2)));
        assert!(schedule.take_due(u64::MAX).is_none());
        assert_eq!(schedule.next_ns(), None);
        // The far end of time does not overflow.
        schedule.insert(w(0), u64::MAX);
        assert_eq!(schedule.next_ns(), Some(u64::MAX));
        assert!(schedule.take_due(u64::MAX - 1).is_none());
        assert_eq!(schedule.take_due(u64::MAX).map(|v| v.len()), Some(1));
    }

    #[test]
    fn registration_prunes_dropped_breakers() {
        let kept: Vec<Breaker> = (0..10).map(|_| Breaker::builder().build().unwrap()).collect();
        for _ in 0..10_000 {
            drop(Breaker::builder().build().unwrap());
        }
        let len = BREAKERS.lock().len();
        // Pruned whenever the list reaches a power of two from 64 on: it
        // never holds more than the live ones plus one doubling.
        assert!(
            len <= 2 * 64 + kept.len(),
            "{len} entries for {} live breakers",
            kept.len()
        );
        assert!(BREAKERS.lock().iter().filter(|w| w.strong_count() > 0).count() >= kept.len());
    }
}
