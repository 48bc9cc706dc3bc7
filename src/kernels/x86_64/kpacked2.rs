//! The AVX2 tier's single-token kernels of copies packed in groups of sixteen rows
//! (`kernels::pack`): the same sums as the AVX-512 kernels of `kpacked.rs` and `kpacked_k.rs`,
//! over the same layouts but Q6_K's and Q5_K's (paired here, below), each sixteen-row step
//! read as two halves of eight rows (half h is bytes
//! `32h..32h + 32` of every 64-byte vector, rows `8h..8h + 8` in its eight i32 lanes), so that
//! every row stays in its own lane and nothing is reduced across lanes.
//!
//! Without VNNI, four-element groups are multiplied by `maddubs` (unsigned codes × signed
//! activations, pairs in i16) and widened by `madd`, which takes the sub-block's scale at the
//! same time (`madd(pairs, (sc, sc))` is `sc·Σ4` per lane, exact). Where the pairs of several
//! groups of one sub-block fall in the same lane, they add up in i16 first, so one `madd`
//! serves them all:
//! ```text
//! Q4_K (repacked gemv's order): per pair j of sub-blocks and half h
//!   p_lo = Σ_o maddubs(low nibbles of vector 8j + o, y[64j + 4o ..+ 4])      |p| ≤ 8·2·15·128
//!   p_hi = Σ_o maddubs(high nibbles,                 y[64j + 32 + 4o ..+ 4])
//!   isum += madd(p_lo, sc[2j]) + madd(p_hi, sc[2j + 1])
//!   imin  = Σ_j madd((m[j], m[j]), (bsums[2j], bsums[2j+1]))   (sub-block j's min, both sums)
//!   acc   = fma(isum, d·d_y, acc);  acc_min = fma(imin, dmin·d_y, acc_min);  out = acc − acc_min
//! ```
//! The integers are the oracle's exactly and each lane runs its row's float chain in the
//! oracle's order, so every output is `krepack::dot_q4_k_q8_k_repacked`'s bits.
//!
//! Q6_K's and Q5_K's `vec_dot` lanes meet only four elements of each sub-block, so no two of a
//! lane's groups share a scale. Their copies are packed paired on this tier
//! ([`Layout::Q6KPairs`], [`Layout::Q5KPairs`]): each row's four bytes hold two elements of
//! each of two sub-blocks, the two `maddubs` that cover a lane's four elements of both add in
//! i16, and one `madd` by the pair of scales widens them (a quarter fewer multiplies; Q6_K's
//! codes also decode in eleven operations per four vectors instead of seventeen).
//!
//! On a core that issues every 256-bit integer multiply as two halves through one pipe (Zen 1),
//! the count of `maddubs` and `madd` sets the pace: here a Q4_K super-block of one row costs
//! eight `maddubs` and one `madd` per sub-block pair's share, where the file layout's kernel
//! pays a `madd` per `maddubs`, a horizontal reduction per row and the scales' shuffles.
//!
//! The `#[target_feature]` functions are private; the table hands out the safe wrappers only
//! after AVX2, FMA and F16C were detected.

use std::arch::x86_64::*;

use super::kavx2::array_of;
use super::kavx2::iq4nl_table;
use super::kpacked::group_out;
use super::kpacked2_tile::i16_run_fits;
use crate::kernels::entries::{Packed, Variant};
use crate::kernels::kblocks::{BlockIq4Xs, BlockQ5K, BlockQ6K, BlockQ8K, K_SCALE_SIZE};
use crate::kernels::pack::{K_DMIN_AT, K_QS_AT, K_SCALES_AT, K_STEP, PACK_ROWS, Q6_K_D_AT};
use crate::kernels::{GgmlType, Layout};

/// The packed layout and kernel of `ty` on this tier, where it has one.
pub(in crate::kernels) fn packed(ty: GgmlType) -> Option<Packed> {
    match ty {
        GgmlType::Q4K => Some(Packed {
            layout: Layout::Q4Kx16,
            variant: Variant::Repacked,
            gemv: gemv16_q4_k_packed,
            gemv_tokens: None,
            tile: Some(super::kpacked2_tile::tile_packed),
        }),
        GgmlType::Q6K => Some(Packed {
            layout: Layout::Q6KPairs,
            variant: Variant::Dot,
            gemv: gemv16_q6_k_packed,
            gemv_tokens: None,
            tile: Some(super::kpacked2_tile::tile_packed),
        }),
        GgmlType::Q5K => Some(Packed {
            layout: Layout::Q5KPairs,
            variant: Variant::Dot,
            gemv: gemv16_q5_k_packed,
            gemv_tokens: None,
            tile: Some(super::kpacked2_tile::tile_packed),
        }),
        GgmlType::Iq4Xs => Some(Packed {
            layout: Layout::Iq4XsX16,
            variant: Variant::Dot,
            gemv: gemv16_iq4_xs_packed,
            gemv_tokens: None,
            tile: Some(super::kpacked2_tile::tile_packed),
        }),
        _ => None,
    }
}

