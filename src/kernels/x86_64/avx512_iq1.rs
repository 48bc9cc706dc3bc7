//! AVX-512 `vec_dot` kernels of IQ1_S and IQ1_M (decode: one token against many rows), in
//! 512-bit steps of two runs of 32 values. A row's super-block is unpacked with vector
//! instructions: its 32 grid indices (`qs` byte, three bits of `qh` above it) are formed at once
//! and stored, then each step loads its eight grid entries by those indices (plain loads, as
//! `blocks::table_load` reads them) into one vector; IQ1_M's 32 delta signs become a mask (a bit a
//! group, so a step's byte of it selects, a group at a time, between the activation's pair sums
//! and its negation's, both formed once per token and super-block for every row of the pass).
//! The integers of each step are ggml's: `maddubs(|x|, sign(q, x))` of the grid values `x`
//! (−1, 0, 1; `vpsignb` wraps −128 as ggml's does) and IQ1_M's `maddubs(1, ±q)`, each
//! multiplied by its `2·ls + 1` in `vpdpwssd`. Run 2p's lanes sit in the low half of step p,
//! run 2p + 1's in the high; adding the halves gives, lane for lane, the integers of the 256-bit
//! kernel (`iq1_kernels::block_lanes`), and the float chain is that kernel's.
//!
//! The `#[target_feature]` functions are private; the table hands out the tiles only after
//! AVX2, FMA, F16C and AVX-512 F/BW/VL/VNNI were detected.

use std::arch::x86_64::*;

use super::kquant_rows::{bsums, RUN};
use super::passes::{f16, hsum_i32, pass, PASS_ROWS, PASS_TOKENS};
use super::vec256::hsum_float_8;
use crate::kernels::blocks::{Block, BlockIq1M, BlockIq1S, BlockQ8K, Iq1Grid};
use crate::kernels::blocks::{IQ1M_DELTA, IQ1S_DELTA, IQ1_GROUP, QK_K};
use crate::kernels::entries::{self, TileDot, Variant};
use crate::kernels::iq_grids::IQ1S_GRID;
use crate::kernels::ActRow;

/// Values a 512-bit step takes: two runs.
const STEP: usize = 2 * RUN;
/// Steps per super-block.
const STEPS: usize = QK_K / STEP;
/// Grid entries (groups of eight values) per super-block.
const GROUPS: usize = QK_K / IQ1_GROUP;
/// Independent accumulator chains of a super-block's steps (their sum is added at the end).
const CHAINS: usize = 2;
/// Grid entries per step.
const STEP_GROUPS: usize = STEP / IQ1_GROUP;
/// The bits of a grid index's top part (three bits above the `qs` byte) in its u16.
const INDEX_TOP: i16 = 0x0700;
/// The bit of an IQ1_M `qh` nibble that makes its group's delta negative.
const M_DELTA_BIT: i16 = 0x8;
/// The bits of a 3-bit scale field.
const FIELD: i16 = 0x7;
/// Where IQ1_S keeps a sub-block's scale in its `qh` word.
const S_SCALE_SHIFT: i32 = 12;
/// IQ1_M's scale fields per `scales` word, three bits apart.
const M_FIELDS: usize = 4;

/// `[e(0), …, e(n − 1)]` as u16 for `|i| e(i)`, for the permutation and shift tables below.
macro_rules! table {
    ($n:expr, |$i:ident| $e:expr) => {{
        let mut t = [0u16; $n];
        let mut $i = 0;
        while $i < $n {
            t[$i] = ($e) as u16;
            $i += 1;
        }
        t
    }};
}

