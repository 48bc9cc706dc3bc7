//! Which type each tensor gets under one of llama-quantize's mixture presets (`Q4_K_M`, …).
//!
//! This reproduces the choice llama.cpp makes in `src/llama-quant.cpp` (`llama_tensor_get_type`
//! and `llama_tensor_get_type_impl`, `tensor_allows_quantization`, `tensor_type_fallback`,
//! `tensor_requires_imatrix`, `llama_ftype_get_default_type`), so that `locus quantize` picks
//! the same type for every tensor that llama-quantize does:
//!
//! 1. A tensor is quantized at all only if it has two or more dimensions (trailing 1s do not
//!    count), its name ends in `weight`, it is no norm (`_norm.weight`), no MoE router
//!    (`ffn_gate_inp.weight`), no positional or token-type embedding, and not one of the small
//!    special tensors (conv1d, RWKV time-mix, multimodal position and patch embeddings…). The
//!    others are copied as they are.
//! 2. `--token-embedding-type` decides `token_embd` (and `per_layer_token_embd` unless a
//!    `--tensor-type` pattern names it) and `--output-tensor-type` decides `output.weight`,
//!    with no fallback. A float target (F16, BF16, F32) puts every other tensor in its type.
//! 3. Otherwise a tensor starts from the preset's default type ([`Preset::default_type`]); the
//!    first `--tensor-type` pattern that matches its name (`std::regex_search`) gives its type;
//!    failing that, unless `--pure`, the mixture rules below do, by category (name substring)
//!    and by position (counters over the `attn_v` and `ffn_down` tensors seen so far, in
//!    llama-quantize's processing order: tensors sorted by block number, then by name,
//!    non-block tensors first; a tensor a pattern decided does not move the counters).
//! 4. Whatever was chosen, a row length (`ne[0]`) that is not a multiple of the type's block
//!    size falls back to a 32-wide type ([`fallback`]), or F16 if even that does not divide.
//!
//! The mixture rules (`llama_tensor_get_type_impl`; the IQ1/IQ2 group is IQ1_S, IQ1_M,
//! IQ2_XXS, IQ2_XS, IQ2_S and IQ2_M; "imatrix" means an importance matrix was given):
//! - `output.weight`, and `token_embd.weight` when the model has no `output.weight` (tied
//!   embeddings): `--output-tensor-type` if given; else Q8_0 if the row length is not a
//!   multiple of the default type's block size; else Q5_K for the IQ1/IQ2 group and IQ3_XXS;
//!   else Q6_K unless the default type is Q8_0.
//! - untied `token_embd`: Q2_K for IQ2_XXS, IQ2_XS, IQ1_S and IQ1_M; IQ3_S for IQ2_S, IQ2_M
//!   and IQ3_XXS.
//! - the IQ1/IQ2 group: `attn_v` (and `attn_qkv`, `attn_kv_b`) Q4_K if n_head/n_head_kv ≥ 4
//!   or ≥ 4 experts, else IQ3_S (IQ2_S, IQ2_M) or Q2_K; `attn_k` Q4_K with 8 experts; the
//!   first eighth of the `ffn_down` tensors IQ3_S (IQ2_S, IQ2_M) or Q2_K; `attn_output` Q5_K
//!   with 8 experts, else IQ2_XXS (IQ1_S, IQ1_M) or IQ3_S (IQ2_S, IQ2_M).
//! - `attn_v` (also fused `attn_qkv` and `attn_kv_b`), the other presets: Q2_K → Q3_K (Q4_K
//!   if n_head/n_head_kv ≥ 4); Q2_K_S → Q4_K if n_gqa ≥ 4; IQ3_XXS → Q4_K if n_gqa ≥ 4, else
//!   IQ3_XXS with an imatrix and IQ3_S without; IQ3_XS/IQ3_S → Q4_K if n_gqa ≥ 4; IQ3_M →
//!   Q4_K; Q3_K_M → Q5_K for the first two, then Q4_K; Q3_K_L → Q5_K; IQ4_NL/IQ4_XS → Q5_K
//!   if n_gqa ≥ 4; Q4_K_M/Q5_K_M → Q6_K where [`use_more_bits`]; Q4_K_S → Q5_K for the first
//!   four; then a 70B model's Q3_K/Q4_K → Q5_K, and everything → Q8_0 with 8 experts.
//! - `attn_k`: Q8_0 with 8 experts; else IQ3_XS → IQ3_XXS, IQ3_XXS → IQ2_S.
//! - `attn_q`: IQ3_XS → IQ3_XXS, IQ3_XXS → IQ2_S.
//! - `ffn_down` (layer i of n): Q2_K → Q3_K; Q2_K_S → Q4_K for i < n/8; IQ3_XXS without an
//!   imatrix → Q4_K for i < n/8, else Q3_K; Q3_K_M → Q5_K for i < n/16, else Q4_K; IQ3_M →
//!   Q4_K for i < n/8 (and with 8 experts where [`use_more_bits`]); Q3_K_L → Q5_K; Q4_K_M →
//!   Q6_K where [`use_more_bits`]; IQ4_NL/IQ4_XS without an imatrix → Q5_K for i < n/8;
//!   Q5_K_M → Q6_K where [`use_more_bits`]; Q4_K_S → Q5_K for i < n/8; Q4_0/Q5_0 with an
//!   imatrix → Q4_1/Q5_1 for i < n/8.
//! - `attn_output`: with 8 experts Q5_K for Q2_K, IQ3_XS, IQ3_XXS, Q3_K_S, Q3_K_M, IQ4_NL,
//!   Q4_K_S, Q4_K_M, IQ3_S, IQ3_M and IQ4_XS; else Q2_K → Q3_K, IQ3_XXS → IQ3_S, Q3_K_M →
//!   Q4_K, Q3_K_L → Q5_K, IQ3_M → Q4_K.
//! - `ffn_gate`, `ffn_up`: IQ3_XS → IQ3_XXS for n/8 ≤ i < 7n/8.
//! - MXFP4_MOE: `output` (and tied `token_embd`) Q8_0 unless `--output-tensor-type`; every
//!   other tensor, before the rules above, MXFP4 if it is 3-D with more than one expert
//!   (`ne[2] > 1`), else Q8_0. (llama.cpp limits the experts of `bailingmoe3` to the FFN
//!   tensors, an architecture locus does not run.)
//!
//! [`MixPlan::requires_imatrix`] says which tensors llama-quantize refuses to write without
//! an importance matrix (`tensor_requires_imatrix`): those planned as IQ1_S, IQ1_M, IQ2_XXS,
//! IQ2_XS, IQ2_S or IQ3_XXS, and Q2_K under Q2_K_S, except `token_embd` and `output`.
//!
//! Not reproduced: the TQ and Q1_0/Q2_0 presets (locus makes none of their types), the
//! Falcon and GLM5-next branches (every arm here is the others' one), `--prune-layers`,
//! `--keep-split` and `--override-kv`.

