//! GGUF reader: a pure parser over `&[u8]`.
//!
//! It owns nothing: metadata strings, numeric arrays and tensor data are borrowed views into
//! the caller's buffer (normally the read-only `Mmap` held by [`crate::model::ModelFile`]).
//! Every count, length and offset is checked against the bytes that remain *before* anything is
//! allocated, so a hostile header cannot make the reader allocate more than a small multiple of
//! the file's size. Errors carry the field being read and its byte offset.
//!
//! Layout (v2 and v3; v1 used 32-bit counts and is refused):
//! ```text
//! magic "GGUF" | version u32 | tensor_count u64 | kv_count u64
//! kv_count × { key: string, type: u32, value }
//! tensor_count × { name: string, n_dims: u32, dims: u64 × n_dims, type: u32, offset: u64 }
//! padding to general.alignment (default 32) | tensor data
//! string = u64 length + bytes; array = elem type u32 + count u64 + elements
//! ```

use std::collections::HashMap;
use std::fmt;

use crate::kernels::GgmlType;

/// The four bytes every GGUF file starts with.
pub const GGUF_MAGIC: [u8; 4] = *b"GGUF";
/// Alignment of the data section when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: u64 = 32;
/// ggml tensors have at most this many dimensions.
pub const MAX_DIMS: usize = 4;
/// Longest key or tensor name we accept (llama.cpp's own limit is 64 for names).
pub const MAX_NAME_LEN: u64 = 1 << 16;
/// Deepest nesting of arrays inside arrays we follow.
pub const MAX_ARRAY_DEPTH: u32 = 8;
/// Most items reserved ahead from a count read in the file. A count only says how many items
/// the rest of the file *could* hold; reserving that much for each of several counts (the
/// metadata, the tensor table, every level of nested arrays) would multiply the file's size
/// (a 4 MiB file could make the reader reserve 86 MB), so those vectors start at most this
/// large and grow with the items actually read. String arrays (vocabularies) are the
/// exception: a count is at most a 16-byte slice per 8 bytes that remain, nothing nests
/// inside them, and reserving exactly avoids the growth that would briefly hold 1.5 times it.
const MAX_PREALLOC: usize = 4096;

/// Capacity to reserve for `count` items announced by the file.
fn prealloc(count: usize) -> usize {
    count.min(MAX_PREALLOC)
}

/// GGUF metadata value types, as numbered in the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ValueType {
    U8,
    I8,
    U16,
    I16,
    U32,
    I32,
    F32,
    Bool,
    String,
    Array,
    U64,
    I64,
    F64,
}

impl ValueType {
    fn from_u32(v: u32) -> Option<Self> {
        Some(match v {
            0 => Self::U8,
            1 => Self::I8,
            2 => Self::U16,
            3 => Self::I16,
            4 => Self::U32,
            5 => Self::I32,
            6 => Self::F32,
            7 => Self::Bool,
            8 => Self::String,
            9 => Self::Array,
            10 => Self::U64,
            11 => Self::I64,
            12 => Self::F64,
            _ => return None,
        })
    }

    /// Size in bytes of a scalar of this type; `None` for strings and arrays.
    pub fn scalar_size(self) -> Option<usize> {
        Some(match self {
            Self::U8 | Self::I8 | Self::Bool => 1,
            Self::U16 | Self::I16 => 2,
            Self::U32 | Self::I32 | Self::F32 => 4,
            Self::U64 | Self::I64 | Self::F64 => 8,
            Self::String | Self::Array => return None,
        })
    }

    /// Fewest bytes one element of this type can take in the file (used to cap counts).
    fn min_encoded_size(self) -> u64 {
        match self {
            Self::String => 8,
            Self::Array => 12,
            other => other.scalar_size().unwrap_or(1) as u64,
        }
    }
}

