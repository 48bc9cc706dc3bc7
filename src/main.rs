//! The `locus` command line: parses arguments and calls into the library. Nothing else.

use std::path::PathBuf;
use std::process::ExitCode;

use locus::app::generate::RunOptions;
use locus::app::perplexity::PerplexityOptions;
use locus::app::tokenize::TokenizeOptions;
use locus::app::{self, AppError};
use locus::kernels::GgmlType;
use locus::model::llama::KvType;
use locus::model::sampler::SamplerConfig;
use locus::placement;
use locus::sys::NodeId;

const MAIN_HELP: &str = "\
locus — CPU inference for GGUF language models, with NUMA-aware weight placement

Usage: locus <COMMAND> [OPTIONS]

Commands:
  run         generate text from a prompt (llama.cpp's flags)
  perplexity  score a text file as llama-perplexity does
  tokenize    print a text's token ids as llama-tokenize does
  quantize    rewrite a model's weights in another type (Q4_0, Q4_1, Q8_0, F16, BF16, F32)
  gen-model   write a llama-shaped GGUF with random weights (for benchmarks and tests)
  bench       prompt and decode speed, llama-bench style (pp/tg, mean ± sd)
  membw       measure memory read bandwidth per node (--matrix: node to node)
  topo        show NUMA nodes, CPUs, memory, distances and which NUMA system calls are allowed
  audit       place a model as `run` would and report where every page landed, and locality

Run `locus <COMMAND> --help` for a command's options.
Environment: LOCUS_KERNELS=scalar|avx2|avx512 forces a kernel tier.
             LOCUS_PREFETCH=l1|l2 forces where decode prefetches weights (default: L2
             when they outgrow the last-level cache, else L1).
";

/// The placement options' help lines, shared by `run` and `audit`.
macro_rules! numa_options_help {
    () => {
        "      --numa MODE         weight placement: off, distribute, interleave, isolate, mirror,
                          shard or auto (default: auto = mirror if every node has room,
                          else shard; on a one-node host mirror only where the kernels
                          read a packed copy faster (Q4_0 on AVX-512), else off)
      --numa-node N       the node for --numa isolate (default: the node locus starts on)
      --pin node|core     pin each thread to its node's CPUs (default) or to one CPU
      --strict            fail (exit 2) instead of falling back when placement cannot be honoured
      --hugepages         back the weight copies with 2 MiB hugetlb pages (falls back loudly)
      --poll N            how long idle threads spin, 0-100 (default 50; 0 where threads
                          outnumber CPUs: VMs, CPU quotas)
"
    };
}

const RUN_HELP: &str = concat!(
    "\
Usage: locus run -m FILE (-p TEXT | -f FILE) [OPTIONS]

Generates a continuation of the prompt. The generated text (not the prompt) goes to stdout as it
is produced; load information, warnings and the timing line go to stderr.

Options:
  -m, --model FILE        GGUF model file (llama family)
  -p, --prompt TEXT       prompt text; special tokens written in it (e.g. <|im_start|>) are recognised
  -f, --file FILE         read the prompt from FILE (one trailing newline dropped, as llama.cpp does)
  -n, --n-predict N       tokens to generate (default: -1 = until end of generation or context full)
  -t, --threads N         worker threads (default: the CPUs this process may use)
  -c, --ctx-size N        context size in tokens (default: 4096)
      --temp X            temperature; 0 = greedy (default: 0.8)
      --top-k N           keep the N most likely tokens; 0 = off (default: 40)
      --top-p X           nucleus sampling threshold; 1 = off (default: 0.95)
      --min-p X           drop tokens below X × the top probability; 0 = off (default: 0.05)
      --repeat-penalty X  penalise recent tokens; 1 = off (default: 1.0)
      --repeat-last-n N   window of recent tokens for the penalty (default: 64)
  -s, --seed N            random seed (default: random)
  -ctk, --cache-type-k T  KV cache type, f16 (default, as llama.cpp) or f32
  -ctv, --cache-type-v T  (must equal -ctk)
      --ignore-eos        keep generating past end-of-generation tokens
      --chat              wrap the prompt as a user message in the model's chat template
      --system TEXT       system message for --chat
",
    numa_options_help!(),
    "  -v, --verbose           print model, kernel tier, placement and its audit to stderr
  -h, --help              this help
"
);

const PPL_HELP: &str = "\
Usage: locus perplexity -m FILE -f TEXT [OPTIONS]

Cuts the tokenized text into windows of -c tokens, scores the second half of each, and prints
`Final estimate: PPL = <value> +/- <error>` (the same procedure as llama-perplexity).

Options:
  -m, --model FILE     GGUF model file
  -f, --file FILE      text to score
  -c, --ctx-size N     window size in tokens (default: 512)
      --chunks N       score at most N windows (default: all)
  -t, --threads N      worker threads (default: the CPUs this process may use)
  -ctk, -ctv T         KV cache type, f16 (default) or f32
      --numa MODE, --numa-node N, --pin node|core, --strict, --hugepages
                       weight placement, as for `locus run`
  -h, --help           this help
";

const TOKENIZE_HELP: &str = "\
Usage: locus tokenize -m FILE (-p TEXT | -f FILE | --stdin) [--ids] [--no-parse-special]

Prints the token ids of a text as llama-tokenize does (BOS added if the model asks for it).

Options:
  -m, --model FILE       GGUF model file (only its vocabulary is used)
  -p, --prompt TEXT      text to tokenize
  -f, --file FILE        read the text from FILE, every byte kept (as llama-tokenize does)
      --stdin            read the text from standard input, every byte kept
      --ids              print only `[id, id, ...]`
      --no-parse-special treat special-token text (e.g. <|im_start|>) as plain text
  -h, --help             this help
";

const GEN_MODEL_HELP: &str = "\
Usage: locus gen-model OUTPUT [OPTIONS]

Writes a llama-shaped GGUF with random weights and a working byte-level BPE vocabulary, so
models of any size can be benchmarked without downloads. OUTPUT is written atomically.

Options:
      --preset NAME   starting shape: tiny (default) or 1b (dim 2048, 16 layers, FFN 5632,
                      32 heads, 4 KV heads, vocabulary 32000)
      --type T        weight type: Q4_0, Q4_1, Q8_0, F16, BF16, F32 (default: Q4_0)
      --dim N         embedding length
      --layers N      number of blocks
      --ffn N         feed-forward length
      --heads N       attention heads
      --kv-heads N    key/value heads
      --vocab N       vocabulary size (at least 259)
      --ctx N         training context length written to the metadata
      --seed N        random seed (default: 1)
      --untied        separate output head instead of sharing the token embedding
  -h, --help          this help
";

const BENCH_HELP: &str = "\
Usage: locus bench -m FILE[,FILE...] [-p N] [-n N] [-r N] [-t N[,N...]] [--numa LIST|all]
                   [--rounds N] [--cold] [--json | --csv] [--svg FILE] [placement options]

For every model × thread count × placement mode (an arm), each in a fresh process and in that
order: pp<N> evaluates N random prompt tokens from an empty cache, tg<N> generates N tokens one
at a time; each after a warm-up run, repeated -r times, reported as mean ± sd tokens/s in
llama-bench's markdown table (or JSON/CSV). Per arm also: load time, how much of the model file
the page cache held at the start, weight bytes resident per node and locality (as `locus
audit`), and the roofline: decode t/s as a share of (read bandwidth of the arm's nodes, measured
as `locus membw` does right after each round of the arm, ÷ weight bytes read per token). Notes under the table give the host's
numa_balancing and THP state and how far apart the arms are against run-to-run spread.

Options:
  -m, --model FILES   comma-separated GGUF files
  -p, --n-prompt N    prompt tokens (default: 512; 0 skips the test)
  -n, --n-gen N       generated tokens (default: 128; 0 skips the test)
  -r, --repetitions N repetitions (default: 5)
  -t, --threads LIST  comma-separated thread counts (default: the CPUs this process may use)
      --numa LIST     comma-separated placement modes, or all (off, distribute, interleave,
                      isolate, mirror, shard); default: auto
      --rounds N      run the whole list of arms N times, round-robin, pooling the samples, so
                      sd includes process-to-process spread and drift (default: 1)
      --cold          drop the model file from the page cache before every arm (posix_fadvise);
                      without it the file is read through before every arm (warm)
      --json          JSON array of rows
      --csv           CSV, one row per line
      --svg FILE      draw the arms' decode speeds with sd whiskers, roofline and locality
      --numa-node N, --pin node|core, --strict, --hugepages, --poll N
                      placement options every arm shares, as for `locus run`
  -h, --help          this help
";

const MEMBW_HELP: &str = "\
Usage: locus membw [-t N] [--size MIB] [--passes N] [--matrix] [--json]

Measures read bandwidth with threads pinned to each node's CPUs reading memory bound to that
node (the decode roofline: tokens/s <= bandwidth / weight bytes read per token). Each thread
streams its own slice, requesting lines 8 KiB ahead of its loads as the decode kernels do.
--matrix measures every CPU node against every memory node: what locality is worth on this
host.

Options:
  -t, --threads N   threads per measurement, capped at the node's CPUs (default: all allowed)
      --size MIB    buffer per measurement (default: 512, or 4x the last-level cache
                    where larger: a buffer the cache holds in part overstates memory)
      --passes N    passes per measurement; the best counts (default: 5)
      --matrix      node-to-node matrix
      --json        one JSON object
  -h, --help        this help
";

const QUANTIZE_HELP: &str = "\
Usage: locus quantize INPUT OUTPUT TYPE

Rewrites every 2-D weight of INPUT in TYPE (Q4_0, Q4_1, Q8_0, F16, BF16, F32), keeping 1-D
tensors and all metadata, as `llama-quantize --pure` does. OUTPUT is written atomically.

Options:
  -h, --help   this help
";

const TOPO_HELP: &str = "\
Usage: locus topo [--json]

Prints what locus sees of the machine: NUMA nodes (CPUs, memory, page cache, hugepages,
memory-only nodes), the distance matrix, the CPUs and nodes this process may use, which NUMA
system calls are allowed (EPERM under Docker's default seccomp profile), numa_balancing, the
transparent hugepage setting, and the kernel tier in use.

Options:
      --json   print one JSON object instead of the table
  -h, --help   this help
";

const AUDIT_HELP: &str = concat!(
    "\
Usage: locus audit -m FILE [--numa MODE] [-t N] [--json]

Places the model exactly as `locus run` would (reading one token's weights where they come from
the file mapping), then reports per tensor and
copy the pages on each node (move_pages, or /proc/self/numa_maps where that is refused), totals
per node, how much of the model file is still in the page cache, and locality: the share of the
weight bytes each thread reads per token that sit on its own node.

Options:
  -m, --model FILE        GGUF model file
  -t, --threads N         worker threads (default: the CPUs of the nodes in use)
",
    numa_options_help!(),
    "      --json              print one JSON object (mode, nodes, copies, page_cache_bytes,
                          locality, warnings, ...)
  -h, --help              this help
"
);

/// Why a command did not succeed.
enum CliError {
    /// Printed as one line; exit code 2.
    Message(String),
    /// SIGINT stopped generation after the timing line was printed; exit code 130.
    Interrupted,
}

impl From<AppError> for CliError {
    fn from(e: AppError) -> Self {
        CliError::Message(e.to_string())
    }
}

/// Walks `--flag value`, `--flag=value` and `-f value` arguments.
struct Args {
    items: Vec<String>,
    i: usize,
}

impl Args {
    fn next_flag(&mut self) -> Option<(String, Option<String>)> {
        let a = self.items.get(self.i)?.clone();
        self.i += 1;
        if a.starts_with("--") {
            if let Some((k, v)) = a.split_once('=') {
                return Some((k.to_string(), Some(v.to_string())));
            }
        }
        Some((a, None))
    }

    fn value(&mut self, flag: &str, inline: Option<String>) -> Result<String, CliError> {
        if let Some(v) = inline {
            return Ok(v);
        }
        let v = self
            .items
            .get(self.i)
            .cloned()
            .ok_or_else(|| CliError::Message(format!("{flag} needs a value")))?;
        self.i += 1;
        Ok(v)
    }
}

fn parse_num<T: std::str::FromStr>(flag: &str, v: &str) -> Result<T, CliError> {
    v.trim()
        .parse()
        .map_err(|_| CliError::Message(format!("{flag}: '{v}' is not a valid number")))
}

/// Reads `-f FILE` as llama.cpp does: the whole file less one trailing newline.
fn read_prompt_file(path: &str) -> Result<String, CliError> {
    let mut text = app::read_text(&PathBuf::from(path))?;
    if text.ends_with('\n') {
        text.pop();
    }
    Ok(text)
}

/// Reads a file's exact bytes (llama-tokenize's `-f` keeps the trailing newline).
fn read_exact_file(path: &str) -> Result<String, CliError> {
    Ok(app::read_text(&PathBuf::from(path))?)
}

/// Reads standard input exactly (for `tokenize --stdin`).
fn read_stdin() -> Result<String, CliError> {
    use std::io::Read;
    let mut bytes = Vec::new();
    std::io::stdin()
        .read_to_end(&mut bytes)
        .map_err(|e| CliError::Message(format!("cannot read standard input: {e}")))?;
    String::from_utf8(bytes).map_err(|e| {
        CliError::Message(format!(
            "standard input is not valid UTF-8 (first bad byte at offset {})",
            e.utf8_error().valid_up_to()
        ))
    })
}

fn parse_kv(flag: &str, v: &str) -> Result<KvType, CliError> {
    match v {
        "f16" => Ok(KvType::F16),
        "f32" => Ok(KvType::F32),
        _ => Err(CliError::Message(format!(
            "{flag}: '{v}' is not a supported cache type (f16, f32)"
        ))),
    }
}

/// Applies -ctk/-ctv; locus keeps keys and values in one type.
fn set_kv(slot: &mut Option<KvType>, flag: &str, v: &str) -> Result<(), CliError> {
    let t = parse_kv(flag, v)?;
    match slot {
        Some(prev) if *prev != t => Err(CliError::Message(format!(
            "{flag}: -ctk and -ctv must name the same type"
        ))),
        _ => {
            *slot = Some(t);
            Ok(())
        }
    }
}

fn parse_threads(flag: &str, v: &str) -> Result<usize, CliError> {
    let n: usize = parse_num(flag, v)?;
    if n == 0 {
        return Err(CliError::Message(format!(
            "{flag}: thread count must be at least 1"
        )));
    }
    Ok(n)
}

/// Handles a placement flag (`--numa`, `--numa-node`, `--pin`, `--strict`, `--hugepages`);
/// returns false for any other flag.
fn numa_flag(
    a: &mut Args,
    flag: &str,
    inline: Option<String>,
    o: &mut placement::Options,
) -> Result<bool, CliError> {
    match flag {
        "--numa" => {
            let v = a.value(flag, inline)?;
            o.mode = placement::Mode::parse(&v).ok_or_else(|| {
                CliError::Message(format!(
                    "--numa: unknown mode '{v}' (off, distribute, interleave, isolate, mirror, shard, auto)"
                ))
            })?;
        }
        "--numa-node" => {
            o.node = Some(NodeId(parse_num(flag, &a.value(flag, inline)?)?));
        }
        "--pin" => {
            o.pin = match a.value(flag, inline)?.as_str() {
                "node" => placement::Pin::Node,
                "core" => placement::Pin::Core,
                v => {
                    return Err(CliError::Message(format!(
                        "--pin: unknown value '{v}' (node or core)"
                    )))
                }
            }
        }
        "--strict" => o.strict = true,
        "--poll" => {
            let v: u32 = parse_num(flag, &a.value(flag, inline)?)?;
            if v > 100 {
                return Err(CliError::Message(format!("--poll: {v} is not in 0..=100")));
            }
            o.poll = v;
        }
        "--hugepages" => o.hugepages = true,
        _ => return Ok(false),
    }
    Ok(true)
}

fn run_audit(mut a: Args) -> Result<(), CliError> {
    let mut model = None;
    let mut o = app::audit::AuditOptions {
        model: PathBuf::new(),
        numa: placement::Options::default(),
        json: false,
    };
    while let Some((flag, inline)) = a.next_flag() {
        if numa_flag(&mut a, &flag, inline.clone(), &mut o.numa)? {
            continue;
        }
        match flag.as_str() {
            "-h" | "--help" => {
                app::write_stdout(AUDIT_HELP)?;
                return Ok(());
            }
            "-m" | "--model" => model = Some(a.value(&flag, inline)?),
            "-t" | "--threads" => {
                o.numa.threads = Some(parse_threads(&flag, &a.value(&flag, inline)?)?)
            }
            "--json" => o.json = true,
            other => {
                return Err(CliError::Message(format!(
                    "audit: unknown option '{other}' (see `locus audit --help`)"
                )))
            }
        }
    }
    o.model =
        PathBuf::from(model.ok_or_else(|| CliError::Message("audit: -m FILE is required".into()))?);
    app::audit::run(&o)?;
    Ok(())
}

fn parse_run(mut a: Args) -> Result<Option<RunOptions>, CliError> {
    let mut model = None;
    let mut prompt = None;
    let mut o = RunOptions {
        model: PathBuf::new(),
        prompt: String::new(),
        n_predict: None,
        numa: placement::Options::default(),
        ctx: 4096,
        sampling: SamplerConfig {
            seed: random_seed(),
            ..Default::default()
        },
        chat: false,
        system: None,
        verbose: false,
        kv_type: KvType::F16,
        ignore_eos: false,
    };
    let mut kv = None;
    let mut ctx_given = false;
    while let Some((flag, inline)) = a.next_flag() {
        if numa_flag(&mut a, &flag, inline.clone(), &mut o.numa)? {
            continue;
        }
        match flag.as_str() {
            "-h" | "--help" => {
                app::write_stdout(RUN_HELP)?;
                return Ok(None);
            }
            "-m" | "--model" => model = Some(a.value(&flag, inline)?),
            "-p" | "--prompt" => prompt = Some(a.value(&flag, inline)?),
            "-f" | "--file" => prompt = Some(read_prompt_file(&a.value(&flag, inline)?)?),
            "-n" | "--n-predict" => {
                let n: i64 = parse_num(&flag, &a.value(&flag, inline)?)?;
                o.n_predict = if n < 0 { None } else { Some(n as usize) };
            }
            "-t" | "--threads" => {
                o.numa.threads = Some(parse_threads(&flag, &a.value(&flag, inline)?)?)
            }
            "-c" | "--ctx-size" => {
                o.ctx = parse_num(&flag, &a.value(&flag, inline)?)?;
                ctx_given = true;
            }
            "--temp" => o.sampling.temp = parse_num(&flag, &a.value(&flag, inline)?)?,
            "--top-k" => o.sampling.top_k = parse_num(&flag, &a.value(&flag, inline)?)?,
            "--top-p" => o.sampling.top_p = parse_num(&flag, &a.value(&flag, inline)?)?,
            "--min-p" => o.sampling.min_p = parse_num(&flag, &a.value(&flag, inline)?)?,
            "--repeat-penalty" => {
                o.sampling.repeat_penalty = parse_num(&flag, &a.value(&flag, inline)?)?
            }
            "--repeat-last-n" => {
                o.sampling.repeat_last_n = parse_num(&flag, &a.value(&flag, inline)?)?
            }
            "-s" | "--seed" => o.sampling.seed = parse_num(&flag, &a.value(&flag, inline)?)?,
            "--chat" => o.chat = true,
            "--ignore-eos" => o.ignore_eos = true,
            "--system" => o.system = Some(a.value(&flag, inline)?),
            "-v" | "--verbose" => o.verbose = true,
            "-ctk" | "--cache-type-k" | "-ctv" | "--cache-type-v" => {
                set_kv(&mut kv, &flag, &a.value(&flag, inline)?)?
            }
            other => {
                return Err(CliError::Message(format!(
                    "run: unknown option '{other}' (see `locus run --help`)"
                )))
            }
        }
    }
    o.kv_type = kv.unwrap_or(KvType::F16);
    o.model =
        PathBuf::from(model.ok_or_else(|| CliError::Message("run: -m FILE is required".into()))?);
    o.prompt = prompt.ok_or_else(|| {
        CliError::Message("run: a prompt is required (-p TEXT or -f FILE)".into())
    })?;
    if ctx_given && o.ctx == 0 {
        return Err(CliError::Message(
            "-c: context size must be at least 1".into(),
        ));
    }
    if !(o.sampling.top_p > 0.0 && o.sampling.top_p <= 1.0) {
        return Err(CliError::Message(format!(
            "--top-p: {} must be in (0, 1]",
            o.sampling.top_p
        )));
    }
    if !(0.0..=1.0).contains(&o.sampling.min_p) {
        return Err(CliError::Message(format!(
            "--min-p: {} must be in [0, 1]",
            o.sampling.min_p
        )));
    }
    if o.sampling.repeat_penalty <= 0.0 {
        return Err(CliError::Message(format!(
            "--repeat-penalty: {} must be positive",
            o.sampling.repeat_penalty
        )));
    }
    Ok(Some(o))
}

fn random_seed() -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    (t as u64) ^ ((std::process::id() as u64) << 32)
}

