//! AVX-512 `vec_dot` kernels of the IQ2 and IQ3 grid types (decode: one token against many
//! rows). A block is first decoded in vectors ([`decode`]): its grid indices where they are not
//! plain bytes of the block (IQ2_XS: the low nine bits of each word; IQ2_S and IQ3_S: a byte
//! plus high bits from `qh`), its 32 bytes of sign bits (the 7-bit sign indices of IQ2_XXS,
//! IQ2_XS and IQ3_XXS completed by their parity, a `vpshufb` of a nibble table, in place of
//! ggml's table lookups; IQ2_S and IQ3_S store theirs) and its odd scales `2·ls + 1` as bytes.
//! Each 512-bit step then takes two runs of 32 values: their grid values (sixteen IQ3 entries
//! or eight IQ2 groups of eight), the activation negated under the step's 64 sign bits (a
//! masked subtract in place of ggml's `vpsignb` against sign bytes, which wraps −128 as
//! `vpsignb` does), `vpmaddubsw`, and `vpdpwssd` by the scales (one `vpshufb` of the scale
//! bytes a step). Run 2h's lanes sit in the low half, run 2h + 1's in the high; adding the
//! halves gives, lane for lane, the integers of ggml's AVX2 kernel
//! (`kquant_kernels::iq_grid_lanes`), and the float chain is the 256-bit kernels' own
//! (`kquant_kernels::iq_grid_dot`, run by `avx512_kquant::iq_grid_rows`).
//!
//! On a CPU with AVX-512 VBMI the steps take their grid values from `avx512_iq_vbmi`'s lookups
//! in vectors instead of the table loads here (the table picks the tiles at detection).
//!
//! The `#[target_feature]` functions are private to the tier; the table hands out the tiles
//! only after AVX2, FMA, F16C and AVX-512 F/BW/VL/VNNI were detected.

use std::arch::x86_64::*;

use super::kquant_rows::{RUN, RUNS};
use super::passes::{PASS_ROWS, PASS_TOKENS};
use crate::kernels::blocks::{
    table_load, BlockIq2S, BlockIq2Xs, BlockIq2Xxs, BlockIq3S, BlockIq3Xxs, BlockQ8K, IqGrid,
    IQ2S_QH_BITS, IQ2S_QH_MASK, IQ2S_QS_BITS, IQ2XS_INDEX_BITS, IQ2XS_INDEX_MASK, IQ3S_QS_BITS,
    IQ3_SCALE_SHIFT, IQ_SCALE_BITS, IQ_SCALE_MASK, IQ_SIGN_BITS, IQ_SIGN_MASK,
};
use crate::kernels::entries::{self, TileDot, Variant};
use crate::kernels::iq_grids::{IQ2S_GRID, IQ2XS_GRID, IQ2XXS_GRID, IQ3S_GRID, IQ3XXS_GRID};
use crate::kernels::ActRow;

/// Values a 512-bit step takes: two runs.
pub(super) const STEP: usize = 2 * RUN;
/// 512-bit steps a super-block.
pub(super) const STEPS: usize = RUNS / 2;
/// IQ2 grid entries (groups of eight values) a step.
const IQ2_STEP_ENTRIES: usize = STEP / 8;
/// IQ3 grid entries (four values) a step.
const IQ3_STEP_ENTRIES: usize = STEP / 4;
/// Grid entries of a super-block at most (IQ3's 64).
const MAX_ENTRIES: usize = STEPS * IQ3_STEP_ENTRIES;
/// A sign byte's eighth bit, which completes a 7-bit sign index.
const PARITY_BIT: u8 = 0x80;
/// A `vpshufb` control byte that gives zero.
const SHUFFLE_ZERO: u16 = 0x80;

/// `PARITY_BIT` at each nibble of odd parity: a 7-bit index's eighth sign bit, looked up by
/// the nibble that folds its high three bits onto its low four.
const ODD_PARITY: [u8; 16] = {
    let mut t = [0u8; 16];
    let mut i = 0;
    while i < 16 {
        if (i as u32).count_ones() % 2 == 1 {
            t[i] = PARITY_BIT;
        }
        i += 1;
    }
    t
};

