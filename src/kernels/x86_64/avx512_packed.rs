//! The AVX-512 decode-order kernels of copies packed in groups of sixteen rows (`kernels::pack`),
//! for one token and for several at once (a serving step's decoded tokens):
//! Q4_K ([`Layout::Q4Kx16`](crate::kernels::Layout::Q4Kx16)) and IQ4_XS
//! ([`Layout::Iq4XsX16`](crate::kernels::Layout::Iq4XsX16)) here, Q6_K and Q5_K in
//! `avx512_packed_k.rs`, and the helpers they share.
//!
//! Q4_K is summed in the order of llama.cpp's repacked gemv (`oracle_repacked::dot_q4_k_q8_k_repacked`):
//! ```text
//! per super-block: isum = Σ_j sc_j·Σ q·y,  imin = Σ_j m_j·(bsums[2j] + bsums[2j+1])   (exact)
//!                  acc = fma(isum, d·d_y, acc);  acc_min = fma(imin, dmin·d_y, acc_min)
//! result = acc − acc_min
//! ```
//! The packed step puts row r's bytes in lane r of every vector, so the kernel forms all
//! sixteen rows' integers side by side and never reduces across lanes: per 64-byte vector of
//! nibbles two `vpdpbusd` against four activation bytes broadcast (one for the low nibbles'
//! sub-block, one for the high), one accumulator per sub-block; then the sixteen rows' scales
//! and mins, unpacked from their twelve byte planes all at once, multiply the sub-block sums.
//! The integers are the oracle's exactly, and the float chains run one per lane in its order,
//! so the outputs are its bits.
//!
//! IQ4_XS is summed in `vec_dot`'s order (`oracle_vec_dot::dot_iq4_xs_q8_k`): eight i32 lanes per row,
//! lane l taking elements with `(e mod 32) / 4 == l`, `acc[l] = fma(d, sumi[l], acc[l])` per
//! super-block and `hsum_float_8` at the end. Here each of those eight lanes is a vector of its
//! own, holding it for all sixteen rows, so every step is vertical and `hsum_float_8`'s tree
//! is three rounds of vector adds. A 64-byte vector of nibbles gives two four-element groups
//! per row (low and high nibbles, lanes q and q + 4); each group's values come from the
//! IQ4_NL table by `vpshufb`, are multiplied with ggml's sign trick (|v| times the activation
//! with v's sign, −128 wrapping as `vpsignb` does), and scaled by the sub-block's 6-bit scale
//! in `vpdpwssd`.
//!
//! Q6_K and Q5_K, in `vec_dot`'s order too, are in `avx512_packed_k.rs`.
//!
//! The `#[target_feature]` functions are private; the table hands out the safe wrapper only after
//! AVX2, FMA, F16C and AVX-512 F/BW/VL/VNNI were detected.

use std::arch::x86_64::*;

use super::avx512_packed_k::{
    gemv16_q5_k_packed, gemv16_q5_k_tokens, gemv16_q6_k_packed, gemv16_q6_k_tokens,
};
use super::packed_kernels::{
    packed_gemv, packed_helpers, packed_table, pass_of, scale_min_bytes, StepPrefetch, GROUP,
    LANES, PAIR, PAIRS, PAIR_WORDS, SUB, SUBS, XS_QS_WORD, XS_STEP, XS_SUB_WORDS,
};
use crate::kernels::blocks::{BlockQ8K, KVALUES_IQ4NL};
use crate::kernels::pack::{K_DMIN_AT, K_QS_AT, K_SCALES_AT, K_STEP, PACK_ROWS};

/// Bytes of sixteen f16 values, one per row (a packed step's `d` or `dmin`).
const F16_ROWS: usize = 2 * PACK_ROWS;
/// Q8_K `bsums` entries (16 elements each) per 32-element sub-block.
const BSUMS_PER_SUB: usize = 2;

