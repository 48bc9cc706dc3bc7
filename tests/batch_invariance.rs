//! A step over several sequences at once (`Model::forward_mixed`, what `locus serve` runs each
//! step: decoded tokens beside prompt chunks) gives every sequence the logits and cache bits
//! of running it alone (`Model::eval` of its prompt, then `Model::forward`), and so does a
//! prompt fed a chunk at a time by `Model::eval_chunk`. Synthetic models of several families
//! and weight types, sequences of different lengths joining and leaving.

use locus::kernels::{GgmlType, Kernels};
use locus::model::arch::Arch;
use locus::model::forward::{KvType, Model, Part, State, MAX_BATCH};
use locus::model::sampler::argmax;
use locus::model::synth::{synth_model, SynthSpec};
use locus::model::weights::Weights;
use locus::model::{Config, Gguf};
use locus::pool::Pool;

fn spec(arch: Arch, ty: GgmlType, kv: KvType) -> SynthSpec {
    let mut s = SynthSpec::tiny(ty);
    s.arch = arch;
    s.tied = false;
    // K-quant rows are 256 wide (three and four super-blocks here, so that the orders of the
    // repacked gemm and gemv differ in their bits); a Q8_0 cache keeps heads of whole 32-value
    // blocks.
    if ty.block_size() > 64 {
        s.n_embd = 768;
        s.n_ff = 1024;
    } else if kv == KvType::Q8_0 {
        s.n_embd = 256;
        s.n_ff = 512;
    }
    if arch == Arch::Gemma3 {
        s.sliding_window = 8;
        s.swa_pattern = 2;
    }
    if arch == Arch::Gemma4 {
        // Gemma 4's two attention shapes (local heads of 16 with 2 KV heads, global heads of
        // 32 with 1, RoPE on 8 of them), values from the keys in the global layers, and the
        // last layer run for every token.
        s.sliding_window = 8;
        s.swa_pattern = 2;
        s.g4 = locus::model::synth::SynthGemma4 {
            head_dim: 32,
            n_head_kv: 1,
            n_rot: 8,
            softcap: 0.0,
            ..Default::default()
        };
    }
    if arch == Arch::Deepseek2 {
        // Latent attention (a low-rank query, YaRN) and V3's mixture: a dense first layer,
        // then 4 experts in 2 groups of which 1 holds a token's 2, a shared expert, sigmoid
        // routing with the selection bias.
        let t = SynthSpec::tiny_latent(ty);
        (s.n_head_kv, s.head_dim, s.mla) = (t.n_head_kv, t.head_dim, t.mla);
        s.mla.yarn_factor = 4.0;
        s.mla.yarn_log_mul = 0.1;
        s.n_expert = 4;
        s.n_expert_used = 2;
        s.n_ff_exp = 256;
        s.moe = locus::model::synth::SynthMoe {
            n_shared: 1,
            dense_lead: 1,
            groups: 2,
            groups_used: 1,
            gating: Some(locus::model::arch::Gating::Sigmoid),
            probs_bias: true,
            weights_scale: 2.5,
            weights_norm: Some(true),
        };
    }
    if arch == Arch::Qwen3Moe {
        // A mixture of experts: `forward_mixed` runs its parts one by one, each prompt chunk
        // whole (as `eval` cuts it), beside the others' decoded tokens.
        s.n_embd = 512;
        s.n_expert = 4;
        s.n_expert_used = 2;
        s.n_ff_exp = 256;
    }
    s
}

/// Prompts of 3, 11 and `MAX_BATCH + 13` tokens: the longest is past the sliding window and
/// takes two of `eval`'s chunks, so a mixture of experts (whose prompts go in whole chunks)
/// also mixes prompt chunks with decoding.
fn prompts(n_vocab: u32) -> Vec<Vec<u32>> {
    [3usize, 11, MAX_BATCH + 13]
        .iter()
        .enumerate()
        .map(|(k, &n)| {
            (0..n as u32)
                .map(|i| (i * 37 + k as u32 * 101 + 5) % n_vocab)
                .collect()
        })
        .collect()
}

const STEPS: usize = 12;

/// What a sequence gives alone: its greedy tokens, the logits bits after its prompt, and those
/// of every decode step.
struct Alone {
    toks: Vec<u32>,
    prompt_bits: Vec<u32>,
    bits: Vec<Vec<u32>>,
}

