//! Errors of the model layer, each saying what went wrong, where, and what to do.

use std::fmt;
use std::path::PathBuf;

use super::gguf::GgufError;

#[derive(Debug)]
pub enum ModelError {
    Io {
        path: PathBuf,
        what: &'static str,
        err: std::io::Error,
    },
    /// The model path names a directory, a device, a FIFO…: `kind` says which.
    NotAFile {
        path: PathBuf,
        kind: &'static str,
    },
    Gguf {
        path: PathBuf,
        err: GgufError,
    },
    UnknownArchitecture(String),
    /// A tensor the family's forward pass would not read (llama.cpp refuses such files too).
    UnexpectedTensor {
        tensor: String,
        arch: &'static str,
    },
    MissingKey(String),
    BadKey {
        key: String,
        why: String,
    },
    MissingTensor(String),
    BadShape {
        tensor: String,
        expected: Vec<u64>,
        found: Vec<u64>,
    },
    UnsupportedType {
        tensor: String,
        ty: &'static str,
    },
    Tokenizer(String),
    PromptTooLong {
        tokens: usize,
        ctx: usize,
    },
    ContextFull {
        ctx: usize,
    },
    /// A context whose KV cache and scratch overflow the address space (`bytes: None`) or
    /// could not be allocated.
    ContextTooLarge {
        ctx: usize,
        bytes: Option<u64>,
        n_ctx_train: usize,
    },
    /// A KV cache type this model cannot use.
    KvType {
        ty: &'static str,
        why: String,
    },
    /// `quantize` could not plan the tensor types as llama-quantize would (a model shape key
    /// missing, a MoE tensor without a layer number).
    Quantize(String),
    /// Writing a model file failed (or was refused: a device, a FIFO).
    Write(crate::sys::fs::WriteError),
    /// Ctrl-C ended the work.
    Interrupted,
}

impl fmt::Display for ModelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ModelError::Io { path, what, err } => write!(f, "{}: {what}: {err}", path.display()),
            ModelError::NotAFile { path, kind } => write!(
                f,
                "{}: is {kind}, not a model file (give the path of a .gguf file)",
                path.display()
            ),
            ModelError::Gguf { path, err } => write!(f, "{}: {err}", path.display()),
            ModelError::UnknownArchitecture(a) => write!(
                f,
                "model architecture '{a}' is not supported (general.architecture must be one \
                 of: {})",
                super::arch::Arch::names()
            ),
            ModelError::UnexpectedTensor { tensor, arch } => write!(
                f,
                "tensor '{tensor}' is not part of a {arch} model as locus runs it; the file \
                 may be of another variant (llama.cpp refuses such a file too)"
            ),
            ModelError::MissingKey(k) => write!(f, "required metadata key '{k}' is missing"),
            ModelError::BadKey { key, why } => write!(f, "metadata key '{key}' {why}"),
            ModelError::MissingTensor(t) => {
                write!(f, "required tensor '{t}' is missing from the model file")
            }
            ModelError::BadShape { tensor, expected, found } => write!(
                f,
                "tensor '{tensor}' has shape {found:?}, expected {expected:?} from the model's metadata"
            ),
            ModelError::UnsupportedType { tensor, ty } => write!(
                f,
                "tensor '{tensor}' has type {ty}, which locus cannot compute with yet \
                 (supported: {}); requantize the model, e.g. `locus quantize IN OUT Q4_K_M`",
                crate::kernels::GgmlType::supported_names()
            ),
            ModelError::Tokenizer(m) => write!(f, "tokenizer: {m}"),
            ModelError::PromptTooLong { tokens, ctx } => write!(
                f,
                "the prompt is {tokens} tokens long but the context holds {ctx}; shorten the \
                 prompt or raise -c"
            ),
            ModelError::ContextFull { ctx } => {
                write!(f, "the context of {ctx} tokens is full; raise -c to generate more")
            }
            ModelError::ContextTooLarge { ctx, bytes, n_ctx_train } => {
                match bytes {
                    None => write!(
                        f,
                        "-c {ctx}: the KV cache and attention scratch would not fit in this \
                         machine's memory"
                    )?,
                    Some(b) => write!(
                        f,
                        "-c {ctx}: cannot allocate the KV cache and attention scratch ({:.1} GiB): \
                         out of memory (a limit such as ulimit -v or a container's?)",
                        *b as f64 / (1u64 << 30) as f64
                    )?,
                }
                write!(f, "; use a smaller -c (the model was trained with {n_ctx_train})")
            }
            ModelError::KvType { ty, why } => write!(f, "-ctk/-ctv {ty}: the cache {why}"),
            ModelError::Quantize(why) => write!(f, "quantize: {why}"),
            ModelError::Write(e) => write!(f, "{e}"),
            ModelError::Interrupted => write!(f, "interrupted"),
        }
    }
}

impl std::error::Error for ModelError {}
