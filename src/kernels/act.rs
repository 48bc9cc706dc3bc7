//! The activation side of a dot product: which activation a weight type's kernels consume
//! ([`ActType`]), an activation row quantized for them ([`ActRow`], [`Q8Row`]), the groups of
//! tokens the panel kernels read ([`Q8Group`]), and the checked views of weight rows and
//! activations the dispatch takes.

use super::blocks::BlockQ8K;
use super::blocks::{self, BlockQ8_0, BlockQ8_1, QK};
use super::{dequantize, ggml_math, half, GgmlType, MAX_PANEL_TOKENS, PANEL_TOKENS};

/// The activation a weight type's dot product consumes (ggml's `vec_dot_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ActType {
    F32,
    /// f16 values (ggml converts the f32 activation of F16 weights to f16 first), held
    /// widened to f32: every f16 is an f32, so the kernels multiply the same values.
    F16,
    /// bf16 values (ggml converts the f32 activation of BF16 weights to bf16), held widened.
    Bf16,
    Q8_0,
    Q8_1,
    Q8K,
}

impl ActType {
    /// Every activation type, in the order batches keep their rows.
    pub const ALL: [ActType; 6] = [
        ActType::F32,
        ActType::F16,
        ActType::Bf16,
        ActType::Q8_0,
        ActType::Q8_1,
        ActType::Q8K,
    ];

    /// The activation of weights of `ty` (the type table's; F32 for a type without kernels).
    pub fn for_weight(ty: GgmlType) -> ActType {
        ty.act().unwrap_or(ActType::F32)
    }

    /// Elements per activation block (a row's length must be a multiple).
    pub fn block(self) -> usize {
        match self {
            ActType::F32 | ActType::F16 | ActType::Bf16 => 1,
            ActType::Q8_0 | ActType::Q8_1 => QK,
            ActType::Q8K => blocks::QK_K,
        }
    }
}

/// An activation row quantized for one weight type's dot product.
#[derive(Clone, Debug)]
pub enum ActRow {
    F32(Vec<f32>),
    /// Each value rounded to f16 (to nearest, ties to even, as ggml's `fp32_to_fp16` row
    /// conversion), held as f32.
    F16(Vec<f32>),
    /// Each value rounded to bf16 (ggml's `ggml_compute_fp32_to_bf16`), held as f32.
    Bf16(Vec<f32>),
    Q8_0(Q8Row),
    Q8_1(Vec<BlockQ8_1>),
    Q8K(Vec<BlockQ8K>),
}

/// An activation row in Q8_0 blocks, with each block's integer sum and f32 scale alongside:
/// the panel kernels read those per token and block, where re-deriving them would cost more
/// than a quarter of their work, once for every step of rows.
#[derive(Clone, Debug, Default)]
pub struct Q8Row {
    pub blocks: Vec<BlockQ8_0>,
    /// Σ qs of each block.
    pub sums: Vec<i32>,
    /// Each block's `d` as f32 (exact: every f16 is an f32).
    pub scales: Vec<f32>,
}

impl Q8Row {
    /// Fills `sums` and `scales` from `blocks`.
    fn derive(&mut self) {
        self.sums.clear();
        self.sums.extend(
            self.blocks
                .iter()
                .map(|b| b.qs.iter().map(|&q| i32::from(q)).sum::<i32>()),
        );
        self.scales.clear();
        self.scales
            .extend(self.blocks.iter().map(|b| blocks::scale(b.d)));
    }
}

impl ActRow {
    /// An empty buffer of the right kind for weights of type `ty`.
    pub fn new_for(ty: GgmlType) -> ActRow {
        ActRow::of(ActType::for_weight(ty))
    }

    /// An empty buffer of activation type `t`.
    pub fn of(t: ActType) -> ActRow {
        match t {
            ActType::F32 => ActRow::F32(Vec::new()),
            ActType::F16 => ActRow::F16(Vec::new()),
            ActType::Bf16 => ActRow::Bf16(Vec::new()),
            ActType::Q8_0 => ActRow::Q8_0(Q8Row::default()),
            ActType::Q8_1 => ActRow::Q8_1(Vec::new()),
            ActType::Q8K => ActRow::Q8K(Vec::new()),
        }
    }

    /// Quantizes `x` into this buffer (resizing it) with the scalar quantizers; `x.len()` must
    /// be a multiple of the activation's block size (32, or 256 for Q8_K; callers check row
    /// lengths when the model is loaded). [`super::Kernels::quantize_act`] does the same with the
    /// table's tier.
    pub fn set(&mut self, x: &[f32]) {
        self.set_with(
            blocks::quantize_act_q8_0,
            blocks::quantize_act_q8_1,
            dequantize::quantize_act_q8_k,
            x,
        )
    }

