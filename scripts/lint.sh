#!/usr/bin/env bash
# Unused #includes in the library and the tools: clang-tidy 19's misc-include-cleaner
# (.clang-tidy) over every C++ source of the build's compile_commands.json (CUDA sources, which
# clang-tidy does not compile as nvcc does, excepted). Fails, listing them, on any "not used
# directly" finding. Run by the ctest test Lint.IncludeCleaner (label lint).
#
#   bash scripts/lint.sh [build-folder]      # default: build/
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$root/build}"
tidy=$(command -v clang-tidy-19 || true)
runner=$(command -v run-clang-tidy-19 || true)
if [[ -z "$tidy" || -z "$runner" ]]; then
  echo "lint.sh: clang-tidy-19 is not installed (bash scripts/install-deps.sh)" >&2
  exit 1
fi
[[ -f "$build/compile_commands.json" ]] || { echo "lint.sh: no $build/compile_commands.json" >&2; exit 1; }
jobs=$(nproc 2>/dev/null || echo 2)
# The library's and the tools' own sources (not tests, benchmarks or generated files), .cpp only.
files_re="^$root/(src|tools)/.*\\.cpp\$"
out=$(mktemp)
trap 'rm -f "$out"' EXIT
# -extra-arg: GCC-only warning options in the compile commands are unknown to clang.
"$runner" -clang-tidy-binary "$tidy" -p "$build" -j "$jobs" -quiet \
  -extra-arg=-Wno-unknown-warning-option -extra-arg=-Wno-unused-command-line-argument \
  "$files_re" >"$out" 2>/dev/null || true
findings=$(grep -E "warning: included header .* is not used directly \[misc-include-cleaner\]" "$out" | sed "s|^$root/||" | sort -u || true)
checked=$(grep -c '^\[' "$out" 2>/dev/null || true)
if [[ -n "$findings" ]]; then
  echo "$findings"
  echo "lint.sh: $(wc -l <<<"$findings") unused #include(s); remove them (clang-tidy-19 --fix -p $build FILE does)." >&2
  exit 1
fi
echo "lint.sh: no unused #includes (misc-include-cleaner, clang-tidy 19)"
