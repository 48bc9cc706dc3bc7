//! Synthetic llama-shaped models: random weights of any shape and type, with a working
//! byte-level BPE vocabulary, so tests and benchmarks need no downloads (`locus gen-model`).

use super::gguf_write::{GgufWriter, MetaValue};
use super::quantize::{file_type_code, quantize_row};
use super::sampler::Rng;
use crate::kernels::GgmlType;

/// The shape and type of a synthetic model.
#[derive(Clone, Debug, PartialEq)]
pub struct SynthSpec {
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
    'outer: while tokens.len() < n {
        let mut next = Vec::new();
        for a in &level {
            for b in &alphabet {
                if tokens.len() >= n {
                    break 'outer;
                }
                let t = format!("{a}{b}");
                if tokens.contains(&t) {
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

fn random_matrix(rng: &mut Rng, rows: usize, cols: usize, scale: f32) -> Vec<f32> {
    (0..rows * cols)
        .map(|_| ((rng.next_f64() * 2.0 - 1.0) as f32) * scale)
        .collect()
}

fn encode(ty: GgmlType, cols: usize, values: &[f32]) -> Vec<u8> {
    values
        .chunks_exact(cols)
        .flat_map(|row| quantize_row(ty, row))
        .collect()
}

/// Builds the GGUF image of a synthetic model.
pub fn synth_model(spec: &SynthSpec) -> GgufWriter {
    let mut w = GgufWriter::new();
    let s = spec;
    let head_dim = s.n_embd / s.n_head;
    w.set("general.architecture", MetaValue::str("llama"));
    w.set("general.name", MetaValue::str("locus synthetic"));
    w.set(
        "general.file_type",
        MetaValue::U32(file_type_code(s.weight_type).unwrap_or(0)),
    );
    w.set("llama.context_length", MetaValue::U32(s.n_ctx_train as u32));
    w.set("llama.embedding_length", MetaValue::U32(s.n_embd as u32));
    w.set("llama.block_count", MetaValue::U32(s.n_layer as u32));
    w.set("llama.feed_forward_length", MetaValue::U32(s.n_ff as u32));
    w.set(
        "llama.attention.head_count",
        MetaValue::U32(s.n_head as u32),
    );
    w.set(
        "llama.attention.head_count_kv",
        MetaValue::U32(s.n_head_kv as u32),
    );
    w.set(
        "llama.attention.layer_norm_rms_epsilon",
        MetaValue::F32(1e-5),
    );
    w.set("llama.rope.freq_base", MetaValue::F32(s.rope_freq_base));
    w.set(
        "llama.rope.dimension_count",
        MetaValue::U32(head_dim as u32),
    );
    w.set("llama.vocab_size", MetaValue::U32(s.n_vocab as u32));
    let (tokens, types, merges) = synth_vocab(s.n_vocab);
    w.set("tokenizer.ggml.model", MetaValue::str("gpt2"));
    w.set("tokenizer.ggml.pre", MetaValue::str("gpt-2"));
    w.set("tokenizer.ggml.tokens", MetaValue::strs(&tokens));
    w.set("tokenizer.ggml.token_type", MetaValue::i32s(&types));
    w.set("tokenizer.ggml.merges", MetaValue::strs(&merges));
    w.set("tokenizer.ggml.bos_token_id", MetaValue::U32(0));
    w.set("tokenizer.ggml.eos_token_id", MetaValue::U32(2));
    w.set("tokenizer.ggml.add_bos_token", MetaValue::Bool(false));
    w.set(
        "tokenizer.chat_template",
        MetaValue::str("{% for m in messages %}{{'<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n'}}{% endfor %}"),
    );

    let mut rng = Rng::new(s.seed);
    let ty = s.weight_type;
    let kv_dim = s.n_head_kv * head_dim;
    let wscale = 1.0 / (s.n_embd as f32).sqrt();
    let mut mat = |w: &mut GgufWriter, name: &str, rows: usize, cols: usize, scale: f32| {
        let v = random_matrix(&mut rng, rows, cols, scale);
        w.add_tensor(name, &[cols as u64, rows as u64], ty, encode(ty, cols, &v));
    };
    mat(&mut w, "token_embd.weight", s.n_vocab, s.n_embd, 1.0);
    let norm = |w: &mut GgufWriter, name: &str, n: usize| {
        let v: Vec<f32> = (0..n)
            .map(|i| 1.0 + 0.1 * ((i * 7 % 11) as f32 / 11.0 - 0.5))
            .collect();
        w.add_tensor(
            name,
            &[n as u64],
            GgmlType::F32,
            encode(GgmlType::F32, n, &v),
        );
    };
    norm(&mut w, "output_norm.weight", s.n_embd);
    if !s.tied {
        mat(&mut w, "output.weight", s.n_vocab, s.n_embd, wscale);
    }
    for l in 0..s.n_layer {
        let n = |t: &str| format!("blk.{l}.{t}.weight");
        norm(&mut w, &n("attn_norm"), s.n_embd);
        mat(&mut w, &n("attn_q"), s.n_embd, s.n_embd, wscale);
        mat(&mut w, &n("attn_k"), kv_dim, s.n_embd, wscale);
        mat(&mut w, &n("attn_v"), kv_dim, s.n_embd, wscale);
        mat(&mut w, &n("attn_output"), s.n_embd, s.n_embd, wscale);
        norm(&mut w, &n("ffn_norm"), s.n_embd);
        mat(&mut w, &n("ffn_gate"), s.n_ff, s.n_embd, wscale);
        mat(&mut w, &n("ffn_up"), s.n_ff, s.n_embd, wscale);
        mat(
            &mut w,
            &n("ffn_down"),
            s.n_embd,
            s.n_ff,
            1.0 / (s.n_ff as f32).sqrt(),
        );
    }
    w
}