/// Rows of one half of a packed group: the i32 lanes of a 256-bit vector.
pub(super) const HALF: usize = 8;
/// Halves of a packed group.
pub(super) const HALVES: usize = PACK_ROWS / HALF;
/// Bytes a half takes of each 64-byte packed vector.
pub(super) const HALF_BYTES: usize = 32;
/// Sub-blocks of 32 elements in a super-block.
pub(super) const SUBS: usize = 8;
/// Pairs of sub-blocks (64 elements, 32 nibble bytes per row) in a super-block.
const PAIRS: usize = SUBS / 2;
/// Four-byte groups of one pair's 32 nibble bytes: one packed vector each.
const GROUPS: usize = 8;
/// Bytes each row gives to one packed vector.
pub(super) const GROUP: usize = 4;
/// Elements of a sub-block, and of a pair.
pub(super) const SUB: usize = 32;
const PAIR: usize = 2 * SUB;

const _: () = assert!(HALVES == 2 && HALF * GROUP == HALF_BYTES);

/// Activation bytes `e..e + 4` of `b` as one i32 broadcast to every lane (one load).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) fn bcast4(b: &BlockQ8K, e: usize) -> __m256i {
    let q = &b.qs[e..e + GROUP];
    // SAFETY: `q` is four readable bytes (sliced above); the read is unaligned.
    _mm256_set1_epi32(unsafe { q.as_ptr().cast::<i32>().read_unaligned() })
}

/// `vpblendw` mask taking the odd (high) i16 of each i32 lane from the second operand.
pub(super) const BLEND_HIGH_I16: i32 = 0xaa;

/// Activation bytes `at..at + 2` and `at + 32..at + 34` of `b` as one i32 (those two pairs)
/// broadcast to every lane: what a paired code vector meets.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) fn pair16(b: &BlockQ8K, at: usize) -> __m256i {
    let q = |e: usize| u32::from(u16::from_le_bytes([b.qs[e] as u8, b.qs[e + 1] as u8]));
    _mm256_set1_epi32((q(at) | q(at + SUB) << 16) as i32)
}

/// The 32 bytes of `step` at `at`.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) fn load32(step: &[u8], at: usize) -> __m256i {
    let v = &step[at..at + HALF_BYTES];
    // SAFETY: 32 readable bytes (sliced above); the load is unaligned.
    unsafe { _mm256_loadu_si256(v.as_ptr().cast()) }
}

/// The 16 bytes of `step` at `at`.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn load16(step: &[u8], at: usize) -> __m128i {
    let v = &step[at..at + 16];
    // SAFETY: 16 readable bytes (sliced above); the load is unaligned.
    unsafe { _mm_loadu_si128(v.as_ptr().cast()) }
}

/// The eight f16 values of half `h` at `at` of `step` (sixteen, row r at `at + 2r`), as f32.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) fn half_f16(step: &[u8], at: usize, h: usize) -> __m256 {
    _mm256_cvtph_ps(load16(step, at + HALF_BYTES / 2 * h))
}

/// The sixteen rows' 6-bit scales and mins of every sub-block j of one super-block, byte r
/// for row r, from the twelve byte planes at `planes` (`kdequant::get_scale_min_k4`).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) fn scales_mins(planes: &[u8]) -> ([__m128i; SUBS], [__m128i; SUBS]) {
    let p: [__m128i; K_SCALE_SIZE] = std::array::from_fn(|i| load16(planes, 16 * i));
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

/// The cache line.
pub(super) const LINE: usize = 64;

/// A `vpshufb` control that puts byte `8h + r` of a 16-byte vector (broadcast to both 128-bit
/// halves) in both i16 halves of i32 lane r, zero-extended: half h's rows as `madd` scales.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) fn dup_rows(h: usize) -> __m256i {
    let ctl: [u8; 32] = std::array::from_fn(|i| {
        let r = i / GROUP;
        match i % 2 {
            0 => (HALF * h + r) as u8,
            // A set top bit zeroes the byte.
            _ => 0x80,
        }
    });
    load32(&ctl, 0)
}

/// `out[r]` = row r of one packed group of sixteen Q4_K rows (`group`: `y.len()` packed
/// super-block steps) · `y`, bit for bit as `krepack::dot_q4_k_q8_k_repacked` of the row.
///
/// # Panics
/// If `group` is not `y.len()` packed steps or `out` not sixteen outputs.
fn gemv16_q4_k_packed(group: &[u8], y: &[BlockQ8K], out: &mut [f32]) {
    let out = group_out("Q4_K", group, K_STEP, y, out);
    // SAFETY: only reachable through the table built after AVX2, FMA and F16C were detected.
    unsafe { gemv16_q4_k_impl(group, y, out) }
}

