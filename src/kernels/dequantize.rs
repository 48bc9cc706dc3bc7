//! Dequantizers of Q5_0, Q5_1, IQ4_NL, the K-quants and IQ4_XS, and the Q8_K activation
//! quantizer, bit-identical to what llama.cpp runs on x86.
//!
//! llama.cpp's `get_rows` (token embeddings) calls `ggml_get_type_traits(type)->to_float`, which is
//! the `dequantize_row_*` of `ggml-quants.c` in ggml-base (no CPU-specific override). That library
//! is compiled without any `-march` flag (baseline x86-64: SSE2, no FMA), so nothing there is
//! fused; each function below does the same operations in the same order.
//!
//! Not that the order could matter: every product before the last operation is exact in f32. An
//! f16 scale has an 11-bit significand; times a 6-bit sub-scale (17 bits), times a value of at
//! most 5 bits (22), or an IQ4 table entry of 7 bits (24), it needs no rounding, and f16
//! subnormals are normal in f32. The only rounding is the last step: the product (Q6_K's
//! `d·sc·q` can need 25 bits) or the `− min` / `+ m`. So a fused multiply-add or any regrouping
//! of the products gives the same bits (NaN payloads aside) — SIMD versions are free to use them.
//!
//! The Q8_K activation quantizer on x86 (`quantize_row_q8_K` in `ggml-cpu/arch/x86/quants.c`,
//! the `from_float` of `GGML_TYPE_Q8_K`) simply calls the reference `quantize_row_q8_K_ref`, also
//! in ggml-base: see [`quantize_act_q8_k`].

use super::blocks::{
    BlockIq4Nl, BlockIq4Xs, BlockQ2K, BlockQ3K, BlockQ4K, BlockQ5K, BlockQ5_0, BlockQ5_1, BlockQ6K,
    BlockQ8K, IqGrid, KVALUES_IQ4NL, K_SCALE_SIZE, Q3_BIAS, Q5_BIAS, Q6_BIAS, Q8K_MAX, QK, QK_K,
    SCALE_BIAS, SUB16, SUB32,
};
use super::blocks::{Iq1Grid, IQ1S_DELTA, IQ1_GROUP, IQ1_HALF};
use super::half::f16_to_f32;

/// Elements one pass over Q2_K/Q3_K's `qs` (32 bytes, four 2-bit planes) or Q6_K's half block
/// covers.
const HALF_K: usize = 128;
/// 1.5 × 2^23: adding it to a float of magnitude below 2^22 leaves the value rounded to the
/// nearest integer (ties to even) in the low mantissa bits (ggml's `nearest_int`).
pub(crate) const ROUND_MAGIC: f32 = 12_582_912.0;
/// The mantissa bits of an f32.
pub(crate) const MANTISSA_MASK: i32 = 0x007f_ffff;
/// The mantissa of [`ROUND_MAGIC`] (2^22), subtracted back out by `nearest_int`.
pub(crate) const ROUND_MAGIC_MANTISSA: i32 = 0x0040_0000;
/// 2^31: the magnitude from which `cvtps2dq` gives its "integer indefinite" `i32::MIN`.
pub(crate) const I32_LIMIT: f32 = 2_147_483_648.0;

/// The f32 value of a little-endian f16 field (exact).
#[inline]
fn h(v: [u8; 2]) -> f32 {
    f16_to_f32(u16::from_le_bytes(v))
}

/// Panics unless `y` holds exactly `n_blocks` blocks of `per_block` values.
#[inline]
fn check_len(n_blocks: usize, per_block: usize, y: &[f32]) {
    assert_eq!(
        n_blocks * per_block,
        y.len(),
        "dequantize: output length does not match the blocks"
    );
}

/// The 5-bit values of a Q5_0/Q5_1 block, element order (0..32): low nibbles then high
/// nibbles, bit j of the little-endian `qh` is element j's fifth bit.
#[inline]
fn q5_values(qs: &[u8; QK / 2], qh: [u8; 4]) -> [i32; QK] {
    let qh = u32::from_le_bytes(qh);
    std::array::from_fn(|e| {
        let nib = if e < QK / 2 {
            qs[e] & 0x0f
        } else {
            qs[e - QK / 2] >> 4
        };
        nib as i32 | ((((qh >> e) & 1) as i32) << 4)
    })
}

/// Q5_0 → f32 as ggml's `dequantize_row_q5_0`: `y = (q − 16) as f32 × d` (one rounding).
///
/// # Panics
/// If `y.len() != 32 × x.len()`.
pub fn dequantize_q5_0(x: &[BlockQ5_0], y: &mut [f32]) {
    check_len(x.len(), QK, y);
    for (b, yb) in x.iter().zip(y.chunks_exact_mut(QK)) {
        let d = h(b.d);
        for (o, q) in yb.iter_mut().zip(q5_values(&b.qs, b.qh)) {
            *o = (q - Q5_BIAS) as f32 * d;
        }
    }
}

/// Q5_1 → f32 as ggml's `dequantize_row_q5_1`: `y = (q as f32 × d) + m`, the product rounded
/// before the sum (no fused multiply-add).
///
/// # Panics
/// If `y.len() != 32 × x.len()`.
pub fn dequantize_q5_1(x: &[BlockQ5_1], y: &mut [f32]) {
    check_len(x.len(), QK, y);
    for (b, yb) in x.iter().zip(y.chunks_exact_mut(QK)) {
        let (d, m) = (h(b.d), h(b.m));
        for (o, q) in yb.iter_mut().zip(q5_values(&b.qs, b.qh)) {
            *o = q as f32 * d + m;
        }
    }
}

/// IQ4_NL → f32 as ggml's `dequantize_row_iq4_nl`: `y = d × KVALUES_IQ4NL[q]` (one rounding);
/// low nibbles are elements 0..16.
///
/// # Panics
/// If `y.len() != 32 × x.len()`.
pub fn dequantize_iq4_nl(x: &[BlockIq4Nl], y: &mut [f32]) {
    check_len(x.len(), QK, y);
    for (b, yb) in x.iter().zip(y.chunks_exact_mut(QK)) {
        let d = h(b.d);
        let (lo, hi) = yb.split_at_mut(QK / 2);
        for ((l, u), &q) in lo.iter_mut().zip(hi.iter_mut()).zip(&b.qs) {
            *l = d * KVALUES_IQ4NL[(q & 0x0f) as usize] as f32;
            *u = d * KVALUES_IQ4NL[(q >> 4) as usize] as f32;
        }
    }
}

