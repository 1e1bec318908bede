#!/usr/bin/env bash
# The quickstart: install, build, generate a small llava model (llama text, tiny CLIP tower),
# run it under mpirun (NP ranks, default 2; the planner splits the model) on three text prompts
# and one image+text prompt, and print the generated text, the timings and where the dump is.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/build.sh
NP="${NP:-2}"
build/src/cli/dayzero make-model --config configs/quickstart-model.yaml --out models/quickstart-llava
if [[ $(id -u) -eq 0 ]]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
mpirun -np "$NP" --oversubscribe build/src/cli/dayzero run configs/quickstart.yaml