#[target_feature(enable = "avx2,fma,f16c")]
fn gemv16_q4_k_impl(group: &[u8], y: &[BlockQ8K], out: &mut [f32; PACK_ROWS]) {
    let pf = StepPrefetch::new(group, K_STEP);
    let m4 = _mm256_set1_epi8(0x0f);
    let dup = [dup_rows(0), dup_rows(1)];
    let zero = _mm256_setzero_si256();
    let mut acc = [_mm256_setzero_ps(); HALVES];
    let mut acc_min = acc;
    for (i, b) in y.iter().enumerate() {
        let step: &[u8; K_STEP] = group[i * K_STEP..][..K_STEP]
            .try_into()
            .expect("a whole step");
        let (sc, mn) = scales_mins(&step[K_SCALES_AT..K_QS_AT]);
        // Sub-block j's scales as `madd` factors of half h's rows.
        let scale =
            |h: usize, j: usize| _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(sc[j]), dup[h]);
        let qs = &step[K_QS_AT..];
        let mut isum = [zero; HALVES];
        for j in 0..PAIRS {
            // [half][low, high nibbles]: i16 pair sums of the pair's two sub-blocks.
            let mut p = [[zero; 2]; HALVES];
            for o in 0..GROUPS {
                let k = GROUPS * j + o;
                pf.part(i, k, PAIRS * GROUPS);
                let e = PAIR * j + GROUP * o;
                let (ya, yb) = (bcast4(b, e), bcast4(b, e + SUB));
                for (h, ph) in p.iter_mut().enumerate() {
                    let v = load32(qs, 64 * k + HALF_BYTES * h);
                    let lo = _mm256_and_si256(v, m4);
                    let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(v), m4);
                    ph[0] = _mm256_add_epi16(ph[0], _mm256_maddubs_epi16(lo, ya));
                    ph[1] = _mm256_add_epi16(ph[1], _mm256_maddubs_epi16(hi, yb));
                }
            }
            for (h, ph) in p.iter().enumerate() {
                let lo = _mm256_madd_epi16(ph[0], scale(h, 2 * j));
                let hi = _mm256_madd_epi16(ph[1], scale(h, 2 * j + 1));
                isum[h] = _mm256_add_epi32(isum[h], _mm256_add_epi32(lo, hi));
            }
        }
        // The min terms: each sub-block's min (in both i16 halves of its row's lane) against
        // its two activation sums, exact for any sums.
        let bs = |j: usize| {
            let s = |k: usize| i32::from(b.bsums[k] as u16);
            _mm256_set1_epi32(s(2 * j) | (s(2 * j + 1) << 16))
        };
        let dy = _mm256_set1_ps(b.d);
        for h in 0..HALVES {
            let mut imin = zero;
            for (j, m) in mn.iter().enumerate() {
                let m = _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(*m), dup[h]);
                imin = _mm256_add_epi32(imin, _mm256_madd_epi16(m, bs(j)));
            }
            let (d, dmin) = (half_f16(step, 0, h), half_f16(step, K_DMIN_AT, h));
            acc[h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[h]), _mm256_mul_ps(d, dy), acc[h]);
            acc_min[h] = _mm256_fmadd_ps(
                _mm256_cvtepi32_ps(imin),
                _mm256_mul_ps(dmin, dy),
                acc_min[h],
            );
        }
    }
    for h in 0..HALVES {
        let v = _mm256_sub_ps(acc[h], acc_min[h]);
        // SAFETY: `out` is sixteen f32; half h's eight are at 8h.
        unsafe { _mm256_storeu_ps(out[HALF * h..].as_mut_ptr(), v) };
    }
}

/// Lanes of ggml's `vec_dot` accumulators (each a vector over a half's eight rows here).
const LANES: usize = 8;
/// Bytes of one Q6_K block, and of one packed step of sixteen.
const Q6_BLOCK: usize = std::mem::size_of::<BlockQ6K>();
const Q6_STEP: usize = Q6_BLOCK * PACK_ROWS;
/// Word offsets of a Q6_K block's `qh` and scales (its `ql` starts it).
const Q6_QH_WORD: usize = 32;
pub(super) const Q6_SC_WORD: usize = 48;
/// Q6_K codes are stored as `q + 32`.
const Q6_BIAS_SHIFT: i32 = 5;
/// Elements of one Q6_K half block (`ql` 64 bytes, `qh` 32 bytes).
const Q6_HALF: usize = 128;

/// Half `h`'s 32 bytes of word `w` (the 64 bytes at 64w) of a packed step.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) fn word(step: &[u8], w: usize, h: usize) -> __m256i {
    load32(step, 64 * w + HALF_BYTES * h)
}

