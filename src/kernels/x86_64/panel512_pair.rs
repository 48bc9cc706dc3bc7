//! The AVX-512 block-chain panel over two packed Q4_0 (or IQ4_NL) groups at once: each token's
//! activation broadcast feeds both groups' `vpdpbusd`, as the packed K-quant tiles take two
//! groups per broadcast (`kpacked_tile.rs`). Every row's integers and float chain are those of
//! the one-group panel (`avx512::panel_q4_0_q8_0_chain_impl`), so the outputs are its bits:
//! per block, `isum = −offset·Σy + Σ_k vpdpbusd(codes_k, y_k)` (exact in i32), then
//! `acc = fma(isum, d_w·d_y, acc)`.
//!
//! Four tokens per pass keep both groups' eight sums, the sixteen code vectors and the
//! broadcast in registers.
//!
//! The `#[target_feature]` function is private; the table hands out the safe wrappers only after
//! AVX2, FMA, F16C and AVX-512 F/BW/VL/VNNI were detected.

use std::arch::x86_64::*;

use super::avx2::group;
use super::avx2_panel::{check_panel, prefetch_packed_step, PANEL_PREFETCH_STEPS};
use super::avx512::{chain_codes, packed_block16, panel_codes, PANEL_CODES};
use crate::kernels::blocks::BlockQ4_0;
use crate::kernels::{Q8Group, MAX_PANEL_TOKENS, PANEL_ROWS, PANEL_TOKENS};

/// Tokens per pass over a block of both groups.
const PASS: usize = 4;

const _: () = assert!(PANEL_TOKENS.is_multiple_of(PASS));

/// The one-group packed Q4_0 panel of `w[0]` and of `w[1]` (two packed groups of one length)
/// against the same tokens, into `out[0]` and `out[1]`.
///
/// # Panics
/// As the one-group panel does, for either group.
pub(in crate::kernels) fn panel_pair_q4_0_q8_0_packed(
    w: [&[BlockQ4_0]; 2],
    a: &[Q8Group],
    tokens: usize,
    out: [&mut [f32]; 2],
) {
    // SAFETY: only reachable through the table built after every feature above was detected.
    unsafe { pair_impl::<false>(w, a, tokens, out) }
}

/// [`panel_pair_q4_0_q8_0_packed`] of two packed groups of IQ4_NL rows (the value table's
/// codes).
pub(in crate::kernels) fn panel_pair_iq4_nl_q8_0_packed(
    w: [&[BlockQ4_0]; 2],
    a: &[Q8Group],
    tokens: usize,
    out: [&mut [f32]; 2],
) {
    // SAFETY: only reachable through the table built after every feature above was detected.
    unsafe { pair_impl::<true>(w, a, tokens, out) }
}

/// Both groups' panels: per block, the two groups' codes, then four tokens per pass, each
/// token's sums for both groups from one broadcast per four-byte group.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn pair_impl<const NL: bool>(
    w: [&[BlockQ4_0]; 2],
    a: &[Q8Group],
    tokens: usize,
    out: [&mut [f32]; 2],
) {
    let none = [&w[0][..0]; PANEL_ROWS];
    let n = check_panel(Some(w[0]), &none, a, tokens, out[0]);
    assert_eq!(check_panel(Some(w[1]), &none, a, tokens, out[1]), n);
    let (table, offset) = chain_codes::<NL>();
    // Passes past the last token (a padded group's copies) are skipped.
    let passes = tokens.div_ceil(PASS);
    let mut acc = [[_mm512_setzero_ps(); MAX_PANEL_TOKENS]; 2];
    for i in 0..n {
        prefetch_packed_step(w[0], i + PANEL_PREFETCH_STEPS);
        prefetch_packed_step(w[1], i + PANEL_PREFETCH_STEPS);
        let (x0, dw0) = packed_block16(w[0], i);
        let (x1, dw1) = packed_block16(w[1], i);
        let (q0, q1) = (panel_codes::<NL>(x0, table), panel_codes::<NL>(x1, table));
        for p in 0..passes {
            let (ag, t0) = (&a[p * PASS / PANEL_TOKENS], p * PASS % PANEL_TOKENS);
            // −offset·Σy starts each token's chains (exact in i32: |Σ y| ≤ 32·128).
            let mut s0: [__m512i; PASS] = std::array::from_fn(|t| {
                // SAFETY: every slice of every group has exactly n elements (checked above),
                // and i < n.
                let s = unsafe { *ag.sums[t0 + t].get_unchecked(i) };
                _mm512_set1_epi32(-offset * s)
            });
            let mut s1 = s0;
            // SAFETY: as for the sums: n blocks per token, i < n.
            let y: [&[i8; 32]; PASS] =
                std::array::from_fn(|t| unsafe { &ag.blocks[t0 + t].get_unchecked(i).qs });
            for k in 0..PANEL_CODES {
                for t in 0..PASS {
                    let yk = _mm512_set1_epi32(group(y[t], 4 * k));
                    s0[t] = _mm512_dpbusd_epi32(s0[t], q0[k], yk);
                    s1[t] = _mm512_dpbusd_epi32(s1[t], q1[k], yk);
                }
            }
            for t in 0..PASS {
                // SAFETY: as for the sums: n scales per token, i < n.
                let dy = _mm512_set1_ps(unsafe { *ag.scales[t0 + t].get_unchecked(i) });
                let at = p * PASS + t;
                acc[0][at] = _mm512_fmadd_ps(
                    _mm512_cvtepi32_ps(s0[t]),
                    _mm512_mul_ps(dw0, dy),
                    acc[0][at],
                );
                acc[1][at] = _mm512_fmadd_ps(
                    _mm512_cvtepi32_ps(s1[t]),
                    _mm512_mul_ps(dw1, dy),
                    acc[1][at],
                );
            }
        }
    }
    for (out, acc) in out.into_iter().zip(&acc) {
        for (o, acc_t) in out.chunks_exact_mut(PANEL_ROWS).zip(acc) {
            // SAFETY: o is 16 writable f32s; the store is unaligned.
            unsafe { _mm512_storeu_ps(o.as_mut_ptr(), *acc_t) };
        }
    }
}
