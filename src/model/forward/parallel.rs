//! How a forward step's work is shared among the pool's threads, beside the math that asks for
//! it: [`per_token`] for a token's own arithmetic, [`Model::matmuls`] for the products every
//! node's threads share (each group its node's rows, its threads claiming them in chunks), the
//! activations quantized once per step ([`BatchActs`]), and [`Out`], the buffer threads write
//! in disjoint places.

use super::{Model, MAX_BATCH};
use crate::disjoint::Disjoint;
use crate::kernels::{pack, ActRow, ActType, Kernels, Layout, PackedSteps, SumOrder, PACK_ROWS};
use crate::model::imatrix_collect::Collector;
use crate::model::weights::{Matrix, Tensor};
use crate::pool::{rows_of_group, split, Claim, Pool, Shares};
use std::sync::atomic::Ordering;

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
    pub(super) fn run((m, i): (usize, usize)) -> At<'p> {
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
pub(super) fn token_order(t: &Tensor, at: At, b: usize) -> SumOrder {
    let (m, i) = at.of(b);
    SumOrder::for_token(t.ty, t.order, m, i)
}

/// The batch's input rows quantized once for each activation format a group of matmuls needs,
/// and the chunk counters its parallel step shares out rows with.
pub(super) struct BatchActs {
    /// Rows of each activation type, in [`ActType::ALL`]'s order.
    by_type: [Vec<ActRow>; ActType::ALL.len()],
    pub(super) claims: Vec<Claims>,
    /// The Q8_0 rows interleaved for the packed block-chain groups' steps panels, where a
    /// step's matrices take them ([`Kernels::build_packed_steps`]).
    steps: PackedSteps,
    /// Where an importance matrix is being collected (`locus imatrix`), the collector that
    /// sees every weight matmul's f32 input rows; `None` otherwise (one check a matmul).
    pub(super) tap: Option<Box<Collector>>,
}

/// Most matrices one matmul step computes (q, k and v together; or gate and up of each of a
/// token's experts, up to sixteen of them).
pub(super) const MAX_JOBS: usize = 32;

/// Per pool thread, the chunks taken from its run of each matrix of a step ([`Shares`]), on
/// its own cache lines (only its group's threads touch them).
#[repr(align(128))]
#[derive(Default)]
pub(super) struct Claims(pub(super) [Claim; MAX_JOBS]);

