//! `llama_tensor_get_type_impl`: the mixture rules by category and position (the parent
//! module's docs list them).

use super::{
    block_number, use_more_bits, Category, Counters, MixError, MixOptions, ModelShape, Preset,
};
use crate::kernels::GgmlType;

/// The layer a `ffn_*` rule looks at: the running counter for a dense model; for a MoE model
/// (whose expert tensors need not come one per layer) the block number in the name.
fn ffn_layer(counter: i64, shape: &ModelShape, name: &str) -> Result<i64, MixError> {
    if shape.n_expert <= 1 {
        return Ok(counter);
    }
    let layer = block_number(name)
        .ok_or_else(|| MixError(format!("Failed to determine layer for tensor {name}")))?;
    let n = i64::from(shape.n_layer);
    if !(0..n).contains(&layer) {
        return Err(MixError(format!(
            "Bad layer {layer} for tensor {name}. Must be in [0, {n})"
        )));
    }
    Ok(layer)
}

/// The GGUF dimension that counts the experts of a 3-D expert tensor (`ne[2]`).
const EXPERT_DIM: usize = 2;
/// Experts of the models (Mixtral 8x7B/8x22B) llama.cpp gives special treatment.
const EIGHT_EXPERTS: u32 = 8;
/// `n_head / n_head_kv` from which `attn_v` gets more bits in the low-bit presets.
const GQA_MORE_BITS: u32 = 4;
/// Experts from which the IQ1/IQ2 presets give `attn_v` more bits.
const MANY_EXPERTS: u32 = 4;

