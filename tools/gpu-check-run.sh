#!/usr/bin/env bash
# The GPU half of tools/gpu-check.sh, packed as dayzero-gpu/run.sh: on a machine with an NVIDIA
# GPU (one H200 in mind) and nothing of dayzero's build, runs every gpu-labelled test binary and
# the bench, and prints the figures. cudart, cuBLAS(Lt) and NCCL come from this machine's Python
# nvidia-* wheels (or a CUDA toolkit under /usr/local/cuda*); everything else from lib/ here.
# Budget: under 8 minutes (tests ~3, bench ~2). Usage: run.sh [WORK_DIR (default /tmp/dayzero-gpu-work)];
# SKIP_BENCH=1 runs the tests only (a dry run of the script where no GPU is).
set -uo pipefail

P=$(cd "$(dirname "$0")" && pwd)
W=${1:-/tmp/dayzero-gpu-work}
mkdir -p "$W"
T0=$SECONDS

# --- CUDA libraries of this machine ------------------------------------------------------------
cuda_dirs=()
add_dir() { [[ -d $1 ]] && [[ " ${cuda_dirs[*]} " != *" $1 "* ]] && cuda_dirs+=("$1"); }
py=$(command -v python3 || command -v python || true)
if [[ -n $py ]]; then
  while read -r sp; do
    [[ -d $sp/nvidia ]] || continue
    while read -r f; do add_dir "$(dirname "$f")"; done < <(find "$sp/nvidia" \( -name 'libcublas.so.*' -o \
      -name 'libcublasLt.so.*' -o -name 'libcudart.so.*' -o -name 'libnccl.so.*' \) 2>/dev/null)
  done < <("$py" -c 'import site, sys; print("\n".join(site.getsitepackages() + [site.getusersitepackages()] + sys.path))')
fi
for d in /usr/local/cuda/lib64 /usr/local/cuda-*/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do add_dir "$d"; done
LD=$(IFS=:; echo "${cuda_dirs[*]}")
export LD_LIBRARY_PATH="$P/lib${LD:+:$LD}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
echo "gpu-check: CUDA library folders: ${cuda_dirs[*]:-none found}"
missing=$(ldd "$P/bin/dayzero" | grep 'not found' || true)
if [[ -n $missing ]]; then
  echo "gpu-check: dayzero cannot load (built against CUDA 13, cuBLAS 13, NCCL 2):" >&2
  echo "$missing" >&2
  exit 3
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || true

# --- Open MPI, relocated to this folder --------------------------------------------------------
export OPAL_PREFIX=$P/ompi OPAL_EXEC_PREFIX=$P/ompi OPAL_BINDIR=$P/ompi/bin OPAL_LIBDIR=$P/lib
export OPAL_PKGLIBDIR=$P/ompi/lib/openmpi3 OPAL_DATAROOTDIR=$P/ompi/share OPAL_DATADIR=$P/ompi/share
export OPAL_PKGDATADIR=$P/ompi/share/openmpi OPAL_SYSCONFDIR=$P/ompi/etc
export OMPI_MCA_mca_base_component_path=$P/ompi/lib/openmpi3
export PMIX_MCA_mca_base_component_path=$P/pmix/lib/pmix PMIX_INSTALL_PREFIX=$P/pmix
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export PATH=$P/ompi/bin:$P/bin:$PATH
# What the test binaries find through ctest elsewhere.
export DAYZERO_BIN=$P/bin/dayzero DAYZERO_SOURCE_DIR=$P DAYZERO_SCRATCH_DIR=$W/scratch
export OPENBLAS_NUM_THREADS=1 DAYZERO_THREADS=4

# --- the tests ---------------------------------------------------------------------------------
failed=()
run_test() {  # name, timeout, command...
  local name=$1 limit=$2
  shift 2
  local t=$SECONDS
  if timeout "$limit" "$@" >"$W/$name.log" 2>&1; then
    echo "gpu-check: PASS $name ($((SECONDS - t)) s)"
  else
    echo "gpu-check: FAIL $name ($((SECONDS - t)) s); the end of $W/$name.log:"
    tail -40 "$W/$name.log"
    failed+=("$name")
  fi
  grep -h "SKIPPED\|^\[  FAILED" "$W/$name.log" | head -20 || true
}
run_test cuda_probe_test 60 "$P/bin/cuda_probe_test"
run_test cuda_kernels_test 120 "$P/bin/cuda_kernels_test"
run_test cuda_stored_load_test 120 "$P/bin/cuda_stored_load_test"
run_test nccl_smoke_test 60 "$P/bin/nccl_smoke_test"
run_test mpi_staged_comm_test 60 mpiexec -n 2 --oversubscribe "$P/bin/mpi_staged_comm_test"
run_test device_weight_bytes_test 60 "$P/bin/device_weight_bytes_test"
run_test router_test 60 "$P/bin/router_test"
run_test checkpoint_load_stored_test 60 "$P/bin/checkpoint_load_stored_test"
run_test stored_dtype_load_test 60 "$P/bin/stored_dtype_load_test"
run_test cuda_e2e_test 360 "$P/bin/cuda_e2e_test"

