//! Bit-exact scalar models of the ggml CPU arithmetic that llama.cpp runs on x86-64 with
//! AVX-512 (the build our golden data comes from). Small models quantize activations to int8,
//! so a one-ulp difference anywhere can flip a rounding and change the next token; matching
//! llama.cpp token for token therefore means matching each operation's exact float sequence:
//!
//! - `expf`: ggml's vectorised exponential (`ggml_v_expf`, AVX-512 form: a degree-5 polynomial
//!   on a two-constant range reduction, scaled with `scalef`), used by SiLU and softmax;
//! - 16-lane reductions in the order GCC's `_mm512_reduce_add_ps` adds them;
//! - f16 attention dot products: `ggml_vec_dot_f16` (four 16-lane accumulators) for one token,
//!   tinyBLAS (one 16-lane accumulator) for a batch of tokens;
//! - RoPE (normal and NEOX pairings) with the multiply-adds GCC fused in `rotate_pairs`.

use super::half::{bf16_to_f32, f16_to_f32, f32_to_f16};

/// IEEE binary64 exponent bias and mantissa width (for building powers of two).
const F64_EXP_BIAS: i64 = 1023;
const F64_MANTISSA_BITS: u32 = 52;

/// `ggml_v_expf` (AVX-512 form) for one lane.
///
/// The `#[inline(always)]` functions here are also compiled inside the x86 tiers' FMA-enabled
/// wrappers, where `mul_add` becomes one instruction instead of a libm call; the bits are the
/// same either way (a fused multiply-add is exact by definition).
#[inline(always)]
pub fn expf(x: f32) -> f32 {
    let r = f32::from_bits(0x4b40_0000); // 0x1.8p23
    let z = x.mul_add(f32::from_bits(0x3fb8_aa3b), r); // x·log2(e) + 0x1.8p23
    let n = z - r;
    let b = (-n).mul_add(f32::from_bits(0x3f31_7200), x); // x − n·0x1.62e4p-1
    let b = (-n).mul_add(f32::from_bits(0x35bf_be8e), b); // − n·0x1.7f7d1cp-20
    if n.abs() > 192.0 {
        // Far out of range: ggml returns +inf above, 0 at or below zero (−inf input included).
        return if n <= 0.0 { 0.0 } else { f32::INFINITY };
    }
    let u = b * b;
    let p = f32::from_bits(0x3c07_2010).mul_add(b, f32::from_bits(0x3d2b_9f17)); // c5·b + c4
    let q = f32::from_bits(0x3e2a_af33).mul_add(b, f32::from_bits(0x3eff_fedb)); // c3·b + c2
    let s = f32::from_bits(0x3f7f_fff6).mul_add(b, 1.0); // c1·b + 1
    let j = p.mul_add(u, q).mul_add(u, s);
    // scalef(j, n) = j · 2^n, rounded once: 2^n built from its bits (|n| ≤ 192 here), the
    // product exact in f64, then one rounding to f32.
    let pow2 = f64::from_bits(((n as i64 + F64_EXP_BIAS) as u64) << F64_MANTISSA_BITS);
    (j as f64 * pow2) as f32
}

/// SiLU as `ggml_v_silu`: x / (1 + expf(0 − x)).
#[inline(always)]
pub fn silu(x: f32) -> f32 {
    x / (1.0 + expf(0.0 - x))
}

/// SiLU of the elements that ggml leaves to its scalar tail (libm `expf`).
#[inline]
pub fn silu_tail(x: f32) -> f32 {
    x / (1.0 + (-x).exp())
}

/// `_mm512_reduce_add_ps` as GCC expands it: halves, quarters, then pairs.
#[inline]
pub fn reduce16(a: &[f32; 16]) -> f32 {
    let mut t = [0f32; 8];
    for i in 0..8 {
        t[i] = a[i] + a[8 + i];
    }
    let u = [t[0] + t[4], t[1] + t[5], t[2] + t[6], t[3] + t[7]];
    (u[0] + u[2]) + (u[1] + u[3])
}

