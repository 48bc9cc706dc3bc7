//! The tiles of Q4_0, Q4_1 and Q8_0 (R weight rows × T tokens per pass, in the lanes order and
//! Q4_0's block-chain order), written once as a macro ([`legacy_tiles`]) and expanded by each
//! tier over its own way of forming four-product integer sums (`avx2.rs`: `maddubs` +
//! `madd`; `avx512.rs`: VNNI's `vpdpbusd` with an offset correction). The sums are exact
//! integers either way, so both tiers run the same float operations, bit for bit the scalar
//! oracle's (`scalar.rs`).
//!
//! The primitives the expanding module (the macro's `super`) provides, all on 256-bit vectors:
//! - `q4_0_codes(qs)`, `q8_0_codes(qs)`: a weight block's 32 values as the tier's `sums`
//!   takes them (AVX2: signed, `q − 8` and `q`; VNNI: offset into u8, `q` and `q + 128`);
//! - `q4_0_correction(y)`, `q8_0_correction(y)`: what a token's block contributes to undo
//!   that offset (AVX2: nothing; VNNI: `−offset · Σ4 y` per lane);
//! - `sums(c, x, y)`: `Σ4 x·y` per i32 lane of signed codes (started from `c`);
//! - `sums_unsigned(x, y)`: the same of u8 codes `x` (Q4_1's nibbles).

