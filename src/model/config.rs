//! Hyper-parameters, all read from GGUF metadata: the ones every family shares under the same
//! `{arch}.…` keys, and the family's [`Recipe`] (see `arch`).

use super::arch::{
    Arch, AttentionKind, ExpertGroups, ExpertWidth, Moe, Need, Recipe, Routing, Shape,
};
use super::error::ModelError;
use super::gguf::Gguf;
use crate::kernels::ops::YarnParams;

#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    pub arch: Arch,
    pub n_vocab: usize,
    pub n_embd: usize,
    /// The layers the forward pass runs (`block_count` less the NextN layers).
    pub n_layer: usize,
    /// `nextn_predict_layers`: multi-token-prediction layers stored past the trunk as
    /// `blk.{n_layer}…` (GLM-4.5, DeepSeek-V3). llama.cpp's decoding never runs them; they are
    /// loaded past, not read.
    pub n_layer_nextn: usize,
    pub n_ff: usize,
    pub n_head: usize,
    pub n_head_kv: usize,
    /// A key head's values (and a query head's).
    pub head_dim: usize,
    /// A value head's values: `head_dim` in every family but DeepSeek's unabsorbed form.
    pub head_dim_v: usize,
    pub n_ctx_train: usize,
    pub rms_eps: f32,
    pub rope_freq_base: f32,
    /// Rotated dimensions per head.
    pub n_rot: usize,
    /// Linear position scaling (`1/rope.scaling.factor` when `rope.scaling.type = linear`).
    pub rope_freq_scale: f32,
    /// What the family's layers do beyond llama's.
    pub recipe: Recipe,
    /// The experts of a mixture-of-experts model (every layer's FFN), if it is one.
    pub moe: Option<MoeShape>,
    /// The ranks of latent attention, for a family whose recipe attends so.
    pub mla: Option<Mla>,
    /// YaRN's RoPE scaling (`rope.scaling.type = yarn`; latent attention's families and gpt-oss).
    pub yarn: Option<Yarn>,
}

/// YaRN's parameters: what RoPE takes, and the attention temperature's log multiplier.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Yarn {
    pub rope: YarnParams,
    /// `rope.scaling.yarn_log_multiplier` as llama.cpp holds it (the file's value ÷ 0.1).
    pub log_mul: f32,
}

/// Multi-head latent attention's sizes (DeepSeek-V2/V3). The cache keeps, per token, the
/// latent vector (`kv_lora`) and the rotated key (`rope`): `head_dim` = `kv_lora + rope`
/// values, one "KV head" every query head reads; a query head is `nope + rope` values before
/// it absorbs `attn_k_b` and `kv_lora + rope` after; a head's output is `kv_lora` values
/// before `attn_v_b` decompresses it to `v_head`.
///
/// Files of the older unabsorbed form (`joint`: one `attn_kv_b` a layer, no `key_length_mla`)
/// run as llama.cpp runs them: `attn_kv_b` decompresses the latent vector into every head's
/// key (`nope`, then the shared rotated key) and value (`v_head`), and the cache keeps those
/// per head (`head_dim` = `nope + rope`, `head_dim_v` = `v_head`, a KV head per query head).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Mla {
    /// `attention.q_lora_rank`: the query's low rank (0: a full-rank `attn_q`).
    pub q_lora: usize,
    /// `attention.kv_lora_rank`.
    pub kv_lora: usize,
    /// A query head's values that skip RoPE (`key_length_mla − rope.dimension_count`).
    pub nope: usize,
    /// A head's rotated values (`rope.dimension_count`).
    pub rope: usize,
    /// `attention.value_length_mla`: a head's output after `attn_v_b`.
    pub v_head: usize,
    /// The softmax's scale: 1/√(nope + rope), times YaRN's attention factor squared.
    pub kq_scale: f32,
    /// The unabsorbed form: one `attn_kv_b`, per-head keys and values in the cache.
    pub joint: bool,
}

impl Mla {
    /// A query head's values as projected (`nope + rope`).
    pub fn q_head(&self) -> usize {
        self.nope + self.rope
    }
}

/// A mixture-of-experts FFN's shape (`{arch}.expert_count` > 0) and its routing.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MoeShape {
    /// Experts per layer.
    pub n_expert: usize,
    /// Experts each token is routed to (top-k).
    pub n_used: usize,
    /// Width of one expert's FFN.
    pub n_ff: usize,
    /// How a token picks its experts (the family's, from its recipe; the groups the file's).
    pub routing: Routing,
    /// Shared experts every token runs (`expert_shared_count`; 0: none), together one FFN of
    /// width `n_shared × n_ff`.
    pub n_shared: usize,
    /// `leading_dense_block_count`: layers `0..dense_lead` have a dense FFN of
    /// `feed_forward_length`; the rest the experts.
    pub dense_lead: usize,
}

