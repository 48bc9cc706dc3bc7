//! The audit: where every page of every placed copy really is, how much of the model file is
//! still in the page cache, and the share of each thread's per-token reads that are local.
//!
//! Pages are located with `move_pages` status queries; where that call is refused (Docker's
//! seccomp profile) from `/proc/self/numa_maps`, whose counts are per mapping — every placed
//! piece is its own mapping, so per-piece figures stay exact there unless a mapping spans
//! several nodes (interleave, the file), where per-piece shares are estimated from the
//! mapping's. Negative `move_pages` statuses (page absent, or hidden by NUMA balancing) count
//! as unknown, never as misplaced.

use std::collections::BTreeMap;

use super::{Placement, Store};
use crate::kernels::Layout;
use crate::model::weights::{Tensor, Weights};
use crate::model::ModelFile;
use crate::pool::rows_of_thread;
use crate::sys::memory;
use crate::sys::mempolicy::{self, PageStatus};
use crate::sys::numa_maps::{self, NumaMapsEntry};
use crate::sys::NodeId;

/// Pages asked about per `move_pages` call.
const QUERY_BATCH: usize = 1 << 14;

/// How page locations were learned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PageSource {
    MovePages,
    NumaMaps,
    Unavailable,
}

impl PageSource {
    pub fn name(self) -> &'static str {
        match self {
            PageSource::MovePages => "move_pages",
            PageSource::NumaMaps => "numa_maps",
            PageSource::Unavailable => "unavailable",
        }
    }
}

/// One copy of one tensor (or the file's bytes of it).
#[derive(Clone, Debug)]
pub struct CopyReport {
    pub tensor: String,
    /// The node the copy was placed for; `None` for interleaved copies and the file.
    pub node: Option<NodeId>,
    /// `"copy"`, `"shard"`, `"interleaved"` or `"file"`.
    pub kind: &'static str,
    pub rows: (usize, usize),
    /// How the copy holds the rows: the file's layout, or packed for the kernels.
    pub layout: Layout,
    pub bytes: u64,
    pub pages: u64,
    /// Pages per node (estimated from numa_maps shares where it is per mapping).
    pub pages_by_node: BTreeMap<u32, u64>,
    pub unknown_pages: u64,
}

/// One thread's reads per token.
#[derive(Clone, Debug)]
pub struct ThreadReport {
    pub tid: usize,
    pub node: Option<NodeId>,
    pub read_bytes: u64,
    /// Bytes whose node is known, and of those the ones on the thread's node.
    pub known_bytes: f64,
    pub local_bytes: f64,
}

/// The audit of one placement.
#[derive(Clone, Debug)]
pub struct Audit {
    pub source: PageSource,
    pub copies: Vec<CopyReport>,
    /// Bytes of weights per node over every copy.
    pub bytes_by_node: BTreeMap<u32, u64>,
    pub unknown_bytes: u64,
    /// Bytes of the model file resident in the page cache.
    pub page_cache_bytes: u64,
    pub file_bytes: u64,
    pub threads: Vec<ThreadReport>,
    /// Local share of the bytes all threads read per token (of those whose node is known).
    pub locality: Option<f64>,
    pub warnings: Vec<String>,
}

/// Where one view's pages are.
enum PageMap {
    /// Per page: its node, or `None` when unknown.
    Exact(Vec<Option<NodeId>>),
    /// Only the mapping's shares per node (numa_maps), and the resident share.
    Share {
        by_node: Vec<(NodeId, f64)>,
        pages: usize,
    },
    Unknown(usize),
}

impl PageMap {
    fn pages(&self) -> usize {
        match self {
            PageMap::Exact(v) => v.len(),
            PageMap::Share { pages, .. } | PageMap::Unknown(pages) => *pages,
        }
    }

