//! Mixed forward steps: one pass over the weights for several sequences' tokens at once —
//! decoded tokens and prompt chunks side by side (the server's continuous batching). Each
//! token keeps the arithmetic it has when its sequence runs alone ([`Model::eval_chunk`] for
//! a prompt, [`Model::forward`] for a decoded token), so the results are the same bits.

use super::step::Micro;
use super::{Model, State, MAX_BATCH, UBATCH};
use crate::model::kv::Arith;
use crate::pool::Pool;

/// One sequence's share of a mixed step: `tokens[start..]`, at most `most` of them, evaluated
/// as [`Model::eval`] of all of `tokens` evaluates them (`tokens[..start]` already in the
/// sequence's cache), with logits for the tokens from index `logits_from` on. A decoded token
/// is a part of one token: `tokens` just that token, `start` and `logits_from` 0. A mixture of
/// experts ignores `most` and takes `eval`'s whole chunk (a token's expert matmuls depend on
/// which tokens of its chunk chose the same experts).
#[derive(Clone, Copy, Debug)]
pub struct Part<'t> {
    pub tokens: &'t [u32],
    pub start: usize,
    pub logits_from: usize,
    pub most: usize,
}

impl<'t> Part<'t> {
    /// The part of a decoded token.
    pub fn decode(token: &'t [u32]) -> Part<'t> {
        assert_eq!(token.len(), 1, "a decoded token is one token");
        Part {
            tokens: token,
            start: 0,
            logits_from: 0,
            most: 1,
        }
    }
}

/// One segment of a mixed step (`forward_batch`): `count` consecutive tokens of one sequence,
/// where `micro` says they sit in its micro-batch, the ones from `from` on with logits.
#[derive(Clone, Copy, Debug)]
pub(super) struct Seg {
    pub count: usize,
    pub micro: Micro,
    pub from: usize,
}

/// A mixed step's sequences and segments, `seqs[j]` running `segs[j]`.
pub(super) struct Mixed<'s, 'q> {
    pub seqs: &'s mut [&'q mut State],
    pub segs: &'s [Seg],
}

/// What a mixed step's tokens need from their segments: positions, places in llama.cpp's
/// matmuls, and which tokens have logits (with their places in the last layer's and the head's
/// matmuls).
pub(super) struct MixedPlan {
    pub pos: Vec<usize>,
    pub places: Vec<(usize, usize)>,
    /// Batch rows of the tokens with logits, in order.
    pub outs: Vec<usize>,
    pub out_places: Vec<(usize, usize)>,
}

impl MixedPlan {
    pub fn new(m: &Mixed) -> MixedPlan {
        MixedPlan::of(m.seqs.iter().map(|q| q.pos).zip(m.segs.iter().copied()))
    }

    /// The plan of segments given with their sequences' positions.
    fn of(segs: impl Iterator<Item = (usize, Seg)>) -> MixedPlan {
        let mut p = MixedPlan {
            pos: Vec::new(),
            places: Vec::new(),
            outs: Vec::new(),
            out_places: Vec::new(),
        };
        for (pos, g) in segs {
            let ((um, i0), (om, o0)) = (g.micro.tokens, g.micro.outputs);
            for k in 0..g.count {
                p.outs.extend((k >= g.from).then_some(p.pos.len()));
                p.pos.push(pos + k);
                p.places.push((um, i0 + k));
            }
            p.out_places
                .extend((0..g.count.saturating_sub(g.from)).map(|k| (om, o0 + k)));
        }
        p
    }
}

/// The chunk [`Model::eval_chunk`] evaluates of `len` tokens from `start` (logits from
/// `logits_from`), cut to at most `most` tokens: its end, the micro-batch it sits in, and its
/// first token with logits (counted from `start`; the chunk's length if none). A chunk may end
/// anywhere: each token's arithmetic depends only on its micro-batch and its place there, and
/// the next chunk starts inside the same micro-batch.
pub(super) fn chunk_plan(
    len: usize,
    start: usize,
    logits_from: usize,
    most: usize,
) -> (usize, Micro, usize) {
    assert!(start < len && most > 0, "a chunk of no tokens");
    let u0 = start / UBATCH * UBATCH;
    let ulen = (len - u0).min(UBATCH);
    let end = ((start / MAX_BATCH + 1) * MAX_BATCH)
        .min(u0 + ulen)
        .min(start + most);
    // The micro-batch's first token with logits, and how many have them.
    let out0 = logits_from.clamp(u0, u0 + ulen);
    let n_out = u0 + ulen - out0;
    let from = logits_from.saturating_sub(start).min(end - start);
    let micro = Micro {
        arith: Arith::for_ubatch(ulen),
        tokens: (ulen, start - u0),
        outputs: (n_out, (start + from).saturating_sub(out0)),
        run: (ulen, start - u0),
    };
    (end, micro, from)
}

