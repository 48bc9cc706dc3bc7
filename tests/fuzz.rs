//! Mutation fuzzing of the code that reads hostile bytes: the GGUF reader (and the loaders that
//! consume what it returns: config, weights, tokenizer), the tokenizer's encode and decode, and
//! the server's HTTP request reader, JSON parser and API request reader.
//!
//! No cargo-fuzz: a small structure-aware mutator over a seed corpus, deterministic for a given
//! seed. Every case runs under `catch_unwind` with a bound on the thread's CPU time and, for
//! the GGUF parse, on the bytes it allocates (a counting global allocator). An input that
//! breaks a property is saved under `tests/data/fuzz/regressions/`;
//! `corpus_and_regressions_replay` replays that folder and the committed seeds on every run.
//!
//! Environment: `LOCUS_FUZZ_SECS` — seconds per fuzz target (default 3); `LOCUS_FUZZ_SEED` —
//! the mutator's seed (default 1). A long run of one target:
//! `LOCUS_FUZZ_SECS=1800 cargo test --release --test fuzz -- --nocapture fuzz_gguf`.

mod common;

use std::cell::{Cell, RefCell};
use std::collections::HashSet;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::Once;
use std::time::{Duration, Instant};

use locus::kernels::GgmlType;
use locus::model::gguf::{Gguf, ValueType};
use locus::model::gguf_write::{GgufWriter, MetaValue};
use locus::model::synth::{synth_model, SynthSpec};
use locus::model::tokenizer::{Tokenizer, Utf8Stream};
use locus::model::weights::Weights;
use locus::model::{Config, ModelFile};

// ---------------------------------------------------------------------------------------------
// Bounds every case must respect.

/// CPU time one case may take (parse + load, or one encode/decode round).
const CASE_CPU_LIMIT: Duration = Duration::from_secs(1);
/// Slack on top of the allocation bound, for the fixed-size tables of a parse.
const ALLOC_SLACK: u64 = 1 << 20;
/// Largest input the mutators produce (keeps every case well inside the CPU bound).
const MAX_GGUF_INPUT: usize = 4 << 20;
const MAX_TEXT_INPUT: usize = 64 << 10;
/// Most inputs a fuzz corpus grows to, and the largest input it keeps (memory stays bounded
/// over a long run).
const MAX_CORPUS: usize = 2048;
const MAX_KEPT: usize = 256 << 10;

/// What the GGUF reader may allocate for a file of `len` bytes: two times its size plus 1 MiB.
fn alloc_limit(len: usize) -> u64 {
    2 * len as u64 + ALLOC_SLACK
}

// A global allocator that counts the live bytes of the current thread while asked to.
#[path = "common/counting_alloc.rs"]
mod counting_alloc;
use counting_alloc::measure;

#[global_allocator]
static ALLOC: counting_alloc::CountingAlloc = counting_alloc::CountingAlloc;

/// CPU time consumed by the calling thread (immune to other load on the machine).
fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_THREAD_CPUTIME_ID exists on Linux.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID) failed");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

// ---------------------------------------------------------------------------------------------
// Running one case: panics are caught and their message kept (quietly, while a case runs).

thread_local! {
    static IN_CASE: Cell<bool> = const { Cell::new(false) };
    static PANIC_MSG: RefCell<Option<String>> = const { RefCell::new(None) };
}

fn install_panic_hook() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if IN_CASE.with(|c| c.get()) {
                let at = info
                    .location()
                    .map(|l| format!(" at {}:{}", l.file(), l.line()))
                    .unwrap_or_default();
                let msg = info
                    .payload()
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| info.payload().downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "(non-string panic)".into());
                PANIC_MSG.with(|m| *m.borrow_mut() = Some(format!("{msg}{at}")));
            } else {
                default(info);
            }
        }));
    });
}

/// Why a case failed.
#[derive(Debug)]
enum Failure {
    Panic(String),
    TooSlow(Duration),
    TooMuchMemory { peak: u64, limit: u64, len: usize },
    Property(String),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Panic(m) => write!(f, "panic: {m}"),
            Failure::TooSlow(d) => write!(f, "took {d:?} of CPU (limit {CASE_CPU_LIMIT:?})"),
            Failure::TooMuchMemory { peak, limit, len } => write!(
                f,
                "parse of {len} bytes allocated {peak} bytes (limit {limit} = 2 × size + 1 MiB)"
            ),
            Failure::Property(m) => write!(f, "property: {m}"),
        }
    }
}

/// Runs `f` as one case: catches panics, bounds CPU time. `f` returns an outcome signature
/// (used to keep inputs that behave in a new way) or a property failure.
fn run_case(f: impl FnOnce() -> Result<String, Failure>) -> Result<String, Failure> {
    install_panic_hook();
    IN_CASE.with(|c| c.set(true));
    let t0 = thread_cpu();
    let r = catch_unwind(AssertUnwindSafe(f));
    let spent = thread_cpu() - t0;
    IN_CASE.with(|c| c.set(false));
    counting_alloc::stop_tracking();
    match r {
        Err(_) => Err(Failure::Panic(
            PANIC_MSG
                .with(|m| m.borrow_mut().take())
                .unwrap_or_default(),
        )),
        Ok(Err(e)) => Err(e),
        Ok(Ok(_)) if spent > CASE_CPU_LIMIT => Err(Failure::TooSlow(spent)),
        Ok(Ok(sig)) => Ok(sig),
    }
}