/// A metadata value borrowing from the file.
#[derive(Clone, Debug, PartialEq)]
pub enum Value<'a> {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    /// Raw bytes of a string; GGUF says UTF-8 but vocabularies are not always valid.
    String(&'a [u8]),
    U64(u64),
    I64(i64),
    F64(f64),
    Array(Array<'a>),
}

/// An array value. Scalars stay as raw little-endian bytes (no per-element allocation).
#[derive(Clone, Debug, PartialEq)]
pub enum Array<'a> {
    Scalars {
        elem: ValueType,
        count: usize,
        raw: &'a [u8],
    },
    Strings(Vec<&'a [u8]>),
    Arrays(Vec<Array<'a>>),
}

impl<'a> Array<'a> {
    pub fn len(&self) -> usize {
        match self {
            Array::Scalars { count, .. } => *count,
            Array::Strings(v) => v.len(),
            Array::Arrays(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Element `i` of a scalar array widened to f64 (bools as 0/1); `None` past the end or
    /// for string/nested arrays.
    pub fn scalar_f64(&self, i: usize) -> Option<f64> {
        let Array::Scalars { elem, count, raw } = self else {
            return None;
        };
        if i >= *count {
            return None;
        }
        let size = elem.scalar_size()?;
        let b = &raw[i * size..(i + 1) * size];
        Some(match elem {
            ValueType::U8 => b[0] as f64,
            ValueType::I8 => b[0] as i8 as f64,
            ValueType::Bool => (b[0] != 0) as u8 as f64,
            ValueType::U16 => u16::from_le_bytes([b[0], b[1]]) as f64,
            ValueType::I16 => i16::from_le_bytes([b[0], b[1]]) as f64,
            ValueType::U32 => u32::from_le_bytes(b.try_into().ok()?) as f64,
            ValueType::I32 => i32::from_le_bytes(b.try_into().ok()?) as f64,
            ValueType::F32 => f32::from_le_bytes(b.try_into().ok()?) as f64,
            ValueType::U64 => u64::from_le_bytes(b.try_into().ok()?) as f64,
            ValueType::I64 => i64::from_le_bytes(b.try_into().ok()?) as f64,
            ValueType::F64 => f64::from_le_bytes(b.try_into().ok()?),
            ValueType::String | ValueType::Array => return None,
        })
    }

    /// All elements of an f32 array, or `None` if the array holds another type.
    pub fn as_f32s(&self) -> Option<Vec<f32>> {
        match self {
            Array::Scalars {
                elem: ValueType::F32,
                raw,
                ..
            } => Some(
                raw.chunks_exact(4)
                    .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                    .collect(),
            ),
            _ => None,
        }
    }

    /// All elements of an integer array as i64, or `None` for floats/strings/nested.
    pub fn as_i64s(&self) -> Option<Vec<i64>> {
        match self {
            Array::Scalars { elem, count, .. }
                if !matches!(elem, ValueType::F32 | ValueType::F64) =>
            {
                (0..*count)
                    .map(|i| self.scalar_f64(i).map(|v| v as i64))
                    .collect()
            }
            _ => None,
        }
    }

    pub fn as_strings(&self) -> Option<&[&'a [u8]]> {
        match self {
            Array::Strings(v) => Some(v),
            _ => None,
        }
    }
}

impl<'a> Value<'a> {
    /// Integer view of any integer-typed value (GGUF writers disagree on widths).
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Value::U8(v) => Some(v as u64),
            Value::U16(v) => Some(v as u64),
            Value::U32(v) => Some(v as u64),
            Value::U64(v) => Some(v),
            Value::I8(v) => u64::try_from(v).ok(),
            Value::I16(v) => u64::try_from(v).ok(),
            Value::I32(v) => u64::try_from(v).ok(),
            Value::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    pub fn as_i64(&self) -> Option<i64> {
        match *self {
            Value::I8(v) => Some(v as i64),
            Value::I16(v) => Some(v as i64),
            Value::I32(v) => Some(v as i64),
            Value::I64(v) => Some(v),
            _ => self.as_u64().and_then(|v| i64::try_from(v).ok()),
        }
    }

    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Value::F32(v) => Some(v as f64),
            Value::F64(v) => Some(v),
            _ => self.as_i64().map(|v| v as f64),
        }
    }

    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            Value::Bool(v) => Some(v),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&'a str> {
        match *self {
            Value::String(s) => std::str::from_utf8(s).ok(),
            _ => None,
        }
    }

    pub fn as_array(&self) -> Option<&Array<'a>> {
        match self {
            Value::Array(a) => Some(a),
            _ => None,
        }
    }

    pub fn type_name(&self) -> &'static str {
        match self {
            Value::U8(_) => "u8",
            Value::I8(_) => "i8",
            Value::U16(_) => "u16",
            Value::I16(_) => "i16",
            Value::U32(_) => "u32",
            Value::I32(_) => "i32",
            Value::F32(_) => "f32",
            Value::Bool(_) => "bool",
            Value::String(_) => "string",
            Value::U64(_) => "u64",
            Value::I64(_) => "i64",
            Value::F64(_) => "f64",
            Value::Array(_) => "array",
        }
    }
}

