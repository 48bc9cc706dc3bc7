//! ggml tensor types: one row per type, indexed by the type's ggml id, holding every fact about
//! the type that does not depend on the CPU (its name, block geometry, and the activation its
//! dot products consume). What a tier computes with it is the kernel table's business
//! ([`super::Kernels`]); what llama-quantize does with it is `model::quant_mix`'s.
//!
//! Adding a type means its block code, one row here (`supported: true` once it has kernels),
//! and its row in the kernel table ([`super::entries`]).

use super::codec::{self, Codec};
use super::ActType;

/// Tensor element types as numbered by ggml: the discriminant is the id GGUF files store.
/// Only some have kernels (see [`GgmlType::supported`]); the rest are known by name so errors
/// can say what the file holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum GgmlType {
    F32 = 0,
    F16 = 1,
    Q4_0 = 2,
    Q4_1 = 3,
    Q5_0 = 6,
    Q5_1 = 7,
    Q8_0 = 8,
    Q8_1 = 9,
    Q2K = 10,
    Q3K = 11,
    Q4K = 12,
    Q5K = 13,
    Q6K = 14,
    Q8K = 15,
    Iq2Xxs = 16,
    Iq2Xs = 17,
    Iq3Xxs = 18,
    Iq1S = 19,
    Iq4Nl = 20,
    Iq3S = 21,
    Iq2S = 22,
    Iq4Xs = 23,
    I8 = 24,
    I16 = 25,
    I32 = 26,
    I64 = 27,
    F64 = 28,
    Iq1M = 29,
    Bf16 = 30,
    Tq1_0 = 34,
    Tq2_0 = 35,
    Mxfp4 = 39,
}

/// Everything locus knows about one type apart from its kernels.
#[derive(Clone, Copy, Debug)]
pub struct TypeRow {
    pub ty: GgmlType,
    /// The name llama.cpp prints.
    pub name: &'static str,
    /// Elements per block.
    pub block: usize,
    /// Bytes per block.
    pub bytes: usize,
    /// The activation its dot products consume (ggml's `vec_dot_type`), for the types locus
    /// computes with (weights locus has kernels for); `None` for the rest.
    pub act: Option<ActType>,
    /// Its row dequantizer and reference quantizer, for the types locus computes with.
    pub codec: Option<Codec>,
}

/// The row of a type locus computes with: `(elements, bytes)` per block, its activation and
/// its codec.
const fn kernels(
    ty: GgmlType,
    name: &'static str,
    (block, bytes): (usize, usize),
    act: ActType,
    codec: Codec,
) -> Option<TypeRow> {
    Some(TypeRow {
        ty,
        name,
        block,
        bytes,
        act: Some(act),
        codec: Some(codec),
    })
}

/// The row of a type locus only names (errors say what the file holds).
const fn named(ty: GgmlType, name: &'static str, block: usize, bytes: usize) -> Option<TypeRow> {
    Some(TypeRow {
        ty,
        name,
        block,
        bytes,
        act: None,
        codec: None,
    })
}

/// One past the largest ggml id locus knows.
const N_IDS: usize = 40;
/// 32-element blocks (the legacy quants, IQ4_NL, MXFP4) and 256-element super-blocks (the
/// K-quants and the other IQ types).
const B32: usize = 32;
const B256: usize = 256;

/// The type table, indexed by ggml id (the gaps are ids ggml retired).
static TYPES: [Option<TypeRow>; N_IDS] = {
    use GgmlType::*;
    let mut t: [Option<TypeRow>; N_IDS] = [None; N_IDS];
    t[0] = kernels(F32, "F32", (1, 4), ActType::F32, codec::F32);
    t[1] = kernels(F16, "F16", (1, 2), ActType::F16, codec::F16);
    t[2] = kernels(Q4_0, "Q4_0", (B32, 18), ActType::Q8_0, codec::Q4_0);
    t[3] = kernels(Q4_1, "Q4_1", (B32, 20), ActType::Q8_1, codec::Q4_1);
    t[6] = kernels(Q5_0, "Q5_0", (B32, 22), ActType::Q8_0, codec::Q5_0);
    t[7] = kernels(Q5_1, "Q5_1", (B32, 24), ActType::Q8_1, codec::Q5_1);
    t[8] = kernels(Q8_0, "Q8_0", (B32, 34), ActType::Q8_0, codec::Q8_0);
    t[9] = named(Q8_1, "Q8_1", B32, 36);
    t[10] = kernels(Q2K, "Q2_K", (B256, 84), ActType::Q8K, codec::Q2_K);
    t[11] = kernels(Q3K, "Q3_K", (B256, 110), ActType::Q8K, codec::Q3_K);
    t[12] = kernels(Q4K, "Q4_K", (B256, 144), ActType::Q8K, codec::Q4_K);
    t[13] = kernels(Q5K, "Q5_K", (B256, 176), ActType::Q8K, codec::Q5_K);
    t[14] = kernels(Q6K, "Q6_K", (B256, 210), ActType::Q8K, codec::Q6_K);
    t[15] = named(Q8K, "Q8_K", B256, 292);
    t[16] = kernels(Iq2Xxs, "IQ2_XXS", (B256, 66), ActType::Q8K, codec::IQ2_XXS);
    t[17] = kernels(Iq2Xs, "IQ2_XS", (B256, 74), ActType::Q8K, codec::IQ2_XS);
    t[18] = kernels(Iq3Xxs, "IQ3_XXS", (B256, 98), ActType::Q8K, codec::IQ3_XXS);
    t[19] = kernels(Iq1S, "IQ1_S", (B256, 50), ActType::Q8K, codec::IQ1_S);
    t[20] = kernels(Iq4Nl, "IQ4_NL", (B32, 18), ActType::Q8_0, codec::IQ4_NL);
    t[21] = kernels(Iq3S, "IQ3_S", (B256, 110), ActType::Q8K, codec::IQ3_S);
    t[22] = kernels(Iq2S, "IQ2_S", (B256, 82), ActType::Q8K, codec::IQ2_S);
    t[23] = kernels(Iq4Xs, "IQ4_XS", (B256, 136), ActType::Q8K, codec::IQ4_XS);
    t[24] = named(I8, "I8", 1, 1);
    t[25] = named(I16, "I16", 1, 2);
    t[26] = named(I32, "I32", 1, 4);
    t[27] = named(I64, "I64", 1, 8);
    t[28] = named(F64, "F64", 1, 8);
    t[29] = kernels(Iq1M, "IQ1_M", (B256, 56), ActType::Q8K, codec::IQ1_M);
    t[30] = kernels(Bf16, "BF16", (1, 2), ActType::Bf16, codec::BF16);
    t[34] = named(Tq1_0, "TQ1_0", B256, 54);
    t[35] = named(Tq2_0, "TQ2_0", B256, 66);
    t[39] = kernels(Mxfp4, "MXFP4", (B32, 17), ActType::Q8_0, codec::MXFP4);
    t
};

