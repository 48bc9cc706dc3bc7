//! One buffer, many threads, each writing its own parts: [`Disjoint`], the crate's only
//! "disjoint writer".
//!
//! A parallel step often fills one output buffer from several threads, each thread a part that
//! only the work split knows (a matmul's claimed rows, a KV head's cells, a placed piece's
//! pages). Safe Rust can hand out such parts only when they are contiguous and known up front
//! (`chunks_mut`, `split_at_mut`), so these writers keep a pointer and leave the disjointness
//! to the caller. What they must not leave to the caller is the buffer's life: a writer made
//! from `&'a mut [T]` keeps that borrow for `'a`, so the borrow checker refuses to free, move,
//! read or write the buffer any other way while a writer (or a copy of it) lives. Before this
//! type each layer had its own writer holding a bare pointer, and nothing but care kept the
//! buffer alive under it.
//!
//! It lives at the crate's top level, beside [`crate::pool`], because every layer that runs
//! parallel steps uses it — the forward pass and its KV cache (model), the weight fill
//! (placement), the bandwidth probe (app) — and it depends on nothing but `core`: `sys` is the
//! Linux layer and knows no threads' work, and the pool is one of several ways the crate
//! runs threads (the fill uses scoped threads).
//!
//! The buffer's life is checked by the compiler:
//! ```compile_fail,E0505
//! use locus::disjoint::Disjoint;
//! let mut buf = vec![0f32; 4];
//! let w = Disjoint::new(&mut buf);
//! drop(buf); // refused: `buf` is borrowed by the writer
//! // SAFETY: the only slice.
//! unsafe { w.slice(0..1)[0] = 1.0 };
//! ```
//! and so is any other access to it while a writer lives:
//! ```compile_fail,E0502
//! use locus::disjoint::Disjoint;
//! let mut buf = vec![0f32; 4];
//! let w = Disjoint::new(&mut buf);
//! let first = buf[0]; // refused: `buf` is mutably borrowed by the writer
//! // SAFETY: the only slice.
//! unsafe { w.slice(0..1)[0] = first };
//! ```
//! Elements that may not cross threads make a writer that may not either:
//! ```compile_fail,E0277
//! use locus::disjoint::Disjoint;
//! let mut buf = vec![std::rc::Rc::new(0u8)];
//! let w = Disjoint::new(&mut buf);
//! std::thread::scope(|s| {
//!     s.spawn(|| w.len());
//! });
//! ```
//! The same code with the writer's last use before the buffer's compiles and runs:
//! ```
//! use locus::disjoint::Disjoint;
//! let mut buf = vec![0f32; 4];
//! let w = Disjoint::new(&mut buf);
//! std::thread::scope(|s| {
//!     for t in 0..2 {
//!         // SAFETY: thread t alone writes elements 2t..2t + 2.
//!         s.spawn(move || unsafe { w.slice(2 * t..2 * t + 2).fill(t as f32) });
//!     }
//! });
//! drop(buf);
//! ```

use std::marker::PhantomData;
use std::ops::Range;

/// A writer into a borrowed `[T]` that several threads use at once, each writing parts no other
/// thread touches. `Copy`, so closures run by many threads can capture it by value.
pub struct Disjoint<'a, T> {
    ptr: *mut T,
    len: usize,
    /// The buffer is exclusively borrowed for `'a`: nothing else reads, writes or frees it
    /// while the writer or any copy of it lives.
    _buf: PhantomData<&'a mut [T]>,
}

impl<T> Clone for Disjoint<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for Disjoint<'_, T> {}

// SAFETY: through the writer a thread gets `&mut` to elements no other thread touches (the
// obligation of `slice` and `write`), which is what sending `&mut T` to that thread does: sound
// for `T: Send`. The buffer itself is borrowed for `'a`, so it outlives every use.
unsafe impl<T: Send> Sync for Disjoint<'_, T> {}
// SAFETY: as for `Sync`: a writer moved to another thread gives it `&mut` to elements it alone
// touches.
unsafe impl<T: Send> Send for Disjoint<'_, T> {}

impl<'a, T> Disjoint<'a, T> {
    /// A writer over `buf`, which stays borrowed while the writer (or a copy) lives.
    pub fn new(buf: &'a mut [T]) -> Disjoint<'a, T> {
        Disjoint {
            ptr: buf.as_mut_ptr(),
            len: buf.len(),
            _buf: PhantomData,
        }
    }

    /// The buffer's length in elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the buffer is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The buffer's first element's address (to compute where pages fall; not to write
    /// through).
    pub fn as_ptr(&self) -> *const T {
        self.ptr
    }

    /// Elements `range` of the buffer, to write.
    ///
    /// # Safety
    /// No two slices or writes live at once from this writer and its copies may overlap: the
    /// caller's split of the work must give these elements to this call alone for as long as
    /// the slice lives.
    ///
    /// # Panics
    /// Where `range` does not lie inside the buffer (checked always).
    #[allow(clippy::mut_from_ref)]
    #[inline]
    pub unsafe fn slice(&self, range: Range<usize>) -> &mut [T] {
        assert!(
            range.start <= range.end && range.end <= self.len,
            "Disjoint::slice({range:?}) outside a buffer of {}",
            self.len
        );
        // SAFETY: in bounds of the buffer, borrowed for 'a (checked above); exclusive access
        // to these elements is the caller's obligation.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.add(range.start), range.len()) }
    }

    /// Stores `v` at element `i` (dropping the old value).
    ///
    /// # Safety
    /// No other slice or write live at once from this writer or its copies may touch element
    /// `i`.
    ///
    /// # Panics
    /// Where `i` is outside the buffer (checked always).
    #[inline]
    pub unsafe fn write(&self, i: usize, v: T) {
        assert!(
            i < self.len,
            "Disjoint::write({i}) outside a buffer of {}",
            self.len
        );
        // SAFETY: in bounds of the buffer, borrowed for 'a (checked above); exclusive access
        // to element i is the caller's obligation.
        unsafe { *self.ptr.add(i) = v }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threads_fill_their_own_parts() {
        let mut buf = vec![0u32; 64];
        let w = Disjoint::new(&mut buf);
        std::thread::scope(|s| {
            for t in 0..4 {
                s.spawn(move || {
                    // SAFETY: thread t alone writes elements 16t..16t + 16.
                    let part = unsafe { w.slice(16 * t..16 * (t + 1)) };
                    part.iter_mut().for_each(|v| *v = t as u32);
                });
            }
        });
        assert!(buf.iter().enumerate().all(|(i, &v)| v == (i / 16) as u32));
    }

    #[test]
    #[should_panic(expected = "outside a buffer of 4")]
    fn a_slice_past_the_end_panics() {
        let mut buf = [0u8; 4];
        let w = Disjoint::new(&mut buf);
        // SAFETY: the only slice (it panics before it exists).
        let _ = unsafe { w.slice(2..5) };
    }

    #[test]
    #[should_panic(expected = "outside a buffer of 4")]
    fn a_write_past_the_end_panics() {
        let mut buf = [0u8; 4];
        let w = Disjoint::new(&mut buf);
        // SAFETY: the only write (it panics first).
        unsafe { w.write(4, 1) };
    }
}
