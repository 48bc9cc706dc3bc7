//! Multi-node tests in QEMU VMs: a one-node machine boots guests with 2, 4 and 8 NUMA nodes and
//! one with a memory-only node, and checks from inside each guest that the kernel sees the
//! topology we asked for and that the static `locus` binary generates exactly the host's tokens.
//!
//! The VMs come from `tools/vm/boot.sh` (busybox initramfs on a cached Debian cloud kernel, TCG
//! where the host has no vmx/svm); `tools/vm/setup.sh` installs QEMU, busybox-static and cpio and
//! fetches the kernel (`make vm-test` runs it). Without them every test prints a SKIPPED line.
//!
//! The static binary is built here with the flags of `make static` (cargo with
//! `RUSTFLAGS=-C target-feature=+crt-static --release --target x86_64-unknown-linux-gnu`, into
//! `$CARGO_TARGET_DIR` or `target/`); cargo itself makes that a no-op when it is fresh.
//!
//! Each guest also runs `locus topo --json`, whose nodes must match the spec, and then every
//! placement mode: `locus audit --numa MODE --json` must show mirror copies and shards 100% on
//! their nodes with locality 1.0, interleave spread evenly (within 5%) over every node with
//! memory, and `locus run --numa MODE` must generate the host's tokens in every mode. A VM with
//! one node too small for a copy checks that `auto` picks shard and `mirror --strict` fails.

mod common;
#[path = "common/vm.rs"]
mod vm;

use common::write_synth_typed;
use locus::json::Json;
use locus::kernels::GgmlType::Q4K;
use locus::placement::Mode;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};
use std::time::Instant;
use vm::{sections, vm_env, write_synth};
const PROMPT: &str = "hello world";
const N_PREDICT: &str = "8";
/// Host-side limit for one boot, generous for TCG on a busy two-core machine.
const BOOT_TIMEOUT_S: u32 = 300;

/// One guest NUMA node: how many CPUs (0 = memory-only) and MiB of memory it gets.
#[derive(Clone, Copy, Debug)]
struct NodeSpec {
    cpus: usize,
    mib: usize,
}

/// A guest topology: nodes in id order and the full distance matrix.
#[derive(Debug)]
struct Topo {
    nodes: Vec<NodeSpec>,
    dist: Vec<Vec<u32>>,
}

impl Topo {
    /// Nodes with 10 on the diagonal and 20 elsewhere (QEMU's and the kernel's default shape).
    fn uniform(nodes: &[(usize, usize)]) -> Topo {
        let n = nodes.len();
        Topo {
            nodes: nodes
                .iter()
                .map(|&(cpus, mib)| NodeSpec { cpus, mib })
                .collect(),
            dist: (0..n)
                .map(|i| (0..n).map(|j| if i == j { 10 } else { 20 }).collect())
                .collect(),
        }
    }

    fn total_cpus(&self) -> usize {
        self.nodes.iter().map(|n| n.cpus).sum()
    }

    /// `--nodes` for boot.sh: `CPUS:MIB,…`.
    fn nodes_arg(&self) -> String {
        let v: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("{}:{}", n.cpus, n.mib))
            .collect();
        v.join(",")
    }

    /// `--dist` for boot.sh: rows joined by `/`.
    fn dist_arg(&self) -> String {
        let rows: Vec<String> = self
            .dist
            .iter()
            .map(|r| {
                let v: Vec<String> = r.iter().map(u32::to_string).collect();
                v.join(",")
            })
            .collect();
        rows.join("/")
    }

    /// The cpulist the guest kernel should show for each node (boot.sh numbers CPUs
    /// contiguously in node order); empty for a memory-only node.
    fn expected_cpulists(&self) -> Vec<String> {
        let mut next = 0;
        self.nodes
            .iter()
            .map(|n| {
                let s = range_list(next, n.cpus);
                next += n.cpus;
                s
            })
            .collect()
    }
}

/// `first-last` (or `first`, or empty) in sysfs's range-list form.
fn range_list(first: usize, count: usize) -> String {
    match count {
        0 => String::new(),
        1 => first.to_string(),
        _ => format!("{}-{}", first, first + count - 1),
    }
}

/// The synthetic model every guest audits, written once per test run: Q4_K (so mirror and
/// shard are checked on K-quant copies), about 2.6 MiB, enough pages (≈ 650) that
/// interleave's per-node counts can be judged to 5%.
fn model_file() -> &'static PathBuf {
    static MODEL: OnceLock<PathBuf> = OnceLock::new();
    MODEL.get_or_init(|| write_synth_typed("vm-model", 4, [2048, 256, 6, 512, 4, 2], Q4K))
}

/// The small synthetic model every guest generates with (TCG emulates SIMD slowly), in Q4_K:
/// every mode must give the host's tokens on K-quant weights.
fn small_model_file() -> &'static PathBuf {
    static MODEL: OnceLock<PathBuf> = OnceLock::new();
    MODEL.get_or_init(|| write_synth_typed("vm-small-model", 4, [384, 256, 2, 256, 4, 2], Q4K))
}

/// A small model written by `gen-model` with `args` (after the path), cached in a folder of
/// its own.
fn gen_model(tag: &str, args: &[&str]) -> PathBuf {
    let path = common::temp_dir(&format!("vm-{tag}-model")).join(format!("{tag}.gguf"));
    let mut all = vec!["gen-model", path.to_str().unwrap()];
    all.extend(args);
    let out = common::locus(&all);
    assert!(out.status.success(), "gen-model {tag}: {out:?}");
    path
}