/// The four tiles and their entry points, compiled with the target features `$feat`, over the
/// primitives of the module that expands it (see the module documentation).
macro_rules! legacy_tiles {
    ($feat:literal) => {
        use std::arch::x86_64::*;

        use super::{
            q4_0_codes, q4_0_correction, q8_0_codes, q8_0_correction, sums, sums_unsigned,
        };
        use crate::kernels::blocks::{BlockQ4_0, BlockQ4_1, BlockQ8_0, BlockQ8_1};
        use crate::kernels::x86_64::prefetch::Prefetch;
        use crate::kernels::x86_64::vec256::{
            bytes_from_nibbles_32, exact, hsum_float_8, hsum_i32_8x8_small, lanes, load_qs,
            scale_products, spill, TILE_LANES,
        };

        /// Tiled lanes-order dots of a block type `B` (Q4_0 or Q8_0 weights) against Q8_0
        /// activations, R rows × T tokens:
        /// ```text
        /// for each block i:
        ///   x[r] = codes(w[r][i])                                            once per row
        ///   y[t] = a[t][i].qs; c[t] = correction(y[t])                       once per token
        ///   d[t*R+r] = f16→f32(d(w[r][i])) · f16→f32(a[t][i].d)              one vector for all
        ///   acc[t][r] = fma(d[t*R+r], (f32) Σ4 x·y per lane, acc[t][r])        per output
        /// out[t][r] = hsum_float_8(acc[t][r])
        /// ```
        /// With one token (a tier's single-token passes) the rows stream from memory and are
        /// prefetched; tiles reuse theirs from cache.
        #[target_feature(enable = $feat)]
        #[inline]
        fn tile_lanes<B, const R: usize, const T: usize>(
            (w, a): (&[&[B]; R], &[&[BlockQ8_0]; T]),
            out: &mut [[f32; R]; T],
            d: impl Fn(&B) -> [u8; 2],
            codes: impl Fn(&B) -> __m256i,
            correction: impl Fn(__m256i) -> __m256i,
        ) {
            let n = a[0].len();
            let (w, a) = (exact(w, n), exact(a, n));
            let mut acc = [[_mm256_setzero_ps(); R]; T];
            let mut d_buf = [0f32; TILE_LANES];
            let pf = Prefetch::for_pass::<_, R, T>(&w);
            for i in 0..n {
                pf.at(i);
                let dp = spill(
                    scale_products(w.map(|w| d(&w[i])), a.map(|a| a[i].d)),
                    &mut d_buf,
                );
                let qx: [__m256i; R] = std::array::from_fn(|r| codes(&w[r][i]));
                for (t, acc_t) in acc.iter_mut().enumerate() {
                    let qy = load_qs(&a[t][i].qs);
                    let c = correction(qy);
                    for r in 0..R {
                        let q = _mm256_cvtepi32_ps(sums(c, qx[r], qy));
                        acc_t[r] = _mm256_fmadd_ps(_mm256_set1_ps(dp[t * R + r]), q, acc_t[r]);
                    }
                }
            }
            for (o, acc_t) in out.iter_mut().zip(&acc) {
                for (v, s) in o.iter_mut().zip(acc_t) {
                    *v = hsum_float_8(*s);
                }
            }
        }

        crate::kernels::x86_64::legacy_tiles::lanes_kernels! { $feat; tiles {
            /// Tiled Q4_0·Q8_0 (lanes order): [`tile_lanes`] of the codes `q − 8`.
            tile_q4_0_q8_0_impl(BlockQ4_0) = q4_0_codes, q4_0_correction;
            /// Tiled Q8_0·Q8_0 (lanes order): [`tile_lanes`] of the weights as they are loaded.
            tile_q8_0_q8_0_impl(BlockQ8_0) = q8_0_codes, q8_0_correction;
        }}

        /// Tiled Q4_1·Q8_1: the lanes as in [`tile_q4_0_q8_0_impl`] (nibbles unsigned, no
        /// offset), plus per output the chain `summs[t*R+r] += m_w[r]·s_a[t]` in block order
        /// (all R·T chains in one vector), added after the lanes' hsum.
        #[target_feature(enable = $feat)]
        pub(in crate::kernels::x86_64) fn tile_q4_1_q8_1_impl<const R: usize, const T: usize>(
            w: &[&[BlockQ4_1]; R],
            a: &[&[BlockQ8_1]; T],
            out: &mut [[f32; R]; T],
        ) {
            let n = a[0].len();
            let (w, a) = (exact(w, n), exact(a, n));
            let mut acc = [[_mm256_setzero_ps(); R]; T];
            let mut d_buf = [0f32; TILE_LANES];
            let mut summs = _mm256_setzero_ps();
            let pf = Prefetch::for_pass::<_, R, T>(&w);
            for i in 0..n {
                pf.at(i);
                let d = spill(
                    scale_products(w.map(|w| w[i].d), a.map(|a| a[i].d)),
                    &mut d_buf,
                );
                let ms = scale_products(w.map(|w| w[i].m), a.map(|a| a[i].s));
                summs = _mm256_add_ps(summs, ms);
                let qx: [__m256i; R] = std::array::from_fn(|r| bytes_from_nibbles_32(&w[r][i].qs));
                for (t, acc_t) in acc.iter_mut().enumerate() {
                    let qy = load_qs(&a[t][i].qs);
                    for r in 0..R {
                        let q = _mm256_cvtepi32_ps(sums_unsigned(qx[r], qy));
                        acc_t[r] = _mm256_fmadd_ps(_mm256_set1_ps(d[t * R + r]), q, acc_t[r]);
                    }
                }
            }
            let summs = lanes(summs);
            for (t, (o, acc_t)) in out.iter_mut().zip(&acc).enumerate() {
                for (r, (v, s)) in o.iter_mut().zip(acc_t).enumerate() {
                    *v = hsum_float_8(*s) + summs[t * R + r];
                }
            }
        }

        /// Tiled Q4_0·Q8_0 (block-chain order). The R·T chains run side by side in the lanes
        /// of one vector (lane `t*R + r`):
        /// ```text
        /// for each block i:
        ///   isum[t*R+r] = Σ_{32} (q − 8)·y[t]                (exact, reduced eight at a time)
        ///   acc = fma(isum, d, acc)                             (one vector fma for all chains)
        /// ```
        /// Each |q − 8| ≤ 8 and |y| ≤ 128, so a lane's four products stay within 4096.
        #[target_feature(enable = $feat)]
        pub(in crate::kernels::x86_64) fn tile_q4_0_q8_0_chain_impl<
            const R: usize,
            const T: usize,
        >(
            w: &[&[BlockQ4_0]; R],
            a: &[&[BlockQ8_0]; T],
            out: &mut [[f32; R]; T],
        ) {
            let n = a[0].len();
            let (w, a) = (exact(w, n), exact(a, n));
            let mut acc = _mm256_setzero_ps();
            let pf = Prefetch::for_pass::<_, R, T>(&w);
            for i in 0..n {
                pf.at(i);
                let d = scale_products(w.map(|w| w[i].d), a.map(|a| a[i].d));
                let qx: [__m256i; R] = std::array::from_fn(|r| q4_0_codes(&w[r][i].qs));
                let mut s = [_mm256_setzero_si256(); TILE_LANES];
                for (t, a_t) in a.iter().enumerate() {
                    let qy = load_qs(&a_t[i].qs);
                    let c = q4_0_correction(qy);
                    for (r, x) in qx.iter().enumerate() {
                        s[t * R + r] = sums(c, *x, qy);
                    }
                }
                let isum = _mm256_cvtepi32_ps(hsum_i32_8x8_small(s));
                acc = _mm256_fmadd_ps(isum, d, acc);
            }
            let acc = lanes(acc);
            for (t, o) in out.iter_mut().enumerate() {
                o.copy_from_slice(&acc[t * R..t * R + R]);
            }
        }

        crate::kernels::x86_64::entry_points::entry_points! {
            tiles {
                tile_q4_0_q8_0(BlockQ4_0, BlockQ8_0) = tile_q4_0_q8_0_impl;
                tile_q4_0_q8_0_chain(BlockQ4_0, BlockQ8_0) = tile_q4_0_q8_0_chain_impl;
                tile_q4_1_q8_1(BlockQ4_1, BlockQ8_1) = tile_q4_1_q8_1_impl;
                tile_q8_0_q8_0(BlockQ8_0, BlockQ8_0) = tile_q8_0_q8_0_impl;
            }
        }
    };
}
pub(super) use legacy_tiles;

