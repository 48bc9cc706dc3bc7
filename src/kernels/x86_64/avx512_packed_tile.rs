//! The AVX-512 prompt kernels of packed copies (`kernels::pack`): sixteen rows of Q4_K, Q5_K,
//! Q6_K or IQ4_XS against many tokens at once, in the orders llama.cpp computes prompt batches
//! in — its tiled K-quant matmul (`oracle_tiled.rs`; Q5_K, Q6_K, IQ4_XS and unrepacked Q4_K) and the
//! repacked Q4_K gemm (`oracle_repacked::dot_q4_k_q8_k_repacked_gemm`). Groups go two at a time where
//! a call has two, so each activation broadcast feeds both groups' `vpdpbusd`. Q3_K (tiled
//! order) runs the same passes from sixteen rows in the file's layout ([`q3_k_rows`], for
//! `avx512_panel.rs`).
//!
//! Both orders form exact integers per super-block before any float: per sub-block s the
//! biased dot `sc_s·(Σ c·y − BIAS·bsum_s)` and the min term `m_s·bsum_s`. So each packed step
//! (sixteen rows' super-block) is unpacked once into unsigned codes with the rows in the lanes
//! ([`Unpacked`]: four consecutive elements of every row per vector) and used for every token:
//! per four-element group one `vpdpbusd` against the token's four activations broadcast, so
//! nothing is reduced across lanes; the bias and min terms come from the activation sums by
//! `vpdpwssd` of scale (min) pairs. The
//! tiled order then sums the sub-blocks and runs `t = s1·d; t = fma(−dmin, s2, t); acc =
//! fma(t, y.d, acc)` per row; the repacked gemm sums them per pair and runs its two chains
//! (`acc = fma(isum, d·d_y, acc)`, `acc_min = fma(imin, dmin·d_y, acc_min)`) per pair.
//!
//! The `#[target_feature]` functions are private but for [`q3_k_rows`], which only
//! `avx512_panel.rs`'s AVX-512 tiles call; the table hands out the safe wrappers only after AVX2,
//! FMA, F16C and AVX-512 F/BW/VL/VNNI were detected.

use std::arch::x86_64::*;

use super::avx512_packed::{
    bcast4, gemm_step, pair_i16, scales_mins, store_chains, tiled_step, word,
};
use super::kquant_rows::PanelRow;
use super::packed_kernels::{
    bsum_pairs, packed_tile, prefetch_steps, token_passes, Place, GROUP, K_GROUPS as GROUPS,
    MAX_SUBS, MAX_TOKENS, Q6_BIAS, SUB, SUBS,
};
use crate::kernels::blocks::{BlockQ3K, BlockQ8K, KVALUES_IQ4NL};
use crate::kernels::entries::Variant;
use crate::kernels::pack::{K_DMIN_AT, K_QS_AT, K_SCALES_AT, PACK_ROWS, Q6_K_D_AT};
use crate::kernels::{ActRow, Layout};

/// Tokens per pass over an unpacked step (their accumulators stay in registers).
const PASS: usize = 8;

/// One packed step (sixteen rows' super-block) unpacked: `codes[g]` holds elements
/// `4g..4g + 4` of row r in lane r, as unsigned bytes; the scales per sub-block as i32 lanes,
/// and paired with the mins; the rows' f32 `d` and `dmin`.
struct Unpacked {
    codes: [__m512i; GROUPS],
    sc: [__m512i; MAX_SUBS],
    /// The scales and mins of sub-blocks 2k and 2k + 1 as the two i16 of each lane, for
    /// `vpdpwssd` against pairs of activation sums.
    sc_pairs: [__m512i; MAX_SUBS / 2],
    mn_pairs: [__m512i; MAX_SUBS / 2],
    d: __m512,
    dmin: __m512,
}

impl Unpacked {
    /// All zero, to be filled step by step (the unpackers write into it: no copies).
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
    fn zeroed() -> Unpacked {
        let z = _mm512_setzero_si512();
        Unpacked {
            codes: [z; GROUPS],
            sc: [z; MAX_SUBS],
            sc_pairs: [z; MAX_SUBS / 2],
            mn_pairs: [z; MAX_SUBS / 2],
            d: _mm512_setzero_ps(),
            dmin: _mm512_setzero_ps(),
        }
    }