impl MoeShape {
    /// Whether layer `il` is a mixture of experts (not one of the leading dense layers).
    pub fn is_moe_layer(&self, il: usize) -> bool {
        il >= self.dense_lead
    }

    /// The shared experts' FFN width (0: none).
    pub fn shared_ff(&self) -> usize {
        self.n_shared * self.n_ff
    }
}

/// llama.cpp's limit on experts per layer (`LLAMA_MAX_EXPERTS`).
pub const MAX_EXPERTS: usize = 1024;

/// The experts `g` declares for a family whose recipe says `moe`, checked as llama.cpp checks
/// them: a count of 0 or none is a dense model (refused for a family that has only MoE
/// layers), a used count between 1 and the count, an expert width where the recipe says.
fn moe_shape(
    g: &Gguf,
    arch: Arch,
    moe: &Moe,
    (n_ff, n_layer): (usize, usize),
) -> Result<Option<MoeShape>, ModelError> {
    let k = |s: &str| format!("{}.{s}", arch.name());
    let count = |key: &str| -> Result<Option<u64>, ModelError> {
        match g.get(key) {
            None => Ok(None),
            Some(v) => v.as_u64().map(Some).ok_or_else(|| ModelError::BadKey {
                key: key.into(),
                why: format!(
                    "should be a non-negative integer but is a {} (per-layer expert counts are \
                     not supported)",
                    v.type_name()
                ),
            }),
        }
    };
    if moe.layers == Need::No {
        return Ok(None);
    }
    let n_expert = count(&k("expert_count"))?.unwrap_or(0);
    if n_expert == 0 {
        if moe.layers == Need::Yes {
            return Err(ModelError::BadKey {
                key: k("expert_count"),
                why: format!(
                    "is missing or 0, and every {} layer is a mixture of experts",
                    arch.name()
                ),
            });
        }
        return Ok(None);
    }
    if n_expert > MAX_EXPERTS as u64 {
        return Err(ModelError::BadKey {
            key: k("expert_count"),
            why: format!("= {n_expert} is more than llama.cpp's {MAX_EXPERTS}"),
        });
    }
    let used_key = k("expert_used_count");
    let n_used = count(&used_key)?.ok_or_else(|| ModelError::MissingKey(used_key.clone()))?;
    if n_used == 0 || n_used > n_expert {
        return Err(ModelError::BadKey {
            key: used_key,
            why: format!("= {n_used} must be between 1 and the expert count {n_expert}"),
        });
    }
    let n_used = n_used as usize;
    let n_ff = match moe.width {
        ExpertWidth::ExpertKey => match opt_u64(g, &k("expert_feed_forward_length"))? {
            Some(f) => f as usize,
            None => n_ff / n_used,
        },
        ExpertWidth::FeedForward => n_ff,
    };
    if n_ff == 0 {
        return Err(ModelError::BadKey {
            key: k("expert_feed_forward_length"),
            why: "gives experts of width 0".into(),
        });
    }
    let n_shared = match moe.shared {
        Need::No => 0,
        Need::Optional => count(&k("expert_shared_count"))?.unwrap_or(0),
        Need::Yes => {
            let key = k("expert_shared_count");
            match count(&key)? {
                None => return Err(ModelError::MissingKey(key)),
                Some(0) => {
                    return Err(ModelError::BadKey {
                        key,
                        why: format!(
                            "= 0, and every {} MoE layer has a shared expert",
                            arch.name()
                        ),
                    })
                }
                Some(n) => n,
            }
        }
    };
    if n_shared > n_expert {
        return Err(ModelError::BadKey {
            key: k("expert_shared_count"),
            why: format!("= {n_shared} is more than the expert count {n_expert}"),
        });
    }
    let dense_lead = match moe.dense_lead {
        false => 0,
        true => count(&k("leading_dense_block_count"))?.unwrap_or(0),
    };
    if dense_lead > n_layer as u64 {
        return Err(ModelError::BadKey {
            key: k("leading_dense_block_count"),
            why: format!("= {dense_lead} is more than the {n_layer} layers"),
        });
    }
    let mut routing = moe.routing;
    routing.groups = expert_groups(g, arch, n_expert as usize)?;
    Ok(Some(MoeShape {
        n_expert: n_expert as usize,
        n_used,
        n_ff,
        routing,
        n_shared: n_shared as usize,
        dense_lead: dense_lead as usize,
    }))
}

