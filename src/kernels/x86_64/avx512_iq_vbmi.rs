//! The IQ grid types' decode steps (`avx512_iq`) with their grid values looked up in vectors,
//! for CPUs with AVX-512 VBMI, in place of a scalar load and a vector insert per entry.
//!
//! The grids are small in information: each takes its values from a short list (IQ2: 8, 25,
//! 43; IQ3_XXS: 4, 12, …, 52, 62; IQ3_S: 1, 3, …, 15), so an entry is a u16 of codes, each
//! value's place in the list (IQ2: eight of two bits; IQ3: four of a nibble) ([`code`]). A
//! grid of `N` codes is `N / 32` vectors; `vpermi2w` looks up 32 indices in 64 entries at a
//! time and a blend per further index bit picks among them ([`lookup`]: IQ2_S's 1024 entries
//! are more vectors than the registers hold, and its permutes read half their tables from
//! memory). The codes then become bytes: a `vpermw` puts each entry's code in the lane its
//! values fill (an i32 for IQ3, a u64 for IQ2), `vpmultishiftqb` moves each value's code to
//! the low bits of its own byte, and a `vpermb` of the list repeated over its 64 entries turns
//! the codes into the values, whatever the bytes' higher bits hold. The values are the grid's
//! own bytes, so the steps' integers, and the outputs, are unchanged. In the gemv of rows in
//! L2 on Zen 5 (ns a super-block, loads → lookups): IQ2_XXS 9.4 → 8.4, IQ2_XS 11.0 → 7.6,
//! IQ2_S 10.7 → 8.9, IQ3_XXS 14.4 → 9.2, IQ3_S 18.2 → 9.3.

use std::arch::x86_64::*;

use super::avx512_iq::{decode, halves, step_dot, View, WideGrid, STEPS};
use crate::kernels::blocks::BlockQ8K;
use crate::kernels::iq_grids::{IQ2S_GRID, IQ2XS_GRID, IQ2XXS_GRID, IQ3S_GRID, IQ3XXS_GRID};

/// Codes a 512-bit vector holds.
const CODES_PER_VECTOR: usize = 32;
/// Entries one `vpermi2w` chooses among (two vectors of codes).
const PERMUTE_ENTRIES: usize = 2 * CODES_PER_VECTOR;
/// The lowest index bit a `vpermi2w` ignores: the first the blends choose by.
const PERMUTE_BITS: u32 = PERMUTE_ENTRIES.trailing_zeros();
/// Bytes `vpermb` chooses among (the six low bits of each index byte).
const PERMB_ENTRIES: usize = 64;
/// Bits of an IQ3 value's code (its place in its grid's values; a nibble, for whole-nibble
/// shifts).
const IQ3_CODE_BITS: usize = 4;
/// Bits of an IQ2 value's code.
const IQ2_CODE_BITS: usize = 2;
/// The values of IQ3_XXS's grid, by code.
const IQ3XXS_VALUES: [u8; 8] = [4, 12, 20, 28, 36, 44, 52, 62];
/// The values of IQ3_S's grid, by code.
const IQ3S_VALUES: [u8; 8] = [1, 3, 5, 7, 9, 11, 13, 15];
/// The values of the IQ2 grids, by code.
const IQ2_VALUES: [u8; 3] = [8, 25, 43];

/// A grid's u16 codes, aligned for whole-vector loads.
#[repr(C, align(64))]
struct Codes<const N: usize>([u16; N]);

/// A grid entry's code: the place in `values` of each of its `n` values (one a byte), value
/// `j`'s at bits `bits·j..`.
const fn code(entry: u64, n: usize, values: &[u8], bits: usize) -> u16 {
    let mut code = 0u16;
    let mut j = 0;
    while j < n {
        let v = ((entry >> (8 * j)) & 0xFF) as u8;
        let mut c = 0;
        while values[c] != v {
            c += 1;
            assert!(c < values.len(), "a grid value outside the grid's values");
        }
        code |= (c as u16) << (bits * j);
        j += 1;
    }
    code
}

/// An IQ3 grid's codes (four values an entry).
const fn iq3_codes<const N: usize>(grid: &[u32; N], values: &[u8]) -> Codes<N> {
    let mut c = [0u16; N];
    let mut i = 0;
    while i < N {
        c[i] = code(grid[i] as u64, 4, values, IQ3_CODE_BITS);
        i += 1;
    }
    Codes(c)
}

