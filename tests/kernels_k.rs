//! Every kernel tier against the scalar oracles for the types of the generic path
//! (`kernels::entries`: Q5_0, Q5_1, IQ4_NL, the K-quants, IQ4_XS and the IQ2 and IQ3 types),
//! bit for bit: each tier's single dot (`dot_ordered`), its matrix-vector runs (`gemv`,
//! decode's multi-row kernels) and its tiles (`dot_tile`), in every summation order, against
//! the scalar table's single dot of each output; and each tier's Q8_K activation quantizer against
//! `dequantize::quantize_act_q8_k`. The scalar tier's own `gemv` and `dot_tile` are held to its
//! single dot too. Weights come from the reference quantizers (on rows with edge cases: zero
//! blocks, huge and tiny values, all-negative blocks, exact rounding ties, ±max together) and
//! from random bytes with sane f16 scales, which reach codes the quantizers rarely write. A tier
//! this CPU lacks is skipped with a printed reason.

mod common;
#[path = "common/qc.rs"]
mod qc;

use locus::kernels::blocks::{BlockQ8K, QK, QK_K};
use locus::kernels::dequantize::quantize_act_q8_k;
use locus::kernels::entries::{Variant, SCALAR};
use locus::kernels::{pack, ActRow, ActType, GgmlType, Kernels, Layout, SumOrder, Tier, PACK_ROWS};
use quickcheck::{Arbitrary, Gen};

const TIERS: [Tier; 2] = [Tier::Avx2, Tier::Avx512];
const ORDERS: [SumOrder; 4] = [
    SumOrder::Lanes,
    SumOrder::BlockChain,
    SumOrder::RepackedGemm,
    SumOrder::Batched,
];
/// Most super-blocks in a generated row.
const MAX_SUPER_BLOCKS: usize = 16;
/// Most rows of a generated matrix: two passes of an eight-row kernel and a tail.
const MAX_ROWS: usize = 19;
/// Most tokens of a generated tile.
const MAX_TOKENS: usize = 5;

/// The SIMD tiers this CPU runs (each skip reported once per test binary).
fn tiers() -> Vec<Kernels> {
    let mut v = Vec::new();
    for t in TIERS {
        match Kernels::for_tier(t) {
            Ok(k) => v.push(k),
            Err(e) => {
                static ONCE: std::sync::Once = std::sync::Once::new();
                ONCE.call_once(|| common::skip::tier_unavailable(t, &e));
            }
        }
    }
    v
}

/// Every type held here to the oracles of `oracle_vec_dot.rs`, `oracle_repacked.rs` and
/// `oracle_tiled.rs` on this file's inputs: every row but Q4_0, Q4_1, Q8_0 and the float types.
/// `tests/kernels.rs` checks those against `scalar.rs` on the inputs their kernels take
/// (activations from the quantizer, never −128; finite floats), which the random bytes here
/// would leave.
fn entry_types() -> Vec<GgmlType> {
    use GgmlType::{Bf16, F16, F32, Q4_0, Q4_1, Q8_0};
    const OWN_TESTS: [GgmlType; 6] = [Q4_0, Q4_1, Q8_0, F32, F16, Bf16];
    SCALAR
        .iter()
        .map(|e| e.ty)
        .filter(|ty| !OWN_TESTS.contains(ty))
        .collect()
}

/// A block of 32 values of one kind, edge cases included.
fn gen_block(g: &mut Gen, out: &mut Vec<f32>) {
    let kind = u8::arbitrary(g) % 9;
    let start = out.len();
    for i in 0..32 {
        let r = (i32::arbitrary(g) % 10_000) as f32 / 1000.0;
        out.push(match kind {
            0 => 0.0,                                  // a zero block
            1 => r * 6000.0,                           // near the largest f16 scales
            2 => -r.abs() - 0.01,                      // all negative
            3 => r * 1e-6,                             // tiny
            4 => (i32::arbitrary(g) % 9) as f32 + 0.5, // halves: rounding ties
            5 => (i as f32 - 16.0) * 0.25,             // an exact grid
            _ => r,
        });
    }
    match kind {
        // −127 first makes Q8_K's multiplier exactly 1: the halves above tie exactly.
        4 => out[start] = -127.0,
        // +max and −max in one block: the first of them sets Q8_K's sign.
        5 => {
            let m = 1.0 + (u8::arbitrary(g) % 64) as f32;
            let (a, b) = (
                start + usize::arbitrary(g) % 32,
                start + usize::arbitrary(g) % 32,
            );
            out[a] = m;
            out[b] = -m;
        }
        _ => {}
    }
}

/// A row of `super_blocks` × 256 values.
fn gen_row(g: &mut Gen, super_blocks: usize) -> Vec<f32> {
    let mut v = Vec::with_capacity(super_blocks * QK_K);
    while v.len() < super_blocks * QK_K {
        gen_block(g, &mut v);
    }
    v
}

/// Byte offsets of the f16 fields (`d`, then `dmin`/`m`) in a block of `ty`.
fn f16_fields(ty: GgmlType) -> &'static [usize] {
    match ty {
        GgmlType::Q5_1 | GgmlType::Q4K | GgmlType::Q5K => &[0, 2],
        GgmlType::Q2K => &[80, 82],
        GgmlType::Q3K => &[108],
        GgmlType::Q6K => &[208],
        _ => &[0],
    }
}

/// f16 bits of either sign with magnitude in 2^−10 ..< 1 (or zero, now and then).
fn sane_f16(g: &mut Gen) -> [u8; 2] {
    let r = u32::arbitrary(g);
    if r % 16 == 0 {
        return [0, 0];
    }
    let sign = (r & 1) << 15;
    let exp = 5 + (r >> 1) % 10;
    let bits = sign | (exp << 10) | ((r >> 5) & 0x3ff);
    (bits as u16).to_le_bytes()
}

