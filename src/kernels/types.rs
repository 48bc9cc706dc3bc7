//! ggml tensor types: their numbering in GGUF files and their block geometry.

/// Tensor element types as numbered by ggml. Only some have kernels (see [`GgmlType::supported`]);
/// the rest are known by name so errors can say what the file holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GgmlType {
    F32,
    F16,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    Q8_1,
    Q2K,
    Q3K,
    Q4K,
    Q5K,
    Q6K,
    Q8K,
    Iq2Xxs,
    Iq2Xs,
    Iq3Xxs,
    Iq1S,
    Iq4Nl,
    Iq3S,
    Iq2S,
    Iq4Xs,
    I8,
    I16,
    I32,
    I64,
    F64,
    Iq1M,
    Bf16,
    Tq1_0,
    Tq2_0,
    Mxfp4,
}

impl GgmlType {
    pub fn from_u32(v: u32) -> Option<Self> {
        use GgmlType::*;
        Some(match v {
            0 => F32,
            1 => F16,
            2 => Q4_0,
            3 => Q4_1,
            6 => Q5_0,
            7 => Q5_1,
            8 => Q8_0,
            9 => Q8_1,
            10 => Q2K,
            11 => Q3K,
            12 => Q4K,
            13 => Q5K,
            14 => Q6K,
            15 => Q8K,
            16 => Iq2Xxs,
            17 => Iq2Xs,
            18 => Iq3Xxs,
            19 => Iq1S,
            20 => Iq4Nl,
            21 => Iq3S,
            22 => Iq2S,
            23 => Iq4Xs,
            24 => I8,
            25 => I16,
            26 => I32,
            27 => I64,
            28 => F64,
            29 => Iq1M,
            30 => Bf16,
            34 => Tq1_0,
            35 => Tq2_0,
            39 => Mxfp4,
            _ => return None,
        })
    }

    pub fn to_u32(self) -> u32 {
        use GgmlType::*;
        match self {
            F32 => 0,
            F16 => 1,
            Q4_0 => 2,
            Q4_1 => 3,
            Q5_0 => 6,
            Q5_1 => 7,
            Q8_0 => 8,
            Q8_1 => 9,
            Q2K => 10,
            Q3K => 11,
            Q4K => 12,
            Q5K => 13,
            Q6K => 14,
            Q8K => 15,
            Iq2Xxs => 16,
            Iq2Xs => 17,
            Iq3Xxs => 18,
            Iq1S => 19,
            Iq4Nl => 20,
            Iq3S => 21,
            Iq2S => 22,
            Iq4Xs => 23,
            I8 => 24,
            I16 => 25,
            I32 => 26,
            I64 => 27,
            F64 => 28,
            Iq1M => 29,
            Bf16 => 30,
            Tq1_0 => 34,
            Tq2_0 => 35,
            Mxfp4 => 39,
        }
    }

    /// The name llama.cpp prints for this type.
    pub fn name(self) -> &'static str {
        use GgmlType::*;
        match self {
            F32 => "F32",
            F16 => "F16",
            Q4_0 => "Q4_0",
            Q4_1 => "Q4_1",
            Q5_0 => "Q5_0",
            Q5_1 => "Q5_1",
            Q8_0 => "Q8_0",
            Q8_1 => "Q8_1",
            Q2K => "Q2_K",
            Q3K => "Q3_K",
            Q4K => "Q4_K",
            Q5K => "Q5_K",
            Q6K => "Q6_K",
            Q8K => "Q8_K",
            Iq2Xxs => "IQ2_XXS",
            Iq2Xs => "IQ2_XS",
            Iq3Xxs => "IQ3_XXS",
            Iq1S => "IQ1_S",
            Iq4Nl => "IQ4_NL",
            Iq3S => "IQ3_S",
            Iq2S => "IQ2_S",
            Iq4Xs => "IQ4_XS",
            I8 => "I8",
            I16 => "I16",
            I32 => "I32",
            I64 => "I64",
            F64 => "F64",
            Iq1M => "IQ1_M",
            Bf16 => "BF16",
            Tq1_0 => "TQ1_0",
            Tq2_0 => "TQ2_0",
            Mxfp4 => "MXFP4",
        }
    }

    /// Parses a name as printed by [`GgmlType::name`] (case-insensitive).
    pub fn from_name(s: &str) -> Option<Self> {
        (0..64)
            .filter_map(Self::from_u32)
            .find(|t| t.name().eq_ignore_ascii_case(s))
    }

    /// Elements per block.
    pub fn block_size(self) -> usize {
        use GgmlType::*;
        match self {
            F32 | F16 | Bf16 | I8 | I16 | I32 | I64 | F64 => 1,
            Q4_0 | Q4_1 | Q5_0 | Q5_1 | Q8_0 | Q8_1 | Iq4Nl | Mxfp4 => 32,
            _ => 256,
        }
    }

    /// Bytes per block.
    pub fn block_bytes(self) -> usize {
        use GgmlType::*;
        match self {
            F32 | I32 => 4,
            F16 | Bf16 | I16 => 2,
            I8 => 1,
            I64 | F64 => 8,
            Q4_0 => 18,
            Q4_1 => 20,
            Q5_0 => 22,
            Q5_1 => 24,
            Q8_0 => 34,
            Q8_1 => 36,
            Q2K => 84,
            Q3K => 110,
            Q4K => 144,
            Q5K => 176,
            Q6K => 210,
            Q8K => 292,
            Iq2Xxs => 66,
            Iq2Xs => 74,
            Iq3Xxs => 98,
            Iq1S => 50,
            Iq4Nl => 18,
            Iq3S => 110,
            Iq2S => 82,
            Iq4Xs => 136,
            Iq1M => 56,
            Tq1_0 => 54,
            Tq2_0 => 66,
            Mxfp4 => 17,
        }
    }

    /// Whether locus has kernels for weights of this type.
    pub fn supported(self) -> bool {
        use GgmlType::*;
        matches!(
            self,
            F32 | F16
                | Bf16
                | Q4_0
                | Q4_1
                | Q5_0
                | Q5_1
                | Q8_0
                | Q2K
                | Q3K
                | Q4K
                | Q5K
                | Q6K
                | Iq4Nl
                | Iq4Xs
        )
    }

    /// The names of the types [`GgmlType::supported`] accepts, comma-separated (for errors and
    /// help texts).
    pub fn supported_names() -> String {
        (0..64)
            .filter_map(Self::from_u32)
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
