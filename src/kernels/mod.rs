//! Compute kernels: block formats, dot products, and the runtime dispatch table.
//!
//! Kernels know blocks and slices, never files or nodes. The CPU is probed once
//! ([`Kernels::detect`]); the result is a table of plain function pointers, one per weight type,
//! chosen from the best tier the CPU supports. `LOCUS_KERNELS=scalar|avx2|avx512` forces a tier
//! (a tier the CPU lacks is an error, not a silent downgrade). Every tier is tested against the
//! scalar oracles: `scalar.rs` for Q4_0, Q4_1, Q8_0 and the float types, and for the other
//! types (Q5_0, Q5_1, IQ4_NL, the K-quants, IQ4_XS, MXFP4) the oracles in `oracle_vec_dot.rs` and
//! `oracle_mxfp4.rs` (llama.cpp's `vec_dot` order), `oracle_repacked.rs` and `oracle_mxfp4.rs` (its
//! repacked kernels) and `oracle_tiled.rs` (its tiled K-quant
//! matmul). Every weight type is one row of the table ([`entries`], indexed by its ggml id),
//! and the dispatch (`dispatch.rs`) reads the row with no case for any type. Which of llama.cpp's kernels
//! computes an output — and so which order — depends on how it holds the weight and on where the
//! token sits in its matmul ([`SumOrder::for_token`]).
//!
//! Besides one dot per call, each tier has tiled kernels ([`Kernels::dot_tile`]) that compute a
//! block of outputs in one pass over the blocks: for a batch, 2 rows × [`TILE_TOKENS`] tokens
//! (each weight block unpacked once for several tokens, each activation block loaded once for
//! several rows); for one token (decoding, [`Kernels::gemv`] over a run of rows), [`TILE_ROWS`]
//! rows per pass (the activation block and the scale conversions shared among the rows, the
//! next rows prefetched). Q4_0 in the block-chain order has wider panels on the AVX2 and
//! AVX-512 tiers: [`PANEL_ROWS`] rows in the lanes of vectors (one 512-bit vector, or two
//! 256-bit halves) × up to [`MAX_PANEL_TOKENS`] tokens for a batch, each block of the rows
//! unpacked once for all of them, and sixteen (AVX-512, or packed) or eight rows × one token for
//! decoding. On AVX-512 the same panel takes IQ4_NL prompts in its repacked order (llama.cpp's
//! repacked IQ4_NL kernels are its Q4_0 ones with a value table). The outputs' independent
//! accumulator chains overlap. Every output keeps its own float operations, so a tile is
//! bit-identical to its single dots.
//!
//! Q4_0 is also read packed ([`pack`], [`Layout::Q4_0x16`]; on AVX-512 IQ4_NL too,
//! [`Layout::Iq4NlX16`], decode included): each block of sixteen
//! rows as one sequential 288-byte step, scales and nibbles already in vector order, where the
//! file's layout costs sixteen scattered reads, a gather and a register transpose per block.
//! One token takes the packed single-token kernel; two or more take the steps panels, which
//! read the tokens' activations interleaved block by block ([`PackedSteps`], built once per
//! step) and keep up to eight tokens' sums in registers. A table says which layout it reads
//! fastest ([`Kernels::preferred_layout`]); placement packs its copies accordingly, and
//! [`Kernels::gemv_in`] and [`Kernels::dot_tile_packed`] take packed groups (on any tier: one
//! without packed kernels unpacks first).

mod act;
pub mod blocks;
pub mod codec;
pub mod dequantize;
mod dispatch;
pub mod entries;
pub mod gelu;
pub mod ggml_math;
pub mod half;
mod iq_grid_maps;
pub mod iq_grids;
pub mod iq_signs;
mod legacy_rows;
pub mod mxfp4;
pub mod ops;
pub mod oracle_iq1;
pub mod oracle_mxfp4;
pub mod oracle_repacked;
pub mod oracle_tiled;
pub mod oracle_vec_dot;
pub mod pack;
pub mod pack_pairs;
mod packed_run;
mod packed_steps;
mod quantize_fit;
pub mod quantize_iq1;
pub mod quantize_iq2;
#[cfg(test)]
mod quantize_iq2_tests;
pub mod quantize_iq3;
pub mod quantize_k;
pub mod quantize_ref;
pub mod scalar;
#[cfg(test)]
mod test_util;
mod types;

