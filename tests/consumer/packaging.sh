#!/usr/bin/env bash
# The packaging test (Install.Packaging, label install, registered by cmake/InstallTests.cmake):
# builds dparallel once more, as the Debian package is built (docs/getting-started.md): a shared
# library, portable (-DDP_NATIVE=OFF: x86-64 code, hot loops dispatched at run time), without CUDA,
# with the tools and without tests, benchmarks and examples. None of that is built by the rest of
# the suite. Then:
#
#  a. exports: every symbol `nm -D --defined-only libdparallel.so` lists is dparallel's:
#       - an entity of namespace dp (function, variable, typeinfo, vtable, VTT, guard variable,
#         thunk, or a local entity of a dp function such as a lambda's operator(); a template
#         instantiation demangles with its return type first, so then the mangled name decides:
#         _ZN2dp..., _ZZN2dp... for a local entity), or
#       - a template instantiation of the standard library (std::, __gnu_cxx::) over dp types:
#         vague linkage (nm type W, V or u) and a demangled name naming dp::. cmake/dparallel.map
#         keeps these (its "*?dp::*" pattern must, for dp functions whose return type comes first);
#         they are the instantiations a consumer's own code would make the same way.
#     Anything else (a non-C++ symbol, a std:: symbol not over dp types, nlohmann::, gloo::, fmt::,
#     a symbol of the global namespace) fails.
#  b. cmake --install into a prefix; the consumer (tests/consumer) with find_package against it,
#     run with the shared library (the consumer's build RPATH), checked with ldd.
#  c. cpack -G DEB: `dpkg-deb -I` names the run-time libraries in Depends (dpkg-shlibdeps: OpenBLAS,
#     Gloo, zlib, libstdc++) and no CUDA or -dev package; `dpkg-deb -c` lists the library, the
#     headers with the generated dp/config.h, the CMake package, dparallel.pc and usr/bin/dp-train.
#     The package is extracted (dpkg-deb -x) and used from there: the consumer with find_package
#     (CMAKE_PREFIX_PATH=<dir>/usr, LD_LIBRARY_PATH), the consumer compiled with nothing but
#     -I<dir>/usr/include -ldparallel (no -DDP_HAVE_CUDA: dp/config.h must give it), and
#     dp-train --help and dp-run --help (found through their RPATH $ORIGIN/../lib alone). The
#     package has no CUDA library, and find_package(dparallel COMPONENTS cuda) against it fails,
#     saying that dparallel was built without the CUDA backend.
#  d. the consumer's numbers (losses after one step and after 50 SGD steps) agree with those of
#     the consumer that Install.FindPackage built against this build (native, static, maybe CUDA:
#     DP_NATIVE_CONSUMER) within a relative 1e-4.
#
#   packaging.sh BUILD SRC WORK
# Environment (set by the test): DP_CXX, DP_GENERATOR, DP_LAUNCHER (ccache or empty), DP_JOBS,
# DP_NATIVE_CONSUMER (the Install.FindPackage consumer program; the comparison is skipped, saying
# so, if it is missing). Needs no network.
set -euo pipefail
build=$1 src=$2 work=$3
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
rm -rf "$work"
mkdir -p "$work"
start=$SECONDS
step() { echo "== packaging ($((SECONDS - start)) s): $*"; }
fail() { echo "packaging: FAILED: $*" >&2; exit 1; }
launcher=()
[[ -n "${DP_LAUNCHER:-}" ]] && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER="$DP_LAUNCHER")
jobs=${DP_JOBS:-2}
pkg=$work/build

# --- the Debian package's configuration, built once --------------------------------------------
step "configure and build $pkg (shared, DP_NATIVE=OFF, DP_WITH_CUDA=OFF, tools only)"
cmake -S "$src" -B "$pkg" -G "$DP_GENERATOR" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER="$DP_CXX" \
  "${launcher[@]}" -DBUILD_SHARED_LIBS=ON -DDP_NATIVE=OFF -DDP_WITH_CUDA=OFF \
  -DDP_BUILD_TESTS=OFF -DDP_BUILD_BENCH=OFF -DDP_BUILD_EXAMPLES=OFF -DDP_BUILD_TOOLS=ON -DDP_INSTALL=ON \
  >"$work/configure.log" 2>&1 || { cat "$work/configure.log"; fail "configure"; }
grep -E "dparallel: (portable build|CUDA backend)" "$work/configure.log"
grep -q "dparallel: CUDA backend OFF" "$work/configure.log" || fail "the package build has CUDA"
build_start=$SECONDS
cmake --build "$pkg" -j "$jobs" >"$work/build.log" 2>&1 || { tail -50 "$work/build.log"; fail "build"; }
echo "built $(grep -c 'Building' "$work/build.log" || true) objects in $((SECONDS - build_start)) s"