    /// A step's scales, mins and f32 scales, the scale and min pairs formed from them.
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
    #[inline]
    fn set(&mut self, sc: [__m512i; MAX_SUBS], mn: [__m512i; MAX_SUBS], d: __m512, dmin: __m512) {
        let pair = |v: &[__m512i; MAX_SUBS], k: usize| pair_i16(v[2 * k], v[2 * k + 1]);
        self.sc_pairs = std::array::from_fn(|k| pair(&sc, k));
        self.mn_pairs = std::array::from_fn(|k| pair(&mn, k));
        self.sc = sc;
        self.d = d;
        self.dmin = dmin;
    }
}

/// What a packed type's prompt kernel needs to know: its layout (which `unpack` reads; unused,
/// `Rows`, where the caller fills the steps itself, as [`q3_k_rows`] does), its sub-blocks,
/// its code bias and whether it has mins.
#[derive(Clone, Copy)]
struct Shape {
    layout: Layout,
    subs: usize,
    bias: i32,
    mins: bool,
}

/// IQ4_XS's codes are taken as `KVALUES_IQ4NL[q] + 128` (Q6_K's are stored as `q + 32`).
const XS_BIAS: i32 = 128;

/// The shape of a packed layout's type.
fn shape(layout: Layout) -> Option<Shape> {
    let s = |subs, bias, mins| Shape {
        layout,
        subs,
        bias,
        mins,
    };
    Some(match layout {
        Layout::Q4Kx16 | Layout::Q5Kx16 => s(SUBS, 0, true),
        Layout::Q6Kx16 => s(MAX_SUBS, Q6_BIAS, false),
        Layout::Iq4XsX16 => s(SUBS, XS_BIAS, false),
        _ => return None,
    })
}

/// Step `step` of `shape`'s layout, unpacked into `u`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn unpack(shape: Shape, step: &[u8], u: &mut Unpacked) {
    match shape.layout {
        Layout::Q4Kx16 => unpack_q4_k(step, u),
        Layout::Q5Kx16 => unpack_q5_k(step, u),
        Layout::Q6Kx16 => unpack_q6_k(step, u),
        Layout::Iq4XsX16 => unpack_iq4_xs(step, u),
        l => unreachable!("no prompt kernel for {}", l.name()),
    }
}

packed_tile!(
    /// The tile of packed groups of `layout` (`packed_kernels::run_tile`), groups two at a time where a call
    /// has two: each activation broadcast then feeds two `vpdpbusd`, which the broadcasts'
    /// loads otherwise limit.
    pairs: true,
    |shape, gemm, g: &[&[u8]], ys: &[&[BlockQ8K]], out: &mut [f32], place| match *g {
        // SAFETY: only reachable through the table built after every feature above was
        // detected.
        [a] => unsafe { tile_g::<1>(shape, gemm, [a], ys, out, place) },
        // SAFETY: as above.
        [a, b] => unsafe { tile_g::<2>(shape, gemm, [a, b], ys, out, place) },
        _ => unreachable!("one or two groups"),
    }
);

/// [`tile_packed`] of `G` packed groups (one or two) at `place` in `out`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn tile_g<const G: usize>(
    shape: Shape,
    gemm: bool,
    groups: [&[u8]; G],
    ys: &[&[BlockQ8K]],
    out: &mut [f32],
    place: Place,
) {
    let step_bytes = groups[0].len() / ys[0].len();
    let fill = |j: usize, i: usize, u: &mut Unpacked| {
        prefetch_steps(groups[j], i, step_bytes);
        unpack(shape, &groups[j][i * step_bytes..(i + 1) * step_bytes], u);
    };
    // One pass kind per instance: the choice is made once per call, not per step and pass.
    match (shape.subs, gemm) {
        (MAX_SUBS, _) => tile_steps::<MAX_SUBS, false, G>(shape, fill, ys, out, place),
        (SUBS, false) => tile_steps::<SUBS, false, G>(shape, fill, ys, out, place),
        (SUBS, true) => tile_steps::<SUBS, true, G>(shape, fill, ys, out, place),
        _ => unreachable!("sub-blocks of 16 or 32 elements"),
    }
}

