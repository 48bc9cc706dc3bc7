//! Tokenizer throughput on mixed text: English prose (tests/data/ppl/english.txt, 150 KB) and
//! the tokenizer test corpus (code, many scripts, emoji, chat markup, whitespace runs).
//! - `*_unique`: those ~160 KB once; no text repeats beyond what the files themselves repeat.
//! - `*_1MB`: the same text repeated to 1 MB. Within one `encode` call the BPE tokenizer
//!   caches the words it has merged, so repeated text is cheaper: this is the upper figure.
//!
//! Run: `cargo bench --bench tokenize`. Needs the model files in `$LOCUS_MODELS` or `models/`;
//! a missing model is reported with a SKIPPED line.

use std::path::PathBuf;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use locus::model::tokenizer::Tokenizer;
use locus::model::ModelFile;

/// How much text one iteration tokenizes.
const TEXT_BYTES: usize = 1 << 20;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn model_path(name: &str) -> Option<PathBuf> {
    let dirs = std::env::var_os("LOCUS_MODELS")
        .map(PathBuf::from)
        .into_iter()
        .chain([repo().join("models")]);
    dirs.map(|d| d.join(name)).find(|p| p.is_file())
}

/// English prose and the corpus files, concatenated.
fn unique_text() -> String {
    let dir = repo().join("tests/data/tokenizer/corpus");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("the tokenizer corpus exists")
        .map(|e| e.expect("readable entry").path())
        .collect();
    files.sort();
    files.insert(0, repo().join("tests/data/ppl/english.txt"));
    let text = files
        .iter()
        .filter_map(|p| String::from_utf8(std::fs::read(p).ok()?).ok())
        .collect::<Vec<_>>()
        .join("\n");
    assert!(!text.is_empty(), "no bench text found");
    text
}

/// `text` repeated to `TEXT_BYTES` (cut at a character boundary).
fn repeated(text: &str) -> String {
    let mut out = String::with_capacity(TEXT_BYTES + text.len());
    while out.len() < TEXT_BYTES {
        out.push_str(text);
    }
    let mut cut = TEXT_BYTES;
    while !out.is_char_boundary(cut) {
        cut -= 1;
    }
    out.truncate(cut);
    out
}

fn bench_model(c: &mut Criterion, label: &str, file: &str, texts: &[(&str, &str)]) {
    let Some(path) = model_path(file) else {
        eprintln!("SKIPPED: {label}: model {file} not found in $LOCUS_MODELS or models/");
        return;
    };
    let model = ModelFile::open(&path).expect("model opens");
    let tok = Tokenizer::from_gguf(&model.gguf().expect("model parses")).expect("tokenizer loads");
    let mut group = c.benchmark_group("tokenize");
    group.sample_size(10);
    for &(name, text) in texts {
        group.throughput(Throughput::Bytes(text.len() as u64));
        group.bench_function(format!("{label}_{name}"), |b| {
            b.iter(|| tok.encode(text, true, true))
        });
    }
    group.finish();
}

fn tokenize(c: &mut Criterion) {
    let unique = unique_text();
    let big = repeated(&unique);
    let texts = [("unique", unique.as_str()), ("1MB", big.as_str())];
    bench_model(c, "smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", &texts);
    bench_model(c, "gemma3", "gemma-3-270m-q4_k_m.gguf", &texts);
}

criterion_group!(benches, tokenize);
criterion_main!(benches);