/// `ggml_vec_dot_f16` (AVX-512): four 16-lane accumulators over steps of 64, combined as
/// (0+2)+(1+3), reduced, with leftovers (past a multiple of 64) added in f64. `x` holds f16
/// bits, `y` f16 values already widened to f32; `n_pad` ≥ len is the length ggml sees (extra
/// elements are zeros and contribute exactly nothing to the accumulators).
pub fn dot_f16_gemv(x: &[u16], y: &[f32], n_pad: usize) -> f32 {
    let n = x.len().min(y.len());
    let np = n_pad / 64 * 64;
    let mut acc = [[0f32; 16]; 4];
    for i in 0..n.min(np) {
        let (j, lane) = ((i % 64) / 16, i % 16);
        acc[j][lane] = f16_to_f32(x[i]).mul_add(y[i], acc[j][lane]);
    }
    let mut s = [0f32; 16];
    for l in 0..16 {
        s[l] = (acc[0][l] + acc[2][l]) + (acc[1][l] + acc[3][l]);
    }
    let mut sum = reduce16(&s) as f64;
    for i in np..n {
        sum += (f16_to_f32(x[i]) * y[i]) as f64;
    }
    sum as f32
}

/// `ggml_vec_dot_f32` (AVX-512): four 16-lane accumulators over steps of 64, combined as
/// (0+2)+(1+3), reduced, then the leftovers (past a multiple of 64) added one at a time in f32
/// with a multiply-add each (GCC contracts `sumf += x[i]*y[i]` on an FMA build). llama.cpp runs
/// it for f32 weights that tinyBLAS declines ([`dot_f32_gemm`]).
#[inline(always)]
pub fn dot_f32_vec(x: &[f32], y: &[f32]) -> f32 {
    let n = x.len().min(y.len());
    let np = n / 64 * 64;
    let mut acc = [[0f32; 16]; 4];
    for i in 0..np {
        let (j, lane) = ((i % 64) / 16, i % 16);
        acc[j][lane] = x[i].mul_add(y[i], acc[j][lane]);
    }
    let mut s = [0f32; 16];
    for l in 0..16 {
        s[l] = (acc[0][l] + acc[2][l]) + (acc[1][l] + acc[3][l]);
    }
    let mut sum = reduce16(&s);
    for i in np..n {
        sum = x[i].mul_add(y[i], sum);
    }
    sum
}

/// tinyBLAS's f16 GEMM element (AVX-512): one 16-lane accumulator, a multiply-add per lane per
/// step of 16, then [`reduce16`]. Requires the (padded) length to be a multiple of 16.
pub fn dot_f16_gemm(x: &[u16], y: &[f32]) -> f32 {
    gemm_order(x.iter().map(|&h| f16_to_f32(h)), y)
}

/// [`dot_f16_gemm`] of values already widened to f32 (the widening is exact, so the results
/// are the same bits).
pub fn dot_f32_gemm(x: &[f32], y: &[f32]) -> f32 {
    gemm_order(x.iter().copied(), y)
}

#[inline(always)]
fn gemm_order(x: impl Iterator<Item = f32>, y: &[f32]) -> f32 {
    let mut acc = [0f32; 16];
    for (i, (a, b)) in x.zip(y).enumerate() {
        acc[i % 16] = a.mul_add(*b, acc[i % 16]);
    }
    reduce16(&acc)
}

/// `v`, or a zero of its sign where it is below f32's normal range (the denormals-are-zero and
/// flush-to-zero of `vdpbf16ps`).
#[inline(always)]
fn flush(v: f32) -> f32 {
    if v.abs() < f32::MIN_POSITIVE {
        0f32.copysign(v)
    } else {
        v
    }
}

/// One lane of `_mm512_dpbf16_ps`: `acc + x[1]·y[1]`, then `+ x[0]·y[0]` (the odd element of
/// the pair first, as measured on this Zen 5), each sum rounded to nearest even. A product of
/// two bf16 values is exact in f32, so each step is one fused multiply-add.
#[inline(always)]
fn dpbf16_lane(acc: f32, x: [u16; 2], y: [f32; 2]) -> f32 {
    let w = |h: u16| flush(bf16_to_f32(h));
    let s = flush(w(x[1]).mul_add(flush(y[1]), acc));
    flush(w(x[0]).mul_add(flush(y[0]), s))
}

