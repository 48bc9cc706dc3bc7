//! The llama-family forward pass: embedding, RMSNorm, RoPE, grouped-query attention over the KV
//! cache, SwiGLU feed-forward, output head — for a batch of consecutive tokens at once.
//!
//! Precision follows llama.cpp's CPU path (flash attention off): matmul inputs are quantized to
//! the weight type's activation format, K and V are stored in the cache type (f16 by default),
//! and the query and the attention weights are rounded to that type before their products.
//!
//! Batching: a prompt is processed in batches; each weight row is loaded once and multiplied
//! with every token of the batch while it sits in cache, so prefill is compute-bound. Decode is
//! the batch of one. Each output element is the same dot product whatever the batch, so results
//! are bit-identical between batched and one-at-a-time evaluation.
//!
//! Parallelism: every matrix product gives each pool group (one per NUMA node) the contiguous
//! rows [`rows_of_group`] names, which placement stores on that node; the group's threads claim
//! them in chunks, so a slower thread takes fewer, and read them from the group's view (its
//! node's copy or shard). Attention deals out (token, head) pairs. A row's value never depends on which thread computed it or which copy it was
//! read from, so outputs are identical for any thread count and placement.

mod attention;
mod mixed;
mod moe;

use super::arch::{FfnAct, RopeStyle};
use super::config::Config;
use super::kv::KvBuf;
pub use super::kv::{Arith, KvType};
use super::swa::SwaCells;
use super::weights::{Ffn, Layer, Matrix, Tensor, Weights};
use crate::disjoint::Disjoint;
use crate::kernels::ops::{self, Rope};
use crate::kernels::{pack, ActRow, ActType, Kernels, Layout, PackedSteps, SumOrder, PACK_ROWS};
use crate::pool::{rows_of_group, split, Claim, Pool, Shares};
use attention::Rows;
pub use mixed::Part;
use mixed::{chunk_plan, Mixed, MixedPlan};
use std::sync::atomic::{AtomicBool, Ordering};

/// Tokens evaluated together in one batch (weight reuse factor for prefill). 64 rather than 32:
/// the packed K-quant prompt kernels unpack each step of sixteen rows once per batch, and on a
/// Zen 5 VM twice the tokens per unpack raised pp128 by 7% (Q5_K_M) to 21% (Q6_K)
/// (BENCHMARKS.md, "Prompts of 64 tokens").
pub const MAX_BATCH: usize = 64;

/// llama.cpp's default micro-batch (`n_ubatch`): a prompt is evaluated in micro-batches of
/// this many tokens, and the size of each decides its arithmetic path ([`Arith`]).
pub const UBATCH: usize = 512;

/// A model ready to run: config, weight views and the kernels to use.
pub struct Model<'a> {
    pub config: Config,
    pub weights: Weights<'a>,
    pub kernels: Kernels,
    /// RoPE of the global layers, and of the sliding-window layers where the family has them.
    rope: Rope,
    rope_local: Option<Rope>,
}

/// Per-sequence state: the KV cache and scratch buffers for one batch.
pub struct State {
    pub n_ctx: usize,
    /// Tokens already in the cache.
    pub pos: usize,
    kv_type: KvType,
    /// Per layer: keys, head-major (`n_head_kv × cells × head_dim`), so each KV head's keys
    /// are one contiguous block. A global layer has a cell per position (`n_ctx`), a
    /// sliding-window layer the ring of `swa`.
    k: Vec<KvBuf>,
    /// Per layer: `kv_dim × cells` values, transposed (each channel's history contiguous, so
    /// each KV head's values are one contiguous block too).
    v: Vec<KvBuf>,
    /// The sliding-window layers' cells, where the family has such layers.
    swa: Option<SwaCells>,
    /// The current batch's cells: `[global layers, sliding-window layers]`.
    rows: [Rows; 2],
    /// The experts' buffers of a mixture-of-experts model.
    moe: Option<moe::MoeBufs>,
    // Batch activations, row-major `MAX_BATCH × width`.
    x: Vec<f32>,
    xn: Vec<f32>,
    q: Vec<f32>,
    kcur: Vec<f32>,
    vcur: Vec<f32>,
    att: Vec<f32>,
    gate: Vec<f32>,
    up: Vec<f32>,
    tmp: Vec<f32>,
    /// Per thread: attention scores and the rounded query row.
    scratch: Vec<f32>,
    scratch_stride: usize,
    /// The longest score row of any layer (its cache's cells).
    scratch_cells: usize,
    acts: BatchActs,
    rope_cache: Vec<(f32, f32)>,
    /// The same for the sliding-window layers' RoPE.
    rope_cache_local: Vec<(f32, f32)>,
    /// Logits of the tokens asked for in the last batch, `n × n_vocab`.
    logits: Vec<f32>,
    n_logits: usize,
    /// Polled between matmul steps (Ctrl-C); once it is seen set, the state is `stopped`.
    stop: Option<&'static AtomicBool>,
    stopped: bool,
}

impl State {
    /// Logits of the `i`-th token for which the last call asked for logits.
    pub fn logits(&mut self, i: usize) -> &mut [f32] {
        assert!(i < self.n_logits, "logits row {i} was not computed");
        let n = self.logits.len() / MAX_BATCH;
        &mut self.logits[i * n..(i + 1) * n]
    }

    pub fn kv_type(&self) -> KvType {
        self.kv_type
    }

    /// Empties the cache (a new sequence starts at position 0).
    pub fn reset(&mut self) {
        self.pos = 0;
        if let Some(swa) = &mut self.swa {
            swa.reset();
        }
    }

    /// A mixture of experts' statistics: per layer, how many tokens each expert was chosen for
    /// since the state was made (`n_layer × n_expert`, layer-major); `None` for a dense model.
    pub fn expert_counts(&self) -> Option<&[u64]> {
        self.moe.as_ref().map(|m| &m.counts[..])
    }

    /// Makes every forward step poll `flag` between its matmul steps and stop early once it
    /// is set (Ctrl-C acts within one step, not after a whole prompt).
    pub fn set_stop(&mut self, flag: &'static AtomicBool) {
        self.stop = Some(flag);
    }

    /// Whether a step stopped early: the cache and the logits are then incomplete, and the
    /// state is good for nothing but being dropped.
    pub fn stopped(&self) -> bool {
        self.stopped
    }

