//! The llama-family forward pass — embedding, RMSNorm, RoPE, attention over the KV cache, a
//! gated feed-forward network or a mixture of experts, output head — for a batch of
//! consecutive tokens at once.
//!
//! `Model::forward_batch` is the driver: one stage after another, each in a file named for
//! what it holds (`embed.rs` and Gemma 4 E2B/E4B's per-layer inputs in `ple.rs`, then per layer
//! `attention.rs` and `ffn.rs` with `moe.rs` (and `ple.rs`'s per-layer block), then `head.rs`),
//! a layer's blocks of the kinds its weights say ([`Attention`](super::weights::Attention),
//! [`Ffn`]). The stages read top to bottom as the math; how their work is shared among threads
//! sits beside them (`parallel.rs`), and where the step's tokens sit in llama.cpp's matmuls and
//! whose sequences they are in `step.rs` (and `mixed.rs`, for several sequences in one step).
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
//! rows [`rows_of_group`](crate::pool::rows_of_group) names, which placement stores on that
//! node; the group's threads claim them in chunks, so a slower thread takes fewer, and read them
//! from the group's view (its node's copy or shard). Attention deals out (token, head) pairs. A
//! row's value never depends on which thread computed it or which copy it was read from, so
//! outputs are identical for any thread count and placement.

mod attention;
mod embed;
mod ffn;
mod head;
mod latent;
mod mixed;
mod moe;
mod parallel;
mod ple;
mod step;

use super::config::Config;
use super::imatrix_collect::Collector;
use super::kv::KvBuf;
pub use super::kv::{Arith, KvType};
use super::swa::SwaCells;
use super::weights::{Ffn, Tensor, Weights};
use crate::kernels::ops::Rope;
use crate::kernels::{Kernels, SumOrder};
use crate::pool::Pool;
use attention::Rows;
pub use mixed::Part;
use mixed::{chunk_plan, Mixed};
use parallel::BatchActs;
use std::sync::atomic::{AtomicBool, Ordering};
use step::{Micro, Step};

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
    /// The config as the sliding-window layers see it, where their attention has its own
    /// shape (Gemma 4: [`Config::local_view`]).
    config_local: Option<Config>,
}

/// Who runs a state's steps: the threads (each with its scratch) and the pool's groups, one
/// per node (a latent cache keeps a copy for each). A thread count alone is one group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lanes {
    pub threads: usize,
    pub groups: usize,
}

impl From<usize> for Lanes {
    fn from(threads: usize) -> Lanes {
        Lanes { threads, groups: 1 }
    }
}

impl From<&Pool> for Lanes {
    fn from(pool: &Pool) -> Lanes {
        Lanes {
            threads: pool.threads(),
            groups: pool.groups().len(),
        }
    }
}

/// Per-sequence state: the KV cache and scratch buffers for one batch.
pub struct State {
    pub n_ctx: usize,
    /// Tokens already in the cache.
    pub pos: usize,
    kv_type: KvType,
    /// Per layer: keys, head-major (`n_head_kv × cells × head_dim`), so each KV head's keys
    /// are one contiguous block. A global layer has a cell per position (`n_ctx`), a
    /// sliding-window layer the ring of `swa`. Latent attention: a copy of every layer's
    /// cells per pool group, copy-major.
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
    /// Latent attention's buffers (DeepSeek).
    mla: Option<latent::LatentBufs>,
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
    /// Per-layer embeddings (Gemma 4 E2B/E4B): each token's input to every layer,
    /// `MAX_BATCH × n_layer × width`, and a layer's gated values, `MAX_BATCH × width`.
    ple_in: Vec<f32>,
    ple_act: Vec<f32>,
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
    ///
    /// A latent cache keeps a copy per group instead (every head reads every cell): each
    /// copy's layers go to the group that writes and reads it.
    pub fn kv_head_blocks(&self, model: &Model, pool: &Pool) -> Vec<(&[u8], usize)> {
        if model.config.latent_cache().is_some() {
            let n_layer = model.config.n_layer.max(1);
            let groups = pool.groups().len().max(1);
            return (self.k.iter().enumerate())
                .map(|(i, buf)| (buf.as_bytes(), latent::copy_group(i / n_layer, groups)))
                .filter(|(b, _)| !b.is_empty())
                .collect();
        }
        let n_layer = model.config.n_layer.max(1);
        let mut out = Vec::new();
        for (i, buf) in self.k.iter().chain(&self.v).enumerate() {
            let local = model.config.recipe.is_local(i % n_layer);
            let heads = model.lc(local).n_head_kv;
            let owner: Vec<usize> = (0..heads)
                .map(|h| {
                    (0..pool.groups().len())
                        .find(|&g| {
                            let (a, b) = model.kv_heads_of_group(pool, g, local);
                            (a..b).contains(&h)
                        })
                        .unwrap_or(0)
                })
                .collect();
            let bytes = buf.as_bytes();
            if bytes.is_empty() {
                continue;
            }
            let per = bytes.len() / heads.max(1);
            for (h, &g) in owner.iter().enumerate() {
                out.push((&bytes[h * per..(h + 1) * per], g));
            }
        }
        out
    }