/// Lanes of a `vdpbf16ps` accumulator.
const BF16_LANES: usize = 16;
/// bf16 values one `vdpbf16ps` consumes (a pair per lane).
const BF16_STEP: usize = 2 * BF16_LANES;

/// `acc` after one `vdpbf16ps` over the 32 values from `x[i]` and `y[i]`.
#[inline(always)]
fn dpbf16_step(acc: &mut [f32; BF16_LANES], x: &[u16], y: &[f32], i: usize) {
    for (j, a) in acc.iter_mut().enumerate() {
        let k = i + 2 * j;
        *a = dpbf16_lane(*a, [x[k], x[k + 1]], [y[k], y[k + 1]]);
    }
}

/// `ggml_vec_dot_bf16` (AVX512_BF16): two `vdpbf16ps` accumulators over steps of 64 (the first
/// over each step's first 32 values), each reduced by [`reduce16`] and added in f64, then the
/// leftovers' products added in f64. `x` holds bf16 bits, `y` bf16 values widened to f32.
#[inline(always)]
pub fn dot_bf16_vec(x: &[u16], y: &[f32]) -> f32 {
    let n = x.len().min(y.len());
    let np = n / (2 * BF16_STEP) * (2 * BF16_STEP);
    let mut c = [[0f32; BF16_LANES]; 2];
    for i in (0..np).step_by(2 * BF16_STEP) {
        dpbf16_step(&mut c[0], x, y, i);
        dpbf16_step(&mut c[1], x, y, i + BF16_STEP);
    }
    let mut sum = reduce16(&c[0]) as f64;
    sum += reduce16(&c[1]) as f64;
    for i in np..n {
        sum += (bf16_to_f32(x[i]) * y[i]) as f64;
    }
    sum as f32
}

/// tinyBLAS's bf16 GEMM element (its AVX512_BF16 instance, 32 values a step): one
/// `vdpbf16ps` accumulator, then [`reduce16`]. Requires the length to be a multiple of 32.
#[inline(always)]
pub fn dot_bf16_gemm(x: &[u16], y: &[f32]) -> f32 {
    let n = x.len().min(y.len());
    let mut acc = [0f32; BF16_LANES];
    for i in (0..n / BF16_STEP * BF16_STEP).step_by(BF16_STEP) {
        dpbf16_step(&mut acc, x, y, i);
    }
    reduce16(&acc)
}

/// Softmax of `x · scale` as ggml's `soft_max` (no mask values inside `x`; masked positions of
/// ggml's padded row are exact zeros after the exponential). Exponentials by [`expf`], sums of
/// 16-lane blocks reduced by [`reduce16`] and accumulated in f64, then scaled by 1/sum.
#[inline(always)]
pub fn softmax(x: &mut [f32], scale: f32) {
    let mut max = f32::NEG_INFINITY;
    for v in x.iter_mut() {
        *v *= scale;
        max = max.max(*v);
    }
    let mut sum = 0f64;
    for block in x.chunks_mut(16) {
        let mut lanes = [0f32; 16];
        for (l, v) in block.iter_mut().enumerate() {
            *v = expf(*v - max);
            lanes[l] = *v;
        }
        sum += reduce16(&lanes) as f64;
    }
    let inv = (1.0 / sum) as f32;
    for v in x.iter_mut() {
        *v *= inv;
    }
}

