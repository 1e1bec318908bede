#!/usr/bin/env bash
# Static analysis and planning at full scale without the bytes: a sparse checkpoint with the
# exact layout of a published trillion-parameter model (make-model --like --sparse: headers
# written, tensor data left as filesystem holes), then `inspect`, `plan` and
# `verify --structure-only` on it, each timed (best of N). Target: inspect + plan under 2 s.
# Not a test: a person runs it; the figures go to docs/performance.md.
#
#   bash bench/full_layout_bench.sh [BUILD_DIR] [CONFIG_DIR] [ROUNDS]
set -euo pipefail

build=${1:-build}
like=${2:-tests/fixtures/configs/Kimi-K2-Instruct}
rounds=${3:-5}
dz="$build/src/cli/dayzero"
[[ -x $dz ]] || { echo "full_layout_bench: no $dz (build first)" >&2; exit 2; }
[[ -f $like/config.json ]] || { echo "full_layout_bench: no config.json in $like" >&2; exit 2; }

work=$(mktemp -d /tmp/dz-full-layout.XXXXXX)
trap 'rm -rf "$work"' EXIT
out="$work/model"
index_args=()
[[ -f $like/model.safetensors.index.json ]] && index_args=(--index "$like/model.safetensors.index.json")

t0=$(date +%s.%N)
"$dz" make-model --like "$like" "${index_args[@]}" --sparse --out "$out" >/dev/null
t1=$(date +%s.%N)
apparent=$(du -sb --apparent-size "$out" | cut -f1)
on_disk=$(du -s -B1 "$out" | cut -f1)
shards=$(ls "$out"/*.safetensors | wc -l)
printf 'layout: %s, %d shards, %.1f GB apparent, %.1f MB on disk, written in %.2f s\n' \
  "$like" "$shards" "$(awk "BEGIN{print $apparent / 1e9}")" "$(awk "BEGIN{print $on_disk / 1e6}")" \
  "$(awk "BEGIN{print $t1 - $t0}")"

# best-of-N wall time of one command, in seconds
best() {
  local b=999999 s e d
  for ((i = 0; i < rounds; i++)); do
    s=$(date +%s.%N)
    "$@" >/dev/null
    e=$(date +%s.%N)
    d=$(echo "$e - $s" | bc -l)
    if (($(echo "$d < $b" | bc -l))); then b=$d; fi
  done
  echo "$b"
}

t_inspect=$(best "$dz" inspect "$out")
t_plan=$(best "$dz" plan --model "$out" --nodes 16 --gpus-per-node 8 --gpu-mem 80GiB)
t_verify=$(best "$dz" verify "$out" --structure-only)
total=$(echo "$t_inspect + $t_plan" | bc -l)
printf 'inspect %.3f s, plan (16 x 8 x 80 GiB) %.3f s, verify --structure-only %.3f s (best of %d)\n' \
  "$t_inspect" "$t_plan" "$t_verify" "$rounds"
printf 'inspect + plan %.3f s vs target 2 s: ratio %.2f (%s)\n' "$total" "$(echo "$total / 2" | bc -l)" \
  "$( (($(echo "$total < 2" | bc -l))) && echo met || echo 'not met')"
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
