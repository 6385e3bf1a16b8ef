//! The ticker: one named background thread per process that closes the
//! windows of every live breaker.

use crate::breaker::Inner;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

/// Every breaker built with the ticker on (the default), by weak reference,
/// and the running ticker thread, if any: all under one lock, which
/// registration, start and stop take briefly (never while joining the
/// thread, and never while calling into a breaker).
///
/// A dropped breaker costs an entry until `register` prunes the list (each
/// time it doubles) or [`Ticker::pass`] does; the running thread drops it
/// from its schedule at its next due time.
static GLOBAL: parking_lot::Mutex<Global> = parking_lot::Mutex::new(Global {
    breakers: Vec::new(),
    running: None,
});

/// Panics caught while ticking a breaker on the ticker thread.
static PANICS: AtomicU64 = AtomicU64::new(0);

struct Global {
    breakers: Vec<Weak<Inner>>,
    running: Option<Running>,
}

/// One ticker thread's life: its own pending list and flags, so that a
/// thread being stopped never touches the state of the one that replaces it.
struct Running {
    handles: usize,
    shared: Arc<Shared>,
    thread: JoinHandle<()>,
    /// The process that started the thread: in a child forked since, the
    /// thread does not exist (a fork copies only the forking thread), so
    /// the ticker does not run there, and its handle is never joined.
    pid: u32,
}

impl Running {
    /// Whether the thread runs in this process: alive, and not the
    /// parent's (in a child of `fork`).
    fn live(&self) -> bool {
        self.pid == std::process::id() && self.shared.alive.load(Ordering::Acquire)
    }

    /// Joins the thread, if it is this process's (a forked child's copy
    /// of the parent's handle names no thread of its own: it is leaked,
    /// never joined nor detached).
    fn join(self) {
        if self.pid == std::process::id() {
            let _ = self.thread.join();
        } else {
            core::mem::forget(self.thread);
        }
    }
}

struct Shared {
    /// Breakers for this thread to schedule: at its start, every breaker
    /// registered so far (copied under the `GLOBAL` lock), then each one
    /// registered while it runs. So every breaker is scheduled exactly once.
    pending: parking_lot::Mutex<Vec<Weak<Inner>>>,
    stop: AtomicBool,
    /// Cleared when the thread's function returns, however it returns.
    alive: AtomicBool,
}

pub(crate) fn register(inner: &Arc<Inner>) {
    let weak = Arc::downgrade(inner);
    let mut global = GLOBAL.lock();
    // Prune dropped breakers now and then: amortised O(1) per breaker.
    if global.breakers.len() >= 64 && global.breakers.len().is_power_of_two() {
        global.breakers.retain(|w| w.strong_count() > 0);
    }
    global.breakers.push(weak.clone());
    if let Some(running) = &global.running {
        running.shared.pending.lock().push(weak);
        // Let the new breaker's first window be closed on time.
        running.thread.thread().unpark();
    }
}

/// The ticker's time grain, in nanoseconds: its schedule's slots. A breaker
/// due at `t` is ticked at the first slot boundary at or after `t`, so no
/// later than one slot after it is due (plus the time the batch takes), and
/// breakers due within one slot are ticked as one batch, in one wake.
const SLOT_NS: u64 = 5_000_000;

