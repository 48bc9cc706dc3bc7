//! The kernel table's rows: one per weight type with kernels, indexed by the type's ggml id
//! ([`index_of`]), each holding the type's dot products over raw row bytes (its activation type
//! and block geometry are the type table's, [`GgmlType::row`]).
//!
//! A row says which kernels compute a type: the row · activation dot product in each order
//! llama.cpp computes it — the plain `vec_dot` order and, for the types llama.cpp repacks into
//! interleaved 8-row blocks at load on x86, the repacked kernels' order — and a tier's run,
//! tile, panel and packed kernels. Adding a type means adding its block code, its type row and
//! one row here.
//!
//! Every dot product here is the scalar oracle; a tier that has a faster kernel for a type puts
//! its own function in its copy of the row (see [`super::Kernels::for_tier`]), tested against
//! the oracle bit for bit (`tests/kernels_k.rs`; Q4_0, Q4_1, Q8_0 and the float types, whose
//! rows `legacy_rows.rs` makes, against `scalar.rs` in `tests/kernels.rs`), and its many-output
//! kernels in the row's optional members, which `Kernels::gemv` and `Kernels::dot_tile` take
//! for decode's runs of rows and for prompt tiles.

use super::blocks::{Block, BlockQ8_0, BlockQ8_1};
use super::blocks::{BlockIq1M, BlockIq1S, BlockMxfp4};
use super::blocks::{
    BlockIq2S, BlockIq2Xs, BlockIq2Xxs, BlockIq3S, BlockIq3Xxs, BlockIq4Nl, BlockIq4Xs, BlockQ2K,
    BlockQ3K, BlockQ4K, BlockQ5K, BlockQ5_0, BlockQ5_1, BlockQ6K, BlockQ8K,
};
use super::{
    legacy_rows, oracle_iq1, oracle_mxfp4, oracle_repacked, oracle_tiled, oracle_vec_dot, ActRow,
    GgmlType, SumOrder,
};

/// A row · activation dot product over the row's bytes. The activation must be of the row's
/// [`ActType`] and length (callers check row lengths when a model is loaded; a mismatch here
/// is a bug and panics).
pub type RowDot = fn(&[u8], &ActRow) -> f32;

/// Which of an [`Entry`]'s dot products a [`SumOrder`] takes ([`Entry::variant`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Variant {
    /// `dot`: ggml's `vec_dot` order.
    Dot,
    /// `dot_repacked`: the repacked gemv's order.
    Repacked,
    /// `dot_repacked_gemm`: the repacked gemm's order.
    RepackedGemm,
    /// `dot_batch`: tinyBLAS's or the tiled K-quant matmul's order.
    Batch,
}

/// A tier's many-output kernel for one type: `out[t * rows.len() + r]` is the dot product of
/// `variant` of `rows[r]` with `acts[t]`, bit for bit as the row's single dot gives it. It
/// returns `false`, having written nothing, for a variant it has no kernel for (the caller then
/// takes one dot per output). Rows must be whole blocks of the activations' length.
pub type TileDot = fn(rows: &[&[u8]], acts: &[ActRow], variant: Variant, out: &mut [f32]) -> bool;

/// A tier's single-token kernel over one packed group of [`PACK_ROWS`](super::PACK_ROWS) rows
/// (`kernels::pack`): `out[r]` is row r's dot product with the activation, bit for bit as the
/// row's single dot in the entry's `variant` gives it.
pub type PackedGemv = fn(group: &[u8], act: &[BlockQ8K], out: &mut [f32]);

/// [`PackedGemv`] of several tokens at once: `out[t * 16 + r]` is row r against `acts[t]`, each
/// bit for bit as the single token's.
pub type PackedGemvTokens = fn(group: &[u8], acts: &[&[BlockQ8K]], out: &mut [f32]);

/// A tier's many-token kernel over `g` packed groups back to back in `groups`:
/// `out[t * 16g + 16j + r]` is row r of group j against `acts[t]` in `variant`'s order, bit for
/// bit; `false`, having written nothing, for a variant it has no kernel for.
pub type PackedTile =
    fn(super::Layout, groups: &[u8], acts: &[ActRow], variant: Variant, out: &mut [f32]) -> bool;

