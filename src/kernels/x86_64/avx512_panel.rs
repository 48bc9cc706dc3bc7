//! AVX-512 panels of sixteen rows for the file layout's Q2_K and Q3_K prompts.
//!
//! Q2_K's are the panels of
//! `kquant_kernels.rs` (eight rows in the i32 lanes of a 256-bit vector) widened to 512 bits,
//! rows 0..8 in the low half and 8..16 in the high half, so each token's activation broadcast,
//! `maddubs`, i16 add and `madd` serve sixteen rows. Every lane runs exactly the integers and
//! float chain of its row in the eight-row panel (`panel_rows` there, in the orders of
//! `oracle_repacked.rs` and `oracle_tiled.rs`), so the outputs keep their bits.
//!
//! Q3_K's (tiled order only) run the packed types' `vpdpbusd` passes of `avx512_packed_tile.rs` on
//! its super-blocks unpacked and transposed, and read 22% faster than this panel did (Q3_K_M
//! pp128, one and two threads): its `maddubs` and i16 adds were two instructions per group
//! and token where `vpdpbusd` is one. The IQ2, IQ3 and IQ1 types' run like passes with signed
//! codes and biased activations (`avx512_iq_tile.rs`), two groups of sixteen rows at a time
//! where a call has 32 rows (`Kernels::tile_step_rows` asks the prompt steps for them), so
//! each activation broadcast feeds both groups.
//!
//! The `#[target_feature]` functions are private; the table hands out the tiles only after
//! AVX2, FMA, F16C and AVX-512 F/BW/VL/VNNI were detected.

use std::arch::x86_64::*;

use super::kquant_rows::{q2_k_panel_row, transpose8, ChainKind, PanelRow};
use super::kquant_rows::{RUN, RUNS, SUB16S};
use super::passes::{PANEL_MIN_TOKENS, PANEL_MIN_TOKENS_GEMM};
use crate::kernels::blocks::Block;
use crate::kernels::blocks::{BlockIq1M, BlockIq1S, Iq1Grid};
use crate::kernels::blocks::{
    BlockIq2S, BlockIq2Xs, BlockIq2Xxs, BlockIq3S, BlockIq3Xxs, BlockQ2K, BlockQ3K, BlockQ8K,
    IqGrid, QK_K,
};
use crate::kernels::entries::{self, TileDot, Variant};
use crate::kernels::ActRow;

/// Rows of a panel: the sixteen i32 lanes of a 512-bit vector.
const ROWS: usize = 16;
/// Rows of each 256-bit half.
const HALF: usize = ROWS / 2;
/// Elements of a group: one i32 lane's four bytes.
const GROUP: usize = 4;
/// Elements per `bsums` entry of a Q8_K block.
const BSUM_LEN: usize = 16;
/// Groups of four whose `maddubs` pairs are added in i16 before one `madd`: a whole
/// sixteen-element sub-block of Q2_K's 2-bit codes (as the eight-row panels run them).
const RUN_SUB16: usize = QK_K / SUB16S / GROUP;
const _: () = assert!(super::packed_kernels::i16_run_fits(RUN_SUB16, 2));

/// Most tokens of one panel call: a forward step's whole batch (`MAX_BATCH`), so each row's
/// super-block is unpacked once per step.
const PANEL_TOKENS: usize = 64;

/// A panel's outputs, token-major.
type Out = [[f32; ROWS]; PANEL_TOKENS];
/// A sixteen-row panel kernel: `out[t][r] = dot(w[r], y[t])` for `y.len()` tokens.
type Panel16<B> = fn(&[&[B]; ROWS], &[&[BlockQ8K]], &mut Out);
/// Two sixteen-row groups' outputs, token-major (group j's row r at `16j + r`).
type Out32 = [[f32; PAIR_ROWS]; PANEL_TOKENS];
/// Rows of a pair of panels.
const PAIR_ROWS: usize = 2 * ROWS;
/// A panel kernel of two sixteen-row groups (`w[j]`), which share each activation load:
/// `out[t][16j + r] = dot(w[j][r], y[t])`.
type Panel32<B> = fn([&[&[B]; ROWS]; 2], &[&[BlockQ8K]], &mut Out32);
/// One f16 field of a block.
type Half<B> = fn(&B) -> [u8; 2];

