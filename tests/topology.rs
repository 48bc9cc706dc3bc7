//! NUMA topology on fake sysfs trees written into a temporary directory (one node, dual-socket
//! EPYC with interleaved CPU numbering, 8 NPS4-like nodes, a memory-only node, sparse node ids,
//! a cpuset, no node directory at all, malformed files), plus smoke tests on this machine:
//! `Topology::detect`, the capability probe, and `locus topo [--json]` (checked with the small
//! JSON parser at the end of this file).

use std::fs;
use std::path::PathBuf;
use std::process::Command;

use locus::app::topo::{render_json, render_text, TopoReport};
use locus::json::Json;
use locus::sys::probe::{Capabilities, Capability};
use locus::sys::topology::{NumaBalancing, Source, Thp, Topology, TopologyError};
use locus::sys::{CpuId, CpuSet, NodeId, NodeMask, SysError};

const GIB_KB: u64 = 1024 * 1024;

/// A fake filesystem root, removed when dropped.
struct Fake {
    root: PathBuf,
}

impl Fake {
    fn new(tag: &str) -> Fake {
        let root =
            std::env::temp_dir().join(format!("locus-topology-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        fs::create_dir_all(&root).unwrap();
        Fake { root }
    }

    fn file(&self, rel: &str, text: &str) -> &Fake {
        let p = self.root.join(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, text).unwrap();
        self
    }

    /// `node/online` and `node/possible`.
    fn nodes(&self, online: &str, possible: &str) -> &Fake {
        self.file("sys/devices/system/node/online", &format!("{online}\n"))
            .file("sys/devices/system/node/possible", &format!("{possible}\n"))
    }

    /// One node directory: cpulist, distance row, meminfo (sizes in kB).
    fn node(
        &self,
        id: u32,
        cpulist: &str,
        distances: &[u32],
        total_kb: u64,
        free_kb: u64,
    ) -> &Fake {
        let d = format!("sys/devices/system/node/node{id}");
        let row: Vec<String> = distances.iter().map(|d| d.to_string()).collect();
        let meminfo = format!(
            "Node {id} MemTotal:       {total_kb} kB\n\
             Node {id} MemFree:        {free_kb} kB\n\
             Node {id} MemUsed:        {} kB\n\
             Node {id} Active(file):   300 kB\n\
             Node {id} Inactive(file): 200 kB\n\
             Node {id} FilePages:      600 kB\n\
             Node {id} HugePages_Total:     0\n",
            total_kb - free_kb
        );
        self.file(&format!("{d}/cpulist"), &format!("{cpulist}\n"))
            .file(&format!("{d}/distance"), &format!("{}\n", row.join(" ")))
            .file(&format!("{d}/meminfo"), &meminfo)
    }

    fn hugepool(&self, dir: &str, size_kb: u64, nr: u64, free: u64) -> &Fake {
        let d = format!("{dir}/hugepages-{size_kb}kB");
        self.file(&format!("{d}/nr_hugepages"), &format!("{nr}\n"))
            .file(&format!("{d}/free_hugepages"), &format!("{free}\n"))
            .file(&format!("{d}/surplus_hugepages"), "0\n")
    }

    fn settings(&self, balancing: &str, thp: &str) -> &Fake {
        self.file("proc/sys/kernel/numa_balancing", &format!("{balancing}\n"))
            .file(
                "sys/kernel/mm/transparent_hugepage/enabled",
                &format!("{thp}\n"),
            )
    }

    fn read(&self, status: &str) -> Result<Topology, TopologyError> {
        Topology::from_root(&self.root, status)
    }
}

impl Drop for Fake {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.root);
    }
}

fn cpus(list: &str) -> CpuSet {
    CpuSet::parse_list(list).unwrap()
}

fn nodes(list: &str) -> NodeMask {
    NodeMask::parse_list(list).unwrap()
}

fn status(cpus: &str, mems: &str) -> String {
    format!(
        "Name:\tlocus\nCpus_allowed:\tff\nCpus_allowed_list:\t{cpus}\nMems_allowed:\t1\n\
         Mems_allowed_list:\t{mems}\nvoluntary_ctxt_switches:\t1\n"
    )
}

