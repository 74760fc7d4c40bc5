#!/usr/bin/env bash
# Runs scripts/gpu_conv_bench.py's cases on a GPU (copied into its OUTDIR as run.sh).
#   ./run.sh DLC_RUN [OUTFILE_DIR]
# Per case: dlc-run --bench (CUDA graphs, median of 100), each kernel's device time by
# Nsight Compute (where ncu is on PATH), and cuDNN's time through PyTorch (where a CUDA
# torch is importable). Prints one table.
set -uo pipefail
dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
run="${1:?usage: run.sh DLC_RUN [LOGDIR]}"
logs="${2:-$(mktemp -d)}"
mkdir -p "$logs"
torch_log="$logs/torch.txt"
python3 "$dir/gpu_conv_bench.py" torch "$dir" >"$torch_log" 2>"$logs/torch.err" || true
have_ncu=0
command -v ncu >/dev/null 2>&1 && have_ncu=1
echo "| case | chain | GFLOP | dlc package us (graphs) | dlc conv kernels us (ncu) | dlc TFLOP/s (kernels) | cuDNN us per conv | cuDNN TFLOP/s |"
echo "|---|---|---|---|---|---|---|---|"
python3 - "$dir/cases.json" <<'PY' >"$logs/cases.tsv"
import json, sys
for k, v in json.load(open(sys.argv[1])).items():
    print(k, v[6], v[-1], sep="\t")
PY
while IFS=$'\t' read -r name chain fl; do
  pkg="$dir/$name.dlc"
  "$run" "$pkg" --allow-host-code --bench --device cuda --iterations 100 --warmup 20 >"$logs/$name.bench" 2>&1 </dev/null
  us="$(sed -n 's/^compute .*median *\([0-9.]*\).*/\1/p' "$logs/$name.bench" | awk '{ printf "%.1f", $1 * 1000 }')"
  kus="-"
  if [ "$have_ncu" = 1 ]; then
    ncu --clock-control none --metrics gpu__time_duration.sum --csv "$run" "$pkg" --allow-host-code --bench \
      --device cuda --iterations 1 --warmup 0 --no-cuda-graphs >"$logs/$name.ncu" 2>&1 </dev/null
    # The convolution kernels' time in one run (the last run's launches: iterations 1).
    # Each conv kernel's duration (ncu's CSV: "ID",...,"Kernel Name" 5th,...,unit, value with
    # thousands separators), in microseconds.
    kus="$(awk -F'","' '/gpu__time_duration/ && $5 ~ /conv/ { v = $NF; gsub(/[",]/, "", v); u = $(NF-1)
        f = (u ~ /^(ns|nsecond)$/) ? 1e-3 : (u ~ /^(ms|msecond)$/) ? 1e3 : (u ~ /^(s|second)$/) ? 1e6 : 1
        s += v * f } END { printf "%.1f", s }' "$logs/$name.ncu")"
  fi
  tus="$(sed -n "s/^torch ${name%@*} \(.*\)$/\1/p" "$torch_log")"
  awk -v n="$name" -v c="$chain" -v fl="$fl" -v us="${us:--}" -v kus="$kus" -v tus="${tus:--}" 'BEGIN {
    tf = (kus == "-" || kus == 0) ? "-" : sprintf("%.1f", fl / (kus * 1e-6) / 1e12)
    ttf = (tus == "-") ? "-" : sprintf("%.1f", fl / c / (tus * 1e-6) / 1e12)
    printf "| %s | %d | %.2f | %s | %s | %s | %s | %s |\n", n, c, fl / 1e9, us, kus, tf, tus, ttf }'
done <"$logs/cases.tsv"
