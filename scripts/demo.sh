#!/usr/bin/env bash
# The main job on the bundled example: compile the digits CNN (examples/digits,
# trained by make_digits_cnn.py) for every GPU architecture plus emu, then run it on
# three held-out digits: on the GPU if there is one, else on the emu backend.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/setup.sh"
"$root/scripts/build.sh" dlc >/dev/null
build="${DLC_BUILD_DIR:-$root/build}"
dlc="$build/tools/dlc"
out="$build/demo"
mkdir -p "$out"
"$dlc" compile "$root/examples/digits/digits_cnn.onnx" -o "$out/digits.dlc"
for digit in "$root"/examples/digits/digit_*_label*.npy; do
  label="${digit##*label}"
  label="${label%.npy}"
  result="$("$dlc" run "$out/digits.dlc" --input "image=$digit" --output-dir "$out/outputs" | grep '^probs:')"
  predicted="${result##*argmax=}"
  echo "$(basename "$digit"): predicted digit $predicted (label $label)"
done
