//! Synthetic Gemma 4 models (`locus gen-model --arch gemma4`): the tensors and keys llama.cpp's
//! `gemma4` loader reads, for a dense model whose sliding-window and global layers have their
//! own attention shapes, as Gemma 4's converter writes them (a per-layer `head_count_kv` and
//! `sliding_window_pattern`, the global layers without `attn_v`, `rope_freqs` for their
//! proportional RoPE, a `layer_output_scale` per layer).

use super::arch::Arch;
use super::gguf::ValueType;
use super::gguf_write::{GgufWriter, MetaValue};
use super::synth::{Kind, Planned, SynthSpec, ROUTER_SCALE};

/// Gemma 4's global layers and logit cap; the sliding-window layers' shape is the spec's own.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SynthGemma4 {
    /// A global layer's head size (`key_length`; 0: the sliding-window layers').
    pub head_dim: usize,
    /// A global layer's KV heads (0: the sliding-window layers').
    pub n_head_kv: usize,
    /// The global heads' dimensions RoPE turns (the first pairs of `rope_freqs` are 1, the
    /// rest 1e30; 0: the whole head). Gemma 4's "proportional" RoPE turns a quarter.
    pub n_rot: usize,
    /// `final_logit_softcapping` (0: not written, llama.cpp's default of 30).
    pub softcap: f32,
    /// E2B/E4B: `embedding_length_per_layer_input`, the per-layer embeddings' width (0: none).
    pub ple: usize,
    /// E2B/E4B: `attention.shared_kv_layers`, the last layers that read an earlier layer's
    /// cache (written without keys, values or key norm, as they are unused).
    pub shared_kv: usize,
    /// E2B/E4B's `use_double_wide_mlp`: the shared-KV layers' FFN twice as wide
    /// (`feed_forward_length` then one width per layer, as the converter writes it).
    pub double_wide: bool,
}

/// The local layers' default pattern: five local layers to one global (Gemma 4's dense and
/// MoE models).
const DEFAULT_PATTERN: usize = 6;

/// llama.cpp's `rope.freq_base_swa` default, which Gemma 4's converter writes.
const SWA_FREQ_BASE: f32 = 10000.0;

/// Per layer: whether it is a sliding-window layer (of every `swa_pattern` layers, the first
/// `swa_pattern − 1`; 6 when unset).
pub(super) fn local_layers(s: &SynthSpec) -> Vec<bool> {
    let n = match s.swa_pattern {
        0 => DEFAULT_PATTERN,
        p => p as usize,
    };
    (0..s.n_layer).map(|il| il % n < n - 1).collect()
}

impl SynthGemma4 {
    /// The global layers' head size, KV heads and rotated dimensions for `s`.
    pub fn global(&self, s: &SynthSpec) -> (usize, usize, usize) {
        let hd = if self.head_dim == 0 {
            s.head_dim()
        } else {
            self.head_dim
        };
        let kv = if self.n_head_kv == 0 {
            s.n_head_kv
        } else {
            self.n_head_kv
        };
        let rot = if self.n_rot == 0 { hd } else { self.n_rot };
        (hd, kv, rot)
    }

    /// Layer `l`'s FFN width in `s` (twice the spec's in a double-wide shared-KV layer).
    pub fn ffn_of(&self, s: &SynthSpec, l: usize) -> usize {
        match self.double_wide && l + self.shared_kv >= s.n_layer {
            true => 2 * s.n_ff,
            false => s.n_ff,
        }
    }
}