/// The two 256-bit halves as one vector (`lo` in lanes 0..8).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
pub(super) fn join(lo: __m256i, hi: __m256i) -> __m512i {
    _mm512_inserti64x4::<1>(_mm512_castsi256_si512(lo), hi)
}

/// Sixteen i32 as one vector.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn load16(v: &[i32; ROWS]) -> __m512i {
    // SAFETY: v is 16 readable i32s (64 bytes); the load is unaligned.
    unsafe { _mm512_loadu_si512(v.as_ptr().cast()) }
}

/// f16 → f32 of one field of each of the sixteen rows' block `i`, row r in lane r.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn row_scales16<B>(w: &[&[B]; ROWS], i: usize, get: Half<B>) -> __m512 {
    let h: [u16; ROWS] = std::array::from_fn(|r| u16::from_le_bytes(get(&w[r][i])));
    // SAFETY: h is 16 readable u16s (32 bytes); the load is unaligned.
    _mm512_cvtph_ps(unsafe { _mm256_loadu_si256(h.as_ptr().cast()) })
}

/// One part (sub-blocks `p·16/parts ..`) of a token's integers, sixteen rows: the eight-row
/// panels' `i16_part` with every vector twice as wide (same integers per lane).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
#[allow(clippy::too_many_arguments, clippy::needless_range_loop)]
fn i16_part(
    groups: &[[__m512i; HALF]; RUNS],
    b: &BlockQ8K,
    scd: &[__m512i; SUB16S],
    mnp: &[__m512i; SUB16S / 2],
    mins: bool,
    p: usize,
    parts: usize,
) -> (__m512i, __m512i) {
    let sub = QK_K / SUB16S;
    let zero = _mm512_setzero_si512();
    let (mut s1, mut s2) = (zero, zero);
    let (s0, s_end) = (p * SUB16S / parts, (p + 1) * SUB16S / parts);
    // An index loop on purpose: written as `scd.iter().enumerate().take(..).skip(..)` the
    // Q3_K_M prompt ran at half the speed (101 against 203 t/s, pp128 at one thread, when
    // Q3_K took this panel).
    for s in s0..s_end {
        let mut a = zero;
        for g in 0..RUN_SUB16 {
            let e = s * sub + GROUP * g;
            let q = &b.qs[e..e + GROUP];
            let y4 = i32::from_le_bytes([q[0] as u8, q[1] as u8, q[2] as u8, q[3] as u8]);
            let x = groups[e / RUN][(e % RUN) / GROUP];
            a = _mm512_add_epi16(a, _mm512_maddubs_epi16(x, _mm512_set1_epi32(y4)));
        }
        s1 = _mm512_add_epi32(s1, _mm512_madd_epi16(a, scd[s]));
    }
    // Sub-block s's activation sum (one `bsums` entry), paired as i16 with s + 1's.
    let bsum = |s: usize| i32::from(b.bsums[s * sub / BSUM_LEN]);
    for k in s0 / 2..s_end / 2 {
        let pair = (bsum(2 * k) & 0xffff) | (bsum(2 * k + 1) << 16);
        if mins {
            let bp = _mm512_set1_epi32(pair);
            s2 = _mm512_add_epi32(s2, _mm512_madd_epi16(mnp[k], bp));
        }
    }
    (s1, s2)
}

