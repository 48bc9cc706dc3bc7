//! From tokens back to bytes: each token's piece, whole-sequence detokenization, and a stream
//! that only ever emits complete UTF-8.
//!
//! Pieces follow llama.cpp's `token_to_piece`: control and unknown tokens render as their text
//! only when `special` is asked for (otherwise empty); user-defined tokens render as their text;
//! normal tokens are mapped back from GPT-2's byte alphabet (BPE) or have ▁ turned into spaces
//! (SPM); byte tokens `<0xNN>` render as that byte. Detokenization follows `llama_detokenize`
//! with `remove_special = false`: it strips one leading space from the first piece when the
//! vocabulary adds a space prefix, and applies the `clean_spaces` passes when the vocabulary
//! asks for them.

use super::unicode::{decode_lenient, encode_utf8, ByteAlphabet};
use super::vocab::{Attr, Kind, Vocab};

/// SentencePiece's visible space, U+2581 ▁.
pub const SPM_SPACE: &str = "\u{2581}";

/// Every token's piece as rendered with `special = true`, stored back to back.
pub struct Pieces {
    buf: Vec<u8>,
    end: Vec<usize>,
}

impl Pieces {
    pub fn new(vocab: &Vocab) -> Pieces {
        let alphabet = ByteAlphabet::new();
        let mut buf = Vec::new();
        let mut end = Vec::with_capacity(vocab.n_tokens());
        let mut cps = Vec::new();
        for id in 0..vocab.n_tokens() as u32 {
            render(vocab, &alphabet, id, &mut cps, &mut buf);
            end.push(buf.len());
        }
        Pieces { buf, end }
    }

    /// The piece of `id` with `special = true`; empty past the vocabulary.
    pub fn get(&self, id: u32) -> &[u8] {
        let i = id as usize;
        if i >= self.end.len() {
            return &[];
        }
        let start = if i == 0 { 0 } else { self.end[i - 1] };
        &self.buf[start..self.end[i]]
    }
}

/// llama.cpp's `token_to_piece` for one token with `special = true`, appended to `out`.
fn render(vocab: &Vocab, alphabet: &ByteAlphabet, id: u32, cps: &mut Vec<u32>, out: &mut Vec<u8>) {
    let attr = vocab.attr(id);
    let text = vocab.text(id);
    if attr.has(Attr::UNKNOWN.or(Attr::CONTROL).or(Attr::USER_DEFINED)) {
        out.extend_from_slice(text);
    } else if attr.has(Attr::NORMAL) {
        match vocab.kind {
            Kind::Spm => replace_all(text, SPM_SPACE.as_bytes(), b" ", out),
            Kind::Bpe => decode_byte_level(alphabet, text, cps, out),
        }
    } else if attr.has(Attr::BYTE) {
        out.push(byte_token_value(text));
    }
}

/// The byte of a `<0xNN>` token: `strtol` of the two characters after `<0x` (0 if they are
/// not hex), as llama.cpp's `token_to_byte`.
fn byte_token_value(text: &[u8]) -> u8 {
    const HEX_START: usize = 3;
    const HEX_LEN: usize = 2;
    const RADIX: u32 = 16;
    let digits = text.get(HEX_START..).unwrap_or(&[]);
    let mut value = 0u32;
    for &d in digits.iter().take(HEX_LEN) {
        match (d as char).to_digit(RADIX) {
            Some(v) => value = value * RADIX + v,
            None => break,
        }
    }
    value as u8
}

/// llama.cpp's `llama_decode_text`: maps each character back through the byte alphabet; a
/// character outside it becomes `[UNK_BYTE_0x<hex of its UTF-8>` + the whole text + `]`.
fn decode_byte_level(alphabet: &ByteAlphabet, text: &[u8], cps: &mut Vec<u32>, out: &mut Vec<u8>) {
    cps.clear();
    decode_lenient(text, cps);
    let mut utf8 = Vec::new();
    for &cp in cps.iter() {
        match alphabet.byte_of(cp) {
            Some(b) => out.push(b),
            None => {
                utf8.clear();
                encode_utf8(cp, &mut utf8);
                out.extend_from_slice(b"[UNK_BYTE_0x");
                for b in &utf8 {
                    out.extend_from_slice(format!("{b:02x}").as_bytes());
                }
                out.extend_from_slice(text);
                out.push(b']');
            }
        }
    }
}

fn replace_all(text: &[u8], from: &[u8], to: &[u8], out: &mut Vec<u8>) {
    let mut at = 0;
    while at < text.len() {
        if text[at..].starts_with(from) {
            out.extend_from_slice(to);
            at += from.len();
        } else {
            out.push(text[at]);
            at += 1;
        }
    }
}

/// `llama_detokenize(tokens, remove_special = false, unparse_special = special)`.
pub fn detokenize(vocab: &Vocab, pieces: &Pieces, ids: &[u32], special: bool) -> Vec<u8> {
    let mut text = Vec::new();
    let mut remove_space = vocab.flags.add_space_prefix;
    for &id in ids {
        let mut piece = piece(vocab, pieces, id, special);
        if remove_space && piece.first() == Some(&b' ') {
            piece = &piece[1..];
        }
        remove_space = false;
        text.extend_from_slice(piece);
    }
    if vocab.flags.clean_spaces {
        clean_spaces(&mut text);
    }
    text
}