    /// (known bytes, bytes on `node`) of byte range `lo..hi` of a view starting `offset`
    /// bytes into its first page.
    fn local(&self, offset: usize, lo: usize, hi: usize, node: NodeId) -> (f64, f64) {
        let page = memory::page_size();
        match self {
            PageMap::Exact(v) => {
                let (mut known, mut local) = (0f64, 0f64);
                let (a, b) = (offset + lo, offset + hi);
                let mut p = a / page;
                while p * page < b {
                    let s = a.max(p * page);
                    let e = b.min((p + 1) * page);
                    if let Some(Some(n)) = v.get(p) {
                        known += (e - s) as f64;
                        if *n == node {
                            local += (e - s) as f64;
                        }
                    }
                    p += 1;
                }
                (known, local)
            }
            PageMap::Share { by_node, .. } => {
                let len = (hi - lo) as f64;
                let total: f64 = by_node.iter().map(|x| x.1).sum();
                let mine: f64 = by_node.iter().filter(|x| x.0 == node).map(|x| x.1).sum();
                (len * total, len * mine)
            }
            PageMap::Unknown(_) => (0.0, 0.0),
        }
    }

    fn by_node(&self) -> (BTreeMap<u32, u64>, u64) {
        let mut m = BTreeMap::new();
        match self {
            PageMap::Exact(v) => {
                let mut unknown = 0;
                for n in v {
                    match n {
                        Some(n) => *m.entry(n.0).or_insert(0) += 1,
                        None => unknown += 1,
                    }
                }
                (m, unknown)
            }
            PageMap::Share { by_node, pages } => {
                let mut given = 0;
                for (n, f) in by_node {
                    let k = (f * *pages as f64).round() as u64;
                    *m.entry(n.0).or_insert(0) += k;
                    given += k;
                }
                (m, (*pages as u64).saturating_sub(given))
            }
            PageMap::Unknown(p) => (m, *p as u64),
        }
    }
}

/// Audits `w` (bound to `p`'s copies) as the pool of `p`'s plan reads it.
pub fn audit(p: &Placement, w: &Weights, file: &ModelFile) -> Audit {
    let mut warnings = Vec::new();
    let maps = if p.caps.move_pages.is_allowed() {
        None
    } else {
        match numa_maps::read_self() {
            Ok(mut m) => {
                m.sort_by_key(|e| e.start);
                warnings.push(
                    "move_pages is refused here: page placement read from /proc/self/numa_maps (per mapping)".into(),
                );
                Some(m)
            }
            Err(e) => {
                warnings.push(format!(
                    "move_pages is refused and /proc/self/numa_maps is unreadable ({e}): page placement unknown"
                ));
                Some(Vec::new())
            }
        }
    };
    let source = match &maps {
        None => PageSource::MovePages,
        Some(m) if !m.is_empty() => PageSource::NumaMaps,
        Some(_) => PageSource::Unavailable,
    };
    let page = memory::page_size();
    let mut page_maps: BTreeMap<usize, PageMap> = BTreeMap::new();
    let mut copies = Vec::new();
    let mut bytes_by_node: BTreeMap<u32, u64> = BTreeMap::new();
    let mut unknown_bytes = 0u64;
    for m in w.matrices() {
        for (slot, v) in m.views().iter().enumerate() {
            let key = v.data.as_ptr() as usize;
            let pm = page_maps
                .entry(key)
                .or_insert_with(|| locate(v.data, maps.as_deref()));
            let (by_node, unknown) = pm.by_node();
            for (n, k) in &by_node {
                *bytes_by_node.entry(*n).or_insert(0) += k * page as u64;
            }
            unknown_bytes += unknown * page as u64;
            let (node, kind) = match &p.plan.store {
                Store::File => (None, "file"),
                Store::Interleaved(_) => (None, "interleaved"),
                Store::PerSlot { full } => (
                    p.plan.slots.get(slot).and_then(|s| s.node),
                    if *full { "copy" } else { "shard" },
                ),
            };
            let held = v.held_rows();
            copies.push(CopyReport {
                tensor: m.name.clone(),
                node,
                kind,
                rows: (held.start, held.end),
                layout: v.layout,
                bytes: v.data.len() as u64,
                pages: pm.pages() as u64,
                pages_by_node: by_node,
                unknown_pages: unknown,
            });
        }
    }
    // Per thread: an even share (`rows_of_thread`) of its group's rows of every matrix, streamed
    // per token. Threads claim their group's rows in chunks at run time, so a thread's exact
    // rows vary from step to step; a group's total, and so every locality figure summed over a
    // group, is exact.
    let nth = p.plan.threads;
    let mut threads = Vec::with_capacity(nth);
    for (slot_i, slot) in p.plan.slots.iter().enumerate() {
        for tid in slot.threads.clone() {
            let mut t = ThreadReport {
                tid,
                node: slot.node,
                read_bytes: 0,
                known_bytes: 0.0,
                local_bytes: 0.0,
            };
            // Bytes a token reads: a mixture's experts count by the share a token uses.
            let mut read = 0f64;
            for (m, share) in w.read_per_token() {
                let v: &Tensor = m.view(slot_i);
                let (lo, hi) = rows_of_thread(v.rows, tid, nth);
                if hi <= lo {
                    continue;
                }
                let (a, b) = ((lo - v.row0) * v.row_bytes, (hi - v.row0) * v.row_bytes);
                read += (b - a) as f64 * share;
                if let (Some(node), Some(pm)) =
                    (slot.node, page_maps.get(&(v.data.as_ptr() as usize)))
                {
                    let offset = v.data.as_ptr() as usize % page;
                    let (k, l) = pm.local(offset, a, b, node);
                    t.known_bytes += k * share;
                    t.local_bytes += l * share;
                }
            }
            t.read_bytes = read as u64;
            threads.push(t);
        }
    }
    let known: f64 = threads.iter().map(|t| t.known_bytes).sum();
    let local: f64 = threads.iter().map(|t| t.local_bytes).sum();
    let locality = (known > 0.0).then(|| local / known);
    if p.plan.slots.iter().any(|s| s.node.is_none()) {
        warnings.push(
            "threads are not pinned (--numa off on a multi-node host): their node, and so locality, is not defined".into(),
        );
    } else if locality.is_none() {
        warnings.push("no page's node is known: locality cannot be computed".into());
    }
    let bytes = file.bytes();
    let page_cache_bytes = match memory::resident_bytes(bytes) {
        Ok(b) => b.min(bytes.len() as u64),
        Err(e) => {
            warnings.push(format!("{e}: page cache residency unknown"));
            0
        }
    };
    Audit {
        source,
        copies,
        bytes_by_node,
        unknown_bytes,
        page_cache_bytes,
        file_bytes: bytes.len() as u64,
        threads,
        locality,
        warnings,
    }
}