/// The four code vectors of one word triple of half `h` of a [`Layout::Q6KPairs`] step:
/// block half `j`, lane `l` (words X = 16j + l, Y = 16j + 8 + l, Z = 32 + 8j + l); byte pos
/// of vector v of a row's lane is element `128j + 32k + 4l + p` with k = 2(v >> 1) +
/// (pos >> 1), p = 2(v & 1) + (pos & 1) (`pack_pairs::q6_k_pair`).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) fn q6_codes(step: &[u8], h: usize, j: usize, l: usize) -> [__m256i; 4] {
    let six = _mm256_set1_epi8(0x3f);
    let low = _mm256_set1_epi8(0x0f);
    let top = _mm256_set1_epi8(0x30);
    let x = word(step, 16 * j + l, h);
    let y = word(step, 16 * j + 8 + l, h);
    let z = word(step, Q6_QH_WORD + 8 * j + l, h);
    // The 16-bit shifts carry bits of the next byte into each byte's top: masked off.
    let top_of = |w: __m256i| _mm256_and_si256(_mm256_srli_epi16::<2>(w), top);
    [
        _mm256_and_si256(x, six),
        _mm256_and_si256(y, six),
        _mm256_or_si256(_mm256_and_si256(z, low), top_of(x)),
        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16::<4>(z), low), top_of(y)),
    ]
}

/// A `vpshufb` control that puts, in every i32 lane, bytes `a` and `b` of that lane in the
/// high byte of its two i16 halves (so an arithmetic shift right by 8 sign-extends them).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) fn high_bytes(a: usize, b: usize) -> __m256i {
    let ctl: [u8; 32] = std::array::from_fn(|i| {
        let lane = (i % 16 / GROUP * GROUP) as u8;
        match i % GROUP {
            0 | 2 => 0x80,
            1 => lane + a as u8,
            _ => lane + b as u8,
        }
    });
    load32(&ctl, 0)
}

/// `hsum_float_8` of every row of a half, its eight lanes held as vectors over the rows:
/// `((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7))`, plus `extra` where given (Q5_K's
/// `summs`), stored to `out`.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn store_hsum(acc: &[__m256; LANES], extra: Option<__m256>, out: &mut [f32]) {
    let h = |a: usize, b: usize| _mm256_add_ps(acc[a], acc[b]);
    let sum = _mm256_add_ps(
        _mm256_add_ps(h(0, 4), h(2, 6)),
        _mm256_add_ps(h(1, 5), h(3, 7)),
    );
    let sum = extra.map_or(sum, |e| _mm256_add_ps(sum, e));
    let out = &mut out[..HALF];
    // SAFETY: `out` is eight f32 (sliced above).
    unsafe { _mm256_storeu_ps(out.as_mut_ptr(), sum) };
}

/// `out[r]` = row r of one packed group of sixteen Q6_K rows (`group`: `y.len()` steps of
/// [`Layout::Q6KPairs`]) · `y`, bit for bit as `kdot::dot_q6_k_q8_k` of the row.
///
/// ggml's lane l sums, per block, the elements `128j + 32k + 4l ..+ 4` (sub-block `8j + 2k +
/// l/4`) times their scales, less the bias `32·(sc[2l]·bsums[2l] + sc[2l+1]·bsums[2l+1])`. The
/// paired layout puts two of those sub-blocks' elements in each row's four bytes (elements
/// p, p + 1 of k = 0 and 1, or of k = 2 and 3), so the `maddubs` of the two code vectors
/// that hold a lane's eight elements of both add in i16 (|Σ| ≤ 4·63·128) and one `madd` by
/// the pair of scales widens them: per eight rows and block, 64 `maddubs`, 32 `madd` and 8 for
/// the bias, where the file's order needs a `madd` per `maddubs` (136 in all).
///
/// # Panics
/// If `group` is not `y.len()` packed steps or `out` not sixteen outputs.
fn gemv16_q6_k_packed(group: &[u8], y: &[BlockQ8K], out: &mut [f32]) {
    let out = group_out("Q6_K", group, Q6_STEP, y, out);
    // SAFETY: only reachable through the table built after AVX2, FMA and F16C were detected.
    unsafe { gemv16_q6_k_impl(group, y, out) }
}

/// Sub-block pairs a lane's codes of one block half form (k = 0, 1 and k = 2, 3).
pub(super) const Q6_PAIRS: usize = 2;
/// Halves of a Q6_K block (128 elements each), and halves of ggml's eight lanes (lanes 0..4
/// meet the even sub-blocks, 4..8 the odd).
pub(super) const Q6_BLOCK_HALVES: usize = 2;
const LANE_HALVES: usize = 2;
/// Paired layouts add two `maddubs` results in i16: the sum of four products of six-bit
/// (Q6_K) or five-bit (Q5_K) codes must fit.
const _: () = assert!(i16_run_fits(2, 6) && i16_run_fits(2, 5));

