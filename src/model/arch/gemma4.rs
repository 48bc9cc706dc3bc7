//! Gemma 4 (llama.cpp's `gemma4`): Gemma 3's layer (embeddings scaled by √n_embd, RMSNorm on
//! every query and key head, post-norms on the attention and FFN outputs, GELU-gated FFN, NEOX
//! RoPE, sliding-window layers) with
//! - two attention shapes: the sliding-window layers' heads (`key_length_swa`, whole-head RoPE
//!   at `rope.freq_base_swa`, more KV heads) and the global layers' (`key_length`, fewer KV
//!   heads, "proportional" RoPE: the `rope_freqs` divisors of 1e30 leave all but the first
//!   quarter of each head unturned); `head_count_kv` may be one count per layer;
//! - an RMSNorm without weights on every value head, and global layers without `attn_v`
//!   whose values are the key projection (before the keys' norm and RoPE);
//! - no query scaling at all (the softmax's scale is 1);
//! - `layer_output_scale`: one scalar per layer multiplying its output;
//! - the logits soft-capped, `cap · tanh(logits / cap)` (llama.cpp's default cap is 30 where
//!   the file does not say; 0 turns it off).
//!
//! The 26B-A4B's layers (where the file declares `expert_count`) have a mixture of experts
//! beside the dense MLP: the MLP's output through `post_ffw_norm_1`, the experts' (their input
//! `pre_ffw_norm_2` of the attention output; the router's the attention output RMS-normed
//! without weights, scaled by 1/√n_embd and by `ffn_gate_inp.scale`; softmax, top-k,
//! renormalised; GELU experts; each expert's output times its `ffn_down_exps.scale` where the
//! file has one) through `post_ffw_norm_2`, their sum then through `post_ffw_norm`. The fused
//! `ffn_gate_up_exps` is not read (a file with it is refused as having a tensor not read).
//!
//! E2B and E4B add
//! - per-layer embeddings (`embedding_length_per_layer_input` > 0, [`Recipe::ple`]): a second
//!   token table `per_layer_token_embd` of that many values per layer, mixed with a projection
//!   of the embedding (`per_layer_model_proj`, `per_layer_proj_norm`) into one input per layer,
//!   which each layer gates into its output after the FFN (`blk.N.inp_gate`, `blk.N.proj`,
//!   `blk.N.post_norm`; `forward/ple.rs`);
//! - shared-KV layers (`attention.shared_kv_layers` > 0, [`Recipe::kv_layers`]): the last
//!   layers compute queries only and attend over the cache of the last earlier layer of their
//!   kind ([`Recipe::kv_source`]);
//! - a double-wide MLP in those layers: `feed_forward_length` one width per layer
//!   ([`Recipe::ff_layers`]).

use super::super::config::{opt_f32, opt_u64};
use super::super::error::ModelError;
use super::super::gguf::Gguf;
use super::{opt_u64_or_zero, Shape, Swa};
use super::{ExpertAct, ExpertWidth, Gating, LocalShape, Need, Recipe, Routing};

const ARCH: &str = "gemma4";
/// The local layers' RoPE base when the file does not say (llama.cpp's default).
const DEFAULT_SWA_FREQ_BASE: f32 = 10000.0;
/// llama.cpp's `f_final_logit_softcapping` where the file has no key.
const DEFAULT_SOFTCAP: f32 = 30.0;

