//! The DeepSeek families' splitting passes (`deepseek-llm`, `deepseek-coder`, `deepseek-v3`).
//!
//! llama.cpp has no hand-written matcher for these expressions: they run through `std::regex`.
//! An expression naming a Unicode category (`\p{L}`, ...) sees a text where every non-ASCII
//! code point is collapsed to one byte for its category (white space to `\v`); the others see
//! the code points themselves, with non-ASCII white space replaced by `\v` (its `std::wregex`
//! knows no white space past ASCII). Either way `\s` is the White_Space property and a literal
//! set never holds a non-ASCII white-space character (U+3000 in `[　-。]`, U+2000 in
//! `[ࠀ-一]`), which is what these matchers test. Matches are leftmost, ECMAScript alternation
//! takes the first alternative that matches, and a piece never sees past its ends (`$` is the
//! piece's end).

use super::Piece;

/// An inclusive range of code points.
type Range = (u32, u32);

/// The letter set of DeepSeek LLM's `\s?[A-Za-zµÀ-ÖØ-ö...]+`, as written in its tokenizer
/// (the cased letters: Latin, Greek, Cyrillic, Armenian, Georgian, Cherokee, Glagolitic,
/// Coptic, Deseret, Osage, Old Hungarian, Warang Citi, Adlam, full-width Latin, ...).
#[rustfmt::skip]
const DEEPSEEK_LETTERS: &[Range] = &[
    (0x0041, 0x005A), (0x0061, 0x007A), (0x00B5, 0x00B5), (0x00C0, 0x00D6), (0x00D8, 0x00F6),
    (0x00F8, 0x01BA), (0x01BC, 0x01BF), (0x01C4, 0x0293), (0x0295, 0x02AF), (0x0370, 0x0373),
    (0x0376, 0x0377), (0x037B, 0x037D), (0x037F, 0x037F), (0x0386, 0x0386), (0x0388, 0x038A),
    (0x038C, 0x038C), (0x038E, 0x03A1), (0x03A3, 0x03F5), (0x03F7, 0x0481), (0x048A, 0x052F),
    (0x0531, 0x0556), (0x10A0, 0x10C5), (0x13A0, 0x13F5), (0x13F8, 0x13FD), (0x1C90, 0x1CBA),
    (0x1CBD, 0x1CBF), (0x1D00, 0x1D2B), (0x1D6B, 0x1D77), (0x1D79, 0x1D9A), (0x1E00, 0x1F15),
    (0x1F18, 0x1F1D), (0x1F20, 0x1F45), (0x1F48, 0x1F4D), (0x1F50, 0x1F57), (0x1F59, 0x1F59),
    (0x1F5B, 0x1F5B), (0x1F5D, 0x1F5D), (0x1F5F, 0x1F7D), (0x1F80, 0x1FB4), (0x1FB6, 0x1FBC),
    (0x1FBE, 0x1FBE), (0x1FC2, 0x1FC4), (0x1FC6, 0x1FCC), (0x1FD0, 0x1FD3), (0x1FD6, 0x1FDB),
    (0x1FE0, 0x1FEC), (0x1FF2, 0x1FF4), (0x1FF6, 0x1FFC), (0x2102, 0x2102), (0x2107, 0x2107),
    (0x210A, 0x2113), (0x2115, 0x2115), (0x2119, 0x211D), (0x2124, 0x2124), (0x2126, 0x2126),
    (0x2128, 0x2128), (0x212A, 0x212D), (0x212F, 0x2134), (0x2139, 0x2139), (0x213C, 0x213F),
    (0x2145, 0x2149), (0x214E, 0x214E), (0x2183, 0x2184), (0x2C00, 0x2C7B), (0x2C7E, 0x2CE4),
    (0x2CEB, 0x2CEE), (0x2CF2, 0x2CF3), (0xA640, 0xA66D), (0xA680, 0xA69B), (0xA722, 0xA76F),
    (0xA771, 0xA787), (0xA78B, 0xA78E), (0xAB70, 0xABBF), (0xFB00, 0xFB06), (0xFB13, 0xFB17),
    (0xFF21, 0xFF3A), (0xFF41, 0xFF5A), (0x10400, 0x1044F), (0x104B0, 0x104D3), (0x104D8, 0x104FB),
    (0x10C80, 0x10CB2), (0x10CC0, 0x10CF2), (0x118A0, 0x118DF), (0x1E900, 0x1E943),
];

/// DeepSeek LLM's `[!-/:-~！-／：-～‘-‟　-。]`: ASCII punctuation, symbols and letters (the
/// letters were split off before), their full-width forms, curly quotes, CJK punctuation.
const DEEPSEEK_PUNCTUATION: &[Range] = &[
    (0x0021, 0x002F),
    (0x003A, 0x007E),
    (0xFF01, 0xFF0F),
    (0xFF1A, 0xFF5E),
    (0x2018, 0x201F),
    (0x3000, 0x3002),
];

/// `[一-龥ࠀ-一가-퟿]` (DeepSeek LLM and Coder): CJK ideographs up to U+9FA5, everything from
/// U+0800 up to them (Indic scripts, Thai, kana, ...), Hangul syllables and Jamo extensions.
const DEEPSEEK_CJK: &[Range] = &[(0x4E00, 0x9FA5), (0x0800, 0x4E00), (0xAC00, 0xD7FF)];

