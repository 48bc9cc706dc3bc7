//! The crate's one JSON codec (RFC 8259; the crate has no JSON dependency): the server's
//! requests and responses, `bench`'s child line and `--json` rows, the string escaping of
//! `topo --json` and `audit --json`, and the integration tests' checks of all of them.
//! Values, a depth cap, exact error positions, and string escaping that never writes
//! invalid JSON.
//!
//! Numbers are kept as `f64` (what every field the API takes needs: counts, probabilities,
//! seeds up to 2^53; byte counts convert exactly below 8 PiB). Objects keep their members in
//! order; a repeated key is an error (the API cannot say which of two `max_tokens` a client
//! meant).

use std::fmt::{self, Write};

/// A parsed JSON value.
#[derive(Clone, Debug, PartialEq)]
pub enum Json {
    Null,
    Bool(bool),
    Num(f64),
    Str(String),
    Arr(Vec<Json>),
    Obj(Vec<(String, Json)>),
}

/// Nesting deeper than this is refused (a hostile body of `[[[[…` cannot exhaust the stack).
pub const MAX_DEPTH: usize = 64;

/// Why a text is not JSON: what was wrong, at which byte offset.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JsonError {
    pub at: usize,
    pub what: &'static str,
}

impl fmt::Display for JsonError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} at byte {}", self.what, self.at)
    }
}

impl std::error::Error for JsonError {}

impl Json {
    /// Parses one JSON text (white space around it allowed, nothing else after it).
    pub fn parse(text: impl AsRef<[u8]>) -> Result<Json, JsonError> {
        let text = text.as_ref();
        let mut p = Parser { s: text, i: 0 };
        p.ws();
        let v = p.value(0)?;
        p.ws();
        if p.i != text.len() {
            return Err(p.err("unexpected text after the JSON value"));
        }
        Ok(v)
    }

    /// Member `key` of an object (`None` for other values or a missing key).
    pub fn get(&self, key: &str) -> Option<&Json> {
        match self {
            Json::Obj(m) => m.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Json::Num(n) => Some(*n),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Json::Str(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_array(&self) -> Option<&[Json]> {
        match self {
            Json::Arr(a) => Some(a),
            _ => None,
        }
    }

    /// The JSON type's name, for messages ("expected a string, got a number").
    pub fn kind(&self) -> &'static str {
        match self {
            Json::Null => "null",
            Json::Bool(_) => "a boolean",
            Json::Num(_) => "a number",
            Json::Str(_) => "a string",
            Json::Arr(_) => "an array",
            Json::Obj(_) => "an object",
        }
    }

    /// An object from `(key, value)` pairs.
    pub fn obj<const N: usize>(members: [(&str, Json); N]) -> Json {
        Json::Obj(
            members
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect(),
        )
    }

    pub fn str(s: impl Into<String>) -> Json {
        Json::Str(s.into())
    }

    pub fn num(n: impl Into<f64>) -> Json {
        Json::Num(n.into())
    }
}

impl From<bool> for Json {
    fn from(b: bool) -> Json {
        Json::Bool(b)
    }
}

impl From<f64> for Json {
    fn from(n: f64) -> Json {
        Json::Num(n)
    }
}

/// Counts and byte sizes: exact up to 2^53.
impl From<u64> for Json {
    fn from(n: u64) -> Json {
        Json::Num(n as f64)
    }
}

impl From<u32> for Json {
    fn from(n: u32) -> Json {
        Json::Num(n.into())
    }
}

impl From<usize> for Json {
    fn from(n: usize) -> Json {
        Json::Num(n as f64)
    }
}

/// `None` is `null`.
impl<T: Into<Json>> From<Option<T>> for Json {
    fn from(v: Option<T>) -> Json {
        v.map_or(Json::Null, Into::into)
    }
}

/// An array of the items.
impl<T: Into<Json>> FromIterator<T> for Json {
    fn from_iter<I: IntoIterator<Item = T>>(items: I) -> Json {
        Json::Arr(items.into_iter().map(Into::into).collect())
    }
}

/// Writes compact JSON. A number that JSON cannot hold (NaN, ±∞) is written as `null`.
impl fmt::Display for Json {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Json::Null => f.write_str("null"),
            Json::Bool(b) => write!(f, "{b}"),
            Json::Num(n) if !n.is_finite() => f.write_str("null"),
            Json::Num(n) if n.fract() == 0.0 && n.abs() < 1e15 => write!(f, "{}", *n as i64),
            Json::Num(n) => write!(f, "{n}"),
            Json::Str(s) => Quoted(s).fmt(f),
            Json::Arr(a) => {
                f.write_char('[')?;
                for (i, v) in a.iter().enumerate() {
                    if i > 0 {
                        f.write_char(',')?;
                    }
                    write!(f, "{v}")?;
                }
                f.write_char(']')
            }
            Json::Obj(m) => {
                f.write_char('{')?;
                for (i, (k, v)) in m.iter().enumerate() {
                    if i > 0 {
                        f.write_char(',')?;
                    }
                    write!(f, "{}:{v}", Quoted(k))?;
                }
                f.write_char('}')
            }
        }
    }
}

