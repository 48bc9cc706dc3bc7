//! The type table's rows for Q4_0, Q4_1, Q8_0 and the float types F32, F16 and BF16, whose
//! tier kernels take typed blocks or values (`scalar.rs`, `x86_64/avx2.rs`, `x86_64/avx512.rs`)
//! rather than a row's bytes: small adapters make them a row's plain function pointers.
//!
//! Each tier's kernels for one type in one order are a marker type ([`Blocks`], [`Floats`]); the
//! adapters are generic over the markers, so each instance is a monomorphic function whose
//! kernels are constants, called directly: a row costs one indirect call per dot, run of rows or
//! tile, as the named fields it replaces did, and nothing per block.
//!
//! - decode's run of rows ([`Entry::run`]): the tier's single-token panel first where it has one
//!   (block-chain Q4_0: sixteen rows in the lanes of one vector on AVX-512, eight on AVX2), then
//!   [`TILE_ROWS`] rows per call of its single-token kernel, straight from the bytes (the last
//!   call padded with copies of the last row, whose outputs are dropped);
//! - prompt tiles ([`Entry::tile`]): whole [`BATCH_TILE_ROWS`] × [`TILE_TOKENS`] tiles, the
//!   tokens left over one at a time through the single-token kernel, a tile's edge rows by the
//!   single dot. The block-chain panels and the wide Q8_0 tiles sit in the row beside them
//!   ([`Entry::panel`], [`Entry::wide`]) and take whole groups of tokens first.

use super::blocks::{Block, BlockQ4_0, BlockQ4_1, BlockQ8_0, BlockQ8_1};
use super::entries::{self, Entry, Variant};
use super::{
    checked_blocks, f32_row, ggml_math, q8_0_row, scalar, u16_row, ActRow, GgmlType, Q8Row,
    BATCH_TILE_ROWS, TILE_ROWS, TILE_TOKENS,
};

/// A tiled kernel: `out[t][r] = dot(w[r], a[t])`, every row and activation of one length.
pub(super) type Tile<W, A> = fn(&[&[W]; BATCH_TILE_ROWS], &[&[A]; TILE_TOKENS], &mut TileOut);
/// A tile's outputs, token-major.
pub(super) type TileOut = [[f32; BATCH_TILE_ROWS]; TILE_TOKENS];
/// One row's dot product over its blocks.
pub(super) type Dot<W, A> = fn(&[W], &[A]) -> f32;
/// A single-token kernel: `out[r] = dot(w[r], a)` for [`TILE_ROWS`] rows of one length.
pub(super) type Rows<W, A> = fn(&[&[W]; TILE_ROWS], &[A], &mut [f32; TILE_ROWS]);

/// A single-token panel: `out[r] = dot(row r, a)` for `rows` rows held back to back
/// (`out.len() == rows`).
#[derive(Clone, Copy)]
pub(super) struct GemvPanel<W> {
    rows: usize,
    run: fn(&[W], &Q8Row, &mut [f32]),
}

/// One tier's kernels for one block type in one order.
pub(super) trait Blocks {
    /// The weight block.
    type W: Block;
    /// The activation block.
    type A: 'static;
    /// The activation's blocks (a caller bug otherwise: it panics).
    fn act(a: &ActRow) -> &[Self::A];
    /// One row's dot product.
    const DOT: Dot<Self::W, Self::A>;
    /// [`TILE_ROWS`] rows against one token.
    const ROWS: Rows<Self::W, Self::A>;
    /// A whole tile of rows and tokens.
    const TILE: Tile<Self::W, Self::A>;
    /// A single-token panel that decode's runs of rows take first, where the tier has one.
    const GEMV: Option<GemvPanel<Self::W>> = None;
}

