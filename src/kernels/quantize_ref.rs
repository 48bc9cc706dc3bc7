//! Weight quantizers for Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL and IQ4_XS (the K-quants live in
//! [`super::quantize_k`], IQ3_XXS and IQ3_S in [`super::quantize_iq3`], both re-exported here):
//! what `llama-quantize` writes, byte for byte, with an importance matrix or without.
//!
//! `llama-quantize` calls `ggml_quantize_chunk(type, …, imatrix)`, which runs ggml's
//! `quantize_<type>` on each row with the imatrix's row of column weights (or NULL); each
//! `quantize_<type>` here is that for one row, its importance weights an `Option`. Without them
//! the legacy types and the K-quants run ggml's `quantize_row_*_ref` row quantizers; IQ4_NL and
//! IQ4_XS have no such shortcut and run `quantize_row_iq4_nl_impl` with its own weights `x²` and
//! seven scale tries each way; IQ3_XXS and IQ3_S run `quantize_row_iq3_xxs_impl` and
//! `quantize_row_iq3_s_impl` (their `_ref`s too) with weights `x²`, 31 or 19 scale tries and a
//! search of their grid's nearest entries, built once. With them each runs its
//! `quantize_row_*_impl` with importance weights `qw·sqrt(σ² + x²)`, σ² a mean square of the
//! row, super-block or block as each type takes it (Q6_K takes `qw` as it is); Q8_0 ignores
//! them. A block then depends on its own values and σ²'s span only, so one row here is any row
//! of a file there.
//! The importance-matrix quantizers of IQ2_XXS, IQ2_XS, IQ2_S, IQ1_S and IQ1_M
//! (`quantize_iq2.rs`, `quantize_iq1.rs`: one row with its weights, to ggml's bytes) are
//! re-exported here too.
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
    self, BlockIq4Nl, BlockIq4Xs, BlockQ4_0, BlockQ4_1, BlockQ5_0, BlockQ5_1, KVALUES_IQ4NL, QK,
    QK_K,
};
use super::dequantize::{nearest_int, I32_LIMIT};
use super::half::{f16_to_f32, f32_to_f16};
use super::quantize_fit::{make_qkx2_quants, make_qx_quants};
pub use super::quantize_iq1::{quantize_iq1_m, quantize_iq1_s};
pub use super::quantize_iq2::{quantize_iq2_s, quantize_iq2_xs, quantize_iq2_xxs};
pub use super::quantize_iq3::{quantize_iq3_s, quantize_iq3_xxs};
pub use super::quantize_k::{
    quantize_q2_k, quantize_q3_k, quantize_q4_k, quantize_q5_k, quantize_q6_k,
};

/// ggml's `GROUP_MAX_EPS`: a group whose largest magnitude is below it counts as all zero.
pub(super) const GROUP_MAX_EPS: f32 = 1e-15;
/// f16 quiet NaN, what ggml's software conversion gives every NaN (plus its sign).
const F16_NAN: u16 = 0x7e00;
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
pub(super) fn unfp16(h: [u8; 2]) -> f32 {
    f16_to_f32(u16::from_le_bytes(h))
}

/// The first of the values of largest magnitude in `x` (strictly larger replaces), and that
/// magnitude; both 0 for an empty or all-zero slice.
#[inline]
pub(super) fn signed_amax(x: &[f32]) -> (f32, f32) {
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

/// `Σx²` from index 0 up in one f32 accumulator, as ggml sums a span before taking σ² from it.
#[inline]
pub(super) fn sum_squares(x: &[f32]) -> f32 {
    x.iter().fold(0.0, |s, &v| s + v * v)
}

/// ggml's importance weights of a group: `qw·sqrt(σ² + x²)` for each value `x` and its column's
/// importance `qw` (`out.len()` of them).
#[inline]
pub(super) fn imatrix_weights(x: &[f32], qw: &[f32], sigma2: f32, out: &mut [f32]) {
    for ((w, &v), &q) in out.iter_mut().zip(x).zip(qw) {
        *w = q * (sigma2 + v * v).sqrt();
    }
}

/// The blocks of `per` values of a row, each with its columns' importance weights (when
/// given) and its output block.
///
/// # Panics
/// If the row is not `y.len()` blocks or `qw` is not one weight per column.
pub(super) fn blocks_with_weights<'a, B>(
    x: &'a [f32],
    qw: Option<&'a [f32]>,
    y: &'a mut [B],
    per: usize,
) -> impl Iterator<Item = (&'a [f32], Option<&'a [f32]>, &'a mut B)> {
    assert_eq!(x.len(), y.len() * per, "quantizer: row length");
    if let Some(qw) = qw {
        assert_eq!(qw.len(), x.len(), "quantizer: one weight per column");
    }
    let mut weights = qw.map(|w| w.chunks_exact(per));
    x.chunks_exact(per)
        .zip(y.iter_mut())
        .map(move |(xb, yb)| (xb, weights.as_mut().and_then(Iterator::next), yb))
}

