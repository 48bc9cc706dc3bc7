//! The AVX-512 prompt kernels of the IQ2, IQ3 and IQ1 types in the file's layout: sixteen rows
//! (or two groups of sixteen) against up to 64 tokens, in the tiled matmul's order
//! (`oracle_tiled::dot_iq_grid_q8_k_tiled`, `dot_iq1_q8_k_tiled`).
//!
//! Per super-block each group's rows are unpacked once (`kquant_rows::iq_grid_panel_row`,
//! `iq1_panel_row`) and transposed, so that `codes[g]` holds elements `4g..4g + 4` of row r in
//! lane r. Unlike the packed types' passes (`avx512_packed_tile.rs`), the codes stay signed
//! and the activations are made unsigned instead (`q + 128`, XOR of the sign bit, once per
//! token and super-block into a small buffer, a pass's tokens at a time), so that `vpdpbusd`
//! of a token's broadcast against the codes gives per scale group `Σ c·q + 128·Σ c`. The row
//! term `128·Σ_s sc_s·Σ_{e∈s} c_e` is an integer known once the rows are unpacked; one
//! subtraction takes it off each token's `s1`, where biased codes needed `Σ_s sc_s·bsum_s` per
//! row and token (a `vpdpwssd` per pair of scale groups). All of it is exact (wrapping) i32
//! arithmetic, so `s1` is the oracle's integer and the float chain (`t = s1·d; acc = fma(t,
//! y.d, acc)`) its chain. (IQ2_XS, IQ2_S and the IQ1 types, sixteen scale groups a
//! super-block, read 7–12% faster than through the packed passes, the others 0–5%: 64 tokens,
//! 32 rows a call, `iq_tile_throughput` in `kernels_k`.)
//!
//! The `#[target_feature]` functions are `pub(super)` for `avx512_panel.rs`'s safe wrappers,
//! which the table hands out only after AVX2, FMA, F16C and AVX-512 F/BW/VL/VNNI were detected.

use std::arch::x86_64::*;

use super::kquant_rows::{iq1_panel_row, iq_grid_panel_row, PanelRow, SUB16S};
use super::packed_kernels::{GROUP, K_GROUPS as GROUPS, MAX_SUBS, MAX_TOKENS, SUBS};
use crate::kernels::blocks::{BlockQ8K, Iq1Grid, IqGrid, QK_K};
use crate::kernels::pack::PACK_ROWS;

/// Tokens per pass over an unpacked step (their sums stay in registers).
const PASS: usize = 8;
/// Most groups of four values sharing a scale (scale groups of 32).
const MAX_PER: usize = GROUPS / SUBS;
/// The activations are taken as `q + 128` (unsigned for `vpdpbusd`): 128 = 1 << this.
const ACT_BIAS_SHIFT: u32 = 7;
/// The sign bit of every byte: XOR with it makes an i8 `q` the u8 `q + 128`.
const ACT_BIAS_BYTE: i8 = i8::MIN;
/// Bytes of one 512-bit vector.
const VEC_BYTES: usize = 64;

/// An unpacked step of sixteen rows: `codes[g]` holds elements `4g..4g + 4` of row r in lane
/// r (signed), the scales per scale group as i32 lanes, the row term `128·Σ_s sc_s·Σ_{e∈s}
/// c_e` and the rows' `d` (times the type's factor).
struct Step {
    codes: [__m512i; GROUPS],
    sc: [__m512i; MAX_SUBS],
    corr: __m512i,
    d: __m512,
}

/// How a type's super-block becomes a row of the step: `unpack` gives its signed codes and
/// `NSUB` scales, `d` its f16 scale (times `d_mul`, where the type scales its `d`).
struct Rows<U, D> {
    unpack: U,
    d: D,
    d_mul: Option<f32>,
}

/// `G` groups of sixteen rows (one or two) of an IQ2 or IQ3 type in the file's layout against
/// every token: codes the signed grid values, `NSUB` scales `2·ls + 1` a super-block (sixteen
/// for IQ2_XS and IQ2_S, else eight), `d` times the type's factor (IQ2's eighth, IQ3_XXS's
/// quarter, exact) as the oracle scales it. `out[t·16G + 16j + r]` is row r of group j against
/// token t.
///
/// # Panics
/// If a row or a token does not have `ys[0].len()` blocks (with no tokens: if a row has any),
/// there are more than 64 tokens, or `out` is shorter than `16G` a token.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(super) fn iq_grid_rows<B: IqGrid, const NSUB: usize, const G: usize>(
    w: [&[&[B]; PACK_ROWS]; G],
    ys: &[&[BlockQ8K]],
    out: &mut [f32],
) {
    let rows = Rows {
        unpack: |a: &B| iq_grid_panel_row::<B, NSUB>(a),
        d: |a: &B| a.d(),
        d_mul: B::SUM_SCALE,
    };
    file_rows::<B, NSUB, G>(w, ys, out, rows)
}