/// A marker type for one tier's [`Blocks`]: weight and activation blocks, the activation's
/// getter in [`entries`], then the dot, single-token and tile kernels and an optional panel.
macro_rules! blocks {
    ($name:ident: $w:ty, $a:ty, $act:ident; $dot:path, $rows:path, $tile:path $(; $gemv:expr)?) => {
        pub(super) struct $name;
        impl Blocks for $name {
            type W = $w;
            type A = $a;
            fn act(a: &ActRow) -> &[$a] {
                entries::$act(a)
            }
            const DOT: Dot<$w, $a> = $dot;
            const ROWS: Rows<$w, $a> = $rows;
            const TILE: Tile<$w, $a> = $tile;
            $(const GEMV: Option<GemvPanel<$w>> = Some($gemv);)?
        }
    };
}

/// The markers of one tier's block kernels ([`Blocks`]): Q4_0 in `vec_dot`'s order and in the
/// block chain's (with the single-token panel, where the tier has one), Q4_1 and Q8_0; the single
/// dots from module `$dot`, the single-token and tile kernels from module `$k`.
macro_rules! tier_blocks {
    ([$q4_0:ident, $chain:ident, $q4_1:ident, $q8_0:ident], $dot:ident, $k:ident $(, $gemv:expr)?) => {
        blocks!($q4_0: BlockQ4_0, BlockQ8_0, q8_0;
            $dot::dot_q4_0_q8_0, $k::rows_q4_0_q8_0, $k::tile_q4_0_q8_0);
        blocks!($chain: BlockQ4_0, BlockQ8_0, q8_0;
            $dot::dot_q4_0_q8_0_chain, $k::rows_q4_0_q8_0_chain, $k::tile_q4_0_q8_0_chain
            $(; $gemv)?);
        blocks!($q4_1: BlockQ4_1, BlockQ8_1, q8_1;
            $dot::dot_q4_1_q8_1, $k::rows_q4_1_q8_1, $k::tile_q4_1_q8_1);
        blocks!($q8_0: BlockQ8_0, BlockQ8_0, q8_0;
            $dot::dot_q8_0_q8_0, $k::rows_q8_0_q8_0, $k::tile_q8_0_q8_0);
    };
}

/// One tier's dot products of the float types.
pub(super) trait Floats {
    /// `ggml_vec_dot_f32`'s order.
    const F32: fn(&[f32], &[f32]) -> f32;
    /// tinyBLAS's order, as the attention's batched rows ([`super::Kernels::att_dot_batch_rows`]).
    const F32_GEMM_ROWS: fn(&[f32], usize, &[f32], &mut [f32]);
    /// `ggml_vec_dot_f16`'s order over f16 weights and an f16 activation (widened), with
    /// ggml's padded length as the last argument (a row's own length here).
    const F16: fn(&[u16], &[f32], usize) -> f32;
    /// [`Floats::F16`] of rows `x[r * stride..][..y.len()]` into `out[r]`.
    const F16_ROWS: fn(&[u16], usize, &[f32], usize, &mut [f32]);
    /// tinyBLAS's f16 order (the AVX-512 instance's one 16-lane accumulator, then reduced).
    const F16_GEMM: fn(&[u16], &[f32]) -> f32;
    /// `ggml_vec_dot_bf16`'s order (AVX512_BF16) over bf16 weights and a bf16 activation.
    const BF16: fn(&[u16], &[f32]) -> f32;
    /// tinyBLAS's bf16 order (its AVX512_BF16 instance).
    const BF16_GEMM: fn(&[u16], &[f32]) -> f32;
}

/// `K`'s dot product as a row's.
fn dot<K: Blocks>(row: &[u8], act: &ActRow) -> f32 {
    let a = K::act(act);
    (K::DOT)(checked_blocks(row, a.len()), a)
}

/// The activation's blocks, which must be `n` (a caller bug otherwise: it panics).
fn act_of<K: Blocks>(act: &ActRow, n: usize) -> &[K::A] {
    let a = K::act(act);
    assert_eq!(a.len(), n, "activation is not of {n} blocks");
    a
}

/// A row's [`entries::RunDot`] from its kernels in `vec_dot`'s order (`D`) and the repacked
/// order (`C`; `D` again for a type with one order).
fn run<D: Blocks, C: Blocks<W = D::W, A = D::A>>(
    rows: &[u8],
    act: &ActRow,
    variant: Variant,
    out: &mut [f32],
) -> bool {
    match variant {
        Variant::Repacked => run_with::<C>(rows, act, out),
        _ => run_with::<D>(rows, act, out),
    }
}

