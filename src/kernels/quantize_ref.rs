//! Weight quantizers for Q5_0, Q5_1, IQ4_NL, the K-quants (Q2_K..Q6_K), IQ4_XS, IQ3_XXS and
//! IQ3_S: what `llama-quantize` writes when it has no importance matrix, byte for byte.
//!
//! `llama-quantize` calls `ggml_quantize_chunk(type, …, imatrix = NULL)`. Without an importance
//! matrix Q5_0, Q5_1 and the K-quants run ggml's `quantize_row_*_ref` row quantizers; IQ4_NL and
//! IQ4_XS have no such shortcut and run `quantize_row_iq4_nl_impl` with its own weights `x²` and
//! seven scale tries each way; IQ3_XXS and IQ3_S run `quantize_row_iq3_xxs_impl` and
//! `quantize_row_iq3_s_impl` (their `_ref`s too) with weights `x²`, 31 or 19 scale tries and a
//! search of their grid's nearest entries, built once. Every block depends on its own values
//! only, so one row here is any row of a file there. The importance-matrix quantizers of
//! IQ2_XXS, IQ2_XS, IQ2_S, IQ1_S and IQ1_M (`quantize_iq2.rs`, `quantize_iq1.rs`: one row
//! with its weights, to ggml's bytes) are re-exported here too.
//!
//! The arithmetic follows ggml's C expression by expression. `ggml-quants.c` is built into
//! ggml-base for plain x86-64 (no `-march`, no `-ffast-math`; its object code has no FMA
//! instruction), so each C operator is one IEEE f32 operation in source order, as in Rust:
//! `a*b*c` is `(a*b)*c`, and every sum runs from index 0 upwards in one f32 accumulator. Ints
//! mixed into float expressions are converted first (`w*l*l` is `(w·(float)l)·(float)l`).
//! Rounding comes in three kinds, each kept where ggml uses it:
//! - [`nearest_int`]: ggml's `nearest_int`, adding 1.5·2²³ and reading the low mantissa bits:
//!   round half to even for |x| < 2²², and a wrapped value beyond (reproduced, not fixed);
//! - C casts `(int8_t)f`, `(uint8_t)f`: x86 `cvttss2si` into 32 bits (truncation, `i32::MIN`
//!   for NaN and out of range), then the low byte ([`trunc_i32`]);
//! - f16 stores: ggml-base's software `ggml_compute_fp32_to_fp16`, round to nearest even, NaN
//!   to `0x7e00` with the sign ([`fp16`]).

use super::blocks::{
    BlockIq4Nl, BlockIq4Xs, BlockQ2K, BlockQ3K, BlockQ4K, BlockQ5K, BlockQ5_0, BlockQ5_1, BlockQ6K,
    KVALUES_IQ4NL, K_SCALE_SIZE, QK, QK_K, SUB16,
};
use super::dequantize::{get_scale_min_k4 as scale_min_k4, nearest_int, I32_LIMIT};
use super::half::{f16_to_f32, f32_to_f16};
pub use super::quantize_iq1::{quantize_iq1_m, quantize_iq1_s};
pub use super::quantize_iq2::{quantize_iq2_s, quantize_iq2_xs, quantize_iq2_xxs};
pub use super::quantize_iq3::{quantize_iq3_s, quantize_iq3_xxs};

/// ggml's `GROUP_MAX_EPS`: a group whose largest magnitude is below it counts as all zero.
pub(super) const GROUP_MAX_EPS: f32 = 1e-15;
/// f16 quiet NaN, what ggml's software conversion gives every NaN (plus its sign).
const F16_NAN: u16 = 0x7e00;
/// Largest 6-bit scale/min of Q4_K and Q5_K.
const MAX_6BIT: i32 = 63;
/// Largest 4-bit scale/min of Q2_K.
const MAX_4BIT: f32 = 15.0;
/// IQ4 scale tries each side of the first guess (`ntry` of `quantize_iq4_nl`/`quantize_iq4_xs`).
const IQ4_NTRY: i32 = 7;

/// C's float → integer conversion as x86 does it (`cvttss2si`, 32 bits): toward zero,
/// `i32::MIN` for NaN and values outside the i32 range.
#[inline]
fn trunc_i32(v: f32) -> i32 {
    if (-I32_LIMIT..I32_LIMIT).contains(&v) {
        v as i32
    } else {
        i32::MIN
    }
}

/// `GGML_FP32_TO_FP16` as ggml-base computes it (little-endian bytes).
#[inline]
pub(super) fn fp16(v: f32) -> [u8; 2] {
    let h = if v.is_nan() {
        ((v.to_bits() >> 16) as u16 & 0x8000) | F16_NAN
    } else {
        f32_to_f16(v)
    };
    h.to_le_bytes()
}

/// `GGML_FP16_TO_FP32` (exact).
#[inline]
fn unfp16(h: [u8; 2]) -> f32 {
    f16_to_f32(u16::from_le_bytes(h))
}

/// The first of the values of largest magnitude in `x` (strictly larger replaces), and that
/// magnitude; both 0 for an empty or all-zero slice.
#[inline]
fn signed_amax(x: &[f32]) -> (f32, f32) {
    let (mut amax, mut max) = (0f32, 0f32);
    for &v in x {
        let ax = v.abs();
        if ax > amax {
            amax = ax;
            max = v;
        }
    }
    (max, amax)
}

// ---- Q5_0, Q5_1 -----------------------------------------------------------------------------

/// Packs 32 five-bit levels: low nibbles of elements j and j+16 into `qs[j]`, fifth bits into the
/// little-endian `qh` (bit j for element j).
#[inline]
fn pack_5bit(q: impl Fn(usize) -> u8, qs: &mut [u8; QK / 2], qh: &mut [u8; 4]) {
    let mut h = 0u32;
    for (j, b) in qs.iter_mut().enumerate() {
        let (q0, q1) = (q(j), q(j + QK / 2));
        *b = (q0 & 0x0f) | ((q1 & 0x0f) << 4);
        h |= u32::from((q0 & 0x10) >> 4) << j;
        h |= u32::from((q1 & 0x10) >> 4) << (j + QK / 2);
    }
    *qh = h.to_le_bytes();
}

/// `quantize_row_q5_0_ref`: `d = max/−16` (max the first value of largest magnitude),
/// `q = min(31, (int8)(x·(1/d) + 16.5))` (truncation, so rounding half up).
pub fn quantize_q5_0(x: &[f32], y: &mut [BlockQ5_0]) {
    assert_eq!(x.len(), y.len() * QK, "quantize_q5_0: row length");
    for (xb, yb) in x.chunks_exact(QK).zip(y.iter_mut()) {
        let (max, _) = signed_amax(xb);
        let d = max / -16.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        yb.d = fp16(d);
        let q = |j: usize| (trunc_i32(xb[j] * id + 16.5) as i8).min(31) as u8;
        pack_5bit(q, &mut yb.qs, &mut yb.qh);
    }
}

