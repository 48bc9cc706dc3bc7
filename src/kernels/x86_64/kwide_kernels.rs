//! The kernels of Q5_0, Q5_1, IQ4_NL and MXFP4, written once as a macro ([`wide_kernels`]) and
//! expanded by each tier over its own primitives (`avx2_kquant.rs`: AVX2; `avx512_kquant.rs`:
//! AVX-512 VNNI), beside that tier's `k_quant_kernels!`, whose `lanes_rows` runs the `vec_dot`
//! kernels without mins of both. The kernels' shape (rows × tokens) is in `passes.rs`.

/// The kernels of Q5_0, Q5_1, IQ4_NL and MXFP4 (Q8_0/Q8_1 activations; `oracle_vec_dot.rs`,
/// `oracle_repacked.rs`, `oracle_mxfp4.rs`), their
/// safe wrappers, tile kernels and `fill`, compiled with the target features `$feat` over the
/// primitives `dot_us8` (four-sums of u8 × i8, no pair of which reaches the i16 limit here) and
/// `bytes_from_bits_32` of the module that expands it (its parent, `super`), and the drivers of
/// its `k_quant_kernels!` (module `super::kernels`).
macro_rules! wide_kernels {
    ($feat:literal) => {
        use std::arch::x86_64::*;

        use super::kernels::lanes_rows;
        use super::{bytes_from_bits_32, dot_us8};
        use crate::kernels::blocks::{BlockQ8_0, BlockQ8_1};
        use crate::kernels::entries::{row_dot, TileDot};
        use crate::kernels::blocks::{BlockIq4Nl, BlockMxfp4, BlockQ5_0, BlockQ5_1};
        use crate::kernels::mxfp4::e8m0_to_f32_half;
        use crate::kernels::x86_64::vec256::{bytes_from_nibbles_32, hsum_float_8, scale8};
        use crate::kernels::x86_64::passes::{
            array_of, e8m0_rows, f16, f16_rows, hsum_i32, hsum_i32_rows, hsums, iq4_values,
            iq4nl_table, load32, mxfp4_table, pass, rows_kernel, store_rows, tile_fn, PASS_ROWS, PASS_TOKENS,
        };
        use crate::kernels::{Entry, GgmlType};

        /// ggml's sign trick, `maddubs(sign(x, x), sign(y, x))` four-sums: `x·y`, except that
        /// `y = −128` with `x < 0` gives `|x|·(−128)` (`oracle_vec_dot::sign_product`).
        #[target_feature(enable = $feat)]
        #[inline]
        fn dot_sign_trick(x: __m256i, y: __m256i) -> __m256i {
            dot_us8(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x))
        }

        /// True i8 × i8 four-sums for weights `x` that never hold −128: the activation's
        /// magnitude is the unsigned operand (|−128| = 128 as u8) and its sign moves to the
        /// weight.
        #[target_feature(enable = $feat)]
        #[inline]
        fn dot_true(x: __m256i, y: __m256i) -> __m256i {
            dot_us8(_mm256_abs_epi8(y), _mm256_sign_epi8(x, y))
        }

        /// Q5_0 weights as signed bytes `q − 16`.
        #[target_feature(enable = $feat)]
        #[inline]
        pub(super) fn q5_0_values(a: &BlockQ5_0) -> __m256i {
            // A clear fifth bit leaves 0xF0 over the nibble: q − 16 in two's complement.
            let high = _mm256_set1_epi8(0xF0u8 as i8);
            let bxhi = _mm256_andnot_si256(bytes_from_bits_32(&a.qh), high);
            _mm256_or_si256(bytes_from_nibbles_32(&a.qs), bxhi)
        }

        /// A Q8_0 block's scale and quants, once per block for every row of a pass.
        #[target_feature(enable = $feat)]
        #[inline]
        fn q8_0_prep(b: &BlockQ8_0) -> (f32, __m256i) {
            (f16(b.d), load32(&b.qs))
        }

        // Q5_0·Q8_0 (`oracle_vec_dot::dot_q5_0_q8_0`) and IQ4_NL·Q8_0 as tinyBLAS computes it
        // (`oracle_vec_dot::dot_iq4_nl_q8_0_tinyblas`): per block `acc = fma(d_x·d_y, lanes, acc)` (sign
        // trick), then `hsum_float_8`.
        rows_kernel!($feat, q5_0_rows, dot_q5_0_q8_0, BlockQ5_0, BlockQ8_0, |w, y, out| {
            let lanes = |x: &__m256i, _: &BlockQ8_0, qy: &__m256i| dot_sign_trick(*x, *qy);
            lanes_rows(w, y, out, |a| a.d, |a| q5_0_values(a), |b| q8_0_prep(b), lanes)
        });
        rows_kernel!($feat, iq4_nl_tinyblas_rows, dot_iq4_nl_q8_0_tinyblas, BlockIq4Nl,
            BlockQ8_0, |w, y, out| {
                let table = iq4nl_table();
                let lanes = |x: &__m256i, _: &BlockQ8_0, qy: &__m256i| dot_sign_trick(*x, *qy);
                let values = |a: &BlockIq4Nl| iq4_values(table, &a.qs);
                lanes_rows(w, y, out, |a| a.d, values, |b| q8_0_prep(b), lanes)
            });

        // Q5_1·Q8_1 (`oracle_vec_dot::dot_q5_1_q8_1`): per block `summs = fma(m_x, s_y, summs)` and
        // `acc = fma(d_x·d_y, lanes, acc)`; `hsum_float_8(acc) + summs`.
        rows_kernel!($feat, q5_1_rows, dot_q5_1_q8_1, BlockQ5_1, BlockQ8_1, |w, y, out| {
            let (n, w, y, pf) = pass(w, y);
            let mut acc = [[_mm256_setzero_ps(); R]; T];
            let mut summs = [[0f32; R]; T];
            let fifth = _mm256_set1_epi8(0x10);
            for i in 0..n {
                pf.at(i);
                let x: [__m256i; R] = array_of!(R, |r| {
                    let a = &w[r][i];
                    let bxhi = _mm256_and_si256(bytes_from_bits_32(&a.qh), fifth);
                    _mm256_or_si256(bytes_from_nibbles_32(&a.qs), bxhi)
                });
                for t in 0..T {
                    let b = &y[t][i];
                    let (qy, dy, sy) = (load32(&b.qs), scale8(b.d), f16(b.s));
                    for r in 0..R {
                        let a = &w[r][i];
                        summs[t][r] = f16(a.m).mul_add(sy, summs[t][r]);
                        let (d, q) = (_mm256_mul_ps(scale8(a.d), dy), dot_us8(x[r], qy));
                        acc[t][r] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(q), acc[t][r]);
                    }
                }
            }
            hsums(&acc, out);
            for t in 0..T {
                for r in 0..R {
                    out[t][r] += summs[t][r];
                }
            }
        });

        // The 4-bit lookup types, IQ4_NL and MXFP4: 32 nibble codes into a sixteen-entry table
        // and one scale per block; their kernels differ only in the table and the scale.

        /// IQ4_NL·Q8_0 (`oracle_vec_dot::dot_iq4_nl_q8_0`) and MXFP4·Q8_0
        /// (`oracle_mxfp4::dot_mxfp4_q8_0`): blocks in pairs on two accumulators (sign trick),
        /// `hsum_float_8(acc1 + acc2)`, an odd last block added as `sumf + (Σ true products)·d`,
        /// where a block's `d` is `f16(y.d) × scale(x)`.
        #[target_feature(enable = $feat)]
        #[inline]
        fn lookup_rows<B, const R: usize, const T: usize>(
            w: &[&[B]; R],
            y: &[&[BlockQ8_0]; T],
            out: &mut [[f32; R]; T],
            table: __m128i,
            codes: impl Fn(&B) -> [u8; 16],
            scale: impl Fn(&B) -> f32,
        ) {
            let (n, w, y, pf) = pass(w, y);
            let mut acc = [[[_mm256_setzero_ps(); 2]; R]; T];
            let pairs = n / 2;
            for i in 0..2 * pairs {
                pf.at(i);
                let x: [__m256i; R] = array_of!(R, |r| iq4_values(table, &codes(&w[r][i])));
                let dx: [f32; R] = array_of!(R, |r| scale(&w[r][i]));
                for t in 0..T {
                    let b = &y[t][i];
                    let (qy, dy) = (load32(&b.qs), f16(b.d));
                    for r in 0..R {
                        let d = _mm256_set1_ps(dy * dx[r]);
                        let q = _mm256_cvtepi32_ps(dot_sign_trick(x[r], qy));
                        acc[t][r][i % 2] = _mm256_fmadd_ps(d, q, acc[t][r][i % 2]);
                    }
                }
            }
            for t in 0..T {
                for r in 0..R {
                    let mut sumf = hsum_float_8(_mm256_add_ps(acc[t][r][0], acc[t][r][1]));
                    if let (Some(a), Some(b)) = (w[r].get(2 * pairs), y[t].get(2 * pairs)) {
                        let d = f16(b.d) * scale(a);
                        let sumi = hsum_i32(dot_true(iq4_values(table, &codes(a)), load32(&b.qs)));
                        sumf += sumi as f32 * d;
                    }
                    out[t][r] = sumf;
                }
            }
        }

        /// IQ4_NL·Q8_0 and MXFP4·Q8_0 as the repacked kernels compute them
        /// (`oracle_repacked::dot_iq4_nl_q8_0_repacked`, `oracle_mxfp4::dot_mxfp4_q8_0_repacked`):
        /// per block the exact Σ v·y (true products), `acc = fma(isum, scale(x)·f16(y.d), acc)`; a
        /// pass's rows' chains in the lanes of one vector per token (`scales(w, i)`: block `i`'s
        /// scale of row r in lane r).
        #[target_feature(enable = $feat)]
        #[inline]
        fn lookup_repacked_rows<B, const R: usize, const T: usize>(
            w: &[&[B]; R],
            y: &[&[BlockQ8_0]; T],
            out: &mut [[f32; R]; T],
            table: __m128i,
            codes: impl Fn(&B) -> [u8; 16],
            scales: impl Fn(&[&[B]; R], usize) -> __m256,
        ) {
            let (n, w, y, pf) = pass(w, y);
            let mut acc = [_mm256_setzero_ps(); T];
            for i in 0..n {
                pf.at(i);
                let x: [__m256i; R] = array_of!(R, |r| iq4_values(table, &codes(&w[r][i])));
                let dx = scales(&w, i);
                for t in 0..T {
                    let b = &y[t][i];
                    let qy = load32(&b.qs);
                    let sums: [__m256i; R] = array_of!(R, |r| dot_true(x[r], qy));
                    let d = _mm256_mul_ps(dx, scale8(b.d));
                    let s = _mm256_cvtepi32_ps(hsum_i32_rows(&sums));
                    acc[t] = _mm256_fmadd_ps(s, d, acc[t]);
                }
            }
            for t in 0..T {
                store_rows(acc[t], &mut out[t]);
            }
        }

        rows_kernel!($feat, iq4_nl_rows, dot_iq4_nl_q8_0, BlockIq4Nl, BlockQ8_0, |w, y, out| {
            lookup_rows(w, y, out, iq4nl_table(), |a| a.qs, |a| f16(a.d))
        });
        rows_kernel!($feat, iq4_nl_repacked_rows, dot_iq4_nl_q8_0_repacked, BlockIq4Nl,
            BlockQ8_0, |w, y, out| {
                let scales = |w: &[&[BlockIq4Nl]; R], i: usize| {
                    f16_rows::<R>(std::array::from_fn(|r| w[r][i].d))
                };
                lookup_repacked_rows(w, y, out, iq4nl_table(), |a| a.qs, scales)
            });
        rows_kernel!($feat, mxfp4_rows, dot_mxfp4_q8_0, BlockMxfp4, BlockQ8_0, |w, y, out| {
            lookup_rows(w, y, out, mxfp4_table(), |a| a.qs, |a| e8m0_to_f32_half(a.e[0]))
        });
        rows_kernel!($feat, mxfp4_repacked_rows, dot_mxfp4_q8_0_repacked, BlockMxfp4,
            BlockQ8_0, |w, y, out| {
                let scales = |w: &[&[BlockMxfp4]; R], i: usize| {
                    e8m0_rows::<R>(std::array::from_fn(|r| w[r][i].e[0]))
                };
                lookup_repacked_rows(w, y, out, mxfp4_table(), |a| a.qs, scales)
            });

        tile_fn!(tile_q5_0, BlockQ5_0, q8_0, PASS_ROWS, PASS_TOKENS, { Dot => q5_0_rows });
        tile_fn!(tile_q5_1, BlockQ5_1, q8_1, PASS_ROWS, PASS_TOKENS, { Dot => q5_1_rows });
        tile_fn!(tile_iq4_nl, BlockIq4Nl, q8_0, PASS_ROWS, PASS_TOKENS, {
            Dot => iq4_nl_rows,
            Repacked => iq4_nl_repacked_rows,
            Batch => iq4_nl_tinyblas_rows,
        });
        tile_fn!(tile_mxfp4, BlockMxfp4, q8_0, PASS_ROWS, PASS_TOKENS, {
            Dot => mxfp4_rows,
            Repacked => mxfp4_repacked_rows,
        });

        /// Puts these kernels in `e` (a copy of the oracle's row) for Q5_0, Q5_1, IQ4_NL and MXFP4 and
        /// returns the type's tile kernel; `None` for other types.
        pub(in crate::kernels) fn fill(e: &mut Entry) -> Option<TileDot> {
            Some(match e.ty {
                GgmlType::Q5_0 => {
                    e.dot = row_dot!(dot_q5_0_q8_0, BlockQ5_0, q8_0);
                    tile_q5_0
                }
                GgmlType::Q5_1 => {
                    e.dot = row_dot!(dot_q5_1_q8_1, BlockQ5_1, q8_1);
                    tile_q5_1
                }
                GgmlType::Iq4Nl => {
                    e.dot = row_dot!(dot_iq4_nl_q8_0, BlockIq4Nl, q8_0);
                    e.dot_repacked = Some(row_dot!(dot_iq4_nl_q8_0_repacked, BlockIq4Nl, q8_0));
                    e.dot_batch = Some(row_dot!(dot_iq4_nl_q8_0_tinyblas, BlockIq4Nl, q8_0));
                    tile_iq4_nl
                }
                GgmlType::Mxfp4 => {
                    e.dot = row_dot!(dot_mxfp4_q8_0, BlockMxfp4, q8_0);
                    e.dot_repacked = Some(row_dot!(dot_mxfp4_q8_0_repacked, BlockMxfp4, q8_0));
                    tile_mxfp4
                }
                _ => return None,
            })
        }
    };
}
pub(super) use wide_kernels;
