//! Synthetic models of every supported family: random weights of any shape and type, with a
//! working byte-level BPE vocabulary, so tests and benchmarks need no downloads (`locus
//! gen-model`).

#[path = "synth_gptoss.rs"]
mod gptoss;

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use super::arch::{Arch, Gating};
use super::error::ModelError;
use super::gguf_write::{GgufStream, GgufWriter, MetaValue, TensorEntry};
use super::quant_mix::fallback;
use super::quantize::{file_type_code, quantize_row};
use super::sampler::Rng;
pub use super::synth_gemma4::SynthGemma4;
use crate::kernels::GgmlType;

/// The shape and type of a synthetic model.
#[derive(Clone, Debug, PartialEq)]
pub struct SynthSpec {
    /// The family: which tensors the layers carry and the metadata keys' prefix.
    pub arch: Arch,
    pub n_vocab: usize,
    pub n_embd: usize,
    pub n_layer: usize,
    pub n_ff: usize,
    pub n_head: usize,
    pub n_head_kv: usize,
    pub n_ctx_train: usize,
    /// Type of every 2-D weight (1-D norms stay F32).
    pub weight_type: GgmlType,
    /// Share the output head with the token embedding.
    pub tied: bool,
    pub rope_freq_base: f32,
    pub seed: u64,
    /// Values per attention head (`attention.key_length`); 0: `n_embd / n_head`.
    pub head_dim: usize,
    /// Gemma 3's sliding window in tokens (0: none, every layer global); its local layers
    /// are five of every six, as in llama.cpp's default pattern, unless `swa_pattern` says.
    pub sliding_window: usize,
    /// `attention.sliding_window_pattern` written to the file (0: not written): of every n
    /// layers, the first n − 1 are local.
    pub swa_pattern: u32,
    /// Experts per layer (0: a dense FFN). Every layer is then a mixture of experts (qwen3moe,
    /// or llama with experts: Mixtral).
    pub n_expert: usize,
    /// Experts each token uses.
    pub n_expert_used: usize,
    /// One expert's FFN width (qwen3moe's `expert_feed_forward_length`; Mixtral's experts are
    /// `n_ff` wide, and this must equal it).
    pub n_ff_exp: usize,
    /// Latent attention's sizes (deepseek2; `head_dim` is then a query head's `nope + rope`).
    pub mla: SynthMla,
    /// The MoE knobs of the giant mixtures (glm4moe), each written only where set.
    pub moe: SynthMoe,
    /// Rotated dimensions per head (`rope.dimension_count`; 0: the whole head).
    pub n_rot: usize,
    /// NextN layers written past the trunk (`nextn_predict_layers`; 0: none), which the
    /// forward pass must load past.
    pub n_nextn: usize,
    /// Gemma 4's global layers' attention shape and its logit cap (`head_dim`, `n_head_kv`,
    /// `sliding_window` and `swa_pattern` are its sliding-window layers').
    pub g4: SynthGemma4,
}

/// A synthetic deepseek2 model's latent attention sizes.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SynthMla {
    /// The query's low rank (0: a full-rank `attn_q`, as DeepSeek-V2-Lite).
    pub q_lora: usize,
    /// The latent vector's size (`kv_lora_rank`).
    pub kv_lora: usize,
    /// A head's rotated values (`rope.dimension_count`).
    pub rope: usize,
    /// A head's output after `attn_v_b` (`value_length_mla`).
    pub v_head: usize,
    /// YaRN's `rope.scaling.factor` (0: no scaling).
    pub yarn_factor: f32,
    /// `rope.scaling.yarn_log_multiplier` as converters write it (0.1 × mscale_all_dim).
    pub yarn_log_mul: f32,
    /// The older unabsorbed form: one `attn_kv_b` a layer and per-head key and value sizes,
    /// no `key_length_mla`.
    pub unabsorbed: bool,
}

/// The routing and layer knobs of a synthetic mixture beyond its expert counts.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SynthMoe {
    /// Shared experts (`expert_shared_count`, written for glm4moe or where > 0).
    pub n_shared: usize,
    /// Leading dense layers (`leading_dense_block_count`, written where > 0).
    pub dense_lead: usize,
    /// `expert_group_count` and `expert_group_used_count` (written where the count is > 0).
    pub groups: usize,
    pub groups_used: usize,
    /// `expert_gating_func` (None: not written, the family's default).
    pub gating: Option<Gating>,
    /// Whether the MoE layers carry `exp_probs_b.bias`.
    pub probs_bias: bool,
    /// `expert_weights_scale` (0: not written).
    pub weights_scale: f32,
    /// `expert_weights_norm` (None: not written).
    pub weights_norm: Option<bool>,
}

