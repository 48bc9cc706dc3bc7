//! The runtime every command that runs a model shares (`run`, `perplexity`, `bench`, `audit`,
//! `serve`): place the file's weights, load the model over them, start the pinned pool, size
//! the context and place each sequence's KV cache. The command layer (`app`, `cli`) only
//! parses, calls in and prints; `serve` loads through here, not through it.
//!
//! The order is always the same: [`place`] (the copies per node, built before anything reads
//! them), [`LoadedModel::load_placed`] (weights bound to those copies, the file's pages handed
//! back), [`pool_of`] (threads pinned as the plan groups them), then per sequence
//! [`context_size`] and [`place_cache`].

mod context;

pub use context::{context_size, warn_beyond_training, DEFAULT_CTX};

use std::fmt;
use std::io::IsTerminal;
use std::time::Instant;

use crate::kernels::{self, KernelError, Kernels, StreamTarget};
use crate::model::forward::Model;
use crate::model::tokenizer::Tokenizer;
use crate::model::weights::Weights;
use crate::model::{Config, ModelError, ModelFile};
use crate::placement::{Placement, PlacementError};
use crate::pool::{Pool, SpawnError};

/// Why a model could not be placed, loaded or given its threads.
#[derive(Debug)]
pub enum RuntimeError {
    Model(ModelError),
    Kernels(KernelError),
    Placement(PlacementError),
    /// A worker thread could not be started.
    Threads(SpawnError),
    /// `LOCUS_PREFETCH` holds something other than `l1` or `l2`.
    BadPrefetch(String),
}

impl fmt::Display for RuntimeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RuntimeError::Model(e) => write!(f, "{e}"),
            RuntimeError::Kernels(e) => write!(f, "{e}"),
            RuntimeError::Placement(e) => write!(f, "{e}"),
            RuntimeError::Threads(e) => write!(f, "{e}"),
            RuntimeError::BadPrefetch(s) => write!(
                f,
                "{}={s:?} is not a prefetch target; use l1 or l2",
                kernels::PREFETCH_ENV
            ),
        }
    }
}

impl std::error::Error for RuntimeError {}

impl From<ModelError> for RuntimeError {
    fn from(e: ModelError) -> Self {
        RuntimeError::Model(e)
    }
}

impl From<KernelError> for RuntimeError {
    fn from(e: KernelError) -> Self {
        RuntimeError::Kernels(e)
    }
}

impl From<PlacementError> for RuntimeError {
    fn from(e: PlacementError) -> Self {
        RuntimeError::Placement(e)
    }
}

/// A model loaded and ready: weights borrowed from the mapped file (or from a placement's
/// copies of it), its tokenizer, and how long loading took.
pub struct LoadedModel<'a> {
    pub model: Model<'a>,
    pub tokenizer: Tokenizer,
    pub load_ms: f64,
}

impl<'a> LoadedModel<'a> {
    /// Loads with the weights read straight from the file's mapping (no placement).
    pub fn load(file: &'a ModelFile, started: Instant) -> Result<LoadedModel<'a>, RuntimeError> {
        LoadedModel::load_inner(file, None, started)
    }

    /// Loads with the weights read from `placement`'s copies (built beforehand).
    pub fn load_placed(
        file: &'a ModelFile,
        placement: &'a Placement,
        started: Instant,
    ) -> Result<LoadedModel<'a>, RuntimeError> {
        LoadedModel::load_inner(file, Some(placement), started)
    }

    fn load_inner(
        file: &'a ModelFile,
        placement: Option<&'a Placement>,
        started: Instant,
    ) -> Result<LoadedModel<'a>, RuntimeError> {
        let g = file.gguf()?;
        let config = Config::from_gguf(&g)?;
        let mut weights = Weights::from_gguf(&g, &config)?;
        if let Some(p) = placement {
            p.bind(&mut weights);
        }
        let tokenizer = Tokenizer::from_gguf(&g)?;
        if tokenizer.n_vocab() != config.n_vocab {
            return Err(RuntimeError::Model(ModelError::BadKey {
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
        let model = Model::new(config, weights, kernels);
        if let Some(p) = placement {
            if let Err(w) = p.release_file_pages(file) {
                crate::diagln!("locus: warning: {w}");
            }
        }
        Ok(LoadedModel {
            model,
            tokenizer,
            load_ms: started.elapsed().as_secs_f64() * 1e3,
        })
    }
}

/// Where the kernels should prefetch for these weights: into L2 when the matrices read each
/// token outgrow the last-level cache (they stream from memory), else into L1; `LOCUS_PREFETCH`
/// overrides.
fn stream_target_for(w: &Weights) -> Result<StreamTarget, RuntimeError> {
    if let Ok(s) = std::env::var(kernels::PREFETCH_ENV) {
        return StreamTarget::parse(&s).ok_or(RuntimeError::BadPrefetch(s));
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
) -> Result<Placement, RuntimeError> {
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

/// Prepares a sequence cache's blocks (each with the pool group whose threads write it, as
/// [`crate::model::forward::State::kv_head_blocks`] gives them) for placement on that group's
/// node by first touch, and returns the regions for [`crate::placement::cache::audit`].
pub fn place_cache(
    p: &Placement,
    blocks: Vec<(&[u8], usize)>,
) -> Vec<crate::placement::cache::CacheRegion> {
    let nodes: Vec<_> = p.plan.slots.iter().map(|s| s.node).collect();
    let blocks: Vec<_> = blocks
        .into_iter()
        .map(|(b, g)| (b, nodes.get(g).copied().flatten()))
        .collect();
    let several_nodes = p.topo.nodes.len() > 1;
    let (regions, refused) = crate::placement::cache::place(&blocks, several_nodes);
    if let (Some(e), true) = (refused, nodes.iter().flatten().count() > 1) {
        crate::diagln!("locus: warning: transparent huge pages cannot be turned off for the KV cache ({e}); a huge page may hold heads of other nodes");
    }
    regions
}

/// The placement's pinned pool; pinning failures go to stderr, a thread that cannot be
/// started is an error.
pub fn pool_of(p: &Placement) -> Result<Pool, RuntimeError> {
    let (pool, warnings) = p.pool().map_err(RuntimeError::Threads)?;
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
