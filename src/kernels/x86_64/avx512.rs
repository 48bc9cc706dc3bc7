//! AVX-512 tier (F, BW, VL and VNNI on 256-bit vectors): the tiled matmul kernels, whose four-
//! product integer sums `vpdpbusd` forms in one instruction (AVX2 needs `maddubs` + `madd`),
//! with sixteen more vector registers. The single dots and the other kernels are the AVX2
//! tier's: this tier only exists on CPUs that also have AVX2, FMA and F16C.
//!
//! Same float operations as the scalar oracle (see `scalar.rs`), so results are bit-identical
//! to it. The integer sums are exact: `vpdpbusd` multiplies u8 by i8 and adds without
//! saturating, so signed weights are offset into u8 and the offset's share, a multiple of the
//! activation's own four-sums, is taken out through the accumulator input.
//!
//! The `#[target_feature]` functions are private; the safe wrappers are only handed out by
//! [`super::super::Kernels::for_tier`] after `is_x86_feature_detected!` confirmed every feature.
//!
//! The AVX-512 intrinsics are stable since Rust 1.89, above the manifest's `rust-version`
//! (1.80, which the crate already exceeds: safe `#[target_feature]` functions need 1.86).
#![allow(clippy::incompatible_msrv)]

use std::arch::x86_64::*;

use super::avx2::{
    bytes_from_nibbles_32, exact, hsum_float_8, hsum_i32_8x8_small, lanes, load_qs, scale_products,
    spill, TILE_LANES,
};
use crate::kernels::blocks::{BlockQ4_0, BlockQ4_1, BlockQ8_0, BlockQ8_1};
use crate::kernels::{TILE_ROWS as TR, TILE_TOKENS as TT};

/// The offset that makes a Q4_0 nibble signed (`q − 8`).
const Q4_0_OFFSET: i8 = 8;
/// The offset that maps an i8 weight onto u8 (`x + 128`, the top bit flipped).
const I8_TO_U8_OFFSET: i8 = i8::MIN;

/// `−offset · Σ4 y` per lane: the correction that turns `Σ4 (x + offset)·y` into `Σ4 x·y`,
/// exact for every i8 `y` (offset as u8: 8 or 128).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn offset_correction(offset: i8, y: __m256i) -> __m256i {
    let zero = _mm256_setzero_si256();
    _mm256_sub_epi32(zero, _mm256_dpbusd_epi32(zero, _mm256_set1_epi8(offset), y))
}

/// Tiled Q4_0·Q8_0 (lanes order), as `avx2::tile_q4_0_q8_0_impl` with the integer sums
/// formed from the unsigned nibbles:
/// ```text
/// c[t]      = −8 · Σ4 y[t] per lane                                     once per token
/// acc[t][r] = fma(d[t*R+r], (f32) dpbusd(c[t], nibbles[r], y[t]), acc[t][r])
/// ```
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn tile_q4_0_q8_0_impl<const R: usize, const T: usize>(
    w: &[&[BlockQ4_0]; R],
    a: &[&[BlockQ8_0]; T],
    out: &mut [[f32; R]; T],
) {
    let n = a[0].len();
    let (w, a) = (exact(w, n), exact(a, n));
    let mut acc = [[_mm256_setzero_ps(); R]; T];
    let mut d_buf = [0f32; TILE_LANES];
    for i in 0..n {
        let d = spill(
            scale_products(w.map(|w| w[i].d), a.map(|a| a[i].d)),
            &mut d_buf,
        );
        let qx: [__m256i; R] = std::array::from_fn(|r| bytes_from_nibbles_32(&w[r][i].qs));
        for (t, acc_t) in acc.iter_mut().enumerate() {
            let qy = load_qs(&a[t][i].qs);
            let c = offset_correction(Q4_0_OFFSET, qy);
            for r in 0..R {
                let q = _mm256_cvtepi32_ps(_mm256_dpbusd_epi32(c, qx[r], qy));
                acc_t[r] = _mm256_fmadd_ps(_mm256_set1_ps(d[t * R + r]), q, acc_t[r]);
            }
        }
    }
    for (o, acc_t) in out.iter_mut().zip(&acc) {
        for (v, s) in o.iter_mut().zip(acc_t) {
            *v = hsum_float_8(*s);
        }
    }
}

/// Tiled Q8_0·Q8_0 (lanes order): as [`tile_q4_0_q8_0_impl`], the weights loaded and offset
/// by 128 into u8.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn tile_q8_0_q8_0_impl<const R: usize, const T: usize>(
    w: &[&[BlockQ8_0]; R],
    a: &[&[BlockQ8_0]; T],
    out: &mut [[f32; R]; T],
) {
    let n = a[0].len();
    let (w, a) = (exact(w, n), exact(a, n));
    let flip = _mm256_set1_epi8(I8_TO_U8_OFFSET);
    let mut acc = [[_mm256_setzero_ps(); R]; T];
    let mut d_buf = [0f32; TILE_LANES];
    for i in 0..n {
        let d = spill(
            scale_products(w.map(|w| w[i].d), a.map(|a| a[i].d)),
            &mut d_buf,
        );
        let qx: [__m256i; R] =
            std::array::from_fn(|r| _mm256_xor_si256(load_qs(&w[r][i].qs), flip));
        for (t, acc_t) in acc.iter_mut().enumerate() {
            let qy = load_qs(&a[t][i].qs);
            let c = offset_correction(I8_TO_U8_OFFSET, qy);
            for r in 0..R {
                let q = _mm256_cvtepi32_ps(_mm256_dpbusd_epi32(c, qx[r], qy));
                acc_t[r] = _mm256_fmadd_ps(_mm256_set1_ps(d[t * R + r]), q, acc_t[r]);
            }
        }
    }
    for (o, acc_t) in out.iter_mut().zip(&acc) {
        for (v, s) in o.iter_mut().zip(acc_t) {
            *v = hsum_float_8(*s);
        }
    }
}

