//! Tests of the IQ2_XXS, IQ2_XS, IQ2_S, IQ1_S and IQ1_M quantizers (`quantize_iq2.rs`,
//! `quantize_iq1.rs`): hashes of seeded rows pinned against llama.cpp, zero rows, the grid
//! maps, row lengths, and a round trip through ggml's block layouts decoded here as ggml's
//! `dequantize_row_*` decode them.

use super::blocks::{IQ_GROUP, QK_K};
use super::half::f16_to_f32;
use super::iq_grid_maps::tests::check_nearest_rings;
use super::iq_grid_maps::GridMaps;
use super::iq_grids::{IQ1S_GRID, IQ2S_GRID, IQ2XS_GRID, IQ2XXS_GRID};
use super::iq_signs::KSIGNS;
use super::quantize_iq1::IQ1_GRID_BYTES;
use super::quantize_iq2::{
    iq2_maps, IQ2S_BLOCK_BYTES, IQ2XS_BLOCK_BYTES, IQ2XXS_BLOCK_BYTES, IQ2_GRID_BYTES, IQ2_GROUP,
};
use super::quantize_ref::tests::{fnv1a, kat_row, rel_rms_error};
use super::quantize_ref::{
    quantize_iq1_m, quantize_iq1_s, quantize_iq2_s, quantize_iq2_xs, quantize_iq2_xxs,
};
use super::test_util::SplitMix as Rng;
use crate::test_support::qc;

type Quantizer = fn(&[f32], Option<&[f32]>) -> Vec<u8>;

/// One type under test: its quantizer, a decoder of one block per ggml's
/// `dequantize_row_*`, its block size, and whether ggml accepts no weights.
struct Case {
    name: &'static str,
    quantize: Quantizer,
    decode: fn(&[u8]) -> [f32; QK_K],
    block_bytes: usize,
    null_ok: bool,
}

const CASES: [Case; 5] = [
    Case {
        name: "iq2_xxs",
        quantize: quantize_iq2_xxs,
        decode: decode_iq2_xxs,
        block_bytes: IQ2XXS_BLOCK_BYTES,
        null_ok: false,
    },
    Case {
        name: "iq2_xs",
        quantize: quantize_iq2_xs,
        decode: decode_iq2_xs,
        block_bytes: IQ2XS_BLOCK_BYTES,
        null_ok: false,
    },
    Case {
        name: "iq2_s",
        quantize: quantize_iq2_s,
        decode: decode_iq2_s,
        block_bytes: IQ2S_BLOCK_BYTES,
        null_ok: true,
    },
    Case {
        name: "iq1_s",
        quantize: quantize_iq1_s,
        decode: decode_iq1_s,
        block_bytes: 50,
        null_ok: false,
    },
    Case {
        name: "iq1_m",
        quantize: quantize_iq1_m,
        decode: decode_iq1_m,
        block_bytes: 56,
        null_ok: true,
    },
];

