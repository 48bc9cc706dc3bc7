//! The architecture seam. A family is a [`Recipe`]: which optional tensors its layers carry and
//! which shared steps its forward pass takes (RoPE pairing, FFN activation, embedding and query
//! scaling, sliding-window layers, experts and their routing). Each family's differences from llama sit in one short file
//! here; the loader (`weights.rs`) and the forward pass (`forward.rs`) are shared and read only
//! the recipe, and placement, audit, bench and prefetch read only the weights' matrix list.

mod deepseek2;
mod gemma3;
mod gemma4;
mod glm4moe;
mod gpt_oss;
mod llama;
mod qwen2;
mod qwen3;
mod qwen3moe;

use super::config::opt_f32;
use super::error::ModelError;
use super::gguf::Gguf;
pub(crate) use gpt_oss::yarn as gpt_oss_yarn;

/// A supported architecture (`general.architecture`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arch {
    Llama,
    Qwen2,
    Qwen3,
    Gemma3,
    Qwen3Moe,
    Deepseek2,
    Glm4Moe,
    GptOss,
    Gemma4,
}

impl Arch {
    pub const ALL: [Arch; 9] = [
        Arch::Llama,
        Arch::Qwen2,
        Arch::Qwen3,
        Arch::Gemma3,
        Arch::Qwen3Moe,
        Arch::Deepseek2,
        Arch::Glm4Moe,
        Arch::GptOss,
        Arch::Gemma4,
    ];

    /// The name GGUF files give it.
    pub fn name(self) -> &'static str {
        match self {
            Arch::Llama => "llama",
            Arch::Qwen2 => "qwen2",
            Arch::Qwen3 => "qwen3",
            Arch::Gemma3 => "gemma3",
            Arch::Qwen3Moe => "qwen3moe",
            Arch::Deepseek2 => "deepseek2",
            Arch::Glm4Moe => "glm4moe",
            Arch::GptOss => "gpt-oss",
            Arch::Gemma4 => "gemma4",
        }
    }

    pub fn from_name(s: &str) -> Option<Arch> {
        Arch::ALL.into_iter().find(|a| a.name() == s)
    }

    /// "llama, qwen2, qwen3, gemma3, qwen3moe, deepseek2, glm4moe, gpt-oss, gemma4" (for messages and
    /// help).
    pub fn names() -> String {
        Arch::ALL.map(Arch::name).join(", ")
    }

    /// How the family's layers attend (its recipe's [`AttentionKind`], known before any key
    /// is read).
    pub fn recipe_attention(self) -> AttentionKind {
        match self {
            Arch::Deepseek2 => AttentionKind::Latent,
            _ => AttentionKind::Gqa,
        }
    }

    /// The family's recipe, reading its own keys (`{arch}.…`) from `g`.
    pub fn recipe(self, g: &Gguf, shape: &Shape) -> Result<Recipe, ModelError> {
        match self {
            Arch::Llama => Ok(llama::recipe()),
            Arch::Qwen2 => Ok(qwen2::recipe()),
            Arch::Qwen3 => Ok(qwen3::recipe()),
            Arch::Gemma3 => gemma3::recipe(g, shape),
            Arch::Qwen3Moe => Ok(qwen3moe::recipe()),
            Arch::Deepseek2 => deepseek2::recipe(g, shape.n_layer),
            Arch::Glm4Moe => glm4moe::recipe(g),
            Arch::GptOss => gpt_oss::recipe(g, shape),
            Arch::Gemma4 => gemma4::recipe(g, shape),
        }
    }
}

/// The dimensions a recipe may depend on.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    pub n_embd: usize,
    pub n_layer: usize,
    pub head_dim: usize,
}

/// Whether a family's layers carry an optional tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Need {
    /// Never: a file that has it is refused (its arithmetic would be left out).
    No,
    /// Used where the file has it.
    Optional,
    /// Required.
    Yes,
}

