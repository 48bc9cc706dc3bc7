//! `locus run`: tokenize a prompt, evaluate it, sample and stream the continuation.
//!
//! stdout carries the generated text only; load information, warnings and the timing line go
//! to stderr. A closed stdout (`| head`) ends generation quietly.

use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use super::{AppError, Loaded};
use crate::model::chat::ChatFormat;
use crate::model::llama::KvType;
use crate::model::sampler::{Sampler, SamplerConfig};
use crate::model::tokenizer::Utf8Stream;
use crate::model::{ModelError, ModelFile};
use crate::pool::Pool;

/// Options of `locus run`.
#[derive(Clone, Debug)]
pub struct RunOptions {
    pub model: PathBuf,
    pub prompt: String,
    /// Tokens to generate; `None` = until end of generation or the context is full.
    pub n_predict: Option<usize>,
    /// Placement mode, threads (`numa.threads`), pinning.
    pub numa: crate::placement::Options,
    pub ctx: usize,
    pub sampling: SamplerConfig,
    pub chat: bool,
    pub system: Option<String>,
    pub verbose: bool,
    pub kv_type: KvType,
    /// Keep generating past end-of-generation tokens (llama.cpp's `--ignore-eos`).
    pub ignore_eos: bool,
}

/// What a generation produced (for tests and the timing line).
#[derive(Clone, Debug, Default)]
pub struct RunReport {
    pub prompt_tokens: Vec<u32>,
    pub generated: Vec<u32>,
    pub load_ms: f64,
    pub prompt_ms: f64,
    pub gen_ms: f64,
    pub stopped_by_eog: bool,
    /// Generation stopped because SIGINT arrived.
    pub interrupted: bool,
}

/// Builds the prompt text: the raw prompt, or the chat template applied to it.
pub fn prompt_text(l: &Loaded, opts: &RunOptions) -> String {
    if !opts.chat {
        return opts.prompt.clone();
    }
    let format = match l.tokenizer.chat_template().and_then(ChatFormat::detect) {
        Some(f) => f,
        None => {
            eprintln!(
                "warning: the model's chat template is missing or not recognised; using ChatML"
            );
            ChatFormat::ChatMl
        }
    };
    if opts.verbose {
        eprintln!("chat format: {}", format.name());
    }
    format.render(opts.system.as_deref(), &opts.prompt)
}

