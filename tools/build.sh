#!/usr/bin/env bash
# Configures and builds dayzero into build/ (Release with line-table debug info, Ninja).
#   bash tools/build.sh [TARGET...]   only these targets (default: everything)
# Prints "building N of M" about every tenth of the way while it compiles, and what the
# compiler says; a build that is up to date costs a second.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ ! -f build/build.ninja ]]; then
  rm -rf build   # a build folder of another generator cannot be reused by Ninja
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
fi
targets=()
for t in "$@"; do targets+=(--target "$t"); done
# Ninja's own counter ("[N/M] "), read line by line as it comes.
NINJA_STATUS="[%f/%t] " cmake --build build -j"$(nproc)" "${targets[@]}" | {
  while IFS= read -r line; do
    if [[ $line =~ ^\[([0-9]+)/([0-9]+)\]\  ]]; then
      n=${BASH_REMATCH[1]} m=${BASH_REMATCH[2]}
      step=$((m / 10 > 0 ? m / 10 : 1))
      if ((n % step == 0 || n == m)); then echo "  building $n of $m"; fi
    elif [[ $line != "ninja: no work to do." ]]; then
      echo "$line"
    fi
  done
}
exit "${PIPESTATUS[0]}"
