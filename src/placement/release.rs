//! Dropping the model file's pages while its copies are built, so the page cache never holds
//! a whole extra model and the memory it frees is what the copies' pages are made of.
//!
//! The page cache may hold a file in folios of up to [`FOLIO_MAX_BYTES`], and
//! `POSIX_FADV_DONTNEED` drops only the folios that lie wholly inside its range: dropping each
//! matrix's bytes as it is copied would drop nothing of an expert of a megabyte. So the file is
//! counted in aligned chunks of that size, each knowing how many matrices still to be copied
//! overlap it, and a chunk is dropped whole once the last of them is done.
//!
//! Memory freed this way is memory the guest just used. Under a hypervisor that takes free
//! memory back (page reporting), fresh pages fault on the host first, so the copies' huge pages
//! come several times faster from the file's freed folios than from free memory.

use std::ops::Range;
use std::sync::atomic::{AtomicU32, Ordering};

/// The largest folio the page cache builds on x86-64 (a PMD's worth: 2 MiB).
pub const FOLIO_MAX_BYTES: usize = 2 << 20;

/// Per aligned chunk of a file's bytes: the matrices still to be copied that overlap it.
pub struct ChunkCounts {
    /// The file offsets that may be dropped (the bytes from the first matrix to the end of the
    /// last): a chunk's bytes outside them, the header's, stay.
    span: Range<usize>,
    chunk: usize,
    page: usize,
    left: Vec<AtomicU32>,
}

impl ChunkCounts {
    /// Counts `spans`, the file offsets of every matrix the copies read, in chunks of `chunk`
    /// bytes; drops are whole pages of `page` bytes (`chunk` is a multiple of `page`).
    pub fn new(spans: &[Range<usize>], chunk: usize, page: usize) -> ChunkCounts {
        assert!(
            page > 0 && chunk.is_multiple_of(page),
            "chunks of whole pages"
        );
        let nonempty = || spans.iter().filter(|s| !s.is_empty());
        let lo = nonempty().map(|s| s.start).min().unwrap_or(0);
        let hi = nonempty().map(|s| s.end).max().unwrap_or(0);
        let left: Vec<AtomicU32> = (0..hi.div_ceil(chunk)).map(|_| AtomicU32::new(0)).collect();
        for s in nonempty() {
            for c in Self::chunks_of(s, chunk) {
                left[c].fetch_add(1, Ordering::Relaxed);
            }
        }
        ChunkCounts {
            span: lo..hi,
            chunk,
            page,
            left,
        }
    }

    fn chunks_of(s: &Range<usize>, chunk: usize) -> Range<usize> {
        s.start / chunk..s.end.div_ceil(chunk)
    }

    /// Counts the matrix at file offsets `s` copied (each matrix once); returns the file
    /// offsets, whole pages, whose chunks that left with nothing to copy (consecutive chunks
    /// joined), to be dropped.
    pub fn done(&self, s: &Range<usize>) -> Vec<Range<usize>> {
        let mut out: Vec<Range<usize>> = Vec::new();
        if s.is_empty() {
            return out;
        }
        for c in Self::chunks_of(s, self.chunk) {
            let Some(n) = self.left.get(c) else { break };
            if n.fetch_sub(1, Ordering::AcqRel) != 1 {
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

    #[test]
    fn a_chunk_is_dropped_once_every_matrix_in_it_is_copied() {
        // a: 1.5 chunks from a header page; b: small, sharing a's second chunk; c: two chunks.
        let a = PAGE..CHUNK + 2 * PAGE;
        let b = CHUNK + 2 * PAGE..CHUNK + 3 * PAGE;
        let c = CHUNK + 3 * PAGE..3 * CHUNK + PAGE;
        let counts = ChunkCounts::new(&[a.clone(), b.clone(), c.clone()], CHUNK, PAGE);
        // The first chunk is a's alone, less the header page.
        assert_eq!(counts.done(&a), vec![PAGE..CHUNK]);
        // The second holds b and c too.
        assert!(counts.done(&b).is_empty());
        // Then it and c's own go, joined; the last chunk ends where c does.
        assert_eq!(counts.done(&c), vec![CHUNK..3 * CHUNK + PAGE]);
    }

    #[test]
    fn no_chunk_is_dropped_while_a_matrix_in_it_is_not_copied() {
        let spans: Vec<Range<usize>> = (0..9).map(|i| i * 3 * PAGE..(i + 1) * 3 * PAGE).collect();
        let counts = ChunkCounts::new(&spans, CHUNK, PAGE);
        let mut dropped: Vec<Range<usize>> = Vec::new();
        // Copied out of order; after each, every dropped byte's chunk is wholly copied.
        let order = [4, 0, 8, 2, 6, 1, 7, 3, 5];
        for (k, &i) in order.iter().enumerate() {
            dropped.extend(counts.done(&spans[i]));
            let copied = &order[..=k];
            for r in &dropped {
                for s in spans
                    .iter()
                    .enumerate()
                    .filter(|(j, _)| !copied.contains(j))
                {
                    let overlap = r.start < s.1.end && s.1.start < r.end;
                    assert!(!overlap, "{r:?} dropped while {:?} is not copied", s.1);
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
    fn unaligned_ends_keep_their_partial_pages() {
        let span = 100..CHUNK + 100;
        let counts = ChunkCounts::new(std::slice::from_ref(&span), CHUNK, PAGE);
        assert_eq!(counts.done(&span), vec![PAGE..CHUNK]);
    }
}
