//! x86-64 tiers. Each file holds one tier (the `k*_kernels.rs` macros hold kernels both tiers
//! expand over their own primitives); nothing here is reachable except through the dispatch
//! table built after feature detection.

pub(super) mod avx2;
pub(super) mod avx2_panel;
pub(super) mod avx2_steps;
pub(super) mod avx512;
pub(super) mod kavx2;
pub(super) mod kavx2_k;
pub(super) mod kavx512;
pub(super) mod kpacked;
pub(super) mod kpacked2;
pub(super) mod kpacked2_tile;
pub(super) mod kpacked_k;
pub(super) mod kpacked_tile;
pub(super) mod kpanel512;
pub(super) mod kquant_kernels;
pub(super) mod kwide_kernels;
pub(super) mod legacy_tiles;
pub(super) mod panel512_steps;
pub(super) mod tile_call;
