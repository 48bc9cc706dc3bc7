//! AVX2 + FMA + F16C tier. Same operation order as the scalar oracle (see `scalar.rs`), so results are
//! bit-identical to it.
//!
//! The `#[target_feature]` functions are private; the safe wrappers below are only handed out by
//! [`super::super::Kernels::detect`] after `is_x86_feature_detected!` confirmed AVX2, FMA and F16C.

use std::arch::x86_64::*;

use crate::kernels::blocks::{BlockQ4_0, BlockQ4_1, BlockQ8_0, BlockQ8_1};

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

/// 32 nibbles → 32 bytes: low nibbles in the low 128 bits, high nibbles in the high 128 bits.
#[target_feature(enable = "avx2,fma")]
#[inline]
fn bytes_from_nibbles_32(qs: &[u8; 16]) -> __m256i {
    // SAFETY: qs is exactly 16 readable bytes; the load is unaligned.
    let tmp = unsafe { _mm_loadu_si128(qs.as_ptr().cast()) };
    let bytes = _mm256_set_m128i(_mm_srli_epi16(tmp, 4), tmp);
    _mm256_and_si256(bytes, _mm256_set1_epi8(0x0f))
}

/// An f16 block scale → f32 with the F16C instruction (exactly as the software conversion).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn scale(d: [u8; 2]) -> f32 {
    _mm_cvtss_f32(_mm_cvtph_ps(
        _mm_cvtsi32_si128(u16::from_le_bytes(d) as i32),
    ))
}

#[target_feature(enable = "avx2,fma")]
#[inline]
fn hsum_float_8(x: __m256) -> f32 {
    let mut res = _mm256_extractf128_ps(x, 1);
    res = _mm_add_ps(res, _mm256_castps256_ps128(x));
    res = _mm_add_ps(res, _mm_movehl_ps(res, res));
    res = _mm_add_ss(res, _mm_movehdup_ps(res));
    _mm_cvtss_f32(res)
}

