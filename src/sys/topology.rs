//! The machine's NUMA topology, read straight from sysfs and procfs: which nodes exist (from the
//! `node/online` and `node/possible` range lists, never by probing `node0, node1, …` until a
//! gap), each node's CPUs, distances, memory and hugepage pools, which CPUs and nodes this
//! process may use (`sched_getaffinity` ∩ `Cpus_allowed_list`, `Mems_allowed_list`), and the
//! kernel settings that change placement (`numa_balancing`, transparent hugepages).
//!
//! A [`Topology`] is a value: [`Topology::detect`] reads this machine, and
//! [`Topology::from_root`] reads a fake filesystem root so tests can describe any machine.
//! Nothing is capped: sparse node ids, interleaved CPU numbering, memory-only nodes (CXL) and
//! hundreds of CPUs are all plain data. Without any node directory (some containers) the
//! machine is one node 0 holding every allowed CPU and `/proc/meminfo`'s memory.

use std::fmt;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use super::affinity;
use super::errno::SysError;
use super::ids::{CpuId, CpuSet, ListParseError, NodeId, NodeMask};

/// The distance the kernel reports from a node to itself.
pub const LOCAL_DISTANCE: u32 = 10;

const NODE_DIR: &str = "sys/devices/system/node";
const CPU_DIR: &str = "sys/devices/system/cpu";
const NUMA_BALANCING: &str = "proc/sys/kernel/numa_balancing";
const THP_ENABLED: &str = "sys/kernel/mm/transparent_hugepage/enabled";
const GLOBAL_HUGEPAGES: &str = "sys/kernel/mm/hugepages";
const PROC_MEMINFO: &str = "proc/meminfo";

/// Why the topology could not be read.
#[derive(Debug)]
pub enum TopologyError {
    Read {
        path: PathBuf,
        err: io::Error,
    },
    List {
        path: PathBuf,
        err: ListParseError,
    },
    Malformed {
        path: PathBuf,
        text: String,
        why: &'static str,
    },
    /// The cpuset, the affinity mask and the online CPUs have nothing in common.
    NoAllowedCpus,
    Affinity(SysError),
}

impl fmt::Display for TopologyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TopologyError::Read { path, err } => write!(f, "cannot read {}: {err}", path.display()),
            TopologyError::List { path, err } => write!(f, "{}: {err}", path.display()),
            TopologyError::Malformed { path, text, why } => {
                write!(f, "{}: {why}: '{}'", path.display(), text.trim())
            }
            TopologyError::NoAllowedCpus => f.write_str(
                "no CPU is both online and allowed to this process (cpuset and affinity disagree)",
            ),
            TopologyError::Affinity(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for TopologyError {}

/// A node's memory, in bytes, from its `meminfo`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeMemory {
    pub total: u64,
    pub free: u64,
    /// Page cache on the node (`FilePages`; from `/proc/meminfo` without node directories:
    /// `Buffers + Cached + SwapCached`, the same sum).
    pub file_pages: u64,
    /// `Active(file)` and `Inactive(file)`, where the kernel reports them.
    pub active_file: Option<u64>,
    pub inactive_file: Option<u64>,
}

/// One hugetlb pool of a node (`hugepages/hugepages-<size>kB/`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HugePool {
    pub size_kb: u64,
    /// `nr_hugepages`: pages in the pool.
    pub total: u64,
    /// `free_hugepages`.
    pub free: u64,
}

/// One online NUMA node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Node {
    pub id: NodeId,
    /// Every CPU of the node (allowed to us or not); empty for a memory-only node.
    pub cpus: CpuSet,
    /// Distances to each node of [`Topology::nodes`], in that order.
    pub distances: Vec<u32>,
    pub memory: NodeMemory,
    /// Hugepage pools by ascending page size.
    pub hugepages: Vec<HugePool>,
}