pub(crate) use act::Q8Group;
use act::{checked_blocks, f32_row, q8_0_row, u16_row};
pub use act::{ActRow, ActType, Q8Row};
pub use packed_steps::{PackedSteps, STEPS_MIN_TOKENS};
#[cfg(target_arch = "x86_64")]
mod x86_64;

use std::fmt;

use blocks::BlockQ8K;
pub use blocks::{BlockQ4_0, BlockQ4_1, BlockQ8_0, BlockQ8_1, QK};
pub use entries::{Entry, Variant};
pub use pack::{Layout, PACK_ROWS};
pub use types::{GgmlType, TypeRow};

/// Environment variable that forces a kernel tier.
pub const KERNELS_ENV: &str = "LOCUS_KERNELS";

/// Where the single-token kernels prefetch the weight lines they will read next.
///
/// Measured alternating: models whose weights read per token far exceed the last-level cache (the
/// generated 1B Q4_0 and Q8_0) decoded faster with lines requested into L2 than into L1, on one
/// thread and on two; SmolLM2 Q4_0, which the L3 mostly holds, decoded faster with L1 (figures:
/// BENCHMARKS.md, "Design measurements behind the code"). From memory, a request to L1 holds one of
/// the core's few fill buffers until the line arrives, and requests stall behind each other; a
/// request to L2 leaves the buffer early. Lines already near, in L3, arrive fast either way and are
/// best put straight into L1.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StreamTarget {
    /// `prefetcht0`: weights that mostly come from the last-level cache.
    L1,
    /// `prefetcht1`: weights that stream from memory.
    L2,
}

impl StreamTarget {
    /// The target for weights of `weight_bytes` read each token on a CPU whose last-level
    /// cache holds `llc_bytes` (unknown: they are taken to stream from memory).
    pub fn for_weights(weight_bytes: u64, llc_bytes: Option<u64>) -> StreamTarget {
        match llc_bytes {
            Some(llc) if weight_bytes <= llc => StreamTarget::L1,
            _ => StreamTarget::L2,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            StreamTarget::L1 => "L1",
            StreamTarget::L2 => "L2",
        }
    }

    /// `l1` or `l2` (any case), as [`PREFETCH_ENV`] takes them.
    pub fn parse(s: &str) -> Option<StreamTarget> {
        match s.trim().to_ascii_lowercase().as_str() {
            "l1" => Some(StreamTarget::L1),
            "l2" => Some(StreamTarget::L2),
            _ => None,
        }
    }
}

/// Environment variable that forces the [`StreamTarget`] (`l1` or `l2`), for measuring.
pub const PREFETCH_ENV: &str = "LOCUS_PREFETCH";

/// The process's [`StreamTarget`] (0: L1, 1: L2): a speed setting only, which no result
/// depends on, so it is one value for the process, set by the loader for the model it loads.
static STREAM_TARGET: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

/// Sets where the single-token kernels prefetch (see [`StreamTarget`]).
pub fn set_stream_target(t: StreamTarget) {
    STREAM_TARGET.store(
        u8::from(t == StreamTarget::L2),
        std::sync::atomic::Ordering::Relaxed,
    );
}

/// Where the single-token kernels prefetch now.
pub fn stream_target() -> StreamTarget {
    match STREAM_TARGET.load(std::sync::atomic::Ordering::Relaxed) {
        0 => StreamTarget::L1,
        _ => StreamTarget::L2,
    }
}

/// An instruction-set tier.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Tier {
    Scalar,
    Avx2,
    Avx512,
}

impl Tier {
    pub fn name(self) -> &'static str {
        match self {
            Tier::Scalar => "scalar",
            Tier::Avx2 => "avx2",
            Tier::Avx512 => "avx512",
        }
    }

    pub fn parse(s: &str) -> Option<Tier> {
        match s.trim().to_ascii_lowercase().as_str() {
            "scalar" => Some(Tier::Scalar),
            "avx2" => Some(Tier::Avx2),
            "avx512" => Some(Tier::Avx512),
            _ => None,
        }
    }

    /// Whether this CPU can run the tier; `Err` says what is missing.
    pub fn available(self) -> Result<(), String> {
        match self {
            Tier::Scalar => Ok(()),
            #[cfg(target_arch = "x86_64")]
            Tier::Avx2 => {
                if is_x86_feature_detected!("avx2")
                    && is_x86_feature_detected!("fma")
                    && is_x86_feature_detected!("f16c")
                {
                    Ok(())
                } else {
                    Err("this CPU lacks AVX2/FMA/F16C".into())
                }
            }
            // The AVX-512 tier has its own tiled matmul kernels and borrows the rest from AVX2.
            #[cfg(target_arch = "x86_64")]
            Tier::Avx512 => {
                Tier::Avx2.available()?;
                if is_x86_feature_detected!("avx512f")
                    && is_x86_feature_detected!("avx512bw")
                    && is_x86_feature_detected!("avx512vl")
                    && is_x86_feature_detected!("avx512vnni")
                {
                    Ok(())
                } else {
                    Err("this CPU lacks AVX-512 F/BW/VL/VNNI".into())
                }
            }
            #[cfg(not(target_arch = "x86_64"))]
            _ => Err("not an x86-64 CPU".into()),
        }
    }
}

