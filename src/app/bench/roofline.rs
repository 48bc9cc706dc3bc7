//! The roofline: the read bandwidth (`locus membw`) of the (node, thread count) pairs an arm
//! ran on, measured in the parent right after each round of the arm, so the measurement never
//! competes with an arm yet sees the host as the arm saw it. On a shared host the bandwidth a
//! process gets drifts by a fifth within a minute; one reading for a whole bench would compare
//! an arm against another moment's machine. An arm is compared against the mean of its own
//! readings (see `ArmResult::roofline_tps`); the notes give each pair's mean and range.

use std::collections::{BTreeMap, BTreeSet};

use crate::sys::ids::NodeId;
use crate::sys::topology::Topology;

/// The bandwidth of `threads` threads on `node` reading the node's memory over one bench: the
/// mean of `count` readings (one after each round of each arm that ran there), and their range.
#[derive(Clone, Debug, PartialEq)]
pub struct BwReading {
    pub node: u32,
    pub threads: usize,
    pub gb_per_s: f64,
    pub min: f64,
    pub max: f64,
    pub count: usize,
}

/// The (node, threads) pairs an arm's threads run on. Unpinned threads (`off`) are counted
/// spread evenly over the nodes with CPUs, as the scheduler would spread them.
fn arm_node_threads(topo: &Topology, slots: &[(Option<u32>, usize)]) -> Vec<(u32, usize)> {
    let cpu_nodes: Vec<u32> = topo
        .nodes
        .iter()
        .filter(|n| !topo.allowed_cpus_of(n.id).is_empty())
        .map(|n| n.id.0)
        .collect();
    let mut per: BTreeMap<u32, usize> = BTreeMap::new();
    for &(node, k) in slots {
        match node {
            Some(n) => *per.entry(n).or_default() += k,
            None if !cpu_nodes.is_empty() => {
                let m = cpu_nodes.len();
                for (i, n) in cpu_nodes.iter().enumerate() {
                    let share = k / m + usize::from(i < k % m);
                    if share > 0 {
                        *per.entry(*n).or_default() += share;
                    }
                }
            }
            None => {}
        }
    }
    per.into_iter()
        .map(|(n, k)| {
            let cpus = topo.allowed_cpus_of(NodeId(n)).len().max(1);
            (n, k.min(cpus))
        })
        .collect()
}

/// The bandwidth readings of one bench, by (node, threads), in the order taken.
#[derive(Default)]
pub(super) struct Meter {
    readings: BTreeMap<(u32, usize), Vec<f64>>,
    /// Pairs whose measurement failed once (warned about; not tried again).
    failed: BTreeSet<(u32, usize)>,
}

impl Meter {
    /// Measures now the bandwidth of every (node, threads) pair of an arm that ran on `slots`;
    /// the sum over its nodes, or `None` (with a warning) when a measurement fails.
    pub(super) fn measure(
        &mut self,
        topo: &Topology,
        slots: &[(Option<u32>, usize)],
    ) -> Option<f64> {
        let mut sum = 0.0;
        for (node, k) in arm_node_threads(topo, slots) {
            if self.failed.contains(&(node, k)) {
                return None;
            }
            let id = NodeId(node);
            let free = topo.node(id).map_or(0, |n| n.memory.free);
            // `locus membw`'s defaults (512 MiB or 4× the last-level cache, best of 5
            // passes), but at most a quarter of the node's free memory (VM nodes are small).
            let cpu0 = topo
                .allowed_cpus_of(id)
                .iter()
                .next()
                .map_or(0, |c| c.index());
            let bytes = usize::try_from(free / 4)
                .unwrap_or(usize::MAX)
                .clamp(16 << 20, crate::app::membw::default_bytes(cpu0));
            let o = crate::app::membw::MembwOptions {
                threads: k,
                bytes,
                passes: 5,
                matrix: false,
                json: false,
            };
            match crate::app::membw::measure(
                &topo.allowed_cpus_of(id),
                id,
                topo.node_mask_bits(),
                &o,
            ) {
                Ok(gb) if gb > 0.0 => {
                    self.readings.entry((node, k)).or_default().push(gb);
                    sum += gb;
                }
                Ok(_) => {
                    self.failed.insert((node, k));
                    return None;
                }
                Err(e) => {
                    crate::diagln!("locus: warning: bench: membw on node {node} failed: {e}; no roofline for arms using it");
                    self.failed.insert((node, k));
                    return None;
                }
            }
        }
        (sum > 0.0).then_some(sum)
    }

    /// Every pair measured: the mean of its readings, their range and count.
    pub(super) fn readings(&self) -> Vec<BwReading> {
        self.readings
            .iter()
            .map(|(&(node, threads), v)| BwReading {
                node,
                threads,
                gb_per_s: super::mean(v),
                min: v.iter().copied().fold(f64::INFINITY, f64::min),
                max: v.iter().copied().fold(f64::NEG_INFINITY, f64::max),
                count: v.len(),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readings_pool_by_pair() {
        let mut m = Meter::default();
        m.readings.insert((0, 2), vec![20.0, 30.0, 25.0]);
        m.readings.insert((1, 1), vec![12.0]);
        let r = m.readings();
        assert_eq!(r.len(), 2);
        assert_eq!((r[0].node, r[0].threads, r[0].count), (0, 2, 3));
        assert!((r[0].gb_per_s - 25.0).abs() < 1e-12);
        assert_eq!((r[0].min, r[0].max), (20.0, 30.0));
        assert_eq!((r[1].node, r[1].threads, r[1].count), (1, 1, 1));
        assert_eq!((r[1].min, r[1].gb_per_s, r[1].max), (12.0, 12.0, 12.0));
    }
}
