//! The shape every kernel of the generic path's types takes on both x86 tiers, and the 256-bit
//! helpers they share (tier-neutral: the tiers' own instructions are in `avx2_kquant.rs` and
//! `avx512_kquant.rs`, the kernels written once in `kquant_kernels.rs` and `kwide_kernels.rs`).
//! Every kernel forms the same exact integers as its scalar oracle (`oracle_vec_dot.rs`, `oracle_repacked.rs`,
//! `oracle_tiled.rs`) and does the same float operations on them in the same order, so each output
//! is bit-identical to the oracle's (and to llama.cpp's).
//!
//! Each kernel takes `R` rows and `T` tokens (`fn(&[&[B]; R], &[&[A]; T], &mut [[f32; R]; T])`):
//! the single dot of the table row is the kernel with `R = T = 1`, and a type's tile kernel
//! (`entries::TileDot`) runs passes of [`PASS_ROWS`] rows, each against the tokens [`PASS_TOKENS`] at
//! a time ([`drive`]; decode has one token). Within a pass each row's block is unpacked once for
//! all its tokens, the activation's loads and per-block work are shared among the rows, and the
//! outputs' independent chains overlap. Nothing else is shared: every output keeps its own
//! float operations.
//!
//! As in `avx2.rs`, the `#[target_feature]` functions are private and the safe wrappers
//! ([`rows_kernel`], [`panel_kernel`]) are only handed out by the dispatch table after the
//! tier's features were detected.

use std::arch::x86_64::*;

use super::prefetch::Prefetch;
use super::vec256::{add_halves, hsum_float_8, lanes};
use crate::kernels::blocks::Block;
use crate::kernels::blocks::{BlockQ8K, KVALUES_IQ4NL, KVALUES_MXFP4};
use crate::kernels::entries;
use crate::kernels::ActRow;

/// `[f(0), …, f(n − 1)]` for `|i| f(i)` (a `Copy` type), built by a loop in the calling
/// function. Unlike `std::array::from_fn`, whose closure a `#[target_feature]` function's
/// intrinsics would keep out of line (the generic `from_fn` has no target features to inline
/// it into), the body here stays inlinable.
macro_rules! array_of {
    ($n:expr, |$i:ident| $e:expr) => {{
        let mut a = [{
            let $i = 0usize;
            $e
        }; $n];
        for $i in 1..$n {
            a[$i] = $e;
        }
        a
    }};
}
pub(super) use array_of;

/// Rows per pass of the tile kernels.
pub(super) const PASS_ROWS: usize = 4;
/// Tokens per pass of the tile kernels for a batch (each row's blocks unpacked once for them).
pub(super) const PASS_TOKENS: usize = 4;

/// A kernel over `R` rows and `T` tokens: `out[t][r] = dot(w[r], y[t])`.
pub(super) type TileFn<B, A, const R: usize, const T: usize> =
    fn(&[&[B]; R], &[&[A]; T], &mut [[f32; R]; T]);

/// A kernel of `R` rows × `T` tokens: `$rows::<R, T>`, safe, runs `$body` (over `$w`, `$y`,
/// `$out`) compiled with the target features `$feat`; `$dot` is its single dot (`R = T = 1`).
macro_rules! rows_kernel {
    ($feat:literal, $rows:ident, $dot:ident, $b:ty, $a:ty,
     |$w:ident, $y:ident, $out:ident| $body:expr) => {
        pub(super) fn $rows<const R: usize, const T: usize>(
            w: &[&[$b]; R],
            y: &[&[$a]; T],
            out: &mut [[f32; R]; T],
        ) {
            #[target_feature(enable = $feat)]
            fn imp<const R: usize, const T: usize>(
                $w: &[&[$b]; R],
                $y: &[&[$a]; T],
                $out: &mut [[f32; R]; T],
            ) {
                $body
            }
            // SAFETY: only reachable through the table of a tier whose features (`$feat`)
            // were detected.
            unsafe { imp::<R, T>(w, y, out) }
        }

        pub(in crate::kernels) fn $dot(x: &[$b], y: &[$a]) -> f32 {
            let mut o = [[0f32; 1]; 1];
            $rows::<1, 1>(&[x], &[y], &mut o);
            o[0][0]
        }
    };
}
pub(super) use rows_kernel;