// ---------------------------------------------------------------------------------------------
// Deterministic randomness (splitmix64).

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n > 0`).
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }

    fn pick<'a, T>(&mut self, v: &'a [T]) -> &'a T {
        &v[self.below(v.len())]
    }
}

fn fuzz_dir() -> PathBuf {
    common::repo_path("tests/data/fuzz")
}

/// Saves a failing input as `regressions/<target>-<hash>.bin` and returns its path.
fn save_regression(target: &str, input: &[u8]) -> PathBuf {
    let dir = fuzz_dir().join("regressions");
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(format!("{target}-{:016x}.bin", common::fnv(input)));
    std::fs::write(&p, input).unwrap();
    p
}

/// The files of `dir` (sorted), or none if it does not exist.
fn files_in(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| rd.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    v.retain(|p| p.is_file());
    v.sort();
    v
}

/// At most 160 characters of `b` (lossy UTF-8), for messages about large inputs.
fn short(b: &[u8]) -> String {
    let s = String::from_utf8_lossy(b);
    let cut: String = s.chars().take(160).collect();
    if cut.len() < s.len() {
        format!("{cut:?}… ({} bytes)", b.len())
    } else {
        format!("{cut:?}")
    }
}

/// The type name of an error or value, without its fields (`MissingKey("x")` → `MissingKey`).
fn variant<T: std::fmt::Debug>(v: &T) -> String {
    let s = format!("{v:?}");
    s.split(|c: char| !c.is_alphanumeric() && c != '_')
        .next()
        .unwrap_or("")
        .to_string()
}

// ---------------------------------------------------------------------------------------------
// The GGUF target.

/// Parses `bytes` under the allocation bound, then feeds a successful parse to the loaders
/// (config, weights, tokenizer) and uses the tokenizer. Returns an outcome signature.
fn check_gguf(bytes: &[u8]) -> Result<String, Failure> {
    run_case(|| {
        let (parsed, peak) = measure(|| Gguf::parse(bytes));
        let limit = alloc_limit(bytes.len());
        if peak > limit {
            return Err(Failure::TooMuchMemory {
                peak,
                limit,
                len: bytes.len(),
            });
        }
        let g = match parsed {
            Err(e) => {
                // Errors must render (Display walks every field) and point inside the file.
                let shown = e.to_string();
                if shown.is_empty() || e.offset > bytes.len() as u64 {
                    return Err(Failure::Property(format!(
                        "error offset {} beyond the file ({}): {shown}",
                        e.offset,
                        bytes.len()
                    )));
                }
                let bucket = 64 - e.offset.leading_zeros();
                return Ok(format!("err:{}:{bucket}", variant(&e.kind)));
            }
            Ok(g) => g,
        };
        for t in &g.tensors {
            let end = t.file_offset + t.data.len() as u64;
            if end > bytes.len() as u64 || t.file_offset < g.data_offset {
                return Err(Failure::Property(format!(
                    "tensor '{}' data {}..{end} outside the data section {}..{}",
                    t.name,
                    t.file_offset,
                    g.data_offset,
                    bytes.len()
                )));
            }
        }
        check_rewrite(&g)?;
        let mut sig = format!("ok:{}t", g.tensors.len().min(4));
        match Config::from_gguf(&g) {
            Err(e) => sig += &format!(":cfg-{}", variant(&e)),
            Ok(c) => match Weights::from_gguf(&g, &c) {
                Err(e) => sig += &format!(":w-{}", variant(&e)),
                Ok(_) => sig += ":weights",
            },
        }
        match Tokenizer::from_gguf(&g) {
            Err(e) => sig += &format!(":tok-{}", variant(&e)),
            Ok(tok) => {
                sig += ":tok";
                let text = "Hello <|im_start|>world 123 's\u{1F600}\u{00e9} \n\t <s></s>";
                for (add, special) in [(true, true), (false, false)] {
                    let ids = tok.encode(text, add, special);
                    check_ids(&tok, &ids)?;
                    let _ = tok.decode(&ids, special);
                }
                let n = tok.n_vocab() as u32;
                for id in [0, 1, n / 2, n.saturating_sub(1), n, u32::MAX] {
                    let _ = tok.token_to_piece(id, true);
                    let _ = tok.is_eog(id);
                    let _ = tok.is_control(id);
                    let _ = tok.token_text(id);
                }
            }
        }
        Ok(sig)
    })
}

/// What the reader accepts, the writer (used by `quantize`) writes back so that the reader
/// reads the same metadata and tensors: they agree on the format, alignment included.
fn check_rewrite(g: &Gguf) -> Result<(), Failure> {
    if g.alignment > 4096 {
        // The writer would pad to it: legal, but gigabytes for a huge power of two.
        return Ok(());
    }
    let mut w = GgufWriter::new();
    for (k, v) in &g.metadata {
        w.metadata.push((k.to_string(), MetaValue::from_value(v)));
    }
    for t in &g.tensors {
        w.add_tensor(t.name, &t.dims, t.ty, t.data.to_vec());
    }
    let bytes = w.to_bytes();
    let again = Gguf::parse(&bytes).map_err(|e| {
        Failure::Property(format!(
            "the writer's copy of a readable file does not parse: {e}"
        ))
    })?;
    // Compared as the writer's values, through Debug: a NaN equals itself, and a bool byte
    // other than 0 or 1 (read as true, written back as 1) counts as the same value.
    let differs = |a: &Gguf, b: &Gguf| -> Option<String> {
        if a.alignment != b.alignment {
            return Some(format!("alignment {} → {}", b.alignment, a.alignment));
        }
        if a.metadata.len() != b.metadata.len() {
            return Some(format!("{} keys → {}", b.metadata.len(), a.metadata.len()));
        }
        for ((kx, x), (ky, y)) in a.metadata.iter().zip(&b.metadata) {
            let (x, y) = (MetaValue::from_value(x), MetaValue::from_value(y));
            if kx != ky || format!("{x:?}") != format!("{y:?}") {
                return Some(format!("key '{ky}'"));
            }
        }
        if a.tensors.len() != b.tensors.len() {
            return Some(format!("{} tensors → {}", b.tensors.len(), a.tensors.len()));
        }
        a.tensors.iter().zip(&b.tensors).find_map(|(x, y)| {
            ((x.name, &x.dims, x.ty, x.data) != (y.name, &y.dims, y.ty, y.data))
                .then(|| format!("tensor '{}'", y.name))
        })
    };
    if let Some(what) = differs(&again, g) {
        return Err(Failure::Property(format!(
            "the writer's copy of a readable file reads differently: {what}"
        )));
    }
    Ok(())
}

fn check_ids(tok: &Tokenizer, ids: &[u32]) -> Result<(), Failure> {
    match ids.iter().find(|&&id| id as usize >= tok.n_vocab()) {
        Some(id) => Err(Failure::Property(format!(
            "encode returned id {id}, vocabulary has {}",
            tok.n_vocab()
        ))),
        None => Ok(()),
    }
}

/// The kinds of field the layout walker finds in a GGUF file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FieldKind {
    Magic,
    Version,
    TensorCount,
    KvCount,
    /// Length of a key, tensor name or string value.
    StrLen,
    ValueType,
    ArrayElemType,
    ArrayLen,
    /// The value of `general.alignment`.
    Alignment,
    Scalar,
    NDims,
    Dim,
    TensorType,
    TensorOffset,
}

#[derive(Clone, Copy, Debug)]
struct Field {
    pos: usize,
    width: usize,
    kind: FieldKind,
}

/// Walks as much of the GGUF grammar as the bytes allow and records where each field lies.
/// Arrays record at most a few element fields but are walked in full.
struct Walker<'a> {
    b: &'a [u8],
    pos: usize,
    fields: Vec<Field>,
}

impl Walker<'_> {
    fn field(&mut self, width: usize, kind: FieldKind) -> Option<u64> {
        let s = self.b.get(self.pos..self.pos + width)?;
        let mut v = [0u8; 8];
        v[..width].copy_from_slice(s);
        self.fields.push(Field {
            pos: self.pos,
            width,
            kind,
        });
        self.pos += width;
        Some(u64::from_le_bytes(v))
    }

    fn string(&mut self) -> Option<&[u8]> {
        let len = self.field(8, FieldKind::StrLen)? as usize;
        let s = self.b.get(self.pos..self.pos.checked_add(len)?)?;
        self.pos += len;
        Some(s)
    }

    fn value(&mut self, ty: u64, depth: u32, record: bool, is_alignment: bool) -> Option<()> {
        let kind = if is_alignment {
            FieldKind::Alignment
        } else {
            FieldKind::Scalar
        };
        let width = match ty {
            0 | 1 | 7 => 1,
            2 | 3 => 2,
            4..=6 => 4,
            10..=12 => 8,
            8 => {
                if record {
                    self.string()?;
                } else {
                    let len =
                        u64::from_le_bytes(self.b.get(self.pos..self.pos + 8)?.try_into().ok()?);
                    self.pos = self.pos.checked_add(8)?.checked_add(len as usize)?;
                }
                return Some(());
            }
            9 if depth < 8 => {
                let elem = self.field(4, FieldKind::ArrayElemType)?;
                let n = self.field(8, FieldKind::ArrayLen)?;
                for i in 0..n {
                    self.value(elem, depth + 1, i < 3 || i + 1 == n, false)?;
                    if self.pos > self.b.len() {
                        return None;
                    }
                }
                return Some(());
            }
            _ => return None,
        };
        if record {
            self.field(width, kind)?;
        } else {
            self.pos += width;
        }
        Some(())
    }

    fn walk(&mut self) -> Option<()> {
        self.field(4, FieldKind::Magic)?;
        self.field(4, FieldKind::Version)?;
        let n_tensors = self.field(8, FieldKind::TensorCount)?;
        let n_kv = self.field(8, FieldKind::KvCount)?;
        for _ in 0..n_kv.min(1 << 20) {
            let key = self.string()?.to_vec();
            let ty = self.field(4, FieldKind::ValueType)?;
            self.value(ty, 0, true, key == b"general.alignment")?;
        }
        for _ in 0..n_tensors.min(1 << 20) {
            self.string()?;
            let nd = self.field(4, FieldKind::NDims)?;
            for _ in 0..nd.min(8) {
                self.field(8, FieldKind::Dim)?;
            }
            self.field(4, FieldKind::TensorType)?;
            self.field(8, FieldKind::TensorOffset)?;
        }
        Some(())
    }
}

/// The fields of `b` and where its header ends (as far as the walk got).
fn layout(b: &[u8]) -> (Vec<Field>, usize) {
    let mut w = Walker {
        b,
        pos: 0,
        fields: Vec::new(),
    };
    let _ = w.walk();
    let end = w.pos.min(b.len());
    (w.fields, end)
}

/// Values that find edge cases in a field of `width` bytes at `pos` of a `len`-byte file.
fn interesting(rng: &mut Rng, width: usize, old: u64, pos: usize, len: usize) -> u64 {
    let remaining = len.saturating_sub(pos + width) as u64;
    let max = if width >= 8 {
        u64::MAX
    } else {
        (1u64 << (8 * width)) - 1
    };
    let v = match rng.below(24) {
        0 => 0,
        1 => 1,
        2 => 2,
        3 => rng.below(16) as u64,
        4 => max,
        5 => max / 2,
        6 => max / 2 + 1,
        7 => old.wrapping_add(1),
        8 => old.wrapping_sub(1),
        9 => old.wrapping_mul(2),
        10 => old / 2,
        11 => remaining,
        12 => remaining + 1,
        13 => remaining.saturating_sub(1),
        14 => remaining / 8,
        15 => remaining / 12 + 1,
        16 => len as u64,
        17 => 1 << rng.below(8 * width),
        18 => (1 << rng.below(8 * width)) - 1,
        19 => 0x8000_0000,
        20 => 1 << 32,
        21 => u64::MAX - rng.below(64) as u64,
        22 => old ^ (1 << rng.below(8 * width)),
        _ => rng.next(),
    };
    v & max
}

fn write_le(out: &mut [u8], pos: usize, width: usize, v: u64) {
    let end = (pos + width).min(out.len());
    if pos < end {
        out[pos..end].copy_from_slice(&v.to_le_bytes()[..end - pos]);
    }
}

/// Changes one field the walker found to an edge value of its kind.
fn mutate_field(rng: &mut Rng, b: &mut [u8], fields: &[Field]) {
    if fields.is_empty() {
        return;
    }
    let f = *rng.pick(fields);
    let mut old = [0u8; 8];
    old[..f.width].copy_from_slice(&b[f.pos..f.pos + f.width]);
    let old = u64::from_le_bytes(old);
    let v = match f.kind {
        FieldKind::Magic => {
            let m: &[&[u8; 4]] = &[b"GGUF", b"GGML", b"GGJT", b"FUGG", b"gguf", b"\0\0\0\0"];
            let noise = if rng.chance(30) { rng.next() & 0xff } else { 0 };
            u32::from_le_bytes(**rng.pick(m)) as u64 ^ noise
        }
        FieldKind::Version => *rng.pick(&[0u64, 1, 2, 3, 4, 0xffff_ffff, 0x0300_0000]),
        FieldKind::ValueType | FieldKind::ArrayElemType => {
            if rng.chance(80) {
                rng.below(15) as u64
            } else {
                interesting(rng, 4, old, f.pos, b.len())
            }
        }
        FieldKind::TensorType => {
            if rng.chance(70) {
                rng.below(40) as u64
            } else {
                interesting(rng, 4, old, f.pos, b.len())
            }
        }
        FieldKind::NDims => rng.below(7) as u64,
        FieldKind::Alignment => {
            if rng.chance(50) {
                1 << rng.below(8 * f.width)
            } else {
                interesting(rng, f.width, old, f.pos, b.len())
            }
        }
        FieldKind::TensorOffset if rng.chance(50) => {
            // Near the old offset, by an alignment-sized or odd step.
            let step = *rng.pick(&[1u64, 31, 32, 64, 4096]);
            if rng.chance(50) {
                old.wrapping_add(step)
            } else {
                old.wrapping_sub(step)
            }
        }
        _ => interesting(rng, f.width, old, f.pos, b.len()),
    };
    write_le(b, f.pos, f.width, v);
}

/// A random position, mostly inside the header (where the parser looks).
fn header_pos(rng: &mut Rng, len: usize, header_end: usize) -> usize {
    if len == 0 {
        return 0;
    }
    if rng.chance(85) && header_end > 0 {
        rng.below(header_end.min(len))
    } else {
        rng.below(len)
    }
}

/// One random change of any kind to a GGUF input.
fn mutate_gguf_once(rng: &mut Rng, b: &mut Vec<u8>, corpus: &[Vec<u8>]) {
    let (fields, header_end) = layout(b);
    match rng.below(100) {
        0..=34 => mutate_field(rng, b, &fields),
        35..=47 => {
            // Flip a bit or overwrite a byte.
            if !b.is_empty() {
                let p = header_pos(rng, b.len(), header_end);
                if rng.chance(50) {
                    b[p] ^= 1 << rng.below(8);
                } else {
                    let random = rng.next() as u8;
                    b[p] = *rng.pick(&[0, 1, 0x7f, 0x80, 0xff, random]);
                }
            }
        }
        48..=54 => {
            // An edge value of 4 or 8 bytes at any position (unaligned fields included).
            let width = *rng.pick(&[4, 8]);
            let p = header_pos(rng, b.len(), header_end);
            let v = interesting(rng, width, 0, p, b.len());
            write_le(b, p, width, v);
        }
        55..=62 => {
            // Truncate, mostly inside the header.
            let p = header_pos(rng, b.len(), header_end);
            b.truncate(p);
        }
        63..=67 => {
            // Delete a range.
            if !b.is_empty() {
                let p = header_pos(rng, b.len(), header_end);
                let n = rng.below(64.min(b.len() - p) + 1);
                b.drain(p..p + n);
            }
        }
        68..=71 => {
            // Duplicate a range in place.
            if !b.is_empty() {
                let p = header_pos(rng, b.len(), header_end);
                let n = rng.below(64.min(b.len() - p) + 1);
                let chunk = b[p..p + n].to_vec();
                b.splice(p..p, chunk);
            }
        }
        72..=74 => {
            // Insert random bytes.
            let p = header_pos(rng, b.len(), header_end);
            let n = 1 + rng.below(16);
            let chunk: Vec<u8> = (0..n).map(|_| rng.next() as u8).collect();
            b.splice(p..p, chunk);
        }
        75..=80 => {
            // Splice: our head up to a field boundary, another input's tail from one.
            let other = rng.pick(corpus);
            let (ofields, _) = layout(other);
            if !fields.is_empty() && !ofields.is_empty() {
                let cut = rng.pick(&fields).pos;
                let from = rng.pick(&ofields).pos;
                b.truncate(cut);
                b.extend_from_slice(&other[from..]);
            }
        }
        81..=83 => {
            // Grow the file: zeros, 0xff or random bytes, up to a few MiB, so that counts
            // checked against "what remains" allow large values.
            let n = 1 << rng.below(23);
            let fill = rng.below(3);
            b.extend((0..n).map(|_| match fill {
                0 => 0,
                1 => 0xff,
                _ => rng.next() as u8,
            }));
        }
        _ => semantic_mutation(rng, b),
    }
    b.truncate(MAX_GGUF_INPUT);
}

/// Keys the loaders read, to set to hostile values.
const KEYS: &[&str] = &[
    "general.architecture",
    "general.alignment",
    "llama.vocab_size",
    "llama.embedding_length",
    "llama.block_count",
    "llama.feed_forward_length",
    "llama.attention.head_count",
    "llama.attention.head_count_kv",
    "llama.attention.key_length",
    "llama.attention.value_length",
    "llama.context_length",
    "llama.rope.dimension_count",
    "llama.rope.freq_base",
    "llama.rope.scaling.type",
    "llama.rope.scaling.factor",
    "llama.attention.layer_norm_rms_epsilon",
    "tokenizer.ggml.model",
    "tokenizer.ggml.pre",
    "tokenizer.ggml.tokens",
    "tokenizer.ggml.scores",
    "tokenizer.ggml.token_type",
    "tokenizer.ggml.merges",
    "tokenizer.ggml.bos_token_id",
    "tokenizer.ggml.eos_token_id",
    "tokenizer.ggml.eot_token_id",
    "tokenizer.ggml.unknown_token_id",
    "tokenizer.ggml.padding_token_id",
    "tokenizer.ggml.add_bos_token",
    "tokenizer.ggml.add_eos_token",
    "tokenizer.ggml.add_space_prefix",
    "tokenizer.chat_template",
];

/// Tokenizer models, pre-tokenizers and odd strings, for string-valued keys.
const NAMES: &[&str] = &[
    "",
    "llama",
    "gpt2",
    "bert",
    "smollm",
    "llama-bpe",
    "qwen2",
    "gpt-2",
    "default",
    "\u{fffd}",
];

fn hostile_value(rng: &mut Rng, old: Option<&MetaValue>) -> MetaValue {
    let nums = [
        0u64,
        1,
        2,
        3,
        7,
        63,
        64,
        255,
        256,
        0x7fff_ffff,
        0xffff_ffff,
        1 << 24,
        (1 << 24) + 1,
        u64::MAX,
    ];
    match rng.below(16) {
        0 => MetaValue::U32(*rng.pick(&nums) as u32),
        1 => MetaValue::U64(*rng.pick(&nums)),
        2 => MetaValue::I32(-(rng.below(3) as i32) - 1),
        3 => MetaValue::I64(i64::MIN),
        4 => MetaValue::F32(*rng.pick(&[
            f32::NAN,
            f32::INFINITY,
            -1.0,
            0.0,
            1e38,
            f32::MIN_POSITIVE,
        ])),
        5 => MetaValue::F64(f64::NAN),
        6 => MetaValue::Bool(rng.chance(50)),
        7 => MetaValue::str(NAMES[rng.below(NAMES.len())]),
        8 => MetaValue::Str(vec![0xff, 0xfe, b'x']),
        9 => MetaValue::Array(ValueType::I32, vec![]),
        10 => MetaValue::Array(ValueType::String, vec![]),
        11 => MetaValue::strs(&[
            "",
            " ",
            "a b",
            "a b c",
            "\u{0120}",
            "<|im_start|>",
            "a",
            "a",
        ]),
        12 => MetaValue::i32s(&[0, 1, 2, 3, 4, 5, 6, 7, -1, 99]),
        13 => MetaValue::f32s(&[f32::NAN, f32::NEG_INFINITY, 0.0, -1e30]),
        _ => match old {
            // Shrink or reshape an existing array.
            Some(MetaValue::Array(t, items)) if !items.is_empty() => {
                let mut items = items.clone();
                match rng.below(4) {
                    0 => items.truncate(rng.below(items.len())),
                    1 => {
                        let i = rng.below(items.len());
                        items[i] = hostile_value(rng, None);
                    }
                    2 => {
                        let i = rng.below(items.len());
                        items.push(items[i].clone());
                    }
                    _ => items.reverse(),
                }
                MetaValue::Array(*t, items)
            }
            _ => MetaValue::U32(rng.next() as u32),
        },
    }
}

/// Rebuilds a parseable input with the writer after changing its metadata or tensor table:
/// well-formed files with hostile contents, for the loaders behind the parser.
fn semantic_mutation(rng: &mut Rng, b: &mut Vec<u8>) {
    let Ok(g) = Gguf::parse(b) else { return };
    let mut w = GgufWriter::new();
    for (k, v) in &g.metadata {
        w.metadata.push((k.to_string(), MetaValue::from_value(v)));
    }
    for t in &g.tensors {
        w.add_tensor(t.name, &t.dims, t.ty, t.data.to_vec());
    }
    drop(g);
    // The writer pads to general.alignment: keep it small and non-zero so the rebuild fits.
    if let Some((_, v)) = w
        .metadata
        .iter_mut()
        .find(|(k, _)| k == "general.alignment")
    {
        let a = match v {
            MetaValue::U32(a) => *a as u64,
            MetaValue::U64(a) => *a,
            _ => 32,
        };
        if a == 0 || a > 4096 {
            *v = MetaValue::U32(32);
        }
    }
    match rng.below(10) {
        0..=4 => {
            let key = if rng.chance(70) && !w.metadata.is_empty() {
                w.metadata[rng.below(w.metadata.len())].0.clone()
            } else {
                rng.pick(KEYS).to_string()
            };
            let old = w
                .metadata
                .iter()
                .find(|(k, _)| *k == key)
                .map(|(_, v)| v.clone());
            let v = hostile_value(rng, old.as_ref());
            // The writer itself pads to the alignment: keep the key writable.
            if key == "general.alignment" {
                let a = 1u32 << rng.below(13);
                w.set(
                    &key,
                    if rng.chance(50) {
                        MetaValue::U32(a)
                    } else {
                        MetaValue::U64(a as u64)
                    },
                );
                // Written in the type the writer reads, then retyped to the signed integer of
                // the same width: a value the reader may take as the same alignment.
                if rng.chance(30) {
                    *b = w.to_bytes();
                    let key = b"general.alignment";
                    if let Some(at) = b.windows(key.len()).position(|x| x == key) {
                        let ty = at + key.len();
                        b[ty] = match b[ty] {
                            4 => 5,
                            10 => 11,
                            other => other,
                        };
                    }
                    return;
                }
            } else {
                w.set(&key, v);
            }
        }
        5 => {
            if !w.metadata.is_empty() {
                let i = rng.below(w.metadata.len());
                w.metadata.remove(i);
            }
        }
        6 => {
            if !w.tensors.is_empty() {
                let i = rng.below(w.tensors.len());
                w.tensors.remove(i);
            }
        }
        7 => {
            if !w.tensors.is_empty() {
                let i = rng.below(w.tensors.len());
                let t = &mut w.tensors[i];
                match rng.below(4) {
                    0 => t.dims.reverse(),
                    1 => t.dims.push(1),
                    2 => {
                        t.ty = *rng.pick(&[
                            GgmlType::F32,
                            GgmlType::F16,
                            GgmlType::Q4_0,
                            GgmlType::Q8_0,
                            GgmlType::Q5_0,
                            GgmlType::Q4K,
                            GgmlType::Q6K,
                            GgmlType::Iq4Xs,
                            GgmlType::Iq2Xxs,
                            GgmlType::Iq1S,
                            GgmlType::Mxfp4,
                            GgmlType::Tq1_0,
                        ])
                    }
                    _ => {
                        let n = t.data.len() / 2;
                        t.data.truncate(n);
                        t.dims[0] = (t.dims[0] / 2).max(1);
                    }
                }
            }
        }
        8 => {
            if !w.tensors.is_empty() {
                // A second tensor under an existing name or a neighbour's name.
                let i = rng.below(w.tensors.len());
                let j = rng.below(w.tensors.len());
                w.tensors[i].name = w.tensors[j].name.clone();
            }
        }
        _ => {
            if !w.metadata.is_empty() {
                let i = rng.below(w.metadata.len());
                let dup = w.metadata[i].clone();
                w.metadata.push(dup);
            }
        }
    }
    *b = w.to_bytes();
}

/// A SentencePiece-shaped vocabulary (Gemma-like: <unk>, <s>, </s>, control and user tokens,
/// byte tokens, ▁-pieces) as a GGUF without tensors.
fn spm_vocab_gguf() -> Vec<u8> {
    let mut tokens: Vec<String> = vec!["<unk>".into(), "<s>".into(), "</s>".into()];
    let mut types = vec![2, 3, 3];
    for t in ["<start_of_turn>", "<end_of_turn>", "<mask>"] {
        tokens.push(t.into());
        types.push(3);
    }
    tokens.push("<user_defined>".into());
    types.push(4);
    for b in 0..=255u8 {
        tokens.push(format!("<0x{b:02X}>"));
        types.push(6);
    }
    let words = [
        "▁", "▁▁", "▁the", "▁a", "a", "b", "c", "e", "h", "l", "o", "t", "th", "he", "the", "ll",
        "llo", "▁he", "▁hello", "▁world", "wor", "ld", "1", "2", "12", "▁1", "é", "日本", "😀",
    ];
    for w in words {
        tokens.push(w.into());
        types.push(1);
    }
    let scores: Vec<f32> = (0..tokens.len()).map(|i| -(i as f32)).collect();
    let mut w = GgufWriter::new();
    w.set("general.architecture", MetaValue::str("llama"));
    w.set("tokenizer.ggml.model", MetaValue::str("llama"));
    w.set("tokenizer.ggml.tokens", MetaValue::strs(&tokens));
    w.set("tokenizer.ggml.scores", MetaValue::f32s(&scores));
    w.set("tokenizer.ggml.token_type", MetaValue::i32s(&types));
    w.set("tokenizer.ggml.bos_token_id", MetaValue::U32(1));
    w.set("tokenizer.ggml.eos_token_id", MetaValue::U32(2));
    w.set("tokenizer.ggml.add_space_prefix", MetaValue::Bool(false));
    w.to_bytes()
}

/// A copy of the real SmolLM2 metadata with the vocabulary cut to `n` tokens and merges to
/// `n / 2`, plus one small tensor: the real keys and pre-tokenizer, small enough to fuzz fast.
fn real_trimmed(bytes: &[u8], n: usize) -> Option<Vec<u8>> {
    let g = Gguf::parse(bytes).ok()?;
    let mut w = GgufWriter::new();
    for (k, v) in &g.metadata {
        let mut v = MetaValue::from_value(v);
        if let MetaValue::Array(_, items) = &mut v {
            let keep = if k.ends_with("merges") { n / 2 } else { n };
            items.truncate(keep);
        }
        w.metadata.push((k.to_string(), v));
    }
    w.set("llama.vocab_size", MetaValue::U32(n as u32));
    w.add_tensor("output_norm.weight", &[8], GgmlType::F32, vec![0; 32]);
    Some(w.to_bytes())
}

/// The GGUF seed corpus: committed seeds, generated models, and (when the download is here)
/// the real SmolLM2 header cut at 256 KiB and its trimmed metadata.
fn gguf_seeds() -> Vec<Vec<u8>> {
    let mut seeds: Vec<Vec<u8>> = files_in(&fuzz_dir().join("seeds/gguf"))
        .iter()
        .map(|p| std::fs::read(p).unwrap())
        .collect();
    for (ty, tied) in [
        (GgmlType::Q8_0, true),
        (GgmlType::Q4_0, false),
        (GgmlType::F16, true),
    ] {
        let mut spec = SynthSpec::tiny(ty);
        spec.tied = tied;
        spec.n_layer = 1;
        seeds.push(synth_model(&spec).to_bytes());
    }
    // The IQ types (grid indices, sign patterns, packed scales): rows of 256 values, one
    // super-block each, so every block's bytes are mutated through the grid kernels.
    for ty in [GgmlType::Iq2Xxs, GgmlType::Iq1M, GgmlType::Iq3S] {
        seeds.push(
            synth_model(&SynthSpec {
                n_embd: 256,
                n_ff: 256,
                n_layer: 1,
                ..SynthSpec::tiny(ty)
            })
            .to_bytes(),
        );
    }
    // A mixture of experts: the expert keys and 3-D tensors are mutated too.
    seeds.push(
        synth_model(&SynthSpec {
            arch: locus::model::arch::Arch::Qwen3Moe,
            n_layer: 1,
            n_expert: 4,
            n_expert_used: 2,
            n_ff_exp: 32,
            ..SynthSpec::tiny(GgmlType::Q8_0)
        })
        .to_bytes(),
    );
    // Latent attention: its ranks, MLA head sizes and 3-D per-head tensors are mutated too.
    seeds.push(
        synth_model(&SynthSpec {
            n_layer: 1,
            ..SynthSpec::tiny_latent(GgmlType::Q8_0)
        })
        .to_bytes(),
    );
    // GLM-4.5's mixture: a dense first layer, shared expert, selection bias, expert groups,
    // weights scale and norm keys, and a NextN layer past the trunk.
    seeds.push(
        synth_model(&SynthSpec {
            arch: locus::model::arch::Arch::Glm4Moe,
            n_layer: 2,
            n_expert: 4,
            n_expert_used: 2,
            n_ff_exp: 32,
            n_nextn: 1,
            moe: locus::model::synth::SynthMoe {
                n_shared: 1,
                dense_lead: 1,
                groups: 2,
                groups_used: 1,
                probs_bias: true,
                weights_scale: 2.5,
                weights_norm: Some(true),
                ..Default::default()
            },
            ..SynthSpec::tiny(GgmlType::Q8_0)
        })
        .to_bytes(),
    );
    seeds.push(spm_vocab_gguf());
    if let Some(p) = common::model_path("SmolLM2-135M-Instruct.Q4_1.gguf") {
        let f = ModelFile::open(&p).unwrap();
        seeds.push(f.bytes()[..256 << 10].to_vec());
        seeds.extend(real_trimmed(f.bytes(), 600));
    }
    seeds
}

/// One mutation step: the input to change, given the corpus it may splice from.
type Mutator<'a> = dyn FnMut(&mut Rng, &mut Vec<u8>, &[Vec<u8>]) + 'a;
/// One case: an outcome signature, or the failure.
type Checker<'a> = dyn Fn(&[u8]) -> Result<String, Failure> + 'a;

/// Runs `check` on mutants of `seeds` for the configured time; saves and reports failures.
/// Inputs whose outcome signature is new join the corpus (a cheap stand-in for coverage).
fn fuzz_loop(target: &str, seeds: Vec<Vec<u8>>, mutate: &mut Mutator, check: &Checker) {
    let secs = common::fuzz_secs();
    let seed = common::fuzz_seed();
    let mut rng = Rng(seed ^ common::fnv(target.as_bytes()));
    let mut corpus = seeds;
    assert!(!corpus.is_empty(), "{target}: no seeds");
    let mut seen: HashSet<String> = HashSet::new();
    let mut failures: Vec<(PathBuf, String)> = Vec::new();
    let mut kinds_failed: std::collections::HashMap<String, u64> = Default::default();
    let start = Instant::now();
    let deadline = start + Duration::from_secs_f64(secs);
    let mut last_report = start;
    let mut execs: u64 = 0;
    while Instant::now() < deadline {
        let mut input = rng.pick(&corpus).clone();
        for _ in 0..1 + rng.below(4) {
            mutate(&mut rng, &mut input, &corpus);
        }
        execs += 1;
        match check(&input) {
            Ok(sig) => {
                if seen.insert(sig) && corpus.len() < MAX_CORPUS && input.len() <= MAX_KEPT {
                    corpus.push(input);
                }
            }
            Err(f) => {
                // Keep a few inputs per kind of failure (a systematic bug fails thousands).
                let shown = f.to_string();
                let kind: String = shown.chars().take(100).collect();
                let n = kinds_failed.entry(kind).or_insert(0);
                *n += 1;
                if *n <= 3 {
                    let p = save_regression(target, &input);
                    eprintln!(
                        "fuzz {target}: FAILURE {shown}\n  input saved to {}",
                        p.display()
                    );
                    failures.push((p, shown));
                }
            }
        }
        if last_report.elapsed() > Duration::from_secs(60) {
            last_report = Instant::now();
            eprintln!(
                "fuzz {target}: {execs} executions, {:.0}/s, corpus {}, failures {}",
                execs as f64 / start.elapsed().as_secs_f64(),
                corpus.len(),
                failures.len()
            );
        }
    }
    let el = start.elapsed().as_secs_f64();
    eprintln!(
        "fuzz {target}: seed {seed}: {execs} executions in {el:.1} s ({:.0}/s), \
         corpus {} ({} outcome kinds), failing executions {} ({} kinds)",
        execs as f64 / el,
        corpus.len(),
        seen.len(),
        kinds_failed.values().sum::<u64>(),
        kinds_failed.len()
    );
    if std::env::var_os("LOCUS_FUZZ_VERBOSE").is_some() {
        let mut kinds: Vec<&String> = seen.iter().collect();
        kinds.sort();
        for k in kinds {
            eprintln!("  outcome {k}");
        }
    }
    assert!(execs > 0, "{target}: no case ran");
    assert!(
        failures.is_empty(),
        "{target}: {} kinds of failure (inputs saved under tests/data/fuzz/regressions):\n{}",
        kinds_failed.len(),
        failures
            .iter()
            .map(|(p, f)| format!("  {}: {f}", p.display()))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

#[test]
fn fuzz_gguf() {
    fuzz_loop(
        "gguf",
        gguf_seeds(),
        &mut |rng, b, corpus| mutate_gguf_once(rng, b, corpus),
        &check_gguf,
    );
}

// ---------------------------------------------------------------------------------------------
// The tokenizer target.

/// A tokenizer under test and whether its pieces must give any text back byte for byte
/// (byte-level BPE does; llama.cpp's SentencePiece rules need not).
struct Vocab {
    name: &'static str,
    tok: Tokenizer,
    lossless: bool,
    /// Texts of its control and user-defined tokens (to plant in inputs).
    specials: Vec<Vec<u8>>,
}

fn vocab(name: &'static str, tok: Tokenizer, lossless: bool) -> Vocab {
    let specials = (0..tok.n_vocab() as u32)
        .filter(|&id| tok.is_control(id) || tok.token_text(id).is_some_and(|t| t.starts_with(b"<")))
        .filter_map(|id| tok.token_text(id).map(|t| t.to_vec()))
        .take(2000)
        .collect();
    Vocab {
        name,
        tok,
        lossless,
        specials,
    }
}

fn load_vocab(file: &str) -> Option<Tokenizer> {
    let p = common::model_path(file)?;
    let f = ModelFile::open(&p).unwrap();
    Some(Tokenizer::from_gguf(&f.gguf().unwrap()).unwrap())
}

/// Synthetic BPE and SPM vocabularies always; SmolLM2 and Gemma 3 when downloaded.
fn vocabs() -> Vec<Vocab> {
    let synth = synth_model(&SynthSpec::tiny(GgmlType::Q8_0)).to_bytes();
    let mut v = vec![
        vocab(
            "synth-bpe",
            Tokenizer::from_gguf(&Gguf::parse(&synth).unwrap()).unwrap(),
            true,
        ),
        vocab(
            "synth-spm",
            Tokenizer::from_gguf(&Gguf::parse(&spm_vocab_gguf()).unwrap()).unwrap(),
            false,
        ),
    ];
    if let Some(t) = load_vocab("SmolLM2-135M-Instruct.Q4_1.gguf") {
        v.push(vocab("smollm2", t, true));
    }
    if let Some(t) = load_vocab("gemma-3-270m-q4_k_m.gguf") {
        v.push(vocab("gemma3", t, false));
    }
    v
}

/// Whether every byte of `s` has a single-byte token (then byte-level BPE must round-trip it;
/// llama.cpp drops bytes that have none).
fn bytes_have_tokens(tok: &Tokenizer, s: &[u8]) -> bool {
    s.iter().all(|&b| {
        tok.token_id(&locus::model::synth::gpt2_byte_char(b).to_string())
            .is_some()
            || tok.token_id(&format!("<0x{b:02X}>")).is_some()
    })
}

/// Encodes and decodes `text` with every vocabulary: no panic, ids inside the vocabulary,
/// lossless round trips where the vocabulary promises them, the streaming decoder equal to
/// lossy decoding, and arbitrary (also out-of-range) ids decode.
fn check_text(vocabs: &[Vocab], text: &[u8], mode: usize) -> Result<String, Failure> {
    let mut sig = String::new();
    for v in vocabs {
        let tok = &v.tok;
        let r = run_case(|| {
            let add_special = mode & 1 != 0;
            let parse_special = mode & 2 != 0;
            let ids = tok.encode_bytes(text, add_special, parse_special);
            check_ids(tok, &ids)?;
            let back = tok.decode(&ids, true);
            let _ = tok.decode(&ids, false);
            // The streaming decoder equals lossy decoding of the concatenated pieces.
            let mut stream = Utf8Stream::new();
            let mut streamed = String::new();
            let mut raw = Vec::new();
            for &id in &ids {
                let piece = tok.token_to_piece(id, false);
                streamed += &stream.push(&piece);
                raw.extend_from_slice(&piece);
            }
            streamed += &stream.finish();
            if streamed != String::from_utf8_lossy(&raw) {
                return Err(Failure::Property(format!(
                    "{}: Utf8Stream gave {}, lossy decoding {}",
                    v.name,
                    short(streamed.as_bytes()),
                    short(&raw)
                )));
            }
            // Byte-level BPE gives any text whose bytes all have tokens back, piece by piece
            // (`decode` may then apply the model's clean-up of spaces, as llama.cpp does).
            if v.lossless
                && !add_special
                && !parse_special
                && std::str::from_utf8(text).is_ok()
                && bytes_have_tokens(tok, text)
                && raw != text
            {
                return Err(Failure::Property(format!(
                    "{}: the pieces of encode(text) differ from it: {} → {}",
                    v.name,
                    short(text),
                    short(&raw)
                )));
            }
            // The input's bytes read as token ids (out-of-range ones included).
            let junk: Vec<u32> = text
                .chunks(4)
                .map(|c| {
                    let mut w = [0u8; 4];
                    w[..c.len()].copy_from_slice(c);
                    u32::from_le_bytes(w)
                })
                .take(4096)
                .collect();
            let _ = tok.decode(&junk, true);
            let _ = tok.decode(&junk, false);
            Ok(format!("{}{}", ids.is_empty() as u8, (back == text) as u8))
        })?;
        sig += &r;
    }
    Ok(sig)
}

/// Snippets that probe the tokenizer's edges: special-token texts whole and cut, invalid
/// UTF-8, combining marks, wide and joined characters, whitespace and digit runs.
const SNIPPETS: &[&[u8]] = &[
    b"<|im_start|>",
    b"<|im_end|>",
    b"<|endoftext|>",
    b"<|im_start",
    b"<|im_",
    b"|>",
    b"<",
    b"<s>",
    b"</s>",
    b"<start_of_turn>",
    b"<end_of_turn",
    b"<unk>",
    b"<0x41>",
    b"\xe2\x96\x81",
    b"\xff",
    b"\xc0\x80",
    b"\xed\xa0\x80",
    b"\xf4\x8f\xbf\xbf",
    b"\xf4\x90\x80\x80",
    b"\xe2\x82",
    b"\xf0\x9f\x98",
    b"e\xcc\x81\xcc\x81\xcc\x81",
    "👩‍👩‍👧‍👦".as_bytes(),
    "🇫🇷".as_bytes(),
    "日本語テキスト".as_bytes(),
    "한국어".as_bytes(),
    "مرحبا".as_bytes(),
    "\u{200b}\u{200d}\u{feff}".as_bytes(),
    "\u{a0}\u{3000}\u{2028}".as_bytes(),
    b"\0",
    b"\r\n",
    b"\t\t\t",
    b"          ",
    b"\n\n\n\n",
    b"1234567890",
    b"'s 're 've 'll 'd 'm 't",
    b"'S'RE'VE",
    b"  hello  world  ",
    b"http://example.com/a?b=c&d=e",
    b"fn main() { println!(\"hi\"); }",
];

/// Seed texts: committed ones and the tokenizer test corpus.
fn text_seeds() -> Vec<Vec<u8>> {
    let mut seeds: Vec<Vec<u8>> = files_in(&fuzz_dir().join("seeds/tok"))
        .iter()
        .chain(files_in(&common::repo_path("tests/data/tokenizer/corpus")).iter())
        .map(|p| std::fs::read(p).unwrap())
        .collect();
    for s in seeds.iter_mut() {
        s.truncate(4096);
    }
    seeds.extend(SNIPPETS.iter().map(|s| s.to_vec()));
    seeds
}

fn mutate_text_once(rng: &mut Rng, t: &mut Vec<u8>, corpus: &[Vec<u8>], vocabs: &[Vocab]) {
    let p = if t.is_empty() {
        0
    } else {
        rng.below(t.len() + 1)
    };
    match rng.below(12) {
        0 => {
            if !t.is_empty() {
                let i = rng.below(t.len());
                t[i] ^= 1 << rng.below(8);
            }
        }
        1 | 2 => {
            let s = rng.pick(SNIPPETS);
            t.splice(p..p, s.iter().copied());
        }
        3 | 4 => {
            // A special token of some vocabulary, whole or cut.
            let v = rng.pick(vocabs);
            if !v.specials.is_empty() {
                let s = rng.pick(&v.specials).clone();
                let n = if rng.chance(70) {
                    s.len()
                } else {
                    rng.below(s.len() + 1)
                };
                t.splice(p..p, s[..n].iter().copied());
            }
        }
        5 => {
            // A token's own text or rendering.
            let v = rng.pick(vocabs);
            let id = rng.below(v.tok.n_vocab()) as u32;
            let s = if rng.chance(50) {
                v.tok.token_to_piece(id, true)
            } else {
                v.tok.token_text(id).unwrap_or_default().to_vec()
            };
            t.splice(p..p, s);
        }
        6 => {
            if !t.is_empty() {
                let n = rng.below((t.len() - p.min(t.len())).min(256) + 1);
                let p = p.min(t.len());
                t.drain(p..p + n);
            }
        }
        7 => {
            // Repeat a chunk many times (long runs of one class).
            if !t.is_empty() {
                let p = p.min(t.len() - 1);
                let n = 1 + rng.below((t.len() - p).min(8));
                let chunk = t[p..p + n].to_vec();
                let times = 1 << rng.below(13);
                for _ in 0..times {
                    t.splice(p..p, chunk.iter().copied());
                    if t.len() > MAX_TEXT_INPUT {
                        break;
                    }
                }
            }
        }
        8 => {
            let other = rng.pick(corpus);
            let from = rng.below(other.len() + 1);
            t.truncate(p);
            t.extend_from_slice(&other[from..]);
        }
        9 => t.truncate(p),
        10 => {
            let n = 1 + rng.below(8);
            let chunk: Vec<u8> = (0..n).map(|_| rng.next() as u8).collect();
            t.splice(p..p, chunk);
        }
        _ => {
            // A random Unicode scalar, any plane.
            let c = loop {
                if let Some(c) = char::from_u32(rng.below(0x11_0000) as u32) {
                    break c;
                }
            };
            let mut buf = [0u8; 4];
            t.splice(p..p, c.encode_utf8(&mut buf).bytes());
        }
    }
    t.truncate(MAX_TEXT_INPUT);
}

#[test]
fn fuzz_tokenizer() {
    let vocabs = vocabs();
    eprintln!(
        "fuzz tok: vocabularies {:?}",
        vocabs.iter().map(|v| v.name).collect::<Vec<_>>()
    );
    let mode = Cell::new(0usize);
    let mut pick_mode = Rng(common::fuzz_seed() ^ 0x70c);
    fuzz_loop(
        "tok",
        text_seeds(),
        &mut |rng, t, corpus| {
            mutate_text_once(rng, t, corpus, &vocabs);
            mode.set(pick_mode.below(4));
        },
        &|t| check_text(&vocabs, t, mode.get()),
    );
}

// ---------------------------------------------------------------------------------------------
// The server's readers: HTTP requests (`serve::http`) and JSON bodies (`locus::json`, then the
// API's request reader `serve::api`).

const HTTP_LIMITS: locus::serve::http::Limits = locus::serve::http::Limits {
    max_head: 4096,
    max_body: 4096,
    timeout: Duration::from_secs(5),
};

const HTTP_SNIPPETS: &[&[u8]] = &[
    b"\r\n",
    b"\r\n\r\n",
    b"\n\n",
    b"Content-Length: ",
    b"Content-Length: 99999999999999999999999",
    b"Content-Length: 4",
    b"Transfer-Encoding: chunked",
    b"Expect: 100-continue",
    b"Connection: close",
    b"Connection: keep-alive",
    b"HTTP/1.1",
    b"HTTP/1.0",
    b"HTTP/2",
    b"POST /v1/completions ",
    b"GET /health ",
    b"POST /completion ",
    b"OPTIONS /completion ",
    b"HEAD /props ",
    b"GET /slots?fail_on_no_slot=1 ",
    b"POST /slots/0?action=save ",
    b"GET /v1/models/%ff%00 ",
    b"POST /apply-template ",
    b"Origin: http://a",
    b":",
    b" ",
    b"\0",
    b"\xff\xfe",
    b"\xe2\x82",
];

const JSON_SNIPPETS: &[&[u8]] = &[
    b"{",
    b"}",
    b"[",
    b"]",
    b"\"",
    b"\\u",
    b"\\ud800",
    b"\\udc00",
    b"1e999",
    b"-0",
    b"0.5",
    b"null",
    b"true",
    b",",
    b":",
    b"\"prompt\":",
    b"\"prompt\":[1,2,999999]",
    b"\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]",
    b"{\"role\":\"assistant\",\"content\":[{\"type\":\"text\",\"text\":\"y\"}]}",
    b"\"max_tokens\":",
    b"\"stop\":[\"a\",\"\"]",
    b"\"temperature\":",
    b"\"top_k\":-1",
    b"\"top_p\":0",
    b"\"seed\":18446744073709551615",
    b"\"stream\":true",
    b"\"stream_options\":{\"include_usage\":true}",
    b"\"n\":2",
    b"\"model\":\"x\"",
    b"<|im_start|>",
    b"\xff",
    b"\"n_predict\":",
    b"\"n_probs\":5",
    b"\"id_slot\":-1",
    b"\"cache_prompt\":true",
    b"\"return_tokens\":true",
    b"\"timings_per_token\":true",
    b"\"samplers\":[\"top_k\",\"dry\"]",
    b"\"logit_bias\":[[1,false],[\"a\",-1e9]]",
    b"\"prompt\":[\"a\",[1],{\"x\":1}]",
    b"{\"role\":\"assistant\",\"content\":\"The\"}",
];

fn http_seeds() -> Vec<Vec<u8>> {
    [
        &b"GET /health HTTP/1.1\r\nHost: a\r\n\r\n"[..],
        b"POST /v1/completions HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}GET / HTTP/1.0\n\n",
        b"POST /v1/chat/completions HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello",
        b"OPTIONS /completion HTTP/1.1\r\nOrigin: http://ui\r\nAccess-Control-Request-Method: POST\r\n\r\nPOST /completion HTTP/1.1\r\nContent-Length: 15\r\n\r\n{\"prompt\":\"Hi\"}GET /slots?fail_on_no_slot=1 HTTP/1.1\r\n\r\n",
    ]
    .iter()
    .map(|s| s.to_vec())
    .collect()
}

fn json_seeds() -> Vec<Vec<u8>> {
    [
        &br#"{"prompt":"Hello","max_tokens":8,"temperature":0,"stop":["\n"],"stream":true}"#[..],
        br#"{"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hi"}],"top_p":0.9,"top_k":40,"min_p":0.05,"seed":3}"#,
        br#"{"prompt":[1,2,3],"max_completion_tokens":4,"n":1,"return_tokens":true,"model":"m"}"#,
        br#"[1,-2.5e3,"\u00e9\ud83d\ude00",{"a":{"b":[null,true,false]}}]"#,
        br#"{"prompt":[1,"Hi",2],"n_predict":-1,"id_slot":1,"cache_prompt":false,"logit_bias":[[1,false],["Hi",-2.5]],"samplers":["penalties","top_k","top_p","min_p","temperature"]}"#,
        br#"{"prompt":"x","logit_bias":{"3":1.5,"word":false},"repeat_last_n":-1,"typical_p":1,"timings_per_token":true}"#,
        br#"{"messages":[{"role":"user","content":"Hi"},{"role":"assistant","content":"The"}],"n_probs":3,"stream":true,"stream_options":{"include_usage":false}}"#,
    ]
    .iter()
    .map(|s| s.to_vec())
    .collect()
}

/// Byte mutations plus insertions of `snippets`, and splices from the corpus.
fn mutate_with(rng: &mut Rng, b: &mut Vec<u8>, corpus: &[Vec<u8>], snippets: &[&[u8]]) {
    let p = rng.below(b.len() + 1);
    match rng.below(8) {
        0 if !b.is_empty() => {
            let i = rng.below(b.len());
            b[i] ^= 1 << rng.below(8);
        }
        1 | 2 => {
            let s = rng.pick(snippets);
            b.splice(p..p, s.iter().copied());
        }
        3 if !b.is_empty() => {
            let n = 1 + rng.below(16.min(b.len() - p.min(b.len() - 1)));
            let p = p.min(b.len() - 1);
            b.drain(p..(p + n).min(b.len()));
        }
        4 => {
            let other = rng.pick(corpus);
            let q = rng.below(other.len() + 1);
            b.truncate(p);
            b.extend_from_slice(&other[q..]);
        }
        5 if !b.is_empty() && b.len() < 8192 => {
            let n = 1 + rng.below(64.min(b.len() - p.min(b.len() - 1)));
            let p = p.min(b.len() - 1);
            let piece: Vec<u8> = b[p..(p + n).min(b.len())].to_vec();
            b.splice(p..p, piece);
        }
        6 => b.truncate(p),
        _ => {
            let s = rng.pick(snippets);
            b.extend_from_slice(s);
        }
    }
    b.truncate(MAX_TEXT_INPUT);
}

/// Reads requests off the bytes until one fails; each that is read must respect the limits.
fn check_http(b: &[u8]) -> Result<String, Failure> {
    run_case(|| {
        let mut input = b;
        let mut sent = Vec::new();
        let mut sig = String::new();
        for _ in 0..8 {
            match locus::serve::http::read_request(&mut input, &mut sent, &HTTP_LIMITS) {
                Ok(r) => {
                    if r.body.len() > HTTP_LIMITS.max_body
                        || !r.path.starts_with('/')
                        || r.method.is_empty()
                    {
                        return Err(Failure::Property(format!("accepted {r:?}")));
                    }
                    sig.push_str(&format!("ok:{}:{} ", r.method, r.keep_alive));
                }
                Err(e) => {
                    sig.push_str(&format!("err:{:?}", e.status()));
                    break;
                }
            }
        }
        Ok(sig)
    })
}

/// Parses the bytes as JSON (a value must write back to itself) and reads them as both kinds
/// of generation request and as llama-server's `/completion`; none may panic.
fn check_json(b: &[u8], cx: &locus::serve::api::Context) -> Result<String, Failure> {
    use locus::json::Json;
    use locus::serve::api::{Generate, Kind};
    run_case(|| {
        let sig = match Json::parse(b) {
            Ok(v) => {
                let again = Json::parse(v.to_string().as_bytes())
                    .map_err(|e| Failure::Property(format!("{v} does not parse back: {e}")))?;
                if again != v {
                    return Err(Failure::Property(format!("{v} parses back as {again}")));
                }
                format!("json:{}", v.kind())
            }
            Err(e) => format!("bad:{}", e.what),
        };
        let mut out = sig;
        for kind in [Kind::Completion, Kind::Chat] {
            match Generate::read(kind, b, cx) {
                Ok(g) => {
                    if g.prompt.is_empty() || g.prompt.len() >= cx.ctx {
                        return Err(Failure::Property(format!(
                            "accepted a prompt of {} tokens",
                            g.prompt.len()
                        )));
                    }
                    out.push_str(" ok");
                }
                Err(e) => out.push_str(&format!(" {}:{:?}", e.status, e.param)),
            }
        }
        let o = locus::serve::native_req::LlamaOptions::default();
        match locus::serve::native_req::Completion::read(b, cx.tokenizer, cx.ctx, 2, &o) {
            Ok(c) => {
                if c.prompt.is_empty() || c.prompt.len() >= cx.ctx {
                    return Err(Failure::Property(format!(
                        "/completion accepted a prompt of {} tokens",
                        c.prompt.len()
                    )));
                }
                if c.extra.id_slot.is_some_and(|i| i >= 2) {
                    return Err(Failure::Property("accepted a slot beyond -np".into()));
                }
                out.push_str(" native-ok");
            }
            Err(e) => out.push_str(&format!(" native-{}:{:?}", e.status, e.param)),
        }
        Ok(out)
    })
}

#[test]
fn fuzz_http() {
    fuzz_loop(
        "http",
        http_seeds(),
        &mut |rng, b, corpus| mutate_with(rng, b, corpus, HTTP_SNIPPETS),
        &check_http,
    );
}

/// The tokenizer and chat template the API reader fuzz uses: SmolLM2's where downloaded
/// (ChatML), else the synthetic BPE vocabulary's (no template: chat requests are refused).
fn api_tokenizer() -> (Tokenizer, Result<locus::model::chat::ChatTemplate, String>) {
    let tok = load_vocab("SmolLM2-135M-Instruct.Q4_1.gguf").unwrap_or_else(|| {
        let synth = synth_model(&SynthSpec::tiny(GgmlType::Q8_0)).to_bytes();
        Tokenizer::from_gguf(&Gguf::parse(&synth).unwrap()).unwrap()
    });
    let t = locus::model::chat::ChatTemplate::choose(None, tok.chat_template())
        .map_err(|e| e.to_string());
    (tok, t)
}

/// Runs `f` with the API reader's context over [`api_tokenizer`] (a 64-token slot).
fn with_api_context<R>(f: impl FnOnce(&locus::serve::api::Context) -> R) -> R {
    let (tok, template) = api_tokenizer();
    let names = ["m".to_string()];
    f(&locus::serve::api::Context {
        tokenizer: &tok,
        template: template.as_ref().map_err(Clone::clone),
        model_names: &names,
        ctx: 64,
        parse_special_in_messages: false,
    })
}

#[test]
fn fuzz_json() {
    with_api_context(|cx| {
        fuzz_loop(
            "json",
            json_seeds(),
            &mut |rng, b, corpus| mutate_with(rng, b, corpus, JSON_SNIPPETS),
            &|b| check_json(b, cx),
        )
    });
}

// ---------------------------------------------------------------------------------------------
// Replays, and deterministic cases for what random mutation rarely reaches.

/// Every committed seed and every saved regression passes its target's checks.
#[test]
fn corpus_and_regressions_replay() {
    let seeds = files_in(&fuzz_dir().join("seeds/gguf"));
    let texts = files_in(&fuzz_dir().join("seeds/tok"));
    assert!(
        !seeds.is_empty() && !texts.is_empty(),
        "the committed seed corpus under tests/data/fuzz/seeds is missing"
    );
    let mut regressions = files_in(&fuzz_dir().join("regressions"));
    regressions.retain(|p| p.extension().is_some_and(|e| e == "bin"));
    let vocabs = vocabs();
    let mut bad = Vec::new();
    let mut n = 0;
    for p in seeds.iter().chain(regressions.iter().filter(|p| {
        p.file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("gguf-"))
    })) {
        let b = std::fs::read(p).unwrap();
        n += 1;
        if let Err(f) = check_gguf(&b) {
            bad.push(format!("{}: {f}", p.display()));
        }
    }
    for p in texts.iter().chain(regressions.iter().filter(|p| {
        p.file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("tok-"))
    })) {
        let b = std::fs::read(p).unwrap();
        for mode in 0..4 {
            n += 1;
            if let Err(f) = check_text(&vocabs, &b, mode) {
                bad.push(format!("{} (mode {mode}): {f}", p.display()));
            }
        }
    }
    with_api_context(|cx| {
        for p in &regressions {
            let name = p.file_name().unwrap().to_string_lossy().to_string();
            let b = std::fs::read(p).unwrap();
            let r = if name.starts_with("http-") {
                check_http(&b)
            } else if name.starts_with("json-") {
                check_json(&b, cx)
            } else {
                continue;
            };
            n += 1;
            if let Err(f) = r {
                bad.push(format!("{}: {f}", p.display()));
            }
        }
        for b in json_seeds() {
            n += 1;
            if let Err(f) = check_json(&b, cx) {
                bad.push(format!("json seed: {f}"));
            }
        }
    });
    for b in http_seeds() {
        n += 1;
        if let Err(f) = check_http(&b) {
            bad.push(format!("http seed: {f}"));
        }
    }
    eprintln!(
        "replayed {n} cases ({} seeds, {} texts, {} regressions)",
        seeds.len(),
        texts.len(),
        regressions.len()
    );
    assert!(
        bad.is_empty(),
        "failing corpus entries:\n{}",
        bad.join("\n")
    );
}

/// Builds a header: magic, version 3, the two counts, then `body`, then `pad` zero bytes.
fn header(tensors: u64, kvs: u64, body: &[u8], pad: usize) -> Vec<u8> {
    let mut b = b"GGUF".to_vec();
    b.extend_from_slice(&3u32.to_le_bytes());
    b.extend_from_slice(&tensors.to_le_bytes());
    b.extend_from_slice(&kvs.to_le_bytes());
    b.extend_from_slice(body);
    b.resize(b.len() + pad, 0);
    b
}

fn kv_prefix(key: &str, ty: u32) -> Vec<u8> {
    let mut b = (key.len() as u64).to_le_bytes().to_vec();
    b.extend_from_slice(key.as_bytes());
    b.extend_from_slice(&ty.to_le_bytes());
    b
}

/// Counts at the largest value the rest of the file could hold, in a file of a few MiB: the
/// reader must not reserve memory for items it has not read.
#[test]
fn hostile_counts_allocate_in_proportion_to_the_file() {
    const PAD: usize = 4 << 20;
    let huge = u64::MAX / 2;
    let mut cases: Vec<(&str, Vec<u8>)> = Vec::new();
    // The largest counts the reader lets through for the remaining bytes.
    cases.push(("metadata count", header(0, (PAD / 13) as u64, &[], PAD)));
    cases.push(("tensor count", header((PAD / 36) as u64, 0, &[], PAD)));
    let mut strings = kv_prefix("k", 9);
    strings.extend_from_slice(&8u32.to_le_bytes());
    strings.extend_from_slice(&((PAD / 8) as u64).to_le_bytes());
    cases.push(("string array length", header(0, 1, &strings, PAD)));
    // Arrays of arrays, each claiming as many elements as the rest of the file could hold.
    let mut nested = kv_prefix("n", 9);
    for _ in 0..7 {
        nested.extend_from_slice(&9u32.to_le_bytes());
        nested.extend_from_slice(&((PAD / 12) as u64).to_le_bytes());
    }
    nested.extend_from_slice(&8u32.to_le_bytes());
    nested.extend_from_slice(&((PAD / 8) as u64).to_le_bytes());
    cases.push(("nested array lengths", header(0, 1, &nested, PAD)));
    // And counts beyond the file must be refused outright.
    cases.push(("absurd metadata count", header(0, huge, &[], 64)));
    cases.push(("absurd tensor count", header(huge, 0, &[], 64)));
    let mut failed = Vec::new();
    for (what, bytes) in &cases {
        if let Err(f) = check_gguf(bytes) {
            failed.push(format!("{what}: {f}"));
        }
        if what.starts_with("absurd") {
            let e = Gguf::parse(bytes).expect_err(what);
            assert!(
                matches!(e.kind, locus::model::gguf::GgufErrorKind::TooLarge { .. }),
                "{what}: {e}"
            );
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

// ---------------------------------------------------------------------------------------------
// Writing the committed seed corpus (run by hand: `cargo test --release --test fuzz --
// --ignored write_seed_corpus`).

