//! Scalar oracles for the dot products of Q5_0, Q5_1, IQ4_NL (with Q8_0/Q8_1 activations) and
//! of the K-quants, IQ4_XS and the IQ2/IQ3 types (with Q8_K activations), bit-identical to llama.cpp's x86
//! `ggml_vec_dot_*` kernels (the `__AVX2__` branches of `ggml-cpu/arch/x86/quants.c`, as GCC
//! compiles them with `-march=native` on an AVX-512 VNNI machine).
//!
//! As in `scalar.rs`, integer work is exact in any order, so each function computes, for each of
//! the eight 32-bit lanes of ggml's `__m256i` accumulators, the exact integer that lands in it,
//! then does the float operations (int → f32 conversion, `fma`, plain products and sums, the
//! final horizontal sums) in the order the compiled code does them. Where the lanes come from:
//!
//! - Every kernel loads the weights and the activations 32 bytes at a time in element order and
//!   multiplies them with `maddubs` + `madd` (or `dpbusd`, which AVX-512 VNNI substitutes in
//!   `mul_sum_us8_pairs_float` and changes nothing: no sum here can saturate 16 bits). Element `e`
//!   therefore lands in lane `(e mod 32) / 4`, the shuffled per-sub-block scales multiplying it
//!   before the lanes are summed over the block's 32-byte runs.
//! - Q5_0 and IQ4_NL hold signed weights and use ggml's sign trick,
//!   `maddubs(sign(x, x), sign(y, x))`: for `y = −128` and a negative weight the negation wraps
//!   and the product comes out as `|x|·(−128)` instead of `|x|·128` ([`sign_product`]). ggml's
//!   activation quantizers never produce −128 (Q8_0 rounds `127·x/amax`, Q8_K `−127·x/max`), so
//!   real data never meets this; the oracle reproduces it anyway, so hand-built blocks match too.
//! - The min/bsums terms read the activation's stored `bsums`, never the sums of its `qs`.
//!
//! GCC contracts scalar `a += b*c` into `fma` here (`-std=gnu11` implies `-ffp-contract=fast`):
//! the Q5_1 `summs` (exact either way: a product of two f16 fits in an f32) and the Q5_K `summs`
//! (where it matters). It does not contract the scalar tail of IQ4_NL (an odd last block):
//! the disassembly of the built library has `vmulss` then `vaddss` there.
//!
//! llamafile's tinyBLAS (`sgemm.cpp`, `tinyBLAS_Q0_AVX`), which llama.cpp uses for Q5_0 and
//! IQ4_NL matrix products of two or more activation columns (IQ4_NL only where its weights were
//! not repacked into 8-row groups, which AVX2 does when a tensor's row count is a multiple of 8),
//! computes each output as one chain `acc = fma(d_x·d_y, lanes, acc)` over all blocks, then
//! `hsum_float_8`: for Q5_0 exactly [`dot_q5_0_q8_0`]; for IQ4_NL not [`dot_iq4_nl_q8_0`] (two
//! interleaved accumulators and a scalar tail) but [`dot_iq4_nl_q8_0_tinyblas`].

use super::blocks::{
    scale, BlockIq4Nl, BlockIq4Xs, BlockQ2K, BlockQ3K, BlockQ4K, BlockQ5K, BlockQ5_0, BlockQ5_1,
    BlockQ6K, BlockQ8K, BlockQ8_0, BlockQ8_1, IqGrid, KVALUES_IQ4NL, K_SCALE_SIZE, Q5_BIAS,
    Q6_BIAS, QK, QK_K, RUN, SCALE_BIAS, SUB16, SUB32,
};
use super::scalar::hsum_float_8;

/// f32 (and i32) lanes of one AVX2 vector.
pub(super) const LANES: usize = 8;
/// Consecutive int8 products that `maddubs` + `madd` (or `dpbusd`) sum into one 32-bit lane.
const LANE_BYTES: usize = 4;
/// One product as `maddubs(sign(x, x), sign(y, x))` forms it (`_mm256_sign_epi8` then an
/// unsigned × signed byte product): `x·y`, except that `y = −128` with `x < 0` wraps to
/// `|x|·(−128)`.
#[inline]
pub(super) fn sign_product(x: i8, y: i8) -> i32 {
    let sy = match x {
        0 => 0,
        x if x < 0 => y.wrapping_neg(),
        _ => y,
    };
    i32::from(x.unsigned_abs()) * i32::from(sy)
}

/// The exact integer in each 32-bit lane after `n` elements went through `maddubs` + `madd` in
/// 32-byte runs and were summed run after run: lane `l` holds the terms of the elements `e` with
/// `(e mod 32) / 4 = l`. (i32 arithmetic wraps, as the vector adds do.)
#[inline]
pub(super) fn lanes(n: usize, term: impl Fn(usize) -> i32) -> [i32; LANES] {
    let mut acc = [0i32; LANES];
    for e in 0..n {
        let l = (e % RUN) / LANE_BYTES;
        acc[l] = acc[l].wrapping_add(term(e));
    }
    acc
}

/// `acc[l] = fma(d, v[l], acc[l])` for every lane (`_mm256_fmadd_ps` with a broadcast `d`).
#[inline]
pub(super) fn fma_lanes(acc: &mut [f32; LANES], d: f32, v: [i32; LANES]) {
    for (a, &v) in acc.iter_mut().zip(&v) {
        *a = d.mul_add(v as f32, *a);
    }
}

/// Element `e` (0..32) of a 32-element block's nibbles: low nibbles are 0..16, high 16..32.
#[inline]
pub(super) fn nibble32(qs: &[u8; QK / 2], e: usize) -> u8 {
    (qs[e % (QK / 2)] >> (4 * (e / (QK / 2)))) & 0x0f
}

/// Bit `e` of a Q5 block's `qh` (little-endian u32).
#[inline]
fn high_bit(qh: &[u8; 4], e: usize) -> u8 {
    (qh[e / 8] >> (e % 8)) & 1
}

/// Σ_blocks d_x·d_y·Σ(q_x−16)·q_y:
/// ```text
/// for each block: d = dx*dy
///   for lane l: acc[l] = fma(d, Σ_{e≡l} sign_product(q_x[e]−16, q_y[e]), acc[l])
/// result = hsum_float_8(acc)
/// ```
/// Also tinyBLAS's per-output arithmetic for Q5_0 (the same chain and `hsum`).
pub fn dot_q5_0_q8_0(x: &[BlockQ5_0], y: &[BlockQ8_0]) -> f32 {
    assert_eq!(x.len(), y.len(), "dot_q5_0_q8_0 length mismatch");
    let mut acc = [0f32; LANES];
    for (a, b) in x.iter().zip(y) {
        let d = scale(a.d) * scale(b.d);
        let q = lanes(QK, |e| {
            let v = i32::from(nibble32(&a.qs, e) | (high_bit(&a.qh, e) << 4)) - Q5_BIAS;
            sign_product(v as i8, b.qs[e])
        });
        fma_lanes(&mut acc, d, q);
    }
    hsum_float_8(acc)
}

