//! `locus topo [--json]`: what locus sees of the machine before it places anything — NUMA
//! nodes with their CPUs, memory, page cache and hugepages, memory-only nodes, the distance
//! matrix, the CPUs and nodes this process may use, which NUMA system calls are allowed, the
//! kernel's `numa_balancing` and THP settings, and the kernel tier in use. Text for people by
//! default; `--json` prints one object for scripts and bug reports.

use std::fmt;
use std::fmt::Write as _;

use crate::json::Quoted;
use crate::kernels::Kernels;
use crate::sys::ids::{CpuSet, NodeMask};
use crate::sys::mempolicy;
use crate::sys::probe::{Capabilities, Capability};
use crate::sys::topology::{HugePool, NumaBalancing, Source, Topology, TopologyError};

/// Parsed options of `locus topo`.
#[derive(Clone, Debug, Default)]
pub struct TopoOptions {
    pub json: bool,
}

/// Why `locus topo` failed.
#[derive(Debug)]
pub enum TopoError {
    Topology(TopologyError),
    Stdout(std::io::Error),
}

impl fmt::Display for TopoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TopoError::Topology(e) => write!(f, "cannot read the NUMA topology: {e}"),
            TopoError::Stdout(e) => write!(f, "stdout: cannot write the output: {e}"),
        }
    }
}

impl std::error::Error for TopoError {}

/// Everything `locus topo` reports.
#[derive(Clone, Debug)]
pub struct TopoReport {
    pub topology: Topology,
    pub capabilities: Capabilities,
    /// The kernel tier's name, or why none could be chosen (e.g. a forced tier the CPU lacks).
    pub kernel_tier: String,
}

impl TopoReport {
    /// Reads this machine and runs the capability probe.
    pub fn gather() -> Result<TopoReport, TopoError> {
        let topology = Topology::detect().map_err(TopoError::Topology)?;
        let capabilities = Capabilities::probe(topology.node_mask_bits());
        let kernel_tier = match Kernels::detect() {
            Ok(k) => k.tier.name().to_string(),
            Err(e) => format!("unavailable: {e}"),
        };
        Ok(TopoReport {
            topology,
            capabilities,
            kernel_tier,
        })
    }

    /// What a user should know before trusting placement: one line each.
    pub fn warnings(&self) -> Vec<String> {
        let mut w = Vec::new();
        if let NumaBalancing::On { .. } = self.topology.numa_balancing {
            w.push(
                "kernel NUMA balancing is on: it may migrate pages behind locus's back \
                 (echo 0 > /proc/sys/kernel/numa_balancing)"
                    .to_string(),
            );
        }
        for (name, e) in self.capabilities.refused() {
            w.push(format!(
                "{name} is refused with {}: {}",
                e.errno_text(),
                consequence(name)
            ));
        }
        if self.topology.source == Source::NoNodeDirectory {
            w.push("no /sys/devices/system/node: treating the machine as one node".to_string());
        }
        w
    }
}

/// What locus does without a refused call.
fn consequence(call: &str) -> &'static str {
    match call {
        "mbind" => "copies are placed by first touch from pinned threads instead",
        "set_mempolicy" => "thread memory policies cannot be set; first touch decides placement",
        "get_mempolicy" => "the memory policy locus started with cannot be read",
        "move_pages" => "the placement audit reads /proc/self/numa_maps instead",
        "getcpu" => "the running CPU is inferred from the thread's affinity",
        "sched_setaffinity" => "threads cannot be pinned, so locality cannot be guaranteed",
        _ => "",
    }
}

/// Runs `locus topo`, printing to stdout.
pub fn run(o: &TopoOptions) -> Result<(), TopoError> {
    let report = TopoReport::gather()?;
    let text = if o.json {
        format!("{}\n", render_json(&report))
    } else {
        render_text(&report)
    };
    super::write_stdout_io(&text).map_err(TopoError::Stdout)
}

/// `7.09 GiB`, `512.0 MiB`, `12 B`.
fn human_bytes(b: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if b < 1024 {
        return format!("{b} B");
    }
    let mut v = b as f64 / 1024.0;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    format!("{v:.2} {}", UNITS[u])
}