/// A panel kernel ([`PanelFn`]): `$name`, safe, runs `$body` (over `$w`, `$y`, `$out`)
/// compiled with the target features `$feat`, one instance per panel so that its body inlines
/// with its constants known.
macro_rules! panel_kernel {
    ($feat:literal, $name:ident, $b:ty, |$w:ident, $y:ident, $out:ident| $body:expr) => {
        fn $name(
            w: &$crate::kernels::x86_64::passes::PanelRows<$b>,
            y: &[&[$crate::kernels::blocks::BlockQ8K]],
            out: &mut $crate::kernels::x86_64::passes::PanelOut,
        ) {
            #[target_feature(enable = $feat)]
            fn imp(
                $w: &$crate::kernels::x86_64::passes::PanelRows<$b>,
                $y: &[&[$crate::kernels::blocks::BlockQ8K]],
                $out: &mut $crate::kernels::x86_64::passes::PanelOut,
            ) {
                $body
            }
            // SAFETY: only reachable through the table of a tier whose features (`$feat`)
            // were detected.
            unsafe { imp(w, y, out) }
        }
    };
}
pub(super) use panel_kernel;

/// A [`TileDot`] from kernels per variant: `$name` runs the kernel of the variant asked for in
/// the shapes [`drive`] takes (`$r` rows × `$t` tokens, and the edges), after the variant's
/// panel kernel, if it has one in `panels`, took the whole groups of [`PANEL_ROWS`] rows
/// ([`panels`]); it declines the variants not listed.
macro_rules! tile_fn {
    ($name:ident, $b:ty, $get:ident, $r:expr, $t:expr, { $($v:ident => $k:ident),* $(,)? }
     $(, panels: { $($pv:ident => $pk:ident),* $(,)? })?) => {
        pub(super) fn $name(
            rows: &[&[u8]],
            acts: &[crate::kernels::ActRow],
            variant: crate::kernels::entries::Variant,
            out: &mut [f32],
        ) -> bool {
            #[allow(unused_imports)]
            use crate::kernels::entries::Variant;
            #[allow(unused_mut)]
            let mut done = 0;
            $(match variant {
                $(Variant::$pv => {
                    use crate::kernels::x86_64::passes::{
                        panels, PANEL_MIN_TOKENS, PANEL_MIN_TOKENS_GEMM,
                    };
                    let min = match variant {
                        Variant::RepackedGemm => PANEL_MIN_TOKENS_GEMM,
                        _ => PANEL_MIN_TOKENS,
                    };
                    done = panels::<$b>(rows, acts, out, $pk, min);
                })*
                #[allow(unreachable_patterns)]
                _ => {}
            })?
            match variant {
                $(Variant::$v => {
                    crate::kernels::x86_64::passes::drive::<$b, _, { $r }, { $t }>(
                        rows,
                        acts,
                        crate::kernels::entries::$get,
                        out,
                        done,
                        ($k::<{ $r }, { $t }>, $k::<{ $r }, 1>, $k::<1, { $t }>, $k::<1, 1>),
                    )
                })*
                #[allow(unreachable_patterns)]
                _ => return false,
            }
            true
        }
    };
}
pub(super) use tile_fn;

/// One kernel in the four shapes [`drive`] runs: `R` rows × `T` tokens, `R` × 1, 1 × `T`, 1 × 1.
pub(super) type ShapeFns<B, A, const R: usize, const T: usize> = (
    TileFn<B, A, R, T>,
    TileFn<B, A, R, 1>,
    TileFn<B, A, 1, T>,
    TileFn<B, A, 1, 1>,
);

/// `out[t * rows.len() + r] = dot(rows[r], acts[t])` for the rows from `start` on (those before
/// it are done): passes of `R` rows (the rows left one at a time), each pass against the tokens
/// `T` at a time (the tokens left one at a time), so a pass's rows stay in cache across the
/// tokens and each row block is unpacked once per `T`.
///
/// # Panics
/// If `out` is not one output per row and token, or a row or an activation has another length
/// than the first activation.
pub(super) fn drive<B: Block, A, const R: usize, const T: usize>(
    rows: &[&[u8]],
    acts: &[ActRow],
    get: fn(&ActRow) -> &[A],
    out: &mut [f32],
    start: usize,
    (rt, r1, one_t, one): ShapeFns<B, A, R, T>,
) {
    let n_rows = rows.len();
    assert_eq!(out.len(), n_rows * acts.len(), "tile output size mismatch");
    let Some(first) = acts.first() else {
        return;
    };
    let n = get(first).len();
    let whole = start + (n_rows - start) / R * R;
    for r0 in (start..whole).step_by(R) {
        let w: [&[B]; R] = std::array::from_fn(|r| entries::weights::<B>(rows[r0 + r], n));
        run_pass(&w, r0, n_rows, acts, get, out, rt, r1);
    }
    for (r0, row) in rows.iter().enumerate().skip(whole) {
        run_pass(
            &[entries::weights::<B>(row, n)],
            r0,
            n_rows,
            acts,
            get,
            out,
            one_t,
            one,
        );
    }
}

