//! The o200k splitter of GPT-4o, Llama 4 and gpt-oss (`gpt-4o`, llama.cpp's
//! `LLAMA_VOCAB_PRE_TYPE_GPT4O`), and Granite's multilingual embedding variant.
//!
//! The tokenizer's expression is
//! `[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|...)?|
//! [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|...)?|
//! \p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+`. llama.cpp has no hand-written
//! matcher for it: it rewrites the case classes as lookaheads, `((?=[\p{L}])([^a-z]))*` for
//! "upper" and `((?=[\p{L}])([^A-Z]))+` for "lower", and runs the result through `std::regex`
//! on the collapsed text (see `deepseek.rs`). There every non-ASCII letter is one byte, both
//! upper and lower case, marks are neither (Granite's variant, `granite-embed-multi-97m`, adds
//! `\p{M}` to both lookaheads), ASCII white space is `\t\n\v\f\r` and space, and non-ASCII
//! white space is `\v`. ECMAScript backtracking then decides where a word ends: the "upper" run
//! gives back letters until a "lower" one can follow.

use super::{contraction, Piece};

/// `[\r\n/]`, which the punctuation alternative takes after its run.
fn is_tail(cp: u32) -> bool {
    matches!(char::from_u32(cp), Some('\r' | '\n' | '/'))
}

impl Piece<'_> {
    /// `\s` on the collapsed text.
    fn o200k_space(&self, at: usize) -> bool {
        match self.cpt(at) {
            Some(cp) if cp < 0x80 => matches!(cp, 0x09..=0x0D | 0x20),
            Some(_) => self.class(at).is_whitespace(),
            None => false,
        }
    }

    /// `\p{L}` on the collapsed text, with `\p{M}` too when `marks`.
    fn o200k_letter(&self, at: usize, marks: bool) -> bool {
        match self.cpt(at) {
            Some(cp) if cp < 0x80 => (cp as u8).is_ascii_alphabetic(),
            Some(_) => {
                let c = self.class(at);
                !c.is_whitespace() && (c.is_letter() || (marks && c.is_mark()))
            }
            None => false,
        }
    }

    /// `\p{N}` on the collapsed text.
    fn o200k_number(&self, at: usize) -> bool {
        match self.cpt(at) {
            Some(cp) if cp < 0x80 => (cp as u8).is_ascii_digit(),
            Some(_) => !self.class(at).is_whitespace() && self.class(at).is_number(),
            None => false,
        }
    }

    /// `(?=[\p{L}])([^a-z])`: a letter that is not ASCII lower case.
    fn o200k_upper(&self, at: usize, marks: bool) -> bool {
        self.o200k_letter(at, marks)
            && !self
                .cpt(at)
                .is_some_and(|cp| is_ascii(cp, u8::is_ascii_lowercase))
    }

    /// `(?=[\p{L}])([^A-Z])`: a letter that is not ASCII upper case.
    fn o200k_lower(&self, at: usize, marks: bool) -> bool {
        self.o200k_letter(at, marks)
            && !self
                .cpt(at)
                .is_some_and(|cp| is_ascii(cp, u8::is_ascii_uppercase))
    }

    /// `[^\s\p{L}\p{N}]`
    fn o200k_other(&self, at: usize) -> bool {
        self.cpt(at).is_some()
            && !(self.o200k_space(at) || self.o200k_letter(at, false) || self.o200k_number(at))
    }

    /// The length of the match at `at` (every position matches something).
    pub(super) fn o200k(&self, at: usize, marks: bool) -> Option<usize> {
        let cp = self.cpt(at)?;
        let upper = |i| self.o200k_upper(i, marks);
        let lower = |i| self.o200k_lower(i, marks);
        let run = |mut i: usize, f: &dyn Fn(usize) -> bool| {
            while f(i) {
                i += 1;
            }
            i
        };
        let with_contraction = |end: usize| end + contraction(self, end, true).unwrap_or(0) - at;
        // `[^\r\n\p{L}\p{N}]?`, taken first and given back if the word fails (with Granite's
        // marks, a mark is that optional code point or the word's first letter).
        let prefix = !(cp == '\r' as u32
            || cp == '\n' as u32
            || self.o200k_letter(at, false)
            || self.o200k_number(at));
        let starts = [at + prefix as usize, at];
        let starts = &starts[..1 + prefix as usize];
        // `upper* lower+ contraction?`: the upper run gives back code points until a lower one
        // starts (a non-ASCII letter is both).
        for &word in starts {
            let upper_end = run(word, &upper);
            if lower(upper_end) {
                return Some(with_contraction(run(upper_end, &lower)));
            }
            if let Some(last) = (word..upper_end).rev().find(|&i| lower(i)) {
                return Some(with_contraction(last + 1));
            }
        }
        // `upper+ lower* contraction?`
        for &word in starts {
            let upper_end = run(word, &upper);
            if upper_end > word {
                return Some(with_contraction(run(upper_end, &lower)));
            }
        }
        // `\p{N}{1,3}`
        if self.o200k_number(at) {
            return Some((run(at, &|i| self.o200k_number(i)) - at).min(super::MAX_DIGITS));
        }
        // ` ?[^\s\p{L}\p{N}]+[\r\n/]*`
        let space = cp == ' ' as u32 && self.o200k_other(at + 1);
        if space || self.o200k_other(at) {
            let end = run(at + space as usize, &|i| self.o200k_other(i));
            let end = run(end, &|i| self.cpt(i).is_some_and(is_tail));
            return Some(end - at);
        }
        // `\s*[\r\n]+`, `\s+(?!\S)`, `\s+`
        self.space_tail(at, run(at, &|i| self.o200k_space(i)) - at)
    }
}

fn is_ascii(cp: u32, f: fn(&u8) -> bool) -> bool {
    u8::try_from(cp).is_ok_and(|b| f(&b))
}