/// The optional per-layer tensors of a family.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LayerTensors {
    /// `attn_{q,k,v}.bias`, added after the projections.
    pub qkv_bias: Need,
    /// `attn_output.bias`.
    pub out_bias: Need,
    /// `attn_{q,k}_norm.weight`: RMSNorm of every query and key head before RoPE.
    pub qk_norm: Need,
    /// `post_attention_norm.weight` and `post_ffw_norm.weight`: RMSNorm of the attention and
    /// FFN outputs before each residual add.
    pub post_norms: Need,
    /// `rope_freqs.weight` (Llama 3 frequency divisors).
    pub rope_freqs: Need,
    /// `attn_v.weight`: [`Need::Optional`] where a layer without one takes its values from
    /// the key projection (Gemma 4's full layers, before the keys' norm and RoPE).
    pub v_proj: Need,
    /// `layer_output_scale.weight`: one scalar multiplying the layer's output (Gemma 4).
    pub out_scale: Need,
    /// The name of the RMSNorm weights before the FFN: `ffn_norm.weight`, or GLM-4.5's
    /// `post_attention_norm.weight` (which its graph applies to the FFN's input).
    pub ffn_norm: &'static str,
    /// `attn_sinks.weight`: one learned logit per query head, joined to every softmax of the
    /// head's scores (gpt-oss).
    pub sinks: Need,
}

/// How RoPE pairs a head's dimensions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RopeStyle {
    /// Pairs `(2i, 2i+1)` (llama).
    Normal,
    /// Pairs `(i, i + n_rot/2)` (GPT-NeoX; Qwen and Gemma).
    Neox,
}

/// The gated FFN's activation of the gate projection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FfnAct {
    /// SiLU (SwiGLU).
    Silu,
    /// GELU, tanh approximation (GEGLU).
    GeluTanh,
}

/// A family's mixture-of-experts FFN: whether its layers have one, how wide an expert is, and
/// how a token picks its experts. The counts are the file's (`Config::moe`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Moe {
    /// Whether the layers' FFN is a mixture of experts: [`Need::Yes`], every layer
    /// (qwen3moe); [`Need::Optional`], where the file declares `expert_count` (Mixtral, under
    /// `llama`); [`Need::No`], never (the expert keys are not read).
    pub layers: Need,
    pub width: ExpertWidth,
    pub routing: Routing,
    /// `exp_probs_b.bias`: a per-expert bias added to the gate's probabilities for the choice
    /// of experts only (DeepSeek-V3, GLM-4.5); the weights stay the unbiased probabilities.
    pub probs_bias: Need,
    /// Shared experts (`ffn_{gate,up,down}_shexp`, `expert_shared_count` of them, one FFN of
    /// `expert_count × expert width`) that every token runs beside its routed ones, their
    /// output added to the routed experts'. [`Need::Yes`]: the count key is required and at
    /// least 1; [`Need::Optional`]: a count of 0 or none means none; [`Need::No`]: never read.
    pub shared: Need,
    /// Whether the family reads `leading_dense_block_count`: the first layers then have a
    /// dense FFN of `feed_forward_length`, the rest the experts.
    pub dense_lead: bool,
    /// Biases on the router's logits (`ffn_gate_inp.bias`) and on every expert's projections
    /// (`ffn_{gate,up,down}_exps.bias`, one row per expert), added after each matmul (gpt-oss).
    pub biases: Need,
    /// The experts' activation of the gate and up projections.
    pub act: ExpertAct,
    /// Gemma 4's mixture (`Experts::beside`): the router reads the attention output (RMS-normed
    /// without weights, scaled by 1/√n_embd and `ffn_gate_inp.scale`), the experts have their
    /// own input and output norms, a dense MLP runs beside them, and each expert's output may
    /// be scaled (`ffn_down_exps.scale`).
    pub beside_mlp: bool,
}

/// How an expert combines its gate and up projections.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ExpertAct {
    /// SwiGLU, as a dense FFN's.
    Silu,
    /// ggml's `swiglu_oai` (gpt-oss): `min(g, limit) · σ(alpha · min(g, limit)) ·
    /// (clamp(u, ±limit) + 1)`.
    SwigluOai { alpha: f32, limit: f32 },
    /// GELU (tanh) of the gate times the up projection, as a dense GELU FFN's (Gemma 4).
    Gelu,
}

/// Where the file says how wide one expert's FFN is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExpertWidth {
    /// `feed_forward_length`, as a dense layer's (Mixtral).
    FeedForward,
    /// `expert_feed_forward_length`, else `feed_forward_length / expert_used_count` (llama.cpp's
    /// fallback; Qwen3-MoE).
    ExpertKey,
}

