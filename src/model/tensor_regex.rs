//! The regular expressions of llama-quantize's `--tensor-type PATTERN=TYPE`: llama.cpp compiles
//! each PATTERN with `std::regex` (ECMAScript grammar) and tests a tensor name with
//! `std::regex_search`, i.e. anywhere in the name unless anchored.
//!
//! This is the part of ECMAScript's grammar such patterns use: literal characters, `.`, the
//! quantifiers `*`, `+`, `?`, `{n}`, `{n,}` and `{n,m}` (a trailing `?` makes one lazy, which
//! does not change whether a name matches), bracket classes with ranges and negation
//! (`[0-9]`, `[^.]`), `^`, `$`, alternation `|`, groups `( )` and `(?: )`, the classes `\d`,
//! `\w`, `\s` (and `\D`, `\W`, `\S`), and escaped punctuation (`\.`). Anything else (back
//! references, lookahead, `\b`, `\x…`, `\u…`) is refused with an error saying what, rather
//! than matched differently from llama.cpp. Matching runs the pattern as an NFA over the name
//! (Pike's method), so no pattern takes exponential time.

use std::fmt;

/// Instructions a pattern may compile to (counted repeats are unrolled): enough for any
/// pattern a person writes, small enough that a typo such as `a{99999}` is refused.
const MAX_PROGRAM: usize = 1 << 14;

/// A compiled pattern.
#[derive(Clone, Debug)]
pub struct Regex {
    source: String,
    prog: Vec<Inst>,
    sets: Vec<Set>,
}

/// Why a pattern was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RegexError {
    pub pattern: String,
    pub why: String,
}

impl fmt::Display for RegexError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "bad pattern '{}': {}", self.pattern, self.why)
    }
}

impl std::error::Error for RegexError {}

/// A set of characters: inclusive ranges, possibly negated.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Set {
    ranges: Vec<(char, char)>,
    negated: bool,
}

impl Set {
    fn one(c: char) -> Set {
        Set {
            ranges: vec![(c, c)],
            negated: false,
        }
    }

    fn contains(&self, c: char) -> bool {
        self.ranges.iter().any(|&(a, b)| a <= c && c <= b) != self.negated
    }
}

/// ECMAScript's line terminators, which `.` does not match.
const LINE_TERMINATORS: [(char, char); 3] = [('\n', '\n'), ('\r', '\r'), ('\u{2028}', '\u{2029}')];
const DIGITS: [(char, char); 1] = [('0', '9')];
const WORD: [(char, char); 4] = [('0', '9'), ('A', 'Z'), ('_', '_'), ('a', 'z')];
const SPACE: [(char, char); 7] = [
    ('\t', '\r'),
    (' ', ' '),
    ('\u{a0}', '\u{a0}'),
    ('\u{1680}', '\u{1680}'),
    ('\u{2000}', '\u{200a}'),
    ('\u{2028}', '\u{2029}'),
    ('\u{feff}', '\u{feff}'),
];

/// The syntax tree.
#[derive(Clone, Debug)]
enum Node {
    Set(Set),
    Start,
    End,
    /// Branches of an alternation, each a sequence.
    Alt(Vec<Vec<Node>>),
    Repeat {
        node: Box<Node>,
        min: u32,
        max: Option<u32>,
    },
}

#[derive(Clone, Copy, Debug)]
enum Inst {
    /// Index into the program's sets.
    Char(usize),
    Split(usize, usize),
    Jmp(usize),
    Start,
    End,
    Match,
}

struct Parser<'a> {
    chars: Vec<char>,
    pos: usize,
    pattern: &'a str,
}

