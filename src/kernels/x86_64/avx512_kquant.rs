//! The AVX-512 tier of the generic path's types: the kernels of `kquant_kernels.rs` and
//! `kwide_kernels.rs` over AVX-512 VNNI primitives, on 256-bit vectors (VL), the width this tier's other
//! single-token kernels use too (on Zen 4, which runs 512-bit operations in two halves, the
//! instruction count is what matters). In the row kernels `vpdpbusd` forms a run's four-sums
//! of u8 × i8 in one instruction (AVX2 needs `maddubs` + `madd`) and never saturates; two runs'
//! four-sums (each within ±2^15 for these codes: at most 4 · 63 · 128) are interleaved as i16
//! pairs and `vpdpwssd` multiplies them by their two sub-block scales and accumulates, in one
//! instruction; the panels sum `maddubs` runs in i16 as AVX2's do (see `kernels` below). The
//! integers are exactly those of the AVX2 primitives, lane for lane, so the outputs are
//! bit-identical to the oracles as there. Q5_0, Q5_1 and IQ4_NL likewise: their four-sums by
//! `vpdpbusd`, Q5_0's fifth bits expanded from a mask register; Q5_0's tile holds two rows per
//! 512-bit vector ([`q5_0_pairs_impl`]).
//!
//! The `#[target_feature]` functions are private; the table hands out the safe wrappers only
//! after AVX2, FMA, F16C and AVX-512 F/BW/VL/VNNI were detected.

use std::arch::x86_64::*;

use super::avx512_iq::{grid_dot, grid_lanes, grid_tile, WideGrid};
use super::avx512_iq1::iq1_dot;
use super::avx512_iq_vbmi::grid_lanes_vbmi;
use super::avx512_panel::join;
use super::kquant_rows::{RunPair, Q3_BIAS};
use super::passes::{drive, f16, load32, pass, PASS_TOKENS};
use super::vec256::{hsum_float_8, scale8};
use crate::kernels::blocks::BlockQ5_0;
use crate::kernels::blocks::BlockQ8_0;
use crate::kernels::blocks::{
    BlockIq1M, BlockIq1S, BlockIq2S, BlockIq2Xs, BlockIq2Xxs, BlockIq3S, BlockIq3Xxs, BlockQ8K,
};
use crate::kernels::entries::row_dot;
use crate::kernels::entries::{Variant, SCALAR};
use crate::kernels::{ActRow, Entry, GgmlType};

/// `acc + sc_a·Σ4(x[0]·y[0] − b[0]) + sc_b·Σ4(x[1]·y[1] − b[1])` in each i32 lane, where the
/// lane of `sp` holds `(sc_a, sc_b)` as two i16 (see `avx2_kquant::pair_dot`): each run's
/// four-sums by `vpdpbusd` accumulated onto its bias ([`bias4`], or zero), the two put side by
/// side as the i16 halves of each lane, then one `vpdpwssd`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn pair_dot(acc: __m256i, x: RunPair, y: RunPair, b: RunPair, sp: __m256i) -> __m256i {
    let lo = _mm256_dpbusd_epi32(b[0], x[0], y[0]);
    let hi = _mm256_dpbusd_epi32(b[1], x[1], y[1]);
    _mm256_dpwssd_epi32(acc, interleave(lo, hi), sp)
}

/// The negated four-sums of `4·y` (a Q3_K run's bias, as [`pair_dot`] starts from it).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn bias4(y: __m256i) -> __m256i {
    let z = _mm256_setzero_si256();
    _mm256_sub_epi32(z, _mm256_dpbusd_epi32(z, _mm256_set1_epi8(Q3_BIAS), y))
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

/// This tier's kernels of IQ1_S and IQ1_M over the primitives above.
mod iq1 {
    super::super::iq1_kernels::iq1_kernels!("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni");
}

/// This tier's kernels of Q5_0, Q5_1, IQ4_NL and MXFP4 over the primitives above.
mod wide {
    super::super::kwide_kernels::wide_kernels!(
        "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni"
    );
}

