//! The matmul dispatch: every weight type's dot products, runs of rows, tiles and packed groups
//! read from its row of the table ([`Entry`]), found by index, with no case for any one type.
//!
//! A row's optional kernels go in one order: for many tokens, the block-chain panel (whole
//! groups of tokens in the repacked order) or the wide tiles (`vec_dot`'s order) first, then
//! the tile kernel, then one dot per output; for one token, the run of rows, then the tile in
//! runs of [`GEMV_STEP`] rows, then one dot per row. Every kernel gives each output the bits of
//! the row's single dot in the same order.

use super::blocks::Block;
use super::entries::{ChainPanel, Packed};
use super::{
    checked_blocks, pack, q8_0_row, ActRow, Entry, GgmlType, Kernels, Layout, Q8Group, SumOrder,
    Tier, Variant, WideOf, MAX_PANEL_TOKENS, PACK_ROWS, PANEL_ROWS, PANEL_TOKENS, QK, WIDE_ROWS,
    WIDE_TOKENS,
};

/// Rows per call of a row's tile kernel in [`Kernels::gemv`] (its outputs and row slices live
/// on the stack).
const GEMV_STEP: usize = PANEL_ROWS;

impl Kernels {
    /// This table's row for `ty`, if `ty` has kernels.
    #[inline]
    pub fn entry(&self, ty: GgmlType) -> Option<&Entry> {
        let e = &self.entries[super::entries::index_of(ty)?];
        debug_assert_eq!(e.ty, ty, "a tier's rows keep the oracle's order");
        Some(e)
    }

    /// This table's row for `ty`.
    ///
    /// # Panics
    /// For a type without kernels (the loader refuses those).
    #[inline]
    fn row(&self, ty: GgmlType) -> &Entry {
        self.entry(ty)
            .unwrap_or_else(|| panic!("no dot product for weight type {}", ty.name()))
    }

    /// Dot product of one weight row (raw bytes of type `ty`) with a prepared activation.
    ///
    /// # Panics
    /// If the activation kind does not match `ty` or the lengths disagree: both are checked
    /// when the model is loaded, so a mismatch here is a bug in the caller.
    #[inline]
    pub fn dot(&self, ty: GgmlType, row: &[u8], act: &ActRow) -> f32 {
        self.dot_ordered(ty, SumOrder::Lanes, row, act)
    }

    /// [`Kernels::dot`] with an explicit summation order (`BlockChain`: the repacked kernels'
    /// order, for the types llama.cpp repacks; the others ignore it).
    #[inline]
    pub fn dot_ordered(&self, ty: GgmlType, order: SumOrder, row: &[u8], act: &ActRow) -> f32 {
        self.row(ty).dot_in(order)(row, act)
    }

    /// `out[r] = self.dot_ordered(ty, order, row r, act)` for `out.len()` consecutive rows
    /// stored back to back in `rows` (a matrix-vector product over a run of rows), bit for
    /// bit. Decode's path: the row's run kernel ([`Entry::run`]: Q4_0, Q4_1 and Q8_0 a few rows
    /// per call straight from the bytes, block-chain Q4_0 through the tier's single-token panel
    /// first), else its tile kernel ([`Entry::tile`]), [`GEMV_STEP`] rows per call (which takes
    /// them a few rows per pass, the activation shared among them), else one dot per row.
    ///
    /// # Panics
    /// If `rows.len()` is not `out.len()` rows of `act`'s length, or as
    /// [`Kernels::dot_ordered`] does.
    pub fn gemv(&self, ty: GgmlType, order: SumOrder, rows: &[u8], act: &ActRow, out: &mut [f32]) {
        let k = out.len();
        if k == 0 {
            assert!(rows.is_empty(), "weight bytes for no rows");
            return;
        }
        assert_eq!(rows.len() % k, 0, "weight rows of unequal length");
        let e = self.row(ty);
        let variant = e.variant(order);
        if e.run.is_some_and(|run| run(rows, act, variant, out)) {
            return;
        }
        let size = rows.len() / k;
        if let Some(tile) = e.tile {
            // Runs of up to GEMV_STEP rows through the tier's kernel: one call per run, no
            // allocation. A kernel without this variant declines the first run.
            let mut runs = rows.chunks(GEMV_STEP * size).zip(out.chunks_mut(GEMV_STEP));
            let act = std::slice::from_ref(act);
            let all = runs.all(|(run, o)| {
                let rs: [&[u8]; GEMV_STEP] =
                    std::array::from_fn(|r| &run[r.min(o.len() - 1) * size..][..size]);
                tile(&rs[..o.len()], act, variant, o)
            });
            if all {
                return;
            }
        }
        let dot = e.dot_in(order);
        for (o, row) in out.iter_mut().zip(rows.chunks_exact(size)) {
            *o = dot(row, act);
        }
    }