/// `G` groups of sixteen rows (`fill(j, i, u)` unpacks step i of group j into `u`) against
/// every token, at `place` in `out`: per step each group is unpacked once, then each token's
/// activation broadcast feeds all `G` groups' `vpdpbusd`. (Two groups read 6–13% faster than
/// one at a time for Q5_K, Q6_K and IQ4_XS prompts, and 2–8% for the IQ2, IQ3 and IQ1 panels
/// when they ran these passes: 64 tokens, `iq_tile_throughput` in `kernels_k`.)
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn tile_steps<const S: usize, const GEMM: bool, const G: usize>(
    shape: Shape,
    fill: impl Fn(usize, usize, &mut Unpacked),
    ys: &[&[BlockQ8K]],
    out: &mut [f32],
    place: Place,
) {
    let n = ys[0].len();
    // Per token the chains: the scaled sums and, for the gemm, the min terms.
    let mut acc = [[[_mm512_setzero_ps(); 2]; G]; MAX_TOKENS];
    let mut u: [Unpacked; G] = std::array::from_fn(|_| Unpacked::zeroed());
    for i in 0..n {
        for (j, u) in u.iter_mut().enumerate() {
            fill(j, i, u);
        }
        token_passes::<PASS>(ys, i, |blocks, k, t0| {
            let acc = &mut acc[t0..t0 + PASS.min(MAX_TOKENS - t0)];
            pass::<S, GEMM, G>(&u, shape, blocks, k, acc)
        });
    }
    for t in 0..ys.len() {
        let o = &mut out[t * place.stride + place.at..][..G * PACK_ROWS];
        for (j, o) in o.chunks_exact_mut(PACK_ROWS).enumerate() {
            store_chains(&acc[t][j], GEMM, o);
        }
    }
}

/// Sixteen Q3_K rows in the file's layout (`w[r]`: row r's blocks) against every token, in
/// the tiled matmul's order: `out[t][r]` bit for bit as `oracle_tiled`'s Q3_K dot of row r and
/// token t. Each super-block of the sixteen rows is unpacked (codes `low2 | hbit << 2`, scales
/// signed, bias 4) and transposed once, then runs the packed types' passes ([`file_rows`]).
///
/// With no tokens (or rows of no blocks) it writes nothing.
///
/// # Panics
/// If a row or a token does not have `ys[0].len()` blocks (with no tokens: if a row has any),
/// or there are more than 64 tokens.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(super) fn q3_k_rows(
    w: &[&[BlockQ3K]; PACK_ROWS],
    ys: &[&[BlockQ8K]],
    out: &mut [[f32; PACK_ROWS]; MAX_TOKENS],
) {
    use super::kquant_rows::{q3_k_panel_row, Q3_BIAS};
    let rows = FileRows {
        unpack: |a: &BlockQ3K| q3_k_panel_row(a),
        d: |a: &BlockQ3K| a.d,
        d_mul: None,
        bias: i32::from(Q3_BIAS),
    };
    file_rows::<_, MAX_SUBS, 1>([w], ys, out.as_flattened_mut(), rows)
}

/// How a type's super-blocks in the file's layout become a step of sixteen rows: `unpack`
/// gives one row's unsigned codes and `NSUB` scales, `d` its f16 scale (times `d_mul`, where
/// the type scales its `d`), and `bias` is the codes' offset.
struct FileRows<U, D> {
    unpack: U,
    d: D,
    d_mul: Option<f32>,
    bias: i32,
}