/// The tensors of a Gemma 4 model, in file order.
pub(super) fn plan(s: &SynthSpec) -> Vec<Planned> {
    let local = local_layers(s);
    let (ghd, gkv, grot) = s.g4.global(s);
    let wscale = 1.0 / (s.n_embd as f32).sqrt();
    let mat = |name, rows, cols, scale| Planned::matrix(name, rows, cols, scale, 1);
    let norm = Planned::norm;
    let mut p = vec![
        mat("token_embd.weight".into(), s.n_vocab, s.n_embd, 1.0),
        norm("output_norm.weight".into(), s.n_embd),
    ];
    if !s.tied {
        p.push(mat("output.weight".into(), s.n_vocab, s.n_embd, wscale));
    }
    if s.g4.ple > 0 {
        let all = s.g4.ple * s.n_layer;
        // llama.cpp's converter writes them in this order, after the token embedding.
        p.push(mat(
            "per_layer_token_embd.weight".into(),
            s.n_vocab,
            all,
            1.0,
        ));
        p.push(mat(
            "per_layer_model_proj.weight".into(),
            all,
            s.n_embd,
            wscale,
        ));
        p.push(norm("per_layer_proj_norm.weight".into(), s.g4.ple));
    }
    if local.iter().any(|&l| !l) {
        p.push(Planned {
            name: "rope_freqs.weight".into(),
            rows: 1,
            cols: ghd / 2,
            kind: Kind::RopeFreqs(grot / 2),
            slabs: 1,
        });
    }
    for (l, &is_local) in local.iter().enumerate() {
        let n = |t: &str| format!("blk.{l}.{t}.weight");
        let (hd, kv) = match is_local {
            true => (s.head_dim(), s.n_head_kv),
            false => (ghd, gkv),
        };
        let (q_dim, kv_dim) = (s.n_head * hd, kv * hd);
        // A shared-KV layer has queries only.
        let own_kv = l + s.g4.shared_kv < s.n_layer;
        p.push(norm(n("attn_norm"), s.n_embd));
        p.push(mat(n("attn_q"), q_dim, s.n_embd, wscale));
        if own_kv {
            p.push(mat(n("attn_k"), kv_dim, s.n_embd, wscale));
        }
        // The global layers take their values from the key projection (`attention_k_eq_v`).
        if is_local && own_kv {
            p.push(mat(n("attn_v"), kv_dim, s.n_embd, wscale));
        }
        p.push(norm(n("attn_q_norm"), hd));
        if own_kv {
            p.push(norm(n("attn_k_norm"), hd));
        }
        let oscale = 1.0 / (q_dim as f32).sqrt();
        p.push(mat(n("attn_output"), s.n_embd, q_dim, oscale));
        p.push(norm(n("post_attention_norm"), s.n_embd));
        p.push(norm(n("ffn_norm"), s.n_embd));
        let ff = s.g4.ffn_of(s, l);
        p.push(mat(n("ffn_gate"), ff, s.n_embd, wscale));
        p.push(mat(n("ffn_up"), ff, s.n_embd, wscale));
        let down = 1.0 / (ff as f32).sqrt();
        p.push(mat(n("ffn_down"), s.n_embd, ff, down));
        if s.n_expert > 0 {
            p.extend(experts(s, l));
        }
        p.push(norm(n("post_ffw_norm"), s.n_embd));
        if s.g4.ple > 0 {
            let w = s.g4.ple;
            p.push(mat(n("inp_gate"), w, s.n_embd, wscale));
            p.push(mat(n("proj"), s.n_embd, w, 1.0 / (w as f32).sqrt()));
            p.push(norm(n("post_norm"), s.n_embd));
        }
        p.push(norm(n("layer_output_scale"), 1));
    }
    p
}

/// Layer `l`'s mixture of experts beside its dense MLP (the 26B-A4B's): the router and its input
/// scale, the experts' norms, the experts (separate gate and up, as llama.cpp's converter writes
/// them unless fused) and a scale per expert of their down projection's output.
fn experts(s: &SynthSpec, l: usize) -> Vec<Planned> {
    let n = |t: &str| format!("blk.{l}.{t}.weight");
    let vector = Planned::norm;
    let experts = |name, rows, cols, scale| Planned::matrix(name, rows, cols, scale, s.n_expert);
    let (e, ff) = (s.n_embd, s.n_ff_exp);
    let wscale = 1.0 / (e as f32).sqrt();
    vec![
        // The router's input has an RMS of 1/√n_embd: weights of ±ROUTER_SCALE make logits
        // of a few units, so that tokens prefer some experts clearly.
        Planned {
            name: n("ffn_gate_inp"),
            rows: s.n_expert,
            cols: e,
            kind: Kind::Router(ROUTER_SCALE),
            slabs: 1,
        },
        vector(format!("blk.{l}.ffn_gate_inp.scale"), e),
        vector(n("pre_ffw_norm_2"), e),
        vector(n("post_ffw_norm_1"), e),
        vector(n("post_ffw_norm_2"), e),
        experts(n("ffn_gate_exps"), ff, e, wscale),
        experts(n("ffn_up_exps"), ff, e, wscale),
        experts(n("ffn_down_exps"), e, ff, 1.0 / (ff as f32).sqrt()),
        vector(format!("blk.{l}.ffn_down_exps.scale"), s.n_expert),
    ]
}

/// The keys of a Gemma 4 model beyond the shared ones (which they override where both write).
pub(super) fn metadata(s: &SynthSpec, w: &mut GgufWriter) {
    debug_assert_eq!(s.arch, Arch::Gemma4);
    let k = |key: &str| format!("gemma4.{key}");
    let u = |v: usize| MetaValue::U32(v as u32);
    let local = local_layers(s);
    let (ghd, gkv, _) = s.g4.global(s);
    let (hd, rot) = (s.head_dim(), s.n_rot());
    let kv: Vec<MetaValue> = local
        .iter()
        .map(|&l| u(if l { s.n_head_kv } else { gkv }))
        .collect();
    w.set(
        &k("attention.head_count_kv"),
        MetaValue::Array(ValueType::U32, kv),
    );
    w.set(&k("attention.key_length"), u(ghd));
    w.set(&k("attention.value_length"), u(ghd));
    w.set(&k("attention.key_length_swa"), u(hd));
    w.set(&k("attention.value_length_swa"), u(hd));
    w.set(&k("rope.dimension_count"), u(ghd));
    w.set(&k("rope.dimension_count_swa"), u(rot));
    w.set(&k("rope.freq_base_swa"), MetaValue::F32(SWA_FREQ_BASE));
    w.set(&k("attention.sliding_window"), u(s.sliding_window));
    let pattern = local.iter().map(|&l| MetaValue::Bool(l)).collect();
    w.set(
        &k("attention.sliding_window_pattern"),
        MetaValue::Array(ValueType::Bool, pattern),
    );
    w.set(&k("attention.shared_kv_layers"), u(s.g4.shared_kv));
    w.set(&k("embedding_length_per_layer_input"), u(s.g4.ple));
    if s.g4.double_wide {
        let ff = (0..s.n_layer).map(|l| u(s.g4.ffn_of(s, l))).collect();
        w.set(
            &k("feed_forward_length"),
            MetaValue::Array(ValueType::U32, ff),
        );
    }
    if s.g4.softcap != 0.0 {
        w.set(&k("final_logit_softcapping"), MetaValue::F32(s.g4.softcap));
    }
}

