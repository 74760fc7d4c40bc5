#!/usr/bin/env bash
# The GPU validation kit's runner (copied into the kit as run.sh by scripts/gpu-kit.sh).
# Needs only a CUDA driver (and bash and coreutils): the models are executables, the
# kernel-family cases packages run by bin/dlc-run; both carry the runtime.
#
#   ./run.sh [--device cuda|emu] [--no-bench] [--no-sanitizer] [--no-torch]
#
# For every model and case: runs it on the device and compares each output with the
# PyTorch (float64) reference; on cuda also with emu's outputs, under compute-sanitizer
# (memcheck) when it is on PATH, and times it with --bench (compute median). Where
# python3 with a CUDA torch is present, times PyTorch eager and torch.compile on the
# same models. On emu every run has --check (initcheck, racecheck, alignment, masks).
# Then the bad-index case must fail with a data error naming the node. Prints one table;
# exits 1 if any row failed. On a GPU it then runs `dlc-run --calibrate` (the cost
# model's microbenchmarks; the profile it prints is what `dlc inspect --gpu-profile`
# takes) and prints dlc inspect's modeled time beside the measured one, per package and
# for each package's costliest steps (host-timed per step by --bench --profile).
set -uo pipefail
kit="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
device=cuda bench=1 sanitizer=1 torch=1
while [ $# -gt 0 ]; do
  case "$1" in
  --device) device="$2"; shift 2 ;;
  --device=*) device="${1#*=}"; shift ;;
  --no-bench) bench=0; shift ;;
  --no-sanitizer) sanitizer=0; shift ;;
  --no-torch) torch=0; shift ;;
  -h | --help) sed -n '2,15p' "$0"; exit 0 ;;
  *) echo "run.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
case "$device" in cuda | cuda:* | emu) ;; *) echo "run.sh: --device must be cuda, cuda:N or emu" >&2; exit 2 ;; esac
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
check=()
[ "$device" = emu ] && check=(--check) bench=0 # (emu timings are not GPU timings)
have_sanitizer=0
[ "$device" != emu ] && [ "$sanitizer" = 1 ] && command -v compute-sanitizer >/dev/null 2>&1 && have_sanitizer=1
torch_times="" torch_kernels=""
if [ "$device" != emu ] && [ "$bench" = 1 ] && [ "$torch" = 1 ] && command -v python3 >/dev/null 2>&1 &&
  python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  torch_times="$(cd "$kit/torch" && python3 torch_bench.py $(ls "$kit/models") 2>"$work/torch.log")"
  # PyTorch's SDPA, LayerNorm and softmax at the kernel templates' shapes.
  torch_kernels="$(cd "$kit/torch" && python3 torch_kernels.py 2>"$work/torch_kernels.log")"
fi

