//! ggml's quantizers of IQ3_XXS and IQ3_S (`quantize_iq3_xxs`, `quantize_iq3_s` in
//! `ggml-quants.c`, their `_ref`s without an importance matrix), byte for byte: each
//! sub-block of 32 is fitted by trying scales and snapping each group of four values to the
//! nearest grid entry (through a map of every code of four 3-bit levels and, for the codes off
//! the grid, the rings of entries nearest to them), as ggml's `iq3xs_init_impl` sets them up.
//! Checked against ggml with a C harness linking its library (not part of the repository): see
//! the pinned hashes in `quantize_ref.rs`'s tests.

use super::blocks::{
    BlockIq3S, BlockIq3Xxs, IQ3S_SCALES_PER_BYTE, IQ3S_SCALE_BITS, IQ3_GRID_GROUP, IQ3_SCALE_SHIFT,
    IQ_SIGN_BITS, QK, QK_K,
};
use super::iq_grid_maps::{
    fold_signs, ggml_max, odd_level, Folded, GridMaps, Repick, ScaleTries, SignRule, SIGN_GROUP,
};
use super::iq_grids::{IQ3S_GRID, IQ3XXS_GRID};
use super::quantize_ref::{blocks_with_weights, fp16, imatrix_weights, sum_squares};
use std::sync::OnceLock;

/// Levels of one IQ3 value (ggml's `kMaxQ`): level `l` stands for the odd multiple `2l + 1` of
/// its sub-block's scale.
const IQ3_LEVELS: i32 = 8;
/// The largest odd multiple, `2·7 + 1`: the first scale guess is `max/15`.
const IQ3_MAX_ODD: i32 = 2 * IQ3_LEVELS - 1;
/// Bits of one level in a grid code (a code is `Σ lᵢ·8ⁱ` over an entry's four levels).
const IQ3_LEVEL_BITS: usize = 3;
/// Values per grid entry.
const IQ3_GROUP: usize = IQ3_GRID_GROUP;
/// Grid entries per sub-block of 32.
const IQ3_GROUPS: usize = QK / IQ3_GROUP;
/// Step of the scale tries, in odd multiples.
const IQ3_TRY_STEP: f32 = 0.2;
/// Sign bytes per sub-block of 32 (one per two grid entries).
const IQ3_SIGN_BYTES: usize = QK / SIGN_GROUP;
/// Largest 4-bit sub-block scale code `ls`; a sub-block's scale is about `d·(2ls + 1)`.
const IQ3_MAX_SCALE_CODE: i32 = 15;
/// Sub-blocks of 32 per super-block.
const IQ3_SUBS: usize = QK_K / QK;
/// ggml's fudge factor on IQ3_XXS's stored super-block scale ("small improvement").
const IQ3XXS_D_FUDGE: f32 = 1.0125;
/// ggml's fudge factor on IQ3_S's stored super-block scale.
const IQ3S_D_FUDGE: f32 = 1.033;

/// One IQ3 type's quantizer: the grid `iq3xs_init_impl` reads,
/// what its `quantize_row_*_impl` does differently from the other's, and the maps built from
/// the grid on first use.
struct Iq3Type {
    /// The grid: four values an entry, one a byte.
    grid: &'static [u32],
    /// Integer division of a grid byte by this gives its level (IQ3_XXS stores `4 + 8l`, and 62
    /// for level 7; IQ3_S stores `2l + 1`).
    level_step: u8,
    /// An off-grid code's neighbours: the entries at its this many smallest distances (ggml's
    /// `nwant`: 2 for the 256-entry grid, 3 for the 512).
    rings: usize,
    /// Scale tries each side of the first guess: `id = (15 + 0.2·is)/max`, is in −ntry..=ntry,
    /// and which groups are picked again at the fitted scale.
    tries: ScaleTries,
    /// A sub-block whose largest folded value is below this is zero (IQ3_XXS: ggml's
    /// `GROUP_MAX_EPS_IQ3_XXS`; IQ3_S tests `!max`, and its folded values are ≥ 0 or NaN).
    zero_below: f32,
    signs: SignRule,
    maps: OnceLock<GridMaps<IQ3_GROUP>>,
}

/// IQ3_XXS: `iq3xs_init_impl(256)` and `quantize_row_iq3_xxs_impl`.
static IQ3XXS: Iq3Type = Iq3Type {
    grid: &IQ3XXS_GRID,
    level_step: 8,
    rings: 2,
    tries: ScaleTries {
        max_odd: IQ3_MAX_ODD as f32,
        step: IQ3_TRY_STEP,
        ntry: 15,
        repick: Repick::OffGrid,
    },
    zero_below: 1e-8,
    signs: SignRule::EvenNegatives,
    maps: OnceLock::new(),
};