/// One block of an IQ grid type, as the decode reads it.
pub(super) enum View<'a> {
    Iq2Xxs(&'a BlockIq2Xxs),
    Iq2Xs(&'a BlockIq2Xs),
    Iq2S(&'a BlockIq2S),
    Iq3Xxs(&'a BlockIq3Xxs),
    Iq3S(&'a BlockIq3S),
}

/// The IQ grid types this decode takes (each inlines to its own arm of [`View`]).
pub(super) trait WideGrid: IqGrid {
    fn view(&self) -> View<'_>;
}

/// Each block type's arm of [`View`].
macro_rules! wide_grid {
    ($($block:ident => $arm:ident),*) => {$(
        impl WideGrid for $block {
            #[inline(always)]
            fn view(&self) -> View<'_> {
                View::$arm(self)
            }
        }
    )*};
}
wide_grid!(
    BlockIq2Xxs => Iq2Xxs,
    BlockIq2Xs => Iq2Xs,
    BlockIq2S => Iq2S,
    BlockIq3Xxs => Iq3Xxs,
    BlockIq3S => Iq3S
);

/// Grid indices, aligned for whole-vector stores.
#[repr(C, align(64))]
struct Indices([u16; MAX_ENTRIES]);

/// Indices a 512-bit vector holds.
const INDICES_PER_VECTOR: usize = 32;

impl Indices {
    /// Stores `v`, 32 indices, as `part` (0 or 1) of the array. The store is volatile: the
    /// steps read the indices back one by one, and from a plain store LLVM takes them out of
    /// the vector instead, a `vpextrw` each, which ran IQ2_S's decode slower than the loads.
    #[inline(always)]
    fn store(&mut self, part: usize, v: __m512i) {
        let to = self.0[INDICES_PER_VECTOR * part..][..INDICES_PER_VECTOR].as_mut_ptr();
        // SAFETY: `to` is 64-byte aligned (the array is, and `part` moves by 64 bytes) and
        // has room for the vector's 64 bytes.
        unsafe { std::ptr::write_volatile(to.cast::<__m512i>(), v) }
    }
}

/// Indices a u64 word holds.
const INDICES_PER_WORD: usize = 4;
/// Bits of an index in a word.
const INDEX_BITS: usize = 16;

impl Indices {
    /// Step `h`'s eight IQ2 indices as two words, each read once (volatile, so that LLVM
    /// keeps them loads, not lanes of the stored vector): the indices come out of them by
    /// shifts on the integer units, not by one load each.
    #[inline(always)]
    fn words(&self, h: usize) -> [u64; IQ2_STEP_ENTRIES / INDICES_PER_WORD] {
        let at = self.0[IQ2_STEP_ENTRIES * h..].as_ptr().cast::<u64>();
        // SAFETY: the step's eight indices lie within the array, 8-byte aligned (the array is
        // 64-byte aligned and a step moves by 16 bytes).
        std::array::from_fn(|i| unsafe { std::ptr::read_volatile(at.add(i)) })
    }
}

impl Indices {
    /// Step `h`'s sixteen IQ3 indices as four words, as [`Indices::words`].
    #[inline(always)]
    fn iq3_words(&self, h: usize) -> [u64; IQ3_STEP_ENTRIES / INDICES_PER_WORD] {
        let at = self.0[IQ3_STEP_ENTRIES * h..].as_ptr().cast::<u64>();
        // SAFETY: the step's sixteen indices lie within the array, 8-byte aligned.
        std::array::from_fn(|i| unsafe { std::ptr::read_volatile(at.add(i)) })
    }
}

/// Index `g` (its place in the super-block) of a step's words.
#[inline(always)]
fn word_index(words: &[u64; IQ2_STEP_ENTRIES / INDICES_PER_WORD], g: usize) -> usize {
    let j = g % IQ2_STEP_ENTRIES;
    usize::from((words[j / INDICES_PER_WORD] >> (INDEX_BITS * (j % INDICES_PER_WORD))) as u16)
}

/// Bytes a u64 word holds.
const BYTES_PER_WORD: usize = 8;

/// The sixteen bytes of an IQ3 step's grid indices from `at`, as two words, each read once
/// (volatile, so that LLVM keeps them two loads): the indices come out of them by shifts on
/// the integer units, not by one load each.
#[inline(always)]
fn byte_words(bytes: &[u8], at: usize) -> [u64; IQ3_STEP_ENTRIES / BYTES_PER_WORD] {
    let b = &bytes[at..at + IQ3_STEP_ENTRIES];
    std::array::from_fn(|i| {
        let p = b[BYTES_PER_WORD * i..].as_ptr();
        let w: u64;
        // SAFETY: `p` points to eight bytes within `b`; x86 loads need no alignment.
        unsafe {
            std::arch::asm!(
                "mov {w}, qword ptr [{p}]",
                w = out(reg) w,
                p = in(reg) p,
                options(pure, readonly, nostack, preserves_flags),
            );
        }
        w
    })
}

/// A super-block's signs and scales, decoded for the steps.
pub(super) struct Decoded {
    /// Each step's 64 sign bits (bit `j` set: value `STEP·h + j` negative).
    signs: [u64; STEPS],
    /// The odd scales `2·ls + 1`, scale group `s` in byte `s`.
    scales: __m128i,
}

/// The sign bytes of sixteen 7-bit sign indices (one an i32 lane): each index with its parity
/// as the eighth bit (ggml's `ksigns_iq2xs`).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn parity_signs(x: __m512i) -> __m128i {
    // SAFETY: ODD_PARITY holds sixteen bytes.
    let table = _mm512_broadcast_i32x4(unsafe { _mm_loadu_si128(ODD_PARITY.as_ptr().cast()) });
    // The low nibble of `x ^ x >> 4` has the parity of the seven bits; the lanes' other bytes
    // are zero and look up zero.
    let fold = _mm512_xor_si512(x, _mm512_srli_epi32::<4>(x));
    _mm512_cvtepi32_epi8(_mm512_or_si512(x, _mm512_shuffle_epi8(table, fold)))
}

/// The sign bytes of 32 groups whose 7-bit sign indices sit four to a u32 word (bits 7g..7g + 7)
/// in the i32 lanes of `words`, the words of groups `4i..4i + 4` at lane `lane(i)`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn packed_signs(words: __m512i, lane: impl Fn(i32) -> i32) -> [u64; STEPS] {
    let b = IQ_SIGN_BITS as i32;
    let shifts = _mm512_setr_epi32(
        0,
        b,
        2 * b,
        3 * b,
        0,
        b,
        2 * b,
        3 * b,
        0,
        b,
        2 * b,
        3 * b,
        0,
        b,
        2 * b,
        3 * b,
    );
    let mask = _mm512_set1_epi32(IQ_SIGN_MASK as i32);
    let half = |o: i32| {
        let l = |i: i32| lane(o + i);
        let perm = _mm512_setr_epi32(
            l(0),
            l(0),
            l(0),
            l(0),
            l(1),
            l(1),
            l(1),
            l(1),
            l(2),
            l(2),
            l(2),
            l(2),
            l(3),
            l(3),
            l(3),
            l(3),
        );
        let x = _mm512_srlv_epi32(_mm512_permutexvar_epi32(perm, words), shifts);
        parity_signs(_mm512_and_si512(x, mask))
    };
    let (lo, hi) = (half(0), half(4));
    [
        _mm_cvtsi128_si64(lo) as u64,
        _mm_extract_epi64::<1>(lo) as u64,
        _mm_cvtsi128_si64(hi) as u64,
        _mm_extract_epi64::<1>(hi) as u64,
    ]
}

/// Sixteen 4-bit scales, two a byte (the even one low), as the bytes `2·ls + 1`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn nibble_scales(bytes: u64) -> __m128i {
    let s = _mm_cvtsi64_si128(bytes as i64);
    let m = _mm_set1_epi8(IQ_SCALE_MASK as i8);
    let lo = _mm_and_si128(s, m);
    let hi = _mm_and_si128(_mm_srli_epi16::<{ IQ_SCALE_BITS as i32 }>(s), m);
    odd(_mm_unpacklo_epi8(lo, hi))
}