/// `quantize_row_q5_1_ref`: `d = (max − min)/31`, `m = min`,
/// `q = (uint8)((x − min)·(1/d) + 0.5)` (truncation).
pub fn quantize_q5_1(x: &[f32], y: &mut [BlockQ5_1]) {
    assert_eq!(x.len(), y.len() * QK, "quantize_q5_1: row length");
    for (xb, yb) in x.chunks_exact(QK).zip(y.iter_mut()) {
        let (mut min, mut max) = (f32::MAX, -f32::MAX);
        for &v in xb {
            if v < min {
                min = v;
            }
            if v > max {
                max = v;
            }
        }
        let d = (max - min) / 31.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        yb.d = fp16(d);
        yb.m = fp16(min);
        let q = |j: usize| trunc_i32((xb[j] - min) * id + 0.5) as u8;
        pack_5bit(q, &mut yb.qs, &mut yb.qh);
    }
}

// ---- IQ4_NL, IQ4_XS -------------------------------------------------------------------------

/// ggml's `best_index_int8` over [`KVALUES_IQ4NL`]: the nearest table value by bisection, the
/// upper one on ties; below the first or above the last, the end.
#[inline]
fn best_index_iq4(x: f32) -> usize {
    let val = |i: usize| f32::from(KVALUES_IQ4NL[i]);
    let last = KVALUES_IQ4NL.len() - 1;
    if x <= val(0) {
        return 0;
    }
    if x >= val(last) {
        return last;
    }
    let (mut ml, mut mu) = (0, last);
    while mu - ml > 1 {
        let mav = (ml + mu) / 2;
        if x < val(mav) {
            mu = mav;
        } else {
            ml = mav;
        }
    }
    if x - val(mu - 1) < val(mu) - x {
        mu - 1
    } else {
        mu
    }
}

/// The scale `quantize_row_iq4_nl_impl` picks for one 32-value block without an importance
/// matrix: weights `w = x²`; first guess `d = −max/−127`, then the least-squares `Σwqx/Σwq²` of
/// the levels it gives, bettered by any of the 15 tries `id = (t − 127)/max`, t in −7..=7, whose
/// `(Σwqx)²/Σwq²` is strictly larger. 0 for a block below [`GROUP_MAX_EPS`].
fn iq4_block_scale(xb: &[f32]) -> f32 {
    let mut weight = [0f32; QK];
    for (w, &v) in weight.iter_mut().zip(xb) {
        *w = v * v;
    }
    let (max, amax) = signed_amax(xb);
    if amax < GROUP_MAX_EPS {
        return 0.0;
    }
    let v0 = KVALUES_IQ4NL[0];
    // Σ w·q·x and Σ w·q·q over the levels nearest `id·x`.
    let sums = |id: f32| {
        let (mut sumqx, mut sumq2) = (0f32, 0f32);
        for (&v, &w) in xb.iter().zip(&weight) {
            let q = f32::from(KVALUES_IQ4NL[best_index_iq4(id * v)]);
            sumqx += w * q * v;
            sumq2 += w * q * q;
        }
        (sumqx, sumq2)
    };
    let (sumqx, sumq2) = sums(1.0 / (-max / f32::from(v0)));
    let mut d = if sumq2 > 0.0 { sumqx / sumq2 } else { 0.0 };
    let mut best = d * sumqx;
    for itry in -IQ4_NTRY..=IQ4_NTRY {
        let (sumqx, sumq2) = sums((itry + i32::from(v0)) as f32 / max);
        if sumq2 > 0.0 && sumqx * sumqx > best * sumq2 {
            d = sumqx / sumq2;
            best = d * sumqx;
        }
    }
    d
}

/// Packs 32 nibble indices of the values `idl·x` (low nibbles elements 0..16).
#[inline]
fn pack_iq4(xb: &[f32], idl: f32, qs: &mut [u8]) {
    for j in 0..QK / 2 {
        let lo = best_index_iq4(idl * xb[j]) as u8;
        let hi = best_index_iq4(idl * xb[j + QK / 2]) as u8;
        qs[j] = lo | (hi << 4);
    }
}

/// `quantize_iq4_nl` without an importance matrix: per block the scale of [`iq4_block_scale`],
/// stored as f16; the indices are the values nearest `x·(1/d)` with the unrounded f32 `d`
/// (`1/d` taken as 0 when `d` is 0, which makes every index 8).
pub fn quantize_iq4_nl(x: &[f32], y: &mut [BlockIq4Nl]) {
    assert_eq!(x.len(), y.len() * QK, "quantize_iq4_nl: row length");
    for (xb, yb) in x.chunks_exact(QK).zip(y.iter_mut()) {
        let d = iq4_block_scale(xb);
        yb.d = fp16(d);
        pack_iq4(xb, if d != 0.0 { 1.0 / d } else { 0.0 }, &mut yb.qs);
    }
}

/// `quantize_iq4_xs` without an importance matrix: the eight block scales of
/// [`iq4_block_scale`]; `d = max_scale/−32` (the scale of largest magnitude, first on ties,
/// `+0` when all are 0, so an all-zero block stores `d = −0`); each block's
/// `l = clamp(nearest_int(s·(1/d)), −32, 31)` stored as `l + 32`; indices nearest `x·(1/(d·l))`
/// (0 when `d·l` is 0).
pub fn quantize_iq4_xs(x: &[f32], y: &mut [BlockIq4Xs]) {
    assert_eq!(x.len(), y.len() * QK_K, "quantize_iq4_xs: row length");
    for (xs, yb) in x.chunks_exact(QK_K).zip(y.iter_mut()) {
        let mut scales = [0f32; QK_K / QK];
        for (s, xb) in scales.iter_mut().zip(xs.chunks_exact(QK)) {
            *s = iq4_block_scale(xb);
        }
        let (max_scale, _) = signed_amax(&scales);
        let d = -max_scale / 32.0;
        yb.d = fp16(d);
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        yb.scales_l = [0; QK_K / 64];
        let mut scales_h = 0u16;
        for (ib, xb) in xs.chunks_exact(QK).enumerate() {
            let l = nearest_int(id * scales[ib]).clamp(-32, 31);
            let dl = d * l as f32;
            let idl = if dl != 0.0 { 1.0 / dl } else { 0.0 };
            pack_iq4(xb, idl, &mut yb.qs[ib * QK / 2..(ib + 1) * QK / 2]);
            let l = (l + 32) as u8;
            yb.scales_l[ib / 2] |= (l & 0x0f) << (4 * (ib % 2));
            scales_h |= u16::from(l >> 4) << (2 * ib);
        }
        yb.scales_h = scales_h.to_le_bytes();
    }
}

// ---- shared K-quant helpers -----------------------------------------------------------------

