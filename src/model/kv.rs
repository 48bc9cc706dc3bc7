//! The KV cache's element storage.
//!
//! f16 (llama.cpp's default) and f32 keep one value per element, keys head-major and values
//! transposed, as llama.cpp's attention without flash attention does. q8_0 keeps whole rows of
//! a head's `head_dim` values in ggml's Q8_0 blocks, keys and values alike, as llama.cpp's
//! flash-attention path stores them: a key row is dotted with the query quantized to q8_0
//! (ggml's `vec_dot_q8_0_q8_0`), a value row's values are added in f32, weighted by its softmax
//! probability. llama.cpp refuses a quantized V cache without flash attention, and its flash
//! attention sums in another order, so q8_0 has no bit-exact reference: its cost is measured
//! as perplexity against f16 (BENCHMARKS.md, "Quantized KV cache"). q4_0 was measured too and
//! left out: +21% perplexity on SmolLM2.

use crate::disjoint::Disjoint;
use crate::kernels::ggml_math::round_f16;
use crate::kernels::half::f32_to_f16;
use crate::kernels::{blocks, GgmlType, Kernels};

/// Element type of the KV cache (llama.cpp's `--cache-type-k/v`): f16 is the default and what
/// llama.cpp uses; f32 trades twice the memory for exact keys and values; q8_0 takes 1.06
/// bytes per value (see the module).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KvType {
    F16,
    F32,
    Q8_0,
}

/// Element types whose all-zero bit pattern is a valid value (zero), so a zeroed allocation
/// is an initialised buffer.
pub(crate) trait ZeroIsValid: Copy {}
impl ZeroIsValid for u8 {}
impl ZeroIsValid for u16 {}
impl ZeroIsValid for f32 {}

/// A zero-filled vector of `len` elements, or `None` where the allocation fails (a memory
/// limit, an impossible size) instead of aborting the process. Zeroed by the allocator
/// (`calloc`-like: fresh pages are not touched until used).
pub(crate) fn try_zeroed<T: ZeroIsValid>(len: usize) -> Option<Vec<T>> {
    let layout = std::alloc::Layout::array::<T>(len).ok()?;
    if layout.size() == 0 {
        return Some(Vec::new());
    }
    // SAFETY: the layout has a non-zero size (checked above).
    let ptr = unsafe { std::alloc::alloc_zeroed(layout) }.cast::<T>();
    if ptr.is_null() {
        return None;
    }
    // SAFETY: `ptr` comes from the global allocator with the layout of `[T; len]` (so the
    // vector's capacity and alignment match it), and all `len` elements are zero bytes, a
    // valid `T` by `ZeroIsValid`.
    Some(unsafe { Vec::from_raw_parts(ptr, len, len) })
}

/// `len` zeroed elements in an anonymous mapping of their own: no page is touched before its
/// first write, so the thread that writes a page first decides its node (the cache's
/// placement, `placement::cache`), and next to the caches of other layers and slots the
/// mapping merges into one kernel mapping (no per-buffer entry against `vm.max_map_count`).
pub(crate) struct Pages<T> {
    map: Option<memmap2::MmapMut>,
    len: usize,
    _t: std::marker::PhantomData<T>,
}

impl<T: ZeroIsValid> Pages<T> {
    /// `None` where the mapping is refused (no address space, a memory limit).
    pub(crate) fn try_zeroed(len: usize) -> Option<Pages<T>> {
        let bytes = len.checked_mul(std::mem::size_of::<T>())?;
        let map = if bytes == 0 {
            None
        } else {
            Some(memmap2::MmapMut::map_anon(bytes).ok()?)
        };
        Some(Pages {
            map,
            len,
            _t: std::marker::PhantomData,
        })
    }
}

impl<T> std::ops::Deref for Pages<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        match &self.map {
            // SAFETY: the mapping holds `len` elements' bytes, zeroed by the kernel (a valid
            // `T` by `ZeroIsValid`), and is page-aligned, so aligned for `T`; it lives as long
            // as `self`, which the slice borrows.
            Some(m) => unsafe { std::slice::from_raw_parts(m.as_ptr().cast::<T>(), self.len) },
            None => &[],
        }
    }
}

impl<T> std::ops::DerefMut for Pages<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        match &mut self.map {
            // SAFETY: as for `deref`; `&mut self` makes this the only access.
            Some(m) => unsafe {
                std::slice::from_raw_parts_mut(m.as_mut_ptr().cast::<T>(), self.len)
            },
            None => &mut [],
        }
    }
}

