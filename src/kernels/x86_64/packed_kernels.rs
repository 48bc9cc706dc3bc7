//! What both x86 tiers' kernels over packed copies (`kernels::pack`: sixteen rows' blocks
//! interleaved four bytes at a time, row r's bytes in lane r of every 64-byte word) share: the
//! layouts' word offsets, the prefetch, the argument checks of the single-token kernels and of
//! their multi-token passes, and the helpers written once as a macro ([`packed_helpers`]) that
//! each tier expands over its vector width (`avx2_packed.rs`: 256 bits, a step read as two
//! halves of eight rows; `avx512_packed.rs`: 512 bits, the sixteen rows at once).
//!
//! The width a tier expands the helpers over is its module `w`: the integer and float vector
//! types `I` and `F`, `WIDTH` (f32 lanes of `F`), the instructions the helpers use under short
//! names (`and`, `or`, `set1_32`, `slli32`, `srl32`, `fmadd_ps`, …) and one primitive of its
//! own, `dot_i16_acc(acc, a, b)`: `acc + Σ2 a·b` per i32 lane of i16 pairs (`vpdpwssd` where
//! VNNI has it, `madd` and an add on AVX2). A third tier (NEON) would define the same names.

use std::arch::x86_64::*;

use crate::kernels::blocks::{BlockIq4Xs, BlockQ5K, BlockQ6K, BlockQ8K, K_SCALE_SIZE, QK_K};
use crate::kernels::entries::{q8_k, Variant};
use crate::kernels::pack::PACK_ROWS;
use crate::kernels::{ActRow, Layout};

/// Sub-blocks of 32 elements in a super-block.
pub(super) const SUBS: usize = 8;
/// The most sub-blocks a super-block has (Q6_K's sixteen of 16 elements).
pub(super) const MAX_SUBS: usize = 16;
/// Pairs of sub-blocks (64 elements, 32 bytes of nibbles per row) in a super-block.
pub(super) const PAIRS: usize = SUBS / 2;
/// Four-byte groups of one pair's 32 nibble bytes: one 64-byte packed word each.
pub(super) const PAIR_WORDS: usize = 8;
/// Bytes each row gives to one packed word: one i32 lane.
pub(super) const GROUP: usize = 4;
/// Four-element groups of a super-block.
pub(super) const K_GROUPS: usize = QK_K / GROUP;
/// Elements of a sub-block, and of a pair.
pub(super) const SUB: usize = 32;
pub(super) const PAIR: usize = 2 * SUB;
/// Lanes of ggml's `vec_dot` accumulators (each a vector over the rows here).
pub(super) const LANES: usize = 8;

/// Bytes of one packed step (sixteen rows' blocks) of IQ4_XS, Q6_K and Q5_K.
pub(super) const XS_STEP: usize = std::mem::size_of::<BlockIq4Xs>() * PACK_ROWS;
pub(super) const Q6_STEP: usize = std::mem::size_of::<BlockQ6K>() * PACK_ROWS;
pub(super) const Q5_STEP: usize = std::mem::size_of::<BlockQ5K>() * PACK_ROWS;

/// Word `offset_of!(B, field) / GROUP` of a packed step of blocks `B` starts `field` (a word:
/// four bytes of each of the sixteen rows, as a row's block is cut into four-byte groups).
macro_rules! word_of {
    ($block:ident.$field:ident) => {
        std::mem::offset_of!($block, $field) / GROUP
    };
}
// The packed steps' words: IQ4_XS's nibbles (four words a sub-block: 16 bytes, low nibbles
// elements 0..16, high 16..32), Q6_K's `qh` and scales, Q5_K's scales, `qh` and `qs`.
pub(super) const XS_QS_WORD: usize = word_of!(BlockIq4Xs.qs);
pub(super) const XS_SUB_WORDS: usize = SUB / 2 / GROUP;
pub(super) const Q6_QH_WORD: usize = word_of!(BlockQ6K.qh);
pub(super) const Q6_SC_WORD: usize = word_of!(BlockQ6K.scales);
pub(super) const Q5_SC_WORD: usize = word_of!(BlockQ5K.scales);
pub(super) const Q5_QH_WORD: usize = word_of!(BlockQ5K.qh);
pub(super) const Q5_QS_WORD: usize = word_of!(BlockQ5K.qs);
const _: () = assert!(XS_QS_WORD == 2 && Q6_SC_WORD == 48 && Q5_QS_WORD == 12);