/// ggml's `make_qkx2_quants`: levels `l` in 0..=nmax and `(scale, m)` for `x ≈ scale·l − m`
/// minimising `Σ w·err` (err = |diff| when `use_mad`, else diff²). Start: `min = min(x, 0)`,
/// `iscale = nmax/(max − min)`; then for each step `is` in 0..=nstep the levels at
/// `iscale = (rmin + rdelta·is + nmax)/(max − min)` get a weighted least-squares scale and min
/// (`min` clamped to ≤ 0, the scale then refitted), kept when their error is strictly smaller.
/// Returns `(scale, −min)`; `(0, −min)` with all levels 0 when `max == min`.
#[allow(clippy::too_many_arguments)]
fn make_qkx2_quants(
    nmax: i32,
    x: &[f32],
    weights: &[f32],
    levels: &mut [u8],
    rmin: f32,
    rdelta: f32,
    nstep: i32,
    use_mad: bool,
) -> (f32, f32) {
    let n = x.len();
    let (mut min, mut max) = (x[0], x[0]);
    let mut sum_w = weights[0];
    let mut sum_x = sum_w * x[0];
    for i in 1..n {
        if x[i] < min {
            min = x[i];
        }
        if x[i] > max {
            max = x[i];
        }
        let w = weights[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if min > 0.0 {
        min = 0.0;
    }
    if max == min {
        levels[..n].fill(0);
        return (0.0, -min);
    }
    let err = |diff: f32| if use_mad { diff.abs() } else { diff * diff };
    let iscale = nmax as f32 / (max - min);
    let mut scale = 1.0 / iscale;
    let mut best_error = 0f32;
    for i in 0..n {
        let l = nearest_int(iscale * (x[i] - min)).clamp(0, nmax) as u8;
        levels[i] = l;
        best_error += weights[i] * err(scale * f32::from(l) + min - x[i]);
    }
    let mut laux = [0u8; QK];
    for is in 0..=nstep {
        let iscale = (rmin + rdelta * is as f32 + nmax as f32) / (max - min);
        let (mut sum_l, mut sum_l2, mut sum_xl) = (0f32, 0f32, 0f32);
        for i in 0..n {
            let l = nearest_int(iscale * (x[i] - min)).clamp(0, nmax);
            laux[i] = l as u8;
            let (w, l) = (weights[i], l as f32);
            sum_l += w * l;
            sum_l2 += w * l * l;
            sum_xl += w * l * x[i];
        }
        let det = sum_w * sum_l2 - sum_l * sum_l;
        if det > 0.0 {
            let mut this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
            let mut this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
            if this_min > 0.0 {
                this_min = 0.0;
                this_scale = sum_xl / sum_l2;
            }
            let mut cur_error = 0f32;
            for i in 0..n {
                cur_error += weights[i] * err(this_scale * f32::from(laux[i]) + this_min - x[i]);
            }
            if cur_error < best_error {
                levels[..n].copy_from_slice(&laux[..n]);
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    (scale, -min)
}

/// ggml's `make_q3_quants` with `do_rmse`: levels in −nmax..nmax (stored + nmax) from
/// `iscale = −nmax/max`, then up to five passes moving single levels to
/// `nearest_int(x·Σ'wl²/Σ'wlx)` (sums without that element, `w = x²`) when that raises
/// `(Σwlx)²/Σwl²`. Returns `Σwlx/Σwl²` (0 when `Σwl²` is not positive, and for a group below
/// [`GROUP_MAX_EPS`], whose levels are then all 0).
fn make_q3_quants(nmax: i32, x: &[f32], levels: &mut [i8]) -> f32 {
    let (max, amax) = signed_amax(x);
    if amax < GROUP_MAX_EPS {
        levels[..x.len()].fill(0);
        return 0.0;
    }
    let iscale = -nmax as f32 / max;
    let (mut sumlx, mut suml2) = (0f32, 0f32);
    for (l_out, &v) in levels.iter_mut().zip(x) {
        let l = nearest_int(iscale * v).clamp(-nmax, nmax - 1);
        *l_out = l as i8;
        let w = v * v;
        sumlx += w * v * l as f32;
        suml2 += w * l as f32 * l as f32;
    }
    for _ in 0..5 {
        let mut n_changed = 0;
        for (l_i, &v) in levels.iter_mut().zip(x) {
            let w = v * v;
            let li = f32::from(*l_i);
            let mut slx = sumlx - w * v * li;
            if slx > 0.0 {
                let mut sl2 = suml2 - w * li * li;
                let new_l = nearest_int(v * sl2 / slx).clamp(-nmax, nmax - 1);
                if new_l != i32::from(*l_i) {
                    slx += w * v * new_l as f32;
                    sl2 += w * new_l as f32 * new_l as f32;
                    if sl2 > 0.0 && slx * slx * suml2 > sumlx * sumlx * sl2 {
                        *l_i = new_l as i8;
                        sumlx = slx;
                        suml2 = sl2;
                        n_changed += 1;
                    }
                }
            }
        }
        if n_changed == 0 {
            break;
        }
    }
    for l in levels[..x.len()].iter_mut() {
        *l += nmax as i8;
    }
    if suml2 > 0.0 {
        sumlx / suml2
    } else {
        0.0
    }
}

/// ggml's `make_qx_quants` with `rmse_type = 1` and no importance weights (`w = x²`): levels
/// in −nmax..nmax (stored + nmax) at `iscale = −nmax/max` with the least-squares scale
/// `Σwlx/Σwl²`, bettered by any `iscale = −(nmax + 0.1·is)/max`, is in ±1..=9 in order, that
/// raises `(Σwlx)²/Σwl²` strictly. 0 and all levels 0 for a group below [`GROUP_MAX_EPS`].
fn make_qx_quants(nmax: i32, x: &[f32], levels: &mut [u8]) -> f32 {
    let (max, amax) = signed_amax(x);
    if amax < GROUP_MAX_EPS {
        levels[..x.len()].fill(0);
        return 0.0;
    }
    let level = |iscale: f32, v: f32| nearest_int(iscale * v).clamp(-nmax, nmax - 1);
    let sums = |iscale: f32| {
        let (mut sumlx, mut suml2) = (0f32, 0f32);
        for &v in x {
            let (w, l) = (v * v, level(iscale, v) as f32);
            sumlx += w * v * l;
            suml2 += w * l * l;
        }
        (sumlx, suml2)
    };
    let set_levels = |iscale: f32, levels: &mut [u8]| {
        for (l, &v) in levels.iter_mut().zip(x) {
            *l = (nmax + level(iscale, v)) as u8;
        }
    };
    let iscale = -nmax as f32 / max;
    set_levels(iscale, levels);
    let (sumlx, suml2) = sums(iscale);
    let mut scale = if suml2 != 0.0 { sumlx / suml2 } else { 0.0 };
    let mut best = scale * sumlx;
    for is in (-9..=9).filter(|&is| is != 0) {
        let iscale = -(nmax as f32 + 0.1 * is as f32) / max;
        let (sumlx, suml2) = sums(iscale);
        if suml2 > 0.0 && sumlx * sumlx > best * suml2 {
            set_levels(iscale, levels);
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    scale
}

/// Packs 2-bit levels as Q2_K and Q3_K store them: in each half of 128, byte l holds elements
/// l, l+32, l+64, l+96 from the low bits up.
fn pack_2bit(levels: &[u8; QK_K], qs: &mut [u8; QK_K / 4]) {
    for (half, q) in levels.chunks_exact(128).zip(qs.chunks_exact_mut(32)) {
        for (l, b) in q.iter_mut().enumerate() {
            *b = half[l] | (half[l + 32] << 2) | (half[l + 64] << 4) | (half[l + 96] << 6);
        }
    }
}

// ---- Q2_K, Q3_K -----------------------------------------------------------------------------

/// Q2_K's sixteen scales (or mins) as 4-bit codes against their largest, `max`, with the f16
/// step `max/15` (`quantize_row_q2_K_ref`; all 0 when `max` is not positive). A code keeps the
/// low byte of `nearest_int`, as C's store into `uint8_t` does.
fn quantize_4bit(v: &[f32; QK_K / SUB16], max: f32) -> ([u8; QK_K / SUB16], [u8; 2]) {
    if max > 0.0 {
        let iscale = MAX_4BIT / max;
        let codes = v.map(|s| nearest_int(iscale * s) as u8);
        (codes, fp16(max / MAX_4BIT))
    } else {
        ([0; QK_K / SUB16], fp16(0.0))
    }
}

/// `quantize_row_q2_K_ref`: per sixteen values [`make_qkx2_quants`] (nmax 3, weights `|x|`,
/// rmin −0.5, rdelta 0.1, 15 steps, absolute error); the scales and mins as 4-bit multiples of
/// `d = max_scale/15`, `dmin = max_min/15` (`nearest_int(15/max·s)`); then every group with a
/// non-zero `d·sc` requantized as `clamp(nearest_int((x + dmin·m)/(d·sc)), 0, 3)`.
pub fn quantize_q2_k(x: &[f32], y: &mut [BlockQ2K]) {
    assert_eq!(x.len(), y.len() * QK_K, "quantize_q2_k: row length");
    const NMAX: i32 = 3;
    for (xs, yb) in x.chunks_exact(QK_K).zip(y.iter_mut()) {
        let mut levels = [0u8; QK_K];
        let (mut scales, mut mins) = ([0f32; QK_K / 16], [0f32; QK_K / 16]);
        let (mut max_scale, mut max_min) = (0f32, 0f32);
        for (j, xb) in xs.chunks_exact(16).enumerate() {
            let mut weights = [0f32; 16];
            for (w, &v) in weights.iter_mut().zip(xb) {
                *w = v.abs();
            }
            let lv = &mut levels[16 * j..16 * (j + 1)];
            (scales[j], mins[j]) = make_qkx2_quants(NMAX, xb, &weights, lv, -0.5, 0.1, 15, true);
            if scales[j] > max_scale {
                max_scale = scales[j];
            }
            if mins[j] > max_min {
                max_min = mins[j];
            }
        }
        let (sc, d) = quantize_4bit(&scales, max_scale);
        let (m, dmin) = quantize_4bit(&mins, max_min);
        yb.scales = std::array::from_fn(|j| sc[j] | (m[j] << 4));
        (yb.d, yb.dmin) = (d, dmin);
        let (dd, dmin) = (unfp16(yb.d), unfp16(yb.dmin));
        for (j, xb) in xs.chunks_exact(16).enumerate() {
            let d = dd * f32::from(yb.scales[j] & 0x0f);
            if d == 0.0 {
                continue;
            }
            let dm = dmin * f32::from(yb.scales[j] >> 4);
            for (l, &v) in levels[16 * j..].iter_mut().zip(xb) {
                *l = nearest_int((v + dm) / d).clamp(0, NMAX) as u8;
            }
        }
        pack_2bit(&levels, &mut yb.qs);
    }
}

/// The first pass of Q3_K and Q6_K: each sixteen values of the super-block `xs` quantized on
/// their own by `make(values, levels)`, which returns the group's scale.
#[inline]
fn sub16_quants<L: Copy + Default>(
    xs: &[f32],
    make: impl Fn(&[f32], &mut [L]) -> f32,
) -> ([L; QK_K], [f32; QK_K / SUB16]) {
    let mut levels = [L::default(); QK_K];
    let mut scales = [0f32; QK_K / SUB16];
    for ((s, xb), lv) in scales
        .iter_mut()
        .zip(xs.chunks_exact(SUB16))
        .zip(levels.chunks_exact_mut(SUB16))
    {
        *s = make(xb, lv);
    }
    (levels, scales)
}

/// `quantize_row_q3_K_ref`: per sixteen values [`make_q3_quants`] (nmax 4); the scales as 6-bit
/// `clamp(nearest_int(s·(−32/max_scale)), −32, 31) + 32` with `d = 1/(−32/max_scale)` (max_scale
/// of largest magnitude, signed); then every group with non-zero `d·(sc − 32)` requantized as
/// `clamp(nearest_int(x/(d·(sc − 32))), −4, 3)`. Levels ≥ 4 set their `hmask` bit.
pub fn quantize_q3_k(x: &[f32], y: &mut [BlockQ3K]) {
    assert_eq!(x.len(), y.len() * QK_K, "quantize_q3_k: row length");
    const NMAX: i32 = 4;
    for (xs, yb) in x.chunks_exact(QK_K).zip(y.iter_mut()) {
        let (mut levels, scales) = sub16_quants(xs, |xb, l| make_q3_quants(NMAX, xb, l));
        let (max_scale, _) = signed_amax(&scales);
        yb.scales = [0; K_SCALE_SIZE];
        if max_scale != 0.0 {
            let iscale = -32.0 / max_scale;
            for (j, &s) in scales.iter().enumerate() {
                let l = ((nearest_int(iscale * s) as i8).clamp(-32, 31) + 32) as u8;
                if j < 8 {
                    yb.scales[j] = l & 0x0f;
                } else {
                    yb.scales[j - 8] |= (l & 0x0f) << 4;
                }
                yb.scales[j % 4 + 8] |= (l >> 4) << (2 * (j / 4));
            }
            yb.d = fp16(1.0 / iscale);
        } else {
            yb.d = fp16(0.0);
        }
        let dd = unfp16(yb.d);
        for (j, xb) in xs.chunks_exact(16).enumerate() {
            let lo = if j < 8 {
                yb.scales[j] & 0x0f
            } else {
                yb.scales[j - 8] >> 4
            };
            let sc = (lo | (((yb.scales[8 + j % 4] >> (2 * (j / 4))) & 3) << 4)) as i8 - 32;
            let d = dd * f32::from(sc);
            if d == 0.0 {
                continue;
            }
            for (l, &v) in levels[16 * j..].iter_mut().zip(xb) {
                *l = (nearest_int(v / d).clamp(-NMAX, NMAX - 1) + NMAX) as i8;
            }
        }
        let mut l2 = [0u8; QK_K];
        yb.hmask = [0; QK_K / 8];
        for (j, (&l, out)) in levels.iter().zip(l2.iter_mut()).enumerate() {
            let mut l = l as u8;
            if l > 3 {
                yb.hmask[j % (QK_K / 8)] |= 1 << (j / (QK_K / 8));
                l -= 4;
            }
            *out = l;
        }
        pack_2bit(&l2, &mut yb.qs);
    }
}

// ---- Q4_K, Q5_K -----------------------------------------------------------------------------

/// The shared front half of Q4_K and Q5_K: per 32 values [`make_qkx2_quants`] with weights
/// `sqrt(Σx²/32) + |x|` (squared error); 6-bit scales and mins `min(63, (u8)nearest_int(s·63/max))`
/// packed as ggml's `get_scale_min_k4` reads them, `d = max_scale/63`, `dmin = max_min/63`;
/// then every block with non-zero `d·sc` requantized as `clamp(nearest_int((x + dmin·m)/(d·sc)),
/// 0, nmax)`. Returns (d, dmin, packed scales, levels).
fn scale_min_block(
    xs: &[f32],
    nmax: i32,
    rmin: f32,
    nstep: i32,
) -> ([u8; 2], [u8; 2], [u8; K_SCALE_SIZE], [u8; QK_K]) {
    let mut levels = [0u8; QK_K];
    let (mut scales, mut mins) = ([0f32; QK_K / QK], [0f32; QK_K / QK]);
    let (mut max_scale, mut max_min) = (0f32, 0f32);
    for (j, xb) in xs.chunks_exact(QK).enumerate() {
        let mut sum_x2 = 0f32;
        for &v in xb {
            sum_x2 += v * v;
        }
        let av_x = (sum_x2 / QK as f32).sqrt();
        let mut weights = [0f32; QK];
        for (w, &v) in weights.iter_mut().zip(xb) {
            *w = av_x + v.abs();
        }
        let lv = &mut levels[QK * j..QK * (j + 1)];
        (scales[j], mins[j]) = make_qkx2_quants(nmax, xb, &weights, lv, rmin, 0.1, nstep, false);
        if scales[j] > max_scale {
            max_scale = scales[j];
        }
        if mins[j] > max_min {
            max_min = mins[j];
        }
    }
    let max6 = MAX_6BIT as f32;
    let inv_scale = if max_scale > 0.0 {
        max6 / max_scale
    } else {
        0.0
    };
    let inv_min = if max_min > 0.0 { max6 / max_min } else { 0.0 };
    let mut packed = [0u8; K_SCALE_SIZE];
    for j in 0..QK_K / QK {
        let ls = (nearest_int(inv_scale * scales[j]) as u8).min(MAX_6BIT as u8);
        let lm = (nearest_int(inv_min * mins[j]) as u8).min(MAX_6BIT as u8);
        if j < 4 {
            packed[j] = ls;
            packed[j + 4] = lm;
        } else {
            packed[j + 4] = (ls & 0x0f) | ((lm & 0x0f) << 4);
            packed[j - 4] |= (ls >> 4) << 6;
            packed[j] |= (lm >> 4) << 6;
        }
    }
    let (d, dmin) = (fp16(max_scale / max6), fp16(max_min / max6));
    let (dd, ddmin) = (unfp16(d), unfp16(dmin));
    for (j, xb) in xs.chunks_exact(QK).enumerate() {
        let (sc, m) = scale_min_k4(j, &packed);
        let d = dd * f32::from(sc);
        if d == 0.0 {
            continue;
        }
        let dm = ddmin * f32::from(m);
        for (l, &v) in levels[QK * j..].iter_mut().zip(xb) {
            *l = nearest_int((v + dm) / d).clamp(0, nmax) as u8;
        }
    }
    (d, dmin, packed, levels)
}

/// `quantize_row_q4_K_ref`: [`scale_min_block`] with nmax 15, rmin −1, rdelta 0.1, 20 steps;
/// in each 64 values byte l holds element l (low nibble) and l+32 (high).
pub fn quantize_q4_k(x: &[f32], y: &mut [BlockQ4K]) {
    assert_eq!(x.len(), y.len() * QK_K, "quantize_q4_k: row length");
    for (xs, yb) in x.chunks_exact(QK_K).zip(y.iter_mut()) {
        let levels;
        (yb.d, yb.dmin, yb.scales, levels) = scale_min_block(xs, 15, -1.0, 20);
        for (l64, q) in levels.chunks_exact(64).zip(yb.qs.chunks_exact_mut(32)) {
            for (l, b) in q.iter_mut().enumerate() {
                *b = l64[l] | (l64[l + 32] << 4);
            }
        }
    }
}

/// `quantize_row_q5_K_ref`: [`scale_min_block`] with nmax 31, rmin −0.5, rdelta 0.1, 15
/// steps; nibbles as Q4_K, the fifth bit of element `64c + l` (`+ 32`) in bit `2c` (`2c + 1`)
/// of `qh[l]`.
pub fn quantize_q5_k(x: &[f32], y: &mut [BlockQ5K]) {
    assert_eq!(x.len(), y.len() * QK_K, "quantize_q5_k: row length");
    for (xs, yb) in x.chunks_exact(QK_K).zip(y.iter_mut()) {
        let levels;
        (yb.d, yb.dmin, yb.scales, levels) = scale_min_block(xs, 31, -0.5, 15);
        yb.qh = [0; QK_K / 8];
        for (c, (l64, q)) in levels
            .chunks_exact(64)
            .zip(yb.qs.chunks_exact_mut(32))
            .enumerate()
        {
            for (l, b) in q.iter_mut().enumerate() {
                let (l1, l2) = (l64[l], l64[l + 32]);
                yb.qh[l] |= ((l1 >> 4) << (2 * c)) | ((l2 >> 4) << (2 * c + 1));
                *b = (l1 & 0x0f) | ((l2 & 0x0f) << 4);
            }
        }
    }
}

// ---- Q6_K -----------------------------------------------------------------------------------

/// `quantize_row_q6_K_ref`: per sixteen values [`make_qx_quants`] (nmax 32); a block whose
/// largest |scale| is below [`GROUP_MAX_EPS`] is all zero bytes. Else `iscale = −128/max_scale`
/// (signed), `d = 1/iscale`, scales `min(127, nearest_int(iscale·s))` as i8; every group with
/// non-zero `d·sc` requantized as `clamp(nearest_int(x/(d·sc)), −32, 31) + 32`.
pub fn quantize_q6_k(x: &[f32], y: &mut [BlockQ6K]) {
    assert_eq!(x.len(), y.len() * QK_K, "quantize_q6_k: row length");
    const NMAX: i32 = 32;
    for (xs, yb) in x.chunks_exact(QK_K).zip(y.iter_mut()) {
        let (mut levels, scales) = sub16_quants(xs, |xb, l| make_qx_quants(NMAX, xb, l));
        let (max_scale, max_abs_scale) = signed_amax(&scales);
        if max_abs_scale < GROUP_MAX_EPS {
            *yb = BlockQ6K::default();
            continue;
        }
        let iscale = -128.0 / max_scale;
        yb.d = fp16(1.0 / iscale);
        for (b, &s) in yb.scales.iter_mut().zip(&scales) {
            *b = nearest_int(iscale * s).min(127) as i8;
        }
        let dd = unfp16(yb.d);
        for (j, xb) in xs.chunks_exact(16).enumerate() {
            let d = dd * f32::from(yb.scales[j]);
            if d == 0.0 {
                continue;
            }
            for (l, &v) in levels[16 * j..].iter_mut().zip(xb) {
                *l = (nearest_int(v / d).clamp(-NMAX, NMAX - 1) + NMAX) as u8;
            }
        }
        for ((l128, ql), qh) in levels
            .chunks_exact(128)
            .zip(yb.ql.chunks_exact_mut(64))
            .zip(yb.qh.chunks_exact_mut(32))
        {
            for l in 0..32 {
                let q = [l128[l], l128[l + 32], l128[l + 64], l128[l + 96]];
                ql[l] = (q[0] & 0x0f) | ((q[2] & 0x0f) << 4);
                ql[l + 32] = (q[1] & 0x0f) | ((q[3] & 0x0f) << 4);
                qh[l] = (q[0] >> 4) | ((q[1] >> 4) << 2) | ((q[2] >> 4) << 4) | ((q[3] >> 4) << 6);
            }
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::kernels::blocks::{
        block_bytes, Block, BlockIq3S, BlockIq3Xxs, Iq3Grid, IQ3_GRID_GROUP, IQ3_SCALE_SHIFT,
        IQ_GROUP, IQ_SIGN_BITS, IQ_SIGN_MASK,
    };
    use crate::kernels::iq_grids::IQ3XXS_GRID;
    use crate::test_support::qc;

    /// Elements per row of the known-answer rows.
    const ROW: usize = 512;

    /// SplitMix64 ([`Rng::bell`] and [`Rng::unit`]) is the generator of the llama.cpp harness
    /// that produced the known answers below.
    use crate::kernels::test_util::SplitMix as Rng;

    pub(in crate::kernels) fn kat_row(r: usize, g: &mut Rng) -> Vec<f32> {
        (0..ROW)
            .map(|i| match r {
                0 => g.bell(),
                1 => 0.02 * g.bell(),
                2 => g.bell() * if i % 97 == 5 { 50.0 } else { 1.0 },
                3 => 0.0,
                4 => 1e-30 * g.bell(),
                5 => g.unit(),
                6 => ((g.next() % 17) as i32 - 8) as f32 * 0.25,
                _ if (i / 16) % 3 == 0 => 0.0,
                _ => g.bell() * (1 + i / 64) as f32,
            })
            .collect()
    }

    pub(in crate::kernels) fn fnv1a(bytes: &[u8]) -> u64 {
        bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        })
    }

    pub(in crate::kernels) fn quantized<B: Block>(
        f: fn(&[f32], &mut [B]),
        bs: usize,
        x: &[f32],
    ) -> Vec<B> {
        let mut y = vec![B::default(); x.len() / bs];
        f(x, &mut y);
        y
    }

    fn kat_hash<B: Block>(f: fn(&[f32], &mut [B]), bs: usize) -> u64 {
        let mut g = Rng(42);
        let mut bytes = Vec::new();
        for r in 0..8 {
            bytes.extend_from_slice(block_bytes(&quantized(f, bs, &kat_row(r, &mut g))));
        }
        fnv1a(&bytes)
    }

    /// FNV-1a 64 of the output of llama.cpp's `ggml_quantize_chunk(type, rows, …, 0, 8, 512,
    /// NULL)` (libggml-base.a of the vendored llama.cpp 0c1e57098, x86-64) on the eight
    /// `kat_row`s, from a C harness that draws them from the same generator. For IQ3_XXS the
    /// same harness also compared 140 800 blocks (17 600 rows of 2 048, 22 kinds) byte for byte;
    /// for IQ3_S 288 000 blocks (36 000 rows of 2 048, 30 kinds: those 22 and whole zero
    /// sub-blocks, one live sub-block a super-block, values whose squares underflow, 1e11,
    /// outliers of 1e4, ties, scales from 2⁻³⁰ to 2³⁰ a sub-block).
    #[test]
    fn seeded_rows_hash_as_llama_cpp_quantizes_them() {
        assert_eq!(kat_hash(quantize_q5_0, QK), 0x62b1_2485_ba00_5834, "q5_0");
        assert_eq!(kat_hash(quantize_q5_1, QK), 0x93a1_a3eb_f1ec_478d, "q5_1");
        assert_eq!(
            kat_hash(quantize_iq4_nl, QK),
            0x04a0_3a80_0a83_4486,
            "iq4_nl"
        );
        assert_eq!(kat_hash(quantize_q2_k, QK_K), 0xaade_6941_215a_22a7, "q2_K");
        assert_eq!(kat_hash(quantize_q3_k, QK_K), 0x501c_1488_6136_b317, "q3_K");
        assert_eq!(kat_hash(quantize_q4_k, QK_K), 0xe6d5_defc_3108_d9cc, "q4_K");
        assert_eq!(kat_hash(quantize_q5_k, QK_K), 0x2bcf_84cc_a86e_185d, "q5_K");
        assert_eq!(kat_hash(quantize_q6_k, QK_K), 0x8ca4_bbd6_a0da_ded1, "q6_K");
        assert_eq!(
            kat_hash(quantize_iq4_xs, QK_K),
            0xc17d_2a6d_4a93_a148,
            "iq4_xs"
        );
        assert_eq!(
            kat_hash(quantize_iq3_xxs, QK_K),
            0xbe65_eec9_6137_7709,
            "iq3_xxs"
        );
        assert_eq!(
            kat_hash(quantize_iq3_s, QK_K),
            0xb937_64c4_9aed_b5c9,
            "iq3_s"
        );
    }

    /// All-zero blocks as llama.cpp writes them (read from its output for `kat_row(3)`): Q5_0
    /// stores d = −0 (0/−16) and level 16; the IQ4 types index 8 (value 1), IQ4_XS with d = −0
    /// and every 6-bit scale 32; the K-quants, IQ3_XXS, IQ3_S and Q5_1 are all zero bytes.
    #[test]
    fn zero_blocks_match_llama_cpp() {
        let z = [0f32; QK_K];
        let b = quantized(quantize_q5_0, QK, &z[..QK])[0];
        assert_eq!((b.d, b.qh, b.qs), ([0, 0x80], [0xff; 4], [0; 16]));
        assert_eq!(
            quantized(quantize_q5_1, QK, &z[..QK])[0],
            BlockQ5_1::default()
        );
        let b = quantized(quantize_iq4_nl, QK, &z[..QK])[0];
        assert_eq!((b.d, b.qs), ([0, 0], [0x88; 16]));
        let b = quantized(quantize_iq4_xs, QK_K, &z)[0];
        assert_eq!(
            (b.d, b.scales_h, b.scales_l),
            ([0, 0x80], [0xaa; 2], [0; 4])
        );
        assert_eq!(b.qs, [0x88; QK_K / 2]);
        assert_eq!(quantized(quantize_q2_k, QK_K, &z)[0], BlockQ2K::default());
        assert_eq!(quantized(quantize_q3_k, QK_K, &z)[0], BlockQ3K::default());
        assert_eq!(quantized(quantize_q4_k, QK_K, &z)[0], BlockQ4K::default());
        assert_eq!(quantized(quantize_q5_k, QK_K, &z)[0], BlockQ5K::default());
        assert_eq!(quantized(quantize_q6_k, QK_K, &z)[0], BlockQ6K::default());
        assert_eq!(
            quantized(quantize_iq3_xxs, QK_K, &z)[0],
            BlockIq3Xxs::default()
        );
        assert_eq!(quantized(quantize_iq3_s, QK_K, &z)[0], BlockIq3S::default());
    }

    #[test]
    fn rounding_helpers_follow_ggml_and_x86() {
        let cases = [
            (2.5, 2),
            (3.5, 4),
            (-2.5, -2),
            (0.499_999_97, 0),
            (-7.6, -8),
        ];
        for (v, want) in cases {
            assert_eq!(nearest_int(v), want, "nearest_int({v})");
        }
        assert_eq!(trunc_i32(-2.7), -2);
        assert_eq!(trunc_i32(f32::NAN), i32::MIN);
        assert_eq!(trunc_i32(3e9), i32::MIN);
        assert_eq!(trunc_i32(f32::NEG_INFINITY), i32::MIN);
        assert_eq!(fp16(f32::NAN), [0x00, 0x7e]);
        assert_eq!(fp16(-f32::NAN), [0x00, 0xfe]);
        assert_eq!(fp16(65520.0), [0x00, 0x7c]);
        assert_eq!(best_index_iq4(-4.6), 7); // nearer −10 than 1
        assert_eq!(best_index_iq4(-4.5), 8); // halfway between −10 and 1: the upper
        assert_eq!(best_index_iq4(-128.0), 0);
        assert_eq!(best_index_iq4(200.0), 15);
    }

    // ---- dequantizers (element-wise from the block layouts) ---------------------------------

    fn nib(qs: &[u8], e: usize) -> u8 {
        if e < QK / 2 {
            qs[e] & 0x0f
        } else {
            qs[e - QK / 2] >> 4
        }
    }

    /// The 2-bit field of element `e` in Q2_K/Q3_K `qs`.
    fn two_bits(qs: &[u8], e: usize) -> u8 {
        (qs[e / 128 * 32 + e % 32] >> (2 * ((e % 128) / 32))) & 3
    }

    fn kval(q: u8) -> f32 {
        f32::from(KVALUES_IQ4NL[usize::from(q)])
    }

    fn deq_q5_0(b: &BlockQ5_0, e: usize) -> f32 {
        let hi = (u32::from_le_bytes(b.qh) >> e) & 1;
        unfp16(b.d) * (f32::from(nib(&b.qs, e)) + 16.0 * hi as f32 - 16.0)
    }

    fn deq_q5_1(b: &BlockQ5_1, e: usize) -> f32 {
        let hi = (u32::from_le_bytes(b.qh) >> e) & 1;
        unfp16(b.d) * (f32::from(nib(&b.qs, e)) + 16.0 * hi as f32) + unfp16(b.m)
    }

    fn deq_iq4_nl(b: &BlockIq4Nl, e: usize) -> f32 {
        unfp16(b.d) * kval(nib(&b.qs, e))
    }

    fn deq_q2_k(b: &BlockQ2K, e: usize) -> f32 {
        let sc = b.scales[e / 16];
        let q = f32::from(two_bits(&b.qs, e));
        unfp16(b.d) * f32::from(sc & 0x0f) * q - unfp16(b.dmin) * f32::from(sc >> 4)
    }

    fn deq_q3_k(b: &BlockQ3K, e: usize) -> f32 {
        let s = e / 16;
        let lo = if s < 8 {
            b.scales[s] & 0x0f
        } else {
            b.scales[s - 8] >> 4
        };
        let sc = i32::from(lo | (((b.scales[8 + s % 4] >> (2 * (s / 4))) & 3) << 4)) - 32;
        let high = (b.hmask[e % 32] >> (e / 32)) & 1 == 1;
        let q = i32::from(two_bits(&b.qs, e)) - if high { 0 } else { 4 };
        unfp16(b.d) * sc as f32 * q as f32
    }

    /// Element `e` of a Q4_K (`qh` None) or Q5_K block.
    fn deq_k4(
        d: [u8; 2],
        dmin: [u8; 2],
        sc: &[u8; 12],
        qh: Option<&[u8]>,
        qs: &[u8],
        e: usize,
    ) -> f32 {
        let (s, m) = scale_min_k4(e / 32, sc);
        let byte = qs[e / 64 * 32 + e % 32];
        let lo = if e % 64 < 32 { byte & 0x0f } else { byte >> 4 };
        let hi = qh.map_or(0, |h| ((h[e % 32] >> (e / 32)) & 1) << 4);
        unfp16(d) * f32::from(s) * f32::from(lo | hi) - unfp16(dmin) * f32::from(m)
    }

    fn deq_q4_k(b: &BlockQ4K, e: usize) -> f32 {
        deq_k4(b.d, b.dmin, &b.scales, None, &b.qs, e)
    }

    fn deq_q5_k(b: &BlockQ5K, e: usize) -> f32 {
        deq_k4(b.d, b.dmin, &b.scales, Some(&b.qh), &b.qs, e)
    }

    fn deq_q6_k(b: &BlockQ6K, e: usize) -> f32 {
        let (half, quarter, l) = (e / 128, (e % 128) / 32, e % 32);
        let lo = (b.ql[half * 64 + l + (quarter & 1) * 32] >> (4 * (quarter / 2))) & 0x0f;
        let hi = (b.qh[half * 32 + l] >> (2 * quarter)) & 3;
        let q = i32::from(lo | (hi << 4)) - 32;
        unfp16(b.d) * f32::from(b.scales[e / 16]) * q as f32
    }

    /// ggml's `dequantize_row_iq3_xxs` for element `e`: `d·(0.5 + ls)·0.5 · grid · ±1`.
    fn deq_iq3_xxs(b: &BlockIq3Xxs, e: usize) -> f32 {
        let s = e / QK;
        let sas = u32::from_le_bytes(b.sas[4 * s..4 * s + 4].try_into().expect("four bytes"));
        let db = unfp16(b.d) * (0.5 + (sas >> IQ3_SCALE_SHIFT) as f32) * 0.5;
        let grid =
            IQ3XXS_GRID[usize::from(b.qs[e / IQ3_GRID_GROUP])].to_le_bytes()[e % IQ3_GRID_GROUP];
        let g = (e % QK) / IQ_GROUP;
        let signs = crate::kernels::iq_signs::KSIGNS
            [((sas >> (IQ_SIGN_BITS * g as u32)) & IQ_SIGN_MASK) as usize];
        let sign = if signs >> (e % IQ_GROUP) & 1 == 1 {
            -1.0
        } else {
            1.0
        };
        db * f32::from(grid) * sign
    }

    /// ggml's `dequantize_row_iq3_s` for element `e`: `d·(1 + 2·ls) · grid · ±1`.
    fn deq_iq3_s(b: &BlockIq3S, e: usize) -> f32 {
        let db = unfp16(b.d) * f32::from(1 + 2 * b.ls(e / QK));
        let (grid, neg) = b.value(e);
        db * f32::from(grid) * if neg { -1.0 } else { 1.0 }
    }

    fn deq_iq4_xs(b: &BlockIq4Xs, e: usize) -> f32 {
        let s = e / 32;
        let lo = (b.scales_l[s / 2] >> (4 * (s % 2))) & 0x0f;
        let hi = ((u16::from_le_bytes(b.scales_h) >> (2 * s)) & 3) as u8;
        let ls = i32::from(lo | (hi << 4)) - 32;
        unfp16(b.d) * ls as f32 * kval(nib(&b.qs[s * 16..], e % 32))
    }

    /// Round trip of `x` through quantizer `f` and element dequantizer `deq`.
    fn round_trip<B: Block>(
        f: fn(&[f32], &mut [B]),
        deq: fn(&B, usize) -> f32,
        bs: usize,
        x: &[f32],
    ) -> Vec<f32> {
        let y = quantized(f, bs, x);
        (0..x.len()).map(|i| deq(&y[i / bs], i % bs)).collect()
    }

    /// Every type's round trip of `x`, with the largest RMS error relative to `x`'s RMS each
    /// may show on bell-shaped data (about 1.4 times what 16 384 such values showed).
    fn all_round_trips(x: &[f32]) -> Vec<(&'static str, f32, Vec<f32>)> {
        vec![
            ("q5_0", 0.06, round_trip(quantize_q5_0, deq_q5_0, QK, x)),
            ("q5_1", 0.055, round_trip(quantize_q5_1, deq_q5_1, QK, x)),
            (
                "iq4_nl",
                0.1,
                round_trip(quantize_iq4_nl, deq_iq4_nl, QK, x),
            ),
            ("q2_k", 0.4, round_trip(quantize_q2_k, deq_q2_k, QK_K, x)),
            ("q3_k", 0.2, round_trip(quantize_q3_k, deq_q3_k, QK_K, x)),
            ("q4_k", 0.1, round_trip(quantize_q4_k, deq_q4_k, QK_K, x)),
            ("q5_k", 0.05, round_trip(quantize_q5_k, deq_q5_k, QK_K, x)),
            ("q6_k", 0.025, round_trip(quantize_q6_k, deq_q6_k, QK_K, x)),
            (
                "iq4_xs",
                0.1,
                round_trip(quantize_iq4_xs, deq_iq4_xs, QK_K, x),
            ),
            (
                "iq3_xxs",
                0.3,
                round_trip(quantize_iq3_xxs, deq_iq3_xxs, QK_K, x),
            ),
            (
                "iq3_s",
                0.27,
                round_trip(quantize_iq3_s, deq_iq3_s, QK_K, x),
            ),
        ]
    }

    pub(in crate::kernels) fn rel_rms_error(x: &[f32], y: &[f32]) -> f32 {
        let (mut e2, mut x2) = (0f64, 0f64);
        for (&a, &b) in x.iter().zip(y) {
            e2 += f64::from(a - b).powi(2);
            x2 += f64::from(a).powi(2);
        }
        (e2 / x2).sqrt() as f32
    }

    #[test]
    fn zero_rows_dequantize_to_zero() {
        for (name, _, y) in all_round_trips(&[0f32; 2 * QK_K]) {
            assert!(y.iter().all(|&v| v == 0.0), "{name}");
        }
    }

    /// Bell-shaped rows at power-of-two scales (the error is scale-free while f16 holds the
    /// scales) come back within each type's error bound; Q5_0 and Q5_1 also per element: at
    /// most one step (`amax/16`) and half a step (`(max − min)/62`) plus f16 rounding.
    #[test]
    fn round_trip_error_is_bounded() {
        fn prop(seed: u64, exp: i8) -> bool {
            let mut g = Rng(seed);
            // 2^−2..=2^13: every type's f16 scales stay normal (Q6_K's d is about amax/4096).
            let scale = 2f32.powi(i32::from(exp).rem_euclid(16) - 2);
            let x: Vec<f32> = (0..QK_K).map(|_| scale * g.bell()).collect();
            for (name, bound, y) in all_round_trips(&x) {
                let err = rel_rms_error(&x, &y);
                if err > bound {
                    eprintln!("{name}: relative RMS error {err} > {bound}");
                    return false;
                }
            }
            let (q5_0, q5_1) = (
                round_trip(quantize_q5_0, deq_q5_0, QK, &x),
                round_trip(quantize_q5_1, deq_q5_1, QK, &x),
            );
            x.chunks_exact(QK).enumerate().all(|(b, xb)| {
                let (_, amax) = signed_amax(xb);
                let lo = xb.iter().fold(f32::MAX, |m, &v| m.min(v));
                let hi = xb.iter().fold(-f32::MAX, |m, &v| m.max(v));
                let f16_slack = 2e-3 * amax;
                xb.iter().enumerate().all(|(j, &v)| {
                    (v - q5_0[b * QK + j]).abs() <= amax / 16.0 + f16_slack
                        && (v - q5_1[b * QK + j]).abs() <= (hi - lo) / 62.0 + f16_slack
                })
            })
        }
        qc::check("quantize_ref round trip", prop as fn(u64, i8) -> bool);
    }
}
