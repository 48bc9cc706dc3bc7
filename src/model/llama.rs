//! The llama-family forward pass: embedding, RMSNorm, RoPE, grouped-query attention over an f16
//! KV cache, SwiGLU feed-forward, output head.
//!
//! Precision follows llama.cpp's CPU path (flash attention off): matmul inputs are quantized to
//! the weight type's activation format, K and V are stored as f16, the query is rounded to f16
//! before Q·K, attention weights are rounded to f16 before weighting V.
//!
//! Parallelism: every matrix-vector product splits its output rows into contiguous ranges, one
//! per thread; attention splits heads. A row's value never depends on which thread computed it,
//! so outputs are identical for any thread count.

use super::config::LlamaConfig;
use super::weights::{LlamaWeights, Tensor};
use crate::kernels::half::{f16_to_f32, f32_to_f16};
use crate::kernels::ops::{self, Rope};
use crate::kernels::{ActRow, ActType, GgmlType, Kernels};
use crate::pool::{split, Pool};

/// A model ready to run: config, weight views and the kernels to use.
pub struct Llama<'a> {
    pub config: LlamaConfig,
    pub weights: LlamaWeights<'a>,
    pub kernels: Kernels,
    rope: Rope,
}

/// Element type of the KV cache (llama.cpp's `--cache-type-k/v`): f16 is the default and what
/// llama.cpp uses; f32 trades twice the memory for exact keys and values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KvType {
    F16,
    F32,
}

/// One layer's keys or values.
enum KvBuf {
    F16(Vec<u16>),
    F32(Vec<f32>),
}

impl KvBuf {
    fn new(ty: KvType, len: usize) -> KvBuf {
        match ty {
            KvType::F16 => KvBuf::F16(vec![0; len]),
            KvType::F32 => KvBuf::F32(vec![0.0; len]),
        }
    }

    #[inline]
    fn set(&mut self, i: usize, v: f32) {
        match self {
            KvBuf::F16(b) => b[i] = f32_to_f16(v),
            KvBuf::F32(b) => b[i] = v,
        }
    }

    /// Copies `[start, start + out.len())` into `out` as f32.
    #[inline]
    fn read(&self, start: usize, out: &mut [f32]) {
        match self {
            KvBuf::F16(b) => {
                let n = out.len();
                for (o, &h) in out.iter_mut().zip(&b[start..start + n]) {
                    *o = f16_to_f32(h);
                }
            }
            KvBuf::F32(b) => out.copy_from_slice(&b[start..start + out.len()]),
        }
    }
}

/// Per-sequence state: the KV cache and scratch buffers.
pub struct State {
    pub n_ctx: usize,
    /// Tokens already in the cache.
    pub pos: usize,
    kv_type: KvType,
    /// Per layer: `n_ctx × kv_dim` keys, position-major.
    k: Vec<KvBuf>,
    /// Per layer: `kv_dim × n_ctx` values, transposed (each channel's history contiguous).
    v: Vec<KvBuf>,
    x: Vec<f32>,
    xn: Vec<f32>,
    q: Vec<f32>,
    kcur: Vec<f32>,
    vcur: Vec<f32>,
    att: Vec<f32>,
    gate: Vec<f32>,
    up: Vec<f32>,
    tmp: Vec<f32>,
    /// One attention-score row per thread.
    scores: Vec<f32>,
    acts: ActCache,
    rope_cache: Vec<(f32, f32)>,
    pub logits: Vec<f32>,
}

/// One input vector quantized once for each activation format a group of matmuls needs.
struct ActCache {
    f32: ActRow,
    q8_0: ActRow,
    q8_1: ActRow,
}

impl ActCache {
    fn new() -> ActCache {
        ActCache {
            f32: ActRow::new_for(GgmlType::F32),
            q8_0: ActRow::new_for(GgmlType::Q8_0),
            q8_1: ActRow::new_for(GgmlType::Q4_1),
        }
    }

    fn prepare(&mut self, x: &[f32], tensors: &[&Tensor]) {
        let mut done = [false; 3];
        for t in tensors {
            let (i, row) = match ActType::for_weight(t.ty) {
                ActType::F32 => (0, &mut self.f32),
                ActType::Q8_0 => (1, &mut self.q8_0),
                ActType::Q8_1 => (2, &mut self.q8_1),
            };
            if !done[i] {
                row.set(x);
                done[i] = true;
            }
        }
    }

    fn for_type(&self, ty: GgmlType) -> &ActRow {
        match ActType::for_weight(ty) {
            ActType::F32 => &self.f32,
            ActType::Q8_0 => &self.q8_0,
            ActType::Q8_1 => &self.q8_1,
        }
    }
}