/// Q2_K → f32 as ggml's `dequantize_row_q2_K`. Sub-block s (16 elements) has
/// `dl = d × (scales[s] & 15)` and `ml = dmin × (scales[s] >> 4)`, each rounded, then
/// `y = dl × q − ml` (product rounded, then the difference). Element layout: for each half of
/// 128 (32 bytes of `qs`), bit pair p (0..4) of byte l is element `32p + l` of the half.
///
/// # Panics
/// If `y.len() != 256 × x.len()`.
pub fn dequantize_q2_k(x: &[BlockQ2K], y: &mut [f32]) {
    check_len(x.len(), QK_K, y);
    for (b, yb) in x.iter().zip(y.chunks_exact_mut(QK_K)) {
        let (d, dmin) = (h(b.d), h(b.dmin));
        for (s, ys) in yb.chunks_exact_mut(SUB16).enumerate() {
            let sc = b.scales[s];
            let dl = d * (sc & 0x0f) as f32;
            let ml = dmin * (sc >> 4) as f32;
            // Sub-block s: half s/8, bit pair (s%8)/2, bytes 16·(s%2).. of that half's 32.
            let q = &b.qs[32 * (s / 8) + SUB16 * (s % 2)..][..SUB16];
            let shift = 2 * ((s % 8) / 2);
            for (o, &qb) in ys.iter_mut().zip(q) {
                *o = dl * ((qb >> shift) & 3) as f32 - ml;
            }
        }
    }
}

/// Q3_K's sixteen 6-bit scales, unpacked from its 12 bytes (still offset by 32): scale j's low
/// four bits are the low (j < 8) or high (j ≥ 8) nibble of byte `j % 8`, its high two bits are
/// bits `2·(j/4)..` of byte `8 + j % 4`.
#[inline]
pub fn q3_k_scales(s: &[u8; K_SCALE_SIZE]) -> [u8; QK_K / SUB16] {
    std::array::from_fn(|j| {
        let low = if j < 8 { s[j] & 0x0f } else { s[j - 8] >> 4 };
        let high = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
        low | (high << 4)
    })
}

/// Q3_K → f32 as ggml's `dequantize_row_q3_K`. Sub-block s (16 elements) has
/// `dl = d × (scale_s − 32)` (rounded), then `y = dl × (q − 4·!hbit)` (one more rounding).
/// Element layout as Q2_K's, with the high bit of element e (0..256) in bit `e / 32` of
/// `hmask[e % 32]`.
///
/// # Panics
/// If `y.len() != 256 × x.len()`.
pub fn dequantize_q3_k(x: &[BlockQ3K], y: &mut [f32]) {
    check_len(x.len(), QK_K, y);
    for (b, yb) in x.iter().zip(y.chunks_exact_mut(QK_K)) {
        let d = h(b.d);
        let scales = q3_k_scales(&b.scales);
        for (s, ys) in yb.chunks_exact_mut(SUB16).enumerate() {
            let dl = d * (scales[s] as i32 - SCALE_BIAS) as f32;
            let at = SUB16 * (s % 2);
            let q = &b.qs[32 * (s / 8) + at..][..SUB16];
            let hm = &b.hmask[at..][..SUB16];
            let shift = 2 * ((s % 8) / 2);
            let hbit = 1u8 << (s / 2);
            for ((o, &qb), &hb) in ys.iter_mut().zip(q).zip(hm) {
                let low = ((qb >> shift) & 3) as i32;
                let sub = if hb & hbit != 0 { 0 } else { Q3_BIAS };
                *o = dl * (low - sub) as f32;
            }
        }
    }
}