/// Distance matrix as rows, in node order.
fn matrix(t: &Topology) -> Vec<Vec<u32>> {
    t.nodes.iter().map(|n| n.distances.clone()).collect()
}

#[test]
fn one_node() {
    let f = Fake::new("one");
    f.nodes("0", "0")
        .node(0, "0-3", &[10], 8 * GIB_KB, 5 * GIB_KB)
        .file("sys/devices/system/cpu/possible", "0-3\n")
        .hugepool("sys/devices/system/node/node0/hugepages", 2048, 16, 10)
        .hugepool("sys/devices/system/node/node0/hugepages", 1048576, 0, 0)
        .settings("0", "always [madvise] never");
    let t = f.read(&status("0-3", "0")).unwrap();
    assert_eq!(t.source, Source::Sysfs);
    assert_eq!(t.nodes.len(), 1);
    let n = &t.nodes[0];
    assert_eq!(n.id, NodeId(0));
    assert_eq!(n.cpus, cpus("0-3"));
    assert!(!n.memory_only());
    assert_eq!(n.memory.total, 8 << 30);
    assert_eq!(n.memory.free, 5 << 30);
    assert_eq!(n.memory.file_pages, 600 * 1024);
    assert_eq!(n.memory.active_file, Some(300 * 1024));
    assert_eq!(n.memory.inactive_file, Some(200 * 1024));
    assert_eq!(n.hugepages.len(), 2);
    assert_eq!(
        (
            n.hugepages[0].size_kb,
            n.hugepages[0].total,
            n.hugepages[0].free
        ),
        (2048, 16, 10)
    );
    assert_eq!(n.hugepages[1].size_kb, 1048576);
    assert_eq!(matrix(&t), vec![vec![10]]);
    assert_eq!(t.allowed_cpus, cpus("0-3"));
    assert_eq!(t.allowed_nodes, nodes("0"));
    assert_eq!(t.possible_cpus, cpus("0-3"));
    assert_eq!(t.node_mask_bits(), 1);
    assert_eq!(t.numa_balancing, NumaBalancing::Off);
    assert_eq!(t.thp, Thp::Madvise);
}

#[test]
fn dual_socket_epyc_with_interleaved_cpu_numbering() {
    let f = Fake::new("epyc");
    f.nodes("0-1", "0-1")
        .node(0, "0-31,64-95", &[10, 32], 384 * GIB_KB, 300 * GIB_KB)
        .node(1, "32-63,96-127", &[32, 10], 384 * GIB_KB, 310 * GIB_KB)
        .settings("1", "[always] madvise never");
    // No Cpus_allowed_list: every CPU is allowed.
    let t = f.read("").unwrap();
    assert_eq!(t.nodes.len(), 2);
    assert_eq!(t.nodes[0].cpus.to_list(), "0-31,64-95");
    assert_eq!(t.nodes[1].cpus.to_list(), "32-63,96-127");
    assert_eq!(t.nodes[0].cpus.len(), 64);
    assert_eq!(t.node_of_cpu(CpuId(0)), Some(NodeId(0)));
    assert_eq!(t.node_of_cpu(CpuId(31)), Some(NodeId(0)));
    assert_eq!(t.node_of_cpu(CpuId(32)), Some(NodeId(1)));
    assert_eq!(t.node_of_cpu(CpuId(64)), Some(NodeId(0)));
    assert_eq!(t.node_of_cpu(CpuId(127)), Some(NodeId(1)));
    assert_eq!(t.node_of_cpu(CpuId(128)), None);
    assert_eq!(t.allowed_cpus.len(), 128);
    assert_eq!(t.allowed_cpus_of(NodeId(1)), cpus("32-63,96-127"));
    assert_eq!(t.distance(NodeId(0), NodeId(1)), Some(32));
    assert_eq!(t.distance(NodeId(1), NodeId(1)), Some(10));
    assert_eq!(t.allowed_nodes, nodes("0-1"));
    assert_eq!(t.numa_balancing, NumaBalancing::On { mode: 1 });
    assert_eq!(t.thp, Thp::Always);
}

