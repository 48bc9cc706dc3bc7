//! `locus imatrix`: llama-imatrix's procedure (`compute_imatrix` in `tools/imatrix/imatrix.cpp`)
//! and its file. The text is tokenized once (BOS per the model) and cut into chunks of `-c`
//! tokens; `-b` / `-c` chunks at a time are evaluated side by side as sequences of their own
//! (each from an empty cache, its first token replaced by BOS where the model adds one), every
//! token with logits. llama.cpp cuts each such batch into micro-batches that hold an equal run
//! of every sequence's tokens in turn (`split_equal`), and the collector
//! ([`crate::model::imatrix_collect`]) sums each weight's input squares in that order. The
//! perplexity of each chunk's second half is printed as the tool prints it.

use std::path::PathBuf;
use std::time::Instant;

use super::AppError;
use crate::model::forward::{KvType, State, MAX_BATCH};
use crate::model::imatrix_collect::Collector;
use crate::model::ModelFile;
use crate::pool::Pool;
use crate::runtime::LoadedModel;

/// llama-imatrix's defaults: `-c 512`, `-b 2048`, `-ub 512`, `-o imatrix.gguf`.
pub const DEFAULT_CTX: usize = 512;
pub const DEFAULT_BATCH: usize = 2048;
pub const DEFAULT_UBATCH: usize = 512;
pub const DEFAULT_OUT: &str = "imatrix.gguf";

#[derive(Clone, Debug)]
pub struct ImatrixOptions {
    pub model: PathBuf,
    pub file: PathBuf,
    pub out: PathBuf,
    /// Tokens a chunk (`-c`).
    pub ctx: usize,
    /// At most this many chunks (`--chunks`).
    pub chunks: Option<usize>,
    /// Chunks skipped at the start of the text (`--chunk`).
    pub from_chunk: usize,
    /// Logical batch (`-b`): how many chunks run side by side (`-b / -c`).
    pub batch: usize,
    /// Micro-batch (`-ub`).
    pub ubatch: usize,
    /// Collect `output.weight` too (`--process-output`).
    pub process_output: bool,
    /// Print the perplexity (off with `--no-ppl`).
    pub ppl: bool,
    pub parse_special: bool,
    pub kv_type: KvType,
    pub numa: crate::placement::Options,
}

impl ImatrixOptions {
    pub fn new(model: PathBuf, file: PathBuf) -> ImatrixOptions {
        ImatrixOptions {
            model,
            file,
            out: PathBuf::from(DEFAULT_OUT),
            ctx: DEFAULT_CTX,
            chunks: None,
            from_chunk: 0,
            batch: DEFAULT_BATCH,
            ubatch: DEFAULT_UBATCH,
            process_output: false,
            ppl: true,
            parse_special: false,
            kv_type: KvType::F16,
            numa: crate::placement::Options::default(),
        }
    }
}

/// What a run collected.
#[derive(Debug)]
pub struct ImatrixResult {
    pub collector: Box<Collector>,
    pub chunks: usize,
    pub chunk_size: usize,
    pub text_tokens: usize,
    /// The final perplexity and its error, where it was computed.
    pub ppl: Option<(f64, f64)>,
}

/// One sequence's run in a micro-batch: (sequence, first token in the batch, tokens).
pub type Run = (usize, usize, usize);

/// The micro-batches llama.cpp cuts a batch of `n_seqs` sequences of `len` tokens each into
/// (at most `n_ubatch` tokens each): a run of `max(1, n_ubatch / n_seqs)` tokens of every
/// sequence in turn (`llama_batch_allocr::split_equal`; with one sequence, `split_simple`'s
/// consecutive tokens, the same).
pub fn ubatches(n_seqs: usize, len: usize, n_ubatch: usize) -> Vec<Vec<Run>> {
    let per = (n_ubatch / n_seqs.max(1)).max(1);
    (0..len)
        .step_by(per)
        .map(|t0| {
            let count = per.min(len - t0);
            (0..n_seqs).map(|s| (s, t0, count)).collect()
        })
        .collect()
}

/// −log p(`tok`) from raw logits as llama-imatrix computes it: `expf` of each shifted logit
/// summed in f64.
pub fn nll(logits: &[f32], tok: u32) -> f64 {
    let max = logits[1..].iter().fold(logits[0], |m, &v| m.max(v));
    let sum: f64 = logits.iter().map(|&l| (l - max).exp() as f64).sum();
    -(f64::from(logits[tok as usize] - max) - sum.ln())
}

