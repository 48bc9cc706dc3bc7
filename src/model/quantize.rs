//! `locus quantize`: rewrite a model's weights as `llama-quantize --allow-requantize [OPTIONS]`
//! does, so that the output file equals llama.cpp's byte for byte (tensor data, types, tensor
//! order and metadata):
//!
//! - which tensors are quantized, the type of each (the preset's mixture rules, or its one
//!   type under `--pure`, the `--tensor-type`/`--output-tensor-type`/`--token-embedding-type`
//!   overrides, then the row-length fallbacks) and the tensor order come from [`MixPlan`] (see
//!   `quant_mix`);
//! - a tensor whose planned type is the one it already has is copied as it is; any other is
//!   dequantized to f32 row by row and requantized with ggml's quantizers
//!   ([`quantize_row_weighted`]): with an importance matrix (`--imatrix`, see `imatrix`), each
//!   row with the weights of its tensor's entry (row `r` of a 3-D expert tensor with `ne[1]`
//!   rows per expert takes expert `r / ne[1]`'s), else the reference quantizers;
//! - as llama-quantize, the plan is refused when a tensor would be in a very-low-bit type
//!   without a matrix, or the matrix lacks it, or holds another size for a tensor (the token
//!   embeddings excepted: they are quantized without); a type locus has no quantizer for is
//!   refused by name. All of it before the output is created;
//! - the metadata is the input's, with `general.quantization_version` (2) and then
//!   `general.file_type` (the preset's number) moved to the end, as gguf's setters append, then
//!   with a matrix `quantize.imatrix.file`, `.dataset`, `.entries_count` and `.chunks_count`
//!   (llama-quantize's overrides); the split keys dropped; tensor dimensions are written
//!   without trailing 1s, as gguf does.
//!
//! The float targets (F16, BF16, F32) have no mixture and no fallbacks: every quantizable
//! tensor becomes that type (llama-quantize applies neither to a non-quantized type), but the
//! output and token embedding overrides still apply.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use super::error::ModelError;
use super::gguf::TensorInfo;
use super::gguf_write::{GgufStream, MetaValue, TensorEntry};
use super::imatrix::{row_weights, Imatrix};
use super::quant_mix::{MixOptions, MixPlan, ModelShape, Preset, Scheme};
use super::ModelFile;
use crate::kernels::{dequantize_row, GgmlType};

/// llama.cpp's `llama_ftype` for a model whose weights are "mostly" of `ty`.
pub fn file_type_code(ty: GgmlType) -> Option<u32> {
    Some(match ty {
        GgmlType::F32 => 0,
        GgmlType::F16 => 1,
        GgmlType::Q4_0 => 2,
        GgmlType::Q4_1 => 3,
        GgmlType::Q8_0 => 7,
        GgmlType::Q5_0 => 8,
        GgmlType::Q5_1 => 9,
        GgmlType::Q2K => 10,
        // The K-quants as llama.cpp's loader names a file mostly of one of them (the _M mix).
        GgmlType::Q3K => 12,
        GgmlType::Q4K => 15,
        GgmlType::Q5K => 17,
        GgmlType::Q6K => 18,
        GgmlType::Iq2Xxs => 19,
        GgmlType::Iq2Xs => 20,
        GgmlType::Iq3Xxs => 23,
        GgmlType::Iq1S => 24,
        GgmlType::Iq2S => 28,
        GgmlType::Iq1M => 31,
        GgmlType::Iq3S => 26,
        GgmlType::Iq4Nl => 25,
        GgmlType::Iq4Xs => 30,
        GgmlType::Bf16 => 32,
        // llama.cpp names only the mixture-of-experts preset (`MOSTLY_MXFP4_MOE`).
        GgmlType::Mxfp4 => 38,
        _ => return None,
    })
}

/// Quantizes one f32 row into `ty` with the reference quantizers (the type table's codec).
///
/// # Panics
/// For a type locus has no quantizer for, or a row that is not whole blocks.
pub fn quantize_row(ty: GgmlType, x: &[f32]) -> Vec<u8> {
    quantize_row_weighted(ty, x, None)
}