/// An IQ2 grid's codes (eight values an entry).
const fn iq2_codes<const N: usize>(grid: &[u64; N]) -> Codes<N> {
    let mut c = [0u16; N];
    let mut i = 0;
    while i < N {
        c[i] = code(grid[i], 8, &IQ2_VALUES, IQ2_CODE_BITS);
        i += 1;
    }
    Codes(c)
}

/// The grids' codes.
static IQ3XXS_CODES: Codes<256> = iq3_codes(&IQ3XXS_GRID, &IQ3XXS_VALUES);
static IQ3S_CODES: Codes<512> = iq3_codes(&IQ3S_GRID, &IQ3S_VALUES);
static IQ2XS_CODES: Codes<512> = iq2_codes(&IQ2XS_GRID);
static IQ2XXS_CODES: Codes<256> = iq2_codes(&IQ2XXS_GRID);
static IQ2S_CODES: Codes<1024> = iq2_codes(&IQ2S_GRID);

/// The low byte of each u16.
const LOW_BYTES: __mmask64 = 0x5555_5555_5555_5555;
/// A `vpermb` control that puts IQ2_XXS's grid index `g` (byte `8·(g / 4) + g % 4` of `qs`: four
/// index bytes, then a sub-block's sign and scale word) at the low byte of u16 `g`.
static IQ2XXS_INDEX_BYTES: Vector = {
    let mut t = [0u8; 64];
    let mut g = 0;
    while g < CODES_PER_VECTOR {
        t[2 * g] = (8 * (g / 4) + g % 4) as u8;
        g += 1;
    }
    Vector(t)
};

/// `values` repeated over `vpermb`'s 64 entries: an index byte's code in its low `bits`,
/// whatever its higher bits hold.
const fn value_table(values: &[u8], bits: usize) -> Vector {
    let mut t = [0u8; PERMB_ENTRIES];
    let mut i = 0;
    while i < PERMB_ENTRIES {
        t[i] = values[i % (1 << bits) % values.len()];
        i += 1;
    }
    Vector(t)
}

/// A `vpermw` control that puts u16 `first + w / per` at u16 `w`: each of `32 / per` codes
/// from `first` on at every u16 of its lane of `per` u16.
const fn spread(first: usize, per: usize) -> Vector {
    let mut t = [0u8; 64];
    let mut w = 0;
    while w < CODES_PER_VECTOR {
        t[2 * w] = (first + w / per) as u8;
        w += 1;
    }
    Vector(t)
}

/// `vpmultishiftqb` offsets that put value `j` of the code at the low end of each lane of `n`
/// bytes (values of `bits` bits, `n` an entry) at the low bits of the lane's byte `j`.
const fn value_shifts(n: usize, bits: usize) -> i64 {
    let mut s = [0u8; 8];
    let mut j = 0;
    while j < 8 {
        s[j] = ((j / n) * (64 / (8 / n)) + bits * (j % n)) as u8;
        j += 1;
    }
    i64::from_le_bytes(s)
}

/// 64 bytes for a vector load.
#[repr(C, align(64))]
struct Vector([u8; 64]);

impl Vector {
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi")]
    #[inline]
    fn load(&self) -> __m512i {
        // SAFETY: 64 bytes, 64-byte aligned.
        unsafe { _mm512_load_si512(self.0.as_ptr().cast()) }
    }
}

/// An IQ3 entry's four values (bytes) fill an i32 lane.
const IQ3_PER_LANE: usize = 4;
/// An IQ2 entry's eight values fill a u64 lane.
const IQ2_PER_LANE: usize = 8;
/// IQ3 entries a step.
const IQ3_STEP_ENTRIES: usize = 16;
/// IQ2 entries a step.
const IQ2_STEP_ENTRIES: usize = 8;