impl fmt::Display for Tier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Errors choosing kernels.
#[derive(Debug, Clone, PartialEq)]
pub enum KernelError {
    BadTierName(String),
    TierUnavailable { tier: Tier, why: String },
}

impl fmt::Display for KernelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KernelError::BadTierName(s) => write!(
                f,
                "{KERNELS_ENV}={s:?} is not a kernel tier; use scalar, avx2 or avx512"
            ),
            KernelError::TierUnavailable { tier, why } => {
                write!(f, "{KERNELS_ENV} asks for the {tier} tier, but {why}")
            }
        }
    }
}

impl std::error::Error for KernelError {}

type DotF32 = fn(&[f32], &[f32]) -> f32;
type DotU16 = fn(&[u16], &[f32]) -> f32;
/// RoPE of heads of `head_dim` by (cos, sin) pairs, in place.
type RopeFn = fn(&[(f32, f32)], &mut [f32], usize);
type AttGemv = fn(&[u16], &[f32], usize) -> f32;
/// [`AttGemv`] of rows `x[r * stride..][..y.len()]` into `out[r]`.
type AttGemvRows = fn(&[u16], usize, &[f32], usize, &mut [f32]);
/// [`AttGemvRows`] of several queries against the same rows: `(x, (stride, rows), queries,
/// n_pad, out, out_stride)`, query j's row r into `out[j * out_stride + r]`.
type AttGemvHeads = fn(&[u16], (usize, usize), Queries<'_>, usize, &mut [f32], usize);
type AttGemmHeads = fn(&[f32], (usize, usize), Queries<'_>, &mut [f32], usize);

/// Query vectors that read the same cache rows (the query heads of one KV head): `count`
/// vectors of `len` f32, vector j at `ys[j * stride..][..len]`.
#[derive(Clone, Copy, Debug)]
pub struct Queries<'a> {
    pub ys: &'a [f32],
    pub len: usize,
    pub stride: usize,
    pub count: usize,
}

impl<'a> Queries<'a> {
    /// Query j.
    ///
    /// # Panics
    /// If query j runs past the end of `ys`.
    pub fn get(&self, j: usize) -> &'a [f32] {
        &self.ys[j * self.stride..j * self.stride + self.len]
    }
}

/// [`AttGemvRows`] by one `dot` per row (the tiers without a many-row kernel).
fn att_gemv_each_row(
    dot: AttGemv,
    x: &[u16],
    stride: usize,
    y: &[f32],
    n_pad: usize,
    out: &mut [f32],
) {
    for (r, o) in out.iter_mut().enumerate() {
        *o = dot(&x[r * stride..r * stride + y.len()], y, n_pad);
    }
}

/// Weight rows in one step of [`Kernels::dot_tile`] (callers hand it this many rows at a time):
/// the single-token kernels take them all at once, the multi-token tiles [`BATCH_TILE_ROWS`] at
/// a time. One token (decode) has no tokens to share a weight block's unpacking with, so its
/// kernel shares each activation block and the scale conversions among eight rows instead, and
/// keeps eight independent accumulator chains in flight; eight rows' f16 scales also fill one
/// vector, so the rows' scale products cost one multiply. On the AVX-512 tier a block took
/// less time this way than with one dot at a time, from L2 and from DRAM (the next rows
/// prefetched) alike (figures: BENCHMARKS.md, "Design measurements behind the code").
pub const TILE_ROWS: usize = 8;
/// Weight rows in one multi-token tile. With [`TILE_TOKENS`] it sets how many independent
/// accumulators a tile keeps: 2 × 4 = 8 eight-lane accumulators leave the other half of AVX2's
/// sixteen vector registers for the unpacked weights and the activation block. Of the shapes timed,
/// 2×4 was fastest for every type but Q8_0, where 4×2 was slightly faster (shapes and figures:
/// BENCHMARKS.md, "Design measurements behind the code"). The SIMD tiles carry a tile's scale
/// products in one eight-lane vector, so rows + tokens and rows × tokens must both stay within 8.
const BATCH_TILE_ROWS: usize = 2;
/// Tokens (activation rows) in one multi-token tile of [`Kernels::dot_tile`]; the batch size
/// (`MAX_BATCH` = 64) is a multiple of it. Tokens past the last whole multiple go through the
/// single-token kernels.
pub const TILE_TOKENS: usize = 4;

