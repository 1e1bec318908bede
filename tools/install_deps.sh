#!/usr/bin/env bash
# Installs dayzero's dependencies from Debian packages. Idempotent: only missing packages are
# fetched, so a second run costs a dpkg query.
#   bash tools/install_deps.sh          what building and running dayzero needs (the quickstart)
#   bash tools/install_deps.sh --tests  that, plus what the test suite needs
set -euo pipefail

# Build and run: compiler, MPI, HDF5, the C++ libraries, the BLAS libraries dlopen()ed by the
# CPU backend, and GoogleTest (the project's CMake configures its tests in the same build).
PKGS=(
  build-essential cmake ninja-build pkg-config git
  openmpi-bin libopenmpi-dev
  libhdf5-dev
  libyaml-cpp-dev libspdlog-dev nlohmann-json3-dev libcli11-dev
  libgtest-dev
  libopenblas-dev libblis-dev libdnnl-dev
  libpcre2-dev libutf8proc-dev
  libstb-dev
  libcpp-httplib-dev   # dayzero serve's HTTP front end (header-only use)
  libpython3-dev       # chat templates: Jinja2 runs in the embedded system CPython (src/chat)
  python3-jinja2       # the Jinja2 that renders them, as transformers' apply_chat_template does
)
# The test suite: goldens and dump readers, the multi-node bed, the report renderer, fuzzing.
TEST_PKGS=(
  hdf5-tools
  python3-numpy python3-h5py python3-yaml   # python3-yaml: slurm/nightly.py reads its matrix
  iproute2 util-linux # the multi-node test bed's namespaces (tests/multinode/testbed.sh)
  chromium            # renders the compare report headless in its test
  clang-14 libclang-rt-14-dev   # the libFuzzer targets of fuzz/ (tools/test.sh builds them in build-fuzz/)
  python3-pip curl    # the serve test's clients: the openai package (PyPI, below) and curl
)
case "${1:-}" in
  --tests) PKGS+=("${TEST_PKGS[@]}") ;;
  "") ;;
  *) echo "install_deps: unknown option '$1' (only --tests)" >&2; exit 2 ;;
esac

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "install_deps: installing ${#missing[@]} packages: ${missing[*]}"
  SUDO=""
  [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# PyPI, for the test suite only: the openai client the serve test drives the server with, in the
# Debian python3 that has h5py (tests/serve/serve_test.py runs under /usr/bin/python3).
if [[ "${1:-}" == --tests ]] && ! /usr/bin/python3 -c "import openai" 2>/dev/null; then
  echo "install_deps: installing the openai Python package (PyPI) for the serve test"
  /usr/bin/python3 -m pip install -q --break-system-packages openai
fi