/// The `vpermb` tables of the grids' values.
static IQ3XXS_TABLE: Vector = value_table(&IQ3XXS_VALUES, IQ3_CODE_BITS);
static IQ3S_TABLE: Vector = value_table(&IQ3S_VALUES, IQ3_CODE_BITS);
static IQ2_TABLE: Vector = value_table(&IQ2_VALUES, IQ2_CODE_BITS);
/// The `vpermw` controls of each step's codes: IQ3's two steps of 32 codes, IQ2's four.
static IQ3_SPREAD: [Vector; 2] = [spread(0, 2), spread(IQ3_STEP_ENTRIES, 2)];
static IQ2_SPREAD: [Vector; STEPS] = [
    spread(0, 4),
    spread(IQ2_STEP_ENTRIES, 4),
    spread(2 * IQ2_STEP_ENTRIES, 4),
    spread(3 * IQ2_STEP_ENTRIES, 4),
];
/// The `vpmultishiftqb` offsets of IQ3's and IQ2's values.
const IQ3_SHIFTS: i64 = value_shifts(IQ3_PER_LANE, IQ3_CODE_BITS);
const IQ2_SHIFTS: i64 = value_shifts(IQ2_PER_LANE, IQ2_CODE_BITS);

/// The codes of 32 entries, the u16 lanes of `idx` (each below `N`).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi")]
#[inline]
fn lookup<const N: usize>(t: &Codes<N>, idx: __m512i) -> __m512i {
    /// Permutes a grid takes at most (IQ2_S's 1024 entries).
    const MAX_PERMUTES: usize = 16;
    const { assert!(N.is_power_of_two() && N / PERMUTE_ENTRIES <= MAX_PERMUTES) };
    // SAFETY: `t` holds N / 32 whole vectors, 64-byte aligned.
    let load = |k: usize| unsafe { _mm512_load_si512(t.0[CODES_PER_VECTOR * k..].as_ptr().cast()) };
    let mut v = [_mm512_setzero_si512(); MAX_PERMUTES];
    let mut n = N / PERMUTE_ENTRIES;
    for (k, v) in v.iter_mut().enumerate().take(n) {
        *v = _mm512_permutex2var_epi16(load(2 * k), idx, load(2 * k + 1));
    }
    let mut bit = PERMUTE_BITS;
    while n > 1 {
        let m = _mm512_test_epi16_mask(idx, _mm512_set1_epi16(1 << bit));
        for k in 0..n / 2 {
            v[k] = _mm512_mask_blend_epi16(m, v[2 * k], v[2 * k + 1]);
        }
        n /= 2;
        bit += 1;
    }
    v[0]
}

/// Step `part` (0 or 1) of 32 IQ3 codes: its sixteen entries' four values each.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi")]
#[inline]
fn iq3_values(codes: __m512i, part: usize, table: &Vector) -> __m512i {
    let x = _mm512_permutexvar_epi16(IQ3_SPREAD[part].load(), codes);
    let y = _mm512_multishift_epi64_epi8(_mm512_set1_epi64(IQ3_SHIFTS), x);
    _mm512_permutexvar_epi8(y, table.load())
}

/// Step `h` of 32 IQ2 codes: its eight entries' eight values each.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi")]
#[inline]
fn iq2_values(codes: __m512i, h: usize) -> __m512i {
    let x = _mm512_permutexvar_epi16(IQ2_SPREAD[h].load(), codes);
    let y = _mm512_multishift_epi64_epi8(_mm512_set1_epi64(IQ2_SHIFTS), x);
    _mm512_permutexvar_epi8(y, IQ2_TABLE.load())
}