fn parse_perplexity(mut a: Args) -> Result<Option<PerplexityOptions>, CliError> {
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
        match flag.as_str() {
            "-h" | "--help" => {
                app::write_stdout(PPL_HELP)?;
                return Ok(None);
            }
            "-m" | "--model" => model = Some(a.value(&flag, inline)?),
            "-f" | "--file" => file = Some(a.value(&flag, inline)?),
            "-c" | "--ctx-size" => o.ctx = parse_num(&flag, &a.value(&flag, inline)?)?,
            "--chunks" => o.chunks = Some(parse_num(&flag, &a.value(&flag, inline)?)?),
            "-t" | "--threads" => {
                o.numa.threads = Some(parse_threads(&flag, &a.value(&flag, inline)?)?)
            }
            "-ctk" | "--cache-type-k" | "-ctv" | "--cache-type-v" => {
                set_kv(&mut kv, &flag, &a.value(&flag, inline)?)?
            }
            other => {
                return Err(CliError::Message(format!(
                    "perplexity: unknown option '{other}' (see `locus perplexity --help`)"
                )))
            }
        }
    }
    o.kv_type = kv.unwrap_or(KvType::F16);
    o.model = PathBuf::from(
        model.ok_or_else(|| CliError::Message("perplexity: -m FILE is required".into()))?,
    );
    o.file = PathBuf::from(
        file.ok_or_else(|| CliError::Message("perplexity: -f FILE is required".into()))?,
    );
    Ok(Some(o))
}