#[target_feature(enable = "avx2,fma,f16c")]
fn gemv16_q6_k_impl(group: &[u8], y: &[BlockQ8K], out: &mut [f32; PACK_ROWS]) {
    let pf = StepPrefetch::new(group, Q6_STEP);
    // Bytes (a, b) of each lane into its two i16 halves.
    let pair_of: [__m256i; LANE_HALVES] = array_of!(LANE_HALVES, |lh| high_bytes(lh, lh + 2));
    let bias_pair: [__m256i; 2] = array_of!(2, |p| high_bytes(2 * p, 2 * p + 1));
    let mut acc = [[_mm256_setzero_ps(); LANES]; HALVES];
    for (i, b) in y.iter().enumerate() {
        let step: &[u8; Q6_STEP] = group[i * Q6_STEP..][..Q6_STEP]
            .try_into()
            .expect("a whole step");
        let dy = _mm256_set1_ps(b.d);
        let bs = |k: usize| i32::from(b.bsums[k] as u16);
        // The activations in the paired order: code vector v of lane l (`q6_codes`) meets
        // bytes `at ..+ 2` and `at + 32 ..+ 2` of the block half's, at = 64(v >> 1) + 4l +
        // 2(v & 1): elements p, p + 1 of sub-block columns k = 2(v >> 1) and k + 1.
        let sc_words: [[__m256i; GROUP]; HALVES] =
            array_of!(HALVES, |h| array_of!(GROUP, |w| word(
                step,
                Q6_SC_WORD + w,
                h
            )));
        // Per block half j, half h, pair kk and lane half lh: the scales of sub-blocks
        // 8j + 4kk + lh and that + 2 (bytes lh and lh + 2 of scale word 2j + kk) as the two
        // i16 of each row's lane.
        let sc: [[[[__m256i; LANE_HALVES]; Q6_PAIRS]; HALVES]; Q6_BLOCK_HALVES] =
            array_of!(Q6_BLOCK_HALVES, |j| {
                array_of!(HALVES, |h| array_of!(Q6_PAIRS, |kk| array_of!(
                    LANE_HALVES,
                    |lh| {
                        let w = sc_words[h][2 * j + kk];
                        _mm256_srai_epi16::<8>(_mm256_shuffle_epi8(w, pair_of[lh]))
                    }
                )))
            });
        let d: [__m256; HALVES] =
            array_of!(HALVES, |h| _mm256_mul_ps(dy, half_f16(step, Q6_K_D_AT, h)));
        for l in 0..LANES {
            pf.part(i, l, LANES);
            let mut s = [_mm256_setzero_si256(); HALVES];
            for (j, sc) in sc.iter().enumerate() {
                let yv: [__m256i; 4] = array_of!(4, |v| pair16(
                    b,
                    Q6_HALF * j + 2 * SUB * (v >> 1) + GROUP * l + 2 * (v & 1)
                ));
                for (h, s) in s.iter_mut().enumerate() {
                    let q = q6_codes(step, h, j, l);
                    for kk in 0..Q6_PAIRS {
                        let t = _mm256_add_epi16(
                            _mm256_maddubs_epi16(q[2 * kk], yv[2 * kk]),
                            _mm256_maddubs_epi16(q[2 * kk + 1], yv[2 * kk + 1]),
                        );
                        *s = _mm256_add_epi32(
                            *s,
                            _mm256_madd_epi16(t, sc[h][kk][l / (LANES / LANE_HALVES)]),
                        );
                    }
                }
            }
            // Lane l's bias: 32·(bsums[2l]·sc[2l] + bsums[2l+1]·sc[2l+1]).
            let bsp = _mm256_set1_epi32(bs(2 * l) | (bs(2 * l + 1) << 16));
            for h in 0..HALVES {
                let scp = _mm256_srai_epi16::<8>(_mm256_shuffle_epi8(
                    sc_words[h][l / 2],
                    bias_pair[l % 2],
                ));
                let bias = _mm256_madd_epi16(scp, bsp);
                let sh = _mm256_sub_epi32(s[h], _mm256_slli_epi32::<{ Q6_BIAS_SHIFT }>(bias));
                acc[h][l] = _mm256_fmadd_ps(d[h], _mm256_cvtepi32_ps(sh), acc[h][l]);
            }
        }
    }
    for (h, acc) in acc.iter().enumerate() {
        store_hsum(acc, None, &mut out[HALF * h..]);
    }
}

