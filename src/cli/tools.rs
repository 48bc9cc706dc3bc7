//! `quantize`, `gen-model`, `bench`, `membw`, `topo` and `audit`: the commands that write
//! models or measure the machine.

use std::os::unix::ffi::OsStringExt;
use std::path::PathBuf;

use locus::app;
use locus::kernels::GgmlType;
use locus::placement;

use super::{
    err, help, int, numa_flag, print_help, shown, threads, unknown, utf8, Args, CliError,
    MAX_THREADS,
};

/// The most repetitions, rounds or passes a measurement takes (a typo's 10⁹ would run for
/// days; llama-bench users type 5 to 100).
const MAX_REPS: usize = 1000;
/// The most tokens a bench test evaluates (a context of 2²⁰ tokens is already past any model
/// locus runs; the KV cache is sized from it).
const MAX_BENCH_TOKENS: usize = 1 << 20;

/// `locus quantize [OPTIONS] INPUT OUTPUT TYPE [NTHREADS]`, llama-quantize's command line
/// (`--allow-requantize` is taken and changes nothing: locus always requantizes).
/// Whether two paths name one file (the same device and inode: through a hard or symbolic
/// link too). A path that does not exist is no file.
fn same_file(a: &std::path::Path, b: &std::path::Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(x), Ok(y)) => x.dev() == y.dev() && x.ino() == y.ino(),
        _ => false,
    }
}

pub fn quantize(mut a: Args) -> Result<(), CliError> {
    use locus::model::imatrix::Imatrix;
    use locus::model::quant_mix::{parse_ggml_type, MixOptions, TensorTypeOverride};
    use locus::model::quantize::{ImatrixInput, Target, TARGETS};
    let mut opts = MixOptions::default();
    let mut positional = Vec::new();
    let mut imatrix_file = None;
    let (mut include, mut exclude) = (Vec::new(), Vec::new());
    let mix = |flag: &str, e: locus::model::quant_mix::MixError| {
        CliError::Message(format!("quantize: {flag}: {e}"))
    };
    while let Some((flag, inline)) = a.next_flag() {
        let f = flag.as_str();
        match f {
            "-h" | "--help" => return print_help(help::QUANTIZE),
            "--pure" => opts.pure = true,
            "--allow-requantize" => {}
            "--leave-output-tensor" => opts.leave_output_tensor = true,
            "--imatrix" => imatrix_file = Some(a.value_os(f, inline)?),
            "--include-weights" => include.push(a.value(f, inline)?),
            "--exclude-weights" => exclude.push(a.value(f, inline)?),
            "--output-tensor-type" | "--token-embedding-type" => {
                let ty = Some(parse_ggml_type(&a.value(f, inline)?).map_err(|e| mix(f, e))?);
                match f {
                    "--output-tensor-type" => opts.output_tensor_type = ty,
                    _ => opts.token_embedding_type = ty,
                }
            }
            "--tensor-type" => {
                let v = a.value(f, inline)?;
                opts.tensor_types
                    .push(TensorTypeOverride::parse(&v).map_err(|e| mix(f, e))?);
            }
            "--tensor-type-file" => {
                let path = a.path(f, inline)?;
                let text = std::fs::read(&path).map_err(|e| {
                    CliError::Message(format!("quantize: {f}: {}: {e}", path.display()))
                })?;
                let text = utf8(f, "file", std::ffi::OsString::from_vec(text))?;
                // Words separated by white space, each PATTERN=TYPE (llama-quantize's `>>`).
                for w in text.split_whitespace() {
                    opts.tensor_types
                        .push(TensorTypeOverride::parse(w).map_err(|e| mix(f, e))?);
                }
            }
            _ if f.starts_with('-') && f.len() > 1 => return Err(unknown("quantize", f)),
            _ => positional.push(a.current()),
        }
    }
    if !include.is_empty() && !exclude.is_empty() {
        return err("quantize: --include-weights and --exclude-weights cannot be used together");
    }
    let (input, output, ty, nthreads) = match &positional[..] {
        [i, o, t] => (i, o, t, None),
        [i, o, t, n] => (i, o, t, Some(n)),
        _ => {
            return err(
                "quantize: expected INPUT OUTPUT TYPE [NTHREADS] (see `locus quantize --help`)",
            )
        }
    };
    if same_file(std::path::Path::new(input), std::path::Path::new(output)) {
        return err(format!(
            "quantize: the output {} is the input (the same file{}); give another output path",
            std::path::Path::new(output).display(),
            if input == output {
                ""
            } else {
                ", through a link"
            }
        ));
    }
    let ty = utf8("quantize", "type", ty.clone())?;
    let target = Target::parse(&ty).ok_or_else(|| {
        CliError::Message(format!(
            "quantize: unknown type {} (types: {})",
            super::quote(&ty),
            TARGETS.join(", ")
        ))
    })?;
    // As llama-quantize: 0 (or nothing) means every CPU this process may use.
    let n_threads = match nthreads {
        Some(n) => int(
            "NTHREADS",
            &utf8("quantize", "NTHREADS", n.clone())?,
            0,
            MAX_THREADS,
        )?,
        None => 0,
    };
    let n_threads = if n_threads == 0 {
        locus::runtime::default_threads()
    } else {
        n_threads
    };
    let imatrix = match imatrix_file {
        Some(file) => {
            let mut matrix = Imatrix::load(std::path::Path::new(&file))
                .map_err(|e| CliError::Message(format!("quantize: {e}")))?;
            matrix.filter(&include, &exclude);
            Some(ImatrixInput {
                matrix,
                file: file.into_vec(),
            })
        }
        None => None,
    };
    app::catch_interrupts();
    let stop = locus::sys::signal::interrupt_flag();
    let report = locus::model::quantize::quantize_file(
        &PathBuf::from(input),
        &PathBuf::from(output),
        target,
        &opts,
        imatrix.as_ref(),
        n_threads,
        stop,
    )
    .map_err(app::AppError::from)?;
    if let [first, ..] = &report.without_weights[..] {
        // llama-quantize's "did not find weights", once.
        eprintln!(
            "locus quantize: the importance matrix has no weights for {} quantized tensor(s) \
             ({first}{}); they were quantized without, as llama-quantize does",
            report.without_weights.len(),
            if report.without_weights.len() > 1 {
                ", …"
            } else {
                ""
            }
        );
    }
    Ok(())
}

