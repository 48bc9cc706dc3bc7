//! A seccomp filter like Docker's default profile as far as NUMA goes: `mbind`,
//! `set_mempolicy`, `get_mempolicy` and `move_pages` fail with EPERM; everything else is
//! allowed. Installed in a child process before exec, or on the calling thread alone (a
//! filter without `SECCOMP_FILTER_FLAG_TSYNC` binds only the thread that installs it and the
//! threads it creates afterwards), so a unit test can run "in a container" on a scratch thread.
#![allow(dead_code)]

use std::process::Command;

/// `AUDIT_ARCH_X86_64` from `<linux/audit.h>`: EM_X86_64 | 64-bit | little-endian.
const AUDIT_ARCH_X86_64: u32 = 0xC000_003E;
/// Offsets of `nr` and `arch` in `struct seccomp_data`.
const NR_OFFSET: u32 = 0;
const ARCH_OFFSET: u32 = 4;

fn filter() -> Vec<libc::sock_filter> {
    let stmt = |code: u32, k: u32| libc::sock_filter {
        code: code as u16,
        jt: 0,
        jf: 0,
        k,
    };
    let jeq = |k: u32, jt: u8, jf: u8| libc::sock_filter {
        code: (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16,
        jt,
        jf,
        k,
    };
    let load = libc::BPF_LD | libc::BPF_W | libc::BPF_ABS;
    let allow = stmt(libc::BPF_RET | libc::BPF_K, libc::SECCOMP_RET_ALLOW);
    let eperm = stmt(
        libc::BPF_RET | libc::BPF_K,
        libc::SECCOMP_RET_ERRNO | (libc::EPERM as u32 & libc::SECCOMP_RET_DATA),
    );
    let mut f = vec![
        stmt(load, ARCH_OFFSET),
        jeq(AUDIT_ARCH_X86_64, 1, 0),
        allow,
        stmt(load, NR_OFFSET),
    ];
    for nr in [
        libc::SYS_mbind,
        libc::SYS_set_mempolicy,
        libc::SYS_get_mempolicy,
        libc::SYS_move_pages,
    ] {
        f.push(jeq(nr as u32, 0, 1));
        f.push(eperm);
    }
    f.push(allow);
    f
}

/// `prctl(PR_SET_NO_NEW_PRIVS)` then `prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, prog)` on the
/// calling thread. Allocates nothing (safe between fork and exec).
fn install(filter: &[libc::sock_filter]) -> std::io::Result<()> {
    let prog = libc::sock_fprog {
        len: filter.len() as libc::c_ushort,
        filter: filter.as_ptr() as *mut libc::sock_filter,
    };
    // SAFETY: `prog` points at `filter`, which outlives both calls; the kernel copies the
    // program. Neither call touches memory of ours otherwise.
    let failed = unsafe {
        libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
            || libc::prctl(
                libc::PR_SET_SECCOMP,
                libc::SECCOMP_MODE_FILTER,
                &prog as *const libc::sock_fprog,
            ) != 0
    };
    if failed {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Makes `cmd`'s child install the filter before exec.
pub fn refuse_numa_syscalls(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    let filter = filter();
    // SAFETY: the closure runs in the forked child before exec; `install` makes two prctl
    // calls on the filter built before the fork (no allocation, no locks).
    unsafe { cmd.pre_exec(move || install(&filter)) };
}

/// Installs the filter on the calling thread (and the threads it creates later) for good:
/// call it on a scratch thread.
pub fn refuse_numa_syscalls_on_this_thread() -> std::io::Result<()> {
    install(&filter())
}
