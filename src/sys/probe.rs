//! The capability probe: learns once, at start-up, which NUMA and affinity system calls this
//! process may make, so that nothing later fails by surprise. Docker's default seccomp profile
//! refuses `mbind`, `set_mempolicy`, `get_mempolicy` (without CAP_SYS_NICE) and `move_pages`
//! with EPERM; a kernel built without NUMA answers ENOSYS.
//!
//! Every call is tried harmlessly on a scratch thread (memory policy and affinity are per
//! thread, so whatever it sets dies with it), and even there each setter re-applies the state
//! it just read: `get_mempolicy` on the current policy, `set_mempolicy` with that same policy,
//! `mbind(MPOL_DEFAULT)` and a `move_pages` status query on a page of our own anonymous memory
//! (unmapped afterwards), `getcpu`, and `sched_setaffinity` with the current mask.

use std::fmt;

use super::affinity;
use super::errno::SysError;
use super::mempolicy::{self, Policy, MPOL_DEFAULT};

/// Whether one system call may be used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Capability {
    Allowed,
    /// The call (or the setup the probe needed for it) failed with this errno.
    Refused(SysError),
}

impl Capability {
    fn from_result<T>(r: Result<T, SysError>) -> Capability {
        match r {
            Ok(_) => Capability::Allowed,
            Err(e) => Capability::Refused(e),
        }
    }

    pub fn is_allowed(&self) -> bool {
        matches!(self, Capability::Allowed)
    }
}

impl fmt::Display for Capability {
    /// `ok`, or the errno as `EPERM (Operation not permitted)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Capability::Allowed => f.write_str("ok"),
            Capability::Refused(e) => f.write_str(&e.errno_text()),
        }
    }
}

/// What the probe learnt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Capabilities {
    pub mbind: Capability,
    pub set_mempolicy: Capability,
    pub get_mempolicy: Capability,
    pub move_pages: Capability,
    pub getcpu: Capability,
    pub sched_setaffinity: Capability,
    /// The memory policy the process started with (e.g. `bind` under `numactl --membind`),
    /// when `get_mempolicy` is allowed.
    pub start_policy: Option<Policy>,
}

impl Capabilities {
    /// Runs the probe. `node_bits`: the size of the node masks to use (the `possible` count).
    pub fn probe(node_bits: usize) -> Capabilities {
        let scratch = std::thread::Builder::new()
            .name("locus-probe".into())
            .spawn(move || probe_here(node_bits));
        match scratch.map(|h| h.join()) {
            Ok(Ok(caps)) => caps,
            // No thread could be made: probe here; the setters re-apply what they read.
            _ => probe_here(node_bits),
        }
    }

