//! `locus bench` runs every model × threads × mode (each arm in a fresh process) and reports
//! positive speeds in llama-bench's table, as JSON and as CSV; its locality column is the one
//! `locus audit` reports; `--svg` draws every arm; bad requests and failed arms exit 2.

mod common;

use std::path::{Path, PathBuf};

use locus::json::Json;
use locus::kernels::GgmlType;
use locus::model::synth::{synth_model, SynthSpec};

fn model(dir: &Path, name: &str, ty: GgmlType) -> PathBuf {
    let p = dir.join(name);
    synth_model(&SynthSpec::tiny(ty)).write_atomic(&p).unwrap();
    p
}

fn ok_stdout(args: &[&str]) -> String {
    let out = common::locus(args);
    assert!(
        out.status.success(),
        "locus {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn rows_of(text: &str) -> Vec<Json> {
    match Json::parse(text.trim()).unwrap_or_else(|e| panic!("{e}: {text}")) {
        Json::Arr(v) => v,
        other => panic!("not an array: {other:?}"),
    }
}

fn num(r: &Json, k: &str) -> f64 {
    r.get(k)
        .and_then(Json::as_f64)
        .unwrap_or_else(|| panic!("no number '{k}' in {r:?}"))
}

fn string<'a>(r: &'a Json, k: &str) -> &'a str {
    r.get(k)
        .and_then(Json::as_str)
        .unwrap_or_else(|| panic!("no string '{k}' in {r:?}"))
}

