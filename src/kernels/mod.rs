//! Compute kernels: block formats, dot products, and the runtime dispatch table.
//!
//! Kernels know blocks and slices, never files or nodes. The CPU is probed once
//! ([`Kernels::detect`]); the result is a table of plain function pointers, one per weight type,
//! chosen from the best tier the CPU supports. `LOCUS_KERNELS=scalar|avx2|avx512` forces a tier
//! (a tier the CPU lacks is an error, not a silent downgrade). Every tier is tested against the
//! scalar oracles: `scalar.rs` for Q4_0, Q4_1, Q8_0 and the float types, and for the types of
//! the generic path (Q5_0, Q5_1, IQ4_NL, the K-quants, IQ4_XS) the oracles in `kdot.rs`
//! (llama.cpp's `vec_dot` order), `krepack.rs` (its repacked kernels) and `ktiled.rs` (its tiled
//! K-quant matmul), one row of the table each ([`entries`]). Which of llama.cpp's kernels
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

pub mod blocks;
pub mod codec;
pub mod dequantize;
pub mod entries;
pub mod gelu;
pub mod ggml_math;
pub mod half;
pub mod ops;
pub mod oracle_repacked;
pub mod oracle_tiled;
pub mod oracle_vec_dot;
pub mod pack;
pub mod pack_pairs;
mod packed_run;
mod packed_steps;
pub mod quantize_ref;
pub mod scalar;
#[cfg(test)]
mod test_util;
// The modules' names before they said what they hold, kept for the code that still uses them.
pub use blocks as kblocks;
pub use dequantize as kdequant;
pub use oracle_repacked as krepack;
pub use oracle_tiled as ktiled;
pub use oracle_vec_dot as kdot;
pub use quantize_ref as kquantize;
mod types;

use packed_steps::StepsPanel;
pub use packed_steps::{PackedSteps, STEPS_MIN_TOKENS};
#[cfg(target_arch = "x86_64")]
mod x86_64;

use std::fmt;

pub use blocks::{BlockQ4_0, BlockQ4_1, BlockQ8_0, BlockQ8_1, QK};
pub use entries::{Entry, Variant};
use kblocks::BlockQ8K;
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

/// The activation a weight type's dot product consumes (ggml's `vec_dot_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ActType {
    F32,
    Q8_0,
    Q8_1,
    Q8K,
}

impl ActType {
    /// Every activation type, in the order batches keep their rows.
    pub const ALL: [ActType; 4] = [ActType::F32, ActType::Q8_0, ActType::Q8_1, ActType::Q8K];

    /// The activation of weights of `ty` (the type table's; F32 for a type without kernels).
    pub fn for_weight(ty: GgmlType) -> ActType {
        ty.act().unwrap_or(ActType::F32)
    }

    /// Elements per activation block (a row's length must be a multiple).
    pub fn block(self) -> usize {
        match self {
            ActType::F32 => 1,
            ActType::Q8_0 | ActType::Q8_1 => QK,
            ActType::Q8K => kblocks::QK_K,
        }
    }
}

/// An activation row quantized for one weight type's dot product.
#[derive(Clone, Debug)]
pub enum ActRow {
    F32(Vec<f32>),
    Q8_0(Q8Row),
    Q8_1(Vec<BlockQ8_1>),
    Q8K(Vec<BlockQ8K>),
}

/// An activation row in Q8_0 blocks, with each block's integer sum and f32 scale alongside:
/// the panel kernels read those per token and block, where re-deriving them would cost more
/// than a quarter of their work, once for every step of rows.
#[derive(Clone, Debug, Default)]
pub struct Q8Row {
    pub blocks: Vec<BlockQ8_0>,
    /// Σ qs of each block.
    pub sums: Vec<i32>,
    /// Each block's `d` as f32 (exact: every f16 is an f32).
    pub scales: Vec<f32>,
}

impl Q8Row {
    /// Fills `sums` and `scales` from `blocks`.
    fn derive(&mut self) {
        self.sums.clear();
        self.sums.extend(
            self.blocks
                .iter()
                .map(|b| b.qs.iter().map(|&q| i32::from(q)).sum::<i32>()),
        );
        self.scales.clear();
        self.scales
            .extend(self.blocks.iter().map(|b| blocks::scale(b.d)));
    }
}

impl ActRow {
    /// An empty buffer of the right kind for weights of type `ty`.
    pub fn new_for(ty: GgmlType) -> ActRow {
        ActRow::of(ActType::for_weight(ty))
    }

    /// An empty buffer of activation type `t`.
    pub fn of(t: ActType) -> ActRow {
        match t {
            ActType::F32 => ActRow::F32(Vec::new()),
            ActType::Q8_0 => ActRow::Q8_0(Q8Row::default()),
            ActType::Q8_1 => ActRow::Q8_1(Vec::new()),
            ActType::Q8K => ActRow::Q8K(Vec::new()),
        }
    }

    /// Quantizes `x` into this buffer (resizing it) with the scalar quantizers; `x.len()` must
    /// be a multiple of the activation's block size (32, or 256 for Q8_K; callers check row
    /// lengths when the model is loaded). [`Kernels::quantize_act`] does the same with the
    /// table's tier.
    pub fn set(&mut self, x: &[f32]) {
        self.set_with(
            blocks::quantize_act_q8_0,
            blocks::quantize_act_q8_1,
            kdequant::quantize_act_q8_k,
            x,
        )
    }

    fn set_with(
        &mut self,
        q8_0: fn(&[f32], &mut [BlockQ8_0]),
        q8_1: fn(&[f32], &mut [BlockQ8_1]),
        q8_k: fn(&[f32], &mut [BlockQ8K]),
        x: &[f32],
    ) {
        match self {
            ActRow::F32(v) => {
                v.clear();
                v.extend_from_slice(x);
            }
            ActRow::Q8_0(v) => {
                v.blocks.resize(x.len() / QK, BlockQ8_0::default());
                q8_0(x, &mut v.blocks);
                v.derive();
            }
            ActRow::Q8_1(v) => {
                v.resize(x.len() / QK, BlockQ8_1::default());
                q8_1(x, v);
            }
            ActRow::Q8K(v) => {
                v.resize(x.len() / kblocks::QK_K, BlockQ8K::default());
                q8_k(x, v);
            }
        }
    }

