//! The sliding-window layers' KV cache: a ring of cells, placed as llama.cpp places them.
//!
//! A local (sliding-window) layer's query at position p reads only the keys at positions
//! p − window < q ≤ p, so its cache needs room for the window plus one micro-batch, not for the
//! whole context. llama.cpp keeps those layers in a second cache of
//! `pad(min(n_ctx, window + n_ubatch), 256)` cells and reuses a cell once the window has moved
//! past its position. Its attention then runs over the cells in cell order, not in position
//! order, and sums in that order: to give the same bits after the ring wraps, this module
//! chooses the same cell for every token (llama.cpp's `find_slot` and `apply_ubatch` for one
//! sequence) and tells the attention which cells each token sees.

use super::forward::UBATCH;
use super::kv::KV_PAD;

/// The cells of the sliding-window cache and the positions they hold.
#[derive(Clone, Debug)]
pub(crate) struct SwaCells {
    window: usize,
    /// Per cell: the position it holds, or `None` while empty.
    pos: Vec<Option<usize>>,
    /// Where the next search for cells starts (one past the last cell taken).
    head: usize,
    /// Cells holding a position.
    used: usize,
    /// The cells of the current micro-batch's tokens, in token order.
    slots: Vec<usize>,
}

impl SwaCells {
    /// llama.cpp's size for the cache of a `window`-token sliding window in a context of
    /// `n_ctx` tokens, evaluated in micro-batches of [`UBATCH`].
    pub(crate) fn size_for(n_ctx: usize, window: usize) -> usize {
        n_ctx.min(window.saturating_add(UBATCH)).div_ceil(KV_PAD) * KV_PAD
    }

    pub(crate) fn new(n_ctx: usize, window: usize) -> SwaCells {
        assert!(window > 0, "a sliding window of no tokens");
        SwaCells {
            window,
            pos: vec![None; Self::size_for(n_ctx, window)],
            head: 0,
            used: 0,
            slots: Vec::with_capacity(UBATCH),
        }
    }

    /// Cells in the cache.
    pub(crate) fn size(&self) -> usize {
        self.pos.len()
    }

    /// Empties every cell (a new sequence).
    pub(crate) fn reset(&mut self) {
        self.pos.fill(None);
        self.head = 0;
        self.used = 0;
        self.slots.clear();
    }

    /// Whether a cell holding position `q` can be taken by a micro-batch whose first token is
    /// at `next`: the window has moved past it (llama.cpp's `is_masked_swa`).
    fn expired(&self, q: usize, next: usize) -> bool {
        next - q >= self.window
    }

    /// Takes cells for a micro-batch of `n` tokens at positions `pos0..pos0 + n` that follow
    /// the tokens already placed: llama.cpp's search (from the head, wrapping once, taking
    /// empty cells and cells whose position the window has left), then its bookkeeping (the
    /// cells get their new positions; any older position than one overwritten is dropped, so
    /// the positions kept stay a contiguous run).
    ///
    /// # Panics
    /// Where `n` is more than a micro-batch (the size leaves room for one, so the search
    /// cannot fail otherwise).
    pub(crate) fn place(&mut self, pos0: usize, n: usize) {
        assert!(n <= UBATCH, "a micro-batch of {n} tokens");
        let size = self.size();
        let next = self.pos.iter().flatten().max().map_or(0, |&q| q + 1);
        let mut head = self.head;
        if head > self.used + 2 * n {
            // Enough free cells before the head: llama.cpp starts from the beginning.
            head = 0;
        }
        self.slots.clear();
        let mut tested = 0;
        while self.slots.len() < n {
            if head >= size {
                tested += size - head;
                head = 0;
                continue;
            }
            let cell = head;
            head += 1;
            tested += 1;
            if self.pos[cell].is_none_or(|q| self.expired(q, next)) {
                self.slots.push(cell);
            }
            assert!(
                self.slots.len() == n || tested < size,
                "no room for {n} tokens in a sliding-window cache of {size} cells"
            );
        }
        let mut overwritten = None;
        for (i, &cell) in self.slots.iter().enumerate() {
            match self.pos[cell].replace(pos0 + i) {
                Some(q) => overwritten = overwritten.max(Some(q)),
                None => self.used += 1,
            }
        }
        if let Some(last) = overwritten {
            for p in &mut self.pos {
                if p.is_some_and(|q| q <= last) {
                    *p = None;
                    self.used -= 1;
                }
            }
        }
        self.head = self.slots.last().map_or(self.head, |&c| c + 1);
    }

    /// The cell of the current micro-batch's token `i`.
    #[inline]
    pub(crate) fn slot(&self, i: usize) -> usize {
        self.slots[i]
    }

    /// One past the last cell that holds a position: the cells an attention row covers.
    pub(crate) fn used_end(&self) -> usize {
        self.pos
            .iter()
            .rposition(Option::is_some)
            .map_or(0, |c| c + 1)
    }