    /// Each call's name and verdict, in a fixed order.
    pub fn entries(&self) -> [(&'static str, Capability); 6] {
        [
            ("mbind", self.mbind),
            ("set_mempolicy", self.set_mempolicy),
            ("get_mempolicy", self.get_mempolicy),
            ("move_pages", self.move_pages),
            ("getcpu", self.getcpu),
            ("sched_setaffinity", self.sched_setaffinity),
        ]
    }

    /// The calls that were refused, with their errors.
    pub fn refused(&self) -> Vec<(&'static str, SysError)> {
        self.entries()
            .into_iter()
            .filter_map(|(name, c)| match c {
                Capability::Refused(e) => Some((name, e)),
                Capability::Allowed => None,
            })
            .collect()
    }
}

fn probe_here(node_bits: usize) -> Capabilities {
    let current = mempolicy::current_policy(node_bits);
    let set_mempolicy = Capability::from_result(match &current {
        Ok(p) => {
            let nodes = (!p.nodes.is_empty()).then_some(&p.nodes);
            mempolicy::set_mempolicy(p.mode | p.flags, nodes)
        }
        Err(_) => mempolicy::set_mempolicy(MPOL_DEFAULT, None),
    });
    let (mbind, move_pages) = probe_on_own_page();
    let sched_setaffinity = Capability::from_result(
        affinity::allowed_cpu_set().and_then(|cpus| affinity::set_affinity(&cpus)),
    );
    Capabilities {
        mbind,
        set_mempolicy,
        get_mempolicy: Capability::from_result(current.as_ref().map_err(|e| *e)),
        move_pages,
        getcpu: Capability::from_result(mempolicy::getcpu()),
        sched_setaffinity,
        start_policy: current.ok(),
    }
}

/// `mbind(MPOL_DEFAULT)` and a `move_pages` query on one fresh anonymous page, then unmaps it.
fn probe_on_own_page() -> (Capability, Capability) {
    // SAFETY: sysconf has no memory-safety preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    let page = if page > 0 { page as usize } else { 4096 };
    // SAFETY: a fresh private anonymous mapping; no existing memory is affected.
    let addr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            page,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if addr == libc::MAP_FAILED {
        let e = Capability::Refused(SysError::last("mmap"));
        return (e, e);
    }
    // SAFETY: `addr` is a fresh readable and writable mapping of `page` bytes that nothing else
    // refers to; the slice lives only until the munmap below.
    let region = unsafe { std::slice::from_raw_parts_mut(addr.cast::<u8>(), page) };
    let mbind = Capability::from_result(mempolicy::mbind(region, MPOL_DEFAULT, None, 0));
    // Touching the page faults it in, so the status query has a page to report.
    region[0] = 1;
    let move_pages = Capability::from_result(mempolicy::move_pages(&[addr], None, 0));
    // SAFETY: `addr`/`page` is exactly the mapping made above, and nothing refers to it any more.
    unsafe { libc::munmap(addr, page) };
    (mbind, move_pages)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_leaves_this_thread_as_it_was() {
        let aff = affinity::allowed_cpu_set().unwrap();
        let pol = mempolicy::current_policy(64);
        let caps = Capabilities::probe(64);
        assert_eq!(affinity::allowed_cpu_set().unwrap(), aff);
        assert_eq!(mempolicy::current_policy(64), pol);
        assert!(caps.getcpu.is_allowed());
        assert!(caps.sched_setaffinity.is_allowed());
        for (name, c) in caps.entries() {
            if let Capability::Refused(e) = c {
                eprintln!("{name} refused on this host: {e}");
            }
        }
    }

    /// `refused` lists exactly the refused calls, by their slot's name, in `entries` order, with
    /// their own errors (a hand-made verdict, so every slot is checked, not only this host's;
    /// the errors name other calls, as a probe's setup step may, so a slot is not confused with
    /// the call its error names).
    #[test]
    fn refused_lists_the_refused_calls_with_their_errors() {
        let refused = |call, errno| Capability::Refused(SysError { call, errno });
        let caps = Capabilities {
            mbind: refused("mmap", libc::EPERM),
            set_mempolicy: Capability::Allowed,
            get_mempolicy: refused("get_mempolicy()", libc::ENOSYS),
            move_pages: refused("mmap", libc::EPERM),
            getcpu: Capability::Allowed,
            sched_setaffinity: refused("sched_getaffinity", libc::EINVAL),
            start_policy: None,
        };
        let got: Vec<(&str, i32)> = caps
            .refused()
            .into_iter()
            .map(|(name, e)| (name, e.errno))
            .collect();
        assert_eq!(
            got,
            [
                ("mbind", libc::EPERM),
                ("get_mempolicy", libc::ENOSYS),
                ("move_pages", libc::EPERM),
                ("sched_setaffinity", libc::EINVAL),
            ]
        );
        let none = Capabilities {
            mbind: Capability::Allowed,
            set_mempolicy: Capability::Allowed,
            get_mempolicy: Capability::Allowed,
            move_pages: Capability::Allowed,
            getcpu: Capability::Allowed,
            sched_setaffinity: Capability::Allowed,
            start_policy: None,
        };
        assert!(none.refused().is_empty());
        // Each slot is reported under its own name.
        let names: Vec<&str> = caps.entries().iter().map(|(n, _)| *n).collect();
        assert_eq!(
            names,
            [
                "mbind",
                "set_mempolicy",
                "get_mempolicy",
                "move_pages",
                "getcpu",
                "sched_setaffinity"
            ]
        );
        let verdicts: Vec<Capability> = caps.entries().iter().map(|(_, c)| *c).collect();
        assert_eq!(
            verdicts,
            [
                caps.mbind,
                caps.set_mempolicy,
                caps.get_mempolicy,
                caps.move_pages,
                caps.getcpu,
                caps.sched_setaffinity
            ]
        );
    }

    #[test]
    fn displays_ok_or_the_errno_name() {
        assert_eq!(Capability::Allowed.to_string(), "ok");
        let r = Capability::Refused(SysError {
            call: "mbind",
            errno: libc::EPERM,
        });
        assert!(r.to_string().starts_with("EPERM ("));
    }
}
