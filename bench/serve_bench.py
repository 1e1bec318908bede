#!/usr/bin/env python3
"""Load bench of a running `dayzero serve`, shaped like `vllm bench serve`: for each concurrency
(default 1, 8 and 32) it sends --num-prompts streamed completion requests with at most that many
in flight (`stream_options.include_usage`, `ignore_eos`, so every request generates --max-tokens
tokens), and prints vLLM's result block: requests/s, output and total tokens/s, time to first token,
time per output token and inter-token latency (mean, median = p50, p99). The tokens are counted
from each stream's usage chunk, as vllm bench serve counts them. Standard library only.
  python3 bench/serve_bench.py --port 8000 [--concurrency 1,8,32] [--num-prompts 64]
                               [--max-tokens 16] [--input-words 24] [--host 127.0.0.1]
Exit 1 when any request failed or came back incomplete (no usage chunk, or fewer tokens)."""
import argparse
import concurrent.futures as cf
import http.client
import json
import statistics
import threading
import time


def one(host, port, prompt, max_tokens):
    """One streamed request: (ttft, [inter-token gaps], latency, prompt tokens, output tokens, error)."""
    body = json.dumps({"prompt": prompt, "max_tokens": max_tokens, "stream": True, "ignore_eos": True,
                       "stream_options": {"include_usage": True}})
    t0 = time.perf_counter()
    conn = http.client.HTTPConnection(host, port, timeout=300)
    try:
        conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
        r = conn.getresponse()
        if r.status != 200:
            return None, [], 0, 0, 0, f"HTTP {r.status}: {r.read()[:200]!r}"
        ttft, last, gaps, usage, done = None, None, [], None, False
        while True:
            line = r.readline()
            if not line:
                break
            line = line.strip()
            if not line.startswith(b"data: "):
                continue  # blank separators and SSE comments (keep-alives)
            data = line[6:]
            if data == b"[DONE]":
                done = True
                break
            chunk = json.loads(data)
            if "error" in chunk:
                return None, [], 0, 0, 0, chunk["error"].get("message", "error event")
            now = time.perf_counter()
            if chunk.get("usage"):
                usage = chunk["usage"]
            if chunk.get("choices") and chunk["choices"][0].get("text"):
                if ttft is None:
                    ttft = now - t0
                else:
                    gaps.append(now - last)
                last = now
        latency = time.perf_counter() - t0
        if not done or usage is None or usage["completion_tokens"] != max_tokens:
            return None, [], 0, 0, 0, f"incomplete (done {done}, usage {usage})"
        return ttft if ttft is not None else latency, gaps, latency, usage["prompt_tokens"], usage["completion_tokens"], None
    except Exception as e:  # counted, not raised: the bench reports every failure
        return None, [], 0, 0, 0, repr(e)
    finally:
        conn.close()


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100 * len(xs)))] if xs else float("nan")


def run(host, port, concurrency, num_prompts, max_tokens, input_words):
    words = ("the quick brown fox jumps over a lazy dog while seven wizards quietly judge "
             "boxing matches in the old town square").split()
    prompts = [" ".join(words[(i + k) % len(words)] for k in range(input_words)) + f" ({i})" for i in range(num_prompts)]
    sem = threading.Semaphore(concurrency)

    def task(p):
        with sem:
            return one(host, port, p, max_tokens)

    t0 = time.perf_counter()
    with cf.ThreadPoolExecutor(concurrency) as ex:
        results = list(ex.map(task, prompts))
    wall = time.perf_counter() - t0
    ok = [r for r in results if r[5] is None]
    errors = [r[5] for r in results if r[5] is not None]
    n_in = sum(r[3] for r in ok)
    n_out = sum(r[4] for r in ok)
    ttft = [r[0] * 1e3 for r in ok]
    itl = [g * 1e3 for r in ok for g in r[1]]
    tpot = [(r[2] - r[0]) / (r[4] - 1) * 1e3 for r in ok if r[4] > 1]
    mean = lambda xs: statistics.fmean(xs) if xs else float("nan")
    line = lambda name, value: print(f"{name:<40}{value}")
    print("{s:{c}^{n}}".format(s=" Serving Benchmark Result ", n=50, c="="))
    line("Successful requests:", len(ok))
    line("Failed requests:", len(errors))
    line("Maximum request concurrency:", concurrency)
    line("Benchmark duration (s):", f"{wall:.2f}")
    line("Total input tokens:", n_in)
    line("Total generated tokens:", n_out)
    line("Request throughput (req/s):", f"{len(ok) / wall:.2f}")
    line("Output token throughput (tok/s):", f"{n_out / wall:.2f}")
    line("Total Token throughput (tok/s):", f"{(n_in + n_out) / wall:.2f}")
    for title, name, xs in [("Time to First Token", "TTFT", ttft),
                            ("Time per Output Token (excl. 1st token)", "TPOT", tpot),
                            ("Inter-token Latency", "ITL", itl)]:
        print("{s:{c}^{n}}".format(s=title, n=50, c="-"))
        line(f"Mean {name} (ms):", f"{mean(xs):.2f}")
        line(f"Median {name} (ms):", f"{pct(xs, 50):.2f}")
        line(f"P99 {name} (ms):", f"{pct(xs, 99):.2f}")
    print("=" * 50)
    for e in errors[:5]:
        print("  error:", e)
    return len(errors)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--concurrency", default="1,8,32", help="comma-separated maximum requests in flight")
    ap.add_argument("--num-prompts", type=int, default=64)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--input-words", type=int, default=24)
    a = ap.parse_args()
    failed = 0
    for c in [int(x) for x in a.concurrency.split(",")]:
        failed += run(a.host, a.port, c, a.num_prompts, a.max_tokens, a.input_words)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
