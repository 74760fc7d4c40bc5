#!/usr/bin/env bash
# Compile-time and kernel-library benchmark over the model suite (a benchmark, not a
# test: it asserts nothing). For each model: cold compile for the GPU targets
# (sm_80,sm_86,sm_89,sm_90 + compute_80 PTX) and with emu, time per phase, warm-cache
# time, unique kernels against launches, package bytes, modeled H100 latency (and the
# roofline bound), and the kernels carrying > 1% of the FLOPs with SM fill < 0.5 on
# H100. Prints one Markdown table per section.
#   scripts/bench-compile.sh [--models resnet50,...] [--opset 17] [--json OUT]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${DLC_BUILD_DIR:-$root/build}"
exec /usr/bin/python3 "$root/scripts/bench_compile.py" --dlc "$build/tools/dlc" \
  --models-dir "$build/tests/models-gen/models" --export "$root/tests/models/export_models.py" "$@"
