//! Multi-head latent attention (DeepSeek-V2/V3), in the absorbed form llama.cpp runs
//! (`src/models/deepseek2.cpp`, `build_attn_mha` with `v_mla`):
//!
//! 1. queries: `attn_q` (or `attn_q_a` → RMSNorm → `attn_q_b`), `nope + rope` values a head;
//!    the latent vector and the shared rotated key: `attn_kv_a_mqa`, the first `kv_lora`
//!    values RMSNorm'd, the last `rope` rotated;
//! 2. each head's rotated part is rotated, and its no-RoPE part absorbs `attn_k_b` (a matmul
//!    per head, `nope` → `kv_lora`): the head's query is `[absorbed, rotated]`, as wide as a
//!    cache cell `[latent, rotated key]`;
//! 3. the cache keeps one cell per token; every head scores every cell (keys: the whole
//!    cell) and sums the cells' latent parts (values: the first `kv_lora` values, read
//!    transposed as ggml's `ggml_cont(ggml_transpose(v))` copies them each step);
//! 4. each head's output leaves the latent space through `attn_v_b` (a matmul per head,
//!    `kv_lora` → `v_head`), and the heads together through `attn_output`.
//!
//! The arithmetic is grouped-query attention's with one KV head: the same f16 rounding of the
//! query and the probabilities, the same dot kernels per micro-batch kind ([`Arith`]).

use super::attention::{finish_set, start_set};
use super::parallel::{per_token, Out};
use super::step::Step;
use super::{Model, State};
use crate::kernels::ops;
use crate::kernels::Queries;
use crate::model::config::Mla;
use crate::model::kv::{Arith, KvBuf, KvType, KvWriter};
use crate::model::weights::{Latent, LatentQuery, Matrix};
use crate::pool::{split, Pool};

/// Cells a thread transposes at a time: 32 cells of DeepSeek's 576 f16 values are 36 KiB,
/// which an L1 cache holds while all the thread's channels are read from them.
const TRANSPOSE_CELLS: usize = 32;

/// Channels `d0..d1` of the cells `src` (`cell` values each) into rows `d` of `dst` (row d
/// at `d * stride`), a block of [`TRANSPOSE_CELLS`] cells at a time, so the block's cells
/// stay in cache while every channel is read out of them.
fn transpose_block<T: Copy>(
    src: &[T],
    cell: usize,
    (d0, d1): (usize, usize),
    dst: &crate::disjoint::Disjoint<T>,
    stride: usize,
) {
    let cells = src.len() / cell;
    for j0 in (0..cells).step_by(TRANSPOSE_CELLS) {
        let j1 = cells.min(j0 + TRANSPOSE_CELLS);
        let block = &src[j0 * cell..j1 * cell];
        for d in d0..d1 {
            // SAFETY: row d of the destination is this caller's alone (its channels).
            let row = unsafe { dst.slice(d * stride + j0..d * stride + j1) };
            for (o, c) in row.iter_mut().zip(block.chunks_exact(cell)) {
                *o = c[d];
            }
        }
    }
}

/// Cells a set of heads scores before the next block: 64 widened cells of DeepSeek's 576 values
/// are 144 KiB, which an L2 cache holds while every head of the set reads them.
const SCORE_CELLS: usize = 64;

/// Value rows a set of heads sums before the next block: 32 rows of 4096 widened cells are
/// 512 KiB, within an L2 cache.
const VALUE_CHANNELS: usize = 32;

/// The most query heads that read the latent cells together in a decode step.
pub(super) const LATENT_HEAD_SET: usize = 8;

/// A decode step's (token, set of heads) items: heads per set, the batch's first row, tokens.
#[derive(Clone, Copy)]
struct HeadSets {
    set: usize,
    b0: usize,
    n: usize,
}

