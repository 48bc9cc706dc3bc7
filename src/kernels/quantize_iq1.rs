//! ggml's quantizers of IQ1_S and IQ1_M with importance weights (`quantize_iq1_s`,
//! `quantize_iq1_m` in `ggml-quants.c`, one row), byte for byte, written straight into ggml's
//! block layouts. A value is `scale·(q + δ)`, `q` in {−1, 0, 1} and the shift `δ` ±1/8 per
//! group of eight (IQ1_M) or per sub-block (IQ1_S). Each sub-block (32 values for IQ1_S, 16
//! for IQ1_M) is split exactly: its values sorted, every pair of boundaries between the
//! three levels tried with the best scale for it; each group of eight is then snapped to the
//! 2048-entry grid (ggml's `iq2xs_init_impl` for IQ1_S/IQ1_M: the nearest three rings of
//! entries for the codes off the grid, maps shared with the IQ2 types). Checked against ggml
//! with a C harness linking its library (not part of the repository): see the pinned hashes
//! in `quantize_iq2_tests.rs`.

use super::blocks::{QK, QK_K};
use super::iq_grid_maps::{odd_level, GridMaps};
use super::iq_grids::IQ1S_GRID;
use super::quantize_iq2::{iq2_maps, quantize_rows, NoWeights, IQ2_GROUP};
use super::quantize_ref::fp16;
use std::sync::OnceLock;

/// The bytes the IQ1 grid stores for levels 0, 1, 2 (values −1, 0, 1).
pub(super) const IQ1_GRID_BYTES: [u8; 3] = [0xff, 0x00, 0x01];
/// ggml's `nwant` for the IQ1 grid.
const IQ1_RINGS: usize = 3;
/// ggml's `IQ1S_DELTA` and `IQ1M_DELTA`: the shift of a group's values.
const IQ1_DELTA: f32 = 0.125;
/// The values of levels 0, 1, 2 with the shift `+δ` (ggml's `x_p`) and `−δ` (`x_m`).
const X_P: [f32; 3] = [-1.0 + IQ1_DELTA, IQ1_DELTA, 1.0 + IQ1_DELTA];
const X_M: [f32; 3] = [-1.0 - IQ1_DELTA, -IQ1_DELTA, 1.0 - IQ1_DELTA];
/// Sub-block of IQ1_S and of IQ1_M.
const IQ1S_SUB: usize = QK;
const IQ1M_SUB: usize = QK / 2;
/// ggml's `GROUP_MAX_EPS_IQ1_S` and `GROUP_MAX_EPS_IQ1_M`: sub-blocks whose largest `|x|` is
/// below are zero.
const GROUP_MAX_EPS_IQ1_S: f32 = 1e-12;
const GROUP_MAX_EPS_IQ1_M: f32 = 1e-7;
/// Largest 3-bit sub-block scale code; a sub-block's scale is about `d·(2l + 1)`.
const IQ1_MAX_SCALE_CODE: i32 = 7;
/// `d = max_scale/15`.
const IQ1_SCALE_DIVISOR: f32 = (2 * IQ1_MAX_SCALE_CODE + 1) as f32;
/// ggml's fudge factors on the stored super-block scales.
const IQ1S_D_FUDGE: f32 = 1.125;
const IQ1M_D_FUDGE: f32 = 1.1125;
/// Bits of the grid index above its low byte, kept in `qh`.
const IQ1_HIGH_BITS: usize = 3;