/// Collects the importance matrix of `text` with a loaded model; `progress` receives each
/// chunk's running perplexity (with `opts.ppl`).
pub fn collect(
    l: &LoadedModel,
    pool: &Pool,
    text: &str,
    opts: &ImatrixOptions,
    mut progress: impl FnMut(usize, f64),
) -> Result<ImatrixResult, AppError> {
    let n_ctx = opts.ctx;
    if n_ctx < 2 {
        return Err(AppError::Usage(format!(
            "imatrix: -c {n_ctx} is too small (a chunk needs at least 2 tokens)"
        )));
    }
    if l.model.config.mla.is_some() {
        return Err(AppError::Usage(
            "imatrix: models with latent attention (DeepSeek-2) are not supported yet".into(),
        ));
    }
    let mut tokens = l.tokenizer.encode(text, true, opts.parse_special);
    let text_tokens = tokens.len();
    if opts.from_chunk > 0 {
        if (opts.from_chunk + 2) * n_ctx >= tokens.len() {
            return Err(AppError::Usage(format!(
                "{}: the text is {} tokens; no {}-token chunks are left after skipping {} \
                 (--chunk)",
                opts.file.display(),
                tokens.len(),
                n_ctx,
                opts.from_chunk
            )));
        }
        tokens.drain(..opts.from_chunk * n_ctx);
    }
    if tokens.len() < 2 * n_ctx {
        return Err(AppError::Usage(format!(
            "{}: the text is {} tokens; imatrix needs at least {} (two chunks of -c {n_ctx}, \
             as llama-imatrix does; lower -c or give a longer text)",
            opts.file.display(),
            tokens.len(),
            2 * n_ctx
        )));
    }
    let n_chunk_max = tokens.len() / n_ctx;
    let n_chunk = opts.chunks.map_or(n_chunk_max, |c| c.min(n_chunk_max));
    let n_seq = (opts.batch / n_ctx).max(1);
    let n_batch = opts.batch.min(n_seq * n_ctx).max(1);
    let n_ubatch = opts.ubatch.min(n_batch).max(1);
    if n_seq.min(n_chunk) > n_ubatch {
        return Err(AppError::Usage(format!(
            "imatrix: -b {} runs {n_seq} chunks side by side, more than the micro-batch's {} \
             tokens (raise -c or -ub)",
            opts.batch, n_ubatch
        )));
    }
    let num_batches = n_ctx.div_ceil(n_batch);
    let add_bos = l.tokenizer.add_bos();
    let bos = l.tokenizer.bos().filter(|_| add_bos);
    let mut states: Vec<State> = Vec::new();
    for _ in 0..n_seq.min(n_chunk) {
        let mut s = l.model.try_new_state(n_ctx, pool, opts.kv_type)?;
        s.set_stop(crate::sys::signal::interrupt_flag());
        states.push(s);
    }
    crate::runtime::warn_beyond_training(l, n_ctx);
    let mut collector = Some(Box::new(Collector::new(opts.process_output)));
    let first = n_ctx / 2;
    let (mut nll_sum, mut nll2_sum, mut count) = (0f64, 0f64, 0usize);
    for i in (0..n_chunk).step_by(n_seq) {
        let n_seqs = n_seq.min(n_chunk - i);
        let mut seq_nll = vec![(0f64, 0f64); n_seqs];
        for s in &mut states {
            s.reset();
        }
        for j in 0..num_batches {
            let b0 = j * n_batch;
            let size = (n_ctx - b0).min(n_batch);
            // Each sequence's tokens of the batch, its first replaced by BOS in the first.
            let windows: Vec<Vec<u32>> = (0..n_seqs)
                .map(|s| {
                    let at = (i + s) * n_ctx + b0;
                    let mut w = tokens[at..at + size].to_vec();
                    if let (0, Some(b)) = (j, bos) {
                        w[0] = b;
                    }
                    w
                })
                .collect();
            for ub in ubatches(n_seqs, size, n_ubatch) {
                let m: usize = ub.iter().map(|r| r.2).sum();
                let c = collector.as_mut().expect("the collector is back");
                c.begin_ubatch(m);
                let mut row = 0;
                for (s, t0, cnt) in ub {
                    for p0 in (t0..t0 + cnt).step_by(MAX_BATCH) {
                        let p1 = (p0 + MAX_BATCH).min(t0 + cnt);
                        let state = &mut states[s];
                        state.set_tap(collector.take());
                        let place = ((m, row + p0 - t0), (cnt, p0 - t0));
                        l.model
                            .eval_placed(pool, state, &windows[s][p0..p1], place, |k, lg| {
                                let pos = b0 + p0 + k;
                                if opts.ppl && pos >= first && pos + 1 < n_ctx {
                                    let v = nll(lg, tokens[(i + s) * n_ctx + pos + 1]);
                                    seq_nll[s].0 += v;
                                    seq_nll[s].1 += v * v;
                                }
                            });
                        collector = state.take_tap();
                        if state.stopped() {
                            return Err(AppError::Interrupted);
                        }
                    }
                    row += cnt;
                }
                let c = collector.as_mut().expect("the collector is back");
                c.end_ubatch();
                if let Some(name) = c.nonfinite() {
                    return Err(AppError::Usage(format!(
                        "imatrix: non-finite values in the sums of {name} (as llama-imatrix, \
                         stopping)"
                    )));
                }
            }
        }
        if opts.ppl {
            for (s, &(a, b)) in seq_nll.iter().enumerate() {
                nll_sum += a;
                nll2_sum += b;
                count += n_ctx - first - 1;
                progress(i + s + 1, (nll_sum / count as f64).exp());
            }
        }
    }
    let ppl = (opts.ppl && count > 1).then(|| {
        let mean = nll_sum / count as f64;
        let ppl = mean.exp();
        let var = nll2_sum / count as f64 - mean * mean;
        let err = if var > 0.0 {
            (var / (count - 1) as f64).sqrt() * ppl
        } else {
            0.0
        };
        (ppl, err)
    });
    Ok(ImatrixResult {
        collector: collector.expect("the collector is back"),
        chunks: n_chunk,
        chunk_size: n_ctx,
        text_tokens,
        ppl,
    })
}