impl BatchActs {
    pub(super) fn new() -> BatchActs {
        BatchActs {
            by_type: ActType::ALL.map(|t| (0..MAX_BATCH).map(|_| ActRow::of(t)).collect()),
            claims: Vec::new(),
            steps: PackedSteps::default(),
            tap: None,
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

    pub(super) fn rows(&self, t: ActType) -> &[ActRow] {
        &self.by_type[Self::index(t)]
    }

    /// Quantizes the `n` rows of `x` (width `cols`) for every format `tensors` need.
    pub(super) fn prepare(
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

/// One matmul of a parallel step: the matrix, where its outputs go, and its input rows
/// prepared for it.
struct Job<'j> {
    m: &'j Matrix<'j>,
    out: Out<'j>,
    acts: &'j BatchActs,
}

impl BatchActs {
    /// Zeroes the step's counters of the first `jobs` matrices for every thread of `pool`.
    fn reset_claims(&mut self, pool: &Pool, jobs: usize) {
        self.claims.resize_with(pool.threads(), Claims::default);
        for c in &self.claims {
            c.0[..jobs]
                .iter()
                .for_each(|a| a.store(0, Ordering::Relaxed));
        }
    }
}

/// A shared mutable f32 buffer that threads write in disjoint places: a [`Disjoint`] writer
/// (which keeps the buffer borrowed while it lives) addressed as the forward pass does, by
/// start and end.
#[derive(Clone, Copy)]
pub(super) struct Out<'a>(Disjoint<'a, f32>);

impl<'a> Out<'a> {
    pub(super) fn new(v: &'a mut [f32]) -> Out<'a> {
        Out(Disjoint::new(v))
    }

    /// # Safety
    /// No two live slices or writes from the same `Out` may overlap.
    #[allow(clippy::mut_from_ref)]
    pub(super) unsafe fn slice(&self, start: usize, end: usize) -> &mut [f32] {
        // SAFETY: exclusivity is the caller's obligation, passed on; `slice` checks bounds.
        unsafe { self.0.slice(start..end) }
    }

    /// # Safety
    /// No other thread may access element `i` during the step.
    #[inline]
    pub(super) unsafe fn write(&self, i: usize, v: f32) {
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
pub(super) fn per_token(pool: &Pool, n: usize, f: &(dyn Fn(usize) + Sync)) {
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
pub(super) fn group_share(t: &Tensor, threads: &std::ops::Range<usize>, nth: usize) -> Shares {
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
pub(super) fn claim_rows(
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

impl Model<'_> {
    /// `outs[i][b] = mats[i] · x[b]` for the `n` rows of `x`, for matrices that share the
    /// input, in one parallel step. Each group computes its rows of every matrix
    /// ([`rows_of_group`], the split placement stored on its node), its threads taking them in
    /// runs ([`Shares`]) and reading them from the group's view; each weight row is
    /// applied to all `n` inputs while it is hot.
    ///
    /// The `n` rows are rows `at.1..at.1 + n` of a matmul over `at.0` rows as llama.cpp runs
    /// it (its micro-batch, or the tokens it keeps for the last layer): where a row sits
    /// decides which of its kernels computes it ([`SumOrder::for_token`]).
    pub(super) fn matmuls<const N: usize>(
        &self,
        pool: &Pool,
        acts: &mut BatchActs,
        x: &[f32],
        (n, at): (usize, At),
        jobs: [(&Matrix, &mut [f32]); N],
    ) {
        const { assert!(N <= MAX_JOBS) };
        if let Some(tap) = acts.tap.as_deref_mut() {
            for (m, _) in &jobs {
                tap.dense(&m.name, x, n, m.file.cols);
            }
        }
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
        acts.reset_claims(pool, N);
        let acts = &*acts;
        let jobs = jobs.map(|(m, out)| Job { m, out, acts });
        let steps = have_steps.then_some(&acts.steps);
        self.matmul_step(pool, &acts.claims, steps, (n, at), &jobs);
    }

    /// `outs[h][b] = mats[h] · xs[h][b]`: a matrix per head, each with its own `n` input rows
    /// (`xs`: head-major, `n` rows of the matrices' width a head; `outs` likewise), as ggml's
    /// batched matmul of a 3-D weight, in parallel steps of up to [`MAX_JOBS`] heads instead
    /// of a step per head. `acts` lends its counters; `head_acts` holds each head's input
    /// rows prepared (as many as the heads of a step). Each output is the one a step of its
    /// head alone computes.
    pub(super) fn head_matmuls(
        &self,
        pool: &Pool,
        (acts, head_acts): (&mut BatchActs, &mut [BatchActs]),
        (xs, n, at): (&[f32], usize, At),
        mats: &[Matrix],
        outs: &mut [f32],
    ) {
        let Some(first) = mats.first() else { return };
        let (cols, rows) = (first.file.cols, first.file.rows);
        let per_step = head_acts.len().clamp(1, MAX_JOBS);
        let mut outs = outs.chunks_mut(n * rows);
        for h0 in (0..mats.len()).step_by(per_step) {
            let h1 = mats.len().min(h0 + per_step);
            for (h, a) in (h0..h1).zip(head_acts.iter_mut()) {
                let x = &xs[h * n * cols..(h + 1) * n * cols];
                a.prepare(&self.kernels, x, n, cols, &[&mats[h].file]);
            }
            acts.reset_claims(pool, h1 - h0);
            let jobs: Vec<Job> = ((h0..h1).zip(head_acts.iter()).zip(outs.by_ref()))
                .map(|((h, a), o)| Job {
                    m: &mats[h],
                    out: Out::new(o),
                    acts: a,
                })
                .collect();
            // Weights of 3-D tensors are never packed: no steps panels.
            self.matmul_step(pool, &acts.claims, None, (n, at), &jobs);
        }
    }

    /// One parallel step of matmuls (see [`Model::matmuls`]): each `jobs[j]` reads its input
    /// rows prepared in its `acts`; `claims` are the step's counters, reset for the jobs.
    fn matmul_step(
        &self,
        pool: &Pool,
        claims: &[Claims],
        steps: Option<&PackedSteps>,
        (n, at): (usize, At),
        jobs: &[Job],
    ) {
        let have_steps = steps.is_some();
        let kernels = &self.kernels;
        let nth = pool.threads();
        pool.run(&|tid| {
            // Packed groups go two to a step: the AVX-512 prompt kernels feed both from each
            // activation broadcast.
            const PACKED_STEP: usize = 2 * PACK_ROWS;
            // The outputs of one step (up to PACKED_STEP rows) for every token, token-major.
            let mut step = [0f32; PACKED_STEP * MAX_BATCH];
            let slot = pool.group_of(tid);
            let threads = &pool.groups()[slot];
            // Per matrix, the group's view and rows (stored on its node), shared among the
            // group's threads.
            let plan: Vec<_> = (jobs.iter())
                .map(|job| {
                    let t = job.m.view(slot);
                    (t, group_share(t, threads, nth), token_runs(t, n, at))
                })
                .collect();
            let shares: Vec<Shares> = plan.iter().map(|p| p.1).collect();
            let order = |t: &Tensor, b: usize| token_order(t, at, b);
            // A packed group in the file's layout, for the multi-token kernels.
            let mut unpacked: Vec<u8> = Vec::new();
            let chunk = |j: usize, (c0, c1): (usize, usize)| {
                let (t, out) = (&plan[j].0, &jobs[j].out);
                let act = &jobs[j].acts.rows(ActType::for_weight(t.ty))[..n];
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
                    let steps = steps.filter(|_| have_steps);
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
                // Rows in steps of a tile's rows (`tile_step_rows`: two panels' for the types
                // whose AVX-512 panels take two groups at once), each step against all n tokens
                // (dot_tile walks them a tile's tokens at a time), so the step's rows stay in
                // L1. Groups
                // of another packed layout (whole groups: c0 and c1 are group boundaries; two
                // to a step) go through the tier's packed kernels, or are put back in the
                // file's layout first (once per step) for a run of tokens they do not take.
                let step_rows = match t.layout {
                    Layout::Rows => kernels.tile_step_rows(t.ty).min(PACKED_STEP),
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
            claim_rows(&shares, (tid, threads), claims, chunk);
        });
    }
}
