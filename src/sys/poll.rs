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

/// What a connected socket's peer has done, without waiting (`poll(2)` with a zero timeout).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerState {
    /// The peer will send nothing more (a FIN: it closed, or only shut down its writing half).
    pub read_closed: bool,
    /// The connection is gone both ways (a reset, or an error on the socket).
    pub hung_up: bool,
}

/// Polls `fd`'s state now.
pub fn peer_state(fd: &impl AsRawFd) -> Result<PeerState, SysError> {
    let mut p = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN | libc::POLLRDHUP,
        revents: 0,
    };
    // SAFETY: one valid pollfd, its count 1; the kernel writes only `revents`.
    let r = unsafe { libc::poll(&mut p, 1, 0) };
    match check("poll", r as libc::c_long) {
        Ok(_) => Ok(PeerState {
            read_closed: p.revents & libc::POLLRDHUP != 0,
            hung_up: p.revents & (libc::POLLHUP | libc::POLLERR) != 0,
        }),
        Err(e) if e.errno == libc::EINTR => Ok(PeerState {
            read_closed: false,
            hung_up: false,
        }),
        Err(e) => Err(e),
    }
}
