//! `locus membw` measures every node (or node pair with --matrix) and prints valid JSON.

mod common;

use locus::json::Json;

#[test]
fn membw_json_has_a_positive_reading_per_node_pair() {
    let topo = locus::sys::topology::Topology::detect().unwrap();
    let cpu_nodes = topo
        .nodes
        .iter()
        .filter(|n| !topo.allowed_cpus_of(n.id).is_empty())
        .count();
    let mem_nodes = topo
        .nodes
        .iter()
        .filter(|n| topo.allowed_nodes.contains(n.id))
        .count();
    for (flags, want) in [
        (&["--json"][..], cpu_nodes),
        (&["--json", "--matrix"][..], cpu_nodes * mem_nodes),
    ] {
        let mut args = vec!["membw", "--size", "16", "--passes", "2", "-t", "1"];
        args.extend_from_slice(flags);
        let out = common::locus(&args);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8(out.stdout).unwrap();
        let v = Json::parse(text.trim()).unwrap_or_else(|e| panic!("{e}: {text}"));
        let readings = v.get("readings").and_then(Json::as_array).unwrap();
        assert_eq!(readings.len(), want, "{flags:?}: {text}");
        for r in readings {
            assert!(
                r.get("gb_per_s").and_then(Json::as_f64).unwrap() > 0.0,
                "{text}"
            );
        }
    }
}

#[test]
fn membw_rejects_bad_values() {
    let out = common::locus(&["membw", "--size", "0"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--size"));
}