/// Tokens whose block sums run side by side in a panel kernel (one group; a panel takes up to
/// [`MAX_PANEL_TOKENS`]; a last group may be padded). Only the Q4_0 block-chain order has
/// panels (on the AVX2 and AVX-512 tiers): its chains keep one f32 per output, so the rows
/// share the lanes of vectors and the integer block sums need no horizontal reduction.
pub const PANEL_TOKENS: usize = 8;
/// Most tokens one panel pass takes (the model's batch, `MAX_BATCH`): each block of the rows is
/// unpacked once for all of them. IQ4_NL's pp128 on Zen 5 went up 10% from 32 to 64.
pub const MAX_PANEL_TOKENS: usize = 64;
/// Rows of a panel: one 512-bit vector of f32 lanes. Callers hand [`Kernels::dot_tile`] this
/// many rows at a time (it takes any number).
pub const PANEL_ROWS: usize = 16;

/// Rows × tokens of the wide Q8_0 tile (AVX-512 tier): two outputs per 512-bit vector, 4 × 8
/// outputs in sixteen accumulators.
const WIDE_ROWS: usize = 4;
const WIDE_TOKENS: usize = 8;

const _: () = assert!(TILE_ROWS.is_multiple_of(BATCH_TILE_ROWS));
const _: () = assert!(PANEL_ROWS.is_multiple_of(TILE_ROWS));
const _: () = assert!(PACK_ROWS == PANEL_ROWS);

/// A panel kernel: `out[t * PANEL_ROWS + r] = dot(w[r], a[t])` for [`PANEL_ROWS`] rows and
/// the first `tokens` tokens of the groups (`tokens.div_ceil(PANEL_TOKENS)` of them, at most
/// [`MAX_PANEL_TOKENS`] tokens; a last group's padding is not written).
type Panel = fn(&[&[BlockQ4_0]; PANEL_ROWS], &[Q8Group], usize, &mut [f32]);
/// A single-token panel over one packed group: `out[r] = dot(row r, a)` for its
/// [`PACK_ROWS`] rows.
type PackedGemv = fn(&[BlockQ4_0], &Q8Row, &mut [f32]);
/// A wide tile: `out[t][r] = dot(w[r], a[t])` for [`WIDE_ROWS`] rows × [`WIDE_TOKENS`] tokens.
type Wide = WideOf<BlockQ8_0>;
/// A wide tile of weight blocks `B` against Q8_0 activations (AVX2's Q5_0 has one too).
type WideOf<B> = fn(&[&[B]; WIDE_ROWS], &Q8Group, &mut [[f32; WIDE_ROWS]; WIDE_TOKENS]);

/// The order in which a quantized dot product sums its blocks. llama.cpp uses two for each
/// type: that of its `vec_dot` (for most types eight f32 lanes reduced at the end, as tinyBLAS
/// does too), and, for the types it repacks into interleaved 8-row blocks at load (Q4_0, Q4_K,
/// Q2_K, IQ4_NL), that of its repacked kernels (for Q4_0 one scalar chain over blocks; the
/// others' are in `oracle_repacked.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SumOrder {
    /// `vec_dot`'s order (weights llama.cpp keeps as the file has them, one token).
    Lanes,
    /// The repacked kernels' gemv (for Q4_0 and IQ4_NL also their gemm).
    BlockChain,
    /// The repacked gemm of Q4_K and Q2_K (see `oracle_repacked.rs`); as `BlockChain` for other types.
    RepackedGemm,
    /// The batched kernel of weights llama.cpp keeps as they are (tinyBLAS, the tiled K-quant
    /// matmul), where its order differs from `vec_dot`'s; as `Lanes` for other types.
    Batched,
}