impl SynthSpec {
    /// The "1B" shape: dim 2048, 16 layers, FFN 5632, 32 heads, 4 KV heads, vocabulary 32000.
    pub fn one_b(ty: GgmlType) -> SynthSpec {
        SynthSpec {
            n_vocab: 32000,
            n_embd: 2048,
            n_layer: 16,
            n_ff: 5632,
            n_head: 32,
            n_head_kv: 4,
            n_ctx_train: 4096,
            weight_type: ty,
            tied: false,
            rope_freq_base: 10000.0,
            seed: 1,
            arch: Arch::Llama,
            head_dim: 0,
            sliding_window: 0,
            swa_pattern: 0,
            n_expert: 0,
            n_expert_used: 0,
            n_ff_exp: 0,
            mla: SynthMla::default(),
            moe: SynthMoe::default(),
            n_rot: 0,
            n_nextn: 0,
            g4: SynthGemma4::default(),
        }
    }

    /// Qwen3-30B-A3B's layer (dim 2048, 32 heads of 128, 4 KV heads, 128 experts of width
    /// 768, 8 per token) with a quarter of its 48 layers and a 32000-token vocabulary, so it
    /// fits this project's machines: about 4 GiB at Q4_0.
    pub fn a3b(ty: GgmlType) -> SynthSpec {
        SynthSpec {
            arch: Arch::Qwen3Moe,
            n_layer: 12,
            n_ff: 6144,
            head_dim: 128,
            n_expert: 128,
            n_expert_used: 8,
            n_ff_exp: 768,
            rope_freq_base: 1_000_000.0,
            ..SynthSpec::one_b(ty)
        }
    }

    /// DeepSeek-V2-Lite's layer (dim 2048, 16 heads of 128 + 64 rotated values, a full-rank
    /// query, a latent of 512, outputs of 128 a head; the first layer a dense FFN of 10944,
    /// the rest 64 experts of 1408 with 6 per token and two shared, softmax routing) with 6 of
    /// its 27 layers and a 32000-token vocabulary.
    pub fn v2_lite(ty: GgmlType) -> SynthSpec {
        SynthSpec {
            arch: Arch::Deepseek2,
            n_layer: 6,
            n_ff: 10944,
            n_head: 16,
            n_head_kv: 1,
            head_dim: 192,
            mla: SynthMla {
                q_lora: 0,
                kv_lora: 512,
                rope: 64,
                v_head: 128,
                ..SynthMla::default()
            },
            n_expert: 64,
            n_expert_used: 6,
            n_ff_exp: 1408,
            moe: SynthMoe {
                n_shared: 2,
                dense_lead: 1,
                weights_scale: 1.0,
                weights_norm: Some(false),
                ..SynthMoe::default()
            },
            ..SynthSpec::one_b(ty)
        }
    }

    /// DeepSeek-V3's layer proportions (heads of 128 + 64 rotated values, a latent of 512,
    /// outputs of 128, a low-rank query of 1536/7168 of the width; 256 experts of which 8 per
    /// token from 4 of 8 groups, one shared, sigmoid routing with the selection bias,
    /// normalised weights scaled by 2.5; dense leading layers; YaRN by 40 with V3's log
    /// multiplier) at dim 2048 with 16 heads, experts of 256 (V3's are 2/7 of its width,
    /// here 1/8 so that 256 of them fit), 2 dense and 4 expert layers of its 61, and a
    /// 32000-token vocabulary: about 1 GiB at Q4_K.
    pub fn v3(ty: GgmlType) -> SynthSpec {
        SynthSpec {
            arch: Arch::Deepseek2,
            n_layer: 6,
            n_ff: 5632,
            n_head: 16,
            n_head_kv: 1,
            head_dim: 192,
            mla: SynthMla {
                q_lora: 512,
                kv_lora: 512,
                rope: 64,
                v_head: 128,
                yarn_factor: 40.0,
                yarn_log_mul: 0.1,
                unabsorbed: false,
            },
            n_expert: 256,
            n_expert_used: 8,
            n_ff_exp: 256,
            moe: SynthMoe {
                n_shared: 1,
                dense_lead: 2,
                groups: 8,
                groups_used: 4,
                gating: Some(Gating::Sigmoid),
                probs_bias: true,
                weights_scale: 2.5,
                weights_norm: Some(true),
            },
            ..SynthSpec::one_b(ty)
        }
    }