/// IQ3_S: `iq3xs_init_impl(512)` and `quantize_row_iq3_s_impl` with sub-blocks of 32.
static IQ3S: Iq3Type = Iq3Type {
    grid: &IQ3S_GRID,
    level_step: 2,
    rings: 3,
    tries: ScaleTries {
        max_odd: IQ3_MAX_ODD as f32,
        step: IQ3_TRY_STEP,
        ntry: 9,
        repick: Repick::AllIfAnyOff,
    },
    // The smallest positive f32: below it means zero.
    zero_below: f32::from_bits(1),
    signs: SignRule::All,
    maps: OnceLock::new(),
};

impl Iq3Type {
    /// What ggml's `iq3xs_init_impl(grid size)` builds once per process, on first use: the
    /// grid entries' levels (their codes, in entry order, are ggml's `kgrid_256` or
    /// `kgrid_512` list), and for each of the 4096 codes its entry or, off the grid, its
    /// nearest entries to try.
    fn maps(&self) -> &GridMaps<IQ3_GROUP> {
        self.maps.get_or_init(|| {
            let levels = self
                .grid
                .iter()
                .map(|e| e.to_le_bytes().map(|v| v / self.level_step))
                .collect();
            GridMaps::new(levels, IQ3_LEVEL_BITS, IQ3_LEVELS as u8, self.rings)
        })
    }
}

/// One quantized sub-block of 32: its scale, grid entries and sign bytes (one per eight
/// values, masked to what the type stores).
struct Iq3SubBlock {
    scale: f32,
    entries: [u16; IQ3_GROUPS],
    signs: [u8; IQ3_SIGN_BYTES],
}

/// The `quantize_row_*_impl` work of IQ3 type `ty` on one sub-block of 32 with weights `weight`
/// ([`iq3_weights`]; neighbours weighted by `sqrt(w)`); `None` when the largest folded
/// value is below `ty.zero_below` (the sub-block stays all zero). Of the tries
/// `id = (15 + 0.2·is)/max` the one with the largest `(Σwxq)²/Σwq²` (strictly) gives the
/// entries and the scale `Σwxq/Σwq²` (first guess `max/15`, entries all 0; [`GridMaps::fit`]). The groups
/// `ty.tries.repick` names are then picked again at `1/scale` and the scale refitted. A negative
/// scale is negated with every stored sign bit.
fn iq3_sub_block(ty: &Iq3Type, xb: &[f32], weight: &[f32; QK]) -> Option<Iq3SubBlock> {
    let maps = ty.maps();
    let waux = weight.map(f32::sqrt);
    let mut xval = [0f32; QK];
    let mut signs = [0u8; IQ3_SIGN_BYTES];
    fold_signs(xb, weight, &mut xval, &mut signs, ty.signs);
    let max = ggml_max(&xval);
    if max < ty.zero_below {
        return None;
    }
    let folded = Folded {
        xval: &xval,
        weight,
        waux: &waux,
    };
    let mut entries = [0u16; IQ3_GROUPS];
    let first = max / IQ3_MAX_ODD as f32;
    let mut scale = maps.fit(&folded, max, first, &ty.tries, &mut entries);
    let mask = ty.signs.mask();
    if scale < 0.0 {
        scale = -scale;
        signs = signs.map(|s| !s);
    }
    Some(Iq3SubBlock {
        scale,
        entries,
        signs: signs.map(|s| s & mask),
    })
}

/// The weights of a sub-block `xb` of a super-block with `Σx²` `sum_x2`: `x²` without
/// importance weights, else `qw·sqrt(2Σx²/256 + x²)`.
fn iq3_weights(xb: &[f32], qw: Option<&[f32]>, sum_x2: f32) -> [f32; QK] {
    let mut weight = [0f32; QK];
    match qw {
        Some(qw) => imatrix_weights(xb, qw, 2.0 * sum_x2 / QK_K as f32, &mut weight),
        None => {
            for (w, &x) in weight.iter_mut().zip(xb) {
                *w = x * x;
            }
        }
    }
    weight
}

