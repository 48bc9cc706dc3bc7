//! The AVX-512 decode-order kernels (one token, and several at once) of packed Q6_K ([`Layout::Q6Kx16`](crate::kernels::Layout::Q6Kx16))
//! and Q5_K ([`Layout::Q5Kx16`](crate::kernels::Layout::Q5Kx16)) copies, both in `vec_dot`'s
//! order (`oracle_vec_dot::dot_q6_k_q8_k`, `oracle_vec_dot::dot_q5_k_q8_k`), with `vec_dot`'s eight lanes as
//! vectors over the sixteen rows as in `avx512_packed.rs`'s IQ4_XS kernel.
//!
//! Q6_K: per four-element group the 6-bit codes from a `ql` and a `qh`
//! word, `vpmaddubsw` against the activations, `vpdpwssd` by the sixteen-element sub-block's
//! scale; the lane's −32 bias (`32·(bsums[2l]·sc[2l] + bsums[2l+1]·sc[2l+1])`, which ggml takes
//! from lane l's own pair of scales) by one more `vpdpwssd` per lane.
//!
//! Q5_K: per four-element group the nibbles of a `qs` word with their fifth bits from a `qh`
//! word, `vpmaddubsw` and `vpdpwssd` by the 32-element sub-block's 6-bit scale; the min terms
//! `Σ m_j·(bsums[2j] + bsums[2j+1])` (the pair sums wrapping in i16, as `_mm_hadd_epi16`) by
//! four `vpdpwssd` per super-block, into the one per-row float `summs` the oracle keeps.
//!
//! The `#[target_feature]` functions are private; the table hands out the safe wrappers only
//! after AVX2, FMA, F16C and AVX-512 F/BW/VL/VNNI were detected.

use std::arch::x86_64::*;

use super::avx512_packed::{bcast4, pair_i16, q5_fifth_bit, q5_scale_min, store_hsum, word};
use super::packed_kernels::{
    packed_gemv, pass_of, StepPrefetch, GROUP, LANES, PAIR, Q5_QH_WORD, Q5_QS_WORD, Q5_SC_WORD,
    Q5_STEP, Q6_HALF, Q6_QH_WORD, Q6_SC_WORD, Q6_STEP, SUB, SUBS,
};
use crate::kernels::blocks::BlockQ8K;
use crate::kernels::pack::{PACK_ROWS, Q6_K_D_AT};

/// Q6_K codes are stored as `q + 32`: the bias's shift.
const Q6_BIAS_SHIFT: u32 = 5;
/// Sixteen-element sub-blocks, one i8 scale each.
const Q6_SUB: usize = 16;
/// Sub-blocks of one half.
const Q6_HALF_SUBS: usize = Q6_HALF / Q6_SUB;

/// The four code vectors of one Q6_K word triple: half `j`, byte group `b4` (`ql` words
/// 16j + b4 and 16j + 8 + b4, `qh` word 32 + 8j + b4); vector k holds the 6-bit codes of
/// elements `128j + 32k + 4·b4 ..+ 4` of every row.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
pub(super) fn q6_codes(step: &[u8], j: usize, b4: usize) -> [__m512i; 4] {
    let m4 = _mm512_set1_epi8(0x0f);
    let m2 = _mm512_set1_epi8(0x30);
    let l0 = word(step, 16 * j + b4);
    let l1 = word(step, 16 * j + 8 + b4);
    let h = word(step, Q6_QH_WORD + 8 * j + b4);
    let or_and =
        |a: __m512i, b: __m512i| _mm512_or_si512(_mm512_and_si512(a, m4), _mm512_and_si512(b, m2));
    [
        or_and(l0, _mm512_slli_epi16::<4>(h)),
        or_and(l1, _mm512_slli_epi16::<2>(h)),
        or_and(_mm512_srli_epi16::<4>(l0), h),
        or_and(_mm512_srli_epi16::<4>(l1), _mm512_srli_epi16::<2>(h)),
    ]
}

