//! `locus perplexity`: llama-perplexity's procedure. The text is tokenized once (BOS per the
//! model), cut into non-overlapping windows of `ctx` tokens, each evaluated from an empty
//! cache with its first token replaced by BOS (when the model adds one); the second half of
//! each window is scored.

use std::path::PathBuf;
use std::time::Instant;

use super::AppError;
use crate::model::forward::KvType;
use crate::model::ModelFile;
use crate::pool::Pool;
use crate::runtime::LoadedModel;

#[derive(Clone, Debug)]
pub struct PerplexityOptions {
    pub model: PathBuf,
    pub file: PathBuf,
    pub ctx: usize,
    pub chunks: Option<usize>,
    pub kv_type: KvType,
    /// Placement for `run` (the `perplexity` function takes a ready pool instead).
    pub numa: crate::placement::Options,
}

#[derive(Clone, Debug, PartialEq)]
pub struct PerplexityResult {
    pub ppl: f64,
    pub err: f64,
    pub scored_tokens: usize,
    pub chunks: usize,
    pub text_tokens: usize,
    /// The window size used (`-c`, or the model's training context for `-c 0`).
    pub ctx: usize,
}

/// −log p(target) from raw logits, in f64.
pub fn nll(logits: &[f32], target: u32) -> f64 {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let sum: f64 = logits.iter().map(|&l| (l as f64 - max).exp()).sum();
    -((logits[target as usize] as f64 - max) - sum.ln())
}

/// Scores `text` with a loaded model; `progress` receives each chunk's running estimate.
pub fn perplexity(
    l: &LoadedModel,
    pool: &Pool,
    text: &str,
    opts: &PerplexityOptions,
    mut progress: impl FnMut(usize, f64),
) -> Result<PerplexityResult, AppError> {
    let n_ctx = if opts.ctx == 0 {
        l.model.config.n_ctx_train
    } else {
        opts.ctx
    };
    if n_ctx < 4 {
        return Err(AppError::Usage(format!(
            "-c {n_ctx} is too small for perplexity (need at least 4)"
        )));
    }
    let tokens = l.tokenizer.encode(text, true, false);
    let available = tokens.len() / n_ctx;
    let n_chunks = opts.chunks.map_or(available, |c| c.min(available));
    if n_chunks == 0 {
        return Err(AppError::Usage(format!(
            "{}: the text is {} tokens; perplexity needs at least one window of -c = {n_ctx} \
             tokens (lower -c or give a longer text)",
            opts.file.display(),
            tokens.len(),
        )));
    }
    let mut state = l.model.try_new_state(n_ctx, pool, opts.kv_type)?;
    crate::runtime::warn_beyond_training(l, n_ctx);
    state.set_stop(crate::sys::signal::interrupt_flag());
    let first = n_ctx / 2;
    let (mut sum, mut sum2, mut count) = (0f64, 0f64, 0usize);
    for chunk in 0..n_chunks {
        let mut window = tokens[chunk * n_ctx..(chunk + 1) * n_ctx].to_vec();
        if let (true, Some(bos)) = (l.tokenizer.add_bos(), l.tokenizer.bos()) {
            window[0] = bos;
        }
        state.reset();
        let targets = &tokens[chunk * n_ctx..(chunk + 1) * n_ctx];
        // The whole window is evaluated, as llama-perplexity does (the last token's logits
        // predict nothing here): how many tokens a batch holds, and how many of them want
        // logits, decides which of llama.cpp's kernels computes each of them.
        l.model.eval(pool, &mut state, &window, first, |j, logits| {
            if let Some(&next) = targets.get(j + 1) {
                let v = nll(logits, next);
                sum += v;
                sum2 += v * v;
                count += 1;
            }
        });
        if state.stopped() {
            return Err(AppError::Interrupted);
        }
        progress(chunk + 1, (sum / count as f64).exp());
    }
    let mean = sum / count as f64;
    let ppl = mean.exp();
    let var = sum2 / count as f64 - mean * mean;
    let err = if var > 0.0 && count > 1 {
        (var / (count - 1) as f64).sqrt() * ppl
    } else {
        0.0
    };
    Ok(PerplexityResult {
        ppl,
        err,
        scored_tokens: count,
        chunks: n_chunks,
        text_tokens: tokens.len(),
        ctx: n_ctx,
    })
}

/// `locus perplexity`: prints per-chunk estimates and the final line llama-perplexity prints.
pub fn run(opts: &PerplexityOptions) -> Result<PerplexityResult, AppError> {
    let started = Instant::now();
    let why = "locus reads at most 256 MiB of text to score";
    let mut text =
        super::read_text_capped(&opts.file, super::MAX_TEXT_BYTES, "the text to score", why)?;
    // llama-perplexity reads -f without one trailing newline; do the same so token counts agree.
    if text.ends_with('\n') {
        text.pop();
    }
    let file = ModelFile::open(&opts.model)?;
    let placement = crate::runtime::place(&file, &opts.numa, false)?;
    let l = LoadedModel::load_placed(&file, &placement, started)?;
    let pool = crate::runtime::pool_of(&placement)?;
    super::catch_interrupts();
    let t = Instant::now();
    // The progress line ends once it has begun (an error before any chunk is its own line).
    let mut progress = false;
    let r = perplexity(&l, &pool, &text, opts, |i, p| {
        progress = true;
        crate::diag!("[{i}]{p:.4},")
    });
    if progress {
        crate::diagln!();
    }
    let r = r?;
    crate::diagln!(
        "locus: {} tokens in {} chunks of {}, {:.1} s",
        r.text_tokens,
        r.chunks,
        r.ctx,
        t.elapsed().as_secs_f64()
    );
    super::write_stdout(&format!(
        "Final estimate: PPL = {:.4} +/- {:.5}\n",
        r.ppl, r.err
    ))?;
    Ok(r)
}
