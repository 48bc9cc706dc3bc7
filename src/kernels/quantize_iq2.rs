//! ggml's quantizers of IQ2_XXS, IQ2_XS and IQ2_S with importance weights (`quantize_iq2_xxs`,
//! `quantize_iq2_xs`, `quantize_iq2_s` in `ggml-quants.c`, one row), byte for byte, written
//! straight into ggml's block layouts. Each sub-block (32 values for IQ2_XXS, 16 for the
//! others) is fitted by trying scales and snapping each group of eight values to the nearest
//! entry of the type's grid of eight 3-level values (through a map of every code of eight
//! 2-bit levels and, for the codes off the grid, the rings of entries nearest to them), as
//! ggml's `iq2xs_init_impl` sets them up; the grid maps are shared with the IQ1 types
//! (`quantize_iq1.rs`). Checked against ggml with a C harness linking its library (not part of
//! the repository): see the pinned hashes in `quantize_iq2_tests.rs`.

use super::blocks::{QK, QK_K};
use super::iq_grid_maps::{
    fold_signs, ggml_max, odd_level, Folded, GridMaps, Repick, ScaleTries, SignRule, SIGN_GROUP,
};
use super::iq_grids::{IQ2S_GRID, IQ2XS_GRID, IQ2XXS_GRID};
use super::quantize_ref::{fp16, GROUP_MAX_EPS};
use std::sync::OnceLock;

/// Values per grid entry of the IQ2 and IQ1 grids.
pub(super) const IQ2_GROUP: usize = SIGN_GROUP;
/// Bits of one level in a grid code (a code is `Σ lᵢ·4ⁱ` over an entry's eight levels).
const IQ2_LEVEL_BITS: usize = 2;
/// Levels of one value (ggml's `kMaxQ`): level `l` stands for the odd multiple `2l + 1`.
const IQ2_LEVELS: u8 = 3;
/// The bytes the IQ2 grids store for levels 0, 1, 2.
pub(super) const IQ2_GRID_BYTES: [u8; IQ2_LEVELS as usize] = [0x08, 0x19, 0x2b];
/// The largest odd multiple, `2·2 + 1`.
const IQ2_MAX_ODD: f32 = 5.0;
/// Step of the scale tries, in odd multiples.
const IQ2_TRY_STEP: f32 = 0.1;
/// Largest 4-bit sub-block scale code `ls`; a sub-block's scale is about `d·(2ls + 1)`.
const IQ2_MAX_SCALE_CODE: i32 = 15;
/// `d = max_scale/31`: the largest scale is `d·(2·15 + 1)`.
const IQ2_SCALE_DIVISOR: f32 = (2 * IQ2_MAX_SCALE_CODE + 1) as f32;
/// Most values in one sub-block.
const MAX_SUB: usize = QK;
/// Most grid entries in one sub-block.
const MAX_SUB_GROUPS: usize = MAX_SUB / IQ2_GROUP;
/// Bytes of ggml's f16 super-block scale `d`, first in every IQ2 block.
const D_BYTES: usize = 2;
/// ggml's `GROUP_MAX_EPS_IQ2_S`.
const GROUP_MAX_EPS_IQ2_S: f32 = 1e-8;
/// IQ2_XXS's `make_qp_quants` levels: `0..=kMaxQ`, one more than the grid has.
const QP_NMAX: i32 = IQ2_LEVELS as i32 + 1;

