//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use locus::kernels::GgmlType;
use locus::model::synth::{synth_model, SynthSpec};

pub mod skip;

/// A model file from `$LOCUS_MODELS` or `<repo>/models`; `None` after a recorded skip when it
/// is absent, and a failure naming it under `LOCUS_REQUIRE_MODELS=1`.
pub fn model_path(name: &str) -> Option<PathBuf> {
    skip::model(name)
}

pub fn repo_path(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

/// A fresh, empty temporary directory unique to this test.
pub fn temp_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("locus-test-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Runs the `locus` binary.
pub fn locus(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_locus"))
        .args(args)
        .output()
        .expect("cannot start locus")
}

/// Writes a synthetic Q8_0 model with an untied head (the tied tiny model repeats one token,
/// which would prove little) into a fresh temporary folder. `shape`: vocabulary, embedding,
/// layers, FFN, heads, KV heads.
pub fn write_synth(tag: &str, seed: u64, shape: [usize; 6]) -> PathBuf {
    let [n_vocab, n_embd, n_layer, n_ff, n_head, n_head_kv] = shape;
    let path = temp_dir(tag).join("model.gguf");
    let spec = SynthSpec {
        tied: false,
        seed,
        n_vocab,
        n_embd,
        n_layer,
        n_ff,
        n_head,
        n_head_kv,
        ..SynthSpec::tiny(GgmlType::Q8_0)
    };
    synth_model(&spec)
        .write_atomic(&path)
        .expect("cannot write the synthetic model");
    path
}
