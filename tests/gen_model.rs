//! `locus gen-model` writes models the engine runs, in every weight type; bad shapes are
//! refused with one line and exit 2, and nothing is left behind.

mod common;

use locus::model::{Config, ModelFile};

#[test]
fn generated_models_load_and_run_in_every_type() {
    let dir = common::temp_dir("genmodel");
    let types = [
        "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "IQ4_NL", "F16", "BF16", "F32", "Q2_K", "Q3_K",
        "Q4_K", "Q5_K", "Q6_K", "IQ4_XS",
    ];
    for ty in types {
        // The 256-element super-block types need rows of whole super-blocks.
        let (dim, ffn) = if ty.contains("_K") || ty == "IQ4_XS" {
            (256, 512)
        } else {
            (128, 256)
        };
        let (dim_s, ffn_s) = (dim.to_string(), ffn.to_string());
        let p = dir.join(format!("m-{ty}.gguf"));
        let out = common::locus(&[
            "gen-model",
            p.to_str().unwrap(),
            "--type",
            ty,
            "--dim",
            &dim_s,
            "--layers",
            "2",
            "--ffn",
            &ffn_s,
            "--heads",
            "4",
            "--kv-heads",
            "2",
            "--vocab",
            "600",
            "--untied",
        ]);
        assert!(
            out.status.success(),
            "{ty}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let f = ModelFile::open(&p).unwrap();
        let c = Config::from_gguf(&f.gguf().unwrap()).unwrap();
        assert_eq!(
            (
                c.n_embd,
                c.n_layer,
                c.n_ff,
                c.n_head,
                c.n_head_kv,
                c.n_vocab
            ),
            (dim, 2, ffn, 4, 2, 600)
        );
        assert!(
            f.gguf().unwrap().tensor("output.weight").is_some(),
            "--untied writes an output head"
        );
        let run = common::locus(&[
            "run",
            "-m",
            p.to_str().unwrap(),
            "-p",
            "hello world",
            "-n",
            "6",
            "--temp",
            "0",
        ]);
        assert!(
            run.status.success(),
            "{ty}: {}",
            String::from_utf8_lossy(&run.stderr)
        );
    }
}

#[test]
fn bad_shapes_are_refused_without_output() {
    let dir = common::temp_dir("genmodel-bad");
    let p = dir.join("bad.gguf");
    for args in [
        &["--dim", "100"][..],
        &["--heads", "4", "--kv-heads", "3"],
        &["--type", "Q6_K"], // the default --dim is not whole 256-element super-blocks
        &["--type", "IQ2_XXS"],
        &["--vocab", "10"],
        &["--preset", "huge"],
    ] {
        let mut a = vec!["gen-model", p.to_str().unwrap()];
        a.extend_from_slice(args);
        let out = common::locus(&a);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(!p.exists(), "{args:?} left a file behind");
    }
}