/// A hold on the process's ticker thread, which closes the windows of
/// every breaker on it.
///
/// **Nothing to set up.** Every breaker built with the defaults holds the
/// thread itself (see [`BreakerBuilder::ticker`](crate::BreakerBuilder::ticker)):
/// the first one starts it, the last one dropped stops it. A `Ticker` handle
/// is only for keeping the thread up with no breaker alive (say between
/// reconfigurations), for a maximum sleep other than the default, or for
/// [`pass`](Self::pass) and [`is_running`](Self::is_running).
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
/// them: a wake costs far more than a window close. (Breakers with many
/// different window lengths cost it up to one wake per 5 ms slot.) It ticks
/// each batch with the memory of the breakers ahead already loading. Its
/// measured share of a core at 10,000 breakers is in
/// [`guide::figures`](crate::guide::figures).
///
/// It runs while at least one hold on it lives (a breaker on it, or a
/// [`Ticker`] handle); the last one dropped stops and joins it (or, if that
/// is the thread itself, dropping the last reference to a breaker it was
/// ticking, lets it end on its own a moment later). It holds only weak
/// references to the breakers.
///
/// ```
/// use std::time::Duration;
/// use tailguard::{Breaker, Ticker};
///
/// let ticker = Ticker::with_max_sleep(Duration::from_millis(100))?;
/// let breaker = Breaker::builder().window(Duration::from_millis(10)).build()?;
/// breaker.allow()?.record(true);
/// std::thread::sleep(Duration::from_millis(50));
/// assert!(breaker.snapshot().window.closed_at >= Duration::from_millis(10));
/// drop(ticker); // the breaker keeps the thread running ...
/// assert!(Ticker::is_running());
/// drop(breaker); // ... until it goes
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
#[must_use = "the ticker thread stops when the last hold on it (a Ticker, or a breaker on it) is dropped"]
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
    /// In a child of `fork` (which copies only the forking thread) the
    /// parent's ticker thread does not run: the first `start` there, or
    /// the first breaker built there, starts the child's own, which then
    /// ticks every breaker the child has, inherited ones included. (A
    /// child that starts none has no ticker: its inherited breakers close
    /// windows only when ticked by hand.)
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
        let mut global = GLOBAL.lock();
        let mut handles = 1;
        if let Some(r) = global.running.as_mut() {
            if r.live() {
                r.handles += 1;
                return Ok(Ticker { _private: () });
            }
            // The thread died (nothing it runs should unwind, but if
            // something did), or this is a child forked since it started
            // (the thread is the parent's): start a new one for every
            // handle, for every breaker registered.
            handles += r.handles;
        }
        let max_sleep = max_sleep.max(Duration::from_nanos(SLOT_NS));
        let shared = Arc::new(Shared {
            pending: parking_lot::Mutex::new(global.breakers.clone()),
            stop: AtomicBool::new(false),
            alive: AtomicBool::new(true),
        });
        let theirs = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("tailguard-ticker".into())
            .spawn(move || run(&theirs, max_sleep))?;
        if let Some(dead) = global.running.replace(Running {
            handles,
            shared,
            thread,
            pid: std::process::id(),
        }) {
            dead.join();
        }
        Ok(Ticker { _private: () })
    }

    /// Whether the ticker thread is running in this process (started, not
    /// yet stopped, and alive).
    ///
    /// ```
    /// let t = tailguard::Ticker::start().unwrap();
    /// assert!(tailguard::Ticker::is_running());
    /// # drop(t);
    /// ```
    pub fn is_running() -> bool {
        GLOBAL.lock().running.as_ref().is_some_and(Running::live)
    }

    /// Panics caught on the ticker thread while ticking a breaker (or dropping
    /// one whose last handle it held: its listeners' captures), since the
    /// process started (a listener's own panics are caught, and counted, by
    /// its breaker: [`Snapshot::listener_panics`](crate::Snapshot::listener_panics)).
    /// A breaker whose tick panics is ticked again a second later; the other
    /// breakers are not held up.
    ///
    /// ```
    /// assert_eq!(tailguard::Ticker::panics(), 0);
    /// ```
    pub fn panics() -> u64 {
        PANICS.load(Ordering::Relaxed)
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
        let last = {
            let mut global = GLOBAL.lock();
            match global.running.as_mut() {
                Some(r) if r.handles > 1 => {
                    r.handles -= 1;
                    None
                }
                _ => global.running.take(),
            }
        };
        // Stopped and joined outside the lock: a ticker started meanwhile
        // is another thread with its own state, and this one never touches
        // it.
        if let Some(r) = last {
            r.shared.stop.store(true, Ordering::Release);
            if r.pid != std::process::id() {
                // A forked child's copy: no thread of ours to stop.
                r.join();
                return;
            }
            r.thread.thread().unpark();
            // A listener on the ticker thread may drop the last handle:
            // it cannot join itself; its loop ends at the stop flag.
            if r.thread.thread().id() != std::thread::current().id() {
                r.join();
            }
        }
    }
}

/// One pass: tick every live breaker (outside the registry lock, so a
/// listener may build breakers). Returns the number of breakers ticked.
fn pass() -> usize {
    let mut batch: Vec<Weak<Inner>> = GLOBAL.lock().breakers.clone();
    let mut ticked = 0;
    tick_batch(&mut batch, |_, _| ticked += 1);
    GLOBAL.lock().breakers.retain(|w| w.strong_count() > 0);
    ticked
}

