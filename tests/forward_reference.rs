//! The forward pass against a naive f64 implementation written here, on a tiny synthetic model
//! with F32 weights and an F32 KV cache (so no quantization separates the two).

mod common;

use locus::kernels::{GgmlType, Kernels, Tier};
use locus::model::forward::{KvType, Model};
use locus::model::synth::{synth_model, SynthSpec};
use locus::model::weights::Weights;
use locus::model::{Config, Gguf};
use locus::pool::Pool;

struct Mat {
    rows: usize,
    cols: usize,
    v: Vec<f64>,
}

impl Mat {
    fn from(g: &Gguf, name: &str) -> Mat {
        let t = g.tensor(name).unwrap_or_else(|| panic!("{name}"));
        let cols = t.dims[0] as usize;
        let rows = t.dims.get(1).copied().unwrap_or(1) as usize;
        let v = t
            .data
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()) as f64)
            .collect();
        Mat { rows, cols, v }
    }

    fn mul(&self, x: &[f64]) -> Vec<f64> {
        (0..self.rows)
            .map(|r| {
                (0..self.cols)
                    .map(|c| self.v[r * self.cols + c] * x[c])
                    .sum()
            })
            .collect()
    }
}

fn rms_norm(x: &[f64], w: &[f64], eps: f64) -> Vec<f64> {
    let ms = x.iter().map(|v| v * v).sum::<f64>() / x.len() as f64;
    let s = 1.0 / (ms + eps).sqrt();
    x.iter().zip(w).map(|(a, b)| a * s * b).collect()
}

fn rope(x: &mut [f64], head_dim: usize, pos: usize, base: f64) {
    for head in x.chunks_exact_mut(head_dim) {
        for i in 0..head_dim / 2 {
            let theta = pos as f64 * base.powf(-2.0 * i as f64 / head_dim as f64);
            let (c, s) = (theta.cos(), theta.sin());
            let (a, b) = (head[2 * i], head[2 * i + 1]);
            head[2 * i] = a * c - b * s;
            head[2 * i + 1] = a * s + b * c;
        }
    }
}

/// Logits after each token of `tokens`, computed in f64 straight from the definition.
fn reference(g: &Gguf, c: &Config, tokens: &[u32]) -> Vec<Vec<f64>> {
    let embd = Mat::from(g, "token_embd.weight");
    let out_norm = Mat::from(g, "output_norm.weight").v;
    let hd = c.head_dim;
    let group = c.n_head / c.n_head_kv;
    let mut kcache: Vec<Vec<Vec<f64>>> = vec![Vec::new(); c.n_layer];
    let mut vcache: Vec<Vec<Vec<f64>>> = vec![Vec::new(); c.n_layer];
    let mut all = Vec::new();
    for (pos, &tok) in tokens.iter().enumerate() {
        let mut x: Vec<f64> =
            embd.v[tok as usize * c.n_embd..(tok as usize + 1) * c.n_embd].to_vec();
        for l in 0..c.n_layer {
            let m = |s: &str| Mat::from(g, &format!("blk.{l}.{s}.weight"));
            let xn = rms_norm(&x, &m("attn_norm").v, c.rms_eps as f64);
            let mut q = m("attn_q").mul(&xn);
            let mut k = m("attn_k").mul(&xn);
            let v = m("attn_v").mul(&xn);
            rope(&mut q, hd, pos, c.rope_freq_base as f64);
            rope(&mut k, hd, pos, c.rope_freq_base as f64);
            kcache[l].push(k);
            vcache[l].push(v);
            let mut att = vec![0.0; c.n_head * hd];
            for h in 0..c.n_head {
                let kvh = h / group;
                let qh = &q[h * hd..(h + 1) * hd];
                let scores: Vec<f64> = kcache[l]
                    .iter()
                    .map(|k| {
                        qh.iter()
                            .zip(&k[kvh * hd..(kvh + 1) * hd])
                            .map(|(a, b)| a * b)
                            .sum::<f64>()
                            / (hd as f64).sqrt()
                    })
                    .collect();
                let max = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let e: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
                let sum: f64 = e.iter().sum();
                for (t, v) in vcache[l].iter().enumerate() {
                    for d in 0..hd {
                        att[h * hd + d] += e[t] / sum * v[kvh * hd + d];
                    }
                }
            }
            let o = m("attn_output").mul(&att);
            x.iter_mut().zip(&o).for_each(|(a, b)| *a += b);
            let xn = rms_norm(&x, &m("ffn_norm").v, c.rms_eps as f64);
            let gate = m("ffn_gate").mul(&xn);
            let up = m("ffn_up").mul(&xn);
            let hcur: Vec<f64> = gate
                .iter()
                .zip(&up)
                .map(|(g, u)| g / (1.0 + (-g).exp()) * u)
                .collect();
            let d = m("ffn_down").mul(&hcur);
            x.iter_mut().zip(&d).for_each(|(a, b)| *a += b);
        }
        all.push(embd.mul(&rms_norm(&x, &out_norm, c.rms_eps as f64)));
    }
    all
}

