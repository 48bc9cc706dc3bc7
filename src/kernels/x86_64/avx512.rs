//! AVX-512 tier (F, BW, VL and VNNI): the tiled matmul kernels (batch tiles and single-token
//! passes, on 256-bit vectors), whose four-product integer sums `vpdpbusd` forms in one
//! instruction (AVX2 needs `maddubs` + `madd`), with sixteen more vector registers; the prompt
//! kernels on 512-bit vectors (the Q4_0 block-chain panel, sixteen rows in the lanes, which
//! also runs IQ4_NL through a value table; the wide
//! Q8_0 tile, two outputs per vector); and SiLU and softmax sixteen lanes at a time. The
//! single dots and the other kernels are the AVX2 tier's: this tier only exists on CPUs that
//! also have AVX2, FMA and F16C.
//!
//! Same float operations as the scalar oracle (see `scalar.rs`), so results are bit-identical
//! to it. The integer sums are exact: `vpdpbusd` multiplies u8 by i8 and adds without
//! saturating, so signed weights are offset into u8 and the offset's share, a multiple of the
//! activation's own four-sums, is taken out through the accumulator input.
//!
//! The `#[target_feature]` functions are private; the safe wrappers are only handed out by
//! [`super::super::Kernels::for_tier`] after `is_x86_feature_detected!` confirmed every feature.
//!
//! The AVX-512 intrinsics are stable since Rust 1.89, the manifest's `rust-version`.

use std::arch::x86_64::*;

use super::entry_points::check_panel;
use super::entry_points::{compiled_for, entry_points};
use super::prefetch::Prefetch;
use super::vec256::{
    bytes_from_nibbles_32, exact, group, hsum_float_8, hsum_i32_8x8_small, lanes, load_qs,
    q8_block, reduce16, row_scales, scale8, spill, transpose4, Q4_0_OFFSET, TILE_LANES,
};
use crate::kernels::blocks::KVALUES_IQ4NL;
use crate::kernels::blocks::{BlockQ4_0, BlockQ4_1, BlockQ8_0, BlockQ8_1};
use crate::kernels::ops;
use crate::kernels::{ActRow, Variant};
use crate::kernels::{
    Q8Group, Q8Row, Queries, MAX_PANEL_TOKENS, PANEL_ROWS, PANEL_TOKENS, TILE_ROWS, WIDE_ROWS,
    WIDE_TOKENS,
};

/// The offset that maps an i8 weight onto u8 (`x + 128`, the top bit flipped).
const I8_TO_U8_OFFSET: i8 = i8::MIN;

/// `−offset · Σ4 y` per lane: the correction that turns `Σ4 (x + offset)·y` into `Σ4 x·y`,
/// exact for every i8 `y` (offset as u8: 8 or 128).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn offset_correction(offset: i8, y: __m256i) -> __m256i {
    let zero = _mm256_setzero_si256();
    _mm256_sub_epi32(zero, _mm256_dpbusd_epi32(zero, _mm256_set1_epi8(offset), y))
}

/// The tiles of Q4_0, Q4_1 and Q8_0 (`legacy_tiles.rs`) form their four-product sums with
/// `vpdpbusd` (u8 × i8, added to an i32 start): a Q4_0 weight's unsigned nibble `q` stands for
/// `q − 8`, a Q8_0 weight goes in as `x + 128` (the top bit flipped), and the start `c` takes
/// the offset's share out (`−offset · Σ4 y`), exactly.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn q4_0_codes(qs: &[u8; 16]) -> __m256i {
    bytes_from_nibbles_32(qs)
}

/// A Q8_0 block's values offset into u8 (`x + 128`).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn q8_0_codes(qs: &[i8; 32]) -> __m256i {
    _mm256_xor_si256(load_qs(qs), _mm256_set1_epi8(I8_TO_U8_OFFSET))
}

/// The start that takes Q4_0's offset of 8 out of the sums.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn q4_0_correction(y: __m256i) -> __m256i {
    offset_correction(Q4_0_OFFSET, y)
}

/// The start that takes Q8_0's offset of 128 out of the sums.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn q8_0_correction(y: __m256i) -> __m256i {
    offset_correction(I8_TO_U8_OFFSET, y)
}

/// `c + Σ4 x·y` per i32 lane (x as u8).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn sums(c: __m256i, x: __m256i, y: __m256i) -> __m256i {
    _mm256_dpbusd_epi32(c, x, y)
}

/// `Σ4 x·y` per i32 lane of u8 `x` (no offset to take out).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn sums_unsigned(x: __m256i, y: __m256i) -> __m256i {
    _mm256_dpbusd_epi32(_mm256_setzero_si256(), x, y)
}

mod tiles {
    super::super::legacy_tiles::legacy_tiles!("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni");
}
pub(in crate::kernels) use tiles::{
    tile_q4_0_q8_0, tile_q4_0_q8_0_chain, tile_q4_1_q8_1, tile_q8_0_q8_0,
};

// ---------------------------------------------------------------------------------------------
// The Q4_0 block-chain panel: PANEL_ROWS (16) rows × many tokens, for prompts. The
// block chain keeps one f32 per (row, token), fed one whole-block integer sum per block, so
// the rows can sit side by side in the lanes of one vector (lane r = row r, as llama.cpp's
// repacked Q4_0 kernels hold them) and never need a horizontal sum. Each row's sixteen bytes are
// transposed into four vectors of four-byte groups, split into low and high nibbles (eight
// vectors: elements 4k..4k+4 of every row in vector k), and each token's block is applied as
// eight four-byte broadcasts; the activation's block sums and f32 scales come precomputed
// (`Q8Row`):
//   isum[r] = −8·Σy + Σ_k dpbusd(nibbles_k[r], y[4k..4k+4])        = Σ (q − 8)·y, exact
//   acc[t]  = fma((f32) isum, d_w · d_y[t], acc[t])                   one vector per token
// so each output keeps its single chain dot's float operations, bit for bit.
// ---------------------------------------------------------------------------------------------

