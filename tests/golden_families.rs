//! Qwen2, Qwen3 and Gemma 3 through the architecture seam: for a small `locus gen-model` model
//! of each family in F32, Q8_0 and Q4_0, the full logits after two prompts equal llama.cpp's
//! (`-fa off`) bit for bit, and the greedy continuations of every golden prompt match for 32
//! steps. The Gemma 3 model has a 16-token sliding window on every other layer (the rest are
//! global), and its prompts are checked to run past the window, so the local layers' masking
//! is exercised. Commands in tests/data/golden/README.md ("Families").

mod common;
#[path = "common/golden.rs"]
mod golden;

use std::time::Instant;

use locus::app::Loaded;
use locus::model::forward::KvType;
use locus::model::ModelFile;
use locus::pool::Pool;

/// `locus gen-model` shape shared by every family's model.
const SHAPE: [&str; 15] = [
    "--dim",
    "256",
    "--layers",
    "4",
    "--ffn",
    "512",
    "--heads",
    "4",
    "--kv-heads",
    "2",
    "--vocab",
    "1001",
    "--untied",
    "--seed",
    "11",
];

/// Gemma 3's sliding window in the test model.
const WINDOW: usize = 16;

/// (family, its extra `gen-model` arguments).
const FAMILIES: [(&str, &[&str]); 3] = [
    ("qwen2", &[]),
    ("qwen3", &["--head-dim", "128"]),
    (
        "gemma3",
        &["--head-dim", "128", "--window", "16", "--swa-pattern", "2"],
    ),
];

/// (family, type, FNV-1a of the model file): the golden data describe exactly these files.
const MODELS: [(&str, &str, u64); 9] = [
    ("qwen2", "F32", 0xc4406c1fb93e8c4),
    ("qwen2", "Q8_0", 0xc3b89a8aed1d3ec2),
    ("qwen2", "Q4_0", 0xcde6fdc658c3229),
    ("qwen3", "F32", 0x192acaba97284673),
    ("qwen3", "Q8_0", 0x62bc0cd362862),
    ("qwen3", "Q4_0", 0x5be45c12d17fd1a0),
    ("gemma3", "F32", 0x95f07ded6c2527ab),
    ("gemma3", "Q8_0", 0x7fafb1c9e192875c),
    ("gemma3", "Q4_0", 0x56bdeec23e91a42b),
];

/// The prompts whose full logits were recorded (of tests/data/golden/prompts).
const LOGIT_PROMPTS: [(usize, &str); 2] = [(1, "01.txt"), (9, "09.txt")];

/// Greedy steps compared per prompt.
const STEPS: usize = 32;

fn golden_logits(tag: &str, idx: usize) -> Vec<f32> {
    let gz = common::repo_path(&format!("tests/data/golden/logits_{tag}_p{idx:02}.txt.gz"));
    assert!(gz.exists(), "golden logits {} are missing", gz.display());
    let out = std::process::Command::new("gzip")
        .arg("-dc")
        .arg(&gz)
        .output()
        .expect("gzip is needed to read the golden logits");
    assert!(out.status.success(), "gzip -dc {}", gz.display());
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|v| v.parse().unwrap())
        .collect()
}

fn check(arch: &str, ty: &str, want_fnv: u64, extra: &[&str]) -> Vec<String> {
    let tag = format!("fam_{arch}_{ty}");
    let cases = golden::read_greedy(&common::skip::golden_file(&format!("greedy_{tag}.txt")));
    let dir = common::temp_dir(&format!("golden-{tag}"));
    let path = dir.join(format!("{tag}.gguf"));
    let mut args = vec![
        "gen-model",
        path.to_str().unwrap(),
        "--arch",
        arch,
        "--type",
        ty,
    ];
    args.extend(SHAPE);
    args.extend(extra);
    let out = common::locus(&args);
    assert!(out.status.success(), "gen-model {tag}: {out:?}");
    let fnv = common::fnv(&std::fs::read(&path).unwrap());
    assert_eq!(
        fnv, want_fnv,
        "{tag}: gen-model's output changed (FNV {fnv:#x}); the golden data describe another model"
    );
    let file = ModelFile::open(&path).unwrap();
    let l = Loaded::load(&file, Instant::now()).unwrap();
    assert_eq!(l.llama.config.arch.name(), arch);
    let pool = Pool::new(2, |_| {});
    let mut failures = Vec::new();
    let mut past_window = 0;
    for case in &cases {
        let ids = l.tokenizer.encode(&case.prompt, true, true);
        assert_eq!(
            ids, case.prompt_ids,
            "{tag} {}: tokenization differs",
            case.name
        );
        past_window += usize::from(ids.len() + STEPS > WINDOW);
        let mut s = l.llama.new_state(2048, pool.threads(), KvType::F16);
        let mut logits = Vec::new();
        l.llama.eval(&pool, &mut s, &ids, ids.len() - 1, |_, lg| {
            logits = lg.to_vec()
        });
        if let Some(&(idx, _)) = LOGIT_PROMPTS.iter().find(|(_, n)| *n == case.name) {
            let want = golden_logits(&tag, idx);
            assert_eq!(logits.len(), want.len(), "{tag}: vocabulary size");
            let differing = logits
                .iter()
                .zip(&want)
                .filter(|(a, b)| a.to_bits() != b.to_bits())
                .count();
            if differing > 0 {
                failures.push(format!(
                    "{tag} {}: {differing} of {} logits differ (first: {} vs {})",
                    case.name,
                    want.len(),
                    logits[0],
                    want[0]
                ));
            }
        }
        let mut gen = Vec::new();
        for _ in 0..STEPS.min(case.gen_ids.len()) {
            let tok = argmax(&logits);
            gen.push(tok);
            l.llama.forward(&pool, &mut s, tok, true);
            logits = s.logits(0).to_vec();
        }
        if gen[..] != case.gen_ids[..gen.len()] {
            failures.push(format!(
                "{tag} {}: greedy continuation differs\n  got  {gen:?}\n  want {:?}",
                case.name,
                &case.gen_ids[..gen.len()]
            ));
        }
    }
    if arch == "gemma3" {
        assert!(
            past_window >= cases.len() / 2,
            "{tag}: only {past_window} prompts run past the {WINDOW}-token window"
        );
        eprintln!(
            "{tag}: {past_window} of {} prompts run past the {WINDOW}-token sliding window",
            cases.len()
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
    failures
}

/// The first highest logit (llama.cpp's greedy pick, numpy's argmax).
fn argmax(x: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &v) in x.iter().enumerate() {
        if v > x[best] {
            best = i;
        }
    }
    best as u32
}

#[test]
fn every_family_gives_llama_cpp_logits_and_greedy_tokens() {
    let mut failures = Vec::new();
    for (arch, ty, fnv) in MODELS {
        let extra = FAMILIES.iter().find(|f| f.0 == arch).unwrap().1;
        failures.extend(check(arch, ty, fnv, extra));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
