//! `run`, `perplexity`, `imatrix` and `tokenize`: the commands that read a model and a text.

use std::path::PathBuf;

use locus::app::generate::{Prompt, RunOptions};
use locus::app::imatrix::ImatrixOptions;
use locus::app::perplexity::PerplexityOptions;
use locus::app::tokenize::{ChatOptions, TextSource, TokenizeOptions};
use locus::model::chat::ChatFormat;
use locus::model::forward::KvType;
use locus::model::sampler::{random_seed, SamplerConfig};
use locus::placement;

use super::{
    err, help, int, numa_flag, print_help, real, set_kv, threads, unknown, Args, CliError,
};

/// The largest context `-c` accepts before any size is computed from it (llama.cpp keeps
/// `n_ctx` in 32 bits); the KV cache's real limit is the machine's memory, checked on load.
pub const MAX_CTX: usize = u32::MAX as usize;

/// Records a prompt source, refusing a second one (`-p` with `-f`).
fn set_prompt<T>(slot: &mut Option<T>, flag: &str, v: T) -> Result<(), CliError> {
    if slot.replace(v).is_some() {
        return err(format!(
            "{flag}: the text is already given (-p, -f and --stdin exclude each other)"
        ));
    }
    Ok(())
}

/// `locus run`.
pub fn run(a: Args) -> Result<(), CliError> {
    let Some(o) = parse_run(a)? else {
        return Ok(());
    };
    if locus::app::generate::run(&o)?.interrupted {
        return Err(CliError::Interrupted);
    }
    Ok(())
}

fn parse_run(mut a: Args) -> Result<Option<RunOptions>, CliError> {
    let (mut model, mut prompt) = (None, None);
    let mut o = RunOptions {
        model: PathBuf::new(),
        prompt: Prompt::Text(String::new()),
        n_predict: None,
        numa: placement::Options::default(),
        ctx: None,
        sampling: SamplerConfig::default(),
        random_seed: true,
        chat: false,
        chat_template: None,
        system: None,
        verbose: false,
        kv_type: KvType::F16,
        ignore_eos: false,
    };
    let mut kv = None;
    while let Some((flag, inline)) = a.next_flag() {
        if numa_flag(&mut a, &flag, inline.clone(), &mut o.numa)? {
            continue;
        }
        let f = flag.as_str();
        match f {
            "-h" | "--help" => {
                print_help(help::RUN)?;
                return Ok(None);
            }
            "-m" | "--model" => model = Some(a.path(f, inline)?),
            "-p" | "--prompt" => set_prompt(&mut prompt, f, Prompt::Text(a.text(f, inline)?))?,
            "-f" | "--file" => set_prompt(&mut prompt, f, Prompt::File(a.path(f, inline)?))?,
            "-n" | "--n-predict" => {
                let n: i64 = int(f, &a.value(f, inline)?, -2, i64::MAX)?;
                o.n_predict = usize::try_from(n).ok();
            }
            "-t" | "--threads" => o.numa.threads = Some(threads(f, &a.value(f, inline)?)?),
            "-c" | "--ctx-size" => o.ctx = Some(int(f, &a.value(f, inline)?, 0, MAX_CTX)?),
            "--temp" => o.sampling.temp = real(f, &a.value(f, inline)?)?,
            "--top-k" => {
                // As the server: -1 or 0 is off; below -1 is refused.
                let k: i64 = int(f, &a.value(f, inline)?, -1, i64::MAX)?;
                o.sampling.top_k = usize::try_from(k).unwrap_or(0);
            }
            "--top-p" => o.sampling.top_p = real(f, &a.value(f, inline)?)?,
            "--min-p" => o.sampling.min_p = real(f, &a.value(f, inline)?)?,
            "--repeat-penalty" => o.sampling.repeat_penalty = real(f, &a.value(f, inline)?)?,
            "--repeat-last-n" => {
                let n: i64 = int(f, &a.value(f, inline)?, -1, i64::MAX)?;
                // -1: the whole context (the app clamps every window to the context).
                o.sampling.repeat_last_n = usize::try_from(n).unwrap_or(usize::MAX);
            }
            "-s" | "--seed" => {
                let v = a.value(f, inline)?;
                if v.trim() == "-1" {
                    o.random_seed = true;
                } else {
                    o.sampling.seed = int(f, &v, 0, u64::MAX)?;
                    o.random_seed = false;
                }
            }
            "--chat" => o.chat = true,
            // A named template implies --chat (llama.cpp's turns conversation mode on).
            "--chat-template" => {
                o.chat_template = Some(chat_format(f, &a.value(f, inline)?)?);
                o.chat = true;
            }
            "--ignore-eos" => o.ignore_eos = true,
            "-sys" | "--system" => o.system = Some(a.text(f, inline)?),
            "-v" | "--verbose" => o.verbose = true,
            "-ctk" | "--cache-type-k" | "-ctv" | "--cache-type-v" => {
                set_kv(&mut kv, f, &a.value(f, inline)?)?
            }
            other => return Err(unknown("run", other)),
        }
    }
    o.kv_type = kv.unwrap_or(KvType::F16);
    o.model = model.ok_or_else(|| CliError::Message("run: -m FILE is required".into()))?;
    o.prompt = prompt.ok_or_else(|| {
        CliError::Message("run: a prompt is required (-p TEXT or -f FILE)".into())
    })?;
    if o.random_seed {
        o.sampling.seed = random_seed();
    }
    let s = &o.sampling;
    // The server's range for `temperature` (0: greedy).
    if !(0.0..=MAX_TEMP).contains(&s.temp) {
        return err(format!("--temp: {} must be from 0 to {MAX_TEMP}", s.temp));
    }
    if !(s.top_p > 0.0 && s.top_p <= 1.0) {
        return err(format!("--top-p: {} must be in (0, 1]", s.top_p));
    }
    if !(0.0..=1.0).contains(&s.min_p) {
        return err(format!("--min-p: {} must be in [0, 1]", s.min_p));
    }
    if s.repeat_penalty <= 0.0 {
        return err(format!(
            "--repeat-penalty: {} must be positive (1 = off)",
            s.repeat_penalty
        ));
    }
    Ok(Some(o))
}