/// The Q4_0 block-chain panel (see above) over [`PANEL_ROWS`] (16) rows in 512-bit vectors,
/// rows 0..8 in the low half and rows 8..16 in the high half, so one `vpdpbusd` forms
/// four-sums for sixteen rows. Blocks outer, tokens inner: each block of the sixteen rows is
/// unpacked once for every token (up to [`MAX_PANEL_TOKENS`], in groups of [`PANEL_TOKENS`]
/// whose sums run as independent chains), the tokens' accumulators kept in memory.
///
/// With `NL`, the rows are IQ4_NL (the same 18 bytes per block as Q4_0: an f16 scale, then
/// sixteen nibble bytes, low nibbles elements 0..16) and a nibble stands for
/// `KVALUES_IQ4NL[q]`: its value + 128 (a u8) comes from one `vpshufb`, and the chain starts
/// from −128·Σy instead of −8·Σy. llama.cpp's repacked IQ4_NL kernels are its Q4_0 ones with
/// that table (`gemm_q4_b32_8x8_q8_0_lut_avx`), so the order is the same:
/// `oracle_repacked::dot_iq4_nl_q8_0_repacked`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn panel_q4_0_q8_0_chain_impl<const NL: bool>(
    w: &[&[BlockQ4_0]; PANEL_ROWS],
    a: &[Q8Group],
    tokens: usize,
    out: &mut [f32],
) {
    const { assert!(PANEL_ROWS == 2 * TILE_LANES && MAX_PANEL_TOKENS.is_multiple_of(PANEL_TOKENS)) };
    let n = check_panel(w, a, tokens, out);
    let w = exact(w, n);
    let (lo_rows, hi_rows): (&[&[BlockQ4_0]; 8], &[&[BlockQ4_0]; 8]) = (
        w[..8].try_into().expect("eight rows"),
        w[8..].try_into().expect("eight rows"),
    );
    let (table, offset) = chain_codes::<NL>();
    let mut acc = [_mm512_setzero_ps(); MAX_PANEL_TOKENS];
    for i in 0..n {
        let x = transpose_qs16(std::array::from_fn(|r| {
            if r < TILE_ROWS {
                &lo_rows[r][i].qs
            } else {
                &hi_rows[r - TILE_ROWS][i].qs
            }
        }));
        let dw = _mm512_castpd_ps(_mm512_insertf64x4::<1>(
            _mm512_castpd256_pd512(_mm256_castps_pd(row_scales(lo_rows.map(|w| w[i].d)))),
            _mm256_castps_pd(row_scales(hi_rows.map(|w| w[i].d))),
        ));
        let q = panel_codes::<NL>(x, table);
        for (g, ag) in a.iter().enumerate() {
            // −offset·Σy starts each token's chain: Σ (u − offset)·y = Σ u·y − offset·Σ y,
            // exact in i32 (|Σ y| ≤ 32·128).
            let mut isum: [__m512i; PANEL_TOKENS] = std::array::from_fn(|t| {
                // SAFETY: every slice of every group has exactly n elements (asserted above),
                // and i < n.
                let s = unsafe { *ag.sums[t].get_unchecked(i) };
                _mm512_set1_epi32(-offset * s)
            });
            let y: [&[i8; 32]; PANEL_TOKENS] =
                // SAFETY: as for the sums: n blocks per token, i < n.
                std::array::from_fn(|t| unsafe { &ag.blocks[t].get_unchecked(i).qs });
            // Groups of four bytes outer, tokens inner: the tokens' sums are independent
            // chains, so each vpdpbusd's latency hides behind the other tokens'.
            for (k, qk) in q.iter().enumerate() {
                for (t, s) in isum.iter_mut().enumerate() {
                    let y = _mm512_set1_epi32(group(y[t], 4 * k));
                    *s = _mm512_dpbusd_epi32(*s, *qk, y);
                }
            }
            for (t, s) in isum.iter().enumerate() {
                // SAFETY: as for the sums: n scales per token, i < n.
                let dy = unsafe { *ag.scales[t].get_unchecked(i) };
                let d = _mm512_mul_ps(dw, _mm512_set1_ps(dy));
                let acc_t = &mut acc[g * PANEL_TOKENS + t];
                *acc_t = _mm512_fmadd_ps(_mm512_cvtepi32_ps(*s), d, *acc_t);
            }
        }
    }
    for (o, acc_t) in out.chunks_exact_mut(PANEL_ROWS).zip(&acc) {
        // SAFETY: o is 16 writable f32s; the store is unaligned.
        unsafe { _mm512_storeu_ps(o.as_mut_ptr(), *acc_t) };
    }
}

/// The Q4_0-shaped block chains' code table (for [`panel_codes`]; unused without `NL`) and
/// the u8 offset of their codes: Q4_0's 8, or IQ4_NL's values moved to u8 by 128.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
pub(super) fn chain_codes<const NL: bool>() -> (__m512i, i32) {
    if NL {
        (iq4_nl_u8_table(), IQ4_NL_TO_U8)
    } else {
        (_mm512_setzero_si512(), i32::from(Q4_0_OFFSET))
    }
}

/// Four-byte groups of a Q4_0 block: the code vectors of one packed block of sixteen rows.
const PANEL_CODES: usize = 8;

/// The sixteen rows' codes of one packed block (`x`, [`packed_block16`]): the low nibbles of
/// its four vectors, then the high ones, as u8 (through `table`, the IQ4_NL values moved to
/// u8, with `NL`).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
pub(super) fn panel_codes<const NL: bool>(
    x: [__m512i; 4],
    table: __m512i,
) -> [__m512i; PANEL_CODES] {
    let low = _mm512_set1_epi8(0x0f);
    std::array::from_fn(|k| {
        let nibbles = match k.checked_sub(x.len()) {
            None => _mm512_and_si512(x[k], low),
            Some(h) => _mm512_and_si512(_mm512_srli_epi16::<4>(x[h]), low),
        };
        if NL {
            _mm512_shuffle_epi8(table, nibbles)
        } else {
            nibbles
        }
    })
}

/// What an IQ4_NL value is moved by to be a u8: `KVALUES_IQ4NL` spans −127..113.
const IQ4_NL_TO_U8: i32 = 128;

/// `KVALUES_IQ4NL[q] + 128` at byte q of every 128-bit lane: a `vpshufb` table from nibbles
/// to the u8 operands of `vpdpbusd`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn iq4_nl_u8_table() -> __m512i {
    let t: [u8; 16] = std::array::from_fn(|q| (i32::from(KVALUES_IQ4NL[q]) + IQ4_NL_TO_U8) as u8);
    // SAFETY: 16 bytes; the load is unaligned.
    _mm512_broadcast_i32x4(unsafe { _mm_loadu_si128(t.as_ptr().cast()) })
}

/// f16 → f32 of one f16 value per row for four rows (lane r from row r).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn row_scales4(d: [[u8; 2]; WIDE_ROWS]) -> __m128 {
    let mut h = 0u64;
    for (k, v) in d.iter().enumerate() {
        h |= u64::from(u16::from_le_bytes(*v)) << (16 * k);
    }
    _mm_cvtph_ps(_mm_cvtsi64_si128(h as i64))
}

/// The outputs of a wide tile: [`WIDE_ROWS`] rows × [`WIDE_TOKENS`] tokens.
type WideOut = [[f32; WIDE_ROWS]; WIDE_TOKENS];

/// The wide Q8_0·Q8_0 tile (lanes order): [`WIDE_ROWS`] rows × [`WIDE_TOKENS`] tokens, each
/// output's eight lanes as in `legacy_tiles.rs`' Q8_0 tile, two outputs (one row, two tokens) per
/// 512-bit vector: the row's block in both halves, the two tokens' blocks side by side, so each
/// `vpdpbusd`, conversion, multiply and fma serves two outputs. The tokens' f32 scales come
/// precomputed (`Q8Row`). Per block, for token pair p and row r:
/// ```text
/// c[p]     = −128 · Σ4 y per lane                  (the u8 offset of the weights taken out)
/// acc[p][r] = fma((f32) dpbusd(c[p], x[r] + 128, y[p]), d_w[r] · d_y[p], acc[p][r])
/// ```
///
/// `PAIRS` pairs of tokens: the group's first `2·PAIRS` tokens, into `out`'s first `2·PAIRS`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn wide_q8_0_q8_0_impl<const PAIRS: usize>(
    w: &[&[BlockQ8_0]; WIDE_ROWS],
    a: &Q8Group,
    out: &mut WideOut,
) {
    const { assert!(WIDE_TOKENS == PANEL_TOKENS && 2 * PAIRS <= WIDE_TOKENS) };
    let n = a.blocks[0].len();
    assert!(
        a.blocks.iter().all(|b| b.len() == n) && a.scales.iter().all(|s| s.len() == n),
        "wide tile activations of unequal lengths"
    );
    let w = exact(w, n);
    let (ab, ad) = (&a.blocks, &a.scales);
    let flip = _mm512_set1_epi8(I8_TO_U8_OFFSET);
    let zero = _mm512_setzero_si512();
    let mut acc = [[_mm512_setzero_ps(); WIDE_ROWS]; PAIRS];
    let mut dw_buf = [0f32; 4];
    for i in 0..n {
        // The rows' scales go through memory, so each is broadcast by its load alone.
        // SAFETY: dw_buf is 4 writable f32s; the store is unaligned.
        unsafe { _mm_storeu_ps(dw_buf.as_mut_ptr(), row_scales4(w.map(|w| w[i].d))) };
        let dw = std::hint::black_box(&dw_buf);
        let x: [__m512i; WIDE_ROWS] = std::array::from_fn(|r| {
            _mm512_xor_si512(_mm512_broadcast_i64x4(load_qs(&w[r][i].qs)), flip)
        });
        for (p, acc_p) in acc.iter_mut().enumerate() {
            let (t0, t1) = (2 * p, 2 * p + 1);
            // SAFETY: every ab[t] and ad[t] has exactly n elements (asserted above), and i < n.
            let (b0, b1, d0, d1) = unsafe {
                (
                    ab[t0].get_unchecked(i),
                    ab[t1].get_unchecked(i),
                    *ad[t0].get_unchecked(i),
                    *ad[t1].get_unchecked(i),
                )
            };
            let y =
                _mm512_inserti64x4::<1>(_mm512_castsi256_si512(load_qs(&b0.qs)), load_qs(&b1.qs));
            let c = _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, flip, y));
            let dy = _mm512_mask_blend_ps(0xff00, _mm512_set1_ps(d0), _mm512_set1_ps(d1));
            for (r, acc_pr) in acc_p.iter_mut().enumerate() {
                let q = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(c, x[r], y));
                let d = _mm512_mul_ps(_mm512_set1_ps(dw[r]), dy);
                *acc_pr = _mm512_fmadd_ps(d, q, *acc_pr);
            }
        }
    }
    for (p, acc_p) in acc.iter().enumerate() {
        for (r, v) in acc_p.iter().enumerate() {
            out[2 * p][r] = hsum_float_8(_mm512_castps512_ps256(*v));
            out[2 * p + 1][r] = hsum_float_8(_mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(
                _mm512_castps_pd(*v),
            )));
        }
    }
}

