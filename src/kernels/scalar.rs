//! The scalar oracle for every dot-product kernel.
//!
//! These are not naive loops: they reproduce the *order of floating-point operations* of ggml's
//! x86 kernels (eight f32 lanes, each fed by the exact integer sum of four consecutive products,
//! fused multiply-add per block, then ggml's `hsum_float_8` reduction). Integer parts are exact
//! in any order; the float parts are done in the same order, so every SIMD tier — ours and
//! llama.cpp's — produces bit-identical results to this file. That is what makes greedy output
//! match llama.cpp token for token.
//!
//! The tile oracles (`tile_*`) are plain loops of the single dot products: a tiled SIMD kernel
//! may share loads between outputs, but each output must come out as that output's dot alone.

use super::blocks::{scale, BlockQ4_0, BlockQ4_1, BlockQ8_0, BlockQ8_1, QK};

/// ggml's `hsum_float_8`: (hi + lo) pairwise, then (0+2) + (1+3).
#[inline]
pub fn hsum_float_8(a: [f32; 8]) -> f32 {
    let r = [a[4] + a[0], a[5] + a[1], a[6] + a[2], a[7] + a[3]];
    (r[0] + r[2]) + (r[1] + r[3])
}

/// Element `e` (0..32) of a 4-bit block: low nibbles are elements 0..16, high nibbles 16..32.
#[inline]
fn nibble(qs: &[u8; QK / 2], e: usize) -> i32 {
    if e < QK / 2 {
        (qs[e] & 0x0f) as i32
    } else {
        (qs[e - QK / 2] >> 4) as i32
    }
}

/// Σ_blocks d_x·d_y·Σ(q_x−8)·q_y
/// ```text
/// for each block: d = dx*dy; for lane l in 0..8: acc[l] = fma(d, Σ_{k<4} qx[4l+k]*qy[4l+k], acc[l])
/// result = hsum_float_8(acc)
/// ```
pub fn dot_q4_0_q8_0(x: &[BlockQ4_0], y: &[BlockQ8_0]) -> f32 {
    let mut acc = [0f32; 8];
    for (a, b) in x.iter().zip(y) {
        let d = scale(a.d) * scale(b.d);
        for (l, lane) in acc.iter_mut().enumerate() {
            let isum: i32 = (4 * l..4 * l + 4)
                .map(|e| (nibble(&a.qs, e) - 8) * b.qs[e] as i32)
                .sum();
            *lane = d.mul_add(isum as f32, *lane);
        }
    }
    hsum_float_8(acc)
}

/// Q4_0·Q8_0 as llama.cpp computes it for weights it has repacked into 8-row interleaved
/// blocks (its default for Q4_0 matmul weights on x86): one scalar chain over blocks,
/// `acc = fma(Σ(q_x−8)·q_y, d_x·d_y, acc)`, with no lanes and no horizontal sum.
pub fn dot_q4_0_q8_0_chain(x: &[BlockQ4_0], y: &[BlockQ8_0]) -> f32 {
    let mut acc = 0f32;
    for (a, b) in x.iter().zip(y) {
        let isum: i32 = (0..QK)
            .map(|e| (nibble(&a.qs, e) - 8) * b.qs[e] as i32)
            .sum();
        acc = (isum as f32).mul_add(scale(a.d) * scale(b.d), acc);
    }
    acc
}

/// Σ_blocks d_x·d_y·Σq_x·q_y + m_x·s_y, the lanes as in [`dot_q4_0_q8_0`] and the `m·s` terms
/// summed separately in block order, added last.
pub fn dot_q4_1_q8_1(x: &[BlockQ4_1], y: &[BlockQ8_1]) -> f32 {
    let mut acc = [0f32; 8];
    let mut summs = 0f32;
    for (a, b) in x.iter().zip(y) {
        summs += scale(a.m) * scale(b.s);
        let d = scale(a.d) * scale(b.d);
        for (l, lane) in acc.iter_mut().enumerate() {
            let isum: i32 = (4 * l..4 * l + 4)
                .map(|e| nibble(&a.qs, e) * b.qs[e] as i32)
                .sum();
            *lane = d.mul_add(isum as f32, *lane);
        }
    }
    hsum_float_8(acc) + summs
}

/// Σ_blocks d_x·d_y·Σq_x·q_y, lanes as in [`dot_q4_0_q8_0`].
pub fn dot_q8_0_q8_0(x: &[BlockQ8_0], y: &[BlockQ8_0]) -> f32 {
    let mut acc = [0f32; 8];
    for (a, b) in x.iter().zip(y) {
        let d = scale(a.d) * scale(b.d);
        for (l, lane) in acc.iter_mut().enumerate() {
            let isum: i32 = (4 * l..4 * l + 4)
                .map(|e| a.qs[e] as i32 * b.qs[e] as i32)
                .sum();
            *lane = d.mul_add(isum as f32, *lane);
        }
    }
    hsum_float_8(acc)
}

/// f32·f32 with eight interleaved accumulators (element i feeds lane i mod 8).
pub fn dot_f32(x: &[f32], y: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let n8 = x.len() / 8 * 8;
    for (xc, yc) in x[..n8].chunks_exact(8).zip(y[..n8].chunks_exact(8)) {
        for l in 0..8 {
            acc[l] = xc[l].mul_add(yc[l], acc[l]);
        }
    }
    let mut s = hsum_float_8(acc);
    for i in n8..x.len() {
        s = x[i].mul_add(y[i], s);
    }
    s
}

/// The tile and single-token oracles of single dots: `$tile` computes every (row, token) pair
/// of a tile, `$rows` every row with one activation, each by `$dot`.
macro_rules! oracles {
    ($($tile:ident, $rows:ident: $dot:ident($w:ty, $a:ty);)*) => {$(
        #[doc = concat!("[`", stringify!($dot), "`] for every (row, token) pair of a tile.")]
        pub fn $tile<const R: usize, const T: usize>(
            w: &[&[$w]; R],
            a: &[&[$a]; T],
            out: &mut [[f32; R]; T],
        ) {
            for (o, at) in out.iter_mut().zip(a) {
                o.iter_mut().zip(w).for_each(|(v, wr)| *v = $dot(wr, at));
            }
        }

        #[doc = concat!("[`", stringify!($dot), "`] of every row with one activation.")]
        pub fn $rows<const R: usize>(w: &[&[$w]; R], a: &[$a], out: &mut [f32; R]) {
            out.iter_mut().zip(w).for_each(|(v, wr)| *v = $dot(wr, a));
        }
    )*};
}

oracles! {
    tile_q4_0_q8_0, rows_q4_0_q8_0: dot_q4_0_q8_0(BlockQ4_0, BlockQ8_0);
    tile_q4_0_q8_0_chain, rows_q4_0_q8_0_chain: dot_q4_0_q8_0_chain(BlockQ4_0, BlockQ8_0);
    tile_q4_1_q8_1, rows_q4_1_q8_1: dot_q4_1_q8_1(BlockQ4_1, BlockQ8_1);
    tile_q8_0_q8_0, rows_q8_0_q8_0: dot_q8_0_q8_0(BlockQ8_0, BlockQ8_0);
}