/// Quantizes one f32 row into `ty` as llama-quantize does with an importance matrix: `weights`
/// holds the row's importance per column (`x.len()` values), or is `None` for no matrix.
///
/// # Panics
/// For a type locus has no quantizer for, a row that is not whole blocks, or weights of
/// another length.
pub fn quantize_row_weighted(ty: GgmlType, x: &[f32], weights: Option<&[f32]>) -> Vec<u8> {
    if let Some(w) = weights {
        assert_eq!(w.len(), x.len(), "quantize_row: one weight per column");
    }
    match ty.codec() {
        Some(c) => (c.quantize)(x, weights),
        None => panic!("quantize_row: no quantizer for {}", ty.name()),
    }
}

/// What `locus quantize` writes: one of llama-quantize's presets (a quantized type or a
/// mixture such as `Q4_K_M`), or a float type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    Preset(Preset),
    /// F16, BF16 or F32: every quantizable tensor in that type, no mixture, no fallback.
    Float(GgmlType),
}

/// The float targets with their `llama_ftype`, after the presets in llama-quantize's listing.
const FLOATS: [(GgmlType, u32); 3] = [(GgmlType::F16, 1), (GgmlType::Bf16, 32), (GgmlType::F32, 0)];

/// Every name `TYPE` may be (in any case), in llama-quantize's listing order; the aliases
/// `Q3_K`, `Q4_K`, `Q5_K` (= their `_M` mixture) and the `llama_ftype` numbers are taken too.
pub const TARGETS: [&str; 31] = [
    "Q4_0",
    "Q4_1",
    "MXFP4_MOE",
    "Q5_0",
    "Q5_1",
    "IQ2_XXS",
    "IQ2_XS",
    "IQ2_S",
    "IQ2_M",
    "IQ1_S",
    "IQ1_M",
    "Q2_K",
    "Q2_K_S",
    "IQ3_XXS",
    "IQ3_S",
    "IQ3_M",
    "IQ3_XS",
    "Q3_K_S",
    "Q3_K_M",
    "Q3_K_L",
    "IQ4_NL",
    "IQ4_XS",
    "Q4_K_S",
    "Q4_K_M",
    "Q5_K_S",
    "Q5_K_M",
    "Q6_K",
    "Q8_0",
    "F16",
    "BF16",
    "F32",
];

impl Target {
    /// Parses `TYPE` as llama-quantize does: a name in any case (`q4_k_m`, `bf16`), an alias
    /// (`Q4_K`), or a `llama_ftype` number (`15`).
    pub fn parse(s: &str) -> Option<Target> {
        if let Some((ty, _)) = FLOATS
            .iter()
            .find(|(t, _)| t.name().eq_ignore_ascii_case(s))
        {
            return Some(Target::Float(*ty));
        }
        if let Some(p) = Preset::parse(s) {
            return Some(Target::Preset(p));
        }
        let code: u32 = s.parse().ok()?;
        FLOATS
            .iter()
            .find(|(_, c)| *c == code)
            .map(|(t, _)| Target::Float(*t))
    }

    /// The name llama-quantize prints for it (`Q4_K_M`, `F16`).
    pub fn name(self) -> &'static str {
        match self {
            Target::Preset(p) => p.name(),
            Target::Float(t) => t.name(),
        }
    }

    /// The `llama_ftype` written as `general.file_type`.
    pub fn file_type(self) -> u32 {
        match self {
            Target::Preset(p) => p.file_type(),
            Target::Float(t) => FLOATS.iter().find(|(f, _)| *f == t).map_or(0, |(_, c)| *c),
        }
    }

    /// The type the tensors start from: the preset's default type, or the float type.
    pub fn base_type(self) -> GgmlType {
        match self {
            Target::Preset(p) => p.default_type(),
            Target::Float(t) => t,
        }
    }
}

/// Bytes of an unchanged tensor copied between two looks at the stop flag.
const COPY_PIECE: usize = 16 << 20;

/// Output bytes quantized per slab: the rows of a slab are shared among the threads, then
/// written in order. Small enough that memory stays a few MiB, large enough that starting the
/// threads costs nothing next to the work.
const SLAB_BYTES: usize = 4 << 20;

/// Keys llama-quantize drops (`gguf_remove_key` of the split keys).
const SPLIT_KEYS: [&str; 3] = ["split.no", "split.count", "split.tensors.count"];
/// `GGML_QNT_VERSION`, written as `general.quantization_version`.
const QNT_VERSION: u32 = 2;

