//! Hostile input, round two: the command line and the process's limits, through the binary.
//!
//! - Arguments that are not UTF-8: a path is a path (any bytes); a prompt, a name or a number
//!   that is not UTF-8 is one error line naming the flag.
//! - Sizes: every numeric option is range-checked before anything is sized by it (`-c`, `-t`,
//!   `--size`, `-p`/`-n` of bench, gen-model's shape); a context no memory holds is one error
//!   line naming `-c`; `-c` beyond the training context runs, with a warning.
//! - llama.cpp's sentinels and flags: `-s -1`, `-c 0`, `-n -1`, `--repeat-last-n -1`, `-sys`,
//!   `--version`, `-p` with `-f` refused, NaN refused.
//! - Limits: a thread that cannot be started (a pids limit) and an allocation that fails
//!   (`ulimit -v`) are one error line in every placement mode, never a panic or an abort.
//! - Signals: Ctrl-C during a long prompt cuts it short (the timing line counts the tokens
//!   done); during `quantize` and `gen-model` it stops the writer within the piece it was
//!   writing and leaves no temporary file. Events are waited on, durations never asserted.
//! - Output: every command survives a stdout and a stderr that fail (`/dev/full`).
//! - A bench arm that dies is explained in words a user can act on.

mod common;

use std::ffi::OsString;
use std::io::Read;
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use common::{locus_cmd, locus_os, one_error_line};

fn model(tag: &str) -> PathBuf {
    common::write_synth(tag, 5, [300, 64, 2, 96, 4, 2])
}

fn bytes(b: &[u8]) -> OsString {
    OsString::from_vec(b.to_vec())
}

