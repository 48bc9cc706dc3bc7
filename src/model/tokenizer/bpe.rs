//! Byte-level BPE (GPT-2 style), as llama.cpp's `llm_tokenizer_bpe_session`.
//!
//! Tokens and merges are stored in GPT-2's printable byte alphabet. llama.cpp maps each word to
//! that alphabet and merges strings; we map the vocabulary back to raw bytes once instead, give
//! every string that merging can produce a number (a *symbol*), and merge numbers. The mapping
//! is a bijection, so the results are identical:
//! - a symbol is a single byte or the result of a merge; tokens whose text leaves the alphabet
//!   can never be produced and are left out;
//! - merge results that are not tokens get symbols past the vocabulary, and come out as
//!   single-byte tokens at the end, as in llama.cpp;
//! - the first of two identical merge lines wins (llama.cpp's `emplace`).
//!
//! The merge loop is llama.cpp's: a priority queue of adjacent pairs ordered by rank, then by
//! position, with stale entries skipped when popped.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::hash::FastMap;
use super::unicode::ByteAlphabet;
use super::vocab::Vocab;

/// A merge: the rank of the pair and the symbol it produces.
#[derive(Clone, Copy)]
struct Merge {
    rank: u32,
    result: u32,
}

pub struct Bpe {
    n_vocab: u32,
    /// Symbol of each single byte.
    byte_symbol: [u32; 256],
    /// Token of each single byte, if the vocabulary has it.
    byte_token: [Option<u32>; 256],
    /// `(left << 32) | right` → merge.
    merges: FastMap<u64, Merge>,
    /// Raw bytes → token, for whole-word lookup (`ignore_merges`, Llama 3).
    whole_words: Option<FastMap<Box<[u8]>, u32>>,
}

/// One symbol of the word being merged.
#[derive(Clone, Copy)]
struct Symbol {
    id: u32,
    start: u32,
    len: u32,
    prev: u32,
    next: u32,
}

/// Marks "no neighbour".
const NIL: u32 = u32::MAX;

/// A candidate merge of `left` with its right neighbour `right`; `size` is their combined
/// length when queued, which tells a stale entry apart.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Candidate {
    rank: u32,
    left: u32,
    right: u32,
    size: u32,
    result: u32,
}

/// Reusable buffers for merging words, and a cache of the words already merged in this text
/// (natural text repeats its words, and a word's tokens never depend on its neighbours).
#[derive(Default)]
pub struct Scratch {
    symbols: Vec<Symbol>,
    queue: BinaryHeap<Reverse<Candidate>>,
    /// Word bytes → range of its tokens in `cached_tokens`.
    cache: FastMap<Box<[u8]>, (u32, u32)>,
    cached_tokens: Vec<u32>,
}

/// Bounds on the word cache, which lives for one `encode` call: how many words it holds, and
/// the longest word worth keeping.
const MAX_CACHED_WORDS: usize = 1 << 16;
const MAX_CACHED_WORD_LEN: usize = 64;

fn pair_key(left: u32, right: u32) -> u64 {
    ((left as u64) << 32) | right as u64
}

impl Bpe {
    /// Builds the symbol tables from the vocabulary and the `tokenizer.ggml.merges` lines.
    pub fn new(vocab: &Vocab, merge_lines: &[&[u8]]) -> Bpe {
        let alphabet = ByteAlphabet::new();
        let n_vocab = vocab.n_tokens() as u32;
        let mut cps = Vec::new();
        let mut symbol_of: FastMap<Box<[u8]>, u32> = FastMap::default();
        symbol_of.reserve(vocab.n_tokens() + merge_lines.len());
        for id in 0..n_vocab {
            if let Some(raw) = alphabet.decode_token(vocab.text(id), &mut cps) {
                symbol_of.insert(raw.into_boxed_slice(), id);
            }
        }
        let mut next_symbol = n_vocab;
        let mut intern = |raw: Vec<u8>, symbol_of: &mut FastMap<Box<[u8]>, u32>| -> u32 {
            *symbol_of.entry(raw.into_boxed_slice()).or_insert_with(|| {
                next_symbol += 1;
                next_symbol - 1
            })
        };

        let mut byte_symbol = [0u32; 256];
        let mut byte_token = [None; 256];
        for b in 0..=255u8 {
            byte_symbol[b as usize] = intern(vec![b], &mut symbol_of);
            byte_token[b as usize] = Some(byte_symbol[b as usize]).filter(|&s| s < n_vocab);
        }

        let mut merges: FastMap<u64, Merge> = FastMap::default();
        merges.reserve(merge_lines.len());
        for (rank, line) in merge_lines.iter().enumerate() {
            // llama.cpp splits at the first space after the first byte.
            let Some(space) = line.iter().skip(1).position(|&b| b == b' ').map(|p| p + 1) else {
                continue;
            };
            let (Some(left), Some(right)) = (
                alphabet.decode_token(&line[..space], &mut cps),
                alphabet.decode_token(&line[space + 1..], &mut cps),
            ) else {
                continue; // a part outside the alphabet never matches a symbol
            };
            let mut joined = left.clone();
            joined.extend_from_slice(&right);
            let key = pair_key(intern(left, &mut symbol_of), intern(right, &mut symbol_of));
            let result = intern(joined, &mut symbol_of);
            merges.entry(key).or_insert(Merge {
                rank: rank as u32,
                result,
            });
        }

        let whole_words = vocab.flags.ignore_merges.then(|| {
            symbol_of.retain(|_, s| *s < n_vocab);
            symbol_of
        });
        Bpe {
            n_vocab,
            byte_symbol,
            byte_token,
            merges,
            whole_words,
        }
    }