impl Node {
    /// A node with memory but no CPUs (CXL expanders, HBM in flat mode).
    pub fn memory_only(&self) -> bool {
        self.cpus.is_empty()
    }
}

/// `/proc/sys/kernel/numa_balancing`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NumaBalancing {
    Off,
    /// On; `mode` is the file's value (1 = normal, 2 = memory tiering, 3 = both).
    On {
        mode: u32,
    },
    /// The file is missing (kernel without NUMA balancing, or /proc/sys hidden).
    Absent,
    Unrecognised(String),
}

impl fmt::Display for NumaBalancing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NumaBalancing::Off => f.write_str("off"),
            NumaBalancing::On { mode: 1 } => f.write_str("on"),
            NumaBalancing::On { mode } => write!(f, "on (mode {mode})"),
            NumaBalancing::Absent => f.write_str("unavailable"),
            NumaBalancing::Unrecognised(s) => write!(f, "unrecognised ({s})"),
        }
    }
}

/// `/sys/kernel/mm/transparent_hugepage/enabled`: the bracketed choice.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Thp {
    Always,
    Madvise,
    Never,
    Absent,
    Unrecognised(String),
}

impl fmt::Display for Thp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Thp::Always => f.write_str("always"),
            Thp::Madvise => f.write_str("madvise"),
            Thp::Never => f.write_str("never"),
            Thp::Absent => f.write_str("unavailable"),
            Thp::Unrecognised(s) => write!(f, "unrecognised ({s})"),
        }
    }
}

/// Where the node list came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// `/sys/devices/system/node`.
    Sysfs,
    /// No node directory: one node 0 made up from the allowed CPUs and `/proc/meminfo`.
    NoNodeDirectory,
}

/// The machine as this process sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Topology {
    /// The online nodes, by ascending id.
    pub nodes: Vec<Node>,
    /// `node/possible`: sizes every node mask.
    pub possible_nodes: NodeMask,
    /// `cpu/possible` (or every CPU seen when that file is missing): sizes every CPU set.
    pub possible_cpus: CpuSet,
    /// CPUs this process may run on: online ∩ `Cpus_allowed_list` ∩ `sched_getaffinity`.
    pub allowed_cpus: CpuSet,
    /// Nodes this process may allocate on: online ∩ `Mems_allowed_list`.
    pub allowed_nodes: NodeMask,
    pub numa_balancing: NumaBalancing,
    pub thp: Thp,
    pub source: Source,
}

impl Topology {
    /// Reads this machine, for the calling thread's affinity.
    pub fn detect() -> Result<Topology, TopologyError> {
        // Without /proc/self/status (unusual) the cpuset is simply not consulted.
        let status = fs::read_to_string("/proc/self/status").unwrap_or_default();
        let aff = affinity::allowed_cpu_set().map_err(TopologyError::Affinity)?;
        Topology::read(Path::new("/"), &status, Some(&aff))
    }

    /// Reads a machine described under `root` (a fake filesystem root: `root/sys/devices/
    /// system/node/…`, `root/proc/meminfo`, `root/proc/sys/kernel/numa_balancing`, …), with
    /// `proc_self_status` as the text of `/proc/self/status`. No affinity mask is consulted.
    pub fn from_root(root: &Path, proc_self_status: &str) -> Result<Topology, TopologyError> {
        Topology::read(root, proc_self_status, None)
    }

