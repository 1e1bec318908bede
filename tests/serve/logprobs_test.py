#!/usr/bin/env python3
"""The service's log-probabilities are the batch run's: for a tiny generated llama served under tp2
and under pp2 (2 ranks each), the log-probabilities `/v1/completions` returns with echo and logprobs
(prompt tokens and generated ones, lm-eval's request shape included) and `/v1/chat/completions`
returns with logprobs equal, bit for bit, the log-softmax of the logits `dayzero run` dumps for the
same ids (outputs/<id>/logits_last of the prompt and of each of its prefixes, decode rows of
activations/<id>/decode/logits), computed in the order of operations serve/logprobs.h states.
Usage: logprobs_test.py DAYZERO"""
import math
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

import h5py

import serve_test as st

HERE = os.path.dirname(os.path.abspath(__file__))
IDS = [5, 17, 33, 2, 90, 41, 7, 12]  # 8 prompt tokens: lm_head rows of one pass equal single rows up to 16
GEN = 4
CHAT = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Name a colour."}]


def log_softmax_at(row, ids):
    """serve/logprobs.h's order: m = max, s = sum in id order of exp(x - m), x - (m + log s)."""
    xs = [float(x) for x in row]
    m = max(xs)
    s = 0.0
    for x in xs:
        s += math.exp(x - m)
    lse = m + math.log(s)
    return [xs[i] - lse for i in ids]


def log_softmax_reversed(row, ids):
    """The same sum taken from the last id down: the negative control of the bitwise comparison."""
    xs = [float(x) for x in row]
    m = max(xs)
    s = 0.0
    for x in reversed(xs):
        s += math.exp(x - m)
    return [xs[i] - (m + math.log(s)) for i in ids]


def read_outputs(run_dir):
    """Every rank file's outputs and decode logits, by prompt id."""
    out = {}
    for name in sorted(os.listdir(run_dir)):
        if not (name.startswith("rank-") and name.endswith(".h5")):
            continue
        with h5py.File(os.path.join(run_dir, name), "r") as f:
            for pid in f.get("outputs", {}):
                g = f["outputs"][pid]
                e = out.setdefault(pid, {})
                e["generated"] = [int(x) for x in g["generated_ids"][()]]
                e["logits_last"] = g["logits_last"][()]
            for pid in f.get("activations", {}):
                if "decode" in f["activations"][pid] and "logits" in f["activations"][pid]["decode"]:
                    out.setdefault(pid, {})["decode_logits"] = f["activations"][pid]["decode"]["logits"][()]
    return out


class Layout:
    """A model, a `dayzero run` of the prompt, its prefixes and the chat, and a server, under one plan."""

    def __init__(self, d, parallel):
        subprocess.run([st.DAYZERO, "make-model", "--family", "llama", "--out", d + "/model", "--dtype", "float32"],
                       check=True, capture_output=True, timeout=120)
        shutil.copy(os.path.join(HERE, "chat_template.jinja"), d + "/model/chat_template.jinja")
        prompts = f"  - {{id: full, tokens: {IDS}}}\n"
        prompts += "".join(f"  - {{id: pre{i}, tokens: {IDS[:i]}}}\n" for i in range(1, len(IDS)))
        prompts += "  - {id: chat, messages: " + __import__("json").dumps(CHAT) + "}\n"
        self.port = st.free_port()
        config = d + "/lp.yaml"
        with open(config, "w") as f:
            f.write(f"model: {{path: {d}/model}}\nbackend: cpu\nparallel: {parallel}\nprompts:\n{prompts}"
                    f"generate: {{max_new_tokens: {GEN}, top_k_record: 0, stop_at_eos: false}}\n"
                    f"dump: {{dir: {d}/runs/lp, activations: {{layers: [0], points: [logits], phase: both}}}}\n"
                    "watchdog: {collective_timeout_s: 20, phase_timeout_s: 120}\n"
                    f"serve: {{port: {self.port}, max_request_tokens: 200}}\n")
        r = subprocess.run(["mpiexec", "-np", "2", "--oversubscribe", st.DAYZERO, "run", config, "--threads", "1",
                            "--dump-dir", d + "/runs/reference"], env=st.mpi_env(), capture_output=True, text=True,
                           timeout=180)
        if r.returncode != 0:
            raise AssertionError(r.stdout + r.stderr)
        self.ref = read_outputs(d + "/runs/reference")
        self.server = st.Server(config, self.port, d + "/serve.log")

    def expected(self, pid, with_prompt):
        """(prompt log-probs for tokens 1.., generated ids, their log-probs) from the run's dump."""
        e = self.ref[pid]
        gen = e["generated"]
        rows = [e["logits_last"]] + list(e["decode_logits"][:len(gen) - 1])
        gen_lp = [log_softmax_at(row, [t])[0] for row, t in zip(rows, gen)]
        prompt_lp = []
        if with_prompt:
            prompt_lp = [log_softmax_at(self.ref[f"pre{i}"]["logits_last"], [IDS[i]])[0] for i in range(1, len(IDS))]
        return prompt_lp, gen, gen_lp, rows


