//! Latent attention's sizes, read from a `deepseek2` file's metadata and checked as llama.cpp
//! reads them (`llama_model_deepseek2::load_arch_hparams`).

use super::config::{opt_f32, opt_u64, Mla};
use super::error::ModelError;
use super::gguf::Gguf;

/// The latent attention sizes of a file of architecture `arch`, whose generic keys gave
/// `n_head_kv` KV heads of `head_dim` values and `n_rot` rotated values: in the absorbed form
/// (the only one read so far) one "KV head" of `kv_lora_rank + n_rot` values.
pub(super) fn mla_shape(
    g: &Gguf,
    arch: &str,
    (n_head_kv, head_dim, n_rot): (usize, usize, usize),
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
    if let Some(m) = opt_f32(g, &k("rope.scaling.yarn_log_multiplier"))? {
        if m != 0.0 {
            return Err(bad(
                "rope.scaling.yarn_log_multiplier",
                format!("= {m}: YaRN's attention temperature is not supported yet"),
            ));
        }
    }
    Ok(Mla {
        q_lora,
        kv_lora,
        nope: k_mla - n_rot,
        rope: n_rot,
        v_head,
        kq_scale: 1.0 / (k_mla as f32).sqrt(),
    })
}
