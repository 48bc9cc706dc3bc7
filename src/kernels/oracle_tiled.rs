//! Scalar oracles for llama.cpp's tiled K-quant matmul (`ggml-cpu/tiled/tiled.cpp` and
//! `tiled-kernel.cpp`), which computes prompt-processing matmuls of Q2_K, Q3_K, Q4_K, Q5_K, Q6_K
//! and IQ4_XS weights instead of `ggml_vec_dot_*` (see [`tiled_in_llama`] for when). Each
//! function gives one output bit for bit as the x86 build with AVX-512 VNNI computes it
//! (`tiled_run_micro_vnni_8x16`, as GCC 12 compiles it with `-march=native` or with the
//! `GGML_AVX512*` flags, which define the same `__AVX512VNNI__`/`__AVX512VL__`/`__AVX512DQ__`).
//!
//! # Arithmetic, per output (weight row `x`, activation row `y`)
//!
//! Each weight block is unpacked to unsigned codes `c` (the stored quants, no offset applied:
//! Q3_K `low2 | hbit << 2` in 0..8, Q6_K 0..64, IQ4_XS `KVALUES_IQ4NL[q] + 128`) and integer
//! scales `sc` (Q3_K and IQ4_XS with their 32 taken off, Q6_K signed) and, for Q2_K/Q4_K/Q5_K,
//! mins `m`. Then, for each super-block `i` in order, in exact (wrapping) 32-bit integers:
//!
//! ```text
//! bsum_s = Σ of y's stored bsums over sub-block s            (one or two 16-element sums)
//! s1 = Σ_s sc_s · (Σ_{e∈s} c_e·y.qs[e] − BIAS·bsum_s)         (dpbusd; BIAS: Q3_K 4, Q6_K 32,
//! s2 = Σ_s m_s · bsum_s                                        IQ4_XS 128, others 0)
//! ```
//!
//! and in f32, one chain per output starting at +0.0:
//!
//! ```text
//! t   = (s1 as f32) · d                      (d = x.d as f32)
//! t   = fma(−dmin, s2 as f32, t)             (Q2_K, Q4_K, Q5_K only)
//! acc = fma(t, y.d, acc)
//! ```
//!
//! The last line is a multiply then an add in the source; GCC contracts it into one
//! `vfmadd213ps` (`-std=gnu++17` implies `-ffp-contract=fast`), as the disassembly of the built
//! `tiled-kernel.cpp.o` shows for every instantiation. (A compiler that does not contract, e.g.
//! clang's default, would round twice: these oracles are for GCC builds.)
//!
//! # Differences from `ggml_vec_dot_*` (`oracle_vec_dot`)
//!
//! The vec_dot kernels keep eight f32 lanes per output, each fed by `fma(y.d·x.d, lane_sum,
//! lane)` (Q4_K/Q5_K/Q2_K with separate min accumulators `fma(−y.d·x.dmin, …)`) and reduce the
//! lanes with `hsum_float_8` at the end. Here the whole super-block is one integer, converted
//! once, scaled by `x.d` alone, and the activation scale is applied last, in a single scalar
//! chain. Nothing is shared: for every type the two orders round differently. Also, IQ4_XS does
//! not use the sign trick here (an activation of −128 multiplies truly), and the Q4_K/Q5_K mins
//! add the two 16-element `bsums` in 32 bits (vec_dot adds them in 16 bits).
//!
//! # What an output depends on
//!
//! Only on its weight row and its activation row: padded tile rows and columns are computed but
//! never stored, every K step (the standard path's 256-element slabs and the narrow path's
//! longer chunks, taken when a window has ≤ 16 tokens) adds its super-blocks to the output's
//! chain in K order, and the activation quantizer (`quantize_row_q8_K` = the reference Q8_K
//! quantizer, [`super::dequantize::quantize_act_q8_k`]) works per row and per 256 values. So the
//! thread count, the chunking, the output's position in a tile and the rest of the batch do not
//! matter — except through the choice of path itself ([`tiled_in_llama`]).

use super::blocks::{
    scale, BlockIq4Xs, BlockQ2K, BlockQ3K, BlockQ4K, BlockQ5K, BlockQ6K, BlockQ8K, IqGrid,
    KVALUES_IQ4NL, Q3_BIAS, Q6_BIAS, QK_K, RUN, SCALE_BIAS, SUB16, SUB32,
};
use super::blocks::{Iq1Grid, IQ1_GROUP, IQ1_HALF};
use super::dequantize::{get_scale_min_k4, q3_k_scales};
use super::oracle_repacked::repacked_in_llama;
use super::GgmlType;