/// An MXFP4 scale code: mostly 100..140 (scales 2⁻²⁸ ..< 2¹²), now and then 0..4, whose
/// halved scales (2⁻¹²⁸ ..) are subnormal and whose products with the activation's scale
/// underflow. (Codes near 255 would overflow the sums to infinities, where NaN payloads tell
/// nothing about the order of the sums.)
fn sane_e8m0(g: &mut Gen) -> u8 {
    let r = u8::arbitrary(g);
    match r % 8 {
        0 => r % 4,
        _ => 100 + r % 40,
    }
}

/// How a test's weight rows are made.
#[derive(Clone, Copy, Debug)]
enum WeightBytes {
    /// The values quantized by the reference quantizer.
    Quantized,
    /// Random bytes with sane f16 scales: codes the quantizers rarely write.
    Random,
    /// Every byte this one, with sane f16 scales: all codes at one end of their range (0xff:
    /// the largest unsigned codes; 0x00: IQ4_XS's −127), the largest integer sums a kernel
    /// meets.
    Fill(u8),
}
use WeightBytes::{Fill, Quantized, Random};

/// IQ1_M keeps its f16 scale in the top nibbles of the four little-endian words of its last
/// eight bytes (`scales`), the lowest nibble in word 0.
const IQ1M_SCALES_AT: usize = 48;

/// Writes the f16 bits `h` into an IQ1_M block's scale nibbles.
fn set_iq1_m_scale(blk: &mut [u8], h: [u8; 2]) {
    let h = u16::from_le_bytes(h);
    for w in 0..4 {
        let hi = IQ1M_SCALES_AT + 2 * w + 1;
        blk[hi] = blk[hi] & 0x0f | (((h >> (4 * w)) & 0xf) as u8) << 4;
    }
}

/// A weight row of `ty` from `values`, made as `how` says (random bytes for `Quantized` where
/// the type has no quantizer yet: IQ1_S and IQ1_M have kernel rows before their type rows).
fn weight_row(g: &mut Gen, ty: GgmlType, values: &[f32], how: WeightBytes) -> Vec<u8> {
    let size = values.len() / ty.block_size() * ty.block_bytes();
    let how = match (how, ty.codec()) {
        (Quantized, None) => Random,
        (how, _) => how,
    };
    let mut bytes: Vec<u8> = match how {
        Quantized => return locus::model::quantize::quantize_row(ty, values),
        Random => (0..size).map(|_| u8::arbitrary(g)).collect(),
        Fill(b) => vec![b; size],
    };
    for blk in bytes.chunks_exact_mut(ty.block_bytes()) {
        if ty == GgmlType::Mxfp4 {
            blk[0] = sane_e8m0(g);
            continue;
        }
        if ty == GgmlType::Iq1M {
            set_iq1_m_scale(blk, sane_f16(g));
            continue;
        }
        for &o in f16_fields(ty) {
            blk[o..o + 2].copy_from_slice(&sane_f16(g));
        }
    }
    bytes
}

/// An empty activation buffer for weights of `ty`: the type table's, or Q8_K for the types
/// with kernel rows whose type rows wait for their codecs (the IQ2 types until their rows
/// flip), as every 256-element IQ type takes. Such a type has no quantizer here, so its cases
/// with [`Quantized`] weights are skipped ([`weight_rows`]); its random and filled rows are
/// checked all the same.
fn act_for(ty: GgmlType) -> ActRow {
    ActRow::of(ty.act().unwrap_or(ActType::Q8K))
}

/// The weight rows of `ty` from `values` ([`weight_row`]), or `None` for [`Quantized`] rows of a
/// type without a quantizer yet.
fn weight_rows(
    g: &mut Gen,
    ty: GgmlType,
    values: &[Vec<f32>],
    how: WeightBytes,
) -> Option<Vec<Vec<u8>>> {
    if matches!(how, Quantized) && ty.codec().is_none() {
        return None;
    }
    Some(values.iter().map(|w| weight_row(g, ty, w, how)).collect())
}

/// A matrix case: rows and activations of one length (whole super-blocks).
#[derive(Clone, Debug)]
struct Case {
    w: Vec<Vec<f32>>,
    x: Vec<Vec<f32>>,
    /// How the weight rows are made from `w`.
    bytes: WeightBytes,
    seed: u64,
}

impl Arbitrary for Case {
    fn arbitrary(g: &mut Gen) -> Case {
        let sb = 1 + usize::arbitrary(g) % MAX_SUPER_BLOCKS;
        let n_rows = 1 + usize::arbitrary(g) % MAX_ROWS;
        let n_tokens = 1 + usize::arbitrary(g) % MAX_TOKENS;
        Case {
            w: (0..n_rows).map(|_| gen_row(g, sb)).collect(),
            x: (0..n_tokens).map(|_| gen_row(g, sb)).collect(),
            bytes: if bool::arbitrary(g) {
                Random
            } else {
                Quantized
            },
            seed: u64::arbitrary(g),
        }
    }
}

fn same(a: f32, b: f32) -> bool {
    a.to_bits() == b.to_bits()
}

/// Every tier's `dot_ordered` (SIMD tiers), `gemv` and `dot_tile` (all tiers) for every entry
/// type and order on `c`, against the scalar single dot of each output.
fn check_case(c: &Case) -> bool {
    check_case_with(c, |_| {})
}

/// The activation rows of `ty` for `xs`, each passed through `edit` after quantizing.
fn activations(ty: GgmlType, xs: &[Vec<f32>], edit: &impl Fn(&mut ActRow)) -> Vec<ActRow> {
    xs.iter()
        .map(|x| {
            let mut a = act_for(ty);
            a.set(x);
            edit(&mut a);
            a
        })
        .collect()
}

