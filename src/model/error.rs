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
    NotAFile(PathBuf),
    Gguf {
        path: PathBuf,
        err: GgufError,
    },
    UnknownArchitecture(String),
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
}

impl fmt::Display for ModelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ModelError::Io { path, what, err } => write!(f, "{}: {what}: {err}", path.display()),
            ModelError::NotAFile(p) => write!(f, "{}: is a directory, not a model file", p.display()),
            ModelError::Gguf { path, err } => write!(f, "{}: {err}", path.display()),
            ModelError::UnknownArchitecture(a) => write!(
                f,
                "model architecture '{a}' is not supported (locus runs llama-family models: \
                 general.architecture = llama)"
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
                 (supported: F32, F16, BF16, Q4_0, Q4_1, Q8_0); requantize the model, e.g. \
                 `locus quantize IN OUT Q8_0`"
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
        }
    }
}

impl std::error::Error for ModelError {}
