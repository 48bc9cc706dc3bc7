//! CPU affinity through raw `sched_getaffinity`.

use std::fmt;

/// An errno from a failed system call, with the call's name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SysError {
    pub call: &'static str,
    pub errno: i32,
}

impl fmt::Display for SysError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let msg = std::io::Error::from_raw_os_error(self.errno);
        write!(f, "{} failed: {msg}", self.call)
    }
}

impl std::error::Error for SysError {}

/// Largest CPU mask we ask the kernel for, in bytes (grows on EINVAL up to this).
const MAX_MASK_BYTES: usize = 1 << 16;

/// `sched_getaffinity(0, len, mask)` — the CPUs this thread may run on, as a list of CPU ids.
/// The mask buffer grows until the kernel accepts its size (it returns EINVAL while the buffer
/// is smaller than its own `nr_cpu_ids`).
pub fn allowed_cpus() -> Result<Vec<usize>, SysError> {
    let mut bytes = 128usize;
    loop {
        let mut mask = vec![0u8; bytes];
        // SAFETY: the pointer and length describe a writable buffer we own; pid 0 is this thread.
        let r = unsafe { libc::syscall(libc::SYS_sched_getaffinity, 0, bytes, mask.as_mut_ptr()) };
        if r >= 0 {
            let used = (r as usize).min(bytes);
            return Ok((0..used * 8)
                .filter(|&c| mask[c / 8] & (1 << (c % 8)) != 0)
                .collect());
        }
        let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
        if errno == libc::EINVAL && bytes < MAX_MASK_BYTES {
            bytes *= 2;
            continue;
        }
        return Err(SysError {
            call: "sched_getaffinity",
            errno,
        });
    }
}

/// How many CPUs this process may run on.
pub fn allowed_cpu_count() -> Result<usize, SysError> {
    allowed_cpus().map(|v| v.len())
}

#[cfg(test)]
mod tests {
    #[test]
    fn this_thread_may_run_somewhere() {
        let cpus = super::allowed_cpus().unwrap();
        assert!(!cpus.is_empty());
        assert_eq!(
            cpus.len(),
            std::thread::available_parallelism().unwrap().get()
        );
    }
}
