//! Qwen2 / Qwen2.5: llama's layer with biases on the Q, K and V projections (optional in the
//! file, as llama.cpp loads them, and present in every released model), NEOX RoPE, no output
//! bias and no RoPE frequency tensor.

use super::{Need, Recipe, RopeStyle};

pub(super) fn recipe() -> Recipe {
    let mut r = Recipe::llama();
    r.tensors.out_bias = Need::No;
    r.tensors.rope_freqs = Need::No;
    r.rope = RopeStyle::Neox;
    r
}
