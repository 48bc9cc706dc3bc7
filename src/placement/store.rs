//! The WeightStore: the placed copies of the weights. Each piece (a matrix, or the rows of it a
//! node computes) lives in its own anonymous [`Region`], given its memory policy with `mbind`
//! before any page exists, then filled in parallel by threads pinned to the target node — so
//! placement is right by first touch even where `mbind` is refused (containers).

use std::collections::HashMap;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use super::plan::{Plan, Store};
use crate::disjoint::Disjoint;
use crate::kernels::{pack, Kernels, Layout, PACK_ROWS};
use crate::model::weights::{Matrix, Tensor, Weights};
use crate::pool::rows_of_group;
use crate::sys::memory::{self, Backing, Region};
use crate::sys::mempolicy::{self, MPOL_BIND, MPOL_INTERLEAVE};
use crate::sys::probe::Capabilities;
use crate::sys::topology::{Thp, Topology};
use crate::sys::{affinity, NodeId, NodeMask, SysError};

/// The size of the hugetlb pages `--hugepages` asks for.
pub const HUGE_PAGE_BYTES: usize = 2 << 20;
/// Regions at least this large get `MADV_HUGEPAGE` (smaller ones cannot use a huge page).
const THP_MIN_BYTES: usize = 2 << 20;
/// An interleaved copy uses huge pages only when it spans at least this many per node.
const INTERLEAVE_THP_PAGES_PER_NODE: usize = 64;
/// Bytes one filler copies between progress updates.
const FILL_CHUNK: usize = 1 << 20;

/// One placed piece of a matrix: rows `rows` of `tensor`, at `offset` in region `region`.
pub struct Piece {
    pub tensor: String,
    /// The pool slot whose view this is (`None`: one interleaved copy read by every slot).
    pub slot: Option<usize>,
    /// The node the piece was placed on (`None`: interleaved).
    pub node: Option<NodeId>,
    pub rows: Range<usize>,
    /// How the piece's bytes hold the rows (packed for the kernels, or the file's layout).
    pub layout: Layout,
    region: usize,
    offset: usize,
    len: usize,
}

/// Why a store could not be built.
#[derive(Debug)]
pub struct BuildError {
    pub tensor: String,
    pub node: Option<NodeId>,
    /// What failed (a system call's error, or an empty hugetlb pool).
    pub why: String,
}

impl std::fmt::Display for BuildError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let place = match self.node {
            Some(n) => format!("on node {}", n.0),
            None => "interleaved".to_string(),
        };
        write!(
            f,
            "cannot allocate the copy of {} {place}: {}",
            self.tensor, self.why
        )
    }
}

/// Test hook: `LOCUS_FAULT=alloc:N` makes every region allocation after the first N fail
/// with ENOMEM (as `mmap` does when memory or `ulimit -v` runs out midway).
fn injected_alloc_failure(count: &AtomicUsize) -> Option<SysError> {
    let n: usize = super::fault("alloc")?.parse().ok()?;
    (count.fetch_add(1, Ordering::Relaxed) >= n).then_some(SysError {
        call: "mmap",
        errno: libc::ENOMEM,
    })
}

/// The placed copies, by tensor name. One region per node slot (or one interleaved region),
/// each its own mapping, the pieces packed in it at page boundaries.
pub struct WeightStore {
    regions: Vec<Region>,
    pieces: Vec<Piece>,
    by_tensor: HashMap<String, Vec<usize>>,
    pub warnings: Vec<String>,
    /// Bytes copied and how long it took.
    pub bytes: u64,
    pub elapsed: Duration,
}

/// What building needs to know about the host.
pub struct Host<'a> {
    pub topo: &'a Topology,
    pub caps: &'a Capabilities,
    /// The kernels that will read the copies: each copy is packed in the layout they read
    /// fastest ([`Kernels::preferred_layout`]); `None` keeps the file's layout.
    pub kernels: Option<&'a Kernels>,
    /// How the fill streams the file (`None`: it only reads the mapping).
    pub file: Option<&'a FileHooks<'a>>,
}