/// One tensor of the output: its source, and the type to write it in (its own: a copy).
struct Job<'a> {
    tensor: &'a TensorInfo<'a>,
    ty: GgmlType,
    /// The tensor's importance weights (`ne[2]` experts × `ne[0]` columns), if any.
    weights: Option<&'a [f32]>,
}

impl Job<'_> {
    fn quantize(&self) -> bool {
        self.ty != self.tensor.ty
    }
}

/// The dimensions gguf writes: without trailing 1s (`ggml_n_dims`), at least one.
fn written_dims(dims: &[u64]) -> Vec<u64> {
    let n = dims.iter().rposition(|&d| d > 1).map_or(1, |i| i + 1);
    (0..n).map(|i| dims.get(i).copied().unwrap_or(1)).collect()
}

/// The plan of `g` under `target` ([`MixPlan`]).
fn plan(g: &super::Gguf<'_>, target: Target, opts: &MixOptions) -> Result<MixPlan, ModelError> {
    let mix_err = |e: super::quant_mix::MixError| ModelError::Quantize(e.to_string());
    let tensors = g.tensors.iter().map(|t| (t.name, t.dims.as_slice()));
    let (scheme, shape) = match target {
        // The mixture rules need the model's shape; --pure and the floats do not.
        Target::Preset(p) if !opts.pure => (
            Scheme::Preset(p),
            ModelShape::from_gguf(g).map_err(mix_err)?,
        ),
        Target::Preset(p) => (Scheme::Preset(p), ModelShape::new("", 0, 0, 0, 0)),
        Target::Float(f) => (Scheme::Float(f), ModelShape::new("", 0, 0, 0, 0)),
    };
    MixPlan::new(scheme, &shape, opts, tensors).map_err(mix_err)
}

/// An importance matrix for `locus quantize --imatrix`, as llama-quantize applies it.
#[derive(Clone, Debug)]
pub struct ImatrixInput {
    /// The matrix, after `--include-weights`/`--exclude-weights`.
    pub matrix: Imatrix,
    /// The file name as given on the command line (written as `quantize.imatrix.file`).
    pub file: Vec<u8>,
}

/// The metadata llama-quantize adds for an importance matrix (its `--override-kv` pairs).
const KEY_IMATRIX_FILE: &str = "quantize.imatrix.file";
const KEY_IMATRIX_DATASET: &str = "quantize.imatrix.dataset";
const KEY_IMATRIX_ENTRIES: &str = "quantize.imatrix.entries_count";
const KEY_IMATRIX_CHUNKS: &str = "quantize.imatrix.chunks_count";
/// The longest string an override holds (`char val_str[128]`, NUL included).
const OVERRIDE_STR_MAX: usize = 127;

/// The `quantize.imatrix.*` pairs, in llama-quantize's order.
fn imatrix_metadata(m: &ImatrixInput) -> Vec<(String, MetaValue)> {
    let clip = |b: &[u8]| {
        let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
        MetaValue::Str(b[..end.min(OVERRIDE_STR_MAX)].to_vec())
    };
    let mut kv = vec![(KEY_IMATRIX_FILE.to_string(), clip(&m.file))];
    if let Some(d) = m.matrix.datasets.first() {
        kv.push((KEY_IMATRIX_DATASET.into(), clip(d.as_bytes())));
    }
    let entries = u32::try_from(m.matrix.entries.len()).unwrap_or(u32::MAX);
    kv.push((KEY_IMATRIX_ENTRIES.into(), MetaValue::U32(entries)));
    if m.matrix.chunk_count > 0 {
        kv.push((
            KEY_IMATRIX_CHUNKS.into(),
            MetaValue::U32(m.matrix.chunk_count),
        ));
    }
    kv
}

/// What `quantize_file` did that the user may want to know.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QuantizeReport {
    /// Tensors quantized without importance weights although a matrix was given (it has no
    /// entry for them; for the token embeddings, also one of another size), as llama-quantize
    /// reports "did not find weights".
    pub without_weights: Vec<String>,
}

