//! A layer's attention block: the norm, the layer's kind of attention ([`Attention`]; today
//! grouped-query), the residual add. Grouped-query attention projects each token to queries,
//! keys and values, stores the keys and values in the cache, and computes each (token, head)
//! pair's scores, softmax and weighted values over it.
//!
//! A layer's cache is a row of cells per KV head. The global layers keep one cell per
//! position; the sliding-window layers keep a ring ([`SwaCells`]) placed as llama.cpp places
//! it. Either way a token's scores form a row over cells `0..len` in cell order, the cells it
//! does not see set to −∞ (exact zeros after the softmax, as ggml's mask makes them), so the
//! sums run in llama.cpp's order.

use super::parallel::{per_token, Out};
use super::step::Step;
use super::{add_into, Model, State};
use crate::kernels::ops;
use crate::kernels::{Kernels, Queries, SumOrder};
use crate::model::arch::RopeStyle;
use crate::model::kv::{Arith, KvBuf, KvType, KV_PAD};
use crate::model::swa::SwaCells;
use crate::model::weights::{Attention, Gqa, Layer};
use crate::pool::{rows_of_group, split, Pool};

/// A thread's share of an attention step ([`Model::attention_items`]): items `first, first +
/// step, …` below `count`, of the KV heads from `g0` on.
struct Items {
    g0: usize,
    first: usize,
    count: usize,
    step: usize,
}

/// Where one kind of layer (global or sliding-window) keeps a batch's tokens and which cells
/// each token reads; filled once per batch, shared by every layer of that kind.
#[derive(Default)]
pub(super) struct Rows {
    /// Cells per KV head in this kind of layer's cache (the row stride).
    pub(super) cap: usize,
    /// Per token: the cell its key and value go to.
    pub(super) cell: Vec<usize>,
    /// Per token: the length of its score row (cells `0..len`).
    pub(super) len: Vec<usize>,
    /// Per token: where its runs of visible cells end in `runs`.
    ends: Vec<usize>,
    /// Runs `[start, end)` of cells the tokens see, token after token.
    runs: Vec<(usize, usize)>,
    /// Cells that any token's row covers.
    pub(super) reach: usize,
    /// ggml's padded row length for the batch (llama.cpp's `n_kv`).
    pub(super) kv_pad: usize,
}

impl Rows {
    /// The global layers' rows for `n` tokens at `pos0..`: cell = position, every earlier
    /// position seen.
    pub(super) fn fill_linear(&mut self, cap: usize, pos0: usize, n: usize) {
        self.clear(cap);
        for b in 0..n {
            let p = pos0 + b;
            self.cell.push(p);
            self.len.push(p + 1);
            self.runs.push((0, p + 1));
            self.ends.push(self.runs.len());
        }
        self.reach = pos0 + n;
        self.kv_pad = (pos0 + n).div_ceil(KV_PAD) * KV_PAD;
    }

    /// The sliding-window layers' rows for `n` tokens at `pos0..`, the `first`-th token of
    /// their micro-batch onwards, whose cells `swa` has placed.
    pub(super) fn fill_ring(&mut self, swa: &SwaCells, first: usize, pos0: usize, n: usize) {
        self.clear(swa.size());
        let len = swa.used_end();
        for b in 0..n {
            self.cell.push(swa.slot(first + b));
            self.len.push(len);
            swa.visible(pos0 + b, &mut self.runs);
            self.ends.push(self.runs.len());
        }
        self.reach = len;
        self.kv_pad = swa.n_kv();
    }

    fn clear(&mut self, cap: usize) {
        self.cap = cap;
        self.cell.clear();
        self.len.clear();
        self.ends.clear();
        self.runs.clear();
    }

    /// Token `b`'s runs of visible cells.
    pub(super) fn runs(&self, b: usize) -> &[(usize, usize)] {
        let start = if b == 0 { 0 } else { self.ends[b - 1] };
        &self.runs[start..self.ends[b]]
    }
}

