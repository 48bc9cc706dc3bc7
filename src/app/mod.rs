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
use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::kernels::{self, KernelError, Kernels, StreamTarget};
use crate::model::llama::Llama;
use crate::model::tokenizer::Tokenizer;
use crate::model::weights::LlamaWeights;
use crate::model::{LlamaConfig, ModelError, ModelFile};
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
}

impl fmt::Display for AppError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AppError::Model(e) => write!(f, "{e}"),
            AppError::Kernels(e) => write!(f, "{e}"),
            AppError::Io { path, what, err } => write!(f, "{}: {what}: {err}", path.display()),
            AppError::Usage(m) => write!(f, "{m}"),
            AppError::Placement(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for AppError {}

impl From<ModelError> for AppError {
    fn from(e: ModelError) -> Self {
        AppError::Model(e)
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

/// Reads a text file named on the command line.
pub fn read_text(path: &Path) -> Result<String, AppError> {
    let bytes = std::fs::read(path).map_err(|err| AppError::Io {
        path: path.to_path_buf(),
        what: "cannot read the file",
        err,
    })?;
    String::from_utf8(bytes).map_err(|e| {
        AppError::Usage(format!(
            "{}: not valid UTF-8 text (first bad byte at offset {})",
            path.display(),
            e.utf8_error().valid_up_to()
        ))
    })
}

/// A model loaded and ready: weights borrowed from the mapped file, plus its tokenizer.
pub struct Loaded<'a> {
    pub llama: Llama<'a>,
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
        let config = LlamaConfig::from_gguf(&g)?;
        let mut weights = LlamaWeights::from_gguf(&g, &config)?;
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
        let llama = Llama::new(config, weights, kernels);
        if let Some(p) = placement {
            if let Err(w) = p.release_file_pages(file) {
                eprintln!("locus: warning: {w}");
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
fn stream_target_for(w: &LlamaWeights) -> Result<StreamTarget, AppError> {
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
        .map(|m| m.file.data.len() as u64)
        .sum();
    Ok(StreamTarget::for_weights(
        bytes,
        crate::sys::cache::last_level_bytes(0),
    ))
}

/// Detects the host and places `file`'s weights for `opts`, printing every warning and
/// fallback to stderr (never silently), and the plan's summary with `verbose`.
pub fn place(
    file: &ModelFile,
    opts: &crate::placement::Options,
    verbose: bool,
) -> Result<Placement, AppError> {
    let p = Placement::build(file, opts)?;
    for w in &p.warnings {
        eprintln!("locus: warning: {w}");
    }
    if verbose {
        for n in &p.plan.notes {
            eprintln!("locus: {n}");
        }
        eprintln!("locus: numa: {}", p.summary());
    }
    Ok(p)
}

/// The placement's pinned pool; pinning failures go to stderr.
pub fn pool_of(p: &Placement) -> crate::pool::Pool {
    let (pool, warnings) = p.pool();
    for w in warnings {
        eprintln!("locus: warning: {w}");
    }
    pool
}

/// The CPUs this process may run on (sched_getaffinity), at least 1.
pub fn default_threads() -> usize {
    crate::sys::affinity::allowed_cpu_count()
        .unwrap_or(1)
        .max(1)
}