/// IQ1_S: group g's `qh` word is word g/4, its three index bits at 3·(g % 4).
static S_QH_WORD: [u16; GROUPS] = table!(32, |g| g / 4);
static S_QH_SHIFT: [u16; GROUPS] = table!(32, |g| 3 * (g % 4));
/// IQ1_S: step p's scales: i16 element j belongs to run 2p + j/16 (its sub-block).
static S_STEP_SCALE: [[u16; 32]; STEPS] = [
    table!(32, |j| j / 16),
    table!(32, |j| 2 + j / 16),
    table!(32, |j| 4 + j / 16),
    table!(32, |j| 6 + j / 16),
];
/// IQ1_S's delta term: each sub-block's signed scale twice (against its two `bsums`).
static S_PAIRS: [u16; 16] = table!(16, |j| j / 2);
/// IQ1_M: group g's `qh` byte is byte g/2, its nibble at 4·(g % 2).
static M_QH_BYTE: [u16; GROUPS] = table!(32, |g| g / 2);
static M_QH_SHIFT: [u16; GROUPS] = table!(32, |g| 4 * (g % 2));
/// IQ1_M: the scales come shifted by 3k in 64-bit lane k of [`m_scales`], so lane k's word w
/// holds half 4w + k at i16 position 4k + w. Step p's i16 element j belongs to half 4p + j/8,
/// which sits at position 4·(j/8) + p.
static M_STEP_SCALE: [[u16; 32]; STEPS] = [
    table!(32, |j| 4 * (j / 8)),
    table!(32, |j| 4 * (j / 8) + 1),
    table!(32, |j| 4 * (j / 8) + 2),
    table!(32, |j| 4 * (j / 8) + 3),
];

/// A table above as a vector.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn vec512(t: &[u16; 32]) -> __m512i {
    // SAFETY: `t` is 64 readable bytes; the load is unaligned.
    unsafe { _mm512_loadu_si512(t.as_ptr().cast()) }
}

/// A super-block's 32 grid indices, group g's at element g.
#[repr(C, align(64))]
struct Indices([u16; GROUPS]);

/// The grid indices `qs | top << 8` from the 32 `qs` bytes and the groups' `qh` fields
/// (`fields`, one a u16 element, the index bits lowest), stored in `idx`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn store_indices(qs: &[u8; GROUPS], fields: __m512i, idx: &mut Indices) {
    // SAFETY: `qs` is 32 readable bytes; the load is unaligned.
    let low = _mm512_cvtepu8_epi16(unsafe { _mm256_loadu_si256(qs.as_ptr().cast()) });
    let top = _mm512_and_si512(_mm512_slli_epi16::<8>(fields), _mm512_set1_epi16(INDEX_TOP));
    // SAFETY: `idx` is 64 bytes aligned to 64.
    unsafe { _mm512_store_si512(idx.0.as_mut_ptr().cast(), _mm512_or_si512(low, top)) }
}

/// Step `p`'s eight grid entries (groups `8p..8p + 8`, one a 64-bit lane), each by one plain
/// load (see `blocks::table_load`).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn step_grid(idx: &Indices, p: usize) -> __m512i {
    let e = |j: usize| {
        let i = usize::from(idx.0[STEP_GROUPS * p + j]);
        debug_assert!(i < IQ1S_GRID.len());
        // SAFETY: `store_indices` puts at most 8 + 3 bits in an index (`qs` byte, masked top
        // bits), below `IQ1S_GRID.len()` (2048); the read is of a static table, aligned.
        unsafe { std::ptr::read_volatile(IQ1S_GRID.as_ptr().add(i)) as i64 }
    };
    _mm512_setr_epi64(e(0), e(1), e(2), e(3), e(4), e(5), e(6), e(7))
}

/// Step `p`'s 64 activation quants.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn step_q(b: &BlockQ8K, p: usize) -> __m512i {
    // SAFETY: `b.qs` holds 256 bytes; the step's 64 start at STEP·p ≤ 192.
    unsafe { _mm512_loadu_si512(b.qs[STEP * p..].as_ptr().cast()) }
}

/// The grid term of a step: `acc + sc·maddubs(|x|, ±q)`, `q` negated (wrapping, as `vpsignb`
/// does, which has no 512-bit form) where `x < 0`; where `x = 0` the product is zero either way.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn grid_step(acc: __m512i, x: __m512i, q: __m512i, sc: __m512i) -> __m512i {
    let q = _mm512_mask_sub_epi8(q, _mm512_movepi8_mask(x), _mm512_setzero_si512(), q);
    _mm512_dpwssd_epi32(acc, _mm512_maddubs_epi16(_mm512_abs_epi8(x), q), sc)
}

/// The eight lanes of a step accumulator: its halves (runs 2p and 2p + 1) added.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn halves(acc: __m512i) -> __m256i {
    _mm256_add_epi32(
        _mm512_castsi512_si256(acc),
        _mm512_extracti64x4_epi64::<1>(acc),
    )
}

