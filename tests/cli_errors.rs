//! Bad input gives exactly one clear line on stderr and exit code 2 — never a panic.

mod common;

use std::path::{Path, PathBuf};

use locus::kernels::GgmlType;
use locus::model::gguf_write::{GgufWriter, MetaValue};
use locus::model::synth::{synth_model, SynthSpec};

/// Runs `locus run` on `model` and checks the failure shape; returns the error line.
fn run_fails(model: &Path, extra: &[&str]) -> String {
    let m = model.to_str().unwrap();
    let mut args = vec!["run", "-m", m, "-p", "hello", "-n", "4", "--temp", "0"];
    args.extend_from_slice(extra);
    fails(&args)
}

fn fails(args: &[&str]) -> String {
    let out = common::locus(args);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "args {args:?}: stderr {stderr}");
    assert!(!stderr.contains("panicked"), "panic for {args:?}: {stderr}");
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(
        lines.len(),
        1,
        "expected one line for {args:?}, got: {stderr}"
    );
    assert!(lines[0].starts_with("locus: error: "), "{stderr}");
    assert!(out.stdout.is_empty(), "nothing on stdout for a failure");
    lines[0].to_string()
}

fn write(dir: &Path, name: &str, w: &GgufWriter) -> PathBuf {
    let p = dir.join(name);
    w.write_atomic(&p).unwrap();
    p
}

fn tiny() -> GgufWriter {
    synth_model(&SynthSpec::tiny(GgmlType::Q8_0))
}

/// `locus run` arguments: `n` greedy tokens of `model` after "hello".
fn greedy_run<'a>(model: &'a Path, n: &'a str) -> [&'a str; 9] {
    let m = model.to_str().unwrap();
    ["run", "-m", m, "-p", "hello", "-n", n, "--temp", "0"]
}

#[test]
fn a_valid_tiny_model_runs() {
    let dir = common::temp_dir("cli-ok");
    let p = write(&dir, "ok.gguf", &tiny());
    let out = common::locus(&greedy_run(&p, "5"));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("decode"));
}

#[test]
fn missing_file_and_not_gguf() {
    let dir = common::temp_dir("cli-missing");
    let e = run_fails(&dir.join("nope.gguf"), &[]);
    assert!(e.contains("nope.gguf") && e.contains("cannot open"), "{e}");
    let txt = dir.join("notes.txt");
    std::fs::write(&txt, "just some text, not a model\n").unwrap();
    let e = run_fails(&txt, &[]);
    assert!(e.contains("not a GGUF file"), "{e}");
    let e = run_fails(&dir, &[]);
    assert!(e.contains("directory"), "{e}");
    let empty = dir.join("empty.gguf");
    std::fs::write(&empty, b"").unwrap();
    let e = run_fails(&empty, &[]);
    assert!(e.contains("truncated"), "{e}");
}

#[test]
fn truncation_at_many_points() {
    let dir = common::temp_dir("cli-trunc");
    let bytes = tiny().to_bytes();
    let p = dir.join("cut.gguf");
    let n = bytes.len();
    for cut in [
        3,
        4,
        8,
        16,
        23,
        24,
        40,
        100,
        1000,
        4000,
        n / 3,
        n / 2,
        n - 100,
        n - 1,
    ] {
        std::fs::write(&p, &bytes[..cut]).unwrap();
        let e = run_fails(&p, &[]);
        assert!(
            e.contains("truncated")
                || e.contains("beyond the end")
                || e.contains("larger than the file"),
            "cut at {cut}: {e}"
        );
    }
}

#[test]
fn tensor_data_beyond_end_of_file() {
    let dir = common::temp_dir("cli-beyond");
    let mut bytes = tiny().to_bytes();
    bytes.truncate(bytes.len() - 64);
    let p = dir.join("short.gguf");
    std::fs::write(&p, &bytes).unwrap();
    let e = run_fails(&p, &[]);
    assert!(e.contains("beyond the end of the file"), "{e}");
}

