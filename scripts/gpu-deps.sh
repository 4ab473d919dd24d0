#!/usr/bin/env bash
# Run HERE (the development machine), before using a lent GPU machine: downloads the Debian
# packages dparallel builds against (OpenBLAS, GoogleTest, nlohmann-json, zlib headers, CLI11, fmt,
# Google Benchmark) into .gpudeps/, which is git-ignored and travels to the GPU machine with
# `carry: [".gpudeps"]`. That machine's image has nvcc, CMake, ninja and PyTorch but none of these,
# and reaches no package registry. scripts/gpu-check.sh unpacks them there (about 14 MB).
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .gpudeps
cd .gpudeps
apt-get download libopenblas-dev libopenblas-pthread-dev libopenblas0-pthread libopenblas0 libgfortran5 \
  libgtest-dev libgmock-dev nlohmann-json3-dev zlib1g-dev libcli11-dev libfmt-dev libfmt9 \
  libbenchmark-dev libbenchmark1debian
ls -la
