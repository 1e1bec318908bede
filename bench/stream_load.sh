#!/usr/bin/env bash
# Streamed weight loading per rank vs a raw read of the same bytes (not a test).
# For 1, 2 and 4 ranks (tensor-parallel, so every rank reads its own slices of every
# tensor), runs `dayzero run` on the bench model with max_new_tokens 0 and prints each rank's
# load GB/s (bytes of its slices / its load time) next to a plain sequential read of the
# checkpoint files with a warm page cache. Usage: bench/stream_load.sh [build dir] [model dir]
# (default: the bf16 bench model, generated once; load_bench's build/bench-load-f32 and
# build/bench-load-bf16 work too).
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
build="$(cd "${1:-$here/build}" && pwd)"  # absolute: the run config lives in a temp folder
bin="$build/src/cli/dayzero"
model="${2:-$build/bench-model}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
if [[ $(id -u) -eq 0 ]]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
if [[ ! -f "$model/config.json" ]]; then
  "$bin" make-model --family llama --n-vocab 8192 --n-embd 1024 --n-layer 8 --n-head 16 --n-head-kv 8 \
    --n-ff 2816 --shards 2 --out "$model" >/dev/null
fi
model="$(cd "$model" && pwd)"
cat "$model"/*.safetensors >/dev/null  # warm the page cache
bytes=$(cat "$model"/*.safetensors | wc -c)
t0=$(date +%s.%N); cat "$model"/*.safetensors >/dev/null; t1=$(date +%s.%N)
raw=$(python3 -c "print($bytes / ($t1 - $t0) / 1e9)")
printf "raw sequential read: %.2f GB/s (%d bytes)\n" "$raw" "$bytes"
for np in 1 2 4; do
  cat > "$work/run.yaml" <<YAML
model: {path: $model, dtype: float32}
parallel: {tp: $np}
prompts: [{id: p, tokens: [1, 2, 3]}]
generate: {max_new_tokens: 1}
dump: {enabled: false, dir: $work/run-$np}
YAML
  threads=$(( $(nproc) / np )); (( threads < 1 )) && threads=1
  mpirun -np "$np" --oversubscribe -x DAYZERO_THREADS=$threads "$bin" run "$work/run.yaml" 2>&1 |
    python3 -c '
import re, sys
np, raw = int(sys.argv[1]), float(sys.argv[2])
for line in sys.stdin:
    m = re.search(r"rank (\d+) timings: load ([0-9.]+) s \(([0-9.]+) GB/s", line)
    if m:
        print(f"ranks {np}: rank {m[1]} load {m[2]} s, {m[3]} GB/s, ratio to raw read {float(m[3]) / raw:.2f}")
' "$np" "$raw"
done
