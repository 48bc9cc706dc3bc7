//! Placement on this host, end to end through the binary: every `--numa` mode generates the
//! same greedy tokens and its audit shows every copied page where the mode puts it (on a
//! one-node host: all on node 0, locality 1.0); the same holds in a seccomp'd "container"
//! where the NUMA system calls fail with EPERM (first touch and /proc/self/numa_maps take over,
//! and a warning says so); and the faults: an allocation failing midway, hugepages missing,
//! threads that cannot be pinned, bad flags. The checks adapt to the host's nodes; the
//! multi-node placement itself is asserted in QEMU guests with known topologies (tests/vm.rs).
//!
//! The mode and container tests use the real SmolLM2 model (its page cache is measured); the
//! fault and flag tests need only some tokens, so they use a generated model and always run.

mod common;
#[path = "common/seccomp.rs"]
mod seccomp;

use locus::json::Json;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

const MODES: [&str; 7] = locus::placement::Mode::ALL_NAMES;
/// Modes that copy the weights out of the file.
const COPYING: [&str; 4] = ["interleave", "isolate", "mirror", "shard"];

/// The real model's tensors: 30 layers × 7 matrices + the tied embedding/output.
const SMOLLM2_TENSORS: usize = 211;

/// A generated model for the tests that need only some tokens: untied, two layers, written
/// once per test binary.
fn generated_model() -> &'static PathBuf {
    static MODEL: OnceLock<PathBuf> = OnceLock::new();
    MODEL.get_or_init(|| common::write_synth("placement-synth", 11, [512, 128, 2, 256, 4, 2]))
}

/// A private copy of the small model for one test, so its page cache is that test's to
/// measure (a file another process maps cannot be dropped from the cache). Deleted on drop.
struct PrivateModel(PathBuf);