/// `[一-龥぀-ゟ゠-ヿ]` (DeepSeek V3): CJK ideographs up to U+9FA5, hiragana, katakana.
const DEEPSEEK3_CJK: &[Range] = &[(0x4E00, 0x9FA5), (0x3040, 0x309F), (0x30A0, 0x30FF)];

fn in_ranges(cp: u32, ranges: &[Range]) -> bool {
    ranges.iter().any(|&(lo, hi)| (lo..=hi).contains(&cp))
}

fn is_newline(cp: u32) -> bool {
    cp == '\r' as u32 || cp == '\n' as u32
}

impl Piece<'_> {
    /// Whether the code point at `at` is in the literal set `ranges`, as `std::wregex` sees
    /// it (non-ASCII white space never is).
    fn in_set(&self, at: usize, ranges: &[Range]) -> bool {
        self.cpt(at)
            .is_some_and(|cp| !self.class(at).is_whitespace() && in_ranges(cp, ranges))
    }

    /// `\s?X+`: the length of the match at `at`, where `x(at)` tests one code point.
    pub(super) fn space_then_run(
        &self,
        at: usize,
        x: impl Fn(&Self, usize) -> bool,
    ) -> Option<usize> {
        let first = if self.class(at).is_whitespace() && x(self, at + 1) {
            at + 1
        } else if x(self, at) {
            at
        } else {
            return None;
        };
        let mut end = first + 1;
        while x(self, end) {
            end += 1;
        }
        Some(end - at)
    }

    /// `\s?[<DeepSeek letters>]+`
    pub(super) fn deepseek_letters(&self, at: usize) -> Option<usize> {
        self.space_then_run(at, |p, i| p.in_set(i, DEEPSEEK_LETTERS))
    }

    /// `\s?[!-/:-~！-／：-～‘-‟　-。]+`
    pub(super) fn deepseek_punctuation(&self, at: usize) -> Option<usize> {
        self.space_then_run(at, |p, i| p.in_set(i, DEEPSEEK_PUNCTUATION))
    }

    /// `[一-龥ࠀ-一가-퟿]+`
    pub(super) fn deepseek_cjk(&self, at: usize) -> Option<usize> {
        self.run_of(at, |p, i| p.in_set(i, DEEPSEEK_CJK))
    }

    /// `[一-龥぀-ゟ゠-ヿ]+`
    pub(super) fn deepseek3_cjk(&self, at: usize) -> Option<usize> {
        self.run_of(at, |p, i| p.in_set(i, DEEPSEEK3_CJK))
    }

    /// Length of the run at `at` of code points for which `x` holds (None if empty).
    fn run_of(&self, at: usize, x: impl Fn(&Self, usize) -> bool) -> Option<usize> {
        let mut end = at;
        while x(self, end) {
            end += 1;
        }
        (end > at).then_some(end - at)
    }

    /// `\s+$`: the trailing white space of the piece, split off.
    pub(super) fn trailing_whitespace(&self, out: &mut Vec<usize>) {
        let mut tail = self.end;
        while tail > self.start && self.class(tail - 1).is_whitespace() {
            tail -= 1;
        }
        for len in [tail - self.start, self.end - tail] {
            if len > 0 {
                out.push(len);
            }
        }
    }

    /// DeepSeek V3's main expression, one alternative after the other:
    /// `[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+|
    /// ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
    pub(super) fn deepseek3(&self, at: usize) -> Option<usize> {
        let ascii = |i: usize, f: fn(&u8) -> bool| {
            self.cpt(i)
                .is_some_and(|cp| u8::try_from(cp).is_ok_and(|b| f(&b)))
        };
        if ascii(at, u8::is_ascii_punctuation) && ascii(at + 1, u8::is_ascii_alphabetic) {
            return self
                .run_of(at + 1, |p, i| {
                    p.cpt(i)
                        .is_some_and(|cp| u8::try_from(cp).is_ok_and(|b| b.is_ascii_alphabetic()))
                })
                .map(|n| n + 1);
        }
        let cp = self.cpt(at)?;
        let class = self.class(at);
        let letter_or_mark = |p: &Self, i: usize| p.class(i).is_letter() || p.class(i).is_mark();
        let punct_or_symbol = |p: &Self, i: usize| {
            let c = p.class(i);
            c.is_punctuation() || c.is_symbol()
        };
        let prefix =
            !(is_newline(cp) || class.is_letter() || class.is_punctuation() || class.is_symbol());
        if prefix && letter_or_mark(self, at + 1) {
            return self.run_of(at + 1, letter_or_mark).map(|n| n + 1);
        }
        if letter_or_mark(self, at) {
            return self.run_of(at, letter_or_mark);
        }
        let space = (cp == ' ' as u32 && punct_or_symbol(self, at + 1)) as usize;
        if space == 1 || punct_or_symbol(self, at) {
            let mut end = at + space;
            while punct_or_symbol(self, end) {
                end += 1;
            }
            while self.cpt(end).is_some_and(is_newline) {
                end += 1;
            }
            return Some(end - at);
        }
        self.space_tail(at, self.whitespace_run(at))
    }
}
