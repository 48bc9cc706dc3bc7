//! AVX2's single-token MXFP4·Q8_0 kernel in the repacked order
//! (`oracle_mxfp4::dot_mxfp4_q8_0_repacked`: one chain per row over its blocks,
//! `acc = fma(Σ v·y, e8m0_half(x.e) · f16(y.d), acc)`), decode's path for the expert
//! matrices llama.cpp repacks (gpt-oss's, and any `_exps=mxfp4` mixture).
//!
//! As the Q4_0 block-chain kernels (`avx2_panel.rs`), it keeps eight rows side by side in the
//! lanes of one vector, so no sum is reduced across lanes: per block, the eight rows' nibble
//! bytes are transposed once ([`transpose_qs`]) and split into eight vectors of four codes per
//! lane, and the token's block is eight four-byte broadcasts. `maddubs` needs one unsigned
//! operand, so the codes look up the MXFP4 values shifted by [`OFFSET`] (0..=24) and the
//! shift comes back out through the block's sum of activations:
//! ```text
//! p_lo[r] = Σ_{k<4} maddubs(u_k[r], y[4 values of k])   i16: |p| ≤ 4 · 2 · 24 · 128 = 24576
//! p_hi[r] = Σ_{k≥4} …                                    (eight groups would overflow i16)
//! isum[r] = madd(p_lo, 1)[r] + madd(p_hi, 1)[r] − 12·Σy  = Σ v·y, exact in i32
//! acc[r]  = fma((f32) isum[r], e8m0_half(e[r]) · d_y, acc[r])
//! ```
//! against the generic pass's per-row sign trick, `maddubs`, `madd` and share of a horizontal
//! reduction (`kwide_kernels::lookup_repacked_rows`, which still takes the other orders and
//! runs of rows that are not whole groups of eight). Prompts take the same kernel over up to
//! four tokens at a time, each block's codes looked up once for all of them.
//!
//! The kernel's `#[target_feature]` function and its safe wrapper are private to this file; the
//! wrapper leaves it only as a function pointer from a method on the [`Avx2`] token.

use std::arch::x86_64::*;

use super::prefetch::Prefetch;
use super::vec256::{group, lanes, q8_block, transpose_qs};
use super::Avx2;
use crate::kernels::act::{checked_blocks, q8_0_row};
use crate::kernels::blocks::{BlockMxfp4, KVALUES_MXFP4};
use crate::kernels::entries::{RunDot, Variant};
use crate::kernels::mxfp4::{E8M0_FIRST_NORMAL, E8M0_HALF_SUBNORMAL, F32_EXP_SHIFT};
use crate::kernels::oracle_mxfp4::dot_mxfp4_q8_0_repacked;
use crate::kernels::{ActRow, Q8Row, QK, TILE_ROWS};

/// The largest magnitude in the MXFP4 table: codes look up `value + OFFSET`, never negative.
const OFFSET: i8 = 12;
/// Groups of four codes in a block: the low nibbles of four byte groups, then the high.
const NIBBLE_GROUPS: usize = 8;
/// Groups whose `maddubs` pairs one i16 sum takes before it is widened (see the module
/// documentation's bound).
const GROUPS_PER_SUM: usize = 4;

/// [`KVALUES_MXFP4`] shifted by [`OFFSET`], as the unsigned bytes `pshufb` looks up.
const SHIFTED: [u8; 16] = {
    let mut t = [0u8; 16];
    let mut i = 0;
    while i < 16 {
        t[i] = (KVALUES_MXFP4[i] + OFFSET) as u8;
        i += 1;
    }
    t
};

const _: () = {
    let mut i = 0;
    while i < 16 {
        assert!(KVALUES_MXFP4[i] >= -OFFSET && KVALUES_MXFP4[i] <= OFFSET);
        i += 1;
    }
    // Four pairs of the largest shifted value and activation (−128 included) fit an i16.
    assert!(GROUPS_PER_SUM as i32 * 2 * (2 * OFFSET as i32) * 128 <= i16::MAX as i32);
    assert!(NIBBLE_GROUPS == 2 * GROUPS_PER_SUM);
};

/// Where, in an activation block, the four values of nibble group `k` sit: the low nibbles of
/// bytes 4k..4k+4 are values 4k..4k+4, the high ones values 16 + 4k..16 + 4k + 4.
const fn y_offset(k: usize) -> usize {
    if k < 4 {
        4 * k
    } else {
        16 + 4 * (k - 4)
    }
}

