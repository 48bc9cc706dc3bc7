//! Packed weight layouts: the same bytes as the file's rows, regrouped so that a kernel reads
//! a group of rows block by block as whole vectors, in one sequential stream.
//!
//! Decoding streams every weight once per token. Read from the file's layout, a pass over
//! sixteen Q4_0 rows touches sixteen places at once (one 18-byte block per row, a quarter of
//! them split over two cache lines), and the kernel spends most of its instructions putting
//! the rows' bytes side by side in registers. Packed, block `i` of sixteen rows is 288
//! consecutive bytes already in that order (llama.cpp repacks Q4_0 at load for the same
//! reason, into groups of eight rows):
//! ```text
//! group g (rows 16g..16g+16), block i, at byte (g·n + i)·288 of the matrix:
//!   bytes   0..32    the sixteen rows' f16 scales d, row r at 2r
//!   bytes  32..288   four 64-byte vectors: vector k holds nibble bytes 4k..4k+4 of row r at 4r
//! ```
//! A group takes exactly the bytes its sixteen rows take in the file, at the same place, so a
//! packed copy has the file's size and its pages hold the same rows.

use super::blocks::BlockQ4_0;

/// Rows per packed group.
pub const PACK_ROWS: usize = 16;
/// Bytes of one Q4_0 block.
const BLOCK: usize = std::mem::size_of::<BlockQ4_0>();
/// Bytes of the scales at the start of a packed block step.
const SCALES: usize = 2 * PACK_ROWS;
/// Nibble bytes of one row's block.
const QS: usize = BLOCK - 2;
/// Bytes each row gives to one 64-byte vector.
const GROUP: usize = 4;
/// Bytes of one packed block step: [`PACK_ROWS`] blocks.
pub const STEP: usize = PACK_ROWS * BLOCK;

/// How a view of a matrix stores its rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Layout {
    /// Row after row, as the file stores them.
    #[default]
    Rows,
    /// Q4_0 in groups of [`PACK_ROWS`] rows, as the module documentation shows.
    Q4_0x16,
}

impl Layout {
    /// The layout's name in reports (`locus audit`).
    pub fn name(self) -> &'static str {
        match self {
            Layout::Rows => "rows",
            Layout::Q4_0x16 => "q4_0x16",
        }
    }
}

/// Every run of bytes packing moves, for sixteen rows of `n` blocks: (offset in the file's
/// layout, offset in the packed layout, length). Unpacking moves the same runs back.
fn moves(n: usize) -> impl Iterator<Item = (usize, usize, usize)> {
    let row_bytes = n * BLOCK;
    (0..n).flat_map(move |i| {
        (0..PACK_ROWS).flat_map(move |r| {
            let (file, step) = (r * row_bytes + i * BLOCK, i * STEP);
            let scale = (file, step + 2 * r, 2);
            let qs = (0..QS / GROUP).map(move |k| {
                let at = step + SCALES + k * GROUP * PACK_ROWS + GROUP * r;
                (file + 2 + GROUP * k, at, GROUP)
            });
            std::iter::once(scale).chain(qs)
        })
    })
}

/// Checks that `a` and `b` are both sixteen rows of `n` blocks.
fn check_sizes(what: &str, a: &[u8], b: &[u8], n: usize) {
    assert!(
        a.len() == n * STEP && b.len() == a.len(),
        "{what}: {} and {} bytes for sixteen rows of {n} blocks",
        a.len(),
        b.len()
    );
}

/// Packs [`PACK_ROWS`] Q4_0 rows of `n` blocks each, back to back in `rows` (the file's
/// layout), into `out` (the same size).
///
/// # Panics
/// If either slice is not `PACK_ROWS · n` blocks long.
pub fn pack_q4_0x16(rows: &[u8], n: usize, out: &mut [u8]) {
    check_sizes("pack", rows, out, n);
    for (file, packed, len) in moves(n) {
        out[packed..packed + len].copy_from_slice(&rows[file..file + len]);
    }
}

/// The inverse of [`pack_q4_0x16`]: the file's layout of a packed group.
///
/// # Panics
/// As [`pack_q4_0x16`].
pub fn unpack_q4_0x16(packed: &[u8], n: usize, out: &mut [u8]) {
    check_sizes("unpack", packed, out, n);
    for (file, at, len) in moves(n) {
        out[file..file + len].copy_from_slice(&packed[at..at + len]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(len: usize, seed: u32) -> Vec<u8> {
        let mut s = seed;
        (0..len)
            .map(|_| {
                s = s.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                (s >> 24) as u8
            })
            .collect()
    }

    #[test]
    fn unpack_inverts_pack() {
        for n in [1, 2, 7, 18] {
            let rows = bytes(n * STEP, n as u32);
            let mut packed = vec![0u8; rows.len()];
            pack_q4_0x16(&rows, n, &mut packed);
            assert_ne!(packed, rows, "packing moves bytes");
            let mut back = vec![0u8; rows.len()];
            unpack_q4_0x16(&packed, n, &mut back);
            assert_eq!(back, rows, "{n} blocks");
        }
    }

    #[test]
    fn packed_block_holds_scales_then_four_byte_groups_by_row() {
        let n = 3;
        let rows = bytes(n * STEP, 7);
        let mut p = vec![0u8; rows.len()];
        pack_q4_0x16(&rows, n, &mut p);
        let block = |r: usize, i: usize| &rows[(r * n + i) * BLOCK..][..BLOCK];
        for i in 0..n {
            let step = &p[i * STEP..(i + 1) * STEP];
            for r in 0..PACK_ROWS {
                assert_eq!(
                    &step[2 * r..2 * r + 2],
                    &block(r, i)[..2],
                    "scale of row {r}"
                );
                for k in 0..4 {
                    let at = SCALES + 64 * k + 4 * r;
                    assert_eq!(&step[at..at + 4], &block(r, i)[2 + 4 * k..6 + 4 * k]);
                }
            }
        }
    }
}
