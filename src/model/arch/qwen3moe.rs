//! Qwen3-MoE: Qwen3's attention (per-head Q/K norms, NEOX RoPE, its own head size) with every
//! layer's FFN a mixture of experts (`Config::moe`: softmax router, top-k, weights renormalised
//! to sum to one, SwiGLU experts in 3-D tensors).

use super::Recipe;

pub(super) fn recipe() -> Recipe {
    super::qwen3::recipe()
}
