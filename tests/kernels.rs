//! Every kernel tier against the scalar oracle (bit-exact, since tiers share the operation
//! order), and the oracle against an f64 reference on dequantized values (within a tolerance
//! scaled by Σ|x·y|). A tier this CPU lacks is skipped with a printed reason. Tiled kernels
//! ([`Kernels::dot_tile`]) and the matrix-vector runs ([`Kernels::gemv`]) of every tier, the
//! scalar one included, are held to the scalar single dot of each of their outputs, for whole
//! tiles and for every edge tile; so are the paths over packed Q4_0 groups
//! ([`Layout::Q4_0x16`]), against the scalar dot of the rows before packing.

mod common;
#[path = "common/qc.rs"]
mod qc;

use locus::kernels::blocks::{self, block_bytes, BlockQ4_0, BlockQ4_1, BlockQ8_0};
use locus::kernels::half::{f16_to_f32, f32_to_f16};
use locus::kernels::{
    dequantize_row, pack, ActRow, GgmlType, Kernels, Layout, SumOrder, Tier, PACK_ROWS, PANEL_ROWS,
    PANEL_TOKENS, TILE_ROWS,
};
use quickcheck::{Arbitrary, Gen};

const TIERS: [Tier; 2] = [Tier::Avx2, Tier::Avx512];

/// A weight row and an activation row of the same length (a multiple of 32), with edge cases
/// mixed in: zero blocks, huge values, all-negative blocks.
#[derive(Clone, Debug)]
struct Rows {
    w: Vec<f32>,
    x: Vec<f32>,
}

/// A row of `blocks` blocks of 32 values, each block of one random kind (edge cases included).
fn gen_row(g: &mut Gen, blocks: usize) -> Vec<f32> {
    let mut v = Vec::with_capacity(blocks * 32);
    for _ in 0..blocks {
        let kind = u8::arbitrary(g) % 6;
        for _ in 0..32 {
            let r = (i32::arbitrary(g) % 10_000) as f32 / 1000.0;
            v.push(match kind {
                0 => 0.0,             // scale 0
                1 => r * 6000.0,      // near the largest f16 scales
                2 => -r.abs() - 0.01, // all negative
                3 => r * 1e-3,        // tiny
                _ => r,
            });
        }
    }
    v
}

impl Arbitrary for Rows {
    fn arbitrary(g: &mut Gen) -> Rows {
        let blocks = 1 + usize::arbitrary(g) % 24;
        Rows {
            w: gen_row(g, blocks),
            x: gen_row(g, blocks),
        }
    }
}

/// Weight rows and activation rows of one length for a tile: up to two whole tiles and an edge
/// each way, so whole tiles, edge tiles and several tiles per call all occur.
#[derive(Clone, Debug)]
struct TileRows {
    w: Vec<Vec<f32>>,
    x: Vec<Vec<f32>>,
}

impl Arbitrary for TileRows {
    fn arbitrary(g: &mut Gen) -> TileRows {
        let blocks = 1 + usize::arbitrary(g) % 12;
        // Half the cases have exactly the rows a panel kernel takes.
        let n_rows = match usize::arbitrary(g) % 4 {
            0 => TILE_ROWS,
            1 => PANEL_ROWS,
            _ => 1 + usize::arbitrary(g) % (2 * PANEL_ROWS + 1),
        };
        let n_tokens = 1 + usize::arbitrary(g) % (2 * PANEL_TOKENS + 2);
        TileRows {
            w: (0..n_rows).map(|_| gen_row(g, blocks)).collect(),
            x: (0..n_tokens).map(|_| gen_row(g, blocks)).collect(),
        }
    }
}

fn weight_bytes(ty: GgmlType, w: &[f32]) -> Vec<u8> {
    locus::model::quantize::quantize_row(ty, w)
}

fn tiers() -> Vec<Kernels> {
    let mut v = Vec::new();
    for t in TIERS {
        match Kernels::for_tier(t) {
            Ok(k) => v.push(k),
            Err(e) => {
                // Once per test binary: `tiers()` runs for every quickcheck case.
                static ONCE: std::sync::Once = std::sync::Once::new();
                ONCE.call_once(|| common::skip::tier_unavailable(t, &e));
            }
        }
    }
    v
}