/// Tiled Q4_1·Q8_1: the nibbles are unsigned already, so no correction; the `m·s` chains as in
/// `avx2::tile_q4_1_q8_1_impl`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn tile_q4_1_q8_1_impl<const R: usize, const T: usize>(
    w: &[&[BlockQ4_1]; R],
    a: &[&[BlockQ8_1]; T],
    out: &mut [[f32; R]; T],
) {
    let n = a[0].len();
    let (w, a) = (exact(w, n), exact(a, n));
    let zero = _mm256_setzero_si256();
    let mut acc = [[_mm256_setzero_ps(); R]; T];
    let mut d_buf = [0f32; TILE_LANES];
    let mut summs = _mm256_setzero_ps();
    for i in 0..n {
        let d = spill(
            scale_products(w.map(|w| w[i].d), a.map(|a| a[i].d)),
            &mut d_buf,
        );
        let ms = scale_products(w.map(|w| w[i].m), a.map(|a| a[i].s));
        summs = _mm256_add_ps(summs, ms);
        let qx: [__m256i; R] = std::array::from_fn(|r| bytes_from_nibbles_32(&w[r][i].qs));
        for (t, acc_t) in acc.iter_mut().enumerate() {
            let qy = load_qs(&a[t][i].qs);
            for r in 0..R {
                let q = _mm256_cvtepi32_ps(_mm256_dpbusd_epi32(zero, qx[r], qy));
                acc_t[r] = _mm256_fmadd_ps(_mm256_set1_ps(d[t * R + r]), q, acc_t[r]);
            }
        }
    }
    let summs = lanes(summs);
    for (t, (o, acc_t)) in out.iter_mut().zip(&acc).enumerate() {
        for (r, (v, s)) in o.iter_mut().zip(acc_t).enumerate() {
            *v = hsum_float_8(*s) + summs[t * R + r];
        }
    }
}

/// Tiled Q4_0·Q8_0 (block-chain order), as `avx2::tile_q4_0_q8_0_chain_impl` with the four-
/// sums from [`tile_q4_0_q8_0_impl`] (each |Σ4 (q − 8)·y| ≤ 4 · 8 · 128 = 4096).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn tile_q4_0_q8_0_chain_impl<const R: usize, const T: usize>(
    w: &[&[BlockQ4_0]; R],
    a: &[&[BlockQ8_0]; T],
    out: &mut [[f32; R]; T],
) {
    let n = a[0].len();
    let (w, a) = (exact(w, n), exact(a, n));
    let mut acc = _mm256_setzero_ps();
    for i in 0..n {
        let d = scale_products(w.map(|w| w[i].d), a.map(|a| a[i].d));
        let qx: [__m256i; R] = std::array::from_fn(|r| bytes_from_nibbles_32(&w[r][i].qs));
        let mut sums = [_mm256_setzero_si256(); TILE_LANES];
        for (t, a_t) in a.iter().enumerate() {
            let qy = load_qs(&a_t[i].qs);
            let c = offset_correction(Q4_0_OFFSET, qy);
            for (r, x) in qx.iter().enumerate() {
                sums[t * R + r] = _mm256_dpbusd_epi32(c, *x, qy);
            }
        }
        let isum = _mm256_cvtepi32_ps(hsum_i32_8x8_small(sums));
        acc = _mm256_fmadd_ps(isum, d, acc);
    }
    let acc = lanes(acc);
    for (t, o) in out.iter_mut().enumerate() {
        o.copy_from_slice(&acc[t * R..t * R + R]);
    }
}

pub(in crate::kernels) fn tile_q4_0_q8_0(
    w: &[&[BlockQ4_0]; TR],
    a: &[&[BlockQ8_0]; TT],
    out: &mut [[f32; TR]; TT],
) {
    // SAFETY: only reachable through the table built after every feature above was detected.
    unsafe { tile_q4_0_q8_0_impl(w, a, out) }
}

pub(in crate::kernels) fn tile_q4_0_q8_0_chain(
    w: &[&[BlockQ4_0]; TR],
    a: &[&[BlockQ8_0]; TT],
    out: &mut [[f32; TR]; TT],
) {
    // SAFETY: only reachable through the table built after every feature above was detected.
    unsafe { tile_q4_0_q8_0_chain_impl(w, a, out) }
}

pub(in crate::kernels) fn tile_q4_1_q8_1(
    w: &[&[BlockQ4_1]; TR],
    a: &[&[BlockQ8_1]; TT],
    out: &mut [[f32; TR]; TT],
) {
    // SAFETY: only reachable through the table built after every feature above was detected.
    unsafe { tile_q4_1_q8_1_impl(w, a, out) }
}

pub(in crate::kernels) fn tile_q8_0_q8_0(
    w: &[&[BlockQ8_0]; TR],
    a: &[&[BlockQ8_0]; TT],
    out: &mut [[f32; TR]; TT],
) {
    // SAFETY: only reachable through the table built after every feature above was detected.
    unsafe { tile_q8_0_q8_0_impl(w, a, out) }
}