/// `2M 0/4` (free/total per pool size); `-` without pools.
fn hugepages_text(pools: &[HugePool]) -> String {
    if pools.is_empty() {
        return "-".to_string();
    }
    pools
        .iter()
        .map(|p| {
            let size = if p.size_kb % (1024 * 1024) == 0 {
                format!("{}G", p.size_kb / (1024 * 1024))
            } else if p.size_kb % 1024 == 0 {
                format!("{}M", p.size_kb / 1024)
            } else {
                format!("{}K", p.size_kb)
            };
            format!("{size} {}/{}", p.free, p.total)
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn list_or_none(s: String) -> String {
    if s.is_empty() {
        "none".to_string()
    } else {
        s
    }
}

/// The human-readable report.
pub fn render_text(r: &TopoReport) -> String {
    let t = &r.topology;
    let mut out = String::new();
    let source = match t.source {
        Source::Sysfs => "/sys/devices/system/node",
        Source::NoNodeDirectory => "no node directory; one node assumed",
    };
    let _ = writeln!(
        out,
        "NUMA nodes: {} online ({}), possible {} [{source}]",
        t.nodes.len(),
        list_or_none(t.nodes.iter().map(|n| n.id).collect::<NodeMask>().to_list()),
        list_or_none(t.possible_nodes.to_list()),
    );
    let cpu_w = t
        .nodes
        .iter()
        .map(|n| n.cpus.to_list().len())
        .max()
        .unwrap_or(0)
        .max("cpus".len());
    let _ = writeln!(
        out,
        "{:<5} {:<cpu_w$} {:>5} {:>7} {:>11} {:>11} {:>11}  {:<11} hugepages (free/total)",
        "node", "cpus", "#cpus", "allowed", "mem total", "mem free", "file pages", "kind",
    );
    for n in &t.nodes {
        let allowed = t.allowed_cpus_of(n.id).len();
        let kind = if n.memory_only() {
            "memory-only"
        } else {
            "cpu+memory"
        };
        let cpus = if n.cpus.is_empty() {
            "-".to_string()
        } else {
            n.cpus.to_list()
        };
        let _ = writeln!(
            out,
            "{:<5} {:<cpu_w$} {:>5} {:>7} {:>11} {:>11} {:>11}  {:<11} {}",
            n.id,
            cpus,
            n.cpus.len(),
            allowed,
            human_bytes(n.memory.total),
            human_bytes(n.memory.free),
            human_bytes(n.memory.file_pages),
            kind,
            hugepages_text(&n.hugepages),
        );
    }
    out.push_str("distances:\n");
    let _ = write!(out, "{:>6}", "");
    for n in &t.nodes {
        let _ = write!(out, " {:>4}", n.id);
    }
    out.push('\n');
    for n in &t.nodes {
        let _ = write!(out, "{:>6}", n.id);
        for d in &n.distances {
            let _ = write!(out, " {d:>4}");
        }
        out.push('\n');
    }
    let _ = writeln!(
        out,
        "allowed CPUs: {} ({})",
        list_or_none(t.allowed_cpus.to_list()),
        t.allowed_cpus.len()
    );
    let _ = writeln!(
        out,
        "allowed nodes: {}",
        list_or_none(t.allowed_nodes.to_list())
    );
    out.push_str("system calls:\n");
    for (name, c) in r.capabilities.entries() {
        let _ = writeln!(out, "  {name:<18} {c}");
    }
    if let Some(p) = &r.capabilities.start_policy {
        let _ = writeln!(out, "memory policy at start: {}", policy_text(p));
    }
    let _ = writeln!(out, "numa_balancing: {}", t.numa_balancing);
    let _ = writeln!(out, "transparent hugepages: {}", t.thp);
    let _ = writeln!(out, "kernel tier: {}", r.kernel_tier);
    for w in r.warnings() {
        let _ = writeln!(out, "warning: {w}");
    }
    out
}

fn policy_text(p: &mempolicy::Policy) -> String {
    if p.nodes.is_empty() {
        mempolicy::mode_name(p.mode).to_string()
    } else {
        format!("{} {}", mempolicy::mode_name(p.mode), p.nodes)
    }
}

fn json_ids(out: &mut String, ids: impl Iterator<Item = u32>) {
    out.push('[');
    for (i, id) in ids.enumerate() {
        if i > 0 {
            out.push(',');
        }
        let _ = write!(out, "{id}");
    }
    out.push(']');
}

fn json_cpus(out: &mut String, s: &CpuSet) {
    json_ids(out, s.iter().map(|c| c.0));
}

fn json_nodes(out: &mut String, s: &NodeMask) {
    json_ids(out, s.iter().map(|n| n.0));
}

fn json_opt(out: &mut String, v: Option<u64>) {
    match v {
        Some(v) => {
            let _ = write!(out, "{v}");
        }
        None => out.push_str("null"),
    }
}

/// The report as one JSON object (memory in bytes, CPU and node sets as arrays of ids).
pub fn render_json(r: &TopoReport) -> String {
    let t = &r.topology;
    let mut o = String::from("{\"nodes\":[");
    for (i, n) in t.nodes.iter().enumerate() {
        if i > 0 {
            o.push(',');
        }
        let _ = write!(o, "{{\"id\":{},\"cpus\":", n.id);
        json_cpus(&mut o, &n.cpus);
        let _ = write!(o, ",\"cpulist\":{}", Quoted(&n.cpus.to_list()));
        o.push_str(",\"allowed_cpus\":");
        json_cpus(&mut o, &t.allowed_cpus_of(n.id));
        let m = &n.memory;
        let _ = write!(
            o,
            ",\"mem_total\":{},\"mem_free\":{},\"file_pages\":{},\"active_file\":",
            m.total, m.free, m.file_pages
        );
        json_opt(&mut o, m.active_file);
        o.push_str(",\"inactive_file\":");
        json_opt(&mut o, m.inactive_file);
        let _ = write!(o, ",\"memory_only\":{},\"hugepages\":[", n.memory_only());
        for (j, p) in n.hugepages.iter().enumerate() {
            if j > 0 {
                o.push(',');
            }
            let _ = write!(
                o,
                "{{\"size_kb\":{},\"total\":{},\"free\":{}}}",
                p.size_kb, p.total, p.free
            );
        }
        o.push_str("]}");
    }
    o.push_str("],\"distances\":[");
    for (i, n) in t.nodes.iter().enumerate() {
        if i > 0 {
            o.push(',');
        }
        json_ids(&mut o, n.distances.iter().copied());
    }
    o.push_str("],\"possible_nodes\":");
    json_nodes(&mut o, &t.possible_nodes);
    o.push_str(",\"allowed_cpus\":");
    json_cpus(&mut o, &t.allowed_cpus);
    o.push_str(",\"allowed_nodes\":");
    json_nodes(&mut o, &t.allowed_nodes);
    o.push_str(",\"capabilities\":{");
    for (i, (name, c)) in r.capabilities.entries().into_iter().enumerate() {
        if i > 0 {
            o.push(',');
        }
        let _ = write!(o, "{}:", Quoted(name));
        let verdict = match c {
            Capability::Allowed => "ok".to_string(),
            Capability::Refused(e) => e.errno_text(),
        };
        let _ = write!(o, "{}", Quoted(&verdict));
    }
    o.push_str("},\"memory_policy\":");
    match &r.capabilities.start_policy {
        Some(p) => {
            let _ = write!(o, "{{\"mode\":{}", Quoted(mempolicy::mode_name(p.mode)));
            o.push_str(",\"nodes\":");
            json_nodes(&mut o, &p.nodes);
            o.push('}');
        }
        None => o.push_str("null"),
    }
    let _ = write!(
        o,
        ",\"numa_balancing\":{}",
        Quoted(&t.numa_balancing.to_string())
    );
    let _ = write!(o, ",\"thp\":{}", Quoted(&t.thp.to_string()));
    let _ = write!(o, ",\"kernel_tier\":{}", Quoted(&r.kernel_tier));
    let source = match t.source {
        Source::Sysfs => "sysfs",
        Source::NoNodeDirectory => "no node directory",
    };
    let _ = write!(o, ",\"source\":{}", Quoted(source));
    o.push_str(",\"warnings\":[");
    for (i, w) in r.warnings().iter().enumerate() {
        if i > 0 {
            o.push(',');
        }
        let _ = write!(o, "{}", Quoted(w));
    }
    o.push_str("]}");
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_well() {
        assert_eq!(human_bytes(12), "12 B");
        assert_eq!(human_bytes(1536), "1.50 KiB");
        assert_eq!(human_bytes(7 << 30), "7.00 GiB");
        let pools = [
            HugePool {
                size_kb: 2048,
                total: 4,
                free: 1,
            },
            HugePool {
                size_kb: 1048576,
                total: 0,
                free: 0,
            },
        ];
        assert_eq!(hugepages_text(&pools), "2M 1/4, 1G 0/0");
    }
}
