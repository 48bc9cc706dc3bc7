//! The packed block-chain layouts' many-token path ([`Layout::Q4_0x16`], [`Layout::Iq4NlX16`]):
//! runs of packed groups against a forward step's tokens, through the tier's packed panels
//! (one group, or two at once) and single-token kernels.

use super::packed_steps::PackedSteps;
use super::{
    checked_blocks, panel_tokens_padded, ActRow, BlockQ4_0, GgmlType, Kernels, Layout, PackedGemv,
    PackedPanel, Q8Group, SumOrder, MAX_PANEL_TOKENS, PACK_ROWS, PANEL_TOKENS, QK,
};

/// Most tokens one pass of the panel over a packed group takes: its blocks are already in
/// vector order, and with 64 Q4_0's pp128 at one thread was 3.6% slower than with 32 (Zen 5).
pub(super) const PACKED_PANEL_TOKENS: usize = 32;
/// [`PackedPanel`] of two packed groups of one length at once, into one output each.
pub(super) type PackedPanelPair = fn([&[BlockQ4_0]; 2], &[Q8Group], usize, [&mut [f32]; 2]);
/// The fewest tokens past the last whole [`PANEL_TOKENS`] group that a packed run
/// ([`Kernels::dot_tile_packed_run`]) gives its panels in a padded group rather than one
/// single-token gemv each (or fewer, where the tier's panels skip a padded group's empty
/// passes). An eight-token panel costs about what five gemvs over a group do: on Zen 5
/// (AVX-512), the 1B Q4_0 model's prompts of 5, 6, 7 and 13 tokens read 174–178, 178–180,
/// 184 and 242–243 t/s at one thread through gemvs and 180–184, 205–211, 245–250 and
/// 275–276 through a padded panel, while 2 and 4 tokens read 129–131 and 164–165 through
/// gemvs against 76–78 and 145–149 (two alternating rounds).
pub const PACKED_PANEL_PAD: usize = 5;
/// The fewest panel tokens the two-group panels take. With fewer, the step is bound by
/// streaming the weights rather than by the arithmetic the shared broadcasts save, and two
/// groups at once read slower: on Zen 5 (AVX-512), the 1B Q4_0 model's pp8 fell from 276–284
/// to 262–263 t/s at one thread, while pp16 rose from 484–493 to 517–602 at two threads and
/// pp64 from 335 to 398 at one and from 567–574 to 604–640 at two (two alternating rounds).
pub const PAIR_MIN_TOKENS: usize = 2 * PANEL_TOKENS;

impl Kernels {
    /// [`Kernels::dot_tile`] of one packed group of block-chain Q4_0 or IQ4_NL
    /// ([`Layout::Q4_0x16`] or [`Layout::Iq4NlX16`], [`PACK_ROWS`] rows in `group`'s bytes):
    /// `out[t * PACK_ROWS + r]` is row r against `acts[t]`, bit for bit as the file layout
    /// gives it. Whole groups of [`PANEL_TOKENS`] tokens go through the packed panel where the
    /// tier has one, and so do the tokens after them when there are at least
    /// [`PACKED_PANEL_PAD`] (in a padded group); the rest one token at a time through
    /// [`Kernels::gemv_in`].
    ///
    /// # Panics
    /// If `out.len() != PACK_ROWS * acts.len()`, `layout` is neither of the two, or as
    /// [`Kernels::gemv_in`] does.
    pub fn dot_tile_packed(&self, layout: Layout, group: &[u8], acts: &[ActRow], out: &mut [f32]) {
        self.dot_tile_packed_run(layout, group, 1, acts, None, out, |_, _| {});
    }

    /// The packed single-token kernel and panel of a block-chain layout
    /// ([`Layout::Q4_0x16`], [`Layout::Iq4NlX16`]), where this tier has them.
    pub(super) fn chain_packed(&self, layout: Layout) -> Option<(PackedGemv, PackedPanel)> {
        match layout {
            Layout::Q4_0x16 => self.q4_0_packed_gemv.zip(self.q4_0_packed_panel),
            Layout::Iq4NlX16 => self.iq4_nl_packed,
            _ => None,
        }
    }