/// Rewrites `input` into `output` under `target` (module docs), with `threads` threads
/// quantizing the rows of each slab, each row with its importance weights when `imatrix` has
/// them. The output is streamed tensor by tensor, slab by slab ([`GgufStream`]), so memory
/// stays a few MiB whatever the model's size (the input is read through its mapping). Every
/// check happens before the output is created; `stop` (Ctrl-C) ends the work between slabs,
/// leaving nothing behind.
pub fn quantize_file(
    input: &Path,
    output: &Path,
    target: Target,
    opts: &MixOptions,
    imatrix: Option<&ImatrixInput>,
    threads: usize,
    stop: &AtomicBool,
) -> Result<QuantizeReport, ModelError> {
    let file = ModelFile::open(input)?;
    let g = file.gguf()?;
    // The writer pads every tensor to general.alignment: a huge power of two (legal in GGUF)
    // would make it allocate and write gigabytes.
    const MAX_WRITE_ALIGNMENT: u64 = 1 << 16;
    if g.alignment > MAX_WRITE_ALIGNMENT {
        return Err(ModelError::BadKey {
            key: "general.alignment".into(),
            why: format!(
                "= {} is larger than locus writes ({MAX_WRITE_ALIGNMENT})",
                g.alignment
            ),
        });
    }
    // llama-quantize uses a matrix only if an entry is left after the filters.
    let imatrix = imatrix.filter(|m| !m.matrix.entries.is_empty());
    let opts = MixOptions {
        has_imatrix: imatrix.is_some(),
        ..opts.clone()
    };
    let plan = plan(&g, target, &opts)?;
    // gguf's setters remove a key and append it: these two end up last, in this order, and
    // the imatrix's pairs after them.
    const MOVED: [&str; 2] = ["general.quantization_version", "general.file_type"];
    let mut added = vec![
        (MOVED[0].to_string(), MetaValue::U32(QNT_VERSION)),
        (MOVED[1].to_string(), MetaValue::U32(target.file_type())),
    ];
    if let Some(m) = imatrix {
        added.extend(imatrix_metadata(m));
    }
    let mut meta: Vec<(String, MetaValue)> = g
        .metadata
        .iter()
        .filter(|(k, _)| !added.iter().any(|(a, _)| a == k) && !SPLIT_KEYS.contains(k))
        .map(|(k, v)| (k.to_string(), MetaValue::from_value(v)))
        .collect();
    meta.extend(added);
    let mut jobs = Vec::with_capacity(g.tensors.len());
    let mut infos = Vec::with_capacity(g.tensors.len());
    let mut report = QuantizeReport::default();
    if imatrix.is_none() {
        if let Some((name, ty)) = plan.first_requiring_imatrix() {
            return Err(ModelError::Quantize(format!(
                "{} needs an importance matrix: tensor '{name}' would be {} (pass --imatrix \
                 FILE, made by llama-imatrix)",
                target.name(),
                ty.name()
            )));
        }
    }
    for planned in plan.tensors() {
        let t = g
            .tensor(&planned.name)
            .expect("the plan lists the file's own tensors");
        let ty = planned.target.unwrap_or(t.ty);
        let cols = t.dims[0] as usize;
        let mut job = Job {
            tensor: t,
            ty,
            weights: None,
        };
        if job.quantize() {
            check_quantizable(t, ty)?;
            if let Some(m) = imatrix {
                job.weights = tensor_weights(&m.matrix, t)?;
                if job.weights.is_none() {
                    report.without_weights.push(t.name.to_string());
                }
            }
            if job.weights.is_none() && planned.requires_imatrix {
                return Err(ModelError::Quantize(format!(
                    "the importance matrix has no entry for tensor '{}', which {} quantizes \
                     to {} (a very low-bit type that needs one); use an imatrix made for this \
                     model",
                    t.name,
                    target.name(),
                    ty.name()
                )));
            }
        }
        let len = if job.quantize() {
            let rows = t.data.len() / t.ty.row_bytes(cols);
            (rows * ty.row_bytes(cols)) as u64
        } else {
            t.data.len() as u64
        };
        infos.push(TensorEntry {
            name: planned.name.clone(),
            dims: written_dims(&t.dims),
            ty,
            len,
        });
        jobs.push(job);
    }
    let write_err = ModelError::Write;
    let mut out = GgufStream::create(output, &meta, &infos).map_err(write_err)?;
    for job in &jobs {
        let t = job.tensor;
        if !job.quantize() {
            // In pieces, so Ctrl-C acts within one of them on a tensor of gigabytes.
            for piece in t.data.chunks(COPY_PIECE) {
                if stop.load(Ordering::Relaxed) {
                    return Err(ModelError::Interrupted);
                }
                out.write(piece).map_err(write_err)?;
            }
        } else {
            let cols = t.dims[0] as usize;
            let src_row = t.ty.row_bytes(cols);
            let slab_rows = (SLAB_BYTES / job.ty.row_bytes(cols).max(1)).max(1);
            let rows_per_expert = t.dims.get(1).copied().unwrap_or(1).max(1) as usize;
            for (i, slab) in t.data.chunks(slab_rows * src_row).enumerate() {
                if stop.load(Ordering::Relaxed) {
                    return Err(ModelError::Interrupted);
                }
                let rows = Rows {
                    from: t.ty,
                    to: job.ty,
                    cols,
                    first: i * slab_rows,
                    weights: job.weights.map(|w| (w, rows_per_expert)),
                };
                for part in requantize_slab(&rows, slab, threads) {
                    out.write(&part).map_err(write_err)?;
                }
            }
        }
        out.end_tensor().map_err(write_err)?;
    }
    if stop.load(Ordering::Relaxed) {
        return Err(ModelError::Interrupted);
    }
    out.commit().map_err(write_err)?;
    Ok(report)
}

