#!/usr/bin/env bash
# The GPU half of tools/gpu-check.sh, packed as dayzero-gpu/run.sh: on a machine with an NVIDIA
# GPU and nothing of dayzero's build, in two calls that each fit 300 s:
#   run.sh tests OUT_DIR   the environment (glibc, driver, compute mode, library lookup), the probe
#       of CUDA's last-error slot after a "not ready" poll, then cuda_kernels_test, nccl_smoke_test,
#       cuda_stored_load_test, cuda_preflight_test (preflight's device path: NCCL or staged
#       collectives, host-device copies, NVML) and cuda_e2e_test (capped at 220 s); step timeouts
#       290 s + 10 s for unpacking and packing = 300 s;
#   run.sh bench OUT_DIR   only if device time is left: a generated ~0.6 B bf16 llama, cuda_bench's
#       reference figures and dayzero's load, prefill and decode against them; 290 s + 10 s.
# Each step's log goes to WORK_DIR (default /tmp/dayzero-gpu-work); after every step and on exit
# OUT_DIR receives summary-<call>.txt (one line per step, written as it goes) and
# logs-<call>.tgz (every log of the call): two files per call, so a killed call still returns
# what it did. A GPU listed by nvidia-smi whose tests skip (CUDA cannot start) is a FAIL.
#   --dry-run   on any machine: every step's command is logged instead of run, so the plan, its
#       timeouts (checked to add to <= 300 s, else exit 2) and the packing into OUT_DIR can be
#       checked where no GPU is (tests/tools/gpu_check_dry_run_test.sh).
# Environment: WORK_DIR; NVIDIA_SMI (default nvidia-smi); E2E_TIMEOUT_S (default 220);
# DRY_RUN_SKIP=1 makes each dry-run test log a gtest SKIPPED line (to exercise the GPU-listed rule).
# Exit: 0 every step passed (or skipped where no GPU is listed), 1 a step failed, 2 usage or a plan
# over 300 s, 3 dayzero cannot load here.
set -uo pipefail

# Constants and the steps that are functions of this script: each runs in its own process
# (run.sh __step FUNCTION) under `timeout`, with the environment the main flow exported.
P=$(cd "$(dirname "$0")" && pwd)
W=${WORK_DIR:-/tmp/dayzero-gpu-work}
NVIDIA_SMI=${NVIDIA_SMI:-nvidia-smi}
# --- the steps ---------------------------------------------------------------------------------
check_environment() {
  ldd --version 2>&1 | head -1
  "$NVIDIA_SMI" --query-gpu=name,memory.total,driver_version,compute_mode --format=csv,noheader 2>&1 || true
  # The tp2/pp2 e2e cases put two ranks on one GPU: that needs compute mode Default (read only).
  if "$NVIDIA_SMI" --query-gpu=compute_mode --format=csv,noheader 2>/dev/null | grep -qv Default; then
    echo "gpu-check: compute mode is not Default; CudaPlanBytes tp2 and CudaPlans will fail to share the GPU"
  fi
  echo "CUDA library folders: ${CUDA_DIRS:-none found}"
  local missing
  missing=$(ldd "$P/bin/dayzero" 2>&1 | grep 'not found' || true)
  if [[ -n $missing ]]; then
    echo "dayzero cannot load (built against CUDA 13, cuBLAS 13, NCCL 2):"
    echo "$missing"
    return 3
  fi
}

# --- the bench's steps: a ~0.6 B bf16 llama ----------------------------------------------------
N_EMBD=2048 N_LAYER=8 N_HEAD=16 N_HEAD_KV=8 HEAD_DIM=128 N_FF=8192 N_VOCAB=32000 TOKENS=512 DECODE=64
M=$W/bench-model
bench_make_model() {
  [[ -f $M/config.json ]] && return 0
  dayzero make-model --family llama --out "$M" --n-vocab $N_VOCAB --n-embd $N_EMBD --n-layer $N_LAYER \
    --n-head $N_HEAD --n-head-kv $N_HEAD_KV --n-ff $N_FF --dtype bfloat16 --seed 1
}
bench_reference() {
  "$P/bin/cuda_bench" "$M" $TOKENS $N_EMBD $((N_HEAD_KV * HEAD_DIM)) $N_FF $N_LAYER $N_VOCAB >"$W/reference.json"
  cat "$W/reference.json"
}
bench_run() {
  local ids
  ids=$(seq -s, 3 $((TOKENS + 2)))
  cat >"$W/bench.yaml" <<EOF
model: {path: $M, dtype: bfloat16}
backend: cuda
prompts:
  - {id: bench, tokens: [$ids]}
generate: {max_new_tokens: $DECODE, stop_at_eos: false}
dump: {enabled: false}
EOF
  dayzero run "$W/bench.yaml"
}
if [[ ${1:-} == __step ]]; then
  "$2"
  exit
