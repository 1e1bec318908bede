#!/usr/bin/env bash
# A dayzero.sbatch job cancelled with scancel mid-run: rank 1 is stalled by debug.stall before a tp
# all_reduce (the watchdog set far beyond the test), so the job is still running when it is
# cancelled; its run folder must then let `dayzero timeline` explain where it stood: the verdict
# names rank 1 as never having entered the all_reduce rank 0 waits in. Usage: scancel_test.sh DAYZERO_BIN
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
bin="$(realpath "$1")"
source "$root/tests/slurm/cluster.sh"
dz_slurm_start
work="$(mktemp -d /tmp/dz-scancel-test.XXXXXX)"
trap 'dz_slurm_stop; rm -rf "$work"' EXIT
cd "$work"
"$bin" make-model --family llama --out model >/dev/null
cat > stalled.yaml <<CFG
model: {path: model}
parallel: {tp: 2}
prompts:
  - {id: a, tokens: [1, 2, 3, 4]}
generate: {max_new_tokens: 3}
watchdog: {collective_timeout_s: 600, phase_timeout_s: 600}
debug: {stall: {rank: 1, before: "tp all_reduce #4"}}
CFG
jobid="$(DAYZERO_HOME="$root" DAYZERO_BIN="$bin" DAYZERO_LAUNCH_ARGS="--threads 1" \
  sbatch --parsable --nodes=1 --ntasks-per-node=2 --time=5 "$root/slurm/dayzero.sbatch" stalled.yaml)"
run="runs/stalled-$jobid"
# Mid-run: rank 0 is inside the all_reduce rank 1 will never enter.
for _ in $(seq 300); do
  grep -q '"current": *"all_reduce #4' "$run/live/rank-00000.json" 2>/dev/null && break
  grep -q 'all_reduce #4' "$run/live/rank-00000.json" 2>/dev/null && break
  sleep 0.2
done
if ! grep -q 'all_reduce #4' "$run/live/rank-00000.json" 2>/dev/null; then
  echo "FAIL: rank 0 never reached tp all_reduce #4"; cat dayzero-*.out; cat "$run/live/rank-00000.json"; exit 1
fi
sleep 1
scancel "$jobid"
rc=0; dz_slurm_wait "$jobid" 60 || rc=$?
state="$(scontrol -o show job "$jobid" | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p')"
[[ "$state" == CANCELLED ]] || { echo "FAIL: job state $state, not CANCELLED"; exit 1; }
"$bin" timeline "$run" > timeline.txt || { echo "FAIL: dayzero timeline exit $?"; cat timeline.txt; exit 1; }
"$bin" timeline "$run" --json > timeline.json
verdict="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["verdict"])' timeline.json)"
echo "verdict: $verdict"
if [[ "$verdict" != *"rank 1 "*"never entered all_reduce #4 of tp@"*"which rank(s) 0 entered"* ]]; then
  echo "FAIL: the timeline verdict does not name rank 1 and the all_reduce"; cat timeline.txt; exit 1
fi
echo "PASS: the cancelled job's run folder is explained"