/// The fewest activation rows (tokens) for which llama.cpp takes the tiled path
/// (`ggml_tiled_min_batch`: `ne11 >= 8`, per expert for `MUL_MAT_ID`).
pub const TILED_MIN_TOKENS: usize = 8;

/// IQ4_XS codes are `KVALUES_IQ4NL[q] + 128` (unsigned bytes for `dpbusd`).
const IQ4_BIAS: i32 = 128;
/// Whether llama.cpp (x86 build with AVX2 or AVX-512, `GGML_CPU_TILED_MM` unset or non-zero,
/// `GGML_CPU_TILED_MM_FORCE` unset, no `use_ref`) computes a `MUL_MAT` of a weight of type `ty`
/// with `n_rows` output rows and `n_tokens` activation rows (`ne11`) on the tiled path, i.e.
/// with these oracles; otherwise one `ggml_vec_dot_*` per output (or the repacked kernels for
/// weights that [`repacked_in_llama`] says are repacked: those carry a tensor `extra` and the
/// tiled path declines them). For `MUL_MAT_ID` the count is the tokens routed to the expert.
pub fn tiled_in_llama(ty: GgmlType, n_tokens: usize, n_rows: usize) -> bool {
    matches!(
        ty,
        GgmlType::Q2K
            | GgmlType::Q3K
            | GgmlType::Q4K
            | GgmlType::Q5K
            | GgmlType::Q6K
            | GgmlType::Iq4Xs
            | GgmlType::Iq3Xxs
            | GgmlType::Iq3S
            | GgmlType::Iq2Xxs
            | GgmlType::Iq2Xs
            | GgmlType::Iq2S
            | GgmlType::Iq1S
            | GgmlType::Iq1M
    ) && n_tokens >= TILED_MIN_TOKENS
        && !repacked_in_llama(ty, n_rows)
}

/// One super-block's integer totals `(s1, s2)` (see the module docs), for sub-blocks of `sub`
/// elements: `code(e)` is element e's unsigned code, `sc(s)` and `m(s)` sub-block s's scale and
/// min (`m` returns 0 for the types without mins). All arithmetic wraps, as the vector lanes do.
#[inline]
fn totals(
    y: &BlockQ8K,
    sub: usize,
    bias: i32,
    code: impl Fn(usize) -> i32,
    sc: impl Fn(usize) -> i32,
    m: impl Fn(usize) -> i32,
) -> (i32, i32) {
    let (mut s1, mut s2) = (0i32, 0i32);
    for s in 0..QK_K / sub {
        let raw = (s * sub..(s + 1) * sub).fold(0i32, |a, e| {
            a.wrapping_add(code(e).wrapping_mul(i32::from(y.qs[e])))
        });
        let bsum = y.bsums[s * sub / SUB16..(s + 1) * sub / SUB16]
            .iter()
            .fold(0i32, |a, &b| a.wrapping_add(i32::from(b)));
        let corr = raw.wrapping_sub(bias.wrapping_mul(bsum));
        s1 = s1.wrapping_add(sc(s).wrapping_mul(corr));
        s2 = s2.wrapping_add(m(s).wrapping_mul(bsum));
    }
    (s1, s2)
}

/// The output chain: `acc = fma(t_i, y_i.d, acc)` over the super-blocks in order, from +0.0,
/// where `t_i = block(x_i, y_i)`.
#[inline]
fn chain<B>(x: &[B], y: &[BlockQ8K], name: &str, block: impl Fn(&B, &BlockQ8K) -> f32) -> f32 {
    assert_eq!(x.len(), y.len(), "{name}: length mismatch");
    x.iter()
        .zip(y)
        .fold(0f32, |acc, (a, b)| block(a, b).mul_add(b.d, acc))
}

/// `t = (s1 as f32)·d`, then `fma(−dmin, s2 as f32, t)`: the per-block factor of the types with
/// mins.
#[inline]
fn with_min(s1: i32, s2: i32, d: f32, dmin: f32) -> f32 {
    let t = s1 as f32 * d;
    (-dmin).mul_add(s2 as f32, t)
}

/// Element `e` (0..256) of the 2-bit planes of Q2_K/Q3_K: bits `2k` of `qs[32j + b]` for
/// `e = 128j + 32k + b`.
#[inline]
fn two_bits(qs: &[u8; QK_K / 4], e: usize) -> i32 {
    let (j, k, b) = (e / 128, (e / RUN) % 4, e % RUN);
    i32::from((qs[RUN * j + b] >> (2 * k)) & 3)
}

/// Element `e` (0..256) of the nibble layout of Q4_K/Q5_K: nibble `h` of `qs[32j + b]` for
/// `e = 64j + 32h + b`.
#[inline]
fn nibble(qs: &[u8; QK_K / 2], e: usize) -> i32 {
    let (j, h, b) = (e / 64, (e / RUN) % 2, e % RUN);
    i32::from((qs[RUN * j + b] >> (4 * h)) & 0x0f)
}

