#!/usr/bin/env bash
# The project's C++ style (.clang-format, clang-format 14 from Debian's clang-format-14):
#   bash scripts/format.sh           # reformat every C++ and CUDA source in place
#   bash scripts/format.sh --check   # list the files that differ; exit 1 if any does (a ctest)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
CLANG_FORMAT=${CLANG_FORMAT:-clang-format-14}
command -v "$CLANG_FORMAT" >/dev/null || { echo "format.sh: $CLANG_FORMAT not found (apt-get install clang-format-14)" >&2; exit 2; }
mapfile -d '' files < <(find src include tests bench tools examples -type f \
  \( -name '*.h' -o -name '*.cpp' -o -name '*.cu' -o -name '*.cuh' \) -print0 2>/dev/null | sort -z)
if [[ "${1:-}" == "--check" ]]; then
  bad=0
  for f in "${files[@]}"; do
    if ! "$CLANG_FORMAT" --dry-run -Werror "$f" >/dev/null 2>&1; then
      echo "format.sh: $f is not formatted (bash scripts/format.sh)"
      bad=1
    fi
  done
  [[ $bad == 0 ]] && echo "format.sh: ${#files[@]} files formatted"
  exit $bad
fi
printf '%s\0' "${files[@]}" | xargs -0 -n 50 "$CLANG_FORMAT" -i
# The docs show some examples line for line (a test checks it): copy each example's new text into
# the ```cpp block after its <!-- example: examples/NAME --> marker.
python3 - README.md docs/*.md <<'PY'
import re, sys
for page in sys.argv[1:]:
    text = open(page, encoding="utf-8").read()
    def block(m):
        src = open(m.group(2), encoding="utf-8").read()
        return m.group(1) + src + ("" if src.endswith("\n") else "\n") + "```"
    new = re.sub(r"(<!-- example: (examples/[\w.]+) -->\n```cpp\n)(.*?)```", block, text, flags=re.S)
    if new != text:
        open(page, "w", encoding="utf-8").write(new)
        print(f"format.sh: {page}: examples copied")
PY
echo "format.sh: formatted ${#files[@]} files"