/// `out[r] = dot(row r, act)` for `out.len()` rows back to back in `rows`: `K`'s single-token
/// panel over its whole runs where it has one, then its single-token kernel.
fn run_with<K: Blocks>(rows: &[u8], act: &ActRow, out: &mut [f32]) -> bool {
    let a = K::act(act);
    let (n, k) = (a.len(), out.len());
    if n == 0 {
        return false;
    }
    let w = checked_blocks::<K::W>(rows, n * k);
    let mut done = 0;
    if let Some(p) = K::GEMV {
        let a = q8_0_row(act, n);
        done = k / p.rows * p.rows;
        for (wg, o) in w.chunks_exact(p.rows * n).zip(out.chunks_exact_mut(p.rows)) {
            (p.run)(wg, a, o);
        }
    }
    rows_run(K::ROWS, &w[done * n..], a, &mut out[done..]);
    true
}

/// Runs a single-token kernel over `out.len()` rows of `a.len()` blocks each, held back to
/// back in `w`, [`TILE_ROWS`] rows per call; the last group is padded with copies of its last
/// row, whose outputs are dropped.
fn rows_run<W, A>(kernel: Rows<W, A>, w: &[W], a: &[A], out: &mut [f32]) {
    let n = a.len();
    debug_assert_eq!(w.len(), n * out.len());
    let mut outs = out.chunks_exact_mut(TILE_ROWS);
    for (wg, o) in w.chunks_exact(TILE_ROWS * n).zip(outs.by_ref()) {
        let rows: [&[W]; TILE_ROWS] = std::array::from_fn(|r| &wg[r * n..(r + 1) * n]);
        kernel(&rows, a, o.try_into().expect("a whole group of rows"));
    }
    let tail = outs.into_remainder();
    if let Some(last) = tail.len().checked_sub(1) {
        let wt = &w[w.len() - tail.len() * n..];
        let rows: [&[W]; TILE_ROWS] = std::array::from_fn(|r| &wt[r.min(last) * n..][..n]);
        let mut col = [0f32; TILE_ROWS];
        kernel(&rows, a, &mut col);
        tail.copy_from_slice(&col[..tail.len()]);
    }
}

/// A row's [`entries::TileDot`] from its kernels in the two orders, as [`run`].
fn tile<D: Blocks, C: Blocks<W = D::W, A = D::A>>(
    rows: &[&[u8]],
    acts: &[ActRow],
    variant: Variant,
    out: &mut [f32],
) -> bool {
    match variant {
        Variant::Repacked => tile_with::<C>(rows, acts, out),
        _ => tile_with::<D>(rows, acts, out),
    }
    true
}

/// `out[t * rows.len() + r] = dot(rows[r], acts[t])`: whole tiles through `K`'s tile kernel,
/// the tokens past the last whole [`TILE_TOKENS`] one at a time through its single-token
/// kernel ([`TILE_ROWS`] rows per pass, the last padded), a tile's edge rows by the dot.
fn tile_with<K: Blocks>(rows: &[&[u8]], acts: &[ActRow], out: &mut [f32]) {
    let n_rows = rows.len();
    let whole = acts.len() / TILE_TOKENS * TILE_TOKENS;
    let (tiled, single) = acts.split_at(whole);
    let mut tile = [[0f32; BATCH_TILE_ROWS]; TILE_TOKENS];
    for (r0, rc) in (0..)
        .step_by(BATCH_TILE_ROWS)
        .zip(rows.chunks(BATCH_TILE_ROWS))
    {
        for (t0, ac) in (0..).step_by(TILE_TOKENS).zip(tiled.chunks(TILE_TOKENS)) {
            let (Ok(rc), Ok(ac)) = (
                <&[&[u8]; BATCH_TILE_ROWS]>::try_from(rc),
                <&[ActRow; TILE_TOKENS]>::try_from(ac),
            ) else {
                for (t, a) in ac.iter().enumerate() {
                    for (r, row) in rc.iter().enumerate() {
                        out[(t0 + t) * n_rows + r0 + r] = dot::<K>(row, a);
                    }
                }
                continue;
            };
            let n = K::act(&ac[0]).len();
            (K::TILE)(
                &rc.map(|r| checked_blocks(r, n)),
                &ac.each_ref().map(|a| act_of::<K>(a, n)),
                &mut tile,
            );
            for (t, o) in tile.iter().enumerate() {
                let at = (t0 + t) * n_rows + r0;
                out[at..at + BATCH_TILE_ROWS].copy_from_slice(o);
            }
        }
    }
    let mut col = [0f32; TILE_ROWS];
    for (t, a) in (whole..).zip(single) {
        let a = K::act(a);
        let n = a.len();
        for (r0, rc) in (0..).step_by(TILE_ROWS).zip(rows.chunks(TILE_ROWS)) {
            let w = std::array::from_fn(|r| checked_blocks(rc[r.min(rc.len() - 1)], n));
            (K::ROWS)(&w, a, &mut col);
            let at = t * n_rows + r0;
            out[at..at + rc.len()].copy_from_slice(&col[..rc.len()]);
        }
    }
}