    /// The cache's bytes as one block per layer, keys or values, and KV head (every layer's
    /// keys and values are head-major), each with the pool group whose threads write it: the
    /// group that owns the head ([`crate::pool::rows_of_group`] over the KV heads). Placement
    /// puts each block on its group's node, and the audit checks it is there.
    pub fn kv_head_blocks(&self, model: &Model, pool: &Pool) -> Vec<(&[u8], usize)> {
        let heads = model.config.n_head_kv;
        let owner: Vec<usize> = (0..heads)
            .map(|h| {
                (0..pool.groups().len())
                    .find(|&g| {
                        let (a, b) = model.kv_heads_of_group(pool, g);
                        (a..b).contains(&h)
                    })
                    .unwrap_or(0)
            })
            .collect();
        let mut out = Vec::new();
        for buf in self.k.iter().chain(&self.v) {
            let bytes = buf.as_bytes();
            let per = bytes.len() / heads.max(1);
            for (h, &g) in owner.iter().enumerate() {
                out.push((&bytes[h * per..(h + 1) * per], g));
            }
        }
        out
    }

    /// Polls the stop flag; true (and `stopped` from now on) once it is set.
    fn check_stop(&mut self) -> bool {
        if !self.stopped && self.stop.is_some_and(|f| f.load(Ordering::Relaxed)) {
            self.stopped = true;
        }
        self.stopped
    }
}

/// The memory a state for `n_ctx` tokens takes, per part, in bytes; `None` where a size
/// overflows (a context no machine could hold).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StateBytes {
    /// Keys and values of every layer.
    pub kv: u64,
    /// Per-thread attention scratch (scores, a query, one KV head widened to f32).
    pub scratch: u64,
}

impl StateBytes {
    pub fn total(&self) -> u64 {
        self.kv.saturating_add(self.scratch)
    }
}

/// A thread's share of an attention step ([`Model::attention_items`]): items `first, first +
/// step, …` below `count`, of the KV heads from `g0` on.
struct Items {
    g0: usize,
    first: usize,
    count: usize,
    step: usize,
}

/// Where the tokens of a step's matmul sit in llama.cpp's matmuls: token `b` at `(m, i)`, the
/// `i`-th row of a matmul over `m` tokens (which of its kernels computes the token's outputs,
/// and so in which order, depends on it: `SumOrder::for_token`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum At<'p> {
    /// Consecutive rows of one matmul: token b at `(m, i + b)`.
    Run(usize, usize),
    /// Token b at `each[b]` (a step mixing several sequences' tokens).
    Each(&'p [(usize, usize)]),
}

impl<'p> At<'p> {
    /// The place of a step's tokens from where `micro`'s pair `(m, i)` says they start.
    fn run((m, i): (usize, usize)) -> At<'p> {
        At::Run(m, i)
    }

    /// Token `b`'s `(m, i)`.
    fn of(self, b: usize) -> (usize, usize) {
        match self {
            At::Run(m, i) => (m, i + b),
            At::Each(each) => each[b],
        }
    }
}

/// The runs `(b0, b1, order)` of the step's `n` tokens (placed as `at` says) that llama.cpp
/// computes with `t` in one order.
fn token_runs(t: &Tensor, n: usize, at: At) -> Vec<(usize, usize, SumOrder)> {
    let order = |b: usize| token_order(t, at, b);
    let mut runs = Vec::new();
    let mut b0 = 0;
    while b0 < n {
        let o = order(b0);
        let b1 = (b0 + 1..n).find(|&b| order(b) != o).unwrap_or(n);
        runs.push((b0, b1, o));
        b0 = b1;
    }
    runs
}

/// The order of token `b` of a step whose tokens are placed as `at` says.
fn token_order(t: &Tensor, at: At, b: usize) -> SumOrder {
    let (m, i) = at.of(b);
    SumOrder::for_token(t.ty, t.order, m, i)
}

/// Exchanges two states' caches (keys, values, sliding-window cells, the batch's cells), so one
/// state's buffers can run a step on the other's sequence.
fn swap_cache(a: &mut State, b: &mut State) {
    std::mem::swap(&mut a.k, &mut b.k);
    std::mem::swap(&mut a.v, &mut b.v);
    std::mem::swap(&mut a.swa, &mut b.swa);
    std::mem::swap(&mut a.rows, &mut b.rows);
    std::mem::swap(&mut a.pos, &mut b.pos);
}

/// Where a forward step's tokens sit in llama.cpp's micro-batch: which of its kernels computes
/// a token's matmul rows depends on it (see `SumOrder::for_token`).
#[derive(Clone, Copy, Debug)]
struct Micro {
    /// The attention arithmetic of the micro-batch.
    arith: Arith,
    /// (tokens in the micro-batch, index of the step's first token among them).
    tokens: (usize, usize),
    /// (tokens of the micro-batch with logits, index of the step's first such token among
    /// them): the rows of the last layer's FFN and of the output head.
    outputs: (usize, usize),
}

impl Micro {
    /// The micro-batch a mixed step passes (each of its segments has its own).
    const UNUSED: Micro = Micro {
        arith: Arith::Single,
        tokens: (1, 0),
        outputs: (0, 0),
    };
}

/// The batch's input rows quantized once for each activation format a group of matmuls needs,
/// and the chunk counters its parallel step shares out rows with.
struct BatchActs {
    /// Rows of each activation type, in [`ActType::ALL`]'s order.
    by_type: [Vec<ActRow>; ActType::ALL.len()],
    claims: Vec<Claims>,
    /// The Q8_0 rows interleaved for the packed block-chain groups' steps panels, where a
    /// step's matrices take them ([`Kernels::build_packed_steps`]).
    steps: PackedSteps,
}

/// Most matrices one matmul step computes (q, k and v together; or gate and up of each of a
/// token's experts, up to sixteen of them).
const MAX_JOBS: usize = 32;

/// Per pool thread, the chunks taken from its run of each matrix of a step ([`Shares`]), on
/// its own cache lines (only its group's threads touch them).
#[repr(align(128))]
#[derive(Default)]
struct Claims([Claim; MAX_JOBS]);

impl BatchActs {
    fn new() -> BatchActs {
        BatchActs {
            by_type: ActType::ALL.map(|t| (0..MAX_BATCH).map(|_| ActRow::of(t)).collect()),
            claims: Vec::new(),
            steps: PackedSteps::default(),
        }
    }