/// `block_iq1_s`: f16 d, 32 low bytes of the 11-bit grid indices, per sub-block of 32 a
/// little-endian u16 `qh`: the four indices' top three bits, the 3-bit scale code in bits
/// 12..15, bit 15 set for the shift `−δ`.
const IQ1S_BLOCK_BYTES: usize = 2 + QK_K / 8 + QK_K / 16;
const IQ1S_QS_AT: usize = 2;
const IQ1S_QH_AT: usize = IQ1S_QS_AT + QK_K / 8;
const IQ1S_SCALE_SHIFT: u32 = 12;
const IQ1S_MINUS_DELTA: u16 = 8;
/// `block_iq1_m`: 32 low bytes of the grid indices, per sub-block of 16 a byte `qh` (each
/// group's top three bits in a nibble, the nibble's top bit set for the shift `−δ`), and four
/// little-endian u16 of four 3-bit scale codes each, their top nibbles holding the f16 `d`
/// (bits 0..4 in the first, and so on).
const IQ1M_BLOCK_BYTES: usize = QK_K / 8 + QK_K / 16 + QK_K / 32;
const IQ1M_QH_AT: usize = QK_K / 8;
const IQ1M_SCALES_AT: usize = IQ1M_QH_AT + QK_K / 16;
const IQ1M_SCALE_BITS: usize = 3;
const IQ1M_SCALES_PER_WORD: usize = 4;
/// `qh` bits of the shift `−δ` for the choices `k` = 0..3 (first group −δ if `k ≥ 2`, second
/// if `k` is odd: ggml's `masks`).
const IQ1M_SHIFT_MASKS: [u8; 4] = [0x00, 0x80, 0x08, 0x88];
/// The nibble of `d`'s f16 bits each scale word's top four bits hold.
const IQ1M_D_NIBBLE: u16 = 0xf;
const IQ1M_D_AT: u32 = 12;

static IQ1_MAPS: OnceLock<GridMaps<IQ2_GROUP>> = OnceLock::new();

/// The IQ1 grid's maps, built on first use.
fn iq1_maps() -> &'static GridMaps<IQ2_GROUP> {
    IQ1_MAPS.get_or_init(|| iq2_maps(&IQ1S_GRID, IQ1_GRID_BYTES, IQ1_RINGS))
}

/// A sub-block's weights: `qw·sqrt(sigma2 + x²)`, or without `qw` (IQ1_M) `x²`.
fn iq1_weights(xb: &[f32], qw: Option<&[f32]>, sigma2: f32, weight: &mut [f32]) {
    for (i, (w, &x)) in weight.iter_mut().zip(xb).enumerate() {
        *w = match qw {
            Some(qw) => qw[i] * (sigma2 + x * x).sqrt(),
            None => x * x,
        };
    }
}

/// `sigma2 = 2·Σx²/256` of a super-block.
fn iq1_sigma2(xs: &[f32]) -> f32 {
    2.0 * xs.iter().fold(0f32, |s, &x| s + x * x) / QK_K as f32
}

/// The largest `|x|` (ggml's `MAX` from `|x[0]|`).
fn abs_max(xb: &[f32]) -> f32 {
    xb[1..]
        .iter()
        .fold(xb[0].abs(), |m, &v| if m > v.abs() { m } else { v.abs() })
}

/// The indices of `xb` by ascending value, equal values in index order: ggml sorts
/// `(value, index)` pairs with `qsort` comparing the values only, and glibc's `qsort` is a
/// stable merge sort for arrays this small.
fn sorted_order(xb: &[f32]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..xb.len()).collect();
    order.sort_by(|&a, &b| {
        xb[a]
            .partial_cmp(&xb[b])
            .unwrap_or(std::cmp::Ordering::Equal)
    });
    order
}

/// The levels of a split: the values before sorted position `i1` level 0, before `i2` level
/// 1, the rest 2; `flip` (a negative best scale) mirrors them, `2 − l`.
fn split_levels(order: &[usize], (i1, i2): (usize, usize), flip: bool) -> Vec<u8> {
    let mut levels = vec![0u8; order.len()];
    for (j, &i) in order.iter().enumerate() {
        let l = u8::from(j >= i1) + u8::from(j >= i2);
        levels[i] = if flip { 2 - l } else { l };
    }
    levels
}

/// ggml's `iq1_find_best_neighbour2`: the neighbour in `list` with the smallest
/// `Σ w·(scale·xx[l] − x)²` (a strictly smaller one replaces). Where none is below `f32::MAX`
/// ggml scans the whole grid reading past its eight values (undefined); here the list's
/// first, nearest entry is kept.
fn best_neighbour(
    maps: &GridMaps<IQ2_GROUP>,
    list: &[u16],
    xb: &[f32],
    w: &[f32],
    scale: f32,
    xx: &[f32; 3],
) -> u16 {
    let mut best_d2 = f32::MAX;
    let mut best = list.first().copied().unwrap_or(0);
    for &j in list {
        let mut d2 = 0f32;
        for ((&l, &x), &w) in maps.levels[usize::from(j)].iter().zip(xb).zip(w) {
            let diff = scale * xx[usize::from(l)] - x;
            d2 += w * diff * diff;
        }
        if d2 < best_d2 {
            best_d2 = d2;
            best = j;
        }
    }
    best
}