#[test]
fn eight_nodes_nps4() {
    let f = Fake::new("nps4");
    f.nodes("0-7", "0-7");
    for k in 0..8u32 {
        let row: Vec<u32> = (0..8u32)
            .map(|j| match (j == k, j / 4 == k / 4) {
                (true, _) => 10,
                (false, true) => 12,
                (false, false) => 32,
            })
            .collect();
        let list = format!("{}-{}", k * 16, k * 16 + 15);
        f.node(k, &list, &row, 96 * GIB_KB, 90 * GIB_KB);
    }
    let t = f.read(&status("0-127", "0-7")).unwrap();
    assert_eq!(t.nodes.len(), 8);
    assert_eq!(t.node_mask_bits(), 8);
    let m = matrix(&t);
    let transposed: Vec<Vec<u32>> = (0..8)
        .map(|b| m.iter().map(|row| row[b]).collect())
        .collect();
    assert_eq!(m, transposed, "symmetric");
    assert_eq!(t.distance(NodeId(0), NodeId(3)), Some(12));
    assert_eq!(t.distance(NodeId(5), NodeId(6)), Some(12));
    assert_eq!(t.distance(NodeId(0), NodeId(4)), Some(32));
    assert_eq!(t.distance(NodeId(7), NodeId(7)), Some(10));
    assert_eq!(t.node_of_cpu(CpuId(127)), Some(NodeId(7)));
    assert!(t.nodes.iter().all(|n| n.cpus.len() == 16));
    assert_eq!(t.allowed_nodes.len(), 8);
}

/// No fixed caps: 16 nodes (more than llama.cpp's 8) and 1024 CPUs (more than its 512).
#[test]
fn sixteen_nodes_and_1024_cpus() {
    let f = Fake::new("big");
    f.nodes("0-15", "0-15")
        .file("sys/devices/system/cpu/possible", "0-1023\n");
    for k in 0..16u32 {
        let row: Vec<u32> = (0..16u32).map(|j| if j == k { 10 } else { 20 }).collect();
        let list = format!("{}-{}", k * 64, k * 64 + 63);
        f.node(k, &list, &row, 64 * GIB_KB, 60 * GIB_KB);
    }
    let t = f.read("").unwrap();
    assert_eq!(t.nodes.len(), 16);
    assert_eq!(t.allowed_cpus.len(), 1024);
    assert_eq!(t.possible_cpus.len(), 1024);
    assert_eq!(t.node_of_cpu(CpuId(1023)), Some(NodeId(15)));
    assert_eq!(t.distance(NodeId(15), NodeId(0)), Some(20));
    assert_eq!(t.node_mask_bits(), 16);
}

#[test]
fn memory_only_node() {
    let f = Fake::new("cxl");
    f.nodes("0-1", "0-1")
        .node(0, "0-7", &[10, 20], 32 * GIB_KB, 30 * GIB_KB)
        .node(1, "", &[20, 10], 64 * GIB_KB, 64 * GIB_KB);
    let t = f.read(&status("0-7", "0-1")).unwrap();
    assert!(!t.nodes[0].memory_only());
    assert!(t.nodes[1].memory_only());
    assert!(t.nodes[1].cpus.is_empty());
    assert_eq!(t.nodes[1].memory.total, 64 << 30);
    assert!(t.allowed_cpus_of(NodeId(1)).is_empty());
    assert_eq!(t.allowed_nodes, nodes("0-1"));
    assert_eq!(t.allowed_cpus, cpus("0-7"));
}

#[test]
fn sparse_node_ids() {
    // Node 1 has no directory at all: reading it would fail, so this also proves that nodes
    // come from the `online` list, not from probing node0, node1, … until a gap.
    let f = Fake::new("sparse");
    f.nodes("0,2", "0-3")
        .node(0, "0-3", &[10, 21], 16 * GIB_KB, 8 * GIB_KB)
        .node(2, "4-7", &[21, 10], 16 * GIB_KB, 9 * GIB_KB);
    let t = f.read(&status("0-7", "0,2")).unwrap();
    let ids: Vec<NodeId> = t.nodes.iter().map(|n| n.id).collect();
    assert_eq!(ids, vec![NodeId(0), NodeId(2)]);
    assert_eq!(t.possible_nodes, nodes("0-3"));
    assert_eq!(t.node_mask_bits(), 4);
    assert!(t.node(NodeId(1)).is_none());
    assert_eq!(t.distance(NodeId(0), NodeId(2)), Some(21));
    assert_eq!(t.distance(NodeId(0), NodeId(1)), None);
    assert_eq!(t.node_of_cpu(CpuId(5)), Some(NodeId(2)));
    assert_eq!(t.allowed_nodes, nodes("0,2"));
}