/// `locus gen-model OUTPUT`.
pub fn gen_model(mut a: Args) -> Result<(), CliError> {
    use locus::model::synth::SynthSpec;
    let mut out = None;
    let mut ty = GgmlType::Q4_0;
    let mut spec = SynthSpec::tiny(ty);
    let mut overrides: Vec<(String, usize)> = Vec::new();
    let (mut seed, mut untied, mut arch, mut mixtral) = (None, false, None, false);
    let mut yarn: (Option<f32>, Option<f32>) = (None, None);
    let mut moe_opts: Vec<(String, String)> = Vec::new();
    while let Some((flag, inline)) = a.next_flag() {
        let f = flag.as_str();
        match f {
            "-h" | "--help" => return print_help(help::GEN_MODEL),
            "--preset" => {
                spec = match a.value(f, inline)?.as_str() {
                    "tiny" => SynthSpec::tiny(ty),
                    "1b" => SynthSpec::one_b(ty),
                    "a3b" => SynthSpec::a3b(ty),
                    "glm45-air" => SynthSpec::glm45_air(ty),
                    "v2-lite" => SynthSpec::v2_lite(ty),
                    "v3" => SynthSpec::v3(ty),
                    "gpt-oss-120b" => SynthSpec::gpt_oss_120b(ty),
                    "gemma4-31b" => SynthSpec::gemma4_31b(ty),
                    "gemma4-a4b" => SynthSpec::gemma4_a4b(ty),
                    "gemma4-e2b" => SynthSpec::gemma4_e2b(ty),
                    other => {
                        return err(format!(
                            "--preset: unknown preset {} (tiny, 1b, a3b, glm45-air, v2-lite, v3, \
                             gpt-oss-120b, gemma4-31b, gemma4-a4b, gemma4-e2b)",
                            super::quote(other)
                        ))
                    }
                }
            }
            "--type" => {
                let v = a.value(f, inline)?;
                ty = GgmlType::from_name(&v).ok_or_else(|| {
                    CliError::Message(format!("--type: unknown type {}", super::quote(&v)))
                })?;
            }
            "--arch" => {
                let v = a.value(f, inline)?;
                // Mixtral is llama with experts.
                mixtral = v == "mixtral";
                let name = if mixtral { "llama" } else { v.as_str() };
                arch = Some(locus::model::arch::Arch::from_name(name).ok_or_else(|| {
                    CliError::Message(format!(
                        "--arch: unknown architecture {} ({}, mixtral)",
                        super::quote(&v),
                        locus::model::arch::Arch::names()
                    ))
                })?);
            }
            "--dim" | "--layers" | "--ffn" | "--heads" | "--kv-heads" | "--vocab" | "--ctx"
            | "--head-dim" | "--window" | "--swa-pattern" | "--experts" | "--experts-used"
            | "--expert-ffn" | "--kv-lora" | "--q-lora" | "--v-head-dim" | "--global-head-dim"
            | "--global-kv-heads" | "--global-rope-dims" | "--ple" => {
                let max = locus::app::genmodel::MAX_DIM;
                let v = int(f, &a.value(f, inline)?, 1, max)?;
                overrides.push((flag, v));
            }
            "--yarn" | "--yarn-log-mul" | "--softcap" => {
                let v = a.value(f, inline)?;
                let x: f32 = v
                    .parse()
                    .ok()
                    .filter(|x: &f32| x.is_finite() && *x >= 0.0)
                    .ok_or_else(|| {
                        CliError::Message(format!(
                            "{f}: {} is not a non-negative number",
                            super::quote(&v)
                        ))
                    })?;
                match f {
                    "--softcap" => spec.g4.softcap = x,
                    "--yarn" => yarn.0 = Some(x),
                    _ => yarn.1 = Some(x),
                }
            }
            "--seed" => seed = Some(int(f, &a.value(f, inline)?, 0, u64::MAX)?),
            "--shared-kv-layers" => {
                let max = locus::app::genmodel::MAX_DIM;
                spec.g4.shared_kv = int(f, &a.value(f, inline)?, 0, max)?;
            }
            "--double-wide-ffn" => spec.g4.double_wide = true,
            "--untied" => untied = true,
            "--unabsorbed" => spec.mla.unabsorbed = true,
            "--shared-experts"
            | "--dense-layers"
            | "--expert-groups"
            | "--expert-groups-used"
            | "--nextn"
            | "--rope-dims"
            | "--gating"
            | "--weights-scale" => moe_opts.push((flag.clone(), a.value(f, inline)?)),
            "--probs-bias" | "--no-probs-bias" | "--weights-norm" | "--no-weights-norm" => {
                moe_opts.push((flag.clone(), String::new()))
            }
            other if other.starts_with('-') && other.len() > 1 => {
                return Err(unknown("gen-model", other))
            }
            _ => {
                // A positional argument: the output path, any bytes.
                if out.replace(PathBuf::from(a.current())).is_some() {
                    return err("gen-model: more than one OUTPUT given");
                }
            }
        }
    }
    spec.weight_type = ty;
    let kv_heads_given = overrides.iter().any(|(f, _)| f == "--kv-heads");
    for (flag, v) in overrides {
        match flag.as_str() {
            "--dim" => spec.n_embd = v,
            "--layers" => spec.n_layer = v,
            "--ffn" => spec.n_ff = v,
            "--heads" => spec.n_head = v,
            "--kv-heads" => spec.n_head_kv = v,
            "--vocab" => spec.n_vocab = v,
            "--head-dim" => spec.head_dim = v,
            "--window" => spec.sliding_window = v,
            "--swa-pattern" => spec.swa_pattern = v.min(u32::MAX as usize) as u32,
            "--experts" => spec.n_expert = v,
            "--experts-used" => spec.n_expert_used = v,
            "--expert-ffn" => spec.n_ff_exp = v,
            "--kv-lora" => spec.mla.kv_lora = v,
            "--q-lora" => spec.mla.q_lora = v,
            "--v-head-dim" => spec.mla.v_head = v,
            "--global-head-dim" => spec.g4.head_dim = v,
            "--global-kv-heads" => spec.g4.n_head_kv = v,
            "--global-rope-dims" => spec.g4.n_rot = v,
            "--ple" => spec.g4.ple = v,
            _ => spec.n_ctx_train = v,
        }
    }
    if let Some(s) = seed {
        spec.seed = s;
    }
    if let Some(a) = arch {
        spec.arch = a;
    }
    if untied {
        spec.tied = false;
    }
    let gpt_oss = spec.arch == locus::model::arch::Arch::GptOss;
    // A mixture of experts: 8 experts, 2 per token, each as wide as --ffn, unless told.
    if mixtral || spec.arch == locus::model::arch::Arch::Qwen3Moe || gpt_oss || spec.n_expert > 0 {
        if spec.n_expert == 0 {
            spec.n_expert = 8;
        }
        if spec.n_expert_used == 0 {
            spec.n_expert_used = 2.min(spec.n_expert);
        }
        if spec.n_ff_exp == 0 {
            spec.n_ff_exp = spec.n_ff;
        }
    }
    giant_moe_options(&mut spec, &moe_opts)?;
    if spec.arch == locus::model::arch::Arch::Deepseek2 {
        if !kv_heads_given {
            spec.n_head_kv = 1;
        }
        // Its rotated part is --rope-dims of each query head (llama.cpp's n_rot).
        if spec.n_rot > 0 {
            spec.mla.rope = std::mem::take(&mut spec.n_rot);
        }
        latent_defaults(&mut spec);
        if let Some(f) = yarn.0 {
            spec.mla.yarn_factor = f;
        }
        // DeepSeek-V3's (0.1 × mscale_all_dim 1) unless told or the preset says.
        match yarn.1 {
            Some(m) => spec.mla.yarn_log_mul = m,
            None if spec.mla.yarn_log_mul == 0.0 => spec.mla.yarn_log_mul = 0.1,
            None => {}
        }
    } else if gpt_oss {
        if yarn.1.is_some() {
            return err("gen-model: --yarn-log-mul is for --arch deepseek2");
        }
        gpt_oss_defaults(&mut spec, yarn.0);
    } else if yarn.0.is_some() || yarn.1.is_some() {
        return err(
            "gen-model: --yarn is for --arch deepseek2 and gpt-oss, --yarn-log-mul for deepseek2",
        );
    } else if spec.mla.unabsorbed {
        return err("gen-model: --unabsorbed is for --arch deepseek2");
    }
    let out = out.ok_or_else(|| {
        CliError::Message("gen-model: OUTPUT is required (see `locus gen-model --help`)".into())
    })?;
    app::genmodel::run(&app::genmodel::GenModelOptions { out, spec })?;
    Ok(())
}