/// The highest `--temp` (as the server's `temperature`).
const MAX_TEMP: f32 = 100.0;

/// `--chat-template NAME`: one of [`ChatFormat::NAMES`], or an error listing them.
fn chat_format(flag: &str, name: &str) -> Result<ChatFormat, CliError> {
    ChatFormat::from_name(name).ok_or_else(|| {
        CliError::Message(format!(
            "{flag}: unknown template {}; one of: {}",
            super::quote(name),
            ChatFormat::NAMES.join(", ")
        ))
    })
}

/// `locus perplexity`.
pub fn perplexity(mut a: Args) -> Result<(), CliError> {
    let (mut model, mut file) = (None, None);
    let mut o = PerplexityOptions {
        model: PathBuf::new(),
        file: PathBuf::new(),
        ctx: 512,
        chunks: None,
        kv_type: KvType::F16,
        numa: placement::Options::default(),
    };
    let mut kv = None;
    while let Some((flag, inline)) = a.next_flag() {
        if numa_flag(&mut a, &flag, inline.clone(), &mut o.numa)? {
            continue;
        }
        let f = flag.as_str();
        match f {
            "-h" | "--help" => return print_help(help::PERPLEXITY),
            "-m" | "--model" => model = Some(a.path(f, inline)?),
            "-f" | "--file" => file = Some(a.path(f, inline)?),
            "-c" | "--ctx-size" => o.ctx = int(f, &a.value(f, inline)?, 0, MAX_CTX)?,
            "--chunks" => {
                let n: i64 = int(f, &a.value(f, inline)?, -1, i64::MAX)?;
                o.chunks = match n {
                    -1 => None,
                    0 => return err("--chunks: 0 scores nothing (-1 = all)"),
                    n => Some(n as usize),
                };
            }
            "-t" | "--threads" => o.numa.threads = Some(threads(f, &a.value(f, inline)?)?),
            "-ctk" | "--cache-type-k" | "-ctv" | "--cache-type-v" => {
                set_kv(&mut kv, f, &a.value(f, inline)?)?
            }
            other => return Err(unknown("perplexity", other)),
        }
    }
    o.kv_type = kv.unwrap_or(KvType::F16);
    o.model = model.ok_or_else(|| CliError::Message("perplexity: -m FILE is required".into()))?;
    o.file = file.ok_or_else(|| CliError::Message("perplexity: -f FILE is required".into()))?;
    locus::app::perplexity::run(&o)?;
    Ok(())
}

/// The largest `-b` / `-ub` `imatrix` takes (llama.cpp keeps them in 32 bits).
const MAX_BATCH_FLAG: usize = i32::MAX as usize;

