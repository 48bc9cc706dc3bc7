//! Non-matmul operations of a transformer layer, with ggml's exact arithmetic (see
//! `ggml_math`): RMSNorm sums squares in f64, softmax and SiLU use ggml's vectorised
//! exponential, RoPE angles advance by repeated multiplication in f32 and rotate (normal or NEOX
//! pairs) with the multiply-adds llama.cpp's build fuses.

use super::ggml_math;

/// `y = x / sqrt(mean(x²) + eps) * w` (ggml `rms_norm` fused with the weight multiply).
pub fn rms_norm(x: &[f32], w: &[f32], eps: f32, y: &mut [f32]) {
    let sum: f64 = x.iter().map(|&v| (v * v) as f64).sum();
    let mean = (sum / x.len() as f64) as f32;
    let scale = 1.0 / (mean + eps).sqrt();
    for ((o, &v), &wi) in y.iter_mut().zip(x).zip(w) {
        *o = v * scale * wi;
    }
}

/// `y = x / rms(x)`: ggml's `rms_norm` without a weight (the sum of squares in f64, then one
/// scale), the same arithmetic as [`rms_norm`] with weights of 1.
pub fn rms_norm_unweighted(x: &[f32], eps: f32, y: &mut [f32]) {
    let sum: f64 = x.iter().map(|&v| (v * v) as f64).sum();
    let mean = (sum / x.len() as f64) as f32;
    let scale = 1.0 / (mean + eps).sqrt();
    for (o, &v) in y.iter_mut().zip(x) {
        *o = v * scale;
    }
}

/// Precomputed inverse frequencies for RoPE. Pair `i` turns by the cache's angle `i` in either
/// ordering: "normal" rotates the pairs `(2i, 2i+1)` ([`Rope::apply`]), NEOX the pairs
/// `(i, i + n_dims/2)` ([`Rope::apply_neox`]).
#[derive(Clone, Debug)]
pub struct Rope {
    /// Rotated dimensions per head (`rope.dimension_count`); the rest pass through.
    pub n_dims: usize,
    /// `freq_base^(-2/n_dims)`.
    theta_scale: f32,
    /// Position scale (`1/rope.scaling.factor` for linear scaling, else 1).
    freq_scale: f32,
    /// Per-pair divisors (Llama-3 `rope_freqs`), if the model has them.
    freq_factors: Option<Vec<f32>>,
    /// YaRN's blend of interpolated and extrapolated angles, where the model scales so.
    yarn: Option<YarnCache>,
}

/// YaRN's parameters as ggml's RoPE takes them (`ggml_rope_ext`: `ext_factor`, `attn_factor`,
/// `beta_fast`, `beta_slow`, `n_ctx_orig`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct YarnParams {
    pub ext_factor: f32,
    pub attn_factor: f32,
    pub beta_fast: f32,
    pub beta_slow: f32,
    pub n_ctx_orig: usize,
}

/// What ggml's `rope_cache_init` derives from [`YarnParams`] once per call.
#[derive(Clone, Copy, Debug)]
struct YarnCache {
    /// The pair indices where the blend starts and ends (`ggml_rope_yarn_corr_dims`).
    corr: [f32; 2],
    ext_factor: f32,
    /// The factor on every cos and sin.
    mscale: f32,
}

/// The dimension whose wavelength fits `n_rot` turns into `n_ctx_orig` positions
/// (`ggml_rope_yarn_corr_dim`, ggml-base's arithmetic: no fused multiply-adds).
fn yarn_corr_dim(n_dims: usize, n_ctx_orig: usize, n_rot: f32, base: f32) -> f32 {
    let pi = std::f32::consts::PI;
    n_dims as f32 * (n_ctx_orig as f32 / (n_rot * 2.0 * pi)).ln() / (2.0 * base.ln())
}

impl YarnCache {
    fn new(y: &YarnParams, n_dims: usize, freq_base: f32, freq_scale: f32) -> YarnCache {
        let start = yarn_corr_dim(n_dims, y.n_ctx_orig, y.beta_fast, freq_base).floor();
        let end = yarn_corr_dim(n_dims, y.n_ctx_orig, y.beta_slow, freq_base).ceil();
        // ggml-cpu's build fuses `1 + 0.1·ln(1/s)` into one multiply-add.
        let mscale = match y.ext_factor != 0.0 {
            true => 0.1f32.mul_add((1.0 / freq_scale).ln(), 1.0) * y.attn_factor,
            false => y.attn_factor,
        };
        YarnCache {
            corr: [start.max(0.0), end.min(n_dims as f32 - 1.0)],
            ext_factor: y.ext_factor,
            mscale,
        }
    }

    /// Pair `i`'s angle from its extrapolated (unscaled) one, as ggml's `rope_yarn` blends it
    /// (the blend's multiply-add fused, as ggml-cpu's build compiles it).
    fn angle(&self, i: usize, extrap: f32, freq_scale: f32) -> f32 {
        let interp = freq_scale * extrap;
        if self.ext_factor == 0.0 {
            return interp;
        }
        let [low, high] = self.corr;
        let y = (i as f32 - low) / 0.001f32.max(high - low);
        let ramp_mix = if y < 0.0 {
            self.ext_factor
        } else if y <= 1.0 {
            (1.0 - y) * self.ext_factor
        } else {
            0.0 * self.ext_factor
        };
        interp.mul_add(1.0 - ramp_mix, extrap * ramp_mix)
    }
}

