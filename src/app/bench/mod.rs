//! `locus bench`: prompt processing and decode speed in llama-bench's shape, across placement
//! modes. For every model × thread count × `--numa` mode (an *arm*): `pp<P>` evaluates P random
//! tokens from an empty cache, `tg<N>` generates N tokens one at a time; each repeated `-r`
//! times after a warm-up run (as llama-bench does, so page faults are not timed), reported as
//! mean ± sd tokens/s.
//!
//! Every arm runs in a fresh process (this binary, `locus bench --arm …`, which prints one JSON
//! line), so no arm inherits another's page cache, placed copies, heap or pinned threads. Arms
//! run in one fixed order (model, then threads, then mode), each with the same thread count and
//! the same tests. Besides speed, an arm reports its load time, where its weights are resident
//! per node and its locality (the same [`audit`](crate::placement::audit::audit) as
//! `locus audit`), how much of the model file the page cache held when it started (`--cold`
//! releases it first), and a roofline: decode
//! tok/s as a share of what the read bandwidth of the arm's nodes allows
//! (`membw` GB/s ÷ weight bytes read per token), measured in the parent right after each round
//! of the arm, so the measurement never competes with an arm but sees the host as the arm did.
//!
//! The parts: this file holds the options, the public entry points ([`run()`], [`bench()`])
//! and the parent's orchestration of the arms (spawning each child, pooling its rounds);
//! `arm.rs` is what one child measures and the JSON line it prints; `roofline.rs` measures the
//! read bandwidth the arms' nodes allow; `report.rs` renders the results (markdown, JSON, CSV,
//! SVG). Both JSON texts go through the crate's codec, [`crate::json`].

mod arm;
mod report;
mod roofline;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;

use super::AppError;
use crate::json::Json;
use crate::placement::{Mode, Options, Pin};
use crate::sys::topology::{NumaBalancing, Topology};

pub use arm::{measure_arm, run_arm, ArmOptions, ArmReport};
pub use report::{
    render_csv, render_json, render_markdown, render_notes, render_svg, spread_notes,
};
pub use roofline::BwReading;

/// How the results are printed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// llama-bench's markdown table, then notes.
    Markdown,
    /// One JSON array of rows.
    Json,
    /// A header line and one line per row.
    Csv,
}

/// Options of `locus bench`.
#[derive(Clone, Debug)]
pub struct BenchOptions {
    pub models: Vec<PathBuf>,
    pub n_prompt: usize,
    pub n_gen: usize,
    pub reps: usize,
    pub threads: Vec<usize>,
    /// The placement modes to compare, in order (`--numa LIST|all`).
    pub modes: Vec<Mode>,
    /// Placement flags every arm shares (`--pin`, `--poll`, `--strict`, …); each arm sets its
    /// own mode and thread count.
    pub numa: Options,
    /// Release the model file from the page cache before every arm (else read it in first).
    pub cold: bool,
    /// Run the whole list of arms this many times, interleaved; samples are pooled.
    pub rounds: usize,
    pub format: Format,
    /// Draw the arms' decode speeds here.
    pub svg: Option<PathBuf>,
}

/// `--numa all`: every mode that is not an alias of another (auto picks one of them).
pub const ALL_MODES: [Mode; 6] = [
    Mode::Off,
    Mode::Distribute,
    Mode::Interleave,
    Mode::Isolate,
    Mode::Mirror,
    Mode::Shard,
];

/// Parses `--numa`'s value: `all` or a comma-separated list of modes.
pub fn parse_modes(v: &str) -> Result<Vec<Mode>, String> {
    if v == "all" {
        return Ok(ALL_MODES.to_vec());
    }
    let mut out = Vec::new();
    for s in v.split(',').filter(|s| !s.is_empty()) {
        let m = Mode::parse(s).ok_or_else(|| {
            format!("--numa: unknown mode '{s}' (off, distribute, interleave, isolate, mirror, shard, auto, or all)")
        })?;
        if !out.contains(&m) {
            out.push(m);
        }
    }
    if out.is_empty() {
        return Err("--numa: no mode given".into());
    }
    Ok(out)
}

