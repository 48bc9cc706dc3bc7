//! Linux system interfaces: NUMA topology from sysfs, memory policy and affinity through raw
//! system calls, the start-up probe of which of those calls are allowed, signals, and files
//! written atomically. Knows nothing about models.

pub mod affinity;
pub mod cache;
pub mod diag;
pub mod errno;
pub mod fs;
pub mod ids;
pub mod memory;
pub mod mempolicy;
pub mod numa_maps;
pub mod poll;
pub mod probe;
pub mod signal;
pub mod topology;

pub use errno::SysError;
pub use ids::{CpuId, CpuSet, NodeId, NodeMask};
