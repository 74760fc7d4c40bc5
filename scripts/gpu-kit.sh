#!/usr/bin/env bash
# Builds the GPU validation kit: a self-contained folder (at most 62 MiB) to copy to a
# machine with a GPU, which needs nothing there but a CUDA driver.
#
#   scripts/gpu-kit.sh OUTDIR        then, on the GPU machine: OUTDIR/run.sh
#
#   OUTDIR/models/NAME/NAME   the model suite (opset 17) as `--emit exe` executables
#                             (sm_80/86/89/90 cubins, PTX and emu-check), with inputs and
#                             PyTorch float64 references; resnet18 and resnet50 are
#                             left out (47 and 101 MB of weights)
#   OUTDIR/cases/FAMILY/      one package per kernel family, awkward extents
#                             (scripts/gpu_kit_cases.py), and the bad-index inputs
#   OUTDIR/*/NAME/modeled.tsv dlc inspect's modeled time of each step on A100, H100 and
#                             H200 (scripts/gpu_kit_modeled.py), for model vs measured
#   OUTDIR/tactics/NAME/      ResNet-50's convolutions, a GPT and a ViT block (attention and
#                             GEMMs) in FP16 with their cuDNN and cuBLASLt candidates (sm_90 only;
#                             scripts/gpu_kit_tactics.py): per-layer tactic tables
#   OUTDIR/calibrate/         `dlc calibrate`'s microbenchmarks for sm_80 ... sm_90
#   OUTDIR/templates/NAME_I/  each kernel-library template at three or four shapes (sm_80
#                             and sm_90 only, timed with random inputs; scripts/gpu_kit_cases.py)
#   OUTDIR/bin/dlc-run        the runtime as a package runner (the exe stub); with
#                             --calibrate it measures the GPU for the cost model
#   OUTDIR/torch/             PyTorch eager / torch.compile timing of the same models
#   OUTDIR/run.sh             runs everything, prints one table (scripts/gpu_kit_run.sh)
#
# CI runs `OUTDIR/run.sh --device emu` (test gpu_kit), so the kit never rots.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${1:?usage: scripts/gpu-kit.sh OUTDIR}"
build="${DLC_BUILD_DIR:-$root/build}"
py=/usr/bin/python3
if [ ! -x "$build/tools/dlc" ] || [ ! -x "$build/tools/dlc-exe-stub" ]; then
  "$root/scripts/build.sh"
fi
dlc="$build/tools/dlc"
models=(digits gpt gru lstm mobilenet_v2 squeezenet1_1 transformer)
limit=$((62 * 1024 * 1024)) # (a device run carries at most 64 MiB)

rm -rf "$out"
mkdir -p "$out/models" "$out/cases" "$out/bin" "$out/torch" "$out/calibrate" "$out/tactics"
out="$(cd "$out" && pwd)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

# The exported model suite: the tests' copy when it is there.
src="${DLC_KIT_MODELS:-$build/tests/models-gen/models}"
need=()
for m in "${models[@]}"; do
  [ -f "$src/${m}_op17/test_data_set_0/output_0.pb" ] || need+=("$m")
