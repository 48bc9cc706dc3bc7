//! A step that decodes for several sequences at once (`Model::forward_multi`, what `locus
//! serve` runs each step) gives every sequence the logits and cache bits of decoding it alone
//! (`Model::forward`), and a prompt fed a chunk at a time or after a cached prefix
//! (`Model::eval_chunk`) gives those of `Model::eval`. Synthetic models of several families
//! and weight types, sequences of different lengths joining and leaving.

use locus::kernels::{GgmlType, Kernels};
use locus::model::arch::Arch;
use locus::model::forward::{KvType, Model, State};
use locus::model::sampler::argmax;
use locus::model::synth::{synth_model, SynthSpec};
use locus::model::weights::Weights;
use locus::model::{Config, Gguf};
use locus::pool::Pool;

fn spec(arch: Arch, ty: GgmlType, kv: KvType) -> SynthSpec {
    let mut s = SynthSpec::tiny(ty);
    s.arch = arch;
    s.tied = false;
    // K-quant rows are 256 wide; a Q8_0 cache keeps heads of whole 32-value blocks.
    if ty.block_size() > 64 || kv == KvType::Q8_0 {
        s.n_embd = 256;
        s.n_ff = 512;
    }
    if arch == Arch::Gemma3 {
        s.sliding_window = 8;
        s.swa_pattern = 2;
    }
    s
}

/// Prompts of different lengths (one longer than a batch of 32, one past the sliding window).
fn prompts(n_vocab: u32) -> Vec<Vec<u32>> {
    [3usize, 11, 45]
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

/// Each sequence alone: its prompt by `eval`, then greedy decoding by `forward`; the logits
/// bits of every step.
fn alone(model: &Model, pool: &Pool, prompt: &[u32], kv: KvType) -> (Vec<u32>, Vec<Vec<u32>>) {
    let mut s = model.new_state(128, pool.threads(), kv);
    let mut last = Vec::new();
    model.eval(pool, &mut s, prompt, prompt.len() - 1, |_, l| {
        last = l.to_vec()
    });
    let (mut toks, mut bits) = (Vec::new(), Vec::new());
    for _ in 0..STEPS {
        let t = argmax(&last);
        toks.push(t);
        model.forward(pool, &mut s, t, true);
        last = s.logits(0).to_vec();
        bits.push(last.iter().map(|v| v.to_bits()).collect());
    }
    (toks, bits)
}

fn check(arch: Arch, ty: GgmlType, kv: KvType) {
    let bytes = synth_model(&spec(arch, ty, kv)).to_bytes();
    let g = Gguf::parse(&bytes).unwrap();
    let c = Config::from_gguf(&g).unwrap();
    let w = Weights::from_gguf(&g, &c).unwrap();
    let model = Model::new(c.clone(), w, Kernels::detect().unwrap());
    let pool = Pool::new(2, |_| {});
    let prompts = prompts(c.n_vocab as u32);
    let want: Vec<_> = prompts
        .iter()
        .map(|p| alone(&model, &pool, p, kv))
        .collect();

    // Together: sequence k starts decoding at step k (its prompt fed a chunk at a time, the
    // first 2 tokens of the longest taken from another state's cache), all decoding in shared
    // steps; the last one leaves early.
    let mut states: Vec<State> = (0..prompts.len())
        .map(|_| model.new_state(128, pool.threads(), kv))
        .collect();
    let mut work = model.try_new_workspace(128, pool.threads(), kv).unwrap();
    let mut fed = vec![0usize; prompts.len()];
    let mut logits: Vec<Vec<f32>> = vec![Vec::new(); prompts.len()];
    let mut steps = vec![0usize; prompts.len()];
    let label = format!("{arch:?} {ty:?} {kv:?}");
    for step in 0..STEPS + prompts.len() {
        let mut idx = Vec::new();
        let mut toks = Vec::new();
        for k in 0..prompts.len() {
            let limit = if k == 2 { STEPS - 3 } else { STEPS };
            if fed[k] == prompts[k].len() && steps[k] < limit && step >= k {
                idx.push(k);
                toks.push(want[k].0[steps[k]]);
            }
        }
        let mut refs: Vec<&mut State> = states
            .iter_mut()
            .enumerate()
            .filter(|(k, _)| idx.contains(k))
            .map(|(_, s)| s)
            .collect();
        if !refs.is_empty() {
            model.forward_multi(&pool, &mut work, &mut refs, &toks);
            for (j, &k) in idx.iter().enumerate() {
                let got: Vec<u32> = work.logits(j).iter().map(|v| v.to_bits()).collect();
                assert!(
                    got == want[k].1[steps[k]],
                    "{label}: sequence {k}, step {}: logits differ from decoding alone ({} in a step of {})",
                    steps[k],
                    idx.len(),
                    idx.len()
                );
                steps[k] += 1;
            }
        }
        for k in 0..prompts.len() {
            let p = &prompts[k];
            if fed[k] < p.len() && step >= k {
                let s = &mut states[k];
                let last = &mut logits[k];
                fed[k] = model.eval_chunk(&pool, s, p, fed[k], p.len() - 1, &mut |_, l| {
                    *last = l.to_vec()
                });
                if fed[k] == p.len() {
                    assert_eq!(
                        argmax(last),
                        want[k].0[0],
                        "{label}: sequence {k}'s first token"
                    );
                }
            }
        }
    }
    assert!(steps[0] == STEPS && steps[1] == STEPS, "{label}: {steps:?}");
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