#[test]
fn unsupported_type_unknown_arch_missing_tensor_wrong_shape() {
    let dir = common::temp_dir("cli-model");
    // A weight in TQ1_0 (256-element blocks of 54 bytes): known to ggml, not computed here;
    // refused by name, with the list of the types locus computes.
    let spec = SynthSpec {
        n_embd: 256,
        n_ff: 256,
        ..SynthSpec::tiny(GgmlType::Q8_0)
    };
    let mut w = synth_model(&spec);
    let t = w
        .tensors
        .iter_mut()
        .find(|t| t.name == "blk.0.ffn_down.weight")
        .unwrap();
    t.ty = GgmlType::Tq1_0;
    t.data = vec![0; 256 * 54];
    let e = run_fails(&write(&dir, "tq1_0.gguf", &w), &[]);
    assert!(e.contains("TQ1_0") && e.contains("blk."), "{e}");
    assert!(
        e.contains(&GgmlType::supported_names()) && e.contains("Q4_K, Q5_K, Q6_K"),
        "{e}"
    );

    let mut w = tiny();
    w.set("general.architecture", MetaValue::str("mamba"));
    let e = run_fails(&write(&dir, "arch.gguf", &w), &[]);
    assert!(e.contains("'mamba'") && e.contains("not supported"), "{e}");
    assert!(
        e.contains("llama, qwen2, qwen3, gemma3"),
        "the supported list: {e}"
    );

    // A tensor the family would not read (Qwen3's head norm in a llama file): refused by name,
    // as llama.cpp refuses it, instead of running without its arithmetic.
    let mut w = tiny();
    w.add_tensor(
        "blk.0.attn_q_norm.weight",
        &[16],
        GgmlType::F32,
        vec![0; 16 * 4],
    );
    let e = run_fails(&write(&dir, "extra.gguf", &w), &[]);
    assert!(
        e.contains("blk.0.attn_q_norm.weight") && e.contains("llama"),
        "{e}"
    );

    // A family's required tensor missing: Gemma 3 without its post-FFN norm.
    let spec = SynthSpec {
        arch: locus::model::arch::Arch::Gemma3,
        ..SynthSpec::tiny(GgmlType::Q8_0)
    };
    let mut w = synth_model(&spec);
    w.tensors.retain(|t| t.name != "blk.1.post_ffw_norm.weight");
    let e = run_fails(&write(&dir, "gemma-missing.gguf", &w), &[]);
    assert!(
        e.contains("blk.1.post_ffw_norm.weight") && e.contains("missing"),
        "{e}"
    );

    let mut w = tiny();
    w.tensors.retain(|t| t.name != "blk.1.ffn_up.weight");
    let e = run_fails(&write(&dir, "missing.gguf", &w), &[]);
    assert!(
        e.contains("blk.1.ffn_up.weight") && e.contains("missing"),
        "{e}"
    );

    let mut w = tiny();
    let t = w
        .tensors
        .iter_mut()
        .find(|t| t.name == "blk.0.attn_q.weight")
        .unwrap();
    t.dims = vec![64, 32];
    t.data.truncate(32 * 2 * 34);
    let e = run_fails(&write(&dir, "shape.gguf", &w), &[]);
    assert!(
        e.contains("blk.0.attn_q.weight") && e.contains("shape"),
        "{e}"
    );

    let mut w = tiny();
    w.metadata.retain(|(k, _)| k != "llama.block_count");
    let e = run_fails(&write(&dir, "nokey.gguf", &w), &[]);
    assert!(e.contains("llama.block_count"), "{e}");
}

/// A small Qwen3-MoE model (8 experts of width 64, 2 per token) as a GGUF image.
fn tiny_moe() -> GgufWriter {
    synth_model(&SynthSpec {
        arch: locus::model::arch::Arch::Qwen3Moe,
        n_expert: 8,
        n_expert_used: 2,
        n_ff_exp: 64,
        ..SynthSpec::tiny(GgmlType::Q8_0)
    })
}

