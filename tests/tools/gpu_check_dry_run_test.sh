#!/usr/bin/env bash
# tools/gpu-check-run.sh without a GPU: each call's plan (timeouts of its steps plus the allowance
# for unpacking and packing) within the 300 s of one call, and a plan over it refused (exit 2);
# every step's log packed into OUT_DIR/logs-<call>.tgz with summary-<call>.txt beside it, two
# files per call; the verdicts: a skipped test is SKIP where no GPU is listed and FAIL where
# nvidia-smi lists one (CUDA cannot start), and the real (not dry) path run on a stand-in pack
# whose test binaries skip, fail or hang past their timeout. Usage: gpu_check_dry_run_test.sh PATH/TO/gpu-check-run.sh
set -uo pipefail
RUN=$1
T=$(mktemp -d /tmp/dayzero-gpu-check-test.XXXXXX)
trap 'rm -rf "$T"' EXIT
fails=0
check() {  # description, condition (a command)
  local what=$1
  shift
  if "$@"; then echo "ok: $what"; else echo "FAILED: $what"; fails=$((fails + 1)); fi
}
no_gpu=$T/no-gpu-smi
one_gpu=$T/one-gpu-smi
printf '#!/bin/sh\nexit 9\n' >"$no_gpu"
cat >"$one_gpu" <<'SMI'
#!/bin/sh
case "$*" in
  -L) echo "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-00000000-0000-0000-0000-000000000000)" ;;
  *compute_mode*) echo "NVIDIA H100 80GB HBM3, 81559 MiB, 580.159, Default" ;;
esac
SMI
chmod +x "$no_gpu" "$one_gpu"

# 1. Each call's plan fits 300 s, and its logs land in the output folder.
for call in tests bench; do
  out=$T/out-$call
  log=$T/$call.txt
  WORK_DIR=$T/w-$call NVIDIA_SMI=$no_gpu bash "$RUN" "$call" "$out" --dry-run >"$log" 2>&1
  rc=$?
  cat "$log"
  check "$call: dry run exits 0" test $rc -eq 0
  total=$(sed -n "s/^gpu-check: call $call: timeouts add to \([0-9]*\) s.*/\1/p" "$log")
  sum=$(awk '/^gpu-check: plan / {s += $(NF-1)} END {print s + 10}' "$log")
  check "$call: timeouts add to $total s <= 300" test -n "$total" -a "${total:-999}" -le 300
  check "$call: the steps' timeouts ($sum s with the allowance) are the total printed" test "$sum" = "$total"
  check "$call: two files in the output folder" test "$(ls "$out" | wc -l)" -eq 2
  check "$call: summary-$call.txt" test -s "$out/summary-$call.txt"
  steps=$(grep -c '^gpu-check: plan ' "$log")
  check "$call: logs-$call.tgz holds one log per step ($steps)" test "$(tar tzf "$out/logs-$call.tgz" | grep -c '\.log$')" -eq "$steps"
done
check "tests: cuda_e2e_test capped at 220 s" grep -q '^gpu-check: plan cuda_e2e_test  *220 s' "$T/tests.txt"
check "tests: preflight's device path planned (20 s)" grep -q '^gpu-check: plan cuda_preflight_test  *20 s' "$T/tests.txt"
check "tests: the probe runs before the e2e test" \
  test "$(grep -n 'plan cuda_probe_test' "$T/tests.txt" | cut -d: -f1)" -lt "$(grep -n 'plan cuda_e2e_test' "$T/tests.txt" | cut -d: -f1)"

# 2. Negative control: a plan over 300 s is refused before anything runs.
E2E_TIMEOUT_S=400 WORK_DIR=$T/w-over NVIDIA_SMI=$no_gpu bash "$RUN" tests "$T/out-over" --dry-run >"$T/over.txt" 2>&1
rc=$?
check "a 400 s e2e cap is refused (exit 2)" test $rc -eq 2
check "  naming the total" grep -q "timeouts add to 480 s, over the 300 s" "$T/over.txt"
check "  and no step ran" test ! -e "$T/out-over/logs-tests.tgz"

