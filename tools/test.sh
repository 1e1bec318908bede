#!/usr/bin/env bash
# Installs what is missing, builds, and runs the whole test suite (CPU, MPI ranks oversubscribed
# on this machine, one BLAS thread per rank).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/build.sh
cd build
ctest --output-on-failure --timeout 600 -j"$(nproc)"
