//! `locus run`: tokenize a prompt, evaluate it, sample and stream the continuation.
//!
//! stdout carries the generated text only; load information, warnings and the timing line go
//! to stderr. A closed stdout (`| head`) ends generation quietly.

use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use super::AppError;
use crate::model::chat::{ChatFormat, ChatTemplate};
use crate::model::forward::KvType;
use crate::model::generation::{Finish, Params, Sequence};
use crate::model::sampler::SamplerConfig;
use crate::model::{ModelError, ModelFile};
use crate::placement::Placement;
use crate::pool::Pool;
use crate::runtime::{context_size, warn_beyond_training, LoadedModel};

/// Where the prompt comes from.
#[derive(Clone, Debug)]
pub enum Prompt {
    Text(String),
    /// `-f FILE`: read once the model is loaded, at most as many bytes as the context's
    /// tokens could hold (so `-f /dev/zero` is an error, not an out-of-memory kill).
    File(PathBuf),
}

/// Options of `locus run`.
#[derive(Clone, Debug)]
pub struct RunOptions {
    pub model: PathBuf,
    pub prompt: Prompt,
    /// Tokens to generate; `None` = until end of generation or the context is full.
    pub n_predict: Option<usize>,
    /// Placement mode, threads (`numa.threads`), pinning.
    pub numa: crate::placement::Options,
    /// Context size in tokens (`-c`): `None` = the default, [`DEFAULT_CTX`](crate::runtime::DEFAULT_CTX) or the training
    /// context where that is smaller; `Some(0)` = the training context; more than the training
    /// context is allowed, with a warning.
    pub ctx: Option<usize>,
    pub sampling: SamplerConfig,
    /// The seed was drawn at random (`-s -1`, the default): printed on stderr when sampling,
    /// so a run can be replayed.
    pub random_seed: bool,
    pub chat: bool,
    /// `--chat-template NAME`: this format instead of the model's template.
    pub chat_template: Option<ChatFormat>,
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
    /// Prompt tokens evaluated: all of them, unless Ctrl-C stopped the prompt.
    pub prompt_evaluated: usize,
    pub generated: Vec<u32>,
    pub load_ms: f64,
    pub prompt_ms: f64,
    pub gen_ms: f64,
    pub stopped_by_eog: bool,
    /// Generation stopped because SIGINT arrived.
    pub interrupted: bool,
    /// A mixture of experts' tokens per expert and layer (`n_layer × n_expert`), for `-v`.
    pub expert_counts: Vec<u64>,
    /// Where the KV cache's written pages are, after generation (`-v`).
    pub kv_audit: Option<crate::placement::cache::CacheAudit>,
}

/// The prompt's text: `-p` as given, or `-f`'s file read with a cap of `n_ctx` times the
/// vocabulary's longest piece (a longer text cannot fit in the context).
pub fn read_prompt(l: &LoadedModel, prompt: &Prompt, n_ctx: usize) -> Result<String, AppError> {
    let path = match prompt {
        Prompt::Text(t) => return Ok(t.clone()),
        Prompt::File(p) => p,
    };
    let longest = (0..l.tokenizer.n_vocab() as u32)
        .map(|id| l.tokenizer.piece(id, true).len())
        .max()
        .unwrap_or(1)
        .max(1);
    let cap = (n_ctx as u64).saturating_mul(longest as u64);
    let why = format!("-c {n_ctx} tokens of at most {longest} bytes each");
    let mut text = super::read_text_capped(path, cap, "the prompt file", &why)?;
    // llama.cpp drops one trailing newline of -f.
    if text.ends_with('\n') {
        text.pop();
    }
    Ok(text)
}

/// Builds the prompt text: the raw prompt, or the chat template applied to it (`--chat`: the
/// named format, else the model's template; an error naming the choices when neither is there).
pub fn prompt_text(l: &LoadedModel, opts: &RunOptions, prompt: &str) -> Result<String, AppError> {
    if !opts.chat {
        return Ok(prompt.to_string());
    }
    let template = ChatTemplate::choose(opts.chat_template, l.tokenizer.chat_template())
        .map_err(|e| AppError::Usage(e.to_string()))?;
    if opts.verbose {
        crate::diagln!("locus: chat format: {}", describe(&template));
    }
    Ok(template.render(opts.system.as_deref(), prompt))
}

/// With `--chat`, refuses a model without a chat template (and no `--chat-template`) from
/// its metadata, before the weights are placed: the error comes at once, and alone on stderr
/// (a slow placement prints progress lines).
fn check_chat_format(file: &ModelFile, opts: &RunOptions) -> Result<(), AppError> {
    if !opts.chat {
        return Ok(());
    }
    let gguf = file.gguf()?;
    let text = gguf
        .get(crate::model::tokenizer::CHAT_TEMPLATE_KEY)
        .and_then(crate::model::gguf::Value::as_str);
    ChatTemplate::choose(opts.chat_template, text)
        .map(|_| ())
        .map_err(|e| AppError::Usage(e.to_string()))
}