/// This tier's width for the helpers both tiers share (`packed_kernels.rs`): 512-bit vectors,
/// the sixteen rows of a packed step at once, `vpdpwssd` for the i16 pair dots.
mod w {
    pub(super) use std::arch::x86_64::{
        __m512 as F, __m512i as I, _mm512_add_ps as add_ps, _mm512_and_si512 as and,
        _mm512_cvtepi32_ps as cvtepi32_ps, _mm512_dpwssd_epi32 as dot_i16_acc,
        _mm512_fmadd_ps as fmadd_ps, _mm512_mul_ps as mul_ps, _mm512_mullo_epi32 as mullo32,
        _mm512_or_si512 as or, _mm512_set1_epi32 as set1_32, _mm512_set1_epi8 as set1_8,
        _mm512_setzero_ps as setzero_ps, _mm512_setzero_si512 as setzero_si,
        _mm512_sll_epi16 as sll16, _mm512_slli_epi32 as slli32, _mm512_srl_epi16 as srl16,
        _mm512_srl_epi32 as srl32, _mm512_storeu_ps as storeu_ps, _mm512_sub_epi32 as sub32,
        _mm512_sub_ps as sub_ps,
    };
    /// f32 lanes of `F`.
    pub(super) const WIDTH: usize = 16;
}

packed_helpers!("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni");

packed_table! {
    tile: super::avx512_packed_tile::tile_packed;
    Q4K => (Q4Kx16, Repacked, gemv16_q4_k_packed, Some(gemv16_q4_k_tokens)),
    Iq4Xs => (Iq4XsX16, Dot, gemv16_iq4_xs_packed, Some(gemv16_iq4_xs_tokens)),
    Q6K => (Q6Kx16, Dot, gemv16_q6_k_packed, Some(gemv16_q6_k_tokens)),
    Q5K => (Q5Kx16, Dot, gemv16_q5_k_packed, Some(gemv16_q5_k_tokens)),
}

packed_gemv!(
    gemv16_q4_k_packed = gemv16_q4_k_impl("Q4_K", K_STEP, "oracle_repacked::dot_q4_k_q8_k_repacked"),
    tokens gemv16_q4_k_tokens = gemv16_q4_k_tokens_impl
);

/// The sixteen rows' scales and mins of one super-block as i32 lanes, sub-block by sub-block,
/// from the twelve byte planes at `planes` (`dequantize::get_scale_min_k4` on every lane).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
pub(super) fn scales_mins(planes: &[u8]) -> ([__m512i; SUBS], [__m512i; SUBS]) {
    let (sc, mn) = scale_min_bytes(planes);
    (
        sc.map(|v| _mm512_cvtepu8_epi32(v)),
        mn.map(|v| _mm512_cvtepu8_epi32(v)),
    )
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn gemv16_q4_k_impl(group: &[u8], y: &[BlockQ8K], out: &mut [f32; PACK_ROWS]) {
    let pf = StepPrefetch::new(group, K_STEP);
    let low = _mm512_set1_epi8(0x0f);
    let mut acc = _mm512_setzero_ps();
    let mut acc_min = _mm512_setzero_ps();
    for (i, b) in y.iter().enumerate() {
        let step = &group[i * K_STEP..(i + 1) * K_STEP];
        let (sc, mn) = scales_mins(&step[K_SCALES_AT..K_QS_AT]);
        let qs = &step[K_QS_AT..];
        let mut s = [_mm512_setzero_si512(); SUBS];
        for o in 0..PAIR_WORDS {
            pf.part(i, o, PAIR_WORDS);
            for j in 0..PAIRS {
                let k = PAIR_WORDS * j + o;
                // SAFETY: vector k is the 64 bytes at 64k of the nibble part, inside `qs`
                // (32 vectors, K_STEP − K_QS_AT bytes).
                let v = unsafe { _mm512_loadu_si512(qs[64 * k..64 * k + 64].as_ptr().cast()) };
                let lo = _mm512_and_si512(v, low);
                let hi = _mm512_and_si512(_mm512_srli_epi16::<4>(v), low);
                let e = PAIR * j + GROUP * o;
                s[2 * j] = _mm512_dpbusd_epi32(s[2 * j], lo, bcast4(b, e));
                s[2 * j + 1] = _mm512_dpbusd_epi32(s[2 * j + 1], hi, bcast4(b, e + SUB));
            }
        }
        q4k_close(&s, (&sc, &mn), b, step, (&mut acc, &mut acc_min));
    }
    store_chains(&[acc, acc_min], true, out);
}

/// The end of one super-block for one token: the sub-block sums `s` times the rows' scales,
/// the mins times the activation's `bsums`, both exact, then the two float chains' steps.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn q4k_close(
    s: &[__m512i; SUBS],
    (sc, mn): (&[__m512i; SUBS], &[__m512i; SUBS]),
    b: &BlockQ8K,
    step: &[u8],
    acc: (&mut __m512, &mut __m512),
) {
    let mut isum = _mm512_setzero_si512();
    for j in 0..SUBS {
        isum = _mm512_add_epi32(isum, _mm512_mullo_epi32(sc[j], s[j]));
    }
    q4k_close_sum(isum, mn, b, step, acc);
}

