//! AVX2 + FMA + F16C tier. Same operation order as the scalar oracle (see `scalar.rs`), so results are
//! bit-identical to it.
//!
//! Single dots first, then the tiled kernels (R weight rows × T tokens per pass).
//!
//! The kernels' `#[target_feature]` functions are private; the safe wrappers below are only
//! handed out by [`super::super::Kernels::detect`] after `is_x86_feature_detected!` confirmed
//! AVX2, FMA and F16C. A few helpers are `pub(super)` for the AVX-512 tier, whose functions
//! enable these features too.

use std::arch::x86_64::*;

use super::avx2_panel::{block_sums, nibble_groups};
use super::entry_points::{compiled_for, entry_points};
use crate::kernels::blocks::{BlockQ4_0, BlockQ4_1, BlockQ8_0, BlockQ8_1};
use crate::kernels::{gelu, ggml_math, ops};
use crate::kernels::{Q8Row, TILE_ROWS};

use super::prefetch::Prefetch;
use super::vec256::{
    bytes_from_nibbles_32, exact, hsum_float_8, hsum_i32_8x8_small, lanes, load_qs, q8_block,
    reduce16, row_scales, scale8, transpose_qs, Q4_0_OFFSET, TILE_LANES,
};

/// Eight i32 sums of four consecutive u8×i8 products, as f32 (`mul_sum_us8_pairs_float`).
#[target_feature(enable = "avx2,fma")]
#[inline]
fn mul_sum_us8_pairs_float(ax: __m256i, sy: __m256i) -> __m256 {
    let ones = _mm256_set1_epi16(1);
    let dot = _mm256_maddubs_epi16(ax, sy);
    _mm256_cvtepi32_ps(_mm256_madd_epi16(dot, ones))
}

/// Eight i32 sums of four consecutive i8×i8 products, as f32 (`mul_sum_i8_pairs_float`).
#[target_feature(enable = "avx2,fma")]
#[inline]
fn mul_sum_i8_pairs_float(x: __m256i, y: __m256i) -> __m256 {
    let ax = _mm256_sign_epi8(x, x);
    let sy = _mm256_sign_epi8(y, x);
    mul_sum_us8_pairs_float(ax, sy)
}

/// An f16 block scale → f32 in all four lanes (a vector, as `vec256::scale8` says why).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn scale4(d: [u8; 2]) -> __m128 {
    _mm_cvtph_ps(_mm_set1_epi16(i16::from_le_bytes(d)))
}

#[target_feature(enable = "avx2,fma,f16c")]
fn dot_q4_0_q8_0_impl(x: &[BlockQ4_0], y: &[BlockQ8_0]) -> f32 {
    let mut acc = _mm256_setzero_ps();
    let off = _mm256_set1_epi8(8);
    for (a, b) in x.iter().zip(y) {
        let d = _mm256_mul_ps(scale8(a.d), scale8(b.d));
        let qx = bytes_from_nibbles_32(&a.qs);
        // SAFETY: b.qs is 32 readable bytes; the load is unaligned.
        let qy = unsafe { _mm256_loadu_si256(b.qs.as_ptr().cast()) };
        let q = mul_sum_i8_pairs_float(_mm256_sub_epi8(qx, off), qy);
        acc = _mm256_fmadd_ps(d, q, acc);
    }
    hsum_float_8(acc)
}

#[target_feature(enable = "avx2,fma,f16c")]
fn dot_q4_1_q8_1_impl(x: &[BlockQ4_1], y: &[BlockQ8_1]) -> f32 {
    let mut acc = _mm256_setzero_ps();
    let mut summs = _mm256_setzero_ps(); // the same scalar chain in every lane
    for (a, b) in x.iter().zip(y) {
        summs = _mm256_add_ps(summs, _mm256_mul_ps(scale8(a.m), scale8(b.s)));
        let d = _mm256_mul_ps(scale8(a.d), scale8(b.d));
        let qx = bytes_from_nibbles_32(&a.qs);
        // SAFETY: b.qs is 32 readable bytes; the load is unaligned.
        let qy = unsafe { _mm256_loadu_si256(b.qs.as_ptr().cast()) };
        acc = _mm256_fmadd_ps(d, mul_sum_us8_pairs_float(qx, qy), acc);
    }
    hsum_float_8(acc) + _mm256_cvtss_f32(summs)
}

#[target_feature(enable = "avx2,fma,f16c")]
fn dot_q8_0_q8_0_impl(x: &[BlockQ8_0], y: &[BlockQ8_0]) -> f32 {
    let mut acc = _mm256_setzero_ps();
    for (a, b) in x.iter().zip(y) {
        let d = _mm256_mul_ps(scale8(a.d), scale8(b.d));
        // SAFETY: both qs arrays are 32 bytes, read unaligned.
        let (qx, qy) = unsafe {
            (
                _mm256_loadu_si256(a.qs.as_ptr().cast()),
                _mm256_loadu_si256(b.qs.as_ptr().cast()),
            )
        };
        acc = _mm256_fmadd_ps(d, mul_sum_i8_pairs_float(qx, qy), acc);
    }
    hsum_float_8(acc)
}