impl Parser<'_> {
    fn err<T>(&self, why: impl Into<String>) -> Result<T, RegexError> {
        Err(RegexError {
            pattern: self.pattern.into(),
            why: why.into(),
        })
    }

    fn peek(&self) -> Option<char> {
        self.chars.get(self.pos).copied()
    }

    fn eat(&mut self, c: char) -> bool {
        if self.peek() == Some(c) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    /// disjunction := sequence ('|' sequence)*
    fn alternation(&mut self) -> Result<Node, RegexError> {
        let mut branches = vec![self.sequence()?];
        while self.eat('|') {
            branches.push(self.sequence()?);
        }
        Ok(Node::Alt(branches))
    }

    fn sequence(&mut self) -> Result<Vec<Node>, RegexError> {
        let mut seq = Vec::new();
        while let Some(c) = self.peek() {
            if c == '|' || c == ')' {
                break;
            }
            let atom = self.atom()?;
            let quantifiable = !matches!(atom, Node::Start | Node::End);
            match self.quantifier()? {
                Some(_) if !quantifiable => return self.err("a quantifier follows ^ or $"),
                Some((min, max)) => seq.push(Node::Repeat {
                    node: Box::new(atom),
                    min,
                    max,
                }),
                None => seq.push(atom),
            }
        }
        Ok(seq)
    }

    fn atom(&mut self) -> Result<Node, RegexError> {
        let c = self.peek().expect("atom() is called before the end");
        self.pos += 1;
        Ok(match c {
            '^' => Node::Start,
            '$' => Node::End,
            '.' => Node::Set(Set {
                ranges: LINE_TERMINATORS.to_vec(),
                negated: true,
            }),
            '(' => {
                if self.eat('?') && !self.eat(':') {
                    return self.err("lookahead and other (? groups are not supported");
                }
                let inner = self.alternation()?;
                if !self.eat(')') {
                    return self.err("a ( is not closed");
                }
                inner
            }
            ')' => return self.err("a ) has no ("),
            '[' => Node::Set(self.class()?),
            '*' | '+' | '?' => return self.err(format!("{c} has nothing to repeat")),
            '{' if self.brace_quantifier_ahead() => return self.err("{ has nothing to repeat"),
            '\\' => Node::Set(self.escape(false)?),
            c => Node::Set(Set::one(c)),
        })
    }

    /// Whether `{…}` at the cursor (just after a `{`) reads as a counted quantifier.
    fn brace_quantifier_ahead(&self) -> bool {
        let rest: String = self.chars[self.pos..].iter().collect();
        let Some(end) = rest.find('}') else {
            return false;
        };
        let body = &rest[..end];
        let (a, b) = body.split_once(',').unwrap_or((body, "0"));
        !a.is_empty()
            && a.bytes().all(|d| d.is_ascii_digit())
            && b.bytes().all(|d| d.is_ascii_digit())
    }

    /// `*`, `+`, `?`, `{n}`, `{n,}`, `{n,m}`, each optionally lazy.
    fn quantifier(&mut self) -> Result<Option<(u32, Option<u32>)>, RegexError> {
        let q = match self.peek() {
            Some('*') => (0, None),
            Some('+') => (1, None),
            Some('?') => (0, Some(1)),
            Some('{') => {
                self.pos += 1;
                if !self.brace_quantifier_ahead() {
                    return self.err("a { does not start a count such as {2} or {1,3}");
                }
                let min = self.number()?;
                let max = if self.eat(',') {
                    if self.peek() == Some('}') {
                        None
                    } else {
                        Some(self.number()?)
                    }
                } else {
                    Some(min)
                };
                self.eat('}');
                if max.is_some_and(|m| m < min) {
                    return self.err(format!(
                        "the count {{{min},{}}} runs backwards",
                        max.unwrap()
                    ));
                }
                self.pos -= 1;
                (min, max)
            }
            _ => return Ok(None),
        };
        self.pos += 1;
        // A lazy quantifier matches the same names.
        self.eat('?');
        Ok(Some(q))
    }

    fn number(&mut self) -> Result<u32, RegexError> {
        let start = self.pos;
        while self.peek().is_some_and(|c| c.is_ascii_digit()) {
            self.pos += 1;
        }
        let s: String = self.chars[start..self.pos].iter().collect();
        match s.parse() {
            Ok(n) => Ok(n),
            Err(_) => self.err(format!("the count {s} is too large")),
        }
    }

    /// After a `\`: a class escape or an escaped character. `in_class` allows `\-`.
    fn escape(&mut self, in_class: bool) -> Result<Set, RegexError> {
        let Some(c) = self.peek() else {
            return self.err("the pattern ends with a lone \\");
        };
        self.pos += 1;
        let class = |ranges: &[(char, char)], negated| Set {
            ranges: ranges.to_vec(),
            negated,
        };
        Ok(match c {
            'd' => class(&DIGITS, false),
            'D' => class(&DIGITS, true),
            'w' => class(&WORD, false),
            'W' => class(&WORD, true),
            's' => class(&SPACE, false),
            'S' => class(&SPACE, true),
            'n' => Set::one('\n'),
            'r' => Set::one('\r'),
            't' => Set::one('\t'),
            'f' => Set::one('\u{c}'),
            'v' => Set::one('\u{b}'),
            '-' if in_class => Set::one('-'),
            c if "^$\\.*+?()[]{}|/".contains(c) => Set::one(c),
            c => return self.err(format!("the escape \\{c} is not supported")),
        })
    }

    /// After a `[`: the class up to its `]`.
    fn class(&mut self) -> Result<Set, RegexError> {
        let negated = self.eat('^');
        let mut ranges = Vec::new();
        // Classes inside the class (\d in [\d.]) when negated need their own sets: refused.
        loop {
            let Some(c) = self.peek() else {
                return self.err("a [ is not closed");
            };
            self.pos += 1;
            if c == ']' {
                break;
            }
            let lo = if c == '\\' {
                let s = self.escape(true)?;
                if s.negated {
                    return self.err("\\D, \\W and \\S are not supported inside [ ]");
                }
                if s.ranges.len() != 1 || s.ranges[0].0 != s.ranges[0].1 {
                    ranges.extend(s.ranges);
                    continue;
                }
                s.ranges[0].0
            } else {
                c
            };
            // A range a-z, unless the - is last.
            if self.peek() == Some('-') && self.chars.get(self.pos + 1).is_some_and(|&n| n != ']') {
                self.pos += 1;
                let h = self.peek().expect("checked above");
                self.pos += 1;
                let hi = if h == '\\' {
                    let s = self.escape(true)?;
                    if s.negated || s.ranges.len() != 1 || s.ranges[0].0 != s.ranges[0].1 {
                        return self.err("a range ends in a class such as \\d");
                    }
                    s.ranges[0].0
                } else {
                    h
                };
                if hi < lo {
                    return self.err(format!("the range {lo}-{hi} runs backwards"));
                }
                ranges.push((lo, hi));
            } else {
                ranges.push((lo, lo));
            }
        }
        Ok(Set { ranges, negated })
    }
}