    fn index(t: ActType) -> usize {
        ActType::ALL
            .iter()
            .position(|&a| a == t)
            .expect("every activation type is listed")
    }

    fn rows_mut(&mut self, t: ActType) -> &mut [ActRow] {
        &mut self.by_type[Self::index(t)]
    }

    fn rows(&self, t: ActType) -> &[ActRow] {
        &self.by_type[Self::index(t)]
    }

    /// Quantizes the `n` rows of `x` (width `cols`) for every format `tensors` need.
    fn prepare(
        &mut self,
        kernels: &Kernels,
        x: &[f32],
        n: usize,
        cols: usize,
        tensors: &[&Tensor],
    ) {
        let mut done = [None; ActType::ALL.len()];
        for t in tensors {
            let at = ActType::for_weight(t.ty);
            if done.contains(&Some(at)) {
                continue;
            }
            done[done.iter().position(Option::is_none).unwrap_or(0)] = Some(at);
            for (row, xr) in self
                .rows_mut(at)
                .iter_mut()
                .zip(x.chunks_exact(cols))
                .take(n)
            {
                kernels.quantize_act(row, xr);
            }
        }
    }
}

/// A shared mutable f32 buffer that threads write in disjoint places: a [`Disjoint`] writer
/// (which keeps the buffer borrowed while it lives) addressed as the forward pass does, by
/// start and end.
#[derive(Clone, Copy)]
struct Out<'a>(Disjoint<'a, f32>);

impl<'a> Out<'a> {
    fn new(v: &'a mut [f32]) -> Out<'a> {
        Out(Disjoint::new(v))
    }

    /// # Safety
    /// No two live slices or writes from the same `Out` may overlap.
    #[allow(clippy::mut_from_ref)]
    unsafe fn slice(&self, start: usize, end: usize) -> &mut [f32] {
        // SAFETY: exclusivity is the caller's obligation, passed on; `slice` checks bounds.
        unsafe { self.0.slice(start..end) }
    }

    /// # Safety
    /// No other thread may access element `i` during the step.
    #[inline]
    unsafe fn write(&self, i: usize, v: f32) {
        // SAFETY: exclusivity is the caller's obligation, passed on; `write` checks bounds.
        unsafe { self.0.write(i, v) }
    }
}

/// `x` rounded down to a packed group boundary, `rows` (a matrix's end) kept.
fn pack_floor(x: usize, rows: usize) -> usize {
    if x == rows {
        x
    } else {
        x / PACK_ROWS * PACK_ROWS
    }
}

/// Writes a step's outputs (`k` rows from `r0`, token-major in `step`) into the matmul's
/// output (`rows` per token).
///
/// # Safety
/// Rows `r0..r0 + k` of every token's output must be this thread's alone during the step.
unsafe fn scatter(out: &Out, rows: usize, r0: usize, k: usize, step: &[f32]) {
    for (b, outs_b) in step.chunks_exact(k).enumerate() {
        for (j, v) in outs_b.iter().enumerate() {
            // SAFETY: element (b, r0 + j) is this thread's alone (the caller's promise).
            unsafe { out.write(b * rows + r0 + j, *v) };
        }
    }
}

/// Runs `f(b)` for each token `b` of a batch of `n`: split among the pool's threads when there
/// are several tokens and threads, on the calling thread otherwise (a single token's work is
/// too small to pay for a parallel step). Each token's arithmetic is the same either way.
fn per_token(pool: &Pool, n: usize, f: &(dyn Fn(usize) + Sync)) {
    let nth = pool.threads();
    if n < 2 || nth < 2 {
        (0..n).for_each(f);
        return;
    }
    pool.run(&|tid| {
        let (b0, b1) = split(n, tid, nth);
        (b0..b1).for_each(f);
    });
}

/// The rows of view `t` that the group of `threads` (of `nth`) computes, shared among them in
/// steps of a panel's rows. A packed view is read in whole groups: every group's share ends on a
/// group boundary (the same rounding for all, so the shares still cover every row once).
fn group_share(t: &Tensor, threads: &std::ops::Range<usize>, nth: usize) -> Shares {
    let (lo, hi) = rows_of_group(t.rows, threads, nth);
    let (lo, hi) = match t.layout {
        Layout::Rows => (lo, hi),
        _ => (pack_floor(lo, t.rows), pack_floor(hi, t.rows)),
    };
    Shares::new(lo, hi, threads.len(), crate::kernels::PANEL_ROWS)
}

/// Runs `chunk(j, rows)` on thread `tid` (of the group `threads`) for its own run of every
/// matrix `j` of a step, then for what the group's other threads have not yet taken of
/// theirs; `claims` are the step's counters, reset before it.
fn claim_rows(
    shares: &[Shares],
    (tid, threads): (usize, &std::ops::Range<usize>),
    claims: &[Claims],
    mut chunk: impl FnMut(usize, (usize, usize)),
) {
    let me = tid - threads.start;
    for (j, sh) in shares.iter().enumerate() {
        while let Some(c) = sh.own(me, &claims[tid].0[j]) {
            chunk(j, c);
        }
    }
    for (j, sh) in shares.iter().enumerate() {
        for other in threads.clone().filter(|&o| o != tid) {
            while let Some(c) = sh.steal(other - threads.start, &claims[other].0[j]) {
                chunk(j, c);
            }
        }
    }
}

fn add_into(x: &mut [f32], d: &[f32]) {
    for (a, b) in x.iter_mut().zip(d) {
        *a += b;
    }
}

impl<'a> Model<'a> {
    pub fn new(config: Config, weights: Weights<'a>, kernels: Kernels) -> Model<'a> {
        let rope = Rope::new(
            config.n_rot,
            config.rope_freq_base,
            config.rope_freq_scale,
            weights.rope_freqs.clone(),
        );
        let rope_local = config.recipe.swa.as_ref().map(|w| {
            Rope::new(
                config.n_rot,
                w.freq_base,
                w.freq_scale,
                weights.rope_freqs.clone(),
            )
        });
        Model {
            config,
            weights,
            kernels,
            rope,
            rope_local,
        }
    }

    /// The softmax's scale of the attention scores: 1/√head_dim, or 1 where the family scales
    /// the queries itself.
    fn kq_scale(&self) -> f32 {
        match self.config.recipe.q_scale {
            Some(_) => 1.0,
            None => 1.0 / (self.config.head_dim as f32).sqrt(),
        }
    }

    /// The elements of one thread's attention scratch: scores (`cells`, the longest row), a
    /// rounded query (head_dim), and one KV head's keys and values widened to f32 (cells ×
    /// head_dim each; only a batch's reach is touched). `None` on overflow.
    fn scratch_stride(&self, cells: usize) -> Option<usize> {
        let hd = self.config.head_dim;
        cells
            .checked_mul(hd)?
            .checked_mul(2)?
            .checked_add(cells)?
            .checked_add(hd)
    }

    /// Cells per KV head of each layer's cache in a context of `n_ctx`: `n_ctx` for a global
    /// layer, the sliding-window ring's size for a local one.
    fn layer_cells(&self, n_ctx: usize) -> impl Iterator<Item = usize> + '_ {
        let ring = self.swa_cells(n_ctx);
        (0..self.config.n_layer).map(move |il| match ring {
            Some(cells) if self.config.recipe.is_local(il) => cells,
            _ => n_ctx,
        })
    }