/// Mean of the samples (0 for none).
pub fn mean(x: &[f64]) -> f64 {
    x.iter().sum::<f64>() / x.len().max(1) as f64
}

/// Sample standard deviation (0 for fewer than two samples).
pub fn sd(x: &[f64]) -> f64 {
    if x.len() < 2 {
        return 0.0;
    }
    let m = mean(x);
    (x.iter().map(|v| (v - m) * (v - m)).sum::<f64>() / (x.len() - 1) as f64).sqrt()
}

pub(super) fn file_name(path: &std::path::Path) -> String {
    path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    )
}

/// Bytes by node as a JSON object keyed by node id (`{"0":…,"1":…}`).
fn node_map(m: &BTreeMap<u32, u64>) -> Json {
    Json::Obj(
        m.iter()
            .map(|(n, b)| (n.to_string(), (*b).into()))
            .collect(),
    )
}

/// The host settings that change placement, read once by the parent.
#[derive(Clone, Debug)]
pub struct HostState {
    pub nodes: usize,
    pub numa_balancing: String,
    pub balancing_on: bool,
    pub thp: String,
}

/// One arm's place in the run and its outcome.
#[derive(Clone, Debug)]
pub struct ArmResult {
    pub model: PathBuf,
    pub mode: Mode,
    pub threads: usize,
    /// The child's report (samples pooled over the rounds; placement facts from the first
    /// round), or why the arm failed (one line).
    pub outcome: Result<ArmReport, String>,
    /// Load time of every round, ms.
    pub loads: Vec<f64>,
    /// Each round's copy-building rate (GB/s), where the arm copies.
    pub place_rates: Vec<f64>,
    /// Read bandwidth available to the arm's threads (sum over its nodes), GB/s, read right
    /// after each round whose measurement succeeded.
    bw_samples: Vec<f64>,
}

impl ArmResult {
    /// Read bandwidth available to the arm's threads, GB/s: the mean of its readings.
    pub fn bw_gb_per_s(&self) -> Option<f64> {
        (!self.bw_samples.is_empty()).then(|| mean(&self.bw_samples))
    }

    /// Decode tok/s the arm's bandwidth allows: GB/s ÷ weight bytes per token.
    pub fn roofline_tps(&self) -> Option<f64> {
        let r = self.outcome.as_ref().ok()?;
        let bw = self.bw_gb_per_s()?;
        (r.read_bytes_per_token > 0).then(|| bw * 1e9 / r.read_bytes_per_token as f64)
    }

    /// Decode tok/s as a share of the roofline.
    pub fn roofline_share(&self) -> Option<f64> {
        let r = self.outcome.as_ref().ok()?;
        let roof = self.roofline_tps()?;
        (!r.tg.is_empty() && roof > 0.0).then(|| mean(&r.tg) / roof)
    }
}

/// Everything a bench run produced.
#[derive(Clone, Debug)]
pub struct BenchReport {
    pub host: HostState,
    pub arms: Vec<ArmResult>,
    pub bandwidth: Vec<BwReading>,
    pub cold: bool,
    pub rounds: usize,
    pub reps: usize,
    pub n_prompt: usize,
    pub n_gen: usize,
}

/// The child's command line for one arm.
fn arm_args(
    o: &BenchOptions,
    model: &std::path::Path,
    mode: Mode,
    threads: usize,
) -> Vec<std::ffi::OsString> {
    let mut v: Vec<String> = vec![
        "bench".into(),
        "--arm".into(),
        "-p".into(),
        o.n_prompt.to_string(),
        "-n".into(),
        o.n_gen.to_string(),
        "-r".into(),
        o.reps.to_string(),
        "-t".into(),
        threads.to_string(),
        "--numa".into(),
        mode.name().into(),
        "--pin".into(),
        match o.numa.pin {
            Pin::Node => "node",
            Pin::Core => "core",
        }
        .into(),
        "--poll".into(),
        o.numa.poll.to_string(),
    ];
    if let Some(n) = o.numa.node {
        v.push("--numa-node".into());
        v.push(n.0.to_string());
    }
    if o.numa.strict {
        v.push("--strict".into());
    }
    if o.numa.hugepages {
        v.push("--hugepages".into());
    }
    if o.cold {
        v.push("--cold".into());
    }
    // The model path as the OS holds it (any bytes), last.
    let mut v: Vec<std::ffi::OsString> = v.into_iter().map(Into::into).collect();
    v.push("-m".into());
    v.push(model.as_os_str().to_owned());
    v
}