/// How the format was chosen, for `-v`: `gemma (--chat-template)`, `chatml (the model's
/// template, with its default system message)`.
pub fn describe(t: &ChatTemplate) -> String {
    let whence = if t.named {
        "--chat-template"
    } else if t.default_system.is_some() {
        "the model's template, with its default system message"
    } else {
        "the model's template"
    };
    format!("{} ({whence})", t.format.name())
}

/// Runs generation, streaming text to `out`. Returns the report; the caller prints timings.
pub fn generate(
    l: &LoadedModel,
    pool: &Pool,
    placement: &Placement,
    opts: &RunOptions,
    out: &mut dyn Write,
) -> Result<RunReport, AppError> {
    let n_ctx = context_size(l, opts.ctx);
    // The cache first: a context no memory holds fails here, before a prompt file sized by it
    // is read. Each head's block lands on the node of the threads that write it first.
    let mut state = l.model.try_new_state(n_ctx, pool, opts.kv_type)?;
    let kv_regions = crate::runtime::place_cache(placement, state.kv_head_blocks(&l.model, pool));
    if opts.verbose {
        let bytes = l.model.state_bytes(n_ctx, pool, opts.kv_type);
        let (kv, copies) = bytes.map_or((0, 1), |b| (b.kv, b.kv_copies.max(1)));
        let one = kv / copies as u64;
        let copies = match copies {
            1 => String::new(),
            n => format!(
                "; a copy on each of the {n} nodes, whose threads every one read every cell, \
                 {:.1} MiB in all",
                kv as f64 / (1024.0 * 1024.0)
            ),
        };
        crate::diagln!(
            "kv cache: {:.1} MiB, {} bytes a token ({}; {}{copies})",
            one as f64 / (1024.0 * 1024.0),
            one / n_ctx.max(1) as u64,
            opts.kv_type.name(),
            l.model.kv_layout(n_ctx)
        );
    }
    let text = prompt_text(l, opts, &read_prompt(l, &opts.prompt, n_ctx)?)?;
    let prompt = l.tokenizer.encode(&text, true, true);
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
    warn_beyond_training(l, n_ctx);
    state.set_stop(crate::sys::signal::interrupt_flag());
    if opts.random_seed && opts.sampling.temp > 0.0 {
        crate::diagln!(
            "locus: seed {} (random; -s {} replays this run)",
            opts.sampling.seed,
            opts.sampling.seed
        );
    }
    let params = Params {
        sampling: opts.sampling.clone(),
        max_tokens: opts.n_predict,
        stop: Vec::new(),
        ignore_eos: opts.ignore_eos,
    };
    let mut seq = Sequence::new(prompt.clone(), params, 0, n_ctx, l.model.config.n_vocab);
    let mut report = RunReport {
        prompt_tokens: prompt,
        load_ms: l.load_ms,
        ..Default::default()
    };

    // The prompt, a forward step at a time (the step API `locus serve` runs its slots on).
    let t0 = Instant::now();
    while !seq.decoding() && !state.stopped() {
        seq.feed_prompt(&l.model, pool, &mut state);
    }
    report.prompt_ms = t0.elapsed().as_secs_f64() * 1e3;
    report.prompt_evaluated = state.pos;
    if state.stopped() {
        // Ctrl-C during the prompt: nothing to sample from.
        report.interrupted = true;
        return Ok(report);
    }

    let t1 = Instant::now();
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
    // Harmony (gpt-oss): the final channel is the answer on stdout, the analysis channel the
    // reasoning on stderr, split as `locus serve` splits them.
    let harmony = opts.chat
        && ChatTemplate::choose(opts.chat_template, l.tokenizer.chat_template())
            .is_ok_and(|t| t.format == ChatFormat::GptOss);
    let (mut answer, mut channels) = (String::new(), crate::model::harmony::Stream::default());
    let mut write_text = |out: &mut dyn Write, text: &str, done: bool| -> Result<bool, AppError> {
        if !harmony {
            return write(out, text.as_bytes());
        }
        answer.push_str(text);
        let (reasoning, content) = channels.update(&answer, done);
        if !reasoning.is_empty() {
            crate::diag!("{reasoning}");
        }
        write(out, content.as_bytes())
    };
    let limit = opts.n_predict.unwrap_or(usize::MAX);
    if limit > 0 {
        loop {
            if crate::sys::signal::interrupted() {
                report.interrupted = true;
                break;
            }
            let finish = seq.sample(&l.tokenizer, state.pos, n_ctx);
            report.stopped_by_eog = finish == Some(Finish::Stop);
            if let Some((text, _)) = seq.output(finish.is_some()) {
                if !text.is_empty() {
                    out_ok = write_text(out, &text, finish.is_some())?;
                }
            }
            if !out_ok || finish.is_some() {
                if finish == Some(Finish::Length) && seq.generated().len() < limit {
                    crate::diagln!("\nlocus: the context of {n_ctx} tokens is full; stopping (raise -c to generate more)");
                }
                break;
            }
            let next = seq.last_token().expect("a token was sampled");
            l.model.forward(pool, &mut state, next, true);
            if state.stopped() {
                report.interrupted = true;
                break;
            }
            seq.logits_mut().copy_from_slice(state.logits(0));
        }
    }
    report.generated = seq.generated().to_vec();
    report.expert_counts = state.expert_counts().unwrap_or_default().to_vec();
    report.kv_audit = Some(crate::placement::cache::audit(&kv_regions));
    if out_ok && report.interrupted {
        if let Some((text, _)) = seq.output(true) {
            write_text(out, &text, true)?;
        }
    }
    if harmony && out_ok {
        // What was held back in case a marker was being cut.
        write_text(out, "", true)?;
    }
    report.gen_ms = t1.elapsed().as_secs_f64() * 1e3;
    Ok(report)
}

