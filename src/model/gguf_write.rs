//! GGUF writer (version 3), for `locus quantize`, generated models and tests.
//!
//! Files are written to a temporary name beside the target and renamed into place, so an
//! interrupted write leaves the old file or the new one, never half of one.

use std::io::Write;
use std::path::Path;

use super::gguf::{Array, Value, ValueType, DEFAULT_ALIGNMENT, GGUF_MAGIC};
use crate::kernels::GgmlType;

/// An owned metadata value.
#[derive(Clone, Debug, PartialEq)]
pub enum MetaValue {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    Str(Vec<u8>),
    U64(u64),
    I64(i64),
    F64(f64),
    /// Homogeneous array; `elem` names the element type (used when the array is empty).
    Array(ValueType, Vec<MetaValue>),
}

impl MetaValue {
    pub fn str(s: &str) -> MetaValue {
        MetaValue::Str(s.as_bytes().to_vec())
    }

    pub fn strs<S: AsRef<[u8]>>(v: &[S]) -> MetaValue {
        MetaValue::Array(
            ValueType::String,
            v.iter()
                .map(|s| MetaValue::Str(s.as_ref().to_vec()))
                .collect(),
        )
    }

    pub fn f32s(v: &[f32]) -> MetaValue {
        MetaValue::Array(
            ValueType::F32,
            v.iter().map(|&x| MetaValue::F32(x)).collect(),
        )
    }

    pub fn i32s(v: &[i32]) -> MetaValue {
        MetaValue::Array(
            ValueType::I32,
            v.iter().map(|&x| MetaValue::I32(x)).collect(),
        )
    }

    fn value_type(&self) -> ValueType {
        match self {
            MetaValue::U8(_) => ValueType::U8,
            MetaValue::I8(_) => ValueType::I8,
            MetaValue::U16(_) => ValueType::U16,
            MetaValue::I16(_) => ValueType::I16,
            MetaValue::U32(_) => ValueType::U32,
            MetaValue::I32(_) => ValueType::I32,
            MetaValue::F32(_) => ValueType::F32,
            MetaValue::Bool(_) => ValueType::Bool,
            MetaValue::Str(_) => ValueType::String,
            MetaValue::U64(_) => ValueType::U64,
            MetaValue::I64(_) => ValueType::I64,
            MetaValue::F64(_) => ValueType::F64,
            MetaValue::Array(..) => ValueType::Array,
        }
    }

    /// An owned copy of a parsed value.
    pub fn from_value(v: &Value) -> MetaValue {
        match v {
            Value::U8(x) => MetaValue::U8(*x),
            Value::I8(x) => MetaValue::I8(*x),
            Value::U16(x) => MetaValue::U16(*x),
            Value::I16(x) => MetaValue::I16(*x),
            Value::U32(x) => MetaValue::U32(*x),
            Value::I32(x) => MetaValue::I32(*x),
            Value::F32(x) => MetaValue::F32(*x),
            Value::Bool(x) => MetaValue::Bool(*x),
            Value::String(s) => MetaValue::Str(s.to_vec()),
            Value::U64(x) => MetaValue::U64(*x),
            Value::I64(x) => MetaValue::I64(*x),
            Value::F64(x) => MetaValue::F64(*x),
            Value::Array(a) => Self::from_array(a),
        }
    }

    fn from_array(a: &Array) -> MetaValue {
        match a {
            Array::Strings(v) => MetaValue::Array(
                ValueType::String,
                v.iter().map(|s| MetaValue::Str(s.to_vec())).collect(),
            ),
            Array::Arrays(v) => {
                MetaValue::Array(ValueType::Array, v.iter().map(Self::from_array).collect())
            }
            Array::Scalars { elem, count, raw } => {
                let size = elem.scalar_size().unwrap_or(1);
                let items = (0..*count)
                    .map(|i| {
                        let b = &raw[i * size..(i + 1) * size];
                        match elem {
                            ValueType::U8 => MetaValue::U8(b[0]),
                            ValueType::I8 => MetaValue::I8(b[0] as i8),
                            ValueType::Bool => MetaValue::Bool(b[0] != 0),
                            ValueType::U16 => MetaValue::U16(u16::from_le_bytes([b[0], b[1]])),
                            ValueType::I16 => MetaValue::I16(i16::from_le_bytes([b[0], b[1]])),
                            ValueType::U32 => {
                                MetaValue::U32(u32::from_le_bytes(b.try_into().unwrap()))
                            }
                            ValueType::I32 => {
                                MetaValue::I32(i32::from_le_bytes(b.try_into().unwrap()))
                            }
                            ValueType::F32 => {
                                MetaValue::F32(f32::from_le_bytes(b.try_into().unwrap()))
                            }
                            ValueType::U64 => {
                                MetaValue::U64(u64::from_le_bytes(b.try_into().unwrap()))
                            }
                            ValueType::I64 => {
                                MetaValue::I64(i64::from_le_bytes(b.try_into().unwrap()))
                            }
                            _ => MetaValue::F64(f64::from_le_bytes(b.try_into().unwrap())),
                        }
                    })
                    .collect();
                MetaValue::Array(*elem, items)
            }
        }
    }