fn parse_tokenize(mut a: Args) -> Result<Option<TokenizeOptions>, CliError> {
    let (mut model, mut text) = (None, None);
    let (mut ids_only, mut parse_special) = (false, true);
    while let Some((flag, inline)) = a.next_flag() {
        match flag.as_str() {
            "-h" | "--help" => {
                app::write_stdout(TOKENIZE_HELP)?;
                return Ok(None);
            }
            "-m" | "--model" => model = Some(a.value(&flag, inline)?),
            "-p" | "--prompt" => text = Some(a.value(&flag, inline)?),
            "-f" | "--file" => text = Some(read_exact_file(&a.value(&flag, inline)?)?),
            "--stdin" => text = Some(read_stdin()?),
            "--ids" => ids_only = true,
            "--no-parse-special" => parse_special = false,
            other => {
                return Err(CliError::Message(format!(
                    "tokenize: unknown option '{other}' (see `locus tokenize --help`)"
                )))
            }
        }
    }
    Ok(Some(TokenizeOptions {
        model: PathBuf::from(
            model.ok_or_else(|| CliError::Message("tokenize: -m FILE is required".into()))?,
        ),
        text: text.ok_or_else(|| {
            CliError::Message("tokenize: text is required (-p TEXT, -f FILE or --stdin)".into())
        })?,
        ids_only,
        parse_special,
    }))
}

