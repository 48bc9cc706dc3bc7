//! What the kernels of the K-quants and IQ4_XS (Q8_K activations; `kquant_kernels.rs`) share
//! on both x86 tiers: the super-blocks unpacked once per row, the panels' rows, and the float
//! chains. Tier-neutral (256-bit AVX2 instructions, which both tiers have); each tier's own
//! integer primitives are in `avx2_kquant.rs` and `avx512_kquant.rs`. The variants: ggml's
//! `vec_dot` (`oracle_vec_dot.rs`), the repacked gemv and gemm of Q4_K and Q2_K (`oracle_repacked.rs`) and the
//! tiled matmul (`oracle_tiled.rs`); the kernels' shape (`R` rows × `T` tokens) is in `passes.rs`.
//!
//! Per super-block each kernel unpacks a row's block once (codes, scale vectors, f16 scales:
//! the `*Row` structs) and uses it for every token of its pass, forming the oracle's exact
//! integers in the oracle's lanes: element `e` lands in lane `(e mod 32) / 4`, as in ggml's
//! `vec_dot`, whatever the primitives do inside (no pair sum reaches the i16 limit: codes ≤ 63,
//! |activation| ≤ 128, and every four-sum of a code run stays below 2^15). The `vec_dot`
//! variants then do their float work on those lanes; the others sum them (exactly) into one
//! integer per row, [`row_totals`] putting a pass's rows (and their mins) in the lanes of one
//! vector, whose float chains then run side by side ([`Chains`]).
//!
//! For batches of at least a few tokens, the chain variants of Q4_K, Q5_K and Q2_K and the
//! tiled orders of Q3_K and Q5_K also have panel kernels ([`PanelRow`], `passes::panels`): eight
//! rows' blocks transposed once per super-block so that the rows lie in the lanes, then per
//! token the `maddubs` pairs of each group of four codes with four activations broadcast,
//! summed in i16 over a run of groups and scaled by one `madd`, the per-row integers and chains
//! never reduced across lanes. (Q6_K keeps the passes.)
//!
//! The tiled and repacked variants read the min and bias terms from the activation's `bsums`
//! as their oracles do. The tiled IQ4_XS alone forms its integer differently from its oracle
//! (see `iq4_xs_tiled_rows`): equal for activations whose `bsums` are the sums of their
//! quants, as every Q8_K quantizer writes them.

use std::arch::x86_64::*;

use super::passes::{array_of, hsum_i32_rows, iq4_values, load16, load32};
use crate::kernels::blocks::Iq1Grid;
use crate::kernels::blocks::{
    BlockIq4Xs, BlockQ2K, BlockQ3K, BlockQ6K, BlockQ8K, IqGrid, K_SCALE_SIZE,
};

/// Low six bits of each byte of the packed Q4_K/Q5_K scale words.
const KMASK1: u32 = 0x3f3f_3f3f;
/// Low four bits of each byte.
const KMASK2: u32 = 0x0f0f_0f0f;
/// Low two bits of each byte.
const KMASK3: u32 = 0x0303_0303;
/// Q3_K and IQ4_XS scales are stored with this offset (6-bit codes for −32..32).
const SCALE_BIAS: i8 = 32;
/// The Q3_K codes here are `low2 | hbit << 2` (0..8), the weight `code − 4`: the tiled bias
/// `4·Σ sc·bsum` is `<< 2`.
pub(super) const Q3_BIAS_SHIFT: i32 = 2;
/// The Q3_K code bias.
pub(super) const Q3_BIAS: i8 = 4;
/// Q6_K weights are stored as `q + 32`; the bias comes off through `bsums` (× 32 = << 5).
pub(super) const Q6_BIAS_SHIFT: i32 = 5;
/// Elements of a Q4_K/Q5_K pair of sub-blocks (32 bytes of `qs`: low nibbles, high nibbles).
pub(super) const PAIR: usize = 64;
/// Bytes of one activation run (one 256-bit load).
pub(super) const RUN: usize = 32;
/// Half a run: the values of one 128-bit half (one scale of IQ2_XS and IQ2_S).
const HALF_RUN: usize = RUN / 2;
/// Runs of a super-block.
pub(super) const RUNS: usize = 8;
/// Two runs (or their activations, or biases), as a tier's `pair_dot` takes them.
pub(super) type RunPair = [__m256i; 2];

/// The little-endian words of the 12 packed scale bytes.
#[inline(always)]
fn words(s: &[u8; K_SCALE_SIZE]) -> [u32; 3] {
    std::array::from_fn(|i| {
        u32::from_le_bytes([s[4 * i], s[4 * i + 1], s[4 * i + 2], s[4 * i + 3]])
    })
}