packed_gemv!(
    gemv16_q6_k_packed = gemv16_q6_k_impl("Q6_K", Q6_STEP, "oracle_vec_dot::dot_q6_k_q8_k"),
    tokens gemv16_q6_k_tokens = gemv16_q6_k_tokens_impl
);

/// A `vpshufb` control that puts, in every i32 lane, bytes `a` and `b` of that lane in the high
/// byte of its two i16 halves (so `vpsraw` by 8 sign-extends them).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn high_bytes(a: usize, b: usize) -> __m512i {
    let ctl: [u8; 16] = std::array::from_fn(|i| {
        let lane = (i / 4 * 4) as u8;
        if i % 4 < 2 {
            lane + a as u8
        } else {
            lane + b as u8
        }
    });
    // SAFETY: 16 bytes.
    _mm512_broadcast_i32x4(unsafe { _mm_loadu_si128(ctl.as_ptr().cast()) })
}

/// The `vpshufb` controls of a Q6_K step's scales: byte t of each lane into both i16 halves
/// (`dup`), bytes 2h and 2h + 1 into the two (`pair`), each then sign-extended by `vpsraw` 8.
#[derive(Clone, Copy)]
struct Q6Controls {
    dup: [__m512i; GROUP],
    pair: [__m512i; 2],
}

impl Q6Controls {
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
    #[inline]
    fn new() -> Q6Controls {
        Q6Controls {
            dup: std::array::from_fn(|t| high_bytes(t, t)),
            pair: std::array::from_fn(|h| high_bytes(2 * h, 2 * h + 1)),
        }
    }
}

/// A packed Q6_K step's scale words, and half `j`'s eight sub-block scales, each as the same
/// i16 in both halves of each row's lane.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn q6_half_scales(words: &[__m512i; GROUP], c: &Q6Controls, j: usize) -> [__m512i; Q6_HALF_SUBS] {
    std::array::from_fn(|k| {
        let s = Q6_HALF_SUBS * j + k;
        _mm512_srai_epi16::<8>(_mm512_shuffle_epi8(words[s / GROUP], c.dup[s % GROUP]))
    })
}

/// Codes `q` (four-byte column `b4` of half `j`: [`q6_codes`]) against token `b`, into lane
/// sum `s[b4]`; `sc`: the half's scales.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn q6_add(
    s: &mut [__m512i; LANES],
    q: &[__m512i; 4],
    b: &BlockQ8K,
    (j, b4): (usize, usize),
    sc: &[__m512i; Q6_HALF_SUBS],
) {
    q6_add_lane(&mut s[b4], q, b, (j, b4), sc);
}

/// [`q6_add`] into the one lane sum it adds to.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn q6_add_lane(
    sum: &mut __m512i,
    q: &[__m512i; 4],
    b: &BlockQ8K,
    (j, b4): (usize, usize),
    sc: &[__m512i; Q6_HALF_SUBS],
) {
    for (k, qk) in q.iter().enumerate() {
        let e = Q6_HALF * j + SUB * k + GROUP * b4;
        let pairs = _mm512_maddubs_epi16(*qk, bcast4(b, e));
        // Sub-block (e / 16) within this half: 2k + b4 / 4.
        *sum = _mm512_dpwssd_epi32(*sum, pairs, sc[2 * k + b4 / (Q6_SUB / GROUP)]);
    }
}

/// A token's step done: each lane's bias `32·(bsums[2l]·sc[2l] + bsums[2l+1]·sc[2l+1])` taken
/// off its sum `s[l]` (scales from the step's scale `words`), then `acc[l] = fma(y.d·d, s[l],
/// acc[l])` with the rows' f32 scales `dx`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn q6_close(
    s: &[__m512i; LANES],
    b: &BlockQ8K,
    sw: (&[__m512i; GROUP], &Q6Controls),
    dx: __m512,
    acc: &mut [__m512; LANES],
) {
    let d = _mm512_mul_ps(_mm512_set1_ps(b.d), dx);
    for (l, acc) in acc.iter_mut().enumerate() {
        q6_close_lane(s[l], l, b, sw, d, acc);
    }
}