    /// GLM-4.5-Air's layer proportions (query width three times the model's, 12 query heads
    /// per KV head of 128 with RoPE on half of each, a dense FFN 2.75 times as wide as the
    /// model, 128 experts of 3/8 of its width with 8 per token, one shared expert, sigmoid
    /// routing with a selection bias and normalised weights, the first layer dense, one NextN
    /// layer) at half its width (dim 2048) with a quarter of its 46 layers and a 32000-token
    /// vocabulary: about 4 GiB at Q4_0, as `a3b`.
    pub fn glm45_air(ty: GgmlType) -> SynthSpec {
        SynthSpec {
            arch: Arch::Glm4Moe,
            n_layer: 12,
            n_ff: 5632,
            n_head: 48,
            n_head_kv: 4,
            head_dim: 128,
            n_rot: 64,
            n_expert: 128,
            n_expert_used: 8,
            n_ff_exp: 768,
            moe: SynthMoe {
                n_shared: 1,
                dense_lead: 1,
                groups: 1,
                groups_used: 1,
                gating: Some(Gating::Sigmoid),
                probs_bias: true,
                weights_scale: 1.0,
                weights_norm: Some(true),
            },
            n_nextn: 1,
            rope_freq_base: 1_000_000.0,
            ..SynthSpec::one_b(ty)
        }
    }

    /// A model small enough for unit tests.
    pub fn tiny(ty: GgmlType) -> SynthSpec {
        SynthSpec {
            n_vocab: 384,
            n_embd: 64,
            n_layer: 2,
            n_ff: 96,
            n_head: 4,
            n_head_kv: 2,
            n_ctx_train: 256,
            weight_type: ty,
            tied: true,
            rope_freq_base: 10000.0,
            seed: 7,
            arch: Arch::Llama,
            head_dim: 0,
            sliding_window: 0,
            swa_pattern: 0,
            n_expert: 0,
            n_expert_used: 0,
            n_ff_exp: 0,
            mla: SynthMla::default(),
            moe: SynthMoe::default(),
            n_rot: 0,
            n_nextn: 0,
            g4: SynthGemma4::default(),
        }
    }

    /// [`SynthSpec::tiny`] as deepseek2 with latent attention: one latent head of 64 + 16
    /// values, query heads of 32 + 16, outputs of 32 a head, a low-rank query of 32.
    pub fn tiny_latent(ty: GgmlType) -> SynthSpec {
        SynthSpec {
            arch: Arch::Deepseek2,
            n_head_kv: 1,
            head_dim: 48,
            mla: SynthMla {
                q_lora: 32,
                kv_lora: 64,
                rope: 16,
                v_head: 32,
                ..SynthMla::default()
            },
            ..SynthSpec::tiny(ty)
        }
    }

    /// Rotated dimensions per head.
    pub fn n_rot(&self) -> usize {
        match self.n_rot {
            0 => self.head_dim(),
            n => n,
        }
    }

    /// Values per attention head.
    pub fn head_dim(&self) -> usize {
        match self.head_dim {
            0 => self.n_embd / self.n_head.max(1),
            d => d,
        }
    }
}

/// GPT-2's byte → printable character map (bytes that print as themselves keep their code
/// point; the rest are moved to 256 + n).
pub fn gpt2_byte_char(b: u8) -> char {
    let printable = |b: u8| (b'!'..=b'~').contains(&b) || (0xa1..=0xac).contains(&b) || b >= 0xae;
    if printable(b) {
        return char::from(b);
    }
    let n = (0..b).filter(|&x| !printable(x)).count() as u32;
    char::from_u32(256 + n).expect("valid code point")
}

/// Special tokens every synthetic vocabulary carries (ids 0..3).
pub const SYNTH_SPECIALS: [&str; 3] = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"];

/// A byte-level BPE vocabulary of exactly `n` tokens: the specials, the 256 bytes, then merges
/// of common letter pairs (and pairs of those) until the size is reached.
pub fn synth_vocab(n: usize) -> (Vec<String>, Vec<i32>, Vec<String>) {
    let mut tokens: Vec<String> = SYNTH_SPECIALS.iter().map(|s| s.to_string()).collect();
    let mut types = vec![3i32; tokens.len()]; // control
    for b in 0..=255u8 {
        tokens.push(gpt2_byte_char(b).to_string());
        types.push(1);
    }
    let mut merges = Vec::new();
    let alphabet: Vec<String> = std::iter::once("Ġ".to_string())
        .chain((b'a'..=b'z').map(|c| (c as char).to_string()))
        .collect();
    let mut level = alphabet.clone();
    // Every token seen so far, for a constant-time "already there" (a list search made a
    // vocabulary of millions quadratic).
    let mut seen: std::collections::HashSet<String> = tokens.iter().cloned().collect();
    'outer: while tokens.len() < n {
        let mut next = Vec::new();
        for a in &level {
            for b in &alphabet {
                if tokens.len() >= n {
                    break 'outer;
                }
                let t = format!("{a}{b}");
                if !seen.insert(t.clone()) {
                    continue;
                }
                merges.push(format!("{a} {b}"));
                tokens.push(t.clone());
                types.push(1);
                next.push(t);
            }
        }
        level = next;
    }
    tokens.truncate(n);
    types.truncate(n);
    (tokens, types, merges)
}