mod rules;

use std::collections::HashMap;
use std::fmt;

use super::tensor_regex::{Regex, RegexError};
use crate::kernels::GgmlType;
use rules::mixture_type;

/// A llama-quantize mixture preset (a `llama_ftype` other than the float ones).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Preset {
    Q4_0,
    Q4_1,
    Mxfp4Moe,
    Q5_0,
    Q5_1,
    Q8_0,
    Q2K,
    Q2KS,
    Q3KS,
    Q3KM,
    Q3KL,
    Q4KS,
    Q4KM,
    Q5KS,
    Q5KM,
    Q6K,
    Iq4Nl,
    Iq4Xs,
    Iq1S,
    Iq1M,
    Iq2Xxs,
    Iq2Xs,
    Iq2S,
    Iq2M,
    Iq3Xxs,
    Iq3Xs,
    Iq3S,
    Iq3M,
}

/// One preset's facts: its llama-quantize name, its `llama_ftype` (written as
/// `general.file_type`) and its default tensor type (`llama_ftype_get_default_type`).
struct PresetInfo {
    preset: Preset,
    name: &'static str,
    ftype: u32,
    default_type: GgmlType,
}

/// How many presets there are.
const N_PRESETS: usize = 28;

/// Every preset, in llama-quantize's listing order.
const PRESETS: [PresetInfo; N_PRESETS] = [
    info(Preset::Q4_0, "Q4_0", 2, GgmlType::Q4_0),
    info(Preset::Q4_1, "Q4_1", 3, GgmlType::Q4_1),
    info(Preset::Mxfp4Moe, "MXFP4_MOE", 38, GgmlType::Mxfp4),
    info(Preset::Q5_0, "Q5_0", 8, GgmlType::Q5_0),
    info(Preset::Q5_1, "Q5_1", 9, GgmlType::Q5_1),
    info(Preset::Iq2Xxs, "IQ2_XXS", 19, GgmlType::Iq2Xxs),
    info(Preset::Iq2Xs, "IQ2_XS", 20, GgmlType::Iq2Xs),
    // IQ2_S's tensors start from IQ2_XS, IQ2_M's from IQ2_S (llama.cpp's choice).
    info(Preset::Iq2S, "IQ2_S", 28, GgmlType::Iq2Xs),
    info(Preset::Iq2M, "IQ2_M", 29, GgmlType::Iq2S),
    info(Preset::Iq1S, "IQ1_S", 24, GgmlType::Iq1S),
    info(Preset::Iq1M, "IQ1_M", 31, GgmlType::Iq1M),
    info(Preset::Q2K, "Q2_K", 10, GgmlType::Q2K),
    info(Preset::Q2KS, "Q2_K_S", 21, GgmlType::Q2K),
    info(Preset::Iq3Xxs, "IQ3_XXS", 23, GgmlType::Iq3Xxs),
    info(Preset::Iq3S, "IQ3_S", 26, GgmlType::Iq3S),
    info(Preset::Iq3M, "IQ3_M", 27, GgmlType::Iq3S),
    info(Preset::Iq3Xs, "IQ3_XS", 22, GgmlType::Iq3S),
    info(Preset::Q3KS, "Q3_K_S", 11, GgmlType::Q3K),
    info(Preset::Q3KM, "Q3_K_M", 12, GgmlType::Q3K),
    info(Preset::Q3KL, "Q3_K_L", 13, GgmlType::Q3K),
    info(Preset::Iq4Nl, "IQ4_NL", 25, GgmlType::Iq4Nl),
    info(Preset::Iq4Xs, "IQ4_XS", 30, GgmlType::Iq4Xs),
    info(Preset::Q4KS, "Q4_K_S", 14, GgmlType::Q4K),
    info(Preset::Q4KM, "Q4_K_M", 15, GgmlType::Q4K),
    info(Preset::Q5KS, "Q5_K_S", 16, GgmlType::Q5K),
    info(Preset::Q5KM, "Q5_K_M", 17, GgmlType::Q5K),
    info(Preset::Q6K, "Q6_K", 18, GgmlType::Q6K),
    info(Preset::Q8_0, "Q8_0", 7, GgmlType::Q8_0),
];

