//! x86-64 tiers. Each file holds one tier (the `k*_kernels.rs` macros hold kernels both tiers
//! expand over their own primitives); nothing here is reachable except through the dispatch
//! table built after feature detection.
//!
//! A tier's token ([`Avx2`]) proves its features were detected; a file that hands its kernels
//! out only through methods on the token (`avx2_panel.rs`) makes that proof the one way to
//! reach them, rather than module privacy alone.

pub(super) mod avx2;
pub(super) mod avx2_kquant;
pub(super) mod avx2_packed;
pub(super) mod avx2_packed_tile;
pub(super) mod avx2_panel;
pub(super) mod avx2_steps;
pub(super) mod avx512;
pub(super) mod avx512_kquant;
pub(super) mod avx512_packed;
pub(super) mod avx512_packed_k;
pub(super) mod avx512_packed_tile;
pub(super) mod avx512_panel;
pub(super) mod avx512_steps;
pub(super) mod entry_points;
pub(super) mod kquant_kernels;
pub(super) mod kquant_rows;
pub(super) mod kwide_kernels;
pub(super) mod legacy_tiles;
pub(super) mod packed_kernels;
pub(super) mod passes;
pub(super) mod prefetch;
pub(super) mod vec256;

// Old module names, for the files that still import through them (until they are moved to
// the new paths).
use self::kquant_rows as kavx2_k;
use self::passes as kavx2;
pub(super) use avx2_packed as kpacked2;
pub(super) use avx2_packed_tile as kpacked2_tile;
pub(super) use avx512_packed as kpacked;
pub(super) use avx512_panel as kpanel512;
pub(super) use avx512_steps as panel512_steps;

/// Proof that this CPU runs AVX2, FMA and F16C: zero-sized, and made only by [`Avx2::detect`],
/// after `is_x86_feature_detected!` (which also checks that the OS saves the registers).
#[derive(Clone, Copy, Debug)]
pub(in crate::kernels) struct Avx2(());

impl Avx2 {
    /// The token, where this CPU has the features (the same ones `Tier::Avx2.available()`
    /// checks: a test keeps the two lists in step).
    pub(in crate::kernels) fn detect() -> Option<Avx2> {
        (is_x86_feature_detected!("avx2")
            && is_x86_feature_detected!("fma")
            && is_x86_feature_detected!("f16c"))
        .then_some(Avx2(()))
    }
}

#[cfg(test)]
mod tests {
    use super::Avx2;
    use crate::kernels::Tier;

    #[test]
    fn the_token_and_the_tier_agree() {
        assert_eq!(Avx2::detect().is_some(), Tier::Avx2.available().is_ok());
        assert_eq!(std::mem::size_of::<Avx2>(), 0);
    }
}
