//! One forward step's tokens as the stages see them: how many, where they sit in llama.cpp's
//! micro-batch and matmuls (which decides the order their sums take), which of them have
//! logits, and, for a step that mixes several sequences' tokens, whose caches they go to. The
//! stages ask it; they never branch on whether the step is mixed.

use super::mixed::{Mixed, MixedPlan};
use super::parallel::At;
use super::{Model, State};
use crate::model::kv::Arith;

/// Where a forward step's tokens sit in llama.cpp's micro-batch: which of its kernels computes
/// a token's matmul rows depends on it (see `SumOrder::for_token`).
#[derive(Clone, Copy, Debug)]
pub(super) struct Micro {
    /// The attention arithmetic of the micro-batch.
    pub(super) arith: Arith,
    /// (tokens in the micro-batch, index of the step's first token among them).
    pub(super) tokens: (usize, usize),
    /// (tokens of the micro-batch with logits, index of the step's first such token among
    /// them): the rows of the last layer's FFN and of the output head.
    pub(super) outputs: (usize, usize),
    /// (this sequence's tokens in the micro-batch, index of the step's first token among
    /// them): its cache cells are placed for them together. The micro-batch's `tokens` but
    /// where it holds several sequences' runs (llama-imatrix's batches).
    pub(super) run: (usize, usize),
}

impl Micro {
    /// The micro-batch a mixed step passes (each of its segments has its own).
    pub(super) const UNUSED: Micro = Micro {
        arith: Arith::Single,
        tokens: (1, 0),
        outputs: (0, 0),
        run: (1, 0),
    };
}

/// A forward step's `n` tokens: one sequence's consecutive tokens placed as `micro` says (those
/// from `logits_from` on with logits), or a mixed step's segments, each placed as its own
/// micro-batch says ([`MixedPlan`]).
pub(super) struct Step<'s, 'q> {
    pub(super) n: usize,
    micro: Micro,
    logits_from: usize,
    mixed: Option<Mixed<'s, 'q>>,
    plan: Option<MixedPlan>,
}

impl<'s, 'q> Step<'s, 'q> {
    /// The step of `n` tokens into `s` (or, with `mixed`, into its sequences, `s` lending its
    /// buffers); each sequence must have room for its tokens.
    pub(super) fn new(
        model: &Model,
        s: &State,
        mixed: Option<Mixed<'s, 'q>>,
        n: usize,
        (micro, logits_from): (Micro, usize),
    ) -> Step<'s, 'q> {
        match &mixed {
            None => assert!(s.pos + n <= s.n_ctx, "forward past the end of the context"),
            Some(m) => assert!(
                m.seqs.len() == m.segs.len()
                    && m.segs.iter().map(|g| g.count).sum::<usize>() == n
                    && m.seqs.iter().zip(m.segs).all(|(q, g)| {
                        g.count > 0 && q.pos + g.count <= q.n_ctx && q.n_ctx <= s.n_ctx
                    })
                    && model.config.moe.is_none(),
                "forward past the end of a context"
            ),
        }
        let plan = mixed.as_ref().map(MixedPlan::new);
        Step {
            n,
            micro,
            logits_from,
            mixed,
            plan,
        }
    }

    /// Where the step's tokens sit in the matmuls of every layer (but the last one's FFN).
    pub(super) fn at(&self) -> At<'_> {
        match &self.plan {
            None => At::run(self.micro.tokens),
            Some(p) => At::Each(&p.places),
        }
    }

    /// Where the tokens with logits sit in the last layer's FFN and in the head.
    pub(super) fn output_at(&self) -> At<'_> {
        match &self.plan {
            None => At::run(self.micro.outputs),
            Some(p) => At::Each(&p.out_places),
        }
    }

    /// Token `b`'s position in its sequence.
    pub(super) fn pos(&self, s: &State, b: usize) -> usize {
        match &self.plan {
            None => s.pos + b,
            Some(p) => p.pos[b],
        }
    }

    /// Every token as an FFN's rows: `(first row, rows, where they sit)`.
    pub(super) fn all_rows(&self) -> (usize, usize, At<'_>) {
        (0, self.n, self.at())
    }

    /// The last layer's FFN rows: only the tokens with logits, rows `b0..n` of the batch
    /// (where a mixed step first moves them, in `s.x` and `s.xn` of width `e`), as rows of a
    /// matmul over the micro-batch's outputs.
    pub(super) fn output_rows(&self, s: &mut State, e: usize) -> (usize, usize, At<'_>) {
        let n = self.n;
        match &self.plan {
            None => {
                let b0 = self.logits_from.min(n);
                (b0, n - b0, self.output_at())
            }
            Some(p) => {
                let nf = p.outs.len();
                for (j, &b) in p.outs.iter().enumerate().rev() {
                    let to = n - nf + j;
                    s.x.copy_within(b * e..(b + 1) * e, to * e);
                    s.xn.copy_within(b * e..(b + 1) * e, to * e);
                }
                (n - nf, nf, self.output_at())
            }
        }
    }

    /// Runs `f(q, count, micro)` on the state of each sequence of the step for its `count`
    /// tokens: `s`, or each of a mixed step's own states.
    pub(super) fn each_state(
        &mut self,
        s: &mut State,
        mut f: impl FnMut(&mut State, usize, Micro),
    ) {
        match self.mixed.as_mut() {
            None => f(s, self.n, self.micro),
            Some(m) => {
                for (q, g) in m.seqs.iter_mut().zip(m.segs) {
                    f(q, g.count, g.micro);
                }
            }
        }
    }

    /// Runs `f(s, (b0, count), micro)` for each sequence of the step, its tokens the buffers'
    /// rows `b0..b0 + count`: the step's own sequence, or each of a mixed step's in turn with
    /// its cache (keys, values, cells, position) lent to `s`.
    pub(super) fn per_sequence(
        &mut self,
        s: &mut State,
        mut f: impl FnMut(&mut State, (usize, usize), Micro),
    ) {
        match self.mixed.as_mut() {
            None => f(s, (0, self.n), self.micro),
            Some(m) => {
                let mut b0 = 0;
                for (q, g) in m.seqs.iter_mut().zip(m.segs) {
                    swap_cache(s, q);
                    f(s, (b0, g.count), g.micro);
                    swap_cache(s, q);
                    b0 += g.count;
                }
            }
        }
    }

    /// Moves every sequence of the step past its tokens; returns the first batch row with
    /// logits (its rows from there to `n` have them).
    pub(super) fn advance(&mut self, s: &mut State) -> usize {
        match self.mixed.as_mut() {
            None => {
                s.pos += self.n;
                self.logits_from.min(self.n)
            }
            Some(m) => {
                for (q, g) in m.seqs.iter_mut().zip(m.segs) {
                    q.pos += g.count;
                }
                self.n - self.plan.as_ref().map_or(0, |p| p.outs.len())
            }
        }
    }
}

/// Exchanges two states' caches (keys, values, sliding-window cells, the batch's cells), so one
/// state's buffers can run a step on the other's sequence.
fn swap_cache(a: &mut State, b: &mut State) {
    std::mem::swap(&mut a.k, &mut b.k);
    std::mem::swap(&mut a.v, &mut b.v);
    std::mem::swap(&mut a.swa, &mut b.swa);
    std::mem::swap(&mut a.rows, &mut b.rows);
    std::mem::swap(&mut a.pos, &mut b.pos);
}