impl SumOrder {
    /// The order of output `i` of a matmul over `m` tokens (llama.cpp's micro-batch, or the
    /// tokens it keeps for the last layer) with weights of `ty` stored as `base` says
    /// (`BlockChain`: repacked by llama.cpp at load; `Lanes`: not).
    pub fn for_token(ty: GgmlType, base: SumOrder, m: usize, i: usize) -> SumOrder {
        match entries::scalar_entry(ty) {
            Some(e) => e.order_for(base, m, i),
            // A type without kernels: the two orders of the types llama.cpp does not tile.
            None => match base {
                SumOrder::Lanes | SumOrder::Batched => SumOrder::Lanes,
                SumOrder::BlockChain | SumOrder::RepackedGemm => SumOrder::BlockChain,
            },
        }
    }

    /// How llama.cpp sums the dot products of an f32 or f16 weight matrix (its AVX-512 build runs
    /// one tinyBLAS instance for both) of `rows` rows of `cols`
    /// values in a matmul of two tokens or more: tinyBLAS ([`SumOrder::Batched`]) where its
    /// x86 build takes the matrix (rows of whole 16-lane vectors and a row count it tiles: a
    /// multiple of 4), `ggml_vec_dot_f32` ([`SumOrder::Lanes`]) where it declines, as for a
    /// single token ([`SumOrder::for_token`]).
    pub fn f32_order(rows: usize, cols: usize) -> SumOrder {
        const TINYBLAS_K: usize = 16;
        Self::tinyblas_order(rows, cols, TINYBLAS_K)
    }

    /// [`SumOrder::f32_order`] of a bf16 matrix: tinyBLAS's AVX512_BF16 instance takes rows of
    /// whole 32-value steps.
    pub fn bf16_order(rows: usize, cols: usize) -> SumOrder {
        const TINYBLAS_K_BF16: usize = 32;
        Self::tinyblas_order(rows, cols, TINYBLAS_K_BF16)
    }

    fn tinyblas_order(rows: usize, cols: usize, k: usize) -> SumOrder {
        const TINYBLAS_M: usize = 4;
        if cols.is_multiple_of(k) && rows.is_multiple_of(TINYBLAS_M) {
            SumOrder::Batched
        } else {
            SumOrder::Lanes
        }
    }
}

/// The dispatch table, all from one tier: one row per weight type ([`Entry`], indexed by the
/// type's ggml id; the dispatch in `dispatch.rs` reads them), and the operations that are not
/// weight types' (attention, activations, RoPE, the activations' quantizers).
#[derive(Clone, Copy)]
pub struct Kernels {
    pub tier: Tier,
    /// f32·f32 dot product of attention over an f32 cache.
    f32: DotF32,
    att_gemv: AttGemv,
    att_gemv_rows: AttGemvRows,
    /// A tier's kernel for [`Kernels::att_dot_decode_heads`] that converts each cache row once
    /// for all the queries; without one, the queries go one at a time through `att_gemv_rows`.
    att_gemv_heads: Option<AttGemvHeads>,
    /// A tier's kernel for [`Kernels::att_dot_batch_heads`] that holds several queries' sums
    /// against the same rows at once; without one, the queries go one at a time.
    att_gemm_heads: Option<AttGemmHeads>,
    att_gemm: DotU16,
    att_gemm_rows: fn(&[f32], usize, &[f32], &mut [f32]),
    widen_f16: fn(&[u16], &mut [f32]),
    round_f16: fn(&mut [f32]),
    softmax: fn(&mut [f32], f32),
    swiglu: fn(&mut [f32], &[f32]),
    geglu: fn(&mut [f32], &[f32]),
    rope: RopeFn,
    rope_neox: RopeFn,
    kv_add_q8_0: fn(&[BlockQ8_0], f32, &mut [f32]),
    quantize_q8_0: fn(&[f32], &mut [BlockQ8_0]),
    quantize_q8_1: fn(&[f32], &mut [BlockQ8_1]),
    quantize_q8_k: fn(&[f32], &mut [BlockQ8K]),
    /// Every weight type's row, in [`entries::SCALAR`]'s order ([`Kernels::entry`]).
    entries: [Entry; entries::SCALAR.len()],
}

impl fmt::Debug for Kernels {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Kernels").field("tier", &self.tier).finish()
    }
}

