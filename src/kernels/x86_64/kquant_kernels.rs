//! The kernels of the K-quants and IQ4_XS, written once as a macro ([`k_quant_kernels`]) and
//! expanded by each tier over its own integer primitives (`avx2_kquant.rs`: AVX2;
//! `avx512_kquant.rs`: AVX-512 VNNI). Q5_0, Q5_1, IQ4_NL and MXFP4 are in `kwide_kernels.rs`, which
//! runs its `vec_dot` kernels through this macro's `lanes_rows` driver.
//! The unpacking, scale and chain helpers the kernels share are in `kquant_rows.rs`, which
//! describes the scheme; the kernels' shape (rows × tokens) is in `passes.rs`.
//!
//! Each variant runs one of a few drivers (per super-block and row the block unpacked once for
//! every token of the pass), with what differs between types as arguments: `k4_dot_rows` and
//! `q2_k_dot_rows` (`vec_dot` of the types with mins, each its own float work), `lanes_rows`
//! (`vec_dot` of the types without mins, `acc = fma(d_x·d_y, lanes, acc)`), `chain_rows` (the
//! repacked gemv and gemm and the tiled matmul: exact integers per row, then the float chains
//! of `kquant_rows::Chains`), and for batches the panels (`panel_rows`).

/// Every kernel of the K-quants and IQ4_XS (passes of rows × tokens for every variant, panels
/// of eight rows in the lanes for the chain variants of Q4_K, Q5_K and Q2_K and the tiled
/// order of Q3_K, Q5_K and the IQ2, IQ3 and IQ1 types, summing `maddubs` runs in i16), their safe wrappers, tile kernels
/// and the `fill` that puts them in a table row, compiled with the target features `$feat`
/// over the primitives `pair_dot`, `bias4` and `chunk_dot` of the module that expands it (its
/// parent module, `super`).
macro_rules! k_quant_kernels {
    ($feat:literal) => {
        use std::arch::x86_64::*;

        use super::{bias4, chunk_dot, pair_dot};
        use crate::kernels::entries::{row_dot, TileDot};
        use crate::kernels::blocks::{
            BlockIq2S, BlockIq2Xs, BlockIq2Xxs, BlockIq3S, BlockIq3Xxs, BlockIq4Xs, BlockQ2K, BlockQ3K, BlockQ4K, BlockQ5K, BlockQ6K, BlockQ8K, Iq1Grid, IqGrid, QK_K,
        };
        use crate::kernels::x86_64::vec256::hsum_float_8;
        use crate::kernels::x86_64::kquant_rows::{
            bsums, hsum_i32_4, iq1_panel_row, iq_grid_panel_row, iq_grid_row, iq4_xs_row, k4_min_terms, k4_panel_row, k4_row, k4_vec_dot_mins,
            pair_lanes, part_totals, q2_k_panel_row, q2_k_row, q3_k_panel_row, q3_k_row,
            q6_k_row, row_scales, row_totals, totals4, transpose8, ChainKind, Chains, K4Row,
            PanelRow, Sub16Row, XsRow, PAIR, Q3_BIAS, Q3_BIAS_SHIFT, Q6_BIAS_SHIFT, RUN, RUNS,
            SUB16S,
        };
        use crate::kernels::x86_64::passes::{
            array_of, exact, f16, f16_rows, hsums, iq4nl_table, load32, panel_kernel, pass, rows_kernel,
            tile_fn, PanelOut, PanelRows, PANEL_ROWS, PANEL_TOKENS, PASS_ROWS, PASS_TOKENS,
        };
        use crate::kernels::{Entry, GgmlType};

        /// The four pairs' scaled lanes of a Q4_K/Q5_K row block against activation quants
        /// `q` (each pair on its own with `SEP`, else all summed in the first).
        #[target_feature(enable = $feat)]
        #[inline]
        fn k4_sums<const SEP: bool>(k: &K4Row, q: &[i8]) -> [__m256i; 4] {
            let z = _mm256_setzero_si256();
            let mut s = [z; 4];
            for j in 0..4 {
                let y = [load32(&q[PAIR * j..]), load32(&q[PAIR * j + RUN..])];
                let acc = if SEP { z } else { s[0] };
                let x = [k.codes[2 * j], k.codes[2 * j + 1]];
                s[if SEP { j } else { 0 }] = pair_dot(acc, x, y, [z; 2], k.sp[j]);
            }
            s
        }

        /// A sixteen-element-sub-block row block's scaled lanes per half against `q`, with
        /// the runs' biases `b` (`bias4`, or zero) taken off.
        #[target_feature(enable = $feat)]
        #[inline]
        fn sub16_sums(k: &Sub16Row, q: &[i8], b: &[__m256i; RUNS]) -> [__m256i; 2] {
            array_of!(2, |h| {
                let mut acc = _mm256_setzero_si256();
                for p in 0..2 {
                    let (ra, rb) = (4 * h + 2 * p, 4 * h + 2 * p + 1);
                    let y = [load32(&q[RUN * ra..]), load32(&q[RUN * rb..])];
                    let (x, bias) = ([k.codes[ra], k.codes[rb]], [b[ra], b[rb]]);
                    acc = pair_dot(acc, x, y, bias, k.sp[2 * h + p]);
                }
                acc
            })
        }

        /// No bias: [`sub16_sums`] of the types other than Q3_K's `vec_dot`.
        #[target_feature(enable = $feat)]
        #[inline]
        fn no_bias() -> [__m256i; RUNS] {
            [_mm256_setzero_si256(); RUNS]
        }

        /// A type's f16 block scale (or min).
        pub(super) type Half<B> = fn(&B) -> [u8; 2];

        /// The f16 fields (scale, min) of the types with mins.
        const Q4K_D: (Half<BlockQ4K>, Half<BlockQ4K>) = (|a| a.d, |a| a.dmin);
        const Q5K_D: (Half<BlockQ5K>, Half<BlockQ5K>) = (|a| a.d, |a| a.dmin);
        const Q2K_D: (Half<BlockQ2K>, Half<BlockQ2K>) = (|a| a.d, |a| a.dmin);

        /// The Q4_K and Q5_K row blocks, unpacked.
        #[target_feature(enable = $feat)]
        #[inline]
        fn q4_k(a: &BlockQ4K) -> K4Row {
            k4_row(&a.scales, &a.qs, None)
        }
        #[target_feature(enable = $feat)]
        #[inline]
        fn q5_k(a: &BlockQ5K) -> K4Row {
            k4_row(&a.scales, &a.qs, Some(&a.qh))
        }

        // Every kernel walks a super-block's rows one at a time, each row's block unpacked
        // once and used for every token of the pass, so only one unpacked row is live.

        /// Q4_K·Q8_K (`oracle_vec_dot::dot_q4_k_q8_k`, `Q5 == false`): per super-block
        /// `acc_m = fma(dmin, mins, acc_m)` (four lanes) and `acc = fma(d, sumi, acc)`;
        /// `hsum_float_8(acc) + ((m0 + m2) + (m1 + m3))`. Q5_K (`oracle_vec_dot::dot_q5_k_q8_k`):
        /// `summs = fma(dmin, Σ mins, summs)` instead, `hsum_float_8(acc) + summs`.
        #[target_feature(enable = $feat)]
        #[inline]
        fn k4_dot_rows<B, const R: usize, const T: usize, const Q5: bool>(
            w: &[&[B]; R],
            y: &[&[BlockQ8K]; T],
            out: &mut [[f32; R]; T],
            (d, dmin): (Half<B>, Half<B>),
            unpack: impl Fn(&B) -> K4Row,
        ) {
            let (n, w, y, pf) = pass(w, y);
            let mut acc = [[_mm256_setzero_ps(); R]; T];
            let mut acc_m = [[_mm_setzero_ps(); R]; T];
            let mut summs = [[0f32; R]; T];
            for i in 0..n {
                pf.at(i);
                for r in 0..R {
                    let a = &w[r][i];
                    let k = unpack(a);
                    let (xd, xmin) = (f16(d(a)), f16(dmin(a)));
                    for t in 0..T {
                        let b = &y[t][i];
                        let (d, dmin) = (b.d * xd, -b.d * xmin);
                        let prod = k4_vec_dot_mins(k.mins, bsums(b));
                        if Q5 {
                            summs[t][r] = dmin.mul_add(hsum_i32_4(prod) as f32, summs[t][r]);
                        } else {
                            let m = _mm_cvtepi32_ps(prod);
                            acc_m[t][r] = _mm_fmadd_ps(_mm_set1_ps(dmin), m, acc_m[t][r]);
                        }
                        let sumi = _mm256_cvtepi32_ps(k4_sums::<false>(&k, &b.qs)[0]);
                        acc[t][r] = _mm256_fmadd_ps(_mm256_set1_ps(d), sumi, acc[t][r]);
                    }
                }
            }
            for t in 0..T {
                for r in 0..R {
                    let m = _mm_add_ps(acc_m[t][r], _mm_movehl_ps(acc_m[t][r], acc_m[t][r]));
                    let m = _mm_add_ss(m, _mm_movehdup_ps(m));
                    out[t][r] = match Q5 {
                        true => hsum_float_8(acc[t][r]) + summs[t][r],
                        false => hsum_float_8(acc[t][r]) + _mm_cvtss_f32(m),
                    };
                }
            }
        }

        /// Q2_K·Q8_K (`oracle_vec_dot::dot_q2_k_q8_k`): per super-block `acc = fma(dmin, mins, acc)`
        /// then `acc = fma(d, sumi, acc)`; `hsum_float_8(acc)`.
        #[target_feature(enable = $feat)]
        #[inline]
        fn q2_k_dot_rows<const R: usize, const T: usize>(
            w: &[&[BlockQ2K]; R],
            y: &[&[BlockQ8K]; T],
            out: &mut [[f32; R]; T],
        ) {
            let (n, w, y, pf) = pass(w, y);
            let mut acc = [[_mm256_setzero_ps(); R]; T];
            for i in 0..n {
                pf.at(i);
                for r in 0..R {
                    let a = &w[r][i];
                    let k = q2_k_row(a);
                    let (xd, xmin) = (f16(a.d), f16(a.dmin));
                    for t in 0..T {
                        let b = &y[t][i];
                        let (d, dmin) = (b.d * xd, -b.d * xmin);
                        let mins = _mm256_cvtepi32_ps(_mm256_madd_epi16(k.mins16, bsums(b)));
                        acc[t][r] = _mm256_fmadd_ps(_mm256_set1_ps(dmin), mins, acc[t][r]);
                        let s = sub16_sums(&k, &b.qs, &no_bias());
                        let sumi = _mm256_cvtepi32_ps(_mm256_add_epi32(s[0], s[1]));
                        acc[t][r] = _mm256_fmadd_ps(_mm256_set1_ps(d), sumi, acc[t][r]);
                    }
                }
            }
            hsums(&acc, out)
        }

        /// A `vec_dot` kernel of a type without mins: per block `acc = fma(d_y·d_x, lanes,
        /// acc)` (the Q8_0 kernels' `d_x·d_y` is the same product), then `hsum_float_8(acc)`.
        /// `prep` forms a token's scale `d_y` and shared values once per block, `lanes` a
        /// row's lanes from its unpacked block.
        #[target_feature(enable = $feat)]
        #[inline]
        #[allow(clippy::too_many_arguments)]
        pub(super) fn lanes_rows<'a, B, A, Row, P: Copy, const R: usize, const T: usize>(
            w: &[&'a [B]; R],
            y: &[&[A]; T],
            out: &mut [[f32; R]; T],
            d: Half<B>,
            unpack: impl Fn(&'a B) -> Row,
            prep: impl Fn(&A) -> (f32, P),
            lanes: impl Fn(&Row, &A, &P) -> __m256i,
        ) {
            let (n, w, y, pf) = pass(w, y);
            let mut acc = [[_mm256_setzero_ps(); R]; T];
            for i in 0..n {
                pf.at(i);
                let p: [(f32, P); T] = array_of!(T, |t| prep(&y[t][i]));
                for r in 0..R {
                    let a = &w[r][i];
                    let (k, xd) = (unpack(a), f16(d(a)));
                    for t in 0..T {
                        let v = _mm256_cvtepi32_ps(lanes(&k, &y[t][i], &p[t].1));
                        acc[t][r] = _mm256_fmadd_ps(_mm256_set1_ps(p[t].0 * xd), v, acc[t][r]);
                    }
                }
            }
            hsums(&acc, out)
        }

        /// The chain variants (`oracle_repacked.rs`'s gemv and gemm, `oracle_tiled.rs`): per super-block and
        /// row the exact integers `terms` forms from the unpacked block and a token, then
        /// [`Chains`] (`dmin`: the type's mins, whose min chain or term they feed). `terms`
        /// gives a row block's lanes and min lanes (summing to `isum` and `imin`), or for the
        /// gemm (its last argument) its `parts` part totals in the low lanes and their mins in
        /// the high ones.
        #[target_feature(enable = $feat)]
        #[inline]
        #[allow(clippy::too_many_arguments)]
        fn chain_rows<B, Row, const R: usize, const T: usize>(
            w: &[&[B]; R],
            y: &[&[BlockQ8K]; T],
            out: &mut [[f32; R]; T],
            (d, dmin, d_mul): (Half<B>, Option<Half<B>>, Option<f32>),
            unpack: impl Fn(&B) -> Row,
            terms: impl Fn(&Row, &BlockQ8K, bool) -> (__m256i, __m256i),
            parts: usize,
            kind: ChainKind,
        ) {
            let (n, w, y, pf) = pass(w, y);
            let mut ch = [Chains::new(); T];
            let zero = _mm256_setzero_si256();
            let gemm = kind == ChainKind::Gemm;
            for i in 0..n {
                pf.at(i);
                let mut scales = row_scales(&w, i, d, dmin);
                if let Some(m) = d_mul {
                    scales = _mm256_mul_ps(scales, _mm256_set1_ps(m));
                }
                let (mut sums, mut mins) = ([[zero; R]; T], [[zero; R]; T]);
                for r in 0..R {
                    let k = unpack(&w[r][i]);
                    for t in 0..T {
                        (sums[t][r], mins[t][r]) = terms(&k, &y[t][i], gemm);
                    }
                }
                for t in 0..T {
                    let dy = y[t][i].d;
                    if gemm {
                        for part in &part_totals(&sums[t])[..parts] {
                            ch[t].repacked(*part, scales, dy);
                        }
                        continue;
                    }
                    let totals = row_totals(&sums[t], &mins[t]);
                    match kind {
                        ChainKind::Tiled => ch[t].tiled(totals, scales, dy, dmin.is_some()),
                        _ => ch[t].repacked(totals, scales, dy),
                    }
                }
            }
            for t in 0..T {
                ch[t].store(kind, &mut out[t]);
            }
        }

        /// Q4_K/Q5_K chain terms: per pair of sub-blocks its scaled sums and min terms (the
        /// gemm's parts; pair j's min terms are lanes 2j, 2j + 1 of the min lanes).
        #[target_feature(enable = $feat)]
        #[inline]
        fn k4_terms(k: &K4Row, b: &BlockQ8K, gemm: bool) -> (__m256i, __m256i) {
            let mins = k4_min_terms(k.mins, bsums(b));
            match gemm {
                true => {
                    let q = totals4(k4_sums::<true>(k, &b.qs));
                    (_mm256_set_m128i(pair_lanes(mins), q), _mm256_setzero_si256())
                }
                false => (k4_sums::<false>(k, &b.qs)[0], mins),
            }
        }

        /// Q2_K chain terms: the gemm's parts are the two halves (half h's min terms are lanes
        /// 4h..4h + 4 of the min lanes).
        #[target_feature(enable = $feat)]
        #[inline]
        fn q2_k_terms(k: &Sub16Row, b: &BlockQ8K, gemm: bool) -> (__m256i, __m256i) {
            let mins = _mm256_madd_epi16(k.mins16, bsums(b));
            let s = sub16_sums(k, &b.qs, &no_bias());
            match gemm {
                true => {
                    let z = _mm256_setzero_si256();
                    let q = totals4([s[0], s[1], z, z]);
                    let m = _mm_hadd_epi32(pair_lanes(mins), _mm_setzero_si128());
                    (_mm256_set_m128i(m, q), z)
                }
                false => (_mm256_add_epi32(s[0], s[1]), mins),
            }
        }

        /// `chain_rows` of Q4_K or Q5_K (the gemm's parts: the four pairs of sub-blocks).
        #[target_feature(enable = $feat)]
        #[inline]
        fn k4_chain<B, const R: usize, const T: usize>(
            w: &[&[B]; R],
            y: &[&[BlockQ8K]; T],
            out: &mut [[f32; R]; T],
            (d, dmin): (Half<B>, Half<B>),
            unpack: impl Fn(&B) -> K4Row,
            kind: ChainKind,
        ) {
            let parts = if kind == ChainKind::Gemm { 4 } else { 1 };
            let terms = |k: &K4Row, b: &BlockQ8K, gemm| k4_terms(k, b, gemm);
            chain_rows(w, y, out, (d, Some(dmin), None), unpack, terms, parts, kind)
        }

        /// `chain_rows` of Q2_K (the gemm's parts: the two halves).
        #[target_feature(enable = $feat)]
        #[inline]
        fn q2_k_chain<const R: usize, const T: usize>(
            w: &[&[BlockQ2K]; R],
            y: &[&[BlockQ8K]; T],
            out: &mut [[f32; R]; T],
            kind: ChainKind,
        ) {
            let parts = if kind == ChainKind::Gemm { 2 } else { 1 };
            let terms = |k: &Sub16Row, b: &BlockQ8K, gemm| q2_k_terms(k, b, gemm);
            let (d, dmin) = Q2K_D;
            chain_rows(w, y, out, (d, Some(dmin), None), |a| q2_k_row(a), terms, parts, kind)
        }

        /// Q3_K lanes: `vec_dot`'s Σ sc·(c − 4)·y (`bias`: the runs' `bias4`), or the tiled
        /// matmul's Σ sc·c·y − 4·Σ sc·bsum.
        #[target_feature(enable = $feat)]
        #[inline]
        fn q3_k_lanes(k: &Sub16Row, b: &BlockQ8K, bias: Option<&[__m256i; RUNS]>) -> __m256i {
            let s = sub16_sums(k, &b.qs, bias.unwrap_or(&no_bias()));
            let sum = _mm256_add_epi32(s[0], s[1]);
            match bias {
                Some(_) => sum,
                None => {
                    let sb = _mm256_madd_epi16(bsums(b), k.sc16);
                    _mm256_sub_epi32(sum, _mm256_slli_epi32::<Q3_BIAS_SHIFT>(sb))
                }
            }
        }

        /// Q6_K lanes, as `vec_dot` forms them (their total is the tiled `s1` too):
        /// Σ sc·q·y − 32·(sc[2l]·bsums[2l] + sc[2l+1]·bsums[2l+1]).
        #[target_feature(enable = $feat)]
        #[inline]
        fn q6_k_lanes(k: &Sub16Row, b: &BlockQ8K) -> __m256i {
            let s = sub16_sums(k, &b.qs, &no_bias());
            let sb = _mm256_slli_epi32::<Q6_BIAS_SHIFT>(_mm256_madd_epi16(bsums(b), k.sc16));
            _mm256_sub_epi32(_mm256_add_epi32(s[0], s[1]), sb)
        }

        /// IQ4_XS lanes of an unpacked block by ggml's sign trick (`vec_dot`) or true
        /// products: Σ ls·v·y.
        #[target_feature(enable = $feat)]
        #[inline]
        fn iq4_xs_lanes(k: &XsRow, b: &BlockQ8K, true_products: bool) -> __m256i {
            let mut acc = _mm256_setzero_si256();
            for s in 0..RUNS {
                let (x, q8) = (k.x[s], load32(&b.qs[RUN * s..]));
                acc = match true_products {
                    true => chunk_dot(acc, _mm256_abs_epi8(q8), _mm256_sign_epi8(x, q8), k.ls[s]),
                    false => chunk_dot(acc, _mm256_abs_epi8(x), _mm256_sign_epi8(q8, x), k.ls[s]),
                };
            }
            acc
        }

        /// A tiled kernel of a type without mins (`chain_rows` with the lanes as the terms):
        /// per super-block and row the exact `s1` (the sum of `lanes`), `t = s1·d` (`d` times
        /// `d_mul` first, where the type scales its `d`), `acc = fma(t, d_y, acc)`.
        #[target_feature(enable = $feat)]
        #[inline]
        pub(super) fn tiled_rows<B, Row, const R: usize, const T: usize>(
            w: &[&[B]; R],
            y: &[&[BlockQ8K]; T],
            out: &mut [[f32; R]; T],
            (d, d_mul): (Half<B>, Option<f32>),
            unpack: impl Fn(&B) -> Row,
            lanes: impl Fn(&Row, &BlockQ8K) -> __m256i,
        ) {
            let terms = |k: &Row, b: &BlockQ8K, _| (lanes(k, b), _mm256_setzero_si256());
            chain_rows(w, y, out, (d, None, d_mul), unpack, terms, 1, ChainKind::Tiled)
        }

        // The rows × tokens kernels of every variant.
        rows_kernel!($feat, q2_k_rows, dot_q2_k_q8_k, BlockQ2K, BlockQ8K, |w, y, out| {
            q2_k_dot_rows(w, y, out)
        });
        rows_kernel!($feat, q2_k_repacked_rows, dot_q2_k_q8_k_repacked, BlockQ2K, BlockQ8K,
            |w, y, out| {
                q2_k_chain(w, y, out, ChainKind::Repacked)
            });
        rows_kernel!($feat, q2_k_gemm_rows, dot_q2_k_q8_k_gemm, BlockQ2K, BlockQ8K,
            |w, y, out| {
                q2_k_chain(w, y, out, ChainKind::Gemm)
            });
        rows_kernel!($feat, q2_k_tiled_rows, dot_q2_k_q8_k_tiled, BlockQ2K, BlockQ8K,
            |w, y, out| {
                q2_k_chain(w, y, out, ChainKind::Tiled)
            });
        rows_kernel!($feat, q3_k_rows, dot_q3_k_q8_k, BlockQ3K, BlockQ8K, |w, y, out| {
            let prep = |b: &BlockQ8K| -> (f32, [__m256i; RUNS]) {
                (b.d, array_of!(RUNS, |c| bias4(load32(&b.qs[RUN * c..]))))
            };
            let lanes = |k: &Sub16Row, b: &BlockQ8K, p: &[__m256i; RUNS]| q3_k_lanes(k, b, Some(p));
            lanes_rows(w, y, out, |a| a.d, |a| q3_k_row(a), prep, lanes)
        });
        rows_kernel!($feat, q3_k_tiled_rows, dot_q3_k_q8_k_tiled, BlockQ3K, BlockQ8K,
            |w, y, out| {
                let lanes = |k: &Sub16Row, b: &BlockQ8K| q3_k_lanes(k, b, None);
                tiled_rows(w, y, out, (|a| a.d, None), |a| q3_k_row(a), lanes)
            });
        rows_kernel!($feat, q4_k_rows, dot_q4_k_q8_k, BlockQ4K, BlockQ8K, |w, y, out| {
            k4_dot_rows::<_, R, T, false>(w, y, out, Q4K_D, |a| q4_k(a))
        });
        rows_kernel!($feat, q4_k_repacked_rows, dot_q4_k_q8_k_repacked, BlockQ4K, BlockQ8K,
            |w, y, out| {
                k4_chain(w, y, out, Q4K_D, |a| q4_k(a), ChainKind::Repacked)
            });
        rows_kernel!($feat, q4_k_gemm_rows, dot_q4_k_q8_k_gemm, BlockQ4K, BlockQ8K,
            |w, y, out| {
                k4_chain(w, y, out, Q4K_D, |a| q4_k(a), ChainKind::Gemm)
            });
        rows_kernel!($feat, q4_k_tiled_rows, dot_q4_k_q8_k_tiled, BlockQ4K, BlockQ8K,
            |w, y, out| {
                k4_chain(w, y, out, Q4K_D, |a| q4_k(a), ChainKind::Tiled)
            });
        rows_kernel!($feat, q5_k_rows, dot_q5_k_q8_k, BlockQ5K, BlockQ8K, |w, y, out| {
            k4_dot_rows::<_, R, T, true>(w, y, out, Q5K_D, |a| q5_k(a))
        });
        rows_kernel!($feat, q5_k_tiled_rows, dot_q5_k_q8_k_tiled, BlockQ5K, BlockQ8K,
            |w, y, out| {
                k4_chain(w, y, out, Q5K_D, |a| q5_k(a), ChainKind::Tiled)
            });
        rows_kernel!($feat, q6_k_rows, dot_q6_k_q8_k, BlockQ6K, BlockQ8K, |w, y, out| {
            let lanes = |k: &Sub16Row, b: &BlockQ8K, _: &()| q6_k_lanes(k, b);
            lanes_rows(w, y, out, |a| a.d, |a| q6_k_row(a), |b| (b.d, ()), lanes)
        });
        rows_kernel!($feat, q6_k_tiled_rows, dot_q6_k_q8_k_tiled, BlockQ6K, BlockQ8K,
            |w, y, out| {
                tiled_rows(w, y, out, (|a| a.d, None), |a| q6_k_row(a), |k, b| q6_k_lanes(k, b))
            });
        rows_kernel!($feat, iq4_xs_rows, dot_iq4_xs_q8_k, BlockIq4Xs, BlockQ8K, |w, y, out| {
            let table = iq4nl_table();
            let lanes = |k: &XsRow, b: &BlockQ8K, _: &()| iq4_xs_lanes(k, b, false);
            lanes_rows(w, y, out, |a| a.d, |a| iq4_xs_row(a, table), |b| (b.d, ()), lanes)
        });
        // The IQ2 and IQ3 types in IQ4_XS's lanes (`kquant_rows::iq_grid_row`): `vec_dot`'s
        // order, then the factor on the sum where the type has one (IQ2's eighth, IQ3_XXS's
        // quarter); and as the tiled
        // matmul (`oracle_tiled::dot_iq_grid_q8_k_tiled`: true products, the factor on `d` first).
        #[target_feature(enable = $feat)]
        #[inline]
        pub(super) fn iq_grid_dot<B: IqGrid, const R: usize, const T: usize>(
            w: &[&[B]; R],
            y: &[&[BlockQ8K]; T],
            out: &mut [[f32; R]; T],
            grid_lanes: impl Fn(&B, &BlockQ8K) -> __m256i,
        ) {
            let lanes = |a: &&B, b: &BlockQ8K, _: &()| grid_lanes(*a, b);
            lanes_rows(w, y, out, |a| a.d(), |a| a, |b| (b.d, ()), lanes);
            if let Some(f) = B::SUM_SCALE {
                for o in out.iter_mut().flatten() {
                    *o *= f;
                }
            }
        }
        /// An IQ grid type's super-block lanes straight from the block, as ggml's AVX2
        /// `vec_dot` kernels form them: per run of 32 the four groups' grid values (unsigned)
        /// against the activation signed by their patterns, `maddubs`, then `madd` by
        /// `2·ls + 1` (one scale a run, or one a half for sixteen-value scale groups). The
        /// same lane integers as IQ4_XS's lanes of [`iq_grid_row`], without materialising the
        /// row.
        #[target_feature(enable = $feat)]
        #[inline]
        fn iq_grid_lanes<B: IqGrid>(a: &B, b: &BlockQ8K) -> __m256i {
            /// Groups of eight values a run.
            const GROUPS: usize = RUN / 8;
            let group = |k: usize| a.group(k) as i64;
            let sign = |k: usize| a.sign_bytes(k) as i64;
            let scale = |s: usize| a.odd_scale(s) as i16;
            let mut acc = _mm256_setzero_si256();
            for s in 0..RUNS {
                let k = GROUPS * s;
                let v = _mm256_setr_epi64x(group(k), group(k + 1), group(k + 2), group(k + 3));
                let q8 = if B::STORED_SIGNS {
                    negate_by_bits(load32(&b.qs[RUN * s..]), a.sign_word(k))
                } else {
                    let signs =
                        _mm256_setr_epi64x(sign(k), sign(k + 1), sign(k + 2), sign(k + 3));
                    _mm256_sign_epi8(load32(&b.qs[RUN * s..]), signs)
                };
                let ls = if B::SCALE_GROUP == RUN {
                    _mm256_set1_epi16(scale(s))
                } else {
                    _mm256_setr_m128i(_mm_set1_epi16(scale(2 * s)), _mm_set1_epi16(scale(2 * s + 1)))
                };
                acc = _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(v, q8), ls));
            }
            acc
        }
        /// A run's 32 activation quants `q`, value m negated where bit m of `bits` is set: the
        /// bits spread to byte masks by a shuffle, as ggml's AVX2 kernels spread stored signs
        /// (`(q ^ m) − m` wraps −128 as `vpsignb` does).
        #[target_feature(enable = $feat)]
        #[inline]
        fn negate_by_bits(q: __m256i, bits: u32) -> __m256i {
            // Value m of a run takes sign byte m / 8, bit m % 8.
            let byte_of = _mm256_setr_epi8(
                0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
                2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3,
            );
            let bit_of = _mm256_set1_epi64x(0x8040_2010_0804_0201_u64 as i64);
            let picked = _mm256_shuffle_epi8(_mm256_set1_epi32(bits as i32), byte_of);
            let neg = _mm256_cmpeq_epi8(_mm256_and_si256(picked, bit_of), bit_of);
            _mm256_sub_epi8(_mm256_xor_si256(q, neg), neg)
        }

        /// IQ2_XS's lanes: [`iq_grid_lanes`]'s integers, with the super-block's 32 stored
        /// words split in vectors once: their nine-bit grid indices, and their seven sign bits
        /// completed by the parity bit (`iq_signs::KSIGNS`: a nibble table looked up on the
        /// xor of the bits' halves, as ggml's AVX2 kernel completes them) and then spread by
        /// [`negate_by_bits`], where each group's word was read, masked and its ±1 bytes looked
        /// up one by one.
        #[target_feature(enable = $feat)]
        #[inline]
        fn iq2_xs_lanes(a: &BlockIq2Xs, b: &BlockQ8K) -> __m256i {
            use crate::kernels::blocks::{table_load, IQ2XS_INDEX_BITS, IQ2XS_INDEX_MASK};
            use crate::kernels::iq_grids::IQ2XS_GRID;
            /// Stored words (groups of eight values) a super-block.
            const WORDS: usize = QK_K / 8;
            /// Groups a run.
            const GROUPS: usize = RUN / 8;
            // 0x80 where a nibble has an odd number of bits set.
            let odd = _mm256_setr_epi8(
                0, -128, -128, 0, -128, 0, 0, -128, -128, 0, 0, -128, 0, -128, -128, 0,
                0, -128, -128, 0, -128, 0, 0, -128, -128, 0, 0, -128, 0, -128, -128, 0,
            );
            let mut index = [0u16; WORDS];
            let mut signs = [0u8; WORDS];
            let mask = _mm256_set1_epi16(IQ2XS_INDEX_MASK as i16);
            let full: [__m256i; 2] = std::array::from_fn(|h| {
                let w = load32(&a.qs[2 * (WORDS / 2) * h..]);
                // SAFETY: index holds 32 u16, half h's sixteen at 16h; the store is unaligned.
                unsafe {
                    _mm256_storeu_si256(
                        index[WORDS / 2 * h..].as_mut_ptr().cast(),
                        _mm256_and_si256(w, mask),
                    )
                };
                let seven = _mm256_srli_epi16::<{ IQ2XS_INDEX_BITS as i32 }>(w);
                // Seven bits' parity: that of the low nibble xor the top three.
                let folded = _mm256_xor_si256(seven, _mm256_srli_epi16::<4>(seven));
                _mm256_or_si256(seven, _mm256_shuffle_epi8(odd, folded))
            });
            // packus interleaves 128-bit halves: bytes come out as (0 2 1 3) in 64-bit units.
            let packed = _mm256_permute4x64_epi64::<0b11_01_10_00>(_mm256_packus_epi16(
                full[0], full[1],
            ));
            // SAFETY: signs is 32 writable bytes; the store is unaligned.
            unsafe { _mm256_storeu_si256(signs.as_mut_ptr().cast(), packed) };
            let mut acc = _mm256_setzero_si256();
            for s in 0..RUNS {
                let k = GROUPS * s;
                let g = |j: usize| table_load(&IQ2XS_GRID, usize::from(index[k + j])) as i64;
                let v = _mm256_setr_epi64x(g(0), g(1), g(2), g(3));
                let bits = u32::from_le_bytes(signs[k..k + GROUPS].try_into().expect("four"));
                let q8 = negate_by_bits(load32(&b.qs[RUN * s..]), bits);
                let scale = |h: usize| a.odd_scale(2 * s + h) as i16;
                let ls = _mm256_setr_m128i(_mm_set1_epi16(scale(0)), _mm_set1_epi16(scale(1)));
                acc = _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(v, q8), ls));
            }
            acc
        }

        /// IQ3_XXS's lanes: [`iq_grid_lanes`]'s integers, each run's eight grid entries
        /// inserted as eight 32-bit lanes (as ggml's AVX2 kernel sets them) rather than joined
        /// in pairs into four 64-bit ones.
        #[target_feature(enable = $feat)]
        #[inline]
        fn iq3_xxs_lanes(a: &BlockIq3Xxs, b: &BlockQ8K) -> __m256i {
            use crate::kernels::blocks::table_load;
            use crate::kernels::iq_grids::IQ3XXS_GRID;
            /// Grid entries (four values each) a run.
            const ENTRIES: usize = RUN / 4;
            /// Groups of eight values a run.
            const GROUPS: usize = RUN / 8;
            let mut acc = _mm256_setzero_si256();
            for s in 0..RUNS {
                let qs = &a.qs[ENTRIES * s..ENTRIES * (s + 1)];
                let g = |j: usize| table_load(&IQ3XXS_GRID, usize::from(qs[j])) as i32;
                let v = _mm256_setr_epi32(g(0), g(1), g(2), g(3), g(4), g(5), g(6), g(7));
                let k = GROUPS * s;
                let sign = |j: usize| a.sign_bytes(k + j) as i64;
                let signs = _mm256_setr_epi64x(sign(0), sign(1), sign(2), sign(3));
                let q8 = _mm256_sign_epi8(load32(&b.qs[RUN * s..]), signs);
                let ls = _mm256_set1_epi16(a.odd_scale(s) as i16);
                acc = _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(v, q8), ls));
            }
            acc
        }

        /// IQ3_S's lanes: [`iq_grid_lanes`]'s integers, with each run's eight nine-bit grid
        /// indices formed in one vector (the ninth bits from `qh` by a variable shift, as
        /// ggml's AVX2 kernel forms them) rather than one by one in scalar code.
        #[target_feature(enable = $feat)]
        #[inline]
        fn iq3_s_lanes(a: &BlockIq3S, b: &BlockQ8K) -> __m256i {
            use crate::kernels::blocks::{table_load, IQ3S_QS_BITS};
            use crate::kernels::iq_grids::IQ3S_GRID;
            /// Groups of four values (grid entries) a run.
            const ENTRIES: usize = RUN / 4;
            // Lane j: qh's bit j moved up to the index's ninth bit.
            let shift = _mm256_setr_epi32(8, 7, 6, 5, 4, 3, 2, 1);
            let ninth = _mm256_set1_epi32(1 << IQ3S_QS_BITS);
            let mut idx = [0u32; ENTRIES];
            let mut acc = _mm256_setzero_si256();
            for s in 0..RUNS {
                let qs = &a.qs[ENTRIES * s..ENTRIES * (s + 1)];
                // SAFETY: qs is eight readable bytes; the load is unaligned.
                let low = _mm256_cvtepu8_epi32(unsafe { _mm_loadl_epi64(qs.as_ptr().cast()) });
                let qh = _mm256_set1_epi32(i32::from(a.qh[s]));
                let high = _mm256_and_si256(_mm256_sllv_epi32(qh, shift), ninth);
                // SAFETY: idx is eight writable u32; the store is unaligned.
                unsafe {
                    _mm256_storeu_si256(idx.as_mut_ptr().cast(), _mm256_or_si256(low, high))
                };
                let g = |j: usize| table_load(&IQ3S_GRID, idx[j] as usize) as i32;
                let v = _mm256_setr_epi32(g(0), g(1), g(2), g(3), g(4), g(5), g(6), g(7));
                let q8 = negate_by_bits(load32(&b.qs[RUN * s..]), a.sign_word(4 * s));
                let ls = _mm256_set1_epi16(a.odd_scale(s) as i16);
                acc = _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(v, q8), ls));
            }
            acc
        }
        #[target_feature(enable = $feat)]
        #[inline]
        fn iq_grid_tiled<B: IqGrid, const R: usize, const T: usize>(
            w: &[&[B]; R],
            y: &[&[BlockQ8K]; T],
            out: &mut [[f32; R]; T],
        ) {
            let lanes = |k: &XsRow, b: &BlockQ8K| iq4_xs_lanes(k, b, true);
            let d: (Half<B>, _) = (|a| a.d(), B::SUM_SCALE);
            tiled_rows(w, y, out, d, |a| iq_grid_row(a), lanes)
        }
        rows_kernel!($feat, iq3_xxs_rows, dot_iq3_xxs_q8_k, BlockIq3Xxs, BlockQ8K, |w, y, out| {
            iq_grid_dot(w, y, out, |a, b| iq3_xxs_lanes(a, b))
        });
        rows_kernel!($feat, iq3_xxs_tiled_rows, dot_iq3_xxs_q8_k_tiled, BlockIq3Xxs, BlockQ8K,
            |w, y, out| iq_grid_tiled(w, y, out));
        rows_kernel!($feat, iq3_s_rows, dot_iq3_s_q8_k, BlockIq3S, BlockQ8K, |w, y, out| {
            iq_grid_dot(w, y, out, |a, b| iq3_s_lanes(a, b))
        });
        rows_kernel!($feat, iq3_s_tiled_rows, dot_iq3_s_q8_k_tiled, BlockIq3S, BlockQ8K,
            |w, y, out| iq_grid_tiled(w, y, out));
        rows_kernel!($feat, iq2_xxs_rows, dot_iq2_xxs_q8_k, BlockIq2Xxs, BlockQ8K, |w, y, out| {
            iq_grid_dot(w, y, out, |a, b| iq_grid_lanes(a, b))
        });
        rows_kernel!($feat, iq2_xxs_tiled_rows, dot_iq2_xxs_q8_k_tiled, BlockIq2Xxs, BlockQ8K,
            |w, y, out| iq_grid_tiled(w, y, out));
        rows_kernel!($feat, iq2_xs_rows, dot_iq2_xs_q8_k, BlockIq2Xs, BlockQ8K, |w, y, out| {
            iq_grid_dot(w, y, out, |a, b| iq2_xs_lanes(a, b))
        });
        rows_kernel!($feat, iq2_xs_tiled_rows, dot_iq2_xs_q8_k_tiled, BlockIq2Xs, BlockQ8K,
            |w, y, out| iq_grid_tiled(w, y, out));
        rows_kernel!($feat, iq2_s_rows, dot_iq2_s_q8_k, BlockIq2S, BlockQ8K, |w, y, out| {
            iq_grid_dot(w, y, out, |a, b| iq_grid_lanes(a, b))
        });
        rows_kernel!($feat, iq2_s_tiled_rows, dot_iq2_s_q8_k_tiled, BlockIq2S, BlockQ8K,
            |w, y, out| iq_grid_tiled(w, y, out));
        // IQ4_XS·Q8_K as the tiled matmul (`oracle_tiled::dot_iq4_xs_q8_k_tiled`), whose
        // `Σ sc·(Σ (v + 128)·y − 128·bsum)` is formed as `Σ sc·Σ v·y` (true products): the
        // same integer for activations whose `bsums` are the sums of their quants.
        rows_kernel!($feat, iq4_xs_tiled_rows, dot_iq4_xs_q8_k_tiled, BlockIq4Xs, BlockQ8K,
            |w, y, out| {
                let table = iq4nl_table();
                let lanes = |k: &XsRow, b: &BlockQ8K| iq4_xs_lanes(k, b, true);
                tiled_rows(w, y, out, (|a| a.d, None), |a| iq4_xs_row(a, table), lanes)
            });

        /// Elements of a group: one i32 lane's four bytes.
        const GROUP: usize = 4;

        /// The group of elements `e..e + 4` of a panel's super-block: the rows' four codes
        /// (one row per lane, from the transposed `groups`) and the token's four activations
        /// broadcast to every lane.
        #[target_feature(enable = $feat)]
        #[inline]
        fn group_at(
            groups: &[[__m256i; PANEL_ROWS]; RUNS],
            b: &BlockQ8K,
            e: usize,
        ) -> (__m256i, __m256i) {
            let q = &b.qs[e..e + GROUP];
            let y4 = i32::from_le_bytes([q[0] as u8, q[1] as u8, q[2] as u8, q[3] as u8]);
            (groups[e / RUN][(e % RUN) / GROUP], _mm256_set1_epi32(y4))
        }

        /// One part (sub-blocks `p·NSUB/parts ..`) of a panel token's integers with i16 runs:
        /// per sub-block the `maddubs` pairs of `IRUN` groups at a time summed in i16 (no
        /// overflow for the type's codes: see the callers) and widened and scaled at once by
        /// `madd` with the scale in both halves (`scd`); the bias `bias·Σ_s sc_s·bsum_s` and the
        /// mins `Σ_s m_s·bsum_s` by `madd` of the scale and min pairs against the activation
        /// sums in pairs: in exact wrapping i32, `s1 = Σ_s sc_s·(raw_s − bias·bsum_s)` and
        /// `s2 = Σ_s m_s·bsum_s`.
        #[target_feature(enable = $feat)]
        #[inline]
        #[allow(clippy::too_many_arguments)]
        fn i16_part<const NSUB: usize, const IRUN: usize, const SIGNED: bool>(
            groups: &[[__m256i; PANEL_ROWS]; RUNS],
            b: &BlockQ8K,
            scd: &[__m256i; NSUB],
            scp: &[__m256i; SUB16S / 2],
            mnp: &[__m256i; SUB16S / 2],
            bias: i32,
            mins: bool,
            p: usize,
            parts: usize,
        ) -> (__m256i, __m256i) {
            // A run never reaches into the next sub-block (another scale).
            const { assert!((QK_K / NSUB / GROUP).is_multiple_of(IRUN)) };
            let sub = QK_K / NSUB;
            let zero = _mm256_setzero_si256();
            let (mut s1, mut s2, mut bt) = (zero, zero, zero);
            let (s0, s_end) = (p * NSUB / parts, (p + 1) * NSUB / parts);
            for s in s0..s_end {
                for r0 in (0..sub / GROUP).step_by(IRUN) {
                    let mut a = zero;
                    for g in r0..r0 + IRUN {
                        let (x, y4) = group_at(groups, b, s * sub + GROUP * g);
                        let p = match SIGNED {
                            // True products: |y| (≤ 128, unsigned) times the code with y's
                            // sign, so −128 never wraps.
                            true => _mm256_maddubs_epi16(
                                _mm256_abs_epi8(y4),
                                _mm256_sign_epi8(x, y4),
                            ),
                            false => _mm256_maddubs_epi16(x, y4),
                        };
                        a = _mm256_add_epi16(a, p);
                    }
                    s1 = _mm256_add_epi32(s1, _mm256_madd_epi16(a, scd[s]));
                }
            }
            // Sub-block s's activation sum: one stored `bsums` entry (sixteen elements) or
            // the sum of two (32, within i16 for a quantized row), paired as i16 with s + 1's.
            let bsum = |s: usize| -> i32 {
                let per = sub / BSUM_LEN;
                b.bsums[s * per..(s + 1) * per].iter().fold(0i32, |a, &v| a + i32::from(v))
            };
            for k in s0 / 2..s_end / 2 {
                let pair = (bsum(2 * k) & 0xffff) | (bsum(2 * k + 1) << 16);
                let bp = _mm256_set1_epi32(pair);
                if bias != 0 {
                    bt = _mm256_add_epi32(bt, _mm256_madd_epi16(scp[k], bp));
                }
                if mins {
                    s2 = _mm256_add_epi32(s2, _mm256_madd_epi16(mnp[k], bp));
                }
            }
            if bias != 0 {
                s1 = _mm256_sub_epi32(s1, _mm256_mullo_epi32(bt, _mm256_set1_epi32(bias)));
            }
            (s1, s2)
        }

        /// The panel kernels of the chain variants (see `passes::panels`): per super-block the
        /// `PANEL_ROWS` rows' blocks unpacked ([`PanelRow`]) and transposed, each group of four
        /// codes of a run with the rows in the lanes of one vector (so are the rows' scales and
        /// mins), then per token and sub-block s, in exact wrapping i32, the tiled oracle's
        /// ```text
        /// raw = Σ_groups four-sums(codes, four activations broadcast)   (lanes: rows)
        /// s1[part(s)] += sc_s·(raw − bias·bsum_s);  s2[part(s)] += m_s·bsum_s
        /// ```
        /// (the repacked oracles' `isum`/`imin` per part too, with no bias), then the float
        /// chains of `kind`, one lane per row, as [`Chains`] does them. `SIGNED`: the IQ
        /// types' signed codes, taken as true products `maddubs(|y|, sign(c, y))`; `d_mul`: the
        /// factor on the rows' `d` where the type scales it.
        #[target_feature(enable = $feat)]
        #[inline]
        #[allow(clippy::too_many_arguments)]
        fn panel_rows<B, const NSUB: usize, const IRUN: usize, const SIGNED: bool>(
            w: &[&[B]; PANEL_ROWS],
            y: &[&[BlockQ8K]],
            out: &mut PanelOut,
            unpack: impl Fn(&B) -> PanelRow<NSUB>,
            (d, d_mul): (Half<B>, Option<f32>),
            dmin: Option<Half<B>>,
            bias: i32,
            parts: usize,
            kind: ChainKind,
        ) {
            let nt = y.len();
            assert!((1..=PANEL_TOKENS).contains(&nt), "a panel of {nt} tokens");
            let n = y[0].len();
            let w = exact(w, n);
            assert!(y.iter().all(|yt| yt.len() == n), "activation length mismatch");
            let (zero, zero_ps) = (_mm256_setzero_si256(), _mm256_setzero_ps());
            let mut acc = [zero_ps; PANEL_TOKENS];
            let mut acc_min = [zero_ps; PANEL_TOKENS];
            for i in 0..n {
                let mut codes = [[zero; PANEL_ROWS]; RUNS];
                let mut sc = [[0i32; PANEL_ROWS]; NSUB];
                let mut mn = [[0i32; PANEL_ROWS]; NSUB];
                for r in 0..PANEL_ROWS {
                    let row = unpack(&w[r][i]);
                    for c in 0..RUNS {
                        codes[c][r] = row.codes[c];
                    }
                    for s in 0..NSUB {
                        (sc[s][r], mn[s][r]) = (row.sc[s], row.mins[s]);
                    }
                }
                // groups[c][m]: lane r holds row r's codes of elements 32c + 4m .. + 4.
                let groups: [[__m256i; PANEL_ROWS]; RUNS] = array_of!(RUNS, |c| transpose8(codes[c]));
                let scv: [__m256i; NSUB] = array_of!(NSUB, |s| load32(&sc[s]));
                let mnv: [__m256i; NSUB] = array_of!(NSUB, |s| load32(&mn[s]));
                // For the i16 runs: each scale in both i16 halves of its row's lane, and the
                // scales and mins of sub-blocks 2k, 2k + 1 as the two i16 of each lane.
                let low16 = _mm256_set1_epi32(0xffff);
                let pair16 = |a: __m256i, b: __m256i| {
                    _mm256_or_si256(_mm256_and_si256(a, low16), _mm256_slli_epi32::<16>(b))
                };
                let scd: [__m256i; NSUB] = array_of!(NSUB, |s| pair16(scv[s], scv[s]));
                let (mut scp, mut mnp) = ([zero; SUB16S / 2], [zero; SUB16S / 2]);
                for k in 0..NSUB / 2 {
                    scp[k] = pair16(scv[2 * k], scv[2 * k + 1]);
                    mnp[k] = pair16(mnv[2 * k], mnv[2 * k + 1]);
                }
                let mut dv = f16_rows::<PANEL_ROWS>(std::array::from_fn(|r| d(&w[r][i])));
                if let Some(m) = d_mul {
                    dv = _mm256_mul_ps(dv, _mm256_set1_ps(m));
                }
                let dminv = match dmin {
                    Some(m) => f16_rows::<PANEL_ROWS>(std::array::from_fn(|r| m(&w[r][i]))),
                    None => zero_ps,
                };
                for t in 0..nt {
                    let b = &y[t][i];
                    let dy = _mm256_set1_ps(b.d);
                    let (ds, dms) = (_mm256_mul_ps(dv, dy), _mm256_mul_ps(dminv, dy));
                    // Each part's sub-blocks in turn, its totals in registers.
                    for p in 0..parts {
                        let (s1, s2) = i16_part::<NSUB, IRUN, SIGNED>(
                            &groups, b, &scd, &scp, &mnp, bias, dmin.is_some(), p, parts,
                        );
                        if kind == ChainKind::Tiled {
                            let mut tv = _mm256_mul_ps(_mm256_cvtepi32_ps(s1), dv);
                            if dmin.is_some() {
                                let neg = _mm256_xor_ps(dminv, _mm256_set1_ps(-0.0));
                                tv = _mm256_fmadd_ps(neg, _mm256_cvtepi32_ps(s2), tv);
                            }
                            acc[t] = _mm256_fmadd_ps(tv, dy, acc[t]);
                        } else {
                            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s1), ds, acc[t]);
                            acc_min[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s2), dms, acc_min[t]);
                        }
                    }
                }
            }
            for t in 0..nt {
                let v = match kind {
                    ChainKind::Tiled => acc[t],
                    _ => _mm256_sub_ps(acc[t], acc_min[t]),
                };
                // SAFETY: out[t] is 8 writable f32s; the store is unaligned.
                unsafe { _mm256_storeu_ps(out[t].as_mut_ptr(), v) };
            }
        }

        /// Elements per `bsums` entry of a Q8_K block.
        const BSUM_LEN: usize = 16;

        // Groups of four whose `maddubs` pairs the i16 panels add up before one `madd`: the
        // 4- and 5-bit codes as the packed tiles run them; the 2- and 3-bit codes a whole
        // sixteen-element sub-block (four groups).
        use crate::kernels::x86_64::packed_kernels::{i16_run_fits, RUN_Q4_K, RUN_Q5_K};
        const RUN_SUB16: usize = QK_K / SUB16S / 4;
        const _: () = assert!(i16_run_fits(RUN_SUB16, 2) && i16_run_fits(RUN_SUB16, 3));

        // The panels, one instance per chain so that `panel_rows` inlines with its parts and
        // chain known: 4-bit codes, a sub-block's eight groups in one i16 run; 5-bit codes,
        // runs of four groups; 2- and 3-bit codes, a sub-block's four groups in one i16 run.
        // The tiled Q3_K panel (`oracle_tiled::dot_q3_k_q8_k_tiled`) has codes `low2 | hbit << 2`,
        // bias 4 through the activation sums, signed scales.
        panel_kernel!($feat, q4_k_panel_repacked, BlockQ4K, |w, y, out| {
            q4_k_panel(w, y, out, 1, ChainKind::Repacked)
        });
        panel_kernel!($feat, q4_k_panel_gemm, BlockQ4K, |w, y, out| {
            q4_k_panel(w, y, out, 4, ChainKind::Gemm)
        });
        panel_kernel!($feat, q4_k_panel_tiled, BlockQ4K, |w, y, out| {
            q4_k_panel(w, y, out, 1, ChainKind::Tiled)
        });
        panel_kernel!($feat, q5_k_panel_tiled, BlockQ5K, |w, y, out| {
            let unpack = |a: &BlockQ5K| k4_panel_row(&a.scales, &a.qs, Some(&a.qh));
            let (d, dmin) = (Q5K_D.0, Some(Q5K_D.1));
            let d = (d, None);
            panel_rows::<_, RUNS, RUN_Q5_K, false>(w, y, out, unpack, d, dmin, 0, 1, ChainKind::Tiled)
        });
        panel_kernel!($feat, q2_k_panel_repacked, BlockQ2K, |w, y, out| {
            q2_k_panel(w, y, out, 1, ChainKind::Repacked)
        });
        panel_kernel!($feat, q2_k_panel_gemm, BlockQ2K, |w, y, out| {
            q2_k_panel(w, y, out, 2, ChainKind::Gemm)
        });
        panel_kernel!($feat, q2_k_panel_tiled, BlockQ2K, |w, y, out| {
            q2_k_panel(w, y, out, 1, ChainKind::Tiled)
        });
        panel_kernel!($feat, q3_k_panel_tiled, BlockQ3K, |w, y, out| {
            let (d, unpack): (Half<BlockQ3K>, _) = (|a| a.d, |a: &BlockQ3K| q3_k_panel_row(a));
            let bias = i32::from(Q3_BIAS);
            let d = (d, None);
            panel_rows::<_, SUB16S, RUN_SUB16, false>(w, y, out, unpack, d, None, bias, 1, ChainKind::Tiled)
        });

        /// The Q4_K panels.
        #[target_feature(enable = $feat)]
        #[inline]
        fn q4_k_panel(
            w: &PanelRows<BlockQ4K>,
            y: &[&[BlockQ8K]],
            out: &mut PanelOut,
            parts: usize,
            kind: ChainKind,
        ) {
            let unpack = |a: &BlockQ4K| k4_panel_row(&a.scales, &a.qs, None);
            let (d, dmin) = (Q4K_D.0, Some(Q4K_D.1));
            panel_rows::<_, RUNS, RUN_Q4_K, false>(w, y, out, unpack, (d, None), dmin, 0, parts, kind)
        }

        /// The Q2_K panels.
        #[target_feature(enable = $feat)]
        #[inline]
        fn q2_k_panel(
            w: &PanelRows<BlockQ2K>,
            y: &[&[BlockQ8K]],
            out: &mut PanelOut,
            parts: usize,
            kind: ChainKind,
        ) {
            let (d, dmin) = (Q2K_D.0, Some(Q2K_D.1));
            let unpack = |a: &BlockQ2K| q2_k_panel_row(a);
            panel_rows::<_, SUB16S, RUN_SUB16, false>(w, y, out, unpack, (d, None), dmin, 0, parts, kind)
        }

        /// Groups of four whose true-product `maddubs` pairs the IQ2 and IQ3 panels add up in
        /// i16: their signed grid values are ±62 at most (within six bits).
        const RUN_IQ_GRID: usize = 2;
        const _: () = assert!(i16_run_fits(RUN_IQ_GRID, 6));

        /// The tiled panels of the IQ2 and IQ3 types (`oracle_tiled::dot_iq_grid_q8_k_tiled`):
        /// each row's super-block unpacked once for all the panel's tokens (where the passes
        /// unpack it again for every few tokens), its signed grid values as codes (true
        /// products, no bias), `NSUB` scales `2·ls + 1` (eight a super-block, sixteen for
        /// IQ2_XS and IQ2_S), `d` times the type's factor as the oracle scales it.
        #[target_feature(enable = $feat)]
        #[inline]
        fn iq_grid_panel<B: IqGrid, const NSUB: usize>(
            w: &PanelRows<B>,
            y: &[&[BlockQ8K]],
            out: &mut PanelOut,
        ) {
            let unpack = |a: &B| iq_grid_panel_row::<B, NSUB>(a);
            let d: (Half<B>, _) = (|a| a.d(), B::SUM_SCALE);
            let kind = ChainKind::Tiled;
            panel_rows::<_, NSUB, RUN_IQ_GRID, true>(w, y, out, unpack, d, None, 0, 1, kind)
        }
        panel_kernel!($feat, iq3_xxs_panel_tiled, BlockIq3Xxs, |w, y, out| {
            iq_grid_panel::<_, RUNS>(w, y, out)
        });
        panel_kernel!($feat, iq3_s_panel_tiled, BlockIq3S, |w, y, out| {
            iq_grid_panel::<_, RUNS>(w, y, out)
        });
        panel_kernel!($feat, iq2_xxs_panel_tiled, BlockIq2Xxs, |w, y, out| {
            iq_grid_panel::<_, RUNS>(w, y, out)
        });
        panel_kernel!($feat, iq2_xs_panel_tiled, BlockIq2Xs, |w, y, out| {
            iq_grid_panel::<_, SUB16S>(w, y, out)
        });
        panel_kernel!($feat, iq2_s_panel_tiled, BlockIq2S, |w, y, out| {
            iq_grid_panel::<_, SUB16S>(w, y, out)
        });

        /// Groups of four whose true-product `maddubs` pairs the IQ1 panels add up in i16 (a
        /// sixteen-value scale group): their codes `8·grid ± 1` are ±9 at most (four bits).
        const RUN_IQ1: usize = 4;
        const _: () = assert!(i16_run_fits(RUN_IQ1, 4));

        /// The tiled panels of the IQ1 types (`oracle_tiled::dot_iq1_q8_k_tiled`, for
        /// `iq1_kernels`' tiles): codes `8·grid ± 1` (signed, true products), a scale
        /// `2·ls + 1` per half of sixteen, `d` times an eighth.
        #[target_feature(enable = $feat)]
        #[inline]
        pub(super) fn iq1_panel<B: Iq1Grid>(
            w: &PanelRows<B>,
            y: &[&[BlockQ8K]],
            out: &mut PanelOut,
        ) {
            use crate::kernels::oracle_tiled::IQ1_CODE_SCALE;
            let unpack = |a: &B| iq1_panel_row(a);
            let d: (Half<B>, _) = (|a| a.d(), Some(1.0 / IQ1_CODE_SCALE as f32));
            let kind = ChainKind::Tiled;
            panel_rows::<_, SUB16S, RUN_IQ1, true>(w, y, out, unpack, d, None, 0, 1, kind)
        }

        tile_fn!(tile_q2_k, BlockQ2K, q8_k, PASS_ROWS, PASS_TOKENS, {
            Dot => q2_k_rows,
            Repacked => q2_k_repacked_rows,
            RepackedGemm => q2_k_gemm_rows,
            Batch => q2_k_tiled_rows,
        }, panels: {
            Repacked => q2_k_panel_repacked,
            RepackedGemm => q2_k_panel_gemm,
            Batch => q2_k_panel_tiled,
        });
        // With i16 runs an eight-row Q3_K panel is cheaper than the passes (with VNNI
        // four-sums and a `vpmulld` per sixteen-element sub-block it had run slower, on Zen 4).
        // AVX-512 takes sixteen rows through `avx512_packed_tile::q3_k_rows` instead, which unpacks
        // each super-block once for all tokens (measured faster on Zen 5 only).
        tile_fn!(tile_q3_k_panels, BlockQ3K, q8_k, PASS_ROWS, PASS_TOKENS, {
            Dot => q3_k_rows,
            Batch => q3_k_tiled_rows,
        }, panels: { Batch => q3_k_panel_tiled });
        tile_fn!(tile_q4_k, BlockQ4K, q8_k, PASS_ROWS, PASS_TOKENS, {
            Dot => q4_k_rows,
            Repacked => q4_k_repacked_rows,
            RepackedGemm => q4_k_gemm_rows,
            Batch => q4_k_tiled_rows,
        }, panels: {
            Repacked => q4_k_panel_repacked,
            RepackedGemm => q4_k_panel_gemm,
            Batch => q4_k_panel_tiled,
        });
        tile_fn!(tile_q5_k, BlockQ5K, q8_k, PASS_ROWS, PASS_TOKENS, {
            Dot => q5_k_rows,
            Batch => q5_k_tiled_rows,
        }, panels: { Batch => q5_k_panel_tiled });
        tile_fn!(tile_q6_k, BlockQ6K, q8_k, PASS_ROWS, PASS_TOKENS, {
            Dot => q6_k_rows,
            Batch => q6_k_tiled_rows,
        });
        tile_fn!(tile_iq3_xxs, BlockIq3Xxs, q8_k, PASS_ROWS, PASS_TOKENS, {
            Dot => iq3_xxs_rows,
            Batch => iq3_xxs_tiled_rows,
        }, panels: { Batch => iq3_xxs_panel_tiled });
        tile_fn!(tile_iq3_s, BlockIq3S, q8_k, PASS_ROWS, PASS_TOKENS, {
            Dot => iq3_s_rows,
            Batch => iq3_s_tiled_rows,
        }, panels: { Batch => iq3_s_panel_tiled });
        tile_fn!(tile_iq2_xxs, BlockIq2Xxs, q8_k, PASS_ROWS, PASS_TOKENS, {
            Dot => iq2_xxs_rows,
            Batch => iq2_xxs_tiled_rows,
        }, panels: { Batch => iq2_xxs_panel_tiled });
        tile_fn!(tile_iq2_xs, BlockIq2Xs, q8_k, PASS_ROWS, PASS_TOKENS, {
            Dot => iq2_xs_rows,
            Batch => iq2_xs_tiled_rows,
        }, panels: { Batch => iq2_xs_panel_tiled });
        tile_fn!(tile_iq2_s, BlockIq2S, q8_k, PASS_ROWS, PASS_TOKENS, {
            Dot => iq2_s_rows,
            Batch => iq2_s_tiled_rows,
        }, panels: { Batch => iq2_s_panel_tiled });
        tile_fn!(tile_iq4_xs, BlockIq4Xs, q8_k, PASS_ROWS, PASS_TOKENS, {
            Dot => iq4_xs_rows,
            Batch => iq4_xs_tiled_rows,
        });

        /// Puts these kernels in `e` (a copy of the oracle's row) for the types of this file
        /// and returns the type's tile kernel; `None` for other types.
        pub(in crate::kernels) fn fill(e: &mut Entry) -> Option<TileDot> {
            Some(match e.ty {
                GgmlType::Q2K => {
                    e.dot = row_dot!(dot_q2_k_q8_k, BlockQ2K, q8_k);
                    e.dot_repacked = Some(row_dot!(dot_q2_k_q8_k_repacked, BlockQ2K, q8_k));
                    e.dot_repacked_gemm = Some(row_dot!(dot_q2_k_q8_k_gemm, BlockQ2K, q8_k));
                    e.dot_batch = Some(row_dot!(dot_q2_k_q8_k_tiled, BlockQ2K, q8_k));
                    tile_q2_k
                }
                GgmlType::Q3K => {
                    e.dot = row_dot!(dot_q3_k_q8_k, BlockQ3K, q8_k);
                    e.dot_batch = Some(row_dot!(dot_q3_k_q8_k_tiled, BlockQ3K, q8_k));
                    tile_q3_k_panels
                }
                GgmlType::Q4K => {
                    e.dot = row_dot!(dot_q4_k_q8_k, BlockQ4K, q8_k);
                    e.dot_repacked = Some(row_dot!(dot_q4_k_q8_k_repacked, BlockQ4K, q8_k));
                    e.dot_repacked_gemm = Some(row_dot!(dot_q4_k_q8_k_gemm, BlockQ4K, q8_k));
                    e.dot_batch = Some(row_dot!(dot_q4_k_q8_k_tiled, BlockQ4K, q8_k));
                    tile_q4_k
                }
                GgmlType::Q5K => {
                    e.dot = row_dot!(dot_q5_k_q8_k, BlockQ5K, q8_k);
                    e.dot_batch = Some(row_dot!(dot_q5_k_q8_k_tiled, BlockQ5K, q8_k));
                    tile_q5_k
                }
                GgmlType::Q6K => {
                    e.dot = row_dot!(dot_q6_k_q8_k, BlockQ6K, q8_k);
                    e.dot_batch = Some(row_dot!(dot_q6_k_q8_k_tiled, BlockQ6K, q8_k));
                    tile_q6_k
                }
                GgmlType::Iq3Xxs => {
                    e.dot = row_dot!(dot_iq3_xxs_q8_k, BlockIq3Xxs, q8_k);
                    e.dot_batch = Some(row_dot!(dot_iq3_xxs_q8_k_tiled, BlockIq3Xxs, q8_k));
                    tile_iq3_xxs
                }
                GgmlType::Iq3S => {
                    e.dot = row_dot!(dot_iq3_s_q8_k, BlockIq3S, q8_k);
                    e.dot_batch = Some(row_dot!(dot_iq3_s_q8_k_tiled, BlockIq3S, q8_k));
                    tile_iq3_s
                }
                GgmlType::Iq2Xxs => {
                    e.dot = row_dot!(dot_iq2_xxs_q8_k, BlockIq2Xxs, q8_k);
                    e.dot_batch = Some(row_dot!(dot_iq2_xxs_q8_k_tiled, BlockIq2Xxs, q8_k));
                    tile_iq2_xxs
                }
                GgmlType::Iq2Xs => {
                    e.dot = row_dot!(dot_iq2_xs_q8_k, BlockIq2Xs, q8_k);
                    e.dot_batch = Some(row_dot!(dot_iq2_xs_q8_k_tiled, BlockIq2Xs, q8_k));
                    tile_iq2_xs
                }
                GgmlType::Iq2S => {
                    e.dot = row_dot!(dot_iq2_s_q8_k, BlockIq2S, q8_k);
                    e.dot_batch = Some(row_dot!(dot_iq2_s_q8_k_tiled, BlockIq2S, q8_k));
                    tile_iq2_s
                }
                GgmlType::Iq4Xs => {
                    e.dot = row_dot!(dot_iq4_xs_q8_k, BlockIq4Xs, q8_k);
                    e.dot_batch = Some(row_dot!(dot_iq4_xs_q8_k_tiled, BlockIq4Xs, q8_k));
                    tile_iq4_xs
                }
                _ => return None,
            })
        }
    };
}
pub(super) use k_quant_kernels;