impl KvType {
    /// Names as `-ctk`/`-ctv` take them.
    pub const NAMES: [&'static str; 3] = ["f16", "f32", "q8_0"];

    pub fn parse(s: &str) -> Option<KvType> {
        match s {
            "f16" => Some(KvType::F16),
            "f32" => Some(KvType::F32),
            "q8_0" => Some(KvType::Q8_0),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        Self::NAMES[self as usize]
    }

    /// The block type of a quantized cache.
    pub fn block_type(self) -> Option<GgmlType> {
        match self {
            KvType::Q8_0 => Some(GgmlType::Q8_0),
            KvType::F16 | KvType::F32 => None,
        }
    }

    /// Bytes of a row of `n` values (`n` a multiple of 32 for the quantized types).
    pub fn row_bytes(self, n: usize) -> usize {
        match self {
            KvType::F16 => 2 * n,
            KvType::F32 => 4 * n,
            KvType::Q8_0 => GgmlType::Q8_0.row_bytes(n),
        }
    }

    /// Rounds `v` as the cache would store it (ggml converts the f32 operand of a product with
    /// the cache to the cache's type); the quantized types take the query through q8_0 and the
    /// probabilities in f32 instead.
    #[inline]
    pub fn round(self, v: f32) -> f32 {
        match self {
            KvType::F16 => round_f16(v),
            KvType::F32 | KvType::Q8_0 => v,
        }
    }
}

/// Which of llama.cpp's two arithmetic paths a step follows: a micro-batch of one token runs
/// vector dot products; a micro-batch of several runs its GEMM (tinyBLAS). They sum in
/// different orders, so the engine mirrors the choice to stay bit-identical.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arith {
    Single,
    Batch,
}

impl Arith {
    pub fn for_ubatch(n_tokens: usize) -> Arith {
        if n_tokens >= 2 {
            Arith::Batch
        } else {
            Arith::Single
        }
    }
}

/// ggml pads the KV length it attends over to a multiple of this.
pub const KV_PAD: usize = 256;

/// Stores whole rows into a quantized [`KvBuf`] from several threads at once, each row by one
/// thread only. It borrows the buffer while it lives.
pub(crate) struct RowWriter<'a> {
    bytes: Disjoint<'a, u8>,
    row: usize,
    ty: GgmlType,
}

impl RowWriter<'_> {
    /// Quantizes `x` into row `r` with ggml's quantizer for storing into this type (its
    /// `from_float`: for q8_0 the x86 one, rounding half to even).
    ///
    /// # Safety
    /// No other thread may access row `r` while the writer is in use.
    pub(crate) unsafe fn set_row(&self, r: usize, x: &[f32]) {
        // SAFETY: the row is this thread's alone by the contract; `slice` checks bounds.
        let dst = unsafe { self.bytes.slice(r * self.row..(r + 1) * self.row) };
        match self.ty {
            GgmlType::Q8_0 => {
                let mut b = vec![blocks::BlockQ8_0::default(); x.len() / blocks::QK];
                blocks::quantize_act_q8_0(x, &mut b);
                dst.copy_from_slice(blocks::block_bytes(&b));
            }
            t => panic!("no KV quantizer for {}", t.name()),
        }
    }
}

/// Stores into a [`KvBuf`] from several threads at once, each element by one thread only. It
/// borrows the buffer while it lives.
pub(crate) enum KvWriter<'a> {
    F16(Disjoint<'a, u16>),
    F32(Disjoint<'a, f32>),
}

impl KvWriter<'_> {
    /// Stores `v` (rounded to the cache type) at element `i`.
    ///
    /// # Safety
    /// No other thread may access element `i` while the writer is in use.
    #[inline]
    pub(crate) unsafe fn set(&self, i: usize, v: f32) {
        match self {
            // SAFETY: element i is this thread's alone by the contract; `write` checks bounds.
            KvWriter::F16(w) => unsafe { w.write(i, f32_to_f16(v)) },
            // SAFETY: as above.
            KvWriter::F32(w) => unsafe { w.write(i, v) },
        }
    }
}

/// One layer's keys or values.
pub(crate) enum KvBuf {
    F16(Pages<u16>),
    F32(Pages<f32>),
    /// Rows of `row` bytes in blocks of `ty` (see the module).
    Quant {
        ty: GgmlType,
        row: usize,
        bytes: Pages<u8>,
    },
}

impl KvBuf {
    /// The f16 cache's elements (`None` for the other kinds).
    pub(crate) fn as_f16(&self) -> Option<&[u16]> {
        match self {
            KvBuf::F16(b) => Some(b),
            _ => None,
        }
    }

    /// A zeroed buffer of `len` elements in rows of `row_len` values, or `None` where memory
    /// runs out.
    pub(crate) fn try_new(ty: KvType, len: usize, row_len: usize) -> Option<KvBuf> {
        Some(match ty {
            KvType::F16 => KvBuf::F16(Pages::try_zeroed(len)?),
            KvType::F32 => KvBuf::F32(Pages::try_zeroed(len)?),
            KvType::Q8_0 => {
                let t = ty.block_type()?;
                let row = t.row_bytes(row_len);
                KvBuf::Quant {
                    ty: t,
                    row,
                    bytes: Pages::try_zeroed(len / row_len * row)?,
                }
            }
        })
    }