/// One tensor's entry in the table, with its data located and bounds-checked.
#[derive(Clone, Debug)]
pub struct TensorInfo<'a> {
    pub name: &'a str,
    /// ggml order: `dims[0]` is the row length (contiguous), `dims[1]` the row count.
    pub dims: Vec<u64>,
    pub ty: GgmlType,
    /// Absolute byte offset of the data in the file.
    pub file_offset: u64,
    pub data: &'a [u8],
}

impl TensorInfo<'_> {
    pub fn n_elements(&self) -> u64 {
        self.dims.iter().product()
    }
}

/// What went wrong while reading a GGUF file.
#[derive(Debug, Clone, PartialEq)]
pub enum GgufErrorKind {
    BadMagic([u8; 4]),
    UnsupportedVersion(u32),
    /// The file ends before `need` bytes could be read.
    Truncated {
        need: u64,
        have: u64,
    },
    BadValueType(u32),
    /// A count or length too large for what the file can hold.
    TooLarge {
        value: u64,
        limit: u64,
    },
    BadUtf8,
    DuplicateKey(String),
    DuplicateTensor(String),
    BadDims(String),
    UnknownTensorType(u32),
    TensorOutOfBounds {
        name: String,
        end: u64,
        file_len: u64,
    },
    MisalignedTensor {
        name: String,
        offset: u64,
        alignment: u64,
    },
    BadAlignment(u64),
    /// `general.alignment` stored as a type other than u32 or u64.
    AlignmentType(&'static str),
}

/// A parse error: what, which field, and where in the file.
#[derive(Debug, Clone, PartialEq)]
pub struct GgufError {
    pub kind: GgufErrorKind,
    pub field: String,
    pub offset: u64,
}

impl fmt::Display for GgufError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use GgufErrorKind::*;
        match &self.kind {
            BadMagic(m) => write!(f, "not a GGUF file: magic bytes are {m:02x?}, expected \"GGUF\""),
            UnsupportedVersion(v) => {
                write!(f, "GGUF version {v} is not supported (locus reads versions 2 and 3)")
            }
            Truncated { need, have } => write!(
                f,
                "file is truncated: reading {} needs {need} bytes at offset {} but only {have} remain",
                self.field, self.offset
            ),
            BadValueType(t) => {
                write!(f, "unknown value type {t} for {} at offset {}", self.field, self.offset)
            }
            TooLarge { value, limit } => write!(
                f,
                "{} = {value} at offset {} is larger than the file allows ({limit})",
                self.field, self.offset
            ),
            BadUtf8 => write!(f, "{} at offset {} is not valid UTF-8", self.field, self.offset),
            DuplicateKey(k) => write!(f, "metadata key '{k}' appears twice (offset {})", self.offset),
            DuplicateTensor(n) => write!(f, "tensor '{n}' appears twice (offset {})", self.offset),
            BadDims(n) => write!(
                f,
                "tensor '{n}' has invalid dimensions ({}) at offset {}",
                self.field, self.offset
            ),
            UnknownTensorType(t) => write!(
                f,
                "{} has unknown ggml type {t} at offset {}",
                self.field, self.offset
            ),
            TensorOutOfBounds { name, end, file_len } => write!(
                f,
                "tensor '{name}' data ends at byte {end}, beyond the end of the file ({file_len} bytes); \
                 the file is truncated or corrupt"
            ),
            MisalignedTensor { name, offset, alignment } => write!(
                f,
                "tensor '{name}' data offset {offset} is not a multiple of the alignment {alignment}"
            ),
            BadAlignment(a) => write!(
                f,
                "general.alignment = {a} at offset {} must be a non-zero power of two",
                self.offset
            ),
            AlignmentType(t) => write!(
                f,
                "general.alignment has type {t}; GGUF stores it as a u32 (locus also reads u64)"
            ),
        }
    }
}

impl std::error::Error for GgufError {}

/// A parsed GGUF file borrowing from its bytes.
#[derive(Debug)]
pub struct Gguf<'a> {
    pub version: u32,
    /// Metadata in file order.
    pub metadata: Vec<(&'a str, Value<'a>)>,
    index: HashMap<&'a str, usize>,
    pub tensors: Vec<TensorInfo<'a>>,
    tensor_index: HashMap<&'a str, usize>,
    pub alignment: u64,
    /// Absolute offset where tensor data begins.
    pub data_offset: u64,
}

