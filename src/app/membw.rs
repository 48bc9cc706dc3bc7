//! `locus membw`: how fast this machine reads memory — per node (threads pinned to a node's
//! CPUs reading memory placed on that node) and, with `--matrix`, from every node to every
//! node. Decode streams every weight once per token, so this is the roofline for decode, and
//! the matrix shows what locality is worth on a host before memory is spent on copies.
//!
//! Memory is anonymous, bound to its node with `mbind(MPOL_BIND)` before first touch, and
//! first-touched by threads pinned to that node, so placement is right even where `mbind` is
//! refused (containers). Each thread reads its own slice, requesting lines ahead of its loads
//! as the decode kernels do; the best of several passes counts.

use std::fmt::Write as _;
use std::time::Instant;

use memmap2::MmapMut;

use super::AppError;
use crate::disjoint::Disjoint;
use crate::sys::affinity::set_affinity;
use crate::sys::ids::{CpuSet, NodeId, NodeMask};
use crate::sys::mempolicy::{mbind, MPOL_BIND};
use crate::sys::topology::Topology;

#[derive(Clone, Debug)]
pub struct MembwOptions {
    /// Threads per measurement (capped at the reading node's allowed CPUs).
    pub threads: usize,
    /// Buffer size per measurement, bytes.
    pub bytes: usize,
    pub passes: usize,
    pub matrix: bool,
    pub json: bool,
}

/// One measurement: threads on `cpu_node` reading memory on `mem_node`.
#[derive(Clone, Debug, PartialEq)]
pub struct Reading {
    pub cpu_node: u32,
    pub mem_node: u32,
    pub threads: usize,
    pub gb_per_s: f64,
}

/// How far ahead of its loads a reading thread requests lines (`prefetcht0`), in bytes. The
/// decode kernels prefetch their weights, so a roofline read without it would be one they
/// beat: reads with lines requested ahead were faster than plain ones, on one core and on
/// two, and 4, 8 and 12 KiB ahead read alike (figures: BENCHMARKS.md, "Design measurements
/// behind the code").
const PREFETCH_AHEAD: usize = 8 << 10;
/// The cache line: [`read_all`] requests one per eight words.
const LINE: usize = 64;

/// The smallest buffer a measurement reads by default.
const MIN_DEFAULT_BYTES: usize = 512 << 20;
/// How many times the last-level cache a default buffer spans (STREAM's rule for arrays).
const LLC_MULTIPLE: usize = 4;

/// The buffer a measurement reads by default: 512 MiB, or four times CPU `cpu`'s last-level
/// cache where that is larger. A buffer near the cache's size is partly read from it and so
/// overstates memory bandwidth: on this project's VM (a 260 MiB L3) two threads read 512 MiB
/// faster than 1–2 GiB, the cache serving part of it, and 256 MiB faster still (figures:
/// BENCHMARKS.md, "Design measurements behind the code").
pub fn default_bytes(cpu: usize) -> usize {
    default_bytes_for(crate::sys::cache::last_level_bytes(cpu))
}

/// [`default_bytes`] for a last-level cache of `llc` bytes (`None`: unknown).
fn default_bytes_for(llc: Option<u64>) -> usize {
    usize::try_from(llc.unwrap_or(0))
        .unwrap_or(usize::MAX)
        .saturating_mul(LLC_MULTIPLE)
        .max(MIN_DEFAULT_BYTES)
}

/// Asks for the cache line at `p` (any address: a prefetch never faults).
#[inline(always)]
fn prefetch(p: *const u8) {
    // SAFETY: SSE, which `_mm_prefetch` needs, is part of every x86-64 CPU; a prefetch reads
    // nothing and cannot fault, whatever the address.
    #[cfg(target_arch = "x86_64")]
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast())
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// Sums `words` with eight independent accumulators (the loads are the point, not the sum),
/// each line requested [`PREFETCH_AHEAD`] bytes before it is read.
#[inline(never)]
fn read_all(words: &[u64]) -> u64 {
    let mut acc = [0u64; 8];
    let ahead = words.as_ptr().cast::<u8>().wrapping_add(PREFETCH_AHEAD);
    for (i, chunk) in words.chunks_exact(8).enumerate() {
        prefetch(ahead.wrapping_add(i * LINE));
        for (a, w) in acc.iter_mut().zip(chunk) {
            *a = a.wrapping_add(*w);
        }
    }
    acc.iter().fold(0, |s, a| s.wrapping_add(*a))
}