/// `locus imatrix`.
pub fn imatrix(mut a: Args) -> Result<(), CliError> {
    let (mut model, mut file) = (None, None);
    let mut o = ImatrixOptions::new(PathBuf::new(), PathBuf::new());
    let mut kv = None;
    while let Some((flag, inline)) = a.next_flag() {
        if numa_flag(&mut a, &flag, inline.clone(), &mut o.numa)? {
            continue;
        }
        let f = flag.as_str();
        match f {
            "-h" | "--help" => return print_help(help::IMATRIX),
            "-m" | "--model" => model = Some(a.path(f, inline)?),
            "-f" | "--file" => file = Some(a.path(f, inline)?),
            "-o" | "--output" | "--output-file" => o.out = a.path(f, inline)?,
            "-c" | "--ctx-size" => o.ctx = int(f, &a.value(f, inline)?, 2, MAX_CTX)?,
            "-b" | "--batch-size" => o.batch = int(f, &a.value(f, inline)?, 1, MAX_BATCH_FLAG)?,
            "-ub" | "--ubatch-size" => o.ubatch = int(f, &a.value(f, inline)?, 1, MAX_BATCH_FLAG)?,
            "--chunks" => {
                let n: i64 = int(f, &a.value(f, inline)?, -1, i64::MAX)?;
                o.chunks = match n {
                    -1 => None,
                    0 => return err("--chunks: 0 collects nothing (-1 = all)"),
                    n => Some(n as usize),
                };
            }
            "--chunk" | "--from-chunk" => o.from_chunk = int(f, &a.value(f, inline)?, 0, MAX_CTX)?,
            "--process-output" => o.process_output = true,
            "--no-ppl" => o.ppl = false,
            "--parse-special" => o.parse_special = true,
            "--no-parse-special" => o.parse_special = false,
            "--output-format" => {
                let v = a.value(f, inline)?;
                if v != "gguf" {
                    return err(format!(
                        "--output-format: only gguf is written (not {})",
                        super::quote(&v)
                    ));
                }
            }
            "-fa" | "--flash-attn" => {
                let v = a.value(f, inline)?;
                if v != "off" {
                    return err(format!(
                        "{f}: only off (locus computes attention as llama.cpp does without \
                         flash attention; not {})",
                        super::quote(&v)
                    ));
                }
            }
            "-t" | "--threads" => o.numa.threads = Some(threads(f, &a.value(f, inline)?)?),
            "-ctk" | "--cache-type-k" | "-ctv" | "--cache-type-v" => {
                set_kv(&mut kv, f, &a.value(f, inline)?)?
            }
            other => return Err(unknown("imatrix", other)),
        }
    }
    o.kv_type = kv.unwrap_or(KvType::F16);
    o.model = model.ok_or_else(|| CliError::Message("imatrix: -m FILE is required".into()))?;
    o.file = file.ok_or_else(|| CliError::Message("imatrix: -f FILE is required".into()))?;
    locus::app::imatrix::run(&o)?;
    Ok(())
}

/// `locus tokenize`.
pub fn tokenize(mut a: Args) -> Result<(), CliError> {
    let (mut model, mut text) = (None, None);
    let (mut ids_only, mut parse_special) = (false, true);
    let (mut chat, mut chat_opts) = (false, ChatOptions::default());
    while let Some((flag, inline)) = a.next_flag() {
        let f = flag.as_str();
        match f {
            "-h" | "--help" => return print_help(help::TOKENIZE),
            "-m" | "--model" => model = Some(a.path(f, inline)?),
            "-p" | "--prompt" => set_prompt(&mut text, f, TextSource::Text(a.text(f, inline)?))?,
            "-f" | "--file" => set_prompt(&mut text, f, TextSource::File(a.path(f, inline)?))?,
            "--stdin" => set_prompt(&mut text, f, TextSource::Stdin)?,
            "--ids" => ids_only = true,
            "--no-parse-special" => parse_special = false,
            "--chat" => chat = true,
            "--chat-template" => {
                chat_opts.template = Some(chat_format(f, &a.value(f, inline)?)?);
                chat = true;
            }
            "-sys" | "--system" => chat_opts.system = Some(a.text(f, inline)?),
            other => return Err(unknown("tokenize", other)),
        }
    }
    let o = TokenizeOptions {
        model: model.ok_or_else(|| CliError::Message("tokenize: -m FILE is required".into()))?,
        text: text.ok_or_else(|| {
            CliError::Message("tokenize: text is required (-p TEXT, -f FILE or --stdin)".into())
        })?,
        ids_only,
        parse_special,
        chat: chat.then_some(chat_opts),
    };
    locus::app::tokenize::run(&o)?;
    Ok(())
}
