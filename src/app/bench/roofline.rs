//! The roofline: the read bandwidth (`locus membw`) of every (node, thread count) the arms
//! ran on, measured once each in the parent after the arms, so the measurement never competes
//! with an arm; an arm's decode tok/s is compared against it (see `ArmResult::roofline_tps`).

use std::collections::BTreeMap;

use super::ArmResult;
use crate::sys::ids::NodeId;
use crate::sys::topology::Topology;

/// One bandwidth measurement: `threads` threads on `node` reading the node's memory.
#[derive(Clone, Debug, PartialEq)]
pub struct BwReading {
    pub node: u32,
    pub threads: usize,
    pub gb_per_s: f64,
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

/// Measures (once each) the bandwidth of every (node, threads) pair the arms used, and sets
/// each arm's sum over its nodes. A failed measurement leaves the arms that need it without
/// a roofline, with a warning.
pub(super) fn measure_bandwidth(topo: &Topology, arms: &mut [ArmResult]) -> Vec<BwReading> {
    let mut cache: BTreeMap<(u32, usize), Option<f64>> = BTreeMap::new();
    for a in arms.iter_mut() {
        let Ok(r) = &a.outcome else { continue };
        let mut sum = Some(0.0);
        for (node, k) in arm_node_threads(topo, &r.slots) {
            let gb = *cache.entry((node, k)).or_insert_with(|| {
                let id = NodeId(node);
                let free = topo.node(id).map_or(0, |n| n.memory.free);
                // `locus membw`'s defaults (512 MiB, best of 5 passes), but at most a quarter
                // of the node's free memory (VM nodes are small).
                let bytes = ((free / 4) as usize).clamp(16 << 20, 512 << 20);
                let o = crate::app::membw::MembwOptions {
                    threads: k,
                    bytes,
                    passes: 5,
                    matrix: false,
                    json: false,
                };
                match crate::app::membw::measure(&topo.allowed_cpus_of(id), id, topo.node_mask_bits(), &o)
                {
                    Ok(gb) if gb > 0.0 => Some(gb),
                    Ok(_) => None,
                    Err(e) => {
                        eprintln!("locus: warning: bench: membw on node {node} failed: {e}; no roofline for arms using it");
                        None
                    }
                }
            });
            sum = match (sum, gb) {
                (Some(s), Some(g)) => Some(s + g),
                _ => None,
            };
        }
        a.bw_gb_per_s = sum.filter(|s| *s > 0.0);
    }
    cache
        .into_iter()
        .filter_map(|((node, threads), gb)| {
            gb.map(|gb_per_s| BwReading {
                node,
                threads,
                gb_per_s,
            })
        })
        .collect()
}