/// The sixteen-row panel of a type with sixteen-element sub-blocks: per super-block the rows'
/// blocks unpacked and transposed once, then per token the integers of [`i16_part`] and the
/// float chain of `kind`, one lane per row, as the eight-row `panel_rows` does them.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
#[allow(clippy::too_many_arguments)]
fn panel_rows<B>(
    w: &[&[B]; ROWS],
    y: &[&[BlockQ8K]],
    out: &mut Out,
    unpack: impl Fn(&B) -> PanelRow<SUB16S>,
    d: Half<B>,
    dmin: Option<Half<B>>,
    parts: usize,
    kind: ChainKind,
) {
    let nt = y.len();
    assert!((1..=PANEL_TOKENS).contains(&nt), "a panel of {nt} tokens");
    let n = y[0].len();
    assert!(
        w.iter().all(|r| r.len() == n) && y.iter().all(|t| t.len() == n),
        "row length mismatch"
    );
    let zero256 = _mm256_setzero_si256();
    let zero_ps = _mm512_setzero_ps();
    let mut acc = [zero_ps; PANEL_TOKENS];
    let mut acc_min = [zero_ps; PANEL_TOKENS];
    let low16 = _mm512_set1_epi32(0xffff);
    let pair16 = |a: __m512i, b: __m512i| {
        _mm512_or_si512(_mm512_and_si512(a, low16), _mm512_slli_epi32::<16>(b))
    };
    for i in 0..n {
        let mut codes = [[[zero256; HALF]; RUNS]; 2];
        let mut sc = [[0i32; ROWS]; SUB16S];
        let mut mn = [[0i32; ROWS]; SUB16S];
        for r in 0..ROWS {
            let row = unpack(&w[r][i]);
            for (c, code) in row.codes.iter().enumerate() {
                codes[r / HALF][c][r % HALF] = *code;
            }
            for s in 0..SUB16S {
                (sc[s][r], mn[s][r]) = (row.sc[s], row.mins[s]);
            }
        }
        // groups[c][m]: lane r holds row r's codes of elements 32c + 4m .. + 4.
        let groups: [[__m512i; HALF]; RUNS] = std::array::from_fn(|c| {
            let (lo, hi) = (transpose8(codes[0][c]), transpose8(codes[1][c]));
            std::array::from_fn(|m| join(lo[m], hi[m]))
        });
        let scv: [__m512i; SUB16S] = std::array::from_fn(|s| load16(&sc[s]));
        let mnv: [__m512i; SUB16S] = std::array::from_fn(|s| load16(&mn[s]));
        let scd: [__m512i; SUB16S] = std::array::from_fn(|s| pair16(scv[s], scv[s]));
        let mnp: [__m512i; SUB16S / 2] =
            std::array::from_fn(|k| pair16(mnv[2 * k], mnv[2 * k + 1]));
        let dv = row_scales16(w, i, d);
        let dminv = dmin.map_or(zero_ps, |m| row_scales16(w, i, m));
        for t in 0..nt {
            let b = &y[t][i];
            let dy = _mm512_set1_ps(b.d);
            let (ds, dms) = (_mm512_mul_ps(dv, dy), _mm512_mul_ps(dminv, dy));
            for p in 0..parts {
                let (s1, s2) = i16_part(&groups, b, &scd, &mnp, dmin.is_some(), p, parts);
                if kind == ChainKind::Tiled {
                    let mut tv = _mm512_mul_ps(_mm512_cvtepi32_ps(s1), dv);
                    if dmin.is_some() {
                        // −dmin by its sign bit (`vxorps` on zmm needs AVX-512 DQ).
                        let neg = _mm512_castsi512_ps(_mm512_xor_si512(
                            _mm512_castps_si512(dminv),
                            _mm512_set1_epi32(i32::MIN),
                        ));
                        tv = _mm512_fmadd_ps(neg, _mm512_cvtepi32_ps(s2), tv);
                    }
                    acc[t] = _mm512_fmadd_ps(tv, dy, acc[t]);
                } else {
                    acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s1), ds, acc[t]);
                    acc_min[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s2), dms, acc_min[t]);
                }
            }
        }
    }
    for t in 0..nt {
        let v = match kind {
            ChainKind::Tiled => acc[t],
            _ => _mm512_sub_ps(acc[t], acc_min[t]),
        };
        // SAFETY: out[t] is 16 writable f32s; the store is unaligned.
        unsafe { _mm512_storeu_ps(out[t].as_mut_ptr(), v) };
    }
}

