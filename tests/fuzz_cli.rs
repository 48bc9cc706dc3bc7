//! A fuzzer over the command line itself: random argument vectors for every subcommand
//! (its real flags and made-up ones, values at the edges: 0, -1, -2, huge numbers, u64::MAX
//! and beyond, NaN, infinities, empty strings, non-UTF-8 bytes, 64 KiB strings, paths to the
//! model, to devices, to a FIFO, to directories and to nothing), each run as a fresh `locus`
//! process. Every run must end with exit 0 or 2 (130 never: nobody presses Ctrl-C), no panic,
//! no abort or crash, no hang (a case is killed after [`CASE_LIMIT`]), and on exit 2 exactly one
//! `locus: error: …` line, the last. No special file of the test's may change.
//!
//! Each case runs under limits that keep a random command from hurting the machine and turn
//! what it would do at scale into errors: 2 GiB of address space, 64 MiB per written file.
//!
//! `LOCUS_FUZZ_SECS` (default 3) and `LOCUS_FUZZ_SEED` (default 1) as for tests/fuzz.rs; `make
//! fuzz` runs it for 30 minutes. A failing argument vector is saved as
//! `tests/data/fuzz/regressions/cli-<hash>.args` (one argument per line, bytes outside
//! printable ASCII as `\xNN`) and replayed by every later run (`cli_regressions_replay`).

mod common;

use std::ffi::OsString;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use locus::model::sampler::Rng;

/// Longest a case may run before it counts as a hang.
const CASE_LIMIT: Duration = Duration::from_secs(30);
/// Address space and file-size limits of every case.
const AS_LIMIT: u64 = 2 << 30;
const FSIZE_LIMIT: u64 = 64 << 20;

/// Each command and the flags it takes (`=` marks a flag that takes a value).
const COMMANDS: &[(&str, &[&str])] = &[
    (
        "run",
        &[
            "-m=",
            "-p=",
            "-f=",
            "-n=",
            "-t=",
            "-c=",
            "--temp=",
            "--top-k=",
            "--top-p=",
            "--min-p=",
            "--repeat-penalty=",
            "--repeat-last-n=",
            "-s=",
            "-ctk=",
            "-ctv=",
            "--ignore-eos",
            "--chat",
            "-sys=",
            "--system=",
            "--chat-template=",
            "-v",
            "--numa=",
            "--numa-node=",
            "--pin=",
            "--strict",
            "--hugepages",
            "--poll=",
            "-h",
        ],
    ),
    (
        "perplexity",
        &[
            "-m=",
            "-f=",
            "-c=",
            "--chunks=",
            "-t=",
            "-ctk=",
            "--numa=",
            "--poll=",
            "-h",
        ],
    ),
    (
        "tokenize",
        &[
            "-m=",
            "-p=",
            "-f=",
            "--stdin",
            "--ids",
            "--no-parse-special",
            "--chat",
            "--chat-template=",
            "-sys=",
            "--system=",
            "-h",
        ],
    ),
    ("quantize", &["-h"]),
    (
        "gen-model",
        &[
            "--preset=",
            "--type=",
            "--dim=",
            "--layers=",
            "--ffn=",
            "--heads=",
            "--kv-heads=",
            "--vocab=",
            "--ctx=",
            "--seed=",
            "--untied",
            "--arch=",
            "--head-dim=",
            "--window=",
            "--swa-pattern=",
            "-h",
        ],
    ),
    (
        "bench",
        &[
            "-m=",
            "-p=",
            "-n=",
            "-r=",
            "-t=",
            "--numa=",
            "--rounds=",
            "--cold",
            "--json",
            "--csv",
            "--svg=",
            "--pin=",
            "--poll=",
            "-h",
        ],
    ),
    (
        "membw",
        &["-t=", "--size=", "--passes=", "--matrix", "--json", "-h"],
    ),
    ("topo", &["--json", "-h"]),
    (
        "audit",
        &[
            "-m=", "-t=", "--numa=", "--json", "--pin=", "--strict", "-h",
        ],
    ),
];

/// Files a case may name: in a directory of the test's own.
struct Fixture {
    dir: PathBuf,
    model: PathBuf,
    text: PathBuf,
    fifo: PathBuf,
    _listener: std::os::unix::net::UnixListener,
}

