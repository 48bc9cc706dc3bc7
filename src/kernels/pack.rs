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
//! packed copy has the file's size and its pages hold the same rows. IQ4_NL, whose blocks are
//! Q4_0's (an f16 scale and sixteen nibble bytes), packs exactly so ([`Layout::Iq4NlX16`]).
//!
//! Q4_K ([`Layout::Q4Kx16`]) is packed the same way, super-block by super-block: the sixteen
//! rows' fields side by side, so that a single-token kernel finds each row in the lanes of its
//! vectors and never reduces across lanes (llama.cpp repacks Q4_K at load for the same reason):
//! ```text
//! group g, super-block i, at byte (g·n + i)·2304 of the matrix:
//!   bytes    0..32     the rows' f16 scales d, row r at 2r
//!   bytes   32..64     their f16 mins dmin, row r at 32 + 2r
//!   bytes   64..256    their 12 packed scale bytes: byte p of row r at 64 + 16p + r
//!   bytes  256..2304   32 64-byte vectors: vector k holds nibble bytes 4k..4k+4 of row r at 4r
//! ```
//!
//! IQ4_XS ([`Layout::Iq4XsX16`]) is interleaved word by word, whole blocks: its 136-byte block
//! is 34 little-endian words (d and `scales_h`, `scales_l`, then the nibbles), and word w of
//! row r's super-block i sits at byte `(g·n + i)·2176 + 64w + 4r`, so each 64-byte vector holds
//! one field of all sixteen rows in its i32 lanes. Q6_K ([`Layout::Q6Kx16`]) likewise: its
//! 210-byte block is 52 words (`ql`, `qh`, the scales) and its f16 `d`, which ends the step
//! as sixteen f16 (row r at `64·52 + 2r`). Q5_K ([`Layout::Q5Kx16`]): 44 words (d and dmin,
//! three of scales, eight of `qh`, then the nibbles). [`Layout::Q6KPairs`] is `Q6Kx16` with
//! each row's code bits regrouped within its lanes ([`q6_k_pair`]), for the AVX2
//! kernels: the same step size, the same rows in the same pages. [`Layout::Q5KPairs`] is
//! `Q5Kx16` regrouped the same way ([`q5_k_pair`]).

use super::blocks::BlockQ4_0;
use super::blocks::{BlockQ4K, K_SCALE_SIZE};
use super::pack_pairs::{q5_k_pair, q5_k_unpair, q6_k_pair, q6_k_unpair, MAX_PAIRED_STEP};

/// Rows per packed group.
pub const PACK_ROWS: usize = 16;
/// Bytes of one Q4_0 block.
const BLOCK: usize = std::mem::size_of::<BlockQ4_0>();
/// Bytes of the scales at the start of a packed block step.
const SCALES: usize = 2 * PACK_ROWS;
/// Nibble bytes of one row's block.
const QS: usize = BLOCK - 2;
/// Bytes each row gives to one 64-byte vector.
pub(super) const GROUP: usize = 4;
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
    /// IQ4_NL as [`Layout::Q4_0x16`] (the two types store a block alike).
    Iq4NlX16,
    /// Q4_K in groups of [`PACK_ROWS`] rows, as the module documentation shows.
    Q4Kx16,
    /// IQ4_XS in groups of [`PACK_ROWS`] rows, word by word (the module documentation).
    Iq4XsX16,
    /// Q6_K in groups of [`PACK_ROWS`] rows, word by word (the module documentation).
    Q6Kx16,
    /// Q5_K in groups of [`PACK_ROWS`] rows, word by word (the module documentation).
    Q5Kx16,
    /// Q6_K as [`Layout::Q6Kx16`], each row's codes regrouped in pairs of sub-blocks for the
    /// AVX2 kernels ([`q6_k_pair`]).
    Q6KPairs,
    /// Q5_K as [`Layout::Q5Kx16`], each row's codes regrouped in pairs of sub-blocks for the
    /// AVX2 kernels ([`q5_k_pair`]).
    Q5KPairs,
}

