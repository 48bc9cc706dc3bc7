//! Signal dispositions for a command-line tool: SIGINT sets a flag the generation loop polls
//! (so an interrupted run still prints its timing line and exits 130), a second SIGINT exits at
//! once; SIGPIPE is restored to its default so `locus … | head` ends quietly, as C tools do;
//! SIGBUS (a mapped model file that shrank under us) ends the run with one error line and
//! exit 2 instead of "Bus error (core dumped)".

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

/// Exit status after SIGBUS: the same as every other error.
pub const EXIT_BUS_ERROR: i32 = 2;

/// What the SIGBUS handler writes to stderr. Reading a page of a file mapping that lies
/// beyond the file's end (another process truncated or rewrote the model in place while it was
/// mapped) is the way locus meets SIGBUS; the leading newline ends a half-written line. (A
/// hugetlb page that cannot be allocated at fault time — e.g. memory bound to a node without
/// free hugepages — raises SIGBUS too and would get this message: placement should check the
/// node's free hugepages before it binds.)
const SIGBUS_MESSAGE: &[u8] = b"\nlocus: error: the model file changed while it was being read \
(truncated or replaced?); copy it elsewhere or rerun\n";

extern "C" fn on_sigbus(_sig: libc::c_int) {
    // SAFETY: write(2) and _exit(2) are async-signal-safe; the message is a static buffer of
    // the length passed. The write's result is ignored: there is nothing left to do if it fails.
    unsafe {
        libc::write(
            libc::STDERR_FILENO,
            SIGBUS_MESSAGE.as_ptr().cast(),
            SIGBUS_MESSAGE.len(),
        );
        libc::_exit(EXIT_BUS_ERROR);
    }
}

/// Installs the SIGBUS handler: one error line on stderr and exit 2. A fault on a mapped file
/// cannot be recovered from (the data is gone), so the handler does not return; it replaces
/// Rust's own handler, which only distinguishes stack overflows (those raise SIGSEGV on Linux).
pub fn catch_sigbus() -> Result<(), SysError> {
    set_handler(libc::SIGBUS, on_sigbus as *const () as libc::sighandler_t)
}

/// Restores SIGPIPE's default action (terminate quietly), which Rust's runtime replaces with
/// "ignore" so that writes fail with EPIPE instead.
pub fn default_sigpipe() -> Result<(), SysError> {
    set_handler(libc::SIGPIPE, libc::SIG_DFL)
}