fn fixture() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| {
        let model = common::write_synth("fuzz-cli", 9, [300, 64, 1, 96, 4, 2]);
        let dir = model.parent().unwrap().to_path_buf();
        let text = dir.join("text.txt");
        std::fs::write(
            &text,
            "The quick brown fox jumps over the lazy dog. ".repeat(40),
        )
        .unwrap();
        let fifo = dir.join("fifo");
        let c = std::ffi::CString::new(fifo.as_os_str().as_bytes()).unwrap();
        // SAFETY: `c` is a NUL-terminated path that outlives the call.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let listener = std::os::unix::net::UnixListener::bind(dir.join("sock")).unwrap();
        std::fs::create_dir_all(dir.join("out")).unwrap();
        Fixture {
            dir,
            model,
            text,
            fifo,
            _listener: listener,
        }
    })
}

impl Fixture {
    /// Kinds and device numbers of the special files cases may name (the fixture's FIFO and
    /// socket, and the host's /dev/null, /dev/zero and /dev/full), which no case may change.
    fn specials(&self) -> Vec<String> {
        use std::os::unix::fs::MetadataExt;
        let paths = [
            self.dir.join("fifo"),
            self.dir.join("sock"),
            "/dev/null".into(),
            "/dev/zero".into(),
            "/dev/full".into(),
        ];
        paths
            .iter()
            .map(|p| {
                let m = std::fs::symlink_metadata(p).unwrap();
                format!("{}: {:?} rdev {}", p.display(), m.file_type(), m.rdev())
            })
            .collect()
    }
}

/// True one time in `n`.
fn one_in(rng: &mut Rng, n: u64) -> bool {
    rng.next_u64().is_multiple_of(n)
}

fn pick<'a, T>(rng: &mut Rng, v: &'a [T]) -> &'a T {
    &v[(rng.next_u64() % v.len() as u64) as usize]
}

/// A value at an edge of what the flag could take.
fn value(rng: &mut Rng, f: &Fixture) -> OsString {
    let out = f.dir.join("out").join(format!("o{}", rng.next_u64() % 4));
    match rng.next_u64() % 12 {
        0 => pick(
            rng,
            &[
                "0", "1", "-1", "-2", "2", "3", "7", "64", "100", "101", "255", "4096", "65536",
            ],
        )
        .into(),
        1 => pick(
            rng,
            &[
                "4294967295",
                "4294967296",
                "9223372036854775807",
                "9223372036854775808",
                "18446744073709551615",
                "18446744073709551616",
                "99999999999999999999999",
                "-9223372036854775808",
                "-99999999999",
            ],
        )
        .into(),
        2 => pick(
            rng,
            &[
                "nan", "NaN", "inf", "-inf", "1e309", "-0", "0.5", "1e-45", "3.4e38",
            ],
        )
        .into(),
        3 => pick(
            rng,
            &[
                "", " ", "-", "--", "=", "1,2", ",", "1,,0", "all", "0x10", "+1",
            ],
        )
        .into(),
        4 => pick(
            rng,
            &[
                "off",
                "auto",
                "mirror",
                "shard",
                "interleave",
                "isolate",
                "distribute",
                "node",
                "core",
                "f16",
                "f32",
                "q8_0",
                "tiny",
                "1b",
                "Q4_0",
                "Q8_0",
                "F32",
                "BF16",
                "Q6_K",
            ],
        )
        .into(),
        // Any bytes but NUL, which no argument can hold.
        5 => OsString::from_vec(
            (0..1 + rng.next_u64() % 6)
                .map(|_| (rng.next_u64() as u8).max(1))
                .collect(),
        ),
        6 => "x".repeat(1 << 16).into(),
        7 => f.model.clone().into(),
        8 => f.text.clone().into(),
        9 => pick(
            rng,
            &[
                "/dev/null",
                "/dev/zero",
                "/dev/full",
                "/nonexistent/x",
                "/",
                "/proc/self/mem",
            ],
        )
        .into(),
        10 => match rng.next_u64() % 3 {
            0 => f.fifo.clone().into(),
            1 => f.dir.join("sock").into(),
            _ => f.dir.clone().into(),
        },
        _ => out.into(),
    }
}

/// Flags that size the work itself (repetitions, passes, tokens): a case gets a small value, a
/// value the range check refuses, or garbage, never a valid but huge request, which would be
/// slow, not wrong.
const WORK_FLAGS: &[&str] = &["-r", "--rounds", "--passes", "--chunks"];

