//! Gemma 4 E2B/E4B's per-layer embeddings: a second input to every layer, made once per step
//! from the token and its embedding ([`Model::per_layer_inputs`], llama.cpp's
//! `build_inp_per_layer` and `project_per_layer_inputs`), and each layer's use of its own after
//! the FFN ([`Model::per_layer_block`]). The arithmetic is ggml's, op by op:
//!
//! ```text
//! sel[l]   = per_layer_token_embd[token][l] · √width                 (get_rows, scale)
//! proj[l]  = rms_norm((per_layer_model_proj · x) · (1/√n_embd))[l] · proj_norm
//! inp[l]   = (proj[l] + sel[l]) · (1/√2)
//! layer l: x += rms_norm(proj_l · (gelu(inp_gate_l · x) ⊙ inp[l])) · post_norm_l
//! ```

use super::parallel::{per_token, At, Out};
use super::step::Step;
use super::{Model, State};
use crate::kernels::ops;
use crate::model::weights::LayerPle;
use crate::pool::Pool;

impl Model<'_> {
    /// `s.ple_in[b]` = token `tokens[b]`'s input to every layer, from its table row and its
    /// scaled embedding `s.x[b]` (nothing where the model has no per-layer embeddings).
    pub(super) fn per_layer_inputs(&self, pool: &Pool, s: &mut State, step: &Step, tokens: &[u32]) {
        let Some(p) = &self.weights.ple else {
            return;
        };
        let c = &self.config;
        let (width, n) = (c.recipe.ple, tokens.len());
        let row = width * c.n_layer;
        self.matmuls(
            pool,
            &mut s.acts,
            &s.x,
            (n, step.at()),
            [(&p.model_proj, &mut s.ple_in)],
        );
        // The constants as llama.cpp computes them, in f32.
        let proj_scale = 1.0f32 / (c.n_embd as f32).sqrt();
        let table_scale = (width as f32).sqrt();
        let input_scale = 1.0f32 / 2f32.sqrt();
        let ple_in = Out::new(&mut s.ple_in);
        per_token(pool, n, &|b| {
            // SAFETY: token b's row of ple_in is touched by this call alone.
            let out = unsafe { ple_in.slice(b * row, (b + 1) * row) };
            let mut sel = vec![0f32; row];
            crate::kernels::dequantize_row(
                p.table.ty(),
                p.table.row_any(tokens[b] as usize),
                &mut sel,
            );
            let mut scaled = vec![0f32; width];
            for (o, sl) in out.chunks_exact_mut(width).zip(sel.chunks_exact(width)) {
                for (d, &v) in scaled.iter_mut().zip(o.iter()) {
                    *d = v * proj_scale;
                }
                ops::rms_norm(&scaled, &p.proj_norm, c.rms_eps, o);
                for (v, &t) in o.iter_mut().zip(sl) {
                    *v = (*v + t * table_scale) * input_scale;
                }
            }
        });
        s.check_stop();
    }

    /// Layer `li`'s per-layer embedding block for the rows `s.x[b0..b0 + nf]` (sitting at `at`
    /// in llama.cpp's matmuls): gated by the layer's input, projected back, normed and added.
    pub(super) fn per_layer_block(
        &self,
        pool: &Pool,
        s: &mut State,
        (li, p): (usize, &LayerPle),
        (b0, nf, at): (usize, usize, At),
    ) {
        let c = &self.config;
        let (e, width) = (c.n_embd, c.recipe.ple);
        let row = width * c.n_layer;
        self.matmuls(
            pool,
            &mut s.acts,
            &s.x[b0 * e..],
            (nf, at),
            [(&p.gate, &mut s.ple_act)],
        );
        {
            let (inp, act, kernels) = (&s.ple_in, Out::new(&mut s.ple_act), &self.kernels);
            per_token(pool, nf, &|b| {
                // SAFETY: token b's row of ple_act is touched by this call alone.
                let g = unsafe { act.slice(b * width, (b + 1) * width) };
                let at = (b0 + b) * row + li * width;
                // ggml_gelu then ggml_mul: the same table lookup and product as its geglu.
                kernels.geglu(g, &inp[at..at + width]);
            });
        }
        if s.check_stop() {
            return;
        }
        self.matmuls(
            pool,
            &mut s.acts,
            &s.ple_act,
            (nf, at),
            [(&p.proj, &mut s.tmp)],
        );
        self.add_post_normed(pool, s, &p.post_norm, b0, nf);
        s.check_stop();
    }
}