rows=() failed=0 gpu_name="" modeled_rows=()
# modeled_profile: the kit's modeled.tsv column for this GPU (H100's for unknown GPUs).
modeled_profile() {
  case "$gpu_name" in *H200*) echo H200 ;; *A100*) echo A100 ;; *) echo H100 ;; esac
}
# input_args DIR: --input NAME=DIR/FILE for each NAME=FILE line of DIR/inputs.txt, into args.
input_args() {
  args=()
  while IFS= read -r line; do [ -n "$line" ] && args+=(--input "${line%%=*}=$1/${line#*=}"); done <"$1/inputs.txt"
}
# run NAME DIR CMD...: one row of the table (DIR holds inputs.txt and expected/).
run_case() {
  local name="$1" dir="$2"
  shift 2
  # The kit's packages are ours, compiled on another machine: their emu code may run.
  local -a cmd=("$@" --allow-host-code) inputs tol=()
  input_args "$dir"
  # Looser tolerances for reduced precision (the case's expect_args: --rtol R --atol A).
  [ -f "$dir/expect_args" ] && read -r -a tol <"$dir/expect_args"
  inputs=("${args[@]}")
  local out="$work/$name" status=pass err="-" vsemu="-" san="-" ms="-" eager="-" compiled="-"
  mkdir -p "$out/dev" "$out/emu"
  if ! "${cmd[@]}" "${inputs[@]}" --device "$device" "${check[@]}" --expect "$dir/expected" "${tol[@]}" \
    --output-dir "$out/dev" >"$out/log" 2>&1; then
    status=FAIL
    sed 's/^/    /' "$out/log" | tail -3 >&2
  fi
  err="$(sed -n 's/.*max rel error \([^ ]*\)$/\1/p' "$out/log" | sort -g | tail -1)"
  if [ "$device" != emu ]; then
    if "${cmd[@]}" "${inputs[@]}" --device emu --output-dir "$out/emu" --quiet >"$out/emu.log" 2>&1 &&
      "${cmd[@]}" "${inputs[@]}" --device "$device" --expect "$out/emu" "${tol[@]}" --output-dir "$out/dev2" \
        >"$out/vs.log" 2>&1; then
      vsemu="$(sed -n 's/.*max rel error \([^ ]*\)$/\1/p' "$out/vs.log" | sort -g | tail -1)"
    else
      vsemu=FAIL status=FAIL
    fi
    if [ "$have_sanitizer" = 1 ]; then
      if compute-sanitizer --tool memcheck --error-exitcode 9 "${cmd[@]}" "${inputs[@]}" --device "$device" \
        --no-cuda-graphs --quiet --output-dir "$out/san" >"$out/san.log" 2>&1; then
        san=clean
      else
        san=ERRORS status=FAIL
      fi
    fi
  fi
  if [ "$bench" = 1 ]; then
    "${cmd[@]}" --bench "${inputs[@]}" --device "$device" --iterations "$([ "$device" = emu ] && echo 3 || echo 100)" \
      --warmup "$([ "$device" = emu ] && echo 1 || echo 20)" >"$out/bench.log" 2>/dev/null
    ms="$(sed -n 's/^compute .*median *\([0-9.]*\).*/\1/p' "$out/bench.log")"
    [ -z "$ms" ] && ms="-"
    [ -z "$gpu_name" ] && gpu_name="$(sed -n 's/^device: cuda (\(.*\)/\1/p' "$out/bench.log" | head -1)"
    if [ "$device" != emu ] && [ -f "$dir/modeled.tsv" ]; then
      # The per-step profile, for the model-vs-measured table below.
      "${cmd[@]}" --bench --profile "${inputs[@]}" --device "$device" --iterations 20 --warmup 3 \
        >"$out/profile.log" 2>/dev/null || true
      modeled_rows+=("$name"$'\t'"$dir/modeled.tsv"$'\t'"$out/profile.log"$'\t'"$ms")
    fi
    if [ -n "$torch_times" ]; then
      eager="$(printf '%s\n' "$torch_times" | sed -n "s/^$name eager \([^ ]*\) compiled \([^ ]*\)$/\1/p")"
      compiled="$(printf '%s\n' "$torch_times" | sed -n "s/^$name eager \([^ ]*\) compiled \([^ ]*\)$/\2/p")"
    fi
  fi
  [ "$status" = FAIL ] && failed=1
  rows+=("$(printf '| %-20s | %-6s | %-9s | %-9s | %-9s | %-8s | %-10s | %-10s | %-10s |' "$name" "$status" "${err:--}" \
    "${vsemu:--}" "$san" "${ms:--}" "${eager:--}" "${compiled:--}" "${device}")")
  echo "${rows[-1]}" >&2 # as it comes, so that a run cut short still shows its rows
}

for d in "$kit"/models/*/; do
  n="$(basename "$d")"
  run_case "$n" "$d" "$d/$n"
done
for d in "$kit"/cases/*/; do
  n="$(basename "$d")"
  run_case "$n" "$d" "$kit/bin/dlc-run" "$d/model.dlc"
done