/// `block_iq2_xxs`: d, then per sub-block of 32 two little-endian u32: four 8-bit grid
/// indices, then four 7-bit sign indices and the 4-bit scale code in the top bits.
pub(super) const IQ2XXS_BLOCK_BYTES: usize = D_BYTES + QK_K / 4;
/// Where the scale code sits in a sub-block's second u32.
const IQ2XXS_SCALE_SHIFT: u32 = 28;
/// Bits of one sign index in that u32.
const IQ2XXS_SIGN_BITS: usize = 7;
/// `block_iq2_xs`: d, 32 little-endian u16 (a 9-bit grid index and the 7-bit sign index
/// above it, per group of eight), 8 bytes of two 4-bit scale codes (per sub-block of 16, the
/// even one low).
pub(super) const IQ2XS_BLOCK_BYTES: usize = D_BYTES + QK_K / 4 + QK_K / 32;
/// Where the sign index sits in an IQ2_XS u16.
const IQ2XS_SIGN_SHIFT: u32 = 9;
/// `block_iq2_s`: d, 32 low bytes of the 10-bit grid indices, 32 sign bytes, 8 bytes of the
/// indices' top two bits (four a byte), 8 bytes of two 4-bit scale codes.
pub(super) const IQ2S_BLOCK_BYTES: usize = D_BYTES + QK_K / 4 + QK_K / 16;
/// Offsets in `block_iq2_s`.
const IQ2S_SIGNS_AT: usize = D_BYTES + QK_K / 8;
const IQ2S_QH_AT: usize = D_BYTES + QK_K / 4;
const IQ2S_SCALES_AT: usize = IQ2S_QH_AT + QK_K / 32;
/// High index bits per group in IQ2_S's `qh`.
const IQ2S_HIGH_BITS: usize = 2;
/// Bits of a 4-bit scale code.
const SCALE_NIBBLE: usize = 4;
/// ggml's fudge factor on IQ2_S's stored super-block scale.
const IQ2S_D_FUDGE: f32 = 0.9875;

/// The maps of an 8-value grid of 3 levels (`iq2xs_init_impl`): levels from the grid's
/// `bytes` for levels 0, 1, 2; an off-grid code's neighbours are the entries at its `rings`
/// smallest distances (ggml's `nwant`).
pub(super) fn iq2_maps(grid: &[u64], bytes: [u8; 3], rings: usize) -> GridMaps<IQ2_GROUP> {
    let levels = grid
        .iter()
        .map(|e| {
            e.to_le_bytes().map(|b| {
                let l = bytes.iter().position(|&v| v == b);
                l.expect("an IQ grid byte is one of its three levels") as u8
            })
        })
        .collect();
    GridMaps::new(levels, IQ2_LEVEL_BITS, IQ2_LEVELS, rings)
}

/// How a sub-block's scale fit starts.
#[derive(Clone, Copy, PartialEq)]
enum FirstScale {
    /// `make_qp_quants(n, 4, xval, weight)` gives `s`; the tries divide by `3s` and start at
    /// `s`; a sub-block with `3s ≤ 0` is zero (IQ2_XXS).
    MakeQp,
    /// The tries divide by the largest folded value and start at `max/5` (IQ2_XS, IQ2_S).
    Max,
}

/// How the super-block's sums make `sigma2`, and what no weights means.
#[derive(Clone, Copy, PartialEq)]
enum Sigma {
    /// `sigma2 = Σx²/256`; weights are required (IQ2_XXS, IQ2_XS).
    Mean,
    /// `sigma2 = 2·Σx²/256`; no weights: `w = sigma2/4 + x²` (IQ2_S).
    TwiceMean,
}

/// One IQ2 type: its grid, sub-block and how its `quantize_row_*_impl` differs.
struct Iq2Type {
    grid: &'static [u64],
    /// ggml's `nwant` for this grid.
    rings: usize,
    /// Values per sub-block (one scale code each).
    sub: usize,
    sigma: Sigma,
    signs: SignRule,
    zero_below: f32,
    first: FirstScale,
    tries: ScaleTries,
    maps: OnceLock<GridMaps<IQ2_GROUP>>,
}

impl Iq2Type {
    fn maps(&self) -> &GridMaps<IQ2_GROUP> {
        self.maps
            .get_or_init(|| iq2_maps(self.grid, IQ2_GRID_BYTES, self.rings))
    }
}