/// Refuses, before anything is written, a tensor locus cannot requantize to `ty`.
fn check_quantizable(t: &TensorInfo<'_>, ty: GgmlType) -> Result<(), ModelError> {
    if !t.ty.supported() {
        return Err(ModelError::UnsupportedType {
            tensor: t.name.into(),
            ty: t.ty.name(),
        });
    }
    if ty.codec().is_none() {
        return Err(ModelError::Quantize(format!(
            "locus does not make {} yet (tensor '{}'); make the file with llama-quantize \
             (locus runs it)",
            ty.name(),
            t.name
        )));
    }
    // The fallbacks leave no misfit, but --output-tensor-type and --token-embedding-type
    // have none (llama-quantize would fail in its quantizer).
    let cols = t.dims[0] as usize;
    if !cols.is_multiple_of(ty.block_size()) {
        return Err(ModelError::Quantize(format!(
            "tensor '{}' has rows of {cols} values, not whole blocks of {} ({} values)",
            t.name,
            ty.name(),
            ty.block_size()
        )));
    }
    Ok(())
}

/// The importance weights of tensor `t` from `m` as llama-quantize picks them: the entry of
/// the same name, which must hold `ne[0] · ne[2]` values (one row per expert); a token
/// embedding with an entry of another size is quantized without (llama.cpp's exception).
fn tensor_weights<'m>(m: &'m Imatrix, t: &TensorInfo<'_>) -> Result<Option<&'m [f32]>, ModelError> {
    let Some(w) = m.get(t.name) else {
        return Ok(None);
    };
    let want = t.dims[0] * t.dims.get(2).copied().unwrap_or(1);
    if w.len() as u64 == want {
        return Ok(Some(w));
    }
    if t.name == "token_embd.weight" || t.name == "per_layer_token_embd.weight" {
        return Ok(None);
    }
    Err(ModelError::Quantize(format!(
        "the importance matrix holds {} values for tensor '{}', which needs {want} (is the \
         imatrix for another model?)",
        w.len(),
        t.name
    )))
}

/// A run of rows to requantize: `from` → `to`, `cols` values each, the first being row
/// `first` of its tensor; `weights` are the tensor's importance weights with its rows per
/// expert.
struct Rows<'a> {
    from: GgmlType,
    to: GgmlType,
    cols: usize,
    first: usize,
    weights: Option<(&'a [f32], usize)>,
}