/// Super-block `i` of sixteen rows unpacked by `unpack` and transposed into `groups`: run c's
/// dword m of every row is group 8c + m, row r in lane r of `groups[8c + m]`. Returns the rows'
/// scales, scale group s's of row r at `[s][r]` (the first `NSUB` groups).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
pub(super) fn unpack_transposed<B, const NSUB: usize>(
    w: &[&[B]; PACK_ROWS],
    i: usize,
    unpack: &impl Fn(&B) -> PanelRow<NSUB>,
    groups: &mut [__m512i; GROUPS],
) -> [[i32; PACK_ROWS]; MAX_SUBS] {
    use super::avx512_panel::join;
    use super::kquant_rows::{transpose8, RUNS};
    const HALF: usize = PACK_ROWS / 2;
    let mut codes = [[[_mm256_setzero_si256(); HALF]; RUNS]; 2];
    let mut sc = [[0i32; PACK_ROWS]; MAX_SUBS];
    for r in 0..PACK_ROWS {
        let row = unpack(&w[r][i]);
        for (c, code) in row.codes.iter().enumerate() {
            codes[r / HALF][c][r % HALF] = *code;
        }
        for (s, sc) in sc.iter_mut().take(NSUB).enumerate() {
            sc[r] = row.sc[s];
        }
    }
    for (c, run) in groups.chunks_exact_mut(HALF).enumerate() {
        let (lo, hi) = (transpose8(codes[0][c]), transpose8(codes[1][c]));
        for (m, g) in run.iter_mut().enumerate() {
            *g = join(lo[m], hi[m]);
        }
    }
    sc
}

/// `G` groups of sixteen rows in the file's layout against every token (`out[t·16G + 16j +
/// r]`: row r of group j), each super-block of the rows unpacked ([`FileRows`]) and transposed
/// once, then the packed types' passes in the tiled order (no mins), each activation
/// broadcast feeding every group. Panics as [`q3_k_rows`], or if `out` is shorter than `16G`
/// a token.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn file_rows<B, const NSUB: usize, const G: usize>(
    w: [&[&[B]; PACK_ROWS]; G],
    ys: &[&[BlockQ8K]],
    out: &mut [f32],
    rows: FileRows<impl Fn(&B) -> PanelRow<NSUB>, impl Fn(&B) -> [u8; 2]>,
) {
    let n = ys.first().map_or(0, |y| y.len());
    assert!(ys.len() <= MAX_TOKENS, "a tile of {} tokens", ys.len());
    assert!(
        w.iter().all(|g| g.iter().all(|r| r.len() == n)) && ys.iter().all(|t| t.len() == n),
        "row length mismatch"
    );
    assert!(out.len() >= ys.len() * G * PACK_ROWS, "output too short");
    if n == 0 {
        return;
    }
    let shape = Shape {
        layout: Layout::Rows,
        subs: NSUB,
        bias: rows.bias,
        mins: false,
    };
    let fill = |j: usize, i: usize, u: &mut Unpacked| {
        let w = w[j];
        let sc = unpack_transposed(w, i, &rows.unpack, &mut u.codes);
        // SAFETY: each `s` is sixteen i32, 64 bytes; the load is unaligned.
        let sc = sc.map(|s| unsafe { _mm512_loadu_si512(s.as_ptr().cast()) });
        let h: [u16; PACK_ROWS] = std::array::from_fn(|r| u16::from_le_bytes((rows.d)(&w[r][i])));
        // SAFETY: `h` is sixteen u16, 32 bytes; the load is unaligned.
        let mut d = _mm512_cvtph_ps(unsafe { _mm256_loadu_si256(h.as_ptr().cast()) });
        if let Some(f) = rows.d_mul {
            d = _mm512_mul_ps(d, _mm512_set1_ps(f));
        }
        u.set(
            sc,
            [_mm512_setzero_si512(); MAX_SUBS],
            d,
            _mm512_setzero_ps(),
        );
    };
    let place = Place {
        stride: G * PACK_ROWS,
        at: 0,
    };
    tile_steps::<NSUB, false, G>(shape, fill, ys, out, place)
}