/// Σ_blocks d_x·d_y·Σq_x·q_y + m_x·s_y:
/// ```text
/// for each block: summs = fma(m_x, s_y, summs)         (exact: f16·f16 fits an f32)
///   for lane l: acc[l] = fma(Σ_{e≡l} q_x[e]·q_y[e], dx*dy, acc[l])
/// result = hsum_float_8(acc) + summs
/// ```
pub fn dot_q5_1_q8_1(x: &[BlockQ5_1], y: &[BlockQ8_1]) -> f32 {
    assert_eq!(x.len(), y.len(), "dot_q5_1_q8_1 length mismatch");
    let mut acc = [0f32; LANES];
    let mut summs = 0f32;
    for (a, b) in x.iter().zip(y) {
        summs = scale(a.m).mul_add(scale(b.s), summs);
        let d = scale(a.d) * scale(b.d);
        let q = lanes(QK, |e| {
            let v = nibble32(&a.qs, e) | (high_bit(&a.qh, e) << 4);
            i32::from(v) * i32::from(b.qs[e])
        });
        fma_lanes(&mut acc, d, q);
    }
    hsum_float_8(acc) + summs
}

/// The lanes of one IQ4_NL block against a Q8_0 block (ggml's sign trick: [`sign_product`]).
#[inline]
fn iq4_nl_lanes(a: &BlockIq4Nl, b: &BlockQ8_0) -> [i32; LANES] {
    lanes(QK, |e| {
        sign_product(KVALUES_IQ4NL[usize::from(nibble32(&a.qs, e))], b.qs[e])
    })
}

/// Σ_blocks d_x·d_y·Σ v(q_x)·q_y as `ggml_vec_dot_iq4_nl_q8_0` computes it (single-column
/// products: decoding, and any product tinyBLAS does not take):
/// ```text
/// for each pair of blocks (2p, 2p+1):
///   for lane l: acc1[l] = fma(d_{2p},   lanes_{2p}[l],   acc1[l])
///               acc2[l] = fma(d_{2p+1}, lanes_{2p+1}[l], acc2[l])
/// sumf = hsum_float_8(acc1 + acc2)                   (lane-wise sum first)
/// an odd last block: sumf = sumf + (Σ v(q_x)·q_y as f32) * d   (plain products, no fma)
/// ```
pub fn dot_iq4_nl_q8_0(x: &[BlockIq4Nl], y: &[BlockQ8_0]) -> f32 {
    assert_eq!(x.len(), y.len(), "dot_iq4_nl_q8_0 length mismatch");
    let mut acc1 = [0f32; LANES];
    let mut acc2 = [0f32; LANES];
    let pairs = x.len() / 2;
    for p in 0..pairs {
        for (acc, i) in [(&mut acc1, 2 * p), (&mut acc2, 2 * p + 1)] {
            let d = scale(y[i].d) * scale(x[i].d);
            fma_lanes(acc, d, iq4_nl_lanes(&x[i], &y[i]));
        }
    }
    let mut sumf = hsum_float_8(std::array::from_fn(|l| acc1[l] + acc2[l]));
    if let (Some(a), Some(b)) = (x.get(2 * pairs), y.get(2 * pairs)) {
        let d = scale(b.d) * scale(a.d);
        // The tail is plain C: true products, no sign trick.
        let sumi: i32 = (0..QK)
            .map(|e| i32::from(b.qs[e]) * i32::from(KVALUES_IQ4NL[usize::from(nibble32(&a.qs, e))]))
            .sum();
        sumf += sumi as f32 * d;
    }
    sumf
}

/// Σ_blocks d_x·d_y·Σ v(q_x)·q_y as tinyBLAS computes each output of an IQ4_NL matrix product
/// (llama.cpp's prompt batches): one chain over all blocks,
/// ```text
/// for each block: for lane l: acc[l] = fma(dx*dy, lanes[l], acc[l])
/// result = hsum_float_8(acc)
/// ```
pub fn dot_iq4_nl_q8_0_tinyblas(x: &[BlockIq4Nl], y: &[BlockQ8_0]) -> f32 {
    assert_eq!(x.len(), y.len(), "dot_iq4_nl_q8_0_tinyblas length mismatch");
    let mut acc = [0f32; LANES];
    for (a, b) in x.iter().zip(y) {
        fma_lanes(&mut acc, scale(a.d) * scale(b.d), iq4_nl_lanes(a, b));
    }
    hsum_float_8(acc)
}

/// Q8_K's super-block scale and the converted f16 `x` scale, multiplied (as ggml: `y.d * x`).
#[inline]
fn k_scale(b: &BlockQ8K, x: [u8; 2]) -> f32 {
    b.d * scale(x)
}

/// The negated min scale (ggml's `dmin = -y.d * x.dmin`).
#[inline]
fn k_min_scale(b: &BlockQ8K, x: [u8; 2]) -> f32 {
    -b.d * scale(x)
}

/// Element `e` (0..256) of the 2-bit layout of Q2_K and Q3_K: 32-byte runs of `qs`, each read four
/// times at shifts 0, 2, 4, 6 (elements `128j + 32k + b` are bits `2k` of `qs[32j + b]`).
#[inline]
fn two_bits(qs: &[u8; QK_K / 4], e: usize) -> i32 {
    let (j, k, b) = (e / 128, (e / RUN) % 4, e % RUN);
    i32::from((qs[RUN * j + b] >> (2 * k)) & 3)
}

