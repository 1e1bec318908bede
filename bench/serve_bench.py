#!/usr/bin/env python3
"""Load bench of a running `dayzero serve`: C concurrent clients each send R completion requests
one after another (default 64 x 4), and the bench prints errors, incomplete responses, p50/p99
request latency and generated tokens per second over the wall time. Standard library only.
  python3 bench/serve_bench.py --port 8000 [--clients 64] [--requests 4] [--max-tokens 16]
Exit 1 when any request failed or came back incomplete."""
import argparse
import concurrent.futures as cf
import json
import time
import urllib.request


def one(port, prompt, max_tokens):
    body = json.dumps({"prompt": prompt, "max_tokens": max_tokens}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", data=body,
                                 headers={"Content-Type": "application/json"})
    t0 = time.perf_counter()
    with urllib.request.urlopen(req, timeout=300) as r:
        out = json.loads(r.read())
    choice = out["choices"][0]
    complete = choice["finish_reason"] in ("stop", "length") and out["usage"]["completion_tokens"] == len(choice["token_ids"])
    return time.perf_counter() - t0, out["usage"]["completion_tokens"], complete


def client(port, c, requests, max_tokens):
    results = []
    for i in range(requests):
        try:
            results.append(one(port, f"Client {c} asks question {i}:", max_tokens))
        except Exception as e:  # counted, not raised: the bench reports every failure
            results.append((None, 0, repr(e)))
    return results


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--requests", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=16)
    a = ap.parse_args()
    t0 = time.perf_counter()
    with cf.ThreadPoolExecutor(a.clients) as ex:
        futs = [ex.submit(client, a.port, c, a.requests, a.max_tokens) for c in range(a.clients)]
        results = [r for f in futs for r in f.result()]
    wall = time.perf_counter() - t0
    errors = [r[2] for r in results if r[0] is None]
    incomplete = sum(1 for r in results if r[0] is not None and r[2] is not True)
    lat = sorted(r[0] for r in results if r[0] is not None)
    tokens = sum(r[1] for r in results)
    pct = lambda p: lat[min(len(lat) - 1, int(p / 100 * len(lat)))] if lat else float("nan")
    print(f"serve bench: {a.clients} clients x {a.requests} requests, max_tokens {a.max_tokens}: "
          f"{len(results)} requests, {len(errors)} errors, {incomplete} incomplete")
    print(f"latency p50 {pct(50):.3f} s, p99 {pct(99):.3f} s; {tokens} tokens in {wall:.2f} s = {tokens / wall:.1f} tokens/s")
    for e in errors[:5]:
        print("  error:", e)
    return 1 if errors or incomplete else 0


if __name__ == "__main__":
    raise SystemExit(main())