    /// The padded length ggml gives this cache's attention rows (llama.cpp's `get_n_kv`).
    pub(crate) fn n_kv(&self) -> usize {
        self.size()
            .min(KV_PAD.max(self.used_end().div_ceil(KV_PAD) * KV_PAD))
    }

    /// The runs of cells `[start, end)` that a token at position `p` attends to (the
    /// positions p − window < q ≤ p), in cell order, appended to `runs`.
    pub(crate) fn visible(&self, p: usize, runs: &mut Vec<(usize, usize)>) {
        let sees = |c: usize| self.pos[c].is_some_and(|q| q <= p && p - q < self.window);
        let end = self.used_end();
        let mut c = 0;
        while c < end {
            if !sees(c) {
                c += 1;
                continue;
            }
            let start = c;
            while c < end && sees(c) {
                c += 1;
            }
            runs.push((start, c));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Positions of the cells, `-1` for an empty one.
    fn layout(s: &SwaCells) -> Vec<i64> {
        s.pos.iter().map(|p| p.map_or(-1, |q| q as i64)).collect()
    }

    #[test]
    fn the_size_leaves_room_for_the_window_and_a_micro_batch() {
        assert_eq!(SwaCells::size_for(2048, 512), 1024);
        assert_eq!(SwaCells::size_for(2048, 16), 768);
        assert_eq!(SwaCells::size_for(300, 512), 512, "padded like llama.cpp");
        assert_eq!(SwaCells::size_for(100, 4), 256);
    }

    #[test]
    fn cells_are_reused_once_the_window_has_left_them() {
        // A window of 4 in a long context: 768 cells. Fill all but 6 with one micro-batch
        // after another, then decode.
        let mut s = SwaCells::new(4096, 4);
        let n = s.size();
        assert_eq!(n, 768);
        s.place(0, 512);
        s.place(512, n - 6 - 512);
        assert_eq!((s.slot(0), s.head), (512, n - 6));
        // Decoding takes the free cells up to the end.
        for p in n - 6..n {
            s.place(p, 1);
            assert_eq!(s.slot(0), p);
        }
        // The head is at the end: the search wraps to cell 0, whose position (0) the window
        // left long ago.
        s.place(n, 1);
        assert_eq!(s.slot(0), 0);
        s.place(n + 1, 1);
        assert_eq!(s.slot(0), 1);
        assert_eq!(&layout(&s)[..3], [n as i64, n as i64 + 1, 2]);
        // What position n + 1 sees: n − 2, n − 1 (the last two cells), then n, n + 1 (cells 0
        // and 1), in cell order.
        let mut runs = Vec::new();
        s.visible(n + 1, &mut runs);
        assert_eq!(runs, [(0, 2), (n - 2, n)]);
        assert_eq!((s.used_end(), s.n_kv()), (n, n));
    }

    #[test]
    fn a_full_cache_wraps_to_the_cells_the_window_left() {
        let mut s = SwaCells::new(4096, 4);
        let n = s.size();
        s.place(0, 512);
        s.place(512, n - 512);
        assert_eq!((s.used, s.head), (n, n), "every cell taken");
        // The search wraps and takes cells 0..10, whose positions the window left;
        // overwriting position 9 drops nothing else (no older position is left).
        s.place(n, 10);
        assert_eq!(
            (0..10).map(|i| s.slot(i)).collect::<Vec<_>>(),
            Vec::from_iter(0..10)
        );
        assert_eq!(s.used, n);
        assert_eq!(&layout(&s)[8..12], [n as i64 + 8, n as i64 + 9, 10, 11]);
        s.place(n + 10, 1);
        assert_eq!(s.slot(0), 10);
    }

    #[test]
    fn an_overwrite_drops_every_older_position() {
        // Window 2; cells hold 4, 1, 5 (head 0). Position 6 takes cell 0 (6 − 4 ≥ 2), and
        // position 1, older than the 4 overwritten, is dropped: the kept positions stay a run.
        let mut s = SwaCells::new(4096, 2);
        s.pos[..3].copy_from_slice(&[Some(4), Some(1), Some(5)]);
        s.used = 3;
        s.place(6, 1);
        assert_eq!(s.slot(0), 0);
        assert_eq!(&layout(&s)[..3], [6, -1, 5]);
        assert_eq!((s.used, s.head), (2, 1));
    }

    #[test]
    fn the_search_restarts_at_zero_when_enough_cells_are_free_before_the_head() {
        let mut s = SwaCells::new(4096, 4);
        s.place(0, 100);
        s.reset();
        assert_eq!((s.used, s.head, s.used_end(), s.n_kv()), (0, 0, 0, 256));
        s.place(0, 3);
        // Free the first cells by hand, as an overwrite would, and move the head far on.
        s.head = 200;
        s.place(3, 1);
        assert_eq!(
            s.slot(0),
            3,
            "head 200 > used 3 + 2: the search starts at cell 0"
        );
    }
}
