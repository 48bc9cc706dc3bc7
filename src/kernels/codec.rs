//! Each weight type's row codec: dequantize a row of blocks to f32, and quantize an f32 row
//! with ggml's reference quantizer (no importance matrix), as the type table holds them
//! ([`super::TypeRow::codec`]). Rows are raw bytes; lengths are the caller's to check (a row
//! that is not whole blocks is a bug and panics).

use super::blocks::{self, block_bytes, Block, BlockQ4_0, BlockQ4_1, BlockQ8_0, QK};
use super::blocks::{
    BlockIq1M, BlockIq1S, BlockIq3S, BlockIq3Xxs, BlockIq4Nl, BlockIq4Xs, BlockQ2K, BlockQ3K, BlockQ4K, BlockQ5K,
    BlockQ5_0, BlockQ5_1, BlockQ6K, QK_K,
};
use super::{dequantize, f32_row, half, quantize_ref, u16_row};

/// A type's two row functions.
#[derive(Clone, Copy)]
pub struct Codec {
    /// One row of blocks to f32 (`out` holds the row's values).
    pub dequantize: fn(&[u8], &mut [f32]),
    /// One f32 row (whole blocks) to the type's bytes, as ggml's `quantize_<type>` does it
    /// for one row: with the row's importance weights (one per column, from an importance
    /// matrix) where the type uses them, and with its reference quantizer when given none.
    pub quantize: fn(&[f32], Option<&[f32]>) -> Vec<u8>,
}

impl std::fmt::Debug for Codec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Codec")
    }
}

/// The blocks of a row that must be whole blocks of `B`.
fn blocks_of<B: Block>(row: &[u8]) -> &[B] {
    blocks::as_blocks(row).expect("weight row is not a whole number of blocks")
}

/// `x` (whole blocks of `per_block` values) through a block quantizer, as bytes.
fn quantized<B: Block>(q: fn(&[f32], &mut [B]), per_block: usize, x: &[f32]) -> Vec<u8> {
    let mut b = vec![B::default(); x.len() / per_block];
    q(x, &mut b);
    block_bytes(&b).to_vec()
}

/// The codec of a block type: its block struct, values per block, dequantizer, quantizer.
macro_rules! block_codec {
    ($b:ty, $per:expr, $deq:path, $q:path) => {
        Codec {
            dequantize: |row, out| $deq(blocks_of::<$b>(row), out),
            quantize: |x, _weights| quantized::<$b>($q, $per, x),
        }
    };
}

pub const F32: Codec = Codec {
    dequantize: |row, out| out.copy_from_slice(&f32_row(row)),
    quantize: |x, _weights| x.iter().flat_map(|v| v.to_le_bytes()).collect(),
};
/// The codec of a 16-bit float type: its widening and narrowing conversions.
macro_rules! half_codec {
    ($widen:path, $narrow:path) => {
        Codec {
            dequantize: |row, out| {
                for (o, h) in out.iter_mut().zip(u16_row(row).iter()) {
                    *o = $widen(*h);
                }
            },
            quantize: |x, _weights| x.iter().flat_map(|&v| $narrow(v).to_le_bytes()).collect(),
        }
    };
}

pub const F16: Codec = half_codec!(half::f16_to_f32, half::f32_to_f16);
pub const BF16: Codec = half_codec!(half::bf16_to_f32, half::f32_to_bf16);
pub const Q4_0: Codec = block_codec!(
    BlockQ4_0,
    QK,
    blocks::dequantize_q4_0,
    blocks::quantize_q4_0_ref
);
pub const Q4_1: Codec = block_codec!(
    BlockQ4_1,
    QK,
    blocks::dequantize_q4_1,
    blocks::quantize_q4_1_ref
);
pub const Q8_0: Codec = block_codec!(
    BlockQ8_0,
    QK,
    blocks::dequantize_q8_0,
    blocks::quantize_q8_0_ref
);
pub const Q5_0: Codec = block_codec!(
    BlockQ5_0,
    QK,
    dequantize::dequantize_q5_0,
    quantize_ref::quantize_q5_0
);
pub const Q5_1: Codec = block_codec!(
    BlockQ5_1,
    QK,
    dequantize::dequantize_q5_1,
    quantize_ref::quantize_q5_1
);
pub const IQ4_NL: Codec = block_codec!(
    BlockIq4Nl,
    QK,
    dequantize::dequantize_iq4_nl,
    quantize_ref::quantize_iq4_nl
);
pub const Q2_K: Codec = block_codec!(
    BlockQ2K,
    QK_K,
    dequantize::dequantize_q2_k,
    quantize_ref::quantize_q2_k
);
pub const Q3_K: Codec = block_codec!(
    BlockQ3K,
    QK_K,
    dequantize::dequantize_q3_k,
    quantize_ref::quantize_q3_k
);
pub const Q4_K: Codec = block_codec!(
    BlockQ4K,
    QK_K,
    dequantize::dequantize_q4_k,
    quantize_ref::quantize_q4_k
);
pub const Q5_K: Codec = block_codec!(
    BlockQ5K,
    QK_K,
    dequantize::dequantize_q5_k,
    quantize_ref::quantize_q5_k
);
pub const Q6_K: Codec = block_codec!(
    BlockQ6K,
    QK_K,
    dequantize::dequantize_q6_k,
    quantize_ref::quantize_q6_k
);
pub const IQ3_XXS: Codec = block_codec!(
    BlockIq3Xxs,
    QK_K,
    dequantize::dequantize_iq3::<BlockIq3Xxs>,
    quantize_ref::quantize_iq3_xxs
);
pub const IQ3_S: Codec = block_codec!(
    BlockIq3S,
    QK_K,
    dequantize::dequantize_iq3::<BlockIq3S>,
    quantize_ref::quantize_iq3_s
);
pub const IQ4_XS: Codec = block_codec!(
    BlockIq4Xs,
    QK_K,
    dequantize::dequantize_iq4_xs,
    quantize_ref::quantize_iq4_xs
);
/// IQ1_S: ggml's quantizer needs importance weights; given none, every weight is 1.0
/// (`quantize_iq1::quantize_iq1_s`).
pub const IQ1_S: Codec = Codec {
    dequantize: |row, out| dequantize::dequantize_iq1(blocks_of::<BlockIq1S>(row), out),
    quantize: super::quantize_iq1::quantize_iq1_s,
};
pub const IQ1_M: Codec = Codec {
    dequantize: |row, out| dequantize::dequantize_iq1(blocks_of::<BlockIq1M>(row), out),
    quantize: super::quantize_iq1::quantize_iq1_m,
};
