//! The AVX2 prompt kernels of packed copies (`kernels::pack`): sixteen rows of Q4_K, Q5_K, Q6_K
//! or IQ4_XS against many tokens at once, in the orders llama.cpp computes prompt batches in —
//! its tiled K-quant matmul (`oracle_tiled.rs`; Q5_K, Q6_K, IQ4_XS and unrepacked Q4_K) and the
//! repacked Q4_K gemm (`oracle_repacked::dot_q4_k_q8_k_repacked_gemm`). The AVX-512 tier's are in
//! `avx512_packed_tile.rs`; the scheme is the same, the step read as two halves of eight rows.
//!
//! Both orders form exact integers per super-block before any float: per sub-block s the
//! biased dot `sc_s·(Σ c·y − BIAS·bsum_s)` and the min term `m_s·bsum_s`. Each packed step is
//! unpacked once into codes with the rows in the lanes ([`Unpacked`]: four consecutive
//! elements of every row of a half per vector) and used for every token. Without VNNI, a
//! four-element group costs a `maddubs` (pairs in i16); the pairs of as many groups of one
//! sub-block as i16 holds add up there (the `RUN_*` constants: eight groups of Q4_K's 4-bit codes,
//! four of Q5_K's 5-bit, two of Q6_K's 6-bit), and one `madd` by the sub-block's scale (in both
//! i16 halves of each lane) widens and scales them at once:
//! ```text
//! a     = Σ_{g in run} maddubs(codes_g, y[4g..4g + 4] broadcast)      |a| ≤ run·2·c_max·128
//! s1   += madd(a, (sc_s, sc_s))                                         exact i32
//! ```
//! IQ4_XS's codes are the signed table values, taken as true products `maddubs(|y|, v·sign y)`
//! (one group per `madd`): the oracle's `Σ (v + 128)·y − 128·bsum` for activations whose
//! `bsums` are the sums of their quants, as every Q8_K quantizer writes them (the file layout's
//! AVX2 kernel does the same). The bias and min terms come from the activation sums by `madd`
//! of scale (min) pairs. The tiled order then runs `t = s1·d; t = fma(−dmin, s2, t); acc =
//! fma(t, y.d, acc)` per row; the repacked gemm runs its two chains per pair of sub-blocks.
//!
//! The `#[target_feature]` functions are private; the table hands out the safe wrapper only
//! after AVX2, FMA and F16C were detected.

use std::arch::x86_64::*;

use super::avx2_packed::{
    bcast4, dup_rows, f16_low, gemm_step, half_f16, high_bytes, pair_i16, q5_fifth_bit,
    q5_scale_min, q6_codes, store_chains, tiled_step, word, xs_scale, BLEND_HIGH_I16, HALF, HALVES,
    Q6_BLOCK_HALVES, Q6_PAIRS,
};
use super::packed_kernels::{
    bsum_pairs, packed_tile, prefetch_steps, scale_min_bytes, token_passes, Place, GROUP,
    K_GROUPS as GROUPS, MAX_SUBS, MAX_TOKENS, Q5_QH_WORD, Q5_QS_WORD, Q5_SC_WORD, Q6_BIAS,
    Q6_SC_WORD, SUB, SUBS, XS_QS_WORD, XS_SUB_WORDS,
};
use super::packed_kernels::{i16_run_fits, RUN_IQ4_XS, RUN_Q4_K, RUN_Q5_K, RUN_Q6_K};
use super::passes::{array_of, iq4nl_table};
use crate::kernels::blocks::BlockQ8K;
use crate::kernels::entries::Variant;
use crate::kernels::pack::{K_DMIN_AT, K_QS_AT, K_SCALES_AT, PACK_ROWS, Q6_K_D_AT};
use crate::kernels::{ActRow, Layout};

/// Tokens per pass over an unpacked step: their i16 sums for both halves, the two halves' codes
/// of a group and a broadcast stay in registers.
const PASS: usize = 2;

