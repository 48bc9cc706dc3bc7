//! How many tokens a sequence's context holds: `-c` as llama.cpp reads it, bounded by what the
//! model was trained with unless asked for more.

use super::LoadedModel;

/// The context when `-c` is not given (llama.cpp's default), unless the model was trained
/// with less.
pub const DEFAULT_CTX: usize = 4096;

/// The context size a sequence uses for `-c ctx`: `None` = [`DEFAULT_CTX`] or the training
/// context where that is smaller; `Some(0)` = the training context; more than the training
/// context is allowed ([`warn_beyond_training`] says so).
pub fn context_size(l: &LoadedModel, ctx: Option<usize>) -> usize {
    let train = l.model.config.n_ctx_train;
    match ctx {
        None if train > 0 => DEFAULT_CTX.min(train),
        None => DEFAULT_CTX,
        Some(0) => train.max(1),
        Some(c) => c,
    }
}

/// A warning where the context exceeds the training context (allowed, as llama.cpp allows it).
pub fn warn_beyond_training(l: &LoadedModel, n_ctx: usize) {
    let train = l.model.config.n_ctx_train;
    if train > 0 && n_ctx > train {
        crate::diagln!(
            "locus: warning: -c {n_ctx} is more than the model's training context ({train}); \
             output quality may fall beyond it"
        );
    }
}