/// ggml's `quantize_<type>` of a legacy type for one row: its `reference` quantizer without
/// importance weights `qw`; with them `block(values, weights, block out)` on each block of 32,
/// the weights `qw·sqrt(σ² + x²)` with σ² the mean square of the whole row (`Σx²/n`), as
/// `quantize_row_q4_0_impl` and its siblings take it.
fn legacy_weighted<B>(
    x: &[f32],
    qw: Option<&[f32]>,
    y: &mut [B],
    reference: fn(&[f32], &mut [B]),
    block: impl Fn(&[f32], &[f32; QK], &mut B),
) {
    assert_eq!(x.len(), y.len() * QK, "legacy quantizer: row length");
    if qw.is_none() {
        return reference(x, y);
    }
    let sigma2 = sum_squares(x) / x.len() as f32;
    for (xb, qb, yb) in blocks_with_weights(x, qw, y, QK) {
        let mut w = [0f32; QK];
        imatrix_weights(xb, qb.unwrap_or_default(), sigma2, &mut w);
        block(xb, &w, yb);
    }
}

// ---- Q4_0, Q4_1 with importance weights -----------------------------------------------------

/// ggml's `quantize_q4_0` for one row: `quantize_row_q4_0_ref` without importance weights `qw`;
/// with them per block [`make_qx_quants`] (nmax 8, [`legacy_weighted`] weights), `d` its scale,
/// the levels as nibbles (elements j and j+16 in byte j).
pub fn quantize_q4_0(x: &[f32], qw: Option<&[f32]>, y: &mut [BlockQ4_0]) {
    legacy_weighted(x, qw, y, blocks::quantize_q4_0_ref, |xb, w, yb| {
        let mut l = [0u8; QK];
        yb.d = fp16(make_qx_quants(8, xb, &mut l, Some(w)));
        yb.qs = std::array::from_fn(|j| l[j] | (l[j + QK / 2] << 4));
    });
}

/// ggml's `quantize_q4_1` for one row: `quantize_row_q4_1_ref` without importance weights `qw`;
/// with them per block `make_qkx3_quants` (nmax 15, [`legacy_weighted`] weights, rmin −0.9,
/// rdelta 0.05, 36 steps, squared error), `d` its scale and `m` its (non-positive) min.
pub fn quantize_q4_1(x: &[f32], qw: Option<&[f32]>, y: &mut [BlockQ4_1]) {
    legacy_weighted(x, qw, y, blocks::quantize_q4_1_ref, |xb, w, yb| {
        let (l, d, m) = min_fit(15, xb, w);
        (yb.d, yb.m) = (d, m);
        yb.qs = std::array::from_fn(|j| l[j] | (l[j + QK / 2] << 4));
    });
}

