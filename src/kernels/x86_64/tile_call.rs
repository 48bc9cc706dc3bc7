//! The argument checks both tiers' packed prompt kernels (`kpacked_tile.rs` on AVX-512,
//! `kpacked2_tile.rs` on AVX2) make before they run, in one place.

use crate::kernels::entries::{q8_k, Variant};
use crate::kernels::kblocks::BlockQ8K;
use crate::kernels::pack::PACK_ROWS;
use crate::kernels::{ActRow, Layout};

/// The most tokens one packed tile call takes (the forward pass's step).
pub(super) const MAX_TOKENS: usize = 64;

/// What a packed tile call is to do.
// `Run` carries the tokens' slices (1 KiB) by value, as the kernels kept them on the stack
// before; boxing them would allocate once per tile call on the prompt's hot path.
#[allow(clippy::large_enum_variant)]
pub(super) enum TileCall<'a> {
    /// The variant has no packed prompt kernel for the layout: write nothing.
    NoKernel,
    /// No tokens: nothing to write.
    NoTokens,
    /// Run the repacked gemm's order (`gemm`, Q4_K only) or the tiled matmul's, over each
    /// token's activation blocks (`ys[..acts.len()]`).
    Run {
        gemm: bool,
        ys: [&'a [BlockQ8K]; MAX_TOKENS],
    },
}

/// Checks a call of a tier's `tile16_packed` for a packed `layout` that tier has a prompt
/// kernel for.
///
/// # Panics
/// If `out` is not sixteen outputs per token, there are more than [`MAX_TOKENS`] tokens, or
/// the group is not one step of `layout` per activation block.
pub(super) fn tile_call<'a>(
    layout: Layout,
    group: &[u8],
    acts: &'a [ActRow],
    variant: Variant,
    out: &[f32],
) -> TileCall<'a> {
    let gemm = match (layout, variant) {
        (Layout::Q4Kx16, Variant::RepackedGemm) => true,
        (_, Variant::Batch) => false,
        _ => return TileCall::NoKernel,
    };
    assert!(
        acts.len() <= MAX_TOKENS,
        "{} tokens in one packed tile",
        acts.len()
    );
    assert_eq!(
        out.len(),
        PACK_ROWS * acts.len(),
        "packed tile output size mismatch"
    );
    let Some(first) = acts.first() else {
        return TileCall::NoTokens;
    };
    let n = q8_k(first).len();
    let step = layout.step_bytes().unwrap_or(0);
    assert!(
        n > 0 && group.len() == n * step,
        "a packed group of {} bytes, not {n} steps of {step}",
        group.len()
    );
    let ys = std::array::from_fn(|t| &q8_k(&acts[t.min(acts.len() - 1)])[..n]);
    TileCall::Run { gemm, ys }
}
