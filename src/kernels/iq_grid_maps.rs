//! What ggml's IQ2 and IQ3 quantizers share (`ggml-quants.c`). The lookup their inits build
//! (`iq3xs_init_impl`, `iq2xs_init_impl`): every code of a group's levels either names its grid
//! entry or, off the grid, lists the grid entries nearest to it for the quantizer to choose
//! from. ggml builds the lists once per grid, for every code; here only for the codes a
//! quantizer can produce (each level below the grid's level count), the same lists since a
//! code's list depends on that code alone. And the work of their `quantize_row_*_impl` on a
//! sub-block: folding the signs out ([`fold_signs`]) and fitting the grid entries and the
//! scale by trying scales ([`GridMaps::fit`]); a level `l` stands for the odd multiple `2l + 1`
//! of the scale.

use super::dequantize::nearest_int;

/// Values sharing one byte of sign bits.
pub(super) const SIGN_GROUP: usize = 8;
/// Most grid entries in one sub-block (IQ3's sub-blocks of 32 hold eight of four values).
const MAX_GROUPS: usize = 8;

/// The odd multiple `2l + 1` a level stands for.
#[inline]
pub(super) fn odd(l: u8) -> f32 {
    f32::from(2 * l + 1)
}

/// The level whose odd multiple is nearest `v`: `clamp(nearest_int((v − 1)/2), 0, max)` (ggml
/// multiplies by 0.5; the same float). For grid levels and for the 4-bit scale codes.
#[inline]
pub(super) fn odd_level(v: f32, max: i32) -> u8 {
    nearest_int(0.5 * (v - 1.0)).clamp(0, max) as u8
}

/// How a group of eight stores its signs.
#[derive(Clone, Copy, PartialEq)]
pub(super) enum SignRule {
    /// Seven bits, the eighth the parity (IQ3_XXS, IQ2_XXS, IQ2_XS): an odd count of
    /// negatives is made even.
    EvenNegatives,
    /// All eight bits (IQ3_S, IQ2_S).
    All,
}

impl SignRule {
    /// The mask of one group's stored sign bits.
    pub(super) fn mask(self) -> u8 {
        match self {
            SignRule::EvenNegatives => 0x7f,
            SignRule::All => u8::MAX,
        }
    }
}

/// Folds a sub-block's signs out: `xval = |x|` (`x` itself for ±0) and, per eight values, the
/// bits of the negative ones into `signs`. With [`SignRule::EvenNegatives`] an odd count of
/// negatives cannot be stored, so the value with the smallest `w·x·x` keeps its sign
/// ([`keep_smallest_sign`]).
pub(super) fn fold_signs(
    xb: &[f32],
    weight: &[f32],
    xval: &mut [f32],
    signs: &mut [u8],
    rule: SignRule,
) {
    for (k, s_out) in signs.iter_mut().enumerate() {
        let at = SIGN_GROUP * k;
        let x8 = &xb[at..at + SIGN_GROUP];
        let xv = &mut xval[at..at + SIGN_GROUP];
        let mut s = 0u8;
        for (i, (v, &x)) in xv.iter_mut().zip(x8).enumerate() {
            if x >= 0.0 {
                *v = x;
            } else {
                *v = -x;
                s |= 1 << i;
            }
        }
        if rule == SignRule::EvenNegatives && s.count_ones() % 2 == 1 {
            s ^= keep_smallest_sign(x8, &weight[at..at + SIGN_GROUP], xv);
        }
        *s_out = s;
    }
}

/// Of eight values the one with the smallest `w·x·x` (the first on ties) keeps its sign: its
/// folded value is negated; returns its sign bit, to flip.
fn keep_smallest_sign(x8: &[f32], w8: &[f32], xv: &mut [f32]) -> u8 {
    let mut imin = 0;
    let mut min = w8[0] * x8[0] * x8[0];
    for i in 1..SIGN_GROUP {
        let ax = w8[i] * x8[i] * x8[i];
        if ax < min {
            min = ax;
            imin = i;
        }
    }
    xv[imin] = -xv[imin];
    1 << imin
}

