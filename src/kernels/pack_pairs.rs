//! The paired layouts of `pack` (`Layout::Q6KPairs`, `Layout::Q5KPairs`): Q6_K and Q5_K packed
//! word by word as `Q6Kx16` and `Q5Kx16` are, then each row's codes regrouped within its
//! lanes for the AVX2 kernels.
//!
//! In `vec_dot`'s order each of ggml's eight lanes meets four elements of every sub-block, so
//! no two of a lane's four-byte groups share a scale and every `maddubs` needs its own `madd`.
//! Paired, a lane's decoded code vector holds elements p, p + 1 of two sub-blocks: the two
//! `maddubs` that cover the lane's four elements of both add in i16 and one `madd` by the pair
//! of scales widens them. Every rewrite here works on a row's four-byte words as u32 (SWAR),
//! since packing runs over every byte of a copy at load.

use super::blocks::{BlockQ5K, BlockQ6K};
use super::pack::{GROUP, PACK_ROWS};

/// Bytes of a packed vector: one word of each row.
const VECTOR: usize = GROUP * PACK_ROWS;
/// Four-byte lanes of a 32-byte run.
const LANES32: usize = 8;

/// Bytes of one Q6_K block; its `ql` words (low four bits of the codes), then `qh` words (top
/// two), then four words of scales and the 2-byte `d`.
const Q6_K_BLOCK: usize = std::mem::size_of::<BlockQ6K>();
const Q6_K_QL_WORDS: usize = 32;
const Q6_K_QH_WORDS: usize = 16;
/// Halves of a Q6_K block (128 elements: 16 `ql` words, 8 `qh` words each).
const Q6_K_HALVES: usize = 2;
const _: () = assert!((Q6_K_QL_WORDS + Q6_K_QH_WORDS + 4) * GROUP + 2 == Q6_K_BLOCK);

/// Bytes of one Q5_K block; word offsets of its `qh` (8 words) and `qs` (32).
const Q5_K_BLOCK: usize = std::mem::size_of::<BlockQ5K>();
const Q5_K_QH_WORD: usize = 4;
const Q5_K_QS_WORD: usize = 12;
const _: () =
    assert!((Q5_K_QS_WORD + 32) * GROUP == Q5_K_BLOCK && Q5_K_QH_WORD + 8 == Q5_K_QS_WORD);

/// The largest step of a paired layout (Q6_K's).
pub(super) const MAX_PAIRED_STEP: usize = Q6_K_BLOCK * PACK_ROWS;
const _: () = assert!(Q5_K_BLOCK <= Q6_K_BLOCK);

/// Bytewise masks of a u32.
const LOW4: u32 = 0x0f0f_0f0f;
const LOW6: u32 = 0x3f3f_3f3f;
const BITS45: u32 = 0x3030_3030;
const BITS67: u32 = 0xc0c0_c0c0;
const LOW2: u32 = 0x0303_0303;

/// Word `w` of a packed step: the sixteen rows' four bytes, as u32.
fn get(step: &[u8], w: usize) -> [u32; PACK_ROWS] {
    let v = &step[VECTOR * w..][..VECTOR];
    std::array::from_fn(|r| {
        u32::from_le_bytes(v[GROUP * r..GROUP * r + GROUP].try_into().expect("a word"))
    })
}

/// Writes word `w` of a packed step from the sixteen rows' u32.
fn put(step: &mut [u8], w: usize, rows: [u32; PACK_ROWS]) {
    let v = &mut step[VECTOR * w..][..VECTOR];
    for (cell, r) in v.chunks_exact_mut(GROUP).zip(rows) {
        cell.copy_from_slice(&r.to_le_bytes());
    }
}

/// `f` of the three words `w` of every row, written back to them.
fn rewrite(step: &mut [u8], w: [usize; 3], f: impl Fn(u32, u32, u32) -> [u32; 3]) {
    let (a, b, c) = (get(step, w[0]), get(step, w[1]), get(step, w[2]));
    let out: [[u32; 3]; PACK_ROWS] = std::array::from_fn(|r| f(a[r], b[r], c[r]));
    for (k, &w) in w.iter().enumerate() {
        put(step, w, out.map(|o| o[k]));
    }
}

/// Swaps the bits of `x` selected by `mask` with those `shift` places above them.
const fn delta_swap(x: u32, mask: u32, shift: u32) -> u32 {
    let t = ((x >> shift) ^ x) & mask;
    x ^ t ^ (t << shift)
}

/// The `ql`, `ql`, `qh` words lane l of block half j keeps its codes in (in both layouts):
/// `16j + l`, `16j + 8 + l`, `32 + 8j + l`.
const fn q6_k_lane_words(j: usize, l: usize) -> [usize; 3] {
    let half_ql = Q6_K_QL_WORDS / Q6_K_HALVES;
    let half_qh = Q6_K_QH_WORDS / Q6_K_HALVES;
    [
        half_ql * j + l,
        half_ql * j + half_qh + l,
        Q6_K_QL_WORDS + half_qh * j + l,
    ]
}

/// The 2-bit fields of a `qh` word hold element (k, p) at field 4p + k in the file's order and
/// at 4(2(k & 1) + (p & 1)) + 2(k >> 1) + (p >> 1) paired: bit 0 and bit 3 of the field index
/// trade places (its own inverse).
const fn q6_k_qh_swap(q: u32) -> u32 {
    delta_swap(q, 0x0000_cccc, 14)
}

