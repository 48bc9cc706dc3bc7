//! The Plan: which nodes run threads, how many threads each, where they are pinned, and how
//! the weights are stored for the mode — decided from a [`Topology`] value and the model's
//! size, before any memory is touched. Pure: tests feed it fake topologies.

use std::fmt;
use std::ops::Range;

use crate::sys::topology::{Node, Topology};
use crate::sys::{CpuSet, NodeId, NodeMask};

/// A placement mode (`--numa`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Mode {
    /// No pinning, default memory policy: the file's pages wherever the page cache has them.
    Off,
    /// Threads pinned in contiguous blocks per node; weights from the file mapping.
    Distribute,
    /// Weights copied into memory interleaved page by page over the allowed nodes.
    Interleave,
    /// Threads and a copy of the weights on one node.
    Isolate,
    /// A full copy of the weights on every node that runs threads.
    Mirror,
    /// One copy: each node stores the rows its threads compute.
    Shard,
    /// Mirror where every node has room, else shard; off on a one-node host.
    Auto,
}

impl Mode {
    pub const ALL: [Mode; 7] = [
        Mode::Off,
        Mode::Distribute,
        Mode::Interleave,
        Mode::Isolate,
        Mode::Mirror,
        Mode::Shard,
        Mode::Auto,
    ];

    /// Every mode's name, in [`Mode::ALL`]'s order.
    pub const ALL_NAMES: [&'static str; 7] = [
        "off",
        "distribute",
        "interleave",
        "isolate",
        "mirror",
        "shard",
        "auto",
    ];

    pub fn name(self) -> &'static str {
        match self {
            Mode::Off => "off",
            Mode::Distribute => "distribute",
            Mode::Interleave => "interleave",
            Mode::Isolate => "isolate",
            Mode::Mirror => "mirror",
            Mode::Shard => "shard",
            Mode::Auto => "auto",
        }
    }

    pub fn parse(s: &str) -> Option<Mode> {
        Mode::ALL.into_iter().find(|m| m.name() == s)
    }

    /// Where this mode falls back to when a node lacks room for what it asks (or its copies
    /// cannot be allocated).
    pub(crate) fn fallback(self) -> Option<Mode> {
        match self {
            Mode::Mirror | Mode::Isolate => Some(Mode::Shard),
            Mode::Shard => Some(Mode::Interleave),
            Mode::Interleave => Some(Mode::Off),
            _ => None,
        }
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How threads are pinned (`--pin`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pin {
    /// Each thread may run on any allowed CPU of its node.
    Node,
    /// Each thread gets one CPU of its node.
    Core,
}

/// What the user asked for.
#[derive(Clone, Debug)]
pub struct Options {
    pub mode: Mode,
    /// `--numa-node` for isolate.
    pub node: Option<NodeId>,
    /// `-t`; `None` = every allowed CPU of the nodes in use.
    pub threads: Option<usize>,
    pub pin: Pin,
    /// Turn any fallback into an error.
    pub strict: bool,
    /// Back copies with hugetlb pages.
    pub hugepages: bool,
    /// How long idle threads spin (`--poll`, 0..=100).
    pub poll: u32,
    /// A line on stderr each second while the copies are built (the commands: when stderr is
    /// a terminal, or with `-v`; never in the middle of a script's one error line).
    pub progress: bool,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            mode: Mode::Auto,
            node: None,
            threads: None,
            pin: Pin::Node,
            strict: false,
            hugepages: false,
            poll: crate::pool::DEFAULT_POLL,
            progress: false,
        }
    }
}

/// One group of threads: the threads a node runs (or every thread, unpinned, in `off`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Slot {
    /// The node; `None` when threads are not pinned.
    pub node: Option<NodeId>,
    /// The CPUs the slot's threads may use (its node's allowed CPUs).
    pub cpus: CpuSet,
    /// The pool thread ids of this slot.
    pub threads: Range<usize>,
}

/// How the weights are stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Store {
    /// Read from the file's mapping (page cache).
    File,
    /// One copy interleaved over these nodes.
    Interleaved(NodeMask),
    /// One copy per slot, on the slot's node: every row (`full`) or the slot's rows only.
    PerSlot { full: bool },
}

