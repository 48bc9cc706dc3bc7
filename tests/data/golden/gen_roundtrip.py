#!/usr/bin/env python3
"""Record whether llama.cpp's detokenize(tokenize(text)) == text for each corpus file.

Usage: python3 gen_roundtrip.py MODEL.gguf OUT.txt
Uses the installed llama_cpp package (llama-cpp-python 0.3.36), vocab_only=True.
  ids  = llm.tokenize(text, add_bos=False, special=True)   # parse_special=True, no BOS/EOS
  back = llm.detokenize(ids, special=True)                 # special tokens rendered as text
Output lines: "<file>\t1" if back == text (byte-exact), else "<file>\t0".
BOS is deliberately not added: a BOS would be rendered as text (e.g. "<bos>")
when special=True, which is not what a round-trip test wants.
"""
import os
import sys

from llama_cpp import Llama

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, "..", "tokenizer", "corpus")


def main():
    model, out = sys.argv[1], sys.argv[2]
    llm = Llama(model_path=model, vocab_only=True, verbose=False)
    lines = []
    for name in sorted(os.listdir(CORPUS)):
        with open(os.path.join(CORPUS, name), "rb") as f:
            text = f.read()
        ids = llm.tokenize(text, add_bos=False, special=True)
        back = llm.detokenize(ids, special=True)
        ok = back == text
        lines.append("%s\t%d" % (name, 1 if ok else 0))
        if not ok:
            sys.stderr.write("MISMATCH %s\n  in : %r\n  out: %r\n" % (name, text[:200], back[:200]))
    with open(out, "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