/// The f16 at byte `at`.
fn f16_at(b: &[u8], at: usize) -> f32 {
    f16_to_f32(u16::from_le_bytes([b[at], b[at + 1]]))
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

/// Eight grid values times `scale`, negated where `signs` has a bit.
fn put_signed(y: &mut [f32], entry: u64, signs: u8, scale: f32) {
    for (j, (v, g)) in y.iter_mut().zip(entry.to_le_bytes()).enumerate() {
        *v = scale * f32::from(g) * if signs >> j & 1 == 1 { -1.0 } else { 1.0 };
    }
}

/// Eight IQ1 grid values (−1, 0, 1) plus `delta`, times `scale`.
fn put_shifted(y: &mut [f32], entry: u64, delta: f32, scale: f32) {
    for (v, g) in y.iter_mut().zip(entry.to_le_bytes()) {
        *v = scale * (f32::from(g as i8) + delta);
    }
}

/// `dequantize_row_iq2_xxs`: `d·(0.5 + ls)·0.25 · grid · ±1`.
fn decode_iq2_xxs(b: &[u8]) -> [f32; QK_K] {
    let d = f16_at(b, 0);
    let mut y = [0f32; QK_K];
    for (ib, out) in y.chunks_exact_mut(32).enumerate() {
        let w = &b[2 + 8 * ib..];
        let aux1 = u32::from_le_bytes([w[4], w[5], w[6], w[7]]);
        let db = d * (0.5 + (aux1 >> 28) as f32) * 0.25;
        for (l, o) in out.chunks_exact_mut(IQ_GROUP).enumerate() {
            let signs = KSIGNS[((aux1 >> (7 * l)) & 127) as usize];
            put_signed(o, IQ2XXS_GRID[usize::from(w[l])], signs, db);
        }
    }
    y
}

/// `dequantize_row_iq2_xs`.
fn decode_iq2_xs(b: &[u8]) -> [f32; QK_K] {
    let d = f16_at(b, 0);
    let mut y = [0f32; QK_K];
    for (i, o) in y.chunks_exact_mut(IQ_GROUP).enumerate() {
        let sc = b[2 + QK_K / 4 + i / 4] >> (4 * (i / 2 % 2)) & 0xf;
        let db = d * (0.5 + f32::from(sc)) * 0.25;
        let q = u16_at(b, 2 + 2 * i);
        put_signed(
            o,
            IQ2XS_GRID[usize::from(q & 511)],
            KSIGNS[usize::from(q >> 9)],
            db,
        );
    }
    y
}

/// `dequantize_row_iq2_s`.
fn decode_iq2_s(b: &[u8]) -> [f32; QK_K] {
    let d = f16_at(b, 0);
    let mut y = [0f32; QK_K];
    for (i, o) in y.chunks_exact_mut(IQ_GROUP).enumerate() {
        let sc = b[2 + QK_K / 4 + QK_K / 32 + i / 4] >> (4 * (i / 2 % 2)) & 0xf;
        let db = d * (0.5 + f32::from(sc)) * 0.25;
        let high = usize::from(b[2 + QK_K / 4 + i / 4] >> (2 * (i % 4)) & 3);
        let e = usize::from(b[2 + i]) | high << 8;
        put_signed(o, IQ2S_GRID[e], b[2 + QK_K / 8 + i], db);
    }
    y
}

/// `dequantize_row_iq1_s`: `d·(2l + 1) · (grid ± 1/8)`.
fn decode_iq1_s(b: &[u8]) -> [f32; QK_K] {
    let d = f16_at(b, 0);
    let mut y = [0f32; QK_K];
    for (i, o) in y.chunks_exact_mut(IQ_GROUP).enumerate() {
        let qh = u16_at(b, 2 + QK_K / 8 + 2 * (i / 4));
        let dl = d * f32::from(2 * ((qh >> 12) & 7) + 1);
        let delta = if qh & 0x8000 != 0 { -0.125 } else { 0.125 };
        let e = usize::from(b[2 + i]) | usize::from((qh >> (3 * (i % 4))) & 7) << 8;
        put_shifted(o, IQ1S_GRID[e], delta, dl);
    }
    y
}

/// `dequantize_row_iq1_m`: `d` from the scale words' top nibbles, `d·(2l + 1) · (grid ± 1/8)`.
fn decode_iq1_m(b: &[u8]) -> [f32; QK_K] {
    let sc: [u16; 4] = std::array::from_fn(|k| u16_at(b, 48 + 2 * k));
    let s = (sc[0] >> 12) | ((sc[1] >> 8) & 0xf0) | ((sc[2] >> 4) & 0xf00) | (sc[3] & 0xf000);
    let d = f16_to_f32(s);
    let mut y = [0f32; QK_K];
    for (i, o) in y.chunks_exact_mut(IQ_GROUP).enumerate() {
        let sub = i / 2;
        let l = (sc[sub / 4] >> (3 * (sub % 4))) & 7;
        let qh = b[32 + sub];
        let nibble = qh >> (4 * (i % 2));
        let delta = if nibble & 8 != 0 { -0.125 } else { 0.125 };
        let e = usize::from(b[i]) | usize::from(nibble & 7) << 8;
        put_shifted(o, IQ1S_GRID[e], delta, d * f32::from(2 * l + 1));
    }
    y
}

/// The weights of the known-answer rows, drawn after each row: 0 at every eleventh column
/// from the fifth, else `0.1 + unit`.
fn kat_weights(g: &mut Rng, n: usize) -> Vec<f32> {
    (0..n)
        .map(|i| if i % 11 == 4 { 0.0 } else { 0.1 + g.unit() })
        .collect()
}

/// FNV-1a 64 of a type's output on the eight `kat_row`s (512 values each, seed 42), with
/// [`kat_weights`] or, `with_weights` false, none.
fn kat_hash(q: Quantizer, with_weights: bool) -> u64 {
    let mut g = Rng(42);
    let mut bytes = Vec::new();
    for r in 0..8 {
        let x = kat_row(r, &mut g);
        let w = kat_weights(&mut g, x.len());
        bytes.extend(q(&x, with_weights.then_some(&w[..])));
    }
    fnv1a(&bytes)
}

/// FNV-1a 64 of llama.cpp's output (`quantize_iq2_xxs(src, dst, 1, 512, w)` etc. of the
/// vendored llama.cpp 0c1e57098's libggml-base.a, x86-64) on the eight `kat_row`s with
/// [`kat_weights`], and for IQ2_S and IQ1_M with NULL weights, from a C harness drawing them
/// from the same generator. The same harness (read by [`harness_rows_match_llama_cpp`])
/// compared 55 865 blocks of every type byte for byte: 8 800 rows of 256 to 4 096 values
/// from five seeds, of 16 kinds (gaussian, uniform, outliers ×100, zero rows, zero
/// sub-blocks, scales 1e-20, 1e-7, 1e-12 and 1e10, constant rows, scales 2⁻²⁰..2²⁰ a
/// sub-block, ties, sparse, positive, cubes, ±1), weights random positive, a quarter zero,
/// zero sub-blocks, or NULL (all 1.0 where ggml asserts weights).
#[test]
fn seeded_rows_hash_as_llama_cpp_quantizes_them() {
    let want = [
        ("iq2_xxs", 0x6a3a_ff5a_e486_cd31, None),
        ("iq2_xs", 0xf499_3805_dbc1_db5c, None),
        ("iq2_s", 0x3d0a_6167_9442_1b0e, Some(0x0a68_645a_ae8e_c26d)),
        ("iq1_s", 0x6235_537f_ecb5_22c6, None),
        ("iq1_m", 0x72c0_0198_d8af_d52f, Some(0xd3e9_83b3_3fec_111b)),
    ];
    for (case, (name, weighted, null)) in CASES.iter().zip(want) {
        assert_eq!(case.name, name);
        assert_eq!(kat_hash(case.quantize, true), weighted, "{name}");
        if let Some(null) = null {
            assert_eq!(
                kat_hash(case.quantize, false),
                null,
                "{name} without weights"
            );
        }
    }
}

/// A zero row is all zero bytes in every type, with weights or without (what llama.cpp
/// writes for `kat_row(3)`, in the hashes above).
#[test]
fn zero_rows_are_zero_bytes() {
    let z = [0f32; 2 * QK_K];
    let w = [1.5f32; 2 * QK_K];
    for case in &CASES {
        for weights in [Some(&w[..]), None] {
            let y = (case.quantize)(&z, weights);
            assert_eq!(y.len(), 2 * case.block_bytes, "{}", case.name);
            assert!(y.iter().all(|&b| b == 0), "{}", case.name);
        }
    }
}

/// Where ggml asserts weights, no weights means weights of all 1.0; where it accepts NULL,
/// no weights is its own rule (the hashes above), not 1.0.
#[test]
fn no_weights_is_flat_only_where_ggml_requires_weights() {
    let mut g = Rng(11);
    let x: Vec<f32> = (0..4 * QK_K).map(|_| g.bell()).collect();
    let ones = vec![1f32; x.len()];
    for case in &CASES {
        let (none, flat) = ((case.quantize)(&x, None), (case.quantize)(&x, Some(&ones)));
        assert_eq!(none == flat, !case.null_ok, "{}", case.name);
    }
}

/// One weight per column, whole super-blocks: `n/256` blocks of the type's size.
#[test]
fn output_is_whole_blocks() {
    let mut g = Rng(3);
    for n in [QK_K, 3 * QK_K, 16 * QK_K] {
        let x: Vec<f32> = (0..n).map(|_| g.bell()).collect();
        for case in &CASES {
            assert_eq!((case.quantize)(&x, None).len(), n / QK_K * case.block_bytes);
        }
    }
    for case in &CASES {
        let x = vec![1f32; QK_K + 32];
        let short = std::panic::catch_unwind(|| (case.quantize)(&x, None));
        assert!(short.is_err(), "{}: a partial super-block", case.name);
        let w = [1f32; 8];
        let bad = std::panic::catch_unwind(|| (case.quantize)(&x[..QK_K], Some(&w)));
        assert!(bad.is_err(), "{}: weights not one per column", case.name);
    }
}

/// The IQ2 and IQ1 grids' entries are level codes in increasing order, so their codes are
/// ggml's `kgrid_2bit_256`, `kgrid_2bit_512`, `kgrid_2bit_1024` and `kgrid_1bit_2048` lists
/// (all compared once against llama.cpp 0c1e57098's source; the first eight and the last are
/// pinned here), and every off-grid code lists the entries at its `nwant` nearest rings.
#[test]
fn iq2_grid_maps_are_ggmls() {
    let grids = [
        (&IQ2XXS_GRID[..], IQ2_GRID_BYTES, 2),
        (&IQ2XS_GRID[..], IQ2_GRID_BYTES, 2),
        (&IQ2S_GRID[..], IQ2_GRID_BYTES, 1),
        (&IQ1S_GRID[..], IQ1_GRID_BYTES, 3),
    ];
    let firsts = [
        [0, 2, 5, 8, 10, 17, 20, 32],
        [0, 2, 5, 8, 10, 17, 20, 22],
        [0, 2, 5, 8, 10, 17, 20, 22],
        [0, 2, 5, 8, 10, 17, 21, 32],
    ];
    let lasts = [43268, 43690, 43690, 43690];
    let ggml_grid = grids.into_iter().zip(firsts).zip(lasts);
    for (((grid, bytes, rings), first), last) in ggml_grid {
        let maps: GridMaps<IQ2_GROUP> = iq2_maps(grid, bytes, rings);
        let codes: Vec<usize> = maps.levels.iter().map(|l| maps.code(l)).collect();
        assert!(codes.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(codes[..8], first);
        assert_eq!(codes.last(), Some(&last));
        check_nearest_rings(&maps, 3, rings);
    }
}

/// Gaussian rows of any scale (with flat weights, and without where ggml allows) decode
/// close to what they were: relative RMS error under each type's bound (a few times what
/// 2 and 1.5 bits a value give).
#[test]
fn round_trip_error_is_bounded() {
    fn prop(seed: u64, exp: i8) -> bool {
        let mut g = Rng(seed);
        let scale = 2f32.powi(i32::from(exp).rem_euclid(16) - 4);
        let x: Vec<f32> = (0..2 * QK_K).map(|_| scale * g.bell()).collect();
        let bounds = [0.45, 0.4, 0.35, 0.6, 0.7];
        CASES.iter().zip(bounds).all(|(case, bound)| {
            let y = (case.quantize)(&x, None);
            let back: Vec<f32> = y
                .chunks_exact(case.block_bytes)
                .flat_map(case.decode)
                .collect();
            let err = rel_rms_error(&x, &back);
            if err > bound {
                eprintln!("{}: relative RMS error {err} > {bound}", case.name);
            }
            err <= bound
        })
    }
    qc::check("iq2/iq1 round trip", prop as fn(u64, i8) -> bool);
}

/// Compares with the C harness's files (not part of the repository): each row's length,
/// whether it has weights, its values (and weights), then per type (IQ2_XXS, IQ2_XS, IQ2_S,
/// IQ1_S, IQ1_M) ggml's output bytes, NULL weights given as all 1.0 to the types that
/// assert them. `LOCUS_IQ2_HARNESS` lists the files, comma-separated.
#[test]
#[ignore = "needs the C harness's files (LOCUS_IQ2_HARNESS)"]
fn harness_rows_match_llama_cpp() {
    let files = std::env::var("LOCUS_IQ2_HARNESS").expect("LOCUS_IQ2_HARNESS");
    let mut blocks = [0usize; 5];
    let mut bad = [0usize; 5];
    for path in files.split(',') {
        let data = std::fs::read(path).expect("harness file");
        let mut r = Reader(&data);
        while !r.0.is_empty() {
            let (n, has_w, kind) = (r.word() as usize, r.word() == 1, r.word());
            let x = r.floats(n);
            let w = has_w.then(|| r.floats(n));
            for (t, case) in CASES.iter().enumerate() {
                let len = r.word() as usize;
                let want = r.take(len);
                let got = (case.quantize)(&x, w.as_deref());
                for (b, (gb, wb)) in got
                    .chunks_exact(case.block_bytes)
                    .zip(want.chunks_exact(case.block_bytes))
                    .enumerate()
                {
                    blocks[t] += 1;
                    if gb != wb {
                        bad[t] += 1;
                        if bad[t] <= 3 {
                            eprintln!(
                                "{} kind {kind} n {n} weights {has_w} block {b}:\n got {gb:02x?}\nwant {wb:02x?}",
                                case.name
                            );
                        }
                    }
                }
            }
        }
    }
    for (t, case) in CASES.iter().enumerate() {
        eprintln!("{}: {} blocks, {} differ", case.name, blocks[t], bad[t]);
    }
    assert_eq!(bad, [0; 5]);
}

/// Reads the harness's little-endian words, floats and bytes in order.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> &'a [u8] {
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        head
    }

    fn word(&mut self) -> u32 {
        u32::from_le_bytes(self.take(4).try_into().expect("4 bytes"))
    }

    fn floats(&mut self, n: usize) -> Vec<f32> {
        self.take(4 * n)
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().expect("4 bytes")))
            .collect()
    }
}