impl Layout {
    /// The layout's name in reports (`locus audit`).
    pub fn name(self) -> &'static str {
        match self {
            Layout::Rows => "rows",
            Layout::Q4_0x16 => "q4_0x16",
            Layout::Iq4NlX16 => "iq4_nlx16",
            Layout::Q4Kx16 => "q4_kx16",
            Layout::Iq4XsX16 => "iq4_xsx16",
            Layout::Q6Kx16 => "q6_kx16",
            Layout::Q5Kx16 => "q5_kx16",
            Layout::Q6KPairs => "q6_kx16p",
            Layout::Q5KPairs => "q5_kx16p",
        }
    }

    /// What the layout holds, for reports.
    pub fn describe(self) -> &'static str {
        match self {
            Layout::Rows => "rows as the file stores them",
            Layout::Q4_0x16 => "Q4_0 in groups of 16 rows, same bytes and pages",
            Layout::Iq4NlX16 => "IQ4_NL in groups of 16 rows, same bytes and pages",
            Layout::Q4Kx16 => "Q4_K in groups of 16 rows, same bytes and pages",
            Layout::Iq4XsX16 => "IQ4_XS in groups of 16 rows, same bytes and pages",
            Layout::Q6Kx16 => "Q6_K in groups of 16 rows, same bytes and pages",
            Layout::Q5Kx16 => "Q5_K in groups of 16 rows, same bytes and pages",
            Layout::Q6KPairs => "Q6_K in groups of 16 rows, codes paired, same pages",
            Layout::Q5KPairs => "Q5_K in groups of 16 rows, codes paired, same pages",
        }
    }

    /// Elements of one block of the packed type (its rows hold `cols / block_elems()` blocks).
    pub fn block_elems(self) -> usize {
        match self {
            Layout::Rows | Layout::Q4_0x16 | Layout::Iq4NlX16 => super::QK,
            Layout::Q4Kx16
            | Layout::Iq4XsX16
            | Layout::Q6Kx16
            | Layout::Q5Kx16
            | Layout::Q6KPairs
            | Layout::Q5KPairs => super::blocks::QK_K,
        }
    }

    /// Bytes of one packed step (a block of each of the [`PACK_ROWS`] rows); `None` for
    /// [`Layout::Rows`].
    pub fn step_bytes(self) -> Option<usize> {
        self.holds().map(|t| t.block_bytes() * PACK_ROWS)
    }

    /// The weight type a packed layout holds (`None` for [`Layout::Rows`]: any).
    pub fn holds(self) -> Option<super::GgmlType> {
        use super::GgmlType;
        match self {
            Layout::Rows => None,
            Layout::Q4_0x16 => Some(GgmlType::Q4_0),
            Layout::Iq4NlX16 => Some(GgmlType::Iq4Nl),
            Layout::Q4Kx16 => Some(GgmlType::Q4K),
            Layout::Iq4XsX16 => Some(GgmlType::Iq4Xs),
            Layout::Q6Kx16 | Layout::Q6KPairs => Some(GgmlType::Q6K),
            Layout::Q5Kx16 | Layout::Q5KPairs => Some(GgmlType::Q5K),
        }
    }

    /// Every layout that packs, for reports.
    pub const PACKED: [Layout; 8] = [
        Layout::Q4_0x16,
        Layout::Iq4NlX16,
        Layout::Q4Kx16,
        Layout::Iq4XsX16,
        Layout::Q6Kx16,
        Layout::Q5Kx16,
        Layout::Q6KPairs,
        Layout::Q5KPairs,
    ];
}

/// Packs [`PACK_ROWS`] rows of `n` blocks each (back to back in `rows`, the file's layout) into
/// `layout`, in `out` (the same size). [`Layout::Rows`] copies.
///
/// Runs at load over every byte of a packed copy, so it moves each field of the sixteen rows'
/// blocks as one sweep over the packed step's lines (written in order, read from sixteen
/// places) rather than run by run as [`unpack_group`] does; both follow the same field table.
///
/// # Panics
/// If either slice is not `PACK_ROWS · n` blocks of the layout's type.
pub fn pack_group(layout: Layout, rows: &[u8], n: usize, out: &mut [u8]) {
    if layout == Layout::Rows {
        return out.copy_from_slice(rows);
    }
    check_sizes("pack", layout, rows, out, n);
    let (fields, block) = fields(layout);
    let row_bytes = n * block;
    for (i, step) in out.chunks_exact_mut(block * PACK_ROWS).enumerate() {
        let src: [&[u8]; PACK_ROWS] =
            std::array::from_fn(|r| &rows[r * row_bytes + i * block..][..block]);
        for f in fields {
            match f.unit {
                1 => move_field::<1>(&src, f, step),
                2 => move_field::<2>(&src, f, step),
                4 => move_field::<4>(&src, f, step),
                u => unreachable!("no field moves {u}-byte units"),
            }
        }
        match layout {
            Layout::Q6KPairs => q6_k_pair(step),
            Layout::Q5KPairs => q5_k_pair(step),
            _ => {}
        }
    }
}

