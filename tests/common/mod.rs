//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A model file from `$LOCUS_MODELS` or `<repo>/models`; `None` (with a loud SKIPPED line on
/// stderr) when it is absent, so a machine without the downloads says what it did not test.
pub fn model_path(name: &str) -> Option<PathBuf> {
    let dir = std::env::var_os("LOCUS_MODELS")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("models"));
    let p = dir.join(name);
    if p.is_file() {
        Some(p)
    } else {
        eprintln!(
            "SKIPPED: {} is absent (run `make models` to fetch it)",
            p.display()
        );
        None
    }
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