/// This tier's kernels of the K-quants and IQ4_XS over the primitives above. The panels sum
/// `maddubs` runs in i16 as AVX2's do (one `madd` per run) rather than a `vpdpbusd` four-sum
/// per group and a `vpmulld` per sub-block: on Zen 5, pp128 of the 1B models gained 4% (Q2_K),
/// 9–10% (Q3_K_M, through the Q3_K panel then) and 11–13% (Q4_K_M in the file's layout,
/// `--numa off`), alternating (BENCHMARKS.md, "Packed kernels spread their prefetches on
/// AVX-512 too"). Sixteen-row Q3_K prompts have since left the panels for
/// `avx512_packed_tile::q3_k_rows` (one `vpdpbusd` per group and token over super-blocks unpacked
/// once), 22% faster again on Zen 5; the eight-row panels here keep the rows left over.
mod kernels {
    super::super::kquant_kernels::k_quant_kernels!(
        "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni"
    );
}

/// Rows per pass of [`q5_0_pairs_impl`] over several tokens: two 512-bit vectors of two rows
/// each (per token; more would spill the accumulators).
const PAIR_ROWS: usize = 4;

/// Rows per pass over one token (decode's matrix-vector product): four vectors of two rows.
/// Per-head `attn_k_b` rows are four blocks long, so a pass's fixed cost (its call, the
/// reductions' setup) was a large share of the work at four rows.
const PAIR_ROWS_ONE: usize = 8;

/// Q5_0·Q8_0 in `vec_dot`'s order (`oracle_vec_dot::dot_q5_0_q8_0`, as `wide`'s `q5_0_rows`) for
/// `R` rows × `T` tokens, two rows per 512-bit vector (row 2p in the low half, 2p + 1 in the
/// high): each half runs its row's eight lanes exactly as the 256-bit kernel does, so a
/// token's `vpdpbusd`, scale product and `fma` serve two rows. ggml's sign trick without
/// `vpsignb` (which has no 512-bit form): `|x|` against `y` negated where `x < 0` (wrapping, as
/// `vpsignb` does); where `x = 0` the product is 0 either way. (Arrays are `R` long, pairs use
/// the first `R / 2`: stable Rust has no `R / 2` array length.)
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn q5_0_pairs_impl<const R: usize, const T: usize>(
    w: &[&[BlockQ5_0]; R],
    y: &[&[BlockQ8_0]; T],
    out: &mut [[f32; R]; T],
) {
    const { assert!(R.is_multiple_of(2)) };
    let pairs = R / 2;
    let (n, w, y, pf) = pass(w, y);
    let zero = _mm512_setzero_si512();
    let values = wide::q5_0_values;
    let join_ps = |lo: __m256, hi: __m256| {
        _mm512_castpd_ps(_mm512_insertf64x4::<1>(
            _mm512_castpd256_pd512(_mm256_castps_pd(lo)),
            _mm256_castps_pd(hi),
        ))
    };
    let mut acc = [[_mm512_setzero_ps(); R]; T];
    for i in 0..n {
        pf.at(i);
        let mut ux = [zero; R];
        let mut neg: [__mmask64; R] = [0; R];
        let mut dx = [_mm512_setzero_ps(); R];
        for p in 0..pairs {
            let x = join(values(&w[2 * p][i]), values(&w[2 * p + 1][i]));
            ux[p] = _mm512_abs_epi8(x);
            neg[p] = _mm512_movepi8_mask(x);
            dx[p] = join_ps(scale8(w[2 * p][i].d), scale8(w[2 * p + 1][i].d));
        }
        for t in 0..T {
            let b = &y[t][i];
            let qy = _mm512_broadcast_i64x4(load32(&b.qs));
            let dy = _mm512_set1_ps(f16(b.d));
            for p in 0..pairs {
                let sy = _mm512_mask_sub_epi8(qy, neg[p], zero, qy);
                let q = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(zero, ux[p], sy));
                acc[t][p] = _mm512_fmadd_ps(_mm512_mul_ps(dx[p], dy), q, acc[t][p]);
            }
        }
    }
    for t in 0..T {
        for p in 0..pairs {
            let v = acc[t][p];
            let hi = _mm512_extractf64x4_pd::<1>(_mm512_castps_pd(v));
            out[t][2 * p] = hsum_float_8(_mm512_castps512_ps256(v));
            out[t][2 * p + 1] = hsum_float_8(_mm256_castpd_ps(hi));
        }
    }
}

