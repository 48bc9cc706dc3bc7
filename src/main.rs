//! The `locus` command line: parses arguments (in `cli/`) and calls into the library. Nothing
//! else: every error comes back as one line, printed here with exit code 2 (130 after Ctrl-C).

mod cli;

use std::process::ExitCode;

use cli::CliError;

fn main() -> ExitCode {
    // `locus … | head` should end quietly, like any C tool, not with a broken-pipe panic.
    let _ = locus::sys::signal::default_sigpipe();
    // A model file truncated under our mapping: one error line and exit 2, not "Bus error".
    let _ = locus::sys::signal::catch_sigbus();
    // SIGTERM or SIGHUP while a file is written: its temporary goes with the process.
    let _ = locus::sys::signal::catch_termination();
    // Arguments as the OS gave them: a path or a prompt may hold any bytes (std::env::args
    // would panic on one that is not UTF-8).
    match cli::dispatch(std::env::args_os().collect()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(CliError::Interrupted) => ExitCode::from(locus::sys::signal::EXIT_INTERRUPTED),
        Err(CliError::Message(msg)) => {
            // One line, whatever the message quotes: a path or value holding a newline or
            // another control character is shown escaped.
            let line: String = msg
                .chars()
                .flat_map(|c| match c.is_control() {
                    true => c.escape_default().collect::<Vec<_>>(),
                    false => vec![c],
                })
                .collect();
            locus::app::diag(&format!("locus: error: {line}\n"));
            ExitCode::from(2)
        }
    }
}
