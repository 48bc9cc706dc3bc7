//! The AVX2 tier's single-token kernels of copies packed in groups of sixteen rows
//! (`kernels::pack`): the same sums as the AVX-512 kernels of `avx512_packed.rs` and `avx512_packed_k.rs`,
//! over the same layouts but Q6_K's and Q5_K's (paired here, below), each sixteen-row step
//! read as two halves of eight rows (half h is bytes
//! `32h..32h + 32` of every 64-byte vector, rows `8h..8h + 8` in its eight i32 lanes), so that
//! every row stays in its own lane and nothing is reduced across lanes.
//!
//! Without VNNI, four-element groups are multiplied by `maddubs` (unsigned codes × signed
//! activations, pairs in i16) and widened by `madd`, which takes the sub-block's scale at the
//! same time (`madd(pairs, (sc, sc))` is `sc·Σ4` per lane, exact). Where the pairs of several
//! groups of one sub-block fall in the same lane, they add up in i16 first, so one `madd`
//! serves them all:
//! ```text
//! Q4_K (repacked gemv's order): per pair j of sub-blocks and half h
//!   p_lo = Σ_o maddubs(low nibbles of vector 8j + o, y[64j + 4o ..+ 4])      |p| ≤ 8·2·15·128
//!   p_hi = Σ_o maddubs(high nibbles,                 y[64j + 32 + 4o ..+ 4])
//!   isum += madd(p_lo, sc[2j]) + madd(p_hi, sc[2j + 1])
//!   imin  = Σ_j madd((m[j], m[j]), (bsums[2j], bsums[2j+1]))   (sub-block j's min, both sums)
//!   acc   = fma(isum, d·d_y, acc);  acc_min = fma(imin, dmin·d_y, acc_min);  out = acc − acc_min
//! ```
//! The integers are the oracle's exactly and each lane runs its row's float chain in the
//! oracle's order, so every output is `oracle_repacked::dot_q4_k_q8_k_repacked`'s bits.
//!
//! Q6_K's and Q5_K's `vec_dot` lanes meet only four elements of each sub-block, so no two of a
//! lane's groups share a scale. Their copies are packed paired on this tier
//! ([`Layout::Q6KPairs`], [`Layout::Q5KPairs`]): each row's four bytes hold two elements of
//! each of two sub-blocks, the two `maddubs` that cover a lane's four elements of both add in
//! i16, and one `madd` by the pair of scales widens them (a quarter fewer multiplies; Q6_K's
//! codes also decode in eleven operations per four vectors instead of seventeen).
//!
//! On a core that issues every 256-bit integer multiply as two halves through one pipe (Zen 1),
//! the count of `maddubs` and `madd` sets the pace: here a Q4_K super-block of one row costs
//! eight `maddubs` and one `madd` per sub-block pair's share, where the file layout's kernel
//! pays a `madd` per `maddubs`, a horizontal reduction per row and the scales' shuffles.
//!
//! The `#[target_feature]` functions are private; the table hands out the safe wrappers only
//! after AVX2, FMA and F16C were detected.

use std::arch::x86_64::*;

use super::packed_kernels::{
    i16_run_fits, packed_gemv, packed_helpers, packed_table, scale_min_bytes, StepPrefetch, GROUP,
    LANES, PAIR, PAIRS, PAIR_WORDS, Q5_QH_WORD, Q5_QS_WORD, Q5_SC_WORD, Q5_STEP, Q6_HALF,
    Q6_QH_WORD, Q6_SC_WORD, Q6_STEP, SUB, SUBS, XS_QS_WORD, XS_STEP, XS_SUB_WORDS,
};
use super::passes::array_of;
use super::passes::iq4nl_table;
use crate::kernels::blocks::BlockQ8K;
use crate::kernels::pack::{K_DMIN_AT, K_QS_AT, K_SCALES_AT, K_STEP, PACK_ROWS, Q6_K_D_AT};

