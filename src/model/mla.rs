//! Latent attention's sizes, read from a `deepseek2` file's metadata and checked as llama.cpp
//! reads them (`llama_model_deepseek2::load_arch_hparams`).

use super::config::{opt_f32, opt_u64, Mla, Yarn};
use super::error::ModelError;
use super::gguf::Gguf;
use crate::kernels::ops::YarnParams;

/// The latent attention sizes of a file of architecture `arch`, whose generic keys gave
/// `n_head_kv` KV heads of `head_dim` values and `n_rot` rotated values: in the absorbed form
/// (the only one read so far) one "KV head" of `kv_lora_rank + n_rot` values.
pub(super) fn mla_shape(
    g: &Gguf,
    arch: &str,
    (n_head_kv, head_dim, n_rot): (usize, usize, usize),
    (freq_scale, yarn): (f32, Option<&Yarn>),
) -> Result<Mla, ModelError> {
    let k = |s: &str| format!("{arch}.{s}");
    let bad = |key: &str, why: String| ModelError::BadKey { key: k(key), why };
    let req = |key: &str| opt_u64(g, &k(key))?.ok_or_else(|| ModelError::MissingKey(k(key)));
    let kv_lora = req("attention.kv_lora_rank")? as usize;
    // 0 (as DeepSeek-V2-Lite's converter writes it) or absent: a full-rank query.
    let q_lora = match g.get(&k("attention.q_lora_rank")) {
        None => 0,
        Some(v) => match v.as_u64() {
            Some(0) => 0,
            _ => req("attention.q_lora_rank")? as usize,
        },
    };
    let (Some(k_mla), Some(v_mla)) = (
        opt_u64(g, &k("attention.key_length_mla"))?,
        opt_u64(g, &k("attention.value_length_mla"))?,
    ) else {
        return Err(bad(
            "attention.key_length_mla",
            "is missing: this is a file of the older unabsorbed form (one attn_kv_b per \
             layer), which locus does not read yet; convert the model again with a current \
             llama.cpp (convert_hf_to_gguf.py writes attn_k_b and attn_v_b)"
                .into(),
        ));
    };
    let (k_mla, v_head) = (k_mla as usize, v_mla as usize);
    if k_mla <= n_rot {
        return Err(bad(
            "attention.key_length_mla",
            format!("= {k_mla} must exceed the rotated dimensions {n_rot}"),
        ));
    }
    if n_head_kv != 1 {
        return Err(bad(
            "attention.head_count_kv",
            format!("= {n_head_kv}: latent attention keeps one shared latent head (1)"),
        ));
    }
    if head_dim != kv_lora + n_rot {
        return Err(bad(
            "attention.key_length",
            format!("= {head_dim} must be kv_lora_rank + rope dimensions = {kv_lora} + {n_rot}"),
        ));
    }
    if let Some(v) = opt_u64(g, &k("attention.value_length"))? {
        if v as usize != kv_lora {
            return Err(bad(
                "attention.value_length",
                format!("= {v} must equal kv_lora_rank {kv_lora}"),
            ));
        }
    }
    // The softmax's scale, pre-multiplied by YaRN's attention factor as llama.cpp's deepseek2
    // graph does (libllama's arithmetic: nothing fused): the context's factor with its YaRN
    // adjustment cancelled, times the log multiplier's term, squared.
    let kq_scale = match yarn {
        None => 1.0 / (k_mla as f32).sqrt(),
        Some(y) => {
            let l = (1.0 / freq_scale).ln();
            let org = (1.0 + 0.1 * l) * y.rope.attn_factor;
            let mscale = org * (1.0 + 0.1 * y.log_mul * l);
            1.0 * mscale * mscale / (k_mla as f32).sqrt()
        }
    };
    Ok(Mla {
        q_lora,
        kv_lora,
        nope: k_mla - n_rot,
        rope: n_rot,
        v_head,
        kq_scale,
    })
}

/// YaRN of a `deepseek2` file whose RoPE scales positions by `freq_scale` (1/factor), as
/// llama.cpp's context sets it up: extrapolation factor 1, ggml's default correction betas
/// (32, 1), the original context (`rope.scaling.original_context_length`, else the training
/// context), and the attention factor (`llama_context`'s: DeepSeek's `mscale` rule, the
/// `1/(1 + 0.1·ln factor)` that cancels ggml's own magnitude term, `rope.scaling.attn_factor`),
/// with libllama's arithmetic (nothing fused).
pub(super) fn yarn(
    g: &Gguf,
    arch: &str,
    freq_scale: f32,
    n_ctx_train: usize,
) -> Result<Yarn, ModelError> {
    let k = |s: &str| format!("{arch}.{s}");
    // The converter stores 0.1 × mscale_all_dim; llama.cpp divides it back out.
    let log_mul = opt_f32(g, &k("rope.scaling.yarn_log_multiplier"))?.map_or(0.0, |m| m / 0.1);
    let n_ctx_orig =
        opt_u64(g, &k("rope.scaling.original_context_length"))?.map_or(n_ctx_train, |n| n as usize);
    let factor = 1.0 / freq_scale;
    let get_mscale = |scale: f32, m: f32| match scale <= 1.0 {
        true => 1.0,
        false => 0.1 * m * scale.ln() + 1.0,
    };
    let mut attn = if log_mul != 0.0 {
        let all_dims = log_mul;
        let mscale = if all_dims != 1.0 { all_dims } else { 1.0 };
        get_mscale(factor, mscale) / get_mscale(factor, all_dims)
    } else {
        get_mscale(factor, 1.0)
    };
    attn *= 1.0 / (1.0 + 0.1 * factor.ln());
    attn *= opt_f32(g, &k("rope.scaling.attn_factor"))?.unwrap_or(1.0);
    Ok(Yarn {
        rope: YarnParams {
            ext_factor: 1.0,
            attn_factor: attn,
            beta_fast: 32.0,
            beta_slow: 1.0,
            n_ctx_orig,
        },
        log_mul,
    })
}