    /// The layout this table reads fastest for a matrix of `ty` summed in `order`: placement
    /// packs the copies it makes into it (the file's own mapping stays as it is). The row's
    /// block-chain packed layout ([`Layout::Q4_0x16`], [`Layout::Iq4NlX16`]) where it sums in
    /// the repacked order, else the layout of its packed kernel ([`Entry::packed`]) where
    /// decode sums in that kernel's variant: where the tier has them (Q4_0, Q4_K, Q5_K, Q6_K
    /// and IQ4_XS on AVX2 and AVX-512, IQ4_NL on AVX-512); [`Layout::Rows`] otherwise.
    pub fn preferred_layout(&self, ty: GgmlType, order: SumOrder) -> Layout {
        let Some(e) = self.entry(ty) else {
            return Layout::Rows;
        };
        match e.chain_packed {
            Some(c) if e.variant(order) == Variant::Repacked => c.layout,
            _ => self
                .packed_for(ty, order)
                .map_or(Layout::Rows, |p| p.layout),
        }
    }

    /// Rows a prompt step should hand [`Kernels::dot_tile`] at once for a matrix of `ty` in
    /// the file's layout: two groups of [`PANEL_ROWS`] where this tier's tile takes two groups
    /// at once (the IQ2, IQ3 and IQ1 types on AVX-512, whose panels feed both groups from each
    /// activation load), else [`PANEL_ROWS`] (so that a step's rows stay in L1 for the tiles
    /// that walk them a few tokens at a time).
    pub fn tile_step_rows(&self, ty: GgmlType) -> usize {
        use GgmlType::{Iq1M, Iq1S, Iq2S, Iq2Xs, Iq2Xxs, Iq3S, Iq3Xxs};
        match (self.tier, ty) {
            (Tier::Avx512, Iq2Xxs | Iq2Xs | Iq2S | Iq3Xxs | Iq3S | Iq1S | Iq1M) => 2 * PANEL_ROWS,
            _ => PANEL_ROWS,
        }
    }

    /// The packed kernel of `ty`, where this tier has one for the variant `order` takes.
    fn packed_for(&self, ty: GgmlType, order: SumOrder) -> Option<Packed> {
        let e = self.entry(ty)?;
        e.packed.filter(|p| p.variant == e.variant(order))
    }

    /// [`Kernels::gemv`] of rows stored in `layout`. For a packed layout (block-chain Q4_0 in
    /// [`Layout::Q4_0x16`], IQ4_NL in [`Layout::Iq4NlX16`], the others of
    /// [`Kernels::preferred_layout`]), `rows` holds whole packed groups of
    /// [`PACK_ROWS`] rows and `out` one output per row; the result is the same, bit for bit,
    /// as the file layout's. A table without the packed kernel (or an order it does not
    /// compute: the repacked gemm's, for a last token of a prompt) unpacks each group first
    /// (slow: tests, a copy packed for another tier, one token now and then).
    ///
    /// # Panics
    /// As [`Kernels::gemv`], or if a packed run is not whole groups of the layout's type.
    pub fn gemv_in(
        &self,
        layout: Layout,
        ty: GgmlType,
        order: SumOrder,
        rows: &[u8],
        act: &ActRow,
        out: &mut [f32],
    ) {
        if layout == Layout::Rows {
            return self.gemv(ty, order, rows, act, out);
        }
        let k = out.len();
        assert!(
            k.is_multiple_of(PACK_ROWS),
            "{k} rows are not whole packed groups"
        );
        let group_bytes = rows.len() / (k / PACK_ROWS).max(1);
        assert_eq!(
            group_bytes * (k / PACK_ROWS),
            rows.len(),
            "packed groups of unequal size"
        );
        let groups = rows
            .chunks_exact(group_bytes.max(1))
            .zip(out.chunks_exact_mut(PACK_ROWS));
        let n = act.len() / layout.block_elems();
        assert!(
            layout.holds() == Some(ty),
            "packed rows of {} are not in {}",
            ty.name(),
            layout.name()
        );
        let e = self.row(ty);
        let variant = e.variant(order);
        let chain = e.chain_packed.filter(|c| c.layout == layout);
        if let Some(c) = chain.filter(|_| variant == Variant::Repacked) {
            let a = q8_0_row(act, n);
            for (wg, o) in groups {
                (c.gemv)(checked_blocks(wg, PACK_ROWS * n), a, o);
            }
            return;
        }
        let p = self.packed_for(ty, order).filter(|p| p.layout == layout);
        if let (Some(p), ActRow::Q8K(a)) = (p, act) {
            groups.for_each(|(wg, o)| (p.gemv)(wg, a, o));
            return;
        }
        let mut unpacked = vec![0u8; group_bytes];
        for (wg, o) in groups {
            pack::unpack_group(layout, wg, n, &mut unpacked);
            self.gemv(ty, order, &unpacked, act, o);
        }
    }

