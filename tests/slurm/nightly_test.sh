#!/usr/bin/env bash
# slurm/nightly.sbatch on a real one-machine Slurm with configs/nightly/tiny.yaml (2 tiny models x
# 2 plans): the night passes; the same matrix with one run perturbed (debug.perturb on
# layers.1.ffn_out of qwen3 pp2) exits 1, and summary.md and junit.xml name that run and the
# blamed layer; a night whose run fails still ends with a summary that reports it (exit 1); a
# baseline library night after night (saved from a passing night, compared against, a perturbed
# night regressing against it and leaving it unchanged); a baseline key refused by a dayzero
# without the baseline command; the Day-0 checklist section of the summary.
# Usage: nightly_test.sh DAYZERO_BIN
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
bin="$(realpath "$1")"
source "$root/tests/slurm/cluster.sh"
dz_slurm_start 5
work="$(mktemp -d /tmp/dz-nightly-test.XXXXXX)"
trap 'dz_slurm_stop; rm -rf "$work"' EXIT
cd "$work"
export DAYZERO_MODELS="$work/models" DAYZERO_HOME="$root" DAYZERO_BIN="$bin"
"$bin" make-model --family llama --out models/llama >/dev/null
"$bin" make-model --family qwen3 --out models/qwen3 >/dev/null
fail=0
night() {  # night MATRIX OUT -> the nightly job's exit code
  local id
  id="$(sbatch --parsable --output="$work/$2.out" "$root/slurm/nightly.sbatch" "$1" "$work/$2")"
  dz_slurm_wait "$id" 150 && return 0 || return $?
}

t0=$SECONDS
if night "$root/configs/nightly/tiny.yaml" pass; then
  echo "ok: the tiny night passed in $((SECONDS - t0)) s"
else
  echo "FAIL: the tiny night failed (exit $?)"; cat pass.out pass/summary/summary.md 2>/dev/null; fail=1
fi
# 4 runs of the plans and the 2 single-rank runs they are compared against
grep -cE "\| [0-9]+ \| 0 \| pass \|" pass/summary/summary.md | grep -qx 6 || { echo "FAIL: summary.md lacks 6 passing runs"; fail=1; }
grep -q "tests='6' failures='0' errors='0'" pass/summary/junit.xml || { echo "FAIL: junit.xml of the passing night"; fail=1; }
grep -q "<svg" pass/summary/summary.html || { echo "FAIL: summary.html has no compare plot"; fail=1; }

cp "$root/configs/nightly/tiny.yaml" perturbed.yaml
sed -i "s|\${DAYZERO_MODELS}|$work/models|" perturbed.yaml
cat >> perturbed.yaml <<'YAML'
overrides:
  - {model: qwen3, plan: pp2, run: {debug: {perturb: {point: layers.1.ffn_out, scale: 1.001}}}}
YAML
t0=$SECONDS
rc=0; night perturbed.yaml perturbed || rc=$?
if ((rc != 1)); then echo "FAIL: the perturbed night exited $rc, not 1"; cat perturbed.out; fail=1; fi
echo "ok: the perturbed night exited $rc in $((SECONDS - t0)) s"
sum=perturbed/summary/summary.md
grep -q "| qwen3.tokens.pp2 | qwen3 | pp2 | tokens | 2 | 0 | regression | vs single-rank: blamed layers.1 at layers.1.ffn_out" $sum ||
  { echo "FAIL: summary.md does not name the regressed layer:"; cat $sum; fail=1; }
[[ $(grep -c "| regression |" $sum) == 1 ]] || { echo "FAIL: more than the perturbed run regressed"; cat $sum; fail=1; }
grep -q "tests='6' failures='1' errors='0'" perturbed/summary/junit.xml &&
  grep -q "classname=\"nightly.qwen3.tokens\" name=\"pp2\">" perturbed/summary/junit.xml &&
  grep -q "<failure message=\"vs single-rank: blamed layers.1 at layers.1.ffn_out" perturbed/summary/junit.xml ||
  { echo "FAIL: junit.xml does not name the regressed layer:"; cat perturbed/summary/junit.xml; fail=1; }

# A run that fails (tp 3 on 2 ranks: exit 2) still gets its compare job (afterany) and a row.
cat > broken.yaml <<YAML
name: broken
models: [{name: llama, path: $work/models/llama}]
plans: [{name: tp2, ranks_per_node: 2, parallel: {tp: 2}}]
prompt_sets: [{name: tokens, prompts: [{id: a, tokens: [1, 2, 3]}]}]
run: {generate: {max_new_tokens: 2}}
slurm: {time: 5, launch_args: "--threads 1"}
overrides: [{model: llama, plan: tp2, run: {parallel: {tp: 3}}}]
register: $work/register.yaml
YAML
rc=0; night broken.yaml broken || rc=$?
((rc == 1)) || { echo "FAIL: the night with a failed run exited $rc, not 1"; cat broken.out; fail=1; }
grep -q "| llama.tokens.tp2 | llama | tp2 | tokens | 2 | 2 | error | run did not finish (exit 2) |" broken/summary/summary.md &&
  grep -q "| llama.tokens.single | llama | single | tokens | 1 | 0 | pass |" broken/summary/summary.md &&
  grep -q "<error message=\"run did not finish (exit 2)\"" broken/summary/junit.xml ||
  { echo "FAIL: the failed run is not reported as such:"; cat broken/summary/summary.md broken/summary/junit.xml; fail=1; }
