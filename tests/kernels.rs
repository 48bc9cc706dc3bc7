//! Every kernel tier against the scalar oracle (bit-exact, since tiers share the operation
//! order), and the oracle against an f64 reference on dequantized values (within a tolerance
//! scaled by Σ|x·y|). A tier this CPU lacks is skipped with a printed reason. Tiled kernels
//! ([`Kernels::dot_tile`]) and the matrix-vector runs ([`Kernels::gemv`]) of every tier, the
//! scalar one included, are held to the scalar single dot of each of their outputs, for whole
//! tiles and for every edge tile; so are the paths over packed Q4_0 and IQ4_NL groups
//! ([`Layout::Q4_0x16`], [`Layout::Iq4NlX16`]), against the scalar dot of the rows before
//! packing.

mod common;
#[path = "common/qc.rs"]
mod qc;

use locus::kernels::blocks::{self, block_bytes, BlockQ4_0, BlockQ4_1, BlockQ8_0};
use locus::kernels::gelu;
use locus::kernels::half::{f16_to_f32, f32_to_f16};
use locus::kernels::ops::Rope;
use locus::kernels::{
    dequantize_row, pack, ActRow, GgmlType, Kernels, Layout, PackedSteps, Queries, SumOrder, Tier,
    MAX_PANEL_TOKENS, PACK_ROWS, PANEL_ROWS, PANEL_TOKENS, STEPS_MIN_TOKENS, TILE_ROWS,
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
/// scalar single dot, bit for bit, in each order (the batched one: tinyBLAS's for the floats).
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
        for order in [SumOrder::Lanes, SumOrder::BlockChain, SumOrder::Batched] {
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

/// The block-chain packed layouts and the types they hold.
const CHAIN_PACKED: [(GgmlType, Layout); 2] = [
    (GgmlType::Q4_0, Layout::Q4_0x16),
    (GgmlType::Iq4Nl, Layout::Iq4NlX16),
];

/// [`check_packed_of`] for each of [`CHAIN_PACKED`].
fn check_packed(r: &TileRows, groups: usize, n_tokens: usize) -> bool {
    CHAIN_PACKED
        .iter()
        .all(|&p| check_packed_of(p, r, groups, n_tokens))
}

/// Every tier's packed paths (`gemv_in` over `layout`'s groups, `dot_tile_packed`) on
/// `groups` groups of `ty` rows packed by `pack_group` (the rows of `r` repeated to fill them)
/// against `n_tokens` activations (likewise), element by element against the scalar
/// block-chain dot of the file's rows, bit for bit.
fn check_packed_of(
    (ty, layout): (GgmlType, Layout),
    r: &TileRows,
    groups: usize,
    n_tokens: usize,
) -> bool {
    let order = SumOrder::BlockChain;
    let scalar = Kernels::scalar();
    let mut all = vec![scalar];
    all.extend(tiers());
    let n = r.w[0].len() / 32;
    // Each group's rows start one further along `r.w`, so that groups differ even when it
    // holds exactly one group's rows.
    let rows: Vec<Vec<u8>> = (0..groups * PACK_ROWS)
        .map(|i| weight_bytes(ty, &r.w[(i + i / PACK_ROWS) % r.w.len()]))
        .collect();
    let group_bytes = PACK_ROWS * rows[0].len();
    let mut packed = vec![0u8; groups * group_bytes];
    for (g, out) in packed.chunks_exact_mut(group_bytes).enumerate() {
        pack::pack_group(
            layout,
            &rows[g * PACK_ROWS..(g + 1) * PACK_ROWS].concat(),
            n,
            out,
        );
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
        k.gemv_in(layout, ty, order, &packed, &acts[0], &mut one);
        for (i, (got, row)) in one.iter().zip(&rows).enumerate() {
            let want = scalar.dot_ordered(ty, order, row, &acts[0]);
            if !same(*got, want) {
                eprintln!(
                    "{} tier {} packed gemv, row {i}: {got} != scalar {want}",
                    ty.name(),
                    k.tier
                );
                return false;
            }
        }
        for (g, group) in packed.chunks_exact(group_bytes).enumerate() {
            let mut out = vec![f32::NAN; PACK_ROWS * n_tokens];
            k.dot_tile_packed(layout, group, &acts, &mut out);
            for (t, a) in acts.iter().enumerate() {
                for r in 0..PACK_ROWS {
                    let want = scalar.dot_ordered(ty, order, &rows[g * PACK_ROWS + r], a);
                    let got = out[t * PACK_ROWS + r];
                    if !same(got, want) {
                        eprintln!(
                            "{} tier {} packed tile of {n_tokens} tokens, group {g} row {r} \
                             token {t}: {got} != scalar {want}",
                            ty.name(),
                            k.tier
                        );
                        return false;
                    }
                }
            }
        }
        // All the groups in one run, as the forward pass calls it (the activations' views
        // shared by the groups, each group's outputs handed on in order), with the steps
        // panels' interleaved activations built by the run and, where the tier takes them,
        // built once beforehand as the forward pass hands them in.
        let mut built = PackedSteps::default();
        let prebuilt = k.build_packed_steps(&acts, &mut built);
        if prebuilt != (k.tier != Tier::Scalar && n_tokens >= STEPS_MIN_TOKENS) {
            eprintln!(
                "tier {} built steps for {n_tokens} tokens: {prebuilt}",
                k.tier
            );
            return false;
        }
        for steps in [None, Some(&built).filter(|_| prebuilt)] {
            if !check_packed_run(k, (ty, layout), (&packed, &rows, groups), &acts, steps) {
                return false;
            }
        }
    }
    true
}

/// One packed run of `groups` groups of `rows` (`packed`) against `acts`, with `steps` or
/// none, each group's outputs against the scalar block-chain dot, bit for bit.
fn check_packed_run(
    k: &Kernels,
    (ty, layout): (GgmlType, Layout),
    (packed, rows, groups): (&[u8], &[Vec<u8>], usize),
    acts: &[ActRow],
    steps: Option<&PackedSteps>,
) -> bool {
    let scalar = Kernels::scalar();
    let (order, n_tokens) = (SumOrder::BlockChain, acts.len());
    let same =
        |got: f32, want: f32| got.to_bits() == want.to_bits() || got.is_nan() && want.is_nan();
    {
        let (mut seen, mut bad) = (0, None);
        let mut out = vec![f32::NAN; PACK_ROWS * n_tokens];
        k.dot_tile_packed_run(layout, packed, groups, acts, steps, &mut out, |g, o| {
            if g != seen && bad.is_none() {
                bad = Some(format!("group {g} handed on as number {seen}"));
            }
            seen += 1;
            for (t, a) in acts.iter().enumerate() {
                for r in 0..PACK_ROWS {
                    let want = scalar.dot_ordered(ty, order, &rows[g * PACK_ROWS + r], a);
                    let got = o[t * PACK_ROWS + r];
                    if !same(got, want) && bad.is_none() {
                        bad = Some(format!("group {g} row {r} token {t}: {got} != {want}"));
                    }
                }
            }
        });
        if let Some(b) = bad.or((seen != groups).then(|| format!("{seen} of {groups} groups"))) {
            eprintln!(
                "{} tier {} packed run of {groups} groups, {n_tokens} tokens, steps handed in: \
                 {}: {b}",
                ty.name(),
                k.tier,
                steps.is_some()
            );
            return false;
        }
    }
    true
}

fn dequantized_act(a: &ActRow) -> Vec<f32> {
    match a {
        ActRow::F32(v) | ActRow::F16(v) | ActRow::Bf16(v) => v.clone(),
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

/// F32 rows of any length (not only whole blocks): the vector kernels' steps of 64, their
/// leftovers one element at a time, and rows shorter than one step, against the scalar tier.
/// Values of mixed signs and magnitudes, so that every change of summation order shows.
#[test]
fn f32_rows_of_any_length_equal_the_scalar_oracle() {
    fn prop(seed: u64, len: u16) -> bool {
        let n = usize::from(len) * 7 % 400;
        let mut state = seed | 1;
        let mut next = move || {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let u = (state >> 40) as f32 / (1u64 << 24) as f32 - 0.5;
            u * (1 << ((state >> 33) % 12)) as f32
        };
        let w: Vec<f32> = (0..n).map(|_| next()).collect();
        let x: Vec<f32> = (0..n).map(|_| next()).collect();
        let wb = weight_bytes(GgmlType::F32, &w);
        let mut act = ActRow::new_for(GgmlType::F32);
        act.set(&x);
        let scalar = Kernels::scalar();
        tiers().iter().all(|k| {
            [SumOrder::Lanes, SumOrder::BlockChain].iter().all(|&o| {
                let (got, want) = (
                    k.dot_ordered(GgmlType::F32, o, &wb, &act),
                    scalar.dot_ordered(GgmlType::F32, o, &wb, &act),
                );
                if got.to_bits() != want.to_bits() {
                    eprintln!("F32 n={n} {o:?} tier {}: {got} != scalar {want}", k.tier);
                }
                got.to_bits() == want.to_bits()
            })
        })
    }
    qc::check(
        "f32_rows_of_any_length_equal_the_scalar_oracle",
        prop as fn(u64, u16) -> bool,
    );
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

/// Rows longer than a wide tile's run of blocks whose scale products it writes at once (32 on
/// AVX2): two whole runs and a partial one, for whole groups of tokens, half a group and the
/// tokens left over.
#[test]
fn long_rows_tiles_equal_scalar_single_dots() {
    let mut g = qc::gen("long_rows_tiles_equal_scalar_single_dots", 100);
    let blocks = 2 * 32 + 5;
    let r = TileRows {
        w: (0..6).map(|_| gen_row(&mut g, blocks)).collect(),
        x: (0..2 * PANEL_TOKENS + 5)
            .map(|_| gen_row(&mut g, blocks))
            .collect(),
    };
    for n_tokens in [PANEL_TOKENS, 2 * PANEL_TOKENS + 5] {
        assert!(
            check_tile(&r, r.w.len(), n_tokens),
            "tile of {blocks}-block rows"
        );
    }
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
    }
    // Packed groups, two and three: a single token (the gemv), the steps panels from
    // STEPS_MIN_TOKENS, a short group of steps alone and after whole ones, up to a whole batch.
    for groups in [2, 3] {
        for n_tokens in [
            1,
            STEPS_MIN_TOKENS,
            STEPS_MIN_TOKENS + 1,
            PANEL_TOKENS - 1,
            PANEL_TOKENS,
            PANEL_TOKENS + 1,
            2 * PANEL_TOKENS - 1,
            4 * PANEL_TOKENS + 5,
            MAX_PANEL_TOKENS,
        ] {
            assert!(
                check_packed(&r, groups, n_tokens),
                "packed tile of {groups} groups, {n_tokens} tokens"
            );
        }
    }
}

#[test]
fn packed_runs_refuse_the_steps_of_other_activations() {
    // Every SIMD tier has steps panels.
    let Some(k) = tiers().into_iter().next() else {
        common::skip::skip("no SIMD tier on this CPU");
        return;
    };
    let n = 2;
    let act = |seed: f32| {
        let mut a = ActRow::new_for(GgmlType::Q4_0);
        a.set(
            &(0..n * 32)
                .map(|i| (i as f32 * seed).sin())
                .collect::<Vec<_>>(),
        );
        a
    };
    let (a, b) = ([act(0.1), act(0.2)], [act(0.1), act(0.2)]);
    let mut steps = PackedSteps::default();
    assert!(k.build_packed_steps(&a, &mut steps));
    assert!(steps.of(&a) && !steps.of(&b));
    let group = vec![0u8; PACK_ROWS * n * 18];
    let mut out = vec![0f32; PACK_ROWS * b.len()];
    let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        k.dot_tile_packed_run(
            Layout::Q4_0x16,
            &group,
            1,
            &b,
            Some(&steps),
            &mut out,
            |_, _| {},
        )
    }));
    let msg = run.expect_err("steps of equal, other activations were taken");
    let msg = (msg.downcast_ref::<&str>().copied())
        .or(msg.downcast_ref::<String>().map(String::as_str))
        .unwrap_or_default();
    assert!(msg.contains("steps of other activations"), "{msg}");
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

/// Every tier rounds f32 to f16 and back (the query and the probabilities of attention over an
/// f16 cache) as the scalar oracle does, bit for bit: every f16 value, the midpoints between
/// neighbours (ties to even) and the floats either side of them, subnormals, overflow to
/// infinity, NaN; slices of lengths around the eight-lane step.
#[test]
fn f16_rounding_of_every_tier_equals_scalar() {
    let scalar = Kernels::scalar();
    let mut x: Vec<f32> = Vec::new();
    for h in 0..=u16::MAX {
        let v = f16_to_f32(h);
        let next = f16_to_f32(h.wrapping_add(1));
        x.push(v);
        if v.is_finite() && next.is_finite() && (h & 0x7fff) != 0x7bff {
            let mid = (v as f64 + next as f64) / 2.0;
            let mid = mid as f32;
            x.extend([
                mid,
                f32::from_bits(mid.to_bits() + 1),
                f32::from_bits(mid.to_bits() - 1),
            ]);
        }
    }
    x.extend([
        65519.0,
        65520.0,
        1e6,
        -1e30,
        f32::INFINITY,
        f32::NAN,
        -f32::NAN,
        1e-8,
        -3e-8,
    ]);
    let mut want = x.clone();
    scalar.round_f16(&mut want);
    let changed = want
        .iter()
        .zip(&x)
        .filter(|(a, b)| a.to_bits() != b.to_bits())
        .count();
    assert!(
        changed > x.len() / 2,
        "the oracle rounded only {changed} of {} values",
        x.len()
    );
    for k in tiers() {
        for len in [x.len(), 1, 7, 8, 9, 23] {
            let mut got = x[..len].to_vec();
            k.round_f16(&mut got);
            let differ = (got.iter().zip(&want[..len]))
                .filter(|(a, b)| a.to_bits() != b.to_bits())
                .count();
            assert_eq!(
                differ, 0,
                "tier {} rounds {differ} of {len} values differently",
                k.tier
            );
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

/// A micro-batch's attention dots of several queries against the same widened rows (a set
/// of latent-attention heads reading a block of cells) equal, in every tier, the scalar model's
/// one dot at a time bit for bit: row and query counts off the tile's four by four, lengths
/// around the 16-lane step, outputs at a stride.
#[test]
fn attention_batch_dots_of_several_queries_equal_scalar() {
    let scalar = Kernels::scalar();
    let mut all = vec![Kernels::scalar()];
    all.extend(tiers());
    for (len, rows, count) in [
        (576usize, 9usize, 5usize),
        (17, 4, 2),
        (16, 3, 1),
        (5, 1, 3),
        (130, 7, 8),
        (33, 5, 6),
    ] {
        let stride = len + 3;
        let x: Vec<u16> = (0..rows * stride)
            .map(|i| f32_to_f16(((i * 7919) % 1013) as f32 * 0.013 - 6.5))
            .collect();
        let wide: Vec<f32> = x.iter().map(|&h| f16_to_f32(h)).collect();
        let y_stride = len + 1;
        let ys: Vec<f32> = (0..count * y_stride)
            .map(|i| ((i * 104729) % 997) as f32 * 0.002 - 1.0)
            .collect();
        let queries = Queries {
            ys: &ys,
            len,
            stride: y_stride,
            count,
        };
        let out_stride = rows + 2;
        for k in &all {
            let mut out = vec![f32::NAN; count * out_stride];
            k.att_dot_batch_heads(&wide, (stride, rows), queries, &mut out, out_stride);
            for j in 0..count {
                for r in 0..rows {
                    let want =
                        scalar.att_dot_batch(&x[r * stride..r * stride + len], queries.get(j));
                    let got = out[j * out_stride + r];
                    assert_eq!(
                        got.to_bits(),
                        want.to_bits(),
                        "tier {} len {len} query {j} of {count} row {r} of {rows}: {got} != {want}",
                        k.tier
                    );
                }
                // Outputs between a query's rows and the next query's are not written.
                assert!(
                    out[j * out_stride + rows].is_nan(),
                    "tier {}: wrote past a query's rows",
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

/// The query heads of a KV head against the same rows at once (`att_dot_decode_heads`, each
/// cache row widened once for all of them) give every head's single dots bit for bit in every
/// tier: head counts around the kernel's sets of four (a short last set), row counts around
/// its sixteen-row reduction, lengths around its steps, pads past and short of the row, and a
/// row of zeros against negative zeros (the sign of a zero sum depends on the order).
#[test]
fn attention_decode_head_sets_equal_single_dots() {
    let scalar = Kernels::scalar();
    let mut all = vec![scalar];
    all.extend(tiers());
    for (len, rows, heads) in [
        (64usize, 16usize, 8usize),
        (64, 33, 4),
        (64, 7, 3),
        (1, 5, 2),
        (17, 15, 5),
        (130, 17, 8),
        (250, 64, 6),
        (3434, 64, 8),
        (1000, 16, 8),
    ] {
        let stride = len + 5;
        let mut x: Vec<u16> = (0..rows * stride)
            .map(|i| f32_to_f16(((i * 7919) % 1013) as f32 * 0.013 - 6.5))
            .collect();
        x[..len].fill(0);
        let y_stride = len + 3;
        let ys: Vec<f32> = (0..heads * y_stride)
            .map(|i| match i % 11 {
                0 => -0.0,
                _ => ((i * 104729) % 997) as f32 * 0.002 - 1.0,
            })
            .collect();
        let queries = Queries {
            ys: &ys,
            len,
            stride: y_stride,
            count: heads,
        };
        let out_stride = rows + 2;
        for n_pad in [len, len.div_ceil(64) * 64, 256, len / 2] {
            for k in &all {
                let mut out = vec![f32::NAN; heads * out_stride];
                k.att_dot_decode_heads(&x, (stride, rows), queries, n_pad, &mut out, out_stride);
                for j in 0..heads {
                    let mut want = vec![0f32; rows];
                    scalar.att_dot_decode_rows(&x, stride, queries.get(j), n_pad, &mut want);
                    let got = &out[j * out_stride..j * out_stride + rows];
                    assert!(
                        same_bits(got, &want),
                        "tier {} len {len} n_pad {n_pad} head {j} of {heads}, {rows} rows: \
                         {got:?} != {want:?}",
                        k.tier
                    );
                    assert!(
                        out[j * out_stride + rows..(j + 1) * out_stride]
                            .iter()
                            .all(|v| v.is_nan()),
                        "tier {}: wrote past head {j}'s rows",
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

/// A RoPE case: `heads` heads of `head_dim` values, the first `2 · pairs` of each rotated (all
/// of them or fewer; pair counts that are and are not multiples of the vector steps).
#[derive(Clone, Debug)]
struct RopeCase {
    head_dim: usize,
    pairs: usize,
    pos: usize,
    freq_base: f32,
    x: Vec<f32>,
}

/// One f32 of a random kind: ordinary, huge, tiny, subnormal, ±0, ±inf, NaN.
fn gen_value(g: &mut Gen) -> f32 {
    let r = (i32::arbitrary(g) % 100_000) as f32 / 5000.0;
    match u8::arbitrary(g) % 16 {
        0 => 0.0,
        1 => -0.0,
        2 => r * 1e4,
        3 => r * 1e-4,
        4 => f32::from_bits(u32::arbitrary(g) % 0x0080_0000), // subnormal
        5 => [f32::INFINITY, f32::NEG_INFINITY, f32::NAN][usize::arbitrary(g) % 3],
        _ => r,
    }
}

impl Arbitrary for RopeCase {
    fn arbitrary(g: &mut Gen) -> RopeCase {
        // Head sizes of the models (64, 128, 256) and odd ones; rotated pairs up to the head.
        let head_dim = match u8::arbitrary(g) % 4 {
            0 => [64, 128, 256][usize::arbitrary(g) % 3],
            _ => 2 + 2 * (usize::arbitrary(g) % 80),
        };
        let pairs = match u8::arbitrary(g) % 2 {
            0 => head_dim / 2,
            _ => 1 + usize::arbitrary(g) % (head_dim / 2),
        };
        let heads = 1 + usize::arbitrary(g) % 4;
        RopeCase {
            head_dim,
            pairs,
            pos: usize::arbitrary(g) % 40_000,
            freq_base: [10_000.0, 1_000_000.0][usize::arbitrary(g) % 2],
            x: (0..head_dim * heads).map(|_| gen_value(g)).collect(),
        }
    }
}

/// Whether two outputs hold the same f32 bits, or both a NaN, element for element: where two
/// NaNs meet in one operation, which one survives is the instruction's operand order, which
/// neither compiler promises.
fn same_bits_or_nan(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(p, q)| p.to_bits() == q.to_bits() || (p.is_nan() && q.is_nan()))
}

/// NEOX RoPE of every tier (scalar table included) equals its scalar model
/// ([`Rope::apply_neox`]) bit for bit: head sizes and rotated-pair counts on and off the vector
/// steps, partial rotation, and values of every kind (±0, subnormals, ±inf, NaN).
#[test]
fn rope_neox_tiers_equal_scalar() {
    fn prop(c: RopeCase) -> bool {
        let rope = Rope::new(2 * c.pairs, c.freq_base, 1.0, None);
        let mut cache = Vec::new();
        rope.cache(c.pos, &mut cache);
        let mut want = c.x.clone();
        rope.apply_neox(&cache, &mut want, c.head_dim);
        let mut all = vec![Kernels::scalar()];
        all.extend(tiers());
        all.iter().all(|k| {
            let mut got = c.x.clone();
            k.rope_neox(&cache, &mut got, c.head_dim);
            let same = same_bits_or_nan(&got, &want);
            if !same {
                eprintln!(
                    "tier {}: head_dim {} pairs {} pos {} differs",
                    k.tier, c.head_dim, c.pairs, c.pos
                );
            }
            same
        })
    }
    qc::check("rope_neox_tiers_equal_scalar", prop as fn(RopeCase) -> bool);
}

/// NEOX RoPE turns the pairs `(i, i + n_dims/2)` by angle `i` and nothing else: a unit vector
/// on either member of one pair lands on (cos, sin) or (−sin, cos) of that pair's angle, every
/// other value stays exactly 0 and the dimensions past `n_dims` pass through; every pair keeps
/// its length; position 0 changes nothing.
#[test]
fn rope_neox_rotates_the_documented_pairs() {
    let (head_dim, n_dims) = (24usize, 16usize);
    let half = n_dims / 2;
    let rope = Rope::new(n_dims, 10_000.0, 1.0, None);
    let mut cache = Vec::new();
    rope.cache(7, &mut cache);
    assert_eq!(cache.len(), half);
    let mut all = vec![Kernels::scalar()];
    all.extend(tiers());
    for k in &all {
        for i in 0..half {
            let (c, s) = cache[i];
            for (one, want_lo, want_hi) in [(i, c, s), (i + half, -s, c)] {
                let mut x = vec![0f32; 2 * head_dim];
                x[head_dim + one] = 1.0; // the second head
                x[head_dim + n_dims] = 5.0; // past n_dims: passes through
                k.rope_neox(&cache, &mut x, head_dim);
                let mut want = vec![0f32; 2 * head_dim];
                want[head_dim + i] = want_lo;
                want[head_dim + i + half] = want_hi;
                want[head_dim + n_dims] = 5.0;
                // By value: a product 0·(−sin) may be −0.
                assert!(x == want, "tier {}: unit {one} of pair {i}: {x:?}", k.tier);
            }
        }
        let orig: Vec<f32> = (0..3 * head_dim)
            .map(|i| ((i * 7919) % 1013) as f32 * 0.037 - 18.0)
            .collect();
        let mut x = orig.clone();
        k.rope_neox(&cache, &mut x, head_dim);
        for (h, (a, b)) in orig
            .chunks_exact(head_dim)
            .zip(x.chunks_exact(head_dim))
            .enumerate()
        {
            for i in 0..half {
                let before = a[i].hypot(a[i + half]);
                let after = b[i].hypot(b[i + half]);
                assert!(
                    (before - after).abs() <= 1e-5 * before,
                    "tier {}: head {h} pair {i} length {before} → {after}",
                    k.tier
                );
            }
            assert!(same_bits(&a[n_dims..], &b[n_dims..]), "dims past n_dims");
        }
        let mut zero = Vec::new();
        rope.cache(0, &mut zero);
        let mut x = orig.clone();
        k.rope_neox(&zero, &mut x, head_dim);
        assert!(x == orig, "tier {}: position 0 is the identity", k.tier);
    }
}

/// FNV-1a (64-bit) over the table's entries, each as two little-endian bytes.
fn fnv1a64_u16(entries: &[u16]) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    entries
        .iter()
        .flat_map(|e| e.to_le_bytes())
        .fold(OFFSET, |h, b| (h ^ u64::from(b)).wrapping_mul(PRIME))
}

/// Our GELU table equals ggml's entry for entry. The hash is of ggml's own
/// `ggml_table_gelu_f16`, from a C program (not in the repo) linked against the static
/// libraries of the llama.cpp build the golden data come from (llama-cpp-python 0.3.36's
/// vendored llama.cpp; `-O3 -mfma -mf16c -mavx512f …`, GGML_NATIVE=OFF; Debian 12, glibc 2.36,
/// GCC 12.2): it calls `ggml_cpu_init()`, which builds the table with glibc's `tanhf`, and
/// prints FNV-1a 64 over the 65536 entries as little-endian u16, as `fnv1a64_u16` here:
/// `ab044edba0ed200c`. (The same program found that a model of `ggml_gelu_f32` without its one
/// fused multiply-add misses one entry.)
#[test]
fn gelu_table_equals_ggmls() {
    const GGML_TABLE_FNV1A64: u64 = 0xab04_4edb_a0ed_200c;
    let t = gelu::table();
    assert_eq!(
        fnv1a64_u16(t),
        GGML_TABLE_FNV1A64,
        "the GELU table differs from ggml's"
    );
    // The SIMD tiers look up NaN gates at F16C's NaN (payload kept) where ggml looks them up at
    // sign | 0x7e00: sound because every NaN entry of one sign holds the same value.
    let nan = |s: u16| t[usize::from(s | 0x7e00)];
    for h in 0..=u16::MAX {
        if f16_to_f32(h).is_nan() {
            assert_eq!(t[usize::from(h)], nan(h & 0x8000), "NaN entry {h:#06x}");
        }
    }
}

/// FNV-1a (64-bit) over the values' f32 bits, each as four little-endian bytes.
fn fnv1a64_f32(values: &[f32]) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    values
        .iter()
        .flat_map(|v| v.to_bits().to_le_bytes())
        .fold(OFFSET, |h, b| (h ^ u64::from(b)).wrapping_mul(PRIME))
}

/// Input `i` of golden case `case`: an integer hash of both, its sign and mantissa bits kept,
/// its exponent picking one kind: subnormal, ±0, about 2^100, about 2^-100, or an ordinary
/// value in [2^-5, 2^7) (made from integers only, so the C program reproduces it exactly).
fn rope_golden_input(case: u32, i: u32) -> f32 {
    const SIGN: u32 = 0x8000_0000;
    const MANTISSA: u32 = 0x007f_ffff;
    const MANTISSA_BITS: u32 = 23;
    const KINDS: u32 = 15;
    const HUGE_EXP: u32 = 227;
    const TINY_EXP: u32 = 27;
    const ORDINARY_EXP: u32 = 118;
    let mut h = i.wrapping_mul(0x9e37_79b9) ^ case.wrapping_mul(0x85eb_ca6b);
    h ^= h >> 15;
    h = h.wrapping_mul(0x2c1b_3c6d);
    h ^= h >> 12;
    h = h.wrapping_mul(0x297a_2d39);
    h ^= h >> 15;
    let (sign, mantissa) = (h & SIGN, h & MANTISSA);
    f32::from_bits(match (h >> MANTISSA_BITS) & KINDS {
        0 => sign | mantissa,
        1 => sign,
        2 => sign | HUGE_EXP << MANTISSA_BITS | mantissa,
        3 => sign | TINY_EXP << MANTISSA_BITS | mantissa,
        kind => sign | (ORDINARY_EXP + kind) << MANTISSA_BITS | mantissa,
    })
}

/// One golden case of normal-mode RoPE: heads of `head_dim` values, the first `n_dims` of each
/// rotated, at position `pos`, and the FNV-1a 64 of ggml's output.
struct RopeGolden {
    head_dim: usize,
    n_dims: usize,
    heads: usize,
    pos: usize,
    freq_base: f32,
    freq_scale: f32,
    ggml_fnv1a64: u64,
}

/// Normal-mode RoPE (pairs `(2i, 2i+1)`) of every tier, the scalar table included, with the
/// cache of [`Rope::cache`], equals ggml's `ggml_rope_ext` bit for bit, above all on rotated
/// pair counts that are not a multiple of four, where GCC computes the last `pairs mod 4` pairs
/// without fusing (a model fusing every pair misses 4 to 9 values of each such case here).
///
/// The hashes are of ggml's own output, from a C program (not in the repo) linked against the
/// static libraries of the llama.cpp build the golden data come from (llama-cpp-python 0.3.36's
/// vendored llama.cpp; `-O3 -mfma -mf16c -mavx512f …`, GGML_NATIVE=OFF; Debian 12, glibc 2.36,
/// GCC 12.2). For case number `c` of the table below it fills an F32 tensor of
/// `[head_dim, heads, 1]` with `rope_golden_input(c, i)` (the same integer hash, in C) and an
/// I32 tensor with `pos`, builds `ggml_rope_ext(ctx, x, pos, NULL, n_dims,
/// GGML_ROPE_TYPE_NORMAL, 0, freq_base, freq_scale, 0.0f, 1.0f, 32.0f, 1.0f)`, computes it with
/// `ggml_graph_compute_with_ctx(ctx, graph, 1)` and prints FNV-1a 64 over the output's bytes as
/// `fnv1a64_f32` here. The control case (64 dims, no tail) passes with either model.
#[test]
fn rope_normal_equals_ggmls_golden() {
    let golden = |head_dim, n_dims, heads, pos, freq_base, freq_scale, ggml_fnv1a64| RopeGolden {
        head_dim,
        n_dims,
        heads,
        pos,
        freq_base,
        freq_scale,
        ggml_fnv1a64,
    };
    let cases = [
        golden(34, 34, 16, 39_999, 10_000.0, 1.0, 0x7258_6663_3f64_e555),
        golden(18, 14, 16, 12_345, 10_000.0, 1.0, 0x71d2_e210_d574_3950),
        golden(24, 6, 16, 777, 500.0, 1.0, 0x46c3_21b8_2fee_61df),
        golden(112, 110, 8, 31_337, 1_000_000.0, 1.0, 0x56d5_60f0_cf0f_49be),
        golden(80, 44, 8, 4_321, 10_000.0, 0.25, 0x45d0_722e_17b6_2a35),
        golden(64, 64, 4, 2_024, 10_000.0, 1.0, 0x956c_a63a_c5af_9444),
    ];
    let mut all = vec![Kernels::scalar()];
    all.extend(tiers());
    let mut cache = Vec::new();
    for (c, g) in cases.iter().enumerate() {
        let x: Vec<f32> = (0..g.head_dim * g.heads)
            .map(|i| rope_golden_input(c as u32, i as u32))
            .collect();
        let rope = Rope::new(g.n_dims, g.freq_base, g.freq_scale, None);
        rope.cache(g.pos, &mut cache);
        for k in &all {
            let mut got = x.clone();
            k.rope(&cache, &mut got, g.head_dim);
            assert_eq!(
                fnv1a64_f32(&got),
                g.ggml_fnv1a64,
                "tier {}: case {c} (head_dim {}, n_dims {}, pos {}) differs from ggml",
                k.tier,
                g.head_dim,
                g.n_dims,
                g.pos
            );
        }
    }
}

/// Whether a GEGLU output matches: the same bits, or NaN where both factors were NaN (which
/// NaN a product of two NaNs keeps is the compiler's choice of operand order, in ggml's build
/// as in ours).
fn geglu_same(gate: &[f32], up: &[f32], got: &[f32], want: &[f32]) -> Result<(), String> {
    for (i, ((&x, &u), (&a, &b))) in gate.iter().zip(up).zip(got.iter().zip(want)).enumerate() {
        let ok = if x.is_nan() && u.is_nan() {
            a.is_nan() && b.is_nan()
        } else {
            a.to_bits() == b.to_bits()
        };
        if !ok {
            return Err(format!(
                "element {i}: gate {x:e} ({:#010x}) up {u:e}: {a:e} ({:#010x}) != {b:e} ({:#010x})",
                x.to_bits(),
                a.to_bits(),
                b.to_bits()
            ));
        }
    }
    Ok(())
}

/// GEGLU's gates at every edge: every f16 value, each one f32 step above and below, the f16
/// halfway points (ties to even), the ±10 boundary and its neighbours, ±0, ±inf, NaN.
fn geglu_edge_gates() -> Vec<f32> {
    let mut v = Vec::new();
    for h in 0..=u16::MAX {
        let x = f16_to_f32(h);
        v.push(x);
        if x.is_finite() {
            v.push(f32::from_bits(x.to_bits() + 1));
            if x != 0.0 {
                v.push(f32::from_bits(x.to_bits() - 1));
            }
            let next = f16_to_f32(h.wrapping_add(1));
            if next.is_finite() && (next > 0.0) == (x > 0.0) {
                v.push(0.5 * (x + next));
            }
        }
    }
    for b in [gelu::TABLE_LIMIT, -gelu::TABLE_LIMIT] {
        v.extend([
            b,
            f32::from_bits(b.to_bits() + 1),
            f32::from_bits(b.to_bits() - 1),
        ]);
    }
    v.extend([
        0.0,
        -0.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        -f32::NAN,
        1e30,
        -1e30,
    ]);
    v
}

/// GEGLU of every tier (scalar table included) equals the scalar oracle (`gelu::geglu`) bit for
/// bit, on every edge gate against ups of every kind and on row lengths around the 8-lane step;
/// and the oracle is ggml's three cases: 0 at or below −10, `gate · up` from 10 up, the table in
/// between.
#[test]
fn geglu_tiers_equal_scalar() {
    let gates = geglu_edge_gates();
    let ups_of = |n: usize, salt: usize| -> Vec<f32> {
        (0..n)
            .map(|i| match (i * 7 + salt) % 23 {
                0 => f32::INFINITY,
                1 => f32::NAN,
                2 => -0.0,
                3 => 0.0,
                4 => 1e30,
                _ => ((i * 104_729 + salt) % 997) as f32 * 0.006 - 3.0,
            })
            .collect()
    };
    let up = ups_of(gates.len(), 0);
    let mut want = gates.clone();
    gelu::geglu(&mut want, &up);
    let table = gelu::table();
    for ((&x, &u), &w) in gates.iter().zip(&up).zip(&want) {
        let spec = if x <= -gelu::TABLE_LIMIT {
            0.0
        } else if x >= gelu::TABLE_LIMIT {
            x * u
        } else {
            f16_to_f32(table[usize::from(gelu::fp32_to_fp16(x))]) * u
        };
        assert!(
            geglu_same(&[x], &[u], &[w], &[spec]).is_ok(),
            "oracle at gate {x:e}, up {u:e}: {w:e} != {spec:e}"
        );
    }
    let mut all = vec![Kernels::scalar()];
    all.extend(tiers());
    for k in &all {
        let mut got = gates.clone();
        k.geglu(&mut got, &up);
        if let Err(e) = geglu_same(&gates, &up, &got, &want) {
            panic!("tier {} over the edge gates: {e}", k.tier);
        }
        for n in [1usize, 7, 8, 9, 15, 16, 17, 31, 33, 1000] {
            for start in [0usize, 3, 40_000] {
                let g = &gates[start..start + n];
                let u = ups_of(n, start);
                let mut want = g.to_vec();
                gelu::geglu(&mut want, &u);
                let mut got = g.to_vec();
                k.geglu(&mut got, &u);
                if let Err(e) = geglu_same(g, &u, &got, &want) {
                    panic!("tier {} n {n} from {start}: {e}", k.tier);
                }
            }
        }
    }
}

/// A GEGLU row: gates mostly in the table's range, some of every kind, ups likewise; lengths
/// on and off the 8-lane step.
#[derive(Clone, Debug)]
struct GegluRow {
    gate: Vec<f32>,
    up: Vec<f32>,
}

impl Arbitrary for GegluRow {
    fn arbitrary(g: &mut Gen) -> GegluRow {
        let n = 1 + usize::arbitrary(g) % 300;
        let value = |g: &mut Gen| match u8::arbitrary(g) % 4 {
            0 => gen_value(g),
            _ => (i32::arbitrary(g) % 1_300_000) as f32 / 100_000.0,
        };
        GegluRow {
            gate: (0..n).map(|_| value(g)).collect(),
            up: (0..n).map(|_| value(g)).collect(),
        }
    }
}

/// Random GEGLU rows give the oracle's bits in every tier.
#[test]
fn geglu_random_rows_equal_scalar() {
    fn prop(r: GegluRow) -> bool {
        let mut want = r.gate.clone();
        gelu::geglu(&mut want, &r.up);
        tiers().iter().all(|k| {
            let mut got = r.gate.clone();
            k.geglu(&mut got, &r.up);
            match geglu_same(&r.gate, &r.up, &got, &want) {
                Ok(()) => true,
                Err(e) => {
                    eprintln!("tier {}: {e}", k.tier);
                    false
                }
            }
        })
    }
    qc::check(
        "geglu_random_rows_equal_scalar",
        prop as fn(GegluRow) -> bool,
    );
}

#[test]
#[should_panic(expected = "geglu length mismatch")]
fn geglu_refuses_rows_of_different_lengths() {
    Kernels::scalar().geglu(&mut [1.0, 2.0], &[1.0]);
}