    /// The sliding-window ring's size in a context of `n_ctx`, where the family has one.
    fn swa_cells(&self, n_ctx: usize) -> Option<usize> {
        let swa = self.config.recipe.swa.as_ref()?;
        Some(SwaCells::size_for(n_ctx, swa.window))
    }

    /// What a state for `n_ctx` tokens and `n_threads` threads takes, or `None` where the sizes
    /// overflow. Checked before anything is allocated, so a huge `-c` is an error, not an abort.
    pub fn state_bytes(
        &self,
        n_ctx: usize,
        n_threads: usize,
        kv_type: KvType,
    ) -> Option<StateBytes> {
        let c = &self.config;
        let head_row = (c.n_head_kv as u64).checked_mul(kv_type.row_bytes(c.head_dim) as u64)?;
        let mut kv = 0u64;
        for cells in self.layer_cells(n_ctx) {
            let layer = (cells as u64).checked_mul(head_row)?;
            // Every buffer must also be addressable.
            if layer > isize::MAX as u64 {
                return None;
            }
            kv = kv.checked_add(layer.checked_mul(2)?)?;
        }
        let cells = n_ctx.max(self.swa_cells(n_ctx).unwrap_or(0));
        let scratch = (self.scratch_stride(cells)? as u64)
            .checked_mul(n_threads.max(1) as u64)?
            .checked_mul(4)?;
        (scratch <= isize::MAX as u64).then_some(StateBytes { kv, scratch })
    }

    /// The KV cache's shape in a context of `n_ctx`, for `--verbose`: how many layers keep a
    /// cell per position and how many keep the sliding-window ring, and its cells.
    pub fn kv_layout(&self, n_ctx: usize) -> String {
        let n = self.config.n_layer;
        let local = (0..n).filter(|&il| self.config.recipe.is_local(il)).count();
        match self.swa_cells(n_ctx) {
            Some(ring) if local > 0 => format!(
                "{} global layers × {n_ctx} cells, {local} sliding-window layers × {ring} cells",
                n - local
            ),
            _ => format!("{n} layers × {n_ctx} cells"),
        }
    }

