//! NUMA memory policy through raw system calls: `mbind`, `set_mempolicy`, `get_mempolicy`,
//! `move_pages`, `getcpu` (no libnuma). Each wrapper is one call through [`check`], returns the
//! errno as a [`SysError`], and documents the kernel quirks that bite:
//!
//! - `maxnode` is the mask's bit count **plus one** (the kernel reads `maxnode - 1` bits), as
//!   libnuma passes it.
//! - `get_mempolicy` rejects a mask smaller than the kernel's node count with EINVAL
//!   (`MPOL_F_MEMS_ALLOWED` wanted 1024 bits on Debian kernels), so the getters grow the mask.
//! - `move_pages` reports per page a node id or a negative errno; a negative status means
//!   "unknown" (not faulted in, or hidden by NUMA balancing), never "misplaced".
//!
//! The calls are safe functions: memory is named by Rust references (or, for `move_pages`, by
//! addresses the kernel validates), and changing or querying where pages live never changes
//! their contents, so no Rust invariant can be broken through them.

use super::errno::{check, SysError};
use super::ids::{CpuId, NodeId, NodeMask};

/// Policy modes (`mode` of `mbind` and `set_mempolicy`), values from `<linux/mempolicy.h>`.
pub const MPOL_DEFAULT: i32 = 0;
pub const MPOL_PREFERRED: i32 = 1;
pub const MPOL_BIND: i32 = 2;
pub const MPOL_INTERLEAVE: i32 = 3;
pub const MPOL_LOCAL: i32 = 4;

/// Mode flags, or-ed into `mode`.
pub const MPOL_F_NUMA_BALANCING: i32 = 1 << 13;
pub const MPOL_F_RELATIVE_NODES: i32 = 1 << 14;
pub const MPOL_F_STATIC_NODES: i32 = 1 << 15;
/// All mode flags, to split a mode returned by `get_mempolicy` into mode and flags.
pub const MPOL_MODE_FLAGS: i32 =
    MPOL_F_NUMA_BALANCING | MPOL_F_RELATIVE_NODES | MPOL_F_STATIC_NODES;

/// `get_mempolicy` flags.
pub const MPOL_F_NODE: u64 = 1 << 0;
pub const MPOL_F_ADDR: u64 = 1 << 1;
pub const MPOL_F_MEMS_ALLOWED: u64 = 1 << 2;

/// `mbind` flags (`MPOL_MF_MOVE` also serves `move_pages`).
pub const MPOL_MF_STRICT: u32 = 1 << 0;
pub const MPOL_MF_MOVE: u32 = 1 << 1;
pub const MPOL_MF_MOVE_ALL: u32 = 1 << 2;

/// Largest mask the getters try: `get_mempolicy` refuses to copy out more than a page.
const MAX_MASK_BITS: usize = 4096 * 8;
/// Smallest mask the getters start with.
const MIN_MASK_BITS: usize = 64;

/// A memory policy as `get_mempolicy` returns it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Policy {
    /// `MPOL_DEFAULT`, `MPOL_BIND`, … without the mode flags.
    pub mode: i32,
    /// `MPOL_F_STATIC_NODES` etc., as or-ed into the mode.
    pub flags: i32,
    pub nodes: NodeMask,
}

/// Where `move_pages` says a page is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PageStatus {
    /// Resident on this node.
    Node(NodeId),
    /// A negative status: the page's node is unknown (ENOENT: not present; EFAULT: no page or
    /// the zero page; others while migrating). Not evidence of misplacement.
    Unknown { errno: i32 },
}

/// The `(nodemask, maxnode)` pair for a mask: `maxnode` is the bit count plus one.
fn kernel_mask(nodes: Option<&NodeMask>) -> (Vec<libc::c_ulong>, libc::c_ulong) {
    match nodes {
        Some(m) => {
            let words = m.to_ulongs(MIN_MASK_BITS);
            let bits = words.len() * libc::c_ulong::BITS as usize;
            (words, bits as libc::c_ulong + 1)
        }
        None => (Vec::new(), 0),
    }
}

fn mask_ptr(words: &[libc::c_ulong]) -> *const libc::c_ulong {
    if words.is_empty() {
        std::ptr::null()
    } else {
        words.as_ptr()
    }
}