# The review's bad-index case: an index past the table fails the run with a data error
# that names the node (no trap: on a GPU the context, and every session in it, lives on).
bad="$kit/cases/gather/bad_inputs"
input_args "$bad"
status=FAIL
if "$kit/bin/dlc-run" "$kit/cases/gather/model.dlc" --allow-host-code "${args[@]}" --device "$device" "${check[@]}" \
  --output-dir "$work/bad" >"$work/bad.log" 2>&1; then
  echo "    bad-index case: the run succeeded" >&2
elif grep -q "index out of range" "$work/bad.log" && grep -q "node '" "$work/bad.log"; then
  status=pass
else
  sed 's/^/    /' "$work/bad.log" | tail -3 >&2
fi
[ "$status" = FAIL ] && failed=1
rows+=("$(printf '| %-20s | %-6s | %-9s | %-9s | %-9s | %-8s | %-10s | %-10s | %-10s |' gather_bad_index "$status" - - - - - - "$device")")

# The comparison itself: a reference off by 1% in one element must fail (exit status 3).
good="$kit/cases/gather"
input_args "$good"
"$kit/bin/dlc-run" "$good/model.dlc" --allow-host-code "${args[@]}" --device "$device" --expect "$good/wrong_expected" \
  --output-dir "$work/wrong" >"$work/wrong.log" 2>&1
rc=$?
status=FAIL
[ "$rc" = 3 ] && grep -q "does not match" "$work/wrong.log" && status=pass
[ "$status" = FAIL ] && failed=1
rows+=("$(printf '| %-20s | %-6s | %-9s | %-9s | %-9s | %-8s | %-10s | %-10s | %-10s |' expect_catches_error "$status" - - - - - - "$device")")

echo
echo "| case                 | status | max rel   | vs emu    | sanitizer | ms       | torch eager| torch.comp | device     |"
echo "|----------------------|--------|-----------|-----------|-----------|----------|------------|------------|------------|"
printf '%s\n' "${rows[@]}"
if [ "$device" = emu ]; then
  echo "(emu: CPU timings of emulated kernels, not GPU timings)"
fi