    fn read(root: &Path, status: &str, aff: Option<&CpuSet>) -> Result<Topology, TopologyError> {
        let node_dir = root.join(NODE_DIR);
        let online_path = node_dir.join("online");
        let cpus_allowed = status_list(status, "Cpus_allowed_list:")?;
        let mems_allowed: Option<NodeMask> = match status_field(status, "Mems_allowed_list:") {
            Some(v) => Some(NodeMask::parse_list(v).map_err(|err| TopologyError::List {
                path: PathBuf::from("/proc/self/status"),
                err,
            })?),
            None => None,
        };
        let cpu_possible = read_optional(&root.join(CPU_DIR).join("possible"))?
            .map(|t| parse_cpus(&root.join(CPU_DIR).join("possible"), &t))
            .transpose()?;

        let (nodes, possible_nodes, source) = if online_path.exists() {
            let online = parse_nodes(&online_path, &read(&online_path)?)?;
            let possible_path = node_dir.join("possible");
            let possible = match read_optional(&possible_path)? {
                Some(t) => parse_nodes(&possible_path, &t)?.union(&online),
                None => online.clone(),
            };
            let mut nodes = Vec::with_capacity(online.len());
            for id in online.iter() {
                nodes.push(read_node(&node_dir, id, online.len())?);
            }
            (nodes, possible, Source::Sysfs)
        } else {
            (Vec::new(), NodeMask::default(), Source::NoNodeDirectory)
        };

        // The CPUs that exist and are online, before any restriction.
        let base: Option<CpuSet> = match source {
            Source::Sysfs => Some(
                nodes
                    .iter()
                    .fold(CpuSet::default(), |a, n| a.union(&n.cpus)),
            ),
            Source::NoNodeDirectory => {
                let p = root.join(CPU_DIR).join("online");
                read_optional(&p)?.map(|t| parse_cpus(&p, &t)).transpose()?
            }
        };
        let mut allowed: Option<CpuSet> = base;
        for restrict in [cpus_allowed.as_ref(), aff].into_iter().flatten() {
            allowed = Some(match allowed {
                Some(a) => a.intersection(restrict),
                None => restrict.clone(),
            });
        }
        let allowed_cpus = allowed.unwrap_or_default();
        if allowed_cpus.is_empty() {
            return Err(TopologyError::NoAllowedCpus);
        }

        let (nodes, possible_nodes) = match source {
            Source::Sysfs => (nodes, possible_nodes),
            Source::NoNodeDirectory => {
                let only = NodeId(0);
                let node = Node {
                    id: only,
                    cpus: allowed_cpus.clone(),
                    distances: vec![LOCAL_DISTANCE],
                    memory: read_memory(&root.join(PROC_MEMINFO))?,
                    hugepages: read_hugepools(&root.join(GLOBAL_HUGEPAGES))?,
                };
                (vec![node], std::iter::once(only).collect())
            }
        };
        let online: NodeMask = nodes.iter().map(|n| n.id).collect();
        let allowed_nodes = match (&mems_allowed, source) {
            (Some(m), Source::Sysfs) => online.intersection(m),
            _ => online,
        };
        let possible_cpus = cpu_possible.unwrap_or_default().union(
            &nodes
                .iter()
                .fold(allowed_cpus.clone(), |a, n| a.union(&n.cpus)),
        );

        Ok(Topology {
            nodes,
            possible_nodes,
            possible_cpus,
            allowed_cpus,
            allowed_nodes,
            numa_balancing: read_numa_balancing(&root.join(NUMA_BALANCING))?,
            thp: read_thp(&root.join(THP_ENABLED))?,
            source,
        })
    }

    pub fn node(&self, id: NodeId) -> Option<&Node> {
        self.nodes.iter().find(|n| n.id == id)
    }

    /// The kernel's distance from node `a` to node `b` (10 = local).
    pub fn distance(&self, a: NodeId, b: NodeId) -> Option<u32> {
        let j = self.nodes.iter().position(|n| n.id == b)?;
        self.node(a)?.distances.get(j).copied()
    }

    /// The node a CPU belongs to.
    pub fn node_of_cpu(&self, cpu: CpuId) -> Option<NodeId> {
        self.nodes
            .iter()
            .find(|n| n.cpus.contains(cpu))
            .map(|n| n.id)
    }

    /// The node's CPUs that this process may use.
    pub fn allowed_cpus_of(&self, id: NodeId) -> CpuSet {
        self.node(id)
            .map(|n| n.cpus.intersection(&self.allowed_cpus))
            .unwrap_or_default()
    }

