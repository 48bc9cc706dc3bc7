//! Waiting for a descriptor to become readable, with a timeout (`poll(2)`), so a thread that
//! accepts connections can also notice a shutdown flag.

use std::os::fd::AsRawFd;
use std::time::Duration;

use super::errno::{check, SysError};

/// Waits up to `timeout` for `fd` to be readable (a listening socket: a connection waits).
/// `Ok(false)` on timeout or when a signal interrupted the wait.
pub fn wait_readable(fd: &impl AsRawFd, timeout: Duration) -> Result<bool, SysError> {
    let mut p = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = timeout.as_millis().min(i32::MAX as u128) as libc::c_int;
    // SAFETY: one valid pollfd, its count 1; the kernel writes only `revents`.
    let r = unsafe { libc::poll(&mut p, 1, ms) };
    match check("poll", r as libc::c_long) {
        Ok(n) => Ok(n > 0),
        Err(e) if e.errno == libc::EINTR => Ok(false),
        Err(e) => Err(e),
    }
}