/// IQ2_XXS: `iq2xs_init_impl` with 256 entries and `quantize_row_iq2_xxs_impl`.
static IQ2XXS: Iq2Type = Iq2Type {
    grid: &IQ2XXS_GRID,
    rings: 2,
    sub: QK,
    sigma: Sigma::Mean,
    signs: SignRule::EvenNegatives,
    zero_below: GROUP_MAX_EPS,
    first: FirstScale::MakeQp,
    tries: ScaleTries {
        max_odd: IQ2_MAX_ODD,
        step: IQ2_TRY_STEP,
        ntry: 6,
        repick: Repick::Always,
    },
    maps: OnceLock::new(),
};

/// IQ2_XS's and IQ2_S's scale tries: 19, the groups off the grid picked again.
const SUB16_TRIES: ScaleTries = ScaleTries {
    max_odd: IQ2_MAX_ODD,
    step: IQ2_TRY_STEP,
    ntry: 9,
    repick: Repick::OffGrid,
};

/// IQ2_XS: 512 entries and `quantize_row_iq2_xs_impl`.
static IQ2XS: Iq2Type = Iq2Type {
    grid: &IQ2XS_GRID,
    rings: 2,
    sub: QK / 2,
    sigma: Sigma::Mean,
    signs: SignRule::EvenNegatives,
    zero_below: GROUP_MAX_EPS,
    first: FirstScale::Max,
    tries: SUB16_TRIES,
    maps: OnceLock::new(),
};

/// IQ2_S: 1024 entries, the nearest ring only, and `quantize_row_iq2_s_impl`.
static IQ2S: Iq2Type = Iq2Type {
    grid: &IQ2S_GRID,
    rings: 1,
    sub: QK / 2,
    sigma: Sigma::TwiceMean,
    signs: SignRule::All,
    zero_below: GROUP_MAX_EPS_IQ2_S,
    first: FirstScale::Max,
    tries: SUB16_TRIES,
    maps: OnceLock::new(),
};

/// ggml's `make_qp_quants(n, nmax, x, L, w)` ([`super::quantize_fit::make_qp_quants`]), of
/// which IQ2_XXS keeps only the scale.
fn make_qp_quants(nmax: i32, x: &[f32], w: &[f32]) -> f32 {
    let mut levels = [0u8; MAX_SUB];
    super::quantize_fit::make_qp_quants(nmax, x, &mut levels[..x.len()], w)
}

/// One quantized sub-block: its scale, grid entries and sign bytes (masked to what the type
/// stores), one per group of eight.
struct Iq2Sub {
    scale: f32,
    entries: [u16; MAX_SUB_GROUPS],
    signs: [u8; MAX_SUB_GROUPS],
}

/// The `quantize_row_*_impl` work of type `ty` on one sub-block `xb` with importance weights
/// `qw`: weights `w = qw·sqrt(sigma2 + x²)` (IQ2_S without `qw`: `sigma2/4 + x²`),
/// neighbours weighted by `sqrt(w)`; signs folded out ([`fold_signs`]); `None` where the
/// largest folded value is below `ty.zero_below` (or, IQ2_XXS, `make_qp_quants` gives no
/// positive scale). Else the entries and scale by [`GridMaps::fit`]; a negative scale is
/// negated with every stored sign bit.
fn iq2_sub_block(ty: &Iq2Type, xb: &[f32], qw: Option<&[f32]>, sigma2: f32) -> Option<Iq2Sub> {
    let n = xb.len();
    let mut weight = [0f32; MAX_SUB];
    let mut waux = [0f32; MAX_SUB];
    for (i, &x) in xb.iter().enumerate() {
        weight[i] = match qw {
            Some(qw) => qw[i] * (sigma2 + x * x).sqrt(),
            None => 0.25 * sigma2 + x * x,
        };
        waux[i] = weight[i].sqrt();
    }
    let (weight, waux) = (&weight[..n], &waux[..n]);
    let mut xval = [0f32; MAX_SUB];
    let xval = &mut xval[..n];
    let mut signs = [0u8; MAX_SUB_GROUPS];
    let groups = n / IQ2_GROUP;
    fold_signs(xb, weight, xval, &mut signs[..groups], ty.signs);
    let max = ggml_max(xval);
    if max < ty.zero_below {
        return None;
    }
    let (base, first) = match ty.first {
        FirstScale::MakeQp => {
            let s = make_qp_quants(QP_NMAX, xval, weight);
            let eff_max = s * f32::from(IQ2_LEVELS);
            if eff_max <= 0.0 {
                return None;
            }
            (eff_max, s)
        }
        FirstScale::Max => (max, max / IQ2_MAX_ODD),
    };
    let folded = Folded { xval, weight, waux };
    let mut entries = [0u16; MAX_SUB_GROUPS];
    let mut scale = ty
        .maps()
        .fit(&folded, base, first, &ty.tries, &mut entries[..groups]);
    if scale < 0.0 {
        scale = -scale;
        signs = signs.map(|s| !s);
    }
    let mask = ty.signs.mask();
    Some(Iq2Sub {
        scale,
        entries,
        signs: signs.map(|s| s & mask),
    })
}

