#!/usr/bin/env bash
# Configures and builds dlc into ./build (override with DLC_BUILD_DIR). Uses 2 jobs
# by default (DLC_JOBS), which is what CI machines have.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${DLC_BUILD_DIR:-$root/build}"
jobs="${DLC_JOBS:-2}"
if [ ! -f "$build/build.ninja" ]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE="${DLC_BUILD_TYPE:-Release}" ${DLC_CMAKE_ARGS:-}
fi
cmake --build "$build" -j "$jobs"