/// A packed layout a tier reads faster than the file's rows for single tokens: placement packs
/// copies into it where decode sums in `variant`. Prompts read it through `tile` where the
/// tier has one, else from the group unpacked.
#[derive(Clone, Copy)]
pub struct Packed {
    pub layout: super::Layout,
    pub variant: Variant,
    pub gemv: PackedGemv,
    /// The single-token kernel over several tokens at once (each step unpacked once), where
    /// the tier has one.
    pub gemv_tokens: Option<PackedGemvTokens>,
    pub tile: Option<PackedTile>,
}

/// One weight type's kernels.
#[derive(Clone, Copy)]
pub struct Entry {
    /// The weight type this row is for.
    pub ty: GgmlType,
    /// The dot product in ggml's `vec_dot` order.
    pub dot: RowDot,
    /// The dot product in the order of llama.cpp's repacked gemv, for the types it repacks
    /// (matmul weights whose row count is a multiple of 8).
    pub dot_repacked: Option<RowDot>,
    /// The repacked gemm's order, where it differs from the gemv's (the first `m − m mod 4`
    /// tokens of a matmul over `m` take the gemm: [`oracle_repacked::gemm_tokens`]).
    pub dot_repacked_gemm: Option<RowDot>,
    /// The order of the kernel llama.cpp runs for a matmul over at least `batch_min` tokens of
    /// weights it did not repack (tinyBLAS, its tiled K-quant matmul), where it differs from
    /// `vec_dot`'s.
    pub dot_batch: Option<RowDot>,
    /// Tokens from which llama.cpp takes `dot_batch`'s kernel (2 for tinyBLAS, 8 for the tiled
    /// matmul; `usize::MAX` where there is none).
    pub batch_min: usize,
    /// The tier's kernel over many rows and tokens at once (decode's runs of rows, prompt
    /// tiles), where it has one.
    pub tile: Option<TileDot>,
    /// The tier's packed layout and its single-token kernel, where it has one.
    pub packed: Option<Packed>,
    /// Whether the batched order is the matrix's to choose: llama.cpp gives f32 weights
    /// tinyBLAS only where their shape allows it ([`SumOrder::f32_order`], a base order of
    /// `Batched`); the other types take `dot_batch` from `batch_min` tokens whatever their base.
    pub batch_by_matrix: bool,
    /// The tier's kernel over a run of rows back to back against one token (decode's
    /// matrix-vector product), where it has one: `Kernels::gemv` takes it before `tile`.
    pub(super) run: Option<RunDot>,
    /// The tier's block-chain panel over rows of Q4_0-shaped blocks (Q4_0, and IQ4_NL with its
    /// value table) for whole groups of tokens in the repacked order, before `tile`.
    pub(super) panel: Option<ChainPanel>,
    /// The tier's wide tiles for `vec_dot`'s order (over a group of
    /// [`WIDE_TOKENS`](super::WIDE_TOKENS) tokens and over its first half), before `tile`.
    pub(super) wide: Option<(super::Wide, super::Wide)>,
    /// The tier's block-chain packed layout (sixteen rows of Q4_0-shaped blocks per step) with
    /// its single-token kernel and steps panel, where it has one.
    pub(super) chain_packed: Option<ChainPacked>,
}

/// A row's kernel over `out.len()` rows back to back in `rows` against one activation, in
/// `variant`'s order, bit for bit as the single dot gives it; `false`, having written nothing,
/// where it declines (the caller then takes the tile or one dot per row).
pub(super) type RunDot = fn(rows: &[u8], act: &ActRow, variant: Variant, out: &mut [f32]) -> bool;

/// A block-chain panel and the fewest tokens past the last whole
/// [`PANEL_TOKENS`](super::PANEL_TOKENS) group it takes in a padded group rather than leave to
/// the tiles (above `PANEL_TOKENS - 1`: never).
#[derive(Clone, Copy)]
pub(super) struct ChainPanel {
    pub run: super::Panel,
    pub pad: usize,
}