/// Why a child arm failed, in words a user can act on: its own error line where it printed
/// one; a signal named with what usually sends it; a panic's message (a bug to report); never
/// just the last line of a backtrace note.
fn arm_failure(status: std::process::ExitStatus, stderr: &str) -> String {
    use std::os::unix::process::ExitStatusExt;
    let lines: Vec<&str> = stderr
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let error = lines
        .iter()
        .rev()
        .find_map(|l| l.strip_prefix("locus: error: "));
    if let Some(sig) = status.signal() {
        let what = match sig {
            libc::SIGKILL => "was killed (SIGKILL; the kernel's out-of-memory killer sends it \
                 when memory runs out: try fewer threads, a smaller model or fewer copies with \
                 --numa shard)"
                .to_string(),
            libc::SIGSEGV | libc::SIGBUS | libc::SIGILL | libc::SIGFPE => format!(
                "crashed (signal {sig}, {}; a bug in locus: please report it with the command)",
                signal_name(sig)
            ),
            libc::SIGABRT => "aborted (SIGABRT: out of memory, or a bug in locus; please \
                 report it with the command)"
                .to_string(),
            libc::SIGINT | libc::SIGTERM | libc::SIGHUP => {
                format!("was stopped by {}", signal_name(sig))
            }
            _ => format!("was ended by signal {sig} ({})", signal_name(sig)),
        };
        return match error {
            Some(e) => format!("the arm {what}; it said: {e}"),
            None => format!("the arm {what}"),
        };
    }
    if let Some(e) = error {
        return e.to_string();
    }
    // A panic prints "thread '…' panicked at FILE:LINE:" and then its message.
    if let Some(i) = lines.iter().position(|l| l.contains("panicked at")) {
        let msg = lines.get(i + 1).copied().unwrap_or("");
        return format!(
            "the arm panicked ({msg}); a bug in locus: please report it with the command"
        );
    }
    match status.code() {
        Some(c) => format!("the arm exited with status {c} without saying why"),
        None => format!("the arm ended with {status}"),
    }
}

fn signal_name(sig: i32) -> &'static str {
    match sig {
        libc::SIGKILL => "SIGKILL",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGBUS => "SIGBUS",
        libc::SIGILL => "SIGILL",
        libc::SIGFPE => "SIGFPE",
        libc::SIGABRT => "SIGABRT",
        libc::SIGINT => "SIGINT",
        libc::SIGTERM => "SIGTERM",
        libc::SIGHUP => "SIGHUP",
        _ => "another signal",
    }
}

/// Runs one arm in a child process; its warnings are printed once, tagged with the arm.
fn spawn_arm(
    o: &BenchOptions,
    model: &std::path::Path,
    mode: Mode,
    threads: usize,
) -> Result<ArmReport, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this executable: {e}"))?;
    let out = Command::new(&exe)
        .args(arm_args(o, model, mode, threads))
        .output()
        .map_err(|e| format!("cannot start {}: {e}", exe.display()))?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    let tag = format!("{} {} t={}", file_name(model), mode, threads);
    if !out.status.success() {
        return Err(arm_failure(out.status, &stderr));
    }
    for line in stderr.lines().filter(|l| !l.trim().is_empty()) {
        // The report carries the warnings; anything else the child said goes through as is.
        if !line.starts_with("locus: warning: ") {
            crate::diagln!("locus: [{tag}] {line}");
        }
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .ok_or("the arm printed no report")?;
    let r = ArmReport::from_json(line).map_err(|e| format!("unreadable arm report: {e}"))?;
    let mut seen = std::collections::BTreeSet::new();
    for w in &r.warnings {
        if seen.insert(w) {
            crate::diagln!("locus: warning: [{tag}] {w}");
        }
    }
    Ok(r)
}