/// `locus imatrix`: collects, prints the running and final perplexity as llama-imatrix does,
/// and writes the GGUF file it writes.
pub fn run(opts: &ImatrixOptions) -> Result<ImatrixResult, AppError> {
    let started = Instant::now();
    let why = "locus reads at most 256 MiB of calibration text";
    let mut text = super::read_text_capped(
        &opts.file,
        super::MAX_TEXT_BYTES,
        "the calibration text",
        why,
    )?;
    // llama.cpp's `-f` drops one trailing newline.
    if text.ends_with('\n') {
        text.pop();
    }
    let file = ModelFile::open(&opts.model)?;
    let placement = crate::runtime::place(&file, &opts.numa, false)?;
    let l = LoadedModel::load_placed(&file, &placement, started)?;
    let pool = crate::runtime::pool_of(&placement)?;
    super::catch_interrupts();
    let t = Instant::now();
    let r = collect(&l, &pool, &text, opts, |i, p| crate::diag!("[{i}]{p:.4},"));
    crate::diagln!();
    let r = r?;
    let dataset = opts.file.to_string_lossy();
    let gguf = r.collector.to_gguf(&[dataset.as_ref()], r.chunk_size);
    gguf.write_atomic(&opts.out)?;
    crate::diagln!(
        "locus: {} entries from {} chunks of {} tokens ({} in the text) written to {}, {:.1} s",
        r.collector.entries().len(),
        r.chunks,
        r.chunk_size,
        r.text_tokens,
        opts.out.display(),
        t.elapsed().as_secs_f64()
    );
    if let Some((ppl, err)) = r.ppl {
        super::write_stdout(&format!("Final estimate: PPL = {ppl:.4} +/- {err:.5}\n"))?;
    }
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// llama.cpp's `split_equal` over `n_seqs` sequences of `len` tokens: rounds of one token
    /// of each sequence, as long as another round would still fit in `n_ubatch`.
    fn split_equal(n_seqs: usize, len: usize, n_ubatch: usize) -> Vec<Vec<Run>> {
        let mut out = Vec::new();
        let mut t0 = 0;
        while t0 < len {
            let mut per = 0;
            loop {
                per += 1;
                if t0 + per == len || (per + 1) * n_seqs > n_ubatch {
                    break;
                }
            }
            out.push((0..n_seqs).map(|s| (s, t0, per)).collect());
            t0 += per;
        }
        out
    }

    #[test]
    fn micro_batches_are_split_equal_runs() {
        for (n_seqs, len, n_ubatch) in [
            (1, 128, 512),
            (1, 1000, 512),
            (6, 128, 512),
            (16, 128, 512),
            (3, 600, 512),
            (4, 512, 512),
            (5, 7, 3),
        ] {
            assert_eq!(
                ubatches(n_seqs, len, n_ubatch),
                split_equal(n_seqs, len, n_ubatch),
                "{n_seqs} × {len} in {n_ubatch}"
            );
        }
        // Six chunks of 128 in llama-imatrix's default batch: runs of 85, then 43.
        let u = ubatches(6, 128, 512);
        assert_eq!((u.len(), u[0][5], u[1][0]), (2, (5, 0, 85), (0, 85, 43)));
    }

    #[test]
    fn nll_is_the_shifted_log_softmax() {
        let logits = [1.0f32, 3.0, -2.0, 0.5];
        let z: f64 = logits.iter().map(|&l| f64::from((l - 3.0).exp())).sum();
        let want = -(f64::from(logits[2] - 3.0) - z.ln());
        assert_eq!(nll(&logits, 2), want);
        assert!(nll(&logits, 1) < nll(&logits, 0));
    }
}