/// One super-block's sub-blocks by [`iq2_sub_block`] (`None` where zero) and the largest
/// scale (ggml's `MAX`: the later one unless the earlier is larger).
fn iq2_sub_blocks(ty: &Iq2Type, xs: &[f32], qw: Option<&[f32]>) -> (Vec<Option<Iq2Sub>>, f32) {
    let sumx2 = xs.iter().fold(0f32, |s, &x| s + x * x);
    let sigma2 = match ty.sigma {
        Sigma::Mean => sumx2 / QK_K as f32,
        Sigma::TwiceMean => 2.0 * sumx2 / QK_K as f32,
    };
    let mut max_scale = 0f32;
    let subs = xs
        .chunks_exact(ty.sub)
        .enumerate()
        .map(|(ib, xb)| {
            let w = qw.map(|qw| &qw[ty.sub * ib..ty.sub * (ib + 1)]);
            let sub = iq2_sub_block(ty, xb, w, sigma2)?;
            max_scale = if max_scale > sub.scale {
                max_scale
            } else {
                sub.scale
            };
            Some(sub)
        })
        .collect();
    (subs, max_scale)
}

/// `d = max_scale/31` and each sub-block's 4-bit `ls = clamp(nearest_int((s·(1/d) − 1)/2), 0,
/// 15)` (a zero sub-block's `s` is 0).
fn iq2_scale_codes(subs: &[Option<Iq2Sub>], max_scale: f32) -> (f32, Vec<u8>) {
    let d = max_scale / IQ2_SCALE_DIVISOR;
    let id = 1.0 / d;
    let codes = subs
        .iter()
        .map(|s| odd_level(id * s.as_ref().map_or(0.0, |s| s.scale), IQ2_MAX_SCALE_CODE))
        .collect();
    (d, codes)
}

/// Packs scale codes two a byte, the even sub-block's low.
fn pack_nibbles(codes: &[u8], out: &mut [u8]) {
    for (b, pair) in out.iter_mut().zip(codes.chunks_exact(2)) {
        *b = pair[0] | pair[1] << SCALE_NIBBLE;
    }
}

/// What a quantizer does without weights.
#[derive(Clone, Copy, PartialEq)]
pub(super) enum NoWeights {
    /// ggml asserts weights: `None` means all 1.0 (`qw·sqrt(…)` is then `sqrt(…)`), what a
    /// row quantized with a flat importance matrix gets.
    Flat,
    /// ggml takes NULL and has its own rule.
    Ggml,
}

