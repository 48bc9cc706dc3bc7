//! Hostile input, round two: the files locus writes and the inputs it reads.
//!
//! - Every writer (`quantize`, `gen-model`, `bench --svg`) refuses a destination that is not a
//!   regular file (a device node, a FIFO, a socket, a directory, a symlink to one of them, a
//!   symlink loop) with one error line, and writes *through* a symlink to a regular file
//!   (replacing its target atomically, keeping the link). After every attempt the test's device
//!   node, FIFO, socket and symlinks are checked to be exactly what they were.
//! - A directory without write permission fails cleanly, leaving nothing.
//! - Inputs without end (`/dev/zero`, standard input) are capped with a clear error; a FIFO
//!   without a writer makes `run -f` say what it waits for, and `-m FIFO` is refused at once.
//! - Messages that used to mislead say what is wrong.

mod common;

use std::ffi::CString;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{locus_cmd, locus_os, one_error_line};

/// A directory holding one of each kind of file a writer must not replace, plus a regular
/// file behind a symlink (which it must write through).
struct Specials {
    dir: PathBuf,
    _listener: std::os::unix::net::UnixListener,
    /// A null device node (`mknod c 1 3`), where the tests may make one (root, CAP_MKNOD).
    dev: Option<PathBuf>,
}

impl Specials {
    fn new(tag: &str) -> Specials {
        let dir = common::temp_dir(tag);
        let mkfifo = |p: &Path| {
            let c = CString::new(p.as_os_str().as_bytes()).unwrap();
            // SAFETY: `c` is a NUL-terminated path that outlives the call.
            assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        };
        mkfifo(&dir.join("fifo"));
        let listener = std::os::unix::net::UnixListener::bind(dir.join("sock")).unwrap();
        std::fs::create_dir(dir.join("subdir")).unwrap();
        std::os::unix::fs::symlink("fifo", dir.join("link-to-fifo")).unwrap();
        std::os::unix::fs::symlink("loop-b", dir.join("loop-a")).unwrap();
        std::os::unix::fs::symlink("loop-a", dir.join("loop-b")).unwrap();
        std::fs::write(dir.join("real.gguf"), b"old").unwrap();
        std::os::unix::fs::symlink("real.gguf", dir.join("link-to-file")).unwrap();
        std::os::unix::fs::symlink("fresh.gguf", dir.join("dangling")).unwrap();
        let dev = dir.join("null-device");
        let c = CString::new(dev.as_os_str().as_bytes()).unwrap();
        // SAFETY: `c` is a NUL-terminated path that outlives the call.
        let made =
            unsafe { libc::mknod(c.as_ptr(), libc::S_IFCHR | 0o666, libc::makedev(1, 3)) } == 0;
        if !made {
            common::skip::skip("cannot make a device node here (needs root and CAP_MKNOD)");
        }
        Specials {
            dir,
            _listener: listener,
            dev: made.then_some(dev),
        }
    }

    /// The destinations no writer may replace, with a word of the error naming each.
    fn refused(&self) -> Vec<(PathBuf, &'static str)> {
        let d = &self.dir;
        let mut v = vec![
            (d.join("fifo"), "FIFO"),
            (d.join("sock"), "socket"),
            (d.join("subdir"), "directory"),
            (d.join("link-to-fifo"), "FIFO"),
            (d.join("loop-a"), "symbolic links"),
        ];
        if let Some(dev) = &self.dev {
            v.push((dev.clone(), "character device"));
        }
        v
    }

    /// Every special file's kind, device number and link target: what must never change.
    fn snapshot(&self) -> Vec<String> {
        let mut v = Vec::new();
        for e in std::fs::read_dir(&self.dir).unwrap() {
            let p = e.unwrap().path();
            let m = std::fs::symlink_metadata(&p).unwrap();
            let t = m.file_type();
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            if t.is_symlink() {
                v.push(format!(
                    "{name} -> {}",
                    std::fs::read_link(&p).unwrap().display()
                ));
            } else if t.is_fifo() || t.is_socket() || t.is_dir() || t.is_char_device() {
                v.push(format!("{name} {:o} rdev {}", m.mode(), m.rdev()));
            }
        }
        v.sort();
        v
    }

