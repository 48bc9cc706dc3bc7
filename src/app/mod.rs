//! The commands behind the CLI: each takes parsed options, does the work, and returns a typed
//! error that `main` prints as one line (exit code 2).

pub mod audit;
pub mod bench;
pub mod generate;
pub mod genmodel;
pub mod imatrix;
pub mod membw;
pub mod perplexity;
pub mod svg;
pub mod tokenize;
pub mod topo;

use std::fmt;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};

use crate::kernels::KernelError;
use crate::model::ModelError;
use crate::runtime::RuntimeError;

/// Any failure of a command.
#[derive(Debug)]
pub enum AppError {
    Model(ModelError),
    Kernels(KernelError),
    Io {
        path: PathBuf,
        what: &'static str,
        err: std::io::Error,
    },
    Usage(String),
    Placement(crate::placement::PlacementError),
    /// Writing an output file failed or was refused (see [`crate::sys::fs`]).
    Write(crate::sys::fs::WriteError),
    /// Ctrl-C ended the work (exit code 130).
    Interrupted,
    /// A worker thread could not be started.
    Threads(crate::pool::SpawnError),
}

impl fmt::Display for AppError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AppError::Model(e) => write!(f, "{e}"),
            AppError::Kernels(e) => write!(f, "{e}"),
            AppError::Io { path, what, err } => write!(f, "{}: {what}: {err}", path.display()),
            AppError::Usage(m) => write!(f, "{m}"),
            AppError::Placement(e) => write!(f, "{e}"),
            AppError::Write(e) => write!(f, "{e}"),
            AppError::Interrupted => write!(f, "interrupted"),
            AppError::Threads(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for AppError {}

impl From<ModelError> for AppError {
    fn from(e: ModelError) -> Self {
        match e {
            ModelError::Interrupted
            | ModelError::Write(crate::sys::fs::WriteError::Interrupted) => AppError::Interrupted,
            e => AppError::Model(e),
        }
    }
}

impl From<crate::sys::fs::WriteError> for AppError {
    fn from(e: crate::sys::fs::WriteError) -> Self {
        match e {
            crate::sys::fs::WriteError::Interrupted => AppError::Interrupted,
            e => AppError::Write(e),
        }
    }
}

impl From<crate::placement::PlacementError> for AppError {
    fn from(e: crate::placement::PlacementError) -> Self {
        AppError::Placement(e)
    }
}

impl From<RuntimeError> for AppError {
    fn from(e: RuntimeError) -> Self {
        match e {
            RuntimeError::Model(e) => e.into(),
            RuntimeError::Kernels(e) => AppError::Kernels(e),
            RuntimeError::Placement(e) => AppError::Placement(e),
            RuntimeError::Threads(e) => AppError::Threads(e),
            e @ RuntimeError::BadPrefetch(_) => AppError::Usage(e.to_string()),
        }
    }
}

impl From<crate::serve::ServeError> for AppError {
    fn from(e: crate::serve::ServeError) -> Self {
        match e {
            crate::serve::ServeError::Runtime(e) => e.into(),
            e => AppError::Usage(e.to_string()),
        }
    }
}

impl From<KernelError> for AppError {
    fn from(e: KernelError) -> Self {
        AppError::Kernels(e)
    }
}

pub use crate::sys::diag::diag;

/// Installs the Ctrl-C flag handler for a command whose loops poll it (a warning where it
/// cannot be installed: Ctrl-C then ends the process at once).
pub fn catch_interrupts() {
    if let Err(e) = crate::sys::signal::catch_sigint() {
        crate::diagln!(
            "locus: warning: cannot catch SIGINT ({e}); Ctrl-C will end the command at once"
        );
    }
}

/// Writes a command's output to stdout. A failed write (a full disk, a closed descriptor) is
/// an error naming stdout, not a panic; a reader that went away (`| head`) ends the process
/// quietly through SIGPIPE before this returns.
pub fn write_stdout(text: &str) -> Result<(), AppError> {
    write_stdout_io(text).map_err(stdout_error)
}

/// [`write_stdout`] for commands with their own error type.
pub fn write_stdout_io(text: &str) -> std::io::Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes()).and_then(|_| out.flush())
}

/// The error for a failed write to stdout.
pub fn stdout_error(err: std::io::Error) -> AppError {
    AppError::Io {
        path: PathBuf::from("stdout"),
        what: "cannot write the output",
        err,
    }
}

/// Reads at most `cap` bytes of `path` (a file, a device, a FIFO), as UTF-8 text. `what` names
/// the text in messages ("the prompt file"); `why` says where the cap comes from. A FIFO gets a
/// note on stderr before the read, which waits for a writer; a directory is refused.
pub fn read_text_capped(path: &Path, cap: u64, what: &str, why: &str) -> Result<String, AppError> {
    use std::io::Read;
    let io = |what: &'static str| {
        let path = path.to_path_buf();
        move |err| AppError::Io { path, what, err }
    };
    let meta = std::fs::metadata(path).map_err(io("cannot read the file"))?;
    let kind = crate::sys::fs::FileKind::of(&meta);
    match kind {
        crate::sys::fs::FileKind::Directory => {
            return Err(AppError::Usage(format!(
                "{}: is a directory; {what} must be a file",
                path.display()
            )))
        }
        crate::sys::fs::FileKind::Fifo => crate::diagln!(
            "locus: {} is a FIFO: waiting for a writer to open it and send {what} (Ctrl-C stops)",
            path.display()
        ),
        _ => {}
    }
    let file = if kind == crate::sys::fs::FileKind::Fifo {
        let stop = crate::sys::signal::interrupt_flag();
        crate::sys::fs::open_fifo_for_reading(path, stop)
            .map_err(io("cannot read the file"))?
            .ok_or(AppError::Interrupted)?
    } else {
        std::fs::File::open(path).map_err(io("cannot read the file"))?
    };
    let mut bytes = Vec::new();
    file.take(cap.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(io("cannot read the file"))?;
    if bytes.len() as u64 > cap {
        return Err(AppError::Usage(format!(
            "{}: {what} is longer than {cap} bytes ({why}); is it the right file?",
            path.display()
        )));
    }
    utf8_text(bytes, &path.display().to_string())
}

/// Reads at most `cap` bytes of standard input as UTF-8 text (a note on stderr first where it
/// is a terminal, which waits for Ctrl-D).
pub fn read_stdin_capped(cap: u64, why: &str) -> Result<String, AppError> {
    use std::io::Read;
    let stdin = std::io::stdin();
    if stdin.is_terminal() {
        crate::diagln!("locus: reading standard input until end of file (Ctrl-D)");
    }
    let mut bytes = Vec::new();
    stdin
        .lock()
        .take(cap.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|err| AppError::Io {
            path: PathBuf::from("standard input"),
            what: "cannot read",
            err,
        })?;
    if bytes.len() as u64 > cap {
        return Err(AppError::Usage(format!(
            "standard input is longer than {cap} bytes ({why})"
        )));
    }
    utf8_text(bytes, "standard input")
}

fn utf8_text(bytes: Vec<u8>, name: &str) -> Result<String, AppError> {
    String::from_utf8(bytes).map_err(|e| {
        let at = e.utf8_error().valid_up_to();
        AppError::Usage(format!(
            "{name}: not valid UTF-8 text (first bad byte 0x{:02x} at offset {at})",
            e.as_bytes()[at]
        ))
    })
}

/// The most bytes of text a command reads with no context to bound it (`perplexity -f`,
/// `tokenize -f` / `--stdin`): 256 MiB, two hundred times wikitext-2's test set.
pub const MAX_TEXT_BYTES: u64 = 256 << 20;
