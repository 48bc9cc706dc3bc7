//! gpt-oss (llama.cpp's `openai-moe`): NEOX RoPE with YaRN on every layer; attention sinks (a
//! learned logit per head, joined to each softmax); biases on the Q, K, V and output
//! projections; every other layer attends only within a sliding window (layers 0, 2, 4, …:
//! llama.cpp's pattern of 2), with the full layers' RoPE; the FFN's input norm is
//! `post_attention_norm`; every layer is a mixture of experts whose router and expert
//! projections carry biases, whose top-k is chosen on the raw logits and weighted by the softmax
//! of the chosen ones, and whose experts use ggml's `swiglu_oai` (alpha 1.702, limit 7). The
//! last layer's FFN runs for every token (the graph picks the rows with logits after it).

use super::super::config::{opt_f32, opt_u64, Yarn};
use super::super::error::ModelError;
use super::super::gguf::Gguf;
use super::{ExpertAct, ExpertWidth, Gating, Need, Recipe, RopeStyle, Routing, Shape, Swa};
use crate::kernels::ops::YarnParams;

const ARCH: &str = "gpt-oss";
/// llama.cpp's pattern for gpt-oss when the file gives none: of every 2 layers the first is
/// local.
const SWA_PATTERN: u64 = 2;
/// `build_moe_ffn`'s constants for `LLM_FFN_SWIGLU_OAI_MOE`.
const SWIGLU_OAI_ALPHA: f32 = 1.702;
const SWIGLU_OAI_LIMIT: f32 = 7.0;
/// ggml's default YaRN correction range (`yarn_beta_fast`, `yarn_beta_slow`), which
/// llama.cpp does not read from gpt-oss files.
const YARN_BETA_FAST: f32 = 32.0;
const YARN_BETA_SLOW: f32 = 1.0;
/// llama.cpp's RoPE base where the file gives none.
const DEFAULT_FREQ_BASE: f32 = 10000.0;

pub(super) fn recipe(g: &Gguf, shape: &Shape) -> Result<Recipe, ModelError> {
    let k = |s: &str| format!("{ARCH}.{s}");
    let mut r = Recipe::llama();
    r.tensors.qkv_bias = Need::Optional;
    r.tensors.out_bias = Need::Yes;
    r.tensors.rope_freqs = Need::No;
    r.tensors.sinks = Need::Yes;
    r.tensors.ffn_norm = "post_attention_norm.weight";
    r.rope = RopeStyle::Neox;
    r.moe.layers = Need::Yes;
    r.moe.width = ExpertWidth::ExpertKey;
    r.moe.routing = Routing::new(Gating::SoftmaxWeight, false);
    r.moe.biases = Need::Yes;
    r.moe.act = ExpertAct::SwigluOai {
        alpha: SWIGLU_OAI_ALPHA,
        limit: SWIGLU_OAI_LIMIT,
    };
    r.full_last_layer = true;
    // llama.cpp requires the window (`get_key` without a default).
    let wkey = k("attention.sliding_window");
    let window = match g.get(&wkey).map(|v| v.as_u64()) {
        None => return Err(ModelError::MissingKey(wkey)),
        Some(Some(0)) => {
            return Err(ModelError::BadKey {
                key: wkey,
                why: "= 0: gpt-oss's local layers need a window of at least one token".into(),
            })
        }
        Some(_) => opt_u64(g, &wkey)?.unwrap_or(0),
    };
    let pkey = k("attention.sliding_window_pattern");
    if g.get(&pkey).and_then(|v| v.as_array()).is_some() {
        return Err(ModelError::BadKey {
            key: pkey,
            why: "as a per-layer array is not supported for gpt-oss; give a number".into(),
        });
    }
    let n = opt_u64(g, &pkey)?.unwrap_or(SWA_PATTERN);
    let base = opt_f32(g, &k("rope.freq_base"))?.unwrap_or(DEFAULT_FREQ_BASE);
    r.swa = Some(Swa {
        window: window as usize,
        local: (0..shape.n_layer as u64)
            .map(|il| n == 0 || il % n < n - 1)
            .collect(),
        // The local layers' RoPE is the full layers' (llama.cpp copies base and scale), but
        // for `rope.freq_base_swa` where the file gives one; the scale is set by the config.
        freq_base: opt_f32(g, &k("rope.freq_base_swa"))?.unwrap_or(base),
        freq_scale: 1.0,
    });
    Ok(r)
}