/// Snaps each group of eight `levels` to the grid: its own entry if on the grid, else
/// [`best_neighbour`] at `scale` with the group's shifted values `xx(k)`. If any group was
/// off the grid, the scale is refitted, `Σwqx/Σwq²` where both are positive. Returns the
/// scale; the entries go to `entries`.
fn snap_groups(
    xb: &[f32],
    weight: &[f32],
    levels: &[u8],
    mut scale: f32,
    xx: impl Fn(usize) -> &'static [f32; 3],
    entries: &mut [u16],
) -> f32 {
    let maps = iq1_maps();
    let group = |k: usize| IQ2_GROUP * k..IQ2_GROUP * (k + 1);
    let mut all_on_grid = true;
    for (k, e) in entries.iter_mut().enumerate() {
        let l: &[u8; IQ2_GROUP] = levels[group(k)].try_into().expect("a group of eight");
        *e = match maps.lookup(l) {
            Ok(j) => j,
            Err(list) => {
                all_on_grid = false;
                best_neighbour(maps, list, &xb[group(k)], &weight[group(k)], scale, xx(k))
            }
        };
    }
    if !all_on_grid {
        let (mut sumqx, mut sumq2) = (0f32, 0f32);
        for (k, &e) in entries.iter().enumerate() {
            let g = group(k);
            for ((&l, &x), &w) in maps.levels[usize::from(e)]
                .iter()
                .zip(&xb[g.clone()])
                .zip(&weight[g])
            {
                let q = xx(k)[usize::from(l)];
                sumqx += w * q * x;
                sumq2 += w * q * q;
            }
        }
        if sumqx > 0.0 && sumq2 > 0.0 {
            scale = sumqx / sumq2;
        }
    }
    scale
}

/// One IQ1_S sub-block of 32: the scale, the four entries and whether the shift is `−δ`;
/// `None` where the largest `|x|` is below `GROUP_MAX_EPS_IQ1_S` or no split fits.
fn iq1_s_sub_block(xb: &[f32], weight: &[f32]) -> Option<(f32, [u16; 4], bool)> {
    let n = xb.len();
    if abs_max(xb) < GROUP_MAX_EPS_IQ1_S {
        return None;
    }
    let order = sorted_order(xb);
    let (mut sumx, mut sumw) = (vec![0f32; n + 1], vec![0f32; n + 1]);
    for (j, &i) in order.iter().enumerate() {
        sumx[j + 1] = sumx[j] + weight[i] * xb[i];
        sumw[j + 1] = sumw[j] + weight[i];
    }
    let mut best_score = -f32::MAX;
    let mut scale = abs_max(xb);
    let mut best: Option<((usize, usize), bool)> = None;
    for i1 in 0..=n {
        for i2 in i1..=n {
            for (xx, minus) in [(&X_P, false), (&X_M, true)] {
                let sumqx = (sumx[i1] - sumx[0]) * xx[0]
                    + (sumx[i2] - sumx[i1]) * xx[1]
                    + (sumx[n] - sumx[i2]) * xx[2];
                let sumq2 = (sumw[i1] - sumw[0]) * xx[0] * xx[0]
                    + (sumw[i2] - sumw[i1]) * xx[1] * xx[1]
                    + (sumw[n] - sumw[i2]) * xx[2] * xx[2];
                if sumq2 > 0.0 && sumqx * sumqx > best_score * sumq2 {
                    scale = sumqx / sumq2;
                    best_score = scale * sumqx;
                    best = Some(((i1, i2), minus));
                }
            }
        }
    }
    let (split, mut minus) = best?;
    let flip = scale < 0.0;
    if flip {
        scale = -scale;
        minus = !minus;
    }
    let levels = split_levels(&order, split, flip);
    let xx: &'static [f32; 3] = if minus { &X_M } else { &X_P };
    let mut entries = [0u16; 4];
    let scale = snap_groups(xb, weight, &levels, scale, |_| xx, &mut entries);
    Some((scale, entries, minus))
}

