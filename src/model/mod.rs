//! Models: GGUF files, weights by name, the llama forward pass, tokenizer, sampler, chat.

pub mod arch;
pub mod chat;
pub mod config;
pub mod error;
pub mod forward;
pub mod generation;
pub mod gguf;
pub mod gguf_write;
pub mod harmony;
pub mod imatrix;
pub mod imatrix_collect;
pub mod kv;
mod mla;
mod moe;
pub mod quant_mix;
pub mod quantize;
pub mod sampler;
mod swa;
pub mod synth;
mod synth_gemma4;
pub mod tensor_regex;
pub mod tokenizer;
pub mod weights;

use std::fs::File;
use std::path::{Path, PathBuf};

use memmap2::Mmap;

pub use config::Config;
pub use error::ModelError;
pub use gguf::Gguf;

/// A model file opened read-only and mapped into memory. Parsed views borrow from it.
pub struct ModelFile {
    pub path: PathBuf,
    /// Kept open for `posix_fadvise` (placement releases the file's page cache).
    file: File,
    map: Mmap,
}

impl ModelFile {
    /// Opens and maps `path` read-only. The file is never written.
    pub fn open(path: &Path) -> Result<ModelFile, ModelError> {
        // Looked at before opening: opening a FIFO would wait for a writer, and a device
        // (`/dev/zero`) is no model however it reads.
        if let Ok(meta) = std::fs::metadata(path) {
            let kind = crate::sys::fs::FileKind::of(&meta);
            if kind != crate::sys::fs::FileKind::Regular {
                return Err(ModelError::NotAFile {
                    path: path.to_path_buf(),
                    kind: kind.describe(),
                });
            }
        }
        let file = File::open(path).map_err(|e| ModelError::Io {
            path: path.to_path_buf(),
            what: "cannot open the model file",
            err: e,
        })?;
        let meta = file.metadata().map_err(|e| ModelError::Io {
            path: path.to_path_buf(),
            what: "cannot read the model file's size",
            err: e,
        })?;
        if meta.len() == 0 {
            return Err(ModelError::Gguf {
                path: path.to_path_buf(),
                err: gguf::GgufError {
                    kind: gguf::GgufErrorKind::Truncated { need: 4, have: 0 },
                    field: "magic".into(),
                    offset: 0,
                },
            });
        }
        // SAFETY: the mapping is read-only and private. Another process truncating the file
        // while it is mapped would make reads fault (SIGBUS); that is the documented hazard of
        // every mmap-based loader, and placement copies the weights out of the map early.
        let map = unsafe { Mmap::map(&file) }.map_err(|e| ModelError::Io {
            path: path.to_path_buf(),
            what: "cannot map the model file",
            err: e,
        })?;
        Ok(ModelFile {
            path: path.to_path_buf(),
            file,
            map,
        })
    }

    /// The open file's descriptor (read-only).
    pub fn fd(&self) -> std::os::fd::RawFd {
        use std::os::fd::AsRawFd;
        self.file.as_raw_fd()
    }

    pub fn bytes(&self) -> &[u8] {
        &self.map
    }

    /// Parses the GGUF structure of the mapped bytes.
    pub fn gguf(&self) -> Result<Gguf<'_>, ModelError> {
        Gguf::parse(&self.map).map_err(|err| ModelError::Gguf {
            path: self.path.clone(),
            err,
        })
    }
}