/// Elements of one Q6_K half block (`ql` 64 bytes, `qh` 32 bytes).
pub(super) const Q6_HALF: usize = 128;
/// IQ4_XS scales are 6-bit codes for −32..32; Q6_K codes are stored as `q + 32`.
pub(super) const XS_SCALE_BIAS: i32 = 32;
pub(super) const Q6_BIAS: i32 = 32;
/// A Q5_K code's fifth bit's weight.
pub(super) const FIFTH: i8 = 0x10;

/// The cache line.
pub(super) const LINE: usize = 64;

/// How far ahead of its reads a packed kernel requests lines into L1, in bytes. A packed
/// matrix is one stream (each group's steps, then the next group's), so one distance fits
/// every shape. Decode of the 1B Q4_K_M model on Zen 1 (8 alternating rounds, 1 and 2
/// threads): 4 KiB a little slower than 8–64 KiB, which read alike (BENCHMARKS.md, "K-quant
/// copies packed for AVX2").
const PREFETCH_AHEAD: usize = 16 << 10;

/// The prefetch of a packed kernel (AVX2 and AVX-512 tiers): the lines [`PREFETCH_AHEAD`]
/// bytes past each step's, requested a few at a time over the step's work rather than all at
/// its start. Requested all at once at the start of each step (as the file layout's kernels
/// do), one Zen 1 core streamed the packed Q4_K kernel at 3–4.5 GiB/s whatever the distance;
/// spread, at 8 GiB/s. On Zen 5 the AVX-512 kernels' decode of the 1B models gained 5–10% at one
/// thread (BENCHMARKS.md, "Packed kernels spread their prefetches on AVX-512 too").
#[derive(Clone, Copy)]
pub(super) struct StepPrefetch {
    ahead: *const u8,
    step: usize,
}

impl StepPrefetch {
    #[inline(always)]
    pub(super) fn new(group: &[u8], step: usize) -> StepPrefetch {
        StepPrefetch {
            ahead: group.as_ptr().wrapping_add(PREFETCH_AHEAD),
            step,
        }
    }

    /// Requests part `p` of `parts` of the lines due at step `i`.
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    pub(super) fn part(&self, i: usize, p: usize, parts: usize) {
        let lines = self.step.div_ceil(LINE);
        let base = self.ahead.wrapping_add(i * self.step);
        for l in lines * p / parts..lines * (p + 1) / parts {
            // `wrapping_add` and a prefetch never dereference: the address may be anything.
            _mm_prefetch::<_MM_HINT_T0>(base.wrapping_add(LINE * l).cast());
        }
    }
}

/// Steps ahead the prompt kernels' far prefetch reads.
const TILE_AHEAD: usize = 4;

/// The prompt kernels' prefetch before step `i` of `group` (`step_bytes` each) is unpacked:
/// the next step's lines into L1 and those [`TILE_AHEAD`] steps on into L2 (after the last,
/// the lines after the group in the copy: the next group's, or the next call's). A step is
/// the work of thousands of cycles, and its lines are read once per call.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) fn prefetch_steps(group: &[u8], i: usize, step_bytes: usize) {
    let base = group.as_ptr();
    let (near, far) = (
        base.wrapping_add((i + 1) * step_bytes),
        base.wrapping_add((i + TILE_AHEAD) * step_bytes),
    );
    for line in (0..step_bytes).step_by(LINE) {
        // `wrapping_add` and a prefetch never dereference: the address may be anything.
        _mm_prefetch::<_MM_HINT_T0>(near.wrapping_add(line).cast());
        _mm_prefetch::<_MM_HINT_T1>(far.wrapping_add(line).cast());
    }
}

