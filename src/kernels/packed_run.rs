//! The packed block-chain layouts' many-token path ([`Layout::Q4_0x16`], [`Layout::Iq4NlX16`]):
//! runs of packed groups against a forward step's tokens, through the tier's steps panels
//! (every token from [`STEPS_MIN_TOKENS`](super::STEPS_MIN_TOKENS) up) and its single-token kernel.

use super::packed_steps::{PackedSteps, StepsPanel};
use super::{
    checked_blocks, ActRow, BlockQ4_0, GgmlType, Kernels, Layout, PackedGemv, SumOrder, PACK_ROWS,
    PANEL_TOKENS, QK,
};

impl Kernels {
    /// [`Kernels::dot_tile`] of one packed group of block-chain Q4_0 or IQ4_NL
    /// ([`Layout::Q4_0x16`] or [`Layout::Iq4NlX16`], [`PACK_ROWS`] rows in `group`'s bytes):
    /// `out[t * PACK_ROWS + r]` is row r against `acts[t]`, bit for bit as the file layout
    /// gives it. From [`STEPS_MIN_TOKENS`](super::STEPS_MIN_TOKENS) tokens up they go through the tier's steps panel
    /// where it has one, otherwise one at a time through [`Kernels::gemv_in`].
    ///
    /// # Panics
    /// If `out.len() != PACK_ROWS * acts.len()`, `layout` is neither of the two, or as
    /// [`Kernels::gemv_in`] does.
    pub fn dot_tile_packed(&self, layout: Layout, group: &[u8], acts: &[ActRow], out: &mut [f32]) {
        self.dot_tile_packed_run(layout, group, 1, acts, None, out, |_, _| {});
    }

    /// The packed single-token kernel and steps panel of a block-chain layout
    /// ([`Layout::Q4_0x16`], [`Layout::Iq4NlX16`]), where this tier has them.
    pub(super) fn chain_packed(&self, layout: Layout) -> Option<(PackedGemv, StepsPanel)> {
        let c = self.entry(layout.holds()?)?.chain_packed?;
        (c.layout == layout).then_some((c.gemv, c.steps))
    }

    /// [`Kernels::dot_tile_packed`] of `count` packed groups back to back in `groups`, each
    /// group's outputs computed into `out` and handed to `each(g, outputs)` in order. The
    /// steps panel's activations are `steps` ([`Kernels::build_packed_steps`] of `acts`, built
    /// once for many runs) or, without them, built here once for the run.
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
        assert!(
            steps.is_none_or(|s| s.of(acts)),
            "steps of other activations"
        );
        let panel = self
            .chain_packed(layout)
            .map(|(_, panel)| panel)
            .filter(|_| self.takes_steps(layout, acts.len()));
        let built;
        let steps = match (panel, steps) {
            (None, _) => None,
            (Some(_), Some(s)) => Some(s),
            (Some(_), None) => {
                built = PackedSteps::new(acts, n);
                Some(&built)
            }
        };
        for g in 0..count {
            let group = &groups[g * step..(g + 1) * step];
            match panel.zip(steps) {
                Some((panel, steps)) => {
                    let w = checked_blocks::<BlockQ4_0>(group, PACK_ROWS * n);
                    let outs = out.chunks_mut(PANEL_TOKENS * PACK_ROWS);
                    for (st, o) in steps.groups.iter().zip(outs) {
                        panel(w, st, o.len() / PACK_ROWS, o);
                    }
                }
                None => {
                    for (a, o) in acts.iter().zip(out.chunks_exact_mut(PACK_ROWS)) {
                        self.gemv_in(layout, ty, SumOrder::BlockChain, group, a, o);
                    }
                }
            }
            each(g, out);
        }
    }
}
