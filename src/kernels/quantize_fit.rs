//! ggml's fitting routines behind the K-quants and, with an importance matrix, the legacy
//! 4- and 5-bit types: given a group of values (and weights), the integer levels and the scale
//! (and min) that fit them best by ggml's own search, expression by expression as
//! `ggml-quants.c` computes it (see [`super::quantize_ref`] for the float rules).

use super::blocks::QK;
use super::dequantize::nearest_int;
use super::quantize_ref::{signed_amax, GROUP_MAX_EPS};

/// `make_qp_quants` scale tries each side of `nmax/max`.
const QP_NTRY: i32 = 4;
/// Passes of single-level moves in `make_q3_quants` and `make_qp_quants`.
const LEVEL_PASSES: usize = 5;

/// ggml's `make_qkx2_quants`: levels `l` in 0..=nmax and `(scale, m)` for `x ≈ scale·l − m`
/// minimising `Σ w·err` (err = |diff| when `use_mad`, else diff²). Start: `min = min(x, 0)`,
/// `iscale = nmax/(max − min)`; then for each step `is` in 0..=nstep the levels at
/// `iscale = (rmin + rdelta·is + nmax)/(max − min)` get a weighted least-squares scale and min
/// (`min` clamped to ≤ 0, the scale then refitted), kept when their error is strictly smaller.
/// Returns `(scale, −min)`; `(0, −min)` with all levels 0 when `max == min`.
#[allow(clippy::too_many_arguments)]
pub(super) fn make_qkx2_quants(
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
pub(super) fn make_q3_quants(nmax: i32, x: &[f32], levels: &mut [i8]) -> f32 {
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
    for _ in 0..LEVEL_PASSES {
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

/// ggml's `make_qx_quants` with `rmse_type = 1`: levels in −nmax..nmax (stored + nmax) at
/// `iscale = −nmax/max` with the least-squares scale `Σwlx/Σwl²`, bettered by any
/// `iscale = −(nmax + 0.1·is)/max`, is in ±1..=9 in order, that raises `(Σwlx)²/Σwl²` strictly.
/// The weights are the importance weights `qw` when given, else `w = x²`. 0 and all levels 0
/// for a group below [`GROUP_MAX_EPS`].
pub(super) fn make_qx_quants(nmax: i32, x: &[f32], levels: &mut [u8], qw: Option<&[f32]>) -> f32 {
    let (max, amax) = signed_amax(x);
    if amax < GROUP_MAX_EPS {
        levels[..x.len()].fill(0);
        return 0.0;
    }
    let weight = |i: usize| qw.map_or(x[i] * x[i], |w| w[i]);
    let level = |iscale: f32, v: f32| nearest_int(iscale * v).clamp(-nmax, nmax - 1);
    let sums = |iscale: f32| {
        let (mut sumlx, mut suml2) = (0f32, 0f32);
        for (i, &v) in x.iter().enumerate() {
            let (w, l) = (weight(i), level(iscale, v) as f32);
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

/// ggml's `make_qp_quants`: levels in 0..=nmax for non-negative values (super-block scales or
/// mins) with weights `qw`. The scale `1/iscale` of the smallest `Σw(x − scale·l)²` over
/// `iscale = (nmax + 0.1·is)/max`, is in 0, ±1..=±4 (strictly smaller replaces), then up to five
/// passes moving single levels to `nearest_int(x·Σ'wl²/Σ'wlx)` (sums without that element)
/// when that raises `(Σwlx)²/Σwl²`. Returns `Σwlx/Σwl²` (0 when `Σwl²` is not positive; 0 and
/// all levels 0 when `max` is below [`GROUP_MAX_EPS`]). Levels are C `uint8_t` stores of
/// ints only capped above (a negative value's level wraps), reproduced.
pub(super) fn make_qp_quants(nmax: i32, x: &[f32], levels: &mut [u8], qw: &[f32]) -> f32 {
    let max = x.iter().fold(0f32, |m, &v| if m > v { m } else { v });
    if max < GROUP_MAX_EPS {
        levels[..x.len()].fill(0);
        return 0.0;
    }
    let mut iscale = nmax as f32 / max;
    for (l, &v) in levels.iter_mut().zip(x) {
        *l = nearest_int(iscale * v) as u8;
    }
    let scale = 1.0 / iscale;
    let mut best_mse = 0f32;
    for ((&l, &v), &w) in levels.iter().zip(x).zip(qw) {
        let diff = v - scale * f32::from(l);
        best_mse += w * diff * diff;
    }
    for is in (-QP_NTRY..=QP_NTRY).filter(|&is| is != 0) {
        let iscale_is = (0.1 * is as f32 + nmax as f32) / max;
        let scale_is = 1.0 / iscale_is;
        let mut mse = 0f32;
        for (&v, &w) in x.iter().zip(qw) {
            let l = nearest_int(iscale_is * v).min(nmax);
            let diff = v - scale_is * l as f32;
            mse += w * diff * diff;
        }
        if mse < best_mse {
            best_mse = mse;
            iscale = iscale_is;
        }
    }
    let (mut sumlx, mut suml2) = (0f32, 0f32);
    for ((l_out, &v), &w) in levels.iter_mut().zip(x).zip(qw) {
        let l = nearest_int(iscale * v).min(nmax);
        *l_out = l as u8;
        sumlx += w * v * l as f32;
        suml2 += w * l as f32 * l as f32;
    }
    for _ in 0..LEVEL_PASSES {
        let mut n_changed = 0;
        for ((l_i, &v), &w) in levels.iter_mut().zip(x).zip(qw) {
            let li = f32::from(*l_i);
            let mut slx = sumlx - w * v * li;
            let mut sl2 = suml2 - w * li * li;
            if slx > 0.0 && sl2 > 0.0 {
                let new_l = nearest_int(v * sl2 / slx).min(nmax);
                if new_l != i32::from(*l_i) {
                    slx += w * v * new_l as f32;
                    sl2 += w * new_l as f32 * new_l as f32;
                    if slx * slx * suml2 > sumlx * sumlx * sl2 {
                        *l_i = new_l as u8;
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
    if suml2 > 0.0 {
        sumlx / suml2
    } else {
        0.0
    }
}
