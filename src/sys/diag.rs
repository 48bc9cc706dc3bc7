//! Diagnostics on stderr that never fail a command or panic: every layer's warnings go through
//! here ([`crate::diagln!`]), so a closed or full stderr cannot turn a warning into a crash.

/// Writes `text` to stderr as it is (add the newline yourself; [`crate::diagln!`] does).
/// Diagnostics never fail a command: where stderr itself cannot be written (closed, a full
/// disk) there is nowhere left to say so, so the failure is ignored rather than turned into a
/// panic, as C tools ignore a failed `fprintf(stderr, …)`.
pub fn diag(text: &str) {
    use std::io::Write;
    let mut err = std::io::stderr().lock();
    let _ = err.write_all(text.as_bytes()).and_then(|_| err.flush());
}

/// `eprintln!` that never panics: one line to stderr through [`diag`].
#[macro_export]
macro_rules! diagln {
    () => { $crate::sys::diag::diag("\n") };
    ($($arg:tt)*) => { $crate::sys::diag::diag(&format!("{}\n", format_args!($($arg)*))) };
}

/// `eprint!` that never panics (no newline added).
#[macro_export]
macro_rules! diag {
    ($($arg:tt)*) => { $crate::sys::diag::diag(&format!($($arg)*)) };
}