/// The eight 6-bit scales (i16 lanes 0..8) and eight 6-bit mins (lanes 8..16) of a Q4_K/Q5_K
/// super-block (ggml's `get_scale_min_k4`, four at a time).
#[target_feature(enable = "avx2,fma")]
#[inline]
fn k4_scales_mins(s: &[u8; K_SCALE_SIZE]) -> __m256i {
    let [u0, u1, u2] = words(s);
    let u = [
        u0 & KMASK1,
        (u2 & KMASK2) | (((u0 >> 6) & KMASK3) << 4),
        u1 & KMASK1,
        ((u2 >> 4) & KMASK2) | (((u1 >> 6) & KMASK3) << 4),
    ];
    _mm256_cvtepu8_epi16(_mm_set_epi32(
        u[3] as i32,
        u[2] as i32,
        u[1] as i32,
        u[0] as i32,
    ))
}

/// Q3_K's sixteen 6-bit scales, unbiased (−32..32), as bytes.
#[target_feature(enable = "avx2,fma")]
#[inline]
fn q3_k_scales(s: &[u8; K_SCALE_SIZE]) -> __m128i {
    let [a0, a1, a2] = words(s);
    let v = _mm_set_epi32(
        (((a1 >> 4) & KMASK2) | (((a2 >> 6) & KMASK3) << 4)) as i32,
        (((a0 >> 4) & KMASK2) | (((a2 >> 4) & KMASK3) << 4)) as i32,
        ((a1 & KMASK2) | (((a2 >> 2) & KMASK3) << 4)) as i32,
        ((a0 & KMASK2) | ((a2 & KMASK3) << 4)) as i32,
    );
    _mm_sub_epi8(v, _mm_set1_epi8(SCALE_BIAS))
}

/// Both 128-bit halves of a 256-bit vector from `v`.
#[target_feature(enable = "avx2,fma")]
#[inline]
fn twice(v: __m128i) -> __m256i {
    _mm256_set_m128i(v, v)
}

/// Bits `k..k + width` of each byte of `hb`, moved to bits `to..to + width` of the byte
/// (everything else clear). With both fields inside the byte, the 16-bit shift cannot carry a
/// bit of the neighbouring byte into the field.
#[target_feature(enable = "avx2,fma")]
#[inline]
pub(super) fn bits_to(hb: __m256i, k: u32, to: u32, width: u32) -> __m256i {
    debug_assert!(k + width <= 8 && to + width <= 8);
    let moved = if k <= to {
        _mm256_sll_epi16(hb, _mm_cvtsi32_si128((to - k) as i32))
    } else {
        _mm256_srl_epi16(hb, _mm_cvtsi32_si128((k - to) as i32))
    };
    let field = ((1u32 << width) - 1) << to;
    _mm256_and_si256(moved, _mm256_set1_epi8(field as u8 as i8))
}

/// 2-bit plane `k` (bits 2k..2k+2) of each byte.
#[target_feature(enable = "avx2,fma")]
#[inline]
fn plane2(bits: __m256i, k: usize) -> __m256i {
    bits_to(bits, 2 * k as u32, 0, 2)
}

/// `b.bsums` as sixteen i16.
#[target_feature(enable = "avx2,fma")]
#[inline]
pub(super) fn bsums(b: &BlockQ8K) -> __m256i {
    load32(&b.bsums)
}

/// Lane j: `m_j·(bsums[2j] + bsums[2j+1])` in i32 (the min of sub-block j of 32 times its
/// activation sum, as the repacked and tiled oracles form it).
#[target_feature(enable = "avx2,fma")]
#[inline]
pub(super) fn k4_min_terms(mins: __m128i, bs: __m256i) -> __m256i {
    let dup = _mm256_set_m128i(
        _mm_unpackhi_epi16(mins, mins),
        _mm_unpacklo_epi16(mins, mins),
    );
    _mm256_madd_epi16(dup, bs)
}

/// The `vec_dot` min lanes of Q4_K/Q5_K: `bsums` summed in pairs in i16 (wrapping, as
/// `_mm_hadd_epi16`), then lane k = m[2k]·s[2k] + m[2k+1]·s[2k+1].
#[target_feature(enable = "avx2,fma")]
#[inline]
pub(super) fn k4_vec_dot_mins(mins: __m128i, bs: __m256i) -> __m128i {
    let s = _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1));
    _mm_madd_epi16(mins, s)
}

