#!/usr/bin/env bash
# `pip install .` into a fresh venv (offline: Debian's setuptools and wheel, no build
# isolation), using the CMake build in $1; then, from outside the source tree, the
# installed package compiles the digits CNN and classifies a digit.
set -euo pipefail
build="$1" src="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
venv="$build/tests/pip-venv"
rm -rf "$venv"
/usr/bin/python3 -m venv --system-site-packages "$venv"
DLC_BUILD_DIR="$build" "$venv/bin/pip" install --quiet --no-build-isolation --no-deps --no-index "$src"
cd "$venv"
"$venv/bin/python" - "$src" <<'PY'
import os, sys, tempfile
import numpy as np
import dlc
src = sys.argv[1]
assert dlc.__file__.startswith(sys.prefix), dlc.__file__  # the installed copy, not build/python
with tempfile.TemporaryDirectory() as d:
    pkg = dlc.compile(os.path.join(src, "examples", "digits", "digits_cnn.onnx"), os.path.join(d, "d.dlc"), target="emu")
    logits, probs = dlc.InferenceSession(pkg, device="emu").run(
        None, {"image": np.load(os.path.join(src, "examples", "digits", "digit_2_label9.npy"))})
    assert int(probs.argmax()) == 9, probs
print("pip install: dlc imported from", os.path.dirname(dlc.__file__), "and classified a digit")
PY