/// Q2_K × Q8_K as the tiled path computes one output: codes 0..4, scale and min the nibbles of
/// `scales[s]` (sub-blocks of 16), no bias; `t = fma(−dmin, s2, s1·d)`, `acc = fma(t, y.d, acc)`.
///
/// # Panics
/// If the lengths differ.
pub fn dot_q2_k_q8_k_tiled(x: &[BlockQ2K], y: &[BlockQ8K]) -> f32 {
    chain(x, y, "dot_q2_k_q8_k_tiled", |a, b| {
        let (s1, s2) = totals(
            b,
            SUB16,
            0,
            |e| two_bits(&a.qs, e),
            |s| i32::from(a.scales[s] & 0x0f),
            |s| i32::from(a.scales[s] >> 4),
        );
        with_min(s1, s2, scale(a.d), scale(a.dmin))
    })
}

/// Q3_K × Q8_K as the tiled path computes one output: codes `low2 | hbit << 2` (0..8; the high
/// bit of element `128j + 32k + b` is bit `4j + k` of `hmask[b]`), bias 4 through `bsums`,
/// 6-bit scales − 32 (sub-blocks of 16); `t = s1·d`, `acc = fma(t, y.d, acc)`.
///
/// # Panics
/// If the lengths differ.
pub fn dot_q3_k_q8_k_tiled(x: &[BlockQ3K], y: &[BlockQ8K]) -> f32 {
    chain(x, y, "dot_q3_k_q8_k_tiled", |a, b| {
        let scales = q3_k_scales(&a.scales);
        let code = |e: usize| {
            let hbit = (a.hmask[e % RUN] >> (e / RUN)) & 1;
            two_bits(&a.qs, e) | (i32::from(hbit) << 2)
        };
        let sc = |s: usize| i32::from(scales[s]) - SCALE_BIAS;
        let (s1, _) = totals(b, SUB16, Q3_BIAS, code, sc, |_| 0);
        s1 as f32 * scale(a.d)
    })
}

/// Q4_K × Q8_K as the tiled path computes one output: nibble codes, 6-bit scales and mins
/// (`get_scale_min_k4`, sub-blocks of 32, each min times the sum of two `bsums` in 32 bits);
/// `t = fma(−dmin, s2, s1·d)`, `acc = fma(t, y.d, acc)`.
///
/// # Panics
/// If the lengths differ.
pub fn dot_q4_k_q8_k_tiled(x: &[BlockQ4K], y: &[BlockQ8K]) -> f32 {
    chain(x, y, "dot_q4_k_q8_k_tiled", |a, b| {
        let sm = |s: usize| get_scale_min_k4(s, &a.scales);
        let (s1, s2) = totals(
            b,
            SUB32,
            0,
            |e| nibble(&a.qs, e),
            |s| i32::from(sm(s).0),
            |s| i32::from(sm(s).1),
        );
        with_min(s1, s2, scale(a.d), scale(a.dmin))
    })
}

/// Q5_K × Q8_K as [`dot_q4_k_q8_k_tiled`], the codes 5-bit: element `32j + b` adds bit `j` of
/// `qh[b]` as 16.
///
/// # Panics
/// If the lengths differ.
pub fn dot_q5_k_q8_k_tiled(x: &[BlockQ5K], y: &[BlockQ8K]) -> f32 {
    chain(x, y, "dot_q5_k_q8_k_tiled", |a, b| {
        let sm = |s: usize| get_scale_min_k4(s, &a.scales);
        let code = |e: usize| {
            let hbit = (a.qh[e % RUN] >> (e / RUN)) & 1;
            nibble(&a.qs, e) | (i32::from(hbit) << 4)
        };
        let (s1, s2) = totals(
            b,
            SUB32,
            0,
            code,
            |s| i32::from(sm(s).0),
            |s| i32::from(sm(s).1),
        );
        with_min(s1, s2, scale(a.d), scale(a.dmin))
    })
}