    /// Lends the state an importance-matrix collector (`locus imatrix`): every forward step
    /// then hands it each weight matmul's f32 input rows. `None` takes nothing in.
    pub fn set_tap(&mut self, tap: Option<Box<Collector>>) {
        self.acts.tap = tap;
    }

    /// Takes back the collector [`State::set_tap`] lent.
    pub fn take_tap(&mut self) -> Option<Box<Collector>> {
        self.acts.tap.take()
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
    /// Keys and values of every layer, every copy.
    pub kv: u64,
    /// The copies of the cache: one per pool group for latent attention, one otherwise.
    pub kv_copies: usize,
    /// Per-thread attention scratch (scores, a query, one KV head widened to f32).
    pub scratch: u64,
}

impl StateBytes {
    pub fn total(&self) -> u64 {
        self.kv.saturating_add(self.scratch)
    }
}

fn add_into(x: &mut [f32], d: &[f32]) {
    for (a, b) in x.iter_mut().zip(d) {
        *a += b;
    }
}

impl<'a> Model<'a> {
    pub fn new(config: Config, weights: Weights<'a>, kernels: Kernels) -> Model<'a> {
        let base_scale = (config.rope_freq_base, config.rope_freq_scale);
        let rope = match &config.yarn {
            None => Rope::new(
                config.n_rot,
                base_scale.0,
                base_scale.1,
                weights.rope_freqs.clone(),
            ),
            Some(y) => Rope::with_yarn(
                config.n_rot,
                base_scale,
                weights.rope_freqs.clone(),
                &y.rope,
            ),
        };
        // Gemma 4's sliding-window layers have a shape of their own; gpt-oss's take the same
        // YaRN as its full layers.
        let config_local = config.local_view();
        let rope_local = config
            .recipe
            .swa
            .as_ref()
            .map(|w| match (&config_local, &config.yarn) {
                // Gemma 4's sliding-window layers: their own rotated dimensions, and the frequency
                // divisors are the global layers' alone (llama.cpp passes them to those only).
                (Some(l), _) => Rope::new(l.n_rot, w.freq_base, w.freq_scale, None),
                (None, None) => Rope::new(
                    config.n_rot,
                    w.freq_base,
                    w.freq_scale,
                    weights.rope_freqs.clone(),
                ),
                (None, Some(y)) => Rope::with_yarn(
                    config.n_rot,
                    (w.freq_base, w.freq_scale),
                    weights.rope_freqs.clone(),
                    &y.rope,
                ),
            });
        Model {
            config,
            weights,
            kernels,
            rope,
            rope_local,
            config_local,
        }
    }

    /// The config a layer's attention reads: the sliding-window layers' own view where they
    /// have one (`local`), else the model's.
    pub(super) fn lc(&self, local: bool) -> &Config {
        match (&self.config_local, local) {
            (Some(l), true) => l,
            _ => &self.config,
        }
    }

    /// The largest of the two attention shapes' sizes (`f` of each view).
    fn widest(&self, f: impl Fn(&Config) -> usize) -> usize {
        f(&self.config).max(self.config_local.as_ref().map_or(0, f))
    }

    /// The softmax's scale of the attention scores: 1/√head_dim, or 1 where the family scales
    /// the queries itself.
    fn kq_scale(&self) -> f32 {
        match (self.config.recipe.q_scale, &self.config.mla) {
            (Some(_), _) => 1.0,
            // DeepSeek's unabsorbed form attends per head with latent attention's scale.
            (None, Some(m)) => m.kq_scale,
            (None, None) => 1.0 / (self.config.head_dim as f32).sqrt(),
        }
    }

    /// The elements of one thread's attention scratch: scores (`cells`, the longest row), a
    /// rounded query (head_dim), and one KV head's keys and values widened to f32 (cells ×
    /// head_dim each; only a batch's reach is touched). `None` on overflow.
    fn scratch_stride(&self, cells: usize) -> Option<usize> {
        let (hd, vd) = (self.widest(|c| c.head_dim), self.widest(|c| c.head_dim_v));
        if self.config.latent_cache().is_some() {
            // Latent attention widens nothing in the scratch: scores and a rounded query for
            // each head of a decode step's set.
            return cells.checked_add(hd)?.checked_mul(latent::LATENT_HEAD_SET);
        }
        // Widened keys and values, then scores and a rounded query for each head of a set.
        cells.checked_mul(hd.checked_add(vd)?)?.checked_add(
            cells
                .checked_add(hd)?
                .checked_mul(attention::MAX_HEAD_SET)?,
        )
    }

    /// Cells per KV head of each layer's cache in a context of `n_ctx`: `n_ctx` for a global
    /// layer, the sliding-window ring's size for a local one, none for a shared-KV layer (it
    /// reads an earlier layer's).
    fn layer_cells(&self, n_ctx: usize) -> impl Iterator<Item = usize> + '_ {
        let ring = self.swa_cells(n_ctx);
        let r = &self.config.recipe;
        (0..self.config.n_layer).map(move |il| match ring {
            _ if !r.has_kv(il) => 0,
            Some(cells) if r.is_local(il) => cells,
            _ => n_ctx,
        })
    }