impl Kernels {
    /// The scalar oracle table.
    pub fn scalar() -> Kernels {
        Kernels {
            tier: Tier::Scalar,
            f32: scalar::dot_f32,
            att_gemv: ggml_math::dot_f16_gemv,
            att_gemv_rows: |x, stride, y, n_pad, out| {
                att_gemv_each_row(ggml_math::dot_f16_gemv, x, stride, y, n_pad, out)
            },
            att_gemv_heads: None,
            att_gemm_heads: None,
            att_gemm: ggml_math::dot_f16_gemm,
            att_gemm_rows: legacy_rows::gemm_rows_scalar,
            widen_f16: |src, dst| {
                assert_eq!(src.len(), dst.len(), "widen_f16 length mismatch");
                for (d, s) in dst.iter_mut().zip(src) {
                    *d = half::f16_to_f32(*s);
                }
            },
            round_f16: |x| x.iter_mut().for_each(|v| *v = ggml_math::round_f16(*v)),
            softmax: ggml_math::softmax,
            swiglu: ggml_math::swiglu,
            geglu: gelu::geglu,
            rope: ggml_math::rope,
            rope_neox: ggml_math::rope_neox,
            kv_add_q8_0: |row, p, out| ops::add_scaled_q8_0(row, p, out),
            quantize_q8_0: blocks::quantize_act_q8_0,
            quantize_q8_1: blocks::quantize_act_q8_1,
            quantize_q8_k: dequantize::quantize_act_q8_k,
            entries: entries::SCALAR,
        }
    }

    /// The table for `tier`, or why this CPU cannot run it.
    pub fn for_tier(tier: Tier) -> Result<Kernels, KernelError> {
        tier.available()
            .map_err(|why| KernelError::TierUnavailable { tier, why })?;
        Ok(match tier {
            Tier::Scalar => Kernels::scalar(),
            #[cfg(target_arch = "x86_64")]
            Tier::Avx2 => {
                // The token is there: `available` checked the same features.
                let token = x86_64::Avx2::detect().expect("AVX2 detected");
                let mut entries = x86_64::avx2_kquant::entries();
                legacy_rows::avx2_rows(token, &mut entries);
                Kernels {
                    tier,
                    f32: x86_64::avx2::dot_f32,
                    att_gemv: x86_64::avx2::att_gemv,
                    att_gemv_rows: |x, stride, y, n_pad, out| {
                        att_gemv_each_row(x86_64::avx2::att_gemv, x, stride, y, n_pad, out)
                    },
                    att_gemm: x86_64::avx2::att_gemm,
                    att_gemm_rows: x86_64::avx2::att_gemm_rows,
                    widen_f16: x86_64::avx2::widen_f16,
                    round_f16: x86_64::avx2::round_f16,
                    softmax: x86_64::avx2::softmax,
                    swiglu: x86_64::avx2::swiglu,
                    kv_add_q8_0: x86_64::avx2::kv_add_q8_0,
                    rope: x86_64::avx2::rope,
                    rope_neox: x86_64::avx2::rope_neox,
                    geglu: x86_64::avx2::geglu,
                    quantize_q8_0: x86_64::avx2::quantize_act_q8_0,
                    quantize_q8_1: x86_64::avx2::quantize_act_q8_1,
                    quantize_q8_k: x86_64::avx2_kquant::quantize_act_q8_k,
                    entries,
                    ..Kernels::scalar()
                }
            }
            #[cfg(target_arch = "x86_64")]
            Tier::Avx512 => {
                let mut entries = x86_64::avx512_kquant::entries();
                legacy_rows::avx512_rows(&mut entries);
                Kernels {
                    tier,
                    swiglu: x86_64::avx512::swiglu,
                    kv_add_q8_0: x86_64::avx512::kv_add_q8_0,
                    softmax: x86_64::avx512::softmax,
                    att_gemv: x86_64::avx512::att_gemv,
                    att_gemv_rows: x86_64::avx512::att_gemv_rows,
                    att_gemv_heads: Some(x86_64::avx512::att_gemv_heads),
                    att_gemm_rows: x86_64::avx512::att_gemm_rows,
                    att_gemm_heads: Some(x86_64::avx512::att_gemm_heads),
                    entries,
                    ..Kernels::for_tier(Tier::Avx2)?
                }
            }
            #[cfg(not(target_arch = "x86_64"))]
            _ => unreachable!("available() refused tiers without kernels"),
        })
    }

    /// The best tier this CPU runs, unless `LOCUS_KERNELS` forces one.
    pub fn detect() -> Result<Kernels, KernelError> {
        match std::env::var(KERNELS_ENV) {
            Ok(s) if !s.is_empty() => {
                let tier = Tier::parse(&s).ok_or(KernelError::BadTierName(s))?;
                Kernels::for_tier(tier)
            }
            _ => Ok([Tier::Avx512, Tier::Avx2]
                .into_iter()
                .find_map(|t| Kernels::for_tier(t).ok())
                .unwrap_or_else(Kernels::scalar)),
        }
    }
    /// Quantizes `x` into `act` as [`ActRow::set`] does (same bits), with this tier's
    /// quantizers.
    #[inline]
    pub fn quantize_act(&self, act: &mut ActRow, x: &[f32]) {
        act.set_with(
            self.quantize_q8_0,
            self.quantize_q8_1,
            self.quantize_q8_k,
            x,
        )
    }

