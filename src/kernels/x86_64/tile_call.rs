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
    /// token's activation blocks (`ys[..acts.len()]`), for `groups` packed groups of
    /// `group_bytes` each.
    Run {
        gemm: bool,
        ys: [&'a [BlockQ8K]; MAX_TOKENS],
        groups: usize,
        group_bytes: usize,
    },
}

/// Where a group's outputs go in a tile call's `out`: token t's sixteen at
/// `t * stride + at`.
#[derive(Clone, Copy)]
pub(super) struct Place {
    pub stride: usize,
    pub at: usize,
}

/// Checks a call of a tier's `tile_packed` for a packed `layout` that tier has a prompt
/// kernel for.
///
/// # Panics
/// If there are more than [`MAX_TOKENS`] tokens, or (with at least one token) `groups` is not
/// whole groups of one step of `layout` per activation block, or `out` is not sixteen outputs
/// per group and token.
pub(super) fn tile_call<'a>(
    layout: Layout,
    groups: &[u8],
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
    let Some(first) = acts.first() else {
        return TileCall::NoTokens;
    };
    let n = q8_k(first).len();
    let group_bytes = n * layout.step_bytes().unwrap_or(0);
    assert!(
        group_bytes > 0 && !groups.is_empty() && groups.len().is_multiple_of(group_bytes),
        "packed groups of {} bytes, not whole groups of {n} steps of {}",
        groups.len(),
        layout.name()
    );
    let count = groups.len() / group_bytes;
    assert_eq!(
        out.len(),
        count * PACK_ROWS * acts.len(),
        "packed tile output size mismatch"
    );
    let ys = std::array::from_fn(|t| &q8_k(&acts[t.min(acts.len() - 1)])[..n]);
    TileCall::Run {
        gemm,
        ys,
        groups: count,
        group_bytes,
    }
}