/// Models of other families, through the architecture seam, Q8_0: mirror and shard must
/// audit local and give the host's tokens for them too. Gemma 3: head norms, post-norms, GELU,
/// a 4-token sliding window on every other layer. Qwen3-MoE: 8 experts, 2 per token, each
/// expert's rows split across the nodes in shard. DeepSeek-V3-like: latent attention with a
/// low-rank query, a leading dense layer, sigmoid routing over expert groups, a shared expert;
/// every mode runs it, and its latent cache keeps a copy on each node with CPUs. An IQ2 mixture
/// of experts (qwen3moe, every weight IQ2_XXS, rows of 256 values): the grid types' copies and
/// expert slices, in every mode. gpt-oss, typed as it ships (MXFP4 experts, Q8_0 for the other
/// matrices, F32 router, biases and sinks): 8 experts, 2 per token, each expert's MXFP4 rows
/// and its row of biases split across the nodes in shard; attention sinks and a 4-token
/// window on every other layer.
fn seam_models() -> &'static [(&'static str, PathBuf); 5] {
    static MODELS: OnceLock<[(&str, PathBuf); 5]> = OnceLock::new();
    MODELS.get_or_init(|| {
        let shape = [
            "--type",
            "Q8_0",
            "--dim",
            "256",
            "--layers",
            "2",
            "--ffn",
            "512",
            "--heads",
            "4",
            "--kv-heads",
            "2",
            "--vocab",
            "384",
            "--head-dim",
            "64",
            "--untied",
        ];
        let with = |extra: &[&'static str]| -> Vec<&'static str> {
            shape.iter().chain(extra).copied().collect()
        };
        [
            (
                "gemma3",
                gen_model(
                    "gemma3",
                    &with(&["--arch", "gemma3", "--window", "4", "--swa-pattern", "2"]),
                ),
            ),
            (
                "qwen3moe",
                gen_model(
                    "qwen3moe",
                    &with(&[
                        "--arch",
                        "qwen3moe",
                        "--experts",
                        "8",
                        "--expert-ffn",
                        "128",
                    ]),
                ),
            ),
            ("deepseek2", gen_model("deepseek2", &with(&LATENT_ARGS))),
            (
                "iq2",
                gen_model(
                    "iq2",
                    &with(&[
                        "--type",
                        "IQ2_XXS",
                        "--arch",
                        "qwen3moe",
                        "--experts",
                        "8",
                        "--expert-ffn",
                        "256",
                    ]),
                ),
            ),
            (
                "gptoss",
                gen_model(
                    "gptoss",
                    &with(&[
                        "--type",
                        "MXFP4",
                        "--arch",
                        "gpt-oss",
                        "--experts",
                        "8",
                        "--expert-ffn",
                        "128",
                        "--window",
                        "4",
                    ]),
                ),
            ),
        ]
    })
}

/// The latent seam model's arguments after the shared shape (its one KV head overrides the
/// shape's two): a latent cell of 64 + 32 values for 4 query heads, V3's routing.
const LATENT_ARGS: [&str; 24] = [
    "--arch",
    "deepseek2",
    "--kv-heads",
    "1",
    "--kv-lora",
    "64",
    "--q-lora",
    "96",
    "--rope-dims",
    "32",
    "--experts",
    "8",
    "--expert-ffn",
    "128",
    "--shared-experts",
    "1",
    "--dense-layers",
    "1",
    "--expert-groups",
    "4",
    "--expert-groups-used",
    "2",
    "--gating",
    "sigmoid",
];

/// The modes checked on the seam models: the copying modes that must stay local.
const SEAM_MODES: [&str; 2] = ["mirror", "shard"];

/// The modes a seam model runs in: every mode for latent attention (its cache's copies
/// depend on the mode's groups) and for the IQ2 model, the copying modes for the others.
fn seam_modes(tag: &str) -> &'static [&'static str] {
    if tag == "deepseek2" || tag == "iq2" {
        &MODES
    } else {
        &SEAM_MODES
    }
}

/// Placement modes every multi-node guest runs: all of them.
const MODES: [&str; 7] = Mode::ALL_NAMES;

