//! The AVX2 tier of the generic path's types (`entries.rs`): the instructions of its kernels,
//! the kernels written once in `kquant_kernels.rs` (the K-quants and IQ4_XS) and
//! `kwide_kernels.rs` (Q5_0, Q5_1, IQ4_NL) expanded over them, the Q8_K activation quantizer,
//! and the tier's table rows. `avx512_kquant.rs` expands the same kernels over AVX-512 VNNI;
//! the rows' shape is in `passes.rs`, the unpacking and chains in `kquant_rows.rs`.
//!
//! The `#[target_feature]` functions are private; the safe wrappers are only handed out by the
//! dispatch table after AVX2, FMA and F16C were detected.

use std::arch::x86_64::*;

use super::kquant_rows::{RunPair, Q3_BIAS};
use super::passes::{array_of, load32, LANES};
use crate::kernels::blocks::{BlockQ5_0, BlockQ8K, Q8K_MAX, QK_K};
use crate::kernels::dispatch::wide_tiles;
use crate::kernels::entries::{Variant, SCALAR};
use crate::kernels::{ActRow, Entry, GgmlType};

// ---- the primitives ------------------------------------------------------------------------

/// `acc + sc_a·Σ4(x[0]·y[0] − b[0]) + sc_b·Σ4(x[1]·y[1] − b[1])` in each i32 lane, where the
/// lane of `sp` holds `(sc_a, sc_b)` as two i16, Σ4 is the four-sum of unsigned codes × signed
/// activations of the lane and `b` the runs' biases ([`bias4`], or zero): `maddubs`, the bias
/// off in i16, then `madd` by each scale (no pair reaches the i16 limit).
#[target_feature(enable = "avx2,fma")]
#[inline]
fn pair_dot(acc: __m256i, x: RunPair, y: RunPair, b: RunPair, sp: __m256i) -> __m256i {
    let (sa, sb) = split_pair(sp);
    let pa = _mm256_sub_epi16(_mm256_maddubs_epi16(x[0], y[0]), b[0]);
    let pb = _mm256_sub_epi16(_mm256_maddubs_epi16(x[1], y[1]), b[1]);
    let s = _mm256_add_epi32(_mm256_madd_epi16(pa, sa), _mm256_madd_epi16(pb, sb));
    _mm256_add_epi32(acc, s)
}

/// The activation-only part of a Q3_K run's products, `4·y` summed as [`pair_dot`] takes it
/// off (here: i16 pairs).
#[target_feature(enable = "avx2,fma")]
#[inline]
fn bias4(y: __m256i) -> __m256i {
    _mm256_maddubs_epi16(_mm256_set1_epi8(Q3_BIAS), y)
}

/// `acc + Σ2(ux·sy)·s` per i32 lane: `maddubs` pairs (within the i16 range) times the i16
/// scales `s`, summed by `madd`.
#[target_feature(enable = "avx2,fma")]
#[inline]
fn chunk_dot(acc: __m256i, ux: __m256i, sy: __m256i, s: __m256i) -> __m256i {
    _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(ux, sy), s))
}

/// The two i16 of each i32 lane of `sp`, each in both i16 lanes.
#[target_feature(enable = "avx2,fma")]
#[inline]
fn split_pair(sp: __m256i) -> (__m256i, __m256i) {
    // Bytes (0, 1) and (2, 3) of each i32 lane (byte indices within a 128-bit half), doubled.
    let (lo0, lo1) = (0x0504_0504_0100_0100, 0x0d0c_0d0c_0908_0908);
    let (hi0, hi1) = (0x0706_0706_0302_0302, 0x0f0e_0f0e_0b0a_0b0a);
    let lo = _mm256_set_epi64x(lo1, lo0, lo1, lo0);
    let hi = _mm256_set_epi64x(hi1, hi0, hi1, hi0);
    (_mm256_shuffle_epi8(sp, lo), _mm256_shuffle_epi8(sp, hi))
}

/// 32 bits → 32 bytes, 0xFF where the bit is set (`bytes_from_bits_32`).
#[target_feature(enable = "avx2,fma")]
#[inline]
fn bytes_from_bits_32(qh: &[u8; 4]) -> __m256i {
    let x32 = i32::from_le_bytes(*qh);
    // Byte k of the result reads byte k / 8 of qh.
    let shuf = _mm256_set_epi64x(
        0x0303_0303_0303_0303,
        0x0202_0202_0202_0202,
        0x0101_0101_0101_0101,
        0,
    );
    let bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(x32), shuf);
    // Every bit but bit k % 8 of byte k: all ones after the or exactly when that bit is set.
    let bit_mask = _mm256_set1_epi64x(0x7fbf_dfef_f7fb_fdfe);
    _mm256_cmpeq_epi8(_mm256_or_si256(bytes, bit_mask), _mm256_set1_epi64x(-1))
}

/// Eight i32 lanes of four-sums of u8 × i8 products: [`chunk_dot`] by ones (no pair here
/// reaches the i16 limit).
#[target_feature(enable = "avx2,fma")]
#[inline]
fn dot_us8(ux: __m256i, sy: __m256i) -> __m256i {
    chunk_dot(_mm256_setzero_si256(), ux, sy, _mm256_set1_epi16(1))
}

