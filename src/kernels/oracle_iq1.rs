//! Scalar oracles for the dot products of IQ1_S and IQ1_M with Q8_K activations, bit-identical
//! to llama.cpp's x86 `ggml_vec_dot_iq1_s_q8_K` and `ggml_vec_dot_iq1_m_q8_K` (the `__AVX2__`
//! branches of `ggml-cpu/arch/x86/quants.c`; an AVX-512 build compiles the same source, which
//! has no AVX-512 branch for them). The lanes are `oracle_vec_dot`'s: each 32-bit lane of the
//! integer accumulators holds the exact sum of the elements `e` with `(e mod 32) / 4` equal to
//! it, and the float work runs in the order of the compiled code (the release build's
//! disassembly: see each function). Their tiled matmul is `oracle_tiled::dot_iq1_q8_k_tiled`.
//!
//! Both kernels multiply a grid value (−1, 0, 1) by the activation with ggml's sign trick
//! (`maddubs(sign(x, x), sign(y, x))`), so an activation of −128 against a grid value of −1
//! gives −128 ([`sign_product`]); IQ1_M's delta term, `maddubs(1, sign(y, delta))`, wraps alike.
//! IQ1_S's delta term reads the activation's stored `bsums`.

use super::blocks::{scale, BlockIq1M, BlockIq1S, BlockQ8K, Iq1Grid, IQ1M_DELTA, IQ1S_DELTA};
use super::blocks::{IQ1_GROUP, IQ1_HALF, QK_K, SUB16, SUB32};
use super::oracle_vec_dot::{fma_lanes, lanes, sign_product, LANES};
use super::scalar::hsum_float_8;

/// Σ_super-blocks d·(Σ_s ls_s·Σ grid·q + 1/8·Σ_s ls_s·±bsum_s), as ggml's AVX2 kernel sums it:
/// ```text
/// d = y.d * x.d
/// sumi[l] = Σ_{e≡l} (2·ls[e/32] + 1)·sign_product(grid(e), q_y[e])
/// sumi1   = Σ_s (bsums[2s] + bsums[2s+1])·(±1)_s·(2·ls_s + 1)        (exact i32)
/// acc[l] = fma(d, sumi[l], acc[l]);  acc1 = fma(d, sumi1, acc1)
/// result = hsum_float_8(acc) + (0.125 * acc1)
/// ```
/// (`acc1 += d * sumi1` is contracted to `vfmadd231ss`; the last line is a `vmulss` then a
/// `vaddss`.)
pub fn dot_iq1_s_q8_k(x: &[BlockIq1S], y: &[BlockQ8K]) -> f32 {
    assert_eq!(x.len(), y.len(), "dot_iq1_s_q8_k length mismatch");
    let mut acc = [0f32; LANES];
    let mut acc1 = 0f32;
    for (a, b) in x.iter().zip(y) {
        let d = b.d * scale(a.d);
        let sumi = lanes(QK_K, |e| {
            a.odd_scale(e / IQ1_HALF) * sign_product(a.value(e), b.qs[e])
        });
        let sumi1 = (0..QK_K / SUB32).fold(0i32, |s, sb| {
            let per = SUB32 / SUB16;
            let bsum = b.bsums[per * sb..per * (sb + 1)]
                .iter()
                .fold(0i32, |t, &v| t + i32::from(v));
            let group = sb * SUB32 / IQ1_GROUP;
            let ls = a.odd_scale(sb * SUB32 / IQ1_HALF);
            s.wrapping_add(bsum * i32::from(a.delta_sign(group)) * ls)
        });
        fma_lanes(&mut acc, d, sumi);
        acc1 = d.mul_add(sumi1 as f32, acc1);
    }
    hsum_float_8(acc) + IQ1S_DELTA * acc1
}

