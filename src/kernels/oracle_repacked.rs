//! Scalar oracles of llama.cpp's *repacked* matmul kernels on x86 (its `CPU_REPACK` buffer).
//!
//! At load, llama.cpp moves the weights of 2-D matmuls whose row count is a multiple of
//! [`REPACK_ROWS`] into an extra buffer where each group of eight rows is interleaved, and from
//! then on multiplies them with its own gemv/gemm kernels (`ggml/src/ggml-cpu/arch/x86/repack.cpp`)
//! instead of the plain `vec_dot`. On x86 that is Q4_0 (`q4_0_8x8_q8_0`), Q4_K (`q4_K_8x8_q8_K`),
//! IQ4_NL (`iq4_nl_8x8_q8_0`), MXFP4 (`mxfp4_8x8_q8_0`, `oracle_mxfp4.rs`) and, when built
//! with AVX-512, Q2_K (`q2_K_8x8_q8_K`); see
//! [`repacked_in_llama`]. Their float order differs from `vec_dot`'s: one scalar f32 chain per
//! output, no eight-lane accumulators and no horizontal sum. The functions here reproduce each
//! output bit for bit, one weight row · one activation row at a time.
//!
//! Integer parts are exact in any order (the kernels' 16-bit partial sums cannot overflow for
//! activations in −127..=127), so what matters is where the float operations fall:
//!
//! - **Which activation rows take which kernel.** Of a matmul's `n` activation rows (tokens),
//!   the first [`gemm_tokens`]`(n)` (= n − n mod 4) are quantized four at a time and go through
//!   the gemm kernel; the last n mod 4 are quantized one by one and go through the gemv kernel.
//!   The split does not depend on the thread count (threads split the weight rows only).
//! - **gemv vs gemm.** For Q4_0 and IQ4_NL both keep one fused multiply-add per 32-block, so
//!   they agree. For the K-quants the gemv adds one fma per 256-super-block, the gemm one per
//!   64 elements (Q4_K) or per 128 elements (Q2_K): hence the `_gemm` variants.
//! - **Activation quantizer.** The gemm rows are quantized by `ggml_quantize_mat_q8_K_4x8`,
//!   whose integers are those of `quantize_row_q8_K` except for the sign convention when a
//!   block's largest magnitude occurs both positive and negative
//!   ([`super::dequantize::quantize_act_q8_k_mat`]). The dot products come out the same either
//!   way (everything is negated twice). For Q8_0 the
//!   4-row quantizer gives exactly the bits of `quantize_row_q8_0` (`blocks::quantize_act_q8_0`).
//!
//! Verified bit for bit against llama.cpp's own graph (`ggml_mul_mat` with the weight in the
//! `CPU_REPACK` buffer; 3,400 random matmuls, 2.1 million outputs: 1–4 threads, 1–40 tokens,
//! 8–320 rows, rows of 1–16 super-blocks, quantized and random-byte weights, activations with
//! ties, zero blocks and outliers); the tests below carry a few of those answers.
//!
//! Which weights: every 2-D matmul weight that passes [`repacked_in_llama`] (attention and FFN
//! projections, the output head). `token_embd.weight` is read by `get_rows` and stays plain; a
//! tied output head (no `output.weight`) makes llama.cpp load `token_embd.weight` a second time,
//! as a matmul weight, and that copy is repacked. Note that llama.cpp keeps only the output rows
//! (`inp_out_ids`) after the last layer's attention, so that layer's FFN and the output head see
//! only the tokens whose logits are wanted (one, when generating): a gemv, whatever the batch.

use super::blocks::{
    scale, BlockIq4Nl, BlockQ2K, BlockQ4K, BlockQ8K, BlockQ8_0, KVALUES_IQ4NL, K_SCALE_SIZE, QK,
    QK_K, SUB16,
};
use super::dequantize::get_scale_min_k4;
use super::GgmlType;

/// Weight rows interleaved into one repacked group; a weight is repacked only if its row count
/// is a multiple of this.
pub const REPACK_ROWS: usize = 8;
/// Activation rows the gemm kernels take at once (quantized together, interleaved).
pub const GEMM_TOKENS: usize = 4;