#[target_feature(enable = "avx2,fma,f16c")]
fn dot_f32_impl(x: &[f32], y: &[f32]) -> f32 {
    let n8 = x.len().min(y.len()) / 8 * 8;
    let mut acc = _mm256_setzero_ps();
    let mut i = 0;
    while i < n8 {
        // SAFETY: i + 8 <= n8 <= len of both slices.
        let (a, b) = unsafe {
            (
                _mm256_loadu_ps(x.as_ptr().add(i)),
                _mm256_loadu_ps(y.as_ptr().add(i)),
            )
        };
        acc = _mm256_fmadd_ps(a, b, acc);
        i += 8;
    }
    let mut s = hsum_float_8(acc);
    for j in n8..x.len().min(y.len()) {
        s = x[j].mul_add(y[j], s);
    }
    s
}

#[target_feature(enable = "avx2,fma,f16c")]
fn dot_bf16_vec_impl(x: &[u16], y: &[f32]) -> f32 {
    ggml_math::dot_bf16_vec(x, y)
}

#[target_feature(enable = "avx2,fma,f16c")]
fn dot_bf16_gemm_impl(x: &[u16], y: &[f32]) -> f32 {
    ggml_math::dot_bf16_gemm(x, y)
}

/// Eight f16 values → f32.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn load_f16x8(x: &[u16], i: usize) -> __m256 {
    assert!(i + 8 <= x.len());
    // SAFETY: 8 elements from i are in bounds (asserted); unaligned load.
    _mm256_cvtph_ps(unsafe { _mm_loadu_si128(x.as_ptr().add(i).cast()) })
}

#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn load_f32x8(y: &[f32], i: usize) -> __m256 {
    assert!(i + 8 <= y.len());
    // SAFETY: 8 elements from i are in bounds (asserted); unaligned load.
    unsafe { _mm256_loadu_ps(y.as_ptr().add(i)) }
}

/// See `ggml_math::dot_f16_gemv` (same operation order).
#[target_feature(enable = "avx2,fma,f16c")]
fn att_gemv_impl(x: &[u16], y: &[f32], n_pad: usize) -> f32 {
    let n = x.len().min(y.len());
    let np = n_pad / 64 * 64;
    let full = n.min(np) / 64 * 64;
    let mut acc = [_mm256_setzero_ps(); 8]; // accumulator j: lanes 0-7 in 2j, 8-15 in 2j+1
    let mut i = 0;
    while i < full {
        for (h, a) in acc.iter_mut().enumerate() {
            *a = _mm256_fmadd_ps(load_f16x8(x, i + 8 * h), load_f32x8(y, i + 8 * h), *a);
        }
        i += 64;
    }
    if i < n.min(np) {
        // A partial final step: ggml sees zeros past n (its row is padded).
        let mut xs = [0u16; 64];
        let mut ys = [0f32; 64];
        let m = n.min(np) - i;
        xs[..m].copy_from_slice(&x[i..i + m]);
        ys[..m].copy_from_slice(&y[i..i + m]);
        for (h, a) in acc.iter_mut().enumerate() {
            *a = _mm256_fmadd_ps(load_f16x8(&xs, 8 * h), load_f32x8(&ys, 8 * h), *a);
        }
    }
    let lo = _mm256_add_ps(_mm256_add_ps(acc[0], acc[4]), _mm256_add_ps(acc[2], acc[6]));
    let hi = _mm256_add_ps(_mm256_add_ps(acc[1], acc[5]), _mm256_add_ps(acc[3], acc[7]));
    let mut sum = reduce16(lo, hi) as f64;
    for j in np..n {
        sum += (crate::kernels::half::f16_to_f32(x[j]) * y[j]) as f64;
    }
    sum as f32
}

/// See `ggml_math::dot_f16_gemm` (same operation order).
#[target_feature(enable = "avx2,fma,f16c")]
fn att_gemm_impl(x: &[u16], y: &[f32]) -> f32 {
    let n = x.len().min(y.len());
    let full = n / 16 * 16;
    let (mut lo, mut hi) = (_mm256_setzero_ps(), _mm256_setzero_ps());
    let mut i = 0;
    while i < full {
        lo = _mm256_fmadd_ps(load_f16x8(x, i), load_f32x8(y, i), lo);
        hi = _mm256_fmadd_ps(load_f16x8(x, i + 8), load_f32x8(y, i + 8), hi);
        i += 16;
    }
    if i < n {
        let mut xs = [0u16; 16];
        let mut ys = [0f32; 16];
        xs[..n - i].copy_from_slice(&x[i..n]);
        ys[..n - i].copy_from_slice(&y[i..n]);
        lo = _mm256_fmadd_ps(load_f16x8(&xs, 0), load_f32x8(&ys, 0), lo);
        hi = _mm256_fmadd_ps(load_f16x8(&xs, 8), load_f32x8(&ys, 8), hi);
    }
    reduce16(lo, hi)
}