const _: () = {
    use crate::kernels::blocks::BlockIq4Nl;
    assert!(std::mem::size_of::<BlockIq4Nl>() == std::mem::size_of::<BlockQ4_0>());
    assert!(std::mem::offset_of!(BlockIq4Nl, d) == std::mem::offset_of!(BlockQ4_0, d));
    assert!(std::mem::offset_of!(BlockIq4Nl, qs) == std::mem::offset_of!(BlockQ4_0, qs));
};

/// The sixteen nibble bytes of sixteen rows' blocks, transposed into four vectors: vector k
/// holds bytes 4k..4k+4 of row r in 32-bit lane r (as `avx2::transpose_qs` does for eight
/// rows). Rows r, r + 4, r + 8 and r + 12 share a register, one 128-bit lane each (the first
/// loaded, the rest inserted), then a 4×4 transpose of 32-bit groups within each 128-bit lane
/// ([`transpose4`]):
/// twenty shuffles, where two eight-row transposes and their joining take twenty-eight.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn transpose_qs16(qs: [&[u8; 16]; PANEL_ROWS]) -> [__m512i; 4] {
    // SAFETY: every qs is exactly 16 readable bytes; the loads are unaligned.
    let v: [__m512i; 4] = std::array::from_fn(|r| unsafe {
        let lane = |k: usize| _mm_loadu_si128(qs[r + 4 * k].as_ptr().cast());
        let v = _mm512_castsi128_si512(lane(0));
        let v = _mm512_inserti32x4::<1>(v, lane(1));
        let v = _mm512_inserti32x4::<2>(v, lane(2));
        _mm512_inserti32x4::<3>(v, lane(3))
    });
    transpose4_epi32x16(v)
}

transpose4! {
    /// [`transpose4`] of 512-bit vectors (four 128-bit lanes, transposed side by side).
    fn transpose4_epi32x16(__m512i) = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni":
        _mm512_unpacklo_epi32, _mm512_unpackhi_epi32, _mm512_unpacklo_epi64, _mm512_unpackhi_epi64
}

/// Single-token Q4_0·Q8_0 (block-chain order) over [`PANEL_ROWS`] rows held back to back in
/// `w` (decode's path): the panel above with one token. Sixteen rows share the lanes of one
/// 512-bit vector, so a block needs eight `vpdpbusd` for all sixteen rows and no horizontal
/// sums, where the eight-row kernel needs one per row and a reduction. The rows' scales come
/// in by one gather (the rows are equally spaced), and the eight four-sums are split over two
/// accumulators so they are not one chain of dependent `vpdpbusd` (integer sums: exact in any
/// order). Each row keeps the float operations of its single chain dot, bit for bit.
///
/// With `PACKED`, `w` is one packed group instead (`kernels::pack`): block i of the sixteen
/// rows is 288 consecutive bytes, the scales by one load and the nibble bytes already in
/// lanes, so neither the gather nor the transpose is needed.
///
/// With `NL`, the rows are IQ4_NL, read as the block-chain panel reads them (a `vpshufb` to
/// value + 128, the chain from −128·Σy): `oracle_repacked::dot_iq4_nl_q8_0_repacked`'s bits.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn gemv16_q4_0_q8_0_chain_impl<const PACKED: bool, const NL: bool>(
    w: &[BlockQ4_0],
    a: &Q8Row,
    out: &mut [f32; PANEL_ROWS],
) {
    const { assert!(PANEL_ROWS == 2 * TILE_ROWS) };
    let n = a.blocks.len();
    assert!(
        n > 0 && w.len() == PANEL_ROWS * n && a.sums.len() == n && a.scales.len() == n,
        "gemv16: {} weight blocks for {n}-block rows",
        w.len()
    );
    let row_bytes = std::mem::size_of_val(&w[..n]);
    let stride = i32::try_from(row_bytes).expect("a weight row under 2 GiB");
    let mut lo_rows: [&[BlockQ4_0]; TILE_ROWS] = [&w[..n]; TILE_ROWS];
    let mut hi_rows = lo_rows;
    for r in 0..TILE_ROWS {
        lo_rows[r] = &w[r * n..(r + 1) * n];
        hi_rows[r] = &w[(r + TILE_ROWS) * n..(r + TILE_ROWS + 1) * n];
    }
    // Byte offsets of the rows' blocks from row 0's: one gather lane per row.
    let offsets = _mm512_mullo_epi32(
        _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
        _mm512_set1_epi32(stride),
    );
    let pf = Prefetch::new(&{
        let mut all = [lo_rows[0]; PANEL_ROWS];
        all[..TILE_ROWS].copy_from_slice(&lo_rows);
        all[TILE_ROWS..].copy_from_slice(&hi_rows);
        all
    });
    let low = _mm512_set1_epi8(0x0f);
    let (table, offset) = chain_codes::<NL>();
    let mut acc = _mm512_setzero_ps();
    for i in 0..n {
        pf.at(i);
        let (x, dw) = if PACKED {
            packed_block16(w, i)
        } else {
            // SAFETY: lane r reads the four bytes at the start of block i of row r (its f16
            // scale and two nibble bytes), inside w: r·row_bytes + i·18 + 4 ≤ w's byte length.
            let d32 = unsafe { _mm512_i32gather_epi32::<1>(offsets, (&raw const w[i]).cast()) };
            let x = transpose_qs16(std::array::from_fn(|r| {
                if r < TILE_ROWS {
                    &lo_rows[r][i].qs
                } else {
                    &hi_rows[r - TILE_ROWS][i].qs
                }
            }));
            (x, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(d32)))
        };
        // SAFETY: every slice of `a` has exactly n elements (asserted above), and i < n.
        let (y, sum, dy) = unsafe { q8_block(a, i) };
        // −8·Σy (IQ4_NL: −128·Σy) starts the sum: Σ (q − 8)·y = Σ q·y − 8·Σ y, exact in i32.
        let mut s0 = _mm512_set1_epi32(-offset * sum);
        let mut s1 = _mm512_setzero_si512();
        for (k, xk) in x.iter().enumerate() {
            let lo = _mm512_and_si512(*xk, low);
            let hi = _mm512_and_si512(_mm512_srli_epi16::<4>(*xk), low);
            let (lo, hi) = if NL {
                (
                    _mm512_shuffle_epi8(table, lo),
                    _mm512_shuffle_epi8(table, hi),
                )
            } else {
                (lo, hi)
            };
            s0 = _mm512_dpbusd_epi32(s0, lo, _mm512_set1_epi32(group(y, 4 * k)));
            s1 = _mm512_dpbusd_epi32(s1, hi, _mm512_set1_epi32(group(y, 16 + 4 * k)));
        }
        let isum = _mm512_cvtepi32_ps(_mm512_add_epi32(s0, s1));
        acc = _mm512_fmadd_ps(isum, _mm512_mul_ps(dw, _mm512_set1_ps(dy)), acc);
    }
    // SAFETY: out is 16 writable f32s; the store is unaligned.
    unsafe { _mm512_storeu_ps(out.as_mut_ptr(), acc) };
}

