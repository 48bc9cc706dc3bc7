//! Collecting an importance matrix as llama-imatrix does (`IMatrixCollector::collect_imatrix`
//! and `save_imatrix` in `tools/imatrix/imatrix.cpp`): for every matmul whose weight is a model
//! tensor, the sum of the squares of each input column over the tokens, and how many tokens
//! were summed. The forward pass hands a [`Collector`] each weight matmul's f32 input rows
//! (before they are quantized to the weight's activation format); the driver says where
//! llama.cpp's micro-batches begin and end, since that decides both what is skipped and the
//! order of an expert's sums.
//!
//! What llama-imatrix takes, and how it sums (in f32, each product rounded before its add: the
//! tool is built without FMA contraction):
//! - a plain matmul (`MUL_MAT`) of a `blk.*` weight, or of `output.weight` with
//!   `--process-output` (never the token embedding, even where the head is tied to it), over a
//!   micro-batch of at least [`MIN_ROWS`] tokens: `acc[j] += x[j]·x[j]` for each token in the
//!   micro-batch's order, and the count grows by the tokens;
//! - an expert matmul (`MUL_MAT_ID`, the `*_exps` weights), whatever the micro-batch: one row
//!   per expert, summed slot by slot and, within a slot, token by token over the whole
//!   micro-batch (`for idx in slots { for row in tokens { … } }`), each (token, slot) counting
//!   once for its expert. Gate and up read the token's normed row at every slot, down the
//!   slot's own activation.

use std::collections::BTreeMap;

use super::gguf_write::{GgufWriter, MetaValue};
use super::imatrix::{KEY_CHUNK_COUNT, KEY_CHUNK_SIZE, KEY_DATASETS};
use crate::kernels::GgmlType;

/// llama-imatrix skips plain matmuls over micro-batches of fewer tokens than this.
pub const MIN_ROWS: usize = 16;
/// The name of the untied output head, collected with `--process-output` only.
const OUTPUT_NAME: &str = "output.weight";
/// The prefix of every layer's tensors.
const LAYER_PREFIX: &str = "blk.";

/// One weight's sums: `values` (`n_mat × cols`, expert-major) and a count per expert (one for a
/// plain weight).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Entry {
    pub values: Vec<f32>,
    pub counts: Vec<i64>,
}

/// One expert tensor's inputs in the current micro-batch, kept until it ends (its sums run slot
/// by slot over all of its tokens, which locus evaluates in several steps).
#[derive(Debug, Default)]
struct Pending {
    n_expert: usize,
    /// Experts per token.
    k: usize,
    width: usize,
    /// Whether every slot of a token reads the same row (gate and up), else one row per slot.
    shared_row: bool,
    /// Token-major input rows: one per token, or `k` per token.
    rows: Vec<f32>,
    /// Per token, its `k` experts in slot order.
    sel: Vec<usize>,
    /// The first token of the step being filled (down's rows arrive expert by expert).
    step_base: usize,
}

impl Pending {
    fn tokens(&self) -> usize {
        self.sel.len() / self.k.max(1)
    }
}

/// The sums of an importance matrix being collected (see the module).
#[derive(Debug, Default)]
pub struct Collector {
    process_output: bool,
    /// Tokens in the micro-batch being evaluated.
    ubatch: usize,
    entries: BTreeMap<String, Entry>,
    pending: BTreeMap<String, Pending>,
    /// The first weight whose sums stopped being finite (llama-imatrix exits on it).
    nonfinite: Option<String>,
}

/// An expert tensor's base name: its matrices are named `…_exps.weight[e]`.
fn base_name(name: &str) -> &str {
    name.split_once('[').map_or(name, |(b, _)| b)
}

impl Collector {
    pub fn new(process_output: bool) -> Collector {
        Collector {
            process_output,
            ..Collector::default()
        }
    }

