//! `locus quantize [--pure] IN OUT TYPE` reproduces `llama-quantize --allow-requantize [--pure]
//! IN OUT TYPE` byte for byte. Each case compares the output with a table recorded from
//! llama.cpp's output (tests/data/golden/requant_*_tensors.tsv and tests/data/golden/requant/;
//! the commands are in each table's header and in tests/data/golden/README.md): the tensors in
//! the same order, each with the same type, dimensions and sha256, `general.file_type`, and the
//! sha256 of the whole file (so the metadata too).
//!
//! The cases: SmolLM2 Q4_1 → Q8_0 and Q4_0 with `--pure` (the requantizations `make models`
//! writes); SmolLM2 Q8_0 → every new type with `--pure` (its 576-wide rows send the 256-wide
//! K types to their 32-wide fallbacks, as llama-quantize does) and the mixes Q4_K_M, Q5_K_M,
//! Q3_K_M, Q6_K and Q2_K; and a generated F16 model whose rows are whole 256-value blocks, so
//! the K types themselves are written, `--pure` and mixed.

mod common;
#[path = "common/sha256.rs"]
mod sha256;

use std::path::Path;

use locus::model::ModelFile;

/// A golden table (tests/data/golden/requant_hashes.py's format).
struct Golden {
    /// sha256 of llama-quantize's whole output file.
    file_sha256: Option<String>,
    file_type: Option<u32>,
    /// sha256 of the input (for a generated input: a changed generator is not a quantizer bug).
    input_sha256: Option<String>,
    /// (name, type, sha256 of the data, dims as `ne0xne1`), in the output file's order.
    rows: Vec<[String; 4]>,
}