/// Σ_super-blocks Σ_sub d·sc·q_x·q_y − dmin·m·bsum, in two fmas per super-block:
/// ```text
/// d = y.d * x.d;  dmin = -y.d * x.dmin
/// mins[l] = m[2l]·bsums[2l] + m[2l+1]·bsums[2l+1]
/// sumi[l] = Σ_{e≡l} sc[e/16]·q_x[e]·q_y[e]
/// acc[l] = fma(dmin, mins[l], acc[l]);  acc[l] = fma(d, sumi[l], acc[l])
/// result = hsum_float_8(acc)
/// ```
pub fn dot_q2_k_q8_k(x: &[BlockQ2K], y: &[BlockQ8K]) -> f32 {
    assert_eq!(x.len(), y.len(), "dot_q2_k_q8_k length mismatch");
    let mut acc = [0f32; LANES];
    for (a, b) in x.iter().zip(y) {
        let d = k_scale(b, a.d);
        let dmin = k_min_scale(b, a.dmin);
        let min = |s: usize| i32::from(a.scales[s] >> 4) * i32::from(b.bsums[s]);
        let mins: [i32; LANES] = std::array::from_fn(|l| min(2 * l) + min(2 * l + 1));
        fma_lanes(&mut acc, dmin, mins);
        let sumi = lanes(QK_K, |e| {
            i32::from(a.scales[e / SUB16] & 0x0f) * two_bits(&a.qs, e) * i32::from(b.qs[e])
        });
        fma_lanes(&mut acc, d, sumi);
    }
    hsum_float_8(acc)
}

/// Q3_K's sixteen 6-bit scales, unbiased (−32..32): low 4 bits from bytes 0..8 (low nibbles,
/// then high nibbles), high 2 bits from bytes 8..12.
#[inline]
fn q3_k_scale(s: &[u8; K_SCALE_SIZE], j: usize) -> i32 {
    let low = if j < 8 { s[j] & 0x0f } else { s[j - 8] >> 4 };
    let high = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
    i32::from(low | (high << 4)) - SCALE_BIAS
}

/// Σ_super-blocks d·Σ_sub sc·(q_x − 4·!hbit)·q_y:
/// ```text
/// d = y.d * x.d
/// sumi[l] = Σ_{e≡l} sc[e/16]·(q_low[e] − 4·!hbit[e])·q_y[e]
/// acc[l] = fma(d, sumi[l], acc[l]);  result = hsum_float_8(acc)
/// ```
pub fn dot_q3_k_q8_k(x: &[BlockQ3K], y: &[BlockQ8K]) -> f32 {
    assert_eq!(x.len(), y.len(), "dot_q3_k_q8_k length mismatch");
    let mut acc = [0f32; LANES];
    for (a, b) in x.iter().zip(y) {
        let d = k_scale(b, a.d);
        let sumi = lanes(QK_K, |e| {
            // Element 128j + 32k + b has its high bit at bit 4j + k of hmask[b].
            let bit = (e / RUN) % 8;
            let hbit = (a.hmask[e % RUN] >> bit) & 1;
            let q = two_bits(&a.qs, e) - if hbit == 0 { 4 } else { 0 };
            q3_k_scale(&a.scales, e / SUB16) * q * i32::from(b.qs[e])
        });
        fma_lanes(&mut acc, d, sumi);
    }
    hsum_float_8(acc)
}

/// Scale and min of Q4_K/Q5_K sub-block `j` (0..8) from the 12 packed bytes (ggml's
/// `get_scale_min_k4`).
#[inline]
fn scale_min_k4(q: &[u8; K_SCALE_SIZE], j: usize) -> (i32, i32) {
    let (sc, m) = super::dequantize::get_scale_min_k4(j, q);
    (i32::from(sc), i32::from(m))
}

/// Element `e` (0..256) of the nibble layout of Q4_K and Q5_K: 32-byte runs of `qs`, low nibbles
/// then high nibbles (elements `64j + 32h + b` are nibble `h` of `qs[32j + b]`).
#[inline]
fn k_nibble(qs: &[u8; QK_K / 2], e: usize) -> i32 {
    let (j, h, b) = (e / 64, (e / RUN) % 2, e % RUN);
    i32::from((qs[RUN * j + b] >> (4 * h)) & 0x0f)
}

/// The four lanes of the Q4_K/Q5_K min products: `bsums` summed in pairs with 16-bit wrapping
/// (`_mm_hadd_epi16`), then lane `k = m[2k]·s[2k] + m[2k+1]·s[2k+1]` (`_mm_madd_epi16`), where
/// `s[j]` is sub-block j's activation sum.
#[inline]
fn k4_min_lanes(scales: &[u8; K_SCALE_SIZE], b: &BlockQ8K) -> [i32; 4] {
    let s = |j: usize| i32::from(b.bsums[2 * j].wrapping_add(b.bsums[2 * j + 1]));
    let m = |j: usize| scale_min_k4(scales, j).1;
    std::array::from_fn(|k| m(2 * k) * s(2 * k) + m(2 * k + 1) * s(2 * k + 1))
}

/// Σ_super-blocks d·Σ_sub sc·q_x·q_y − dmin·Σ_sub m·bsum, the min terms in a separate
/// four-lane accumulator:
/// ```text
/// d = y.d * x.d;  dmin = -y.d * x.dmin
/// acc_m[k] = fma(dmin, m[2k]·s[2k] + m[2k+1]·s[2k+1], acc_m[k])     (k in 0..4)
/// sumi[l] = Σ_{e≡l} sc[e/32]·q_x[e]·q_y[e];  acc[l] = fma(d, sumi[l], acc[l])
/// result = hsum_float_8(acc) + ((acc_m[0] + acc_m[2]) + (acc_m[1] + acc_m[3]))
/// ```
pub fn dot_q4_k_q8_k(x: &[BlockQ4K], y: &[BlockQ8K]) -> f32 {
    assert_eq!(x.len(), y.len(), "dot_q4_k_q8_k length mismatch");
    let mut acc = [0f32; LANES];
    let mut acc_m = [0f32; 4];
    for (a, b) in x.iter().zip(y) {
        let d = k_scale(b, a.d);
        let dmin = k_min_scale(b, a.dmin);
        for (am, p) in acc_m.iter_mut().zip(k4_min_lanes(&a.scales, b)) {
            *am = dmin.mul_add(p as f32, *am);
        }
        let sumi = lanes(QK_K, |e| {
            scale_min_k4(&a.scales, e / SUB32).0 * k_nibble(&a.qs, e) * i32::from(b.qs[e])
        });
        fma_lanes(&mut acc, d, sumi);
    }
    let m = (acc_m[0] + acc_m[2]) + (acc_m[1] + acc_m[3]);
    hsum_float_8(acc) + m
}