/// What the fill tells the file it copies from; both are best effort (advice).
pub struct FileHooks<'a> {
    /// The fill is about to read these addresses of the file's mapping: start reading them.
    pub will_need: &'a (dyn Fn(Range<usize>) + Sync + 'a),
    /// A copy will read these bytes of the file's mapping (said of every read before any
    /// starts).
    pub expect: &'a (dyn Fn(&[u8]) + Sync + 'a),
    /// A copy has read these bytes: once every read of a page's folio is done, it may go from
    /// the page cache ([`super::release`]).
    pub release: &'a (dyn Fn(&[u8]) + Sync + 'a),
}

/// How far ahead of its copying each filler keeps the file's bytes asked for.
const READ_AHEAD: usize = 4 << 20;
/// The most one request asks for: the kernel reads at most the device's read-ahead size per
/// request (`read_ahead_kb`, 128 KiB by default) and drops the rest, which would leave holes
/// for the copy to fault in page by page.
const READ_STEP: usize = 128 << 10;

impl WeightStore {
    /// Copies `mats` as `plan` says. `Store::File` plans need no store (returns an empty one).
    pub fn build(
        plan: &Plan,
        host: &Host,
        mats: &[&Matrix],
        progress: bool,
    ) -> Result<WeightStore, BuildError> {
        let t0 = Instant::now();
        let page = memory::page_size();
        let mut warnings = Vec::new();
        // The regions: (slot, node) for each, and the pieces laid out in them.
        let region_keys: Vec<(Option<usize>, Option<NodeId>)> = match &plan.store {
            Store::File => Vec::new(),
            Store::Interleaved(_) => vec![(None, None)],
            Store::PerSlot { .. } => plan
                .slots
                .iter()
                .enumerate()
                .map(|(i, s)| (Some(i), s.node))
                .collect(),
        };
        let mut pieces = Vec::new();
        let mut sizes = vec![0usize; region_keys.len()];
        for m in mats {
            let first = pieces.len();
            for (ri, &(slot, node)) in region_keys.iter().enumerate() {
                let rows = match (&plan.store, slot) {
                    (Store::PerSlot { full: false }, Some(i)) => {
                        let (lo, hi) =
                            rows_of_group(m.rows(), &plan.slots[i].threads, plan.threads);
                        lo..hi
                    }
                    _ => 0..m.rows(),
                };
                let len = rows.len() * m.file.row_bytes;
                pieces.push(Piece {
                    tensor: m.name.clone(),
                    slot,
                    node,
                    rows,
                    layout: Layout::Rows,
                    region: ri,
                    offset: sizes[ri],
                    len,
                });
                sizes[ri] += len.div_ceil(page) * page;
            }
            // Packed only when every piece is whole packed groups, so all of a matrix's views
            // share one layout (the matmuls round the groups' row shares alike for all).
            let layout = copy_layout(host.kernels, m);
            let whole = |r: &Range<usize>| {
                r.start.is_multiple_of(PACK_ROWS) && r.end.is_multiple_of(PACK_ROWS)
            };
            if layout != Layout::Rows && pieces[first..].iter().all(|p| whole(&p.rows)) {
                pieces[first..].iter_mut().for_each(|p| p.layout = layout);
            }
        }
        let alloc_count = AtomicUsize::new(0);
        let mbind_ok = host.caps.mbind.is_allowed();
        let mut hugetlb = plan.hugepages;
        let bits = host.topo.node_mask_bits();
        let mut regions = Vec::with_capacity(region_keys.len());
        for (&(_, node), &size) in region_keys.iter().zip(&sizes) {
            let fail = |err: SysError| BuildError {
                tensor: "the weights".into(),
                node,
                why: err.to_string(),
            };
            if let Some(err) = injected_alloc_failure(&alloc_count) {
                return Err(fail(err));
            }
            let region = if hugetlb {
                // The pool is per node: a bound region needs its node's free pages (the global
                // reservation mmap makes would not stop a SIGBUS on an empty node).
                let free = free_huge_bytes(host.topo, &plan.store, node);
                let place =
                    node.map_or("the interleaved nodes".into(), |n| format!("node {}", n.0));
                let huge = match super::fault("hugepages") {
                    Some(_) => Err("mmap failed: ENOMEM (injected by LOCUS_FAULT)".to_string()),
                    None if free < size as u64 => Err(format!(
                        "{place} has {} MiB of free 2 MiB hugetlb pages, the copy needs {} MiB",
                        free >> 20,
                        size.div_ceil(HUGE_PAGE_BYTES) * 2
                    )),
                    None => Region::anonymous(size, Backing::HugeTlb(HUGE_PAGE_BYTES))
                        .map_err(|e| e.to_string()),
                };
                match huge {
                    Ok(r) => r,
                    Err(why) if plan.strict => {
                        return Err(BuildError {
                            tensor: "the weights (--hugepages)".into(),
                            node,
                            why,
                        })
                    }
                    Err(why) => {
                        warnings.push(format!(
                            "--hugepages: {why}; using base pages (reserve pages in /sys/devices/system/node/node*/hugepages/hugepages-2048kB/nr_hugepages)"
                        ));
                        hugetlb = false;
                        Region::anonymous(size, Backing::Base).map_err(fail)?
                    }
                }
            } else {
                Region::anonymous(size, Backing::Base).map_err(fail)?
            };
            if region.backing() == Backing::Base && host.topo.thp != Thp::Never {
                // Huge pages cut TLB misses on the streamed weights, but an interleaved copy
                // would then spread in 2 MiB steps: lumpy unless it spans many per node.
                let advice = match &plan.store {
                    Store::Interleaved(mask)
                        if size < INTERLEAVE_THP_PAGES_PER_NODE * THP_MIN_BYTES * mask.len() =>
                    {
                        memory::MADV_NOHUGEPAGE
                    }
                    _ if size >= THP_MIN_BYTES => memory::MADV_HUGEPAGE,
                    _ => memory::MADV_NOHUGEPAGE,
                };
                // Best effort: advice only.
                let _ = memory::madvise(region.as_slice(), advice);
            }
            if mbind_ok {
                let r = match (&plan.store, node) {
                    (Store::Interleaved(mask), _) => {
                        mempolicy::mbind(region.whole_pages(), MPOL_INTERLEAVE, Some(mask), 0)
                    }
                    (_, Some(n)) => {
                        let mut mask = NodeMask::with_capacity(bits);
                        mask.insert(n);
                        mempolicy::mbind(region.whole_pages(), MPOL_BIND, Some(&mask), 0)
                    }
                    _ => Ok(()),
                };
                if let Err(e) = r {
                    warnings.push(format!("{e}; relying on first touch by pinned threads"));
                }
            }
            regions.push(region);
        }
        if !mbind_ok && !regions.is_empty() {
            warnings.push(
                "mbind is refused here (seccomp? see `locus topo`): copies are placed by first touch from threads pinned to each node"
                    .into(),
            );
        }
        // Packed pieces are packed straight from the file as they are filled (one pass over
        // their pages), except where pages are interleaved by touch: there each page's filler
        // is chosen by address, so those copies are filled in the file's layout and packed
        // in place afterwards.
        let fused = mbind_ok || !matches!(plan.store, Store::Interleaved(_));
        let fill_opts = FillOpts {
            mbind_ok,
            progress,
            fused,
            file: host.file,
        };
        let bytes = fill(plan, mats, &mut regions, &pieces, &fill_opts);
        if !fused {
            pack_pieces(plan, mats, &mut regions, &pieces);
        }
        let mut by_tensor: HashMap<String, Vec<usize>> = HashMap::new();
        for (i, p) in pieces.iter().enumerate() {
            by_tensor.entry(p.tensor.clone()).or_default().push(i);
        }
        Ok(WeightStore {
            regions,
            pieces,
            by_tensor,
            warnings,
            bytes,
            elapsed: t0.elapsed(),
        })
    }

