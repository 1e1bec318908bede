#!/usr/bin/env python3
"""dayzero serve on a tiny generated llama under mpiexec -np 2 (tp2), on a free loopback port:
/health before and after the warm-up, /v1/models, /metrics, completions and chat completions
through the openai package and curl (plain and streamed), the served greedy tokens against
`dayzero run`'s for the same prompts, every kind of bad input each followed by a good request,
a client gone mid-stream, a request past serve.request_timeout_s (504), and SIGTERM during a
stream (the stream ends, the job exits 0 with its dump complete). Every wait is bounded.
Usage: serve_test.py DAYZERO"""
import base64
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.error
import urllib.request

import h5py
import openai

DAYZERO = None
HERE = os.path.dirname(os.path.abspath(__file__))
PROMPTS = ["The capital of France is", "def main():\n    return", "Once upon a time"]
MAX_TOKENS = 8


def mpi_env():
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", OMPI_ALLOW_RUN_AS_ROOT="1",
               OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMPI_MCA_rmaps_base_oversubscribe="1")
    return env


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def free_ports(n):
    """n consecutive free loopback ports (a job of n replicas listens on port, port + 1, ...)."""
    for _ in range(100):
        base, socks = free_port(), []
        try:
            for i in range(n):
                socks.append(socket.socket())
                socks[-1].bind(("127.0.0.1", base + i))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise AssertionError(f"no {n} consecutive free ports")


def write_config(d, name, port, serve=None, generate="", extra="", dump="", parallel="{tp: 2}", more_prompts=""):
    """serve: keys over the defaults (a None value removes the key); more_prompts: YAML list items."""
    path = os.path.join(d, name + ".yaml")
    prompts = "".join(f"  - {{id: p{i}, text: {json.dumps(t)}}}\n" for i, t in enumerate(PROMPTS)) + more_prompts
    keys = {"port": port, "chat_template": HERE + "/chat_template.jinja", "max_body_bytes": 4096,
            "max_request_tokens": 200, "request_timeout_s": 20, "drain_s": 5}
    keys.update(serve or {})
    keys = {k: v for k, v in keys.items() if v is not None}
    with open(path, "w") as f:
        f.write(f"model: {{path: {d}/model}}\nbackend: cpu\nparallel: {parallel}\nprompts:\n{prompts}"
                f"generate: {{max_new_tokens: {MAX_TOKENS}, top_k_record: 0{generate}}}\n"
                f"dump: {{dir: {d}/runs/{name}{dump}}}\n"
                "watchdog: {collective_timeout_s: 20, phase_timeout_s: 120}\n"
                "serve: {" + ", ".join(f"{k}: {v}" for k, v in keys.items()) + "}\n" + extra)
    return path


def http(port, method, path, body=None, raw=None, timeout=30):
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            text = r.read().decode()
            status = r.status
    except urllib.error.HTTPError as e:
        text, status = e.read().decode(), e.code
    try:
        return status, json.loads(text)
    except ValueError:
        return status, text


class Server:
    """mpiexec -np 2 dayzero serve CONFIG, its output in a file; waits for /health == 200."""

    def __init__(self, config, port, log):
        self.port = port
        self.log_path = log
        self.log = open(log, "w")
        self.proc = subprocess.Popen(["mpiexec", "-np", "2", "--oversubscribe", DAYZERO, "serve", config, "--threads", "1"],
                                     stdout=self.log, stderr=subprocess.STDOUT, env=mpi_env(), start_new_session=True)
        self.health_before = []
        self.health_before_t = []  # when each of health_before was seen
        deadline = time.time() + 180
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError("the server exited early:\n" + self.output())
            try:
                status, body = http(port, "GET", "/health", timeout=5)
                if status == 200:
                    self.ready_t = time.time()
                    return
                self.health_before.append((status, body))
                self.health_before_t.append(time.time())
            except (urllib.error.URLError, ConnectionError, socket.timeout):
                pass
            time.sleep(0.2)
        self.kill()
        raise AssertionError("/health never answered 200:\n" + self.output())

    def output(self):
        if not self.log.closed:
            self.log.flush()
        with open(self.log_path) as f:
            return f.read()

    def rank0_pid(self):
        return self.listener_pids()[self.port]

    def listener_pids(self):
        """{port: pid} of every listening rank, from its "serve: listening on http://HOST:PORT (...; pid N)" line."""
        pids = {}
        for line in self.output().splitlines():
            if line.startswith("serve: listening on") and "pid " in line:
                port = int(line.split()[3].rsplit(":", 1)[1])
                pids[port] = int(line.rsplit("pid ", 1)[1].rstrip(")"))
        if self.port not in pids:
            raise AssertionError("no pid in the listening line:\n" + self.output())
        return pids

    def kill(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)
        # mpiexec reaped is not its ranks gone: a rank still dying can write its live/ file while the
        # caller removes the run folder ("Directory not empty"). Wait until the session's group is empty.
        deadline = time.time() + 30
        while group_alive(self.proc.pid) and time.time() < deadline:
            time.sleep(0.05)
        self.log.close()