/// This tier's width for the helpers both tiers share (`packed_kernels.rs`): 256-bit vectors,
/// a packed step read as two halves of eight rows, `madd` and an add for the i16 pair dots.
mod w {
    pub(super) use std::arch::x86_64::{
        __m256 as F, __m256i as I, _mm256_add_ps as add_ps, _mm256_and_si256 as and,
        _mm256_cvtepi32_ps as cvtepi32_ps, _mm256_fmadd_ps as fmadd_ps, _mm256_mul_ps as mul_ps,
        _mm256_mullo_epi32 as mullo32, _mm256_or_si256 as or, _mm256_set1_epi32 as set1_32,
        _mm256_set1_epi8 as set1_8, _mm256_setzero_ps as setzero_ps,
        _mm256_setzero_si256 as setzero_si, _mm256_sll_epi16 as sll16, _mm256_slli_epi32 as slli32,
        _mm256_srl_epi16 as srl16, _mm256_srl_epi32 as srl32, _mm256_storeu_ps as storeu_ps,
        _mm256_sub_epi32 as sub32, _mm256_sub_ps as sub_ps,
    };
    use std::arch::x86_64::{_mm256_add_epi32, _mm256_madd_epi16};
    /// f32 lanes of `F`.
    pub(super) const WIDTH: usize = 8;

    /// `acc + Σ2 a·b` per i32 lane of i16 pairs.
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    pub(super) fn dot_i16_acc(acc: I, a: I, b: I) -> I {
        _mm256_add_epi32(acc, _mm256_madd_epi16(a, b))
    }
}

packed_helpers!("avx2,fma,f16c");

packed_table! {
    tile: super::avx2_packed_tile::tile_packed;
    Q4K => (Q4Kx16, Repacked, gemv16_q4_k_packed, None),
    Q6K => (Q6KPairs, Dot, gemv16_q6_k_packed, None),
    Q5K => (Q5KPairs, Dot, gemv16_q5_k_packed, None),
    Iq4Xs => (Iq4XsX16, Dot, gemv16_iq4_xs_packed, None),
}

/// Rows of one half of a packed group: the i32 lanes of a 256-bit vector.
pub(super) const HALF: usize = 8;
/// Halves of a packed group.
pub(super) const HALVES: usize = PACK_ROWS / HALF;
/// Bytes a half takes of each 64-byte packed vector.
pub(super) const HALF_BYTES: usize = 32;

const _: () = assert!(HALVES == 2 && HALF * GROUP == HALF_BYTES);

/// `vpblendw` mask taking the odd (high) i16 of each i32 lane from the second operand.
pub(super) const BLEND_HIGH_I16: i32 = 0xaa;

/// Activation bytes `at..at + 2` and `at + 32..at + 34` of `b` as one i32 (those two pairs)
/// broadcast to every lane: what a paired code vector meets.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) fn pair16(b: &BlockQ8K, at: usize) -> __m256i {
    let q = |e: usize| u32::from(u16::from_le_bytes([b.qs[e] as u8, b.qs[e + 1] as u8]));
    _mm256_set1_epi32((q(at) | q(at + SUB) << 16) as i32)
}

/// The 32 bytes of `step` at `at`.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) fn load32(step: &[u8], at: usize) -> __m256i {
    let v = &step[at..at + HALF_BYTES];
    // SAFETY: 32 readable bytes (sliced above); the load is unaligned.
    unsafe { _mm256_loadu_si256(v.as_ptr().cast()) }
}

/// The 16 bytes of `step` at `at`.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn load16(step: &[u8], at: usize) -> __m128i {
    let v = &step[at..at + 16];
    // SAFETY: 16 readable bytes (sliced above); the load is unaligned.
    unsafe { _mm_loadu_si128(v.as_ptr().cast()) }
}

/// The eight f16 values of half `h` at `at` of `step` (sixteen, row r at `at + 2r`), as f32.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) fn half_f16(step: &[u8], at: usize, h: usize) -> __m256 {
    _mm256_cvtph_ps(load16(step, at + HALF_BYTES / 2 * h))
}

/// A `vpshufb` control that puts byte `8h + r` of a 16-byte vector (broadcast to both 128-bit
/// halves) in both i16 halves of i32 lane r, zero-extended: half h's rows as `madd` scales.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) fn dup_rows(h: usize) -> __m256i {
    let ctl: [u8; 32] = std::array::from_fn(|i| {
        let r = i / GROUP;
        match i % 2 {
            0 => (HALF * h + r) as u8,
            // A set top bit zeroes the byte.
            _ => 0x80,
        }
    });
    load32(&ctl, 0)
}

