//! Reproducible property tests: every quickcheck run draws from one generator seeded from
//! `QUICKCHECK_SEED` when it is set, or from a fresh seed otherwise, and prints the seed (the
//! harness shows it when the test fails). `QUICKCHECK_SEED=<seed> cargo test --release --test
//! NAME PROPERTY` then draws the same cases and replays the failure. quickcheck's own
//! `QUICKCHECK_TESTS` and `QUICKCHECK_GENERATOR_SIZE` still apply.
//!
//! Shared by the integration tests and the library's unit tests (through `#[path]`).
#![allow(dead_code)]

use quickcheck::{Gen, QuickCheck, Testable};

/// The variable that replays a run.
pub const SEED_VAR: &str = "QUICKCHECK_SEED";
/// quickcheck's default generator size.
const DEFAULT_SIZE: usize = 100;

/// The seed for this run: `QUICKCHECK_SEED`, or one from the clock and the process id.
pub fn seed() -> u64 {
    match std::env::var(SEED_VAR) {
        Ok(s) => s
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{SEED_VAR}={s:?} is not a u64")),
        Err(_) => {
            let t = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64);
            // SplitMix64's finaliser: neighbouring clock readings give unrelated seeds.
            let mut z = t ^ (u64::from(std::process::id()) << 32);
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        }
    }
}

fn size() -> usize {
    std::env::var("QUICKCHECK_GENERATOR_SIZE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(DEFAULT_SIZE)
}

/// Checks property `f` on quickcheck's default number of cases (`QUICKCHECK_TESTS`).
pub fn check<A: Testable>(name: &str, f: A) {
    check_with(name, QuickCheck::new(), f)
}

/// Checks property `f` on `tests` cases.
pub fn check_n<A: Testable>(name: &str, tests: u64, f: A) {
    check_with(name, QuickCheck::new().tests(tests), f)
}

/// Runs `qc` with a generator seeded as the module says; a failure's panic message ends with
/// the command-line variable that replays it.
fn check_with<A: Testable>(name: &str, qc: QuickCheck, f: A) {
    let seed = seed();
    eprintln!("quickcheck {name}: seed {seed} (replay with {SEED_VAR}={seed})");
    let mut qc = qc.rng(Gen::from_size_and_seed(size(), seed));
    let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| qc.quickcheck(f)));
    if let Err(p) = run {
        let msg = p
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| p.downcast_ref::<&str>().copied())
            .unwrap_or("a property failed");
        panic!("{name}: {msg}; replay with {SEED_VAR}={seed}");
    }
}

/// A generator of `size` seeded as the module says, for tests that draw values directly (the
/// seed is printed; the harness shows it when the test fails).
pub fn gen(name: &str, size: usize) -> Gen {
    let seed = seed();
    eprintln!("quickcheck {name}: seed {seed} (replay with {SEED_VAR}={seed})");
    Gen::from_size_and_seed(size, seed)
}