    /// A micro-batch of `tokens` tokens begins.
    pub fn begin_ubatch(&mut self, tokens: usize) {
        self.ubatch = tokens;
    }

    /// The micro-batch ends: the expert tensors' sums, in llama.cpp's order.
    pub fn end_ubatch(&mut self) {
        for (name, p) in std::mem::take(&mut self.pending) {
            let e = self.entries.entry(name.clone()).or_default();
            if e.values.is_empty() {
                e.values = vec![0.0; p.n_expert * p.width];
                e.counts = vec![0; p.n_expert];
            }
            let mut touched = vec![false; p.n_expert];
            for slot in 0..p.k {
                for t in 0..p.tokens() {
                    let ex = p.sel[t * p.k + slot];
                    let r = if p.shared_row { t } else { t * p.k + slot };
                    let x = &p.rows[r * p.width..(r + 1) * p.width];
                    e.counts[ex] += 1;
                    touched[ex] = true;
                    add_squares(&mut e.values[ex * p.width..(ex + 1) * p.width], x);
                }
            }
            let finite = (0..p.n_expert)
                .filter(|&ex| touched[ex])
                .all(|ex| all_finite(&e.values[ex * p.width..(ex + 1) * p.width]));
            if !finite && self.nonfinite.is_none() {
                self.nonfinite = Some(name);
            }
        }
        self.ubatch = 0;
    }

    /// A plain matmul of the weight `name` over `n` rows of `cols` inputs `x`, in the
    /// micro-batch's order.
    pub fn dense(&mut self, name: &str, x: &[f32], n: usize, cols: usize) {
        // An expert's own matrix: its inputs come through `experts_in` and `experts_down`.
        let is_expert = name.ends_with(']');
        let wanted = name.starts_with(LAYER_PREFIX) || (self.process_output && name == OUTPUT_NAME);
        if is_expert || !wanted || self.ubatch < MIN_ROWS {
            return;
        }
        let e = self.entries.entry(name.to_string()).or_default();
        if e.values.is_empty() {
            e.values = vec![0.0; cols];
            e.counts = vec![0];
        }
        for row in x[..n * cols].chunks_exact(cols) {
            add_squares(&mut e.values, row);
        }
        e.counts[0] += n as i64;
        if !all_finite(&e.values) && self.nonfinite.is_none() {
            self.nonfinite = Some(name.to_string());
        }
    }

    /// A step's tokens go to a mixture's experts: `sel` (`k` a token) their experts, `x` their
    /// normed rows of `width`, which gate and up (`names`, any expert's matrix) read at every
    /// slot.
    pub fn experts_in(
        &mut self,
        names: [&str; 2],
        (n_expert, k): (usize, usize),
        x: &[f32],
        sel: &[usize],
    ) {
        let width = x.len() / (sel.len() / k).max(1);
        for name in names {
            let p = self.pending_of(name, (n_expert, k, width), sel, true);
            p.rows.extend_from_slice(x);
        }
    }

    /// A step's tokens (`sel`, `k` experts a token) reach the down matrix of a mixture
    /// (`name`, any expert's): room for a row of `width` per token and slot, filled by
    /// [`Collector::experts_down`].
    pub fn experts_down_begin(
        &mut self,
        name: &str,
        (n_expert, k, width): (usize, usize, usize),
        sel: &[usize],
    ) {
        let p = self.pending_of(name, (n_expert, k, width), sel, false);
        let new_rows = sel.len() * width;
        p.rows.resize(p.rows.len() + new_rows, 0.0);
    }

    /// One expert's down inputs of the step: `rows[j]` is the input of `routed[j]` = (token of
    /// the step, slot).
    pub fn experts_down(&mut self, name: &str, routed: &[(usize, usize)], rows: &[f32]) {
        let p = self
            .pending
            .get_mut(base_name(name))
            .expect("experts_down_begin came first");
        let w = p.width;
        for (j, &(b, slot)) in routed.iter().enumerate() {
            let r = (p.step_base + b) * p.k + slot;
            p.rows[r * w..(r + 1) * w].copy_from_slice(&rows[j * w..(j + 1) * w]);
        }
    }