packed_gemv!(
    gemv16_q4_k_packed =
        gemv16_q4_k_impl("Q4_K", K_STEP, "oracle_repacked::dot_q4_k_q8_k_repacked")
);

#[target_feature(enable = "avx2,fma,f16c")]
fn gemv16_q4_k_impl(group: &[u8], y: &[BlockQ8K], out: &mut [f32; PACK_ROWS]) {
    let pf = StepPrefetch::new(group, K_STEP);
    let m4 = _mm256_set1_epi8(0x0f);
    let dup = [dup_rows(0), dup_rows(1)];
    let zero = _mm256_setzero_si256();
    let mut acc = [_mm256_setzero_ps(); HALVES];
    let mut acc_min = acc;
    for (i, b) in y.iter().enumerate() {
        let step: &[u8; K_STEP] = group[i * K_STEP..][..K_STEP]
            .try_into()
            .expect("a whole step");
        let (sc, mn) = scale_min_bytes(&step[K_SCALES_AT..K_QS_AT]);
        // Sub-block j's scales as `madd` factors of half h's rows.
        let scale =
            |h: usize, j: usize| _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(sc[j]), dup[h]);
        let qs = &step[K_QS_AT..];
        let mut isum = [zero; HALVES];
        for j in 0..PAIRS {
            // [half][low, high nibbles]: i16 pair sums of the pair's two sub-blocks.
            let mut p = [[zero; 2]; HALVES];
            for o in 0..PAIR_WORDS {
                let k = PAIR_WORDS * j + o;
                pf.part(i, k, PAIRS * PAIR_WORDS);
                let e = PAIR * j + GROUP * o;
                let (ya, yb) = (bcast4(b, e), bcast4(b, e + SUB));
                for (h, ph) in p.iter_mut().enumerate() {
                    let v = load32(qs, 64 * k + HALF_BYTES * h);
                    let lo = _mm256_and_si256(v, m4);
                    let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(v), m4);
                    ph[0] = _mm256_add_epi16(ph[0], _mm256_maddubs_epi16(lo, ya));
                    ph[1] = _mm256_add_epi16(ph[1], _mm256_maddubs_epi16(hi, yb));
                }
            }
            for (h, ph) in p.iter().enumerate() {
                let lo = _mm256_madd_epi16(ph[0], scale(h, 2 * j));
                let hi = _mm256_madd_epi16(ph[1], scale(h, 2 * j + 1));
                isum[h] = _mm256_add_epi32(isum[h], _mm256_add_epi32(lo, hi));
            }
        }
        // The min terms: each sub-block's min (in both i16 halves of its row's lane) against
        // its two activation sums, exact for any sums.
        let bs = |j: usize| {
            let s = |k: usize| i32::from(b.bsums[k] as u16);
            _mm256_set1_epi32(s(2 * j) | (s(2 * j + 1) << 16))
        };
        let dy = _mm256_set1_ps(b.d);
        for h in 0..HALVES {
            let mut imin = zero;
            for (j, m) in mn.iter().enumerate() {
                let m = _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(*m), dup[h]);
                imin = _mm256_add_epi32(imin, _mm256_madd_epi16(m, bs(j)));
            }
            let (d, dmin) = (half_f16(step, 0, h), half_f16(step, K_DMIN_AT, h));
            acc[h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[h]), _mm256_mul_ps(d, dy), acc[h]);
            acc_min[h] = _mm256_fmadd_ps(
                _mm256_cvtepi32_ps(imin),
                _mm256_mul_ps(dmin, dy),
                acc_min[h],
            );
        }
    }
    for h in 0..HALVES {
        store_chains(&[acc[h], acc_min[h]], true, &mut out[HALF * h..]);
    }
}

/// Q6_K codes are stored as `q + 32`: the bias's shift.
const Q6_BIAS_SHIFT: i32 = 5;

/// Half `h`'s 32 bytes of word `w` (the 64 bytes at 64w) of a packed step.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) fn word(step: &[u8], w: usize, h: usize) -> __m256i {
    load32(step, 64 * w + HALF_BYTES * h)
}