/// [`check_case`] with each activation row passed through `edit` after quantizing.
fn check_case_with(c: &Case, edit: impl Fn(&mut ActRow)) -> bool {
    let scalar = Kernels::scalar();
    let simd = tiers();
    let mut all = vec![scalar];
    all.extend(simd.iter().copied());
    let mut g = Gen::from_size_and_seed(100, c.seed);
    for ty in entry_types() {
        // Rows of odd block counts ([`odd_block_counts_equal_the_scalar_oracles`]) are only
        // whole blocks of the 32-element types.
        if !c.w[0].len().is_multiple_of(ty.block_size()) {
            continue;
        }
        let Some(weights) = weight_rows(&mut g, ty, &c.w, c.bytes) else {
            continue;
        };
        let rows: Vec<&[u8]> = weights.iter().map(Vec::as_slice).collect();
        let concat = weights.concat();
        let acts = activations(ty, &c.x, &edit);
        for order in ORDERS {
            // want[t][r]: the scalar table's single dot.
            let want: Vec<Vec<f32>> = acts
                .iter()
                .map(|a| {
                    rows.iter()
                        .map(|r| scalar.dot_ordered(ty, order, r, a))
                        .collect()
                })
                .collect();
            let name = ty.name();
            for k in &simd {
                for (t, a) in acts.iter().enumerate() {
                    for (r, row) in rows.iter().enumerate() {
                        let got = k.dot_ordered(ty, order, row, a);
                        if !same(got, want[t][r]) {
                            eprintln!(
                                "{name} {order:?} tier {} dot, row {r} token {t}: {got:e} != \
                                 scalar {:e}",
                                k.tier, want[t][r]
                            );
                            return false;
                        }
                    }
                }
            }
            for k in &all {
                for (t, a) in acts.iter().enumerate() {
                    let mut out = vec![f32::NAN; rows.len()];
                    k.gemv(ty, order, &concat, a, &mut out);
                    for (r, (&got, &w)) in out.iter().zip(&want[t]).enumerate() {
                        if !same(got, w) {
                            eprintln!(
                                "{name} {order:?} tier {} gemv of {} rows, row {r} token {t}: \
                                 {got:e} != scalar {w:e}",
                                k.tier,
                                rows.len()
                            );
                            return false;
                        }
                    }
                }
                let mut out = vec![f32::NAN; rows.len() * acts.len()];
                k.dot_tile(ty, order, &rows, &acts, &mut out);
                for (t, wt) in want.iter().enumerate() {
                    for (r, &w) in wt.iter().enumerate() {
                        let got = out[t * rows.len() + r];
                        if !same(got, w) {
                            eprintln!(
                                "{name} {order:?} tier {} tile {}x{}, row {r} token {t}: \
                                 {got:e} != scalar {w:e}",
                                k.tier,
                                rows.len(),
                                acts.len()
                            );
                            return false;
                        }
                    }
                }
            }
        }
    }
    true
}

/// Every tier has a tile kernel for every entry type, and it takes each variant the type has
/// (a declined variant would fall back to one dot per output: correct, but slow).
#[test]
fn every_tier_has_a_tile_kernel_for_every_variant() {
    for k in tiers() {
        for ty in entry_types() {
            let e = k.entry(ty).expect("an entry type");
            let tile = e
                .tile
                .unwrap_or_else(|| panic!("{} tier {}: no tile kernel", ty.name(), k.tier));
            let mut variants = vec![Variant::Dot];
            variants.extend(e.dot_repacked.map(|_| Variant::Repacked));
            variants.extend(e.dot_repacked_gemm.map(|_| Variant::RepackedGemm));
            variants.extend(e.dot_batch.map(|_| Variant::Batch));
            for v in variants {
                let act = act_for(ty);
                let out = &mut [0f32; 0];
                assert!(
                    tile(&[], std::slice::from_ref(&act), v, out),
                    "{} tier {}: {v:?} declined",
                    ty.name(),
                    k.tier
                );
            }
        }
    }
}

#[test]
fn entry_types_of_every_tier_equal_the_scalar_oracles() {
    fn prop(c: Case) -> bool {
        check_case(&c)
    }
    qc::check_n(
        "entry_types_of_every_tier_equal_the_scalar_oracles",
        100,
        prop as fn(Case) -> bool,
    );
}

/// Every row count from 1 to [`MAX_ROWS`] (each multi-row kernel's whole passes and every
/// tail), with one zero row, a row of the largest values and an all-negative row.
#[test]
fn every_row_count_equals_the_scalar_oracles() {
    let mut g = qc::gen("every_row_count_equals_the_scalar_oracles", 100);
    let sb = 3;
    let mut w: Vec<Vec<f32>> = (0..MAX_ROWS).map(|_| gen_row(&mut g, sb)).collect();
    w[0] = vec![0.0; sb * QK_K];
    w[1] = (0..sb * QK_K)
        .map(|i| (i as f32 * 0.37).sin() * 60000.0)
        .collect();
    w[MAX_ROWS - 1] = (0..sb * QK_K).map(|i| -1.0 - i as f32).collect();
    let x: Vec<Vec<f32>> = (0..2).map(|_| gen_row(&mut g, sb)).collect();
    for bytes in [Quantized, Random] {
        for n in 1..=MAX_ROWS {
            let c = Case {
                w: w[..n].to_vec(),
                x: x.clone(),
                bytes,
                seed: n as u64,
            };
            assert!(check_case(&c), "{n} rows, weights {bytes:?}");
        }
    }
}