/// `mbind(addr, len, mode, nodemask, maxnode, flags)` — sets the memory policy of the pages
/// holding `region` (mbind(2)). The region must start on a page boundary (else EINVAL); the
/// kernel rounds its length up to whole pages. `nodes: None` passes an empty mask (for
/// `MPOL_DEFAULT` and `MPOL_LOCAL`). With `MPOL_MF_MOVE` pages already present are migrated;
/// `MPOL_MF_STRICT` makes a page that cannot follow the policy an EIO error.
pub fn mbind(
    region: &[u8],
    mode: i32,
    nodes: Option<&NodeMask>,
    flags: u32,
) -> Result<(), SysError> {
    let (mask, maxnode) = kernel_mask(nodes);
    let (addr, len) = (region.as_ptr(), region.len());
    // SAFETY: `mask` outlives the call and holds `maxnode - 1` bits; the kernel validates the
    // address range and only changes placement, never contents.
    let r = unsafe {
        libc::syscall(
            libc::SYS_mbind,
            addr,
            len,
            mode,
            mask_ptr(&mask),
            maxnode,
            flags,
        )
    };
    check("mbind", r).map(|_| ())
}

/// `set_mempolicy(mode, nodemask, maxnode)` — sets the calling thread's default policy for new
/// allocations (set_mempolicy(2)). Threads created afterwards inherit it.
pub fn set_mempolicy(mode: i32, nodes: Option<&NodeMask>) -> Result<(), SysError> {
    let (mask, maxnode) = kernel_mask(nodes);
    // SAFETY: `mask` outlives the call and holds `maxnode - 1` bits.
    let r = unsafe { libc::syscall(libc::SYS_set_mempolicy, mode, mask_ptr(&mask), maxnode) };
    check("set_mempolicy", r).map(|_| ())
}

/// `get_mempolicy(&mode, nodemask, maxnode, addr, flags)` with a mask grown from `min_bits`
/// until the kernel accepts it (EINVAL while it is smaller than the kernel's node count).
fn get_mempolicy_grow(
    addr: *const libc::c_void,
    flags: u64,
    min_bits: usize,
) -> Result<(i32, NodeMask), SysError> {
    const W: usize = libc::c_ulong::BITS as usize;
    let mut bits = min_bits.max(MIN_MASK_BITS).next_multiple_of(W);
    loop {
        let mut mode: libc::c_int = 0;
        let mut mask = vec![0 as libc::c_ulong; bits / W];
        // SAFETY: `mode` and `mask` are writable and outlive the call; `mask` holds
        // `maxnode - 1 = bits` bits. `addr` is only read by the kernel (with MPOL_F_ADDR), which
        // validates it.
        let r = unsafe {
            libc::syscall(
                libc::SYS_get_mempolicy,
                &mut mode as *mut libc::c_int,
                mask.as_mut_ptr(),
                bits as libc::c_ulong + 1,
                addr,
                flags,
            )
        };
        match check("get_mempolicy", r) {
            Ok(_) => return Ok((mode, NodeMask::from_ulongs(&mask))),
            Err(e) if e.errno == libc::EINVAL && bits < MAX_MASK_BITS => bits *= 2,
            Err(e) => return Err(e),
        }
    }
}

/// The name of a policy mode (`bind`, `interleave`, …) as numactl prints it.
pub fn mode_name(mode: i32) -> &'static str {
    match mode & !MPOL_MODE_FLAGS {
        MPOL_DEFAULT => "default",
        MPOL_PREFERRED => "preferred",
        MPOL_BIND => "bind",
        MPOL_INTERLEAVE => "interleave",
        MPOL_LOCAL => "local",
        _ => "other",
    }
}

fn split_mode(raw: i32, nodes: NodeMask) -> Policy {
    Policy {
        mode: raw & !MPOL_MODE_FLAGS,
        flags: raw & MPOL_MODE_FLAGS,
        nodes,
    }
}

/// `get_mempolicy(&mode, mask, maxnode, NULL, 0)` — the calling thread's policy.
/// `min_bits`: the node mask size to start from (the `possible` node count).
pub fn current_policy(min_bits: usize) -> Result<Policy, SysError> {
    let (raw, nodes) = get_mempolicy_grow(std::ptr::null(), 0, min_bits)?;
    Ok(split_mode(raw, nodes))
}

/// `get_mempolicy(&mode, mask, maxnode, addr, MPOL_F_ADDR)` — the policy governing the page
/// that holds `memory`.
pub fn policy_at<T: ?Sized>(memory: &T, min_bits: usize) -> Result<Policy, SysError> {
    let addr = (memory as *const T).cast::<libc::c_void>();
    let (raw, nodes) = get_mempolicy_grow(addr, MPOL_F_ADDR, min_bits)?;
    Ok(split_mode(raw, nodes))
}