/// One unpacked super-block of `G` groups against a pass of tokens (the first `k` of `ys`
/// real, the rest repeats whose results are dropped), into their chains `acc`. Per sub-block
/// s and token the exact `sc_s·Σ_{e∈s} c_e·y_e` (each token's activation broadcast serving
/// every group); the bias `BIAS·Σ_s sc_s·bsum_s` and the mins `Σ_s m_s·bsum_s` by `vpdpwssd`
/// of the scale and min pairs against the token's sum pairs; then the tiled order's step on
/// their sum (`GEMM == false`) or the repacked gemm's per pair of sub-blocks (whose types
/// have no bias).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
fn pass<const S: usize, const GEMM: bool, const G: usize>(
    u: &[Unpacked; G],
    shape: Shape,
    ys: &[&BlockQ8K; PASS],
    k: usize,
    acc: &mut [[[__m512; 2]; G]],
) {
    let per = GROUPS / S;
    let zero = _mm512_setzero_si512();
    let mut s1 = [[zero; G]; PASS];
    let mut pend = [[zero; G]; PASS];
    let dy: [__m512; PASS] = std::array::from_fn(|t| _mm512_set1_ps(ys[t].d));
    let bp: [[i32; MAX_SUBS / 2]; PASS] = std::array::from_fn(|t| bsum_pairs::<S>(ys[t]));
    for s in 0..S {
        let mut a = [[zero; G]; PASS];
        for g in s * per..(s + 1) * per {
            let c: [__m512i; G] = std::array::from_fn(|j| u[j].codes[g]);
            for t in 0..PASS {
                let y = bcast4(ys[t], GROUP * g);
                for j in 0..G {
                    a[t][j] = _mm512_dpbusd_epi32(a[t][j], c[j], y);
                }
            }
        }
        for t in 0..PASS {
            for j in 0..G {
                let u = &u[j];
                let v = _mm512_mullo_epi32(u.sc[s], a[t][j]);
                if !GEMM {
                    s1[t][j] = _mm512_add_epi32(s1[t][j], v);
                } else if s % 2 == 0 {
                    pend[t][j] = v;
                } else if t < k {
                    let isum = _mm512_add_epi32(pend[t][j], v);
                    let mins = (u.mn_pairs[s / 2], bp[t][s / 2]);
                    gemm_step(isum, mins, (u.d, u.dmin, dy[t]), &mut acc[t][j]);
                }
            }
        }
    }
    if GEMM {
        return;
    }
    let kind = (shape.bias, shape.mins);
    for t in 0..k {
        for (j, u) in u.iter().enumerate() {
            let pairs = (&u.sc_pairs[..], &u.mn_pairs[..], &bp[t][..S / 2]);
            let scales = (u.d, u.dmin, dy[t]);
            tiled_step(s1[t][j], pairs, kind, scales, &mut acc[t][j][0]);
        }
    }
}

/// A packed Q4_K step ([`Layout::Q4Kx16`]) unpacked.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn unpack_q4_k(step: &[u8], u: &mut Unpacked) {
    let (sc8, mn8) = scales_mins(&step[K_SCALES_AT..K_QS_AT]);
    let mut sc = [_mm512_setzero_si512(); MAX_SUBS];
    let mut mn = sc;
    sc[..SUBS].copy_from_slice(&sc8);
    mn[..SUBS].copy_from_slice(&mn8);
    let low = _mm512_set1_epi8(0x0f);
    let qs = &step[K_QS_AT..];
    let codes = &mut u.codes;
    // Vector 8j + o holds nibble bytes 4o.. of pair j: low nibbles elements 64j + 4o.., high
    // nibbles 64j + 32 + 4o.. (groups 16j + o and 16j + 8 + o).
    for j in 0..SUBS / 2 {
        for o in 0..SUB / GROUP {
            let v = word(qs, 8 * j + o);
            codes[16 * j + o] = _mm512_and_si512(v, low);
            codes[16 * j + 8 + o] = _mm512_and_si512(_mm512_srli_epi16::<4>(v), low);
        }
    }
    // SAFETY: the sixteen f16 scales and mins are the 32 bytes at 0 and at K_DMIN_AT.
    let (d, dmin) = unsafe {
        (
            _mm512_cvtph_ps(_mm256_loadu_si256(step.as_ptr().cast())),
            _mm512_cvtph_ps(_mm256_loadu_si256(step[K_DMIN_AT..].as_ptr().cast())),
        )
    };
    u.set(sc, mn, d, dmin);
}