/// `llama_tensor_get_type_impl` (before the fallback; module docs list the rules).
pub(super) fn mixture_type(
    c: &mut Counters,
    preset: Preset,
    shape: &ModelShape,
    opts: &MixOptions,
    name: &str,
    dims: &[u64],
) -> Result<GgmlType, MixError> {
    use Category as C;
    use GgmlType as T;
    use Preset as P;
    let default = preset.default_type();
    let category = Category::of(name);
    let eight_experts = shape.n_expert == EIGHT_EXPERTS;
    let gqa_wide = shape.n_gqa() >= GQA_MORE_BITS;
    let iq2s_or_m = matches!(preset, P::Iq2S | P::Iq2M);
    let ty = if category == C::Output || (c.tied_embeddings && category == C::TokenEmbd) {
        output_type(preset, opts, dims)
    } else if preset == P::Mxfp4Moe {
        // The experts (3-D tensors) in MXFP4, everything else in Q8_0, before any other rule
        // (so no counter moves).
        match dims.get(EXPERT_DIM) {
            Some(&n) if n > 1 => T::Mxfp4,
            _ => T::Q8_0,
        }
    } else if category == C::TokenEmbd {
        match (opts.token_embedding_type, preset) {
            // (Decided before the rules, except for a per_layer_token_embd a pattern names.)
            (Some(ty), _) => ty,
            (None, P::Iq2Xxs | P::Iq2Xs | P::Iq1S | P::Iq1M) => T::Q2K,
            (None, P::Iq2S | P::Iq2M | P::Iq3Xxs) => T::Iq3S,
            (None, _) => default,
        }
    } else if preset.is_iq1_iq2() {
        // The IQ1/IQ2 group: only attn_v and ffn_down move their counters here.
        if category.is_attn_v() {
            c.i_attention_wv += 1;
            if gqa_wide || shape.n_expert >= MANY_EXPERTS {
                T::Q4K
            } else if iq2s_or_m {
                T::Iq3S
            } else {
                T::Q2K
            }
        } else if eight_experts && category == C::AttnK {
            T::Q4K
        } else if category == C::FfnDown {
            // The running count, whatever the experts (no layer from the name here).
            let first_eighth = c.i_ffn_down < c.n_ffn / 8;
            c.i_ffn_down += 1;
            match () {
                _ if !first_eighth => default,
                _ if iq2s_or_m => T::Iq3S,
                _ => T::Q2K,
            }
        } else if category == C::AttnOutput {
            match preset {
                _ if eight_experts => T::Q5K,
                P::Iq1S | P::Iq1M => T::Iq2Xxs,
                P::Iq2S | P::Iq2M => T::Iq3S,
                _ => default,
            }
        } else {
            default
        }
    } else if category.is_attn_v() {
        let i = c.i_attention_wv;
        let mut ty = match preset {
            P::Q2K if gqa_wide => T::Q4K,
            P::Q2K => T::Q3K,
            P::Q2KS if gqa_wide => T::Q4K,
            P::Iq3Xxs if gqa_wide => T::Q4K,
            P::Iq3Xxs if opts.has_imatrix => T::Iq3Xxs,
            P::Iq3Xxs => T::Iq3S,
            P::Iq3Xs | P::Iq3S if gqa_wide => T::Q4K,
            P::Iq3M => T::Q4K,
            P::Q3KM if i < 2 => T::Q5K,
            P::Q3KM => T::Q4K,
            P::Q3KL => T::Q5K,
            P::Iq4Nl | P::Iq4Xs if gqa_wide => T::Q5K,
            P::Q4KM | P::Q5KM if use_more_bits(i, c.n_attention_wv) => T::Q6K,
            P::Q4KS if i < 4 => T::Q5K,
            _ => default,
        };
        if shape.is_70b && matches!(ty, T::Q3K | T::Q4K) {
            // 70B models share each attn_v among 8 heads: a small tensor worth more bits.
            ty = T::Q5K;
        }
        if eight_experts {
            ty = T::Q8_0;
        }
        c.i_attention_wv += 1;
        ty
    } else if category == C::AttnK {
        match preset {
            _ if eight_experts => T::Q8_0,
            P::Iq3Xs => T::Iq3Xxs,
            P::Iq3Xxs => T::Iq2S,
            _ => default,
        }
    } else if category == C::AttnQ {
        match preset {
            P::Iq3Xs => T::Iq3Xxs,
            P::Iq3Xxs => T::Iq2S,
            _ => default,
        }
    } else if category == C::FfnDown {
        let i = ffn_layer(c.i_ffn_down, shape, name)?;
        let n = c.n_ffn;
        let first_eighth = i < n / 8;
        let ty = match preset {
            P::Q2K => T::Q3K,
            P::Q2KS if first_eighth => T::Q4K,
            P::Iq3Xxs if !opts.has_imatrix && first_eighth => T::Q4K,
            P::Iq3Xxs if !opts.has_imatrix => T::Q3K,
            P::Q3KM if i < n / 16 => T::Q5K,
            // (Falcon keeps Q3_K where use_more_bits is false.)
            P::Q3KM => T::Q4K,
            P::Iq3M if first_eighth || (eight_experts && use_more_bits(i, n)) => T::Q4K,
            P::Q3KL => T::Q5K,
            P::Q4KM if use_more_bits(i, n) => T::Q6K,
            P::Iq4Nl | P::Iq4Xs if first_eighth && !opts.has_imatrix => T::Q5K,
            P::Q5KM if use_more_bits(i, n) => T::Q6K,
            P::Q4KS if first_eighth => T::Q5K,
            // Guards the first layers of Q4_0/Q5_0, only with an imatrix (llama.cpp's note).
            P::Q4_0 if opts.has_imatrix && first_eighth => T::Q4_1,
            P::Q5_0 if opts.has_imatrix && first_eighth => T::Q5_1,
            _ => default,
        };
        c.i_ffn_down += 1;
        ty
    } else if category == C::AttnOutput {
        match preset {
            P::Q2K
            | P::Iq3Xs
            | P::Iq3Xxs
            | P::Q3KS
            | P::Q3KM
            | P::Iq4Nl
            | P::Q4KS
            | P::Q4KM
            | P::Iq3S
            | P::Iq3M
            | P::Iq4Xs
                if eight_experts =>
            {
                T::Q5K
            }
            _ if eight_experts => default,
            // (Falcon: only Q3_K_L changes, to Q4_K.)
            P::Q2K => T::Q3K,
            P::Iq3Xxs => T::Iq3S,
            P::Q3KM => T::Q4K,
            P::Q3KL => T::Q5K,
            P::Iq3M => T::Q4K,
            _ => default,
        }
    } else if matches!(category, C::FfnGate | C::FfnUp) {
        let counter = if category == C::FfnGate {
            &mut c.i_ffn_gate
        } else {
            &mut c.i_ffn_up
        };
        let i = ffn_layer(*counter, shape, name)?;
        *counter += 1;
        let n = c.n_ffn;
        if preset == P::Iq3Xs && i >= n / 8 && i < 7 * n / 8 {
            T::Iq3Xxs
        } else {
            default
        }
    } else {
        default
    };
    Ok(ty)
}

/// The type of `output.weight` (and of tied token embeddings) under the mixture rules.
fn output_type(preset: Preset, opts: &MixOptions, dims: &[u64]) -> GgmlType {
    use GgmlType as T;
    let default = preset.default_type();
    let ncols = dims.first().copied().unwrap_or(1);
    if let Some(ty) = opts.output_tensor_type {
        ty
    } else if preset == Preset::Mxfp4Moe || !ncols.is_multiple_of(default.block_size() as u64) {
        T::Q8_0
    } else if preset.is_iq1_iq2() || preset == Preset::Iq3Xxs {
        T::Q5K
    } else if default != T::Q8_0 {
        T::Q6K
    } else {
        default
    }
}
