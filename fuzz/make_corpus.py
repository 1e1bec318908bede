#!/usr/bin/env python3
"""Writes the seed corpora of fuzz/corpus/<target>/ (small files, committed): valid inputs cut
down from tests/fixtures and the repository's configs, plus every malformed case of
tests/e2e/bad_input_test.cpp that reaches the parser the target drives. Rerun after adding a
case; files are rewritten, never appended. Crash reproducers are added by hand as
corpus/<target>/crash-<what>."""
import base64, json, os, shutil, struct, sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(ROOT, "tests", "fixtures")
OUT = os.path.join(ROOT, "fuzz", "corpus")


def put(target, name, data):
    d = os.path.join(OUT, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def deep(n=100):  # nesting beyond kMaxJsonDepth (64)
    return "[" * n + "]" * n


# --- safetensors headers ------------------------------------------------------------------
def st(header, data, length=None, raw_header=None):
    h = raw_header if raw_header is not None else json.dumps(header, separators=(",", ":"))
    h = h.encode()
    return struct.pack("<Q", len(h) if length is None else length) + h + data


def valid_header():
    return {"__metadata__": {"format": "pt"},
            "a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
            "b": {"dtype": "BF16", "shape": [2, 2], "data_offsets": [8, 16]},
            "c": {"dtype": "F8_E4M3", "shape": [4], "data_offsets": [16, 20]}}


data = bytes(range(20))
put("safetensors_header", "valid", st(valid_header(), data))
put("safetensors_header", "valid-nan", st(valid_header(), b"\x00\x00\xc0\x7f" + data[4:]))
put("safetensors_header", "empty-header", st({}, b""))
put("safetensors_header", "truncated-shard", st(valid_header(), data[:12]))
put("safetensors_header", "header-length-beyond-the-file", st(valid_header(), data, length=1 << 40))
h = valid_header(); h["b"]["data_offsets"] = [4, 12]
put("safetensors_header", "overlapping-tensors", st(h, data))
h = valid_header(); h["a"]["dtype"] = "F42"
put("safetensors_header", "unknown-dtype", st(h, data))
h = valid_header(); h["b"]["shape"] = [3, 2]
put("safetensors_header", "wrong-byte-count", st(h, data))
hj = json.dumps(valid_header(), separators=(",", ":")).replace('"shape":[2]', '"shape":' + deep())
put("safetensors_header", "deeply-nested-shape", st(None, data, raw_header=hj))
hj = json.dumps(valid_header(), separators=(",", ":"))
hj = hj[:-1] + ',"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}'
put("safetensors_header", "duplicate-tensor-name", st(None, data, raw_header=hj))
put("safetensors_header", "bytes-after-the-last-tensor", st(valid_header(), data + bytes(16)))
h = valid_header(); h["__metadata__"] = {"format": {"nested": "pt"}}
put("safetensors_header", "metadata-not-a-string-map", st(h, data))
h = valid_header(); h["a"]["data_offsets"] = [0, 18446744073709551615]
put("safetensors_header", "offset-overflow", st(h, data))
put("safetensors_header", "short-file", b"\x08\x00\x00")

# --- index.json (the target's folder holds model-00001-of-00002 {a, b}, -00002 {c}) -------
s1, s2 = "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"
good = {"metadata": {"total_size": 20}, "weight_map": {"a": s1, "b": s1, "c": s2}}
put("index_json", "valid", json.dumps(good, indent=2))
put("index_json", "valid-no-metadata", json.dumps({"weight_map": good["weight_map"]}))
put("index_json", "index-names-a-missing-shard",
    json.dumps({"weight_map": {"a": s1, "b": s1, "c": "model-00003-of-00003.safetensors"}}))
put("index_json", "index-path-outside-the-model-folder", json.dumps({"weight_map": {"a": "../" + s1, "b": s1, "c": s2}}))
put("index_json", "index-absolute-path", json.dumps({"weight_map": {"a": "/etc/passwd", "b": s1, "c": s2}}))
put("index_json", "total-size-disagrees", json.dumps({"metadata": {"total_size": 21}, "weight_map": good["weight_map"]}))
put("index_json", "tensor-absent-from-its-shard", json.dumps({"weight_map": {"a": s2, "b": s1, "c": s2}}))
put("index_json", "shard-tensor-missing-from-weight-map", json.dumps({"weight_map": {"a": s1, "c": s2}}))
put("index_json", "duplicate-key", '{"weight_map": {"a": "%s", "a": "%s", "b": "%s", "c": "%s"}}' % (s1, s2, s1, s2))
put("index_json", "deeply-nested", '{"x": %s, "weight_map": {}}' % deep())
put("index_json", "weight-map-not-an-object", '{"weight_map": [1, 2]}')
for m in ("WizardLM-2-8x22B", "llava-1.5-7b-hf"):
    shutil.copy(os.path.join(FIXTURES, "configs", m, "model.safetensors.index.json"),
                os.path.join(OUT, "index_json", "real-" + m))

# --- config.json -> hparams -----------------------------------------------------------------
cfg_dir = os.path.join(FIXTURES, "configs")
for m in sorted(os.listdir(cfg_dir)):
    p = os.path.join(cfg_dir, m, "config.json")
    if os.path.isfile(p):
        put("config_hparams", "real-" + m, open(p, "rb").read())
base = json.load(open(os.path.join(cfg_dir, "Qwen3-0.6B", "config.json")))
small = dict(base, num_hidden_layers=2, hidden_size=64, intermediate_size=128, num_attention_heads=4,
             num_key_value_heads=2, head_dim=16, vocab_size=512)
put("config_hparams", "tiny-qwen3", json.dumps(small))
for key, value in [("num_key_value_heads", "2"), ("rope_theta", "10000"), ("tie_word_embeddings", "false"),
                   ("rms_norm_eps", []), ("max_position_embeddings", 1.5), ("model_type", 7),
                   ("rope_scaling", "yarn"), ("hidden_size", "64")]:
    put("config_hparams", "mistyped-" + key, json.dumps(dict(small, **{key: value})))
put("config_hparams", "unknown-model-type",
    json.dumps(dict(small, model_type="mystery", architectures=["MysteryForCausalLM"])))
put("config_hparams", "heads-do-not-divide", json.dumps(dict(small, num_attention_heads=3)))
put("config_hparams", "deeply-nested", json.dumps(small)[:-1] + ', "x": %s}' % deep())
put("config_hparams", "deeply-nested-quantization-config", json.dumps(small)[:-1] + ', "quantization_config": %s}' % deep())

# --- tokenizer.json: the fixtures cut to their byte-level alphabet and the merges within it ---
def cut_tokenizer(path, keep=300):
    j = json.load(open(path))
    vocab = {t: i for t, i in j["model"]["vocab"].items() if i < keep}
    merges = []
    for m in j["model"]["merges"]:
        a, b = m.split(" ", 1) if isinstance(m, str) else m
        if a in vocab and b in vocab and a + b in vocab:
            merges.append(m)
    j["model"]["vocab"] = vocab
    j["model"]["merges"] = merges
    j["added_tokens"] = j.get("added_tokens", [])[:8]
    return json.dumps(j, ensure_ascii=False)


tok_dir = os.path.join(FIXTURES, "tokenizers")
for t in sorted(os.listdir(tok_dir)):
    p = os.path.join(tok_dir, t, "tokenizer.json")
    if os.path.isfile(p):
        put("tokenizer_json", "cut-" + t, cut_tokenizer(p))
j = json.loads(cut_tokenizer(os.path.join(tok_dir, "qwen3", "tokenizer.json")))
put("tokenizer_json", "merge-names-unknown-token", json.dumps(dict(j, model=dict(j["model"], merges=["zz qq"]))))
put("tokenizer_json", "unknown-model-type", json.dumps(dict(j, model=dict(j["model"], type="Unigram"))))
put("tokenizer_json", "deeply-nested", json.dumps(j)[:-1] + ', "x": %s}' % deep())

# --- tiktoken.model -------------------------------------------------------------------------
lines = [base64.b64encode(bytes([b])).decode() + " " + str(b) for b in range(256)]
merged = [base64.b64encode(w.encode()).decode() for w in ("he", "ll", "hello", " w", "or", "ld", " world")]
valid = lines + ["%s %d" % (m, 256 + i) for i, m in enumerate(merged)]
put("tiktoken", "valid", "\n".join(valid) + "\n")
put("tiktoken", "valid-blank-lines", "\n\n".join(lines) + "\n\n")
put("tiktoken", "bad-base64", "\n".join(lines + ["@@@ 256"]))
put("tiktoken", "missing-rank", "\n".join(lines + ["aGk="]))
put("tiktoken", "three-fields", "\n".join(lines + ["aGk= 256 7"]))
put("tiktoken", "repeated-rank", "\n".join(lines + ["aGk= 255"]))
put("tiktoken", "repeated-token", "\n".join(lines + ["QQ== 256"]))
put("tiktoken", "rank-out-of-range", "\n".join(lines + ["aGk= 9999"]))
put("tiktoken", "negative-rank", "\n".join(lines + ["aGk= -1"]))
put("tiktoken", "byte-without-rank", "\n".join(lines[1:]))

# --- run-config YAML --------------------------------------------------------------------------
for f in sorted(os.listdir(os.path.join(ROOT, "configs"))):
    if f.endswith(".yaml"):
        put("run_config", "repo-" + f, open(os.path.join(ROOT, "configs", f), "rb").read())
put("run_config", "full", """model: {path: models/m, dtype: float32, weights_on_device: as_stored}
backend: cpu
comm: mpi
parallel: {pp: 2, tp: 2, ep: 2}
topology: {device_memory_gib: 80, memory_fraction: 0.9}
limits: {max_prompt_tokens: 4096, max_image_pixels: 50000000}
prompts:
  - {id: capital, text: "The capital of France is", expect: {contains: "Paris"}}
  - {id: raw, tokens: [151644, 872, 198]}
generate: {max_new_tokens: 16, seed: 1234, stop_at_eos: true, top_k_record: 5}
dump:
  dir: runs/{config}-{time}-{jobid}
  activations: {layers: all, points: [layer_out, attn_out], phase: prefill, mode: stats}
watchdog: {collective_timeout_s: 300, phase_timeout_s: 3600}
debug: {perturb: {point: layers.3.ffn_out, scale: 1.001}, stall: {rank: 2, before: "tp all_reduce #40"}}
""")
put("run_config", "malformed-yaml-names-file-and-line", """model: {path: model, dtype: float32}
prompts:
  - {id: capital, text: "The capital of France is"}
generate: {max_new_tokens: 2]
""")
put("run_config", "prompt-longer-than-the-limit", """model: {path: model}
limits: {max_prompt_tokens: 3}
prompts:
  - {id: short, tokens: [1, 2, 3]}
  - {id: long_one, text: "The capital of France is"}
dump: {dir: run}
""")
put("run_config", "unknown-key", "model: {path: m}\nprompts: [{id: p, text: x}]\nbogus: 1\n")
put("run_config", "text-and-tokens", "model: {path: m}\nprompts: [{id: p, text: x, tokens: [1]}]\n")
put("run_config", "anchors-and-aliases", "a: &x {path: m}\nmodel: *x\nprompts: [{id: p, text: x}]\n")
put("run_config", "deeply-nested", "model: {path: m}\nprompts: " + deep(200) + "\n")
print("wrote", sum(len(fs) for _, _, fs in os.walk(OUT)), "files under", OUT)