/// `locus run`: load, generate to stdout, print the timing line to stderr.
pub fn run(opts: &RunOptions) -> Result<RunReport, AppError> {
    let started = Instant::now();
    let file = ModelFile::open(&opts.model)?;
    check_chat_format(&file, opts)?;
    let placement = crate::runtime::place(&file, &opts.numa, opts.verbose)?;
    let l = LoadedModel::load_placed(&file, &placement, started)?;
    let pool = crate::runtime::pool_of(&placement)?;
    // From here on Ctrl-C stops the work it interrupts (before, it ends the process at once).
    super::catch_interrupts();
    let c = &l.model.config;
    if opts.verbose {
        crate::diagln!(
            "model: {} ({} layers, dim {}, {} heads / {} kv heads, ffn {}, vocab {}), kernels: {} (prefetch to {}), threads: {}",
            opts.model.display(),
            c.n_layer,
            c.n_embd,
            c.n_head,
            c.n_head_kv,
            c.n_ff,
            c.n_vocab,
            l.model.kernels.tier,
            crate::kernels::stream_target().name(),
            pool.threads()
        );
    }
    let stdout = std::io::stdout();
    let mut lock = stdout.lock();
    let report = generate(&l, &pool, &placement, opts, &mut lock)?;
    drop(lock);
    crate::diagln!();
    if opts.verbose {
        // After generation: every weight page a run reads has been read once.
        let a = crate::placement::audit::audit(&placement, &l.model.weights, &file);
        crate::diagln!("locus: audit: {}", super::audit::one_line(&a));
        if let Some(kv) = &report.kv_audit {
            crate::diagln!("locus: kv cache: {}", super::audit::cache_line(kv));
        }
        if let Some(moe) = l.model.config.moe {
            for line in expert_lines(&report.expert_counts, moe.n_expert, moe.dense_lead) {
                crate::diagln!("locus: {line}");
            }
        }
    }
    crate::diagln!("{}", timing_line(&report));
    Ok(report)
}

/// Experts each layer's tokens were routed to, hottest first, as `run -v` prints them:
/// `experts: layer 0: 5 31%, 2 18%, 7 12%, 0 11% …; 1 of 8 never chosen`.
pub fn expert_lines(counts: &[u64], n_expert: usize, dense_lead: usize) -> Vec<String> {
    /// Experts listed per layer.
    const SHOWN: usize = 4;
    counts
        .chunks_exact(n_expert)
        .enumerate()
        // The leading dense layers have no experts.
        .skip(dense_lead)
        .map(|(layer, c)| {
            let total = c.iter().sum::<u64>().max(1) as f64;
            let mut order: Vec<usize> = (0..n_expert).collect();
            order.sort_by(|&a, &b| c[b].cmp(&c[a]).then(a.cmp(&b)));
            let hot: Vec<String> = order
                .iter()
                .take(SHOWN)
                .map(|&e| format!("{e} {:.0}%", 100.0 * c[e] as f64 / total))
                .collect();
            let unused = c.iter().filter(|&&n| n == 0).count();
            format!(
                "experts: layer {layer}: {}{}; {unused} of {n_expert} never chosen",
                hot.join(", "),
                if n_expert > SHOWN { " …" } else { "" }
            )
        })
        .collect()
}

/// `load 123.4 ms | prompt 12 tok, 345.6 tok/s | decode 64 tok, 78.9 tok/s` (`prompt 96 of
/// 2500 tok` where Ctrl-C stopped the prompt).
pub fn timing_line(r: &RunReport) -> String {
    let rate = |n: usize, ms: f64| if ms > 0.0 { n as f64 * 1e3 / ms } else { 0.0 };
    let (done, all) = (r.prompt_evaluated, r.prompt_tokens.len());
    let prompt = if done < all {
        format!("{done} of {all} tok")
    } else {
        format!("{all} tok")
    };
    format!(
        "locus: load {:.1} ms | prompt {prompt}, {:.1} tok/s | decode {} tok, {:.1} tok/s",
        r.load_ms,
        rate(done, r.prompt_ms),
        r.generated.len(),
        rate(r.generated.len(), r.gen_ms)
    )
}
