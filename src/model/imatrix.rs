//! Importance matrices as llama-imatrix writes them and llama-quantize reads them
//! (`common/imatrix-loader.cpp` and `load_imatrix` in `tools/quantize/quantize.cpp`).
//!
//! Two forms:
//! - GGUF (what llama-imatrix writes by default): for every weight `W` a tensor `W.in_sum2`
//!   (F32, `[ne0, n_mat]`: the summed squares of the activations that met each column, one row
//!   per expert) and `W.counts` (F32, `[1, n_mat]`: how many activations were summed per
//!   expert), plus the metadata `imatrix.datasets` (strings), `imatrix.chunk_count` and
//!   `imatrix.chunk_size` (u32), all three required. The importance of column `i` of expert
//!   `j` is `in_sum2[j·ne0 + i] / round(counts[j])`, or 1 for an expert that saw nothing.
//! - The legacy `.dat` (`llama-imatrix --output-format dat`): an i32 entry count, then per
//!   entry an i32 name length, the name, an i32 call count `ncall`, an i32 value count and the
//!   f32 values (already divided by their counts and multiplied by `ncall`), then optionally
//!   an i32 chunk count and an i32-length dataset name. The importance is `value / ncall`
//!   (the value itself when `ncall` is 0).
//!
//! A file is read as GGUF when it starts with GGUF's magic, else as the legacy form (llama.cpp
//! tries the legacy reader on whatever its GGUF reader refuses; a damaged GGUF file is
//! reported as such here instead of as a bad legacy file). For a 3-D expert tensor the
//! weights of expert `e` are `weights[e·ne0 .. (e+1)·ne0]`.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use super::gguf::{Gguf, GgufError};
use crate::kernels::GgmlType;

/// The metadata keys of the GGUF form (`LLM_KV_IMATRIX_*`).
pub const KEY_DATASETS: &str = "imatrix.datasets";
pub const KEY_CHUNK_COUNT: &str = "imatrix.chunk_count";
pub const KEY_CHUNK_SIZE: &str = "imatrix.chunk_size";
/// Suffixes of the two tensors of one entry.
const SUMS_SUFFIX: &str = ".in_sum2";
const COUNTS_SUFFIX: &str = ".counts";
/// GGUF's magic bytes, which tell the two forms apart.
const GGUF_MAGIC: &[u8; 4] = b"GGUF";

/// An importance matrix, normalised as llama-quantize uses it.
#[derive(Clone, Debug, PartialEq)]
pub struct Imatrix {
    /// Per weight name, the importance of every column (`n_mat · ne0` values, expert-major).
    pub entries: BTreeMap<String, Vec<f32>>,
    /// The text files it was computed on (the GGUF form's list; the legacy form's one name).
    pub datasets: Vec<String>,
    /// Chunks it was computed on (0 when the legacy file does not say).
    pub chunk_count: u32,
    /// Whether it came from a legacy `.dat` file.
    pub legacy: bool,
}

/// Why an importance matrix could not be read; each is one line naming the file.
#[derive(Debug)]
pub enum ImatrixError {
    Io {
        path: PathBuf,
        err: std::io::Error,
    },
    /// A file starting with GGUF's magic that is no valid GGUF file.
    Gguf {
        path: PathBuf,
        err: GgufError,
    },
    /// Neither form: the legacy reader ran out of bytes or met an impossible count.
    NotImatrix {
        path: PathBuf,
        why: String,
    },
    /// A GGUF file without the metadata llama-imatrix writes.
    MissingMetadata {
        path: PathBuf,
        key: &'static str,
    },
    /// A GGUF file without a single entry.
    Empty {
        path: PathBuf,
    },
    /// An entry that is not as llama-imatrix writes it (a lone `.in_sum2`, a non-F32 tensor,
    /// sums that are not whole rows per count…).
    BadEntry {
        path: PathBuf,
        name: String,
        why: String,
    },
    /// A weight that is NaN or infinite (llama-quantize refuses the file too).
    NonFinite {
        path: PathBuf,
        name: String,
        index: usize,
        value: f32,
    },
}

