#!/usr/bin/env python3
"""dayzero serve as real clients use it (lm-eval's local-completions, vllm bench serve, the OpenAI SDK),
on a tiny generated llama under mpiexec -np 2 (tp2): stream_options.include_usage, batched prompts
(strings and token-id lists), the penalty and sampling fields (neutral values give `dayzero run`'s
greedy tokens bitwise; other values change them as they must), OpenAI's error codes
(context_length_exceeded, model_not_found, 429 past serve.max_queue), and every bad variant answered
400 naming its field, each followed by a request that is served. Every wait is bounded.
Usage: client_test.py DAYZERO"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

import openai

import serve_test as st

MAX_TOKENS = st.MAX_TOKENS
PROMPTS = st.PROMPTS
HERE = os.path.dirname(os.path.abspath(__file__))
TOOL_CALL = {"id": "call_0", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}
CHAT = [{"role": "system", "content": "Use tools when they help."},
        {"role": "user", "content": "What is the weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [TOOL_CALL]},
        {"role": "tool", "tool_call_id": "call_0", "content": "{\"temperature\": 21}"},
        {"role": "user", "content": "And tomorrow?"}]
# The same chat as a `dayzero run` prompt (messages:), JSON being YAML.
CHAT_YAML = "  - {id: chat, messages: " + json.dumps(CHAT) + "}\n"
WEATHER_TOOL = {"type": "function", "function": {"name": "get_weather", "description": "The weather in a city.",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}


def chat_reference(d):
    """The run's generated ids for the messages: prompt (from the reference run of st.run_reference)."""
    import h5py
    with h5py.File(d + "/runs/reference/rank-00000.h5", "r") as f:
        return [int(x) for x in f["outputs/chat/generated_ids"][()]]