/// The sum of the four lanes of `v` (exact, wrapping).
#[target_feature(enable = "avx2,fma")]
#[inline]
pub(super) fn hsum_i32_4(v: __m128i) -> i32 {
    let s = _mm_add_epi32(v, _mm_unpackhi_epi64(v, v));
    _mm_cvtsi128_si32(_mm_add_epi32(s, _mm_srli_si128::<4>(s)))
}

/// The scale pairs of runs `2p` and `2p+1` of a half super-block of sixteen-element sub-blocks
/// (Q2_K, Q3_K, Q6_K), for `pair_dot`: run k covers sub-blocks `2k` (its low 128 bits) and
/// `2k+1` (high), so the low lanes pair sub-blocks (4p, 4p+2) and the high lanes (4p+1, 4p+3).
/// `half` holds the half's eight scales as i16 in both 128-bit halves.
#[target_feature(enable = "avx2,fma")]
#[inline]
fn sub16_pairs(half: __m256i, p: usize) -> __m256i {
    // Byte indices of i16 lanes a and b, as one i32 lane of a shuffle control.
    let ctl = |a: usize, b: usize| {
        i32::from_le_bytes([2 * a, 2 * a + 1, 2 * b, 2 * b + 1].map(|v| v as u8))
    };
    let lo = _mm_set1_epi32(ctl(4 * p, 4 * p + 2));
    let hi = _mm_set1_epi32(ctl(4 * p + 1, 4 * p + 3));
    _mm256_shuffle_epi8(half, _mm256_set_m128i(hi, lo))
}

/// Sixteen i8 scales as i16, and the scale pairs of [`sub16_pairs`] for both halves (index
/// `2h + p`).
#[target_feature(enable = "avx2,fma")]
#[inline]
fn sub16_scales(sc8: __m128i) -> (__m256i, [__m256i; 4]) {
    let all = _mm256_cvtepi8_epi16(sc8);
    let halves = [
        twice(_mm256_castsi256_si128(all)),
        twice(_mm256_extracti128_si256(all, 1)),
    ];
    (all, array_of!(4, |i| sub16_pairs(halves[i / 2], i % 2)))
}

// ---- rows unpacked once per super-block --------------------------------------------------

/// A Q4_K/Q5_K super-block of one row, unpacked: the codes of its eight sub-blocks (runs of
/// 32), the scale pairs of its four pairs of sub-blocks (`pair_dot`) and its mins (i16).
#[derive(Clone, Copy)]
pub(super) struct K4Row {
    pub codes: [__m256i; RUNS],
    pub sp: [__m256i; 4],
    pub mins: __m128i,
}

/// Unpacks a Q4_K (`qh` None) or Q5_K super-block: sub-block `2j` is the low nibbles of
/// `qs[32j..32j+32]`, `2j+1` the high ones; Q5_K adds bit `2j` (`2j+1`) of each `qh` byte as 16.
#[target_feature(enable = "avx2,fma")]
#[inline]
pub(super) fn k4_row(scales: &[u8; K_SCALE_SIZE], qs: &[u8], qh: Option<&[u8]>) -> K4Row {
    let ms = k4_scales_mins(scales);
    let m4 = _mm256_set1_epi8(0x0f);
    let high = qh.map(load32);
    let mut codes = [_mm256_setzero_si256(); RUNS];
    for j in 0..RUNS / 2 {
        let q = load32(&qs[RUN * j..]);
        let mut lo = _mm256_and_si256(q, m4);
        let mut hi = _mm256_and_si256(_mm256_srli_epi16::<4>(q), m4);
        if let Some(hb) = high {
            let j2 = 2 * j as u32;
            lo = _mm256_or_si256(lo, bits_to(hb, j2, 4, 1));
            hi = _mm256_or_si256(hi, bits_to(hb, j2 + 1, 4, 1));
        }
        (codes[2 * j], codes[2 * j + 1]) = (lo, hi);
    }
    // i32 lane j of the scales (i16 lanes 0..8) is (sc[2j], sc[2j+1]).
    let sp = array_of!(4, |j| _mm256_permutevar8x32_epi32(
        ms,
        _mm256_set1_epi32(j as i32)
    ));
    K4Row {
        codes,
        sp,
        mins: _mm256_extracti128_si256(ms, 1),
    }
}