/// A shared mutable f32 buffer that threads write in disjoint ranges.
struct Out {
    ptr: *mut f32,
    len: usize,
}
// SAFETY: threads only write disjoint ranges (enforced by callers via `split`), and the buffer
// outlives the parallel step (`Pool::run` returns only after every thread is done).
unsafe impl Sync for Out {}

impl Out {
    fn new(v: &mut [f32]) -> Out {
        Out {
            ptr: v.as_mut_ptr(),
            len: v.len(),
        }
    }

    /// # Safety
    /// No two live slices from the same `Out` may overlap.
    #[allow(clippy::mut_from_ref)]
    unsafe fn slice(&self, start: usize, end: usize) -> &mut [f32] {
        assert!(start <= end && end <= self.len, "Out::slice out of range");
        // SAFETY: in bounds (checked above); exclusivity is the caller's obligation.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.add(start), end - start) }
    }
}

impl<'a> Llama<'a> {
    pub fn new(config: LlamaConfig, weights: LlamaWeights<'a>, kernels: Kernels) -> Llama<'a> {
        let rope = Rope::new(
            config.n_rot,
            config.rope_freq_base,
            config.rope_freq_scale,
            weights.rope_freqs.clone(),
        );
        Llama {
            config,
            weights,
            kernels,
            rope,
        }
    }

    /// A fresh sequence state with room for `n_ctx` tokens, scratch sized for `n_threads`.
    pub fn new_state(&self, n_ctx: usize, n_threads: usize, kv_type: KvType) -> State {
        let c = &self.config;
        State {
            n_ctx,
            pos: 0,
            kv_type,
            k: (0..c.n_layer)
                .map(|_| KvBuf::new(kv_type, n_ctx * c.kv_dim()))
                .collect(),
            v: (0..c.n_layer)
                .map(|_| KvBuf::new(kv_type, n_ctx * c.kv_dim()))
                .collect(),
            x: vec![0.0; c.n_embd],
            xn: vec![0.0; c.n_embd],
            q: vec![0.0; c.q_dim()],
            kcur: vec![0.0; c.kv_dim()],
            vcur: vec![0.0; c.kv_dim()],
            att: vec![0.0; c.q_dim()],
            gate: vec![0.0; c.n_ff],
            up: vec![0.0; c.n_ff],
            tmp: vec![0.0; c.n_embd],
            scores: vec![0.0; n_threads.max(1) * n_ctx],
            acts: ActCache::new(),
            rope_cache: Vec::with_capacity(c.n_rot / 2),
            logits: vec![0.0; c.n_vocab],
        }
    }

    /// `outs[i] = tensors[i] · x` for matrices that share the input `x`, in one parallel step
    /// whose rows (all matrices' rows, concatenated) are split evenly among the threads.
    fn matvecs(
        &self,
        pool: &Pool,
        acts: &mut ActCache,
        x: &[f32],
        jobs: &mut [(&Tensor, &mut [f32])],
    ) {
        let tensors: Vec<&Tensor> = jobs.iter().map(|(t, _)| *t).collect();
        acts.prepare(x, &tensors);
        let outs: Vec<Out> = jobs.iter_mut().map(|(_, o)| Out::new(o)).collect();
        let total: usize = tensors.iter().map(|t| t.rows).sum();
        let acts = &*acts;
        let kernels = &self.kernels;
        pool.run(&|tid| {
            let (mut start, end) = split(total, tid, pool.threads());
            let mut base = 0;
            for (t, out) in tensors.iter().zip(&outs) {
                let (lo, hi) = (base, base + t.rows);
                base = hi;
                if start >= hi || start >= end {
                    continue;
                }
                let stop = end.min(hi);
                let act = acts.for_type(t.ty);
                // SAFETY: [start, stop) lies inside this thread's share, disjoint from others'.
                let dst = unsafe { out.slice(start - lo, stop - lo) };
                for (r, d) in (start - lo..stop - lo).zip(dst.iter_mut()) {
                    *d = kernels.dot(t.ty, t.row(r), act);
                }
                start = stop;
            }
        });
    }

    /// Runs one token at position `s.pos` through the model, leaving its logits in `s.logits`.
    /// `want_logits = false` skips the output head (prompt tokens whose logits are unused).
    pub fn forward(&self, pool: &Pool, s: &mut State, token: u32, want_logits: bool) {
        let c = &self.config;
        let w = &self.weights;
        assert!(s.pos < s.n_ctx, "forward past the end of the context");
        assert!((token as usize) < c.n_vocab, "token id out of range");
        crate::kernels::dequantize_row(w.token_embd.ty, w.token_embd.row(token as usize), &mut s.x);
        self.rope.cache(s.pos, &mut s.rope_cache);

        for (li, layer) in w.layers.iter().enumerate() {
            ops::rms_norm(&s.x, &layer.attn_norm, c.rms_eps, &mut s.xn);
            self.matvecs(
                pool,
                &mut s.acts,
                &s.xn,
                &mut [
                    (&layer.wq, &mut s.q),
                    (&layer.wk, &mut s.kcur),
                    (&layer.wv, &mut s.vcur),
                ],
            );
            self.rope.apply(&s.rope_cache, &mut s.q, c.head_dim);
            self.rope.apply(&s.rope_cache, &mut s.kcur, c.head_dim);
            self.store_kv(s, li);
            self.attention(pool, s, li);
            self.matvecs(pool, &mut s.acts, &s.att, &mut [(&layer.wo, &mut s.tmp)]);
            for (x, d) in s.x.iter_mut().zip(&s.tmp) {
                *x += d;
            }

            ops::rms_norm(&s.x, &layer.ffn_norm, c.rms_eps, &mut s.xn);
            self.matvecs(
                pool,
                &mut s.acts,
                &s.xn,
                &mut [(&layer.w_gate, &mut s.gate), (&layer.w_up, &mut s.up)],
            );
            ops::swiglu(&mut s.gate, &s.up);
            self.matvecs(
                pool,
                &mut s.acts,
                &s.gate,
                &mut [(&layer.w_down, &mut s.tmp)],
            );
            for (x, d) in s.x.iter_mut().zip(&s.tmp) {
                *x += d;
            }
        }
        s.pos += 1;
        if want_logits {
            ops::rms_norm(&s.x, &w.output_norm, c.rms_eps, &mut s.xn);
            self.matvecs(pool, &mut s.acts, &s.xn, &mut [(&w.output, &mut s.logits)]);
        }
    }

    fn store_kv(&self, s: &mut State, layer: usize) {
        let kv_dim = self.config.kv_dim();
        let pos = s.pos;
        let kl = &mut s.k[layer];
        for (i, &v) in s.kcur.iter().enumerate() {
            kl.set(pos * kv_dim + i, v);
        }
        let vl = &mut s.v[layer];
        for (ch, &v) in s.vcur.iter().enumerate() {
            vl.set(ch * s.n_ctx + pos, v);
        }
    }

    /// Attention of the current token over positions `0..=pos`, heads split among threads.
    fn attention(&self, pool: &Pool, s: &mut State, layer: usize) {
        let c = &self.config;
        let (hd, n_ctx) = (c.head_dim, s.n_ctx);
        let group = c.n_head / c.n_head_kv;
        let n_kv = s.pos + 1;
        let scale = 1.0 / (hd as f32).sqrt();
        let kv_dim = c.kv_dim();
        let (kc, vc, q) = (&s.k[layer], &s.v[layer], &s.q);
        let att = Out::new(&mut s.att);
        let scores = Out::new(&mut s.scores);
        let kernels = &self.kernels;
        // ggml converts the f32 operand to the cache's type before each product.
        let kv_type = s.kv_type;
        let round = move |v: f32| match kv_type {
            KvType::F16 => f16_to_f32(f32_to_f16(v)),
            KvType::F32 => v,
        };
        pool.run(&|tid| {
            let (h0, h1) = split(c.n_head, tid, pool.threads());
            if h0 == h1 {
                return;
            }
            // SAFETY: each thread uses its own score row and its own heads' output range.
            let sc = unsafe { scores.slice(tid * n_ctx, tid * n_ctx + n_kv) };
            let out = unsafe { att.slice(h0 * hd, h1 * hd) };
            let mut q16 = vec![0f32; hd];
            let mut krow = vec![0f32; hd];
            let mut vrow = vec![0f32; n_kv];
            for (h, o) in (h0..h1).zip(out.chunks_exact_mut(hd)) {
                let g = h / group;
                for (d, &v) in q16.iter_mut().zip(&q[h * hd..(h + 1) * hd]) {
                    *d = round(v);
                }
                for (t, score) in sc.iter_mut().enumerate() {
                    kc.read(t * kv_dim + g * hd, &mut krow);
                    *score = kernels.dot_f32(&krow, &q16);
                }
                ops::softmax_scaled(sc, scale);
                for p in sc.iter_mut() {
                    *p = round(*p);
                }
                for (d, od) in o.iter_mut().enumerate() {
                    vc.read((g * hd + d) * n_ctx, &mut vrow);
                    *od = kernels.dot_f32(&vrow, sc);
                }
            }
        });
    }
}
