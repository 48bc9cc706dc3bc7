//! AVX-512 `vec_dot` kernels of the IQ2 and IQ3 grid types (decode: one token against many
//! rows). Each 512-bit step takes two runs of 32 values: their grid values (sixteen IQ3 entries
//! or eight IQ2 groups of eight), the activation negated under the 64 sign bits (a masked
//! subtract in place of ggml's `vpsignb` against sign bytes, which wraps −128 as `vpsignb`
//! does), `vpmaddubsw`, and `vpdpwssd` by `2·ls + 1`. Run 2h's lanes sit in the low half, run
//! 2h + 1's in the high; adding the halves gives, lane for lane, the integers of ggml's AVX2
//! kernel (`kquant_kernels::iq_grid_lanes`), and the float chain is the 256-bit kernels' own
//! (`fma(d_y·d_x, lanes, acc)` a super-block, `hsum_float_8`, then the type's factor).
//!
//! The `#[target_feature]` functions are private; the table hands out the tiles only after
//! AVX2, FMA, F16C and AVX-512 F/BW/VL/VNNI were detected.

use std::arch::x86_64::*;

use super::kquant_rows::{RUN, RUNS};
use super::passes::{f16, hsums, pass, PASS_ROWS, PASS_TOKENS};
use crate::kernels::blocks::{BlockQ8K, IqGrid};
use crate::kernels::entries::{self, TileDot, Variant};
use crate::kernels::ActRow;

/// Groups of eight values in a run of 32.
const GROUPS: usize = RUN / 8;
/// Values a 512-bit step takes: two runs.
const STEP: usize = 2 * RUN;

/// One super-block's eight lanes: per step the two runs' grid values against their signed
/// activations, summed into the 256-bit kernel's lanes.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn grid_lanes<B: IqGrid>(a: &B, b: &BlockQ8K) -> __m256i {
    let zero = _mm512_setzero_si512();
    let mut acc = zero;
    for h in 0..RUNS / 2 {
        let k = 2 * GROUPS * h;
        let g = |j: usize| a.group(k + j) as i64;
        let v = _mm512_setr_epi64(g(0), g(1), g(2), g(3), g(4), g(5), g(6), g(7));
        let signs = a.sign_mask(k);
        // SAFETY: `b.qs` holds 256 bytes; the step's 64 start at STEP·h ≤ 192.
        let q8 = unsafe { _mm512_loadu_si512(b.qs[STEP * h..].as_ptr().cast()) };
        let q8 = _mm512_mask_sub_epi8(q8, signs, zero, q8);
        let scale = |s: usize| a.odd_scale(s) as i16;
        let ls = if B::SCALE_GROUP == RUN {
            let (lo, hi) = (
                _mm256_set1_epi16(scale(2 * h)),
                _mm256_set1_epi16(scale(2 * h + 1)),
            );
            _mm512_inserti64x4::<1>(_mm512_castsi256_si512(lo), hi)
        } else {
            let q = |i: usize| _mm_set1_epi16(scale(4 * h + i));
            let lo = _mm256_setr_m128i(q(0), q(1));
            let hi = _mm256_setr_m128i(q(2), q(3));
            _mm512_inserti64x4::<1>(_mm512_castsi256_si512(lo), hi)
        };
        acc = _mm512_dpwssd_epi32(acc, _mm512_maddubs_epi16(v, q8), ls);
    }
    _mm256_add_epi32(
        _mm512_castsi512_si256(acc),
        _mm512_extracti64x4_epi64::<1>(acc),
    )
}

/// `R` rows × `T` tokens in `vec_dot`'s order: per super-block `acc = fma(d_y·d_x, lanes,
/// acc)`, then `hsum_float_8` and the type's factor ([`IqGrid::SUM_SCALE`]).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn grid_rows_impl<B: IqGrid, const R: usize, const T: usize>(
    w: &[&[B]; R],
    y: &[&[BlockQ8K]; T],
    out: &mut [[f32; R]; T],
) {
    let (n, w, y, pf) = pass(w, y);
    let mut acc = [[_mm256_setzero_ps(); R]; T];
    for i in 0..n {
        pf.at(i);
        for r in 0..R {
            let a = &w[r][i];
            let xd = f16(a.d());
            for t in 0..T {
                let b = &y[t][i];
                let v = _mm256_cvtepi32_ps(grid_lanes(a, b));
                acc[t][r] = _mm256_fmadd_ps(_mm256_set1_ps(b.d * xd), v, acc[t][r]);
            }
        }
    }
    hsums(&acc, out);
    if let Some(f) = B::SUM_SCALE {
        for o in out.iter_mut().flatten() {
            *o *= f;
        }
    }
}

/// [`grid_rows_impl`], safe: only reachable through the AVX-512 table.
fn grid_rows<B: IqGrid, const R: usize, const T: usize>(
    w: &[&[B]; R],
    y: &[&[BlockQ8K]; T],
    out: &mut [[f32; R]; T],
) {
    // SAFETY: the table that hands out this kernel was built after every feature the body
    // enables was detected.
    unsafe { grid_rows_impl::<B, R, T>(w, y, out) }
}

/// One row's dot product with one token (the table's `dot`).
pub(super) fn grid_dot<B: IqGrid>(x: &[B], y: &[BlockQ8K]) -> f32 {
    let mut o = [[0f32; 1]; 1];
    grid_rows::<B, 1, 1>(&[x], &[y], &mut o);
    o[0][0]
}

/// The tile of an IQ grid type: `vec_dot`'s order ([`Variant::Dot`]) here, in passes of rows
/// and tokens; the other variants (the tiled matmul's panels) by `rest`.
pub(super) fn grid_tile<B: IqGrid>(
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
            grid_rows::<B, PASS_ROWS, PASS_TOKENS>,
            grid_rows::<B, PASS_ROWS, 1>,
            grid_rows::<B, 1, PASS_TOKENS>,
            grid_rows::<B, 1, 1>,
        ),
    );
    true
}
