#!/usr/bin/env bash
# A dayzero.sbatch job requeued mid-run (scontrol requeue) keeps its job id and so its run folder
# name: the second attempt runs in runs/<config>-<job id> while the first attempt's files are kept
# beside it as .attempt-1 (moved aside by launch/dayzero-launch), where `dayzero timeline` still
# explains where that attempt stood. Usage: requeue_test.sh DAYZERO_BIN
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
bin="$(realpath "$1")"
source "$root/tests/slurm/cluster.sh"
dz_slurm_start
work="$(mktemp -d /tmp/dz-requeue-test.XXXXXX)"
trap 'dz_slurm_stop; rm -rf "$work"' EXIT
cd "$work"
"$bin" make-model --family llama --out model >/dev/null
write_config() {
  cat > job.yaml <<CFG
model: {path: model}
parallel: {tp: 2}
prompts:
  - {id: a, tokens: [1, 2, 3, 4]}
generate: {max_new_tokens: 3}
watchdog: {collective_timeout_s: 600, phase_timeout_s: 600}
$1
CFG
}
write_config 'debug: {stall: {rank: 1, before: "tp all_reduce #4"}}'
jobid="$(DAYZERO_HOME="$root" DAYZERO_BIN="$bin" DAYZERO_LAUNCH_ARGS="--threads 1" \
  sbatch --parsable --nodes=1 --ntasks-per-node=2 --time=5 "$root/slurm/dayzero.sbatch" job.yaml)"
run="runs/job-$jobid"
for _ in $(seq 300); do
  grep -q 'all_reduce #4' "$run/live/rank-00000.json" 2>/dev/null && break
  sleep 0.2
done
grep -q 'all_reduce #4' "$run/live/rank-00000.json" 2>/dev/null ||
  { echo "FAIL: the first attempt never reached tp all_reduce #4"; cat dayzero-*.out; exit 1; }
write_config ""   # the second attempt runs through
t0=$SECONDS
scontrol requeue "$jobid"
# Slurm holds a requeued batch job back (BeginTime about 2 minutes ahead); let it start now.
for _ in $(seq 100); do
  scontrol -o show job "$jobid" | grep -q "JobState=PENDING" && break
  sleep 0.2
done
scontrol -o show job "$jobid" | grep -o "JobState=[A-Z]* Reason=[A-Za-z]*" || true
# Not in the second of the requeue: slurmd revoked the first attempt's credential then and
# compares whole seconds, so an allocation made in that same second is killed ("Job credential
# revoked", the job FAILED with exit 1), which a loaded machine hit 3 times in 7.
sleep 2
scontrol update JobId="$jobid" StartTime=now
# Wait for the second attempt to have started (its wrapper moved the first aside): until then the
# job can still show the first attempt's end.
for _ in $(seq 300); do [[ -d $run.attempt-1 ]] && break; sleep 0.2; done
rc=0; dz_slurm_wait "$jobid" 150 || rc=$?
echo "requeue to end: $((SECONDS - t0)) s"
fail=0
((rc == 0)) || { echo "FAIL: the requeued job ended with exit $rc"; fail=1; }
for r in 0 1; do
  [[ -s $run/rank-0000$r.h5 ]] || { echo "FAIL: $run/rank-0000$r.h5 missing"; fail=1; }
done
grep -q '"slurm_restart_count": "1"' "$run/launch/launch.json" || { echo "FAIL: launch.json restart count"; fail=1; }
grep -q "\"$run.attempt-1\"" "$run/launch/launch.json" ||
  { echo "FAIL: launch.json does not name the earlier attempt"; fail=1; }
[[ -s $run.attempt-1/events/rank-00001.jsonl && -s $run.attempt-1/launch/command.txt ]] ||
  { echo "FAIL: the first attempt was not kept as $run.attempt-1"; fail=1; }
verdict="$("$bin" timeline "$run.attempt-1" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["verdict"])')"
[[ "$verdict" == *"rank 1 "*"never entered all_reduce #4"* ]] ||
  { echo "FAIL: the first attempt's timeline verdict: $verdict"; fail=1; }
((fail)) && { cat dayzero-*.out; exit 1; }
echo "PASS: requeued job $jobid: second attempt in $run, first kept in $run.attempt-1"