    /// f32·f32 dot product (attention scores and the like).
    #[inline]
    pub fn dot_f32(&self, x: &[f32], y: &[f32]) -> f32 {
        (self.f32)(x, y)
    }

    /// Attention dot product over f16 cache entries as llama.cpp computes it for a single
    /// token (`ggml_vec_dot_f16`); `n_pad` is ggml's padded row length.
    #[inline]
    pub fn att_dot_decode(&self, x: &[u16], y: &[f32], n_pad: usize) -> f32 {
        (self.att_gemv)(x, y, n_pad)
    }

    /// `out[r] = att_dot_decode(row r, y, n_pad)` for every r, where row r is
    /// `x[r * stride..][..y.len()]` (f16 bits); bit for bit.
    ///
    /// # Panics
    /// If a row runs past the end of `x`.
    #[inline]
    pub fn att_dot_decode_rows(
        &self,
        x: &[u16],
        stride: usize,
        y: &[f32],
        n_pad: usize,
        out: &mut [f32],
    ) {
        (self.att_gemv_rows)(x, stride, y, n_pad, out)
    }

    /// [`Kernels::att_dot_decode_rows`] of every query in `queries` against the same `rows`
    /// rows (row r at `x[r * stride..][..queries.len]`): query j's row r into
    /// `out[j * out_stride + r]`, bit for bit as one query at a time gives it. The query heads
    /// of a KV head read its keys and values this way, each f16 row widened once for all.
    ///
    /// # Panics
    /// If a row runs past the end of `x`, a query past its buffer, or an output past `out`.
    pub fn att_dot_decode_heads(
        &self,
        x: &[u16],
        (stride, rows): (usize, usize),
        queries: Queries<'_>,
        n_pad: usize,
        out: &mut [f32],
        out_stride: usize,
    ) {
        if let Some(f) = self.att_gemv_heads {
            return f(x, (stride, rows), queries, n_pad, out, out_stride);
        }
        for j in 0..queries.count {
            let o = &mut out[j * out_stride..j * out_stride + rows];
            (self.att_gemv_rows)(x, stride, queries.get(j), n_pad, o);
        }
    }

    /// Softmax of `x · scale` with ggml's arithmetic (see `ggml_math::softmax`).
    #[inline]
    pub fn softmax(&self, x: &mut [f32], scale: f32) {
        (self.softmax)(x, scale)
    }

    /// RoPE of every head of `x` by the (cos, sin) pairs `cache`, with ggml's arithmetic (see
    /// `ggml_math::rope`).
    #[inline]
    pub fn rope(&self, cache: &[(f32, f32)], x: &mut [f32], head_dim: usize) {
        (self.rope)(cache, x, head_dim)
    }

    /// RoPE with the NEOX pairing (Qwen2, Qwen3, Gemma 3): in every head of `head_dim`
    /// elements, the pairs `(i, i + n_dims/2)` turn by `cache[i]` = (cos, sin), where
    /// `n_dims = 2 · cache.len()`; elements from `n_dims` on pass through. ggml's arithmetic
    /// (see `ggml_math::rope_neox`), the same bits in every tier.
    ///
    /// # Panics
    /// If `x` is not a whole number of heads, or the rotated dimensions exceed `head_dim`.
    #[inline]
    pub fn rope_neox(&self, cache: &[(f32, f32)], x: &mut [f32], head_dim: usize) {
        assert!(
            head_dim > 0 && x.len().is_multiple_of(head_dim),
            "rope_neox: {} values are not whole heads of {head_dim}",
            x.len()
        );
        assert!(
            2 * cache.len() <= head_dim,
            "rope_neox: {} rotated pairs exceed heads of {head_dim}",
            cache.len()
        );
        (self.rope_neox)(cache, x, head_dim)
    }

    /// SwiGLU of one row with ggml's arithmetic (see `ggml_math::swiglu`).
    #[inline]
    pub fn swiglu(&self, gate: &mut [f32], up: &[f32]) {
        (self.swiglu)(gate, up)
    }