/// [`q4k_close`] from the scaled sum `isum` (Σ_j sc_j·s_j, exact in i32 whatever the order).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn q4k_close_sum(
    isum: __m512i,
    mn: &[__m512i; SUBS],
    b: &BlockQ8K,
    step: &[u8],
    (acc, acc_min): (&mut __m512, &mut __m512),
) {
    let mut imin = _mm512_setzero_si512();
    for (m, bs) in mn.iter().zip(b.bsums.chunks_exact(BSUMS_PER_SUB)) {
        let bsum = i32::from(bs[0]) + i32::from(bs[1]);
        imin = _mm512_add_epi32(imin, _mm512_mullo_epi32(*m, _mm512_set1_epi32(bsum)));
    }
    assert!(step.len() >= K_DMIN_AT + F16_ROWS, "Q4_K step cut short");
    // SAFETY: the sixteen f16 scales and the sixteen mins are the 32 bytes at 0 and at
    // K_DMIN_AT of the step (length asserted).
    let (d, dmin) = unsafe {
        (
            _mm512_cvtph_ps(_mm256_loadu_si256(step.as_ptr().cast())),
            _mm512_cvtph_ps(_mm256_loadu_si256(step[K_DMIN_AT..].as_ptr().cast())),
        )
    };
    let dy = _mm512_set1_ps(b.d);
    *acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(d, dy), *acc);
    *acc_min = _mm512_fmadd_ps(_mm512_cvtepi32_ps(imin), _mm512_mul_ps(dmin, dy), *acc_min);
}