/// Reads `path` through once, so its pages are in the page cache (a warm start).
fn read_through(path: &std::path::Path) -> std::io::Result<()> {
    use std::io::Read as _;
    let mut f = std::fs::File::open(path)?;
    let mut buf = vec![0u8; 1 << 20];
    while f.read(&mut buf)? > 0 {}
    Ok(())
}

/// Runs every arm (`rounds` times, round-robin), measuring the bandwidth of its nodes right
/// after each round; prints nothing but progress and warnings.
pub fn bench(o: &BenchOptions) -> Result<BenchReport, AppError> {
    if o.reps == 0 || o.threads.is_empty() || o.modes.is_empty() || o.models.is_empty() {
        return Err(AppError::Usage(
            "bench: need at least one model, thread count, mode and repetition".into(),
        ));
    }
    for m in &o.models {
        if !m.is_file() {
            return Err(AppError::Usage(format!(
                "{}: no such model file",
                m.display()
            )));
        }
    }
    let topo = Topology::detect()
        .map_err(|e| AppError::Usage(format!("cannot read the topology: {e}")))?;
    let host = HostState {
        nodes: topo.nodes.len(),
        numa_balancing: topo.numa_balancing.to_string(),
        balancing_on: matches!(topo.numa_balancing, NumaBalancing::On { .. }),
        thp: topo.thp.to_string(),
    };
    if host.balancing_on {
        crate::diagln!(
            "locus: warning: bench: kernel NUMA balancing is on{}: it may migrate pages during the arms (echo 0 > /proc/sys/kernel/numa_balancing)",
            if host.nodes == 1 { " (no effect on this one-node host)" } else { "" }
        );
    }
    let mut arms = Vec::new();
    for model in &o.models {
        for &t in &o.threads {
            for &mode in &o.modes {
                arms.push(ArmResult {
                    model: model.clone(),
                    mode,
                    threads: t,
                    outcome: Err("not run".into()),
                    loads: Vec::new(),
                    place_rates: Vec::new(),
                    bw_samples: Vec::new(),
                });
            }
        }
    }
    let rounds = o.rounds.max(1);
    let total = arms.len();
    let mut meter = roofline::Meter::default();
    // Round-robin (A B C A B C …): slow drift of the host spreads over every arm alike.
    for round in 0..rounds {
        for (i, a) in arms.iter_mut().enumerate() {
            if round > 0 && a.outcome.is_err() {
                continue;
            }
            crate::diagln!(
                "locus: bench: arm {}/{total}{}: {} --numa {} -t {}",
                i + 1,
                if rounds > 1 {
                    format!(" (round {}/{rounds})", round + 1)
                } else {
                    String::new()
                },
                file_name(&a.model),
                a.mode,
                a.threads
            );
            if !o.cold {
                // Copy modes drop the file from the page cache once placed; without this the
                // arm after one would start cold and the next warm.
                if let Err(e) = read_through(&a.model) {
                    crate::diagln!("locus: warning: bench: {}: cannot read the model file into the page cache: {e}", a.model.display());
                }
            }
            let outcome = spawn_arm(o, &a.model, a.mode, a.threads);
            if let (Ok(r), true) = (&outcome, o.n_gen > 0) {
                // The roofline of this round: the bandwidth of the arm's nodes now, right after
                // it (never during it), as the host is at this moment.
                a.bw_samples.extend(meter.measure(&topo, &r.slots));
            }
            match (outcome, &mut a.outcome) {
                (Err(e), _) => {
                    crate::diagln!("locus: bench: arm failed: {e}");
                    a.outcome = Err(e);
                }
                (Ok(r), Ok(prev)) if round > 0 => {
                    a.loads.push(r.load_ms);
                    a.place_rates.extend(r.place_gb_per_s);
                    prev.pp.extend(r.pp);
                    prev.tg.extend(r.tg);
                    arm::add_counts(&mut prev.pp_experts, &r.pp_experts);
                    arm::add_counts(&mut prev.tg_experts, &r.tg_experts);
                    prev.warnings.extend(r.warnings);
                }
                (Ok(r), _) => {
                    a.loads.push(r.load_ms);
                    a.place_rates.extend(r.place_gb_per_s);
                    a.outcome = Ok(r);
                }
            }
        }
    }
    for a in arms.iter_mut() {
        if let Ok(r) = &mut a.outcome {
            r.load_ms = mean(&a.loads);
            r.place_gb_per_s = (!a.place_rates.is_empty()).then(|| mean(&a.place_rates));
            r.warnings.sort();
            r.warnings.dedup();
        }
    }
    Ok(BenchReport {
        host,
        arms,
        bandwidth: meter.readings(),
        cold: o.cold,
        rounds,
        reps: o.reps,
        n_prompt: o.n_prompt,
        n_gen: o.n_gen,
    })
}

