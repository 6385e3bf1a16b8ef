//! The calling thread's own CPU time, for benches that compare threads on
//! a shared machine (included with `#[path]` by the benches that use it).

use std::time::Duration;

/// The CPU time the calling thread has used (`CLOCK_THREAD_CPUTIME_ID`):
/// it does not advance while the thread is preempted, so another process
/// taking the core does not count. (Off Unix: wall time since the first
/// call, and the figures measure the scheduler too.)
pub fn thread_cpu_time() -> Duration {
    #[cfg(unix)]
    {
        let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: `ts` is a valid, writable `timespec` for the call's duration.
        let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
        assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
        Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
    }
    #[cfg(not(unix))]
    {
        static EPOCH: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
        EPOCH.get_or_init(std::time::Instant::now).elapsed()
    }
}
