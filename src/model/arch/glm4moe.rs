//! GLM-4.5 / 4.6 (`glm4moe`): llama's attention with Q/K/V biases, per-head Q/K norms where
//! the file has them (the 355B model), NEOX RoPE over the first `rope.dimension_count`
//! dimensions of each head (half of them in the released models); the FFN's input normed by
//! `post_attention_norm` (the name llama.cpp's graph gives the pre-FFN norm); the first
//! `leading_dense_block_count` layers a dense FFN, the rest a mixture of experts with sigmoid
//! gating, a selection bias (`exp_probs_b`), normalised and scaled weights, and a shared expert
//! added to the routed ones. Its NextN (multi-token prediction) layers are loaded past.

use super::super::error::ModelError;
use super::super::gguf::Gguf;
use super::{ExpertWidth, Gating, Need, Recipe, RopeStyle, Routing};

const ARCH: &str = "glm4moe";

pub(super) fn recipe(g: &Gguf) -> Result<Recipe, ModelError> {
    let mut r = Recipe::llama();
    r.tensors.qkv_bias = Need::Optional;
    r.tensors.out_bias = Need::No;
    r.tensors.qk_norm = Need::Optional;
    r.tensors.rope_freqs = Need::No;
    r.tensors.ffn_norm = "post_attention_norm.weight";
    r.rope = RopeStyle::Neox;
    // Multimodal RoPE sections make llama.cpp rotate by sections (M-RoPE), which is not here.
    let sections = format!("{ARCH}.rope.dimension_sections");
    if let Some(v) = g.get(&sections) {
        let used = match v.as_array() {
            Some(a) => (0..a.len()).any(|i| a.scalar_f64(i).is_some_and(|x| x != 0.0)),
            None => v.as_u64().is_some_and(|x| x != 0),
        };
        if used {
            return Err(ModelError::BadKey {
                key: sections,
                why: "asks for multimodal RoPE sections, which are not supported".into(),
            });
        }
    }
    r.moe.layers = Need::Yes;
    r.moe.width = ExpertWidth::ExpertKey;
    // llama.cpp's GLM-4.5 loader: sigmoid unless the file names a gating function.
    r.moe.routing = Routing::read_keys(g, ARCH, Gating::Sigmoid)?;
    r.moe.probs_bias = Need::Yes;
    r.moe.shared = Need::Yes;
    r.moe.dense_lead = true;
    Ok(r)
}
