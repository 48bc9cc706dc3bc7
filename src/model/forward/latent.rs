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
//!
//! Files of the older unabsorbed form (one `attn_kv_b` a layer) run as llama.cpp runs them
//! ([`Model::unabsorbed`]): steps 1 alike, then `attn_kv_b` decompresses each token's latent
//! vector into every head's key and value, and grouped-query attention with a KV head per query
//! head (keys `nope + rope`, values `v_head`) attends over a cache of those.

use super::attention::{finish_set, start_set};
use super::parallel::{per_token, BatchActs, Out, MAX_JOBS};
use super::step::Step;
use super::{Model, State};
use crate::kernels::ops;
use crate::kernels::Queries;
use crate::model::config::Mla;
use crate::model::kv::{Arith, KvBuf, KvType, KvWriter};
use crate::model::weights::{Latent, LatentQuery, Matrix};
use crate::pool::{split, Pool};
use std::ops::Range;

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

/// The most bytes of gathered inputs and outputs one step of per-head matmuls keeps, within
/// an L2 cache.
const HEAD_STEP_BYTES: usize = 512 * 1024;

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

/// What a set of heads reads in [`Model::attend_latent_heads`]: layer `li`'s cells through
/// each group's views, widened (a micro-batch: rows of `reach` cells) or as the f16 cache
/// and its transposed values (decode: rows of `v_stride`, ggml's padded length `kv_pad`).
#[derive(Clone, Copy)]
enum SetCells<'v> {
    Wide {
        li: usize,
        views: &'v [CellViews],
        reach: usize,
    },
    Decode {
        li: usize,
        views: &'v [CellViews],
        kv_pad: usize,
        v_stride: usize,
    },
}

/// [`SetCells`] for one group: its copy's slices.
#[derive(Clone, Copy)]
enum GroupCells<'v> {
    Wide {
        kf: &'v [f32],
        vf: &'v [f32],
        reach: usize,
    },
    Decode {
        k: &'v [u16],
        v: &'v [u16],
        kv_pad: usize,
        v_stride: usize,
    },
}

impl<'v> SetCells<'v> {
    fn layer(&self) -> usize {
        match *self {
            SetCells::Wide { li, .. } | SetCells::Decode { li, .. } => li,
        }
    }