    /// The pending inputs of expert tensor `name`, its step base set and extended by a step's
    /// routing `sel` (the caller adds the rows).
    fn pending_of(
        &mut self,
        name: &str,
        (n_expert, k, width): (usize, usize, usize),
        sel: &[usize],
        shared_row: bool,
    ) -> &mut Pending {
        let p = self.pending.entry(base_name(name).to_string()).or_default();
        (p.n_expert, p.k, p.width, p.shared_row) = (n_expert, k, width, shared_row);
        p.step_base = p.tokens();
        p.sel.extend_from_slice(sel);
        p
    }

    /// The first weight whose sums are no longer finite, if any.
    pub fn nonfinite(&self) -> Option<&str> {
        self.nonfinite.as_deref()
    }

    pub fn entries(&self) -> &BTreeMap<String, Entry> {
        &self.entries
    }

    /// The chunks the sums cover, as llama-imatrix counts them: the most tokens any entry
    /// (or expert) summed, in whole chunks of `chunk_size`.
    pub fn chunk_count(&self, chunk_size: usize) -> u32 {
        let most = self
            .entries
            .values()
            .flat_map(|e| e.counts.iter().copied())
            .max()
            .unwrap_or(0);
        (most / chunk_size.max(1) as i64) as u32
    }

    /// The GGUF file llama-imatrix writes: `general.type`, the datasets, the chunk count and
    /// size, then per weight in name order `W.in_sum2` (`[cols, n_mat]`) and `W.counts`
    /// (`[1, n_mat]`), F32.
    pub fn to_gguf(&self, datasets: &[&str], chunk_size: usize) -> GgufWriter {
        let mut w = GgufWriter::new();
        w.set("general.type", MetaValue::str("imatrix"));
        w.set(KEY_DATASETS, MetaValue::strs(datasets));
        w.set(
            KEY_CHUNK_COUNT,
            MetaValue::U32(self.chunk_count(chunk_size)),
        );
        w.set(KEY_CHUNK_SIZE, MetaValue::U32(chunk_size as u32));
        for (name, e) in &self.entries {
            let n_mat = e.counts.len();
            if e.values.is_empty() || n_mat == 0 {
                continue;
            }
            let sums: Vec<u8> = e.values.iter().flat_map(|v| v.to_le_bytes()).collect();
            let counts: Vec<u8> = (e.counts.iter())
                .flat_map(|&c| (c as f32).to_le_bytes())
                .collect();
            let cols = (e.values.len() / n_mat) as u64;
            let sums_name = format!("{name}.in_sum2");
            w.add_tensor(&sums_name, &dims(cols, n_mat), GgmlType::F32, sums);
            let counts_name = format!("{name}.counts");
            w.add_tensor(&counts_name, &dims(1, n_mat), GgmlType::F32, counts);
        }
        w
    }
}

/// A `[cols, n_mat]` tensor's dimensions as ggml writes them: a trailing 1 dropped
/// (`ggml_n_dims`), so a plain weight's tensors are 1-D.
fn dims(cols: u64, n_mat: usize) -> Vec<u64> {
    match n_mat {
        1 => vec![cols],
        n => vec![cols, n as u64],
    }
}

/// `acc[j] += x[j]·x[j]`, each product rounded to f32 before its add.
fn add_squares(acc: &mut [f32], x: &[f32]) {
    for (a, &v) in acc.iter_mut().zip(x) {
        *a += v * v;
    }
}