impl fmt::Display for ImatrixError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ImatrixError::Io { path, err } => {
                write!(
                    f,
                    "{}: cannot read the importance matrix: {err}",
                    path.display()
                )
            }
            ImatrixError::Gguf { path, err } => write!(
                f,
                "{}: not a valid imatrix GGUF file: {err}",
                path.display()
            ),
            ImatrixError::NotImatrix { path, why } => write!(
                f,
                "{}: not an importance matrix (neither GGUF nor llama-imatrix's .dat form: {why})",
                path.display()
            ),
            ImatrixError::MissingMetadata { path, key } => write!(
                f,
                "{}: missing imatrix metadata '{key}' (not a file written by llama-imatrix?)",
                path.display()
            ),
            ImatrixError::Empty { path } => {
                write!(
                    f,
                    "{}: the importance matrix has no entries",
                    path.display()
                )
            }
            ImatrixError::BadEntry { path, name, why } => {
                write!(f, "{}: imatrix entry '{name}' {why}", path.display())
            }
            ImatrixError::NonFinite {
                path,
                name,
                index,
                value,
            } => write!(
                f,
                "{}: imatrix entry '{name}' holds the non-finite value {value} at {index}",
                path.display()
            ),
        }
    }
}

impl std::error::Error for ImatrixError {}

impl Imatrix {
    /// Reads an importance matrix file (either form; module docs).
    pub fn load(path: &Path) -> Result<Imatrix, ImatrixError> {
        let bytes = std::fs::read(path).map_err(|err| ImatrixError::Io {
            path: path.into(),
            err,
        })?;
        Self::parse(&bytes, path)
    }

    /// Reads an importance matrix from its bytes; `path` names it in errors.
    pub fn parse(bytes: &[u8], path: &Path) -> Result<Imatrix, ImatrixError> {
        let m = if bytes.starts_with(GGUF_MAGIC) {
            parse_gguf(bytes, path)?
        } else {
            parse_legacy(bytes, path)?
        };
        // llama-quantize checks the normalised values.
        for (name, w) in &m.entries {
            if let Some((index, &value)) = w.iter().enumerate().find(|(_, v)| !v.is_finite()) {
                return Err(ImatrixError::NonFinite {
                    path: path.into(),
                    name: name.clone(),
                    index,
                    value,
                });
            }
        }
        Ok(m)
    }

    /// llama-quantize's `--include-weights`/`--exclude-weights`: drops every entry whose name
    /// contains one of `exclude`, then (if `include` is not empty) keeps only those whose name
    /// contains one of `include`.
    pub fn filter(&mut self, include: &[String], exclude: &[String]) {
        self.entries
            .retain(|name, _| !exclude.iter().any(|s| name.contains(s.as_str())));
        if !include.is_empty() {
            self.entries
                .retain(|name, _| include.iter().any(|s| name.contains(s.as_str())));
        }
    }

    /// The weights of tensor `name`, if the matrix has them.
    pub fn get(&self, name: &str) -> Option<&[f32]> {
        self.entries.get(name).map(Vec::as_slice)
    }
}

/// The weights of row `row` of a tensor with `nrows_per_expert` rows per expert (`ne[1]`) and
/// `n_per_row` columns, from its entry (`n_mat · n_per_row` values): llama-quantize's
/// `imatrix + (row / nrows_per_expert) * n_per_row`.
pub fn row_weights(entry: &[f32], row: usize, nrows_per_expert: usize, n_per_row: usize) -> &[f32] {
    let start = row / nrows_per_expert.max(1) * n_per_row;
    &entry[start..start + n_per_row]
}