#[test]
#[ignore = "regenerates tests/data/fuzz/seeds; run by hand"]
fn write_seed_corpus() {
    let dir = fuzz_dir().join("seeds/gguf");
    std::fs::create_dir_all(&dir).unwrap();
    let mut every = GgufWriter::new();
    every.set("general.alignment", MetaValue::U32(64));
    every.set("k.u8", MetaValue::U8(200));
    every.set("k.i8", MetaValue::I8(-5));
    every.set("k.u16", MetaValue::U16(60000));
    every.set("k.i16", MetaValue::I16(-30000));
    every.set("k.u32", MetaValue::U32(4_000_000_000));
    every.set("k.i32", MetaValue::I32(-2_000_000_000));
    every.set("k.f32", MetaValue::F32(1.5));
    every.set("k.bool", MetaValue::Bool(true));
    every.set("k.str", MetaValue::str("héllo"));
    every.set("k.u64", MetaValue::U64(u64::MAX));
    every.set("k.i64", MetaValue::I64(i64::MIN));
    every.set("k.f64", MetaValue::F64(-2.25));
    every.set("k.strs", MetaValue::strs(&["a", "", "ccc"]));
    every.set("k.empty", MetaValue::Array(ValueType::I32, vec![]));
    every.set(
        "k.nested",
        MetaValue::Array(
            ValueType::Array,
            vec![MetaValue::i32s(&[1, 2]), MetaValue::i32s(&[3])],
        ),
    );
    every.add_tensor("t.a", &[32, 2], GgmlType::Q8_0, vec![7u8; 2 * 34]);
    every.add_tensor("t.b", &[3], GgmlType::F32, vec![1u8; 12]);
    every.add_tensor("t.c", &[32, 1, 1, 2], GgmlType::Q4_1, vec![3u8; 2 * 20]);
    std::fs::write(dir.join("every-type.gguf"), every.to_bytes()).unwrap();
    std::fs::write(dir.join("empty.gguf"), GgufWriter::new().to_bytes()).unwrap();
    std::fs::write(dir.join("spm-vocab.gguf"), spm_vocab_gguf()).unwrap();
    let mut spec = SynthSpec::tiny(GgmlType::Q4_0);
    spec.n_layer = 1;
    spec.n_vocab = 300;
    spec.n_embd = 32;
    spec.n_ff = 64;
    spec.n_head = 2;
    spec.n_head_kv = 1;
    std::fs::write(dir.join("synth-q4_0.gguf"), synth_model(&spec).to_bytes()).unwrap();
    if let Some(p) = common::model_path("SmolLM2-135M-Instruct.Q4_1.gguf") {
        let b = std::fs::read(p).unwrap();
        std::fs::write(dir.join("smollm2-head-64k.gguf"), &b[..64 << 10]).unwrap();
    }
}