/// The IQ1 types' kernels here: `R` rows × `T` tokens in `vec_dot`'s order.
pub(super) trait Iq1Dot: Iq1Grid + Block {
    /// `out[t][r] = dot(w[r], y[t])`.
    fn rows<const R: usize, const T: usize>(
        w: &[&[Self]; R],
        y: &[&[BlockQ8K]; T],
        out: &mut [[f32; R]; T],
    );
}

impl Iq1Dot for BlockIq1S {
    fn rows<const R: usize, const T: usize>(
        w: &[&[Self]; R],
        y: &[&[BlockQ8K]; T],
        out: &mut [[f32; R]; T],
    ) {
        // SAFETY: only reachable through the AVX-512 table, built after every feature the
        // body enables was detected.
        unsafe { iq1_s_rows(w, y, out) }
    }
}

impl Iq1Dot for BlockIq1M {
    fn rows<const R: usize, const T: usize>(
        w: &[&[Self]; R],
        y: &[&[BlockQ8K]; T],
        out: &mut [[f32; R]; T],
    ) {
        // SAFETY: as IQ1_S's.
        unsafe { iq1_m_rows(w, y, out) }
    }
}

/// IQ1_S (`oracle_iq1::dot_iq1_s_q8_k`): per super-block `d = d_y·d_x`, `acc = fma(d, grid
/// lanes, acc)` and `acc1 = fma(d, Σ_s ±sc_s·bsum_s, acc1)`; `hsum_float_8(acc) + 0.125·acc1`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn iq1_s_rows<const R: usize, const T: usize>(
    w: &[&[BlockIq1S]; R],
    y: &[&[BlockQ8K]; T],
    out: &mut [[f32; R]; T],
) {
    let (n, w, y, pf) = pass(w, y);
    let mut acc = [[_mm256_setzero_ps(); R]; T];
    let mut acc1 = [[0f32; R]; T];
    let (word, shift) = (vec512(&S_QH_WORD), vec512(&S_QH_SHIFT));
    // SAFETY: `S_PAIRS` is 32 readable bytes; the load is unaligned.
    let pairs = unsafe { _mm256_loadu_si256(S_PAIRS.as_ptr().cast()) };
    // The grid indices of block i + 1 are stored while block i's are read (a store's values
    // reach the loads that read them back late).
    let mut idx: [[Indices; R]; 2] =
        std::array::from_fn(|_| std::array::from_fn(|_| Indices([0; GROUPS])));
    let indices = |i: usize, idx: &mut [Indices; R]| {
        for r in 0..R {
            let a = &w[r][i];
            // SAFETY: `a.qh` is 16 readable bytes; the load is unaligned.
            let qh = unsafe { _mm_loadu_si128(a.qh.as_ptr().cast()) };
            let words = _mm512_permutexvar_epi16(word, _mm512_castsi128_si512(qh));
            store_indices(&a.qs, _mm512_srlv_epi16(words, shift), &mut idx[r]);
        }
    };
    if n > 0 {
        indices(0, &mut idx[0]);
    }
    for i in 0..n {
        pf.at(i);
        let [now, next] = idx.each_mut().map(|v| v);
        let (now, next) = if i % 2 == 0 { (now, next) } else { (next, now) };
        if i + 1 < n {
            indices(i + 1, next);
        }
        for r in 0..R {
            let a = &w[r][i];
            // SAFETY: `a.qh` is 16 readable bytes; the load is unaligned.
            let qh = unsafe { _mm_loadu_si128(a.qh.as_ptr().cast()) };
            let ls = _mm_srli_epi16::<S_SCALE_SHIFT>(qh);
            let ls = _mm_and_si128(ls, _mm_set1_epi16(FIELD));
            let sc = _mm_add_epi16(_mm_add_epi16(ls, ls), _mm_set1_epi16(1));
            // The sign bit of each word, as 0 or −1: the scale negated where it is set.
            let neg = _mm_srai_epi16::<15>(qh);
            let signed = _mm_sub_epi16(_mm_xor_si128(sc, neg), neg);
            let signed = _mm256_permutexvar_epi16(pairs, _mm256_castsi128_si256(signed));
            let sc = _mm512_castsi128_si512(sc);
            let scs: [__m512i; STEPS] =
                std::array::from_fn(|p| _mm512_permutexvar_epi16(vec512(&S_STEP_SCALE[p]), sc));
            let x: [__m512i; STEPS] = std::array::from_fn(|p| step_grid(&now[r], p));
            let xd = f16(a.d);
            for t in 0..T {
                let b = &y[t][i];
                // Two chains of steps (integer sums: any order is exact).
                let mut lanes = [_mm512_setzero_si512(); CHAINS];
                for p in 0..STEPS {
                    let c = p % CHAINS;
                    lanes[c] = grid_step(lanes[c], x[p], step_q(b, p), scs[p]);
                }
                let d = b.d * xd;
                let v = _mm256_cvtepi32_ps(halves(_mm512_add_epi32(lanes[0], lanes[1])));
                acc[t][r] = _mm256_fmadd_ps(_mm256_set1_ps(d), v, acc[t][r]);
                let sumi1 = hsum_i32(_mm256_madd_epi16(bsums(b), signed));
                acc1[t][r] = d.mul_add(sumi1 as f32, acc1[t][r]);
            }
        }
    }
    for t in 0..T {
        for r in 0..R {
            out[t][r] = hsum_float_8(acc[t][r]) + IQ1S_DELTA * acc1[t][r];
        }
    }
}

