//! Each weight type's row codec: dequantize a row of blocks to f32, and quantize an f32 row as
//! ggml's `quantize_<type>` does, with the row's importance weights or without (its reference
//! quantizer), as the type table holds them ([`super::TypeRow::codec`]). Rows are raw bytes;
//! lengths are the caller's to check (a row that is not whole blocks is a bug and panics).

use super::blocks::{self, block_bytes, Block, BlockQ4_0, BlockQ4_1, BlockQ8_0, QK};
use super::blocks::{
    BlockIq1M, BlockIq1S, BlockIq2S, BlockIq2Xs, BlockIq2Xxs, BlockIq3S, BlockIq3Xxs, BlockIq4Nl,
    BlockIq4Xs, BlockMxfp4, BlockQ2K, BlockQ3K, BlockQ4K, BlockQ5K, BlockQ5_0, BlockQ5_1, BlockQ6K,
    QK_K,
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

/// `x` (whole blocks of `per_block` values) through a block quantizer given the row's
/// importance weights (or none), as bytes.
fn quantized<B: Block>(
    q: fn(&[f32], Option<&[f32]>, &mut [B]),
    per_block: usize,
    x: &[f32],
    weights: Option<&[f32]>,
) -> Vec<u8> {
    let mut b = vec![B::default(); x.len() / per_block];
    q(x, weights, &mut b);
    block_bytes(&b).to_vec()
}

/// The codec of a block type: its block struct, values per block, dequantizer, and quantizer
/// (one taking the row's importance weights; `ignores_weights` for a type whose ggml quantizer
/// has no use for them, given the reference quantizer instead).
macro_rules! block_codec {
    ($b:ty, $per:expr, $deq:path, ignores_weights $q:path) => {
        Codec {
            dequantize: |row, out| $deq(blocks_of::<$b>(row), out),
            quantize: |x, _weights| quantized::<$b>(|x, _, y| $q(x, y), $per, x, None),
        }
    };
    ($b:ty, $per:expr, $deq:path, $q:path) => {
        Codec {
            dequantize: |row, out| $deq(blocks_of::<$b>(row), out),
            quantize: |x, weights| quantized::<$b>($q, $per, x, weights),
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
    quantize_ref::quantize_q4_0
);
pub const Q4_1: Codec = block_codec!(
    BlockQ4_1,
    QK,
    blocks::dequantize_q4_1,
    quantize_ref::quantize_q4_1
);
pub const Q8_0: Codec = block_codec!(
    BlockQ8_0,
    QK,
    blocks::dequantize_q8_0,
    ignores_weights blocks::quantize_q8_0_ref
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
/// MXFP4: ggml's `quantize_mxfp4` ignores importance weights.
pub const MXFP4: Codec = block_codec!(
    BlockMxfp4,
    QK,
    super::mxfp4::dequantize_mxfp4,
    ignores_weights super::mxfp4::quantize_mxfp4
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
    dequantize::dequantize_iq_grid::<BlockIq3Xxs>,
    quantize_ref::quantize_iq3_xxs
);
pub const IQ3_S: Codec = block_codec!(
    BlockIq3S,
    QK_K,
    dequantize::dequantize_iq_grid::<BlockIq3S>,
    quantize_ref::quantize_iq3_s
);
pub const IQ4_XS: Codec = block_codec!(
    BlockIq4Xs,
    QK_K,
    dequantize::dequantize_iq4_xs,
    quantize_ref::quantize_iq4_xs
);
/// IQ2_XXS and IQ2_XS: ggml's quantizers need importance weights; given none, every weight is
/// 1.0 (`quantize_iq2`).
pub const IQ2_XXS: Codec = Codec {
    dequantize: |row, out| dequantize::dequantize_iq_grid(blocks_of::<BlockIq2Xxs>(row), out),
    quantize: super::quantize_iq2::quantize_iq2_xxs,
};
pub const IQ2_XS: Codec = Codec {
    dequantize: |row, out| dequantize::dequantize_iq_grid(blocks_of::<BlockIq2Xs>(row), out),
    quantize: super::quantize_iq2::quantize_iq2_xs,
};
pub const IQ2_S: Codec = Codec {
    dequantize: |row, out| dequantize::dequantize_iq_grid(blocks_of::<BlockIq2S>(row), out),
    quantize: super::quantize_iq2::quantize_iq2_s,
};
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::quantize_ref::tests::{fnv1a, kat_row, ROW};
    use crate::kernels::test_util::SplitMix as Rng;

    /// The codecs of the types whose ggml quantizer takes importance weights, and Q8_0's, which
    /// ignores them, with the FNV-1a 64 of llama.cpp's output for the eight known-answer rows
    /// with importance weights and without (see [`kat_hash`]).
    const KAT: [(&str, Codec, u64, u64); 15] = [
        ("q4_0", Q4_0, 0x96f6_4175_8f94_c2e9, 0xcacf_8c3b_8c44_1453),
        ("q4_1", Q4_1, 0xcb7b_6af0_ac2a_9724, 0x4181_6a4b_310e_925d),
        ("q5_0", Q5_0, 0xee77_8f88_ef8d_d045, 0x62b1_2485_ba00_5834),
        ("q5_1", Q5_1, 0x168e_88c1_64d1_4d31, 0x93a1_a3eb_f1ec_478d),
        ("q8_0", Q8_0, 0x4d51_02ef_5f23_ceaa, 0x4d51_02ef_5f23_ceaa),
        ("mxfp4", MXFP4, 0x81b3_2ae7_6d10_450b, 0x81b3_2ae7_6d10_450b),
        ("q2_K", Q2_K, 0x4958_5273_2cbd_fdc1, 0xaade_6941_215a_22a7),
        ("q3_K", Q3_K, 0xac85_5dea_6ac0_22e5, 0x501c_1488_6136_b317),
        ("q4_K", Q4_K, 0x3792_211b_4fe4_415e, 0xe6d5_defc_3108_d9cc),
        ("q5_K", Q5_K, 0x5104_9bd8_cd1a_0c5b, 0x2bcf_84cc_a86e_185d),
        ("q6_K", Q6_K, 0x7c55_5674_6a2d_ef22, 0x8ca4_bbd6_a0da_ded1),
        (
            "iq3_xxs",
            IQ3_XXS,
            0x3473_6118_cf1b_7de9,
            0xbe65_eec9_6137_7709,
        ),
        (
            "iq4_nl",
            IQ4_NL,
            0xcd0f_55d4_3f74_7454,
            0x04a0_3a80_0a83_4486,
        ),
        ("iq3_s", IQ3_S, 0x3fda_6241_d2c5_520e, 0xb937_64c4_9aed_b5c9),
        (
            "iq4_xs",
            IQ4_XS,
            0xdb67_9308_4375_2f69,
            0xc17d_2a6d_4a93_a148,
        ),
    ];

    /// Importance weights of kind `k` (as the C harness draws them): random positive with one
    /// in 64 zero and one in 64 huge; all ones; whole blocks of zeros; all zero; squares of
    /// bell-shaped values; powers of two from 2⁻²⁰ to 2²⁰.
    fn kat_weights(k: usize, g: &mut Rng) -> Vec<f32> {
        (0..ROW)
            .map(|i| match k {
                0 => match g.next() % 64 {
                    0 => 0.0,
                    1 => 1e6 * (g.unit() + 1.0),
                    _ => g.unit() * 2.0 + 1e-3,
                },
                1 => 1.0,
                2 if (i / 32) % 5 == 2 => 0.0,
                2 => g.unit(),
                3 => 0.0,
                4 => {
                    let b = g.bell();
                    b * b
                }
                _ => f32::from_bits(((127 + (g.next() % 41) as i32 - 20) as u32) << 23),
            })
            .collect()
    }

    /// FNV-1a 64 of `codec`'s bytes for the eight known-answer rows, with `weights` (row r's
    /// of kind r mod 6) or without.
    fn kat_hash(codec: Codec, weighted: bool) -> u64 {
        let (mut g, mut gw) = (Rng(42), Rng(4242));
        let mut bytes = Vec::new();
        for r in 0..8 {
            let x = kat_row(r, &mut g);
            let w = kat_weights(r % 6, &mut gw);
            bytes.extend((codec.quantize)(&x, weighted.then_some(&w[..])));
        }
        fnv1a(&bytes)
    }

    /// [`KAT`]'s hashes are FNV-1a 64 of llama.cpp's `ggml_quantize_chunk(type, row, …, 0, 1,
    /// 512, imatrix)` on the eight `kat_row`s, with the `kat_weights` as the imatrix or NULL
    /// (libggml-base.a of llama.cpp 0c1e57098, x86-64), from a C harness drawing both from the
    /// same generators; without weights they are `quantize_ref`'s known answers. The same
    /// harness compared every type byte for byte on 2 800 rows of 256..4 096 values (four seeds,
    /// sixteen kinds of values and six of weights: over 23 000 super-blocks or 190 000 blocks of
    /// 32 a type), with and without weights.
    #[test]
    fn rows_hash_as_llama_cpp_quantizes_them_with_and_without_weights() {
        for (name, codec, weighted, unweighted) in KAT {
            assert_eq!(kat_hash(codec, true), weighted, "{name} with weights");
            assert_eq!(kat_hash(codec, false), unweighted, "{name} without");
        }
    }

    /// The float codecs ignore weights.
    #[test]
    fn float_codecs_ignore_weights() {
        let mut g = Rng(9);
        let x = kat_row(0, &mut g);
        let w = kat_weights(0, &mut g);
        for codec in [F32, F16, BF16] {
            assert_eq!((codec.quantize)(&x, Some(&w)), (codec.quantize)(&x, None));
        }
    }
}