/// [`softmax`] with an attention sink (ggml's `soft_max_ext` with `src2`, gpt-oss): the row's
/// maximum is raised to `sink` where it is larger, and `expf(sink − max)` (libm) is added to the
/// f64 sum after the blocks, as if the sink were one more score whose probability is dropped.
#[inline(always)]
pub fn softmax_sink(x: &mut [f32], scale: f32, sink: f32) {
    let mut max = f32::NEG_INFINITY;
    for v in x.iter_mut() {
        *v *= scale;
        max = max.max(*v);
    }
    // ggml's `MAX(max, sk)`: `max > sk ? max : sk`.
    let max = if max > sink { max } else { sink };
    let mut sum = 0f64;
    for block in x.chunks_mut(16) {
        let mut lanes = [0f32; 16];
        for (l, v) in block.iter_mut().enumerate() {
            *v = expf(*v - max);
            lanes[l] = *v;
        }
        sum += reduce16(&lanes) as f64;
    }
    sum += (sink - max).exp() as f64;
    let inv = (1.0 / sum) as f32;
    for v in x.iter_mut() {
        *v *= inv;
    }
}

/// ggml's `swiglu_oai` of one row (gpt-oss's experts), element by element with libm's `expf`:
/// `x = min(gate, limit)`, `y = clamp(up, −limit, limit)`, `gate = x / (1 + expf(alpha · −x)) ·
/// (y + 1)`.
#[inline]
pub fn swiglu_oai(gate: &mut [f32], up: &[f32], alpha: f32, limit: f32) {
    for (g, &u) in gate.iter_mut().zip(up) {
        // std::min(g, limit) and std::clamp(u, -limit, limit).
        let x = if limit < *g { limit } else { *g };
        let y = if u < -limit {
            -limit
        } else if limit < u {
            limit
        } else {
            u
        };
        let glu = x / (1.0 + (alpha * -x).exp());
        *g = glu * (y + 1.0);
    }
}

/// Rounds to f16 and back (ggml converts an f32 operand to the f16 cache type).
#[inline]
pub fn round_f16(v: f32) -> f32 {
    f16_to_f32(f32_to_f16(v))
}

/// `gate = silu(gate) * up` for one row, as `ggml_vec_swiglu_f32`: blocks of 16 use the
/// vectorised exponential, the tail past the last full block uses libm's.
#[inline(always)]
pub fn swiglu(gate: &mut [f32], up: &[f32]) {
    let full = gate.len() / 16 * 16;
    for (i, (g, &u)) in gate.iter_mut().zip(up).enumerate() {
        *g = if i < full { silu(*g) } else { silu_tail(*g) } * u;
    }
}

/// One RoPE pair rotation with the multiply-adds GCC fused into ggml's `rotate_pairs`.
#[inline]
pub fn rotate(x0: f32, x1: f32, cos: f32, sin: f32) -> (f32, f32) {
    (x0.mul_add(cos, -(x1 * sin)), x0.mul_add(sin, x1 * cos))
}

/// Rotates the pairs `(2i, 2i+1)` of every head of `x` (`n_heads × head_dim`, contiguous) by
/// `cache[i]` = (cos, sin), in place ("normal" RoPE ordering; dimensions past the cache pass
/// through).
///
/// GCC vectorises ggml's normal-mode loop four pairs at a time with the fused multiply-adds of
/// [`rotate`], and computes the last `pairs mod 4` pairs without fusing (a multiply, then
/// an add-subtract); both are reproduced here.
#[inline(always)]
pub fn rope(cache: &[(f32, f32)], x: &mut [f32], head_dim: usize) {
    let fused = cache.len() / 4 * 4;
    for head in x.chunks_exact_mut(head_dim) {
        for (i, &(c, s)) in cache.iter().enumerate() {
            let (x0, x1) = (head[2 * i], head[2 * i + 1]);
            let (y0, y1) = if i < fused {
                rotate(x0, x1, c, s)
            } else {
                (x0 * c - x1 * s, x0 * s + x1 * c)
            };
            head[2 * i] = y0;
            head[2 * i + 1] = y1;
        }
    }
}

