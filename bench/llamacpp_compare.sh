#!/usr/bin/env bash
# Side-by-side CPU speed of dayzero and llama.cpp on identical weights: a script a person
# runs (not a test). Builds llama.cpp's llama-bench once into a cache (from the llama.cpp
# tree vendored in the llama-cpp-python sdist on PyPI), makes a 109 M-parameter llama
# checkpoint in f32 or bf16 with `dayzero make-model`, converts it to a GGUF of the same dtype
# with llama.cpp's own converter, then interleaves llama-bench pp512/tg128 with dayzero's
# model_bench and decode_bench (bf16: weights kept as stored) over a few rounds and prints
# medians and the ratios against the targets.
#
# Usage: bench/llamacpp_compare.sh [--setup-only] [--rounds N] [--threads T] [--dtype f32|bf16]
#   env: DAYZERO_LLAMACPP_CACHE (default ~/.cache/dayzero/llama.cpp), BUILD (dayzero build
#        folder, default ./build), LLAMA_CPP_PYTHON_VERSION (pinned sdist version)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${DAYZERO_LLAMACPP_CACHE:-$HOME/.cache/dayzero/llama.cpp}"
BUILD="${BUILD:-$ROOT/build}"
VERSION="${LLAMA_CPP_PYTHON_VERSION:-0.3.16}"
THREADS=2
ROUNDS=3
DTYPE=f32
SETUP_ONLY=0
# The checkpoint: 108.6 M parameters, SmolLM-135M's layers (30 layers, hidden 576, 9 heads /
# 3 kv heads, ffn 1536, tied embeddings) with the 4096-token vocabulary of make-model's
# trained tokenizer (a larger embedding would only add ids no text maps to).
MODEL_FLAGS=(--n-embd 576 --n-layer 30 --n-head 9 --n-head-kv 3 --n-ff 1536 --n-vocab 4096)
PROMPT=512
GEN=128
BATCH=8

die() { echo "llamacpp_compare: $*" >&2; exit 2; }
log() { echo "[llamacpp_compare $(date -u +%H:%M:%S)] $*" >&2; }

while [[ $# -gt 0 ]]; do
  case "$1" in
    --setup-only) SETUP_ONLY=1 ;;
    --rounds) ROUNDS="${2:?--rounds needs a number}"; shift ;;
    --threads) THREADS="${2:?--threads needs a number}"; shift ;;
    --dtype) DTYPE="${2:?--dtype needs f32 or bf16}"; shift ;;
    -h|--help) sed -n '2,11p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
  shift
done
[[ "$ROUNDS" =~ ^[1-9][0-9]*$ ]] || die "--rounds must be a positive integer, got '$ROUNDS'"
[[ "$THREADS" =~ ^[1-9][0-9]*$ ]] || die "--threads must be a positive integer, got '$THREADS'"
[[ "$DTYPE" == f32 || "$DTYPE" == bf16 ]] || die "--dtype must be f32 or bf16, got '$DTYPE'"
# make-model's dtype name, and dayzero's weights: bf16 kept as stored, f32 as they are.
MAKE_DTYPE=float32; BENCH_WEIGHTS=f32
[[ "$DTYPE" == bf16 ]] && MAKE_DTYPE=bfloat16 && BENCH_WEIGHTS=bf16

SRC="$CACHE/llama_cpp_python-$VERSION/vendor/llama.cpp"
LBUILD="$CACHE/build-$VERSION"
LLAMA_BENCH="$LBUILD/bin/llama-bench"
LLAMA_CLI="$LBUILD/bin/llama-cli"  # only for the greedy cross-check of the two runtimes
VENV="$CACHE/venv"
mkdir -p "$CACHE"