/// The sixteen rows' 6-bit scales and mins of every sub-block j of one Q4_K super-block, byte
/// r for row r, from the twelve byte planes at `planes` (`dequantize::get_scale_min_k4`).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) fn scale_min_bytes(planes: &[u8]) -> ([__m128i; SUBS], [__m128i; SUBS]) {
    let planes = &planes[..K_SCALE_SIZE * PACK_ROWS];
    // SAFETY: plane p is the 16 bytes at 16p, inside `planes` (sliced above).
    let p: [__m128i; K_SCALE_SIZE] =
        std::array::from_fn(|i| unsafe { _mm_loadu_si128(planes.as_ptr().add(16 * i).cast()) });
    let six = _mm_set1_epi8(0x3f);
    let four = _mm_set1_epi8(0x0f);
    let two = _mm_set1_epi8(0x03);
    // The top two bits of each byte, moved to bits 4..6.
    let top = |v: __m128i| _mm_slli_epi16::<4>(_mm_and_si128(_mm_srli_epi16::<6>(v), two));
    let mut sc = [_mm_setzero_si128(); SUBS];
    let mut mn = sc;
    for j in 0..SUBS {
        (sc[j], mn[j]) = if j < 4 {
            (_mm_and_si128(p[j], six), _mm_and_si128(p[j + 4], six))
        } else {
            (
                _mm_or_si128(_mm_and_si128(p[j + 4], four), top(p[j - 4])),
                _mm_or_si128(
                    _mm_and_si128(_mm_srli_epi16::<4>(p[j + 4]), four),
                    top(p[j]),
                ),
            )
        };
    }
    (sc, mn)
}

/// The activation sums of sub-blocks 2k and 2k + 1 as the two i16 of one i32, for every k:
/// for sixteen-element sub-blocks (`S == MAX_SUBS`) two stored `bsums` as they lie, for
/// 32-element ones each the sum of two, cut back to i16. (The oracle adds those in 32 bits: the
/// same value, as a sum of two `bsums` of a quantized row stays within ±2·16·128, far inside
/// i16.) For 32-element sub-blocks only the first four are meant.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) fn bsum_pairs<const S: usize>(b: &BlockQ8K) -> [i32; MAX_SUBS / 2] {
    const { assert!(S == SUBS || S == MAX_SUBS) };
    // SAFETY: `bsums` is sixteen i16, 32 bytes; the load is unaligned.
    let bs = unsafe { _mm256_loadu_si256(b.bsums.as_ptr().cast()) };
    let v = if S == MAX_SUBS {
        bs
    } else {
        let sums = _mm256_madd_epi16(bs, _mm256_set1_epi16(1));
        // Eight i32 sums (exact, small) packed to i16, in order: packs works per 128-bit half.
        let p = _mm256_packs_epi32(sums, sums);
        _mm256_permute4x64_epi64::<0b1000>(p)
    };
    let mut out = [0i32; MAX_SUBS / 2];
    // SAFETY: `out` is eight i32, 32 bytes; the store is unaligned.
    unsafe { _mm256_storeu_si256(out.as_mut_ptr().cast(), v) };
    out
}

/// The largest magnitude of a Q8_K activation (−128).
const ACT_MAX: usize = 128;

/// Whether `run` groups' `maddubs` pairs add up in i16 without overflow: the pairs of codes
/// below 2^`bits` against activations of magnitude ≤ 128 stay within 2·(2^bits − 1)·128, and
/// `run` of them within `i16::MAX`.
pub(super) const fn i16_run_fits(run: usize, bits: u32) -> bool {
    run * 2 * ((1 << bits) - 1) * ACT_MAX <= i16::MAX as usize
}

/// Groups whose `maddubs` pairs add up in i16, per layout (IQ4_XS: |values| ≤ 127, 7 bits).
pub(super) const RUN_Q4_K: usize = 8; // 8·2·15·128 = 30720
pub(super) const RUN_Q5_K: usize = 4; // 4·2·31·128 = 31744
pub(super) const RUN_Q6_K: usize = 2; // 2·2·63·128 = 32256
pub(super) const RUN_IQ4_XS: usize = 1; // 2·128·127 = 32512