/// One pass of [`drive`]: the `K` rows `w` (outputs from row `r0` of `n_rows`) against every
/// token, `T` at a time by `kt`, the tokens left one at a time by `k1`.
#[allow(clippy::too_many_arguments)]
fn run_pass<B, A, const K: usize, const T: usize>(
    w: &[&[B]; K],
    r0: usize,
    n_rows: usize,
    acts: &[ActRow],
    get: fn(&ActRow) -> &[A],
    out: &mut [f32],
    kt: TileFn<B, A, K, T>,
    k1: TileFn<B, A, K, 1>,
) {
    let whole = if T > 1 { acts.len() / T * T } else { 0 };
    for t0 in (0..whole).step_by(T) {
        let y: [&[A]; T] = std::array::from_fn(|t| get(&acts[t0 + t]));
        let mut o = [[0f32; K]; T];
        kt(w, &y, &mut o);
        for (t, ot) in o.iter().enumerate() {
            out[(t0 + t) * n_rows + r0..][..K].copy_from_slice(ot);
        }
    }
    for (t, a) in acts.iter().enumerate().skip(whole) {
        let mut o = [[0f32; K]; 1];
        k1(w, &[get(a)], &mut o);
        out[t * n_rows + r0..][..K].copy_from_slice(&o[0]);
    }
}

/// Rows of a panel kernel: one per i32 lane of a vector.
pub(super) const PANEL_ROWS: usize = LANES;
/// Tokens a panel kernel takes at most per call (its accumulators stay on the stack).
pub(super) const PANEL_TOKENS: usize = 32;
/// The fewest tokens for which [`panels`] runs the panel kernels: their per-block transposes
/// pay off only when shared by enough tokens. Measured against the passes of [`drive`] (Q4_K,
/// Q5_K, Q2_K, AVX-512 tier): slower at 8 tokens, faster at 16 and 32, except for the
/// repacked gemm, whose passes reduce four parts per block and lose from 8 tokens on.
pub(super) const PANEL_MIN_TOKENS: usize = 16;
/// [`PANEL_MIN_TOKENS`] of the repacked gemm.
pub(super) const PANEL_MIN_TOKENS_GEMM: usize = 8;

/// A panel kernel's rows.
pub(super) type PanelRows<'a, B> = [&'a [B]; PANEL_ROWS];
/// A panel kernel's outputs, token-major.
pub(super) type PanelOut = [[f32; PANEL_ROWS]; PANEL_TOKENS];

/// A panel kernel: `out[t][r] = dot(w[r], y[t])` for [`PANEL_ROWS`] rows and `y.len()` tokens
/// (at most [`PANEL_TOKENS`]), the rows in the lanes of the kernel's vectors.
pub(super) type PanelFn<B> = fn(&PanelRows<B>, &[&[BlockQ8K]], &mut PanelOut);

/// Runs `panel` over every whole group of [`PANEL_ROWS`] rows from the first, against every
/// token ([`PANEL_TOKENS`] at a time), when there are at least `min_tokens` tokens; returns how
/// many rows it computed (outputs laid out as [`drive`]'s).
///
/// # Panics
/// If `out` is not one output per row and token, or a length disagrees.
pub(super) fn panels<B: Block>(
    rows: &[&[u8]],
    acts: &[ActRow],
    out: &mut [f32],
    panel: PanelFn<B>,
    min_tokens: usize,
) -> usize {
    let n_rows = rows.len();
    assert_eq!(out.len(), n_rows * acts.len(), "tile output size mismatch");
    if acts.len() < min_tokens {
        return 0;
    }
    let n = entries::q8_k(&acts[0]).len();
    let whole = n_rows / PANEL_ROWS * PANEL_ROWS;
    let mut o = [[0f32; PANEL_ROWS]; PANEL_TOKENS];
    for r0 in (0..whole).step_by(PANEL_ROWS) {
        let w: [&[B]; PANEL_ROWS] = std::array::from_fn(|r| entries::weights::<B>(rows[r0 + r], n));
        for (t0, chunk) in (0..).step_by(PANEL_TOKENS).zip(acts.chunks(PANEL_TOKENS)) {
            let y: [&[BlockQ8K]; PANEL_TOKENS] =
                std::array::from_fn(|t| entries::q8_k(&chunk[t.min(chunk.len() - 1)]));
            panel(&w, &y[..chunk.len()], &mut o);
            for (t, ot) in o[..chunk.len()].iter().enumerate() {
                out[(t0 + t) * n_rows + r0..][..PANEL_ROWS].copy_from_slice(ot);
            }
        }
    }
    whole
}