def group_alive(pgid):
    """Whether a process of group pgid still runs (zombies, which write nothing, do not count)."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


def run_reference(d, config):
    """`dayzero run` of the same config: each prompt's generated ids from the output owner's dump."""
    r = subprocess.run(["mpiexec", "-np", "2", "--oversubscribe", DAYZERO, "run", config, "--threads", "1",
                        "--dump-dir", d + "/runs/reference"], env=mpi_env(), capture_output=True, text=True, timeout=180)
    if r.returncode != 0:
        raise AssertionError(r.stdout + r.stderr)
    out = {}
    with h5py.File(d + "/runs/reference/rank-00000.h5", "r") as f:
        for i in range(len(PROMPTS)):
            out[PROMPTS[i]] = [int(x) for x in f[f"outputs/p{i}/generated_ids"][()]]
    return out


class Serve(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        d = cls.d = cls.tmp.name
        subprocess.run([DAYZERO, "make-model", "--family", "llama", "--out", d + "/model", "--dtype", "float32"],
                       check=True, capture_output=True, timeout=120)
        cls.port = free_port()
        # Rank 1 pauses 2 s inside the warm-up (tp all_reduce #10 of about 60), so /health is seen
        # answering 503 with phase "prompts" whatever the machine's speed.
        cls.config = write_config(d, "serve", cls.port,
                                  extra="debug: {stall: {rank: 1, before: 'tp all_reduce #10', seconds: 2}}\n")
        cls.reference = run_reference(d, cls.config)
        cls.server = Server(cls.config, cls.port, d + "/serve.log")
        cls.client = openai.OpenAI(base_url=f"http://127.0.0.1:{cls.port}/v1", api_key="none", timeout=60, max_retries=0)

    @classmethod
    def tearDownClass(cls):
        cls.server.kill()
        cls.tmp.cleanup()

    def good_request(self):
        """The request every bad one is followed by: it must be served in full."""
        r = self.client.completions.create(model="model", prompt=PROMPTS[0], max_tokens=MAX_TOKENS)
        self.assertEqual(r.choices[0].model_extra["token_ids"], self.reference[PROMPTS[0]])

    def test_health_before_and_after_warmup(self):
        # Before the warm-up: 503 with the phase it is in (the listener binds after the config phase).
        self.assertIn("prompts", [body["phase"] for _, body in self.server.health_before])
        for status, body in self.server.health_before:
            self.assertEqual(status, 503)
            self.assertEqual(body["status"], "starting")
            self.assertIn(body["phase"], ["config", "model check", "replay source", "plan", "run folder", "backend",
                                          "dump file", "load", "tune", "coverage", "prompts", "serve"])
        out = subprocess.run(["curl", "-s", "-w", "\n%{http_code}", f"http://127.0.0.1:{self.port}/health"],
                             capture_output=True, text=True, timeout=30).stdout.splitlines()
        self.assertEqual(out[-1], "200")
        self.assertEqual(json.loads(out[0]), {"status": "ok"})

    def test_models(self):
        models = self.client.models.list()
        self.assertEqual([m.id for m in models.data], ["model"])

    def test_completions_equal_run_bitwise(self):
        for p in PROMPTS:
            r = self.client.completions.create(model="model", prompt=p, max_tokens=MAX_TOKENS, temperature=0)
            ids = r.choices[0].model_extra["token_ids"]
            self.assertEqual(ids, self.reference[p], p)
            self.assertEqual(r.usage.completion_tokens, len(ids))
            self.assertIn(r.choices[0].finish_reason, ["stop", "length"])

    def test_concurrent_requests_batched_equal_run(self):
        # More requests than generate.max_batch at once: batched together, still the run's tokens.
        import concurrent.futures as cf
        with cf.ThreadPoolExecutor(12) as ex:
            futs = [ex.submit(self.client.completions.create, model="model", prompt=PROMPTS[i % 3],
                              max_tokens=MAX_TOKENS) for i in range(12)]
            for i, f in enumerate(futs):
                self.assertEqual(f.result(timeout=120).choices[0].model_extra["token_ids"], self.reference[PROMPTS[i % 3]])

    def test_curl_completion(self):
        out = subprocess.run(["curl", "-s", f"http://127.0.0.1:{self.port}/v1/completions", "-H",
                              "Content-Type: application/json", "-d",
                              json.dumps({"prompt": PROMPTS[1], "max_tokens": MAX_TOKENS})],
                             capture_output=True, text=True, timeout=60).stdout
        self.assertEqual(json.loads(out)["choices"][0]["token_ids"], self.reference[PROMPTS[1]])

    def test_streaming_equals_plain(self):
        plain = self.client.completions.create(model="model", prompt=PROMPTS[2], max_tokens=MAX_TOKENS)
        chunks = list(self.client.completions.create(model="model", prompt=PROMPTS[2], max_tokens=MAX_TOKENS, stream=True))
        self.assertGreater(len(chunks), 1)
        self.assertEqual("".join(c.choices[0].text for c in chunks), plain.choices[0].text)
        self.assertEqual(chunks[-1].choices[0].finish_reason, plain.choices[0].finish_reason)
        # curl sees the server-sent events themselves, ending with [DONE].
        out = subprocess.run(["curl", "-sN", f"http://127.0.0.1:{self.port}/v1/completions", "-H",
                              "Content-Type: application/json", "-d",
                              json.dumps({"prompt": PROMPTS[2], "max_tokens": MAX_TOKENS, "stream": True})],
                             capture_output=True, text=True, timeout=60).stdout
        events = [l[6:] for l in out.splitlines() if l.startswith("data: ")]
        self.assertEqual(events[-1], "[DONE]")
        self.assertEqual("".join(json.loads(e)["choices"][0]["text"] for e in events[:-1]), plain.choices[0].text)

    def test_chat(self):
        msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is the capital of France?"}]
        r = self.client.chat.completions.create(model="model", messages=msgs, max_tokens=MAX_TOKENS)
        self.assertEqual(r.choices[0].message.role, "assistant")
        self.assertGreater(r.usage.completion_tokens, 0)
        chunks = list(self.client.chat.completions.create(model="model", messages=msgs, max_tokens=MAX_TOKENS, stream=True))
        self.assertEqual(chunks[0].choices[0].delta.role, "assistant")
        self.assertEqual("".join(c.choices[0].delta.content or "" for c in chunks), r.choices[0].message.content)
        ids = r.choices[0].model_extra["token_ids"]
        self.assertEqual(len(ids), r.usage.completion_tokens)

    def test_seeded_sampling(self):
        def ids(**kw):
            r = self.client.completions.create(model="model", prompt=PROMPTS[0], max_tokens=MAX_TOKENS, **kw)
            return r.choices[0].model_extra["token_ids"]
        a, b, c = ids(temperature=1.0, seed=7), ids(temperature=1.0, seed=7), ids(temperature=1.0, seed=8)
        self.assertEqual(a, b)  # the same seed: the same tokens, on both ranks of the last stage alike
        self.assertNotEqual(a, c)
        self.assertNotEqual(a, self.reference[PROMPTS[0]])
        self.assertEqual(ids(temperature=0, seed=7), self.reference[PROMPTS[0]])

    def test_stop_string(self):
        full = self.client.completions.create(model="model", prompt=PROMPTS[0], max_tokens=MAX_TOKENS).choices[0].text
        if len(full.strip()) < 2:
            self.skipTest("the tiny model's completion is too short to cut")
        stop = full.strip()[1:3] if len(full.strip()) >= 3 else full.strip()[1:]
        r = self.client.completions.create(model="model", prompt=PROMPTS[0], max_tokens=MAX_TOKENS, stop=[stop])
        self.assertEqual(r.choices[0].finish_reason, "stop")
        self.assertEqual(r.choices[0].text, full[:full.find(stop)])

    def test_bad_inputs_then_good(self):
        big = "x" * 5000
        cases = [
            ("/v1/completions", b"{not json", 400, None),
            ("/v1/completions", json.dumps({"prompt": "a", "bogus": 1}).encode(), 400, "bogus"),
            ("/v1/completions", json.dumps({"prompt": 3}).encode(), 400, "prompt"),
            ("/v1/completions", json.dumps({"prompt": "a", "max_tokens": 0}).encode(), 400, "max_tokens"),
            ("/v1/completions", json.dumps({"prompt": "a", "max_tokens": 199}).encode(), 400, "max_tokens"),
            ("/v1/completions", json.dumps({"prompt": list(range(1, 250))}).encode(), 400, "prompt"),
            ("/v1/completions", json.dumps({"prompt": [1, 99999999]}).encode(), 400, "prompt[1]"),
            ("/v1/completions", json.dumps({"prompt": "a", "temperature": 5}).encode(), 400, "temperature"),
            ("/v1/completions", json.dumps({"prompt": "a", "model": "other"}).encode(), 404, "model"),
            ("/v1/completions", json.dumps({"prompt": big}).encode(), 413, "body"),
            ("/v1/chat/completions", json.dumps({"messages": []}).encode(), 400, "messages"),
            ("/v1/chat/completions", json.dumps({"messages": [{"role": "robot", "content": "hi"}]}).encode(), 400,
             "messages[0].role"),
            ("/v1/chat/completions", json.dumps({"messages": [{"role": "user", "content": [
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]}]}).encode(), 400,
             "messages[0].content[0]"),
            ("/v1/nothing", b"{}", 404, None),
        ]
        for path, raw, status, param in cases:
            with self.subTest(path=path, body=raw[:60]):
                got, body = http(self.port, "POST", path, raw=raw)
                self.assertEqual(got, status, body)
                self.assertIn("error", body)
                self.assertIsInstance(body["error"]["message"], str)
                if param is not None:
                    self.assertEqual(body["error"]["param"], param, body)
                self.good_request()

    def test_client_gone_mid_stream(self):
        body = json.dumps({"prompt": PROMPTS[0], "max_tokens": 150, "stream": True}).encode()
        with socket.create_connection(("127.0.0.1", self.port), timeout=30) as s:
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
            self.assertIn(b"200", s.recv(64))
        self.good_request()

    def test_load_64_clients_x_4_requests(self):
        # The bench in bench/: 256 streamed requests, 64 in flight, none failed or incomplete.
        r = subprocess.run([sys.executable, os.path.join(HERE, "..", "..", "bench", "serve_bench.py"), "--port",
                            str(self.port), "--concurrency", "64", "--num-prompts", "256", "--max-tokens", str(MAX_TOKENS),
                            "--input-words", "8"],
                           capture_output=True, text=True, timeout=240)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertRegex(r.stdout, r"Successful requests: +256\n")
        self.assertRegex(r.stdout, r"Failed requests: +0\n")
        self.assertRegex(r.stdout, f"Total generated tokens: +{256 * MAX_TOKENS}\n")
        print("\n" + r.stdout.strip(), file=sys.stderr)

    def test_metrics(self):
        self.good_request()
        status, text = http(self.port, "GET", "/metrics")
        self.assertEqual(status, 200)
        for name in ["dayzero_requests_total{endpoint=\"completions\",status=\"200\"}", "dayzero_generated_tokens_total",
                     "dayzero_queue_depth", "dayzero_time_to_first_token_seconds_bucket",
                     "dayzero_inter_token_latency_seconds_count", "dayzero_load_seconds{rank=\"1\"}",
                     "dayzero_startup_phase_seconds{phase=\"load\"}"]:
            self.assertIn(name, text)
        ttft = [l for l in text.splitlines() if l.startswith("dayzero_time_to_first_token_seconds_count")]
        self.assertGreater(int(ttft[0].split()[-1]), 0)


class Shutdown(unittest.TestCase):
    """A server that dumps its requests and whose requests time out after 6 s, where rank 1 pauses 7 s
    inside the first request (debug.stall with seconds at tp all_reduce #400: the warm-up's three prompts
    of 9 forwards each took 143 (seq 0-142 in events/rank-00001.jsonl), a token of the request about 5, and
    the request asks for the whole context), then SIGTERM to rank 0 during a stream. The model's context
    is raised to 32768 tokens: at its own 2048 a whole-context stream ended in 0.45 s on an idle machine,
    so on a loaded one it could end before the signal landed. The timeout is 6 s, not less, because it
    also runs for the stream: at 2 s a loaded CI machine's first event plus the signal took longer, and
    the stream ended by the timeout instead of the shutdown."""

    def test_timeout_then_sigterm_during_stream(self):
        with tempfile.TemporaryDirectory() as d:
            subprocess.run([DAYZERO, "make-model", "--family", "llama", "--out", d + "/model", "--dtype", "float32"],
                           check=True, capture_output=True, timeout=120)
            with open(d + "/model/config.json") as f:
                model_config = json.load(f)
            model_config["max_position_embeddings"] = 32768
            with open(d + "/model/config.json", "w") as f:
                json.dump(model_config, f)
            port = free_port()
            config = write_config(d, "short", port, serve={"request_timeout_s": 6, "drain_s": 0,
                                                            "max_request_tokens": 100000, "dump_requests": "true"},
                                  dump=", activations: {layers: [0], points: [layer_out], phase: prefill}",
                                  generate=", max_batch: 1, stop_at_eos: false",
                                  extra="debug: {stall: {rank: 1, before: 'tp all_reduce #400', seconds: 7}}\n")
            server = Server(config, port, d + "/serve.log")
            try:
                client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", timeout=60, max_retries=0)
                # As many tokens as the model's context allows (its 400 says how many): far past 6 s.
                status, body = http(port, "POST", "/v1/completions", {"prompt": PROMPTS[0], "max_tokens": 100000 - 16})
                ctx_tokens = 100000 - 16
                if status == 400:
                    self.assertEqual(body["error"]["code"], "context_length_exceeded", body)
                    ctx_tokens = int(body["error"]["message"].split("maximum context length is ")[1].split()[0]) - 16
                    status, body = http(port, "POST", "/v1/completions", {"prompt": PROMPTS[0], "max_tokens": ctx_tokens})
                self.assertEqual(status, 504, body)
                self.assertIn("request_timeout_s", body["error"]["message"])
                r = client.completions.create(model="model", prompt=PROMPTS[0], max_tokens=2)
                served = r.choices[0].model_extra["token_ids"]
                self.assertEqual(len(served), 2)
                # SIGTERM to rank 0 while a stream runs: with drain_s 0 the stream is ended at once with an
                # error event, the job closes its dump and exits 0.
                stream = client.completions.create(model="model", prompt=PROMPTS[0], max_tokens=ctx_tokens, stream=True)
                it = iter(stream)
                next(it)
                os.kill(server.rank0_pid(), signal.SIGTERM)
                t0 = time.time()
                with self.assertRaises(openai.APIError) as cm:
                    list(it)
                self.assertIn("shutting down", str(cm.exception))
                rc = server.proc.wait(timeout=60)
                self.assertEqual(rc, 0, server.output())
                self.assertLess(time.time() - t0, 15)  # drain_s 0 + a bounded shutdown
                self.assertIn("serve: SIGTERM: draining", server.output())
                with h5py.File(d + "/runs/short/rank-00000.h5", "r") as f:
                    self.assertEqual(int(f.attrs["complete"]), 1)
                    # serve.dump_requests: the request's outputs under its response id, and its prefill
                    # activations bitwise those of the warm-up prompt with the same text.
                    key = "req-" + r.id.split("-")[1]
                    self.assertEqual([int(x) for x in f[f"outputs/{key}/generated_ids"][()]], served)
                    self.assertEqual(list(f[f"outputs/{key}/prompt_ids"][()]), list(f["outputs/p0/prompt_ids"][()]))
                    a = f[f"activations/{key}/prefill/layers.0.layer_out"][()]
                    b = f["activations/p0/prefill/layers.0.layer_out"][()]
                    self.assertEqual(a.shape, b.shape)
                    self.assertTrue((a == b).all())
                # Gone: nothing listens on the port any more.
                with self.assertRaises((urllib.error.URLError, ConnectionError)):
                    http(port, "GET", "/health", timeout=5)
            finally:
                server.kill()


class StalledRank(unittest.TestCase):
    """Rank 1 stops for good inside a served request (debug.stall): the watchdog ends the job within
    collective_timeout_s + 15 s with the hang report naming rank 1; the client's connection is
    closed, not left hanging. Negative control: the same server's perturbed tokens differ from
    `dayzero run`'s, so the bitwise comparison of the Serve tests can see a difference."""

    def test_stall_ends_the_job_with_a_hang_report(self):
        with tempfile.TemporaryDirectory() as d:
            subprocess.run([DAYZERO, "make-model", "--family", "llama", "--out", d + "/model", "--dtype", "float32"],
                           check=True, capture_output=True, timeout=120)
            reference = run_reference(d, write_config(d, "reference", free_port(), generate=", stop_at_eos: false"))
            port = free_port()
            # The warm-up and the first request take about 90 tp all_reduces (4 per forward); the second one's
            # 180 tokens reach #300.
            config = write_config(d, "stall", port, generate=", stop_at_eos: false", extra=(
                "debug: {stall: {rank: 1, before: 'tp all_reduce #300'}, perturb: {point: layers.0.ffn_out, scale: 1.5}}\n"))
            with open(config) as f:  # a short collective timeout for this job
                text = f.read().replace("collective_timeout_s: 20", "collective_timeout_s: 3")
            with open(config, "w") as f:
                f.write(text)
            server = Server(config, port, d + "/serve.log")
            try:
                client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", timeout=60, max_retries=0)
                r = client.completions.create(model="model", prompt=PROMPTS[0], max_tokens=MAX_TOKENS)
                self.assertNotEqual(r.choices[0].model_extra["token_ids"], reference[PROMPTS[0]])
                t0 = time.time()
                with self.assertRaises(openai.APIConnectionError):  # the connection closes with the job
                    client.completions.create(model="model", prompt=list(range(1, 20)), max_tokens=180)
                rc = server.proc.wait(timeout=3 + 15 + 30)
                elapsed = time.time() - t0
                self.assertNotEqual(rc, 0)
                self.assertLess(elapsed, 3 + 15)
                with open(d + "/runs/stall/hang/rank-00000.json") as f:
                    report = json.load(f)
                self.assertIn(1, report["suspects"], report)
                self.assertIn("watchdog", server.output())
            finally:
                server.kill()