/// The chain of each panel instance (`kind as usize`).
const REPACKED: usize = 0;
const GEMM: usize = 1;
const TILED: usize = 2;
const fn chain_kind(k: usize) -> ChainKind {
    match k {
        REPACKED => ChainKind::Repacked,
        GEMM => ChainKind::Gemm,
        _ => ChainKind::Tiled,
    }
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn q2_k_impl<const K: usize>(w: &[&[BlockQ2K]; ROWS], y: &[&[BlockQ8K]], out: &mut Out) {
    let parts = if K == GEMM { 2 } else { 1 };
    let (d, dmin): (Half<BlockQ2K>, Half<BlockQ2K>) = (|a| a.d, |a| a.dmin);
    let unpack = |a: &BlockQ2K| q2_k_panel_row(a);
    panel_rows(w, y, out, unpack, d, Some(dmin), parts, chain_kind(K));
}

/// Q2_K's panel in chain `K`: the safe wrapper, sound because it is only reachable through the
/// AVX-512 table, built after every feature the body enables was detected.
fn q2_k_chain<const K: usize>(w: &[&[BlockQ2K]; ROWS], y: &[&[BlockQ8K]], out: &mut Out) {
    // SAFETY: as above.
    unsafe { q2_k_impl::<K>(w, y, out) }
}
/// Q3_K's, through the packed types' passes (safe as [`q2_k_chain`]).
fn q3_k_tiled(w: &[&[BlockQ3K]; ROWS], y: &[&[BlockQ8K]], out: &mut Out) {
    // SAFETY: as above.
    unsafe { super::avx512_packed_tile::q3_k_rows(w, y, out) }
}

/// The IQ2 and IQ3 types', through `avx512_iq_tile`'s passes (`NSUB` scales a super-block;
/// safe as [`q2_k_chain`]).
fn iq_grid_tiled<B: IqGrid, const NSUB: usize>(w: &[&[B]; ROWS], y: &[&[BlockQ8K]], out: &mut Out) {
    use super::avx512_iq_tile::iq_grid_rows;
    // SAFETY: as above.
    unsafe { iq_grid_rows::<B, NSUB, 1>([w], y, out.as_flattened_mut()) }
}
/// [`iq_grid_tiled`] of two groups at once (safe as [`q2_k_chain`]).
fn iq_grid_pair<B: IqGrid, const NSUB: usize>(
    w: [&[&[B]; ROWS]; 2],
    y: &[&[BlockQ8K]],
    out: &mut Out32,
) {
    use super::avx512_iq_tile::iq_grid_rows;
    // SAFETY: as above.
    unsafe { iq_grid_rows::<B, NSUB, 2>(w, y, out.as_flattened_mut()) }
}

/// The IQ1 types', through `avx512_iq_tile`'s passes (safe as [`q2_k_chain`]).
fn iq1_tiled<B: Iq1Grid>(w: &[&[B]; ROWS], y: &[&[BlockQ8K]], out: &mut Out) {
    // SAFETY: as above.
    unsafe { super::avx512_iq_tile::iq1_rows::<B, 1>([w], y, out.as_flattened_mut()) }
}
/// [`iq1_tiled`] of two groups at once (safe as [`q2_k_chain`]).
fn iq1_pair<B: Iq1Grid>(w: [&[&[B]; ROWS]; 2], y: &[&[BlockQ8K]], out: &mut Out32) {
    // SAFETY: as above.
    unsafe { super::avx512_iq_tile::iq1_rows::<B, 2>(w, y, out.as_flattened_mut()) }
}

/// Runs `panel` over every whole group of sixteen rows against every token
/// ([`PANEL_TOKENS`] at a time) and `rest` (the type's eight-row tile) over the rows left;
/// `rest` alone when there are fewer than `min_tokens` tokens. The loop is `passes::panels`'s
/// at sixteen rows; calling a version of that made generic over rows and tokens instead read
/// 3–5% slower for Q2_K and Q3_K_M (pp128, three alternating rounds), so it stays a copy.
#[allow(clippy::too_many_arguments)]
fn tile16<B: Block>(
    rows: &[&[u8]],
    acts: &[ActRow],
    variant: Variant,
    out: &mut [f32],
    panel: Panel16<B>,
    pair: Option<Panel32<B>>,
    min_tokens: usize,
    rest: TileDot,
) -> bool {
    let n_rows = rows.len();
    assert_eq!(out.len(), n_rows * acts.len(), "tile output size mismatch");
    let whole = n_rows / ROWS * ROWS;
    if acts.len() < min_tokens || whole == 0 {
        return rest(rows, acts, variant, out);
    }
    let n = entries::q8_k(&acts[0]).len();
    let group = |r0: usize| -> [&[B]; ROWS] {
        std::array::from_fn(|r| entries::weights::<B>(rows[r0 + r], n))
    };
    let mut o = [[0f32; ROWS]; PANEL_TOKENS];
    let mut o2 = [[0f32; PAIR_ROWS]; PANEL_TOKENS];
    let mut r0 = 0;
    while r0 < whole {
        let two = pair.filter(|_| r0 + PAIR_ROWS <= whole);
        let (w0, w1) = (group(r0), two.map(|_| group(r0 + ROWS)));
        for (t0, chunk) in (0..).step_by(PANEL_TOKENS).zip(acts.chunks(PANEL_TOKENS)) {
            let y: [&[BlockQ8K]; PANEL_TOKENS] =
                std::array::from_fn(|t| entries::q8_k(&chunk[t.min(chunk.len() - 1)]));
            let y = &y[..chunk.len()];
            match (two, &w1) {
                (Some(pair), Some(w1)) => {
                    pair([&w0, w1], y, &mut o2);
                    for (t, ot) in o2[..chunk.len()].iter().enumerate() {
                        out[(t0 + t) * n_rows + r0..][..PAIR_ROWS].copy_from_slice(ot);
                    }
                }
                _ => {
                    panel(&w0, y, &mut o);
                    for (t, ot) in o[..chunk.len()].iter().enumerate() {
                        out[(t0 + t) * n_rows + r0..][..ROWS].copy_from_slice(ot);
                    }
                }
            }
        }
        r0 += if two.is_some() { PAIR_ROWS } else { ROWS };
    }
    if whole < n_rows {
        let left = n_rows - whole;
        let mut tail = vec![0f32; left * acts.len()];
        if !rest(&rows[whole..], acts, variant, &mut tail) {
            return false;
        }
        for (t, tt) in tail.chunks_exact(left).enumerate() {
            out[t * n_rows + whole..][..left].copy_from_slice(tt);
        }
    }
    true
}

/// This tier's tiles of the types with panels: `$name` runs `$panel(variant)` (a sixteen-row
/// panel and the fewest tokens it pays at, or none) over whole groups of sixteen rows
/// ([`tile16`]; two at a time through `$pair`'s panel where the type has one), and `rest`
/// (the type's eight-row tile) for the rows left and where none.
macro_rules! panel_tiles {
    ($($(#[$doc:meta])* $name:ident: $block:ty = $panel:expr $(, pair $pair:expr)?;)*) => {$(
        $(#[$doc])*
        pub(super) fn $name(
            rows: &[&[u8]],
            acts: &[ActRow],
            variant: Variant,
            out: &mut [f32],
            rest: TileDot,
        ) -> bool {
            let panel: Option<(Panel16<$block>, usize)> = ($panel)(variant);
            let pair: Option<Panel32<$block>> = None$(.or(Some($pair as Panel32<$block>)))?;
            match panel {
                Some((panel, min)) => tile16(rows, acts, variant, out, panel, pair, min, rest),
                None => rest(rows, acts, variant, out),
            }
        }
    )*};
}

panel_tiles! {
    /// Q2_K's tile on this tier: the sixteen-row panels in its three chain orders (`vec_dot`'s
    /// by `rest`).
    tile_q2_k: BlockQ2K = |variant| match variant {
        Variant::Repacked => Some((q2_k_chain::<REPACKED> as Panel16<_>, PANEL_MIN_TOKENS)),
        Variant::RepackedGemm => Some((q2_k_chain::<GEMM> as Panel16<_>, PANEL_MIN_TOKENS_GEMM)),
        Variant::Batch => Some((q2_k_chain::<TILED> as Panel16<_>, PANEL_MIN_TOKENS)),
        Variant::Dot => None,
    };
    /// Q3_K's tile on this tier: sixteen rows at a time through
    /// `avx512_packed_tile::q3_k_rows` in the tiled order.
    tile_q3_k: BlockQ3K = |variant| {
        (variant == Variant::Batch).then_some((q3_k_tiled as Panel16<_>, PANEL_MIN_TOKENS))
    };
    /// IQ3_XXS's tile on this tier: sixteen rows at a time through
    /// `avx512_iq_tile::iq_grid_rows` in the tiled order.
    tile_iq3_xxs: BlockIq3Xxs = |variant| {
        let panel = iq_grid_tiled::<BlockIq3Xxs, RUNS> as Panel16<_>;
        (variant == Variant::Batch).then_some((panel, PANEL_MIN_TOKENS))
    }, pair iq_grid_pair::<BlockIq3Xxs, RUNS>;
    /// IQ3_S's, as IQ3_XXS's.
    tile_iq3_s: BlockIq3S = |variant| {
        let panel = iq_grid_tiled::<BlockIq3S, RUNS> as Panel16<_>;
        (variant == Variant::Batch).then_some((panel, PANEL_MIN_TOKENS))
    }, pair iq_grid_pair::<BlockIq3S, RUNS>;
    /// IQ2_XXS's, as IQ3_XXS's.
    tile_iq2_xxs: BlockIq2Xxs = |variant| {
        let panel = iq_grid_tiled::<BlockIq2Xxs, RUNS> as Panel16<_>;
        (variant == Variant::Batch).then_some((panel, PANEL_MIN_TOKENS))
    }, pair iq_grid_pair::<BlockIq2Xxs, RUNS>;
    /// IQ2_XS's, as IQ3_XXS's (a scale every sixteen values).
    tile_iq2_xs: BlockIq2Xs = |variant| {
        let panel = iq_grid_tiled::<BlockIq2Xs, SUB16S> as Panel16<_>;
        (variant == Variant::Batch).then_some((panel, PANEL_MIN_TOKENS))
    }, pair iq_grid_pair::<BlockIq2Xs, SUB16S>;
    /// IQ2_S's, as IQ2_XS's.
    tile_iq2_s: BlockIq2S = |variant| {
        let panel = iq_grid_tiled::<BlockIq2S, SUB16S> as Panel16<_>;
        (variant == Variant::Batch).then_some((panel, PANEL_MIN_TOKENS))
    }, pair iq_grid_pair::<BlockIq2S, SUB16S>;
    /// IQ1_S's: sixteen rows at a time through `avx512_iq_tile::iq1_rows`.
    tile_iq1_s: BlockIq1S = |variant| {
        let panel = iq1_tiled::<BlockIq1S> as Panel16<_>;
        (variant == Variant::Batch).then_some((panel, PANEL_MIN_TOKENS))
    }, pair iq1_pair::<BlockIq1S>;
    /// IQ1_M's, as IQ1_S's.
    tile_iq1_m: BlockIq1M = |variant| {
        let panel = iq1_tiled::<BlockIq1M> as Panel16<_>;
        (variant == Variant::Batch).then_some((panel, PANEL_MIN_TOKENS))
    }, pair iq1_pair::<BlockIq1M>;
}
