//! Rendering a [`BenchReport`]: llama-bench's markdown table with the placement columns and
//! notes under it (host state, bandwidth, spread between arms), the same rows as JSON or CSV,
//! and the `--svg` chart of decode speeds.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::{file_name, mean, node_map, sd, ArmReport, ArmResult, BenchReport};
use crate::json::Json;

fn mib(b: u64) -> f64 {
    b as f64 / (1u64 << 20) as f64
}

fn pct(x: f64) -> String {
    format!("{:.1}%", x * 100.0)
}

/// `off` or `off (auto)` when the mode in effect differs from the one asked for.
fn mode_label(r: &ArmReport) -> String {
    if r.mode == r.requested {
        r.mode.clone()
    } else {
        format!("{} ({})", r.mode, r.requested)
    }
}

fn resident_label(r: &ArmReport) -> String {
    let mut v: Vec<String> = r
        .bytes_by_node
        .iter()
        .map(|(n, b)| format!("N{n} {:.1} MiB", mib(*b)))
        .collect();
    if r.unknown_bytes > 0 {
        v.push(format!("? {:.1} MiB", mib(r.unknown_bytes)));
    }
    if v.is_empty() {
        "-".into()
    } else {
        v.join(", ")
    }
}

fn cached_label(r: &ArmReport) -> String {
    let share = match r.cached_bytes {
        Some(b) if r.file_bytes > 0 => format!("{:.0}%", b as f64 * 100.0 / r.file_bytes as f64),
        _ => "n/a".into(),
    };
    if r.cold {
        format!("{share} (cold)")
    } else {
        share
    }
}

/// The table's rows: one per arm and test (`pp`, `tg`), or one for a failed arm.
struct Row<'a> {
    arm: &'a ArmResult,
    /// `pp<N>` / `tg<N>` and its samples; `None` for a failed arm.
    test: Option<(String, &'a [f64])>,
}

fn rows(rep: &BenchReport) -> Vec<Row<'_>> {
    let mut out = Vec::new();
    for a in &rep.arms {
        match &a.outcome {
            Ok(r) => {
                for (kind, n, s) in [("pp", rep.n_prompt, &r.pp), ("tg", rep.n_gen, &r.tg)] {
                    if n > 0 {
                        out.push(Row {
                            arm: a,
                            test: Some((format!("{kind}{n}"), s.as_slice())),
                        });
                    }
                }
            }
            Err(_) => out.push(Row { arm: a, test: None }),
        }
    }
    out
}

/// The load column: its time, and where the arm copies the weights how fast it built them.
fn load_label(r: &ArmReport) -> String {
    match r.place_gb_per_s {
        Some(g) => format!("{:.0} ms, placed at {g:.2} GB/s", r.load_ms),
        None => format!("{:.0} ms", r.load_ms),
    }
}

/// llama-bench's markdown table with the placement columns, then notes: host state,
/// bandwidth, and how far apart the arms are against their run-to-run spread.
pub fn render_markdown(rep: &BenchReport) -> String {
    let mut s = String::from(
        "| model | size | params | kernels | numa | threads | test | t/s | load | cached | locality | resident | roofline |\n",
    );
    s.push_str("| --- | ---: | ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: |\n");
    for row in rows(rep) {
        let a = row.arm;
        match (&a.outcome, &row.test) {
            (Ok(r), Some((test, samples))) => {
                let roof = if test.starts_with("tg") {
                    match (a.roofline_share(), a.roofline_tps()) {
                        (Some(sh), Some(t)) => format!("{:.0}% of {t:.0} t/s", sh * 100.0),
                        _ => "n/a".into(),
                    }
                } else {
                    "-".into()
                };
                let _ = writeln!(
                    s,
                    "| {} | {:.2} MiB | {:.2} M | {} | {} | {} | {} | {:.2} ± {:.2} | {} | {} | {} | {} | {} |",
                    r.model,
                    mib(r.size_bytes),
                    r.params as f64 / 1e6,
                    r.kernels,
                    mode_label(r),
                    r.threads,
                    test,
                    mean(samples),
                    sd(samples),
                    load_label(r),
                    cached_label(r),
                    r.locality.map_or("n/a".into(), pct),
                    resident_label(r),
                    roof
                );
            }
            (Err(e), _) => {
                let _ = writeln!(
                    s,
                    "| {} | | | | {} | {} | - | failed: {} | | | | | |",
                    file_name(&a.model),
                    a.mode,
                    a.threads,
                    e.replace('|', "/")
                );
            }
            (Ok(_), None) => {}
        }
    }
    s.push('\n');
    s.push_str(&render_notes(rep));
    s
}