/// Fills `row` with uniform values in `[-scale, scale)`.
fn random_row(rng: &mut Rng, row: &mut [f32], scale: f32) {
    for v in row {
        *v = ((rng.next_f64() * 2.0 - 1.0) as f32) * scale;
    }
}

/// What a planned tensor holds.
#[derive(Clone, Copy)]
pub(super) enum Kind {
    /// A random matrix in the weight type, values in `[-scale, scale)`.
    Matrix(f32),
    /// A random matrix in a type of its own (gpt-oss's Q8_0 beside MXFP4 experts).
    Typed(f32, GgmlType),
    /// A router's matrix, F32 as converters write it, values in `[-scale, scale)`.
    Router(f32),
    /// An F32 norm weight vector near 1.
    Norm,
    /// An F32 bias vector of random values in `[-scale, scale)`.
    Bias(f32),
    /// Gemma 4's `rope_freqs`: 1 for the first `n` pairs, 1e30 (unturned) for the rest.
    RopeFreqs(usize),
}

/// One tensor of a synthetic model, in file order.
pub(super) struct Planned {
    pub(super) name: String,
    pub(super) rows: usize,
    pub(super) cols: usize,
    pub(super) kind: Kind,
    /// Experts stacked along a third dimension (1: a 2-D matrix).
    pub(super) slabs: usize,
}

impl Planned {
    /// A matrix of `rows × cols` drawn at `scale`, `slabs` experts deep (1: a 2-D matrix).
    pub(super) fn matrix(
        name: String,
        rows: usize,
        cols: usize,
        scale: f32,
        slabs: usize,
    ) -> Planned {
        let kind = Kind::Matrix(scale);
        Planned {
            name,
            rows,
            cols,
            kind,
            slabs,
        }
    }

    /// A norm's vector of `n` weights.
    pub(super) fn norm(name: String, n: usize) -> Planned {
        let kind = Kind::Norm;
        Planned {
            name,
            rows: 1,
            cols: n,
            kind,
            slabs: 1,
        }
    }

    fn ty(&self, spec: &SynthSpec) -> GgmlType {
        match self.kind {
            // Rows that are not whole blocks of the type take llama-quantize's fallback (only
            // deepseek2's narrow per-head matrices; every other shape is checked to fit).
            Kind::Matrix(_) => {
                fallback(spec.weight_type, self.cols as u64).unwrap_or(spec.weight_type)
            }
            Kind::Typed(_, ty) => ty,
            Kind::Router(_) | Kind::Norm | Kind::Bias(_) | Kind::RopeFreqs(_) => GgmlType::F32,
        }
    }

    fn dims(&self) -> Vec<u64> {
        match self.kind {
            Kind::Matrix(_) | Kind::Typed(..) if self.slabs > 1 => {
                vec![self.cols as u64, self.rows as u64, self.slabs as u64]
            }
            Kind::Matrix(_) | Kind::Typed(..) | Kind::Router(_) => {
                vec![self.cols as u64, self.rows as u64]
            }
            Kind::Norm | Kind::Bias(_) | Kind::RopeFreqs(_) => vec![self.cols as u64],
        }
    }

    /// Produces the tensor's bytes row by row into `sink` (so a matrix of any size needs one
    /// row of memory); a matrix draws its values from `rng`, so the order of calls is the order
    /// of the file.
    fn data<E>(
        &self,
        spec: &SynthSpec,
        rng: &mut Rng,
        sink: &mut dyn FnMut(&[u8]) -> Result<(), E>,
    ) -> Result<(), E> {
        let mut row = vec![0f32; self.cols];
        match self.kind {
            Kind::Matrix(scale) | Kind::Typed(scale, _) => {
                let ty = self.ty(spec);
                for _ in 0..self.rows * self.slabs {
                    random_row(rng, &mut row, scale);
                    sink(&quantize_row(ty, &row))?;
                }
            }
            Kind::Router(scale) => {
                for _ in 0..self.rows {
                    random_row(rng, &mut row, scale);
                    sink(&quantize_row(GgmlType::F32, &row))?;
                }
            }
            Kind::Bias(scale) => {
                random_row(rng, &mut row, scale);
                sink(&quantize_row(GgmlType::F32, &row))?;
            }
            Kind::RopeFreqs(n) => {
                for (i, v) in row.iter_mut().enumerate() {
                    *v = if i < n { 1.0 } else { UNTURNED_FREQ };
                }
                sink(&quantize_row(GgmlType::F32, &row))?;
            }
            Kind::Norm => {
                for (i, v) in row.iter_mut().enumerate() {
                    *v = 1.0 + 0.1 * ((i * 7 % 11) as f32 / 11.0 - 0.5);
                }
                sink(&quantize_row(GgmlType::F32, &row))?;
            }
        }
        Ok(())
    }
}

