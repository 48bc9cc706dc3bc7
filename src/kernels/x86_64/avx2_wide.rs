//! AVX2's wide tile of Q5_0 weights against Q8_0 activations (`vec_dot`'s lanes order, ggml's
//! sign trick): [`WIDE_ROWS`] rows × [`WIDE_TOKENS`] tokens per call, Q5_0's prompt path (the
//! type SmolLM2's K-quant mixes fall back to on their 576-wide rows).
//!
//! The pass kernels of `kwide_kernels.rs` form each block's scale products in the loop that sums
//! the block, one f16 conversion and multiply per row and token. Here the scale products of a
//! run of [`CHUNK`] blocks for all 4 × 8 outputs are written first (the tokens' f32 scales come
//! precomputed, [`Q8Group`]; four weight scales converted per block), and the sums then run over
//! sub-tiles of [`SUB_ROWS`] × [`SUB_TOKENS`] outputs, each product broadcast by its load from
//! the finished table. Per block and output:
//! ```text
//! s   = Σ4 |x|·sign(y, x) per lane       (`maddubs` + `madd`, exact; |x| once per row and block)
//! acc = fma(d_x · d_y, (f32) s, acc)     (the product exact in f32, as the single dot's)
//! ```
//! then `hsum_float_8(acc)`: every output bit for bit the single dot's
//! (`oracle_vec_dot::dot_q5_0_q8_0`). The same kernel over Q8_0 weights (codes `q`) took about
//! 10% less time than the 2 × 4 tile of `legacy_tiles.rs` in a microbenchmark on Zen 3, but 4%
//! more CPU time in SmolLM2 Q8_0's pp128 (one thread, three alternated rounds), so Q8_0 keeps
//! its tile.

use std::arch::x86_64::*;

use super::vec256::{hsum_float_8, load_qs};
use super::Avx2;
use crate::kernels::blocks::{BlockQ5_0, BlockQ8_0};
use crate::kernels::{Q8Group, WideOf, WIDE_ROWS, WIDE_TOKENS};

/// The outputs of a wide tile, token-major.
type WideOut = [[f32; WIDE_ROWS]; WIDE_TOKENS];

/// Blocks whose scale products are written before their sums run: 32 blocks × 32 outputs of
/// f32 are 4 KiB, which stay in L1 beside the rows' blocks.
const CHUNK: usize = 32;
/// Rows × tokens of a sub-tile: eight accumulators, two rows' |x|, a token's block and the
/// temporaries within AVX2's sixteen vector registers.
const SUB_ROWS: usize = 2;
const SUB_TOKENS: usize = 4;

const _: () = assert!(WIDE_ROWS.is_multiple_of(SUB_ROWS));
const _: () = assert!(WIDE_ROWS == 2 * SUB_ROWS && WIDE_TOKENS == 2 * SUB_TOKENS);

impl Avx2 {
    /// The wide Q5_0 tile over a group's eight tokens, and over its first four; `codes` forms
    /// a block's signed values `q − 16` (`avx2_kquant.rs`' `q5_0_codes`).
    pub(in crate::kernels) fn wide_q5_0_q8_0(self) -> (WideOf<BlockQ5_0>, WideOf<BlockQ5_0>) {
        (wide_q5_0_q8_0, wide_half_q5_0_q8_0)
    }
}

fn wide_q5_0_q8_0(w: &[&[BlockQ5_0]; WIDE_ROWS], a: &Q8Group, out: &mut WideOut) {
    // SAFETY: handed out only by `Avx2::wide_q5_0_q8_0`, whose token exists only once AVX2,
    // FMA and F16C were detected (the function is private and called nowhere else).
    unsafe { wide_impl::<_, WIDE_TOKENS>(w, a, out, |b| super::avx2_kquant::q5_0_codes(b)) }
}

fn wide_half_q5_0_q8_0(w: &[&[BlockQ5_0]; WIDE_ROWS], a: &Q8Group, out: &mut WideOut) {
    // SAFETY: as for `wide_q5_0_q8_0`.
    unsafe { wide_impl::<_, { WIDE_TOKENS / 2 }>(w, a, out, |b| super::avx2_kquant::q5_0_codes(b)) }
}

/// A weight block with an f16 scale, as the wide tile reads it (Q5_0's).
trait WideBlock {
    /// The block's f16 scale, as stored.
    fn scale(&self) -> [u8; 2];
}

impl WideBlock for BlockQ5_0 {
    fn scale(&self) -> [u8; 2] {
        self.d
    }
}

/// The accumulators of one sub-tile: `[token][row]`.
type SubAcc = [[__m256; SUB_ROWS]; SUB_TOKENS];

/// The scale products of a run of blocks: `[j][t * WIDE_ROWS + r]` = `d_w[r] · d_y[t]` of the
/// run's block j.
type Products = [[f32; WIDE_ROWS * WIDE_TOKENS]; CHUNK];