pub(in crate::kernels) fn gemv16_q4_0_q8_0_chain(w: &[BlockQ4_0], a: &Q8Row, out: &mut [f32]) {
    let out = out.try_into().expect("sixteen outputs");
    // SAFETY: only reachable through the table built after every feature above was detected.
    unsafe { gemv16_q4_0_q8_0_chain_impl::<false, false>(w, a, out) }
}

/// [`gemv16_q4_0_q8_0_chain`] of one packed group (`kernels::pack`).
pub(in crate::kernels) fn gemv16_q4_0_q8_0_packed(w: &[BlockQ4_0], a: &Q8Row, out: &mut [f32]) {
    let out = out.try_into().expect("sixteen outputs");
    // SAFETY: only reachable through the table built after every feature above was detected.
    unsafe { gemv16_q4_0_q8_0_chain_impl::<true, false>(w, a, out) }
}

/// [`gemv16_q4_0_q8_0_packed`] of one packed group of IQ4_NL rows ([`Layout::Iq4NlX16`](
/// crate::kernels::Layout::Iq4NlX16)), in `oracle_repacked::dot_iq4_nl_q8_0_repacked`'s order.
pub(in crate::kernels) fn gemv16_iq4_nl_q8_0_packed(w: &[BlockQ4_0], a: &Q8Row, out: &mut [f32]) {
    let out = out.try_into().expect("sixteen outputs");
    // SAFETY: only reachable through the table built after every feature above was detected.
    unsafe { gemv16_q4_0_q8_0_chain_impl::<true, true>(w, a, out) }
}

/// Block `i` of a packed group of sixteen Q4_0 rows (`kernels::pack`): its nibble bytes as
/// [`transpose_qs16`] gives them (they are stored that way) and the rows' scales as f32.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
pub(super) fn packed_block16(w: &[BlockQ4_0], i: usize) -> ([__m512i; 4], __m512) {
    let step = &w[i * PANEL_ROWS..(i + 1) * PANEL_ROWS];
    let base = step.as_ptr().cast::<u8>();
    // SAFETY: `step` is PANEL_ROWS blocks (288 bytes): 32 bytes of scales, then four 64-byte
    // vectors; every load is unaligned and inside it.
    unsafe {
        let dw = _mm512_cvtph_ps(_mm256_loadu_si256(base.cast()));
        let x =
            std::array::from_fn(|k| _mm512_loadu_si512(base.add(PACKED_SCALES + 64 * k).cast()));
        (x, dw)
    }
}

/// Bytes of the scales at the start of a packed block step (sixteen f16 values).
const PACKED_SCALES: usize = 2 * PANEL_ROWS;

// ---------------------------------------------------------------------------------------------
// Elementwise exponentials in 512-bit vectors: `ggml_math::expf` (ggml's own vectorised
// exponential, of which that function is a one-lane model) sixteen lanes at a time, with the
// same operations per lane, so SiLU and softmax give the scalar model's bits.
// ---------------------------------------------------------------------------------------------

/// Sixteen lanes of the f32 with these bits.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn splat(bits: u32) -> __m512 {
    _mm512_set1_ps(f32::from_bits(bits))
}

/// `ggml_math::expf` of sixteen lanes.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn expf16(x: __m512) -> __m512 {
    let c = splat;
    let r = c(0x4b40_0000);
    let z = _mm512_fmadd_ps(x, c(0x3fb8_aa3b), r);
    let n = _mm512_sub_ps(z, r);
    let b = _mm512_fnmadd_ps(n, c(0x3f31_7200), x);
    let b = _mm512_fnmadd_ps(n, c(0x35bf_be8e), b);
    let u = _mm512_mul_ps(b, b);
    let p = _mm512_fmadd_ps(c(0x3c07_2010), b, c(0x3d2b_9f17));
    let q = _mm512_fmadd_ps(c(0x3e2a_af33), b, c(0x3eff_fedb));
    let s = _mm512_fmadd_ps(c(0x3f7f_fff6), b, _mm512_set1_ps(1.0));
    let j = _mm512_fmadd_ps(_mm512_fmadd_ps(p, u, q), u, s);
    let near = _mm512_scalef_ps(j, n);
    // Far out of range: +inf above, 0 at or below zero.
    let far = _mm512_cmp_ps_mask::<_CMP_GT_OQ>(_mm512_abs_ps(n), _mm512_set1_ps(192.0));
    let low = _mm512_cmp_ps_mask::<_CMP_LE_OQ>(n, _mm512_setzero_ps());
    let edge = _mm512_mask_blend_ps(low, _mm512_set1_ps(f32::INFINITY), _mm512_setzero_ps());
    _mm512_mask_blend_ps(far, near, edge)
}

/// `ggml_math::swiglu` with the SiLU of each whole 16-lane step in vectors.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn swiglu_impl(gate: &mut [f32], up: &[f32]) {
    let n = gate.len().min(up.len());
    let full = gate.len() / 16 * 16;
    let whole = full.min(n) / 16 * 16;
    let one = _mm512_set1_ps(1.0);
    for (g, u) in gate[..whole]
        .chunks_exact_mut(16)
        .zip(up[..whole].chunks_exact(16))
    {
        // SAFETY: g and u are 16 f32s each; unaligned loads and store.
        unsafe {
            let x = _mm512_loadu_ps(g.as_ptr());
            let e = expf16(_mm512_sub_ps(_mm512_setzero_ps(), x));
            let silu = _mm512_div_ps(x, _mm512_add_ps(one, e));
            _mm512_storeu_ps(
                g.as_mut_ptr(),
                _mm512_mul_ps(silu, _mm512_loadu_ps(u.as_ptr())),
            );
        }
    }
    for (i, (g, &u)) in (whole..).zip(gate[whole..n].iter_mut().zip(&up[whole..n])) {
        use crate::kernels::ggml_math::{silu, silu_tail};
        *g = if i < full { silu(*g) } else { silu_tail(*g) } * u;
    }
}

/// `ggml_math::softmax` with the exponentials of each 16-lane block in one vector and the
/// block's sum reduced in `reduce16`'s order.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn softmax_impl(x: &mut [f32], scale: f32) {
    let mut max = f32::NEG_INFINITY;
    for v in x.iter_mut() {
        *v *= scale;
        max = max.max(*v);
    }
    let m = _mm512_set1_ps(max);
    let mut sum = 0f64;
    for block in x.chunks_mut(16) {
        let k = block.len();
        let mask: __mmask16 = if k == 16 { !0 } else { (1u16 << k) - 1 };
        // SAFETY: the mask selects exactly the block's k lanes, so only they are read and
        // written; the rest of the vector is zero (as the scalar model's padded lanes).
        let e = unsafe {
            let v = _mm512_maskz_loadu_ps(mask, block.as_ptr());
            let e = _mm512_maskz_mov_ps(mask, expf16(_mm512_sub_ps(v, m)));
            _mm512_mask_storeu_ps(block.as_mut_ptr(), mask, e);
            e
        };
        sum += reduce16x(e) as f64;
    }
    let inv = (1.0 / sum) as f32;
    for v in x.iter_mut() {
        *v *= inv;
    }
}