impl Model<'_> {
    /// Each token's cache cells (a new micro-batch first takes its sliding-window cells) and
    /// its RoPE angles, for every layer of the step.
    pub(super) fn place(&self, s: &mut State, step: &mut Step) {
        step.each_state(s, |q, n, micro| {
            let (m, i0) = micro.run;
            q.rows[0].fill_linear(q.n_ctx, q.pos, n);
            if let Some(swa) = &mut q.swa {
                if i0 == 0 {
                    swa.place(q.pos, m);
                }
                q.rows[1].fill_ring(swa, i0, q.pos, n);
            }
        });
        s.rope_cache.clear();
        s.rope_cache_local.clear();
        for b in 0..step.n {
            let pos = step.pos(s, b);
            self.rope.append_cache(pos, &mut s.rope_cache);
            if let Some(r) = &self.rope_local {
                r.append_cache(pos, &mut s.rope_cache_local);
            }
        }
    }

    /// Layer `li`'s attention block for the step's tokens: `x` normed, through the layer's kind
    /// of attention, (normed again where the family does) and added to `x`. The same parallel
    /// step then norms the new `x` into `xn` for the FFN.
    pub(super) fn attention_block(
        &self,
        pool: &Pool,
        s: &mut State,
        step: &mut Step,
        (li, layer): (usize, &Layer),
    ) {
        let c = &self.config;
        let (e, n) = (c.n_embd, step.n);
        {
            let (x, xn) = (&s.x, Out::new(&mut s.xn));
            per_token(pool, n, &|b| {
                // SAFETY: token b's row of xn is written by this call alone.
                let xn = unsafe { xn.slice(b * e, (b + 1) * e) };
                ops::rms_norm(&x[b * e..(b + 1) * e], &layer.attn_norm, c.rms_eps, xn);
            });
        }
        if s.check_stop() {
            return;
        }
        let out_bias = match &layer.attn {
            Attention::Gqa(a) => {
                self.gqa(pool, s, step, (li, a));
                a.bo.as_deref()
            }
            Attention::Latent(a) => {
                self.latent(pool, s, step, (li, a));
                None
            }
        };
        if s.stopped {
            return;
        }
        let (tmp, x, xn) = (
            Out::new(&mut s.tmp),
            Out::new(&mut s.x),
            Out::new(&mut s.xn),
        );
        per_token(pool, n, &|b| {
            // SAFETY: token b's rows of tmp, x and xn are touched by this call alone.
            let (t, x, xn) = unsafe {
                (
                    tmp.slice(b * e, (b + 1) * e),
                    x.slice(b * e, (b + 1) * e),
                    xn.slice(b * e, (b + 1) * e),
                )
            };
            if let Some(bo) = out_bias {
                add_into(t, bo);
            }
            match &layer.post_norms {
                Some([post_attn, _]) => {
                    ops::rms_norm(t, post_attn, c.rms_eps, xn);
                    add_into(x, xn);
                }
                None => add_into(x, t),
            }
            ops::rms_norm(x, &layer.ffn_norm, c.rms_eps, xn);
        });
        s.check_stop();
    }

    /// Grouped-query attention of the normed tokens `s.xn` into `s.tmp` (its output bias, if
    /// any, not yet added): the projections, the family's steps on the fresh queries and keys,
    /// the keys and values into each sequence's cache, attention over it, the output
    /// projection.
    fn gqa(&self, pool: &Pool, s: &mut State, step: &mut Step, (li, a): (usize, &Gqa)) {
        let n = step.n;
        let local = self.config.recipe.is_local(li);
        match (&a.wk, &a.wv) {
            (Some(wk), Some(wv)) => self.matmuls(
                pool,
                &mut s.acts,
                &s.xn,
                (n, step.at()),
                [(&a.wq, &mut s.q), (wk, &mut s.kcur), (wv, &mut s.vcur)],
            ),
            (Some(wk), None) => {
                // The values are the key projection (Gemma 4's global layers).
                self.matmuls(
                    pool,
                    &mut s.acts,
                    &s.xn,
                    (n, step.at()),
                    [(&a.wq, &mut s.q), (wk, &mut s.kcur)],
                );
                let kvd = self.lc(local).kv_dim();
                s.vcur[..n * kvd].copy_from_slice(&s.kcur[..n * kvd]);
            }
            // A shared-KV layer: queries only; its keys and values are an earlier layer's.
            (None, _) => self.matmuls(
                pool,
                &mut s.acts,
                &s.xn,
                (n, step.at()),
                [(&a.wq, &mut s.q)],
            ),
        }
        let own_kv = a.wk.is_some();
        self.qkv_steps(pool, s, a, (local, own_kv), n);
        step.per_sequence(s, |s, rows, micro| {
            if own_kv {
                self.store_kv(pool, s, li, rows, local);
            }
            self.attention(pool, s, li, rows, micro.arith, local);
        });
        if s.check_stop() {
            return;
        }
        self.matmuls(
            pool,
            &mut s.acts,
            &s.att,
            (n, step.at()),
            [(&a.wo, &mut s.tmp)],
        );
    }

    /// What the family does to each token's fresh queries and keys before attention: biases,
    /// per-head RMSNorm, RoPE (the layer's: local layers have their own base), query scaling.
    /// A shared-KV layer (not `own_kv`) has fresh queries only.
    fn qkv_steps(
        &self,
        pool: &Pool,
        s: &mut State,
        a: &Gqa,
        (local, own_kv): (bool, bool),
        n: usize,
    ) {
        let c = self.lc(local);
        let (qd, kvd, hd, half) = (c.q_dim(), c.kv_dim(), c.head_dim, c.n_rot / 2);
        let kernels = &self.kernels;
        let rc = if local {
            &s.rope_cache_local
        } else {
            &s.rope_cache
        };
        let (q, k, v) = (
            Out::new(&mut s.q),
            Out::new(&mut s.kcur),
            Out::new(&mut s.vcur),
        );
        per_token(pool, n, &|b| {
            let rc = &rc[b * half..(b + 1) * half];
            // SAFETY: token b's rows of q, kcur and vcur are touched by this call alone.
            let (q, k, v) = unsafe {
                (
                    q.slice(b * qd, (b + 1) * qd),
                    k.slice(b * kvd, (b + 1) * kvd),
                    v.slice(b * kvd, (b + 1) * kvd),
                )
            };
            if let Some([bq, bk, bv]) = &a.qkv_bias {
                add_into(q, bq);
                add_into(k, bk);
                add_into(v, bv);
            }
            if let Some([qn, kn]) = &a.qk_norm {
                let mut head = vec![0f32; hd];
                for (x, w) in [(&mut *q, qn), (&mut *k, kn)]
                    .into_iter()
                    .take(1 + usize::from(own_kv))
                {
                    for h in x.chunks_exact_mut(hd) {
                        head.copy_from_slice(h);
                        ops::rms_norm(&head, w, c.rms_eps, h);
                    }
                }
            }
            if c.recipe.v_norm && own_kv {
                // ggml's rms_norm without a weight: times 1.0, exactly.
                let (mut head, ones) = (vec![0f32; hd], vec![1f32; hd]);
                for h in v.chunks_exact_mut(hd) {
                    head.copy_from_slice(h);
                    ops::rms_norm(&head, &ones, c.rms_eps, h);
                }
            }
            let fresh = [&mut *q, &mut *k];
            for x in fresh.into_iter().take(1 + usize::from(own_kv)) {
                match c.recipe.rope {
                    RopeStyle::Normal => kernels.rope(rc, x, hd),
                    RopeStyle::Neox => kernels.rope_neox(rc, x, hd),
                }
            }
            if let Some(scale) = c.recipe.q_scale {
                q.iter_mut().for_each(|v| *v *= scale);
            }
        });
    }
}