/// One super-block's eight lanes, as `avx512_iq::grid_lanes` forms them, the grid values
/// looked up in vectors.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi")]
#[inline]
pub(super) fn grid_lanes_vbmi<B: WideGrid>(a: &B, b: &BlockQ8K) -> __m256i {
    let view = a.view();
    let mut idx = [_mm512_setzero_si512(); 2];
    let d = decode(&view, |part, v| idx[part] = v);
    // Plain loops: closures through `std::array::from_fn` were left out of line.
    let mut values = [_mm512_setzero_si512(); STEPS];
    match view {
        View::Iq2Xxs(a) => {
            // SAFETY: `qs` holds 64 bytes.
            let q = unsafe { _mm512_loadu_si512(a.qs.as_ptr().cast()) };
            let i = _mm512_maskz_permutexvar_epi8(LOW_BYTES, IQ2XXS_INDEX_BYTES.load(), q);
            let codes = lookup(&IQ2XXS_CODES, i);
            for (h, v) in values.iter_mut().enumerate() {
                *v = iq2_values(codes, h);
            }
        }
        View::Iq2S(_) => {
            let codes = lookup(&IQ2S_CODES, idx[0]);
            for (h, v) in values.iter_mut().enumerate() {
                *v = iq2_values(codes, h);
            }
        }
        View::Iq2Xs(_) => {
            let codes = lookup(&IQ2XS_CODES, idx[0]);
            for (h, v) in values.iter_mut().enumerate() {
                *v = iq2_values(codes, h);
            }
        }
        View::Iq3Xxs(a) => {
            for half in 0..2 {
                // SAFETY: `qs` holds 64 bytes, this half's 32 at 32·half.
                let q = unsafe { _mm256_loadu_si256(a.qs[32 * half..].as_ptr().cast()) };
                let codes = lookup(&IQ3XXS_CODES, _mm512_cvtepu8_epi16(q));
                for part in 0..2 {
                    values[2 * half + part] = iq3_values(codes, part, &IQ3XXS_TABLE);
                }
            }
        }
        View::Iq3S(_) => {
            for half in 0..2 {
                let codes = lookup(&IQ3S_CODES, idx[half]);
                for part in 0..2 {
                    values[2 * half + part] = iq3_values(codes, part, &IQ3S_TABLE);
                }
            }
        }
    }
    let mut acc = _mm512_setzero_si512();
    for (h, &v) in values.iter().enumerate() {
        acc = step_dot::<B>(acc, v, b, &d, h);
    }
    halves(acc)
}

#[cfg(test)]
mod tests {
    use super::super::avx512_iq::{grid_lanes, grid_passes};
    use super::*;
    use crate::kernels::blocks::QK_K;
    use crate::kernels::blocks::{
        as_blocks, Block, BlockIq2S, BlockIq2Xs, BlockIq2Xxs, BlockIq3S, BlockIq3Xxs,
    };
    use crate::kernels::{ActRow, GgmlType};
    use crate::test_support::skip::skip;