/// IQ1_M (`oracle_iq1::dot_iq1_m_q8_k`): per super-block `d = d_y·d_x`, `acc1 = fma(d, grid
/// lanes, acc1)`, `acc2 = fma(d, delta lanes, acc2)`; `fma(hsum_float_8(acc2), 0.125,
/// hsum_float_8(acc1))`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn iq1_m_rows<const R: usize, const T: usize>(
    w: &[&[BlockIq1M]; R],
    y: &[&[BlockQ8K]; T],
    out: &mut [[f32; R]; T],
) {
    let (n, w, y, pf) = pass(w, y);
    let mut acc1 = [[_mm256_setzero_ps(); R]; T];
    let mut acc2 = [[_mm256_setzero_ps(); R]; T];
    let (byte, shift) = (vec512(&M_QH_BYTE), vec512(&M_QH_SHIFT));
    /// Lane k of the scales shifted by 3k (see [`M_STEP_SCALE`]).
    const SCALE_SHIFTS: [i64; M_FIELDS] = [0, 3, 6, 9];
    let scale_shifts = _mm256_setr_epi64x(
        SCALE_SHIFTS[0],
        SCALE_SHIFTS[1],
        SCALE_SHIFTS[2],
        SCALE_SHIFTS[3],
    );
    let (ones, zero) = (_mm512_set1_epi8(1), _mm512_setzero_si512());
    // As IQ1_S's, with each row's delta mask.
    let mut idx: [[Indices; R]; 2] =
        std::array::from_fn(|_| std::array::from_fn(|_| Indices([0; GROUPS])));
    let mut masks = [[0u32; R]; 2];
    let indices = |i: usize, idx: &mut [Indices; R], masks: &mut [u32; R]| {
        for r in 0..R {
            let a = &w[r][i];
            // SAFETY: `a.qh` is 16 readable bytes; the load is unaligned.
            let qh = _mm256_cvtepu8_epi16(unsafe { _mm_loadu_si128(a.qh.as_ptr().cast()) });
            let nibbles = _mm512_permutexvar_epi16(byte, _mm512_castsi256_si512(qh));
            let nibbles = _mm512_srlv_epi16(nibbles, shift);
            masks[r] = _mm512_test_epi16_mask(nibbles, _mm512_set1_epi16(M_DELTA_BIT));
            store_indices(&a.qs, nibbles, &mut idx[r]);
        }
    };
    if n > 0 {
        indices(0, &mut idx[0], &mut masks[0]);
    }
    for i in 0..n {
        pf.at(i);
        let [now, next] = idx.each_mut().map(|v| v);
        let (now, next) = if i % 2 == 0 { (now, next) } else { (next, now) };
        let [mnow, mnext] = masks.each_mut().map(|v| v);
        let (mnow, mnext) = if i % 2 == 0 {
            (mnow, mnext)
        } else {
            (mnext, mnow)
        };
        if i + 1 < n {
            indices(i + 1, next, mnext);
        }
        // Each token's quants a step, and the pair sums of them and of their negations
        // (wrapping, as `vpsignb` negates): a group's delta term is one or the other.
        let q: [[__m512i; STEPS]; T] =
            std::array::from_fn(|t| std::array::from_fn(|p| step_q(&y[t][i], p)));
        let sums: [[(__m512i, __m512i); STEPS]; T] = std::array::from_fn(|t| {
            std::array::from_fn(|p| {
                let neg = _mm512_sub_epi8(zero, q[t][p]);
                (
                    _mm512_maddubs_epi16(ones, q[t][p]),
                    _mm512_maddubs_epi16(ones, neg),
                )
            })
        });
        for r in 0..R {
            let a = &w[r][i];
            let negative = mnow[r];
            let words = _mm256_set1_epi64x(i64::from_le_bytes(a.scales));
            let ls = _mm256_srlv_epi64(words, scale_shifts);
            let ls = _mm256_and_si256(ls, _mm256_set1_epi16(FIELD));
            let sc = _mm256_add_epi16(_mm256_add_epi16(ls, ls), _mm256_set1_epi16(1));
            let sc = _mm512_castsi256_si512(sc);
            let scs: [__m512i; STEPS] =
                std::array::from_fn(|p| _mm512_permutexvar_epi16(vec512(&M_STEP_SCALE[p]), sc));
            let x: [__m512i; STEPS] = std::array::from_fn(|p| step_grid(&now[r], p));
            let xd = f16(a.d());
            for t in 0..T {
                let (mut l1, mut l2) = ([zero; CHAINS], [zero; CHAINS]);
                for p in 0..STEPS {
                    let c = p % CHAINS;
                    l1[c] = grid_step(l1[c], x[p], q[t][p], scs[p]);
                    let k = (negative >> (STEP_GROUPS * p)) as u8;
                    let delta = _mm512_mask_blend_epi64(k, sums[t][p].0, sums[t][p].1);
                    l2[c] = _mm512_dpwssd_epi32(l2[c], delta, scs[p]);
                }
                let l1 = _mm512_add_epi32(l1[0], l1[1]);
                let l2 = _mm512_add_epi32(l2[0], l2[1]);
                let d = _mm256_set1_ps(y[t][i].d * xd);
                let (v1, v2) = (
                    _mm256_cvtepi32_ps(halves(l1)),
                    _mm256_cvtepi32_ps(halves(l2)),
                );
                acc1[t][r] = _mm256_fmadd_ps(d, v1, acc1[t][r]);
                acc2[t][r] = _mm256_fmadd_ps(d, v2, acc2[t][r]);
            }
        }
    }
    for t in 0..T {
        for r in 0..R {
            let (s1, s2) = (hsum_float_8(acc1[t][r]), hsum_float_8(acc2[t][r]));
            out[t][r] = s2.mul_add(IQ1M_DELTA, s1);
        }
    }
}

/// One row's dot product with one token (the table's `dot`).
pub(super) fn iq1_dot<B: Iq1Dot>(x: &[B], y: &[BlockQ8K]) -> f32 {
    let mut o = [[0f32; 1]; 1];
    B::rows::<1, 1>(&[x], &[y], &mut o);
    o[0][0]
}

/// The tile of an IQ1 type: `vec_dot`'s order ([`Variant::Dot`]) here, in passes of rows and
/// tokens; the other variants by `rest`.
pub(super) fn iq1_tile<B: Iq1Dot>(
    rows: &[&[u8]],
    acts: &[ActRow],
    variant: Variant,
    out: &mut [f32],
    rest: TileDot,
) -> bool {
    if variant != Variant::Dot {
        return rest(rows, acts, variant, out);
    }
    super::passes::drive::<B, _, PASS_ROWS, PASS_TOKENS>(
        rows,
        acts,
        entries::q8_k,
        out,
        0,
        (
            B::rows::<PASS_ROWS, PASS_TOKENS>,
            B::rows::<PASS_ROWS, 1>,
            B::rows::<1, PASS_TOKENS>,
            B::rows::<1, 1>,
        ),
    );
    true
}