    /// Number of activation elements held.
    pub fn len(&self) -> usize {
        match self {
            ActRow::F32(v) => v.len(),
            ActRow::Q8_0(v) => v.blocks.len() * QK,
            ActRow::Q8_1(v) => v.len() * QK,
            ActRow::Q8K(v) => v.len() * kblocks::QK_K,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

type DotQ4_0 = fn(&[BlockQ4_0], &[BlockQ8_0]) -> f32;
type DotQ4_1 = fn(&[BlockQ4_1], &[BlockQ8_1]) -> f32;
type DotQ8_0 = fn(&[BlockQ8_0], &[BlockQ8_0]) -> f32;
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

/// Rows per call of a generic-path type's tile kernel in [`Kernels::gemv`] (its outputs and row
/// slices live on the stack).
const GEMV_STEP: usize = PANEL_ROWS;

const _: () = assert!(TILE_ROWS.is_multiple_of(BATCH_TILE_ROWS));
const _: () = assert!(PANEL_ROWS.is_multiple_of(TILE_ROWS));
const _: () = assert!(PACK_ROWS == PANEL_ROWS);

/// A tiled kernel: `out[t][r] = dot(w[r], a[t])`, every row and activation of one length.
type Tile<W, A> = fn(&[&[W]; BATCH_TILE_ROWS], &[&[A]; TILE_TOKENS], &mut TileOut);
/// A tile's outputs, token-major.
type TileOut = [[f32; BATCH_TILE_ROWS]; TILE_TOKENS];
/// A panel kernel: `out[t * PANEL_ROWS + r] = dot(w[r], a[t])` for [`PANEL_ROWS`] rows and
/// the first `tokens` tokens of the groups (`tokens.div_ceil(PANEL_TOKENS)` of them, at most
/// [`MAX_PANEL_TOKENS`] tokens; a last group's padding is not written).
type Panel = fn(&[&[BlockQ4_0]; PANEL_ROWS], &[Q8Group], usize, &mut [f32]);
/// A single-token panel: `out[r] = dot(row r, a)` for `rows` rows held back to back
/// (`out.len() == rows`).
#[derive(Clone, Copy)]
struct GemvPanel {
    rows: usize,
    run: fn(&[BlockQ4_0], &Q8Row, &mut [f32]),
}
/// A single-token panel over one packed group: `out[r] = dot(row r, a)` for its
/// [`PACK_ROWS`] rows.
type PackedGemv = fn(&[BlockQ4_0], &Q8Row, &mut [f32]);
/// A wide tile: `out[t][r] = dot(w[r], a[t])` for [`WIDE_ROWS`] rows × [`WIDE_TOKENS`] tokens.
type Wide = fn(&[&[BlockQ8_0]; WIDE_ROWS], &Q8Group, &mut [[f32; WIDE_ROWS]; WIDE_TOKENS]);
/// A single-token kernel: `out[r] = dot(w[r], a)` for [`TILE_ROWS`] rows of one length.
type Rows<W, A> = fn(&[&[W]; TILE_ROWS], &[A], &mut [f32; TILE_ROWS]);

/// The order in which a quantized dot product sums its blocks. llama.cpp uses two for each
/// type: that of its `vec_dot` (for most types eight f32 lanes reduced at the end, as tinyBLAS
/// does too), and, for the types it repacks into interleaved 8-row blocks at load (Q4_0, Q4_K,
/// Q2_K, IQ4_NL), that of its repacked kernels (for Q4_0 one scalar chain over blocks; the
/// others' are in `krepack.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SumOrder {
    /// `vec_dot`'s order (weights llama.cpp keeps as the file has them, one token).
    Lanes,
    /// The repacked kernels' gemv (for Q4_0 and IQ4_NL also their gemm).
    BlockChain,
    /// The repacked gemm of Q4_K and Q2_K (see `krepack.rs`); as `BlockChain` for other types.
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
            // f32 weights: tinyBLAS where the matrix allows it ([`SumOrder::f32_order`]) and the
            // matmul has two tokens or more (llamafile declines a single one).
            None if ty == GgmlType::F32 => match (base, m) {
                (SumOrder::Batched, 2..) => SumOrder::Batched,
                _ => SumOrder::Lanes,
            },
            None => base.plain(),
        }
    }

    /// How llama.cpp sums the dot products of an f32 weight matrix of `rows` rows of `cols`
    /// values in a matmul of two tokens or more: tinyBLAS ([`SumOrder::Batched`]) where its
    /// x86 build takes the matrix (rows of whole 16-lane vectors and a row count it tiles: a
    /// multiple of 4), `ggml_vec_dot_f32` ([`SumOrder::Lanes`]) where it declines, as for a
    /// single token ([`SumOrder::for_token`]).
    pub fn f32_order(rows: usize, cols: usize) -> SumOrder {
        const TINYBLAS_K: usize = 16;
        const TINYBLAS_M: usize = 4;
        if cols.is_multiple_of(TINYBLAS_K) && rows.is_multiple_of(TINYBLAS_M) {
            SumOrder::Batched
        } else {
            SumOrder::Lanes
        }
    }

    /// The two orders the types outside the generic path know.
    #[inline]
    fn plain(self) -> SumOrder {
        match self {
            SumOrder::Lanes | SumOrder::Batched => SumOrder::Lanes,
            SumOrder::BlockChain | SumOrder::RepackedGemm => SumOrder::BlockChain,
        }
    }
}