/// One packed step (sixteen rows' super-block) unpacked, per half: `codes[h][g]` holds
/// elements `4g..4g + 4` of row `8h + r` in lane r; each sub-block's scale in both i16 halves
/// of each lane (`madd` factors); the scales and mins of sub-blocks 2k and 2k + 1 as the two i16
/// of each lane, for `madd` against pairs of activation sums; the rows' f32 `d` and `dmin`.
struct Unpacked {
    codes: [[__m256i; GROUPS]; HALVES],
    sc: [[__m256i; MAX_SUBS]; HALVES],
    sc_pairs: [[__m256i; MAX_SUBS / 2]; HALVES],
    mn_pairs: [[__m256i; MAX_SUBS / 2]; HALVES],
    d: [__m256; HALVES],
    dmin: [__m256; HALVES],
}

impl Unpacked {
    /// All zero, to be filled step by step (the unpackers write into it: no copies).
    #[target_feature(enable = "avx2,fma,f16c")]
    fn zeroed() -> Unpacked {
        let z = _mm256_setzero_si256();
        Unpacked {
            codes: [[z; GROUPS]; HALVES],
            sc: [[z; MAX_SUBS]; HALVES],
            sc_pairs: [[z; MAX_SUBS / 2]; HALVES],
            mn_pairs: [[z; MAX_SUBS / 2]; HALVES],
            d: [_mm256_setzero_ps(); HALVES],
            dmin: [_mm256_setzero_ps(); HALVES],
        }
    }

    /// Half `h`'s scales and mins (one i32 lane per row), its `madd` factors and pairs formed
    /// from them.
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    fn set_scales(&mut self, h: usize, sc: &[__m256i; MAX_SUBS], mn: &[__m256i; MAX_SUBS]) {
        self.sc[h] = array_of!(MAX_SUBS, |s| pair_i16(sc[s], sc[s]));
        self.sc_pairs[h] = array_of!(MAX_SUBS / 2, |k| pair_i16(sc[2 * k], sc[2 * k + 1]));
        self.mn_pairs[h] = array_of!(MAX_SUBS / 2, |k| pair_i16(mn[2 * k], mn[2 * k + 1]));
    }
}

/// What a packed type's prompt kernel needs to know: its layout, its code bias and whether it
/// has mins (its sub-blocks and runs are the parameters of [`pass`]).
#[derive(Clone, Copy)]
struct Shape {
    layout: Layout,
    bias: i32,
    mins: bool,
}

/// The shape of a packed layout's type.
fn shape(layout: Layout) -> Option<Shape> {
    let s = |bias, mins| Shape { layout, bias, mins };
    Some(match layout {
        Layout::Q4Kx16 | Layout::Q5KPairs => s(0, true),
        Layout::Q6KPairs => s(Q6_BIAS, false),
        // True products: no bias to take off.
        Layout::Iq4XsX16 => s(0, false),
        _ => return None,
    })
}

const _: () = assert!(
    i16_run_fits(RUN_Q4_K, 4)
        && i16_run_fits(RUN_Q5_K, 5)
        && i16_run_fits(RUN_Q6_K, 6)
        && i16_run_fits(RUN_IQ4_XS, 7)
);

/// Step `step` of `shape`'s layout, unpacked into `u`.
#[target_feature(enable = "avx2,fma,f16c")]
fn unpack(shape: Shape, step: &[u8], u: &mut Unpacked) {
    match shape.layout {
        Layout::Q4Kx16 => unpack_q4_k(step, u),
        Layout::Q5KPairs => unpack_q5_k(step, u),
        Layout::Q6KPairs => unpack_q6_k(step, u),
        Layout::Iq4XsX16 => unpack_iq4_xs(step, u),
        l => unreachable!("no prompt kernel for {}", l.name()),
    }
}

packed_tile!(
    /// The tile of packed groups of `layout` (`packed_kernels::run_tile`), one group at a time.
    pairs: false,
    |shape, gemm, g: &[&[u8]], ys: &[&[BlockQ8K]], out: &mut [f32], place| {
        // SAFETY: only reachable through the table built after AVX2, FMA and F16C were
        // detected.
        unsafe { tile_impl(shape, gemm, g[0], ys, out, place) }
    }
);

/// Per token and half, the chains: the tiled order's one, or the gemm's two (sums, mins).
type Chains = [[[__m256; 2]; HALVES]; MAX_TOKENS];