/// `2·ls + 1` of each byte.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn odd(ls: __m128i) -> __m128i {
    _mm_add_epi8(_mm_add_epi8(ls, ls), _mm_set1_epi8(1))
}

/// The bytes of a block's stored sign bits, a step's 64 a word.
#[inline]
fn stored_signs(signs: &[u8; 32]) -> [u64; STEPS] {
    std::array::from_fn(|h| u64::from_le_bytes(signs[8 * h..8 * h + 8].try_into().expect("eight")))
}

/// A block's signs and scales; its grid indices, where they are not plain bytes of the block
/// (IQ2_XS, IQ2_S: 32; IQ3_S: 64), go to `keep` as vectors of 32 u16 (`keep(part, v)`).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
pub(super) fn decode(view: &View<'_>, mut keep: impl FnMut(usize, __m512i)) -> Decoded {
    let (signs, scales) = match *view {
        View::Iq2Xxs(a) => {
            // SAFETY: `qs` holds 64 bytes: eight sub-blocks, the word of sub-block s at i32 lane 2s + 1.
            let v = unsafe { _mm512_loadu_si512(a.qs.as_ptr().cast()) };
            let signs = packed_signs(v, |i| 2 * i + 1);
            let ls = _mm512_cvtepi32_epi8(_mm512_srli_epi32::<{ IQ3_SCALE_SHIFT }>(v));
            let odd_bytes =
                _mm_setr_epi8(1, 3, 5, 7, 9, 11, 13, 15, -1, -1, -1, -1, -1, -1, -1, -1);
            (signs, odd(_mm_shuffle_epi8(ls, odd_bytes)))
        }
        View::Iq3Xxs(a) => {
            // SAFETY: `sas` holds 32 bytes: eight words, sub-block s's at i32 lane s.
            let v = unsafe { _mm256_loadu_si256(a.sas.as_ptr().cast()) };
            let signs = packed_signs(_mm512_castsi256_si512(v), |i| i);
            let ls = _mm256_cvtepi32_epi8(_mm256_srli_epi32::<{ IQ3_SCALE_SHIFT as i32 }>(v));
            (signs, odd(ls))
        }
        View::Iq2Xs(a) => {
            // SAFETY: `qs` holds 64 bytes, the 32 words.
            let w = unsafe { _mm512_loadu_si512(a.qs.as_ptr().cast()) };
            let index = _mm512_and_si512(w, _mm512_set1_epi16(IQ2XS_INDEX_MASK as i16));
            keep(0, index);
            let x = _mm512_srli_epi16::<{ IQ2XS_INDEX_BITS }>(w);
            // SAFETY: ODD_PARITY holds sixteen bytes.
            let table =
                _mm512_broadcast_i32x4(unsafe { _mm_loadu_si128(ODD_PARITY.as_ptr().cast()) });
            let fold = _mm512_xor_si512(x, _mm512_srli_epi16::<4>(x));
            let bytes = _mm512_cvtepi16_epi8(_mm512_or_si512(x, _mm512_shuffle_epi8(table, fold)));
            let mut signs = [0u64; STEPS];
            // SAFETY: `signs` holds 32 bytes.
            unsafe { _mm256_storeu_si256(signs.as_mut_ptr().cast(), bytes) };
            (signs, nibble_scales(u64::from_le_bytes(a.scales)))
        }
        View::Iq2S(a) => {
            // SAFETY: `qs` holds 32 bytes.
            let lo = _mm512_cvtepu8_epi16(unsafe { _mm256_loadu_si256(a.qs.as_ptr().cast()) });
            let qh = _mm_cvtepu8_epi16(_mm_cvtsi64_si128(i64::from_le_bytes(a.qh)));
            let q = |g: i16| g / 4;
            let perm = _mm512_set_epi16(
                q(31),
                q(30),
                q(29),
                q(28),
                q(27),
                q(26),
                q(25),
                q(24),
                q(23),
                q(22),
                q(21),
                q(20),
                q(19),
                q(18),
                q(17),
                q(16),
                q(15),
                q(14),
                q(13),
                q(12),
                q(11),
                q(10),
                q(9),
                q(8),
                q(7),
                q(6),
                q(5),
                q(4),
                q(3),
                q(2),
                q(1),
                q(0),
            );
            let b = IQ2S_QH_BITS as i16;
            let shifts = _mm512_set4_epi32(
                i32::from(3 * b) << 16 | i32::from(2 * b),
                i32::from(b) << 16,
                i32::from(3 * b) << 16 | i32::from(2 * b),
                i32::from(b) << 16,
            );
            let high = _mm512_srlv_epi16(
                _mm512_permutexvar_epi16(perm, _mm512_castsi128_si512(qh)),
                shifts,
            );
            let high = _mm512_and_si512(high, _mm512_set1_epi16(i16::from(IQ2S_QH_MASK)));
            let index = _mm512_or_si512(lo, _mm512_slli_epi16::<{ IQ2S_QS_BITS }>(high));
            keep(0, index);
            (
                stored_signs(&a.signs),
                nibble_scales(u64::from_le_bytes(a.scales)),
            )
        }
        View::Iq3S(a) => {
            let qh = u64::from_le_bytes(a.qh);
            let top = _mm512_set1_epi16(1 << IQ3S_QS_BITS);
            for half in 0..2 {
                // SAFETY: `qs` holds 64 bytes, this half's 32 at 32·half; `idx` 64 u16.
                let lo = _mm512_cvtepu8_epi16(unsafe {
                    _mm256_loadu_si256(a.qs[32 * half..].as_ptr().cast())
                });
                let k = (qh >> (32 * half)) as __mmask32;
                let index = _mm512_mask_add_epi16(lo, k, lo, top);
                keep(half, index);
            }
            let scales = u64::from(u32::from_le_bytes(a.scales));
            (stored_signs(&a.signs), nibble_scales(scales))
        }
    };
    Decoded { signs, scales }
}

