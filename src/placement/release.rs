//! Dropping the model file's pages while its copies are built, so the page cache never holds
//! a whole extra model and the memory it frees is what the copies' pages are made of.
//!
//! The page cache may hold a file in folios of up to [`FOLIO_MAX_BYTES`], and
//! `POSIX_FADV_DONTNEED` drops only the folios that lie wholly inside its range: dropping each
//! matrix's bytes as it is copied would drop nothing of an expert of a megabyte. So the file is
//! counted in aligned chunks of that size, each knowing how many of its bytes the copies have
//! still to read (a byte read by two nodes' copies counts twice), and a chunk is dropped whole
//! once they have all been read. Counting bytes, not matrices, frees a large matrix's chunks
//! while it is still being copied, so only the first few chunks' copies need fresh memory.
//!
//! Memory freed this way is memory the guest just used. Under a hypervisor that takes free
//! memory back (page reporting), fresh pages fault on the host first, so the copies' huge pages
//! come several times faster from the file's freed folios than from free memory.

use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};

/// The largest folio the page cache builds on x86-64 (a PMD's worth: 2 MiB).
pub const FOLIO_MAX_BYTES: usize = 2 << 20;

/// Per aligned chunk of a file: the bytes in it the copies have still to read.
pub struct ChunkCounts {
    /// The file offsets that may be dropped (the bytes from the first matrix to the end of the
    /// last): a chunk's bytes outside them, the header's, stay.
    span: Range<usize>,
    chunk: usize,
    page: usize,
    left: Vec<AtomicU64>,
}

impl ChunkCounts {
    /// Counts nothing yet, for a file whose droppable bytes are `span`, in chunks of `chunk`
    /// bytes; drops are whole pages of `page` bytes (`chunk` is a multiple of `page`).
    pub fn new(span: Range<usize>, chunk: usize, page: usize) -> ChunkCounts {
        assert!(
            page > 0 && chunk.is_multiple_of(page),
            "chunks of whole pages"
        );
        let left = (0..span.end.div_ceil(chunk))
            .map(|_| AtomicU64::new(0))
            .collect();
        ChunkCounts {
            span,
            chunk,
            page,
            left,
        }
    }