    /// Bits a node mask needs to name every possible node (at least 1).
    pub fn node_mask_bits(&self) -> usize {
        self.possible_nodes
            .iter()
            .last()
            .map_or(1, |n| n.index() + 1)
    }
}

fn read(path: &Path) -> Result<String, TopologyError> {
    fs::read_to_string(path).map_err(|err| TopologyError::Read {
        path: path.to_path_buf(),
        err,
    })
}

/// The file's text, or `None` if it does not exist.
fn read_optional(path: &Path) -> Result<Option<String>, TopologyError> {
    match fs::read_to_string(path) {
        Ok(t) => Ok(Some(t)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(err) => Err(TopologyError::Read {
            path: path.to_path_buf(),
            err,
        }),
    }
}

fn parse_nodes(path: &Path, text: &str) -> Result<NodeMask, TopologyError> {
    NodeMask::parse_list(text).map_err(|err| TopologyError::List {
        path: path.to_path_buf(),
        err,
    })
}

fn parse_cpus(path: &Path, text: &str) -> Result<CpuSet, TopologyError> {
    CpuSet::parse_list(text).map_err(|err| TopologyError::List {
        path: path.to_path_buf(),
        err,
    })
}

/// The value of a `Key:\tvalue` line of `/proc/self/status`.
fn status_field<'a>(status: &'a str, key: &str) -> Option<&'a str> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .map(str::trim)
}

fn status_list(status: &str, key: &str) -> Result<Option<CpuSet>, TopologyError> {
    status_field(status, key)
        .map(|v| parse_cpus(Path::new("/proc/self/status"), v))
        .transpose()
}

fn read_node(node_dir: &Path, id: NodeId, n_online: usize) -> Result<Node, TopologyError> {
    let dir = node_dir.join(format!("node{id}"));
    let cpulist = dir.join("cpulist");
    let cpus = parse_cpus(&cpulist, &read(&cpulist)?)?;
    let dpath = dir.join("distance");
    let dtext = read(&dpath)?;
    let distances: Vec<u32> = dtext
        .split_whitespace()
        .map(|t| t.parse())
        .collect::<Result<_, _>>()
        .map_err(|_| TopologyError::Malformed {
            path: dpath.clone(),
            text: dtext.clone(),
            why: "is not a list of numbers",
        })?;
    if distances.len() != n_online {
        return Err(TopologyError::Malformed {
            path: dpath,
            text: dtext,
            why: "does not have one distance per online node",
        });
    }
    Ok(Node {
        id,
        cpus,
        distances,
        memory: read_memory(&dir.join("meminfo"))?,
        hugepages: read_hugepools(&dir.join("hugepages"))?,
    })
}

/// A meminfo value in bytes (`kB` values scaled), by key. Handles both `Node 0 MemTotal: 5 kB`
/// (per node) and `MemTotal: 5 kB` (`/proc/meminfo`).
fn meminfo_value(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let (left, right) = line.split_once(':')?;
        if left.split_whitespace().last()? != key {
            return None;
        }
        let mut it = right.split_whitespace();
        let v: u64 = it.next()?.parse().ok()?;
        Some(if it.next() == Some("kB") { v * 1024 } else { v })
    })
}

fn read_memory(path: &Path) -> Result<NodeMemory, TopologyError> {
    let text = read(path)?;
    let need = |key| {
        meminfo_value(&text, key).ok_or_else(|| TopologyError::Malformed {
            path: path.to_path_buf(),
            text: format!("{key} missing"),
            why: "lacks a required field",
        })
    };
    let total = need("MemTotal")?;
    let free = need("MemFree")?;
    let file_pages = meminfo_value(&text, "FilePages").unwrap_or_else(|| {
        ["Buffers", "Cached", "SwapCached"]
            .iter()
            .filter_map(|k| meminfo_value(&text, k))
            .sum()
    });
    Ok(NodeMemory {
        total,
        free,
        file_pages,
        active_file: meminfo_value(&text, "Active(file)"),
        inactive_file: meminfo_value(&text, "Inactive(file)"),
    })
}