/// Whether llama.cpp (x86, AVX2 and AVX-512 build, extra buffer types on, the default) repacks a
/// 2-D matmul weight of type `ty` with `n_rows` output rows. Token embeddings (used by
/// `get_rows`) never are; a tied output head is loaded a second time as a matmul weight and is
/// repacked by this same rule.
pub fn repacked_in_llama(ty: GgmlType, n_rows: usize) -> bool {
    matches!(
        ty,
        GgmlType::Q4_0 | GgmlType::Q4K | GgmlType::Q2K | GgmlType::Iq4Nl | GgmlType::Mxfp4
    ) && n_rows.is_multiple_of(REPACK_ROWS)
}

/// How many of a matmul's `n_tokens` activation rows (the first ones) go through the gemm
/// kernels; the rest go one at a time through the gemv kernels.
pub const fn gemm_tokens(n_tokens: usize) -> usize {
    n_tokens - n_tokens % GEMM_TOKENS
}

// ---- Q4_K ---------------------------------------------------------------------------------

/// Sub-blocks of 32 in a Q4_K super-block.
const Q4K_SUBS: usize = QK_K / QK;
/// Elements of a Q4_K "pair" (two sub-blocks: the low and high nibbles of 32 bytes), the unit
/// of one fma in the gemm kernel.
const Q4K_PAIR: usize = 2 * QK;
/// Q8_K `bsums` entries per Q4_K sub-block.
const BSUMS_PER_SUB: usize = QK / SUB16;

/// The eight 6-bit scales and eight 6-bit mins packed in a Q4_K/Q5_K `scales` field
/// (ggml's `get_scale_min_k4`).
fn q4k_scales_mins(s: &[u8; K_SCALE_SIZE]) -> ([i32; Q4K_SUBS], [i32; Q4K_SUBS]) {
    let mut sc = [0i32; Q4K_SUBS];
    let mut m = [0i32; Q4K_SUBS];
    for j in 0..Q4K_SUBS {
        let (a, b) = get_scale_min_k4(j, s);
        sc[j] = i32::from(a);
        m[j] = i32::from(b);
    }
    (sc, m)
}

/// Per 64-element pair p of one super-block: (Σ over its two sub-blocks of scale × Σ q·y,
/// Σ over them of min × the sub-block's activation sum from `bsums`). Exact integers.
fn q4k_pairs(x: &BlockQ4K, y: &BlockQ8K) -> [(i32, i32); QK_K / Q4K_PAIR] {
    let (sc, m) = q4k_scales_mins(&x.scales);
    std::array::from_fn(|p| {
        let qs = &x.qs[p * QK..(p + 1) * QK];
        let ys = &y.qs[p * Q4K_PAIR..(p + 1) * Q4K_PAIR];
        let lo: i32 = qs
            .iter()
            .zip(&ys[..QK])
            .map(|(&q, &a)| i32::from(q & 0x0f) * i32::from(a))
            .sum();
        let hi: i32 = qs
            .iter()
            .zip(&ys[QK..])
            .map(|(&q, &a)| i32::from(q >> 4) * i32::from(a))
            .sum();
        let bsum = |sub: usize| -> i32 {
            y.bsums[sub * BSUMS_PER_SUB..(sub + 1) * BSUMS_PER_SUB]
                .iter()
                .map(|&b| i32::from(b))
                .sum()
        };
        let (s0, s1) = (2 * p, 2 * p + 1);
        (
            sc[s0] * lo + sc[s1] * hi,
            m[s0] * bsum(s0) + m[s1] * bsum(s1),
        )
    })
}

/// Two f32 chains over a row's super-blocks, `acc` for the scaled sums and `acc_min` for the
/// min terms, `result = acc − acc_min`. Each super-block's integer parts (`parts`) feed them
/// either summed into one fma per super-block (`per_part == false`, the gemv kernels) or one
/// fma per part (the gemm kernels):
/// ```text
/// acc     = fma(isum as f32, d_x·d_y,    acc)
/// acc_min = fma(imin as f32, dmin_x·d_y, acc_min)
/// ```
fn k_chains<B, const P: usize>(
    x: &[B],
    y: &[BlockQ8K],
    d_dmin: impl Fn(&B) -> (f32, f32),
    parts: impl Fn(&B, &BlockQ8K) -> [(i32, i32); P],
    per_part: bool,
) -> f32 {
    assert_eq!(x.len(), y.len(), "row length mismatch");
    let (mut acc, mut acc_min) = (0f32, 0f32);
    for (a, b) in x.iter().zip(y) {
        let (d, dmin) = d_dmin(a);
        let (ds, dms) = (d * b.d, dmin * b.d);
        let ps = parts(a, b);
        if per_part {
            for (isum, imin) in ps {
                acc = (isum as f32).mul_add(ds, acc);
                acc_min = (imin as f32).mul_add(dms, acc_min);
            }
        } else {
            let isum: i32 = ps.iter().map(|p| p.0).sum();
            let imin: i32 = ps.iter().map(|p| p.1).sum();
            acc = (isum as f32).mul_add(ds, acc);
            acc_min = (imin as f32).mul_add(dms, acc_min);
        }
    }
    acc - acc_min
}

