#!/usr/bin/env bash
# Installs the Debian packages dlc needs. Idempotent: installs only what is missing,
# and does nothing (not even `apt-get update`) when everything is present.
#   scripts/setup.sh          what building dlc and running the demo need
#   scripts/setup.sh --test   that, plus what the test suite needs: GoogleTest, lit and
#                             FileCheck, the references (PyTorch, ONNX, scikit-learn,
#                             ONNX Runtime through Node.js), the Python package's build,
#                             Open MPI, clang for the fuzzers and clang-format
# The CUDA toolkit is expected at /usr/local/cuda (not a Debian package).
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build git pkg-config
  llvm-14-dev
  libonnx-dev libprotobuf-dev protobuf-compiler
  libopenblas-dev libboost-context-dev libflatbuffers-dev flatbuffers-compiler zlib1g-dev
)
case "${1:-}" in
  "") ;;
  --test)
    PACKAGES+=(
      libgtest-dev llvm-14-tools clang-format-14
      libonnx-testdata
      python3 python3-dev python3-numpy python3-onnx python3-torch python3-torchvision python3-sklearn
      pybind11-dev python3-pytest python3-venv python3-setuptools python3-wheel
      clang-14 libclang-rt-14-dev
      openmpi-bin libopenmpi3
    )
    # Node.js and npm (ONNX Runtime as a reference, through npm's onnxruntime-node):
    # Debian's packages unless a node and npm are already on PATH.
    if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
      PACKAGES+=(nodejs npm)
    fi
    ;;
  *)
    echo "usage: scripts/setup.sh [--test]" >&2
    exit 2
    ;;
esac

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]})); then
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

if [ ! -x /usr/local/cuda/bin/nvcc ] && [ ! -f /usr/local/cuda/include/nvrtc.h ]; then
  echo "setup: warning: the CUDA toolkit was not found at /usr/local/cuda" >&2
fi