/// A block-chain packed layout ([`Layout::Q4_0x16`](super::Layout::Q4_0x16),
/// [`Layout::Iq4NlX16`](super::Layout::Iq4NlX16)) and the tier's kernels over one group of it:
/// the single-token kernel and the steps panel for several tokens. A table with them asks for
/// packed copies ([`Kernels::preferred_layout`](super::Kernels::preferred_layout)).
#[derive(Clone, Copy)]
pub(super) struct ChainPacked {
    pub layout: super::Layout,
    pub gemv: super::PackedGemv,
    pub steps: super::packed_steps::StepsPanel,
}

impl Entry {
    /// The row of a type with one dot product, in `vec_dot`'s order, and no tier kernels: what
    /// every row starts from.
    pub const fn of(ty: GgmlType, dot: RowDot) -> Entry {
        Entry {
            ty,
            dot,
            dot_repacked: None,
            dot_repacked_gemm: None,
            dot_batch: None,
            batch_min: usize::MAX,
            tile: None,
            packed: None,
            batch_by_matrix: false,
            run: None,
            panel: None,
            wide: None,
            chain_packed: None,
        }
    }

    /// Which dot product `order` takes: the one it names where the type has it, else the
    /// repacked gemv's (for the gemm) or `vec_dot`'s.
    #[inline]
    pub fn variant(&self, order: SumOrder) -> Variant {
        let repacked = match self.dot_repacked {
            Some(_) => Variant::Repacked,
            None => Variant::Dot,
        };
        match order {
            SumOrder::Lanes => Variant::Dot,
            SumOrder::Batched if self.dot_batch.is_some() => Variant::Batch,
            SumOrder::Batched => Variant::Dot,
            SumOrder::BlockChain => repacked,
            SumOrder::RepackedGemm if self.dot_repacked_gemm.is_some() => Variant::RepackedGemm,
            SumOrder::RepackedGemm => repacked,
        }
    }

    /// The dot product for `order` (see [`SumOrder`]).
    #[inline]
    pub fn dot_in(&self, order: SumOrder) -> RowDot {
        let pick = |f: Option<RowDot>| f.expect("variant() picks only dot products the row has");
        match self.variant(order) {
            Variant::Dot => self.dot,
            Variant::Repacked => pick(self.dot_repacked),
            Variant::RepackedGemm => pick(self.dot_repacked_gemm),
            Variant::Batch => pick(self.dot_batch),
        }
    }

    /// The order of output `i` of a matmul over `m` tokens, for weights stored as `base` says
    /// ([`SumOrder::BlockChain`]: llama.cpp repacked them; [`SumOrder::Lanes`]: it did not).
    #[inline]
    pub fn order_for(&self, base: SumOrder, m: usize, i: usize) -> SumOrder {
        match base {
            SumOrder::BlockChain | SumOrder::RepackedGemm => {
                if self.dot_repacked_gemm.is_some() && i < oracle_repacked::gemm_tokens(m) {
                    SumOrder::RepackedGemm
                } else {
                    SumOrder::BlockChain
                }
            }
            SumOrder::Lanes | SumOrder::Batched => {
                let allowed = !self.batch_by_matrix || base == SumOrder::Batched;
                if self.dot_batch.is_some() && allowed && m >= self.batch_min {
                    SumOrder::Batched
                } else {
                    SumOrder::Lanes
                }
            }
        }
    }
}

/// The weight blocks of `row`, which must be `n` whole blocks.
pub(crate) fn weights<B: Block>(row: &[u8], n: usize) -> &[B] {
    let b = super::blocks::as_blocks::<B>(row).expect("weight row is not a whole number of blocks");
    assert_eq!(b.len(), n, "row length mismatch");
    b
}

/// The Q8_0 blocks of an activation (a caller bug otherwise: it panics).
pub(crate) fn q8_0(act: &ActRow) -> &[BlockQ8_0] {
    match act {
        ActRow::Q8_0(a) => &a.blocks,
        _ => panic!("activation is not Q8_0"),
    }
}