/// A Q2_K/Q3_K/Q6_K super-block of one row, unpacked: the codes of its eight runs of 32 (run
/// `4h + k` is plane or shift k of half h), the scale pairs of its four pairs of runs
/// ([`sub16_scales`]) and its sixteen scales as i16; for Q2_K also its mins as i16.
#[derive(Clone, Copy)]
pub(super) struct Sub16Row {
    pub codes: [__m256i; RUNS],
    pub sp: [__m256i; 4],
    pub sc16: __m256i,
    pub mins16: __m256i,
}

impl Sub16Row {
    /// A row block of `codes`, its scales as [`sub16_scales`] gives them and its mins.
    #[inline(always)]
    fn new(codes: [__m256i; RUNS], (sc16, sp): (__m256i, [__m256i; 4]), mins16: __m256i) -> Self {
        Sub16Row {
            codes,
            sp,
            sc16,
            mins16,
        }
    }
}

/// Unpacks a Q2_K super-block: codes 0..4, scales and mins the nibbles of `scales`.
#[target_feature(enable = "avx2,fma")]
#[inline]
pub(super) fn q2_k_row(a: &BlockQ2K) -> Sub16Row {
    let m4 = _mm_set1_epi8(0x0f);
    let packed = load16(&a.scales);
    let scales = sub16_scales(_mm_and_si128(packed, m4));
    let mins16 = _mm256_cvtepi8_epi16(_mm_and_si128(_mm_srli_epi16::<4>(packed), m4));
    let bits = [load32(&a.qs), load32(&a.qs[RUN..])];
    Sub16Row::new(
        array_of!(RUNS, |c| plane2(bits[c / 4], c % 4)),
        scales,
        mins16,
    )
}

/// Unpacks a Q3_K super-block: codes `low2 | hbit << 2` (0..8; the high bit of run `4h + k` is
/// bit `4h + k` of each `hmask` byte), scales unbiased.
#[target_feature(enable = "avx2,fma")]
#[inline]
pub(super) fn q3_k_row(a: &BlockQ3K) -> Sub16Row {
    let hb = load32(&a.hmask);
    let bits = [load32(&a.qs), load32(&a.qs[RUN..])];
    let codes = array_of!(RUNS, |c| {
        _mm256_or_si256(plane2(bits[c / 4], c % 4), bits_to(hb, c as u32, 2, 1))
    });
    let scales = sub16_scales(q3_k_scales(&a.scales));
    Sub16Row::new(codes, scales, _mm256_setzero_si256())
}

/// Unpacks a Q6_K super-block: codes 0..64, run `4h + k` the low (k < 2) or high nibbles of
/// `ql[64h + 32(k mod 2)..]` with bits `2k..2k+2` of `qh[32h..]` above them.
#[target_feature(enable = "avx2,fma")]
#[inline]
pub(super) fn q6_k_row(a: &BlockQ6K) -> Sub16Row {
    let m15 = _mm256_set1_epi8(0x0f);
    let mut codes = [_mm256_setzero_si256(); RUNS];
    for h in 0..2 {
        let ql = [
            load32(&a.ql[2 * RUN * h..]),
            load32(&a.ql[2 * RUN * h + RUN..]),
        ];
        let qh = load32(&a.qh[RUN * h..]);
        for k in 0..4 {
            let low = match k / 2 {
                0 => _mm256_and_si256(ql[k % 2], m15),
                _ => _mm256_and_si256(_mm256_srli_epi16::<4>(ql[k % 2]), m15),
            };
            codes[4 * h + k] = _mm256_or_si256(low, bits_to(qh, 2 * k as u32, 4, 2));
        }
    }
    let scales = sub16_scales(load16(&a.scales));
    Sub16Row::new(codes, scales, _mm256_setzero_si256())
}