const fn info(preset: Preset, name: &'static str, ftype: u32, ty: GgmlType) -> PresetInfo {
    PresetInfo {
        preset,
        name,
        ftype,
        default_type: ty,
    }
}

/// llama-quantize's aliases: a bare K-quant name means its `_M` mixture.
const ALIASES: [(&str, Preset); 3] = [
    ("Q3_K", Preset::Q3KM),
    ("Q4_K", Preset::Q4KM),
    ("Q5_K", Preset::Q5KM),
];

impl Preset {
    fn info(self) -> &'static PresetInfo {
        PRESETS
            .iter()
            .find(|p| p.preset == self)
            .expect("every preset is listed in PRESETS")
    }

    /// Parses a preset as llama-quantize does: its name in any case (`q4_k_m`), an alias
    /// (`Q4_K` = `Q4_K_M`), or its `llama_ftype` number (`15`).
    pub fn parse(s: &str) -> Option<Preset> {
        if let Some(p) = PRESETS.iter().find(|p| p.name.eq_ignore_ascii_case(s)) {
            return Some(p.preset);
        }
        if let Some((_, p)) = ALIASES.iter().find(|(n, _)| n.eq_ignore_ascii_case(s)) {
            return Some(*p);
        }
        let code: u32 = s.parse().ok()?;
        PRESETS.iter().find(|p| p.ftype == code).map(|p| p.preset)
    }

    /// The name llama-quantize gives the preset (`Q4_K_M`).
    pub fn name(self) -> &'static str {
        self.info().name
    }

    /// Every preset, in llama-quantize's listing order.
    pub fn all() -> &'static [Preset] {
        const ALL: [Preset; N_PRESETS] = {
            let mut out = [Preset::Q4_0; N_PRESETS];
            let mut i = 0;
            while i < PRESETS.len() {
                out[i] = PRESETS[i].preset;
                i += 1;
            }
            out
        };
        &ALL
    }

    /// The `llama_ftype` llama-quantize writes as `general.file_type`.
    pub fn file_type(self) -> u32 {
        self.info().ftype
    }

    /// The type every quantized tensor starts from before the mixture rules and fallbacks.
    pub fn default_type(self) -> GgmlType {
        self.info().default_type
    }

    /// The IQ1/IQ2 presets, which share one set of rules.
    fn is_iq1_iq2(self) -> bool {
        use Preset as P;
        matches!(
            self,
            P::Iq2Xxs | P::Iq2Xs | P::Iq1S | P::Iq2S | P::Iq2M | P::Iq1M
        )
    }
}

/// The hyper-parameters the mixture rules look at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ModelShape {
    /// `block_count` (llama.cpp's `n_layer_all`): the layer count of the `ffn_*` rules.
    pub n_layer: u32,
    /// Attention heads of layer 0.
    pub n_head: u32,
    /// Key/value heads of layer 0.
    pub n_head_kv: u32,
    /// `expert_count` (0 for a dense model).
    pub n_expert: u32,
    /// Whether llama.cpp classes the model as 70B (`LLM_TYPE_70B`), which gives `attn_v` more
    /// bits; [`ModelShape::new`] works it out for llama and qwen2.
    pub is_70b: bool,
}

/// llama.cpp's layer count of a 70B llama or qwen2 model.
const LAYERS_70B: u32 = 80;

impl ModelShape {
    /// The shape of a model of architecture `arch` (`general.architecture`). `is_70b` follows
    /// llama.cpp's `load_hparams`: llama with 80 layers, no 8 experts and grouped-query attention
    /// (n_head ≠ n_head_kv; equal heads make it 65B), or qwen2 with 80 layers. Other
    /// architectures never count as 70B here (llama.cpp also classes some deci, olmo and jais2
    /// models as 70B; locus runs none of them).
    pub fn new(arch: &str, n_layer: u32, n_head: u32, n_head_kv: u32, n_expert: u32) -> Self {
        let is_70b = n_layer == LAYERS_70B
            && match arch {
                "llama" => n_expert != 8 && n_head != n_head_kv,
                "qwen2" => true,
                _ => false,
            };
        ModelShape {
            n_layer,
            n_head,
            n_head_kv,
            n_expert,
            is_70b,
        }
    }