/// The `make_qkx3_quants` fit of Q4_1 and Q5_1 with importance weights: levels in 0..=nmax,
/// `d` and `m = −the_min` as f16.
fn min_fit(nmax: i32, xb: &[f32], w: &[f32; QK]) -> ([u8; QK], [u8; 2], [u8; 2]) {
    let mut l = [0u8; QK];
    let (d, the_min) = make_qkx2_quants(nmax, xb, w, &mut l, -0.9, 0.05, 36, false);
    (l, fp16(d), fp16(-the_min))
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

/// ggml's `quantize_q5_0` for one row: `quantize_row_q5_0_ref` without importance weights
/// `qw`; with them per block [`make_qx_quants`] (nmax 16, [`legacy_weighted`] weights), `d`
/// its scale.
pub fn quantize_q5_0(x: &[f32], qw: Option<&[f32]>, y: &mut [BlockQ5_0]) {
    legacy_weighted(x, qw, y, quantize_row_q5_0_ref, |xb, w, yb| {
        let mut l = [0u8; QK];
        yb.d = fp16(make_qx_quants(16, xb, &mut l, Some(w)));
        pack_5bit(|j| l[j], &mut yb.qs, &mut yb.qh);
    });
}

/// ggml's `quantize_q5_1` for one row: `quantize_row_q5_1_ref` without importance weights
/// `qw`; with them per block the fit of [`quantize_q4_1`] with nmax 31.
pub fn quantize_q5_1(x: &[f32], qw: Option<&[f32]>, y: &mut [BlockQ5_1]) {
    legacy_weighted(x, qw, y, quantize_row_q5_1_ref, |xb, w, yb| {
        let (l, d, m) = min_fit(31, xb, w);
        (yb.d, yb.m) = (d, m);
        pack_5bit(|j| l[j], &mut yb.qs, &mut yb.qh);
    });
}

/// `quantize_row_q5_0_ref`: `d = max/−16` (max the first value of largest magnitude),
/// `q = min(31, (int8)(x·(1/d) + 16.5))` (truncation, so rounding half up).
fn quantize_row_q5_0_ref(x: &[f32], y: &mut [BlockQ5_0]) {
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
fn quantize_row_q5_1_ref(x: &[f32], y: &mut [BlockQ5_1]) {
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

/// The weights `quantize_row_iq4_nl_impl` gives a 32-value block of a super-block of `span`
/// values (32 for IQ4_NL, 256 for IQ4_XS) whose `Σx²` is `sum_x2`: `x²` without importance
/// weights, else `qw·sqrt(σ² + x²)` with `σ² = Σx²·(2/span)`.
fn iq4_weights(xb: &[f32], qw: Option<&[f32]>, sum_x2: f32, span: usize) -> [f32; QK] {
    let mut weight = [0f32; QK];
    match qw {
        Some(qw) => imatrix_weights(xb, qw, sum_x2 * (2.0 / span as f32), &mut weight),
        None => {
            for (w, &v) in weight.iter_mut().zip(xb) {
                *w = v * v;
            }
        }
    }
    weight
}

/// The scale `quantize_row_iq4_nl_impl` picks for one 32-value block with weights `weight`
/// ([`iq4_weights`]): first guess `d = −max/−127`, then the least-squares `Σwqx/Σwq²` of
/// the levels it gives, bettered by any of the 15 tries `id = (t − 127)/max`, t in −7..=7, whose
/// `(Σwqx)²/Σwq²` is strictly larger. 0 for a block below [`GROUP_MAX_EPS`].
fn iq4_block_scale(xb: &[f32], weight: &[f32; QK]) -> f32 {
    let (max, amax) = signed_amax(xb);
    if amax < GROUP_MAX_EPS {
        return 0.0;
    }
    let v0 = KVALUES_IQ4NL[0];
    // Σ w·q·x and Σ w·q·q over the levels nearest `id·x`.
    let sums = |id: f32| {
        let (mut sumqx, mut sumq2) = (0f32, 0f32);
        for (&v, &w) in xb.iter().zip(weight) {
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

/// ggml's `quantize_iq4_nl` for one row: per block the scale of [`iq4_block_scale`] with the
/// [`iq4_weights`] of the importance weights `qw` (or none), stored as f16; the indices are the
/// values nearest `x·(1/d)` with the unrounded f32 `d` (`1/d` taken as 0 when `d` is 0, which
/// makes every index 8).
pub fn quantize_iq4_nl(x: &[f32], qw: Option<&[f32]>, y: &mut [BlockIq4Nl]) {
    for (xb, qwb, yb) in blocks_with_weights(x, qw, y, QK) {
        let d = iq4_block_scale(xb, &iq4_weights(xb, qwb, sum_squares(xb), QK));
        yb.d = fp16(d);
        pack_iq4(xb, if d != 0.0 { 1.0 / d } else { 0.0 }, &mut yb.qs);
    }
}

/// ggml's `quantize_iq4_xs` for one row: the eight block scales of [`iq4_block_scale`] with the
/// [`iq4_weights`] of the importance weights `qw` (or none); `d = max_scale/−32` (the scale of
/// largest magnitude, first on ties, `+0` when all are 0, so an all-zero block stores `d = −0`);
/// each block's `l = clamp(nearest_int(s·(1/d)), −32, 31)` stored as `l + 32`; indices nearest
/// `x·(1/(d·l))` (0 when `d·l` is 0).
pub fn quantize_iq4_xs(x: &[f32], qw: Option<&[f32]>, y: &mut [BlockIq4Xs]) {
    for (xs, qws, yb) in blocks_with_weights(x, qw, y, QK_K) {
        let sum_x2 = sum_squares(xs);
        let mut scales = [0f32; QK_K / QK];
        for (j, (s, xb)) in scales.iter_mut().zip(xs.chunks_exact(QK)).enumerate() {
            let qwb = qws.map(|w| &w[QK * j..QK * (j + 1)]);
            *s = iq4_block_scale(xb, &iq4_weights(xb, qwb, sum_x2, QK_K));
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

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::kernels::blocks::{
        block_bytes, Block, BlockIq3S, BlockIq3Xxs, BlockQ2K, BlockQ3K, BlockQ4K, BlockQ5K,
        BlockQ6K, IqGrid, IQ3_GRID_GROUP, IQ3_SCALE_SHIFT, IQ_GROUP, IQ_SIGN_BITS, IQ_SIGN_MASK,
    };
    use crate::kernels::dequantize::get_scale_min_k4 as scale_min_k4;
    use crate::kernels::iq_grids::IQ3XXS_GRID;
    use crate::test_support::qc;

    /// Elements per row of the known-answer rows.
    pub(in crate::kernels) const ROW: usize = 512;

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

    /// A row quantizer's signature: values, importance weights (or none), blocks out.
    pub(in crate::kernels) type Quantizer<B> = fn(&[f32], Option<&[f32]>, &mut [B]);

    /// `x` through quantizer `f` without importance weights.
    pub(in crate::kernels) fn quantized<B: Block>(f: Quantizer<B>, bs: usize, x: &[f32]) -> Vec<B> {
        let mut y = vec![B::default(); x.len() / bs];
        f(x, None, &mut y);
        y
    }

    fn kat_hash<B: Block>(f: Quantizer<B>, bs: usize) -> u64 {
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
        f: Quantizer<B>,
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
