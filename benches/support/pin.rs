//! Pinning the calling thread to one CPU, for benches whose threads must
//! sit in a known layout (included with `#[path]` by the benches that use
//! it). With fewer cores than threads, where the scheduler puts each thread
//! decides much of what a contended bench measures; pinning makes a layout
//! repeatable.

/// While alive, the calling thread runs on one CPU only; dropping it gives
/// the thread back the CPUs it had.
pub struct Pinned {
    #[cfg(target_os = "linux")]
    before: libc::cpu_set_t,
}

/// Pins the calling thread to CPU `cpu` until the returned guard is dropped
/// (Linux only; elsewhere an error).
pub fn pin_to_cpu(cpu: usize) -> Result<Pinned, String> {
    #[cfg(target_os = "linux")]
    {
        let size = std::mem::size_of::<libc::cpu_set_t>();
        // SAFETY: `cpu_set_t` is plain data for which all zeroes is the
        // empty set; `sched_getaffinity` writes at most `size` bytes into
        // `before`, `CPU_SET` writes inside `set` (it checks `cpu` against
        // the set's size), and `sched_setaffinity` reads `size` bytes of it.
        let rc = unsafe {
            let mut before: libc::cpu_set_t = std::mem::zeroed();
            if libc::sched_getaffinity(0, size, &mut before) != 0 {
                -1
            } else {
                let mut set: libc::cpu_set_t = std::mem::zeroed();
                libc::CPU_SET(cpu, &mut set);
                if libc::sched_setaffinity(0, size, &set) == 0 {
                    return Ok(Pinned { before });
                }
                -1
            }
        };
        Err(format!(
            "pinning to CPU {cpu} (rc {rc}): {}",
            std::io::Error::last_os_error()
        ))
    }
    #[cfg(not(target_os = "linux"))]
    {
        Err(format!("pinning to CPU {cpu}: only on Linux"))
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        #[cfg(target_os = "linux")]
        // SAFETY: `before` is the set `sched_getaffinity` filled in; the
        // call reads `size_of` bytes of it.
        unsafe {
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &self.before);
        }
    }
}