/// Writes field `f` of the sixteen blocks `src` into its place in the packed `step`, line by
/// line: `U`-byte unit `j` of row `r` at `f.packed + U·(PACK_ROWS·j + r)`.
#[inline(always)]
fn move_field<const U: usize>(src: &[&[u8]; PACK_ROWS], f: &Field, step: &mut [u8]) {
    let lines = &mut step[f.packed..f.packed + U * PACK_ROWS * f.count];
    for (j, line) in lines.chunks_exact_mut(U * PACK_ROWS).enumerate() {
        let at = f.file + U * j;
        for (cell, row) in line.chunks_exact_mut(U).zip(src) {
            cell.copy_from_slice(&row[at..at + U]);
        }
    }
}

/// The inverse of [`pack_group`]: the file's layout of a packed group.
///
/// Runs whenever a packed group meets a kernel that only reads the file's layout (a prompt on
/// a tier without a packed prompt kernel: once per group and prompt step), so like
/// [`pack_group`] it moves each field as one sweep of fixed-size units.
///
/// # Panics
/// As [`pack_group`].
pub fn unpack_group(layout: Layout, packed: &[u8], n: usize, out: &mut [u8]) {
    if layout == Layout::Rows {
        return out.copy_from_slice(packed);
    }
    check_sizes("unpack", layout, packed, out, n);
    let (fields, block) = fields(layout);
    let row_bytes = n * block;
    let unpair: Option<fn(&mut [u8])> = match layout {
        Layout::Q6KPairs => Some(q6_k_unpair),
        Layout::Q5KPairs => Some(q5_k_unpair),
        _ => None,
    };
    let mut paired = [0u8; MAX_PAIRED_STEP];
    for (i, step) in packed.chunks_exact(block * PACK_ROWS).enumerate() {
        let step = match unpair {
            Some(unpair) => {
                let copy = &mut paired[..step.len()];
                copy.copy_from_slice(step);
                unpair(copy);
                &copy[..]
            }
            None => step,
        };
        for f in fields {
            let at = i * block;
            match f.unit {
                1 => unmove_field::<1>(step, f, out, at, row_bytes),
                2 => unmove_field::<2>(step, f, out, at, row_bytes),
                4 => unmove_field::<4>(step, f, out, at, row_bytes),
                u => unreachable!("no field moves {u}-byte units"),
            }
        }
    }
}

/// The inverse of [`move_field`]: field `f` of the packed `step` back into the sixteen rows'
/// blocks, which start at byte `at` of each `row_bytes`-byte row of `out`.
#[inline(always)]
fn unmove_field<const U: usize>(
    step: &[u8],
    f: &Field,
    out: &mut [u8],
    at: usize,
    row_bytes: usize,
) {
    let lines = &step[f.packed..f.packed + U * PACK_ROWS * f.count];
    for (j, line) in lines.chunks_exact(U * PACK_ROWS).enumerate() {
        let from = at + f.file + U * j;
        for (r, cell) in line.chunks_exact(U).enumerate() {
            let to = r * row_bytes + from;
            out[to..to + U].copy_from_slice(cell);
        }
    }
}

/// One field of a block as packing moves it: `count` units of `unit` bytes starting at byte
/// `file` of each row's block; unit `j` of row `r` lands at `packed + unit·(PACK_ROWS·j + r)`
/// of the group's step for that block.
struct Field {
    file: usize,
    unit: usize,
    count: usize,
    packed: usize,
}

impl Field {
    const fn new(file: usize, unit: usize, count: usize, packed: usize) -> Field {
        Field {
            file,
            unit,
            count,
            packed,
        }
    }
}