    /// Appends the tokens of one pre-tokenized word.
    pub fn encode_word(&self, word: &[u8], scratch: &mut Scratch, out: &mut Vec<u32>) {
        if word.is_empty() {
            return;
        }
        if let Some(id) = self.whole_words.as_ref().and_then(|m| m.get(word)) {
            out.push(*id);
            return;
        }
        if word.len() == 1 {
            out.extend(self.byte_token[word[0] as usize]);
            return;
        }
        if let Some(&(start, end)) = scratch.cache.get(word) {
            out.extend_from_slice(&scratch.cached_tokens[start as usize..end as usize]);
            return;
        }
        let first = out.len();
        self.merge_word(word, scratch, out);
        if word.len() <= MAX_CACHED_WORD_LEN && scratch.cache.len() < MAX_CACHED_WORDS {
            let start = scratch.cached_tokens.len() as u32;
            scratch.cached_tokens.extend_from_slice(&out[first..]);
            scratch
                .cache
                .insert(word.into(), (start, scratch.cached_tokens.len() as u32));
        }
    }

    /// llama.cpp's merge loop over one word of at least two bytes.
    fn merge_word(&self, word: &[u8], scratch: &mut Scratch, out: &mut Vec<u32>) {
        let Scratch { symbols, queue, .. } = scratch;
        symbols.clear();
        queue.clear();
        let last = word.len() as u32 - 1;
        symbols.extend(word.iter().enumerate().map(|(i, &b)| {
            let i = i as u32;
            Symbol {
                id: self.byte_symbol[b as usize],
                start: i,
                len: 1,
                prev: if i == 0 { NIL } else { i - 1 },
                next: if i == last { NIL } else { i + 1 },
            }
        }));
        for i in 1..symbols.len() as u32 {
            self.queue_pair(symbols, queue, i - 1, i);
        }

        while let Some(Reverse(c)) = queue.pop() {
            let (l, r) = (c.left as usize, c.right as usize);
            let (left, right) = (symbols[l], symbols[r]);
            if left.len == 0
                || right.len == 0
                || left.next != c.right
                || left.len + right.len != c.size
            {
                continue; // stale: one side was merged away or grew since it was queued
            }
            symbols[l].id = c.result;
            symbols[l].len += right.len;
            symbols[l].next = right.next;
            symbols[r].len = 0;
            if right.next != NIL {
                symbols[right.next as usize].prev = c.left;
            }
            if left.prev != NIL {
                self.queue_pair(symbols, queue, left.prev, c.left);
            }
            if right.next != NIL {
                self.queue_pair(symbols, queue, c.left, right.next);
            }
        }

        let mut i = 0;
        while i != NIL {
            let s = symbols[i as usize];
            if s.id < self.n_vocab {
                out.push(s.id);
            } else {
                let bytes = &word[s.start as usize..(s.start + s.len) as usize];
                out.extend(bytes.iter().filter_map(|&b| self.byte_token[b as usize]));
            }
            i = s.next;
        }
    }

    fn queue_pair(
        &self,
        symbols: &[Symbol],
        queue: &mut BinaryHeap<Reverse<Candidate>>,
        left: u32,
        right: u32,
    ) {
        let (l, r) = (symbols[left as usize], symbols[right as usize]);
        if let Some(m) = self.merges.get(&pair_key(l.id, r.id)) {
            queue.push(Reverse(Candidate {
                rank: m.rank,
                left,
                right,
                size: l.len + r.len,
                result: m.result,
            }));
        }
    }
}
