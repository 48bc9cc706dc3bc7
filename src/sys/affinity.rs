//! CPU affinity through raw `sched_getaffinity` / `sched_setaffinity` (per thread).

use super::errno::check;
pub use super::errno::SysError;
use super::ids::CpuSet;

/// Largest CPU mask we ask the kernel for, in bytes (grows on EINVAL up to this).
const MAX_MASK_BYTES: usize = 1 << 16;

/// `sched_getaffinity(0, len, mask)` — the CPUs the calling thread may run on
/// (sched_getaffinity(2)). The mask buffer grows until the kernel accepts its size (it returns
/// EINVAL while the buffer is smaller than its own `nr_cpu_ids`).
pub fn allowed_cpu_set() -> Result<CpuSet, SysError> {
    const WORD: usize = std::mem::size_of::<libc::c_ulong>();
    let mut bytes = 128usize;
    loop {
        let mut mask = vec![0 as libc::c_ulong; bytes / WORD];
        // SAFETY: the pointer and length describe a writable buffer we own (bytes is a multiple
        // of the word size); pid 0 is this thread.
        let r = unsafe { libc::syscall(libc::SYS_sched_getaffinity, 0, bytes, mask.as_mut_ptr()) };
        match check("sched_getaffinity", r) {
            Ok(used) => {
                // The kernel returns the number of bytes it wrote.
                let used_words = (used as usize).min(bytes).div_ceil(WORD);
                return Ok(CpuSet::from_ulongs(&mask[..used_words]));
            }
            Err(e) if e.errno == libc::EINVAL && bytes < MAX_MASK_BYTES => bytes *= 2,
            Err(e) => return Err(e),
        }
    }
}

/// `sched_setaffinity(0, len, mask)` — restricts the calling thread to `cpus`
/// (sched_setaffinity(2)). Fails with EINVAL when no CPU of the set is allowed (cpuset).
pub fn set_affinity(cpus: &CpuSet) -> Result<(), SysError> {
    let mask = cpus.to_ulongs(0);
    let bytes = std::mem::size_of_val(mask.as_slice());
    // SAFETY: the pointer and length describe a readable buffer we own; pid 0 is this thread.
    let r = unsafe { libc::syscall(libc::SYS_sched_setaffinity, 0, bytes, mask.as_ptr()) };
    check("sched_setaffinity", r).map(|_| ())
}

/// `sched_getaffinity` as a list of CPU ids.
pub fn allowed_cpus() -> Result<Vec<usize>, SysError> {
    Ok(allowed_cpu_set()?.iter().map(|c| c.index()).collect())
}

/// How many CPUs this process may run on.
pub fn allowed_cpu_count() -> Result<usize, SysError> {
    allowed_cpu_set().map(|s| s.len())
}

#[cfg(test)]
mod tests {
    /// The mask equals what the kernel prints for this thread in `/proc/thread-self/status`
    /// (`available_parallelism` would not do: under a cgroup CPU quota it is smaller).
    #[test]
    fn this_thread_may_run_where_the_kernel_says() {
        let cpus = super::allowed_cpu_set().unwrap();
        assert!(!cpus.is_empty());
        let status = std::fs::read_to_string("/proc/thread-self/status").unwrap();
        let list = status
            .lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
            .expect("Cpus_allowed_list in /proc/thread-self/status");
        assert_eq!(cpus, super::CpuSet::parse_list(list.trim()).unwrap());
        assert_eq!(super::allowed_cpus().unwrap().len(), cpus.len());
        assert_eq!(super::allowed_cpu_count().unwrap(), cpus.len());
    }

    #[test]
    fn setting_the_same_affinity_is_allowed() {
        // On a scratch thread, so the test runner's threads keep theirs.
        std::thread::spawn(|| {
            let before = super::allowed_cpu_set().unwrap();
            super::set_affinity(&before).unwrap();
            let first: super::CpuSet = before.first().into_iter().collect();
            super::set_affinity(&first).unwrap();
            assert_eq!(super::allowed_cpu_set().unwrap(), first);
        })
        .join()
        .unwrap();
    }
}