/// Well-formed files made of the smallest possible entries: the reader keeps a (key, value)
/// pair and an index entry per metadata item and a table row per tensor, so its memory is a
/// fixed multiple of such a file's size — bounded, but above the 2× of `alloc_limit`.
#[test]
fn smallest_entries_allocate_a_bounded_multiple() {
    let n = 200_000usize;
    let key = |i: usize| format!("{i:x}");
    let mut kvs = Vec::new();
    for i in 0..n {
        kvs.extend_from_slice(&kv_prefix(&key(i), 0));
        kvs.push(0);
    }
    let mut tensors = Vec::new();
    for i in 0..n {
        let name = key(i);
        tensors.extend_from_slice(&(name.len() as u64).to_le_bytes());
        tensors.extend_from_slice(name.as_bytes());
        tensors.extend_from_slice(&1u32.to_le_bytes());
        tensors.extend_from_slice(&1u64.to_le_bytes());
        tensors.extend_from_slice(&0u32.to_le_bytes()); // F32
        tensors.extend_from_slice(&0u64.to_le_bytes());
    }
    for (what, bytes) in [
        ("tiny metadata entries", header(0, n as u64, &kvs, 64)),
        ("tiny tensor entries", header(n as u64, 0, &tensors, 64)),
    ] {
        let (r, peak) = measure(|| Gguf::parse(&bytes).map(|g| g.metadata.len() + g.tensors.len()));
        assert_eq!(r, Ok(n), "{what}");
        eprintln!(
            "{what}: {} bytes, peak {peak} bytes ({:.1}×)",
            bytes.len(),
            peak as f64 / bytes.len() as f64
        );
        // Measured 7.2× (metadata: a 48-byte (key, value) pair and a hash-index slot per
        // 17-byte entry, vectors growing by doubling) and 5.4× (tensors); 8× guards it.
        let limit = 8 * bytes.len() as u64 + ALLOC_SLACK;
        assert!(peak <= limit, "{what}: {peak} bytes > {limit}");
    }
}

