//! The golden tables of llama-quantize's outputs (tests/data/golden/requant_hashes.py's
//! format) and the check of a `locus quantize` output against one.

use std::path::Path;

use locus::model::ModelFile;

use super::sha256;

/// A golden table (tests/data/golden/requant_hashes.py's format).
pub struct Golden {
    /// sha256 of llama-quantize's whole output file.
    pub file_sha256: Option<String>,
    pub file_type: Option<u32>,
    /// sha256 of the input (for a generated input: a changed generator is not a quantizer bug).
    pub input_sha256: Option<String>,
    /// (name, type, sha256 of the data, dims as `ne0xne1`), in the output file's order.
    pub rows: Vec<[String; 4]>,
}

/// Reads the golden table `name` (under tests/data/golden).
pub fn read_golden(name: &str) -> Golden {
    let text = super::common::skip::golden_file(name);
    let mut g = Golden {
        file_sha256: None,
        file_type: None,
        input_sha256: None,
        rows: Vec::new(),
    };
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        if let Some(h) = line.strip_prefix("# ") {
            let mut w = h.split_whitespace();
            match (w.next(), w.next()) {
                (Some("file_sha256"), Some(v)) => g.file_sha256 = Some(v.into()),
                (Some("input_sha256"), Some(v)) => g.input_sha256 = Some(v.into()),
                (Some("general.file_type"), Some(v)) => g.file_type = Some(v.parse().unwrap()),
                _ => {}
            }
            continue;
        }
        let f: Vec<&str> = line.split('\t').collect();
        assert_eq!(f.len(), 4, "{name}: bad line {line:?}");
        g.rows.push([f[0], f[1], f[2], f[3]].map(String::from));
    }
    assert!(!g.rows.is_empty(), "{name}: no tensors");
    g
}

/// Checks the file `out` against `golden`: tensor order, types, dims and data, the file type
/// and the whole file's sha256.
pub fn check_output(out: &Path, golden: &Golden, what: &str) {
    // The whole file first: when it matches, so does every tensor's data, and hashing each
    // tensor again would double the test's time. Otherwise the tensor hashes say which differ.
    let whole = golden
        .file_sha256
        .as_ref()
        .map(|want| (sha256::sha256_hex(&std::fs::read(out).unwrap()), want));
    let file = ModelFile::open(out).unwrap();
    let g = file.gguf().unwrap();
    let order: Vec<&str> = g.tensors.iter().map(|t| t.name).collect();
    let want: Vec<&str> = golden.rows.iter().map(|r| r[0].as_str()).collect();
    assert_eq!(order, want, "{what}: tensor order");
    let same_file = whole.as_ref().is_some_and(|(got, want)| got == *want);
    for (t, [name, ty, sha, dims]) in g.tensors.iter().zip(&golden.rows) {
        assert_eq!(t.ty.name(), ty, "{what}: type of {name}");
        let d: Vec<String> = t.dims.iter().map(u64::to_string).collect();
        assert_eq!(&d.join("x"), dims, "{what}: dims of {name}");
        if !same_file {
            assert_eq!(&sha256::sha256_hex(t.data), sha, "{what}: data of {name}");
        }
    }
    let file_type = g.get("general.file_type").and_then(|v| v.as_u64());
    if let Some(want) = golden.file_type {
        assert_eq!(
            file_type,
            Some(u64::from(want)),
            "{what}: general.file_type"
        );
    }
    if let Some((got, want)) = whole {
        assert_eq!(
            &got, want,
            "{what}: the tensors match but the whole file does not (metadata?)"
        );
    }
}