/// Lanes-order kernels of a weight type against Q8_0 activations, `name(B) = codes,
/// correction;`: each the tier's lanes-order driver over block type `B`'s codes and their
/// correction (the primitives above), compiled with `$feat`. `tiles` are R × T tiles over
/// [`legacy_tiles`]' `tile_lanes`; `rows` are [`TILE_ROWS`](crate::kernels::TILE_ROWS)-row
/// single-token passes over the expanding module's `rows_lanes` (AVX-512's).
macro_rules! lanes_kernels {
    ($feat:literal; tiles { $($(#[$m:meta])* $name:ident($B:ty) = $codes:ident, $corr:ident;)* }) => {$(
        $(#[$m])*
        #[target_feature(enable = $feat)]
        pub(in crate::kernels::x86_64) fn $name<const R: usize, const T: usize>(
            w: &[&[$B]; R],
            a: &[&[BlockQ8_0]; T],
            out: &mut [[f32; R]; T],
        ) {
            tile_lanes((w, a), out, |b| b.d, |b| $codes(&b.qs), |y| $corr(y))
        }
    )*};
    ($feat:literal; rows { $($(#[$m:meta])* $name:ident($B:ty) = $codes:ident, $corr:ident;)* }) => {$(
        $(#[$m])*
        #[target_feature(enable = $feat)]
        fn $name(w: &[&[$B]; TILE_ROWS], a: &[BlockQ8_0], out: &mut [f32; TILE_ROWS]) {
            rows_lanes((w, a), out, |b| b.d, |b| $codes(&b.qs), |y| $corr(y))
        }
    )*};
}
pub(super) use lanes_kernels;
