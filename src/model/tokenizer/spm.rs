//! SentencePiece tokenization (`tokenizer.ggml.model = llama`), as llama.cpp's
//! `llm_tokenizer_spm_session`.
//!
//! The text (spaces already turned into U+2581 ▁) starts as one symbol per UTF-8 character.
//! Adjacent pairs whose concatenation is a token are queued by that token's score; the best
//! pair (highest score, then leftmost) merges, and its new neighbours are queued, until no pair
//! forms a token. Symbols that are not tokens fall back to byte tokens `<0xNN>`.
//!
//! llama.cpp also keeps a `rev_merge` map to split a non-token symbol back into the pair that
//! formed it. It is never used: a merged symbol always is a token (pairs are only queued when
//! their concatenation is one), and an unmerged symbol is a single character, which no pair of
//! non-empty symbols can spell. So we leave it out.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use super::unicode::utf8_len;
use super::vocab::Vocab;

/// One symbol of the text being merged.
#[derive(Clone, Copy)]
struct Symbol {
    start: u32,
    len: u32,
    prev: u32,
    next: u32,
}

/// Marks "no neighbour".
const NIL: u32 = u32::MAX;

/// A candidate merge, ordered as llama.cpp's `llm_bigram_spm::comparator`: higher score
/// first, then the leftmost.
#[derive(Clone, Copy)]
struct Candidate {
    score: f32,
    left: u32,
    right: u32,
    size: u32,
}

impl PartialEq for Candidate {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Candidate {}

impl PartialOrd for Candidate {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Candidate {
    fn cmp(&self, other: &Self) -> Ordering {
        self.score
            .partial_cmp(&other.score)
            .unwrap_or(Ordering::Equal)
            .then_with(|| other.left.cmp(&self.left))
    }
}

/// Reusable buffers.
#[derive(Default)]
pub struct Scratch {
    symbols: Vec<Symbol>,
    queue: BinaryHeap<Candidate>,
}

pub struct Spm {
    /// Token of each byte for the fallback: `<0xNN>`, else the byte itself as a token, else
    /// the unknown token (llama.cpp would throw on such a vocabulary).
    byte_token: [Option<u32>; 256],
}

impl Spm {
    pub fn new(vocab: &Vocab) -> Spm {
        let mut byte_token = [None; 256];
        for b in 0..=255u8 {
            let hex = format!("<0x{b:02X}>");
            byte_token[b as usize] = vocab
                .token_id(hex.as_bytes())
                .or_else(|| vocab.token_id(&[b]))
                .or(vocab.ids.unk);
        }
        Spm { byte_token }
    }

    /// Appends the tokens of `text` (already escaped).
    pub fn encode(&self, vocab: &Vocab, text: &[u8], scratch: &mut Scratch, out: &mut Vec<u32>) {
        if text.is_empty() {
            return;
        }
        let Scratch { symbols, queue } = scratch;
        symbols.clear();
        queue.clear();
        let mut at = 0usize;
        while at < text.len() {
            let len = utf8_len(text[at]).min(text.len() - at);
            let i = symbols.len() as u32;
            symbols.push(Symbol {
                start: at as u32,
                len: len as u32,
                prev: if i == 0 { NIL } else { i - 1 },
                next: if at + len == text.len() { NIL } else { i + 1 },
            });
            at += len;
        }
        for i in 1..symbols.len() as u32 {
            queue_pair(vocab, text, symbols, queue, i - 1, i);
        }

        while let Some(c) = queue.pop() {
            let (l, r) = (c.left as usize, c.right as usize);
            let (left, right) = (symbols[l], symbols[r]);
            if left.len == 0 || right.len == 0 || left.len + right.len != c.size {
                continue; // stale
            }
            symbols[l].len += right.len;
            symbols[l].next = right.next;
            symbols[r].len = 0;
            if right.next != NIL {
                symbols[right.next as usize].prev = c.left;
            }
            if left.prev != NIL {
                queue_pair(vocab, text, symbols, queue, left.prev, c.left);
            }
            if right.next != NIL {
                queue_pair(vocab, text, symbols, queue, c.left, right.next);
            }
        }

        let mut i = 0;
        while i != NIL {
            let s = symbols[i as usize];
            let piece = &text[s.start as usize..(s.start + s.len) as usize];
            match vocab.token_id(piece) {
                Some(id) => out.push(id),
                None => out.extend(piece.iter().filter_map(|&b| self.byte_token[b as usize])),
            }
            i = s.next;
        }
    }
}

fn queue_pair(
    vocab: &Vocab,
    text: &[u8],
    symbols: &[Symbol],
    queue: &mut BinaryHeap<Candidate>,
    left: u32,
    right: u32,
) {
    let (l, r) = (symbols[left as usize], symbols[right as usize]);
    let size = l.len + r.len;
    let joined = &text[l.start as usize..(l.start + size) as usize];
    if let Some(id) = vocab.token_id(joined) {
        queue.push(Candidate {
            score: vocab.scores[id as usize],
            left,
            right,
            size,
        });
    }
}