    /// Fails if a special file changed or a temporary file was left behind.
    fn check(&self, before: &[String], what: &str) {
        assert_eq!(self.snapshot(), before, "{what} changed a special file");
        let temps: Vec<String> = std::fs::read_dir(&self.dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.contains(".tmp-"))
            .collect();
        assert!(temps.is_empty(), "{what} left {temps:?}");
    }
}

/// A small generated model to read (and to quantize).
fn model(dir: &Path) -> PathBuf {
    common::write_synth(
        &format!("{}-model", dir.file_name().unwrap().to_string_lossy()),
        3,
        [300, 64, 1, 96, 4, 2],
    )
}

/// The writer commands, each writing to `dest`.
fn writers(model: &Path, dest: &Path) -> Vec<(&'static str, Vec<std::ffi::OsString>)> {
    let (m, d) = (model.as_os_str().to_owned(), dest.as_os_str().to_owned());
    let s = |x: &str| std::ffi::OsString::from(x);
    vec![
        (
            "quantize",
            vec![s("quantize"), m.clone(), d.clone(), s("Q8_0")],
        ),
        ("gen-model", vec![s("gen-model"), d.clone()]),
        (
            "bench --svg",
            vec![
                s("bench"),
                s("-m"),
                m,
                s("-p"),
                s("0"),
                s("-n"),
                s("2"),
                s("-r"),
                s("1"),
                s("--svg"),
                d,
            ],
        ),
    ]
}

#[test]
fn writers_never_replace_a_device_fifo_socket_directory_or_link_loop() {
    let sp = Specials::new("hostile-dest");
    let m = model(&sp.dir);
    let before = sp.snapshot();
    for (dest, word) in sp.refused() {
        for (name, args) in writers(&m, &dest) {
            let what = format!("{name} onto {}", dest.display());
            let e = one_error_line(&locus_os(&args), &what);
            assert!(e.contains(word), "{what}: {e}");
            sp.check(&before, &what);
        }
    }
}

#[test]
fn writers_write_through_symlinks_and_keep_them() {
    let sp = Specials::new("hostile-links");
    let m = model(&sp.dir);
    let before = sp.snapshot();
    for (i, (name, args)) in writers(&m, &sp.dir.join("link-to-file"))
        .into_iter()
        .enumerate()
    {
        std::fs::write(sp.dir.join("real.gguf"), b"old").unwrap();
        let out = locus_os(&args);
        assert!(
            out.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let written = std::fs::read(sp.dir.join("real.gguf")).unwrap();
        assert_ne!(written, b"old", "{name} wrote through the link");
        let magic: &[u8] = if i == 2 { b"<svg" } else { b"GGUF" };
        assert!(
            written.windows(4).any(|w| w == magic),
            "{name}: the new file"
        );
        sp.check(&before, name);
    }
    // A dangling link gets its target created.
    let out = locus_os(&writers(&m, &sp.dir.join("dangling"))[0].1);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(sp.dir.join("fresh.gguf").is_file());
    let after: Vec<String> = sp.snapshot();
    assert_eq!(after, before, "the links are still links");
}

#[test]
fn a_directory_without_write_permission_fails_cleanly() {
    let dir = common::temp_dir("hostile-readonly");
    let m = model(&dir);
    let ro = dir.join("ro");
    std::fs::create_dir(&ro).unwrap();
    let dest = ro.join("out.gguf");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o555)).unwrap();
    // The model must be readable by whoever runs locus.
    std::fs::set_permissions(&m, std::fs::Permissions::from_mode(0o644)).unwrap();
    for (name, args) in writers(&m, &dest) {
        let mut cmd = locus_cmd();
        cmd.args(&args);
        if common::is_root() {
            // Root writes anywhere; as nobody the directory's permissions apply.
            common::as_nobody(&mut cmd, None);
        }
        let out = cmd.output().unwrap();
        let e = one_error_line(&out, name);
        assert!(e.contains("Permission denied"), "{name}: {e}");
        assert_eq!(
            std::fs::read_dir(&ro).unwrap().count(),
            0,
            "{name} left a file"
        );
    }
}