fn q5_0_pairs<const R: usize, const T: usize>(
    w: &[&[BlockQ5_0]; R],
    y: &[&[BlockQ8_0]; T],
    out: &mut [[f32; R]; T],
) {
    // SAFETY: only reachable through the table built after every feature above was detected.
    unsafe { q5_0_pairs_impl::<R, T>(w, y, out) }
}

/// Q5_0's tile on this tier: passes of [`PAIR_ROWS`] rows ([`PAIR_ROWS_ONE`] for one token) by
/// [`q5_0_pairs`], the last rows one at a time by `wide`'s 256-bit kernel.
fn tile_q5_0_pairs(rows: &[&[u8]], acts: &[ActRow], variant: Variant, out: &mut [f32]) -> bool {
    if variant != Variant::Dot {
        return false;
    }
    let get = crate::kernels::entries::q8_0;
    if acts.len() == 1 {
        drive::<BlockQ5_0, _, PAIR_ROWS_ONE, 1>(
            rows,
            acts,
            get,
            out,
            0,
            (
                q5_0_pairs::<PAIR_ROWS_ONE, 1>,
                q5_0_pairs::<PAIR_ROWS_ONE, 1>,
                wide::q5_0_rows::<1, 1>,
                wide::q5_0_rows::<1, 1>,
            ),
        );
        return true;
    }
    drive::<BlockQ5_0, _, PAIR_ROWS, PASS_TOKENS>(
        rows,
        acts,
        get,
        out,
        0,
        (
            q5_0_pairs::<PAIR_ROWS, PASS_TOKENS>,
            q5_0_pairs::<PAIR_ROWS, 1>,
            wide::q5_0_rows::<1, PASS_TOKENS>,
            wide::q5_0_rows::<1, 1>,
        ),
    );
    true
}

/// Q2_K's and Q3_K's tiles on this tier: sixteen rows at a time (`avx512_panel.rs`: Q2_K's
/// 512-bit panels, Q3_K through `avx512_packed_tile::q3_k_rows`), the eight-row tiles of `kernels`
/// for the rows left and the other orders.
fn tile_q2_k16(rows: &[&[u8]], acts: &[ActRow], variant: Variant, out: &mut [f32]) -> bool {
    super::avx512_panel::tile_q2_k(rows, acts, variant, out, kernels::tile_q2_k)
}
fn tile_q3_k16(rows: &[&[u8]], acts: &[ActRow], variant: Variant, out: &mut [f32]) -> bool {
    super::avx512_panel::tile_q3_k(rows, acts, variant, out, kernels::tile_q3_k_panels)
}
/// `vec_dot` of an IQ grid type (`R` rows × `T` tokens): the lanes of `avx512_iq`'s 512-bit
/// steps through the float chain of the 256-bit kernels (`kernels::iq_grid_dot`); with `VBMI`,
/// their grid values looked up in vectors (`avx512_iq_vbmi`), for a CPU that has AVX-512 VBMI.
pub(super) fn iq_grid_rows<B: WideGrid, const VBMI: bool, const R: usize, const T: usize>(
    w: &[&[B]; R],
    y: &[&[BlockQ8K]; T],
    out: &mut [[f32; R]; T],
) {
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
    fn imp<B: WideGrid, const R: usize, const T: usize>(
        w: &[&[B]; R],
        y: &[&[BlockQ8K]; T],
        out: &mut [[f32; R]; T],
    ) {
        kernels::iq_grid_dot(w, y, out, |a, b| grid_lanes(a, b))
    }
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi")]
    fn vbmi<B: WideGrid, const R: usize, const T: usize>(
        w: &[&[B]; R],
        y: &[&[BlockQ8K]; T],
        out: &mut [[f32; R]; T],
    ) {
        kernels::iq_grid_dot(w, y, out, |a, b| grid_lanes_vbmi(a, b))
    }
    if VBMI {
        // SAFETY: only reachable through this tier's table, built after every feature the
        // body enables was detected, and with `VBMI` only where `vbmi_detected` found VBMI.
        unsafe { vbmi::<B, R, T>(w, y, out) }
    } else {
        // SAFETY: only reachable through this tier's table, built after every feature the body
        // enables was detected.
        unsafe { imp::<B, R, T>(w, y, out) }
    }
}