    fn encode(&self, out: &mut Vec<u8>) {
        match self {
            MetaValue::U8(x) => out.push(*x),
            MetaValue::I8(x) => out.push(*x as u8),
            MetaValue::U16(x) => out.extend_from_slice(&x.to_le_bytes()),
            MetaValue::I16(x) => out.extend_from_slice(&x.to_le_bytes()),
            MetaValue::U32(x) => out.extend_from_slice(&x.to_le_bytes()),
            MetaValue::I32(x) => out.extend_from_slice(&x.to_le_bytes()),
            MetaValue::F32(x) => out.extend_from_slice(&x.to_le_bytes()),
            MetaValue::Bool(x) => out.push(*x as u8),
            MetaValue::Str(s) => {
                out.extend_from_slice(&(s.len() as u64).to_le_bytes());
                out.extend_from_slice(s);
            }
            MetaValue::U64(x) => out.extend_from_slice(&x.to_le_bytes()),
            MetaValue::I64(x) => out.extend_from_slice(&x.to_le_bytes()),
            MetaValue::F64(x) => out.extend_from_slice(&x.to_le_bytes()),
            MetaValue::Array(elem, items) => {
                out.extend_from_slice(&(type_code(*elem)).to_le_bytes());
                out.extend_from_slice(&(items.len() as u64).to_le_bytes());
                for it in items {
                    it.encode(out);
                }
            }
        }
    }
}

fn type_code(t: ValueType) -> u32 {
    match t {
        ValueType::U8 => 0,
        ValueType::I8 => 1,
        ValueType::U16 => 2,
        ValueType::I16 => 3,
        ValueType::U32 => 4,
        ValueType::I32 => 5,
        ValueType::F32 => 6,
        ValueType::Bool => 7,
        ValueType::String => 8,
        ValueType::Array => 9,
        ValueType::U64 => 10,
        ValueType::I64 => 11,
        ValueType::F64 => 12,
    }
}

/// A tensor to write: ggml dims (row length first), type and raw data.
#[derive(Clone, Debug)]
pub struct TensorData {
    pub name: String,
    pub dims: Vec<u64>,
    pub ty: GgmlType,
    pub data: Vec<u8>,
}

/// Collects metadata and tensors, then serialises them as one GGUF v3 file.
#[derive(Clone, Debug, Default)]
pub struct GgufWriter {
    pub metadata: Vec<(String, MetaValue)>,
    pub tensors: Vec<TensorData>,
}

impl GgufWriter {
    pub fn new() -> GgufWriter {
        GgufWriter::default()
    }

    /// Sets (or replaces) a metadata key, keeping first-insertion order.
    pub fn set(&mut self, key: &str, v: MetaValue) {
        match self.metadata.iter_mut().find(|(k, _)| k == key) {
            Some(slot) => slot.1 = v,
            None => self.metadata.push((key.to_string(), v)),
        }
    }

    pub fn add_tensor(&mut self, name: &str, dims: &[u64], ty: GgmlType, data: Vec<u8>) {
        self.tensors.push(TensorData {
            name: name.into(),
            dims: dims.to_vec(),
            ty,
            data,
        });
    }

    fn alignment(&self) -> u64 {
        self.metadata
            .iter()
            .find(|(k, _)| k == "general.alignment")
            .and_then(|(_, v)| match v {
                MetaValue::U32(a) => Some(*a as u64),
                MetaValue::U64(a) => Some(*a),
                _ => None,
            })
            .unwrap_or(DEFAULT_ALIGNMENT)
    }

    /// The complete file image.
    pub fn to_bytes(&self) -> Vec<u8> {
        let align = self.alignment();
        let mut out = Vec::new();
        out.extend_from_slice(&GGUF_MAGIC);
        out.extend_from_slice(&3u32.to_le_bytes());
        out.extend_from_slice(&(self.tensors.len() as u64).to_le_bytes());
        out.extend_from_slice(&(self.metadata.len() as u64).to_le_bytes());
        for (k, v) in &self.metadata {
            MetaValue::str(k).encode(&mut out);
            out.extend_from_slice(&type_code(v.value_type()).to_le_bytes());
            v.encode(&mut out);
        }
        let mut offset = 0u64;
        for t in &self.tensors {
            MetaValue::str(&t.name).encode(&mut out);
            out.extend_from_slice(&(t.dims.len() as u32).to_le_bytes());
            for d in &t.dims {
                out.extend_from_slice(&d.to_le_bytes());
            }
            out.extend_from_slice(&t.ty.to_u32().to_le_bytes());
            out.extend_from_slice(&offset.to_le_bytes());
            offset = (offset + t.data.len() as u64).div_ceil(align) * align;
        }
        let pad_to = |out: &mut Vec<u8>| {
            let target = (out.len() as u64).div_ceil(align) * align;
            out.resize(target as usize, 0);
        };
        pad_to(&mut out);
        for t in &self.tensors {
            out.extend_from_slice(&t.data);
            pad_to(&mut out);
        }
        out
    }

    /// Writes the file atomically: temporary file in the same directory, fsync, rename.
    pub fn write_atomic(&self, path: &Path) -> std::io::Result<()> {
        write_file_atomic(path, &self.to_bytes())
    }
}

/// Writes `bytes` to `path` through a temporary sibling and a rename.
pub fn write_file_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.tmp-{}", std::process::id()));
    let result = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}