/// The prefetch of a kernel's pass: the next rows' lines for one token (decode streams the
/// weights), none for a batch (its rows stay in cache across the tokens).
#[inline(always)]
pub(super) fn prefetch_for<B, const R: usize, const T: usize>(w: &[&[B]; R]) -> Prefetch {
    if T == 1 {
        Prefetch::new(w)
    } else {
        Prefetch::NONE
    }
}

/// `rows` cut to exactly the activation's `n` blocks (so indexing below `n` is checked once).
///
/// # Panics
/// If a row is shorter than `n` blocks.
#[inline(always)]
pub(super) fn exact<'a, B, const R: usize>(rows: &[&'a [B]; R], n: usize) -> [&'a [B]; R] {
    std::array::from_fn(|r| {
        assert_eq!(rows[r].len(), n, "row length mismatch");
        &rows[r][..n]
    })
}

/// A pass's block count `n` (the first activation's), its rows and tokens cut to exactly `n`
/// blocks ([`exact`]) and its prefetch ([`prefetch_for`]).
///
/// # Panics
/// If a row or an activation has another length.
#[inline(always)]
#[allow(clippy::type_complexity)]
pub(super) fn pass<'w, 'y, B, A, const R: usize, const T: usize>(
    w: &[&'w [B]; R],
    y: &[&'y [A]; T],
) -> (usize, [&'w [B]; R], [&'y [A]; T], Prefetch) {
    let n = y[0].len();
    let (w, y) = (exact(w, n), exact(y, n));
    let pf = prefetch_for::<_, R, T>(&w);
    (n, w, y, pf)
}

/// `out[t][r] = hsum_float_8(acc[t][r])`: the `vec_dot` kernels' last step.
#[target_feature(enable = "avx2,fma")]
#[inline]
pub(super) fn hsums<const R: usize, const T: usize>(
    acc: &[[__m256; R]; T],
    out: &mut [[f32; R]; T],
) {
    for t in 0..T {
        for r in 0..R {
            out[t][r] = hsum_float_8(acc[t][r]);
        }
    }
}

/// 32 bytes of `p` (unaligned).
///
/// # Panics
/// If `p` holds fewer than 32 bytes.
#[inline(always)]
pub(super) fn load32<T>(p: &[T]) -> __m256i {
    assert!(std::mem::size_of_val(p) >= 32, "load32 past the end");
    // SAFETY: at least 32 readable bytes (asserted); the load is unaligned.
    unsafe { _mm256_loadu_si256(p.as_ptr().cast()) }
}

/// 16 bytes of `p` (unaligned).
///
/// # Panics
/// If `p` holds fewer than 16 bytes.
#[inline(always)]
pub(super) fn load16<T>(p: &[T]) -> __m128i {
    assert!(std::mem::size_of_val(p) >= 16, "load16 past the end");
    // SAFETY: at least 16 readable bytes (asserted); the load is unaligned.
    unsafe { _mm_loadu_si128(p.as_ptr().cast()) }
}

/// An f16 → f32 by F16C (exact, as `half::f16_to_f32`).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) fn f16(h: [u8; 2]) -> f32 {
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(
        u16::from_le_bytes(h),
    ))))
}

/// f16 → f32 of one value per row, row r in lane r (lanes past `R` zero).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) fn f16_rows<const R: usize>(h: [[u8; 2]; R]) -> __m256 {
    const { assert!(R <= LANES) };
    let mut v = [0u16; LANES];
    for (o, h) in v.iter_mut().zip(h) {
        *o = u16::from_le_bytes(h);
    }
    _mm256_cvtph_ps(load16(&v))
}