/// The four code vectors of one word triple of half `h` of a [`Layout::Q6KPairs`] step:
/// block half `j`, lane `l` (words X = 16j + l, Y = 16j + 8 + l, Z = 32 + 8j + l); byte pos
/// of vector v of a row's lane is element `128j + 32k + 4l + p` with k = 2(v >> 1) +
/// (pos >> 1), p = 2(v & 1) + (pos & 1) (`pack_pairs::q6_k_pair`).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) fn q6_codes(step: &[u8], h: usize, j: usize, l: usize) -> [__m256i; 4] {
    let six = _mm256_set1_epi8(0x3f);
    let low = _mm256_set1_epi8(0x0f);
    let top = _mm256_set1_epi8(0x30);
    let x = word(step, 16 * j + l, h);
    let y = word(step, 16 * j + 8 + l, h);
    let z = word(step, Q6_QH_WORD + 8 * j + l, h);
    // The 16-bit shifts carry bits of the next byte into each byte's top: masked off.
    let top_of = |w: __m256i| _mm256_and_si256(_mm256_srli_epi16::<2>(w), top);
    [
        _mm256_and_si256(x, six),
        _mm256_and_si256(y, six),
        _mm256_or_si256(_mm256_and_si256(z, low), top_of(x)),
        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16::<4>(z), low), top_of(y)),
    ]
}

/// A `vpshufb` control that puts, in every i32 lane, bytes `a` and `b` of that lane in the
/// high byte of its two i16 halves (so an arithmetic shift right by 8 sign-extends them).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) fn high_bytes(a: usize, b: usize) -> __m256i {
    let ctl: [u8; 32] = std::array::from_fn(|i| {
        let lane = (i % 16 / GROUP * GROUP) as u8;
        match i % GROUP {
            0 | 2 => 0x80,
            1 => lane + a as u8,
            _ => lane + b as u8,
        }
    });
    load32(&ctl, 0)
}

packed_gemv!(
    gemv16_q6_k_packed = gemv16_q6_k_impl("Q6_K", Q6_STEP, "oracle_vec_dot::dot_q6_k_q8_k")
);

/// Sub-block pairs a lane's codes of one block half form (k = 0, 1 and k = 2, 3).
pub(super) const Q6_PAIRS: usize = 2;
/// Halves of a Q6_K block (128 elements each), and halves of ggml's eight lanes (lanes 0..4
/// meet the even sub-blocks, 4..8 the odd).
pub(super) const Q6_BLOCK_HALVES: usize = 2;
const LANE_HALVES: usize = 2;
/// Paired layouts add two `maddubs` results in i16: the sum of four products of six-bit
/// (Q6_K) or five-bit (Q5_K) codes must fit.
const _: () = assert!(i16_run_fits(2, 6) && i16_run_fits(2, 5));

