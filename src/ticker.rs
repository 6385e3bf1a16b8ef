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

/// The running ticker thread, if any, and how many handles keep it.
static RUNNING: parking_lot::Mutex<Option<Running>> = parking_lot::Mutex::new(None);

struct Running {
    handles: usize,
    stop: Arc<AtomicBool>,
    thread: JoinHandle<()>,
}

pub(crate) fn register(inner: &Arc<Inner>) {
    let mut list = BREAKERS.lock();
    list.retain(|w| w.strong_count() > 0);
    list.push(Arc::downgrade(inner));
    drop(list);
    if let Some(running) = RUNNING.lock().as_ref() {
        // Let the new breaker's first window be closed on time.
        running.thread.thread().unpark();
    }
}

/// Shortest sleep between two passes.
const MIN_SLEEP: Duration = Duration::from_millis(1);

/// Starts (or joins) the process's ticker thread.
///
/// The thread, named `tailguard-ticker`, wakes when the earliest window of
/// any live breaker is due (at most `max_sleep` apart, 50 ms by default) and
/// calls [`Breaker::tick`](crate::Breaker::tick) on each. It runs while at
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
        let thread = std::thread::Builder::new()
            .name("tailguard-ticker".into())
            .spawn(move || run(&their_stop, max_sleep))?;
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

fn run(stop: &AtomicBool, max_sleep: Duration) {
    let mut live = Vec::new();
    while !stop.load(Ordering::Acquire) {
        let (soonest, _) = pass(&mut live);
        let sleep = Duration::from_nanos(soonest).clamp(MIN_SLEEP, max_sleep);
        std::thread::park_timeout(sleep);
    }
}