fn run_quantize(a: Args) -> Result<(), CliError> {
    let rest: Vec<&String> = a.items[a.i..].iter().collect();
    if rest.iter().any(|s| *s == "-h" || *s == "--help") {
        app::write_stdout(QUANTIZE_HELP)?;
        return Ok(());
    }
    let [input, output, ty] = rest.as_slice() else {
        return Err(CliError::Message(
            "quantize: expected INPUT OUTPUT TYPE (see `locus quantize --help`)".into(),
        ));
    };
    let target = GgmlType::from_name(ty)
        .ok_or_else(|| CliError::Message(format!("quantize: unknown type '{ty}'")))?;
    locus::model::quantize::quantize_file(&PathBuf::from(input), &PathBuf::from(output), target)
        .map_err(|e| CliError::Message(e.to_string()))
}

fn run_topo(mut a: Args) -> Result<(), CliError> {
    let mut o = locus::app::topo::TopoOptions::default();
    while let Some((flag, inline)) = a.next_flag() {
        match flag.as_str() {
            "-h" | "--help" => {
                app::write_stdout(TOPO_HELP)?;
                return Ok(());
            }
            "--json" if inline.is_none() => o.json = true,
            "--json" => return Err(CliError::Message("topo: --json takes no value".into())),
            other => {
                return Err(CliError::Message(format!(
                    "topo: unknown option '{other}' (see `locus topo --help`)"
                )))
            }
        }
    }
    locus::app::topo::run(&o).map_err(|e| CliError::Message(e.to_string()))
}