fn stderr_of(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn arguments_that_are_not_utf8() {
    let m = model("cli-utf8");
    let dir = m.parent().unwrap().to_path_buf();
    // A path is a path: a model whose name is not UTF-8 runs, and gen-model writes one.
    let odd = dir.join(bytes(b"mod\xffel.gguf"));
    std::fs::copy(&m, &odd).unwrap();
    let run = |extra: &[OsString]| {
        let mut a: Vec<OsString> = ["run", "-n", "2", "--temp", "0", "-m"]
            .iter()
            .map(OsString::from)
            .collect();
        a.extend_from_slice(extra);
        locus_os(&a)
    };
    let out = run(&[odd.clone().into(), "-p".into(), "hi".into()]);
    assert!(out.status.success(), "{}", stderr_of(&out));
    let made = dir.join(bytes(b"gen\xfe.gguf"));
    let out = locus_os(&[OsString::from("gen-model"), made.clone().into()]);
    assert!(out.status.success(), "{}", stderr_of(&out));
    assert!(made.is_file());
    let out = locus_os(&[
        OsString::from("quantize"),
        made.clone().into(),
        dir.join(bytes(b"q\xfd.gguf")).into(),
        "Q8_0".into(),
    ]);
    assert!(out.status.success(), "{}", stderr_of(&out));
    // Text and values must be UTF-8: one line naming the flag and the bad byte.
    let mp: OsString = m.clone().into();
    for (args, flag) in [
        (vec![mp.clone(), "-p".into(), bytes(b"caf\xe9")], "-p"),
        (
            vec![
                mp.clone(),
                "-p".into(),
                "x".into(),
                "--system".into(),
                bytes(b"\xff"),
            ],
            "--system",
        ),
        (
            vec![
                mp.clone(),
                "-p".into(),
                "x".into(),
                "-t".into(),
                bytes(b"\xff2"),
            ],
            "-t",
        ),
        (
            vec![
                mp.clone(),
                "-p".into(),
                "x".into(),
                "--numa".into(),
                bytes(b"\xc3"),
            ],
            "--numa",
        ),
    ] {
        let e = one_error_line(&run(&args), flag);
        assert!(e.contains(flag) && e.contains("UTF-8"), "{flag}: {e}");
    }
    // A flag that is not UTF-8 is an unknown option, for every command.
    for cmd in [
        "run",
        "perplexity",
        "imatrix",
        "tokenize",
        "bench",
        "membw",
        "topo",
        "audit",
        "gen-model",
    ] {
        let e = one_error_line(&locus_os(&[OsString::from(cmd), bytes(b"--\xff")]), cmd);
        assert!(e.contains("unknown option"), "{cmd}: {e}");
    }
    let e = one_error_line(&locus_os(&[bytes(b"r\xffn")]), "command");
    assert!(e.contains("unknown command"), "{e}");
    let e = one_error_line(
        &locus_os(&[
            OsString::from("tokenize"),
            "-m".into(),
            mp,
            "-p".into(),
            bytes(b"\x80"),
        ]),
        "tokenize -p",
    );
    assert!(e.contains("-p") && e.contains("UTF-8"), "{e}");
}

#[test]
fn sizes_are_range_checked_before_anything_is_sized() {
    let m = model("cli-sizes");
    let ms = m.to_str().unwrap();
    let run = |extra: &[&str]| {
        let mut a = vec!["run", "-m", ms, "-p", "hi", "-n", "2", "--temp", "0"];
        a.extend_from_slice(extra);
        common::locus(&a)
    };
    for (extra, flag, word) in [
        (&["-c", "4294967295"][..], "-c", "memory"),
        (&["-c", "4294967296"], "-c", "out of range"),
        (&["-c", "18446744073709551616"], "-c", "out of range"),
        (&["-c", "-3"], "-c", "out of range"),
        (&["-t", "0"], "-t", "out of range"),
        (&["-t", "99999"], "-t", "out of range"),
        (&["-n", "-3"], "-n", "out of range"),
        (
            &["--repeat-last-n", "-2"],
            "--repeat-last-n",
            "out of range",
        ),
        (&["--poll", "101"], "--poll", "out of range"),
        (
            &["--numa-node", "99999999999"],
            "--numa-node",
            "out of range",
        ),
    ] {
        let e = one_error_line(&run(extra), &format!("{extra:?}"));
        assert!(e.contains(flag) && e.contains(word), "{extra:?}: {e}");
    }
    for (args, flag) in [
        (
            vec!["bench", "-m", ms, "-p", "1099511627776", "-n", "1"],
            "-p",
        ),
        (vec!["bench", "-m", ms, "-r", "0"], "-r"),
        (vec!["bench", "-m", ms, "-t", "1,0"], "-t"),
        (vec!["membw", "--size", "18446744073709551615"], "--size"),
        (vec!["membw", "--passes", "0"], "--passes"),
        (
            vec!["perplexity", "-m", ms, "-f", ms, "-c", "99999999999"],
            "-c",
        ),
        (
            vec!["perplexity", "-m", ms, "-f", ms, "--chunks", "0"],
            "--chunks",
        ),
        (vec!["gen-model", "x.gguf", "--dim", "99999999999"], "--dim"),
        (
            vec![
                "gen-model",
                "x.gguf",
                "--vocab",
                "16777216",
                "--dim",
                "16777216",
            ],
            "--vocab",
        ),
        (
            vec!["gen-model", "x.gguf", "--vocab", "16777216", "--dim", "32"],
            "--vocab",
        ),
        (
            vec![
                "gen-model",
                "x.gguf",
                "--dim",
                "16777216",
                "--ffn",
                "32",
                "--vocab",
                "259",
            ],
            "--dim",
        ),
        (
            vec!["gen-model", "x.gguf", "--layers", "16777216"],
            "--layers",
        ),
        (
            vec![
                "gen-model",
                "x.gguf",
                "--dim",
                "65536",
                "--layers",
                "4096",
                "--ffn",
                "65536",
                "--heads",
                "64",
                "--kv-heads",
                "64",
            ],
            "GiB free",
        ),
    ] {
        let e = one_error_line(&common::locus(&args), &format!("{args:?}"));
        assert!(e.contains(flag), "{args:?}: {e}");
    }
    assert!(!Path::new("x.gguf").exists(), "gen-model wrote nothing");
    // Beyond the training context (256) runs, with one warning.
    let out = run(&["-c", "600"]);
    let err = stderr_of(&out);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("warning: -c 600 is more than the model's training context (256)"),
        "{err}"
    );
}