    pub fn pieces(&self) -> &[Piece] {
        &self.pieces
    }

    pub fn is_empty(&self) -> bool {
        self.pieces.is_empty()
    }

    /// A piece's bytes.
    pub fn bytes_of(&self, p: &Piece) -> &[u8] {
        &self.regions[p.region].as_slice()[p.offset..p.offset + p.len]
    }

    /// Points every matrix of `w` at its placed pieces (one view per slot, or one shared).
    pub fn bind<'s>(&'s self, w: &mut Weights<'s>) {
        if self.pieces.is_empty() {
            return;
        }
        for m in w.matrices_mut() {
            let Some(ids) = self.by_tensor.get(&m.name) else {
                continue;
            };
            let views: Vec<Tensor<'s>> = ids
                .iter()
                .map(|&i| {
                    let p = &self.pieces[i];
                    m.file
                        .with_data(p.rows.start, p.rows.end, self.bytes_of(p))
                        .with_layout(p.layout)
                })
                .collect();
            m.set_views(views);
        }
    }
}

/// The layout a whole copy of `m` takes for `kernels`: the one they read fastest when `m` is
/// whole packed groups and not read row by row (the embedding), the file's otherwise (a
/// shard's pieces must also start and end on group boundaries).
pub fn copy_layout(kernels: Option<&Kernels>, m: &Matrix) -> Layout {
    match kernels {
        Some(k) if m.rows().is_multiple_of(PACK_ROWS) && !m.gathered => {
            k.preferred_layout(m.ty(), m.file.order)
        }
        _ => Layout::Rows,
    }
}