impl<'a> Gguf<'a> {
    /// Parses the header, metadata and tensor table of `bytes` and locates every tensor's data.
    pub fn parse(bytes: &'a [u8]) -> Result<Self, GgufError> {
        let mut r = Reader { buf: bytes, pos: 0 };
        let magic = r.array4("magic")?;
        if magic != GGUF_MAGIC {
            return Err(GgufError {
                kind: GgufErrorKind::BadMagic(magic),
                field: "magic".into(),
                offset: 0,
            });
        }
        let version = r.u32("version")?;
        if !(2..=3).contains(&version) {
            return Err(r.err_at(4, "version", GgufErrorKind::UnsupportedVersion(version)));
        }
        // Smallest tensor entry: name length, empty name, n_dims, one dim, type, offset.
        let tensor_count = r.count("tensor_count", 8 + 4 + 8 + 4 + 8)?;
        let kv_count = r.count("metadata_kv_count", 8 + 4 + 1)?;

        let mut metadata = Vec::with_capacity(prealloc(kv_count));
        let mut index = HashMap::with_capacity(prealloc(kv_count));
        for i in 0..kv_count {
            let key_pos = r.pos;
            let key = r.name(&format!("metadata key #{i}"))?;
            let ty_raw = r.u32(&format!("type of '{key}'"))?;
            let ty = ValueType::from_u32(ty_raw).ok_or_else(|| {
                r.err_at(
                    r.pos - 4,
                    &format!("type of '{key}'"),
                    GgufErrorKind::BadValueType(ty_raw),
                )
            })?;
            let value = r.value(ty, key, 0)?;
            if index.insert(key, metadata.len()).is_some() {
                return Err(r.err_at(key_pos, key, GgufErrorKind::DuplicateKey(key.to_string())));
            }
            metadata.push((key, value));
        }

        let mut alignment = DEFAULT_ALIGNMENT;
        if let Some(&i) = index.get("general.alignment") {
            // GGUF stores it as u32 (llama.cpp refuses other types); u64 is read as well, the
            // two types the writer pads by. Taking any integer type would let `quantize`
            // write a file whose padding disagrees with its own header.
            let a = match metadata[i].1 {
                Value::U32(a) => a as u64,
                Value::U64(a) => a,
                ref other => {
                    return Err(r.err_at(
                        0,
                        "general.alignment",
                        GgufErrorKind::AlignmentType(other.type_name()),
                    ))
                }
            };
            if a == 0 || !a.is_power_of_two() {
                return Err(r.err_at(0, "general.alignment", GgufErrorKind::BadAlignment(a)));
            }
            alignment = a;
        }

        struct Pending<'a> {
            name: &'a str,
            dims: Vec<u64>,
            ty: GgmlType,
            rel: u64,
            pos: u64,
        }
        let mut pending = Vec::with_capacity(prealloc(tensor_count));
        let mut tensor_index = HashMap::with_capacity(prealloc(tensor_count));
        for i in 0..tensor_count {
            let pos = r.pos as u64;
            let name = r.name(&format!("tensor #{i} name"))?;
            let n_dims = r.u32(&format!("n_dims of tensor '{name}'"))? as usize;
            if n_dims == 0 || n_dims > MAX_DIMS {
                return Err(r.err_at(
                    r.pos - 4,
                    &format!("n_dims = {n_dims}, expected 1..={MAX_DIMS}"),
                    GgufErrorKind::BadDims(name.to_string()),
                ));
            }
            let mut dims = Vec::with_capacity(n_dims);
            for d in 0..n_dims {
                let v = r.u64(&format!("dims[{d}] of tensor '{name}'"))?;
                if v == 0 || v > bytes.len() as u64 * 2 + 1024 {
                    return Err(r.err_at(
                        r.pos - 8,
                        &format!("dims[{d}] = {v}"),
                        GgufErrorKind::BadDims(name.to_string()),
                    ));
                }
                dims.push(v);
            }
            let ty_raw = r.u32(&format!("type of tensor '{name}'"))?;
            let ty = GgmlType::from_u32(ty_raw).ok_or_else(|| {
                r.err_at(
                    r.pos - 4,
                    &format!("tensor '{name}'"),
                    GgufErrorKind::UnknownTensorType(ty_raw),
                )
            })?;
            let rel = r.u64(&format!("data offset of tensor '{name}'"))?;
            if tensor_index.insert(name, pending.len()).is_some() {
                return Err(r.err_at(
                    pos as usize,
                    name,
                    GgufErrorKind::DuplicateTensor(name.to_string()),
                ));
            }
            pending.push(Pending {
                name,
                dims,
                ty,
                rel,
                pos,
            });
        }