/// Q4_0's row from its kernels in `vec_dot`'s order (`D`) and the block chain's (`C`).
const fn q4_0<D, C>() -> Entry
where
    D: Blocks<W = BlockQ4_0, A = BlockQ8_0>,
    C: Blocks<W = BlockQ4_0, A = BlockQ8_0>,
{
    Entry {
        dot_repacked: Some(dot::<C>),
        run: Some(run::<D, C>),
        tile: Some(tile::<D, C>),
        ..Entry::of(GgmlType::Q4_0, dot::<D>)
    }
}

/// The row of a block type with one order (Q4_1, Q8_0) from its kernels `K`.
const fn one_order<K: Blocks>(ty: GgmlType) -> Entry {
    Entry {
        run: Some(run::<K, K>),
        tile: Some(tile::<K, K>),
        ..Entry::of(ty, dot::<K>)
    }
}

/// The weights of `row` as `values` reads them (f32, or f16/bf16 bits) and the F32
/// activation, of one length (a caller bug otherwise: it panics).
fn float_args<'a, T: Clone>(
    values: fn(&'a [u8]) -> std::borrow::Cow<'a, [T]>,
    row: &'a [u8],
    act: &'a ActRow,
) -> (std::borrow::Cow<'a, [T]>, &'a [f32]) {
    let ActRow::F32(a) = act else {
        panic!("activation is not F32")
    };
    let w = values(row);
    assert_eq!(w.len(), a.len(), "row length mismatch");
    (w, a)
}

fn dot_f32<T: Floats>(row: &[u8], act: &ActRow) -> f32 {
    let (w, a) = float_args(f32_row, row, act);
    (T::F32)(&w, a)
}

/// tinyBLAS (see [`super::SumOrder::f32_order`]): one 16-lane accumulator, then reduced.
fn dot_f32_tinyblas<T: Floats>(row: &[u8], act: &ActRow) -> f32 {
    let (w, a) = float_args(f32_row, row, act);
    let mut o = [0f32];
    (T::F32_GEMM_ROWS)(&w, w.len(), a, &mut o);
    o[0]
}

/// The f16 weights of `row` and the F16 activation, of one length (a caller bug otherwise: it
/// panics).
fn f16_args<'a>(row: &'a [u8], act: &'a ActRow) -> (std::borrow::Cow<'a, [u16]>, &'a [f32]) {
    let ActRow::F16(a) = act else {
        panic!("activation is not F16")
    };
    let w = u16_row(row);
    assert_eq!(w.len(), a.len(), "row length mismatch");
    (w, a)
}

/// `ggml_vec_dot_f16` (llama.cpp's matmul of F16 weights where tinyBLAS declines: one token,
/// or a shape it does not take), its padded length the row's own.
fn dot_f16<T: Floats>(row: &[u8], act: &ActRow) -> f32 {
    let (w, a) = f16_args(row, act);
    (T::F16)(&w, a, a.len())
}