/// Step `h`'s eight IQ2 groups, group `g` read by `entry(g)`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn iq2_step(h: usize, entry: impl Fn(usize) -> u64) -> __m512i {
    let g = |j: usize| entry(IQ2_STEP_ENTRIES * h + j) as i64;
    _mm512_setr_epi64(g(0), g(1), g(2), g(3), g(4), g(5), g(6), g(7))
}

/// Step `h`'s sixteen IQ3 entries, entry `g` read by `entry(g)`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn iq3_step(h: usize, entry: impl Fn(usize) -> u32) -> __m512i {
    let e = |j: usize| entry(IQ3_STEP_ENTRIES * h + j) as i32;
    _mm512_setr_epi32(
        e(0),
        e(1),
        e(2),
        e(3),
        e(4),
        e(5),
        e(6),
        e(7),
        e(8),
        e(9),
        e(10),
        e(11),
        e(12),
        e(13),
        e(14),
        e(15),
    )
}

/// Step `h`'s grid values: eight IQ2 groups or sixteen IQ3 entries (a macro, so that it
/// inlines into the step loop: as a function LLVM kept IQ3_S's 64 loads out of line).
macro_rules! grid_step {
    ($view:expr, $idx:expr, $h:expr) => {{
        match *$view {
            View::Iq2Xxs(a) => iq2_step($h, |g| table_load(&IQ2XXS_GRID, a.grid_index(g))),
            View::Iq2Xs(_) => {
                let w = $idx.words($h);
                iq2_step($h, |g| {
                    table_load(&IQ2XS_GRID, word_index(&w, g) % IQ2XS_GRID.len())
                })
            }
            View::Iq2S(_) => {
                let w = $idx.words($h);
                iq2_step($h, |g| {
                    table_load(&IQ2S_GRID, word_index(&w, g) % IQ2S_GRID.len())
                })
            }
            View::Iq3Xxs(a) => {
                let w = byte_words(&a.qs, IQ3_STEP_ENTRIES * $h);
                iq3_step($h, |g| {
                    let j = g % IQ3_STEP_ENTRIES;
                    let i =
                        (w[j / BYTES_PER_WORD] >> (u8::BITS as usize * (j % BYTES_PER_WORD))) as u8;
                    table_load(&IQ3XXS_GRID, usize::from(i))
                })
            }
            View::Iq3S(_) => {
                let w = $idx.iq3_words($h);
                iq3_step($h, |g| {
                    let j = g % IQ3_STEP_ENTRIES;
                    let i =
                        (w[j / INDICES_PER_WORD] >> (INDEX_BITS * (j % INDICES_PER_WORD))) as u16;
                    table_load(&IQ3S_GRID, usize::from(i) % IQ3S_GRID.len())
                })
            }
        }
    }};
}