/// [`att_gemm_impl`] of `out.len()` rows of `x` (f16 values widened to f32 beforehand), row r at
/// `x[r * stride..]`, against one `y`: four rows at a time side by side (a last partial group
/// repeats its last row and drops the copies' results), each row keeping its own two
/// accumulators and operations (so each result is bit-identical to its single dot), the eight
/// chains hiding each other's latency and `y` loaded once for the four.
#[target_feature(enable = "avx2,fma,f16c")]
fn att_gemm_rows_impl(x: &[f32], stride: usize, y: &[f32], out: &mut [f32]) {
    let n = y.len();
    let full = n / 16 * 16;
    let rows = out.len();
    let row = |r: usize| &x[r * stride..r * stride + n];
    for (q, o) in (0..).step_by(4).zip(out.chunks_mut(4)) {
        let x: [&[f32]; 4] = [0, 1, 2, 3].map(|j| row((q + j).min(rows - 1)));
        let mut lo = [_mm256_setzero_ps(); 4];
        let mut hi = [_mm256_setzero_ps(); 4];
        let mut i = 0;
        while i < full {
            let (y0, y1) = (load_f32x8(y, i), load_f32x8(y, i + 8));
            for j in 0..4 {
                lo[j] = _mm256_fmadd_ps(load_f32x8(x[j], i), y0, lo[j]);
                hi[j] = _mm256_fmadd_ps(load_f32x8(x[j], i + 8), y1, hi[j]);
            }
            i += 16;
        }
        if i < n {
            // The last partial step with zeros past n, as the single dot pads it: masked loads
            // (a store and a reload of a padded copy would stall on store forwarding).
            let m = tail_masks(n - i);
            let (y0, y1) = (load_tail(y, i, m[0]), load_tail(y, i + 8, m[1]));
            for j in 0..4 {
                lo[j] = _mm256_fmadd_ps(load_tail(x[j], i, m[0]), y0, lo[j]);
                hi[j] = _mm256_fmadd_ps(load_tail(x[j], i + 8, m[1]), y1, hi[j]);
            }
        }
        for (j, v) in o.iter_mut().enumerate() {
            *v = reduce16(lo[j], hi[j]);
        }
    }
}

/// Lane masks for the first `k` (1..16) of sixteen lanes held as two vectors of eight.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn tail_masks(k: usize) -> [__m256i; 2] {
    let k = _mm256_set1_epi32(k as i32);
    [
        _mm256_cmpgt_epi32(k, _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)),
        _mm256_cmpgt_epi32(k, _mm256_setr_epi32(8, 9, 10, 11, 12, 13, 14, 15)),
    ]
}

/// The lanes of `x[i..i + 8]` that `mask` selects, zeros elsewhere.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn load_tail(x: &[f32], i: usize, mask: __m256i) -> __m256 {
    // SAFETY: the masks come from `tail_masks(n - i)` with n = x.len() or less, so only lanes
    // below x.len() are read; masked-off lanes are neither read nor faulted on.
    unsafe { _mm256_maskload_ps(x.as_ptr().wrapping_add(i), mask) }
}

/// f16 → f32 of a whole slice, eight values per instruction (exact, as every f16 is an f32).
#[target_feature(enable = "avx2,fma,f16c")]
fn widen_f16_impl(src: &[u16], dst: &mut [f32]) {
    assert_eq!(src.len(), dst.len(), "widen_f16 length mismatch");
    let full = src.len() / 8 * 8;
    for (s, d) in src[..full]
        .chunks_exact(8)
        .zip(dst[..full].chunks_exact_mut(8))
    {
        // SAFETY: s is 8 readable u16s and d 8 writable f32s; both accesses are unaligned.
        unsafe {
            let v = _mm256_cvtph_ps(_mm_loadu_si128(s.as_ptr().cast()));
            _mm256_storeu_ps(d.as_mut_ptr(), v);
        }
    }
    for (s, d) in src[full..].iter().zip(&mut dst[full..]) {
        *d = crate::kernels::half::f16_to_f32(*s);
    }
}

