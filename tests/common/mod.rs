//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use locus::kernels::GgmlType;
use locus::model::synth::{synth_model, SynthSpec};

pub mod skip;

/// A model file from `$LOCUS_MODELS` or `<repo>/models`; `None` after a recorded skip when it
/// is absent, and a failure naming it under `LOCUS_REQUIRE_MODELS=1`.
pub fn model_path(name: &str) -> Option<PathBuf> {
    skip::model(name)
}

pub fn repo_path(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

/// A fresh, empty temporary directory unique to this test.
pub fn temp_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("locus-test-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Runs the `locus` binary.
pub fn locus(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_locus"))
        .args(args)
        .output()
        .expect("cannot start locus")
}

/// Writes a synthetic Q8_0 model with an untied head (the tied tiny model repeats one token,
/// which would prove little) into a fresh temporary folder. `shape`: vocabulary, embedding,
/// layers, FFN, heads, KV heads.
pub fn write_synth(tag: &str, seed: u64, shape: [usize; 6]) -> PathBuf {
    write_synth_typed(tag, seed, shape, GgmlType::Q8_0)
}

/// [`write_synth`] with every matrix in `ty` (the dimensions must be whole blocks of it).
pub fn write_synth_typed(tag: &str, seed: u64, shape: [usize; 6], ty: GgmlType) -> PathBuf {
    let [n_vocab, n_embd, n_layer, n_ff, n_head, n_head_kv] = shape;
    let path = temp_dir(tag).join("model.gguf");
    let spec = SynthSpec {
        tied: false,
        seed,
        n_vocab,
        n_embd,
        n_layer,
        n_ff,
        n_head,
        n_head_kv,
        ..SynthSpec::tiny(ty)
    };
    synth_model(&spec)
        .write_atomic(&path)
        .expect("cannot write the synthetic model");
    path
}

/// The `locus` binary as a command to configure.
pub fn locus_cmd() -> Command {
    Command::new(env!("CARGO_BIN_EXE_locus"))
}

/// Runs `locus` with arguments that may hold any bytes.
pub fn locus_os<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> Output {
    locus_cmd().args(args).output().expect("cannot start locus")
}

/// The promise for bad input: exactly one line `locus: error: …` on stderr, nothing on stdout,
/// exit code 2, no panic. Returns the line.
pub fn one_error_line(out: &Output, what: &str) -> String {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(2),
        "{what}: status {:?}: {err}",
        out.status
    );
    assert!(!err.contains("panicked"), "{what}: {err}");
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "{what}: one line expected: {err}");
    assert!(lines[0].starts_with("locus: error: "), "{what}: {err}");
    assert!(out.stdout.is_empty(), "{what}: nothing on stdout");
    lines[0].to_string()
}

/// Whether the tests run as root (where permissions do not stop a write, and device nodes
/// can be made).
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Makes `cmd`'s child drop root for the unprivileged `nobody` (uid and gid 65534) before exec,
/// so permissions and per-user limits apply to it; with `nproc`, it may also have at most that
/// many processes and threads. Only for root (call [`is_root`] first).
pub fn as_nobody(cmd: &mut Command, nproc: Option<u64>) {
    use std::os::unix::process::CommandExt;
    const NOBODY: libc::uid_t = 65534;
    // SAFETY: between fork and exec the closure calls only setrlimit, setgroups, setgid and
    // setuid, all async-signal-safe, and touches no memory shared with the parent.
    unsafe {
        cmd.pre_exec(move || {
            if let Some(n) = nproc {
                let lim = libc::rlimit {
                    rlim_cur: n,
                    rlim_max: n,
                };
                if libc::setrlimit(libc::RLIMIT_NPROC, &lim) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            if libc::setgroups(0, std::ptr::null()) != 0
                || libc::setgid(NOBODY) != 0
                || libc::setuid(NOBODY) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Sets resource limits (`setrlimit`) in `cmd`'s child before exec. With `RLIMIT_FSIZE`,
/// SIGXFSZ is ignored too, so a write past the limit fails with EFBIG as a full disk would.
pub fn with_limits(cmd: &mut Command, limits: &[(libc::__rlimit_resource_t, u64)]) {
    use std::os::unix::process::CommandExt;
    let limits = limits.to_vec();
    // SAFETY: between fork and exec the closure calls only setrlimit and signal, both
    // async-signal-safe, on a list built before the fork (no allocation, no locks).
    unsafe {
        cmd.pre_exec(move || {
            for &(resource, value) in &limits {
                let lim = libc::rlimit {
                    rlim_cur: value,
                    rlim_max: value,
                };
                if libc::setrlimit(resource, &lim) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                if resource == libc::RLIMIT_FSIZE {
                    libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
                }
            }
            Ok(())
        });
    }
}

/// Limits `cmd`'s child to `bytes` of address space (`ulimit -v`), so large allocations fail.
pub fn with_address_limit(cmd: &mut Command, bytes: u64) {
    with_limits(cmd, &[(libc::RLIMIT_AS, bytes)]);
}

/// Seconds each fuzz target runs: `LOCUS_FUZZ_SECS` (default 3, as in `make test`).
pub fn fuzz_secs() -> f64 {
    std::env::var("LOCUS_FUZZ_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3.0)
}

/// The fuzzers' seed: `LOCUS_FUZZ_SEED` (default 1).
pub fn fuzz_seed() -> u64 {
    std::env::var("LOCUS_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1)
}

/// 64-bit FNV-1a, to name saved fuzz inputs by content.
pub fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Whether every thread of the process `pid` is stopped (SIGSTOP took hold of all of them).
pub fn all_stopped(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    let mut any = false;
    for task in tasks.flatten() {
        // `TID (comm) STATE …`: the state follows the last parenthesis.
        let Ok(stat) = std::fs::read_to_string(task.path().join("stat")) else {
            continue; // a thread that just exited
        };
        let state = stat
            .rsplit(')')
            .next()
            .and_then(|r| r.trim_start().chars().next());
        if state != Some('T') {
            return false;
        }
        any = true;
    }
    any
}
