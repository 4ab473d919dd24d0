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
dp_build "$BUILD_DIR"
built=$SECONDS
echo "== test.sh: built in $((built - start)) s; running the test suite"
rc=0
ctest --test-dir "$BUILD_DIR" --output-on-failure -j2 || rc=$?
echo "== test.sh: ctest exit status $rc; build $((built - start)) s, tests $((SECONDS - built)) s"
exit "$rc"