pub(super) fn recipe(g: &Gguf, shape: &Shape) -> Result<Recipe, ModelError> {
    let k = |s: &str| format!("{ARCH}.{s}");
    let bad = |key: String, why: String| ModelError::BadKey { key, why };
    let mut r = super::gemma3::gemma_layer(shape);
    r.tensors.v_proj = Need::Optional;
    r.tensors.out_scale = Need::Optional;
    // `f_attention_scale = 1`: queries unscaled, a softmax of scale 1.
    r.q_scale = Some(1.0);
    r.v_norm = true;
    r.full_last_layer = true;
    // The 26B-A4B: where the file declares experts, every layer has them beside its dense MLP.
    r.moe.layers = Need::Optional;
    r.moe.width = ExpertWidth::ExpertKey;
    r.moe.routing = Routing::new(Gating::Softmax, true);
    r.moe.act = ExpertAct::Gelu;
    r.moe.beside_mlp = true;
    let ple = k("embedding_length_per_layer_input");
    // Required (llama.cpp's loader reads it without a default); 0 for the 31B and 26B-A4B.
    if g.get(&ple).is_none() {
        return Err(ModelError::MissingKey(ple));
    }
    r.ple = opt_u64_or_zero(g, &ple)? as usize;
    if (r.ple as u64).saturating_mul(shape.n_layer as u64) > u64::from(u32::MAX) {
        return Err(bad(
            ple,
            format!("= {} is too large for {} layers", r.ple, shape.n_layer),
        ));
    }
    let ffl = k("feed_forward_length");
    if g.get(&ffl).is_some_and(|v| v.as_array().is_some()) {
        r.ff_layers = Some(per_layer_counts(g, &ffl, shape.n_layer)?);
    }
    let cap = opt_f32(g, &k("final_logit_softcapping"))?.unwrap_or(DEFAULT_SOFTCAP);
    if !cap.is_finite() || cap < 0.0 {
        return Err(bad(
            k("final_logit_softcapping"),
            format!("= {cap} must be a non-negative number"),
        ));
    }
    r.logit_softcap = (cap != 0.0).then_some(cap);

    let wkey = k("attention.sliding_window");
    let window = opt_u64(g, &wkey)?.ok_or_else(|| ModelError::MissingKey(wkey.clone()))? as usize;
    let local = flags(g, &k("attention.sliding_window_pattern"), shape.n_layer)?;
    let any_global = local.iter().any(|&l| !l);
    r.tensors.rope_freqs = if any_global { Need::Yes } else { Need::No };
    let kv_heads = kv_heads(g, &k("attention.head_count_kv"), shape.n_layer)?;
    let one_of = |want_local: bool| -> Result<Option<usize>, ModelError> {
        let mut seen = None;
        for (il, &h) in kv_heads.iter().enumerate() {
            if local[il] != want_local {
                continue;
            }
            match seen {
                None => seen = Some(h),
                Some(s) if s == h => {}
                Some(s) => {
                    return Err(bad(
                        k("attention.head_count_kv"),
                        format!("gives layer {il} {h} KV heads and another layer of its kind {s}"),
                    ))
                }
            }
        }
        Ok(seen)
    };
    let local_kv = one_of(true)?;
    let global_kv = one_of(false)?;
    let kl = k("attention.key_length_swa");
    let head_dim = opt_u64(g, &kl)?.ok_or_else(|| ModelError::MissingKey(kl.clone()))? as usize;
    let vl = k("attention.value_length_swa");
    if opt_u64(g, &vl)?.ok_or_else(|| ModelError::MissingKey(vl.clone()))? != head_dim as u64 {
        return Err(bad(
            vl,
            "differs from key_length_swa (Gemma 4 needs them equal)".into(),
        ));
    }
    let n_rot_global =
        opt_u64(g, &k("rope.dimension_count"))?.map_or(shape.head_dim, |n| n as usize);
    let n_rot = opt_u64(g, &k("rope.dimension_count_swa"))?.map_or(n_rot_global, |n| n as usize);
    if n_rot > head_dim || n_rot % 2 != 0 {
        return Err(bad(
            k("rope.dimension_count_swa"),
            format!("= {n_rot} must be even and at most the local head size {head_dim}"),
        ));
    }
    let first = kv_heads.first().copied().unwrap_or(1);
    r.local_shape = Some(LocalShape {
        head_dim,
        n_head_kv: local_kv.unwrap_or(first),
        n_rot,
        global_kv_heads: global_kv.unwrap_or(first),
    });
    r.swa = Some(Swa {
        window,
        local,
        freq_base: opt_f32(g, &k("rope.freq_base_swa"))?.unwrap_or(DEFAULT_SWA_FREQ_BASE),
        freq_scale: 1.0,
    });
    let shared = opt_u64_or_zero(g, &k("attention.shared_kv_layers"))? as usize;
    if shared > 0 {
        r.kv_layers = Some(kv_layers(&r, shared, shape.n_layer, &k)?);
    }
    Ok(r)
}