/// A decided placement.
#[derive(Clone, Debug)]
pub struct Plan {
    pub requested: Mode,
    /// The mode in effect (never `Auto`).
    pub mode: Mode,
    pub slots: Vec<Slot>,
    pub threads: usize,
    pub pin: Pin,
    pub store: Store,
    pub hugepages: bool,
    /// `--strict`: any fallback is an error.
    pub strict: bool,
    pub poll: u32,
    /// Why this mode (for `auto`) and what was adjusted, one line each.
    pub notes: Vec<String>,
    /// Fallbacks taken (a node without room, …); `--strict` makes the first one an error.
    pub fallbacks: Vec<String>,
}

/// Why no plan could be made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PlanError {
    UnknownNode(NodeId),
    NodeWithoutCpus(NodeId),
    NoCpus,
    Strict(String),
}

impl fmt::Display for PlanError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PlanError::UnknownNode(n) => write!(
                f,
                "--numa-node {n}: no such online node this process may use (see `locus topo`)"
            ),
            PlanError::NodeWithoutCpus(n) => write!(
                f,
                "--numa-node {n}: the node has no CPU this process may run on (memory-only node?); pick a node with CPUs (see `locus topo`)"
            ),
            PlanError::NoCpus => f.write_str("no node has a CPU this process may run on"),
            PlanError::Strict(why) => write!(f, "--strict: {why}"),
        }
    }
}

/// What the model needs, for the room check.
#[derive(Clone, Copy, Debug)]
pub struct Need {
    /// Bytes of one full copy of the weights.
    pub copy_bytes: u64,
    /// Bytes of it a copy would hold packed for the kernels (`Kernels::preferred_layout`),
    /// which they read faster than the file's layout: what makes a copy pay on one node.
    pub packed_bytes: u64,
}

/// Bytes a node can give a copy: free memory plus the page cache it could reclaim.
pub fn available(node: &Node) -> u64 {
    let m = &node.memory;
    let reclaimable = match (m.active_file, m.inactive_file) {
        (Some(a), Some(i)) => a + i,
        _ => m.file_pages,
    };
    m.free + reclaimable
}

/// The room a copy of `bytes` needs on a node: the copy plus an eighth (the KV cache,
/// activations and the kernel's own needs), at least 16 MiB more.
pub fn with_margin(bytes: u64) -> u64 {
    bytes + (bytes / 8).max(16 << 20)
}