/// Free 2 MiB hugetlb bytes where a region will live: its node's pool, or for an interleaved
/// region the pools of its nodes together.
fn free_huge_bytes(topo: &Topology, store: &Store, node: Option<NodeId>) -> u64 {
    let free_on = |id: NodeId| {
        topo.node(id).map_or(0, |n| {
            n.hugepages
                .iter()
                .filter(|p| p.size_kb * 1024 == HUGE_PAGE_BYTES as u64)
                .map(|p| p.free * HUGE_PAGE_BYTES as u64)
                .sum::<u64>()
        })
    };
    match (store, node) {
        (_, Some(n)) => free_on(n),
        (Store::Interleaved(mask), None) => mask.iter().map(free_on).sum(),
        _ => 0,
    }
}

/// A copy job: the bytes of `src` (of the file's mapping) to bytes `at` of the region `dst`,
/// done by a thread of `slot` (or any thread), packed on the way where `pack` says so. No two
/// jobs' `at` overlap in one region.
struct Job<'a> {
    dst: Disjoint<'a, u8>,
    at: Range<usize>,
    src: &'a [u8],
    pack: Option<PackJob>,
}

/// How a job packs: whole groups of `group` bytes, `blocks` blocks per row, into `layout`.
#[derive(Clone, Copy)]
struct PackJob {
    layout: Layout,
    blocks: usize,
    group: usize,
}

/// How [`fill`] runs.
struct FillOpts<'a> {
    mbind_ok: bool,
    progress: bool,
    /// Pack packed pieces while copying them (else they are copied in the file's layout, and
    /// packing reads the file again, so nothing is released as the fill passes).
    fused: bool,
    file: Option<&'a FileHooks<'a>>,
}