/// The eight sub-block scales of an IQ4_XS super-block (−32..32), sub-block s's in every i16
/// lane of vector s: the low four bits from the nibbles of `scales_l` (low nibble first), the
/// high two bits from `scales_h` (bits 2s, 2s+1), each moved into place by a multiply (a left
/// shift by 14 − 2s within the i16) and a shift right by 14.
#[target_feature(enable = "avx2,fma")]
#[inline]
pub(super) fn iq4_xs_scales(a: &BlockIq4Xs) -> [__m256i; RUNS] {
    let packed = _mm_cvtsi32_si128(i32::from_le_bytes(a.scales_l));
    let m4 = _mm_set1_epi8(0x0f);
    let lo = _mm_and_si128(packed, m4);
    let hi = _mm_and_si128(_mm_srli_epi16::<4>(packed), m4);
    let low4 = _mm_cvtepu8_epi16(_mm_unpacklo_epi8(lo, hi));
    let sh = _mm_set1_epi16(i16::from_le_bytes(a.scales_h));
    // 2^(14 − 2s) for s = 0..8 (2^14 = 0x4000).
    let up = _mm_setr_epi16(
        0x4000, 0x1000, 0x0400, 0x0100, 0x0040, 0x0010, 0x0004, 0x0001,
    );
    let high2 = _mm_srli_epi16::<14>(_mm_mullo_epi16(sh, up));
    let ls = _mm_sub_epi16(
        _mm_or_si128(low4, _mm_slli_epi16::<4>(high2)),
        _mm_set1_epi16(i16::from(SCALE_BIAS)),
    );
    let both = twice(ls);
    // Bytes 2s, 2s + 1 (i16 lane s) in every i16 lane.
    array_of!(RUNS, |s| {
        let b = 2 * s as i16;
        _mm256_shuffle_epi8(both, _mm256_set1_epi16(b | ((b + 1) << 8)))
    })
}

/// An IQ4_XS super-block of one row, unpacked: each sub-block's 32 values (signed) and its
/// scale in every i16 lane.
#[derive(Clone, Copy)]
pub(super) struct XsRow {
    pub x: [__m256i; RUNS],
    pub ls: [__m256i; RUNS],
}

/// Unpacks an IQ4_XS super-block (`table`: the IQ4_NL values): sub-block s's low nibbles of
/// `qs[16s..16s+16]` are its elements 0..16, the high nibbles 16..32.
#[target_feature(enable = "avx2,fma")]
#[inline]
pub(super) fn iq4_xs_row(a: &BlockIq4Xs, table: __m128i) -> XsRow {
    XsRow {
        x: array_of!(RUNS, |s| iq4_values(table, &a.qs[16 * s..])),
        ls: iq4_xs_scales(a),
    }
}

/// Unpacks a super-block of an IQ2 or IQ3 type ([`IqGrid`]) into the form of IQ4_XS's
/// ([`XsRow`]): each sub-block's 32 grid values with their signs (±62 at most, so signed
/// bytes), four groups of eight gathered as ggml's kernels gather them, and `2·ls + 1` in the
/// i16 lanes of each value's scale group (every lane for the types with one scale a sub-block;
/// the low half and the high half for IQ2_XS and IQ2_S, whose `maddubs` pairs never straddle
/// two scales). Its lanes are then IQ4_XS's: `|x|` against the activation signed by `x`, which
/// is ggml's grid value against the activation signed by the pattern (a grid value is never 0).
#[target_feature(enable = "avx2,fma")]
#[inline]
pub(super) fn iq_grid_row<B: IqGrid>(a: &B) -> XsRow {
    use crate::kernels::iq_signs::SIGN_BYTES;
    /// Groups of eight values a sub-block of 32.
    const GROUPS: usize = 4;
    let group = |k: usize| a.group(k) as i64;
    let sign = |k: usize| SIGN_BYTES[usize::from(a.signs(k))] as i64;
    let scale = |s: usize| a.odd_scale(s) as i16;
    XsRow {
        x: array_of!(RUNS, |s| {
            let k = GROUPS * s;
            let v = _mm256_setr_epi64x(group(k), group(k + 1), group(k + 2), group(k + 3));
            let signs = _mm256_setr_epi64x(sign(k), sign(k + 1), sign(k + 2), sign(k + 3));
            _mm256_sign_epi8(v, signs)
        }),
        ls: array_of!(RUNS, |s| match B::SCALE_GROUP {
            RUN => _mm256_set1_epi16(scale(s)),
            HALF_RUN => {
                _mm256_setr_m128i(
                    _mm_set1_epi16(scale(2 * s)),
                    _mm_set1_epi16(scale(2 * s + 1)),
                )
            }
            _ => unreachable!("the IQ types' scale groups are 16 or 32 values"),
        }),
    }
}

// ---- panels: a super-block of PANEL_ROWS rows, the rows in the lanes ---------------------------

/// A row's super-block as the panel kernels take it: its eight runs of codes (element `32c + b`
/// at byte b of run c; unsigned, but for the IQ2, IQ3 and IQ1 types' signed codes) and its
/// `NSUB` sub-block scales and mins.
#[derive(Clone, Copy)]
pub(super) struct PanelRow<const NSUB: usize> {
    pub codes: [__m256i; RUNS],
    pub sc: [i32; NSUB],
    pub mins: [i32; NSUB],
}