    /// What group `g` reads: its view, and for decode its copy of the cells (`copies`).
    fn of_group(&self, g: usize, copies: &[&'v KvBuf]) -> GroupCells<'v> {
        match *self {
            SetCells::Wide { views, reach, .. } => {
                let view = &views[copy_of(g, views.len())];
                GroupCells::Wide {
                    kf: &view.kf,
                    vf: &view.vf,
                    reach,
                }
            }
            SetCells::Decode {
                views,
                kv_pad,
                v_stride,
                ..
            } => GroupCells::Decode {
                k: (copies[copy_of(g, copies.len())].as_f16()).expect("an f16 cache"),
                v: (views[copy_of(g, views.len())].vt.as_f16()).expect("f16 values"),
                kv_pad,
                v_stride,
            },
        }
    }
}

/// The pool group that writes and reads copy `copy` of a latent cache (or of its views) in a
/// pool of `groups`: its own, or the last group where the state has more copies than the pool
/// has groups.
pub(super) fn copy_group(copy: usize, groups: usize) -> usize {
    copy.min(groups.max(1) - 1)
}

/// The copy group `group` reads out of `copies`: its own, or the last where there are fewer.
fn copy_of(group: usize, copies: usize) -> usize {
    group.min(copies.max(1) - 1)
}

/// The threads that build (and read) view `view` of `views` in a pool of `groups`: those of
/// the groups that read it (`copy_of`), contiguous; all of them for a single view.
fn builders(view: usize, views: usize, groups: &[Range<usize>]) -> Range<usize> {
    match groups.get(view) {
        None => 0..0,
        Some(g) if view + 1 == views => g.start..groups.last().map_or(g.end, |l| l.end),
        Some(g) => g.clone(),
    }
}

/// Layer `li`'s cells in every copy of a cache of `n_layer` layers (`k`: copy-major), by copy.
fn layer_copies(k: &[KvBuf], li: usize, n_layer: usize) -> Vec<&KvBuf> {
    k.iter().skip(li).step_by(n_layer).collect()
}

/// One pool group's views of its copy of the cells, rebuilt for every layer of a step.
struct CellViews {
    /// The cells' latent values transposed (`kv_lora` rows of `vt_stride` cells).
    vt: KvBuf,
    /// A micro-batch's cells widened to f32: the keys (`head_dim` a cell) and the latent
    /// values transposed (`kv_lora` rows of as many values as cells); grown to the cells a
    /// step reaches, with zeroed pages that the group's threads touch first.
    kf: Vec<f32>,
    vf: Vec<f32>,
}

/// A state's buffers for latent attention, `MAX_BATCH` rows each.
pub(super) struct LatentBufs {
    /// The low-rank query's first projection (`q_lora` a row; empty for a full-rank one).
    qa: Vec<f32>,
    /// The projected queries, `n_head × (nope + rope)` a row.
    q: Vec<f32>,
    /// The input rows of a step of per-head matmuls, gathered contiguous, head-major.
    head_in: Vec<f32>,
    /// The output rows of a step of per-head matmuls, head-major.
    head_out: Vec<f32>,
    /// The input rows of each head of such a step, prepared for its matrix.
    head_acts: Vec<BatchActs>,
    /// The heads' outputs after `attn_v_b`, `n_head × v_head` a row: `attn_output`'s input.
    heads: Vec<f32>,
    /// The unabsorbed form's latent vectors with the rotated key (`kv_lora + rope` a row;
    /// the absorbed form projects them straight into the state's `kcur`), and every head's
    /// no-RoPE key and value out of `attn_kv_b` (`n_head × (nope + v_head)` a row).
    kva: Vec<f32>,
    kvb: Vec<f32>,
    /// Per cache copy (pool group): its views of the cells.
    views: Vec<CellViews>,
    vt_stride: usize,
}

impl LatentBufs {
    /// Buffers for `rows` tokens a step of `n_head` heads over `copies` caches of up to
    /// `cells` cells (0 copies: the unabsorbed form, which keeps none), or `None` where memory
    /// runs out.
    pub(super) fn try_new(
        m: &Mla,
        (n_head, copies): (usize, usize),
        rows: usize,
        (cells, kv_type): (usize, KvType),
    ) -> Option<LatentBufs> {
        let widest = m.nope.max(m.kv_lora).max(m.v_head);
        // Heads a parallel step of per-head matmuls takes (none in the unabsorbed form).
        let per = if m.joint {
            1
        } else {
            n_head.clamp(1, MAX_JOBS)
        };
        let joint = |len: usize| if m.joint { vec![0.0; len] } else { Vec::new() };
        let views = (0..copies)
            .map(|_| {
                Some(CellViews {
                    vt: KvBuf::try_new(kv_type, m.kv_lora.checked_mul(cells)?, m.kv_lora)?,
                    kf: Vec::new(),
                    vf: Vec::new(),
                })
            })
            .collect::<Option<Vec<_>>>()?;
        Some(LatentBufs {
            qa: vec![0.0; rows * m.q_lora],
            q: vec![0.0; rows * n_head * m.q_head()],
            head_in: vec![0.0; per * rows * widest],
            head_out: vec![0.0; per * rows * widest],
            head_acts: (0..per).map(|_| BatchActs::new()).collect(),
            heads: vec![0.0; rows * n_head * m.v_head],
            kva: joint(rows * (m.kv_lora + m.rope)),
            kvb: joint(rows * n_head * (m.nope + m.v_head)),
            views,
            vt_stride: cells,
        })
    }

    /// Heads a parallel step of per-head matmuls takes for `n` tokens: as many as the buffers
    /// hold for a decode step (fewer steps, fewer waits for the slowest thread), as many as
    /// keep a step's inputs and outputs within [`HEAD_STEP_BYTES`] for a prompt's (a prompt
    /// step's rows are read back while still in cache; measured on a V3-shape model, 32 heads
    /// of 64 tokens a step were 2.5% slower at pp128 than one head a step).
    fn heads_per_step(&self, m: &Mla, n: usize) -> usize {
        let widest = m.nope.max(m.kv_lora).max(m.v_head);
        let fit = HEAD_STEP_BYTES / (2 * n.max(1) * widest * std::mem::size_of::<f32>());
        fit.clamp(1, self.head_acts.len().max(1))
    }

    /// Bytes of one copy's transposed latent values for a context of `n_ctx` cells.
    pub(super) fn vt_bytes(m: &Mla, n_ctx: usize, kv_type: KvType) -> Option<u64> {
        (kv_type.row_bytes(n_ctx) as u64).checked_mul(m.kv_lora as u64)
    }
}

/// `v` grown to at least `len` values, at least doubling: a fresh zeroed allocation (its
/// pages untouched until the threads that fill it write them, on their node), not a resize
/// that the calling thread would fill.
fn grow_zeroed(v: &mut Vec<f32>, len: usize) {
    if v.len() < len {
        *v = vec![0.0; len.max(2 * v.len())];
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
        // The queries and the latent vector with the rotated key (the absorbed form's straight
        // into `kcur`, where its cache cells are stored from).
        let kv_out = match a.wkv_b {
            Some(_) => &mut bufs.kva,
            None => &mut s.kcur,
        };
        match &a.q {
            LatentQuery::Full(wq) => self.matmuls(
                pool,
                &mut s.acts,
                &s.xn,
                (n, step.at()),
                [(wq, &mut bufs.q), (&a.wkv_a, kv_out)],
            ),
            LatentQuery::LowRank { a: wa, norm, b } => {
                self.matmuls(
                    pool,
                    &mut s.acts,
                    &s.xn,
                    (n, step.at()),
                    [(wa, &mut bufs.qa), (&a.wkv_a, kv_out)],
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
        let kv = match a.wkv_b {
            Some(_) => &mut bufs.kva,
            None => &mut s.kcur,
        };
        self.latent_rope(pool, (kv, &mut bufs.q), &s.rope_cache, a, n);
        if let Some(wkv_b) = &a.wkv_b {
            self.unabsorbed(pool, s, step, (li, a, wkv_b), &mut bufs);
            s.mla = Some(bufs);
            return;
        }
        // Each head's no-RoPE part absorbs attn_k_b: s.q gets `[absorbed, rotated]` a head.
        // The heads go through their matmuls a parallel step of `per` heads at a time.
        let (qh, cell, per) = (m.q_head(), c.head_dim, bufs.heads_per_step(&m, n));
        for h0 in (0..h).step_by(per) {
            let h1 = h.min(h0 + per);
            for hh in h0..h1 {
                for b in 0..n {
                    let src = &bufs.q[(b * h + hh) * qh..][..qh];
                    let at = ((hh - h0) * n + b) * m.nope;
                    bufs.head_in[at..at + m.nope].copy_from_slice(&src[..m.nope]);
                    let dst = &mut s.q[(b * h + hh) * cell..][..cell];
                    dst[m.kv_lora..].copy_from_slice(&src[m.nope..]);
                }
            }
            let sizes = (m.nope, m.kv_lora);
            self.head_step(pool, s, &mut bufs, (&a.wk_b[h0..h1], sizes), step);
            for hh in h0..h1 {
                for b in 0..n {
                    let at = ((hh - h0) * n + b) * m.kv_lora;
                    let dst = &mut s.q[(b * h + hh) * cell..][..m.kv_lora];
                    dst.copy_from_slice(&bufs.head_out[at..at + m.kv_lora]);
                }
            }
        }
        step.per_sequence(s, |s, rows, micro| {
            self.store_latent(pool, s, li, rows);
            self.attend_latent(pool, s, &mut bufs, (li, rows), micro.arith);
        });
        if s.check_stop() {
            s.mla = Some(bufs);
            return;
        }
        // Each head's output out of the latent space, then the heads together.
        for h0 in (0..h).step_by(per) {
            let h1 = h.min(h0 + per);
            for hh in h0..h1 {
                for b in 0..n {
                    let src = &s.att[(b * h + hh) * m.kv_lora..][..m.kv_lora];
                    let at = ((hh - h0) * n + b) * m.kv_lora;
                    bufs.head_in[at..at + m.kv_lora].copy_from_slice(src);
                }
            }
            let sizes = (m.kv_lora, m.v_head);
            self.head_step(pool, s, &mut bufs, (&a.wv_b[h0..h1], sizes), step);
            for hh in h0..h1 {
                for b in 0..n {
                    let at = ((hh - h0) * n + b) * m.v_head;
                    let dst = &mut bufs.heads[(b * h + hh) * m.v_head..][..m.v_head];
                    dst.copy_from_slice(&bufs.head_out[at..at + m.v_head]);
                }
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

    /// The unabsorbed form's rest of the layer, as llama.cpp runs a file without the split
    /// weights: `attn_kv_b` decompresses each token's normed latent vector (`bufs.kva`, RoPE
    /// done) into every head's no-RoPE key and value; a head's key is that part followed by the
    /// shared rotated key, its query `[nope, rotated]` as projected; then per-head attention
    /// over the cache of keys and values (grouped-query attention's, a KV head per query head,
    /// values of `v_head`), and `attn_output`.
    fn unabsorbed(
        &self,
        pool: &Pool,
        s: &mut State,
        step: &mut Step,
        (li, a, wkv_b): (usize, &Latent, &Matrix),
        bufs: &mut LatentBufs,
    ) {
        let c = &self.config;
        let m = c.mla.expect("latent sizes");
        let (n, h, cell) = (step.n, c.n_head, m.kv_lora + m.rope);
        let (kd, vd, kvb_head) = (c.head_dim, c.head_dim_v, m.nope + m.v_head);
        for b in 0..n {
            let src = &bufs.kva[b * cell..b * cell + m.kv_lora];
            bufs.head_in[b * m.kv_lora..(b + 1) * m.kv_lora].copy_from_slice(src);
        }
        self.matmuls(
            pool,
            &mut s.acts,
            &bufs.head_in[..n * m.kv_lora],
            (n, step.at()),
            [(wkv_b, &mut bufs.kvb)],
        );
        if s.check_stop() {
            return;
        }
        let (q_dim, kv_dim, v_dim) = (c.q_dim(), c.kv_dim(), c.v_dim());
        s.q[..n * q_dim].copy_from_slice(&bufs.q[..n * q_dim]);
        for b in 0..n {
            let pe = &bufs.kva[b * cell + m.kv_lora..(b + 1) * cell];
            for hh in 0..h {
                let kv = &bufs.kvb[(b * h + hh) * kvb_head..][..kvb_head];
                let k = &mut s.kcur[b * kv_dim + hh * kd..][..kd];
                k[..m.nope].copy_from_slice(&kv[..m.nope]);
                k[m.nope..].copy_from_slice(pe);
                s.vcur[b * v_dim + hh * vd..][..vd].copy_from_slice(&kv[m.nope..]);
            }
        }
        step.per_sequence(s, |s, rows, micro| {
            self.store_kv(pool, s, li, rows, false);
            self.attention(pool, s, li, rows, micro.arith, false);
        });
        if s.check_stop() {
            return;
        }
        self.matmuls(
            pool,
            &mut s.acts,
            &s.att[..n * c.att_dim()],
            (n, step.at()),
            [(&a.wo, &mut s.tmp)],
        );
    }

    /// The heads' matmuls of one parallel step: `head_out[h][b] = ws[h] · head_in[h][b]`
    /// (`cols` in, `rows` out, head-major) for the step's tokens.
    fn head_step(
        &self,
        pool: &Pool,
        s: &mut State,
        bufs: &mut LatentBufs,
        (ws, (cols, rows)): (&[Matrix], (usize, usize)),
        step: &Step,
    ) {
        let (n, k) = (step.n, ws.len());
        self.head_matmuls(
            pool,
            (&mut s.acts, &mut bufs.head_acts[..k]),
            (&bufs.head_in[..k * n * cols], n, step.at()),
            ws,
            &mut bufs.head_out[..k * n * rows],
        );
    }

    /// The latent vector's RMSNorm and the rotation of the shared key (in `kv`, rows of
    /// `kv_lora + rope`) and of each head's rotated part (in `q`), by each token's RoPE
    /// angles `rc`.
    fn latent_rope(
        &self,
        pool: &Pool,
        (kv, q): (&mut [f32], &mut [f32]),
        rc: &[(f32, f32)],
        a: &Latent,
        n: usize,
    ) {
        let c = &self.config;
        let m = c.mla.expect("latent sizes");
        let (cell, qh, half, eps) = (m.kv_lora + m.rope, m.q_head(), m.rope / 2, c.rms_eps);
        let kernels = &self.kernels;
        let (kv, q) = (Out::new(kv), Out::new(q));
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

    /// The batch's cells `[latent, rotated key]` into layer `li` of every copy of the cache
    /// (one row of `head_dim` values per cell), each copy by the first thread of the group
    /// that reads it, so first touch puts its pages on that group's node too.
    fn store_latent(&self, pool: &Pool, s: &mut State, li: usize, (b0, n): (usize, usize)) {
        let (cell, n_layer) = (self.config.head_dim, self.config.n_layer);
        let (cells, kcur) = (&s.rows[0].cell, &s.kcur);
        let writers: Vec<KvWriter> = (s.k.iter_mut().skip(li).step_by(n_layer))
            .map(KvBuf::writer)
            .collect();
        let store = |w: &KvWriter| {
            for (b, &at) in cells[..n].iter().enumerate() {
                for d in 0..cell {
                    // SAFETY: one thread writes every cell of the step into this copy.
                    unsafe { w.set(at * cell + d, kcur[(b0 + b) * cell + d]) };
                }
            }
        };
        if let [w] = &writers[..] {
            return store(w);
        }
        let groups = pool.groups();
        pool.run(&|tid| {
            for (c, w) in writers.iter().enumerate() {
                if tid == groups[copy_group(c, groups.len())].start {
                    store(w);
                }
            }
        });
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
        let copies = layer_copies(&s.k, li, c.n_layer);
        let kc = copies[0];
        // tinyBLAS takes rows of whole 16-lane steps; otherwise ggml's vector dots.
        let kq_arith = if cell.is_multiple_of(16) {
            arith
        } else {
            Arith::Single
        };
        let wide = arith == Arith::Batch && kq_arith == Arith::Batch;
        let wide = wide && kc.as_f16().is_some();
        if wide {
            self.widen_latent(pool, bufs, &copies, (m.kv_lora, reach));
        } else {
            self.transpose_latent(pool, bufs, &copies, m.kv_lora, (cap, reach));
        }
        let (stride, views) = (bufs.vt_stride, &bufs.views);
        let set = head_set(h, n, pool.threads());
        let sets = HeadSets { set, b0, n };
        if wide {
            let cells = SetCells::Wide { li, views, reach };
            return self.attend_latent_heads(pool, s, cells, sets);
        }
        if let (Arith::Single, Some(_), Some(_)) = (kq_arith, kc.as_f16(), views[0].vt.as_f16()) {
            let (kv_pad, v_stride) = (kv_pad, stride);
            let cells = SetCells::Decode {
                li,
                views,
                kv_pad,
                v_stride,
            };
            return self.attend_latent_heads(pool, s, cells, sets);
        }
        let q = &s.q;
        let kernels = &self.kernels;
        let scale = m.kq_scale;
        let sstride = s.scratch_stride;
        let att = Out::new(&mut s.att);
        let scratch = Out::new(&mut s.scratch);
        let nth = pool.threads();
        pool.run(&|tid| {
            let g = pool.group_of(tid);
            let kc = copies[copy_of(g, copies.len())];
            let vt = &views[copy_of(g, views.len())].vt;
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

    /// Attention in sets of query heads of one token (`hs`): per (token, set) the set's
    /// queries against the cells' keys, a softmax per head, and the set's probabilities
    /// against the latent values, every output the same kernel's dot as one head alone gets.
    /// Each thread reads its group's copy ([`copy_of`]) of what `cells` names:
    /// - a micro-batch's widened view (`kf` the keys, `vf` the latent values transposed, rows
    ///   of `reach`): the set takes each block of [`SCORE_CELLS`] cells and of
    ///   [`VALUE_CHANNELS`] value rows in turn, so a block is read from memory once for the
    ///   set, not once per head;
    /// - decode's f16 cells and transposed values (rows of `v_stride`), each cache row widened
    ///   once for the set ([`Kernels::att_dot_decode_heads`]), so the cells are read
    ///   `n_head / set` times a token, not once per head.
    fn attend_latent_heads(&self, pool: &Pool, s: &mut State, cells: SetCells, hs: HeadSets) {
        let c = &self.config;
        let m = c.mla.expect("latent sizes");
        let (cell, h, set) = (c.head_dim, c.n_head, hs.set);
        let copies = layer_copies(&s.k, cells.layer(), c.n_layer);
        let rows = &s.rows[0];
        let cap = rows.cap;
        let (q, kernels, scale) = (&s.q, &self.kernels, m.kq_scale);
        let sstride = s.scratch_stride;
        assert!(
            set * (cap + cell) <= sstride,
            "a set of {set} heads past the attention scratch"
        );
        let att = Out::new(&mut s.att);
        let scratch = Out::new(&mut s.scratch);
        let nth = pool.threads();
        let per_token = h / set;
        pool.run(&|tid| {
            let src = cells.of_group(pool.group_of(tid), &copies);
            // SAFETY: each thread uses its own scratch row.
            let mine = unsafe { scratch.slice(tid * sstride, (tid + 1) * sstride) };
            let (scores, rest) = mine.split_at_mut(set * cap);
            let q16 = &mut rest[..set * cell];
            for item in (tid..hs.n * per_token).step_by(nth) {
                let (b, h0) = (item / per_token, item % per_token * set);
                let row0 = ((hs.b0 + b) * h + h0) * cell;
                let (len, runs) = (rows.len[b], rows.runs(b));
                start_set(
                    kernels,
                    (q16, &q[row0..row0 + set * cell]),
                    scores,
                    (set, cap, len),
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
                    match src {
                        GroupCells::Wide { kf, .. } => {
                            for c0 in (lo..hi).step_by(SCORE_CELLS) {
                                let c1 = hi.min(c0 + SCORE_CELLS);
                                let (keys, out) = (&kf[c0 * cell..], &mut scores[c0..]);
                                kernels.att_dot_batch_heads(
                                    keys,
                                    (cell, c1 - c0),
                                    queries,
                                    out,
                                    cap,
                                );
                            }
                        }
                        GroupCells::Decode { k, .. } => kernels.att_dot_decode_heads(
                            &k[lo * cell..],
                            (cell, hi - lo),
                            queries,
                            cell,
                            &mut scores[lo..],
                            cap,
                        ),
                    }
                }
                finish_set(kernels, scores, (set, cap, len), (scale, None));
                let at = ((hs.b0 + b) * h + h0) * m.kv_lora;
                // SAFETY: outputs (b, h0..h0 + set) belong to this thread's items alone.
                let out = unsafe { att.slice(at, at + set * m.kv_lora) };
                let probs = Queries {
                    ys: scores,
                    len,
                    stride: cap,
                    count: set,
                };
                match src {
                    GroupCells::Wide { vf, reach, .. } => {
                        for d0 in (0..m.kv_lora).step_by(VALUE_CHANNELS) {
                            let d1 = m.kv_lora.min(d0 + VALUE_CHANNELS);
                            let (values, o) = (&vf[d0 * reach..], &mut out[d0..]);
                            let shape = (reach, d1 - d0);
                            kernels.att_dot_batch_heads(values, shape, probs, o, m.kv_lora);
                        }
                    }
                    GroupCells::Decode {
                        v,
                        kv_pad,
                        v_stride,
                        ..
                    } => {
                        let shape = (v_stride, m.kv_lora);
                        kernels.att_dot_decode_heads(v, shape, probs, kv_pad, out, m.kv_lora);
                    }
                }
            }
        });
    }

    /// The first `reach` cells' latent values (`kv_lora` of each cell) transposed into each
    /// view's `vt`, in the cache's type, out of its group's copy of the cells (`copies`), the
    /// threads that read the view sharing the channels ([`builders`]).
    fn transpose_latent(
        &self,
        pool: &Pool,
        bufs: &mut LatentBufs,
        copies: &[&KvBuf],
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
        let writers: Vec<KvWriter> = bufs.views.iter_mut().map(|v| v.vt.writer()).collect();
        let groups = pool.groups();
        pool.run(&|tid| {
            let view = copy_of(pool.group_of(tid), writers.len());
            let (w, kc) = (&writers[view], copies[copy_of(view, copies.len())]);
            let mine = builders(view, writers.len(), groups);
            let (d0, d1) = split(kv_lora, tid - mine.start, mine.len());
            match (w, kc) {
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

    /// Each group's copy of the first `reach` cells (whole cells, f16) widened to f32
    /// (exact) into the group's view: the keys as they lie into `kf`, the first `kv_lora`
    /// values of each transposed into `vf` (rows of `reach`), the threads that read the view
    /// sharing cells and channels ([`builders`]).
    fn widen_latent(
        &self,
        pool: &Pool,
        bufs: &mut LatentBufs,
        copies: &[&KvBuf],
        (kv_lora, reach): (usize, usize),
    ) {
        let cell = self.config.head_dim;
        let outs: Vec<(Out, Out)> = (bufs.views.iter_mut())
            .map(|v| {
                grow_zeroed(&mut v.kf, reach * cell);
                grow_zeroed(&mut v.vf, kv_lora * reach);
                (Out::new(&mut v.kf), Out::new(&mut v.vf))
            })
            .collect();
        let kernels = &self.kernels;
        let groups = pool.groups();
        pool.run(&|tid| {
            let view = copy_of(pool.group_of(tid), outs.len());
            let (kf, vf) = &outs[view];
            let k = copies[copy_of(view, copies.len())]
                .as_f16()
                .expect("an f16 cache");
            let builders = builders(view, outs.len(), groups);
            let (mine, nth) = (tid - builders.start, builders.len());
            let (j0, j1) = split(reach, mine, nth);
            // SAFETY: cells j0..j1 of this group's kf are this thread's alone.
            let dst = unsafe { kf.slice(j0 * cell, j1 * cell) };
            kernels.widen_f16(&k[j0 * cell..j1 * cell], dst);
            let (d0, d1) = split(kv_lora, mine, nth);
            // SAFETY: channels d0..d1 of this group's vf are this thread's alone.
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
    use crate::pool::Pool;

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

    #[test]
    fn each_group_keeps_its_own_copy_of_the_cells() {
        let spec = SynthSpec::tiny_latent(GgmlType::F32);
        let bytes = synth_model(&spec).to_bytes();
        let g = Gguf::parse(&bytes).unwrap();
        let c = Config::from_gguf(&g).unwrap();
        let w = Weights::from_gguf(&g, &c).unwrap();
        let model = Model::new(c.clone(), w, Kernels::detect().unwrap());
        let pool = Pool::grouped(&[1, 2], |_| {});
        let one = model.state_bytes(64, 3, KvType::F16).unwrap();
        let two = model.state_bytes(64, &pool, KvType::F16).unwrap();
        assert_eq!((one.kv_copies, two.kv_copies), (1, 2));
        assert_eq!(two.kv, 2 * one.kv);
        // A prompt (a micro-batch) and a decoded token: the copies hold the same cells, and
        // the logits are those of a state with one copy.
        let mut s = model.new_state(64, &pool, KvType::F16);
        let mut alone = model.new_state(64, 3, KvType::F16);
        let single = Pool::new(3, |_| {});
        let tokens = [1, 5, 9, 2, 7];
        let (mut a, mut b) = (Vec::new(), Vec::new());
        model.eval(&pool, &mut s, &tokens, 4, |_, l| a = l.to_vec());
        model.eval(&single, &mut alone, &tokens, 4, |_, l| b = l.to_vec());
        assert_eq!(a, b);
        model.forward(&pool, &mut s, 3, true);
        model.forward(&single, &mut alone, 3, true);
        assert_eq!(s.logits(0), alone.logits(0));
        assert_eq!(s.k.len(), 2 * c.n_layer);
        let (first, second) = s.k.split_at(c.n_layer);
        for (x, y) in first.iter().zip(second) {
            assert_eq!(x.as_bytes(), y.as_bytes());
            assert!(
                x.as_bytes().iter().any(|&b| b != 0),
                "a copy was never written"
            );
        }
        // A state with one copy on the same pool (both groups build and read the one copy)
        // gives the same bits too.
        let mut shared = model.new_state(64, 3, KvType::F16);
        let mut c1 = Vec::new();
        model.eval(&pool, &mut shared, &tokens, 4, |_, l| c1 = l.to_vec());
        assert_eq!(a, c1);
        model.forward(&pool, &mut shared, 3, true);
        assert_eq!(shared.logits(0), alone.logits(0));
        // Each copy's layers go to its own group for placing and auditing.
        let owners: Vec<usize> = s
            .kv_head_blocks(&model, &pool)
            .iter()
            .map(|b| b.1)
            .collect();
        let want: Vec<usize> = (0..2).flat_map(|g| vec![g; c.n_layer]).collect();
        assert_eq!(owners, want);
    }
}