fn bits(l: &[f32]) -> Vec<u32> {
    l.iter().map(|v| v.to_bits()).collect()
}

/// Each sequence alone: its prompt by `eval`, then greedy decoding by `forward`.
fn alone(model: &Model, pool: &Pool, prompt: &[u32], kv: KvType) -> Alone {
    let mut s = model.new_state(128, pool.threads(), kv);
    let mut last = Vec::new();
    model.eval(pool, &mut s, prompt, prompt.len() - 1, |_, l| {
        last = l.to_vec()
    });
    let prompt_bits = bits(&last);
    let (mut toks, mut all) = (Vec::new(), Vec::new());
    for _ in 0..STEPS {
        let t = argmax(&last);
        toks.push(t);
        model.forward(pool, &mut s, t, true);
        last = s.logits(0).to_vec();
        all.push(bits(&last));
    }
    Alone {
        toks,
        prompt_bits,
        bits: all,
    }
}

/// Where each sequence stands in the shared steps.
#[derive(Clone, Copy, Default)]
struct Progress {
    /// Prompt tokens in its cache.
    fed: usize,
    /// Tokens decoded.
    steps: usize,
}

fn check(arch: Arch, ty: GgmlType, kv: KvType) {
    let bytes = synth_model(&spec(arch, ty, kv)).to_bytes();
    let g = Gguf::parse(&bytes).unwrap();
    let c = Config::from_gguf(&g).unwrap();
    let w = Weights::from_gguf(&g, &c).unwrap();
    let model = Model::new(c.clone(), w, Kernels::detect().unwrap());
    let pool = Pool::new(2, |_| {});
    let prompts = prompts(c.n_vocab as u32);
    let want: Vec<Alone> = prompts
        .iter()
        .map(|p| alone(&model, &pool, p, kv))
        .collect();

    // Together, in mixed steps (`Model::forward_mixed`): sequence k joins at step k, its prompt
    // fed in chunks of uneven sizes (cut to the room the step has left) beside the other
    // sequences' decoded tokens and prompt chunks; the last one leaves early. The shortest
    // prompt goes in one token at a time, through `eval_chunk` on its own.
    let mut states: Vec<State> = (0..prompts.len())
        .map(|_| model.new_state(128, pool.threads(), kv))
        .collect();
    let mut work = model.try_new_workspace(128, pool.threads(), kv).unwrap();
    let mut at = vec![Progress::default(); prompts.len()];
    let label = format!("{arch:?} {ty:?} {kv:?}");
    let limit = |k: usize| if k == 2 { STEPS - 3 } else { STEPS };
    // Steps that held a decoded token beside a prompt chunk of several tokens.
    let mut mixed_steps = 0;
    for step in 0..3 * STEPS {
        // (sequence, most tokens) of this step, in an order that changes from step to step.
        let mut members: Vec<(usize, usize)> = Vec::new();
        let mut room = 13 + step % 7;
        for j in 0..prompts.len() {
            let k = (j + step) % prompts.len();
            let (p, a) = (&prompts[k], at[k]);
            if step < k || room == 0 || a.steps >= limit(k) {
                continue;
            }
            if a.fed == p.len() {
                members.push((k, 1));
                room -= 1;
            } else if k == 0 {
                let s = &mut states[k];
                let mut last = Vec::new();
                at[k].fed =
                    model.eval_chunk(&pool, s, p, a.fed, p.len() - 1, &mut |_, l| last = bits(l));
                if at[k].fed == p.len() {
                    assert_eq!(last, want[k].prompt_bits, "{label}: sequence {k}'s prompt");
                }
            } else {
                let most = (1 + (step * 5 + k * 3) % 9).min(room);
                members.push((k, most));
                room -= most.min(p.len() - a.fed);
            }
        }
        if members.is_empty() {
            continue;
        }
        // Each decoding member's next token (what it gave alone).
        let decoded: Vec<[u32; 1]> = members
            .iter()
            .map(|&(k, _)| [want[k].toks[at[k].steps.min(STEPS - 1)]])
            .collect();
        let parts: Vec<Part> = members
            .iter()
            .zip(&decoded)
            .map(|(&(k, most), d)| {
                let (p, a) = (&prompts[k], at[k]);
                if a.fed == p.len() {
                    Part::decode(d)
                } else {
                    Part {
                        tokens: p,
                        start: a.fed,
                        logits_from: p.len() - 1,
                        most,
                    }
                }
            })
            .collect();
        let outs: Vec<usize> = parts.iter().map(|p| model.part_outputs(p)).collect();
        let chunk = |p: &Part| model.part_end(p) - p.start;
        if parts.iter().any(|p| p.tokens.len() == 1) && parts.iter().any(|p| chunk(p) > 1) {
            mixed_steps += 1;
        }
        // The members' states, in member order.
        let mut by_seq: Vec<Option<&mut State>> = states.iter_mut().map(Some).collect();
        let mut refs: Vec<&mut State> = members
            .iter()
            .map(|&(k, _)| by_seq[k].take().unwrap())
            .collect();
        let ends = model.forward_mixed(&pool, &mut work, &mut refs, &parts);
        drop(refs);
        let mut o = 0;
        for (j, &(k, _)) in members.iter().enumerate() {
            let got = (outs[j] > 0).then(|| bits(work.logits(o + outs[j] - 1)));
            o += outs[j];
            let a = &mut at[k];
            if a.fed == prompts[k].len() {
                assert!(
                    got.as_ref() == Some(&want[k].bits[a.steps]),
                    "{label}: sequence {k}, step {}: logits differ from decoding alone (a step of {} parts)",
                    a.steps,
                    members.len()
                );
                a.steps += 1;
            } else {
                a.fed = ends[j];
                let done = a.fed == prompts[k].len();
                assert_eq!(
                    got.is_some(),
                    done,
                    "{label}: sequence {k}: logits only at its prompt's end"
                );
                if let Some(g) = got {
                    assert!(
                        g == want[k].prompt_bits,
                        "{label}: sequence {k}'s prompt (mixed)"
                    );
                }
            }
        }
    }
    for (k, a) in at.iter().enumerate() {
        assert_eq!(a.steps, limit(k), "{label}: sequence {k} did not finish");
    }
    assert!(mixed_steps >= 3, "{label}: only {mixed_steps} mixed steps");
}