fn all_finite(v: &[f32]) -> bool {
    v.iter().all(|x| x.is_finite())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values whose f32 sums depend on their order.
    fn row(seed: u32, width: usize) -> Vec<f32> {
        (0..width)
            .map(|j| {
                let v = (seed * 31 + j as u32 * 17) % 97;
                (v as f32 + 0.37) * if v.is_multiple_of(3) { 1e3 } else { 1e-2 }
            })
            .collect()
    }

    #[test]
    fn expert_sums_run_slot_by_slot_over_the_whole_micro_batch() {
        let (n_expert, k, width, tokens) = (3, 2, 4, 5);
        let sel: Vec<usize> = (0..tokens * k)
            .map(|i| (i * 7 + i / k) % n_expert)
            .collect();
        let xs: Vec<Vec<f32>> = (0..tokens).map(|t| row(t as u32, width)).collect();
        let downs: Vec<Vec<f32>> = (0..tokens * k)
            .map(|i| row(100 + i as u32, width))
            .collect();
        let mut c = Collector::new(false);
        c.begin_ubatch(tokens);
        // Two steps of the micro-batch: tokens 0..2 and 2..5.
        for (t0, t1) in [(0, 2), (2, tokens)] {
            let x: Vec<f32> = xs[t0..t1].concat();
            let s = &sel[t0 * k..t1 * k];
            let names = [
                "blk.0.ffn_gate_exps.weight[0]",
                "blk.0.ffn_up_exps.weight[0]",
            ];
            c.experts_in(names, (n_expert, k), &x, s);
            let down = "blk.0.ffn_down_exps.weight[0]";
            c.experts_down_begin(down, (n_expert, k, width), s);
            for ex in 0..n_expert {
                let routed: Vec<(usize, usize)> = (0..(t1 - t0) * k)
                    .filter(|&i| s[i] == ex)
                    .map(|i| (i / k, i % k))
                    .collect();
                let rows: Vec<f32> = (routed.iter())
                    .flat_map(|&(b, slot)| downs[(t0 + b) * k + slot].clone())
                    .collect();
                c.experts_down(&format!("blk.0.ffn_down_exps.weight[{ex}]"), &routed, &rows);
            }
        }
        c.end_ubatch();
        // llama-imatrix's loop: for each slot, for each token.
        let mut want = vec![0f32; n_expert * width];
        let mut want_down = vec![0f32; n_expert * width];
        let mut counts = vec![0i64; n_expert];
        for slot in 0..k {
            for t in 0..tokens {
                let ex = sel[t * k + slot];
                counts[ex] += 1;
                for j in 0..width {
                    want[ex * width + j] += xs[t][j] * xs[t][j];
                    let d = downs[t * k + slot][j];
                    want_down[ex * width + j] += d * d;
                }
            }
        }
        let e = &c.entries()["blk.0.ffn_gate_exps.weight"];
        assert_eq!((&e.values, &e.counts), (&want, &counts));
        assert_eq!(c.entries()["blk.0.ffn_up_exps.weight"], *e);
        let d = &c.entries()["blk.0.ffn_down_exps.weight"];
        assert_eq!((&d.values, &d.counts), (&want_down, &counts));
    }

    #[test]
    fn plain_matmuls_skip_small_micro_batches_the_embedding_and_unasked_output() {
        let x = row(1, 8);
        let mut c = Collector::new(false);
        c.begin_ubatch(MIN_ROWS - 1);
        c.dense("blk.0.attn_q.weight", &x, 1, 8);
        c.end_ubatch();
        c.begin_ubatch(MIN_ROWS);
        for name in ["token_embd.weight", "output.weight", "blk.0.attn_q.weight"] {
            c.dense(name, &x, 1, 8);
        }
        c.end_ubatch();
        assert_eq!(c.entries().len(), 1);
        assert_eq!(c.entries()["blk.0.attn_q.weight"].counts, vec![1]);
        let mut c = Collector::new(true);
        c.begin_ubatch(MIN_ROWS);
        c.dense("output.weight", &x, 1, 8);
        assert!(c.entries().contains_key("output.weight"));
        assert_eq!(c.chunk_count(1), 1);
    }
}