/// A gpt-oss model's keys where not given, as gpt-oss-120b has them: a window of 128, RoPE
/// base 150000, YaRN by 32 (`--yarn 0`: none).
fn gpt_oss_defaults(spec: &mut locus::model::synth::SynthSpec, yarn: Option<f32>) {
    if spec.sliding_window == 0 {
        spec.sliding_window = 128;
    }
    if spec.rope_freq_base == 10000.0 {
        spec.rope_freq_base = 150000.0;
    }
    match yarn {
        Some(f) => spec.mla.yarn_factor = f,
        None if spec.mla.yarn_factor == 0.0 => spec.mla.yarn_factor = 32.0,
        None => {}
    }
}

/// A deepseek2 model's latent sizes where not given, in DeepSeek-V2's proportions: a third of
/// each query head rotated (64 of 192), values two thirds of it (128), a latent vector a
/// quarter of the width (512 of V2-Lite's 2048), one latent KV head.
fn latent_defaults(spec: &mut locus::model::synth::SynthSpec) {
    let qh = spec.head_dim();
    let m = &mut spec.mla;
    if m.rope == 0 {
        m.rope = (qh / 3) & !1;
    }
    if m.v_head == 0 {
        m.v_head = qh - m.rope;
    }
    if m.kv_lora == 0 {
        m.kv_lora = spec.n_embd / 4;
    }
}