    /// The buffer's bytes (for placing and auditing its pages).
    pub(crate) fn as_bytes(&self) -> &[u8] {
        match self {
            // SAFETY: u16 and f32 have no padding or invalid bit patterns as bytes; the slice
            // covers exactly the vector's initialised elements and borrows it.
            KvBuf::F16(b) => unsafe {
                std::slice::from_raw_parts(b.as_ptr().cast::<u8>(), std::mem::size_of_val(&b[..]))
            },
            // SAFETY: as above.
            KvBuf::F32(b) => unsafe {
                std::slice::from_raw_parts(b.as_ptr().cast::<u8>(), std::mem::size_of_val(&b[..]))
            },
            KvBuf::Quant { bytes, .. } => bytes,
        }
    }

    /// The values the buffer holds.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        match self {
            KvBuf::F16(b) => b.len(),
            KvBuf::F32(b) => b.len(),
            KvBuf::Quant { ty, row, bytes } => {
                bytes.len() / row * (row / ty.block_bytes()) * ty.block_size()
            }
        }
    }

    /// Row `r` of a quantized buffer.
    ///
    /// # Panics
    /// On an f16 or f32 buffer: a caller bug.
    #[inline]
    pub(crate) fn quant_row(&self, r: usize) -> &[u8] {
        let KvBuf::Quant { row, bytes, .. } = self else {
            panic!("quant_row on an unquantized KV cache");
        };
        &bytes[r * row..(r + 1) * row]
    }

    /// Rows `r..r + n` of a quantized buffer, contiguous.
    ///
    /// # Panics
    /// On an f16 or f32 buffer: a caller bug.
    #[inline]
    pub(crate) fn quant_rows(&self, r: usize, n: usize) -> &[u8] {
        let KvBuf::Quant { row, bytes, .. } = self else {
            panic!("quant_rows on an unquantized KV cache");
        };
        &bytes[r * row..(r + n) * row]
    }

    /// A writer of whole quantized rows, for threads that store disjoint rows in one step.
    ///
    /// # Panics
    /// On an f16 or f32 buffer: a caller bug.
    pub(crate) fn row_writer(&mut self) -> RowWriter<'_> {
        let KvBuf::Quant { ty, row, bytes } = self else {
            panic!("row_writer on an unquantized KV cache");
        };
        RowWriter {
            bytes: Disjoint::new(bytes),
            row: *row,
            ty: *ty,
        }
    }

    /// A writer through which threads store disjoint elements in one parallel step.
    pub(crate) fn writer(&mut self) -> KvWriter<'_> {
        match self {
            KvBuf::F16(b) => KvWriter::F16(Disjoint::new(b)),
            KvBuf::F32(b) => KvWriter::F32(Disjoint::new(b)),
            KvBuf::Quant { .. } => panic!("writer on a quantized KV cache: use row_writer"),
        }
    }

    /// Dot product of elements `[start, start + y.len())` with `y`, in the operation order
    /// llama.cpp uses for `arith` (`n_pad`: ggml's padded row length, for single tokens).
    #[inline]
    pub(crate) fn dot(
        &self,
        k: &Kernels,
        arith: Arith,
        start: usize,
        y: &[f32],
        n_pad: usize,
    ) -> f32 {
        match (self, arith) {
            (KvBuf::F16(b), Arith::Single) => {
                k.att_dot_decode(&b[start..start + y.len()], y, n_pad)
            }
            (KvBuf::F16(b), Arith::Batch) => k.att_dot_batch(&b[start..start + y.len()], y),
            (KvBuf::F32(b), _) => k.dot_f32(&b[start..start + y.len()], y),
            (KvBuf::Quant { .. }, _) => panic!("element dot on a quantized KV cache"),
        }
    }

    /// `out[j] = self.dot(k, arith, start + j * stride, y, n_pad)` for every j, bit for bit.
    pub(crate) fn dots(
        &self,
        k: &Kernels,
        arith: Arith,
        (start, stride): (usize, usize),
        y: &[f32],
        n_pad: usize,
        out: &mut [f32],
    ) {
        match (self, arith) {
            (KvBuf::F16(b), Arith::Single) => {
                k.att_dot_decode_rows(&b[start..], stride, y, n_pad, out)
            }
            _ => {
                for (j, o) in out.iter_mut().enumerate() {
                    *o = self.dot(k, arith, start + j * stride, y, n_pad);
                }
            }
        }
    }

    /// Rows `[start + j * stride, start + j * stride + len)` for j in 0..rows of an f16 cache,
    /// widened (exactly) to f32 into `dst`, row j at `j * stride`.
    ///
    /// # Panics
    /// On an f32 cache (read it directly): a caller bug.
    pub(crate) fn widen_rows(
        &self,
        k: &Kernels,
        (start, stride): (usize, usize),
        (rows, len): (usize, usize),
        dst: &mut [f32],
    ) {
        let KvBuf::F16(b) = self else {
            panic!("widen_rows on an f32 KV cache");
        };
        for j in 0..rows {
            let s = start + j * stride;
            k.widen_f16(&b[s..s + len], &mut dst[j * stride..j * stride + len]);
        }
    }
}