/// The set size for `n` tokens of `heads` heads on `threads` threads: the largest divisor of
/// the heads up to [`LATENT_HEAD_SET`] that leaves the busiest thread no more heads than sets
/// of one would (few tokens on many threads take smaller sets, or none).
fn head_set(heads: usize, n: usize, threads: usize) -> usize {
    let busiest = |k: usize| (n * (heads / k)).div_ceil(threads.max(1)) * k;
    (1..=LATENT_HEAD_SET.min(heads))
        .rev()
        .filter(|&k| heads.is_multiple_of(k))
        .min_by_key(|&k| busiest(k))
        .unwrap_or(1)
}

/// A state's buffers for latent attention, `MAX_BATCH` rows each.
pub(super) struct LatentBufs {
    /// The low-rank query's first projection (`q_lora` a row; empty for a full-rank one).
    qa: Vec<f32>,
    /// The projected queries, `n_head × (nope + rope)` a row.
    q: Vec<f32>,
    /// One head's input rows of a per-head matmul, gathered contiguous.
    head_in: Vec<f32>,
    /// One head's output rows of a per-head matmul.
    head_out: Vec<f32>,
    /// The heads' outputs after `attn_v_b`, `n_head × v_head` a row: `attn_output`'s input.
    heads: Vec<f32>,
    /// The cells' latent values transposed (`kv_lora` rows of `vt_stride` cells), rebuilt
    /// from the cache for every layer of a step.
    vt: KvBuf,
    vt_stride: usize,
    /// A micro-batch's cells widened to f32: the keys (`head_dim` a cell) and the latent
    /// values transposed (`kv_lora` rows of as many values as cells); grown to the cells a
    /// step reaches.
    kf: Vec<f32>,
    vf: Vec<f32>,
}

impl LatentBufs {
    /// Buffers for `rows` tokens a step over caches of up to `cells` cells, or `None` where
    /// memory runs out.
    pub(super) fn try_new(
        m: &Mla,
        n_head: usize,
        rows: usize,
        (cells, kv_type): (usize, KvType),
    ) -> Option<LatentBufs> {
        let widest = m.nope.max(m.kv_lora).max(m.v_head);
        Some(LatentBufs {
            qa: vec![0.0; rows * m.q_lora],
            q: vec![0.0; rows * n_head * m.q_head()],
            head_in: vec![0.0; rows * widest],
            head_out: vec![0.0; rows * widest],
            heads: vec![0.0; rows * n_head * m.v_head],
            vt: KvBuf::try_new(kv_type, m.kv_lora.checked_mul(cells)?, m.kv_lora)?,
            vt_stride: cells,
            kf: Vec::new(),
            vf: Vec::new(),
        })
    }

    /// Bytes of the transposed latent values for a context of `n_ctx` cells.
    pub(super) fn vt_bytes(m: &Mla, n_ctx: usize, kv_type: KvType) -> Option<u64> {
        (kv_type.row_bytes(n_ctx) as u64).checked_mul(m.kv_lora as u64)
    }
}

