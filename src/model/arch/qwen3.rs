//! Qwen3: llama's layer with an RMSNorm on every query and key head before RoPE (weights of
//! `attention.key_length` values), NEOX RoPE, and a head size of its own (the config reads
//! `attention.key_length`, so `n_head × head_dim` may differ from `n_embd`).

use super::{Need, Recipe, RopeStyle};

pub(super) fn recipe() -> Recipe {
    let mut r = Recipe::llama();
    r.tensors.qk_norm = Need::Yes;
    r.tensors.out_bias = Need::No;
    r.tensors.rope_freqs = Need::No;
    r.rope = RopeStyle::Neox;
    r
}