impl Plan {
    pub fn new(topo: &Topology, opts: &Options, need: Need) -> Result<Plan, PlanError> {
        let cpu_nodes: Vec<&Node> = topo
            .nodes
            .iter()
            .filter(|n| !topo.allowed_cpus_of(n.id).is_empty())
            .collect();
        if cpu_nodes.is_empty() {
            return Err(PlanError::NoCpus);
        }
        let mut notes = Vec::new();
        let mut fallbacks = Vec::new();
        let mut mode = opts.mode;
        if mode == Mode::Auto {
            mode = if cpu_nodes.len() > 1 {
                Mode::Mirror
            } else if need.packed_bytes > 0 {
                notes.push(format!(
                    "auto: one node runs threads, and a copy holds {} MiB of the weights packed for the kernels (faster to read than the file's layout): trying mirror (one copy)",
                    need.packed_bytes >> 20
                ));
                Mode::Mirror
            } else {
                notes.push("auto: one node runs threads and no weights would be packed, so a copy gains nothing: off".into());
                Mode::Off
            };
        }
        let isolate_node = if mode == Mode::Isolate {
            let id = match opts.node {
                Some(id) => id,
                None => crate::sys::mempolicy::getcpu()
                    .map(|(_, n)| n)
                    .ok()
                    .filter(|n| cpu_nodes.iter().any(|c| c.id == *n))
                    .unwrap_or(cpu_nodes[0].id),
            };
            if topo.node(id).is_none() || !topo.allowed_nodes.contains(id) {
                return Err(PlanError::UnknownNode(id));
            }
            if !cpu_nodes.iter().any(|n| n.id == id) {
                return Err(PlanError::NodeWithoutCpus(id));
            }
            Some(id)
        } else {
            None
        };
        let used: Vec<&Node> = match isolate_node {
            Some(id) => cpu_nodes.iter().copied().filter(|n| n.id == id).collect(),
            None => cpu_nodes.clone(),
        };
        let cpu_count: Vec<usize> = used
            .iter()
            .map(|n| topo.allowed_cpus_of(n.id).len())
            .collect();
        let threads = opts
            .threads
            .unwrap_or_else(|| cpu_count.iter().sum())
            .max(1);
        // Room: walk the fallback chain until every node can hold what the mode asks.
        if opts.mode == Mode::Auto && cpu_nodes.len() > 1 {
            notes.push(format!(
                "auto: {} nodes run threads; trying mirror (a copy per node), then shard",
                cpu_nodes.len()
            ));
        }
        loop {
            let short = shortfall(topo, mode, &used, &cpu_count, threads, need);
            match short {
                None => break,
                Some(why) => {
                    let next = mode.fallback().unwrap_or(Mode::Off);
                    let line = format!("{mode}: {why}; using {next} instead");
                    if opts.strict && opts.mode != Mode::Auto {
                        return Err(PlanError::Strict(format!(
                            "{why}; --numa {mode} cannot be honoured (try --numa shard, which keeps one copy, or free memory)"
                        )));
                    }
                    if opts.mode == Mode::Auto {
                        notes.push(format!("auto: {why}; choosing {next}"));
                    } else {
                        fallbacks.push(line);
                    }
                    mode = next;
                }
            }
        }
        if opts.mode == Mode::Auto && mode == Mode::Mirror && cpu_nodes.len() > 1 {
            notes.push("auto: every node has room for a copy: mirror".into());
        }
        let mut slots = Vec::new();
        if mode == Mode::Off {
            let cpus = used.iter().fold(CpuSet::default(), |a, n| {
                a.union(&topo.allowed_cpus_of(n.id))
            });
            slots.push(Slot {
                node: if topo.nodes.len() == 1 {
                    Some(topo.nodes[0].id)
                } else {
                    None
                },
                cpus,
                threads: 0..threads,
            });
        } else {
            let shares = proportional(threads, &cpu_count);
            let mut next = 0;
            for (n, &k) in used.iter().zip(&shares) {
                if k == 0 {
                    continue;
                }
                slots.push(Slot {
                    node: Some(n.id),
                    cpus: topo.allowed_cpus_of(n.id),
                    threads: next..next + k,
                });
                next += k;
            }
            for (s, &c) in slots.iter().zip(&cpu_count) {
                if s.threads.len() > c {
                    notes.push(format!(
                        "node {}: {} threads share {} CPUs",
                        s.node.map_or(0, |n| n.0),
                        s.threads.len(),
                        c
                    ));
                }
            }
        }
        let store = match mode {
            Mode::Off | Mode::Distribute => Store::File,
            Mode::Interleave => Store::Interleaved(interleave_nodes(topo)),
            Mode::Isolate | Mode::Mirror => Store::PerSlot { full: true },
            Mode::Shard => Store::PerSlot { full: false },
            Mode::Auto => unreachable!("auto is resolved above"),
        };
        Ok(Plan {
            requested: opts.mode,
            mode,
            slots,
            threads,
            pin: opts.pin,
            store,
            hugepages: opts.hugepages,
            strict: opts.strict,
            poll: opts.poll,
            notes,
            fallbacks,
        })
    }

    /// The pool's group sizes, slot by slot.
    pub fn group_sizes(&self) -> Vec<usize> {
        self.slots.iter().map(|s| s.threads.len()).collect()
    }

    /// Whether threads are pinned at all.
    pub fn pinned(&self) -> bool {
        self.mode != Mode::Off
    }

    /// The CPUs thread `tid` is pinned to: its slot's CPUs, or with `--pin core` one of them.
    pub fn cpus_of_thread(&self, tid: usize) -> Option<CpuSet> {
        if !self.pinned() {
            return None;
        }
        let slot = self.slots.iter().find(|s| s.threads.contains(&tid))?;
        match self.pin {
            Pin::Node => Some(slot.cpus.clone()),
            Pin::Core => {
                let cpus: Vec<_> = slot.cpus.iter().collect();
                let cpu = cpus[(tid - slot.threads.start) % cpus.len()];
                Some(std::iter::once(cpu).collect())
            }
        }
    }

    /// One line: `mirror on nodes 0,1 (2+2 threads)`.
    pub fn summary(&self) -> String {
        let nodes: Vec<String> = self
            .slots
            .iter()
            .map(|s| s.node.map_or("any".to_string(), |n| n.0.to_string()))
            .collect();
        let threads: Vec<String> = self
            .slots
            .iter()
            .map(|s| s.threads.len().to_string())
            .collect();
        format!(
            "{} on node{} {} ({} threads{})",
            self.mode,
            if nodes.len() == 1 { "" } else { "s" },
            nodes.join(","),
            threads.join("+"),
            if self.pinned() {
                ", pinned"
            } else {
                ", not pinned"
            }
        )
    }
}

