//! Scalar oracles of MXFP4·Q8_0 as llama.cpp computes it on x86 (llama.cpp 0c1e57098, its AVX2
//! and AVX-512 builds alike: ggml has no AVX-512 MXFP4 path):
//!
//! - [`dot_mxfp4_q8_0`]: `ggml_vec_dot_mxfp4_q8_0` (`ggml-cpu/arch/x86/quants.c`, `__AVX2__`),
//!   the same shape as IQ4_NL's (`oracle_vec_dot::dot_iq4_nl_q8_0`): blocks in pairs on two
//!   eight-lane accumulators (ggml's sign trick), `hsum_float_8(acc1 + acc2)`, an odd last
//!   block added as a plain product and sum (not contracted). The block's scale is
//!   `f16(y.d) × e8m0_half(x.e)`.
//! - [`dot_mxfp4_q8_0_repacked`]: `ggml_gemv_mxfp4_8x8_q8_0` and `ggml_gemm_mxfp4_8x8_q8_0`
//!   (`gemv/gemm_q4_b32_8x8_q8_0_lut_avx` with the MXFP4 table, as for Q4_0 and IQ4_NL), which
//!   llama.cpp runs for the 2-D matmul weights and the 3-D expert weights whose row count is a
//!   multiple of 8 (`ggml_repack_get_optimal_repack_type`: MXFP4 → `mxfp4_8x8_q8_0` where AVX2
//!   is present and `ne[1] % 8 == 0`; the CPU_REPACK buffer takes MUL_MAT of 2-D and
//!   MUL_MAT_ID of 3-D weights): one scalar chain over blocks, `acc = fma(Σ v·y as f32,
//!   e8m0_half(x.e) × f16(y.d), acc)`, gemv and gemm alike.
//!
//! tinyBLAS (`llamafile_sgemm`) has no MXFP4 case, so matmuls of weights llama.cpp did not
//! repack take `vec_dot` one output at a time whatever the batch.

use super::blocks::{scale, BlockMxfp4, BlockQ8_0, KVALUES_MXFP4, QK};
use super::mxfp4::e8m0_to_f32_half;
use super::oracle_vec_dot::{fma_lanes, lanes, nibble32, sign_product, LANES};
use super::scalar::hsum_float_8;

/// The table value of element `e` (0..32) of an MXFP4 block.
#[inline]
fn value(a: &BlockMxfp4, e: usize) -> i8 {
    KVALUES_MXFP4[usize::from(nibble32(&a.qs, e))]
}

/// The lanes of one MXFP4 block against a Q8_0 block (ggml's sign trick: [`sign_product`]).
#[inline]
fn mxfp4_lanes(a: &BlockMxfp4, b: &BlockQ8_0) -> [i32; LANES] {
    lanes(QK, |e| sign_product(value(a, e), b.qs[e]))
}

/// The exact Σ v·y of one block (true products).
#[inline]
fn isum(a: &BlockMxfp4, b: &BlockQ8_0) -> i32 {
    (0..QK)
        .map(|e| i32::from(b.qs[e]) * i32::from(value(a, e)))
        .sum()
}

/// Σ_blocks d·Σ v(q_x)·q_y as `ggml_vec_dot_mxfp4_q8_0` computes it on x86:
/// ```text
/// d_i = f16(y_i.d) * e8m0_half(x_i.e)
/// for each pair of blocks (2p, 2p+1):
///   for lane l: acc1[l] = fma(d_{2p},   lanes_{2p}[l],   acc1[l])
///               acc2[l] = fma(d_{2p+1}, lanes_{2p+1}[l], acc2[l])
/// sumf = hsum_float_8(acc1 + acc2)                   (lane-wise sum first)
/// an odd last block: sumf = sumf + d * (Σ v·y as f32)   (plain product, then the sum)
/// ```
pub fn dot_mxfp4_q8_0(x: &[BlockMxfp4], y: &[BlockQ8_0]) -> f32 {
    assert_eq!(x.len(), y.len(), "dot_mxfp4_q8_0 length mismatch");
    let mut acc1 = [0f32; LANES];
    let mut acc2 = [0f32; LANES];
    let pairs = x.len() / 2;
    for p in 0..pairs {
        for (acc, i) in [(&mut acc1, 2 * p), (&mut acc2, 2 * p + 1)] {
            let d = scale(y[i].d) * e8m0_to_f32_half(x[i].e[0]);
            fma_lanes(acc, d, mxfp4_lanes(&x[i], &y[i]));
        }
    }
    let mut sumf = hsum_float_8(std::array::from_fn(|l| acc1[l] + acc2[l]));
    if let (Some(a), Some(b)) = (x.get(2 * pairs), y.get(2 * pairs)) {
        let d = scale(b.d) * e8m0_to_f32_half(a.e[0]);
        sumf += d * isum(a, b) as f32;
    }
    sumf
}