if [[ ${SKIP_BENCH:-0} == 1 ]]; then
  echo "gpu-check: bench skipped (SKIP_BENCH=1); done in $((SECONDS - T0)) s; failed: ${failed[*]:-none}"
  [[ ${#failed[@]} -eq 0 ]]
  exit
fi

# --- the bench: a ~1.1 B bf16 llama ------------------------------------------------------------
N_EMBD=2048 N_LAYER=16 N_HEAD=16 N_HEAD_KV=8 HEAD_DIM=128 N_FF=8192 N_VOCAB=32000 TOKENS=512 DECODE=64
M=$W/bench-model
if [[ ! -f $M/config.json ]]; then
  timeout 180 dayzero make-model --family llama --out "$M" --n-vocab $N_VOCAB --n-embd $N_EMBD --n-layer $N_LAYER \
    --n-head $N_HEAD --n-head-kv $N_HEAD_KV --n-ff $N_FF --dtype bfloat16 --seed 1 >"$W/make-model.log" 2>&1 ||
    { echo "gpu-check: make-model failed:"; tail -20 "$W/make-model.log"; failed+=(make-model); }
fi
ids=$(seq -s, 3 $((TOKENS + 2)))
cat >"$W/bench.yaml" <<EOF
model: {path: $M, dtype: bfloat16}
backend: cuda
prompts:
  - {id: bench, tokens: [$ids]}
generate: {max_new_tokens: $DECODE, stop_at_eos: false}
dump: {enabled: false}
EOF
ref=$(timeout 120 "$P/bin/cuda_bench" "$M" $TOKENS $N_EMBD $((N_HEAD_KV * HEAD_DIM)) $N_FF $N_LAYER $N_VOCAB 2>"$W/cuda_bench.log")
echo "gpu-check: reference figures: $ref"
timeout 240 dayzero run "$W/bench.yaml" >"$W/bench-run.log" 2>&1 || { echo "gpu-check: the bench run failed:"; tail -30 "$W/bench-run.log"; failed+=(bench-run); }
timings=$(grep -h "timings:" "$W/bench-run.log" | head -1)
echo "gpu-check: dayzero: $timings"
if [[ -n $ref && -n $timings && -n $py ]]; then
  "$py" - "$ref" "$timings" <<'EOF'
import json, re, sys
ref, t = json.loads(sys.argv[1]), sys.argv[2]
load = float(re.search(r"load [\d.]+ s \(([\d.]+) GB/s", t).group(1))
pre_tok, pre_s = re.search(r"prefill (\d+) tok in ([\d.]+) s", t).groups()
dec_tok, dec_s = re.search(r"decode (\d+) tok in ([\d.]+) s", t).groups()
pre_s, dec_tok, dec_s = float(pre_s), int(dec_tok), float(dec_s)
tflops = ref["gemm_flops"] / pre_s * 1e-12 if pre_s > 0 else 0
bound = ref["d2d_copy_gbps"] * 1e9 / ref["file_bytes"]  # weight bytes per token / device bandwidth
tok_s = dec_tok / dec_s if dec_s > 0 else 0
print(f"gpu-check: load to device {load:.2f} GB/s vs raw read {ref['raw_read_gbps']:.2f} GB/s: "
      f"ratio {load / ref['raw_read_gbps']:.2f} (target >= 0.8)")
print(f"gpu-check: prefill {tflops:.1f} TFLOP/s vs cuBLAS bf16 GEMMs of the same shapes "
      f"{ref['gemm_bf16_tflops']:.1f} TFLOP/s: ratio {tflops / ref['gemm_bf16_tflops']:.2f}")
print(f"gpu-check: decode {tok_s:.1f} tok/s vs the bandwidth bound {bound:.1f} tok/s "
      f"({ref['file_bytes'] / 1e9:.2f} GB of weights, {ref['d2d_copy_gbps']:.0f} GB/s device copy): "
      f"ratio {tok_s / bound:.2f}")
EOF
fi
echo "gpu-check: done in $((SECONDS - T0)) s; failed: ${failed[*]:-none}"
[[ ${#failed[@]} -eq 0 ]]