/// Every token count from 1 to 12 (llama.cpp's `vec_dot` below eight tokens, its tiled matmul
/// from eight; each tile kernel's whole passes of tokens and their tails) over odd row counts,
/// for random, filled and quantized weight bytes.
#[test]
fn every_token_count_equals_the_scalar_oracles() {
    let mut g = qc::gen("every_token_count_equals_the_scalar_oracles", 100);
    let sb = 2;
    for n_tokens in 1..=12 {
        for (n_rows, bytes) in [(3, Random), (5, Fill(0xff)), (7, Fill(0)), (9, Quantized)] {
            let c = Case {
                w: (0..n_rows).map(|_| gen_row(&mut g, sb)).collect(),
                x: (0..n_tokens).map(|_| gen_row(&mut g, sb)).collect(),
                bytes,
                seed: u64::arbitrary(&mut g),
            };
            assert!(
                check_case(&c),
                "{n_rows} rows × {n_tokens} tokens, weights {bytes:?}"
            );
        }
    }
}

/// Rows of 1, 3, 5 and 7 blocks of 32 (the 32-element types' odd last block: IQ4_NL's and
/// MXFP4's `vec_dot` adds it after the two accumulators' sum) over odd row and token counts,
/// random, filled and quantized weights.
#[test]
fn odd_block_counts_equal_the_scalar_oracles() {
    let mut g = qc::gen("odd_block_counts_equal_the_scalar_oracles", 100);
    let row = |g: &mut Gen, blocks: usize| {
        let mut v = Vec::new();
        while v.len() < blocks * QK {
            gen_block(g, &mut v);
        }
        v
    };
    for blocks in [1, 3, 5, 7] {
        for (n_rows, n_tokens, bytes) in [
            (1, 1, Random),
            (3, 5, Quantized),
            (5, 3, Fill(0xff)),
            (9, 2, Random),
            (8, 4, Quantized),
            (7, 9, Fill(0)),
        ] {
            let c = Case {
                w: (0..n_rows).map(|_| row(&mut g, blocks)).collect(),
                x: (0..n_tokens).map(|_| row(&mut g, blocks)).collect(),
                bytes,
                seed: u64::arbitrary(&mut g),
            };
            assert!(
                check_case(&c),
                "{blocks} blocks, {n_rows} rows × {n_tokens} tokens, weights {bytes:?}"
            );
        }
    }
}

/// Batches large enough for the panel kernels (8, 16 and more than 32 tokens: several panel
/// calls and their edges) over whole groups of eight rows and a tail, quantized and random
/// weights; 48 and 65 rows for the panels that take two groups of sixteen at once (a pair, then
/// one group or a tail), and more tokens than one panel call takes.
/// Rows of 72 blocks of 32 (nine super-blocks): longer than the run of blocks AVX2's wide
/// tiles write scale products for at once (32), for whole groups of eight tokens and a tail.
#[test]
fn long_rows_equal_the_scalar_oracles() {
    let mut g = qc::gen("long_rows_equal_the_scalar_oracles", 100);
    let sb = 9;
    for bytes in [Quantized, Random] {
        let c = Case {
            w: (0..5).map(|_| gen_row(&mut g, sb)).collect(),
            x: (0..21).map(|_| gen_row(&mut g, sb)).collect(),
            bytes,
            seed: u64::arbitrary(&mut g),
        };
        assert!(check_case(&c), "{sb} super-blocks, weights {bytes:?}");
    }
}

#[test]
fn panels_equal_the_scalar_oracles() {
    let mut g = qc::gen("panels_equal_the_scalar_oracles", 100);
    let sb = 2;
    for (n_rows, n_tokens) in [(8, 8), (17, 16), (16, 33), (48, 17), (65, 70)] {
        for bytes in [Quantized, Random] {
            let c = Case {
                w: (0..n_rows).map(|_| gen_row(&mut g, sb)).collect(),
                x: (0..n_tokens).map(|_| gen_row(&mut g, sb)).collect(),
                bytes,
                seed: u64::arbitrary(&mut g),
            };
            assert!(
                check_case(&c),
                "{n_rows} rows × {n_tokens} tokens, weights {bytes:?}"
            );
        }
    }
}

/// The panels (sixteen tokens and more) with activations at the edges: every quant −128 or
/// +127, block sums kept consistent. The largest sums the panels' integers meet: AVX2 adds
/// the `maddubs` pairs of several groups in i16 before widening them, which must not overflow
/// for any code of the type.
#[test]
fn panels_at_activation_extremes_equal_the_scalar_oracles() {
    fn extreme(v: i8) -> impl Fn(&mut ActRow) {
        move |a: &mut ActRow| match a {
            ActRow::Q8K(r) => {
                for b in r.iter_mut() {
                    b.qs.iter_mut().for_each(|q| *q = v);
                    b.bsums.iter_mut().for_each(|s| *s = 16 * i16::from(v));
                }
            }
            ActRow::Q8_0(r) => {
                for (b, s) in r.blocks.iter_mut().zip(r.sums.iter_mut()) {
                    b.qs.iter_mut().for_each(|q| *q = v);
                    *s = 32 * i32::from(v);
                }
            }
            _ => {}
        }
    }
    let mut g = qc::gen("panels_at_activation_extremes", 100);
    for bytes in [Quantized, Random, Fill(0xff), Fill(0)] {
        // 17 rows: a sixteen-row panel (AVX-512) or two eight-row ones (AVX2), and a tail.
        let c = Case {
            w: (0..17).map(|_| gen_row(&mut g, 2)).collect(),
            x: (0..17).map(|_| gen_row(&mut g, 2)).collect(),
            bytes,
            seed: u64::arbitrary(&mut g),
        };
        for v in [i8::MIN, i8::MAX] {
            assert!(
                check_case_with(&c, extreme(v)),
                "activations all {v}, weights {bytes:?}"
            );
        }
    }
}