/// `locus bench`: runs the arms and prints the table (or JSON/CSV); writes `--svg`. Fails
/// (after printing) when any arm failed.
pub fn run(o: &BenchOptions, command: &str) -> Result<BenchReport, AppError> {
    if o.svg.is_some() && o.n_gen == 0 {
        return Err(AppError::Usage(
            "bench: --svg draws decode speed; it needs -n above 0".into(),
        ));
    }
    if let Some(path) = &o.svg {
        // Before the arms run: a destination that cannot be written fails now, not after them.
        crate::sys::fs::check_destination(path)?;
    }
    let rep = bench(o)?;
    super::write_stdout(&match o.format {
        Format::Markdown => render_markdown(&rep),
        Format::Json => format!("{}\n", render_json(&rep)),
        Format::Csv => render_csv(&rep),
    })?;
    if let Some(path) = &o.svg {
        super::svg::write(path, &render_svg(&rep, command))?;
        crate::diagln!("locus: bench: wrote {}", path.display());
    }
    let failed: Vec<&ArmResult> = rep.arms.iter().filter(|a| a.outcome.is_err()).collect();
    if let Some(first) = failed.first() {
        return Err(AppError::Usage(format!(
            "bench: {} of {} arms failed; first: {} --numa {} -t {}: {}",
            failed.len(),
            rep.arms.len(),
            file_name(&first.model),
            first.mode,
            first.threads,
            first.outcome.as_ref().err().cloned().unwrap_or_default()
        )));
    }
    Ok(rep)
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::ExitStatusExt;
    use std::process::ExitStatus;

    /// A child's death is told in words a user can act on, never as a backtrace note.
    #[test]
    fn arm_failures_say_what_happened() {
        let killed = arm_failure(ExitStatus::from_raw(libc::SIGKILL), "");
        assert!(
            killed.contains("killed") && killed.contains("out-of-memory"),
            "{killed}"
        );
        let crashed = arm_failure(ExitStatus::from_raw(libc::SIGSEGV), "");
        assert!(
            crashed.contains("SIGSEGV") && crashed.contains("report"),
            "{crashed}"
        );
        let exit2 = ExitStatus::from_raw(2 << 8);
        let said = arm_failure(
            exit2,
            "locus: warning: x\nlocus: error: model.gguf: truncated\n",
        );
        assert_eq!(said, "model.gguf: truncated");
        let panic = "thread 'main' (7) panicked at src/x.rs:1:2:\nindex out of bounds\nnote: run \
                     with `RUST_BACKTRACE=1` environment variable to display a backtrace\n";
        let p = arm_failure(ExitStatus::from_raw(101 << 8), panic);
        assert!(
            p.contains("index out of bounds") && !p.contains("RUST_BACKTRACE"),
            "{p}"
        );
        let silent = arm_failure(ExitStatus::from_raw(3 << 8), "");
        assert!(silent.contains("status 3"), "{silent}");
    }
    use super::*;

    #[test]
    fn modes_parse() {
        assert_eq!(parse_modes("all").unwrap(), ALL_MODES.to_vec());
        assert_eq!(
            parse_modes("mirror,off,mirror").unwrap(),
            vec![Mode::Mirror, Mode::Off]
        );
        assert!(parse_modes("mirror,bogus").is_err());
        assert!(parse_modes(",").is_err());
    }

    #[test]
    fn stats() {
        assert_eq!(mean(&[]), 0.0);
        assert_eq!(sd(&[3.0]), 0.0);
        assert!((sd(&[1.0, 3.0]) - std::f64::consts::SQRT_2).abs() < 1e-12);
    }
}