# 3. Skipped tests: SKIP without a GPU listed, FAIL with one.
DRY_RUN_SKIP=1 WORK_DIR=$T/w-skip NVIDIA_SMI=$no_gpu bash "$RUN" tests "$T/out-skip" --dry-run >"$T/skip.txt" 2>&1
check "skips without a GPU listed pass (exit 0)" test $? -eq 0
check "  reported as SKIP" grep -q '^SKIP cuda_kernels_test (no GPU listed)' "$T/out-skip/summary-tests.txt"
DRY_RUN_SKIP=1 WORK_DIR=$T/w-gpu NVIDIA_SMI=$one_gpu bash "$RUN" tests "$T/out-gpu" --dry-run >"$T/gpu.txt" 2>&1
check "skips with a GPU listed fail (exit 1)" test $? -eq 1
check "  reported as FAIL" grep -q '^FAIL cuda_probe_test: 1 GPU(s) listed but the test skipped' "$T/out-gpu/summary-tests.txt"

# 4. The real path on a stand-in pack: test binaries that skip as gtest does, the environment
#    step run as a function of the script in its own process, a failing binary.
pack=$T/dayzero-gpu
mkdir -p "$pack/bin" "$pack/lib"
cp "$RUN" "$pack/run.sh"
printf '#!/bin/sh\necho "[  SKIPPED ] Probe.NoDevice (0 ms)"\n' >"$pack/bin/cuda_probe_test"
for b in nccl_smoke_test cuda_stored_load_test; do cp "$pack/bin/cuda_probe_test" "$pack/bin/$b"; done
printf '#!/bin/sh
echo "measured rel_l2 MatmulBf16:153 3.1e-07 (bound 2e-06)"
echo "[       OK ] CudaVsCpu.MatmulBf16"
' \
  >"$pack/bin/cuda_kernels_test"
printf '#!/bin/sh\necho "[  FAILED  ] CudaFamilies.MatchesTheCpuReference/llama"\nexit 1\n' >"$pack/bin/cuda_e2e_test"
printf '#!/bin/sh\nexit 0\n' >"$pack/bin/dayzero"
chmod +x "$pack"/bin/*
WORK_DIR=$T/w-real NVIDIA_SMI=$no_gpu bash "$pack/run.sh" tests "$T/out-real" >"$T/real.txt" 2>&1
rc=$?
cat "$T/real.txt"
check "stand-in pack: a failing e2e test fails the call (exit 1)" test $rc -eq 1
check "  the environment step ran (glibc line in its log)" \
  sh -c "tar xzOf '$T/out-real/logs-tests.tgz' ./environment.log | grep -q -i 'glibc\|GNU libc\|ldd'"
check "  PASS environment" grep -q '^PASS environment' "$T/out-real/summary-tests.txt"
check "  SKIP cuda_stored_load_test" grep -q '^SKIP cuda_stored_load_test (no GPU listed)' "$T/out-real/summary-tests.txt"
check "  PASS cuda_kernels_test" grep -q '^PASS cuda_kernels_test' "$T/out-real/summary-tests.txt"
check "  its measured errors copied into the summary" \
  grep -q '^measured rel_l2 MatmulBf16:153 3.1e-07 (bound 2e-06)' "$T/out-real/summary-tests.txt"
check "  FAIL cuda_e2e_test: exit 1" grep -q '^FAIL cuda_e2e_test: exit 1' "$T/out-real/summary-tests.txt"

# 5. A step that outlives its timeout is killed and reported; its log still comes back.
printf '#!/bin/sh
echo "[ RUN      ] CudaFamilies.MatchesTheCpuReference/llama"
sleep 30
' >"$pack/bin/cuda_e2e_test"
E2E_TIMEOUT_S=2 WORK_DIR=$T/w-slow NVIDIA_SMI=$no_gpu bash "$pack/run.sh" tests "$T/out-slow" >"$T/slow.txt" 2>&1
check "a hung e2e test fails the call (exit 1)" test $? -eq 1
check "  reported as timed out" grep -q '^FAIL cuda_e2e_test: timed out after 2 s' "$T/out-slow/summary-tests.txt"
check "  its log packed" sh -c "tar xzOf '$T/out-slow/logs-tests.tgz' ./cuda_e2e_test.log | grep -q 'RUN .*llama'"

echo "gpu_check_dry_run_test: $fails failed"
[[ $fails -eq 0 ]]