/// Activations holding −128, which no quantizer writes (ggml's sign trick wraps on them in
/// `vec_dot`, true products do not): every eleventh quant set to −128, the block sums kept
/// consistent.
#[test]
fn activations_of_minus_128_equal_the_scalar_oracles() {
    fn edit(a: &mut ActRow) {
        const EVERY: usize = 11;
        let wrap = |qs: &mut [i8]| qs.iter_mut().step_by(EVERY).for_each(|q| *q = i8::MIN);
        let sum = |qs: &[i8]| qs.iter().map(|&q| i32::from(q)).sum::<i32>();
        match a {
            ActRow::Q8_0(r) => {
                for (b, s) in r.blocks.iter_mut().zip(r.sums.iter_mut()) {
                    wrap(&mut b.qs);
                    *s = sum(&b.qs);
                }
            }
            ActRow::Q8_1(r) => r.iter_mut().for_each(|b| wrap(&mut b.qs)),
            ActRow::Q8K(r) => {
                for b in r.iter_mut() {
                    wrap(&mut b.qs);
                    for (s, qs) in b.bsums.iter_mut().zip(b.qs.chunks_exact(16)) {
                        *s = sum(qs) as i16;
                    }
                }
            }
            ActRow::F32(_) | ActRow::F16(_) | ActRow::Bf16(_) => {}
        }
    }
    fn prop(c: Case) -> bool {
        check_case_with(&c, edit)
    }
    qc::check_n(
        "activations_of_minus_128_equal_the_scalar_oracles",
        30,
        prop as fn(Case) -> bool,
    );
    // Prompt-sized: enough tokens for the panels (whole groups of eight), rows padded.
    let mut g = qc::gen("activations_of_minus_128_panels", 100);
    for bytes in [Quantized, Random] {
        let c = Case {
            w: (0..17).map(|_| gen_row(&mut g, 2)).collect(),
            x: (0..17).map(|_| gen_row(&mut g, 2)).collect(),
            bytes,
            seed: u64::arbitrary(&mut g),
        };
        assert!(check_case_with(&c, edit), "17 × 17, weights {bytes:?}");
    }
}

/// Every tier's Q8_K activation quantizer against `quantize_act_q8_k`, field for field.
fn check_q8_k(x: &[f32]) -> bool {
    let mut want = vec![BlockQ8K::default(); x.len() / QK_K];
    quantize_act_q8_k(x, &mut want);
    for k in tiers() {
        let mut got = ActRow::of(ActType::Q8K);
        k.quantize_act(&mut got, x);
        let ActRow::Q8K(got) = got else {
            panic!("a Q8_K buffer came back as another kind")
        };
        let fields = |b: &BlockQ8K| (b.d.to_bits(), b.qs, b.bsums);
        if got.len() != want.len() || !got.iter().zip(&want).all(|(a, b)| fields(a) == fields(b)) {
            eprintln!("Q8_K activation, tier {}: differs", k.tier);
            return false;
        }
    }
    true
}

#[test]
fn q8_k_activation_quantizers_of_tiers_equal_scalar() {
    fn prop(c: Case) -> bool {
        c.x.iter().chain(&c.w).all(|x| check_q8_k(x))
    }
    qc::check_n(
        "q8_k_activation_quantizers_of_tiers_equal_scalar",
        100,
        prop as fn(Case) -> bool,
    );
}

#[test]
fn q8_k_activation_quantizer_edges() {
    let n = QK_K;
    let mut cases: Vec<Vec<f32>> = vec![
        vec![0.0; n],
        vec![-0.0; n],
        (0..n).map(|i| i as f32 - 127.5).collect(),
        (0..n).map(|i| -(i as f32) * 1e-30).collect(),
        (0..n).map(|i| (i as f32 * 0.7).sin() * 3.0e38).collect(),
        vec![f32::MIN_POSITIVE / 4.0; n],
    ];
    // +max before −max, −max before +max, and the maximum last.
    for (a, b) in [(3usize, 200usize), (200, 3), (255, 0)] {
        let mut v: Vec<f32> = (0..n).map(|i| (i as f32 * 0.1).cos()).collect();
        v[a] = 5.0;
        v[b] = -5.0;
        cases.push(v);
    }
    // Exact ties at every half: −127 first makes the multiplier 1.
    let mut v: Vec<f32> = (0..n).map(|i| (i % 41) as f32 - 20.5).collect();
    v[0] = -127.0;
    cases.push(v);
    // Non-finite values: ggml's rounding trick and the first-max rule on them.
    let mut v: Vec<f32> = (0..n).map(|i| i as f32).collect();
    v[9] = f32::NAN;
    cases.push(v.clone());
    v[17] = f32::INFINITY;
    cases.push(v.clone());
    v[3] = f32::NEG_INFINITY;
    cases.push(v);
    cases.push(vec![f32::NAN; n]);
    for x in &cases {
        assert!(check_q8_k(x), "{:?}", &x[..8]);
    }
    // Several super-blocks of different kinds in one row.
    assert!(check_q8_k(&cases.concat()));
}

/// This thread's CPU time in seconds (the machine may be shared: wall time would count the
/// time others ran).
fn thread_cpu_secs() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid, writable timespec.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime failed");
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