/// The notes under the markdown table (JSON and CSV carry the same facts as fields).
pub fn render_notes(rep: &BenchReport) -> String {
    let mut s = String::new();
    let h = &rep.host;
    let _ = writeln!(
        s,
        "host: {} NUMA node{}, numa_balancing {}{}, THP {}; page cache: {}",
        h.nodes,
        if h.nodes == 1 { "" } else { "s" },
        h.numa_balancing,
        if h.balancing_on {
            " (warning: may migrate pages)"
        } else {
            ""
        },
        h.thp,
        if rep.cold {
            "cold (--cold released the model file before every arm)"
        } else {
            "warm (read through before every arm)"
        }
    );
    let _ = writeln!(
        s,
        "arms: in order model, threads, mode; {} round{} (round-robin, a fresh process per arm and round) of {} repetition{} after a warm-up",
        rep.rounds,
        if rep.rounds == 1 { "" } else { "s" },
        rep.reps,
        if rep.reps == 1 { "" } else { "s" }
    );
    for b in &rep.bandwidth {
        let _ = writeln!(
            s,
            "membw: node {}, {} thread{}: {:.2} GB/s{}",
            b.node,
            b.threads,
            if b.threads == 1 { "" } else { "s" },
            b.gb_per_s,
            if b.count > 1 {
                format!(
                    " (mean of {} readings, one after each arm round using it: {:.2}–{:.2})",
                    b.count, b.min, b.max
                )
            } else {
                String::new()
            }
        );
    }
    if !rep.bandwidth.is_empty() {
        s.push_str("roofline: decode t/s as a share of (read GB/s of the arm's nodes ÷ weight bytes read per token), the GB/s measured right after each round of the arm\n");
    }
    for line in spread_notes(rep) {
        s.push_str(&line);
        s.push('\n');
    }
    s
}

/// For each model × threads with several modes: how far apart the arms' decode means are,
/// against the largest run-to-run sd among them.
pub fn spread_notes(rep: &BenchReport) -> Vec<String> {
    let mut groups: BTreeMap<(String, usize), Vec<&ArmReport>> = BTreeMap::new();
    let mut order = Vec::new();
    for a in &rep.arms {
        if let Ok(r) = &a.outcome {
            let key = (r.model.clone(), a.threads);
            if !groups.contains_key(&key) {
                order.push(key.clone());
            }
            groups.entry(key).or_default().push(r);
        }
    }
    let mut out = Vec::new();
    for key in order {
        let g = &groups[&key];
        for decode in [true, false] {
            let kind = if decode { "decode" } else { "prefill" };
            let stats: Vec<(String, f64, f64)> = g
                .iter()
                .filter_map(|r| {
                    let x = if decode { &r.tg } else { &r.pp };
                    (!x.is_empty()).then(|| (r.mode.clone(), mean(x), sd(x)))
                })
                .collect();
            if stats.len() < 2 {
                continue;
            }
            let lo = stats.iter().min_by(|a, b| a.1.total_cmp(&b.1)).cloned();
            let hi = stats.iter().max_by(|a, b| a.1.total_cmp(&b.1)).cloned();
            let (Some(lo), Some(hi)) = (lo, hi) else {
                continue;
            };
            let grand = stats.iter().map(|x| x.1).sum::<f64>() / stats.len() as f64;
            if grand <= 0.0 {
                continue;
            }
            let span = (hi.1 - lo.1) / grand;
            let noise = stats
                .iter()
                .map(|x| if x.1 > 0.0 { x.2 / x.1 } else { 0.0 })
                .fold(0.0, f64::max);
            let mut verdict = if span <= 2.0 * noise {
                "within run-to-run noise (span ≤ 2 × sd)".to_string()
            } else {
                "larger than run-to-run noise (span > 2 × sd)".to_string()
            };
            if rep.rounds < 2 {
                verdict.push_str(
                    "; sd is within one process only, --rounds 3 adds process-to-process spread",
                );
            }
            out.push(format!(
                "{} t={} {kind}: arms span {} of the mean ({} {:.2} .. {} {:.2} t/s); run-to-run sd up to {}: {verdict}",
                key.0,
                key.1,
                pct(span),
                lo.0,
                lo.1,
                hi.0,
                hi.1,
                pct(noise)
            ));
        }
    }
    out
}