# --- 1. llama.cpp source and llama-bench (once) -------------------------------------------
fetch_source() {
  [[ -f "$SRC/CMakeLists.txt" ]] && return 0
  local sdist="$CACHE/llama_cpp_python-$VERSION.tar.gz"
  if [[ ! -f "$sdist" ]]; then
    log "downloading the llama-cpp-python $VERSION sdist from PyPI into $CACHE"
    # The file itself from PyPI's simple index, its sha256 checked: `pip download --no-binary
    # :all:` would first build the sdist's build dependencies (cmake, ninja) from source.
    python3 - "$VERSION" "$sdist" >"$CACHE/pip-download.log" 2>&1 <<'PY' ||
import hashlib, re, sys, urllib.request
version, out = sys.argv[1:3]
name = f"llama_cpp_python-{version}.tar.gz"
html = urllib.request.urlopen("https://pypi.org/simple/llama-cpp-python/", timeout=60).read().decode()
links = [u for u in re.findall(r'href="([^"]+)"', html) if f"/{name}#sha256=" in u]
if not links: sys.exit(f"{name} is not in PyPI's simple index")
url, sha = links[0].split("#sha256=")
data = urllib.request.urlopen(url, timeout=300).read()
if hashlib.sha256(data).hexdigest() != sha: sys.exit(f"{name}: sha256 differs from the index's {sha}")
open(out, "wb").write(data)
print(f"{name}: {len(data)} bytes, sha256 {sha}")
PY
      die "download of llama-cpp-python $VERSION failed (PyPI unreachable or version gone); see $CACHE/pip-download.log"
  fi
  log "unpacking $sdist"
  tar -xzf "$sdist" -C "$CACHE" || die "could not unpack $sdist"
  [[ -f "$SRC/CMakeLists.txt" ]] || die "$sdist has no vendor/llama.cpp/CMakeLists.txt"
}

build_llama_bench() {
  [[ -x "$LLAMA_BENCH" && -x "$LLAMA_CLI" ]] && return 0
  log "building llama-bench and llama-cli (CPU only, GGML_NATIVE, OpenMP, no BLAS) in $LBUILD; takes minutes"
  local launcher=()
  command -v ccache >/dev/null && launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  nice -n 5 cmake -S "$SRC" -B "$LBUILD" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
    -DLLAMA_CURL=OFF -DGGML_BLAS=OFF -DGGML_CUDA=OFF -DGGML_METAL=OFF -DGGML_VULKAN=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF \
    -DBUILD_SHARED_LIBS=OFF "${launcher[@]}" >"$CACHE/cmake-configure.log" 2>&1 ||
    die "cmake configure of llama.cpp failed; see $CACHE/cmake-configure.log"
  nice -n 5 cmake --build "$LBUILD" -j2 --target llama-bench llama-cli >"$CACHE/cmake-build.log" 2>&1 ||
    die "cmake build of llama-bench/llama-cli failed; see $CACHE/cmake-build.log"
  [[ -x "$LLAMA_BENCH" && -x "$LLAMA_CLI" ]] || die "the build finished but $LLAMA_BENCH or $LLAMA_CLI is missing; see $CACHE/cmake-build.log"
}

setup_venv() {
  local imports='import gguf, transformers, mistral_common, sentencepiece'
  [[ -f "$VENV/.ready" ]] && "$VENV/bin/python" -c "$imports" 2>/dev/null && return 0
  # convert_hf_to_gguf.py imports torch, numpy, transformers (< 5), mistral_common, gguf (the
  # vendored gguf-py) and, for llama, sentencepiece (tried before the BPE vocabulary); torch
  # comes from python3's own site-packages (--system-site-packages).
  log "setting up the converter venv in $VENV"
  python3 -m venv --system-site-packages "$VENV" || die "python3 -m venv failed"
  "$VENV/bin/python" -c 'import torch, numpy' 2>/dev/null ||
    die "the converter needs torch and numpy in python3's site-packages (pip install torch --index-url https://download.pytorch.org/whl/cpu)"
  "$VENV/bin/python" -m pip install -q "$SRC/gguf-py" "transformers>=4.45.1,<5" "mistral-common>=1.8.3" \
    "sentencepiece~=0.2.0" >"$CACHE/pip-venv.log" 2>&1 ||
    die "pip install of the converter's packages (gguf-py, transformers<5, mistral-common, sentencepiece) failed; see $CACHE/pip-venv.log"
  "$VENV/bin/python" -c "$imports" >>"$CACHE/pip-venv.log" 2>&1 ||
    die "the converter venv cannot import gguf/transformers/mistral_common/sentencepiece; see $CACHE/pip-venv.log"
  touch "$VENV/.ready"
}

