//! A forward step's tokens interleaved block by block for the packed Q4_0 and IQ4_NL groups'
//! steps panels ([`Layout::Q4_0x16`](super::Layout::Q4_0x16),
//! [`Layout::Iq4NlX16`](super::Layout::Iq4NlX16)): a serving step's decoded tokens and
//! prompts' chunks. A panel reading each token's block through its own slices steps one
//! pointer per token; a step puts a block of eight tokens behind one, so a tier's panel keeps
//! every token's sums in registers. They are built once for all the matrices a step's
//! activations meet ([`Kernels::build_packed_steps`]).

use super::{q8_0_row, ActRow, BlockQ4_0, Kernels, Layout, PACK_ROWS, PANEL_TOKENS, QK};

/// One block of [`PANEL_TOKENS`] tokens' Q8_0 activations side by side, as the steps panels
/// read them: the quants, each token's sum of them and its scale. Five cache lines.
#[repr(C, align(64))]
#[derive(Clone, Copy)]
pub(super) struct Q8Step {
    pub qs: [[i8; QK]; PANEL_TOKENS],
    pub sums: [i32; PANEL_TOKENS],
    pub scales: [f32; PANEL_TOKENS],
}

const _: () = assert!(
    std::mem::size_of::<Q8Step>() == 5 * 64,
    "a step is five cache lines"
);

impl Q8Step {
    const EMPTY: Q8Step = Q8Step {
        qs: [[0; QK]; PANEL_TOKENS],
        sums: [0; PANEL_TOKENS],
        scales: [0.0; PANEL_TOKENS],
    };
}

/// A packed panel over one group for its first `tokens` (1..=[`PANEL_TOKENS`]) tokens, their
/// activations as [`Q8Step`]s: `out[t * PACK_ROWS + r]`, bit for bit the block-chain dot of
/// row r and token t.
pub(super) type StepsPanel = fn(&[BlockQ4_0], &[Q8Step], usize, &mut [f32]);

/// Checks a steps panel's arguments (both tiers' take the same): one to [`PANEL_TOKENS`]
/// tokens, `w` one packed group of `steps.len()` blocks, `out` sixteen outputs per token.
///
/// # Panics
/// Where any of that does not hold.
pub(super) fn check_steps(w: &[BlockQ4_0], steps: &[Q8Step], tokens: usize, out: &[f32]) {
    assert!(
        (1..=PANEL_TOKENS).contains(&tokens),
        "a steps panel of {tokens} tokens"
    );
    let n = steps.len();
    assert!(
        n > 0 && w.len() == PACK_ROWS * n && out.len() == PACK_ROWS * tokens,
        "steps panel: {} blocks, {n} steps, {} outputs for {tokens} tokens",
        w.len(),
        out.len()
    );
}

/// The fewest tokens that go through the steps panels rather than one single-token gemv each.
/// Over a packed group streamed from memory (2048 columns, one thread, Zen 5), two tokens'
/// steps took 15.4 cycles per token and block against 18.4 through two gemvs, three 12.6
/// against 16.5, four 9.2 against 16.2; a single token's steps 31.8 against the gemv's 30.5.
pub const STEPS_MIN_TOKENS: usize = 2;

/// [`Q8Step`]s of a step's tokens, [`PANEL_TOKENS`] at a time (a last short group's places past
/// its tokens are zero), and which activations they were built from. Kept from step to step so
/// that their memory is reused ([`Kernels::build_packed_steps`]).
#[derive(Default)]
pub struct PackedSteps {
    pub(super) groups: Vec<Vec<Q8Step>>,
    /// The address, token count and block count of the activations they hold (compared, never
    /// dereferenced); `None` when they hold none.
    of: Option<(usize, usize, usize)>,
}

impl PackedSteps {
    /// The steps of `acts` (Q8_0 of `n` blocks each).
    ///
    /// # Panics
    /// If an activation is not Q8_0 of `n` blocks.
    pub(super) fn new(acts: &[ActRow], n: usize) -> PackedSteps {
        let mut steps = PackedSteps::default();
        steps.fill(acts, n);
        steps
    }

    /// Rebuilds these steps from `acts` (Q8_0 of `n` blocks each), reusing their memory.
    fn fill(&mut self, acts: &[ActRow], n: usize) {
        self.groups
            .resize_with(acts.len().div_ceil(PANEL_TOKENS), Vec::new);
        for (steps, group) in self.groups.iter_mut().zip(acts.chunks(PANEL_TOKENS)) {
            steps.clear();
            steps.resize(n, Q8Step::EMPTY);
            for (t, act) in group.iter().enumerate() {
                let row = q8_0_row(act, n);
                let blocks = row.blocks.iter().zip(&row.sums).zip(&row.scales);
                for (s, ((b, sum), scale)) in steps.iter_mut().zip(blocks) {
                    s.qs[t] = b.qs;
                    s.sums[t] = *sum;
                    s.scales[t] = *scale;
                }
            }
        }
        self.of = Some(Self::key(acts));
    }

    /// What [`PackedSteps::of`] compares: where the rows are, how many, and their blocks.
    fn key(acts: &[ActRow]) -> (usize, usize, usize) {
        let blocks = acts.first().map_or(0, |a| a.len() / QK);
        (acts.as_ptr() as usize, acts.len(), blocks)
    }

    /// Whether these were last built from `acts`: the same rows (not equal ones), as many, of
    /// as many blocks. Their contents are not compared: the caller rebuilds the steps whenever
    /// it rewrites the rows.
    pub fn of(&self, acts: &[ActRow]) -> bool {
        self.of == Some(Self::key(acts))
    }
}

impl Kernels {
    /// Whether this tier's packed runs of `layout` ([`Kernels::dot_tile_packed_run`]) take
    /// `tokens` tokens through a steps panel: from [`STEPS_MIN_TOKENS`] up, where it has one.
    pub fn takes_steps(&self, layout: Layout, tokens: usize) -> bool {
        tokens >= STEPS_MIN_TOKENS && self.chain_packed(layout).is_some()
    }

    /// Rebuilds `steps` from `acts` (Q8_0 activations of one length) where this tier's packed
    /// runs of some block-chain layout take that many tokens through a steps panel, and returns
    /// whether it did: built once and handed to every run of a step
    /// ([`Kernels::dot_tile_packed_run`]) rather than once per run. The caller rebuilds them
    /// whenever it rewrites `acts`.
    ///
    /// # Panics
    /// If the activations are not Q8_0 of one length.
    pub fn build_packed_steps(&self, acts: &[ActRow], steps: &mut PackedSteps) -> bool {
        steps.of = None;
        let Some(first) = acts.first() else {
            return false;
        };
        let layouts = [Layout::Q4_0x16, Layout::Iq4NlX16];
        if !layouts.iter().any(|&l| self.takes_steps(l, acts.len())) {
            return false;
        }
        steps.fill(acts, first.len() / QK);
        true
    }
}
