//! DeepSeek-V2/V3 (and Kimi-K2, which GGUF files also call `deepseek2`): multi-head latent
//! attention in the absorbed form current GGUFs carry (`attn_k_b`/`attn_v_b`): the query
//! through `attn_q` or the low-rank `attn_q_a` → RMSNorm → `attn_q_b`; one compressed latent
//! vector (`attn_kv_a_mqa`, then `attn_kv_a_norm`) and one rotated key per token in the cache,
//! read by every head; each head's query absorbs `attn_k_b` and its output is decompressed
//! by `attn_v_b`. RoPE pairs `(2i, 2i+1)` on the last `rope.dimension_count` values of a
//! head. No biases, no per-head norms.
//!
//! The FFN: the first `leading_dense_block_count` layers dense, the rest a mixture of experts
//! with shared experts beside the routed ones: softmax gating (V2) or sigmoid with a selection
//! bias (`exp_probs_b`, V3), group-limited top-k, normalised and scaled weights, as the file's
//! keys say.

use super::super::error::ModelError;
use super::super::gguf::Gguf;
use super::{AttentionKind, ExpertWidth, Gating, Need, Recipe, Routing};

const ARCH: &str = "deepseek2";

/// GLM-4.7-Lite's shape (layers, vocabulary), which llama.cpp gives sigmoid gating when the
/// file names none (every other deepseek2 file without the key is DeepSeek-V2's softmax).
const GLM47_LITE_LAYERS: [usize; 2] = [47, 48];
const GLM47_LITE_VOCAB: usize = 154_880;

pub(super) fn recipe(g: &Gguf, n_layer: usize) -> Result<Recipe, ModelError> {
    let mut r = Recipe::llama();
    r.attention = AttentionKind::Latent;
    r.tensors.qkv_bias = Need::No;
    r.tensors.out_bias = Need::No;
    r.tensors.rope_freqs = Need::No;
    // Experts where the file declares them (a file of dense layers only has none).
    r.moe.layers = Need::Optional;
    r.moe.width = ExpertWidth::ExpertKey;
    let vocab = g
        .get("tokenizer.ggml.tokens")
        .and_then(|v| v.as_array())
        .map_or(0, |a| a.len());
    let default = match GLM47_LITE_LAYERS.contains(&n_layer) && vocab == GLM47_LITE_VOCAB {
        true => Gating::Sigmoid,
        false => Gating::Softmax,
    };
    r.moe.routing = Routing::read_keys(g, ARCH, default)?;
    r.moe.probs_bias = Need::Optional;
    r.moe.shared = Need::Yes;
    r.moe.dense_lead = true;
    Ok(r)
}
