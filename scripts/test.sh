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
# core, backend, autograd and ops): a Debug build without CUDA in build-asan-quick, its tests run
# under the sanitizers with scripts/sanitize.sh's options. Any report fails the test that made it.
# Opt-in for now (DP_SANITIZE_QUICK=1): clean on 2026-11-29 (1300 tests, 218 s to run), it joins
# CI's run once its cold build time is measured to fit CI's.
if [[ "${DP_SANITIZE_QUICK:-0}" == 1 ]]; then
  san_start=$SECONDS
  san_dir="${BUILD_DIR}-asan-quick"
  if dp_build "$san_dir" -DDP_SANITIZE=address -DCMAKE_BUILD_TYPE=Debug -DDP_WITH_CUDA=OFF -DDP_BUILD_BENCH=OFF -DDP_BUILD_EXAMPLES=OFF \
      -DDP_INSTALL=OFF -- sanitize_quick; then
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
