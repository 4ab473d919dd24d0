#!/usr/bin/env bash
# The API reference: Doxygen over include/dp/ (docs/Doxyfile), HTML into OUT/html (default OUT:
# build-docs/api). Installs Debian's doxygen if it is missing (with sudo when not root). Fails
# if Doxygen writes a single warning: they are printed, and OUT/warnings.log keeps them.
#
#   bash scripts/api-docs.sh [OUT]
set -euo pipefail
cd "$(dirname "$0")/.."

out=${1:-build-docs/api}
if ! command -v doxygen > /dev/null 2>&1; then
  echo "api-docs: installing doxygen (Debian package)"
  if [[ $(id -u) -eq 0 ]]; then SUDO=(); else SUDO=(sudo); fi
  "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends doxygen ||
    { "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q &&
      "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends doxygen; }
fi
command -v python3 > /dev/null 2>&1 || { echo "api-docs: python3 is needed by scripts/doxygen-filter.py" >&2; exit 1; }

mkdir -p "$out"
out=$(cd "$out" && pwd)
rm -rf "$out/html" "$out/warnings.log"
echo "api-docs: $(doxygen --version | head -1) over include/dp -> $out/html"
start=$(date +%s)
DP_API_OUT="$out" doxygen docs/Doxyfile
warnings=0
[[ -s "$out/warnings.log" ]] && warnings=$(grep -c . "$out/warnings.log")
if [[ $warnings -ne 0 ]]; then
  cat "$out/warnings.log" >&2
  echo "api-docs: $warnings warning line(s) (in $out/warnings.log); the reference must build without any" >&2
  exit 1
fi
echo "api-docs: 0 warnings, $(find "$out/html" -name '*.html' | wc -l) pages in $(( $(date +%s) - start )) s; open $out/html/index.html"