/// `G` groups of sixteen rows of an IQ1 type in the file's layout against every token: codes
/// `8·grid ± 1` (the group's delta sign), scales per half of 16, `d` times an eighth; `out` as
/// [`iq_grid_rows`]'s, and its panics.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(super) fn iq1_rows<B: Iq1Grid, const G: usize>(
    w: [&[&[B]; PACK_ROWS]; G],
    ys: &[&[BlockQ8K]],
    out: &mut [f32],
) {
    use crate::kernels::oracle_tiled::IQ1_CODE_SCALE;
    let rows = Rows {
        unpack: |a: &B| iq1_panel_row(a),
        d: |a: &B| a.d(),
        d_mul: Some(1.0 / IQ1_CODE_SCALE as f32),
    };
    file_rows::<B, SUB16S, G>(w, ys, out, rows)
}

/// [`iq_grid_rows`] of any type's [`Rows`]: per super-block each group unpacked once
/// ([`unpack`]), then the tokens [`PASS`] at a time, their activations biased into a buffer
/// first ([`pass`]).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
// `i` is the super-block of every row and every token, not a place in one of them.
#[allow(clippy::needless_range_loop)]
fn file_rows<B, const NSUB: usize, const G: usize>(
    w: [&[&[B]; PACK_ROWS]; G],
    ys: &[&[BlockQ8K]],
    out: &mut [f32],
    rows: Rows<impl Fn(&B) -> PanelRow<NSUB>, impl Fn(&B) -> [u8; 2]>,
) {
    let nt = ys.len();
    let n = ys.first().map_or(0, |y| y.len());
    assert!(nt <= MAX_TOKENS, "a tile of {nt} tokens");
    assert!(
        w.iter().all(|g| g.iter().all(|r| r.len() == n)) && ys.iter().all(|t| t.len() == n),
        "row length mismatch"
    );
    assert!(out.len() >= nt * G * PACK_ROWS, "output too short");
    if n == 0 {
        return;
    }
    let zero = _mm512_setzero_si512();
    let mut st: [Step; G] = std::array::from_fn(|_| Step {
        codes: [zero; GROUPS],
        sc: [zero; MAX_SUBS],
        corr: zero,
        d: _mm512_setzero_ps(),
    });
    let mut acc = [[_mm512_setzero_ps(); G]; MAX_TOKENS];
    let mut acts = [[0u8; QK_K]; PASS];
    let bias = _mm512_set1_epi8(ACT_BIAS_BYTE);
    for i in 0..n {
        for (st, w) in st.iter_mut().zip(w) {
            unpack::<B, NSUB>(w, i, &rows, st);
        }
        let mut t0 = 0;
        while t0 < nt {
            let k = PASS.min(nt - t0);
            // The pass's tokens (the last repeated where fewer are left), `q + 128`.
            let blocks: [&BlockQ8K; PASS] = std::array::from_fn(|t| &ys[t0 + t.min(k - 1)][i]);
            for (q, b) in acts.iter_mut().zip(blocks) {
                for (dst, src) in q
                    .chunks_exact_mut(VEC_BYTES)
                    .zip(b.qs.chunks_exact(VEC_BYTES))
                {
                    // SAFETY: both are 64 bytes (exact chunks of 64); the accesses are
                    // unaligned.
                    unsafe {
                        let v = _mm512_loadu_si512(src.as_ptr().cast());
                        _mm512_storeu_si512(dst.as_mut_ptr().cast(), _mm512_xor_si512(v, bias));
                    }
                }
            }
            let dy: [f32; PASS] = std::array::from_fn(|t| blocks[t].d);
            pass::<NSUB, G>(&st, &acts, dy, &mut acc[t0..t0 + k]);
            t0 += k;
        }
    }
    for (t, acc) in acc.iter().take(nt).enumerate() {
        for (j, a) in acc.iter().enumerate() {
            let o = &mut out[t * G * PACK_ROWS + j * PACK_ROWS..][..PACK_ROWS];
            // SAFETY: `o` is sixteen writable f32 (sliced above); the store is unaligned.
            unsafe { _mm512_storeu_ps(o.as_mut_ptr(), *a) };
        }
    }
}

