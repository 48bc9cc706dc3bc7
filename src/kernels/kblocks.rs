//! Block layouts of the K-quants (256-element super-blocks), Q5_0/Q5_1 and the IQ4 types, bit
//! compatible with ggml, and Q8_K: the activation the K-quants and IQ4_XS pair with.
//!
//! Like the 32-wide blocks in `blocks`, every weight block keeps its f16 scales as raw
//! `[u8; 2]` (alignment 1), so a row can be viewed straight out of the mapped file. Q8_K is only
//! ever built in memory (its `f32` scale and `i16` sums keep their natural alignment).

use super::blocks::{Block, QK};

/// Elements per K-quant super-block.
pub const QK_K: usize = 256;
/// Bytes of the packed 6-bit scales and mins of Q4_K and Q5_K (and Q3_K's 6-bit scales).
pub const K_SCALE_SIZE: usize = 12;

/// Q5_0: 32 weights `d × (q − 16)`, q in 0..32: low nibbles in `qs`, fifth bits in `qh`
/// (bit j of the little-endian u32 is element j's).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct BlockQ5_0 {
    pub d: [u8; 2],
    pub qh: [u8; 4],
    pub qs: [u8; QK / 2],
}

/// Q5_1: 32 weights `d × q + m`, q in 0..32.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct BlockQ5_1 {
    pub d: [u8; 2],
    pub m: [u8; 2],
    pub qh: [u8; 4],
    pub qs: [u8; QK / 2],
}

/// IQ4_NL: 32 weights `d × KVALUES_IQ4NL[q]`, q a nibble (low nibbles elements 0..16).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct BlockIq4Nl {
    pub d: [u8; 2],
    pub qs: [u8; QK / 2],
}

/// Q2_K: sixteen sub-blocks of 16, each `d × sc × q − dmin × m` with 4-bit `sc` (low nibble of
/// `scales`) and `m` (high nibble), q 2 bits.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlockQ2K {
    pub scales: [u8; QK_K / 16],
    pub qs: [u8; QK_K / 4],
    pub d: [u8; 2],
    pub dmin: [u8; 2],
}

/// Q3_K: sixteen sub-blocks of 16, `d × (sc − 32) × (q − 4·!hbit)`, 6-bit scales packed in 12
/// bytes, q's low 2 bits in `qs` and its third bit in `hmask`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlockQ3K {
    pub hmask: [u8; QK_K / 8],
    pub qs: [u8; QK_K / 4],
    pub scales: [u8; K_SCALE_SIZE],
    pub d: [u8; 2],
}

/// Q4_K: eight sub-blocks of 32, `d × sc × q − dmin × m`, 6-bit scales and mins packed in 12
/// bytes, q a nibble.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlockQ4K {
    pub d: [u8; 2],
    pub dmin: [u8; 2],
    pub scales: [u8; K_SCALE_SIZE],
    pub qs: [u8; QK_K / 2],
}

/// Q5_K: as Q4_K with a fifth bit per weight in `qh`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlockQ5K {
    pub d: [u8; 2],
    pub dmin: [u8; 2],
    pub scales: [u8; K_SCALE_SIZE],
    pub qh: [u8; QK_K / 8],
    pub qs: [u8; QK_K / 2],
}

/// Q6_K: sixteen sub-blocks of 16, `d × sc × (q − 32)` with 8-bit signed `sc`, q's low 4 bits
/// in `ql` and high 2 bits in `qh`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlockQ6K {
    pub ql: [u8; QK_K / 2],
    pub qh: [u8; QK_K / 4],
    pub scales: [i8; QK_K / 16],
    pub d: [u8; 2],
}

/// IQ4_XS: eight sub-blocks of 32, `d × (ls − 32) × KVALUES_IQ4NL[q]`, the 6-bit `ls` split
/// into `scales_l` (low 4 bits) and `scales_h` (high 2 bits, little-endian u16).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlockIq4Xs {
    pub d: [u8; 2],
    pub scales_h: [u8; 2],
    pub scales_l: [u8; QK_K / 64],
    pub qs: [u8; QK_K / 2],
}