/// Field values of one row, shared by JSON and CSV.
struct Fields {
    model: String,
    size_bytes: Option<u64>,
    params: Option<u64>,
    kernels: Option<String>,
    numa: String,
    numa_requested: String,
    threads: usize,
    test: Option<String>,
    mean_tps: Option<f64>,
    sd_tps: Option<f64>,
    samples: Vec<f64>,
    load_ms: Option<f64>,
    place_gb_per_s: Option<f64>,
    cold: bool,
    cached_bytes: Option<u64>,
    file_bytes: Option<u64>,
    locality: Option<f64>,
    bytes_by_node: BTreeMap<u32, u64>,
    read_bytes_per_token: Option<u64>,
    /// A mixture of experts' statistics for this test: per layer, how many tokens chose each
    /// expert over the timed runs.
    expert_counts: Option<Vec<Vec<u64>>>,
    bw_gb_per_s: Option<f64>,
    roofline_tps: Option<f64>,
    roofline_share: Option<f64>,
    error: Option<String>,
}

/// A test's expert statistics as one row per layer; `None` for a dense model.
fn expert_counts(r: &ArmReport, tg: bool) -> Option<Vec<Vec<u64>>> {
    let flat = if tg { &r.tg_experts } else { &r.pp_experts };
    (r.n_expert > 0).then(|| flat.chunks(r.n_expert).map(<[u64]>::to_vec).collect())
}

fn fields(rep: &BenchReport) -> Vec<Fields> {
    rows(rep)
        .into_iter()
        .map(|row| {
            let a = row.arm;
            match (&a.outcome, row.test) {
                (Ok(r), Some((test, samples))) => {
                    let tg = test.starts_with("tg");
                    Fields {
                        model: r.model.clone(),
                        size_bytes: Some(r.size_bytes),
                        params: Some(r.params),
                        kernels: Some(r.kernels.clone()),
                        numa: r.mode.clone(),
                        numa_requested: r.requested.clone(),
                        threads: r.threads,
                        test: Some(test),
                        mean_tps: Some(mean(samples)),
                        sd_tps: Some(sd(samples)),
                        samples: samples.to_vec(),
                        load_ms: Some(r.load_ms),
                        place_gb_per_s: r.place_gb_per_s,
                        cold: r.cold,
                        cached_bytes: r.cached_bytes,
                        file_bytes: Some(r.file_bytes),
                        locality: r.locality,
                        bytes_by_node: r.bytes_by_node.clone(),
                        read_bytes_per_token: Some(r.read_bytes_per_token),
                        expert_counts: expert_counts(r, tg),
                        bw_gb_per_s: a.bw_gb_per_s(),
                        roofline_tps: if tg { a.roofline_tps() } else { None },
                        roofline_share: if tg { a.roofline_share() } else { None },
                        error: None,
                    }
                }
                (outcome, _) => Fields {
                    model: file_name(&a.model),
                    size_bytes: None,
                    params: None,
                    kernels: None,
                    numa: a.mode.name().into(),
                    numa_requested: a.mode.name().into(),
                    threads: a.threads,
                    test: None,
                    mean_tps: None,
                    sd_tps: None,
                    samples: Vec::new(),
                    load_ms: None,
                    place_gb_per_s: None,
                    cold: rep.cold,
                    cached_bytes: None,
                    file_bytes: None,
                    locality: None,
                    bytes_by_node: BTreeMap::new(),
                    read_bytes_per_token: None,
                    expert_counts: None,
                    bw_gb_per_s: None,
                    roofline_tps: None,
                    roofline_share: None,
                    error: Some(outcome.as_ref().err().cloned().unwrap_or_default()),
                },
            }
        })
        .collect()
}

/// A JSON array with one object per row (llama-bench's `-o json` shape, placement added).
pub fn render_json(rep: &BenchReport) -> String {
    let rows: Json = fields(rep)
        .into_iter()
        .map(|f| {
            let expert_counts = f.expert_counts.as_ref().map(|layers| {
                layers
                    .iter()
                    .map(|l| l.iter().copied().collect::<Json>())
                    .collect::<Json>()
            });
            Json::obj([
                ("model", Json::str(f.model)),
                ("size_bytes", f.size_bytes.into()),
                ("params", f.params.into()),
                ("kernels", f.kernels.map(Json::str).into()),
                ("numa", Json::str(f.numa)),
                ("numa_requested", Json::str(f.numa_requested)),
                ("threads", f.threads.into()),
                ("test", f.test.map(Json::str).into()),
                ("mean_tps", f.mean_tps.into()),
                ("sd_tps", f.sd_tps.into()),
                ("samples", f.samples.iter().copied().collect()),
                ("load_ms", f.load_ms.into()),
                ("place_gb_per_s", f.place_gb_per_s.into()),
                ("cold", f.cold.into()),
                ("cached_bytes", f.cached_bytes.into()),
                ("file_bytes", f.file_bytes.into()),
                ("locality", f.locality.into()),
                ("bytes_by_node", node_map(&f.bytes_by_node)),
                ("read_bytes_per_token", f.read_bytes_per_token.into()),
                ("expert_counts", expert_counts.into()),
                ("bw_gb_per_s", f.bw_gb_per_s.into()),
                ("roofline_tps", f.roofline_tps.into()),
                ("roofline_share", f.roofline_share.into()),
                ("rounds", rep.rounds.into()),
                ("reps", rep.reps.into()),
                ("numa_balancing", Json::str(&rep.host.numa_balancing)),
                ("thp", Json::str(&rep.host.thp)),
                ("error", f.error.map(Json::str).into()),
            ])
        })
        .collect();
    rows.to_string()
}