#[test]
fn bad_experts_are_one_line_errors() {
    let dir = common::temp_dir("cli-moe");
    // The model itself runs.
    let ok = write(&dir, "ok.gguf", &tiny_moe());
    assert!(common::locus(&greedy_run(&ok, "2")).status.success());
    let key = |w: &mut GgufWriter, k: &str, v: MetaValue| w.set(&format!("qwen3moe.{k}"), v);
    // (what is changed, what the one error line must name)
    type Change<'a> = Box<dyn Fn(&mut GgufWriter) + 'a>;
    let cases: [(&str, Change, &[&str]); 6] = [
        (
            "no experts",
            Box::new(|w| key(w, "expert_count", MetaValue::U32(0))),
            &["qwen3moe.expert_count", "0"],
        ),
        (
            "more used than there are",
            Box::new(|w| key(w, "expert_used_count", MetaValue::U32(9))),
            &["qwen3moe.expert_used_count", "9", "8"],
        ),
        (
            "none used",
            Box::new(|w| key(w, "expert_used_count", MetaValue::U32(0))),
            &["qwen3moe.expert_used_count", "between 1"],
        ),
        (
            "more experts than llama.cpp allows",
            Box::new(|w| key(w, "expert_count", MetaValue::U32(5000))),
            &["qwen3moe.expert_count", "5000", "1024"],
        ),
        (
            "more experts than the tensors hold",
            Box::new(|w| key(w, "expert_count", MetaValue::U32(16))),
            &["blk.0.ffn_gate_inp.weight", "shape"],
        ),
        (
            "an expert tensor of another width",
            Box::new(|w| {
                let t = w
                    .tensors
                    .iter_mut()
                    .find(|t| t.name == "blk.1.ffn_up_exps.weight")
                    .unwrap();
                t.dims = vec![64, 32, 8];
                t.data.truncate(t.data.len() / 2);
            }),
            &["blk.1.ffn_up_exps.weight", "shape"],
        ),
    ];
    for (what, change, names) in cases {
        let mut w = tiny_moe();
        change(&mut w);
        let e = run_fails(&write(&dir, "bad.gguf", &w), &[]);
        assert_eq!(e.trim().lines().count(), 1, "{what}: one line: {e}");
        for n in names {
            assert!(e.contains(n), "{what}: the error names {n}: {e}");
        }
    }
}

#[test]
fn bad_latent_attention_is_one_line_errors() {
    let dir = common::temp_dir("cli-mla");
    let tiny_latent = || synth_model(&SynthSpec::tiny_latent(GgmlType::Q8_0));
    // The model itself runs.
    let ok = write(&dir, "ok.gguf", &tiny_latent());
    let out = common::locus(&greedy_run(&ok, "2"));
    assert!(out.status.success(), "{out:?}");
    let key = |w: &mut GgufWriter, k: &str, v: MetaValue| w.set(&format!("deepseek2.{k}"), v);
    type Change<'a> = Box<dyn Fn(&mut GgufWriter) + 'a>;
    let cases: [(&str, Change, &[&str]); 7] = [
        (
            "a latent rank the cache's width does not match",
            Box::new(|w| key(w, "attention.kv_lora_rank", MetaValue::U32(32))),
            &["deepseek2.attention.key_length", "kv_lora_rank", "32"],
        ),
        (
            "a value length other than the rank",
            Box::new(|w| key(w, "attention.value_length", MetaValue::U32(48))),
            &["deepseek2.attention.value_length", "48", "64"],
        ),
        (
            "several latent heads",
            Box::new(|w| key(w, "attention.head_count_kv", MetaValue::U32(2))),
            &["deepseek2.attention.head_count_kv", "2"],
        ),
        (
            "one of the two MLA head sizes",
            Box::new(|w| {
                w.metadata
                    .retain(|(k, _)| k != "deepseek2.attention.key_length_mla")
            }),
            &["deepseek2.attention.key_length_mla", "value_length_mla"],
        ),
        (
            "no rank at all",
            Box::new(|w| {
                w.metadata
                    .retain(|(k, _)| k != "deepseek2.attention.kv_lora_rank")
            }),
            &["deepseek2.attention.kv_lora_rank", "missing"],
        ),
        (
            "a missing latent projection",
            Box::new(|w| w.tensors.retain(|t| t.name != "blk.1.attn_kv_a_mqa.weight")),
            &["blk.1.attn_kv_a_mqa.weight", "missing"],
        ),
        (
            "a per-head tensor for fewer heads",
            Box::new(|w| {
                let t = w
                    .tensors
                    .iter_mut()
                    .find(|t| t.name == "blk.0.attn_k_b.weight")
                    .unwrap();
                t.dims = vec![32, 64, 2];
                t.data.truncate(t.data.len() / 2);
            }),
            &["blk.0.attn_k_b.weight", "shape"],
        ),
    ];
    let check = |cases: Vec<(&str, Change, &[&str])>, base: &dyn Fn() -> GgufWriter| {
        for (what, change, names) in cases {
            let mut w = base();
            change(&mut w);
            let e = run_fails(&write(&dir, "bad.gguf", &w), &[]);
            assert_eq!(e.trim().lines().count(), 1, "{what}: one line: {e}");
            for n in names {
                assert!(e.contains(n), "{what}: the error names {n}: {e}");
            }
        }
    };
    check(cases.into_iter().collect(), &tiny_latent);
    // The older unabsorbed form runs too, and its own mistakes are named.
    let unabsorbed = || {
        let mut spec = SynthSpec::tiny_latent(GgmlType::Q8_0);
        spec.mla.unabsorbed = true;
        synth_model(&spec)
    };
    let ok = write(&dir, "ok-unabsorbed.gguf", &unabsorbed());
    let out = common::locus(&greedy_run(&ok, "2"));
    assert!(out.status.success(), "{out:?}");
    let unabsorbed_cases: Vec<(&str, Change, &[&str])> = vec![
        (
            "no attn_kv_b",
            Box::new(|w| w.tensors.retain(|t| t.name != "blk.1.attn_kv_b.weight")),
            &["blk.1.attn_kv_b.weight", "missing"],
        ),
        (
            "one KV head for the per-head cache",
            Box::new(|w| key(w, "attention.head_count_kv", MetaValue::U32(1))),
            &["deepseek2.attention.head_count_kv", "attn_kv_b"],
        ),
        (
            "no value length",
            Box::new(|w| {
                w.metadata
                    .retain(|(k, _)| k != "deepseek2.attention.value_length")
            }),
            &["deepseek2.attention.value_length", "missing"],
        ),
    ];
    check(unabsorbed_cases, &unabsorbed);
}

