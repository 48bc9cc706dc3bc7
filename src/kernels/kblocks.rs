//! Block layouts of the K-quants (256-element super-blocks), Q5_0/Q5_1 and the IQ4 types, bit
//! compatible with ggml, and Q8_K: the activation the K-quants and IQ4_XS pair with.
//!
//! Like the 32-wide blocks in `blocks`, every weight block keeps its f16 scales as raw
//! `[u8; 2]` (alignment 1), so a row can be viewed straight out of the mapped file. Q8_K is only
//! ever built in memory (its `f32` scale and `i16` sums keep their natural alignment).

use super::blocks::{block_layout, QK};

/// Elements per K-quant super-block.
pub const QK_K: usize = 256;
/// Bytes of the packed 6-bit scales and mins of Q4_K and Q5_K (and Q3_K's 6-bit scales).
pub const K_SCALE_SIZE: usize = 12;

/// Elements per sub-block of Q2_K, Q3_K and Q6_K (one scale each), and per Q8_K `bsums` entry.
pub const SUB16: usize = 16;
/// Elements per sub-block of Q4_K, Q5_K and IQ4_XS (one scale each).
pub const SUB32: usize = 32;
/// Elements per 32-byte run of the K-quants' 2-bit and nibble layouts: the elements
/// `RUN·i .. RUN·(i + 1)` are one shift, or one nibble, of the same 32 bytes of `qs`.
pub const RUN: usize = 32;

block_layout! {
    /// Q5_0: 32 weights `d × (q − 16)`, q in 0..32: low nibbles in `qs`, fifth bits in `qh`
    /// (bit j of the little-endian u32 is element j's).
    BlockQ5_0, 22 { d: [u8; 2], qh: [u8; 4], qs: [u8; QK / 2] }
}
/// Q5_0's stored 5-bit codes are the weights plus this; also the weight of a Q5_K fifth bit.
pub const Q5_BIAS: i32 = 16;

block_layout! {
    /// Q5_1: 32 weights `d × q + m`, q in 0..32.
    BlockQ5_1, 24 { d: [u8; 2], m: [u8; 2], qh: [u8; 4], qs: [u8; QK / 2] }
}

block_layout! {
    /// IQ4_NL: 32 weights `d × KVALUES_IQ4NL[q]`, q a nibble (low nibbles elements 0..16).
    BlockIq4Nl, 18 { d: [u8; 2], qs: [u8; QK / 2] }
}

block_layout! {
    /// Q2_K: sixteen sub-blocks of 16, each `d × sc × q − dmin × m` with 4-bit `sc` (low nibble
    /// of `scales`) and `m` (high nibble), q 2 bits.
    BlockQ2K, 84 {
        scales: [u8; QK_K / SUB16],
        qs: [u8; QK_K / 4],
        d: [u8; 2],
        dmin: [u8; 2],
    }
}

block_layout! {
    /// Q3_K: sixteen sub-blocks of 16, `d × (sc − 32) × (q − 4·!hbit)`, 6-bit scales packed in
    /// 12 bytes, q's low 2 bits in `qs` and its third bit in `hmask`.
    BlockQ3K, 110 {
        hmask: [u8; QK_K / 8],
        qs: [u8; QK_K / 4],
        scales: [u8; K_SCALE_SIZE],
        d: [u8; 2],
    }
}
/// What a Q3_K weight loses when its high bit (in `hmask`) is clear: its 3-bit code
/// `low2 | hbit << 2` is the weight plus this.
pub const Q3_BIAS: i32 = 4;
/// Q3_K's and IQ4_XS's stored 6-bit scales are the scales plus this.
pub const SCALE_BIAS: i32 = 32;

block_layout! {
    /// Q4_K: eight sub-blocks of 32, `d × sc × q − dmin × m`, 6-bit scales and mins packed in 12
    /// bytes, q a nibble.
    BlockQ4K, 144 {
        d: [u8; 2],
        dmin: [u8; 2],
        scales: [u8; K_SCALE_SIZE],
        qs: [u8; QK_K / 2],
    }
}

block_layout! {
    /// Q5_K: as Q4_K with a fifth bit per weight in `qh`.
    BlockQ5K, 176 {
        d: [u8; 2],
        dmin: [u8; 2],
        scales: [u8; K_SCALE_SIZE],
        qh: [u8; QK_K / 8],
        qs: [u8; QK_K / 2],
    }
}

block_layout! {
    /// Q6_K: sixteen sub-blocks of 16, `d × sc × (q − 32)` with 8-bit signed `sc`, q's low 4 bits
    /// in `ql` and high 2 bits in `qh`.
    BlockQ6K, 210 {
        ql: [u8; QK_K / 2],
        qh: [u8; QK_K / 4],
        scales: [i8; QK_K / SUB16],
        d: [u8; 2],
    }
}
/// Q6_K's stored 6-bit codes are the weights plus this.
pub const Q6_BIAS: i32 = 32;

block_layout! {
    /// IQ4_XS: eight sub-blocks of 32, `d × (ls − 32) × KVALUES_IQ4NL[q]`, the 6-bit `ls` split
    /// into `scales_l` (low 4 bits) and `scales_h` (high 2 bits, little-endian u16).
    BlockIq4Xs, 136 {
        d: [u8; 2],
        scales_h: [u8; 2],
        scales_l: [u8; QK_K / 64],
        qs: [u8; QK_K / 2],
    }
}

/// Q8_K: 256 activations `d × q` with the sums of each sixteen `q` (the K-quants' min terms read
/// them instead of the values).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlockQ8K {
    pub d: f32,
    pub qs: [i8; QK_K],
    pub bsums: [i16; QK_K / SUB16],
}

/// Largest Q8_K value: the activation quantizers map a block's signed maximum to `-Q8K_MAX`.
pub const Q8K_MAX: f32 = 127.0;

/// The sixteen values an IQ4_NL/IQ4_XS nibble stands for.
pub const KVALUES_IQ4NL: [i8; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

const _: () = assert!(std::mem::size_of::<BlockQ8K>() == 292);

impl Default for BlockQ8K {
    fn default() -> Self {
        BlockQ8K {
            d: 0.0,
            qs: [0; QK_K],
            bsums: [0; QK_K / SUB16],
        }
    }
}