/// [`gemv16_q6_k_packed`] over [`Layout::Q6KPairs`].
///
/// ggml's lane l sums, per block, the elements `128j + 32k + 4l ..+ 4` (sub-block `8j + 2k +
/// l/4`) times their scales, less the bias `32·(sc[2l]·bsums[2l] + sc[2l+1]·bsums[2l+1])`. The
/// paired layout puts two of those sub-blocks' elements in each row's four bytes (elements
/// p, p + 1 of k = 0 and 1, or of k = 2 and 3), so the `maddubs` of the two code vectors
/// that hold a lane's eight elements of both add in i16 (|Σ| ≤ 4·63·128) and one `madd` by
/// the pair of scales widens them: per eight rows and block, 64 `maddubs`, 32 `madd` and 8 for
/// the bias, where the file's order needs a `madd` per `maddubs` (136 in all).
#[target_feature(enable = "avx2,fma,f16c")]
fn gemv16_q6_k_impl(group: &[u8], y: &[BlockQ8K], out: &mut [f32; PACK_ROWS]) {
    let pf = StepPrefetch::new(group, Q6_STEP);
    // Bytes (a, b) of each lane into its two i16 halves.
    let pair_of: [__m256i; LANE_HALVES] = array_of!(LANE_HALVES, |lh| high_bytes(lh, lh + 2));
    let bias_pair: [__m256i; 2] = array_of!(2, |p| high_bytes(2 * p, 2 * p + 1));
    let mut acc = [[_mm256_setzero_ps(); LANES]; HALVES];
    for (i, b) in y.iter().enumerate() {
        let step: &[u8; Q6_STEP] = group[i * Q6_STEP..][..Q6_STEP]
            .try_into()
            .expect("a whole step");
        let dy = _mm256_set1_ps(b.d);
        let bs = |k: usize| i32::from(b.bsums[k] as u16);
        // The activations in the paired order: code vector v of lane l (`q6_codes`) meets
        // bytes `at ..+ 2` and `at + 32 ..+ 2` of the block half's, at = 64(v >> 1) + 4l +
        // 2(v & 1): elements p, p + 1 of sub-block columns k = 2(v >> 1) and k + 1.
        let sc_words: [[__m256i; GROUP]; HALVES] =
            array_of!(HALVES, |h| array_of!(GROUP, |w| word(
                step,
                Q6_SC_WORD + w,
                h
            )));
        // Per block half j, half h, pair kk and lane half lh: the scales of sub-blocks
        // 8j + 4kk + lh and that + 2 (bytes lh and lh + 2 of scale word 2j + kk) as the two
        // i16 of each row's lane.
        let sc: [[[[__m256i; LANE_HALVES]; Q6_PAIRS]; HALVES]; Q6_BLOCK_HALVES] =
            array_of!(Q6_BLOCK_HALVES, |j| {
                array_of!(HALVES, |h| array_of!(Q6_PAIRS, |kk| array_of!(
                    LANE_HALVES,
                    |lh| {
                        let w = sc_words[h][2 * j + kk];
                        _mm256_srai_epi16::<8>(_mm256_shuffle_epi8(w, pair_of[lh]))
                    }
                )))
            });
        let d: [__m256; HALVES] =
            array_of!(HALVES, |h| _mm256_mul_ps(dy, half_f16(step, Q6_K_D_AT, h)));
        for l in 0..LANES {
            pf.part(i, l, LANES);
            let mut s = [_mm256_setzero_si256(); HALVES];
            for (j, sc) in sc.iter().enumerate() {
                let yv: [__m256i; 4] = array_of!(4, |v| pair16(
                    b,
                    Q6_HALF * j + 2 * SUB * (v >> 1) + GROUP * l + 2 * (v & 1)
                ));
                for (h, s) in s.iter_mut().enumerate() {
                    let q = q6_codes(step, h, j, l);
                    for kk in 0..Q6_PAIRS {
                        let t = _mm256_add_epi16(
                            _mm256_maddubs_epi16(q[2 * kk], yv[2 * kk]),
                            _mm256_maddubs_epi16(q[2 * kk + 1], yv[2 * kk + 1]),
                        );
                        *s = _mm256_add_epi32(
                            *s,
                            _mm256_madd_epi16(t, sc[h][kk][l / (LANES / LANE_HALVES)]),
                        );
                    }
                }
            }
            // Lane l's bias: 32·(bsums[2l]·sc[2l] + bsums[2l+1]·sc[2l+1]).
            let bsp = _mm256_set1_epi32(bs(2 * l) | (bs(2 * l + 1) << 16));
            for h in 0..HALVES {
                let scp = _mm256_srai_epi16::<8>(_mm256_shuffle_epi8(
                    sc_words[h][l / 2],
                    bias_pair[l % 2],
                ));
                let bias = _mm256_madd_epi16(scp, bsp);
                let sh = _mm256_sub_epi32(s[h], _mm256_slli_epi32::<{ Q6_BIAS_SHIFT }>(bias));
                acc[h][l] = _mm256_fmadd_ps(d[h], _mm256_cvtepi32_ps(sh), acc[h][l]);
            }
        }
    }
    for (h, acc) in acc.iter().enumerate() {
        store_hsum(acc, None, &mut out[HALF * h..]);
    }
}

packed_gemv!(
    gemv16_q5_k_packed = gemv16_q5_k_impl("Q5_K", Q5_STEP, "oracle_vec_dot::dot_q5_k_q8_k")
);

