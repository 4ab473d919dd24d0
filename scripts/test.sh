#!/usr/bin/env bash
# The README's test command: installs what is missing, builds everything (Release, Ninja, ccache)
# and runs the whole test suite with ctest. Exit status: ctest's (or the build's, if it fails).
#
#   bash scripts/test.sh                 # build folder: build/
#   DP_BUILD_DIR=build-x bash scripts/test.sh
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$DP_ROOT"
BUILD_DIR=${DP_BUILD_DIR:-build}

start=$SECONDS
dp_install_deps
# Without a GPU nothing runs the CUDA kernels: they are compiled for one architecture (sm_90 and
# its PTX), which checks them as well and saves about a quarter of their compile time. With a GPU,
# for every architecture the build supports (cmake/Cuda.cmake).
cuda_args=()
if ! nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
  cuda_args=(-DCMAKE_CUDA_ARCHITECTURES=90)
fi
dp_build "$BUILD_DIR" -DDP_WERROR=ON "${cuda_args[@]}"
built=$SECONDS
echo "== test.sh: built in $((built - start)) s; running the test suite"
rc=0
ctest --test-dir "$BUILD_DIR" --output-on-failure -j2 || rc=$?
echo "== test.sh: ctest exit status $rc; build $((built - start)) s, tests $((SECONDS - built)) s"

# When the main build compiled the CUDA backend, a second, smaller build without it: the library,
# the tools and the test programs whose behaviour depends on CUDA being compiled in
# (tests/CMakeLists.txt, cuda_off_checks), so a CUDA-only #if cannot break the CPU-only build.
if [[ "${DP_SKIP_CUDA_OFF:-0}" != 1 ]] && grep -q "^#define DP_CONFIG_HAVE_CUDA 1" "$BUILD_DIR/include/dp/config.h" 2>/dev/null; then
  off_start=$SECONDS
  off_dir="${BUILD_DIR}-nocuda"
  dp_build "$off_dir" -DDP_WERROR=ON -DDP_WITH_CUDA=OFF -- cuda_off_checks || rc=1
  while read -r t; do
    [[ -n "$t" ]] || continue
    "$off_dir/tests/$t" --gtest_brief=1 || { echo "== test.sh: $t failed in the build without CUDA"; rc=1; }
  done < "$off_dir/tests/cuda_off_tests.txt"
  echo "== test.sh: build without CUDA and its tests: $((SECONDS - off_start)) s"
fi

# ASan + UBSan on the quick suite (tests/CMakeLists.txt, sanitize_quick: the test programs of
# core, backend, autograd and ops: the kernels, the tensors, the engine and its threads): a Debug
# build without CUDA in build-asan-quick, compiled -Og -g1 (DP_SANITIZE_OPT: about the cost of a
# Release compile, where scripts/sanitize.sh's -O1 -g costs 2.3 times as much), its tests run under
# the sanitizers with scripts/sanitize.sh's options. Any report fails the test that made it.
#
# When. DP_SANITIZE_QUICK=1: always; 0: never; unset (CI's case): when the run so far leaves it
# room within CI's 50-minute target. Its own objects are ccache misses until it has run once (a
# cold stage: SAN_COLD_MIN minutes of build and tests on a 2-core machine; measured on 2026-11-29
# from an empty ccache: 1001 s of build and 206 s of tests), so it starts only if at
# most DP_SANITIZE_QUICK_START_BY minutes (50 less that) have passed. A run whose every compile is a
# miss reaches this point later and leaves the stage out, saying so; a run with the main build in
# ccache (CI's usual case) runs it, and from then on its objects are cached too.
SAN_COLD_MIN=20
start_by=${DP_SANITIZE_QUICK_START_BY:-$((50 - SAN_COLD_MIN))}
elapsed_min=$(((SECONDS - start) / 60))
run_san=${DP_SANITIZE_QUICK:-auto}
if [[ "$run_san" == auto ]]; then
  if ((elapsed_min <= start_by)); then
    run_san=1
  else
    run_san=0
    echo "== test.sh: the ASan + UBSan quick suite is left out of this run: ${elapsed_min} min have passed, more than the" \
      "${start_by} that leave its cold build and tests (about ${SAN_COLD_MIN} min) room in CI's 50. DP_SANITIZE_QUICK=1 runs it anyway."
  fi
fi
if [[ "$run_san" == 1 ]]; then
  san_start=$SECONDS
  san_dir="${BUILD_DIR}-asan-quick"
  if dp_build "$san_dir" -DDP_WERROR=ON -DDP_SANITIZE=address "-DDP_SANITIZE_OPT=-Og;-g1" -DCMAKE_BUILD_TYPE=Debug -DDP_WITH_CUDA=OFF \
      -DDP_BUILD_BENCH=OFF -DDP_BUILD_EXAMPLES=OFF -DDP_INSTALL=OFF -- sanitize_quick; then
    san_built=$SECONDS
    ASAN_OPTIONS="$DP_ASAN_OPTIONS" UBSAN_OPTIONS="$DP_UBSAN_OPTIONS" \
      ctest --test-dir "$san_dir" --output-on-failure -j2 -L "$(cat "$san_dir/tests/sanitize_quick_labels.txt")" -LE "fuzz|compile_fail|lint|long" || rc=1
    echo "== test.sh: ASan + UBSan quick suite: build $((san_built - san_start)) s, tests $((SECONDS - san_built)) s"
  else
    echo "== test.sh: the ASan + UBSan build failed"
    rc=1
  fi
fi
exit "$rc"