/// Super-block `i` of the sixteen rows `w` unpacked into `st`: each row's runs of signed codes
/// (`rows.unpack`) transposed so the rows sit in the lanes, the scales, the row term and `d`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn unpack<B, const NSUB: usize>(
    w: &[&[B]; PACK_ROWS],
    i: usize,
    rows: &Rows<impl Fn(&B) -> PanelRow<NSUB>, impl Fn(&B) -> [u8; 2]>,
    st: &mut Step,
) {
    let sc = super::avx512_packed_tile::unpack_transposed(w, i, &rows.unpack, &mut st.codes);
    // Σ of each scale group's codes per row (lane), times its scale, summed: the row term.
    let ones = _mm512_set1_epi8(1);
    let per = GROUPS / NSUB;
    let mut corr = _mm512_setzero_si512();
    for (s, scs) in sc.iter().enumerate().take(NSUB) {
        // SAFETY: `scs` is sixteen i32, 64 bytes; the load is unaligned.
        st.sc[s] = unsafe { _mm512_loadu_si512(scs.as_ptr().cast()) };
        let sum = st.codes[s * per..(s + 1) * per]
            .iter()
            .fold(_mm512_setzero_si512(), |a, &c| {
                _mm512_dpbusd_epi32(a, ones, c)
            });
        corr = _mm512_add_epi32(corr, _mm512_mullo_epi32(st.sc[s], sum));
    }
    st.corr = _mm512_slli_epi32::<{ ACT_BIAS_SHIFT }>(corr);
    let h: [u16; PACK_ROWS] = std::array::from_fn(|r| u16::from_le_bytes((rows.d)(&w[r][i])));
    // SAFETY: `h` is sixteen u16, 32 bytes; the load is unaligned.
    let mut d = _mm512_cvtph_ps(unsafe { _mm256_loadu_si256(h.as_ptr().cast()) });
    if let Some(f) = rows.d_mul {
        d = _mm512_mul_ps(d, _mm512_set1_ps(f));
    }
    st.d = d;
}

/// One unpacked super-block of `G` groups against a pass of tokens (`acts`: their activations
/// plus 128; `dy` their scales; only the first `acc.len()` are real, the rest repeats whose
/// results are dropped), into their chains `acc`: per scale group s and token `sc_s·Σ_{e∈s}
/// c_e·(q_e + 128)`, the scale group's codes held in registers while every token runs them
/// (each token's broadcast serving every group), then `s1 = Σ_s … − corr` and the tiled
/// order's step `acc = fma(s1·d, y.d, acc)`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn pass<const S: usize, const G: usize>(
    st: &[Step; G],
    acts: &[[u8; QK_K]; PASS],
    dy: [f32; PASS],
    acc: &mut [[__m512; G]],
) {
    let per = GROUPS / S;
    let zero = _mm512_setzero_si512();
    let mut s1 = [[zero; G]; PASS];
    for s in 0..S {
        let g0 = s * per;
        let c: [[__m512i; G]; MAX_PER] =
            std::array::from_fn(|g| std::array::from_fn(|j| st[j].codes[g0 + g.min(per - 1)]));
        for (q, s1) in acts.iter().zip(s1.iter_mut()) {
            let q = &q[GROUP * g0..GROUP * (g0 + per)];
            let mut a = [zero; G];
            for (q, c) in q.chunks_exact(GROUP).zip(&c) {
                // SAFETY: `q` is four readable bytes (exact chunks of four); the read is
                // unaligned.
                let y = _mm512_set1_epi32(unsafe { q.as_ptr().cast::<i32>().read_unaligned() });
                for j in 0..G {
                    a[j] = _mm512_dpbusd_epi32(a[j], y, c[j]);
                }
            }
            for j in 0..G {
                s1[j] = _mm512_add_epi32(s1[j], _mm512_mullo_epi32(st[j].sc[s], a[j]));
            }
        }
    }
    for ((acc, s1), dy) in acc.iter_mut().zip(s1).zip(dy) {
        let dy = _mm512_set1_ps(dy);
        for ((acc, s1), st) in acc.iter_mut().zip(s1).zip(st) {
            let v = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(s1, st.corr)), st.d);
            *acc = _mm512_fmadd_ps(v, dy, *acc);
        }
    }
}