/// The divisor of a RoPE pair Gemma 4's converter leaves unturned.
const UNTURNED_FREQ: f32 = 1e30;

/// The tensors of `spec`'s model, in file order.
fn plan(s: &SynthSpec) -> Vec<Planned> {
    if s.arch == Arch::Gemma4 {
        return super::synth_gemma4::plan(s);
    }
    let head_dim = s.head_dim();
    let (q_dim, kv_dim) = (s.n_head * head_dim, s.n_head_kv * head_dim);
    let wscale = 1.0 / (s.n_embd as f32).sqrt();
    let mat = |name, rows, cols, scale| Planned::matrix(name, rows, cols, scale, 1);
    let experts = |name, rows, cols, scale| Planned::matrix(name, rows, cols, scale, s.n_expert);
    let norm = Planned::norm;
    let bias = |name: String, n| Planned {
        name,
        rows: 1,
        cols: n,
        kind: Kind::Bias(BIAS_SCALE),
        slabs: 1,
    };
    if s.arch == Arch::GptOss {
        return gptoss::plan(s);
    }
    let mut p = vec![
        mat("token_embd.weight".into(), s.n_vocab, s.n_embd, 1.0),
        norm("output_norm.weight".into(), s.n_embd),
    ];
    if !s.tied {
        p.push(mat("output.weight".into(), s.n_vocab, s.n_embd, wscale));
    }
    for l in 0..s.n_layer + s.n_nextn {
        let n = |t: &str| format!("blk.{l}.{t}.weight");
        let b = |t: &str| format!("blk.{l}.{t}.bias");
        p.push(norm(n("attn_norm"), s.n_embd));
        if s.arch == Arch::Deepseek2 {
            p.extend(latent_attention(s, l));
        } else {
            p.push(mat(n("attn_q"), q_dim, s.n_embd, wscale));
            p.push(mat(n("attn_k"), kv_dim, s.n_embd, wscale));
            p.push(mat(n("attn_v"), kv_dim, s.n_embd, wscale));
        }
        if matches!(s.arch, Arch::Qwen2 | Arch::Glm4Moe) {
            p.push(bias(b("attn_q"), q_dim));
            p.push(bias(b("attn_k"), kv_dim));
            p.push(bias(b("attn_v"), kv_dim));
        }
        if matches!(s.arch, Arch::Qwen3 | Arch::Qwen3Moe | Arch::Gemma3) {
            p.push(norm(n("attn_q_norm"), head_dim));
            p.push(norm(n("attn_k_norm"), head_dim));
        }
        if s.arch != Arch::Deepseek2 {
            let oscale = 1.0 / (q_dim as f32).sqrt();
            p.push(mat(n("attn_output"), s.n_embd, q_dim, oscale));
        }
        if s.arch == Arch::Gemma3 {
            p.push(norm(n("post_attention_norm"), s.n_embd));
        }
        // GLM-4.5 names the FFN's input norm `post_attention_norm`.
        match s.arch {
            Arch::Glm4Moe => p.push(norm(n("post_attention_norm"), s.n_embd)),
            _ => p.push(norm(n("ffn_norm"), s.n_embd)),
        }
        if s.n_expert > 0 && l >= s.moe.dense_lead {
            let ff = s.n_ff_exp;
            p.push(Planned {
                name: n("ffn_gate_inp"),
                rows: s.n_expert,
                cols: s.n_embd,
                kind: Kind::Router(ROUTER_SCALE * wscale),
                slabs: 1,
            });
            if s.moe.probs_bias {
                p.push(Planned {
                    kind: Kind::Bias(PROBS_BIAS_SCALE),
                    ..bias(b("exp_probs_b"), s.n_expert)
                });
            }
            p.push(experts(n("ffn_gate_exps"), ff, s.n_embd, wscale));
            let down = 1.0 / (ff as f32).sqrt();
            p.push(experts(n("ffn_down_exps"), s.n_embd, ff, down));
            p.push(experts(n("ffn_up_exps"), ff, s.n_embd, wscale));
            let sf = s.moe.n_shared * ff;
            if sf > 0 {
                p.push(mat(n("ffn_gate_shexp"), sf, s.n_embd, wscale));
                p.push(mat(n("ffn_up_shexp"), sf, s.n_embd, wscale));
                p.push(mat(
                    n("ffn_down_shexp"),
                    s.n_embd,
                    sf,
                    1.0 / (sf as f32).sqrt(),
                ));
            }
        } else {
            p.push(mat(n("ffn_gate"), s.n_ff, s.n_embd, wscale));
            p.push(mat(n("ffn_up"), s.n_ff, s.n_embd, wscale));
            let down = 1.0 / (s.n_ff as f32).sqrt();
            p.push(mat(n("ffn_down"), s.n_embd, s.n_ff, down));
        }
        if s.arch == Arch::Gemma3 {
            p.push(norm(n("post_ffw_norm"), s.n_embd));
        }
        if l >= s.n_layer {
            // A NextN layer's own tensors (GLM-4.5's converter writes these).
            let eh = 1.0 / (2.0 * s.n_embd as f32).sqrt();
            p.push(mat(n("nextn.eh_proj"), s.n_embd, 2 * s.n_embd, eh));
            p.push(norm(n("nextn.enorm"), s.n_embd));
            p.push(norm(n("nextn.hnorm"), s.n_embd));
            p.push(norm(n("nextn.shared_head_norm"), s.n_embd));
        }
    }
    p
}