/// tinyBLAS's f16 × f16 matmul (see [`super::SumOrder::f32_order`]: on AVX-512 it is the f32
/// instance's template, converting each 16 values to f32 before its multiply-adds).
fn dot_f16_tinyblas<T: Floats>(row: &[u8], act: &ActRow) -> f32 {
    let (w, a) = f16_args(row, act);
    (T::F16_GEMM)(&w, a)
}

/// Decode's run of F16 rows back to back in `vec_dot`'s order; declines the other orders.
fn run_f16<T: Floats>(rows: &[u8], act: &ActRow, variant: Variant, out: &mut [f32]) -> bool {
    let ActRow::F16(a) = act else {
        return false;
    };
    let n = a.len();
    let w = u16_row(rows);
    if variant != Variant::Dot || w.len() != n * out.len() {
        return false;
    }
    (T::F16_ROWS)(&w, n, a, n, out);
    true
}

/// The bf16 weights of `row` and the BF16 activation, of one length (a caller bug otherwise:
/// it panics).
fn bf16_args<'a>(row: &'a [u8], act: &'a ActRow) -> (std::borrow::Cow<'a, [u16]>, &'a [f32]) {
    let ActRow::Bf16(a) = act else {
        panic!("activation is not BF16")
    };
    let w = u16_row(row);
    assert_eq!(w.len(), a.len(), "row length mismatch");
    (w, a)
}

/// `ggml_vec_dot_bf16` (one token, or a shape tinyBLAS declines).
fn dot_bf16<T: Floats>(row: &[u8], act: &ActRow) -> f32 {
    let (w, a) = bf16_args(row, act);
    (T::BF16)(&w, a)
}

/// tinyBLAS's bf16 × bf16 matmul (see [`super::SumOrder::bf16_order`]).
fn dot_bf16_tinyblas<T: Floats>(row: &[u8], act: &ActRow) -> f32 {
    let (w, a) = bf16_args(row, act);
    (T::BF16_GEMM)(&w, a)
}

/// The float types' rows from a tier's [`Floats`]: F32 and F16 in `vec_dot`'s order and, for a
/// matrix tinyBLAS takes in a matmul over two tokens or more, in its order.
const fn floats<T: Floats>() -> [Entry; 3] {
    [
        Entry {
            dot_batch: Some(dot_f32_tinyblas::<T>),
            batch_min: 2,
            batch_by_matrix: true,
            ..Entry::of(GgmlType::F32, dot_f32::<T>)
        },
        Entry {
            dot_batch: Some(dot_f16_tinyblas::<T>),
            batch_min: 2,
            batch_by_matrix: true,
            run: Some(run_f16::<T>),
            ..Entry::of(GgmlType::F16, dot_f16::<T>)
        },
        Entry {
            dot_batch: Some(dot_bf16_tinyblas::<T>),
            batch_min: 2,
            batch_by_matrix: true,
            ..Entry::of(GgmlType::Bf16, dot_bf16::<T>)
        },
    ]
}

/// tinyBLAS's order over rows of f32 values, `out[r]` from `x[r * stride..][..y.len()]`: the
/// scalar oracle.
pub(super) fn gemm_rows_scalar(x: &[f32], stride: usize, y: &[f32], out: &mut [f32]) {
    for (r, o) in out.iter_mut().enumerate() {
        *o = ggml_math::dot_f32_gemm(&x[r * stride..r * stride + y.len()], y);
    }
}

/// `ggml_vec_dot_f16`'s order over rows of f16 values, `out[r]` from
/// `x[r * stride..][..y.len()]`: the scalar oracle.
fn gemv_rows_scalar(x: &[u16], stride: usize, y: &[f32], n_pad: usize, out: &mut [f32]) {
    for (r, o) in out.iter_mut().enumerate() {
        *o = ggml_math::dot_f16_gemv(&x[r * stride..r * stride + y.len()], y, n_pad);
    }
}

tier_blocks! { [Q4_0Scalar, Q4_0ChainScalar, Q4_1Scalar, Q8_0Scalar], scalar, scalar }

