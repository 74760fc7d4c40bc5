#!/usr/bin/env bash
# GPU test (ctest label `gpu`): runs the digits model and the transformer of the model
# suite on the cuda backend and compares with the emu backend. Exits 77 (skipped)
# when there is no driver or no device.
set -euo pipefail
dlc="$1"
src="$2"
models="${3:-}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

"$dlc" compile "$src/examples/digits/digits_cnn.onnx" -o "$tmp/digits.dlc" -q
if ! out="$("$dlc" run "$tmp/digits.dlc" --device cuda "$src/examples/digits/digit_0_label2.npy" \
            --output-dir "$tmp/gpu" -q 2>&1)"; then
  if grep -q -e "could not be loaded" -e "no CUDA device" -e "cuInit failed" <<<"$out"; then
    echo "skipped: $out"
    exit 77
  fi
  echo "$out"
  exit 1
fi
"$dlc" run "$tmp/digits.dlc" --device emu "$src/examples/digits/digit_0_label2.npy" --output-dir "$tmp/emu" -q
compare() {
  /usr/bin/python3 - "$1" "$2" <<'PY'
import sys, numpy as np
a, b = np.load(sys.argv[1]), np.load(sys.argv[2])
ok = a.shape == b.shape and np.allclose(a, b, rtol=1e-3, atol=1e-4)
print(("match " if ok else "MISMATCH ") + sys.argv[1])
sys.exit(0 if ok else 1)
PY
}
compare "$tmp/gpu/probs.npy" "$tmp/emu/probs.npy"
if [ -n "$models" ] && [ -f "$models/models/transformer_op17/model.onnx" ]; then
  m="$models/models/transformer_op17"
  "$dlc" compile "$m/model.onnx" -o "$tmp/t.dlc" -q
  "$dlc" run "$tmp/t.dlc" --device cuda "$m/test_data_set_0/input_0.pb" --output-dir "$tmp/tg" -q
  "$dlc" run "$tmp/t.dlc" --device emu "$m/test_data_set_0/input_0.pb" --output-dir "$tmp/te" -q
  compare "$tmp/tg/output_0.npy" "$tmp/te/output_0.npy"
fi
# Quantized models (INT8 kernels, float8 conversions: cvt.rn.satfinite on sm_89 and
# later) against ONNX Runtime, as on emu.
/usr/bin/python3 "$src/tests/models/quantized_onnx.py" --dlc "$dlc" --work "$tmp/quantized" --device cuda
echo "gpu smoke test passed"
