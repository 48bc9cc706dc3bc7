//! The kernels of IQ1_S and IQ1_M (Q8_K activations; `oracle_iq1.rs`, `oracle_tiled.rs`),
//! written once as a macro ([`iq1_kernels`]) and expanded by each tier over its own primitive
//! `chunk_dot` (`avx2_kquant.rs`: `maddubs` + `madd`; `avx512_kquant.rs`: `maddubs` +
//! `vpdpwssd`: the same integers), beside that tier's `k_quant_kernels!`, whose tiled driver
//! (`tiled_rows`) runs their tiled matmul. Row blocks are unpacked once per row and pass
//! (`iq1_rows.rs`); the kernels' shape (rows × tokens) is in `passes.rs`.

/// The kernels of IQ1_S and IQ1_M, their safe wrappers, tile kernels and `fill`, compiled with
/// the target features `$feat` over the primitive `chunk_dot` of the module that expands it
/// (its parent, `super`) and the tiled driver of its `k_quant_kernels!` (module
/// `super::kernels`).
macro_rules! iq1_kernels {
    ($feat:literal) => {
        use std::arch::x86_64::*;

        use super::chunk_dot;
        use super::kernels::{iq1_panel, tiled_rows, Half};
        use crate::kernels::blocks::{BlockIq1M, BlockIq1S, BlockQ8K, Iq1Grid};
        use crate::kernels::blocks::{IQ1M_DELTA, IQ1S_DELTA};
        use crate::kernels::entries::{row_dot, TileDot};
        use crate::kernels::oracle_tiled::IQ1_CODE_SCALE;
        use crate::kernels::x86_64::iq1_rows::{iq1_row, iq1_run, iq1_signed_scales, Iq1Row};
        use crate::kernels::x86_64::kquant_rows::{bsums, RUN, RUNS};
        use crate::kernels::x86_64::passes::{
            f16, hsum_i32, load32, panel_kernel, pass, rows_kernel, tile_fn, PASS_ROWS,
            PASS_TOKENS,
        };
        use crate::kernels::x86_64::vec256::hsum_float_8;
        use crate::kernels::{Entry, GgmlType};

        /// A super-block's `Σ sc·x·q` lanes by ggml's sign trick, `maddubs(sign(x, x),
        /// sign(q, x))` of each run's grid values `x` (−1, 0, 1), and with `DELTA` IQ1_M's
        /// `Σ sc·±q` lanes as ggml forms them, `maddubs(1, sign(q, delta))`: straight from the
        /// block, a run at a time (each run is used once, so nothing is stored).
        #[target_feature(enable = $feat)]
        #[inline]
        fn block_lanes<B: Iq1Grid, const DELTA: bool>(a: &B, b: &BlockQ8K) -> (__m256i, __m256i) {
            let (mut acc, mut acc_d) = (_mm256_setzero_si256(), _mm256_setzero_si256());
            let ones = _mm256_set1_epi8(1);
            for s in 0..RUNS {
                let (x, delta, sc) = iq1_run(a, s);
                let q8 = load32(&b.qs[RUN * s..]);
                acc = chunk_dot(acc, _mm256_abs_epi8(x), _mm256_sign_epi8(q8, x), sc);
                if DELTA {
                    acc_d = chunk_dot(acc_d, ones, _mm256_sign_epi8(q8, delta), sc);
                }
            }
            (acc, acc_d)
        }

        /// The tiled matmul's `Σ sc·c·q` lanes, `c = 8·x ± 1`, by true products (|q| against
        /// `c` signed by q: |c| ≤ 9, so no pair nears the i16 limit).
        #[target_feature(enable = $feat)]
        #[inline]
        fn code_lanes(k: &Iq1Row, b: &BlockQ8K) -> __m256i {
            let (mut acc, eight) = (_mm256_setzero_si256(), _mm256_set1_epi8(IQ1_CODE_SCALE as i8));
            for s in 0..RUNS {
                let code = _mm256_add_epi8(_mm256_sign_epi8(eight, k.x[s]), k.delta[s]);
                let q8 = load32(&b.qs[RUN * s..]);
                acc = chunk_dot(acc, _mm256_abs_epi8(q8), _mm256_sign_epi8(code, q8), k.sc[s]);
            }
            acc
        }

        /// IQ1_S·Q8_K (`oracle_iq1::dot_iq1_s_q8_k`): per super-block `d = d_y·d_x`,
        /// `acc = fma(d, grid lanes, acc)` and `acc1 = fma(d, Σ_s ±sc_s·bsum_s, acc1)`;
        /// `hsum_float_8(acc) + 0.125·acc1`.
        #[target_feature(enable = $feat)]
        #[inline]
        fn iq1_s_dot<const R: usize, const T: usize>(
            w: &[&[BlockIq1S]; R],
            y: &[&[BlockQ8K]; T],
            out: &mut [[f32; R]; T],
        ) {
            let (n, w, y, pf) = pass(w, y);
            let mut acc = [[_mm256_setzero_ps(); R]; T];
            let mut acc1 = [[0f32; R]; T];
            for i in 0..n {
                pf.at(i);
                for r in 0..R {
                    let a = &w[r][i];
                    let (signed_sc, xd) = (iq1_signed_scales(a), f16(a.d));
                    for t in 0..T {
                        let b = &y[t][i];
                        let d = b.d * xd;
                        let v = _mm256_cvtepi32_ps(block_lanes::<_, false>(a, b).0);
                        acc[t][r] = _mm256_fmadd_ps(_mm256_set1_ps(d), v, acc[t][r]);
                        let sumi1 = hsum_i32(_mm256_madd_epi16(bsums(b), signed_sc));
                        acc1[t][r] = d.mul_add(sumi1 as f32, acc1[t][r]);
                    }
                }
            }
            for t in 0..T {
                for r in 0..R {
                    out[t][r] = hsum_float_8(acc[t][r]) + IQ1S_DELTA * acc1[t][r];
                }
            }
        }

        /// IQ1_M·Q8_K (`oracle_iq1::dot_iq1_m_q8_k`): per super-block `d = d_y·d_x`,
        /// `acc1 = fma(d, grid lanes, acc1)`, `acc2 = fma(d, delta lanes, acc2)`;
        /// `fma(hsum_float_8(acc2), 0.125, hsum_float_8(acc1))`.
        #[target_feature(enable = $feat)]
        #[inline]
        fn iq1_m_dot<const R: usize, const T: usize>(
            w: &[&[BlockIq1M]; R],
            y: &[&[BlockQ8K]; T],
            out: &mut [[f32; R]; T],
        ) {
            let (n, w, y, pf) = pass(w, y);
            let mut acc1 = [[_mm256_setzero_ps(); R]; T];
            let mut acc2 = [[_mm256_setzero_ps(); R]; T];
            for i in 0..n {
                pf.at(i);
                for r in 0..R {
                    let a = &w[r][i];
                    let xd = f16(a.d());
                    for t in 0..T {
                        let b = &y[t][i];
                        let d = _mm256_set1_ps(b.d * xd);
                        let (l1, l2) = block_lanes::<_, true>(a, b);
                        let (v1, v2) = (_mm256_cvtepi32_ps(l1), _mm256_cvtepi32_ps(l2));
                        acc1[t][r] = _mm256_fmadd_ps(d, v1, acc1[t][r]);
                        acc2[t][r] = _mm256_fmadd_ps(d, v2, acc2[t][r]);
                    }
                }
            }
            for t in 0..T {
                for r in 0..R {
                    let (s1, s2) = (hsum_float_8(acc1[t][r]), hsum_float_8(acc2[t][r]));
                    out[t][r] = s2.mul_add(IQ1M_DELTA, s1);
                }
            }
        }

        /// The IQ1 types as the tiled matmul (`oracle_tiled::dot_iq1_q8_k_tiled`): true
        /// products of the codes `8·x ± 1`, `d` an eighth first.
        #[target_feature(enable = $feat)]
        #[inline]
        fn iq1_tiled<B: Iq1Grid, const R: usize, const T: usize>(
            w: &[&[B]; R],
            y: &[&[BlockQ8K]; T],
            out: &mut [[f32; R]; T],
        ) {
            let d: (Half<B>, _) = (|a| a.d(), Some(1.0 / IQ1_CODE_SCALE as f32));
            tiled_rows(w, y, out, d, |a| iq1_row(a), |k, b| code_lanes(k, b))
        }

        rows_kernel!($feat, iq1_s_rows, dot_iq1_s_q8_k, BlockIq1S, BlockQ8K, |w, y, out| {
            iq1_s_dot(w, y, out)
        });
        rows_kernel!($feat, iq1_s_tiled_rows, dot_iq1_s_q8_k_tiled, BlockIq1S, BlockQ8K,
            |w, y, out| iq1_tiled(w, y, out));
        rows_kernel!($feat, iq1_m_rows, dot_iq1_m_q8_k, BlockIq1M, BlockQ8K, |w, y, out| {
            iq1_m_dot(w, y, out)
        });
        rows_kernel!($feat, iq1_m_tiled_rows, dot_iq1_m_q8_k_tiled, BlockIq1M, BlockQ8K,
            |w, y, out| iq1_tiled(w, y, out));

        // The tiled order's panels (`k_quant_kernels`' `iq1_panel`): each row's super-block
        // unpacked once for all the panel's tokens.
        panel_kernel!($feat, iq1_s_panel_tiled, BlockIq1S, |w, y, out| iq1_panel(w, y, out));
        panel_kernel!($feat, iq1_m_panel_tiled, BlockIq1M, |w, y, out| iq1_panel(w, y, out));
        tile_fn!(tile_iq1_s, BlockIq1S, q8_k, PASS_ROWS, PASS_TOKENS, {
            Dot => iq1_s_rows,
            Batch => iq1_s_tiled_rows,
        }, panels: { Batch => iq1_s_panel_tiled });
        tile_fn!(tile_iq1_m, BlockIq1M, q8_k, PASS_ROWS, PASS_TOKENS, {
            Dot => iq1_m_rows,
            Batch => iq1_m_tiled_rows,
        }, panels: { Batch => iq1_m_panel_tiled });

        /// Puts these kernels in `e` (a copy of the oracle's row) for IQ1_S and IQ1_M and
        /// returns the type's tile kernel; `None` for other types.
        pub(in crate::kernels) fn fill(e: &mut Entry) -> Option<TileDot> {
            Some(match e.ty {
                GgmlType::Iq1S => {
                    e.dot = row_dot!(dot_iq1_s_q8_k, BlockIq1S, q8_k);
                    e.dot_batch = Some(row_dot!(dot_iq1_s_q8_k_tiled, BlockIq1S, q8_k));
                    tile_iq1_s
                }
                GgmlType::Iq1M => {
                    e.dot = row_dot!(dot_iq1_m_q8_k, BlockIq1M, q8_k);
                    e.dot_batch = Some(row_dot!(dot_iq1_m_q8_k_tiled, BlockIq1M, q8_k));
                    tile_iq1_m
                }
                _ => return None,
            })
        }
    };
}
pub(super) use iq1_kernels;