/// Q8_K: 256 activations `d × q` with the sums of each sixteen `q` (the K-quants' min terms read
/// them instead of the values).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlockQ8K {
    pub d: f32,
    pub qs: [i8; QK_K],
    pub bsums: [i16; QK_K / 16],
}

/// Largest Q8_K value: the activation quantizers map a block's signed maximum to `-Q8K_MAX`.
pub const Q8K_MAX: f32 = 127.0;

/// The sixteen values an IQ4_NL/IQ4_XS nibble stands for.
pub const KVALUES_IQ4NL: [i8; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

const _: () = assert!(std::mem::size_of::<BlockQ5_0>() == 22);
const _: () = assert!(std::mem::size_of::<BlockQ5_1>() == 24);
const _: () = assert!(std::mem::size_of::<BlockIq4Nl>() == 18);
const _: () = assert!(std::mem::size_of::<BlockQ2K>() == 84);
const _: () = assert!(std::mem::size_of::<BlockQ3K>() == 110);
const _: () = assert!(std::mem::size_of::<BlockQ4K>() == 144);
const _: () = assert!(std::mem::size_of::<BlockQ5K>() == 176);
const _: () = assert!(std::mem::size_of::<BlockQ6K>() == 210);
const _: () = assert!(std::mem::size_of::<BlockIq4Xs>() == 136);
const _: () = assert!(std::mem::size_of::<BlockQ8K>() == 292);
const _: () = assert!(std::mem::align_of::<BlockQ5_0>() == 1);
const _: () = assert!(std::mem::align_of::<BlockQ5_1>() == 1);
const _: () = assert!(std::mem::align_of::<BlockIq4Nl>() == 1);
const _: () = assert!(std::mem::align_of::<BlockQ2K>() == 1);
const _: () = assert!(std::mem::align_of::<BlockQ3K>() == 1);
const _: () = assert!(std::mem::align_of::<BlockQ4K>() == 1);
const _: () = assert!(std::mem::align_of::<BlockQ5K>() == 1);
const _: () = assert!(std::mem::align_of::<BlockQ6K>() == 1);
const _: () = assert!(std::mem::align_of::<BlockIq4Xs>() == 1);

macro_rules! zeroed_default {
    ($($t:ty),*) => {$(
        impl Default for $t {
            fn default() -> Self {
                // Every field is a byte array: build it from zero bytes.
                *super::blocks::as_blocks::<$t>(&[0u8; std::mem::size_of::<$t>()])
                    .and_then(|b| b.first())
                    .expect("one zero block")
            }
        }
    )*};
}

// SAFETY: each is repr(C) of u8/i8 arrays only (alignment 1 and sizes asserted above, so no
// padding), and any bit pattern is a valid value.
unsafe impl Block for BlockQ5_0 {}
// SAFETY: as above.
unsafe impl Block for BlockQ5_1 {}
// SAFETY: as above.
unsafe impl Block for BlockIq4Nl {}
// SAFETY: as above.
unsafe impl Block for BlockQ2K {}
// SAFETY: as above.
unsafe impl Block for BlockQ3K {}
// SAFETY: as above.
unsafe impl Block for BlockQ4K {}
// SAFETY: as above.
unsafe impl Block for BlockQ5K {}
// SAFETY: as above.
unsafe impl Block for BlockQ6K {}
// SAFETY: as above.
unsafe impl Block for BlockIq4Xs {}

zeroed_default!(BlockQ2K, BlockQ3K, BlockQ4K, BlockQ5K, BlockQ6K, BlockIq4Xs);

impl Default for BlockQ8K {
    fn default() -> Self {
        BlockQ8K {
            d: 0.0,
            qs: [0; QK_K],
            bsums: [0; QK_K / 16],
        }
    }
}