impl Model<'_> {
    /// Layer `layer`'s attention sinks (one per query head), where its family has them.
    fn sinks(&self, layer: usize) -> Option<&[f32]> {
        match &self.weights.layers[layer].attn {
            Attention::Gqa(a) => a.sinks.as_deref(),
            Attention::Latent(_) => None,
        }
    }

    /// The KV heads a pool group owns: its share of the heads by the rows rule, so each
    /// node's threads store (first touch: on their node) and read their heads' cache.
    pub(super) fn kv_heads_of_group(
        &self,
        pool: &Pool,
        group: usize,
        local: bool,
    ) -> (usize, usize) {
        let heads = self.lc(local).n_head_kv;
        rows_of_group(heads, &pool.groups()[group], pool.threads())
    }

    /// Stores the batch's keys and values in their cells (`local`: the sliding-window
    /// layers' ring): each group writes its KV heads' channels, split among its threads.
    /// The batch's tokens are the buffers' rows `b0..b0 + n` (`b0` > 0 where a step of
    /// several sequences lends the buffers to each in turn) and the cache rows' `0..n`.
    pub(super) fn store_kv(
        &self,
        pool: &Pool,
        s: &mut State,
        layer: usize,
        (b0, n): (usize, usize),
        local: bool,
    ) {
        if s.kv_type.block_type().is_some() {
            return self.store_kv_rows(pool, s, layer, (b0, n), local);
        }
        let c = self.lc(local);
        let (kv_dim, hd) = (c.kv_dim(), c.head_dim);
        let (v_dim, vd) = (c.v_dim(), c.head_dim_v);
        let rows = &s.rows[usize::from(local)];
        let cap = rows.cap;
        let kw = s.k[layer].writer();
        let vw = s.v[layer].writer();
        let (kcur, vcur) = (&s.kcur, &s.vcur);
        pool.run(&|tid| {
            let (h0, c0, c1) = self.kv_share(pool, tid, hd, local);
            for ch in h0 * hd + c0..h0 * hd + c1 {
                let (head, d) = (ch / hd, ch % hd);
                for (b, &cell) in rows.cell[..n].iter().enumerate() {
                    // SAFETY: channel `ch` belongs to this thread alone (its group's heads,
                    // split among the group's threads), so these elements are its alone.
                    unsafe { kw.set((head * cap + cell) * hd + d, kcur[(b0 + b) * kv_dim + ch]) };
                }
            }
            let (h0, c0, c1) = self.kv_share(pool, tid, vd, local);
            for ch in h0 * vd + c0..h0 * vd + c1 {
                for (b, &cell) in rows.cell[..n].iter().enumerate() {
                    // SAFETY: as for the keys, value channel `ch` is this thread's alone.
                    unsafe { vw.set(ch * cap + cell, vcur[(b0 + b) * v_dim + ch]) };
                }
            }
        });
    }

    /// Thread `tid`'s share of its group's KV heads' items, `per_head` of them per head (a
    /// head's channels, or its rows of the batch): `(first head, start, end)`, the items
    /// counted from the first head's first.
    fn kv_share(
        &self,
        pool: &Pool,
        tid: usize,
        per_head: usize,
        local: bool,
    ) -> (usize, usize, usize) {
        let g = pool.group_of(tid);
        let (h0, h1) = self.kv_heads_of_group(pool, g, local);
        let threads = &pool.groups()[g];
        let (lo, hi) = split((h1 - h0) * per_head, tid - threads.start, threads.len());
        (h0, lo, hi)
    }

    /// The (token, query head) items of thread `tid` in an attention step over `n` tokens: its
    /// group's KV heads' query heads, KV-head-major, dealt round-robin among the group's threads
    /// (a later token attends over more keys, so contiguous shares would leave the first
    /// threads idle); `per_kv` items per token and KV head (its query heads, or sets of them);
    /// `None` when it has none.
    fn attention_items(
        &self,
        pool: &Pool,
        tid: usize,
        (n, per_kv): (usize, usize),
        local: bool,
    ) -> Option<Items> {
        let grp = pool.group_of(tid);
        let (g0, g1) = self.kv_heads_of_group(pool, grp, local);
        let threads = &pool.groups()[grp];
        let count = n * (g1 - g0) * per_kv;
        let first = tid - threads.start;
        (first < count).then_some(Items {
            g0,
            first,
            count,
            step: threads.len(),
        })
    }

    /// A quantized cache's store: each group quantizes its KV heads' rows (one head's values
    /// of one token), split among its threads. Keys and values are both head-major, row
    /// `head * cap + cell`.
    fn store_kv_rows(
        &self,
        pool: &Pool,
        s: &mut State,
        layer: usize,
        (b0, n): (usize, usize),
        local: bool,
    ) {
        let c = self.lc(local);
        let (kv_dim, hd) = (c.kv_dim(), c.head_dim);
        let (v_dim, vd) = (c.v_dim(), c.head_dim_v);
        let rows = &s.rows[usize::from(local)];
        let cap = rows.cap;
        let kw = s.k[layer].row_writer();
        let vw = s.v[layer].row_writer();
        let (kcur, vcur) = (&s.kcur, &s.vcur);
        pool.run(&|tid| {
            let (h0, r0, r1) = self.kv_share(pool, tid, n, local);
            for item in r0..r1 {
                let (head, b) = (h0 + item / n, item % n);
                let row = head * cap + rows.cell[b];
                let (at, vat) = ((b0 + b) * kv_dim + head * hd, (b0 + b) * v_dim + head * vd);
                // SAFETY: row (head, token) belongs to this thread alone (its group's heads'
                // rows of this batch, split among the group's threads).
                unsafe {
                    kw.set_row(row, &kcur[at..at + hd]);
                    vw.set_row(row, &vcur[vat..vat + vd]);
                }
            }
        });
    }

    /// Attention over a quantized cache (see `kv.rs`): each score is ggml's `vec_dot` of the
    /// key row with the query quantized to q8_0 (all of a run's rows in one matrix-vector
    /// run, whose every output equals the single dot); each output is the sum over the cells
    /// seen of the value row's values times its probability, in f32, in cell order
    /// ([`crate::kernels::ops::add_scaled_q8_0`]).
    fn attention_quant(
        &self,
        pool: &Pool,
        s: &mut State,
        layer: usize,
        (b0, n): (usize, usize),
        local: bool,
    ) {
        let c = self.lc(local);
        let (hd, q_dim) = (c.head_dim, c.q_dim());
        let (vd, att_dim) = (c.head_dim_v, c.att_dim());
        let group = c.n_head / c.n_head_kv;
        let scale = self.kq_scale();
        let ty = s.kv_type.block_type().expect("a quantized cache");
        let sinks = self.sinks(layer);
        let rows = &s.rows[usize::from(local)];
        let cap = rows.cap;
        // A shared-KV layer reads an earlier layer's cache.
        let kl = self.config.recipe.kv_source(layer);
        let (kc, vc, q) = (&s.k[kl], &s.v[kl], &s.q);
        let stride = s.scratch_stride;
        let att = Out::new(&mut s.att);
        let scratch = Out::new(&mut s.scratch);
        let kernels = &self.kernels;
        pool.run(&|tid| {
            let Some(it) = self.attention_items(pool, tid, (n, group), local) else {
                return;
            };
            // SAFETY: each thread uses its own scratch row.
            let mine = unsafe { scratch.slice(tid * stride, (tid + 1) * stride) };
            let mut act = crate::kernels::ActRow::new_for(ty);
            let per_kv_head = n * group;
            for item in (it.first..it.count).step_by(it.step) {
                let g = it.g0 + item / per_kv_head;
                let (b, h) = (item % per_kv_head / group, g * group + item % group);
                let row = (b0 + b) * q_dim;
                kernels.quantize_act(&mut act, &q[row + h * hd..row + (h + 1) * hd]);
                let sc = &mut mine[..rows.len[b]];
                sc.fill(f32::NEG_INFINITY);
                for &(lo, hi) in rows.runs(b) {
                    let keys = kc.quant_rows(g * cap + lo, hi - lo);
                    kernels.gemv(ty, SumOrder::Lanes, keys, &act, &mut sc[lo..hi]);
                }
                softmax_head(kernels, sc, scale, sinks.map(|s| s[h]));
                let at = (b0 + b) * att_dim + h * vd;
                // SAFETY: output (b, h) belongs to this thread's items alone.
                let out = unsafe { att.slice(at, at + vd) };
                out.fill(0.0);
                for &(lo, hi) in rows.runs(b) {
                    for (t, &p) in sc.iter().enumerate().take(hi).skip(lo) {
                        kernels.kv_add_q8_0(vc.quant_row(g * cap + t), p, out);
                    }
                }
            }
        });
    }

    /// Causal attention of the batch's tokens (`local`: over the sliding-window layers'
    /// ring). Each group computes the query heads of its KV heads; its (token, head) pairs are
    /// split among its threads.
    pub(super) fn attention(
        &self,
        pool: &Pool,
        s: &mut State,
        layer: usize,
        (b0, n): (usize, usize),
        arith: Arith,
        local: bool,
    ) {
        if s.kv_type.block_type().is_some() {
            return self.attention_quant(pool, s, layer, (b0, n), local);
        }
        let c = self.lc(local);
        let (hd, vd) = (c.head_dim, c.head_dim_v);
        let group = c.n_head / c.n_head_kv;
        let scale = self.kq_scale();
        let (q_dim, att_dim) = (c.q_dim(), c.att_dim());
        let rows = &s.rows[usize::from(local)];
        let (cap, kv_pad, reach) = (rows.cap, rows.kv_pad, rows.reach);
        // A shared-KV layer reads an earlier layer's cache.
        let kl = self.config.recipe.kv_source(layer);
        let (kc, vc, q) = (&s.k[kl], &s.v[kl], &s.q);
        let sinks = self.sinks(layer);
        // tinyBLAS needs rows of whole 16-lane steps; otherwise ggml falls back to vector dots.
        let kq_arith = if hd.is_multiple_of(16) {
            arith
        } else {
            Arith::Single
        };
        let kv_type = s.kv_type;
        let (stride, cells) = (s.scratch_stride, s.scratch_cells);
        let att = Out::new(&mut s.att);
        let scratch = Out::new(&mut s.scratch);
        let kernels = &self.kernels;
        // Decode's arithmetic over an f16 cache: the query heads of a KV head can read its
        // rows together, each row widened once for a set of them (`set_of`).
        let sets = arith == Arith::Single && kq_arith == Arith::Single && kv_type == KvType::F16;
        let set_of = |grp: usize| {
            let (g0, g1) = self.kv_heads_of_group(pool, grp, local);
            let threads = pool.groups()[grp].len();
            // The sets' scores and queries must fit the thread's scratch.
            let fits = |k: usize| (k - 1) * (cells + hd) <= cells * (hd + vd);
            // Query heads on the busiest thread when sets of k are dealt round-robin.
            let busiest = |k: usize| (n * (g1 - g0) * (group / k)).div_ceil(threads) * k;
            (1..=MAX_HEAD_SET.min(group))
                .rev()
                .filter(|&k| group.is_multiple_of(k) && fits(k))
                .min_by_key(|&k| busiest(k))
                .unwrap_or(1)
        };
        // A micro-batch over an f16 cache: the query heads of a token read each block of the
        // widened keys and values together (`attend_sets`).
        let batch_sets =
            arith == Arith::Batch && kq_arith == Arith::Batch && kv_type == KvType::F16;
        let batch_set_of = |grp: usize| {
            let (g0, g1) = self.kv_heads_of_group(pool, grp, local);
            let threads = pool.groups()[grp].len();
            let fits = |k: usize| cells * (hd + vd) + k * (cells + hd) <= stride;
            let busiest = |k: usize| (n * (g1 - g0) * (group / k)).div_ceil(threads) * k;
            (1..=MAX_HEAD_SET.min(group))
                .rev()
                .filter(|&k| group.is_multiple_of(k) && fits(k))
                .min_by_key(|&k| busiest(k))
                .unwrap_or(1)
        };
        pool.run(&|tid| {
            let set = match (sets, batch_sets) {
                (true, _) => set_of(pool.group_of(tid)),
                (false, true) => batch_set_of(pool.group_of(tid)),
                (false, false) => 1,
            };
            let Some(it) = self.attention_items(pool, tid, (n, group / set), local) else {
                return;
            };
            // SAFETY: each thread uses its own scratch row.
            let mine = unsafe { scratch.slice(tid * stride, (tid + 1) * stride) };
            if set > 1 {
                let cache = match (batch_sets, kc.as_f16(), vc.as_f16()) {
                    (true, _, _) => SetCache::Wide(kc, vc),
                    (false, Some(k), Some(v)) => SetCache::Decode(k, v),
                    _ => unreachable!("an f16 cache holds f16 rows"),
                };
                let heads = HeadSets {
                    n,
                    set,
                    cells,
                    b0,
                    layer,
                    local,
                };
                return self.attend_sets(kernels, heads, rows, (cache, q), &it, mine, &att);
            }
            let (sc, rest) = mine.split_at_mut(cells);
            let (q16, rest) = rest.split_at_mut(hd);
            let (kf, rest) = rest.split_at_mut(cells * hd);
            let vf = &mut rest[..cells * vd];
            // A batch widens each KV head's f16 keys and values to f32 once (exact), for all
            // its (token, head) items, instead of once per dot.
            let wide = arith == Arith::Batch && kv_type == KvType::F16;
            let mut widened = None;
            // Items KV-head-major (so each thread widens each head once), dealt round-robin.
            let per_kv_head = n * group;
            for item in (it.first..it.count).step_by(it.step) {
                let g = it.g0 + item / per_kv_head;
                let (b, h) = (item % per_kv_head / group, g * group + item % group);
                if wide && widened != Some(g) {
                    kc.widen_rows(kernels, (g * cap * hd, hd), (reach, hd), kf);
                    vc.widen_rows(kernels, (g * vd * cap, cap), (vd, reach), vf);
                    widened = Some(g);
                }
                let qrow = &q[(b0 + b) * q_dim + h * hd..(b0 + b) * q_dim + (h + 1) * hd];
                for (d, &v) in q16.iter_mut().zip(qrow) {
                    *d = kv_type.round(v);
                }
                let sc = &mut sc[..rows.len[b]];
                let runs = rows.runs(b);
                if runs.len() != 1 || runs[0] != (0, sc.len()) {
                    // Cells the token does not see: −∞ before the softmax, as ggml's mask
                    // makes them (the softmax keeps its lanes; the value sums add exact
                    // zeros for them).
                    sc.fill(f32::NEG_INFINITY);
                }
                for &(lo, hi) in runs {
                    if wide && kq_arith == Arith::Batch {
                        kernels.att_dot_batch_rows(&kf[lo * hd..], hd, q16, &mut sc[lo..hi]);
                    } else {
                        let keys = (g * cap * hd + lo * hd, hd);
                        kc.dots(kernels, kq_arith, keys, q16, hd, &mut sc[lo..hi]);
                    }
                }
                softmax_head(kernels, sc, scale, sinks.map(|s| s[h]));
                for p in sc.iter_mut() {
                    *p = kv_type.round(*p);
                }
                let at = (b0 + b) * att_dim + h * vd;
                // SAFETY: output (b, h) belongs to this thread's items alone.
                let out = unsafe { att.slice(at, at + vd) };
                if wide {
                    kernels.att_dot_batch_rows(vf, cap, sc, out);
                } else {
                    vc.dots(kernels, arith, (g * vd * cap, cap), sc, kv_pad, out);
                }
            }
        });
    }
}