/// A packed single-token kernel's sixteen outputs, once `group` is checked to be `y.len()`
/// steps of `step` bytes of `ty`.
///
/// # Panics
/// If it is not, or `out` is not sixteen outputs.
pub(super) fn group_out<'a>(
    ty: &str,
    group: &[u8],
    step: usize,
    y: &[BlockQ8K],
    out: &'a mut [f32],
) -> &'a mut [f32; PACK_ROWS] {
    assert_eq!(
        group.len(),
        y.len() * step,
        "packed {ty} group of {} bytes for {}-block rows",
        group.len(),
        y.len()
    );
    out.try_into().expect("sixteen outputs")
}

/// Tokens a multi-token packed kernel takes per pass over its group (each token's sums stay
/// in registers, so each count is a kernel of its own: [`passes!`]).
const PASS_TOKENS: usize = 8;

/// A multi-token packed kernel for exactly as many tokens as its place in a [`passes!`]
/// table, the sizes checked by [`tokens_gemv`].
pub(super) type TokensPass = unsafe fn(&[u8], &[&[BlockQ8K]], &mut [f32]);

/// A multi-token pass's start: its `T` tokens' blocks, their count, and the prefetch of its
/// group of `step`-byte steps.
#[inline(always)]
pub(super) fn pass_of<'a, 'b, const T: usize>(
    group: &[u8],
    step: usize,
    ys: &'a [&'b [BlockQ8K]],
) -> (&'a [&'b [BlockQ8K]; T], usize, StepPrefetch) {
    let ys: &[&[BlockQ8K]; T] = ys.try_into().expect("T tokens");
    (ys, ys[0].len(), StepPrefetch::new(group, step))
}

/// The table of `$kernel::<T>` for T in 1..=[`PASS_TOKENS`] (index T − 1).
macro_rules! passes {
    ($kernel:ident) => {
        [
            $kernel::<1> as super::packed_kernels::TokensPass,
            $kernel::<2>,
            $kernel::<3>,
            $kernel::<4>,
            $kernel::<5>,
            $kernel::<6>,
            $kernel::<7>,
            $kernel::<8>,
        ]
    };
}
pub(super) use passes;

/// `out[t·16 + r]` for every token of `ys` against one packed group of `ty` (`step` bytes a
/// step), [`PASS_TOKENS`] tokens at a time through `passes` (the rest through the kernel for
/// their count).
///
/// # Panics
/// If `group` is not `ys[t].len()` steps for every token or `out` not sixteen outputs per
/// token.
pub(super) fn tokens_gemv(
    ty: &str,
    step: usize,
    group: &[u8],
    ys: &[&[BlockQ8K]],
    out: &mut [f32],
    passes: &[TokensPass; PASS_TOKENS],
) {
    assert_eq!(out.len(), PACK_ROWS * ys.len(), "gemv tokens: output size");
    for (y, o) in ys.iter().zip(out.chunks_exact_mut(PACK_ROWS)) {
        group_out(ty, group, step, y, o);
    }
    for (ys, out) in ys
        .chunks(PASS_TOKENS)
        .zip(out.chunks_mut(PASS_TOKENS * PACK_ROWS))
    {
        // SAFETY: the tables are only handed out with the table built after every feature
        // their kernels need was detected; the sizes were checked above; entry `ys.len() − 1`
        // takes exactly `ys.len()` tokens.
        unsafe { passes[ys.len() - 1](group, ys, out) }
    }
}

/// A tier's table of packed kernels, `packed(ty)`: for each type it packs (`GgmlType::$ty`), its
/// layout, the order its kernels sum in, the single-token kernel and the one over several
/// tokens where it has one; `$tile` is the tier's prompt kernel.
macro_rules! packed_table {
    (tile: $tile:path; $($ty:ident => ($layout:ident, $variant:ident, $gemv:ident, $tokens:expr),)*) => {
        /// The packed layout and kernel of `ty` on this tier, where it has one.
        pub(in crate::kernels) fn packed(
            ty: crate::kernels::GgmlType,
        ) -> Option<crate::kernels::entries::Packed> {
            use crate::kernels::entries::{Packed, Variant};
            use crate::kernels::{GgmlType, Layout};
            match ty {
                $(GgmlType::$ty => Some(Packed {
                    layout: Layout::$layout,
                    variant: Variant::$variant,
                    gemv: $gemv,
                    gemv_tokens: $tokens,
                    tile: Some($tile),
                }),)*
                _ => None,
            }
        }
    };
}
pub(super) use packed_table;