impl Avx2 {
    /// MXFP4's run kernel for decode ([`run_mxfp4`]).
    pub(in crate::kernels) fn run_mxfp4(self) -> RunDot {
        run_mxfp4
    }

    /// MXFP4's prompt tile in the repacked order over whole groups of eight rows
    /// ([`tile_mxfp4_chain`]).
    pub(in crate::kernels) fn tile_mxfp4_chain(self) -> fn(&[&[u8]], &[ActRow], &mut [f32]) {
        tile_mxfp4_chain
    }
}

/// `out[r] = dot_repacked(row r, act)` for the `out.len()` rows back to back in `rows`: whole
/// groups of eight through [`tile8_impl`], the rest through the scalar oracle (the rows
/// llama.cpp repacks are whole groups of eight; a thread's run of them ends on a group). Takes
/// only the repacked order: `false` for the others, which the generic passes compute.
fn run_mxfp4(rows: &[u8], act: &ActRow, variant: Variant, out: &mut [f32]) -> bool {
    if variant != Variant::Repacked {
        return false;
    }
    let n = act.len() / QK;
    let k = out.len();
    if n == 0 {
        return false;
    }
    let a = q8_0_row(act, n);
    let w = checked_blocks::<BlockMxfp4>(rows, n * k);
    let whole = k / TILE_ROWS * TILE_ROWS;
    for (wg, o) in w
        .chunks_exact(TILE_ROWS * n)
        .zip(out.chunks_exact_mut(TILE_ROWS))
    {
        let rows: [&[BlockMxfp4]; TILE_ROWS] = std::array::from_fn(|r| &wg[r * n..(r + 1) * n]);
        // SAFETY: `run_mxfp4` is handed out only by `Avx2::run_mxfp4`, whose token exists only
        // once AVX2, FMA and F16C were detected.
        let [got] = unsafe { tile8_impl(&rows, [a]) };
        o.copy_from_slice(&got);
    }
    for (r, o) in out.iter_mut().enumerate().skip(whole) {
        *o = dot_mxfp4_q8_0_repacked(&w[r * n..(r + 1) * n], &a.blocks);
    }
    true
}

/// The halved E8M0 scales of eight rows' codes `e` (row r in lane r), as
/// `mxfp4::e8m0_to_f32_half` builds each from its bits.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn e8m0_half8(e: [u8; TILE_ROWS]) -> __m256 {
    // SAFETY: e is eight readable bytes; the load is unaligned.
    let v = _mm256_cvtepu8_epi32(unsafe { _mm_loadl_epi64(e.as_ptr().cast()) });
    let one = _mm256_set1_epi32(1);
    let normal = _mm256_sll_epi32(
        _mm256_sub_epi32(v, one),
        _mm_cvtsi32_si128(F32_EXP_SHIFT as i32),
    );
    let sub = _mm256_sllv_epi32(_mm256_set1_epi32(E8M0_HALF_SUBNORMAL as i32), v);
    let is_normal = _mm256_cmpgt_epi32(v, _mm256_set1_epi32(i32::from(E8M0_FIRST_NORMAL) - 1));
    _mm256_castsi256_ps(_mm256_blendv_epi8(sub, normal, is_normal))
}