fetch_source
build_llama_bench
setup_venv
if [[ "$SETUP_ONLY" == 1 ]]; then log "setup done: $LLAMA_BENCH"; exit 0; fi

# --- 2. the checkpoint and its GGUF of the same dtype (once) -------------------------------
DAYZERO="$BUILD/src/cli/dayzero"
MODEL_BENCH="$BUILD/bench/model_bench"
DECODE_BENCH="$BUILD/bench/decode_bench"
for b in "$DAYZERO" "$MODEL_BENCH" "$DECODE_BENCH"; do
  [[ -x "$b" ]] || die "$b is missing: build it first (cmake --build $BUILD -j2 --target dayzero model_bench decode_bench) or set BUILD"
done
MODEL="$CACHE/model-llama-109m-$DTYPE"
GGUF="$MODEL/model-$DTYPE.gguf"
if [[ ! -f "$MODEL/config.json" ]]; then
  log "making the checkpoint in $MODEL"
  "$DAYZERO" make-model --family llama --out "$MODEL" --dtype "$MAKE_DTYPE" "${MODEL_FLAGS[@]}" --tie-embeddings \
    >"$CACHE/make-model.log" 2>&1 || die "dayzero make-model failed; see $CACHE/make-model.log"
fi
if [[ ! -f "$GGUF" ]]; then
  log "converting $MODEL to a $DTYPE GGUF with llama.cpp's convert_hf_to_gguf.py"
  # The converter names a BPE pre-tokenizer by hashing a test string's ids against a table of
  # known tokenizers; make-model's tokenizer is freshly trained (not in the table) but is
  # GPT-2's byte-level BPE (ByteLevel pre-tokenizer, GPT-2 split regex, no prefix space),
  # so the pre-tokenizer is named "gpt-2" and everything else is the converter's own code.
  "$VENV/bin/python" - "$SRC" "$MODEL" "$GGUF" "$DTYPE" >"$CACHE/convert.log" 2>&1 <<'PY' ||
import sys
src, model, out, dtype = sys.argv[1:5]
sys.path.insert(0, src)
import convert_hf_to_gguf as conv
conv.TextModel.get_vocab_base_pre = lambda self, tokenizer: "gpt-2"
sys.argv = ["convert_hf_to_gguf.py", model, "--outtype", dtype, "--outfile", out]
conv.main()
PY
    { rm -f "$GGUF"; die "convert_hf_to_gguf.py failed; see $CACHE/convert.log"; }
fi

# Identity of the weights: every GGUF tensor against its safetensors twin, bit for bit (q/k
# rows permuted as the converter does for llama.cpp's rope layout), and the hyperparameters.
log "checking that $GGUF holds the same weights as $MODEL"
WEIGHTS_CHECK="$("$VENV/bin/python" - "$MODEL" "$GGUF" "$DTYPE" <<'PY'
import json, sys, numpy as np, torch
from gguf import GGUFReader
from safetensors.torch import load_file
model, path, dtype = sys.argv[1:4]
cfg = json.load(open(f"{model}/config.json"))
# The stored bits: f32 as float32, bf16 as the int16 of its bits (numpy has no bfloat16).
hf = {k: (v.view(torch.int16) if v.dtype == torch.bfloat16 else v).numpy() for k, v in load_file(f"{model}/model.safetensors").items()}
gtype = dtype.upper()
r = GGUFReader(path)
gg = {t.name: t for t in r.tensors}
nh, nkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
def permute(w, n):
    return w.reshape(n, 2, w.shape[0] // n // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)
names = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
         "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
         "mlp.down_proj": "ffn_down", "input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm"}