struct ScalarFloats;
impl Floats for ScalarFloats {
    const F32: fn(&[f32], &[f32]) -> f32 = ggml_math::dot_f32_vec;
    const F32_GEMM_ROWS: fn(&[f32], usize, &[f32], &mut [f32]) = gemm_rows_scalar;
    const F16: fn(&[u16], &[f32], usize) -> f32 = ggml_math::dot_f16_gemv;
    const F16_ROWS: fn(&[u16], usize, &[f32], usize, &mut [f32]) = gemv_rows_scalar;
    const F16_GEMM: fn(&[u16], &[f32]) -> f32 = ggml_math::dot_f16_gemm;
    const BF16: fn(&[u16], &[f32]) -> f32 = ggml_math::dot_bf16_vec;
    const BF16_GEMM: fn(&[u16], &[f32]) -> f32 = ggml_math::dot_bf16_gemm;
}

/// The oracle rows of this file's types ([`entries::SCALAR`] lists them): F32, F16, BF16.
pub(super) const FLOATS_SCALAR: [Entry; 3] = floats::<ScalarFloats>();
pub(super) const Q4_0_SCALAR: Entry = q4_0::<Q4_0Scalar, Q4_0ChainScalar>();
pub(super) const Q4_1_SCALAR: Entry = one_order::<Q4_1Scalar>(GgmlType::Q4_1);
pub(super) const Q8_0_SCALAR: Entry = one_order::<Q8_0Scalar>(GgmlType::Q8_0);

/// Puts `row` in its type's place of a tier's table.
fn put(rows: &mut [Entry], row: Entry) {
    rows[entries::index_of(row.ty).expect("a type of the table")] = row;
}