/// True when `fields` cover a `block`-byte block exactly once, in order, and their packed
/// places tile the step (`PACK_ROWS` blocks) in the same order: packing is a permutation.
const fn tiles(fields: &[Field], block: usize) -> bool {
    let (mut file, mut packed, mut i) = (0, 0, 0);
    while i < fields.len() {
        let f = &fields[i];
        if f.file != file || f.packed != packed || !matches!(f.unit, 1 | 2 | 4) {
            return false;
        }
        file += f.unit * f.count;
        packed += f.unit * f.count * PACK_ROWS;
        i += 1;
    }
    file == block && packed == block * PACK_ROWS
}

/// The field table of a packed layout, and the bytes of one block of its type.
fn fields(layout: Layout) -> (&'static [Field], usize) {
    match layout {
        Layout::Rows => unreachable!("the file's layout moves nothing"),
        Layout::Q4_0x16 | Layout::Iq4NlX16 => (&Q4_0_FIELDS, BLOCK),
        Layout::Q4Kx16 => (&Q4_K_FIELDS, K_BLOCK),
        Layout::Iq4XsX16 => (&IQ4_XS_FIELDS, IQ4_XS_BLOCK),
        Layout::Q6Kx16 | Layout::Q6KPairs => (&Q6_K_FIELDS, Q6_K_BLOCK),
        Layout::Q5Kx16 | Layout::Q5KPairs => (&Q5_K_FIELDS, Q5_K_BLOCK),
    }
}

/// Checks that `a` and `b` are both sixteen rows of `n` blocks of the packed `layout`'s type.
fn check_sizes(what: &str, layout: Layout, a: &[u8], b: &[u8], n: usize) {
    let block = layout.holds().map_or(0, |t| t.block_bytes());
    let want = n * block * PACK_ROWS;
    assert!(
        a.len() == want && b.len() == want,
        "{what}: {} and {} bytes for sixteen {} rows of {n} blocks",
        a.len(),
        b.len(),
        layout.name()
    );
}

/// Q4_0: the f16 scale, then the nibbles in four-byte groups.
const Q4_0_FIELDS: [Field; 2] = [
    Field::new(0, 2, 1, 0),
    Field::new(2, GROUP, QS / GROUP, SCALES),
];
const _: () = assert!(tiles(&Q4_0_FIELDS, BLOCK));

/// Bytes of one IQ4_XS block: whole words.
const IQ4_XS_BLOCK: usize = std::mem::size_of::<super::blocks::BlockIq4Xs>();
/// IQ4_XS: word by word.
const IQ4_XS_FIELDS: [Field; 1] = [Field::new(0, GROUP, IQ4_XS_BLOCK / GROUP, 0)];
const _: () = assert!(tiles(&IQ4_XS_FIELDS, IQ4_XS_BLOCK));
/// Bytes of one Q6_K block: 52 words and a 2-byte tail (its `d`).
const Q6_K_BLOCK: usize = std::mem::size_of::<super::blocks::BlockQ6K>();
/// Where a packed Q6_K step keeps its rows' f16 scales `d` (after the 52 word vectors).
pub const Q6_K_D_AT: usize = Q6_K_BLOCK / GROUP * GROUP * PACK_ROWS;
/// Q6_K: word by word, then the rows' `d` side by side.
const Q6_K_FIELDS: [Field; 2] = [
    Field::new(0, GROUP, Q6_K_BLOCK / GROUP, 0),
    Field::new(Q6_K_BLOCK / GROUP * GROUP, Q6_K_BLOCK % GROUP, 1, Q6_K_D_AT),
];
const _: () = assert!(tiles(&Q6_K_FIELDS, Q6_K_BLOCK));
/// Bytes of one Q5_K block: whole words.
const Q5_K_BLOCK: usize = std::mem::size_of::<super::blocks::BlockQ5K>();
/// Q5_K: word by word.
const Q5_K_FIELDS: [Field; 1] = [Field::new(0, GROUP, Q5_K_BLOCK / GROUP, 0)];
const _: () = assert!(tiles(&Q5_K_FIELDS, Q5_K_BLOCK));