/// The gemv and gemm oracles of a K-quant with mins (fields `d` and `dmin`): [`k_chains`] over
/// its integer `parts`, with one fma per super-block (gemv) or per part (gemm).
macro_rules! repacked_k {
    (
        $block:ty, $parts:ident,
        $(#[$gemv_doc:meta])* $gemv:ident,
        $(#[$gemm_doc:meta])* $gemm:ident
    ) => {
        $(#[$gemv_doc])*
        pub fn $gemv(x: &[$block], y: &[BlockQ8K]) -> f32 {
            k_chains(x, y, |b: &$block| (scale(b.d), scale(b.dmin)), $parts, false)
        }

        $(#[$gemm_doc])*
        pub fn $gemm(x: &[$block], y: &[BlockQ8K]) -> f32 {
            k_chains(x, y, |b: &$block| (scale(b.d), scale(b.dmin)), $parts, true)
        }
    };
}

repacked_k! {
    BlockQ4K, q4k_pairs,
    /// Q4_K·Q8_K as llama.cpp's repacked gemv (`ggml_gemv_q4_K_8x8_q8_K`) computes it for one
    /// activation row (the last n mod 4 tokens of a matmul):
    /// ```text
    /// per super-block: isum = Σ_j sc_j·Σ q·y,  imin = Σ_j m_j·(bsums[2j] + bsums[2j+1])   (exact)
    ///                  acc = fma(isum, d·d_y, acc);  acc_min = fma(imin, dmin·d_y, acc_min)
    /// result = acc − acc_min
    /// ```
    dot_q4_k_q8_k_repacked,
    /// Q4_K·Q8_K as llama.cpp's repacked gemm (`ggml_gemm_q4_K_8x8_q8_K`, AVX-512 and AVX2 paths
    /// alike) computes it for the tokens it takes four at a time: as [`dot_q4_k_q8_k_repacked`]
    /// but with one fma per 64 elements (two sub-blocks) instead of one per super-block.
    dot_q4_k_q8_k_repacked_gemm
}

// ---- Q2_K ---------------------------------------------------------------------------------

/// Elements per Q2_K half (32 bytes of `qs`, four 2-bit planes), the unit of one fma in the
/// gemm kernel.
const Q2K_HALF: usize = 128;
/// 2-bit planes per `qs` byte.
const Q2K_PLANES: usize = 4;

/// Per 128-element half h of one super-block: (Σ over its eight sub-blocks of scale × Σ q·y,
/// Σ over them of min × `bsums[sub]`). Element `128h + 32s + l` is bits `2s..2s+2` of
/// `qs[32h + l]`; its sub-block is `(128h + 32s + l) / 16`. Exact integers.
fn q2k_halves(x: &BlockQ2K, y: &BlockQ8K) -> [(i32, i32); QK_K / Q2K_HALF] {
    std::array::from_fn(|h| {
        let (mut isum, mut imin) = (0i32, 0i32);
        for s in 0..Q2K_PLANES {
            for part in 0..QK / SUB16 {
                let e0 = h * Q2K_HALF + s * QK + part * SUB16;
                let sub = e0 / SUB16;
                let dot: i32 = (0..SUB16)
                    .map(|i| {
                        let l = part * SUB16 + i;
                        let q = (x.qs[h * QK + l] >> (2 * s)) & 3;
                        i32::from(q) * i32::from(y.qs[e0 + i])
                    })
                    .sum();
                isum += i32::from(x.scales[sub] & 0x0f) * dot;
                imin += i32::from(x.scales[sub] >> 4) * i32::from(y.bsums[sub]);
            }
        }
        (isum, imin)
    })
}

repacked_k! {
    BlockQ2K, q2k_halves,
    /// Q2_K·Q8_K as llama.cpp's repacked gemv (`ggml_gemv_q2_K_8x8_q8_K`, used only in AVX-512
    /// builds) computes it: the chains of [`dot_q4_k_q8_k_repacked`] with Q2_K's sixteen 4-bit
    /// scales and mins, one fma per super-block each.
    dot_q2_k_q8_k_repacked,
    /// Q2_K·Q8_K as llama.cpp's repacked gemm (`ggml_gemm_q2_K_8x8_q8_K`): as
    /// [`dot_q2_k_q8_k_repacked`] with one fma per 128 elements.
    dot_q2_k_q8_k_repacked_gemm
}

// ---- IQ4_NL -------------------------------------------------------------------------------

/// IQ4_NL·Q8_0 as llama.cpp's repacked kernels compute it, gemv and gemm alike
/// (`gemv/gemm_q4_b32_8x8_q8_0_lut_avx` with the IQ4_NL table): one scalar chain over blocks,
/// `acc = fma(Σ kvalues[q]·y as f32, d_x·d_y, acc)`, like `scalar::dot_q4_0_q8_0_chain`.
pub fn dot_iq4_nl_q8_0_repacked(x: &[BlockIq4Nl], y: &[BlockQ8_0]) -> f32 {
    assert_eq!(x.len(), y.len(), "row length mismatch");
    let mut acc = 0f32;
    for (a, b) in x.iter().zip(y) {
        let half = QK / 2;
        let isum: i32 = (0..half)
            .map(|j| {
                let lo = i32::from(KVALUES_IQ4NL[usize::from(a.qs[j] & 0x0f)]);
                let hi = i32::from(KVALUES_IQ4NL[usize::from(a.qs[j] >> 4)]);
                lo * i32::from(b.qs[j]) + hi * i32::from(b.qs[j + half])
            })
            .sum();
        acc = (isum as f32).mul_add(scale(a.d) * scale(b.d), acc);
    }
    acc
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::blocks::{as_blocks, quantize_act_q8_0, Block, BlockQ4_0};
    use crate::kernels::dequantize::{quantize_act_q8_k, quantize_act_q8_k_mat};
    use crate::kernels::half::f16_to_f32;
    use crate::kernels::scalar::dot_q4_0_q8_0_chain;
    use crate::kernels::test_util::XorShift;

    /// xorshift64, the generator of the C harness that produced the known answers (it keeps the
    /// upper bits `>> 11`, truncated to 32).
    struct Rng(XorShift);
    impl Rng {
        fn next(&mut self) -> u32 {
            (self.0.next() >> 11) as u32
        }
        /// f16 bits of either sign with exponent 5..15 (magnitudes 2^-10 ..< 2^-0).
        fn h16(&mut self) -> [u8; 2] {
            let sign = (self.next() & 1) << 15;
            let exp = 5 + self.next() % 10;
            let bits = sign | (exp << 10) | (self.next() & 0x3ff);
            (bits as u16).to_le_bytes()
        }
        /// Random bytes for `n` blocks of `B`, then sane f16 scales at `d_off` (and the next
        /// two bytes too if `two`).
        fn blocks<B: Block>(&mut self, n: usize, d_off: usize, two: bool) -> Vec<B> {
            let size = std::mem::size_of::<B>();
            let mut bytes: Vec<u8> = (0..n * size).map(|_| self.next() as u8).collect();
            for b in bytes.chunks_exact_mut(size) {
                let (h1, h2) = (self.h16(), self.h16());
                b[d_off..d_off + 2].copy_from_slice(&h1);
                if two {
                    b[d_off + 2..d_off + 4].copy_from_slice(&h2);
                }
            }
            as_blocks::<B>(&bytes).expect("whole blocks").to_vec()
        }
        /// An activation value: an integer in −1000..=1000 times 0.013 (exact to reproduce).
        fn act(&mut self) -> f32 {
            ((self.next() % 2001) as i32 - 1000) as f32 * 0.013
        }
    }

    fn q8k(x: &[f32], four_rows: bool) -> Vec<BlockQ8K> {
        let mut y = vec![BlockQ8K::default(); x.len() / QK_K];
        if four_rows {
            quantize_act_q8_k_mat(x, &mut y);
        } else {
            quantize_act_q8_k(x, &mut y);
        }
        y
    }

    fn q8_0(x: &[f32]) -> Vec<BlockQ8_0> {
        let mut y = vec![BlockQ8_0::default(); x.len() / QK];
        quantize_act_q8_0(x, &mut y);
        y
    }

    const KAT_K: usize = 512;
    /// Byte offset of `d` (then `dmin`) in a Q2_K block.
    const Q2K_D_OFFSET: usize = 80;
    const KAT_ROWS: usize = 8;
    const KAT_TOKENS: usize = 5;
    /// Magnitude planted at element 3 (negative) and 200 (positive) of token 0: the largest of
    /// its first super-block, so the two quantizers pick opposite signs there.
    const KAT_TIE: f32 = 20.0;

    /// The harness's inputs for weight type `ti` (0: Q4_0, 1: IQ4_NL, 2: Q4_K, 3: Q2_K): eight
    /// rows of 512 weights, then five activation rows of which token 4 repeats token 0.
    fn kat_inputs<B: Block>(
        ti: u64,
        block_len: usize,
        d_off: usize,
        two: bool,
    ) -> (Vec<B>, Vec<f32>) {
        let mut rng = Rng(XorShift(0x1234_5678_90AB_CDEF + ti));
        let w = rng.blocks::<B>(KAT_ROWS * KAT_K / block_len, d_off, two);
        let mut x: Vec<f32> = (0..KAT_TOKENS * KAT_K).map(|_| rng.act()).collect();
        x[3] = -KAT_TIE;
        x[200] = KAT_TIE;
        x.copy_within(0..KAT_K, 4 * KAT_K);
        (w, x)
    }

    // Known answers: llama.cpp (this vendored version, x86 AVX-512 build) computing
    // `ggml_mul_mat` of the `kat_inputs` weights, placed in its CPU_REPACK buffer, with the five
    // tokens, one thread; output bits of token 0 (gemm kernel) and token 4 (gemv kernel) for rows
    // 0..8. The harness lived outside the repository (a C program linking ggml's static libs).
    const KAT_Q4_0: [[u32; KAT_ROWS]; 2] = [
        [
            0x428c82be, 0xc33ed2b8, 0x4312ebe6, 0x41d106bb, 0x42ef4b44, 0xc0d7d528, 0xc2f16e8c,
            0x4326b887,
        ],
        [
            0x428c82be, 0xc33ed2b8, 0x4312ebe6, 0x41d106bb, 0x42ef4b44, 0xc0d7d528, 0xc2f16e8c,
            0x4326b887,
        ],
    ];
    const KAT_IQ4_NL: [[u32; KAT_ROWS]; 2] = [
        [
            0x4523758a, 0x459159c2, 0x4527a396, 0xc4f4f6ef, 0xc5c03e7d, 0x44308edd, 0x45b315a6,
            0xc43dd1f5,
        ],
        [
            0x4523758a, 0x459159c2, 0x4527a396, 0xc4f4f6ef, 0xc5c03e7d, 0x44308edd, 0x45b315a6,
            0xc43dd1f5,
        ],
    ];
    const KAT_Q4_K: [[u32; KAT_ROWS]; 2] = [
        [
            0xc5ba666d, 0xc5b84306, 0xc39a80c9, 0x464ed8c4, 0x44ab55ba, 0xc623a11d, 0xc47421ad,
            0x460ac612,
        ],
        [
            0xc5ba666e, 0xc5b84306, 0xc39a80c8, 0x464ed8c3, 0x44ab55ba, 0xc623a11e, 0xc47421ad,
            0x460ac612,
        ],
    ];
    const KAT_Q2_K: [[u32; KAT_ROWS]; 2] = [
        [
            0x40c895b8, 0x439a897c, 0x4515e7a3, 0xc3f90562, 0xc26515e4, 0xc31cc477, 0x449a2f55,
            0x43300f52,
        ],
        [
            0x40c895b8, 0x439a897c, 0x4515e7a3, 0xc3f90562, 0xc26515e4, 0xc31cc475, 0x449a2f55,
            0x43300f52,
        ],
    ];

    /// Checks `dot(row r, token)` against the known answers: token 0 through the gemm
    /// quantizer and kernel, token 4 through the gemv ones.
    fn check_kat<B: Block>(
        w: &[B],
        want: &[[u32; KAT_ROWS]; 2],
        dot: impl Fn(&[B], usize, bool) -> f32,
    ) {
        let per_row = w.len() / KAT_ROWS;
        for (k, gemm) in [(0, true), (1, false)] {
            for (r, &bits) in want[k].iter().enumerate() {
                let got = dot(&w[r * per_row..(r + 1) * per_row], r, gemm);
                assert_eq!(got.to_bits(), bits, "row {r} gemm {gemm}: {got:e}");
            }
        }
    }

    #[test]
    fn q4_k_matches_llama_cpp_gemm_and_gemv() {
        let (w, x) = kat_inputs::<BlockQ4K>(2, QK_K, 0, true);
        let (a_gemm, a_gemv) = (q8k(&x[..KAT_K], true), q8k(&x[4 * KAT_K..], false));
        // The tie in token 0 made the two quantizers pick opposite signs.
        assert_eq!(a_gemm[0].d, -a_gemv[0].d);
        check_kat(&w, &KAT_Q4_K, |row, _, gemm| {
            if gemm {
                dot_q4_k_q8_k_repacked_gemm(row, &a_gemm)
            } else {
                dot_q4_k_q8_k_repacked(row, &a_gemv)
            }
        });
        // The two orders do differ: the gemv order on the gemm row is off in some rows.
        let differs = (0..KAT_ROWS).any(|r| {
            let per_row = KAT_K / QK_K;
            let row = &w[r * per_row..(r + 1) * per_row];
            dot_q4_k_q8_k_repacked(row, &a_gemm).to_bits() != KAT_Q4_K[0][r]
        });
        assert!(differs);
    }

    #[test]
    fn q2_k_matches_llama_cpp_gemm_and_gemv() {
        let (w, x) = kat_inputs::<BlockQ2K>(3, QK_K, Q2K_D_OFFSET, true);
        let (a_gemm, a_gemv) = (q8k(&x[..KAT_K], true), q8k(&x[4 * KAT_K..], false));
        check_kat(&w, &KAT_Q2_K, |row, _, gemm| {
            if gemm {
                dot_q2_k_q8_k_repacked_gemm(row, &a_gemm)
            } else {
                dot_q2_k_q8_k_repacked(row, &a_gemv)
            }
        });
    }

    #[test]
    fn iq4_nl_and_q4_0_match_llama_cpp_with_one_order_for_both_kernels() {
        let (w, x) = kat_inputs::<BlockIq4Nl>(1, QK, 0, false);
        let (a_gemm, a_gemv) = (q8_0(&x[..KAT_K]), q8_0(&x[4 * KAT_K..]));
        assert_eq!(a_gemm, a_gemv);
        check_kat(&w, &KAT_IQ4_NL, |row, _, _| {
            dot_iq4_nl_q8_0_repacked(row, &a_gemm)
        });

        // Q4_0: the existing block-chain oracle still matches this llama.cpp's q4_0_8x8 kernels.
        let (w, x) = kat_inputs::<BlockQ4_0>(0, QK, 0, false);
        let a = q8_0(&x[..KAT_K]);
        check_kat(&w, &KAT_Q4_0, |row, _, _| dot_q4_0_q8_0_chain(row, &a));
    }

    // ---- properties ---------------------------------------------------------------------------

    /// ggml's `get_scale_min_k4`, written out independently of `q4k_scales_mins`.
    fn scale_min_k4(j: usize, q: &[u8; 12]) -> (f32, f32) {
        if j < 4 {
            (f32::from(q[j] & 63), f32::from(q[j + 4] & 63))
        } else {
            (
                f32::from((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4)),
                f32::from((q[j + 4] >> 4) | ((q[j] >> 6) << 4)),
            )
        }
    }

    /// ggml's `dequantize_row_q4_K`.
    fn dequant_q4_k(x: &[BlockQ4K]) -> Vec<f32> {
        let mut y = Vec::new();
        for b in x {
            let (d, min) = (
                f16_to_f32(u16::from_le_bytes(b.d)),
                f16_to_f32(u16::from_le_bytes(b.dmin)),
            );
            for j in 0..4 {
                let (sc1, m1) = scale_min_k4(2 * j, &b.scales);
                let (sc2, m2) = scale_min_k4(2 * j + 1, &b.scales);
                let q = &b.qs[32 * j..32 * j + 32];
                y.extend(q.iter().map(|&v| d * sc1 * f32::from(v & 0xF) - min * m1));
                y.extend(q.iter().map(|&v| d * sc2 * f32::from(v >> 4) - min * m2));
            }
        }
        y
    }

    /// ggml's `dequantize_row_q2_K`.
    fn dequant_q2_k(x: &[BlockQ2K]) -> Vec<f32> {
        let mut y = Vec::new();
        for b in x {
            let (d, min) = (
                f16_to_f32(u16::from_le_bytes(b.d)),
                f16_to_f32(u16::from_le_bytes(b.dmin)),
            );
            let mut is = 0;
            for n in 0..2 {
                let q = &b.qs[32 * n..32 * n + 32];
                for shift in [0, 2, 4, 6] {
                    for half in [&q[..16], &q[16..]] {
                        let sc = b.scales[is];
                        is += 1;
                        let (dl, ml) = (d * f32::from(sc & 0xF), min * f32::from(sc >> 4));
                        y.extend(half.iter().map(|&v| dl * f32::from((v >> shift) & 3) - ml));
                    }
                }
            }
        }
        y
    }

    /// ggml's `dequantize_row_iq4_nl`.
    fn dequant_iq4_nl(x: &[BlockIq4Nl]) -> Vec<f32> {
        let mut y = Vec::new();
        for b in x {
            let d = f16_to_f32(u16::from_le_bytes(b.d));
            y.extend(
                b.qs.iter()
                    .map(|&v| d * f32::from(KVALUES_IQ4NL[usize::from(v & 0xF)])),
            );
            y.extend(
                b.qs.iter()
                    .map(|&v| d * f32::from(KVALUES_IQ4NL[usize::from(v >> 4)])),
            );
        }
        y
    }

    /// Asserts `got` is Σ w·a up to float rounding (relative to Σ|w·a|): a wrong scale, nibble
    /// or sub-block in the integer parts would be far off.
    fn assert_close(got: f32, w: &[f32], a: &[f32]) {
        let want: f64 = w
            .iter()
            .zip(a)
            .map(|(&p, &q)| f64::from(p) * f64::from(q))
            .sum();
        let mag: f64 = w
            .iter()
            .zip(a)
            .map(|(&p, &q)| (f64::from(p) * f64::from(q)).abs())
            .sum();
        let err = (f64::from(got) - want).abs();
        assert!(
            err <= 1e-4 * mag + 1e-6,
            "got {got}, want {want} (scale {mag})"
        );
    }

    fn random_acts(rng: &mut Rng, n: usize) -> Vec<f32> {
        (0..n).map(|_| rng.act()).collect()
    }

    #[test]
    fn k_quant_oracles_compute_the_dot_product_of_the_dequantized_rows() {
        let mut rng = Rng(XorShift(0x5eed));
        for n_super in 1..=6 {
            let x = random_acts(&mut rng, n_super * QK_K);
            for four_rows in [false, true] {
                let a = q8k(&x, four_rows);
                let ad: Vec<f32> = a
                    .iter()
                    .flat_map(|b| b.qs.iter().map(move |&q| b.d * f32::from(q)))
                    .collect();
                let w4 = rng.blocks::<BlockQ4K>(n_super, 0, true);
                let wd = dequant_q4_k(&w4);
                assert_close(dot_q4_k_q8_k_repacked(&w4, &a), &wd, &ad);
                assert_close(dot_q4_k_q8_k_repacked_gemm(&w4, &a), &wd, &ad);
                let w2 = rng.blocks::<BlockQ2K>(n_super, Q2K_D_OFFSET, true);
                let wd = dequant_q2_k(&w2);
                assert_close(dot_q2_k_q8_k_repacked(&w2, &a), &wd, &ad);
                assert_close(dot_q2_k_q8_k_repacked_gemm(&w2, &a), &wd, &ad);
            }
        }
    }

    #[test]
    fn iq4_nl_oracle_computes_the_dot_product_of_the_dequantized_rows() {
        let mut rng = Rng(XorShift(0xfeed));
        for n in [1, 2, 7, 16] {
            let x = random_acts(&mut rng, n * QK);
            let a = q8_0(&x);
            let ad: Vec<f32> = a
                .iter()
                .flat_map(|b| b.qs.iter().map(move |&q| scale(b.d) * f32::from(q)))
                .collect();
            let w = rng.blocks::<BlockIq4Nl>(n, 0, false);
            assert_close(dot_iq4_nl_q8_0_repacked(&w, &a), &dequant_iq4_nl(&w), &ad);
        }
    }

    #[test]
    fn four_row_quantizer_differs_from_the_row_quantizer_only_by_a_sign_on_ties() {
        let mut rng = Rng(XorShift(0xabc));
        let mut x = random_acts(&mut rng, 3 * QK_K);
        // Block 0: no tie. Block 1: −amax first, +amax later. Block 2: +amax first, −amax later.
        x[QK_K + 10] = -KAT_TIE;
        x[QK_K + 99] = KAT_TIE;
        x[2 * QK_K + 10] = KAT_TIE;
        x[2 * QK_K + 99] = -KAT_TIE;
        let (four, row) = (q8k(&x, true), q8k(&x, false));
        assert_eq!(four[0], row[0]);
        assert_eq!(four[2], row[2]);
        assert!(four[2].d < 0.0, "+amax present: negative scale");
        assert!(four[1].d < 0.0 && row[1].d > 0.0);
        assert_eq!(four[1].d, -row[1].d);
        assert!(four[1].qs.iter().zip(&row[1].qs).all(|(&p, &q)| p == -q));
        assert!(four[1]
            .bsums
            .iter()
            .zip(&row[1].bsums)
            .all(|(&p, &q)| p == -q));
        // ... which no dot product sees.
        let w4 = rng.blocks::<BlockQ4K>(3, 0, true);
        let w2 = rng.blocks::<BlockQ2K>(3, Q2K_D_OFFSET, true);
        let (p, q) = (&four, &row);
        assert_eq!(
            dot_q4_k_q8_k_repacked(&w4, p).to_bits(),
            dot_q4_k_q8_k_repacked(&w4, q).to_bits()
        );
        assert_eq!(
            dot_q4_k_q8_k_repacked_gemm(&w4, p).to_bits(),
            dot_q4_k_q8_k_repacked_gemm(&w4, q).to_bits()
        );
        assert_eq!(
            dot_q2_k_q8_k_repacked_gemm(&w2, p).to_bits(),
            dot_q2_k_q8_k_repacked_gemm(&w2, q).to_bits()
        );
    }

    #[test]
    fn four_row_quantizer_zeroes_an_all_zero_block_and_keeps_bsums_consistent() {
        let mut rng = Rng(XorShift(0x77));
        let mut x = random_acts(&mut rng, 2 * QK_K);
        x[QK_K..].fill(0.0);
        let a = q8k(&x, true);
        assert_eq!(a[1], BlockQ8K::default());
        for (k, &s) in a[0].bsums.iter().enumerate() {
            let want: i32 = a[0].qs[16 * k..16 * k + 16]
                .iter()
                .map(|&q| i32::from(q))
                .sum();
            assert_eq!(i32::from(s), want);
        }
        assert!(a[0].qs.iter().any(|&q| q.unsigned_abs() == 127));
    }

    #[test]
    fn gemm_takes_whole_groups_of_four_tokens_and_repacking_needs_rows_by_eight() {
        let split: Vec<usize> = (0..10).map(gemm_tokens).collect();
        assert_eq!(split, [0, 0, 0, 0, 4, 4, 4, 4, 8, 8]);
        assert!(repacked_in_llama(GgmlType::Q4K, 2048));
        assert!(repacked_in_llama(GgmlType::Q2K, 8));
        assert!(repacked_in_llama(GgmlType::Iq4Nl, 64));
        assert!(repacked_in_llama(GgmlType::Q4_0, 16));
        assert!(!repacked_in_llama(GgmlType::Q4K, 2052));
        for ty in [
            GgmlType::Q6K,
            GgmlType::Q5K,
            GgmlType::Q3K,
            GgmlType::Q8_0,
            GgmlType::Iq4Xs,
        ] {
            assert!(!repacked_in_llama(ty, 4096));
        }
    }
}