#[target_feature(enable = "avx2,fma,f16c")]
fn tile_impl(
    shape: Shape,
    gemm: bool,
    group: &[u8],
    ys: &[&[BlockQ8K]],
    out: &mut [f32],
    place: Place,
) {
    let n = ys[0].len();
    let step_bytes = group.len() / n;
    let mut acc: Chains = [[[_mm256_setzero_ps(); 2]; HALVES]; MAX_TOKENS];
    let mut u = Unpacked::zeroed();
    for i in 0..n {
        prefetch_steps(group, i, step_bytes);
        unpack(shape, &group[i * step_bytes..(i + 1) * step_bytes], &mut u);
        token_passes::<PASS>(ys, i, |blocks, k, t0| {
            let acc = &mut acc[t0..t0 + PASS.min(MAX_TOKENS - t0)];
            match (shape.layout, gemm) {
                (Layout::Q4Kx16, true) => {
                    pass::<SUBS, RUN_Q4_K, true, false>(&u, shape, blocks, k, acc)
                }
                (Layout::Q4Kx16, false) => {
                    pass::<SUBS, RUN_Q4_K, false, false>(&u, shape, blocks, k, acc)
                }
                (Layout::Q5KPairs, _) => {
                    pass::<SUBS, RUN_Q5_K, false, false>(&u, shape, blocks, k, acc)
                }
                (Layout::Q6KPairs, _) => {
                    pass::<MAX_SUBS, RUN_Q6_K, false, false>(&u, shape, blocks, k, acc)
                }
                (Layout::Iq4XsX16, _) => {
                    pass::<SUBS, RUN_IQ4_XS, false, true>(&u, shape, blocks, k, acc)
                }
                (l, _) => unreachable!("no prompt kernel for {}", l.name()),
            }
        });
    }
    for t in 0..ys.len() {
        let o = &mut out[t * place.stride + place.at..][..PACK_ROWS];
        for (h, o) in o.chunks_exact_mut(HALF).enumerate() {
            store_chains(&acc[t][h], gemm, o);
        }
    }
}

/// One unpacked super-block against a pass of tokens (the first `k` of `ys` real, the rest
/// repeats whose results are dropped), into their chains `acc`. Per sub-block s, half and
/// token the exact `sc_s·Σ_{e∈s} c_e·y_e` (runs of `RUN` groups summed in i16, then `madd` by
/// the scale); the bias `BIAS·Σ_s sc_s·bsum_s` and the mins `Σ_s m_s·bsum_s` by `madd` of the
/// scale and min pairs against the token's sum pairs; then the tiled order's step on their sum
/// (`GEMM == false`) or the repacked gemm's per pair of sub-blocks (whose types have no bias).
/// `XS`: IQ4_XS's signed codes, as true products.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn pass<const S: usize, const RUN: usize, const GEMM: bool, const XS: bool>(
    u: &Unpacked,
    shape: Shape,
    ys: &[&BlockQ8K; PASS],
    k: usize,
    acc: &mut [[[__m256; 2]; HALVES]],
) {
    let per = GROUPS / S;
    const { assert!((GROUPS / S).is_multiple_of(RUN)) };
    let zero = _mm256_setzero_si256();
    let mut s1 = [[zero; HALVES]; PASS];
    let mut pend = [[zero; HALVES]; PASS];
    let dy: [__m256; PASS] = array_of!(PASS, |t| _mm256_set1_ps(ys[t].d));
    let bp: [[i32; MAX_SUBS / 2]; PASS] = array_of!(PASS, |t| bsum_pairs::<S>(ys[t]));
    for s in 0..S {
        let mut run0 = s * per;
        while run0 < (s + 1) * per {
            let mut a = [[zero; HALVES]; PASS];
            for g in run0..run0 + RUN {
                let c = [u.codes[0][g], u.codes[1][g]];
                for t in 0..PASS {
                    let y = bcast4(ys[t], GROUP * g);
                    if XS {
                        // True products: |y| times the code with y's sign (|y| ≤ 128 unsigned).
                        let ay = _mm256_abs_epi8(y);
                        for h in 0..HALVES {
                            let p = _mm256_maddubs_epi16(ay, _mm256_sign_epi8(c[h], y));
                            a[t][h] = _mm256_add_epi16(a[t][h], p);
                        }
                    } else {
                        for h in 0..HALVES {
                            a[t][h] = _mm256_add_epi16(a[t][h], _mm256_maddubs_epi16(c[h], y));
                        }
                    }
                }
            }
            for t in 0..PASS {
                for h in 0..HALVES {
                    let v = _mm256_madd_epi16(a[t][h], u.sc[h][s]);
                    s1[t][h] = _mm256_add_epi32(s1[t][h], v);
                }
            }
            run0 += RUN;
        }
        if GEMM && s % 2 == 1 {
            // The pair's chains (the pair's sum: what `s1` gained since the last pair).
            for t in 0..k {
                for h in 0..HALVES {
                    let isum = _mm256_sub_epi32(s1[t][h], pend[t][h]);
                    pend[t][h] = s1[t][h];
                    let mins = (u.mn_pairs[h][s / 2], bp[t][s / 2]);
                    gemm_step(isum, mins, (u.d[h], u.dmin[h], dy[t]), &mut acc[t][h]);
                }
            }
        }
    }
    if GEMM {
        return;
    }
    let kind = (shape.bias, shape.mins);
    for t in 0..k {
        for h in 0..HALVES {
            let pairs = (&u.sc_pairs[h][..], &u.mn_pairs[h][..], &bp[t][..S / 2]);
            let scales = (u.d[h], u.dmin[h], dy[t]);
            tiled_step(s1[t][h], pairs, kind, scales, &mut acc[t][h][0]);
        }
    }
}

