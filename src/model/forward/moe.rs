//! The mixture-of-experts FFN of a batch: the router picks each token's experts
//! ([`crate::model::moe::route`]); each chosen expert then runs once for all the batch's tokens
//! routed to it, its rows split among the nodes like any matrix's (so decode reads only the
//! chosen experts, and every node works on each of them); each token's outputs are weighted
//! and added in its slot order, as llama.cpp adds them.

use super::{per_token, At, Model, Out, State, MAX_BATCH};
use crate::model::config::MoeShape;
use crate::model::moe::route;
use crate::model::weights::Experts;
use crate::pool::Pool;

/// A state's buffers for the experts (sized by the model's [`MoeShape`]).
pub(super) struct MoeBufs {
    /// Router logits, then probabilities, per token.
    probs: Vec<f32>,
    /// Per token and slot: the expert and its weight.
    sel: Vec<usize>,
    w: Vec<f32>,
    /// Scratch of the sort.
    order: Vec<usize>,
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
}

impl MoeBufs {
    pub(super) fn new(m: &MoeShape, n_embd: usize, n_layer: usize) -> MoeBufs {
        MoeBufs {
            counts: vec![0; n_layer * m.n_expert],
            probs: vec![0.0; MAX_BATCH * m.n_expert],
            sel: vec![0; MAX_BATCH * m.n_used],
            w: vec![0.0; MAX_BATCH * m.n_used],
            order: Vec::with_capacity(m.n_expert),
            xg: vec![0.0; MAX_BATCH * n_embd],
            down: vec![0.0; MAX_BATCH * n_embd],
            ys: vec![0.0; MAX_BATCH * m.n_used * n_embd],
            routed: Vec::with_capacity(MAX_BATCH * m.n_used),
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
        let ff = x.gate[0].rows();
        let mut bufs = s.moe.take().expect("a mixture-of-experts state");
        self.matmuls(
            pool,
            &mut s.acts,
            &s.xn[b0 * e..],
            (n, at),
            [(&x.router, &mut bufs.probs)],
        );
        for b in 0..n {
            route(
                &mut bufs.probs[b * ne..(b + 1) * ne],
                &mut bufs.order,
                &mut bufs.sel[b * k..(b + 1) * k],
                &mut bufs.w[b * k..(b + 1) * k],
            );
        }
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
            {
                let (up, gate, kernels) = (&s.up, Out::new(&mut s.gate), &self.kernels);
                per_token(pool, m, &|j| {
                    // SAFETY: row j of gate is touched by this call alone.
                    let g = unsafe { gate.slice(j * ff, (j + 1) * ff) };
                    kernels.swiglu(g, &up[j * ff..(j + 1) * ff]);
                });
            }
            self.matmuls(
                pool,
                &mut s.acts,
                &s.gate,
                (m, at),
                [(&x.down[ex], &mut bufs.down)],
            );
            for (j, &(b, slot)) in bufs.routed.iter().enumerate() {
                let wt = bufs.w[b * k + slot];
                let y = &mut bufs.ys[(b * k + slot) * e..(b * k + slot + 1) * e];
                for (y, &d) in y.iter_mut().zip(&bufs.down[j * e..(j + 1) * e]) {
                    *y = d * wt;
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
        s.moe = Some(bufs);
    }
}