/// Compiles the tree into `prog` (and its sets into `sets`).
struct Compiler {
    prog: Vec<Inst>,
    sets: Vec<Set>,
}

impl Compiler {
    fn emit(&mut self, i: Inst) -> Result<usize, ()> {
        if self.prog.len() >= MAX_PROGRAM {
            return Err(());
        }
        self.prog.push(i);
        Ok(self.prog.len() - 1)
    }

    fn node(&mut self, n: &Node) -> Result<(), ()> {
        match n {
            Node::Set(s) => {
                self.sets.push(s.clone());
                self.emit(Inst::Char(self.sets.len() - 1))?;
            }
            Node::Start => {
                self.emit(Inst::Start)?;
            }
            Node::End => {
                self.emit(Inst::End)?;
            }
            Node::Alt(branches) => {
                let mut jumps = Vec::new();
                for (i, seq) in branches.iter().enumerate() {
                    let split = if i + 1 < branches.len() {
                        Some(self.emit(Inst::Split(0, 0))?)
                    } else {
                        None
                    };
                    for n in seq {
                        self.node(n)?;
                    }
                    if let Some(s) = split {
                        jumps.push(self.emit(Inst::Jmp(0))?);
                        let next = self.prog.len();
                        self.prog[s] = Inst::Split(s + 1, next);
                    }
                }
                let end = self.prog.len();
                for j in jumps {
                    self.prog[j] = Inst::Jmp(end);
                }
            }
            Node::Repeat { node, min, max } => {
                for _ in 0..*min {
                    self.node(node)?;
                }
                match max {
                    None => {
                        let split = self.emit(Inst::Split(0, 0))?;
                        self.node(node)?;
                        self.emit(Inst::Jmp(split))?;
                        let end = self.prog.len();
                        self.prog[split] = Inst::Split(split + 1, end);
                    }
                    Some(max) => {
                        let mut splits = Vec::new();
                        for _ in *min..*max {
                            splits.push(self.emit(Inst::Split(0, 0))?);
                            self.node(node)?;
                        }
                        let end = self.prog.len();
                        for s in splits {
                            self.prog[s] = Inst::Split(s + 1, end);
                        }
                    }
                }
            }
        }
        Ok(())
    }
}

impl Regex {
    /// Compiles `pattern` (module docs for what is taken).
    pub fn new(pattern: &str) -> Result<Regex, RegexError> {
        let mut p = Parser {
            chars: pattern.chars().collect(),
            pos: 0,
            pattern,
        };
        let tree = p.alternation()?;
        if p.pos != p.chars.len() {
            return p.err("a ) has no (");
        }
        let mut c = Compiler {
            prog: Vec::new(),
            sets: Vec::new(),
        };
        if c.node(&tree).and_then(|_| c.emit(Inst::Match)).is_err() {
            return p.err("the pattern is too large");
        }
        Ok(Regex {
            source: pattern.into(),
            prog: c.prog,
            sets: c.sets,
        })
    }

    /// The pattern as given.
    pub fn as_str(&self) -> &str {
        &self.source
    }

    /// Whether the pattern matches anywhere in `text` (`std::regex_search`).
    pub fn is_match(&self, text: &str) -> bool {
        let chars: Vec<char> = text.chars().collect();
        let n = self.prog.len();
        let mut current: Vec<usize> = Vec::with_capacity(n);
        let mut next: Vec<usize> = Vec::with_capacity(n);
        let mut seen = vec![usize::MAX; n];
        for pos in 0..=chars.len() {
            // A search: a new thread starts at every position.
            if self.add(&mut current, &mut seen, 0, pos, chars.len()) {
                return true;
            }
            let Some(&c) = chars.get(pos) else {
                break;
            };
            next.clear();
            for &pc in &current {
                if let Inst::Char(s) = self.prog[pc] {
                    if self.sets[s].contains(c)
                        && self.add(&mut next, &mut seen, pc + 1, pos + 1, chars.len())
                    {
                        return true;
                    }
                }
            }
            std::mem::swap(&mut current, &mut next);
        }
        false
    }

