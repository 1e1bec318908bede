#!/usr/bin/env bash
# `dayzero verify` throughput vs `sha256sum` of the same files run in parallel (not a test).
# Makes a real (non-sparse) bf16 llama checkpoint of about 1.9 GB in 8 shards under /tmp
# (deleted at exit), warms the page cache, then for 1, 2 and 4 ranks times
# `mpirun -np N dayzero verify` next to `xargs -P N sha256sum` over the shards, alternating,
# best of --runs, and prints both throughputs and their ratio (target >= 0.9).
# Usage: bench/verify_bench.sh [build dir] [runs] [model dir to reuse]
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
build="$(cd "${1:-$here/build}" && pwd)"
runs="${2:-3}"
bin="$build/src/cli/dayzero"
work="$(mktemp -d /tmp/verify-bench.XXXXXX)"
trap 'rm -rf "$work"' EXIT
if [[ $(id -u) -eq 0 ]]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
model="${3:-$work/model}"
if [[ ! -f "$model/config.json" ]]; then
  "$bin" make-model --family llama --n-vocab 32000 --n-embd 2048 --n-layer 16 --n-head 16 --n-head-kv 16 \
    --n-ff 5632 --shards 8 --out "$model" >/dev/null
fi
files=("$model"/*.safetensors)
bytes=$(cat "${files[@]}" | wc -c)  # also warms the page cache
printf "checkpoint: %d files, %d bytes; sha256 via %s\n" "${#files[@]}" "$bytes" \
  "$(grep -q sha_ni /proc/cpuinfo && echo 'SHA-NI (dayzero)' || echo 'portable (dayzero)')"
now() { date +%s.%N; }
for np in 1 2 4; do
  best_v=1e9; best_s=1e9; best_int=1e9
  for ((i = 0; i < runs; ++i)); do
    t0=$(now)
    mpirun -np "$np" --oversubscribe "$bin" verify "$model" --json > "$work/report.json"
    t1=$(now)
    printf '%s\n' "${files[@]}" | xargs -P "$np" -n 1 sha256sum > /dev/null
    t2=$(now)
    int=$(python3 -c "import json; print(json.load(open('$work/report.json'))['wall_seconds'])")
    best_v=$(python3 -c "print(min($best_v, $t1 - $t0))")
    best_s=$(python3 -c "print(min($best_s, $t2 - $t1))")
    best_int=$(python3 -c "print(min($best_int, $int))")
  done
  python3 -c "
b, v, s, i = $bytes, $best_v, $best_s, $best_int
print(f'ranks {$np}: verify {b / v / 1e9:.2f} GB/s ({v:.2f} s with mpirun start; {b / i / 1e9:.2f} GB/s reading)'
      f', sha256sum -P {$np} {b / s / 1e9:.2f} GB/s ({s:.2f} s), ratio {s / v:.2f} (reading only {s / i:.2f})')"
done