/// Lane `l` of [`q6_close`]: its sum `sl`'s bias taken off, then its float step (`d`: the
/// token's scale times the rows').
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn q6_close_lane(
    sl: __m512i,
    l: usize,
    b: &BlockQ8K,
    (words, c): (&[__m512i; GROUP], &Q6Controls),
    d: __m512,
    acc: &mut __m512,
) {
    let bs = |k: usize| i32::from(b.bsums[k] as u16);
    let scp = _mm512_srai_epi16::<8>(_mm512_shuffle_epi8(words[l / 2], c.pair[l % 2]));
    let bsp = _mm512_set1_epi32(bs(2 * l) | (bs(2 * l + 1) << 16));
    let bias = _mm512_dpwssd_epi32(_mm512_setzero_si512(), scp, bsp);
    let sl = _mm512_sub_epi32(sl, _mm512_slli_epi32::<{ Q6_BIAS_SHIFT }>(bias));
    *acc = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(sl), *acc);
}

/// A packed Q6_K step's scale words and its rows' f32 scales.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn q6_step_scales(step: &[u8]) -> ([__m512i; GROUP], __m512) {
    let words = std::array::from_fn(|w| word(step, Q6_SC_WORD + w));
    // SAFETY: the sixteen f16 scales are the 32 bytes at Q6_K_D_AT of the step.
    let dx = unsafe { _mm512_cvtph_ps(_mm256_loadu_si256(step[Q6_K_D_AT..].as_ptr().cast())) };
    (words, dx)
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn gemv16_q6_k_impl(group: &[u8], y: &[BlockQ8K], out: &mut [f32; PACK_ROWS]) {
    let pf = StepPrefetch::new(group, Q6_STEP);
    let ctl = Q6Controls::new();
    let mut acc = [_mm512_setzero_ps(); LANES];
    for (i, b) in y.iter().enumerate() {
        let step = &group[i * Q6_STEP..(i + 1) * Q6_STEP];
        let (words, dx) = q6_step_scales(step);
        let mut s = [_mm512_setzero_si512(); LANES];
        for j in 0..2 {
            let sc = q6_half_scales(&words, &ctl, j);
            for b4 in 0..LANES {
                pf.part(i, LANES * j + b4, 2 * LANES);
                q6_add(&mut s, &q6_codes(step, j, b4), b, (j, b4), &sc);
            }
        }
        q6_close(&s, b, (&words, &ctl), dx, &mut acc);
    }
    store_hsum(&acc, None, out);
}

/// `T` tokens (a constant, so that their sums stay in registers): each packed step's codes are
/// formed once for up to eight tokens, whose integers and float chains are the single token's
/// (decode's order for a serving step's decoded tokens against a Q6_K matrix). A single token
/// keeps [`gemv16_q6_k_packed`], which unpacks as it goes: through a form that stored the
/// step's codes first, the 1B Q6_K model decoded 23% slower at one thread (tg32, three rounds).
///
/// Column `b4` outer: its codes in both halves feed only lane sum `b4` of each token, so each
/// token keeps one sum in a register, and the lane's float step is taken as soon as the column
/// is done (each lane's chain is its own, so the single token's order of lanes within a step
/// does not matter).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn gemv16_q6_k_tokens_impl<const T: usize>(group: &[u8], ys: &[&[BlockQ8K]], out: &mut [f32]) {
    let (ys, n, pf) = pass_of::<T>(group, Q6_STEP, ys);
    let ctl = Q6Controls::new();
    let mut acc = [[_mm512_setzero_ps(); LANES]; T];
    for i in 0..n {
        let step = &group[i * Q6_STEP..(i + 1) * Q6_STEP];
        let (words, dx) = q6_step_scales(step);
        let sc: [[__m512i; Q6_HALF_SUBS]; 2] =
            std::array::from_fn(|j| q6_half_scales(&words, &ctl, j));
        let b: [&BlockQ8K; T] = std::array::from_fn(|t| &ys[t][i]);
        let d: [__m512; T] = std::array::from_fn(|t| _mm512_mul_ps(_mm512_set1_ps(b[t].d), dx));
        for b4 in 0..LANES {
            let mut s = [_mm512_setzero_si512(); T];
            for (j, sc) in sc.iter().enumerate() {
                pf.part(i, LANES * j + b4, 2 * LANES);
                let q = q6_codes(step, j, b4);
                for t in 0..T {
                    q6_add_lane(&mut s[t], &q, b[t], (j, b4), sc);
                }
            }
            for (t, acc) in acc.iter_mut().enumerate() {
                q6_close_lane(s[t], b4, b[t], (&words, &ctl), d[t], &mut acc[b4]);
            }
        }
    }
    for (acc, o) in acc.iter().zip(out.chunks_exact_mut(PACK_ROWS)) {
        store_hsum(acc, None, o);
    }
}

