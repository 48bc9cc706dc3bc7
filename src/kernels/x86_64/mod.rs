//! x86-64 tiers. Each file holds one tier; nothing here is reachable except through the
//! dispatch table built after feature detection.

pub(super) mod avx2;
pub(super) mod avx512;