fn parse_gguf(bytes: &[u8], path: &Path) -> Result<Imatrix, ImatrixError> {
    let g = Gguf::parse(bytes).map_err(|err| ImatrixError::Gguf {
        path: path.into(),
        err,
    })?;
    if g.tensors.is_empty() {
        return Err(ImatrixError::Empty { path: path.into() });
    }
    let missing = |key| ImatrixError::MissingMetadata {
        path: path.into(),
        key,
    };
    let u32_key = |key: &'static str| -> Result<u32, ImatrixError> {
        let v = g.get(key).ok_or_else(|| missing(key))?;
        match v {
            super::gguf::Value::U32(n) => Ok(*n),
            other => Err(ImatrixError::BadEntry {
                path: path.into(),
                name: key.into(),
                why: format!("is a {}, not a u32", other.type_name()),
            }),
        }
    };
    let datasets_value = g.get(KEY_DATASETS).ok_or_else(|| missing(KEY_DATASETS))?;
    let chunk_count = u32_key(KEY_CHUNK_COUNT)?;
    u32_key(KEY_CHUNK_SIZE)?;
    // As llama.cpp: only an array of strings is read; each string ends at its first NUL.
    let datasets = datasets_value
        .as_array()
        .and_then(|a| a.as_strings())
        .map(|s| {
            s.iter()
                .map(|b| {
                    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
                    String::from_utf8_lossy(&b[..end]).into_owned()
                })
                .collect()
        })
        .unwrap_or_default();
    // name → (in_sum2, counts)
    type Pair<'t, 'a> = (
        Option<&'t super::gguf::TensorInfo<'a>>,
        Option<&'t super::gguf::TensorInfo<'a>>,
    );
    let mut pairs: BTreeMap<&str, Pair<'_, '_>> = BTreeMap::new();
    for t in &g.tensors {
        if let Some(base) = t.name.strip_suffix(SUMS_SUFFIX) {
            pairs.entry(base).or_default().0 = Some(t);
        } else if let Some(base) = t.name.strip_suffix(COUNTS_SUFFIX) {
            pairs.entry(base).or_default().1 = Some(t);
        }
    }
    let mut entries = BTreeMap::new();
    for (name, pair) in pairs {
        let bad = |why: String| ImatrixError::BadEntry {
            path: path.into(),
            name: name.into(),
            why,
        };
        let (Some(sums), Some(counts)) = pair else {
            return Err(bad(format!(
                "has no matching {} tensor",
                if pair.0.is_none() {
                    SUMS_SUFFIX
                } else {
                    COUNTS_SUFFIX
                }
            )));
        };
        for t in [sums, counts] {
            if t.ty != GgmlType::F32 {
                return Err(bad(format!("has {} as {}, not F32", t.name, t.ty.name())));
            }
        }
        let sums = f32s(sums.data);
        let counts = f32s(counts.data);
        if counts.is_empty() || sums.is_empty() || !sums.len().is_multiple_of(counts.len()) {
            return Err(bad(format!(
                "has {} sums for {} counts (not whole rows)",
                sums.len(),
                counts.len()
            )));
        }
        let ne0 = sums.len() / counts.len();
        let mut w = vec![0f32; sums.len()];
        for ((out, sum), &c) in w
            .chunks_exact_mut(ne0)
            .zip(sums.chunks_exact(ne0))
            .zip(&counts)
        {
            // std::lround into an int64, then back to float.
            let count = c.round() as i64 as f32;
            if count > 0.0 {
                for (o, s) in out.iter_mut().zip(sum) {
                    *o = s / count;
                }
            } else {
                out.fill(1.0);
            }
        }
        entries.insert(name.to_string(), w);
    }
    Ok(Imatrix {
        entries,
        datasets,
        chunk_count,
        legacy: false,
    })
}

/// The f32 values of a little-endian F32 tensor's bytes.
fn f32s(data: &[u8]) -> Vec<f32> {
    data.chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}

