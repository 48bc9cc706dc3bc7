//! The packed block-chain layouts' many-token path ([`Layout::Q4_0x16`], [`Layout::Iq4NlX16`]):
//! runs of packed groups against a forward step's tokens, through the tier's many-token kernel
//! (AVX2's panels, AVX-512's steps panels) and its single-token one.

use super::packed_steps::{PackedSteps, StepsPanel, STEPS_MIN_TOKENS};
use super::{
    checked_blocks, panel_tokens_padded, ActRow, BlockQ4_0, GgmlType, Kernels, Layout, PackedGemv,
    PackedPanel, Q8Group, SumOrder, MAX_PANEL_TOKENS, PACK_ROWS, PANEL_TOKENS, QK,
};

/// Most tokens one pass of the panel over a packed group takes: its blocks are already in
/// vector order, and with 64 Q4_0's pp128 at one thread was 3.6% slower than with 32 (Zen 5).
pub(super) const PACKED_PANEL_TOKENS: usize = 32;
/// The fewest tokens past the last whole [`PANEL_TOKENS`] group that a packed run
/// ([`Kernels::dot_tile_packed_run`]) gives a tier's panels in a padded group rather than one
/// single-token gemv each (or fewer, where the tier's panels skip a padded group's empty
/// passes). An eight-token panel costs about what five gemvs over a group do: on Zen 5
/// (AVX-512's panel, before its steps panels), the 1B Q4_0 model's prompts of 5, 6, 7 and 13
/// tokens read 174–178, 178–180, 184 and 242–243 t/s at one thread through gemvs and 180–184,
/// 205–211, 245–250 and 275–276 through a padded panel, while 2 and 4 tokens read 129–131 and
/// 164–165 through gemvs against 76–78 and 145–149 (two alternating rounds).
pub const PACKED_PANEL_PAD: usize = 5;

/// A tier's kernel for many tokens over one packed block-chain group.
#[derive(Clone, Copy)]
pub(super) enum PackedMany {
    /// A panel over the tokens' [`Q8Group`] views, up to [`PACKED_PANEL_TOKENS`] a call.
    Panel(PackedPanel),
    /// A steps panel over the tokens' [`PackedSteps`], [`PANEL_TOKENS`] a call.
    Steps(StepsPanel),
}

impl Kernels {
    /// [`Kernels::dot_tile`] of one packed group of block-chain Q4_0 or IQ4_NL
    /// ([`Layout::Q4_0x16`] or [`Layout::Iq4NlX16`], [`PACK_ROWS`] rows in `group`'s bytes):
    /// `out[t * PACK_ROWS + r]` is row r against `acts[t]`, bit for bit as the file layout
    /// gives it. With a steps panel, every token from [`STEPS_MIN_TOKENS`] up goes through
    /// it; with a panel, whole groups of [`PANEL_TOKENS`] tokens do, and so do the tokens
    /// after them when there are at least [`PACKED_PANEL_PAD`] (in a padded group). The rest
    /// go one at a time through [`Kernels::gemv_in`].
    ///
    /// # Panics
    /// If `out.len() != PACK_ROWS * acts.len()`, `layout` is neither of the two, or as
    /// [`Kernels::gemv_in`] does.
    pub fn dot_tile_packed(&self, layout: Layout, group: &[u8], acts: &[ActRow], out: &mut [f32]) {
        self.dot_tile_packed_run(layout, group, 1, acts, None, out, |_, _| {});
    }

    /// The packed single-token and many-token kernels of a block-chain layout
    /// ([`Layout::Q4_0x16`], [`Layout::Iq4NlX16`]), where this tier has them.
    pub(super) fn chain_packed(&self, layout: Layout) -> Option<(PackedGemv, PackedMany)> {
        match layout {
            Layout::Q4_0x16 => self.q4_0_packed,
            Layout::Iq4NlX16 => self.iq4_nl_packed,
            _ => None,
        }
    }

    /// [`Kernels::dot_tile_packed`] of `count` packed groups back to back in `groups`, each
    /// group's outputs computed into `out` and handed to `each(g, outputs)` in order. The
    /// activations' panel views are built once for the run, not once per group, and the steps
    /// panels' activations (where this tier takes these tokens through them) are `steps`
    /// ([`Kernels::build_packed_steps`] of `acts`, built once for many runs) or, without them,
    /// built here.
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
        let many = self.chain_packed(layout).map(|(_, many)| many);
        let done = match many {
            Some(PackedMany::Steps(_)) if acts.len() >= STEPS_MIN_TOKENS => acts.len(),
            Some(PackedMany::Panel(_)) => {
                panel_tokens_padded(acts.len(), self.q4_0_panel_pad.min(PACKED_PANEL_PAD))
            }
            _ => 0,
        };
        let built;
        let steps = match (many, steps) {
            (Some(PackedMany::Steps(_)), Some(s)) if done > 0 => {
                assert!(s.of(acts), "steps of other activations");
                Some(s)
            }
            (Some(PackedMany::Steps(_)), None) if done > 0 => {
                built = PackedSteps::new(acts, n);
                Some(&built)
            }
            _ => None,
        };
        let views: Vec<(usize, [Q8Group; MAX_PANEL_TOKENS / PANEL_TOKENS])> = match many {
            Some(PackedMany::Panel(_)) => acts[..done]
                .chunks(PACKED_PANEL_TOKENS)
                .enumerate()
                .map(|(c, ac)| (c * PACKED_PANEL_TOKENS, Q8Group::all(ac, n)))
                .collect(),
            _ => Vec::new(),
        };
        for g in 0..count {
            let group = &groups[g * step..(g + 1) * step];
            let w = checked_blocks::<BlockQ4_0>(group, PACK_ROWS * n);
            match (many, steps) {
                (Some(PackedMany::Steps(panel)), Some(steps)) => {
                    let outs = out[..done * PACK_ROWS].chunks_mut(PANEL_TOKENS * PACK_ROWS);
                    for (st, o) in steps.groups.iter().zip(outs) {
                        panel(w, st, o.len() / PACK_ROWS, o);
                    }
                }
                (Some(PackedMany::Panel(panel)), _) => {
                    for (t0, views) in &views {
                        let k = (done - t0).min(PACKED_PANEL_TOKENS);
                        let o = &mut out[t0 * PACK_ROWS..(t0 + k) * PACK_ROWS];
                        panel(w, &views[..k.div_ceil(PANEL_TOKENS)], k, o);
                    }
                }
                _ => {}
            }
            // The tokens the many-token kernel left, one at a time.
            for (a, o) in acts[done..]
                .iter()
                .zip(out[done * PACK_ROWS..].chunks_exact_mut(PACK_ROWS))
            {
                self.gemv_in(layout, ty, SumOrder::BlockChain, group, a, o);
            }
            each(g, out);
        }
    }
}