    /// Seeded bytes (a 64-bit LCG's high bytes).
    fn bytes(n: usize, seed: u64) -> Vec<u8> {
        let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..n)
            .map(|_| {
                s = s
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                (s >> 56) as u8
            })
            .collect()
    }

    /// Whether this CPU runs the lookups and the loads they replace.
    fn vbmi_and_tier() -> bool {
        is_x86_feature_detected!("avx2")
            && is_x86_feature_detected!("fma")
            && is_x86_feature_detected!("f16c")
            && is_x86_feature_detected!("avx512f")
            && is_x86_feature_detected!("avx512bw")
            && is_x86_feature_detected!("avx512vl")
            && is_x86_feature_detected!("avx512vnni")
            && is_x86_feature_detected!("avx512vbmi")
    }

    /// Super-blocks of random bytes (every grid index and sign pattern reachable), each
    /// against a random activation block: the lookups' lanes equal the loads', lane for lane.
    fn lookups_equal_loads<B: WideGrid + Block>() {
        const BLOCKS: usize = 2000;
        let w = bytes(BLOCKS * std::mem::size_of::<B>(), B::SCALE_GROUP as u64);
        let q = bytes(BLOCKS * QK_K, 7);
        let w = as_blocks::<B>(&w).unwrap();
        for (i, a) in w.iter().enumerate() {
            let mut b = BlockQ8K::default();
            for (y, &q) in b.qs.iter_mut().zip(&q[QK_K * i..]) {
                *y = q as i8;
            }
            let b = &b;
            // SAFETY: `vbmi_and_tier` found every feature both functions enable.
            let (new, old) = unsafe { (grid_lanes_vbmi(a, b), grid_lanes(a, b)) };
            let lanes = |v: __m256i| -> [i32; 8] {
                // SAFETY: 32 bytes either way.
                unsafe { std::mem::transmute(v) }
            };
            assert_eq!(
                lanes(new),
                lanes(old),
                "block {i} of {}",
                std::any::type_name::<B>()
            );
        }
    }

    #[test]
    fn vector_lookups_give_the_table_loads_lanes() {
        if !vbmi_and_tier() {
            skip("no AVX-512 VBMI (or no AVX-512 VNNI tier): the grid lookups in vectors are untested here");
            return;
        }
        lookups_equal_loads::<BlockIq2Xxs>();
        lookups_equal_loads::<BlockIq2Xs>();
        lookups_equal_loads::<BlockIq2S>();
        lookups_equal_loads::<BlockIq3Xxs>();
        lookups_equal_loads::<BlockIq3S>();
    }

    /// Rows of random blocks (f16 scale 1.0) against one and three tokens: the passes with the
    /// lookups and with the loads give the same bits (the tier tests hold the ones this CPU
    /// runs to the oracles; this runs the others here too).
    fn passes_agree<B: WideGrid + Block>(ty: GgmlType) {
        /// Rows: two passes of four and a row left over.
        const ROWS: usize = 9;
        const BLOCKS: usize = 3;
        /// f16 1.0, little-endian: each block's leading scale `d`.
        const ONE: [u8; 2] = [0x00, 0x3C];
        let size = std::mem::size_of::<B>();
        let rows: Vec<Vec<u8>> = (0..ROWS)
            .map(|r| {
                let mut w = bytes(BLOCKS * size, 100 + r as u64);
                for b in w.chunks_mut(size) {
                    b[..2].copy_from_slice(&ONE);
                }
                w
            })
            .collect();
        let rows: Vec<&[u8]> = rows.iter().map(Vec::as_slice).collect();
        for tokens in [1, 3] {
            let acts: Vec<ActRow> = (0..tokens)
                .map(|t| {
                    let x: Vec<f32> = bytes(BLOCKS * QK_K, 500 + t as u64)
                        .iter()
                        .map(|&b| f32::from(b as i8) / 64.0)
                        .collect();
                    let mut a = ActRow::new_for(ty);
                    a.set(&x);
                    a
                })
                .collect();
            let mut loads = vec![0f32; ROWS * tokens];
            let mut lookups = vec![f32::NAN; ROWS * tokens];
            grid_passes::<B, false>(&rows, &acts, &mut loads);
            grid_passes::<B, true>(&rows, &acts, &mut lookups);
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&lookups), bits(&loads), "{ty:?}, {tokens} tokens");
        }
    }

    #[test]
    fn passes_with_lookups_and_with_loads_agree() {
        if !vbmi_and_tier() {
            skip("no AVX-512 VBMI (or no AVX-512 VNNI tier): the grid lookups in vectors are untested here");
            return;
        }
        passes_agree::<BlockIq2Xxs>(GgmlType::Iq2Xxs);
        passes_agree::<BlockIq2Xs>(GgmlType::Iq2Xs);
        passes_agree::<BlockIq2S>(GgmlType::Iq2S);
        passes_agree::<BlockIq3Xxs>(GgmlType::Iq3Xxs);
        passes_agree::<BlockIq3S>(GgmlType::Iq3S);
    }

    /// Each code, its values read back from the value lists, is its grid entry.
    #[test]
    fn codes_hold_the_grids() {
        fn expand(code: u16, n: usize, values: &[u8], bits: usize) -> u64 {
            (0..n).fold(0, |e, j| {
                let c = usize::from(code >> (bits * j)) & ((1 << bits) - 1);
                e | u64::from(values[c]) << (8 * j)
            })
        }
        for (i, &e) in IQ3XXS_GRID.iter().enumerate() {
            assert_eq!(
                expand(IQ3XXS_CODES.0[i], 4, &IQ3XXS_VALUES, IQ3_CODE_BITS),
                u64::from(e)
            );
        }
        for (i, &e) in IQ3S_GRID.iter().enumerate() {
            assert_eq!(
                expand(IQ3S_CODES.0[i], 4, &IQ3S_VALUES, IQ3_CODE_BITS),
                u64::from(e)
            );
        }
        for (grid, codes) in [
            (&IQ2XXS_GRID[..], &IQ2XXS_CODES.0[..]),
            (&IQ2XS_GRID[..], &IQ2XS_CODES.0[..]),
            (&IQ2S_GRID[..], &IQ2S_CODES.0[..]),
        ] {
            assert_eq!(grid.len(), codes.len());
            for (&e, &c) in grid.iter().zip(codes) {
                assert_eq!(expand(c, 8, &IQ2_VALUES, IQ2_CODE_BITS), e);
            }
        }
    }
}