/// The largest of a sub-block's folded values as ggml's `MAX` takes it (the later one unless
/// the earlier is larger).
#[inline]
pub(super) fn ggml_max(x: &[f32]) -> f32 {
    x[1..].iter().fold(x[0], |m, &v| if m > v { m } else { v })
}

/// Which groups the second pick, at the best try's fitted scale, takes again.
#[derive(Clone, Copy, PartialEq)]
pub(super) enum Repick {
    /// Those the best try took from a neighbour list (IQ3_XXS, IQ2_XS, IQ2_S).
    OffGrid,
    /// All, when the best try took any from a neighbour list or no try was kept (IQ3_S: ggml
    /// starts its on-grid flags false and has the test that would skip on-grid groups
    /// commented out).
    AllIfAnyOff,
    /// All, always (IQ2_XXS).
    Always,
}

/// The scale tries of one type: `id = (max_odd + step·is)/base` for `is` in `−ntry..=ntry`.
pub(super) struct ScaleTries {
    pub(super) max_odd: f32,
    pub(super) step: f32,
    pub(super) ntry: i32,
    pub(super) repick: Repick,
}

/// A sub-block's folded values, their weights and the neighbour search's weights
/// (`sqrt(weight)`), one group of `N` after another.
pub(super) struct Folded<'a> {
    pub(super) xval: &'a [f32],
    pub(super) weight: &'a [f32],
    pub(super) waux: &'a [f32],
}

/// Where a code of levels lies on a grid.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Slot {
    /// On the grid: that entry.
    Grid(u16),
    /// Off the grid: its neighbour list, `GridMaps::neighbours[start..start + len]` (empty for
    /// a code with a level no quantizer produces).
    Off { start: usize, len: usize },
}

/// One grid's entries as levels, and for each code of `N` levels its [`Slot`].
pub(super) struct GridMaps<const N: usize> {
    /// Each entry's levels, in entry order.
    pub(super) levels: Vec<[u8; N]>,
    /// Bits of one level in a code: a code is `Σ lᵢ << (bits·i)`.
    pub(super) level_bits: usize,
    /// Levels a value takes (all codes of levels below it have slots).
    pub(super) level_count: u8,
    /// Every code's slot, indexed by the code (ggml's `kmap_q3xs`, `kmap_q2xs`).
    pub(super) slots: Vec<Slot>,
    /// The neighbour lists of the off-grid codes, one after another (ggml's `kneighbors_*`
    /// without the counts, which the slots hold).
    pub(super) neighbours: Vec<u16>,
}

impl<const N: usize> GridMaps<N> {
    /// The maps of a grid whose entries have `levels` (each below `level_count`, stored in
    /// `level_bits` bits of a code); an off-grid code lists the entries at its `rings` smallest
    /// squared distances (ggml's `nwant`), nearest first, by entry on ties.
    pub(super) fn new(
        levels: Vec<[u8; N]>,
        level_bits: usize,
        level_count: u8,
        rings: usize,
    ) -> Self {
        let mut slots = vec![Slot::Off { start: 0, len: 0 }; 1 << (level_bits * N)];
        let mut maps = GridMaps {
            levels,
            level_bits,
            level_count,
            slots: Vec::new(),
            neighbours: Vec::new(),
        };
        let mut on_grid = vec![false; slots.len()];
        for (j, l) in maps.levels.iter().enumerate() {
            let u = maps.code(l);
            slots[u] = Slot::Grid(j as u16);
            on_grid[u] = true;
        }
        let mut point = [0u8; N];
        // Every point with levels below `level_count`, as an odometer over its levels.
        loop {
            let u = maps.code(&point);
            if !on_grid[u] {
                let start = maps.neighbours.len();
                let list = maps.nearest_entries(&point, rings);
                maps.neighbours.extend(list);
                slots[u] = Slot::Off {
                    start,
                    len: maps.neighbours.len() - start,
                };
            }
            let Some(i) = point.iter().position(|&l| l + 1 < level_count) else {
                break;
            };
            point[..i].fill(0);
            point[i] += 1;
        }
        maps.slots = slots;
        maps
    }

    /// The code of `N` levels, level `i` in bits `bits·i..bits·(i + 1)`.
    #[inline]
    pub(super) fn code(&self, levels: &[u8; N]) -> usize {
        let mut u = 0;
        for (i, &l) in levels.iter().enumerate() {
            u |= usize::from(l) << (self.level_bits * i);
        }
        u
    }

