//! Faults from outside the process, run against the real binary: the model file shrinking
//! while mapped, the context filling up, writes that fail half-way, and a long generation
//! whose memory must stay flat and whose output must not depend on anything but the seed.
//! (A closed stdout — `locus run … | head -c 10` — is tested in tests/signals.rs.)

mod common;

use common::locus_cmd;

use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use locus::kernels::GgmlType;
use locus::model::synth::{synth_model, SynthSpec};
use locus::model::{Config, ModelFile};

fn stderr_of(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn tiny_model(dir: &Path, name: &str) -> PathBuf {
    let p = dir.join(name);
    synth_model(&SynthSpec::tiny(GgmlType::Q8_0))
        .write_atomic(&p)
        .unwrap();
    p
}

/// Kills `pid` with SIGKILL unless `done` says the test finished first (a hung child must
/// fail the test, not hang it).
fn watchdog(pid: u32, limit: Duration) -> mpsc::Sender<()> {
    let (tx, rx) = mpsc::channel::<()>();
    std::thread::spawn(move || {
        if rx.recv_timeout(limit) == Err(mpsc::RecvTimeoutError::Timeout) {
            // SAFETY: signalling our own child, which has not been reaped yet (the test reaps
            // it only after telling this thread it is done).
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
        }
    });
    tx
}

/// Waits for `pid` with wait4(2); returns the exit status and the child's peak RSS in bytes.
fn wait_with_peak_rss(pid: u32) -> (std::process::ExitStatus, u64) {
    use std::os::unix::process::ExitStatusExt;
    let mut status: libc::c_int = 0;
    // SAFETY: an all-zero rusage is a valid value to be overwritten.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `status` and `usage` are valid, writable out-parameters; `pid` is our child and
    // has not been reaped by anyone else (std's `Child::wait` is not called for it).
    let r = unsafe { libc::wait4(pid as libc::pid_t, &mut status, 0, &mut usage) };
    assert_eq!(r, pid as libc::pid_t, "wait4 failed");
    (
        std::process::ExitStatus::from_raw(status),
        usage.ru_maxrss as u64 * 1024,
    )
}

/// `locus: load … | prompt P tok, … | decode D tok, …` → (P, D).
fn timing_counts(stderr: &str) -> (usize, usize) {
    let line = stderr
        .lines()
        .find(|l| l.contains("| decode "))
        .unwrap_or_else(|| panic!("no timing line in: {stderr}"));
    let count_after = |word: &str| -> usize {
        let rest = &line[line.find(word).expect("timing field") + word.len()..];
        rest.split_whitespace().next().unwrap().parse().unwrap()
    };
    (count_after("prompt "), count_after("decode "))
}

// ---------------------------------------------------------------------------------------------
// The model file shrinks while mapped.

/// Truncating the model while `locus run` has it mapped makes the next read of the weights
/// fault (SIGBUS). The user sees one error line and exit 2, not "Bus error (core dumped)".
/// `--numa off` keeps the weights in the file's mapping (copying modes would not fault).
#[test]
fn model_truncated_while_running_exits_2_with_a_message() {
    let dir = common::temp_dir("faults-sigbus");
    let model = tiny_model(&dir, "m.gguf");
    let mut child = locus_cmd()
        .args(["run", "-m", model.to_str().unwrap(), "-p", "hello"])
        .args(["-n", "200000", "-c", "200010", "--ignore-eos"])
        .args(["--temp", "0.9", "--seed", "5", "-t", "1", "--numa", "off"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let done = watchdog(child.id(), Duration::from_secs(120));
    // Wait until tokens flow: the weights are mapped and being read.
    let mut out = child.stdout.take().unwrap();
    let mut buf = [0u8; 256];
    let mut got = 0;
    while got < 16 {
        let n = out.read(&mut buf).unwrap();
        assert!(n > 0, "locus ended before generating");
        got += n;
    }
    std::fs::OpenOptions::new()
        .write(true)
        .open(&model)
        .unwrap()
        .set_len(4096)
        .unwrap();
    let t = Instant::now();
    let mut rest = Vec::new();
    out.read_to_end(&mut rest).unwrap();
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    let _ = done.send(());
    let status = child.wait().unwrap();
    eprintln!("ended {:?} after the truncation", t.elapsed());
    assert_eq!(status.code(), Some(2), "status {status:?}, stderr: {err}");
    assert!(
        err.contains("locus: error: the model file changed while it was being read"),
        "stderr: {err}"
    );
    assert!(!err.contains("panicked"), "stderr: {err}");
    let _ = std::fs::remove_dir_all(dir);
}

// ---------------------------------------------------------------------------------------------
// The context fills.

/// `-c` small and `-n` large: generation fills the context, says so, and exits 0. The last
/// token is sampled from the logits of position n_ctx - 1, so n_ctx - prompt + 1 come out.
#[test]
fn full_context_stops_with_a_message_and_exit_0() {
    let dir = common::temp_dir("faults-ctx");
    let model = tiny_model(&dir, "m.gguf");
    for extra in [&["-n", "1000"][..], &[][..]] {
        let mut args = vec!["run", "-m", model.to_str().unwrap(), "-p", "hello world"];
        args.extend_from_slice(&["-c", "24", "--temp", "0", "--ignore-eos"]);
        args.extend_from_slice(extra);
        let out = common::locus(&args);
        let err = stderr_of(&out);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {err}");
        assert!(
            err.contains("the context of 24 tokens is full"),
            "{args:?}: {err}"
        );
        assert!(!err.contains("panicked"), "{err}");
        let (prompt, decoded) = timing_counts(&err);
        assert_eq!(decoded, 24 - prompt + 1, "{args:?}: {err}");
        assert!(!out.stdout.is_empty(), "generated text is missing");
    }
    let _ = std::fs::remove_dir_all(dir);
}

// ---------------------------------------------------------------------------------------------
// Nothing lost: failed writes keep the previous file; reading never changes the model.

/// Files named like the writer's temporaries (`.<name>.tmp-<pid>`) left in `dir`.
fn temporaries(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".tmp-"))
        .collect()
}

/// Runs locus with a file-size limit of `limit` bytes and SIGXFSZ ignored, so a write past
/// the limit fails with EFBIG as a full disk or quota would.
fn locus_with_fsize_limit(args: &[&str], limit: u64) -> std::process::Output {
    let mut c = locus_cmd();
    c.args(args);
    common::with_limits(&mut c, &[(libc::RLIMIT_FSIZE, limit)]);
    c.output().unwrap()
}

fn assert_one_error_line(out: &std::process::Output, what: &str) -> String {
    let err = stderr_of(out);
    assert_eq!(out.status.code(), Some(2), "{what}: {err}");
    assert!(!err.contains("panicked"), "{what}: {err}");
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "{what}: {err}");
    assert!(lines[0].starts_with("locus: error: "), "{what}: {err}");
    lines[0].to_string()
}