    /// Each chunk `s` overlaps, with the bytes of the overlap.
    fn overlaps(&self, s: &Range<usize>) -> impl Iterator<Item = (usize, u64)> + '_ {
        let (lo, hi) = (s.start, s.end.min(self.span.end));
        let chunks = match hi > lo {
            true => lo / self.chunk..hi.div_ceil(self.chunk),
            false => 0..0,
        };
        chunks.map(move |c| {
            let (c0, c1) = (c * self.chunk, (c + 1) * self.chunk);
            (c, (hi.min(c1) - lo.max(c0)) as u64)
        })
    }

    /// Counts the file offsets `s` to be read once more (by one copy). Every read is counted
    /// before any is [`ChunkCounts::done`].
    pub fn expect(&self, s: &Range<usize>) {
        for (c, bytes) in self.overlaps(s) {
            self.left[c].fetch_add(bytes, Ordering::Relaxed);
        }
    }

    /// Counts the file offsets `s` read (by one copy, as expected); returns the file offsets,
    /// whole pages, of the chunks that left with nothing to read (consecutive chunks joined),
    /// to be dropped.
    pub fn done(&self, s: &Range<usize>) -> Vec<Range<usize>> {
        let mut out: Vec<Range<usize>> = Vec::new();
        for (c, bytes) in self.overlaps(s) {
            let before = self.left[c].fetch_sub(bytes, Ordering::AcqRel);
            assert!(before >= bytes, "chunk {c} read more than expected");
            if before != bytes {
                continue;
            }
            let lo = (c * self.chunk).max(self.span.start);
            let hi = ((c + 1) * self.chunk).min(self.span.end);
            let (lo, hi) = (
                lo.div_ceil(self.page) * self.page,
                hi / self.page * self.page,
            );
            if hi <= lo {
                continue;
            }
            match out.last_mut() {
                Some(r) if r.end == lo => r.end = hi,
                _ => out.push(lo..hi),
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: usize = 4096;
    const CHUNK: usize = 4 * PAGE;

    fn counted(spans: &[Range<usize>]) -> ChunkCounts {
        let lo = spans.iter().map(|s| s.start).min().unwrap();
        let hi = spans.iter().map(|s| s.end).max().unwrap();
        let counts = ChunkCounts::new(lo..hi, CHUNK, PAGE);
        spans.iter().for_each(|s| counts.expect(s));
        counts
    }

    #[test]
    fn a_chunk_is_dropped_once_every_byte_in_it_is_read() {
        // a: 1.5 chunks from a header page; b: small, sharing a's second chunk; c: two chunks.
        let a = PAGE..CHUNK + 2 * PAGE;
        let b = CHUNK + 2 * PAGE..CHUNK + 3 * PAGE;
        let c = CHUNK + 3 * PAGE..3 * CHUNK + PAGE;
        let counts = counted(&[a.clone(), b.clone(), c.clone()]);
        // The first chunk is a's alone, less the header page.
        assert_eq!(counts.done(&a), vec![PAGE..CHUNK]);
        // The second holds b and c too.
        assert!(counts.done(&b).is_empty());
        // Then it and c's own go, joined; the last chunk ends where c does.
        assert_eq!(counts.done(&c), vec![CHUNK..3 * CHUNK + PAGE]);
    }

    #[test]
    fn a_large_matrix_frees_its_chunks_as_it_is_read() {
        let m = 0..8 * CHUNK;
        let counts = counted(std::slice::from_ref(&m));
        // Read in steps of three pages: each chunk goes once its last byte is read.
        let mut dropped = Vec::new();
        for at in (0..m.end).step_by(3 * PAGE) {
            let got = counts.done(&(at..(at + 3 * PAGE).min(m.end)));
            for r in &got {
                assert!(r.end <= (at + 3 * PAGE), "{r:?} dropped before it was read");
            }
            dropped.extend(got);
        }
        let total: usize = dropped.iter().map(|r| r.len()).sum();
        assert_eq!(total, m.len());
        assert!(dropped.len() > 4, "dropped in {} steps", dropped.len());
    }

    #[test]
    fn a_chunk_read_by_two_copies_waits_for_both() {
        let m = 0..2 * CHUNK;
        let counts = counted(&[m.clone(), m.clone()]);
        assert!(counts.done(&m).is_empty());
        assert_eq!(counts.done(&m), vec![m.clone()]);
    }

    #[test]
    fn no_chunk_is_dropped_while_a_byte_in_it_is_unread() {
        let spans: Vec<Range<usize>> = (0..9).map(|i| i * 3 * PAGE..(i + 1) * 3 * PAGE).collect();
        let counts = counted(&spans);
        let mut dropped: Vec<Range<usize>> = Vec::new();
        // Read out of order; after each, every dropped byte's chunk is wholly read.
        let order = [4, 0, 8, 2, 6, 1, 7, 3, 5];
        for (k, &i) in order.iter().enumerate() {
            dropped.extend(counts.done(&spans[i]));
            let read = &order[..=k];
            for r in &dropped {
                for s in spans.iter().enumerate().filter(|(j, _)| !read.contains(j)) {
                    let overlap = r.start < s.1.end && s.1.start < r.end;
                    assert!(!overlap, "{r:?} dropped while {:?} is unread", s.1);
                }
            }
        }
        // In the end everything is dropped, once.
        dropped.sort_by_key(|r| r.start);
        let total: usize = dropped.iter().map(|r| r.len()).sum();
        assert_eq!(total, 27 * PAGE);
        assert!(dropped.windows(2).all(|w| w[0].end <= w[1].start));
    }

    #[test]
    fn an_empty_read_drops_nothing() {
        let m = CHUNK..2 * CHUNK;
        let counts = counted(std::slice::from_ref(&m));
        assert!(counts.done(&(100..100)).is_empty());
        assert!(counts.done(&(CHUNK..CHUNK)).is_empty());
        assert_eq!(counts.done(&(CHUNK..2 * CHUNK)), vec![CHUNK..2 * CHUNK]);
    }

    #[test]
    fn unaligned_ends_keep_their_partial_pages() {
        let span = 100..CHUNK + 100;
        let counts = counted(std::slice::from_ref(&span));
        assert_eq!(counts.done(&span), vec![PAGE..CHUNK]);
    }
}