/// This tier's kernels of the K-quants and IQ4_XS over the primitives above.
mod kernels {
    super::super::kquant_kernels::k_quant_kernels!("avx2,fma,f16c");
}

/// This tier's kernels of IQ1_S and IQ1_M over the primitives above.
mod iq1 {
    super::super::iq1_kernels::iq1_kernels!("avx2,fma,f16c");
}

/// Q5_0's signed codes `q − 16` (the wide tile's, `avx2_wide.rs`).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) fn q5_0_codes(a: &BlockQ5_0) -> __m256i {
    wide::q5_0_values(a)
}

/// Q5_0's prompt tile: whole groups of tokens in `vec_dot`'s order through the wide tile
/// (`avx2_wide.rs`), which writes the blocks' scale products ahead of their sums; the other
/// orders (none today) and the tokens left over through the passes of `kwide_kernels.rs`.
fn tile_q5_0(rows: &[&[u8]], acts: &[ActRow], variant: Variant, out: &mut [f32]) -> bool {
    let token = super::Avx2::detect().expect("the AVX2 table is built where AVX2 runs");
    let done = match variant {
        Variant::Dot => wide_tiles(token.wide_q5_0_q8_0(), rows, acts, out),
        _ => 0,
    };
    done == acts.len()
        || wide::tile_q5_0(rows, &acts[done..], variant, &mut out[done * rows.len()..])
}

/// MXFP4's prompt tile: runs of whole groups of eight rows in the repacked order through the
/// eight-lane chain kernel (`avx2_mxfp4.rs`), everything else through the passes of
/// `kwide_kernels.rs`.
fn tile_mxfp4(rows: &[&[u8]], acts: &[ActRow], variant: Variant, out: &mut [f32]) -> bool {
    if variant == Variant::Repacked && rows.len().is_multiple_of(super::super::TILE_ROWS) {
        let token = super::Avx2::detect().expect("the AVX2 table is built where AVX2 runs");
        token.tile_mxfp4_chain()(rows, acts, out);
        return true;
    }
    wide::tile_mxfp4(rows, acts, variant, out)
}

/// This tier's kernels of Q5_0, Q5_1, IQ4_NL and MXFP4 over the primitives above.
mod wide {
    super::super::kwide_kernels::wide_kernels!("avx2,fma,f16c");
}

// ---- Q8_K activations ----------------------------------------------------------------------

// ggml's `nearest_int` in vectors, with the constants of `dequantize::nearest_int`.
use crate::kernels::dequantize::{MANTISSA_MASK, ROUND_MAGIC, ROUND_MAGIC_MANTISSA};
/// Elements per `bsums` entry.
const BSUM_LEN: usize = 16;