bad, n = [], 0
for k, w in hf.items():
    if k == "model.embed_tokens.weight": g = "token_embd.weight"
    elif k == "model.norm.weight": g = "output_norm.weight"
    elif k == "lm_head.weight": g = "output.weight"
    else:
        parts = k.split(".")  # model.layers.N.<a>.<b>.weight
        g = f"blk.{parts[2]}.{names['.'.join(parts[3:-1])]}.weight"
        if parts[4] == "q_proj": w = permute(w, nh)
        if parts[4] == "k_proj": w = permute(w, nkv)
    t = gg.get(g)
    # Norm vectors are written in f32 whatever --outtype says: compare their values.
    want_type = "F32" if w.ndim == 1 else gtype
    if t is None or t.tensor_type.name != want_type:
        bad.append(f"{g} missing or not {want_type}"); continue
    a = np.asarray(t.data)
    if w.ndim == 1 and w.dtype == np.int16:
        w = (w.astype(np.uint16).astype(np.uint32) << 16).view(np.float32)
    if a.tobytes() != np.ascontiguousarray(w).tobytes(): bad.append(f"{g} differs from {k}")
    n += 1
extra = set(gg) - {"token_embd.weight", "output_norm.weight", "output.weight"} - {
    f"blk.{i}.{v}.weight" for i in range(cfg["num_hidden_layers"]) for v in names.values()}
bad += [f"{e} not in the checkpoint" for e in sorted(extra) if not e.startswith("rope_")]
def field(key):
    f = r.fields[key]
    return f.parts[f.data[0]].tolist()[0]
for key, want in [("llama.block_count", cfg["num_hidden_layers"]), ("llama.embedding_length", cfg["hidden_size"]),
                  ("llama.feed_forward_length", cfg["intermediate_size"]), ("llama.attention.head_count", nh),
                  ("llama.attention.head_count_kv", nkv)]:
    if field(key) != want: bad.append(f"{key} {field(key)} != {want}")
for key, want in [("llama.rope.freq_base", cfg.get("rope_theta", 10000.0)),
                  ("llama.attention.layer_norm_rms_epsilon", cfg["rms_norm_eps"])]:
    if abs(field(key) - want) > 1e-6 * abs(want): bad.append(f"{key} {field(key)} != {want}")
params = sum(int(np.prod(w.shape)) for w in hf.values())
print(f"{n} {dtype} tensors ({params / 1e6:.1f} M parameters) bit-identical, hyperparameters equal" if not bad
      else "MISMATCH: " + "; ".join(bad[:5]))
PY
)" || die "the weights check failed to run"
log "weights: $WEIGHTS_CHECK"
[[ "$WEIGHTS_CHECK" != MISMATCH* ]] || die "the GGUF does not hold the checkpoint's weights: $WEIGHTS_CHECK"

# --- 3. the two tools, interleaved over rounds ----------------------------------------------
RUN_DIR="$(mktemp -d "$CACHE/run-XXXXXX")"
trap 'rm -rf "$RUN_DIR"' EXIT

# Same computation: greedy text of one prompt from `dayzero run` and from llama-cli.
GREEDY_PROMPT="The capital of France is"
GREEDY_TOKENS=8
cat >"$RUN_DIR/greedy.yaml" <<YAML
model: {path: $MODEL, dtype: float32}
backend: cpu
prompts:
  - {id: greedy, text: "$GREEDY_PROMPT"}
generate: {max_new_tokens: $GREEDY_TOKENS, stop_at_eos: false, top_k_record: 1}
dump: {dir: $RUN_DIR/greedy-run}
YAML
OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 DAYZERO_THREADS="$THREADS" \
  "$DAYZERO" run "$RUN_DIR/greedy.yaml" >"$RUN_DIR/greedy-dayzero.txt" 2>&1 ||
  die "dayzero run of the greedy check failed: $(tail -3 "$RUN_DIR/greedy-dayzero.txt")"
# make-model's tokenizer adds BOS through its post-processor (as Llama 3's does); the GGUF has
# no add_bos_token key, so llama-cli is told to add it: both then consume the same ids.
"$LLAMA_CLI" -m "$GGUF" -p "$GREEDY_PROMPT" -n "$GREEDY_TOKENS" --temp 0 -no-cnv --no-warmup -t "$THREADS" \
  --override-kv tokenizer.ggml.add_bos_token=bool:true --verbose-prompt --no-display-prompt -s 1 </dev/null \
  >"$RUN_DIR/greedy-llama.txt" 2>"$RUN_DIR/greedy-llama.err" ||
  die "llama-cli of the greedy check failed: $(tail -3 "$RUN_DIR/greedy-llama.err")"