    /// [`Kernels::dot_tile`] of `g` packed groups of a type with a packed kernel
    /// ([`Entry::packed`]; each [`PACK_ROWS`] rows of `layout`, back to back in `groups`'
    /// bytes): `out[t * 16g + 16j + r]` is row r of group j against `acts[t]`, bit for bit as
    /// the file layout gives it, in `order`: decode's order by the packed single-token kernel
    /// per token, the prompt orders by the tier's packed tile kernel. Returns `false`, having
    /// written nothing, where the tier has neither for this order (the caller then unpacks the
    /// groups).
    ///
    /// # Panics
    /// If `groups` is empty, or `out.len()` is not `PACK_ROWS * acts.len()` per group (the
    /// activations' length fixes a group's bytes).
    pub fn dot_tile_in(
        &self,
        layout: Layout,
        ty: GgmlType,
        order: SumOrder,
        groups: &[u8],
        acts: &[ActRow],
        out: &mut [f32],
    ) -> bool {
        let per_group = PACK_ROWS * acts.len();
        // With no tokens there are no outputs, and the count does not matter.
        let count = out.len().checked_div(per_group).unwrap_or(1);
        assert!(
            !groups.is_empty() && count > 0 && out.len() == count * per_group,
            "tile output size mismatch"
        );
        let Some(e) = self.entry(ty) else {
            return false;
        };
        let Some(p) = e.packed.filter(|p| p.layout == layout) else {
            return false;
        };
        let variant = e.variant(order);
        if variant != p.variant {
            return p
                .tile
                .is_some_and(|tile| tile(layout, groups, acts, variant, out));
        }
        if !acts.iter().all(|a| matches!(a, ActRow::Q8K(_))) {
            return false;
        }
        assert!(groups.len().is_multiple_of(count), "{count} packed groups");
        let group_bytes = groups.len() / count;
        if let Some(many) = p.gemv_tokens.filter(|_| acts.len() > 1) {
            // Up to a forward step's tokens at a time, on the stack (this runs once per group
            // of rows in a serving step).
            const CHUNK: usize = 64;
            let row_outs = count * PACK_ROWS;
            for (acts, out) in acts.chunks(CHUNK).zip(out.chunks_mut(CHUNK * row_outs)) {
                let mut ys: [&[super::blocks::BlockQ8K]; CHUNK] = [&[]; CHUNK];
                for (y, a) in ys.iter_mut().zip(acts) {
                    if let ActRow::Q8K(b) = a {
                        *y = b;
                    }
                }
                let mut tmp = [0f32; CHUNK * PACK_ROWS];
                let tmp = &mut tmp[..acts.len() * PACK_ROWS];
                for (j, g) in groups.chunks_exact(group_bytes).enumerate() {
                    many(g, &ys[..acts.len()], tmp);
                    for (o, t) in out
                        .chunks_exact_mut(row_outs)
                        .zip(tmp.chunks_exact(PACK_ROWS))
                    {
                        o[j * PACK_ROWS..(j + 1) * PACK_ROWS].copy_from_slice(t);
                    }
                }
            }
            return true;
        }
        for (a, o) in acts.iter().zip(out.chunks_exact_mut(count * PACK_ROWS)) {
            if let ActRow::Q8K(y) = a {
                for (g, o) in groups
                    .chunks_exact(group_bytes)
                    .zip(o.chunks_exact_mut(PACK_ROWS))
                {
                    (p.gemv)(g, y, o);
                }
            }
        }
        true
    }

    /// `out[t * rows.len() + r] = self.dot_ordered(ty, order, rows[r], &acts[t])` for every
    /// row and activation, bit for bit. Whole groups of tokens go first through the row's
    /// block-chain panel (Q4_0, and IQ4_NL with its value table, in the repacked order) or its
    /// wide tiles (Q8_0), where the tier has them; the rest through its tile kernel
    /// ([`Entry::tile`]: passes of a few rows, each row block unpacked once for a few tokens),
    /// else one dot per output.
    ///
    /// # Panics
    /// If `out.len() != rows.len() * acts.len()`, or as [`Kernels::dot_ordered`] does.
    pub fn dot_tile(
        &self,
        ty: GgmlType,
        order: SumOrder,
        rows: &[&[u8]],
        acts: &[ActRow],
        out: &mut [f32],
    ) {
        let n_rows = rows.len();
        assert_eq!(out.len(), n_rows * acts.len(), "tile output size mismatch");
        let e = self.row(ty);
        let variant = e.variant(order);
        let done = match (variant, e.panel, e.wide) {
            (Variant::Repacked, Some(panel), _) => panel_run(panel, rows, acts, out),
            (Variant::Dot, _, Some(wide)) => wide_tiles(wide, rows, acts, out),
            _ => 0,
        };
        let (acts, out) = (&acts[done..], &mut out[done * n_rows..]);
        if acts.is_empty() {
            return;
        }
        if e.tile.is_some_and(|tile| tile(rows, acts, variant, out)) {
            return;
        }
        // One dot per output: the tier has no kernel for this variant.
        let dot = e.dot_in(order);
        for (a, o) in acts.iter().zip(out.chunks_exact_mut(n_rows)) {
            o.iter_mut().zip(rows).for_each(|(o, row)| *o = dot(row, a));
        }
    }
}