/// Σ_super-blocks d·Σ_sub sc·q_x·q_y − dmin·Σ_sub m·bsum, the min terms summed as integers per
/// super-block and accumulated in one scalar:
/// ```text
/// d = y.d * x.d;  dmin = -y.d * x.dmin
/// p[k] = m[2k]·s[2k] + m[2k+1]·s[2k+1];  summs = fma(dmin, (p0 + p1) + (p2 + p3), summs)
/// sumi[l] = Σ_{e≡l} sc[e/32]·(q_x[e] + 16·hbit[e])·q_y[e];  acc[l] = fma(d, sumi[l], acc[l])
/// result = hsum_float_8(acc) + summs
/// ```
pub fn dot_q5_k_q8_k(x: &[BlockQ5K], y: &[BlockQ8K]) -> f32 {
    assert_eq!(x.len(), y.len(), "dot_q5_k_q8_k length mismatch");
    let mut acc = [0f32; LANES];
    let mut summs = 0f32;
    for (a, b) in x.iter().zip(y) {
        let d = k_scale(b, a.d);
        let dmin = k_min_scale(b, a.dmin);
        let p = k4_min_lanes(&a.scales, b);
        let total = p[0]
            .wrapping_add(p[1])
            .wrapping_add(p[2].wrapping_add(p[3]));
        summs = dmin.mul_add(total as f32, summs);
        let sumi = lanes(QK_K, |e| {
            // Element 64j + 32h + b has its fifth bit at bit 2j + h of qh[b].
            let hbit = (a.qh[e % RUN] >> (e / RUN)) & 1;
            let q = k_nibble(&a.qs, e) + 16 * i32::from(hbit);
            scale_min_k4(&a.scales, e / SUB32).0 * q * i32::from(b.qs[e])
        });
        fma_lanes(&mut acc, d, sumi);
    }
    hsum_float_8(acc) + summs
}

/// Element `e` (0..256) of Q6_K, unsigned (0..64): elements `128j + 32k + b` take the low nibble
/// (k < 2) or high nibble (k ≥ 2) of `ql[64j + 32(k mod 2) + b]` and bits `2k` of `qh[32j + b]`.
#[inline]
fn q6_k_value(a: &BlockQ6K, e: usize) -> i32 {
    let (j, k, b) = (e / 128, (e / RUN) % 4, e % RUN);
    let low = (a.ql[64 * j + RUN * (k % 2) + b] >> (4 * (k / 2))) & 0x0f;
    let high = (a.qh[RUN * j + b] >> (2 * k)) & 3;
    i32::from(low | (high << 4))
}

/// Σ_super-blocks d·Σ_sub sc·(q_x − 32)·q_y, the −32 applied through `bsums`:
/// ```text
/// d = y.d * x.d
/// sumi[l] = Σ_{e≡l} sc[e/16]·q_x[e]·q_y[e] − 32·(bsums[2l]·sc[2l] + bsums[2l+1]·sc[2l+1])
/// acc[l] = fma(d, sumi[l], acc[l]);  result = hsum_float_8(acc)
/// ```
pub fn dot_q6_k_q8_k(x: &[BlockQ6K], y: &[BlockQ8K]) -> f32 {
    assert_eq!(x.len(), y.len(), "dot_q6_k_q8_k length mismatch");
    let mut acc = [0f32; LANES];
    for (a, b) in x.iter().zip(y) {
        let d = k_scale(b, a.d);
        let sc = |s: usize| i32::from(a.scales[s]);
        let sub = |l: usize| {
            let bs = |s: usize| i32::from(b.bsums[s]) * sc(s);
            (bs(2 * l) + bs(2 * l + 1)).wrapping_mul(Q6_BIAS)
        };
        let sumi = lanes(QK_K, |e| {
            sc(e / SUB16) * q6_k_value(a, e) * i32::from(b.qs[e])
        });
        let sumi: [i32; LANES] = std::array::from_fn(|l| sumi[l].wrapping_sub(sub(l)));
        fma_lanes(&mut acc, d, sumi);
    }
    hsum_float_8(acc)
}

/// IQ4_XS sub-block `s`'s scale (−32..32): 4 low bits from `scales_l`, 2 high from `scales_h`.
#[inline]
fn iq4_xs_scale(a: &BlockIq4Xs, s: usize) -> i32 {
    let low = (a.scales_l[s / 2] >> (4 * (s % 2))) & 0x0f;
    let high = (u16::from_le_bytes(a.scales_h) >> (2 * s)) & 3;
    (i32::from(low) | (i32::from(high) << 4)) - SCALE_BIAS
}

/// Σ_super-blocks d·Σ_sub ls·Σ v(q_x)·q_y:
/// ```text
/// d = x.d * y.d
/// sumi[l] = Σ_{e≡l} ls[e/32]·sign_product(v(q_x[e]), q_y[e])
/// acc[l] = fma(d, sumi[l], acc[l]);  result = hsum_float_8(acc)
/// ```
/// (ggml sums even and odd sub-blocks in two integer vectors, then adds them: exact.)
pub fn dot_iq4_xs_q8_k(x: &[BlockIq4Xs], y: &[BlockQ8K]) -> f32 {
    assert_eq!(x.len(), y.len(), "dot_iq4_xs_q8_k length mismatch");
    let mut acc = [0f32; LANES];
    for (a, b) in x.iter().zip(y) {
        let d = scale(a.d) * b.d;
        let sumi = lanes(QK_K, |e| {
            // Sub-block s holds 16 bytes: low nibbles are its elements 0..16, high 16..32.
            let (s, i) = (e / SUB32, e % SUB32);
            let q = (a.qs[16 * s + i % 16] >> (4 * (i / 16))) & 0x0f;
            iq4_xs_scale(a, s) * sign_product(KVALUES_IQ4NL[usize::from(q)], b.qs[e])
        });
        fma_lanes(&mut acc, d, sumi);
    }
    hsum_float_8(acc)
}