/// Σ_super-blocks d·(Σ_h ls_h·Σ grid·q + 1/8·Σ_h ls_h·Σ ±q), as ggml's AVX2 kernel sums it:
/// ```text
/// d = y.d * fp16(the scale assembled from the top nibbles of `scales`)
/// sumi1[l] = Σ_{e≡l} (2·ls[e/16] + 1)·sign_product(grid(e), q_y[e])
/// sumi2[l] = Σ_{e≡l} (2·ls[e/16] + 1)·sign_product(±1 of e's group, q_y[e])
/// acc1[l] = fma(d, sumi1[l], acc1[l]);  acc2[l] = fma(d, sumi2[l], acc2[l])
/// result = fma(hsum_float_8(acc2), 0.125, hsum_float_8(acc1))
/// ```
/// (the last line's product and sum are contracted to one `vfmadd132ss`.)
pub fn dot_iq1_m_q8_k(x: &[BlockIq1M], y: &[BlockQ8K]) -> f32 {
    assert_eq!(x.len(), y.len(), "dot_iq1_m_q8_k length mismatch");
    let mut acc1 = [0f32; LANES];
    let mut acc2 = [0f32; LANES];
    for (a, b) in x.iter().zip(y) {
        let d = b.d * scale(a.d());
        let sumi1 = lanes(QK_K, |e| {
            a.odd_scale(e / IQ1_HALF) * sign_product(a.value(e), b.qs[e])
        });
        let sumi2 = lanes(QK_K, |e| {
            a.odd_scale(e / IQ1_HALF) * sign_product(a.delta_sign(e / IQ1_GROUP), b.qs[e])
        });
        fma_lanes(&mut acc1, d, sumi1);
        fma_lanes(&mut acc2, d, sumi2);
    }
    hsum_float_8(acc2).mul_add(IQ1M_DELTA, hsum_float_8(acc1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::dequantize::dequantize_iq1;
    use crate::kernels::half::f32_to_f16;
    use crate::kernels::oracle_tiled::dot_iq1_q8_k_tiled;
    use crate::kernels::test_util::{weights, XorShift as Rng};

    /// Sets IQ1_M's f16 scale to `h`: nibble w of `h` into the top of `scales` word w.
    fn set_iq1_m_d(b: &mut BlockIq1M, h: u16) {
        for w in 0..4 {
            let word = b.scale_word(w) & 0x0fff | ((h >> (4 * w)) & 0xf) << 12;
            b.scales[2 * w..2 * w + 2].copy_from_slice(&word.to_le_bytes());
        }
    }

    /// IQ1_M blocks, block by block: every byte drawn as [`weights`] draws them, then the f16
    /// scale by `h`.
    fn iq1_m(r: &mut Rng, nb: usize, h: fn(&mut Rng) -> u16) -> Vec<BlockIq1M> {
        let mut block = |_| {
            let mut b = weights::<BlockIq1M>(r, 1, &[], |_| 0)[0];
            set_iq1_m_d(&mut b, h(r));
            b
        };
        (0..nb).map(&mut block).collect()
    }

    /// Q8_K blocks with consistent `bsums`: quants −127..=127 (−128..=127 with `lo` = 1),
    /// then `d` by `d`.
    fn q8_k(r: &mut Rng, nb: usize, lo: u64, d: fn(&mut Rng) -> f32) -> Vec<BlockQ8K> {
        let mut block = |_| {
            let qs: [i8; QK_K] =
                std::array::from_fn(|_| ((r.next() % (255 + lo)) as i32 - 127 - lo as i32) as i8);
            let sub = |j: usize| qs[SUB16 * j..SUB16 * (j + 1)].iter().map(|&q| i16::from(q));
            let bsums = std::array::from_fn(|j| sub(j).sum());
            BlockQ8K { d: d(r), qs, bsums }
        };
        (0..nb).map(&mut block).collect()
    }

    /// The known-answer harness's scale tables (f16 bits; Q8_K's f32 `d`), as `oracle_vec_dot`'s.
    fn kat_h(r: &mut Rng) -> u16 {
        r.pick(&[0x3c00, 0xb800, 0, 0x2e66, 0x1c00, 0xa14f, 0x3555, 1])
    }
    fn kat_d(r: &mut Rng) -> f32 {
        r.pick(&[0.0123, -0.5, 0.0, 0.003, 1.0, -0.00075, 0.0371, 2.5])
    }
    /// Realistic scales: |v| in [0.001, 0.1] (f16) or [0.001, 0.011] (f32), some negative.
    fn real_h(r: &mut Rng) -> u16 {
        let v = 1e-3 + (r.next() % 1000) as f32 * 1e-4;
        f32_to_f16([v, v, v, -v][(r.next() % 4) as usize])
    }
    fn real_d(r: &mut Rng) -> f32 {
        let v = 1e-3 + (r.next() % 1000) as f32 * 1e-5;
        [v, v, v, v, -v][(r.next() % 5) as usize]
    }

    /// The two types' three dot products on the harness's inputs for seeds `base + nb`.
    fn kat_outputs(base: u64, lo: u64) -> Vec<u32> {
        let mut out = Vec::new();
        for nb in [1usize, 2, 5, 7] {
            let mut r = Rng(base + nb as u64);
            let x = weights::<BlockIq1S>(&mut r, nb, &[0], kat_h);
            let y = q8_k(&mut r, nb, lo, kat_d);
            out.push(dot_iq1_s_q8_k(&x, &y).to_bits());
            out.push(dot_iq1_q8_k_tiled(&x, &y).to_bits());
            let mut r = Rng(base + 100 + nb as u64);
            let x = iq1_m(&mut r, nb, kat_h);
            let y = q8_k(&mut r, nb, lo, kat_d);
            out.push(dot_iq1_m_q8_k(&x, &y).to_bits());
            out.push(dot_iq1_q8_k_tiled(&x, &y).to_bits());
        }
        out
    }

    // Known answers: llama.cpp's `ggml_vec_dot_iq1_s_q8_K` / `_iq1_m_q8_K` from its release
    // build on this machine (-march=native, AVX-512 VNNI), run by a C harness on the inputs these
    // tests regenerate (xorshift64 seeded with `base + nb` (IQ1_M: `base + 100 + nb`) fills each
    // weight block's bytes, then its f16 scale (kat_h; IQ1_M's into the top nibbles of its
    // `scales` words); each activation block draws its quants, then `d` (kat_d), then sums its
    // bsums), and the same products by the arithmetic of the tiled kernel
    // (`tiled_run_micro_vnni_8x16`: see `oracle_tiled`) written out in C.
    #[test]
    fn known_answers_from_llama_cpp() {
        let want: [u32; 16] = KAT;
        assert_eq!(kat_outputs(11_000, 0), want);
        let want: [u32; 16] = KAT_WRAP;
        assert_eq!(kat_outputs(12_000, 1), want);
    }

    const KAT: [u32; 16] = [
        0x00000000, 0x00000000, 0xc5f2e151, 0xc5f2e150, 0xc55c813d, 0xc55c813d, 0x428ac36b,
        0x428ac36b, 0x459c95a2, 0x459c95a2, 0xc18c8050, 0xc18c8056, 0xc64b1351, 0xc64b1351,
        0x4681095e, 0x4681095e,
    ];
    const KAT_WRAP: [u32; 16] = [
        0x00000000, 0x00000000, 0x429bec8c, 0x429bec8d, 0x00000000, 0x00000000, 0x42413e05,
        0x42413e05, 0x3f96f6e8, 0x3fc81abf, 0xc58fb64c, 0xc5901007, 0x44fc93a2, 0x44fc90b0,
        0xc48c36d6, 0xc48be167,
    ];

    /// The exact dot of the dequantized weights with the activation values, in f64.
    fn exact<B: Iq1Grid>(x: &[B], y: &[BlockQ8K]) -> (f64, f64) {
        let mut w = vec![0f32; x.len() * QK_K];
        dequantize_iq1(x, &mut w);
        let a = y
            .iter()
            .flat_map(|b| b.qs.map(|q| f64::from(b.d) * f64::from(q)));
        w.iter().zip(a).fold((0.0, 0.0), |(s, m), (&w, a)| {
            (s + f64::from(w) * a, m + (f64::from(w) * a).abs())
        })
    }

    #[test]
    fn every_dot_is_close_to_the_exact_dot_of_the_dequantized_values() {
        let r = &mut Rng(0x1c1c_9e37_79b9_7f4a);
        for case in 0..200 {
            let nb = 1 + case % 5;
            let x = weights::<BlockIq1S>(r, nb, &[0], real_h);
            let y = q8_k(r, nb, 0, real_d);
            let (e, size) = exact(&x, &y);
            let tol = 1e-5 * size + f64::from(f32::MIN_POSITIVE);
            for (name, got) in [
                ("IQ1_S", dot_iq1_s_q8_k(&x, &y)),
                ("IQ1_S tiled", dot_iq1_q8_k_tiled(&x, &y)),
            ] {
                let err = (f64::from(got) - e).abs();
                assert!(err <= tol, "{name}: {got:e} vs exact {e:e} (tol {tol:e})");
            }
            let x = iq1_m(r, nb, real_h);
            let (e, size) = exact(&x, &y);
            let tol = 1e-5 * size + f64::from(f32::MIN_POSITIVE);
            for (name, got) in [
                ("IQ1_M", dot_iq1_m_q8_k(&x, &y)),
                ("IQ1_M tiled", dot_iq1_q8_k_tiled(&x, &y)),
            ] {
                let err = (f64::from(got) - e).abs();
                assert!(err <= tol, "{name}: {got:e} vs exact {e:e} (tol {tol:e})");
            }
        }
    }

    /// The fields as ggml's `dequantize_row_iq1_s`/`_iq1_m` read them, on hand-set blocks.
    #[test]
    fn the_fields_sit_where_ggml_reads_them() {
        let mut s = BlockIq1S::default();
        // Sub-block 1: index tops 5, 2, 7, 1 of its four groups, ls = 6, delta negative.
        let word: u16 = 5 | 2 << 3 | 7 << 6 | 1 << 9 | 6 << 12 | 0x8000;
        s.qh[2..4].copy_from_slice(&word.to_le_bytes());
        s.qs[4..8].copy_from_slice(&[0x10, 0x20, 0x30, 0x40]);
        let tops: Vec<usize> = (4..8).map(|g| s.grid_index(g) >> 8).collect();
        assert_eq!(tops, [5, 2, 7, 1]);
        assert_eq!(s.grid_index(6) & 0xff, 0x30);
        assert_eq!((s.ls(2), s.ls(3), s.ls(0)), (6, 6, 0));
        assert_eq!(
            (s.delta_sign(4), s.delta_sign(7), s.delta_sign(3)),
            (-1, -1, 1)
        );

        let mut m = BlockIq1M::default();
        // qh[3] holds groups 6 (low nibble: top 3, delta +) and 7 (top 6, delta −).
        m.qh[3] = 0x03 | 0xe0;
        assert_eq!((m.grid_index(6) >> 8, m.grid_index(7) >> 8), (3, 6));
        assert_eq!((m.delta_sign(6), m.delta_sign(7)), (1, -1));
        // Word 1 (halves 4..8): scales 1, 2, 3, 4; the f16 1.0 (0x3c00) over the four tops.
        let word: u16 = 1 | 2 << 3 | 3 << 6 | 4 << 9;
        m.scales[2..4].copy_from_slice(&word.to_le_bytes());
        set_iq1_m_d(&mut m, 0x3c00);
        assert_eq!((4..8).map(|h| m.ls(h)).collect::<Vec<_>>(), [1, 2, 3, 4]);
        assert_eq!(m.d(), 0x3c00u16.to_le_bytes());
        let mut y = vec![0f32; QK_K];
        dequantize_iq1(std::slice::from_ref(&m), &mut y);
        // Group 7 (half 3, ls = 0 in word 0): 1 × (grid − 1/8).
        let g7 = crate::kernels::iq_grids::IQ1S_GRID[m.grid_index(7)].to_le_bytes();
        for j in 0..8 {
            assert_eq!(y[56 + j], f32::from(g7[j] as i8) - 0.125);
        }
    }

    /// Zero scales give zero on every path, whatever the bytes.
    #[test]
    fn zero_scales_give_zero() {
        let r = &mut Rng(7);
        for nb in [1, 3] {
            let y = q8_k(r, nb, 1, real_d);
            let x = weights::<BlockIq1S>(r, nb, &[0], |_| 0);
            assert_eq!(dot_iq1_s_q8_k(&x, &y), 0.0);
            assert_eq!(dot_iq1_q8_k_tiled(&x, &y), 0.0);
            let x = iq1_m(r, nb, |_| 0);
            assert_eq!(dot_iq1_m_q8_k(&x, &y), 0.0);
            assert_eq!(dot_iq1_q8_k_tiled(&x, &y), 0.0);
        }
    }
}