/// Runs generation, streaming text to `out`. Returns the report; the caller prints timings.
pub fn generate(
    l: &Loaded,
    pool: &Pool,
    opts: &RunOptions,
    out: &mut dyn Write,
) -> Result<RunReport, AppError> {
    let text = prompt_text(l, opts);
    let prompt = l.tokenizer.encode(&text, true, true);
    let n_ctx = opts.ctx.max(1);
    if prompt.is_empty() {
        return Err(AppError::Usage(
            "the prompt is empty after tokenization".into(),
        ));
    }
    if prompt.len() >= n_ctx {
        return Err(AppError::Model(ModelError::PromptTooLong {
            tokens: prompt.len(),
            ctx: n_ctx,
        }));
    }
    let mut state = l.llama.new_state(n_ctx, pool.threads(), opts.kv_type);
    let mut sampler = Sampler::new(opts.sampling.clone());
    let mut report = RunReport {
        prompt_tokens: prompt.clone(),
        load_ms: l.load_ms,
        ..Default::default()
    };

    let t0 = Instant::now();
    let mut last = vec![0f32; l.llama.config.n_vocab];
    l.llama
        .eval(pool, &mut state, &prompt, prompt.len() - 1, |_, lg| {
            last.copy_from_slice(lg)
        });
    for &tok in &prompt {
        sampler.accept(tok);
    }
    report.prompt_ms = t0.elapsed().as_secs_f64() * 1e3;

    let t1 = Instant::now();
    let mut stream = Utf8Stream::new();
    let limit = opts.n_predict.unwrap_or(usize::MAX);
    // A reader that went away (EPIPE where SIGPIPE is ignored) ends generation quietly; any
    // other write error (a full disk, a closed descriptor) is an error naming stdout.
    let write = |out: &mut dyn Write, text: &[u8]| -> Result<bool, AppError> {
        match out.write_all(text).and_then(|_| out.flush()) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(false),
            Err(e) => Err(super::stdout_error(e)),
        }
    };
    let mut out_ok = true;
    while report.generated.len() < limit {
        if crate::sys::signal::interrupted() {
            report.interrupted = true;
            break;
        }
        let next = sampler.sample(&mut last);
        if l.tokenizer.is_eog(next) && !opts.ignore_eos {
            report.stopped_by_eog = true;
            break;
        }
        report.generated.push(next);
        sampler.accept(next);
        let piece = l.tokenizer.token_to_piece(next, false);
        let text = stream.push(&piece);
        if !text.is_empty() && out_ok {
            out_ok = write(out, text.as_bytes())?;
            if !out_ok {
                break;
            }
        }
        if report.generated.len() >= limit {
            break;
        }
        if state.pos >= n_ctx {
            eprintln!("\nlocus: the context of {n_ctx} tokens is full; stopping (raise -c to generate more)");
            break;
        }
        l.llama.forward(pool, &mut state, next, true);
        last.copy_from_slice(state.logits(0));
    }
    let rest = stream.finish();
    if out_ok && !rest.is_empty() {
        write(out, rest.as_bytes())?;
    }
    report.gen_ms = t1.elapsed().as_secs_f64() * 1e3;
    Ok(report)
}

/// `locus run`: load, generate to stdout, print the timing line to stderr.
pub fn run(opts: &RunOptions) -> Result<RunReport, AppError> {
    let started = Instant::now();
    let file = ModelFile::open(&opts.model)?;
    let placement = super::place(&file, &opts.numa, opts.verbose)?;
    let l = Loaded::load_placed(&file, &placement, started)?;
    let pool = super::pool_of(&placement);
    let c = &l.llama.config;
    if opts.verbose {
        eprintln!(
            "model: {} ({} layers, dim {}, {} heads / {} kv heads, ffn {}, vocab {}), kernels: {} (prefetch to {}), threads: {}",
            opts.model.display(),
            c.n_layer,
            c.n_embd,
            c.n_head,
            c.n_head_kv,
            c.n_ff,
            c.n_vocab,
            l.llama.kernels.tier,
            crate::kernels::stream_target().name(),
            pool.threads()
        );
    }
    if let Err(e) = crate::sys::signal::catch_sigint() {
        eprintln!("warning: cannot catch SIGINT ({e}); Ctrl-C will end the run without timings");
    }
    let stdout = std::io::stdout();
    let mut lock = stdout.lock();
    let report = generate(&l, &pool, opts, &mut lock)?;
    drop(lock);
    eprintln!();
    if opts.verbose {
        // After generation: every weight page a run reads has been read once.
        let a = crate::placement::audit::audit(&placement, &l.llama.weights, &file);
        eprintln!("locus: audit: {}", super::audit::one_line(&a));
    }
    eprintln!("{}", timing_line(&report));
    Ok(report)
}

/// `load 123.4 ms | prompt 12 tok, 345.6 tok/s | decode 64 tok, 78.9 tok/s`
pub fn timing_line(r: &RunReport) -> String {
    let rate = |n: usize, ms: f64| if ms > 0.0 { n as f64 * 1e3 / ms } else { 0.0 };
    format!(
        "locus: load {:.1} ms | prompt {} tok, {:.1} tok/s | decode {} tok, {:.1} tok/s",
        r.load_ms,
        r.prompt_tokens.len(),
        rate(r.prompt_tokens.len(), r.prompt_ms),
        r.generated.len(),
        rate(r.generated.len(), r.gen_ms)
    )
}
