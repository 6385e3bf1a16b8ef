//! A manual clock that runs a hook at one chosen read: the way a test puts a
//! second thread's action at the exact instant a race needs (between the
//! breaker's load of its state word and the clock read that follows it,
//! between a window close's clock read and its claim, ...). The hook runs on
//! the reading thread, after the time is read and before it is returned, as
//! a racing thread could act at that instant.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tailguard::clock::{Clock, ClockSource};

type Hook = Box<dyn FnOnce() + Send>;

#[derive(Clone, Default)]
pub struct HookClock {
    nanos: Arc<AtomicU64>,
    /// Reads left before the hook runs (the hook runs at read number
    /// `countdown` from when it was armed, 1 = the next read).
    countdown: Arc<AtomicUsize>,
    hook: Arc<Mutex<Option<Hook>>>,
}

#[allow(dead_code)]
impl HookClock {
    pub fn new() -> Self {
        Self::default()
    }

    /// The source to hand to `Breaker::builder().clock(..)`.
    pub fn source(&self) -> ClockSource {
        ClockSource::custom(Arc::new(self.clone()))
    }

    pub fn advance(&self, by: Duration) {
        self.nanos.fetch_add(by.as_nanos() as u64, Ordering::SeqCst);
    }

    pub fn rewind(&self, by: Duration) {
        self.nanos.fetch_sub(by.as_nanos() as u64, Ordering::SeqCst);
    }

    pub fn now(&self) -> Duration {
        Duration::from_nanos(self.nanos.load(Ordering::SeqCst))
    }

    /// Runs `hook` during the `nth` clock read from now (1 = the next).
    pub fn at_read(&self, nth: usize, hook: impl FnOnce() + Send + 'static) {
        *self.hook.lock().unwrap() = Some(Box::new(hook));
        self.countdown.store(nth, Ordering::SeqCst);
    }

    /// Whether the armed hook has run.
    pub fn fired(&self) -> bool {
        self.hook.lock().unwrap().is_none()
    }
}

impl Clock for HookClock {
    fn now_nanos(&self) -> u64 {
        let now = self.nanos.load(Ordering::SeqCst);
        // Counts down to 1 (this read runs the hook), then stays at 0.
        let mut n = self.countdown.load(Ordering::SeqCst);
        let due = loop {
            if n == 0 {
                break false;
            }
            match self
                .countdown
                .compare_exchange(n, n - 1, Ordering::SeqCst, Ordering::SeqCst)
            {
                Ok(_) => break n == 1,
                Err(actual) => n = actual,
            }
        };
        if due {
            let hook = self.hook.lock().unwrap().take();
            if let Some(hook) = hook {
                hook();
            }
        }
        now
    }
}