/// How the router's logits become a token's experts and their weights (`model::moe::route`:
/// gate, the choice (biased where the layers carry `exp_probs_b`, within the best groups where
/// the file declares groups), top-k, weights normalised and scaled). The gating, the
/// normalisation and the scale are the family's (a recipe may read them from its keys with
/// [`Routing::read_keys`]); the groups are the file's, read for every family as llama.cpp does.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Routing {
    pub gating: Gating,
    /// The chosen experts' weights divided by their sum (Qwen3-MoE, Mixtral).
    pub norm_weights: bool,
    /// `expert_weights_scale`: multiplies the chosen weights after any normalisation; 0 and 1
    /// leave them as they are (llama.cpp's test).
    pub scale: f32,
    /// Group-limited top-k (`expert_group_count` > 1): experts only from the best groups.
    pub groups: Option<ExpertGroups>,
}

/// Group-limited routing (DeepSeek-V3): the experts split into `count` groups of consecutive
/// experts; each group scores the sum of its two best selection scores, and a token's experts
/// are chosen only from the `used` best groups.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExpertGroups {
    /// `expert_group_count`: divides the expert count.
    pub count: usize,
    /// `expert_group_used_count`: at least 1, fewer than `count`.
    pub used: usize,
}

/// llama.cpp's `llama_expert_gating_func_type` codes (`expert_gating_func`).
const GATING_SOFTMAX: u64 = 1;
const GATING_SIGMOID: u64 = 2;

impl Routing {
    /// A routing with no scale and no groups.
    pub const fn new(gating: Gating, norm_weights: bool) -> Routing {
        Routing {
            gating,
            norm_weights,
            scale: 0.0,
            groups: None,
        }
    }

    /// The routing a family reads from its keys as llama.cpp's DeepSeek-2 and GLM-4.5 loaders
    /// do: `expert_gating_func` (1 softmax, 2 sigmoid; absent or 0: `default`),
    /// `expert_weights_norm` (default false) and `expert_weights_scale` (default 0: none).
    pub fn read_keys(g: &Gguf, arch: &str, default: Gating) -> Result<Routing, ModelError> {
        let k = |s: &str| format!("{arch}.{s}");
        let func = k("expert_gating_func");
        let gating = match opt_u64_or_zero(g, &func)? {
            0 => default,
            GATING_SOFTMAX => Gating::Softmax,
            GATING_SIGMOID => Gating::Sigmoid,
            other => {
                return Err(ModelError::BadKey {
                    key: func,
                    why: format!("= {other} is not supported (1 softmax, 2 sigmoid)"),
                })
            }
        };
        let norm_key = k("expert_weights_norm");
        let norm_weights = match g.get(&norm_key) {
            None => false,
            Some(v) => v.as_bool().ok_or_else(|| ModelError::BadKey {
                key: norm_key.clone(),
                why: format!("should be a boolean but is a {}", v.type_name()),
            })?,
        };
        let scale = opt_f32(g, &k("expert_weights_scale"))?.unwrap_or(0.0);
        if !scale.is_finite() {
            return Err(ModelError::BadKey {
                key: k("expert_weights_scale"),
                why: format!("= {scale} is not a finite number"),
            });
        }
        Ok(Routing {
            scale,
            ..Routing::new(gating, norm_weights)
        })
    }
}

/// An optional non-negative integer key that may be 0.
pub(super) fn opt_u64_or_zero(g: &Gguf, key: &str) -> Result<u64, ModelError> {
    match g.get(key) {
        None => Ok(0),
        Some(v) => v.as_u64().ok_or_else(|| ModelError::BadKey {
            key: key.into(),
            why: format!(
                "should be a non-negative integer but is a {}",
                v.type_name()
            ),
        }),
    }
}

/// The router's probabilities from its logits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gating {
    /// ggml's row softmax over every expert.
    Softmax,
    /// ggml's sigmoid of each logit, `1 / (1 + expf(−x))` (DeepSeek-V3, GLM-4.5).
    Sigmoid,
    /// The logits themselves choose; the chosen experts' weights are the softmax of their
    /// logits (llama.cpp's `SOFTMAX_WEIGHT`, gpt-oss).
    SoftmaxWeight,
}

/// Sliding-window (local) attention layers.
#[derive(Clone, Debug, PartialEq)]
pub struct Swa {
    /// A local layer's query at position p attends to keys at p − window < pos ≤ p.
    pub window: usize,
    /// Per layer: whether it is local.
    pub local: Vec<bool>,
    /// The local layers' RoPE base and position scale.
    pub freq_base: f32,
    pub freq_scale: f32,
}