fi

usage() { sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
CALL=${1:-}
[[ $CALL == tests || $CALL == bench ]] || usage
shift
DRY=0
OUT=""
for a in "$@"; do
  case $a in
    --dry-run) DRY=1 ;;
    -*) usage ;;
    *) OUT=$a ;;
  esac
done
OUT=${OUT:-$W/out}
mkdir -p "$W" "$OUT"
OUT=$(cd "$OUT" && pwd)
T0=$SECONDS
CALL_LIMIT=300     # one call of the GPU machine, as planned
ALLOWANCE=10       # unpacking the pack before this script and packing the logs after each step
SUMMARY=$OUT/summary-$CALL.txt
: >"$SUMMARY"

# --- the plan of each call: step name, timeout (s), command -----------------------------------
E2E_TIMEOUT_S=${E2E_TIMEOUT_S:-220}
steps=()
add_step() { steps+=("$1|$2|$3"); }
if [[ $CALL == tests ]]; then
  add_step environment 5 "check_environment"
  add_step cuda_probe_test 10 "$P/bin/cuda_probe_test"
  add_step cuda_kernels_test 15 "$P/bin/cuda_kernels_test"
  add_step nccl_smoke_test 10 "$P/bin/nccl_smoke_test"
  add_step cuda_stored_load_test 10 "$P/bin/cuda_stored_load_test"
  add_step cuda_preflight_test 20 "$P/bin/cuda_preflight_test"
  add_step cuda_e2e_test "$E2E_TIMEOUT_S" "$P/bin/cuda_e2e_test"
else
  add_step make-model 100 "bench_make_model"
  add_step cuda_bench 60 "bench_reference"
  add_step bench-run 130 "bench_run"
fi
planned=$ALLOWANCE
for s in "${steps[@]}"; do
  IFS='|' read -r name limit _ <<<"$s"
  planned=$((planned + limit))
  printf 'gpu-check: plan %-22s %4d s\n' "$name" "$limit"
done
echo "gpu-check: call $CALL: timeouts add to $planned s with ${ALLOWANCE} s for unpacking and packing (limit $CALL_LIMIT s)"
if ((planned > CALL_LIMIT)); then
  echo "gpu-check: the $CALL call's timeouts add to $planned s, over the $CALL_LIMIT s of one call; lower them" >&2
  echo "PLAN-OVER $planned s > $CALL_LIMIT s" >>"$SUMMARY"
  exit 2
fi