/// gen-model and quantize write through a temporary file and a rename: a write that fails
/// (here: EFBIG from a file-size limit) leaves the previous file byte for byte, and no
/// temporary behind.
#[test]
fn failed_writes_keep_the_previous_file_and_leave_no_temporary() {
    let dir = common::temp_dir("faults-atomic");
    let target = dir.join("out.gguf");
    let t = target.to_str().unwrap();
    let out = common::locus(&["gen-model", t, "--type", "Q8_0", "--seed", "1"]);
    assert!(out.status.success(), "{}", stderr_of(&out));
    let before = std::fs::read(&target).unwrap();
    let limit = before.len() as u64 / 4;

    let out = locus_with_fsize_limit(&["gen-model", t, "--type", "F32", "--seed", "2"], limit);
    let e = assert_one_error_line(&out, "gen-model over the size limit");
    assert!(e.contains("cannot write"), "{e}");
    assert_eq!(
        std::fs::read(&target).unwrap(),
        before,
        "gen-model changed the file"
    );
    assert_eq!(
        temporaries(&dir),
        Vec::<String>::new(),
        "gen-model left a temporary"
    );

    let src = dir.join("src.gguf");
    let out = common::locus(&["gen-model", src.to_str().unwrap(), "--type", "F32"]);
    assert!(out.status.success(), "{}", stderr_of(&out));
    let out = locus_with_fsize_limit(&["quantize", src.to_str().unwrap(), t, "F16"], limit);
    assert_one_error_line(&out, "quantize over the size limit");
    assert_eq!(
        std::fs::read(&target).unwrap(),
        before,
        "quantize changed the file"
    );
    assert_eq!(
        temporaries(&dir),
        Vec::<String>::new(),
        "quantize left a temporary"
    );

    // Without the limit the same commands replace the file (the failures above were the
    // limit's doing).
    let out = common::locus(&["quantize", src.to_str().unwrap(), t, "F16"]);
    assert!(out.status.success(), "{}", stderr_of(&out));
    assert_ne!(std::fs::read(&target).unwrap(), before);
    let _ = std::fs::remove_dir_all(dir);
}