/// A cursor over a legacy file: every read names what it read, for the error.
struct Legacy<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Legacy<'a> {
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], String> {
        let rest = &self.bytes[self.pos..];
        if rest.len() < n {
            return Err(format!(
                "the file ends at byte {} while reading {what}",
                self.bytes.len()
            ));
        }
        self.pos += n;
        Ok(&rest[..n])
    }

    fn i32(&mut self, what: &str) -> Result<i32, String> {
        let b = self.take(4, what)?;
        Ok(i32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// A positive count that the rest of the file can hold `unit` bytes of each.
    fn count(&mut self, what: &str, unit: usize, zero_ok: bool) -> Result<usize, String> {
        let at = self.pos;
        let n = self.i32(what)?;
        let left = self.bytes.len() - self.pos;
        if n < i32::from(!zero_ok) || (n as usize).saturating_mul(unit) > left {
            return Err(format!("{what} at byte {at} is {n}"));
        }
        Ok(n as usize)
    }
}

fn parse_legacy(bytes: &[u8], path: &Path) -> Result<Imatrix, ImatrixError> {
    let not = |why: String| ImatrixError::NotImatrix {
        path: path.into(),
        why,
    };
    let mut r = Legacy { bytes, pos: 0 };
    // Each entry takes at least its three counts and one value.
    const MIN_ENTRY: usize = 16;
    let n_entries = r.count("the entry count", MIN_ENTRY, false).map_err(not)?;
    let mut entries = BTreeMap::new();
    for i in 0..n_entries {
        let len = r
            .count(&format!("the name length of entry {}", i + 1), 1, true)
            .map_err(not)?;
        let raw = r.take(len, "a name").map_err(not)?;
        // A C string: the name ends at its first NUL.
        let raw = &raw[..raw.iter().position(|&c| c == 0).unwrap_or(raw.len())];
        let name = std::str::from_utf8(raw)
            .map_err(|_| not(format!("the name of entry {} is not UTF-8", i + 1)))?
            .to_string();
        let ncall = r.i32("a call count").map_err(not)?;
        let nval = r
            .count(&format!("the value count of '{name}'"), 4, false)
            .map_err(not)?;
        let sums = f32s(r.take(nval * 4, "the values").map_err(not)?);
        let w = if ncall > 0 {
            sums.iter().map(|s| s / ncall as f32).collect()
        } else {
            sums
        };
        entries.insert(name, w);
    }
    let (mut chunk_count, mut datasets) = (0, Vec::new());
    if r.pos < bytes.len() {
        let n = r.i32("the chunk count").map_err(not)?;
        // llama.cpp keeps an int; a negative count is no count.
        chunk_count = u32::try_from(n).unwrap_or(0);
        let len = r.count("the dataset name length", 1, true).map_err(not)?;
        let raw = r.take(len, "the dataset name").map_err(not)?;
        let raw = &raw[..raw.iter().position(|&c| c == 0).unwrap_or(raw.len())];
        if len > 0 {
            datasets.push(String::from_utf8_lossy(raw).into_owned());
        }
        if r.pos != bytes.len() {
            return Err(not(format!(
                "{} bytes follow the dataset name",
                bytes.len() - r.pos
            )));
        }
    }
    Ok(Imatrix {
        entries,
        datasets,
        chunk_count,
        legacy: true,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn legacy_bytes(entries: &[(&str, i32, &[f32])], tail: Option<(i32, &str)>) -> Vec<u8> {
        let mut b = (entries.len() as i32).to_le_bytes().to_vec();
        for (name, ncall, vals) in entries {
            b.extend((name.len() as i32).to_le_bytes());
            b.extend(name.as_bytes());
            b.extend(ncall.to_le_bytes());
            b.extend((vals.len() as i32).to_le_bytes());
            for v in *vals {
                b.extend(v.to_le_bytes());
            }
        }
        if let Some((chunks, ds)) = tail {
            b.extend(chunks.to_le_bytes());
            b.extend((ds.len() as i32).to_le_bytes());
            b.extend(ds.as_bytes());
        }
        b
    }

    #[test]
    fn legacy_values_are_divided_by_their_call_count() {
        let p = Path::new("m.dat");
        let b = legacy_bytes(
            &[("a.weight", 4, &[8.0, 2.0]), ("b.weight", 0, &[3.0])],
            Some((7, "wiki.txt")),
        );
        let m = Imatrix::parse(&b, p).unwrap();
        assert!(m.legacy);
        assert_eq!(m.get("a.weight"), Some(&[2.0, 0.5][..]));
        assert_eq!(m.get("b.weight"), Some(&[3.0][..]));
        assert_eq!(
            (m.chunk_count, m.datasets.clone()),
            (7, vec!["wiki.txt".into()])
        );
        // The tail is optional.
        let b = legacy_bytes(&[("a.weight", 1, &[1.0])], None);
        let m = Imatrix::parse(&b, p).unwrap();
        assert_eq!((m.chunk_count, m.datasets.len()), (0, 0));
    }

    #[test]
    fn bad_legacy_files_are_one_line_errors() {
        let p = Path::new("m.dat");
        let good = legacy_bytes(&[("a.weight", 4, &[8.0, 2.0])], Some((7, "x")));
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (Vec::new(), "ends"),
            (b"hello, this is text".to_vec(), "entry count"),
            (good[..good.len() - 10].to_vec(), "value count"),
            (good[..good.len() - 3].to_vec(), "dataset name length"),
            ([good.clone(), vec![0]].concat(), "follow"),
            (legacy_bytes(&[("a.weight", 1, &[])], None), "value count"),
            (
                legacy_bytes(&[("a.weight", 1, &[f32::NAN])], None),
                "non-finite",
            ),
            (
                legacy_bytes(&[("a.weight", 1, &[f32::INFINITY])], None),
                "non-finite",
            ),
        ];
        for (bytes, want) in cases {
            let e = Imatrix::parse(&bytes, p).unwrap_err().to_string();
            assert!(e.contains(want) && e.starts_with("m.dat: "), "{want}: {e}");
            assert!(!e.contains('\n'), "{e}");
        }
    }

    #[test]
    fn filters_are_substrings_exclude_first() {
        let b = legacy_bytes(
            &[
                ("blk.0.attn_q.weight", 1, &[1.0]),
                ("blk.0.ffn_down.weight", 1, &[1.0]),
                ("output.weight", 1, &[1.0]),
            ],
            None,
        );
        let m = Imatrix::parse(&b, Path::new("m")).unwrap();
        let names = |m: &Imatrix| m.entries.keys().cloned().collect::<Vec<_>>();
        let mut a = m.clone();
        a.filter(&[], &["attn".into()]);
        assert_eq!(names(&a), ["blk.0.ffn_down.weight", "output.weight"]);
        let mut a = m.clone();
        a.filter(&["blk.0".into()], &[]);
        assert_eq!(names(&a), ["blk.0.attn_q.weight", "blk.0.ffn_down.weight"]);
    }

    #[test]
    fn expert_rows_take_their_expert_slice() {
        let entry: Vec<f32> = (0..12).map(|i| i as f32).collect();
        // 3 experts of 2 rows of 4 columns.
        assert_eq!(row_weights(&entry, 0, 2, 4), [0.0, 1.0, 2.0, 3.0]);
        assert_eq!(row_weights(&entry, 1, 2, 4), [0.0, 1.0, 2.0, 3.0]);
        assert_eq!(row_weights(&entry, 2, 2, 4), [4.0, 5.0, 6.0, 7.0]);
        assert_eq!(row_weights(&entry, 5, 2, 4), [8.0, 9.0, 10.0, 11.0]);
    }

    /// An imatrix GGUF as llama-imatrix writes it, with `entries` of (name, sums, counts).
    fn gguf_bytes(entries: &[(&str, &[f32], &[f32])], keys: &[&str]) -> Vec<u8> {
        use crate::model::gguf_write::{GgufWriter, MetaValue};
        let mut w = GgufWriter::new();
        w.set("general.type", MetaValue::str("imatrix"));
        for &k in keys {
            match k {
                KEY_DATASETS => w.set(k, MetaValue::strs(&["a.txt", "b.txt"])),
                _ => w.set(k, MetaValue::U32(3)),
            }
        }
        let bytes = |v: &[f32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
        for (name, sums, counts) in entries {
            let n = counts.len() as u64;
            let len = sums.len() as u64;
            let sums_dims = if len.is_multiple_of(n.max(1)) {
                [len / n.max(1), n]
            } else {
                [len, 1]
            };
            w.add_tensor(
                &format!("{name}.in_sum2"),
                &sums_dims,
                GgmlType::F32,
                bytes(sums),
            );
            w.add_tensor(
                &format!("{name}.counts"),
                &[1, n],
                GgmlType::F32,
                bytes(counts),
            );
        }
        w.to_bytes()
    }

    const ALL_KEYS: [&str; 3] = [KEY_DATASETS, KEY_CHUNK_COUNT, KEY_CHUNK_SIZE];

    #[test]
    fn gguf_sums_are_divided_by_each_experts_count() {
        let p = Path::new("m.gguf");
        // Two experts of 2 columns: the second saw nothing (weights 1); counts are rounded.
        let b = gguf_bytes(
            &[
                (
                    "blk.0.ffn_up_exps.weight",
                    &[6.0, 3.0, 5.0, 7.0],
                    &[2.6, 0.0],
                ),
                ("blk.0.attn_q.weight", &[4.0, 2.0], &[2.0]),
            ],
            &ALL_KEYS,
        );
        let m = Imatrix::parse(&b, p).unwrap();
        assert!(!m.legacy);
        assert_eq!(
            m.get("blk.0.ffn_up_exps.weight"),
            Some(&[2.0, 1.0, 1.0, 1.0][..])
        );
        assert_eq!(m.get("blk.0.attn_q.weight"), Some(&[2.0, 1.0][..]));
        assert_eq!(m.chunk_count, 3);
        assert_eq!(m.datasets, ["a.txt", "b.txt"]);
    }

    #[test]
    fn bad_gguf_files_are_one_line_errors() {
        let p = Path::new("m.gguf");
        let ok: &[(&str, &[f32], &[f32])] = &[("a.weight", &[1.0, 2.0], &[1.0])];
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (
                gguf_bytes(ok, &[KEY_DATASETS, KEY_CHUNK_SIZE]),
                "missing imatrix metadata 'imatrix.chunk_count'",
            ),
            (
                gguf_bytes(ok, &[KEY_CHUNK_COUNT, KEY_CHUNK_SIZE]),
                "missing imatrix metadata 'imatrix.datasets'",
            ),
            (gguf_bytes(&[], &ALL_KEYS), "no entries"),
            (
                gguf_bytes(&[("a.weight", &[1.0, 2.0, 3.0], &[1.0, 1.0])], &ALL_KEYS),
                "not whole rows",
            ),
            (
                gguf_bytes(&[("a.weight", &[f32::NAN, 2.0], &[1.0])], &ALL_KEYS),
                "non-finite",
            ),
            (
                gguf_bytes(ok, &ALL_KEYS)[..40].to_vec(),
                "not a valid imatrix GGUF",
            ),
        ];
        for (bytes, want) in cases {
            let e = Imatrix::parse(&bytes, p).unwrap_err().to_string();
            assert!(e.contains(want) && e.starts_with("m.gguf: "), "{want}: {e}");
        }
        // A lone half of a pair, and a tensor of another type.
        use crate::model::gguf_write::{GgufWriter, MetaValue};
        let mut w = GgufWriter::new();
        w.set(KEY_DATASETS, MetaValue::strs(&["a"]));
        w.set(KEY_CHUNK_COUNT, MetaValue::U32(1));
        w.set(KEY_CHUNK_SIZE, MetaValue::U32(1));
        w.add_tensor("a.weight.in_sum2", &[2], GgmlType::F32, vec![0; 8]);
        let e = Imatrix::parse(&w.to_bytes(), p).unwrap_err().to_string();
        assert!(e.contains("'a.weight' has no matching .counts"), "{e}");
        w.add_tensor("a.weight.counts", &[1], GgmlType::F16, vec![0; 2]);
        let e = Imatrix::parse(&w.to_bytes(), p).unwrap_err().to_string();
        assert!(e.contains("not F32"), "{e}");
    }
}