fn run_gen_model(mut a: Args) -> Result<(), CliError> {
    use locus::model::synth::SynthSpec;
    let mut out = None;
    let mut ty = GgmlType::Q4_0;
    let mut spec = SynthSpec::tiny(ty);
    let mut overrides: Vec<(String, usize)> = Vec::new();
    let (mut seed, mut untied) = (None, false);
    while let Some((flag, inline)) = a.next_flag() {
        match flag.as_str() {
            "-h" | "--help" => {
                app::write_stdout(GEN_MODEL_HELP)?;
                return Ok(());
            }
            "--preset" => {
                spec = match a.value(&flag, inline)?.as_str() {
                    "tiny" => SynthSpec::tiny(ty),
                    "1b" => SynthSpec::one_b(ty),
                    other => {
                        return Err(CliError::Message(format!(
                            "--preset: unknown preset '{other}' (tiny, 1b)"
                        )))
                    }
                }
            }
            "--type" => {
                let v = a.value(&flag, inline)?;
                ty = GgmlType::from_name(&v)
                    .ok_or_else(|| CliError::Message(format!("--type: unknown type '{v}'")))?;
            }
            "--dim" | "--layers" | "--ffn" | "--heads" | "--kv-heads" | "--vocab" | "--ctx" => {
                let v = parse_num(&flag, &a.value(&flag, inline)?)?;
                overrides.push((flag, v));
            }
            "--seed" => seed = Some(parse_num(&flag, &a.value(&flag, inline)?)?),
            "--untied" => untied = true,
            other if other.starts_with('-') => {
                return Err(CliError::Message(format!(
                    "gen-model: unknown option '{other}' (see `locus gen-model --help`)"
                )))
            }
            other => {
                if out.replace(PathBuf::from(other)).is_some() {
                    return Err(CliError::Message(
                        "gen-model: more than one OUTPUT given".into(),
                    ));
                }
            }
        }
    }
    spec.weight_type = ty;
    for (flag, v) in overrides {
        match flag.as_str() {
            "--dim" => spec.n_embd = v,
            "--layers" => spec.n_layer = v,
            "--ffn" => spec.n_ff = v,
            "--heads" => spec.n_head = v,
            "--kv-heads" => spec.n_head_kv = v,
            "--vocab" => spec.n_vocab = v,
            _ => spec.n_ctx_train = v,
        }
    }
    if let Some(s) = seed {
        spec.seed = s;
    }
    if untied {
        spec.tied = false;
    }
    let out = out.ok_or_else(|| {
        CliError::Message("gen-model: OUTPUT is required (see `locus gen-model --help`)".into())
    })?;
    locus::app::genmodel::run(&locus::app::genmodel::GenModelOptions { out, spec })?;
    Ok(())
}