/// Nodes an interleaved copy spreads over: every allowed node with memory.
fn interleave_nodes(topo: &Topology) -> NodeMask {
    topo.nodes
        .iter()
        .filter(|n| topo.allowed_nodes.contains(n.id) && n.memory.total > 0)
        .map(|n| n.id)
        .collect()
}

/// Why the nodes lack room for `mode`'s copies, or `None` when they have it.
fn shortfall(
    topo: &Topology,
    mode: Mode,
    used: &[&Node],
    cpu_count: &[usize],
    threads: usize,
    need: Need,
) -> Option<String> {
    let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
    match mode {
        Mode::Mirror | Mode::Isolate => {
            let want = with_margin(need.copy_bytes);
            used.iter().find(|n| available(n) < want).map(|n| {
                format!(
                    "node {} has {:.0} MiB free or reclaimable, a copy needs {:.0} MiB with margin",
                    n.id.0,
                    mib(available(n)),
                    mib(want)
                )
            })
        }
        Mode::Shard => {
            let shares = proportional(threads, cpu_count);
            used.iter().zip(&shares).find_map(|(n, &k)| {
                let want = with_margin(need.copy_bytes * k as u64 / threads.max(1) as u64);
                (available(n) < want).then(|| {
                    format!(
                        "node {} has {:.0} MiB free or reclaimable, its shard needs {:.0} MiB with margin",
                        n.id.0,
                        mib(available(n)),
                        mib(want)
                    )
                })
            })
        }
        Mode::Interleave => {
            let nodes = interleave_nodes(topo);
            let total: u64 = topo
                .nodes
                .iter()
                .filter(|n| nodes.contains(n.id))
                .map(available)
                .sum();
            let want = with_margin(need.copy_bytes);
            (total < want).then(|| {
                format!(
                    "the nodes have {:.0} MiB free or reclaimable, a copy needs {:.0} MiB with margin",
                    mib(total),
                    mib(want)
                )
            })
        }
        _ => None,
    }
}