/// The accumulators of [`att_gemv_impl`] for one row, combined as (0+2)+(1+3): the vector
/// `reduce16` then sums.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn att_gemv_lanes(x: &[u16], y: &[f32], m: usize) -> __m512 {
    let [lanes] = att_gemv_lanes_heads::<1>(x, &[y], m);
    lanes
}

/// `ggml_math::dot_f16_gemv` (same operation order) with one 16-lane accumulator per quarter
/// of a 64-element step. A partial last step reads only the elements that exist (masked
/// loads); its other lanes are zeros, which add exactly nothing, as in the scalar model.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn att_gemv_impl(x: &[u16], y: &[f32], n_pad: usize) -> f32 {
    let n = x.len().min(y.len());
    let np = n_pad / 64 * 64;
    let mut sum = reduce16x(att_gemv_lanes(x, y, n.min(np))) as f64;
    for j in np..n {
        sum += (crate::kernels::half::f16_to_f32(x[j]) * y[j]) as f64;
    }
    sum as f32
}

/// `reduce16x` of sixteen vectors at once, each sum in `reduce16`'s order (lane i + lane i+8,
/// then + 4, then (0+2)+(1+3)): each stage adds the same pairs for two rows in one vector.
/// Lane `4k + l` of the result is the sum of `v[4l + k]`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn reduce16x16(v: &[__m512; 16]) -> __m512 {
    // t = low 8 lanes + high 8 lanes: two rows per vector.
    let t: [__m512; 8] = std::array::from_fn(|p| {
        let (a, b) = (v[2 * p], v[2 * p + 1]);
        _mm512_add_ps(
            _mm512_shuffle_f32x4::<0x44>(a, b),
            _mm512_shuffle_f32x4::<0xEE>(a, b),
        )
    });
    // u = t's low 4 + high 4: four rows per vector (rows 4m..4m+4 in d[m]'s quarters).
    let u: [__m512; 4] = std::array::from_fn(|m| {
        let (a, b) = (t[2 * m], t[2 * m + 1]);
        _mm512_add_ps(
            _mm512_shuffle_f32x4::<0x88>(a, b),
            _mm512_shuffle_f32x4::<0xDD>(a, b),
        )
    });
    // v = (u0 + u2, u1 + u3), then v0 + v1, pairs of rows per 128-bit quarter.
    let w: [__m512; 2] = std::array::from_fn(|h| {
        let (a, b) = (u[2 * h], u[2 * h + 1]);
        _mm512_add_ps(
            _mm512_shuffle_ps::<0x44>(a, b),
            _mm512_shuffle_ps::<0xEE>(a, b),
        )
    });
    _mm512_add_ps(
        _mm512_shuffle_ps::<0x88>(w[0], w[1]),
        _mm512_shuffle_ps::<0xDD>(w[0], w[1]),
    )
}

/// [`att_gemv_impl`] of `out.len()` rows, row r at `x[r * stride..][..y.len()]`, sixteen
/// rows' sums reduced together ([`reduce16x16`]); each result is its single dot's bits.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn att_gemv_rows_impl(x: &[u16], stride: usize, y: &[f32], n_pad: usize, out: &mut [f32]) {
    let q = Queries {
        ys: y,
        len: y.len(),
        stride: y.len(),
        count: 1,
    };
    att_gemv_heads_impl(x, (stride, out.len()), q, n_pad, out, 0);
}

/// Queries that share one widened cache row in [`att_gemv_heads_impl`] (their 16 accumulators
/// and the row's four vectors fill 20 of the 32 registers).
const HEADS_AT_ONCE: usize = 4;

/// [`att_gemv_lanes`] of one row against `H` (at most [`HEADS_AT_ONCE`]) queries: the row's
/// f16 values are widened once per 16 and multiplied into every query's accumulators, each
/// query's lanes formed by the same operations, in the same order, as its own
/// `att_gemv_lanes`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn att_gemv_lanes_heads<const H: usize>(x: &[u16], y: &[&[f32]; H], m: usize) -> [__m512; H] {
    assert!(m <= x.len() && y.iter().all(|y| m <= y.len()));
    let mask = |k: usize| -> __mmask16 {
        if k >= 16 {
            !0
        } else {
            (1u16 << k) - 1
        }
    };
    let load_x = |i: usize, k: usize| {
        // SAFETY: the mask selects the k ≤ 16 elements from i, all below m ≤ the row's length.
        unsafe { _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask(k), x.as_ptr().add(i).cast())) }
    };
    let load_y = |h: usize, i: usize, k: usize| {
        // SAFETY: as for the row: all below m ≤ every query's length.
        unsafe { _mm512_maskz_loadu_ps(mask(k), y[h].as_ptr().add(i)) }
    };
    let mut acc = [[_mm512_setzero_ps(); 4]; H];
    let full = m / 64 * 64;
    for i in (0..full).step_by(64) {
        let xv: [__m512; 4] = std::array::from_fn(|j| load_x(i + 16 * j, 16));
        for (h, a) in acc.iter_mut().enumerate() {
            for (j, aj) in a.iter_mut().enumerate() {
                *aj = _mm512_fmadd_ps(xv[j], load_y(h, i + 16 * j, 16), *aj);
            }
        }
    }
    for j in 0..4 {
        let at = full + 16 * j;
        if at < m {
            let xv = load_x(at, m - at);
            for (h, a) in acc.iter_mut().enumerate() {
                a[j] = _mm512_fmadd_ps(xv, load_y(h, at, m - at), a[j]);
            }
        }
    }
    acc.map(|a| _mm512_add_ps(_mm512_add_ps(a[0], a[2]), _mm512_add_ps(a[1], a[3])))
}

/// Rows the AVX-512 batch attention dot computes at once (each with one 16-lane accumulator).
const GEMM_ROWS: usize = 8;

/// `out[r]` = tinyBLAS's f32 dot of row r (`x[r * stride..][..y.len()]`) and `y`, as the AVX2
/// tier computes it with (lo, hi) halves of eight lanes: here one 16-lane register a row, the
/// same multiply-add per lane, the tail's lanes past `y.len()` zeros in both operands, and the
/// lanes reduced in GCC's `_mm512_reduce_add_ps` order. Same bits; half the instructions.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn att_gemm_rows_impl(x: &[f32], stride: usize, y: &[f32], out: &mut [f32]) {
    let n = y.len();
    let full = n / 16 * 16;
    let rows = out.len();
    if rows == 0 {
        return;
    }
    assert!(
        (rows - 1) * stride + n <= x.len(),
        "att_gemm_rows: rows past the buffer"
    );
    let row = |r: usize| &x[r * stride..r * stride + n];
    // Lanes of the last partial step, zeros past n (masked loads).
    let tail: __mmask16 = ((1u32 << (n - full)) - 1) as __mmask16;
    for (q, o) in (0..).step_by(GEMM_ROWS).zip(out.chunks_mut(GEMM_ROWS)) {
        let xr: [&[f32]; GEMM_ROWS] = std::array::from_fn(|j| row((q + j).min(rows - 1)));
        let mut acc = [_mm512_setzero_ps(); GEMM_ROWS];
        let mut i = 0;
        while i < full {
            // SAFETY: elements i..i + 16 are inside y and every row (i + 16 <= full <= n).
            let yv = unsafe { _mm512_loadu_ps(y.as_ptr().add(i)) };
            for j in 0..GEMM_ROWS {
                // SAFETY: as above.
                let xv = unsafe { _mm512_loadu_ps(xr[j].as_ptr().add(i)) };
                acc[j] = _mm512_fmadd_ps(xv, yv, acc[j]);
            }
            i += 16;
        }
        if i < n {
            // SAFETY: the mask enables only lanes below n - i, inside y and every row.
            let yv = unsafe { _mm512_maskz_loadu_ps(tail, y.as_ptr().add(i)) };
            for j in 0..GEMM_ROWS {
                // SAFETY: as above.
                let xv = unsafe { _mm512_maskz_loadu_ps(tail, xr[j].as_ptr().add(i)) };
                acc[j] = _mm512_fmadd_ps(xv, yv, acc[j]);
            }
        }
        for (j, v) in o.iter_mut().enumerate() {
            let lo = _mm512_castps512_ps256(acc[j]);
            let hi = _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(acc[j])));
            *v = reduce16(lo, hi);
        }
    }
}