/// Bytes of one Q5_K block, and of one packed step of sixteen.
const Q5_BLOCK: usize = std::mem::size_of::<BlockQ5K>();
const Q5_STEP: usize = Q5_BLOCK * PACK_ROWS;
/// Word offsets of a Q5_K block's scales, `qh` and `qs` (d and dmin are word 0).
pub(super) const Q5_SC_WORD: usize = 1;
pub(super) const Q5_QH_WORD: usize = 4;
pub(super) const Q5_QS_WORD: usize = 12;
/// The fifth bit's weight.
const FIFTH: i8 = 0x10;

/// Bit `bit` of each byte of the `qh` word `h`, moved to bit 4 (a Q5_K code's fifth bit).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) fn q5_fifth_bit(h: __m256i, bit: usize) -> __m256i {
    let v = match bit {
        0..4 => _mm256_sll_epi16(h, _mm_cvtsi32_si128((4 - bit) as i32)),
        _ => _mm256_srl_epi16(h, _mm_cvtsi32_si128((bit - 4) as i32)),
    };
    _mm256_and_si256(v, _mm256_set1_epi8(FIFTH))
}

/// Byte `k` of every i32 lane of `v`, shifted right by `s` and masked by `m`.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn field(v: __m256i, k: usize, s: usize, m: i32) -> __m256i {
    let shift = _mm_cvtsi32_si128((8 * k + s) as i32);
    _mm256_and_si256(_mm256_srl_epi32(v, shift), _mm256_set1_epi32(m))
}

/// A half's Q5_K scale and min of sub-block j (`kdequant::get_scale_min_k4` in every lane)
/// from its three scale words.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) fn q5_scale_min(w: &[__m256i; 3], j: usize) -> (__m256i, __m256i) {
    const SIX: i32 = 0x3f;
    const FOUR: i32 = 0x0f;
    const TOP: i32 = 0x03;
    if j < 4 {
        (field(w[0], j, 0, SIX), field(w[1], j, 0, SIX))
    } else {
        let k = j - 4;
        let top = |v: __m256i| _mm256_slli_epi32::<4>(field(v, k, 6, TOP));
        (
            _mm256_or_si256(field(w[2], k, 0, FOUR), top(w[0])),
            _mm256_or_si256(field(w[2], k, 4, FOUR), top(w[1])),
        )
    }
}

/// `out[r]` = row r of one packed group of sixteen Q5_K rows (`group`: `y.len()` steps of
/// [`Layout::Q5KPairs`]) · `y`, bit for bit as `kdot::dot_q5_k_q8_k` of the row.
///
/// ggml's lane l sums elements `32s + 4l ..+ 4` of each sub-block s times its scale; paired,
/// each row's low-nibble vector of sub-block pair j holds elements p = 0, 1 of both its
/// sub-blocks and the high-nibble vector p = 2, 3, so the two `maddubs` add in i16
/// (|Σ| ≤ 4·31·128) and one `madd` by the pair of scales widens them.
///
/// # Panics
/// If `group` is not `y.len()` packed steps or `out` not sixteen outputs.
fn gemv16_q5_k_packed(group: &[u8], y: &[BlockQ8K], out: &mut [f32]) {
    let out = group_out("Q5_K", group, Q5_STEP, y, out);
    // SAFETY: only reachable through the table built after AVX2, FMA and F16C were detected.
    unsafe { gemv16_q5_k_impl(group, y, out) }
}

