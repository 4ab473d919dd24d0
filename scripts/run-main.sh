#!/usr/bin/env bash
# The README's main command: installs what is missing, builds the main job (Release, Ninja, ccache)
# and runs it. Extra arguments are passed on to the program (later ones win: --steps 400).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$DP_ROOT"
BUILD_DIR=${DP_BUILD_DIR:-build}

# The main job: the program's path inside the build folder (its file name is its CMake target),
# then its arguments. dp-train: the CNN on Fashion-MNIST with DataParallel over every CPU core
# (every GPU where there are some), its defaults (Adam lr 1e-3, cosine decay, batch 128, 5 epochs)
# chosen to pass 0.90 test accuracy; exit status 1 if it does not. Stopped with Ctrl-C, it leaves a
# checkpoint: `bash scripts/run-main.sh --resume build/dp-train-checkpoint` continues it.
MAIN_JOB=(tools/dp-train --model cnn --data fashion-mnist --devices auto --min-accuracy 0.90
          --checkpoint-dir "$BUILD_DIR/dp-train-checkpoint" --log "$BUILD_DIR/dp-train-cnn.jsonl" --plot "$BUILD_DIR/dp-train-cnn.svg")

dp_install_deps
dp_build "$BUILD_DIR" -- "$(basename "${MAIN_JOB[0]}")"
echo "== run-main.sh: $BUILD_DIR/${MAIN_JOB[*]} $*"
exec "$BUILD_DIR/${MAIN_JOB[0]}" "${MAIN_JOB[@]:1}" "$@"