    /// GEGLU of one row, `gate[i] = gelu(gate[i]) · up[i]` with tanh-approximated GELU, as
    /// ggml's `ggml_vec_geglu_f32` computes it (its f16 GELU table; see [`gelu`]), the same bits
    /// in every tier.
    ///
    /// # Panics
    /// If the lengths differ.
    #[inline]
    pub fn geglu(&self, gate: &mut [f32], up: &[f32]) {
        assert_eq!(gate.len(), up.len(), "geglu length mismatch");
        (self.geglu)(gate, up)
    }

    /// `out[j] += p × v[j]` for the values of one Q8_0 row ([`ops::add_scaled_q8_0`]'s bits in
    /// every tier): a q8_0 KV cache's weighted sum of value rows.
    #[inline]
    pub fn kv_add_q8_0(&self, row: &[u8], p: f32, out: &mut [f32]) {
        let blocks = checked_blocks::<BlockQ8_0>(row, out.len() / QK);
        assert_eq!(blocks.len() * QK, out.len(), "kv_add_q8_0 length mismatch");
        (self.kv_add_q8_0)(blocks, p, out)
    }

    /// Attention dot product as llama.cpp computes it for a batch of tokens (tinyBLAS).
    #[inline]
    pub fn att_dot_batch(&self, x: &[u16], y: &[f32]) -> f32 {
        (self.att_gemm)(x, y)
    }

    /// `out[r] = att_dot_batch(row r, y)` for every r, where row r is `x[r * stride..][..y.len()]`
    /// holding f16 values already widened to f32 ([`Kernels::widen_f16`]); bit for bit.
    ///
    /// # Panics
    /// If a row runs past the end of `x`.
    #[inline]
    pub fn att_dot_batch_rows(&self, x: &[f32], stride: usize, y: &[f32], out: &mut [f32]) {
        (self.att_gemm_rows)(x, stride, y, out)
    }

    /// [`Kernels::att_dot_batch_rows`] of every query in `queries` against the same `rows`
    /// rows of widened values (row r at `x[r * stride..][..queries.len]`): query j's row r into
    /// `out[j * out_stride + r]`, bit for bit as one query at a time gives it. A set of heads
    /// reads a block of cells once this way.
    ///
    /// # Panics
    /// If a row runs past the end of `x`, a query past its buffer, or an output past `out`.
    pub fn att_dot_batch_heads(
        &self,
        x: &[f32],
        (stride, rows): (usize, usize),
        queries: Queries<'_>,
        out: &mut [f32],
        out_stride: usize,
    ) {
        if let Some(f) = self.att_gemm_heads {
            return f(x, (stride, rows), queries, out, out_stride);
        }
        for j in 0..queries.count {
            let o = &mut out[j * out_stride..j * out_stride + rows];
            (self.att_gemm_rows)(x, stride, queries.get(j), o);
        }
    }

    /// f16 → f32 of a slice (exact).
    ///
    /// # Panics
    /// If the lengths differ.
    #[inline]
    pub fn widen_f16(&self, src: &[u16], dst: &mut [f32]) {
        (self.widen_f16)(src, dst)
    }

    /// Each value of `x` rounded to f16 and back, in place ([`ggml_math::round_f16`]: round
    /// to nearest even, as ggml converts an f32 operand to an f16 cache's type).
    #[inline]
    pub fn round_f16(&self, x: &mut [f32]) {
        (self.round_f16)(x)
    }
}

/// Dequantizes one row of `ty` into `out` (for embedding lookups and tests).
///
/// # Panics
/// For a type without kernels ([`GgmlType::supported`]; the loader refuses those), or a row
/// that is not whole blocks.
pub fn dequantize_row(ty: GgmlType, row: &[u8], out: &mut [f32]) {
    match ty.codec() {
        Some(c) => (c.dequantize)(row, out),
        None => panic!("dequantize_row: unsupported type {}", ty.name()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weights_beyond_the_last_level_cache_prefetch_into_l2() {
        let mib = 1u64 << 20;
        assert_eq!(
            StreamTarget::for_weights(72 * mib, Some(260 * mib)),
            StreamTarget::L1
        );
        assert_eq!(
            StreamTarget::for_weights(433 * mib, Some(260 * mib)),
            StreamTarget::L2
        );
        assert_eq!(StreamTarget::for_weights(mib, None), StreamTarget::L2);
        assert_eq!(StreamTarget::parse(" L2\n"), Some(StreamTarget::L2));
        assert_eq!(StreamTarget::parse("l1"), Some(StreamTarget::L1));
        assert_eq!(StreamTarget::parse("l3"), None);
    }
}