/// How a family's layers attend.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttentionKind {
    /// Grouped-query attention: per-head keys and values in the cache.
    Gqa,
    /// DeepSeek's multi-head latent attention in its absorbed form: the cache holds one
    /// compressed latent vector and one rotated key per token, read by every head
    /// (`Config::mla` has its ranks).
    Latent,
}

/// A family's forward pass, as the shared steps read it.
#[derive(Clone, Debug, PartialEq)]
pub struct Recipe {
    pub attention: AttentionKind,
    pub tensors: LayerTensors,
    pub rope: RopeStyle,
    pub ffn: FfnAct,
    /// Multiplies the token embeddings (Gemma: √n_embd).
    pub embd_scale: Option<f32>,
    /// Multiplies each query before attention, whose softmax then takes scale 1 (Gemma); else
    /// the softmax scales the scores by 1/√head_dim.
    pub q_scale: Option<f32>,
    pub swa: Option<Swa>,
    pub moe: Moe,
    /// The sliding-window layers' own attention shape, where it differs from the global
    /// layers' (Gemma 4); the config's head sizes are then the global layers'.
    pub local_shape: Option<LocalShape>,
    /// An RMSNorm without weights on every value head before it is cached (Gemma 4).
    pub v_norm: bool,
    /// `final_logit_softcapping`: the logits become `cap · tanh(logits / cap)` (Gemma 4).
    pub logit_softcap: Option<f32>,
    /// Whether the last layer runs for every token (Gemma 4's graph picks the rows with
    /// logits only after the final norm, gpt-oss's after the last layer), not only for those
    /// with logits (llama.cpp's
    /// `inp_out_ids` before the last FFN), which changes the last FFN's matmul shapes.
    pub full_last_layer: bool,
    /// Gemma 4 E2B/E4B's per-layer embeddings (`embedding_length_per_layer_input`): values per
    /// layer and token (0: none). See `Weights::ple` and `forward/ple.rs`.
    pub ple: usize,
    /// Where the last layers reuse an earlier layer's cache (Gemma 4 E2B/E4B,
    /// `attention.shared_kv_layers`): the layers `0..kv_layers` that keep their own keys and
    /// values (llama.cpp's `n_layer_kv_from_start`); `None`: every layer does.
    pub kv_layers: Option<usize>,
    /// The FFN width of each layer where the file gives one per layer (`feed_forward_length`
    /// as an array: Gemma 4's double-wide MLP of the shared-KV layers); `None`: the config's
    /// `n_ff` for every layer.
    pub ff_layers: Option<Vec<usize>>,
}

/// A family whose sliding-window layers attend with other head sizes than its global layers
/// (Gemma 4: local heads of 256 values, many KV heads, whole-head RoPE; global heads of 512, few
/// KV heads, RoPE on a quarter): the local layers' sizes, and the global layers' KV heads where
/// the file gives the counts per layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LocalShape {
    pub head_dim: usize,
    pub n_head_kv: usize,
    pub n_rot: usize,
    /// The global layers' KV heads (the config's `n_head_kv`).
    pub global_kv_heads: usize,
}

impl Recipe {
    /// Llama's recipe, which the other families start from.
    pub(crate) fn llama() -> Recipe {
        Recipe {
            attention: AttentionKind::Gqa,
            tensors: LayerTensors {
                qkv_bias: Need::Optional,
                out_bias: Need::Optional,
                qk_norm: Need::No,
                post_norms: Need::No,
                rope_freqs: Need::Optional,
                v_proj: Need::Yes,
                out_scale: Need::No,
                ffn_norm: "ffn_norm.weight",
                sinks: Need::No,
            },
            rope: RopeStyle::Normal,
            ffn: FfnAct::Silu,
            embd_scale: None,
            q_scale: None,
            swa: None,
            // Mixtral's experts, which llama.cpp runs under `llama`.
            moe: Moe {
                layers: Need::Optional,
                width: ExpertWidth::FeedForward,
                routing: Routing::new(Gating::Softmax, true),
                probs_bias: Need::No,
                shared: Need::No,
                dense_lead: false,
                biases: Need::No,
                act: ExpertAct::Silu,
                beside_mlp: false,
            },
            local_shape: None,
            v_norm: false,
            logit_softcap: None,
            full_last_layer: false,
            ple: 0,
            kv_layers: None,
            ff_layers: None,
        }
    }

    /// Whether layer `il` attends only within the sliding window.
    pub fn is_local(&self, il: usize) -> bool {
        self.swa.as_ref().is_some_and(|s| s.local[il])
    }