packed_gemv!(
    gemv16_q5_k_packed = gemv16_q5_k_impl("Q5_K", Q5_STEP, "oracle_vec_dot::dot_q5_k_q8_k"),
    tokens gemv16_q5_k_tokens = gemv16_q5_k_tokens_impl
);

/// A packed Q5_K step's word 0 (the rows' d and dmin as f16 pairs), and its sub-block scales
/// (each as the same i16 in both halves of the lane) and mins.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn q5_step_scales(step: &[u8]) -> (__m512i, [__m512i; SUBS], [__m512i; SUBS]) {
    let w0 = word(step, 0);
    let sw: [__m512i; 3] = std::array::from_fn(|k| word(step, Q5_SC_WORD + k));
    let mut sc = [_mm512_setzero_si512(); SUBS];
    let mut mn = sc;
    for j in 0..SUBS {
        let (s, m) = q5_scale_min(&sw, j);
        // The scale (≤ 63) as the same i16 in both halves of the lane.
        sc[j] = pair_i16(s, s);
        mn[j] = m;
    }
    (w0, sc, mn)
}

/// Σ_j m_j·s_j for token `b`, s_j the i16 (wrapping) sum of bsums 2j and 2j+1: pairs of mins
/// as i16 against pairs of sums.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn q5_min_total(mn: &[__m512i; SUBS], b: &BlockQ8K) -> __m512i {
    let s16 = |j: usize| b.bsums[2 * j].wrapping_add(b.bsums[2 * j + 1]) as u16;
    let mut total = _mm512_setzero_si512();
    for k in 0..SUBS / 2 {
        let mpair = _mm512_or_si512(mn[2 * k], _mm512_slli_epi32::<16>(mn[2 * k + 1]));
        let spair = i32::from(s16(2 * k)) | (i32::from(s16(2 * k + 1)) << 16);
        total = _mm512_dpwssd_epi32(total, mpair, _mm512_set1_epi32(spair));
    }
    total
}

/// The 5-bit codes of sub-blocks 2j (`lo`) and 2j + 1 (`hi`) in column `b4` of a packed step
/// (`h`: the column's `qh` word).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn q5_codes(step: &[u8], h: __m512i, j: usize, b4: usize) -> (__m512i, __m512i) {
    let m4 = _mm512_set1_epi8(0x0f);
    let q = word(step, Q5_QS_WORD + 8 * j + b4);
    let lo = _mm512_or_si512(_mm512_and_si512(q, m4), q5_fifth_bit(h, 2 * j));
    let hi = _mm512_or_si512(
        _mm512_and_si512(_mm512_srli_epi16::<4>(q), m4),
        q5_fifth_bit(h, 2 * j + 1),
    );
    (lo, hi)
}

/// Codes of sub-blocks 2j and 2j + 1 in column `b4` against token `b`, into its lane sum.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn q5_add_lane(
    sl: &mut __m512i,
    (lo, hi): (__m512i, __m512i),
    b: &BlockQ8K,
    (j, b4): (usize, usize),
    sc: &[__m512i; SUBS],
) {
    let e = PAIR * j + GROUP * b4;
    let plo = _mm512_maddubs_epi16(lo, bcast4(b, e));
    *sl = _mm512_dpwssd_epi32(*sl, plo, sc[2 * j]);
    let phi = _mm512_maddubs_epi16(hi, bcast4(b, e + SUB));
    *sl = _mm512_dpwssd_epi32(*sl, phi, sc[2 * j + 1]);
}