    /// The grid entry of `levels`' code, or its neighbour list.
    #[inline]
    pub(super) fn lookup(&self, levels: &[u8; N]) -> Result<u16, &[u16]> {
        match self.slots[self.code(levels)] {
            Slot::Grid(j) => Ok(j),
            Slot::Off { start, len } => Err(&self.neighbours[start..start + len]),
        }
    }

    /// ggml's `iq2_find_best_neighbour` / `iq3_find_best_neighbour`: the neighbour in `list`
    /// with the smallest `Σ w·(scale·(2l + 1) − x)²` (products left to right; a strictly
    /// smaller one replaces, so the first on ties). Where no error is below `f32::MAX`
    /// (overflow) ggml aborts; here the list's first, nearest entry is kept.
    fn best_neighbour(&self, list: &[u16], xval: &[f32], w: &[f32], scale: f32) -> u16 {
        let mut best_d2 = f32::MAX;
        let mut best = list.first().copied().unwrap_or(0);
        for &j in list {
            let mut d2 = 0f32;
            for ((&l, &x), &w) in self.levels[usize::from(j)].iter().zip(xval).zip(w) {
                let diff = scale * odd(l) - x;
                d2 += w * diff * diff;
            }
            if d2 < best_d2 {
                best_d2 = d2;
                best = j;
            }
        }
        best
    }

    /// The entry for `N` folded values at inverse scale `id`: the entry of their levels' code
    /// if it is on the grid (and `true`), else its [`Self::best_neighbour`] at `scale` (and
    /// `false`).
    fn entry(&self, xval: &[f32], w: &[f32], id: f32, scale: f32) -> (u16, bool) {
        let mut levels = [0u8; N];
        for (l, &x) in levels.iter_mut().zip(xval) {
            *l = odd_level(id * x, i32::from(self.level_count) - 1);
        }
        match self.lookup(&levels) {
            Ok(j) => (j, true),
            Err(list) => (self.best_neighbour(list, xval, w, scale), false),
        }
    }

    /// `Σ w·x·q` and `Σ w·q·q` over a sub-block's folded values, `q` the odd multiples of
    /// `entries`' levels.
    pub(super) fn sums(&self, entries: &[u16], xval: &[f32], weight: &[f32]) -> (f32, f32) {
        let (mut sumqx, mut sumq2) = (0f32, 0f32);
        let levels = entries.iter().flat_map(|&j| self.levels[usize::from(j)]);
        for ((l, &x), &w) in levels.zip(xval).zip(weight) {
            let q = odd(l);
            sumqx += w * x * q;
            sumq2 += w * q * q;
        }
        (sumqx, sumq2)
    }

    /// The entries of a sub-block (one per `N` values of `f`, into `entries`) and its scale,
    /// as ggml's IQ2 and IQ3 `quantize_row_*_impl` fit them: of the tries
    /// `id = (max_odd + step·is)/base` the one with the largest `(Σwxq)²/Σwq²` (strictly)
    /// gives the entries and the scale `Σwxq/Σwq²` (else `first` and entries all 0). The
    /// groups `tries.repick` names are then picked again at `1/scale` (if it is positive) and
    /// the scale refitted.
    pub(super) fn fit(
        &self,
        f: &Folded<'_>,
        base: f32,
        first: f32,
        tries: &ScaleTries,
        entries: &mut [u16],
    ) -> f32 {
        let groups = entries.len();
        let group = |k: usize| (&f.xval[N * k..N * (k + 1)], &f.waux[N * k..N * (k + 1)]);
        let mut best = 0f32;
        let mut scale = first;
        entries.fill(0);
        let mut on_grid = [tries.repick != Repick::AllIfAnyOff; MAX_GROUPS];
        for is in -tries.ntry..=tries.ntry {
            let id = (tries.max_odd + is as f32 * tries.step) / base;
            let this_scale = 1.0 / id;
            let mut try_entries = [0u16; MAX_GROUPS];
            let mut try_on_grid = [true; MAX_GROUPS];
            for k in 0..groups {
                let (xv, w) = group(k);
                (try_entries[k], try_on_grid[k]) = self.entry(xv, w, id, this_scale);
            }
            let (sumqx, sumq2) = self.sums(&try_entries[..groups], f.xval, f.weight);
            if sumq2 > 0.0 && sumqx * sumqx > best * sumq2 {
                scale = sumqx / sumq2;
                best = scale * sumqx;
                entries.copy_from_slice(&try_entries[..groups]);
                on_grid = try_on_grid;
            }
        }
        let repick = tries.repick == Repick::Always || on_grid[..groups].contains(&false);
        if repick && scale > 0.0 {
            let id = 1.0 / scale;
            for (k, e) in entries.iter_mut().enumerate() {
                if tries.repick != Repick::OffGrid || !on_grid[k] {
                    let (xv, w) = group(k);
                    *e = self.entry(xv, w, id, scale).0;
                }
            }
            let (sumqx, sumq2) = self.sums(entries, f.xval, f.weight);
            if sumq2 > 0.0 {
                scale = sumqx / sumq2;
            }
        }
        scale
    }

