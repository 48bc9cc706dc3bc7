//! `locus audit -m FILE --numa MODE [-t N] [--json]`: loads and places the model exactly as
//! `run` does (in modes that read the file mapping, evaluates one token, so its pages are
//! faulted in where a run would fault them), then reports where every page of every copy is, how much of the
//! model file is still in the page cache, and the share of each thread's per-token reads that
//! sit on its own node.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Instant;

use super::AppError;
use crate::json::Quoted;
use crate::kernels::Layout;
use crate::model::forward::KvType;
use crate::model::ModelFile;
use crate::placement::audit::{audit, Audit, CopyReport};
use crate::placement::cache::CacheAudit;
use crate::placement::Placement;
use crate::runtime::LoadedModel;

/// Options of `locus audit`.
#[derive(Clone, Debug)]
pub struct AuditOptions {
    pub model: PathBuf,
    pub numa: crate::placement::Options,
    pub json: bool,
    /// The context of the KV cache audited (`run`'s default when `None`).
    pub ctx: Option<usize>,
}

/// The audit plus what it was taken of.
pub struct AuditRun {
    pub audit: Audit,
    pub placement_summary: String,
    /// Where the pages of a `run`'s KV cache are after its first token.
    pub kv: CacheAudit,
    pub json: String,
}

/// Places, warms up and audits; prints the report.
pub fn run(o: &AuditOptions) -> Result<AuditRun, AppError> {
    let started = Instant::now();
    let file = ModelFile::open(&o.model)?;
    let p = crate::runtime::place(&file, &o.numa, false)?;
    let l = LoadedModel::load_placed(&file, &p, started)?;
    let pool = crate::runtime::pool_of(&p)?;
    // A run's cache, placed as `run` places it; one token evaluated writes every head block's
    // first page (and faults in the weights that come from the page cache where a run would).
    let n_ctx = crate::runtime::context_size(&l, o.ctx);
    let mut state = l.model.try_new_state(n_ctx, &pool, KvType::F16)?;
    let regions = crate::runtime::place_cache(&p, state.kv_head_blocks(&l.model, &pool));
    let tok = l.tokenizer.bos().unwrap_or(0);
    l.model.forward(&pool, &mut state, tok, true);
    let kv = crate::placement::cache::audit(&regions);
    let kv_bytes = regions.iter().map(|r| r.len as u64).sum();
    // A latent cache keeps a copy per group (every head reads every cell).
    let copies = (l.model.state_bytes(n_ctx, &pool, KvType::F16)).map_or(1, |b| b.kv_copies);
    let a = audit(&p, &l.model.weights, &file);
    let json = render_json(&p, &a, &kv, (kv_bytes, copies));
    if o.json {
        super::write_stdout(&format!("{json}\n"))?;
    } else {
        let mut text = render_text(&p, &a);
        let copies = match copies {
            1 => String::new(),
            n => format!(", a copy for each of {n} nodes"),
        };
        let _ = writeln!(
            text,
            "kv cache ({n_ctx} tokens, f16, {:.1} MiB in whole pages{copies}): {}",
            mib(kv_bytes),
            cache_line(&kv)
        );
        super::write_stdout(&text)?;
    }
    Ok(AuditRun {
        placement_summary: p.summary(),
        audit: a,
        kv,
        json,
    })
}

/// `node 0: 1.2 MiB, node 1: 1.2 MiB, not yet written 90.0 MiB, locality 100.0%`: where a
/// cache's pages are.
pub fn cache_line(a: &CacheAudit) -> String {
    let mut parts: Vec<String> = a
        .bytes_by_node
        .iter()
        .map(|(n, b)| format!("node {n}: {:.1} MiB", mib(*b)))
        .collect();
    parts.push(format!("not yet written {:.1} MiB", mib(a.unlocated_bytes)));
    parts.push(format!("locality {}", pct(a.locality)));
    parts.join(", ")
}

fn mib(b: u64) -> f64 {
    b as f64 / (1u64 << 20) as f64
}

fn pct(x: Option<f64>) -> String {
    x.map_or("n/a".to_string(), |v| format!("{:.1}%", v * 100.0))
}