/// A Q4_K (`qh` None) or Q5_K super-block for the panels.
#[target_feature(enable = "avx2,fma")]
#[inline]
pub(super) fn k4_panel_row(
    scales: &[u8; K_SCALE_SIZE],
    qs: &[u8],
    qh: Option<&[u8]>,
) -> PanelRow<RUNS> {
    let mut sm = [0i16; 2 * RUNS];
    // SAFETY: sm is 16 writable i16s (32 bytes); the store is unaligned.
    unsafe { _mm256_storeu_si256(sm.as_mut_ptr().cast(), k4_scales_mins(scales)) };
    PanelRow {
        codes: k4_row(scales, qs, qh).codes,
        sc: std::array::from_fn(|s| i32::from(sm[s])),
        mins: std::array::from_fn(|s| i32::from(sm[RUNS + s])),
    }
}

/// A Q2_K super-block for the panels: scales and mins the nibbles of `scales`.
#[target_feature(enable = "avx2,fma")]
#[inline]
pub(super) fn q2_k_panel_row(a: &BlockQ2K) -> PanelRow<SUB16S> {
    PanelRow {
        codes: q2_k_row(a).codes,
        sc: std::array::from_fn(|s| i32::from(a.scales[s] & 0x0f)),
        mins: std::array::from_fn(|s| i32::from(a.scales[s] >> 4)),
    }
}

/// A Q3_K super-block for the panels: codes `low2 | hbit << 2`, scales unbiased (signed).
#[target_feature(enable = "avx2,fma")]
#[inline]
pub(super) fn q3_k_panel_row(a: &BlockQ3K) -> PanelRow<SUB16S> {
    let mut sc = [0i8; SUB16S];
    // SAFETY: sc is 16 writable bytes; the store is unaligned.
    unsafe { _mm_storeu_si128(sc.as_mut_ptr().cast(), q3_k_scales(&a.scales)) };
    PanelRow {
        codes: q3_k_row(a).codes,
        sc: std::array::from_fn(|s| i32::from(sc[s])),
        mins: [0; SUB16S],
    }
}

/// An IQ2 or IQ3 super-block for the panels: the signed grid values of [`iq_grid_row`] (±62
/// at most), its `NSUB` scales `2·ls + 1` (one a scale group: `NSUB · SCALE_GROUP` is the
/// super-block).
#[target_feature(enable = "avx2,fma")]
#[inline]
pub(super) fn iq_grid_panel_row<B: IqGrid, const NSUB: usize>(a: &B) -> PanelRow<NSUB> {
    const {
        assert!(
            NSUB * B::SCALE_GROUP == RUN * RUNS,
            "one scale a scale group"
        )
    };
    PanelRow {
        codes: iq_grid_row(a).x,
        sc: std::array::from_fn(|s| a.odd_scale(s)),
        mins: [0; NSUB],
    }
}

/// An IQ1 super-block for the panels: the tiled matmul's codes `8·grid ± 1` (the group's delta
/// sign; signed, ±9 at most), a scale `2·ls + 1` per half of 16.
#[target_feature(enable = "avx2,fma")]
#[inline]
pub(super) fn iq1_panel_row<B: Iq1Grid>(a: &B) -> PanelRow<SUB16S> {
    use crate::kernels::oracle_tiled::IQ1_CODE_SCALE;
    /// Groups of eight values a run of 32.
    const GROUPS: usize = RUN / 8;
    /// One byte in each of eight.
    const BYTES: u64 = 0x0101_0101_0101_0101;
    let scale = _mm256_set1_epi8(IQ1_CODE_SCALE as i8);
    let grid = |k: usize| a.entry(k) as i64;
    let delta = |k: usize| (u64::from(a.delta_sign(k) as u8) * BYTES) as i64;
    PanelRow {
        codes: array_of!(RUNS, |c| {
            let k = GROUPS * c;
            let v = _mm256_setr_epi64x(grid(k), grid(k + 1), grid(k + 2), grid(k + 3));
            let d = _mm256_setr_epi64x(delta(k), delta(k + 1), delta(k + 2), delta(k + 3));
            // 8·v for v in −1, 0, 1: the sign of v applied to 8.
            _mm256_add_epi8(_mm256_sign_epi8(scale, v), d)
        }),
        sc: std::array::from_fn(|h| a.odd_scale(h)),
        mins: [0; SUB16S],
    }
}

/// Sub-blocks of sixteen in a Q2_K super-block (one `bsums` entry each).
pub(super) const SUB16S: usize = 16;