#[test]
fn cpuset_restricts_cpus_and_nodes() {
    let f = Fake::new("cpuset");
    f.nodes("0-1", "0-1")
        .node(0, "0-7", &[10, 20], 16 * GIB_KB, 8 * GIB_KB)
        .node(1, "8-15", &[20, 10], 16 * GIB_KB, 8 * GIB_KB);
    let t = f.read(&status("2-5,8-9", "1")).unwrap();
    // The machine is still described whole…
    assert_eq!(t.nodes.len(), 2);
    assert_eq!(t.nodes[0].cpus, cpus("0-7"));
    // …but only the cpuset's share is ours.
    assert_eq!(t.allowed_cpus, cpus("2-5,8-9"));
    assert_eq!(t.allowed_cpus_of(NodeId(0)), cpus("2-5"));
    assert_eq!(t.allowed_cpus_of(NodeId(1)), cpus("8-9"));
    assert_eq!(t.allowed_nodes, nodes("1"));
    // A cpuset naming CPUs that are not online keeps only the online ones.
    let t = f.read(&status("14-40", "0-1")).unwrap();
    assert_eq!(t.allowed_cpus, cpus("14-15"));
}

#[test]
fn no_node_directory() {
    let f = Fake::new("nonode");
    f.file("sys/devices/system/cpu/online", "0-3\n")
        .file("sys/devices/system/cpu/possible", "0-7\n")
        .file(
            "proc/meminfo",
            "MemTotal:       16384000 kB\nMemFree:         8192000 kB\n\
             MemAvailable:   12000000 kB\nBuffers:            1000 kB\n\
             Cached:           500000 kB\nSwapCached:            0 kB\n\
             Active(file):     250000 kB\nInactive(file):   251000 kB\n",
        )
        .hugepool("sys/kernel/mm/hugepages", 2048, 4, 4);
    let t = f.read(&status("1-2", "0")).unwrap();
    assert_eq!(t.source, Source::NoNodeDirectory);
    assert_eq!(t.nodes.len(), 1);
    let n = &t.nodes[0];
    assert_eq!(n.id, NodeId(0));
    assert_eq!(n.cpus, cpus("1-2"), "the node holds every allowed CPU");
    assert_eq!(n.memory.total, 16384000 * 1024);
    assert_eq!(n.memory.free, 8192000 * 1024);
    assert_eq!(n.memory.file_pages, 501000 * 1024);
    assert_eq!(n.memory.active_file, Some(250000 * 1024));
    assert_eq!(n.hugepages.len(), 1);
    assert_eq!(matrix(&t), vec![vec![10]]);
    assert_eq!(t.allowed_nodes, nodes("0"));
    assert_eq!(t.possible_cpus, cpus("0-7"));
    assert_eq!(t.numa_balancing, NumaBalancing::Absent);
    assert_eq!(t.thp, Thp::Absent);
    // Without cpu/online and without a cpuset line there is nothing to go on.
    let bare = Fake::new("bare");
    bare.file("proc/meminfo", "MemTotal: 1 kB\nMemFree: 1 kB\n");
    assert!(matches!(bare.read(""), Err(TopologyError::NoAllowedCpus)));
    assert_eq!(
        bare.read(&status("0", "0")).unwrap().nodes[0].cpus,
        cpus("0")
    );
}

#[test]
fn malformed_files_are_typed_errors_naming_the_file() {
    let f = Fake::new("bad");
    f.nodes("0-1", "0-1")
        .node(0, "0-3", &[10], 1024, 512)
        .node(1, "4-7", &[20, 10], 1024, 512);
    let e = f.read("").unwrap_err();
    assert!(matches!(e, TopologyError::Malformed { .. }), "{e}");
    assert!(e.to_string().contains("node0/distance"), "{e}");

    f.node(0, "0-3,x", &[10, 20], 1024, 512);
    let e = f.read("").unwrap_err();
    assert!(matches!(e, TopologyError::List { .. }), "{e}");
    assert!(e.to_string().contains("node0/cpulist"), "{e}");

    f.node(0, "0-3", &[10, 20], 1024, 512);
    assert!(f.read("").is_ok());
    let e = f.read(&status("100-101", "0")).unwrap_err();
    assert!(matches!(e, TopologyError::NoAllowedCpus), "{e}");

    f.file(
        "sys/devices/system/node/node1/meminfo",
        "Node 1 MemFree: 3 kB\n",
    );
    let e = f.read("").unwrap_err();
    assert!(e.to_string().contains("MemTotal"), "{e}");
}