# The register key: the night's model entered in the team register, linked from the summary.
grep -q "^Model register: \[register.md\](register.md)" broken/summary/summary.md &&
  grep -q "^## llama" broken/summary/register.md && grep -q "name: llama" register.yaml ||
  { echo "FAIL: the register was not updated and linked"; cat broken/summary/summary.md; fail=1; }

# The baseline library: the first night finds no baseline and, passing, saves its single-rank
# run as one; the second compares with it and passes; a perturbed third regresses against both the
# single-rank run and the baseline, naming the layer, and leaves the baseline as it was.
cat > bl.yaml <<YAML
name: bl
models: [{name: llama, path: $work/models/llama}]
plans: [{name: tp2, ranks_per_node: 2, parallel: {tp: 2}}]
prompt_sets: [{name: tokens, prompts: [{id: a, tokens: [1, 2, 3]}]}]
run: {generate: {max_new_tokens: 2}, dump: {activations: {layers: all, points: [ffn_out, layer_out], phase: prefill}}}
compare: {tolerance: f32}
slurm: {time: 5, launch_args: "--threads 1"}
baseline: {library: $work/library, update: true}
YAML
rc=0; night bl.yaml bl1 || rc=$?
((rc == 0)) && grep -q "llama.tokens.tp2: no baseline llama.tokens in $work/library yet" bl1/summary/summary.md &&
  grep -q "baseline llama.tokens updated from llama.tokens.single" bl1/summary/summary.md &&
  [[ -s library/llama.tokens/baseline.json ]] ||
  { echo "FAIL: the first baseline night (exit $rc) did not save the baseline"; cat bl1/summary/summary.md; fail=1; }
rc=0; night bl.yaml bl2 || rc=$?
((rc == 0)) && python3 - bl2/compare/llama.tokens.tp2/result.json <<'PY' ||
import json, sys
checks = {c["against"]: c for c in json.load(open(sys.argv[1]))["checks"]}
assert checks["baseline llama.tokens"]["verdict"] == "pass" and checks["baseline llama.tokens"]["exit"] == 0, checks
assert checks["single-rank"]["verdict"] == "pass", checks
PY
  { echo "FAIL: the second baseline night (exit $rc) did not pass against the baseline"; cat bl2/summary/summary.md; fail=1; }
# (the passing second night replaced it: the failing third must not)
saved="$(sed -n 's/.*"saved_at": *"\([^"]*\)".*/\1/p' library/llama.tokens/baseline.json | head -1)"
[[ -n "$saved" ]] || { echo "FAIL: no saved_at in library/llama.tokens/baseline.json"; fail=1; }
cp bl.yaml bl-perturbed.yaml
echo "overrides: [{model: llama, plan: tp2, run: {debug: {perturb: {point: layers.1.ffn_out, scale: 1.001}}}}]" >> bl-perturbed.yaml
rc=0; night bl-perturbed.yaml bl3 || rc=$?
((rc == 1)) && grep -q "vs baseline llama.tokens: blamed layers.1 at layers.1.ffn_out (prompt a, prefill)" bl3/summary/summary.md &&
  grep -q "vs single-rank: blamed layers.1 at layers.1.ffn_out" bl3/summary/summary.md &&
  grep -q "vs baseline llama.tokens: blamed layers.1 at layers.1.ffn_out" bl3/summary/junit.xml &&
  grep -q "baseline llama.tokens not updated: a run of it did not pass" bl3/summary/summary.md ||
  { echo "FAIL: the perturbed baseline night (exit $rc):"; cat bl3/summary/summary.md bl3/summary/junit.xml; fail=1; }
[[ "$(sed -n 's/.*"saved_at": *"\([^"]*\)".*/\1/p' library/llama.tokens/baseline.json | head -1)" == "$saved" ]] ||
  { echo "FAIL: a failing night replaced the baseline"; fail=1; }
grep -q "| llama.tokens.tp2 | pass | pass | pass | not run | not run | not run | not run |" bl3/summary/summary.md ||
  { echo "FAIL: the summary's checklist section"; cat bl3/summary/summary.md; fail=1; }

# A dayzero without the baseline command: the baseline key is refused, nothing submitted.
printf '#!/bin/sh\necho "Subcommands:"\necho "  run    Run the prompts"\n' > old-dayzero && chmod +x old-dayzero
rc=0; msg="$(python3 "$root/slurm/nightly.py" submit bl.yaml --out "$work/b" --dayzero ./old-dayzero 2>&1)" || rc=$?
[[ $rc == 2 && "$msg" == *"baseline: this dayzero"*"has no \`baseline\` command"* ]] ||
  { echo "FAIL: a baseline key was not refused (exit $rc): $msg"; fail=1; }
[[ ! -e "$work/b/night.json" ]] || { echo "FAIL: a refused matrix submitted jobs"; fail=1; }
((fail == 0)) && echo "PASS: nightly"
exit $fail