/// The wall time of every pass, seconds: from the first reader's start to the last reader's
/// end, each read off the readers' own clocks (`spans[t][p]`: thread t's pass p). A clock read
/// by a third thread is not enough: on a machine with as many CPUs as readers it runs only
/// once a reader has finished, so passes looked several times shorter than they were (two
/// threads "read" 128–314 GB/s where one read 38; BENCHMARKS.md, "Packed kernels spread their
/// prefetches on AVX-512 too").
/// Passes some thread did not report are left out.
fn pass_walls(spans: &[Vec<(Instant, Instant)>]) -> Vec<f64> {
    let passes = spans.iter().map(Vec::len).min().unwrap_or(0);
    (0..passes)
        .filter_map(|p| {
            let start = spans.iter().map(|t| t[p].0).min()?;
            let end = spans.iter().map(|t| t[p].1).max()?;
            let secs = end.duration_since(start).as_secs_f64();
            (secs > 0.0).then_some(secs)
        })
        .collect()
}

/// Measures threads pinned to `cpus` reading a buffer placed on `mem_node`.
pub fn measure(
    cpus: &CpuSet,
    mem_node: NodeId,
    mask_bits: usize,
    opts: &MembwOptions,
) -> Result<f64, AppError> {
    let cpu_list: Vec<_> = cpus.iter().collect();
    let n = opts.threads.clamp(1, cpu_list.len().max(1));
    let words_per_thread = (opts.bytes / 8 / n).max(8) / 8 * 8;
    let bytes = words_per_thread * 8 * n;
    if crate::sys::memory::physical_bytes().is_some_and(|m| bytes as u64 > m / 2) {
        return Err(AppError::Usage(format!(
            "membw: --size {} MiB is more than half of this machine's memory; use a smaller --size",
            bytes >> 20
        )));
    }
    let mut map = MmapMut::map_anon(bytes).map_err(|err| AppError::Io {
        path: "anonymous memory".into(),
        what: "cannot map the measurement buffer",
        err,
    })?;
    let mut mask = NodeMask::with_capacity(mask_bits);
    mask.insert(mem_node);
    // Refused in some containers: first touch by threads pinned near the node still places it.
    let bound = mbind(&map[..], MPOL_BIND, Some(&mask), 0).is_ok();
    // SAFETY: u64 is valid for any bytes; the mapping is page-aligned and `bytes` a multiple
    // of 8, so the aligned middle is the whole mapping (and `slice` checks each thread's part).
    let (_, all, _) = unsafe { map.align_to_mut::<u64>() };
    let all = Disjoint::new(all);
    let mut best = 0f64;
    let barrier = std::sync::Barrier::new(n);
    // Threads wait at this gate until all are started; where one cannot be (a pids limit),
    // the others are told to leave before they reach the barrier, which would never fill.
    let gate = std::sync::RwLock::new(());
    let all_started = std::sync::atomic::AtomicBool::new(false);
    let mut failed = None;
    std::thread::scope(|scope| {
        let closed = gate.write().unwrap_or_else(|e| e.into_inner());
        let mut times = Vec::with_capacity(n);
        for t in 0..n {
            let cpu = cpu_list.get(t % cpu_list.len().max(1)).copied();
            let (barrier, gate, all_started) = (&barrier, &gate, &all_started);
            let passes = opts.passes;
            // Test hook: `LOCUS_FAULT=spawn` fails the second thread, as a pids limit would.
            let injected = t == 1 && crate::placement::fault("spawn").is_some();
            let spawned = if injected {
                Err(std::io::Error::from_raw_os_error(libc::EAGAIN))
            } else {
                std::thread::Builder::new().spawn_scoped(scope, move || {
                    drop(gate.read().unwrap_or_else(|e| e.into_inner()));
                    if !all_started.load(std::sync::atomic::Ordering::Acquire) {
                        return Vec::new();
                    }
                    if let Some(c) = cpu {
                        let mut one = CpuSet::with_capacity(c.index() + 1);
                        one.insert(c);
                        let _ = set_affinity(&one);
                    }
                    // SAFETY: each thread owns the disjoint words [t·w, (t+1)·w).
                    let words =
                        unsafe { all.slice(t * words_per_thread..(t + 1) * words_per_thread) };
                    for (i, w) in words.iter_mut().enumerate() {
                        *w = i as u64; // first touch, by a thread on the reading node
                    }
                    let mut spans = Vec::with_capacity(passes);
                    for _ in 0..passes {
                        barrier.wait();
                        let t0 = Instant::now();
                        std::hint::black_box(read_all(words));
                        spans.push((t0, Instant::now()));
                        barrier.wait();
                    }
                    spans
                })
            };
            match spawned {
                Ok(h) => times.push(h),
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            }
        }
        all_started.store(failed.is_none(), std::sync::atomic::Ordering::Release);
        drop(closed);
        if failed.is_some() {
            return;
        }
        let spans: Vec<Vec<(Instant, Instant)>> = times
            .into_iter()
            .map(|h| h.join().unwrap_or_default())
            .collect();
        best = pass_walls(&spans)
            .iter()
            .map(|s| bytes as f64 / s / 1e9)
            .fold(0.0, f64::max);
    });
    if let Some(err) = failed {
        return Err(AppError::Usage(format!(
            "membw: cannot start a measuring thread: {err} (a limit on threads, such as a \
             container's pids.max?); use fewer threads (-t)"
        )));
    }
    if !bound {
        crate::diagln!(
            "locus: mbind refused; node {} memory placed by first touch only",
            mem_node.0
        );
    }
    Ok(best)
}

