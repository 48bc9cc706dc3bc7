//! Helpers the QEMU tests share (tests/vm.rs, tests/vm_bench.rs): whether the host can boot a
//! guest, the static binary, synthetic models, and the guest's `== key` output sections.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Instant;

use super::common;
pub use super::common::write_synth;

pub const TARGET: &str = "x86_64-unknown-linux-gnu";

/// What a VM test needs from the host, or `None` after a loud SKIPPED line.
pub struct VmEnv {
    pub boot: PathBuf,
    pub locus_static: PathBuf,
}

pub fn vm_env(test: &str) -> Option<VmEnv> {
    let cache = std::env::var_os("LOCUS_VM_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| common::repo_path("target/vm"));
    let mut missing = Vec::new();
    if !on_path("qemu-system-x86_64") {
        missing.push("qemu-system-x86_64".to_string());
    }
    if !on_path("cpio") {
        missing.push("cpio".to_string());
    }
    if !Path::new("/bin/busybox").is_file() {
        missing.push("/bin/busybox (busybox-static)".to_string());
    }
    let kernel = cache.join("vmlinuz");
    if !kernel.is_file() {
        missing.push(format!("the guest kernel {}", kernel.display()));
    }
    if !missing.is_empty() {
        let why = format!(
            "the VM tests need {}; run tools/vm/setup.sh as root (make vm-setup)",
            missing.join(", ")
        );
        assert!(
            !common::skip::vms_required(),
            "vm test {test}: {why} ({}=1 requires them)",
            common::skip::REQUIRE_VM
        );
        common::skip::skip(&why);
        return None;
    }
    Some(VmEnv {
        boot: common::repo_path("tools/vm/boot.sh"),
        locus_static: static_locus().clone(),
    })
}

fn on_path(exe: &str) -> bool {
    std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join(exe).is_file()))
        .unwrap_or(false)
}

/// The static binary, built (or found fresh by cargo) once per test run with `make static`'s
/// flags. Panics if the build fails: a broken static build is a real failure, not a skip.
pub fn static_locus() -> &'static PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let target_dir = std::env::var_os("CARGO_TARGET_DIR")
            .map(PathBuf::from)
            .map(|d| {
                if d.is_absolute() {
                    d
                } else {
                    common::repo_path(".").join(d)
                }
            })
            .unwrap_or_else(|| common::repo_path("target"));
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let t = Instant::now();
        let out = Command::new(cargo)
            .current_dir(common::repo_path("."))
            .env("RUSTFLAGS", "-C target-feature=+crt-static")
            .env("CARGO_TARGET_DIR", &target_dir)
            .args(["build", "--release", "--bin", "locus", "--target", TARGET])
            .output()
            .expect("cannot start cargo for the static build");
        assert!(
            out.status.success(),
            "static build failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        eprintln!(
            "vm: static locus ready in {:.1}s",
            t.elapsed().as_secs_f64()
        );
        target_dir.join(TARGET).join("release").join("locus")
    })
}

/// Splits the guest's stdout into its `== key` sections (each value keeps its own lines).
pub fn sections(stdout: &str) -> BTreeMap<String, String> {
    let mut map = BTreeMap::new();
    let mut key: Option<String> = None;
    let mut val = String::new();
    for line in stdout.split_inclusive('\n') {
        if let Some(k) = line.strip_prefix("== ") {
            if let Some(prev) = key.take() {
                map.insert(prev, std::mem::take(&mut val));
            }
            key = Some(k.trim_end().to_string());
        } else if key.is_some() {
            val.push_str(line);
        }
    }
    if let Some(prev) = key {
        map.insert(prev, val);
    }
    map
}