    /// Adds thread `pc` at position `pos` and everything it reaches without reading
    /// (`seen[pc] == pos` marks those added at this position); true when one matches.
    fn add(
        &self,
        list: &mut Vec<usize>,
        seen: &mut [usize],
        pc: usize,
        pos: usize,
        len: usize,
    ) -> bool {
        if seen[pc] == pos {
            return false;
        }
        seen[pc] = pos;
        match self.prog[pc] {
            Inst::Match => true,
            Inst::Jmp(t) => self.add(list, seen, t, pos, len),
            Inst::Split(a, b) => {
                self.add(list, seen, a, pos, len) || self.add(list, seen, b, pos, len)
            }
            Inst::Start => pos == 0 && self.add(list, seen, pc + 1, pos, len),
            Inst::End => pos == len && self.add(list, seen, pc + 1, pos, len),
            Inst::Char(_) => {
                list.push(pc);
                false
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(p: &str, s: &str) -> bool {
        Regex::new(p).unwrap_or_else(|e| panic!("{e}")).is_match(s)
    }

    #[test]
    fn searches_like_std_regex_search() {
        let yes = [
            ("attn_q", "blk.0.attn_q.weight"),
            ("attn_v", "blk.12.attn_v.weight"),
            ("blk\\.1[0-9]\\.ffn_down", "blk.13.ffn_down.weight"),
            ("blk\\.(0|1|2)\\.", "blk.2.ffn_up.weight"),
            ("^output\\.weight$", "output.weight"),
            ("ffn_(up|gate)_exps", "blk.3.ffn_gate_exps.weight"),
            ("blk\\.\\d+\\.attn_k", "blk.31.attn_k.weight"),
            ("blk\\.[0-3]\\.", "blk.3.attn_k.weight"),
            ("blk\\.[^0]\\.", "blk.3.attn_k.weight"),
            ("\\.([4-9]|1[0-5])\\.ffn", "blk.15.ffn_down.weight"),
            ("a.c", "xxabcxx"),
            ("ab*c", "ac"),
            ("ab+c", "abbbc"),
            ("ab?c", "abc"),
            ("a{2,3}", "caaad"),
            ("(?:ab){2}", "xababx"),
            ("token_embd", "token_embd.weight"),
            ("", "anything"),
            ("a|", "zzz"),
            ("[\\d.]+$", "blk.0"),
            ("a*?b", "aab"),
            ("(a*)*b", "aaab"),
        ];
        for (p, s) in yes {
            assert!(m(p, s), "{p:?} should match {s:?}");
        }
        let no = [
            ("attn_q", "blk.0.attn_k.weight"),
            ("^attn", "blk.0.attn_k.weight"),
            ("weight$", "blk.0.attn_k.weight.x"),
            ("blk\\.1[0-9]\\.ffn_down", "blk.1.ffn_down.weight"),
            ("blk\\.[^0-2]\\.", "blk.1.ffn_down.weight"),
            ("blk.1.", "blk.2.ffn_down"),
            ("ab+c", "ac"),
            ("a{2}b", "ab"),
            ("a{2,3}b", "ab"),
            ("\\d", "abc"),
            ("[]", "abc"),
            ("x.y", "x\ny"),
        ];
        for (p, s) in no {
            assert!(!m(p, s), "{p:?} should not match {s:?}");
        }
        // The classic exponential case stays quick.
        let long = "a".repeat(64);
        assert!(!m("(a|aa)*(a|aa)*(a|aa)*b", &long));
    }

    #[test]
    fn unsupported_and_broken_patterns_are_refused() {
        for (p, why) in [
            ("attn_(q", "not closed"),
            ("attn_q)", "has no ("),
            ("[abc", "not closed"),
            ("*a", "nothing to repeat"),
            ("a**", "nothing to repeat"),
            ("(?=a)", "lookahead"),
            ("\\1", "not supported"),
            ("\\bq", "not supported"),
            ("a\\", "lone"),
            ("a{3,1}", "backwards"),
            ("[z-a]", "backwards"),
            ("a{1", "does not start a count"),
            ("a{99999}", "too large"),
            ("^*", "follows ^"),
        ] {
            let e = Regex::new(p).unwrap_err();
            assert!(e.to_string().contains(why), "{p:?}: {e}");
            assert!(e.to_string().contains(p), "{e}");
        }
    }
}
