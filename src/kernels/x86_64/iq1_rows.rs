//! IQ1_S and IQ1_M super-blocks unpacked once per row for their kernels (`iq1_kernels.rs`), on
//! both x86 tiers (256-bit AVX2 instructions, which both have). A row block becomes each
//! sub-block's 32 grid values and 32 delta signs as signed bytes (element `32s + b` at byte b of
//! run s, as the activation's run s loads), the sub-block's scales `2·ls + 1` as i16 (its first
//! half's in the low 128 bits, which `maddubs` + `madd` fill from bytes 0..16, its second
//! half's in the high), and for IQ1_S's delta term the signed scales of its sub-blocks paired
//! with the activation's sixteen `bsums`.

use std::arch::x86_64::*;

use super::kquant_rows::RUNS;
use super::passes::array_of;
use crate::kernels::blocks::{Iq1Grid, IQ1_GROUP, SUB32};

/// Grid entries (groups of eight values) per sub-block of 32.
const GROUPS: usize = SUB32 / IQ1_GROUP;
/// Eight bytes of +1 (a group's positive delta).
const PLUS_ONES: i64 = 0x0101_0101_0101_0101;
/// Eight bytes of −1 (a group's negative delta).
const MINUS_ONES: i64 = -1;

/// An IQ1 super-block of one row, unpacked.
#[derive(Clone, Copy)]
pub(super) struct Iq1Row {
    /// Each sub-block's grid values (−1, 0, 1).
    pub x: [__m256i; RUNS],
    /// Each sub-block's delta signs (±1, one a group of eight).
    pub delta: [__m256i; RUNS],
    /// Each sub-block's scales in i16 lanes: lanes 0..8 its first half's, 8..16 its second's.
    pub sc: [__m256i; RUNS],
}

/// IQ1_S's signed scales, for its delta term against the activation's sixteen `bsums`: i16 lanes `2s`, `2s + 1` sub-block s's
/// `±(2·ls + 1)`.
#[target_feature(enable = "avx2,fma")]
#[inline]
pub(super) fn iq1_signed_scales<B: Iq1Grid>(a: &B) -> __m256i {
    let signed = |s: usize| a.odd_scale(2 * s) as i16 * i16::from(a.delta_sign(GROUPS * s));
    let v: [i16; RUNS] = std::array::from_fn(signed);
    _mm256_setr_epi16(
        v[0], v[0], v[1], v[1], v[2], v[2], v[3], v[3], v[4], v[4], v[5], v[5], v[6], v[6], v[7],
        v[7],
    )
}

/// Run `s` of an IQ1 super-block, as [`iq1_row`] holds it: its grid values, its delta signs and
/// its scales. For the one-token kernels, which use each run once (so nothing is stored).
#[target_feature(enable = "avx2,fma")]
#[inline]
pub(super) fn iq1_run<B: Iq1Grid>(a: &B, s: usize) -> (__m256i, __m256i, __m256i) {
    let entry = |g: usize| a.entry(g) as i64;
    let delta = |g: usize| match a.delta_negative(g) {
        true => MINUS_ONES,
        false => PLUS_ONES,
    };
    let sc = |h: usize| _mm_set1_epi16(a.odd_scale(h) as i16);
    let g = GROUPS * s;
    (
        _mm256_setr_epi64x(entry(g), entry(g + 1), entry(g + 2), entry(g + 3)),
        _mm256_setr_epi64x(delta(g), delta(g + 1), delta(g + 2), delta(g + 3)),
        _mm256_setr_m128i(sc(2 * s), sc(2 * s + 1)),
    )
}

/// Unpacks an IQ1 super-block ([`Iq1Grid`]): the grid entries gathered four to a sub-block as
/// ggml's kernels gather them.
#[target_feature(enable = "avx2,fma")]
#[inline]
pub(super) fn iq1_row<B: Iq1Grid>(a: &B) -> Iq1Row {
    let entry = |g: usize| a.entry(g) as i64;
    let delta = |g: usize| match a.delta_negative(g) {
        true => MINUS_ONES,
        false => PLUS_ONES,
    };
    let sc = |h: usize| _mm_set1_epi16(a.odd_scale(h) as i16);
    Iq1Row {
        x: array_of!(RUNS, |s| {
            let g = GROUPS * s;
            _mm256_setr_epi64x(entry(g), entry(g + 1), entry(g + 2), entry(g + 3))
        }),
        delta: array_of!(RUNS, |s| {
            let g = GROUPS * s;
            _mm256_setr_epi64x(delta(g), delta(g + 1), delta(g + 2), delta(g + 3))
        }),
        sc: array_of!(RUNS, |s| _mm256_setr_m128i(sc(2 * s), sc(2 * s + 1))),
    }
}