/// The rows `src` (whole rows) requantized, as consecutive pieces of the output: the rows are
/// shared among up to `threads` threads, one contiguous run each (every row is quantized
/// alone, so the split changes no byte). A thread that cannot be started leaves its rows to
/// this one.
fn requantize_slab(r: &Rows<'_>, src: &[u8], threads: usize) -> Vec<Vec<u8>> {
    let (cols, from, to) = (r.cols, r.from, r.to);
    let src_row = from.row_bytes(cols);
    let rows = src.len() / src_row;
    let work = |first: usize, part: &[u8]| {
        let mut out = Vec::with_capacity(part.len() / src_row * to.row_bytes(cols));
        let mut row = vec![0f32; cols];
        for (i, bytes) in part.chunks_exact(src_row).enumerate() {
            dequantize_row(from, bytes, &mut row);
            let w = r
                .weights
                .map(|(w, per_expert)| row_weights(w, first + i, per_expert, cols));
            out.extend_from_slice(&quantize_row_weighted(to, &row, w));
        }
        out
    };
    let n = threads.clamp(1, rows.max(1));
    if n == 1 {
        return vec![work(r.first, src)];
    }
    let per = rows.div_ceil(n);
    std::thread::scope(|s| {
        let handles: Vec<_> = src
            .chunks(per * src_row)
            .enumerate()
            .map(|(k, part)| {
                let first = r.first + k * per;
                let spawned =
                    std::thread::Builder::new().spawn_scoped(s, move || work(first, part));
                (first, part, spawned.ok())
            })
            .collect();
        handles
            .into_iter()
            .map(|(first, part, h)| match h {
                Some(h) => h.join().expect("a quantizing thread panicked"),
                None => work(first, part),
            })
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_parse_like_llama_quantize() {
        for name in TARGETS {
            let t = Target::parse(name).unwrap_or_else(|| panic!("{name}"));
            assert_eq!(t.name(), name);
            assert_eq!(Target::parse(&name.to_lowercase()), Some(t));
            assert_eq!(Target::parse(&t.file_type().to_string()), Some(t), "{name}");
        }
        // Every preset is listed.
        for p in Preset::all() {
            assert!(TARGETS.contains(&p.name()), "{}", p.name());
        }
        assert_eq!(Target::parse("q4_k"), Some(Target::Preset(Preset::Q4KM)));
        assert_eq!(Target::parse("bf16"), Some(Target::Float(GgmlType::Bf16)));
        assert_eq!(Target::parse("0"), Some(Target::Float(GgmlType::F32)));
        assert_eq!(Target::parse("1").map(Target::file_type), Some(1));
        assert_eq!(
            Target::parse("32").map(Target::base_type),
            Some(GgmlType::Bf16)
        );
        assert_eq!(
            Target::parse("Q3_K_S").map(Target::base_type),
            Some(GgmlType::Q3K)
        );
        assert_eq!(
            Target::parse("iq2_m").map(Target::base_type),
            Some(GgmlType::Iq2S)
        );
        assert_eq!(Target::parse("22").map(Target::name), Some("IQ3_XS"));
        for bad in ["Q9_9", "TQ1_0", "Q8_K", "F64", "", "COPY", "99"] {
            assert_eq!(Target::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn dims_lose_trailing_ones_as_gguf_writes_them() {
        assert_eq!(written_dims(&[576, 1]), [576]);
        assert_eq!(written_dims(&[576, 49152]), [576, 49152]);
        assert_eq!(written_dims(&[1, 1, 1]), [1]);
        assert_eq!(written_dims(&[]), [1]);
        assert_eq!(written_dims(&[1, 4, 1]), [1, 4]);
    }

    #[test]
    fn slabs_split_among_threads_change_no_byte() {
        // 7 rows of 256 values in Q8_0, requantized to Q4_K with 1, 2, 3 and 16 threads.
        let cols = 256;
        let x: Vec<f32> = (0..7 * cols)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 7.0)
            .collect();
        let src: Vec<u8> = x
            .chunks(cols)
            .flat_map(|r| quantize_row(GgmlType::Q8_0, r))
            .collect();
        let rows = |first| Rows {
            from: GgmlType::Q8_0,
            to: GgmlType::Q4K,
            cols,
            first,
            weights: None,
        };
        let one = requantize_slab(&rows(0), &src, 1).concat();
        assert_eq!(one.len(), 7 * GgmlType::Q4K.row_bytes(cols));
        for t in [2, 3, 16] {
            let parts = requantize_slab(&rows(0), &src, t);
            assert_eq!(parts.len(), t.min(7), "{t} threads");
            assert_eq!(parts.concat(), one, "{t} threads");
        }
        assert!(requantize_slab(&rows(0), &[], 4).concat().is_empty());
    }
}