fn check_all_types(r: &Rows) -> bool {
    let scalar = Kernels::scalar();
    let tiers = tiers();
    for ty in [
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q8_0,
        GgmlType::F32,
        GgmlType::F16,
        GgmlType::Bf16,
    ] {
        let wb = weight_bytes(ty, &r.w);
        let mut act = ActRow::new_for(ty);
        act.set(&r.x);
        let want = scalar.dot(ty, &wb, &act);
        for k in &tiers {
            for order in [SumOrder::Lanes, SumOrder::BlockChain] {
                let (got, want) = (
                    k.dot_ordered(ty, order, &wb, &act),
                    scalar.dot_ordered(ty, order, &wb, &act),
                );
                if got.to_bits() != want.to_bits() && !(got.is_nan() && want.is_nan()) {
                    eprintln!(
                        "{} {order:?} tier {}: {got} != scalar {want}",
                        ty.name(),
                        k.tier
                    );
                    return false;
                }
            }
        }
        // The oracle against f64 arithmetic on the values the kernel actually multiplies. (An
        // f16 overflow of Q8_1's s = d·Σq yields inf in ggml too; only tier equality applies.)
        if !want.is_finite() {
            continue;
        }
        let mut wd = vec![0f32; r.w.len()];
        dequantize_row(ty, &wb, &mut wd);
        let xd = dequantized_act(&act);
        let exact: f64 = wd.iter().zip(&xd).map(|(a, b)| *a as f64 * *b as f64).sum();
        let mag: f64 = wd
            .iter()
            .zip(&xd)
            .map(|(a, b)| (*a as f64 * *b as f64).abs())
            .sum();
        // Q4_1's m·s term uses s rounded to f16 (as ggml does): allow for it.
        let slack = if ty == GgmlType::Q4_1 { 2e-3 } else { 1e-5 };
        if ((want as f64) - exact).abs() > slack * mag + 1e-6 {
            eprintln!(
                "{}: oracle {want} vs f64 {exact} (Σ|xy| = {mag})",
                ty.name()
            );
            return false;
        }
    }
    true
}

const TILE_TYPES: [GgmlType; 6] = [
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q8_0,
    GgmlType::F32,
    GgmlType::F16,
    GgmlType::Bf16,
];