/// A packed Q4_K step ([`Layout::Q4Kx16`]) unpacked.
#[target_feature(enable = "avx2,fma,f16c")]
fn unpack_q4_k(step: &[u8], u: &mut Unpacked) {
    let (sc8, mn8) = scale_min_bytes(&step[K_SCALES_AT..K_QS_AT]);
    let low = _mm256_set1_epi8(0x0f);
    let qs = &step[K_QS_AT..];
    for h in 0..HALVES {
        // Half h's rows' bytes as i32 lanes.
        let dup = dup_rows(h);
        let lanes = |v: __m128i| {
            let w = _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(v), dup);
            _mm256_and_si256(w, _mm256_set1_epi32(0xffff))
        };
        let mut sc = [_mm256_setzero_si256(); MAX_SUBS];
        let mut mn = sc;
        for j in 0..SUBS {
            (sc[j], mn[j]) = (lanes(sc8[j]), lanes(mn8[j]));
        }
        u.set_scales(h, &sc, &mn);
        // Vector 8j + o holds nibble bytes 4o.. of pair j: low nibbles elements 64j + 4o..,
        // high nibbles 64j + 32 + 4o.. (groups 16j + o and 16j + 8 + o).
        for j in 0..SUBS / 2 {
            for o in 0..SUB / GROUP {
                let v = word(qs, 8 * j + o, h);
                u.codes[h][16 * j + o] = _mm256_and_si256(v, low);
                u.codes[h][16 * j + 8 + o] = _mm256_and_si256(_mm256_srli_epi16::<4>(v), low);
            }
        }
        u.d[h] = half_f16(step, 0, h);
        u.dmin[h] = half_f16(step, K_DMIN_AT, h);
    }
}

/// A packed Q5_K step ([`Layout::Q5KPairs`]) unpacked: the paired code vectors put back in
/// element order (the low-nibble vector holds elements 0, 1 of both sub-blocks, the high one
/// 2, 3: each sub-block's four are one i16 half of each).
#[target_feature(enable = "avx2,fma,f16c")]
fn unpack_q5_k(step: &[u8], u: &mut Unpacked) {
    let low = _mm256_set1_epi8(0x0f);
    for h in 0..HALVES {
        let sw: [__m256i; 3] = array_of!(3, |k| word(step, Q5_SC_WORD + k, h));
        let mut sc = [_mm256_setzero_si256(); MAX_SUBS];
        let mut mn = sc;
        for j in 0..SUBS {
            (sc[j], mn[j]) = q5_scale_min(&sw, j);
        }
        u.set_scales(h, &sc, &mn);
        for b4 in 0..SUB / GROUP {
            let hb = word(step, Q5_QH_WORD + b4, h);
            for j in 0..SUBS / 2 {
                let q = word(step, Q5_QS_WORD + 8 * j + b4, h);
                let p01 = _mm256_or_si256(_mm256_and_si256(q, low), q5_fifth_bit(hb, 2 * j));
                let p23 = _mm256_or_si256(
                    _mm256_and_si256(_mm256_srli_epi16::<4>(q), low),
                    q5_fifth_bit(hb, 2 * j + 1),
                );
                u.codes[h][16 * j + b4] =
                    _mm256_blend_epi16::<BLEND_HIGH_I16>(p01, _mm256_slli_epi32::<16>(p23));
                u.codes[h][16 * j + 8 + b4] =
                    _mm256_blend_epi16::<BLEND_HIGH_I16>(_mm256_srli_epi32::<16>(p01), p23);
            }
        }
        let w0 = word(step, 0, h);
        u.d[h] = f16_low(w0);
        u.dmin[h] = f16_low(_mm256_srli_epi32::<16>(w0));
    }
}