/// Eight rows against `T` tokens' activations `acts`: `out[t]` holds token t's eight outputs,
/// each row's chain in its lane. Blocks outer: a block of the eight rows is transposed and
/// looked up once for every token, then each token's block is eight broadcasts.
#[target_feature(enable = "avx2,fma,f16c")]
fn tile8_impl<const T: usize>(
    rows: &[&[BlockMxfp4]; TILE_ROWS],
    acts: [&Q8Row; T],
) -> [[f32; TILE_ROWS]; T] {
    let n = acts[0].blocks.len();
    assert!(
        rows.iter().all(|r| r.len() == n)
            && acts
                .iter()
                .all(|a| a.blocks.len() == n && a.sums.len() == n && a.scales.len() == n),
        "mxfp4 tile: rows and activations of other lengths than {n} blocks"
    );
    let pf = Prefetch::new(rows);
    // SAFETY: SHIFTED is sixteen readable bytes; the load is unaligned.
    let table = _mm256_broadcastsi128_si256(unsafe { _mm_loadu_si128(SHIFTED.as_ptr().cast()) });
    let (low, ones) = (_mm256_set1_epi8(0x0f), _mm256_set1_epi16(1));
    let mut acc = [_mm256_setzero_ps(); T];
    for i in 0..n {
        pf.at(i);
        let x = transpose_qs(rows.map(|w| &w[i].qs));
        let dw = e8m0_half8(rows.map(|w| w[i].e[0]));
        // SAFETY: every slice of every activation has exactly n elements (asserted above),
        // and i < n.
        let blocks = acts.map(|a| unsafe { q8_block(a, i) });
        let mut p = [[_mm256_setzero_si256(); NIBBLE_GROUPS / GROUPS_PER_SUM]; T];
        // Groups outer, tokens inner: the tokens' sums are independent chains.
        for k in 0..NIBBLE_GROUPS {
            let codes = if k < 4 {
                _mm256_and_si256(x[k], low)
            } else {
                _mm256_and_si256(_mm256_srli_epi16::<4>(x[k - 4]), low)
            };
            let u = _mm256_shuffle_epi8(table, codes);
            for (pt, (y, _, _)) in p.iter_mut().zip(&blocks) {
                let b = _mm256_set1_epi32(group(y, y_offset(k)));
                let s = &mut pt[k / GROUPS_PER_SUM];
                *s = _mm256_add_epi16(*s, _mm256_maddubs_epi16(u, b));
            }
        }
        for ((acc, pt), (_, sum, dy)) in acc.iter_mut().zip(&p).zip(&blocks) {
            let isum = _mm256_add_epi32(
                _mm256_add_epi32(
                    _mm256_madd_epi16(pt[0], ones),
                    _mm256_madd_epi16(pt[1], ones),
                ),
                _mm256_set1_epi32(-i32::from(OFFSET) * sum),
            );
            let d = _mm256_mul_ps(dw, _mm256_set1_ps(*dy));
            *acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), d, *acc);
        }
    }
    acc.map(|v| lanes(v))
}

/// Tokens a call of [`tile8_impl`] takes at most: four tokens' two i16 sums, the looked-up
/// codes, a broadcast and the table fill the sixteen registers.
const TILE_TOKENS: usize = 4;

/// `out[t * rows.len() + r] = dot_repacked(rows[r], acts[t])` for rows in whole groups of
/// eight, [`TILE_TOKENS`] tokens per pass (the last pass fewer).
///
/// # Panics
/// If `rows.len()` is not a multiple of eight, or the rows and activations are not all of
/// one length in whole blocks.
fn tile_mxfp4_chain(rows: &[&[u8]], acts: &[ActRow], out: &mut [f32]) {
    let k = rows.len();
    assert!(
        k.is_multiple_of(TILE_ROWS) && out.len() == k * acts.len(),
        "mxfp4 tile: {k} rows, {} outputs for {} tokens",
        out.len(),
        acts.len()
    );
    let Some(first) = acts.first() else {
        return;
    };
    let n = first.len() / QK;
    let a: Vec<&Q8Row> = acts.iter().map(|a| q8_0_row(a, n)).collect();
    for (g, group) in rows.chunks_exact(TILE_ROWS).enumerate() {
        let w: [&[BlockMxfp4]; TILE_ROWS] = std::array::from_fn(|r| checked_blocks(group[r], n));
        for (c, chunk) in a.chunks(TILE_TOKENS).enumerate() {
            let mut put = |t: usize, o: [f32; TILE_ROWS]| {
                let at = (c * TILE_TOKENS + t) * k + g * TILE_ROWS;
                out[at..at + TILE_ROWS].copy_from_slice(&o);
            };
            // SAFETY: `tile_mxfp4_chain` is handed out only by `Avx2::tile_mxfp4_chain`, whose
            // token exists only once AVX2, FMA and F16C were detected.
            unsafe {
                match *chunk {
                    [a0, a1, a2, a3] => {
                        for (t, o) in tile8_impl(&w, [a0, a1, a2, a3]).into_iter().enumerate() {
                            put(t, o);
                        }
                    }
                    [a0, a1, a2] => {
                        for (t, o) in tile8_impl(&w, [a0, a1, a2]).into_iter().enumerate() {
                            put(t, o);
                        }
                    }
                    [a0, a1] => {
                        for (t, o) in tile8_impl(&w, [a0, a1]).into_iter().enumerate() {
                            put(t, o);
                        }
                    }
                    [a0] => put(0, tile8_impl(&w, [a0])[0]),
                    _ => unreachable!("chunks of one to four tokens"),
                }
            }
        }
    }
}