# --- a. what libdparallel.so exports ------------------------------------------------------------
lib=$(find "$pkg" -maxdepth 1 -name 'libdparallel.so.*.*.*' -type f | head -1)
[[ -n "$lib" ]] || fail "no libdparallel.so.X.Y.Z in $pkg"
step "exports of $(basename "$lib")"
nm -D --defined-only "$lib" | awk 'NF == 3 { print $2 "\t" $3 }' >"$work/exports.raw"
cut -f2 "$work/exports.raw" | c++filt >"$work/exports.demangled"
paste "$work/exports.raw" "$work/exports.demangled" | awk -F'\t' -v out="$work/exports.report" '
  {
    type = $1; m = $2; d = $3; rest = d
    sub(/^(typeinfo name for |typeinfo for |vtable for |VTT for |construction vtable for |guard variable for |non-virtual thunk to |virtual thunk to |covariant return thunk to |TLS init function for |TLS wrapper function for )/, "", rest)
    if (m !~ /^_Z/) {
      bad[++nbad] = type " " d " (not a C++ symbol)"
    } else if (rest ~ /^dp::/ || m ~ /^_ZZ?N[rVKRO]*2dp/) {
      ndp++
    } else if ((rest ~ /^(std|__gnu_cxx)::/ || m ~ /^_ZZ?(N[rVKRO]*)?(St|9__gnu_cxx)/) && d ~ /dp::/ && type ~ /^[WVu]$/) {
      if (++nstd <= 3) example[nstd] = d
    } else {
      bad[++nbad] = type " " d
    }
  }
  END {
    printf "%d exported symbols: %d of namespace dp, %d std instantiations over dp types (weak), %d others\n", NR, ndp, nstd, nbad
    for (i = 1; i <= nstd && i <= 3; i++) printf "  e.g. %s\n", substr(example[i], 1, 150)
    for (i = 1; i <= nbad; i++) { print "  not dparallel'"'"'s: " bad[i]; print bad[i] > out }
    exit (nbad > 0 || ndp == 0)
  }' || fail "libdparallel.so exports symbols outside namespace dp (list: $work/exports.report)"

# --- b. installed into a prefix, used with find_package -----------------------------------------
step "cmake --install + find_package consumer"
DP_BUILD_TYPE=Release bash "$here/run.sh" package "$pkg" "$src" "$work/package" | tee "$work/package.out"
grep -q "^consumer loads $work/package/prefix/.*libdparallel\.so" "$work/package.out" ||
  fail "the consumer does not load libdparallel.so from the install prefix"

# --- c. the Debian package ----------------------------------------------------------------------
step "cpack -G DEB"
(cd "$pkg" && cpack -G DEB) >"$work/cpack.log" 2>&1 || { cat "$work/cpack.log"; fail "cpack -G DEB"; }
deb=$(find "$pkg" -maxdepth 1 -name 'dparallel_*.deb' | head -1)
[[ -n "$deb" ]] || fail "cpack wrote no dparallel_*.deb"
depends=$(dpkg-deb -f "$deb" Depends)
echo "$(basename "$deb"), $(du -k "$deb" | cut -f1) KiB; Depends: $depends"
for want in libopenblas libgloo zlib1g 'libstdc\+\+6' libc6; do
  grep -Eq "(^|[ ,|])$want" <<<"$depends" || fail "Depends does not name $want"
done
grep -Eqi "cuda|cudnn|nccl|-dev" <<<"$depends" && fail "Depends names CUDA or a -dev package: $depends"
dpkg-deb -I "$deb" >"$work/deb-info.txt"
dpkg-deb -c "$deb" | awk '{ print $6 }' >"$work/deb-contents.txt"
for want in '\./usr/lib/(.*/)?libdparallel\.so\.[0-9]+\.[0-9]+\.[0-9]+' '\./usr/lib/(.*/)?libdparallel\.so' \
  '\./usr/include/dp/config\.h' '\./usr/include/dp/dp\.h' '\./usr/include/dp/autograd/node\.h' \
  '\./usr/lib/(.*/)?cmake/dparallel/dparallelConfig\.cmake' '\./usr/lib/(.*/)?cmake/dparallel/dparallelTargets\.cmake' \
  '\./usr/lib/(.*/)?pkgconfig/dparallel\.pc' '\./usr/bin/dp-train' '\./usr/bin/dp-run'; do
  grep -Eq "^$want\$" "$work/deb-contents.txt" || fail "the package does not contain ${want//\\/}"
done
echo "contents: $(wc -l <"$work/deb-contents.txt") entries, $(grep -c '^\./usr/include/dp/.*\.h$' "$work/deb-contents.txt") headers, library, CMake package, dparallel.pc, dp-train, dp-run"

step "the extracted package"
root=$work/root
dpkg-deb -x "$deb" "$root"
libdir=$(dirname "$(find "$root/usr/lib" -name 'libdparallel.so' | head -1)")
grep -q '^#define DP_CONFIG_HAVE_CUDA 0$' "$root/usr/include/dp/config.h" || fail "usr/include/dp/config.h does not say DP_CONFIG_HAVE_CUDA 0"
grep -q '^prefix=/usr$' "$(find "$root/usr/lib" -name dparallel.pc | head -1)" || fail "dparallel.pc's prefix is not /usr"
LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" DP_BUILD_TYPE=Release \
  bash "$here/run.sh" prefix "$root/usr" "$src" "$work/extracted" | tee "$work/extracted.out"
grep -q "^consumer loads $root/" "$work/extracted.out" || fail "the consumer does not load the extracted libdparallel.so"
grep -q 'libdparallel_cuda' "$work/deb-contents.txt" && fail "the package of a build without CUDA contains libdparallel_cuda"
if cmake -S "$here" -B "$work/require-cuda" -G "$DP_GENERATOR" -DCMAKE_CXX_COMPILER="$DP_CXX" -DDP_CONSUMER_MODE=package \
  -DDP_CONSUMER_REQUIRE_CUDA=ON -DCMAKE_PREFIX_PATH="$root/usr" -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF >"$work/require-cuda.log" 2>&1; then
  fail "find_package(dparallel COMPONENTS cuda) succeeded against a package without CUDA"
fi
grep -q "built without the CUDA backend" "$work/require-cuda.log" || { cat "$work/require-cuda.log"; fail "find_package(dparallel COMPONENTS cuda) failed without saying why"; }
echo "find_package(dparallel COMPONENTS cuda) against the package: refused, dparallel was built without the CUDA backend"
# A consumer that knows nothing of dparallel's macros: the include directory and the library only.
${DP_LAUNCHER:-} "$DP_CXX" -std=c++20 -O2 "$here/main.cpp" -o "$work/plain-consumer" \
  -I"$root/usr/include" -L"$libdir" -ldparallel -pthread
echo "plain -I/-l consumer:"
LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$work/plain-consumer" | tee "$work/plain.out"
for tool in dp-train dp-run; do
  # No LD_LIBRARY_PATH: the program finds the library through its RPATH ($ORIGIN/../lib).
  loads=$(ldd "$root/usr/bin/$tool" | awk '$1 ~ /^libdparallel\.so/ { print $3 }')
  [[ "$loads" == "$root/"* ]] || fail "extracted $tool loads libdparallel.so from '$loads', not from the package"
  "$root/usr/bin/$tool" --help >"$work/$tool-help.txt" 2>&1 || { cat "$work/$tool-help.txt"; fail "$tool --help"; }
  echo "$tool --help: $(head -1 "$work/$tool-help.txt") ($(wc -l <"$work/$tool-help.txt") lines; loads $loads)"
done
grep -q -- "--model" "$work/dp-train-help.txt" || fail "dp-train --help does not list --model"

# --- d. the same numbers as the native build ----------------------------------------------------
step "portable against native"
numbers() { grep -E '^(output|loss after)' "$1" | grep -oE '[0-9]+\.[0-9]+'; }
native=${DP_NATIVE_CONSUMER:-}
if [[ -z "$native" || ! -x "$native" ]]; then
  echo "no native consumer program ('$native': Install.FindPackage builds it); comparison skipped"
else
  "$native" >"$work/native.out" || fail "the native consumer failed"
  for out in package extracted plain; do
    paste <(numbers "$work/native.out") <(numbers "$work/$out.out") | awk -v what="$out" '
      function abs(x) { return x < 0 ? -x : x }
      { n++; d = abs($1 - $2); m = abs($1) > abs($2) ? abs($1) : abs($2)
        if (d > 1e-4 * m + 1e-6) { printf "  %s: %s against native %s\n", what, $2, $1; bad++ }
        if (m > 0 && d / m > worst) worst = d / m }
      END { if (n < 4) { print "  " what ": only " n " numbers"; exit 1 }
            printf "%s: %d numbers as the native build'"'"'s (largest relative difference %.2g)\n", what, n, worst
            exit (bad > 0) }' || fail "the portable build's numbers differ from the native build's"
  done
fi
echo "packaging: ok in $((SECONDS - start)) s"
