#!/usr/bin/env bash
# Installs what is missing, builds, prints the CPU and the kernel paths the suite covers, and
# runs the whole test suite (CPU, MPI ranks oversubscribed on this machine, one BLAS thread per
# rank); then, where clang-14 is installed, builds the libFuzzer targets of fuzz/ in build-fuzz/
# (only their libraries) and runs their fixed-seed
# pass (ctest label fuzz). The suite includes the multi-node tests (label multinode, network
# namespaces: they need root; under CI=true a bed that cannot be made fails them, elsewhere
# they skip with the reason).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install_deps.sh --tests
bash tools/build.sh
# Which CPU this is and which kernel paths the suite covers: the partition, as-stored and golden
# tests run once as a run would (the widest instruction set, the large-M path timed at start-up)
# and once per path below (ctest label kernel-path; a path this CPU cannot run is skipped).
build/src/cli/dayzero kernels | sed 's/^/test.sh: /'
echo "test.sh: kernel paths this machine runs, each a ctest variant (isa=* with the built-in large-M path, large_m=* at the widest isa): $(build/src/cli/dayzero kernels --list | tr '\n' ' ')"
(cd build && ctest --output-on-failure --timeout 600 -j"$(nproc)")
if command -v clang++-14 >/dev/null && command -v clang-14 >/dev/null; then
  launcher=()
  command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
  CC=clang-14 CXX=clang++-14 cmake -S . -B build-fuzz -DDAYZERO_FUZZ=ON -DDAYZERO_CUDA=OFF \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo "${launcher[@]}" >/dev/null
  cmake --build build-fuzz -j"$(nproc)" --target fuzz_targets
  ctest --test-dir build-fuzz -L fuzz --output-on-failure --timeout 600 -j"$(nproc)"
else
  echo "test.sh: clang-14 not installed: the fuzz targets were not built or run"
fi