/// The piece of one token: empty for control and unknown tokens unless `special`.
pub fn piece<'p>(vocab: &Vocab, pieces: &'p Pieces, id: u32, special: bool) -> &'p [u8] {
    if !special && vocab.attr(id).has(Attr::UNKNOWN.or(Attr::CONTROL)) {
        return &[];
    }
    pieces.get(id)
}

/// llama.cpp's three `clean_spaces` passes, in place, with its exact index arithmetic (the
/// second pass overwrites a byte it later reads, and that is reproduced).
fn clean_spaces(text: &mut Vec<u8>) {
    // First pass: " ?", " !", " .", " ," lose the space.
    let n = text.len();
    let mut total = usize::from(n > 0);
    for i in 1..n {
        let x = text[i];
        if text[i - 1] == b' ' && matches!(x, b'?' | b'!' | b'.' | b',') {
            total -= 1;
        }
        text[total] = x;
        total += 1;
    }
    text.truncate(total);

    // Second pass: " ' " loses both spaces.
    let n = text.len();
    let mut total = usize::from(n > 0);
    let mut i = 1;
    while i < n {
        let x = text[i];
        if x == b'\'' && i + 1 < n && text[i - 1] == b' ' && text[i + 1] == b' ' {
            total -= 1;
            i += 1;
            text[i] = 0;
        }
        text[total] = x;
        total += 1;
        i += 1;
    }
    text.truncate(total);

    // Third pass: " 's", " 'm", " 're", " 've" lose the space.
    let n = text.len();
    let mut total = usize::from(n > 0);
    for i in 1..n {
        let x = text[i];
        if text[i - 1] == b' ' && x == b'\'' && i + 1 < n {
            let x1 = text[i + 1];
            let x2 = text.get(i + 2).copied().filter(|_| i + 2 < n);
            let joins = matches!(x1, b's' | b'm')
                || matches!((x1, x2), (b'r', Some(b'e')) | (b'v', Some(b'e')));
            if joins {
                total -= 1;
            }
        }
        text[total] = x;
        total += 1;
    }
    text.truncate(total);
}

/// Streams valid UTF-8 out of token pieces: an incomplete multi-byte sequence at the end of a
/// piece is held back until the next piece completes it. Bytes that can never form valid
/// UTF-8 come out as U+FFFD, so the output is always valid.
#[derive(Default, Debug)]
pub struct Utf8Stream {
    pending: Vec<u8>,
}

impl Utf8Stream {
    pub fn new() -> Utf8Stream {
        Utf8Stream::default()
    }

    /// Adds `bytes` and returns every complete character now available.
    pub fn push(&mut self, bytes: &[u8]) -> String {
        self.pending.extend_from_slice(bytes);
        let mut out = String::new();
        let mut rest: &[u8] = &self.pending;
        loop {
            match std::str::from_utf8(rest) {
                Ok(s) => {
                    out.push_str(s);
                    rest = &[];
                    break;
                }
                Err(e) => {
                    let (good, bad) = rest.split_at(e.valid_up_to());
                    // `valid_up_to` promises that `good` is valid UTF-8.
                    out.push_str(std::str::from_utf8(good).unwrap_or_default());
                    match e.error_len() {
                        Some(n) => {
                            out.push(char::REPLACEMENT_CHARACTER);
                            rest = &bad[n..];
                        }
                        None => {
                            rest = bad; // incomplete: wait for more bytes
                            break;
                        }
                    }
                }
            }
        }
        let keep = rest.len();
        let drop = self.pending.len() - keep;
        self.pending.drain(..drop);
        out
    }

    /// Ends the stream: bytes still held back (an incomplete sequence) become U+FFFD.
    pub fn finish(self) -> String {
        String::from_utf8_lossy(&self.pending).into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clean_spaces_matches_llama_cpp_passes() {
        let run = |s: &str| {
            let mut v = s.as_bytes().to_vec();
            clean_spaces(&mut v);
            String::from_utf8(v).unwrap()
        };
        assert_eq!(run("Hello , world !"), "Hello, world!");
        assert_eq!(run("it ' s"), "it's");
        assert_eq!(run("they 're here , I 'm sure"), "they're here, I'm sure");
        assert_eq!(run("don 't"), "don 't");
        assert_eq!(run(""), "");
    }

    #[test]
    fn byte_token_values() {
        assert_eq!(byte_token_value(b"<0x0A>"), b'\n');
        assert_eq!(byte_token_value(b"<0xFF>"), 0xFF);
        assert_eq!(byte_token_value(b"<0xZZ>"), 0);
    }

    #[test]
    fn stream_holds_back_split_characters() {
        let mut s = Utf8Stream::new();
        let euro = "€".as_bytes();
        assert_eq!(s.push(&euro[..1]), "");
        assert_eq!(s.push(&euro[1..2]), "");
        assert_eq!(s.push(&[euro[2], b'!']), "€!");
        assert_eq!(s.push(b"\xFFok"), "\u{FFFD}ok");
        assert_eq!(s.push(&euro[..2]), "");
        assert_eq!(s.finish(), "\u{FFFD}");
    }
}