/// Layer `l`'s latent attention tensors (deepseek2), as llama.cpp's converter names them:
/// the query (full or low-rank), the latent vector with the shared rotated key and its norm,
/// the per-head `attn_k_b` and `attn_v_b` (3-D), the output projection.
fn latent_attention(s: &SynthSpec, l: usize) -> Vec<Planned> {
    let m = s.mla;
    let n = |t: &str| format!("blk.{l}.{t}.weight");
    let (e, h, qh) = (s.n_embd, s.n_head, s.head_dim());
    let nope = qh - m.rope;
    let mat = |name, rows, cols: usize, slabs| {
        Planned::matrix(name, rows, cols, 1.0 / (cols as f32).sqrt(), slabs)
    };
    let norm = Planned::norm;
    let mut p = Vec::new();
    if m.q_lora > 0 {
        p.push(mat(n("attn_q_a"), m.q_lora, e, 1));
        p.push(norm(n("attn_q_a_norm"), m.q_lora));
        p.push(mat(n("attn_q_b"), h * qh, m.q_lora, 1));
    } else {
        p.push(mat(n("attn_q"), h * qh, e, 1));
    }
    p.push(mat(n("attn_kv_a_mqa"), m.kv_lora + m.rope, e, 1));
    p.push(norm(n("attn_kv_a_norm"), m.kv_lora));
    if m.unabsorbed {
        // Each head's no-RoPE key rows, then its value rows.
        p.push(mat(n("attn_kv_b"), h * (nope + m.v_head), m.kv_lora, 1));
    } else {
        p.push(mat(n("attn_k_b"), m.kv_lora, nope, h));
        p.push(mat(n("attn_v_b"), m.v_head, m.kv_lora, h));
    }
    p.push(mat(n("attn_output"), e, h * m.v_head, 1));
    p
}
/// The range of the random expert selection biases (`exp_probs_b`): of the order of the
/// differences between sigmoid probabilities, so both decide the choice.
const PROBS_BIAS_SCALE: f32 = 0.05;

/// The range of the random Q/K/V biases (Qwen2).
const BIAS_SCALE: f32 = 0.5;

/// The router's weights relative to the other matrices': larger, so that tokens prefer some
/// experts clearly (random routers of the usual scale give near-uniform probabilities).
pub(super) const ROUTER_SCALE: f32 = 4.0;

