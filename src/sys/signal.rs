//! Signal dispositions for a command-line tool: SIGINT sets a flag the long loops poll
//! (generation, prompt evaluation between matmul steps, perplexity, quantize, gen-model), so an
//! interrupted run still prints its timing line, a writer removes its temporary file, and the
//! process exits 130; a second SIGINT exits at once, unlinking the temporary file a writer has
//! registered ([`register_temp`]) so not even that is left behind; SIGPIPE is restored to its default so `locus … | head` ends quietly, as C tools do;
//! SIGBUS (a mapped model file that shrank under us) ends the run with one error line and
//! exit 2 instead of "Bus error (core dumped)".

use std::cell::UnsafeCell;
use std::ffi::CStr;
use std::sync::atomic::{AtomicBool, Ordering};

use super::errno::{check, SysError};

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// The longest temporary path [`register_temp`] keeps (`PATH_MAX`); a longer one is not
/// registered (the writer still removes it when it unwinds).
const TEMP_PATH_MAX: usize = 4096;

/// A NUL-terminated path the SIGINT handler may read at any moment: written only while
/// `TEMP_ARMED` is false, read by the handler only while it is true.
struct TempPath(UnsafeCell<[u8; TEMP_PATH_MAX]>);

// SAFETY: access is ordered by `TEMP_ARMED` (see `register_temp`): the writer fills the buffer
// while the handler cannot read it, and one writer exists at a time (the atomic file writer).
unsafe impl Sync for TempPath {}

static TEMP_PATH: TempPath = TempPath(UnsafeCell::new([0; TEMP_PATH_MAX]));
static TEMP_ARMED: AtomicBool = AtomicBool::new(false);

/// Registers the temporary file a writer is filling: a second Ctrl-C, which exits at once,
/// unlinks it first. One file at a time; a later registration replaces an earlier one.
pub fn register_temp(path: &CStr) {
    let bytes = path.to_bytes_with_nul();
    if bytes.len() > TEMP_PATH_MAX {
        return;
    }
    TEMP_ARMED.store(false, Ordering::SeqCst);
    // SAFETY: the handler reads the buffer only while TEMP_ARMED is true, and it was just set
    // false (SeqCst: the handler sees the store before the buffer changes); writers are the one
    // atomic file of the process.
    unsafe {
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), TEMP_PATH.0.get().cast::<u8>(), bytes.len())
    };
    TEMP_ARMED.store(true, Ordering::SeqCst);
}

/// Forgets the registered temporary file (it was renamed into place or removed).
pub fn unregister_temp() {
    TEMP_ARMED.store(false, Ordering::SeqCst);
}

/// Exit status of a process ended by SIGINT, by shell convention (128 + 2).
pub const EXIT_INTERRUPTED: u8 = 130;

/// Unlinks the registered temporary file, if any (async-signal-safe).
fn unlink_temp() {
    if TEMP_ARMED.swap(false, Ordering::SeqCst) {
        // SAFETY: unlink is async-signal-safe; the buffer holds a NUL-terminated path and is
        // not being written while TEMP_ARMED was true.
        unsafe { libc::unlink(TEMP_PATH.0.get().cast::<libc::c_char>()) };
    }
}

extern "C" fn on_sigint(_sig: libc::c_int) {
    if INTERRUPTED.swap(true, Ordering::SeqCst) {
        unlink_temp();
        // SAFETY: _exit is async-signal-safe; a second Ctrl-C means "stop now".
        unsafe { libc::_exit(EXIT_INTERRUPTED as libc::c_int) };
    }
}

/// SIGTERM and SIGHUP: the temporary file goes, then the signal's default action (the process
/// ends by the signal, as it would have without the handler).
extern "C" fn on_termination(sig: libc::c_int) {
    unlink_temp();
    let _ = set_handler(sig, libc::SIG_DFL);
    // SAFETY: raise is async-signal-safe; with the default action restored it ends the process.
    unsafe { libc::raise(sig) };
}

/// Installs the SIGTERM and SIGHUP handler (a temporary file is removed before the process
/// ends by the signal).
pub fn catch_termination() -> Result<(), SysError> {
    for sig in [libc::SIGTERM, libc::SIGHUP] {
        set_handler(sig, on_termination as *const () as libc::sighandler_t)?;
    }
    Ok(())
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

/// A server's shutdown signals: SIGTERM and SIGINT both set the flag [`interrupted`] reads
/// (the server stops accepting and finishes its streams); a second one of either exits at once
/// with status 130.
pub fn catch_shutdown() -> Result<(), SysError> {
    for sig in [libc::SIGTERM, libc::SIGINT] {
        set_handler(sig, on_sigint as *const () as libc::sighandler_t)?;
    }
    Ok(())
}

/// Whether SIGINT arrived since [`catch_sigint`].
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

/// The flag SIGINT sets, for code that polls it without knowing about signals (the forward
/// pass takes it as a plain stop flag).
pub fn interrupt_flag() -> &'static AtomicBool {
    &INTERRUPTED
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
    unlink_temp();
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

/// Sends signal `sig` to this process with its default action restored first, so the process
/// dies of it (a test hook for a parent that must explain a child's death).
pub fn raise(sig: libc::c_int) {
    let _ = set_handler(sig, libc::SIG_DFL);
    // SAFETY: raise(3) has no memory-safety preconditions.
    unsafe { libc::raise(sig) };
}

/// Restores SIGPIPE's default action (terminate quietly), which Rust's runtime replaces with
/// "ignore" so that writes fail with EPIPE instead.
pub fn default_sigpipe() -> Result<(), SysError> {
    set_handler(libc::SIGPIPE, libc::SIG_DFL)
}
