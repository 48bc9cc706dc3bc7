//! Qwen3-MoE: Qwen3's attention (per-head Q/K norms, NEOX RoPE, its own head size) with every
//! layer's FFN a mixture of experts of their own width (softmax router, top-k, weights
//! renormalised to sum to one, SwiGLU experts in 3-D tensors).

use super::{ExpertWidth, Gating, Need, Recipe, Routing};

pub(super) fn recipe() -> Recipe {
    let mut r = super::qwen3::recipe();
    r.moe.layers = Need::Yes;
    r.moe.width = ExpertWidth::ExpertKey;
    r.moe.routing = Routing::new(Gating::Softmax, true);
    r
}