/// [`PANEL_TOKENS`] tokens' Q8_0 activations cut to one length: what the panel and wide
/// kernels read. Built once per [`Kernels::dot_tile`] call (plain code, outside the
/// `#[target_feature]` kernels, where building arrays of slices would not inline).
#[derive(Clone, Copy)]
pub(crate) struct Q8Group<'a> {
    pub blocks: [&'a [BlockQ8_0]; PANEL_TOKENS],
    pub sums: [&'a [i32]; PANEL_TOKENS],
    pub scales: [&'a [f32]; PANEL_TOKENS],
}

impl<'a> Q8Group<'a> {
    /// The groups of up to [`MAX_PANEL_TOKENS`] tokens `acts` (at least one), each `n` blocks:
    /// group g holds tokens 8g..8g + 8, a last partial group padded with its last token, and
    /// the array's groups past them repeat the last token.
    fn all(acts: &'a [ActRow], n: usize) -> [Q8Group<'a>; MAX_PANEL_TOKENS / PANEL_TOKENS] {
        std::array::from_fn(|g| Q8Group::new(&acts[(g * PANEL_TOKENS).min(acts.len() - 1)..], n))
    }

    /// The group of `acts` (at least one; past the end the last repeats), each `n` blocks.
    ///
    /// # Panics
    /// If an activation is not Q8_0 of `n` blocks.
    fn new(acts: &'a [ActRow], n: usize) -> Q8Group<'a> {
        let row = |t: usize| q8_0_row(&acts[t.min(acts.len() - 1)], n);
        Q8Group {
            blocks: std::array::from_fn(|t| &row(t).blocks[..n]),
            sums: std::array::from_fn(|t| &row(t).sums[..n]),
            scales: std::array::from_fn(|t| &row(t).scales[..n]),
        }
    }
}

/// The dispatch table: one function pointer per weight type, all from one tier.
#[derive(Clone, Copy)]
pub struct Kernels {
    pub tier: Tier,
    q4_0: DotQ4_0,
    q4_0_chain: DotQ4_0,
    q4_1: DotQ4_1,
    q8_0: DotQ8_0,
    f32: DotF32,
    /// f32 weights that tinyBLAS declines: `ggml_vec_dot_f32`'s order.
    f32_vec: DotF32,
    f16: DotU16,
    bf16: DotU16,
    att_gemv: AttGemv,
    att_gemv_rows: AttGemvRows,
    /// A tier's kernel for [`Kernels::att_dot_decode_heads`] that converts each cache row once
    /// for all the queries; without one, the queries go one at a time through `att_gemv_rows`.
    att_gemv_heads: Option<AttGemvHeads>,
    att_gemm: DotU16,
    att_gemm_rows: fn(&[f32], usize, &[f32], &mut [f32]),
    widen_f16: fn(&[u16], &mut [f32]),
    softmax: fn(&mut [f32], f32),
    swiglu: fn(&mut [f32], &[f32]),
    geglu: fn(&mut [f32], &[f32]),
    rope: RopeFn,
    rope_neox: RopeFn,
    kv_add_q8_0: fn(&[BlockQ8_0], f32, &mut [f32]),
    q4_0_tile: Tile<BlockQ4_0, BlockQ8_0>,
    q4_0_chain_tile: Tile<BlockQ4_0, BlockQ8_0>,
    q4_1_tile: Tile<BlockQ4_1, BlockQ8_1>,
    q8_0_tile: Tile<BlockQ8_0, BlockQ8_0>,
    q4_0_chain_panel: Option<Panel>,
    /// The block-chain panel of IQ4_NL rows (its repacked order), over the same blocks.
    iq4_nl_chain_panel: Option<Panel>,
    /// The fewest tokens past the last whole [`PANEL_TOKENS`] group that go through the panels
    /// (Q4_0's and IQ4_NL's) in a padded group rather than through the tiles (above
    /// `PANEL_TOKENS - 1`: never).
    q4_0_panel_pad: usize,
    q4_0_chain_gemv: Option<GemvPanel>,
    /// The single-token kernel and the steps panel over one packed group of Q4_0 rows
    /// ([`Layout::Q4_0x16`]); a table with them asks for packed copies
    /// ([`Kernels::preferred_layout`]).
    q4_0_packed: Option<(PackedGemv, StepsPanel)>,
    /// The same two of IQ4_NL rows ([`Layout::Iq4NlX16`], its repacked order), over the same
    /// blocks.
    iq4_nl_packed: Option<(PackedGemv, StepsPanel)>,
    /// The wide Q8_0 tiles over a group of [`WIDE_TOKENS`] tokens and over its first half.
    q8_0_wide: Option<(Wide, Wide)>,
    q4_0_rows: Rows<BlockQ4_0, BlockQ8_0>,
    q4_0_chain_rows: Rows<BlockQ4_0, BlockQ8_0>,
    q4_1_rows: Rows<BlockQ4_1, BlockQ8_1>,
    q8_0_rows: Rows<BlockQ8_0, BlockQ8_0>,
    quantize_q8_0: fn(&[f32], &mut [BlockQ8_0]),
    quantize_q8_1: fn(&[f32], &mut [BlockQ8_1]),
    quantize_q8_k: fn(&[f32], &mut [BlockQ8K]),
    /// The rows of the types that go through the generic path ([`entries`]).
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
            q4_0: scalar::dot_q4_0_q8_0,
            q4_0_chain: scalar::dot_q4_0_q8_0_chain,
            q4_1: scalar::dot_q4_1_q8_1,
            q8_0: scalar::dot_q8_0_q8_0,
            f32: scalar::dot_f32,
            f32_vec: ggml_math::dot_f32_vec,
            f16: scalar::dot_f16_f32,
            bf16: scalar::dot_bf16_f32,
            att_gemv: ggml_math::dot_f16_gemv,
            att_gemv_rows: |x, stride, y, n_pad, out| {
                att_gemv_each_row(ggml_math::dot_f16_gemv, x, stride, y, n_pad, out)
            },
            att_gemv_heads: None,
            att_gemm: ggml_math::dot_f16_gemm,
            att_gemm_rows: |x, stride, y, out| {
                for (r, o) in out.iter_mut().enumerate() {
                    *o = ggml_math::dot_f32_gemm(&x[r * stride..r * stride + y.len()], y);
                }
            },
            widen_f16: |src, dst| {
                assert_eq!(src.len(), dst.len(), "widen_f16 length mismatch");
                for (d, s) in dst.iter_mut().zip(src) {
                    *d = half::f16_to_f32(*s);
                }
            },
            softmax: ggml_math::softmax,
            swiglu: ggml_math::swiglu,
            geglu: gelu::geglu,
            rope: ggml_math::rope,
            rope_neox: ggml_math::rope_neox,
            kv_add_q8_0: |row, p, out| ops::add_scaled_q8_0(row, p, out),
            q4_0_tile: scalar::tile_q4_0_q8_0,
            q4_0_chain_tile: scalar::tile_q4_0_q8_0_chain,
            q4_1_tile: scalar::tile_q4_1_q8_1,
            q8_0_tile: scalar::tile_q8_0_q8_0,
            q4_0_chain_panel: None,
            iq4_nl_chain_panel: None,
            q4_0_panel_pad: PANEL_TOKENS,
            q4_0_chain_gemv: None,
            q4_0_packed: None,
            iq4_nl_packed: None,
            q8_0_wide: None,
            q4_0_rows: scalar::rows_q4_0_q8_0,
            q4_0_chain_rows: scalar::rows_q4_0_q8_0_chain,
            q4_1_rows: scalar::rows_q4_1_q8_1,
            q8_0_rows: scalar::rows_q8_0_q8_0,
            quantize_q8_0: blocks::quantize_act_q8_0,
            quantize_q8_1: blocks::quantize_act_q8_1,
            quantize_q8_k: kdequant::quantize_act_q8_k,
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
            Tier::Avx2 => Kernels {
                tier,
                q4_0: x86_64::avx2::dot_q4_0_q8_0,
                q4_0_chain: x86_64::avx2::dot_q4_0_q8_0_chain,
                q4_1: x86_64::avx2::dot_q4_1_q8_1,
                q8_0: x86_64::avx2::dot_q8_0_q8_0,
                f32: x86_64::avx2::dot_f32,
                f32_vec: x86_64::avx2::dot_f32_vec,
                f16: x86_64::avx2::dot_f16_f32,
                att_gemv: x86_64::avx2::att_gemv,
                att_gemv_rows: |x, stride, y, n_pad, out| {
                    att_gemv_each_row(x86_64::avx2::att_gemv, x, stride, y, n_pad, out)
                },
                att_gemm: x86_64::avx2::att_gemm,
                att_gemm_rows: x86_64::avx2::att_gemm_rows,
                widen_f16: x86_64::avx2::widen_f16,
                softmax: x86_64::avx2::softmax,
                swiglu: x86_64::avx2::swiglu,
                kv_add_q8_0: x86_64::avx2::kv_add_q8_0,
                rope: x86_64::avx2::rope,
                rope_neox: x86_64::avx2::rope_neox,
                geglu: x86_64::avx2::geglu,
                q4_0_tile: x86_64::avx2::tile_q4_0_q8_0,
                q4_0_chain_tile: x86_64::avx2::tile_q4_0_q8_0_chain,
                q4_1_tile: x86_64::avx2::tile_q4_1_q8_1,
                q8_0_tile: x86_64::avx2::tile_q8_0_q8_0,
                q4_0_rows: x86_64::avx2::rows_q4_0_q8_0,
                q4_0_chain_rows: x86_64::avx2::rows_q4_0_q8_0_chain,
                q4_1_rows: x86_64::avx2::rows_q4_1_q8_1,
                q8_0_rows: x86_64::avx2::rows_q8_0_q8_0,
                q4_0_chain_gemv: Some(GemvPanel {
                    rows: TILE_ROWS,
                    run: x86_64::avx2::gemv8_q4_0_q8_0_chain,
                }),
                // The token is there: `available` checked the same features.
                q4_0_chain_panel: x86_64::Avx2::detect().map(x86_64::Avx2::panel_q4_0_q8_0_chain),
                iq4_nl_chain_panel: None,
                // Its panels skip a padded group's empty passes of tokens.
                q4_0_panel_pad: 1,
                q4_0_packed: x86_64::Avx2::detect()
                    .map(|t| (t.gemv16_q4_0_q8_0_packed(), x86_64::avx2_steps::Q4_0_STEPS)),
                iq4_nl_packed: None,
                quantize_q8_0: x86_64::avx2::quantize_act_q8_0,
                quantize_q8_1: x86_64::avx2::quantize_act_q8_1,
                quantize_q8_k: x86_64::avx2_kquant::quantize_act_q8_k,
                entries: x86_64::avx2_kquant::entries(),
                ..Kernels::scalar()
            },
            #[cfg(target_arch = "x86_64")]
            Tier::Avx512 => Kernels {
                tier,
                q4_0_tile: x86_64::avx512::tile_q4_0_q8_0,
                q4_0_chain_tile: x86_64::avx512::tile_q4_0_q8_0_chain,
                q4_1_tile: x86_64::avx512::tile_q4_1_q8_1,
                q8_0_tile: x86_64::avx512::tile_q8_0_q8_0,
                q4_0_chain_panel: Some(x86_64::avx512::panel_q4_0_q8_0_chain),
                iq4_nl_chain_panel: Some(x86_64::avx512::panel_iq4_nl_q8_0_chain),
                q4_0_panel_pad: PANEL_TOKENS,
                q4_0_chain_gemv: Some(GemvPanel {
                    rows: PANEL_ROWS,
                    run: x86_64::avx512::gemv16_q4_0_q8_0_chain,
                }),
                q4_0_packed: Some((
                    x86_64::avx512::gemv16_q4_0_q8_0_packed,
                    x86_64::panel512_steps::Q4_0_STEPS,
                )),
                iq4_nl_packed: Some((
                    x86_64::avx512::gemv16_iq4_nl_q8_0_packed,
                    x86_64::panel512_steps::IQ4_NL_STEPS,
                )),
                q8_0_wide: Some((
                    x86_64::avx512::wide_q8_0_q8_0,
                    x86_64::avx512::wide_half_q8_0_q8_0,
                )),
                swiglu: x86_64::avx512::swiglu,
                kv_add_q8_0: x86_64::avx512::kv_add_q8_0,
                softmax: x86_64::avx512::softmax,
                att_gemv: x86_64::avx512::att_gemv,
                att_gemv_rows: x86_64::avx512::att_gemv_rows,
                att_gemv_heads: Some(x86_64::avx512::att_gemv_heads),
                q4_0_rows: x86_64::avx512::rows_q4_0_q8_0,
                q4_0_chain_rows: x86_64::avx512::rows_q4_0_q8_0_chain,
                q4_1_rows: x86_64::avx512::rows_q4_1_q8_1,
                q8_0_rows: x86_64::avx512::rows_q8_0_q8_0,
                entries: x86_64::avx512_kquant::entries(),
                ..Kernels::for_tier(Tier::Avx2)?
            },
            #[cfg(not(target_arch = "x86_64"))]
            _ => unreachable!("available() refused tiers without kernels"),
        })
    }

    /// `out[r] = dot(rows[r], act)` for a type of the generic path.
    fn gemv_rows(
        &self,
        ty: GgmlType,
        order: SumOrder,
        rows: &[&[u8]],
        act: &ActRow,
        out: &mut [f32],
    ) {
        let dot = self
            .entry(ty)
            .expect("a type of the generic path")
            .dot_in(order);
        for (o, row) in out.iter_mut().zip(rows) {
            *o = dot(row, act);
        }
    }

    /// This table's row for `ty`, if `ty` goes through the generic path ([`entries`]).
    #[inline]
    pub fn entry(&self, ty: GgmlType) -> Option<&Entry> {
        let e = &self.entries[entries::index_of(ty)?];
        debug_assert_eq!(e.ty, ty, "a tier's rows keep the oracle's order");
        Some(e)
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

    /// Dot product of one weight row (raw bytes of type `ty`) with a prepared activation.
    ///
    /// # Panics
    /// If the activation kind does not match `ty` or the lengths disagree: both are checked
    /// when the model is loaded, so a mismatch here is a bug in the caller.
    #[inline]
    pub fn dot(&self, ty: GgmlType, row: &[u8], act: &ActRow) -> f32 {
        self.dot_ordered(ty, SumOrder::Lanes, row, act)
    }

    /// [`Kernels::dot`] with an explicit summation order (`BlockChain`: the repacked kernels'
    /// order, for the types llama.cpp repacks; the others ignore it).
    #[inline]
    pub fn dot_ordered(&self, ty: GgmlType, order: SumOrder, row: &[u8], act: &ActRow) -> f32 {
        if let Some(e) = self.entry(ty) {
            return e.dot_in(order)(row, act);
        }
        // f32 keeps its order (`f32_order`); the others know two.
        let order = if ty == GgmlType::F32 {
            order
        } else {
            order.plain()
        };
        match (ty, act) {
            (GgmlType::Q4_0, ActRow::Q8_0(Q8Row { blocks: a, .. }))
                if order == SumOrder::BlockChain =>
            {
                (self.q4_0_chain)(checked_blocks(row, a.len()), a)
            }
            (GgmlType::Q4_0, ActRow::Q8_0(Q8Row { blocks: a, .. })) => {
                (self.q4_0)(checked_blocks(row, a.len()), a)
            }
            (GgmlType::Q4_1, ActRow::Q8_1(a)) => (self.q4_1)(checked_blocks(row, a.len()), a),
            (GgmlType::Q8_0, ActRow::Q8_0(Q8Row { blocks: a, .. })) => {
                (self.q8_0)(checked_blocks(row, a.len()), a)
            }
            (GgmlType::F32, ActRow::F32(a)) => {
                let w = f32_row(row);
                assert_eq!(w.len(), a.len(), "row length mismatch");
                match order {
                    // tinyBLAS (see `f32_order`): one 16-lane accumulator, then reduced.
                    SumOrder::Batched => {
                        let mut o = [0f32];
                        (self.att_gemm_rows)(&w, w.len(), a, &mut o);
                        o[0]
                    }
                    _ => (self.f32_vec)(&w, a),
                }
            }
            (GgmlType::F16, ActRow::F32(a)) => {
                let w = u16_row(row);
                assert_eq!(w.len(), a.len(), "row length mismatch");
                (self.f16)(&w, a)
            }
            (GgmlType::Bf16, ActRow::F32(a)) => {
                let w = u16_row(row);
                assert_eq!(w.len(), a.len(), "row length mismatch");
                (self.bf16)(&w, a)
            }
            (t, _) => panic!(
                "no dot product for weight type {} with this activation",
                t.name()
            ),
        }
    }

    /// `out[r] = self.dot_ordered(ty, order, row r, act)` for `out.len()` consecutive rows
    /// stored back to back in `rows` (a matrix-vector product over a run of rows), bit for
    /// bit. Decode's path: Q4_0, Q4_1 and Q8_0 rows go [`TILE_ROWS`] at a time through the
    /// single-token kernels, straight from the bytes (the last group padded with copies of the
    /// last row, whose outputs are dropped), so a run costs one call rather than one per row
    /// group; block-chain Q4_0 goes through the tier's single-token panel first (rows in the
    /// lanes of one vector: [`PANEL_ROWS`] on AVX-512, [`TILE_ROWS`] on AVX2). The types of
    /// the generic path ([`entries`]) go through their row's tile kernel ([`Entry::tile`]),
    /// [`GEMV_STEP`] rows per call (which takes them a few rows per pass, the activation shared
    /// among them). The float types use the single dot.
    ///
    /// # Panics
    /// If `rows.len()` is not `out.len()` rows of `act`'s length, or as
    /// [`Kernels::dot_ordered`] does.
    pub fn gemv(&self, ty: GgmlType, order: SumOrder, rows: &[u8], act: &ActRow, out: &mut [f32]) {
        let k = out.len();
        if k == 0 {
            assert!(rows.is_empty(), "weight bytes for no rows");
            return;
        }
        assert_eq!(rows.len() % k, 0, "weight rows of unequal length");
        if ty == GgmlType::F32 {
            let size = rows.len() / k;
            for (o, row) in out.iter_mut().zip(rows.chunks_exact(size)) {
                *o = self.dot_ordered(ty, order, row, act);
            }
            return;
        }
        if let Some(e) = self.entry(ty) {
            let size = rows.len() / k;
            if let Some(tile) = e.tile {
                // Runs of up to GEMV_STEP rows through the tier's kernel: one call per run, no
                // allocation. A kernel without this variant declines the first run.
                let variant = e.variant(order);
                let mut runs = rows.chunks(GEMV_STEP * size).zip(out.chunks_mut(GEMV_STEP));
                let act = std::slice::from_ref(act);
                let all = runs.all(|(run, o)| {
                    let rs: [&[u8]; GEMV_STEP] =
                        std::array::from_fn(|r| &run[r.min(o.len() - 1) * size..][..size]);
                    tile(&rs[..o.len()], act, variant, o)
                });
                if all {
                    return;
                }
            }
            let dot = e.dot_in(order);
            for (o, row) in out.iter_mut().zip(rows.chunks_exact(size)) {
                *o = dot(row, act);
            }
            return;
        }
        let n = act.len() / QK;
        match (ty, order.plain()) {
            (GgmlType::Q4_0, SumOrder::Lanes) if n > 0 => rows_run(
                self.q4_0_rows,
                checked_blocks(rows, n * k),
                q8_0_blocks(act, n),
                out,
            ),
            (GgmlType::Q4_0, SumOrder::BlockChain) if n > 0 => {
                let (w, a) = (checked_blocks(rows, n * k), q8_0_row(act, n));
                let mut done = 0;
                if let Some(p) = self.q4_0_chain_gemv {
                    done = k / p.rows * p.rows;
                    for (wg, o) in w.chunks_exact(p.rows * n).zip(out.chunks_exact_mut(p.rows)) {
                        (p.run)(wg, a, o);
                    }
                }
                rows_run(
                    self.q4_0_chain_rows,
                    &w[done * n..],
                    &a.blocks,
                    &mut out[done..],
                );
            }
            (GgmlType::Q4_1, _) if n > 0 => rows_run(
                self.q4_1_rows,
                checked_blocks(rows, n * k),
                q8_1_blocks(act, n),
                out,
            ),
            (GgmlType::Q8_0, _) if n > 0 => rows_run(
                self.q8_0_rows,
                checked_blocks(rows, n * k),
                q8_0_blocks(act, n),
                out,
            ),
            _ => {
                for (o, row) in out.iter_mut().zip(rows.chunks_exact(rows.len() / k)) {
                    *o = self.dot_ordered(ty, order, row, act);
                }
            }
        }
    }

    /// The layout this table reads fastest for a matrix of `ty` summed in `order`: placement
    /// packs the copies it makes into it (the file's own mapping stays as it is).
    /// [`Layout::Q4_0x16`] for block-chain Q4_0, [`Layout::Iq4NlX16`] for block-chain IQ4_NL,
    /// and for the types of the generic path the layout of the entry's packed kernel
    /// ([`Entry::packed`]) where decode sums in its variant: where the tier has packed kernels
    /// (Q4_0, Q4_K, Q5_K, Q6_K and IQ4_XS on AVX2 and AVX-512, IQ4_NL on AVX-512);
    /// [`Layout::Rows`] otherwise.
    pub fn preferred_layout(&self, ty: GgmlType, order: SumOrder) -> Layout {
        match (ty, order.plain()) {
            (GgmlType::Q4_0, SumOrder::BlockChain)
                if self.chain_packed(Layout::Q4_0x16).is_some() =>
            {
                Layout::Q4_0x16
            }
            (GgmlType::Iq4Nl, SumOrder::BlockChain)
                if self.chain_packed(Layout::Iq4NlX16).is_some() =>
            {
                Layout::Iq4NlX16
            }
            _ => self
                .packed_for(ty, order)
                .map_or(Layout::Rows, |p| p.layout),
        }
    }

    /// The packed kernel of a type of the generic path, where this tier has one for the
    /// variant `order` takes.
    fn packed_for(&self, ty: GgmlType, order: SumOrder) -> Option<entries::Packed> {
        let e = self.entry(ty)?;
        e.packed.filter(|p| p.variant == e.variant(order))
    }

    /// [`Kernels::gemv`] of rows stored in `layout`. For a packed layout (block-chain Q4_0 in
    /// [`Layout::Q4_0x16`], IQ4_NL in [`Layout::Iq4NlX16`], the others of
    /// [`Kernels::preferred_layout`]), `rows` holds whole packed groups of
    /// [`PACK_ROWS`] rows and `out` one output per row; the result is the same, bit for bit,
    /// as the file layout's. A table without the packed kernel (or an order it does not
    /// compute: the repacked gemm's, for a last token of a prompt) unpacks each group first
    /// (slow: tests, a copy packed for another tier, one token now and then).
    ///
    /// # Panics
    /// As [`Kernels::gemv`], or if a packed run is not whole groups of the layout's type.
    pub fn gemv_in(
        &self,
        layout: Layout,
        ty: GgmlType,
        order: SumOrder,
        rows: &[u8],
        act: &ActRow,
        out: &mut [f32],
    ) {
        if layout == Layout::Rows {
            return self.gemv(ty, order, rows, act, out);
        }
        let k = out.len();
        assert!(
            k.is_multiple_of(PACK_ROWS),
            "{k} rows are not whole packed groups"
        );
        let group_bytes = rows.len() / (k / PACK_ROWS).max(1);
        assert_eq!(
            group_bytes * (k / PACK_ROWS),
            rows.len(),
            "packed groups of unequal size"
        );
        let groups = rows
            .chunks_exact(group_bytes.max(1))
            .zip(out.chunks_exact_mut(PACK_ROWS));
        let n = act.len() / layout.block_elems();
        assert!(
            layout.holds() == Some(ty),
            "packed rows of {} are not in {}",
            ty.name(),
            layout.name()
        );
        match (layout, order.plain()) {
            (Layout::Q4_0x16 | Layout::Iq4NlX16, SumOrder::BlockChain) => {
                if let Some((run, _)) = self.chain_packed(layout) {
                    let a = q8_0_row(act, n);
                    for (wg, o) in groups {
                        run(checked_blocks::<BlockQ4_0>(wg, PACK_ROWS * n), a, o);
                    }
                    return;
                }
            }
            _ => {
                let p = self.packed_for(ty, order).filter(|p| p.layout == layout);
                if let (Some(p), ActRow::Q8K(a)) = (p, act) {
                    groups.for_each(|(wg, o)| (p.gemv)(wg, a, o));
                    return;
                }
            }
        }
        let mut unpacked = vec![0u8; group_bytes];
        for (wg, o) in groups {
            pack::unpack_group(layout, wg, n, &mut unpacked);
            self.gemv(ty, order, &unpacked, act, o);
        }
    }

    /// [`Kernels::dot_tile`] of `g` packed groups of a type of the generic path (each
    /// [`PACK_ROWS`] rows of `layout`, back to back in `groups`' bytes): `out[t * 16g + 16j +
    /// r]` is row r of group j against `acts[t]`, bit for bit as the file layout gives it, in
    /// `order`: decode's order by the packed single-token kernel per token, the prompt orders
    /// by the tier's packed tile kernel. Returns `false`, having written nothing, where the
    /// tier has neither for this order (the caller then unpacks the groups).
    ///
    /// # Panics
    /// If `groups` is empty, or `out.len()` is not `PACK_ROWS * acts.len()` per group (the
    /// activations' length fixes a group's bytes).
    pub fn dot_tile_in(
        &self,
        layout: Layout,
        ty: GgmlType,
        order: SumOrder,
        groups: &[u8],
        acts: &[ActRow],
        out: &mut [f32],
    ) -> bool {
        let per_group = PACK_ROWS * acts.len();
        // With no tokens there are no outputs, and the count does not matter.
        let count = out.len().checked_div(per_group).unwrap_or(1);
        assert!(
            !groups.is_empty() && count > 0 && out.len() == count * per_group,
            "tile output size mismatch"
        );
        let Some(e) = self.entry(ty) else {
            return false;
        };
        let Some(p) = e.packed.filter(|p| p.layout == layout) else {
            return false;
        };
        let variant = e.variant(order);
        if variant != p.variant {
            return p
                .tile
                .is_some_and(|tile| tile(layout, groups, acts, variant, out));
        }
        if !acts.iter().all(|a| matches!(a, ActRow::Q8K(_))) {
            return false;
        }
        assert!(groups.len().is_multiple_of(count), "{count} packed groups");
        let group_bytes = groups.len() / count;
        if let Some(many) = p.gemv_tokens.filter(|_| acts.len() > 1) {
            // Up to a forward step's tokens at a time, on the stack (this runs once per group
            // of rows in a serving step).
            const CHUNK: usize = 64;
            let row_outs = count * PACK_ROWS;
            for (acts, out) in acts.chunks(CHUNK).zip(out.chunks_mut(CHUNK * row_outs)) {
                let mut ys: [&[BlockQ8K]; CHUNK] = [&[]; CHUNK];
                for (y, a) in ys.iter_mut().zip(acts) {
                    if let ActRow::Q8K(b) = a {
                        *y = b;
                    }
                }
                let mut tmp = [0f32; CHUNK * PACK_ROWS];
                let tmp = &mut tmp[..acts.len() * PACK_ROWS];
                for (j, g) in groups.chunks_exact(group_bytes).enumerate() {
                    many(g, &ys[..acts.len()], tmp);
                    for (o, t) in out
                        .chunks_exact_mut(row_outs)
                        .zip(tmp.chunks_exact(PACK_ROWS))
                    {
                        o[j * PACK_ROWS..(j + 1) * PACK_ROWS].copy_from_slice(t);
                    }
                }
            }
            return true;
        }
        for (a, o) in acts.iter().zip(out.chunks_exact_mut(count * PACK_ROWS)) {
            if let ActRow::Q8K(y) = a {
                for (g, o) in groups
                    .chunks_exact(group_bytes)
                    .zip(o.chunks_exact_mut(PACK_ROWS))
                {
                    (p.gemv)(g, y, o);
                }
            }
        }
        true
    }

    /// `out[t * rows.len() + r] = self.dot_ordered(ty, order, rows[r], &acts[t])` for every
    /// row and activation, bit for bit. Where the tier has them, whole groups of tokens go
    /// through the panel (Q4_0, block chain) or wide (Q8_0) kernels first. Then, for Q4_0, Q4_1
    /// and Q8_0 weights, whole multi-token tiles ([`BATCH_TILE_ROWS`] × [`TILE_TOKENS`]) go
    /// through the tiled kernels and the tokens left over, one at a time, through the
    /// single-token kernels ([`TILE_ROWS`] rows per pass); edge rows of a multi-token tile and
    /// the float types use the single dot. The types of the generic path go through their row's
    /// tile kernel ([`Entry::tile`]: passes of a few rows, each row block unpacked once for a
    /// few tokens), IQ4_NL in its repacked order after whole groups of tokens went through the
    /// Q4_0 panel with its value table, where the tier has it.
    ///
    /// # Panics
    /// If `out.len() != rows.len() * acts.len()`, or as [`Kernels::dot_ordered`] does.
    pub fn dot_tile(
        &self,
        ty: GgmlType,
        order: SumOrder,
        rows: &[&[u8]],
        acts: &[ActRow],
        out: &mut [f32],
    ) {
        let n_rows = rows.len();
        assert_eq!(out.len(), n_rows * acts.len(), "tile output size mismatch");
        if ty == GgmlType::F32 {
            // One order per matrix ([`SumOrder::f32_order`]), one dot per output.
            for (t, a) in acts.iter().enumerate() {
                for (r, row) in rows.iter().enumerate() {
                    out[t * n_rows + r] = self.dot_ordered(ty, order, row, a);
                }
            }
            return;
        }
        if let Some(e) = self.entry(ty) {
            let done = match self.iq4_nl_chain_panel {
                Some(panel) if ty == GgmlType::Iq4Nl && e.variant(order) == Variant::Repacked => {
                    self.panel_run(panel, rows, acts, out)
                }
                _ => 0,
            };
            let (acts, out) = (&acts[done..], &mut out[done * n_rows..]);
            if acts.is_empty() {
                return;
            }
            if let Some(tile) = e.tile {
                if tile(rows, acts, e.variant(order), out) {
                    return;
                }
            }
            // One dot per output: the tier has no kernel for this variant.
            for (t, a) in acts.iter().enumerate() {
                self.gemv_rows(ty, order, rows, a, &mut out[t * n_rows..(t + 1) * n_rows]);
            }
            return;
        }
        let order = order.plain();
        let done = self.panels(ty, order, rows, acts, out);
        let (acts, out) = (&acts[done..], &mut out[done * n_rows..]);
        let whole = acts.len() / TILE_TOKENS * TILE_TOKENS;
        let (tiled, single) = acts.split_at(whole);
        let mut tile = [[0f32; BATCH_TILE_ROWS]; TILE_TOKENS];
        for (r0, rc) in (0..)
            .step_by(BATCH_TILE_ROWS)
            .zip(rows.chunks(BATCH_TILE_ROWS))
        {
            for (t0, ac) in (0..).step_by(TILE_TOKENS).zip(tiled.chunks(TILE_TOKENS)) {
                if self.whole_tile(ty, order, rc, ac, &mut tile) {
                    for (t, o) in tile.iter().enumerate() {
                        let at = (t0 + t) * n_rows + r0;
                        out[at..at + BATCH_TILE_ROWS].copy_from_slice(o);
                    }
                } else {
                    for (t, a) in ac.iter().enumerate() {
                        for (r, row) in rc.iter().enumerate() {
                            out[(t0 + t) * n_rows + r0 + r] = self.dot_ordered(ty, order, row, a);
                        }
                    }
                }
            }
        }
        let mut col = [0f32; TILE_ROWS];
        for (t, a) in (whole..).zip(single) {
            for (r0, rc) in (0..).step_by(TILE_ROWS).zip(rows.chunks(TILE_ROWS)) {
                let at = t * n_rows + r0;
                if self.row_tile(ty, order, rc, a, &mut col) {
                    out[at..at + rc.len()].copy_from_slice(&col[..rc.len()]);
                } else {
                    for (o, row) in out[at..at + rc.len()].iter_mut().zip(rc) {
                        *o = self.dot_ordered(ty, order, row, a);
                    }
                }
            }
        }
    }

    /// How many of `n` tokens the Q4_0 panels take: the whole [`PANEL_TOKENS`] groups, and a
    /// last partial group where it holds at least the table's `q4_0_panel_pad` tokens.
    fn panel_tokens(&self, n: usize) -> usize {
        panel_tokens_padded(n, self.q4_0_panel_pad)
    }

    /// Runs the panel kernel, where `ty` and `order` have one on this tier, over the first
    /// whole multiple of [`PANEL_TOKENS`] tokens and every row ([`PANEL_ROWS`] at a time, the
    /// last rows padded with copies whose outputs are dropped); returns how many tokens it
    /// computed (0 otherwise).
    fn panels(
        &self,
        ty: GgmlType,
        order: SumOrder,
        rows: &[&[u8]],
        acts: &[ActRow],
        out: &mut [f32],
    ) -> usize {
        if let (Some(wide), GgmlType::Q8_0, SumOrder::Lanes) = (self.q8_0_wide, ty, order) {
            return wide_tiles(wide, rows, acts, out);
        }
        match self.q4_0_chain_panel {
            Some(panel) if (ty, order) == (GgmlType::Q4_0, SumOrder::BlockChain) => {
                self.panel_run(panel, rows, acts, out)
            }
            _ => 0,
        }
    }

    /// Runs `panel` (Q4_0-shaped blocks against Q8_0 activations) over the first
    /// [`Kernels::panel_tokens`] of `acts` and every row, [`PANEL_ROWS`] at a time (the last
    /// rows padded with copies whose outputs are dropped); returns how many tokens it computed.
    fn panel_run(&self, panel: Panel, rows: &[&[u8]], acts: &[ActRow], out: &mut [f32]) -> usize {
        let whole = self.panel_tokens(acts.len());
        if whole == 0 {
            return 0;
        }
        let n = acts[0].len() / QK;
        let n_rows = rows.len();
        let mut o = [0f32; PANEL_ROWS * MAX_PANEL_TOKENS];
        let steps = acts[..whole].chunks(MAX_PANEL_TOKENS);
        for (t0, ac) in (0..).step_by(MAX_PANEL_TOKENS).zip(steps) {
            let groups = Q8Group::all(ac, n);
            let groups = &groups[..ac.len().div_ceil(PANEL_TOKENS)];
            let o = &mut o[..ac.len() * PANEL_ROWS];
            for (r0, rc) in (0..).step_by(PANEL_ROWS).zip(rows.chunks(PANEL_ROWS)) {
                let w = std::array::from_fn(|r| checked_blocks(rc[r.min(rc.len() - 1)], n));
                panel(&w, groups, ac.len(), o);
                for (t, ot) in o.chunks_exact(PANEL_ROWS).enumerate() {
                    let at = (t0 + t) * n_rows + r0;
                    out[at..at + rc.len()].copy_from_slice(&ot[..rc.len()]);
                }
            }
        }
        whole
    }

    /// Runs the single-token kernel for `ty` over `rows` (at most [`TILE_ROWS`]; fewer are
    /// padded with the last, whose extra outputs are dropped) if `ty` has one; `false`
    /// (nothing written) otherwise.
    fn row_tile(
        &self,
        ty: GgmlType,
        order: SumOrder,
        rows: &[&[u8]],
        act: &ActRow,
        out: &mut [f32; TILE_ROWS],
    ) -> bool {
        let k = rows.len();
        debug_assert!((1..=TILE_ROWS).contains(&k));
        let n = act.len() / QK;
        let pick = |r: usize| rows[r.min(k - 1)];
        match ty {
            GgmlType::Q4_0 => {
                let kernel = match order.plain() {
                    SumOrder::Lanes => self.q4_0_rows,
                    _ => self.q4_0_chain_rows,
                };
                let w = std::array::from_fn(|r| checked_blocks(pick(r), n));
                kernel(&w, q8_0_blocks(act, n), out);
            }
            GgmlType::Q4_1 => {
                let w = std::array::from_fn(|r| checked_blocks(pick(r), n));
                (self.q4_1_rows)(&w, q8_1_blocks(act, n), out);
            }
            GgmlType::Q8_0 => {
                let w = std::array::from_fn(|r| checked_blocks(pick(r), n));
                (self.q8_0_rows)(&w, q8_0_blocks(act, n), out);
            }
            _ => return false,
        }
        true
    }

    /// Runs the tiled kernel for `ty` if `rows` × `acts` is a whole tile of a type that has
    /// one; `false` (nothing written) otherwise.
    fn whole_tile(
        &self,
        ty: GgmlType,
        order: SumOrder,
        rows: &[&[u8]],
        acts: &[ActRow],
        out: &mut TileOut,
    ) -> bool {
        let (Ok(rows), Ok(acts)) = (
            <&[&[u8]; BATCH_TILE_ROWS]>::try_from(rows),
            <&[ActRow; TILE_TOKENS]>::try_from(acts),
        ) else {
            return false;
        };
        let n = acts[0].len() / QK;
        match ty {
            GgmlType::Q4_0 => {
                let kernel = match order.plain() {
                    SumOrder::Lanes => self.q4_0_tile,
                    _ => self.q4_0_chain_tile,
                };
                kernel(
                    &rows.map(|r| checked_blocks(r, n)),
                    &acts.each_ref().map(|a| q8_0_blocks(a, n)),
                    out,
                );
            }
            GgmlType::Q4_1 => (self.q4_1_tile)(
                &rows.map(|r| checked_blocks(r, n)),
                &acts.each_ref().map(|a| q8_1_blocks(a, n)),
                out,
            ),
            GgmlType::Q8_0 => (self.q8_0_tile)(
                &rows.map(|r| checked_blocks(r, n)),
                &acts.each_ref().map(|a| q8_0_blocks(a, n)),
                out,
            ),
            _ => return false,
        }
        true
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

    /// f16·f32 dot product (general f16 weights).
    #[inline]
    pub fn dot_f16(&self, x: &[u16], y: &[f32]) -> f32 {
        (self.f16)(x, y)
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

    /// f16 → f32 of a slice (exact).
    ///
    /// # Panics
    /// If the lengths differ.
    #[inline]
    pub fn widen_f16(&self, src: &[u16], dst: &mut [f32]) {
        (self.widen_f16)(src, dst)
    }
}

/// The whole [`PANEL_TOKENS`] groups of `n` tokens, and a last partial group where it holds
/// at least `pad` tokens.
fn panel_tokens_padded(n: usize, pad: usize) -> usize {
    let whole = n / PANEL_TOKENS * PANEL_TOKENS;
    if n - whole >= pad {
        n
    } else {
        whole
    }
}

/// `wide` over every row ([`WIDE_ROWS`] at a time, the last padded with copies whose outputs
/// are dropped) and the first whole multiple of [`WIDE_TOKENS`] tokens, then `half` over half
/// a group more where that many are left, laid out as [`Kernels::dot_tile`] does; returns how
/// many tokens it computed. (Four tokens through `half` cost about half what eight through
/// `wide` do, and half what the 2 × 4 tiles took for them.)
fn wide_tiles(
    (wide, half): (Wide, Wide),
    rows: &[&[u8]],
    acts: &[ActRow],
    out: &mut [f32],
) -> usize {
    const HALF: usize = WIDE_TOKENS / 2;
    let whole = acts.len() / WIDE_TOKENS * WIDE_TOKENS;
    // Then half a group where at least that many tokens are left.
    let done = whole + (acts.len() - whole) / HALF * HALF;
    if done == 0 {
        return 0;
    }
    let n = acts[0].len() / QK;
    let n_rows = rows.len();
    let mut o = [[0f32; WIDE_ROWS]; WIDE_TOKENS];
    for (t0, ac) in (0..)
        .step_by(WIDE_TOKENS)
        .zip(acts[..done].chunks(WIDE_TOKENS))
    {
        // A half group's last half repeats its last token, and is neither read nor written.
        let (kernel, k) = if ac.len() == WIDE_TOKENS {
            (wide, WIDE_TOKENS)
        } else {
            (half, HALF)
        };
        let a = Q8Group::new(ac, n);
        for (r0, rc) in (0..).step_by(WIDE_ROWS).zip(rows.chunks(WIDE_ROWS)) {
            let w = std::array::from_fn(|r| checked_blocks(rc[r.min(rc.len() - 1)], n));
            kernel(&w, &a, &mut o);
            for (t, ot) in o[..k].iter().enumerate() {
                let at = (t0 + t) * n_rows + r0;
                out[at..at + rc.len()].copy_from_slice(&ot[..rc.len()]);
            }
        }
    }
    done
}

/// Runs a single-token kernel over `out.len()` rows of `a.len()` blocks each, held back to
/// back in `w`, [`TILE_ROWS`] rows per call; the last group is padded with copies of its last
/// row, whose outputs are dropped.
fn rows_run<W, A>(kernel: Rows<W, A>, w: &[W], a: &[A], out: &mut [f32]) {
    let n = a.len();
    debug_assert_eq!(w.len(), n * out.len());
    let mut outs = out.chunks_exact_mut(TILE_ROWS);
    for (wg, o) in w.chunks_exact(TILE_ROWS * n).zip(outs.by_ref()) {
        let rows: [&[W]; TILE_ROWS] = std::array::from_fn(|r| &wg[r * n..(r + 1) * n]);
        kernel(&rows, a, o.try_into().expect("a whole group of rows"));
    }
    let tail = outs.into_remainder();
    if let Some(last) = tail.len().checked_sub(1) {
        let wt = &w[w.len() - tail.len() * n..];
        let rows: [&[W]; TILE_ROWS] = std::array::from_fn(|r| &wt[r.min(last) * n..][..n]);
        let mut col = [0f32; TILE_ROWS];
        kernel(&rows, a, &mut col);
        tail.copy_from_slice(&col[..tail.len()]);
    }
}

fn checked_blocks<B: blocks::Block>(row: &[u8], n_blocks: usize) -> &[B] {
    let b = blocks::as_blocks::<B>(row).expect("weight row is not a whole number of blocks");
    assert_eq!(b.len(), n_blocks, "row length mismatch");
    b
}

/// The Q8_0 blocks of an activation of `n_blocks` blocks (a caller bug otherwise: see
/// [`Kernels::dot_ordered`]).
fn q8_0_blocks(act: &ActRow, n_blocks: usize) -> &[BlockQ8_0] {
    match act {
        ActRow::Q8_0(a) if a.blocks.len() == n_blocks => &a.blocks,
        _ => panic!("activation is not Q8_0 of {n_blocks} blocks"),
    }
}

/// The Q8_0 row of an activation of `n_blocks` blocks, as [`q8_0_blocks`].
fn q8_0_row(act: &ActRow, n_blocks: usize) -> &Q8Row {
    match act {
        ActRow::Q8_0(a) if a.blocks.len() == n_blocks => a,
        _ => panic!("activation is not Q8_0 of {n_blocks} blocks"),
    }
}

/// The Q8_1 blocks of an activation of `n_blocks` blocks, as [`q8_0_blocks`].
fn q8_1_blocks(act: &ActRow, n_blocks: usize) -> &[BlockQ8_1] {
    match act {
        ActRow::Q8_1(a) if a.len() == n_blocks => a,
        _ => panic!("activation is not Q8_1 of {n_blocks} blocks"),
    }
}

/// A weight row of f32 values, copied only when the bytes are not 4-byte aligned.
fn f32_row(row: &[u8]) -> std::borrow::Cow<'_, [f32]> {
    // SAFETY: align_to only yields a middle slice of properly aligned, fully initialised f32s,
    // and any bit pattern is a valid f32.
    let (pre, mid, post) = unsafe { row.align_to::<f32>() };
    if pre.is_empty() && post.is_empty() {
        std::borrow::Cow::Borrowed(mid)
    } else {
        std::borrow::Cow::Owned(
            row.chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect(),
        )
    }
}

fn u16_row(row: &[u8]) -> std::borrow::Cow<'_, [u16]> {
    // SAFETY: as in f32_row; any bit pattern is a valid u16.
    let (pre, mid, post) = unsafe { row.align_to::<u16>() };
    if pre.is_empty() && post.is_empty() {
        std::borrow::Cow::Borrowed(mid)
    } else {
        std::borrow::Cow::Owned(
            row.chunks_exact(2)
                .map(|c| u16::from_le_bytes([c[0], c[1]]))
                .collect(),
        )
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