    /// The layer whose cache layer `il` attends over: its own, or for a shared-KV layer
    /// (`il >= kv_layers`) llama.cpp's reuse rule, the last layer with a cache of its kind: a
    /// sliding-window layer reads layer `kv_layers − 2`, a global one `kv_layers − 1` (the
    /// recipe checks those are of the reader's kind).
    pub fn kv_source(&self, il: usize) -> usize {
        match self.kv_layers {
            Some(n) if il >= n => n - if self.is_local(il) { 2 } else { 1 },
            _ => il,
        }
    }

    /// Whether layer `il` keeps keys and values of its own (not a shared-KV layer).
    pub fn has_kv(&self, il: usize) -> bool {
        self.kv_layers.is_none_or(|n| il < n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::GgmlType;
    use crate::model::config::Config;
    use crate::model::synth::{synth_model, SynthSpec};

    fn config(spec: &SynthSpec) -> Config {
        let bytes = synth_model(spec).to_bytes();
        Config::from_gguf(&Gguf::parse(&bytes).unwrap()).unwrap()
    }

    #[test]
    fn every_family_reads_its_recipe_from_the_file() {
        let base = SynthSpec::tiny(GgmlType::F32);
        let llama = config(&base);
        assert_eq!(
            (llama.arch, llama.recipe.clone()),
            (Arch::Llama, Recipe::llama())
        );

        let q3 = config(&SynthSpec {
            arch: Arch::Qwen3,
            head_dim: 32,
            ..base.clone()
        });
        assert_eq!(q3.arch, Arch::Qwen3);
        assert_eq!(
            (q3.head_dim, q3.q_dim()),
            (32, 128),
            "key_length, not n_embd/n_head"
        );
        assert_eq!(q3.recipe.rope, RopeStyle::Neox);
        assert_eq!(q3.recipe.tensors.qk_norm, Need::Yes);

        // Gemma 3 with a window and no pattern key: llama.cpp's default, five local of six.
        let g = config(&SynthSpec {
            arch: Arch::Gemma3,
            n_layer: 12,
            sliding_window: 8,
            ..base.clone()
        });
        let swa = g.recipe.swa.clone().expect("a sliding window");
        assert_eq!(swa.window, 8);
        let globals: Vec<usize> = (0..12).filter(|&i| !swa.local[i]).collect();
        assert_eq!(globals, [5, 11]);
        assert_eq!(g.recipe.embd_scale, Some((64f32).sqrt()));
        assert_eq!(g.recipe.q_scale, Some(1.0 / (16f32).sqrt()));
        assert_eq!((g.recipe.ffn, swa.freq_base), (FfnAct::GeluTanh, 10000.0));

        // An explicit pattern of 2: every other layer local; no window, no local layers.
        let g2 = config(&SynthSpec {
            arch: Arch::Gemma3,
            n_layer: 4,
            sliding_window: 8,
            swa_pattern: 2,
            ..base.clone()
        });
        assert_eq!(g2.recipe.swa.unwrap().local, [true, false, true, false]);
        let g3 = config(&SynthSpec {
            arch: Arch::Gemma3,
            ..base
        });
        assert!(g3.recipe.swa.is_none() && !g3.recipe.is_local(0));
    }

    #[test]
    fn the_experts_and_their_routing_are_the_recipe_s() {
        let base = SynthSpec::tiny(GgmlType::F32);
        let softmax_norm = Routing::new(Gating::Softmax, true);
        // Qwen3-MoE: experts in every layer, of the width its own key says.
        let q = config(&SynthSpec {
            arch: Arch::Qwen3Moe,
            n_expert: 8,
            n_expert_used: 2,
            n_ff_exp: 48,
            ..base.clone()
        });
        assert_eq!(q.recipe.moe.layers, Need::Yes);
        let moe = q.moe.expect("experts");
        assert_eq!((moe.n_expert, moe.n_used, moe.n_ff), (8, 2, 48));
        assert_eq!(moe.routing, softmax_norm);
        // Mixtral under llama: experts where the file declares them, as wide as a dense FFN.
        let m = config(&SynthSpec {
            n_expert: 4,
            n_expert_used: 2,
            n_ff_exp: base.n_ff,
            ..base.clone()
        });
        let moe = m.moe.expect("experts");
        assert_eq!((moe.n_ff, moe.routing), (base.n_ff, softmax_norm));
        assert!(config(&base).moe.is_none());
    }
}