/// A packed Q5_K step ([`Layout::Q5Kx16`]) unpacked.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn unpack_q5_k(step: &[u8], u: &mut Unpacked) {
    use super::avx512_packed::{q5_fifth_bit, q5_scale_min};
    use super::packed_kernels::{Q5_QH_WORD, Q5_QS_WORD, Q5_SC_WORD};
    let sw: [__m512i; 3] = std::array::from_fn(|k| word(step, Q5_SC_WORD + k));
    let mut sc = [_mm512_setzero_si512(); MAX_SUBS];
    let mut mn = sc;
    for j in 0..SUBS {
        (sc[j], mn[j]) = q5_scale_min(&sw, j);
    }
    let low = _mm512_set1_epi8(0x0f);
    let codes = &mut u.codes;
    for b4 in 0..SUB / GROUP {
        let h = word(step, Q5_QH_WORD + b4);
        for j in 0..SUBS / 2 {
            let q = word(step, Q5_QS_WORD + 8 * j + b4);
            let lo = _mm512_or_si512(_mm512_and_si512(q, low), q5_fifth_bit(h, 2 * j));
            let hi = _mm512_and_si512(_mm512_srli_epi16::<4>(q), low);
            codes[16 * j + b4] = lo;
            codes[16 * j + 8 + b4] = _mm512_or_si512(hi, q5_fifth_bit(h, 2 * j + 1));
        }
    }
    let w0 = word(step, 0);
    let d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(w0));
    let dmin = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32::<16>(w0)));
    u.set(sc, mn, d, dmin);
}

/// A packed Q6_K step ([`Layout::Q6Kx16`]) unpacked.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn unpack_q6_k(step: &[u8], u: &mut Unpacked) {
    use super::avx512_packed_k::q6_codes;
    use super::packed_kernels::Q6_SC_WORD;
    let codes = &mut u.codes;
    for j in 0..2 {
        for b4 in 0..SUB / GROUP {
            // Code k of this word triple: elements 128j + 32k + 4·b4 (group 32j + 8k + b4).
            for (k, c) in q6_codes(step, j, b4).into_iter().enumerate() {
                codes[32 * j + 8 * k + b4] = c;
            }
        }
    }
    // Scale s (signed) is byte s mod 4 of word 48 + s / 4.
    let sc = std::array::from_fn(|s| {
        let w = word(step, Q6_SC_WORD + s / GROUP);
        let shift = _mm_cvtsi32_si128((24 - 8 * (s % GROUP)) as i32);
        _mm512_srai_epi32::<24>(_mm512_sll_epi32(w, shift))
    });
    // SAFETY: the sixteen f16 scales are the 32 bytes at Q6_K_D_AT of the step.
    let d = unsafe { _mm512_cvtph_ps(_mm256_loadu_si256(step[Q6_K_D_AT..].as_ptr().cast())) };
    let z = _mm512_setzero_si512();
    u.set(sc, [z; MAX_SUBS], d, _mm512_setzero_ps());
}

/// A packed IQ4_XS step ([`Layout::Iq4XsX16`]) unpacked: codes `KVALUES_IQ4NL[q] + 128`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn unpack_iq4_xs(step: &[u8], u: &mut Unpacked) {
    use super::avx512_packed::xs_scale;
    use super::packed_kernels::{XS_QS_WORD, XS_SUB_WORDS};
    let biased: [u8; 16] = std::array::from_fn(|i| (i32::from(KVALUES_IQ4NL[i]) + 128) as u8);
    // SAFETY: 16 bytes.
    let table = _mm512_broadcast_i32x4(unsafe { _mm_loadu_si128(biased.as_ptr().cast()) });
    let low = _mm512_set1_epi8(0x0f);
    let (w0, w1) = (word(step, 0), word(step, 1));
    let codes = &mut u.codes;
    let mut sc = [_mm512_setzero_si512(); MAX_SUBS];
    for s in 0..SUBS {
        sc[s] = xs_scale(w0, w1, s);
        for q in 0..XS_SUB_WORDS {
            let v = word(step, XS_QS_WORD + XS_SUB_WORDS * s + q);
            // Low nibbles: elements 32s + 4q.. (group 8s + q); high: 32s + 16 + 4q.. (8s + 4 + q).
            codes[8 * s + q] = _mm512_shuffle_epi8(table, _mm512_and_si512(v, low));
            let hi = _mm512_and_si512(_mm512_srli_epi16::<4>(v), low);
            codes[8 * s + XS_SUB_WORDS + q] = _mm512_shuffle_epi8(table, hi);
        }
    }
    let d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(w0));
    let z = _mm512_setzero_si512();
    u.set(sc, [z; MAX_SUBS], d, _mm512_setzero_ps());
}