/// The Q8_1 blocks of an activation (a caller bug otherwise: it panics).
pub(crate) fn q8_1(act: &ActRow) -> &[BlockQ8_1] {
    match act {
        ActRow::Q8_1(a) => a,
        _ => panic!("activation is not Q8_1"),
    }
}

/// The Q8_K blocks of an activation (a caller bug otherwise: it panics).
pub(crate) fn q8_k(act: &ActRow) -> &[BlockQ8K] {
    match act {
        ActRow::Q8K(a) => a,
        _ => panic!("activation is not Q8_K"),
    }
}

/// A [`RowDot`] from a dot product over blocks: the weight block type, the activation getter.
macro_rules! row_dot {
    ($f:path, $w:ty, $get:ident) => {
        |row: &[u8], act: &$crate::kernels::ActRow| {
            let a = $crate::kernels::entries::$get(act);
            $f($crate::kernels::entries::weights::<$w>(row, a.len()), a)
        }
    };
}
pub(crate) use row_dot;

/// A row of the tiled K-quant matmul's types over Q8_K activations: its block, the `vec_dot`
/// oracle and, for matmuls over [`oracle_tiled::TILED_MIN_TOKENS`] tokens or more, the tiled one;
/// for the types llama.cpp repacks (Q2_K, Q4_K), the repacked gemv's and gemm's oracles.
macro_rules! tiled_row {
    ($ty:ident, $b:ty, $dot:path, $tiled:path $(, repacked $gemv:path, $gemm:path)?) => {
        Entry {
            $(
                dot_repacked: Some(row_dot!($gemv, $b, q8_k)),
                dot_repacked_gemm: Some(row_dot!($gemm, $b, q8_k)),
            )?
            dot_batch: Some(row_dot!($tiled, $b, q8_k)),
            batch_min: oracle_tiled::TILED_MIN_TOKENS,
            ..Entry::of(GgmlType::$ty, row_dot!($dot, $b, q8_k))
        }
    };
}