/// Decode throughput: `gemv` over a 2048 × 2048 matrix per type, tier and order, in GB/s of
/// weight bytes per second of this thread's CPU time (the weights random bytes with sane
/// scales), the best of several trials. Run with
/// `cargo test --release --test kernels_k gemv_throughput -- --ignored --nocapture`.
#[test]
#[ignore]
fn gemv_throughput() {
    const N: usize = 2048;
    const TRIALS: usize = 12;
    const TRIAL_SECS: f64 = 0.03;
    let mut g = Gen::from_size_and_seed(100, 7);
    let x = gen_row(&mut g, N / QK_K);
    let cases = [
        (GgmlType::Q4_0, SumOrder::BlockChain),
        (GgmlType::Q4_0, SumOrder::Lanes),
        (GgmlType::Q8_0, SumOrder::Lanes),
        (GgmlType::Q4K, SumOrder::BlockChain),
        (GgmlType::Q4K, SumOrder::Lanes),
        (GgmlType::Q6K, SumOrder::Lanes),
        (GgmlType::Q5K, SumOrder::Lanes),
        (GgmlType::Iq4Xs, SumOrder::Lanes),
        (GgmlType::Q3K, SumOrder::Lanes),
        (GgmlType::Q2K, SumOrder::BlockChain),
        (GgmlType::Q5_0, SumOrder::Lanes),
        (GgmlType::Q5_1, SumOrder::Lanes),
        (GgmlType::Iq4Nl, SumOrder::BlockChain),
        (GgmlType::Iq1S, SumOrder::Lanes),
        (GgmlType::Iq1M, SumOrder::Lanes),
    ];
    let mut all = vec![Kernels::scalar()];
    all.extend(tiers());
    for (ty, order) in cases {
        let w: Vec<u8> = (0..N)
            .flat_map(|_| {
                let row = gen_row(&mut g, N / QK_K);
                match ty {
                    GgmlType::Q4_0 | GgmlType::Q8_0 => {
                        locus::model::quantize::quantize_row(ty, &row)
                    }
                    _ => weight_row(&mut g, ty, &row, Random),
                }
            })
            .collect();
        let mut act = ActRow::new_for(ty);
        act.set(&x);
        let mut out = vec![0f32; N];
        let mut line = format!("{:>7} {:<11}", ty.name(), format!("{order:?}"));
        for k in &all {
            // The best of several short trials: the machine may be shared.
            k.gemv(ty, order, &w, &act, &mut out);
            let mut best = 0f64;
            for _ in 0..TRIALS {
                let t = thread_cpu_secs();
                let mut passes = 0;
                while thread_cpu_secs() - t < TRIAL_SECS {
                    k.gemv(ty, order, &w, &act, &mut out);
                    passes += 1;
                }
                best = best.max((w.len() * passes) as f64 / (thread_cpu_secs() - t) / 1e9);
            }
            line += &format!("  {}: {best:6.2} GB/s", k.tier);
        }
        println!("{line}");
    }
}

/// Prompt throughput: `dot_tile` of 16-row steps of a 2048 × 2048 matrix against 32 tokens
/// per type, tier and order, in billions of weight·activation products per second of this
/// thread's CPU time. Run with
/// `cargo test --release --test kernels_k tile_throughput -- --ignored --nocapture`.
#[test]
#[ignore]
fn tile_throughput() {
    const N: usize = 2048;
    const ROWS: usize = 16;
    const TOKENS: usize = 32;
    const TRIALS: usize = 5;
    const TRIAL_SECS: f64 = 0.05;
    let mut g = Gen::from_size_and_seed(100, 7);
    let cases = [
        (GgmlType::Q4_0, SumOrder::BlockChain),
        (GgmlType::Q4K, SumOrder::RepackedGemm),
        (GgmlType::Q4K, SumOrder::Batched),
        (GgmlType::Q6K, SumOrder::Batched),
        (GgmlType::Q5K, SumOrder::Batched),
        (GgmlType::Iq4Xs, SumOrder::Batched),
        (GgmlType::Q3K, SumOrder::Batched),
        (GgmlType::Q2K, SumOrder::RepackedGemm),
        (GgmlType::Q5_0, SumOrder::Lanes),
        (GgmlType::Iq4Nl, SumOrder::BlockChain),
    ];
    let xs: Vec<Vec<f32>> = (0..TOKENS).map(|_| gen_row(&mut g, N / QK_K)).collect();
    let mut all = vec![Kernels::scalar()];
    all.extend(tiers());
    for (ty, order) in cases {
        let w: Vec<Vec<u8>> = (0..N)
            .map(|_| {
                let row = gen_row(&mut g, N / QK_K);
                match ty {
                    GgmlType::Q4_0 => locus::model::quantize::quantize_row(ty, &row),
                    _ => weight_row(&mut g, ty, &row, Random),
                }
            })
            .collect();
        let acts: Vec<ActRow> = xs
            .iter()
            .map(|x| {
                let mut a = ActRow::new_for(ty);
                a.set(x);
                a
            })
            .collect();
        let mut out = vec![0f32; ROWS * TOKENS];
        let mut line = format!("{:>7} {:<13}", ty.name(), format!("{order:?}"));
        for k in &all[1..] {
            let mut best = 0f64;
            for _ in 0..TRIALS {
                let t = thread_cpu_secs();
                let mut steps = 0;
                while thread_cpu_secs() - t < TRIAL_SECS {
                    let r0 = (steps * ROWS) % N;
                    let rows: Vec<&[u8]> = w[r0..r0 + ROWS].iter().map(Vec::as_slice).collect();
                    k.dot_tile(ty, order, &rows, &acts, &mut out);
                    steps += 1;
                }
                let macs = (steps * ROWS * TOKENS * N) as f64;
                best = best.max(macs / (thread_cpu_secs() - t) / 1e9);
            }
            line += &format!("  {}: {best:6.1} G/s", k.tier);
        }
        println!("{line}");
    }
}

/// The packed layouts and the types they hold (the paired Q6_K and Q5_K ones are the AVX2
/// tier's; every tier computes every layout, through its packed kernels or by unpacking).
const PACKED_TYPES: [(GgmlType, Layout); 6] = [
    (GgmlType::Q4K, Layout::Q4Kx16),
    (GgmlType::Iq4Xs, Layout::Iq4XsX16),
    (GgmlType::Q6K, Layout::Q6Kx16),
    (GgmlType::Q5K, Layout::Q5Kx16),
    (GgmlType::Q6K, Layout::Q6KPairs),
    (GgmlType::Q5K, Layout::Q5KPairs),
];

