#!/usr/bin/env python3
"""A bounded load test for an OpenAI-compatible server (locus serve or llama-server).

CLIENTS threads share REQUESTS streamed completions of MAX_TOKENS tokens each (ignore_eos, so
every request generates exactly that many), and the run prints one JSON line: requests,
failures, time to first token (p50, p99), generated tokens, wall time, aggregate tokens/s.
Standard library only.

    tools/serve/load.py --url http://127.0.0.1:8080 --clients 16 --requests 48 --max-tokens 32
"""
import argparse
import http.client
import json
import threading
import time
import urllib.parse

PROMPTS = [
    "Write a short story about a lighthouse keeper.",
    "Explain how a refrigerator works, step by step.",
    "List ten uses for a paperclip and say why each works.",
    "Describe the water cycle to a ten-year-old.",
    "What makes a good cup of coffee? Be specific.",
    "Summarise the plot of a detective novel you invent.",
    "Give advice to someone learning to play the piano.",
    "Compare trains and planes for a 500 km trip.",
]


def one(url, prompt, max_tokens, timeout, api_key):
    u = urllib.parse.urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port or 80, timeout=timeout)
    body = json.dumps({
        "prompt": prompt,
        "max_tokens": max_tokens,
        "temperature": 0,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    })
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = "Bearer " + api_key
    t0 = time.monotonic()
    conn.request("POST", "/v1/completions", body, headers)
    r = conn.getresponse()
    if r.status != 200:
        raise RuntimeError(f"status {r.status}: {r.read()[:200]!r}")
    ttft, tokens, done, chunks = None, None, False, 0
    buf = b""
    while True:
        chunk = r.read1(65536) if hasattr(r, "read1") else r.read(1)
        if not chunk:
            break
        buf += chunk
        while b"\n\n" in buf:
            event, buf = buf.split(b"\n\n", 1)
            if not event.startswith(b"data: "):
                continue
            data = event[6:]
            if data == b"[DONE]":
                done = True
                continue
            j = json.loads(data)
            if j.get("choices") and j["choices"][0].get("text"):
                chunks += 1
                if ttft is None:
                    ttft = time.monotonic() - t0
            if j.get("usage"):
                tokens = j["usage"]["completion_tokens"]
    conn.close()
    if not done:
        raise RuntimeError("the stream ended without [DONE]")
    if tokens is None:  # a server that sends no usage chunk: one token per text chunk
        tokens = chunks
    return ttft if ttft is not None else time.monotonic() - t0, tokens


def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(round(p / 100 * (len(v) - 1))))] if v else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", required=True)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--requests", type=int, default=48)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--api-key", default=None)
    a = ap.parse_args()
    lock = threading.Lock()
    next_req = [0]
    ttfts, failures, tokens = [], [], [0]

    def client():
        while True:
            with lock:
                i = next_req[0]
                if i >= a.requests:
                    return
                next_req[0] += 1
            try:
                t, n = one(a.url, PROMPTS[i % len(PROMPTS)] + f" ({i})", a.max_tokens, a.timeout, a.api_key)
                with lock:
                    ttfts.append(t)
                    tokens[0] += n
            except Exception as e:  # every failure is counted and shown
                with lock:
                    failures.append(f"request {i}: {e}")

    t0 = time.monotonic()
    threads = [threading.Thread(target=client) for _ in range(a.clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - t0
    print(json.dumps({
        "requests": a.requests,
        "failed": len(failures),
        "failures": failures[:5],
        "ttft_p50_s": pct(ttfts, 50),
        "ttft_p99_s": pct(ttfts, 99),
        "tokens": tokens[0],
        "wall_s": round(wall, 3),
        "tokens_per_s": round(tokens[0] / wall, 2) if wall > 0 else None,
    }))


if __name__ == "__main__":
    main()
