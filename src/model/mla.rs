//! Latent attention's sizes, read from a `deepseek2` file's metadata and checked as llama.cpp
//! reads them (`llama_model_deepseek2::load_arch_hparams`).

use super::config::{opt_f32, opt_u64, Mla, Yarn};
use super::error::ModelError;
use super::gguf::Gguf;
use crate::kernels::ops::YarnParams;

/// The latent attention sizes of a file of architecture `arch`, whose generic keys gave
/// `n_head` query heads, `n_head_kv` KV heads of `head_dim` values and `n_rot` rotated values:
/// in the absorbed form one "KV head" of `kv_lora_rank + n_rot` values; in the older
/// unabsorbed form (no `key_length_mla`) a KV head per query head, keys of `head_dim` values
/// and values of `value_length`.
pub(super) fn mla_shape(
    g: &Gguf,
    arch: &str,
    (n_head, n_head_kv, head_dim, n_rot): (usize, usize, usize, usize),
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
    let (k_mla, v_mla) = (
        opt_u64(g, &k("attention.key_length_mla"))?,
        opt_u64(g, &k("attention.value_length_mla"))?,
    );
    let (k_mla, v_head, joint) = match (k_mla, v_mla) {
        (Some(kk), Some(v)) => (kk as usize, v as usize, false),
        (None, None) => {
            // The unabsorbed form: per-head keys of `key_length`, values of `value_length`.
            let v = req("attention.value_length")? as usize;
            if n_head_kv != n_head {
                return Err(bad(
                    "attention.head_count_kv",
                    format!(
                        "= {n_head_kv}: a file without attention.key_length_mla (one attn_kv_b \
                         a layer) keeps a key and value head per query head ({n_head})"
                    ),
                ));
            }
            (head_dim, v, true)
        }
        (Some(_), None) | (None, Some(_)) => {
            let (has, lacks) = match k_mla {
                Some(_) => ("key_length_mla", "value_length_mla"),
                None => ("value_length_mla", "key_length_mla"),
            };
            return Err(bad(
                &format!("attention.{lacks}"),
                format!("is missing where attention.{has} is given (both or neither)"),
            ));
        }
    };
    if k_mla <= n_rot {
        return Err(bad(
            "attention.key_length_mla",
            format!("= {k_mla} must exceed the rotated dimensions {n_rot}"),
        ));
    }
    if joint {
        if v_head == 0 {
            return Err(bad(
                "attention.value_length",
                "= 0: a head needs values".into(),
            ));
        }
    } else if n_head_kv != 1 {
        return Err(bad(
            "attention.head_count_kv",
            format!("= {n_head_kv}: latent attention keeps one shared latent head (1)"),
        ));
    }
    if !joint && head_dim != kv_lora + n_rot {
        return Err(bad(
            "attention.key_length",
            format!("= {head_dim} must be kv_lora_rank + rope dimensions = {kv_lora} + {n_rot}"),
        ));
    }
    if let Some(v) = opt_u64(g, &k("attention.value_length"))?.filter(|_| !joint) {
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
        joint,
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