/// The 8 × 8 transpose of i32: lane r of result m is lane m of `v[r]`.
#[target_feature(enable = "avx2,fma")]
#[inline]
pub(super) fn transpose8(v: [__m256i; LANES8]) -> [__m256i; LANES8] {
    let lo32 = |a, b| _mm256_unpacklo_epi32(a, b);
    let hi32 = |a, b| _mm256_unpackhi_epi32(a, b);
    // t[2q] = unpacklo(v[2q], v[2q+1]), t[2q+1] = unpackhi(v[2q], v[2q+1]).
    let t = array_of!(LANES8, |k| match k % 2 {
        0 => lo32(v[k], v[k + 1]),
        _ => hi32(v[k - 1], v[k]),
    });
    // u holds columns (m, m + 4) of rows 0..4 (u[0..4]) and rows 4..8 (u[4..8]): u[4g + 2j]
    // and u[4g + 2j + 1] the low and high unpacks of t[4g + j], t[4g + j + 2].
    let lo64 = |a, b| _mm256_unpacklo_epi64(a, b);
    let hi64 = |a, b| _mm256_unpackhi_epi64(a, b);
    let u = array_of!(LANES8, |k| {
        let (a, b) = (t[k / 4 * 4 + k % 4 / 2], t[k / 4 * 4 + k % 4 / 2 + 2]);
        match k % 2 {
            0 => lo64(a, b),
            _ => hi64(a, b),
        }
    });
    array_of!(LANES8, |m| {
        let (a, b) = (u[m % 4], u[4 + m % 4]);
        match m / 4 {
            0 => _mm256_permute2x128_si256::<LOW_HALVES>(a, b),
            _ => _mm256_permute2x128_si256::<HIGH_HALVES>(a, b),
        }
    })
}

/// i32 lanes of a 256-bit vector.
const LANES8: usize = 8;
/// `_mm256_permute2x128_si256` control: (a's low half, b's low half).
const LOW_HALVES: i32 = 0x20;
/// `_mm256_permute2x128_si256` control: (a's high half, b's high half).
const HIGH_HALVES: i32 = 0x31;

/// Rows of a pass of a chain kernel at most: a pass's chains share the low half of one
/// vector, their min chains (or their mins) the high half.
pub(super) const CHAIN_ROWS: usize = 4;

/// Lanes `r`: f16 → f32 of `d` of row r's block `i`; lanes `4 + r`: of `dmin` (zero without).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) fn row_scales<B, const R: usize>(
    w: &[&[B]; R],
    i: usize,
    d: fn(&B) -> [u8; 2],
    dmin: Option<fn(&B) -> [u8; 2]>,
) -> __m256 {
    const { assert!(R <= CHAIN_ROWS) };
    let mut h = [0u16; 2 * CHAIN_ROWS];
    for r in 0..R {
        h[r] = u16::from_le_bytes(d(&w[r][i]));
        if let Some(m) = dmin {
            h[CHAIN_ROWS + r] = u16::from_le_bytes(m(&w[r][i]));
        }
    }
    _mm256_cvtph_ps(load16(&h))
}

/// Lanes `r`: the total of `sums[r]`; lanes `4 + r`: of `mins[r]` (exact; rows past `R` zero).
#[target_feature(enable = "avx2,fma")]
#[inline]
pub(super) fn row_totals<const R: usize>(sums: &[__m256i; R], mins: &[__m256i; R]) -> __m256i {
    const { assert!(R <= CHAIN_ROWS) };
    let z = _mm256_setzero_si256();
    let mut v = [z; 2 * CHAIN_ROWS];
    for r in 0..R {
        (v[r], v[CHAIN_ROWS + r]) = (sums[r], mins[r]);
    }
    hsum_i32_rows(&v)
}

/// The totals of (up to) four vectors, in order: lane p of the result is the sum of `v[p]`'s
/// eight lanes (exact, wrapping).
#[target_feature(enable = "avx2,fma")]
#[inline]
pub(super) fn totals4(v: [__m256i; 4]) -> __m128i {
    // [Σ v0, Σ v1, Σ v2, Σ v3] over lanes 0..4 | the same over lanes 4..8.
    let h = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
    _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256::<1>(h))
}