/// How far ahead of the breaker being ticked [`tick_batch`] prefetches a
/// breaker's own lines.
const AHEAD: usize = 12;
/// How far ahead it upgrades a breaker and prefetches its shard slots
/// (their address is in the breaker's own lines, loaded by then).
const MID: usize = 8;
/// How far ahead it prefetches the counters and bucket words of the shards
/// a breaker has built (their addresses are in the slots, loaded by then).
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
/// `MID` places on is upgraded and has its shard slots prefetched; the one
/// `NEAR` places on has the counters and bucket words of the shards it
/// built prefetched (only those: a shard is built by a thread that calls
/// the breaker). The misses of several breakers overlap.
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
            // A panic in a breaker's tick (its custom clock, say) must not
            // take down the thread every other breaker depends on.
            let tick = std::panic::AssertUnwindSafe(|| inner.tick_for_ticker());
            let until = std::panic::catch_unwind(tick).unwrap_or_else(|payload| {
                PANICS.fetch_add(1, Ordering::Relaxed);
                crate::events::swallow(payload);
                1_000_000_000
            });
            // The last handle may be this one (every other was dropped
            // during the tick): the breaker's drop runs here, and with it
            // the drops of its listeners' captures, which may panic too.
            if let Err(payload) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(inner))) {
                PANICS.fetch_add(1, Ordering::Relaxed);
                crate::events::swallow(payload);
            }
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

fn run(shared: &Shared, max_sleep: Duration) {
    use std::time::Instant;
    /// Clears `alive` when the thread's function returns or unwinds.
    struct Alive<'a>(&'a AtomicBool);
    impl Drop for Alive<'_> {
        fn drop(&mut self) {
            self.0.store(false, Ordering::Release);
        }
    }
    let _alive = Alive(&shared.alive);
    let origin = Instant::now();
    let now_ns = || u64::try_from(origin.elapsed().as_nanos()).unwrap_or(u64::MAX);
    let mut schedule = Schedule {
        slots: std::collections::BTreeMap::new(),
        spare: Vec::new(),
    };
    while !shared.stop.load(Ordering::Acquire) {
        let now = now_ns();
        for w in shared.pending.lock().drain(..) {
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

#[cfg(all(test, not(miri)))]
mod tests {
    use super::{tick_batch, Schedule, GLOBAL, SLOT_NS};
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
        let len = GLOBAL.lock().breakers.len();
        // Pruned whenever the list reaches a power of two from 64 on: it
        // never holds more than the live ones plus one doubling.
        assert!(
            len <= 2 * 64 + kept.len(),
            "{len} entries for {} live breakers",
            kept.len()
        );
        assert!(GLOBAL.lock().breakers.iter().filter(|w| w.strong_count() > 0).count() >= kept.len());
    }
}

/// Spawns a task on the current tokio runtime that ticks `breaker` every
/// `period` ([`Breaker::tick`](crate::Breaker::tick)), and ends when the breaker is dropped.
///
/// For a breaker on [`ClockSource::tokio`](crate::clock::ClockSource::tokio)
/// under a paused clock (tests with `start_paused`), built with
/// `ticker(false)`: the ticker thread wakes on the real clock, so windows
/// that virtual time runs through in an instant close together at its next
/// wake; ticked here, on the runtime, they close on virtual time, one by
/// one (see [`BreakerBuilder::ticker`](crate::BreakerBuilder::ticker)). The
/// task's timer makes a paused runtime auto-advance whenever it is idle.
///
/// Must be called from within a tokio runtime.
///
/// ```
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), tailguard::ConfigError> {
/// use std::time::Duration;
/// use tailguard::{Breaker, clock::ClockSource};
///
/// let b = Breaker::builder().clock(ClockSource::tokio()).ticker(false).build()?;
/// let ticks = tailguard::tick_every(&b, Duration::from_millis(100));
/// tokio::time::sleep(Duration::from_millis(2_500)).await;
/// assert!(b.snapshot().window.closed_at >= Duration::from_secs(2));
/// drop(b);
/// tokio::time::sleep(Duration::from_millis(200)).await;
/// assert!(ticks.is_finished());
/// # Ok(())
/// # }
/// ```
#[cfg(feature = "tokio")]
#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
pub fn tick_every(breaker: &crate::Breaker, period: Duration) -> tokio::task::JoinHandle<()> {
    let weak = breaker.downgrade();
    let period = period.max(Duration::from_millis(1));
    tokio::spawn(async move {
        let mut interval = tokio::time::interval(period);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            interval.tick().await;
            match crate::Breaker::upgrade(&weak) {
                Some(b) => b.tick(),
                None => return,
            }
        }
    })
}