/// `out[t][r] = dot(w[r], a[t])` for the group's first `TOKENS` tokens (the rest of `out` is
/// left as it is).
#[target_feature(enable = "avx2,fma,f16c")]
fn wide_impl<B: WideBlock, const TOKENS: usize>(
    w: &[&[B]; WIDE_ROWS],
    a: &Q8Group,
    out: &mut WideOut,
    codes: impl Fn(&B) -> __m256i + Copy,
) {
    const { assert!(TOKENS <= WIDE_TOKENS && TOKENS.is_multiple_of(SUB_TOKENS)) };
    let n = a.blocks[0].len();
    assert!(
        a.blocks.iter().all(|b| b.len() == n)
            && a.scales.iter().all(|s| s.len() == n)
            && w.iter().all(|r| r.len() == n),
        "wide tile rows and activations of unequal lengths"
    );
    let zero = [[_mm256_setzero_ps(); SUB_ROWS]; SUB_TOKENS];
    let mut acc = [zero; 4];
    let mut dp = std::mem::MaybeUninit::<Products>::uninit();
    for c0 in (0..n).step_by(CHUNK) {
        let len = CHUNK.min(n - c0);
        for j in 0..len {
            let i = c0 + j;
            let mut h = 0u64;
            for (r, row) in w.iter().enumerate() {
                h |= u64::from(u16::from_le_bytes(row[i].scale())) << (16 * r);
            }
            let dw = _mm_cvtph_ps(_mm_cvtsi64_si128(h as i64));
            for t in 0..TOKENS {
                let p = _mm_mul_ps(dw, _mm_set1_ps(a.scales[t][i]));
                // SAFETY: j < CHUNK and t < WIDE_TOKENS, so the four f32s from
                // [j][t · WIDE_ROWS] lie inside `dp`; the store is unaligned.
                unsafe {
                    let at = dp.as_mut_ptr().cast::<f32>();
                    _mm_storeu_ps(at.add(j * WIDE_ROWS * WIDE_TOKENS + t * WIDE_ROWS), p);
                }
            }
        }
        // SAFETY: the first `len` entries were all written just above (every token up to
        // TOKENS, every row), and the sub-tiles read no others (tokens below TOKENS only).
        let dp = unsafe { &dp.assume_init_ref()[..len] };
        let (x, y) = (w, &a.blocks);
        sub_tile::<_, 0, 0>(x, y, c0, dp, &mut acc[0], codes);
        sub_tile::<_, SUB_ROWS, 0>(x, y, c0, dp, &mut acc[1], codes);
        if TOKENS > SUB_TOKENS {
            sub_tile::<_, 0, SUB_TOKENS>(x, y, c0, dp, &mut acc[2], codes);
            sub_tile::<_, SUB_ROWS, SUB_TOKENS>(x, y, c0, dp, &mut acc[3], codes);
        }
    }
    for (s, acc_s) in acc.iter().enumerate().take(2 * TOKENS / SUB_TOKENS) {
        let (r0, t0) = ((s % 2) * SUB_ROWS, (s / 2) * SUB_TOKENS);
        for (t, acc_t) in acc_s.iter().enumerate() {
            for (r, v) in acc_t.iter().enumerate() {
                out[t0 + t][r0 + r] = hsum_float_8(*v);
            }
        }
    }
}

/// One sub-tile's sums, rows `R0..` and tokens `T0..`, over the run of blocks from `c0` whose
/// scale products `dp` holds (one entry per block).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn sub_tile<B, const R0: usize, const T0: usize>(
    w: &[&[B]; WIDE_ROWS],
    a: &[&[BlockQ8_0]; WIDE_TOKENS],
    c0: usize,
    dp: &[[f32; WIDE_ROWS * WIDE_TOKENS]],
    acc_s: &mut SubAcc,
    codes: impl Fn(&B) -> __m256i,
) {
    const { assert!(R0 + SUB_ROWS <= WIDE_ROWS && T0 + SUB_TOKENS <= WIDE_TOKENS) };
    let rows = [&w[R0][c0..c0 + dp.len()], &w[R0 + 1][c0..c0 + dp.len()]];
    let toks = [
        &a[T0][c0..c0 + dp.len()],
        &a[T0 + 1][c0..c0 + dp.len()],
        &a[T0 + 2][c0..c0 + dp.len()],
        &a[T0 + 3][c0..c0 + dp.len()],
    ];
    const { assert!(SUB_ROWS == 2 && SUB_TOKENS == 4) };
    let ones = _mm256_set1_epi16(1);
    let mut acc = *acc_s;
    for (i, dpi) in dp.iter().enumerate() {
        let x = [codes(&rows[0][i]), codes(&rows[1][i])];
        let ax = [_mm256_sign_epi8(x[0], x[0]), _mm256_sign_epi8(x[1], x[1])];
        for (t, acc_t) in acc.iter_mut().enumerate() {
            let y = load_qs(&toks[t][i].qs);
            for (r, acc_tr) in acc_t.iter_mut().enumerate() {
                let s = _mm256_maddubs_epi16(ax[r], _mm256_sign_epi8(y, x[r]));
                let s = _mm256_madd_epi16(s, ones);
                let d = _mm256_set1_ps(dpi[(T0 + t) * WIDE_ROWS + R0 + r]);
                *acc_tr = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(s), *acc_tr);
            }
        }
    }
    *acc_s = acc;
}