done
if ((${#need[@]})); then
  src="$build/gpu-kit-models"
  (IFS=,; "$py" "$root/tests/models/export_models.py" --out "$src" --models "${need[*]}" --opsets 17 >/dev/null)
fi

echo "gpu-kit: models"
targets=sm_80,sm_86,sm_89,sm_90,compute_80,emu-check
for m in "${models[@]}"; do
  case_dir="$src/${m}_op17"
  d="$out/models/$m"
  mkdir -p "$d"
  # Strict FP32: the models are compared with PyTorch's float64 outputs at 1e-3.
  "$dlc" compile "$case_dir/model.onnx" --target "$targets" --no-tf32 --emit exe -o "$d/$m" --quiet
  # The same kernels as a package, for the modeled times (from the compile cache).
  "$dlc" compile "$case_dir/model.onnx" --target sm_80,sm_86,sm_89,sm_90 --no-tf32 -o "$tmp/$m.dlc" \
    --quiet
  "$dlc" inspect "$tmp/$m.dlc" --gpu A100,H100,H200 --json -o "$tmp/$m.json"
  "$py" "$root/scripts/gpu_kit_modeled.py" "$tmp/$m.json" "$d/modeled.tsv"
  # Inputs and references as .npy, named as the runtime names its outputs.
  "$py" "$root/scripts/gpu_kit_cases.py" --suite-case "$case_dir" --out "$d"
  echo "  $m: $(du -sh "$d" | cut -f1)"
done

echo "gpu-kit: kernel-family cases"
"$py" "$root/scripts/gpu_kit_cases.py" --out "$tmp/cases"
for c in "$tmp"/cases/*/; do
  n="$(basename "$c")"
  cp -r "$c" "$out/cases/$n"
  # shellcheck disable=SC2046
  "$dlc" compile "$c/model.onnx" --target "$targets" $(cat "$c/flags" 2>/dev/null) \
    -o "$out/cases/$n/model.dlc" --quiet
  "$dlc" inspect "$out/cases/$n/model.dlc" --gpu A100,H100,H200 --json -o "$tmp/$n.json"
  "$py" "$root/scripts/gpu_kit_modeled.py" "$tmp/$n.json" "$out/cases/$n/modeled.tsv"
  rm "$out/cases/$n/model.onnx"
done

echo "gpu-kit: kernel templates at three or four shapes"
"$py" "$root/scripts/gpu_kit_cases.py" --templates --out "$tmp/templates"
for c in "$tmp"/templates/*/; do
  n="$(basename "$c")"
  mkdir -p "$out/templates/$n"
  # shellcheck disable=SC2046
  # sm_80's cubins serve sm_86 and sm_89 too (the kit stays under 62 MiB); our kernels
  # alone (the tactics tables below put them beside cuDNN's).
  "$dlc" compile "$c/model.onnx" --target sm_80,sm_90 --no-vendor-tactics $(cat "$c/flags") \
    -o "$out/templates/$n/model.dlc" --quiet
  "$dlc" inspect "$out/templates/$n/model.dlc" --gpu A100,H100,H200 --json -o "$tmp/t_$n.json"
  "$py" "$root/scripts/gpu_kit_modeled.py" "$tmp/t_$n.json" "$out/templates/$n/modeled.tsv"
done

echo "gpu-kit: tactics models"
"$py" "$root/scripts/gpu_kit_tactics.py" "$tmp/tactics"
for c in "$tmp"/tactics/*/; do
  n="$(basename "$c")"
  mkdir -p "$out/tactics/$n"
  # sm_90 alone (the lent GPUs are H100 and H200): the kit stays under 62 MiB.
  "$dlc" compile "$c/model.onnx" --target sm_90 --fp16 -o "$out/tactics/$n/model.dlc" --quiet
done

echo "gpu-kit: calibration microbenchmarks"
"$dlc" calibrate --emit-kernels "$out/calibrate" >/dev/null
cp "$build/tools/dlc-exe-stub" "$out/bin/dlc-run"
cp "$root/tests/models/export_models.py" "$root/examples/digits/digits_model.py" "$out/torch/"
cp "$root/scripts/gpu_kit_torch_bench.py" "$out/torch/torch_bench.py"
cp "$root/scripts/gpu_kit_torch_kernels.py" "$out/torch/torch_kernels.py"
cp "$root/scripts/gpu_kit_run.sh" "$out/run.sh"
chmod +x "$out/run.sh" "$out/bin/dlc-run"

bytes="$(du -sb "$out" | cut -f1)"
echo "gpu-kit: $out: $((bytes / 1024 / 1024)) MB ($bytes bytes)"
if [ "$bytes" -gt "$limit" ]; then
  echo "gpu-kit: error: the kit is over 62 MiB" >&2
  exit 1
fi