/// The gemm's parts, rows in lanes: `v[r]` holds row r's part totals (part p in lane p) and
/// its parts' mins (in lanes 4 + p); vector p of the result holds part p's totals in lanes r
/// and its mins in lanes 4 + r (rows past `R` zero), as [`Chains::repacked`] takes them. Two
/// 4 × 4 transposes of i32, side by side in the 128-bit halves.
#[target_feature(enable = "avx2,fma")]
#[inline]
pub(super) fn part_totals<const R: usize>(rows: &[__m256i; R]) -> [__m256i; 4] {
    const { assert!(R <= CHAIN_ROWS) };
    let mut v = [_mm256_setzero_si256(); CHAIN_ROWS];
    v[..R].copy_from_slice(rows);
    // Rows' i32 interleaved in pairs, then the pairs' i64: t = [01 lo, 01 hi, 23 lo, 23 hi].
    let lo_hi32 = |a, b| [_mm256_unpacklo_epi32(a, b), _mm256_unpackhi_epi32(a, b)];
    let lo_hi64 = |a, b| [_mm256_unpacklo_epi64(a, b), _mm256_unpackhi_epi64(a, b)];
    let ([t0, t1], [t2, t3]) = (lo_hi32(v[0], v[1]), lo_hi32(v[2], v[3]));
    let ([p0, p1], [p2, p3]) = (lo_hi64(t0, t2), lo_hi64(t1, t3));
    [p0, p1, p2, p3]
}

/// Adjacent lanes of `v` summed: `[v0 + v1, v2 + v3, v4 + v5, v6 + v7]`.
#[target_feature(enable = "avx2,fma")]
#[inline]
pub(super) fn pair_lanes(v: __m256i) -> __m128i {
    _mm_hadd_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v))
}

// ---- float chains ----------------------------------------------------------------------------

/// The float chains of the repacked and tiled variants, one lane per row of a pass (at most
/// [`CHAIN_ROWS`]):
/// - repacked: `acc = fma(isum, d·d_y, acc)` and `acc_min = fma(imin, dmin·d_y, acc_min)`,
///   both in one vector (`acc` in lanes r, `acc_min` in lanes 4 + r, as [`row_totals`] and
///   [`row_scales`] lay out the integers and scales); the result `acc − acc_min`;
/// - tiled: `t = isum·d`, `t = fma(−dmin, imin, t)` (types with mins), `acc = fma(t, d_y, acc)`.
#[derive(Clone, Copy)]
pub(super) struct Chains {
    pair: __m256,
    tiled: __m128,
}

impl Chains {
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    pub(super) fn new() -> Chains {
        Chains {
            pair: _mm256_setzero_ps(),
            tiled: _mm_setzero_ps(),
        }
    }

    /// One fma pair of the repacked kernels: `totals` and `scales` as [`row_totals`] and
    /// [`row_scales`] give them.
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    pub(super) fn repacked(&mut self, totals: __m256i, scales: __m256, dy: f32) {
        let ds = _mm256_mul_ps(scales, _mm256_set1_ps(dy));
        self.pair = _mm256_fmadd_ps(_mm256_cvtepi32_ps(totals), ds, self.pair);
    }

    /// One super-block of the tiled matmul (`with_min`: the types with mins).
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    pub(super) fn tiled(&mut self, totals: __m256i, scales: __m256, dy: f32, with_min: bool) {
        let v = _mm256_cvtepi32_ps(totals);
        let mut t = _mm_mul_ps(_mm256_castps256_ps128(v), _mm256_castps256_ps128(scales));
        if with_min {
            let neg = _mm_xor_ps(_mm256_extractf128_ps::<1>(scales), _mm_set1_ps(-0.0));
            t = _mm_fmadd_ps(neg, _mm256_extractf128_ps::<1>(v), t);
        }
        self.tiled = _mm_fmadd_ps(t, _mm_set1_ps(dy), self.tiled);
    }

    /// The rows' results (lanes r < R) after the chains of `kind`.
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    pub(super) fn store<const R: usize>(self, kind: ChainKind, out: &mut [f32; R]) {
        let v = match kind {
            ChainKind::Tiled => self.tiled,
            _ => _mm_sub_ps(
                _mm256_castps256_ps128(self.pair),
                _mm256_extractf128_ps::<1>(self.pair),
            ),
        };
        let mut a = [0f32; CHAIN_ROWS];
        // SAFETY: a is 4 writable f32s; the store is unaligned.
        unsafe { _mm_storeu_ps(a.as_mut_ptr(), v) };
        out.copy_from_slice(&a[..R]);
    }
}

/// Which float chain a chain kernel runs.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum ChainKind {
    /// The repacked gemv: one fma pair per super-block.
    Repacked,
    /// The repacked gemm: one fma pair per part (Q4_K: pair of sub-blocks, Q2_K: half).
    Gemm,
    /// The tiled matmul.
    Tiled,
}