/// Bytes of one Q4_K super-block.
const K_BLOCK: usize = std::mem::size_of::<BlockQ4K>();
/// Bytes of one packed Q4_K super-block step: [`PACK_ROWS`] super-blocks.
pub const K_STEP: usize = PACK_ROWS * K_BLOCK;
/// Where a packed Q4_K step keeps its rows' mins, scale bytes and nibble vectors.
pub const K_DMIN_AT: usize = 2 * PACK_ROWS;
pub const K_SCALES_AT: usize = 4 * PACK_ROWS;
pub const K_QS_AT: usize = K_SCALES_AT + K_SCALE_SIZE * PACK_ROWS;
/// Offsets of the fields in a Q4_K block (d, dmin, scales, qs).
const K_FILE_DMIN: usize = 2;
const K_FILE_SCALES: usize = 4;
const K_FILE_QS: usize = K_FILE_SCALES + K_SCALE_SIZE;
/// Q4_K: d, dmin, the twelve scale bytes one by one, then the nibbles in four-byte groups.
const Q4_K_FIELDS: [Field; 4] = [
    Field::new(0, 2, 1, 0),
    Field::new(K_FILE_DMIN, 2, 1, K_DMIN_AT),
    Field::new(K_FILE_SCALES, 1, K_SCALE_SIZE, K_SCALES_AT),
    Field::new(K_FILE_QS, GROUP, (K_BLOCK - K_FILE_QS) / GROUP, K_QS_AT),
];
const _: () = assert!(tiles(&Q4_K_FIELDS, K_BLOCK));

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
            pack_group(Layout::Q4_0x16, &rows, n, &mut packed);
            assert_ne!(packed, rows, "packing moves bytes");
            let mut back = vec![0u8; rows.len()];
            unpack_group(Layout::Q4_0x16, &packed, n, &mut back);
            assert_eq!(back, rows, "{n} blocks");
        }
    }

    #[test]
    fn q4_k_unpack_inverts_pack_and_fields_land_where_documented() {
        round_trips(Layout::Q4Kx16, None, (&[1, 2, 5], 100), |step, r, b| {
            assert_eq!(&step[2 * r..2 * r + 2], &b[..2], "d of row {r}");
            assert_eq!(&step[32 + 2 * r..34 + 2 * r], &b[2..4], "dmin of row {r}");
            for p in 0..K_SCALE_SIZE {
                assert_eq!(step[64 + 16 * p + r], b[4 + p], "scale byte {p} row {r}");
            }
            for k in 0..32 {
                let at = 256 + 64 * k + 4 * r;
                assert_eq!(&step[at..at + 4], &b[16 + 4 * k..20 + 4 * k]);
            }
        });
    }

    #[test]
    fn iq4_xs_unpack_inverts_pack_and_words_land_by_row() {
        round_trips(Layout::Iq4XsX16, None, (&[1, 3], 200), |step, r, b| {
            for w in 0..IQ4_XS_BLOCK / 4 {
                let at = 64 * w + 4 * r;
                assert_eq!(&step[at..at + 4], &b[4 * w..4 * w + 4], "word {w} row {r}");
            }
        });
    }

    #[test]
    fn q6_k_unpack_inverts_pack_words_then_the_scales_tail() {
        round_trips(Layout::Q6Kx16, None, (&[1, 2], 300), |step, r, b| {
            for w in 0..52 {
                assert_eq!(&step[64 * w + 4 * r..][..4], &b[4 * w..4 * w + 4]);
            }
            let d = &step[Q6_K_D_AT + 2 * r..][..2];
            assert_eq!(d, &b[208..210], "d of row {r}");
        });
    }

    /// For each `n` of `ns`: `n` blocks of sixteen random rows (seeded `seed + n`) packed in
    /// `layout` unpack to the rows (and, given `plain`, differ from its packing); then
    /// `check(step, r, b)` for every packed step and row `r`, `b` the row's block in the step.
    fn round_trips(
        layout: Layout,
        plain: Option<Layout>,
        (ns, seed): (&[usize], u32),
        mut check: impl FnMut(&[u8], usize, &[u8]),
    ) {
        let block = layout.holds().expect("a packed type").block_bytes();
        for &n in ns {
            let rows = bytes(n * block * PACK_ROWS, seed + n as u32);
            let mut packed = vec![0u8; rows.len()];
            pack_group(layout, &rows, n, &mut packed);
            if let Some(plain) = plain {
                let mut a = vec![0u8; rows.len()];
                pack_group(plain, &rows, n, &mut a);
                assert_ne!(a, packed, "the pairing moves bits");
            }
            let mut back = vec![0u8; rows.len()];
            unpack_group(layout, &packed, n, &mut back);
            assert_eq!(back, rows, "{n} blocks");
            for i in 0..n {
                let step = &packed[i * block * PACK_ROWS..][..block * PACK_ROWS];
                for r in 0..PACK_ROWS {
                    check(step, r, &rows[(r * n + i) * block..][..block]);
                }
            }
        }
    }

    /// Element `e` of row `r`'s Q6_K block (its six-bit code) from a file-layout block.
    fn q6_code(b: &[u8], e: usize) -> u8 {
        let (j, k, lp) = (e / 128, e % 128 / 32, e % 32);
        let ql = b[64 * j + 32 * (k & 1) + lp];
        let low = if k < 2 { ql & 15 } else { ql >> 4 };
        let high = (b[128 + 32 * j + lp] >> (2 * k)) & 3;
        low | high << 4
    }

    #[test]
    fn q6_k_pairs_put_two_sub_blocks_in_each_lane_and_unpair_back() {
        // Decoded as the kernels do, vector v's byte pos of lane l is element (k, p) of
        // that lane, k = 2(v >> 1) + (pos >> 1), p = 2(v & 1) + (pos & 1).
        round_trips(
            Layout::Q6KPairs,
            Some(Layout::Q6Kx16),
            (&[1, 2], 400),
            |s, r, b| {
                for (j, l, pos) in (0..64).map(|x| (x / 32, x / 4 % 8, x % 4)) {
                    let at = |w: usize| s[64 * w + 4 * r + pos];
                    let (x, y, z) = (at(16 * j + l), at(16 * j + 8 + l), at(32 + 8 * j + l));
                    let v = [
                        x & 63,
                        y & 63,
                        z & 15 | (x >> 2) & 48,
                        z >> 4 | (y >> 2) & 48,
                    ];
                    for (vi, code) in v.into_iter().enumerate() {
                        let (k, p) = (2 * (vi >> 1) + (pos >> 1), 2 * (vi & 1) + (pos & 1));
                        let e = 128 * j + 32 * k + 4 * l + p;
                        assert_eq!(code, q6_code(b, e), "row {r} element {e}");
                    }
                }
            },
        );
    }

    /// Element `e` of a Q5_K block (its five-bit code) from a file-layout block.
    fn q5_code(b: &[u8], e: usize) -> u8 {
        let (j, half, lp) = (e / 64, e % 64 / 32, e % 32);
        let low = (b[48 + 32 * j + lp] >> (4 * half)) & 15;
        let fifth = (b[16 + lp] >> (2 * j + half)) & 1;
        low | fifth << 4
    }

    #[test]
    fn q5_k_pairs_put_two_sub_blocks_in_each_lane_and_unpair_back() {
        // Decoded as the kernels do (low or high nibbles of qs word 12 + 8j + l, fifth bit
        // 2j or 2j + 1 of qh word 4 + l), vector v's byte pos of lane l is element
        // 64j + 32(pos >> 1) + 4l + 2v + (pos & 1).
        round_trips(
            Layout::Q5KPairs,
            Some(Layout::Q5Kx16),
            (&[1, 2], 500),
            |s, r, b| {
                for (j, l, pos, v) in (0..256).map(|x| (x / 64, x / 8 % 8, x / 2 % 4, x % 2)) {
                    let at = |w: usize| s[64 * w + 4 * r + pos];
                    let code = (at(12 + 8 * j + l) >> (4 * v)) & 15
                        | ((at(4 + l) >> (2 * j + v)) & 1) << 4;
                    let e = 64 * j + 32 * (pos >> 1) + 4 * l + 2 * v + (pos & 1);
                    assert_eq!(code, q5_code(b, e), "row {r} element {e}");
                }
            },
        );
    }

    #[test]
    fn packed_block_holds_scales_then_four_byte_groups_by_row() {
        let n = 3;
        let rows = bytes(n * STEP, 7);
        let mut p = vec![0u8; rows.len()];
        pack_group(Layout::Q4_0x16, &rows, n, &mut p);
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