/// ggml's `quantize_iq1_s` of one row (`quantize_row_iq1_s_impl`): weights
/// `qw·sqrt(2·Σx²/256 + x²)`; each sub-block of 32 by [`iq1_s_sub_block`], its indices' low
/// bytes and top bits written as it is quantized. A super-block whose largest scale is 0
/// keeps those with `d = 0`; else `d = max/15`, stored as `d·1.125` in f16, and each
/// sub-block's 3-bit `l = clamp(nearest_int((s/d − 1)/2), 0, 7)`, `| 8` for `−δ`, in `qh`'s
/// bits 12..16.
///
/// `weights`: one importance weight per column. ggml asserts them; `None` here means all
/// 1.0 (for synthetic models without an imatrix; `locus quantize` refuses the type without
/// one, as llama-quantize does).
///
/// # Panics
/// If the row is not whole super-blocks of 256, or the weights are not one per value.
pub fn quantize_iq1_s(x: &[f32], weights: Option<&[f32]>) -> Vec<u8> {
    quantize_rows(
        "quantize_iq1_s",
        x,
        weights,
        NoWeights::Flat,
        IQ1S_BLOCK_BYTES,
        iq1_s_block,
    )
}

/// One super-block of [`quantize_iq1_s`].
fn iq1_s_block(xs: &[f32], qw: Option<&[f32]>, yb: &mut [u8]) {
    let sigma2 = iq1_sigma2(xs);
    let mut weight = [0f32; IQ1S_SUB];
    let mut max_scale = 0f32;
    let mut subs = [(0f32, false); QK_K / IQ1S_SUB];
    for (ib, xb) in xs.chunks_exact(IQ1S_SUB).enumerate() {
        let qw = qw.map(|qw| &qw[IQ1S_SUB * ib..IQ1S_SUB * (ib + 1)]);
        iq1_weights(xb, qw, sigma2, &mut weight);
        let Some((scale, entries, minus)) = iq1_s_sub_block(xb, &weight) else {
            continue;
        };
        let mut h = 0u16;
        for (k, &e) in entries.iter().enumerate() {
            let [low, high] = e.to_le_bytes();
            yb[IQ1S_QS_AT + entries.len() * ib + k] = low;
            h |= u16::from(high) << (IQ1_HIGH_BITS * k);
        }
        yb[IQ1S_QH_AT + 2 * ib..][..2].copy_from_slice(&h.to_le_bytes());
        subs[ib] = (scale, minus);
        max_scale = if max_scale > scale { max_scale } else { scale };
    }
    if max_scale == 0.0 {
        return;
    }
    let d = max_scale / IQ1_SCALE_DIVISOR;
    yb[..2].copy_from_slice(&fp16(d * IQ1S_D_FUDGE));
    let id = 1.0 / d;
    for (ib, &(scale, minus)) in subs.iter().enumerate() {
        let mut l = u16::from(odd_level(id * scale, IQ1_MAX_SCALE_CODE));
        if minus {
            l |= IQ1S_MINUS_DELTA;
        }
        let at = IQ1S_QH_AT + 2 * ib;
        let h = u16::from_le_bytes([yb[at], yb[at + 1]]) | l << IQ1S_SCALE_SHIFT;
        yb[at..at + 2].copy_from_slice(&h.to_le_bytes());
    }
}

/// The shifted values of IQ1_M's group `k` (0 or 1) for the choice `c` (0..4: first group
/// `−δ` if `c ≥ 2`, second if `c` is odd).
fn iq1_m_values(c: usize, k: usize) -> &'static [f32; 3] {
    let minus = if k == 0 { c >= 2 } else { c % 2 == 1 };
    if minus {
        &X_M
    } else {
        &X_P
    }
}