    /// The sliding-window ring's size in a context of `n_ctx`, where the family has one.
    fn swa_cells(&self, n_ctx: usize) -> Option<usize> {
        let swa = self.config.recipe.swa.as_ref()?;
        Some(SwaCells::size_for(n_ctx, swa.window))
    }

    /// What a state for `n_ctx` tokens run by `lanes` takes, or `None` where the sizes
    /// overflow. Checked before anything is allocated, so a huge `-c` is an error, not an abort.
    pub fn state_bytes(
        &self,
        n_ctx: usize,
        lanes: impl Into<Lanes>,
        kv_type: KvType,
    ) -> Option<StateBytes> {
        let Lanes { threads, groups } = lanes.into();
        let c = &self.config;
        let copies = self.kv_copies(groups);
        let row =
            |c: &Config, d: usize| (c.n_head_kv as u64).checked_mul(kv_type.row_bytes(d) as u64);
        let mut kv = 0u64;
        for (il, cells) in self.layer_cells(n_ctx).enumerate() {
            let lc = self.lc(c.recipe.is_local(il));
            // Latent attention reads its values out of the keys' cells: no V cache.
            let v_row = match c.latent_cache() {
                Some(_) => 0,
                None => row(lc, lc.head_dim_v)?,
            };
            let (k, v) = (cells as u64 * row(lc, lc.head_dim)?, cells as u64 * v_row);
            // Every buffer must also be addressable.
            if k.max(v) > isize::MAX as u64 {
                return None;
            }
            kv = kv.checked_add(k)?.checked_add(v)?;
        }
        let kv = kv.checked_mul(copies as u64)?;
        let cells = n_ctx.max(self.swa_cells(n_ctx).unwrap_or(0));
        let mut scratch = (self.scratch_stride(cells)? as u64)
            .checked_mul(threads.max(1) as u64)?
            .checked_mul(4)?;
        if let Some(m) = c.latent_cache() {
            let vt = latent::LatentBufs::vt_bytes(m, n_ctx, kv_type)?;
            scratch = scratch.checked_add(vt.checked_mul(copies as u64)?)?;
        }
        (scratch <= isize::MAX as u64).then_some(StateBytes {
            kv,
            kv_copies: copies,
            scratch,
        })
    }

    /// The copies of the KV cache a state run by `groups` pool groups keeps: one per group
    /// for latent attention, whose every head reads every cell (each group's threads then read
    /// a copy on their own node), one otherwise (each KV head's block lies with the group
    /// that computes the head).
    fn kv_copies(&self, groups: usize) -> usize {
        if self.config.latent_cache().is_some() {
            groups.max(1)
        } else {
            1
        }
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
            _ => match self.config.latent_cache() {
                None => format!("{n} layers × {n_ctx} cells"),
                // What the latent cell saves: per-head keys and values would take n_head ×
                // (nope + rope + v_head) values a token and layer.
                Some(m) => format!(
                    "{n} layers × {n_ctx} latent cells of {} + {} values, for {} heads that \
                     as per-head keys and values would take {} values",
                    m.kv_lora,
                    m.rope,
                    self.config.n_head,
                    self.config.n_head * (m.q_head() + m.v_head)
                ),
            },
        }
    }

