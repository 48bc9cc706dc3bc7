//! ggml's tanh-approximated GELU as its CPU backend computes it (Gemma 3's GEGLU feed-forward),
//! bit for bit.
//!
//! ggml is built with `GGML_GELU_FP16`: for an f32 input `x` strictly between −10 and 10 it
//! rounds `x` to f16 and reads the answer from a 65536-entry table of f16 results, built once as
//! `fp16(gelu(f))` for every f16 value `f`; below −10 the result is 0, from 10 up it is `x`.
//! The table's entries are rounded to f16, so matching ggml means matching each entry exactly,
//! which needs the same f32 operations (one multiply-add fused as GCC fused it) and the same
//! `tanhf` results where they decide an f16 rounding. ggml calls the C library's `tanhf`; which
//! library locus runs on (glibc, musl, a static build) must not change the table, so the hyperbolic
//! tangent here is computed by this file alone, in f64 from basic IEEE operations, and rounded
//! once to f32. That rebuilds the table glibc's `tanhf` gives entry for entry (checked against
//! the table of a llama.cpp build, see the tests).
//!
//! ```text
//! gelu(x)     = (0.5·x) · (1 + tanh((√(2/π)·x) · fma(0.044715·x, x, 1)))
//! geglu(g, u) = 0                          if g ≤ −10
//!               g · u                      if g ≥ 10
//!               f32(table[fp16(g)]) · u    otherwise (NaN included)
//! ```

use std::sync::OnceLock;

use super::half::{f16_to_f32, f32_to_f16};

/// Entries in the table: one per f16 bit pattern.
pub const TABLE_LEN: usize = 1 << 16;

/// ggml's `GELU_COEF_A`.
const GELU_COEF_A: f32 = 0.044715;
/// ggml's `SQRT_2_OVER_PI` (√(2/π) rounded to f32).
const SQRT_2_OVER_PI: f32 = 0.797_884_6;
/// Inputs at or below −this give 0 and at or above it give `x` itself: ggml skips the table
/// there (`ggml_vec_geglu_f32`).
pub const TABLE_LIMIT: f32 = 10.0;

/// The f16 sign bit.
const F16_SIGN: u16 = 0x8000;
/// The quiet NaN ggml's f16 conversion writes for every NaN (the sign kept, the payload not).
const F16_QNAN: u16 = 0x7e00;

/// ggml's CPU f32 → f16 conversion on x86 (`ggml_compute_fp32_to_fp16`, which `ggml-cpu` uses
/// there rather than F16C): round to nearest even like [`f32_to_f16`], but a NaN becomes
/// `sign | 0x7e00` whatever its payload.
#[inline(always)]
pub fn fp32_to_fp16(x: f32) -> u16 {
    if x.is_nan() {
        ((x.to_bits() >> 16) as u16 & F16_SIGN) | F16_QNAN
    } else {
        f32_to_f16(x)
    }
}

/// ln 2 in two parts (fdlibm's split): `k·LN2_HI` is exact for every `|k| < 2^20`.
const LN2_HI: f64 = f64::from_bits(0x3fe6_2e42_fee0_0000);
const LN2_LO: f64 = f64::from_bits(0x3dea_39ef_3579_3c76);
/// IEEE binary64 exponent bias and mantissa width (for building powers of two).
const F64_EXP_BIAS: i64 = 1023;
const F64_MANTISSA_BITS: u32 = 52;
/// Taylor terms for `e^r`, `|r| ≤ ln2/2 + ε`: the first term left out is below 2^-57 of the sum.
const EXP_TERMS: u32 = 14;
/// Taylor terms for `e^z − 1`, `|z| ≤ 1`: the first term left out is below 2^-60 of the sum.
const EXPM1_TERMS: u32 = 19;
/// From here on `tanh` rounds to ±1 in f32 (already past 9.1, where `1 − tanh < 2^-25`); the
/// cut keeps the exponential's range reduction small.
const TANH_SATURATED: f64 = 20.0;

/// `e^z` for `−41 ≤ z ≤ −1`: `z = k·ln2 + r`, `e^r` by its Taylor series, times `2^k`. Relative
/// error a few units of f64's last place.
fn exp_negative(z: f64) -> f64 {
    // Truncation toward zero of a negative value: k = ⌈z/ln2 − ½⌉, so |r| ≤ ln2/2 + ε.
    let k = (z * std::f64::consts::LOG2_E - 0.5) as i64;
    let kf = k as f64;
    let r = (z - kf * LN2_HI) - kf * LN2_LO;
    let mut p = 1.0;
    for n in (1..=EXP_TERMS).rev() {
        p = 1.0 + p * r / f64::from(n);
    }
    p * f64::from_bits(((k + F64_EXP_BIAS) as u64) << F64_MANTISSA_BITS)
}

/// `e^z − 1` for `|z| ≤ 1` by its Taylor series (no cancellation near 0).
fn expm1_small(z: f64) -> f64 {
    let mut p = 1.0;
    for n in (2..=EXPM1_TERMS).rev() {
        p = 1.0 + p * z / f64::from(n);
    }
    z * p
}