/// The whole [`PANEL_TOKENS`] groups of `n` tokens, and a last partial group where it holds
/// at least `pad` tokens.
fn panel_tokens_padded(n: usize, pad: usize) -> usize {
    let whole = n / PANEL_TOKENS * PANEL_TOKENS;
    if n - whole >= pad {
        n
    } else {
        whole
    }
}

/// Runs `panel` (Q4_0-shaped blocks against Q8_0 activations) over the first
/// [`panel_tokens_padded`] of `acts` and every row, [`PANEL_ROWS`] at a time (the last rows
/// padded with copies whose outputs are dropped), laid out as [`Kernels::dot_tile`] does;
/// returns how many tokens it computed.
fn panel_run(panel: ChainPanel, rows: &[&[u8]], acts: &[ActRow], out: &mut [f32]) -> usize {
    let whole = panel_tokens_padded(acts.len(), panel.pad);
    if whole == 0 {
        return 0;
    }
    let n = acts[0].len() / QK;
    let n_rows = rows.len();
    let mut o = [0f32; PANEL_ROWS * MAX_PANEL_TOKENS];
    let steps = acts[..whole].chunks(MAX_PANEL_TOKENS);
    for (t0, ac) in (0..).step_by(MAX_PANEL_TOKENS).zip(steps) {
        let groups = Q8Group::all(ac, n);
        let groups = &groups[..ac.len().div_ceil(PANEL_TOKENS)];
        let o = &mut o[..ac.len() * PANEL_ROWS];
        for (r0, rc) in (0..).step_by(PANEL_ROWS).zip(rows.chunks(PANEL_ROWS)) {
            let w = std::array::from_fn(|r| checked_blocks(rc[r.min(rc.len() - 1)], n));
            (panel.run)(&w, groups, ac.len(), o);
            for (t, ot) in o.chunks_exact(PANEL_ROWS).enumerate() {
                let at = (t0 + t) * n_rows + r0;
                out[at..at + rc.len()].copy_from_slice(&ot[..rc.len()]);
            }
        }
    }
    whole
}

/// `wide` (of weight blocks `B`) over every row ([`WIDE_ROWS`] at a time, the last padded with copies whose outputs
/// are dropped) and the first whole multiple of [`WIDE_TOKENS`] tokens, then `half` over half
/// a group more where that many are left, laid out as [`Kernels::dot_tile`] does; returns how
/// many tokens it computed. (Four tokens through `half` cost about half what eight through
/// `wide` do, and half what the 2 × 4 tiles took for them.)
pub(super) fn wide_tiles<B: Block>(
    (wide, half): (WideOf<B>, WideOf<B>),
    rows: &[&[u8]],
    acts: &[ActRow],
    out: &mut [f32],
) -> usize {
    const HALF: usize = WIDE_TOKENS / 2;
    let whole = acts.len() / WIDE_TOKENS * WIDE_TOKENS;
    // Then half a group where at least that many tokens are left.
    let done = whole + (acts.len() - whole) / HALF * HALF;
    if done == 0 {
        return 0;
    }
    let n = acts[0].len() / QK;
    let n_rows = rows.len();
    let mut o = [[0f32; WIDE_ROWS]; WIDE_TOKENS];
    for (t0, ac) in (0..)
        .step_by(WIDE_TOKENS)
        .zip(acts[..done].chunks(WIDE_TOKENS))
    {
        // A half group's last half repeats its last token, and is neither read nor written.
        let (kernel, k) = if ac.len() == WIDE_TOKENS {
            (wide, WIDE_TOKENS)
        } else {
            (half, HALF)
        };
        let a = Q8Group::new(ac, n);
        for (r0, rc) in (0..).step_by(WIDE_ROWS).zip(rows.chunks(WIDE_ROWS)) {
            let w = std::array::from_fn(|r| checked_blocks(rc[r.min(rc.len() - 1)], n));
            kernel(&w, &a, &mut o);
            for (t, ot) in o[..k].iter().enumerate() {
                let at = (t0 + t) * n_rows + r0;
                out[at..at + rc.len()].copy_from_slice(&ot[..rc.len()]);
            }
        }
    }
    done
}
