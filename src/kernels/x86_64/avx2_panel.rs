//! The AVX2 tier's Q4_0 block-chain panel: [`PANEL_ROWS`] (16) rows of the file's layout
//! against many tokens (prompts, and the server's decode steps of several sequences), and the
//! pieces it shares with the packed groups' kernels (`kernels::pack`,
//! [`crate::kernels::pack::Layout::Q4_0x16`]): the single-token one here, the steps panel in
//! `avx2_steps.rs`.
//!
//! As in the AVX-512 panel, the block chain keeps one f32 per (row, token), so eight rows sit
//! side by side in the eight lanes of one vector (lane r = row r) and no sum is ever reduced
//! across lanes. The sixteen rows are two such halves. Per block and half, the rows' nibble
//! bytes are transposed once (or, packed, loaded as they are stored) and split into eight
//! vectors of four values per lane; each token's block is then eight four-byte broadcasts:
//! ```text
//! p[r]    = Σ_k maddubs(nibbles_k[r], y[4 values of k])   i16: |p| ≤ 16 · 15 · 128 = 30720
//! isum[r] = madd(p, 1)[r] − 8·Σy                          = Σ (q − 8)·y, exact in i32
//! acc[r]  = fma((f32) isum[r], d_w[r] · d_y, acc[r])       row r's single chain, bit for bit
//! ```
//! Without VNNI, `maddubs` forms pairs (within ±3840) and the pairs of all eight groups add up
//! in i16 before one `madd` widens them, so a token's block costs eight `maddubs`, seven adds
//! and one `madd` for eight rows, where the 2 × 4 tile pays per row a sign fix, a `maddubs`,
//! a `madd` and its share of a horizontal reduction.
//!
//! The kernels' `#[target_feature]` functions and their safe wrappers are private to this file;
//! the wrappers leave it only as function pointers from methods on the [`Avx2`] token, which
//! only [`Avx2::detect`] makes (the memchr model, fitted to a table of function pointers).

use std::arch::x86_64::*;

use super::entry_points::check_panel;
use super::prefetch::Prefetch;
use super::vec256::{group, q8_block, row_scales, transpose_qs, Q4_0_OFFSET};
use super::Avx2;
use crate::kernels::blocks::BlockQ4_0;
use crate::kernels::{
    PackedGemv, Panel, Q8Group, Q8Row, MAX_PANEL_TOKENS, PANEL_ROWS, PANEL_TOKENS, TILE_ROWS,
};

/// Eight-row halves of a panel's rows.
pub(super) const HALVES: usize = PANEL_ROWS / TILE_ROWS;
/// Tokens whose sums one inner pass keeps in registers, for both halves: four i16 sums, the
/// two halves' nibble vectors of one group and a broadcast, the other nibble vectors reloaded
/// from L1. Four tokens (eight sums) ran no faster (pp64, 1B Q4_0, two alternating rounds on
/// Zen 3) and spilled more.
pub(super) const PASS_TOKENS: usize = 2;
/// Groups of four nibble values in a block: the low and the high nibbles of four byte groups.
const NIBBLE_GROUPS: usize = 8;
/// Bytes of the scales at the start of a packed block step (sixteen f16 values).
const PACKED_SCALES: usize = 2 * PANEL_ROWS;
/// Bytes each half takes of a packed 64-byte vector (and, halved, of the scales).
const HALF_BYTES: usize = 32;

const _: () = assert!(HALVES == 2 && PANEL_TOKENS.is_multiple_of(PASS_TOKENS));

/// Where, in an activation block, the four values of nibble group `k` sit: the low nibbles of
/// bytes 4k..4k+4 are values 4k..4k+4, the high ones values 16 + 4k..16 + 4k + 4.
const fn y_offset(k: usize) -> usize {
    if k < 4 {
        4 * k
    } else {
        16 + 4 * (k - 4)
    }
}

/// The eight nibble vectors of a half's transposed bytes (vector k holds bytes 4k..4k+4 of
/// row r in lane r): the low nibbles of the four, then the high nibbles.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) fn nibble_groups(x: [__m256i; 4]) -> [__m256i; NIBBLE_GROUPS] {
    let low = _mm256_set1_epi8(0x0f);
    std::array::from_fn(|k| {
        if k < 4 {
            _mm256_and_si256(x[k], low)
        } else {
            _mm256_and_si256(_mm256_srli_epi16::<4>(x[k - 4]), low)
        }
    })
}

