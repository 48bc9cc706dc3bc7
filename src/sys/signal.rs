//! Signal dispositions for a command-line tool: SIGINT sets a flag the generation loop polls
//! (so an interrupted run still prints its timing line and exits 130), a second SIGINT exits at
//! once; SIGPIPE is restored to its default so `locus … | head` ends quietly, as C tools do.

use std::sync::atomic::{AtomicBool, Ordering};

use super::errno::{check, SysError};

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// Exit status of a process ended by SIGINT, by shell convention (128 + 2).
pub const EXIT_INTERRUPTED: u8 = 130;

extern "C" fn on_sigint(_sig: libc::c_int) {
    if INTERRUPTED.swap(true, Ordering::SeqCst) {
        // SAFETY: _exit is async-signal-safe; a second Ctrl-C means "stop now".
        unsafe { libc::_exit(EXIT_INTERRUPTED as libc::c_int) };
    }
}

/// `sigaction(signum, act, NULL)` with `handler` and an empty mask.
fn set_handler(signum: libc::c_int, handler: libc::sighandler_t) -> Result<(), SysError> {
    // SAFETY: a zeroed sigaction is a valid starting value; we fill the handler and an empty
    // mask, and the kernel only reads the struct for the duration of the call.
    unsafe {
        let mut act: libc::sigaction = std::mem::zeroed();
        act.sa_sigaction = handler;
        act.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&mut act.sa_mask);
        check(
            "sigaction",
            libc::sigaction(signum, &act, std::ptr::null_mut()) as libc::c_long,
        )?;
    }
    Ok(())
}

/// Installs the SIGINT flag handler.
pub fn catch_sigint() -> Result<(), SysError> {
    set_handler(libc::SIGINT, on_sigint as *const () as libc::sighandler_t)
}

/// Whether SIGINT arrived since [`catch_sigint`].
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

/// Restores SIGPIPE's default action (terminate quietly), which Rust's runtime replaces with
/// "ignore" so that writes fail with EPIPE instead.
pub fn default_sigpipe() -> Result<(), SysError> {
    set_handler(libc::SIGPIPE, libc::SIG_DFL)
}