/// Copies the file's bytes into the pieces with threads pinned to each piece's node. Returns
/// the bytes copied.
fn fill(
    plan: &Plan,
    mats: &[&Matrix],
    regions: &mut [Region],
    pieces: &[Piece],
    opts: &FillOpts,
) -> u64 {
    let by_name: HashMap<&str, usize> = mats
        .iter()
        .enumerate()
        .map(|(i, m)| (m.name.as_str(), i))
        .collect();
    let page = memory::page_size();
    let interleave_by_touch = matches!(plan.store, Store::Interleaved(_)) && !opts.mbind_ok;
    let nslots = plan.slots.len();
    let dsts: Vec<Disjoint<u8>> = regions
        .iter_mut()
        .map(|r| Disjoint::new(r.as_mut_slice()))
        .collect();
    // Per filler thread: its jobs.
    let mut jobs: Vec<Vec<Job>> = (0..plan.threads).map(|_| Vec::new()).collect();
    let mut total = 0u64;
    for p in pieces {
        let matrix = by_name[p.tensor.as_str()];
        let m = mats[matrix];
        let src = m.file.rows_bytes(p.rows.start, p.rows.end);
        assert_eq!(src.len(), p.len, "piece and source sizes differ");
        total += p.len as u64;
        let (dst, len) = (dsts[p.region], p.len);
        let threads: Range<usize> = match p.slot {
            Some(s) => plan.slots[s].threads.clone(),
            None => 0..plan.threads,
        };
        let mut push = |t: usize, lo: usize, hi: usize, pack: Option<PackJob>| {
            jobs[t].push(Job {
                dst,
                at: p.offset + lo..p.offset + hi,
                src: &src[lo..hi],
                pack,
            });
        };
        if interleave_by_touch {
            // Page i (by address) goes to slot i % nslots: that slot's threads touch it.
            let first_page = (dst.as_ptr() as usize + p.offset) / page;
            let mut off = 0;
            while off < len {
                let end = ((off / page + 1) * page).min(len);
                let s = (first_page + off / page) % nslots;
                let ts = &plan.slots[s].threads;
                push(ts.start + (off / page) % ts.len(), off, end, None);
                off = end;
            }
        } else if opts.fused && p.layout != Layout::Rows {
            // Whole packed groups per thread; a page two threads share is on their node.
            let group = PACK_ROWS * m.file.row_bytes;
            let pack = PackJob {
                layout: p.layout,
                blocks: m.file.cols / p.layout.block_elems(),
                group,
            };
            let (groups, k) = (len / group, threads.len());
            for (j, t) in threads.enumerate() {
                let (lo, hi) = (groups * j / k * group, groups * (j + 1) / k * group);
                if hi > lo {
                    push(t, lo, hi, Some(pack));
                }
            }
        } else {
            let k = threads.len();
            for (j, t) in threads.enumerate() {
                let lo = (len * j / k) / page * page;
                let hi = if j + 1 == k {
                    len
                } else {
                    (len * (j + 1) / k) / page * page
                };
                if hi > lo {
                    push(t, lo, hi, None);
                }
            }
        }
    }
    if total == 0 {
        return 0;
    }
    // Bytes copied by the threads of each slot (one slot's threads fill its node's copy).
    let done_by_slot: &Vec<AtomicU64> = &plan.slots.iter().map(|_| AtomicU64::new(0)).collect();
    let finished = &Finished::new(plan.threads);
    let read = &Read {
        file: opts.file,
        release: opts.fused,
    };
    if let (Some(f), true) = (read.file, read.release) {
        for j in jobs.iter().flatten() {
            (f.expect)(j.src);
        }
    }
    let progress = opts.progress;
    let t0 = Instant::now();
    std::thread::scope(|scope| {
        if progress {
            // Spawned first, so the last filler finds it to wake (no wait past the end).
            let reporter = std::thread::Builder::new().spawn_scoped(scope, move || {
                let mut next = Duration::from_secs(1);
                while !finished.all() {
                    std::thread::park_timeout(next.saturating_sub(t0.elapsed()));
                    if finished.all() || t0.elapsed() < next {
                        continue;
                    }
                    next = t0.elapsed() + Duration::from_secs(1);
                    let per: Vec<u64> = done_by_slot
                        .iter()
                        .map(|d| d.load(Ordering::Relaxed))
                        .collect();
                    let d: u64 = per.iter().sum();
                    let nodes: Vec<String> = plan
                        .slots
                        .iter()
                        .zip(&per)
                        .map(|(s, b)| match s.node {
                            Some(n) => format!("node {}: {} MiB", n.0, b >> 20),
                            None => format!("{} MiB", b >> 20),
                        })
                        .collect();
                    crate::diagln!(
                        "locus: placing weights: {} of {} MiB ({}), {:.0} MB/s",
                        d >> 20,
                        total >> 20,
                        nodes.join(", "),
                        d as f64 / 1e6 / t0.elapsed().as_secs_f64()
                    );
                }
            });
            if let Ok(h) = reporter {
                let _ = finished.reporter.set(h.thread().clone());
            }
        }
        // Should this thread panic before every filler is counted, the reporter stops.
        let _stop = StopOnPanic(finished);
        // A thread that cannot be started (a pids limit) leaves its jobs to this one, which
        // is not pinned there: first touch then places them wherever it runs (mbind, where
        // allowed, still binds them), and the audit shows where they landed.
        let mut leftover = Vec::new();
        for (tid, list) in jobs.into_iter().enumerate() {
            let cpus = plan.cpus_of_thread(tid);
            let slot = plan
                .slots
                .iter()
                .position(|s| s.threads.contains(&tid))
                .unwrap_or(0);
            let done = &done_by_slot[slot];
            let list = std::sync::Arc::new(std::sync::Mutex::new(Some(list)));
            let mine = std::sync::Arc::clone(&list);
            // Test hook: `LOCUS_FAULT=fill-spawn` fails every fill thread, as a pids limit would.
            let spawned = if super::fault("fill-spawn").is_some() {
                Err(std::io::Error::from_raw_os_error(libc::EAGAIN))
            } else {
                std::thread::Builder::new().spawn_scoped(scope, move || {
                    if let Some(c) = cpus {
                        // Unpinnable CPUs leave the copy on whatever node we run; the audit shows it.
                        let _ = affinity::set_affinity(&c);
                    }
                    let list = mine.lock().unwrap_or_else(|e| e.into_inner()).take();
                    run_fill_jobs(list, done, finished, read);
                })
            };
            if spawned.is_err() {
                let list = list.lock().unwrap_or_else(|e| e.into_inner()).take();
                leftover.push((list, done));
            }
        }
        for (list, done) in leftover {
            run_fill_jobs(list, done, finished, read);
        }
    });
    total
}