GREEDY="$(python3 - "$RUN_DIR/greedy-dayzero.txt" "$RUN_DIR/greedy-llama.txt" "$RUN_DIR/greedy-llama.err" \
  "$GREEDY_PROMPT" "$GREEDY_TOKENS" <<'PY'
import re, sys
dz = open(sys.argv[1], encoding="utf-8", errors="replace").read()
lc = open(sys.argv[2], encoding="utf-8", errors="replace").read()
err = open(sys.argv[3], encoding="utf-8", errors="replace").read()
m = re.search(r"\n\[greedy\] .*?\n  -> (.*?)\n  ids: ([0-9 ]*)", dz, re.S)
dz_text, dz_ids = (m.group(1), m.group(2).split()) if m else ("?", [])
lc_text = re.sub(r"\s*\[end of text\]\s*$", "", lc).rstrip("\n")
n_prompt = re.search(r"number of tokens in prompt = (\d+)", err)
n_prompt = n_prompt.group(1) if n_prompt else "?"
same = dz_text == lc_text and dz_text != ""
print(("identical" if same else "DIFFERENT") + f" greedy text for {sys.argv[4]!r} ({sys.argv[5]} tokens, "
      f"llama.cpp prompt {n_prompt} ids): dayzero {dz_text!r}" + ("" if same else f", llama.cpp {lc_text!r}"))
PY
)"
log "greedy: $GREEDY"
loadavg() { cut -d' ' -f1 /proc/loadavg; }
# The first number after a label on a line of a bench's output.
grab() { sed -n "s/^ *$2 *\([0-9.]*\).*/\1/p" "$1" | head -1; }
# One round's figures on one line: llama.cpp pp, tg (mean of its 3 repetitions); dayzero
# prefill, batch-1 and batch-B decode tok/s; dayzero prefill and GEMM-only GFLOP/s.
round_line() {
  local r="$1" m="$RUN_DIR/model-$1.txt" d="$RUN_DIR/decode-$1.txt"
  python3 - "$RUN_DIR/llama-$r.json" "$PROMPT" "$GEN" <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))
pp = [x["avg_ts"] for x in rows if x["n_prompt"] == int(sys.argv[2]) and x["n_gen"] == 0]
tg = [x["avg_ts"] for x in rows if x["n_gen"] == int(sys.argv[3]) and x["n_prompt"] == 0]
print(f"{pp[0]:.2f} {tg[0]:.2f}", end=" ")
PY
  echo "$(sed -n 's/^prefill .*, \([0-9.]*\) tok\/s.*/\1/p' "$m") $(grab "$d" 'batch 1') $(grab "$d" "batch $BATCH") \
$(grab "$m" prefill) $(grab "$m" 'gemm only')"
}
LOADS=("$(loadavg)")
log "$ROUNDS rounds, $THREADS threads; load average $(loadavg) at start"
for ((r = 1; r <= ROUNDS; r++)); do
  log "round $r/$ROUNDS: llama-bench pp$PROMPT tg$GEN"
  "$LLAMA_BENCH" -m "$GGUF" -p "$PROMPT" -n "$GEN" -t "$THREADS" -r 3 -o json >"$RUN_DIR/llama-$r.json" \
    2>"$RUN_DIR/llama-$r.err" || die "llama-bench failed: $(tail -3 "$RUN_DIR/llama-$r.err")"
  LOADS+=("$(loadavg)")
  log "round $r/$ROUNDS: model_bench (prefill of $PROMPT tokens, GEMM-only at the same shapes)"
  MODEL_WEIGHTS=f32; [[ "$DTYPE" == bf16 ]] && MODEL_WEIGHTS=as_stored
  DAYZERO_THREADS="$THREADS" "$MODEL_BENCH" --dir "$MODEL" --tokens "$PROMPT" --threads "$THREADS" --weights "$MODEL_WEIGHTS" \
    >"$RUN_DIR/model-$r.txt" 2>&1 || die "model_bench failed: $(tail -3 "$RUN_DIR/model-$r.txt")"
  LOADS+=("$(loadavg)")
  log "round $r/$ROUNDS: decode_bench (batch 1 and batch $BATCH, $GEN decode steps after a 1-token prompt)"
  # --steps counts the token the prefill yields: GEN + 1 generated tokens are GEN decode steps.
  DAYZERO_THREADS="$THREADS" "$DECODE_BENCH" --dir "$MODEL" --batch "$BATCH" --prompt 1 --steps $((GEN + 1)) \
    --threads "$THREADS" --repeats 1 --weights "$BENCH_WEIGHTS" >"$RUN_DIR/decode-$r.txt" 2>&1 ||
    die "decode_bench failed (exit $?): $(tail -3 "$RUN_DIR/decode-$r.txt")"
  LOADS+=("$(loadavg)")
  round_line "$r" >>"$RUN_DIR/rounds.txt"
  log "round $r/$ROUNDS (llama pp, tg | dayzero prefill, b1, b$BATCH tok/s | prefill, gemm GFLOP/s): $(tail -1 "$RUN_DIR/rounds.txt")"