/// Where the pages of `data` are.
fn locate(data: &[u8], maps: Option<&[NumaMapsEntry]>) -> PageMap {
    let addrs = memory::page_addresses(data);
    match maps {
        None => {
            let mut nodes = Vec::with_capacity(addrs.len());
            for chunk in addrs.chunks(QUERY_BATCH) {
                match mempolicy::move_pages(chunk, None, 0) {
                    Ok(st) => nodes.extend(st.into_iter().map(|s| match s {
                        PageStatus::Node(n) => Some(n),
                        PageStatus::Unknown { .. } => None,
                    })),
                    Err(_) => nodes.extend(std::iter::repeat_n(None, chunk.len())),
                }
            }
            PageMap::Exact(nodes)
        }
        Some(entries) => {
            let addr = data.as_ptr() as usize;
            let idx = entries.partition_point(|e| e.start <= addr);
            let Some(e) = idx.checked_sub(1).map(|i| &entries[i]) else {
                return PageMap::Unknown(addrs.len());
            };
            // The mapping's pages in base pages (numa_maps counts in its own page size).
            let scale = e.page_bytes as f64 / memory::page_size() as f64;
            let map_pages: f64 = e.pages_by_node.iter().map(|x| x.1 as f64 * scale).sum();
            if map_pages == 0.0 {
                return PageMap::Unknown(addrs.len());
            }
            // Resident pages of the mapping, as shares of this view's pages (capped at 1).
            let resident = memory::resident_bytes(data).unwrap_or(0) as f64
                / (addrs.len() * memory::page_size()).max(1) as f64;
            let by_node = e
                .pages_by_node
                .iter()
                .map(|&(n, k)| (n, k as f64 * scale / map_pages * resident.min(1.0)))
                .collect();
            PageMap::Share {
                by_node,
                pages: addrs.len(),
            }
        }
    }
}
