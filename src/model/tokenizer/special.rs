//! Finding special tokens in text before tokenization, as llama.cpp's `tokenizer_st_partition`.
//!
//! llama.cpp takes the control, user-defined and unknown tokens longest text first and, for
//! each in turn, splits every remaining piece of raw text at each occurrence (left to right,
//! non-overlapping). Control and unknown tokens take part only with `parse_special`;
//! user-defined tokens always do. A token marked lstrip/rstrip also swallows the whitespace
//! (C `isspace`) next to it within the same piece.
//!
//! Done literally that is one scan of the text per special token, and Gemma has six thousand.
//! So a trie first finds which special tokens occur in the text at all (one pass, memory
//! bounded by the number of special tokens); llama.cpp's splitting then runs for those only,
//! in its order. The result is the same, since a token absent from the text splits nothing.
//!
//! llama.cpp orders equal-length tokens with an unstable sort; we order them by id. This only
//! matters when two special tokens of equal length overlap in the text.

use super::vocab::{Attr, Vocab};
use std::ops::Range;

/// A piece of the partitioned text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fragment {
    /// Raw text to tokenize: a byte range of the input.
    Text(usize, usize),
    /// A special token matched in the text.
    Token(u32),
}

/// A special token, in llama.cpp's processing order.
struct Special {
    token: u32,
    text: Box<[u8]>,
    /// Control or unknown: only matched with `parse_special`.
    needs_parse_special: bool,
    lstrip: bool,
    rstrip: bool,
}

#[derive(Default)]
struct Node {
    /// Children by byte, sorted.
    children: Vec<(u8, u32)>,
    /// Index into `SpecialMatcher::specials` of the token ending here.
    ends: Option<u32>,
}

pub struct SpecialMatcher {
    /// Longest text first, then by id.
    specials: Vec<Special>,
    nodes: Vec<Node>,
    /// Bytes that start some special token (a fast skip).
    starts: [bool; 256],
}

const ROOT: usize = 0;
/// Bits per word of the "occurs in the text" set.
const WORD_BITS: usize = u64::BITS as usize;

/// C `isspace` in the "C" locale.
fn is_c_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0B | 0x0C | b'\r')
}

/// First position of `needle` (non-empty) in `hay`.
fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    let (&first, rest) = needle.split_first()?;
    let last_start = hay.len().checked_sub(needle.len())?;
    let mut at = 0;
    while at <= last_start {
        at += hay[at..=last_start].iter().position(|&b| b == first)?;
        if hay[at + 1..].starts_with(rest) {
            return Some(at);
        }
        at += 1;
    }
    None
}

impl SpecialMatcher {
    pub fn new(vocab: &Vocab) -> SpecialMatcher {
        let special = Attr::CONTROL.or(Attr::USER_DEFINED).or(Attr::UNKNOWN);
        let mut ids: Vec<u32> = (0..vocab.n_tokens() as u32)
            .filter(|&id| vocab.attr(id).has(special))
            .collect();
        ids.sort_by_key(|&id| (std::cmp::Reverse(vocab.text(id).len()), id));

        let mut m = SpecialMatcher {
            specials: Vec::new(),
            nodes: vec![Node::default()],
            starts: [false; 256],
        };
        for &token in &ids {
            let attr = vocab.attr(token);
            let text = vocab.text(token);
            m.starts[text[0] as usize] = true;
            let mut node = ROOT;
            for &b in text {
                node = match m.nodes[node].children.binary_search_by_key(&b, |c| c.0) {
                    Ok(i) => m.nodes[node].children[i].1 as usize,
                    Err(i) => {
                        let child = m.nodes.len();
                        m.nodes.push(Node::default());
                        m.nodes[node].children.insert(i, (b, child as u32));
                        child
                    }
                };
            }
            m.nodes[node].ends = Some(m.specials.len() as u32);
            m.specials.push(Special {
                token,
                text: text.into(),
                needs_parse_special: attr.has(Attr::CONTROL.or(Attr::UNKNOWN)),
                lstrip: attr.has(Attr::LSTRIP),
                rstrip: attr.has(Attr::RSTRIP),
            });
        }
        m
    }