/// f32 (and i32) lanes of one AVX2 vector.
pub(super) const LANES: usize = 8;

/// Lane `k` of the result is the sum of `v[k]`'s eight lanes (exact, wrapping), for up to
/// eight vectors (lanes past `v.len()` zero): pairs of lanes folded by unpacks, then the
/// 128-bit halves.
#[target_feature(enable = "avx2,fma")]
#[inline]
pub(super) fn hsum_i32_rows(v: &[__m256i]) -> __m256i {
    assert!(v.len() <= LANES, "more than eight vectors");
    let at = |k: usize| v.get(k).copied().unwrap_or(_mm256_setzero_si256());
    // [a0+a2, b0+b2, a1+a3, b1+b3 | the same of lanes 4..8]
    let pair = |a: __m256i, b: __m256i| {
        _mm256_add_epi32(_mm256_unpacklo_epi32(a, b), _mm256_unpackhi_epi32(a, b))
    };
    // [Σ a, Σ b, Σ c, Σ d] over lanes 0..4 | the same over lanes 4..8.
    let quad = |a, b, c, d| {
        let (ab, cd) = (pair(a, b), pair(c, d));
        _mm256_add_epi32(_mm256_unpacklo_epi64(ab, cd), _mm256_unpackhi_epi64(ab, cd))
    };
    let lo = quad(at(0), at(1), at(2), at(3));
    if v.len() <= LANES / 2 {
        let hi = _mm256_extracti128_si256(lo, 1);
        return _mm256_zextsi128_si256(_mm_add_epi32(_mm256_castsi256_si128(lo), hi));
    }
    let hi = quad(at(4), at(5), at(6), at(7));
    add_halves(lo, hi)
}

/// The sum of the eight lanes of `v` (exact, wrapping).
#[target_feature(enable = "avx2,fma")]
#[inline]
pub(super) fn hsum_i32(v: __m256i) -> i32 {
    let s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    let s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
    _mm_cvtsi128_si32(_mm_add_epi32(s, _mm_shuffle_epi32(s, SWAP_NEIGHBOURS)))
}

/// `_mm_shuffle_epi32` control: lanes (1, 0, 3, 2).
const SWAP_NEIGHBOURS: i32 = 0b10_11_00_01;

/// The first `R` lanes of `v` into `out`.
#[target_feature(enable = "avx2,fma")]
#[inline]
pub(super) fn store_rows<const R: usize>(v: __m256, out: &mut [f32; R]) {
    out.copy_from_slice(&lanes(v)[..R]);
}

// ---- IQ4_NL values ------------------------------------------------------------------------

/// The IQ4_NL lookup table as sixteen bytes.
#[target_feature(enable = "avx2,fma")]
#[inline]
pub(super) fn iq4nl_table() -> __m128i {
    load16(&KVALUES_IQ4NL)
}

/// Sixteen nibble bytes → 32 IQ4_NL values: low nibbles (elements 0..16) in the low half.
#[target_feature(enable = "avx2,fma")]
#[inline]
pub(super) fn iq4_values(table: __m128i, qs: &[u8]) -> __m256i {
    let bits = load16(qs);
    let m4 = _mm_set1_epi8(0x0f);
    let lo = _mm_shuffle_epi8(table, _mm_and_si128(bits, m4));
    let hi = _mm_shuffle_epi8(table, _mm_and_si128(_mm_srli_epi16::<4>(bits), m4));
    _mm256_set_m128i(hi, lo)
}

// ---- MXFP4 values and scales ----------------------------------------------------------------

/// The MXFP4 lookup table as sixteen bytes (for [`iq4_values`]: the two types store their
/// nibbles alike).
#[target_feature(enable = "avx2,fma")]
#[inline]
pub(super) fn mxfp4_table() -> __m128i {
    load16(&KVALUES_MXFP4)
}

/// The halved E8M0 scale of one code per row (`mxfp4::e8m0_to_f32_half`), row r in lane r
/// (lanes past `R` zero).
#[target_feature(enable = "avx2,fma")]
#[inline]
pub(super) fn e8m0_rows<const R: usize>(e: [u8; R]) -> __m256 {
    const { assert!(R <= LANES) };
    let mut v = [0f32; LANES];
    for (o, e) in v.iter_mut().zip(e) {
        *o = crate::kernels::mxfp4::e8m0_to_f32_half(e);
    }
    _mm256_castsi256_ps(load32(&v))
}