/// Each sub-block of 32 of one super-block by [`iq3_sub_block`] with the [`iq3_weights`] of
/// the super-block's importance weights `qws` (or none; `None` where a sub-block is zero), and
/// the largest scale (ggml's `MAX`, the later one unless the earlier is larger).
fn iq3_sub_blocks(
    ty: &Iq3Type,
    xs: &[f32],
    qws: Option<&[f32]>,
) -> ([Option<Iq3SubBlock>; IQ3_SUBS], f32) {
    let mut max_scale = 0f32;
    let sum_x2 = sum_squares(xs);
    let subs = std::array::from_fn(|ib| {
        let xb = &xs[QK * ib..QK * (ib + 1)];
        let weight = iq3_weights(xb, qws.map(|w| &w[QK * ib..QK * (ib + 1)]), sum_x2);
        let sub = iq3_sub_block(ty, xb, &weight)?;
        max_scale = if max_scale > sub.scale {
            max_scale
        } else {
            sub.scale
        };
        Some(sub)
    });
    (subs, max_scale)
}

/// `d = max_scale/31`, stored as `d·fudge` in f16, and each sub-block's 4-bit
/// `ls = clamp(nearest_int((s·(1/d) − 1)/2), 0, 15)` (a zero sub-block's `s` is 0). The entries
/// were chosen at each sub-block's own scale, not at the stored `d·(2ls + 1)`.
fn iq3_scale_codes(
    subs: &[Option<Iq3SubBlock>],
    max_scale: f32,
    fudge: f32,
) -> ([u8; 2], [u8; IQ3_SUBS]) {
    let d = max_scale / (2 * IQ3_MAX_SCALE_CODE + 1) as f32;
    let id = 1.0 / d;
    let codes = std::array::from_fn(|ib| {
        let s = subs[ib].as_ref().map_or(0.0, |sub| sub.scale);
        odd_level(id * s, IQ3_MAX_SCALE_CODE)
    });
    (fp16(d * fudge), codes)
}

/// ggml's `quantize_iq3_xxs` for one row (`quantize_row_iq3_xxs_impl(256, …)` with the importance
/// weights `qw` or NULL, as `quantize_row_iq3_xxs_ref` without): the sub-blocks by
/// [`iq3_sub_blocks`]; a super-block whose largest sub-block scale is 0 is all zero bytes. Else the
/// scales by [`iq3_scale_codes`] (fudge 1.0125), each sub-block's `ls` in the top bits of the u32
/// of its four 7-bit sign indices.
pub fn quantize_iq3_xxs(x: &[f32], qw: Option<&[f32]>, y: &mut [BlockIq3Xxs]) {
    for (xs, qws, yb) in blocks_with_weights(x, qw, y, QK_K) {
        *yb = BlockIq3Xxs::default();
        let (subs, max_scale) = iq3_sub_blocks(&IQ3XXS, xs, qws);
        if max_scale == 0.0 {
            continue;
        }
        let (d, codes) = iq3_scale_codes(&subs, max_scale, IQ3XXS_D_FUDGE);
        yb.d = d;
        for (ib, (sub, ls)) in subs.iter().zip(codes).enumerate() {
            let mut sas = u32::from(ls) << IQ3_SCALE_SHIFT;
            if let Some(sub) = sub {
                for (q, &e) in yb.qs[IQ3_GROUPS * ib..].iter_mut().zip(&sub.entries) {
                    // IQ3_XXS's grid has 256 entries: an index is one byte.
                    *q = e as u8;
                }
                for (k, &s) in sub.signs.iter().enumerate() {
                    sas |= u32::from(s) << (IQ_SIGN_BITS * k as u32);
                }
            }
            let at = size_of::<u32>() * ib;
            yb.sas[at..at + size_of::<u32>()].copy_from_slice(&sas.to_le_bytes());
        }
    }
}

