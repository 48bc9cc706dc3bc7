//! `locus imatrix` writes the file llama-imatrix writes, byte for byte (whole files, compared by
//! sha256 with llama-imatrix's own outputs: tests/data/imatrix/imatrix_cmd.sha256 and the
//! commands in tests/data/imatrix/README.md): a dense and a mixture-of-experts generated model,
//! with several chunks side by side (micro-batches of runs of every sequence) and one at a time,
//! SmolLM2 and Gemma 3 (sliding-window layers). Bad input is one error line and exit code 2.

mod common;
#[path = "common/sha256.rs"]
mod sha256;

use std::path::{Path, PathBuf};
use std::process::Output;

use locus::model::imatrix::Imatrix;
use sha256::sha256_hex;

const SUMS_FILE: &str = "tests/data/imatrix/imatrix_cmd.sha256";

/// The folder the commands run in (the files record the dataset `calib.txt`, as given).
fn data_dir() -> PathBuf {
    common::repo_path("tests/data/imatrix")
}

/// The sha256 recorded for `name`.
fn expected(name: &str) -> String {
    let text = std::fs::read_to_string(common::repo_path(SUMS_FILE)).expect("the sums file");
    text.lines()
        .find_map(|l| {
            let (sum, file) = l.split_once("  ")?;
            (file == name).then(|| sum.to_string())
        })
        .unwrap_or_else(|| panic!("{name} is not in {SUMS_FILE}"))
}

fn sha_of(path: &Path) -> String {
    sha256_hex(&std::fs::read(path).unwrap())
}

/// Runs `locus` in the data folder.
fn locus_in_data(args: &[&str]) -> Output {
    common::locus_cmd()
        .current_dir(data_dir())
        .args(args)
        .output()
        .expect("cannot start locus")
}

/// Runs `locus imatrix` on `model` with `args` into `out` (in the data folder) and checks the
/// file is llama-imatrix's, and that locus's own reader takes it.
fn check_imatrix(model: &Path, args: &[&str], out: &Path, golden: &str) {
    let (m, o) = (model.to_str().unwrap(), out.to_str().unwrap());
    let mut full = vec!["imatrix", "-m", m, "-f", "calib.txt", "-o", o];
    full.extend_from_slice(args);
    let run = locus_in_data(&full);
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "locus imatrix {args:?}: {err}");
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(
        stdout.starts_with("Final estimate: PPL = ") || args.contains(&"--no-ppl"),
        "{stdout}"
    );
    assert_eq!(
        sha_of(out),
        expected(golden),
        "{golden}: not llama-imatrix's bytes"
    );
    let read = Imatrix::load(out).expect("locus reads what it wrote");
    assert_eq!(read.datasets, vec!["calib.txt".to_string()]);
    assert!(!read.entries.is_empty());
}

/// A generated model, checked to be the one llama-imatrix was run on.
fn gen_model(dir: &Path, name: &str, args: &[&str]) -> PathBuf {
    let path = dir.join(name);
    let mut full = vec!["gen-model", path.to_str().unwrap()];
    full.extend_from_slice(args);
    let out = common::locus(&full);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        sha_of(&path),
        expected(name),
        "gen-model no longer writes the model the golden files were made from"
    );
    path
}

const SHAPE: [&str; 14] = [
    "--type",
    "Q8_0",
    "--dim",
    "256",
    "--ffn",
    "512",
    "--layers",
    "2",
    "--heads",
    "4",
    "--kv-heads",
    "1",
    "--vocab",
    "512",
];

#[test]
fn dense_and_moe_generated_models_match_llama_imatrix() {
    let dir = common::temp_dir("imatrix-gen");
    let mut dense_args = SHAPE.to_vec();
    dense_args.extend(["--untied", "--seed", "7"]);
    let dense = gen_model(&dir, "dense-q8.gguf", &dense_args);
    let mut moe_args = vec!["--arch", "qwen3moe"];
    moe_args.extend(SHAPE);
    moe_args.extend(["--experts", "4", "--experts-used", "2", "--seed", "7"]);
    let moe = gen_model(&dir, "moe-q8.gguf", &moe_args);
    let c6 = ["-c", "128", "--chunks", "6", "-t", "2", "--process-output"];
    check_imatrix(&dense, &c6, &dir.join("d.gguf"), "dense-q8.c128.gguf");
    check_imatrix(&moe, &c6, &dir.join("m.gguf"), "moe-q8.c128.gguf");
    let one_at_a_time = ["-c", "128", "--chunks", "3", "-b", "128", "-t", "2"];
    check_imatrix(
        &moe,
        &one_at_a_time,
        &dir.join("m1.gguf"),
        "moe-q8.c128.b128.gguf",
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn smollm2_and_gemma3_match_llama_imatrix() {
    let dir = common::temp_dir("imatrix-real");
    let c6 = ["-c", "128", "--chunks", "6", "-t", "2"];
    if let Some(m) = common::model_path("SmolLM2-135M-Instruct.Q8_0.gguf") {
        check_imatrix(&m, &c6, &dir.join("s.gguf"), "smollm2-q8.c128.gguf");
    }
    if let Some(m) = common::model_path("gemma-3-270m-q4_k_m.gguf") {
        check_imatrix(&m, &c6, &dir.join("g.gguf"), "gemma3-q4km.c128.gguf");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_input_is_one_error_line() {
    let dir = common::temp_dir("imatrix-bad");
    let model = common::write_synth("imatrix-bad-model", 3, [256, 64, 1, 128, 2, 1]);
    let m = model.to_str().unwrap();
    let out = dir.join("o.gguf");
    let o = out.to_str().unwrap();
    let missing = dir.join("no-such.txt");
    let short = dir.join("short.txt");
    std::fs::write(&short, "a few words, far fewer than two chunks of tokens").unwrap();
    let cases: [(&str, Vec<&str>, &str); 5] = [
        (
            "missing text",
            vec!["imatrix", "-m", m, "-f", missing.to_str().unwrap(), "-o", o],
            "no-such.txt",
        ),
        (
            "missing model",
            vec![
                "imatrix",
                "-m",
                "/nonexistent/m.gguf",
                "-f",
                short.to_str().unwrap(),
            ],
            "m.gguf",
        ),
        (
            "text shorter than two chunks",
            vec![
                "imatrix",
                "-m",
                m,
                "-f",
                short.to_str().unwrap(),
                "-c",
                "64",
                "-o",
                o,
            ],
            "needs at least 128",
        ),
        ("no text", vec!["imatrix", "-m", m], "-f FILE is required"),
        (
            "chunk of one token",
            vec!["imatrix", "-m", m, "-f", short.to_str().unwrap(), "-c", "1"],
            "-c",
        ),
    ];
    for (what, args, says) in cases {
        let line = common::one_error_line(&common::locus(&args), what);
        assert!(line.contains(says), "{what}: {line}");
    }
    assert!(!out.exists(), "no file is written on an error");
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(model.parent().unwrap());
}