done

BACKEND="$(sed -n 's/^backend: //p' "$RUN_DIR/decode-1.txt")"
SAME_IDS="$(sed -n 's/^sequence 0 generated ids //p' "$RUN_DIR/decode-$ROUNDS.txt")"

python3 - "$RUN_DIR/rounds.txt" "$PROMPT" "$GEN" "$BATCH" "$THREADS" "${LOADS[*]}" "$DTYPE" <<'PY'
import statistics as st, sys
rows = [list(map(float, l.split())) for l in open(sys.argv[1]) if l.strip()]
p, g, b, t = sys.argv[2:6]
loads = list(map(float, sys.argv[6].split()))
med = [st.median(c) for c in zip(*rows)]
lpp, ltg, dpp, dtg, db, pgf, ggf = med
print(f"\n{sys.argv[7]} weights: medians of {len(rows)} interleaved rounds, {t} threads; load average {min(loads):.2f}-{max(loads):.2f}"
      f" (median {st.median(loads):.2f}) during the run\n")
print(f"{'':24}{'llama.cpp':>12}{'dayzero':>12}{'ratio':>8}{'target':>9}  met")
def row(name, a, d, target):
    ratio = d / a
    print(f"{name:24}{a:12.1f}{d:12.1f}{ratio:8.2f}{target:>9}  {'yes' if ratio >= float(target[2:-1]) else 'NO'}")
row(f"prefill pp{p} tok/s", lpp, dpp, ">=1.0x")
row(f"decode tg{g} tok/s", ltg, dtg, ">=1.0x")
def own(name, base, val, target, unit):
    ratio = val / base
    print(f"{name:24}{'':12}{val:12.1f}{ratio:8.2f}{target:>9}  {'yes' if ratio >= float(target[2:-1]) else 'NO'}"
          f"   (vs {base:.1f} {unit})")
own(f"decode batch {b} tok/s", dtg, db, ">=4.0x", "tok/s at batch 1")
own("prefill GFLOP/s", ggf, pgf, ">=0.9x", "GFLOP/s GEMM-only")
print("\nper round (llama pp, llama tg, dayzero prefill, decode b1, decode b%s tok/s, prefill GFLOP/s, gemm GFLOP/s):" % b)
for r in rows: print("  " + "  ".join(f"{x:.1f}" for x in r))
PY
echo "dayzero backend: $BACKEND; sequence 0 ids at batch 1 vs batch $BATCH: $SAME_IDS"
echo "weights: $WEIGHTS_CHECK"
echo "greedy: $GREEDY"
echo "llama.cpp: llama-cpp-python $VERSION sdist (vendor/llama.cpp), $("$LLAMA_BENCH" --help >/dev/null 2>&1; \
  python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))[0]; print(r.get("build_commit","?"), r.get("cpu_info",""), "backends", r.get("backends",""))' "$RUN_DIR/llama-1.json")"