/// f32 → f16 → f32 of a whole slice in place, eight values per instruction pair: F16C's
/// conversion rounds to nearest even as `half::f32_to_f16` does (NaN stays NaN).
#[target_feature(enable = "avx2,fma,f16c")]
fn round_f16_impl(x: &mut [f32]) {
    let full = x.len() / 8 * 8;
    for v in x[..full].chunks_exact_mut(8) {
        // SAFETY: v is 8 readable and writable f32s; the accesses are unaligned.
        unsafe {
            let h = _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(_mm256_loadu_ps(v.as_ptr()));
            _mm256_storeu_ps(v.as_mut_ptr(), _mm256_cvtph_ps(h));
        }
    }
    for v in &mut x[full..] {
        *v = crate::kernels::ggml_math::round_f16(*v);
    }
}

/// See `scalar::dot_q4_0_q8_0_chain` (same operation order).
#[target_feature(enable = "avx2,fma,f16c")]
fn dot_q4_0_q8_0_chain_impl(x: &[BlockQ4_0], y: &[BlockQ8_0]) -> f32 {
    let off = _mm256_set1_epi8(8);
    let ones = _mm256_set1_epi16(1);
    let mut acc = _mm_setzero_ps(); // the same scalar chain in every lane
    for (a, b) in x.iter().zip(y) {
        let qx = _mm256_sub_epi8(bytes_from_nibbles_32(&a.qs), off);
        // SAFETY: b.qs is 32 readable bytes; the load is unaligned.
        let qy = unsafe { _mm256_loadu_si256(b.qs.as_ptr().cast()) };
        let prod = _mm256_madd_epi16(
            _mm256_maddubs_epi16(_mm256_sign_epi8(qx, qx), _mm256_sign_epi8(qy, qx)),
            ones,
        );
        let s4 = _mm_add_epi32(
            _mm256_castsi256_si128(prod),
            _mm256_extracti128_si256(prod, 1),
        );
        // The block's total in every lane (integer sums: any order is exact).
        let s2 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, SWAP_PAIRS));
        let isum = _mm_add_epi32(s2, _mm_shuffle_epi32(s2, SWAP_NEIGHBOURS));
        let d = _mm_mul_ps(scale4(a.d), scale4(b.d));
        acc = _mm_fmadd_ps(_mm_cvtepi32_ps(isum), d, acc);
    }
    _mm_cvtss_f32(acc)
}

/// `_mm_shuffle_epi32` control: lanes (2, 3, 0, 1).
const SWAP_PAIRS: i32 = 0b01_00_11_10;
/// `_mm_shuffle_epi32` control: lanes (1, 0, 3, 2).
const SWAP_NEIGHBOURS: i32 = 0b10_11_00_01;

/// `ggml_math::dot_f32_vec` in explicit vectors: its four 16-lane accumulators are eight
/// 8-lane ones (vector `k` holds lanes `8(k % 2)..` of accumulator `k / 2`), each lane with the
/// same fused multiply-adds in the same order; then the same combination, reduction and
/// leftovers. (Left to the compiler, the lane-indexed loop ran at a fifth of memory speed.)
#[target_feature(enable = "avx2,fma,f16c")]
fn dot_f32_vec_impl(x: &[f32], y: &[f32]) -> f32 {
    let n = x.len().min(y.len());
    let (x, y) = (&x[..n], &y[..n]);
    let np = n / 64 * 64;
    let mut acc = [_mm256_setzero_ps(); 8];
    for (xs, ys) in x[..np].chunks_exact(64).zip(y[..np].chunks_exact(64)) {
        for (k, a) in acc.iter_mut().enumerate() {
            // SAFETY: 8·k + 8 ≤ 64, the length of both chunks; the loads are unaligned.
            let (xv, yv) = unsafe {
                (
                    _mm256_loadu_ps(xs.as_ptr().add(8 * k)),
                    _mm256_loadu_ps(ys.as_ptr().add(8 * k)),
                )
            };
            *a = _mm256_fmadd_ps(xv, yv, *a);
        }
    }
    let mut s = [0f32; 16];
    for (h, half) in s.chunks_exact_mut(8).enumerate() {
        // Lanes of half h: (acc0 + acc2) + (acc1 + acc3).
        let v = _mm256_add_ps(
            _mm256_add_ps(acc[h], acc[4 + h]),
            _mm256_add_ps(acc[2 + h], acc[6 + h]),
        );
        // SAFETY: `half` is 8 writable f32s; the store is unaligned.
        unsafe { _mm256_storeu_ps(half.as_mut_ptr(), v) };
    }
    let mut sum = crate::kernels::ggml_math::reduce16(&s);
    for i in np..n {
        sum = x[i].mul_add(y[i], sum);
    }
    sum
}