/// Every tier's `gemv_in` over rows of `ty` packed by `pack_group` in its packed layout
/// (`groups` groups of sixteen, the case's rows repeated to fill them) against the scalar
/// single dot of the rows before packing, in every order (decode's order takes the packed
/// kernel where the tier has one; the others unpack), each activation passed through `edit`.
fn check_packed(
    (ty, layout): (GgmlType, Layout),
    c: &Case,
    groups: usize,
    edit: impl Fn(&mut ActRow),
) -> bool {
    let scalar = Kernels::scalar();
    let mut all = vec![scalar];
    all.extend(tiers());
    let mut g = Gen::from_size_and_seed(100, c.seed);
    let distinct: Vec<Vec<u8>> =
        c.w.iter()
            .map(|w| weight_row(&mut g, ty, w, c.bytes))
            .collect();
    let rows: Vec<&[u8]> = (0..groups * PACK_ROWS)
        .map(|i| distinct[i % distinct.len()].as_slice())
        .collect();
    let n = c.w[0].len() / QK_K;
    let group_bytes = PACK_ROWS * rows[0].len();
    let mut packed = vec![0u8; groups * group_bytes];
    for (gi, out) in packed.chunks_exact_mut(group_bytes).enumerate() {
        let file = rows[gi * PACK_ROWS..(gi + 1) * PACK_ROWS].concat();
        pack::pack_group(layout, &file, n, out);
    }
    let acts = activations(ty, &c.x, &edit);
    // Every run of consecutive groups (one, two, three at once: the AVX-512 kernels take two
    // together) against all the tokens at once (`dot_tile_in`: the packed kernels, or `false`
    // where the tier has none for the order).
    for order in ORDERS {
        for k in &all {
            for (g0, count) in (0..groups).flat_map(|g0| (1..=groups - g0).map(move |c| (g0, c))) {
                let g = &packed[g0 * group_bytes..(g0 + count) * group_bytes];
                let rows_out = count * PACK_ROWS;
                let mut out = vec![f32::NAN; rows_out * acts.len()];
                if !k.dot_tile_in(layout, ty, order, g, &acts, &mut out) {
                    continue;
                }
                for (t, a) in acts.iter().enumerate() {
                    for r in 0..rows_out {
                        let row = rows[g0 * PACK_ROWS + r];
                        let want = scalar.dot_ordered(ty, order, row, a);
                        let got = out[t * rows_out + r];
                        if !same(got, want) {
                            eprintln!(
                                "{} {order:?} tier {} {} tile of {count} groups from {g0} and \
                                 {} tokens, row {r} token {t}: {got:e} != scalar {want:e}",
                                ty.name(),
                                k.tier,
                                layout.name(),
                                acts.len()
                            );
                            return false;
                        }
                    }
                }
            }
        }
    }
    for a in &acts {
        let a = a.clone();
        for order in ORDERS {
            for k in &all {
                let mut out = vec![f32::NAN; rows.len()];
                k.gemv_in(layout, ty, order, &packed, &a, &mut out);
                for (r, (&got, row)) in out.iter().zip(&rows).enumerate() {
                    let want = scalar.dot_ordered(ty, order, row, &a);
                    if !same(got, want) {
                        eprintln!(
                            "{} {order:?} tier {} {} gemv, row {r}: {got:e} != scalar {want:e}",
                            ty.name(),
                            k.tier,
                            layout.name()
                        );
                        return false;
                    }
                }
            }
        }
    }
    true
}

/// Packed copies (Q4_K, IQ4_XS, Q6_K, Q5_K: [`PACKED_TYPES`]) give the file layout's bits on
/// every tier, for quantized and random weights, one and three groups.
#[test]
fn packed_copies_equal_the_scalar_oracles() {
    fn prop(c: Case, three: bool) -> bool {
        PACKED_TYPES
            .iter()
            .all(|&p| check_packed(p, &c, if three { 3 } else { 1 }, |_| {}))
    }
    qc::check_n(
        "packed_copies_equal_the_scalar_oracles",
        60,
        prop as fn(Case, bool) -> bool,
    );
}

/// Packed groups against prompt-sized batches (more tokens than one pass of the packed tile
/// kernel, and a tail), every order, on every tier.
#[test]
fn packed_tiles_of_many_tokens_equal_the_scalar_oracles() {
    let mut g = qc::gen("packed_tiles_of_many_tokens", 100);
    for (n_tokens, bytes) in [(9, Quantized), (20, Random), (32, Quantized)] {
        let sb = 1 + usize::arbitrary(&mut g) % 4;
        let c = Case {
            w: (0..7).map(|_| gen_row(&mut g, sb)).collect(),
            x: (0..n_tokens).map(|_| gen_row(&mut g, sb)).collect(),
            bytes,
            seed: u64::arbitrary(&mut g),
        };
        for &(ty, layout) in &PACKED_TYPES {
            assert!(
                check_packed((ty, layout), &c, 2, |_| {}),
                "{}: {n_tokens} tokens, weights {bytes:?}",
                layout.name()
            );
        }
    }
}

/// [`packed_copies_equal_the_scalar_oracles`] with activations at the edges: every quant −128
/// or +127 (the largest products the kernels' integers meet; −128 is where ggml's sign trick
/// wraps), block sums kept consistent.
#[test]
fn packed_copies_at_activation_extremes_equal_the_scalar_oracles() {
    fn extreme(v: i8) -> impl Fn(&mut ActRow) {
        move |a: &mut ActRow| {
            if let ActRow::Q8K(r) = a {
                for b in r.iter_mut() {
                    b.qs.iter_mut().for_each(|q| *q = v);
                    b.bsums.iter_mut().for_each(|s| *s = 16 * i16::from(v));
                }
            }
        }
    }
    let mut g = qc::gen("packed_copies_at_activation_extremes", 100);
    for bytes in [Quantized, Random, Fill(0xff), Fill(0)] {
        let sb = 1 + usize::arbitrary(&mut g) % MAX_SUPER_BLOCKS;
        let c = Case {
            w: (0..5).map(|_| gen_row(&mut g, sb)).collect(),
            x: vec![gen_row(&mut g, sb)],
            bytes,
            seed: u64::arbitrary(&mut g),
        };
        for v in [i8::MIN, i8::MAX] {
            for &(ty, layout) in &PACKED_TYPES {
                assert!(
                    check_packed((ty, layout), &c, 2, extreme(v)),
                    "{}: activations all {v}, weights {bytes:?}",
                    layout.name()
                );
            }
        }
    }
}

