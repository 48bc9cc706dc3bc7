//! The AVX-512 block-chain panel over one packed Q4_0 (or IQ4_NL) group for up to eight tokens
//! whose activations come interleaved block by block ([`Q8Step`]): this tier's path for every
//! packed run of two tokens or more (a serving step's decoded tokens, prompts' chunks; AVX2's
//! is `avx2_steps.rs`). Every row's integers and float chain are those of the file layout's panel
//! (`avx512::panel_q4_0_q8_0_chain_impl`), so the outputs are its bits: per block,
//! `isum = −offset·Σy + Σ_k vpdpbusd(codes_k, y_k)` (exact in i32), then
//! `acc = fma(isum, d_w·d_y, acc)`.
//!
//! That panel reads each token's block through its own three slices (quants, sums, scales),
//! so its token loop steps eight pointers per code vector and keeps the sums in memory: over a
//! packed group, eight tokens took about ten cycles per token and block on Zen 5 whether the
//! weights streamed from memory or sat in L2. Here a block's eight tokens are one 320-byte step
//! behind one pointer, and the token count is a constant (1..=8), so the eight code vectors,
//! every token's sum and accumulator stay in registers and each `vpdpbusd` takes its activation
//! as an embedded broadcast: 7.0–7.3 cycles. It also beat the two-group panel it replaced for
//! sixteen tokens and more (each broadcast feeding two groups, four tokens a pass): the 1B
//! Q4_0 model's pp16 read 1.15× as fast, pp32 1.10–1.14×, pp64 1.01–1.05× (one and two
//! threads, two alternating rounds).
//!
//! The `#[target_feature]` function is private; the table hands out the safe wrappers only after
//! AVX2, FMA, F16C and AVX-512 F/BW/VL/VNNI were detected.

use std::arch::x86_64::*;

use super::avx512::{chain_codes, packed_block16, panel_codes};
use super::prefetch::{prefetch_packed_step, PANEL_PREFETCH_STEPS};
use super::vec256::group;
use crate::kernels::blocks::BlockQ4_0;
use crate::kernels::packed_steps::{check_steps, Q8Step, StepsPanel};
use crate::kernels::{PANEL_ROWS, PANEL_TOKENS};

/// A kernel for exactly as many tokens as its place in a `passes!` table (index T − 1).
type Pass = unsafe fn(&[BlockQ4_0], &[Q8Step], &mut [f32]);

/// `$kernel::<NL, T>` for T in 1..=[`PANEL_TOKENS`].
macro_rules! passes {
    ($nl:literal) => {
        [
            steps_impl::<$nl, 1> as Pass,
            steps_impl::<$nl, 2>,
            steps_impl::<$nl, 3>,
            steps_impl::<$nl, 4>,
            steps_impl::<$nl, 5>,
            steps_impl::<$nl, 6>,
            steps_impl::<$nl, 7>,
            steps_impl::<$nl, 8>,
        ]
    };
}
const _: () = assert!(PANEL_TOKENS == 8);

/// The packed Q4_0 panel's steps form.
pub(in crate::kernels) const Q4_0_STEPS: StepsPanel = q4_0_steps;
/// The packed IQ4_NL panel's steps form.
pub(in crate::kernels) const IQ4_NL_STEPS: StepsPanel = iq4_nl_steps;

/// `out[t·16 + r]` = row r of the packed Q4_0 group `w` against token t of `steps`, for its
/// first `tokens` tokens, bit for bit as the file layout's panel gives it for the rows.
///
/// # Panics
/// If `tokens` is not 1..=8, `w` not `steps.len()` packed blocks or `out` not sixteen outputs
/// per token.
fn q4_0_steps(w: &[BlockQ4_0], steps: &[Q8Step], tokens: usize, out: &mut [f32]) {
    run::<false>(w, steps, tokens, out);
}

/// [`q4_0_steps`] of a packed group of IQ4_NL rows (the value table's codes).
fn iq4_nl_steps(w: &[BlockQ4_0], steps: &[Q8Step], tokens: usize, out: &mut [f32]) {
    run::<true>(w, steps, tokens, out);
}

fn run<const NL: bool>(w: &[BlockQ4_0], steps: &[Q8Step], tokens: usize, out: &mut [f32]) {
    check_steps(w, steps, tokens, out);
    let table = if NL { passes!(true) } else { passes!(false) };
    // SAFETY: only reachable through the table built after every feature the kernels enable was
    // detected (`steps_impl` indexes through bounds-checked slices only).
    unsafe { table[tokens - 1](w, steps, out) }
}

/// `T` tokens: per block, the sixteen rows' eight code vectors meet every token's eight
/// four-byte groups, all in registers.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn steps_impl<const NL: bool, const T: usize>(w: &[BlockQ4_0], steps: &[Q8Step], out: &mut [f32]) {
    let (table, offset) = chain_codes::<NL>();
    let mut acc = [_mm512_setzero_ps(); T];
    for (i, s) in steps.iter().enumerate() {
        prefetch_packed_step(w, i + PANEL_PREFETCH_STEPS);
        let (x, dw) = packed_block16(w, i);
        let q = panel_codes::<NL>(x, table);
        // −offset·Σy starts each token's chain (exact in i32: |Σy| ≤ 32·128).
        let mut isum: [__m512i; T] =
            std::array::from_fn(|t| _mm512_set1_epi32(-offset * s.sums[t]));
        for (k, qk) in q.iter().enumerate() {
            for (t, st) in isum.iter_mut().enumerate() {
                let y = _mm512_set1_epi32(group(&s.qs[t], 4 * k));
                *st = _mm512_dpbusd_epi32(*st, *qk, y);
            }
        }
        for (t, a) in acc.iter_mut().enumerate() {
            let d = _mm512_mul_ps(dw, _mm512_set1_ps(s.scales[t]));
            *a = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[t]), d, *a);
        }
    }
    for (o, a) in out.chunks_exact_mut(PANEL_ROWS).zip(&acc) {
        // SAFETY: o is 16 writable f32s; the store is unaligned.
        unsafe { _mm512_storeu_ps(o.as_mut_ptr(), *a) };
    }
}
