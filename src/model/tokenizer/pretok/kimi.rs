//! Kimi-K2's splitter: llama.cpp's `unicode_regex_split_custom_kimi_k2`.
//!
//! Its tokenizer's expression (from `tokenization_kimi.py`) is
//! `[\p{Han}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|...)?|...|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`;
//! llama.cpp matches it by hand, and simplifies: a word is any run of non-Han letters (case
//! and marks play no part), with an optional contraction after it. Han runs come first.

use super::{contraction, Cutter, Piece};

/// llama.cpp's `unicode_cpt_is_han`: the CJK Unified Ideographs blocks, Extensions A to F, and
/// the Compatibility Ideographs (with their Supplement).
const HAN: &[(u32, u32)] = &[
    (0x4E00, 0x9FFF),
    (0x3400, 0x4DBF),
    (0x20000, 0x2A6DF),
    (0x2A700, 0x2B73F),
    (0x2B740, 0x2B81F),
    (0x2B820, 0x2CEAF),
    (0x2CEB0, 0x2EBEF),
    (0xF900, 0xFAFF),
    (0x2F800, 0x2FA1F),
];

impl Piece<'_> {
    fn is_han(&self, at: usize) -> bool {
        self.cpt(at)
            .is_some_and(|cp| HAN.iter().any(|&(lo, hi)| (lo..=hi).contains(&cp)))
    }

    fn is_word_letter(&self, at: usize) -> bool {
        self.class(at).is_letter() && !self.is_han(at)
    }

    pub(super) fn kimi_k2(&self, out: &mut Vec<usize>) {
        let mut cut = Cutter {
            out,
            prev: self.start,
        };
        let mut pos = self.start;
        while pos < self.end {
            // `[\p{Han}]+`
            if self.is_han(pos) {
                while self.is_han(pos) {
                    pos += 1;
                }
                cut.cut(pos);
                continue;
            }
            // `[^\r\n\p{L}\p{N}]?<non-Han letters>+<contraction>?`
            let flags = self.class(pos);
            let leading = !(self.is(pos, '\r')
                || self.is(pos, '\n')
                || flags.is_letter()
                || flags.is_number());
            if self.is_word_letter(pos) || (leading && self.is_word_letter(pos + 1)) {
                pos += leading as usize;
                while self.is_word_letter(pos) {
                    pos += 1;
                }
                pos += contraction(self, pos, true).unwrap_or(0);
                cut.cut(pos);
                continue;
            }
            pos = self.llama3_rest(pos, false, &mut cut);
        }
    }
}
