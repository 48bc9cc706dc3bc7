//! A layer's FFN block: the normed rows through the layer's kind of feed-forward network (a
//! gated dense FFN, or a mixture of experts, `moe.rs`), then added to the residual stream.

use super::parallel::{per_token, At, Out};
use super::{add_into, Model, State};
use crate::kernels::ops;
use crate::model::arch::FfnAct;
use crate::model::weights::{Ffn, Layer, Matrix};
use crate::pool::Pool;

impl Model<'_> {
    /// Layer `li`'s FFN for the normed rows `s.xn[b0..b0 + nf]` (sitting at `at` in llama.cpp's
    /// matmuls), added to their residual stream `s.x`; `n` is the batch's rows.
    pub(super) fn ffn_block(
        &self,
        pool: &Pool,
        s: &mut State,
        (li, layer): (usize, &Layer),
        (b0, nf, at): (usize, usize, At),
        n: usize,
    ) {
        if nf == 0 {
            return;
        }
        match &layer.ffn {
            Ffn::Dense { gate, up, down } => {
                // The layer's own width (Gemma 4's double-wide MLP): its gate's rows.
                let dense = ([gate, up, down], gate.rows(), self.config.recipe.ffn);
                self.gated_ffn(pool, s, dense, (b0, nf, at))
            }
            Ffn::Moe(x) => match &x.beside {
                Some(mlp) => self.moe_beside_mlp(pool, s, (li, x, mlp), (b0, nf, at)),
                None => self.moe_ffn(pool, s, (li, x), (b0, nf, at)),
            },
        }
        if s.stopped {
            return;
        }
        self.ffn_residual(pool, s, layer, b0, nf, n);
        if let Some(p) = &layer.ple {
            self.per_layer_block(pool, s, (li, p), (b0, nf, at));
            if s.stopped {
                return;
            }
        }
        if let Some(scale) = layer.out_scale {
            // Gemma 4's `layer_output_scale`: ggml_mul by a one-value tensor.
            let e = self.config.n_embd;
            s.x[b0 * e..(b0 + nf) * e]
                .iter_mut()
                .for_each(|v| *v *= scale);
        }
    }

    /// `s.tmp[b]` = down · (act(gate · xn) ⊙ (up · xn)) for the rows `s.xn[b0 + b]`, b < `nf`,
    /// of width `ff` (a dense layer's FFN with the family's activation, SiLU or GELU, or a
    /// mixture's shared experts).
    pub(super) fn gated_ffn(
        &self,
        pool: &Pool,
        s: &mut State,
        ([w_gate, w_up, w_down], ff, act): ([&Matrix; 3], usize, FfnAct),
        (b0, nf, at): (usize, usize, At),
    ) {
        let e = self.config.n_embd;
        self.matmuls(
            pool,
            &mut s.acts,
            &s.xn[b0 * e..],
            (nf, at),
            [(w_gate, &mut s.gate), (w_up, &mut s.up)],
        );
        {
            let (up, gate, kernels) = (&s.up, Out::new(&mut s.gate), &self.kernels);
            per_token(pool, nf, &|b| {
                // SAFETY: token b's row of gate is touched by this call alone.
                let g = unsafe { gate.slice(b * ff, (b + 1) * ff) };
                let up = &up[b * ff..(b + 1) * ff];
                match act {
                    FfnAct::Silu => kernels.swiglu(g, up),
                    FfnAct::GeluTanh => kernels.geglu(g, up),
                }
            });
        }
        if s.check_stop() {
            return;
        }
        self.matmuls(pool, &mut s.acts, &s.gate, (nf, at), [(w_down, &mut s.tmp)]);
    }

    /// `s.x[b0 + b] += rms_norm(s.tmp[b]) · weight` for the `nf` tokens b (the normed rows left
    /// in `s.xn`), a token per call: Gemma's post-norms before the residual add.
    pub(super) fn add_post_normed(
        &self,
        pool: &Pool,
        s: &mut State,
        weight: &[f32],
        b0: usize,
        nf: usize,
    ) {
        let (e, eps) = (self.config.n_embd, self.config.rms_eps);
        let (tmp, x, xn) = (&s.tmp, Out::new(&mut s.x), Out::new(&mut s.xn));
        per_token(pool, nf, &|b| {
            let bb = b0 + b;
            // SAFETY: token bb's rows of x and xn are touched by this call alone.
            let (x, xn) = unsafe {
                (
                    x.slice(bb * e, (bb + 1) * e),
                    xn.slice(bb * e, (bb + 1) * e),
                )
            };
            ops::rms_norm(&tmp[b * e..(b + 1) * e], weight, eps, xn);
            add_into(x, xn);
        });
    }

    /// Adds the FFN's outputs `s.tmp[..nf]` to the residual stream of tokens `b0..n` (through
    /// the post-FFN norm where the family has one).
    fn ffn_residual(
        &self,
        pool: &Pool,
        s: &mut State,
        layer: &Layer,
        b0: usize,
        nf: usize,
        n: usize,
    ) {
        let c = &self.config;
        let e = c.n_embd;
        match &layer.post_norms {
            Some([_, post_ffn]) => self.add_post_normed(pool, s, post_ffn, b0, nf),
            None => add_into(&mut s.x[b0 * e..n * e], &s.tmp[..nf * e]),
        }
    }
}