/// `s` written as a JSON string literal: quotes, backslashes and control characters escaped
/// (and U+2028/U+2029, which JavaScript once refused in strings). The one escaper: writers that
/// build their text by hand (`topo`, `audit`) use it through `write!`.
pub struct Quoted<'a>(pub &'a str);

impl fmt::Display for Quoted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_char('"')?;
        for c in self.0.chars() {
            match c {
                '"' => f.write_str("\\\"")?,
                '\\' => f.write_str("\\\\")?,
                '\n' => f.write_str("\\n")?,
                '\r' => f.write_str("\\r")?,
                '\t' => f.write_str("\\t")?,
                c if (c as u32) < 0x20 || c == '\u{2028}' || c == '\u{2029}' => {
                    write!(f, "\\u{:04x}", c as u32)?
                }
                c => f.write_char(c)?,
            }
        }
        f.write_char('"')
    }
}

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
}

impl Parser<'_> {
    fn err(&self, what: &'static str) -> JsonError {
        JsonError { at: self.i, what }
    }

    fn ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.s.get(self.i) {
            self.i += 1;
        }
    }

    fn eat(&mut self, lit: &[u8]) -> bool {
        if self.s[self.i..].starts_with(lit) {
            self.i += lit.len();
            true
        } else {
            false
        }
    }

    fn value(&mut self, depth: usize) -> Result<Json, JsonError> {
        if depth >= MAX_DEPTH {
            return Err(self.err("nesting deeper than 64 levels"));
        }
        match self.s.get(self.i) {
            None => Err(self.err("unexpected end of the JSON text")),
            Some(b'{') => self.object(depth),
            Some(b'[') => self.array(depth),
            Some(b'"') => self.string().map(Json::Str),
            Some(b'-' | b'0'..=b'9') => self.number(),
            Some(_) if self.eat(b"true") => Ok(Json::Bool(true)),
            Some(_) if self.eat(b"false") => Ok(Json::Bool(false)),
            Some(_) if self.eat(b"null") => Ok(Json::Null),
            Some(_) => Err(self.err("not a JSON value")),
        }
    }

    fn object(&mut self, depth: usize) -> Result<Json, JsonError> {
        self.i += 1;
        let mut members: Vec<(String, Json)> = Vec::new();
        self.ws();
        if self.eat(b"}") {
            return Ok(Json::Obj(members));
        }
        loop {
            self.ws();
            if self.s.get(self.i) != Some(&b'"') {
                return Err(self.err("expected a member name in quotes"));
            }
            let at = self.i;
            let key = self.string()?;
            if members.iter().any(|(k, _)| *k == key) {
                return Err(JsonError {
                    at,
                    what: "a member name repeated in one object",
                });
            }
            self.ws();
            if !self.eat(b":") {
                return Err(self.err("expected ':' after a member name"));
            }
            self.ws();
            let v = self.value(depth + 1)?;
            members.push((key, v));
            self.ws();
            if self.eat(b",") {
                continue;
            }
            if self.eat(b"}") {
                return Ok(Json::Obj(members));
            }
            return Err(self.err("expected ',' or '}' in an object"));
        }
    }

    fn array(&mut self, depth: usize) -> Result<Json, JsonError> {
        self.i += 1;
        let mut items = Vec::new();
        self.ws();
        if self.eat(b"]") {
            return Ok(Json::Arr(items));
        }
        loop {
            self.ws();
            items.push(self.value(depth + 1)?);
            self.ws();
            if self.eat(b",") {
                continue;
            }
            if self.eat(b"]") {
                return Ok(Json::Arr(items));
            }
            return Err(self.err("expected ',' or ']' in an array"));
        }
    }

    fn number(&mut self) -> Result<Json, JsonError> {
        let start = self.i;
        let digits = |p: &mut Parser| {
            let d0 = p.i;
            while p.s.get(p.i).is_some_and(u8::is_ascii_digit) {
                p.i += 1;
            }
            p.i - d0
        };
        self.eat(b"-");
        let int_at = self.i;
        let n = digits(self);
        if n == 0 || (n > 1 && self.s[int_at] == b'0') {
            return Err(JsonError {
                at: int_at,
                what: "a malformed number",
            });
        }
        if self.eat(b".") && digits(self) == 0 {
            return Err(self.err("a malformed number (no digits after '.')"));
        }
        if matches!(self.s.get(self.i), Some(b'e' | b'E')) {
            self.i += 1;
            if matches!(self.s.get(self.i), Some(b'+' | b'-')) {
                self.i += 1;
            }
            if digits(self) == 0 {
                return Err(self.err("a malformed number (no digits in the exponent)"));
            }
        }
        // ASCII digits, signs, '.', 'e': always UTF-8, always an f64 (maybe ±∞ when huge).
        let text = std::str::from_utf8(&self.s[start..self.i]).unwrap_or("0");
        let v: f64 = text.parse().unwrap_or(f64::NAN);
        if !v.is_finite() {
            return Err(JsonError {
                at: start,
                what: "a number too large for a double",
            });
        }
        Ok(Json::Num(v))
    }

    fn hex4(&mut self) -> Result<u32, JsonError> {
        let h = self
            .s
            .get(self.i..self.i + 4)
            .ok_or(self.err("a \\u escape needs four hex digits"))?;
        let mut v = 0;
        for &b in h {
            let d = (b as char)
                .to_digit(16)
                .ok_or(self.err("a \\u escape needs four hex digits"))?;
            v = v * 16 + d;
        }
        self.i += 4;
        Ok(v)
    }

    fn string(&mut self) -> Result<String, JsonError> {
        self.i += 1;
        let mut out = Vec::new();
        loop {
            let Some(&b) = self.s.get(self.i) else {
                return Err(self.err("a string without its closing quote"));
            };
            match b {
                b'"' => {
                    self.i += 1;
                    break;
                }
                b'\\' => {
                    self.i += 1;
                    let e = self.s.get(self.i).copied();
                    self.i += 1;
                    let c = match e {
                        Some(b'"') => '"',
                        Some(b'\\') => '\\',
                        Some(b'/') => '/',
                        Some(b'b') => '\u{8}',
                        Some(b'f') => '\u{c}',
                        Some(b'n') => '\n',
                        Some(b'r') => '\r',
                        Some(b't') => '\t',
                        Some(b'u') => self.unicode_escape()?,
                        _ => {
                            self.i -= 1;
                            return Err(self.err("an unknown escape in a string"));
                        }
                    };
                    let mut buf = [0u8; 4];
                    out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                }
                0..=0x1f => return Err(self.err("a control character inside a string")),
                _ => {
                    out.push(b);
                    self.i += 1;
                }
            }
        }
        String::from_utf8(out).map_err(|_| self.err("a string that is not valid UTF-8"))
    }

    /// The code point of a `\uXXXX` escape (a surrogate pair as one character).
    fn unicode_escape(&mut self) -> Result<char, JsonError> {
        let hi = self.hex4()?;
        let cp = if (0xd800..0xdc00).contains(&hi) {
            if !self.eat(b"\\u") {
                return Err(self.err("a lone high surrogate in a \\u escape"));
            }
            let lo = self.hex4()?;
            if !(0xdc00..0xe000).contains(&lo) {
                return Err(self.err("a high surrogate without its low surrogate"));
            }
            0x10000 + ((hi - 0xd800) << 10) + (lo - 0xdc00)
        } else {
            hi
        };
        char::from_u32(cp).ok_or(self.err("a lone low surrogate in a \\u escape"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_round_trip_through_text() {
        let text = r#"{"a":[1,-2.5,1e3,true,false,null],"s":"q\"\\\n\u00e9\ud83d\ude00","o":{}}"#;
        let v = Json::parse(text.as_bytes()).unwrap();
        assert_eq!(
            v.get("a").unwrap(),
            &Json::Arr(vec![
                Json::Num(1.0),
                Json::Num(-2.5),
                Json::Num(1000.0),
                Json::Bool(true),
                Json::Bool(false),
                Json::Null
            ])
        );
        assert_eq!(v.get("s").unwrap(), &Json::str("q\"\\\né😀"));
        let again = Json::parse(v.to_string().as_bytes()).unwrap();
        assert_eq!(again, v);
    }

    #[test]
    fn malformed_texts_say_what_and_where() {
        for (text, at) in [
            ("", 0),
            ("{", 1),
            ("{\"a\" 1}", 5),
            ("[1,]", 3),
            ("01", 0),
            ("1.", 2),
            ("\"\\x\"", 2),
            ("\"a", 2),
            ("{\"a\":1,\"a\":2}", 7),
            ("1 2", 2),
            ("\"\\ud800\"", 7),
            ("1e999", 0),
            ("{\"a\":1,}", 7),
            ("[1 2]", 3),
            ("\"\n\"", 1),
            ("[1]x", 3),
        ] {
            let e = Json::parse(text.as_bytes()).unwrap_err();
            assert_eq!(e.at, at, "{text:?}: {e}");
        }
        let deep = "[".repeat(MAX_DEPTH + 1);
        assert!(Json::parse(deep.as_bytes())
            .unwrap_err()
            .what
            .contains("nesting"));
    }

    #[test]
    fn written_strings_escape_every_control_character() {
        let s: String = (0u8..0x20).map(char::from).collect();
        let text = Json::str(s.clone()).to_string();
        assert!(text.bytes().all(|b| b >= 0x20), "{text}");
        assert_eq!(Json::parse(text.as_bytes()).unwrap(), Json::Str(s));
        assert_eq!(Json::Num(f64::NAN).to_string(), "null");
        assert_eq!(Json::Num(3.0).to_string(), "3");
        assert_eq!(Json::Num(0.25).to_string(), "0.25");
    }

    #[test]
    fn quoted_strings_are_escaped() {
        let s = Quoted("a\"b\\c\nd\u{1}é\u{2028}").to_string();
        assert_eq!(s, "\"a\\\"b\\\\c\\nd\\u0001é\\u2028\"");
    }

    #[test]
    fn rust_values_convert_as_json_writes_them() {
        let v = Json::obj([
            ("n", 3u64.into()),
            ("x", (-0.5f64).into()),
            ("none", Option::<u32>::None.into()),
            ("b", true.into()),
            ("a", [1usize, 2].into_iter().collect()),
        ]);
        assert_eq!(
            v.to_string(),
            r#"{"n":3,"x":-0.5,"none":null,"b":true,"a":[1,2]}"#
        );
        assert_eq!(v.get("x").and_then(Json::as_f64), Some(-0.5));
        assert_eq!(
            v.get("a").and_then(Json::as_array).map(<[Json]>::len),
            Some(2)
        );
        assert_eq!(Json::str("s").as_str(), Some("s"));
        assert_eq!(Json::Null.as_str(), None);
    }
}