/// The most query heads that read a KV head's rows together. A set is the largest divisor of
/// the heads per KV head up to this that leaves the busiest thread of the group no more heads
/// than sets of one would (a single token's decode on a many-thread node takes smaller sets,
/// or none).
pub(super) const MAX_HEAD_SET: usize = 8;

/// The cache a set of heads reads in [`Model::attend_sets`]: a micro-batch's keys and values
/// (widened per KV head), or decode's f16 rows.
#[derive(Clone, Copy)]
enum SetCache<'a> {
    Wide(&'a KvBuf, &'a KvBuf),
    Decode(&'a [u16], &'a [u16]),
}

/// What [`Model::attend_sets`] needs besides the buffers: the batch's tokens, heads per
/// set, the scratch's score cells per head and the batch's first row.
#[derive(Clone, Copy)]
struct HeadSets {
    n: usize,
    set: usize,
    cells: usize,
    b0: usize,
    layer: usize,
    /// Whether the layer is a sliding-window one (its attention shape, where it has its own).
    local: bool,
}

/// A set of query heads' start: its queries rounded to f16 into `q16` (from `src`), and its
/// score rows (`cells` apart, `len` long) set to −∞ where the token's `runs` do not reach,
/// as ggml's mask makes them.
pub(super) fn start_set(
    kernels: &Kernels,
    (q16, src): (&mut [f32], &[f32]),
    scores: &mut [f32],
    (set, cells, len): (usize, usize, usize),
    runs: &[(usize, usize)],
) {
    q16.copy_from_slice(src);
    kernels.round_f16(q16);
    if runs.len() != 1 || runs[0] != (0, len) {
        for j in 0..set {
            scores[j * cells..j * cells + len].fill(f32::NEG_INFINITY);
        }
    }
}