#[test]
fn bad_latent_expert_groups_are_one_line_errors() {
    let dir = common::temp_dir("cli-mla-groups");
    // DeepSeek-V3's routing at a tiny size: 8 experts in 4 groups of which 2 hold a token's 2.
    let tiny = || {
        synth_model(&SynthSpec {
            n_expert: 8,
            n_expert_used: 2,
            n_ff_exp: 32,
            moe: locus::model::synth::SynthMoe {
                n_shared: 1,
                groups: 4,
                groups_used: 2,
                gating: Some(locus::model::arch::Gating::Sigmoid),
                probs_bias: true,
                ..Default::default()
            },
            ..SynthSpec::tiny_latent(GgmlType::Q8_0)
        })
    };
    let ok = write(&dir, "ok.gguf", &tiny());
    let out = common::locus(&greedy_run(&ok, "2"));
    assert!(out.status.success(), "{out:?}");
    let key =
        |w: &mut GgufWriter, k: &str, v: u32| w.set(&format!("deepseek2.{k}"), MetaValue::U32(v));
    let cases: [(&str, &str, u32, &[&str]); 2] = [
        (
            "groups that do not divide the experts",
            "expert_group_count",
            3,
            &["deepseek2.expert_group_count", "3"],
        ),
        (
            "more used groups than groups",
            "expert_group_used_count",
            5,
            &["deepseek2.expert_group_used_count", "5"],
        ),
    ];
    for (what, k, v, names) in cases {
        let mut w = tiny();
        key(&mut w, k, v);
        let e = run_fails(&write(&dir, "bad.gguf", &w), &[]);
        assert_eq!(e.trim().lines().count(), 1, "{what}: one line: {e}");
        for n in names {
            assert!(e.contains(n), "{what}: the error names {n}: {e}");
        }
    }
}

#[test]
fn prompt_longer_than_context() {
    let dir = common::temp_dir("cli-ctx");
    let p = write(&dir, "ok.gguf", &tiny());
    let e = run_fails(&p, &["-c", "4"]);
    assert!(e.contains("prompt is") && e.contains("-c"), "{e}");
}