    pub(super) fn set_with(
        &mut self,
        q8_0: fn(&[f32], &mut [BlockQ8_0]),
        q8_1: fn(&[f32], &mut [BlockQ8_1]),
        q8_k: fn(&[f32], &mut [BlockQ8K]),
        x: &[f32],
    ) {
        match self {
            ActRow::F32(v) => {
                v.clear();
                v.extend_from_slice(x);
            }
            ActRow::F16(v) => {
                v.clear();
                v.extend(x.iter().map(|&f| ggml_math::round_f16(f)));
            }
            ActRow::Bf16(v) => {
                v.clear();
                v.extend(x.iter().map(|&f| half::bf16_to_f32(half::f32_to_bf16(f))));
            }
            ActRow::Q8_0(v) => {
                v.blocks.resize(x.len() / QK, BlockQ8_0::default());
                q8_0(x, &mut v.blocks);
                v.derive();
            }
            ActRow::Q8_1(v) => {
                v.resize(x.len() / QK, BlockQ8_1::default());
                q8_1(x, v);
            }
            ActRow::Q8K(v) => {
                v.resize(x.len() / blocks::QK_K, BlockQ8K::default());
                q8_k(x, v);
            }
        }
    }

    /// Number of activation elements held.
    pub fn len(&self) -> usize {
        match self {
            ActRow::F32(v) | ActRow::F16(v) | ActRow::Bf16(v) => v.len(),
            ActRow::Q8_0(v) => v.blocks.len() * QK,
            ActRow::Q8_1(v) => v.len() * QK,
            ActRow::Q8K(v) => v.len() * blocks::QK_K,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// [`PANEL_TOKENS`] tokens' Q8_0 activations cut to one length: what the panel and wide
/// kernels read. Built once per [`super::Kernels::dot_tile`] call (plain code, outside the
/// `#[target_feature]` kernels, where building arrays of slices would not inline).
#[derive(Clone, Copy)]
pub(crate) struct Q8Group<'a> {
    pub blocks: [&'a [BlockQ8_0]; PANEL_TOKENS],
    pub sums: [&'a [i32]; PANEL_TOKENS],
    pub scales: [&'a [f32]; PANEL_TOKENS],
}

impl<'a> Q8Group<'a> {
    /// The groups of up to [`MAX_PANEL_TOKENS`] tokens `acts` (at least one), each `n` blocks:
    /// group g holds tokens 8g..8g + 8, a last partial group padded with its last token, and
    /// the array's groups past them repeat the last token.
    pub(super) fn all(
        acts: &'a [ActRow],
        n: usize,
    ) -> [Q8Group<'a>; MAX_PANEL_TOKENS / PANEL_TOKENS] {
        std::array::from_fn(|g| Q8Group::new(&acts[(g * PANEL_TOKENS).min(acts.len() - 1)..], n))
    }

    /// The group of `acts` (at least one; past the end the last repeats), each `n` blocks.
    ///
    /// # Panics
    /// If an activation is not Q8_0 of `n` blocks.
    pub(super) fn new(acts: &'a [ActRow], n: usize) -> Q8Group<'a> {
        let row = |t: usize| q8_0_row(&acts[t.min(acts.len() - 1)], n);
        Q8Group {
            blocks: std::array::from_fn(|t| &row(t).blocks[..n]),
            sums: std::array::from_fn(|t| &row(t).sums[..n]),
            scales: std::array::from_fn(|t| &row(t).scales[..n]),
        }
    }
}

/// The blocks of `row`, which must be `n_blocks` whole blocks of `B` (a caller bug otherwise:
/// it panics).
pub(super) fn checked_blocks<B: blocks::Block>(row: &[u8], n_blocks: usize) -> &[B] {
    let b = blocks::as_blocks::<B>(row).expect("weight row is not a whole number of blocks");
    assert_eq!(b.len(), n_blocks, "row length mismatch");
    b
}

/// The Q8_0 row of an activation of `n_blocks` blocks (a caller bug otherwise: it panics).
pub(super) fn q8_0_row(act: &ActRow, n_blocks: usize) -> &Q8Row {
    match act {
        ActRow::Q8_0(a) if a.blocks.len() == n_blocks => a,
        _ => panic!("activation is not Q8_0 of {n_blocks} blocks"),
    }
}

/// Plain numbers every bit pattern of which is a value, read little-endian from a row.
trait LeValue: Copy {
    const SIZE: usize;
    fn from_le(bytes: &[u8]) -> Self;
}

impl LeValue for f32 {
    const SIZE: usize = 4;
    fn from_le(b: &[u8]) -> f32 {
        f32::from_le_bytes(b.try_into().expect("four bytes"))
    }
}

impl LeValue for u16 {
    const SIZE: usize = 2;
    fn from_le(b: &[u8]) -> u16 {
        u16::from_le_bytes(b.try_into().expect("two bytes"))
    }
}

/// A weight row's values, copied only when the bytes are not aligned for `T`.
fn le_values<T: LeValue>(row: &[u8]) -> std::borrow::Cow<'_, [T]> {
    // SAFETY: align_to only yields a middle slice of properly aligned, fully initialised `T`s,
    // and every bit pattern is a valid `T` (`LeValue`: f32 and u16).
    let (pre, mid, post) = unsafe { row.align_to::<T>() };
    if pre.is_empty() && post.is_empty() {
        std::borrow::Cow::Borrowed(mid)
    } else {
        std::borrow::Cow::Owned(row.chunks_exact(T::SIZE).map(T::from_le).collect())
    }
}

/// A weight row of f32 values.
pub(super) fn f32_row(row: &[u8]) -> std::borrow::Cow<'_, [f32]> {
    le_values(row)
}

/// A weight row of f16 or bf16 values (their bits).
pub(super) fn u16_row(row: &[u8]) -> std::borrow::Cow<'_, [u16]> {
    le_values(row)
}