// ---------------------------------------------------------------------------------------------
// Tiled kernels: R weight rows × T tokens per pass. Each output keeps the float operations of
// its single dot above (same lanes, same fma per block, same reduction), so tiles are
// bit-identical to it; only loads, unpacking and the f16 scale conversions are shared, and the
// R·T independent accumulator chains hide each other's fma latency.
// ---------------------------------------------------------------------------------------------

// ---------------------------------------------------------------------------------------------
// The tiles of Q4_0, Q4_1 and Q8_0 (`legacy_tiles.rs`), over AVX2's four-product sums:
// `maddubs` multiplies u8 by i8 into i16 pairs, `madd` by ones adds the pairs into i32. Signed
// weights go through `sign` (|x| as u8, y with x's sign), which cannot overflow an i16 pair
// here: |x| ≤ 128 and |y| ≤ 127.
// ---------------------------------------------------------------------------------------------

/// A Q4_0 block's values `q − 8`, signed.
#[target_feature(enable = "avx2,fma")]
#[inline]
fn q4_0_codes(qs: &[u8; 16]) -> __m256i {
    _mm256_sub_epi8(bytes_from_nibbles_32(qs), _mm256_set1_epi8(Q4_0_OFFSET))
}

/// A Q8_0 block's values as they are.
#[target_feature(enable = "avx2,fma")]
#[inline]
fn q8_0_codes(qs: &[i8; 32]) -> __m256i {
    load_qs(qs)
}

/// Nothing to correct: AVX2's codes are the signed values themselves.
#[target_feature(enable = "avx2,fma")]
#[inline]
fn q4_0_correction(_y: __m256i) -> __m256i {
    _mm256_setzero_si256()
}

/// Nothing to correct (see [`q4_0_correction`]).
#[target_feature(enable = "avx2,fma")]
#[inline]
fn q8_0_correction(_y: __m256i) -> __m256i {
    _mm256_setzero_si256()
}

/// `Σ4 x·y` per i32 lane of signed `x` and `y` (`c` is always zero here).
#[target_feature(enable = "avx2,fma")]
#[inline]
fn sums(_c: __m256i, x: __m256i, y: __m256i) -> __m256i {
    sums_unsigned(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x))
}

/// `Σ4 x·y` per i32 lane of u8 `x` and i8 `y`.
#[target_feature(enable = "avx2,fma")]
#[inline]
fn sums_unsigned(x: __m256i, y: __m256i) -> __m256i {
    _mm256_madd_epi16(_mm256_maddubs_epi16(x, y), _mm256_set1_epi16(1))
}

mod tiles {
    super::super::legacy_tiles::legacy_tiles!("avx2,fma,f16c");
}
pub(in crate::kernels) use tiles::{
    tile_q4_0_q8_0, tile_q4_0_q8_0_chain, tile_q4_1_q8_1, tile_q8_0_q8_0,
};
use tiles::{tile_q4_0_q8_0_impl, tile_q4_1_q8_1_impl, tile_q8_0_q8_0_impl};

/// Single-token Q4_0·Q8_0 (block-chain order) over [`TILE_ROWS`] rows held back to back in `w`
/// (decode's path), the rows in the lanes of one vector as the AVX-512 panel holds them: each
/// block's nibble bytes transposed in registers ([`transpose_qs`]), then the block sums of
/// the AVX2 panels (`avx2_panel`: `maddubs` pairs added in i16, one `madd`), with no horizontal
/// sums. The activation's block sum and scale come precomputed (`Q8Row`):
/// ```text
/// isum[r] = −8·Σy + Σ_k pairs(nibbles_k[r], y)          = Σ (q − 8)·y, exact in i32
/// acc[r]  = fma((f32) isum[r], d_w[r] · d_y, acc[r])      row r's single chain, bit for bit
/// ```
#[target_feature(enable = "avx2,fma,f16c")]
fn gemv8_q4_0_q8_0_chain_impl(w: &[BlockQ4_0], a: &Q8Row, out: &mut [f32; TILE_ROWS]) {
    const { assert!(TILE_ROWS == TILE_LANES) };
    let n = a.blocks.len();
    assert!(
        n > 0 && w.len() == TILE_ROWS * n && a.sums.len() == n && a.scales.len() == n,
        "gemv8: {} weight blocks for {n}-block rows",
        w.len()
    );
    let mut rows: [&[BlockQ4_0]; TILE_ROWS] = [&w[..n]; TILE_ROWS];
    for (r, row) in rows.iter_mut().enumerate() {
        *row = &w[r * n..(r + 1) * n];
    }
    let pf = Prefetch::new(&rows);
    let mut acc = _mm256_setzero_ps();
    for i in 0..n {
        pf.at(i);
        let dw = row_scales(rows.map(|w| w[i].d));
        let x = transpose_qs(rows.map(|w| &w[i].qs));
        // SAFETY: every slice of `a` has exactly n elements (asserted above), and i < n.
        let (y, sum, dy) = unsafe { q8_block(a, i) };
        let [[isum]] = block_sums(&[nibble_groups(x)], [y], [sum]);
        let isum = _mm256_cvtepi32_ps(isum);
        acc = _mm256_fmadd_ps(isum, _mm256_mul_ps(dw, _mm256_set1_ps(dy)), acc);
    }
    *out = lanes(acc);
}

