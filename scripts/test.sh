#!/usr/bin/env bash
# The whole test suite: install dependencies, check formatting, build, run every test with CTest, then
# a short fuzzing smoke run (DLC_FUZZ_SECONDS per target, default 30; 0 skips it).
# Tests labelled `gpu` skip themselves when no CUDA device is present.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/setup.sh" --test
# Formatting drift fails first (scripts/format.sh rewrites the files).
"$root/scripts/format.sh" --check
"$root/scripts/build.sh"
# ONNX Runtime for the model suite's second reference (prebuilt CPU binaries ship in
# the npm package; ONNXRUNTIME_NODE_INSTALL=skip skips the optional GPU downloads).
if [ ! -d "$root/tools/ort/node_modules/onnxruntime-node" ]; then
  (cd "$root/tools/ort" && ONNXRUNTIME_NODE_INSTALL=skip npm install --no-audit --no-fund --loglevel=error)
fi
build="${DLC_BUILD_DIR:-$root/build}"
ctest --test-dir "$build" -j "${DLC_JOBS:-2}" --output-on-failure --timeout 1800
if [ "${DLC_FUZZ_SECONDS:-30}" != "0" ]; then
  "$root/scripts/fuzz.sh" "${DLC_FUZZ_SECONDS:-30}"
fi