/// A packed Q6_K step ([`Layout::Q6KPairs`]) unpacked: the paired code vectors put back in
/// element order (vector v of a lane holds elements p, p + 1 of columns k and k + 1, so
/// column k's four are the low i16 of vectors v and v + 1, column k + 1's their high i16).
#[target_feature(enable = "avx2,fma,f16c")]
fn unpack_q6_k(step: &[u8], u: &mut Unpacked) {
    let dup: [__m256i; GROUP] = array_of!(GROUP, |t| high_bytes(t, t));
    for h in 0..HALVES {
        for j in 0..Q6_BLOCK_HALVES {
            for b4 in 0..SUB / GROUP {
                let q = q6_codes(step, h, j, b4);
                for kk in 0..Q6_PAIRS {
                    let (p01, p23) = (q[2 * kk], q[2 * kk + 1]);
                    let low =
                        _mm256_blend_epi16::<BLEND_HIGH_I16>(p01, _mm256_slli_epi32::<16>(p23));
                    let high =
                        _mm256_blend_epi16::<BLEND_HIGH_I16>(_mm256_srli_epi32::<16>(p01), p23);
                    // Column k: elements 128j + 32k + 4·b4 (group 32j + 8k + b4).
                    u.codes[h][32 * j + 8 * (2 * kk) + b4] = low;
                    u.codes[h][32 * j + 8 * (2 * kk + 1) + b4] = high;
                }
            }
        }
        // Scale s (signed) is byte s mod 4 of word 48 + s / 4: sign-extended into an i32 lane
        // (its high i16 a copy, masked off by `set_scales`).
        let sc: [__m256i; MAX_SUBS] = array_of!(MAX_SUBS, |s| {
            let w = word(step, Q6_SC_WORD + s / GROUP, h);
            _mm256_srai_epi16::<8>(_mm256_shuffle_epi8(w, dup[s % GROUP]))
        });
        u.set_scales(h, &sc, &[_mm256_setzero_si256(); MAX_SUBS]);
        u.d[h] = half_f16(step, Q6_K_D_AT, h);
    }
}

/// A packed IQ4_XS step ([`Layout::Iq4XsX16`]) unpacked: codes the signed table values.
#[target_feature(enable = "avx2,fma,f16c")]
fn unpack_iq4_xs(step: &[u8], u: &mut Unpacked) {
    let table = _mm256_broadcastsi128_si256(iq4nl_table());
    let low = _mm256_set1_epi8(0x0f);
    for h in 0..HALVES {
        let (w0, w1) = (word(step, 0, h), word(step, 1, h));
        let mut sc = [_mm256_setzero_si256(); MAX_SUBS];
        for (s, sc) in sc.iter_mut().take(SUBS).enumerate() {
            *sc = xs_scale(w0, w1, s);
            for q in 0..XS_SUB_WORDS {
                let v = word(step, XS_QS_WORD + XS_SUB_WORDS * s + q, h);
                // Low nibbles: elements 32s + 4q.. (group 8s + q); high: 32s + 16 + 4q..
                // (group 8s + 4 + q).
                u.codes[h][8 * s + q] = _mm256_shuffle_epi8(table, _mm256_and_si256(v, low));
                let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(v), low);
                u.codes[h][8 * s + XS_SUB_WORDS + q] = _mm256_shuffle_epi8(table, hi);
            }
        }
        u.set_scales(h, &sc, &[_mm256_setzero_si256(); MAX_SUBS]);
        u.d[h] = f16_low(w0);
    }
}