/// `locality 100.0% | node 0: 54.1 MiB, node 1: 54.1 MiB | page cache 0.0 MiB of 86.2 MiB`.
pub fn one_line(a: &Audit) -> String {
    let nodes: Vec<String> = a
        .bytes_by_node
        .iter()
        .map(|(n, b)| format!("node {n}: {:.1} MiB", mib(*b)))
        .collect();
    format!(
        "locality {} | {}{} | page cache {:.1} MiB of {:.1} MiB (pages via {})",
        pct(a.locality),
        if nodes.is_empty() {
            "no page located".to_string()
        } else {
            nodes.join(", ")
        },
        if a.unknown_bytes > 0 {
            format!(", unknown: {:.1} MiB", mib(a.unknown_bytes))
        } else {
            String::new()
        },
        mib(a.page_cache_bytes),
        mib(a.file_bytes),
        a.source.name()
    )
}

fn node_cols(a: &Audit) -> Vec<u32> {
    let mut ids: Vec<u32> = a.bytes_by_node.keys().copied().collect();
    for c in &a.copies {
        ids.extend(c.pages_by_node.keys().copied());
    }
    ids.sort_unstable();
    ids.dedup();
    ids
}

/// Where a copy is, `*` marking a packed one.
fn copy_where(c: &CopyReport) -> String {
    let packed = if c.layout == Layout::Rows { "" } else { "*" };
    match c.node {
        Some(n) => format!("{} @{}{packed}", c.kind, n.0),
        None => format!("{}{packed}", c.kind),
    }
}

/// The human report: one line per tensor copy, then totals, page cache, threads, locality.
pub fn render_text(p: &Placement, a: &Audit) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "mode: {} (requested {})", p.summary(), p.plan.requested);
    for n in &p.plan.notes {
        let _ = writeln!(s, "  {n}");
    }
    let cols = node_cols(a);
    let _ = write!(
        s,
        "{:<28} {:>12} {:>14} {:>9}",
        "tensor", "copy", "rows", "MiB"
    );
    for c in &cols {
        let _ = write!(s, " {:>8}", format!("N{c} pages"));
    }
    let _ = writeln!(s, " {:>8}", "unknown");
    for c in &a.copies {
        let _ = write!(
            s,
            "{:<28} {:>12} {:>14} {:>9.2}",
            c.tensor,
            copy_where(c),
            format!("{}-{}", c.rows.0, c.rows.1),
            mib(c.bytes)
        );
        for n in &cols {
            let _ = write!(s, " {:>8}", c.pages_by_node.get(n).copied().unwrap_or(0));
        }
        let _ = writeln!(s, " {:>8}", c.unknown_pages);
    }
    for layout in Layout::PACKED {
        if a.copies.iter().any(|c| c.layout == layout) {
            let _ = writeln!(
                s,
                "  * packed for the kernels ({}: {})",
                layout.name(),
                layout.describe()
            );
        }
    }
    let _ = writeln!(s, "totals by node:");
    for (n, b) in &a.bytes_by_node {
        let _ = writeln!(s, "  node {n}: {:.1} MiB", mib(*b));
    }
    if a.unknown_bytes > 0 {
        let _ = writeln!(s, "  unknown: {:.1} MiB", mib(a.unknown_bytes));
    }
    let _ = writeln!(
        s,
        "page cache: {:.1} MiB of the {:.1} MiB model file",
        mib(a.page_cache_bytes),
        mib(a.file_bytes)
    );
    let _ = writeln!(s, "threads (per-token reads, local share):");
    for t in &a.threads {
        let share = (t.known_bytes > 0.0).then(|| t.local_bytes / t.known_bytes);
        let _ = writeln!(
            s,
            "  thread {:>3} node {:>4}: {:>8.2} MiB, {}",
            t.tid,
            t.node.map_or("-".to_string(), |n| n.0.to_string()),
            mib(t.read_bytes),
            pct(share)
        );
    }
    let _ = writeln!(
        s,
        "locality: {} (pages via {})",
        pct(a.locality),
        a.source.name()
    );
    for w in p.warnings.iter().chain(&a.warnings) {
        let _ = writeln!(s, "warning: {w}");
    }
    s
}

fn json_node_map(o: &mut String, m: &std::collections::BTreeMap<u32, u64>) {
    o.push('{');
    for (i, (n, v)) in m.iter().enumerate() {
        if i > 0 {
            o.push(',');
        }
        let _ = write!(o, "\"{n}\":{v}");
    }
    o.push('}');
}

