//! MXFP4 (ggml type 39, the OCP microscaling format): blocks of 32 E2M1 values sharing one E8M0
//! scale ([`BlockMxfp4`]). Its scale conversion, dequantizer and reference quantizer, bit for
//! bit as ggml's `ggml_e8m0_to_fp32_half`, `dequantize_row_mxfp4` and `quantize_row_mxfp4_ref`
//! (llama.cpp 0c1e57098). ggml has no importance-weighted MXFP4 quantizer: `quantize_mxfp4`
//! ignores the weights, and so does [`quantize_mxfp4`].
//!
//! Every product of a table value and a scale is exact (a value of at most four significant
//! bits times a power of two, and no scale a quantizer picks can overflow it), so no order of
//! rounding needs reproducing beyond what the functions say.

use super::blocks::{BlockMxfp4, KVALUES_MXFP4, QK};

/// Bit position of an f32's exponent field.
pub(super) const F32_EXP_SHIFT: u32 = 23;
/// The f32 bits of 2⁻¹²⁸ (a subnormal): the halved scale of E8M0 code 0 (code 1 doubles it).
pub(super) const E8M0_HALF_SUBNORMAL: u32 = 0x0020_0000;
/// E8M0 codes below this give subnormal halved scales.
pub(super) const E8M0_FIRST_NORMAL: u8 = 2;
/// The quantizer's scale code is `floor(log2(amax)) − 2 + 127`: the block's largest magnitude
/// lands on the top E2M1 octave (values 4..6 after halving: table entries 8..12).
const E8M0_TOP_OCTAVE: f32 = 2.0;
/// The E8M0 exponent bias.
const E8M0_BIAS: f32 = 127.0;

/// ggml's `ggml_e8m0_to_fp32_half`: half of the power of two 2^(x − 127), that is 2^(x − 128),
/// built from its bits (codes 0 and 1 give the subnormals 2⁻¹²⁸ and 2⁻¹²⁷; code 255 gives 2¹²⁷,
/// not a NaN).
#[inline]
pub fn e8m0_to_f32_half(x: u8) -> f32 {
    let bits = if x < E8M0_FIRST_NORMAL {
        E8M0_HALF_SUBNORMAL << x
    } else {
        u32::from(x - 1) << F32_EXP_SHIFT
    };
    f32::from_bits(bits)
}

/// C's `(uint8_t) f` as GCC compiles it on x86-64: `cvttss2si` to a 32-bit integer (an
/// out-of-range or NaN `f` gives i32::MIN), then its low byte. ggml converts a possibly
/// negative or infinite float this way when it picks an MXFP4 scale.
#[inline]
fn c_u8_of_f32(f: f32) -> u8 {
    // i32::MIN as f32 is −2³¹ exactly; the bound above is exclusive.
    let in_range = f >= i32::MIN as f32 && f < -(i32::MIN as f32);
    let i = if in_range { f as i32 } else { i32::MIN };
    i as u8
}

/// ggml's `best_index_mxfp4`: the first table index whose value times `d` is nearest `x`
/// (ties keep the earlier index; a NaN `x` gives index 0).
#[inline]
fn best_index(x: f32, d: f32) -> u8 {
    let mut best = 0u8;
    let mut best_err = (f32::from(KVALUES_MXFP4[0]) * d - x).abs();
    for (i, &v) in KVALUES_MXFP4.iter().enumerate().skip(1) {
        let err = (f32::from(v) * d - x).abs();
        if err < best_err {
            best = i as u8;
            best_err = err;
        }
    }
    best
}

/// ggml's `quantize_row_mxfp4_ref` (what `quantize_mxfp4` runs, with or without an importance
/// matrix): per block, `amax` the largest |x| (NaN never counts), the scale code
/// `e = (u8) (floor(log2f(amax)) − 2 + 127)` (0 for an all-zero block; the conversion of
/// [`c_u8_of_f32`] for tiny or infinite `amax`), then each value's [`best_index`] against
/// `d = e8m0_to_f32_half(e)`; element j and j + 16 share byte j (low, high nibble).
///
/// # Panics
/// If `x.len() != 32 × y.len()`.
pub fn quantize_mxfp4(x: &[f32], y: &mut [BlockMxfp4]) {
    assert_eq!(
        x.len(),
        QK * y.len(),
        "quantize_mxfp4: row is not whole blocks"
    );
    for (xb, yb) in x.chunks_exact(QK).zip(y.iter_mut()) {
        let mut amax = 0f32;
        for &v in xb {
            if amax < v.abs() {
                amax = v.abs();
            }
        }
        let e = if amax > 0.0 {
            c_u8_of_f32(amax.log2().floor() - E8M0_TOP_OCTAVE + E8M0_BIAS)
        } else {
            0
        };
        let d = e8m0_to_f32_half(e);
        yb.e = [e];
        let (lo, hi) = xb.split_at(QK / 2);
        for ((q, &l), &h) in yb.qs.iter_mut().zip(lo).zip(hi) {
            *q = best_index(l, d) | (best_index(h, d) << 4);
        }
    }
}