/// ggml's `quantize_iq3_s` for one row (`quantize_row_iq3_s_impl(32, …)` with the importance
/// weights `qw` or NULL, as `quantize_row_iq3_s_ref` without): the sub-blocks by
/// [`iq3_sub_blocks`], each entry's low byte in `qs` and its ninth bit in `qh`, its sign bytes in
/// `signs`. ggml moves on its `qs` and `signs` cursors only past a sub-block it quantized, so after
/// a zero sub-block the later ones' entries and signs sit one sub-block early (their `qh` bits and
/// scales stay in place); reproduced. A super-block whose largest sub-block scale is 0 keeps what
/// was written with `d = 0` and zero scales; else the scales by [`iq3_scale_codes`] (fudge 1.033),
/// two a byte, the even sub-block's low.
pub fn quantize_iq3_s(x: &[f32], qw: Option<&[f32]>, y: &mut [BlockIq3S]) {
    for (xs, qws, yb) in blocks_with_weights(x, qw, y, QK_K) {
        *yb = BlockIq3S::default();
        let (subs, max_scale) = iq3_sub_blocks(&IQ3S, xs, qws);
        let quantized = subs
            .iter()
            .enumerate()
            .filter_map(|(ib, s)| Some((ib, s.as_ref()?)));
        for (at, (ib, sub)) in quantized.enumerate() {
            for (k, &e) in sub.entries.iter().enumerate() {
                let [low, high] = e.to_le_bytes();
                yb.qs[IQ3_GROUPS * at + k] = low;
                yb.qh[ib] |= high << k;
            }
            yb.signs[IQ3_SIGN_BYTES * at..IQ3_SIGN_BYTES * (at + 1)].copy_from_slice(&sub.signs);
        }
        if max_scale == 0.0 {
            continue;
        }
        let (d, codes) = iq3_scale_codes(&subs, max_scale, IQ3S_D_FUDGE);
        yb.d = d;
        for (b, pair) in yb
            .scales
            .iter_mut()
            .zip(codes.chunks_exact(IQ3S_SCALES_PER_BYTE))
        {
            *b = pair[0] | pair[1] << IQ3S_SCALE_BITS;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::iq_grid_maps::tests::check_nearest_rings;
    use crate::kernels::quantize_ref::tests::quantized;
    use crate::kernels::test_util::SplitMix as Rng;

    /// Each IQ3 grid's entries are level codes in increasing order, so their codes are ggml's
    /// `kgrid_256` and `kgrid_512` lists (all compared once against llama.cpp 0c1e57098's
    /// source; the first eight and the last are pinned here), and entry 0 is code 0, what a
    /// sub-block no scale try bettered keeps. `byte` is how a grid stores a level.
    #[test]
    fn iq3_grid_codes_are_ggmls_lists() {
        let xxs_byte: fn(u8) -> u8 = |l| if l == 7 { 62 } else { 4 + 8 * l };
        let s_byte: fn(u8) -> u8 = |l| 2 * l + 1;
        let cases = [
            (&IQ3XXS, xxs_byte, [0, 2, 4, 9, 11, 15, 16, 18], 3992),
            (&IQ3S, s_byte, [0, 1, 2, 5, 7, 8, 9, 10], 4032),
        ];
        for (ty, byte, first, last) in cases {
            let maps = ty.maps();
            assert_eq!(maps.levels.len(), ty.grid.len());
            for (e, l) in ty.grid.iter().zip(&maps.levels) {
                assert_eq!(u32::from_le_bytes(l.map(byte)), *e, "entry {e:#010x}");
            }
            let codes: Vec<usize> = maps.levels.iter().map(|l| maps.code(l)).collect();
            assert!(codes.windows(2).all(|w| w[0] < w[1]));
            assert_eq!(codes[..8], first);
            assert_eq!(codes.last(), Some(&last));
        }
    }

    /// Every code off a grid lists exactly the entries at its `rings` (2 for IQ3_XXS, 3 for
    /// IQ3_S) smallest squared distances, nearest first and by index on ties; every code on it
    /// maps to its own entry.
    #[test]
    fn iq3_neighbours_are_the_nearest_rings() {
        for ty in [&IQ3XXS, &IQ3S] {
            check_nearest_rings(ty.maps(), IQ3_LEVELS as u8, ty.rings);
        }
    }

    /// ggml advances IQ3_S's `qs` and `signs` past quantized sub-blocks only: with sub-block 2
    /// zero, sub-blocks 3..8 store their entries and signs where 2..7's would be, their `qh`
    /// bits in place (the hashed rows check this against llama.cpp; here the shape).
    #[test]
    fn iq3_s_zero_sub_block_shifts_the_later_entries() {
        let mut g = Rng(7);
        let full: Vec<f32> = (0..QK_K).map(|_| g.bell()).collect();
        let mut holed = full.clone();
        holed[2 * QK..3 * QK].fill(0.0);
        let (a, b) = (
            quantized(quantize_iq3_s, QK_K, &full)[0],
            quantized(quantize_iq3_s, QK_K, &holed)[0],
        );
        let (q, s) = (IQ3_GROUPS, IQ3_SIGN_BYTES);
        assert_eq!(b.qs[..2 * q], a.qs[..2 * q]);
        assert_eq!(b.qs[2 * q..7 * q], a.qs[3 * q..]);
        assert_eq!(b.qs[7 * q..], [0; IQ3_GROUPS]);
        assert_eq!(b.signs[2 * s..7 * s], a.signs[3 * s..]);
        assert_eq!(b.qh[2], 0);
        assert_eq!((&b.qh[..2], &b.qh[3..]), (&a.qh[..2], &a.qh[3..]));
    }
}
