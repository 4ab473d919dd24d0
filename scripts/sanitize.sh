#!/usr/bin/env bash
# Builds the tests and examples with sanitizers and runs the whole suite under them, then the
# two-device training example (workers and the backward engine under real concurrency).
#
#   bash scripts/sanitize.sh address   # ASan + UBSan, build folder build-asan/
#   bash scripts/sanitize.sh thread    # TSan,         build folder build-tsan/
#   bash scripts/sanitize.sh thread -R engine   # extra arguments go to ctest
#
# Any report stops the test that made it (halt_on_error) and fails the run. TSan reads
# scripts/tsan-suppressions.txt, which silences only reports with an (uninstrumented) OpenBLAS
# frame: its worker threads synchronise in ways TSan cannot see. Options already in ASAN_OPTIONS / UBSAN_OPTIONS /
# TSAN_OPTIONS are appended after these (later ones win).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$DP_ROOT"

mode=${1:-}
case "$mode" in
  address) default_dir=build-asan ;;
  thread) default_dir=build-tsan ;;
  *) echo "usage: bash scripts/sanitize.sh address|thread [ctest arguments...]" >&2; exit 2 ;;
esac
shift
BUILD_DIR=${DP_BUILD_DIR:-$default_dir}

# protect_shadow_gap=0: with the CUDA backend built, the CUDA driver maps memory where ASan's
# protected shadow gap lies, and cudart then fails to initialise on a GPU machine (reported as no
# device or out of memory); harmless without CUDA. allocator_may_return_null=1: a failed allocation
# returns null (the library's OutOfMemory) instead of aborting, so the tests of running out of memory
# (IdxHostile.OutOfMemoryNamesTheFile) run under ASan instead of skipping.
# (scripts/common.sh: DP_ASAN_OPTIONS, DP_UBSAN_OPTIONS, which scripts/test.sh's quick sanitizer run uses too)
export ASAN_OPTIONS="$DP_ASAN_OPTIONS${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export UBSAN_OPTIONS="$DP_UBSAN_OPTIONS${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$DP_ROOT/scripts/tsan-suppressions.txt${TSAN_OPTIONS:+:$TSAN_OPTIONS}"

start=$SECONDS
dp_install_deps
# Debug: assertions on; cmake/Sanitizers.cmake adds -O1 -g and the -fsanitize flags. The test
# programs are run once at build time too (gtest_discover_tests), under the options above.
dp_build "$BUILD_DIR" -DDP_SANITIZE="$mode" -DCMAKE_BUILD_TYPE=Debug -DDP_BUILD_BENCH=OFF -DDP_BUILD_EXAMPLES=ON
built=$SECONDS
echo "== sanitize.sh $mode: built in $((built - start)) s; running the test suite"
rc=0
ctest --test-dir "$BUILD_DIR" --output-on-failure -j2 "$@" || rc=$?
echo "== sanitize.sh $mode: running the two-device training example"
"$BUILD_DIR/examples/train_two_devices" --devices cpu:0,cpu:1 || rc=$((rc ? rc : $?))
echo "== sanitize.sh $mode: exit status $rc; build $((built - start)) s, run $((SECONDS - built)) s"
exit "$rc"
