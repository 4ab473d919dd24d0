#!/usr/bin/env bash
# The install tests (label install, registered by cmake/InstallTests.cmake): dparallel used by
# another project, several ways. Each builds tests/consumer/main.cpp in a fresh folder and runs it.
#
#   run.sh package       BUILD  SRC WORK  cmake --install BUILD into WORK/prefix, then the consumer
#                                         with find_package(dparallel) (CMAKE_PREFIX_PATH)
#   run.sh prefix        PREFIX SRC WORK  the same against a prefix that is already there (an
#                                         extracted Debian package: tests/consumer/packaging.sh)
#   run.sh pkgconfig     BUILD  SRC WORK  cmake --install as for package, the consumer compiled by
#                                         hand with pkg-config --cflags --libs dparallel
#   run.sh subdir        BUILD  SRC WORK  the consumer with add_subdirectory(SRC): builds the library
#                                         a second time, with BUILD's settings (ccache serves re-runs)
#   run.sh fetchcontent  BUILD  SRC WORK  the same with FetchContent_Declare(SOURCE_DIR SRC) and
#                                         FetchContent_MakeAvailable
#
# Environment (set by the test): DP_CXX, DP_GENERATOR, DP_BUILD_TYPE, DP_CMAKE_ARGS (;-list of
# -D options the subdir and fetchcontent builds repeat), DP_CUDA_ARCHITECTURES (the build's CUDA
# architectures, comma-separated), DP_LAUNCHER (ccache or empty), DP_JOBS.
# Needs no network.
set -euo pipefail
mode=$1 build=$2 src=$3 work=$4
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
rm -rf "$work"
mkdir -p "$work"
launcher=()
[[ -n "${DP_LAUNCHER:-}" ]] && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER="$DP_LAUNCHER")

install_prefix() {  # the library's components only: the tools need not be built for these tests
  for c in dev lib; do
    cmake --install "$build" --prefix "$work/prefix" --component "$c" >"$work/install-$c.log"
  done
  echo "installed into $work/prefix:"
  (cd "$work/prefix" && find . -type f -not -path "./include/*" | sort | sed 's/^/  /')
  echo "  + $(find "$work/prefix/include" -name '*.h' | wc -l) headers under include/dp"
}

# consumer MODE [cmake -D options...]: configures tests/consumer in WORK/consumer, builds and runs it.
consumer() {
  local cmode=$1
  shift
  cmake -S "$here" -B "$work/consumer" -G "$DP_GENERATOR" -DCMAKE_BUILD_TYPE="$DP_BUILD_TYPE" \
    -DCMAKE_CXX_COMPILER="$DP_CXX" "${launcher[@]}" -DDP_CONSUMER_MODE="$cmode" "$@" \
    >"$work/configure.log" 2>&1 || { cat "$work/configure.log"; exit 1; }
  grep "consumer: dparallel" "$work/configure.log" || true
  cmake --build "$work/consumer" -j "${DP_JOBS:-2}" >"$work/build.log" 2>&1 || { cat "$work/build.log"; exit 1; }
  if [[ "$cmode" != package ]]; then
    echo "built $(grep -c 'Building' "$work/build.log" || true) objects (library and consumer)"
  fi
  # A shared libdparallel: say which file the program loads (its build RPATH, or LD_LIBRARY_PATH).
  local so
  so=$(ldd "$work/consumer/consumer" | awk '$1 ~ /^libdparallel\.so/ { print $3 }')
  [[ -n "$so" ]] && echo "consumer loads $so"
  "$work/consumer/consumer"
}

start=$SECONDS
case "$mode" in
  package)
    install_prefix
    consumer package -DCMAKE_PREFIX_PATH="$work/prefix" -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF
    ;;
  prefix)
    consumer package -DCMAKE_PREFIX_PATH="$build" -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF
    ;;
  pkgconfig)
    install_prefix
    pc_dir=$(dirname "$(find "$work/prefix" -name dparallel.pc | head -1)")
    export PKG_CONFIG_PATH="$pc_dir"
    flags=$(pkg-config --cflags --libs dparallel)
    echo "pkg-config --cflags --libs dparallel: $flags"
    # shellcheck disable=SC2086  # the flags are words
    ${DP_LAUNCHER:-} "$DP_CXX" -std=c++20 -O2 "$here/main.cpp" -o "$work/consumer" $flags
    LD_LIBRARY_PATH="$(pkg-config --variable=libdir dparallel)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$work/consumer"
    ;;
  subdir | fetchcontent)
    IFS=';' read -r -a extra <<<"${DP_CMAKE_ARGS:-}"
    # ccache is left as the build found it. Without a base_dir (a clean CI machine has no
    # ccache.conf), every compile names the sources by the same absolute paths, so ccache's
    # preprocessor mode serves both modes every library object the main build compiled: the
    # command lines differ only in -I of the generated include folder and in -o, which that mode
    # does not hash. With a base_dir the paths become relative to the compiler's folder: the two
    # modes' folders have the same depth and share with each other, not with the main build.
    # DP_CUDA_ARCHITECTURES: the main build's CMAKE_CUDA_ARCHITECTURES, commas for semicolons.
    [[ -n "${DP_CUDA_ARCHITECTURES:-}" ]] && extra+=(-DCMAKE_CUDA_ARCHITECTURES="${DP_CUDA_ARCHITECTURES//,/;}")
    consumer "$mode" -DDP_SOURCE_DIR="$src" "${extra[@]}"
    ;;
  *) echo "run.sh: unknown mode $mode" >&2; exit 2 ;;
esac
echo "run.sh $mode: $((SECONDS - start)) s"