#[test]
fn shared_decode_steps_give_each_sequence_its_own_bits() {
    for (arch, ty) in [
        (Arch::Llama, GgmlType::F32),
        (Arch::Llama, GgmlType::Q8_0),
        (Arch::Llama, GgmlType::Q4_0),
        (Arch::Llama, GgmlType::Q4_1),
        (Arch::Llama, GgmlType::Q4K),
        (Arch::Qwen3, GgmlType::Q6K),
        (Arch::Qwen2, GgmlType::Q5K),
        (Arch::Llama, GgmlType::Iq4Xs),
        (Arch::Gemma3, GgmlType::Q8_0),
        (Arch::Gemma4, GgmlType::Q8_0),
        (Arch::Qwen3Moe, GgmlType::Q4K),
        (Arch::Deepseek2, GgmlType::Q8_0),
        (Arch::Deepseek2, GgmlType::Q4K),
    ] {
        check(arch, ty, KvType::F16);
    }
    check(Arch::Llama, GgmlType::Q8_0, KvType::Q8_0);
}

/// The arithmetic signature of a prompt token changes with the prompt's length only where
/// llama.cpp's kernels do: for Q4_K (repacked gemm in groups of 4 tokens) a token in the last
/// partial group of one prompt sits in a full group of a longer one.
#[test]
fn token_signatures_follow_the_kernels_choice() {
    let bytes = synth_model(&spec(Arch::Llama, GgmlType::Q8_0, KvType::F16)).to_bytes();
    let g = Gguf::parse(&bytes).unwrap();
    let c = Config::from_gguf(&g).unwrap();
    let w = Weights::from_gguf(&g, &c).unwrap();
    let m = Model::new(c, w, Kernels::detect().unwrap());
    // One token (decode) differs from a batch's; tokens of two batches of any length agree.
    assert_ne!(m.token_signature(1, 0), m.token_signature(8, 0));
    assert_eq!(m.token_signature(8, 3), m.token_signature(40, 3));
    assert!(m.reuses_prefixes());
    let bytes = synth_model(&spec(Arch::Gemma3, GgmlType::Q8_0, KvType::F16)).to_bytes();
    let g = Gguf::parse(&bytes).unwrap();
    let c = Config::from_gguf(&g).unwrap();
    let w = Weights::from_gguf(&g, &c).unwrap();
    assert!(!Model::new(c, w, Kernels::detect().unwrap()).reuses_prefixes());
}