/// The passes over block `i` of every token of `ys`, `P` tokens at a time: `run(blocks, k,
/// t0)` for tokens `t0..t0 + k`, the first `k` of `blocks` theirs (the rest repeat the last, so
/// that a pass always computes `P`; their results are the caller's to drop).
#[inline(always)]
pub(super) fn token_passes<'a, const P: usize>(
    ys: &[&'a [BlockQ8K]],
    i: usize,
    mut run: impl FnMut(&[&'a BlockQ8K; P], usize, usize),
) {
    let mut t0 = 0;
    while t0 < ys.len() {
        let k = P.min(ys.len() - t0);
        let blocks: [&BlockQ8K; P] = std::array::from_fn(|t| &ys[t0 + t.min(k - 1)][i]);
        run(&blocks, k, t0);
        t0 += k;
    }
}

/// The safe wrapper of a packed single-token kernel `$impl` (`#[target_feature]`, taking the
/// checked sixteen outputs) for type `$ty` (`$step` bytes a step), in the order of `$oracle`;
/// with `tokens $name $pass`, the multi-token wrapper over the [`passes!`] of `$pass` too.
macro_rules! packed_gemv {
    ($name:ident = $impl:ident($ty:literal, $step:expr, $oracle:literal)) => {
        #[doc = concat!(
            "`out[r]` = row r of one packed group of sixteen ", $ty, " rows (`group`: `y.len()` ",
            "packed steps) · `y`, bit for bit as `", $oracle, "` of the row.\n\n",
            "# Panics\nIf `group` is not `y.len()` packed steps or `out` not sixteen outputs."
        )]
        pub(super) fn $name(group: &[u8], y: &[BlockQ8K], out: &mut [f32]) {
            let out = super::packed_kernels::group_out($ty, group, $step, y, out);
            // SAFETY: only reachable through the table built after the features of this
            // tier's kernels were detected.
            unsafe { $impl(group, y, out) }
        }
    };
    ($name:ident = $impl:ident($ty:literal, $step:expr, $oracle:literal), tokens $tname:ident = $pass:ident) => {
        packed_gemv!($name = $impl($ty, $step, $oracle));
        #[doc = concat!(
            "`out[t·16 + r]` = [`", stringify!($name), "`] of the group against `ys[t]`, for ",
            "every token, bit for bit ([`", stringify!($pass), "`]).\n\n",
            "# Panics\nIf `group` is not `ys[t].len()` packed steps for every token or `out` ",
            "not sixteen outputs per token."
        )]
        pub(super) fn $tname(group: &[u8], ys: &[&[BlockQ8K]], out: &mut [f32]) {
            let passes = super::packed_kernels::passes!($pass);
            super::packed_kernels::tokens_gemv($ty, $step, group, ys, out, &passes);
        }
    };
}
pub(super) use packed_gemv;