fn refused(call: &'static str) -> Capability {
    Capability::Refused(SysError {
        call,
        errno: libc::EPERM,
    })
}

/// What `locus topo --json` prints inside Docker (seccomp) on the dual-socket EPYC.
#[test]
fn report_of_a_seccomp_container_on_epyc() {
    let f = Fake::new("report");
    f.nodes("0-1", "0-1")
        .node(0, "0-31,64-95", &[10, 32], 384 * GIB_KB, 300 * GIB_KB)
        .node(1, "", &[32, 10], 384 * GIB_KB, 310 * GIB_KB)
        .settings("1", "always [madvise] never");
    let report = TopoReport {
        topology: f.read(&status("0-3", "0-1")).unwrap(),
        capabilities: Capabilities {
            mbind: refused("mbind"),
            set_mempolicy: refused("set_mempolicy"),
            get_mempolicy: refused("get_mempolicy"),
            move_pages: refused("move_pages"),
            getcpu: Capability::Allowed,
            sched_setaffinity: Capability::Allowed,
            start_policy: None,
        },
        kernel_tier: "avx2 \"quoted\"\\".to_string(),
    };
    let json = render_json(&report);
    let v = Json::parse(&json).unwrap_or_else(|e| panic!("{e}: {json}"));
    check_required_keys(&v);
    let caps = v.get("capabilities").unwrap();
    assert_eq!(
        caps.get("mbind").unwrap().as_str().unwrap(),
        "EPERM (Operation not permitted)"
    );
    assert_eq!(caps.get("getcpu").unwrap().as_str().unwrap(), "ok");
    assert_eq!(
        v.get("kernel_tier").unwrap().as_str().unwrap(),
        "avx2 \"quoted\"\\"
    );
    assert_eq!(v.get("numa_balancing").unwrap().as_str().unwrap(), "on");
    let nodes = v.get("nodes").unwrap().as_array().unwrap();
    assert_eq!(nodes.len(), 2);
    assert_eq!(nodes[1].get("memory_only"), Some(&Json::Bool(true)));
    assert_eq!(
        nodes[0].get("mem_total"),
        Some(&Json::Num(384.0 * (1u64 << 30) as f64))
    );
    let warnings = v.get("warnings").unwrap().as_array().unwrap();
    assert_eq!(warnings.len(), 5, "balancing + four refused calls: {json}");

    let text = render_text(&report);
    eprintln!("{text}");
    assert!(text.contains("0-31,64-95"), "{text}");
    assert!(text.contains("memory-only"), "{text}");
    assert!(text.contains("  mbind              EPERM"), "{text}");
    assert!(text.contains("allowed CPUs: 0-3 (4)"), "{text}");
}

fn check_required_keys(v: &Json) {
    for key in [
        "nodes",
        "distances",
        "allowed_cpus",
        "allowed_nodes",
        "capabilities",
        "numa_balancing",
        "thp",
        "kernel_tier",
    ] {
        assert!(v.get(key).is_some(), "missing key {key}");
    }
    for node in v.get("nodes").unwrap().as_array().unwrap() {
        for key in [
            "id",
            "cpus",
            "mem_total",
            "mem_free",
            "file_pages",
            "memory_only",
            "hugepages",
        ] {
            assert!(node.get(key).is_some(), "node lacks {key}");
        }
    }
    let caps = v.get("capabilities").unwrap();
    for call in [
        "mbind",
        "set_mempolicy",
        "get_mempolicy",
        "move_pages",
        "getcpu",
        "sched_setaffinity",
    ] {
        let verdict = caps.get(call).and_then(|c| c.as_str()).unwrap();
        assert!(
            verdict == "ok" || verdict.starts_with('E'),
            "{call}: {verdict}"
        );
    }
    let n = v.get("nodes").unwrap().as_array().unwrap().len();
    let d = v.get("distances").unwrap().as_array().unwrap();
    assert_eq!(d.len(), n);
    assert!(d.iter().all(|row| row.as_array().unwrap().len() == n));
}