/// One block of 256 activations → Q8_K as `dequantize::quantize_act_q8_k` does it: `amax` the
/// largest |x| (NaN never counts), the signed `max` the first element of that magnitude,
/// `iscale = −127/max`, `q = min(127, nearest_int(iscale·x))` truncated to its low byte (the
/// product and the magic add rounded separately, as ggml's bit trick), `bsums` the sums of
/// each sixteen, `d = 1/iscale`.
#[target_feature(enable = "avx2,fma,f16c")]
fn quantize_block_q8_k(xb: &[f32; QK_K], yb: &mut BlockQ8K) {
    let sign = _mm256_set1_ps(-0.0);
    let vecs = QK_K / LANES;
    let load = |k: usize| {
        // SAFETY: k < 32, so the 8 floats at 8k lie inside the 256; the load is unaligned.
        unsafe { _mm256_loadu_ps(xb.as_ptr().add(LANES * k)) }
    };
    let mut m = _mm256_setzero_ps();
    for k in 0..vecs {
        // max_ps returns its second operand when either is NaN: a NaN |x| leaves m as it was.
        m = _mm256_max_ps(_mm256_andnot_ps(sign, load(k)), m);
    }
    let m4 = _mm_max_ps(_mm256_extractf128_ps(m, 1), _mm256_castps256_ps128(m));
    let m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    let amax = _mm_cvtss_f32(_mm_max_ss(m4, _mm_movehdup_ps(m4)));
    if amax == 0.0 {
        *yb = BlockQ8K::default();
        return;
    }
    let target = _mm256_set1_ps(amax);
    let first = (0..vecs)
        .find_map(|k| {
            let eq = _mm256_cmp_ps::<_CMP_EQ_OQ>(_mm256_andnot_ps(sign, load(k)), target);
            let bits = _mm256_movemask_ps(eq);
            (bits != 0).then(|| LANES * k + bits.trailing_zeros() as usize)
        })
        .expect("amax is the magnitude of some element");
    let iscale = -Q8K_MAX / xb[first];
    let (vs, magic) = (_mm256_set1_ps(iscale), _mm256_set1_ps(ROUND_MAGIC));
    let (mask, offset) = (
        _mm256_set1_epi32(MANTISSA_MASK),
        _mm256_set1_epi32(ROUND_MAGIC_MANTISSA),
    );
    let (top, low_byte) = (_mm256_set1_epi32(Q8K_MAX as i32), _mm256_set1_epi32(0xff));
    for (j, out) in yb.qs.chunks_exact_mut(4 * LANES).enumerate() {
        let q: [__m256i; 4] = array_of!(4, |k| {
            let r = _mm256_add_ps(_mm256_mul_ps(vs, load(4 * j + k)), magic);
            let i = _mm256_sub_epi32(_mm256_and_si256(_mm256_castps_si256(r), mask), offset);
            // The low byte, as C's store into an int8_t keeps it (0..=255: packs exactly).
            _mm256_and_si256(_mm256_min_epi32(i, top), low_byte)
        });
        let w = _mm256_packus_epi16(
            _mm256_packus_epi32(q[0], q[1]),
            _mm256_packus_epi32(q[2], q[3]),
        );
        // The packs interleave 128-bit halves: dwords come out as (0 4 1 5 2 6 3 7).
        let w = _mm256_permutevar8x32_epi32(w, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        // SAFETY: out is 32 writable bytes; the store is unaligned.
        unsafe { _mm256_storeu_si256(out.as_mut_ptr().cast(), w) };
    }
    // Sixteen sums of sixteen: pairs by maddubs with ones (u8 1 × i8 q), fours by madd, then
    // two rounds of horizontal adds: hadd(hadd(a, b), hadd(c, d)) holds the first sums of a..d
    // (bytes 0..16 of each) in its low half and their second sums (bytes 16..32) in its high.
    let ones8 = _mm256_set1_epi8(1);
    let four: [__m256i; 8] = array_of!(8, |k| {
        let v = load32(&yb.qs[4 * LANES * k..]);
        _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, v), _mm256_set1_epi16(1))
    });
    let sums = |a: usize| {
        _mm256_hadd_epi32(
            _mm256_hadd_epi32(four[a], four[a + 1]),
            _mm256_hadd_epi32(four[a + 2], four[a + 3]),
        )
    };
    // Sixteens of at most 16·128 in magnitude: the pack to i16 is exact. Its low half holds the
    // even sums 0, 2, .., 14, its high half the odd ones; interleaving puts them in order.
    let p = _mm256_packs_epi32(sums(0), sums(4));
    let (even, odd) = (_mm256_castsi256_si128(p), _mm256_extracti128_si256(p, 1));
    let (first, second) = yb.bsums.split_at_mut(BSUM_LEN / 2);
    // SAFETY: each half of bsums is 8 writable i16s (16 bytes); the stores are unaligned.
    unsafe {
        _mm_storeu_si128(first.as_mut_ptr().cast(), _mm_unpacklo_epi16(even, odd));
        _mm_storeu_si128(second.as_mut_ptr().cast(), _mm_unpackhi_epi16(even, odd));
    }
    debug_assert!(yb
        .bsums
        .iter()
        .zip(yb.qs.chunks_exact(BSUM_LEN))
        .all(|(&s, q)| i32::from(s) == q.iter().map(|&v| i32::from(v)).sum::<i32>()));
    yb.d = 1.0 / iscale;
}

#[target_feature(enable = "avx2,fma,f16c")]
fn quantize_act_q8_k_impl(x: &[f32], y: &mut [BlockQ8K]) {
    for (xb, yb) in x.chunks_exact(QK_K).zip(y.iter_mut()) {
        quantize_block_q8_k(xb.try_into().expect("a whole block"), yb);
    }
}

/// `dequantize::quantize_act_q8_k` with AVX2 (same bits).
///
/// # Panics
/// If `x.len() != 256 × y.len()`.
pub(in crate::kernels) fn quantize_act_q8_k(x: &[f32], y: &mut [BlockQ8K]) {
    assert_eq!(
        x.len(),
        y.len() * QK_K,
        "quantize_act_q8_k: length mismatch"
    );
    // SAFETY: only reachable through the table built after AVX2, FMA and F16C were detected.
    unsafe { quantize_act_q8_k_impl(x, y) }
}

// ---- the table's rows ----------------------------------------------------------------------

/// The generic path's rows for this tier: the oracle's, with this tier's kernels in place of
/// every dot product and a tile kernel for every type.
pub(in crate::kernels) fn entries() -> [Entry; SCALAR.len()] {
    let mut rows = SCALAR;
    for e in &mut rows {
        let tile = wide::fill(e).or_else(|| kernels::fill(e));
        if let Some(tile) = tile.or_else(|| iq1::fill(e)) {
            e.tile = Some(tile);
        }
        if e.ty == GgmlType::Q5_0 {
            e.tile = Some(tile_q5_0);
        }
        e.packed = super::avx2_packed::packed(e.ty);
        if e.ty == GgmlType::Mxfp4 {
            let token = super::Avx2::detect().expect("the AVX2 table is built where AVX2 runs");
            e.run = Some(token.run_mxfp4());
            e.tile = Some(tile_mxfp4);
        }
    }
    rows
}