#[test]
fn bench_reports_every_model_thread_count_and_test() {
    let dir = common::temp_dir("bench");
    let a = model(&dir, "a.gguf", GgmlType::Q4_0);
    let b = model(&dir, "b.gguf", GgmlType::Q8_0);
    let models = format!("{},{}", a.display(), b.display());
    let text = ok_stdout(&[
        "bench", "-m", &models, "-p", "16", "-n", "8", "-r", "2", "-t", "1,2", "--json",
    ]);
    let rows = rows_of(&text);
    assert_eq!(rows.len(), 2 * 2 * 2, "models × threads × tests: {text}");
    for r in &rows {
        assert!(num(r, "mean_tps") > 0.0);
        assert_eq!(r.get("samples").and_then(Json::as_array).unwrap().len(), 2);
        let test = string(r, "test");
        assert!(test == "pp16" || test == "tg8", "{test}");
        assert_eq!(
            string(r, "numa_requested"),
            "auto",
            "--numa defaults to auto"
        );
        assert!(num(r, "load_ms") > 0.0 && num(r, "read_bytes_per_token") > 0.0);
        assert_eq!(r.get("error"), Some(&Json::Null));
        // Decode rows carry the roofline share (bandwidth is measured on every host).
        if test == "tg8" {
            let share = num(r, "roofline_share");
            assert!(share > 0.0 && share.is_finite(), "{r:?}");
        }
    }
    let table = ok_stdout(&[
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
    assert!(
        table.starts_with("| model |") && table.contains("| pp8 |"),
        "{table}"
    );
    assert!(table.contains("| locality |") && table.contains("| roofline |"));
    assert!(!table.contains("| tg"), "-n 0 skips the decode test");
    // The roofline's bandwidth is read right after every round of an arm, and the notes give
    // the mean of those readings.
    let rounds = ok_stdout(&[
        "bench",
        "-m",
        a.to_str().unwrap(),
        "-p",
        "0",
        "-n",
        "4",
        "-r",
        "1",
        "-t",
        "1",
        "--rounds",
        "3",
    ]);
    assert!(
        rounds.lines().any(|l| l.starts_with("membw: node ")
            && l.contains(", 1 thread: ")
            && l.contains("(mean of 3 readings")),
        "{rounds}"
    );
    assert!(table.contains("numa_balancing") && table.contains("THP"));
    let bad = common::locus(&["bench", "-m", a.to_str().unwrap(), "-t", "0"]);
    assert_eq!(bad.status.code(), Some(2));
}

/// Every mode runs as its own arm, each reports the audit's locality, and that equals what
/// `locus audit` says for the mode placed by itself (modes with placed copies; the file-backed
/// modes' pages land where they are first read, so they are checked on a one-node host only).
#[test]
fn every_mode_is_an_arm_and_locality_agrees_with_audit() {
    let dir = common::temp_dir("bench-modes");
    let m = model(&dir, "m.gguf", GgmlType::Q8_0);
    let m = m.to_str().unwrap();
    let svg = dir.join("arms.svg");
    let text = ok_stdout(&[
        "bench",
        "-m",
        m,
        "-p",
        "8",
        "-n",
        "4",
        "-r",
        "2",
        "-t",
        "2",
        "--numa",
        "all",
        "--poll",
        "0",
        "--json",
        "--svg",
        svg.to_str().unwrap(),
    ]);
    let rows = rows_of(&text);
    let modes = [
        "off",
        "distribute",
        "interleave",
        "isolate",
        "mirror",
        "shard",
    ];
    assert_eq!(rows.len(), modes.len() * 2, "{text}");
    let nodes = topo_nodes();
    for (i, mode) in modes.iter().enumerate() {
        let (pp, tg) = (&rows[2 * i], &rows[2 * i + 1]);
        assert_eq!(
            string(pp, "numa_requested"),
            *mode,
            "arms keep --numa's order"
        );
        assert_eq!((string(pp, "test"), string(tg, "test")), ("pp8", "tg4"));
        assert_eq!(num(tg, "threads"), 2.0);
        assert!(num(tg, "mean_tps") > 0.0);
        let loc = num(tg, "locality");
        assert!((0.0..=1.0).contains(&loc), "{mode}: {loc}");
        if nodes == 1 {
            assert_eq!(loc, 1.0, "{mode}: one node, every read is local");
        }
        let effective = string(tg, "numa");
        if nodes == 1 || !matches!(effective, "off" | "distribute") {
            let audit = Json::parse(
                ok_stdout(&[
                    "audit", "-m", m, "--numa", mode, "-t", "2", "--poll", "0", "--json",
                ])
                .trim(),
            )
            .unwrap();
            assert_eq!(string(&audit, "mode"), effective, "{mode}");
            let want = num(&audit, "locality");
            assert!(
                (loc - want).abs() < 0.02,
                "{mode}: bench locality {loc}, audit {want}"
            );
        }
        let resident: f64 = match tg.get("bytes_by_node") {
            Some(Json::Obj(kv)) => kv.iter().map(|(_, v)| v.as_f64().unwrap()).sum(),
            other => panic!("bytes_by_node: {other:?}"),
        };
        assert!(resident > 0.0, "{mode}: resident bytes per node");
        // The modes that copy report how fast they built the copies; the others copy nothing.
        let rate = tg.get("place_gb_per_s").and_then(Json::as_f64);
        match effective {
            "off" | "distribute" => assert_eq!(rate, None, "{mode}: nothing is copied"),
            _ => assert!(
                rate.is_some_and(|r| r > 0.0),
                "{mode}: placement rate {rate:?}"
            ),
        }
    }
    let picture = std::fs::read_to_string(&svg).unwrap();
    assert!(picture.starts_with("<svg") && picture.trim_end().ends_with("</svg>"));
    for mode in modes {
        assert!(picture.contains(&format!(">{mode}")), "{mode} labelled");
    }
    assert_eq!(picture.matches(">locality ").count(), modes.len());
    let leftovers: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "temp files left: {leftovers:?}");
}

fn topo_nodes() -> usize {
    let t = Json::parse(ok_stdout(&["topo", "--json"]).trim()).unwrap();
    t.get("nodes").and_then(Json::as_array).unwrap().len()
}

#[test]
fn csv_and_cold_runs() {
    let dir = common::temp_dir("bench-csv");
    let m = model(&dir, "m.gguf", GgmlType::Q4_0);
    let text = ok_stdout(&[
        "bench",
        "-m",
        m.to_str().unwrap(),
        "-p",
        "4",
        "-n",
        "2",
        "-r",
        "1",
        "-t",
        "1",
        "--numa",
        "off,mirror",
        "--cold",
        "--csv",
    ]);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 1 + 2 * 2, "header + arms × tests: {text}");
    let header: Vec<&str> = lines[0].split(',').collect();
    let col = |name: &str| header.iter().position(|h| *h == name).unwrap();
    for l in &lines[1..] {
        let f: Vec<&str> = l.split(',').collect();
        assert_eq!(f.len(), header.len(), "{l}");
        assert_eq!(f[col("cold")], "true");
        assert!(f[col("mean_tps")].parse::<f64>().unwrap() > 0.0);
        // Nothing else maps this fresh file, so the release leaves none of it cached.
        assert_eq!(f[col("cached_bytes")], "0", "{l}");
    }
    assert_eq!(lines[1].split(',').nth(col("numa")).unwrap(), "off");
    assert_eq!(lines[3].split(',').nth(col("numa")).unwrap(), "mirror");
}