    /// A fresh sequence state with room for `n_ctx` tokens, scratch sized for `n_threads`.
    ///
    /// # Panics
    /// Where memory runs out; commands use [`Model::try_new_state`].
    pub fn new_state(&self, n_ctx: usize, lanes: impl Into<Lanes>, kv_type: KvType) -> State {
        self.try_new_state(n_ctx, lanes, kv_type)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Model::new_state`] that reports a size that overflows or an allocation that fails
    /// (a memory limit such as `ulimit -v`) as an error naming `-c`.
    pub fn try_new_state(
        &self,
        n_ctx: usize,
        lanes: impl Into<Lanes>,
        kv_type: KvType,
    ) -> Result<State, super::ModelError> {
        let lanes = lanes.into();
        let (n_threads, copies) = (lanes.threads, self.kv_copies(lanes.groups));
        let c = &self.config;
        let b = MAX_BATCH;
        let sizes = self.state_bytes(n_ctx, lanes, kv_type);
        let too_big = |bytes: Option<u64>| super::ModelError::ContextTooLarge {
            ctx: n_ctx,
            bytes,
            n_ctx_train: c.n_ctx_train,
        };
        let odd = |c: &Config| !c.head_dim.is_multiple_of(crate::kernels::QK);
        if kv_type.block_type().is_some() && (odd(c) || self.config_local.as_ref().is_some_and(odd))
        {
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
        if c.latent_cache().is_some() && kv_type.block_type().is_some() {
            return Err(super::ModelError::KvType {
                ty: kv_type.name(),
                why: "is not supported with latent attention (its values are read out of the \
                      keys' cells, which llama.cpp keeps unquantized without flash attention); \
                      use f16"
                    .into(),
            });
        }
        // Copy-major: copy `i`'s layers are `k[i * n_layer..]`.
        for (i, cells) in (0..copies)
            .flat_map(|_| self.layer_cells(n_ctx))
            .enumerate()
        {
            let lc = self.lc(c.recipe.is_local(i % c.n_layer.max(1)));
            let (len, hd, vd) = (cells * lc.kv_dim(), lc.head_dim, lc.head_dim_v);
            let v_len = match c.latent_cache() {
                Some(_) => 0,
                None => cells * lc.v_dim(),
            };
            k.push(KvBuf::try_new(kv_type, len, hd).ok_or(too_big(Some(sizes.total())))?);
            v.push(KvBuf::try_new(kv_type, v_len, vd).ok_or(too_big(Some(sizes.total())))?);
        }
        let swa = c
            .recipe
            .swa
            .as_ref()
            .map(|w| SwaCells::new(n_ctx, w.window));
        // The FFN buffers hold a dense FFN's rows, one expert's or the shared experts'.
        let ff_width = c.n_ff.max(c.moe.map_or(0, |m| m.n_ff.max(m.shared_ff())));
        let views = |m: &super::config::Mla| if m.joint { 0 } else { copies };
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
            mla: match &c.mla {
                None => None,
                // (The unabsorbed form keeps per-head keys and values: no latent views.)
                Some(m) => Some(
                    latent::LatentBufs::try_new(m, (c.n_head, views(m)), b, (n_ctx, kv_type))
                        .ok_or(too_big(Some(sizes.total())))?,
                ),
            },
            x: vec![0.0; b * c.n_embd],
            xn: vec![0.0; b * c.n_embd],
            q: vec![0.0; b * self.widest(Config::q_dim)],
            kcur: vec![0.0; b * self.widest(Config::kv_dim)],
            vcur: vec![0.0; b * self.widest(|c| c.kv_dim().max(c.v_dim()))],
            att: vec![0.0; b * self.widest(|c| c.q_dim().max(c.att_dim()))],
            gate: vec![0.0; b * ff_width],
            up: vec![0.0; b * ff_width],
            tmp: vec![0.0; b * c.n_embd],
            ple_in: vec![0.0; b * c.n_layer * c.recipe.ple],
            ple_act: vec![0.0; b * c.recipe.ple],
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

    /// Runs one token at position `s.pos`; with `want_logits` its logits are `s.logits(0)`.
    pub fn forward(&self, pool: &Pool, s: &mut State, token: u32, want_logits: bool) {
        let outs = usize::from(want_logits);
        let micro = Micro {
            arith: Arith::Single,
            tokens: (1, 0),
            outputs: (outs, 0),
            run: (1, 0),
        };
        self.forward_batch(pool, s, None, &[token], 1 - outs, micro);
    }

    /// A state to serve as [`Model::forward_mixed`]'s buffers for sequences of up to `n_ctx`
    /// tokens: scratch for `lanes`, and no cache of its own.
    pub fn try_new_workspace(
        &self,
        n_ctx: usize,
        lanes: impl Into<Lanes>,
        kv_type: KvType,
    ) -> Result<State, super::ModelError> {
        let lanes = lanes.into();
        let (n_threads, copies) = (lanes.threads, self.kv_copies(lanes.groups));
        let mut w = self.try_new_state(1, lanes, kv_type)?;
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
        if let Some(m) = &self.config.mla {
            let cells = (scratch_cells, kv_type);
            let heads = (self.config.n_head, if m.joint { 0 } else { copies });
            let bufs = latent::LatentBufs::try_new(m, heads, MAX_BATCH, cells);
            w.mla = Some(bufs.ok_or_else(too_big)?);
        }
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

    /// Evaluates `tokens` (at most [`MAX_BATCH`]) at positions `s.pos..`, every one with
    /// logits (handed to `sink(i, logits)` in order), as rows `i0..` of a llama.cpp
    /// micro-batch of `m` tokens, in which this sequence has a run of `count` tokens, these
    /// from its index `j0` on: the placement of llama-imatrix's batches of several sequences,
    /// whose micro-batch holds a run of each sequence's tokens in turn.
    pub fn eval_placed(
        &self,
        pool: &Pool,
        s: &mut State,
        tokens: &[u32],
        ((m, i0), (count, j0)): ((usize, usize), (usize, usize)),
        mut sink: impl FnMut(usize, &mut [f32]),
    ) {
        assert!(
            i0 + tokens.len() <= m && j0 + tokens.len() <= count && count <= m,
            "rows past the micro-batch"
        );
        let micro = Micro {
            arith: Arith::for_ubatch(count),
            tokens: (m, i0),
            outputs: (m, i0),
            run: (count, j0),
        };
        self.forward_batch(pool, s, None, tokens, 0, micro);
        if !s.stopped {
            for i in 0..tokens.len() {
                sink(i, s.logits(i));
            }
        }
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
            for mat in l.attn.matrices() {
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
    ///
    /// The stages, each in its own file: [`Model::embed`], then per layer
    /// [`Model::attention_block`] and [`Model::ffn_block`], then [`Model::head`]. A stage that
    /// sees the stop flag returns early, and so does the step.
    fn forward_batch(
        &self,
        pool: &Pool,
        s: &mut State,
        mixed: Option<Mixed>,
        tokens: &[u32],
        logits_from: usize,
        micro: Micro,
    ) {
        let n = tokens.len();
        assert!((1..=MAX_BATCH).contains(&n), "batch of {n} tokens");
        if s.check_stop() {
            return;
        }
        let mut step = Step::new(self, s, mixed, n, (micro, logits_from));
        self.embed(s, tokens);
        self.per_layer_inputs(pool, s, &step, tokens);
        self.place(s, &mut step);
        let layers = &self.weights.layers;
        for (li, layer) in layers.iter().enumerate() {
            self.attention_block(pool, s, &mut step, (li, layer));
            if s.stopped {
                return;
            }
            // As llama.cpp does, the last layer's FFN runs only for the tokens with logits.
            let last = li + 1 == layers.len();
            let rows = match last && !self.config.recipe.full_last_layer {
                false => step.all_rows(),
                true => step.output_rows(s, self.config.n_embd),
            };
            self.ffn_block(pool, s, (li, layer), rows, n);
            if s.stopped {
                return;
            }
            if last && self.config.recipe.full_last_layer {
                // Every row ran the last layer; the head reads those with logits where the
                // step keeps them.
                step.output_rows(s, self.config.n_embd);
            }
        }
        let first = step.advance(s);
        self.head(pool, s, (first, n), step.output_at());
    }
}