/// [`gemv16_q5_k_packed`] over [`Layout::Q5KPairs`].
///
/// ggml's lane l sums elements `32s + 4l ..+ 4` of each sub-block s times its scale; paired,
/// each row's low-nibble vector of sub-block pair j holds elements p = 0, 1 of both its
/// sub-blocks and the high-nibble vector p = 2, 3, so the two `maddubs` add in i16
/// (|Σ| ≤ 4·31·128) and one `madd` by the pair of scales widens them.
#[target_feature(enable = "avx2,fma,f16c")]
fn gemv16_q5_k_impl(group: &[u8], y: &[BlockQ8K], out: &mut [f32; PACK_ROWS]) {
    let pf = StepPrefetch::new(group, Q5_STEP);
    let m4 = _mm256_set1_epi8(0x0f);
    // [lane][half]
    let mut acc = [[_mm256_setzero_ps(); HALVES]; LANES];
    let mut summs = [_mm256_setzero_ps(); HALVES];
    for (i, b) in y.iter().enumerate() {
        let step: &[u8; Q5_STEP] = group[i * Q5_STEP..][..Q5_STEP]
            .try_into()
            .expect("a whole step");
        // Σ_j m_j·s_j, s_j the i16 (wrapping) sum of bsums 2j and 2j+1: pairs of mins as i16
        // against pairs of sums.
        let s16 = |j: usize| b.bsums[2 * j].wrapping_add(b.bsums[2 * j + 1]) as u16;
        let spair: [__m256i; SUBS / 2] = array_of!(SUBS / 2, |k| {
            _mm256_set1_epi32(i32::from(s16(2 * k)) | (i32::from(s16(2 * k + 1)) << 16))
        });
        let mut sc = [[_mm256_setzero_si256(); HALVES]; SUBS / 2];
        let mut d = [_mm256_setzero_ps(); HALVES];
        for h in 0..HALVES {
            let w0 = word(step, 0, h);
            let sw: [__m256i; 3] = array_of!(3, |k| word(step, Q5_SC_WORD + k, h));
            let mut total = _mm256_setzero_si256();
            for k in 0..SUBS / 2 {
                let (s0, m0) = q5_scale_min(&sw, 2 * k);
                let (s1, m1) = q5_scale_min(&sw, 2 * k + 1);
                // The pair's scales (≤ 63) as the two i16 of the lane.
                sc[k][h] = _mm256_or_si256(s0, _mm256_slli_epi32::<16>(s1));
                let mpair = _mm256_or_si256(m0, _mm256_slli_epi32::<16>(m1));
                total = _mm256_add_epi32(total, _mm256_madd_epi16(mpair, spair[k]));
            }
            d[h] = _mm256_mul_ps(_mm256_set1_ps(b.d), f16_low(w0));
            let dmin = _mm256_mul_ps(_mm256_set1_ps(-b.d), f16_high(w0));
            summs[h] = _mm256_fmadd_ps(dmin, _mm256_cvtepi32_ps(total), summs[h]);
        }
        for (l, acc) in acc.iter_mut().enumerate() {
            pf.part(i, l, LANES);
            let hb: [__m256i; HALVES] = array_of!(HALVES, |h| word(step, Q5_QH_WORD + l, h));
            let mut s = [_mm256_setzero_si256(); HALVES];
            for (j, sc) in sc.iter().enumerate() {
                // The activations of the pair's two code vectors, shared by both halves: the
                // low nibbles meet elements p = 0, 1 of both sub-blocks, the high p = 2, 3.
                let e = PAIR * j + GROUP * l;
                let (y01, y23) = (pair16(b, e), pair16(b, e + 2));
                for (h, s) in s.iter_mut().enumerate() {
                    let q = word(step, Q5_QS_WORD + PAIR_WORDS * j + l, h);
                    let lo = _mm256_or_si256(_mm256_and_si256(q, m4), q5_fifth_bit(hb[h], 2 * j));
                    let hi = _mm256_or_si256(
                        _mm256_and_si256(_mm256_srli_epi16::<4>(q), m4),
                        q5_fifth_bit(hb[h], 2 * j + 1),
                    );
                    let t = _mm256_add_epi16(
                        _mm256_maddubs_epi16(lo, y01),
                        _mm256_maddubs_epi16(hi, y23),
                    );
                    *s = _mm256_add_epi32(*s, _mm256_madd_epi16(t, sc[h]));
                }
            }
            for h in 0..HALVES {
                acc[h] = _mm256_fmadd_ps(d[h], _mm256_cvtepi32_ps(s[h]), acc[h]);
            }
        }
    }
    for h in 0..HALVES {
        let lanes = array_of!(LANES, |l| acc[l][h]);
        store_hsum(&lanes, Some(summs[h]), &mut out[HALF * h..]);
    }
}

