//! `locus quantize`: rewrite a model's matrices in another weight type, as `llama-quantize
//! --pure` does (every 2-D weight in the target type, 1-D tensors kept as they are), with ggml's
//! reference quantizers, so the tensor data matches llama.cpp's byte for byte.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use super::error::ModelError;
use super::gguf_write::{GgufStream, GgufWriter, MetaValue, TensorEntry};
use super::ModelFile;
use crate::kernels::blocks::{self, block_bytes, BlockQ4_0, BlockQ4_1, BlockQ8_0};
use crate::kernels::{dequantize_row, GgmlType};

/// llama.cpp's `llama_ftype` for a model whose weights are "mostly" of `ty`.
pub fn file_type_code(ty: GgmlType) -> Option<u32> {
    Some(match ty {
        GgmlType::F32 => 0,
        GgmlType::F16 => 1,
        GgmlType::Q4_0 => 2,
        GgmlType::Q4_1 => 3,
        GgmlType::Q8_0 => 7,
        GgmlType::Bf16 => 32,
        _ => return None,
    })
}

/// Quantizes one f32 row into `ty` with the reference quantizers.
pub fn quantize_row(ty: GgmlType, x: &[f32]) -> Vec<u8> {
    let nb = x.len() / blocks::QK;
    match ty {
        GgmlType::Q8_0 => {
            let mut b = vec![BlockQ8_0::default(); nb];
            blocks::quantize_q8_0_ref(x, &mut b);
            block_bytes(&b).to_vec()
        }
        GgmlType::Q4_0 => {
            let mut b = vec![BlockQ4_0::default(); nb];
            blocks::quantize_q4_0_ref(x, &mut b);
            block_bytes(&b).to_vec()
        }
        GgmlType::Q4_1 => {
            let mut b = vec![BlockQ4_1::default(); nb];
            blocks::quantize_q4_1_ref(x, &mut b);
            block_bytes(&b).to_vec()
        }
        GgmlType::F32 => x.iter().flat_map(|v| v.to_le_bytes()).collect(),
        GgmlType::F16 => x
            .iter()
            .flat_map(|&v| crate::kernels::half::f32_to_f16(v).to_le_bytes())
            .collect(),
        GgmlType::Bf16 => x
            .iter()
            .flat_map(|&v| crate::kernels::half::f32_to_bf16(v).to_le_bytes())
            .collect(),
        t => panic!("quantize_row: no quantizer for {}", t.name()),
    }
}

/// Bytes of an unchanged tensor copied between two looks at the stop flag.
const COPY_PIECE: usize = 16 << 20;

/// The types `quantize_file` writes, by name.
pub const TARGETS: [&str; 6] = ["Q4_0", "Q4_1", "Q8_0", "F16", "BF16", "F32"];

/// What happens to one tensor: copied as it is, or rewritten row by row in the target type.
struct Job<'a> {
    tensor: &'a super::gguf::TensorInfo<'a>,
    quantize: bool,
}

/// Rewrites `input` into `output` with every 2-D weight in `target`. The output is streamed
/// tensor by tensor, row by row ([`GgufStream`]), so memory stays a few rows' worth whatever
/// the model's size (the input is read through its mapping). Every check happens before the
/// output is created; `stop` (Ctrl-C) ends the work between rows, leaving nothing behind.
pub fn quantize_file(
    input: &Path,
    output: &Path,
    target: GgmlType,
    stop: &AtomicBool,
) -> Result<(), ModelError> {
    let code = file_type_code(target).ok_or(ModelError::UnsupportedTarget(target.name()))?;
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
    let mut meta = GgufWriter::new();
    for (k, v) in &g.metadata {
        meta.set(k, MetaValue::from_value(v));
    }
    meta.set("general.file_type", MetaValue::U32(code));
    meta.set("general.quantization_version", MetaValue::U32(2));
    let mut jobs = Vec::with_capacity(g.tensors.len());
    let mut infos = Vec::with_capacity(g.tensors.len());
    for t in &g.tensors {
        let n_dims = t.dims.iter().rposition(|&d| d > 1).map_or(1, |i| i + 1);
        let quantize = n_dims >= 2 && t.name.ends_with("weight") && t.ty != target;
        let cols = t.dims[0] as usize;
        if quantize {
            if !t.ty.supported() {
                return Err(ModelError::UnsupportedType {
                    tensor: t.name.into(),
                    ty: t.ty.name(),
                });
            }
            if !cols.is_multiple_of(target.block_size()) {
                return Err(ModelError::BadShape {
                    tensor: t.name.into(),
                    expected: vec![(cols / target.block_size() * target.block_size()) as u64],
                    found: t.dims.clone(),
                });
            }
        }
        let (ty, len) = if quantize {
            let rows = t.data.len() / t.ty.row_bytes(cols);
            (target, (rows * target.row_bytes(cols)) as u64)
        } else {
            (t.ty, t.data.len() as u64)
        };
        infos.push(TensorEntry {
            name: t.name.to_string(),
            dims: t.dims.clone(),
            ty,
            len,
        });
        jobs.push(Job {
            tensor: t,
            quantize,
        });
    }
    let write_err = ModelError::Write;
    let mut out = GgufStream::create(output, &meta.metadata, &infos).map_err(write_err)?;
    for job in &jobs {
        let t = job.tensor;
        if !job.quantize {
            // In pieces, so Ctrl-C acts within one of them on a tensor of gigabytes.
            for piece in t.data.chunks(COPY_PIECE) {
                if stop.load(Ordering::Relaxed) {
                    return Err(ModelError::Interrupted);
                }
                out.write(piece).map_err(write_err)?;
            }
        } else {
            let cols = t.dims[0] as usize;
            let mut row = vec![0f32; cols];
            for src in t.data.chunks_exact(t.ty.row_bytes(cols)) {
                if stop.load(Ordering::Relaxed) {
                    return Err(ModelError::Interrupted);
                }
                dequantize_row(t.ty, src, &mut row);
                out.write(&quantize_row(target, &row)).map_err(write_err)?;
            }
        }
        out.end_tensor().map_err(write_err)?;
    }
    if stop.load(Ordering::Relaxed) {
        return Err(ModelError::Interrupted);
    }
    out.commit().map_err(write_err)
}
