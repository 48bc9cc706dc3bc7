//! Every quantized block layout locus reads (bit-compatible with ggml: the 32-element blocks of
//! Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4 and their Q8_0/Q8_1 activations, the 256-element super-blocks
//! of the K-quants, IQ4_XS and the IQ2 and IQ3 types and their Q8_K activations), and the (de)quantizers
//! of Q4_0, Q4_1 and Q8_0/Q8_1 (those of the other types are in `dequantize` and `quantize_ref`).
//!
//! Every block keeps its f16 scales as raw `[u8; 2]`, so blocks have alignment 1 and a slice of
//! them can be viewed straight out of a memory-mapped file at any offset.
//!
//! Two families of quantizers live here:
//! - `*_ref` quantize *weights* exactly as ggml's reference code does (what `llama-quantize`
//!   writes), so `locus quantize` reproduces its files byte for byte;
//! - `quantize_act_*` quantize *activations* exactly as ggml's x86 SIMD code does before a dot
//!   product (scale `127/amax`, round half to even), so our dot products see the same integers
//!   as llama.cpp's.

use super::half::{f16_to_f32, f32_to_f16};

/// Elements per block for every 32-wide format here.
pub const QK: usize = 32;

/// Marker for plain-old-data blocks: alignment 1, no padding, every bit pattern valid.
///
/// # Safety
/// Implementors must be `repr(C)`, have alignment 1, and accept any byte pattern.
pub unsafe trait Block: Copy + Default + 'static {}