/// A share to six places, or `null` where there is none.
fn json_share(o: &mut String, v: Option<f64>) {
    match v {
        Some(v) => {
            let _ = write!(o, "{v:.6}");
        }
        None => o.push_str("null"),
    }
}

/// One JSON object: mode, nodes, slots, copies, totals, page cache, locality, warnings.
/// `kv_bytes`: the KV cache's whole pages, `kv_copies` its copies (one per node for a latent
/// cache).
pub fn render_json(
    p: &Placement,
    a: &Audit,
    kv: &CacheAudit,
    (kv_bytes, kv_copies): (u64, usize),
) -> String {
    let mut o = format!("{{\"mode\":{}", Quoted(p.plan.mode.name()));
    let _ = write!(o, ",\"requested\":{}", Quoted(p.plan.requested.name()));
    let _ = write!(o, ",\"threads\":{}", p.plan.threads);
    o.push_str(",\"nodes\":[");
    for (i, n) in p.topo.nodes.iter().enumerate() {
        if i > 0 {
            o.push(',');
        }
        let _ = write!(o, "{{\"id\":{},\"cpus\":", n.id.0);
        let _ = write!(o, "{}", Quoted(&n.cpus.to_list()));
        let _ = write!(
            o,
            ",\"mem_total\":{},\"mem_free\":{}}}",
            n.memory.total, n.memory.free
        );
    }
    o.push_str("],\"slots\":[");
    for (i, sl) in p.plan.slots.iter().enumerate() {
        if i > 0 {
            o.push(',');
        }
        let node = sl.node.map_or("null".to_string(), |n| n.0.to_string());
        let _ = write!(
            o,
            "{{\"node\":{node},\"threads\":[{},{}]}}",
            sl.threads.start, sl.threads.end
        );
    }
    o.push_str("],\"copies\":[");
    for (i, c) in a.copies.iter().enumerate() {
        if i > 0 {
            o.push(',');
        }
        let _ = write!(o, "{{\"tensor\":{}", Quoted(&c.tensor));
        let node = c.node.map_or("null".to_string(), |n| n.0.to_string());
        let _ = write!(
            o,
            ",\"node\":{node},\"kind\":\"{}\",\"rows\":[{},{}],\"layout\":\"{}\",\"bytes\":{},\"pages\":{},\"pages_by_node\":",
            c.kind, c.rows.0, c.rows.1, c.layout.name(), c.bytes, c.pages
        );
        json_node_map(&mut o, &c.pages_by_node);
        let _ = write!(o, ",\"unknown_pages\":{}}}", c.unknown_pages);
    }
    o.push_str("],\"bytes_by_node\":");
    json_node_map(&mut o, &a.bytes_by_node);
    let _ = write!(
        o,
        ",\"unknown_bytes\":{},\"page_cache_bytes\":{},\"file_bytes\":{},\"page_source\":\"{}\"",
        a.unknown_bytes,
        a.page_cache_bytes,
        a.file_bytes,
        a.source.name()
    );
    o.push_str(",\"thread_locality\":[");
    for (i, t) in a.threads.iter().enumerate() {
        if i > 0 {
            o.push(',');
        }
        let node = t.node.map_or("null".to_string(), |n| n.0.to_string());
        let share = if t.known_bytes > 0.0 {
            format!("{:.6}", t.local_bytes / t.known_bytes)
        } else {
            "null".into()
        };
        let _ = write!(
            o,
            "{{\"thread\":{},\"node\":{node},\"read_bytes\":{},\"locality\":{share}}}",
            t.tid, t.read_bytes
        );
    }
    o.push_str("],\"locality\":");
    json_share(&mut o, a.locality);
    let _ = write!(
        o,
        ",\"kv_cache\":{{\"bytes\":{kv_bytes},\"copies\":{kv_copies},\"bytes_by_node\":"
    );
    json_node_map(&mut o, &kv.bytes_by_node);
    let _ = write!(
        o,
        ",\"unlocated_bytes\":{},\"locality\":",
        kv.unlocated_bytes
    );
    json_share(&mut o, kv.locality);
    o.push('}');
    o.push_str(",\"warnings\":[");
    for (i, w) in p.warnings.iter().chain(&a.warnings).enumerate() {
        if i > 0 {
            o.push(',');
        }
        let _ = write!(o, "{}", Quoted(w));
    }
    o.push_str("]}");
    o
}