class LogprobsEqualRun(unittest.TestCase):
    def check(self, parallel):
        with tempfile.TemporaryDirectory() as d:
            lay = Layout(d, parallel)
            try:
                prompt_lp, gen, gen_lp, rows = lay.expected("full", True)
                self.assertEqual(len(gen), GEN)
                # echo + logprobs with generated tokens.
                status, body = st.http(lay.port, "POST", "/v1/completions",
                                       {"prompt": IDS, "echo": True, "logprobs": 5, "max_tokens": GEN})
                self.assertEqual(status, 200, body)
                c = body["choices"][0]
                self.assertEqual(c["token_ids"], gen)
                lp = c["logprobs"]
                self.assertEqual(len(lp["tokens"]), len(IDS) + GEN)
                self.assertIsNone(lp["token_logprobs"][0])
                self.assertIsNone(lp["top_logprobs"][0])
                self.assertEqual(lp["token_logprobs"][1:len(IDS)], prompt_lp)  # bit for bit
                # Negative control: the comparison sees the last bit (another summation order differs).
                reversed_lp = [log_softmax_reversed(self_row, [IDS[i]])[0] for i, self_row in
                               ((i, lay.ref[f"pre{i}"]["logits_last"]) for i in range(1, len(IDS)))]
                self.assertNotEqual(lp["token_logprobs"][1:len(IDS)], reversed_lp)
                self.assertEqual(lp["token_logprobs"][len(IDS):], gen_lp)
                # The top 5 of each generated step, from the run's row, plus the chosen token.
                for s, row in enumerate(rows):
                    top = lp["top_logprobs"][len(IDS) + s]
                    order = sorted(range(len(row)), key=lambda i: (-float(row[i]), i))[:5]
                    want = log_softmax_at(row, order)
                    # A dict keyed by token text: tokens whose text is the same (byte pieces of one
                    # character) share a key, so the values are a subset of the 5 and the chosen one.
                    self.assertLessEqual(set(top.values()), set(want) | {lp["token_logprobs"][len(IDS) + s]})
                    self.assertEqual(max(top.values()), want[0])
                    # lm-eval's is_greedy: the chosen token's value is the largest.
                    self.assertEqual(lp["token_logprobs"][len(IDS) + s], max(top.values()))
                self.assertEqual(lp["text_offset"][0], 0)
                self.assertEqual(lp["text_offset"], sorted(lp["text_offset"]))
                self.assertTrue(c["text"].startswith(lay.server and st.http(lay.port, "POST", "/v1/completions", {
                    "prompt": IDS, "echo": True, "max_tokens": 0})[1]["choices"][0]["text"]))
                # lm-eval's log-likelihood request: a list of token-id lists, echo, logprobs 1, max_tokens 1 (and 0).
                for max_tokens in (1, 0):
                    status, body = st.http(lay.port, "POST", "/v1/completions",
                                           {"model": "model", "prompt": [IDS, IDS[:4]], "temperature": 0,
                                            "max_tokens": max_tokens, "logprobs": 1, "seed": 1234, "echo": True})
                    self.assertEqual(status, 200, body)
                    a, b = body["choices"]
                    self.assertEqual(len(a["logprobs"]["token_logprobs"]), len(IDS) + max_tokens)
                    self.assertEqual(a["logprobs"]["token_logprobs"][1:len(IDS)], prompt_lp)
                    self.assertEqual(b["logprobs"]["token_logprobs"][1:4], prompt_lp[:3])
                    if max_tokens == 0:
                        self.assertEqual(a["token_ids"], [])
                        self.assertEqual(a["finish_reason"], "length")
                # Without echo: only the generated tokens.
                status, body = st.http(lay.port, "POST", "/v1/completions", {"prompt": IDS, "logprobs": 0, "max_tokens": GEN})
                self.assertEqual(body["choices"][0]["logprobs"]["token_logprobs"], gen_lp)
                # Chat: logprobs + top_logprobs, against the run's messages: prompt.
                _, cgen, cgen_lp, crows = lay.expected("chat", False)
                status, body = st.http(lay.port, "POST", "/v1/chat/completions",
                                       {"messages": CHAT, "max_tokens": GEN, "logprobs": True, "top_logprobs": 2,
                                        "ignore_eos": True})
                self.assertEqual(status, 200, body)
                c = body["choices"][0]
                self.assertEqual(c["token_ids"], cgen)
                content = c["logprobs"]["content"]
                self.assertEqual([e["logprob"] for e in content], cgen_lp)
                for e, row in zip(content, crows):
                    order = sorted(range(len(row)), key=lambda i: (-float(row[i]), i))[:2]
                    self.assertEqual([t["logprob"] for t in e["top_logprobs"]], log_softmax_at(row, order))
                    self.assertEqual(bytes(e["bytes"]).decode("utf-8", "replace"), e["token"])
            finally:
                lay.server.kill()

    def test_tp2(self):
        self.check("{tp: 2}")

    def test_pp2(self):
        self.check("{pp: 2}")


if __name__ == "__main__":
    st.DAYZERO = os.path.abspath(sys.argv.pop(1))
    unittest.main(verbosity=2)