/// The exact block sums Σ (q − 8)·y of `H` halves of eight rows each (`q[h]`, lane r = row r)
/// against `T` tokens' blocks `y` with value sums `sum`: `[t][h]`. Each broadcast of four
/// activation values serves every half.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) fn block_sums<const H: usize, const T: usize>(
    q: &[[__m256i; NIBBLE_GROUPS]; H],
    y: [&[i8; 32]; T],
    sum: [i32; T],
) -> [[__m256i; H]; T] {
    let mut p = [[_mm256_setzero_si256(); H]; T];
    // Groups outer, tokens inner: the tokens' sums are independent chains.
    for k in 0..NIBBLE_GROUPS {
        for (pt, yt) in p.iter_mut().zip(y) {
            let b = _mm256_set1_epi32(group(yt, y_offset(k)));
            for (pth, qh) in pt.iter_mut().zip(q) {
                *pth = _mm256_add_epi16(*pth, _mm256_maddubs_epi16(qh[k], b));
            }
        }
    }
    let ones = _mm256_set1_epi16(1);
    std::array::from_fn(|t| {
        // −8·Σy: Σ (q − 8)·y = Σ q·y − 8·Σ y, exact in i32.
        let offset = _mm256_set1_epi32(-i32::from(Q4_0_OFFSET) * sum[t]);
        p[t].map(|pth| _mm256_add_epi32(_mm256_madd_epi16(pth, ones), offset))
    })
}

/// Block `i` of the [`PASS_TOKENS`] tokens `t0..` of a group: their quants, value sums and
/// f32 scales.
///
/// # Safety
/// `i` must be below the length of every slice of `g`, and `t0 + PASS_TOKENS` at most
/// [`PANEL_TOKENS`].
#[inline(always)]
#[allow(clippy::type_complexity)]
unsafe fn pass_blocks<'a>(
    g: &Q8Group<'a>,
    t0: usize,
    i: usize,
) -> (
    [&'a [i8; 32]; PASS_TOKENS],
    [i32; PASS_TOKENS],
    [f32; PASS_TOKENS],
) {
    // SAFETY: i is in bounds of every slice (the caller's obligation); t0 + t < PANEL_TOKENS.
    unsafe {
        (
            std::array::from_fn(|t| &g.blocks[t0 + t].get_unchecked(i).qs),
            std::array::from_fn(|t| *g.sums[t0 + t].get_unchecked(i)),
            std::array::from_fn(|t| *g.scales[t0 + t].get_unchecked(i)),
        )
    }
}

/// Half `h` (rows 8h..8h + 8) of block `i` of the file's rows: the nibble bytes transposed
/// ([`transpose_qs`]) and the eight rows' scales as f32. A function rather than a closure:
/// after unrelated changes LLVM left the closure a call inside the panel's block loop.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn file_half(w: &[&[BlockQ4_0]; PANEL_ROWS], i: usize, h: usize) -> ([__m256i; 4], __m256) {
    let rows: &[&[BlockQ4_0]; TILE_ROWS] = w[h * TILE_ROWS..(h + 1) * TILE_ROWS]
        .try_into()
        .expect("eight rows");
    (
        transpose_qs(rows.map(|r| &r[i].qs)),
        row_scales(rows.map(|r| r[i].d)),
    )
}

/// Half `h` of block step `i` of a packed group: the nibble bytes as [`transpose_qs`] gives
/// them (they are stored that way) and the eight rows' scales as f32.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) fn packed_half(w: &[BlockQ4_0], i: usize, h: usize) -> ([__m256i; 4], __m256) {
    let step = &w[i * PANEL_ROWS..(i + 1) * PANEL_ROWS];
    let base = step.as_ptr().cast::<u8>();
    debug_assert!(h < HALVES);
    // SAFETY: `step` is PANEL_ROWS blocks (288 bytes): 32 bytes of scales (half h's at 16h),
    // then four 64-byte vectors (half h's 32 bytes at 32h in each); every load is unaligned
    // and inside it.
    unsafe {
        let dw = _mm256_cvtph_ps(_mm_loadu_si128(base.add(h * HALF_BYTES / 2).cast()));
        let x = std::array::from_fn(|k| {
            _mm256_loadu_si256(base.add(PACKED_SCALES + 64 * k + h * HALF_BYTES).cast())
        });
        (x, dw)
    }
}