/// One IQ1_M sub-block of 16: the scale, the two entries and the shift choice (0..4, as
/// [`iq1_m_values`]); `None` where the largest `|x|` is below `GROUP_MAX_EPS_IQ1_M` or no split
/// fits. ggml's split search keeps prefix sums per half (each half its own shift) and scores a
/// split as `T·v₂ − S(i1) − S(i2)`, with those float operations.
fn iq1_m_sub_block(xb: &[f32], weight: &[f32]) -> Option<(f32, [u16; 2], usize)> {
    let n = xb.len();
    if abs_max(xb) < GROUP_MAX_EPS_IQ1_M {
        return None;
    }
    let order = sorted_order(xb);
    let mut px = [[0f32; IQ1M_SUB + 1]; 2];
    let mut pw = [[0f32; IQ1M_SUB + 1]; 2];
    for (j, &i) in order.iter().enumerate() {
        let h = usize::from(i >= n / 2);
        px[h][j + 1] = px[h][j] + weight[i] * xb[i];
        px[1 - h][j + 1] = px[1 - h][j];
        pw[h][j + 1] = pw[h][j] + weight[i];
        pw[1 - h][j + 1] = pw[1 - h][j];
    }
    let (txs, tws) = ([px[0][n], px[1][n]], [pw[0][n], pw[1][n]]);
    let (p2, m2) = (X_P[2], X_M[2]);
    let cp1 = X_P[0] * X_P[0] - X_P[1] * X_P[1];
    let cp2 = X_P[1] * X_P[1] - X_P[2] * X_P[2];
    let cm1 = X_M[0] * X_M[0] - X_M[1] * X_M[1];
    let cm2 = X_M[1] * X_M[1] - X_M[2] * X_M[2];
    let mut best_score = -f32::MAX;
    let mut scale = abs_max(xb);
    let mut best: Option<((usize, usize), usize)> = None;
    for i1 in 0..=n {
        for i2 in i1..=n {
            let (mut qx_p, mut qx_m, mut q2_p, mut q2_m) =
                ([0f32; 2], [0f32; 2], [0f32; 2], [0f32; 2]);
            for h in 0..2 {
                let sx = px[h][i1] + px[h][i2];
                qx_p[h] = txs[h] * p2 - sx;
                qx_m[h] = txs[h] * m2 - sx;
                q2_p[h] = tws[h] * p2 * p2 + pw[h][i1] * cp1 + pw[h][i2] * cp2;
                q2_m[h] = tws[h] * m2 * m2 + pw[h][i1] * cm1 + pw[h][i2] * cm2;
            }
            let sumqx = [
                qx_p[0] + qx_p[1],
                qx_p[0] + qx_m[1],
                qx_m[0] + qx_p[1],
                qx_m[0] + qx_m[1],
            ];
            let sumq2 = [
                q2_p[0] + q2_p[1],
                q2_p[0] + q2_m[1],
                q2_m[0] + q2_p[1],
                q2_m[0] + q2_m[1],
            ];
            for c in 0..4 {
                if sumq2[c] > 0.0 && sumqx[c] * sumqx[c] > best_score * sumq2[c] {
                    scale = sumqx[c] / sumq2[c];
                    best_score = scale * sumqx[c];
                    best = Some(((i1, i2), c));
                }
            }
        }
    }
    let (split, mut choice) = best?;
    let flip = scale < 0.0;
    if flip {
        scale = -scale;
        choice = 3 - choice;
    }
    let levels = split_levels(&order, split, flip);
    let mut entries = [0u16; 2];
    let scale = snap_groups(
        xb,
        weight,
        &levels,
        scale,
        |k| iq1_m_values(choice, k),
        &mut entries,
    );
    Some((scale, entries, choice))
}