impl Model<'_> {
    /// The chunk of a part (see [`chunk_plan`]), whole for a mixture of experts.
    fn part_plan(&self, p: &Part) -> (usize, Micro, usize) {
        let most = if self.config.moe.is_some() {
            MAX_BATCH
        } else {
            p.most
        };
        chunk_plan(p.tokens.len(), p.start, p.logits_from, most)
    }

    /// Where a part's chunk ends (see [`Part`]).
    pub fn part_end(&self, p: &Part) -> usize {
        self.part_plan(p).0
    }

    /// How many of a part's tokens have logits.
    pub fn part_outputs(&self, p: &Part) -> usize {
        let (end, _, from) = self.part_plan(p);
        end - p.start - from
    }

    /// One forward step over several sequences' parts at once: part `j` into `seqs[j]` (each a
    /// sequence of its own, all distinct from `work`, whose buffers the step uses), every weight
    /// row read once for all their tokens ([`MAX_BATCH`] at most). The tokens with logits have
    /// them in `work.logits(0..)`, part after part ([`Model::part_outputs`] each). Returns each
    /// part's end. A mixture of experts runs the parts one after another (an expert's matmul
    /// sums differently when several tokens chose it).
    ///
    /// # Panics
    /// Where the parts' tokens outnumber [`MAX_BATCH`] (but for a mixture of experts, whose
    /// parts run one by one; its work buffers hold [`MAX_BATCH`] outputs), a sequence would pass
    /// its context, or the counts of `seqs` and `parts` differ.
    pub fn forward_mixed(
        &self,
        pool: &Pool,
        work: &mut State,
        seqs: &mut [&mut State],
        parts: &[Part],
    ) -> Vec<usize> {
        assert_eq!(seqs.len(), parts.len(), "one part per sequence");
        let plans: Vec<(usize, Micro, usize)> = parts.iter().map(|p| self.part_plan(p)).collect();
        let ends = plans.iter().map(|&(end, ..)| end).collect();
        if self.config.moe.is_some() {
            let mut at = 0;
            for ((seq, p), &(end, micro, from)) in seqs.iter_mut().zip(parts).zip(&plans) {
                self.forward_batch(pool, seq, None, &p.tokens[p.start..end], from, micro);
                let (n, outs) = (seq.logits.len() / MAX_BATCH, seq.n_logits);
                work.logits[at * n..(at + outs) * n].copy_from_slice(&seq.logits[..outs * n]);
                at += outs;
            }
            work.n_logits = at;
            return ends;
        }
        let n: usize = parts.iter().zip(&plans).map(|(p, pl)| pl.0 - p.start).sum();
        assert!(n <= MAX_BATCH, "a step of {n} tokens");
        let tokens: Vec<u32> = parts
            .iter()
            .zip(&plans)
            .flat_map(|(p, &(end, ..))| p.tokens[p.start..end].iter().copied())
            .collect();
        let segs: Vec<Seg> = parts
            .iter()
            .zip(&plans)
            .map(|(p, &(end, micro, from))| Seg {
                count: end - p.start,
                micro,
                from,
            })
            .collect();
        let mixed = Mixed { seqs, segs: &segs };
        self.forward_batch(pool, work, Some(mixed), &tokens, 0, Micro::UNUSED);
        ends
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Prompt token `t` of a prompt of `len` tokens sits at `(micro-batch length, index in
    /// it)` in llama.cpp's matmuls, and at `(outputs, index among them)` in the last layer's
    /// when it has logits (from `logits_from` on).
    fn place(len: usize, t: usize) -> (usize, usize) {
        let u0 = t - t % UBATCH;
        ((len - u0).min(UBATCH), t - u0)
    }

    fn out_place(len: usize, logits_from: usize, t: usize) -> (usize, usize) {
        let u0 = t - t % UBATCH;
        let first = logits_from.max(u0);
        ((len - u0).min(UBATCH) - (first - u0), t - first)
    }

    #[test]
    fn a_mixed_plan_places_every_token_as_its_own_prompt_does() {
        // (prompt length, start, logits from, most, position of the start in the cache)
        let parts = [
            (1, 0, 0, 1, 17),
            (600, 509, 599, 9, 509),
            (40, 3, 39, 30, 3),
            (40, 33, 30, 32, 33),
            (1200, 1000, 0, 31, 1000),
        ];
        let segs: Vec<(usize, Seg)> = parts
            .iter()
            .map(|&(len, start, lf, most, pos)| {
                let (end, micro, from) = chunk_plan(len, start, lf, most);
                assert!(end > start && end - start <= most.min(MAX_BATCH));
                let seg = Seg {
                    count: end - start,
                    micro,
                    from,
                };
                (pos, seg)
            })
            .collect();
        let plan = MixedPlan::of(segs.iter().copied());
        let mut b = 0;
        let mut o = 0;
        for (&(len, start, lf, ..), &(pos, g)) in parts.iter().zip(&segs) {
            for k in 0..g.count {
                let t = start + k;
                assert_eq!(plan.pos[b], pos + k);
                assert_eq!(plan.places[b], place(len, t), "token {t} of {len}");
                if t >= lf {
                    assert_eq!(plan.outs[o], b);
                    assert_eq!(
                        plan.out_places[o],
                        out_place(len, lf, t),
                        "output {t} of {len}"
                    );
                    o += 1;
                }
                b += 1;
            }
        }
        assert_eq!((plan.places.len(), plan.outs.len()), (b, o));
        // A chunk never crosses a micro-batch's end.
        assert_eq!(chunk_plan(600, 509, 599, 9).0, 512);
    }
}