/// This machine: detection and the probe work, and the process is left as it was.
#[test]
fn this_machine_detect_and_probe() {
    let t = Topology::detect().unwrap();
    assert!(!t.nodes.is_empty());
    assert!(!t.allowed_cpus.is_empty());
    assert!(!t.allowed_nodes.is_empty());
    let all: CpuSet = t
        .nodes
        .iter()
        .fold(CpuSet::default(), |a, n| a.union(&n.cpus));
    assert_eq!(all.intersection(&t.allowed_cpus), t.allowed_cpus);
    let before = locus::sys::affinity::allowed_cpu_set().unwrap();
    let caps = Capabilities::probe(t.node_mask_bits());
    assert_eq!(locus::sys::affinity::allowed_cpu_set().unwrap(), before);
    // Always allowed, even under Docker's default seccomp profile.
    assert!(caps.getcpu.is_allowed());
    assert!(caps.sched_setaffinity.is_allowed());
    for (name, c) in caps.entries() {
        eprintln!("{name}: {c}");
        if let Capability::Refused(e) = c {
            assert!(
                [libc::EPERM, libc::ENOSYS, libc::EACCES].contains(&e.errno),
                "{name}: unexpected {e}"
            );
        }
    }
}

fn locus(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_locus"))
        .args(args)
        .output()
        .expect("run locus")
}

#[test]
fn cli_topo_json_parses_and_has_the_keys() {
    let out = locus(&["topo", "--json"]);
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(
        out.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v = Json::parse(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    check_required_keys(&v);
    let tier = v.get("kernel_tier").unwrap().as_str().unwrap();
    assert!(["scalar", "avx2", "avx512"].contains(&tier), "{tier}");
}

#[test]
fn cli_topo_text_and_bad_flag() {
    let out = locus(&["topo"]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    for part in [
        "NUMA nodes:",
        "distances:",
        "allowed CPUs:",
        "system calls:",
        "kernel tier:",
    ] {
        assert!(text.contains(part), "missing {part}: {text}");
    }
    let out = locus(&["topo", "--bogus"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.starts_with("locus: error: topo: unknown option '--bogus'"),
        "{err}"
    );
    assert!(locus(&["topo", "--help"]).status.success());
}

/// Docker's default seccomp profile, reduced to what matters here: `mbind`, `set_mempolicy`,
/// `get_mempolicy` and `move_pages` fail with EPERM. Under it `locus topo --json` still works
/// and its probe reports exactly those four as refused.
#[cfg(target_arch = "x86_64")]
#[test]
fn cli_topo_under_a_seccomp_filter_reports_eperm() {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_locus"));
    cmd.args(["topo", "--json"]);
    seccomp::refuse_numa_syscalls(&mut cmd);
    let out = match cmd.output() {
        Ok(out) => out,
        Err(e) => {
            skip::skip(&format!("cannot install a seccomp filter here: {e}"));
            return;
        }
    };
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(
        out.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v = Json::parse(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    check_required_keys(&v);
    let caps = v.get("capabilities").unwrap();
    for call in ["mbind", "set_mempolicy", "get_mempolicy", "move_pages"] {
        let verdict = caps.get(call).unwrap().as_str().unwrap();
        assert!(verdict.starts_with("EPERM"), "{call}: {verdict}");
    }
    for call in ["getcpu", "sched_setaffinity"] {
        assert_eq!(caps.get(call).unwrap().as_str(), Some("ok"), "{call}");
    }
    assert_eq!(v.get("memory_policy"), Some(&Json::Null));
    let warnings = v.get("warnings").unwrap().as_array().unwrap();
    assert!(
        warnings.iter().any(|w| w
            .as_str()
            .unwrap()
            .starts_with("mbind is refused with EPERM")),
        "{stdout}"
    );
}

#[path = "common/seccomp.rs"]
mod seccomp;
#[path = "common/skip.rs"]
mod skip;