#[test]
fn bad_flags_and_values_name_the_flag() {
    let e = fails(&["run", "--bogus"]);
    assert!(e.contains("--bogus"), "{e}");
    let e = fails(&["run", "-m", "x.gguf", "-p", "hi", "-n", "many"]);
    assert!(e.contains("-n") && e.contains("many"), "{e}");
    let e = fails(&["run", "-m", "x.gguf", "-p", "hi", "-t", "0"]);
    assert!(e.contains("-t"), "{e}");
    let e = fails(&["run", "-m", "x.gguf", "-p", "hi", "--top-p", "2"]);
    assert!(e.contains("--top-p"), "{e}");
    let e = fails(&["run", "-p", "hi"]);
    assert!(e.contains("-m"), "{e}");
    let e = fails(&["frobnicate"]);
    assert!(e.contains("frobnicate"), "{e}");
    let e = fails(&["perplexity", "-m", "x.gguf"]);
    assert!(e.contains("-f"), "{e}");
    let e = fails(&["quantize", "a", "b", "Q9_9"]);
    assert!(e.contains("Q9_9"), "{e}");
    // Options of llama-quantize's that are checked before any file is read.
    let e = fails(&[
        "quantize",
        "--tensor-type",
        "attn_(q=q8_0",
        "a",
        "b",
        "Q4_0",
    ]);
    assert!(
        e.contains("--tensor-type") && e.contains("attn_(q") && e.contains("not closed"),
        "{e}"
    );
    let e = fails(&["quantize", "--tensor-type", "attn_q", "a", "b", "Q4_0"]);
    assert!(e.contains("malformed"), "{e}");
    let e = fails(&["quantize", "--tensor-type", "=q8_0", "a", "b", "Q4_0"]);
    assert!(e.contains("missing tensor name"), "{e}");
    let e = fails(&["quantize", "--output-tensor-type", "q9_k", "a", "b", "Q4_0"]);
    assert!(e.contains("invalid ggml_type 'q9_k'"), "{e}");
    let e = fails(&[
        "quantize",
        "--include-weights",
        "a",
        "--exclude-weights",
        "b",
        "a",
        "b",
        "Q4_0",
    ]);
    assert!(e.contains("cannot be used together"), "{e}");
    let e = fails(&[
        "quantize",
        "--imatrix",
        "/nonexistent/m.dat",
        "a",
        "b",
        "IQ2_XS",
    ]);
    assert!(
        e.contains("/nonexistent/m.dat") && e.contains("importance matrix"),
        "{e}"
    );
}

/// The flags a command's `--help` documents: on each indented line that starts with a dash,
/// the first word of every comma-separated item of the flag column (before the first run of
/// two spaces): `  -m, --model FILE  …` gives `-m` and `--model`, `  --pin node|core, --strict`
/// gives `--pin` and `--strict`. Whole words, so `-m` is not found inside `--model`.
fn documented_flags(help: &str) -> Vec<String> {
    let mut flags = Vec::new();
    for line in help.lines() {
        let body = line.trim_start();
        if body.len() == line.len() || !body.starts_with('-') {
            continue;
        }
        let column = body.split("  ").next().unwrap_or("");
        for item in column.split(", ") {
            if let Some(w) = item
                .split_whitespace()
                .next()
                .filter(|w| w.starts_with('-'))
            {
                flags.push(w.to_string());
            }
        }
    }
    flags
}

fn help_of(cmd: &str) -> String {
    let out = common::locus(&[cmd, "--help"]);
    assert!(out.status.success(), "{cmd} --help");
    String::from_utf8(out.stdout).unwrap()
}

/// `run --help` names every llama.cpp flag locus takes, each as a whole word (not as a piece
/// of a longer flag), and every flag any command's help names is one its parser accepts.
#[test]
fn help_describes_every_flag() {
    let run = documented_flags(&help_of("run"));
    for flag in [
        "-m",
        "-p",
        "-f",
        "-n",
        "-t",
        "-c",
        "-s",
        "-ctk",
        "-ctv",
        "--model",
        "--prompt",
        "--file",
        "--n-predict",
        "--threads",
        "--ctx-size",
        "--temp",
        "--top-k",
        "--top-p",
        "--min-p",
        "--repeat-penalty",
        "--repeat-last-n",
        "--seed",
        "--chat",
        "--system",
        "--numa",
        "-h",
        "--help",
    ] {
        assert!(
            run.iter().any(|f| f == flag),
            "run --help lacks {flag}: {run:?}"
        );
    }
    for cmd in [
        "run",
        "serve",
        "perplexity",
        "imatrix",
        "tokenize",
        "quantize",
        "gen-model",
        "bench",
        "membw",
        "topo",
        "audit",
    ] {
        let flags = documented_flags(&help_of(cmd));
        assert!(flags.iter().any(|f| f == "--help"), "{cmd}: {flags:?}");
        for flag in &flags {
            // Without its value (or its other arguments) the command fails, but not with
            // "unknown option": the parser knows the flag.
            let out = common::locus(&[cmd, flag]);
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(
                !err.contains("unknown option") && !err.contains("panicked"),
                "{cmd} --help documents {flag}, which the parser refuses: {err}"
            );
        }
    }
    let out = common::locus(&["--help"]);
    assert!(out.status.success());
    let main = String::from_utf8(out.stdout).unwrap();
    for cmd in [
        "run",
        "serve",
        "perplexity",
        "imatrix",
        "tokenize",
        "quantize",
        "gen-model",
    ] {
        assert!(
            main.lines()
                .any(|l| l.split_whitespace().next() == Some(cmd)),
            "locus --help lacks the command {cmd}"
        );
    }
}