/// The IQ2 and IQ3 types' tiles: sixteen rows at a time in the tiled order
/// (`avx512_iq_tile::iq_grid_rows`), `vec_dot`'s order in 512-bit steps (`avx512_iq`), the
/// eight-row tiled passes of `kernels` otherwise.
fn tile_iq3_xxs16(rows: &[&[u8]], acts: &[ActRow], variant: Variant, out: &mut [f32]) -> bool {
    super::avx512_panel::tile_iq3_xxs(rows, acts, variant, out, iq3_xxs_rest)
}
fn iq3_xxs_rest(rows: &[&[u8]], acts: &[ActRow], variant: Variant, out: &mut [f32]) -> bool {
    grid_tile::<BlockIq3Xxs>(rows, acts, variant, out, kernels::tile_iq3_xxs)
}
fn tile_iq3_s16(rows: &[&[u8]], acts: &[ActRow], variant: Variant, out: &mut [f32]) -> bool {
    super::avx512_panel::tile_iq3_s(rows, acts, variant, out, iq3_s_rest)
}
fn iq3_s_rest(rows: &[&[u8]], acts: &[ActRow], variant: Variant, out: &mut [f32]) -> bool {
    grid_tile::<BlockIq3S>(rows, acts, variant, out, kernels::tile_iq3_s)
}
fn tile_iq2_xxs16(rows: &[&[u8]], acts: &[ActRow], variant: Variant, out: &mut [f32]) -> bool {
    super::avx512_panel::tile_iq2_xxs(rows, acts, variant, out, iq2_xxs_rest)
}
fn iq2_xxs_rest(rows: &[&[u8]], acts: &[ActRow], variant: Variant, out: &mut [f32]) -> bool {
    grid_tile::<BlockIq2Xxs>(rows, acts, variant, out, kernels::tile_iq2_xxs)
}
fn tile_iq2_xs16(rows: &[&[u8]], acts: &[ActRow], variant: Variant, out: &mut [f32]) -> bool {
    super::avx512_panel::tile_iq2_xs(rows, acts, variant, out, iq2_xs_rest)
}
fn iq2_xs_rest(rows: &[&[u8]], acts: &[ActRow], variant: Variant, out: &mut [f32]) -> bool {
    grid_tile::<BlockIq2Xs>(rows, acts, variant, out, kernels::tile_iq2_xs)
}
fn tile_iq2_s16(rows: &[&[u8]], acts: &[ActRow], variant: Variant, out: &mut [f32]) -> bool {
    super::avx512_panel::tile_iq2_s(rows, acts, variant, out, iq2_s_rest)
}
fn iq2_s_rest(rows: &[&[u8]], acts: &[ActRow], variant: Variant, out: &mut [f32]) -> bool {
    grid_tile::<BlockIq2S>(rows, acts, variant, out, kernels::tile_iq2_s)
}