/// A CSV field, quoted when it holds a comma, quote or line break.
fn csv(v: &str) -> String {
    if v.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", v.replace('"', "\"\""))
    } else {
        v.to_string()
    }
}

/// CSV: a header and one line per row; samples joined by `;`, nodes as `node:bytes` by `;`.
pub fn render_csv(rep: &BenchReport) -> String {
    let mut s = String::from(
        "model,size_bytes,params,kernels,numa,numa_requested,threads,test,mean_tps,sd_tps,samples,load_ms,place_gb_per_s,cold,cached_bytes,file_bytes,locality,bytes_by_node,read_bytes_per_token,bw_gb_per_s,roofline_tps,roofline_share,rounds,reps,numa_balancing,thp,error\n",
    );
    let u = |x: Option<u64>| x.map_or(String::new(), |v| v.to_string());
    let f = |x: Option<f64>| x.map_or(String::new(), |v| format!("{v:.6}"));
    for r in fields(rep) {
        let samples: Vec<String> = r.samples.iter().map(|x| format!("{x:.4}")).collect();
        let nodes: Vec<String> = r
            .bytes_by_node
            .iter()
            .map(|(n, b)| format!("{n}:{b}"))
            .collect();
        let cols = [
            csv(&r.model),
            u(r.size_bytes),
            u(r.params),
            csv(r.kernels.as_deref().unwrap_or("")),
            csv(&r.numa),
            csv(&r.numa_requested),
            r.threads.to_string(),
            csv(r.test.as_deref().unwrap_or("")),
            f(r.mean_tps),
            f(r.sd_tps),
            samples.join(";"),
            f(r.load_ms),
            f(r.place_gb_per_s),
            r.cold.to_string(),
            u(r.cached_bytes),
            u(r.file_bytes),
            f(r.locality),
            nodes.join(";"),
            u(r.read_bytes_per_token),
            f(r.bw_gb_per_s),
            f(r.roofline_tps),
            f(r.roofline_share),
            rep.rounds.to_string(),
            rep.reps.to_string(),
            csv(&rep.host.numa_balancing),
            csv(&rep.host.thp),
            csv(r.error.as_deref().unwrap_or("")),
        ];
        s.push_str(&cols.join(","));
        s.push('\n');
    }
    s
}

/// The chart of the arms' decode speeds (`--svg`).
pub fn render_svg(rep: &BenchReport, command: &str) -> String {
    let models: std::collections::BTreeSet<String> =
        rep.arms.iter().map(|a| file_name(&a.model)).collect();
    let several = models.len() > 1;
    let bars: Vec<crate::app::svg::Bar> = rep
        .arms
        .iter()
        .map(|a| {
            let mut label = Vec::new();
            if several {
                label.push(file_name(&a.model));
            }
            match &a.outcome {
                Ok(r) => {
                    label.push(mode_label(r));
                    label.push(format!("t={}", a.threads));
                    crate::app::svg::Bar {
                        label,
                        value: (!r.tg.is_empty()).then(|| mean(&r.tg)),
                        sd: sd(&r.tg),
                        roof: a.roofline_tps(),
                        note: format!("locality {}", r.locality.map_or("n/a".into(), pct)),
                    }
                }
                Err(_) => {
                    label.push(a.mode.name().to_string());
                    label.push(format!("t={}", a.threads));
                    crate::app::svg::Bar {
                        label,
                        value: None,
                        sd: 0.0,
                        roof: None,
                        note: "failed".into(),
                    }
                }
            }
        })
        .collect();
    let h = &rep.host;
    let subtitle = format!(
        "{} | {} NUMA node{}, numa_balancing {}, THP {}, page cache {}",
        models.into_iter().collect::<Vec<_>>().join(", "),
        h.nodes,
        if h.nodes == 1 { "" } else { "s" },
        h.numa_balancing,
        h.thp,
        if rep.cold { "cold" } else { "warm" }
    );
    crate::app::svg::bar_chart(&crate::app::svg::Chart {
        title: format!(
            "decode tg{}: tokens/s by placement mode (mean ± sd)",
            rep.n_gen
        ),
        subtitle,
        footer: command.to_string(),
        y_label: "tokens/s".into(),
        bars,
    })
}
