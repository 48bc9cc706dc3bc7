//! Pre-tokenizers of byte-level BPE: split text into the words that BPE merges within.
//!
//! Each model family names a list of regular expressions (`tokenizer.ggml.pre`); llama.cpp
//! applies them in turn, each one splitting every piece the previous one produced. For the
//! common expressions llama.cpp has hand-written matchers (`unicode_regex_split_custom_*`) whose
//! behaviour differs from the regex in corner cases; the others run through `std::regex` on a
//! text where every non-ASCII code point is collapsed to a byte naming its category. Both are
//! hand-written here without a regex engine, following llama.cpp's behaviour, not the regex's.
//!
//! Positions and lengths are in code points. A piece never sees its neighbours: looking past
//! its end yields [`Class::NONE`], like llama.cpp's out-of-range flags.

mod deepseek;
mod gpt4o;
mod kimi;

use super::unicode::{decode_lenient, encode_utf8, encoded_len, Class};

/// The longest number `\p{N}{1,3}` takes in one piece (Llama 3, DeepSeek V3, Kimi-K2).
const MAX_DIGITS: usize = 3;

/// The split rules of one pre-tokenizer family.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PreSplit {
    /// GPT-2: `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)`.
    Gpt2,
    /// SmolLM, StarCoder: every `\p{N}` on its own, then GPT-2.
    SmolLm,
    /// Llama 3: `(?i:'s|...)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`.
    Llama3,
    /// Qwen 2: as Llama 3 but one digit per piece.
    Qwen2,
    /// llama.cpp's fallback: punctuation runs, GPT-2, number runs, then groups of three digits.
    Default,
    /// DeepSeek LLM (`deepseek-llm`, DeepSeek-V2 and V2-Lite): line breaks, cased-letter words,
    /// ASCII and CJK punctuation runs, trailing white space, CJK runs, number runs.
    DeepSeekLlm,
    /// DeepSeek Coder (`deepseek-coder`): line breaks, letter words, punctuation runs, CJK runs,
    /// then every number alone.
    DeepSeekCoder,
    /// DeepSeek V3 and R1 (`deepseek-v3`): numbers in threes, CJK and kana runs, then
    /// `[ASCII punctuation][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|...`.
    DeepSeek3,
    /// Kimi-K2 (`kimi-k2`): Han runs, non-Han letter words with their contraction, then as Llama 3.
    KimiK2,
    /// GPT-4o's o200k expression (`gpt-4o`, `llama4`, gpt-oss, `minimax-m2`, ...): words of an
    /// upper-case run then a lower-case run (or only upper case), one non-letter before them,
    /// a contraction after; numbers in threes; punctuation runs with line breaks and slashes.
    Gpt4o,
    /// Granite's multilingual embedding expression (`granite-embed-multi-97m`): GPT-4o's with
    /// combining marks counted as letters of either case.
    Gpt4oMarks,
}

/// One splitting pass.
#[derive(Clone, Copy, Debug)]
enum Step {
    Gpt2,
    Llama3,
    Qwen2,
    /// `\p{N}` through std::regex: each number code point is isolated.
    EachNumber,
    /// `\p{N}+`: runs of numbers are isolated.
    NumberRuns,
    /// `[\p{P}\$\+<=>\^~\|]+`: runs of punctuation and those symbols are isolated.
    PunctuationRuns,
    /// `[0-9][0-9][0-9]`: consecutive groups of three ASCII digits are isolated.
    DigitTriples,
    /// `[\r\n]`: every line break alone.
    EachNewline,
    /// `\s?[A-Za-zµÀ-ÖØ-ö...]+`: DeepSeek LLM's cased letters, one white space before.
    DeepSeekLetters,
    /// `\s?[!-/:-~！-／：-～‘-‟　-。]+`
    DeepSeekPunctuation,
    /// `\s+$`: the piece's trailing white space.
    TrailingWhitespace,
    /// `[一-龥ࠀ-一가-퟿]+`
    DeepSeekCjk,
    /// `\s?\p{L}+`
    SpaceLetters,
    /// `\s?\p{P}+`
    SpacePunctuation,
    /// `\p{N}{1,3}`: numbers in groups of up to three, from the left.
    NumberTriples,
    /// `[一-龥぀-ゟ゠-ヿ]+`
    DeepSeek3Cjk,
    DeepSeek3,
    KimiK2,
    /// GPT-4o's expression; `true` counts marks as letters.
    O200k(bool),
}

