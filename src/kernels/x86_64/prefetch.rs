//! Software prefetch for both x86-64 tiers: of weight rows for the single-token passes (see
//! [`Prefetch`]), and of a packed group's block steps for the steps panels.

use std::arch::x86_64::*;

use crate::kernels::blocks::BlockQ4_0;
use crate::kernels::{stream_target, StreamTarget, PANEL_ROWS};

/// Software prefetch of the rows a few passes ahead, spread over this pass's blocks.
///
/// Decoding streams every weight once per token, mostly from beyond the caches. A pass reads its
/// rows side by side (eight, or four on AVX2), short streams at once, which the hardware
/// prefetchers follow poorly: without help a pass waits on memory at nearly every new cache line,
/// and one core reads far less than plain streaming does (figures: BENCHMARKS.md, "Design
/// measurements behind the code"). When the pass's rows are consecutive rows of one matrix (as a
/// matmul hands them), the rows [`prefetch_passes`] passes ahead start that many spans of the
/// pass's rows further on; requesting their lines while this pass computes keeps the memory busy.
/// Rows laid out otherwise get no prefetch. A prefetch is a hint that never faults, so the lines
/// past the end of a matrix cost an idle request at most.
///
/// The lines go to L1 (`prefetcht0`) or, where [`crate::kernels::stream_target`] says the
/// weights stream from memory, to L2 (`prefetcht1`): see [`StreamTarget`].
pub(super) struct Prefetch {
    ahead: *const u8,
    span: usize,
    per_block: usize,
    to_l2: bool,
}

/// About how far ahead, in bytes, [`Prefetch`] reads: whole passes (of a kernel's rows), at
/// least one. On short rows (SmolLM2-sized, from DRAM) one to four passes ahead all helped about
/// equally. On the long rows of the generated 1B model, 3 KiB ahead left one core's decode well
/// short of what 6 or 12 KiB gave, which came close to `membw -t 1`, and two passes ahead,
/// whatever their size, were slower than one (figures: BENCHMARKS.md, "Design measurements
/// behind the code").
const PREFETCH_BYTES: usize = 12 << 10;

/// Passes ahead for passes of `span` bytes (see [`PREFETCH_BYTES`]).
fn prefetch_passes(span: usize) -> usize {
    (PREFETCH_BYTES / span.max(1)).clamp(1, 4)
}
/// The cache line size [`Prefetch`] steps by.
const LINE: usize = 64;

impl Prefetch {
    /// No prefetch (the multi-token tiles, whose rows stay in cache across their tokens).
    pub(super) const NONE: Prefetch = Prefetch {
        ahead: std::ptr::null(),
        span: 0,
        per_block: 0,
        to_l2: false,
    };

    /// The prefetch of a pass of `T` tokens over the `R` rows `w`: [`Prefetch::new`] for one
    /// token (decode streams the weights), none for more (a batch's rows stay in cache across
    /// its tokens).
    #[inline(always)]
    pub(super) fn for_pass<B, const R: usize, const T: usize>(w: &[&[B]; R]) -> Prefetch {
        match T {
            1 => Prefetch::new(w),
            _ => Prefetch::NONE,
        }
    }

    /// The prefetch for a pass over the `R` rows `w`.
    #[inline(always)]
    pub(super) fn new<B, const R: usize>(w: &[&[B]; R]) -> Prefetch {
        let row = std::mem::size_of_val(w[0]);
        let base = w[0].as_ptr().cast::<u8>();
        let consecutive = (0..R).all(|r| w[r].as_ptr().cast::<u8>() == base.wrapping_add(r * row));
        let span = if consecutive { row * R } else { 0 };
        Prefetch {
            ahead: base.wrapping_add(span * prefetch_passes(span)),
            span,
            per_block: span.div_ceil(LINE).div_ceil(w[0].len().max(1)),
            to_l2: stream_target() == StreamTarget::L2,
        }
    }

    /// Requests the lines due at block `i` of the pass.
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    pub(super) fn at(&self, i: usize) {
        for j in 0..self.per_block {
            let off = (i * self.per_block + j) * LINE;
            if off < self.span {
                // `wrapping_add` and a prefetch never dereference: the address may be anything.
                let line = self.ahead.wrapping_add(off).cast();
                if self.to_l2 {
                    _mm_prefetch::<_MM_HINT_T1>(line);
                } else {
                    _mm_prefetch::<_MM_HINT_T0>(line);
                }
            }
        }
    }
}

/// How many block steps ahead the packed groups' steps panels (this tier's and AVX-512's)
/// request their lines: sixteen steps, 4.5 KiB. Measured on the panels they replaced: a panel
/// of eight tokens spends so long on each step that the out-of-order window reaches barely
/// one step ahead and the hardware prefetchers leave the next step's loads waiting on memory.
/// Four steps ahead (1152 bytes) took eight sequences decoding together (the 1B Q4_0 model,
/// 2 threads, Zen 4, AVX-512 panel) from 51–70 ms a step to 38–48 ms, and were still too few
/// on Zen 5: with sixteen, pp8 on that model went from 169–195 to 256–264 t/s at one thread
/// and 336–352 to 454–462 at two (AVX-512), 139–146 to 152 at one thread (AVX2 forced), with
/// pp64 unchanged, in two alternating rounds; and `serve -np 8` from 254 to 304 t/s.
/// Thirty-two read the same as sixteen.
pub(super) const PANEL_PREFETCH_STEPS: usize = 16;

/// Requests, into L1, the lines of block step `i` of a packed group (288 bytes: six lines
/// cover it wherever it starts). Past the group's end the addresses are the next group's (or
/// anything): a prefetch never faults.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) fn prefetch_packed_step(w: &[BlockQ4_0], i: usize) {
    let step = std::mem::size_of::<BlockQ4_0>() * PANEL_ROWS;
    let base = w.as_ptr().cast::<u8>().wrapping_add(i * step);
    for l in 0..step.div_ceil(64) + 1 {
        // `wrapping_add` and a prefetch never dereference.
        _mm_prefetch::<_MM_HINT_T0>(base.wrapping_add(64 * l).cast());
    }
}