/// How a fill reads the file: where it asks for bytes ahead and says what it has read
/// (`None`: it only reads the mapping).
struct Read<'a> {
    file: Option<&'a FileHooks<'a>>,
    /// Say what is read (only when packing is fused with the copy: otherwise packing reads
    /// the file again, so nothing may go as the fill passes).
    release: bool,
}

impl Read<'_> {
    /// One copy has read `src` (bytes of the file's mapping).
    fn passed(&self, src: &[u8]) {
        if let (Some(f), true) = (self.file, self.release) {
            (f.release)(src);
        }
    }

    /// Keeps the [`READ_AHEAD`] bytes from `pos` asked for: of the job `cur` (its source
    /// addresses) and, past its end, of the `next` one. `asked` and `next_asked` are where what
    /// has been asked for ends in each.
    fn keep_ahead(
        &self,
        pos: usize,
        (cur, next): (&Range<usize>, Option<&Range<usize>>),
        asked: &mut usize,
        next_asked: &mut usize,
    ) {
        let Some(f) = self.file else { return };
        let until = pos + READ_AHEAD;
        ask(f, asked, pos, until.min(cur.end));
        if let Some(n) = next.filter(|_| until > cur.end) {
            ask(
                f,
                next_asked,
                n.start,
                (n.start + (until - cur.end)).min(n.end),
            );
        }
    }
}

/// Asks for the bytes from `*asked` (at least `from`) to `to`, in requests of at most
/// [`READ_STEP`], and moves `*asked` to `to`.
fn ask(f: &FileHooks, asked: &mut usize, from: usize, to: usize) {
    *asked = (*asked).max(from);
    while *asked < to {
        let hi = (*asked + READ_STEP).min(to);
        (f.will_need)(*asked..hi);
        *asked = hi;
    }
}