/// The panel (see the module documentation) over [`PANEL_ROWS`] rows and the first `tokens`
/// tokens of the groups `a` (at most [`MAX_PANEL_TOKENS`]; a last group may be padded):
/// `out[t * PANEL_ROWS + r]`.
/// Blocks outer, then the two halves, then tokens: each block of the sixteen rows is unpacked
/// once for every token, the tokens' accumulators kept in memory.
#[target_feature(enable = "avx2,fma,f16c")]
fn panel_impl(w: &[&[BlockQ4_0]; PANEL_ROWS], a: &[Q8Group], tokens: usize, out: &mut [f32]) {
    let n = check_panel(w, a, tokens, out);
    let mut acc = [[_mm256_setzero_ps(); HALVES]; MAX_PANEL_TOKENS];
    for i in 0..n {
        let halves: [([__m256i; 4], __m256); HALVES] = [file_half(w, i, 0), file_half(w, i, 1)];
        let q = halves.map(|(x, _)| nibble_groups(x));
        let dw = halves.map(|(_, d)| d);
        for (g, ag) in a.iter().enumerate() {
            // A padded last group's passes past `tokens` are skipped.
            let real = (tokens - g * PANEL_TOKENS).min(PANEL_TOKENS);
            for t0 in (0..real).step_by(PASS_TOKENS) {
                // SAFETY: every slice of every group has exactly n elements (asserted above),
                // and i < n.
                let (y, sum, dy) = unsafe { pass_blocks(ag, t0, i) };
                let isum = block_sums(&q, y, sum);
                for (t, isum_t) in isum.iter().enumerate() {
                    let dy = _mm256_set1_ps(dy[t]);
                    let acc_t = &mut acc[g * PANEL_TOKENS + t0 + t];
                    for h in 0..HALVES {
                        let d = _mm256_mul_ps(dw[h], dy);
                        acc_t[h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum_t[h]), d, acc_t[h]);
                    }
                }
            }
        }
    }
    for (o, acc_t) in out.chunks_exact_mut(PANEL_ROWS).zip(&acc) {
        for (oh, a) in o.chunks_exact_mut(TILE_ROWS).zip(acc_t) {
            // SAFETY: oh is 8 writable f32s; the store is unaligned.
            unsafe { _mm256_storeu_ps(oh.as_mut_ptr(), *a) };
        }
    }
}

/// Single-token Q4_0·Q8_0 (block-chain order) over one packed group of [`PANEL_ROWS`] rows
/// (decode's path for a packed copy): the panel with one token, the two halves' chains side
/// by side, with no transpose (the bytes are stored transposed) and one load for eight rows'
/// scales.
#[target_feature(enable = "avx2,fma,f16c")]
fn gemv16_packed_impl(w: &[BlockQ4_0], a: &Q8Row, out: &mut [f32; PANEL_ROWS]) {
    let n = a.blocks.len();
    assert!(
        n > 0 && w.len() == PANEL_ROWS * n && a.sums.len() == n && a.scales.len() == n,
        "gemv16: {} weight blocks for {n}-block rows",
        w.len()
    );
    // The group's bytes read as sixteen consecutive rows of n blocks: the prefetch then runs
    // ahead into the next groups as it does over a matrix's rows.
    let rows: [&[BlockQ4_0]; PANEL_ROWS] = std::array::from_fn(|r| &w[r * n..(r + 1) * n]);
    let pf = Prefetch::new(&rows);
    let mut acc = [_mm256_setzero_ps(); HALVES];
    for i in 0..n {
        pf.at(i);
        // SAFETY: every slice of `a` has exactly n elements (asserted above), and i < n.
        let (y, sum, dy) = unsafe { q8_block(a, i) };
        let halves: [([__m256i; 4], __m256); HALVES] =
            std::array::from_fn(|h| packed_half(w, i, h));
        let [isum] = block_sums(&halves.map(|(x, _)| nibble_groups(x)), [y], [sum]);
        let dy = _mm256_set1_ps(dy);
        for h in 0..HALVES {
            let d = _mm256_mul_ps(halves[h].1, dy);
            acc[h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[h]), d, acc[h]);
        }
    }
    for (o, a) in out.chunks_exact_mut(TILE_ROWS).zip(acc) {
        // SAFETY: o is 8 writable f32s; the store is unaligned.
        unsafe { _mm256_storeu_ps(o.as_mut_ptr(), a) };
    }
}

/// This file's kernels, handed out only to a holder of the [`Avx2`] token: the table gets them
/// from here, so no path reaches them without the features' detection.
impl Avx2 {
    /// The Q4_0 block-chain panel ([`panel_impl`]).
    pub(in crate::kernels) fn panel_q4_0_q8_0_chain(self) -> Panel {
        panel_q4_0_q8_0_chain
    }

    /// The single-token panel over one packed Q4_0 group ([`gemv16_packed_impl`]).
    pub(in crate::kernels) fn gemv16_q4_0_q8_0_packed(self) -> PackedGemv {
        gemv16_q4_0_q8_0_packed
    }
}

fn panel_q4_0_q8_0_chain(
    w: &[&[BlockQ4_0]; PANEL_ROWS],
    a: &[Q8Group],
    tokens: usize,
    out: &mut [f32],
) {
    // SAFETY: handed out only by `Avx2::panel_q4_0_q8_0_chain`, whose token exists only once
    // AVX2, FMA and F16C were detected (the function is private and called nowhere else).
    unsafe { panel_impl(w, a, tokens, out) }
}

/// [`gemv16_packed_impl`]: `out[r] = dot(row r, a)` over one packed group.
fn gemv16_q4_0_q8_0_packed(w: &[BlockQ4_0], a: &Q8Row, out: &mut [f32]) {
    let out = out.try_into().expect("sixteen outputs");
    // SAFETY: handed out only by `Avx2::gemv16_q4_0_q8_0_packed`, whose token exists only once
    // AVX2, FMA and F16C were detected (the function is private and called nowhere else).
    unsafe { gemv16_packed_impl(w, a, out) }
}