/// The helpers both tiers' packed kernels use, compiled with the target features `$feat` over
/// the width module `w` of the module that expands it (see the module documentation). Each reads the same bytes and forms the same integers and floats lane for
/// lane at either width.
macro_rules! packed_helpers {
    ($feat:literal) => {
        /// Activation bytes `e..e + 4` of `b` as one i32 broadcast to every lane (one load).
        #[target_feature(enable = $feat)]
        #[inline]
        pub(super) fn bcast4(b: &crate::kernels::blocks::BlockQ8K, e: usize) -> w::I {
            let q = &b.qs[e..e + super::packed_kernels::GROUP];
            // SAFETY: `q` is four readable bytes (sliced above); the read is unaligned.
            w::set1_32(unsafe { q.as_ptr().cast::<i32>().read_unaligned() })
        }

        /// `a`'s low i16 and `b`'s low i16 as the two halves of each i32 lane.
        #[target_feature(enable = $feat)]
        #[inline]
        pub(super) fn pair_i16(a: w::I, b: w::I) -> w::I {
            w::or(w::and(a, w::set1_32(0xffff)), w::slli32::<16>(b))
        }

        /// The rows' IQ4_XS sub-block `sub` scales as i32 lanes: `(low 4 bits of scales_l) |
        /// (2 bits of scales_h) << 4` − 32, from the step's first two words (`w0`: d and
        /// scales_h).
        #[target_feature(enable = $feat)]
        #[inline]
        pub(super) fn xs_scale(w0: w::I, w1: w::I, sub: usize) -> w::I {
            let lo4 = field(w1, 0, 4 * sub, 0xf);
            let hi2 = field(w0, 2, 2 * sub, 3);
            w::sub32(
                w::or(lo4, w::slli32::<4>(hi2)),
                w::set1_32(super::packed_kernels::XS_SCALE_BIAS),
            )
        }

        /// Bit `bit` of each byte of the `qh` word `h`, moved to bit 4 (a Q5_K code's fifth
        /// bit).
        #[target_feature(enable = $feat)]
        #[inline]
        pub(super) fn q5_fifth_bit(h: w::I, bit: usize) -> w::I {
            let v = match bit {
                0..4 => w::sll16(h, std::arch::x86_64::_mm_cvtsi32_si128((4 - bit) as i32)),
                _ => w::srl16(h, std::arch::x86_64::_mm_cvtsi32_si128((bit - 4) as i32)),
            };
            w::and(v, w::set1_8(super::packed_kernels::FIFTH))
        }

        /// Byte `k` of every i32 lane of `v`, shifted right by `s` and masked by `m`.
        #[target_feature(enable = $feat)]
        #[inline]
        fn field(v: w::I, k: usize, s: usize, m: i32) -> w::I {
            let shift = std::arch::x86_64::_mm_cvtsi32_si128((8 * k + s) as i32);
            w::and(w::srl32(v, shift), w::set1_32(m))
        }

        /// The rows' Q5_K scale and min of sub-block j (`dequantize::get_scale_min_k4` in every
        /// lane) from the three scale words.
        #[target_feature(enable = $feat)]
        #[inline]
        pub(super) fn q5_scale_min(w: &[w::I; 3], j: usize) -> (w::I, w::I) {
            const SIX: i32 = 0x3f;
            const FOUR: i32 = 0x0f;
            const TOP: i32 = 0x03;
            if j < 4 {
                (field(w[0], j, 0, SIX), field(w[1], j, 0, SIX))
            } else {
                let k = j - 4;
                let top = |v: w::I| w::slli32::<4>(field(v, k, 6, TOP));
                (
                    w::or(field(w[2], k, 0, FOUR), top(w[0])),
                    w::or(field(w[2], k, 4, FOUR), top(w[1])),
                )
            }
        }

        /// `hsum_float_8` of every row, the eight lanes held as vectors over the rows:
        /// `((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7))`, plus `extra` where given
        /// (Q5_K's `summs`), stored to the first `WIDTH` of `out`.
        #[target_feature(enable = $feat)]
        #[inline]
        pub(super) fn store_hsum(
            acc: &[w::F; super::packed_kernels::LANES],
            extra: Option<w::F>,
            out: &mut [f32],
        ) {
            let h = |a: usize, b: usize| w::add_ps(acc[a], acc[b]);
            let sum = w::add_ps(w::add_ps(h(0, 4), h(2, 6)), w::add_ps(h(1, 5), h(3, 7)));
            store(extra.map_or(sum, |e| w::add_ps(sum, e)), out);
        }

        /// `v` stored to the first `WIDTH` of `out`.
        #[target_feature(enable = $feat)]
        #[inline]
        pub(super) fn store(v: w::F, out: &mut [f32]) {
            let out = &mut out[..w::WIDTH];
            // SAFETY: `out` is `WIDTH` f32 (sliced above); the store is unaligned.
            unsafe { w::storeu_ps(out.as_mut_ptr(), v) };
        }

        /// A prompt kernel's chains of one token and rows: the tiled order's `acc[0]`, or the
        /// repacked gemm's `acc[0] − acc[1]` (`gemm`), stored to the first `WIDTH` of `out`.
        #[target_feature(enable = $feat)]
        #[inline]
        pub(super) fn store_chains(acc: &[w::F; 2], gemm: bool, out: &mut [f32]) {
            store(
                if gemm {
                    w::sub_ps(acc[0], acc[1])
                } else {
                    acc[0]
                },
                out,
            );
        }

        /// The repacked gemm's step for one pair of sub-blocks, token and rows: `acc[0] =
        /// fma(isum, d·d_y, acc[0])`, `acc[1] = fma(imin, dmin·d_y, acc[1])`, the pair's min
        /// term `imin` from the pair's mins `mn_pair` against the token's sum pair `bp`.
        #[target_feature(enable = $feat)]
        #[inline]
        pub(super) fn gemm_step(
            isum: w::I,
            (mn_pair, bp): (w::I, i32),
            (d, dmin, dy): (w::F, w::F, w::F),
            acc: &mut [w::F; 2],
        ) {
            let imin = w::dot_i16_acc(w::setzero_si(), mn_pair, w::set1_32(bp));
            acc[0] = w::fmadd_ps(w::cvtepi32_ps(isum), w::mul_ps(d, dy), acc[0]);
            acc[1] = w::fmadd_ps(w::cvtepi32_ps(imin), w::mul_ps(dmin, dy), acc[1]);
        }

        /// The tiled order's step for one super-block, token and rows, from the exact
        /// `s1 = Σ_s sc_s·Σ c·y`: the bias `bias·Σ_s sc_s·bsum_s` and (`mins`) the min terms
        /// `s2 = Σ_s m_s·bsum_s` from the scale and min pairs against the token's sum pairs
        /// `bp`, then `t = (s1 − bias term)·d; t = fma(−dmin, s2, t); acc = fma(t, y.d, acc)`.
        #[target_feature(enable = $feat)]
        #[inline]
        pub(super) fn tiled_step(
            s1: w::I,
            (sc_pairs, mn_pairs, bp): (&[w::I], &[w::I], &[i32]),
            (bias, mins): (i32, bool),
            (d, dmin, dy): (w::F, w::F, w::F),
            acc: &mut w::F,
        ) {
            let mut b_sum = w::setzero_si();
            let mut s2 = w::setzero_si();
            for (p, &b) in bp.iter().enumerate() {
                let b = w::set1_32(b);
                if bias != 0 {
                    b_sum = w::dot_i16_acc(b_sum, sc_pairs[p], b);
                }
                if mins {
                    s2 = w::dot_i16_acc(s2, mn_pairs[p], b);
                }
            }
            let s1 = w::sub32(s1, w::mullo32(b_sum, w::set1_32(bias)));
            let mut v = w::mul_ps(w::cvtepi32_ps(s1), d);
            if mins {
                let neg_dmin = w::sub_ps(w::setzero_ps(), dmin);
                v = w::fmadd_ps(neg_dmin, w::cvtepi32_ps(s2), v);
            }
            *acc = w::fmadd_ps(v, dy, *acc);
        }
    };
}
pub(super) use packed_helpers;

