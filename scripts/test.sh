#!/usr/bin/env bash
# The whole test suite: install dependencies, build, run every test with CTest.
# Tests labelled `gpu` skip themselves when no CUDA device is present.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/setup.sh"
"$root/scripts/build.sh"
build="${DLC_BUILD_DIR:-$root/build}"
ctest --test-dir "$build" -j "${DLC_JOBS:-2}" --output-on-failure --timeout 1800
