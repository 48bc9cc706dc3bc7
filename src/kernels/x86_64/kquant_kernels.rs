//! The kernels of the K-quants and IQ4_XS, written once as a macro ([`k_quant_kernels`]) and
//! expanded by each tier over its own integer primitives (`kavx2_k.rs`: AVX2; `kavx512.rs`:
//! AVX-512 VNNI). Q5_0, Q5_1 and IQ4_NL are in `kwide_kernels.rs`.
//! The unpacking, scale and chain helpers the K-quant kernels share are in `kavx2_k.rs`, which
//! describes the scheme; the kernels' shape (rows × tokens) is in `kavx2.rs`.

/// Every kernel of the K-quants and IQ4_XS (passes of rows × tokens for every variant, panels
/// of eight rows in the lanes for the chain variants of Q4_K, Q5_K and Q2_K and the tiled
/// order of Q3_K and Q5_K, summing `maddubs` runs in i16), their safe wrappers, tile kernels
/// and the `fill` that puts them in a table row, compiled with the target features `$feat`
/// over the primitives `pair_dot`, `pair_dot_b`, `bias4` and `chunk_dot` of the module that
/// expands it (its parent module, `super`).
macro_rules! k_quant_kernels {
    ($feat:literal) => {
        use std::arch::x86_64::*;

        use super::{bias4, chunk_dot, pair_dot, pair_dot_b};
        use crate::kernels::entries::{row_dot, TileDot};
        use crate::kernels::kblocks::{
            BlockIq4Xs, BlockQ2K, BlockQ3K, BlockQ4K, BlockQ5K, BlockQ6K, BlockQ8K,
        };
        use crate::kernels::x86_64::avx2::hsum_float_8;
        use crate::kernels::x86_64::kavx2::{
            array_of, exact, f16, iq4nl_table, load32, prefetch_for,
            tile_fn, wrap_rows, PASS_ROWS, PASS_TOKENS,
        };
        use crate::kernels::kblocks::QK_K;
        use crate::kernels::x86_64::kavx2::{PANEL_ROWS, PANEL_TOKENS};
        use crate::kernels::x86_64::kavx2_k::{
            k4_panel_row, q2_k_panel_row, q3_k_panel_row, transpose8, PanelRow, SUB16S,
        };
        use crate::kernels::x86_64::kavx2_k::{
            bsums, hsum_i32_4, iq4_xs_row, k4_min_terms, k4_row, k4_vec_dot_mins, pair_lanes,
            part_totals, totals4,
            q2_k_row, q3_k_row, q6_k_row, row_scales, row_totals, ChainKind, Chains, K4Row,
            Sub16Row, XsRow,
            PAIR, Q3_BIAS, Q3_BIAS_SHIFT, Q6_BIAS_SHIFT, RUN, RUNS,
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
                let (ya, yb) = (load32(&q[PAIR * j..]), load32(&q[PAIR * j + RUN..]));
                let acc = if SEP { z } else { s[0] };
                let v = pair_dot(acc, k.codes[2 * j], ya, k.codes[2 * j + 1], yb, k.sp[j]);
                s[if SEP { j } else { 0 }] = v;
            }
            s
        }

        /// A sixteen-element-sub-block row block's scaled lanes per half against `q`, with
        /// the runs' biases `b` (`pair_dot_b`) where given.
        #[target_feature(enable = $feat)]
        #[inline]
        fn sub16_sums(k: &Sub16Row, q: &[i8], b: Option<&[__m256i; RUNS]>) -> [__m256i; 2] {
            array_of!(2, |h| {
                let mut acc = _mm256_setzero_si256();
                for p in 0..2 {
                    let (ra, rb) = (4 * h + 2 * p, 4 * h + 2 * p + 1);
                    let (ya, yb) = (load32(&q[RUN * ra..]), load32(&q[RUN * rb..]));
                    let (xa, xb, sp) = (k.codes[ra], k.codes[rb], k.sp[2 * h + p]);
                    acc = match b {
                        Some(b) => pair_dot_b(acc, xa, ya, b[ra], xb, yb, b[rb], sp),
                        None => pair_dot(acc, xa, ya, xb, yb, sp),
                    };
                }
                acc
            })
        }

        /// A type's f16 block scale (or min).
        type Half<B> = fn(&B) -> [u8; 2];

        // Every kernel walks a super-block's rows one at a time, each row's block unpacked
        // once and used for every token of the pass, so only one unpacked row is live.

        /// Q4_K·Q8_K (`kdot::dot_q4_k_q8_k`, `Q5 == false`): per super-block
        /// `acc_m = fma(dmin, mins, acc_m)` (four lanes) and `acc = fma(d, sumi, acc)`;
        /// `hsum_float_8(acc) + ((m0 + m2) + (m1 + m3))`. Q5_K (`kdot::dot_q5_k_q8_k`):
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
            let n = y[0].len();
            let (w, y) = (exact(w, n), exact(y, n));
            let pf = prefetch_for::<_, R, T>(&w);
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

        /// The chain variants of Q4_K and Q5_K (`krepack::dot_q4_k_q8_k_repacked`, `_gemm`,
        /// `ktiled::dot_q4_k_q8_k_tiled`, `dot_q5_k_q8_k_tiled`): per super-block and row the
        /// exact `isum` (per pair for the gemm) and `imin`, then [`Chains`].
        #[target_feature(enable = $feat)]
        #[inline]
        fn k4_chain_rows<B, const R: usize, const T: usize>(
            w: &[&[B]; R],
            y: &[&[BlockQ8K]; T],
            out: &mut [[f32; R]; T],
            (d, dmin): (Half<B>, Half<B>),
            unpack: impl Fn(&B) -> K4Row,
            kind: ChainKind,
        ) {
            let n = y[0].len();
            let (w, y) = (exact(w, n), exact(y, n));
            let pf = prefetch_for::<_, R, T>(&w);
            let mut ch = [Chains::new(); T];
            let zero = _mm256_setzero_si256();
            for i in 0..n {
                pf.at(i);
                let scales = row_scales(&w, i, d, Some(dmin));
                if kind == ChainKind::Gemm {
                    // Per pair of sub-blocks: its scaled sums and its two min terms.
                    let mut sums = [[[zero; 4]; R]; T];
                    let mut mins = [[zero; R]; T];
                    for r in 0..R {
                        let k = unpack(&w[r][i]);
                        for t in 0..T {
                            let b = &y[t][i];
                            mins[t][r] = k4_min_terms(k.mins, bsums(b));
                            sums[t][r] = k4_sums::<true>(&k, &b.qs);
                        }
                    }
                    for t in 0..T {
                        // Pair j's min terms are lanes 2j, 2j + 1 of the min lanes.
                        let q = array_of!(R, |r| totals4(sums[t][r]));
                        let m = array_of!(R, |r| pair_lanes(mins[t][r]));
                        for part in part_totals(&q, &m) {
                            ch[t].repacked(part, scales, y[t][i].d);
                        }
                    }
                    continue;
                }
                let mut sums = [[zero; R]; T];
                let mut mins = [[zero; R]; T];
                for r in 0..R {
                    let k = unpack(&w[r][i]);
                    for t in 0..T {
                        let b = &y[t][i];
                        mins[t][r] = k4_min_terms(k.mins, bsums(b));
                        sums[t][r] = k4_sums::<false>(&k, &b.qs)[0];
                    }
                }
                for t in 0..T {
                    let (totals, dy) = (row_totals(&sums[t], &mins[t]), y[t][i].d);
                    match kind {
                        ChainKind::Tiled => ch[t].tiled(totals, scales, dy, true),
                        _ => ch[t].repacked(totals, scales, dy),
                    }
                }
            }
            for t in 0..T {
                ch[t].store(kind, &mut out[t]);
            }
        }

        /// The `Q4_K` and `Q5_K` f16 fields (scale, min).
        const Q4K_D: (Half<BlockQ4K>, Half<BlockQ4K>) = (|a| a.d, |a| a.dmin);
        const Q5K_D: (Half<BlockQ5K>, Half<BlockQ5K>) = (|a| a.d, |a| a.dmin);

        #[target_feature(enable = $feat)]
        fn q4_k_rows_impl<const R: usize, const T: usize>(
            w: &[&[BlockQ4K]; R],
            y: &[&[BlockQ8K]; T],
            out: &mut [[f32; R]; T],
        ) {
            k4_dot_rows::<_, R, T, false>(w, y, out, Q4K_D, |a| k4_row(&a.scales, &a.qs, None))
        }

        #[target_feature(enable = $feat)]
        fn q5_k_rows_impl<const R: usize, const T: usize>(
            w: &[&[BlockQ5K]; R],
            y: &[&[BlockQ8K]; T],
            out: &mut [[f32; R]; T],
        ) {
            let unpack = |a: &BlockQ5K| k4_row(&a.scales, &a.qs, Some(&a.qh));
            k4_dot_rows::<_, R, T, true>(w, y, out, Q5K_D, unpack)
        }

        #[target_feature(enable = $feat)]
        fn q4_k_repacked_rows_impl<const R: usize, const T: usize>(
            w: &[&[BlockQ4K]; R],
            y: &[&[BlockQ8K]; T],
            out: &mut [[f32; R]; T],
        ) {
            let unpack = |a: &BlockQ4K| k4_row(&a.scales, &a.qs, None);
            k4_chain_rows(w, y, out, Q4K_D, unpack, ChainKind::Repacked)
        }

        #[target_feature(enable = $feat)]
        fn q4_k_gemm_rows_impl<const R: usize, const T: usize>(
            w: &[&[BlockQ4K]; R],
            y: &[&[BlockQ8K]; T],
            out: &mut [[f32; R]; T],
        ) {
            let unpack = |a: &BlockQ4K| k4_row(&a.scales, &a.qs, None);
            k4_chain_rows(w, y, out, Q4K_D, unpack, ChainKind::Gemm)
        }

        #[target_feature(enable = $feat)]
        fn q4_k_tiled_rows_impl<const R: usize, const T: usize>(
            w: &[&[BlockQ4K]; R],
            y: &[&[BlockQ8K]; T],
            out: &mut [[f32; R]; T],
        ) {
            let unpack = |a: &BlockQ4K| k4_row(&a.scales, &a.qs, None);
            k4_chain_rows(w, y, out, Q4K_D, unpack, ChainKind::Tiled)
        }

        #[target_feature(enable = $feat)]
        fn q5_k_tiled_rows_impl<const R: usize, const T: usize>(
            w: &[&[BlockQ5K]; R],
            y: &[&[BlockQ8K]; T],
            out: &mut [[f32; R]; T],
        ) {
            let unpack = |a: &BlockQ5K| k4_row(&a.scales, &a.qs, Some(&a.qh));
            k4_chain_rows(w, y, out, Q5K_D, unpack, ChainKind::Tiled)
        }

        /// Q2_K·Q8_K (`kdot::dot_q2_k_q8_k`): per super-block `acc = fma(dmin, mins, acc)`
        /// then `acc = fma(d, sumi, acc)`; `hsum_float_8(acc)`.
        #[target_feature(enable = $feat)]
        fn q2_k_rows_impl<const R: usize, const T: usize>(
            w: &[&[BlockQ2K]; R],
            y: &[&[BlockQ8K]; T],
            out: &mut [[f32; R]; T],
        ) {
            let n = y[0].len();
            let (w, y) = (exact(w, n), exact(y, n));
            let pf = prefetch_for::<_, R, T>(&w);
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
                        let s = sub16_sums(&k, &b.qs, None);
                        let sumi = _mm256_cvtepi32_ps(_mm256_add_epi32(s[0], s[1]));
                        acc[t][r] = _mm256_fmadd_ps(_mm256_set1_ps(d), sumi, acc[t][r]);
                    }
                }
            }
            for t in 0..T {
                for r in 0..R {
                    out[t][r] = hsum_float_8(acc[t][r]);
                }
            }
        }

        /// The chain variants of Q2_K (`krepack::dot_q2_k_q8_k_repacked`, `_gemm` (parts:
        /// the two halves), `ktiled::dot_q2_k_q8_k_tiled`).
        #[target_feature(enable = $feat)]
        #[inline]
        fn q2_k_chain_rows<const R: usize, const T: usize>(
            w: &[&[BlockQ2K]; R],
            y: &[&[BlockQ8K]; T],
            out: &mut [[f32; R]; T],
            kind: ChainKind,
        ) {
            let n = y[0].len();
            let (w, y) = (exact(w, n), exact(y, n));
            let pf = prefetch_for::<_, R, T>(&w);
            let mut ch = [Chains::new(); T];
            let zero = _mm256_setzero_si256();
            for i in 0..n {
                pf.at(i);
                let mut sums = [[[zero; 2]; R]; T];
                let mut mins = [[zero; R]; T];
                for r in 0..R {
                    let k = q2_k_row(&w[r][i]);
                    for t in 0..T {
                        let b = &y[t][i];
                        mins[t][r] = _mm256_madd_epi16(k.mins16, bsums(b));
                        sums[t][r] = sub16_sums(&k, &b.qs, None);
                    }
                }
                let scales = row_scales(&w, i, |a| a.d, Some(|a| a.dmin));
                for t in 0..T {
                    let dy = y[t][i].d;
                    if kind == ChainKind::Gemm {
                        // Half h's min terms are lanes 4h..4h + 4 of the min lanes.
                        let z = _mm256_setzero_si256();
                        let q = array_of!(R, |r| totals4([sums[t][r][0], sums[t][r][1], z, z]));
                        let m = array_of!(R, |r| {
                            let p = pair_lanes(mins[t][r]);
                            _mm_hadd_epi32(p, _mm_setzero_si128())
                        });
                        for part in &part_totals(&q, &m)[..2] {
                            ch[t].repacked(*part, scales, dy);
                        }
                        continue;
                    }
                    let s = array_of!(R, |r| _mm256_add_epi32(sums[t][r][0], sums[t][r][1]));
                    let totals = row_totals(&s, &mins[t]);
                    match kind {
                        ChainKind::Tiled => ch[t].tiled(totals, scales, dy, true),
                        _ => ch[t].repacked(totals, scales, dy),
                    }
                }
            }
            for t in 0..T {
                ch[t].store(kind, &mut out[t]);
            }
        }

        #[target_feature(enable = $feat)]
        fn q2_k_repacked_rows_impl<const R: usize, const T: usize>(
            w: &[&[BlockQ2K]; R],
            y: &[&[BlockQ8K]; T],
            out: &mut [[f32; R]; T],
        ) {
            q2_k_chain_rows(w, y, out, ChainKind::Repacked)
        }

        #[target_feature(enable = $feat)]
        fn q2_k_gemm_rows_impl<const R: usize, const T: usize>(
            w: &[&[BlockQ2K]; R],
            y: &[&[BlockQ8K]; T],
            out: &mut [[f32; R]; T],
        ) {
            q2_k_chain_rows(w, y, out, ChainKind::Gemm)
        }

        #[target_feature(enable = $feat)]
        fn q2_k_tiled_rows_impl<const R: usize, const T: usize>(
            w: &[&[BlockQ2K]; R],
            y: &[&[BlockQ8K]; T],
            out: &mut [[f32; R]; T],
        ) {
            q2_k_chain_rows(w, y, out, ChainKind::Tiled)
        }

        /// A `vec_dot` kernel of a type without mins: per super-block
        /// `acc = fma(d_y·d_x, lanes, acc)` (IQ4_XS's `d_x·d_y` is the same product), then
        /// `hsum_float_8(acc)`. `prep` forms a token's shared values once per super-block,
        /// `lanes` a row's lanes from its unpacked block.
        #[target_feature(enable = $feat)]
        #[inline]
        fn lanes_rows<'a, B, Row, P: Copy, const R: usize, const T: usize>(
            w: &[&'a [B]; R],
            y: &[&[BlockQ8K]; T],
            out: &mut [[f32; R]; T],
            d: Half<B>,
            unpack: impl Fn(&'a B) -> Row,
            prep: impl Fn(&BlockQ8K) -> P,
            lanes: impl Fn(&Row, &BlockQ8K, &P) -> __m256i,
        ) {
            let n = y[0].len();
            let (w, y) = (exact(w, n), exact(y, n));
            let pf = prefetch_for::<_, R, T>(&w);
            let mut acc = [[_mm256_setzero_ps(); R]; T];
            for i in 0..n {
                pf.at(i);
                let p: [P; T] = array_of!(T, |t| prep(&y[t][i]));
                for r in 0..R {
                    let a = &w[r][i];
                    let (k, xd) = (unpack(a), f16(d(a)));
                    for t in 0..T {
                        let b = &y[t][i];
                        let v = _mm256_cvtepi32_ps(lanes(&k, b, &p[t]));
                        acc[t][r] = _mm256_fmadd_ps(_mm256_set1_ps(b.d * xd), v, acc[t][r]);
                    }
                }
            }
            for t in 0..T {
                for r in 0..R {
                    out[t][r] = hsum_float_8(acc[t][r]);
                }
            }
        }

        /// A tiled kernel of a type without mins: per super-block and row the exact `s1` (the
        /// sum of `lanes`), `t = s1·d`, `acc = fma(t, d_y, acc)`.
        #[target_feature(enable = $feat)]
        #[inline]
        fn tiled_rows<'a, B, Row, const R: usize, const T: usize>(
            w: &[&'a [B]; R],
            y: &[&[BlockQ8K]; T],
            out: &mut [[f32; R]; T],
            d: Half<B>,
            unpack: impl Fn(&'a B) -> Row,
            lanes: impl Fn(&Row, &BlockQ8K) -> __m256i,
        ) {
            let n = y[0].len();
            let (w, y) = (exact(w, n), exact(y, n));
            let pf = prefetch_for::<_, R, T>(&w);
            let mut ch = [Chains::new(); T];
            let zero = _mm256_setzero_si256();
            for i in 0..n {
                pf.at(i);
                let mut s = [[zero; R]; T];
                for r in 0..R {
                    let k = unpack(&w[r][i]);
                    for t in 0..T {
                        s[t][r] = lanes(&k, &y[t][i]);
                    }
                }
                let scales = row_scales(&w, i, d, None);
                for t in 0..T {
                    ch[t].tiled(row_totals(&s[t], &[zero; R]), scales, y[t][i].d, false);
                }
            }
            for t in 0..T {
                ch[t].store(ChainKind::Tiled, &mut out[t]);
            }
        }

        /// Q3_K lanes: `vec_dot`'s Σ sc·(c − 4)·y (`bias`: the runs' `bias4`), or the tiled
        /// matmul's Σ sc·c·y − 4·Σ sc·bsum.
        #[target_feature(enable = $feat)]
        #[inline]
        fn q3_k_lanes(k: &Sub16Row, b: &BlockQ8K, bias: Option<&[__m256i; RUNS]>) -> __m256i {
            let s = sub16_sums(k, &b.qs, bias);
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
            let s = sub16_sums(k, &b.qs, None);
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

        #[target_feature(enable = $feat)]
        fn q3_k_rows_impl<const R: usize, const T: usize>(
            w: &[&[BlockQ3K]; R],
            y: &[&[BlockQ8K]; T],
            out: &mut [[f32; R]; T],
        ) {
            let prep = |b: &BlockQ8K| -> [__m256i; RUNS] {
                array_of!(RUNS, |c| bias4(load32(&b.qs[RUN * c..])))
            };
            let lanes = |k: &Sub16Row, b: &BlockQ8K, p: &[__m256i; RUNS]| q3_k_lanes(k, b, Some(p));
            lanes_rows(w, y, out, |a| a.d, |a| q3_k_row(a), prep, lanes)
        }

        #[target_feature(enable = $feat)]
        fn q3_k_tiled_rows_impl<const R: usize, const T: usize>(
            w: &[&[BlockQ3K]; R],
            y: &[&[BlockQ8K]; T],
            out: &mut [[f32; R]; T],
        ) {
            let lanes = |k: &Sub16Row, b: &BlockQ8K| q3_k_lanes(k, b, None);
            tiled_rows(w, y, out, |a| a.d, |a| q3_k_row(a), lanes)
        }

        #[target_feature(enable = $feat)]
        fn q6_k_rows_impl<const R: usize, const T: usize>(
            w: &[&[BlockQ6K]; R],
            y: &[&[BlockQ8K]; T],
            out: &mut [[f32; R]; T],
        ) {
            let lanes = |k: &Sub16Row, b: &BlockQ8K, _: &()| q6_k_lanes(k, b);
            lanes_rows(w, y, out, |a| a.d, |a| q6_k_row(a), |_| (), lanes)
        }

        #[target_feature(enable = $feat)]
        fn q6_k_tiled_rows_impl<const R: usize, const T: usize>(
            w: &[&[BlockQ6K]; R],
            y: &[&[BlockQ8K]; T],
            out: &mut [[f32; R]; T],
        ) {
            tiled_rows(w, y, out, |a| a.d, |a| q6_k_row(a), |k, b| q6_k_lanes(k, b))
        }

        #[target_feature(enable = $feat)]
        fn iq4_xs_rows_impl<const R: usize, const T: usize>(
            w: &[&[BlockIq4Xs]; R],
            y: &[&[BlockQ8K]; T],
            out: &mut [[f32; R]; T],
        ) {
            let table = iq4nl_table();
            let lanes = |k: &XsRow, b: &BlockQ8K, _: &()| iq4_xs_lanes(k, b, false);
            lanes_rows(w, y, out, |a| a.d, |a| iq4_xs_row(a, table), |_| (), lanes)
        }

        /// IQ4_XS·Q8_K as the tiled matmul (`ktiled::dot_iq4_xs_q8_k_tiled`), whose
        /// `Σ sc·(Σ (v + 128)·y − 128·bsum)` is formed as `Σ sc·Σ v·y` (true products): the
        /// same integer for activations whose `bsums` are the sums of their quants.
        #[target_feature(enable = $feat)]
        fn iq4_xs_tiled_rows_impl<const R: usize, const T: usize>(
            w: &[&[BlockIq4Xs]; R],
            y: &[&[BlockQ8K]; T],
            out: &mut [[f32; R]; T],
        ) {
            let table = iq4nl_table();
            let lanes = |k: &XsRow, b: &BlockQ8K| iq4_xs_lanes(k, b, true);
            tiled_rows(w, y, out, |a| a.d, |a| iq4_xs_row(a, table), lanes)
        }

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
        fn i16_part<const NSUB: usize, const IRUN: usize>(
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
                        a = _mm256_add_epi16(a, _mm256_maddubs_epi16(x, y4));
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

        /// The panel kernels of the chain variants (see `kavx2::panels`): per super-block the
        /// `PANEL_ROWS` rows' blocks unpacked ([`PanelRow`]) and transposed, each group of four
        /// codes of a run with the rows in the lanes of one vector (so are the rows' scales and
        /// mins), then per token and sub-block s, in exact wrapping i32, the tiled oracle's
        /// ```text
        /// raw = Σ_groups four-sums(codes, four activations broadcast)   (lanes: rows)
        /// s1[part(s)] += sc_s·(raw − bias·bsum_s);  s2[part(s)] += m_s·bsum_s
        /// ```
        /// (the repacked oracles' `isum`/`imin` per part too, with no bias), then the float
        /// chains of `kind`, one lane per row, as [`Chains`] does them.
        #[target_feature(enable = $feat)]
        #[inline]
        #[allow(clippy::too_many_arguments)]
        fn panel_rows<B, const NSUB: usize, const IRUN: usize>(
            w: &[&[B]; PANEL_ROWS],
            y: &[&[BlockQ8K]],
            out: &mut [[f32; PANEL_ROWS]; PANEL_TOKENS],
            unpack: impl Fn(&B) -> PanelRow<NSUB>,
            d: Half<B>,
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
                let dv = row_scales8(&w, i, d);
                let dminv = match dmin {
                    Some(m) => row_scales8(&w, i, m),
                    None => zero_ps,
                };
                for t in 0..nt {
                    let b = &y[t][i];
                    let dy = _mm256_set1_ps(b.d);
                    let (ds, dms) = (_mm256_mul_ps(dv, dy), _mm256_mul_ps(dminv, dy));
                    // Each part's sub-blocks in turn, its totals in registers.
                    for p in 0..parts {
                        let (s1, s2) = i16_part::<NSUB, IRUN>(
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

        /// f16 → f32 of one field of each of the `PANEL_ROWS` rows' block `i`, row r in lane r.
        #[target_feature(enable = $feat)]
        #[inline]
        fn row_scales8<B>(w: &[&[B]; PANEL_ROWS], i: usize, get: Half<B>) -> __m256 {
            let mut h = [0u16; PANEL_ROWS];
            for r in 0..PANEL_ROWS {
                h[r] = u16::from_le_bytes(get(&w[r][i]));
            }
            // SAFETY: h is 8 readable u16s (16 bytes); the load is unaligned.
            _mm256_cvtph_ps(unsafe { _mm_loadu_si128(h.as_ptr().cast()) })
        }

        /// A panel kernel's outputs, token-major.
        type PanelOut = [[f32; PANEL_ROWS]; PANEL_TOKENS];

        /// The chain of a panel kernel's const parameter (`kind as usize`).
        const fn chain_kind(k: usize) -> ChainKind {
            match k {
                0 => ChainKind::Repacked,
                1 => ChainKind::Gemm,
                _ => ChainKind::Tiled,
            }
        }
        /// Elements per `bsums` entry of a Q8_K block.
        const BSUM_LEN: usize = 16;
        const REPACKED: usize = 0;
        const GEMM: usize = 1;
        const TILED: usize = 2;

        // Groups of four whose `maddubs` pairs the i16 panels add up before one `madd`: the
        // 4- and 5-bit codes as the packed tiles run them; the 2- and 3-bit codes a whole
        // sixteen-element sub-block (four groups).
        use crate::kernels::x86_64::kpacked2_tile::{i16_run_fits, RUN_Q4_K, RUN_Q5_K};
        const RUN_SUB16: usize = QK_K / SUB16S / 4;
        const _: () = assert!(i16_run_fits(RUN_SUB16, 2) && i16_run_fits(RUN_SUB16, 3));

        // One instance per chain, so that `panel_rows` inlines with its parts and chain known.
        #[target_feature(enable = $feat)]
        fn q4_k_panel_impl<const K: usize>(
            w: &[&[BlockQ4K]; PANEL_ROWS],
            y: &[&[BlockQ8K]],
            out: &mut PanelOut,
        ) {
            let unpack = |a: &BlockQ4K| k4_panel_row(&a.scales, &a.qs, None);
            let parts = if K == GEMM { 4 } else { 1 };
            // 4-bit codes: a sub-block's eight groups in one i16 run.
            let (d, dmin) = (Q4K_D.0, Some(Q4K_D.1));
            panel_rows::<_, RUNS, RUN_Q4_K>(w, y, out, unpack, d, dmin, 0, parts, chain_kind(K))
        }

        #[target_feature(enable = $feat)]
        fn q5_k_panel_impl(w: &[&[BlockQ5K]; PANEL_ROWS], y: &[&[BlockQ8K]], out: &mut PanelOut) {
            let unpack = |a: &BlockQ5K| k4_panel_row(&a.scales, &a.qs, Some(&a.qh));
            // 5-bit codes: runs of four groups.
            let (d, dmin) = (Q5K_D.0, Some(Q5K_D.1));
            panel_rows::<_, RUNS, RUN_Q5_K>(w, y, out, unpack, d, dmin, 0, 1, ChainKind::Tiled)
        }

        #[target_feature(enable = $feat)]
        fn q2_k_panel_impl<const K: usize>(
            w: &[&[BlockQ2K]; PANEL_ROWS],
            y: &[&[BlockQ8K]],
            out: &mut PanelOut,
        ) {
            let unpack = |a: &BlockQ2K| q2_k_panel_row(a);
            let parts = if K == GEMM { 2 } else { 1 };
            let kind = chain_kind(K);
            // 2-bit codes: a sub-block's four groups in one i16 run.
            let (d, dmin): (Half<BlockQ2K>, Half<BlockQ2K>) = (|a| a.d, |a| a.dmin);
            panel_rows::<_, SUB16S, RUN_SUB16>(w, y, out, unpack, d, Some(dmin), 0, parts, kind)
        }

        /// The tiled Q3_K panel (`ktiled::dot_q3_k_q8_k_tiled`): codes `low2 | hbit << 2`,
        /// bias 4 through the activation sums, signed scales.
        #[target_feature(enable = $feat)]
        fn q3_k_panel_impl(w: &[&[BlockQ3K]; PANEL_ROWS], y: &[&[BlockQ8K]], out: &mut PanelOut) {
            // 3-bit codes: a sub-block's four groups in one i16 run.
            let (d, unpack): (Half<BlockQ3K>, _) = (|a| a.d, |a: &BlockQ3K| q3_k_panel_row(a));
            let bias = i32::from(Q3_BIAS);
            panel_rows::<_, SUB16S, RUN_SUB16>(w, y, out, unpack, d, None, bias, 1, ChainKind::Tiled)
        }

        // The panels' safe wrappers. Each `unsafe` call below is sound because the wrapper is
        // only reachable through the table of a tier whose features (those the bodies enable
        // among them) were detected.
        fn q4_k_panel_repacked(w: &[&[BlockQ4K]; PANEL_ROWS], y: &[&[BlockQ8K]], out: &mut PanelOut) {
            // SAFETY: as above.
            unsafe { q4_k_panel_impl::<REPACKED>(w, y, out) }
        }
        fn q4_k_panel_gemm(w: &[&[BlockQ4K]; PANEL_ROWS], y: &[&[BlockQ8K]], out: &mut PanelOut) {
            // SAFETY: as above.
            unsafe { q4_k_panel_impl::<GEMM>(w, y, out) }
        }
        fn q4_k_panel_tiled(w: &[&[BlockQ4K]; PANEL_ROWS], y: &[&[BlockQ8K]], out: &mut PanelOut) {
            // SAFETY: as above.
            unsafe { q4_k_panel_impl::<TILED>(w, y, out) }
        }
        fn q5_k_panel_tiled(w: &[&[BlockQ5K]; PANEL_ROWS], y: &[&[BlockQ8K]], out: &mut PanelOut) {
            // SAFETY: as above.
            unsafe { q5_k_panel_impl(w, y, out) }
        }
        fn q2_k_panel_repacked(w: &[&[BlockQ2K]; PANEL_ROWS], y: &[&[BlockQ8K]], out: &mut PanelOut) {
            // SAFETY: as above.
            unsafe { q2_k_panel_impl::<REPACKED>(w, y, out) }
        }
        fn q2_k_panel_gemm(w: &[&[BlockQ2K]; PANEL_ROWS], y: &[&[BlockQ8K]], out: &mut PanelOut) {
            // SAFETY: as above.
            unsafe { q2_k_panel_impl::<GEMM>(w, y, out) }
        }
        fn q2_k_panel_tiled(w: &[&[BlockQ2K]; PANEL_ROWS], y: &[&[BlockQ8K]], out: &mut PanelOut) {
            // SAFETY: as above.
            unsafe { q2_k_panel_impl::<TILED>(w, y, out) }
        }
        fn q3_k_panel_tiled(w: &[&[BlockQ3K]; PANEL_ROWS], y: &[&[BlockQ8K]], out: &mut PanelOut) {
            // SAFETY: as above.
            unsafe { q3_k_panel_impl(w, y, out) }
        }

        wrap_rows!(q2_k_rows_impl => q2_k_rows, dot_q2_k_q8_k, BlockQ2K, BlockQ8K);
        wrap_rows!(q2_k_repacked_rows_impl => q2_k_repacked_rows, dot_q2_k_q8_k_repacked,
            BlockQ2K, BlockQ8K);
        wrap_rows!(q2_k_gemm_rows_impl => q2_k_gemm_rows, dot_q2_k_q8_k_gemm, BlockQ2K, BlockQ8K);
        wrap_rows!(q2_k_tiled_rows_impl => q2_k_tiled_rows, dot_q2_k_q8_k_tiled, BlockQ2K,
            BlockQ8K);
        wrap_rows!(q3_k_rows_impl => q3_k_rows, dot_q3_k_q8_k, BlockQ3K, BlockQ8K);
        wrap_rows!(q3_k_tiled_rows_impl => q3_k_tiled_rows, dot_q3_k_q8_k_tiled, BlockQ3K,
            BlockQ8K);
        wrap_rows!(q4_k_rows_impl => q4_k_rows, dot_q4_k_q8_k, BlockQ4K, BlockQ8K);
        wrap_rows!(q4_k_repacked_rows_impl => q4_k_repacked_rows, dot_q4_k_q8_k_repacked,
            BlockQ4K, BlockQ8K);
        wrap_rows!(q4_k_gemm_rows_impl => q4_k_gemm_rows, dot_q4_k_q8_k_gemm, BlockQ4K, BlockQ8K);
        wrap_rows!(q4_k_tiled_rows_impl => q4_k_tiled_rows, dot_q4_k_q8_k_tiled, BlockQ4K,
            BlockQ8K);
        wrap_rows!(q5_k_rows_impl => q5_k_rows, dot_q5_k_q8_k, BlockQ5K, BlockQ8K);
        wrap_rows!(q5_k_tiled_rows_impl => q5_k_tiled_rows, dot_q5_k_q8_k_tiled, BlockQ5K,
            BlockQ8K);
        wrap_rows!(q6_k_rows_impl => q6_k_rows, dot_q6_k_q8_k, BlockQ6K, BlockQ8K);
        wrap_rows!(q6_k_tiled_rows_impl => q6_k_tiled_rows, dot_q6_k_q8_k_tiled, BlockQ6K,
            BlockQ8K);
        wrap_rows!(iq4_xs_rows_impl => iq4_xs_rows, dot_iq4_xs_q8_k, BlockIq4Xs, BlockQ8K);
        wrap_rows!(iq4_xs_tiled_rows_impl => iq4_xs_tiled_rows, dot_iq4_xs_q8_k_tiled,
            BlockIq4Xs, BlockQ8K);

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
        // AVX-512 takes sixteen rows through `kpacked_tile::q3_k_rows` instead, which unpacks
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
