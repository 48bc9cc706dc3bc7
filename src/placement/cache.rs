//! Caches the pool's threads write (a sequence's keys and values): each block's pages are
//! placed on the node of the threads that write it, and audited where they are.
//!
//! Placing is by first touch: the cache's buffers are fresh anonymous mappings
//! (`model::kv::Pages`), no page of which exists before its first write, and each block is
//! written first (and only) by the pinned threads of its group, so the kernel's default local
//! allocation puts its pages on their node. No `mbind` is made: a policy on each head's block
//! would split the mapping at every block (hundreds of kernel mappings a slot, against
//! `vm.max_map_count`), while first touch leaves the caches of every layer and slot in a few.
//! Where the host has several nodes, transparent huge pages are turned off for the cache
//! (`MADV_NOHUGEPAGE` on whole buffers, which keeps them mergeable), since one huge page faulted
//! by one group would take in its neighbours' heads. Pages straddling two blocks of different
//! nodes go to whichever group writes first and are not audited.
//!
//! Auditing reads page locations by address with `move_pages` status queries, which only
//! look the pages up, so it may run while other threads write the cache.

use std::collections::BTreeMap;

use crate::sys::mempolicy::{self, PageStatus};
use crate::sys::{memory, NodeId, SysError};

/// One block's whole pages and the node its writers run on.
#[derive(Clone, Copy, Debug)]
pub struct CacheRegion {
    pub addr: usize,
    pub len: usize,
    pub node: Option<NodeId>,
}

/// The whole pages inside `block`, as a region for `node`; `None` when it holds no whole page.
fn region_of(block: &[u8], node: Option<NodeId>) -> Option<CacheRegion> {
    let page = memory::page_size();
    let a = block.as_ptr() as usize;
    let start = a.div_ceil(page) * page;
    let end = (a + block.len()) / page * page;
    (end > start).then_some(CacheRegion {
        addr: start,
        len: end - start,
        node,
    })
}

/// Prepares each block for placement by first touch (on a host of `several_nodes`, no
/// transparent huge pages on its pages, rounded out to whole pages) and returns the regions
/// for [`audit`]: each block's whole pages with its node. The first refusal is returned as the
/// error (the rest are not tried), with the regions still usable.
pub fn place(
    blocks: &[(&[u8], Option<NodeId>)],
    several_nodes: bool,
) -> (Vec<CacheRegion>, Option<SysError>) {
    let mut regions = Vec::with_capacity(blocks.len());
    let mut err = None;
    for &(b, node) in blocks {
        if let (true, None, false) = (several_nodes, &err, b.is_empty()) {
            err = memory::madvise(b, memory::MADV_NOHUGEPAGE).err();
        }
        if let Some(r) = region_of(b, node) {
            regions.push(r);
        }
    }
    (regions, err)
}

/// Where a cache's pages are.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CacheAudit {
    pub bytes_by_node: BTreeMap<u32, u64>,
    /// Pages not located: never written yet (no page), or the query refused.
    pub unlocated_bytes: u64,
    /// Of the located bytes of blocks with a node, the share on that node (`None`: none).
    pub locality: Option<f64>,
}

/// Pages asked about per `move_pages` call.
const QUERY_BATCH: usize = 1 << 14;

/// Locates every page of `regions`.
pub fn audit(regions: &[CacheRegion]) -> CacheAudit {
    let page = memory::page_size();
    let mut a = CacheAudit::default();
    let (mut known, mut local) = (0u64, 0u64);
    for r in regions {
        let addrs: Vec<*mut libc::c_void> = (0..r.len / page)
            .map(|i| (r.addr + i * page) as *mut libc::c_void)
            .collect();
        for chunk in addrs.chunks(QUERY_BATCH) {
            let st = mempolicy::move_pages(chunk, None, 0)
                .unwrap_or_else(|_| vec![PageStatus::Unknown { errno: 0 }; chunk.len()]);
            for s in st {
                match s {
                    PageStatus::Node(n) => {
                        *a.bytes_by_node.entry(n.0).or_insert(0) += page as u64;
                        if let Some(want) = r.node {
                            known += page as u64;
                            if n == want {
                                local += page as u64;
                            }
                        }
                    }
                    PageStatus::Unknown { .. } => a.unlocated_bytes += page as u64,
                }
            }
        }
    }
    a.locality = (known > 0).then(|| local as f64 / known as f64);
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_pages_are_located_and_unwritten_ones_are_not() {
        let page = memory::page_size();
        let mut buf = vec![0u8; 8 * page];
        let here = mempolicy::getcpu().map(|(_, n)| n).ok();
        let (regions, _) = place(&[(&buf[..], here)], true);
        assert_eq!(regions.len(), 1);
        assert!(regions[0].len >= 6 * page && regions[0].addr % page == 0);
        buf.iter_mut().step_by(page).for_each(|b| *b = 1);
        let a = audit(&regions);
        let located: u64 = a.bytes_by_node.values().sum();
        assert_eq!(located + a.unlocated_bytes, regions[0].len as u64);
        if located > 0 && here.is_some() {
            assert_eq!(a.locality, Some(1.0), "{a:?}");
        }
        // A block smaller than a page holds no whole page.
        assert!(place(&[(&buf[1..page / 2], here)], true).0.is_empty());
        std::hint::black_box(&buf);
    }
}