/// `T` tokens (a constant, so that their sums stay in registers): per pair of sub-blocks, each
/// nibble vector is split once and meets every token's activation bytes.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn gemv16_q4_k_tokens_impl<const T: usize>(group: &[u8], ys: &[&[BlockQ8K]], out: &mut [f32]) {
    let (ys, n, pf) = pass_of::<T>(group, K_STEP, ys);
    let low = _mm512_set1_epi8(0x0f);
    let mut acc = [(_mm512_setzero_ps(), _mm512_setzero_ps()); T];
    for i in 0..n {
        let step = &group[i * K_STEP..(i + 1) * K_STEP];
        let (sc, mn) = scales_mins(&step[K_SCALES_AT..K_QS_AT]);
        let qs = &step[K_QS_AT..];
        let b: [&BlockQ8K; T] = std::array::from_fn(|t| &ys[t][i]);
        let mut isum = [_mm512_setzero_si512(); T];
        for j in 0..PAIRS {
            let mut s = [[_mm512_setzero_si512(); 2]; T];
            for o in 0..PAIR_WORDS {
                let k = PAIR_WORDS * j + o;
                pf.part(i, k, PAIR_WORDS * PAIRS);
                // SAFETY: vector k is the 64 bytes at 64k of the nibble part, inside `qs`
                // (32 vectors, K_STEP − K_QS_AT bytes).
                let v = unsafe { _mm512_loadu_si512(qs[64 * k..64 * k + 64].as_ptr().cast()) };
                let lo = _mm512_and_si512(v, low);
                let hi = _mm512_and_si512(_mm512_srli_epi16::<4>(v), low);
                let e = PAIR * j + GROUP * o;
                for t in 0..T {
                    s[t][0] = _mm512_dpbusd_epi32(s[t][0], lo, bcast4(b[t], e));
                    s[t][1] = _mm512_dpbusd_epi32(s[t][1], hi, bcast4(b[t], e + SUB));
                }
            }
            for t in 0..T {
                let lo = _mm512_mullo_epi32(sc[2 * j], s[t][0]);
                let hi = _mm512_mullo_epi32(sc[2 * j + 1], s[t][1]);
                isum[t] = _mm512_add_epi32(_mm512_add_epi32(isum[t], lo), hi);
            }
        }
        for t in 0..T {
            q4k_close_sum(isum[t], &mn, b[t], step, (&mut acc[t].0, &mut acc[t].1));
        }
    }
    for (&(acc, acc_min), o) in acc.iter().zip(out.chunks_exact_mut(PACK_ROWS)) {
        store_chains(&[acc, acc_min], true, o);
    }
}

/// Word `w` (the 64 bytes at 64w) of a packed step.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
pub(super) fn word(step: &[u8], w: usize) -> __m512i {
    let v = &step[64 * w..64 * w + 64];
    // SAFETY: 64 bytes (sliced above); the load is unaligned.
    unsafe { _mm512_loadu_si512(v.as_ptr().cast()) }
}

packed_gemv!(
    gemv16_iq4_xs_packed = gemv16_iq4_xs_impl("IQ4_XS", XS_STEP, "oracle_vec_dot::dot_iq4_xs_q8_k"),
    tokens gemv16_iq4_xs_tokens = gemv16_iq4_xs_tokens_impl
);

/// IQ4_XS sub-block `sub`'s scale as the same i16 in both halves of each row's lane.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn xs_scale_pairs(w0: __m512i, w1: __m512i, sub: usize) -> __m512i {
    let ls = xs_scale(w0, w1, sub);
    pair_i16(ls, ls)
}

/// IQ4_XS values v, given as `(abs, neg)` (|v| and v's sign mask: [`xs_values`]), against
/// token `b`'s four activation bytes at `e`, scaled by `ls` into lane sum `sum`: ggml's sign
/// trick (|v| times the activation with v's sign, −128 wrapping as `vpsignb` does).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn xs_add(
    sum: &mut __m512i,
    (abs, neg): (__m512i, __mmask64),
    b: &BlockQ8K,
    e: usize,
    ls: __m512i,
) {
    let yb = bcast4(b, e);
    let ys = _mm512_mask_sub_epi8(yb, neg, _mm512_setzero_si512(), yb);
    *sum = _mm512_dpwssd_epi32(*sum, _mm512_maddubs_epi16(abs, ys), ls);
}