fn read_golden(name: &str) -> Golden {
    let text = common::skip::golden_file(name);
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

/// Runs `locus quantize ARGS… SRC OUT TYPE` and checks OUT against the golden table `table`.
fn quantize_and_check(src: &Path, flags: &[&str], ty: &str, table: &str) {
    let golden = read_golden(table);
    let tag = table.replace(['/', '.'], "-");
    let dir = common::temp_dir(&format!("quant-{tag}"));
    let out = dir.join("out.gguf");
    let mut args = vec!["quantize"];
    args.extend_from_slice(flags);
    args.extend([src.to_str().unwrap(), out.to_str().unwrap(), ty]);
    let r = common::locus(&args);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    check_output(&out, &golden, table);
    let _ = std::fs::remove_dir_all(dir);
}

fn check_output(out: &Path, golden: &Golden, what: &str) {
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

/// From the Q4_1 model, as `make models` does (the Makefile passes the same flags).
fn from_q4_1(ty: &str) {
    let Some(src) = common::model_path("SmolLM2-135M-Instruct.Q4_1.gguf") else {
        return;
    };
    let table = format!("requant_{ty}_tensors.tsv");
    quantize_and_check(&src, &["--pure"], ty, &table);
}

#[test]
fn q8_0_matches_llama_quantize() {
    from_q4_1("Q8_0");
}

#[test]
fn q4_0_matches_llama_quantize() {
    from_q4_1("Q4_0");
}

/// From the Q8_0 model: `--pure` with `pure`, else the preset's mix.
fn from_q8_0(ty: &str, pure: bool) {
    let Some(src) = common::model_path("SmolLM2-135M-Instruct.Q8_0.gguf") else {
        return;
    };
    let (flags, table): (&[&str], _) = if pure {
        (&["--pure"], format!("requant/smollm2-{ty}-pure.tsv"))
    } else {
        (&[], format!("requant/smollm2-{ty}.tsv"))
    };
    quantize_and_check(&src, flags, ty, &table);
}

/// One test per case, so they spread over the test threads and a failure names its type.
macro_rules! smollm2_cases {
    ($($test:ident: $ty:literal, $pure:literal;)*) => {$(
        #[test]
        fn $test() {
            from_q8_0($ty, $pure);
        }
    )*};
}

smollm2_cases! {
    smollm2_q5_0_pure: "Q5_0", true;
    smollm2_q5_1_pure: "Q5_1", true;
    smollm2_iq4_nl_pure: "IQ4_NL", true;
    smollm2_q2_k_pure: "Q2_K", true;
    smollm2_q3_k_pure: "Q3_K", true;
    smollm2_q4_k_pure: "Q4_K", true;
    smollm2_q5_k_pure: "Q5_K", true;
    smollm2_q6_k_pure: "Q6_K", true;
    smollm2_iq4_xs_pure: "IQ4_XS", true;
    smollm2_q4_k_m: "Q4_K_M", false;
    smollm2_q5_k_m: "Q5_K_M", false;
    smollm2_q3_k_m: "Q3_K_M", false;
    smollm2_q6_k: "Q6_K", false;
    smollm2_q2_k: "Q2_K", false;
}

/// The generated model of tests/data/golden/requant/synth-*.tsv: every row a whole number of
/// 256-value blocks, F16 weights, an untied head, 4 query heads per KV head.
const SYNTH: [&str; 15] = [
    "--type",
    "F16",
    "--dim",
    "256",
    "--ffn",
    "768",
    "--layers",
    "8",
    "--heads",
    "8",
    "--kv-heads",
    "2",
    "--vocab",
    "512",
    "--untied",
];

#[test]
fn synth_256_wide_rows_match_llama_quantize() {
    let dir = common::temp_dir("quant-synth");
    let src = dir.join("synth.gguf");
    let mut args = vec!["gen-model", src.to_str().unwrap()];
    args.extend(SYNTH);
    let r = common::locus(&args);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let cases = [
        ("Q2_K", true),
        ("Q3_K", true),
        ("Q4_K", true),
        ("Q5_K", true),
        ("Q6_K", true),
        ("IQ4_XS", true),
        ("Q2_K", false),
        ("Q3_K_M", false),
        ("Q4_K_M", false),
        ("IQ4_XS", false),
    ];
    let input = sha256::sha256_hex(&std::fs::read(&src).unwrap());
    for (ty, pure) in cases {
        let table = format!("requant/synth-{ty}{}.tsv", if pure { "-pure" } else { "" });
        assert_eq!(
            read_golden(&table).input_sha256.as_deref(),
            Some(input.as_str()),
            "{table}: `locus gen-model` no longer writes the model the table was made from"
        );
        // TYPE in lower case: llama-quantize takes it in any case, and so does locus.
        let flags: &[&str] = if pure { &["--pure"] } else { &[] };
        quantize_and_check(&src, flags, &ty.to_lowercase(), &table);
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn an_unknown_type_is_one_line_listing_the_types() {
    use locus::model::quantize::TARGETS;
    let dir = common::temp_dir("quant-unknown");
    let out = dir.join("out.gguf");
    for ty in ["Q9_9", "Q8_K", "COPY"] {
        let r = common::locus(&["quantize", "in.gguf", out.to_str().unwrap(), ty]);
        let e = common::one_error_line(&r, ty);
        assert!(e.contains(ty) && e.contains("types:"), "{e}");
        for name in TARGETS {
            assert!(e.contains(name), "{ty}: {name} not listed: {e}");
        }
    }
    // llama-quantize's IQ1-IQ3 presets are known: refused for what they need (an importance
    // matrix where a tensor of their mix needs one), or as not made yet, in any case.
    for (ty, why) in [
        ("IQ2_XS", "importance matrix"),
        ("iq1_m", "importance matrix"),
        ("IQ3_XS", "importance matrix"),
        ("iq3_m", "not make"),
    ] {
        let r = common::locus(&["quantize", "in.gguf", out.to_str().unwrap(), ty]);
        let e = common::one_error_line(&r, ty);
        let upper = ty.to_ascii_uppercase();
        assert!(e.contains(&upper) && e.contains(why), "{e}");
    }
    assert!(!out.exists());
    // --help lists every type, one line each, with its llama_ftype number.
    let r = common::locus(&["quantize", "--help"]);
    assert!(r.status.success());
    let help = String::from_utf8(r.stdout).unwrap();
    for name in TARGETS {
        let t = locus::model::quantize::Target::parse(name).unwrap();
        let line = format!("{:>4}  {name} ", t.file_type());
        assert!(help.contains(&line), "--help lacks {line:?}");
    }
    // The mixes have a --pure form, and the help says so.
    assert!(
        help.lines()
            .any(|l| l.trim_start().starts_with("--pure") && l.contains("no mix")),
        "--help lacks --pure: {help}"
    );
    let _ = std::fs::remove_dir_all(dir);
}
