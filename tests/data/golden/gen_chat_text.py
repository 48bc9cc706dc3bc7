#!/usr/bin/env python3
"""Record the prompt text llama.cpp's built-in chat templates write (llm_chat_apply_template).

Usage: python3 gen_chat_text.py OUT.jsonl
Uses the installed llama_cpp package (llama-cpp-python 0.3.36): `llama_chat_apply_template(tmpl,
messages, add_ass=True)`, which takes `tmpl` as a built-in name or, failing that, detects the
format in a template text (llm_chat_detect_template) and writes it with the built-in formatter.
Sources: every name below, and every template text in ../chat_templates/*.jinja (the models'
own templates). Output: one JSON object per line, {"source": NAME or "file:F.jinja",
"messages": [[role, content], ...], "text": the prompt}.
"""
import ctypes
import json
import os
import sys

import llama_cpp

HERE = os.path.dirname(os.path.abspath(__file__))
TEMPLATES = os.path.join(HERE, "..", "chat_templates")

NAMES = ["deepseek2", "deepseek3", "chatglm4", "kimi-k2", "gpt-oss"]
CONVERSATIONS = [
    [["system", "Be brief."], ["user", "Hi there"]],
    [["user", "Hi there"]],
    # white space is kept as it is
    [["system", " padded \n"], ["user", "\tpadded user \n"]],
    [["system", "Be brief."], ["user", "Hi"], ["assistant", "Hello."], ["user", "Capital of France?"]],
    [["user", "Hi"], ["assistant", " Hello. "], ["user", "Capital of France?"]],
]
# harmony keeps the developer's role: its sources get these too
HARMONY_CONVERSATIONS = [
    [["developer", "Answer in French."], ["user", "Hi there"]],
    [["system", "Be brief."], ["developer", "Answer in French."], ["user", "Hi"],
     ["assistant", "Bonjour."], ["user", "Capital of France?"]],
]
BUF_SIZE = 1 << 16


def apply(tmpl, messages):
    arr = (llama_cpp.llama_chat_message * len(messages))()
    keep = []
    for i, (role, content) in enumerate(messages):
        r, c = role.encode(), content.encode()
        keep += [r, c]
        arr[i].role = r
        arr[i].content = c
    buf = ctypes.create_string_buffer(BUF_SIZE)
    n = llama_cpp.llama_chat_apply_template(tmpl, arr, len(messages), True, buf, BUF_SIZE)
    if n < 0 or n > BUF_SIZE:
        raise SystemExit(f"llama_chat_apply_template failed ({n})")
    return buf.raw[:n].decode("utf-8")


def main():
    sources = [(name, name.encode()) for name in NAMES]
    for f in sorted(os.listdir(TEMPLATES)):
        with open(os.path.join(TEMPLATES, f), "rb") as fh:
            sources.append(("file:" + f, fh.read()))
    with open(sys.argv[1], "w", encoding="utf-8") as out:
        for source, tmpl in sources:
            extra = HARMONY_CONVERSATIONS if "gpt-oss" in source else []
            for messages in CONVERSATIONS + extra:
                line = {"source": source, "messages": messages, "text": apply(tmpl, messages)}
                out.write(json.dumps(line, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