/// The layers that keep a cache of their own when the last `shared` of `n_layer` reuse one,
/// checked as llama.cpp's reuse rule needs them: at least two, and the last two of them of the
/// kinds the shared layers read (`Recipe::kv_source`: a sliding-window reader takes layer
/// `kv_layers − 2`, a global one `kv_layers − 1`; llama.cpp aborts on a file where these
/// differ).
fn kv_layers(
    r: &Recipe,
    shared: usize,
    n_layer: usize,
    k: &dyn Fn(&str) -> String,
) -> Result<usize, ModelError> {
    let key = k("attention.shared_kv_layers");
    let bad = |why: String| ModelError::BadKey {
        key: key.clone(),
        why,
    };
    let own = n_layer
        .checked_sub(shared)
        .filter(|&n| n >= 2)
        .ok_or_else(|| {
            bad(format!(
                "= {shared} leaves fewer than 2 of the {n_layer} layers with a cache of their own \
             (the shared layers read the last of each kind)"
            ))
        })?;
    let kind = |il: usize| match r.is_local(il) {
        true => "sliding-window",
        false => "global",
    };
    for il in own..n_layer {
        let src = own - if r.is_local(il) { 2 } else { 1 };
        if r.is_local(src) != r.is_local(il) {
            return Err(bad(format!(
                "= {shared}: shared layer {il} ({}) would read layer {src}'s cache, which is {} \
                 (the last cached layer must be global and the one before it sliding-window)",
                kind(il),
                kind(src)
            )));
        }
    }
    Ok(own)
}

/// A per-layer array of positive integers (`feed_forward_length` of a double-wide MLP).
fn per_layer_counts(g: &Gguf, key: &str, n_layer: usize) -> Result<Vec<usize>, ModelError> {
    let bad = |why: String| ModelError::BadKey {
        key: key.into(),
        why,
    };
    let a = g
        .get(key)
        .and_then(|v| v.as_array())
        .ok_or_else(|| bad("should be an array".into()))?;
    if a.len() < n_layer {
        return Err(bad(format!("has {} entries for {n_layer} layers", a.len())));
    }
    (0..n_layer)
        .map(|i| {
            a.scalar_f64(i)
                .filter(|&x| x >= 1.0 && x.fract() == 0.0 && x <= (1u64 << 32) as f64)
                .map(|x| x as usize)
        })
        .collect::<Option<_>>()
        .ok_or_else(|| bad("should hold positive integers".into()))
}

/// A required array of one boolean per layer.
fn flags(g: &Gguf, key: &str, n_layer: usize) -> Result<Vec<bool>, ModelError> {
    let v = g
        .get(key)
        .ok_or_else(|| ModelError::MissingKey(key.into()))?;
    let bad = |why: String| ModelError::BadKey {
        key: key.into(),
        why,
    };
    let a = v
        .as_array()
        .ok_or_else(|| bad("should be an array of one boolean per layer".into()))?;
    if a.len() < n_layer {
        return Err(bad(format!("has {} entries for {n_layer} layers", a.len())));
    }
    (0..n_layer)
        .map(|i| a.scalar_f64(i).map(|x| x != 0.0))
        .collect::<Option<_>>()
        .ok_or_else(|| bad("should be an array of booleans".into()))
}

/// The KV heads of every layer: one count for all, or one per layer.
fn kv_heads(g: &Gguf, key: &str, n_layer: usize) -> Result<Vec<usize>, ModelError> {
    let bad = |why: String| ModelError::BadKey {
        key: key.into(),
        why,
    };
    let Some(v) = g.get(key) else {
        return Err(ModelError::MissingKey(key.into()));
    };
    if let Some(a) = v.as_array() {
        if a.len() < n_layer {
            return Err(bad(format!("has {} entries for {n_layer} layers", a.len())));
        }
        return (0..n_layer)
            .map(|i| {
                a.scalar_f64(i)
                    .filter(|&x| x >= 1.0 && x.fract() == 0.0 && x <= (1u64 << 24) as f64)
                    .map(|x| x as usize)
            })
            .collect::<Option<_>>()
            .ok_or_else(|| bad("should hold positive integers".into()));
    }
    let n = opt_u64(g, key)?.unwrap_or(1) as usize;
    Ok(vec![n; n_layer])
}

#[cfg(test)]
mod tests {
    use crate::kernels::GgmlType;
    use crate::model::arch::LocalShape;
    use crate::model::config::Config;
    use crate::model::gguf::Gguf;
    use crate::model::synth::{synth_model, SynthGemma4, SynthSpec};

    fn spec(softcap: f32) -> SynthSpec {
        SynthSpec {
            arch: super::super::Arch::Gemma4,
            n_layer: 4,
            n_head: 4,
            n_head_kv: 2,
            head_dim: 16,
            sliding_window: 8,
            swa_pattern: 2,
            g4: SynthGemma4 {
                head_dim: 32,
                n_head_kv: 1,
                n_rot: 8,
                softcap,
                ..SynthGemma4::default()
            },
            ..SynthSpec::tiny(GgmlType::F32)
        }
    }