/// gen-model's knobs of the giant mixtures, applied over the preset and `--arch`: glm4moe
/// starts with one shared expert, a selection bias and normalised weights (as GLM-4.5's files
/// have them) unless told otherwise.
fn giant_moe_options(
    spec: &mut locus::model::synth::SynthSpec,
    opts: &[(String, String)],
) -> Result<(), CliError> {
    use locus::model::arch::{Arch, Gating};
    let max = locus::app::genmodel::MAX_DIM;
    if spec.arch == Arch::Deepseek2 && spec.n_expert > 0 && spec.moe.n_shared == 0 {
        // DeepSeek-V3's one shared expert.
        spec.moe.n_shared = 1;
    }
    if spec.arch == Arch::Glm4Moe && spec.moe.n_shared == 0 {
        spec.moe.n_shared = 1;
        spec.moe.probs_bias = true;
        spec.moe.weights_norm = Some(true);
    }
    for (flag, v) in opts {
        let f = flag.as_str();
        let m = &mut spec.moe;
        match f {
            "--shared-experts" => m.n_shared = int(f, v, 0, max)?,
            "--dense-layers" => m.dense_lead = int(f, v, 0, max)?,
            "--expert-groups" => m.groups = int(f, v, 0, max)?,
            "--expert-groups-used" => m.groups_used = int(f, v, 0, max)?,
            "--nextn" => spec.n_nextn = int(f, v, 0, max)?,
            "--rope-dims" => spec.n_rot = int(f, v, 2, max)?,
            "--gating" => {
                m.gating = Some(match v.as_str() {
                    "softmax" => Gating::Softmax,
                    "sigmoid" => Gating::Sigmoid,
                    other => {
                        return err(format!(
                            "--gating: unknown gating {} (softmax, sigmoid)",
                            super::quote(other)
                        ))
                    }
                })
            }
            "--weights-scale" => {
                m.weights_scale = match v.trim().parse::<f32>() {
                    Ok(x) if x.is_finite() && x >= 0.0 => x,
                    _ => {
                        return err(format!(
                            "--weights-scale: {} is not a non-negative number",
                            super::quote(v)
                        ))
                    }
                }
            }
            "--probs-bias" => m.probs_bias = true,
            "--no-probs-bias" => m.probs_bias = false,
            "--weights-norm" => m.weights_norm = Some(true),
            _ => m.weights_norm = Some(false),
        }
    }
    Ok(())
}