/// The metadata of `spec`'s model (no tensors).
fn metadata(s: &SynthSpec) -> GgufWriter {
    let mut w = GgufWriter::new();
    let head_dim = s.head_dim();
    let a = s.arch.name();
    let k = |key: &str| format!("{a}.{key}");
    w.set("general.architecture", MetaValue::str(a));
    w.set("general.name", MetaValue::str("locus synthetic"));
    w.set(
        "general.file_type",
        MetaValue::U32(file_type_code(s.weight_type).unwrap_or(0)),
    );
    w.set(&k("context_length"), MetaValue::U32(s.n_ctx_train as u32));
    w.set(&k("embedding_length"), MetaValue::U32(s.n_embd as u32));
    w.set(
        &k("block_count"),
        MetaValue::U32((s.n_layer + s.n_nextn) as u32),
    );
    if s.n_nextn > 0 {
        w.set(&k("nextn_predict_layers"), MetaValue::U32(s.n_nextn as u32));
    }
    w.set(&k("feed_forward_length"), MetaValue::U32(s.n_ff as u32));
    w.set(&k("attention.head_count"), MetaValue::U32(s.n_head as u32));
    w.set(
        &k("attention.head_count_kv"),
        MetaValue::U32(s.n_head_kv as u32),
    );
    if s.arch == Arch::Deepseek2 {
        latent_metadata(s, &mut w);
    } else if s.head_dim != 0 {
        w.set(&k("attention.key_length"), MetaValue::U32(head_dim as u32));
        w.set(
            &k("attention.value_length"),
            MetaValue::U32(head_dim as u32),
        );
    }
    let eps = if matches!(s.arch, Arch::Gemma3 | Arch::Gemma4) {
        1e-6
    } else {
        1e-5
    };
    w.set(&k("attention.layer_norm_rms_epsilon"), MetaValue::F32(eps));
    if s.sliding_window > 0 {
        w.set(
            &k("attention.sliding_window"),
            MetaValue::U32(s.sliding_window as u32),
        );
        if s.swa_pattern > 0 {
            w.set(
                &k("attention.sliding_window_pattern"),
                MetaValue::U32(s.swa_pattern),
            );
        }
    }
    if s.n_expert > 0 {
        w.set(&k("expert_count"), MetaValue::U32(s.n_expert as u32));
        w.set(
            &k("expert_used_count"),
            MetaValue::U32(s.n_expert_used as u32),
        );
        if matches!(
            s.arch,
            Arch::Qwen3Moe | Arch::Glm4Moe | Arch::Deepseek2 | Arch::GptOss | Arch::Gemma4
        ) {
            w.set(
                &k("expert_feed_forward_length"),
                MetaValue::U32(s.n_ff_exp as u32),
            );
        }
        moe_metadata(&mut w, s);
    }
    w.set(&k("rope.freq_base"), MetaValue::F32(s.rope_freq_base));
    let rot = match s.arch {
        Arch::Deepseek2 => s.mla.rope,
        _ => s.n_rot(),
    };
    w.set(&k("rope.dimension_count"), MetaValue::U32(rot as u32));
    w.set(&k("vocab_size"), MetaValue::U32(s.n_vocab as u32));
    if s.arch == Arch::GptOss {
        gptoss::metadata(s, &mut w);
    }
    let (tokens, types, merges) = synth_vocab(s.n_vocab);
    w.set("tokenizer.ggml.model", MetaValue::str("gpt2"));
    w.set("tokenizer.ggml.pre", MetaValue::str("gpt-2"));
    w.set("tokenizer.ggml.tokens", MetaValue::strs(&tokens));
    w.set("tokenizer.ggml.token_type", MetaValue::i32s(&types));
    w.set("tokenizer.ggml.merges", MetaValue::strs(&merges));
    w.set("tokenizer.ggml.bos_token_id", MetaValue::U32(0));
    w.set("tokenizer.ggml.eos_token_id", MetaValue::U32(2));
    w.set("tokenizer.ggml.add_bos_token", MetaValue::Bool(false));
    if s.arch == Arch::Gemma4 {
        super::synth_gemma4::metadata(s, &mut w);
    }
    if s.arch == Arch::GptOss {
        gptoss::tokenizer_metadata(&mut w);
    }
    w.set(
        "tokenizer.chat_template",
        MetaValue::str("{% for m in messages %}{{'<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n'}}{% endfor %}"),
    );
    w
}