/// YaRN as llama.cpp's context sets it up for a gpt-oss file whose RoPE scales positions by
/// `freq_scale` (1/factor): extrapolation factor 1, ggml's default betas, the original context
/// (`rope.scaling.original_context_length`, else the training context), and the attention
/// factor `get_mscale(factor, 1)` times the `1/(1 + 0.1·ln factor)` that cancels ggml's own
/// magnitude term, times `rope.scaling.attn_factor` (no log multiplier: llama.cpp reads it
/// for deepseek2 only). libllama's arithmetic, nothing fused.
pub(crate) fn yarn(g: &Gguf, freq_scale: f32, n_ctx_train: usize) -> Result<Yarn, ModelError> {
    let k = |s: &str| format!("{ARCH}.{s}");
    let n_ctx_orig =
        opt_u64(g, &k("rope.scaling.original_context_length"))?.map_or(n_ctx_train, |n| n as usize);
    let factor = 1.0 / freq_scale;
    let mut attn = if factor <= 1.0 {
        1.0
    } else {
        0.1 * 1.0 * factor.ln() + 1.0
    };
    attn *= 1.0 / (1.0 + 0.1 * factor.ln());
    attn *= opt_f32(g, &k("rope.scaling.attn_factor"))?.unwrap_or(1.0);
    Ok(Yarn {
        rope: YarnParams {
            ext_factor: 1.0,
            attn_factor: attn,
            beta_fast: YARN_BETA_FAST,
            beta_slow: YARN_BETA_SLOW,
            n_ctx_orig,
        },
        log_mul: 0.0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::GgmlType;
    use crate::model::config::Config;
    use crate::model::gguf_write::MetaValue;
    use crate::model::synth::{synth_model, SynthMla, SynthSpec};

    fn spec() -> SynthSpec {
        SynthSpec {
            arch: super::super::Arch::GptOss,
            n_layer: 4,
            n_expert: 4,
            n_expert_used: 2,
            n_ff_exp: 64,
            sliding_window: 8,
            n_ctx_train: 4096,
            mla: SynthMla {
                yarn_factor: 32.0,
                ..SynthMla::default()
            },
            ..SynthSpec::tiny(GgmlType::F32)
        }
    }

    fn config(w: &crate::model::gguf_write::GgufWriter) -> Config {
        let bytes = w.to_bytes();
        Config::from_gguf(&Gguf::parse(&bytes).unwrap()).unwrap()
    }

    #[test]
    fn the_recipe_is_llama_cpp_s_openai_moe() {
        let c = config(&synth_model(&spec()));
        let r = &c.recipe;
        assert_eq!(
            (r.tensors.sinks, r.tensors.out_bias),
            (Need::Yes, Need::Yes)
        );
        assert_eq!(r.tensors.ffn_norm, "post_attention_norm.weight");
        assert_eq!(r.rope, RopeStyle::Neox);
        assert!(r.full_last_layer);
        let moe = c.moe.expect("experts in every layer");
        assert_eq!(moe.routing.gating, Gating::SoftmaxWeight);
        assert!(!moe.routing.norm_weights);
        assert_eq!(r.moe.biases, Need::Yes);
        assert_eq!(
            r.moe.act,
            ExpertAct::SwigluOai {
                alpha: 1.702,
                limit: 7.0
            }
        );
        // Layers 0 and 2 local, with the full layers' YaRN scale.
        let swa = r.swa.clone().unwrap();
        assert_eq!(
            (swa.window, &swa.local[..]),
            (8, &[true, false, true, false][..])
        );
        assert_eq!(
            (swa.freq_scale, c.rope_freq_scale),
            (1.0 / 32.0, 1.0 / 32.0)
        );
        assert_eq!(swa.freq_base, c.rope_freq_base);
        // YaRN: the original context 4096 / 32, ggml's betas, and llama_context's attention
        // factor: get_mscale(32, 1) · 1/(1 + 0.1 ln 32), each step rounded to f32.
        let y = c.yarn.expect("YaRN");
        assert_eq!(y.rope.n_ctx_orig, 128);
        assert_eq!(
            (y.rope.ext_factor, y.rope.beta_fast, y.rope.beta_slow),
            (1.0, 32.0, 1.0)
        );
        let l = 32f32.ln();
        let mscale = 0.1 * 1.0 * l + 1.0;
        assert_eq!(y.rope.attn_factor, mscale * (1.0 / (1.0 + 0.1 * l)));
        assert_eq!(y.log_mul, 0.0);
    }

    #[test]
    fn a_pattern_key_and_a_local_base_are_read() {
        let mut w = synth_model(&spec());
        w.set(
            "gpt-oss.attention.sliding_window_pattern",
            MetaValue::U32(3),
        );
        w.set("gpt-oss.rope.freq_base_swa", MetaValue::F32(1000.0));
        let c = config(&w);
        let swa = c.recipe.swa.unwrap();
        assert_eq!(swa.local, [true, true, false, true]);
        assert_eq!(swa.freq_base, 1000.0);
    }
}