/// Checks one row's shape and runs `block` over its super-blocks and their weights (all 1.0
/// for `None` under [`NoWeights::Flat`]), each block's bytes zero before.
pub(super) fn quantize_rows(
    name: &str,
    x: &[f32],
    weights: Option<&[f32]>,
    none: NoWeights,
    block_bytes: usize,
    block: impl Fn(&[f32], Option<&[f32]>, &mut [u8]),
) -> Vec<u8> {
    assert!(
        x.len().is_multiple_of(QK_K),
        "{name}: a row of {} values is not whole super-blocks of {QK_K}",
        x.len()
    );
    if let Some(w) = weights {
        assert_eq!(w.len(), x.len(), "{name}: one weight per column");
    }
    let ones;
    let weights = match (weights, none) {
        (None, NoWeights::Flat) => {
            ones = vec![1f32; x.len()];
            Some(&ones[..])
        }
        _ => weights,
    };
    let mut out = vec![0u8; x.len() / QK_K * block_bytes];
    for (i, (xs, yb)) in x
        .chunks_exact(QK_K)
        .zip(out.chunks_exact_mut(block_bytes))
        .enumerate()
    {
        block(xs, weights.map(|w| &w[QK_K * i..QK_K * (i + 1)]), yb);
    }
    out
}

/// IQ2_XXS and IQ2_XS: the sub-blocks of each super-block by [`iq2_sub_blocks`]; a
/// super-block whose largest sub-block scale is 0 is all zero bytes; else `d = max/31` in f16
/// and `pack(subs, scale codes, the bytes after d)`.
fn quantize_zeroed(
    ty: &Iq2Type,
    name: &str,
    x: &[f32],
    weights: Option<&[f32]>,
    block_bytes: usize,
    pack: impl Fn(&[Option<Iq2Sub>], &[u8], &mut [u8]),
) -> Vec<u8> {
    quantize_rows(
        name,
        x,
        weights,
        NoWeights::Flat,
        block_bytes,
        |xs, qw, yb| {
            let (subs, max_scale) = iq2_sub_blocks(ty, xs, qw);
            if max_scale == 0.0 {
                return;
            }
            let (d, codes) = iq2_scale_codes(&subs, max_scale);
            yb[..D_BYTES].copy_from_slice(&fp16(d));
            pack(&subs, &codes, &mut yb[D_BYTES..]);
        },
    )
}

/// ggml's `quantize_iq2_xxs` of one row (`quantize_row_iq2_xxs_impl`): sub-blocks of 32,
/// first scale by `make_qp_quants`, 13 tries, every group picked again at the fitted scale.
/// A super-block whose largest sub-block scale is 0 is all zero bytes; else `d = max/31` in
/// f16, and per sub-block the four grid indices and the four 7-bit sign indices with the
/// scale code in bits 28..32.
///
/// `weights`: one importance weight per column. ggml asserts them; `None` here means all
/// 1.0 (for synthetic models without an imatrix; `locus quantize` refuses the type without
/// one, as llama-quantize does).
///
/// # Panics
/// If the row is not whole super-blocks of 256, or the weights are not one per value.
pub fn quantize_iq2_xxs(x: &[f32], weights: Option<&[f32]>) -> Vec<u8> {
    let pack = |subs: &[Option<Iq2Sub>], codes: &[u8], qs: &mut [u8]| {
        let words = qs.chunks_exact_mut(2 * size_of::<u32>());
        for ((sub, &ls), out) in subs.iter().zip(codes).zip(words) {
            let (mut grid, mut sas) = (0u32, u32::from(ls) << IQ2XXS_SCALE_SHIFT);
            if let Some(sub) = sub {
                for k in 0..QK / IQ2_GROUP {
                    grid |= u32::from(sub.entries[k]) << (8 * k);
                    sas |= u32::from(sub.signs[k]) << (IQ2XXS_SIGN_BITS * k);
                }
            }
            out[..4].copy_from_slice(&grid.to_le_bytes());
            out[4..].copy_from_slice(&sas.to_le_bytes());
        }
    };
    quantize_zeroed(
        &IQ2XXS,
        "quantize_iq2_xxs",
        x,
        weights,
        IQ2XXS_BLOCK_BYTES,
        pack,
    )
}