/// The `locus run` arguments both sides use (`-t` = the guest's CPU count on both). `--poll 0`:
/// a TCG guest's vCPUs share the host's two cores, where spinning threads only steal time.
fn run_args(model: &str, threads: usize) -> Vec<String> {
    [
        "run", "-m", model, "-p", PROMPT, "-n", N_PREDICT, "--temp", "0", "--poll", "0", "-t",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain([threads.to_string()])
    .collect()
}

/// The guest script: topology facts from sysfs and the model run, each under a `== key` line.
fn guest_script(topo: &Topo) -> String {
    let run = run_args("/small.gguf", topo.total_cpus()).join("' '");
    // The model's name from the shell loop's $t, spliced between the single-quoted words.
    let run_seam = run_args("/'\"$t\"'.gguf", topo.total_cpus()).join("' '");
    let serve_body = format!(r#"{{"prompt":"{PROMPT}","max_tokens":{N_PREDICT},"temperature":0}}"#);
    format!(
        r#"cd /sys/devices/system/node
echo "== online"; cat online
echo "== has_cpu"; cat has_cpu
echo "== has_memory"; cat has_memory
for d in node[0-9]*; do
  i=${{d#node}}
  echo "== cpulist $i"; cat $d/cpulist
  echo "== distance $i"; cat $d/distance
  echo "== memtotal_kb $i"; awk '/MemTotal/ {{print $4}}' $d/meminfo
done
echo "== nproc"; nproc
cd /tmp
locus topo --json >/tmp/topo.json
st=$?; echo "== topo_status"; echo $st
echo "== topo_json"; cat /tmp/topo.json; echo
locus '{run}' >/tmp/run.out
st=$?; echo "== run_status"; echo $st
echo "== run_hex"; od -An -v -tx1 /tmp/run.out
for m in {modes}; do
  locus audit -m /model.gguf --numa $m --poll 0 --json >/tmp/audit.json 2>/tmp/audit.err
  st=$?; echo "== audit_status $m"; echo $st
  echo "== audit $m"; cat /tmp/audit.json; echo
  echo "== audit_err $m"; cat /tmp/audit.err
  locus '{run}' --numa $m >/tmp/run.out 2>/tmp/run.err
  st=$?; echo "== run_status $m"; echo $st
  echo "== run_hex $m"; od -An -v -tx1 /tmp/run.out
  echo "== run_err $m"; cat /tmp/run.err
done
for tm in {seam_runs}; do t=${{tm%%:*}}; for m in ${{tm#*:}}; do
  locus audit -m /$t.gguf --numa $m --poll 0 --json >/tmp/audit.json 2>/tmp/audit.err
  st=$?; echo "== seam_audit_status $t $m"; echo $st
  echo "== seam_audit $t $m"; cat /tmp/audit.json; echo
  echo "== seam_audit_err $t $m"; cat /tmp/audit.err
  locus '{run_seam}' --numa $m >/tmp/run.out 2>/tmp/run.err
  st=$?; echo "== seam_run_status $t $m"; echo $st
  echo "== seam_run_hex $t $m"; od -An -v -tx1 /tmp/run.out
  echo "== seam_run_err $t $m"; cat /tmp/run.err
done; done
for d in /sys/devices/system/node/node*/hugepages/hugepages-2048kB; do echo 4 >$d/nr_hugepages; done
locus audit -m /model.gguf --numa mirror --hugepages --poll 0 --json >/tmp/huge.json 2>/tmp/huge.err
st=$?; echo "== huge_status"; echo $st
echo "== huge"; cat /tmp/huge.json; echo
echo "== huge_err"; cat /tmp/huge.err
ip link set lo up 2>/dev/null || ifconfig lo 127.0.0.1 up
# serve_check MODEL MODE [TAG]: a completion, the placement and cache lines of /metrics, the
# exit status and stderr, under `== serve[TAG] MODE` and `== serve_metrics[TAG] MODE` …
serve_check() {{
  locus serve -m $1 --numa $2 --poll 0 -t {threads} --port 8080 2>/tmp/serve.err &
  pid=$!
  i=0; while ! wget -q -O /dev/null http://127.0.0.1:8080/health 2>/dev/null; do
    i=$((i+1)); [ $i -gt 300 ] && break; sleep 1
  done
  wget -q -O /tmp/serve.json --post-data '{serve_body}' http://127.0.0.1:8080/v1/completions
  echo "== serve$3 $2"; cat /tmp/serve.json; echo
  echo "== serve_metrics$3 $2"; wget -q -O - http://127.0.0.1:8080/metrics | grep -e '^locus_placement' -e '^locus_kv_cache'
  kill -TERM $pid; wait $pid; st=$?; echo "== serve_exit$3 $2"; echo $st
  echo "== serve_err$3 $2"; cat /tmp/serve.err
}}
for m in {serve_modes}; do serve_check /small.gguf $m; done
serve_check /deepseek2.gguf mirror _latent
# The kernel mappings of a shard server of 1 and of 9 slots (256 cells each), under
# `== serve_maps NP`: a slot's cache must not split its mapping head by head.
for np in 1 9; do
  locus serve -m /small.gguf --numa shard --poll 0 -t {threads} -np $np -c $((np*256)) --port 8081 2>/tmp/maps.err &
  pid=$!
  i=0; while ! wget -q -O /dev/null http://127.0.0.1:8081/health 2>/dev/null; do
    i=$((i+1)); [ $i -gt 300 ] && break; sleep 1
  done
  wget -q -O /dev/null --post-data '{serve_body}' http://127.0.0.1:8081/v1/completions
  echo "== serve_maps $np"; wc -l < /proc/$pid/maps
  kill -TERM $pid; wait $pid
done
echo "== end"
"#,
        serve_modes = SERVE_MODES.join(" "),
        threads = topo.total_cpus(),
        modes = MODES.join(" "),
        // 'TAG:MODE MODE…' per model.
        seam_runs = seam_models()
            .iter()
            .map(|(t, _)| format!("'{t}:{}'", seam_modes(t).join(" ")))
            .collect::<Vec<_>>()
            .join(" ")
    )
}

/// One VM at a time: TCG is CPU-heavy and the tests may run on two cores.
static VM_LOCK: Mutex<()> = Mutex::new(());

/// Host greedy output (stdout bytes) for the model at `threads` threads.
fn host_output(threads: usize) -> Vec<u8> {
    host_output_of(small_model_file(), threads)
}

/// Host greedy output (stdout bytes) for `model` at `threads` threads.
fn host_output_of(model: &Path, threads: usize) -> Vec<u8> {
    let model = model.to_str().unwrap().to_string();
    let args = run_args(&model, threads);
    let out = Command::new(env!("CARGO_BIN_EXE_locus"))
        .args(&args)
        .output()
        .expect("cannot start locus");
    assert!(
        out.status.success(),
        "host locus run failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// Boots `topo`, runs the guest script and checks everything it reports.
fn check_topology(name: &str, topo: &Topo) {
    let Some(env) = vm_env(name) else { return };
    let model = model_file();
    let host = host_output(topo.total_cpus());
    // The same tokens whatever the thread count, so "equal to the host" means equal across
    // every node count too.
    assert_eq!(
        host,
        host_output(1),
        "vm {name}: host output depends on the thread count"
    );

    let _one_vm = VM_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let t = Instant::now();
    let out = Command::new(&env.boot)
        .args(["--nodes", &topo.nodes_arg(), "--dist", &topo.dist_arg()])
        .arg("--locus")
        .arg(&env.locus_static)
        .arg("--file")
        .arg(format!("{}:/model.gguf", model.display()))
        .arg("--file")
        .arg(format!("{}:/small.gguf", small_model_file().display()))
        .args(
            seam_models()
                .iter()
                .flat_map(|(t, p)| ["--file".to_string(), format!("{}:/{t}.gguf", p.display())]),
        )
        .args(["--timeout", &BOOT_TIMEOUT_S.to_string()])
        .args(["--", "sh", "-c", &guest_script(topo)])
        .output()
        .expect("cannot start tools/vm/boot.sh");
    let secs = t.elapsed().as_secs_f64();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    eprintln!(
        "vm {name}: {} nodes, {} cpus: boot + run {secs:.1}s\n--- guest stdout ---\n{stdout}--- guest stderr ---\n{stderr}---",
        topo.nodes.len(),
        topo.total_cpus()
    );
    assert!(
        out.status.success(),
        "vm {name}: boot.sh exited with {:?}",
        out.status.code()
    );
    let s = sections(&stdout);
    let get = |k: &str| -> &str {
        s.get(k)
            .map(|v| v.trim_end_matches('\n'))
            .unwrap_or_else(|| panic!("vm {name}: guest printed no '{k}' section"))
    };

    // (1) the guest kernel sees the topology we asked for.
    let n = topo.nodes.len();
    assert_eq!(get("online"), range_list(0, n), "vm {name}: node/online");
    assert_eq!(
        get("nproc"),
        topo.total_cpus().to_string(),
        "vm {name}: nproc"
    );
    let cpulists = topo.expected_cpulists();
    let mut with_cpus = Vec::new();
    for (i, node) in topo.nodes.iter().enumerate() {
        assert_eq!(
            get(&format!("cpulist {i}")),
            cpulists[i],
            "vm {name}: node{i}/cpulist"
        );
        let dist: Vec<String> = topo.dist[i].iter().map(u32::to_string).collect();
        assert_eq!(
            get(&format!("distance {i}")),
            dist.join(" "),
            "vm {name}: node{i}/distance"
        );
        let kb: usize = get(&format!("memtotal_kb {i}"))
            .parse()
            .unwrap_or_else(|e| panic!("vm {name}: node{i} MemTotal: {e}"));
        // The kernel keeps some of each node for itself; most of it must be there.
        assert!(
            kb <= node.mib * 1024 && kb >= node.mib * 1024 * 3 / 4,
            "vm {name}: node{i} MemTotal {kb} kB for {} MiB",
            node.mib
        );
        if node.cpus > 0 {
            with_cpus.push(i);
        }
    }
    let expect_has_cpu = with_cpus
        .iter()
        .map(usize::to_string)
        .collect::<Vec<_>>()
        .join(",");
    assert_eq!(
        compact_list(get("has_cpu")),
        expect_has_cpu,
        "vm {name}: has_cpu (memory-only nodes have no CPUs)"
    );
    assert_eq!(get("has_memory"), range_list(0, n), "vm {name}: has_memory");

    // (2) the static binary's greedy tokens in the guest equal the host's.
    assert_eq!(get("run_status"), "0", "vm {name}: guest locus run failed");
    let guest_run = from_hex(get("run_hex"));
    eprintln!(
        "vm {name}: guest generated {:?}",
        String::from_utf8_lossy(&guest_run)
    );
    assert_eq!(
        String::from_utf8_lossy(&guest_run),
        String::from_utf8_lossy(&host),
        "vm {name}: guest output differs from host"
    );
    assert_eq!(guest_run, host, "vm {name}: guest bytes differ from host");

    // (3) `locus topo --json` in the guest reports the same nodes, CPUs, memory-only flags and
    // distances.
    assert_eq!(
        get("topo_status"),
        "0",
        "vm {name}: guest locus topo failed"
    );
    let json = Json::parse(get("topo_json"))
        .unwrap_or_else(|e| panic!("vm {name}: topo --json is not JSON: {e}"));
    let nodes = json
        .get("nodes")
        .and_then(Json::as_array)
        .expect("topo: nodes");
    assert_eq!(nodes.len(), n, "vm {name}: topo node count");
    let mut next_cpu = 0;
    for (i, (jn, node)) in nodes.iter().zip(&topo.nodes).enumerate() {
        let num = |k: &str| jn.get(k).and_then(Json::as_f64);
        assert_eq!(num("id"), Some(i as f64), "vm {name}: topo node {i} id");
        let cpus: Vec<f64> = jn
            .get("cpus")
            .and_then(Json::as_array)
            .expect("topo: node cpus")
            .iter()
            .filter_map(Json::as_f64)
            .collect();
        let want: Vec<f64> = (next_cpu..next_cpu + node.cpus).map(|c| c as f64).collect();
        next_cpu += node.cpus;
        assert_eq!(cpus, want, "vm {name}: topo node {i} cpus");
        assert_eq!(
            jn.get("memory_only"),
            Some(&Json::Bool(node.cpus == 0)),
            "vm {name}: topo node {i} memory_only"
        );
        let mem = num("mem_total").expect("topo: node mem_total");
        let spec_bytes = (node.mib << 20) as f64;
        assert!(
            mem <= spec_bytes && mem >= spec_bytes * 0.75,
            "vm {name}: topo node {i} mem_total {mem} for {} MiB",
            node.mib
        );
    }
    let dist: Vec<Vec<f64>> = json
        .get("distances")
        .and_then(Json::as_array)
        .expect("topo: distances")
        .iter()
        .map(|r| {
            r.as_array()
                .unwrap()
                .iter()
                .filter_map(Json::as_f64)
                .collect()
        })
        .collect();
    let want: Vec<Vec<f64>> = topo
        .dist
        .iter()
        .map(|r| r.iter().map(|&d| d as f64).collect())
        .collect();
    assert_eq!(dist, want, "vm {name}: topo distances");

    // (4) every placement mode: the audit proves placement, the run gives the host's tokens.
    for mode in MODES {
        assert_eq!(
            get(&format!("run_status {mode}")),
            "0",
            "vm {name}: run --numa {mode} failed: {}",
            get(&format!("run_err {mode}"))
        );
        assert_eq!(
            from_hex(get(&format!("run_hex {mode}"))),
            host,
            "vm {name}: run --numa {mode} generated other tokens than the host"
        );
        assert_eq!(
            get(&format!("audit_status {mode}")),
            "0",
            "vm {name}: audit --numa {mode} failed: {}",
            get(&format!("audit_err {mode}"))
        );
        let a = Json::parse(get(&format!("audit {mode}")))
            .unwrap_or_else(|e| panic!("vm {name}: audit --numa {mode} --json: {e}"));
        check_audit(name, mode, topo, &a);
    }

    // (5) the seam models (Gemma 3, Qwen3-MoE, DeepSeek, IQ2, gpt-oss): mirror and shard local, the host's
    // tokens; the latent model in every mode, its cache a copy per node where threads run on
    // several.
    for (tag, path) in seam_models() {
        let host = host_output_of(path, topo.total_cpus());
        for &mode in seam_modes(tag) {
            let key = |k: &str| get(&format!("seam_{k} {tag} {mode}"));
            assert_eq!(
                key("run_status"),
                "0",
                "vm {name}: {tag} run --numa {mode} failed: {}",
                key("run_err")
            );
            assert_eq!(
                from_hex(key("run_hex")),
                host,
                "vm {name}: {tag} run --numa {mode} generated other tokens than the host"
            );
            assert_eq!(
                key("audit_status"),
                "0",
                "vm {name}: {tag} audit --numa {mode} failed: {}",
                key("audit_err")
            );
            let a = Json::parse(key("audit"))
                .unwrap_or_else(|e| panic!("vm {name}: {tag} audit --numa {mode} --json: {e}"));
            if SEAM_MODES.contains(&mode) {
                check_audit(name, mode, topo, &a);
            }
            if *tag == "deepseek2" {
                check_latent_cache(name, mode, topo, &a);
            }
        }
    }

    // (6) mirror on hugetlb pages reserved in every node's pool: no fallback, same placement.
    assert_eq!(
        get("huge_status"),
        "0",
        "vm {name}: --hugepages: {}",
        get("huge_err")
    );
    assert!(
        !get("huge_err").contains("--hugepages:"),
        "vm {name}: --hugepages fell back: {}",
        get("huge_err")
    );
    let a = Json::parse(get("huge")).expect("hugepages audit JSON");
    check_audit(name, "mirror", topo, &a);

    // (7) `locus serve` in the placement modes that keep one copy per node or one shard per
    // node: the host's tokens over HTTP, locality 1.0 in /metrics for the weights and for the
    // KV cache (each head's keys and values on the node whose threads write them), exit 0 on
    // SIGTERM. The latent model in mirror: its cache a copy per node, all local.
    let latent = &seam_models()[2];
    assert_eq!(latent.0, "deepseek2");
    let latent_host = host_output_of(&latent.1, topo.total_cpus());
    let serves =
        SERVE_MODES
            .iter()
            .map(|&m| (m, "", &host))
            .chain([("mirror", "_latent", &latent_host)]);
    for (m, tag, host) in serves {
        let key = |k: &str| get(&format!("{k}{tag} {m}"));
        assert_eq!(
            key("serve_exit"),
            "0",
            "vm {name}: serve --numa {m}: {}",
            key("serve_err")
        );
        let r = Json::parse(key("serve"))
            .unwrap_or_else(|e| panic!("vm {name}: serve --numa {m}: {e}: {}", key("serve_err")));
        let text = r
            .get("choices")
            .and_then(Json::as_array)
            .and_then(|c| c.first())
            .and_then(|c| c.get("text"))
            .and_then(Json::as_str)
            .unwrap_or_else(|| panic!("vm {name}: serve --numa {m}: no text in {}", key("serve")));
        assert_eq!(
            text,
            String::from_utf8_lossy(host),
            "vm {name}: serve --numa {m}: tokens"
        );
        let metrics = key("serve_metrics");
        assert!(
            metrics.contains(&format!("locus_placement_info{{mode=\"{m}\"}} 1"))
                && metrics.lines().any(|l| l == "locus_placement_locality 1")
                && metrics.lines().any(|l| l == "locus_kv_cache_locality 1"),
            "vm {name}: serve{tag} --numa {m}: /metrics says {metrics}"
        );
        let copies = if tag.is_empty() {
            1
        } else {
            cpu_nodes(topo).len()
        };
        assert!(
            metrics
                .lines()
                .any(|l| l == format!("locus_kv_cache_copies {copies}")),
            "vm {name}: serve{tag} --numa {m}: {copies} cache copies? /metrics says {metrics}"
        );
    }
    check_slot_mappings(name, get("serve_maps 1"), get("serve_maps 9"));
}

/// A slot takes a few kernel mappings on a host of several nodes too: its cache is placed by
/// first touch, not bound head block by head block (which split the mapping at every block,
/// hundreds a slot).
fn check_slot_mappings(name: &str, at_one: &str, at_nine: &str) {
    let count = |v: &str, np: u32| -> usize {
        v.trim()
            .parse()
            .unwrap_or_else(|_| panic!("vm {name}: serve -np {np}: mappings {v:?}"))
    };
    let (one, nine) = (count(at_one, 1), count(at_nine, 9));
    let per_slot = nine.saturating_sub(one) / 8;
    eprintln!("vm {name}: {one} mappings at -np 1, {nine} at -np 9: {per_slot} a slot");
    // Bound per head block before (two layers of two KV heads: sixteen mappings a slot here).
    assert!(
        per_slot <= 2,
        "vm {name}: {one} mappings at -np 1, {nine} at -np 9: {per_slot} a slot"
    );
}

/// The placement modes the VM tests serve in.
const SERVE_MODES: [&str; 2] = ["mirror", "shard"];

/// Node ids of the spec with CPUs, and with memory (all of them).
fn cpu_nodes(topo: &Topo) -> Vec<u32> {
    (0..topo.nodes.len() as u32)
        .filter(|&i| topo.nodes[i as usize].cpus > 0)
        .collect()
}

/// A latent cache's audit in `mode`: one copy for each node whose threads run (one where
/// they run on one node or unpinned), and where there are several, every written page on the
/// node of the threads that write and read its copy.
fn check_latent_cache(name: &str, mode: &str, topo: &Topo, a: &Json) {
    let kv = a.get("kv_cache").expect("audit JSON has kv_cache");
    let copies = kv.get("copies").and_then(Json::as_f64);
    let slots = a
        .get("slots")
        .and_then(Json::as_array)
        .map_or(0, |s| s.len());
    let want = match mode {
        "off" | "isolate" => 1,
        _ => cpu_nodes(topo).len(),
    };
    assert_eq!(slots, want, "vm {name}: deepseek2 {mode}: slots in {a:?}");
    assert_eq!(
        copies,
        Some(want as f64),
        "vm {name}: deepseek2 {mode}: latent cache copies: {kv:?}"
    );
    if want > 1 {
        assert_eq!(
            kv.get("locality").and_then(Json::as_f64),
            Some(1.0),
            "vm {name}: deepseek2 {mode}: latent cache locality: {kv:?}"
        );
        let nodes = match kv.get("bytes_by_node") {
            Some(Json::Obj(m)) => m.len(),
            other => panic!("vm {name}: kv_cache bytes_by_node {other:?}"),
        };
        assert_eq!(
            nodes, want,
            "vm {name}: deepseek2 {mode}: a latent copy on every node: {kv:?}"
        );
    }
}

/// `pages_by_node` of a copy as (node, pages) pairs.
fn pages_by_node(c: &Json) -> Vec<(u32, f64)> {
    match c.get("pages_by_node") {
        Some(Json::Obj(kv)) => kv
            .iter()
            .map(|(k, v)| (k.parse().unwrap(), v.as_f64().unwrap()))
            .collect(),
        other => panic!("pages_by_node is not an object: {other:?}"),
    }
}

/// What each mode's audit must show in a guest with room for every copy.
fn check_audit(name: &str, mode: &str, topo: &Topo, a: &Json) {
    let num = |v: &Json, k: &str| v.get(k).and_then(Json::as_f64);
    let effective = match a.get("mode") {
        Some(Json::Str(m)) => m.clone(),
        other => panic!("vm {name}: audit {mode}: mode {other:?}"),
    };
    let want = if mode == "auto" { "mirror" } else { mode };
    assert_eq!(
        effective, want,
        "vm {name}: audit --numa {mode} ran as {effective}"
    );
    let copies = a.get("copies").and_then(Json::as_array).expect("copies");
    assert!(!copies.is_empty(), "vm {name}: audit {mode}: no copies");
    // The KV cache: where threads run on known nodes, every written page is on the node of
    // the threads that compute its head.
    if matches!(want, "mirror" | "shard" | "isolate") {
        let kv = a.get("kv_cache").expect("audit JSON has kv_cache");
        let written: f64 = match kv.get("bytes_by_node") {
            Some(Json::Obj(m)) => m.iter().map(|(_, v)| v.as_f64().unwrap()).sum(),
            other => panic!("vm {name}: kv_cache bytes_by_node {other:?}"),
        };
        assert!(
            written > 0.0,
            "vm {name}: {mode}: no KV page written: {kv:?}"
        );
        assert_eq!(
            num(kv, "locality"),
            Some(1.0),
            "vm {name}: {mode}: KV cache locality: {kv:?}"
        );
    }
    let locality = num(a, "locality");
    let on_own_node = |kind: &str| {
        let mut nodes_seen = std::collections::BTreeSet::new();
        for c in copies {
            let node = num(c, "node")
                .unwrap_or_else(|| panic!("vm {name}: {mode}: copy without node"))
                as u32;
            nodes_seen.insert(node);
            assert_eq!(
                c.get("kind"),
                Some(&Json::Str(kind.into())),
                "vm {name}: {mode}: kind"
            );
            let pages = num(c, "pages").unwrap();
            assert_eq!(
                pages_by_node(c),
                vec![(node, pages)],
                "vm {name}: {mode}: copy of {:?} for node {node} is not wholly on it",
                c.get("tensor")
            );
            assert_eq!(
                num(c, "unknown_pages"),
                Some(0.0),
                "vm {name}: {mode}: unknown pages"
            );
        }
        nodes_seen
    };
    match want {
        "mirror" => {
            let seen = on_own_node("copy");
            assert_eq!(
                seen.into_iter().collect::<Vec<_>>(),
                cpu_nodes(topo),
                "vm {name}: mirror nodes"
            );
            assert_eq!(locality, Some(1.0), "vm {name}: mirror locality");
        }
        "shard" => {
            let seen = on_own_node("shard");
            assert_eq!(
                seen.into_iter().collect::<Vec<_>>(),
                cpu_nodes(topo),
                "vm {name}: shard nodes"
            );
            assert_eq!(locality, Some(1.0), "vm {name}: shard locality");
            // The shards of each tensor tile its rows exactly once.
            let mut rows: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
            for c in copies {
                let r = c.get("rows").and_then(Json::as_array).unwrap();
                let t = match c.get("tensor") {
                    Some(Json::Str(t)) => t.clone(),
                    _ => panic!("tensor name"),
                };
                rows.entry(t)
                    .or_default()
                    .push((r[0].as_f64().unwrap(), r[1].as_f64().unwrap()));
            }
            for (t, mut r) in rows {
                r.sort_by(|a, b| a.partial_cmp(b).unwrap());
                assert_eq!(r[0].0, 0.0, "vm {name}: shard {t} starts at row 0");
                for w in r.windows(2) {
                    assert_eq!(w[0].1, w[1].0, "vm {name}: shard {t} rows not contiguous");
                }
            }
        }
        "isolate" => {
            let seen = on_own_node("copy");
            assert_eq!(seen.len(), 1, "vm {name}: isolate uses one node");
            assert_eq!(locality, Some(1.0), "vm {name}: isolate locality");
        }
        "interleave" => {
            let by_node: Vec<(u32, f64)> = match a.get("bytes_by_node") {
                Some(Json::Obj(kv)) => kv
                    .iter()
                    .map(|(k, v)| (k.parse().unwrap(), v.as_f64().unwrap()))
                    .collect(),
                other => panic!("bytes_by_node {other:?}"),
            };
            let ids: Vec<u32> = by_node.iter().map(|x| x.0).collect();
            let all: Vec<u32> = (0..topo.nodes.len() as u32).collect();
            assert_eq!(
                ids, all,
                "vm {name}: interleave reaches every node with memory"
            );
            let mean = by_node.iter().map(|x| x.1).sum::<f64>() / by_node.len() as f64;
            for (n, b) in &by_node {
                assert!(
                    (b - mean).abs() <= 0.05 * mean,
                    "vm {name}: interleave node {n} holds {b} bytes, mean {mean}"
                );
            }
            let l = locality.expect("interleave locality");
            let expect = 1.0 / topo.nodes.len() as f64;
            assert!(
                (l - expect).abs() < 0.1,
                "vm {name}: interleave locality {l}, expected ≈ {expect}"
            );
        }
        _ => {
            // off and distribute read the page cache: pages wherever they landed.
            assert_eq!(
                copies.len(),
                copies
                    .iter()
                    .filter(|c| c.get("kind") == Some(&Json::Str("file".into())))
                    .count()
            );
        }
    }
}

/// `od -An -tx1` output back to bytes.
fn from_hex(s: &str) -> Vec<u8> {
    s.split_whitespace()
        .map(|h| u8::from_str_radix(h, 16).expect("od hex byte"))
        .collect()
}

/// A sysfs range list (`0-1,3`) expanded to comma-separated ids (`0,1,3`).
fn compact_list(s: &str) -> String {
    let mut ids = Vec::new();
    for part in s.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (usize, usize) = (a.parse().unwrap(), b.parse().unwrap());
                ids.extend(a..=b);
            }
            None => ids.push(part.parse().unwrap()),
        }
    }
    ids.iter()
        .map(usize::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

#[test]
fn vm_two_nodes() {
    check_topology("two_nodes", &Topo::uniform(&[(2, 256), (1, 256)]));
}

#[test]
fn vm_four_nodes() {
    check_topology("four_nodes", &Topo::uniform(&[(1, 256); 4]));
}

#[test]
fn vm_eight_nodes() {
    check_topology("eight_nodes", &Topo::uniform(&[(1, 256); 8]));
}

#[test]
fn vm_memory_only_node() {
    // Two sockets and a CXL-like memory-only node that is farther from both.
    let topo = Topo {
        nodes: vec![
            NodeSpec { cpus: 2, mib: 256 },
            NodeSpec { cpus: 2, mib: 256 },
            NodeSpec { cpus: 0, mib: 256 },
        ],
        dist: vec![vec![10, 21, 30], vec![21, 10, 30], vec![30, 30, 10]],
    };
    check_topology("memory_only_node", &topo);
}

#[test]
fn topo_args_and_lists() {
    let t = Topo::uniform(&[(2, 256), (0, 512), (1, 256)]);
    assert_eq!(t.nodes_arg(), "2:256,0:512,1:256");
    assert_eq!(t.dist_arg(), "10,20,20/20,10,20/20,20,10");
    assert_eq!(t.expected_cpulists(), ["0-1", "", "2"]);
    assert_eq!(compact_list("0-2,5\n"), "0,1,2,5");
    let s = sections("junk\n== a\nx\ny\n== b\n\n== c\n");
    assert_eq!(s["a"], "x\ny\n");
    assert_eq!(s["b"], "\n");
    assert_eq!(s["c"], "");
    assert_eq!(from_hex(" 61 0a\n ff\n"), [0x61, 0x0a, 0xff]);
    let j = Json::parse(r#"{"a": [1, -2.5e1, true, null], "s": "x\"\u00e9y", "o": {}}"#).unwrap();
    assert_eq!(
        j.get("a").and_then(Json::as_array).unwrap()[1].as_f64(),
        Some(-25.0)
    );
    assert_eq!(j.get("s"), Some(&Json::Str("x\"éy".into())));
    assert_eq!(j.get("o"), Some(&Json::Obj(vec![])));
    assert!(Json::parse("[1,").is_err());
}

/// A model of about 71 MiB for the node-too-small VM: a full copy with locus's margin (87 MiB)
/// needs more than its small node's 80 MiB in all, so the verdict cannot hang on how much the
/// guest's kernel happens to leave free there (a 58 MiB model, 74 MiB with the margin, once
/// fitted a node with 75 MiB free), while half of it fits.
fn big_model_file() -> &'static PathBuf {
    static MODEL: OnceLock<PathBuf> = OnceLock::new();
    MODEL.get_or_init(|| write_synth("vm-big-model", 5, [4096, 512, 20, 1536, 4, 2]))
}

/// A mixture of experts too large for node 1 of [`vm_node_too_small_for_a_copy_of_experts`]
/// (24 experts of 512 in 4 layers: 84 MiB, a copy needs 100 with its margin) whose active
/// bytes (2 of 24 experts per token) would fit it several times over: `auto` must size a copy
/// with every expert.
fn big_moe_file() -> &'static PathBuf {
    static MODEL: OnceLock<PathBuf> = OnceLock::new();
    MODEL.get_or_init(|| {
        gen_model(
            "bigmoe",
            &[
                "--arch",
                "qwen3moe",
                "--type",
                "Q8_0",
                "--dim",
                "512",
                "--layers",
                "4",
                "--ffn",
                "1536",
                "--heads",
                "4",
                "--kv-heads",
                "2",
                "--vocab",
                "4096",
                "--experts",
                "24",
                "--experts-used",
                "2",
                "--expert-ffn",
                "512",
                "--untied",
            ],
        )
    })
}

#[test]
fn vm_node_too_small_for_a_copy() {
    node_too_small("node_too_small", big_model_file());
}

/// The same with a mixture of experts: `auto` counts all experts.
#[test]
fn vm_node_too_small_for_a_copy_of_experts() {
    node_too_small("node_too_small_moe", big_moe_file());
}

/// Node 1 (80 MiB) cannot hold a copy of `model`: auto picks shard, `mirror --strict` exits
/// 2, plain mirror falls back to shard and says so.
fn node_too_small(name: &str, model: &Path) {
    let Some(env) = vm_env(name) else { return };
    let topo = Topo::uniform(&[(1, 512), (1, 80)]);
    let script = r#"cd /tmp
locus audit -m /big.gguf --numa auto --poll 0 --json >/tmp/auto.json 2>/tmp/auto.err
st=$?; echo "== auto_status"; echo $st
echo "== auto"; cat /tmp/auto.json; echo
echo "== auto_err"; cat /tmp/auto.err
locus audit -m /big.gguf --numa mirror --strict >/dev/null 2>/tmp/strict.err
st=$?; echo "== strict_status"; echo $st
echo "== strict_err"; cat /tmp/strict.err
locus run -m /big.gguf -p hello -n 1 --temp 0 --poll 0 --numa mirror >/dev/null 2>/tmp/mirror.err
st=$?; echo "== mirror_status"; echo $st
echo "== mirror_err"; cat /tmp/mirror.err
echo "== end"
"#;
    let _one_vm = VM_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let out = Command::new(&env.boot)
        .args(["--nodes", &topo.nodes_arg()])
        .arg("--locus")
        .arg(&env.locus_static)
        .arg("--file")
        .arg(format!("{}:/big.gguf", model.display()))
        .args(["--timeout", &BOOT_TIMEOUT_S.to_string()])
        .args(["--", "sh", "-c", script])
        .output()
        .expect("cannot start tools/vm/boot.sh");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    eprintln!(
        "vm {name}:\n{stdout}--- stderr ---\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "vm {name}: boot failed");
    let s = sections(&stdout);
    let get = |k: &str| {
        s.get(k)
            .map(|v| v.trim_end_matches('\n'))
            .unwrap_or_else(|| panic!("vm {name}: no '{k}'"))
    };
    assert_eq!(
        get("auto_status"),
        "0",
        "vm {name}: auto audit failed: {}",
        get("auto_err")
    );
    let a = Json::parse(get("auto")).expect("auto audit JSON");
    assert_eq!(
        a.get("mode"),
        Some(&Json::Str("shard".into())),
        "vm {name}: auto must choose shard when node 1 cannot hold a copy"
    );
    check_audit(name, "shard", &topo, &a);
    assert_eq!(
        get("strict_status"),
        "2",
        "vm {name}: mirror --strict must fail with exit 2"
    );
    let strict = get("strict_err");
    assert!(
        strict.contains("--strict") && strict.contains("node 1") && !strict.contains("panicked"),
        "vm {name}: mirror --strict message: {strict}"
    );
    assert_eq!(
        get("mirror_status"),
        "0",
        "vm {name}: mirror without --strict falls back"
    );
    assert!(
        get("mirror_err").contains("using shard instead"),
        "vm {name}: the fallback is announced: {}",
        get("mirror_err")
    );
}
