#!/usr/bin/env bash
# Runs `dayzero run CONFIG` on this machine with NP MPI ranks (default 1), oversubscribing
# cores and giving each rank its share of them as GEMM threads.
# Usage: launch/mpirun-local.sh CONFIG.yaml [NP] [extra dayzero run flags...]
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
config="${1:?usage: $0 CONFIG.yaml [NP] [flags...]}"
np="${2:-1}"
shift $(( $# >= 2 ? 2 : 1 ))
bin="${DAYZERO_BIN:-$here/build/src/cli/dayzero}"
if [[ $(id -u) -eq 0 ]]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
threads=$(( $(nproc) / np )); (( threads < 1 )) && threads=1
exec mpirun -np "$np" --oversubscribe --bind-to none -x DAYZERO_THREADS="$threads" \
  -x OPENBLAS_NUM_THREADS="$threads" "$bin" run "$config" "$@"