/// A destination that is a directory: the rename fails, the directory and its contents stay,
/// and the temporary is removed.
#[test]
fn writing_onto_a_directory_fails_cleanly() {
    let dir = common::temp_dir("faults-dirdest");
    let dest = dir.join("out.gguf");
    std::fs::create_dir(&dest).unwrap();
    std::fs::write(dest.join("keep.txt"), b"keep me").unwrap();
    let out = common::locus(&["gen-model", dest.to_str().unwrap()]);
    let e = assert_one_error_line(&out, "gen-model onto a directory");
    assert!(e.contains("out.gguf"), "{e}");
    assert!(dest.is_dir());
    assert_eq!(std::fs::read(dest.join("keep.txt")).unwrap(), b"keep me");
    assert_eq!(temporaries(&dir), Vec::<String>::new());
    let _ = std::fs::remove_dir_all(dir);
}

/// Running, tokenizing and quantizing read the model and never write it: its bytes and its
/// modification time are unchanged afterwards.
#[test]
fn reading_a_model_leaves_its_bytes_and_mtime_unchanged() {
    let dir = common::temp_dir("faults-readonly");
    let model = tiny_model(&dir, "m.gguf");
    let m = model.to_str().unwrap();
    let bytes = std::fs::read(&model).unwrap();
    let meta = std::fs::metadata(&model).unwrap();
    let (mtime, mtime_ns) = (meta.mtime(), meta.mtime_nsec());
    let q = dir.join("q.gguf");
    for args in [
        &[
            "run", "-m", m, "-p", "hello", "-n", "8", "--temp", "0.7", "--seed", "1",
        ][..],
        &["tokenize", "-m", m, "-p", "hello world", "--ids"],
        &["quantize", m, q.to_str().unwrap(), "F16"],
    ] {
        let out = common::locus(args);
        assert!(out.status.success(), "{args:?}: {}", stderr_of(&out));
        let after = std::fs::metadata(&model).unwrap();
        assert_eq!(
            (after.mtime(), after.mtime_nsec()),
            (mtime, mtime_ns),
            "{args:?} touched the model's mtime"
        );
        assert!(
            std::fs::read(&model).unwrap() == bytes,
            "{args:?} changed the model"
        );
    }
    let _ = std::fs::remove_dir_all(dir);
}

// ---------------------------------------------------------------------------------------------
// A long run: flat memory, reproducible output.

/// Bytes of an f16 KV cache for `n_ctx` positions: keys and values, every layer.
fn kv_cache_bytes(c: &Config, n_ctx: usize) -> u64 {
    (2 * c.n_layer * n_ctx * c.kv_dim() * 2) as u64
}

/// Runs `locus run` to completion; returns stdout, stderr and the peak RSS.
#[allow(
    clippy::zombie_processes,
    reason = "reaped by wait4 in wait_with_peak_rss"
)]
fn run_measured(args: &[&str]) -> (Vec<u8>, String, u64) {
    let mut child = locus_cmd()
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let done = watchdog(child.id(), Duration::from_secs(300));
    let mut err_pipe = child.stderr.take().unwrap();
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        err_pipe.read_to_string(&mut s).unwrap();
        s
    });
    let mut out = Vec::new();
    child.stdout.take().unwrap().read_to_end(&mut out).unwrap();
    let err = err_reader.join().unwrap();
    let _ = done.send(());
    let (status, peak) = wait_with_peak_rss(child.id());
    assert_eq!(status.code(), Some(0), "{args:?}: {err}");
    (out, err, peak)
}