impl PreSplit {
    fn steps(self) -> &'static [Step] {
        match self {
            PreSplit::Gpt2 => &[Step::Gpt2],
            PreSplit::SmolLm => &[Step::EachNumber, Step::Gpt2],
            PreSplit::Llama3 => &[Step::Llama3],
            PreSplit::Qwen2 => &[Step::Qwen2],
            PreSplit::Default => &[
                Step::PunctuationRuns,
                Step::Gpt2,
                Step::NumberRuns,
                Step::DigitTriples,
            ],
            PreSplit::DeepSeekLlm => &[
                Step::EachNewline,
                Step::DeepSeekLetters,
                Step::DeepSeekPunctuation,
                Step::TrailingWhitespace,
                Step::DeepSeekCjk,
                Step::NumberRuns,
            ],
            PreSplit::DeepSeekCoder => &[
                Step::EachNewline,
                Step::SpaceLetters,
                Step::SpacePunctuation,
                Step::DeepSeekCjk,
                Step::EachNumber,
            ],
            PreSplit::DeepSeek3 => &[Step::NumberTriples, Step::DeepSeek3Cjk, Step::DeepSeek3],
            PreSplit::KimiK2 => &[Step::KimiK2],
            PreSplit::Gpt4o => &[Step::O200k(false)],
            PreSplit::Gpt4oMarks => &[Step::O200k(true)],
        }
    }
}

/// Reusable buffers for splitting one text.
#[derive(Default)]
pub struct Scratch {
    cpts: Vec<u32>,
    classes: Vec<Class>,
    /// Byte offset where each code point starts in the (repaired) text, plus the end.
    offsets: Vec<usize>,
    pieces: Vec<usize>,
    next: Vec<usize>,
    /// The text re-encoded when it held invalid UTF-8 (each bad byte became U+FFFD) or
    /// overlong forms.
    repaired: Vec<u8>,
    is_repaired: bool,
}

impl Scratch {
    /// The bytes the word ranges refer to.
    pub fn bytes<'a>(&'a self, original: &'a [u8]) -> &'a [u8] {
        if self.is_repaired {
            &self.repaired
        } else {
            original
        }
    }
}