#[test]
fn llama_cpp_sentinels_and_flags() {
    let m = model("cli-sentinels");
    let ms = m.to_str().unwrap();
    // -s -1: a random seed, printed so the run can be replayed with it.
    let out = common::locus(&[
        "run", "-m", ms, "-p", "hi", "-n", "6", "-s", "-1", "--temp", "1",
    ]);
    let err = stderr_of(&out);
    assert!(out.status.success(), "{err}");
    let seed = err
        .split("locus: seed ")
        .nth(1)
        .and_then(|s| s.split(' ').next())
        .unwrap_or_else(|| panic!("no seed line: {err}"))
        .to_string();
    let replay = common::locus(&[
        "run", "-m", ms, "-p", "hi", "-n", "6", "-s", &seed, "--temp", "1",
    ]);
    assert_eq!(replay.stdout, out.stdout, "-s {seed} replays the -s -1 run");
    assert!(
        !stderr_of(&replay).contains("locus: seed"),
        "an explicit seed is not printed"
    );
    // -c 0: the model's context (256): a 300-token generation stops when it is full.
    let out = common::locus(&[
        "run",
        "-m",
        ms,
        "-p",
        "hi",
        "-c",
        "0",
        "-n",
        "-1",
        "--ignore-eos",
        "--temp",
        "0",
        "--repeat-last-n",
        "-1",
    ]);
    let err = stderr_of(&out);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("the context of 256 tokens is full"), "{err}");
    // -sys is --system: the system message lengthens the chat prompt; --version prints the
    // version.
    let prompt_tokens = |extra: &[&str]| -> usize {
        let mut a = vec!["run", "-m", ms, "-p", "hi", "--chat", "-n", "1"];
        a.extend_from_slice(extra);
        let out = common::locus(&a);
        let err = stderr_of(&out);
        assert!(out.status.success(), "{err}");
        err.split("prompt ")
            .nth(1)
            .and_then(|s| s.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no prompt count: {err}"))
    };
    let plain = prompt_tokens(&[]);
    let with_sys = prompt_tokens(&["-sys", "be brief and kind"]);
    assert!(with_sys > plain, "-sys: {with_sys} tokens against {plain}");
    assert_eq!(with_sys, prompt_tokens(&["--system", "be brief and kind"]));
    let v = common::locus(&["--version"]);
    assert!(v.status.success());
    assert_eq!(
        String::from_utf8_lossy(&v.stdout).trim(),
        format!("locus {}", env!("CARGO_PKG_VERSION"))
    );
    // No command at all: one line naming the commands (not the whole help on stderr).
    let e = one_error_line(&locus_os::<&str>(&[]), "no command");
    assert!(
        e.contains("no command given") && e.contains("run, serve, perplexity"),
        "{e}"
    );
    // -p with -f, NaN and infinity are errors.
    for (args, word) in [
        (
            vec!["run", "-m", ms, "-p", "a", "-f", ms],
            "exclude each other",
        ),
        (vec!["run", "-m", ms, "-p", "a", "--temp", "nan"], "--temp"),
        (
            vec!["run", "-m", ms, "-p", "a", "--top-p", "NaN"],
            "--top-p",
        ),
        (
            vec!["run", "-m", ms, "-p", "a", "--min-p", "inf"],
            "--min-p",
        ),
        (
            vec!["run", "-m", ms, "-p", "a", "--repeat-penalty", "nan"],
            "--repeat-penalty",
        ),
        (
            vec!["tokenize", "-m", ms, "-p", "a", "--stdin"],
            "exclude each other",
        ),
    ] {
        let e = one_error_line(&common::locus(&args), &format!("{args:?}"));
        assert!(e.contains(word), "{args:?}: {e}");
    }
}

/// The placement modes a test runs in.
const MODES: [&str; 7] = locus::placement::Mode::ALL_NAMES;