/// The pools under a `hugepages` directory (`hugepages-2048kB/nr_hugepages`, …); none if the
/// directory is missing.
fn read_hugepools(dir: &Path) -> Result<Vec<HugePool>, TopologyError> {
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(err) => {
            return Err(TopologyError::Read {
                path: dir.to_path_buf(),
                err,
            })
        }
    };
    let mut pools = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|err| TopologyError::Read {
            path: dir.to_path_buf(),
            err,
        })?;
        let name = entry.file_name();
        let Some(size_kb) = name
            .to_str()
            .and_then(|n| n.strip_prefix("hugepages-"))
            .and_then(|n| n.strip_suffix("kB"))
            .and_then(|n| n.parse().ok())
        else {
            continue;
        };
        let count = |file: &str| -> Result<u64, TopologyError> {
            let p = entry.path().join(file);
            let t = read(&p)?;
            t.trim().parse().map_err(|_| TopologyError::Malformed {
                path: p,
                text: t.clone(),
                why: "is not a number",
            })
        };
        pools.push(HugePool {
            size_kb,
            total: count("nr_hugepages")?,
            free: count("free_hugepages")?,
        });
    }
    pools.sort_by_key(|p| p.size_kb);
    Ok(pools)
}

fn read_numa_balancing(path: &Path) -> Result<NumaBalancing, TopologyError> {
    Ok(match read_optional(path)? {
        None => NumaBalancing::Absent,
        Some(t) => match t.trim().parse::<u32>() {
            Ok(0) => NumaBalancing::Off,
            Ok(mode) => NumaBalancing::On { mode },
            Err(_) => NumaBalancing::Unrecognised(t.trim().to_string()),
        },
    })
}

fn read_thp(path: &Path) -> Result<Thp, TopologyError> {
    let Some(t) = read_optional(path)? else {
        return Ok(Thp::Absent);
    };
    let chosen = t
        .split_whitespace()
        .find_map(|w| w.strip_prefix('[').and_then(|w| w.strip_suffix(']')));
    Ok(match chosen {
        Some("always") => Thp::Always,
        Some("madvise") => Thp::Madvise,
        Some("never") => Thp::Never,
        _ => Thp::Unrecognised(t.trim().to_string()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meminfo_reads_both_forms() {
        let node =
            "Node 1 MemTotal:  100 kB\nNode 1 Active(file):   7 kB\nNode 1 HugePages_Total: 3\n";
        assert_eq!(meminfo_value(node, "MemTotal"), Some(102400));
        assert_eq!(meminfo_value(node, "Active(file)"), Some(7168));
        assert_eq!(meminfo_value(node, "HugePages_Total"), Some(3));
        assert_eq!(meminfo_value(node, "MemFree"), None);
        let proc = "MemTotal:       16 kB\nMemFree: 8 kB\n";
        assert_eq!(meminfo_value(proc, "MemFree"), Some(8192));
    }

    #[test]
    fn status_fields() {
        let s = "Name:\tx\nCpus_allowed:\t3\nCpus_allowed_list:\t0-1\nMems_allowed_list:\t0\n";
        assert_eq!(status_field(s, "Cpus_allowed_list:"), Some("0-1"));
        assert_eq!(status_field(s, "Mems_allowed_list:"), Some("0"));
        assert_eq!(status_field(s, "Nope:"), None);
    }

    #[test]
    fn this_machine() {
        let t = Topology::detect().unwrap();
        assert!(!t.nodes.is_empty());
        assert!(!t.allowed_cpus.is_empty());
        for n in &t.nodes {
            assert_eq!(t.distance(n.id, n.id), Some(LOCAL_DISTANCE));
        }
    }
}