impl SynthSpec {
    /// Per layer: whether the Gemma 4 model is a sliding-window layer there.
    pub fn gemma4_local_layers(&self) -> Vec<bool> {
        local_layers(self)
    }

    /// Gemma 4 31B's layers (dim 5376, FFN 21504, 32 query heads; sliding-window layers with
    /// 16 KV heads of 256 and a 1024-token window, global layers with 4 KV heads of 512,
    /// RoPE on a quarter of each (base 1e6), values from the keys; five local layers to one
    /// global; logits capped at 30) with one period of six of its 60 layers and a 32000-token
    /// vocabulary, tied as Gemma's: about 2 GiB at Q4_0.
    pub fn gemma4_31b(ty: crate::kernels::GgmlType) -> SynthSpec {
        SynthSpec {
            arch: Arch::Gemma4,
            n_embd: 5376,
            n_layer: 6,
            n_ff: 21504,
            n_head: 32,
            n_head_kv: 16,
            head_dim: 256,
            n_ctx_train: 8192,
            tied: true,
            rope_freq_base: 1_000_000.0,
            sliding_window: 1024,
            swa_pattern: DEFAULT_PATTERN as u32,
            g4: SynthGemma4 {
                head_dim: 512,
                n_head_kv: 4,
                n_rot: 128,
                softcap: 30.0,
                ..SynthGemma4::default()
            },
            ..SynthSpec::one_b(ty)
        }
    }

    /// Gemma 4 26B-A4B's layers (dim 2816, a dense MLP of 2112 beside 128 experts of 704 with
    /// 8 per token; 16 query heads; sliding-window layers with 8 KV heads of 256 and a
    /// 1024-token window, global layers with 2 KV heads of 512, RoPE on a quarter of each,
    /// values from the keys; five local layers to one global; logits capped at 30) with one
    /// period of six of its 30 layers and a 32000-token vocabulary, tied: about 2.5 GiB at
    /// Q4_0, almost all of it experts.
    pub fn gemma4_a4b(ty: crate::kernels::GgmlType) -> SynthSpec {
        SynthSpec {
            n_embd: 2816,
            n_ff: 2112,
            n_head: 16,
            n_head_kv: 8,
            n_expert: 128,
            n_expert_used: 8,
            n_ff_exp: 704,
            g4: SynthGemma4 {
                head_dim: 512,
                n_head_kv: 2,
                n_rot: 128,
                softcap: 30.0,
                ..SynthGemma4::default()
            },
            ..SynthSpec::gemma4_31b(ty)
        }
    }

    /// Gemma 4 E2B's layers (the public `config.json`: dim 1536, FFN 6144, 8 query heads and 1
    /// KV head; sliding-window layers with heads of 256 and a 512-token window, global layers
    /// with heads of 512, RoPE on a quarter of each; four local layers to one global;
    /// per-layer embeddings of 256; of its 35 layers the last 20 read the cache of layer 13
    /// (sliding) or 14 (global), with a double-wide MLP; logits capped at 30) with 10 layers,
    /// the last 5 shared (one period each, so the last cached layers are again one sliding and
    /// one global) and a 32000-token vocabulary, tied: about 350 MiB at Q4_0. The RoPE bases
    /// (1e6 global, 1e4 local) are taken as the 31B's.
    pub fn gemma4_e2b(ty: crate::kernels::GgmlType) -> SynthSpec {
        SynthSpec {
            n_embd: 1536,
            n_layer: 10,
            n_ff: 6144,
            n_head: 8,
            n_head_kv: 1,
            head_dim: 256,
            sliding_window: 512,
            swa_pattern: 5,
            g4: SynthGemma4 {
                head_dim: 512,
                n_head_kv: 1,
                n_rot: 128,
                softcap: 30.0,
                ple: 256,
                shared_kv: 5,
                double_wide: true,
            },
            ..SynthSpec::gemma4_31b(ty)
        }
    }
}