/// 8,192 tokens with `-c 8192` in one process: peak RSS stays within the model, the KV cache
/// and a fixed allowance, and the same seed gives the same text.
#[test]
fn long_generation_has_flat_memory_and_reproducible_output() {
    const N_CTX: usize = 8192;
    let dir = common::temp_dir("faults-long");
    let model = dir.join("tiny.gguf");
    let m = model.to_str().unwrap();
    let out = common::locus(&["gen-model", m, "--preset", "tiny", "--type", "Q8_0"]);
    assert!(out.status.success(), "{}", stderr_of(&out));
    let file_size = std::fs::metadata(&model).unwrap().len();
    let config = {
        let f = ModelFile::open(&model).unwrap();
        let g = f.gguf().unwrap();
        Config::from_gguf(&g).unwrap()
    };
    let kv = kv_cache_bytes(&config, N_CTX);
    let ctx = N_CTX.to_string();
    // `--numa off`: one set of weights, read from the file's mapping, on any host (a mirror
    // on a multi-node host would hold a copy per node).
    let long: Vec<&str> = vec![
        "run",
        "-m",
        m,
        "-p",
        "a",
        "-n",
        &ctx,
        "-c",
        &ctx,
        "--ignore-eos",
        "--temp",
        "0.8",
        "--seed",
        "1234",
        "-t",
        "1",
        "--numa",
        "off",
    ];
    let t = Instant::now();
    let (text1, err1, peak1) = run_measured(&long);
    let one_run = t.elapsed();
    let (prompt, decoded) = timing_counts(&err1);
    assert_eq!(
        decoded,
        N_CTX.min(N_CTX - prompt + 1),
        "the run stopped early: {err1}"
    );
    let (text2, _, peak2) = run_measured(&long);
    assert!(
        text1 == text2,
        "two runs with --seed 1234 differ (first difference at byte {})",
        text1
            .iter()
            .zip(&text2)
            .position(|(a, b)| a != b)
            .unwrap_or(text1.len().min(text2.len()))
    );
    // Fixed allowance: the binary and its libraries, the tokenizer's tables, the scratch
    // buffers of one batch and the allocator's own overhead — none of which grow with the
    // number of tokens. 64 MiB is several times what they take for the tiny model.
    const ALLOWANCE: u64 = 64 << 20;
    let bound = file_size + kv + ALLOWANCE;
    // A short run of the same model (same binary, tables and scratch) shows the rest: the long
    // run may exceed it only by the KV cache it fills, plus 4 MiB of slack for the generated
    // tokens and the allocator (a leak of 1 KiB per token would show).
    let short: Vec<&str> = vec![
        "run", "-m", m, "-p", "a", "-n", "1", "-c", "64", "-t", "1", "--numa", "off",
    ];
    let (_, _, base) = run_measured(&short);
    let flat = base + kv + (4 << 20);
    eprintln!(
        "long run: {decoded} tokens in {one_run:?}; peak RSS {peak1} / {peak2} bytes; \
         model {file_size}, KV {kv}, short run {base}; bounds {bound} (model + KV + allowance), \
         {flat} (short run + KV + slack)"
    );
    for peak in [peak1, peak2] {
        assert!(
            peak <= bound,
            "peak RSS {peak} > model + KV + allowance = {bound}"
        );
        assert!(
            peak <= flat,
            "peak RSS {peak} > short run + KV + slack = {flat}"
        );
    }
    let _ = std::fs::remove_dir_all(dir);
}

// ---------------------------------------------------------------------------------------------
// stdout that cannot be written.