    /// The shape of a GGUF model, read as llama.cpp's `load_hparams` reads it:
    /// `<arch>.block_count`, `<arch>.attention.head_count` and `…head_count_kv` (a number or a
    /// per-layer array, of which layer 0 counts; no `head_count_kv` means as many as heads) and
    /// `<arch>.expert_count` (0 if absent).
    pub fn from_gguf(g: &super::Gguf<'_>) -> Result<Self, MixError> {
        let arch = g
            .get("general.architecture")
            .and_then(|v| v.as_str())
            .ok_or_else(|| MixError("general.architecture is missing".into()))?;
        let number = |key: &str| -> Option<Result<u32, MixError>> {
            let v = g.get(&format!("{arch}.{key}"))?;
            let n = match v.as_array() {
                Some(a) => a.scalar_f64(0).map(|f| f as u64),
                None => v.as_u64(),
            };
            Some(
                n.and_then(|n| u32::try_from(n).ok())
                    .ok_or_else(|| MixError(format!("{arch}.{key} is no count"))),
            )
        };
        let need = |key: &str| {
            number(key).unwrap_or_else(|| Err(MixError(format!("{arch}.{key} is missing"))))
        };
        let n_head = need("attention.head_count")?;
        let n_head_kv = number("attention.head_count_kv").unwrap_or(Ok(n_head))?;
        let n_expert = number("expert_count").unwrap_or(Ok(0))?;
        Ok(Self::new(
            arch,
            need("block_count")?,
            n_head,
            n_head_kv,
            n_expert,
        ))
    }

    /// `n_head / n_head_kv` (integer division; 0 without key/value heads), llama.cpp's `n_gqa()`.
    pub fn n_gqa(&self) -> u32 {
        self.n_head.checked_div(self.n_head_kv).unwrap_or(0)
    }
}

/// llama-quantize's `--tensor-type PATTERN=TYPE`: tensors whose name the pattern matches
/// anywhere (`std::regex_search`) get TYPE, before any mixture rule.
#[derive(Clone, Debug)]
pub struct TensorTypeOverride {
    pub pattern: Regex,
    pub ty: GgmlType,
}

impl TensorTypeOverride {
    /// Parses `PATTERN=TYPE` as llama-quantize does: split at the first `=`, PATTERN lowered
    /// to ASCII lower case (so `Attn_Q` matches `attn_q`, and `[A-Z]` means `[a-z]`), TYPE a
    /// ggml type name in any case (`q8_0`, `Q4_K`).
    pub fn parse(arg: &str) -> Result<TensorTypeOverride, MixError> {
        let (name, ty) = arg
            .split_once('=')
            .ok_or_else(|| MixError(format!("malformed tensor type '{arg}' (PATTERN=TYPE)")))?;
        if name.is_empty() {
            return Err(MixError(format!("missing tensor name in '{arg}'")));
        }
        if ty.is_empty() {
            return Err(MixError(format!("missing quantization type in '{arg}'")));
        }
        let ty = parse_ggml_type(ty)?;
        let pattern = Regex::new(&name.to_ascii_lowercase())
            .map_err(|e: RegexError| MixError(e.to_string()))?;
        Ok(TensorTypeOverride { pattern, ty })
    }
}

/// A ggml type by name in any case (llama-quantize's `parse_ggml_type`).
pub fn parse_ggml_type(s: &str) -> Result<GgmlType, MixError> {
    GgmlType::from_name(s).ok_or_else(|| MixError(format!("invalid ggml_type '{s}'")))
}

/// llama-quantize's flags that change the plan.
#[derive(Clone, Debug, Default)]
pub struct MixOptions {
    /// `--pure`: every quantized tensor in the default type (fallbacks still apply).
    pub pure: bool,
    /// `--leave-output-tensor`: `output.weight` is copied as it is.
    pub leave_output_tensor: bool,
    /// An importance matrix was given (with at least one entry after the include/exclude
    /// filters): llama-quantize's `qs.has_imatrix`.
    pub has_imatrix: bool,
    /// `--output-tensor-type`.
    pub output_tensor_type: Option<GgmlType>,
    /// `--token-embedding-type`.
    pub token_embedding_type: Option<GgmlType>,
    /// `--tensor-type` (and `--tensor-type-file`), in the order given: the first match wins.
    pub tensor_types: Vec<TensorTypeOverride>,
}

impl MixOptions {
    /// The type of the first `--tensor-type` pattern matching `name`.
    fn manual_type(&self, name: &str) -> Option<GgmlType> {
        self.tensor_types
            .iter()
            .find(|o| o.pattern.is_match(name))
            .map(|o| o.ty)
    }
}

/// Why no plan could be made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MixError(pub String);

impl fmt::Display for MixError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for MixError {}

/// One tensor of a plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedTensor {
    pub name: String,
    pub dims: Vec<u64>,
    /// The type to write; `None` when the tensor is copied as it is (not quantizable). A
    /// `Some` equal to the tensor's current type also means a plain copy in llama-quantize.
    pub target: Option<GgmlType>,
    /// Whether llama-quantize refuses to write it without an importance matrix
    /// (`tensor_requires_imatrix`; only for quantizable tensors).
    pub requires_imatrix: bool,
}