/// Rows and queries the AVX-512 batch attention tile holds at once: sixteen accumulators,
/// each row load (from L2, a block of cells) feeding four multiply-adds. Four by two had fed
/// two: a 4077-token prompt on the V3-shape file went 165-182 -> 209-211 t/s at one thread
/// (2 rounds); two by eight and three by eight read alike, four by six slower.
const TILE_GEMM_ROWS: usize = 4;
const TILE_GEMM_QUERIES: usize = 4;

/// [`att_gemm_rows_impl`] of every query of `q` against the same `rows` rows (row r at
/// `x[r * stride..][..q.len]`), query j's row r into `out[j * out_stride + r]` ([`gemm_tile`]).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn att_gemm_heads_impl(
    x: &[f32],
    (stride, rows): (usize, usize),
    q: Queries<'_>,
    out: &mut [f32],
    out_stride: usize,
) {
    let (n, count) = (q.len, q.count);
    if rows == 0 || count == 0 {
        return;
    }
    assert!(
        (rows - 1) * stride + n <= x.len(),
        "att_gemm_heads: rows past the buffer"
    );
    assert!(
        (count - 1) * out_stride + rows <= out.len(),
        "att_gemm_heads: outputs past the buffer"
    );
    let row = |r: usize| &x[r * stride..r * stride + n];
    gemm_tile(n, (rows, row), (count, |k| q.get(k)), |k, r, v| {
        out[k * out_stride + r] = v
    });
}

/// tinyBLAS's f32 matmul of a micro-batch (`Variant::Batch` of an F32 matrix): every token's
/// activation against every row, token t's row r into `out[t * rows.len() + r]`
/// ([`gemm_tile`]: each weight row read once for every pair of tokens, not once per token).
/// Declines the other orders and rows that are not whole f32 values.
pub(in crate::kernels) fn tile_f32_batch<'a>(
    rows: &[&'a [u8]],
    acts: &'a [ActRow],
    variant: Variant,
    out: &mut [f32],
) -> bool {
    let Some(ActRow::F32(first)) = acts.first() else {
        return false;
    };
    let n = first.len();
    let f32s = |r: &'a [u8]| -> &'a [f32] {
        // SAFETY: any four bytes are an f32; `align_to` hands back only aligned whole values.
        let (pre, mid, post) = unsafe { r.align_to::<f32>() };
        match (pre.len(), mid.len(), post.len()) {
            (0, len, 0) if len == n => mid,
            _ => &[],
        }
    };
    let act = |a: &'a ActRow| -> &'a [f32] {
        match a {
            ActRow::F32(v) if v.len() == n => v,
            _ => &[],
        }
    };
    let whole = |v: &[f32]| v.len() == n;
    let ours = variant == Variant::Batch
        && rows.iter().all(|r| whole(f32s(r)))
        && acts.iter().all(|a| whole(act(a)));
    if !ours {
        return false;
    }
    let n_rows = rows.len();
    assert_eq!(out.len(), n_rows * acts.len(), "tile output size mismatch");
    let (row, query) = (|r: usize| f32s(rows[r]), |t: usize| act(&acts[t]));
    // SAFETY: only reachable through the table built after every feature above was detected.
    unsafe {
        gemm_tile(n, (n_rows, row), (acts.len(), query), |t, r, v| {
            out[t * n_rows + r] = v
        })
    };
    true
}

/// The tile of [`att_gemm_heads_impl`] and [`tile_f32_batch`]: [`TILE_GEMM_ROWS`] rows by
/// [`TILE_GEMM_QUERIES`] queries in registers (`row(r)` and `query(k)` each `n` long), so each
/// row and query load feeds several multiply-adds; `put(k, r, v)` takes query k's dot with row r. Each output keeps its own
/// 16 lanes, the same multiply-adds in the same order and the same reduction as
/// [`att_gemm_rows_impl`] alone: the same bits.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn gemm_tile<'a>(
    n: usize,
    (rows, row): (usize, impl Fn(usize) -> &'a [f32]),
    (count, query): (usize, impl Fn(usize) -> &'a [f32]),
    mut put: impl FnMut(usize, usize, f32),
) {
    let full = n / 16 * 16;
    let tail: __mmask16 = ((1u32 << (n - full)) - 1) as __mmask16;
    for r0 in (0..rows).step_by(TILE_GEMM_ROWS) {
        let xr: [&[f32]; TILE_GEMM_ROWS] = std::array::from_fn(|j| row((r0 + j).min(rows - 1)));
        assert!(
            xr.iter().all(|x| x.len() >= n),
            "gemm_tile: a row shorter than {n}"
        );
        for q0 in (0..count).step_by(TILE_GEMM_QUERIES) {
            let ys: [&[f32]; TILE_GEMM_QUERIES] =
                std::array::from_fn(|k| query((q0 + k).min(count - 1)));
            assert!(
                ys.iter().all(|y| y.len() >= n),
                "gemm_tile: a query shorter than {n}"
            );
            let mut acc = [[_mm512_setzero_ps(); TILE_GEMM_QUERIES]; TILE_GEMM_ROWS];
            let mut i = 0;
            while i < full {
                // SAFETY: elements i..i + 16 are inside every query and row (i + 16 <= n).
                let yv: [__m512; TILE_GEMM_QUERIES] =
                    std::array::from_fn(|k| unsafe { _mm512_loadu_ps(ys[k].as_ptr().add(i)) });
                for j in 0..TILE_GEMM_ROWS {
                    // SAFETY: as above.
                    let xv = unsafe { _mm512_loadu_ps(xr[j].as_ptr().add(i)) };
                    for k in 0..TILE_GEMM_QUERIES {
                        acc[j][k] = _mm512_fmadd_ps(xv, yv[k], acc[j][k]);
                    }
                }
                i += 16;
            }
            if i < n {
                // SAFETY: the mask enables only lanes below n - i, inside every query and row.
                let yv: [__m512; TILE_GEMM_QUERIES] = std::array::from_fn(|k| unsafe {
                    _mm512_maskz_loadu_ps(tail, ys[k].as_ptr().add(i))
                });
                for j in 0..TILE_GEMM_ROWS {
                    // SAFETY: as above.
                    let xv = unsafe { _mm512_maskz_loadu_ps(tail, xr[j].as_ptr().add(i)) };
                    for k in 0..TILE_GEMM_QUERIES {
                        acc[j][k] = _mm512_fmadd_ps(xv, yv[k], acc[j][k]);
                    }
                }
            }
            for (j, acc) in acc.iter().enumerate().take(rows - r0) {
                for (k, a) in acc.iter().enumerate().take(count - q0) {
                    let lo = _mm512_castps512_ps256(*a);
                    let hi = _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(*a)));
                    put(q0 + k, r0 + j, reduce16(lo, hi));
                }
            }
        }
    }
}