/// A stdout that fails with an error other than EPIPE (here /dev/full: ENOSPC) is an error the
/// user must hear about: one line naming stdout, exit 2, no panic — not silent success (what
/// `run` did) nor a panic from `print!` (what `tokenize` and `topo` did).
#[test]
fn stdout_write_errors_are_reported() {
    let dir = common::temp_dir("faults-devfull");
    let model = tiny_model(&dir, "m.gguf");
    let m = model.to_str().unwrap();
    for args in [
        &["run", "-m", m, "-p", "hello", "-n", "16", "--temp", "0"][..],
        &["tokenize", "-m", m, "-p", "hello world", "--ids"],
        &["topo"],
    ] {
        let full = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .unwrap();
        let out = locus_cmd()
            .args(args)
            .stdout(full)
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        let err = stderr_of(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        let last = err.lines().rfind(|l| !l.trim().is_empty()).unwrap_or("");
        assert!(
            last.starts_with("locus: error: ") && last.contains("stdout"),
            "{args:?}: {err}"
        );
    }
    let _ = std::fs::remove_dir_all(dir);
}

// ---------------------------------------------------------------------------------------------
// Hostile prompt files.

/// A prompt file that is not UTF-8 names the file and the first bad byte; a missing one names
/// the file.
#[test]
fn bad_prompt_files_give_one_error_line() {
    let dir = common::temp_dir("faults-prompt");
    let model = tiny_model(&dir, "m.gguf");
    let m = model.to_str().unwrap();
    let bad = dir.join("bad.txt");
    std::fs::write(&bad, b"hello \xff\xfe world").unwrap();
    let out = common::locus(&["run", "-m", m, "-f", bad.to_str().unwrap(), "-n", "4"]);
    let e = assert_one_error_line(&out, "non-UTF-8 prompt file");
    assert!(
        e.contains("bad.txt") && e.contains("UTF-8") && e.contains("offset 6"),
        "{e}"
    );
    let missing = dir.join("missing.txt");
    let out = common::locus(&["run", "-m", m, "-f", missing.to_str().unwrap()]);
    let e = assert_one_error_line(&out, "missing prompt file");
    assert!(e.contains("missing.txt"), "{e}");
    let _ = std::fs::remove_dir_all(dir);
}

/// `general.alignment` stored as an i32 (GGUF says u32): once read as 64 and written by the
/// writer (which pads by u32/u64 values only) as 32, so `quantize` wrote a file it could not
/// read back. Now the reader refuses it: one error line, and no output file.
#[test]
fn quantize_refuses_an_alignment_type_it_could_not_write_back() {
    use locus::model::gguf_write::MetaValue;
    let dir = common::temp_dir("faults-align");
    let mut w = synth_model(&SynthSpec::tiny(GgmlType::F32));
    w.set("general.alignment", MetaValue::U32(64));
    let mut bytes = w.to_bytes();
    let key = b"general.alignment";
    let ty = bytes.windows(key.len()).position(|x| x == key).unwrap() + key.len();
    assert_eq!(bytes[ty], 4, "the value type after the key is u32");
    bytes[ty] = 5; // i32, same width: the file is otherwise intact
    let input = dir.join("in.gguf");
    std::fs::write(&input, &bytes).unwrap();
    let output = dir.join("out.gguf");
    let out = common::locus(&[
        "quantize",
        input.to_str().unwrap(),
        output.to_str().unwrap(),
        "Q8_0",
    ]);
    let e = assert_one_error_line(&out, "quantize with an i32 alignment");
    assert!(e.contains("general.alignment") && e.contains("i32"), "{e}");
    assert!(!output.exists(), "quantize wrote {}", output.display());
    let _ = std::fs::remove_dir_all(dir);
}

/// `general.alignment` = 2^40 (a legal power of two) on a file without tensors: `quantize`
/// refuses it instead of padding its output to a terabyte (it aborted on the allocation).
#[test]
fn quantize_refuses_a_huge_alignment() {
    let dir = common::temp_dir("faults-huge-align");
    let mut b = b"GGUF".to_vec();
    b.extend_from_slice(&3u32.to_le_bytes());
    b.extend_from_slice(&0u64.to_le_bytes()); // tensors
    b.extend_from_slice(&1u64.to_le_bytes()); // metadata keys
    let key = b"general.alignment";
    b.extend_from_slice(&(key.len() as u64).to_le_bytes());
    b.extend_from_slice(key);
    b.extend_from_slice(&10u32.to_le_bytes()); // u64
    b.extend_from_slice(&(1u64 << 40).to_le_bytes());
    let input = dir.join("in.gguf");
    std::fs::write(&input, &b).unwrap();
    let output = dir.join("out.gguf");
    let out = common::locus(&[
        "quantize",
        input.to_str().unwrap(),
        output.to_str().unwrap(),
        "Q8_0",
    ]);
    let e = assert_one_error_line(&out, "quantize with alignment 2^40");
    assert!(e.contains("general.alignment"), "{e}");
    assert!(!output.exists());
    assert_eq!(temporaries(&dir), Vec::<String>::new());
    let _ = std::fs::remove_dir_all(dir);
}