/// A token's f32 scales for a step: `y.d`·d of the rows, and −`y.d`·dmin (from word 0).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn q5_token_scales(w0: __m512i, b: &BlockQ8K) -> (__m512, __m512) {
    let dx = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(w0));
    let dminx = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32::<16>(w0)));
    (
        _mm512_mul_ps(_mm512_set1_ps(b.d), dx),
        _mm512_mul_ps(_mm512_set1_ps(-b.d), dminx),
    )
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn gemv16_q5_k_impl(group: &[u8], y: &[BlockQ8K], out: &mut [f32; PACK_ROWS]) {
    let pf = StepPrefetch::new(group, Q5_STEP);
    let mut acc = [_mm512_setzero_ps(); LANES];
    let mut summs = _mm512_setzero_ps();
    for (i, b) in y.iter().enumerate() {
        let step = &group[i * Q5_STEP..(i + 1) * Q5_STEP];
        let (w0, sc, mn) = q5_step_scales(step);
        let total = q5_min_total(&mn, b);
        let mut s = [_mm512_setzero_si512(); LANES];
        for (b4, sl) in s.iter_mut().enumerate() {
            pf.part(i, b4, LANES);
            let h = word(step, Q5_QH_WORD + b4);
            for j in 0..SUBS / 2 {
                q5_add_lane(sl, q5_codes(step, h, j, b4), b, (j, b4), &sc);
            }
        }
        let (d, dmin) = q5_token_scales(w0, b);
        summs = _mm512_fmadd_ps(dmin, _mm512_cvtepi32_ps(total), summs);
        for l in 0..LANES {
            acc[l] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(s[l]), acc[l]);
        }
    }
    store_hsum(&acc, Some(summs), out);
}

/// `T` tokens (a constant, so that their sums stay in registers), column `b4` outer as in
/// [`gemv16_q6_k_tokens_impl`]: each token keeps the one lane sum the column feeds, and the
/// lane's float step follows the column.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn gemv16_q5_k_tokens_impl<const T: usize>(group: &[u8], ys: &[&[BlockQ8K]], out: &mut [f32]) {
    let (ys, n, pf) = pass_of::<T>(group, Q5_STEP, ys);
    let mut acc = [[_mm512_setzero_ps(); LANES]; T];
    let mut summs = [_mm512_setzero_ps(); T];
    for i in 0..n {
        let step = &group[i * Q5_STEP..(i + 1) * Q5_STEP];
        let (w0, sc, mn) = q5_step_scales(step);
        let b: [&BlockQ8K; T] = std::array::from_fn(|t| &ys[t][i]);
        let mut d = [_mm512_setzero_ps(); T];
        for t in 0..T {
            let (dt, dmin) = q5_token_scales(w0, b[t]);
            d[t] = dt;
            let total = q5_min_total(&mn, b[t]);
            summs[t] = _mm512_fmadd_ps(dmin, _mm512_cvtepi32_ps(total), summs[t]);
        }
        for b4 in 0..LANES {
            pf.part(i, b4, LANES);
            let h = word(step, Q5_QH_WORD + b4);
            let mut s = [_mm512_setzero_si512(); T];
            for j in 0..SUBS / 2 {
                let codes = q5_codes(step, h, j, b4);
                for (t, sl) in s.iter_mut().enumerate() {
                    q5_add_lane(sl, codes, b[t], (j, b4), &sc);
                }
            }
            for (t, acc) in acc.iter_mut().enumerate() {
                acc[b4] = _mm512_fmadd_ps(d[t], _mm512_cvtepi32_ps(s[t]), acc[b4]);
            }
        }
    }
    for ((acc, summs), o) in acc.iter().zip(summs).zip(out.chunks_exact_mut(PACK_ROWS)) {
        store_hsum(acc, Some(summs), o);
    }
}