/// Copies (or packs) one thread's fill jobs, counting the bytes in `done`, each job in `read`
/// and the thread in `finished`. Before each chunk the next [`READ_AHEAD`] bytes of the file
/// (into the next job) are asked for, so the file streams in while the copy runs.
fn run_fill_jobs(list: Option<Vec<Job>>, done: &AtomicU64, finished: &Finished, read: &Read) {
    // Counted however this returns: a filler that panics must not leave the reporter waiting
    // (the panic then ends the fill's scope, as it would without one).
    let _counted = OneDone(finished);
    let jobs = list.as_deref().unwrap_or_default();
    let span = |j: &Job| j.src.as_ptr() as usize..j.src.as_ptr() as usize + j.src.len();
    // Where what has been asked for ends, in this job and in the next.
    let (mut asked, mut next_asked) = (0, 0);
    for (i, j) in jobs.iter().enumerate() {
        let (cur, next) = (span(j), jobs.get(i + 1).map(span));
        let mut ahead = |pos: usize| {
            read.keep_ahead(pos, (&cur, next.as_ref()), &mut asked, &mut next_asked);
        };
        // SAFETY: every job covers a range of its region no other job covers (`fill` splits
        // each piece among its threads, and `build` lays pieces out apart), and each job is
        // run by one thread; `slice` checks the range lies in the region.
        let (src, dst) = (j.src, unsafe { j.dst.slice(j.at.clone()) });
        match j.pack {
            Some(p) => {
                for (s, d) in src.chunks_exact(p.group).zip(dst.chunks_exact_mut(p.group)) {
                    ahead(s.as_ptr() as usize);
                    pack::pack_group(p.layout, s, p.blocks, d);
                    read.passed(s);
                    done.fetch_add(p.group as u64, Ordering::Relaxed);
                }
            }
            None => {
                for (s, d) in src.chunks(FILL_CHUNK).zip(dst.chunks_mut(FILL_CHUNK)) {
                    ahead(s.as_ptr() as usize);
                    d.copy_from_slice(s);
                    read.passed(s);
                    done.fetch_add(s.len() as u64, Ordering::Relaxed);
                }
            }
        }
        (asked, next_asked) = (next_asked, 0);
    }
}

/// Counts its filler done when dropped.
struct OneDone<'a>(&'a Finished);

impl Drop for OneDone<'_> {
    fn drop(&mut self) {
        self.0.one_done();
    }
}

/// Ends the progress reports if dropped in a panic (the fillers' count may never complete).
struct StopOnPanic<'a>(&'a Finished);

impl Drop for StopOnPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.count.fetch_add(self.0.of, Ordering::AcqRel);
            self.0.wake();
        }
    }
}

/// The fill's threads that are done, of how many; the progress reporter, if any, is woken by
/// the last.
struct Finished {
    count: AtomicUsize,
    of: usize,
    reporter: OnceLock<std::thread::Thread>,
}

impl Finished {
    fn new(of: usize) -> Finished {
        Finished {
            count: AtomicUsize::new(0),
            of,
            reporter: OnceLock::new(),
        }
    }

    fn one_done(&self) {
        if self.count.fetch_add(1, Ordering::AcqRel) + 1 == self.of {
            self.wake();
        }
    }

    fn wake(&self) {
        if let Some(t) = self.reporter.get() {
            t.unpark();
        }
    }

    fn all(&self) -> bool {
        self.count.load(Ordering::Acquire) >= self.of
    }
}