/// Rotates the pairs `(i, i + n_dims/2)` of every head of `x` (`n_heads × head_dim`,
/// contiguous) by `cache[i]` = (cos, sin), in place, where `n_dims = 2 · cache.len()` ("NEOX"
/// RoPE ordering, as GPT-NeoX, Qwen2/3 and Gemma 3 use; dimensions from `n_dims` on pass
/// through). ggml runs the same `rotate_pairs` template for both orderings (NEOX: `n_offset =
/// n_dims/2`, element `i0/2` paired with `i0/2 + n_offset`, by the cache's pair `i0/2`). With the
/// offset only known at run time GCC leaves the NEOX loop scalar, one pair at a time fused
/// exactly as [`rotate`] (its `vfmsub231ss`/`vfmadd132ss`), for every pair count.
#[inline(always)]
pub fn rope_neox(cache: &[(f32, f32)], x: &mut [f32], head_dim: usize) {
    let half = cache.len();
    for head in x.chunks_exact_mut(head_dim) {
        let (lo, hi) = head[..2 * half].split_at_mut(half);
        for ((x0, x1), &(c, s)) in lo.iter_mut().zip(hi.iter_mut()).zip(cache) {
            (*x0, *x1) = rotate(*x0, *x1, c, s);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::test_util::assert_near_libm;

    /// One `vdpbf16ps` of this CPU: `acc + Σ pairs` lane by lane.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx512bf16")]
    fn dpbf16_hw(x: &[u16; BF16_STEP], y: &[u16; BF16_STEP], acc: &[f32; BF16_LANES]) -> [f32; 16] {
        use std::arch::x86_64::*;
        // SAFETY: 64-byte unaligned loads and a store within the arrays; a vector of 32 bf16
        // and one of 32 u16 are the same 512 bits.
        unsafe {
            let a: __m512bh = std::mem::transmute(_mm512_loadu_si512(x.as_ptr().cast()));
            let b: __m512bh = std::mem::transmute(_mm512_loadu_si512(y.as_ptr().cast()));
            let r = _mm512_dpbf16_ps(_mm512_loadu_ps(acc.as_ptr()), a, b);
            let mut o = [0f32; BF16_LANES];
            _mm512_storeu_ps(o.as_mut_ptr(), r);
            o
        }
    }

    /// [`dpbf16_lane`] against the instruction itself, where the CPU has it, over values in
    /// f32's normal range (weights, activations and sums of real models): random bf16 pairs
    /// of exponents 2^-40..2^40 and accumulators of either sign, bit for bit. (Past that range
    /// the instruction's results differ from this model in signs of flushed zeros and in
    /// overflows, which models never reach.)
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn dpbf16_lane_equals_the_instruction() {
        use crate::kernels::test_util::XorShift;
        if !(is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("avx512bf16")) {
            eprintln!("SKIPPED dpbf16_lane_equals_the_instruction: no AVX512_BF16 on this CPU");
            return;
        }
        const EXP_BIAS: u64 = 127;
        const EXP_SPAN: u64 = 80;
        const CASES: usize = 20_000;
        let mut rng = XorShift(0x5eed_bf16);
        let value = |rng: &mut XorShift| -> u16 {
            let r = rng.next();
            let exp = EXP_BIAS - EXP_SPAN / 2 + r % EXP_SPAN;
            ((r >> 32) as u16 & 0x807f) | ((exp as u16) << 7)
        };
        for case in 0..CASES {
            let x: [u16; BF16_STEP] = std::array::from_fn(|_| value(&mut rng));
            let y: [u16; BF16_STEP] = std::array::from_fn(|_| value(&mut rng));
            let acc: [f32; BF16_LANES] =
                std::array::from_fn(|_| bf16_to_f32(value(&mut rng)) * 3.0);
            // SAFETY: the features were detected above.
            let hw = unsafe { dpbf16_hw(&x, &y, &acc) };
            for j in 0..BF16_LANES {
                let yv = [bf16_to_f32(y[2 * j]), bf16_to_f32(y[2 * j + 1])];
                let want = dpbf16_lane(acc[j], [x[2 * j], x[2 * j + 1]], yv);
                assert_eq!(hw[j].to_bits(), want.to_bits(), "case {case} lane {j}");
            }
        }
    }

    /// `expf`'s bound relative to the exact value: 4e-7 from libm's f32 `exp`, plus that one's
    /// own half an ulp (2^-24, under 6e-8).
    const EXPF_REL: f64 = 4.6e-7;

    #[test]
    fn expf_is_close_to_libm_and_handles_extremes() {
        let xs = (-2000..2000).map(|i| i as f32 * 0.043);
        assert_near_libm("expf", expf, f64::exp, xs, EXPF_REL);
        assert_eq!(expf(f32::NEG_INFINITY), 0.0);
        assert_eq!(expf(-200.0), 0.0);
        assert_eq!(expf(200.0), f32::INFINITY);
        assert_eq!(expf(0.0), 1.0);
    }

    #[test]
    fn reductions_sum_correctly() {
        let a: [f32; 16] = std::array::from_fn(|i| i as f32);
        assert_eq!(reduce16(&a), 120.0);
        let xf: Vec<f32> = (0..130).map(|i| (i % 7) as f32 - 3.0).collect();
        let x: Vec<u16> = xf.iter().map(|&v| f32_to_f16(v)).collect();
        let y: Vec<f32> = (0..130).map(|i| (i % 5) as f32 * 0.5).collect();
        let exact: f32 = xf.iter().zip(&y).map(|(a, b)| a * b).sum();
        assert_eq!(dot_f16_gemv(&x, &y, 130), exact);
        assert_eq!(dot_f16_gemv(&x, &y, 256), exact);
        let e128: f32 = xf[..128].iter().zip(&y[..128]).map(|(a, b)| a * b).sum();
        assert_eq!(dot_f16_gemm(&x[..128], &y[..128]), e128);
    }

    #[test]
    fn softmax_sums_to_one() {
        let mut x: Vec<f32> = (0..37).map(|i| (i as f32 * 0.7).sin() * 5.0).collect();
        softmax(&mut x, 0.125);
        let s: f64 = x.iter().map(|&v| v as f64).sum();
        assert!((s - 1.0).abs() < 1e-6);
    }

    #[test]
    fn a_sink_takes_its_share_and_may_raise_the_maximum() {
        let x: Vec<f32> = (0..37).map(|i| (i as f32 * 0.7).sin() * 5.0).collect();
        // A sink of −∞ adds nothing: the plain softmax's bits.
        let (mut a, mut b) = (x.clone(), x.clone());
        softmax(&mut a, 0.125);
        softmax_sink(&mut b, 0.125, f32::NEG_INFINITY);
        assert_eq!(a, b);
        for sink in [-1.0f32, 0.3, 4.0] {
            let mut p = x.clone();
            softmax_sink(&mut p, 0.125, sink);
            // The row's maximum, raised to the sink where it is larger, as ggml's MAX.
            let max = x
                .iter()
                .map(|v| v * 0.125)
                .fold(f32::NEG_INFINITY, f32::max);
            let max = if max > sink { max } else { sink };
            let dropped = (sink - max).exp() as f64;
            let kept: f64 = x.iter().map(|&v| expf(v * 0.125 - max) as f64).sum();
            let total: f64 = p.iter().map(|&v| v as f64).sum();
            assert!(
                (total - kept / (kept + dropped)).abs() < 1e-6,
                "sink {sink}: the scores keep all but the sink's share"
            );
            assert!(total < 1.0);
        }
    }

    #[test]
    fn swiglu_oai_clamps_the_gate_above_and_the_up_both_ways() {
        let (alpha, limit) = (1.702f32, 7.0f32);
        let gate = [-20.0f32, -1.0, 0.0, 0.5, 7.0, 9.0, 30.0];
        let up = [-9.0f32, -7.5, 0.25, 3.0, 8.0, -2.0, 100.0];
        let mut g = gate;
        swiglu_oai(&mut g, &up, alpha, limit);
        for i in 0..gate.len() {
            let x = gate[i].min(limit);
            let y = up[i].clamp(-limit, limit);
            let want = x / (1.0 + (alpha * -x).exp()) * (y + 1.0);
            assert_eq!(g[i].to_bits(), want.to_bits(), "element {i}");
        }
        // Past the limit the gate is the limit's: 9 and 30 give 7's value.
        assert_eq!(g[5] / (-2.0 + 1.0), g[4] / (7.0 + 1.0));
    }
}