fn check_tier(tier: Tier, threads: usize) {
    let kernels = match Kernels::for_tier(tier) {
        Ok(k) => k,
        Err(e) => {
            common::skip::tier_unavailable(tier, &e);
            return;
        }
    };
    let bytes = synth_model(&SynthSpec::tiny(GgmlType::F32)).to_bytes();
    let g = Gguf::parse(&bytes).unwrap();
    let c = Config::from_gguf(&g).unwrap();
    let w = Weights::from_gguf(&g, &c).unwrap();
    let tokens: Vec<u32> = vec![5, 77, 300, 12, 12, 200, 3, 150, 99, 42, 7, 380];
    let want = reference(&g, &c, &tokens);
    let model = Model::new(c.clone(), w, kernels);
    let pool = Pool::new(threads, |_| {});
    let mut s = model.new_state(32, threads, KvType::F32);
    for (i, &t) in tokens.iter().enumerate() {
        model.forward(&pool, &mut s, t, true);
        let scale = want[i].iter().fold(0f64, |m, v| m.max(v.abs()));
        let err = s
            .logits(0)
            .iter()
            .zip(&want[i])
            .fold(0f64, |m, (a, b)| m.max((*a as f64 - b).abs()));
        assert!(
            err / scale < 1e-4,
            "tier {tier}, {threads} threads, token {i}: relative error {}",
            err / scale
        );
    }
}

#[test]
fn forward_matches_f64_reference_scalar() {
    check_tier(Tier::Scalar, 1);
    check_tier(Tier::Scalar, 3);
}

#[test]
fn forward_matches_f64_reference_avx2() {
    check_tier(Tier::Avx2, 2);
}

/// Batched prompt evaluation, one-at-a-time decode and any thread count give bit-identical
/// logits, for quantized weights too (every output element is the same dot product).
#[test]
fn batched_equals_sequential_bit_for_bit() {
    for ty in [GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q8_0] {
        let bytes = synth_model(&SynthSpec::tiny(ty)).to_bytes();
        let g = Gguf::parse(&bytes).unwrap();
        let c = Config::from_gguf(&g).unwrap();
        let w = Weights::from_gguf(&g, &c).unwrap();
        let model = Model::new(c, w, Kernels::detect().unwrap());
        let tokens: Vec<u32> = (0..75).map(|i| (i * 37 + 11) % 384).collect();

        let pool1 = Pool::new(1, |_| {});
        let mut s = model.new_state(128, 1, KvType::F16);
        let mut seq = Vec::new();
        for &t in &tokens {
            model.forward(&pool1, &mut s, t, true);
            seq.push(s.logits(0).to_vec());
        }
        for threads in [2, 3] {
            let pool = Pool::new(threads, |_| {});
            let mut s = model.new_state(128, threads, KvType::F16);
            let mut batched = Vec::new();
            model.eval(&pool, &mut s, &tokens, 0, |i, l| {
                assert_eq!(i, batched.len());
                batched.push(l.to_vec());
            });
            assert_eq!(batched.len(), seq.len());
            for (i, (a, b)) in batched.iter().zip(&seq).enumerate() {
                assert!(
                    a == b,
                    "{} {threads} threads: token {i} logits differ",
                    ty.name()
                );
            }
        }
    }
}