/// The low f16 of every i32 lane, as f32.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) fn f16_low(v: __m256i) -> __m256 {
    // The low i16 of each lane, packed into eight (the high halves cleared first, so the
    // unsigned saturation keeps them as they are), then in lane order again.
    let lo = _mm256_and_si256(v, _mm256_set1_epi32(0xffff));
    let p = _mm256_packus_epi32(lo, lo);
    let p = _mm256_permute4x64_epi64::<0b1000>(p);
    _mm256_cvtph_ps(_mm256_castsi256_si128(p))
}

/// The high f16 of every i32 lane, as f32.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn f16_high(v: __m256i) -> __m256 {
    f16_low(_mm256_srli_epi32::<16>(v))
}

packed_gemv!(
    gemv16_iq4_xs_packed = gemv16_iq4_xs_impl("IQ4_XS", XS_STEP, "oracle_vec_dot::dot_iq4_xs_q8_k")
);

#[target_feature(enable = "avx2,fma,f16c")]
fn gemv16_iq4_xs_impl(group: &[u8], y: &[BlockQ8K], out: &mut [f32; PACK_ROWS]) {
    let pf = StepPrefetch::new(group, XS_STEP);
    let table = _mm256_broadcastsi128_si256(iq4nl_table());
    let low = _mm256_set1_epi8(0x0f);
    let mut acc = [[_mm256_setzero_ps(); LANES]; HALVES];
    for (i, b) in y.iter().enumerate() {
        let step: &[u8; XS_STEP] = group[i * XS_STEP..][..XS_STEP]
            .try_into()
            .expect("a whole step");
        let mut d = [_mm256_setzero_ps(); HALVES];
        // [sub-block][half]: each sub-block's scale as the same i16 in both halves of each
        // row's lane.
        let mut ls = [[_mm256_setzero_si256(); HALVES]; SUBS];
        for h in 0..HALVES {
            let (w0, w1) = (word(step, 0, h), word(step, 1, h));
            d[h] = _mm256_mul_ps(f16_low(w0), _mm256_set1_ps(b.d));
            for (sub, ls) in ls.iter_mut().enumerate() {
                let v = xs_scale(w0, w1, sub);
                ls[h] = pair_i16(v, v);
            }
        }
        // Word q of each sub-block: its low nibbles go to lane q, its high ones to q + 4.
        for q in 0..XS_SUB_WORDS {
            pf.part(i, q, XS_SUB_WORDS);
            let mut s_lo = [_mm256_setzero_si256(); HALVES];
            let mut s_hi = s_lo;
            for (sub, ls) in ls.iter().enumerate() {
                // The activations of the two code vectors, shared by both halves.
                let e = SUB * sub + GROUP * q;
                let (ylo, yhi) = (bcast4(b, e), bcast4(b, e + SUB / 2));
                for h in 0..HALVES {
                    let v = word(step, XS_QS_WORD + XS_SUB_WORDS * sub + q, h);
                    let lo = _mm256_shuffle_epi8(table, _mm256_and_si256(v, low));
                    let hi = _mm256_shuffle_epi8(
                        table,
                        _mm256_and_si256(_mm256_srli_epi16::<4>(v), low),
                    );
                    s_lo[h] = _mm256_add_epi32(s_lo[h], signed_dot(lo, ylo, ls[h]));
                    s_hi[h] = _mm256_add_epi32(s_hi[h], signed_dot(hi, yhi, ls[h]));
                }
            }
            for h in 0..HALVES {
                let acc = &mut acc[h];
                acc[q] = _mm256_fmadd_ps(d[h], _mm256_cvtepi32_ps(s_lo[h]), acc[q]);
                let q4 = q + XS_SUB_WORDS;
                acc[q4] = _mm256_fmadd_ps(d[h], _mm256_cvtepi32_ps(s_hi[h]), acc[q4]);
            }
        }
    }
    for (h, acc) in acc.iter().enumerate() {
        store_hsum(acc, None, &mut out[HALF * h..]);
    }
}

/// `madd(maddubs(|v|, y with v's sign), scale)`: ggml's sign trick (`vpsignb`, −128 wrapping)
/// for signed values `v`, the pairs then scaled by the i16 pair `scale` of each lane.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn signed_dot(v: __m256i, y: __m256i, scale: __m256i) -> __m256i {
    let pairs = _mm256_maddubs_epi16(_mm256_sign_epi8(v, v), _mm256_sign_epi8(y, v));
    _mm256_madd_epi16(pairs, scale)
}
