//! `locus quantize`: rewrite a model's matrices in another weight type, as `llama-quantize
//! --pure` does (every 2-D weight in the target type, 1-D tensors kept as they are), with ggml's
//! reference quantizers, so the tensor data matches llama.cpp's byte for byte.

use std::path::Path;

use super::error::ModelError;
use super::gguf_write::{GgufWriter, MetaValue};
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

/// Rewrites `input` into `output` with every 2-D weight in `target`.
pub fn quantize_file(input: &Path, output: &Path, target: GgmlType) -> Result<(), ModelError> {
    let code = file_type_code(target).ok_or_else(|| ModelError::BadKey {
        key: "target type".into(),
        why: format!(
            "{} is not a type locus can quantize to (Q4_0, Q4_1, Q8_0, F16, BF16, F32)",
            target.name()
        ),
    })?;
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
    let mut w = GgufWriter::new();
    for (k, v) in &g.metadata {
        w.set(k, MetaValue::from_value(v));
    }
    w.set("general.file_type", MetaValue::U32(code));
    w.set("general.quantization_version", MetaValue::U32(2));
    for t in &g.tensors {
        let n_dims = t.dims.iter().rposition(|&d| d > 1).map_or(1, |i| i + 1);
        let quantize = n_dims >= 2 && t.name.ends_with("weight") && t.ty != target;
        if !quantize {
            w.add_tensor(t.name, &t.dims, t.ty, t.data.to_vec());
            continue;
        }
        if !t.ty.supported() {
            return Err(ModelError::UnsupportedType {
                tensor: t.name.into(),
                ty: t.ty.name(),
            });
        }
        let cols = t.dims[0] as usize;
        if !cols.is_multiple_of(target.block_size()) {
            return Err(ModelError::BadShape {
                tensor: t.name.into(),
                expected: vec![(cols / target.block_size() * target.block_size()) as u64],
                found: t.dims.clone(),
            });
        }
        let in_row = t.ty.row_bytes(cols);
        let mut row = vec![0f32; cols];
        let mut data = Vec::with_capacity(t.data.len() / in_row * target.row_bytes(cols));
        for src in t.data.chunks_exact(in_row) {
            dequantize_row(t.ty, src, &mut row);
            data.extend_from_slice(&quantize_row(target, &row));
        }
        w.add_tensor(t.name, &t.dims, target, data);
    }
    w.write_atomic(output).map_err(|e| ModelError::Io {
        path: output.to_path_buf(),
        what: "cannot write the quantized model",
        err: e,
    })
}
