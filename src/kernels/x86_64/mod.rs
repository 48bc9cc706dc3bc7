//! x86-64 tiers. Nothing here is reachable except through the dispatch table built after
//! feature detection (`Kernels::for_tier`); a tier's token ([`Avx2`]) proves its features were
//! detected, and a file that hands its kernels out only through methods on the token
//! (`avx2_panel.rs`) makes that proof the one way to reach them.
//!
//! The files, by what they hold:
//! - written once, expanded by each tier over its own primitives (its four-product integer
//!   sums and the codes they take): `legacy_tiles.rs` (Q4_0/Q4_1/Q8_0 tiles and rows),
//!   `kquant_kernels.rs` (K-quants, IQ4_XS), `kwide_kernels.rs` (Q5_0, Q5_1, IQ4_NL, MXFP4),
//!   `packed_kernels.rs` (what the packed-copy kernels share), `entry_points.rs` (the safe
//!   wrappers and their argument checks);
//! - tier-neutral helpers on 256-bit vectors: `vec256.rs`, `prefetch.rs`, `passes.rs` (the
//!   generic path's pass shape), `kquant_rows.rs` (K-quant super-blocks unpacked once per row);
//! - one tier each, named for it: `avx2*.rs`, `avx512*.rs` (the tier's primitives, its
//!   expansions, and the kernels whose algorithm differs between the tiers: VNNI's `vpdpbusd`
//!   over sixteen lanes against AVX2's `maddubs` pairs, the packed layouts each reads).
//!
//! Tier files import the shared files, never the other tier's.

pub(super) mod avx2;
pub(super) mod avx2_kquant;
pub(super) mod avx2_mxfp4;
pub(super) mod avx2_packed;
pub(super) mod avx2_packed_tile;
pub(super) mod avx2_panel;
pub(super) mod avx2_steps;
pub(super) mod avx2_wide;
pub(super) mod avx512;
pub(super) mod avx512_iq;
pub(super) mod avx512_iq1;
pub(super) mod avx512_iq_tile;
pub(super) mod avx512_iq_vbmi;
pub(super) mod avx512_kquant;
pub(super) mod avx512_packed;
pub(super) mod avx512_packed_k;
pub(super) mod avx512_packed_tile;
pub(super) mod avx512_panel;
pub(super) mod avx512_steps;
pub(super) mod entry_points;
pub(super) mod iq1_kernels;
pub(super) mod iq1_rows;
pub(super) mod kquant_kernels;
pub(super) mod kquant_rows;
pub(super) mod kwide_kernels;
pub(super) mod legacy_tiles;
pub(super) mod packed_kernels;
pub(super) mod passes;
pub(super) mod prefetch;
pub(super) mod vec256;

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
