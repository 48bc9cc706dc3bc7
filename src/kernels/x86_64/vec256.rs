//! What both x86-64 tiers build on, in 256-bit vectors (AVX2, FMA and F16C, which the AVX-512
//! tier's CPUs have too): nibble unpacking, f16 scale conversions, horizontal sums, the lanes of
//! a tile's outputs, and the transposes that put rows in lanes. Nothing here is a kernel; a
//! tier's kernels (`avx2.rs`, `avx512.rs`) and the kernels written once over both
//! (`legacy_tiles.rs`, `k*_kernels.rs`) call these, and this file calls none of them.

use std::arch::x86_64::*;

use crate::kernels::{Q8Row, TILE_ROWS};

/// 32 nibbles → 32 bytes: low nibbles in the low 128 bits, high nibbles in the high 128 bits.
#[target_feature(enable = "avx2,fma")]
#[inline]
pub(super) fn bytes_from_nibbles_32(qs: &[u8; 16]) -> __m256i {
    // SAFETY: qs is exactly 16 readable bytes; the load is unaligned.
    let tmp = unsafe { _mm_loadu_si128(qs.as_ptr().cast()) };
    let bytes = _mm256_set_m128i(_mm_srli_epi16(tmp, 4), tmp);
    _mm256_and_si256(bytes, _mm256_set1_epi8(0x0f))
}

// f16 block scales → f32 with the F16C instruction (exactly as the software conversion),
// broadcast to every lane and used as vectors. Converting a lone scalar instead lets the
// compiler insert the f16 into whatever register it likes (often the loop's accumulator), which
// chains every block's scale conversion behind the previous block's sum.

/// An f16 block scale → f32 in all eight lanes.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) fn scale8(d: [u8; 2]) -> __m256 {
    _mm256_cvtph_ps(_mm_set1_epi16(i16::from_le_bytes(d)))
}

#[target_feature(enable = "avx2,fma")]
#[inline]
pub(super) fn hsum_float_8(x: __m256) -> f32 {
    let mut res = _mm256_extractf128_ps(x, 1);
    res = _mm_add_ps(res, _mm256_castps256_ps128(x));
    res = _mm_add_ps(res, _mm_movehl_ps(res, res));
    res = _mm_add_ss(res, _mm_movehdup_ps(res));
    _mm_cvtss_f32(res)
}

/// GCC's `_mm512_reduce_add_ps` order over a 16-lane value held as (lo, hi) halves.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) fn reduce16(lo: __m256, hi: __m256) -> f32 {
    let t = _mm256_add_ps(lo, hi);
    let u = _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
    let v = _mm_add_ps(u, _mm_movehl_ps(u, u)); // (u0+u2, u1+u3)
    _mm_cvtss_f32(_mm_add_ss(v, _mm_movehdup_ps(v)))
}

/// 32 bytes of quantized values, read unaligned.
#[target_feature(enable = "avx2,fma")]
#[inline]
pub(super) fn load_qs(qs: &[i8; 32]) -> __m256i {
    // SAFETY: qs is exactly 32 readable bytes; the load is unaligned.
    unsafe { _mm256_loadu_si256(qs.as_ptr().cast()) }
}

/// `rows` cut to exactly `n` elements each, so indexing below `n` needs no bounds checks.
#[inline(always)]
pub(super) fn exact<'a, B, const K: usize>(rows: &[&'a [B]; K], n: usize) -> [&'a [B]; K] {
    std::array::from_fn(|k| &rows[k][..n])
}

/// Most outputs a tile may have: one per lane of an f32 vector, so a tile's scale products
/// (and its block-chain sums) travel as one vector, output `t*R + r` in lane `t*R + r`.
pub(super) const TILE_LANES: usize = 8;

