//! `locus bench --numa all` in a two-node QEMU guest (tools/vm/boot.sh, as tests/vm.rs): every
//! arm completes, each arm's locality is what `locus audit` reports for its mode (mirror, shard
//! and isolate local, interleave about one half), and `locus membw --matrix` prints a 2×2
//! matrix. Prints SKIPPED without QEMU, busybox, cpio or the cached guest kernel (`make
//! vm-test` installs them).

mod common;
#[path = "common/vm.rs"]
mod vm;

use std::process::Command;
use std::time::Instant;

use locus::json::Json;

fn num(r: &Json, k: &str) -> f64 {
    r.get(k)
        .and_then(Json::as_f64)
        .unwrap_or_else(|| panic!("no number '{k}' in {r:?}"))
}

#[test]
fn vm_bench_every_mode_on_two_nodes() {
    let Some(env) = vm::vm_env("vm bench") else {
        return;
    };
    let locus = env.locus_static;
    // About 3 MiB (≈ 750 pages), as tests/vm.rs uses: interleave's share can be judged.
    let model = vm::write_synth("vm-bench-model", 4, [1024, 256, 4, 512, 4, 2]);
    // --poll 0: the guest's vCPUs share the host's cores, where spinning only steals time.
    let script = r#"cd /tmp
locus bench -m /model.gguf -p 8 -n 4 -r 2 -t 2 --numa all --poll 0 --json >/tmp/b.json 2>/tmp/b.err
st=$?; echo "== status"; echo $st
echo "== bench"; cat /tmp/b.json; echo
echo "== err"; cat /tmp/b.err
for m in off distribute interleave isolate mirror shard; do
  echo "== audit $m"; locus audit -m /model.gguf --numa $m -t 2 --poll 0 --json 2>/dev/null; echo
done
echo "== membw"; locus membw --matrix --size 16 --passes 1
echo "== end"
"#;
    let t = Instant::now();
    let out = Command::new(&env.boot)
        .args(["--nodes", "1:256,1:256", "--locus"])
        .arg(&locus)
        .arg("--file")
        .arg(format!("{}:/model.gguf", model.display()))
        .args(["--timeout", "400", "--", "sh", "-c", script])
        .output()
        .expect("cannot start tools/vm/boot.sh");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let s = vm::sections(&stdout);
    let get = |k: &str| {
        s.get(k)
            .map(|v| v.trim())
            .unwrap_or_else(|| panic!("no '{k}'"))
    };
    eprintln!(
        "vm bench: boot + run {:.1}s\n--- bench ---\n{}\n--- bench stderr ---\n{}\n--- boot stderr ---\n{}",
        t.elapsed().as_secs_f64(),
        s.get("bench").map_or("", |v| v.trim()),
        s.get("err").map_or("", |v| v.trim()),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "vm bench: boot failed:\n{stdout}");
    assert_eq!(get("status"), "0", "bench failed: {}", get("err"));
    // `locus membw --matrix`: a header naming both memory nodes, then one row per CPU node.
    let matrix: Vec<Vec<&str>> = get("membw")
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(matrix.len(), 3, "membw --matrix: {matrix:?}");
    assert_eq!(matrix[0][matrix[0].len() - 2..], ["0", "1"], "{matrix:?}");
    for (i, row) in matrix[1..].iter().enumerate() {
        assert_eq!(row.len(), 3, "{matrix:?}");
        assert_eq!(row[0], i.to_string());
        assert!(row[1..]
            .iter()
            .all(|v| v.parse::<f64>().is_ok_and(|x| x > 0.0)));
    }
    let rows = match Json::parse(get("bench")).expect("bench JSON") {
        Json::Arr(v) => v,
        other => panic!("not an array: {other:?}"),
    };
    let modes = [
        "off",
        "distribute",
        "interleave",
        "isolate",
        "mirror",
        "shard",
    ];
    assert_eq!(rows.len(), 2 * modes.len(), "every arm × pp, tg");
    for (i, mode) in modes.iter().enumerate() {
        let tg = &rows[2 * i + 1];
        assert_eq!(tg.get("numa_requested").and_then(Json::as_str), Some(*mode));
        assert_eq!(tg.get("error"), Some(&Json::Null), "{mode}");
        assert!(num(tg, "mean_tps") > 0.0 && num(&rows[2 * i], "mean_tps") > 0.0);
        let audit = Json::parse(get(&format!("audit {mode}"))).expect("audit JSON");
        eprintln!(
            "vm bench: {mode}: locality bench {:?} audit {:?}, resident {:?}, load {:.0} ms",
            tg.get("locality").and_then(Json::as_f64),
            audit.get("locality").and_then(Json::as_f64),
            tg.get("bytes_by_node"),
            num(tg, "load_ms")
        );
        if *mode == "off" {
            // Unpinned threads on two nodes have no node: no locality, in both reports.
            assert_eq!(tg.get("locality"), Some(&Json::Null), "off");
            assert_eq!(audit.get("locality"), Some(&Json::Null), "off");
        } else {
            let (loc, want) = (num(tg, "locality"), num(&audit, "locality"));
            match *mode {
                // Which node gets the first page differs run to run: about one half each time.
                "interleave" => {
                    assert!(
                        (loc - 0.5).abs() < 0.1 && (want - 0.5).abs() < 0.1,
                        "{loc} {want}"
                    )
                }
                // The file's pages are where the guest's initramfs put them.
                "distribute" => assert!((loc - want).abs() < 0.1, "{mode}: {loc} vs {want}"),
                _ => assert!(loc > 0.99 && want > 0.99, "{mode}: {loc}, audit {want}"),
            }
        }
        assert!(num(tg, "roofline_share") > 0.0, "{mode}: roofline measured");
    }
}
