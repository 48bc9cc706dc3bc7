//! The last stage: the final norm of the tokens that want logits, and the output head's
//! product.

use super::parallel::At;
use super::{Model, State};
use crate::kernels::ops;
use crate::pool::Pool;

impl Model<'_> {
    /// `s.logits(i)` = the logits of batch row `first + i`, for the rows `first..n` (sitting
    /// at `at` in llama.cpp's head matmul).
    pub(super) fn head(&self, pool: &Pool, s: &mut State, (first, n): (usize, usize), at: At) {
        let (c, w) = (&self.config, &self.weights);
        let e = c.n_embd;
        let m = n - first;
        s.n_logits = m;
        if m == 0 {
            return;
        }
        for b in first..n {
            let i = b - first;
            ops::rms_norm(
                &s.x[b * e..(b + 1) * e],
                &w.output_norm,
                c.rms_eps,
                &mut s.xn[i * e..(i + 1) * e],
            );
        }
        if s.check_stop() {
            return;
        }
        self.matmuls(
            pool,
            &mut s.acts,
            &s.xn,
            (m, at),
            [(&w.output, &mut s.logits)],
        );
        if let Some(cap) = c.recipe.logit_softcap {
            // ggml_scale by 1/cap, ggml_tanh (tanhf), ggml_scale by cap.
            let inv = 1.0 / cap;
            let nv = c.n_vocab;
            for v in &mut s.logits[..m * nv] {
                *v = (*v * inv).tanh() * cap;
            }
        }
    }
}