/// Long runs of one kind of text, and text made only of special tokens, stay inside the CPU
/// bound with every vocabulary (the mutators reach such inputs only rarely).
#[test]
fn pathological_texts_stay_within_the_cpu_bound() {
    let vocabs = vocabs();
    let fill =
        |unit: &[u8]| -> Vec<u8> { unit.iter().copied().cycle().take(MAX_TEXT_INPUT).collect() };
    let mut texts: Vec<(String, Vec<u8>)> = [
        &b"a"[..],
        b" ",
        b"\n",
        b"7",
        b"ab",
        b"<",
        b"<|im_start|>",
        b"<|im_start",
        b"<start_of_turn>",
        b"\xff",
        b"\xe2\x96\x81",
        "\u{0301}".as_bytes(),
        "😀".as_bytes(),
        "日".as_bytes(),
        b"'s",
    ]
    .iter()
    .map(|u| {
        (
            format!("{:?} repeated", String::from_utf8_lossy(u)),
            fill(u),
        )
    })
    .collect();
    for v in &vocabs {
        let all: Vec<u8> = v.specials.concat();
        texts.push((format!("every special token of {}", v.name), fill(&all)));
    }
    let mut rng = Rng(5);
    let letters: Vec<u8> = (0..MAX_TEXT_INPUT)
        .map(|_| b'a' + rng.below(26) as u8)
        .collect();
    texts.push(("random letters, no spaces".into(), letters));
    let mut bad = Vec::new();
    for (what, t) in &texts {
        // Neither flag, and both (special tokens matched and BOS/EOS added).
        for mode in [0, 3] {
            if let Err(f) = check_text(&vocabs, t, mode) {
                bad.push(format!("{what} (mode {mode}): {f}"));
            }
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}
