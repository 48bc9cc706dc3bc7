//! The commands behind the CLI: each takes parsed options, does the work, and returns a typed
//! error that `main` prints as one line (exit code 2).

pub mod audit;
pub mod bench;
pub mod generate;
pub mod genmodel;
pub mod membw;
pub mod perplexity;
pub mod svg;
pub mod tokenize;
pub mod topo;

use std::fmt;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::kernels::{self, KernelError, Kernels, StreamTarget};
use crate::model::forward::Model;
use crate::model::tokenizer::Tokenizer;
use crate::model::weights::Weights;
use crate::model::{Config, ModelError, ModelFile};
use crate::placement::Placement;

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

impl From<KernelError> for AppError {
    fn from(e: KernelError) -> Self {
        AppError::Kernels(e)
    }
}

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
    () => { $crate::app::diag("\n") };
    ($($arg:tt)*) => { $crate::app::diag(&format!("{}\n", format_args!($($arg)*))) };
}

/// `eprint!` that never panics (no newline added).
#[macro_export]
macro_rules! diag {
    ($($arg:tt)*) => { $crate::app::diag(&format!($($arg)*)) };
}

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

/// A model loaded and ready: weights borrowed from the mapped file, plus its tokenizer.
pub struct Loaded<'a> {
    pub llama: Model<'a>,
    pub tokenizer: Tokenizer,
    pub load_ms: f64,
}

impl<'a> Loaded<'a> {
    /// Loads with the weights read straight from the file's mapping (no placement).
    pub fn load(file: &'a ModelFile, started: Instant) -> Result<Loaded<'a>, AppError> {
        Loaded::load_inner(file, None, started)
    }

    /// Loads with the weights read from `placement`'s copies (built beforehand).
    pub fn load_placed(
        file: &'a ModelFile,
        placement: &'a Placement,
        started: Instant,
    ) -> Result<Loaded<'a>, AppError> {
        Loaded::load_inner(file, Some(placement), started)
    }

    fn load_inner(
        file: &'a ModelFile,
        placement: Option<&'a Placement>,
        started: Instant,
    ) -> Result<Loaded<'a>, AppError> {
        let g = file.gguf()?;
        let config = Config::from_gguf(&g)?;
        let mut weights = Weights::from_gguf(&g, &config)?;
        if let Some(p) = placement {
            p.bind(&mut weights);
        }
        let tokenizer = Tokenizer::from_gguf(&g)?;
        if tokenizer.n_vocab() != config.n_vocab {
            return Err(AppError::Model(ModelError::BadKey {
                key: "tokenizer.ggml.tokens".into(),
                why: format!(
                    "has {} entries but the model's vocabulary is {}",
                    tokenizer.n_vocab(),
                    config.n_vocab
                ),
            }));
        }
        let kernels = Kernels::detect()?;
        kernels::set_stream_target(stream_target_for(&weights)?);
        let llama = Model::new(config, weights, kernels);
        if let Some(p) = placement {
            if let Err(w) = p.release_file_pages(file) {
                crate::diagln!("locus: warning: {w}");
            }
        }
        Ok(Loaded {
            llama,
            tokenizer,
            load_ms: started.elapsed().as_secs_f64() * 1e3,
        })
    }
}

/// Where the kernels should prefetch for these weights: into L2 when the matrices read each
/// token outgrow the last-level cache (they stream from memory), else into L1; `LOCUS_PREFETCH`
/// overrides.
fn stream_target_for(w: &Weights) -> Result<StreamTarget, AppError> {
    if let Ok(s) = std::env::var(kernels::PREFETCH_ENV) {
        return StreamTarget::parse(&s).ok_or_else(|| {
            AppError::Usage(format!(
                "{}={s:?} is not a prefetch target; use l1 or l2",
                kernels::PREFETCH_ENV
            ))
        });
    }
    let bytes = w
        .read_per_token()
        .iter()
        .map(|(m, share)| (m.file.data.len() as f64 * share) as u64)
        .sum();
    Ok(StreamTarget::for_weights(
        bytes,
        crate::sys::cache::last_level_bytes(0),
    ))
}

/// Detects the host and places `file`'s weights for `opts`, printing every warning and
/// fallback to stderr (never silently), and the plan's summary with `verbose`; a slow
/// placement's progress lines when stderr is a terminal or with `verbose`.
pub fn place(
    file: &ModelFile,
    opts: &crate::placement::Options,
    verbose: bool,
) -> Result<Placement, AppError> {
    let opts = crate::placement::Options {
        progress: opts.progress || verbose || std::io::stderr().is_terminal(),
        ..opts.clone()
    };
    let p = Placement::build(file, &opts)?;
    for w in &p.warnings {
        crate::diagln!("locus: warning: {w}");
    }
    if verbose {
        for n in &p.plan.notes {
            crate::diagln!("locus: {n}");
        }
        crate::diagln!("locus: numa: {}", p.summary());
    }
    Ok(p)
}

/// Binds a sequence cache's blocks (each with the pool group whose threads write it, as
/// [`crate::model::forward::State::kv_head_blocks`] gives them) to that group's node, and
/// returns the regions for [`crate::placement::cache::audit`]. Where binding is refused on a
/// host with several nodes it says so once: first touch by the pinned writers places the pages.
pub fn place_cache(
    p: &Placement,
    blocks: Vec<(&[u8], usize)>,
) -> Vec<crate::placement::cache::CacheRegion> {
    let nodes: Vec<_> = p.plan.slots.iter().map(|s| s.node).collect();
    let blocks: Vec<_> = blocks
        .into_iter()
        .map(|(b, g)| (b, nodes.get(g).copied().flatten()))
        .collect();
    let (regions, refused) = crate::placement::cache::place(&blocks);
    if let (Some(e), true) = (refused, nodes.iter().flatten().count() > 1) {
        crate::diagln!("locus: warning: the KV cache cannot be bound to its nodes ({e}); its pages are placed by first touch from the pinned threads");
    }
    regions
}

/// The placement's pinned pool; pinning failures go to stderr, a thread that cannot be
/// started is an error.
pub fn pool_of(p: &Placement) -> Result<crate::pool::Pool, AppError> {
    let (pool, warnings) = p.pool().map_err(AppError::Threads)?;
    for w in warnings {
        crate::diagln!("locus: warning: {w}");
    }
    Ok(pool)
}

/// The CPUs this process may run on (sched_getaffinity), at least 1.
pub fn default_threads() -> usize {
    crate::sys::affinity::allowed_cpu_count()
        .unwrap_or(1)
        .max(1)
}
