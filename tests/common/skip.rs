//! Skips that are counted, not hidden. A test that cannot run here calls [`skip`]: the line goes
//! to stderr (which the harness hides unless the test fails) and, when `LOCUS_SKIP_LOG` names a
//! file, is appended there, so `make test` can end with one line listing everything skipped.
//!
//! A missing model is a skip only on a developer's machine: under `LOCUS_REQUIRE_MODELS=1`
//! (`make test`, CI) [`missing_model`] fails the test, naming the file. A missing committed
//! golden file always fails ([`golden_file`]).
//!
//! Shared by the integration tests (`mod common`) and the library's unit tests (through
//! `#[path]` in `src/lib.rs`), so it uses nothing but std.
#![allow(dead_code)]

use std::io::Write;
use std::path::{Path, PathBuf};

/// The environment variable that turns missing models into failures.
pub const REQUIRE_MODELS: &str = "LOCUS_REQUIRE_MODELS";
/// The environment variable that turns missing VM prerequisites into failures (set by CI,
/// which installs them).
pub const REQUIRE_VM: &str = "LOCUS_REQUIRE_VM";
/// The environment variable naming the file skips are appended to.
pub const SKIP_LOG: &str = "LOCUS_SKIP_LOG";

/// Whether missing models must fail the tests (`LOCUS_REQUIRE_MODELS=1`).
pub fn models_required() -> bool {
    std::env::var(REQUIRE_MODELS).is_ok_and(|v| v == "1")
}

/// Whether the QEMU tests must run (`LOCUS_REQUIRE_VM=1`).
pub fn vms_required() -> bool {
    std::env::var(REQUIRE_VM).is_ok_and(|v| v == "1")
}

/// A kernel tier this CPU cannot run: its tier tests are skipped, and the summary says so.
pub fn tier_unavailable(tier: impl std::fmt::Display, why: impl std::fmt::Display) {
    skip(&format!("kernel tier {tier} untested: {why}"));
}

/// The running test, as `crate::test` (libtest names each test's thread after the test).
pub fn current_test() -> String {
    let thread = std::thread::current();
    format!(
        "{}::{}",
        env!("CARGO_CRATE_NAME"),
        thread.name().unwrap_or("?")
    )
}

/// Records that the running test did not run (or ran only in part) because of `why`: a SKIPPED
/// line on stderr and, under `LOCUS_SKIP_LOG`, one line `why\ttest` in that file. `why` should
/// be the same words for every test skipped for one reason, so the summary can group them.
pub fn skip(why: &str) {
    let test = current_test();
    eprintln!("SKIPPED: {test}: {why}");
    let Some(log) = std::env::var_os(SKIP_LOG) else {
        return;
    };
    let line = format!("{}\t{}\n", one_line(why), one_line(&test));
    // One write of a whole line with O_APPEND: lines from concurrent tests do not interleave.
    let written = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log)
        .and_then(|mut f| f.write_all(line.as_bytes()));
    if let Err(e) = written {
        panic!(
            "cannot record a skip in {} ({SKIP_LOG}): {e}",
            Path::new(&log).display()
        );
    }
}

fn one_line(s: &str) -> String {
    s.replace(['\t', '\n'], " ")
}

/// The directory models are read from: `$LOCUS_MODELS`, else `<repo>/models`.
pub fn models_dir() -> PathBuf {
    std::env::var_os("LOCUS_MODELS")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("models"))
}

/// The model file `name`, or `None` after a recorded skip. Under `LOCUS_REQUIRE_MODELS=1` a
/// missing model fails the calling test instead, naming the file.
pub fn model(name: &str) -> Option<PathBuf> {
    let p = models_dir().join(name);
    if p.is_file() {
        return Some(p);
    }
    missing_model(&p);
    None
}

/// A model that is not there: a failure under `LOCUS_REQUIRE_MODELS=1`, a skip otherwise.
pub fn missing_model(path: &Path) {
    if models_required() {
        panic!(
            "{}: the model {} is missing and {REQUIRE_MODELS}=1 requires it (run `make models`)",
            current_test(),
            path.display()
        );
    }
    skip(&format!(
        "model {} absent (run `make models`)",
        path.file_name().map_or(path, Path::new).display()
    ));
}

/// A committed golden file under `tests/data/golden/`: its text, or a failure naming it. These
/// files are in git, so one that is missing is a broken checkout, never a skip.
pub fn golden_file(name: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/golden")
        .join(name);
    std::fs::read_to_string(&p).unwrap_or_else(|e| {
        panic!(
            "the committed golden file {} cannot be read ({e}); restore it from git",
            p.display()
        )
    })
}