    fn config(s: &SynthSpec) -> Config {
        let bytes = synth_model(s).to_bytes();
        Config::from_gguf(&Gguf::parse(&bytes).unwrap()).unwrap()
    }

    #[test]
    fn both_attention_shapes_and_the_cap_come_from_the_file() {
        let c = config(&spec(0.0));
        // The config's sizes are the global layers'; the local layers' are the recipe's.
        assert_eq!((c.head_dim, c.n_head_kv, c.n_rot), (32, 1, 32));
        let local = LocalShape {
            head_dim: 16,
            n_head_kv: 2,
            n_rot: 16,
            global_kv_heads: 1,
        };
        assert_eq!(c.recipe.local_shape, Some(local));
        let lv = c.local_view().expect("a local view");
        assert_eq!((lv.head_dim, lv.n_head_kv, lv.q_dim()), (16, 2, 64));
        assert_eq!(
            c.recipe.swa.as_ref().unwrap().local,
            [true, false, true, false]
        );
        // No key: llama.cpp's default cap of 30; a cap of 0 turns it off.
        assert_eq!(c.recipe.logit_softcap, Some(30.0));
        assert_eq!(c.recipe.q_scale, Some(1.0));
        assert!(c.recipe.v_norm && c.recipe.full_last_layer);
        assert_eq!(config(&spec(12.5)).recipe.logit_softcap, Some(12.5));
    }

    fn e_spec() -> SynthSpec {
        SynthSpec {
            n_layer: 6,
            g4: SynthGemma4 {
                ple: 32,
                shared_kv: 2,
                double_wide: true,
                ..spec(0.0).g4
            },
            ..spec(0.0)
        }
    }

    #[test]
    fn the_e_variant_s_per_layer_embeddings_and_shared_kv_layers_come_from_the_file() {
        let c = config(&e_spec());
        let r = &c.recipe;
        assert_eq!((r.ple, r.kv_layers), (32, Some(4)));
        // Layers 0, 2, 4 are sliding-window: 4 reads layer 2's cache, 5 (global) layer 3's.
        let sources: Vec<usize> = (0..6).map(|il| r.kv_source(il)).collect();
        assert_eq!(sources, [0, 1, 2, 3, 2, 3]);
        assert_eq!((0..6).filter(|&il| r.has_kv(il)).count(), 4);
        // The double-wide MLP: one width per layer, the widest sizes the buffers.
        let ff: Vec<usize> = (0..6).map(|il| c.n_ff_of(il)).collect();
        assert_eq!(ff, [96, 96, 96, 96, 192, 192]);
        assert_eq!(c.n_ff, 192);
        // The dense model has neither.
        let d = config(&spec(0.0));
        assert_eq!((d.recipe.ple, d.recipe.kv_layers), (0, None));
        assert!(d.recipe.ff_layers.is_none());
        assert_eq!(d.recipe.kv_source(3), 3);
    }

    #[test]
    fn shared_kv_layers_that_llama_cpp_cannot_map_are_refused() {
        let refused = |shared: u32| {
            let mut w = synth_model(&e_spec());
            w.set(
                "gemma4.attention.shared_kv_layers",
                crate::model::gguf_write::MetaValue::U32(shared),
            );
            let bytes = w.to_bytes();
            Config::from_gguf(&Gguf::parse(&bytes).unwrap())
                .unwrap_err()
                .to_string()
        };
        // All layers, or all but one: fewer than two layers keep a cache.
        for n in [6, 5, 9] {
            let e = refused(n);
            assert!(
                e.contains("shared_kv_layers") && e.contains("fewer than 2"),
                "{e}"
            );
        }
        // 3 shared: layer 3 (global) would read layer 2 (sliding-window).
        let e = refused(3);
        assert!(
            e.contains("shared layer 3 (global)") && e.contains("sliding-window"),
            "{e}"
        );
    }

    #[test]
    fn the_experts_beside_the_mlp_come_from_the_file() {
        let s = SynthSpec {
            n_expert: 4,
            n_expert_used: 2,
            n_ff_exp: 32,
            ..spec(0.0)
        };
        let c = config(&s);
        let moe = c.moe.expect("experts");
        assert_eq!((moe.n_expert, moe.n_used, moe.n_ff), (4, 2, 32));
        assert!(c.recipe.moe.beside_mlp);
        assert_eq!(c.recipe.moe.act, super::ExpertAct::Gelu);
        assert_eq!(
            c.recipe.moe.routing,
            super::Routing::new(super::Gating::Softmax, true)
        );
        assert!(config(&spec(0.0)).moe.is_none());
    }
}