#[test]
fn a_thread_that_cannot_start_is_one_error_line() {
    let m = model("cli-threads");
    let ms = m.to_str().unwrap();
    // Injected: the pool's first worker fails as under a pids limit, in every mode.
    for mode in MODES {
        let out = locus_cmd()
            .args([
                "run", "-m", ms, "-p", "hi", "-n", "2", "-t", "3", "--numa", mode,
            ])
            .env("LOCUS_FAULT", "spawn")
            .output()
            .unwrap();
        let e = one_error_line(&out, mode);
        assert!(
            e.contains("cannot start worker thread") && e.contains("-t"),
            "{mode}: {e}"
        );
    }
    // membw's measuring threads, injected the same way.
    let out = locus_cmd()
        .args(["membw", "--size", "8", "--passes", "1", "-t", "2"])
        .env("LOCUS_FAULT", "spawn")
        .output()
        .unwrap();
    let e = one_error_line(&out, "membw");
    assert!(
        e.contains("cannot start a measuring thread") && e.contains("-t"),
        "{e}"
    );
    // The threads that fill a copy fall back to the one that runs: the same tokens.
    let base = common::locus(&["run", "-m", ms, "-p", "hi", "-n", "4", "--temp", "0"]);
    let out = locus_cmd()
        .args([
            "run", "-m", ms, "-p", "hi", "-n", "4", "--temp", "0", "-t", "2",
        ])
        .args(["--numa", "mirror"])
        .env("LOCUS_FAULT", "fill-spawn")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr_of(&out));
    assert_eq!(
        out.stdout, base.stdout,
        "fill threads that cannot start change nothing"
    );
    // A real limit: at most one process or thread for the user running locus, in every mode
    // and for perplexity too.
    if !common::is_root() {
        common::skip::skip("RLIMIT_NPROC test needs root (to run locus alone as nobody)");
        return;
    }
    // Root ignores RLIMIT_NPROC; nobody does not. Its inputs must be readable by nobody.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&m, std::fs::Permissions::from_mode(0o644)).unwrap();
    let text = m.with_file_name("ppl.txt");
    std::fs::write(&text, "word ".repeat(300)).unwrap();
    std::fs::set_permissions(&text, std::fs::Permissions::from_mode(0o644)).unwrap();
    let ts = text.to_str().unwrap();
    let mut runs: Vec<Vec<&str>> = MODES
        .iter()
        .map(|mode| {
            vec![
                "run", "-m", ms, "-p", "hi", "-n", "2", "-t", "4", "--numa", mode,
            ]
        })
        .collect();
    runs.push(vec![
        "perplexity",
        "-m",
        ms,
        "-f",
        ts,
        "-c",
        "64",
        "-t",
        "4",
    ]);
    for args in runs {
        let mut cmd = locus_cmd();
        cmd.args(&args);
        common::as_nobody(&mut cmd, Some(1));
        let e = one_error_line(&cmd.output().unwrap(), &format!("RLIMIT_NPROC 1: {args:?}"));
        assert!(e.contains("cannot start"), "{args:?}: {e}");
    }
}

#[test]
fn an_address_space_limit_is_one_error_line_in_every_mode() {
    let m = model("cli-ulimit");
    let ms = m.to_str().unwrap();
    // 512 MiB of address space; the KV cache and scratch of -c 2000000 need more than that
    // (but less than the machine, so the size check alone does not catch it).
    for mode in MODES {
        let mut cmd = locus_cmd();
        cmd.args([
            "run", "-m", ms, "-p", "hi", "-n", "2", "-t", "2", "-c", "2000000", "--numa", mode,
        ]);
        common::with_address_limit(&mut cmd, 512 << 20);
        let out = cmd.output().unwrap();
        let err = stderr_of(&out);
        assert!(
            !err.contains("memory allocation of"),
            "{mode}: aborted: {err}"
        );
        let e = one_error_line(&out, mode);
        assert!(
            e.contains("-c 2000000") && e.contains("out of memory"),
            "{mode}: {e}"
        );
    }
    // bench's test tokens size its cache the same way; membw's buffer is one mapping.
    let mut cmd = locus_cmd();
    cmd.args(["membw", "--size", "1024", "--passes", "1"]);
    common::with_address_limit(&mut cmd, 512 << 20);
    let e = one_error_line(&cmd.output().unwrap(), "membw");
    assert!(
        e.contains("measurement buffer") && e.contains("memory"),
        "{e}"
    );
    let mut cmd = locus_cmd();
    cmd.args(["bench", "-m", ms, "-p", "1000000", "-n", "0", "-r", "1"]);
    common::with_address_limit(&mut cmd, 512 << 20);
    let out = cmd.output().unwrap();
    let err = stderr_of(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        !err.contains("memory allocation of") && !err.contains("panicked"),
        "{err}"
    );
    let last = err.lines().last().unwrap_or("");
    assert!(
        last.starts_with("locus: error: ") && last.contains("-p 1000000"),
        "{last}"
    );
}

