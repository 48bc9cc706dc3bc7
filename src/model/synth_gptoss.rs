//! Synthetic gpt-oss models (`locus gen-model --arch gpt-oss`): the tensors and keys of
//! llama.cpp's `openai-moe` loader. With `--type MXFP4` the files are typed as gpt-oss ships:
//! the experts MXFP4, every other matrix Q8_0, the router, biases, sinks and norms F32; any
//! other type is used for every matrix.

use super::{Kind, Planned, SynthSpec};
use crate::kernels::GgmlType;
use crate::model::gguf_write::{GgufWriter, MetaValue};

/// The experts' gate and up weights relative to the other matrices': large enough that
/// `swiglu_oai`'s clamp at 7 is reached by some values.
const EXPERT_SCALE: f32 = 6.0;
/// The range of the random biases.
const BIAS_SCALE: f32 = 0.5;
/// The range of the random attention sinks: of the order of the scores, so a sink is
/// sometimes the row's maximum.
const SINK_SCALE: f32 = 2.0;
/// The router's weights relative to the other matrices' (clear preferences, as in `synth`).
const ROUTER_SCALE: f32 = 4.0;

/// The tensors of a gpt-oss model, in file order.
pub(super) fn plan(s: &SynthSpec) -> Vec<Planned> {
    let hd = s.head_dim();
    let (q_dim, kv_dim, e, ff) = (s.n_head * hd, s.n_head_kv * hd, s.n_embd, s.n_ff_exp);
    let wscale = 1.0 / (e as f32).sqrt();
    // gpt-oss's shipping mix: MXFP4 experts, Q8_0 for the rest.
    let (dense_ty, expert_ty) = match s.weight_type {
        GgmlType::Mxfp4 => (GgmlType::Q8_0, GgmlType::Mxfp4),
        t => (t, t),
    };
    let planned = |name: String, rows, cols, kind, slabs| Planned {
        name,
        rows,
        cols,
        kind,
        slabs,
    };
    let mat = |name: String, rows, cols, scale| {
        planned(name, rows, cols, Kind::Typed(scale, dense_ty), 1)
    };
    let vector = |name: String, cols, kind| planned(name, 1, cols, kind, 1);
    let mut p = vec![
        mat("token_embd.weight".into(), s.n_vocab, e, 1.0),
        vector("output_norm.weight".into(), e, Kind::Norm),
    ];
    if !s.tied {
        p.push(mat("output.weight".into(), s.n_vocab, e, wscale));
    }
    for l in 0..s.n_layer {
        let n = |t: &str| format!("blk.{l}.{t}.weight");
        let b = |t: &str| format!("blk.{l}.{t}.bias");
        let bias = |t: &str, cols| vector(b(t), cols, Kind::Bias(BIAS_SCALE));
        p.push(vector(n("attn_norm"), e, Kind::Norm));
        p.push(mat(n("attn_q"), q_dim, e, wscale));
        p.push(bias("attn_q", q_dim));
        p.push(mat(n("attn_k"), kv_dim, e, wscale));
        p.push(bias("attn_k", kv_dim));
        p.push(mat(n("attn_v"), kv_dim, e, wscale));
        p.push(bias("attn_v", kv_dim));
        let oscale = 1.0 / (q_dim as f32).sqrt();
        p.push(mat(n("attn_output"), e, q_dim, oscale));
        p.push(bias("attn_output", e));
        p.push(vector(n("attn_sinks"), s.n_head, Kind::Bias(SINK_SCALE)));
        p.push(vector(n("post_attention_norm"), e, Kind::Norm));
        let router = Kind::Router(ROUTER_SCALE * wscale);
        p.push(planned(n("ffn_gate_inp"), s.n_expert, e, router, 1));
        p.push(bias("ffn_gate_inp", s.n_expert));
        let experts = |name: String, rows, cols, scale| {
            planned(name, rows, cols, Kind::Typed(scale, expert_ty), s.n_expert)
        };
        // A row of biases per expert: F32 `{rows, n_expert}`.
        let expert_bias =
            |t: &str, rows| planned(b(t), s.n_expert, rows, Kind::Router(BIAS_SCALE), 1);
        p.push(experts(n("ffn_gate_exps"), ff, e, EXPERT_SCALE * wscale));
        p.push(expert_bias("ffn_gate_exps", ff));
        p.push(experts(n("ffn_up_exps"), ff, e, EXPERT_SCALE * wscale));
        p.push(expert_bias("ffn_up_exps", ff));
        let down = 1.0 / (ff as f32).sqrt();
        p.push(experts(n("ffn_down_exps"), e, ff, down));
        p.push(expert_bias("ffn_down_exps", e));
    }
    p
}