class DumpCompare(unittest.TestCase):
    """serve.dump_requests: a job that served one request, ended by SIGTERM to rank 0 (exit 0), and a
    batch run whose prompts are the warm-up's plus that request as req-N pass `dayzero compare`
    (prefill and decode activations, outputs)."""

    def test_served_request_compares_with_a_batch_run(self):
        with tempfile.TemporaryDirectory() as d:
            subprocess.run([DAYZERO, "make-model", "--family", "llama", "--out", d + "/model", "--dtype", "float32"],
                           check=True, capture_output=True, timeout=120)
            port = free_port()
            dump = ", activations: {points: [layer_out, logits], phase: both}"
            config = write_config(d, "served", port, serve={"dump_requests": "true"}, dump=dump)
            server = Server(config, port, d + "/serve.log")
            try:
                status, body = http(port, "POST", "/v1/completions", {"prompt": PROMPTS[2], "max_tokens": MAX_TOKENS})
                self.assertEqual(status, 200, body)
                key = "req-" + body["id"].split("-")[1]
                os.kill(server.rank0_pid(), signal.SIGTERM)
                self.assertEqual(server.proc.wait(timeout=60), 0, server.output())
            finally:
                server.kill()
            batch = write_config(d, "batch", free_port(), dump=dump)
            with open(batch) as f:
                text = f.read().replace("prompts:\n", f"prompts:\n  - {{id: {key}, text: {json.dumps(PROMPTS[2])}}}\n")
            with open(batch, "w") as f:
                f.write(text)
            r = subprocess.run(["mpiexec", "-np", "2", "--oversubscribe", DAYZERO, "run", batch, "--threads", "1"],
                               env=mpi_env(), capture_output=True, text=True, timeout=180)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            r = subprocess.run([DAYZERO, "compare", d + "/runs/served", d + "/runs/batch"], capture_output=True,
                               text=True, timeout=120)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            self.assertIn(f"{key} / decode: agree", r.stdout)


