//! Gemma 3: embeddings scaled by √n_embd; an RMSNorm on every query and key head before RoPE
//! and on the attention and FFN outputs before each residual add (GGUF stores Gemma's norm
//! weights with the +1 already added, so every norm is a plain RMSNorm); NEOX RoPE; GELU-gated
//! FFN; the query scaled by 1/√head_dim before attention (1/√(n_embd/n_head) for the 27B);
//! sliding-window layers (five local to one global by default) with their own RoPE base.

use super::super::config::{opt_f32, opt_u64};
use super::super::error::ModelError;
use super::super::gguf::Gguf;
use super::{FfnAct, Need, Recipe, RopeStyle, Shape, Swa};

const ARCH: &str = "gemma3";
/// Local layers per global one plus one, when the file does not say.
const DEFAULT_SWA_PATTERN: u64 = 6;
/// The local layers' RoPE base when the file does not say (llama.cpp's default).
const DEFAULT_SWA_FREQ_BASE: f32 = 10000.0;
/// The 27B model's layer count: it scales queries by the head width n_embd/n_head instead.
const LAYERS_27B: usize = 62;

/// The layer Gemma 3 and Gemma 4 share: no biases, Q/K head norms, norms after attention and
/// FFN, NEOX RoPE, tanh-GELU, embeddings scaled by `√n_embd`.
pub(super) fn gemma_layer(shape: &Shape) -> Recipe {
    let mut r = Recipe::llama();
    r.tensors.qkv_bias = Need::No;
    r.tensors.out_bias = Need::No;
    r.tensors.qk_norm = Need::Yes;
    r.tensors.post_norms = Need::Yes;
    r.rope = RopeStyle::Neox;
    r.ffn = FfnAct::GeluTanh;
    r.embd_scale = Some((shape.n_embd as f32).sqrt());
    r
}

pub(super) fn recipe(g: &Gguf, shape: &Shape) -> Result<Recipe, ModelError> {
    let k = |s: &str| format!("{ARCH}.{s}");
    let mut r = gemma_layer(shape);
    r.tensors.rope_freqs = Need::No;
    if let Some(cap) = opt_f32(g, &k("final_logit_softcapping"))? {
        if cap != 0.0 {
            return Err(ModelError::BadKey {
                key: k("final_logit_softcapping"),
                why: format!("= {cap}: logit soft-capping is not supported yet"),
            });
        }
    }
    let width = if shape.n_layer == LAYERS_27B {
        let n_head = opt_u64(g, &k("attention.head_count"))?.unwrap_or(1).max(1) as usize;
        shape.n_embd / n_head
    } else {
        shape.head_dim
    };
    r.q_scale = Some(1.0 / (width as f32).sqrt());
    let window = opt_u64(g, &k("attention.sliding_window"))?.unwrap_or(0) as usize;
    if window > 0 {
        let key = k("attention.sliding_window_pattern");
        let local: Vec<bool> = match g.get(&key) {
            Some(v) => match v.as_array() {
                Some(a) => {
                    if a.len() < shape.n_layer {
                        return Err(ModelError::BadKey {
                            key,
                            why: format!("has {} entries for {} layers", a.len(), shape.n_layer),
                        });
                    }
                    (0..shape.n_layer)
                        .map(|i| a.scalar_f64(i).map(|x| x != 0.0))
                        .collect::<Option<_>>()
                        .ok_or_else(|| ModelError::BadKey {
                            key: key.clone(),
                            why: "should be an array of booleans".into(),
                        })?
                }
                None => pattern(opt_u64(g, &key)?.unwrap_or(DEFAULT_SWA_PATTERN), shape),
            },
            None => pattern(DEFAULT_SWA_PATTERN, shape),
        };
        r.swa = Some(Swa {
            window,
            local,
            freq_base: opt_f32(g, &k("rope.freq_base_swa"))?.unwrap_or(DEFAULT_SWA_FREQ_BASE),
            freq_scale: 1.0,
        });
    }
    Ok(r)
}

/// llama.cpp's pattern rule: of every `n` layers the first `n − 1` are local (all, if 0).
fn pattern(n: u64, shape: &Shape) -> Vec<bool> {
    (0..shape.n_layer as u64)
        .map(|il| n == 0 || il % n < n - 1)
        .collect()
}
