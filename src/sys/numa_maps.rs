//! `/proc/self/numa_maps`: where the pages of each mapping sit, per node. The audit reads it
//! where `move_pages` is refused (Docker's default seccomp profile), at mapping granularity.
//!
//! A line looks like `7f1c2a000000 bind:1 anon=512 dirty=512 N1=512 kernelpagesize_kB=4`:
//! the mapping's start address in hex, its policy, then `key=value` fields of which `N<id>=<pages>`
//! count the mapping's resident pages per node in units of `kernelpagesize_kB`.

use super::ids::NodeId;

/// One mapping's line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NumaMapsEntry {
    pub start: usize,
    /// The policy word as printed (`default`, `bind:1`, `interleave:0-3`, …).
    pub policy: String,
    /// Resident pages per node, in pages of `page_bytes`.
    pub pages_by_node: Vec<(NodeId, u64)>,
    pub page_bytes: u64,
}

/// Parses the text of a numa_maps file; lines that do not parse are skipped (the format grows
/// new fields over kernel versions).
pub fn parse(text: &str) -> Vec<NumaMapsEntry> {
    text.lines().filter_map(parse_line).collect()
}

fn parse_line(line: &str) -> Option<NumaMapsEntry> {
    let mut words = line.split_whitespace();
    let start = usize::from_str_radix(words.next()?, 16).ok()?;
    let policy = words.next()?.to_string();
    let mut pages_by_node = Vec::new();
    let mut page_bytes = 4096;
    for w in words {
        let Some((k, v)) = w.split_once('=') else {
            continue;
        };
        if let Some(id) = k.strip_prefix('N') {
            if let (Ok(id), Ok(n)) = (id.parse::<u32>(), v.parse::<u64>()) {
                pages_by_node.push((NodeId(id), n));
            }
        } else if k == "kernelpagesize_kB" {
            page_bytes = v.parse::<u64>().ok()? * 1024;
        }
    }
    Some(NumaMapsEntry {
        start,
        policy,
        pages_by_node,
        page_bytes,
    })
}

/// Reads and parses `/proc/self/numa_maps`.
pub fn read_self() -> std::io::Result<Vec<NumaMapsEntry>> {
    Ok(parse(&std::fs::read_to_string("/proc/self/numa_maps")?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_policy_nodes_and_page_size() {
        let t = "7f1c2a000000 bind:1 anon=512 dirty=512 active=0 N1=512 kernelpagesize_kB=4\n\
                 55d0c0000000 interleave:0-1 anon=1024 N0=256 N1=256 kernelpagesize_kB=2048\n\
                 garbage line\n\
                 7ffd00000000 default stack anon=3 dirty=3 N0=3 kernelpagesize_kB=4\n";
        let e = parse(t);
        assert_eq!(e.len(), 3);
        assert_eq!(e[0].start, 0x7f1c2a000000);
        assert_eq!(e[0].policy, "bind:1");
        assert_eq!(e[0].pages_by_node, vec![(NodeId(1), 512)]);
        assert_eq!(e[1].page_bytes, 2 << 20);
        assert_eq!(e[1].pages_by_node, vec![(NodeId(0), 256), (NodeId(1), 256)]);
        assert_eq!(e[2].page_bytes, 4096);
    }

    /// A fresh mapping of 16 pages of which 5 are touched: its own line appears, at its
    /// address, counting exactly the touched pages, on nodes that exist.
    #[test]
    fn own_numa_maps_counts_the_touched_pages_of_a_mapping() {
        use crate::sys::memory::{page_size, Backing, Region};
        if let Err(e) = read_self() {
            crate::test_support::skip::skip(&format!(
                "/proc/self/numa_maps is unreadable here (kernel without NUMA?): {e}"
            ));
            return;
        }
        let page = page_size();
        let mut r = Region::anonymous(16 * page, Backing::Base).unwrap();
        for p in 0..5 {
            r.as_mut_slice()[p * page] = 1;
        }
        let entries = read_self().unwrap();
        let e = entries
            .iter()
            .find(|e| e.start == r.addr())
            .expect("the region has its own numa_maps line");
        let pages: u64 = e.pages_by_node.iter().map(|p| p.1).sum();
        assert_eq!(
            pages * e.page_bytes,
            5 * page as u64,
            "{e:?}: the five touched pages"
        );
        let online =
            std::fs::read_to_string("/sys/devices/system/node/online").unwrap_or("0".into());
        let online = super::super::ids::NodeMask::parse_list(&online).unwrap();
        for (node, _) in &e.pages_by_node {
            assert!(online.contains(*node), "{e:?}: node {node:?} is not online");
        }
    }
}