/// The IQ2 and IQ3 types' dot with Q8_K ([`IqGrid`]) as ggml's AVX2 kernels sum it (AVX-512
/// builds take them too: `ggml_vec_dot_iq{2_xxs,2_xs,2_s,3_xxs,3_s}_q8_K` have no AVX-512
/// branch):
/// ```text
/// d = x.d * y.d
/// sumi[l] = Σ_{e≡l} (2·ls[e/SCALE_GROUP] + 1)·sign_product(±grid(e), q_y[e])
/// acc[l] = fma(d, sumi[l], acc[l]);  result = hsum_float_8(acc), times SUM_SCALE if any
/// ```
/// (ggml applies the sign to `q_y` and multiplies by the unsigned grid value: the same product,
/// −128 wrapping alike. IQ2_XS's and IQ2_S's two scales a sub-block multiply its two i16
/// halves, so each element still meets its own scale before the lanes sum.)
pub fn dot_iq_grid_q8_k<B: IqGrid>(x: &[B], y: &[BlockQ8K]) -> f32 {
    assert_eq!(x.len(), y.len(), "dot_iq_grid_q8_k length mismatch");
    let mut acc = [0f32; LANES];
    for (a, b) in x.iter().zip(y) {
        let d = scale(a.d()) * b.d;
        let sumi = lanes(QK_K, |e| {
            a.odd_scale(e / B::SCALE_GROUP) * sign_product(a.signed(e), b.qs[e])
        });
        fma_lanes(&mut acc, d, sumi);
    }
    match B::SUM_SCALE {
        Some(f) => f * hsum_float_8(acc),
        None => hsum_float_8(acc),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::blocks::{Block, BlockIq2S, BlockIq2Xs, BlockIq2Xxs};
    use crate::kernels::half::f32_to_f16;
    use std::mem::size_of;

    use crate::kernels::test_util::{weights, XorShift as Rng};

    /// An activation quant: −127..=127, or −128..=127 with `lo` = 1.
    fn q(r: &mut Rng, lo: i32) -> i8 {
        ((r.next() % (255 + lo) as u64) as i32 - 127 - lo) as i8
    }

    type H = fn(&mut Rng) -> u16;
    type D = fn(&mut Rng) -> f32;

    /// The harness's scale tables (f16 bits; Q8_K's f32 `d`).
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
    fn zero_h(_: &mut Rng) -> u16 {
        0
    }

    fn q8_0(r: &mut Rng, nb: usize, lo: i32, h: H) -> Vec<BlockQ8_0> {
        let mut block = |_| {
            let qs = std::array::from_fn(|_| q(r, lo));
            let d = h(r).to_le_bytes();
            BlockQ8_0 { d, qs }
        };
        (0..nb).map(&mut block).collect()
    }

    /// Q8_1 blocks, `s` = d·Σqs (rounded to f16) with `exact_s`, else drawn by `h`.
    fn q8_1(r: &mut Rng, nb: usize, h: H, exact_s: bool) -> Vec<BlockQ8_1> {
        let mut block = |_| {
            let qs: [i8; QK] = std::array::from_fn(|_| q(r, 0));
            let d = h(r);
            let sum: i32 = qs.iter().map(|&q| i32::from(q)).sum();
            let s = match exact_s {
                true => f32_to_f16(scale(d.to_le_bytes()) * sum as f32),
                false => h(r),
            };
            let (d, s) = (d.to_le_bytes(), s.to_le_bytes());
            BlockQ8_1 { d, s, qs }
        };
        (0..nb).map(&mut block).collect()
    }

    /// Q8_K blocks with consistent `bsums`.
    fn q8_k(r: &mut Rng, nb: usize, lo: i32, d: D) -> Vec<BlockQ8K> {
        let mut block = |_| {
            let qs: [i8; QK_K] = std::array::from_fn(|_| q(r, lo));
            let sub = |j: usize| qs[SUB16 * j..SUB16 * (j + 1)].iter().map(|&q| i16::from(q));
            let bsums = std::array::from_fn(|j| sub(j).sum());
            BlockQ8K { d: d(r), qs, bsums }
        };
        (0..nb).map(&mut block).collect()
    }

    /// Runs `dot` on the harness's inputs for seeds `base + nb` and compares with `want`.
    fn check_kat<B: Block, A>(
        name: &str,
        base: u64,
        f16_at: &[usize],
        act: impl Fn(&mut Rng, usize) -> Vec<A>,
        dot: fn(&[B], &[A]) -> f32,
        want: [u32; 4],
    ) {
        for (nb, want) in [1, 2, 5, 7].into_iter().zip(want) {
            let mut r = Rng(base + nb as u64);
            let x = weights::<B>(&mut r, nb, f16_at, kat_h);
            let got = dot(&x, &act(&mut r, nb));
            let w = f32::from_bits(want);
            assert_eq!(got.to_bits(), want, "{name} nb={nb}: {got:e} vs {w:e}");
        }
    }

    // Known answers: llama.cpp's `ggml_get_type_traits_cpu(type)->vec_dot` (for IQ4_NL/tinyBLAS,
    // `llamafile_sgemm` of one row by two equal columns), from its release build on this machine
    // (-march=native, AVX-512 VNNI), run by a C harness on the inputs these tests regenerate:
    // xorshift64 seeded with `base + nb` fills each weight block's bytes, then its f16 fields
    // (kat_h); each activation block draws its quants (−127..=127, or −128..=127 for the wrap
    // cases), then its scales (kat_h, or kat_d for Q8_K) and, for Q8_K, sums its bsums.
    #[test]
    fn known_answers_from_llama_cpp() {
        let a0 = |r: &mut Rng, nb| q8_0(r, nb, 0, kat_h);
        let w0 = |r: &mut Rng, nb| q8_0(r, nb, 1, kat_h);
        let a1 = |r: &mut Rng, nb| q8_1(r, nb, kat_h, false);
        let ak = |r: &mut Rng, nb| q8_k(r, nb, 0, kat_d);
        let wk = |r: &mut Rng, nb| q8_k(r, nb, 1, kat_d);
        let want = [0x4246f390, 0xb75a8bf0, 0xc54aa658, 0xc4134f17];
        check_kat("Q5_0", 1000, &[0], a0, dot_q5_0_q8_0, want);
        let want = [0xbfe2bea0, 0xc35cb9ba, 0x45997516, 0xc5416f58];
        check_kat("Q5_1", 2000, &[0, 2], a1, dot_q5_1_q8_1, want);
        let want = [0x426b3ef8, 0x41394c0c, 0xc361d927, 0xc712bab4];
        check_kat("IQ4_NL", 3000, &[0], a0, dot_iq4_nl_q8_0, want);
        let want = [0x426b3ef8, 0x41394c0c, 0xc361d924, 0xc712bab4];
        let tb = dot_iq4_nl_q8_0_tinyblas;
        check_kat("IQ4_NL tinyBLAS", 3000, &[0], a0, tb, want);
        let want = [0x438c441e, 0xc31ed3f3, 0x4207906c, 0xc697ad9a];
        check_kat("Q2_K", 4000, &[80, 82], ak, dot_q2_k_q8_k, want);
        let want = [0x423ea714, 0x432e71fa, 0x47fdfb2a, 0xc52160cc];
        check_kat("Q3_K", 5000, &[108], ak, dot_q3_k_q8_k, want);
        let want = [0x44f1db46, 0x4666200a, 0x48f2062c, 0x47ca6021];
        check_kat("Q4_K", 6000, &[0, 2], ak, dot_q4_k_q8_k, want);
        let want = [0x43915044, 0x4702408e, 0x483396b6, 0xc92ceed8];
        check_kat("Q5_K", 7000, &[0, 2], ak, dot_q5_k_q8_k, want);
        let want = [0xbd8d4e70, 0xc8afe2c0, 0x4a6f2822, 0x48d70975];
        check_kat("Q6_K", 8000, &[208], ak, dot_q6_k_q8_k, want);
        let want = [0x48bcd05d, 0x473019a6, 0xc884c76c, 0x4688fe98];
        check_kat("IQ4_XS", 9000, &[0], ak, dot_iq4_xs_q8_k, want);
        // Activations holding −128: the sign trick's wrapped products.
        let want = [0xc3b968d1, 0x41c00000, 0x449413f3, 0x4182df24];
        check_kat("Q5_0 wrap", 7000, &[0], w0, dot_q5_0_q8_0, want);
        let want = [0xc6440000, 0x45f1d000, 0x44897434, 0xc6427850];
        check_kat("IQ4_NL wrap", 7100, &[0], w0, dot_iq4_nl_q8_0, want);
        let want = [0x43dda8ee, 0xc889a22a, 0xc9add29c, 0xc8defb16];
        check_kat("IQ4_XS wrap", 7200, &[0], wk, dot_iq4_xs_q8_k, want);
        let want = [0x40054378, 0xc46a943b, 0xc708cf54, 0x4399cf2b];
        check_kat(
            "IQ2_XXS",
            10000,
            &[0],
            ak,
            dot_iq_grid_q8_k::<BlockIq2Xxs>,
            want,
        );
        let want = [0xc13f4b31, 0xc60d6ffe, 0xc38ff5f4, 0xc5d97090];
        check_kat(
            "IQ2_XXS wrap",
            10500,
            &[0],
            wk,
            dot_iq_grid_q8_k::<BlockIq2Xxs>,
            want,
        );
        let want = [0x43a48e9a, 0x431b9172, 0x44a15e46, 0xc68f8917];
        check_kat(
            "IQ2_XS",
            11000,
            &[0],
            ak,
            dot_iq_grid_q8_k::<BlockIq2Xs>,
            want,
        );
        let want = [0xc566279c, 0x458ede40, 0xc3e96aa4, 0xc74ef605];
        check_kat(
            "IQ2_XS wrap",
            11500,
            &[0],
            wk,
            dot_iq_grid_q8_k::<BlockIq2Xs>,
            want,
        );
        let want = [0xc49a5131, 0xc23681a5, 0xc614a9ae, 0x45216392];
        check_kat(
            "IQ2_S",
            12000,
            &[0],
            ak,
            dot_iq_grid_q8_k::<BlockIq2S>,
            want,
        );
        let want = [0xc0b1d0aa, 0x43181d40, 0xc42acca3, 0xc4da8ec3];
        check_kat(
            "IQ2_S wrap",
            12500,
            &[0],
            wk,
            dot_iq_grid_q8_k::<BlockIq2S>,
            want,
        );
    }

    /// FNV-1a (64-bit) of the little-endian bits of `vals`.
    fn fnv(vals: impl IntoIterator<Item = f32>) -> u64 {
        let mut h = 0xcbf2_9ce4_8422_2325u64;
        for b in vals.into_iter().flat_map(|v| v.to_bits().to_le_bytes()) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x100_0000_01b3);
        }
        h
    }

    /// The hash of 2000 dots of `B` as the bulk harness drew them: case `c` seeded with
    /// `base + 100000 + c`, `1 + c mod 8` blocks of random bytes (every byte 0xff when `c mod 7`
    /// is 0, 0x00 when 1) with kat_h scales, then activations as `known_answers_from_llama_cpp`
    /// draws them (with −128 when `c mod 3` is 0).
    fn bulk_hash<B: Block>(base: u64, dot: fn(&[B], &[BlockQ8K]) -> f32) -> u64 {
        use crate::kernels::blocks::block_bytes_mut;
        fnv((0..BULK_CASES).map(|c| {
            let r = &mut Rng(base + 100_000 + c as u64);
            let nb = 1 + c % 8;
            let mut x = weights::<B>(r, nb, &[0], kat_h);
            let fill = match c % 7 {
                0 => Some(0xff),
                1 => Some(0),
                _ => None,
            };
            if let Some(f) = fill {
                for blk in block_bytes_mut(&mut x).chunks_exact_mut(size_of::<B>()) {
                    blk[2..].fill(f);
                }
            }
            let y = q8_k(r, nb, i32::from(c % 3 == 0), kat_d);
            dot(&x, &y)
        }))
    }

    /// Cases of [`bulk_hash`].
    const BULK_CASES: usize = 2000;

    // The bulk harness (the known answers' C harness, same machine and build) ran ggml's
    // `ggml_vec_dot_iq2_*_q8_K` on 2000 cases a type and compared each output with this
    // oracle bit for bit; these are the hashes of its outputs.
    #[test]
    fn iq2_bulk_dots_hash_as_llama_cpp() {
        let xxs = bulk_hash(10000, dot_iq_grid_q8_k::<BlockIq2Xxs>);
        assert_eq!(xxs, 0xd345e5ba37e6b1a3, "IQ2_XXS");
        let xs = bulk_hash(11000, dot_iq_grid_q8_k::<BlockIq2Xs>);
        assert_eq!(xs, 0x47f4cf9bc7df12d7, "IQ2_XS");
        let s = bulk_hash(12000, dot_iq_grid_q8_k::<BlockIq2S>);
        assert_eq!(s, 0xe0b136c78e78d319, "IQ2_S");
    }

    /// IQ4_NL weights of −127 (nibble 0) against one activation of −128: the scalar tail (one
    /// block) multiplies truly, the vector pair path wraps (llama.cpp gives +16256 and −16256).
    #[test]
    fn the_sign_trick_wraps_only_in_the_vector_path() {
        let one = f32_to_f16(1.0).to_le_bytes();
        for (nb, want) in [(1, 16256.0), (2, -16256.0)] {
            let (d, qs) = (one, [0; QK / 2]);
            let x = vec![BlockIq4Nl { d, qs }; nb];
            let mut y = vec![BlockQ8_0 { d, qs: [0; QK] }; nb];
            y[0].qs[0] = -128;
            assert_eq!(dot_iq4_nl_q8_0(&x, &y), want, "nb={nb}");
        }
        assert_eq!(sign_product(-127, -128), -16256);
        assert_eq!(sign_product(-5, 7), -35);
        assert_eq!(sign_product(0, -128), 0);
    }

    fn h64(h: [u8; 2]) -> f64 {
        f64::from(scale(h))
    }

    /// Weights as (d·sc·q, dmin·m) per element, following the loops of ggml's `dequantize_row_*`.
    type Parts = Vec<(f64, f64)>;

    fn deq_q5(d: [u8; 2], qh: [u8; 4], qs: &[u8; QK / 2], offset: f64) -> Parts {
        let qh = u32::from_le_bytes(qh);
        let lo = (0..16).map(|j| (qs[j] & 15) | ((((qh >> j) << 4) & 0x10) as u8));
        let hi = (0..16).map(|j| (qs[j] >> 4) | (((qh >> (j + 12)) & 0x10) as u8));
        lo.chain(hi)
            .map(|q| (h64(d) * (f64::from(q) - offset), 0.0))
            .collect()
    }

    fn deq_iq4_nl(b: &BlockIq4Nl) -> Parts {
        let v = |n: u8| (h64(b.d) * f64::from(KVALUES_IQ4NL[usize::from(n)]), 0.0);
        b.qs.iter()
            .map(|&q| v(q & 15))
            .chain(b.qs.iter().map(|&q| v(q >> 4)))
            .collect()
    }

    /// Q2_K (`hmask` None: scales as nibbles, with mins) and Q3_K.
    fn deq_k2(d: [u8; 2], dmin: [u8; 2], qs: &[u8], sc: &[u8], hmask: Option<&[u8]>) -> Parts {
        let mut out = Vec::with_capacity(QK_K);
        for n in 0..2 {
            for j in 0..4 {
                for half in 0..2 {
                    let is = 8 * n + 2 * j + half;
                    let (s, m) = match hmask {
                        None => (i32::from(sc[is] & 15), f64::from(sc[is] >> 4)),
                        Some(_) => (q3_k_scale(sc.try_into().expect("12 bytes"), is), 0.0),
                    };
                    for l in (0..16).map(|l| l + 16 * half) {
                        let low = f64::from((qs[32 * n + l] >> (2 * j)) & 3);
                        let bit = hmask.map_or(1, |h| (h[l] >> (4 * n + j)) & 1);
                        let q = if bit == 0 { low - 4.0 } else { low };
                        out.push((h64(d) * f64::from(s) * q, h64(dmin) * m));
                    }
                }
            }
        }
        out
    }

    /// Q4_K (`qh` None) and Q5_K.
    fn deq_k4(d: [u8; 2], dmin: [u8; 2], sc: &[u8; 12], qs: &[u8], qh: Option<&[u8]>) -> Parts {
        let mut out = Vec::with_capacity(QK_K);
        for j in 0..4 {
            for half in 0..2 {
                let (s, m) = scale_min_k4(sc, 2 * j + half);
                for l in 0..32 {
                    let low = (qs[32 * j + l] >> (4 * half)) & 15;
                    let bit = qh.map_or(0, |h| (h[l] >> (2 * j + half)) & 1);
                    let q = f64::from(low + 16 * bit);
                    out.push((h64(d) * f64::from(s) * q, h64(dmin) * f64::from(m)));
                }
            }
        }
        out
    }

    fn deq_q6_k(b: &BlockQ6K) -> Parts {
        let mut out = vec![(0.0, 0.0); QK_K];
        for n in 0..2 {
            let (ql, qh, sc) = (&b.ql[64 * n..], &b.qh[32 * n..], &b.scales[8 * n..]);
            for l in 0..32 {
                for k in 0..4 {
                    let low = (ql[l + 32 * (k % 2)] >> (4 * (k / 2))) & 15;
                    let q = low | (((qh[l] >> (2 * k)) & 3) << 4);
                    let v = h64(b.d) * f64::from(sc[l / 16 + 2 * k]) * (f64::from(q) - 32.0);
                    out[128 * n + l + 32 * k] = (v, 0.0);
                }
            }
        }
        out
    }

    fn deq_iq4_xs(b: &BlockIq4Xs) -> Parts {
        let sh = u16::from_le_bytes(b.scales_h);
        let mut out = Vec::with_capacity(QK_K);
        for ib in 0..8 {
            let low = (b.scales_l[ib / 2] >> (4 * (ib % 2))) & 15;
            let ls = low | ((((sh >> (2 * ib)) & 3) as u8) << 4);
            let dl = h64(b.d) * (f64::from(ls) - 32.0);
            let qs = &b.qs[16 * ib..16 * ib + 16];
            let v = |n: u8| (dl * f64::from(KVALUES_IQ4NL[usize::from(n)]), 0.0);
            out.extend(
                qs.iter()
                    .map(|&q| v(q & 15))
                    .chain(qs.iter().map(|&q| v(q >> 4))),
            );
        }
        out
    }

    /// The IQ2/IQ3 types by their dequantizer (every value exact in f32).
    fn deq_iq_grid<B: IqGrid>(b: &B) -> Parts {
        let mut y = [0f32; QK_K];
        crate::kernels::dequantize::dequantize_iq_grid(std::slice::from_ref(b), &mut y);
        y.iter().map(|&v| (f64::from(v), 0.0)).collect()
    }

    /// Asserts `got` is within a few f32 roundings of Σ (w − min)·a, relative to
    /// Σ (|w| + |min|)·|a|.
    fn assert_close<B>(name: &str, got: f32, x: &[B], deq: impl Fn(&B) -> Parts, act: &[f64]) {
        assert_close_plus(name, got, x.iter().flat_map(deq).collect(), act, (0.0, 0.0))
    }

    /// [`assert_close`] plus `extra`: terms (sum, magnitude) the weights do not carry (Q5_1's m·s).
    fn assert_close_plus(name: &str, got: f32, parts: Parts, act: &[f64], extra: (f64, f64)) {
        assert_eq!(parts.len(), act.len());
        let (mut exact, mut size) = extra;
        for (&(w, m), &a) in parts.iter().zip(act) {
            exact += (w - m) * a;
            size += (w.abs() + m.abs()) * a.abs();
        }
        let tol = 1e-5 * size + f64::from(f32::MIN_POSITIVE);
        let err = (f64::from(got) - exact).abs();
        assert!(
            err <= tol,
            "{name}: {got:e} vs exact {exact:e} (tol {tol:e})"
        );
    }

    #[test]
    fn every_dot_is_close_to_the_exact_dot_of_the_dequantized_values() {
        let r = &mut Rng(0x9e37_79b9_7f4a_7c15);
        for case in 0..300 {
            let nb = 1 + case % 9;
            let y = q8_0(r, nb, 0, real_h);
            let a: Vec<f64> = y
                .iter()
                .flat_map(|b| b.qs.map(|q| h64(b.d) * f64::from(q)))
                .collect();
            let x = weights::<BlockQ5_0>(r, nb, &[0], real_h);
            let deq = |b: &BlockQ5_0| deq_q5(b.d, b.qh, &b.qs, 16.0);
            assert_close("Q5_0", dot_q5_0_q8_0(&x, &y), &x, deq, &a);
            let x = weights::<BlockIq4Nl>(r, nb, &[0], real_h);
            assert_close("IQ4_NL", dot_iq4_nl_q8_0(&x, &y), &x, deq_iq4_nl, &a);
            let tb = dot_iq4_nl_q8_0_tinyblas(&x, &y);
            assert_close("IQ4_NL tinyBLAS", tb, &x, deq_iq4_nl, &a);

            let y = q8_1(r, nb, real_h, true);
            let a: Vec<f64> = y
                .iter()
                .flat_map(|b| b.qs.map(|q| h64(b.d) * f64::from(q)))
                .collect();
            let x = weights::<BlockQ5_1>(r, nb, &[0, 2], real_h);
            let ms: Vec<f64> = x.iter().zip(&y).map(|(a, b)| h64(a.m) * h64(b.s)).collect();
            let extra = (ms.iter().sum(), ms.iter().map(|v| v.abs()).sum());
            let parts = x
                .iter()
                .flat_map(|b| deq_q5(b.d, b.qh, &b.qs, 0.0))
                .collect();
            assert_close_plus("Q5_1", dot_q5_1_q8_1(&x, &y), parts, &a, extra);

            let nb = 1 + case % 4;
            let y = q8_k(r, nb, 0, real_d);
            let a: Vec<f64> = y
                .iter()
                .flat_map(|b| b.qs.map(|q| f64::from(b.d) * f64::from(q)))
                .collect();
            let x = weights::<BlockQ2K>(r, nb, &[80, 82], real_h);
            let deq = |b: &BlockQ2K| deq_k2(b.d, b.dmin, &b.qs, &b.scales, None);
            assert_close("Q2_K", dot_q2_k_q8_k(&x, &y), &x, deq, &a);
            let x = weights::<BlockQ3K>(r, nb, &[108], real_h);
            let deq = |b: &BlockQ3K| deq_k2(b.d, [0; 2], &b.qs, &b.scales, Some(&b.hmask));
            assert_close("Q3_K", dot_q3_k_q8_k(&x, &y), &x, deq, &a);
            let x = weights::<BlockQ4K>(r, nb, &[0, 2], real_h);
            let deq = |b: &BlockQ4K| deq_k4(b.d, b.dmin, &b.scales, &b.qs, None);
            assert_close("Q4_K", dot_q4_k_q8_k(&x, &y), &x, deq, &a);
            let x = weights::<BlockQ5K>(r, nb, &[0, 2], real_h);
            let deq = |b: &BlockQ5K| deq_k4(b.d, b.dmin, &b.scales, &b.qs, Some(&b.qh));
            assert_close("Q5_K", dot_q5_k_q8_k(&x, &y), &x, deq, &a);
            let x = weights::<BlockQ6K>(r, nb, &[208], real_h);
            assert_close("Q6_K", dot_q6_k_q8_k(&x, &y), &x, deq_q6_k, &a);
            let x = weights::<BlockIq4Xs>(r, nb, &[0], real_h);
            assert_close("IQ4_XS", dot_iq4_xs_q8_k(&x, &y), &x, deq_iq4_xs, &a);
            let x = weights::<BlockIq2Xxs>(r, nb, &[0], real_h);
            let got = dot_iq_grid_q8_k(&x, &y);
            assert_close("IQ2_XXS", got, &x, deq_iq_grid, &a);
            let x = weights::<BlockIq2Xs>(r, nb, &[0], real_h);
            assert_close("IQ2_XS", dot_iq_grid_q8_k(&x, &y), &x, deq_iq_grid, &a);
            let x = weights::<BlockIq2S>(r, nb, &[0], real_h);
            assert_close("IQ2_S", dot_iq_grid_q8_k(&x, &y), &x, deq_iq_grid, &a);
        }
    }

    #[test]
    fn zero_scales_give_zero() {
        let r = &mut Rng(42);
        for nb in [1, 2, 3] {
            let y0 = q8_0(r, nb, 1, real_h);
            assert_eq!(dot_q5_0_q8_0(&weights(r, nb, &[0], zero_h), &y0), 0.0);
            assert_eq!(dot_iq4_nl_q8_0(&weights(r, nb, &[0], zero_h), &y0), 0.0);
            assert_eq!(
                dot_iq4_nl_q8_0_tinyblas(&weights(r, nb, &[0], zero_h), &y0),
                0.0
            );
            let y1 = q8_1(r, nb, real_h, false);
            assert_eq!(dot_q5_1_q8_1(&weights(r, nb, &[0, 2], zero_h), &y1), 0.0);
            let yk = q8_k(r, nb, 1, real_d);
            assert_eq!(dot_q2_k_q8_k(&weights(r, nb, &[80, 82], zero_h), &yk), 0.0);
            assert_eq!(dot_q3_k_q8_k(&weights(r, nb, &[108], zero_h), &yk), 0.0);
            assert_eq!(dot_q4_k_q8_k(&weights(r, nb, &[0, 2], zero_h), &yk), 0.0);
            assert_eq!(dot_q5_k_q8_k(&weights(r, nb, &[0, 2], zero_h), &yk), 0.0);
            assert_eq!(dot_q6_k_q8_k(&weights(r, nb, &[208], zero_h), &yk), 0.0);
            assert_eq!(dot_iq4_xs_q8_k(&weights(r, nb, &[0], zero_h), &yk), 0.0);
            let x = weights::<BlockIq2Xxs>(r, nb, &[0], zero_h);
            assert_eq!(dot_iq_grid_q8_k(&x, &yk), 0.0);
            let x = weights::<BlockIq2Xs>(r, nb, &[0], zero_h);
            assert_eq!(dot_iq_grid_q8_k(&x, &yk), 0.0);
            let x = weights::<BlockIq2S>(r, nb, &[0], zero_h);
            assert_eq!(dot_iq_grid_q8_k(&x, &yk), 0.0);
            // A zero activation scale zeroes every product, the min terms included.
            let yk = q8_k(r, nb, 0, |_| 0.0);
            assert_eq!(dot_q4_k_q8_k(&weights(r, nb, &[0, 2], real_h), &yk), 0.0);
            assert_eq!(dot_q2_k_q8_k(&weights(r, nb, &[80, 82], real_h), &yk), 0.0);
        }
    }
}