/// ggml's `dequantize_row_mxfp4`: `y = KVALUES_MXFP4[q] × e8m0_to_f32_half(e)`; low nibbles are
/// elements 0..16.
///
/// # Panics
/// If `y.len() != 32 × x.len()`.
pub fn dequantize_mxfp4(x: &[BlockMxfp4], y: &mut [f32]) {
    assert_eq!(y.len(), QK * x.len(), "dequantize_mxfp4: output length");
    for (b, yb) in x.iter().zip(y.chunks_exact_mut(QK)) {
        let d = e8m0_to_f32_half(b.e[0]);
        let (lo, hi) = yb.split_at_mut(QK / 2);
        for ((l, u), &q) in lo.iter_mut().zip(hi.iter_mut()).zip(&b.qs) {
            *l = f32::from(KVALUES_MXFP4[usize::from(q & 0x0f)]) * d;
            *u = f32::from(KVALUES_MXFP4[usize::from(q >> 4)]) * d;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::blocks::block_bytes;
    use crate::kernels::quantize_ref::tests::{fnv1a, kat_row, ROW};
    use crate::kernels::test_util::SplitMix as Rng;

    fn quantized(x: &[f32]) -> Vec<BlockMxfp4> {
        let mut y = vec![BlockMxfp4::default(); x.len() / QK];
        quantize_mxfp4(x, &mut y);
        y
    }

    #[test]
    fn e8m0_halves_are_powers_of_two() {
        assert_eq!(e8m0_to_f32_half(0), 2f32.powi(-128));
        assert_eq!(e8m0_to_f32_half(1), 2f32.powi(-127));
        for x in 2..=255u8 {
            assert_eq!(e8m0_to_f32_half(x), 2f32.powi(i32::from(x) - 128), "{x}");
        }
    }

    #[test]
    fn the_c_conversion_wraps_and_gives_zero_for_infinity() {
        assert_eq!(c_u8_of_f32(252.0), 252);
        assert_eq!(c_u8_of_f32(-1.0), 255);
        assert_eq!(c_u8_of_f32(-24.0), 232);
        assert_eq!(c_u8_of_f32(f32::INFINITY), 0);
        assert_eq!(c_u8_of_f32(f32::NAN), 0);
    }

    /// A block whose largest magnitude is 12·2^(k−1) takes scale code k + 127 (d = 2^(k−1)), and
    /// every table value times the scale comes back exactly.
    #[test]
    fn table_values_round_trip() {
        for k in [-100, -3, 0, 5, 90] {
            let d = 2f32.powi(k - 1);
            let x: Vec<f32> = (0..QK)
                .map(|i| f32::from(KVALUES_MXFP4[i % 16]) * d)
                .collect();
            let b = quantized(&x);
            assert_eq!(i32::from(b[0].e[0]), k + 127, "k={k}");
            let mut y = vec![0f32; QK];
            dequantize_mxfp4(&b, &mut y);
            assert_eq!(x, y, "k={k}");
        }
    }

    /// An all-zero block is scale code 0 and all-zero nibbles (index 0, the first of the two
    /// zeros).
    #[test]
    fn zero_blocks_are_all_zero_bytes() {
        assert_eq!(quantized(&[0.0; QK])[0], BlockMxfp4::default());
    }

    /// Every value dequantizes within 4·d of itself: half the widest gap of the table (8 → 12)
    /// is 2·d, and values above 12·d (up to 16·d: the scale's octave holds `amax`) clip to it.
    #[test]
    fn quantization_error_is_bounded() {
        let mut g = Rng(7);
        for r in [0, 1, 2, 5, 6, 8] {
            let x = kat_row(r, &mut g);
            let b = quantized(&x);
            let mut y = vec![0f32; x.len()];
            dequantize_mxfp4(&b, &mut y);
            for (blk, (xb, yb)) in b.iter().zip(x.chunks(QK).zip(y.chunks(QK))) {
                let bound = 4.0 * e8m0_to_f32_half(blk.e[0]);
                for (a, q) in xb.iter().zip(yb) {
                    assert!((a - q).abs() <= bound, "row {r}: {a} vs {q}");
                }
            }
        }
    }

    /// FNV-1a 64 of llama.cpp's `ggml_quantize_chunk(GGML_TYPE_MXFP4, row, …, 0, 1, 512, NULL)`
    /// on the eight `kat_row`s (one generator, seeded 42, across them) and of its
    /// `dequantize_row_mxfp4` of those bytes (the f32 bits), from a C harness linking
    /// libggml-base.a of llama.cpp 0c1e57098 (x86-64). The same harness compared 6 000 rows of
    /// 32..2 048 values (196 358 blocks: four seeds, fifteen kinds: bell-shaped, 1e-30, 1e-39 and
    /// 1e-44 subnormal scales whose code wraps, 1e38, outliers, zero blocks, exact table values
    /// and their midpoints over 2^±30, ±inf and NaN, random float bits, values just under powers
    /// of two, quarter steps, scales over 2^±150) byte for byte, and the dequantized values
    /// bit for bit.
    #[test]
    fn rows_hash_as_llama_cpp_quantizes_and_dequantizes_them() {
        let mut g = Rng(42);
        let (mut bytes, mut values) = (Vec::new(), Vec::new());
        for r in 0..8 {
            let b = quantized(&kat_row(r, &mut g));
            bytes.extend_from_slice(block_bytes(&b));
            let mut y = vec![0f32; ROW];
            dequantize_mxfp4(&b, &mut y);
            values.extend(y.iter().flat_map(|v| v.to_bits().to_le_bytes()));
        }
        assert_eq!(fnv1a(&bytes), 0x81b3_2ae7_6d10_450b, "quantized");
        assert_eq!(fnv1a(&values), 0xfbfe_ad04_78e8_d3c3, "dequantized");
    }
}