pack_logs() { (cd "$W" && ls ./*.log >/dev/null 2>&1 && tar czf "$OUT/logs-$CALL.tgz" ./*.log) || true; }
trap pack_logs EXIT
rm -f "$W"/*.log

# --- CUDA libraries of this machine ------------------------------------------------------------
cuda_dirs=()
add_dir() { [[ -d $1 ]] && [[ " ${cuda_dirs[*]} " != *" $1 "* ]] && cuda_dirs+=("$1"); }
py=$(command -v python3 || command -v python || true)
if ((DRY == 0)) && [[ -n $py ]]; then
  while read -r sp; do
    [[ -d $sp/nvidia ]] || continue
    while read -r f; do add_dir "$(dirname "$f")"; done < <(find "$sp/nvidia" \( -name 'libcublas.so.*' -o \
      -name 'libcublasLt.so.*' -o -name 'libcudart.so.*' -o -name 'libnccl.so.*' \) 2>/dev/null)
  done < <("$py" -c 'import site, sys; print("\n".join(site.getsitepackages() + [site.getusersitepackages()] + sys.path))')
fi
for d in /usr/local/cuda/lib64 /usr/local/cuda-*/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do add_dir "$d"; done
LD=$(IFS=:; echo "${cuda_dirs[*]}")
export CUDA_DIRS="${cuda_dirs[*]}" WORK_DIR=$W NVIDIA_SMI
export LD_LIBRARY_PATH="$P/lib${LD:+:$LD}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

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
# gtest prints each test as it ends, so a step killed at its timeout still shows how far it got.
export GTEST_COLOR=no

# GPUs nvidia-smi lists (0 where it is absent): with one listed, a skipped GPU test is a failure.
gpus=$("$NVIDIA_SMI" -L 2>/dev/null | grep -c '^GPU ' || true)
gpus=${gpus:-0}
echo "gpu-check: $gpus GPU(s) listed by $NVIDIA_SMI$( ((DRY)) && echo '; dry run: commands are logged, not run')"

failed=()
run_step() {  # name, timeout, command (a word list, or a function of this script)
  local name=$1 limit=$2 cmd=$3 log=$W/$1.log t=$SECONDS rc=0 verdict
  if ((DRY)); then
    { echo "dry run: timeout $limit $cmd"; ((${DRY_RUN_SKIP:-0})) && [[ $name == *_test ]] &&
        echo "[  SKIPPED ] dry run"; } >"$log"
  else
    if declare -F "$cmd" >/dev/null; then
      timeout "$limit" "$P/$(basename "$0")" __step "$cmd" >"$log" 2>&1
    else
      # shellcheck disable=SC2086
      timeout "$limit" $cmd >"$log" 2>&1
    fi
    rc=$?
  fi
  local skipped
  skipped=$(grep -c '^\[  SKIPPED \]' "$log" || true)
  if ((rc == 124 || rc == 137)); then
    verdict="FAIL $name: timed out after $limit s"
  elif ((rc != 0)); then
    verdict="FAIL $name: exit $rc"
  elif ((skipped > 0 && gpus > 0)); then
    verdict="FAIL $name: $gpus GPU(s) listed but the test skipped (CUDA cannot start here?)"
  elif ((skipped > 0)); then
    verdict="SKIP $name (no GPU listed)"
  else
    verdict="PASS $name"
  fi
  verdict="$verdict ($((SECONDS - t)) s)$( ((DRY)) && echo ' [dry run]')"
  echo "gpu-check: $verdict"
  echo "$verdict" >>"$SUMMARY"
  if [[ $verdict == FAIL* ]]; then
    failed+=("$name")
    tail -30 "$log"
  else
    grep -h 'not_ready_probe:' "$log" | head -5 || true
  fi
  # The probe's answer and every kernel bound's measured error, to set the bounds from (docs/cuda.md).
  grep -h '^not_ready_probe:\|^measured rel_l2' "$log" >>"$SUMMARY" || true
  pack_logs
  return $rc
}


for s in "${steps[@]}"; do
  IFS='|' read -r name limit cmd <<<"$s"
  run_step "$name" "$limit" "$cmd"
  rc=$?
  if [[ $name == environment && $rc -eq 3 ]]; then
    echo "gpu-check: dayzero cannot load here; the other steps are not run" >&2
    exit 3
  fi
  # Without the model or the reference there is nothing to compare.
  if [[ $name == make-model || $name == cuda_bench ]] && ((rc != 0)); then break; fi
done

if [[ $CALL == bench && $DRY == 0 && ${#failed[@]} -eq 0 && -n $py ]]; then
  timings=$(grep -h "timings:" "$W/bench-run.log" | head -1)
  "$py" - "$(cat "$W/reference.json")" "$timings" <<'EOF' | tee -a "$SUMMARY"
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
print(f"gpu-check: prefill {tflops:.1f} TFLOP/s vs cuBLAS bf16 GEMMs of the same shapes on random inputs "
      f"(lm_head on {ref['lm_head_rows']} row) {ref['gemm_bf16_tflops']:.1f} TFLOP/s: "
      f"ratio {tflops / ref['gemm_bf16_tflops']:.2f}")
print(f"gpu-check: decode {tok_s:.1f} tok/s vs the bandwidth bound {bound:.1f} tok/s "
      f"({ref['file_bytes'] / 1e9:.2f} GB of weights, {ref['d2d_copy_gbps']:.0f} GB/s device copy): "
      f"ratio {tok_s / bound:.2f}")
EOF
fi
echo "gpu-check: call $CALL done in $((SECONDS - T0)) s; failed: ${failed[*]:-none}" | tee -a "$SUMMARY"
[[ ${#failed[@]} -eq 0 ]]
