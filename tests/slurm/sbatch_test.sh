#!/usr/bin/env bash
# `sbatch slurm/dayzero.sbatch` on a real one-machine Slurm: a tiny llama with 4 ranks completes,
# and its run folder (named by the job id) has every rank file, the plan, and the recorded
# command, environment, hosts and versions; the same through srun (--mpi=pmix) on 2 ranks; and
# srun --mpi=none refused before any rank starts. Usage: sbatch_test.sh DAYZERO_BIN
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
bin="$(realpath "$1")"
source "$root/tests/slurm/cluster.sh"
dz_slurm_start
work="$(mktemp -d /tmp/dz-sbatch-test.XXXXXX)"
trap 'dz_slurm_stop; rm -rf "$work"' EXIT
cd "$work"
"$bin" make-model --family llama --out model >/dev/null
cat > tiny.yaml <<CFG
model: {path: model}
parallel: {tp: 2, pp: 2}
prompts:
  - {id: a, tokens: [1, 2, 3, 4]}
generate: {max_new_tokens: 3}
CFG
out="$(DAYZERO_HOME="$root" DAYZERO_BIN="$bin" DAYZERO_LAUNCH_ARGS="--threads 1" \
  sbatch --parsable --nodes=1 --ntasks-per-node=4 --time=5 "$root/slurm/dayzero.sbatch" tiny.yaml)"
jobid="${out%%;*}"
dz_slurm_wait "$jobid" 120 || { rc=$?; echo "FAIL: job $jobid exit $rc"; cat dayzero-*.out; exit 1; }
run="runs/tiny-$jobid"
fail=0
check() { if ! eval "$1"; then echo "FAIL: $2"; fail=1; fi; }
for r in 0 1 2 3; do
  check "[[ -s $run/rank-0000$r.h5 && -s $run/events/rank-0000$r.jsonl ]]" "rank $r files missing in $run"
done
check "[[ -s $run/plan.json && -s $run/config.yaml ]]" "plan.json / config.yaml missing"
check "grep -q -- '-np 4 ' $run/launch/command.txt" "recorded command: $(cat $run/launch/command.txt 2>/dev/null)"
check "grep -q -- '--map-by ppr:4:node' $run/launch/command.txt" "command lacks the per-node mapping"
check "grep -qx 'SLURM_JOB_ID=$jobid' $run/launch/env.txt" "env.txt lacks SLURM_JOB_ID=$jobid"
check "grep -qx 'DAYZERO_THREADS=1' $run/launch/env.txt" "env.txt lacks DAYZERO_THREADS=1"
check "grep -q \"^$(hostname -s) slots=4\" $run/launch/hosts.txt" "hosts.txt: $(cat $run/launch/hosts.txt 2>/dev/null)"
check "grep -q '\"slurm_job_id\": \"$jobid\"' $run/launch/launch.json" "launch.json lacks the job id"
check "[[ \$(cat $run/launch/exit_code) == 0 ]]" "exit_code is not 0"
if ((fail)); then cat dayzero-*.out; exit 1; fi
echo "ok: job $jobid wrote $run with 4 rank files and the launch record"

# The srun launcher (srun --mpi=pmix: Slurm's pmix_v4 plugin and Open MPI's PMIx client).
sed -i 's/parallel: {tp: 2, pp: 2}/parallel: {tp: 2}/' tiny.yaml
jobid="$(DAYZERO_HOME="$root" DAYZERO_BIN="$bin" DAYZERO_LAUNCH_ARGS="--threads 1" DAYZERO_LAUNCHER=srun \
  sbatch --parsable --nodes=1 --ntasks-per-node=2 --time=5 "$root/slurm/dayzero.sbatch" tiny.yaml)"
dz_slurm_wait "$jobid" 120 || { rc=$?; echo "FAIL: srun job $jobid exit $rc"; cat dayzero-*-$jobid.out; exit 1; }
run="runs/tiny-$jobid"
[[ -s $run/rank-00000.h5 && -s $run/rank-00001.h5 ]] || { echo "FAIL: srun job: rank files missing in $run"; exit 1; }
grep -q -- "srun --nodes=1 --ntasks-per-node=2 --ntasks=2 --mpi=pmix" $run/launch/command.txt ||
  { echo "FAIL: srun job command: $(cat $run/launch/command.txt)"; exit 1; }
echo "ok: srun job $jobid wrote $run"

# srun --mpi=none would start the ranks as separate one-rank jobs: refused before they start.
jobid="$(DAYZERO_HOME="$root" DAYZERO_BIN="$bin" DAYZERO_LAUNCH_ARGS="--srun-mpi none" DAYZERO_LAUNCHER=srun \
  sbatch --parsable --nodes=1 --ntasks-per-node=2 --time=5 "$root/slurm/dayzero.sbatch" tiny.yaml)"
rc=0; dz_slurm_wait "$jobid" 60 || rc=$?
((rc == 2)) && grep -q "srun --mpi=none gives Open MPI no way to wire up its ranks" dayzero-*-$jobid.out ||
  { echo "FAIL: the --mpi=none job exited $rc"; cat dayzero-*-$jobid.out; exit 1; }
[[ ! -e runs/tiny-$jobid ]] || { echo "FAIL: a refused launch made its run folder"; exit 1; }
echo "PASS: sbatch with mpirun and srun; srun --mpi=none refused"