#[target_feature(enable = "avx2,fma,f16c")]
fn gemv16_q5_k_impl(group: &[u8], y: &[BlockQ8K], out: &mut [f32; PACK_ROWS]) {
    let pf = StepPrefetch::new(group, Q5_STEP);
    let m4 = _mm256_set1_epi8(0x0f);
    // [lane][half]
    let mut acc = [[_mm256_setzero_ps(); HALVES]; LANES];
    let mut summs = [_mm256_setzero_ps(); HALVES];
    for (i, b) in y.iter().enumerate() {
        let step: &[u8; Q5_STEP] = group[i * Q5_STEP..][..Q5_STEP]
            .try_into()
            .expect("a whole step");
        // Σ_j m_j·s_j, s_j the i16 (wrapping) sum of bsums 2j and 2j+1: pairs of mins as i16
        // against pairs of sums.
        let s16 = |j: usize| b.bsums[2 * j].wrapping_add(b.bsums[2 * j + 1]) as u16;
        let spair: [__m256i; SUBS / 2] = array_of!(SUBS / 2, |k| {
            _mm256_set1_epi32(i32::from(s16(2 * k)) | (i32::from(s16(2 * k + 1)) << 16))
        });
        let mut sc = [[_mm256_setzero_si256(); HALVES]; SUBS / 2];
        let mut d = [_mm256_setzero_ps(); HALVES];
        for h in 0..HALVES {
            let w0 = word(step, 0, h);
            let sw: [__m256i; 3] = array_of!(3, |k| word(step, Q5_SC_WORD + k, h));
            let mut total = _mm256_setzero_si256();
            for k in 0..SUBS / 2 {
                let (s0, m0) = q5_scale_min(&sw, 2 * k);
                let (s1, m1) = q5_scale_min(&sw, 2 * k + 1);
                // The pair's scales (≤ 63) as the two i16 of the lane.
                sc[k][h] = _mm256_or_si256(s0, _mm256_slli_epi32::<16>(s1));
                let mpair = _mm256_or_si256(m0, _mm256_slli_epi32::<16>(m1));
                total = _mm256_add_epi32(total, _mm256_madd_epi16(mpair, spair[k]));
            }
            d[h] = _mm256_mul_ps(_mm256_set1_ps(b.d), f16_low(w0));
            let dmin = _mm256_mul_ps(_mm256_set1_ps(-b.d), f16_high(w0));
            summs[h] = _mm256_fmadd_ps(dmin, _mm256_cvtepi32_ps(total), summs[h]);
        }
        for (l, acc) in acc.iter_mut().enumerate() {
            pf.part(i, l, LANES);
            let hb: [__m256i; HALVES] = array_of!(HALVES, |h| word(step, Q5_QH_WORD + l, h));
            let mut s = [_mm256_setzero_si256(); HALVES];
            for (j, sc) in sc.iter().enumerate() {
                // The activations of the pair's two code vectors, shared by both halves: the
                // low nibbles meet elements p = 0, 1 of both sub-blocks, the high p = 2, 3.
                let e = PAIR * j + GROUP * l;
                let (y01, y23) = (pair16(b, e), pair16(b, e + 2));
                for (h, s) in s.iter_mut().enumerate() {
                    let q = word(step, Q5_QS_WORD + GROUPS * j + l, h);
                    let lo = _mm256_or_si256(_mm256_and_si256(q, m4), q5_fifth_bit(hb[h], 2 * j));
                    let hi = _mm256_or_si256(
                        _mm256_and_si256(_mm256_srli_epi16::<4>(q), m4),
                        q5_fifth_bit(hb[h], 2 * j + 1),
                    );
                    let t = _mm256_add_epi16(
                        _mm256_maddubs_epi16(lo, y01),
                        _mm256_maddubs_epi16(hi, y23),
                    );
                    *s = _mm256_add_epi32(*s, _mm256_madd_epi16(t, sc[h]));
                }
            }
            for h in 0..HALVES {
                acc[h] = _mm256_fmadd_ps(d[h], _mm256_cvtepi32_ps(s[h]), acc[h]);
            }
        }
    }
    for h in 0..HALVES {
        let lanes = array_of!(LANES, |l| acc[l][h]);
        store_hsum(&lanes, Some(summs[h]), &mut out[HALF * h..]);
    }
}

/// The low f16 of every i32 lane, as f32.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) fn f16_low(v: __m256i) -> __m256 {
    // The low i16 of each lane, packed into eight (the high halves cleared first, so the
    // unsigned saturation keeps them as they are), then in lane order again.
    let lo = _mm256_and_si256(v, _mm256_set1_epi32(0xffff));
    let p = _mm256_packus_epi32(lo, lo);
    let p = _mm256_permute4x64_epi64::<0b1000>(p);
    _mm256_cvtph_ps(_mm256_castsi256_si128(p))
}

/// The high f16 of every i32 lane, as f32.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn f16_high(v: __m256i) -> __m256 {
    f16_low(_mm256_srli_epi32::<16>(v))
}

/// Bytes of one IQ4_XS block, and of one packed step of sixteen.
const XS_BLOCK: usize = std::mem::size_of::<BlockIq4Xs>();
const XS_STEP: usize = XS_BLOCK * PACK_ROWS;
/// Words of an IQ4_XS block before its nibbles (d with `scales_h`, then `scales_l`).
pub(super) const XS_QS_WORD: usize = 2;
/// Words of one IQ4_XS sub-block's nibbles (16 bytes: low nibbles elements 0..16, high 16..32).
pub(super) const XS_SUB_WORDS: usize = 4;
/// IQ4_XS scales are 6-bit codes for −32..32.
const XS_SCALE_BIAS: i32 = 32;

/// A half's IQ4_XS sub-block `sub` scales as i32 lanes: `(low 4 bits of scales_l) | (2 bits of
/// scales_h) << 4` − 32, from the step's first two words (`w0`: d and scales_h).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) fn xs_scale(w0: __m256i, w1: __m256i, sub: usize) -> __m256i {
    let shift = |c: usize| _mm_cvtsi32_si128(c as i32);
    let lo4 = _mm256_and_si256(_mm256_srl_epi32(w1, shift(4 * sub)), _mm256_set1_epi32(0xf));
    let hi2 = _mm256_and_si256(
        _mm256_srl_epi32(w0, shift(16 + 2 * sub)),
        _mm256_set1_epi32(3),
    );
    let ls = _mm256_or_si256(lo4, _mm256_slli_epi32::<4>(hi2));
    _mm256_sub_epi32(ls, _mm256_set1_epi32(XS_SCALE_BIAS))
}