#[test]
fn inputs_without_end_are_capped_with_a_clear_error() {
    let dir = common::temp_dir("hostile-zero");
    let m = model(&dir);
    let ms = m.to_str().unwrap();
    for args in [
        vec!["run", "-m", ms, "-f", "/dev/zero", "-n", "1"],
        vec!["run", "-m", ms, "-c", "64", "-f", "/dev/zero", "-n", "1"],
        vec!["tokenize", "-m", ms, "-f", "/dev/zero"],
        vec!["perplexity", "-m", ms, "-f", "/dev/zero"],
    ] {
        let e = one_error_line(&common::locus(&args), &format!("{args:?}"));
        assert!(
            e.contains("/dev/zero") && e.contains("longer than"),
            "{args:?}: {e}"
        );
    }
    // The run's cap follows the context: -c 64 tokens of at most N bytes.
    let e = one_error_line(
        &common::locus(&["run", "-m", ms, "-c", "64", "-f", "/dev/zero"]),
        "run -c 64",
    );
    assert!(e.contains("-c 64"), "{e}");
    let out = locus_cmd()
        .args(["tokenize", "-m", ms, "--stdin"])
        .stdin(std::fs::File::open("/dev/zero").unwrap())
        .output()
        .unwrap();
    let e = one_error_line(&out, "tokenize --stdin < /dev/zero");
    assert!(
        e.contains("standard input") && e.contains("longer than"),
        "{e}"
    );
}

#[test]
fn a_fifo_without_a_writer_is_named_and_a_fifo_model_is_refused() {
    let sp = Specials::new("hostile-fifo");
    let m = model(&sp.dir);
    let fifo = sp.dir.join("fifo");
    let e = one_error_line(
        &locus_os(&[
            "run".as_ref(),
            "-m".as_ref(),
            fifo.as_os_str(),
            "-p".as_ref(),
            "hi".as_ref(),
        ]),
        "-m FIFO",
    );
    assert!(e.contains("FIFO"), "{e}");
    let mut child = locus_cmd()
        .arg("run")
        .arg("-m")
        .arg(&m)
        .arg("-f")
        .arg(&fifo)
        .args(["-n", "2", "--temp", "0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    // A line on stderr (after any placement warnings) says what the run waits for.
    let mut line = String::new();
    let t = Instant::now();
    while line.is_empty() || line.starts_with("locus: warning: ") {
        line.clear();
        assert!(err.read_line(&mut line).unwrap() > 0, "stderr ended");
    }
    assert!(
        line.contains("FIFO") && line.contains("waiting for a writer"),
        "{line}"
    );
    assert!(t.elapsed() < Duration::from_secs(30));
    // A writer arrives: the prompt is read and the run ends normally.
    std::fs::OpenOptions::new()
        .write(true)
        .open(&fifo)
        .unwrap()
        .write_all(b"hello")
        .unwrap();
    let status = child.wait().unwrap();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut err, &mut rest).unwrap();
    assert!(status.success(), "{rest}");
    assert!(rest.contains("prompt"), "{rest}");
}

#[test]
fn messages_say_what_is_wrong() {
    let dir = common::temp_dir("hostile-messages");
    let m = model(&dir);
    let ms = m.to_str().unwrap();
    // perplexity needs one window of -c tokens, not two.
    let text = dir.join("short.txt");
    std::fs::write(&text, "a few words only").unwrap();
    let e = one_error_line(
        &common::locus(&[
            "perplexity",
            "-m",
            ms,
            "-f",
            text.to_str().unwrap(),
            "-c",
            "64",
        ]),
        "short text",
    );
    assert!(
        e.contains("one window of -c = 64") && !e.contains("2 ×"),
        "{e}"
    );
    // A type quantize cannot write here (IQ2_XS: not made yet, or not whole blocks of 256 in
    // these 64-wide rows, and --output-tensor-type has no fallback) is a type, not a metadata
    // key.
    let out = dir.join("q.gguf");
    let e = one_error_line(
        &common::locus(&[
            "quantize",
            "--output-tensor-type",
            "iq2_xs",
            ms,
            out.to_str().unwrap(),
            "Q4_0",
        ]),
        "quantize --output-tensor-type IQ2_XS",
    );
    assert!(
        e.contains("IQ2_XS") && e.contains("output.weight") && !e.contains("metadata"),
        "{e}"
    );
    assert!(!out.exists());
    // A device is no model, and it is not "truncated" either.
    let e = one_error_line(
        &common::locus(&["run", "-m", "/dev/zero", "-p", "x"]),
        "-m /dev/zero",
    );
    assert!(
        e.contains("character device") && !e.contains("truncated"),
        "{e}"
    );
}