/// How long a wait for an event here may last: far beyond what any of them needs, so a
/// loaded machine never fails a test, while a child that hangs fails it instead of blocking
/// the run. No test here asserts on a duration: Ctrl-C is shown to act by what it cut short.
const PATIENCE: Duration = Duration::from_secs(60);

/// What a child may write after the Ctrl-C that stops it: the writer's buffer (1 MiB) flushed
/// as the temporary goes, and the piece it was writing when the signal came (at most 16 MiB:
/// a piece of a copied tensor in `quantize`, 4 MiB of a quantized slab, a row in
/// `gen-model`), with room to spare. A writer that ignored the signal would write the rest of
/// a file of hundreds of MiB (gen-model) or gigabytes (quantize to F32).
const AFTER_CTRL_C: u64 = 64 << 20;

/// Polls `ready` every 20 ms for up to [`PATIENCE`]; whether it became true.
fn wait_for(mut ready: impl FnMut() -> bool) -> bool {
    let t = Instant::now();
    while !ready() {
        if t.elapsed() > PATIENCE {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    true
}

/// Sends `sig` to `child`.
fn signal(child: &Child, sig: libc::c_int) {
    // SAFETY: signalling our own child, not yet reaped.
    assert_eq!(unsafe { libc::kill(child.id() as i32, sig) }, 0);
}

/// Stops `child` (SIGSTOP) and waits until all its threads are stopped, so that what it has
/// written can be measured before a signal lands: [`thaw`] lets it go on.
fn freeze(child: &mut Child, what: &str) {
    signal(child, libc::SIGSTOP);
    let mut exited = None;
    assert!(
        wait_for(|| {
            exited = child.try_wait().unwrap();
            exited.is_some() || common::all_stopped(child.id())
        }),
        "{what} never stopped on SIGSTOP"
    );
    assert!(
        exited.is_none(),
        "{what} ended before the Ctrl-C: {exited:?}"
    );
}

/// Resumes a child [`freeze`] stopped: a signal sent meanwhile is handled as it resumes.
fn thaw(child: &Child) {
    signal(child, libc::SIGCONT);
}

/// Waits for `child` to exit, for up to [`PATIENCE`] (then kills it and fails, naming `what`).
fn wait_exit(child: &mut Child, what: &str) -> ExitStatus {
    let mut status = None;
    if !wait_for(|| {
        status = child.try_wait().unwrap();
        status.is_some()
    }) {
        let _ = child.kill();
        let _ = child.wait();
        panic!("{what} had not exited {PATIENCE:?} after Ctrl-C");
    }
    status.unwrap()
}

/// Sends SIGINT to `child` (thawing it where it was frozen) and waits for it to exit; its exit
/// status and stderr.
fn interrupt(child: &mut Child, what: &str) -> (ExitStatus, String) {
    signal(child, libc::SIGINT);
    thaw(child);
    let status = wait_exit(child, what);
    let mut err = String::new();
    if let Some(mut e) = child.stderr.take() {
        e.read_to_string(&mut err).unwrap();
    }
    (status, err)
}

/// How far `run -v`'s timing line says the prompt got: `prompt N of M tok` where Ctrl-C cut it
/// (`(N, M)`), `prompt M tok` where it ran to the end (`(M, M)`).
fn prompt_progress(err: &str) -> (usize, usize) {
    let line = err
        .lines()
        .find(|l| l.starts_with("locus: load ") && l.contains("| prompt "))
        .unwrap_or_else(|| panic!("no timing line: {err}"));
    let prompt = line
        .split("| prompt ")
        .nth(1)
        .and_then(|r| r.split(" tok").next())
        .unwrap_or_else(|| panic!("no prompt count: {line}"));
    let n = |s: &str| -> usize {
        s.parse()
            .unwrap_or_else(|_| panic!("not a count {s:?}: {line}"))
    };
    match prompt.split_once(" of ") {
        Some((done, all)) => (n(done), n(all)),
        None => (n(prompt), n(prompt)),
    }
}

#[test]
fn ctrl_c_during_a_long_prompt_cuts_it_short() {
    // About 1,800 prompt tokens on a 100 MB model take many seconds on two cores.
    let dir = common::temp_dir("cli-sigint-prompt");
    let m = dir.join("m.gguf");
    let out = common::locus(&[
        "gen-model",
        m.to_str().unwrap(),
        "--dim",
        "1024",
        "--layers",
        "8",
        "--ffn",
        "2816",
        "--heads",
        "8",
        "--kv-heads",
        "4",
        "--vocab",
        "4096",
        "--ctx",
        "4096",
        "--type",
        "Q8_0",
    ]);
    assert!(out.status.success(), "{}", stderr_of(&out));
    let prompt = dir.join("p.txt");
    std::fs::write(&prompt, "hello world ".repeat(300)).unwrap();
    let mut child = locus_cmd()
        .args([
            "run",
            "-m",
            m.to_str().unwrap(),
            "-f",
            prompt.to_str().unwrap(),
        ])
        .args(["-n", "1", "-c", "4096", "-t", "2", "--temp", "0", "-v"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // -v's model line comes once the model is loaded and Ctrl-C is caught; the prompt follows.
    let mut err = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut seen = String::new();
    while !seen.contains("model: ") {
        let mut line = String::new();
        if std::io::BufRead::read_line(&mut err, &mut line).unwrap() == 0 {
            panic!("the run ended before its model line: {seen}");
        }
        seen.push_str(&line);
    }
    // Into the prompt (no assertion depends on how far: a Ctrl-C before its first step cuts
    // it at 0 tokens).
    std::thread::sleep(Duration::from_millis(400));
    child.stderr = Some(err.into_inner());
    let (status, err) = interrupt(&mut child, "locus run");
    assert_eq!(status.code(), Some(130), "{err}");
    // The event that shows Ctrl-C acted within a step, not after the prompt: the timing line
    // counts fewer prompt tokens than the prompt has. A Ctrl-C that waited for the prompt's
    // end would show it whole (and exit 130 only then).
    let (done, all) = prompt_progress(&err);
    assert!(
        done < all && all > 1000,
        "the prompt was not cut short ({done} of {all} tokens): {err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn ctrl_c_during_writes_leaves_no_temporary() {
    let dir = common::temp_dir("cli-sigint-write");
    let big = dir.join("big.gguf");
    let temps = |d: &Path| -> Vec<String> {
        std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.contains(".tmp-"))
            .collect()
    };
    // The temporary, opened as soon as it exists: the descriptor keeps its inode, so its size
    // can still be read once the child has removed it.
    let open_temp = |what: &str| -> std::fs::File {
        let mut file = None;
        assert!(
            wait_for(|| {
                file = temps(&dir)
                    .first()
                    .and_then(|n| std::fs::File::open(dir.join(n)).ok());
                file.is_some()
            }),
            "{what} never started writing"
        );
        file.unwrap()
    };
    let size = |f: &std::fs::File| f.metadata().unwrap().len();
    // The whole 1b model, written uninterrupted: how much each interrupted writer had left.
    let src = dir.join("src.gguf");
    let out = common::locus(&["gen-model", src.to_str().unwrap(), "--preset", "1b"]);
    assert!(out.status.success(), "{}", stderr_of(&out));
    let whole_model = std::fs::metadata(&src).unwrap().len();
    // gen-model of the 1b shape takes seconds; interrupt it once, then twice. The second time
    // the writer ignores the first Ctrl-C (LOCUS_FAULT=deaf), so the temporary can only go by
    // the second one's handler. Each signal lands while the writer is frozen, so what it had
    // written then is known exactly.
    for signals in [1, 2] {
        let what = format!("gen-model ({signals} Ctrl-C)");
        let mut child = locus_cmd()
            .args(["gen-model", big.to_str().unwrap(), "--preset", "1b"])
            .env("LOCUS_FAULT", if signals == 2 { "deaf" } else { "none" })
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // The header is written first: wait until the temporary file exists.
        let temp = open_temp(&what);
        freeze(&mut child, &what);
        let mut at_signal = size(&temp);
        assert!(
            at_signal + 2 * AFTER_CTRL_C < whole_model,
            "{what} wrote {at_signal} of {whole_model} bytes before the Ctrl-C"
        );
        if signals == 2 {
            signal(&child, libc::SIGINT);
            thaw(&child);
            // The deaf writer goes on: the file grows past what any stopping writer adds.
            assert!(
                wait_for(|| size(&temp) > at_signal + AFTER_CTRL_C),
                "the deaf writer stopped at {} bytes",
                size(&temp)
            );
            assert!(!temps(&dir).is_empty(), "its temporary is still there");
            freeze(&mut child, &what);
            at_signal = size(&temp);
        }
        let (status, err) = interrupt(&mut child, &what);
        assert_eq!(status.code(), Some(130), "{what}: {err}");
        let at_exit = size(&temp);
        assert!(
            at_exit <= at_signal + AFTER_CTRL_C,
            "{what} went on writing: {at_signal} bytes at the Ctrl-C, {at_exit} at its exit"
        );
        assert!(temps(&dir).is_empty(), "{what} left {:?}", temps(&dir));
        assert!(!big.exists(), "{what}: no half model");
    }
    // quantize to F32 (every value in 4 bytes: gigabytes), interrupted once it has started
    // writing.
    let whole_f32: u64 = {
        let f = locus::model::ModelFile::open(&src).unwrap();
        let g = f.gguf().unwrap();
        g.tensors.iter().map(|t| t.n_elements() * 4).sum()
    };
    let mut child = locus_cmd()
        .args([
            "quantize",
            src.to_str().unwrap(),
            big.to_str().unwrap(),
            "F32",
        ])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let temp = open_temp("quantize");
    freeze(&mut child, "quantize");
    let at_signal = size(&temp);
    assert!(
        at_signal + AFTER_CTRL_C < whole_f32,
        "quantize wrote {at_signal} of {whole_f32} bytes before the Ctrl-C"
    );
    let (status, err) = interrupt(&mut child, "quantize");
    assert_eq!(status.code(), Some(130), "quantize: {err}");
    // Ctrl-C acted within a piece: a quantize that finished the file first would have written
    // gigabytes more.
    let at_exit = size(&temp);
    assert!(
        at_exit <= at_signal + AFTER_CTRL_C,
        "quantize went on writing: {at_signal} bytes at the Ctrl-C, {at_exit} at its exit"
    );
    assert!(
        temps(&dir).is_empty() && !big.exists(),
        "quantize left {:?}",
        temps(&dir)
    );
    // The 1b model is half a gigabyte.
    let _ = std::fs::remove_dir_all(&dir);
}

/// Runs `args` with stdout (or stderr) on `/dev/full`, where every write fails with ENOSPC.
fn with_full(args: &[&str], stream: &str) -> std::process::Output {
    let full = || {
        Stdio::from(
            std::fs::OpenOptions::new()
                .write(true)
                .open("/dev/full")
                .unwrap(),
        )
    };
    let mut c = locus_cmd();
    c.args(args);
    if stream == "stdout" {
        c.stdout(full()).stderr(Stdio::piped());
    } else {
        c.stdout(Stdio::piped()).stderr(full());
    }
    c.output().unwrap()
}

#[test]
fn every_command_survives_failing_output() {
    let m = model("cli-output");
    let ms = m.to_str().unwrap();
    let dir = m.parent().unwrap();
    let text = dir.join("t.txt");
    std::fs::write(&text, "word ".repeat(400)).unwrap();
    let (ts, out1, out2) = (
        text.to_str().unwrap().to_string(),
        dir.join("o1.gguf"),
        dir.join("o2.gguf"),
    );
    let commands: Vec<Vec<&str>> = vec![
        vec!["run", "-m", ms, "-p", "hi", "-n", "3"],
        vec!["perplexity", "-m", ms, "-f", &ts, "-c", "64"],
        vec!["tokenize", "-m", ms, "-p", "hello"],
        vec!["quantize", ms, out1.to_str().unwrap(), "F16"],
        vec!["gen-model", out2.to_str().unwrap()],
        vec!["bench", "-m", ms, "-p", "8", "-n", "2", "-r", "1"],
        vec!["membw", "--size", "8", "--passes", "1"],
        vec!["topo"],
        vec!["audit", "-m", ms],
        vec!["--help"],
        vec!["run", "--help"],
        vec!["--version"],
    ];
    // Which commands print a result on stdout (and so must report its loss).
    let prints = [
        true, true, true, false, false, true, true, true, true, true, true, true,
    ];
    for (args, &prints) in commands.iter().zip(&prints) {
        // stdout failing: a lost result is one error line naming stdout (after any progress
        // lines), exit 2; a command with nothing on stdout is not bothered.
        let out = with_full(args, "stdout");
        let err = stderr_of(&out);
        assert!(!err.contains("panicked"), "{args:?} stdout: {err}");
        if prints {
            assert_eq!(
                out.status.code(),
                Some(2),
                "{args:?} with stdout on /dev/full: {err}"
            );
            let errors: Vec<&str> = err
                .lines()
                .filter(|l| l.starts_with("locus: error: "))
                .collect();
            let last = err.lines().last().unwrap_or("");
            assert!(
                errors.len() == 1
                    && last == errors[0]
                    && last.contains("stdout")
                    && last.contains("No space"),
                "{args:?}: {err}"
            );
        } else {
            assert_eq!(out.status.code(), Some(0), "{args:?}: {err}");
        }
        // stderr failing: diagnostics are dropped, the command does its work.
        let out = with_full(args, "stderr");
        assert_eq!(
            out.status.code(),
            Some(0),
            "{args:?} with stderr on /dev/full"
        );
    }
}

#[test]
fn a_bench_arm_that_dies_is_explained() {
    let m = model("cli-arm");
    for (sig, word) in [(libc::SIGKILL, "out-of-memory"), (libc::SIGSEGV, "SIGSEGV")] {
        let out = locus_cmd()
            .args([
                "bench",
                "-m",
                m.to_str().unwrap(),
                "-p",
                "8",
                "-n",
                "2",
                "-r",
                "1",
            ])
            .env("LOCUS_FAULT", format!("arm-signal:{sig}"))
            .output()
            .unwrap();
        let err = stderr_of(&out);
        assert_eq!(out.status.code(), Some(2), "{err}");
        let last = err.lines().last().unwrap_or("");
        assert!(
            last.starts_with("locus: error: ") && last.contains(word),
            "{last}"
        );
        assert!(
            !err.contains("RUST_BACKTRACE") && !err.contains("panicked"),
            "{err}"
        );
    }
}

/// `quantize IN IN TYPE`, or an output that is the input through a hard or symbolic link:
/// refused (exit 2), the input untouched.
#[test]
fn quantize_refuses_to_write_over_its_input() {
    let m = model("same-file");
    let dir = m.parent().unwrap().to_path_buf();
    let before = std::fs::read(&m).unwrap();
    let hard = dir.join("same-file-hard.gguf");
    let soft = dir.join("same-file-soft.gguf");
    let _ = std::fs::remove_file(&hard);
    let _ = std::fs::remove_file(&soft);
    std::fs::hard_link(&m, &hard).unwrap();
    std::os::unix::fs::symlink(&m, &soft).unwrap();
    for out in [&m, &hard, &soft] {
        let o = locus_os(&[
            std::ffi::OsStr::new("quantize"),
            m.as_os_str(),
            out.as_os_str(),
            std::ffi::OsStr::new("Q8_0"),
        ]);
        let e = one_error_line(&o, "quantize onto its input");
        assert!(e.contains("is the input"), "{e}");
        assert!(std::fs::read(&m).unwrap() == before, "the input changed");
    }
    let _ = std::fs::remove_file(&hard);
    let _ = std::fs::remove_file(&soft);
}

/// Small promises of the command line: a perplexity error is its line with no blank line
/// before it; `serve -c 1` is refused; `run` refuses the sampling values the server refuses.
#[test]
fn small_promises_of_the_command_line() {
    let m = model("small-promises");
    let text = m.parent().unwrap().join("small-promises.txt");
    std::fs::write(&text, "one two three four five six seven eight nine ten").unwrap();
    let o = locus_os(&[
        OsString::from("perplexity"),
        "-m".into(),
        m.clone().into_os_string(),
        "-f".into(),
        text.clone().into_os_string(),
        "-c".into(),
        "2".into(),
    ]);
    let err = stderr_of(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.starts_with("locus: error: "), "{err:?}");
    for c in ["1", "7"] {
        let o = common::locus(&["serve", "-m", "x.gguf", "-c", c]);
        let e = one_error_line(&o, "serve -c");
        assert!(e.contains("-c") && e.contains("at least 8"), "{e}");
    }
    for (flag, v) in [("--temp", "-1"), ("--temp", "101"), ("--top-k", "-5")] {
        let o = common::locus(&["run", "-m", "x.gguf", "-p", "hi", flag, v]);
        let e = one_error_line(&o, flag);
        assert!(e.contains(flag), "{e}");
    }
}
