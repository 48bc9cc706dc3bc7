//! `locus quantize`: rewrite a model's weights as `llama-quantize --allow-requantize [--pure]`
//! does, so that the output file equals llama.cpp's byte for byte (tensor data, types, tensor
//! order and metadata):
//!
//! - which tensors are quantized, the type of each (the preset's mixture rules, or its one
//!   type under `--pure`, then the row-length fallbacks) and the tensor order come from
//!   [`MixPlan`] (see `quant_mix`);
//! - a tensor whose planned type is the one it already has is copied as it is; any other is
//!   dequantized to f32 row by row and requantized with ggml's reference quantizers
//!   ([`quantize_row`]; no importance matrix);
//! - the metadata is the input's, with `general.quantization_version` (2) and then
//!   `general.file_type` (the preset's number) moved to the end, as gguf's setters append, and
//!   the split keys dropped; tensor dimensions are written without trailing 1s, as gguf does.
//!
//! The float targets (F16, BF16, F32) have no mixture and no fallbacks: every quantizable
//! tensor becomes that type (llama-quantize applies neither to a non-quantized type).

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use super::error::ModelError;
use super::gguf::TensorInfo;
use super::gguf_write::{GgufStream, MetaValue, TensorEntry};
use super::quant_mix::{MixOptions, MixPlan, ModelShape, Preset};
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
        GgmlType::Iq3Xxs => 23,
        GgmlType::Iq3S => 26,
        GgmlType::Iq4Nl => 25,
        GgmlType::Iq4Xs => 30,
        GgmlType::Bf16 => 32,
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
pub const TARGETS: [&str; 19] = [
    "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K_S", "Q3_K_M", "Q3_K_L", "IQ4_NL", "IQ4_XS",
    "Q4_K_S", "Q4_K_M", "Q5_K_S", "Q5_K_M", "Q6_K", "Q8_0", "F16", "BF16", "F32",
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

/// The plan of `g` under `target`: [`MixPlan`] with the preset, or for a float target the
/// tensors a pure plan quantizes (which ones and their order do not depend on the preset) all
/// in the float type.
fn plan(
    g: &super::Gguf<'_>,
    target: Target,
    opts: &MixOptions,
) -> Result<Vec<(String, Option<GgmlType>)>, ModelError> {
    let mix_err = |e: super::quant_mix::MixError| ModelError::Quantize(e.to_string());
    let tensors = g.tensors.iter().map(|t| (t.name, t.dims.as_slice()));
    let (preset, opts, shape) = match target {
        // The mixture rules need the model's shape; --pure and the floats do not.
        Target::Preset(p) if !opts.pure => (p, *opts, ModelShape::from_gguf(g).map_err(mix_err)?),
        Target::Preset(p) => (p, *opts, ModelShape::new("", 0, 0, 0, 0)),
        Target::Float(_) => {
            let pure = MixOptions {
                pure: true,
                ..*opts
            };
            (Preset::Q8_0, pure, ModelShape::new("", 0, 0, 0, 0))
        }
    };
    let p = MixPlan::new(preset, &shape, &opts, tensors).map_err(mix_err)?;
    Ok(p.tensors()
        .iter()
        .map(|t| {
            let ty = match target {
                Target::Float(f) => t.target.map(|_| f),
                Target::Preset(_) => t.target,
            };
            (t.name.clone(), ty)
        })
        .collect())
}

/// Rewrites `input` into `output` under `target` (module docs), with `threads` threads
/// quantizing the rows of each slab. The output is streamed tensor by tensor, slab by slab
/// ([`GgufStream`]), so memory stays a few MiB whatever the model's size (the input is read
/// through its mapping). Every check happens before the output is created; `stop` (Ctrl-C)
/// ends the work between slabs, leaving nothing behind.
pub fn quantize_file(
    input: &Path,
    output: &Path,
    target: Target,
    opts: &MixOptions,
    threads: usize,
    stop: &AtomicBool,
) -> Result<(), ModelError> {
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
    // gguf's setters remove a key and append it: these two end up last, in this order.
    const MOVED: [&str; 2] = ["general.quantization_version", "general.file_type"];
    let mut meta: Vec<(String, MetaValue)> = g
        .metadata
        .iter()
        .filter(|(k, _)| !MOVED.contains(k) && !SPLIT_KEYS.contains(k))
        .map(|(k, v)| (k.to_string(), MetaValue::from_value(v)))
        .collect();
    meta.push((MOVED[0].into(), MetaValue::U32(QNT_VERSION)));
    meta.push((MOVED[1].into(), MetaValue::U32(target.file_type())));
    let mut jobs = Vec::with_capacity(g.tensors.len());
    let mut infos = Vec::with_capacity(g.tensors.len());
    for (name, planned) in plan(&g, target, opts)? {
        let t = g
            .tensor(&name)
            .expect("the plan lists the file's own tensors");
        let ty = planned.unwrap_or(t.ty);
        let cols = t.dims[0] as usize;
        let job = Job { tensor: t, ty };
        if job.quantize() {
            if !t.ty.supported() {
                return Err(ModelError::UnsupportedType {
                    tensor: t.name.into(),
                    ty: t.ty.name(),
                });
            }
            // The fallbacks leave no misfit; kept so a planning mistake is an error, not a
            // panic in a quantizer.
            if !cols.is_multiple_of(ty.block_size()) {
                return Err(ModelError::BadShape {
                    tensor: t.name.into(),
                    expected: vec![(cols / ty.block_size() * ty.block_size()) as u64],
                    found: t.dims.clone(),
                });
            }
        }
        let len = if job.quantize() {
            let rows = t.data.len() / t.ty.row_bytes(cols);
            (rows * ty.row_bytes(cols)) as u64
        } else {
            t.data.len() as u64
        };
        infos.push(TensorEntry {
            name,
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
            for slab in t.data.chunks(slab_rows * src_row) {
                if stop.load(Ordering::Relaxed) {
                    return Err(ModelError::Interrupted);
                }
                for part in requantize_slab(t.ty, job.ty, cols, slab, threads) {
                    out.write(&part).map_err(write_err)?;
                }
            }
        }
        out.end_tensor().map_err(write_err)?;
    }
    if stop.load(Ordering::Relaxed) {
        return Err(ModelError::Interrupted);
    }
    out.commit().map_err(write_err)
}

/// Rows of `cols` values of type `from` (`src`, whole rows) requantized to `to`, as
/// consecutive pieces of the output: the rows are shared among up to `threads` threads, one
/// contiguous run each (every row is quantized alone, so the split changes no byte). A thread
/// that cannot be started leaves its rows to this one.
fn requantize_slab(
    from: GgmlType,
    to: GgmlType,
    cols: usize,
    src: &[u8],
    threads: usize,
) -> Vec<Vec<u8>> {
    let src_row = from.row_bytes(cols);
    let rows = src.len() / src_row;
    let work = |part: &[u8]| {
        let mut out = Vec::with_capacity(part.len() / src_row * to.row_bytes(cols));
        let mut row = vec![0f32; cols];
        for r in part.chunks_exact(src_row) {
            dequantize_row(from, r, &mut row);
            out.extend_from_slice(&quantize_row(to, &row));
        }
        out
    };
    let n = threads.clamp(1, rows.max(1));
    if n == 1 {
        return vec![work(src)];
    }
    let per = rows.div_ceil(n);
    std::thread::scope(|s| {
        let handles: Vec<_> = src
            .chunks(per * src_row)
            .map(|part| {
                let spawned = std::thread::Builder::new().spawn_scoped(s, move || work(part));
                (part, spawned.ok())
            })
            .collect();
        handles
            .into_iter()
            .map(|(part, h)| match h {
                Some(h) => h.join().expect("a quantizing thread panicked"),
                None => work(part),
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
        for bad in ["Q9_9", "IQ2_XS", "Q8_K", "F64", "", "COPY", "99"] {
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
        let one = requantize_slab(GgmlType::Q8_0, GgmlType::Q4K, cols, &src, 1).concat();
        assert_eq!(one.len(), 7 * GgmlType::Q4K.row_bytes(cols));
        for t in [2, 3, 16] {
            let parts = requantize_slab(GgmlType::Q8_0, GgmlType::Q4K, cols, &src, t);
            assert_eq!(parts.len(), t.min(7), "{t} threads");
            assert_eq!(parts.concat(), one, "{t} threads");
        }
        assert!(requantize_slab(GgmlType::Q8_0, GgmlType::Q4K, cols, &[], 4)
            .concat()
            .is_empty());
    }
}