/// The file's expert groups (`expert_group_count`, `expert_group_used_count`; any family, as
/// llama.cpp reads them), checked as llama.cpp asserts them: fewer groups than experts, and
/// where there is more than one group, a count that divides the experts (so each group has the
/// two experts it is scored by) and between 1 and count − 1 used. None for 0 or 1 group.
fn expert_groups(
    g: &Gguf,
    arch: Arch,
    n_expert: usize,
) -> Result<Option<ExpertGroups>, ModelError> {
    let (count_key, used_key) = (
        format!("{}.expert_group_count", arch.name()),
        format!("{}.expert_group_used_count", arch.name()),
    );
    let read = |key: &str| -> Result<usize, ModelError> {
        match g.get(key) {
            None => Ok(0),
            Some(v) => v
                .as_u64()
                .map(|n| n as usize)
                .ok_or_else(|| ModelError::BadKey {
                    key: key.into(),
                    why: format!(
                        "should be a non-negative integer but is a {}",
                        v.type_name()
                    ),
                }),
        }
    };
    let (count, used) = (read(&count_key)?, read(&used_key)?);
    let bad = |key: &str, why: String| {
        Err(ModelError::BadKey {
            key: key.into(),
            why,
        })
    };
    if count >= n_expert {
        return bad(
            &count_key,
            format!("= {count} must be less than the expert count {n_expert}"),
        );
    }
    if count <= 1 {
        return Ok(None);
    }
    if !n_expert.is_multiple_of(count) {
        return bad(
            &count_key,
            format!("= {count} does not divide the expert count {n_expert}"),
        );
    }
    if used == 0 || used >= count {
        return bad(
            &used_key,
            format!("= {used} must be between 1 and the group count {count} less one"),
        );
    }
    Ok(Some(ExpertGroups { count, used }))
}

/// Upper bound on any single dimension we accept from metadata (guards absurd allocations).
const MAX_DIM: u64 = 1 << 24;

fn req_u64(g: &Gguf, key: &str) -> Result<u64, ModelError> {
    let v = g
        .get(key)
        .ok_or_else(|| ModelError::MissingKey(key.into()))?;
    let n = v.as_u64().ok_or_else(|| ModelError::BadKey {
        key: key.into(),
        why: format!(
            "should be a non-negative integer but is a {}",
            v.type_name()
        ),
    })?;
    if n == 0 || n > MAX_DIM {
        return Err(ModelError::BadKey {
            key: key.into(),
            why: format!("= {n} is out of range 1..={MAX_DIM}"),
        });
    }
    Ok(n)
}

/// An optional non-negative integer key.
pub(crate) fn opt_u64(g: &Gguf, key: &str) -> Result<Option<u64>, ModelError> {
    match g.get(key) {
        None => Ok(None),
        Some(_) => req_u64(g, key).map(Some),
    }
}

pub(crate) fn opt_f32(g: &Gguf, key: &str) -> Result<Option<f32>, ModelError> {
    match g.get(key) {
        None => Ok(None),
        Some(v) => v
            .as_f64()
            .map(|x| Some(x as f32))
            .ok_or_else(|| ModelError::BadKey {
                key: key.into(),
                why: format!("should be a number but is a {}", v.type_name()),
            }),
    }
}

