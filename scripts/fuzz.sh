#!/usr/bin/env bash
# Builds the libFuzzer targets (clang-14, ASan + UBSan) into build-fuzz and runs each
# for SECONDS (default 60) from its seed corpus (tests/fuzz/seeds/<target>).
#   scripts/fuzz.sh [SECONDS] [TARGET ...]     TARGET: onnx package npy textir
# DLC_FUZZ_RUNS=N stops a target after N executions (if SECONDS have not passed first):
#   DLC_FUZZ_RUNS=1000000 scripts/fuzz.sh 3600     the long run the README reports
# Crashing inputs are kept in build-fuzz/crashes/<target>/; minimize one, fix the bug
# and copy it to tests/fuzz/regressions/<target>/ (ctest -L fuzz replays them).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
secs="${1:-60}"
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then targets=(onnx package npy textir); fi
"$root/scripts/setup.sh" --test
out="${DLC_FUZZ_BUILD_DIR:-$root/build-fuzz}"
if [ ! -f "$out/build.ninja" ]; then
  CC=clang-14 CXX=clang++-14 cmake -S "$root" -B "$out" -G Ninja -DDLC_FUZZ=ON -DDLC_WERROR=OFF \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo > "$out.configure.log" 2>&1 || { cat "$out.configure.log"; exit 1; }
fi
declare -A name=([onnx]=Onnx [package]=Package [npy]=Npy [textir]=TextIR)
bins=()
for t in "${targets[@]}"; do bins+=("fuzz_${name[$t]}"); done
cmake --build "$out" -j "${DLC_JOBS:-2}" --target "${bins[@]}"
failed=0
printf "%-9s %12s %10s %8s %s\n" target executions exec/s crashes corpus
for t in "${targets[@]}"; do
  corpus="$out/corpus/$t" crashes="$out/crashes/$t"
  mkdir -p "$corpus" "$crashes"
  log="$out/fuzz-$t.log"
  ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=halt_on_error=1 \
    "$out/tests/fuzz/fuzz_${name[$t]}" -max_total_time="$secs" ${DLC_FUZZ_RUNS:+-runs="$DLC_FUZZ_RUNS"} -rss_limit_mb=4096 -timeout=30 \
    -print_final_stats=1 -artifact_prefix="$crashes/" "$corpus" "$root/tests/fuzz/seeds/$t" > "$log" 2>&1 || true
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo 0)
  rate=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo 0)
  n=$(find "$crashes" -type f \( -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' -o -name 'oom-*' \) | wc -l)
  printf "%-9s %12s %10s %8s %s\n" "$t" "${execs:-0}" "${rate:-0}" "$n" "$(ls "$corpus" | wc -l) inputs"
  if [ "$n" -gt 0 ] || ! grep -q 'stat::number_of_executed_units' "$log"; then
    failed=1
    echo "fuzz: $t: see $log and $crashes" >&2
    grep -m5 -E 'ERROR|SUMMARY|runtime error' "$log" >&2 || true
  fi
done
exit $failed
