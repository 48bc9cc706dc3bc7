//! `locus bench` runs every model × threads × test and reports positive speeds in llama-bench's
//! table and as JSON.

mod common;
#[path = "common/json.rs"]
mod json;

use locus::kernels::GgmlType;
use locus::model::synth::{synth_model, SynthSpec};

#[test]
fn bench_reports_every_arm() {
    let dir = common::temp_dir("bench");
    let (a, b) = (dir.join("a.gguf"), dir.join("b.gguf"));
    synth_model(&SynthSpec::tiny(GgmlType::Q4_0))
        .write_atomic(&a)
        .unwrap();
    synth_model(&SynthSpec::tiny(GgmlType::Q8_0))
        .write_atomic(&b)
        .unwrap();
    let models = format!("{},{}", a.display(), b.display());
    let out = common::locus(&[
        "bench", "-m", &models, "-p", "16", "-n", "8", "-r", "2", "-t", "1,2", "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let v = json::parse(text.trim()).unwrap_or_else(|e| panic!("{e}: {text}"));
    let rows = v.as_array().unwrap();
    assert_eq!(rows.len(), 2 * 2 * 2, "models × threads × tests: {text}");
    for r in rows {
        assert!(r.get("mean_tps").and_then(json::Value::as_f64).unwrap() > 0.0);
        assert_eq!(
            r.get("samples")
                .and_then(json::Value::as_array)
                .unwrap()
                .len(),
            2
        );
        let test = r.get("test").and_then(json::Value::as_str).unwrap();
        assert!(test == "pp16" || test == "tg8", "{test}");
    }
    let md = common::locus(&[
        "bench",
        "-m",
        a.to_str().unwrap(),
        "-p",
        "8",
        "-n",
        "0",
        "-r",
        "1",
        "-t",
        "1",
    ]);
    let table = String::from_utf8(md.stdout).unwrap();
    assert!(
        table.starts_with("| model |") && table.contains("| pp8 |"),
        "{table}"
    );
    assert!(!table.contains("tg"), "-n 0 skips the decode test");
    let bad = common::locus(&["bench", "-m", a.to_str().unwrap(), "-t", "0"]);
    assert_eq!(bad.status.code(), Some(2));
}