/// `x[r]·y[t]` in lane `t*R + r`, for R + T f16 values converted to f32 by one instruction.
/// A product of two f16 values is exact in f32, so each lane is bit for bit the product the
/// single dot forms from the same two scales.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) fn scale_products<const R: usize, const T: usize>(
    x: [[u8; 2]; R],
    y: [[u8; 2]; T],
) -> __m256 {
    const { assert!(R + T <= TILE_LANES && R * T <= TILE_LANES) };
    // The eight f16 values packed in two general registers, then moved over whole: building
    // the vector by word inserts would merge into (and wait for) a stale register.
    let mut h = [0u64; 2];
    for (k, v) in x.iter().chain(&y).enumerate() {
        h[k / 4] |= u64::from(u16::from_le_bytes(*v)) << (16 * (k % 4));
    }
    let f = _mm256_cvtph_ps(_mm_set_epi64x(h[1] as i64, h[0] as i64));
    let xi: [i32; TILE_LANES] = std::array::from_fn(|o| (o % R) as i32);
    let yi: [i32; TILE_LANES] = std::array::from_fn(|o| (R + (o / R).min(T - 1)) as i32);
    // SAFETY: xi and yi are 8 i32s each; unaligned loads.
    let (xi, yi) = unsafe {
        (
            _mm256_loadu_si256(xi.as_ptr().cast()),
            _mm256_loadu_si256(yi.as_ptr().cast()),
        )
    };
    _mm256_mul_ps(
        _mm256_permutevar8x32_ps(f, xi),
        _mm256_permutevar8x32_ps(f, yi),
    )
}

/// f16 → f32 of one f16 value per row (lane r from row r), the values gathered in general
/// registers and moved over whole.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) fn row_scales(d: [[u8; 2]; TILE_ROWS]) -> __m256 {
    const { assert!(TILE_ROWS == TILE_LANES) };
    let mut h = [0u64; 2];
    for (k, v) in d.iter().enumerate() {
        h[k / 4] |= u64::from(u16::from_le_bytes(*v)) << (16 * (k % 4));
    }
    _mm256_cvtph_ps(_mm_set_epi64x(h[1] as i64, h[0] as i64))
}

/// The lanes of an f32 vector as an array.
#[target_feature(enable = "avx2,fma")]
#[inline]
pub(super) fn lanes(v: __m256) -> [f32; TILE_LANES] {
    let mut a = [0f32; TILE_LANES];
    // SAFETY: a is 8 writable f32s; the store is unaligned.
    unsafe { _mm256_storeu_ps(a.as_mut_ptr(), v) };
    a
}

/// The lanes of `v`, stored in `buf` and kept in memory (`black_box`): each lane is then
/// broadcast straight from its load (one micro-op, or none where AVX-512 folds the broadcast
/// into the instruction), not extracted by shuffles.
#[target_feature(enable = "avx2,fma")]
#[inline]
pub(super) fn spill(v: __m256, buf: &mut [f32; TILE_LANES]) -> &[f32; TILE_LANES] {
    // SAFETY: buf is 8 writable f32s; the store is unaligned.
    unsafe { _mm256_storeu_ps(buf.as_mut_ptr(), v) };
    std::hint::black_box(buf)
}

/// The totals of eight vectors of eight i32, in order, for partial sums of magnitude at most
/// 4096 (so every intermediate fits i16): two rounds of `packs_epi32` (exact, nothing
/// saturates) and `madd_epi16` by ones (adds neighbours), then the two 128-bit halves added.
#[target_feature(enable = "avx2,fma")]
#[inline]
pub(super) fn hsum_i32_8x8_small(v: [__m256i; TILE_LANES]) -> __m256i {
    let ones = _mm256_set1_epi16(1);
    // Per 128-bit half: [a0+a1, a2+a3, b0+b1, b2+b3] (low) and the same of lanes 4..8 (high).
    let pair = |a, b| _mm256_madd_epi16(_mm256_packs_epi32(a, b), ones);
    let (ab, cd, ef, gh) = (
        pair(v[0], v[1]),
        pair(v[2], v[3]),
        pair(v[4], v[5]),
        pair(v[6], v[7]),
    );
    // [a, b, c, d] over lanes 0..4 | the same over lanes 4..8.
    let (abcd, efgh) = (pair(ab, cd), pair(ef, gh));
    add_halves(abcd, efgh)
}