    /// Marks in `present` (a bit set over `specials`) every eligible special token in `text`.
    fn find_present(&self, text: &[u8], parse_special: bool, present: &mut [u64]) -> bool {
        let mut any = false;
        for start in 0..text.len() {
            if !self.starts[text[start] as usize] {
                continue;
            }
            let mut node = ROOT;
            for &b in &text[start..] {
                let children = &self.nodes[node].children;
                match children.binary_search_by_key(&b, |c| c.0) {
                    Ok(i) => node = children[i].1 as usize,
                    Err(_) => break,
                }
                if let Some(s) = self.nodes[node].ends {
                    if parse_special || !self.specials[s as usize].needs_parse_special {
                        present[s as usize / WORD_BITS] |= 1 << (s as usize % WORD_BITS);
                        any = true;
                    }
                }
            }
        }
        any
    }

    /// Whether `text` holds the text of a control (or unknown) token, which only
    /// `parse_special` would make that token.
    pub fn mentions_control(&self, text: &[u8]) -> bool {
        let mut present = vec![0u64; self.specials.len().div_ceil(WORD_BITS)];
        self.find_present(text, true, &mut present);
        self.specials.iter().enumerate().any(|(i, s)| {
            s.needs_parse_special && present[i / WORD_BITS] & (1 << (i % WORD_BITS)) != 0
        })
    }

    /// Splits `text` into raw-text fragments and special tokens, appending them to `out`,
    /// except that a control token is never matched where it overlaps one of the byte ranges
    /// `text_only`: there the text reads as `parse_special`
    /// false would read it (user-defined tokens still match).
    pub fn partition_guarded(
        &self,
        text: &[u8],
        parse_special: bool,
        text_only: &[Range<usize>],
        out: &mut Vec<Fragment>,
    ) {
        if text.is_empty() {
            return;
        }
        let mut present = vec![0u64; self.specials.len().div_ceil(WORD_BITS)];
        if !self.find_present(text, parse_special, &mut present) {
            out.push(Fragment::Text(0, text.len()));
            return;
        }
        let mut frags = vec![Fragment::Text(0, text.len())];
        let mut next = Vec::new();
        for (w, &word) in present.iter().enumerate() {
            let mut bits = word;
            while bits != 0 {
                let s = &self.specials[w * WORD_BITS + bits.trailing_zeros() as usize];
                bits &= bits - 1;
                next.clear();
                for &f in &frags {
                    match f {
                        Fragment::Token(_) => next.push(f),
                        Fragment::Text(a, b) => {
                            Self::split_fragment(text, a, b, s, text_only, &mut next)
                        }
                    }
                }
                std::mem::swap(&mut frags, &mut next);
            }
        }
        out.extend(frags);
    }

    /// Splits the raw text `a..b` at every occurrence of `s`, left to right.
    /// An occurrence of a control token overlapping a range of `text_only` is left as text.
    fn split_fragment(
        text: &[u8],
        mut a: usize,
        b: usize,
        s: &Special,
        text_only: &[Range<usize>],
        out: &mut Vec<Fragment>,
    ) {
        let needle: &[u8] = &s.text;
        let mut from = a;
        while from < b {
            let Some(at) = find(&text[from..b], needle) else {
                break;
            };
            let start = from + at;
            let end = start + needle.len();
            if s.needs_parse_special && text_only.iter().any(|r| start < r.end && r.start < end) {
                from = start + 1;
                continue;
            }
            let mut left_end = start;
            if s.lstrip {
                while left_end > a && is_c_space(text[left_end - 1]) {
                    left_end -= 1;
                }
            }
            if left_end > a {
                out.push(Fragment::Text(a, left_end));
            }
            out.push(Fragment::Token(s.token));
            a = end;
            if s.rstrip {
                while a < b && is_c_space(text[a]) {
                    a += 1;
                }
            }
            from = a;
        }
        if a < b {
            out.push(Fragment::Text(a, b));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn find_locates_the_first_occurrence() {
        assert_eq!(find(b"abcabc", b"ca"), Some(2));
        assert_eq!(find(b"aaab", b"aab"), Some(1));
        assert_eq!(find(b"ab", b"abc"), None);
        assert_eq!(find(b"xyz", b"z"), Some(2));
        assert_eq!(find(b"", b"a"), None);
    }
}
