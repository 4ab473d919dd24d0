#!/usr/bin/env bash
# The README's main command: installs what is missing, builds the main job (Release, Ninja, ccache)
# and runs it. Extra arguments are passed on to the program (later ones win: --steps 400).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$DP_ROOT"
BUILD_DIR=${DP_BUILD_DIR:-build}

# The main job: the program's path inside the build folder (its file name is its CMake target),
# then its arguments. Until DataParallel and dp-train land it is the hand-made two-device example;
# switching to dp-train is this one line.
MAIN_JOB=(examples/train_two_devices --devices cpu:0,cpu:1 --steps 200 --lr 0.1)

dp_install_deps
dp_build "$BUILD_DIR" -- "$(basename "${MAIN_JOB[0]}")"
echo "== run-main.sh: $BUILD_DIR/${MAIN_JOB[*]} $*"
exec "$BUILD_DIR/${MAIN_JOB[0]}" "${MAIN_JOB[@]:1}" "$@"