fn work_value(rng: &mut Rng, f: &Fixture) -> OsString {
    match rng.next_u64() % 3 {
        0 => pick(rng, &["0", "1", "2", "3", "-1", "-2"]).into(),
        1 => pick(rng, &["1001", "4294967296", "99999999999999999999", "-99"]).into(),
        _ => value(rng, f),
    }
}

/// A random argument vector (without the program name).
fn argv(rng: &mut Rng, f: &Fixture) -> Vec<OsString> {
    let (cmd, flags) = *pick(rng, COMMANDS);
    let mut v: Vec<OsString> = vec![cmd.into()];
    if one_in(rng, 40) {
        v[0] = value(rng, f);
    }
    // Commands with positional arguments get some of them.
    match cmd {
        "quantize" => {
            for _ in 0..rng.next_u64() % 5 {
                v.push(value(rng, f));
            }
        }
        "gen-model" if !one_in(rng, 4) => v.push(value(rng, f)),
        _ => {}
    }
    // Small shapes for gen-model most of the time, so a case writes a small file quickly.
    if cmd == "gen-model" && !one_in(rng, 3) {
        v.extend(
            [
                "--dim",
                "64",
                "--ffn",
                "96",
                "--heads",
                "4",
                "--kv-heads",
                "2",
                "--vocab",
                "300",
            ]
            .map(OsString::from),
        );
    }
    // Enough to run quickly when the flags allow a run at all.
    if matches!(cmd, "run" | "bench") && one_in(rng, 2) {
        v.extend(["-n", "4", "-p"].map(OsString::from));
        v.push(if cmd == "run" {
            "hello".into()
        } else {
            "8".into()
        });
        v.push("-m".into());
        v.push(f.model.clone().into());
    }
    for _ in 0..rng.next_u64() % 7 {
        let flag = pick(rng, flags);
        match rng.next_u64() % 10 {
            0 => v.push(value(rng, f)),
            1 => v.push(OsString::from(format!("--{}", rng.next_u64() % 1000))),
            _ => match flag.strip_suffix('=') {
                Some(name) if one_in(rng, 6) => {
                    let mut a = OsString::from(format!("{name}="));
                    a.push(value(rng, f));
                    v.push(a);
                }
                Some(name) => {
                    v.push(name.into());
                    let work = WORK_FLAGS.contains(&name)
                        || (cmd == "bench" && matches!(name, "-p" | "-n"));
                    if work {
                        v.push(work_value(rng, f));
                    } else if !one_in(rng, 10) {
                        v.push(value(rng, f));
                    }
                }
                None => v.push(flag.into()),
            },
        }
    }
    v
}

/// What a case must never do; `None` if it kept every promise.
fn check(args: &[OsString], f: &Fixture) -> Option<String> {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_locus"));
    cmd.args(args)
        .current_dir(f.dir.join("out"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .env_remove("LOCUS_FAULT");
    common::with_limits(
        &mut cmd,
        &[
            (libc::RLIMIT_AS, AS_LIMIT),
            (libc::RLIMIT_FSIZE, FSIZE_LIMIT),
        ],
    );
    let mut child = cmd.spawn().expect("cannot start locus");
    let mut err_pipe = child.stderr.take().unwrap();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = std::sync::Arc::clone(&seen);
    let reader = std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = std::io::Read::read(&mut err_pipe, &mut buf) {
            if n == 0 {
                break;
            }
            sink.lock().unwrap().extend_from_slice(&buf[..n]);
        }
    });
    let t = Instant::now();
    let mut fed = false;
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break Some(s);
        }
        // A run reading the FIFO says it waits for a writer (documented): be that writer.
        if !fed && String::from_utf8_lossy(&seen.lock().unwrap()).contains("waiting for a writer") {
            fed = true;
            if let Ok(mut w) = std::fs::OpenOptions::new().write(true).open(&f.fifo) {
                let _ = std::io::Write::write_all(&mut w, b"hi");
            }
        }
        if t.elapsed() > CASE_LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(2));
    };
    reader.join().unwrap();
    let err = String::from_utf8_lossy(&seen.lock().unwrap()).into_owned();
    let Some(status) = status else {
        return Some(format!("hang: still running after {CASE_LIMIT:?}"));
    };
    if let Some(sig) = status.signal() {
        return Some(format!("killed by signal {sig}: {err}"));
    }
    if err.contains("panicked") || err.contains("memory allocation of") {
        return Some(format!("panic or abort: {err}"));
    }
    match status.code() {
        Some(0) => None,
        Some(2) => {
            let errors: Vec<&str> = err
                .lines()
                .filter(|l| l.starts_with("locus: error: "))
                .collect();
            let last = err
                .lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("");
            (errors.len() != 1 || !last.starts_with("locus: error: "))
                .then(|| format!("exit 2 without exactly one final error line: {err}"))
        }
        c => Some(format!("exit status {c:?}: {err}")),
    }
}