/// What the tensors are quantized to: a preset's mixture, or one float type for all.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scheme {
    Preset(Preset),
    /// F16, BF16 or F32: no mixture, no pattern, no fallback (llama-quantize applies neither
    /// to a type that is not quantized).
    Float(GgmlType),
}

/// The type of every tensor of a model under a preset, worked out up front (the rules depend
/// on counts over the whole tensor list).
#[derive(Clone, Debug)]
pub struct MixPlan {
    tensors: Vec<PlannedTensor>,
    by_name: HashMap<String, usize>,
    n_fallback: usize,
}

/// Substrings of names that are never quantized (`tensor_allows_quantization`): norms, MoE
/// routers and small special-purpose matrices. (GLM5_NEXT's extra list is left out.)
const SKIPPED_SUBSTRINGS: [&str; 20] = [
    "_norm.weight",
    "ffn_gate_inp.weight",
    "ffn_gate_tid2eid.weight",
    "altup",
    "laurel",
    "per_layer_model_proj",
    "ssm_conv1d",
    "shortconv.conv.weight",
    "indexer.k_proj.weight",
    "indexer.q_proj.weight",
    "attn_rel_b.weight",
    ".position_embd",
    "sam.pos_embd",
    "sam.neck.",
    "sam.net_",
    ".rel_pos",
    ".patch_embd",
    ".patch_merger",
    "a.rvq.codebook",
    "mm.a.code_embd",
];

/// RWKV's small 2-D weights, never quantized: `time_mix_<one of these words>.weight`.
const RWKV_TIME_MIX: &str = "first w0 w1 w2 v0 v1 v2 a0 a1 a2 g1 g2 decay_w1 decay_w2 lerp_fused";

/// Whole names never quantized: positional embeddings and BERT's token types.
const SKIPPED_NAMES: [&str; 2] = ["position_embd.weight", "token_types.weight"];

/// The dimension count ggml sees: trailing 1s do not count, and there is always at least one.
fn ggml_n_dims(dims: &[u64]) -> usize {
    dims.iter().rposition(|&d| d > 1).map_or(1, |i| i + 1)
}

/// Whether llama-quantize quantizes this tensor at all (`tensor_allows_quantization`).
pub fn allows_quantization(name: &str, dims: &[u64], opts: &MixOptions) -> bool {
    ggml_n_dims(dims) >= 2
        && name.ends_with("weight")
        && (!opts.leave_output_tensor || name != "output.weight")
        && !SKIPPED_NAMES.contains(&name)
        && !SKIPPED_SUBSTRINGS.iter().any(|s| name.contains(s))
        && !RWKV_TIME_MIX
            .split(' ')
            .any(|s| name.contains(&format!("time_mix_{s}.weight")))
}

/// Gemma 3n's per-layer token embeddings, a token embedding to the rules.
const PER_LAYER_TOKEN_EMBD: &str = "per_layer_token_embd.weight";

/// A tensor's role as the mixture rules see it (`tensor_get_category`, first match wins).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Category {
    TokenEmbd,
    AttnQkv,
    AttnKvB,
    AttnV,
    AttnK,
    AttnQ,
    AttnOutput,
    FfnUp,
    FfnGate,
    FfnDown,
    Output,
    Other,
}

impl Category {
    fn of(name: &str) -> Category {
        if name == "output.weight" {
            return Category::Output;
        }
        if name == "token_embd.weight" || name == PER_LAYER_TOKEN_EMBD {
            return Category::TokenEmbd;
        }
        const BY_SUBSTRING: [(&str, Category); 9] = [
            ("attn_qkv.weight", Category::AttnQkv),
            ("attn_kv_b.weight", Category::AttnKvB),
            ("attn_v.weight", Category::AttnV),
            ("attn_k.weight", Category::AttnK),
            ("attn_q.weight", Category::AttnQ),
            ("attn_output.weight", Category::AttnOutput),
            ("ffn_up", Category::FfnUp),
            ("ffn_gate", Category::FfnGate),
            ("ffn_down", Category::FfnDown),
        ];
        BY_SUBSTRING
            .iter()
            .find(|(s, _)| name.contains(s))
            .map_or(Category::Other, |&(_, c)| c)
    }

    /// The value-projection-like tensors, handled by the `attn_v` rules. (llama.cpp has a later
    /// branch for `attn_qkv` alone, but this one always catches it first.)
    fn is_attn_v(self) -> bool {
        matches!(
            self,
            Category::AttnV | Category::AttnQkv | Category::AttnKvB
        )
    }
}

/// llama.cpp's `use_more_bits`: the first and last eighth of the layers, and every third layer
/// in between, get more bits.
pub fn use_more_bits(i_layer: i64, n_layers: i64) -> bool {
    i_layer < n_layers / 8 || i_layer >= 7 * n_layers / 8 || (i_layer - n_layers / 8) % 3 == 2
}