/// ggml's `quantize_iq2_xs` of one row (`quantize_row_iq2_xs_impl`): sub-blocks of 16,
/// first scale `max/5`, 19 tries, the groups the best try took off the grid picked again. A
/// super-block whose largest sub-block scale is 0 is all zero bytes; else `d = max/31` in
/// f16, per group of eight a u16 of its 9-bit grid index and 7-bit sign index, and the 4-bit
/// scale codes two a byte.
///
/// `weights`: one importance weight per column. ggml asserts them; `None` here means all
/// 1.0 (for synthetic models without an imatrix; `locus quantize` refuses the type without
/// one, as llama-quantize does).
///
/// # Panics
/// If the row is not whole super-blocks of 256, or the weights are not one per value.
pub fn quantize_iq2_xs(x: &[f32], weights: Option<&[f32]>) -> Vec<u8> {
    let pack = |subs: &[Option<Iq2Sub>], codes: &[u8], rest: &mut [u8]| {
        let (qs, scales) = rest.split_at_mut(QK_K / 4);
        let groups = subs.iter().flat_map(|s| {
            (0..QK / 2 / IQ2_GROUP).map(move |k| s.as_ref().map(|s| (s.entries[k], s.signs[k])))
        });
        for (g, out) in groups.zip(qs.chunks_exact_mut(size_of::<u16>())) {
            let (e, s) = g.unwrap_or((0, 0));
            out.copy_from_slice(&(e | u16::from(s) << IQ2XS_SIGN_SHIFT).to_le_bytes());
        }
        pack_nibbles(codes, scales);
    };
    quantize_zeroed(
        &IQ2XS,
        "quantize_iq2_xs",
        x,
        weights,
        IQ2XS_BLOCK_BYTES,
        pack,
    )
}

/// ggml's `quantize_iq2_s` of one row (`quantize_row_iq2_s_impl`): as IQ2_XS with the
/// 1024-entry grid, the nearest ring only, eight sign bits, `sigma2 = 2·Σx²/256`, and without
/// weights `w = sigma2/4 + x²`. Each quantized group writes its index's low byte, sign byte
/// and top two bits; a super-block whose largest sub-block scale is 0 keeps those with
/// `d = 0` and zero scales; else `d = max/31·0.9875` in f16 and the scale codes two a byte.
///
/// `weights`: one importance weight per column, or `None` (ggml's NULL).
///
/// # Panics
/// If the row is not whole super-blocks of 256, or the weights are not one per value.
pub fn quantize_iq2_s(x: &[f32], weights: Option<&[f32]>) -> Vec<u8> {
    quantize_rows(
        "quantize_iq2_s",
        x,
        weights,
        NoWeights::Ggml,
        IQ2S_BLOCK_BYTES,
        |xs, qw, yb| {
            let (subs, max_scale) = iq2_sub_blocks(&IQ2S, xs, qw);
            let groups_per_sub = QK / 2 / IQ2_GROUP;
            for (ib, sub) in subs.iter().enumerate() {
                let Some(sub) = sub else { continue };
                for k in 0..groups_per_sub {
                    let i8 = groups_per_sub * ib + k;
                    let [low, high] = sub.entries[k].to_le_bytes();
                    yb[D_BYTES + i8] = low;
                    yb[IQ2S_SIGNS_AT + i8] = sub.signs[k];
                    let per_byte = 8 / IQ2S_HIGH_BITS;
                    yb[IQ2S_QH_AT + i8 / per_byte] |= high << (IQ2S_HIGH_BITS * (i8 % per_byte));
                }
            }
            if max_scale == 0.0 {
                return;
            }
            let (d, codes) = iq2_scale_codes(&subs, max_scale);
            yb[..D_BYTES].copy_from_slice(&fp16(d * IQ2S_D_FUDGE));
            pack_nibbles(&codes, &mut yb[IQ2S_SCALES_AT..]);
        },
    )
}