/// `get_mempolicy(NULL, mask, maxnode, NULL, MPOL_F_MEMS_ALLOWED)` — the nodes this thread's
/// cpuset allows.
pub fn mems_allowed(min_bits: usize) -> Result<NodeMask, SysError> {
    get_mempolicy_grow(std::ptr::null(), MPOL_F_MEMS_ALLOWED, min_bits).map(|(_, m)| m)
}

/// `get_mempolicy(&node, NULL, 0, addr, MPOL_F_NODE | MPOL_F_ADDR)` — the node holding the page
/// that holds `memory`. Faults the page in (reading) if it is not present yet.
pub fn node_of<T: ?Sized>(memory: &T) -> Result<NodeId, SysError> {
    let addr = (memory as *const T).cast::<libc::c_void>();
    let mut node: libc::c_int = 0;
    // SAFETY: `node` is writable and outlives the call; no mask is passed (maxnode 0); the
    // kernel validates `addr`.
    let r = unsafe {
        libc::syscall(
            libc::SYS_get_mempolicy,
            &mut node as *mut libc::c_int,
            std::ptr::null_mut::<libc::c_ulong>(),
            0 as libc::c_ulong,
            addr,
            MPOL_F_NODE | MPOL_F_ADDR,
        )
    };
    check("get_mempolicy", r).map(|_| NodeId(node as u32))
}

/// `move_pages(0, count, pages, nodes, status, flags)` — with `nodes: None`, reports where each
/// page of this process is; with `Some`, moves page `i` to `nodes[i]` (`flags` =
/// `MPOL_MF_MOVE`) and reports where each ended up (move_pages(2)). A positive return (pages not
/// migrated) is not an error: the statuses say which.
///
/// # Panics
/// If `nodes` is given with a length different from `pages`.
pub fn move_pages(
    pages: &[*mut libc::c_void],
    nodes: Option<&[NodeId]>,
    flags: u32,
) -> Result<Vec<PageStatus>, SysError> {
    let targets: Option<Vec<libc::c_int>> =
        nodes.map(|n| n.iter().map(|id| id.0 as libc::c_int).collect());
    if let Some(t) = &targets {
        assert_eq!(t.len(), pages.len(), "move_pages: one target node per page");
    }
    let mut status = vec![0 as libc::c_int; pages.len()];
    let targets_ptr = targets.as_ref().map_or(std::ptr::null(), |t| t.as_ptr());
    // SAFETY: `pages`, `targets` and `status` hold `pages.len()` entries each and outlive the
    // call; `status` is writable. The kernel validates each page address.
    let r = unsafe {
        libc::syscall(
            libc::SYS_move_pages,
            0 as libc::c_int,
            pages.len() as libc::c_ulong,
            pages.as_ptr(),
            targets_ptr,
            status.as_mut_ptr(),
            flags as libc::c_int,
        )
    };
    check("move_pages", r)?;
    Ok(status
        .into_iter()
        .map(|s| {
            if s >= 0 {
                PageStatus::Node(NodeId(s as u32))
            } else {
                PageStatus::Unknown { errno: -s }
            }
        })
        .collect())
}

