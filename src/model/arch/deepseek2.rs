//! DeepSeek-V2/V3 (and Kimi-K2, which GGUF files also call `deepseek2`): multi-head latent
//! attention in the absorbed form current GGUFs carry (`attn_k_b`/`attn_v_b`): the query
//! through `attn_q` or the low-rank `attn_q_a` → RMSNorm → `attn_q_b`; one compressed latent
//! vector (`attn_kv_a_mqa`, then `attn_kv_a_norm`) and one rotated key per token in the cache,
//! read by every head; each head's query absorbs `attn_k_b` and its output is decompressed
//! by `attn_v_b`. RoPE pairs `(2i, 2i+1)` on the last `rope.dimension_count` values of a
//! head. No biases, no per-head norms.

use super::{AttentionKind, Need, Recipe};

pub(super) fn recipe() -> Recipe {
    let mut r = Recipe::llama();
    r.attention = AttentionKind::Latent;
    r.tensors.qkv_bias = Need::No;
    r.tensors.out_bias = Need::No;
    r.tensors.rope_freqs = Need::No;
    r
}