/// `locus bench`.
pub fn bench(mut a: Args) -> Result<(), CliError> {
    use app::bench::{ArmOptions, BenchOptions, Format};
    // The command as typed, for the chart's footer.
    let command = std::iter::once("locus".to_string())
        .chain(a.all().iter().skip(1).map(|s| shown(s)))
        .collect::<Vec<_>>()
        .join(" ");
    let mut o = BenchOptions {
        models: Vec::new(),
        n_prompt: 512,
        n_gen: 128,
        reps: 5,
        threads: vec![locus::runtime::default_threads()],
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
        let f = flag.as_str();
        match f {
            "-h" | "--help" => return print_help(help::BENCH),
            "-m" | "--model" => {
                // Comma-separated paths: split the bytes, so a path may be any bytes but ','.
                use std::os::unix::ffi::OsStrExt;
                let v = a.value_os(f, inline)?;
                o.models = v
                    .as_bytes()
                    .split(|&b| b == b',')
                    .filter(|s| !s.is_empty())
                    .map(|s| PathBuf::from(std::ffi::OsStr::from_bytes(s)))
                    .collect()
            }
            "-p" | "--n-prompt" => o.n_prompt = int(f, &a.value(f, inline)?, 0, MAX_BENCH_TOKENS)?,
            "-n" | "--n-gen" => o.n_gen = int(f, &a.value(f, inline)?, 0, MAX_BENCH_TOKENS)?,
            "-r" | "--repetitions" => o.reps = int(f, &a.value(f, inline)?, 1, MAX_REPS)?,
            "-t" | "--threads" => {
                o.threads = a
                    .value(f, inline)?
                    .split(',')
                    .map(|v| threads(f, v))
                    .collect::<Result<_, _>>()?
            }
            "--numa" => {
                o.modes =
                    app::bench::parse_modes(&a.value(f, inline)?).map_err(CliError::Message)?
            }
            "--cold" => o.cold = true,
            "--rounds" => o.rounds = int(f, &a.value(f, inline)?, 1, MAX_REPS)?,
            "--json" => json = true,
            "--csv" => csv = true,
            "--svg" => o.svg = Some(a.path(f, inline)?),
            // Hidden: one arm in this process, one JSON line (what the parent runs).
            "--arm" => arm = true,
            other => return Err(unknown("bench", other)),
        }
    }
    if o.models.is_empty() {
        return err("bench: -m FILE is required");
    }
    if o.n_prompt + o.n_gen == 0 {
        return err("bench: -p 0 and -n 0 leave nothing to measure");
    }
    o.format = match (json, csv) {
        (true, true) => return err("bench: --json and --csv exclude each other"),
        (true, false) => Format::Json,
        (false, true) => Format::Csv,
        (false, false) => Format::Markdown,
    };
    if arm {
        let (model, threads, mode) = match (&o.models[..], &o.threads[..], &o.modes[..]) {
            ([m], [t], [mode]) => (m.clone(), *t, *mode),
            _ => return err("bench --arm: exactly one model, thread count and mode"),
        };
        let mut numa = o.numa.clone();
        numa.mode = mode;
        numa.threads = Some(threads);
        app::bench::run_arm(&ArmOptions {
            model,
            n_prompt: o.n_prompt,
            n_gen: o.n_gen,
            reps: o.reps,
            numa,
            cold: o.cold,
        })?;
        return Ok(());
    }
    app::bench::run(&o, &command)?;
    Ok(())
}

