//! The ticker: one named background thread per process that closes the
//! windows of every live breaker.

use crate::breaker::Inner;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

/// Every breaker built with the ticker on (the default), by weak reference:
/// a dropped breaker is pruned at the next pass and costs nothing meanwhile.
static BREAKERS: parking_lot::Mutex<Vec<Weak<Inner>>> = parking_lot::Mutex::new(Vec::new());

/// Breakers registered while the ticker thread runs, for it to schedule.
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
    {
        let mut list = BREAKERS.lock();
        // Prune dropped breakers now and then: amortised O(1) per breaker.
        if list.len() >= 64 && list.len().is_power_of_two() {
            list.retain(|w| w.strong_count() > 0);
        }
        list.push(weak.clone());
    }
    if THREAD_UP.load(Ordering::Acquire) {
        PENDING.lock().push(weak);
        if let Some(running) = RUNNING.lock().as_ref() {
            // Let the new breaker's first window be closed on time.
            running.thread.thread().unpark();
        }
    }
}

/// Shortest sleep between two passes: windows close up to this late, and a
/// thousand breakers with windows of different phases cost 200 wakes a
/// second, not a thousand.
const MIN_SLEEP: Duration = Duration::from_millis(5);

/// Starts (or joins) the process's ticker thread.
///
/// The thread, named `tailguard-ticker`, keeps each live breaker's next due
/// time (its next window end, or the end of its backoff) and wakes when the
/// earliest is due (at most `max_sleep` apart, 50 ms by default), calling
/// [`Breaker::tick`](crate::Breaker::tick) only on the breakers that are due:
/// a breaker costs the thread one window close per window, and nothing in
/// between. (A backoff or probe lease that starts between two of its passes
/// is acted on by the first caller of `allow` at once, and by the ticker at
/// the breaker's next window end at the latest.) It runs while at
/// least one [`Ticker`] handle lives; the last handle to drop stops and joins
/// it. Breakers hold no reference to it and it holds only weak references to
/// them.
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
    /// Starts the ticker with the default maximum sleep (50 ms).
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
        Self::with_max_sleep(Duration::from_millis(50))
    }

    /// Starts the ticker, sleeping at most `max_sleep` between passes (at
    /// least 1 ms). If the thread already runs, this joins it and
    /// `max_sleep` is ignored.
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
        let max_sleep = max_sleep.max(MIN_SLEEP);
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

    /// Runs one pass over every live breaker now, on the calling thread,
    /// and returns how many it ticked. What the thread does each time it
    /// wakes; useful to measure a pass.
    ///
    /// ```
    /// let b = tailguard::Breaker::builder().build().unwrap();
    /// assert!(tailguard::Ticker::pass() >= 1);
    /// # drop(b);
    /// ```
    pub fn pass() -> usize {
        let mut live = Vec::new();
        pass(&mut live).1
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
/// listener may build breakers). Returns the time until the earliest next
/// due window and the number of breakers ticked.
fn pass(live: &mut Vec<Arc<Inner>>) -> (u64, usize) {
    {
        let mut list = BREAKERS.lock();
        list.retain(|w| match w.upgrade() {
            Some(inner) => {
                live.push(inner);
                true
            }
            None => false,
        });
    }
    let n = live.len();
    let mut soonest = u64::MAX;
    for inner in live.drain(..) {
        soonest = soonest.min(inner.tick_for_ticker());
    }
    (soonest, n)
}

/// A breaker in the ticker's schedule, ordered by when it is next due.
struct Due {
    at: std::time::Instant,
    seq: u64,
    breaker: Weak<Inner>,
}

impl PartialEq for Due {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}
impl Eq for Due {}
impl PartialOrd for Due {
    fn partial_cmp(&self, other: &Self) -> Option<core::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Due {
    fn cmp(&self, other: &Self) -> core::cmp::Ordering {
        // Reversed: `BinaryHeap` is a max-heap, the earliest must come first.
        (other.at, other.seq).cmp(&(self.at, self.seq))
    }
}

fn run(stop: &AtomicBool, max_sleep: Duration) {
    use std::collections::BinaryHeap;
    use std::time::Instant;
    let mut seq = 0u64;
    let mut due = |breaker: Weak<Inner>, at: Instant| {
        seq += 1;
        Due { at, seq, breaker }
    };
    // Each live breaker with the (real) time at which it is next due: a
    // wake costs O(log n) per breaker due, nothing for the others.
    let mut schedule: BinaryHeap<Due> = {
        let now = Instant::now();
        BREAKERS.lock().iter().map(|w| due(w.clone(), now)).collect()
    };
    PENDING.lock().clear(); // registered before the snapshot: already in it
    while !stop.load(Ordering::Acquire) {
        let now = Instant::now();
        for w in PENDING.lock().drain(..) {
            schedule.push(due(w, now));
        }
        while schedule.peek().is_some_and(|d| d.at <= now) {
            let Some(entry) = schedule.pop() else { break };
            // A dropped breaker leaves the schedule here.
            if let Some(inner) = entry.breaker.upgrade() {
                let until = Duration::from_nanos(inner.tick_for_ticker());
                schedule.push(due(entry.breaker, now + until.max(MIN_SLEEP)));
            }
        }
        let next = schedule.peek().map_or(now + max_sleep, |d| d.at);
        let sleep = next
            .saturating_duration_since(Instant::now())
            .clamp(MIN_SLEEP, max_sleep);
        std::thread::park_timeout(sleep);
    }
}

#[cfg(test)]
mod tests {
    use super::BREAKERS;
    use crate::Breaker;

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
