#!/usr/bin/env bash
# Builds dlc with AddressSanitizer + UndefinedBehaviorSanitizer (GCC, -DDLC_SANITIZE=ON)
# into build-asan and runs the unit, lit and conformance tests under it.
#   scripts/sanitize.sh [CTEST_REGEX]     default: unit tests, lit, conformance_interp,
#                                          conformance_interp_opt and an emu shard
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/setup.sh" --test
out="${DLC_ASAN_BUILD_DIR:-$root/build-asan}"
if [ ! -f "$out/build.ninja" ]; then
  cmake -S "$root" -B "$out" -G Ninja -DDLC_SANITIZE=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo
fi
cmake --build "$out" -j "${DLC_JOBS:-2}"
# Leaks are reported too; halt on the first UBSan finding so it cannot scroll by.
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:detect_stack_use_after_return=0"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
regex="${1:-}"
if [ -z "$regex" ]; then
  ctest --test-dir "$out" -j "${DLC_JOBS:-2}" --output-on-failure -L "unit|lit|fuzz|robustness"
  ctest --test-dir "$out" --output-on-failure -R "^(conformance_interp|conformance_interp_opt|conformance_all_targets_shard)$"
else
  ctest --test-dir "$out" -j "${DLC_JOBS:-2}" --output-on-failure -R "$regex"
fi