/// gpt-oss's keys beyond the shared ones: YaRN (`rope.scaling.*`, where the spec's factor is
/// set; the original context is the training context over the factor, as gpt-oss's 4096 of
/// 131072) and, where the spec gives none, the window's pattern llama.cpp defaults to.
pub(super) fn metadata(s: &SynthSpec, w: &mut GgufWriter) {
    let k = |key: &str| format!("{}.{key}", s.arch.name());
    let factor = s.mla.yarn_factor;
    if factor > 0.0 {
        w.set(&k("rope.scaling.type"), MetaValue::str("yarn"));
        w.set(&k("rope.scaling.factor"), MetaValue::F32(factor));
        let orig = ((s.n_ctx_train as f64 / factor as f64) as u32).max(1);
        w.set(
            &k("rope.scaling.original_context_length"),
            MetaValue::U32(orig),
        );
    }
}

/// The pre-tokenizer real gpt-oss files name: o200k (`gpt-4o`, as llama.cpp's converter
/// detects gpt-oss's tokenizer), not the `gpt-2` of the other synthetic families.
const PRE_TOKENIZER: &str = "gpt-4o";

/// The tokenizer keys in which a gpt-oss file differs from the shared synthetic ones (which it
/// overrides where both write), as far as the synthetic vocabulary can carry them: the o200k
/// pre-tokenizer; `<|endoftext|>` as the padding token (gpt-oss's, synthetic id 0); and no
/// `add_bos_token` (gpt-oss's converter writes none, and `gpt-4o` adds no BOS by default in
/// llama.cpp). The BOS and EOS ids and the template stay the synthetic vocabulary's: it has
/// no `<|startoftext|>`, `<|return|>` or harmony tokens to point them at.
pub(super) fn tokenizer_metadata(w: &mut GgufWriter) {
    w.set("tokenizer.ggml.pre", MetaValue::str(PRE_TOKENIZER));
    let pad = super::SYNTH_SPECIALS
        .iter()
        .position(|&t| t == "<|endoftext|>")
        .expect("the synthetic vocabulary has <|endoftext|>");
    w.set(
        "tokenizer.ggml.padding_token_id",
        MetaValue::U32(pad as u32),
    );
    w.metadata
        .retain(|(k, _)| k != "tokenizer.ggml.add_bos_token");
}

impl SynthSpec {
    /// gpt-oss-120b's layer (dim 2880, 64 query heads and 8 KV heads of 64, experts of 2880 with
    /// 4 per token, every other layer local with a window of 128, RoPE base 150000 with YaRN by
    /// 32 over an original 4096 of 131072 positions) with 4 of its 36 layers, 32 of its 128
    /// experts and a 32000-token vocabulary: about 2 GiB with `--type MXFP4`.
    pub fn gpt_oss_120b(ty: GgmlType) -> SynthSpec {
        SynthSpec {
            arch: crate::model::arch::Arch::GptOss,
            n_vocab: 32000,
            n_embd: 2880,
            n_layer: 4,
            n_ff: 2880,
            n_head: 64,
            n_head_kv: 8,
            head_dim: 64,
            n_ctx_train: 131072,
            rope_freq_base: 150000.0,
            sliding_window: 128,
            n_expert: 32,
            n_expert_used: 4,
            n_ff_exp: 2880,
            mla: super::SynthMla {
                yarn_factor: 32.0,
                ..super::SynthMla::default()
            },
            ..SynthSpec::one_b(ty)
        }
    }
}