/// `tanh(y)` rounded to f32, computed in f64 by this file alone (no C library): `tanh|y| =
/// −m/(2 + m)` with `m = e^(−2|y|) − 1`, then the sign of `y`. Its f64 value is within a few
/// units of f64's last place of the true one, so the f32 is the correctly rounded `tanh(y)` but
/// for arguments within ~2^-50 of a rounding tie.
pub fn tanh(y: f32) -> f32 {
    if y.is_nan() {
        return y;
    }
    let a = f64::from(y).abs();
    let t = if a >= TANH_SATURATED {
        1.0
    } else {
        let z = -2.0 * a;
        let m = if z >= -1.0 {
            expm1_small(z)
        } else {
            exp_negative(z) - 1.0
        };
        -m / (2.0 + m)
    };
    (t as f32).copysign(y)
}

/// ggml's `ggml_gelu_f32` as GCC compiled it into the table's construction (`ggml_cpu_init`,
/// `-O3 -mfma`): `1 + 0.044715·x·x` is one fused multiply-add, every other operation rounds to
/// f32; `tanh` is [`tanh`].
#[inline]
pub fn gelu_f32(x: f32) -> f32 {
    let inner = (GELU_COEF_A * x).mul_add(x, 1.0);
    let y = (SQRT_2_OVER_PI * x) * inner;
    (0.5 * x) * (1.0 + tanh(y))
}

/// The table entry for the f16 value `h`: `fp16(gelu(h))`. A NaN passes through ggml's arithmetic
/// with its sign; `−inf` meets `−inf · 0`, for which x86 gives its default NaN (sign set).
fn entry(h: u16) -> u16 {
    let x = f16_to_f32(h);
    if x.is_nan() {
        return (h & F16_SIGN) | F16_QNAN;
    }
    let g = gelu_f32(x);
    if g.is_nan() {
        return F16_SIGN | F16_QNAN;
    }
    fp32_to_fp16(g)
}

/// The table with one zero entry past its end: the SIMD tiers read it with 32-bit gathers at
/// 2-byte steps, so the last entry's read takes two bytes beyond it.
pub(crate) type PaddedTable = [u16; TABLE_LEN + 1];

/// The table, built on first use.
pub(crate) fn padded_table() -> &'static PaddedTable {
    static TABLE: OnceLock<Box<PaddedTable>> = OnceLock::new();
    TABLE.get_or_init(|| {
        let mut t: Vec<u16> = (0..=u16::MAX).map(entry).collect();
        t.push(0);
        t.into_boxed_slice()
            .try_into()
            .expect("one entry per f16 value plus the padding")
    })
}

/// ggml's `ggml_table_gelu_f16`: `fp16(gelu(f))` for every f16 bit pattern `f`, built on first
/// use.
pub fn table() -> &'static [u16; TABLE_LEN] {
    padded_table()[..TABLE_LEN]
        .try_into()
        .expect("the padded table holds the table")
}

/// `gate[i] = gelu(gate[i]) · up[i]` as ggml's `ggml_vec_geglu_f32` (`GGML_GELU_FP16`): the
/// scalar oracle of [`super::Kernels::geglu`]. `gate` and `up` have the same length.
#[inline(always)]
pub fn geglu(gate: &mut [f32], up: &[f32]) {
    geglu_with(table(), gate, up)
}

/// [`geglu`] with the table passed in (the SIMD tiers' tails).
#[inline(always)]
pub(crate) fn geglu_with(table: &[u16; TABLE_LEN], gate: &mut [f32], up: &[f32]) {
    for (g, &u) in gate.iter_mut().zip(up) {
        let x = *g;
        *g = if x <= -TABLE_LIMIT {
            0.0
        } else if x >= TABLE_LIMIT {
            x * u
        } else {
            f16_to_f32(table[usize::from(fp32_to_fp16(x))]) * u
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::test_util::assert_near_libm;

    #[test]
    fn own_tanh_is_close_to_libm() {
        // Within one f32 rounding of the f64 value.
        let xs = (-3000..3000).map(|i| i as f32 * 0.0071);
        assert_near_libm("tanh", tanh, f64::tanh, xs, 2f64.powi(-24));
        assert_eq!(tanh(0.0).to_bits(), 0f32.to_bits());
        assert_eq!(tanh(-0.0).to_bits(), (-0f32).to_bits());
        assert_eq!(tanh(f32::INFINITY), 1.0);
        assert_eq!(tanh(-30.0), -1.0);
        assert!(tanh(f32::NAN).is_nan());
        let tiny = f32::from_bits(1);
        assert_eq!(tanh(tiny), tiny, "tanh(x) = x for subnormal x");
    }

    #[test]
    fn nan_converts_to_signed_quiet_nan() {
        assert_eq!(fp32_to_fp16(f32::NAN), F16_QNAN);
        assert_eq!(
            fp32_to_fp16(-f32::from_bits(0x7f80_0001)),
            F16_SIGN | F16_QNAN
        );
        assert_eq!(fp32_to_fp16(1.0), f32_to_f16(1.0));
    }
}
