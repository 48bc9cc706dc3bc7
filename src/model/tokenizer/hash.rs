//! A fast, non-cryptographic hasher for the tokenizer's lookup tables.
//!
//! The tables are keyed by token text and by token-id pairs, built from a model file, and
//! looked up millions of times per megabyte of text; std's SipHash is several times slower than
//! needed and its DoS resistance buys nothing here. This is the multiply-rotate scheme of
//! rustc's FxHasher, fed eight bytes at a time.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// A `HashMap` using [`FastHasher`].
pub type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<FastHasher>>;

#[derive(Default, Clone, Copy)]
pub struct FastHasher {
    hash: u64,
}

impl FastHasher {
    /// The odd multiplier of rustc's FxHasher (from the golden ratio).
    const SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;
    const ROTATE: u32 = 5;
    const FMIX_SHIFT: u32 = 33;
    const FMIX_MUL: u64 = 0xff51_afd7_ed55_8ccd;

    #[inline]
    fn add(&mut self, word: u64) {
        self.hash = (self.hash.rotate_left(Self::ROTATE) ^ word).wrapping_mul(Self::SEED);
    }
}

impl Hasher for FastHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            self.add(u64::from_le_bytes([
                c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7],
            ]));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut buf = [0u8; 8];
            buf[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(buf));
        }
    }

    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.add(i as u64);
    }

    #[inline]
    fn write_u32(&mut self, i: u32) {
        self.add(i as u64);
    }

    #[inline]
    fn write_u64(&mut self, i: u64) {
        self.add(i);
    }

    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }

    /// The multiply-rotate state mixes high bits well but low bits poorly, and hashbrown picks
    /// buckets by the low bits; a final xor-shift-multiply (MurmurHash3's `fmix64` half)
    /// spreads them.
    #[inline]
    fn finish(&self) -> u64 {
        let h = self.hash ^ (self.hash >> Self::FMIX_SHIFT);
        let h = h.wrapping_mul(Self::FMIX_MUL);
        h ^ (h >> Self::FMIX_SHIFT)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distinct_keys_stay_distinct() {
        let mut m: FastMap<Vec<u8>, usize> = FastMap::default();
        let keys: Vec<Vec<u8>> = (0..2000u32)
            .map(|i| format!("k{i}-{}", i * 7).into_bytes())
            .collect();
        for (i, k) in keys.iter().enumerate() {
            m.insert(k.clone(), i);
        }
        for (i, k) in keys.iter().enumerate() {
            assert_eq!(m.get(k.as_slice()), Some(&i));
        }
        assert_eq!(m.get(b"absent".as_slice()), None);
    }
}