/// [`att_gemv_rows_impl`] of every query against the same rows, [`HEADS_AT_ONCE`] queries at a
/// time (fewer in a last set): sixteen rows' lanes per query reduced together, each result its
/// single dot's bits.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn att_gemv_heads_impl(
    x: &[u16],
    (stride, rows): (usize, usize),
    q: Queries<'_>,
    n_pad: usize,
    out: &mut [f32],
    out_stride: usize,
) {
    let n = q.len;
    if rows == 0 || q.count == 0 {
        return;
    }
    assert!(
        (rows - 1) * stride + n <= x.len(),
        "attention rows past the cache"
    );
    assert!(
        (q.count - 1) * out_stride + rows <= out.len(),
        "attention outputs past their buffer"
    );
    let m = n.min(n_pad / 64 * 64);
    let rows_of = |j0: usize, out: &mut [f32]| match (q.count - j0).min(HEADS_AT_ONCE) {
        1 => heads_rows::<1>(x, (stride, rows), q, j0, m, out, out_stride),
        2 => heads_rows::<2>(x, (stride, rows), q, j0, m, out, out_stride),
        3 => heads_rows::<3>(x, (stride, rows), q, j0, m, out, out_stride),
        _ => heads_rows::<HEADS_AT_ONCE>(x, (stride, rows), q, j0, m, out, out_stride),
    };
    for j0 in (0..q.count).step_by(HEADS_AT_ONCE) {
        rows_of(j0, out);
    }
}

/// Queries `j0..j0 + H` of [`att_gemv_heads_impl`] against every row.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn heads_rows<const H: usize>(
    x: &[u16],
    (stride, rows): (usize, usize),
    q: Queries<'_>,
    j0: usize,
    m: usize,
    out: &mut [f32],
    out_stride: usize,
) {
    let n = q.len;
    let y: [&[f32]; H] = std::array::from_fn(|h| q.get(j0 + h));
    let mut r0 = 0;
    while r0 < rows {
        let k = (rows - r0).min(16);
        let mut v = [[_mm512_setzero_ps(); 16]; H];
        for jr in 0..k {
            let at = (r0 + jr) * stride;
            let lanes = att_gemv_lanes_heads::<H>(&x[at..at + n], &y, m);
            for (vh, l) in v.iter_mut().zip(lanes) {
                vh[jr] = l;
            }
        }
        for (h, vh) in v.iter().enumerate() {
            let mut sums = [0f32; 16];
            // SAFETY: sums is 16 writable f32s; the store is unaligned.
            unsafe { _mm512_storeu_ps(sums.as_mut_ptr(), reduce16x16(vh)) };
            let o = &mut out[(j0 + h) * out_stride + r0..][..k];
            for (jr, o) in o.iter_mut().enumerate() {
                let mut sum = sums[4 * (jr % 4) + jr / 4] as f64;
                let row = &x[(r0 + jr) * stride..];
                for i in m..n {
                    sum += (crate::kernels::half::f16_to_f32(row[i]) * y[h][i]) as f64;
                }
                *o = sum as f32;
            }
        }
        r0 += k;
    }
}

/// `ggml_math::reduce16` of one vector (`avx2::reduce16` of its halves).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn reduce16x(a: __m512) -> f32 {
    reduce16(
        _mm512_castps512_ps256(a),
        _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(a))),
    )
}

// ---------------------------------------------------------------------------------------------
// Single-token kernels: TILE_ROWS (8) weight rows × one activation per pass, for decoding. One
// activation block is loaded (and, for Q4_0 and Q8_0, its offset correction formed) once for
// eight rows; the eight rows' f16 scales are converted by one instruction and multiplied by the
// activation's scale in one vector; the eight rows' accumulator chains are independent. Each
// row keeps its single dot's float operations, so every output is bit-identical to it.
// ---------------------------------------------------------------------------------------------

/// 32 nibbles → 32 bytes as `avx2::bytes_from_nibbles_32`: the 16 bytes are broadcast to both
/// 128-bit halves by the load itself, then the high half shifted down by 4.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn nibbles(qs: &[u8; 16]) -> __m256i {
    // SAFETY: qs is exactly 16 readable bytes; the load is unaligned.
    let b = _mm256_broadcastsi128_si256(unsafe { _mm_loadu_si128(qs.as_ptr().cast()) });
    let shifted = _mm256_srlv_epi64(b, _mm256_set_epi64x(4, 4, 0, 0));
    _mm256_and_si256(shifted, _mm256_set1_epi8(0x0f))
}

/// f16 → f32 of two f16 values per row, as [`row_scales`]: rows 0..4 in the first vector and
/// rows 4..8 in the second, row r's pair in lanes 2(r mod 4) and 2(r mod 4) + 1.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn row_scale_pairs(d: [[u8; 4]; TILE_ROWS]) -> [__m256; 2] {
    let mut h = [0u64; 4];
    for (k, v) in d.iter().enumerate() {
        h[k / 2] |= u64::from(u32::from_le_bytes(*v)) << (32 * (k % 2));
    }
    [
        _mm256_cvtph_ps(_mm_set_epi64x(h[1] as i64, h[0] as i64)),
        _mm256_cvtph_ps(_mm_set_epi64x(h[3] as i64, h[2] as i64)),
    ]
}

/// The lanes of `v`, stored in `buf` and kept in memory, as `avx2::spill` for two vectors.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn spill2(v: [__m256; 2], buf: &mut [f32; 2 * TILE_LANES]) -> &[f32; 2 * TILE_LANES] {
    // SAFETY: buf is 16 writable f32s; each store writes 8 of them, unaligned.
    unsafe {
        _mm256_storeu_ps(buf.as_mut_ptr(), v[0]);
        _mm256_storeu_ps(buf.as_mut_ptr().add(TILE_LANES), v[1]);
    }
    std::hint::black_box(buf)
}

/// Single-token lanes-order dots of [`TILE_ROWS`] rows of a block type `B` (Q4_0 or Q8_0)
/// against one Q8_0 activation, each row as `avx2::dot_q4_0_q8_0_impl` (or the Q8_0 one):
/// ```text
/// for each block i:
///   y = a[i].qs; c = correction(y)                                   once per block
///   d[r] = f16→f32(d(w[r][i])) · f16→f32(a[i].d)                     one vector for all rows
///   acc[r] = fma(d[r], (f32) dpbusd(c, codes(w[r][i]), y), acc[r])    per row
/// out[r] = hsum_float_8(acc[r])
/// ```
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn rows_lanes<B>(
    (w, a): (&[&[B]; TILE_ROWS], &[BlockQ8_0]),
    out: &mut [f32; TILE_ROWS],
    d: impl Fn(&B) -> [u8; 2],
    codes: impl Fn(&B) -> __m256i,
    correction: impl Fn(__m256i) -> __m256i,
) {
    let n = a.len();
    let w = exact(w, n);
    let mut acc = [_mm256_setzero_ps(); TILE_ROWS];
    let mut d_buf = [0f32; TILE_LANES];
    let pf = Prefetch::new(&w);
    for (i, y) in a.iter().enumerate() {
        pf.at(i);
        let dy = scale8(y.d);
        let dp = spill(
            _mm256_mul_ps(row_scales(w.map(|w| d(&w[i]))), dy),
            &mut d_buf,
        );
        let qy = load_qs(&y.qs);
        let c = correction(qy);
        for (r, acc_r) in acc.iter_mut().enumerate() {
            let q = _mm256_cvtepi32_ps(_mm256_dpbusd_epi32(c, codes(&w[r][i]), qy));
            *acc_r = _mm256_fmadd_ps(_mm256_set1_ps(dp[r]), q, *acc_r);
        }
    }
    for (o, s) in out.iter_mut().zip(&acc) {
        *o = hsum_float_8(*s);
    }
}