/// Splits `text` into words, appending their byte ranges to `words`. The ranges index
/// `scratch.bytes(text)`, which is `text` itself unless it held invalid UTF-8.
pub fn split(pre: PreSplit, text: &[u8], scratch: &mut Scratch, words: &mut Vec<(usize, usize)>) {
    let s = scratch;
    s.cpts.clear();
    s.is_repaired = decode_lenient(text, &mut s.cpts);
    s.offsets.clear();
    if s.is_repaired {
        s.repaired.clear();
        for &cp in &s.cpts {
            s.offsets.push(s.repaired.len());
            encode_utf8(cp, &mut s.repaired);
        }
        s.offsets.push(s.repaired.len());
    } else {
        let mut at = 0;
        for &cp in &s.cpts {
            s.offsets.push(at);
            at += encoded_len(cp);
        }
        s.offsets.push(at);
    }
    s.classes.clear();
    s.classes.extend(s.cpts.iter().map(|&cp| Class::of(cp)));

    s.pieces.clear();
    if !s.cpts.is_empty() {
        s.pieces.push(s.cpts.len());
    }
    for &step in pre.steps() {
        s.next.clear();
        let mut start = 0;
        for &len in &s.pieces {
            let end = start + len;
            let piece = Piece {
                cpts: &s.cpts,
                classes: &s.classes,
                start,
                end,
            };
            match step {
                Step::Gpt2 => piece.gpt2(&mut s.next),
                Step::Llama3 => piece.llama3(&mut s.next, false),
                Step::Qwen2 => piece.llama3(&mut s.next, true),
                Step::EachNumber => {
                    piece.isolate(&mut s.next, |p, at| p.class(at).is_number().then_some(1))
                }
                Step::NumberRuns => {
                    piece.isolate(&mut s.next, |p, at| p.run(at, |c, _| c.is_number()))
                }
                Step::PunctuationRuns => {
                    piece.isolate(&mut s.next, |p, at| p.run(at, punctuation_or_listed))
                }
                Step::DigitTriples => piece.isolate(&mut s.next, |p, at| {
                    (0..3)
                        .all(|k| {
                            p.cpt(at + k)
                                .is_some_and(|c| (b'0' as u32..=b'9' as u32).contains(&c))
                        })
                        .then_some(3)
                }),
                Step::EachNewline => {
                    piece.isolate(&mut s.next, |p, at| p.is_newline(at).then_some(1))
                }
                Step::DeepSeekLetters => piece.isolate(&mut s.next, Piece::deepseek_letters),
                Step::DeepSeekPunctuation => {
                    piece.isolate(&mut s.next, Piece::deepseek_punctuation)
                }
                Step::TrailingWhitespace => piece.trailing_whitespace(&mut s.next),
                Step::DeepSeekCjk => piece.isolate(&mut s.next, Piece::deepseek_cjk),
                Step::SpaceLetters => piece.isolate(&mut s.next, |p, at| {
                    p.space_then_run(at, |p, i| p.class(i).is_letter())
                }),
                Step::SpacePunctuation => piece.isolate(&mut s.next, |p, at| {
                    p.space_then_run(at, |p, i| p.class(i).is_punctuation())
                }),
                Step::NumberTriples => piece.isolate(&mut s.next, |p, at| {
                    p.run(at, |c, _| c.is_number()).map(|n| n.min(MAX_DIGITS))
                }),
                Step::DeepSeek3Cjk => piece.isolate(&mut s.next, Piece::deepseek3_cjk),
                Step::DeepSeek3 => piece.isolate(&mut s.next, Piece::deepseek3),
                Step::KimiK2 => piece.kimi_k2(&mut s.next),
                Step::O200k(marks) => piece.isolate(&mut s.next, |p, at| p.o200k(at, marks)),
            }
            start = end;
        }
        std::mem::swap(&mut s.pieces, &mut s.next);
    }

    let mut start = 0;
    for &len in &s.pieces {
        words.push((s.offsets[start], s.offsets[start + len]));
        start += len;
    }
}

/// `[\p{P}\$\+<=>\^~\|]`
fn punctuation_or_listed(c: Class, cp: u32) -> bool {
    c.is_punctuation()
        || matches!(
            char::from_u32(cp),
            Some('$' | '+' | '<' | '=' | '>' | '^' | '~' | '|')
        )
}

/// The contraction suffix starting at an apostrophe at `at`, if any: its length in code
/// points. `fold` lower-cases the letters first (Llama 3, Qwen 2).
fn contraction(p: &Piece, at: usize, fold: bool) -> Option<usize> {
    const APOSTROPHE: u32 = '\'' as u32;
    if p.cpt(at) != Some(APOSTROPHE) || at + 1 >= p.end {
        return None;
    }
    let lower = |cp: u32| {
        let c = char::from_u32(cp).unwrap_or('\0');
        if fold {
            c.to_ascii_lowercase()
        } else {
            c
        }
    };
    let next = lower(p.cpts[at + 1]);
    if matches!(next, 's' | 't' | 'm' | 'd') {
        return Some(2);
    }
    if at + 2 < p.end {
        let next2 = lower(p.cpts[at + 2]);
        if matches!((next, next2), ('r', 'e') | ('v', 'e') | ('l', 'l')) {
            return Some(3);
        }
    }
    None
}