fn run_bench(mut a: Args) -> Result<(), CliError> {
    use locus::app::bench::{ArmOptions, BenchOptions, Format};
    // The command as typed, for the chart's footer.
    let command = std::iter::once("locus")
        .chain(a.items.iter().skip(1).map(String::as_str))
        .collect::<Vec<_>>()
        .join(" ");
    let mut o = BenchOptions {
        models: Vec::new(),
        n_prompt: 512,
        n_gen: 128,
        reps: 5,
        threads: vec![app::default_threads()],
        modes: vec![placement::Mode::Auto],
        numa: placement::Options::default(),
        cold: false,
        rounds: 1,
        format: Format::Markdown,
        svg: None,
    };
    let mut arm = false;
    let (mut json, mut csv) = (false, false);
    while let Some((flag, inline)) = a.next_flag() {
        if flag != "--numa" && numa_flag(&mut a, &flag, inline.clone(), &mut o.numa)? {
            continue;
        }
        match flag.as_str() {
            "-h" | "--help" => {
                app::write_stdout(BENCH_HELP)?;
                return Ok(());
            }
            "-m" | "--model" => {
                o.models = a
                    .value(&flag, inline)?
                    .split(',')
                    .filter(|s| !s.is_empty())
                    .map(PathBuf::from)
                    .collect()
            }
            "-p" | "--n-prompt" => o.n_prompt = parse_num(&flag, &a.value(&flag, inline)?)?,
            "-n" | "--n-gen" => o.n_gen = parse_num(&flag, &a.value(&flag, inline)?)?,
            "-r" | "--repetitions" => {
                o.reps = parse_num::<usize>(&flag, &a.value(&flag, inline)?)?.max(1)
            }
            "-t" | "--threads" => {
                o.threads = a
                    .value(&flag, inline)?
                    .split(',')
                    .map(|v| parse_threads(&flag, v))
                    .collect::<Result<_, _>>()?
            }
            "--numa" => {
                o.modes = locus::app::bench::parse_modes(&a.value(&flag, inline)?)
                    .map_err(CliError::Message)?
            }
            "--cold" => o.cold = true,
            "--rounds" => o.rounds = parse_num::<usize>(&flag, &a.value(&flag, inline)?)?.max(1),
            "--json" => json = true,
            "--csv" => csv = true,
            "--svg" => o.svg = Some(PathBuf::from(a.value(&flag, inline)?)),
            // Hidden: one arm in this process, one JSON line (what the parent runs).
            "--arm" => arm = true,
            other => {
                return Err(CliError::Message(format!(
                    "bench: unknown option '{other}' (see `locus bench --help`)"
                )))
            }
        }
    }
    if o.models.is_empty() {
        return Err(CliError::Message("bench: -m FILE is required".into()));
    }
    o.format = match (json, csv) {
        (true, true) => {
            return Err(CliError::Message(
                "bench: --json and --csv exclude each other".into(),
            ))
        }
        (true, false) => Format::Json,
        (false, true) => Format::Csv,
        (false, false) => Format::Markdown,
    };
    if arm {
        let (model, threads, mode) = match (&o.models[..], &o.threads[..], &o.modes[..]) {
            ([m], [t], [mode]) => (m.clone(), *t, *mode),
            _ => {
                return Err(CliError::Message(
                    "bench --arm: exactly one model, thread count and mode".into(),
                ))
            }
        };
        let mut numa = o.numa.clone();
        numa.mode = mode;
        numa.threads = Some(threads);
        locus::app::bench::run_arm(&ArmOptions {
            model,
            n_prompt: o.n_prompt,
            n_gen: o.n_gen,
            reps: o.reps,
            numa,
            cold: o.cold,
        })?;
        return Ok(());
    }
    locus::app::bench::run(&o, &command)?;
    Ok(())
}