/// Runs the measurements the options ask for.
pub fn readings(topo: &Topology, opts: &MembwOptions) -> Result<Vec<Reading>, AppError> {
    let cpu_nodes: Vec<NodeId> = topo
        .nodes
        .iter()
        .map(|n| n.id)
        .filter(|&id| !topo.allowed_cpus_of(id).is_empty())
        .collect();
    let mem_nodes: Vec<NodeId> = topo
        .nodes
        .iter()
        .map(|n| n.id)
        .filter(|id| topo.allowed_nodes.contains(*id))
        .collect();
    let mut out = Vec::new();
    for &c in &cpu_nodes {
        let cpus = topo.allowed_cpus_of(c);
        let targets: Vec<NodeId> = if opts.matrix {
            mem_nodes.clone()
        } else {
            vec![c]
        };
        for m in targets {
            let gb = measure(&cpus, m, topo.node_mask_bits(), opts)?;
            out.push(Reading {
                cpu_node: c.0,
                mem_node: m.0,
                threads: opts.threads.min(cpus.len()).max(1),
                gb_per_s: gb,
            });
        }
    }
    Ok(out)
}

/// A table (or `n×n` matrix) of the readings.
pub fn render_text(r: &[Reading], matrix: bool) -> String {
    let mut s = String::new();
    if !matrix {
        let _ = writeln!(
            s,
            "node  threads  read GB/s (threads on the node, memory on the node)"
        );
        for x in r {
            let _ = writeln!(s, "{:<5} {:>7}  {:>9.2}", x.cpu_node, x.threads, x.gb_per_s);
        }
        let total: f64 = r.iter().map(|x| x.gb_per_s).sum();
        let _ = writeln!(
            s,
            "sum of nodes: {total:.2} GB/s (the decode roofline when every node reads locally)"
        );
        return s;
    }
    let mut mems: Vec<u32> = r.iter().map(|x| x.mem_node).collect();
    mems.sort_unstable();
    mems.dedup();
    let _ = write!(s, "read GB/s  cpu\\mem");
    for m in &mems {
        let _ = write!(s, " {m:>8}");
    }
    let mut cpus: Vec<u32> = r.iter().map(|x| x.cpu_node).collect();
    cpus.dedup();
    for c in cpus {
        let _ = write!(s, "\n{c:>18}");
        for m in &mems {
            let v = r
                .iter()
                .find(|x| x.cpu_node == c && x.mem_node == *m)
                .map_or(0.0, |x| x.gb_per_s);
            let _ = write!(s, " {v:>8.2}");
        }
    }
    s.push('\n');
    s
}

pub fn render_json(r: &[Reading]) -> String {
    let items: Vec<String> = r
        .iter()
        .map(|x| {
            format!(
                "{{\"cpu_node\":{},\"mem_node\":{},\"threads\":{},\"gb_per_s\":{:.3}}}",
                x.cpu_node, x.mem_node, x.threads, x.gb_per_s
            )
        })
        .collect();
    format!("{{\"readings\":[{}]}}", items.join(","))
}

/// `locus membw`.
pub fn run(opts: &MembwOptions) -> Result<Vec<Reading>, AppError> {
    let topo = Topology::detect()
        .map_err(|e| AppError::Usage(format!("cannot read the topology: {e}")))?;
    let r = readings(&topo, opts)?;
    if opts.json {
        super::write_stdout(&format!("{}\n", render_json(&r)))?;
    } else {
        super::write_stdout(&render_text(&r, opts.matrix))?;
    }
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pass_lasts_from_the_first_start_to_the_last_end() {
        use std::time::Duration;
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        // Two readers that did not overlap in pass 0 (as when a reader waits for a CPU), and
        // overlapped in pass 1; a third pass only thread 0 reported.
        let spans = vec![
            vec![(at(0), at(100)), (at(200), at(300)), (at(400), at(500))],
            vec![(at(100), at(200)), (at(210), at(290))],
        ];
        let walls = pass_walls(&spans);
        assert_eq!(walls.len(), 2);
        assert!((walls[0] - 0.2).abs() < 1e-9, "{walls:?}");
        assert!((walls[1] - 0.1).abs() < 1e-9, "{walls:?}");
        assert!(pass_walls(&[]).is_empty());
    }

    #[test]
    fn the_default_buffer_spans_four_last_level_caches_and_at_least_512_mib() {
        assert_eq!(default_bytes_for(Some(260 << 20)), 1040 << 20);
        assert_eq!(default_bytes_for(Some(32 << 20)), 512 << 20);
        assert_eq!(default_bytes_for(None), 512 << 20);
        assert_eq!(default_bytes_for(Some(u64::MAX)), usize::MAX);
    }
}