super::legacy_tiles::lanes_kernels! { "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni"; rows {
    /// Single-token Q4_0·Q8_0 (lanes order): [`rows_lanes`] of the unsigned nibbles, the
    /// offset of 8 taken out through the start.
    rows_q4_0_q8_0_impl(BlockQ4_0) = nibbles, q4_0_correction;
    /// Single-token Q8_0·Q8_0 (lanes order): [`rows_lanes`] of the weights offset by 128 into
    /// u8.
    rows_q8_0_q8_0_impl(BlockQ8_0) = q8_0_codes, q8_0_correction;
}}

/// Single-token Q4_1·Q8_1, each row as `avx2::dot_q4_1_q8_1_impl`: the lanes as in
/// [`rows_lanes`] (nibbles unsigned, no correction), and the rows' `m·s` chains side
/// by side in the odd lanes of two vectors. Each row's (d, m) pair is converted together, and
/// multiplied by the activation's (d, s):
/// ```text
/// p[2r], p[2r+1] = d_w[r]·d_a, m_w[r]·s_a                      two vectors for all rows
/// summs[2r+1] += p[2r+1]                                        (block order, per row)
/// acc[r] = fma(p[2r], (f32) dpbusd(0, nibbles(w[r][i]), y), acc[r])
/// out[r] = hsum_float_8(acc[r]) + summs[2r+1]
/// ```
/// (The even lanes of `summs` add up the d products, and are never read.) 256-bit vectors
/// throughout: a 512-bit instruction would close one of the three vector ports to all.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn rows_q4_1_q8_1_impl(w: &[&[BlockQ4_1]; TILE_ROWS], a: &[BlockQ8_1], out: &mut [f32; TILE_ROWS]) {
    let n = a.len();
    let w = exact(w, n);
    let zero = _mm256_setzero_si256();
    let mut acc = [_mm256_setzero_ps(); TILE_ROWS];
    let mut summs = [_mm256_setzero_ps(); 2];
    let mut p_buf = [0f32; 2 * TILE_LANES];
    let pf = Prefetch::new(&w);
    for (i, y) in a.iter().enumerate() {
        pf.at(i);
        let ds = u32::from_le_bytes([y.d[0], y.d[1], y.s[0], y.s[1]]);
        let ds = _mm256_cvtph_ps(_mm_set1_epi32(ds as i32));
        let dm = row_scale_pairs(w.map(|w| {
            let b = &w[i];
            [b.d[0], b.d[1], b.m[0], b.m[1]]
        }));
        let p = dm.map(|v| _mm256_mul_ps(v, ds));
        summs = std::array::from_fn(|h| _mm256_add_ps(summs[h], p[h]));
        let p = spill2(p, &mut p_buf);
        let qy = load_qs(&y.qs);
        for (r, acc_r) in acc.iter_mut().enumerate() {
            let q = _mm256_cvtepi32_ps(_mm256_dpbusd_epi32(zero, nibbles(&w[r][i].qs), qy));
            *acc_r = _mm256_fmadd_ps(_mm256_set1_ps(p[2 * r]), q, *acc_r);
        }
    }
    let mut s = [0f32; 2 * TILE_LANES];
    spill2(summs, &mut s);
    for (r, (o, acc_r)) in out.iter_mut().zip(&acc).enumerate() {
        *o = hsum_float_8(*acc_r) + s[2 * r + 1];
    }
}

/// Single-token Q4_0·Q8_0 (block-chain order), each row as `avx2::dot_q4_0_q8_0_chain_impl`:
/// the eight rows' chains side by side in the lanes of one vector (lane r), their block sums
/// reduced eight at a time as in `legacy_tiles.rs`' block-chain tile.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn rows_q4_0_q8_0_chain_impl(
    w: &[&[BlockQ4_0]; TILE_ROWS],
    a: &[BlockQ8_0],
    out: &mut [f32; TILE_ROWS],
) {
    let n = a.len();
    let w = exact(w, n);
    let mut acc = _mm256_setzero_ps();
    let pf = Prefetch::new(&w);
    for (i, y) in a.iter().enumerate() {
        pf.at(i);
        let dy = scale8(y.d);
        let d = _mm256_mul_ps(row_scales(w.map(|w| w[i].d)), dy);
        let qy = load_qs(&y.qs);
        let c = offset_correction(Q4_0_OFFSET, qy);
        let sums: [__m256i; TILE_LANES] =
            std::array::from_fn(|r| _mm256_dpbusd_epi32(c, nibbles(&w[r][i].qs), qy));
        let isum = _mm256_cvtepi32_ps(hsum_i32_8x8_small(sums));
        acc = _mm256_fmadd_ps(isum, d, acc);
    }
    *out = lanes(acc);
}

// ---------------------------------------------------------------------------------------------
// The dispatch table's entry points (`entry_points.rs`).
// ---------------------------------------------------------------------------------------------

entry_points! {
    wide_q8_0_q8_0(w: &[&[BlockQ8_0]; WIDE_ROWS], a: &Q8Group, out: &mut WideOut)
        = wide_q8_0_q8_0_impl::<{ WIDE_TOKENS / 2 }>;
    /// [`wide_q8_0_q8_0`] of the group's first half of tokens only (into `out`'s first half).
    wide_half_q8_0_q8_0(w: &[&[BlockQ8_0]; WIDE_ROWS], a: &Q8Group, out: &mut WideOut)
        = wide_q8_0_q8_0_impl::<{ WIDE_TOKENS / 4 }>;
    panel_q4_0_q8_0_chain(w: &[&[BlockQ4_0]; PANEL_ROWS], a: &[Q8Group], tokens: usize,
        out: &mut [f32]) = panel_q4_0_q8_0_chain_impl::<false>;
    /// [`panel_q4_0_q8_0_chain`] of sixteen IQ4_NL rows, in the order of llama.cpp's repacked
    /// IQ4_NL kernels (`oracle_repacked::dot_iq4_nl_q8_0_repacked`). The rows are passed as Q4_0 blocks:
    /// the two types store a block alike (checked above).
    panel_iq4_nl_q8_0_chain(w: &[&[BlockQ4_0]; PANEL_ROWS], a: &[Q8Group], tokens: usize,
        out: &mut [f32]) = panel_q4_0_q8_0_chain_impl::<true>;
    att_gemv(x: &[u16], y: &[f32], n_pad: usize) -> f32 = att_gemv_impl;
    att_gemv_rows(x: &[u16], stride: usize, y: &[f32], n_pad: usize, out: &mut [f32])
        = att_gemv_rows_impl;
    att_gemm_rows(x: &[f32], stride: usize, y: &[f32], out: &mut [f32]) = att_gemm_rows_impl;
    att_gemm_heads(x: &[f32], rows: (usize, usize), q: Queries<'_>, out: &mut [f32],
        out_stride: usize) = att_gemm_heads_impl;
    att_gemv_heads(x: &[u16], rows: (usize, usize), q: Queries<'_>, n_pad: usize,
        out: &mut [f32], out_stride: usize) = att_gemv_heads_impl;
    softmax(x: &mut [f32], scale: f32) = softmax_impl;
    swiglu(gate: &mut [f32], up: &[f32]) = swiglu_impl;
}

entry_points! {
    rows {
        rows_q4_0_q8_0(BlockQ4_0, BlockQ8_0) = rows_q4_0_q8_0_impl;
        rows_q4_0_q8_0_chain(BlockQ4_0, BlockQ8_0) = rows_q4_0_q8_0_chain_impl;
        rows_q4_1_q8_1(BlockQ4_1, BlockQ8_1) = rows_q4_1_q8_1_impl;
        rows_q8_0_q8_0(BlockQ8_0, BlockQ8_0) = rows_q8_0_q8_0_impl;
    }
}

compiled_for! { "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni";
    /// Elementwise, no fused multiply-adds: the same bits as any tier.
    kv_add_q8_0(row: &[BlockQ8_0], p: f32, out: &mut [f32]) = ops::add_scaled_q8_0;
}