/// The q8_0 KV cache (`-ctk q8_0 -ctv q8_0`): batched and one-at-a-time evaluation, any thread
/// count and every kernel tier give the same bits (its attention does not depend on the
/// batch's shape); its logits stay close to the f16 cache's; a model whose heads are not whole
/// 32-value blocks is refused by name.
#[test]
fn q8_0_kv_cache_is_deterministic_and_close_to_f16() {
    let spec = SynthSpec {
        n_embd: 128,
        n_head: 4,
        n_head_kv: 2,
        n_ff: 192,
        ..SynthSpec::tiny(GgmlType::Q8_0)
    };
    let bytes = synth_model(&spec).to_bytes();
    let g = Gguf::parse(&bytes).unwrap();
    let c = Config::from_gguf(&g).unwrap();
    assert_eq!(c.head_dim, 32);
    let tokens: Vec<u32> = (0..70).map(|i| (i * 37 + 11) % 384).collect();
    let run = |kernels: Kernels, threads: usize, kv: KvType, batched: bool| -> Vec<Vec<f32>> {
        let w = Weights::from_gguf(&g, &c).unwrap();
        let model = Model::new(c.clone(), w, kernels);
        let pool = Pool::new(threads, |_| {});
        let mut s = model.new_state(128, threads, kv);
        let mut out = Vec::new();
        if batched {
            model.eval(&pool, &mut s, &tokens, 0, |_, l| out.push(l.to_vec()));
        } else {
            for &t in &tokens {
                model.forward(&pool, &mut s, t, true);
                out.push(s.logits(0).to_vec());
            }
        }
        out
    };
    let want = run(Kernels::scalar(), 1, KvType::Q8_0, false);
    let mut kernels = vec![Kernels::scalar()];
    for t in [Tier::Avx2, Tier::Avx512] {
        match Kernels::for_tier(t) {
            Ok(k) => kernels.push(k),
            Err(e) => common::skip::tier_unavailable(t, &e),
        }
    }
    for k in kernels {
        for (threads, batched) in [(1, true), (2, false), (3, true)] {
            let got = run(k, threads, KvType::Q8_0, batched);
            assert!(
                got == want,
                "tier {} {threads} threads batched={batched}: q8_0 logits differ",
                k.tier
            );
        }
    }
    // Close to the f16 cache: the largest logit error, against the logits' spread.
    let f16 = run(Kernels::scalar(), 1, KvType::F16, false);
    for (i, (a, b)) in want.iter().zip(&f16).enumerate() {
        let spread = b.iter().fold(0f32, |m, v| m.max(v.abs()));
        let err = a.iter().zip(b).fold(0f32, |m, (x, y)| m.max((x - y).abs()));
        assert!(err <= 0.05 * spread, "token {i}: error {err} of {spread}");
    }
    assert_ne!(want, f16, "the q8_0 cache is really used");
    // Heads of 16 values cannot be q8_0 rows.
    let tiny = synth_model(&SynthSpec::tiny(GgmlType::Q8_0)).to_bytes();
    let g = Gguf::parse(&tiny).unwrap();
    let c = Config::from_gguf(&g).unwrap();
    let model = Model::new(
        c.clone(),
        Weights::from_gguf(&g, &c).unwrap(),
        Kernels::scalar(),
    );
    let e = model
        .try_new_state(64, 1, KvType::Q8_0)
        .err()
        .expect("refused")
        .to_string();
    assert!(e.contains("q8_0") && e.contains("16 values"), "{e}");
}