/// Splits `total` threads over nodes in proportion to `weights` (largest remainder), giving
/// every node one first while there are enough.
pub fn proportional(total: usize, weights: &[usize]) -> Vec<usize> {
    let n = weights.len();
    let sum: usize = weights.iter().sum();
    if n == 0 || sum == 0 {
        return vec![0; n];
    }
    let mut out: Vec<usize> = weights.iter().map(|&w| total * w / sum).collect();
    let given: usize = out.iter().sum();
    // Hand out the rest by largest remainder, ties to the lower index.
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by_key(|&i| std::cmp::Reverse((total * weights[i]) % sum));
    for &i in order.iter().cycle().take(total - given) {
        out[i] += 1;
    }
    // A node with CPUs but no thread while another has several: move one over.
    while let Some(empty) = (total >= n)
        .then(|| (0..n).find(|&i| out[i] == 0 && weights[i] > 0))
        .flatten()
    {
        let richest = (0..n).max_by_key(|&i| out[i]).unwrap_or(0);
        if out[richest] <= 1 {
            break;
        }
        out[richest] -= 1;
        out[empty] += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::topology::{NodeMemory, NumaBalancing, Source, Thp};

    const GIB: u64 = 1 << 30;

    /// Nodes as (cpu list, free GiB); a "" list is a memory-only node.
    fn topo(nodes: &[(&str, u64)]) -> Topology {
        let nodes: Vec<Node> = nodes
            .iter()
            .enumerate()
            .map(|(i, (cpus, free))| Node {
                id: NodeId(i as u32),
                cpus: if cpus.is_empty() {
                    CpuSet::default()
                } else {
                    CpuSet::parse_list(cpus).unwrap()
                },
                distances: vec![],
                memory: NodeMemory {
                    total: free * GIB + GIB,
                    free: free * GIB,
                    file_pages: 0,
                    active_file: Some(0),
                    inactive_file: Some(0),
                },
                hugepages: vec![],
            })
            .collect();
        let allowed_cpus = nodes
            .iter()
            .fold(CpuSet::default(), |a, n| a.union(&n.cpus));
        let ids: NodeMask = nodes.iter().map(|n| n.id).collect();
        Topology {
            possible_cpus: allowed_cpus.clone(),
            allowed_cpus,
            possible_nodes: ids.clone(),
            allowed_nodes: ids,
            nodes,
            numa_balancing: NumaBalancing::Off,
            thp: Thp::Madvise,
            source: Source::Sysfs,
        }
    }

    fn opts(mode: Mode, threads: Option<usize>) -> Options {
        Options {
            mode,
            threads,
            ..Options::default()
        }
    }

    fn need(gib: u64) -> Need {
        Need {
            copy_bytes: gib * GIB,
            packed_bytes: 0,
        }
    }

    #[test]
    fn one_node_auto_is_off_with_every_cpu() {
        let t = topo(&[("0-3", 8)]);
        let p = Plan::new(&t, &opts(Mode::Auto, None), need(1)).unwrap();
        assert_eq!(p.mode, Mode::Off);
        assert_eq!(p.threads, 4);
        assert_eq!(p.slots.len(), 1);
        assert_eq!(p.slots[0].node, Some(NodeId(0)));
        assert_eq!(p.store, Store::File);
        assert!(!p.pinned());
    }

    #[test]
    fn one_node_auto_copies_when_the_kernels_read_a_packed_copy_faster() {
        let t = topo(&[("0-3", 8)]);
        let packed = Need {
            packed_bytes: GIB / 2,
            ..need(1)
        };
        let p = Plan::new(&t, &opts(Mode::Auto, None), packed).unwrap();
        assert_eq!(p.mode, Mode::Mirror);
        assert_eq!(p.store, Store::PerSlot { full: true });
        assert_eq!(p.threads, 4);
        assert!(
            p.notes.iter().any(|n| n.contains("512 MiB")),
            "{:?}",
            p.notes
        );
        // Without room for the copy, auto keeps the file's mapping.
        let p = Plan::new(
            &t,
            &opts(Mode::Auto, None),
            Need {
                copy_bytes: 16 * GIB,
                ..packed
            },
        )
        .unwrap();
        assert_eq!(p.mode, Mode::Off);
        assert!(p.fallbacks.is_empty(), "auto's choice is not a fallback");
    }

    #[test]
    fn epyc_interleaved_numbering_groups_threads_contiguously_per_node() {
        let t = topo(&[("0-3,8-11", 64), ("4-7,12-15", 64)]);
        let p = Plan::new(&t, &opts(Mode::Mirror, Some(6)), need(4)).unwrap();
        assert_eq!(p.mode, Mode::Mirror);
        assert_eq!(p.group_sizes(), vec![3, 3]);
        assert_eq!(p.slots[0].threads, 0..3);
        assert_eq!(p.slots[1].threads, 3..6);
        assert_eq!(p.cpus_of_thread(2).unwrap().to_list(), "0-3,8-11");
        assert_eq!(p.cpus_of_thread(3).unwrap().to_list(), "4-7,12-15");
        let mut o = opts(Mode::Mirror, Some(6));
        o.pin = Pin::Core;
        let p = Plan::new(&t, &o, need(4)).unwrap();
        let cores: Vec<String> = (3..6)
            .map(|i| p.cpus_of_thread(i).unwrap().to_list())
            .collect();
        assert_eq!(cores, vec!["4", "5", "6"]);
    }

    #[test]
    fn auto_mirrors_with_room_and_shards_without() {
        let t = topo(&[("0-1", 16), ("2-3", 16)]);
        let p = Plan::new(&t, &opts(Mode::Auto, None), need(4)).unwrap();
        assert_eq!(p.mode, Mode::Mirror);
        assert_eq!(p.store, Store::PerSlot { full: true });
        // Node 1 can hold half the model but not all of it.
        let t = topo(&[("0-1", 16), ("2-3", 3)]);
        let p = Plan::new(&t, &opts(Mode::Auto, None), need(4)).unwrap();
        assert_eq!(p.mode, Mode::Shard);
        assert!(p.fallbacks.is_empty(), "auto's choice is not a fallback");
        assert!(
            p.notes.iter().any(|n| n.contains("node 1")),
            "{:?}",
            p.notes
        );
    }

    #[test]
    fn explicit_mirror_falls_back_loudly_or_fails_when_strict() {
        let t = topo(&[("0-1", 16), ("2-3", 3)]);
        let p = Plan::new(&t, &opts(Mode::Mirror, None), need(4)).unwrap();
        assert_eq!(p.mode, Mode::Shard);
        assert_eq!(p.fallbacks.len(), 1);
        assert!(p.fallbacks[0].contains("using shard"), "{:?}", p.fallbacks);
        let mut o = opts(Mode::Mirror, None);
        o.strict = true;
        let e = Plan::new(&t, &o, need(4)).unwrap_err();
        assert!(matches!(e, PlanError::Strict(_)));
        assert!(e.to_string().contains("node 1"), "{e}");
        // Nothing fits anywhere: down to the file mapping.
        let t = topo(&[("0-1", 1), ("2-3", 1)]);
        let p = Plan::new(&t, &opts(Mode::Mirror, None), need(8)).unwrap();
        assert_eq!(p.mode, Mode::Off);
        assert_eq!(p.fallbacks.len(), 3);
    }

    #[test]
    fn memory_only_nodes_get_no_threads_but_hold_interleaved_pages() {
        let t = topo(&[("0-1", 16), ("2-3", 16), ("", 16)]);
        let p = Plan::new(&t, &opts(Mode::Interleave, None), need(1)).unwrap();
        assert_eq!(p.slots.len(), 2);
        assert!(p.slots.iter().all(|s| s.node != Some(NodeId(2))));
        assert_eq!(
            p.store,
            Store::Interleaved([NodeId(0), NodeId(1), NodeId(2)].into_iter().collect())
        );
        let mut o = opts(Mode::Isolate, None);
        o.node = Some(NodeId(2));
        assert_eq!(
            Plan::new(&t, &o, need(1)).unwrap_err(),
            PlanError::NodeWithoutCpus(NodeId(2))
        );
        o.node = Some(NodeId(7));
        assert_eq!(
            Plan::new(&t, &o, need(1)).unwrap_err(),
            PlanError::UnknownNode(NodeId(7))
        );
    }

    #[test]
    fn isolate_uses_one_node_and_its_cpus() {
        let t = topo(&[("0-1", 16), ("2-5", 16)]);
        let mut o = opts(Mode::Isolate, None);
        o.node = Some(NodeId(1));
        let p = Plan::new(&t, &o, need(1)).unwrap();
        assert_eq!(p.threads, 4);
        assert_eq!(p.slots.len(), 1);
        assert_eq!(p.slots[0].node, Some(NodeId(1)));
        assert_eq!(p.store, Store::PerSlot { full: true });
    }

    #[test]
    fn a_node_without_free_memory_gets_no_copy() {
        let t = topo(&[("0-1", 16), ("2-3", 0)]);
        let p = Plan::new(&t, &opts(Mode::Auto, None), need(1)).unwrap();
        // No room for a copy or a shard on node 1: one interleaved copy (mostly node 0).
        assert_eq!(p.mode, Mode::Interleave);
        assert!(
            p.notes.iter().any(|n| n.contains("node 1 has 0 MiB")),
            "{:?}",
            p.notes
        );
        let mut o = opts(Mode::Shard, None);
        o.strict = true;
        let e = Plan::new(&t, &o, need(1)).unwrap_err();
        assert!(e.to_string().contains("node 1 has 0 MiB"), "{e}");
    }

    #[test]
    fn names_round_trip_in_order() {
        for (m, n) in Mode::ALL.into_iter().zip(Mode::ALL_NAMES) {
            assert_eq!(m.name(), n);
            assert_eq!(Mode::parse(n), Some(m));
        }
        assert_eq!(Mode::parse("mirrored"), None);
    }

    #[test]
    fn threads_split_in_proportion_to_cpus() {
        assert_eq!(proportional(5, &[4, 4]), vec![3, 2]);
        assert_eq!(proportional(8, &[2, 6]), vec![2, 6]);
        assert_eq!(proportional(3, &[1, 1, 1, 1]), vec![1, 1, 1, 0]);
        assert_eq!(proportional(4, &[1, 10, 1, 1]), vec![1, 1, 1, 1]);
        for total in 1..20 {
            for w in [vec![3, 5], vec![1, 1, 1], vec![8, 1, 2, 4]] {
                assert_eq!(proportional(total, &w).iter().sum::<usize>(), total);
            }
        }
    }

    #[test]
    fn sparse_node_ids_keep_their_ids() {
        let mut t = topo(&[("0-1", 16), ("2-3", 16)]);
        t.nodes[1].id = NodeId(2);
        t.allowed_nodes = [NodeId(0), NodeId(2)].into_iter().collect();
        let p = Plan::new(&t, &opts(Mode::Shard, None), need(1)).unwrap();
        let ids: Vec<_> = p.slots.iter().map(|s| s.node).collect();
        assert_eq!(ids, vec![Some(NodeId(0)), Some(NodeId(2))]);
    }
}
