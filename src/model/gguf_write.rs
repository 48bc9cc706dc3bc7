//! GGUF writer (version 3), for `locus quantize`, generated models and tests.
//!
//! [`GgufStream`] writes a file tensor by tensor: the header (metadata and the tensor table,
//! whose offsets follow from each tensor's length) first, then each tensor's bytes as they are
//! produced, so writing a model needs memory for one tensor at a time, not the whole file.
//! [`GgufWriter`] collects a small model in memory (tests, fuzzing) and streams it the same way.
//! Either way the file is an [`AtomicFile`]: the old file or the new one, never half of one,
//! and never a device or FIFO replaced.

use std::path::Path;

use crate::sys::fs::{AtomicFile, WriteError};

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

/// A tensor's entry in the table: its data is `len` bytes, written later.
#[derive(Clone, Debug)]
pub struct TensorEntry {
    pub name: String,
    pub dims: Vec<u64>,
    pub ty: GgmlType,
    pub len: u64,
}

/// The alignment a metadata list asks for (`general.alignment`, u32 or u64), else the default.
fn alignment_of(metadata: &[(String, MetaValue)]) -> u64 {
    metadata
        .iter()
        .find(|(k, _)| k == "general.alignment")
        .and_then(|(_, v)| match v {
            MetaValue::U32(a) => Some(*a as u64),
            MetaValue::U64(a) => Some(*a),
            _ => None,
        })
        .filter(|&a| a > 0)
        .unwrap_or(DEFAULT_ALIGNMENT)
}

/// `n` rounded up to a multiple of `align`.
fn align_up(n: u64, align: u64) -> u64 {
    n.div_ceil(align) * align
}

/// Everything before the first tensor's data, padded to the alignment.
fn header(metadata: &[(String, MetaValue)], tensors: &[TensorEntry], align: u64) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&GGUF_MAGIC);
    out.extend_from_slice(&3u32.to_le_bytes());
    out.extend_from_slice(&(tensors.len() as u64).to_le_bytes());
    out.extend_from_slice(&(metadata.len() as u64).to_le_bytes());
    for (k, v) in metadata {
        MetaValue::str(k).encode(&mut out);
        out.extend_from_slice(&type_code(v.value_type()).to_le_bytes());
        v.encode(&mut out);
    }
    let mut offset = 0u64;
    for t in tensors {
        MetaValue::str(&t.name).encode(&mut out);
        out.extend_from_slice(&(t.dims.len() as u32).to_le_bytes());
        for d in &t.dims {
            out.extend_from_slice(&d.to_le_bytes());
        }
        out.extend_from_slice(&t.ty.to_u32().to_le_bytes());
        out.extend_from_slice(&offset.to_le_bytes());
        offset = align_up(offset + t.len, align);
    }
    out.resize(align_up(out.len() as u64, align) as usize, 0);
    out
}

/// A GGUF file being written tensor by tensor (see the module): [`GgufStream::write`] the
/// current tensor's bytes in as many pieces as convenient, [`GgufStream::end_tensor`] after
/// each, [`GgufStream::commit`] at the end.
pub struct GgufStream {
    file: AtomicFile,
    align: u64,
    lens: Vec<(String, u64)>,
    /// The tensor being written, and how many of its bytes are.
    next: usize,
    written: u64,
}

impl GgufStream {
    /// Creates the file and writes its header for `tensors`, whose data must follow in order.
    pub fn create(
        dest: &Path,
        metadata: &[(String, MetaValue)],
        tensors: &[TensorEntry],
    ) -> Result<GgufStream, WriteError> {
        let align = alignment_of(metadata);
        let mut file = AtomicFile::create(dest)?;
        file.write_all(&header(metadata, tensors, align))?;
        Ok(GgufStream {
            file,
            align,
            lens: tensors.iter().map(|t| (t.name.clone(), t.len)).collect(),
            next: 0,
            written: 0,
        })
    }

    /// Writes the next piece of the current tensor's data.
    pub fn write(&mut self, bytes: &[u8]) -> Result<(), WriteError> {
        let (name, len) = &self.lens[self.next];
        assert!(
            self.written + bytes.len() as u64 <= *len,
            "tensor '{name}': more data than its {len} bytes"
        );
        self.written += bytes.len() as u64;
        self.file.write_all(bytes)
    }

    /// Ends the current tensor (all its bytes written) and pads to the alignment.
    pub fn end_tensor(&mut self) -> Result<(), WriteError> {
        let (name, len) = &self.lens[self.next];
        assert_eq!(self.written, *len, "tensor '{name}': data length");
        let pad = align_up(*len, self.align) - len;
        self.next += 1;
        self.written = 0;
        // The last tensor is padded too, as llama.cpp's writer does.
        self.file.write_all(&vec![0u8; pad as usize])
    }

    /// Renames the complete file into place.
    pub fn commit(self) -> Result<(), WriteError> {
        assert_eq!(self.next, self.lens.len(), "tensors left unwritten");
        self.file.commit()
    }
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

    fn infos(&self) -> Vec<TensorEntry> {
        self.tensors
            .iter()
            .map(|t| TensorEntry {
                name: t.name.clone(),
                dims: t.dims.clone(),
                ty: t.ty,
                len: t.data.len() as u64,
            })
            .collect()
    }

    /// The complete file image.
    pub fn to_bytes(&self) -> Vec<u8> {
        let align = alignment_of(&self.metadata);
        let mut out = header(&self.metadata, &self.infos(), align);
        for t in &self.tensors {
            out.extend_from_slice(&t.data);
            out.resize(align_up(out.len() as u64, align) as usize, 0);
        }
        out
    }

    /// Writes the file atomically (an [`AtomicFile`], tensor by tensor).
    pub fn write_atomic(&self, path: &Path) -> Result<(), WriteError> {
        let mut s = GgufStream::create(path, &self.metadata, &self.infos())?;
        for t in &self.tensors {
            s.write(&t.data)?;
            s.end_tensor()?;
        }
        s.commit()
    }
}