// Each row sits at its own type's id.
const _: () = {
    let mut id = 0;
    while id < N_IDS {
        if let Some(r) = &TYPES[id] {
            assert!(r.ty as usize == id, "a type row is not at its ggml id");
        }
        id += 1;
    }
};

impl GgmlType {
    /// The type with ggml id `v`, if locus knows it.
    pub fn from_u32(v: u32) -> Option<Self> {
        TYPES.get(v as usize).copied().flatten().map(|r| r.ty)
    }

    /// The type's ggml id.
    pub fn to_u32(self) -> u32 {
        self as u32
    }

    /// The type's row of the table.
    #[inline]
    pub fn row(self) -> &'static TypeRow {
        match &TYPES[self as usize] {
            Some(r) => r,
            None => unreachable!("every GgmlType has a row (checked at compile time)"),
        }
    }

    /// Every type locus knows, in id order.
    pub fn all() -> impl Iterator<Item = GgmlType> {
        TYPES.iter().flatten().map(|r| r.ty)
    }

    /// The name llama.cpp prints for this type.
    pub fn name(self) -> &'static str {
        self.row().name
    }

    /// Parses a name as printed by [`GgmlType::name`] (case-insensitive).
    pub fn from_name(s: &str) -> Option<Self> {
        Self::all().find(|t| t.name().eq_ignore_ascii_case(s))
    }

    /// Elements per block.
    pub fn block_size(self) -> usize {
        self.row().block
    }

    /// Bytes per block.
    pub fn block_bytes(self) -> usize {
        self.row().bytes
    }

    /// The activation this type's dot products consume, if locus has kernels for it.
    pub fn act(self) -> Option<ActType> {
        self.row().act
    }

    /// The type's row codec, if locus computes with it.
    pub fn codec(self) -> Option<Codec> {
        self.row().codec
    }

    /// Whether locus has kernels for weights of this type.
    pub fn supported(self) -> bool {
        self.act().is_some()
    }

    /// The names of the types [`GgmlType::supported`] accepts, comma-separated (for errors and
    /// help texts).
    pub fn supported_names() -> String {
        Self::all()
            .filter(|t| t.supported())
            .map(|t| t.name())
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Bytes taken by `n` elements (n must be a multiple of the block size).
    pub fn row_bytes(self, n: usize) -> usize {
        n / self.block_size() * self.block_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_id_round_trips_and_names_are_unique() {
        let all: Vec<_> = GgmlType::all().collect();
        assert_eq!(all.len(), 32, "types known by id");
        for &t in &all {
            assert_eq!(GgmlType::from_u32(t.to_u32()), Some(t));
            assert_eq!(GgmlType::from_name(&t.name().to_lowercase()), Some(t));
            assert!(t.block_bytes() > 0 && t.block_size() > 0, "{t:?}");
        }
        for id in [4, 5, 31, 32, 33, 36, 37, 38, 40, 1000] {
            assert_eq!(GgmlType::from_u32(id), None, "id {id}");
        }
    }

    #[test]
    fn the_supported_types_are_those_with_an_activation() {
        assert_eq!(
            GgmlType::supported_names(),
            "F32, F16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ2_XXS, IQ2_XS, IQ3_XXS, IQ1_S, IQ4_NL, IQ3_S, IQ2_S, IQ4_XS, IQ1_M, BF16, MXFP4"
        );
    }
}