impl Config {
    pub fn from_gguf(g: &Gguf) -> Result<Config, ModelError> {
        let name = g
            .get("general.architecture")
            .ok_or_else(|| ModelError::MissingKey("general.architecture".into()))?
            .as_str()
            .ok_or_else(|| ModelError::BadKey {
                key: "general.architecture".into(),
                why: "should be a string".into(),
            })?
            .to_string();
        let arch =
            Arch::from_name(&name).ok_or_else(|| ModelError::UnknownArchitecture(name.clone()))?;
        let k = |s: &str| format!("{name}.{s}");
        let n_embd = req_u64(g, &k("embedding_length"))? as usize;
        let n_head = req_u64(g, &k("attention.head_count"))? as usize;
        let n_head_kv = match g.get(&k("attention.head_count_kv")) {
            // One count per layer (Gemma 4): its recipe reads them, below.
            Some(v) if v.as_array().is_some() && arch == Arch::Gemma4 => n_head,
            Some(_) => req_u64(g, &k("attention.head_count_kv"))? as usize,
            None => n_head,
        };
        if !n_head.is_multiple_of(n_head_kv) {
            return Err(ModelError::BadKey {
                key: k("attention.head_count_kv"),
                why: format!("= {n_head_kv} does not divide the head count {n_head}"),
            });
        }
        let head_dim = match g.get(&k("attention.key_length")) {
            Some(_) => req_u64(g, &k("attention.key_length"))? as usize,
            None => {
                if !n_embd.is_multiple_of(n_head) {
                    return Err(ModelError::BadKey {
                        key: k("attention.head_count"),
                        why: format!("= {n_head} does not divide the embedding length {n_embd}"),
                    });
                }
                n_embd / n_head
            }
        };
        let latent = arch.recipe_attention() == AttentionKind::Latent;
        if let Some(v) = g.get(&k("attention.value_length")).filter(|_| !latent) {
            if v.as_u64() != Some(head_dim as u64) {
                return Err(ModelError::BadKey {
                    key: k("attention.value_length"),
                    why: "differs from the key length, which no supported family does".into(),
                });
            }
        }
        let n_rot = match g.get(&k("rope.dimension_count")) {
            Some(_) => req_u64(g, &k("rope.dimension_count"))? as usize,
            None => head_dim,
        };
        if n_rot > head_dim || n_rot % 2 != 0 {
            return Err(ModelError::BadKey {
                key: k("rope.dimension_count"),
                why: format!("= {n_rot} must be even and at most the head size {head_dim}"),
            });
        }
        let n_vocab = match g.get(&k("vocab_size")) {
            Some(_) => req_u64(g, &k("vocab_size"))? as usize,
            None => match g.get("tokenizer.ggml.tokens").and_then(|v| v.as_array()) {
                Some(a) => a.len(),
                None => return Err(ModelError::MissingKey("tokenizer.ggml.tokens".into())),
            },
        };
        let mut rope_freq_scale = 1.0;
        let mut yarn = None;
        let scaling = g.get(&k("rope.scaling.type")).and_then(|v| v.as_str());
        if let Some(t) = scaling {
            let factor = opt_f32(g, &k("rope.scaling.factor"))?.unwrap_or(1.0);
            match t {
                "none" => {}
                "linear" => {
                    if factor <= 0.0 {
                        return Err(ModelError::BadKey {
                            key: k("rope.scaling.factor"),
                            why: format!("= {factor} must be positive"),
                        });
                    }
                    rope_freq_scale = 1.0 / factor;
                }
                // Llama-3 frequency scaling is carried by the `rope_freqs.weight` tensor.
                "llama3" => {}
                "yarn" if latent || arch == Arch::GptOss => {
                    if factor <= 0.0 {
                        return Err(ModelError::BadKey {
                            key: k("rope.scaling.factor"),
                            why: format!("= {factor} must be positive"),
                        });
                    }
                    rope_freq_scale = 1.0 / factor;
                    let n_ctx_train = req_u64(g, &k("context_length"))? as usize;
                    yarn = Some(match arch {
                        Arch::GptOss => super::arch::gpt_oss_yarn(g, rope_freq_scale, n_ctx_train)?,
                        _ => super::mla::yarn(g, arch.name(), rope_freq_scale, n_ctx_train)?,
                    });
                }
                other => {
                    let also = if latent || arch == Arch::GptOss {
                        ", yarn"
                    } else {
                        ""
                    };
                    return Err(ModelError::BadKey {
                        key: k("rope.scaling.type"),
                        why: format!(
                            "= '{other}' is not supported for {name} (none, linear, llama3{also})"
                        ),
                    });
                }
            }
        }
        if let Some(s) = opt_f32(g, &k("rope.scale_linear"))? {
            if s > 0.0 {
                rope_freq_scale = 1.0 / s;
            }
        }
        let n_layer_all = req_u64(g, &k("block_count"))? as usize;
        let nextn_key = k("nextn_predict_layers");
        let n_layer_nextn = match g.get(&nextn_key) {
            None => 0,
            Some(v) => v.as_u64().ok_or_else(|| ModelError::BadKey {
                key: nextn_key.clone(),
                why: format!(
                    "should be a non-negative integer but is a {}",
                    v.type_name()
                ),
            })? as usize,
        };
        if n_layer_nextn >= n_layer_all {
            return Err(ModelError::BadKey {
                key: nextn_key,
                why: format!("= {n_layer_nextn} leaves none of the {n_layer_all} blocks to run"),
            });
        }
        let n_layer = n_layer_all - n_layer_nextn;
        let shape = Shape {
            n_embd,
            n_layer,
            head_dim,
        };
        let mut recipe = arch.recipe(g, &shape)?;
        if let (Arch::GptOss, Some(swa)) = (arch, recipe.swa.as_mut()) {
            // gpt-oss's local layers scale positions as the full ones do (llama.cpp copies
            // `rope_freq_scale_train`).
            swa.freq_scale = rope_freq_scale;
        }
        let n_head_kv = match &recipe.local_shape {
            None => n_head_kv,
            Some(l) => {
                for kv in [l.global_kv_heads, l.n_head_kv] {
                    if kv == 0 || !n_head.is_multiple_of(kv) {
                        return Err(ModelError::BadKey {
                            key: k("attention.head_count_kv"),
                            why: format!("= {kv} does not divide the head count {n_head}"),
                        });
                    }
                }
                l.global_kv_heads
            }
        };
        // One width per layer (Gemma 4's double-wide MLP): the widest sizes the buffers.
        let n_ff = match &recipe.ff_layers {
            Some(ff) => ff.iter().copied().max().unwrap_or(0),
            None => req_u64(g, &k("feed_forward_length"))? as usize,
        };
        let mla = match recipe.attention {
            AttentionKind::Gqa => None,
            AttentionKind::Latent => Some(super::mla::mla_shape(
                g,
                arch.name(),
                (n_head, n_head_kv, head_dim, n_rot),
                (rope_freq_scale, yarn.as_ref()),
            )?),
        };
        // Only DeepSeek's unabsorbed form keeps values of another size than its keys.
        let head_dim_v = match mla {
            Some(m) if m.joint => m.v_head,
            _ => head_dim,
        };
        let moe = moe_shape(g, arch, &recipe.moe, (n_ff, n_layer))?;
        Ok(Config {
            n_vocab,
            n_embd,
            n_layer,
            n_layer_nextn,
            n_ff,
            n_head,
            n_head_kv,
            head_dim,
            head_dim_v,
            n_ctx_train: req_u64(g, &k("context_length"))? as usize,
            rms_eps: opt_f32(g, &k("attention.layer_norm_rms_epsilon"))?.unwrap_or(1e-5),
            rope_freq_base: opt_f32(g, &k("rope.freq_base"))?.unwrap_or(10000.0),
            n_rot,
            rope_freq_scale,
            arch,
            recipe,
            moe,
            mla,
            yarn,
        })
    }

