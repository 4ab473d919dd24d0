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
# Each mode builds the program twice where the library has the CUDA backend: `consumer`, linked
# with dparallel alone, and `consumer_cuda`, the same source linked with the CUDA library too
# (dparallel::cuda; dparallel-cuda.pc). check_cuda below checks what each says of CUDA and which
# libraries it needs: a CPU-only program needs no CUDA library (readelf -d) and refers to no CUDA
# symbol (nm -D), and says why it has no CUDA device; the other has the backend (here: no GPU
# visible, so no device).
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
fail() { echo "run.sh $mode: FAILED: $*" >&2; exit 1; }

# check_cuda PROGRAM OUTPUT cpu|linked: what the program printed (OUTPUT) about CUDA, and what it
# links. cpu: no CUDA library among its needed libraries, no CUDA symbol among its undefined ones,
# the backend "not linked" and cuda:0's error saying why (dparallel::cuda not linked, or built
# without CUDA). linked: the CUDA runtime or libdparallel_cuda among its needed libraries, the
# backend linked, and either devices or "no GPU is visible".
check_cuda() {
  local prog=$1 out=$2 want=$3 built needed cuda_needed cuda_undefined line
  built=$(grep -oE 'DP_HAVE_CUDA=[01]' "$out" | cut -d= -f2)
  line=$(grep '^cuda: ' "$out") || fail "$(basename "$prog") printed no 'cuda:' line"
  needed=$(readelf -d "$prog" | awk '/\(NEEDED\)/ { gsub(/[][]/, "", $5); print $5 }')
  cuda_needed=$(grep -Ei 'cuda|cudnn|nccl|cublas' <<<"$needed" | tr '\n' ' ' || true)
  if [[ "$want" == cpu ]]; then
    [[ -z "$cuda_needed" ]] || fail "$(basename "$prog") links only dparallel but needs $cuda_needed"
    cuda_undefined=$(nm -D --undefined-only "$prog" | awk '{ print $NF }' | grep -Ei '^(cuda|cudnn|nccl|cublas)' | head -3 | tr '\n' ' ' || true)
    [[ -z "$cuda_undefined" ]] || fail "$(basename "$prog") refers to CUDA symbols: $cuda_undefined"
    grep -q '^cuda: backend not linked, 0 device(s), is_available no' <<<"$line" || fail "unexpected: $line"
    if [[ "$built" == 1 ]]; then
      grep -q "does not link dparallel's CUDA library, dparallel::cuda" <<<"$line" || fail "cuda:0's error does not say that dparallel::cuda is not linked: $line"
    else
      grep -q "built without the CUDA backend" <<<"$line" || fail "cuda:0's error does not say that dparallel was built without CUDA: $line"
    fi
  else
    grep -Eq '^(libcudart|libdparallel_cuda)\.so' <<<"$needed" || fail "$(basename "$prog") links dparallel::cuda but needs neither libcudart nor libdparallel_cuda: $(tr '\n' ' ' <<<"$needed")"
    grep -Eq '^cuda: backend linked, ([1-9][0-9]* device\(s\), is_available yes|0 device\(s\), is_available no; cuda:0 .*no GPU is visible)' <<<"$line" ||
      fail "unexpected: $line"
  fi
  echo "$(basename "$prog"): ok, needs $(tr '\n' ' ' <<<"$needed")"
}

# run_consumers DIR: runs DIR/consumer (and DIR/consumer_cuda where the library has CUDA), checks them.
run_consumers() {
  local dir=$1
  "$dir/consumer" | tee "$dir/consumer.out"
  check_cuda "$dir/consumer" "$dir/consumer.out" cpu
  if grep -q 'DP_HAVE_CUDA=1' "$dir/consumer.out"; then
    [[ -x "$dir/consumer_cuda" ]] || fail "the library has CUDA but the consumer got no dparallel::cuda to link"
    "$dir/consumer_cuda" | tee "$dir/consumer_cuda.out"
    check_cuda "$dir/consumer_cuda" "$dir/consumer_cuda.out" linked
    # The CUDA library changes nothing for a program on the CPU: the same numbers.
    diff <(grep -E '^(output|loss after)' "$dir/consumer.out") <(grep -E '^(output|loss after)' "$dir/consumer_cuda.out") >/dev/null ||
      fail "consumer and consumer_cuda print different numbers"
  fi
}

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
  run_consumers "$work/consumer"
}

start=$SECONDS
case "$mode" in
  package)
    install_prefix
    # With CUDA, the component is asked for (find_package(dparallel COMPONENTS cuda)).
    cuda_component=OFF
    grep -q '^#define DP_CONFIG_HAVE_CUDA 1$' "$work/prefix/include/dp/config.h" && cuda_component=ON
    consumer package -DCMAKE_PREFIX_PATH="$work/prefix" -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF -DDP_CONSUMER_REQUIRE_CUDA=$cuda_component
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
    mkdir -p "$work/pc"
    # shellcheck disable=SC2086  # the flags are words
    ${DP_LAUNCHER:-} "$DP_CXX" -std=c++20 -O2 "$here/main.cpp" -o "$work/pc/consumer" $flags
    if [[ -f "$pc_dir/dparallel-cuda.pc" ]]; then
      cuda_flags=$(pkg-config --cflags --libs dparallel-cuda)
      echo "pkg-config --cflags --libs dparallel-cuda: $cuda_flags"
      # shellcheck disable=SC2086  # the flags are words
      ${DP_LAUNCHER:-} "$DP_CXX" -std=c++20 -O2 "$here/main.cpp" -o "$work/pc/consumer_cuda" $cuda_flags
    fi
    LD_LIBRARY_PATH="$(pkg-config --variable=libdir dparallel)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" run_consumers "$work/pc"
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