#[cfg(target_arch = "x86_64")]
pub(super) use x86::{avx2_rows, avx512_rows};

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::super::entries::{self, ChainPacked, ChainPanel, Entry};
    use super::super::x86_64::{avx2, avx2_steps, avx512, avx512_steps, Avx2};
    use super::super::{Layout, PANEL_ROWS, PANEL_TOKENS, TILE_ROWS};
    use super::{
        floats, one_order, put, q4_0, ActRow, BlockQ4_0, BlockQ4_1, BlockQ8_0, BlockQ8_1, Blocks,
        Dot, Floats, GemvPanel, GgmlType, Rows, Tile,
    };

    tier_blocks! { [Q4_0Avx2, Q4_0ChainAvx2, Q4_1Avx2, Q8_0Avx2], avx2, avx2,
    GemvPanel { rows: TILE_ROWS, run: avx2::gemv8_q4_0_q8_0_chain } }
    // AVX-512 has its own single-token and tile kernels and takes AVX2's single dots.
    tier_blocks! { [Q4_0Avx512, Q4_0ChainAvx512, Q4_1Avx512, Q8_0Avx512], avx2, avx512,
    GemvPanel { rows: PANEL_ROWS, run: avx512::gemv16_q4_0_q8_0_chain } }

    /// AVX2's float dots (bf16's: the oracle's, compiled with hardware FMA).
    struct Avx2Floats;
    impl Floats for Avx2Floats {
        const F32: fn(&[f32], &[f32]) -> f32 = avx2::dot_f32_vec;
        const F32_GEMM_ROWS: fn(&[f32], usize, &[f32], &mut [f32]) = avx2::att_gemm_rows;
        const F16: fn(&[u16], &[f32], usize) -> f32 = avx2::att_gemv;
        const F16_ROWS: fn(&[u16], usize, &[f32], usize, &mut [f32]) =
            |x, stride, y, n_pad, out| {
                for (r, o) in out.iter_mut().enumerate() {
                    *o = avx2::att_gemv(&x[r * stride..r * stride + y.len()], y, n_pad);
                }
            };
        const F16_GEMM: fn(&[u16], &[f32]) -> f32 = avx2::att_gemm;
        const BF16: fn(&[u16], &[f32]) -> f32 = avx2::dot_bf16_vec;
        const BF16_GEMM: fn(&[u16], &[f32]) -> f32 = avx2::dot_bf16_gemm;
    }

    /// AVX-512's: AVX2's, with its own run of f16 rows.
    struct Avx512Floats;
    impl Floats for Avx512Floats {
        const F32: fn(&[f32], &[f32]) -> f32 = Avx2Floats::F32;
        const F32_GEMM_ROWS: fn(&[f32], usize, &[f32], &mut [f32]) = Avx2Floats::F32_GEMM_ROWS;
        const F16: fn(&[u16], &[f32], usize) -> f32 = avx512::att_gemv;
        const F16_ROWS: fn(&[u16], usize, &[f32], usize, &mut [f32]) = avx512::att_gemv_rows;
        const F16_GEMM: fn(&[u16], &[f32]) -> f32 = Avx2Floats::F16_GEMM;
        const BF16: fn(&[u16], &[f32]) -> f32 = Avx2Floats::BF16;
        const BF16_GEMM: fn(&[u16], &[f32]) -> f32 = Avx2Floats::BF16_GEMM;
    }

    /// Puts AVX2's rows of this file's types in `rows` (the tier's table, the others filled).
    pub(in crate::kernels) fn avx2_rows(token: Avx2, rows: &mut [Entry]) {
        put(
            rows,
            Entry {
                panel: Some(ChainPanel {
                    run: token.panel_q4_0_q8_0_chain(),
                    // Its panels skip a padded group's empty passes of tokens.
                    pad: 1,
                }),
                chain_packed: Some(ChainPacked {
                    layout: Layout::Q4_0x16,
                    gemv: token.gemv16_q4_0_q8_0_packed(),
                    steps: avx2_steps::Q4_0_STEPS,
                }),
                ..q4_0::<Q4_0Avx2, Q4_0ChainAvx2>()
            },
        );
        put(rows, one_order::<Q4_1Avx2>(GgmlType::Q4_1));
        put(rows, one_order::<Q8_0Avx2>(GgmlType::Q8_0));
        floats::<Avx2Floats>()
            .into_iter()
            .for_each(|r| put(rows, r));
    }

    /// Puts AVX-512's rows of this file's types in `rows` (the tier's table, the others
    /// filled), and IQ4_NL's block-chain panel and packed kernels, which are Q4_0's with its
    /// value table.
    pub(in crate::kernels) fn avx512_rows(rows: &mut [Entry]) {
        put(
            rows,
            Entry {
                panel: Some(ChainPanel {
                    run: avx512::panel_q4_0_q8_0_chain,
                    pad: PANEL_TOKENS,
                }),
                chain_packed: Some(ChainPacked {
                    layout: Layout::Q4_0x16,
                    gemv: avx512::gemv16_q4_0_q8_0_packed,
                    steps: avx512_steps::Q4_0_STEPS,
                }),
                ..q4_0::<Q4_0Avx512, Q4_0ChainAvx512>()
            },
        );
        put(rows, one_order::<Q4_1Avx512>(GgmlType::Q4_1));
        put(
            rows,
            Entry {
                wide: Some((avx512::wide_q8_0_q8_0, avx512::wide_half_q8_0_q8_0)),
                ..one_order::<Q8_0Avx512>(GgmlType::Q8_0)
            },
        );
        floats::<Avx512Floats>()
            .into_iter()
            .for_each(|r| put(rows, r));
        // tinyBLAS's f32 matmul over a micro-batch in tiles of rows and tokens.
        rows[entries::index_of(GgmlType::F32).expect("F32 has a row")].tile =
            Some(avx512::tile_f32_batch);
        let iq4_nl = &mut rows[entries::index_of(GgmlType::Iq4Nl).expect("IQ4_NL has a row")];
        iq4_nl.panel = Some(ChainPanel {
            run: avx512::panel_iq4_nl_q8_0_chain,
            pad: PANEL_TOKENS,
        });
        iq4_nl.chain_packed = Some(ChainPacked {
            layout: Layout::Iq4NlX16,
            gemv: avx512::gemv16_iq4_nl_q8_0_packed,
            steps: avx512_steps::IQ4_NL_STEPS,
        });
    }
}
