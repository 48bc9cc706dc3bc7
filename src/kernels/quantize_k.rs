//! The K-quant weight quantizers (Q2_K..Q6_K) as `llama-quantize` runs them, byte for byte:
//! ggml's `quantize_<type>` for one row, which without an importance matrix is the type's
//! `quantize_row_*_ref` and with one its `quantize_row_*_impl` (importance weights
//! `qw·sqrt(σ² + x²)`, the super-block scales and mins fitted by `make_qp_quants` or
//! `make_qx_quants` instead of taken against their largest). Both share the first fit of each
//! group, the requantization at the stored scales and the packing. Float rules: see
//! [`super::quantize_ref`].

use super::blocks::{
    BlockQ2K, BlockQ3K, BlockQ4K, BlockQ5K, BlockQ6K, K_SCALE_SIZE, QK, QK_K, SUB16,
};
use super::dequantize::{get_scale_min_k4 as scale_min_k4, nearest_int};
use super::quantize_fit::{make_q3_quants, make_qkx2_quants, make_qp_quants, make_qx_quants};
use super::quantize_ref::{
    blocks_with_weights, fp16, imatrix_weights, signed_amax, sum_squares, unfp16, GROUP_MAX_EPS,
};

/// Largest 6-bit scale/min of Q4_K and Q5_K.
const MAX_6BIT: i32 = 63;
/// Largest 4-bit scale/min of Q2_K.
const MAX_4BIT: f32 = 15.0;
/// `(rmin, rdelta, nstep)` of the `make_qkx3_quants` search the weighted Q2_K, Q4_K and Q5_K
/// run (the same arithmetic as `make_qkx2_quants` when given weights).
const QKX3_SEARCH: (f32, f32, i32) = (-0.9, 0.05, 36);
/// Groups of sixteen per super-block.
const SUBS16: usize = QK_K / SUB16;
/// Groups of 32 per super-block.
const SUBS32: usize = QK_K / QK;