/// The SIMD tiers ask placement for packed Q4_K copies where llama.cpp repacks (the repacked
/// gemv's order) and for the file's rows where it does not, and for packed IQ4_XS, Q6_K and
/// Q5_K in `vec_dot`'s order (their decode order) and the file's rows in the tiled matmul's
/// (Q6_K and Q5_K paired on AVX2, whose kernels read them so); the scalar tier never packs them.
#[test]
fn the_simd_tiers_pack_the_k_quants_and_iq4_xs_in_their_decode_orders() {
    let scalar = Kernels::scalar();
    for (ty, _) in PACKED_TYPES {
        for order in ORDERS {
            assert_eq!(scalar.preferred_layout(ty, order), Layout::Rows);
        }
    }
    for k in tiers() {
        let q4k = GgmlType::Q4K;
        assert_eq!(
            k.preferred_layout(q4k, SumOrder::BlockChain),
            Layout::Q4Kx16,
            "{}",
            k.tier
        );
        assert_eq!(
            k.preferred_layout(q4k, SumOrder::Lanes),
            Layout::Rows,
            "{}",
            k.tier
        );
        let (q6_k, q5_k) = match k.tier {
            Tier::Avx2 => (Layout::Q6KPairs, Layout::Q5KPairs),
            _ => (Layout::Q6Kx16, Layout::Q5Kx16),
        };
        let lanes = [
            (GgmlType::Iq4Xs, Layout::Iq4XsX16),
            (GgmlType::Q6K, q6_k),
            (GgmlType::Q5K, q5_k),
        ];
        for (ty, layout) in lanes {
            assert_eq!(
                k.preferred_layout(ty, SumOrder::Lanes),
                layout,
                "{}",
                k.tier
            );
            assert_eq!(
                k.preferred_layout(ty, SumOrder::Batched),
                Layout::Rows,
                "{}",
                k.tier
            );
        }
    }
}

/// IQ4_NL copies are packed in Q4_0's group layout where llama.cpp repacks them (block-chain
/// order) and the tier has the packed kernels (AVX-512 only); never otherwise.
#[test]
fn iq4_nl_is_packed_in_the_block_chain_order_on_avx512_only() {
    let nl = GgmlType::Iq4Nl;
    let mut all = vec![Kernels::scalar()];
    all.extend(tiers());
    for k in all {
        for order in ORDERS {
            let want = match (k.tier, order) {
                (Tier::Avx512, SumOrder::BlockChain | SumOrder::RepackedGemm) => Layout::Iq4NlX16,
                _ => Layout::Rows,
            };
            assert_eq!(k.preferred_layout(nl, order), want, "{} {order:?}", k.tier);
        }
    }
}

/// Prompt throughput of the IQ types' tiles as a forward step calls them: a 2048 × 2048 matrix
/// against 64 tokens, 16 and 32 rows a call (one panel group, or two at once), in billions of
/// weight·activation products per second of this thread's CPU time, the best of several
/// trials. Run with
/// `cargo test --release --test kernels_k iq_tile_throughput -- --ignored --nocapture`.
#[test]
#[ignore]
fn iq_tile_throughput() {
    const N: usize = 2048;
    const TOKENS: usize = 64;
    const TRIALS: usize = 7;
    const TRIAL_SECS: f64 = 0.05;
    let mut g = Gen::from_size_and_seed(100, 7);
    let types = [
        GgmlType::Iq2Xxs,
        GgmlType::Iq2Xs,
        GgmlType::Iq2S,
        GgmlType::Iq3Xxs,
        GgmlType::Iq3S,
        GgmlType::Iq1S,
        GgmlType::Iq1M,
    ];
    let xs: Vec<Vec<f32>> = (0..TOKENS).map(|_| gen_row(&mut g, N / QK_K)).collect();
    let k = tiers().pop().expect("a SIMD tier");
    for ty in types {
        let w: Vec<Vec<u8>> = (0..N)
            .map(|_| {
                let row = gen_row(&mut g, N / QK_K);
                weight_row(&mut g, ty, &row, Random)
            })
            .collect();
        let acts: Vec<ActRow> = xs
            .iter()
            .map(|x| {
                let mut a = ActRow::new_for(ty);
                a.set(x);
                a
            })
            .collect();
        let mut line = format!("{:>7} {}", ty.name(), k.tier);
        for rows_per_call in [16, 32] {
            let mut out = vec![0f32; rows_per_call * TOKENS];
            let mut best = 0f64;
            for _ in 0..TRIALS {
                let t = thread_cpu_secs();
                let mut calls = 0;
                while thread_cpu_secs() - t < TRIAL_SECS {
                    let r0 = (calls * rows_per_call) % N;
                    let rows: Vec<&[u8]> = w[r0..r0 + rows_per_call]
                        .iter()
                        .map(Vec::as_slice)
                        .collect();
                    k.dot_tile(ty, SumOrder::Batched, &rows, &acts, &mut out);
                    calls += 1;
                }
                let macs = (calls * rows_per_call * TOKENS * N) as f64;
                best = best.max(macs / (thread_cpu_secs() - t) / 1e9);
            }
            line += &format!("  {rows_per_call} rows: {best:6.1} G/s");
        }
        println!("{line}");
    }
}