/// The 6-bit scale and min of sub-block `j` (0..8) of a Q4_K/Q5_K block, from its 12 packed
/// bytes `q` (ggml's `get_scale_min_k4`): for j < 4 the low six bits of `q[j]` and `q[j + 4]`;
/// otherwise the nibbles of `q[j + 4]` with the top two bits of `q[j − 4]` and `q[j]` above them.
///
/// # Panics
/// If `j >= 8`.
#[inline]
pub fn get_scale_min_k4(j: usize, q: &[u8; K_SCALE_SIZE]) -> (u8, u8) {
    assert!(
        j < QK_K / SUB32,
        "get_scale_min_k4: sub-block {j} out of range"
    );
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

/// One Q4_K or Q5_K super-block → f32, as ggml's `dequantize_row_q4_K`/`_q5_K` loop over it:
/// sub-block j (32 elements) has `d1 = d × sc_j` and `m1 = dmin × m_j` ([`get_scale_min_k4`]),
/// each rounded, then `y = d1 × q − m1` (product rounded, then the difference), q the nibble plus
/// `fifth(j, l)` (Q5_K's fifth bit of element l, as 0 or 16; 0 for Q4_K). Sub-blocks 2i and
/// 2i+1 are the low and high nibbles of `qs[32i..32i + 32]`.
#[inline]
fn dequantize_k4_block(
    d: [u8; 2],
    dmin: [u8; 2],
    scales: &[u8; K_SCALE_SIZE],
    qs: &[u8; QK_K / 2],
    yb: &mut [f32],
    fifth: impl Fn(usize, usize) -> i32,
) {
    let (d, dmin) = (h(d), h(dmin));
    for (j, ys) in yb.chunks_exact_mut(SUB32).enumerate() {
        let (sc, m) = get_scale_min_k4(j, scales);
        let d1 = d * sc as f32;
        let m1 = dmin * m as f32;
        let shift = 4 * (j % 2);
        let q = &qs[SUB32 * (j / 2)..][..SUB32];
        for (l, (o, &qb)) in ys.iter_mut().zip(q).enumerate() {
            let v = i32::from((qb >> shift) & 0x0f) + fifth(j, l);
            *o = d1 * v as f32 - m1;
        }
    }
}

/// Q4_K → f32 as ggml's `dequantize_row_q4_K`. Sub-block j (32 elements) has `d1 = d × sc_j`
/// and `m1 = dmin × m_j` ([`get_scale_min_k4`]), each rounded, then `y = d1 × q − m1` (product
/// rounded, then the difference). Sub-blocks 2i and 2i+1 are the low and high nibbles of
/// `qs[32i..32i + 32]`.
///
/// # Panics
/// If `y.len() != 256 × x.len()`.
pub fn dequantize_q4_k(x: &[BlockQ4K], y: &mut [f32]) {
    check_len(x.len(), QK_K, y);
    for (b, yb) in x.iter().zip(y.chunks_exact_mut(QK_K)) {
        dequantize_k4_block(b.d, b.dmin, &b.scales, &b.qs, yb, |_, _| 0);
    }
}

/// Q5_K → f32 as ggml's `dequantize_row_q5_K`: as Q4_K, with `q = nibble + 16·hbit`, the high
/// bit of sub-block j's element l being bit j of `qh[l]`.
///
/// # Panics
/// If `y.len() != 256 × x.len()`.
pub fn dequantize_q5_k(x: &[BlockQ5K], y: &mut [f32]) {
    check_len(x.len(), QK_K, y);
    for (b, yb) in x.iter().zip(y.chunks_exact_mut(QK_K)) {
        let fifth = |j: usize, l: usize| Q5_BIAS * i32::from((b.qh[l] >> j) & 1);
        dequantize_k4_block(b.d, b.dmin, &b.scales, &b.qs, yb, fifth);
    }
}

/// Q6_K → f32 as ggml's `dequantize_row_q6_K`: `y = (d × sc_s) × (q − 32)`, the scale product
/// rounded first. Within each half of 128 (64 bytes of `ql`, 32 of `qh`), element `32p + l`
/// (p in 0..4) takes the low (p even) or high nibble of `ql[l + 32·(p%2)]` and bits `2p..2p+2` of
/// `qh[l]`; its sub-block is `8·half + 2p + l/16`.
///
/// # Panics
/// If `y.len() != 256 × x.len()`.
pub fn dequantize_q6_k(x: &[BlockQ6K], y: &mut [f32]) {
    check_len(x.len(), QK_K, y);
    for (b, yb) in x.iter().zip(y.chunks_exact_mut(QK_K)) {
        let d = h(b.d);
        for (n, yh) in yb.chunks_exact_mut(HALF_K).enumerate() {
            let ql = &b.ql[64 * n..][..64];
            let qh = &b.qh[32 * n..][..32];
            let sc = &b.scales[8 * n..][..8];
            for (p, yp) in yh.chunks_exact_mut(32).enumerate() {
                let ql = &ql[32 * (p % 2)..][..32];
                let shift = 4 * (p / 2);
                for (l, o) in yp.iter_mut().enumerate() {
                    let v = ((ql[l] >> shift) & 0x0f) | (((qh[l] >> (2 * p)) & 3) << 4);
                    let s = sc[2 * p + l / SUB16];
                    *o = d * s as f32 * (v as i32 - Q6_BIAS) as f32;
                }
            }
        }
    }
}

/// IQ4_XS → f32 as ggml's `dequantize_row_iq4_xs`. Sub-block j (32 elements) has
/// `dl = d × (ls_j − 32)` (rounded; `ls_j` = nibble j%2 of `scales_l[j/2]` | bits `2j..2j+2` of
/// the little-endian `scales_h` << 4), then `y = dl × KVALUES_IQ4NL[q]`, low nibbles of
/// `qs[16j..16j + 16]` first.
///
/// # Panics
/// If `y.len() != 256 × x.len()`.
pub fn dequantize_iq4_xs(x: &[BlockIq4Xs], y: &mut [f32]) {
    check_len(x.len(), QK_K, y);
    for (b, yb) in x.iter().zip(y.chunks_exact_mut(QK_K)) {
        let d = h(b.d);
        let scales_h = u16::from_le_bytes(b.scales_h);
        for (j, ys) in yb.chunks_exact_mut(SUB32).enumerate() {
            let low = (b.scales_l[j / 2] >> (4 * (j % 2))) & 0x0f;
            let high = ((scales_h >> (2 * j)) & 3) as u8;
            let ls = (low | (high << 4)) as i32;
            let dl = d * (ls - SCALE_BIAS) as f32;
            let (lo, hi) = ys.split_at_mut(SUB32 / 2);
            let q = &b.qs[16 * j..][..16];
            for ((l, u), &qb) in lo.iter_mut().zip(hi.iter_mut()).zip(q) {
                *l = dl * KVALUES_IQ4NL[(qb & 0x0f) as usize] as f32;
                *u = dl * KVALUES_IQ4NL[(qb >> 4) as usize] as f32;
            }
        }
    }
}

/// The IQ2 and IQ3 types ([`IqGrid`]): `db × grid × ±1` with `db = d × (2·ls + 1)` per scale
/// group, times the type's factor (IQ2's eighth, IQ3_XXS's quarter). ggml writes `d × (0.5 +
/// ls) × 0.25` (IQ2) and `d × (0.5 + ls) × 0.5` (IQ3_XXS): the same values, since every
/// product here is exact in f32 (an f16 scale times a 5-bit factor, a power of two, a 6-bit
/// grid value).
///
/// # Panics
/// If `y.len() != 256 × x.len()`.
pub fn dequantize_iq_grid<B: IqGrid>(x: &[B], y: &mut [f32]) {
    check_len(x.len(), QK_K, y);
    for (b, yb) in x.iter().zip(y.chunks_exact_mut(QK_K)) {
        let d = h(b.d());
        for (s, ys) in yb.chunks_exact_mut(B::SCALE_GROUP).enumerate() {
            let db = d * b.odd_scale(s) as f32 * B::SUM_SCALE.unwrap_or(1.0);
            for (j, v) in ys.iter_mut().enumerate() {
                let (g, neg) = b.value(B::SCALE_GROUP * s + j);
                *v = db * f32::from(g) * if neg { -1.0 } else { 1.0 };
            }
        }
    }
}

/// The IQ1 types ([`Iq1Grid`]): `dl × (grid + delta)` with `dl = d × (2·ls + 1)` and
/// `delta = ±1/8` (`IQ1S_DELTA` for both, as ggml's `dequantize_row_iq1_s`/`_iq1_m`; every step exact in f32: an f16
/// scale times a 4-bit odd factor, times a value of the form k/8 with |k| ≤ 9).
///
/// # Panics
/// If `y.len() != 256 × x.len()`.
pub fn dequantize_iq1<B: Iq1Grid>(x: &[B], y: &mut [f32]) {
    check_len(x.len(), QK_K, y);
    for (b, yb) in x.iter().zip(y.chunks_exact_mut(QK_K)) {
        let d = h(b.d());
        for (g, yg) in yb.chunks_exact_mut(IQ1_GROUP).enumerate() {
            let dl = d * b.odd_scale(g * IQ1_GROUP / IQ1_HALF) as f32;
            let delta = if b.delta_negative(g) {
                -IQ1S_DELTA
            } else {
                IQ1S_DELTA
            };
            for (j, v) in yg.iter_mut().enumerate() {
                *v = dl * (f32::from(b.value(IQ1_GROUP * g + j)) + delta);
            }
        }
    }
}

/// ggml's `nearest_int`: the float plus 1.5·2^23, its low 23 bits read back as an integer, minus
/// 2^22. Round to nearest, ties to even, for |v| < 2^22; the bit trick is kept as is so that
/// NaN and infinity give what ggml's give (−2^22 or a payload-dependent value).
#[inline]
pub(crate) fn nearest_int(v: f32) -> i32 {
    let r = v + ROUND_MAGIC;
    (r.to_bits() as i32 & MANTISSA_MASK) - ROUND_MAGIC_MANTISSA
}

/// Row → Q8_K as llama.cpp does on x86 (`quantize_row_q8_K` = ggml's `quantize_row_q8_K_ref`).
///
/// Per block of 256: `max` is the first element of largest `|x|` (a strictly greater magnitude
/// replaces it; NaN never does); if that magnitude is 0 the block is all zeros (`d = 0`, `qs`
/// and `bsums` 0 — ggml leaves `bsums` unwritten there; zero is what they sum to). Otherwise
/// `iscale = −127 / max` (rounded), `q = min(127, nearest_int(iscale × x))` (product rounded,
/// ties to even; truncated to i8 as C stores it), `bsums[k] = Σ q[16k..16k + 16]`, and
/// `d = 1 / iscale` (rounded again: not exactly `−max/127`). The signed maximum maps to −127.
///
/// # Panics
/// If `x.len() != 256 × y.len()`.
pub fn quantize_act_q8_k(x: &[f32], y: &mut [BlockQ8K]) {
    assert_eq!(
        x.len(),
        y.len() * QK_K,
        "quantize_act_q8_k: input length does not match the blocks"
    );
    for (xb, yb) in x.chunks_exact(QK_K).zip(y.iter_mut()) {
        let (mut amax, mut max) = (0f32, 0f32);
        for &v in xb {
            if v.abs() > amax {
                amax = v.abs();
                max = v;
            }
        }
        if amax == 0.0 {
            *yb = BlockQ8K::default();
            continue;
        }
        let iscale = -Q8K_MAX / max;
        for (q, &v) in yb.qs.iter_mut().zip(xb) {
            // C stores the int into an int8_t: keep its low byte.
            *q = nearest_int(iscale * v).min(Q8K_MAX as i32) as i8;
        }
        for (s, qs) in yb.bsums.iter_mut().zip(yb.qs.chunks_exact(SUB16)) {
            *s = qs.iter().map(|&q| q as i32).sum::<i32>() as i16;
        }
        yb.d = 1.0 / iscale;
    }
}

/// Row → Q8_K as llama.cpp quantizes activations for its repacked-weight matmul on x86
/// (`ggml_quantize_mat_q8_K_4x8`, AVX2): Q4_K weights (AVX2) and Q2_K weights (AVX-512) whose
/// row count is a multiple of 8, for each whole group of four tokens; leftover tokens, and every
/// other path, use [`quantize_act_q8_k`].
///
/// Two differences from [`quantize_act_q8_k`]: the scale is `iscale = −127/amax` if some element
/// equals `+amax`, else `+127/amax` (not "the first element of largest magnitude"), and each
/// value is `round_ties_even(x × iscale)` converted as `cvtps2dq` does (NaN or out of range:
/// `i32::MIN`), then saturated to i8. For finite rows whose `amax` is not tiny (> 127/f32::MAX)
/// both give the same bits, except when `+amax` and `−amax` both occur with `−amax` first: then
/// `d`, `qs` and `bsums` here are exactly negated (a dot product's bits do not change, only the
/// sign of an exact zero can). Rows holding NaN are not reproduced (ggml's SIMD max handles NaN
/// per lane).
///
/// # Panics
/// If `x.len() != 256 × y.len()`.
pub fn quantize_act_q8_k_mat(x: &[f32], y: &mut [BlockQ8K]) {
    assert_eq!(x.len(), y.len() * QK_K, "quantize_act_q8_k_mat: length");
    for (xb, yb) in x.chunks_exact(QK_K).zip(y.iter_mut()) {
        let amax = xb.iter().fold(0f32, |m, v| m.max(v.abs()));
        if amax == 0.0 {
            *yb = BlockQ8K::default();
            continue;
        }
        let positive_max = xb.contains(&amax);
        let iscale = if positive_max { -Q8K_MAX } else { Q8K_MAX } / amax;
        for (q, &v) in yb.qs.iter_mut().zip(xb) {
            let r = (v * iscale).round_ties_even();
            // cvtps2dq: NaN and values outside i32 give i32::MIN (`as` would saturate instead).
            let i = if r.is_nan() || r.abs() >= I32_LIMIT {
                i32::MIN
            } else {
                r as i32
            };
            *q = i.clamp(i8::MIN as i32, i8::MAX as i32) as i8;
        }
        for (s, qs) in yb.bsums.iter_mut().zip(yb.qs.chunks_exact(SUB16)) {
            *s = qs.iter().map(|&q| q as i16).sum();
        }
        yb.d = 1.0 / iscale;
    }
}

#[cfg(test)]
mod tests {
    use super::super::blocks::{as_blocks, Block, BlockIq2S, BlockIq2Xs, BlockIq2Xxs};
    use super::*;
    use std::mem::{offset_of, size_of};

    /// FNV-1a (64-bit) over the little-endian bits of `vals`.
    fn fnv(vals: &[f32]) -> u64 {
        let mut h = 0xcbf2_9ce4_8422_2325u64;
        for b in vals.iter().flat_map(|v| v.to_bits().to_le_bytes()) {
            h ^= b as u64;
            h = h.wrapping_mul(0x100_0000_01b3);
        }
        h
    }

    /// A block from `bytes` (any pattern is a valid block).
    fn from_bytes<B: Block>(bytes: &[u8]) -> B {
        as_blocks::<B>(bytes).expect("whole block")[0]
    }

    /// Hand-built block `k` of a pair: byte i = (37·i + 11 + 97·k) mod 256, then the f16 fields
    /// at `offs` set to `f16s`.
    fn hand_block<B: Block>(k: usize, offs: &[usize], f16s: &[u16]) -> B {
        let mut b: Vec<u8> = (0..size_of::<B>())
            .map(|i| ((37 * i + 11 + 97 * k) % 256) as u8)
            .collect();
        for (&o, &h) in offs.iter().zip(f16s) {
            b[o..o + 2].copy_from_slice(&h.to_le_bytes());
        }
        from_bytes(&b)
    }

    /// f16 fields of the two hand-built blocks: block 0 d ≈ 0.1, dmin/m = 0.046875; block 1
    /// d ≈ −0.62, dmin/m subnormal (515 × 2^−24).
    const KAT_F16: [[u16; 2]; 2] = [[0x2e66, 0x2a00], [0xb8f5, 0x0203]];

    /// Known answers from llama.cpp, per hand-built block: FNV-1a of all output bits (high and
    /// low halves), then the bits of y[0], y[1], y[17], y[30] and y[last]. The harness built each
    /// block as `hand_block` does and called `ggml_get_type_traits(type)->to_float` on it
    /// (ggml-base's `dequantize_row_*`, what `get_rows` runs).
    fn kat<B: Block>(deq: fn(&[B], &mut [f32]), n: usize, offs: &[usize], t: usize) {
        for (k, w) in KAT_DEQ[2 * t..2 * t + 2].iter().enumerate() {
            let b: B = hand_block(k, offs, &KAT_F16[k]);
            let mut y = vec![0f32; n];
            deq(&[b], &mut y);
            let got = [0, 1, 17, 30, n - 1].map(|j| y[j].to_bits());
            assert_eq!(got, w[2..], "block {k}: sampled outputs");
            let hash = (w[0] as u64) << 32 | w[1] as u64;
            assert_eq!(fnv(&y), hash, "block {k}: hash of all outputs");
        }
    }

    /// Rows 2t and 2t + 1: blocks 0 and 1 of type t (the `t` each `kat` call passes).
    #[rustfmt::skip]
    const KAT_DEQ: [[u32; 7]; 24] = [
        // Q5_0 blocks 0, 1
        [0xb9c7e813, 0xf4539fc5, 0x3f665800, 0xbe4cc000, 0x00000000, 0x3fb32800, 0x3dccc000],
        [0x58640671, 0x45afcf5b, 0x406df000, 0xc114b600, 0x40c64800, 0x40da1c00, 0x40b27400],
        // Q5_1 blocks 0, 1
        [0x7821681b, 0x647a84e7, 0x3ff92400, 0x401c9000, 0x3f0bf800, 0x3eb19000, 0x3f0bf800],
        [0xe1b2a026, 0xf97da1af, 0xc01e9f7f, 0xc0b273c0, 0xc185d6f0, 0xc177d9e0, 0xc0da1bc0],
        // IQ4_NL blocks 0, 1
        [0xb59b0516, 0x158a0067, 0xc05ff200, 0x401ff600, 0xbf7ff000, 0xc05ff200, 0x3dccc000],
        [0xa6402525, 0x8dc14887, 0x415a1c00, 0xc1bc5e00, 0xc22b0480, 0xc1bc5e00, 0xc25c9680],
        // Q2_K blocks 0, 1
        [0x809356ad, 0x148d7af3, 0x40532600, 0x00000000, 0xbe100000, 0xbe100000, 0x3eeb2000],
        [0x85a8f64a, 0xc0777bbb, 0xb9412000, 0xc0edf182, 0xbf1eb21b, 0xbf9ea90e, 0xc1503322],
        // Q3_K blocks 0, 1
        [0x22596993, 0x76a3bd7a, 0x41019180, 0xc12cc200, 0x414cc000, 0xc04cc000, 0x40865e00],
        [0x8b227f0f, 0x208c1d1f, 0xc2464800, 0x41464800, 0x4114b600, 0xc194b600, 0x80000000],
        // Q4_K blocks 0, 1
        [0xcec116db, 0x3f4d9df7, 0x41fd9bc0, 0xc0190000, 0xc0190000, 0x3f356800, 0x409ea600],
        [0x5c6ff924, 0x840ece61, 0xba20f000, 0xba20f000, 0xba20f000, 0xba20f000, 0xc1640722],
        // Q5_K blocks 0, 1
        [0xb4e8d23e, 0xb5872ef3, 0x42a293f0, 0xc0190000, 0xc0190000, 0x42492fa0, 0x412f4d00],
        [0x18da82de, 0xe3de8c06, 0xba20f000, 0xba20f000, 0xba20f000, 0xba20f000, 0xc31cc432],
        // Q6_K blocks 0, 1
        [0x2e0bc216, 0x87306126, 0xc30f10a8, 0x43298f00, 0x424cc000, 0x41bff400, 0xc0bff400],
        [0xeab8fef5, 0x22761cc7, 0x44085180, 0x43cc7a40, 0x443c3658, 0xc2c8c280, 0x4486c4f0],
        // IQ4_XS blocks 0, 1
        [0x1044b734, 0xeec8e1e5, 0x40cff300, 0xbdccc000, 0x405ff200, 0x40cff300, 0xbfccc000],
        [0xb9071ef8, 0xe46b9328, 0x00000000, 0x80000000, 0x80000000, 0x80000000, 0xc497a778],
        // IQ2_XXS blocks 0, 1
        [0x9079910a, 0xf5b15e9e, 0xc0bd2760, 0x40bd2760, 0x40bd2760, 0xc0bd2760, 0xc100f7f0],
        [0xdb962a49, 0xaffac03d, 0xc2993408, 0x41640600, 0xc1640600, 0x41640600, 0x4185d700],
        // IQ2_XS blocks 0, 1
        [0x56aa97c4, 0xb2d8ab7c, 0xbf8cc400, 0x405bf240, 0xbff32400, 0x3ff32400, 0xbff32400],
        [0x54aa1b4d, 0x99bb2484, 0x41c96120, 0xc1c96120, 0x42701b30, 0x4199ab00, 0x42ce7dc8],
        // IQ2_S blocks 0, 1
        [0x926cc376, 0x95065e97, 0xc16824b0, 0x4106f790, 0xc145c070, 0xc0e5f1a0, 0x40f9f060],
        [0x7a3397d6, 0x0a85807f, 0xc18fc100, 0x42609d90, 0xc11fdd40, 0x411fdd40, 0x411ae840],
    ];

    #[test]
    fn q5_0_q5_1_iq4_nl_match_llama_cpp() {
        let (d, m) = (offset_of!(BlockQ5_1, d), offset_of!(BlockQ5_1, m));
        kat::<BlockQ5_0>(dequantize_q5_0, QK, &[offset_of!(BlockQ5_0, d)], 0);
        kat::<BlockQ5_1>(dequantize_q5_1, QK, &[d, m], 1);
        kat::<BlockIq4Nl>(dequantize_iq4_nl, QK, &[offset_of!(BlockIq4Nl, d)], 2);
    }

    #[test]
    fn k_quants_and_iq4_xs_match_llama_cpp() {
        let q2 = [offset_of!(BlockQ2K, d), offset_of!(BlockQ2K, dmin)];
        let q4 = [offset_of!(BlockQ4K, d), offset_of!(BlockQ4K, dmin)];
        let q5 = [offset_of!(BlockQ5K, d), offset_of!(BlockQ5K, dmin)];
        kat::<BlockQ2K>(dequantize_q2_k, QK_K, &q2, 3);
        kat::<BlockQ3K>(dequantize_q3_k, QK_K, &[offset_of!(BlockQ3K, d)], 4);
        kat::<BlockQ4K>(dequantize_q4_k, QK_K, &q4, 5);
        kat::<BlockQ5K>(dequantize_q5_k, QK_K, &q5, 6);
        kat::<BlockQ6K>(dequantize_q6_k, QK_K, &[offset_of!(BlockQ6K, d)], 7);
        kat::<BlockIq4Xs>(dequantize_iq4_xs, QK_K, &[offset_of!(BlockIq4Xs, d)], 8);
    }

    #[test]
    fn iq2_types_match_llama_cpp() {
        let deq_xxs = dequantize_iq_grid::<BlockIq2Xxs>;
        kat::<BlockIq2Xxs>(deq_xxs, QK_K, &[offset_of!(BlockIq2Xxs, d)], 9);
        let deq_xs = dequantize_iq_grid::<BlockIq2Xs>;
        kat::<BlockIq2Xs>(deq_xs, QK_K, &[offset_of!(BlockIq2Xs, d)], 10);
        let deq_s = dequantize_iq_grid::<BlockIq2S>;
        kat::<BlockIq2S>(deq_s, QK_K, &[offset_of!(BlockIq2S, d)], 11);
    }

    /// Hand-decoded IQ2 blocks, read off ggml's `dequantize_row_iq2_*` and block layouts: the
    /// fields that place a value (grid index bits, sign index or bits, scale nibble) each
    /// checked at one group.
    #[test]
    fn iq2_blocks_decode_as_ggml_lays_them_out() {
        use super::super::iq_grids::{IQ2S_GRID, IQ2XS_GRID, IQ2XXS_GRID};
        let grid = |e: u64, j: usize| f32::from(e.to_le_bytes()[j]);
        let deq = |f: &dyn Fn(&mut [f32])| {
            let mut y = vec![0f32; QK_K];
            f(&mut y);
            y
        };
        // IQ2_XXS, d = 1. Sub-block 1 (bytes 8..16): group 5's index 7; the word at 12: sign
        // index 3 for group 5 (bits 7..14; KSIGNS[3] = 0b11: values 0, 1 negative), ls = 2
        // (bits 28..32): db = (0.5 + 2)/4.
        let mut b = BlockIq2Xxs {
            d: F16_ONE,
            ..Default::default()
        };
        b.qs[9] = 7;
        b.qs[12..16].copy_from_slice(&(3u32 << 7 | 2 << 28).to_le_bytes());
        let y = deq(&|y| dequantize_iq_grid(&[b], y));
        let db = 2.5 * 0.25;
        for j in 0..8 {
            let sign = if j < 2 { -1.0 } else { 1.0 };
            assert_eq!(
                y[40 + j],
                db * grid(IQ2XXS_GRID[7], j) * sign,
                "XXS value {j}"
            );
        }
        // Sub-block 0 has index 0 and ls 0 everywhere: 8 × (0.5/4), all positive.
        assert_eq!(y[0], 0.125 * grid(IQ2XXS_GRID[0], 0));
        // IQ2_XS, d = 1: group 3 (values 24..32, the second sixteen of sub-block 0) is the u16
        // at qs[6..8]: index 300, sign index 1 (KSIGNS[1] = 0x81: values 0 and 7 negative);
        // scales[0] = 0x52: its scale is the high nibble 5.
        let mut b = BlockIq2Xs {
            d: F16_ONE,
            ..Default::default()
        };
        b.qs[6..8].copy_from_slice(&(300u16 | 1 << 9).to_le_bytes());
        b.scales[0] = 0x52;
        let y = deq(&|y| dequantize_iq_grid(&[b], y));
        for j in 0..8 {
            let sign = if j == 0 || j == 7 { -1.0 } else { 1.0 };
            assert_eq!(
                y[24 + j],
                5.5 * 0.25 * grid(IQ2XS_GRID[300], j) * sign,
                "XS {j}"
            );
        }
        assert_eq!(y[0], 2.5 * 0.25 * grid(IQ2XS_GRID[0], 0), "XS low nibble");
        // IQ2_S, d = −2: group 6 (values 48..56, sub-block 1's second sixteen) is qs[6] = 9
        // plus (bits 4..6 of qh[1] = 0b11) × 256 = 777; signs[6] = 0x80: value 7 negative;
        // scales[1] = 0x3c: its scale is the high nibble 3, the first sixteen's the low 12.
        let mut b = BlockIq2S {
            d: [0x00, 0xc0],
            ..Default::default()
        };
        b.qs[6] = 9;
        b.qh[1] = 0b11 << 4;
        b.signs[6] = 0x80;
        b.scales[1] = 0x3c;
        let y = deq(&|y| dequantize_iq_grid(&[b], y));
        for j in 0..8 {
            let sign = if j == 7 { -1.0 } else { 1.0 };
            assert_eq!(
                y[48 + j],
                -2.0 * 3.5 * 0.25 * grid(IQ2S_GRID[777], j) * sign,
                "S {j}"
            );
        }
        assert_eq!(
            y[32],
            -2.0 * 12.5 * 0.25 * grid(IQ2S_GRID[0], 0),
            "S low nibble"
        );
    }

    /// The two hand-built Q8_K rows of the known-answer test.
    fn kat_rows() -> Vec<f32> {
        let a = (0..QK_K).map(|j| ((j * 29 + 7) % 61) as f32 / 8.0 - 3.5);
        let b = (0..QK_K).map(|j| ((j * 13 + 5) % 41) as f32 * 0.37 - 9.1);
        a.chain(b).collect()
    }

    /// Known answers from llama.cpp: the harness called
    /// `ggml_get_type_traits_cpu(GGML_TYPE_Q8_K)->from_float` on `kat_rows()` and printed d's
    /// bits, FNV-1a of the qs (as f32), the first eight qs and all bsums.
    #[test]
    fn q8_k_matches_llama_cpp() {
        let x = kat_rows();
        let mut y = vec![BlockQ8K::default(); 2];
        quantize_act_q8_k(&x, &mut y);
        #[rustfmt::skip]
        let want: [(u32, u64, [i8; 8], [i16; 16]); 2] = [
            (0xbd010204, 0x09006b55ca98326f, [83, -32, 95, -20, 107, -8, -123, 4],
             [-130, -61, 11, -158, -328, -16, -188, 127, -285, -213, -144, -72, 0, -170, -340,
              -29]),
            (0x3d92bf18, 0xee1b994f888530d3, [-101, -34, 33, -112, -44, 23, -122, -55],
             [-338, -515, -478, -230, -406, -370, -545, -298, -261, -437, -401, -364, -329, -292,
              -468, -432]),
        ];
        for (b, (d, hash, head, bsums)) in y.iter().zip(want) {
            assert_eq!(b.d.to_bits(), d);
            let qf: Vec<f32> = b.qs.iter().map(|&q| q as f32).collect();
            assert_eq!(fnv(&qf), hash);
            assert_eq!(b.qs[..8], head);
            assert_eq!(b.bsums, bsums);
        }
    }

    use crate::kernels::test_util::SplitMix as Rng;

    #[test]
    fn q8_k_round_trip_and_sums() {
        let mut r = Rng(7);
        for round in 0..200 {
            let s = 10f32.powi(round % 13 - 6);
            let x: Vec<f32> = (0..2 * QK_K).map(|_| (r.unit() - 0.5) * s).collect();
            let mut y = vec![BlockQ8K::default(); 2];
            quantize_act_q8_k(&x, &mut y);
            for (xb, b) in x.chunks_exact(QK_K).zip(&y) {
                let d = b.d.abs();
                assert!(d > 0.0);
                for (&v, &q) in xb.iter().zip(&b.qs) {
                    // Half a step, plus slack for the rounded iscale and d.
                    assert!((v - b.d * q as f32).abs() <= d * 0.5 * 1.0001);
                }
                for (k, &s) in b.bsums.iter().enumerate() {
                    let sum: i32 = b.qs[16 * k..16 * k + 16].iter().map(|&q| q as i32).sum();
                    assert_eq!(s as i32, sum);
                }
                // The first element of largest magnitude maps to −127.
                let m = (0..QK_K)
                    .reduce(|a, i| if xb[i].abs() > xb[a].abs() { i } else { a })
                    .unwrap();
                assert_eq!(b.qs[m], -127);
            }
        }
    }

    #[test]
    fn q8_k_zero_block_is_all_zero() {
        let mut x = vec![0f32; 2 * QK_K];
        x[QK_K..].iter_mut().step_by(3).for_each(|v| *v = -0.0);
        x[QK_K + 1] = f32::NAN; // NaN never counts as the maximum
        let mut y = vec![BlockQ8K::default(); 2];
        y[0].bsums = [1; 16];
        y[1].qs = [5; QK_K];
        quantize_act_q8_k(&x, &mut y);
        for b in &y {
            assert_eq!(b.d.to_bits(), 0);
            assert!(b.qs.iter().all(|&q| q == 0));
            assert!(b.bsums.iter().all(|&s| s == 0));
        }
    }

    #[test]
    fn q8_k_ties_round_to_even_and_first_max_wins() {
        // Signed max −127 first: iscale = 1, so q = x rounded half to even.
        let mut x = vec![0f32; QK_K];
        x[0] = -127.0;
        x[1] = 127.0;
        x[2] = 2.5;
        x[3] = -3.5;
        x[4] = 0.5;
        let mut y = [BlockQ8K::default()];
        quantize_act_q8_k(&x, &mut y);
        assert_eq!(y[0].d, 1.0);
        assert_eq!(y[0].qs[..5], [-127, 127, 2, -4, 0]);
    }

    #[test]
    fn q8_k_mat_differs_from_ref_only_in_the_sign_of_a_tie() {
        let mut r = Rng(19);
        for round in 0..300 {
            let mut x: Vec<f32> = (0..QK_K).map(|_| r.unit() * 2.0 - 1.0).collect();
            let tie = round % 2 == 1;
            if tie {
                // −amax before +amax: ggml's reference keeps −amax, the repack path +amax.
                (x[3], x[200]) = (-1.5, 1.5);
            }
            let (mut a, mut b) = ([BlockQ8K::default()], [BlockQ8K::default()]);
            quantize_act_q8_k(&x, &mut a);
            quantize_act_q8_k_mat(&x, &mut b);
            let sign = if tie { -1 } else { 1 };
            assert_eq!(b[0].d, sign as f32 * a[0].d);
            assert_eq!(b[0].qs, a[0].qs.map(|q| sign as i8 * q));
            assert_eq!(b[0].bsums, a[0].bsums.map(|s| sign as i16 * s));
        }
    }

    /// Packs eight 6-bit (scale, min) pairs as Q4_K/Q5_K store them (the inverse of
    /// `get_scale_min_k4`, written from the format description).
    fn pack_k4(sc: [u8; 8], m: [u8; 8]) -> [u8; K_SCALE_SIZE] {
        let mut q = [0u8; K_SCALE_SIZE];
        for j in 0..8 {
            if j < 4 {
                q[j] |= sc[j];
                q[j + 4] |= m[j];
            } else {
                q[j + 4] = (sc[j] & 0x0f) | ((m[j] & 0x0f) << 4);
                q[j - 4] |= (sc[j] >> 4) << 6;
                q[j] |= (m[j] >> 4) << 6;
            }
        }
        q
    }

    #[test]
    fn scale_min_k4_unpacks_every_packing() {
        let mut r = Rng(3);
        for v in 0..64u8 {
            for w in 0..64u8 {
                let j = (v as usize + w as usize) % 8;
                let mut sc = r.bytes::<8>().map(|b| b & 63);
                let mut m = r.bytes::<8>().map(|b| b & 63);
                (sc[j], m[j]) = (v, w);
                let q = pack_k4(sc, m);
                for i in 0..8 {
                    assert_eq!(get_scale_min_k4(i, &q), (sc[i], m[i]));
                }
            }
        }
    }

    /// Packs sixteen 6-bit scales as Q3_K stores them (ggml's layout).
    fn pack_q3(s: [u8; 16]) -> [u8; K_SCALE_SIZE] {
        let mut q = [0u8; K_SCALE_SIZE];
        for (j, &v) in s.iter().enumerate() {
            q[j % 8] |= (v & 0x0f) << (4 * (j / 8));
            q[8 + j % 4] |= (v >> 4) << (2 * (j / 4));
        }
        q
    }

    #[test]
    fn q3_k_scales_unpack_every_packing() {
        let mut r = Rng(5);
        for _ in 0..2000 {
            let s = r.bytes::<16>().map(|b| b & 63);
            assert_eq!(q3_k_scales(&pack_q3(s)), s);
        }
    }

    const F16_ONE: [u8; 2] = [0x00, 0x3c];

    #[test]
    fn q3_k_with_high_bits_set_is_q2_k_without_mins() {
        // Same 2-bit layout: Q3_K scale 32 + s with every high bit set equals Q2_K scale s with
        // min 0 (dmin = 0 too).
        let mut r = Rng(11);
        for _ in 0..200 {
            let (qs, d) = (r.bytes::<{ QK_K / 4 }>(), r.bytes::<2>());
            let s = r.bytes::<16>().map(|b| b & 0x0f);
            let q2 = BlockQ2K {
                scales: s.map(|v| v | (r.next() as u8 & 0xf0)),
                qs,
                d,
                dmin: [0; 2],
            };
            let q3 = BlockQ3K {
                hmask: [0xff; QK_K / 8],
                qs,
                scales: pack_q3(s.map(|v| v + SCALE_BIAS as u8)),
                d,
            };
            let (mut a, mut b) = ([0f32; QK_K], [0f32; QK_K]);
            dequantize_q2_k(&[q2], &mut a);
            dequantize_q3_k(&[q3], &mut b);
            assert_eq!(a.map(f32::to_bits), b.map(f32::to_bits));
        }
    }

    #[test]
    fn q5_k_without_high_bits_is_q4_k_and_high_bits_add_16() {
        let mut r = Rng(13);
        for _ in 0..200 {
            let (qs, scales) = (r.bytes::<{ QK_K / 2 }>(), r.bytes::<K_SCALE_SIZE>());
            let q4 = BlockQ4K {
                d: F16_ONE,
                dmin: [0; 2],
                scales,
                qs,
            };
            let mut q5 = BlockQ5K {
                d: F16_ONE,
                dmin: [0; 2],
                scales,
                qh: [0; QK_K / 8],
                qs,
            };
            let (mut a, mut b) = ([0f32; QK_K], [0f32; QK_K]);
            dequantize_q4_k(&[q4], &mut a);
            dequantize_q5_k(&[q5], &mut b);
            assert_eq!(a.map(f32::to_bits), b.map(f32::to_bits));
            q5.qh = [0xff; QK_K / 8];
            dequantize_q5_k(&[q5], &mut b);
            for (j, (sa, sb)) in a.chunks(SUB32).zip(b.chunks(SUB32)).enumerate() {
                let sc = get_scale_min_k4(j, &scales).0 as f32;
                for (x, y) in sa.iter().zip(sb) {
                    assert_eq!(*y, x + 16.0 * sc);
                }
            }
        }
    }

    #[test]
    fn iq4_xs_with_unit_scales_is_iq4_nl() {
        // ls = 33 everywhere: low nibbles 1, high bits 0b10 → dl = d × 1.
        let mut r = Rng(17);
        for _ in 0..200 {
            let (qs, d) = (r.bytes::<{ QK_K / 2 }>(), r.bytes::<2>());
            let xs = BlockIq4Xs {
                d,
                scales_h: [0xaa, 0xaa],
                scales_l: [0x11; 4],
                qs,
            };
            let nl: Vec<BlockIq4Nl> = qs
                .chunks_exact(QK / 2)
                .map(|c| BlockIq4Nl {
                    d,
                    qs: c.try_into().unwrap(),
                })
                .collect();
            let (mut a, mut b) = ([0f32; QK_K], [0f32; QK_K]);
            dequantize_iq4_xs(&[xs], &mut a);
            dequantize_iq4_nl(&nl, &mut b);
            assert_eq!(a.map(f32::to_bits), b.map(f32::to_bits));
        }
    }

    #[test]
    fn q5_0_and_q5_1_read_the_fifth_bit_of_each_element() {
        // d = 1: element e is (nibble | 16·bit e of qh) − 16 for Q5_0, plus m = 1 for Q5_1.
        let qs: [u8; QK / 2] = std::array::from_fn(|i| (i as u8) | ((15 - i as u8) << 4));
        for e in 0..QK {
            let qh = (1u32 << e).to_le_bytes();
            let mut y = [0f32; QK];
            dequantize_q5_0(&[BlockQ5_0 { d: F16_ONE, qh, qs }], &mut y);
            let mut y1 = [0f32; QK];
            let m = F16_ONE;
            dequantize_q5_1(
                &[BlockQ5_1 {
                    d: F16_ONE,
                    m,
                    qh,
                    qs,
                }],
                &mut y1,
            );
            for i in 0..QK {
                let nib = if i < QK / 2 { i } else { 15 - (i - QK / 2) } as f32;
                let hi = if i == e { 16.0 } else { 0.0 };
                assert_eq!(y[i], nib + hi - 16.0, "element {i}, bit {e}");
                assert_eq!(y1[i], nib + hi + 1.0, "element {i}, bit {e}");
            }
        }
    }

    #[test]
    fn q6_k_scales_cover_their_sub_blocks() {
        // q = 0 everywhere (ql = qh = 0) gives −32 × scale of the element's sub-block of 16.
        let scales: [i8; 16] = std::array::from_fn(|s| s as i8 - 7);
        let b = BlockQ6K {
            ql: [0; QK_K / 2],
            qh: [0; QK_K / 4],
            scales,
            d: F16_ONE,
        };
        let mut y = [0f32; QK_K];
        dequantize_q6_k(&[b], &mut y);
        for (i, v) in y.iter().enumerate() {
            assert_eq!(*v, -32.0 * scales[i / 16] as f32, "element {i}");
        }
    }

    #[test]
    #[should_panic(expected = "output length")]
    fn wrong_output_length_panics() {
        dequantize_q4_k(&[hand_block(0, &[], &[])], &mut [0f32; QK_K - 1]);
    }
}