        let data_offset = (r.pos as u64).div_ceil(alignment) * alignment;
        let file_len = bytes.len() as u64;
        let mut tensors = Vec::with_capacity(pending.len());
        for p in pending {
            let too_big = |what: String| GgufError {
                kind: GgufErrorKind::BadDims(p.name.to_string()),
                field: what,
                offset: p.pos,
            };
            let n_el = p
                .dims
                .iter()
                .try_fold(1u64, |acc, &d| acc.checked_mul(d))
                .ok_or_else(|| too_big("element count overflows".into()))?;
            let block = p.ty.block_size() as u64;
            if p.dims[0] % block != 0 {
                return Err(too_big(format!(
                    "row length {} is not a multiple of the {} block size {block}",
                    p.dims[0],
                    p.ty.name()
                )));
            }
            let n_bytes = (n_el / block)
                .checked_mul(p.ty.block_bytes() as u64)
                .ok_or_else(|| too_big("byte size overflows".into()))?;
            if p.rel % alignment != 0 {
                return Err(GgufError {
                    kind: GgufErrorKind::MisalignedTensor {
                        name: p.name.to_string(),
                        offset: p.rel,
                        alignment,
                    },
                    field: format!("data offset of tensor '{}'", p.name),
                    offset: p.pos,
                });
            }
            let start = data_offset.checked_add(p.rel);
            let end = start.and_then(|s| s.checked_add(n_bytes));
            let (Some(start), Some(end)) = (start, end) else {
                return Err(too_big("data offset overflows".into()));
            };
            if end > file_len {
                return Err(GgufError {
                    kind: GgufErrorKind::TensorOutOfBounds {
                        name: p.name.to_string(),
                        end,
                        file_len,
                    },
                    field: format!("data of tensor '{}'", p.name),
                    offset: p.pos,
                });
            }
            tensors.push(TensorInfo {
                name: p.name,
                dims: p.dims,
                ty: p.ty,
                file_offset: start,
                data: &bytes[start as usize..end as usize],
            });
        }

        Ok(Gguf {
            version,
            metadata,
            index,
            tensors,
            tensor_index,
            alignment,
            data_offset,
        })
    }

    pub fn get(&self, key: &str) -> Option<&Value<'a>> {
        self.index.get(key).map(|&i| &self.metadata[i].1)
    }

    pub fn tensor(&self, name: &str) -> Option<&TensorInfo<'a>> {
        self.tensor_index.get(name).map(|&i| &self.tensors[i])
    }
}