#[test]
fn bad_requests_and_failed_arms_exit_2() {
    let dir = common::temp_dir("bench-bad");
    let m = model(&dir, "m.gguf", GgmlType::Q4_0);
    let m = m.to_str().unwrap();
    let cases: [&[&str]; 5] = [
        &["bench", "-m", m, "--json", "--csv"],
        &["bench", "-m", m, "--numa", "mirror,sideways"],
        &["bench", "-m", m, "-n", "0", "--svg", "/tmp/x.svg"],
        &["bench", "-m", "/nonexistent/model.gguf"],
        &["bench", "--arm", "-m", m, "-t", "1,2"],
    ];
    for args in cases {
        let out = common::locus(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.lines().count(), 1, "one line: {err}");
        assert!(err.starts_with("locus: error: "), "{err}");
    }
    // An arm that cannot be placed fails alone: the others still run and print, exit 2.
    let out = common::locus(&[
        "bench",
        "-m",
        m,
        "-p",
        "4",
        "-n",
        "2",
        "-r",
        "1",
        "-t",
        "1",
        "--numa",
        "off,isolate",
        "--numa-node",
        "999",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(table.contains("| off | 1 | tg2 |"), "{table}");
    assert!(table.contains("| isolate | 1 | - | failed: "), "{table}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("1 of 2 arms failed"), "{err}");
}

/// Without --cold every arm starts with the whole file cached, even right after an arm whose
/// copies released it; --rounds runs each arm again in a new process and pools the samples.
#[test]
fn warm_arms_start_warm_and_rounds_pool_samples() {
    let dir = common::temp_dir("bench-warm");
    let m = model(&dir, "m.gguf", GgmlType::Q8_0);
    let text = ok_stdout(&[
        "bench",
        "-m",
        m.to_str().unwrap(),
        "-p",
        "4",
        "-n",
        "2",
        "-r",
        "2",
        "-t",
        "1",
        "--numa",
        "mirror,off",
        "--rounds",
        "2",
        "--json",
    ]);
    let rows = rows_of(&text);
    assert_eq!(rows.len(), 4, "{text}");
    for r in &rows {
        assert_eq!(r.get("samples").and_then(Json::as_array).unwrap().len(), 4);
        assert_eq!(num(r, "rounds"), 2.0);
        // mincore counts whole pages: the last one may reach past the file's end.
        assert!(num(r, "cached_bytes") >= num(r, "file_bytes"), "{r:?}");
    }
}

/// A mixture of experts' rows carry per layer how many tokens chose each expert over the timed
/// runs of every round: in decode every layer sees each token, in a prompt the last layer only the last one
/// (its FFN runs for the tokens whose logits are wanted); a dense model's rows carry none.
#[test]
fn json_rows_count_the_experts_each_test_chose() {
    let dir = common::temp_dir("bench-experts");
    let p = dir.join("moe.gguf");
    let spec = SynthSpec {
        arch: locus::model::arch::Arch::Qwen3Moe,
        n_expert: 8,
        n_expert_used: 2,
        n_ff_exp: 32,
        head_dim: 16,
        ..SynthSpec::tiny(GgmlType::Q8_0)
    };
    synth_model(&spec).write_atomic(&p).unwrap();
    let (rounds, reps, n_p, n_g) = (2u64, 2u64, 8u64, 4u64);
    let text = ok_stdout(&[
        "bench",
        "-m",
        p.to_str().unwrap(),
        "-p",
        &n_p.to_string(),
        "-n",
        &n_g.to_string(),
        "-r",
        &reps.to_string(),
        "--rounds",
        &rounds.to_string(),
        "-t",
        "1",
        "--json",
    ]);
    let rows = rows_of(&text);
    assert_eq!(rows.len(), 2, "{text}");
    let used = spec.n_expert_used as u64;
    for r in &rows {
        let layers = r.get("expert_counts").and_then(Json::as_array).unwrap();
        assert_eq!(layers.len(), spec.n_layer, "{r:?}");
        let decode = string(r, "test").starts_with("tg");
        for (i, l) in layers.iter().enumerate() {
            let counts: Vec<u64> = l
                .as_array()
                .unwrap()
                .iter()
                .map(|c| c.as_f64().unwrap() as u64)
                .collect();
            assert_eq!(counts.len(), spec.n_expert, "layer {i}");
            let tokens = match (decode, i + 1 == spec.n_layer) {
                (true, _) => n_g,
                (false, false) => n_p,
                (false, true) => 1,
            };
            let total: u64 = counts.iter().sum();
            let want = rounds * reps * tokens * used;
            assert_eq!(
                total, want,
                "layer {i}: {counts:?} (the rounds' counts added)"
            );
        }
    }
    let dense = model(&dir, "dense.gguf", GgmlType::Q8_0);
    let text = ok_stdout(&[
        "bench",
        "-m",
        dense.to_str().unwrap(),
        "-p",
        "4",
        "-n",
        "2",
        "-r",
        "1",
        "-t",
        "1",
        "--json",
    ]);
    for r in &rows_of(&text) {
        assert_eq!(r.get("expert_counts"), Some(&Json::Null), "{r:?}");
    }
}