pub(in crate::kernels) fn gemv8_q4_0_q8_0_chain(w: &[BlockQ4_0], a: &Q8Row, out: &mut [f32]) {
    let out = out.try_into().expect("eight outputs");
    // SAFETY: only reachable through the table built after AVX2, FMA and F16C were detected.
    unsafe { gemv8_q4_0_q8_0_chain_impl(w, a, out) }
}

/// Rows per pass of the AVX2 single-token kernels: the multi-token tiles above with one token
/// and four rows (four accumulators, plus the unpacked rows and the activation block).
const ROWS_PER_PASS: usize = 4;

/// [`TILE_ROWS`]-row single-token kernels (`name(W, A) = tile;`), each running a tiled kernel
/// of [`ROWS_PER_PASS`] rows × 1 token over the rows a pass at a time.
macro_rules! rows_by_tiles {
    ($($name:ident($W:ty, $A:ty) = $tile:ident;)*) => {$(
        pub(in crate::kernels) fn $name(
            w: &[&[$W]; TILE_ROWS],
            a: &[$A],
            out: &mut [f32; TILE_ROWS],
        ) {
            const { assert!(TILE_ROWS.is_multiple_of(ROWS_PER_PASS)) };
            let passes = w.chunks_exact(ROWS_PER_PASS).zip(out.chunks_exact_mut(ROWS_PER_PASS));
            for (wc, oc) in passes {
                let mut o = [[0f32; ROWS_PER_PASS]; 1];
                // SAFETY: only reachable through the dispatch table, which is built after AVX2,
                // FMA and F16C were detected.
                unsafe { $tile(wc.try_into().expect("whole chunk"), &[a], &mut o) };
                oc.copy_from_slice(&o[0]);
            }
        }
    )*};
}

rows_by_tiles! {
    rows_q4_0_q8_0(BlockQ4_0, BlockQ8_0) = tile_q4_0_q8_0_impl;
    rows_q4_1_q8_1(BlockQ4_1, BlockQ8_1) = tile_q4_1_q8_1_impl;
    rows_q8_0_q8_0(BlockQ8_0, BlockQ8_0) = tile_q8_0_q8_0_impl;
}

/// Single-token Q4_0·Q8_0 (block-chain order) over all [`TILE_ROWS`] rows in one pass: the
/// block sums of row r as `legacy_tiles.rs`' block-chain tile forms them, their chains side by side
/// in the lanes of one accumulator (lane r), so the reduction, the scale conversion and the
/// fma of a block serve eight rows rather than four.
#[target_feature(enable = "avx2,fma,f16c")]
fn rows_q4_0_q8_0_chain_impl(
    w: &[&[BlockQ4_0]; TILE_ROWS],
    a: &[BlockQ8_0],
    out: &mut [f32; TILE_ROWS],
) {
    const { assert!(TILE_ROWS == TILE_LANES) };
    let n = a.len();
    let w = exact(w, n);
    let off = _mm256_set1_epi8(8);
    let ones = _mm256_set1_epi16(1);
    let mut acc = _mm256_setzero_ps();
    let pf = Prefetch::new(&w);
    for (i, y) in a.iter().enumerate() {
        pf.at(i);
        let d = _mm256_mul_ps(row_scales(w.map(|w| w[i].d)), scale8(y.d));
        let qy = load_qs(&y.qs);
        let sums: [__m256i; TILE_LANES] = std::array::from_fn(|r| {
            let x = _mm256_sub_epi8(bytes_from_nibbles_32(&w[r][i].qs), off);
            let (ax, sy) = (_mm256_sign_epi8(x, x), _mm256_sign_epi8(qy, x));
            _mm256_madd_epi16(_mm256_maddubs_epi16(ax, sy), ones)
        });
        let isum = _mm256_cvtepi32_ps(hsum_i32_8x8_small(sums));
        acc = _mm256_fmadd_ps(isum, d, acc);
    }
    *out = lanes(acc);
}

// ---------------------------------------------------------------------------------------------
// Activation quantizers: `blocks::quantize_act_*` with ggml's AVX2 arithmetic (which they
// describe): the same amax, the same `127/amax` multiply, round half to even by `cvtps2dq` under
// the default rounding mode, and the f16 scales converted by F16C with the same rounding.
// ---------------------------------------------------------------------------------------------

