//! What the tests of the scalar oracles, dequantizers and quantizers share: the two generators of
//! the C harnesses that produced their known answers (a test regenerates a harness's inputs by
//! drawing from the same one), random weight blocks, and a check of a math function against
//! libm.

use super::blocks::{as_blocks, Block};

/// xorshift64 (shifts 13, 7, 17): the generator of the vec_dot, tiled and repacked harnesses.
pub(crate) struct XorShift(pub u64);

impl XorShift {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// An element of `t`, picked by `next() mod len`.
    pub(crate) fn pick<T: Copy>(&mut self, t: &[T]) -> T {
        t[(self.next() % t.len() as u64) as usize]
    }
}

/// SplitMix64: the generator of the quantizer harness and of the dequantizer property tests.
pub(crate) struct SplitMix(pub u64);

/// 2^24: [`SplitMix::unit`] keeps 24 random bits, which an f32 holds exactly.
const UNIT_STEPS: f32 = 16_777_216.0;

impl SplitMix {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// The top 24 random bits as a float in [0, 1) (exact).
    pub(crate) fn unit(&mut self) -> f32 {
        (self.next() >> 40) as f32 / UNIT_STEPS
    }

    /// A bell-shaped value in (−2, 2): four [`Self::unit`]s summed in order, minus 2.
    pub(crate) fn bell(&mut self) -> f32 {
        let (a, b, c, d) = (self.unit(), self.unit(), self.unit(), self.unit());
        a + b + c + d - 2.0
    }

    /// `N` random bytes (the low byte of each draw).
    pub(crate) fn bytes<const N: usize>(&mut self) -> [u8; N] {
        std::array::from_fn(|_| self.next() as u8)
    }
}

/// `n` weight blocks, block by block: its bytes drawn one by one (the low byte of each draw),
/// then its f16 fields at the byte offsets `f16_at`, in order, set by `h`.
pub(crate) fn weights<B: Block>(
    r: &mut XorShift,
    n: usize,
    f16_at: &[usize],
    mut h: impl FnMut(&mut XorShift) -> u16,
) -> Vec<B> {
    let size = std::mem::size_of::<B>();
    let mut bytes = vec![0u8; n * size];
    for blk in bytes.chunks_exact_mut(size) {
        blk.iter_mut().for_each(|b| *b = r.next() as u8);
        for &o in f16_at {
            blk[o..o + 2].copy_from_slice(&h(r).to_le_bytes());
        }
    }
    as_blocks::<B>(&bytes).expect("whole blocks").to_vec()
}

/// Asserts that `f(x)` is within `rel` of libm's f64 value, relative to it (plus the least
/// normal f64, for values at or near zero), for every x in `xs`.
pub(crate) fn assert_near_libm(
    name: &str,
    f: impl Fn(f32) -> f32,
    libm: impl Fn(f64) -> f64,
    xs: impl IntoIterator<Item = f32>,
    rel: f64,
) {
    for x in xs {
        let (got, want) = (f64::from(f(x)), libm(f64::from(x)));
        let tol = want.abs() * rel + f64::MIN_POSITIVE;
        assert!((got - want).abs() <= tol, "{name}({x}): {got} vs {want}");
    }
}