class Replicas(unittest.TestCase):
    """parallel.dp 2 (dp2 x tp1, 2 ranks): replica r listens on serve.port + r, nothing on port + 2.
    Both answer /health 200 after the whole job's warm-up (rank 1 pauses inside it, so replica 0 is
    seen waiting for replica 1), /v1/models, /metrics naming the replica; a greedy completion on each
    replica, then concurrent ones on both, every one bitwise `dayzero run`'s tokens (a dp2 batch run of
    the warm-up prompts plus every served request as req-N, which `dayzero compare` also passes against
    the served job's dumps); SIGTERM to replica 1's rank alone drains both replicas, exit 0, complete = 1.
    Then a port in use on replica 1 fails the start with exit 2 naming the port and the replica."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        subprocess.run([DAYZERO, "make-model", "--family", "llama", "--out", cls.tmp.name + "/model", "--dtype",
                        "float32"], check=True, capture_output=True, timeout=120)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_two_replicas(self):
        d = self.tmp.name
        port = free_ports(3)
        dump = ", activations: {points: [layer_out, logits], phase: both}"
        # Rank 1 (replica 1) pauses 2 s before the agreement that ends the warm-up (env agree #18: the
        # world's agreements and gathers since the start, one or two per phase), when replica 0 has run
        # its prompts: replica 0 answers 503 "prompts" until replica 1 is done too.
        config = write_config(d, "dp2", port, serve={"dump_requests": "true"}, dump=dump, parallel="{dp: 2}",
                              extra="debug: {stall: {rank: 1, before: 'env agree #18', seconds: 2}}\n")
        server = Server(config, port, d + "/dp2.log")
        served = {}  # req-N: (prompt, token ids)
        try:
            seen = [t for t, (_, b) in zip(server.health_before_t, server.health_before) if b.get("phase") == "prompts"]
            self.assertTrue(seen, server.health_before)
            self.assertGreater(server.ready_t - seen[0], 1.0)  # replica 0 waited for replica 1's warm-up
            self.assertIn("stalls before agree #18 of world.env", server.output())
            self.assertEqual(http(port + 1, "GET", "/health"), (200, {"status": "ok"}))
            with self.assertRaises((urllib.error.URLError, ConnectionError)):  # a third replica's port: nothing
                http(port + 2, "GET", "/health", timeout=5)
            for r in range(2):
                status, body = http(port + r, "GET", "/v1/models")
                self.assertEqual([m["id"] for m in body["data"]], ["model"])
                status, text = http(port + r, "GET", "/metrics")
                self.assertIn(f"\ndayzero_replica {r}\n", text)
                self.assertIn("\ndayzero_replicas 2\n", text)

            def complete(r, prompt):
                status, body = http(port + r, "POST", "/v1/completions", {"prompt": prompt, "max_tokens": MAX_TOKENS})
                self.assertEqual(status, 200, body)
                served["req-" + body["id"].split("-")[1]] = (prompt, body["choices"][0]["token_ids"])
                return body["id"]
            # Request numbers are unique over the job: replica r numbers r + 1, r + 3, ...
            self.assertEqual(complete(0, PROMPTS[0]), "cmpl-1")
            self.assertEqual(complete(1, PROMPTS[1]), "cmpl-2")
            import concurrent.futures as cf
            with cf.ThreadPoolExecutor(8) as ex:
                for f in [ex.submit(complete, i % 2, PROMPTS[i % 3]) for i in range(8)]:
                    f.result(timeout=120)
            self.assertEqual(len(served), 10)
            pids = server.listener_pids()
            self.assertEqual(sorted(pids), [port, port + 1])
            os.kill(pids[port + 1], signal.SIGTERM)  # replica 1's rank only: every replica drains
            rc = server.proc.wait(timeout=60)
            self.assertEqual(rc, 0, server.output())
            for r in range(2):
                self.assertIn(f"serve: SIGTERM: draining replica {r}", server.output())
                with self.assertRaises((urllib.error.URLError, ConnectionError)):
                    http(port + r, "GET", "/health", timeout=5)
        finally:
            server.kill()
        keys = {}
        for r in range(2):
            with h5py.File(f"{d}/runs/dp2/rank-{r:05d}.h5", "r") as f:
                self.assertEqual(int(f.attrs["complete"]), 1)
                keys[r] = sorted(f["outputs"].keys())
        # The warm-up is split as `dayzero run` splits prompts over dp; each replica dumps its own requests.
        self.assertEqual([k for k in keys[0] if k.startswith("p")], ["p0", "p2"])
        self.assertEqual([k for k in keys[1] if k.startswith("p")], ["p1"])
        self.assertEqual(sorted(k for k in keys[0] + keys[1] if k.startswith("req-")), sorted(served))
        for k in served:
            self.assertIn(k, keys[(int(k.split("-")[1]) - 1) % 2])
        # The batch run: the same dp2 config with every served request as a prompt of its own.
        batch = write_config(d, "batch", free_port(), dump=dump, parallel="{dp: 2}")
        extra = "".join(f"  - {{id: {k}, text: {json.dumps(p)}}}\n" for k, (p, _) in sorted(served.items()))
        with open(batch) as f:
            text = f.read().replace("prompts:\n", "prompts:\n" + extra)
        with open(batch, "w") as f:
            f.write(text)
        r = subprocess.run(["mpiexec", "-np", "2", "--oversubscribe", DAYZERO, "run", batch, "--threads", "1"],
                           env=mpi_env(), capture_output=True, text=True, timeout=180)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        reference = {}
        for rank in range(2):
            with h5py.File(f"{d}/runs/batch/rank-{rank:05d}.h5", "r") as f:
                for k in f["outputs"].keys():
                    reference[k] = [int(x) for x in f[f"outputs/{k}/generated_ids"][()]]
        for k, (prompt, ids) in served.items():
            self.assertEqual(ids, reference[k], k)
            self.assertEqual(ids, reference[f"p{PROMPTS.index(prompt)}"], k)
        r = subprocess.run([DAYZERO, "compare", d + "/runs/dp2", d + "/runs/batch"], capture_output=True, text=True,
                           timeout=120)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("req-2 / decode: agree", r.stdout)

    def test_port_in_use_on_the_second_replica(self):
        d = self.tmp.name
        port = free_ports(2)
        config = write_config(d, "busy", port, parallel="{dp: 2}")
        with socket.socket() as held:
            held.bind(("127.0.0.1", port + 1))
            held.listen()
            r = subprocess.run(["mpiexec", "-np", "2", "--oversubscribe", DAYZERO, "serve", config, "--threads", "1"],
                               env=mpi_env(), capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertIn(f"serve.port: replica 1 cannot listen on 127.0.0.1:{port + 1}", r.stdout + r.stderr)


class Images(unittest.TestCase):
    """A tp2 llava server whose template is llava-1.5's processor template (content as parts): an
    image_url data URI and a local file under serve.image_dir give the tokens `dayzero run` gives for
    the same chat as a messages: prompt with the same image, bitwise; a file outside image_dir, bytes
    that are not an image and an image over limits.max_image_pixels are 400s naming the part, each followed by a good one."""

    def test_image_prompts(self):
        images = os.path.join(HERE, "..", "..", "configs", "images")
        with tempfile.TemporaryDirectory() as d:
            subprocess.run([DAYZERO, "make-model", "--family", "llava", "--out", d + "/model", "--dtype", "float32"],
                           check=True, capture_output=True, timeout=120)
            # The model's own template is llava-1.5's published processor template, which reads a
            # message's content as parts: the served chat's parts and the run's messages: prompt (the
            # same parts, with its image) render alike, to the same ids.
            with open(os.path.join(HERE, "..", "fixtures", "configs", "llava-1.5-7b-hf", "chat_template.json")) as f:
                template = json.load(f)["chat_template"]
            with open(d + "/model/chat_template.jinja", "w") as f:
                f.write(template)
            chat = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "\nWhat is in this picture?"}]}]
            port = free_port()
            config = d + "/llava.yaml"
            with open(config, "w") as f:
                f.write(f"model: {{path: {d}/model}}\nbackend: cpu\nparallel: {{tp: 2}}\n"
                        "limits: {max_image_pixels: 12000}\nprompts:\n"
                        f"  - {{id: picture, messages: {json.dumps(chat)}, images: [{images}/shapes.jpg]}}\n"
                        f"generate: {{max_new_tokens: {MAX_TOKENS}, top_k_record: 0}}\ndump: {{dir: {d}/runs/llava}}\n"
                        "watchdog: {collective_timeout_s: 20, phase_timeout_s: 120}\n"
                        f"serve: {{port: {port}, image_dir: {images}}}\n")
            r = subprocess.run(["mpiexec", "-np", "2", "--oversubscribe", DAYZERO, "run", config, "--threads", "1",
                                "--dump-dir", d + "/runs/reference"], env=mpi_env(), capture_output=True, text=True,
                               timeout=180)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            with h5py.File(d + "/runs/reference/rank-00000.h5", "r") as f:
                reference = [int(x) for x in f["outputs/picture/generated_ids"][()]]
            server = Server(config, port, d + "/serve.log")
            try:
                def chat(url):
                    return http(port, "POST", "/v1/chat/completions", {"max_tokens": MAX_TOKENS, "messages": [
                        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}},
                                                     {"type": "text", "text": "\nWhat is in this picture?"}]}]})
                with open(images + "/shapes.jpg", "rb") as f:  # 96 x 120 = 11520 pixels, under the limit
                    uri = "data:image/jpeg;base64," + base64.b64encode(f.read()).decode()
                status, body = chat(uri)
                self.assertEqual(status, 200, body)
                self.assertEqual(body["choices"][0]["token_ids"], reference)
                status, body = chat("shapes.jpg")
                self.assertEqual(status, 200, body)
                self.assertEqual(body["choices"][0]["token_ids"], reference)
                for url, what in [("../../README.md", "not under serve.image_dir"),
                                  ("data:image/png;base64," + base64.b64encode(b"hello").decode(), "PNG"),
                                  ("pattern.png", "max_image_pixels")]:  # 128 x 96 = 12288 pixels
                    with self.subTest(url=url[:40]):
                        status, body = chat(url)
                        self.assertEqual(status, 400, body)
                        self.assertEqual(body["error"]["param"], "messages[0].content[0].image_url")
                        self.assertIn(what, body["error"]["message"])
                        status, body = chat(uri)
                        self.assertEqual(body["choices"][0]["token_ids"], reference)
            finally:
                server.kill()


if __name__ == "__main__":
    DAYZERO = os.path.abspath(sys.argv.pop(1))
    unittest.main(verbosity=2)