impl Rope {
    pub fn new(
        n_dims: usize,
        freq_base: f32,
        freq_scale: f32,
        freq_factors: Option<Vec<f32>>,
    ) -> Rope {
        Rope {
            n_dims,
            theta_scale: freq_base.powf(-2.0 / n_dims as f32),
            freq_scale,
            freq_factors,
            yarn: None,
        }
    }

    /// [`Rope::new`] with YaRN's scaling (`freq_scale` is then 1/`rope.scaling.factor`).
    pub fn with_yarn(
        n_dims: usize,
        (freq_base, freq_scale): (f32, f32),
        freq_factors: Option<Vec<f32>>,
        yarn: &YarnParams,
    ) -> Rope {
        Rope {
            yarn: Some(YarnCache::new(yarn, n_dims, freq_base, freq_scale)),
            ..Rope::new(n_dims, freq_base, freq_scale, freq_factors)
        }
    }

    /// (cos, sin) for each rotated pair at position `pos`, as ggml's `rope_cache_init`.
    pub fn cache(&self, pos: usize, out: &mut Vec<(f32, f32)>) {
        out.clear();
        self.append_cache(pos, out);
    }

    /// Like [`Rope::cache`], appending to `out` (one buffer for a whole batch of positions).
    pub fn append_cache(&self, pos: usize, out: &mut Vec<(f32, f32)>) {
        let mut theta = pos as f32;
        for i in 0..self.n_dims / 2 {
            let ff = self.freq_factors.as_ref().map_or(1.0, |f| f[i]);
            match &self.yarn {
                None => {
                    let t = self.freq_scale * (theta / ff);
                    out.push((t.cos(), t.sin()));
                }
                Some(y) => {
                    let t = y.angle(i, theta / ff, self.freq_scale);
                    out.push((t.cos() * y.mscale, t.sin() * y.mscale));
                }
            }
            theta *= self.theta_scale;
        }
    }

    /// Rotates every head of `x` (`n_heads × head_dim`, contiguous) in place: the scalar
    /// model of [`crate::kernels::Kernels::rope`].
    pub fn apply(&self, cache: &[(f32, f32)], x: &mut [f32], head_dim: usize) {
        ggml_math::rope(cache, x, head_dim)
    }

    /// Rotates every head of `x` with the NEOX pairing, pairs `(i, i + n_dims/2)`, by the same
    /// cache: the scalar model of [`crate::kernels::Kernels::rope_neox`].
    pub fn apply_neox(&self, cache: &[(f32, f32)], x: &mut [f32], head_dim: usize) {
        ggml_math::rope_neox(cache, x, head_dim)
    }
}

/// `out[j] += p × (q[j] × d)` over the blocks of one Q8_0 row (each value `q × d` exactly as
/// ggml dequantizes it): the weighted sum of value rows of a q8_0 KV cache, one position at a
/// time. The scalar oracle; the SIMD tiers compile this same loop wider
/// ([`super::Kernels::kv_add_q8_0`]), elementwise without fused multiply-adds, so every tier
/// gives these bits.
#[inline(always)]
pub fn add_scaled_q8_0(row: &[super::blocks::BlockQ8_0], p: f32, out: &mut [f32]) {
    use super::blocks::{self, QK};
    assert_eq!(row.len() * QK, out.len(), "add_scaled_q8_0 length mismatch");
    for (b, o) in row.iter().zip(out.chunks_exact_mut(QK)) {
        let d = blocks::scale(b.d);
        for (o, &q) in o.iter_mut().zip(&b.qs) {
            *o += p * (q as f32 * d);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rms_norm_unit_weight_gives_unit_rms() {
        let x: Vec<f32> = (0..64).map(|i| (i as f32 - 20.0) * 0.37).collect();
        let w = vec![1.0; 64];
        let mut y = vec![0.0; 64];
        rms_norm(&x, &w, 0.0, &mut y);
        let rms = (y.iter().map(|v| (v * v) as f64).sum::<f64>() / 64.0).sqrt();
        assert!((rms - 1.0).abs() < 1e-5, "rms = {rms}");
    }

    #[test]
    fn softmax_sums_to_one_and_orders() {
        let mut x = vec![1.0, 3.0, 2.0, -1.0];
        ggml_math::softmax(&mut x, 0.5);
        assert!((x.iter().sum::<f32>() - 1.0).abs() < 1e-6);
        assert!(x[1] > x[2] && x[2] > x[0] && x[0] > x[3]);
    }

    #[test]
    fn rope_preserves_pair_norms_and_is_identity_at_zero() {
        let rope = Rope::new(8, 10000.0, 1.0, None);
        let mut cache = Vec::new();
        rope.cache(0, &mut cache);
        let orig: Vec<f32> = (0..16).map(|i| i as f32 * 0.1 - 0.5).collect();
        let mut x = orig.clone();
        rope.apply(&cache, &mut x, 16);
        assert_eq!(x, orig);
        rope.cache(17, &mut cache);
        rope.apply(&cache, &mut x, 16);
        for i in 0..4 {
            let a = orig[2 * i].hypot(orig[2 * i + 1]);
            let b = x[2 * i].hypot(x[2 * i + 1]);
            assert!((a - b).abs() < 1e-5);
        }
        assert_eq!(&x[8..], &orig[8..], "dims past n_dims pass through");
    }
}