/// Truncations of the real SmolLM2 file: every cut gives one line and exit 2. Cuts are spread
/// over the header (vocabulary, merges, tensor table) and a few land in the tensor data.
#[test]
fn truncations_of_the_real_model() {
    let Some(src) = common::model_path("SmolLM2-135M-Instruct.Q4_1.gguf") else {
        return;
    };
    let bytes = std::fs::read(&src).unwrap();
    let header_end = locus::model::gguf::Gguf::parse(&bytes).unwrap().data_offset as usize;
    let dir = common::temp_dir("cli-real-trunc");
    let p = dir.join("cut.gguf");
    let mut cuts: Vec<usize> = (0..24).map(|i| 1 + i * (header_end - 1) / 24).collect();
    cuts.extend([
        header_end,
        header_end + 1,
        header_end + 4096,
        bytes.len() / 2,
        bytes.len() - 1,
    ]);
    for cut in cuts {
        std::fs::write(&p, &bytes[..cut]).unwrap();
        let e = run_fails(&p, &[]);
        assert!(
            e.contains("truncated")
                || e.contains("beyond the end")
                || e.contains("larger than the file"),
            "cut at {cut}: {e}"
        );
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn bad_environment_values_name_the_variable() {
    let dir = common::temp_dir("cli-env");
    let p = write(&dir, "ok.gguf", &tiny());
    let run = |var: &str, value: &str| {
        std::process::Command::new(env!("CARGO_BIN_EXE_locus"))
            .args(greedy_run(&p, "2"))
            .env(var, value)
            .output()
            .expect("cannot start locus")
    };
    for (var, bad) in [("LOCUS_PREFETCH", "l9"), ("LOCUS_KERNELS", "avx9")] {
        let out = run(var, bad);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{var}={bad}: {stderr}");
        assert!(
            stderr.starts_with("locus: error: ") && stderr.contains(var) && stderr.contains(bad),
            "{var}={bad}: {stderr}"
        );
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
    for target in ["l1", "L2"] {
        let out = run("LOCUS_PREFETCH", target);
        assert!(
            out.status.success(),
            "LOCUS_PREFETCH={target}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// A small gpt-oss model (4 experts of width 64, 2 per token, a window of 8, YaRN by 4) as a
/// GGUF image.
fn tiny_gpt_oss() -> GgufWriter {
    synth_model(&SynthSpec {
        arch: locus::model::arch::Arch::GptOss,
        n_expert: 4,
        n_expert_used: 2,
        n_ff_exp: 64,
        sliding_window: 8,
        mla: locus::model::synth::SynthMla {
            yarn_factor: 4.0,
            ..Default::default()
        },
        ..SynthSpec::tiny(GgmlType::Q8_0)
    })
}

#[test]
fn bad_gpt_oss_files_are_one_line_errors() {
    let dir = common::temp_dir("cli-gpt-oss");
    // The model itself runs.
    let ok = write(&dir, "ok.gguf", &tiny_gpt_oss());
    assert!(common::locus(&greedy_run(&ok, "2")).status.success());
    let resize = |w: &mut GgufWriter, name: &str, dims: Vec<u64>| {
        let t = w.tensors.iter_mut().find(|t| t.name == name).unwrap();
        t.data = vec![0; dims.iter().product::<u64>() as usize * 4];
        t.dims = dims;
    };
    type Change<'a> = Box<dyn Fn(&mut GgufWriter) + 'a>;
    let cases: [(&str, Change, &[&str]); 6] = [
        (
            "a sink per head and one more",
            Box::new(|w| resize(w, "blk.0.attn_sinks.weight", vec![5])),
            &["blk.0.attn_sinks.weight", "shape"],
        ),
        (
            "no sinks",
            Box::new(|w| w.tensors.retain(|t| t.name != "blk.1.attn_sinks.weight")),
            &["blk.1.attn_sinks.weight", "missing"],
        ),
        (
            "a window of 0",
            Box::new(|w| w.set("gpt-oss.attention.sliding_window", MetaValue::U32(0))),
            &["gpt-oss.attention.sliding_window", "0"],
        ),
        (
            "no window",
            Box::new(|w| {
                w.metadata
                    .retain(|(k, _)| k != "gpt-oss.attention.sliding_window")
            }),
            &["gpt-oss.attention.sliding_window"],
        ),
        (
            "expert biases for another width",
            Box::new(|w| resize(w, "blk.0.ffn_up_exps.bias", vec![32, 4])),
            &["blk.0.ffn_up_exps.bias", "shape"],
        ),
        (
            "no router bias",
            Box::new(|w| w.tensors.retain(|t| t.name != "blk.1.ffn_gate_inp.bias")),
            &["blk.1.ffn_gate_inp.bias", "missing"],
        ),
    ];
    for (what, change, names) in cases {
        let mut w = tiny_gpt_oss();
        change(&mut w);
        let e = run_fails(&write(&dir, "bad.gguf", &w), &[]);
        for n in names {
            assert!(e.contains(n), "{what}: the error names {n}: {e}");
        }
    }
}

/// A small Gemma 4 E2B/E4B-shaped model: 6 layers (0, 2, 4 sliding-window), per-layer
/// embeddings of 32, the last 2 layers shared-KV with a double-wide FFN.
fn tiny_gemma4_e() -> GgufWriter {
    synth_model(&SynthSpec {
        arch: locus::model::arch::Arch::Gemma4,
        n_layer: 6,
        n_head: 4,
        n_head_kv: 2,
        head_dim: 16,
        sliding_window: 8,
        swa_pattern: 2,
        g4: locus::model::synth::SynthGemma4 {
            head_dim: 32,
            n_head_kv: 1,
            n_rot: 8,
            ple: 32,
            shared_kv: 2,
            double_wide: true,
            ..Default::default()
        },
        ..SynthSpec::tiny(GgmlType::Q8_0)
    })
}

#[test]
fn bad_gemma4_e_variant_files_are_one_line_errors() {
    let dir = common::temp_dir("cli-gemma4e");
    // The model itself runs.
    let ok = write(&dir, "ok.gguf", &tiny_gemma4_e());
    let out = common::locus(&greedy_run(&ok, "2"));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let resize = |w: &mut GgufWriter, name: &str, dims: Vec<u64>| {
        let t = w.tensors.iter_mut().find(|t| t.name == name).unwrap();
        t.ty = GgmlType::F32;
        t.data = vec![0; dims.iter().product::<u64>() as usize * 4];
        t.dims = dims;
    };
    let shared = |n: u32| {
        move |w: &mut GgufWriter| w.set("gemma4.attention.shared_kv_layers", MetaValue::U32(n))
    };
    type Change<'a> = Box<dyn Fn(&mut GgufWriter) + 'a>;
    let vocab = SynthSpec::tiny(GgmlType::Q8_0).n_vocab as u64;
    let cases: [(&str, Change, &[&str]); 6] = [
        (
            "a per-layer table for 5 of the 6 layers",
            Box::new(move |w| resize(w, "per_layer_token_embd.weight", vec![32 * 5, vocab])),
            &["per_layer_token_embd.weight", "shape"],
        ),
        (
            "no per-layer projection",
            Box::new(|w| {
                w.tensors
                    .retain(|t| t.name != "per_layer_model_proj.weight")
            }),
            &["per_layer_model_proj.weight", "missing"],
        ),
        (
            "a layer without its per-layer gate",
            Box::new(|w| w.tensors.retain(|t| t.name != "blk.3.inp_gate.weight")),
            &["blk.3.inp_gate.weight", "missing"],
        ),
        (
            "every layer shared",
            Box::new(shared(6)),
            &["gemma4.attention.shared_kv_layers", "fewer than 2"],
        ),
        (
            "more shared layers than layers",
            Box::new(shared(7)),
            &["gemma4.attention.shared_kv_layers", "fewer than 2"],
        ),
        (
            "a global reader of a sliding-window cache",
            Box::new(shared(3)),
            &["gemma4.attention.shared_kv_layers", "shared layer 3"],
        ),
    ];
    for (what, change, names) in cases {
        let mut w = tiny_gemma4_e();
        change(&mut w);
        let e = run_fails(&write(&dir, "bad.gguf", &w), &[]);
        for n in names {
            assert!(e.contains(n), "{what}: the error names {n}: {e}");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