/// One piece of text being split: code points `start..end` of the whole text.
struct Piece<'a> {
    cpts: &'a [u32],
    classes: &'a [Class],
    start: usize,
    end: usize,
}

/// Emits pieces as a splitter advances: each `cut(at)` ends a piece at `at` (if non-empty).
struct Cutter<'o> {
    out: &'o mut Vec<usize>,
    prev: usize,
}

impl Cutter<'_> {
    fn cut(&mut self, at: usize) {
        if at > self.prev {
            self.out.push(at - self.prev);
        }
        self.prev = at;
    }
}

impl Piece<'_> {
    #[inline]
    fn cpt(&self, at: usize) -> Option<u32> {
        (at < self.end).then(|| self.cpts[at])
    }

    #[inline]
    fn class(&self, at: usize) -> Class {
        if at < self.end {
            self.classes[at]
        } else {
            Class::NONE
        }
    }

    fn is(&self, at: usize, cp: char) -> bool {
        self.cpt(at) == Some(cp as u32)
    }

    /// Length of the run starting at `at` whose code points satisfy `f` (None if empty).
    fn run(&self, at: usize, f: impl Fn(Class, u32) -> bool) -> Option<usize> {
        let mut end = at;
        while end < self.end && f(self.classes[end], self.cpts[end]) {
            end += 1;
        }
        (end > at).then_some(end - at)
    }

    /// Splits so that every leftmost, non-overlapping match (`matches(at)` = its length) is a
    /// piece of its own, and the text between matches forms pieces too (`std::regex` split).
    fn isolate(&self, out: &mut Vec<usize>, matches: impl Fn(&Self, usize) -> Option<usize>) {
        let mut cut = Cutter {
            out,
            prev: self.start,
        };
        let mut at = self.start;
        while at < self.end {
            match matches(self, at) {
                Some(len) => {
                    cut.cut(at);
                    at += len;
                    cut.cut(at);
                }
                None => at += 1,
            }
        }
        cut.cut(self.end);
    }

    /// llama.cpp's `unicode_regex_split_custom_gpt2`.
    fn gpt2(&self, out: &mut Vec<usize>) {
        let mut cut = Cutter {
            out,
            prev: self.start,
        };
        let mut pos = self.start;
        while pos < self.end {
            if let Some(len) = contraction(self, pos, false) {
                pos += len;
                cut.cut(pos);
                continue;
            }
            let space = self.is(pos, ' ');
            let next = if space {
                self.class(pos + 1)
            } else {
                self.class(pos)
            };
            let other =
                |c: Class| !(c.is_whitespace() || c.is_letter() || c.is_number()) && c.exists();
            // ` ?\p{L}+`, ` ?\p{N}+`, ` ?[^\s\p{L}\p{N}]+`
            let run: Option<fn(Class) -> bool> = if next.is_letter() {
                Some(Class::is_letter)
            } else if next.is_number() {
                Some(Class::is_number)
            } else if other(next) {
                Some(other)
            } else {
                None
            };
            if let Some(in_run) = run {
                pos += space as usize;
                while in_run(self.class(pos)) {
                    pos += 1;
                }
                cut.cut(pos);
                continue;
            }
            let n_ws = self.whitespace_run(pos);
            if n_ws > 1 && self.cpt(pos + n_ws).is_some() {
                // `\s+(?!\S)`: leave the last whitespace to the next word.
                pos += n_ws - 1;
            } else if n_ws > 0 {
                pos += n_ws;
            } else {
                pos += 1;
            }
            cut.cut(pos);
        }
    }

    /// llama.cpp's `unicode_regex_split_custom_llama3`, or `..._qwen2` (single digits).
    fn llama3(&self, out: &mut Vec<usize>, single_digits: bool) {
        let mut cut = Cutter {
            out,
            prev: self.start,
        };
        let mut pos = self.start;
        while pos < self.end {
            if let Some(len) = contraction(self, pos, true) {
                pos += len;
                cut.cut(pos);
                continue;
            }
            let flags = self.class(pos);
            // `[^\r\n\p{L}\p{N}]?\p{L}+`
            if !(self.is_newline(pos) || flags.is_number())
                && (flags.is_letter() || self.class(pos + 1).is_letter())
            {
                pos += 1;
                while self.class(pos).is_letter() {
                    pos += 1;
                }
                cut.cut(pos);
                continue;
            }
            pos = self.llama3_rest(pos, single_digits, &mut cut);
        }
    }

    fn is_newline(&self, at: usize) -> bool {
        self.is(at, '\r') || self.is(at, '\n')
    }

    /// The alternatives that Llama 3's expression shares with Kimi-K2's, after the letters:
    /// `\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+` (Qwen 2: `\p{N}`).
    /// Cuts what matches at `pos` (or the one code point there) and returns where it ends.
    fn llama3_rest(&self, mut pos: usize, single_digits: bool, cut: &mut Cutter) -> usize {
        let flags = self.class(pos);
        // `\p{N}{1,3}` (Qwen 2: `\p{N}`)
        if flags.is_number() {
            if single_digits {
                pos += 1;
            } else {
                let mut group = pos;
                while self.class(pos).is_number() {
                    pos += 1;
                    if pos - group >= MAX_DIGITS {
                        cut.cut(pos);
                        group = pos;
                    }
                }
            }
            cut.cut(pos);
            return pos;
        }
        // ` ?[^\s\p{L}\p{N}]+[\r\n]*` (llama.cpp tests the first code point's flags for
        // existence, so a lone trailing space matches here)
        let space = self.is(pos, ' ');
        let mut next = if space { self.class(pos + 1) } else { flags };
        let other = |c: Class| !(c.is_whitespace() || c.is_letter() || c.is_number());
        if other(next) && flags.exists() {
            pos += space as usize;
            while other(next) && next.exists() {
                pos += 1;
                next = self.class(pos);
            }
            while self.is_newline(pos) {
                pos += 1;
            }
            cut.cut(pos);
            return pos;
        }
        // `\s*[\r\n]+`, `\s+(?!\S)`, `\s+`
        let n_ws = self.whitespace_run(pos);
        let last_newline_end = (pos..pos + n_ws)
            .rev()
            .find(|&at| self.is_newline(at))
            .map(|at| at + 1);
        if let Some(end) = last_newline_end {
            pos = end;
        } else if n_ws > 1 && self.cpt(pos + n_ws).is_some() {
            pos += n_ws - 1;
        } else if n_ws > 0 {
            pos += n_ws;
        } else {
            pos += 1;
        }
        cut.cut(pos);
        pos
    }

    /// What `\s*[\r\n]+|\s+(?!\S)|\s+` matches of a run of `n_ws` white-space code points
    /// at `at`: through its last newline; else all of it but the last where text follows (the
    /// last then leads the next piece), all of it at the end, one alone; `None` for no run.
    fn space_tail(&self, at: usize, n_ws: usize) -> Option<usize> {
        if let Some(last) = (at..at + n_ws).rev().find(|&i| self.is_newline(i)) {
            return Some(last + 1 - at);
        }
        match n_ws {
            0 => None,
            1 => Some(1),
            n if at + n < self.end => Some(n - 1),
            n => Some(n),
        }
    }

    fn whitespace_run(&self, at: usize) -> usize {
        let mut n = 0;
        while self.class(at + n).is_whitespace() {
            n += 1;
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(pre: PreSplit, text: &str) -> Vec<String> {
        let mut scratch = Scratch::default();
        let mut w = Vec::new();
        split(pre, text.as_bytes(), &mut scratch, &mut w);
        let bytes = scratch.bytes(text.as_bytes());
        w.iter()
            .map(|&(a, b)| String::from_utf8(bytes[a..b].to_vec()).unwrap())
            .collect()
    }

    #[test]
    fn gpt2_contractions_letters_and_spaces() {
        assert_eq!(
            words(PreSplit::Gpt2, "I'm here, it's 42!"),
            ["I", "'m", " here", ",", " it", "'s", " 42", "!"]
        );
        // Case-sensitive contractions: "'S" is punctuation followed by a letter.
        assert_eq!(words(PreSplit::Gpt2, "IT'S"), ["IT", "'", "S"]);
        // `\s+(?!\S)`: the last space of a run goes with the next word.
        assert_eq!(words(PreSplit::Gpt2, "a   b"), ["a", "  ", " b"]);
        // Trailing whitespace stays together.
        assert_eq!(words(PreSplit::Gpt2, "a  \n"), ["a", "  \n"]);
        assert_eq!(words(PreSplit::Gpt2, "x\n\ny"), ["x", "\n", "\n", "y"]);
    }

    #[test]
    fn smollm_isolates_every_digit() {
        assert_eq!(
            words(PreSplit::SmolLm, "in 2024, x12"),
            ["in", " ", "2", "0", "2", "4", ",", " x", "1", "2"]
        );
        // Non-ASCII numbers too.
        assert_eq!(words(PreSplit::SmolLm, "½٣"), ["½", "٣"]);
    }

    #[test]
    fn llama3_groups_digits_and_attaches_prefix() {
        assert_eq!(words(PreSplit::Llama3, "12345 abc"), ["123", "45", " abc"]);
        assert_eq!(words(PreSplit::Llama3, "IT'S ok"), ["IT", "'S", " ok"]);
        assert_eq!(words(PreSplit::Llama3, "(hello)\n\n"), ["(hello", ")\n\n"]);
        assert_eq!(words(PreSplit::Llama3, "a \n\n b"), ["a", " \n\n", " b"]);
        // A lone trailing space is matched by ` ?[^\s\p{L}\p{N}]+` in llama.cpp's matcher.
        assert_eq!(words(PreSplit::Llama3, "a "), ["a", " "]);
        assert_eq!(words(PreSplit::Qwen2, "x 123"), ["x", " ", "1", "2", "3"]);
    }

    #[test]
    fn default_isolates_punctuation_and_digit_triples() {
        assert_eq!(
            words(PreSplit::Default, "a+=b 1234567"),
            ["a", "+=", "b", " ", "123", "456", "7"]
        );
    }

    // The expected splits of the DeepSeek, Kimi and GPT-4o tests below were checked against llama.cpp's
    // own `unicode_regex_split` with these pre-tokenizers' expressions (0c1e57098).

    #[test]
    fn deepseek_llm_splits() {
        let w = |t| words(PreSplit::DeepSeekLlm, t);
        // `\s+$` cuts trailing white space off what no later pass splits.
        assert_eq!(w("\u{20AC}  "), ["\u{20AC}", "  "]);
        assert_eq!(
            w("Hello, world!  \nx"),
            ["Hello", ",", " world", "!", "  ", "\n", "x"]
        );
        // Full-width digits are numbers, full-width letters letters; U+3000 is white space,
        // not the first member of `[　-。]`.
        assert_eq!(
            w("中文１２３ＡＢ\u{3000}。x"),
            ["中文", "１２３", "ＡＢ", "\u{3000}", "。", "x"]
        );
        assert_eq!(w("a\u{3000}b"), ["a", "\u{3000}b"]);
        assert_eq!(w("12 345"), ["12", " ", "345"]);
    }

    #[test]
    fn deepseek_coder_splits() {
        let w = |t| words(PreSplit::DeepSeekCoder, t);
        assert_eq!(w(" hello  world"), [" hello", " ", " world"]);
        assert_eq!(
            w("a_b-c 42x"),
            ["a", "_", "b", "-", "c", " ", "4", "2", "x"]
        );
        assert_eq!(w("中文、한국어 test"), ["中文", "、", "한국어", " test"]);
    }

    #[test]
    fn deepseek3_splits() {
        let w = |t| words(PreSplit::DeepSeek3, t);
        assert_eq!(
            w("$USD 12345 中文テスト"),
            ["$USD", " ", "123", "45", " ", "中文テスト"]
        );
        // Marks belong to words; one ASCII punctuation mark joins the letters after it.
        assert_eq!(w("e\u{301}te  x"), ["e\u{301}te", " ", " x"]);
        assert_eq!(w("--help x"), ["--", "help", " x"]);
        assert_eq!(w(" ++\n\nok"), [" ++\n\n", "ok"]);
    }

    #[test]
    fn kimi_k2_splits() {
        let w = |t| words(PreSplit::KimiK2, t);
        // The contraction ends the word even where letters follow; Han runs stand alone.
        assert_eq!(
            w("they'llo 中文abc I'M"),
            ["they'll", "o", " ", "中文", "abc", " I'M"]
        );
        assert_eq!(w("\u{20000}x 1234"), ["\u{20000}", "x", " ", "123", "4"]);
        assert_eq!(w("'S ok\n\n"), ["'S", " ok", "\n\n"]);
        assert_eq!(w("a  b  "), ["a", " ", " b", "  "]);
    }

    #[test]
    fn gpt4o_splits() {
        let w = |t| words(PreSplit::Gpt4o, t);
        // Upper-case runs give back their last letter to a lower-case run; a non-ASCII letter
        // is both cases.
        assert_eq!(
            w("HTTPServer's camelCase ÉCOLE straße"),
            ["HTTPServer's", " camel", "Case", " É", "COLE", " straße"]
        );
        assert_eq!(
            w("Hello  world\n\n 12345 x"),
            ["Hello", " ", " world", "\n\n", " ", "123", "45", " x"]
        );
        assert_eq!(
            w("// path/to/file//\n\nok"),
            ["//", " path", "/to", "/file", "//\n\n", "ok"]
        );
        assert_eq!(w("I'M they'LL 'S"), ["I'M", " they'LL", " '", "S"]);
        // Marks are not letters; non-ASCII white space prefixes a word like a space.
        assert_eq!(
            w("e\u{301}te x\u{301}y"),
            ["e", "\u{301}te", " x", "\u{301}y"]
        );
        assert_eq!(w("\u{3000}ab 中文ΩA."), ["\u{3000}ab", " 中文Ω", "A", "."]);
        assert_eq!(w("4\u{301}'ll"), ["4", "\u{301}'", "ll"]);
    }

    #[test]
    fn gpt4o_marks_splits() {
        let w = |t| words(PreSplit::Gpt4oMarks, t);
        assert_eq!(w("e\u{301}te x\u{301}y"), ["e\u{301}te", " x\u{301}y"]);
        // A mark the optional prefix took is given back to start the word.
        assert_eq!(w("4\u{301}'ll"), ["4", "\u{301}'ll"]);
        assert_eq!(w("camelCase ÉCOLE"), ["camel", "Case", " É", "COLE"]);
    }

    #[test]
    fn invalid_utf8_becomes_replacement_characters() {
        let mut scratch = Scratch::default();
        let mut w = Vec::new();
        split(PreSplit::Gpt2, b"ab\xFFcd", &mut scratch, &mut w);
        let bytes = scratch.bytes(b"");
        let got: Vec<&[u8]> = w.iter().map(|&(a, b)| &bytes[a..b]).collect();
        assert_eq!(got, [b"ab".as_slice(), "\u{FFFD}".as_bytes(), b"cd"]);
    }
}