/// Every tier's `dot_tile` (the scalar tier's too) over the first `n_rows` × `n_tokens` of
/// `r`, and its `gemv` over the rows with the first token, element by element against the
/// scalar single dot, bit for bit, in both orders.
fn check_tile(r: &TileRows, n_rows: usize, n_tokens: usize) -> bool {
    let scalar = Kernels::scalar();
    let mut all = vec![scalar];
    all.extend(tiers());
    for ty in TILE_TYPES {
        let weights: Vec<Vec<u8>> = r.w[..n_rows].iter().map(|w| weight_bytes(ty, w)).collect();
        let rows: Vec<&[u8]> = weights.iter().map(Vec::as_slice).collect();
        let acts: Vec<ActRow> = r.x[..n_tokens]
            .iter()
            .map(|x| {
                let mut a = ActRow::new_for(ty);
                a.set(x);
                a
            })
            .collect();
        for order in [SumOrder::Lanes, SumOrder::BlockChain] {
            for k in &all {
                // Decode's matrix-vector path over the rows laid back to back, first token.
                let mut one = vec![f32::NAN; n_rows];
                k.gemv(ty, order, &weights.concat(), &acts[0], &mut one);
                for (i, (got, row)) in one.iter().zip(&rows).enumerate() {
                    let want = scalar.dot_ordered(ty, order, row, &acts[0]);
                    if got.to_bits() != want.to_bits() && !(got.is_nan() && want.is_nan()) {
                        eprintln!(
                            "{} {order:?} tier {} gemv of {n_rows} rows, row {i}: {got} != \
                             scalar {want}",
                            ty.name(),
                            k.tier
                        );
                        return false;
                    }
                }
                let mut out = vec![f32::NAN; n_rows * n_tokens];
                k.dot_tile(ty, order, &rows, &acts, &mut out);
                for (t, a) in acts.iter().enumerate() {
                    for (i, row) in rows.iter().enumerate() {
                        let want = scalar.dot_ordered(ty, order, row, a);
                        let got = out[t * n_rows + i];
                        if got.to_bits() != want.to_bits() && !(got.is_nan() && want.is_nan()) {
                            eprintln!(
                                "{} {order:?} tier {} tile {n_rows}x{n_tokens}, row {i} token \
                                 {t}: {got} != scalar {want}",
                                ty.name(),
                                k.tier
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

/// Every tier's packed paths (`gemv_in` over [`Layout::Q4_0x16`] groups, `dot_tile_packed`)
/// on `groups` groups of Q4_0 rows packed by `pack_q4_0x16` (the rows of `r` repeated to fill
/// them) against `n_tokens` activations (likewise), element by element against the scalar
/// block-chain dot of the file's rows, bit for bit.
fn check_packed(r: &TileRows, groups: usize, n_tokens: usize) -> bool {
    let (ty, order) = (GgmlType::Q4_0, SumOrder::BlockChain);
    let scalar = Kernels::scalar();
    let mut all = vec![scalar];
    all.extend(tiers());
    let n = r.w[0].len() / 32;
    let rows: Vec<Vec<u8>> = (0..groups * PACK_ROWS)
        .map(|i| weight_bytes(ty, &r.w[i % r.w.len()]))
        .collect();
    let group_bytes = PACK_ROWS * rows[0].len();
    let mut packed = vec![0u8; groups * group_bytes];
    for (g, out) in packed.chunks_exact_mut(group_bytes).enumerate() {
        pack::pack_q4_0x16(&rows[g * PACK_ROWS..(g + 1) * PACK_ROWS].concat(), n, out);
    }
    let acts: Vec<ActRow> = (0..n_tokens)
        .map(|t| {
            let mut a = ActRow::new_for(ty);
            a.set(&r.x[t % r.x.len()]);
            a
        })
        .collect();
    let same =
        |got: f32, want: f32| got.to_bits() == want.to_bits() || got.is_nan() && want.is_nan();
    for k in &all {
        let mut one = vec![f32::NAN; rows.len()];
        k.gemv_in(Layout::Q4_0x16, ty, order, &packed, &acts[0], &mut one);
        for (i, (got, row)) in one.iter().zip(&rows).enumerate() {
            let want = scalar.dot_ordered(ty, order, row, &acts[0]);
            if !same(*got, want) {
                eprintln!(
                    "tier {} packed gemv, row {i}: {got} != scalar {want}",
                    k.tier
                );
                return false;
            }
        }
        for (g, group) in packed.chunks_exact(group_bytes).enumerate() {
            let mut out = vec![f32::NAN; PACK_ROWS * n_tokens];
            k.dot_tile_packed(group, &acts, &mut out);
            for (t, a) in acts.iter().enumerate() {
                for r in 0..PACK_ROWS {
                    let want = scalar.dot_ordered(ty, order, &rows[g * PACK_ROWS + r], a);
                    let got = out[t * PACK_ROWS + r];
                    if !same(got, want) {
                        eprintln!(
                            "tier {} packed tile of {n_tokens} tokens, group {g} row {r} token \
                             {t}: {got} != scalar {want}",
                            k.tier
                        );
                        return false;
                    }
                }
            }
        }
    }
    true
}

fn dequantized_act(a: &ActRow) -> Vec<f32> {
    match a {
        ActRow::F32(v) => v.clone(),
        ActRow::Q8_0(b) => {
            let mut o = vec![0f32; b.blocks.len() * 32];
            blocks::dequantize_q8_0(&b.blocks, &mut o);
            o
        }
        ActRow::Q8_1(b) => b
            .iter()
            .flat_map(|blk| {
                let d = f16_to_f32(u16::from_le_bytes(blk.d));
                blk.qs.iter().map(move |&q| q as f32 * d)
            })
            .collect(),
        ActRow::Q8K(b) => b
            .iter()
            .flat_map(|blk| blk.qs.iter().map(move |&q| q as f32 * blk.d))
            .collect(),
    }
}

#[test]
fn tiers_equal_scalar_oracle() {
    fn prop(r: Rows) -> bool {
        check_all_types(&r)
    }
    qc::check("tiers_equal_scalar_oracle", prop as fn(Rows) -> bool);
}

#[test]
fn tiles_equal_scalar_single_dots() {
    fn prop(r: TileRows) -> bool {
        check_tile(&r, r.w.len(), r.x.len())
    }
    qc::check(
        "tiles_equal_scalar_single_dots",
        prop as fn(TileRows) -> bool,
    );
}

#[test]
fn packed_groups_equal_scalar_single_dots() {
    fn prop(r: TileRows) -> bool {
        check_packed(&r, 2, r.x.len())
    }
    qc::check(
        "packed_groups_equal_scalar_single_dots",
        prop as fn(TileRows) -> bool,
    );
}

#[test]
fn activation_quantizers_of_tiers_equal_scalar() {
    fn prop(r: Rows) -> bool {
        check_quantize_act(&r.x)
    }
    qc::check(
        "activation_quantizers_of_tiers_equal_scalar",
        prop as fn(Rows) -> bool,
    );
}

/// Every tier's activation quantizers against the scalar ones (`ActRow::set`), byte for byte.
fn check_quantize_act(x: &[f32]) -> bool {
    for ty in [GgmlType::Q4_0, GgmlType::Q4_1] {
        let mut want = ActRow::new_for(ty);
        want.set(x);
        for k in tiers() {
            let mut got = ActRow::new_for(ty);
            k.quantize_act(&mut got, x);
            let same = match (&got, &want) {
                (ActRow::Q8_0(g), ActRow::Q8_0(w)) => {
                    block_bytes(&g.blocks) == block_bytes(&w.blocks)
                        && g.sums == w.sums
                        && g.scales
                            .iter()
                            .map(|v| v.to_bits())
                            .eq(w.scales.iter().map(|v| v.to_bits()))
                }
                (ActRow::Q8_1(g), ActRow::Q8_1(w)) => block_bytes(g) == block_bytes(w),
                _ => false,
            };
            if !same {
                eprintln!(
                    "{} activation, tier {}: {got:?} != {want:?}",
                    ty.name(),
                    k.tier
                );
                return false;
            }
        }
    }
    true
}

#[test]
fn tile_edges_equal_scalar_single_dots() {
    let mut g = qc::gen("tile_edges_equal_scalar_single_dots", 100);
    let blocks = 5;
    // Every tile edge (1..=rows × 1..=tokens, one past a panel's tokens), with an all-zero, a
    // huge and an all-negative row.
    let n_x = PANEL_TOKENS + 1;
    let mut r = TileRows {
        w: (0..PANEL_ROWS).map(|_| gen_row(&mut g, blocks)).collect(),
        x: (0..n_x).map(|_| gen_row(&mut g, blocks)).collect(),
    };
    r.w[0] = vec![0.0; blocks * 32];
    r.x[0] = (0..blocks * 32)
        .map(|i| (i as f32 * 0.37).sin() * 60000.0)
        .collect();
    r.x[n_x - 1] = (0..blocks * 32).map(|i| -1.0 - i as f32).collect();
    r.w[PANEL_ROWS - 1] = (0..blocks * 32).map(|i| -1.0 - i as f32).collect();
    for n_rows in 1..=PANEL_ROWS {
        for n_tokens in 1..=n_x {
            assert!(check_tile(&r, n_rows, n_tokens), "tile {n_rows}x{n_tokens}");
        }
    } // Packed groups: one and two panels of tokens, and the single tokens around them.
    for n_tokens in [
        1,
        PANEL_TOKENS - 1,
        PANEL_TOKENS,
        PANEL_TOKENS + 1,
        2 * PANEL_TOKENS + 3,
    ] {
        assert!(
            check_packed(&r, 2, n_tokens),
            "packed tile of {n_tokens} tokens"
        );
    }
}

#[test]
fn activation_quantizer_edges() {
    // Ties at .5 (both parities), zero blocks, a lone value, f16 extremes for d and s.
    let ties: Vec<f32> = (0..32).map(|i| i as f32 - 15.5).collect();
    let mut lone = vec![0f32; 32];
    lone[7] = -3.0;
    let big: Vec<f32> = (0..32).map(|i| 60000.0 - i as f32).collect();
    let tiny: Vec<f32> = (0..32).map(|i| (i as f32 - 16.0) * 1e-7).collect();
    for x in [ties, vec![0.0; 32], lone, big, tiny] {
        assert!(check_quantize_act(&x), "{x:?}");
    }
}

#[test]
fn seed_table_edges() {
    let one = |f: f32| Rows {
        w: vec![f; 32],
        x: (0..32).map(|i| i as f32 - 16.0).collect(),
    };
    for r in [one(0.0), one(65504.0), one(-3.0), one(1e-8)] {
        assert!(check_all_types(&r));
    }
    // Odd block counts and the largest finite f16 scale.
    let r = Rows {
        w: (0..96).map(|i| (i as f32 * 0.37).sin() * 60000.0).collect(),
        x: (0..96).map(|i| (i as f32).cos()).collect(),
    };
    assert!(check_all_types(&r));
}

#[test]
fn activation_quantizers_round_half_to_even_like_ggml() {
    // amax = 127 so the multiplier is exactly 1: 0.5 → 0, 1.5 → 2, 2.5 → 2, -0.5 → -0.
    let mut x = vec![0f32; 32];
    x[0] = 127.0;
    x[1] = 0.5;
    x[2] = 1.5;
    x[3] = 2.5;
    x[4] = -2.5;
    let mut b = vec![BlockQ8_0::default(); 1];
    blocks::quantize_act_q8_0(&x, &mut b);
    assert_eq!(&b[0].qs[..5], &[127, 0, 2, 2, -2]);
    assert_eq!(
        f16_to_f32(u16::from_le_bytes(b[0].d)),
        f16_to_f32(f32_to_f16(1.0))
    );
}

#[test]
fn reference_quantizers_match_ggml_rules() {
    // Q4_0: d = max/-8 where max is the signed value of largest magnitude.
    let mut x: Vec<f32> = (0..32).map(|i| i as f32 * 0.25).collect();
    x[5] = -8.0;
    let mut b = vec![BlockQ4_0::default(); 1];
    blocks::quantize_q4_0_ref(&x, &mut b);
    assert_eq!(f16_to_f32(u16::from_le_bytes(b[0].d)), 1.0);
    let mut back = vec![0f32; 32];
    blocks::dequantize_q4_0(&b, &mut back);
    assert_eq!(back[5], -8.0);
    assert_eq!(back[4], 1.0); // 4 × 0.25 = 1.0 exactly
                              // Q4_1 keeps min exactly (as f16) and spans the range with 15 steps.
    let x: Vec<f32> = (0..32).map(|i| 2.0 + i as f32 * 0.5).collect();
    let mut b = vec![BlockQ4_1::default(); 1];
    blocks::quantize_q4_1_ref(&x, &mut b);
    blocks::dequantize_q4_1(&b, &mut back);
    assert_eq!(back[0], 2.0);
    assert!((back[31] - 17.5).abs() < 0.6);
    // Q8_0 reference rounds half away from zero (roundf), unlike the activation path.
    let mut x = vec![0f32; 32];
    x[0] = 127.0;
    x[1] = 2.5;
    let mut b = vec![BlockQ8_0::default(); 1];
    blocks::quantize_q8_0_ref(&x, &mut b);
    assert_eq!(b[0].qs[1], 3);
    assert_eq!(block_bytes(&b).len(), 34);
}

#[test]
fn forced_tier_env_is_honoured_or_refused() {
    assert_eq!(Kernels::for_tier(Tier::Scalar).unwrap().tier, Tier::Scalar);
    assert!(Tier::parse("avx9").is_none());
    match Kernels::for_tier(Tier::Avx512) {
        Ok(k) => assert_eq!(k.tier, Tier::Avx512),
        Err(e) => common::skip::tier_unavailable(Tier::Avx512, &e),
    }
}

/// Whether two outputs hold the same f32 bits, element for element.
fn same_bits(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(p, q)| p.to_bits() == q.to_bits())
}

/// Softmax and SwiGLU (ggml's vectorised exp) give the same bits in every tier.
#[test]
fn softmax_and_swiglu_tiers_equal_scalar() {
    let scalar = Kernels::scalar();
    for n in [1usize, 15, 16, 17, 64, 257, 1536] {
        // Ordinary values, with every few an extreme one (exponentials that overflow, that
        // underflow to subnormals and to zero, and ±0).
        let extremes = [-200.0, 150.0, -95.0, 89.0, -103.5, 0.0, -0.0, 88.7];
        let x: Vec<f32> = (0..n)
            .map(|i| match i % 7 {
                3 => extremes[(i / 7) % extremes.len()],
                _ => ((i * 7919) % 1013) as f32 * 0.031 - 15.0,
            })
            .collect();
        let up: Vec<f32> = (0..n)
            .map(|i| ((i * 104729) % 997) as f32 * 0.01 - 5.0)
            .collect();
        for k in tiers() {
            let (mut a, mut b) = (x.clone(), x.clone());
            scalar.softmax(&mut a, 0.125);
            k.softmax(&mut b, 0.125);
            assert!(same_bits(&a, &b), "softmax n={n} tier {}", k.tier);
            let (mut a, mut b) = (x.clone(), x.clone());
            scalar.swiglu(&mut a, &up);
            k.swiglu(&mut b, &up);
            assert!(same_bits(&a, &b), "swiglu n={n} tier {}", k.tier);
        }
    }
}

/// The strided many-row attention dot of every tier (on rows widened by the tier) equals the
/// scalar single f16 dot of each row, bit for bit, for row counts around its four-row step and
/// lengths around its 16-lane step.
#[test]
fn attention_row_dots_equal_scalar_single_dots() {
    let scalar = Kernels::scalar();
    let mut all = vec![scalar];
    all.extend(tiers());
    let every: Vec<u16> = (0..=u16::MAX).collect();
    for k in &all {
        let mut wide = vec![0f32; every.len()];
        k.widen_f16(&every, &mut wide);
        let differ = wide
            .iter()
            .zip(&every)
            .filter(|(w, h)| w.to_bits() != f16_to_f32(**h).to_bits())
            .count();
        assert_eq!(
            differ, 0,
            "tier {} widens {differ} f16 values differently",
            k.tier
        );
    }
    for (len, rows) in [(64usize, 9usize), (17, 4), (16, 3), (5, 1), (130, 7)] {
        let stride = len + 3;
        let x: Vec<u16> = (0..rows * stride)
            .map(|i| f32_to_f16(((i * 7919) % 1013) as f32 * 0.013 - 6.5))
            .collect();
        let y: Vec<f32> = (0..len)
            .map(|i| ((i * 104729) % 997) as f32 * 0.002 - 1.0)
            .collect();
        for k in &all {
            let mut wide = vec![f32::NAN; x.len()];
            k.widen_f16(&x, &mut wide);
            assert!(
                wide.iter()
                    .zip(&x)
                    .all(|(w, h)| w.to_bits() == f16_to_f32(*h).to_bits()),
                "tier {} widens f16 differently",
                k.tier
            );
            let mut out = vec![f32::NAN; rows];
            k.att_dot_batch_rows(&wide, stride, &y, &mut out);
            for (r, got) in out.iter().enumerate() {
                let want = scalar.att_dot_batch(&x[r * stride..r * stride + len], &y);
                assert_eq!(
                    got.to_bits(),
                    want.to_bits(),
                    "tier {} len {len} row {r} of {rows}: {got} != {want}",
                    k.tier
                );
            }
        }
    }
}

/// The single-token attention dot (ggml's `vec_dot_f16` with the row padded to `n_pad`) of
/// every tier equals the scalar model bit for bit: lengths around its 16- and 64-element steps,
/// padded lengths past the row (zeros that add nothing) and short of it (a tail in f64).
#[test]
fn attention_decode_dots_equal_scalar() {
    let scalar = Kernels::scalar();
    for len in [
        1usize, 5, 15, 16, 17, 33, 63, 64, 65, 127, 130, 200, 256, 300,
    ] {
        let x: Vec<u16> = (0..len)
            .map(|i| f32_to_f16(((i * 7919) % 1013) as f32 * 0.013 - 6.5))
            .collect();
        let y: Vec<f32> = (0..len)
            .map(|i| ((i * 104729) % 997) as f32 * 0.002 - 1.0)
            .collect();
        for n_pad in [len, len.div_ceil(64) * 64, 64, 256, len / 2] {
            let want = scalar.att_dot_decode(&x, &y, n_pad);
            for k in tiers() {
                let got = k.att_dot_decode(&x, &y, n_pad);
                assert_eq!(
                    got.to_bits(),
                    want.to_bits(),
                    "tier {} len {len} n_pad {n_pad}: {got} != {want}",
                    k.tier
                );
            }
        }
    }
}

/// RoPE of every tier equals the scalar model bit for bit, for full and partial rotation.
#[test]
fn rope_tiers_equal_scalar() {
    let scalar = Kernels::scalar();
    for (head_dim, pairs, heads) in [(64usize, 32usize, 4usize), (64, 16, 3), (128, 64, 2)] {
        let cache: Vec<(f32, f32)> = (0..pairs)
            .map(|i| {
                let t = 37.0 * 10000f32.powf(-2.0 * i as f32 / (2 * pairs) as f32);
                (t.cos(), t.sin())
            })
            .collect();
        let x: Vec<f32> = (0..head_dim * heads)
            .map(|i| ((i * 7919) % 1013) as f32 * 0.037 - 18.0)
            .collect();
        let mut want = x.clone();
        scalar.rope(&cache, &mut want, head_dim);
        assert_ne!(want, x, "the rotation changed something");
        for k in tiers() {
            let mut got = x.clone();
            k.rope(&cache, &mut got, head_dim);
            assert!(
                same_bits(&got, &want),
                "rope head_dim {head_dim} pairs {pairs}: tier {} differs",
                k.tier
            );
        }
    }
}

/// The many-row single-token attention dot (K rows of a head, or V rows of its channels)
/// equals the scalar single dot of each row bit for bit in every tier: row counts around its
/// sixteen-row reduction, lengths around its steps, pads past and short of the row.
#[test]
fn attention_decode_row_dots_equal_scalar_single_dots() {
    let scalar = Kernels::scalar();
    let mut all = vec![scalar];
    all.extend(tiers());
    for (len, rows) in [
        (64usize, 16usize),
        (64, 33),
        (1, 5),
        (17, 15),
        (130, 17),
        (250, 64),
    ] {
        let stride = len + 5;
        let x: Vec<u16> = (0..rows * stride)
            .map(|i| f32_to_f16(((i * 7919) % 1013) as f32 * 0.013 - 6.5))
            .collect();
        let y: Vec<f32> = (0..len)
            .map(|i| ((i * 104729) % 997) as f32 * 0.002 - 1.0)
            .collect();
        for n_pad in [len, len.div_ceil(64) * 64, 256, len / 2] {
            for k in &all {
                let mut out = vec![f32::NAN; rows];
                k.att_dot_decode_rows(&x, stride, &y, n_pad, &mut out);
                for (r, got) in out.iter().enumerate() {
                    let want = scalar.att_dot_decode(&x[r * stride..r * stride + len], &y, n_pad);
                    assert_eq!(
                        got.to_bits(),
                        want.to_bits(),
                        "tier {} len {len} n_pad {n_pad} row {r} of {rows}: {got} != {want}",
                        k.tier
                    );
                }
            }
        }
    }
}

/// The q8_0 KV cache's weighted row sum (`out += p × row`) gives the scalar oracle's bits in
/// every tier, and equals dequantizing the row and adding `p × value` one element at a time.
#[test]
fn kv_add_q8_0_tiers_equal_scalar() {
    fn prop(r: Rows, p: i16) -> bool {
        let row = weight_bytes(GgmlType::Q8_0, &r.w);
        let p = f32::from(p) / 4096.0;
        let scalar = Kernels::scalar();
        let mut want = r.x.clone();
        scalar.kv_add_q8_0(&row, p, &mut want);
        let mut deq = vec![0f32; r.w.len()];
        dequantize_row(GgmlType::Q8_0, &row, &mut deq);
        let by_hand: Vec<f32> = r.x.iter().zip(&deq).map(|(o, v)| o + p * v).collect();
        if !same_bits(&want, &by_hand) {
            eprintln!("scalar kv_add_q8_0 differs from dequantize-then-add");
            return false;
        }
        tiers().iter().all(|k| {
            let mut got = r.x.clone();
            k.kv_add_q8_0(&row, p, &mut got);
            let same = same_bits(&got, &want);
            if !same {
                eprintln!("tier {}: {got:?} != {want:?}", k.tier);
            }
            same
        })
    }
    qc::check(
        "kv_add_q8_0_tiers_equal_scalar",
        prop as fn(Rows, i16) -> bool,
    );
}