/// One argument per line, bytes outside printable ASCII (and `\`) as `\xNN`.
fn encode(args: &[OsString]) -> String {
    let mut s = String::new();
    for a in args {
        for &b in a.as_bytes() {
            if (0x20..0x7f).contains(&b) && b != b'\\' {
                s.push(b as char);
            } else {
                s.push_str(&format!("\\x{b:02x}"));
            }
        }
        s.push('\n');
    }
    s
}

fn decode(text: &str, f: &Fixture) -> Vec<OsString> {
    text.lines()
        .map(|l| {
            // Saved paths into the fixture are written as @DIR so they replay elsewhere.
            let l = l.replace("@DIR", &f.dir.to_string_lossy());
            let b = l.as_bytes();
            let mut out = Vec::new();
            let mut i = 0;
            while i < b.len() {
                if b[i] == b'\\' && b.get(i + 1) == Some(&b'x') && i + 3 < b.len() {
                    let hex = std::str::from_utf8(&b[i + 2..i + 4]).unwrap();
                    out.push(u8::from_str_radix(hex, 16).unwrap());
                    i += 4;
                } else {
                    out.push(b[i]);
                    i += 1;
                }
            }
            OsString::from_vec(out)
        })
        .collect()
}

fn regressions_dir() -> PathBuf {
    common::repo_path("tests/data/fuzz/regressions")
}

/// Saves a failing case (paths into the fixture written as @DIR) and returns where.
fn save(args: &[OsString], f: &Fixture) -> PathBuf {
    let text = encode(args).replace(&*f.dir.to_string_lossy(), "@DIR");
    let p = regressions_dir().join(format!("cli-{:016x}.args", common::fnv(text.as_bytes())));
    std::fs::write(&p, text).unwrap();
    p
}

#[test]
fn fuzz_cli() {
    let f = fixture();
    let before = f.specials();
    let mut rng = Rng::new(common::fuzz_seed());
    let t = Instant::now();
    let (mut cases, mut by_command) = (0u64, std::collections::BTreeMap::<String, u64>::new());
    let mut failures = Vec::new();
    while t.elapsed().as_secs_f64() < common::fuzz_secs() {
        let args = argv(&mut rng, f);
        cases += 1;
        let name = args[0].to_string_lossy();
        let name = match COMMANDS.iter().find(|(c, _)| *c == name) {
            Some((c, _)) => c.to_string(),
            None => "(no command)".to_string(),
        };
        *by_command.entry(name).or_default() += 1;
        if let Some(why) = check(&args, f) {
            let saved = save(&args, f);
            failures.push(format!("{:?}: {why}\n  saved as {}", args, saved.display()));
            if failures.len() >= 5 {
                break;
            }
        }
        assert_eq!(f.specials(), before, "{args:?} changed a special file");
    }
    eprintln!(
        "fuzz_cli: {cases} cases in {:.1} s (seed {}), per command {by_command:?}",
        t.elapsed().as_secs_f64(),
        common::fuzz_seed()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Every saved failure, and hand-written edge cases, replay without breaking a promise.
#[test]
fn cli_regressions_replay() {
    let f = fixture();
    let mut n = 0;
    for e in std::fs::read_dir(regressions_dir()).unwrap() {
        let p = e.unwrap().path();
        if !p.file_name().unwrap().to_string_lossy().starts_with("cli-") {
            continue;
        }
        let args = decode(&std::fs::read_to_string(&p).unwrap(), f);
        if let Some(why) = check(&args, f) {
            panic!("{}: {args:?}: {why}", p.display());
        }
        n += 1;
    }
    eprintln!("cli_regressions_replay: {n} saved cases");
}

#[test]
fn the_encoding_round_trips() {
    let f = fixture();
    let args = vec![
        OsString::from("run"),
        OsString::from_vec(vec![0xff, b'\\', b'a', 0x00, 0x7f, b'\n']),
        f.model.clone().into(),
    ];
    let text = encode(&args).replace(&*f.dir.to_string_lossy(), "@DIR");
    assert_eq!(decode(&text, f), args);
    assert!(Path::new(&f.model).is_file());
}
