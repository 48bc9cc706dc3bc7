#!/usr/bin/env python3
"""Write a vocabulary-only GGUF whose merges join ASCII digits, to show how a pre-tokenizer
groups numbers (SmolLM2's vocabulary has single-digit tokens only, so it cannot).

Usage: PYTHONPATH=<llama.cpp>/gguf-py python3 gen_digit_vocab.py PRE OUT.gguf
Tokens: the 256 characters of GPT-2's byte alphabet in byte order (ids 0..255), then every
two-digit string "00".."99" (ids 256..355), then every three-digit string "000".."999"
(ids 356..1355). Merges, in this rank order: "a b" for each two-digit token, then "ab c" for
each three-digit token. All tokens are normal; no special token ids are set; the
architecture is "llama" (llama-tokenize loads the vocabulary only).
tests/tokenizer_pre.rs builds the same vocabulary in code.
"""
import sys

import gguf


def byte_alphabet():
    """GPT-2's bytes_to_unicode: printable bytes stand for themselves, the others are
    shifted, in byte order, to U+0100, U+0101, ..."""
    printable = list(range(0x21, 0x7F)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    out, shift = [], 0
    for b in range(256):
        if b in printable:
            out.append(chr(b))
        else:
            out.append(chr(0x100 + shift))
            shift += 1
    return out


def main():
    pre, path = sys.argv[1], sys.argv[2]
    digits = "0123456789"
    pairs = [a + b for a in digits for b in digits]
    triples = [p + c for p in pairs for c in digits]
    tokens = byte_alphabet() + pairs + triples
    merges = [f"{p[0]} {p[1]}" for p in pairs] + [f"{t[:2]} {t[2]}" for t in triples]
    w = gguf.GGUFWriter(path, "llama")
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    w.add_token_types([gguf.TokenType.NORMAL] * len(tokens))
    w.add_token_merges(merges)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main()
