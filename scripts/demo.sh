#!/usr/bin/env bash
# The main job on the bundled example: build dlc, optimize the bundled model and run it.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/setup.sh"
"$root/scripts/build.sh" >/dev/null
build="${DLC_BUILD_DIR:-$root/build}"
dlc="$build/tools/dlc"
model="$root/examples/mlp/mlp.ir"
echo "== dlc opt $model (default pipeline)"
"$dlc" opt "$model" --elide-constants=8
echo "== dlc interpret (reference interpreter, seeded random input)"
"$dlc" interpret "$model" --seed 1