/// `locus membw`.
pub fn membw(mut a: Args) -> Result<(), CliError> {
    let mut o = app::membw::MembwOptions {
        threads: locus::runtime::default_threads(),
        bytes: app::membw::default_bytes(0),
        passes: 5,
        matrix: false,
        json: false,
    };
    while let Some((flag, inline)) = a.next_flag() {
        let f = flag.as_str();
        match f {
            "-h" | "--help" => return print_help(help::MEMBW),
            "-t" | "--threads" => o.threads = threads(f, &a.value(f, inline)?)?,
            "--size" => {
                // At most a quarter of the address space, so the byte count cannot overflow;
                // more than half the machine's memory is refused before the buffer is mapped.
                let mib: usize = int(f, &a.value(f, inline)?, 1, usize::MAX >> 22)?;
                o.bytes = mib << 20;
            }
            "--passes" => o.passes = int(f, &a.value(f, inline)?, 1, MAX_REPS)?,
            "--matrix" => o.matrix = true,
            "--json" => o.json = true,
            other => return Err(unknown("membw", other)),
        }
    }
    app::membw::run(&o)?;
    Ok(())
}

/// `locus topo`.
pub fn topo(mut a: Args) -> Result<(), CliError> {
    let mut o = app::topo::TopoOptions::default();
    while let Some((flag, inline)) = a.next_flag() {
        match flag.as_str() {
            "-h" | "--help" => return print_help(help::TOPO),
            "--json" if inline.is_none() => o.json = true,
            "--json" => return err("topo: --json takes no value"),
            other => return Err(unknown("topo", other)),
        }
    }
    app::topo::run(&o).map_err(|e| CliError::Message(e.to_string()))
}

/// `locus audit`.
pub fn audit(mut a: Args) -> Result<(), CliError> {
    let mut model = None;
    let mut o = app::audit::AuditOptions {
        model: PathBuf::new(),
        numa: placement::Options::default(),
        json: false,
        ctx: None,
    };
    while let Some((flag, inline)) = a.next_flag() {
        if numa_flag(&mut a, &flag, inline.clone(), &mut o.numa)? {
            continue;
        }
        let f = flag.as_str();
        match f {
            "-h" | "--help" => return print_help(help::AUDIT),
            "-m" | "--model" => model = Some(a.path(f, inline)?),
            "-t" | "--threads" => o.numa.threads = Some(threads(f, &a.value(f, inline)?)?),
            "--json" => o.json = true,
            "-c" | "--ctx-size" => {
                o.ctx = Some(int(f, &a.value(f, inline)?, 0, super::generate::MAX_CTX)?)
            }
            other => return Err(unknown("audit", other)),
        }
    }
    o.model = model.ok_or_else(|| CliError::Message("audit: -m FILE is required".into()))?;
    app::audit::run(&o)?;
    Ok(())
}
