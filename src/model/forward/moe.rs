//! The mixture-of-experts FFN of a batch: the router picks each token's experts
//! ([`crate::model::moe::route`]); each chosen expert then runs once for all the batch's tokens
//! routed to it, its rows split among the nodes like any matrix's (so decode reads only the
//! chosen experts, and every node works on each of them); each token's outputs are weighted
//! and added in its slot order, as llama.cpp adds them. Where the layer has shared experts,
//! their dense FFN's output is then added to the routed experts' (`routed + shared`, as
//! llama.cpp's GLM-4.5 and DeepSeek-2 graphs add them). Where the family has biases (gpt-oss),
//! the router's is added to its logits and each expert's to its gate, up and down outputs, and
//! the experts' activation is the family's ([`ExpertAct`]).

use super::parallel::{claim_rows, group_share, per_token, token_order};
use super::parallel::{At, BatchActs, Claims, Out, MAX_JOBS};
use super::{Model, State, MAX_BATCH};
use crate::kernels::ggml_math::swiglu_oai;
use crate::kernels::ops;
use crate::kernels::ActType;
use crate::model::arch::{ExpertAct, FfnAct};
use crate::model::config::MoeShape;
use crate::model::moe::{route, RouteScratch};
use crate::model::weights::{Beside, Experts, Matrix, Tensor};
use crate::pool::Pool;
use std::sync::atomic::Ordering::Relaxed;

/// A state's buffers for the experts (sized by the model's [`MoeShape`]).
pub(super) struct MoeBufs {
    /// Router logits, then probabilities, per token.
    probs: Vec<f32>,
    /// Per token and slot: the expert and its weight.
    sel: Vec<usize>,
    w: Vec<f32>,
    /// Scratch of the router.
    route: RouteScratch,
    /// The routed experts' mixture while the shared experts run (`MAX_BATCH × n_embd`; empty
    /// without shared experts).
    routed_out: Vec<f32>,
    /// The inputs of the tokens routed to one expert, gathered.
    xg: Vec<f32>,
    /// One expert's output for those tokens.
    down: Vec<f32>,
    /// Per token and slot: the expert's weighted output.
    ys: Vec<f32>,
    /// The (token, slot) pairs routed to the expert at hand.
    routed: Vec<(usize, usize)>,
    /// Per layer and expert: the tokens routed to it since the state was made.
    pub(super) counts: Vec<u64>,
    /// A lone token's shared-expert gate and up outputs, made in the router's step.
    shared_gate: Vec<f32>,
    shared_up: Vec<f32>,
    /// Gemma 4: the router's input, then the experts' normed output; the MLP's normed output.
    router_in: Vec<f32>,
    mlp: Vec<f32>,
}

impl MoeBufs {
    pub(super) fn new(m: &MoeShape, n_embd: usize, n_layer: usize) -> MoeBufs {
        MoeBufs {
            counts: vec![0; n_layer * m.n_expert],
            probs: vec![0.0; MAX_BATCH * m.n_expert],
            sel: vec![0; MAX_BATCH * m.n_used],
            w: vec![0.0; MAX_BATCH * m.n_used],
            route: RouteScratch::default(),
            routed_out: vec![
                0.0;
                if m.n_shared > 0 {
                    MAX_BATCH * n_embd
                } else {
                    0
                }
            ],
            xg: vec![0.0; MAX_BATCH * n_embd],
            down: vec![0.0; MAX_BATCH * n_embd],
            ys: vec![0.0; MAX_BATCH * m.n_used * n_embd],
            routed: Vec::with_capacity(MAX_BATCH * m.n_used),
            shared_gate: Vec::new(),
            shared_up: Vec::new(),
            router_in: Vec::new(),
            mlp: Vec::new(),
        }
    }
}

