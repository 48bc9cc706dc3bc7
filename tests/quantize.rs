//! `locus quantize` reproduces `llama-quantize --allow-requantize --pure` byte for byte: every
//! tensor's type and sha256 equal those recorded from llama.cpp's output
//! (tests/data/golden/requant_*_tensors.tsv; see tests/data/golden/README.md for the commands).

mod common;
#[path = "common/sha256.rs"]
mod sha256;

use locus::model::ModelFile;

fn check(target: &str) {
    let golden = common::skip::golden_file(&format!("requant_{target}_tensors.tsv"));
    let Some(src) = common::model_path("SmolLM2-135M-Instruct.Q4_1.gguf") else {
        return;
    };
    let dir = common::temp_dir(&format!("quant-{target}"));
    let out = dir.join(format!("smol.{target}.gguf"));
    let r = common::locus(&[
        "quantize",
        src.to_str().unwrap(),
        out.to_str().unwrap(),
        target,
    ]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let file = ModelFile::open(&out).unwrap();
    let g = file.gguf().unwrap();
    let mut n = 0;
    for line in golden
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
    {
        let f: Vec<&str> = line.split('\t').collect();
        let t = g
            .tensor(f[0])
            .unwrap_or_else(|| panic!("{target}: tensor {} missing", f[0]));
        assert_eq!(t.ty.name(), f[1], "{target}: type of {}", f[0]);
        assert_eq!(
            sha256::sha256_hex(t.data),
            f[2],
            "{target}: data of {}",
            f[0]
        );
        n += 1;
    }
    assert_eq!(
        n,
        g.tensors.len(),
        "{target}: every tensor is covered by the golden list"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn q8_0_matches_llama_quantize() {
    check("Q8_0");
}

#[test]
fn q4_0_matches_llama_quantize() {
    check("Q4_0");
}