/// The IQ4_XS values of nibbles `nib` from the table, as |v| and v's sign mask.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn xs_values(table: __m512i, nib: __m512i) -> (__m512i, __mmask64) {
    let val = _mm512_shuffle_epi8(table, nib);
    (_mm512_abs_epi8(val), _mm512_movepi8_mask(val))
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn gemv16_iq4_xs_impl(group: &[u8], y: &[BlockQ8K], out: &mut [f32; PACK_ROWS]) {
    let pf = StepPrefetch::new(group, XS_STEP);
    // SAFETY: the table is 16 bytes.
    let table = _mm512_broadcast_i32x4(unsafe { _mm_loadu_si128(KVALUES_IQ4NL.as_ptr().cast()) });
    let low = _mm512_set1_epi8(0x0f);
    let zero = _mm512_setzero_si512();
    let mut acc = [_mm512_setzero_ps(); LANES];
    for (i, b) in y.iter().enumerate() {
        let step = &group[i * XS_STEP..(i + 1) * XS_STEP];
        let (w0, w1) = (word(step, 0), word(step, 1));
        let d = _mm512_mul_ps(
            _mm512_cvtph_ps(_mm512_cvtepi32_epi16(w0)),
            _mm512_set1_ps(b.d),
        );
        let mut s = [zero; LANES];
        for sub in 0..SUBS {
            pf.part(i, sub, SUBS);
            let ls = xs_scale_pairs(w0, w1, sub);
            for q in 0..XS_SUB_WORDS {
                let v = word(step, XS_QS_WORD + XS_SUB_WORDS * sub + q);
                let e = SUB * sub + GROUP * q;
                let lo = xs_values(table, _mm512_and_si512(v, low));
                xs_add(&mut s[q], lo, b, e, ls);
                let hi = xs_values(table, _mm512_and_si512(_mm512_srli_epi16::<4>(v), low));
                xs_add(&mut s[q + XS_SUB_WORDS], hi, b, e + SUB / 2, ls);
            }
        }
        for l in 0..LANES {
            acc[l] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(s[l]), acc[l]);
        }
    }
    store_hsum(&acc, None, out);
}

/// `T` tokens (a constant, so that their sums stay in registers). Nibble column `q` outer: its
/// words in every sub-block feed only lane sums q and q + 4, which each token keeps in two
/// registers; the two lanes' float steps follow the column.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn gemv16_iq4_xs_tokens_impl<const T: usize>(group: &[u8], ys: &[&[BlockQ8K]], out: &mut [f32]) {
    let (ys, n, pf) = pass_of::<T>(group, XS_STEP, ys);
    // SAFETY: the table is 16 bytes.
    let table = _mm512_broadcast_i32x4(unsafe { _mm_loadu_si128(KVALUES_IQ4NL.as_ptr().cast()) });
    let low = _mm512_set1_epi8(0x0f);
    let mut acc = [[_mm512_setzero_ps(); LANES]; T];
    for i in 0..n {
        let step = &group[i * XS_STEP..(i + 1) * XS_STEP];
        let (w0, w1) = (word(step, 0), word(step, 1));
        let dx = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(w0));
        let b: [&BlockQ8K; T] = std::array::from_fn(|t| &ys[t][i]);
        let ls: [__m512i; SUBS] = std::array::from_fn(|sub| xs_scale_pairs(w0, w1, sub));
        for q in 0..XS_SUB_WORDS {
            let mut s = [[_mm512_setzero_si512(); 2]; T];
            for (sub, &ls) in ls.iter().enumerate() {
                pf.part(i, XS_SUB_WORDS * sub + q, SUBS * XS_SUB_WORDS);
                let v = word(step, XS_QS_WORD + XS_SUB_WORDS * sub + q);
                let e = SUB * sub + GROUP * q;
                let lo = xs_values(table, _mm512_and_si512(v, low));
                let hi = xs_values(table, _mm512_and_si512(_mm512_srli_epi16::<4>(v), low));
                for (t, s) in s.iter_mut().enumerate() {
                    xs_add(&mut s[0], lo, b[t], e, ls);
                    xs_add(&mut s[1], hi, b[t], e + SUB / 2, ls);
                }
            }
            for (t, acc) in acc.iter_mut().enumerate() {
                let d = _mm512_mul_ps(dx, _mm512_set1_ps(b[t].d));
                acc[q] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(s[t][0]), acc[q]);
                let l = q + XS_SUB_WORDS;
                acc[l] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(s[t][1]), acc[l]);
            }
        }
    }
    for (acc, o) in acc.iter().zip(out.chunks_exact_mut(PACK_ROWS)) {
        store_hsum(acc, None, o);
    }
}