fn run_membw(mut a: Args) -> Result<(), CliError> {
    let mut o = locus::app::membw::MembwOptions {
        threads: app::default_threads(),
        bytes: locus::app::membw::default_bytes(0),
        passes: 5,
        matrix: false,
        json: false,
    };
    while let Some((flag, inline)) = a.next_flag() {
        match flag.as_str() {
            "-h" | "--help" => {
                app::write_stdout(MEMBW_HELP)?;
                return Ok(());
            }
            "-t" | "--threads" => o.threads = parse_threads(&flag, &a.value(&flag, inline)?)?,
            "--size" => {
                let mib: usize = parse_num(&flag, &a.value(&flag, inline)?)?;
                if mib == 0 {
                    return Err(CliError::Message("--size: must be at least 1 MiB".into()));
                }
                o.bytes = mib << 20;
            }
            "--passes" => o.passes = parse_num::<usize>(&flag, &a.value(&flag, inline)?)?.max(1),
            "--matrix" => o.matrix = true,
            "--json" => o.json = true,
            other => {
                return Err(CliError::Message(format!(
                    "membw: unknown option '{other}' (see `locus membw --help`)"
                )))
            }
        }
    }
    locus::app::membw::run(&o)?;
    Ok(())
}

fn dispatch(argv: Vec<String>) -> Result<(), CliError> {
    let Some(cmd) = argv.get(1).cloned() else {
        eprint!("{MAIN_HELP}");
        return Err(CliError::Message("no command given".into()));
    };
    let args = Args { items: argv, i: 2 };
    match cmd.as_str() {
        "-h" | "--help" | "help" => {
            app::write_stdout(MAIN_HELP)?;
            Ok(())
        }
        "run" => {
            if let Some(o) = parse_run(args)? {
                if locus::app::generate::run(&o)?.interrupted {
                    return Err(CliError::Interrupted);
                }
            }
            Ok(())
        }
        "perplexity" => {
            if let Some(o) = parse_perplexity(args)? {
                locus::app::perplexity::run(&o)?;
            }
            Ok(())
        }
        "tokenize" => {
            if let Some(o) = parse_tokenize(args)? {
                locus::app::tokenize::run(&o)?;
            }
            Ok(())
        }
        "quantize" => run_quantize(args),
        "gen-model" => run_gen_model(args),
        "membw" => run_membw(args),
        "bench" => run_bench(args),
        "topo" => run_topo(args),
        "audit" => run_audit(args),
        other => Err(CliError::Message(format!(
            "unknown command '{other}' (commands: run, perplexity, tokenize, quantize, gen-model, bench, membw, topo, audit)"
        ))),
    }
}

fn main() -> ExitCode {
    // `locus … | head` should end quietly, like any C tool, not with a broken-pipe panic.
    let _ = locus::sys::signal::default_sigpipe();
    // A model file truncated under our mapping: one error line and exit 2, not "Bus error".
    let _ = locus::sys::signal::catch_sigbus();
    match dispatch(std::env::args().collect()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(CliError::Interrupted) => ExitCode::from(locus::sys::signal::EXIT_INTERRUPTED),
        Err(CliError::Message(msg)) => {
            eprintln!("locus: error: {msg}");
            ExitCode::from(2)
        }
    }
}