impl Model<'_> {
    /// `s.tmp[b]` = the experts' mixture for the normed inputs `s.xn[b0 + b]`, b < `n`, whose
    /// matmuls sit at `at` in llama.cpp's micro-batch (the router's arithmetic depends on it).
    pub(super) fn moe_ffn(
        &self,
        pool: &Pool,
        s: &mut State,
        (layer, x): (usize, &Experts),
        (b0, n, at): (usize, usize, At),
    ) {
        let c = &self.config;
        let (e, k) = (c.n_embd, x.n_used);
        let ne = x.gate.len();
        let mut bufs = s.moe.take().expect("a mixture-of-experts state");
        let one_token = n == 1 && 2 * k <= MAX_JOBS;
        let xn = &s.xn[b0 * e..];
        match &x.shared {
            // A lone token's shared experts take the same input as the router: their gate
            // and up in the router's step, one step fewer (each output as in a step alone).
            Some(sh) if one_token => {
                let ff = sh.gate.rows();
                bufs.shared_gate.resize(ff, 0.0);
                bufs.shared_up.resize(ff, 0.0);
                let jobs = [
                    (&x.router, &mut bufs.probs[..]),
                    (&sh.gate, &mut bufs.shared_gate[..]),
                    (&sh.up, &mut bufs.shared_up[..]),
                ];
                self.matmuls(pool, &mut s.acts, xn, (n, at), jobs);
            }
            _ => {
                // Gemma 4's router reads its own input ([`Model::moe_beside_mlp`]).
                let input = match x.beside {
                    Some(_) => &bufs.router_in[..],
                    None => xn,
                };
                let jobs = [(&x.router, &mut bufs.probs[..])];
                self.matmuls(pool, &mut s.acts, input, (n, at), jobs)
            }
        }
        let routing = &c.moe.as_ref().expect("a mixture-of-experts model").routing;
        if let Some(bias) = &x.biases {
            // ggml_add of the router's bias to its logits.
            for row in bufs.probs[..n * ne].chunks_exact_mut(ne) {
                add_bias(row, &bias.router);
            }
        }
        for b in 0..n {
            route(
                routing,
                x.probs_bias.as_deref(),
                &mut bufs.probs[b * ne..(b + 1) * ne],
                &mut bufs.route,
                (
                    &mut bufs.sel[b * k..(b + 1) * k],
                    &mut bufs.w[b * k..(b + 1) * k],
                ),
            );
        }
        if let Some(tap) = s.acts.tap.as_deref_mut() {
            let (sel, ff) = (&bufs.sel[..n * k], x.down[0].file.cols);
            let names = [x.gate[0].name.as_str(), x.up[0].name.as_str()];
            tap.experts_in(names, (ne, k), &s.xn[b0 * e..(b0 + n) * e], sel);
            tap.experts_down_begin(&x.down[0].name, (ne, k, ff), sel);
        }
        if one_token {
            self.one_token_experts(pool, s, (layer, x), b0, &mut bufs);
        } else {
            self.batch_experts(pool, s, (layer, x), (b0, n), &mut bufs);
        }
        self.add_shared(pool, s, x, (b0, n, at, one_token), &mut bufs);
        s.moe = Some(bufs);
    }

    /// Gemma 4's FFN of the rows `b0..b0 + n` (`s.xn`: the attention output `s.x` through
    /// `ffn_norm`), as llama.cpp's `gemma4` graph computes it: `s.tmp[b]` =
    /// `post_norm_1(mlp(xn)) + post_norm_2(experts(pre_norm_2(x)))`, the router's logits made from
    /// `rms_norm(x) · (1/√n_embd) · router_scale`.
    pub(super) fn moe_beside_mlp(
        &self,
        pool: &Pool,
        s: &mut State,
        (layer, x, b): (usize, &Experts, &Beside),
        (b0, n, at): (usize, usize, At),
    ) {
        let c = &self.config;
        let (e, eps) = (c.n_embd, c.rms_eps);
        let mats = [&b.mlp.gate, &b.mlp.up, &b.mlp.down];
        let ff = b.mlp.gate.rows();
        self.gated_ffn(pool, s, (mats, ff, FfnAct::GeluTanh), (b0, n, at));
        if s.stopped {
            return;
        }
        let mut bufs = s.moe.take().expect("a mixture-of-experts state");
        bufs.mlp.resize(n * e, 0.0);
        bufs.router_in.resize(n * e, 0.0);
        // ggml_scale by 1/sqrtf(n_embd).
        let inv = 1.0 / (e as f32).sqrt();
        for t in 0..n {
            let (row, mine) = ((b0 + t) * e, t * e..(t + 1) * e);
            let attn_out = &s.x[row..row + e];
            ops::rms_norm(
                &s.tmp[mine.clone()],
                &b.post_norm_1,
                eps,
                &mut bufs.mlp[mine.clone()],
            );
            let r = &mut bufs.router_in[mine];
            ops::rms_norm_unweighted(attn_out, eps, r);
            for (v, &sc) in r.iter_mut().zip(&b.router_scale) {
                *v = *v * inv * sc;
            }
            ops::rms_norm(attn_out, &b.pre_norm_2, eps, &mut s.xn[row..row + e]);
        }
        s.moe = Some(bufs);
        self.moe_ffn(pool, s, (layer, x), (b0, n, at));
        let bufs = s.moe.as_mut().expect("a mixture-of-experts state");
        for t in 0..n {
            let mine = t * e..(t + 1) * e;
            let normed = &mut bufs.router_in[mine.clone()];
            ops::rms_norm(&s.tmp[mine.clone()], &b.post_norm_2, eps, normed);
            // ggml_add(mlp, experts).
            for ((o, &m), &x) in s.tmp[mine.clone()]
                .iter_mut()
                .zip(&bufs.mlp[mine])
                .zip(&*normed)
            {
                *o = m + x;
            }
        }
    }

    /// `s.tmp[b]` += the shared experts' FFN of `s.xn[b0 + b]`, b < `n`, where the layer has
    /// them: llama.cpp's `build_ffn` (SwiGLU) on the same normed rows, at the same place in
    /// its matmuls as the router's, then `routed + shared`.
    fn add_shared(
        &self,
        pool: &Pool,
        s: &mut State,
        x: &Experts,
        (b0, n, at, one_token): (usize, usize, At, bool),
        bufs: &mut MoeBufs,
    ) {
        let Some(sh) = &x.shared else {
            return;
        };
        let e = self.config.n_embd;
        std::mem::swap(&mut s.tmp, &mut bufs.routed_out);
        let ff = sh.gate.rows();
        if one_token {
            // Gate and up came with the router ([`Model::moe_ffn`]).
            self.kernels.swiglu(&mut bufs.shared_gate, &bufs.shared_up);
            let (x, jobs) = (&bufs.shared_gate, [(&sh.down, &mut s.tmp[..])]);
            self.matmuls(pool, &mut s.acts, x, (n, at), jobs);
        } else {
            let mats = [&sh.gate, &sh.up, &sh.down];
            self.gated_ffn(pool, s, (mats, ff, FfnAct::Silu), (b0, n, at));
        }
        std::mem::swap(&mut s.tmp, &mut bufs.routed_out);
        for (t, &sh) in s.tmp[..n * e].iter_mut().zip(&bufs.routed_out[..n * e]) {
            *t += sh;
        }
    }

    /// The experts of a batch's `n` tokens: each expert the router chose runs once for all its
    /// tokens. Writes `s.tmp[..n]`.
    fn batch_experts(
        &self,
        pool: &Pool,
        s: &mut State,
        (layer, x): (usize, &Experts),
        (b0, n): (usize, usize),
        bufs: &mut MoeBufs,
    ) {
        let (e, k) = (self.config.n_embd, x.n_used);
        let ne = x.gate.len();
        let ff = x.gate[0].rows();
        for ex in 0..ne {
            bufs.routed.clear();
            for (i, &sel) in bufs.sel[..n * k].iter().enumerate() {
                if sel == ex {
                    bufs.routed.push((i / k, i % k));
                }
            }
            let m = bufs.routed.len();
            if m == 0 {
                continue;
            }
            bufs.counts[layer * ne + ex] += m as u64;
            for (j, &(b, _)) in bufs.routed.iter().enumerate() {
                let row = (b0 + b) * e;
                bufs.xg[j * e..(j + 1) * e].copy_from_slice(&s.xn[row..row + e]);
            }
            // llama.cpp's expert matmul: vec_dot (or the repacked gemv) for every token,
            // except the tiled K-quant kernel once `m` tokens chose the expert (rows m.. of
            // a matmul over m: see `SumOrder::for_token`).
            let at = At::Run(m, m);
            self.matmuls(
                pool,
                &mut s.acts,
                &bufs.xg,
                (m, at),
                [(&x.gate[ex], &mut s.gate), (&x.up[ex], &mut s.up)],
            );
            if let Some(bias) = &x.biases {
                for j in 0..m {
                    add_bias(&mut s.gate[j * ff..(j + 1) * ff], &bias.gate[ex]);
                    add_bias(&mut s.up[j * ff..(j + 1) * ff], &bias.up[ex]);
                }
            }
            {
                let (up, gate, this) = (&s.up, Out::new(&mut s.gate), self);
                per_token(pool, m, &|j| {
                    // SAFETY: row j of gate is touched by this call alone.
                    let g = unsafe { gate.slice(j * ff, (j + 1) * ff) };
                    this.expert_act(g, &up[j * ff..(j + 1) * ff]);
                });
            }
            if let Some(tap) = s.acts.tap.as_deref_mut() {
                tap.experts_down(&x.down[ex].name, &bufs.routed, &s.gate[..m * ff]);
            }
            self.matmuls(
                pool,
                &mut s.acts,
                &s.gate,
                (m, at),
                [(&x.down[ex], &mut bufs.down)],
            );
            if let Some(bias) = &x.biases {
                for row in bufs.down[..m * e].chunks_exact_mut(e) {
                    add_bias(row, &bias.down[ex]);
                }
            }
            let sc = down_scale(x, ex);
            for (j, &(b, slot)) in bufs.routed.iter().enumerate() {
                let wt = bufs.w[b * k + slot];
                let y = &mut bufs.ys[(b * k + slot) * e..(b * k + slot + 1) * e];
                for (y, &d) in y.iter_mut().zip(&bufs.down[j * e..(j + 1) * e]) {
                    *y = d * sc * wt;
                }
            }
        }
        // Each token's slots added left to right: ((y0 + y1) + y2) + …
        for b in 0..n {
            let out = &mut s.tmp[b * e..(b + 1) * e];
            out.copy_from_slice(&bufs.ys[b * k * e..(b * k + 1) * e]);
            for slot in 1..k {
                let y = &bufs.ys[(b * k + slot) * e..(b * k + slot + 1) * e];
                for (o, &v) in out.iter_mut().zip(y) {
                    *o += v;
                }
            }
        }
    }

    /// The experts of one token (decode), each run as its own single-token matmul as above,
    /// but all of them in one parallel step for gate and up and one for down: a step per
    /// matrix would cost the pool's wake-up and barrier sixteen times a layer, on matrices of
    /// a few hundred kilobytes. Writes `s.tmp[0]`.
    fn one_token_experts(
        &self,
        pool: &Pool,
        s: &mut State,
        (layer, x): (usize, &Experts),
        b0: usize,
        bufs: &mut MoeBufs,
    ) {
        let (e, k, ne) = (self.config.n_embd, x.n_used, x.gate.len());
        let ff = x.gate[0].rows();
        let sel = &bufs.sel[..k];
        for &ex in sel {
            bufs.counts[layer * ne + ex] += 1;
        }
        let xn = &s.xn[b0 * e..(b0 + 1) * e];
        let (gate_of, up_of) = (|i: usize| &x.gate[sel[i]], |i: usize| &x.up[sel[i]]);
        let tensors = [&gate_of(0).file, &up_of(0).file];
        s.acts.prepare(&self.kernels, xn, 1, e, &tensors);
        {
            let (gate, up) = (Out::new(&mut s.gate), Out::new(&mut s.up));
            let jobs: Vec<Gemv> = (0..2 * k)
                .map(|j| match j % 2 {
                    0 => (gate_of(j / 2), 0, &gate, j / 2 * ff),
                    _ => (up_of(j / 2), 0, &up, j / 2 * ff),
                })
                .collect();
            self.gemvs(pool, &mut s.acts, &jobs);
        }
        if let Some(bias) = &x.biases {
            for (i, &ex) in sel.iter().enumerate() {
                add_bias(&mut s.gate[i * ff..(i + 1) * ff], &bias.gate[ex]);
                add_bias(&mut s.up[i * ff..(i + 1) * ff], &bias.up[ex]);
            }
        }
        // On this thread: a lone token's experts' activations are too few for a parallel step.
        for (g, u) in (s.gate[..k * ff].chunks_exact_mut(ff)).zip(s.up.chunks_exact(ff)) {
            self.expert_act(g, u);
        }
        if let Some(tap) = s.acts.tap.as_deref_mut() {
            let routed: Vec<(usize, usize)> = (0..k).map(|slot| (0, slot)).collect();
            tap.experts_down(&x.down[0].name, &routed, &s.gate[..k * ff]);
        }
        let down_of = |i: usize| &x.down[sel[i]];
        s.acts
            .prepare(&self.kernels, &s.gate[..k * ff], k, ff, &[&down_of(0).file]);
        {
            let down = Out::new(&mut bufs.down);
            let jobs: Vec<Gemv> = (0..k).map(|i| (down_of(i), i, &down, i * e)).collect();
            self.gemvs(pool, &mut s.acts, &jobs);
        }
        if let Some(bias) = &x.biases {
            for (i, &ex) in sel.iter().enumerate() {
                add_bias(&mut bufs.down[i * e..(i + 1) * e], &bias.down[ex]);
            }
        }
        let out = &mut s.tmp[..e];
        for (slot, &wt) in bufs.w[..k].iter().enumerate() {
            let d = &bufs.down[slot * e..(slot + 1) * e];
            let sc = down_scale(x, sel[slot]);
            if slot == 0 {
                out.iter_mut().zip(d).for_each(|(o, &v)| *o = v * sc * wt);
            } else {
                // Each slot's weighted output, then added: ((y0 + y1) + y2) + …
                out.iter_mut().zip(d).for_each(|(o, &v)| *o += v * sc * wt);
            }
        }
    }

    /// An expert's activation of one token's gate row `g` (in place) and up row `u`: the
    /// family's ([`ExpertAct`]).
    fn expert_act(&self, g: &mut [f32], u: &[f32]) {
        let moe = self.config.moe.as_ref().map(|_| self.config.recipe.moe.act);
        match moe.unwrap_or(ExpertAct::Silu) {
            ExpertAct::Silu => self.kernels.swiglu(g, u),
            ExpertAct::SwigluOai { alpha, limit } => swiglu_oai(g, u, alpha, limit),
            ExpertAct::Gelu => self.kernels.geglu(g, u),
        }
    }

    /// One parallel step of single-token matmuls: job `(m, row, out, at)` multiplies `m` by
    /// the prepared activation row `row` into `out[at..at + m.rows()]`. Each matrix's rows are
    /// shared out per node group and among its threads as [`Model::matmuls`] does, in the
    /// order its single-token kernel sums a lone token's row (a matmul over one token).
    fn gemvs(&self, pool: &Pool, acts: &mut BatchActs, jobs: &[Gemv]) {
        assert!(jobs.len() <= MAX_JOBS, "{} matmuls in one step", jobs.len());
        if jobs.is_empty() {
            return;
        }
        acts.claims.resize_with(pool.threads(), Claims::default);
        for c in &acts.claims {
            c.0[..jobs.len()].iter().for_each(|a| a.store(0, Relaxed));
        }
        let (acts, kernels, nth) = (&*acts, &self.kernels, pool.threads());
        pool.run(&|tid| {
            let slot = pool.group_of(tid);
            let threads = &pool.groups()[slot];
            // Fixed arrays (no allocation per step); past the jobs they repeat the last one.
            let views: [&Tensor; MAX_JOBS] =
                std::array::from_fn(|j| jobs[j.min(jobs.len() - 1)].0.view(slot));
            let shares = views.map(|t| group_share(t, threads, nth));
            let shares = &shares[..jobs.len()];
            claim_rows(shares, (tid, threads), &acts.claims, |j, (c0, c1)| {
                let (t, (_, row, out, at)) = (views[j], jobs[j]);
                let act = &acts.rows(ActType::for_weight(t.ty))[row];
                // SAFETY: this thread alone claimed rows c0..c1 of job j, whose outputs are
                // its own place in `out`, apart from every other job's.
                let o = unsafe { out.slice(at + c0, at + c1) };
                let order = token_order(t, At::Run(1, 1), 0);
                kernels.gemv_in(t.layout, t.ty, order, t.rows_bytes(c0, c1), act, o);
            });
        });
    }
}

/// Expert `ex`'s down-projection scale (Gemma 4's `ffn_down_exps.scale`, ggml_mul before the
/// weights), else 1 (a product by 1 changes no bit).
fn down_scale(x: &Experts, ex: usize) -> f32 {
    x.beside
        .as_ref()
        .and_then(|b| b.down_scale.as_ref())
        .map_or(1.0, |s| s[ex])
}

/// `row += bias` (ggml's `add` / `add_id` of a bias row).
fn add_bias(row: &mut [f32], bias: &[f32]) {
    for (r, &b) in row.iter_mut().zip(bias) {
        *r += b;
    }
}

/// A single-token matmul of [`Model::gemvs`]: the matrix, the activation row it reads, and
/// where its outputs go.
type Gemv<'m, 'o> = (&'m Matrix<'m>, usize, &'o Out<'o>, usize);