/// Cursor over the file bytes; every read is bounds-checked.
struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn err_at(&self, offset: usize, field: &str, kind: GgufErrorKind) -> GgufError {
        GgufError {
            kind,
            field: field.to_string(),
            offset: offset as u64,
        }
    }

    fn remaining(&self) -> u64 {
        (self.buf.len() - self.pos) as u64
    }

    fn take(&mut self, n: u64, field: &str) -> Result<&'a [u8], GgufError> {
        if n > self.remaining() {
            return Err(self.err_at(
                self.pos,
                field,
                GgufErrorKind::Truncated {
                    need: n,
                    have: self.remaining(),
                },
            ));
        }
        let s = &self.buf[self.pos..self.pos + n as usize];
        self.pos += n as usize;
        Ok(s)
    }

    fn array4(&mut self, field: &str) -> Result<[u8; 4], GgufError> {
        let s = self.take(4, field)?;
        Ok([s[0], s[1], s[2], s[3]])
    }

    fn u32(&mut self, field: &str) -> Result<u32, GgufError> {
        Ok(u32::from_le_bytes(self.array4(field)?))
    }

    fn u64(&mut self, field: &str) -> Result<u64, GgufError> {
        let s = self.take(8, field)?;
        Ok(u64::from_le_bytes(
            s.try_into().expect("take returned 8 bytes"),
        ))
    }

    /// Reads a u64 count of items that each take at least `min_item` bytes, refusing counts the
    /// rest of the file could not hold.
    fn count(&mut self, field: &str, min_item: u64) -> Result<usize, GgufError> {
        let at = self.pos;
        let v = self.u64(field)?;
        let limit = self.remaining() / min_item.max(1);
        if v > limit {
            return Err(self.err_at(at, field, GgufErrorKind::TooLarge { value: v, limit }));
        }
        Ok(v as usize)
    }

    fn string(&mut self, field: &str) -> Result<&'a [u8], GgufError> {
        let at = self.pos;
        let len = self.u64(&format!("length of {field}"))?;
        if len > self.remaining() {
            return Err(self.err_at(
                at,
                &format!("length of {field}"),
                GgufErrorKind::TooLarge {
                    value: len,
                    limit: self.remaining(),
                },
            ));
        }
        self.take(len, field)
    }

    fn name(&mut self, field: &str) -> Result<&'a str, GgufError> {
        let at = self.pos;
        let len_peek = self
            .buf
            .get(at..at + 8)
            .map(|b| u64::from_le_bytes(b.try_into().unwrap()));
        if let Some(len) = len_peek {
            if len > MAX_NAME_LEN {
                return Err(self.err_at(
                    at,
                    &format!("length of {field}"),
                    GgufErrorKind::TooLarge {
                        value: len,
                        limit: MAX_NAME_LEN,
                    },
                ));
            }
        }
        let s = self.string(field)?;
        std::str::from_utf8(s).map_err(|_| self.err_at(at + 8, field, GgufErrorKind::BadUtf8))
    }

    fn value(&mut self, ty: ValueType, key: &str, depth: u32) -> Result<Value<'a>, GgufError> {
        Ok(match ty {
            ValueType::U8 => Value::U8(self.take(1, key)?[0]),
            ValueType::I8 => Value::I8(self.take(1, key)?[0] as i8),
            ValueType::Bool => Value::Bool(self.take(1, key)?[0] != 0),
            ValueType::U16 => {
                Value::U16(u16::from_le_bytes(self.take(2, key)?.try_into().unwrap()))
            }
            ValueType::I16 => {
                Value::I16(i16::from_le_bytes(self.take(2, key)?.try_into().unwrap()))
            }
            ValueType::U32 => Value::U32(self.u32(key)?),
            ValueType::I32 => Value::I32(self.u32(key)? as i32),
            ValueType::F32 => Value::F32(f32::from_bits(self.u32(key)?)),
            ValueType::U64 => Value::U64(self.u64(key)?),
            ValueType::I64 => Value::I64(self.u64(key)? as i64),
            ValueType::F64 => Value::F64(f64::from_bits(self.u64(key)?)),
            ValueType::String => Value::String(self.string(key)?),
            ValueType::Array => Value::Array(self.array(key, depth)?),
        })
    }

    fn array(&mut self, key: &str, depth: u32) -> Result<Array<'a>, GgufError> {
        if depth >= MAX_ARRAY_DEPTH {
            return Err(self.err_at(
                self.pos,
                &format!("array nesting depth of '{key}'"),
                GgufErrorKind::TooLarge {
                    value: depth as u64 + 1,
                    limit: MAX_ARRAY_DEPTH as u64,
                },
            ));
        }
        let ty_at = self.pos;
        let field = format!("element type of array '{key}'");
        let raw_ty = self.u32(&field)?;
        let elem = ValueType::from_u32(raw_ty)
            .ok_or_else(|| self.err_at(ty_at, &field, GgufErrorKind::BadValueType(raw_ty)))?;
        let count = self.count(&format!("length of array '{key}'"), elem.min_encoded_size())?;
        Ok(match elem {
            ValueType::String => {
                // `count` ≤ remaining / 8 (see `count`): at most twice the remaining bytes.
                let mut v = Vec::with_capacity(count);
                for i in 0..count {
                    v.push(self.string(&format!("{key}[{i}]"))?);
                }
                Array::Strings(v)
            }
            ValueType::Array => {
                let mut v = Vec::with_capacity(prealloc(count));
                for _ in 0..count {
                    v.push(self.array(key, depth + 1)?);
                }
                Array::Arrays(v)
            }
            scalar => {
                let size = scalar.scalar_size().expect("scalar type") as u64;
                let raw = self.take(count as u64 * size, key)?;
                Array::Scalars {
                    elem: scalar,
                    count,
                    raw,
                }
            }
        })
    }
}