    /// A fresh sequence state with room for `n_ctx` tokens, scratch sized for `n_threads`.
    ///
    /// # Panics
    /// Where memory runs out; commands use [`Model::try_new_state`].
    pub fn new_state(&self, n_ctx: usize, n_threads: usize, kv_type: KvType) -> State {
        self.try_new_state(n_ctx, n_threads, kv_type)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Model::new_state`] that reports a size that overflows or an allocation that fails
    /// (a memory limit such as `ulimit -v`) as an error naming `-c`.
    pub fn try_new_state(
        &self,
        n_ctx: usize,
        n_threads: usize,
        kv_type: KvType,
    ) -> Result<State, super::ModelError> {
        let c = &self.config;
        let b = MAX_BATCH;
        let sizes = self.state_bytes(n_ctx, n_threads, kv_type);
        let too_big = |bytes: Option<u64>| super::ModelError::ContextTooLarge {
            ctx: n_ctx,
            bytes,
            n_ctx_train: c.n_ctx_train,
        };
        if kv_type.block_type().is_some() && !c.head_dim.is_multiple_of(crate::kernels::QK) {
            return Err(super::ModelError::KvType {
                ty: kv_type.name(),
                why: format!(
                    "keeps rows of whole 32-value blocks, and this model's heads have {} values; \
                     use f16",
                    c.head_dim
                ),
            });
        }
        let Some(sizes) = sizes else {
            return Err(too_big(None));
        };
        // More than the machine's memory can never run; say so before trying (overcommit
        // would let the allocation succeed and the process be killed later).
        if crate::sys::memory::physical_bytes().is_some_and(|m| sizes.total() > m) {
            return Err(too_big(None));
        }
        let scratch_cells = n_ctx.max(self.swa_cells(n_ctx).unwrap_or(0));
        let scratch_stride = self.scratch_stride(scratch_cells).ok_or(too_big(None))?;
        let mut k = Vec::with_capacity(c.n_layer);
        let mut v = Vec::with_capacity(c.n_layer);
        for cells in self.layer_cells(n_ctx) {
            let (len, hd) = (cells * c.kv_dim(), c.head_dim);
            k.push(KvBuf::try_new(kv_type, len, hd).ok_or(too_big(Some(sizes.total())))?);
            v.push(KvBuf::try_new(kv_type, len, hd).ok_or(too_big(Some(sizes.total())))?);
        }
        let swa = c
            .recipe
            .swa
            .as_ref()
            .map(|w| SwaCells::new(n_ctx, w.window));
        // The FFN buffers hold a dense FFN's rows or one expert's.
        let ff_width = c.n_ff.max(c.moe.map_or(0, |m| m.n_ff));
        let scratch = super::kv::try_zeroed::<f32>(n_threads.max(1) * scratch_stride)
            .ok_or(too_big(Some(sizes.total())))?;
        Ok(State {
            n_ctx,
            pos: 0,
            kv_type,
            k,
            v,
            swa,
            rows: Default::default(),
            moe: c
                .moe
                .as_ref()
                .map(|m| moe::MoeBufs::new(m, c.n_embd, c.n_layer)),
            x: vec![0.0; b * c.n_embd],
            xn: vec![0.0; b * c.n_embd],
            q: vec![0.0; b * c.q_dim()],
            kcur: vec![0.0; b * c.kv_dim()],
            vcur: vec![0.0; b * c.kv_dim()],
            att: vec![0.0; b * c.q_dim()],
            gate: vec![0.0; b * ff_width],
            up: vec![0.0; b * ff_width],
            tmp: vec![0.0; b * c.n_embd],
            scratch,
            scratch_stride,
            scratch_cells,
            acts: BatchActs::new(),
            rope_cache: Vec::with_capacity(b * c.n_rot / 2),
            rope_cache_local: Vec::new(),
            logits: vec![0.0; b * c.n_vocab],
            n_logits: 0,
            stop: None,
            stopped: false,
        })
    }

    /// `outs[i][b] = mats[i] · x[b]` for the `n` rows of `x`, for matrices that share the
    /// input, in one parallel step. Each group computes its rows of every matrix
    /// ([`rows_of_group`], the split placement stored on its node), its threads taking them in
    /// runs ([`Shares`]) and reading them from the group's view; each weight row is
    /// applied to all `n` inputs while it is hot.
    ///
    /// The `n` rows are rows `at.1..at.1 + n` of a matmul over `at.0` rows as llama.cpp runs
    /// it (its micro-batch, or the tokens it keeps for the last layer): where a row sits
    /// decides which of its kernels computes it ([`SumOrder::for_token`]).
    fn matmuls<const N: usize>(
        &self,
        pool: &Pool,
        acts: &mut BatchActs,
        x: &[f32],
        (n, at): (usize, At),
        jobs: [(&Matrix, &mut [f32]); N],
    ) {
        const { assert!(N <= MAX_JOBS) };
        let jobs = jobs.map(|(m, o)| (m, Out::new(o)));
        let tensors = jobs.each_ref().map(|(m, _)| &m.file);
        acts.prepare(&self.kernels, x, n, tensors[0].cols, &tensors);
        // The tokens of the step interleaved for the packed block-chain groups' steps panels,
        // once for every matrix and thread of the step.
        let takes_steps = |t: &Tensor| self.kernels.takes_steps(t.layout, n);
        let have_steps = jobs.iter().any(|(m, _)| m.views().iter().any(takes_steps)) && {
            let q8 = &acts.by_type[BatchActs::index(ActType::Q8_0)][..n];
            self.kernels.build_packed_steps(q8, &mut acts.steps)
        };
        acts.claims.resize_with(pool.threads(), Claims::default);
        for c in &acts.claims {
            c.0[..N].iter().for_each(|a| a.store(0, Ordering::Relaxed));
        }
        let acts = &*acts;
        let kernels = &self.kernels;
        let nth = pool.threads();
        pool.run(&|tid| {
            use crate::kernels::PANEL_ROWS as STEP;
            // Packed groups go two to a step: the AVX-512 prompt kernels feed both from each
            // activation broadcast.
            const PACKED_STEP: usize = 2 * PACK_ROWS;
            // The outputs of one step (up to PACKED_STEP rows) for every token, token-major.
            let mut step = [0f32; PACKED_STEP * MAX_BATCH];
            let slot = pool.group_of(tid);
            let threads = &pool.groups()[slot];
            // Per matrix, the group's view and rows (stored on its node), shared among the
            // group's threads.
            let plan: [_; N] = std::array::from_fn(|j| {
                let t = jobs[j].0.view(slot);
                (t, group_share(t, threads, nth), token_runs(t, n, at))
            });
            let shares = plan.each_ref().map(|p| p.1);
            let order = |t: &Tensor, b: usize| token_order(t, at, b);
            // A packed group in the file's layout, for the multi-token kernels.
            let mut unpacked: Vec<u8> = Vec::new();
            let chunk = |j: usize, (c0, c1): (usize, usize)| {
                let (t, out) = (&plan[j].0, &jobs[j].1);
                let act = &acts.rows(ActType::for_weight(t.ty))[..n];
                if n == 1 {
                    // SAFETY: this thread alone claimed rows c0..c1, so it alone writes
                    // their (single-token) outputs during the step.
                    let o = unsafe { out.slice(c0, c1) };
                    let rows = t.rows_bytes(c0, c1);
                    kernels.gemv_in(t.layout, t.ty, order(t, 0), rows, &act[0], o);
                    return;
                }
                if matches!(t.layout, Layout::Q4_0x16 | Layout::Iq4NlX16) {
                    // Whole packed groups (c0 and c1 are group boundaries), each against all
                    // n tokens.
                    let groups = (c1 - c0) / PACK_ROWS;
                    let step = &mut step[..PACK_ROWS * n];
                    let rows = t.rows_bytes(c0, c1);
                    // The steps were built from these very rows (Q8_0, as every block-chain
                    // packed layout takes them); the run checks that they are.
                    let steps = have_steps.then_some(&acts.steps);
                    kernels.dot_tile_packed_run(
                        t.layout,
                        rows,
                        groups,
                        act,
                        steps,
                        step,
                        |g, o| {
                            // SAFETY: this thread alone claimed rows c0..c1.
                            unsafe { scatter(out, t.rows, c0 + g * PACK_ROWS, PACK_ROWS, o) };
                        },
                    );
                    return;
                }
                // Rows in steps of a tile's rows, each step against all n tokens (dot_tile
                // walks them a tile's tokens at a time), so the step's rows stay in L1. Groups
                // of another packed layout (whole groups: c0 and c1 are group boundaries; two
                // to a step) go through the tier's packed kernels, or are put back in the
                // file's layout first (once per step) for a run of tokens they do not take.
                let step_rows = match t.layout {
                    Layout::Rows => STEP,
                    _ => PACKED_STEP,
                };
                for r0 in (c0..c1).step_by(step_rows) {
                    let k = step_rows.min(c1 - r0);
                    let step = &mut step[..k * n];
                    let packed = (t.layout != Layout::Rows).then(|| t.rows_bytes(r0, r0 + k));
                    let mut is_unpacked = false;
                    // Each run of tokens computed in one order (token-major outputs).
                    for &(b0, b1, o) in &plan[j].2 {
                        let (acts, step) = (&act[b0..b1], &mut step[b0 * k..b1 * k]);
                        if let Some(g) = packed {
                            if kernels.dot_tile_in(t.layout, t.ty, o, g, acts, step) {
                                continue;
                            }
                            if !is_unpacked {
                                unpacked.resize(g.len(), 0);
                                let blocks = t.cols / t.layout.block_elems();
                                let group = PACK_ROWS * t.row_bytes;
                                for (p, u) in g.chunks(group).zip(unpacked.chunks_mut(group)) {
                                    pack::unpack_group(t.layout, p, blocks, u);
                                }
                                is_unpacked = true;
                            }
                        }
                        let rows: [&[u8]; PACKED_STEP] = match packed {
                            None => std::array::from_fn(|j| t.row(r0 + j.min(k - 1))),
                            Some(_) => std::array::from_fn(|j| {
                                &unpacked[j.min(k - 1) * t.row_bytes..][..t.row_bytes]
                            }),
                        };
                        kernels.dot_tile(t.ty, o, &rows[..k], acts, step);
                    }
                    // SAFETY: this thread alone claimed rows c0..c1.
                    unsafe { scatter(out, t.rows, r0, k, step) };
                }
            };
            claim_rows(&shares, (tid, threads), &acts.claims, chunk);
        });
    }

    /// Runs one token at position `s.pos`; with `want_logits` its logits are `s.logits(0)`.
    pub fn forward(&self, pool: &Pool, s: &mut State, token: u32, want_logits: bool) {
        let outs = usize::from(want_logits);
        let micro = Micro {
            arith: Arith::Single,
            tokens: (1, 0),
            outputs: (outs, 0),
        };
        self.forward_batch(pool, s, None, &[token], 1 - outs, micro);
    }

    /// A state to serve as [`Model::forward_mixed`]'s buffers for sequences of up to `n_ctx`
    /// tokens: scratch for `n_threads`, and no cache of its own.
    pub fn try_new_workspace(
        &self,
        n_ctx: usize,
        n_threads: usize,
        kv_type: KvType,
    ) -> Result<State, super::ModelError> {
        let mut w = self.try_new_state(1, n_threads, kv_type)?;
        let scratch_cells = n_ctx.max(self.swa_cells(n_ctx).unwrap_or(0));
        let too_big = || super::ModelError::ContextTooLarge {
            ctx: n_ctx,
            bytes: None,
            n_ctx_train: self.config.n_ctx_train,
        };
        let stride = self.scratch_stride(scratch_cells).ok_or_else(too_big)?;
        w.scratch = super::kv::try_zeroed::<f32>(n_threads.max(1) * stride).ok_or_else(too_big)?;
        w.scratch_stride = stride;
        w.scratch_cells = scratch_cells;
        w.n_ctx = n_ctx;
        Ok(w)
    }

    /// Evaluates `tokens` (any number) at positions `s.pos..`, in batches of [`MAX_BATCH`].
    /// Logits are computed for the tokens from index `logits_from` on and handed to `sink(i,
    /// logits)` in order (`i` is the index in `tokens`). Where the state's stop flag is set
    /// meanwhile, it returns early with `s.stopped()` true and the rest not evaluated.
    pub fn eval(
        &self,
        pool: &Pool,
        s: &mut State,
        tokens: &[u32],
        logits_from: usize,
        mut sink: impl FnMut(usize, &mut [f32]),
    ) {
        let mut start = 0;
        while start < tokens.len() {
            start = self.eval_chunk(pool, s, tokens, start, logits_from, &mut sink);
            if s.stopped {
                return;
            }
        }
    }

    /// One forward step of [`Model::eval`]: evaluates `tokens[start..end]` (the batch `eval`
    /// runs from `start`, or the rest of it where `start` falls inside one) and returns `end`.
    /// `tokens[..start]` must already be in the cache in front of them (`s.pos` is their end).
    /// Each token's arithmetic is the one `eval` of all of `tokens` gives it, so a prompt fed a
    /// step at a time, or after a cached prefix, has the keys, values and logits of `eval`.
    pub fn eval_chunk(
        &self,
        pool: &Pool,
        s: &mut State,
        tokens: &[u32],
        start: usize,
        logits_from: usize,
        sink: &mut impl FnMut(usize, &mut [f32]),
    ) -> usize {
        assert!(start < tokens.len(), "eval_chunk past the tokens");
        let (end, micro, from) = chunk_plan(tokens.len(), start, logits_from, MAX_BATCH);
        let chunk = &tokens[start..end];
        self.forward_batch(pool, s, None, chunk, from, micro);
        if !s.stopped {
            for i in from..chunk.len() {
                sink(start + i, s.logits(i - from));
            }
        }
        end
    }

    /// What decides the arithmetic of token `i` of a prompt of `len` tokens evaluated by
    /// [`Model::eval`] (`len` 1: a decoded token), as a number: its micro-batch's attention
    /// arithmetic and the order every layer matrix sums it in. Two tokens with equal histories
    /// and equal signatures have the same keys and values bit for bit, so a cached prefix whose
    /// signatures match a new prompt's can stand in for evaluating it ([`Model::reuses_prefixes`]).
    pub fn token_signature(&self, len: usize, i: usize) -> u64 {
        let u0 = i / UBATCH * UBATCH;
        let m = (len - u0).min(UBATCH);
        let mut sig = u64::from(Arith::for_ubatch(m) == Arith::Batch);
        let mut seen: Vec<(crate::kernels::GgmlType, SumOrder)> = Vec::new();
        let mut add = |t: &Tensor| {
            if !seen.contains(&(t.ty, t.order)) {
                seen.push((t.ty, t.order));
                let o = SumOrder::for_token(t.ty, t.order, m, i - u0);
                sig = sig.rotate_left(3) ^ (o as u64 + 1);
            }
        };
        for l in &self.weights.layers {
            for mat in [&l.wq, &l.wk, &l.wv, &l.wo] {
                add(&mat.file);
            }
            if let Ffn::Dense { gate, up, down } = &l.ffn {
                for mat in [gate, up, down] {
                    add(&mat.file);
                }
            }
        }
        sig
    }

    /// Whether a cached prefix may stand in for a prompt's first tokens: not for a
    /// sliding-window cache (its ring's cells follow the micro-batches it was filled by) nor for
    /// a mixture of experts (a token's expert matmuls depend on which other tokens of its batch
    /// chose the same experts).
    pub fn reuses_prefixes(&self) -> bool {
        self.config.recipe.swa.is_none() && self.config.moe.is_none()
    }

    /// Evaluates up to [`MAX_BATCH`] consecutive tokens at positions `s.pos..`, computing
    /// logits for tokens `logits_from..` (into `s.logits(0..)`), with the arithmetic llama.cpp
    /// uses for them where `micro` says they sit in its micro-batch. As llama.cpp does, the last
    /// layer's FFN runs only for the tokens whose logits are wanted (the others' states are
    /// not needed past their keys and values).
    ///
    /// With `mixed`, the tokens are its segments' one after another, each segment consecutive
    /// tokens of its own sequence placed as the segment's micro-batch says (`micro` and
    /// `logits_from` are not read), and `s` lends only its buffers. The tokens with logits
    /// (each segment's from its `from`) have them in `s.logits(0..)` in batch order.
    fn forward_batch(
        &self,
        pool: &Pool,
        s: &mut State,
        mut mixed: Option<Mixed>,
        tokens: &[u32],
        logits_from: usize,
        micro: Micro,
    ) {
        let c = &self.config;
        let w = &self.weights;
        let n = tokens.len();
        assert!((1..=MAX_BATCH).contains(&n), "batch of {n} tokens");
        if s.check_stop() {
            return;
        }
        match &mixed {
            None => assert!(s.pos + n <= s.n_ctx, "forward past the end of the context"),
            Some(m) => assert!(
                m.seqs.len() == m.segs.len()
                    && m.segs.iter().map(|g| g.count).sum::<usize>() == n
                    && m.seqs.iter().zip(m.segs).all(|(q, g)| {
                        g.count > 0 && q.pos + g.count <= q.n_ctx && q.n_ctx <= s.n_ctx
                    })
                    && c.moe.is_none(),
                "forward past the end of a context"
            ),
        }
        let plan = mixed.as_ref().map(|m| MixedPlan::new(m));
        let at = plan
            .as_ref()
            .map_or(At::run(micro.tokens), |p| At::Each(&p.places));
        let (e, ff) = (c.n_embd, c.n_ff);
        for (b, &tok) in tokens.iter().enumerate() {
            assert!((tok as usize) < c.n_vocab, "token id {tok} out of range");
            let x = &mut s.x[b * e..(b + 1) * e];
            crate::kernels::dequantize_row(
                w.token_embd.ty(),
                w.token_embd.row_any(tok as usize),
                x,
            );
            if let Some(scale) = c.recipe.embd_scale {
                x.iter_mut().for_each(|v| *v *= scale);
            }
        }
        // The cells of the batch: a new micro-batch first takes its sliding-window cells.
        let fill = |q: &mut State, n: usize, (m, i0): (usize, usize)| {
            q.rows[0].fill_linear(q.n_ctx, q.pos, n);
            if let Some(swa) = &mut q.swa {
                if i0 == 0 {
                    swa.place(q.pos, m);
                }
                q.rows[1].fill_ring(swa, i0, q.pos, n);
            }
        };
        match mixed.as_mut() {
            None => fill(s, n, micro.tokens),
            Some(m) => {
                for (q, g) in m.seqs.iter_mut().zip(m.segs) {
                    fill(q, g.count, g.micro.tokens);
                }
            }
        }
        s.rope_cache.clear();
        s.rope_cache_local.clear();
        for b in 0..n {
            let pos = plan.as_ref().map_or(s.pos + b, |p| p.pos[b]);
            self.rope.append_cache(pos, &mut s.rope_cache);
            if let Some(r) = &self.rope_local {
                r.append_cache(pos, &mut s.rope_cache_local);
            }
        }

        for (li, layer) in w.layers.iter().enumerate() {
            {
                let (x, xn) = (&s.x, Out::new(&mut s.xn));
                per_token(pool, n, &|b| {
                    // SAFETY: token b's row of xn is written by this call alone.
                    let xn = unsafe { xn.slice(b * e, (b + 1) * e) };
                    ops::rms_norm(&x[b * e..(b + 1) * e], &layer.attn_norm, c.rms_eps, xn);
                });
            }
            if s.check_stop() {
                return;
            }
            self.matmuls(
                pool,
                &mut s.acts,
                &s.xn,
                (n, at),
                [
                    (&layer.wq, &mut s.q),
                    (&layer.wk, &mut s.kcur),
                    (&layer.wv, &mut s.vcur),
                ],
            );
            let local = c.recipe.is_local(li);
            self.qkv_steps(pool, s, layer, local, n);
            match mixed.as_mut() {
                None => {
                    self.store_kv(pool, s, li, (0, n), local);
                    self.attention(pool, s, li, (0, n), micro.arith, local);
                }
                // Each sequence's cache lent to the buffers for its segment.
                Some(m) => {
                    let mut b0 = 0;
                    for (q, g) in m.seqs.iter_mut().zip(m.segs) {
                        swap_cache(s, q);
                        self.store_kv(pool, s, li, (b0, g.count), local);
                        self.attention(pool, s, li, (b0, g.count), g.micro.arith, local);
                        swap_cache(s, q);
                        b0 += g.count;
                    }
                }
            }
            if s.check_stop() {
                return;
            }
            self.matmuls(
                pool,
                &mut s.acts,
                &s.att,
                (n, at),
                [(&layer.wo, &mut s.tmp)],
            );
            {
                let (tmp, x, xn) = (
                    Out::new(&mut s.tmp),
                    Out::new(&mut s.x),
                    Out::new(&mut s.xn),
                );
                per_token(pool, n, &|b| {
                    // SAFETY: token b's rows of tmp, x and xn are touched by this call alone.
                    let (t, x, xn) = unsafe {
                        (
                            tmp.slice(b * e, (b + 1) * e),
                            x.slice(b * e, (b + 1) * e),
                            xn.slice(b * e, (b + 1) * e),
                        )
                    };
                    if let Some(bo) = &layer.bo {
                        add_into(t, bo);
                    }
                    match &layer.post_norms {
                        Some([post_attn, _]) => {
                            ops::rms_norm(t, post_attn, c.rms_eps, xn);
                            add_into(x, xn);
                        }
                        None => add_into(x, t),
                    }
                    ops::rms_norm(x, &layer.ffn_norm, c.rms_eps, xn);
                });
            }
            if s.check_stop() {
                return;
            }
            // The last layer's FFN: only the tokens with logits (rows b0.. of the batch, where a
            // mixed step first moves them), as rows of a matmul over the micro-batch's outputs.
            let (b0, nf, at) = match (li + 1 == w.layers.len(), &plan) {
                (false, _) => (0, n, at),
                (true, None) => {
                    let b0 = logits_from.min(n);
                    (b0, n - b0, At::run(micro.outputs))
                }
                (true, Some(p)) => {
                    let nf = p.outs.len();
                    for (j, &b) in p.outs.iter().enumerate().rev() {
                        let to = n - nf + j;
                        s.x.copy_within(b * e..(b + 1) * e, to * e);
                        s.xn.copy_within(b * e..(b + 1) * e, to * e);
                    }
                    (n - nf, nf, At::Each(&p.out_places))
                }
            };
            if nf == 0 {
                continue;
            }
            let (w_gate, w_up, w_down) = match &layer.ffn {
                Ffn::Dense { gate, up, down } => (gate, up, down),
                Ffn::Moe(x) => {
                    self.moe_ffn(pool, s, (li, x), (b0, nf, at));
                    self.ffn_residual(pool, s, layer, b0, nf, n);
                    continue;
                }
            };
            self.matmuls(
                pool,
                &mut s.acts,
                &s.xn[b0 * e..],
                (nf, at),
                [(w_gate, &mut s.gate), (w_up, &mut s.up)],
            );
            {
                let (up, gate, kernels) = (&s.up, Out::new(&mut s.gate), &self.kernels);
                per_token(pool, nf, &|b| {
                    // SAFETY: token b's row of gate is touched by this call alone.
                    let g = unsafe { gate.slice(b * ff, (b + 1) * ff) };
                    let up = &up[b * ff..(b + 1) * ff];
                    match c.recipe.ffn {
                        FfnAct::Silu => kernels.swiglu(g, up),
                        FfnAct::GeluTanh => kernels.geglu(g, up),
                    }
                });
            }
            if s.check_stop() {
                return;
            }
            self.matmuls(pool, &mut s.acts, &s.gate, (nf, at), [(w_down, &mut s.tmp)]);
            self.ffn_residual(pool, s, layer, b0, nf, n);
        }
        let logits_from = match mixed {
            None => {
                s.pos += n;
                logits_from.min(n)
            }
            Some(m) => {
                for (q, g) in m.seqs.iter_mut().zip(m.segs) {
                    q.pos += g.count;
                }
                n - plan.as_ref().map_or(0, |p| p.outs.len())
            }
        };
        s.n_logits = n - logits_from;
        if s.n_logits > 0 {
            for b in logits_from..n {
                let i = b - logits_from;
                ops::rms_norm(
                    &s.x[b * e..(b + 1) * e],
                    &w.output_norm,
                    c.rms_eps,
                    &mut s.xn[i * e..(i + 1) * e],
                );
            }
            let m = s.n_logits;
            if s.check_stop() {
                return;
            }
            let at = plan
                .as_ref()
                .map_or(At::run(micro.outputs), |p| At::Each(&p.out_places));
            self.matmuls(
                pool,
                &mut s.acts,
                &s.xn,
                (m, at),
                [(&w.output, &mut s.logits)],
            );
        }
    }

    /// Adds the FFN's outputs `s.tmp[..nf]` to the residual stream of tokens `b0..n` (through
    /// the post-FFN norm where the family has one).
    fn ffn_residual(
        &self,
        pool: &Pool,
        s: &mut State,
        layer: &Layer,
        b0: usize,
        nf: usize,
        n: usize,
    ) {
        let c = &self.config;
        let e = c.n_embd;
        match &layer.post_norms {
            Some([_, post_ffn]) => {
                let (tmp, x, xn) = (&s.tmp, Out::new(&mut s.x), Out::new(&mut s.xn));
                per_token(pool, nf, &|b| {
                    let bb = b0 + b;
                    // SAFETY: token bb's rows of x and xn are touched by this call alone.
                    let (x, xn) = unsafe {
                        (
                            x.slice(bb * e, (bb + 1) * e),
                            xn.slice(bb * e, (bb + 1) * e),
                        )
                    };
                    ops::rms_norm(&tmp[b * e..(b + 1) * e], post_ffn, c.rms_eps, xn);
                    add_into(x, xn);
                });
            }
            None => add_into(&mut s.x[b0 * e..n * e], &s.tmp[..nf * e]),
        }
    }

    /// What the family does to each token's fresh queries and keys before attention: biases,
    /// per-head RMSNorm, RoPE (the layer's: local layers have their own base), query scaling.
    fn qkv_steps(&self, pool: &Pool, s: &mut State, layer: &Layer, local: bool, n: usize) {
        let c = &self.config;
        let (qd, kvd, hd, half) = (c.q_dim(), c.kv_dim(), c.head_dim, c.n_rot / 2);
        let kernels = &self.kernels;
        let rc = if local {
            &s.rope_cache_local
        } else {
            &s.rope_cache
        };
        let (q, k, v) = (
            Out::new(&mut s.q),
            Out::new(&mut s.kcur),
            Out::new(&mut s.vcur),
        );
        per_token(pool, n, &|b| {
            let rc = &rc[b * half..(b + 1) * half];
            // SAFETY: token b's rows of q, kcur and vcur are touched by this call alone.
            let (q, k, v) = unsafe {
                (
                    q.slice(b * qd, (b + 1) * qd),
                    k.slice(b * kvd, (b + 1) * kvd),
                    v.slice(b * kvd, (b + 1) * kvd),
                )
            };
            if let Some([bq, bk, bv]) = &layer.qkv_bias {
                add_into(q, bq);
                add_into(k, bk);
                add_into(v, bv);
            }
            if let Some([qn, kn]) = &layer.qk_norm {
                let mut head = vec![0f32; hd];
                for (x, w) in [(&mut *q, qn), (&mut *k, kn)] {
                    for h in x.chunks_exact_mut(hd) {
                        head.copy_from_slice(h);
                        ops::rms_norm(&head, w, c.rms_eps, h);
                    }
                }
            }
            match c.recipe.rope {
                RopeStyle::Normal => {
                    kernels.rope(rc, q, hd);
                    kernels.rope(rc, k, hd);
                }
                RopeStyle::Neox => {
                    kernels.rope_neox(rc, q, hd);
                    kernels.rope_neox(rc, k, hd);
                }
            }
            if let Some(scale) = c.recipe.q_scale {
                q.iter_mut().for_each(|v| *v *= scale);
            }
        });
    }
}