/// The oracle rows, one per weight type with kernels.
pub const SCALAR: [Entry; 23] = [
    legacy_rows::Q4_0_SCALAR,
    legacy_rows::Q4_1_SCALAR,
    legacy_rows::Q8_0_SCALAR,
    legacy_rows::FLOATS_SCALAR[0],
    legacy_rows::FLOATS_SCALAR[1],
    legacy_rows::FLOATS_SCALAR[2],
    Entry::of(
        GgmlType::Q5_0,
        row_dot!(oracle_vec_dot::dot_q5_0_q8_0, BlockQ5_0, q8_0),
    ),
    Entry::of(
        GgmlType::Q5_1,
        row_dot!(oracle_vec_dot::dot_q5_1_q8_1, BlockQ5_1, q8_1),
    ),
    Entry {
        dot_repacked: Some(row_dot!(
            oracle_repacked::dot_iq4_nl_q8_0_repacked,
            BlockIq4Nl,
            q8_0
        )),
        // tinyBLAS, for every matmul over two tokens or more.
        dot_batch: Some(row_dot!(
            oracle_vec_dot::dot_iq4_nl_q8_0_tinyblas,
            BlockIq4Nl,
            q8_0
        )),
        batch_min: 2,
        ..Entry::of(
            GgmlType::Iq4Nl,
            row_dot!(oracle_vec_dot::dot_iq4_nl_q8_0, BlockIq4Nl, q8_0),
        )
    },
    // llama.cpp repacks MXFP4 as IQ4_NL (matmul and expert weights of 8k rows); tinyBLAS has
    // no MXFP4, so its other matmuls take `vec_dot` whatever the batch.
    Entry {
        dot_repacked: Some(row_dot!(
            oracle_mxfp4::dot_mxfp4_q8_0_repacked,
            BlockMxfp4,
            q8_0
        )),
        ..Entry::of(
            GgmlType::Mxfp4,
            row_dot!(oracle_mxfp4::dot_mxfp4_q8_0, BlockMxfp4, q8_0),
        )
    },
    tiled_row! { Q2K, BlockQ2K, oracle_vec_dot::dot_q2_k_q8_k, oracle_tiled::dot_q2_k_q8_k_tiled,
    repacked oracle_repacked::dot_q2_k_q8_k_repacked, oracle_repacked::dot_q2_k_q8_k_repacked_gemm },
    tiled_row! { Q3K, BlockQ3K, oracle_vec_dot::dot_q3_k_q8_k, oracle_tiled::dot_q3_k_q8_k_tiled },
    tiled_row! { Q4K, BlockQ4K, oracle_vec_dot::dot_q4_k_q8_k, oracle_tiled::dot_q4_k_q8_k_tiled,
    repacked oracle_repacked::dot_q4_k_q8_k_repacked, oracle_repacked::dot_q4_k_q8_k_repacked_gemm },
    tiled_row! { Q5K, BlockQ5K, oracle_vec_dot::dot_q5_k_q8_k, oracle_tiled::dot_q5_k_q8_k_tiled },
    tiled_row! { Q6K, BlockQ6K, oracle_vec_dot::dot_q6_k_q8_k, oracle_tiled::dot_q6_k_q8_k_tiled },
    tiled_row! { Iq4Xs, BlockIq4Xs, oracle_vec_dot::dot_iq4_xs_q8_k, oracle_tiled::dot_iq4_xs_q8_k_tiled },
    tiled_row! { Iq3Xxs, BlockIq3Xxs, oracle_vec_dot::dot_iq_grid_q8_k::<BlockIq3Xxs>,
    oracle_tiled::dot_iq_grid_q8_k_tiled::<BlockIq3Xxs> },
    tiled_row! { Iq3S, BlockIq3S, oracle_vec_dot::dot_iq_grid_q8_k::<BlockIq3S>,
    oracle_tiled::dot_iq_grid_q8_k_tiled::<BlockIq3S> },
    tiled_row! { Iq2Xxs, BlockIq2Xxs, oracle_vec_dot::dot_iq_grid_q8_k::<BlockIq2Xxs>,
    oracle_tiled::dot_iq_grid_q8_k_tiled::<BlockIq2Xxs> },
    tiled_row! { Iq2Xs, BlockIq2Xs, oracle_vec_dot::dot_iq_grid_q8_k::<BlockIq2Xs>,
    oracle_tiled::dot_iq_grid_q8_k_tiled::<BlockIq2Xs> },
    tiled_row! { Iq2S, BlockIq2S, oracle_vec_dot::dot_iq_grid_q8_k::<BlockIq2S>,
    oracle_tiled::dot_iq_grid_q8_k_tiled::<BlockIq2S> },
    tiled_row! { Iq1S, BlockIq1S, oracle_iq1::dot_iq1_s_q8_k,
    oracle_tiled::dot_iq1_q8_k_tiled::<BlockIq1S> },
    tiled_row! { Iq1M, BlockIq1M, oracle_iq1::dot_iq1_m_q8_k,
    oracle_tiled::dot_iq1_q8_k_tiled::<BlockIq1M> },
];

/// Marks an id of [`INDEX`] that has no row.
const NO_ROW: u8 = u8::MAX;

/// Where each type's row sits in [`SCALAR`] (and in every tier's copy of it, which keeps its
/// order), by ggml id: looked up, not searched, on every dot product.
const INDEX: [u8; 64] = {
    let mut index = [NO_ROW; 64];
    let mut i = 0;
    while i < SCALAR.len() {
        index[SCALAR[i].ty as usize] = i as u8;
        i += 1;
    }
    index
};

/// The position of `ty`'s row in a table of rows ordered as [`SCALAR`], if it has kernels.
#[inline]
pub fn index_of(ty: GgmlType) -> Option<usize> {
    match INDEX[ty as usize] {
        NO_ROW => None,
        i => Some(usize::from(i)),
    }
}

/// The oracle row for `ty`, if it has kernels.
pub fn scalar_entry(ty: GgmlType) -> Option<&'static Entry> {
    index_of(ty).map(|i| &SCALAR[i])
}
