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

#[cfg(test)]
mod tests {
    use crate::kernels::GgmlType;
    use crate::model::arch::{Arch, ExpertGroups, Gating, Need, RopeStyle};
    use crate::model::config::Config;
    use crate::model::error::ModelError;
    use crate::model::gguf::Gguf;
    use crate::model::gguf_write::{GgufWriter, MetaValue};
    use crate::model::synth::{synth_model, SynthMoe, SynthSpec};
    use crate::model::weights::{Ffn, Weights};

    /// A tiny GLM-4.5: 3 layers (the first dense), 8 experts of 32, 2 per token, a shared
    /// expert, RoPE on half of each head, one NextN layer.
    fn spec() -> SynthSpec {
        SynthSpec {
            arch: Arch::Glm4Moe,
            n_layer: 3,
            head_dim: 32,
            n_rot: 16,
            n_expert: 8,
            n_expert_used: 2,
            n_ff_exp: 32,
            n_nextn: 1,
            moe: SynthMoe {
                n_shared: 1,
                dense_lead: 1,
                gating: None,
                probs_bias: true,
                weights_scale: 2.5,
                weights_norm: Some(true),
                ..SynthMoe::default()
            },
            ..SynthSpec::tiny(GgmlType::F32)
        }
    }

    /// Loads `w` as locus would: the config, then every weight; the first error.
    fn load(w: &GgufWriter) -> Result<(Config, usize), ModelError> {
        let bytes = w.to_bytes();
        let g = Gguf::parse(&bytes).unwrap();
        let c = Config::from_gguf(&g)?;
        let weights = Weights::from_gguf(&g, &c)?;
        Ok((c, weights.matrices().len()))
    }

    fn set(w: &mut GgufWriter, key: &str, v: u32) {
        w.set(&format!("glm4moe.{key}"), MetaValue::U32(v));
    }

    #[test]
    fn the_recipe_and_the_layers_are_glm_4_5_s() {
        let bytes = synth_model(&spec()).to_bytes();
        let g = Gguf::parse(&bytes).unwrap();
        let c = Config::from_gguf(&g).unwrap();
        // The NextN layer is past the trunk: three layers run.
        assert_eq!((c.n_layer, c.n_layer_nextn, c.n_rot), (3, 1, 16));
        assert!(c.is_nextn_tensor("blk.3.nextn.eh_proj.weight"));
        assert!(!c.is_nextn_tensor("blk.2.attn_q.weight") && !c.is_nextn_tensor("blk.30.x"));
        let r = &c.recipe;
        assert_eq!(
            (r.rope, r.tensors.ffn_norm),
            (RopeStyle::Neox, "post_attention_norm.weight")
        );
        assert_eq!((r.moe.probs_bias, r.moe.shared), (Need::Yes, Need::Yes));
        let moe = c.moe.unwrap();
        // No gating key: sigmoid, GLM's default; the file's norm and scale.
        assert_eq!(moe.routing.gating, Gating::Sigmoid);
        assert!(moe.routing.norm_weights && moe.routing.scale == 2.5);
        assert_eq!((moe.n_shared, moe.shared_ff(), moe.dense_lead), (1, 32, 1));
        assert!(moe.routing.groups.is_none());
        let w = Weights::from_gguf(&g, &c).unwrap();
        assert!(matches!(w.layers[0].ffn, Ffn::Dense { .. }));
        let Ffn::Moe(x) = &w.layers[1].ffn else {
            panic!("layer 1 is a mixture");
        };
        assert_eq!(x.probs_bias.as_ref().map(Vec::len), Some(8));
        let sh = x.shared.as_ref().expect("a shared expert");
        assert_eq!((sh.gate.rows(), sh.down.file.cols), (32, 32));
        // Placement, audit and the active bytes see the shared expert, read whole per token.
        let names: Vec<&str> = w.matrices().iter().map(|m| m.name.as_str()).collect();
        assert!(names.contains(&"blk.2.ffn_down_shexp.weight"));
        assert!(!names.iter().any(|n| n.starts_with("blk.3.")));
        let read = w.read_per_token();
        let share = |name: &str| read.iter().find(|(m, _)| m.name == name).unwrap().1;
        assert_eq!(share("blk.1.ffn_up_shexp.weight"), 1.0);
        assert_eq!(share("blk.1.ffn_up_exps.weight[3]"), 2.0 / 8.0);
        assert_eq!(share("blk.0.ffn_up.weight"), 1.0);
    }

    #[test]
    fn groups_and_gating_are_read_from_the_file() {
        let mut w = synth_model(&spec());
        set(&mut w, "expert_group_count", 4);
        set(&mut w, "expert_group_used_count", 2);
        set(&mut w, "expert_gating_func", 1);
        let (c, _) = load(&w).unwrap();
        let routing = c.moe.unwrap().routing;
        assert_eq!(routing.groups, Some(ExpertGroups { count: 4, used: 2 }));
        assert_eq!(routing.gating, Gating::Softmax);
        // One group is no grouping.
        set(&mut w, "expert_group_count", 1);
        assert!(load(&w).unwrap().0.moe.unwrap().routing.groups.is_none());
    }

    #[test]
    fn bad_expert_layouts_are_one_clear_error() {
        let key_error = |edit: &dyn Fn(&mut GgufWriter), key: &str, why: &str| {
            let mut w = synth_model(&spec());
            edit(&mut w);
            match load(&w) {
                Err(e @ ModelError::BadKey { .. }) => {
                    let msg = e.to_string();
                    assert!(msg.contains(key) && msg.contains(why), "{msg}");
                }
                other => panic!("{key}: {:?}", other.map(|(c, _)| c.moe)),
            }
        };
        let groups = |count, used| {
            move |w: &mut GgufWriter| {
                set(w, "expert_group_count", count);
                set(w, "expert_group_used_count", used);
            }
        };
        key_error(&groups(3, 1), "expert_group_count", "does not divide");
        key_error(
            &groups(8, 1),
            "expert_group_count",
            "less than the expert count",
        );
        key_error(&groups(4, 4), "expert_group_used_count", "between 1");
        key_error(&groups(4, 0), "expert_group_used_count", "between 1");
        key_error(
            &|w| set(w, "expert_shared_count", 0),
            "expert_shared_count",
            "= 0",
        );
        key_error(
            &|w| set(w, "expert_gating_func", 4),
            "expert_gating_func",
            "not supported",
        );
        key_error(
            &|w| set(w, "leading_dense_block_count", 9),
            "leading_dense_block_count",
            "more than",
        );
        key_error(
            &|w| set(w, "nextn_predict_layers", 4),
            "nextn_predict_layers",
            "none of the",
        );
        // A missing shared expert's matrix, or selection bias, is named.
        for gone in ["blk.2.ffn_up_shexp.weight", "blk.1.exp_probs_b.bias"] {
            let mut w = synth_model(&spec());
            w.tensors.retain(|t| t.name != gone);
            match load(&w) {
                Err(ModelError::MissingTensor(t)) => assert_eq!(t, gone),
                other => panic!("{gone}: {:?}", other.map(|(_, n)| n)),
            }
        }
        // Without its key the NextN layer's tensors are the trunk's business: refused.
        let mut w = synth_model(&spec());
        w.metadata
            .retain(|(k, _)| k != "glm4moe.nextn_predict_layers");
        set(&mut w, "block_count", 3);
        assert!(matches!(load(&w), Err(ModelError::UnexpectedTensor { .. })));
    }
}