class Clients(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        d = cls.d = cls.tmp.name
        subprocess.run([st.DAYZERO, "make-model", "--family", "llama", "--out", d + "/model", "--dtype", "float32"],
                       check=True, capture_output=True, timeout=120)
        # The model's own chat template is Qwen3's, as published (the repository's fixture), so that the
        # service and `dayzero run` render a real template with namespace(), loop controls and tools.
        with open(os.path.join(HERE, "..", "fixtures", "tokenizers", "qwen3", "tokenizer_config.json")) as f:
            cls.template = json.load(f)["chat_template"]
        with open(d + "/model/chat_template.jinja", "w") as f:
            f.write(cls.template)
        cls.port = st.free_port()
        cls.config = st.write_config(d, "clients", cls.port,
                                     serve={"max_queue": 4, "chat_template": None, "max_request_tokens": 1000,
                                            "max_body_bytes": 16384},
                                     more_prompts=CHAT_YAML)
        cls.reference = st.run_reference(d, cls.config)
        cls.chat_reference = chat_reference(d)
        cls.server = st.Server(cls.config, cls.port, d + "/serve.log")
        try:
            cls.setup_client()
        except BaseException:
            cls.server.kill()
            raise

    @classmethod
    def setup_client(cls):
        cls.client = openai.OpenAI(base_url=f"http://127.0.0.1:{cls.port}/v1", api_key="none", timeout=60, max_retries=0)
        # The prompts' ids as the server encodes them (usage.prompt_tokens agrees with them).
        cls.ids = {}
        for p in PROMPTS:
            status, body = st.http(cls.port, "POST", "/v1/completions", {"prompt": p, "max_tokens": 1})
            assert status == 200, body
            cls.ids[p] = body["usage"]["prompt_tokens"]

    @classmethod
    def tearDownClass(cls):
        cls.server.kill()
        cls.tmp.cleanup()

    def good_request(self):
        r = self.client.completions.create(model="model", prompt=PROMPTS[0], max_tokens=MAX_TOKENS)
        self.assertEqual(r.choices[0].model_extra["token_ids"], self.reference[PROMPTS[0]])

    def post(self, path, body):
        return st.http(self.port, "POST", path, body)

    def test_stream_include_usage(self):
        msgs = [{"role": "user", "content": "What is the capital of France?"}]
        plain = self.client.chat.completions.create(model="model", messages=msgs, max_completion_tokens=MAX_TOKENS)
        chunks = list(self.client.chat.completions.create(model="model", messages=msgs, max_completion_tokens=MAX_TOKENS,
                                                          stream=True, stream_options={"include_usage": True}))
        last = chunks[-1]
        self.assertEqual(last.choices, [])
        self.assertEqual(last.usage.prompt_tokens, plain.usage.prompt_tokens)
        self.assertEqual(last.usage.completion_tokens, plain.usage.completion_tokens)
        self.assertEqual(last.usage.total_tokens, plain.usage.total_tokens)
        for c in chunks[:-1]:
            self.assertIsNone(c.usage)
            self.assertEqual(len(c.choices), 1)
        self.assertEqual("".join(c.choices[0].delta.content or "" for c in chunks[:-1]), plain.choices[0].message.content)
        # Raw events: the usage chunk is the last before [DONE]; without include_usage there is none.
        for include, n_usage in [(True, 1), (False, 0)]:
            body = {"prompt": PROMPTS[2], "max_tokens": MAX_TOKENS, "stream": True}
            if include:
                body["stream_options"] = {"include_usage": True}
            out = subprocess.run(["curl", "-sN", f"http://127.0.0.1:{self.port}/v1/completions", "-H",
                                  "Content-Type: application/json", "-d", json.dumps(body)],
                                 capture_output=True, text=True, timeout=60).stdout
            events = [l[6:] for l in out.splitlines() if l.startswith("data: ")]
            self.assertEqual(events[-1], "[DONE]")
            usage = [json.loads(e) for e in events[:-1] if json.loads(e).get("usage")]
            self.assertEqual(len(usage), n_usage, out)
            if include:
                self.assertEqual(json.loads(events[-2])["choices"], [])
                self.assertEqual(usage[0]["usage"]["completion_tokens"], len(self.reference[PROMPTS[2]]))

    def test_batched_prompts(self):
        # A list of strings (lm-eval's generate_until batches) and a list of token-id lists (its
        # tokenized requests): one choice per prompt, index in order, each the run's greedy tokens.
        r = self.client.completions.create(model="model", prompt=PROMPTS, max_tokens=MAX_TOKENS, temperature=0)
        self.assertEqual([c.index for c in r.choices], [0, 1, 2])
        for c, p in zip(r.choices, PROMPTS):
            self.assertEqual(c.model_extra["token_ids"], self.reference[p], p)
        self.assertEqual(r.usage.completion_tokens, sum(len(self.reference[p]) for p in PROMPTS))
        self.assertEqual(r.usage.prompt_tokens, sum(self.ids.values()))
        ids = [[1, 2, 3, 4], [5, 6], [7, 8, 9]]
        singles = [self.post("/v1/completions", {"prompt": x, "max_tokens": 4})[1]["choices"][0]["token_ids"] for x in ids]
        status, body = self.post("/v1/completions", {"prompt": ids, "max_tokens": 4, "temperature": 0, "seed": 1234})
        self.assertEqual(status, 200, body)
        self.assertEqual([c["index"] for c in body["choices"]], [0, 1, 2])
        self.assertEqual([c["token_ids"] for c in body["choices"]], singles)
        self.assertEqual(body["usage"]["prompt_tokens"], 9)

    def test_neutral_fields_give_run_tokens(self):
        # What SDK users send by default changes nothing: the run's greedy tokens, bitwise.
        for p in PROMPTS:
            r = self.client.completions.create(model="model", prompt=p, max_tokens=MAX_TOKENS, frequency_penalty=0,
                                               presence_penalty=0, logit_bias={}, n=1, user="u", seed=1234,
                                               extra_body={"repetition_penalty": 1, "top_k": -1, "min_p": 0,
                                                           "min_tokens": 0, "ignore_eos": False, "best_of": 1})
            self.assertEqual(r.choices[0].model_extra["token_ids"], self.reference[p], p)

    def test_sampling_fields_act(self):
        ref = self.reference[PROMPTS[0]]

        def ids(**kw):
            status, body = self.post("/v1/completions", dict(prompt=PROMPTS[0], max_tokens=MAX_TOKENS, **kw))
            self.assertEqual(status, 200, body)
            return body["choices"][0]["token_ids"]
        # logit_bias: +100 on one token makes it every token.
        self.assertEqual(ids(logit_bias={"17": 100}), [17] * MAX_TOKENS)
        # -100 on the greedy first token makes the first token another.
        self.assertNotEqual(ids(logit_bias={str(ref[0]): -100})[0], ref[0])
        # A strong frequency / presence / repetition penalty never repeats a token the greedy run repeats.
        self.assertLess(len(set(ref)), len(ref), "the greedy run repeats no token: the penalties cannot be seen")
        for kw in [{"frequency_penalty": 2}, {"presence_penalty": 2}, {"repetition_penalty": 2}]:
            got = ids(**kw)
            self.assertNotEqual(got, ref, kw)
            self.assertEqual(got, ids(**kw), kw)  # deterministic
        # Seeded sampling with top_k 1 is greedy whatever the seed.
        self.assertEqual(ids(temperature=1.5, top_k=1, seed=3), ref)
        self.assertEqual(ids(temperature=1.5, min_p=1, seed=4), ref)
        # The EOS as the only likely token: it ends the request unless ignore_eos, or before min_tokens.
        eos = self.eos_id()
        self.assertEqual(ids(logit_bias={str(eos): 100}), [eos])
        self.assertEqual(len(ids(logit_bias={str(eos): 100}, ignore_eos=True)), MAX_TOKENS)
        got = ids(logit_bias={str(eos): 100}, min_tokens=3)
        self.assertEqual(len(got), 4)
        self.assertNotIn(eos, got[:3])
        self.assertEqual(got[3], eos)

    def eos_id(self):
        with open(os.path.join(self.d, "model", "generation_config.json")) as f:
            e = json.load(f)["eos_token_id"]
        return e[0] if isinstance(e, list) else e

    def test_many_stop_strings(self):
        # lm-eval sends its task's stop strings plus the EOS string, more than 4.
        full = self.client.completions.create(model="model", prompt=PROMPTS[0], max_tokens=MAX_TOKENS).choices[0].text
        stops = ["\x00never1", "\x00never2", "\x00never3", "\x00never4", full[2:4]]
        r = self.client.completions.create(model="model", prompt=PROMPTS[0], max_tokens=MAX_TOKENS, stop=stops)
        self.assertEqual(r.choices[0].text, full[:full.find(full[2:4])])
        self.assertEqual(r.choices[0].finish_reason, "stop")

    def test_models_max_model_len(self):
        status, body = st.http(self.port, "GET", "/v1/models")
        self.assertEqual(body["data"][0]["max_model_len"], 1000)  # serve.max_request_tokens, under the context

    def test_error_codes(self):
        status, body = self.post("/v1/completions", {"prompt": PROMPTS[0], "max_tokens": 999})
        self.assertEqual(status, 400)
        e = body["error"]
        self.assertEqual((e["code"], e["param"], e["type"]), ("context_length_exceeded", "max_tokens", "invalid_request_error"))
        n = self.ids[PROMPTS[0]]
        self.assertIn("maximum context length is 1000 tokens (serve.max_request_tokens)", e["message"])
        self.assertIn(f"{n + 999} tokens were requested ({n} in the prompt, 999 for the completion)", e["message"])
        self.good_request()
        status, body = self.post("/v1/completions", {"prompt": [PROMPTS[0], list(range(1, 400)) * 3]})
        self.assertEqual((status, body["error"]["code"], body["error"]["param"]), (400, "context_length_exceeded", "prompt[1]"))
        self.good_request()
        with self.assertRaises(openai.NotFoundError) as cm:
            self.client.completions.create(model="other", prompt="x", max_tokens=1)
        self.assertEqual(cm.exception.body["code"], "model_not_found")
        self.good_request()
        # serve.max_queue 4: a batch of 5 prompts cannot wait; 429 naming the key, then served again.
        status, body = self.post("/v1/completions", {"prompt": ["a"] * 5, "max_tokens": 1})
        self.assertEqual(status, 429, body)
        self.assertIn("serve.max_queue", body["error"]["message"])
        self.good_request()
        status, body = self.post("/v1/completions", {"prompt": ["a"] * 4, "max_tokens": 1})
        self.assertEqual(status, 200, body)

    def test_chat_template_as_run_renders_it(self):
        # The served chat (Qwen3's template: system, a tool call, its result, a second question) gives
        # the tokens `dayzero run` gave for the same messages: the same rendering, the same ids.
        r = self.client.chat.completions.create(model="model", messages=CHAT, max_tokens=MAX_TOKENS)
        self.assertEqual(r.choices[0].model_extra["token_ids"], self.chat_reference)
        # tools and chat_template_kwargs reach the template: each changes the prompt.
        base = r.usage.prompt_tokens
        with_tools = self.client.chat.completions.create(model="model", messages=CHAT, max_tokens=1, tools=[WEATHER_TOOL])
        self.assertGreater(with_tools.usage.prompt_tokens, base + 20)
        no_think = self.client.chat.completions.create(model="model", messages=CHAT[:2], max_tokens=1,
                                                       extra_body={"chat_template_kwargs": {"enable_thinking": False}})
        think = self.client.chat.completions.create(model="model", messages=CHAT[:2], max_tokens=1)
        self.assertGreater(no_think.usage.prompt_tokens, think.usage.prompt_tokens)  # "<think>\n\n</think>\n\n" added
        # A chat the template cannot render (Qwen3 reads the content of a tool-call turn sent as null,
        # which apply_chat_template drops): 400 with Jinja2's error, then served again.
        bad = CHAT[:2] + [{"role": "assistant", "content": None, "tool_calls": [TOOL_CALL]}]
        status, body = self.post("/v1/chat/completions", {"messages": bad})
        self.assertEqual(status, 400, body)
        self.assertEqual(body["error"]["param"], "messages")
        self.assertIn("UndefinedError", body["error"]["message"])
        self.good_request()

    def test_bad_variants_then_good(self):
        cases = [
            ({"prompt": "a", "stream_options": {"include_usage": True}}, "stream_options"),
            ({"prompt": "a", "stream": True, "stream_options": {"include_usage": 1}}, "stream_options.include_usage"),
            ({"prompt": ["a", "b"], "stream": True}, "stream"),
            ({"prompt": ["a", 3]}, "prompt[1]"),
            ({"prompt": [[1, 2], [3, 99999999]]}, "prompt[1][1]"),
            ({"prompt": "a", "frequency_penalty": 2.5}, "frequency_penalty"),
            ({"prompt": "a", "presence_penalty": -3}, "presence_penalty"),
            ({"prompt": "a", "repetition_penalty": -1}, "repetition_penalty"),
            ({"prompt": "a", "logit_bias": {"5": 500}}, "logit_bias.5"),
            ({"prompt": "a", "logit_bias": {"99999999": 1}}, "logit_bias.99999999"),
            ({"prompt": "a", "top_k": 1.5}, "top_k"),
            ({"prompt": "a", "min_p": -0.1}, "min_p"),
            ({"prompt": "a", "min_tokens": "3"}, "min_tokens"),
            ({"prompt": "a", "ignore_eos": "yes"}, "ignore_eos"),
            ({"prompt": "a", "n": 2}, "n"),
            ({"prompt": "a", "best_of": 3}, "best_of"),
            ({"prompt": "a", "seed": -5}, "seed"),
            ({"prompt": "a", "suffix": "z"}, "suffix"),
        ]
        for body, param in cases:
            with self.subTest(body=body):
                status, got = self.post("/v1/completions", body)
                self.assertEqual(status, 400, got)
                self.assertEqual(got["error"]["param"], param, got)
                self.assertTrue(got["error"]["message"].startswith(param + ": "), got)
                self.good_request()
        with self.assertRaises(openai.BadRequestError) as cm:
            self.client.chat.completions.create(model="model", messages=[{"role": "user", "content": "x"}],
                                                presence_penalty=9)
        self.assertEqual(cm.exception.body["param"], "presence_penalty")
        self.good_request()


class BadTemplate(unittest.TestCase):
    def test_refused_at_start_naming_the_file_and_jinjas_error(self):
        with tempfile.TemporaryDirectory() as d:
            subprocess.run([st.DAYZERO, "make-model", "--family", "llama", "--out", d + "/model", "--dtype", "float32"],
                           check=True, capture_output=True, timeout=120)
            with open(d + "/model/chat_template.jinja", "w") as f:
                f.write("{% for m in messages %}{{ m.content }}\n{% endfor\n")
            config = st.write_config(d, "bad", st.free_port(), serve={"chat_template": None})
            r = subprocess.run(["mpiexec", "-np", "2", "--oversubscribe", st.DAYZERO, "serve", config, "--threads", "1"],
                               env=st.mpi_env(), capture_output=True, text=True, timeout=120)
            self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
            out = r.stdout + r.stderr
            self.assertIn(d + "/model/chat_template.jinja: Jinja2 refused the chat template: line 2: TemplateSyntaxError", out)


if __name__ == "__main__":
    st.DAYZERO = os.path.abspath(sys.argv.pop(1))
    unittest.main(verbosity=2)