/// Step `h`'s scales as i16, one a 128-bit lane of sixteen values: lane `L` takes scale group
/// `per_step·h + L·per_step/4` of `bytes` (its sixteen scale bytes in every lane).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn step_scales(bytes: __m512i, h: usize, per_step: usize) -> __m512i {
    let c = |l: usize| {
        let word = SHUFFLE_ZERO << 8 | (per_step * h + l * per_step / 4) as u16;
        (u32::from(word) << 16 | u32::from(word)) as i32
    };
    let (c0, c1, c2, c3) = (c(0), c(1), c(2), c(3));
    let ctrl = _mm512_setr_epi32(
        c0, c0, c0, c0, c1, c1, c1, c1, c2, c2, c2, c2, c3, c3, c3, c3,
    );
    _mm512_shuffle_epi8(bytes, ctrl)
}

/// One super-block's eight lanes: per step the two runs' grid values against their signed
/// activations, summed into the 256-bit kernel's lanes.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
pub(super) fn grid_lanes<B: WideGrid>(a: &B, b: &BlockQ8K) -> __m256i {
    let view = a.view();
    let mut idx = Indices([0; MAX_ENTRIES]);
    let d = decode(&view, |part, v| idx.store(part, v));
    let mut acc = _mm512_setzero_si512();
    for h in 0..STEPS {
        let v = grid_step!(&view, idx, h);
        acc = step_dot::<B>(acc, v, b, &d, h);
    }
    halves(acc)
}

