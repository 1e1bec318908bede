#!/usr/bin/env bash
# The quickstart: install what building and running needs, build only the dayzero binary,
# generate a small llava model (llama text, tiny CLIP tower), run it under mpirun (NP ranks,
# default 2; the planner splits the model) on three text prompts and one image+text prompt, and
# print the generated text, the timings and where the dump is. A second run reuses the build
# and the model.
#   REAL=1 bash tools/quickstart.sh   the same with a real trained model (docs/real-model.md)
set -euo pipefail
cd "$(dirname "$0")/.."
NP="${NP:-2}"
start=$SECONDS
phase() { echo "== quickstart [$((SECONDS - start)) s] $*"; }

phase "installing missing Debian packages"
bash tools/install_deps.sh
phase "building the dayzero binary"
bash tools/build.sh dayzero
if [[ $(id -u) -eq 0 ]]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
if [[ "${REAL:-0}" == 1 ]]; then
  phase "getting the real model"
  bash tools/real_model.sh models/smollm2-135m
  # tp=3: the model's 9 attention heads split over 3 ranks (tp=2 does not divide them).
  phase "running it under mpirun -np 3 (tp=3)"
  mpirun -np 3 --oversubscribe build/src/cli/dayzero run configs/real-model.yaml
else
  phase "generating the quickstart model"
  [[ -f models/quickstart-llava/config.json ]] ||
    build/src/cli/dayzero make-model --config configs/quickstart-model.yaml --out models/quickstart-llava
  phase "running it under mpirun -np $NP"
  mpirun -np "$NP" --oversubscribe build/src/cli/dayzero run configs/quickstart.yaml
fi
phase "done"