/// One block of 32 activations → its scale `d = amax/127` (f32) and 32 rounded i32 values in
/// four vectors (elements 8k..8k+8 in vector k).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn quantize_block(xb: &[f32]) -> (f32, [__m256i; 4]) {
    let v: [__m256; 4] = std::array::from_fn(|k| load_f32x8(xb, 8 * k));
    let sign = _mm256_set1_ps(-0.0);
    let abs = v.map(|v| _mm256_andnot_ps(sign, v));
    let m = _mm256_max_ps(_mm256_max_ps(abs[0], abs[1]), _mm256_max_ps(abs[2], abs[3]));
    let m = _mm_max_ps(_mm256_extractf128_ps(m, 1), _mm256_castps256_ps128(m));
    let m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    let amax = _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
    let d = amax / 127.0;
    let id = _mm256_set1_ps(if amax != 0.0 { 127.0 / amax } else { 0.0 });
    (d, v.map(|v| _mm256_cvtps_epi32(_mm256_mul_ps(v, id))))
}

/// f32 → f16 bytes by F16C, rounding to nearest even (as `half::f32_to_f16`).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn f16_bytes(v: f32) -> [u8; 2] {
    let h = _mm_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(_mm_set_ss(v));
    (_mm_extract_epi16::<0>(h) as u16).to_le_bytes()
}

/// Four vectors of i32 in −127..=127 → the 32 bytes in element order.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn pack_i8(q: [__m256i; 4], out: &mut [i8; 32]) {
    // packs interleaves 128-bit halves: bytes come out as dwords (0 4 1 5 2 6 3 7) of the
    // element order, put back by one cross-lane permute.
    let w = _mm256_packs_epi16(
        _mm256_packs_epi32(q[0], q[1]),
        _mm256_packs_epi32(q[2], q[3]),
    );
    let w = _mm256_permutevar8x32_epi32(w, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    // SAFETY: out is 32 writable bytes; the store is unaligned.
    unsafe { _mm256_storeu_si256(out.as_mut_ptr().cast(), w) };
}