/// A set's score rows softmaxed at `scale` (each with its head's sink, where the layer has
/// sinks: `sinks` are the set's), their probabilities rounded to f16.
pub(super) fn finish_set(
    kernels: &Kernels,
    scores: &mut [f32],
    (set, cells, len): (usize, usize, usize),
    (scale, sinks): (f32, Option<&[f32]>),
) {
    for j in 0..set {
        let sc = &mut scores[j * cells..j * cells + len];
        softmax_head(kernels, sc, scale, sinks.map(|s| s[j]));
        kernels.round_f16(sc);
    }
}

/// One head's softmax of its scores at `scale`, with its attention sink where it has one.
fn softmax_head(kernels: &Kernels, sc: &mut [f32], scale: f32, sink: Option<f32>) {
    match sink {
        None => kernels.softmax(sc, scale),
        Some(sink) => crate::kernels::ggml_math::softmax_sink(sc, scale, sink),
    }
}

/// Cells a set of query heads scores at a time in a micro-batch (a block of the widened keys
/// that stays in cache while every head of the set reads it).
const SCORE_BLOCK: usize = 128;

impl Model<'_> {
    /// One thread's attention items in sets of query heads over an f16 cache: per (token,
    /// set) the set's queries against the KV head's keys, a softmax per head, and the set's
    /// probabilities against its values, every head's bits as alone.
    /// - A micro-batch (`Wide`): each KV head's keys and values widened to f32 once in the
    ///   thread's scratch (in front of the set's scores and queries), then each block of keys
    ///   read once for the set ([`Kernels::att_dot_batch_heads`]).
    /// - Decode: each cache row widened once for the set ([`Kernels::att_dot_decode_heads`]).
    #[allow(clippy::too_many_arguments)]
    fn attend_sets(
        &self,
        kernels: &Kernels,
        hs: HeadSets,
        rows: &Rows,
        (cache, q): (SetCache, &[f32]),
        it: &Items,
        mine: &mut [f32],
        att: &Out,
    ) {
        let c = self.lc(hs.local);
        let (hd, q_dim, group) = (c.head_dim, c.q_dim(), c.n_head / c.n_head_kv);
        let (vd, att_dim) = (c.head_dim_v, c.att_dim());
        let (set, cells, scale) = (hs.set, hs.cells, self.kq_scale());
        let (cap, reach, kv_pad) = (rows.cap, rows.reach, rows.kv_pad);
        let per_token = group / set;
        let per_kv_head = hs.n * per_token;
        let (mut wide, rest) = match cache {
            SetCache::Wide(..) => {
                let (kf, rest) = mine.split_at_mut(cells * hd);
                let (vf, rest) = rest.split_at_mut(cells * vd);
                (Some((kf, vf)), rest)
            }
            SetCache::Decode(..) => (None, mine),
        };
        let (scores, rest) = rest.split_at_mut(set * cells);
        let q16 = &mut rest[..set * hd];
        let mut widened = None;
        for item in (it.first..it.count).step_by(it.step) {
            let g = it.g0 + item / per_kv_head;
            let (b, h0) = (
                item % per_kv_head / per_token,
                g * group + item % per_token * set,
            );
            if let (SetCache::Wide(kc, vc), Some((kf, vf))) = (cache, &mut wide) {
                if widened != Some(g) {
                    kc.widen_rows(kernels, (g * cap * hd, hd), (reach, hd), kf);
                    vc.widen_rows(kernels, (g * vd * cap, cap), (vd, reach), vf);
                    widened = Some(g);
                }
            }
            let row0 = (hs.b0 + b) * q_dim + h0 * hd;
            let (len, runs) = (rows.len[b], rows.runs(b));
            start_set(
                kernels,
                (q16, &q[row0..row0 + set * hd]),
                scores,
                (set, cells, len),
                runs,
            );
            let queries = Queries {
                ys: q16,
                len: hd,
                stride: hd,
                count: set,
            };
            for &(lo, hi) in runs {
                // As `sc[lo..hi]` checks in the one-head path: a run stays in the token's row.
                assert!(
                    hi <= len,
                    "attention run {lo}..{hi} past the row's {len} cells"
                );
                match (cache, &wide) {
                    (SetCache::Decode(k, _), _) => kernels.att_dot_decode_heads(
                        &k[g * cap * hd + lo * hd..],
                        (hd, hi - lo),
                        queries,
                        hd,
                        &mut scores[lo..],
                        cells,
                    ),
                    (_, Some((kf, _))) => {
                        for c0 in (lo..hi).step_by(SCORE_BLOCK) {
                            let c1 = hi.min(c0 + SCORE_BLOCK);
                            let (keys, out) = (&kf[c0 * hd..], &mut scores[c0..]);
                            kernels.att_dot_batch_heads(keys, (hd, c1 - c0), queries, out, cells);
                        }
                    }
                    (SetCache::Wide(..), None) => unreachable!("a micro-batch widens its cells"),
                }
            }
            let set_sinks = self.sinks(hs.layer).map(|s| &s[h0..h0 + set]);
            finish_set(kernels, scores, (set, cells, len), (scale, set_sinks));
            let out0 = (hs.b0 + b) * att_dim + h0 * vd;
            // SAFETY: outputs (b, h0..h0 + set) belong to this thread's items alone.
            let out = unsafe { att.slice(out0, out0 + set * vd) };
            let probs = Queries {
                ys: scores,
                len,
                stride: cells,
                count: set,
            };
            match (cache, &wide) {
                (SetCache::Decode(_, v), _) => {
                    let v = &v[g * vd * cap..];
                    kernels.att_dot_decode_heads(v, (cap, vd), probs, kv_pad, out, vd);
                }
                (_, Some((_, vf))) => kernels.att_dot_batch_heads(vf, (cap, vd), probs, out, vd),
                (SetCache::Wide(..), None) => unreachable!("a micro-batch widens its cells"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::kernels::{GgmlType, Kernels};
    use crate::model::arch::Arch;
    use crate::model::forward::{KvType, Model};
    use crate::model::synth::{synth_model, SynthSpec};
    use crate::model::weights::Weights;
    use crate::model::{Config, Gguf};

    #[test]
    fn sliding_window_layers_keep_only_their_ring() {
        // Gemma 3, four layers, every other one local with a window of 8: at -c 8192 the two
        // global layers keep 8192 cells, the local ones llama.cpp's ring of 8 + 512 → 768.
        let spec = SynthSpec {
            arch: Arch::Gemma3,
            n_layer: 4,
            sliding_window: 8,
            swa_pattern: 2,
            ..SynthSpec::tiny(GgmlType::F32)
        };
        let bytes = synth_model(&spec).to_bytes();
        let g = Gguf::parse(&bytes).unwrap();
        let c = Config::from_gguf(&g).unwrap();
        let w = Weights::from_gguf(&g, &c).unwrap();
        let model = Model::new(c.clone(), w, Kernels::detect().unwrap());
        let (n_ctx, ring) = (8192, 768);
        let s = model.try_new_state(n_ctx, 1, KvType::F16).unwrap();
        let cells: Vec<usize> = s.k.iter().map(|k| k.len() / c.kv_dim()).collect();
        assert_eq!(cells, [ring, n_ctx, ring, n_ctx]);
        let bytes = model.state_bytes(n_ctx, 1, KvType::F16).unwrap();
        let per_cell = 2 * c.kv_dim() as u64 * 2; // f16 keys and values
        assert_eq!(bytes.kv, per_cell * (2 * n_ctx + 2 * ring) as u64);
        assert_eq!(
            model.kv_layout(n_ctx),
            "2 global layers × 8192 cells, 2 sliding-window layers × 768 cells"
        );
    }
}
