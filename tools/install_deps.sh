#!/usr/bin/env bash
# Installs dayzero's build and test dependencies from Debian packages. Idempotent: only
# missing packages are fetched, so a second run costs a dpkg query.
set -euo pipefail

PKGS=(
  build-essential cmake pkg-config git
  openmpi-bin libopenmpi-dev
  libhdf5-dev hdf5-tools
  libyaml-cpp-dev libspdlog-dev nlohmann-json3-dev libcli11-dev
  libgtest-dev
  libopenblas-dev libblis-dev libdnnl-dev
  libpcre2-dev libutf8proc-dev
  libstb-dev
  python3-numpy python3-h5py
  iproute2 util-linux # the multi-node test bed's namespaces (tests/multinode/testbed.sh)
  chromium            # renders the compare report headless in its test
  clang-14 libclang-rt-14-dev   # the libFuzzer targets of fuzz/ (tools/test.sh builds them in build-fuzz/)
)

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "install_deps: installing ${missing[*]}"
  SUDO=""
  [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
