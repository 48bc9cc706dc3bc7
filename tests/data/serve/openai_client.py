"""OpenAI's Python client against `locus serve` (tests/serve.rs runs this).

Usage: openai_client.py BASE_URL QUESTION. Prints `chat: TEXT`, `stream: TEXT` and
`completion: TEXT` lines; any error ends it with a traceback and a non-zero status.
"""
import sys

from openai import OpenAI

base, question = sys.argv[1], sys.argv[2]
client = OpenAI(base_url=base, api_key="k", max_retries=0, timeout=120)
model = client.models.list().data[0].id
messages = [{"role": "user", "content": question}]

r = client.chat.completions.create(model=model, messages=messages, max_tokens=64, temperature=0)
assert r.choices[0].finish_reason == "stop", r
assert r.usage.completion_tokens > 0, r
print(f"chat: {r.choices[0].message.content}")

parts = []
for chunk in client.chat.completions.create(
    model=model, messages=messages, max_tokens=64, temperature=0, stream=True
):
    if chunk.choices and chunk.choices[0].delta.content:
        parts.append(chunk.choices[0].delta.content)
print(f"stream: {''.join(parts)}")

c = client.completions.create(model=model, prompt="The capital of Germany is", max_tokens=8, temperature=0)
assert c.choices[0].text, c
print(f"completion: {c.choices[0].text}")