/// The block number of a `blk.N.…` name, as C's `sscanf(name, "blk.%d.", …)` reads it.
fn block_number(name: &str) -> Option<i64> {
    let rest = name.strip_prefix("blk.")?;
    let rest = rest.trim_start_matches(|c: char| c.is_ascii_whitespace());
    let sign_len = usize::from(rest.starts_with(['+', '-']));
    let digits = rest[sign_len..]
        .bytes()
        .take_while(u8::is_ascii_digit)
        .count();
    if digits == 0 {
        return None;
    }
    rest[..sign_len + digits].parse().ok()
}

/// The type that replaces `target` when rows of `ncols` elements are not whole blocks of it
/// (`tensor_type_fallback`): IQ4_XS → IQ4_NL, Q2_K/Q3_K → Q4_0, Q4_K → Q5_0, Q5_K → Q5_1,
/// Q6_K → Q8_0; a 32-wide type stays; and if the replacement does not fit either, F16.
pub fn fallback(target: GgmlType, ncols: u64) -> Result<GgmlType, MixError> {
    let fits = |t: GgmlType| ncols.is_multiple_of(t.block_size() as u64);
    if fits(target) {
        return Ok(target);
    }
    let small = match target {
        GgmlType::Iq1S
        | GgmlType::Iq1M
        | GgmlType::Iq2Xxs
        | GgmlType::Iq2Xs
        | GgmlType::Iq2S
        | GgmlType::Iq3Xxs
        | GgmlType::Iq3S
        | GgmlType::Iq4Xs => GgmlType::Iq4Nl,
        GgmlType::Q2K | GgmlType::Q3K | GgmlType::Tq1_0 | GgmlType::Tq2_0 => GgmlType::Q4_0,
        GgmlType::Q4K => GgmlType::Q5_0,
        GgmlType::Q5K => GgmlType::Q5_1,
        GgmlType::Q6K => GgmlType::Q8_0,
        t if t.block_size() <= crate::kernels::blocks::QK => t,
        t => {
            return Err(MixError(format!(
                "no tensor type fallback is defined for type {}",
                t.name()
            )))
        }
    };
    Ok(if fits(small) { small } else { GgmlType::F16 })
}

/// The counters llama-quantize keeps while it walks the tensors (`quantize_state_impl`).
struct Counters {
    n_attention_wv: i64,
    i_attention_wv: i64,
    n_ffn: i64,
    i_ffn_down: i64,
    i_ffn_gate: i64,
    i_ffn_up: i64,
    tied_embeddings: bool,
}

impl MixPlan {
    /// Plans every tensor of a model (`tensors`: names and GGUF dims, `dims[0]` the row length,
    /// in any order) under `scheme` (a [`Preset`] or [`Scheme::Float`]). The tensors are
    /// walked in llama-quantize's order (by block number, then by name; non-block tensors
    /// first), which is also the order it writes them in ([`MixPlan::tensors`]). Fails only
    /// where llama-quantize would: a MoE tensor whose name has no valid block number, a type
    /// with no fallback.
    pub fn new<'a, S, I>(
        scheme: S,
        shape: &ModelShape,
        opts: &MixOptions,
        tensors: I,
    ) -> Result<MixPlan, MixError>
    where
        S: Into<Scheme>,
        I: IntoIterator<Item = (&'a str, &'a [u64])>,
    {
        let scheme = scheme.into();
        let mut list: Vec<(&str, &[u64])> = tensors.into_iter().collect();
        list.sort_by(|a, b| {
            let la = block_number(a.0).unwrap_or(-1);
            let lb = block_number(b.0).unwrap_or(-1);
            la.cmp(&lb).then_with(|| a.0.as_bytes().cmp(b.0.as_bytes()))
        });
        let mut c = Counters {
            n_attention_wv: list
                .iter()
                .filter(|(n, _)| Category::of(n).is_attn_v())
                .count() as i64,
            i_attention_wv: 0,
            n_ffn: i64::from(shape.n_layer),
            i_ffn_down: 0,
            i_ffn_gate: 0,
            i_ffn_up: 0,
            tied_embeddings: !list
                .iter()
                .any(|(n, _)| Category::of(n) == Category::Output),
        };
        let mut plan = MixPlan {
            tensors: Vec::with_capacity(list.len()),
            by_name: HashMap::with_capacity(list.len()),
            n_fallback: 0,
        };
        for (name, dims) in list {
            let target = if allows_quantization(name, dims, opts) {
                let (ty, fell_back) = tensor_type(&mut c, scheme, shape, opts, name, dims)?;
                plan.n_fallback += usize::from(fell_back);
                Some(ty)
            } else {
                None
            };
            let requires_imatrix = match (scheme, target) {
                (Scheme::Preset(p), Some(ty)) => requires_imatrix(name, ty, p),
                _ => false,
            };
            plan.by_name.insert(name.to_string(), plan.tensors.len());
            plan.tensors.push(PlannedTensor {
                name: name.to_string(),
                dims: dims.to_vec(),
                target,
                requires_imatrix,
            });
        }
        Ok(plan)
    }

    /// The first tensor (in processing order) that llama-quantize would refuse to write
    /// without an importance matrix, with its planned type.
    pub fn first_requiring_imatrix(&self) -> Option<(&str, GgmlType)> {
        self.tensors
            .iter()
            .find(|t| t.requires_imatrix)
            .and_then(|t| Some((t.name.as_str(), t.target?)))
    }

    /// The type to write tensor `name` in; `None` for a tensor copied as it is, or one the plan
    /// does not know.
    pub fn type_for(&self, name: &str) -> Option<GgmlType> {
        self.by_name.get(name).and_then(|&i| self.tensors[i].target)
    }

    /// Every tensor in llama-quantize's processing (and output file) order.
    pub fn tensors(&self) -> &[PlannedTensor] {
        &self.tensors
    }

    /// How many tensors fell back to another type because of their row length.
    pub fn n_fallback(&self) -> usize {
        self.n_fallback
    }
}

