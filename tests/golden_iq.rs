//! The IQ types as llama-quantize makes them with an importance matrix, and as llama.cpp
//! computes them: a 1B-shape model from `locus gen-model` (dim 2048, FFN 5632, 32 heads and 4
//! KV heads as the 1b preset, but two layers and a vocabulary of 8192, so the test stays
//! short), its importance matrix from llama-imatrix (tests/data/imatrix/), quantized by `locus
//! quantize --imatrix` to each IQ type pure (token embedding Q4_K and output Q6_K, which
//! llama-quantize needs for types whose quantizer needs weights: the imatrix has no entry for
//! the embedding), to the IQ2_M, IQ3_M and IQ1_M mixes, and to IQ2_S with two `--tensor-type`
//! overrides. Each output must equal llama-quantize's file byte for byte (its table in
//! tests/data/golden/requant/g1b2-*.tsv), and, where logits were recorded, the full logits
//! vector after a 62-token prompt (the tiled matmul) and a 2-token one (`vec_dot`) must equal
//! llama.cpp's (`-fa off`) bit for bit. Commands in tests/data/golden/README.md.

mod common;
#[path = "common/golden.rs"]
mod golden;
#[path = "common/requant.rs"]
mod requant;
#[path = "common/sha256.rs"]
mod sha256;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Instant;

use locus::model::ModelFile;
use locus::pool::Pool;
use locus::runtime::LoadedModel;

/// `locus gen-model` arguments of the F16 source model.
const GEN_ARGS: [&str; 9] = [
    "--preset", "1b", "--layers", "2", "--vocab", "8192", "--type", "F16", "--untied",
];

/// The flags of the pure cases besides `--imatrix`: the embedding and the head keep types
/// that need no importance matrix.
const PURE: [&str; 5] = [
    "--pure",
    "--token-embedding-type",
    "q4_k",
    "--output-tensor-type",
    "q6_k",
];

/// The importance matrix, named as llama-quantize was given it (the name is written into the
/// output's metadata, so locus runs in its folder and is given the same name).
const IMATRIX: &str = "g1b2.imatrix.gguf";

/// The prompts whose logits were recorded (of tests/data/golden/prompts).
const PROMPTS: [(usize, &str); 2] = [(1, "01.txt"), (9, "09.txt")];

/// The source model, made once per test process and checked against the tables' input hash.
fn source() -> &'static Path {
    static SRC: OnceLock<PathBuf> = OnceLock::new();
    SRC.get_or_init(|| {
        let dir = common::temp_dir("golden-iq-src");
        let src = dir.join("g1b2-f16.gguf");
        let mut args = vec!["gen-model", src.to_str().unwrap()];
        args.extend(GEN_ARGS);
        let out = common::locus(&args);
        assert!(out.status.success(), "gen-model: {out:?}");
        let want = requant::read_golden("requant/g1b2-IQ2_XXS-pure.tsv").input_sha256;
        assert_eq!(
            Some(sha256::sha256_hex(&std::fs::read(&src).unwrap())),
            want,
            "gen-model's output changed: the golden tables describe another model"
        );
        src
    })
}

/// Quantizes the source to `target` with `flags` and the importance matrix, checks the file
/// against `table`, and, where `logits` names a golden label, the logits of [`PROMPTS`].
fn case(target: &str, flags: &[&str], table: &str, logits: Option<&str>) {
    let golden = requant::read_golden(table);
    let dir = common::temp_dir(&format!("golden-iq-{}", table.replace(['/', '.'], "-")));
    let dst = dir.join("out.gguf");
    let mut args = vec!["quantize", "--imatrix", IMATRIX];
    args.extend_from_slice(flags);
    args.extend([source().to_str().unwrap(), dst.to_str().unwrap(), target]);
    let out = common::locus_cmd()
        .args(&args)
        .current_dir(common::repo_path("tests/data/imatrix"))
        .output()
        .unwrap();
    assert!(out.status.success(), "quantize {target}: {out:?}");
    requant::check_output(&dst, &golden, table);
    if let Some(label) = logits {
        check_logits(&dst, label);
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// The logits after each of [`PROMPTS`] against llama.cpp's `logits_<label>_pNN.txt.gz`, bit
/// for bit.
fn check_logits(path: &Path, label: &str) {
    let prompts = golden::read_greedy(&common::skip::golden_file("greedy_g1b2_IQ2_XXS.txt"));
    let file = ModelFile::open(path).unwrap();
    let l = LoadedModel::load(&file, Instant::now()).unwrap();
    let pool = Pool::new(2, |_| {});
    let mut failures = Vec::new();
    for (idx, name) in PROMPTS {
        let case = prompts.iter().find(|c| c.name == name).unwrap();
        let want = golden::read_logits(&format!("logits_{label}_p{idx:02}.txt.gz"));
        let what = format!("{label} {name}");
        failures.extend(golden::prompt_logits_mismatch(
            &l, &pool, case, &want, &what,
        ));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// One test per case, so they spread over the test threads and a failure names its type.
macro_rules! pure_cases {
    ($($test:ident: $ty:literal;)*) => {$(
        #[test]
        fn $test() {
            let table = format!("requant/g1b2-{}-pure.tsv", $ty);
            case($ty, &PURE, &table, Some(&format!("g1b2_pure_{}", $ty)));
        }
    )*};
}

pure_cases! {
    iq2_xxs_pure: "IQ2_XXS";
    iq2_xs_pure: "IQ2_XS";
    iq2_s_pure: "IQ2_S";
    iq3_xxs_pure: "IQ3_XXS";
    iq3_s_pure: "IQ3_S";
    iq1_s_pure: "IQ1_S";
    iq1_m_pure: "IQ1_M";
}

macro_rules! mix_cases {
    ($($test:ident: $ty:literal;)*) => {$(
        #[test]
        fn $test() {
            let table = format!("requant/g1b2-{}.tsv", $ty);
            case($ty, &[], &table, Some(&format!("g1b2_{}", $ty)));
        }
    )*};
}

mix_cases! {
    iq2_m_mix: "IQ2_M";
    iq3_m_mix: "IQ3_M";
    iq1_m_mix: "IQ1_M";
}

/// `--tensor-type` overrides on the IQ2_S preset: the file only (its types are covered above).
#[test]
fn iq2_s_with_tensor_type_overrides() {
    let flags = [
        "--tensor-type",
        "ffn_down=q4_k",
        "--tensor-type",
        "attn_[qk]=iq4_xs",
    ];
    case("IQ2_S", &flags, "requant/g1b2-IQ2_S-tt.tsv", None);
}