/// MXFP4·Q8_0 as llama.cpp's repacked kernels compute it, gemv and gemm alike: one scalar chain
/// over blocks, `acc = fma(Σ v·y as f32, e8m0_half(x.e) × f16(y.d), acc)`, like
/// `oracle_repacked::dot_iq4_nl_q8_0_repacked`.
pub fn dot_mxfp4_q8_0_repacked(x: &[BlockMxfp4], y: &[BlockQ8_0]) -> f32 {
    assert_eq!(x.len(), y.len(), "row length mismatch");
    let mut acc = 0f32;
    for (a, b) in x.iter().zip(y) {
        let d = e8m0_to_f32_half(a.e[0]) * scale(b.d);
        acc = (isum(a, b) as f32).mul_add(d, acc);
    }
    acc
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::blocks::{quantize_act_q8_0, QK};
    use crate::kernels::mxfp4::quantize_mxfp4;
    use crate::kernels::oracle_repacked::REPACK_ROWS;
    use crate::kernels::quantize_ref::tests::fnv1a;
    use crate::kernels::test_util::SplitMix as Rng;

    /// Cases of [`vec_dot_hash`].
    const DOT_CASES: u64 = 2000;
    /// Largest block count of a [`vec_dot_hash`] case.
    const MAX_BLOCKS: u64 = 9;

    /// Case `c` as the C harness draws it (SplitMix seeded 9000 + c): `1 + c mod 9` blocks, each
    /// weight block its scale code (any byte when `c mod 5` is 0, else 100..140) then its 16
    /// nibble bytes; then each activation block its f16 scale (sign, exponent 5..15, mantissa)
    /// and its 32 quants (−128..=127 when `c mod 3` is 0, else −127..=127).
    fn dot_case(c: u64) -> (Vec<BlockMxfp4>, Vec<BlockQ8_0>) {
        let g = &mut Rng(9000 + c);
        let nb = 1 + (c % MAX_BLOCKS) as usize;
        let x = (0..nb)
            .map(|_| {
                let e = if c.is_multiple_of(5) {
                    g.next() as u8
                } else {
                    100 + (g.next() % 40) as u8
                };
                BlockMxfp4 {
                    e: [e],
                    qs: g.bytes(),
                }
            })
            .collect();
        let y = (0..nb)
            .map(|_| {
                let sign = (g.next() & 1) << 15;
                let exp = (5 + g.next() % 10) << 10;
                let d = ((sign | exp | (g.next() & 0x3ff)) as u16).to_le_bytes();
                let qs = std::array::from_fn(|_| match c % 3 {
                    0 => (g.next() % 256) as i32 - 128,
                    _ => (g.next() % 255) as i32 - 127,
                } as i8);
                BlockQ8_0 { d, qs }
            })
            .collect();
        (x, y)
    }

    fn vec_dot_hash() -> u64 {
        let mut bits = Vec::new();
        for c in 0..DOT_CASES {
            let (x, y) = dot_case(c);
            bits.extend(dot_mxfp4_q8_0(&x, &y).to_bits().to_le_bytes());
        }
        fnv1a(&bits)
    }

    /// FNV-1a 64 of the f32 bits of llama.cpp's `ggml_get_type_traits_cpu(GGML_TYPE_MXFP4)
    /// ->vec_dot` on the 2 000 [`dot_case`]s (release build of 0c1e57098 with -march=native on
    /// Zen 5: its `__AVX2__` path), from a C harness drawing them from the same generator.
    /// The same harness compared 20 000 further cases (1..9 blocks, every scale code including
    /// 0, 1 and 255, f16 scales of any finite value, activations with −128) bit for bit.
    #[test]
    fn vec_dots_hash_as_llama_cpp() {
        assert_eq!(vec_dot_hash(), 0xeeca_7914_d5f8_7c03);
    }

    /// Row counts of the [`matmul_hash`] matrices: multiples of 8, which llama.cpp repacks,
    /// and others, which it multiplies with `vec_dot`.
    const MATMUL_ROWS: [usize; 4] = [8, 16, 3, 9];

    /// The outputs of 40 matmuls as the C harness drew them (SplitMix seeded 7000 + m: the
    /// weights' bell-shaped values quantized to MXFP4, then the activations'), in the order
    /// llama.cpp computes each: repacked where [`REPACK_ROWS`] divides the row count.
    fn matmul_hash() -> u64 {
        let mut bits = Vec::new();
        for m in 0..40usize {
            let g = &mut Rng(7000 + m as u64);
            let rows = MATMUL_ROWS[m % MATMUL_ROWS.len()];
            let (nb, n) = (1 + m % 7, 1 + m % 9);
            let k = QK * nb;
            let wf: Vec<f32> = (0..k * rows).map(|_| g.bell()).collect();
            let xf: Vec<f32> = (0..k * n).map(|_| g.bell()).collect();
            let mut w = vec![BlockMxfp4::default(); rows * nb];
            quantize_mxfp4(&wf, &mut w);
            for t in 0..n {
                let mut a = vec![BlockQ8_0::default(); nb];
                quantize_act_q8_0(&xf[t * k..(t + 1) * k], &mut a);
                for r in 0..rows {
                    let wr = &w[r * nb..(r + 1) * nb];
                    let out = match rows % REPACK_ROWS {
                        0 => dot_mxfp4_q8_0_repacked(wr, &a),
                        _ => dot_mxfp4_q8_0(wr, &a),
                    };
                    bits.extend(out.to_bits().to_le_bytes());
                }
            }
        }
        fnv1a(&bits)
    }

    /// FNV-1a 64 of the outputs of llama.cpp's own graph, `ggml_mul_mat` on the CPU backend
    /// with the weight in the `CPU_REPACK` buffer where its row count is a multiple of 8 (its
    /// gemv for the last n mod 4 tokens, its gemm for the others) and in a plain CPU buffer
    /// otherwise (`vec_dot`), on the matrices [`matmul_hash`] draws. The same harness compared
    /// 600 further matmuls (88 052 outputs: 3..64 rows, 1..12 blocks, 1..13 tokens, 1 and 2
    /// threads, quantized and random-byte weights, activations with outliers and zero blocks)
    /// bit for bit.
    #[test]
    fn matmuls_hash_as_llama_cpp_computes_them() {
        assert_eq!(matmul_hash(), 0x1a60_d62c_0aed_78a7);
    }

    fn one(e: u8, nibble: u8) -> BlockMxfp4 {
        BlockMxfp4 {
            e: [e],
            qs: [nibble | nibble << 4; QK / 2],
        }
    }

    /// Weights of −12 (nibble 15) against activations of −128: the pair path's sign trick
    /// wraps to −12·128 a product, the plain tail multiplies truly (as IQ4_NL's; the harness's
    /// cases with −128 agreed bit for bit).
    #[test]
    fn the_sign_trick_wraps_only_in_the_vector_path() {
        /// The scale code of 1.0 (`e8m0_to_f32_half(128)`).
        const UNIT: u8 = 128;
        let d1 = crate::kernels::half::f32_to_f16(1.0).to_le_bytes();
        let y = BlockQ8_0 {
            d: d1,
            qs: [-128; QK],
        };
        let full = 12.0 * 128.0 * QK as f32;
        assert_eq!(dot_mxfp4_q8_0(&[one(UNIT, 15)], &[y]), full);
        assert_eq!(dot_mxfp4_q8_0(&[one(UNIT, 15); 2], &[y; 2]), -2.0 * full);
    }
}