/// Q6_K × Q8_K as the tiled path computes one output: 6-bit codes (element `128j + 32k + b`:
/// the low (k < 2) or high nibble of `ql[64j + 32(k mod 2) + b]`, bits `2k` of `qh[32j + b]`
/// above), bias 32 through `bsums`, signed 8-bit scales (sub-blocks of 16); `t = s1·d`,
/// `acc = fma(t, y.d, acc)`.
///
/// # Panics
/// If the lengths differ.
pub fn dot_q6_k_q8_k_tiled(x: &[BlockQ6K], y: &[BlockQ8K]) -> f32 {
    chain(x, y, "dot_q6_k_q8_k_tiled", |a, b| {
        let code = |e: usize| {
            let (j, k, i) = (e / 128, (e / RUN) % 4, e % RUN);
            let low = (a.ql[64 * j + RUN * (k % 2) + i] >> (4 * (k / 2))) & 0x0f;
            let high = (a.qh[RUN * j + i] >> (2 * k)) & 3;
            i32::from(low | (high << 4))
        };
        let (s1, _) = totals(b, SUB16, Q6_BIAS, code, |s| i32::from(a.scales[s]), |_| 0);
        s1 as f32 * scale(a.d)
    })
}

/// IQ4_XS × Q8_K as the tiled path computes one output: codes `KVALUES_IQ4NL[q] + 128` (sub-block
/// s's element i is nibble `i / 16` of `qs[16s + i mod 16]`), bias 128 through `bsums`, 6-bit
/// scales − 32 (sub-blocks of 32); `t = s1·d`, `acc = fma(t, y.d, acc)`. Products are true
/// products (no sign trick): an activation of −128 is not wrapped.
///
/// # Panics
/// If the lengths differ.
pub fn dot_iq4_xs_q8_k_tiled(x: &[BlockIq4Xs], y: &[BlockQ8K]) -> f32 {
    chain(x, y, "dot_iq4_xs_q8_k_tiled", |a, b| {
        let code = |e: usize| {
            let (s, i) = (e / SUB32, e % SUB32);
            let q = (a.qs[16 * s + i % 16] >> (4 * (i / 16))) & 0x0f;
            i32::from(KVALUES_IQ4NL[usize::from(q)]) + IQ4_BIAS
        };
        let scales_h = u16::from_le_bytes(a.scales_h);
        let sc = |s: usize| {
            let low = (a.scales_l[s / 2] >> (4 * (s % 2))) & 0x0f;
            let high = (scales_h >> (2 * s)) & 3;
            (i32::from(low) | (i32::from(high) << 4)) - SCALE_BIAS
        };
        let (s1, _) = totals(b, SUB32, IQ4_BIAS, code, sc, |_| 0);
        s1 as f32 * scale(a.d)
    })
}

/// The IQ2 and IQ3 types ([`IqGrid`]): `s1 = Σ_s (2·ls_s + 1)·Σ_{e∈s} v_e·q_e` over the scale
/// groups `s` (sixteen values for IQ2_XS/IQ2_S, else 32) with `v` the signed grid values: true
/// products. llama.cpp stores the codes `v + 128`; its VNNI kernel forms `Σ (v + 128)·q −
/// 128·bsum`, its AVX2 kernel the act-bias `Σ (q + 128)·v − 128·Σ v` (`maddubs` pairs below
/// 2·255·62 < 2^15): the same integer for activations whose `bsums` are the sums of their
/// quants, as every Q8_K quantizer writes them;
/// `t = s1·d` (the tile keeps `d` times the type's factor: an eighth for IQ2, a quarter for
/// IQ3_XXS), `acc = fma(t, y.d, acc)`.
///
/// # Panics
/// If the lengths differ.
pub fn dot_iq_grid_q8_k_tiled<B: IqGrid>(x: &[B], y: &[BlockQ8K]) -> f32 {
    chain(x, y, "dot_iq_grid_q8_k_tiled", |a, b| {
        let code = |e: usize| i32::from(a.signed(e));
        let (s1, _) = totals(b, B::SCALE_GROUP, 0, code, |s| a.odd_scale(s), |_| 0);
        let d = match B::SUM_SCALE {
            Some(f) => scale(a.d()) * f,
            None => scale(a.d()),
        };
        s1 as f32 * d
    })
}

/// The IQ1 grids are scaled by this in the tiled matmul's codes, `8·grid ± 1` (so the ±1/8
/// delta is an integer); `d` takes the eighth back.
pub const IQ1_CODE_SCALE: i32 = 8;