/// `out[r]` = row r of one packed group of sixteen IQ4_XS rows (`group`: `y.len()` packed
/// steps, word-interleaved) · `y`, bit for bit as `kdot::dot_iq4_xs_q8_k` of the row.
///
/// # Panics
/// If `group` is not `y.len()` packed steps or `out` not sixteen outputs.
fn gemv16_iq4_xs_packed(group: &[u8], y: &[BlockQ8K], out: &mut [f32]) {
    let out = group_out("IQ4_XS", group, XS_STEP, y, out);
    // SAFETY: only reachable through the table built after AVX2, FMA and F16C were detected.
    unsafe { gemv16_iq4_xs_impl(group, y, out) }
}

#[target_feature(enable = "avx2,fma,f16c")]
fn gemv16_iq4_xs_impl(group: &[u8], y: &[BlockQ8K], out: &mut [f32; PACK_ROWS]) {
    let pf = StepPrefetch::new(group, XS_STEP);
    let table = _mm256_broadcastsi128_si256(iq4nl_table());
    let low = _mm256_set1_epi8(0x0f);
    let mut acc = [[_mm256_setzero_ps(); LANES]; HALVES];
    for (i, b) in y.iter().enumerate() {
        let step: &[u8; XS_STEP] = group[i * XS_STEP..][..XS_STEP]
            .try_into()
            .expect("a whole step");
        let mut d = [_mm256_setzero_ps(); HALVES];
        // [sub-block][half]: each sub-block's scale as the same i16 in both halves of each
        // row's lane.
        let mut ls = [[_mm256_setzero_si256(); HALVES]; SUBS];
        for h in 0..HALVES {
            let (w0, w1) = (word(step, 0, h), word(step, 1, h));
            d[h] = _mm256_mul_ps(f16_low(w0), _mm256_set1_ps(b.d));
            for (sub, ls) in ls.iter_mut().enumerate() {
                let v = xs_scale(w0, w1, sub);
                ls[h] = _mm256_or_si256(
                    _mm256_and_si256(v, _mm256_set1_epi32(0xffff)),
                    _mm256_slli_epi32::<16>(v),
                );
            }
        }
        // Word q of each sub-block: its low nibbles go to lane q, its high ones to q + 4.
        for q in 0..XS_SUB_WORDS {
            pf.part(i, q, XS_SUB_WORDS);
            let mut s_lo = [_mm256_setzero_si256(); HALVES];
            let mut s_hi = s_lo;
            for (sub, ls) in ls.iter().enumerate() {
                // The activations of the two code vectors, shared by both halves.
                let e = SUB * sub + GROUP * q;
                let (ylo, yhi) = (bcast4(b, e), bcast4(b, e + SUB / 2));
                for h in 0..HALVES {
                    let v = word(step, XS_QS_WORD + XS_SUB_WORDS * sub + q, h);
                    let lo = _mm256_shuffle_epi8(table, _mm256_and_si256(v, low));
                    let hi = _mm256_shuffle_epi8(
                        table,
                        _mm256_and_si256(_mm256_srli_epi16::<4>(v), low),
                    );
                    s_lo[h] = _mm256_add_epi32(s_lo[h], signed_dot(lo, ylo, ls[h]));
                    s_hi[h] = _mm256_add_epi32(s_hi[h], signed_dot(hi, yhi, ls[h]));
                }
            }
            for h in 0..HALVES {
                let acc = &mut acc[h];
                acc[q] = _mm256_fmadd_ps(d[h], _mm256_cvtepi32_ps(s_lo[h]), acc[q]);
                let q4 = q + XS_SUB_WORDS;
                acc[q4] = _mm256_fmadd_ps(d[h], _mm256_cvtepi32_ps(s_hi[h]), acc[q4]);
            }
        }
    }
    for (h, acc) in acc.iter().enumerate() {
        store_hsum(acc, None, &mut out[HALF * h..]);
    }
}

/// `madd(maddubs(|v|, y with v's sign), scale)`: ggml's sign trick (`vpsignb`, −128 wrapping)
/// for signed values `v`, the pairs then scaled by the i16 pair `scale` of each lane.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn signed_dot(v: __m256i, y: __m256i, scale: __m256i) -> __m256i {
    let pairs = _mm256_maddubs_epi16(_mm256_sign_epi8(v, v), _mm256_sign_epi8(y, v));
    _mm256_madd_epi16(pairs, scale)
}
