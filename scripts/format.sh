#!/usr/bin/env bash
# Formats the C, C++ and CUDA sources (tracked, and new ones not ignored) with the repository's .clang-format.
#   scripts/format.sh           rewrite the files in place
#   scripts/format.sh --check   change nothing; list the files that differ and fail
# The version is pinned (Debian 12's clang-format-14): another version formats
# differently, and the check must give the same answer on every machine.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
format="${CLANG_FORMAT:-clang-format-14}"
if ! command -v "$format" >/dev/null 2>&1; then
  echo "format: $format not found (Debian: apt-get install clang-format-14)" >&2
  exit 2
fi
# Tracked files and new ones git does not ignore (a change is formatted before it is added).
mapfile -t files < <(git ls-files --cached --others --exclude-standard -- '*.c' '*.h' '*.cpp' '*.hpp' '*.cuh')
if [ "${1:-}" = "--check" ]; then
  bad=()
  for f in "${files[@]}"; do
    if ! "$format" --dry-run --Werror "$f" >/dev/null 2>&1; then
      bad+=("$f")
    fi
  done
  if ((${#bad[@]})); then
    echo "format: ${#bad[@]} file(s) differ from .clang-format (run scripts/format.sh):" >&2
    printf '  %s\n' "${bad[@]}" >&2
    exit 1
  fi
  echo "format: ${#files[@]} files clean"
elif [ $# -eq 0 ]; then
  printf '%s\0' "${files[@]}" | xargs -0 -n 32 "$format" -i
else
  echo "usage: scripts/format.sh [--check]" >&2
  exit 2
fi