/// ggml's `quantize_iq1_m` of one row (`quantize_row_iq1_m_impl`): weights
/// `qw·sqrt(2·Σx²/256 + x²)` (without `qw`: `x²`); each sub-block of 16 by
/// [`iq1_m_sub_block`], its indices written as it is quantized. A super-block whose largest
/// scale is 0 keeps those with zero scales and `d`. Else, with `d = max/15`, each sub-block's
/// 3-bit `l = clamp(nearest_int((s/d − 1)/2), 0, 7)` and shift bits are stored, and `d` is
/// refitted over the whole super-block as `Σwqx/Σwq²` with `q = xx[level]·(2l + 1)` (zero
/// sub-blocks included, as entry 0 with `l = 0`), stored as `d·1.1125` in f16 split in the
/// scale words' top nibbles.
///
/// `weights`: one importance weight per column, or `None` (ggml's NULL: weights `x²`).
///
/// # Panics
/// If the row is not whole super-blocks of 256, or the weights are not one per value.
pub fn quantize_iq1_m(x: &[f32], weights: Option<&[f32]>) -> Vec<u8> {
    quantize_rows(
        "quantize_iq1_m",
        x,
        weights,
        NoWeights::Ggml,
        IQ1M_BLOCK_BYTES,
        iq1_m_block,
    )
}

/// One super-block of [`quantize_iq1_m`].
fn iq1_m_block(xs: &[f32], qw: Option<&[f32]>, yb: &mut [u8]) {
    let sigma2 = iq1_sigma2(xs);
    let sub_w = |ib: usize| qw.map(|qw| &qw[IQ1M_SUB * ib..IQ1M_SUB * (ib + 1)]);
    let mut weight = [0f32; IQ1M_SUB];
    let mut max_scale = 0f32;
    let mut subs = [(0f32, 0usize); QK_K / IQ1M_SUB];
    for (ib, xb) in xs.chunks_exact(IQ1M_SUB).enumerate() {
        iq1_weights(xb, sub_w(ib), sigma2, &mut weight);
        let Some((scale, entries, choice)) = iq1_m_sub_block(xb, &weight) else {
            continue;
        };
        let [[low0, high0], [low1, high1]] = entries.map(u16::to_le_bytes);
        yb[2 * ib] = low0;
        yb[2 * ib + 1] = low1;
        yb[IQ1M_QH_AT + ib] = high0 | high1 << 4;
        subs[ib] = (scale, choice);
        max_scale = if max_scale > scale { max_scale } else { scale };
    }
    if max_scale == 0.0 {
        return;
    }
    let maps = iq1_maps();
    let mut sc = [0u16; QK_K / IQ1M_SUB / IQ1M_SCALES_PER_WORD];
    let mut d = max_scale / IQ1_SCALE_DIVISOR;
    let id = 1.0 / d;
    let (mut sumqx, mut sumq2) = (0f32, 0f32);
    for (ib, (&(scale, choice), xb)) in subs.iter().zip(xs.chunks_exact(IQ1M_SUB)).enumerate() {
        let l = odd_level(id * scale, IQ1_MAX_SCALE_CODE);
        sc[ib / IQ1M_SCALES_PER_WORD] |=
            u16::from(l) << (IQ1M_SCALE_BITS * (ib % IQ1M_SCALES_PER_WORD));
        yb[IQ1M_QH_AT + ib] |= IQ1M_SHIFT_MASKS[choice];
        iq1_weights(xb, sub_w(ib), sigma2, &mut weight);
        let qh = yb[IQ1M_QH_AT + ib];
        for k in 0..IQ1M_SUB / IQ2_GROUP {
            let high = usize::from(qh >> (4 * k)) & ((1 << IQ1_HIGH_BITS) - 1);
            let e = usize::from(yb[2 * ib + k]) | high << 8;
            let xx = iq1_m_values(choice, k);
            let g = IQ2_GROUP * k..IQ2_GROUP * (k + 1);
            for ((&gl, &x), &w) in maps.levels[e].iter().zip(&xb[g.clone()]).zip(&weight[g]) {
                let q = xx[usize::from(gl)] * f32::from(2 * l + 1);
                sumqx += w * q * x;
                sumq2 += w * q * q;
            }
        }
    }
    if sumq2 > 0.0 {
        d = sumqx / sumq2;
    }
    let s = u16::from_le_bytes(fp16(d * IQ1M_D_FUDGE));
    for (k, word) in sc.iter_mut().enumerate() {
        let nibble = (s >> (4 * k)) & IQ1M_D_NIBBLE;
        *word |= nibble << IQ1M_D_AT;
        let at = IQ1M_SCALES_AT + 2 * k;
        yb[at..at + 2].copy_from_slice(&word.to_le_bytes());
    }
}