    /// [`Kernels::dot_tile_packed`] of `count` packed groups back to back in `groups`, each
    /// group's outputs handed to `each(g, outputs)` in order. They are computed into `out`,
    /// except those of the second group of each pair that the two-group panels take (from
    /// [`PAIR_MIN_TOKENS`] tokens), which go to a buffer of the run's own: only `each` sees
    /// every group's outputs. The activations' panel views are built once for the run, not
    /// once per group, and the steps panels' activations (where this tier takes these tokens
    /// through them) are `steps` ([`Kernels::build_packed_steps`] of `acts`, built once for
    /// many runs) or, without them, built here.
    ///
    /// # Panics
    /// If `groups` is not `count` whole groups of the activations' length, `steps` are not
    /// those of `acts`, or as [`Kernels::dot_tile_packed`] does.
    #[allow(clippy::too_many_arguments)]
    pub fn dot_tile_packed_run(
        &self,
        layout: Layout,
        groups: &[u8],
        count: usize,
        acts: &[ActRow],
        steps: Option<&PackedSteps>,
        out: &mut [f32],
        mut each: impl FnMut(usize, &[f32]),
    ) {
        assert_eq!(
            out.len(),
            PACK_ROWS * acts.len(),
            "tile output size mismatch"
        );
        let ty = match layout {
            Layout::Q4_0x16 => GgmlType::Q4_0,
            Layout::Iq4NlX16 => GgmlType::Iq4Nl,
            l => panic!("{} is not a block-chain packed layout", l.name()),
        };
        let Some(first) = acts.first() else {
            return;
        };
        let n = first.len() / QK;
        let step = PACK_ROWS * n * std::mem::size_of::<BlockQ4_0>();
        assert_eq!(
            groups.len(),
            count * step,
            "packed groups of {n}-block rows"
        );
        let panel = self.chain_packed(layout).map(|(_, panel)| panel);
        let paneled = match panel {
            Some(_) => panel_tokens_padded(acts.len(), self.q4_0_panel_pad.min(PACKED_PANEL_PAD)),
            None => 0,
        };
        // The Q4_0 or the IQ4_NL one of a tier's pair of kernels.
        fn pick<K>(ty: GgmlType, (q4_0, iq4_nl): (K, K)) -> K {
            if ty == GgmlType::Iq4Nl {
                iq4_nl
            } else {
                q4_0
            }
        }
        let pair = self
            .packed_pairs
            .filter(|_| panel.is_some() && paneled >= PAIR_MIN_TOKENS)
            .map(|k| pick(ty, k));
        // Below the pairs, the steps panels (where the tier has them) take every token from
        // `STEPS_MIN_TOKENS` up: a short group costs them only its own tokens.
        let steps_panel = self
            .packed_steps
            .filter(|_| panel.is_some() && self.takes_steps(acts.len()))
            .map(|k| pick(ty, k));
        let done = match steps_panel {
            Some(_) => acts.len(),
            None => paneled,
        };
        let built;
        let steps = match (steps_panel, steps) {
            (None, _) => None,
            (Some(_), Some(s)) => {
                assert!(s.of(acts), "steps of other activations");
                Some(s)
            }
            (Some(_), None) => {
                built = PackedSteps::new(acts, n);
                Some(&built)
            }
        };
        let views: Vec<(usize, [Q8Group; MAX_PANEL_TOKENS / PANEL_TOKENS])> = match steps_panel {
            Some(_) => Vec::new(),
            None => acts[..done]
                .chunks(PACKED_PANEL_TOKENS)
                .enumerate()
                .map(|(c, ac)| (c * PACKED_PANEL_TOKENS, Q8Group::all(ac, n)))
                .collect(),
        };
        // The second group of a pair is computed here, then handed on after the first.
        let mut second = match pair {
            Some(_) if count > 1 => vec![0f32; out.len()],
            _ => Vec::new(),
        };
        // The tokens the panels left, one at a time, then the group's outputs handed on.
        let mut finish = |g: usize, group: &[u8], o: &mut [f32]| {
            let rest = &mut o[done * PACK_ROWS..];
            self.packed_rest(layout, ty, group, &acts[done..], rest);
            each(g, o);
        };
        let mut g = 0;
        while g < count {
            let group = &groups[g * step..(g + 1) * step];
            if let Some(pair) = pair.filter(|_| g + 1 < count) {
                let next = &groups[(g + 1) * step..(g + 2) * step];
                let w = [group, next].map(|b| checked_blocks::<BlockQ4_0>(b, PACK_ROWS * n));
                for (t0, views) in &views {
                    let k = (done - t0).min(PACKED_PANEL_TOKENS);
                    let span = t0 * PACK_ROWS..(t0 + k) * PACK_ROWS;
                    let o = [&mut out[span.clone()], &mut second[span]];
                    pair(w, &views[..k.div_ceil(PANEL_TOKENS)], k, o);
                }
                finish(g, group, out);
                finish(g + 1, next, &mut second);
                g += 2;
                continue;
            }
            if let Some((panel, steps)) = steps_panel.zip(steps) {
                let w = checked_blocks::<BlockQ4_0>(group, PACK_ROWS * n);
                let outs = out[..done * PACK_ROWS].chunks_mut(PANEL_TOKENS * PACK_ROWS);
                for (st, o) in steps.groups.iter().zip(outs) {
                    panel(w, st, o.len() / PACK_ROWS, o);
                }
            } else if let Some(panel) = panel {
                let w = checked_blocks::<BlockQ4_0>(group, PACK_ROWS * n);
                for (t0, views) in &views {
                    let k = (done - t0).min(PACKED_PANEL_TOKENS);
                    let o = &mut out[t0 * PACK_ROWS..(t0 + k) * PACK_ROWS];
                    panel(w, &views[..k.div_ceil(PANEL_TOKENS)], k, o);
                }
            }
            finish(g, group, out);
            g += 1;
        }
    }

    /// One packed group of a block-chain layout against `acts` one token at a time (the
    /// tokens a run's panels leave): `out[t * PACK_ROWS + r]`.
    fn packed_rest(
        &self,
        layout: Layout,
        ty: GgmlType,
        group: &[u8],
        acts: &[ActRow],
        out: &mut [f32],
    ) {
        for (a, o) in acts.iter().zip(out.chunks_exact_mut(PACK_ROWS)) {
            self.gemv_in(layout, ty, SumOrder::BlockChain, group, a, o);
        }
    }
}