/// Runs a tier's packed prompt kernel over a tile call (see [`tile_call`]): `out[t·16g + 16j +
/// r]` = row r of packed group j of the `g` groups of sixteen rows in `groups` (each whole
/// steps of `layout`) against `acts[t]`, in `variant`'s order (`Batch`: the tiled matmul's; for
/// Q4_K `RepackedGemm`: the repacked gemm's), bit for bit as the row's single dot in that order.
/// `run(shape, gemm, groups, ys, out, place)` takes one group, or two where `pairs` (the last
/// alone where their count is odd), `shape` the tier's facts of the layout. Returns `false`,
/// having written nothing, for a layout (`shape` none) or variant the tier has no kernel for.
///
/// # Panics
/// As [`tile_call`] does.
pub(super) fn run_tile<S: Copy>(
    (shape, layout, groups): (Option<S>, Layout, &[u8]),
    acts: &[ActRow],
    variant: Variant,
    out: &mut [f32],
    pairs: bool,
    mut run: impl FnMut(S, bool, &[&[u8]], &[&[BlockQ8K]], &mut [f32], Place),
) -> bool {
    let Some(shape) = shape else {
        return false;
    };
    match tile_call(layout, groups, acts, variant, out) {
        TileCall::NoKernel => false,
        TileCall::NoTokens => true,
        TileCall::Run {
            gemm,
            ys,
            groups: count,
            group_bytes,
        } => {
            let ys = &ys[..acts.len()];
            let stride = count * PACK_ROWS;
            let mut j = 0;
            while j < count {
                let take = if pairs && count - j >= 2 { 2 } else { 1 };
                let g: [&[u8]; 2] = std::array::from_fn(|k| {
                    &groups[(j + k.min(take - 1)) * group_bytes..][..group_bytes]
                });
                let place = Place {
                    stride,
                    at: j * PACK_ROWS,
                };
                run(shape, gemm, &g[..take], ys, out, place);
                j += take;
            }
            true
        }
    }
}