/// `2·Σx²/QK_K` over a super-block: the σ² of the K-quants' importance weights (Q2_K uses half).
fn sigma2_k(xs: &[f32]) -> f32 {
    2.0 * sum_squares(xs) / QK_K as f32
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

/// Each sixteen values of the super-block `xs` quantized on their own by
/// `make(group, values, levels)`, which returns the group's scale.
#[inline]
fn sub16_quants<L: Copy + Default>(
    xs: &[f32],
    mut make: impl FnMut(usize, &[f32], &mut [L]) -> f32,
) -> ([L; QK_K], [f32; SUBS16]) {
    let mut levels = [L::default(); QK_K];
    let mut scales = [0f32; SUBS16];
    for (j, ((s, xb), lv)) in scales
        .iter_mut()
        .zip(xs.chunks_exact(SUB16))
        .zip(levels.chunks_exact_mut(SUB16))
        .enumerate()
    {
        *s = make(j, xb, lv);
    }
    (levels, scales)
}

// ---- Q2_K -----------------------------------------------------------------------------------

/// Q2_K's sixteen scales (or mins) as 4-bit codes against their largest, `max`, with the f16
/// step `max/15` (`quantize_row_q2_K_ref`; all 0 when `max` is not positive). A code keeps the
/// low byte of `nearest_int`, as C's store into `uint8_t` does.
fn quantize_4bit(v: &[f32; SUBS16], max: f32) -> ([u8; SUBS16], [u8; 2]) {
    if max > 0.0 {
        let iscale = MAX_4BIT / max;
        let codes = v.map(|s| nearest_int(iscale * s) as u8);
        (codes, fp16(max / MAX_4BIT))
    } else {
        ([0; SUBS16], fp16(0.0))
    }
}

/// The end of both Q2_K paths, `d`, `dmin` and `scales` stored: every group with a non-zero
/// `d·sc` requantized as `clamp(nearest_int((x + dmin·m)/(d·sc)), 0, 3)`, then packed.
fn q2_k_finish(xs: &[f32], levels: &mut [u8; QK_K], yb: &mut BlockQ2K) {
    const NMAX: i32 = 3;
    let (dd, dmin) = (unfp16(yb.d), unfp16(yb.dmin));
    for (j, xb) in xs.chunks_exact(SUB16).enumerate() {
        let d = dd * f32::from(yb.scales[j] & 0x0f);
        if d == 0.0 {
            continue;
        }
        let dm = dmin * f32::from(yb.scales[j] >> 4);
        for (l, &v) in levels[SUB16 * j..].iter_mut().zip(xb) {
            *l = nearest_int((v + dm) / d).clamp(0, NMAX) as u8;
        }
    }
    pack_2bit(levels, &mut yb.qs);
}

/// ggml's `quantize_q2_K` for one row. Without importance weights `qw`
/// (`quantize_row_q2_K_ref`): per sixteen values [`make_qkx2_quants`] (nmax 3, weights `|x|`,
/// rmin −0.5, rdelta 0.1, 15 steps, absolute error); the scales and mins as 4-bit multiples of
/// `d = max_scale/15`, `dmin = max_min/15` (`nearest_int(15/max·s)`). With them
/// (`quantize_row_q2_K_impl`): per sixteen values `make_qkx3_quants` (nmax 3, weights
/// `qw·sqrt(Σx²/256 + x²)`, rmin −0.9, rdelta 0.05, 36 steps, squared error), the scales and
/// mins by [`make_qp_quants`] (nmax 15, weighted by each group's weight sum) into `d`, `dmin`
/// and the 4-bit codes. Then [`q2_k_finish`].
pub fn quantize_q2_k(x: &[f32], qw: Option<&[f32]>, y: &mut [BlockQ2K]) {
    const NMAX: i32 = 3;
    for (xs, qws, yb) in blocks_with_weights(x, qw, y, QK_K) {
        let mut levels = [0u8; QK_K];
        let (mut scales, mut mins, mut sw) = ([0f32; SUBS16], [0f32; SUBS16], [0f32; SUBS16]);
        let sigma2 = sum_squares(xs) / QK_K as f32;
        for (j, xb) in xs.chunks_exact(SUB16).enumerate() {
            let mut weights = [0f32; SUB16];
            let (rmin, rdelta, nstep, use_mad) = match qws {
                Some(q) => {
                    imatrix_weights(xb, &q[SUB16 * j..], sigma2, &mut weights);
                    let (rmin, rdelta, nstep) = QKX3_SEARCH;
                    (rmin, rdelta, nstep, false)
                }
                None => {
                    for (w, &v) in weights.iter_mut().zip(xb) {
                        *w = v.abs();
                    }
                    (-0.5, 0.1, 15, true)
                }
            };
            sw[j] = weights.iter().fold(0.0, |s, &w| s + w);
            let lv = &mut levels[SUB16 * j..SUB16 * (j + 1)];
            (scales[j], mins[j]) =
                make_qkx2_quants(NMAX, xb, &weights, lv, rmin, rdelta, nstep, use_mad);
        }
        let ((sc, d), (m, dmin)) = if qws.is_some() {
            let (mut ls, mut lm) = ([0u8; SUBS16], [0u8; SUBS16]);
            let dm = make_qp_quants(MAX_4BIT as i32, &scales, &mut ls, &sw);
            let mm = make_qp_quants(MAX_4BIT as i32, &mins, &mut lm, &sw);
            ((ls, fp16(dm)), (lm, fp16(mm)))
        } else {
            let max_of = |v: &[f32]| v.iter().fold(0f32, |m, &s| if s > m { s } else { m });
            (
                quantize_4bit(&scales, max_of(&scales)),
                quantize_4bit(&mins, max_of(&mins)),
            )
        };
        yb.scales = std::array::from_fn(|j| sc[j] | (m[j] << 4));
        (yb.d, yb.dmin) = (d, dmin);
        q2_k_finish(xs, &mut levels, yb);
    }
}

// ---- Q3_K -----------------------------------------------------------------------------------

/// The end of both Q3_K paths from the sixteen 6-bit scale codes (0..=63, stored − 32) and
/// the super-block scale `d`: codes packed (low nibbles in bytes 0..8, high pairs in 8..12),
/// `d` stored; every group with non-zero `d·(sc − 32)` requantized as
/// `clamp(nearest_int(x/(d·(sc − 32))), −4, 3) + 4`; levels ≥ 4 set their `hmask` bit.
fn q3_k_finish(
    xs: &[f32],
    codes: &[u8; SUBS16],
    d: f32,
    mut levels: [u8; QK_K],
    yb: &mut BlockQ3K,
) {
    const NMAX: i32 = 4;
    yb.scales = [0; K_SCALE_SIZE];
    for (j, &l) in codes.iter().enumerate() {
        if j < 8 {
            yb.scales[j] = l & 0x0f;
        } else {
            yb.scales[j - 8] |= (l & 0x0f) << 4;
        }
        yb.scales[j % 4 + 8] |= (l >> 4) << (2 * (j / 4));
    }
    yb.d = fp16(d);
    let dd = unfp16(yb.d);
    for (j, xb) in xs.chunks_exact(SUB16).enumerate() {
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
        for (l, &v) in levels[SUB16 * j..].iter_mut().zip(xb) {
            *l = (nearest_int(v / d).clamp(-NMAX, NMAX - 1) + NMAX) as u8;
        }
    }
    yb.hmask = [0; QK_K / 8];
    for (j, l) in levels.iter_mut().enumerate() {
        if *l > 3 {
            yb.hmask[j % (QK_K / 8)] |= 1 << (j / (QK_K / 8));
            *l -= 4;
        }
    }
    pack_2bit(&levels, &mut yb.qs);
}

/// ggml's `quantize_q3_K` for one row. Without importance weights `qw`
/// (`quantize_row_q3_K_ref`): per sixteen values [`make_q3_quants`] (nmax 4); the codes
/// `clamp(nearest_int(s·(−32/max_scale)), −32, 31) + 32` with `d = 1/(−32/max_scale)`
/// (max_scale of largest magnitude, signed; all codes and `d` 0 when it is 0). With them
/// (`quantize_row_q3_K_impl`): per sixteen values [`make_qx_quants`] (nmax 4, weights
/// `qw·sqrt(2Σx²/256 + x²)`), the sixteen scales by `make_qx_quants` (nmax 32, weighted by each
/// group's weight sum) into `d` and the codes. Then [`q3_k_finish`].
pub fn quantize_q3_k(x: &[f32], qw: Option<&[f32]>, y: &mut [BlockQ3K]) {
    const NMAX: i32 = 4;
    const SCALE_NMAX: i32 = 32;
    for (xs, qws, yb) in blocks_with_weights(x, qw, y, QK_K) {
        let (levels, codes, d) = if let Some(qws) = qws {
            let sigma2 = sigma2_k(xs);
            let mut sw = [0f32; SUBS16];
            let (levels, scales) = sub16_quants(xs, |j, xb, l| {
                let mut w = [0f32; SUB16];
                imatrix_weights(xb, &qws[SUB16 * j..], sigma2, &mut w);
                sw[j] = w.iter().fold(0.0, |s, &w| s + w);
                make_qx_quants(NMAX, xb, l, Some(&w))
            });
            let mut codes = [0u8; SUBS16];
            let d = make_qx_quants(SCALE_NMAX, &scales, &mut codes, Some(&sw));
            (levels, codes, d)
        } else {
            let (levels, scales) = sub16_quants(xs, |_, xb, l| make_q3_quants(NMAX, xb, l));
            let (max_scale, _) = signed_amax(&scales);
            let (codes, d) = if max_scale != 0.0 {
                let iscale = -32.0 / max_scale;
                let code = |s: f32| ((nearest_int(iscale * s) as i8).clamp(-32, 31) + 32) as u8;
                (scales.map(code), 1.0 / iscale)
            } else {
                ([0; SUBS16], 0.0)
            };
            (levels.map(|l: i8| l as u8), codes, d)
        };
        q3_k_finish(xs, &codes, d, levels, yb);
    }
}

// ---- Q4_K, Q5_K -----------------------------------------------------------------------------

/// The first fit of Q4_K and Q5_K: per 32 values [`make_qkx2_quants`] (squared error) with the
/// weights `weigh(group, values)` and the search `(rmin, rdelta, nstep)`. Returns the levels,
/// scales, mins and each group's weight sum.
fn sub32_fits(
    xs: &[f32],
    nmax: i32,
    (rmin, rdelta, nstep): (f32, f32, i32),
    weigh: impl Fn(usize, &[f32]) -> [f32; QK],
) -> ([u8; QK_K], [f32; SUBS32], [f32; SUBS32], [f32; SUBS32]) {
    let mut levels = [0u8; QK_K];
    let (mut scales, mut mins, mut sw) = ([0f32; SUBS32], [0f32; SUBS32], [0f32; SUBS32]);
    for (j, xb) in xs.chunks_exact(QK).enumerate() {
        let weights = weigh(j, xb);
        sw[j] = weights.iter().fold(0.0, |s, &w| s + w);
        let lv = &mut levels[QK * j..QK * (j + 1)];
        (scales[j], mins[j]) = make_qkx2_quants(nmax, xb, &weights, lv, rmin, rdelta, nstep, false);
    }
    (levels, scales, mins, sw)
}

/// Eight 6-bit scale and min codes packed as ggml's `get_scale_min_k4` reads them.
fn pack_scale_min(ls: &[u8; SUBS32], lm: &[u8; SUBS32]) -> [u8; K_SCALE_SIZE] {
    let mut packed = [0u8; K_SCALE_SIZE];
    for j in 0..SUBS32 {
        let (ls, lm) = (ls[j], lm[j]);
        if j < 4 {
            packed[j] = ls;
            packed[j + 4] = lm;
        } else {
            packed[j + 4] = (ls & 0x0f) | ((lm & 0x0f) << 4);
            packed[j - 4] |= (ls >> 4) << 6;
            packed[j] |= (lm >> 4) << 6;
        }
    }
    packed
}

/// The scale and min codes of one Q4_K/Q5_K super-block and its f16 `d` and `dmin`.
struct ScaleMin {
    d: [u8; 2],
    dmin: [u8; 2],
    packed: [u8; K_SCALE_SIZE],
}

/// The reference codes (`quantize_row_q4_K_ref`): `min(63, (u8)nearest_int(s·63/max))` against
/// the largest scale and min, `d = max_scale/63`, `dmin = max_min/63`.
fn scale_min_ref(scales: &[f32; SUBS32], mins: &[f32; SUBS32]) -> ScaleMin {
    let max6 = MAX_6BIT as f32;
    let max_of = |v: &[f32]| v.iter().fold(0f32, |m, &s| if s > m { s } else { m });
    let (max_scale, max_min) = (max_of(scales), max_of(mins));
    let inv = |max: f32| if max > 0.0 { max6 / max } else { 0.0 };
    let (inv_scale, inv_min) = (inv(max_scale), inv(max_min));
    let code = |inv: f32, s: f32| (nearest_int(inv * s) as u8).min(MAX_6BIT as u8);
    ScaleMin {
        d: fp16(max_scale / max6),
        dmin: fp16(max_min / max6),
        packed: pack_scale_min(
            &scales.map(|s| code(inv_scale, s)),
            &mins.map(|m| code(inv_min, m)),
        ),
    }
}

/// The weighted codes (`quantize_row_q4_K_impl`): scales and mins each by [`make_qp_quants`]
/// (nmax 63, weighted by each group's weight sum); Q5_K caps the codes at 63 (`cap`), Q4_K
/// keeps the byte as it is.
fn scale_min_weighted(
    scales: &[f32; SUBS32],
    mins: &[f32; SUBS32],
    sw: &[f32; SUBS32],
    cap: bool,
) -> ScaleMin {
    let (mut ls, mut lm) = ([0u8; SUBS32], [0u8; SUBS32]);
    let d = make_qp_quants(MAX_6BIT, scales, &mut ls, sw);
    let dmin = make_qp_quants(MAX_6BIT, mins, &mut lm, sw);
    if cap {
        for l in ls.iter_mut().chain(lm.iter_mut()) {
            *l = (*l).min(MAX_6BIT as u8);
        }
    }
    ScaleMin {
        d: fp16(d),
        dmin: fp16(dmin),
        packed: pack_scale_min(&ls, &lm),
    }
}

/// One Q4_K (nmax 15) or Q5_K (nmax 31) super-block's codes and levels. Without importance
/// weights (`quantize_row_q*_K_ref`): per 32 values weights `sqrt(Σx²/32) + |x|` and the
/// search `(rmin, 0.1, nstep)`, [`scale_min_ref`] codes; with them (`quantize_row_q*_K_impl`):
/// weights `qw·sqrt(2Σx²/256 + x²)`, the search (−0.9, 0.05, 36), [`scale_min_weighted`]
/// codes. Then every group with non-zero `d·sc` requantized as
/// `clamp(nearest_int((x + dmin·m)/(d·sc)), 0, nmax)`.
fn scale_min_block(
    xs: &[f32],
    qws: Option<&[f32]>,
    nmax: i32,
    (rmin, nstep): (f32, i32),
) -> (ScaleMin, [u8; QK_K]) {
    let (sm, mut levels) = if let Some(qws) = qws {
        let sigma2 = sigma2_k(xs);
        let weigh = |j: usize, xb: &[f32]| {
            let mut w = [0f32; QK];
            imatrix_weights(xb, &qws[QK * j..], sigma2, &mut w);
            w
        };
        let (levels, scales, mins, sw) = sub32_fits(xs, nmax, QKX3_SEARCH, weigh);
        let cap = nmax > 15;
        (scale_min_weighted(&scales, &mins, &sw, cap), levels)
    } else {
        let weigh = |_: usize, xb: &[f32]| {
            let av_x = (sum_squares(xb) / QK as f32).sqrt();
            let mut w = [0f32; QK];
            for (w, &v) in w.iter_mut().zip(xb) {
                *w = av_x + v.abs();
            }
            w
        };
        let (levels, scales, mins, _) = sub32_fits(xs, nmax, (rmin, 0.1, nstep), weigh);
        (scale_min_ref(&scales, &mins), levels)
    };
    let (dd, ddmin) = (unfp16(sm.d), unfp16(sm.dmin));
    for (j, xb) in xs.chunks_exact(QK).enumerate() {
        let (sc, m) = scale_min_k4(j, &sm.packed);
        let d = dd * f32::from(sc);
        if d == 0.0 {
            continue;
        }
        let dm = ddmin * f32::from(m);
        for (l, &v) in levels[QK * j..].iter_mut().zip(xb) {
            *l = nearest_int((v + dm) / d).clamp(0, nmax) as u8;
        }
    }
    (sm, levels)
}

/// ggml's `quantize_q4_K` for one row: [`scale_min_block`] (nmax 15; without importance weights
/// `qw` rmin −1 and 20 steps); in each 64 values byte l holds element l (low nibble) and l+32.
pub fn quantize_q4_k(x: &[f32], qw: Option<&[f32]>, y: &mut [BlockQ4K]) {
    for (xs, qws, yb) in blocks_with_weights(x, qw, y, QK_K) {
        let (sm, levels) = scale_min_block(xs, qws, 15, (-1.0, 20));
        (yb.d, yb.dmin, yb.scales) = (sm.d, sm.dmin, sm.packed);
        for (l64, q) in levels.chunks_exact(64).zip(yb.qs.chunks_exact_mut(32)) {
            for (l, b) in q.iter_mut().enumerate() {
                *b = l64[l] | (l64[l + 32] << 4);
            }
        }
    }
}

/// ggml's `quantize_q5_K` for one row: [`scale_min_block`] (nmax 31; without importance weights
/// `qw` rmin −0.5 and 15 steps); nibbles as Q4_K, the fifth bit of element `64c + l` (`+ 32`) in
/// bit `2c` (`2c + 1`) of `qh[l]`.
pub fn quantize_q5_k(x: &[f32], qw: Option<&[f32]>, y: &mut [BlockQ5K]) {
    for (xs, qws, yb) in blocks_with_weights(x, qw, y, QK_K) {
        let (sm, levels) = scale_min_block(xs, qws, 31, (-0.5, 15));
        (yb.d, yb.dmin, yb.scales) = (sm.d, sm.dmin, sm.packed);
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

/// ggml's `quantize_q6_K` for one row: per sixteen values [`make_qx_quants`] (nmax 32, weighted
/// by the importance weights `qw` as they are, else by `x²`); a block whose largest |scale| is
/// below [`GROUP_MAX_EPS`] is all zero bytes. Else `iscale = −128/max_scale` (signed),
/// `d = 1/iscale`, scales `min(127, nearest_int(iscale·s))` as i8; every group with non-zero
/// `d·sc` requantized as `clamp(nearest_int(x/(d·sc)), −32, 31) + 32`.
pub fn quantize_q6_k(x: &[f32], qw: Option<&[f32]>, y: &mut [BlockQ6K]) {
    const NMAX: i32 = 32;
    for (xs, qws, yb) in blocks_with_weights(x, qw, y, QK_K) {
        let (mut levels, scales) = sub16_quants(xs, |j, xb, l| {
            make_qx_quants(NMAX, xb, l, qws.map(|w| &w[SUB16 * j..SUB16 * (j + 1)]))
        });
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
        for (j, xb) in xs.chunks_exact(SUB16).enumerate() {
            let d = dd * f32::from(yb.scales[j]);
            if d == 0.0 {
                continue;
            }
            for (l, &v) in levels[SUB16 * j..].iter_mut().zip(xb) {
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
