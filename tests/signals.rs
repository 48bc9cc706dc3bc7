//! Signals: SIGINT during generation prints the timing line and exits 130; a closed stdout
//! (`locus run … | head -c 10`) ends the process quietly, with no panic message.

mod common;

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use locus::kernels::GgmlType;
use locus::model::synth::{synth_model, SynthSpec};

fn long_run(dir: &std::path::Path) -> Command {
    let model = dir.join("tiny.gguf");
    synth_model(&SynthSpec::tiny(GgmlType::Q8_0))
        .write_atomic(&model)
        .unwrap();
    let mut c = Command::new(env!("CARGO_BIN_EXE_locus"));
    c.args([
        "run",
        "-m",
        model.to_str().unwrap(),
        "-p",
        "hello",
        "-n",
        "200000",
        "-c",
        "200010",
    ]);
    c.args(["--temp", "0.9", "--seed", "5", "--ignore-eos", "-t", "1"]);
    c
}

#[test]
fn sigint_prints_timings_and_exits_130() {
    let dir = common::temp_dir("sigint");
    let mut child = long_run(&dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Wait until text is flowing, then interrupt.
    let mut out = child.stdout.take().unwrap();
    let mut buf = [0u8; 64];
    let mut got = 0;
    let t = Instant::now();
    while got < 16 && t.elapsed() < Duration::from_secs(30) {
        got += out.read(&mut buf).unwrap();
    }
    assert!(got >= 16, "no output before the interrupt");
    // SAFETY: sending a signal to our own child process.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGINT) }, 0);
    let mut rest = Vec::new();
    out.read_to_end(&mut rest).unwrap();
    let status = child.wait().unwrap();
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert_eq!(status.code(), Some(130), "stderr: {err}");
    assert!(
        err.contains("decode") && err.contains("tok/s"),
        "timing line missing: {err}"
    );
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn closed_stdout_ends_quietly() {
    let dir = common::temp_dir("sigpipe");
    let mut child = long_run(&dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = child.stdout.take().unwrap();
    let mut ten = [0u8; 10];
    out.read_exact(&mut ten).unwrap();
    drop(out); // like `| head -c 10`
    let status = child.wait().unwrap();
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(
        !err.contains("panicked") && !err.contains("error"),
        "stderr: {err}"
    );
    use std::os::unix::process::ExitStatusExt;
    assert!(
        status.success() || status.signal() == Some(libc::SIGPIPE),
        "status {status:?}"
    );
}