/// The IQ1 types ([`Iq1Grid`]): codes `c = 8·grid ± 1` (the group's delta sign), `s1 = Σ_h
/// (2·ls_h + 1)·Σ_{e∈h} c_e·q_e` over the halves of 16 (IQ1_S's two halves share a scale: the
/// same integer as ggml's sub-blocks of 32), true products as for the IQ3 types (the kernel's
/// `Σ (c + 128)·q − 128·bsum` is the same integer for activations whose `bsums` are the sums
/// of their quants); `t = s1·(d·0.125)`, `acc = fma(t, y.d, acc)`.
///
/// # Panics
/// If the lengths differ.
pub fn dot_iq1_q8_k_tiled<B: Iq1Grid>(x: &[B], y: &[BlockQ8K]) -> f32 {
    chain(x, y, "dot_iq1_q8_k_tiled", |a, b| {
        let code = |e: usize| {
            IQ1_CODE_SCALE * i32::from(a.value(e)) + i32::from(a.delta_sign(e / IQ1_GROUP))
        };
        let (s1, _) = totals(b, IQ1_HALF, 0, code, |h| a.odd_scale(h), |_| 0);
        s1 as f32 * (scale(a.d()) * (1.0 / IQ1_CODE_SCALE as f32))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::blocks::{block_bytes_mut, Block};
    use crate::kernels::blocks::{BlockIq2S, BlockIq2Xs, BlockIq2Xxs};
    use crate::kernels::dequantize::{
        dequantize_iq4_xs, dequantize_iq_grid, dequantize_q2_k, dequantize_q3_k, dequantize_q4_k,
        dequantize_q5_k, dequantize_q6_k, quantize_act_q8_k,
    };
    use crate::kernels::half::f32_to_f16;
    use crate::kernels::oracle_vec_dot;

    use crate::kernels::test_util::{weights, XorShift as Rng};

    type Dot<B> = fn(&[B], &[BlockQ8K]) -> f32;
    type Deq<B> = fn(&[B], &mut [f32]);

    /// One weight type under test: its tiled oracle, ggml's vec_dot oracle, its dequantizer, the
    /// byte offsets of its f16 fields (`d` first, then `dmin`) and the known-answer seed base.
    struct Case<B> {
        name: &'static str,
        tiled: Dot<B>,
        vec_dot: Dot<B>,
        deq: Deq<B>,
        f16_at: &'static [usize],
        base: u64,
    }

    /// Runs `f` once per weight type: its block, name, tiled and vec_dot oracles, dequantizer,
    /// f16 field offsets and known-answer seed base.
    macro_rules! each_type {
        ($f:ident) => {{
            macro_rules! case {
                ($b:ty, $name:literal, $tiled:expr, $vec_dot:expr, $deq:expr, $at:expr, $base:literal) => {
                    $f(Case::<$b> { name: $name, tiled: $tiled, vec_dot: $vec_dot, deq: $deq, f16_at: $at, base: $base })
                };
            }
            use oracle_vec_dot::*;
            case!(BlockQ2K, "Q2_K", dot_q2_k_q8_k_tiled, dot_q2_k_q8_k, dequantize_q2_k, &[80, 82], 4000);
            case!(BlockQ3K, "Q3_K", dot_q3_k_q8_k_tiled, dot_q3_k_q8_k, dequantize_q3_k, &[108], 5000);
            case!(BlockQ4K, "Q4_K", dot_q4_k_q8_k_tiled, dot_q4_k_q8_k, dequantize_q4_k, &[0, 2], 6000);
            case!(BlockQ5K, "Q5_K", dot_q5_k_q8_k_tiled, dot_q5_k_q8_k, dequantize_q5_k, &[0, 2], 7000);
            case!(BlockQ6K, "Q6_K", dot_q6_k_q8_k_tiled, dot_q6_k_q8_k, dequantize_q6_k, &[208], 8000);
            case!(BlockIq4Xs, "IQ4_XS", dot_iq4_xs_q8_k_tiled, dot_iq4_xs_q8_k, dequantize_iq4_xs, &[0], 9000);
            case!(BlockIq2Xxs, "IQ2_XXS", dot_iq_grid_q8_k_tiled, dot_iq_grid_q8_k, dequantize_iq_grid, &[0], 12000);
            case!(BlockIq2Xs, "IQ2_XS", dot_iq_grid_q8_k_tiled, dot_iq_grid_q8_k, dequantize_iq_grid, &[0], 13000);
            case!(BlockIq2S, "IQ2_S", dot_iq_grid_q8_k_tiled, dot_iq_grid_q8_k, dequantize_iq_grid, &[0], 15000);
        }};
    }

    /// Q8_K blocks with quants drawn from `-lim..=lim`, consistent `bsums`, scale `d`.
    fn q8_k(r: &mut Rng, nb: usize, lim: i32, d: f32) -> Vec<BlockQ8K> {
        let mut block = |_| {
            let qs: [i8; QK_K] =
                std::array::from_fn(|_| ((r.next() % (2 * lim + 1) as u64) as i32 - lim) as i8);
            let bsums = std::array::from_fn(|j| {
                qs[SUB16 * j..][..SUB16].iter().map(|&q| i16::from(q)).sum()
            });
            BlockQ8K { d, qs, bsums }
        };
        (0..nb).map(&mut block).collect()
    }

    /// The known-answer harness's f16 scales.
    const KAT_H: [u16; 8] = [
        0x3c00, 0xb800, 0x2e66, 0x1c00, 0xa14f, 0x3555, 0x0001, 0x2a00,
    ];
    /// Weight rows and tokens of the known-answer matmuls (8 tokens: the tiled path).
    const KAT_ROWS: usize = 2;
    const KAT_TOKENS: usize = TILED_MIN_TOKENS;

    // Known answers: llama.cpp's `ggml_mul_mat` on the CPU backend (release build on this
    // machine, -march=native, AVX-512 VNNI; weights in plain context memory, so not repacked;
    // one thread), of KAT_ROWS weight rows by KAT_TOKENS f32 activation rows (so the tiled
    // path), regenerated here: xorshift64 seeded with `base + nb` fills each weight block's
    // bytes and then its f16 fields (KAT_H), row by row, then draws the activations
    // (`(next % 20001) / 1000 − 10`), token by token. Each value is the output of row 1 and
    // token `nb mod 8`; the activation goes through llama.cpp's Q8_K quantizer
    // (`quantize_act_q8_k` reproduces it).
    const KAT: [(&str, [u32; 4]); 9] = [
        ("Q2_K", [0xc4baccdc, 0xc39874e1, 0xc5014303, 0xc489d1bb]),
        ("Q3_K", [0xc34feb7d, 0xc463839b, 0x434af51a, 0xc5828545]),
        ("Q4_K", [0x43a91132, 0x45db53f7, 0xc74bd23c, 0x47641f45]),
        ("Q5_K", [0x43db95f5, 0x47b48f09, 0xc5d177f2, 0x45e3c56c]),
        ("Q6_K", [0x461061a7, 0x47d65025, 0xc6a90898, 0x4838dff0]),
        ("IQ4_XS", [0xbc4f4e15, 0x47c9eee2, 0x47977896, 0x4878e979]),
        ("IQ2_XXS", [0xc493ffaf, 0xc4abe193, 0xc5ab03bb, 0x452190d9]),
        ("IQ2_XS", [0xc3371e75, 0x40e8d692, 0xc3874c29, 0x45640591]),
        ("IQ2_S", [0x41632a63, 0x457f75dd, 0x45114c52, 0xc5dfb67a]),
    ];

    fn check_kat<B: Block>(c: Case<B>) {
        let want = KAT
            .iter()
            .find(|k| k.0 == c.name)
            .expect("a known answer")
            .1;
        let mut differs = false;
        for (nb, want) in [1usize, 2, 5, 7].into_iter().zip(want) {
            let mut r = Rng(c.base + nb as u64);
            let mut kh = |r: &mut Rng| KAT_H[(r.next() % KAT_H.len() as u64) as usize];
            let x = weights::<B>(&mut r, KAT_ROWS * nb, c.f16_at, &mut kh);
            let a: Vec<f32> = (0..KAT_TOKENS * nb * QK_K)
                .map(|_| (r.next() % 20001) as f32 / 1000.0 - 10.0)
                .collect();
            let tok = nb % KAT_TOKENS;
            let mut y = vec![BlockQ8K::default(); nb];
            quantize_act_q8_k(&a[tok * nb * QK_K..][..nb * QK_K], &mut y);
            let row = &x[nb..2 * nb];
            let got = (c.tiled)(row, &y);
            let w = f32::from_bits(want);
            assert_eq!(got.to_bits(), want, "{} nb={nb}: {got:e} vs {w:e}", c.name);
            differs |= (c.vec_dot)(row, &y).to_bits() != want;
        }
        // The vec_dot order would not have reproduced these outputs.
        assert!(differs, "{}: vec_dot agrees on every known answer", c.name);
    }

    #[test]
    fn known_answers_from_llama_cpp() {
        each_type!(check_kat);
    }

    /// With unit scales (`d = dmin = 1`, `y.d = 1`) and small activations every step is exact,
    /// so the result is the integer dot of the dequantized weights: this checks the unpacking
    /// (codes, scales, mins, biases) independently of the float order.
    fn check_unit_scales<B: Block>(c: Case<B>) {
        let r = &mut Rng(0x5eed ^ c.base);
        let one = f32_to_f16(1.0);
        for case in 0..40 {
            let nb = 1 + case % 2;
            let x = weights::<B>(r, nb, c.f16_at, |_| one);
            let y = q8_k(r, nb, 7, 1.0);
            let mut w = vec![0f32; nb * QK_K];
            (c.deq)(&x, &mut w);
            let qs = y.iter().flat_map(|b| b.qs);
            // Exact in f64; the IQ2 types' weights are eighths, their sums held as eighths.
            let exact: f64 = w
                .iter()
                .zip(qs)
                .map(|(&w, q)| f64::from(w) * f64::from(q))
                .sum();
            let eighths = exact * 8.0;
            assert!(
                eighths.fract() == 0.0 && eighths.abs() < f64::from(1 << f32::MANTISSA_DIGITS),
                "{}: test range",
                c.name
            );
            assert_eq!((c.tiled)(&x, &y), exact as f32, "{} case {case}", c.name);
        }
    }

    #[test]
    fn unit_scales_give_the_exact_integer_dot() {
        each_type!(check_unit_scales);
    }

    /// With realistic scales the result is within a few f32 roundings of the exact dot of the
    /// dequantized weights (the scale and min parts dequantized separately, for the bound).
    fn check_close<B: Block>(c: Case<B>) {
        let r = &mut Rng(0xc105e ^ c.base);
        for case in 0..60 {
            let nb = 1 + case % 12;
            let mut real = |r: &mut Rng| {
                let v = 1e-3 + (r.next() % 1000) as f32 * 1e-4;
                f32_to_f16(if r.next().is_multiple_of(4) { -v } else { v })
            };
            let x = weights::<B>(r, nb, c.f16_at, &mut real);
            let d8 = 1e-3 + (r.next() % 1000) as f32 * 1e-5;
            let y = q8_k(r, nb, 127, d8);
            // Part 1: the weights with dmin zeroed (d·sc·q); part 2: with d zeroed (−dmin·m).
            let zeroed = |o: usize| {
                let mut xz = x.clone();
                for b in xz.iter_mut() {
                    block_bytes_mut(std::slice::from_mut(b))[o..o + 2].fill(0);
                }
                let mut w = vec![0f32; nb * QK_K];
                (c.deq)(&xz, &mut w);
                w
            };
            let (p1, p2) = match *c.f16_at {
                [d, dmin] => (zeroed(dmin), zeroed(d)),
                _ => {
                    let mut w = vec![0f32; nb * QK_K];
                    (c.deq)(&x, &mut w);
                    (w, vec![0f32; nb * QK_K])
                }
            };
            let a = y
                .iter()
                .flat_map(|b| b.qs.map(|q| f64::from(b.d) * f64::from(q)));
            let (mut exact, mut size) = (0f64, 0f64);
            for ((&w1, &w2), a) in p1.iter().zip(&p2).zip(a) {
                exact += (f64::from(w1) + f64::from(w2)) * a;
                size += (f64::from(w1).abs() + f64::from(w2).abs()) * a.abs();
            }
            let got = f64::from((c.tiled)(&x, &y));
            let tol = 1e-5 * size + f64::from(f32::MIN_POSITIVE);
            assert!(
                (got - exact).abs() <= tol,
                "{} case {case}: {got:e} vs {exact:e}",
                c.name
            );
        }
    }

    #[test]
    fn results_are_close_to_the_exact_dot() {
        each_type!(check_close);
    }

    /// ggml's chain starts from +0.0 and adds `t·y.d` with one rounding, so a zero activation
    /// scale gives +0.0 exactly, whatever the sign of the weights.
    fn check_zero(c: Case<impl Block>) {
        let r = &mut Rng(77 ^ c.base);
        for nb in 1..4 {
            let x = weights(r, nb, c.f16_at, |r| KAT_H[(r.next() % 2) as usize]);
            let y = q8_k(r, nb, 127, 0.0);
            assert_eq!((c.tiled)(&x, &y).to_bits(), 0, "{} nb={nb}", c.name);
            let y = q8_k(r, nb, 127, -0.0);
            assert_eq!((c.tiled)(&x, &y).to_bits(), 0, "{} nb={nb} (−0)", c.name);
        }
    }

    #[test]
    fn a_zero_activation_scale_gives_positive_zero() {
        each_type!(check_zero);
    }

    /// The tiled IQ4_XS kernel multiplies unsigned codes (`dpbusd`), so an activation of −128
    /// meets a weight of −127 truly (+16256), where vec_dot's sign trick wraps (−16256).
    #[test]
    fn iq4_xs_has_no_sign_trick_wrap() {
        let mut x = weights::<BlockIq4Xs>(&mut Rng(3), 1, &[0], |_| f32_to_f16(1.0));
        // Every scale 33 (−32: 1), every nibble 0 (−127).
        x[0].scales_l = [0x11; QK_K / 64];
        x[0].scales_h = 0xaaaau16.to_le_bytes();
        x[0].qs = [0; QK_K / 2];
        let mut y = BlockQ8K {
            d: 1.0,
            ..Default::default()
        };
        y.qs[0] = -128;
        y.bsums[0] = -128;
        assert_eq!(dot_iq4_xs_q8_k_tiled(&x, &[y]), 16256.0);
        assert_eq!(oracle_vec_dot::dot_iq4_xs_q8_k(&x, &[y]), -16256.0);
    }

    /// The hash of the bulk harness's matmuls of `B`: case `c` seeded with `base + 200000 + c`,
    /// `1 + c mod 9` weight rows of `1 + c mod 4` blocks (KAT_H scales; every other byte 0xff
    /// when `c mod 5` is 0) by `8 + c mod 9` tokens drawn as the known answers' are; every
    /// output, token by token, row by row.
    fn bulk_hash<B: Block>(base: u64, tiled: Dot<B>) -> u64 {
        let mut h = 0xcbf2_9ce4_8422_2325u64;
        for c in 0..BULK_CASES {
            let r = &mut Rng(base + 200_000 + c as u64);
            let (nb, rows, toks) = (1 + c % 4, 1 + c % 9, 8 + c % 9);
            let mut kh = |r: &mut Rng| KAT_H[(r.next() % KAT_H.len() as u64) as usize];
            let mut x = weights::<B>(r, rows * nb, &[0], &mut kh);
            if c % 5 == 0 {
                for blk in block_bytes_mut(&mut x).chunks_exact_mut(std::mem::size_of::<B>()) {
                    blk[2..].fill(0xff);
                }
            }
            let a: Vec<f32> = (0..toks * nb * QK_K)
                .map(|_| (r.next() % 20001) as f32 / 1000.0 - 10.0)
                .collect();
            for t in a.chunks_exact(nb * QK_K) {
                let mut y = vec![BlockQ8K::default(); nb];
                quantize_act_q8_k(t, &mut y);
                for row in x.chunks_exact(nb) {
                    for b in tiled(row, &y).to_bits().to_le_bytes() {
                        h ^= u64::from(b);
                        h = h.wrapping_mul(0x100_0000_01b3);
                    }
                }
            }
        }
        h
    }

    /// Cases of [`bulk_hash`].
    const BULK_CASES: usize = 200;

    // The bulk harness (the known answers' C harness) ran `ggml_mul_mat` on 200 cases a type
    // (13 226 outputs) and compared each output with this oracle bit for bit; these are the
    // hashes of its outputs.
    #[test]
    fn iq2_bulk_matmuls_hash_as_llama_cpp() {
        let xxs = bulk_hash(10000, dot_iq_grid_q8_k_tiled::<BlockIq2Xxs>);
        assert_eq!(xxs, 0xc7a3e0a58bc0e258, "IQ2_XXS");
        let xs = bulk_hash(11000, dot_iq_grid_q8_k_tiled::<BlockIq2Xs>);
        assert_eq!(xs, 0x71700a49fe64fefa, "IQ2_XS");
        let s = bulk_hash(12000, dot_iq_grid_q8_k_tiled::<BlockIq2S>);
        assert_eq!(s, 0x2349946d6f45407b, "IQ2_S");
    }

    #[test]
    fn the_iq1_types_take_the_tiled_path_from_eight_tokens() {
        for ty in [GgmlType::Iq1S, GgmlType::Iq1M] {
            // Never repacked: a multiple of 8 rows changes nothing.
            for rows in [100, 4096] {
                assert!(tiled_in_llama(ty, 8, rows), "{ty:?}");
                assert!(!tiled_in_llama(ty, 7, rows), "{ty:?}");
            }
        }
    }

    #[test]
    fn the_tiled_path_needs_eight_tokens_and_plain_weights() {
        use GgmlType::*;
        for ty in [
            Q2K, Q3K, Q4K, Q5K, Q6K, Iq4Xs, Iq3Xxs, Iq3S, Iq2Xxs, Iq2Xs, Iq2S,
        ] {
            // 100 rows: not a multiple of 8, so not repacked.
            assert!(tiled_in_llama(ty, 8, 100), "{ty:?}");
            assert!(tiled_in_llama(ty, 512, 100), "{ty:?}");
            assert!(!tiled_in_llama(ty, 7, 100), "{ty:?}");
            assert!(!tiled_in_llama(ty, 1, 100), "{ty:?}");
        }
        // Q4_K and Q2_K with a multiple of 8 rows are repacked: the repack kernels take them.
        assert!(!tiled_in_llama(Q4K, 64, 4096));
        assert!(!tiled_in_llama(Q2K, 64, 4096));
        for ty in [Q3K, Q5K, Q6K, Iq4Xs, Iq2Xxs, Iq2Xs, Iq2S] {
            assert!(tiled_in_llama(ty, 64, 4096), "{ty:?}");
        }
        for ty in [Q4_0, Q8_0, Q5_0, Iq4Nl, F16] {
            assert!(!tiled_in_llama(ty, 64, 100), "{ty:?}");
        }
    }
}
