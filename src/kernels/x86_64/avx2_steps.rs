//! The AVX2 block-chain panel over one packed Q4_0 group for up to eight tokens whose
//! activations come interleaved block by block ([`Q8Step`]), as AVX-512's steps panels take
//! them (`avx512_steps.rs`). The integers and float chains are the AVX2 panel's
//! (`avx2_panel::panel_impl`): the same [`block_sums`] over both halves, two tokens a pass, and
//! per half `acc = fma(isum, d_w·d_y, acc)`, so the outputs are its bits. What changes is
//! where the activations come from: one step behind one pointer instead of each token's three
//! slices, and a token count that is a constant (1..=8).
//!
//! The `#[target_feature]` function is private; the table hands out the safe wrapper only after
//! AVX2, FMA and F16C were detected.

use std::arch::x86_64::*;

use super::avx2_panel::{block_sums, nibble_groups, packed_half, HALVES, PASS_TOKENS};
use super::prefetch::{prefetch_packed_step, PANEL_PREFETCH_STEPS};
use crate::kernels::blocks::BlockQ4_0;
use crate::kernels::packed_steps::{check_steps, Q8Step, StepsPanel};
use crate::kernels::{PANEL_ROWS, PANEL_TOKENS, TILE_ROWS};

const _: () = assert!(
    PASS_TOKENS == 2,
    "the last pass of an odd count takes one token"
);

/// A kernel for exactly as many tokens as its place in the table of [`run`] (index T − 1).
type Pass = unsafe fn(&[BlockQ4_0], &[Q8Step], &mut [f32]);

/// The packed Q4_0 panel's steps form on this tier.
pub(in crate::kernels) const Q4_0_STEPS: StepsPanel = run;

/// `out[t·16 + r]` = row r of the packed Q4_0 group `w` against token t of `steps`, for its
/// first `tokens` tokens, bit for bit as the AVX2 panel gives it.
///
/// # Panics
/// If `tokens` is not 1..=8, `w` not `steps.len()` packed blocks or `out` not sixteen outputs
/// per token.
fn run(w: &[BlockQ4_0], steps: &[Q8Step], tokens: usize, out: &mut [f32]) {
    const { assert!(PANEL_TOKENS == 8) };
    check_steps(w, steps, tokens, out);
    let table: [Pass; PANEL_TOKENS] = [
        steps_impl::<1>,
        steps_impl::<2>,
        steps_impl::<3>,
        steps_impl::<4>,
        steps_impl::<5>,
        steps_impl::<6>,
        steps_impl::<7>,
        steps_impl::<8>,
    ];
    // SAFETY: only reachable through the table built after every feature the kernels enable was
    // detected (`steps_impl` indexes through bounds-checked slices only).
    unsafe { table[tokens - 1](w, steps, out) }
}

/// `T` tokens, [`PASS_TOKENS`] a pass (the last pass of an odd count takes one), both halves
/// per broadcast.
#[target_feature(enable = "avx2,fma,f16c")]
fn steps_impl<const T: usize>(w: &[BlockQ4_0], steps: &[Q8Step], out: &mut [f32]) {
    let mut acc = [[_mm256_setzero_ps(); HALVES]; T];
    for (i, s) in steps.iter().enumerate() {
        prefetch_packed_step(w, i + PANEL_PREFETCH_STEPS);
        let halves: [([__m256i; 4], __m256); HALVES] =
            std::array::from_fn(|h| packed_half(w, i, h));
        let q = halves.map(|(x, _)| nibble_groups(x));
        let dw = halves.map(|(_, d)| d);
        let mut pass = |t0: usize, isum: &[[__m256i; HALVES]]| {
            for (t, isum_t) in isum.iter().enumerate() {
                let dy = _mm256_set1_ps(s.scales[t0 + t]);
                for h in 0..HALVES {
                    let d = _mm256_mul_ps(dw[h], dy);
                    let a = &mut acc[t0 + t][h];
                    *a = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum_t[h]), d, *a);
                }
            }
        };
        // Eight tokens' passes stay a loop: after unrelated changes elsewhere in the crate LLVM
        // unrolled it fully (1.4 -> 4.6 KB, the nibble groups spilled) and the 1B Q4_0 model's
        // AVX2 pp128 ran 7% slower (Zen 5). Hiding the count from it keeps the loop; for the
        // shorter counts (a mixture of experts' few tokens per expert) the hidden count made
        // it call `block_sums` out of line instead, 5% slower on the A3B MoE, so they keep
        // theirs.
        let passes = if T == PANEL_TOKENS {
            std::hint::black_box(T / PASS_TOKENS)
        } else {
            T / PASS_TOKENS
        };
        for t0 in (0..passes * PASS_TOKENS).step_by(PASS_TOKENS) {
            let y: [&[i8; 32]; PASS_TOKENS] = std::array::from_fn(|t| &s.qs[t0 + t]);
            let sum: [i32; PASS_TOKENS] = std::array::from_fn(|t| s.sums[t0 + t]);
            pass(t0, &block_sums(&q, y, sum));
        }
        if T % PASS_TOKENS == 1 {
            let t0 = T - 1;
            pass(t0, &block_sums(&q, [&s.qs[t0]], [s.sums[t0]]));
        }
    }
    for (o, acc_t) in out.chunks_exact_mut(PANEL_ROWS).zip(&acc) {
        for (oh, a) in o.chunks_exact_mut(TILE_ROWS).zip(acc_t) {
            // SAFETY: oh is 8 writable f32s; the store is unaligned.
            unsafe { _mm256_storeu_ps(oh.as_mut_ptr(), *a) };
        }
    }
}