if [ "$device" != emu ] && [ "$bench" = 1 ]; then
  echo
  echo "calibration (dlc-run --calibrate; save the JSON as a profile for dlc inspect --gpu-profile):"
  dev=0
  case "$device" in cuda:*) dev="${device#cuda:}" ;; esac
  if ! "$kit/bin/dlc-run" --calibrate "$kit/calibrate" --device "$dev" 2>"$work/calibrate.log"; then
    sed 's/^/    /' "$work/calibrate.log" | tail -3
  fi
  # Each kernel template at three shapes: timed with random inputs, no reference.
  for d in "$kit"/templates/*/; do
    [ -f "$d/model.dlc" ] || continue
    n="$(basename "$d")" out="$work/$n"
    mkdir -p "$out"
    "$kit/bin/dlc-run" "$d/model.dlc" --bench --device "$device" --iterations 100 --warmup 20 \
      >"$out/bench.log" 2>/dev/null
    ms="$(sed -n 's/^compute .*median *\([0-9.]*\).*/\1/p' "$out/bench.log")"
    "$kit/bin/dlc-run" "$d/model.dlc" --bench --profile --device "$device" --iterations 20 --warmup 3 \
      >"$out/profile.log" 2>/dev/null || true
    modeled_rows+=("$n"$'\t'"$d/modeled.tsv"$'\t'"$out/profile.log"$'\t'"${ms:--}")
  done
  # Tactics: each layer's candidates timed when the session starts, into an empty cache
  # (the first session: tuning), then read from it (the second).
  echo
  echo "tactics on $gpu_name (dlc-run --bench --tactics: each layer's candidates in us, * runs):"
  for d in "$kit"/tactics/*/; do
    [ -f "$d/model.dlc" ] || continue
    n="$(basename "$d")" out="$work/tactics_$n"
    mkdir -p "$out"
    for pass in first second; do
      DLC_CACHE_DIR="$out/cache" "$kit/bin/dlc-run" "$d/model.dlc" --bench --tactics \
        --device "$device" --iterations 20 --warmup 5 >"$out/$pass.log" 2>&1 || true
    done
    t1="$(sed -n 's/^session created in \([0-9.]*\) ms.*/\1/p' "$out/first.log")"
    t2="$(sed -n 's/^session created in \([0-9.]*\) ms.*/\1/p' "$out/second.log")"
    echo "  $n: session created in ${t1:-?} ms (tuning), ${t2:-?} ms (from the cache)"
    sed -n '/^tactics/,/^session created/p' "$out/first.log" | sed '/^session created/d; s/^/    /'
    grep '^note:\|error' "$out/first.log" "$out/second.log" | sed 's/^/    /' | head -6
  done
  gpu="$(modeled_profile)"
  echo
  echo "model vs measured on $gpu_name (modeled with dlc's built-in $gpu profile; per step: host-timed"
  echo "with a synchronization after each step, so small steps measure ~10 us more than they take):"
  echo "(torch: PyTorch's own kernel at the same shape where torch/torch_kernels.py has one: SDPA in FP16,"
  echo "LayerNorm, softmax; its attention TFLOP/s count the causal half.)"
  echo "| case                 | modeled us | measured us (compute median) | measured / modeled | TFLOP/s measured | torch us   | torch TFLOP/s |"
  echo "|----------------------|------------|------------------------------|--------------------|------------------|------------|---------------|"
  for r in "${modeled_rows[@]}"; do
    IFS=$'\t' read -r n tsv prof ms <<<"$r"
    set -- "$n" "$tsv" "$prof" "$ms"
    modeled="$(awk -F'\t' -v g="$gpu" '$1 == g && $2 == "total" { print $4 }' "$2")"
    flops="$(awk -F'\t' -v g="$gpu" '$1 == g && $2 == "total" { print $7 }' "$2")"
    tms="$(printf '%s\n' "$torch_kernels" | awk -v n="$1" '$1 == n && $2 == "torch" { print $3 }')"
    ttf="$(printf '%s\n' "$torch_kernels" | awk -v n="$1" '$1 == n && $2 == "torch" { print $4 }')"
    awk -v n="$1" -v m="$modeled" -v ms="$4" -v fl="${flops:-0}" -v tms="${tms:--}" -v ttf="${ttf:--}" 'BEGIN {
      if (ms == "-" || m == "" || m == 0) r = "-"; else r = sprintf("%.2f", ms * 1000 / m);
      tf = (ms == "-" || ms == 0 || fl == 0) ? "-" : sprintf("%.2f", fl / (ms * 1e-3) / 1e12);
      tu = tms == "-" ? "-" : sprintf("%.1f", tms * 1000);
      printf "| %-20s | %10s | %28s | %18s | %16s | %10s | %13s |\n", n, m, (ms == "-" ? "-" : sprintf("%.1f", ms * 1000)), r, tf, tu, ttf }'
  done
  echo
  echo "costliest measured steps per case (step, kind, limiting bound, modeled us, measured us):"
  for r in "${modeled_rows[@]}"; do
    IFS=$'\t' read -r n tsv prof ms <<<"$r"
    set -- "$n" "$tsv" "$prof" "$ms"
    awk -F'\t' -v g="$gpu" -v n="$1" '
      FNR == NR { if ($1 == g && $2 != "total") { model[$2] = $4; limit[$2] = $5; node[$2] = $6; nm++ } next }
      /^step / { split($0, f, " "); k = f[2]; us[k] = f[4]; kind[k] = f[3]; np++; if (!(k in model)) mismatch = 1 }
      END {
        if (mismatch || nm != np) { printf "  %s: %d steps ran, %d modeled (a different schedule)\n", n, np, nm; exit }
        for (i = 0; i < 3; i++) {
          best = ""; for (k in us) if (!(k in done) && (best == "" || us[k] + 0 > us[best] + 0)) best = k
          if (best == "") break
          done[best] = 1
          printf "  %-20s step %-4s %-7s %-8s modeled %9s  measured %9s  %s\n", n, best, kind[best], limit[best], model[best], us[best], node[best]
        }
      }' "$2" "$3"
  done
fi
exit $failed