/// Packs the pieces whose layout asks for it, in place, after [`fill`] placed their pages:
/// each packed group is read back from the file and written in the kernels' order over the
/// same bytes, so no page moves. The groups are shared out among the plan's threads (any
/// thread may write a page once it exists).
fn pack_pieces(plan: &Plan, mats: &[&Matrix], regions: &mut [Region], pieces: &[Piece]) {
    let by_name: HashMap<&str, &Matrix> = mats.iter().map(|m| (m.name.as_str(), *m)).collect();
    // Every packed group.
    let mut groups: Vec<PackGroup> = Vec::new();
    for p in pieces.iter().filter(|p| p.layout != Layout::Rows) {
        let m = by_name[p.tensor.as_str()];
        let group_bytes = PACK_ROWS * m.file.row_bytes;
        let src = m.file.rows_bytes(p.rows.start, p.rows.end);
        let n = m.file.cols / p.layout.block_elems();
        for g in 0..p.len / group_bytes {
            groups.push((
                p.region,
                p.offset + g * group_bytes,
                &src[g * group_bytes..(g + 1) * group_bytes],
                p.layout,
                n,
            ));
        }
    }
    if groups.is_empty() {
        return;
    }
    let dsts: Vec<Disjoint<u8>> = regions
        .iter_mut()
        .map(|r| Disjoint::new(r.as_mut_slice()))
        .collect();
    let next = AtomicUsize::new(0);
    let (groups, dsts, next) = (&groups, &dsts, &next);
    // Each thread packs groups until none is left; where a thread cannot be started (a pids
    // limit) the others, and this one, pack its share.
    let work = move || loop {
        let i = next.fetch_add(1, Ordering::Relaxed);
        let Some(&(region, offset, src, layout, n)) = groups.get(i) else {
            break;
        };
        // SAFETY: no other group overlaps this one, and the counter hands each group to
        // one thread, so this thread alone writes these bytes while the scope runs; `slice`
        // checks that the group lies inside its region.
        let dst = unsafe { dsts[region].slice(offset..offset + src.len()) };
        pack::pack_group(layout, src, n, dst);
    };
    std::thread::scope(|scope| {
        for _ in 1..plan.threads.max(1) {
            if std::thread::Builder::new()
                .spawn_scoped(scope, work)
                .is_err()
            {
                break;
            }
        }
        work();
    });
}

/// A packed group to write: (region, offset in it, its bytes in the file, layout, blocks per
/// row).
type PackGroup<'a> = (usize, usize, &'a [u8], Layout, usize);

#[cfg(test)]
mod tests {
    use super::*;

    /// Spawns a stand-in reporter on `scope` and registers it with `finished`: it parks until
    /// every filler is counted, giving up after a minute so a missing wake-up fails a test
    /// instead of hanging it.
    fn reporter<'s>(scope: &'s std::thread::Scope<'s, '_>, finished: &'s Finished, t0: Instant) {
        let r = scope.spawn(move || {
            while !finished.all() && t0.elapsed() < Duration::from_secs(60) {
                std::thread::park_timeout(Duration::from_secs(30));
            }
        });
        finished.reporter.set(r.thread().clone()).unwrap();
    }

    /// The progress reporter parks between reports; the fill's last thread wakes it, so a load
    /// never waits out a report's interval after its copies are built.
    #[test]
    fn the_last_filler_wakes_the_reporter() {
        let finished = Finished::new(2);
        let t0 = Instant::now();
        std::thread::scope(|scope| {
            reporter(scope, &finished, t0);
            finished.one_done();
            assert!(!finished.all());
            std::thread::sleep(Duration::from_millis(20));
            finished.one_done();
        });
        let waited = t0.elapsed();
        assert!(waited < Duration::from_secs(20), "woken after {waited:?}");
    }

    /// A filler that panics is still counted, and a panic on the thread that starts the
    /// fillers stops the reports: the fill's scope ends (and the panic goes on) instead of
    /// waiting for a reporter that waits for fillers that never ran.
    #[test]
    fn a_panic_in_the_fill_does_not_leave_the_reporter_waiting() {
        let finished = Finished::new(3);
        let t0 = Instant::now();
        std::thread::scope(|scope| {
            reporter(scope, &finished, t0);
            let filler = scope.spawn(|| {
                let _counted = OneDone(&finished);
                panic!("a filler fails");
            });
            assert!(filler.join().is_err());
            assert_eq!(finished.count.load(Ordering::Acquire), 1);
            let starter = std::panic::catch_unwind(|| {
                let _stop = StopOnPanic(&finished);
                panic!("the fillers' start fails");
            });
            assert!(starter.is_err());
            assert!(finished.all());
        });
        let waited = t0.elapsed();
        assert!(
            waited < Duration::from_secs(60),
            "the scope ended after {waited:?}"
        );
    }
}
