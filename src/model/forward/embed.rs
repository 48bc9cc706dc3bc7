//! The first stage: each token's row of the embedding, the start of its residual stream.

use super::{Model, State};

impl Model<'_> {
    /// `s.x[b]` = the embedding's row of `tokens[b]`, scaled where the family scales it.
    pub(super) fn embed(&self, s: &mut State, tokens: &[u32]) {
        let (c, w) = (&self.config, &self.weights);
        let e = c.n_embd;
        for (b, &tok) in tokens.iter().enumerate() {
            assert!((tok as usize) < c.n_vocab, "token id {tok} out of range");
            let x = &mut s.x[b * e..(b + 1) * e];
            crate::kernels::dequantize_row(
                w.token_embd.ty(),
                w.token_embd.row_any(tok as usize),
                x,
            );
            if let Some(scale) = c.recipe.embd_scale {
                x.iter_mut().for_each(|v| *v *= scale);
            }
        }
    }
}