    /// Squared level distance from entry `j` to `point`.
    fn distance(&self, j: usize, point: &[u8; N]) -> i32 {
        self.levels[j]
            .iter()
            .zip(point)
            .map(|(&a, &b)| (i32::from(a) - i32::from(b)).pow(2))
            .sum()
    }

    /// The entries at the `rings` smallest squared distances from `point`, by distance then
    /// entry index (ggml sorts `(d², index)` pairs and stops at the `rings + 1`-th distinct
    /// distance). ggml measures in odd multiples `2l + 1`, four times the squared level
    /// distance used here: the same order.
    fn nearest_entries(&self, point: &[u8; N], rings: usize) -> Vec<u16> {
        let d2: Vec<i32> = (0..self.levels.len())
            .map(|j| self.distance(j, point))
            .collect();
        let top = d2.iter().copied().max().unwrap_or(0);
        let mut present = vec![false; top as usize + 1];
        for &d in &d2 {
            present[d as usize] = true;
        }
        let far = present
            .iter()
            .enumerate()
            .filter(|&(_, &p)| p)
            .nth(rings - 1)
            .map_or(top, |(d, _)| d as i32);
        let mut near: Vec<(i32, u16)> = d2
            .iter()
            .enumerate()
            .filter(|&(_, &d)| d <= far)
            .map(|(j, &d)| (d, j as u16))
            .collect();
        near.sort_unstable();
        near.into_iter().map(|(_, j)| j).collect()
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// Every code a quantizer can produce (levels below `level_count`) that is off the grid
    /// lists exactly the entries at its `rings` smallest squared distances, nearest first and
    /// by index on ties (checked by sorting every entry); every code on it maps to its entry.
    pub(in crate::kernels) fn check_nearest_rings<const N: usize>(
        maps: &GridMaps<N>,
        level_count: u8,
        rings: usize,
    ) {
        let mut off = 0;
        let mut valid = 0;
        for (u, slot) in maps.slots.iter().enumerate() {
            let point: [u8; N] = std::array::from_fn(|i| {
                ((u >> (maps.level_bits * i)) & ((1 << maps.level_bits) - 1)) as u8
            });
            if point.iter().any(|&l| l >= level_count) {
                assert_eq!(*slot, Slot::Off { start: 0, len: 0 }, "code {u}");
                continue;
            }
            valid += 1;
            match *slot {
                Slot::Grid(j) => assert_eq!(maps.code(&maps.levels[usize::from(j)]), u),
                Slot::Off { start, len } => {
                    off += 1;
                    let mut all: Vec<(i32, u16)> = (0..maps.levels.len())
                        .map(|j| (maps.distance(j, &point), j as u16))
                        .collect();
                    all.sort_unstable();
                    let mut rings_seen: Vec<i32> = all.iter().map(|p| p.0).collect();
                    rings_seen.dedup();
                    let far = rings_seen[(rings - 1).min(rings_seen.len() - 1)];
                    let want: Vec<u16> =
                        all.iter().take_while(|p| p.0 <= far).map(|p| p.1).collect();
                    assert_eq!(maps.neighbours[start..start + len], want, "code {u}");
                }
            }
        }
        assert_eq!(off, valid - maps.levels.len());
    }
}