impl std::ops::Deref for PrivateModel {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl Drop for PrivateModel {
    fn drop(&mut self) {
        if let Some(dir) = self.0.parent() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

fn private_model(tag: &str) -> Option<PrivateModel> {
    let src = common::model_path("SmolLM2-135M-Instruct.Q4_1.gguf")?;
    let dst = common::temp_dir(tag).join("model.gguf");
    std::fs::copy(src, &dst).expect("cannot copy the model");
    Some(PrivateModel(dst))
}

fn locus(args: &[&str], env: &[(&str, &str)], container: bool) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_locus"));
    cmd.args(args).env_remove("LOCUS_FAULT");
    for (k, v) in env {
        cmd.env(k, v);
    }
    if container {
        seccomp::refuse_numa_syscalls(&mut cmd);
    }
    cmd.output().expect("cannot start locus")
}

fn run(model: &Path, extra: &[&str], env: &[(&str, &str)], container: bool) -> Output {
    let m = model.to_str().unwrap();
    let mut args = vec![
        "run",
        "-m",
        m,
        "-p",
        "The capital of France is",
        "-n",
        "12",
        "--temp",
        "0",
        "-t",
        "2",
    ];
    args.extend_from_slice(extra);
    locus(&args, env, container)
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The reference tokens: the file-backed, unpinned run.
fn baseline(model: &Path) -> Vec<u8> {
    let out = run(model, &["--numa", "off"], &[], false);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(!out.stdout.is_empty());
    out.stdout
}

fn audit(model: &Path, mode: &str, container: bool) -> Json {
    let m = model.to_str().unwrap();
    let out = locus(
        &["audit", "-m", m, "--numa", mode, "-t", "2", "--json"],
        &[],
        container,
    );
    assert!(
        out.status.success(),
        "audit --numa {mode}: {}",
        text(&out.stderr)
    );
    Json::parse(text(&out.stdout).trim())
        .unwrap_or_else(|e| panic!("audit --numa {mode} --json: {e}"))
}

fn num(v: &Json, k: &str) -> f64 {
    v.get(k)
        .and_then(Json::as_f64)
        .unwrap_or_else(|| panic!("no number '{k}'"))
}

fn strings(v: &Json, k: &str) -> Vec<String> {
    v.get(k)
        .and_then(Json::as_array)
        .unwrap_or_else(|| panic!("no array '{k}'"))
        .iter()
        .map(|s| s.as_str().unwrap().to_string())
        .collect()
}

/// The node a copy was placed on, as the audit's keys spell it (`None` for one spread over
/// nodes or the file mapping).
fn node_key(c: &Json) -> Option<String> {
    c.get("node")
        .and_then(Json::as_f64)
        .map(|n| format!("{}", n as u32))
}

/// What every audit of the real model must show on this host, whatever its nodes: the mode
/// asked for (on one node `auto` means `off` for this Q4_1 model), every tensor listed, each
/// copy of mirror, shard and isolate wholly on its node with locality 1.0, interleave's pages
/// over nodes with memory (more than one where there are several), and on a one-node host
/// everything on that node with locality 1.0.
fn check_audit(mode: &str, a: &Json, container: bool) {
    let nodes = a.get("nodes").and_then(Json::as_array).expect("nodes");
    let multi = nodes.len() > 1;
    let effective = a.get("mode").and_then(Json::as_str).expect("mode");
    match mode {
        "auto" if !multi => assert_eq!(effective, "off", "auto on one node"),
        "auto" => assert!(
            MODES.contains(&effective) && effective != "auto",
            "{effective}"
        ),
        _ => assert_eq!(effective, mode, "{mode} ran as {effective}"),
    }
    let locality = num(a, "locality");
    assert!(
        (0.0..=1.0).contains(&locality),
        "{mode}: locality {locality}"
    );
    if !multi || ["mirror", "shard", "isolate"].contains(&effective) {
        assert_eq!(locality, 1.0, "{mode}: locality");
    }
    // The KV cache a run would use, after one token: each head's pages on its writers' node,
    // or (where move_pages is refused) honestly not located.
    let kv = a.get("kv_cache").expect("kv_cache");
    let written: f64 = match kv.get("bytes_by_node") {
        Some(Json::Obj(m)) => m.iter().map(|(_, v)| v.as_f64().unwrap()).sum(),
        other => panic!("{mode}: kv_cache bytes_by_node {other:?}"),
    };
    if container {
        assert_eq!(written, 0.0, "{mode}: KV pages located without move_pages");
        assert_eq!(kv.get("locality"), Some(&Json::Null), "{mode}: {kv:?}");
    } else {
        assert!(written > 0.0, "{mode}: no KV page written: {kv:?}");
        if !multi || ["mirror", "shard", "isolate"].contains(&effective) {
            assert_eq!(num(kv, "locality"), 1.0, "{mode}: KV locality: {kv:?}");
        }
    }
    let source = if container { "numa_maps" } else { "move_pages" };
    assert_eq!(
        a.get("page_source"),
        Some(&Json::Str(source.into())),
        "{mode}"
    );
    let copies = a.get("copies").and_then(Json::as_array).unwrap();
    let mut tensors: Vec<&str> = copies
        .iter()
        .map(|c| c.get("tensor").and_then(Json::as_str).unwrap())
        .collect();
    tensors.sort_unstable();
    tensors.dedup();
    assert_eq!(
        tensors.len(),
        SMOLLM2_TENSORS,
        "{mode}: every tensor listed"
    );
    if !multi {
        assert_eq!(
            copies.len(),
            SMOLLM2_TENSORS,
            "{mode}: one entry per tensor"
        );
    }
    if COPYING.contains(&effective) {
        let mut nodes_with_pages = std::collections::BTreeSet::new();
        for c in copies {
            let what = format!("{mode}: {:?} on node {:?}", c.get("tensor"), node_key(c));
            assert_eq!(num(c, "unknown_pages"), 0.0, "{what}");
            let by_node = match c.get("pages_by_node") {
                Some(Json::Obj(kv)) => kv,
                _ => panic!("pages_by_node"),
            };
            let total: f64 = by_node.iter().map(|(_, v)| v.as_f64().unwrap()).sum();
            assert_eq!(total, num(c, "pages"), "{what}: every page found");
            nodes_with_pages.extend(by_node.iter().map(|(k, _)| k.clone()));
            if effective != "interleave" || !multi {
                assert_eq!(by_node.len(), 1, "{what}: {by_node:?}");
            }
            if effective != "interleave" {
                let own = node_key(c).unwrap_or_else(|| panic!("{what}: a copy has a node"));
                assert_eq!(by_node[0].0, own, "{what}: on its own node");
            }
        }
        if effective == "interleave" && multi {
            assert!(nodes_with_pages.len() > 1, "{mode}: {nodes_with_pages:?}");
        }
        // The file's weight pages were released once copied.
        assert!(
            num(a, "page_cache_bytes") < 0.1 * num(a, "file_bytes"),
            "{mode}: page cache still holds {} of {} bytes",
            num(a, "page_cache_bytes"),
            num(a, "file_bytes")
        );
    }
    if container {
        let w = strings(a, "warnings");
        assert!(
            w.iter().any(|w| w.contains("move_pages is refused")),
            "{mode}: {w:?}"
        );
    }
}

#[test]
fn every_mode_gives_the_same_tokens_and_a_local_audit() {
    let Some(model) = private_model("placement-modes") else {
        return;
    };
    let model = &model;
    let base = baseline(model);
    for mode in MODES {
        let out = run(model, &["--numa", mode], &[], false);
        assert!(out.status.success(), "{mode}: {}", text(&out.stderr));
        assert_eq!(
            text(&out.stdout),
            text(&base),
            "--numa {mode} changed the tokens"
        );
        check_audit(mode, &audit(model, mode, false), false);
    }
}

#[test]
fn container_without_numa_syscalls_runs_every_mode() {
    let Some(model) = private_model("placement-container") else {
        return;
    };
    let model = &model;
    let base = baseline(model);
    for mode in MODES {
        let out = run(model, &["--numa", mode], &[], true);
        let err = text(&out.stderr);
        assert!(out.status.success(), "{mode} under seccomp: {err}");
        assert!(!err.contains("panicked"), "{err}");
        assert_eq!(
            text(&out.stdout),
            text(&base),
            "--numa {mode} under seccomp"
        );
        if COPYING.contains(&mode) {
            let lines: Vec<&str> = err
                .lines()
                .filter(|l| l.contains("mbind is refused"))
                .collect();
            assert_eq!(
                lines.len(),
                1,
                "{mode}: one line says what was refused: {err}"
            );
        }
        check_audit(mode, &audit(model, mode, true), true);
    }
}

#[test]
fn allocation_failing_midway_falls_back_or_fails_under_strict() {
    let model = generated_model();
    let base = baseline(model);
    // The second region fails: mirror → shard → … each released and retried, down to the file.
    let out = run(
        model,
        &["--numa", "mirror"],
        &[("LOCUS_FAULT", "alloc:0")],
        false,
    );
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("ENOMEM") && err.contains("falling back to shard"),
        "{err}"
    );
    assert_eq!(out.stdout, base);
    let out = run(
        model,
        &["--numa", "mirror", "--strict"],
        &[("LOCUS_FAULT", "alloc:0")],
        false,
    );
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("--strict") && err.contains("ENOMEM"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(
        out.stdout.is_empty(),
        "nothing generated after a strict failure"
    );
}

#[test]
fn missing_hugepages_fall_back_loudly() {
    let model = generated_model();
    let base = baseline(model);
    let fault = [("LOCUS_FAULT", "hugepages")];
    let out = run(model, &["--numa", "mirror", "--hugepages"], &fault, false);
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("--hugepages: mmap failed: ENOMEM"), "{err}");
    assert_eq!(out.stdout, base);
    let out = run(
        model,
        &["--numa", "mirror", "--hugepages", "--strict"],
        &fault,
        false,
    );
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
}

#[test]
fn threads_that_cannot_be_pinned_are_reported() {
    let model = generated_model();
    let base = baseline(model);
    let out = run(
        model,
        &["--numa", "mirror"],
        &[("LOCUS_FAULT", "pin")],
        false,
    );
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("2 of 2 threads could not be pinned"), "{err}");
    assert_eq!(out.stdout, base);
}

#[test]
fn bad_placement_flags_are_one_line_errors() {
    let model = generated_model();
    let m = model.to_str().unwrap();
    for (args, want) in [
        (
            vec!["run", "-m", m, "-p", "x", "--numa", "everywhere"],
            "unknown mode 'everywhere'",
        ),
        (
            vec![
                "run",
                "-m",
                m,
                "-p",
                "x",
                "--numa",
                "isolate",
                "--numa-node",
                "9",
            ],
            "no such online node",
        ),
        (
            vec!["audit", "-m", m, "--pin", "socket"],
            "--pin: unknown value 'socket'",
        ),
        (
            vec!["audit", "--numa", "mirror"],
            "audit: -m FILE is required",
        ),
    ] {
        let out = locus(&args, &[], false);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: one line: {err}");
    }
}

/// A generated model of another family (through the architecture seam), written once.
fn family_model(arch: &'static str) -> PathBuf {
    let mut extra = vec!["--arch", arch, "--head-dim", "128"];
    if arch == "gemma3" {
        // A window shorter than the prompt plus the tokens generated, on every other layer.
        extra.extend(["--window", "4", "--swa-pattern", "2"]);
    }
    if arch == "deepseek2" {
        // Latent attention (one latent head every query head reads) and V3's mixture.
        extra = vec!["--arch", arch, "--head-dim", "96", "--kv-heads", "1"];
        extra.extend([
            "--experts",
            "8",
            "--experts-used",
            "2",
            "--expert-ffn",
            "128",
        ]);
        extra.extend(["--dense-layers", "1", "--gating", "sigmoid", "--probs-bias"]);
    }
    if arch == "qwen3moe" {
        extra.extend([
            "--experts",
            "8",
            "--experts-used",
            "2",
            "--expert-ffn",
            "128",
        ]);
    }
    small_model(arch, "Q8_0", "4", "600", &extra)
}

/// `locus gen-model` of an untied model 256 wide (FFN 512, 4 heads, 2 KV heads) of `layers`
/// layers and a `vocab`-token vocabulary, its matrices in `ty`, with `extra` arguments.
fn small_model(tag: &str, ty: &str, layers: &str, vocab: &str, extra: &[&str]) -> PathBuf {
    let path = common::temp_dir(&format!("placement-{tag}")).join(format!("{tag}.gguf"));
    let mut args = vec![
        "gen-model",
        path.to_str().unwrap(),
        "--type",
        ty,
        "--dim",
        "256",
    ];
    args.extend([
        "--layers",
        layers,
        "--ffn",
        "512",
        "--heads",
        "4",
        "--kv-heads",
        "2",
    ]);
    args.extend(["--vocab", vocab, "--untied"]);
    args.extend(extra);
    let out = common::locus(&args);
    assert!(out.status.success(), "gen-model {tag}: {out:?}");
    path
}

#[test]
fn every_mode_runs_qwen3_gemma3_qwen3moe_and_deepseek2_with_the_same_tokens() {
    for arch in ["qwen3", "gemma3", "qwen3moe", "deepseek2"] {
        let model = family_model(arch);
        let base = baseline(&model);
        for mode in MODES {
            let out = run(&model, &["--numa", mode], &[], false);
            assert!(out.status.success(), "{arch} {mode}: {}", text(&out.stderr));
            assert_eq!(
                text(&out.stdout),
                text(&base),
                "{arch}: --numa {mode} changed the tokens"
            );
            let a = audit(&model, mode, false);
            let multi = a.get("nodes").and_then(Json::as_array).unwrap().len() > 1;
            let effective = a.get("mode").and_then(Json::as_str).unwrap().to_string();
            if !multi || ["mirror", "shard", "isolate"].contains(&effective.as_str()) {
                assert_eq!(num(&a, "locality"), 1.0, "{arch} {mode}: locality");
            }
            // Every matrix of the family is placed and audited: 4 layers × 7 (a mixture of
            // experts: 4 attention matrices, the router and 8 experts × 3), the embedding and
            // the untied head.
            //
            // deepseek2: latent attention's q, kv_a, o and a matrix per head (4) of attn_k_b
            // and attn_v_b; a dense first layer, then the router, 8 experts × 3 and the
            // shared expert's 3.
            let latent = 3 + 4 + 4;
            let matrices = match arch {
                "qwen3moe" => 4 * (4 + 1 + 8 * 3),
                "deepseek2" => 4 * latent + 3 + 3 * (1 + 8 * 3 + 3),
                _ => 4 * 7,
            };
            let copies = a.get("copies").and_then(Json::as_array).unwrap();
            let mut tensors: Vec<&str> = copies
                .iter()
                .map(|c| c.get("tensor").and_then(Json::as_str).unwrap())
                .collect();
            tensors.sort_unstable();
            tensors.dedup();
            assert_eq!(
                tensors.len(),
                matrices + 2,
                "{arch} {mode}: every matrix listed"
            );
        }
        let _ = std::fs::remove_dir_all(model.parent().unwrap());
    }
}

/// Every type the kernels read packed (Q4_0, Q4_K, IQ4_XS, Q6_K, Q5_K on the AVX2 and AVX-512
/// tiers): a generated model (untied, so the embedding is a matrix of that type too, read row
/// by row and never packed) gives the same tokens from `mirror`'s copy as from the file, and
/// its audit names the packed layout wherever the tier packs (the scalar tier never does).
#[test]
fn packed_copies_of_every_packed_type_give_the_file_tokens() {
    for ty in ["Q4_0", "Q4_K", "IQ4_XS", "Q6_K", "Q5_K"] {
        let path = small_model(&format!("packed-{ty}"), ty, "2", "512", &[]);
        let base = baseline(&path);
        let out = run(&path, &["--numa", "mirror"], &[], false);
        assert!(out.status.success(), "{ty} mirror: {}", text(&out.stderr));
        assert_eq!(
            text(&out.stdout),
            text(&base),
            "{ty}: the packed copy changed the tokens"
        );
        let packs =
            locus::kernels::Kernels::detect().is_ok_and(|k| k.tier != locus::kernels::Tier::Scalar);
        let a = audit(&path, "mirror", false);
        let copies = a.get("copies").and_then(Json::as_array).unwrap();
        let layouts: Vec<(&str, &str)> = copies
            .iter()
            .map(|c| {
                let s = |k: &str| c.get(k).and_then(Json::as_str).unwrap();
                (s("tensor"), s("layout"))
            })
            .collect();
        let embd = layouts
            .iter()
            .find(|(t, _)| *t == "token_embd.weight")
            .unwrap();
        assert_eq!(
            embd.1, "rows",
            "{ty}: the embedding is read row by row, never packed"
        );
        let packed = layouts.iter().filter(|(_, l)| *l != "rows").count();
        if packs {
            assert_eq!(
                packed,
                layouts.len() - 1,
                "{ty}: all but the embedding packed: {layouts:?}"
            );
        }
        let _ = std::fs::remove_dir_all(path.parent().unwrap());
    }
}

/// The pages of `path` now in the page cache (`mincore` over a mapping this test never reads).
fn resident_bytes(map: &memmap2::Mmap) -> usize {
    // SAFETY: sysconf has no preconditions.
    let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap();
    let mut vec = vec![0u8; map.len().div_ceil(page)];
    // SAFETY: the mapping is `map.len()` bytes from a page-aligned start, and `vec` has one
    // byte per page of it, as mincore writes.
    let r = unsafe {
        libc::mincore(
            map.as_ptr() as *mut libc::c_void,
            map.len(),
            vec.as_mut_ptr(),
        )
    };
    assert_eq!(r, 0, "mincore: {}", std::io::Error::last_os_error());
    vec.iter().filter(|&&b| b & 1 != 0).count() * page
}

/// The page cache seen while `locus run` places a mirror copy of a generated model of many
/// small matrices (`layers` layers of 1024 × 2048 Q4_0: a megabyte each, smaller than the page
/// cache's largest folios), polled with `mincore`, the child stopped for each poll, until it
/// exits.
struct Watch {
    /// The file's and its header's sizes.
    len: usize,
    header: usize,
    /// Resident bytes at each poll, and after the process exited.
    polls: Vec<usize>,
    after: usize,
}

impl Watch {
    fn describe(&self) -> String {
        let peak = self.polls.iter().max().copied().unwrap_or(0);
        format!(
            "{} byte file, {} byte header: peak {peak}, after {}, {} polls",
            self.len,
            self.header,
            self.after,
            self.polls.len()
        )
    }
}

/// How long a watched `locus run` may take, from start to exit: far beyond what it needs.
const PATIENCE: Duration = Duration::from_secs(300);
/// How long the poll sleeps between two polls of a watched child, which runs meanwhile (for as
/// long as the poll's waking takes to get the CPU back: a scheduler tick or so).
const STEP: Duration = Duration::from_micros(200);

/// Sends `sig` to `child`.
fn signal(child: &std::process::Child, sig: libc::c_int) {
    // SAFETY: signalling our own child, not yet reaped.
    assert_eq!(unsafe { libc::kill(child.id() as i32, sig) }, 0);
}

/// The calling thread pinned to the first CPU it may run on (and so every child it starts
/// meanwhile); its former CPUs again when dropped.
struct OnOneCpu(libc::cpu_set_t);

impl OnOneCpu {
    fn pin() -> OnOneCpu {
        // SAFETY: cpu_set_t is plain bits, for which all zeros is the empty set.
        let mut allowed: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        // SAFETY: sched_getaffinity fills at most the size given, that of `allowed`.
        let r =
            unsafe { libc::sched_getaffinity(0, std::mem::size_of_val(&allowed), &mut allowed) };
        assert_eq!(
            r,
            0,
            "sched_getaffinity: {}",
            std::io::Error::last_os_error()
        );
        let cpu = (0..libc::CPU_SETSIZE as usize)
            // SAFETY: `c` is below CPU_SETSIZE, the set's size in bits.
            .find(|&c| unsafe { libc::CPU_ISSET(c, &allowed) })
            .expect("this thread may run on some CPU");
        // SAFETY: as for `allowed`.
        let mut one: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        // SAFETY: `cpu` is below CPU_SETSIZE.
        unsafe { libc::CPU_SET(cpu, &mut one) };
        set_affinity(&one);
        OnOneCpu(allowed)
    }
}

impl Drop for OnOneCpu {
    fn drop(&mut self) {
        set_affinity(&self.0);
    }
}

/// `sched_setaffinity` of the calling thread.
fn set_affinity(set: &libc::cpu_set_t) {
    // SAFETY: sched_setaffinity reads the set of the size given.
    let r = unsafe { libc::sched_setaffinity(0, std::mem::size_of_val(set), set) };
    assert_eq!(
        r,
        0,
        "sched_setaffinity: {}",
        std::io::Error::last_os_error()
    );
}

/// Runs [`Watch`]: the file starts wholly cached (`warm`: read through) or not at all.
fn watch_a_mirror_copy(tag: &str, layers: usize, warm: bool) -> Watch {
    // Under the build directory, not the system's temp dir: on tmpfs the file's pages are the
    // file, and no advice drops them.
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("placement-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("m.gguf");
    let p = path.to_str().unwrap();
    let layers = layers.to_string();
    let args = [
        "gen-model",
        p,
        "--type",
        "Q4_0",
        "--dim",
        "1024",
        "--layers",
        &layers,
        "--ffn",
        "2048",
        "--heads",
        "8",
        "--kv-heads",
        "4",
        "--vocab",
        "512",
        "--untied",
    ];
    let out = common::locus(&args);
    assert!(out.status.success(), "gen-model: {out:?}");
    let file = std::fs::File::open(&path).unwrap();
    // SAFETY: the file is this test's own and nothing writes it while mapped.
    let map = unsafe { memmap2::Mmap::map(&file) }.unwrap();
    // The header is read first (its faults may read around it), then the whole file dropped.
    let header = {
        let g = locus::model::gguf::Gguf::parse(&map).expect("the generated file parses");
        g.data_offset as usize
    };
    {
        use std::os::fd::AsRawFd;
        // SAFETY: advice on an open descriptor.
        let r = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        assert_eq!(r, 0, "posix_fadvise");
    }
    let cold = resident_bytes(&map);
    assert!(cold < map.len() / 10, "the file stays cached: {cold} bytes");
    if warm {
        // Read as `cat` would, so the page cache builds its folios as it does for any file.
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(bytes.len(), map.len());
        let cached = resident_bytes(&map);
        assert!(
            cached > map.len() * 9 / 10,
            "the read left {cached} bytes cached"
        );
    }
    // One watch at a time: another's child would take the CPU this one's poll wakes up on.
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    // This thread and the child on one CPU. The child's two fillers take turns there, so
    // neither runs far ahead of the other: each 2 MiB chunk goes once both have read their
    // halves of the matrices in it, so on a busy machine a filler starved on one CPU while the
    // other raced on would hold the chunks between them, and the peak would measure the
    // machine's load, not the copy. And the child runs only while this thread sleeps between
    // polls (a woken poll takes the CPU back within a scheduler slice), not while it waits for
    // a CPU another program holds: the copy is seen at the same steps however busy the machine.
    let pinned = OnOneCpu::pin();
    let mut child = Command::new(env!("CARGO_BIN_EXE_locus"))
        .args([
            "run", "-m", p, "-p", "Hi", "-n", "1", "--numa", "mirror", "-t", "2",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("cannot start locus");
    // The child runs in steps, stopped (SIGSTOP, every thread) for each poll: a poll is a
    // snapshot, and the child does no work while this thread reads the page cache (a few
    // milliseconds for the larger file). Between polls it runs from this thread's falling
    // asleep until its waking takes the CPU back: at most a scheduler tick or two of work, on
    // a busy machine as on an idle one.
    let mut polls = Vec::new();
    let t0 = Instant::now();
    let status = loop {
        signal(&child, libc::SIGSTOP);
        let exited = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break Some(s);
            }
            if common::all_stopped(child.id()) {
                break None;
            }
            if t0.elapsed() > PATIENCE {
                let _ = child.kill();
                let _ = child.wait();
                panic!("locus run had not finished after {PATIENCE:?}");
            }
            std::thread::sleep(Duration::from_micros(100));
        };
        polls.push(resident_bytes(&map));
        if let Some(s) = exited {
            break s;
        }
        signal(&child, libc::SIGCONT);
        std::thread::sleep(STEP);
    };
    drop(pinned);
    let mut err = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
    assert!(status.success(), "locus run: {err}");
    let after = resident_bytes(&map);
    let len = map.len();
    drop(map);
    let _ = std::fs::remove_dir_all(&dir);
    Watch {
        len,
        header,
        polls,
        after,
    }
}

/// A copy drops the file's pages as it passes them: loading a model whose pages are not
/// cached, the page cache never holds more than a small share of the file at once (the
/// matrices being copied and the read-ahead), where a copy that dropped them only at the end
/// held the whole file just before. The poll must also see the weights' pages come and go
/// (more than the header resident at some point), or it proves nothing. The file is 200 MB:
/// what a copy holds at once (each filler's 4 MiB asked for ahead, the 2 MiB chunks it is in:
/// some 5 to 20 MB seen) is a small share of it, as it was not of the 64 MB of 12 layers.
#[test]
fn a_copy_drops_the_files_pages_as_it_passes_them() {
    let w = watch_a_mirror_copy("passing", 40, false);
    let (peak, what) = (w.polls.iter().max().copied().unwrap_or(0), w.describe());
    assert!(
        peak > w.header + (1 << 20),
        "the poll never saw the weights read: {what}"
    );
    assert!(
        peak < w.len / 4,
        "the page cache held most of the file: {what}"
    );
    assert!(
        w.after < w.len / 20,
        "the file's pages stayed cached: {what}"
    );
}

/// The same from a warm page cache, which may hold the file in folios larger than a matrix
/// (2 MiB ones where the file system builds them): dropping each matrix's own bytes then drops
/// nothing until the end, so the copy drops the file in whole folios once every matrix in one
/// is copied. While the copy runs, the poll must see the file part cached (between a tenth and
/// nine tenths, at three polls or more; a copy that dropped everything at the end shows it
/// whole, then gone). The file is 400 MB: a copy from the cache is quick, and the child works
/// a scheduler tick or so between polls, so a 200 MB one was seen part cached 4 or 5 times,
/// this one 9 or 10.
#[test]
fn a_copy_from_a_warm_cache_drops_it_as_it_passes_too() {
    let w = watch_a_mirror_copy("passing-warm", 80, true);
    let what = w.describe();
    let part = |&&r: &&usize| r > w.len / 10 && r < w.len * 9 / 10;
    let between = w.polls.iter().filter(part).count();
    assert!(
        between >= 3,
        "{between} polls saw the file part cached: {what}"
    );
    assert!(
        w.after < w.len / 20,
        "the file's pages stayed cached: {what}"
    );
}