/// Declares a block layout as ggml stores it: a `repr(C)` struct of byte arrays (`[u8; N]` or
/// `[i8; N]`), its size asserted against ggml's, its alignment asserted 1 (so it has no padding
/// and can be viewed at any offset of a mapped file), zero as its default, and its [`Block`] impl.
macro_rules! block_layout {
    ($(#[$doc:meta])* $name:ident, $bytes:literal { $($field:ident: $ty:ty),* $(,)? }) => {
        $(#[$doc])*
        #[repr(C)]
        #[derive(Clone, Copy, Debug, PartialEq)]
        pub struct $name {
            $(pub $field: $ty),*
        }

        const _: () = assert!(std::mem::size_of::<$name>() == $bytes);
        const _: () = assert!(std::mem::align_of::<$name>() == 1);

        impl Default for $name {
            fn default() -> Self {
                // Every field is an array of one-byte integers: as many zeros as it has bytes.
                Self { $($field: [0; std::mem::size_of::<$ty>()]),* }
            }
        }

        // SAFETY: a repr(C) struct of u8/i8 arrays only: alignment 1 (asserted above), hence no
        // padding, and any bit pattern is a valid value.
        unsafe impl $crate::kernels::blocks::Block for $name {}
    };
}

block_layout! {
    /// Q4_0: 32 weights `d × (q − 8)`, q in 0..16; low nibbles hold elements 0..16.
    BlockQ4_0, 18 { d: [u8; 2], qs: [u8; QK / 2] }
}

block_layout! {
    /// Q4_1: 32 weights `d × q + m`, q in 0..16.
    BlockQ4_1, 20 { d: [u8; 2], m: [u8; 2], qs: [u8; QK / 2] }
}

block_layout! {
    /// Q8_0: 32 values `d × q`, q in −127..=127.
    BlockQ8_0, 34 { d: [u8; 2], qs: [i8; QK] }
}

block_layout! {
    /// Q8_1: like Q8_0 plus `s = d × Σq`, the activation partner of Q4_1.
    BlockQ8_1, 36 { d: [u8; 2], s: [u8; 2], qs: [i8; QK] }
}

// ---- Q5, IQ4 and the K-quants: 256-element super-blocks, and their Q8_K activations --------
//
// Q8_K is only ever built in memory (its `f32` scale and `i16` sums keep their natural
// alignment), so it is no `Block`.

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
    /// MXFP4: 32 weights `2^(e − 128) × KVALUES_MXFP4[q]` (an E8M0 scale byte `e`, halved
    /// because the table holds the E2M1 values doubled; `mxfp4::e8m0_to_f32_half`), q a nibble
    /// (low nibbles elements 0..16).
    BlockMxfp4, 17 { e: [u8; 1], qs: [u8; QK / 2] }
}

block_layout! {
    /// Q2_K: sixteen sub-blocks of 16, each `d × sc × q − dmin × m` with 4-bit `sc` (low nibble
    /// of `scales`) and `m` (high nibble), q 2 bits.
    BlockQ2K, 84 { scales: [u8; QK_K / SUB16], qs: [u8; QK_K / 4], d: [u8; 2], dmin: [u8; 2] }
}

block_layout! {
    /// Q3_K: sixteen sub-blocks of 16, `d × (sc − 32) × (q − 4·!hbit)`, 6-bit scales packed in
    /// 12 bytes, q's low 2 bits in `qs` and its third bit in `hmask`.
    BlockQ3K, 110 { hmask: [u8; QK_K / 8], qs: [u8; QK_K / 4], scales: [u8; K_SCALE_SIZE],
        d: [u8; 2] }
}
/// What a Q3_K weight loses when its high bit (in `hmask`) is clear: its 3-bit code
/// `low2 | hbit << 2` is the weight plus this.
pub const Q3_BIAS: i32 = 4;
/// Q3_K's and IQ4_XS's stored 6-bit scales are the scales plus this.
pub const SCALE_BIAS: i32 = 32;

block_layout! {
    /// Q4_K: eight sub-blocks of 32, `d × sc × q − dmin × m`, 6-bit scales and mins packed in 12
    /// bytes, q a nibble.
    BlockQ4K, 144 { d: [u8; 2], dmin: [u8; 2], scales: [u8; K_SCALE_SIZE], qs: [u8; QK_K / 2] }
}

block_layout! {
    /// Q5_K: as Q4_K with a fifth bit per weight in `qh`.
    BlockQ5K, 176 { d: [u8; 2], dmin: [u8; 2], scales: [u8; K_SCALE_SIZE], qh: [u8; QK_K / 8],
        qs: [u8; QK_K / 2] }
}

block_layout! {
    /// Q6_K: sixteen sub-blocks of 16, `d × sc × (q − 32)` with 8-bit signed `sc`, q's low 4 bits
    /// in `ql` and high 2 bits in `qh`.
    BlockQ6K, 210 { ql: [u8; QK_K / 2], qh: [u8; QK_K / 4], scales: [i8; QK_K / SUB16], d: [u8; 2] }
}
/// Q6_K's stored 6-bit codes are the weights plus this.
pub const Q6_BIAS: i32 = 32;

block_layout! {
    /// IQ4_XS: eight sub-blocks of 32, `d × (ls − 32) × KVALUES_IQ4NL[q]`, the 6-bit `ls` split
    /// into `scales_l` (low 4 bits) and `scales_h` (high 2 bits, little-endian u16).
    BlockIq4Xs, 136 { d: [u8; 2], scales_h: [u8; 2], scales_l: [u8; QK_K / 64], qs: [u8; QK_K / 2] }
}

block_layout! {
    /// IQ3_XXS: eight sub-blocks of 32, each four groups of eight values: a group is two
    /// entries of [`IQ3XXS_GRID`](super::iq_grids::IQ3XXS_GRID) (`qs`, an index a half-group)
    /// with signs from one 7-bit index into [`super::iq_signs::KSIGNS`]; sub-block `s`'s four
    /// sign indices and its 4-bit scale `ls` are the little-endian u32 at `sas[4s..]` (bits
    /// 7g..7g+7, and 28..32): `d × (0.5 + ls) × 0.5 × grid × sign`.
    BlockIq3Xxs, 98 { d: [u8; 2], qs: [u8; QK_K / 4], sas: [u8; QK_K / 8] }
}

impl BlockIq3Xxs {
    /// Sub-block `s`'s word of scale and sign indices.
    #[inline]
    pub fn sas_word(&self, s: usize) -> u32 {
        u32::from_le_bytes(self.sas[4 * s..4 * s + 4].try_into().expect("four bytes"))
    }

    /// The 7-bit sign index of group `g` (0..4) of sub-block `s`.
    #[inline]
    pub fn sign_index(&self, s: usize, g: usize) -> usize {
        ((self.sas_word(s) >> (IQ_SIGN_BITS * g as u32)) & IQ_SIGN_MASK) as usize
    }
}

block_layout! {
    /// IQ3_S: eight sub-blocks of 32, each eight groups of four values. Group `g` (0..64) is the
    /// entry `qs[g] + 256 × (bit g % 8 of qh[g / 8])` of the 512-entry
    /// [`IQ3S_GRID`](super::iq_grids::IQ3S_GRID) (values odd, 1..=15); value `e` is negative
    /// where bit `e % 8` of `signs[e / 8]` is set (all eight signs stored, no parity); sub-block
    /// `s`'s 4-bit scale `ls` is the low (`s` even) or high nibble of `scales[s / 2]`:
    /// `d × (1 + 2·ls) × grid × sign`.
    BlockIq3S, 110 { d: [u8; 2], qs: [u8; QK_K / 4], qh: [u8; QK_K / 32], signs: [u8; QK_K / 8],
        scales: [u8; IQ3S_N_SCALE] }
}

impl BlockIq3S {
    /// Group `g`'s entry of the grid: its low eight bits from `qs`, its ninth from `qh` (one
    /// byte a sub-block, bit `g % 8`).
    #[inline]
    pub fn grid_index(&self, g: usize) -> usize {
        let high = (self.qh[g / IQ3S_GROUPS_PER_QH] >> (g % IQ3S_GROUPS_PER_QH)) & 1;
        usize::from(self.qs[g]) | usize::from(high) << IQ3S_QS_BITS
    }

    /// Sub-block `s`'s 4-bit scale `ls` (its values' scale is `d × (1 + 2·ls)`).
    #[inline]
    pub fn ls(&self, s: usize) -> u8 {
        let (byte, nibble) = (s / IQ3S_SCALES_PER_BYTE, s % IQ3S_SCALES_PER_BYTE);
        (self.scales[byte] >> (IQ3S_SCALE_BITS * nibble)) & IQ3S_SCALE_MASK
    }
}

block_layout! {
    /// IQ2_XXS: eight sub-blocks of 32, each four groups of eight values. Sub-block `s` is the
    /// eight bytes `qs[8s..8s + 8]`: four indices into the 256-entry
    /// [`IQ2XXS_GRID`](super::iq_grids::IQ2XXS_GRID) (one a group), then a little-endian u32
    /// holding the groups' 7-bit indices into [`super::iq_signs::KSIGNS`] (bits 7g..7g + 7)
    /// and the 4-bit scale `ls` (bits 28..32): `d × (0.5 + ls) × 0.25 × grid × sign`.
    BlockIq2Xxs, 66 { d: [u8; 2], qs: [u8; QK_K / 4] }
}

impl BlockIq2Xxs {
    /// Sub-block `s`'s word of sign indices and scale.
    #[inline]
    pub fn sas_word(&self, s: usize) -> u32 {
        let at = IQ2XXS_SUB_BYTES * s + IQ2XXS_SAS_OFFSET;
        u32::from_le_bytes(self.qs[at..at + 4].try_into().expect("four bytes"))
    }

    /// Group `g`'s (0..32) index into the grid.
    #[inline]
    pub fn grid_index(&self, g: usize) -> usize {
        let (s, l) = (g / IQ2_GROUPS_PER_SUB, g % IQ2_GROUPS_PER_SUB);
        usize::from(self.qs[IQ2XXS_SUB_BYTES * s + l])
    }
    /// Group `k`'s (0..32) 7-bit index into [`super::iq_signs::KSIGNS`].
    #[inline]
    pub fn sign_index(&self, k: usize) -> usize {
        let (s, l) = (k / IQ2_GROUPS_PER_SUB, k % IQ2_GROUPS_PER_SUB);
        ((self.sas_word(s) >> (IQ_SIGN_BITS * l as u32)) & IQ_SIGN_MASK) as usize
    }
}

block_layout! {
    /// IQ2_XS: 32 groups of eight values, group `g` the little-endian u16 at `qs[2g..]`: its
    /// low nine bits index the 512-entry [`IQ2XS_GRID`](super::iq_grids::IQ2XS_GRID), its
    /// high seven [`super::iq_signs::KSIGNS`]; sixteen 4-bit scales `ls`, one a sub-block of
    /// sixteen (two groups), the low (even sub-block) or high nibble of `scales[k / 2]`:
    /// `d × (0.5 + ls) × 0.25 × grid × sign`.
    BlockIq2Xs, 74 { d: [u8; 2], qs: [u8; QK_K / 4], scales: [u8; QK_K / SUB32] }
}

impl BlockIq2Xs {
    /// Group `g`'s (0..32) stored u16: grid index and sign index.
    #[inline]
    pub fn word(&self, g: usize) -> u16 {
        u16::from_le_bytes([self.qs[2 * g], self.qs[2 * g + 1]])
    }
}

block_layout! {
    /// IQ2_S: 32 groups of eight values. Group `g` is the entry `qs[g] + 256 × (bits 2(g % 4)
    /// .. 2(g % 4) + 2 of qh[g / 4])` of the 1024-entry [`IQ2S_GRID`](super::iq_grids::IQ2S_GRID);
    /// value `e` is negative where bit `e % 8` of `signs[e / 8]` is set (all eight signs
    /// stored); sixteen 4-bit scales as IQ2_XS's: `d × (0.5 + ls) × 0.25 × grid × sign`. (ggml
    /// declares `qs[64]` and reads the signs from its second half: the same bytes.)
    BlockIq2S, 82 { d: [u8; 2], qs: [u8; QK_K / 8], signs: [u8; QK_K / 8],
        qh: [u8; QK_K / SUB32], scales: [u8; QK_K / SUB32] }
}

impl BlockIq2S {
    /// Group `g`'s entry of the grid: its low eight bits from `qs`, its two high ones from `qh`.
    #[inline]
    pub fn grid_index(&self, g: usize) -> usize {
        let (s, l) = (g / IQ2_GROUPS_PER_SUB, g % IQ2_GROUPS_PER_SUB);
        let high = (self.qh[s] >> (IQ2S_QH_BITS * l)) & IQ2S_QH_MASK;
        usize::from(self.qs[g]) | usize::from(high) << IQ2S_QS_BITS
    }
}

/// Sixteen-value sub-block `k`'s 4-bit scale of IQ2_XS/IQ2_S: nibble `k % 2` of `scales[k / 2]`.
#[inline]
fn iq2_nibble(scales: &[u8; QK_K / SUB32], k: usize) -> u32 {
    u32::from(scales[k / 2] >> (IQ_SCALE_BITS * (k % 2) as u32)) & IQ_SCALE_MASK
}

/// The IQ2 and IQ3 types: each value a byte of a grid entry (eight values an IQ2 entry, four an
/// IQ3 one), with a sign from eight bits a group of eight, and a 4-bit scale `ls` a sub-block
/// of [`IqGrid::SCALE_GROUP`] values. Their dot products multiply by `2·ls + 1`, then by
/// [`IqGrid::SUM_SCALE`] where the type has one (IQ2's eighth, IQ3_XXS's quarter);
/// dequantizing gives `d × (2·ls + 1) × grid × ±1` times that factor (ggml's `d × (0.5 + ls) ×
/// 0.25` (IQ2) and `d × (0.5 + ls) × 0.5` (IQ3_XXS) are the same products: every step is
/// exact).
pub trait IqGrid: Block {
    /// Values sharing one scale `ls`: 32, or 16 for IQ2_XS and IQ2_S.
    const SCALE_GROUP: usize;
    /// The factor on the sums (and on `d` in the tiled matmul), where the type has one.
    const SUM_SCALE: Option<f32>;
    /// The f16 super-block scale.
    fn d(&self) -> [u8; 2];
    /// The grid values of the eight values `8k..8k + 8` (unsigned, value `8k + j` in byte `j`).
    fn group(&self, k: usize) -> u64;
    /// The sign bits of the eight values `8k..8k + 8` (bit `j` set: value `8k + j` negative).
    fn signs(&self, k: usize) -> u8;
    /// Scale group `s`'s 4-bit scale.
    fn ls(&self, s: usize) -> u32;

    /// Element `e`'s grid value (unsigned) and whether it is negative.
    #[inline]
    fn value(&self, e: usize) -> (u8, bool) {
        let v = self.group(e / IQ_GROUP).to_le_bytes()[e % IQ_GROUP];
        (v, self.signs(e / IQ_GROUP) >> (e % IQ_GROUP) & 1 == 1)
    }

    /// Element `e` as a signed byte (the grid values are at most 62).
    #[inline]
    fn signed(&self, e: usize) -> i8 {
        match self.value(e) {
            (v, true) => -(v as i8),
            (v, false) => v as i8,
        }
    }

    /// Scale group `s`'s factor in the dot products, `2·ls + 1`.
    #[inline]
    fn odd_scale(&self, s: usize) -> i32 {
        2 * self.ls(s) as i32 + 1
    }

    /// The sign bits of the 64 values of groups `k..k + 8` (bit `j` set: value `8k + j`
    /// negative), for a masked negation.
    #[inline]
    fn sign_mask(&self, k: usize) -> u64 {
        (0..8).fold(0u64, |m, j| m | u64::from(self.signs(k + j)) << (8 * j))
    }

    /// Whether the block stores every sign bit (IQ2_S, IQ3_S): a run's 32 are then
    /// [`IqGrid::sign_word`]'s four bytes as stored, for a kernel to spread with a shuffle.
    const STORED_SIGNS: bool = false;

    /// The sign bits of the 32 values of groups `k..k + 4`, group `k + j`'s in byte `j`.
    #[inline]
    fn sign_word(&self, k: usize) -> u32 {
        u32::from_le_bytes(std::array::from_fn(|j| self.signs(k + j)))
    }

    /// The signs of group `k` as eight bytes of ±1 ([`super::iq_signs::SIGN_BYTES`]), for
    /// `vpsignb`.
    #[inline]
    fn sign_bytes(&self, k: usize) -> u64 {
        table_load(&super::iq_signs::SIGN_BYTES, usize::from(self.signs(k)))
    }
}

/// Entry `i` of a grid or sign table by one scalar load. The kernels gather a block's entries
/// into vectors; read plainly, LLVM merges those loads into `vpgatherdd`, which ran the IQ3_XXS
/// decode slower than the loads (and GCC's build of llama.cpp does not do it). A volatile read
/// is a plain load it leaves alone.
#[inline(always)]
pub(crate) fn table_load<T: Copy>(table: &[T], i: usize) -> T {
    let e = &table[i];
    // SAFETY: `e` is a valid, aligned reference into a static table.
    unsafe { std::ptr::read_volatile(e) }
}

/// Two IQ3 entries of four values as one group of eight (the first in the low bytes).
#[inline]
fn iq3_pair(lo: u32, hi: u32) -> u64 {
    u64::from(lo) | u64::from(hi) << 32
}

impl IqGrid for BlockIq3Xxs {
    const SCALE_GROUP: usize = SUB32;
    const SUM_SCALE: Option<f32> = Some(0.25);
    fn d(&self) -> [u8; 2] {
        self.d
    }
    fn group(&self, k: usize) -> u64 {
        let e = |g: usize| table_load(&super::iq_grids::IQ3XXS_GRID, usize::from(self.qs[g]));
        iq3_pair(e(2 * k), e(2 * k + 1))
    }
    fn signs(&self, k: usize) -> u8 {
        super::iq_signs::KSIGNS[self.sign_index(k / (SUB32 / IQ_GROUP), k % (SUB32 / IQ_GROUP))]
    }
    // One lookup from the stored 7-bit index, not two.
    #[inline]
    fn sign_bytes(&self, k: usize) -> u64 {
        let i = self.sign_index(k / (SUB32 / IQ_GROUP), k % (SUB32 / IQ_GROUP));
        table_load(&super::iq_signs::EVEN_SIGN_BYTES, i)
    }
    fn ls(&self, s: usize) -> u32 {
        self.sas_word(s) >> IQ3_SCALE_SHIFT
    }
}

impl IqGrid for BlockIq3S {
    const STORED_SIGNS: bool = true;
    #[inline]
    fn sign_word(&self, k: usize) -> u32 {
        u32::from_le_bytes(self.signs[k..k + 4].try_into().expect("four sign bytes"))
    }
    const SCALE_GROUP: usize = SUB32;
    const SUM_SCALE: Option<f32> = None;
    fn d(&self) -> [u8; 2] {
        self.d
    }
    fn group(&self, k: usize) -> u64 {
        let e = |g: usize| table_load(&super::iq_grids::IQ3S_GRID, self.grid_index(g));
        iq3_pair(e(2 * k), e(2 * k + 1))
    }
    fn signs(&self, k: usize) -> u8 {
        self.signs[k]
    }
    #[inline]
    fn sign_mask(&self, k: usize) -> u64 {
        u64::from_le_bytes(self.signs[k..k + 8].try_into().expect("eight sign bytes"))
    }
    fn ls(&self, s: usize) -> u32 {
        u32::from(BlockIq3S::ls(self, s))
    }
}

impl IqGrid for BlockIq2Xxs {
    const SCALE_GROUP: usize = SUB32;
    const SUM_SCALE: Option<f32> = Some(IQ2_SUM_SCALE);
    fn d(&self) -> [u8; 2] {
        self.d
    }
    fn group(&self, k: usize) -> u64 {
        table_load(&super::iq_grids::IQ2XXS_GRID, self.grid_index(k))
    }
    fn signs(&self, k: usize) -> u8 {
        super::iq_signs::KSIGNS[self.sign_index(k)]
    }
    #[inline]
    fn sign_bytes(&self, k: usize) -> u64 {
        table_load(&super::iq_signs::EVEN_SIGN_BYTES, self.sign_index(k))
    }
    fn ls(&self, s: usize) -> u32 {
        self.sas_word(s) >> IQ3_SCALE_SHIFT
    }
}

impl IqGrid for BlockIq2Xs {
    const SCALE_GROUP: usize = SUB16;
    const SUM_SCALE: Option<f32> = Some(IQ2_SUM_SCALE);
    fn d(&self) -> [u8; 2] {
        self.d
    }
    fn group(&self, k: usize) -> u64 {
        table_load(
            &super::iq_grids::IQ2XS_GRID,
            usize::from(self.word(k) & IQ2XS_INDEX_MASK),
        )
    }
    fn signs(&self, k: usize) -> u8 {
        super::iq_signs::KSIGNS[usize::from(self.word(k) >> IQ2XS_INDEX_BITS)]
    }
    #[inline]
    fn sign_bytes(&self, k: usize) -> u64 {
        table_load(
            &super::iq_signs::EVEN_SIGN_BYTES,
            usize::from(self.word(k) >> IQ2XS_INDEX_BITS),
        )
    }
    fn ls(&self, s: usize) -> u32 {
        iq2_nibble(&self.scales, s)
    }
}

impl IqGrid for BlockIq2S {
    const STORED_SIGNS: bool = true;
    #[inline]
    fn sign_word(&self, k: usize) -> u32 {
        u32::from_le_bytes(self.signs[k..k + 4].try_into().expect("four sign bytes"))
    }
    const SCALE_GROUP: usize = SUB16;
    const SUM_SCALE: Option<f32> = Some(IQ2_SUM_SCALE);
    fn d(&self) -> [u8; 2] {
        self.d
    }
    fn group(&self, k: usize) -> u64 {
        table_load(&super::iq_grids::IQ2S_GRID, self.grid_index(k))
    }
    fn signs(&self, k: usize) -> u8 {
        self.signs[k]
    }
    #[inline]
    fn sign_mask(&self, k: usize) -> u64 {
        u64::from_le_bytes(self.signs[k..k + 8].try_into().expect("eight sign bytes"))
    }
    fn ls(&self, s: usize) -> u32 {
        iq2_nibble(&self.scales, s)
    }
}

/// Values a sign index covers in the IQ2/IQ3 types (seven stored sign bits and a parity).
pub const IQ_GROUP: usize = 8;
/// Bits of one group's sign index.
pub const IQ_SIGN_BITS: u32 = 7;
/// The mask of one sign index.
pub const IQ_SIGN_MASK: u32 = (1 << IQ_SIGN_BITS) - 1;
/// Where IQ3_XXS's (and IQ2_XXS's) 4-bit sub-block scale sits in its word of sign indices.
pub const IQ3_SCALE_SHIFT: u32 = 4 * IQ_SIGN_BITS;
/// Bits of one IQ2/IQ3 4-bit scale `ls`.
pub const IQ_SCALE_BITS: u32 = 4;
/// The mask of one 4-bit scale.
pub const IQ_SCALE_MASK: u32 = (1 << IQ_SCALE_BITS) - 1;
/// The factor on the IQ2 types' sums (their scales are stored as `2·ls + 1` eighths of `d`).
pub const IQ2_SUM_SCALE: f32 = 0.125;
/// Groups of eight values in a sub-block of 32.
pub const IQ2_GROUPS_PER_SUB: usize = SUB32 / IQ_GROUP;
/// Bytes of one IQ2_XXS sub-block in `qs`: four grid indices, then the word of signs and scale.
pub const IQ2XXS_SUB_BYTES: usize = 8;
/// Where an IQ2_XXS sub-block's word of sign indices and scale starts in its bytes.
pub const IQ2XXS_SAS_OFFSET: usize = 4;
/// Bits of an IQ2_XS group's grid index (the rest of its u16 is the sign index).
pub const IQ2XS_INDEX_BITS: u32 = 9;
/// The mask of an IQ2_XS grid index.
pub const IQ2XS_INDEX_MASK: u16 = (1 << IQ2XS_INDEX_BITS) - 1;
/// Bits of an IQ2_S grid index held in `qs`; the two above them are in `qh`.
pub const IQ2S_QS_BITS: u32 = 8;
/// Bits of `qh` per IQ2_S group.
pub const IQ2S_QH_BITS: usize = 2;
/// The mask of one IQ2_S group's bits of `qh`.
pub const IQ2S_QH_MASK: u8 = (1 << IQ2S_QH_BITS) - 1;
/// Values per entry of the IQ3 grids (one a byte of the entry's u32, the first lowest).
pub const IQ3_GRID_GROUP: usize = 4;
/// Bytes of IQ3_S's 4-bit sub-block scales, two a byte (ggml's `IQ3S_N_SCALE`).
pub const IQ3S_N_SCALE: usize = QK_K / 64;
/// Bits of one IQ3_S sub-block scale `ls`.
pub const IQ3S_SCALE_BITS: usize = 4;
/// IQ3_S sub-block scales per byte of `scales`.
pub const IQ3S_SCALES_PER_BYTE: usize = QK_K / SUB32 / IQ3S_N_SCALE;
/// The mask of one IQ3_S sub-block scale.
pub const IQ3S_SCALE_MASK: u8 = (1 << IQ3S_SCALE_BITS) - 1;
/// Bits of an IQ3_S grid index held in `qs`; the ninth is in `qh`.
pub const IQ3S_QS_BITS: u32 = 8;
/// IQ3_S groups whose ninth index bits share one byte of `qh`: a sub-block's eight.
pub const IQ3S_GROUPS_PER_QH: usize = SUB32 / IQ3_GRID_GROUP;

// ---- IQ1: ternary grids ----------------------------------------------------------------------

block_layout! {
    /// IQ1_S: eight sub-blocks of 32, each four groups of eight values. Group `g` (0..32) is
    /// the entry `qs[g] + 256 × (bits 3·(g % 4).. + 3 of qh[g / 4])` of the 2048-entry
    /// [`IQ1S_GRID`](super::iq_grids::IQ1S_GRID) (values −1, 0, 1); `qh` holds one
    /// little-endian u16 a sub-block: four 3-bit index tops, the 3-bit scale `ls` (bits 12..15)
    /// and the sign of the sub-block's delta (bit 15): `d × (2·ls + 1) × (grid ± IQ1S_DELTA)`.
    BlockIq1S, 50 { d: [u8; 2], qs: [u8; QK_K / 8], qh: [u8; QK_K / 16] }
}

impl BlockIq1S {
    /// Sub-block `s`'s word of `qh`.
    #[inline]
    pub fn qh_word(&self, s: usize) -> u16 {
        u16::from_le_bytes([self.qh[2 * s], self.qh[2 * s + 1]])
    }
}

block_layout! {
    /// IQ1_M: eight sub-blocks of 32, each four groups of eight values and two halves of 16.
    /// Group `g` (0..32) is the entry `qs[g] + 256 × (bits 4·(g % 2).. + 3 of qh[g / 2])` of
    /// [`IQ1S_GRID`](super::iq_grids::IQ1S_GRID), its delta negative where bit `4·(g % 2) + 3`
    /// of `qh[g / 2]` is set. `scales` is four little-endian u16: word `w` holds the 3-bit
    /// scales of the halves `4w..4w + 4` (bits 3k..3k + 3 for half `4w + k`) and, in its top
    /// nibble, bits 4w..4w + 4 of the f16 super-block scale `d`:
    /// `d × (2·ls + 1) × (grid ± IQ1M_DELTA)`.
    BlockIq1M, 56 { qs: [u8; QK_K / 8], qh: [u8; QK_K / 16], scales: [u8; QK_K / 32] }
}

impl BlockIq1M {
    /// Word `w` (0..4) of `scales`.
    #[inline]
    pub fn scale_word(&self, w: usize) -> u16 {
        u16::from_le_bytes([self.scales[2 * w], self.scales[2 * w + 1]])
    }
}

/// The offset IQ1_S adds to (or takes from) every grid value of a sub-block (ggml's
/// `IQ1S_DELTA`).
pub const IQ1S_DELTA: f32 = 0.125;
/// IQ1_M's offset, one sign a group of eight (ggml's `IQ1M_DELTA`).
pub const IQ1M_DELTA: f32 = 0.125;
/// Values of one IQ1 grid entry (a byte each of the entry's u64, the first lowest).
pub const IQ1_GROUP: usize = 8;
/// Values of one IQ1 scale: IQ1_M's half sub-block (IQ1_S's sub-block holds two with one scale).
pub const IQ1_HALF: usize = 16;
/// Bits of an IQ1 grid index held in `qs`; the top three come from `qh`.
pub const IQ1_QS_BITS: u32 = 8;
/// Bits of the top of an IQ1 grid index, and of an IQ1 scale `ls`.
pub const IQ1_FIELD_BITS: u32 = 3;
/// The mask of a 3-bit IQ1 field.
pub const IQ1_FIELD_MASK: u16 = (1 << IQ1_FIELD_BITS) - 1;
/// Where IQ1_S's scale `ls` sits in its sub-block's `qh` word.
pub const IQ1S_SCALE_SHIFT: u32 = 12;
/// IQ1_S's delta sign bit in a sub-block's `qh` word.
pub const IQ1S_DELTA_SIGN: u16 = 0x8000;
/// IQ1_M groups whose index tops and delta signs share a byte of `qh` (a nibble each).
pub const IQ1M_GROUPS_PER_QH: usize = 2;
/// Bits of `qh` per IQ1_M group: three index bits, then the delta sign.
pub const IQ1M_QH_BITS: u32 = 4;
/// IQ1_M's delta sign within a group's nibble of `qh`.
pub const IQ1M_DELTA_SIGN: u8 = 1 << IQ1_FIELD_BITS;
/// IQ1_M halves whose scales share a word of `scales`.
pub const IQ1M_HALVES_PER_WORD: usize = 4;
/// Where the nibble of IQ1_M's f16 scale sits in each `scales` word (its top four bits).
pub const IQ1M_D_SHIFT: u32 = 12;
/// Bits of the f16 scale each `scales` word holds.
pub const IQ1M_D_BITS: u32 = 4;

/// The IQ1 types: each value a byte (−1, 0, 1) of an [`IQ1S_GRID`](super::iq_grids::IQ1S_GRID)
/// entry (eight values an entry) plus a delta of ±1/8 a group, and a 3-bit scale `ls` a half
/// sub-block of 16 (IQ1_S: the same for both halves). Dequantizing gives `d × (2·ls + 1) ×
/// (grid ± 1/8)`; the dot products sum `(2·ls + 1) × grid × q` and `(2·ls + 1) × ±q` apart
/// (the tiled matmul `(2·ls + 1) × (8·grid ± 1) × q`, with `d` an eighth).
pub trait Iq1Grid: Block {
    /// The f16 super-block scale.
    fn d(&self) -> [u8; 2];
    /// The grid index (11 bits) of group `g` (0..32) of eight values.
    fn grid_index(&self, g: usize) -> usize;
    /// Whether group `g`'s delta is negative.
    fn delta_negative(&self, g: usize) -> bool;
    /// The 3-bit scale of half `h` (0..16): values `16h..16h + 16`.
    fn ls(&self, h: usize) -> u16;

    /// Group `g`'s grid entry.
    #[inline]
    fn entry(&self, g: usize) -> u64 {
        table_load(&super::iq_grids::IQ1S_GRID, self.grid_index(g))
    }

    /// Element `e`'s grid value (−1, 0 or 1).
    #[inline]
    fn value(&self, e: usize) -> i8 {
        self.entry(e / IQ1_GROUP).to_le_bytes()[e % IQ1_GROUP] as i8
    }

    /// Group `g`'s delta sign, ±1.
    #[inline]
    fn delta_sign(&self, g: usize) -> i8 {
        if self.delta_negative(g) {
            -1
        } else {
            1
        }
    }

    /// Half `h`'s factor, `2·ls + 1`.
    #[inline]
    fn odd_scale(&self, h: usize) -> i32 {
        2 * i32::from(self.ls(h)) + 1
    }
}

impl Iq1Grid for BlockIq1S {
    fn d(&self) -> [u8; 2] {
        self.d
    }
    fn grid_index(&self, g: usize) -> usize {
        let top = (self.qh_word(g / 4) >> (IQ1_FIELD_BITS * (g % 4) as u32)) & IQ1_FIELD_MASK;
        usize::from(self.qs[g]) | usize::from(top) << IQ1_QS_BITS
    }
    fn delta_negative(&self, g: usize) -> bool {
        self.qh_word(g / 4) & IQ1S_DELTA_SIGN != 0
    }
    fn ls(&self, h: usize) -> u16 {
        (self.qh_word(h / 2) >> IQ1S_SCALE_SHIFT) & IQ1_FIELD_MASK
    }
}

impl Iq1Grid for BlockIq1M {
    /// The f16 scale spread over the top nibbles of the four `scales` words (word 0's the
    /// lowest four bits).
    fn d(&self) -> [u8; 2] {
        let nibble = |w: usize| (self.scale_word(w) >> IQ1M_D_SHIFT) << (IQ1M_D_BITS * w as u32);
        (nibble(0) | nibble(1) | nibble(2) | nibble(3)).to_le_bytes()
    }
    fn grid_index(&self, g: usize) -> usize {
        let nib =
            self.qh[g / IQ1M_GROUPS_PER_QH] >> (IQ1M_QH_BITS * (g % IQ1M_GROUPS_PER_QH) as u32);
        usize::from(self.qs[g]) | usize::from(u16::from(nib) & IQ1_FIELD_MASK) << IQ1_QS_BITS
    }
    fn delta_negative(&self, g: usize) -> bool {
        let nib =
            self.qh[g / IQ1M_GROUPS_PER_QH] >> (IQ1M_QH_BITS * (g % IQ1M_GROUPS_PER_QH) as u32);
        nib & IQ1M_DELTA_SIGN != 0
    }
    fn ls(&self, h: usize) -> u16 {
        let k = (h % IQ1M_HALVES_PER_WORD) as u32;
        (self.scale_word(h / IQ1M_HALVES_PER_WORD) >> (IQ1_FIELD_BITS * k)) & IQ1_FIELD_MASK
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

/// The sixteen values an MXFP4 nibble stands for: the E2M1 values (0, 0.5, 1, 1.5, 2, 3, 4, 6
/// and their negatives) doubled, as ggml's `kvalues_mxfp4`.
pub const KVALUES_MXFP4: [i8; 16] = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12];

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

/// Views `bytes` as blocks; `None` if the length is not a whole number of blocks.
pub fn as_blocks<B: Block>(bytes: &[u8]) -> Option<&[B]> {
    let size = std::mem::size_of::<B>();
    if !bytes.len().is_multiple_of(size) {
        return None;
    }
    // SAFETY: B is alignment 1 and valid for any bytes (Block contract); the length is an exact
    // multiple of size_of::<B>() and the lifetime is tied to `bytes`.
    Some(unsafe { std::slice::from_raw_parts(bytes.as_ptr().cast::<B>(), bytes.len() / size) })
}

/// Views blocks as their bytes.
pub fn block_bytes<B: Block>(blocks: &[B]) -> &[u8] {
    // SAFETY: B has no padding (Block contract), so all its bytes are initialised; u8 has
    // alignment 1 and the length covers exactly the blocks.
    unsafe {
        std::slice::from_raw_parts(blocks.as_ptr().cast::<u8>(), std::mem::size_of_val(blocks))
    }
}

/// Mutable view of blocks as bytes.
pub fn block_bytes_mut<B: Block>(blocks: &mut [B]) -> &mut [u8] {
    // SAFETY: as `block_bytes`; any byte pattern written back is a valid B.
    unsafe {
        std::slice::from_raw_parts_mut(
            blocks.as_mut_ptr().cast::<u8>(),
            std::mem::size_of_val(blocks),
        )
    }
}

#[inline]
fn h(v: [u8; 2]) -> f32 {
    f16_to_f32(u16::from_le_bytes(v))
}

#[inline]
fn hb(v: f32) -> [u8; 2] {
    f32_to_f16(v).to_le_bytes()
}

/// ggml's `roundf`: half away from zero.
#[inline]
fn round_away(v: f32) -> f32 {
    v.round()
}

// ---- weight quantizers (ggml reference code) ------------------------------------------------

/// `quantize_row_q8_0_ref`: d = amax/127, q = round(x/d) (half away from zero).
pub fn quantize_q8_0_ref(x: &[f32], y: &mut [BlockQ8_0]) {
    for (xb, yb) in x.chunks_exact(QK).zip(y.iter_mut()) {
        let amax = xb.iter().fold(0f32, |m, v| m.max(v.abs()));
        let d = amax / 127.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        yb.d = hb(d);
        for (q, v) in yb.qs.iter_mut().zip(xb) {
            *q = round_away(v * id) as i8;
        }
    }
}

/// `quantize_row_q4_0_ref`: d = (signed value of largest magnitude)/−8, q = min(15, trunc(x/d + 8.5)).
pub fn quantize_q4_0_ref(x: &[f32], y: &mut [BlockQ4_0]) {
    for (xb, yb) in x.chunks_exact(QK).zip(y.iter_mut()) {
        let (mut amax, mut max) = (0f32, 0f32);
        for &v in xb {
            if amax < v.abs() {
                amax = v.abs();
                max = v;
            }
        }
        let d = max / -8.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        yb.d = hb(d);
        for j in 0..QK / 2 {
            let q0 = ((xb[j] * id + 8.5) as i8).min(15) as u8;
            let q1 = ((xb[j + QK / 2] * id + 8.5) as i8).min(15) as u8;
            yb.qs[j] = q0 | (q1 << 4);
        }
    }
}

/// `quantize_row_q4_1_ref`: d = (max−min)/15, m = min, q = min(15, trunc((x−m)/d + 0.5)).
pub fn quantize_q4_1_ref(x: &[f32], y: &mut [BlockQ4_1]) {
    for (xb, yb) in x.chunks_exact(QK).zip(y.iter_mut()) {
        let (mut min, mut max) = (f32::MAX, -f32::MAX);
        for &v in xb {
            min = min.min(v);
            max = max.max(v);
        }
        let d = (max - min) / 15.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        yb.d = hb(d);
        yb.m = hb(min);
        for j in 0..QK / 2 {
            let q0 = (((xb[j] - min) * id + 0.5) as i8).min(15) as u8;
            let q1 = (((xb[j + QK / 2] - min) * id + 0.5) as i8).min(15) as u8;
            yb.qs[j] = q0 | (q1 << 4);
        }
    }
}

// ---- activation quantizers (ggml x86 SIMD arithmetic) ---------------------------------------

#[inline]
fn act_scale(xb: &[f32]) -> (f32, f32) {
    let amax = xb.iter().fold(0f32, |m, v| m.max(v.abs()));
    let d = amax / 127.0;
    let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
    (d, id)
}

/// Row → Q8_0 as ggml's AVX2 `quantize_row_q8_0`: q = round_half_even(x × 127/amax).
pub fn quantize_act_q8_0(x: &[f32], y: &mut [BlockQ8_0]) {
    for (xb, yb) in x.chunks_exact(QK).zip(y.iter_mut()) {
        let (d, id) = act_scale(xb);
        yb.d = hb(d);
        for (q, v) in yb.qs.iter_mut().zip(xb) {
            *q = (v * id).round_ties_even() as i8;
        }
    }
}

/// Row → Q8_1 as ggml's AVX2 `quantize_row_q8_1`: Q8_0's integers plus s = d × Σq.
pub fn quantize_act_q8_1(x: &[f32], y: &mut [BlockQ8_1]) {
    for (xb, yb) in x.chunks_exact(QK).zip(y.iter_mut()) {
        let (d, id) = act_scale(xb);
        yb.d = hb(d);
        let mut sum = 0i32;
        for (q, v) in yb.qs.iter_mut().zip(xb) {
            *q = (v * id).round_ties_even() as i8;
            sum += *q as i32;
        }
        yb.s = hb(d * sum as f32);
    }
}

// ---- dequantizers ---------------------------------------------------------------------------

pub fn dequantize_q4_0(x: &[BlockQ4_0], y: &mut [f32]) {
    for (b, yb) in x.iter().zip(y.chunks_exact_mut(QK)) {
        let d = h(b.d);
        for j in 0..QK / 2 {
            yb[j] = ((b.qs[j] & 0x0f) as i32 - 8) as f32 * d;
            yb[j + QK / 2] = ((b.qs[j] >> 4) as i32 - 8) as f32 * d;
        }
    }
}

pub fn dequantize_q4_1(x: &[BlockQ4_1], y: &mut [f32]) {
    for (b, yb) in x.iter().zip(y.chunks_exact_mut(QK)) {
        let (d, m) = (h(b.d), h(b.m));
        for j in 0..QK / 2 {
            yb[j] = (b.qs[j] & 0x0f) as f32 * d + m;
            yb[j + QK / 2] = (b.qs[j] >> 4) as f32 * d + m;
        }
    }
}

pub fn dequantize_q8_0(x: &[BlockQ8_0], y: &mut [f32]) {
    for (b, yb) in x.iter().zip(y.chunks_exact_mut(QK)) {
        let d = h(b.d);
        for (o, &q) in yb.iter_mut().zip(&b.qs) {
            *o = q as f32 * d;
        }
    }
}

/// Scale of a block, f16 → f32 (for the dot-product kernels).
#[inline]
pub fn scale(d: [u8; 2]) -> f32 {
    h(d)
}