/// `getcpu(&cpu, &node, NULL)` — the CPU and node the calling thread is running on now
/// (getcpu(2)); stale as soon as the scheduler moves the thread unless it is pinned.
pub fn getcpu() -> Result<(CpuId, NodeId), SysError> {
    let mut cpu: libc::c_uint = 0;
    let mut node: libc::c_uint = 0;
    // SAFETY: both out-pointers are writable and outlive the call; the cache argument is unused
    // since Linux 2.6.24 and may be NULL.
    let r = unsafe {
        libc::syscall(
            libc::SYS_getcpu,
            &mut cpu as *mut libc::c_uint,
            &mut node as *mut libc::c_uint,
            std::ptr::null_mut::<libc::c_void>(),
        )
    };
    check("getcpu", r).map(|_| (CpuId(cpu), NodeId(node)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::probe::{Capabilities, Capability};

    #[test]
    fn constants_match_libc() {
        assert_eq!(MPOL_DEFAULT, libc::MPOL_DEFAULT);
        assert_eq!(MPOL_PREFERRED, libc::MPOL_PREFERRED);
        assert_eq!(MPOL_BIND, libc::MPOL_BIND);
        assert_eq!(MPOL_INTERLEAVE, libc::MPOL_INTERLEAVE);
        assert_eq!(MPOL_LOCAL, libc::MPOL_LOCAL);
        assert_eq!(MPOL_F_STATIC_NODES, libc::MPOL_F_STATIC_NODES);
        assert_eq!(MPOL_F_RELATIVE_NODES, libc::MPOL_F_RELATIVE_NODES);
    }

    #[test]
    fn maxnode_is_bits_plus_one() {
        let m = NodeMask::parse_list("0").unwrap();
        let (words, maxnode) = kernel_mask(Some(&m));
        assert_eq!(
            maxnode as usize,
            words.len() * libc::c_ulong::BITS as usize + 1
        );
        assert_eq!(kernel_mask(None).1, 0);
    }

    /// Each call on a page of our own answers as the capability probe predicted: success
    /// where it was allowed, the probe's errno where it was refused. Run twice on scratch
    /// threads, once as the host allows and once under a seccomp filter like Docker's default
    /// profile, so both answers are checked on every host.
    #[test]
    fn calls_answer_as_the_probe_predicted() {
        std::thread::spawn(|| check_calls_against_probe(false))
            .join()
            .unwrap();
        std::thread::spawn(|| {
            match crate::test_support::seccomp::refuse_numa_syscalls_on_this_thread() {
                Ok(()) => check_calls_against_probe(true),
                Err(e) => crate::test_support::skip::skip(&format!(
                    "cannot install a seccomp filter here: {e}"
                )),
            }
        })
        .join()
        .unwrap();
    }

    /// `Some(value)` where the probe allowed the call (which must then succeed); `None` where
    /// it refused it (the call must fail with the same errno).
    fn as_predicted<T: std::fmt::Debug>(
        name: &str,
        cap: Capability,
        r: Result<T, SysError>,
    ) -> Option<T> {
        match cap {
            Capability::Allowed => {
                Some(r.unwrap_or_else(|e| panic!("{name}: the probe allowed it, but {e}")))
            }
            Capability::Refused(p) => {
                let e = r.expect_err(name);
                assert_eq!(e.errno, p.errno, "{name}: {e}, the probe saw {p}");
                None
            }
        }
    }

    fn check_calls_against_probe(filtered: bool) {
        let caps = Capabilities::probe(64);
        if filtered {
            for cap in [caps.mbind, caps.get_mempolicy, caps.move_pages] {
                assert!(
                    matches!(cap, Capability::Refused(e) if e.errno == libc::EPERM),
                    "{caps:?}"
                );
            }
        }
        as_predicted("getcpu", caps.getcpu, getcpu());
        let mut buf = vec![1u8; 3 * 4096];
        let skip = 4096 - buf.as_ptr() as usize % 4096;
        let page = &mut buf[skip..skip + 4096];
        let node = as_predicted("get_mempolicy", caps.get_mempolicy, node_of(&page[0]));
        let status = as_predicted(
            "move_pages",
            caps.move_pages,
            move_pages(&[page.as_mut_ptr().cast()], None, 0),
        );
        if let (Some(n), Some(st)) = (node, &status) {
            // Automatic NUMA balancing can hide a page's node behind a negative status.
            let balancing = std::fs::read_to_string("/proc/sys/kernel/numa_balancing")
                .is_ok_and(|v| v.trim() != "0");
            assert!(
                st[0] == PageStatus::Node(n)
                    || (balancing && matches!(st[0], PageStatus::Unknown { .. })),
                "move_pages says {:?}, get_mempolicy node {n:?}",
                st[0]
            );
        }
        as_predicted("mbind", caps.mbind, mbind(page, MPOL_DEFAULT, None, 0));
        if let Some(n) = node {
            assert_eq!(policy_at(&page[0], 1).unwrap().mode, MPOL_DEFAULT);
            assert!(mems_allowed(1).unwrap().contains(n));
        }
        // Not page aligned: EINVAL where mbind is allowed, the refusal's errno where not.
        let e = mbind(&page[1..2], MPOL_DEFAULT, None, 0).unwrap_err();
        match caps.mbind {
            Capability::Allowed => assert_eq!(e.errno, libc::EINVAL, "{e}"),
            Capability::Refused(p) => assert_eq!(e.errno, p.errno, "{e}"),
        }
    }
}