/// The low i16 of a u32.
const LOW16: u32 = 0x0000_ffff;

/// Rewrites every row's codes of one packed Q6_K step (`Layout::Q6Kx16`'s bytes) in
/// `Layout::Q6KPairs`'s, in place ([`q6_k_unpair`] undoes it).
///
/// In the file, lane l of block half j (elements `128j + 32k + 4l + p`, k and p in 0..4) keeps
/// its codes in three words: two of `ql` (low nibbles k = 0, 1, high k = 2, 3) and one of `qh`
/// (bits 2k of byte p). Paired, code vector v's byte pos of the lane is element (k, p) with
/// k = 2(v >> 1) + (pos >> 1), p = 2(v & 1) + (pos & 1), and the three words X, Y, Z (in the
/// same places) decode as
/// ```text
/// V0 = X & 63    V1 = Y & 63    V2 = Z & 15 | (X >> 2) & 48    V3 = (Z >> 4) & 15 | (Y >> 2) & 48
/// ```
/// (eleven operations for four vectors, against seventeen for the file's split).
pub fn q6_k_pair(step: &mut [u8]) {
    for j in 0..Q6_K_HALVES {
        for l in 0..LANES32 {
            rewrite(step, q6_k_lane_words(j, l), |w0, w1, q| {
                // The file's split, regrouped: bytes 0, 1 of both `ql` words, then 2, 3.
                let n0 = (w0 & LOW16) | (w1 << 16);
                let n1 = (w0 >> 16) | (w1 & !LOW16);
                let q = q6_k_qh_swap(q);
                let v0 = (n0 & LOW4) | ((q << 4) & BITS45);
                let v1 = (n1 & LOW4) | ((q << 2) & BITS45);
                let v2 = ((n0 >> 4) & LOW4) | (q & BITS45);
                let v3 = ((n1 >> 4) & LOW4) | ((q >> 2) & BITS45);
                [
                    v0 | ((v2 << 2) & BITS67),
                    v1 | ((v3 << 2) & BITS67),
                    (v2 & LOW4) | ((v3 & LOW4) << 4),
                ]
            });
        }
    }
}

/// The inverse of [`q6_k_pair`]: a `Layout::Q6KPairs` step back in `Layout::Q6Kx16`'s bytes.
pub fn q6_k_unpair(step: &mut [u8]) {
    for j in 0..Q6_K_HALVES {
        for l in 0..LANES32 {
            rewrite(step, q6_k_lane_words(j, l), |x, y, z| {
                let v0 = x & LOW6;
                let v1 = y & LOW6;
                let v2 = (z & LOW4) | ((x >> 2) & BITS45);
                let v3 = ((z >> 4) & LOW4) | ((y >> 2) & BITS45);
                let n0 = (v0 & LOW4) | ((v2 & LOW4) << 4);
                let n1 = (v1 & LOW4) | ((v3 & LOW4) << 4);
                let q = ((v0 >> 4) & LOW2)
                    | (((v1 >> 4) & LOW2) << 2)
                    | (v2 & BITS45)
                    | (((v3 >> 4) & LOW2) << 6);
                [
                    (n0 & LOW16) | (n1 << 16),
                    (n0 >> 16) | (n1 & !LOW16),
                    q6_k_qh_swap(q),
                ]
            });
        }
    }
}

/// Rewrites every row's codes of one packed Q5_K step (`Layout::Q5Kx16`'s bytes) in
/// `Layout::Q5KPairs`'s, in place; the rewrite is its own inverse ([`q5_k_unpair`]).
///
/// In the file, lane l of sub-block pair j holds elements `64j + 32s + 4l + p` (s = 0, 1; p in
/// 0..4) in nibble s of byte p of `qs` word `12 + 8j + l`, their fifth bits in bit 2j + s of
/// byte p of `qh` word `4 + l`. Paired, nibble v of byte pos holds element s = pos >> 1,
/// p = 2v + (pos & 1) (fifth bit 2j + v): the low-nibble vector holds elements p = 0, 1 of
/// both sub-blocks and the high one p = 2, 3; the decoding is unchanged. In both words, s and
/// bit 1 of p trade places: nibbles 1, 3 with 4, 6 of `qs`; bits 2j + 1 of bytes 0, 1 with
/// bits 2j of bytes 2, 3 of `qh`.
pub fn q5_k_pair(step: &mut [u8]) {
    let swap = |step: &mut [u8], w: usize, mask: u32, shift: u32| {
        put(step, w, get(step, w).map(|x| delta_swap(x, mask, shift)));
    };
    for l in 0..LANES32 {
        swap(step, Q5_K_QH_WORD + l, 0x0000_aaaa, 15);
        for j in 0..Q5_K_PAIRS {
            swap(step, Q5_K_QS_WORD + LANES32 * j + l, 0x0000_f0f0, 12);
        }
    }
}

/// Sub-block pairs of a Q5_K super-block.
const Q5_K_PAIRS: usize = 4;

/// The inverse of [`q5_k_pair`] (the same rewrite).
pub fn q5_k_unpair(step: &mut [u8]) {
    q5_k_pair(step);
}
