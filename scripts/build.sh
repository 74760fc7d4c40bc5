#!/usr/bin/env bash
# Configures and builds dlc into ./build (override with DLC_BUILD_DIR). Uses 2 jobs
# by default (DLC_JOBS), which is what CI machines have.
#   scripts/build.sh [TARGET ...]     default: everything
# The configure step runs every time (quick when nothing changed), so a build tree
# first configured without the test suite's packages picks up the tests once
# `scripts/setup.sh --test` has installed them.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${DLC_BUILD_DIR:-$root/build}"
jobs="${DLC_JOBS:-2}"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE="${DLC_BUILD_TYPE:-Release}" ${DLC_CMAKE_ARGS:-} >/dev/null
targets=()
for t in "$@"; do targets+=(--target "$t"); done
cmake --build "$build" -j "$jobs" "${targets[@]}"