/// A deepseek2 model's attention keys, as llama.cpp's converter writes them for the absorbed
/// form: one latent "KV head" of `kv_lora + rope` keys and `kv_lora` values, the MLA head
/// sizes, the ranks (the older unabsorbed form: a KV head per query head, of the query's size
/// and `v_head` values, no MLA sizes); and the expert keys llama.cpp requires of every deepseek2 file, for a
/// model whose layers are all dense (`leading_dense_block_count` = the layer count).
fn latent_metadata(s: &SynthSpec, w: &mut GgufWriter) {
    let a = s.arch.name();
    let k = |key: &str| format!("{a}.{key}");
    let m = s.mla;
    let u = |v: usize| MetaValue::U32(v as u32);
    if m.unabsorbed {
        w.set(&k("attention.head_count_kv"), u(s.n_head));
        w.set(&k("attention.key_length"), u(s.head_dim()));
        w.set(&k("attention.value_length"), u(m.v_head));
    } else {
        w.set(&k("attention.head_count_kv"), u(1));
        w.set(&k("attention.key_length"), u(m.kv_lora + m.rope));
        w.set(&k("attention.value_length"), u(m.kv_lora));
        w.set(&k("attention.key_length_mla"), u(s.head_dim()));
        w.set(&k("attention.value_length_mla"), u(m.v_head));
    }
    w.set(&k("attention.kv_lora_rank"), u(m.kv_lora));
    w.set(&k("attention.q_lora_rank"), u(m.q_lora));
    if m.yarn_factor > 0.0 {
        // As DeepSeek's converter writes YaRN: the original context is the training one.
        w.set(&k("rope.scaling.type"), MetaValue::str("yarn"));
        w.set(&k("rope.scaling.factor"), MetaValue::F32(m.yarn_factor));
        w.set(&k("rope.scaling.original_context_length"), u(s.n_ctx_train));
        w.set(
            &k("rope.scaling.yarn_log_multiplier"),
            MetaValue::F32(m.yarn_log_mul),
        );
    }
    if s.n_expert == 0 {
        w.set(&k("leading_dense_block_count"), u(s.n_layer));
        w.set(&k("expert_feed_forward_length"), u(s.n_ff));
        w.set(&k("expert_shared_count"), u(0));
    }
}

/// The keys of [`SynthMoe`]'s knobs that are set.
fn moe_metadata(w: &mut GgufWriter, s: &SynthSpec) {
    let k = |key: &str| format!("{}.{key}", s.arch.name());
    let m = &s.moe;
    // (llama.cpp requires the key of both giant families.)
    if m.n_shared > 0 || matches!(s.arch, Arch::Glm4Moe | Arch::Deepseek2) {
        w.set(&k("expert_shared_count"), MetaValue::U32(m.n_shared as u32));
    }
    if m.dense_lead > 0 {
        let lead = MetaValue::U32(m.dense_lead as u32);
        w.set(&k("leading_dense_block_count"), lead);
    }
    if m.groups > 0 {
        w.set(&k("expert_group_count"), MetaValue::U32(m.groups as u32));
        let used = MetaValue::U32(m.groups_used as u32);
        w.set(&k("expert_group_used_count"), used);
    }
    if let Some(g) = m.gating {
        // llama.cpp's `llama_expert_gating_func_type` codes.
        let code = match g {
            Gating::Softmax => 1,
            Gating::Sigmoid => 2,
            Gating::SoftmaxWeight => 3,
        };
        w.set(&k("expert_gating_func"), MetaValue::U32(code));
    }
    if m.weights_scale != 0.0 {
        let scale = MetaValue::F32(m.weights_scale);
        w.set(&k("expert_weights_scale"), scale);
    }
    if let Some(norm) = m.weights_norm {
        w.set(&k("expert_weights_norm"), MetaValue::Bool(norm));
    }
}

/// Builds the GGUF image of a synthetic model in memory (small models: tests, fuzzing).
pub fn synth_model(spec: &SynthSpec) -> GgufWriter {
    let mut w = metadata(spec);
    let mut rng = Rng::new(spec.seed);
    for t in plan(spec) {
        let mut data = Vec::new();
        let _ = t.data::<()>(spec, &mut rng, &mut |b| {
            data.extend_from_slice(b);
            Ok(())
        });
        w.add_tensor(&t.name, &t.dims(), t.ty(spec), data);
    }
    w
}

/// Writes the synthetic model to `path` row by row (the same bytes as [`synth_model`]), so
/// memory holds one row at a time; `stop` (Ctrl-C) ends it between rows with nothing left
/// behind.
pub fn write_synth_model(
    spec: &SynthSpec,
    path: &Path,
    stop: &AtomicBool,
) -> Result<(), ModelError> {
    let meta = metadata(spec);
    let planned = plan(spec);
    let entries: Vec<TensorEntry> = planned
        .iter()
        .map(|t| TensorEntry {
            name: t.name.clone(),
            dims: t.dims(),
            ty: t.ty(spec),
            len: (t.rows * t.slabs * t.ty(spec).row_bytes(t.cols)) as u64,
        })
        .collect();
    let mut out = GgufStream::create(path, &meta.metadata, &entries).map_err(ModelError::Write)?;
    let mut rng = Rng::new(spec.seed);
    for t in &planned {
        t.data(spec, &mut rng, &mut |b| {
            if stop.load(Ordering::Relaxed) {
                return Err(ModelError::Interrupted);
            }
            out.write(b).map_err(ModelError::Write)
        })?;
        out.end_tensor().map_err(ModelError::Write)?;
    }
    out.commit().map_err(ModelError::Write)
}
