//! AVX-512 tier kernels for the types of the generic path: the kernels of `kquant_kernels.rs`
//! over AVX-512 VNNI primitives, on 256-bit vectors (VL), the width this tier's other
//! single-token kernels use too (on Zen 4, which runs 512-bit operations in two halves, the
//! instruction count is what matters). `vpdpbusd` forms a run's four-sums of u8 × i8 in one
//! instruction (AVX2 needs `maddubs` + `madd`) and never saturates; two runs' four-sums (each
//! within ±2^15 for these codes: at most 4 · 63 · 128) are interleaved as i16 pairs and
//! `vpdpwssd` multiplies them by their two sub-block scales and accumulates, in one
//! instruction. The integers are exactly those of the AVX2 primitives, lane for lane, so the
//! outputs are bit-identical to the oracles as there. Q5_0, Q5_1 and IQ4_NL likewise: their
//! four-sums by `vpdpbusd`, Q5_0's fifth bits expanded from a mask register.
//!
//! The `#[target_feature]` functions are private; the table hands out the safe wrappers only
//! after AVX2, FMA, F16C and AVX-512 F/BW/VL/VNNI were detected.

use std::arch::x86_64::*;

use super::kavx2_k::Q3_BIAS;
use crate::kernels::entries::SCALAR;
use crate::kernels::Entry;

/// `acc + sc_a·Σ4(xa·ya) + sc_b·Σ4(xb·yb)` in each i32 lane, where the lane of `sp` holds
/// `(sc_a, sc_b)` as two i16 (see `kavx2_k::pair_dot`): each run's four-sums by `vpdpbusd`,
/// the two put side by side as the i16 halves of each lane, then one `vpdpwssd`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn pair_dot(
    acc: __m256i,
    xa: __m256i,
    ya: __m256i,
    xb: __m256i,
    yb: __m256i,
    sp: __m256i,
) -> __m256i {
    let z = _mm256_setzero_si256();
    let a = _mm256_dpbusd_epi32(z, xa, ya);
    let b = _mm256_dpbusd_epi32(z, xb, yb);
    _mm256_dpwssd_epi32(acc, interleave(a, b), sp)
}

/// [`pair_dot`] with the runs' biases (`bias4`) taken off their four-sums: `vpdpbusd`
/// accumulates onto them.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
#[allow(clippy::too_many_arguments)]
fn pair_dot_b(
    acc: __m256i,
    xa: __m256i,
    ya: __m256i,
    ba: __m256i,
    xb: __m256i,
    yb: __m256i,
    bb: __m256i,
    sp: __m256i,
) -> __m256i {
    let a = _mm256_dpbusd_epi32(ba, xa, ya);
    let b = _mm256_dpbusd_epi32(bb, xb, yb);
    _mm256_dpwssd_epi32(acc, interleave(a, b), sp)
}

/// The negated four-sums of `4·y` (a Q3_K run's bias, as [`pair_dot_b`] starts from it).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn bias4(y: __m256i) -> __m256i {
    let z = _mm256_setzero_si256();
    _mm256_sub_epi32(z, _mm256_dpbusd_epi32(z, _mm256_set1_epi8(Q3_BIAS), y))
}

/// `acc + Σ4(ux·sy)` per i32 lane: one `vpdpbusd` (exact; never saturates).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn dpbusd(acc: __m256i, ux: __m256i, sy: __m256i) -> __m256i {
    _mm256_dpbusd_epi32(acc, ux, sy)
}

/// `acc + Σ2(ux·sy)·s` per i32 lane (`maddubs` pairs within the i16 range, then `vpdpwssd`).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn chunk_dot(acc: __m256i, ux: __m256i, sy: __m256i, s: __m256i) -> __m256i {
    _mm256_dpwssd_epi32(acc, _mm256_maddubs_epi16(ux, sy), s)
}

/// Lane l of `a` (low i16) and of `b` (high i16) as the two i16 of lane l: exact for values
/// within ±2^15.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn interleave(a: __m256i, b: __m256i) -> __m256i {
    /// `_mm256_blend_epi16` control: the odd (high) i16 of each lane from the second source.
    const HIGH_HALVES: i32 = 0xAA;
    _mm256_blend_epi16::<HIGH_HALVES>(a, _mm256_slli_epi32::<16>(b))
}

/// Eight i32 lanes of four-sums of u8 × i8 products, by one `vpdpbusd` (the same integers as
/// AVX2's `maddubs` + `madd`, which never saturate for the 32-wide types).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn dot_us8(ux: __m256i, sy: __m256i) -> __m256i {
    _mm256_dpbusd_epi32(_mm256_setzero_si256(), ux, sy)
}

/// 32 bits → 32 bytes, 0xFF where the bit is set: the bits as a mask register, expanded.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn bytes_from_bits_32(qh: &[u8; 4]) -> __m256i {
    _mm256_movm_epi8(u32::from_le_bytes(*qh))
}

/// This tier's kernels of Q5_0, Q5_1 and IQ4_NL over the primitives above.
mod wide {
    super::super::kwide_kernels::wide_kernels!(
        "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni"
    );
}

/// This tier's kernels of the K-quants and IQ4_XS over the primitives above. The panels sum
/// `maddubs` runs in i16 as AVX2's do (one `madd` per run) rather than a `vpdpbusd` four-sum
/// per group and a `vpmulld` per sub-block: on Zen 5, pp128 of the 1B models gained 4% (Q2_K),
/// 9–10% (Q3_K_M, which now takes the Q3_K panel too) and 12% (Q4_K_M in the file's layout,
/// `--numa off`), alternating (BENCHMARKS.md, "Packed kernels spread their prefetches on
/// AVX-512 too").
mod kernels {
    super::super::kquant_kernels::k_quant_kernels!(
        "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni",
        i16_runs: true
    );
}

/// The generic path's rows for this tier: the oracle's, with this tier's kernels in place of
/// every dot product and a tile kernel for every type.
pub(in crate::kernels) fn entries() -> [Entry; SCALAR.len()] {
    let mut rows = SCALAR;
    for e in &mut rows {
        if let Some(tile) = wide::fill(e).or_else(|| kernels::fill(e)) {
            e.tile = Some(tile);
        }
        e.packed = super::kpacked::packed(e.ty);
    }
    rows
}