impl From<Preset> for Scheme {
    fn from(p: Preset) -> Scheme {
        Scheme::Preset(p)
    }
}

/// llama.cpp's `tensor_requires_imatrix`: the very-low-bit types, and Q2_K in a Q2_K_S file,
/// except for the token embeddings and the output.
pub fn requires_imatrix(name: &str, ty: GgmlType, preset: Preset) -> bool {
    use GgmlType as T;
    if matches!(Category::of(name), Category::TokenEmbd | Category::Output) {
        return false;
    }
    match ty {
        T::Iq3Xxs | T::Iq2Xxs | T::Iq2Xs | T::Iq2S | T::Iq1M | T::Iq1S => true,
        T::Q2K => preset == Preset::Q2KS,
        _ => false,
    }
}

/// `llama_tensor_get_type` for a tensor that may be quantized: its type, and whether the
/// fallback changed it.
fn tensor_type(
    c: &mut Counters,
    scheme: Scheme,
    shape: &ModelShape,
    opts: &MixOptions,
    name: &str,
    dims: &[u64],
) -> Result<(GgmlType, bool), MixError> {
    let category = Category::of(name);
    if let Some(ty) = opts.token_embedding_type {
        // per_layer_token_embd follows it too, unless a --tensor-type pattern names it.
        let named = name == PER_LAYER_TOKEN_EMBD && opts.manual_type(name).is_some();
        if category == Category::TokenEmbd && !named {
            return Ok((ty, false));
        }
    }
    if let (Some(ty), Category::Output) = (opts.output_tensor_type, category) {
        return Ok((ty, false));
    }
    let preset = match scheme {
        Scheme::Float(ty) => return Ok((ty, false)),
        Scheme::Preset(p) => p,
    };
    let mut ty = preset.default_type();
    match opts.manual_type(name) {
        Some(manual) => ty = manual,
        None if !opts.pure => ty = mixture_type(c, preset, shape, opts, name, dims)?,
        None => {}
    }
    let ncols = dims.first().copied().unwrap_or(1);
    let fell_back = fallback(ty, ncols)?;
    Ok((fell_back, fell_back != ty))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_parse_like_llama_quantize() {
        for &p in Preset::all() {
            assert_eq!(Preset::parse(p.name()), Some(p));
            assert_eq!(Preset::parse(&p.name().to_lowercase()), Some(p));
            assert_eq!(Preset::parse(&p.file_type().to_string()), Some(p));
        }
        assert_eq!(Preset::all().len(), PRESETS.len());
        assert_eq!(Preset::parse("q4_k"), Some(Preset::Q4KM));
        assert_eq!(Preset::parse("Q3_K"), Some(Preset::Q3KM));
        assert_eq!(Preset::parse("Q5_K"), Some(Preset::Q5KM));
        assert_eq!(
            Preset::parse("iq2_s").map(Preset::default_type),
            Some(GgmlType::Iq2Xs)
        );
        assert_eq!(Preset::parse("21"), Some(Preset::Q2KS));
        // Presets of types locus does not know, and non-presets, are refused.
        for s in ["TQ1_0", "TQ2_0", "Q1_0", "F16", "", "Q4", "1", "32"] {
            assert_eq!(Preset::parse(s), None, "{s:?}");
        }
    }

    #[test]
    fn fallbacks_follow_tensor_type_fallback() {
        use GgmlType as T;
        let cases = [
            (T::Q4K, 576, T::Q5_0),
            (T::Q5K, 576, T::Q5_1),
            (T::Q6K, 576, T::Q8_0),
            (T::Q2K, 576, T::Q4_0),
            (T::Q3K, 576, T::Q4_0),
            (T::Iq4Xs, 576, T::Iq4Nl),
            (T::Q4K, 512, T::Q4K),
            (T::Q4_0, 576, T::Q4_0),
            // Neither the type nor its fallback fits: F16.
            (T::Q4K, 40, T::F16),
            (T::Q4_0, 40, T::F16),
        ];
        for (ty, ncols, want) in cases {
            assert_eq!(fallback(ty, ncols), Ok(want), "{} × {ncols}", ty.name());
        }
        assert!(fallback(T::Q8K, 100).is_err());
    }

    #[test]
    fn one_dimensional_and_special_tensors_are_kept() {
        let o = MixOptions::default();
        assert!(!allows_quantization("blk.0.attn_q_norm.weight", &[128], &o));
        assert!(!allows_quantization(
            "blk.0.attn_norm.weight",
            &[576, 1],
            &o
        ));
        assert!(!allows_quantization(
            "blk.0.ffn_gate_inp.weight",
            &[576, 8],
            &o
        ));
        assert!(!allows_quantization("blk.0.attn_q.bias", &[576, 2], &o));
        assert!(!allows_quantization(
            "blk.0.time_mix_decay_w2.weight",
            &[64, 576],
            &o
        ));
        assert!(!allows_quantization("position_embd.weight", &[576, 64], &o));
        assert!(allows_quantization("blk.0.attn_q.weight", &[576, 576], &o));
        assert!(allows_quantization("output.weight", &[576, 100], &o));
        let leave = MixOptions {
            leave_output_tensor: true,
            ..o
        };
        assert!(!allows_quantization("output.weight", &[576, 100], &leave));
        assert_eq!(ggml_n_dims(&[576, 1, 1]), 1);
        assert_eq!(ggml_n_dims(&[1, 1]), 1);
        assert_eq!(ggml_n_dims(&[1, 4]), 2);
    }

    #[test]
    fn helpers_match_llama_cpp() {
        // use_more_bits over 32 layers: 0..4, 28..32 and 4 + 3k + 2.
        let more: Vec<i64> = (0..32).filter(|&i| use_more_bits(i, 32)).collect();
        assert_eq!(
            more,
            [0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 28, 29, 30, 31]
        );
        assert_eq!(block_number("blk.12.ffn_down.weight"), Some(12));
        assert_eq!(block_number("blk.x.ffn_down.weight"), None);
        assert_eq!(block_number("output.weight"), None);
        let llama70 = ModelShape::new("llama", 80, 64, 8, 0);
        assert!(llama70.is_70b);
        assert_eq!(llama70.n_gqa(), 8);
        assert!(!ModelShape::new("llama", 80, 64, 64, 0).is_70b);
        assert!(!ModelShape::new("gemma3", 80, 64, 8, 0).is_70b);
        assert_eq!(ModelShape::new("llama", 1, 4, 0, 0).n_gqa(), 0);
    }

    #[test]
    fn shape_from_gguf_header() {
        use crate::model::gguf_write::{GgufWriter, MetaValue};
        let mut w = GgufWriter::new();
        w.set("general.architecture", MetaValue::str("llama"));
        w.set("llama.block_count", MetaValue::U32(80));
        w.set("llama.attention.head_count", MetaValue::U32(64));
        let kv = vec![MetaValue::I32(8); 80];
        w.set(
            "llama.attention.head_count_kv",
            MetaValue::Array(crate::model::gguf::ValueType::I32, kv),
        );
        let bytes = w.to_bytes();
        let shape = ModelShape::from_gguf(&crate::model::Gguf::parse(&bytes).unwrap()).unwrap();
        assert_eq!(shape, ModelShape::new("llama", 80, 64, 8, 0));
        assert!(shape.is_70b);
        // Without head_count_kv: as many key/value heads as heads (a 65B, not a 70B).
        let mut w = GgufWriter::new();
        w.set("general.architecture", MetaValue::str("llama"));
        w.set("llama.block_count", MetaValue::U32(80));
        w.set("llama.attention.head_count", MetaValue::U32(64));
        w.set("llama.expert_count", MetaValue::U32(0));
        let bytes = w.to_bytes();
        let shape = ModelShape::from_gguf(&crate::model::Gguf::parse(&bytes).unwrap()).unwrap();
        assert_eq!((shape.n_head_kv, shape.is_70b), (64, false));
        w.set("llama.block_count", MetaValue::str("eighty"));
        let bytes = w.to_bytes();
        assert!(ModelShape::from_gguf(&crate::model::Gguf::parse(&bytes).unwrap()).is_err());
    }

    #[test]
    fn moe_names_need_a_block_number() {
        let shape = ModelShape::new("llama", 2, 8, 2, 4);
        let o = MixOptions::default();
        let bad: [(&str, &[u64]); 1] = [("ffn_down_exps.weight", &[256, 256, 4])];
        assert!(MixPlan::new(Preset::Q4KM, &shape, &o, bad).is_err());
        let out_of_range: [(&str, &[u64]); 1] = [("blk.2.ffn_down_exps.weight", &[256, 256, 4])];
        assert!(MixPlan::new(Preset::Q4KM, &shape, &o, out_of_range).is_err());
        // With experts the layer comes from the name, not the count of tensors seen.
        let ok: [(&str, &[u64]); 2] = [
            ("blk.1.ffn_down_exps.weight", &[256, 256, 4]),
            ("blk.1.ffn_down_shexp.weight", &[256, 256]),
        ];
        let plan = MixPlan::new(Preset::Q4KM, &shape, &o, ok).unwrap();
        // Layer 1 of 2 is ≥ 7·2/8: more bits for both.
        assert_eq!(
            plan.type_for("blk.1.ffn_down_exps.weight"),
            Some(GgmlType::Q6K)
        );
        assert_eq!(
            plan.type_for("blk.1.ffn_down_shexp.weight"),
            Some(GgmlType::Q6K)
        );
    }
}
