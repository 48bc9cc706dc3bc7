#!/usr/bin/env python3
"""Record what a model's own Jinja chat template renders, for templates llama.cpp has no
built-in for (Gemma 4).

Usage: python3 gen_chat_jinja.py OUT.jsonl
Renders every template in ../chat_templates_jinja/ with Python's jinja2 (3.1.6) configured as
Hugging Face's `apply_chat_template` and llama.cpp's Jinja runtime configure it (trim_blocks,
lstrip_blocks, loop controls), `add_generation_prompt=True`, no tools, thinking off, and
`bos_token=""`: locus writes no BOS into the text (the tokenizer adds it). Output: one JSON
object per line, {"source": "file:F.jinja", "messages": [[role, content], ...], "text": ...}.
The conversations hold ASCII white space only: jinja2's `trim` strips Unicode white space,
llama.cpp's runtime C's `isspace`, and locus follows llama.cpp.
"""
import json
import os
import sys

from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = os.path.dirname(os.path.abspath(__file__))
TEMPLATES = os.path.join(HERE, "..", "chat_templates_jinja")

CONVERSATIONS = [
    [["system", "Be brief."], ["user", "Hi there"]],
    [["user", "Hi there"]],
    # white space is trimmed
    [["system", " padded \n"], ["user", "\tpadded user \n"]],
    [["system", "Be brief."], ["user", "Hi"], ["assistant", "Hello."], ["user", "Capital of France?"]],
    [["user", "Hi"], ["assistant", " Hello. "], ["user", "Capital of France?"]],
    # a developer message leads as a system one; an assistant's earlier reasoning is dropped
    [["developer", "Answer in French."], ["user", "Hi"],
     ["assistant", "<|channel>thought\nThe user greets.<channel|>Bonjour."], ["user", "Capital?"]],
]


def raise_exception(message):
    raise RuntimeError(message)


def main():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.globals["raise_exception"] = raise_exception
    with open(sys.argv[1], "w", encoding="utf-8") as out:
        for f in sorted(os.listdir(TEMPLATES)):
            with open(os.path.join(TEMPLATES, f), encoding="utf-8") as fh:
                template = env.from_string(fh.read())
            for messages in CONVERSATIONS:
                msgs = [{"role": r, "content": c} for r, c in messages]
                text = template.render(messages=msgs, add_generation_prompt=True, bos_token="")
                line = {"source": "file:" + f, "messages": messages, "text": text}
                out.write(json.dumps(line, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