/// The IQ1 types' tiles: sixteen rows at a time in the tiled order
/// (`avx512_iq_tile::iq1_rows`), `iq1`'s tiles otherwise.
fn tile_iq1_s16(rows: &[&[u8]], acts: &[ActRow], variant: Variant, out: &mut [f32]) -> bool {
    super::avx512_panel::tile_iq1_s(rows, acts, variant, out, iq1_s_rest)
}
fn tile_iq1_m16(rows: &[&[u8]], acts: &[ActRow], variant: Variant, out: &mut [f32]) -> bool {
    super::avx512_panel::tile_iq1_m(rows, acts, variant, out, iq1_m_rest)
}

/// The IQ1 types' tiles for what the panels leave: `vec_dot`'s order in 512-bit steps
/// (`avx512_iq1`), the tiled passes of `iq1` otherwise.
fn iq1_s_rest(rows: &[&[u8]], acts: &[ActRow], variant: Variant, out: &mut [f32]) -> bool {
    super::avx512_iq1::iq1_tile::<BlockIq1S>(rows, acts, variant, out, iq1::tile_iq1_s)
}
fn iq1_m_rest(rows: &[&[u8]], acts: &[ActRow], variant: Variant, out: &mut [f32]) -> bool {
    super::avx512_iq1::iq1_tile::<BlockIq1M>(rows, acts, variant, out, iq1::tile_iq1_m)
}

/// The generic path's rows for this tier: the oracle's, with this tier's kernels in place of
/// every dot product and a tile kernel for every type.
pub(in crate::kernels) fn entries() -> [Entry; SCALAR.len()] {
    let mut rows = SCALAR;
    for e in &mut rows {
        let tile = wide::fill(e).or_else(|| kernels::fill(e));
        if let Some(tile) = tile.or_else(|| iq1::fill(e)) {
            e.tile = Some(tile);
        }
        match e.ty {
            GgmlType::Q5_0 => e.tile = Some(tile_q5_0_pairs),
            GgmlType::Q2K => e.tile = Some(tile_q2_k16),
            GgmlType::Q3K => e.tile = Some(tile_q3_k16),
            GgmlType::Iq1S => {
                e.tile = Some(tile_iq1_s16);
                e.dot = row_dot!(iq1_dot::<BlockIq1S>, BlockIq1S, q8_k);
            }
            GgmlType::Iq1M => {
                e.tile = Some(tile_iq1_m16);
                e.dot = row_dot!(iq1_dot::<BlockIq1M>, BlockIq1M, q8_k);
            }
            GgmlType::Iq3Xxs => {
                e.tile = Some(tile_iq3_xxs16);
                e.dot = row_dot!(grid_dot::<BlockIq3Xxs>, BlockIq3Xxs, q8_k);
            }
            GgmlType::Iq3S => {
                e.tile = Some(tile_iq3_s16);
                e.dot = row_dot!(grid_dot::<BlockIq3S>, BlockIq3S, q8_k);
            }
            GgmlType::Iq2Xxs => {
                e.tile = Some(tile_iq2_xxs16);
                e.dot = row_dot!(grid_dot::<BlockIq2Xxs>, BlockIq2Xxs, q8_k);
            }
            GgmlType::Iq2Xs => {
                e.tile = Some(tile_iq2_xs16);
                e.dot = row_dot!(grid_dot::<BlockIq2Xs>, BlockIq2Xs, q8_k);
            }
            GgmlType::Iq2S => {
                e.tile = Some(tile_iq2_s16);
                e.dot = row_dot!(grid_dot::<BlockIq2S>, BlockIq2S, q8_k);
            }
            _ => {}
        }
        e.packed = super::avx512_packed::packed(e.ty);
    }
    rows
}

/// Whether this CPU has AVX-512 VBMI, for the IQ grid types' in-vector lookups
/// (`avx512_iq_vbmi`); without it they load their grid entries from the tables. (std caches
/// the detection: a load and a bit test a call.)
pub(super) fn vbmi_detected() -> bool {
    is_x86_feature_detected!("avx512vbmi")
}