#[target_feature(enable = "avx2,fma,f16c")]
fn quantize_act_q8_0_impl(x: &[f32], y: &mut [BlockQ8_0]) {
    for (xb, yb) in x.chunks_exact(32).zip(y.iter_mut()) {
        let (d, q) = quantize_block(xb);
        yb.d = f16_bytes(d);
        pack_i8(q, &mut yb.qs);
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
fn quantize_act_q8_1_impl(x: &[f32], y: &mut [BlockQ8_1]) {
    for (xb, yb) in x.chunks_exact(32).zip(y.iter_mut()) {
        let (d, q) = quantize_block(xb);
        yb.d = f16_bytes(d);
        let sum = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
        let sum = _mm_add_epi32(
            _mm256_castsi256_si128(sum),
            _mm256_extracti128_si256(sum, 1),
        );
        let sum = _mm_add_epi32(sum, _mm_shuffle_epi32(sum, SWAP_PAIRS));
        let sum = _mm_add_epi32(sum, _mm_shuffle_epi32(sum, SWAP_NEIGHBOURS));
        yb.s = f16_bytes(d * _mm_cvtsi128_si32(sum) as f32);
        pack_i8(q, &mut yb.qs);
    }
}

/// `gelu::geglu` eight lanes at a time: each gate rounded to f16 by F16C (nearest even, as
/// ggml's conversion; a NaN keeps part of its payload there, but every NaN entry of one sign
/// holds the same value), its entry gathered from the table, widened and multiplied by `up`;
/// lanes at or past ±[`gelu::TABLE_LIMIT`] take 0 or `gate · up` instead. The tail runs the
/// scalar model.
#[target_feature(enable = "avx2,fma,f16c")]
fn geglu_impl(table: &gelu::PaddedTable, gate: &mut [f32], up: &[f32]) {
    let n = gate.len().min(up.len());
    let whole = n / 8 * 8;
    let lo = _mm256_set1_ps(-gelu::TABLE_LIMIT);
    let hi = _mm256_set1_ps(gelu::TABLE_LIMIT);
    let low16 = _mm256_set1_epi32(0xffff);
    let base = table.as_ptr().cast::<i32>();
    for (g, u) in gate[..whole]
        .chunks_exact_mut(8)
        .zip(up[..whole].chunks_exact(8))
    {
        // SAFETY: g and u are 8 f32s each (unaligned loads and store). Every index is an f16
        // bit pattern, at most 0xffff, so each 4-byte gather read at byte 2·index lies within
        // the table and its one padding entry.
        unsafe {
            let x = _mm256_loadu_ps(g.as_ptr());
            let v = _mm256_loadu_ps(u.as_ptr());
            let h = _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(x);
            let e = _mm256_i32gather_epi32::<2>(base, _mm256_cvtepu16_epi32(h));
            // Entry j is the low half of lane j: pack the lanes' halves into the low 128 bits.
            let p = _mm256_packus_epi32(_mm256_and_si256(e, low16), _mm256_setzero_si256());
            let p = _mm256_permute4x64_epi64::<0b1000>(p);
            let t = _mm256_mul_ps(_mm256_cvtph_ps(_mm256_castsi256_si128(p)), v);
            let big = _mm256_cmp_ps::<_CMP_GE_OQ>(x, hi);
            let r = _mm256_blendv_ps(t, _mm256_mul_ps(x, v), big);
            let zero = _mm256_cmp_ps::<_CMP_LE_OQ>(x, lo);
            _mm256_storeu_ps(g.as_mut_ptr(), _mm256_andnot_ps(zero, r));
        }
    }
    let table = table[..gelu::TABLE_LEN]
        .try_into()
        .expect("the padded table holds the table");
    gelu::geglu_with(table, &mut gate[whole..n], &up[whole..n]);
}

/// `gelu::geglu` with the table read by vector gathers (same bits).
pub(in crate::kernels) fn geglu(gate: &mut [f32], up: &[f32]) {
    // SAFETY: only reachable through the table built after AVX2, FMA and F16C were detected.
    unsafe { geglu_impl(gelu::padded_table(), gate, up) }
}

// ---------------------------------------------------------------------------------------------
// The dispatch table's entry points (`entry_points.rs`).
// ---------------------------------------------------------------------------------------------

entry_points! {
    dot_q4_0_q8_0(x: &[BlockQ4_0], y: &[BlockQ8_0]) -> f32 = dot_q4_0_q8_0_impl;
    dot_q4_0_q8_0_chain(x: &[BlockQ4_0], y: &[BlockQ8_0]) -> f32 = dot_q4_0_q8_0_chain_impl;
    dot_q4_1_q8_1(x: &[BlockQ4_1], y: &[BlockQ8_1]) -> f32 = dot_q4_1_q8_1_impl;
    dot_q8_0_q8_0(x: &[BlockQ8_0], y: &[BlockQ8_0]) -> f32 = dot_q8_0_q8_0_impl;
    dot_f32(x: &[f32], y: &[f32]) -> f32 = dot_f32_impl;
    /// `ggml_math::dot_f32_vec` with AVX2 and hardware FMA (same bits).
    dot_f32_vec(x: &[f32], y: &[f32]) -> f32 = dot_f32_vec_impl;
    att_gemv(x: &[u16], y: &[f32], n_pad: usize) -> f32 = att_gemv_impl;
    att_gemm(x: &[u16], y: &[f32]) -> f32 = att_gemm_impl;
    /// `ggml_math::dot_bf16_vec` with hardware FMA (same bits).
    dot_bf16_vec(x: &[u16], y: &[f32]) -> f32 = dot_bf16_vec_impl;
    /// `ggml_math::dot_bf16_gemm` with hardware FMA (same bits).
    dot_bf16_gemm(x: &[u16], y: &[f32]) -> f32 = dot_bf16_gemm_impl;
    att_gemm_rows(x: &[f32], stride: usize, y: &[f32], out: &mut [f32]) = att_gemm_rows_impl;
    widen_f16(src: &[u16], dst: &mut [f32]) = widen_f16_impl;
    round_f16(x: &mut [f32]) = round_f16_impl;
    rows_q4_0_q8_0_chain(w: &[&[BlockQ4_0]; TILE_ROWS], a: &[BlockQ8_0], out: &mut [f32; TILE_ROWS])
        = rows_q4_0_q8_0_chain_impl;
    /// `blocks::quantize_act_q8_0` with AVX2 (same bits).
    quantize_act_q8_0(x: &[f32], y: &mut [BlockQ8_0]) = quantize_act_q8_0_impl;
    /// `blocks::quantize_act_q8_1` with AVX2 (same bits).
    quantize_act_q8_1(x: &[f32], y: &mut [BlockQ8_1]) = quantize_act_q8_1_impl;
}

compiled_for! { "avx2,fma,f16c";
    rope(cache: &[(f32, f32)], x: &mut [f32], head_dim: usize) = ggml_math::rope;
    rope_neox(cache: &[(f32, f32)], x: &mut [f32], head_dim: usize) = ggml_math::rope_neox;
    softmax(x: &mut [f32], scale: f32) = ggml_math::softmax;
    swiglu(gate: &mut [f32], up: &[f32]) = ggml_math::swiglu;
    /// Elementwise, no fused multiply-adds: the same bits as any tier.
    kv_add_q8_0(row: &[BlockQ8_0], p: f32, out: &mut [f32]) = ops::add_scaled_q8_0;
}
