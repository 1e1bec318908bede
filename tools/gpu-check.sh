#!/usr/bin/env bash
# The GPU checks of the CUDA backend, in two halves, because the GPU machine can build nothing:
#   tools/gpu-check.sh pack [OUT_DIR]   here: builds with CUDA (sm_80, sm_90), packs dayzero, the
#       gpu-labelled test binaries, cuda_bench, the shared libraries they need and Open MPI's
#       launcher and orted with its components into OUT_DIR/dayzero-gpu.tar.xz (checked < 64 MiB).
#   dayzero-gpu/run.sh tests OUT_DIR    there, first call (<= 300 s with unpacking): environment,
#       the last-error probe, kernels, NCCL smoke, stored load, preflight's device path, end to
#       end (220 s at most).
#   dayzero-gpu/run.sh bench OUT_DIR    there, a second call only if device time is left (<= 300 s):
#       load GB/s to device vs raw read, prefill TFLOP/s vs cuBLAS bf16 GEMMs of the same shapes,
#       decode tokens/s vs the memory-bandwidth bound, on a generated ~0.6 B bf16 llama.
#   Each call leaves summary-<call>.txt and logs-<call>.tgz in OUT_DIR; `run.sh tests --dry-run`
#   checks the plan and the packing anywhere (docs/cuda.md).
# Not packed: cudart, cuBLAS, cuBLASLt, NCCL and the driver; run.sh takes them from the GPU
# machine's Python environment (its nvidia-* wheels) or its CUDA toolkit.
set -euo pipefail

usage() { sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
[[ $# -ge 1 && $1 == pack ]] || usage

ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${2:-$ROOT/build-gpu-pack}
BUILD=${DAYZERO_GPU_BUILD_DIR:-$ROOT/build}
LIMIT=$((64 << 20))
# Only what needs the GPU: the CPU-only tests run in CI, not on device time.
TARGETS=(dayzero cuda_bench cuda_probe_test cuda_kernels_test nccl_smoke_test cuda_e2e_test cuda_stored_load_test
         cuda_preflight_test)

echo "gpu-check: building ${TARGETS[*]} in $BUILD (CUDA on)"
cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDAYZERO_CUDA=ON \
  -DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache >/dev/null
nice -n 5 cmake --build "$BUILD" -j2 --target "${TARGETS[@]}" >/dev/null

rm -rf "$OUT/dayzero-gpu"
P=$OUT/dayzero-gpu
mkdir -p "$P/bin" "$P/lib" "$P/ompi/bin" "$P/ompi/lib/openmpi3" "$P/ompi/share" "$P/pmix/lib" "$P/tests/data"

binaries=("$BUILD/src/cli/dayzero" "$BUILD/bench/cuda_bench" "$BUILD/tests/unit/cuda/cuda_probe_test"
          "$BUILD/tests/unit/cuda/cuda_kernels_test" "$BUILD/tests/unit/cuda/nccl_smoke_test"
          "$BUILD/tests/e2e/cuda_e2e_test" "$BUILD/tests/unit/cuda/cuda_stored_load_test"
          "$BUILD/tests/e2e/cuda_preflight_test")
for b in "${binaries[@]}"; do
  [[ -x $b ]] || { echo "gpu-check: $b was not built" >&2; exit 3; }
  strip --strip-debug -o "$P/bin/$(basename "$b")" "$b"
done

# Open MPI 4.1 (Debian layout): the launcher, its MCA components, help files; PMIx's components.
ompi_pkglib=$(ompi_info --path pkglibdir --parsable | sed 's/^path:pkglibdir://')
ompi_pkgdata=$(ompi_info --path pkgdatadir --parsable | sed 's/^path:pkgdatadir://')
cp "$(readlink -f "$(command -v orterun)")" "$P/ompi/bin/orterun"
# A process started without mpiexec (a singleton: the 1-rank runs of the tests) spawns orted.
cp "$(readlink -f "$(command -v orted)")" "$P/ompi/bin/orted"
ln -sf orterun "$P/ompi/bin/mpiexec"
ln -sf orterun "$P/ompi/bin/mpirun"
cp "$ompi_pkglib"/*.so "$P/ompi/lib/openmpi3/"
cp -r "$ompi_pkgdata" "$P/ompi/share/openmpi"
pmix_dir=/usr/lib/x86_64-linux-gnu/pmix2
if [[ -d $pmix_dir/lib/pmix ]]; then
  cp -r "$pmix_dir/lib/pmix" "$P/pmix/lib/pmix"
  [[ -d $pmix_dir/share ]] && cp -r "$pmix_dir/share" "$P/pmix/share"
fi

# Shared libraries of everything above, except glibc's own and what the GPU machine provides.
skip='^(linux-vdso|ld-linux|libc\.so|libm\.so|libpthread|libdl\.so|librt\.so|libresolv|libcuda\.so|libcudart|libcublas|libcublasLt|libnccl|libnvidia)'
collect() {
  ldd "$1" 2>/dev/null | awk '/=> \// {print $1, $3}' | while read -r name path; do
    [[ $name =~ $skip ]] && continue
    [[ -e $P/lib/$name ]] || cp -L "$path" "$P/lib/$name"
  done
}
for f in "$P"/bin/* "$P"/ompi/bin/orterun "$P"/ompi/bin/orted "$P"/ompi/lib/openmpi3/*.so "$P"/pmix/lib/pmix/*.so; do
  [[ -f $f ]] && collect "$f"
done
# dlopen()ed at run time, so ldd cannot see it: OpenBLAS (the CPU reference's GEMM) and its deps.
openblas=$(ldconfig -p | awk '/libopenblas\.so\.0 / {print $NF; exit}')
if [[ -n $openblas ]]; then
  cp -L "$openblas" "$P/lib/libopenblas.so.0"
  collect "$P/lib/libopenblas.so.0"
fi
for l in "$P"/lib/*.so*; do strip --strip-debug "$l" 2>/dev/null || true; done

cp "$ROOT"/tests/data/golden/*.yaml "$P/tests/data/" 2>/dev/null || true
mkdir -p "$P/tests/data/golden" && mv "$P"/tests/data/*.yaml "$P/tests/data/golden/"
cp "$ROOT/tools/gpu-check-run.sh" "$P/run.sh"
chmod +x "$P/run.sh"

tar -C "$OUT" -cJf "$OUT/dayzero-gpu.tar.xz" dayzero-gpu
size=$(stat -c %s "$OUT/dayzero-gpu.tar.xz")
echo "gpu-check: packed $(du -sh "$P" | cut -f1) into $OUT/dayzero-gpu.tar.xz: $((size >> 20)) MiB ($size bytes)"
if ((size >= LIMIT)); then
  echo "gpu-check: the pack is $size bytes, over the 64 MiB that travels to the GPU machine" >&2
  exit 3
fi
echo "gpu-check: on the GPU machine: tar -xJf dayzero-gpu.tar.xz -C /tmp && /tmp/dayzero-gpu/run.sh tests OUT_DIR"
echo "gpu-check: then, if device time is left: /tmp/dayzero-gpu/run.sh bench OUT_DIR"