/// `[a.low + a.high | b.low + b.high]` of two vectors of eight i32 lanes, per lane: the
/// 128-bit halves of `a` summed into the low half, those of `b` into the high half.
#[target_feature(enable = "avx2,fma")]
#[inline]
pub(super) fn add_halves(a: __m256i, b: __m256i) -> __m256i {
    _mm256_add_epi32(
        _mm256_permute2x128_si256(a, b, LOW_HALVES),
        _mm256_permute2x128_si256(a, b, HIGH_HALVES),
    )
}

/// `_mm256_permute2x128_si256` control: (a's low half, b's low half).
const LOW_HALVES: i32 = 0x20;
/// `_mm256_permute2x128_si256` control: (a's high half, b's high half).
const HIGH_HALVES: i32 = 0x31;

/// The sixteen nibble bytes of eight rows' blocks, transposed into four vectors: vector k
/// holds bytes 4k..4k+4 of row r in lane r. Rows r and r + 4 share a 256-bit register (low and
/// high half), then a 4×4 transpose of 32-bit groups within each half ([`transpose4_epi32`]).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) fn transpose_qs(qs: [&[u8; 16]; TILE_ROWS]) -> [__m256i; 4] {
    // SAFETY: every qs is exactly 16 readable bytes; the loads are unaligned.
    let v: [__m256i; 4] = std::array::from_fn(|r| unsafe {
        _mm256_loadu2_m128i(qs[r + 4].as_ptr().cast(), qs[r].as_ptr().cast())
    });
    transpose4_epi32(v)
}

/// Four bytes of `y` from byte `at`, as one i32 for a broadcast.
#[inline(always)]
pub(super) fn group(y: &[i8; 32], at: usize) -> i32 {
    i32::from_le_bytes([
        y[at] as u8,
        y[at + 1] as u8,
        y[at + 2] as u8,
        y[at + 3] as u8,
    ])
}

/// Block `i` of an activation row: its quants, their sum and its scale as f32.
///
/// # Safety
/// `i` must be below the length of every slice of `a`.
#[inline(always)]
pub(super) unsafe fn q8_block(a: &Q8Row, i: usize) -> (&[i8; 32], i32, f32) {
    // SAFETY: i is in bounds of every slice (the caller's obligation).
    unsafe {
        (
            &a.blocks.get_unchecked(i).qs,
            *a.sums.get_unchecked(i),
            *a.scales.get_unchecked(i),
        )
    }
}

/// The offset that makes a Q4_0 nibble signed (`q − 8`).
pub(super) const Q4_0_OFFSET: i8 = 8;

/// A 4×4 transpose of 32-bit groups within each 128-bit lane of four vectors, written once for
/// every width: `$name` over `$v`, the width's vector, with its unpack instructions (32-bit
/// groups low and high, 64-bit halves low and high). Vector k of the result holds group k of
/// each input, input j in group j of every 128-bit lane.
macro_rules! transpose4 {
    ($(#[$m:meta])* $vis:vis fn $name:ident($v:ty) = $feat:literal:
        $lo32:ident, $hi32:ident, $lo64:ident, $hi64:ident) => {
        $(#[$m])*
        #[target_feature(enable = $feat)]
        #[inline]
        $vis fn $name(v: [$v; 4]) -> [$v; 4] {
            let (t0, t1) = ($lo32(v[0], v[1]), $hi32(v[0], v[1]));
            let (t2, t3) = ($lo32(v[2], v[3]), $hi32(v[2], v[3]));
            [$lo64(t0, t2), $hi64(t0, t2), $lo64(t1, t3), $hi64(t1, t3)]
        }
    };
}
pub(super) use transpose4;

transpose4! {
    /// [`transpose4`] of 256-bit vectors (two 128-bit lanes, transposed side by side).
    pub(super) fn transpose4_epi32(__m256i) = "avx2,fma":
        _mm256_unpacklo_epi32, _mm256_unpackhi_epi32, _mm256_unpacklo_epi64, _mm256_unpackhi_epi64
}