#[target_feature(enable = "avx2,fma,f16c")]
fn dot_q4_0_q8_0_impl(x: &[BlockQ4_0], y: &[BlockQ8_0]) -> f32 {
    let mut acc = _mm256_setzero_ps();
    let off = _mm256_set1_epi8(8);
    for (a, b) in x.iter().zip(y) {
        let d = _mm256_set1_ps(scale(a.d) * scale(b.d));
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
    let mut summs = 0f32;
    for (a, b) in x.iter().zip(y) {
        summs += scale(a.m) * scale(b.s);
        let d = _mm256_set1_ps(scale(a.d) * scale(b.d));
        let qx = bytes_from_nibbles_32(&a.qs);
        // SAFETY: b.qs is 32 readable bytes; the load is unaligned.
        let qy = unsafe { _mm256_loadu_si256(b.qs.as_ptr().cast()) };
        acc = _mm256_fmadd_ps(d, mul_sum_us8_pairs_float(qx, qy), acc);
    }
    hsum_float_8(acc) + summs
}

#[target_feature(enable = "avx2,fma,f16c")]
fn dot_q8_0_q8_0_impl(x: &[BlockQ8_0], y: &[BlockQ8_0]) -> f32 {
    let mut acc = _mm256_setzero_ps();
    for (a, b) in x.iter().zip(y) {
        let d = _mm256_set1_ps(scale(a.d) * scale(b.d));
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
fn dot_f16_f32_impl(x: &[u16], y: &[f32]) -> f32 {
    let n = x.len().min(y.len());
    let n8 = n / 8 * 8;
    let mut acc = _mm256_setzero_ps();
    let mut i = 0;
    while i < n8 {
        // SAFETY: i + 8 <= n8 <= len of both slices; unaligned loads.
        let (a, b) = unsafe {
            (
                _mm256_cvtph_ps(_mm_loadu_si128(x.as_ptr().add(i).cast())),
                _mm256_loadu_ps(y.as_ptr().add(i)),
            )
        };
        acc = _mm256_fmadd_ps(a, b, acc);
        i += 8;
    }
    let mut s = hsum_float_8(acc);
    for j in n8..n {
        s = crate::kernels::half::f16_to_f32(x[j]).mul_add(y[j], s);
    }
    s
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

/// GCC's `_mm512_reduce_add_ps` order over a 16-lane value held as (lo, hi) halves.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn reduce16(lo: __m256, hi: __m256) -> f32 {
    let t = _mm256_add_ps(lo, hi);
    let u = _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
    let v = _mm_add_ps(u, _mm_movehl_ps(u, u)); // (u0+u2, u1+u3)
    _mm_cvtss_f32(_mm_add_ss(v, _mm_movehdup_ps(v)))
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

pub(in crate::kernels) fn att_gemv(x: &[u16], y: &[f32], n_pad: usize) -> f32 {
    // SAFETY: only reachable through the table built after AVX2, FMA and F16C were detected.
    unsafe { att_gemv_impl(x, y, n_pad) }
}

pub(in crate::kernels) fn att_gemm(x: &[u16], y: &[f32]) -> f32 {
    // SAFETY: only reachable through the table built after AVX2, FMA and F16C were detected.
    unsafe { att_gemm_impl(x, y) }
}

pub(in crate::kernels) fn dot_f16_f32(x: &[u16], y: &[f32]) -> f32 {
    // SAFETY: only reachable through the table built after AVX2, FMA and F16C were detected.
    unsafe { dot_f16_f32_impl(x, y) }
}

/// See `scalar::dot_q4_0_q8_0_chain` (same operation order).
#[target_feature(enable = "avx2,fma,f16c")]
fn dot_q4_0_q8_0_chain_impl(x: &[BlockQ4_0], y: &[BlockQ8_0]) -> f32 {
    let off = _mm256_set1_epi8(8);
    let ones = _mm256_set1_epi16(1);
    let mut acc = 0f32;
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
        let s2 = _mm_add_epi32(s4, _mm_unpackhi_epi64(s4, s4));
        let isum = _mm_cvtsi128_si32(_mm_add_epi32(s2, _mm_shuffle_epi32(s2, 1)));
        acc = (isum as f32).mul_add(scale(a.d) * scale(b.d), acc);
    }
    acc
}

pub(in crate::kernels) fn dot_q4_0_q8_0_chain(x: &[BlockQ4_0], y: &[BlockQ8_0]) -> f32 {
    // SAFETY: only reachable through the table built after AVX2, FMA and F16C were detected.
    unsafe { dot_q4_0_q8_0_chain_impl(x, y) }
}

pub(in crate::kernels) fn dot_q4_0_q8_0(x: &[BlockQ4_0], y: &[BlockQ8_0]) -> f32 {
    // SAFETY: this wrapper is only placed in the dispatch table after AVX2, FMA and F16C were detected.
    unsafe { dot_q4_0_q8_0_impl(x, y) }
}

pub(in crate::kernels) fn dot_q4_1_q8_1(x: &[BlockQ4_1], y: &[BlockQ8_1]) -> f32 {
    // SAFETY: only reachable through the table built after AVX2, FMA and F16C were detected.
    unsafe { dot_q4_1_q8_1_impl(x, y) }
}

pub(in crate::kernels) fn dot_q8_0_q8_0(x: &[BlockQ8_0], y: &[BlockQ8_0]) -> f32 {
    // SAFETY: only reachable through the table built after AVX2, FMA and F16C were detected.
    unsafe { dot_q8_0_q8_0_impl(x, y) }
}

pub(in crate::kernels) fn dot_f32(x: &[f32], y: &[f32]) -> f32 {
    // SAFETY: only reachable through the table built after AVX2, FMA and F16C were detected.
    unsafe { dot_f32_impl(x, y) }
}