    /// The config as the sliding-window layers see it where their attention has its own
    /// shape ([`Recipe::local_shape`]: head size, KV heads, rotated dimensions); `None` where
    /// every layer attends alike.
    pub fn local_view(&self) -> Option<Config> {
        let l = self.recipe.local_shape?;
        Some(Config {
            head_dim: l.head_dim,
            head_dim_v: l.head_dim,
            n_head_kv: l.n_head_kv,
            n_rot: l.n_rot,
            ..self.clone()
        })
    }

    /// Layer `il`'s dense FFN width: its own where the file gives one per layer.
    pub fn n_ff_of(&self, il: usize) -> usize {
        self.recipe
            .ff_layers
            .as_ref()
            .map_or(self.n_ff, |ff| ff[il])
    }

    pub fn q_dim(&self) -> usize {
        self.n_head * self.head_dim
    }

    pub fn kv_dim(&self) -> usize {
        self.n_head_kv * self.head_dim
    }

    /// The values of a token's value heads (`kv_dim` but for unabsorbed latent attention).
    pub fn v_dim(&self) -> usize {
        self.n_head_kv * self.head_dim_v
    }

    /// The values of a token's attention output, all heads (`q_dim` but for unabsorbed latent
    /// attention): `attn_output`'s input.
    pub fn att_dim(&self) -> usize {
        self.n_head * self.head_dim_v
    }

    /// The latent cache's sizes where the model keeps one (latent attention in the absorbed
    /// form); `None` for a cache of per-head keys and values.
    pub fn latent_cache(&self) -> Option<&Mla> {
        self.mla.as_ref().filter(|m| !m.joint)
    }

    /// Whether `name` is a tensor of a NextN layer (`blk.N.…` with N past the trunk), which
    /// the loader passes over.
    pub fn is_nextn_tensor(&self, name: &str) -> bool {
        let Some(rest) = name.strip_prefix("blk.") else {
            return false;
        };
        let Some((n, _)) = rest.split_once('.') else {
            return false;
        };
        n.parse::<usize>()
            .is_ok_and(|i| (self.n_layer..self.n_layer + self.n_layer_nextn).contains(&i))
    }
}