/// `acc` plus step `h`'s grid values `v` against the token's activations signed by the step's
/// sign bits, times their scales.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
pub(super) fn step_dot<B: IqGrid>(
    acc: __m512i,
    v: __m512i,
    b: &BlockQ8K,
    d: &Decoded,
    h: usize,
) -> __m512i {
    let zero = _mm512_setzero_si512();
    let scales = _mm512_broadcast_i32x4(d.scales);
    // SAFETY: `b.qs` holds 256 bytes; the step's 64 start at STEP·h ≤ 192.
    let q8 = unsafe { _mm512_loadu_si512(b.qs[STEP * h..].as_ptr().cast()) };
    let q8 = _mm512_mask_sub_epi8(q8, d.signs[h], zero, q8);
    let ls = step_scales(scales, h, STEP / B::SCALE_GROUP);
    _mm512_dpwssd_epi32(acc, _mm512_maddubs_epi16(v, q8), ls)
}

/// The sum of the two 256-bit halves' lanes: run 2h's with run 2h + 1's.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
pub(super) fn halves(acc: __m512i) -> __m256i {
    _mm256_add_epi32(
        _mm512_castsi512_si256(acc),
        _mm512_extracti64x4_epi64::<1>(acc),
    )
}

/// One row's dot product with one token (the table's `dot`).
pub(super) fn grid_dot<B: WideGrid>(x: &[B], y: &[BlockQ8K]) -> f32 {
    use super::avx512_kquant::{iq_grid_rows, vbmi_detected};
    let mut o = [[0f32; 1]; 1];
    if vbmi_detected() {
        iq_grid_rows::<B, true, 1, 1>(&[x], &[y], &mut o);
    } else {
        iq_grid_rows::<B, false, 1, 1>(&[x], &[y], &mut o);
    }
    o[0][0]
}

/// The tile of an IQ grid type: `vec_dot`'s order ([`Variant::Dot`]) here, in passes of rows
/// and tokens; the other variants (the tiled matmul's panels) by `rest`.
pub(super) fn grid_tile<B: WideGrid>(
    rows: &[&[u8]],
    acts: &[ActRow],
    variant: Variant,
    out: &mut [f32],
    rest: TileDot,
) -> bool {
    if variant != Variant::Dot {
        return rest(rows, acts, variant, out);
    }
    if super::avx512_kquant::vbmi_detected() {
        grid_passes::<B, true>(rows, acts, out);
    } else {
        grid_passes::<B, false>(rows, acts, out);
    }
    true
}

/// `vec_dot`'s order in passes of rows and tokens (`VBMI`: the grid values looked up in
/// vectors, `avx512_iq_vbmi`).
pub(super) fn grid_passes<B: WideGrid, const VBMI: bool>(
    rows: &[&[u8]],
    acts: &[ActRow],
    out: &mut [f32],
) {
    use super::avx512_kquant::iq_grid_rows;
    super::passes::drive::<B, _, PASS_ROWS, PASS_TOKENS>(
        rows,
        acts,
        entries::q8_k,
        out,
        0,
        (
            iq_grid_rows::<B, VBMI, PASS_ROWS, PASS_TOKENS>,
            iq_grid_rows::<B, VBMI, PASS_ROWS, 1>,
            iq_grid_rows::<B, VBMI, 1, PASS_TOKENS>,
            iq_grid_rows::<B, VBMI, 1, 1>,
        ),
    );
}