/// A tier's packed prompt kernel, `tile_packed` (a table's `Packed::tile`): [`run_tile`] with
/// `$pairs` over the tier's `shape(layout)` and its `$run`.
macro_rules! packed_tile {
    ($(#[$doc:meta])* pairs: $pairs:literal, $run:expr) => {
        $(#[$doc])*
        pub(super) fn tile_packed(
            layout: Layout,
            groups: &[u8],
            acts: &[ActRow],
            variant: Variant,
            out: &mut [f32],
        ) -> bool {
            let call = (shape(layout), layout, groups);
            super::packed_kernels::run_tile(call, acts, variant, out, $pairs, $run)
        }
    };
}
pub(super) use packed_tile;

/// The most tokens one packed tile call takes (the forward pass's step).
pub(super) const MAX_TOKENS: usize = 64;

/// What a packed tile call is to do.
// `Run` carries the tokens' slices (1 KiB) by value, as the kernels kept them on the stack
// before; boxing them would allocate once per tile call on the prompt's hot path.
#[allow(clippy::large_enum_variant)]
enum TileCall<'a> {
    /// The variant has no packed prompt kernel for the layout: write nothing.
    NoKernel,
    /// No tokens: nothing to write.
    NoTokens,
    /// Run the repacked gemm's order (`gemm`, Q4_K only) or the tiled matmul's, over each
    /// token's activation blocks (`ys[..acts.len()]`), for `groups` packed groups of
    /// `group_bytes` each.
    Run {
        gemm: bool,
        ys: [&'a [BlockQ8K]; MAX_TOKENS],
        groups: usize,
        group_bytes: usize,
    },
}

/// Where a group's outputs go in a tile call's `out`: token t's sixteen at
/// `t * stride + at`.
#[derive(Clone, Copy)]
pub(super) struct Place {
    pub stride: usize,
    pub at: usize,
}

/// Checks a call of a tier's packed prompt kernel for a packed `layout` that tier has a
/// kernel for.
///
/// # Panics
/// If there are more than [`MAX_TOKENS`] tokens, or (with at least one token) `groups` is not
/// whole groups of one step of `layout` per activation block, or `out` is not sixteen outputs
/// per group and token.
fn tile_call<'a>(
    layout: Layout,
    groups: &[u8],
    acts: &'a [ActRow],
    variant: Variant,
    out: &[f32],
) -> TileCall<'a> {
    let gemm = match (layout, variant) {
        (Layout::Q4Kx16, Variant::RepackedGemm) => true,
        (_, Variant::Batch) => false,
        _ => return TileCall::NoKernel,
    };
    assert!(
        acts.len() <= MAX_TOKENS,
        "{} tokens in one packed tile",
        acts.len()
    );
    let Some(first) = acts.first() else {
        return TileCall::NoTokens;
    };
    let n = q8_k(first).len();
    let group_bytes = n * layout.step_bytes().unwrap_or(0);
    assert!(
        group_bytes > 0 && !groups.is_empty() && groups.len().is_multiple_of(group_bytes),
        "packed groups of {} bytes, not whole groups of {n} steps of {}",
        groups.len(),
        layout.name()
    );
    let count = groups.len() / group_bytes;
    assert_eq!(
        out.len(),
        count * PACK_ROWS * acts.len(),
        "packed tile output size mismatch"
    );
    let ys = std::array::from_fn(|t| &q8_k(&acts[t.min(acts.len() - 1)])[..n]);
    TileCall::Run {
        gemm,
        ys,
        groups: count,
        group_bytes,
    }
}