impl Model<'_> {
    /// Latent attention of the normed tokens `s.xn` into `s.tmp`.
    pub(super) fn latent(
        &self,
        pool: &Pool,
        s: &mut State,
        step: &mut Step,
        (li, a): (usize, &Latent),
    ) {
        let c = &self.config;
        let m = c.mla.expect("a latent layer has latent sizes");
        let (n, h) = (step.n, c.n_head);
        let mut bufs = s
            .mla
            .take()
            .expect("a latent model's state has latent buffers");
        // The queries and the latent vector with the rotated key.
        match &a.q {
            LatentQuery::Full(wq) => self.matmuls(
                pool,
                &mut s.acts,
                &s.xn,
                (n, step.at()),
                [(wq, &mut bufs.q), (&a.wkv_a, &mut s.kcur)],
            ),
            LatentQuery::LowRank { a: wa, norm, b } => {
                self.matmuls(
                    pool,
                    &mut s.acts,
                    &s.xn,
                    (n, step.at()),
                    [(wa, &mut bufs.qa), (&a.wkv_a, &mut s.kcur)],
                );
                let (eps, r) = (c.rms_eps, m.q_lora);
                let qa = Out::new(&mut bufs.qa);
                per_token(pool, n, &|b| {
                    // SAFETY: token b's row is touched by this call alone.
                    let row = unsafe { qa.slice(b * r, (b + 1) * r) };
                    let x = row.to_vec();
                    ops::rms_norm(&x, norm, eps, row);
                });
                self.matmuls(
                    pool,
                    &mut s.acts,
                    &bufs.qa,
                    (n, step.at()),
                    [(b, &mut bufs.q)],
                );
            }
        }
        if s.check_stop() {
            s.mla = Some(bufs);
            return;
        }
        self.latent_rope(pool, s, &mut bufs, a, n);
        // Each head's no-RoPE part absorbs attn_k_b: s.q gets `[absorbed, rotated]` a head.
        let (qh, cell) = (m.q_head(), c.head_dim);
        for (hh, wk) in a.wk_b.iter().enumerate() {
            for b in 0..n {
                let src = &bufs.q[(b * h + hh) * qh..][..qh];
                bufs.head_in[b * m.nope..(b + 1) * m.nope].copy_from_slice(&src[..m.nope]);
                let dst = &mut s.q[(b * h + hh) * cell..][..cell];
                dst[m.kv_lora..].copy_from_slice(&src[m.nope..]);
            }
            self.head_matmul(pool, s, &mut bufs, (wk, m.nope, m.kv_lora), step, n);
            for b in 0..n {
                let dst = &mut s.q[(b * h + hh) * cell..][..m.kv_lora];
                dst.copy_from_slice(&bufs.head_out[b * m.kv_lora..(b + 1) * m.kv_lora]);
            }
        }
        step.per_sequence(s, |s, rows, micro| {
            self.store_latent(s, li, rows);
            self.attend_latent(pool, s, &mut bufs, (li, rows), micro.arith);
        });
        if s.check_stop() {
            s.mla = Some(bufs);
            return;
        }
        // Each head's output out of the latent space, then the heads together.
        for (hh, wv) in a.wv_b.iter().enumerate() {
            for b in 0..n {
                let src = &s.att[(b * h + hh) * m.kv_lora..][..m.kv_lora];
                bufs.head_in[b * m.kv_lora..(b + 1) * m.kv_lora].copy_from_slice(src);
            }
            self.head_matmul(pool, s, &mut bufs, (wv, m.kv_lora, m.v_head), step, n);
            for b in 0..n {
                let dst = &mut bufs.heads[(b * h + hh) * m.v_head..][..m.v_head];
                dst.copy_from_slice(&bufs.head_out[b * m.v_head..(b + 1) * m.v_head]);
            }
        }
        self.matmuls(
            pool,
            &mut s.acts,
            &bufs.heads,
            (n, step.at()),
            [(&a.wo, &mut s.tmp)],
        );
        s.mla = Some(bufs);
    }

    /// One head's matmul: `head_out[b] = w · head_in[b]` (`cols` in, `rows` out) for the
    /// step's `n` tokens.
    fn head_matmul(
        &self,
        pool: &Pool,
        s: &mut State,
        bufs: &mut LatentBufs,
        (w, cols, rows): (&Matrix, usize, usize),
        step: &Step,
        n: usize,
    ) {
        self.matmuls(
            pool,
            &mut s.acts,
            &bufs.head_in[..n * cols],
            (n, step.at()),
            [(w, &mut bufs.head_out[..n * rows])],
        );
    }

    /// The latent vector's RMSNorm and the rotation of the shared key (in `s.kcur`) and of
    /// each head's rotated part (in `bufs.q`), by each token's RoPE angles.
    fn latent_rope(&self, pool: &Pool, s: &mut State, bufs: &mut LatentBufs, a: &Latent, n: usize) {
        let c = &self.config;
        let m = c.mla.expect("latent sizes");
        let (cell, qh, half, eps) = (c.head_dim, m.q_head(), m.rope / 2, c.rms_eps);
        let kernels = &self.kernels;
        let rc = &s.rope_cache;
        let (kv, q) = (Out::new(&mut s.kcur), Out::new(&mut bufs.q));
        let qrow = c.n_head * qh;
        per_token(pool, n, &|b| {
            let rc = &rc[b * half..(b + 1) * half];
            // SAFETY: token b's rows of kcur and q are touched by this call alone.
            let (kv, q) = unsafe {
                (
                    kv.slice(b * cell, (b + 1) * cell),
                    q.slice(b * qrow, (b + 1) * qrow),
                )
            };
            let (latent, pe) = kv.split_at_mut(m.kv_lora);
            kernels.rope(rc, pe, m.rope);
            let x = latent.to_vec();
            ops::rms_norm(&x, &a.kv_a_norm, eps, latent);
            for head in q.chunks_exact_mut(qh) {
                kernels.rope(rc, &mut head[m.nope..], m.rope);
            }
        });
    }

    /// The batch's cells `[latent, rotated key]` into layer `li`'s cache (one row of
    /// `head_dim` values per cell).
    fn store_latent(&self, s: &mut State, li: usize, (b0, n): (usize, usize)) {
        let cell = self.config.head_dim;
        let (cells, kcur) = (&s.rows[0].cell, &s.kcur);
        let w = s.k[li].writer();
        for (b, &at) in cells[..n].iter().enumerate() {
            for d in 0..cell {
                // SAFETY: this (single) thread writes every cell of the step.
                unsafe { w.set(at * cell + d, kcur[(b0 + b) * cell + d]) };
            }
        }
    }

    /// Every (token, head) pair's scores over the cache, softmax and latent sums into
    /// `s.att` (`kv_lora` values a head), the pairs dealt round-robin to every thread.
    ///
    /// A micro-batch over an f16 cache (tinyBLAS's arithmetic) first widens the cells it
    /// reaches to f32 once for every head (exact), keys row by row and the latent values
    /// transposed; otherwise the values are transposed in the cache's type, as ggml copies
    /// them, and each dot reads the cache.
    fn attend_latent(
        &self,
        pool: &Pool,
        s: &mut State,
        bufs: &mut LatentBufs,
        (li, (b0, n)): (usize, (usize, usize)),
        arith: Arith,
    ) {
        let c = &self.config;
        let m = c.mla.expect("latent sizes");
        let (cell, h) = (c.head_dim, c.n_head);
        let rows = &s.rows[0];
        let (cap, kv_pad, reach) = (rows.cap, rows.kv_pad, rows.reach);
        let kv_type = s.kv_type;
        let kc = &s.k[li];
        // tinyBLAS takes rows of whole 16-lane steps; otherwise ggml's vector dots.
        let kq_arith = if cell.is_multiple_of(16) {
            arith
        } else {
            Arith::Single
        };
        let wide = arith == Arith::Batch && kq_arith == Arith::Batch;
        let wide = match (wide, kc.as_f16()) {
            (true, Some(k)) => {
                self.widen_latent(pool, bufs, &k[..reach * cell], m.kv_lora);
                true
            }
            _ => {
                self.transpose_latent(pool, bufs, kc, m.kv_lora, (cap, reach));
                false
            }
        };
        let (stride, vt, kf, vf) = (bufs.vt_stride, &bufs.vt, &bufs.kf, &bufs.vf);
        let set = head_set(h, n, pool.threads());
        if wide {
            let sets = HeadSets { set, b0, n };
            return self.attend_latent_wide(pool, s, (kf, vf), sets, reach);
        }
        if let (Arith::Single, Some(_), Some(v)) = (kq_arith, kc.as_f16(), vt.as_f16()) {
            let sets = HeadSets { set, b0, n };
            return self.attend_latent_sets(pool, s, (li, v), sets, (kv_pad, stride));
        }
        let q = &s.q;
        let kernels = &self.kernels;
        let scale = m.kq_scale;
        let sstride = s.scratch_stride;
        let att = Out::new(&mut s.att);
        let scratch = Out::new(&mut s.scratch);
        let nth = pool.threads();
        pool.run(&|tid| {
            // SAFETY: each thread uses its own scratch row.
            let mine = unsafe { scratch.slice(tid * sstride, (tid + 1) * sstride) };
            let (sc, rest) = mine.split_at_mut(cap);
            let q16 = &mut rest[..cell];
            for item in (tid..n * h).step_by(nth) {
                let (b, hh) = (item / h, item % h);
                let qrow = &q[((b0 + b) * h + hh) * cell..][..cell];
                for (d, &v) in q16.iter_mut().zip(qrow) {
                    *d = kv_type.round(v);
                }
                let sc = &mut sc[..rows.len[b]];
                let runs = rows.runs(b);
                if runs.len() != 1 || runs[0] != (0, sc.len()) {
                    sc.fill(f32::NEG_INFINITY);
                }
                for &(lo, hi) in runs {
                    let out = &mut sc[lo..hi];
                    kc.dots(kernels, kq_arith, (lo * cell, cell), q16, cell, out);
                }
                kernels.softmax(sc, scale);
                for p in sc.iter_mut() {
                    *p = kv_type.round(*p);
                }
                let at = ((b0 + b) * h + hh) * m.kv_lora;
                // SAFETY: output (b, hh) belongs to this thread's items alone.
                let out = unsafe { att.slice(at, at + m.kv_lora) };
                vt.dots(kernels, arith, (0, stride), sc, kv_pad, out);
            }
        });
    }

    /// A micro-batch's attention over the widened cells (`kf`: keys, `vf`: latent values
    /// transposed, rows of `reach`) in sets of query heads of one token: the set's queries
    /// take each block of [`SCORE_CELLS`] cells in turn and its probabilities each block of
    /// [`VALUE_CHANNELS`] value rows, so a block is read from memory once for the set, not
    /// once per head. Every output is the same rows kernel's dot as one head alone gets.
    fn attend_latent_wide(
        &self,
        pool: &Pool,
        s: &mut State,
        (kf, vf): (&[f32], &[f32]),
        hs: HeadSets,
        reach: usize,
    ) {
        let c = &self.config;
        let m = c.mla.expect("latent sizes");
        let (cell, h, set) = (c.head_dim, c.n_head, hs.set);
        let rows = &s.rows[0];
        let cells = rows.cap;
        let (q, kernels, scale) = (&s.q, &self.kernels, m.kq_scale);
        let sstride = s.scratch_stride;
        assert!(
            set * (cells + cell) <= sstride,
            "a set of {set} heads past the attention scratch"
        );
        let att = Out::new(&mut s.att);
        let scratch = Out::new(&mut s.scratch);
        let nth = pool.threads();
        let per_token = h / set;
        pool.run(&|tid| {
            // SAFETY: each thread uses its own scratch row.
            let mine = unsafe { scratch.slice(tid * sstride, (tid + 1) * sstride) };
            let (scores, rest) = mine.split_at_mut(set * cells);
            let q16 = &mut rest[..set * cell];
            for item in (tid..hs.n * per_token).step_by(nth) {
                let (b, h0) = (item / per_token, item % per_token * set);
                let row0 = ((hs.b0 + b) * h + h0) * cell;
                let (len, runs) = (rows.len[b], rows.runs(b));
                start_set(
                    (q16, &q[row0..row0 + set * cell]),
                    scores,
                    (set, cells, len),
                    runs,
                );
                for &(lo, hi) in runs {
                    assert!(hi <= len, "attention run {lo}..{hi} past {len} cells");
                    let queries = Queries {
                        ys: q16,
                        len: cell,
                        stride: cell,
                        count: set,
                    };
                    for c0 in (lo..hi).step_by(SCORE_CELLS) {
                        let c1 = hi.min(c0 + SCORE_CELLS);
                        let (keys, out) = (&kf[c0 * cell..], &mut scores[c0..]);
                        kernels.att_dot_batch_heads(keys, (cell, c1 - c0), queries, out, cells);
                    }
                }
                finish_set(kernels, scores, (set, cells, len), scale);
                let at = ((hs.b0 + b) * h + h0) * m.kv_lora;
                // SAFETY: outputs (b, h0..h0 + set) belong to this thread's items alone.
                let out = unsafe { att.slice(at, at + set * m.kv_lora) };
                let probs = Queries {
                    ys: scores,
                    len,
                    stride: cells,
                    count: set,
                };
                for d0 in (0..m.kv_lora).step_by(VALUE_CHANNELS) {
                    let d1 = m.kv_lora.min(d0 + VALUE_CHANNELS);
                    let (values, o) = (&vf[d0 * reach..], &mut out[d0..]);
                    kernels.att_dot_batch_heads(values, (reach, d1 - d0), probs, o, m.kv_lora);
                }
            }
        });
    }

    /// The first `reach` cells' latent values (`kv_lora` of each cell) transposed into
    /// `bufs.vt`, in the cache's type, the threads sharing the channels.
    fn transpose_latent(
        &self,
        pool: &Pool,
        bufs: &mut LatentBufs,
        kc: &KvBuf,
        kv_lora: usize,
        (cap, reach): (usize, usize),
    ) {
        let cell = self.config.head_dim;
        assert!(
            cap <= bufs.vt_stride,
            "a cache of {cap} cells past the transposed values' {}",
            bufs.vt_stride
        );
        let stride = bufs.vt_stride;
        let w = bufs.vt.writer();
        let nth = pool.threads();
        pool.run(&|tid| {
            let (d0, d1) = split(kv_lora, tid, nth);
            match (&w, kc) {
                (KvWriter::F16(w), KvBuf::F16(k)) => {
                    transpose_block(&k[..reach * cell], cell, (d0, d1), w, stride)
                }
                (KvWriter::F32(w), KvBuf::F32(k)) => {
                    transpose_block(&k[..reach * cell], cell, (d0, d1), w, stride)
                }
                _ => unreachable!("the transposed values have the cache's type"),
            }
        });
    }

    /// Decode's attention over an f16 cache in sets of query heads: per (token, set) the
    /// set's queries against every cell's keys and its probabilities against the transposed
    /// latent values `v` (rows of `v_stride` cells), each cache row widened once for the set
    /// ([`Kernels::att_dot_decode_heads`]: every head's bits as alone), so the cells are read
    /// `n_head / set` times a token, not once per head.
    fn attend_latent_sets(
        &self,
        pool: &Pool,
        s: &mut State,
        (li, v): (usize, &[u16]),
        hs: HeadSets,
        (kv_pad, v_stride): (usize, usize),
    ) {
        let c = &self.config;
        let m = c.mla.expect("latent sizes");
        let (cell, h, set) = (c.head_dim, c.n_head, hs.set);
        let k = s.k[li].as_f16().expect("an f16 cache");
        let rows = &s.rows[0];
        let cells = rows.cap;
        let (q, kernels, scale) = (&s.q, &self.kernels, m.kq_scale);
        let sstride = s.scratch_stride;
        assert!(
            set * (cells + cell) <= sstride,
            "a set of {set} heads past the attention scratch"
        );
        let att = Out::new(&mut s.att);
        let scratch = Out::new(&mut s.scratch);
        let nth = pool.threads();
        let per_token = h / set;
        pool.run(&|tid| {
            // SAFETY: each thread uses its own scratch row.
            let mine = unsafe { scratch.slice(tid * sstride, (tid + 1) * sstride) };
            let (scores, rest) = mine.split_at_mut(set * cells);
            let q16 = &mut rest[..set * cell];
            for item in (tid..hs.n * per_token).step_by(nth) {
                let (b, h0) = (item / per_token, item % per_token * set);
                let row0 = ((hs.b0 + b) * h + h0) * cell;
                let (len, runs) = (rows.len[b], rows.runs(b));
                start_set(
                    (q16, &q[row0..row0 + set * cell]),
                    scores,
                    (set, cells, len),
                    runs,
                );
                let queries = Queries {
                    ys: q16,
                    len: cell,
                    stride: cell,
                    count: set,
                };
                for &(lo, hi) in runs {
                    assert!(hi <= len, "attention run {lo}..{hi} past {len} cells");
                    let keys = &k[lo * cell..];
                    kernels.att_dot_decode_heads(
                        keys,
                        (cell, hi - lo),
                        queries,
                        cell,
                        &mut scores[lo..],
                        cells,
                    );
                }
                finish_set(kernels, scores, (set, cells, len), scale);
                let at = ((hs.b0 + b) * h + h0) * m.kv_lora;
                // SAFETY: outputs (b, h0..h0 + set) belong to this thread's items alone.
                let out = unsafe { att.slice(at, at + set * m.kv_lora) };
                let probs = Queries {
                    ys: scores,
                    len,
                    stride: cells,
                    count: set,
                };
                kernels.att_dot_decode_heads(
                    v,
                    (v_stride, m.kv_lora),
                    probs,
                    kv_pad,
                    out,
                    m.kv_lora,
                );
            }
        });
    }

    /// An f16 cache's cells `k` (whole cells) widened to f32 (exact): the keys as they lie
    /// into `bufs.kf`, the first `kv_lora` values of each transposed into `bufs.vf` (rows of
    /// as many values as cells), the threads sharing cells and channels.
    fn widen_latent(&self, pool: &Pool, bufs: &mut LatentBufs, k: &[u16], kv_lora: usize) {
        let cell = self.config.head_dim;
        let reach = k.len() / cell;
        bufs.kf.resize(k.len(), 0.0);
        bufs.vf.resize(kv_lora * reach, 0.0);
        let (kf, vf) = (Out::new(&mut bufs.kf), Out::new(&mut bufs.vf));
        let kernels = &self.kernels;
        let nth = pool.threads();
        pool.run(&|tid| {
            let (j0, j1) = split(reach, tid, nth);
            // SAFETY: cells j0..j1 of kf are this thread's alone.
            let dst = unsafe { kf.slice(j0 * cell, j1 * cell) };
            kernels.widen_f16(&k[j0 * cell..j1 * cell], dst);
            let (d0, d1) = split(kv_lora, tid, nth);
            // SAFETY: channels d0..d1 of vf are this thread's alone.
            let rows = unsafe { vf.slice(d0 * reach, d1 * reach) };
            for (d, row) in (d0..d1).zip(rows.chunks_exact_mut(reach.max(1))) {
                for (j, v) in row.iter_mut().enumerate() {
                    *v = crate::kernels::half::f16_to_f32(k[j * cell + d]);
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use crate::kernels::{GgmlType, Kernels};
    use crate::model::forward::{KvType, Model};
    use crate::model::synth::{synth_model, SynthSpec};
    use crate::model::weights::Weights;
    use crate::model::{Config, Gguf};

    #[test]
    fn the_cache_holds_one_latent_cell_per_token_and_layer() {
        let spec = SynthSpec::tiny_latent(GgmlType::F32);
        let bytes = synth_model(&spec).to_bytes();
        let g = Gguf::parse(&bytes).unwrap();
        let c = Config::from_gguf(&g).unwrap();
        let w = Weights::from_gguf(&g, &c).unwrap();
        let model = Model::new(c.clone(), w, Kernels::detect().unwrap());
        let m = c.mla.expect("latent sizes");
        let (n_ctx, f16) = (32768u64, 2u64);
        let cell = (m.kv_lora + m.rope) as u64;
        let sizes = model.state_bytes(n_ctx as usize, 1, KvType::F16).unwrap();
        assert_eq!(sizes.kv, c.n_layer as u64 * n_ctx * cell * f16);
        // Per-head keys (nope + rope) and values (v_head) of every head would take 4 times
        // as much for these sizes (DeepSeek-V3's: 8.9 times).
        let per_head = (c.n_head * (m.q_head() + m.v_head)) as u64;
        assert_eq!(per_head, 4 * cell);
        // What is allocated: one latent cell per position in each layer, no value buffers.
        let s = model.try_new_state(4096, 1, KvType::F16).unwrap();
        let cells: Vec<usize> = s.k.iter().map(|k| k.as_bytes().len()).collect();
        assert_eq!(cells, vec![4096 * cell as usize * 2; c.n_layer]);
        assert!(s.v.iter().all(|v| v.as_bytes().is_empty()));
    }
}
